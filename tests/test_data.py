#!/usr/bin/env python3
"""Tests for data/prepare.py (standard library only).

    python3 tests/test_data.py

Runs prepare.py through subprocess (with this interpreter) into a temporary directory and
reads the outputs back with its own small readers of the file formats. The KJV tests run the
real `bible` command (package bible-kjv). The last line printed is "N passed, N failed";
the exit status is 1 if any test failed.
"""

import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PREPARE = os.path.join(ROOT, "data", "prepare.py")
TMP = tempfile.mkdtemp(prefix="test_data_")

KJV_CHAPTERS = 1189


# ----------------------------------------------------------------------------
# Helpers

def run(args, env=None):
    """Run prepare.py with args; returns the CompletedProcess (text output)."""
    full_env = dict(os.environ)
    full_env.pop("PREPARE_DEBUG", None)
    full_env.update(env or {})
    return subprocess.run([sys.executable, PREPARE] + list(args), env=full_env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=120)


def run_ok(args, env=None):
    p = run(args, env)
    assert p.returncode == 0, "prepare.py %s failed (%d): %s" % (
        " ".join(args), p.returncode, p.stderr.strip())
    return p


def assert_clean_failure(p, *words):
    """Exit 1, exactly one line on stderr, no traceback, and the line mentions all words."""
    assert p.returncode == 1, "expected exit 1, got %d (stderr: %r)" % (p.returncode, p.stderr)
    lines = p.stderr.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0], "expected one stderr line, got %r" % p.stderr
    assert "Traceback" not in p.stderr + p.stdout, "traceback printed: %r" % p.stderr
    for w in words:
        assert w in lines[0], "%r not in error line %r" % (w, lines[0])


def read_shard(path):
    """Returns (header ints, tokens) and checks the header against the file size."""
    with open(path, "rb") as f:
        data = f.read()
    header = struct.unpack("<256i", data[:1024])
    assert header[0] == 20240520, "%s: bad magic %d" % (path, header[0])
    assert header[1] == 1, "%s: bad version %d" % (path, header[1])
    assert all(v == 0 for v in header[4:]), "%s: header[4:] not zero" % path
    n = header[2]
    assert len(data) == 1024 + 2 * n, "%s: header says %d tokens, file has %d bytes" % (
        path, n, len(data))
    tokens = struct.unpack("<%dH" % n, data[1024:])
    return header, tokens


def read_tokenizer(path):
    """Returns (header ints, list of token byte strings); checks the whole file parses."""
    with open(path, "rb") as f:
        data = f.read()
    header = struct.unpack("<256i", data[:1024])
    assert header[0] == 20240328 and header[1] == 2, "%s: bad magic/version" % path
    assert all(v == 0 for v in header[4:]), "%s: header[4:] not zero" % path
    pieces, pos = [], 1024
    for _ in range(header[2]):
        length = data[pos]
        assert length >= 1, "%s: empty token" % path
        pieces.append(data[pos + 1:pos + 1 + length])
        pos += 1 + length
    assert pos == len(data), "%s: trailing bytes after the last token" % path
    return header, pieces


def decode(tokens, pieces):
    for t in tokens:
        assert t < len(pieces), "token %d out of range %d" % (t, len(pieces))
    return b"".join(pieces[t] for t in tokens)


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def write_file(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return path


_kjv_dir = None


def kjv_dir():
    """Prepare kjv once (into TMP/kjv) and share it between the tests."""
    global _kjv_dir
    if _kjv_dir is None:
        assert shutil.which("bible"), "the 'bible' command is missing (apt-get install bible-kjv)"
        out = os.path.join(TMP, "kjv")
        run_ok(["kjv", "--out", out])
        _kjv_dir = out
    return _kjv_dir


def expected_kjv_chapters():
    """The cleaned text, parsed here independently: {"Book C": ["Book C:V text", ...]}."""
    raw = subprocess.run(["bible", "-l0", "Gen1:1-Rev22:21"], stdout=subprocess.PIPE,
                         check=True).stdout.decode("utf-8")
    chapters, order, ref = {}, [], None
    for line in raw.split("\n"):
        if not line.strip():
            continue
        if line.startswith(" "):                     # "  V verse text"
            verse, text = line.split(None, 1)
            chapters[ref].append("%s:%s %s" % (ref, verse, " ".join(text.split())))
        else:                                        # "Book C"
            ref = line.strip()
            order.append(ref)
            chapters[ref] = []
    return chapters, order


def lines_by_chapter(text):
    """Decoded shard text ("\\nline\\nline...") -> ordered {"Book C": [lines]}."""
    assert text.startswith("\n"), "shard does not start with the eot '\\n'"
    grouped = {}
    for line in text[1:].split("\n"):
        # each line starts with "Book C:V " (Book may contain spaces: "Song of Solomon")
        grouped.setdefault(line[:line.index(":")], []).append(line)
    return grouped


def parse_addition(path_shard, pieces):
    _, tokens = read_shard(path_shard)
    text = decode(tokens, pieces).decode("ascii")
    assert text.startswith("\n"), "addition shard does not start with eot"
    problems = []
    for line in text[1:].split("\n"):
        lhs, c = line.split("=")
        a, b = lhs.split("+")
        problems.append((a, b, c))
    return problems


# ----------------------------------------------------------------------------
# KJV

def test_kjv_headers_and_tokenizer():
    out = kjv_dir()
    for split in ("train", "val"):
        header, tokens = read_shard(os.path.join(out, "kjv_%s.bin" % split))
        assert header[3] == 256, "vocab %d, expected 256" % header[3]
        assert max(tokens) < 256
        assert tokens[0] == 10, "shard does not start with eot 10"
    header, pieces = read_tokenizer(os.path.join(out, "kjv_tokenizer.bin"))
    assert header[2] == 256 and header[3] == 10, "tokenizer header %r" % (header[:4],)
    assert pieces == [bytes([i]) for i in range(256)], "byte tokenizer pieces are not id=byte"


def test_kjv_round_trip_and_split():
    out = kjv_dir()
    _, pieces = read_tokenizer(os.path.join(out, "kjv_tokenizer.bin"))
    expected, order = expected_kjv_chapters()
    assert len(order) == KJV_CHAPTERS, "bible printed %d chapters" % len(order)
    got, sizes = {}, {}
    for split in ("train", "val"):
        _, tokens = read_shard(os.path.join(out, "kjv_%s.bin" % split))
        sizes[split] = len(tokens)
        text = decode(tokens, pieces).decode("utf-8")
        got[split] = lines_by_chapter(text)
        # the split is exactly its chapters' cleaned verses, each after an eot '\n'
        assert text == "".join("\n" + line for ref in got[split] for line in expected[ref]), \
            "%s text is not its chapters' cleaned verses" % split
    train, val = got["train"], got["val"]
    assert not set(train) & set(val), "chapters in both splits: %r" % sorted(set(train) & set(val))[:5]
    for split in (train, val):  # whole chapters, in the Bible's order
        assert list(split) == [r for r in order if r in split], "chapters out of order"
    assert set(train) | set(val) == set(order), "some chapters are missing"
    frac = sizes["val"] / float(sizes["train"] + sizes["val"])
    assert 0.03 <= frac <= 0.08, "val fraction %.3f outside 3-8%%" % frac


def test_kjv_deterministic_and_skip():
    out1 = kjv_dir()
    out2 = os.path.join(TMP, "kjv_again")
    run_ok(["kjv", "--out", out2])
    for name in ("kjv_train.bin", "kjv_val.bin", "kjv_tokenizer.bin"):
        assert read_bytes(os.path.join(out1, name)) == read_bytes(os.path.join(out2, name)), \
            "%s differs between two runs" % name
    p = run_ok(["kjv", "--out", out2])
    assert "already prepared" in p.stdout, "second run did not skip: %r" % p.stdout
    p = run_ok(["--force", "--out", out2])  # no dataset name: kjv
    assert "already prepared" not in p.stdout and "wrote" in p.stdout, "--force did not rebuild"


def test_kjv_missing_bible():
    empty_bin = os.path.join(TMP, "empty_bin")
    os.makedirs(empty_bin, exist_ok=True)
    out = os.path.join(TMP, "kjv_nobible")
    p = run(["kjv", "--out", out], env={"PATH": empty_bin})
    assert_clean_failure(p, "bible", "apt-get install bible-kjv")
    assert not os.path.exists(os.path.join(out, "kjv_train.bin")), "wrote output anyway"


# ----------------------------------------------------------------------------
# addition

def test_addition_defaults_correct():
    out = os.path.join(TMP, "addition")
    run_ok(["addition", "--out", out])
    header, pieces = read_tokenizer(os.path.join(out, "addition_tokenizer.bin"))
    assert header[2] == 13 and header[3] == 12, "tokenizer header %r" % (header[:4],)
    assert pieces == [c.encode() for c in "0123456789+=\n"], "token order %r" % pieces
    for split, count in (("train", 200000), ("val", 10000)):
        path = os.path.join(out, "addition_%s.bin" % split)
        h, tokens = read_shard(path)
        assert h[3] == 13 and max(tokens) < 13, "vocab/token range wrong in %s" % split
        problems = parse_addition(path, pieces)
        assert len(problems) == count, "%d %s problems, expected %d" % (len(problems), split, count)
        for a, b, c in problems:
            assert 1 <= len(a) <= 4 and 1 <= len(b) <= 4, "operand too long: %s+%s" % (a, b)
            assert int(c[::-1]) == int(a) + int(b), "wrong answer: %s+%s=%s" % (a, b, c)
        lengths = set(len(a) for a, _, _ in problems)
        assert lengths == {1, 2, 3, 4}, "operand lengths not mixed: %r" % lengths


def test_addition_train_val_disjoint():
    out = os.path.join(TMP, "addition")  # made by the previous test; rebuilt if missing
    run_ok(["addition", "--out", out])
    _, pieces = read_tokenizer(os.path.join(out, "addition_tokenizer.bin"))
    pairs = {}
    for split in ("train", "val"):
        path = os.path.join(out, "addition_%s.bin" % split)
        # unordered: b+a counts as the same problem as a+b
        pairs[split] = set(tuple(sorted((int(a), int(b)))) for a, b, _ in
                           parse_addition(path, pieces))
    both = pairs["train"] & pairs["val"]
    assert not both, "%d pairs in both train and val, e.g. %r" % (len(both), sorted(both)[:3])


def test_addition_seeds():
    small = ["addition", "--train-problems", "3000", "--val-problems", "300"]
    outs = {}
    for tag, seed in (("a", "1"), ("b", "1"), ("c", "2")):
        outs[tag] = os.path.join(TMP, "addition_seed_" + tag)
        run_ok(small + ["--seed", seed, "--out", outs[tag]])
    for name in ("addition_train.bin", "addition_val.bin"):
        a, b, c = (read_bytes(os.path.join(outs[t], name)) for t in "abc")
        assert a == b, "%s differs between two runs with the same seed" % name
        assert a != c, "%s is the same for seeds 1 and 2" % name


def test_addition_options():
    out = os.path.join(TMP, "addition_opts")
    run_ok(["addition", "--digits", "7", "--train-problems", "2000", "--val-problems", "200",
            "--no-reverse-answer", "--out", out])
    _, pieces = read_tokenizer(os.path.join(out, "addition_tokenizer.bin"))
    problems = parse_addition(os.path.join(out, "addition_train.bin"), pieces)
    assert len(problems) == 2000
    assert max(len(a) for a, _, _ in problems) == 7, "--digits 7 not honoured"
    for a, b, c in problems:
        assert int(c) == int(a) + int(b), "--no-reverse-answer: wrong %s+%s=%s" % (a, b, c)
    assert_clean_failure(run(["addition", "--digits", "0", "--out", out]), "--digits")


# ----------------------------------------------------------------------------
# text files and GPT-2 datasets

def test_text_bytes_round_trip():
    text = "Première ligne — café\nsecond line\n\nfourth line after a blank\n" * 40
    src = write_file(os.path.join(TMP, "src", "mine.txt"), text)
    out = os.path.join(TMP, "mine")
    run_ok(["--text", src, "--out", out])  # no dataset name + --text: the text dataset
    _, pieces = read_tokenizer(os.path.join(out, "mine_tokenizer.bin"))
    _, val = read_shard(os.path.join(out, "mine_val.bin"))
    _, train = read_shard(os.path.join(out, "mine_train.bin"))
    assert val[0] == 10 and train[0] == 10, "splits do not start at a line (eot '\\n')"
    joined = decode(val, pieces) + decode(train, pieces)
    assert joined == ("\n" + text[:-1]).encode("utf-8"), "text does not round-trip"
    assert 0 < len(val) < len(train)
    bad = os.path.join(TMP, "src", "latin1.txt")
    with open(bad, "wb") as f:
        f.write(b"caf\xe9\n")
    assert_clean_failure(run(["text", "--text", bad, "--out", out]), "UTF-8")
    assert_clean_failure(run(["text", "--text", os.path.join(TMP, "nope.txt")]), "nope.txt")


def fake_module_dir(name, source):
    d = os.path.join(TMP, "fake_" + name)
    write_file(os.path.join(d, name + ".py"), source)
    return d


def test_gpt2_without_tiktoken_fails_cleanly():
    # a tiktoken.py that fails to import hides any real tiktoken from prepare.py
    no_tiktoken = {"PYTHONPATH": fake_module_dir("tiktoken", "raise ImportError('hidden')\n")}
    p = run(["shakespeare", "--out", os.path.join(TMP, "shakespeare")], env=no_tiktoken)
    assert_clean_failure(p, "tiktoken")
    p = run(["fineweb", "--out", os.path.join(TMP, "fineweb")], env=no_tiktoken)
    assert_clean_failure(p, "tiktoken")
    src = write_file(os.path.join(TMP, "src", "g.txt"), "hello\n\nworld\n")
    p = run(["text", "--text", src, "--tokenizer", "gpt2", "--out", os.path.join(TMP, "g")],
            env=no_tiktoken)
    assert_clean_failure(p, "tiktoken")


FAKE_TIKTOKEN = '''
# Stand-in for tiktoken: "GPT-2" that maps byte b to token b (enough to test the plumbing).
class _Enc:
    n_vocab = 50257
    def encode_ordinary_batch(self, docs):
        return [list(d.encode("utf-8")) for d in docs]
    def decode_single_token_bytes(self, i):
        return bytes([i]) if i < 256 else b"<%d>" % i
def get_encoding(name):
    assert name == "gpt2"
    return _Enc()
'''


def test_gpt2_text_plumbing_with_fake_tiktoken():
    env = {"PYTHONPATH": fake_module_dir("tiktoken", FAKE_TIKTOKEN)}
    paragraphs = ["paragraph %d line\nmore text %d\n\n" % (i, i) for i in range(200)]
    src = write_file(os.path.join(TMP, "src", "paras.txt"), "".join(paragraphs))
    out = os.path.join(TMP, "paras")
    run_ok(["text", "--text", src, "--tokenizer", "gpt2", "--out", out], env=env)
    header, pieces = read_tokenizer(os.path.join(out, "paras_tokenizer.bin"))
    assert header[2] == 50257 and header[3] == 50256, "tokenizer header %r" % (header[:4],)
    docs = []
    for split in ("val", "train"):
        h, tokens = read_shard(os.path.join(out, "paras_%s.bin" % split))
        assert h[3] == 50257, "vocab %d, expected 50257" % h[3]
        assert tokens[0] == 50256, "%s does not start with eot" % split
        docs += decode(tokens, pieces).split(b"<50256>")[1:]
    assert docs == [p.encode() for p in paragraphs], "paragraph documents do not round-trip"


# ----------------------------------------------------------------------------
# decode

def test_decode_command():
    out = kjv_dir()
    p = run_ok(["decode", os.path.join(out, "kjv_train.bin"), "--max", "200"])
    assert p.stdout.startswith("\nGenesis 1:1 In the beginning God created the heaven"), \
        "decode printed %r" % p.stdout[:80]
    p = run_ok(["decode", os.path.join(out, "kjv_val.bin"),
                "--tokenizer", os.path.join(out, "kjv_tokenizer.bin")])
    assert p.stdout.count("\n") > 1000


def test_decode_bad_inputs_fail_cleanly():
    out = kjv_dir()
    tok = os.path.join(out, "kjv_tokenizer.bin")
    good = read_bytes(os.path.join(out, "kjv_val.bin"))
    truncated = os.path.join(TMP, "bad", "truncated_val.bin")
    garbage = os.path.join(TMP, "bad", "garbage_val.bin")
    tiny = os.path.join(TMP, "bad", "tiny_val.bin")
    os.makedirs(os.path.dirname(truncated), exist_ok=True)
    for path, data in ((truncated, good[:5000]), (garbage, os.urandom(4096)), (tiny, b"xyz")):
        with open(path, "wb") as f:
            f.write(data)
    assert_clean_failure(run(["decode", os.path.join(TMP, "missing_val.bin"),
                              "--tokenizer", tok]), "missing_val.bin")
    assert_clean_failure(run(["decode", truncated, "--tokenizer", tok]), "corrupt")
    assert_clean_failure(run(["decode", garbage, "--tokenizer", tok]), "not a token shard")
    assert_clean_failure(run(["decode", tiny, "--tokenizer", tok]), "tiny_val.bin")
    assert_clean_failure(run(["decode", os.path.join(out, "kjv_val.bin"),
                              "--tokenizer", os.path.join(out, "kjv_val.bin")]), "tokenizer")
    add_tok = os.path.join(TMP, "addition_seed_a", "addition_tokenizer.bin")
    if not os.path.exists(add_tok):
        run_ok(["addition", "--train-problems", "100", "--val-problems", "10",
                "--out", os.path.dirname(add_tok)])
    assert_clean_failure(run(["decode", os.path.join(out, "kjv_val.bin"), "--tokenizer", add_tok]),
                         "vocabulary")


def test_tokenizer_writer_rejects_bad_tokens():
    # no dataset makes such tokens, so call the writer directly
    import importlib.util
    sys.dont_write_bytecode = True  # leave no data/__pycache__ behind
    spec = importlib.util.spec_from_file_location("prepare", PREPARE)
    prepare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prepare)
    path = os.path.join(TMP, "bad_tokenizer.bin")
    for pieces in ([b"a", b""], [b"a", b"x" * 256]):
        try:
            prepare.write_tokenizer(path, pieces, 0)
        except prepare.PrepError as e:
            assert "token 1" in str(e), "unclear message: %s" % e
        else:
            raise AssertionError("write_tokenizer accepted a token of %d bytes" % len(pieces[1]))
    prepare.write_tokenizer(path, [b"a", b"x" * 255], 1)
    header, pieces = read_tokenizer(path)
    assert header[:4] == (20240328, 2, 2, 1) and pieces == [b"a", b"x" * 255]


def temporary_files(directory):
    return sorted(os.path.join(d, f) for d, _, files in os.walk(directory) for f in files if ".tmp" in f)


def test_write_failures_leave_no_debris():
    """A write that fails (here beyond a file-size limit of 64 KiB, as a full disk fails it) is one error line and
    leaves no .tmp file and no half-prepared directory (the first shard's .tmp stayed); so does a rename that fails."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))
    os.makedirs(os.path.join(TMP, "fsize"))
    out = os.path.join(TMP, "fsize", "addition")
    small = ["--train-problems", "20000", "--val-problems", "2000"]  # a 0.6 MB train shard
    p = subprocess.run([sys.executable, PREPARE, "addition", "--out", out] + small, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True, timeout=120, preexec_fn=limit)
    assert_clean_failure(p, "cannot write", "addition_train.bin", "File too large")
    left = temporary_files(os.path.join(TMP, "fsize"))
    assert not left and not os.path.exists(out), "left %s" % (left or out)
    # the val shard's name is taken by a directory: its rename fails; the train shard written before it goes too
    out = os.path.join(TMP, "rename", "addition")
    os.makedirs(os.path.join(out, "addition_val.bin"))
    assert_clean_failure(run(["addition", "--out", out] + small), "cannot write", "addition_val.bin")
    assert sorted(os.listdir(out)) == ["addition_val.bin"], "left %s" % os.listdir(out)


def test_usage_errors_fail_cleanly():
    assert_clean_failure(run(["nosuchdataset"]), "nosuchdataset")
    assert_clean_failure(run(["addition", "--digits", "many"]), "--digits")
    assert_clean_failure(run(["text"]), "--text")


# ----------------------------------------------------------------------------
# A tiny runner: every function named test_* in file order

def main():
    tests = [(n, f) for n, f in globals().items() if n.startswith("test_") and callable(f)]
    passed = failed = 0
    t_start = time.time()
    try:
        for name, fn in tests:
            t0 = time.time()
            try:
                fn()
            except Exception as e:
                failed += 1
                where = traceback.extract_tb(e.__traceback__)[-1]
                print("FAIL %s: %s: %s (line %d)" % (name, type(e).__name__, e, where.lineno))
            else:
                passed += 1
                print("ok   %s (%.1f s)" % (name, time.time() - t0))
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    print("total %.1f s" % (time.time() - t_start))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
