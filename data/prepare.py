#!/usr/bin/env python3
"""Prepare token shards for the siamese-gpt trainer.

Usage (run from anywhere; the default output directory is data/NAME/):

    python3 data/prepare.py [kjv]            King James Bible, byte-level (offline, default)
    python3 data/prepare.py addition         synthetic multi-digit addition (offline)
    python3 data/prepare.py shakespeare      tinyshakespeare, GPT-2 BPE (needs network + tiktoken)
    python3 data/prepare.py fineweb          fineweb-edu sample, GPT-2 BPE (needs network + tiktoken + datasets)
    python3 data/prepare.py text --text FILE [--tokenizer bytes|gpt2]   your own UTF-8 text
    python3 data/prepare.py decode SHARD [--tokenizer TOK] [--max N]    print a shard as text

Every dataset accepts --out DIR and --force (rebuild even if already prepared);
`python3 data/prepare.py NAME --help` lists the rest.

Each dataset writes NAME_train.bin, NAME_val.bin (token shards), NAME_tokenizer.bin
(used to decode samples) and NAME_info.json (settings and sizes; used to skip work
when the same settings were already prepared).

File formats (little-endian, the llm.c formats):
  token shard:  256 int32 header [20240520, 1, n_tokens, vocab_size, 0...], then n_tokens uint16
  tokenizer:    256 int32 header [20240328, 2, vocab_size, eot_token, 0...], then for each
                token id 0..vocab_size-1: one uint8 length L (1..255) and L raw bytes

Documents are prefixed with the end-of-text token (eot), like llm.c, and the trainer starts
its samples from it. Shards start with eot (except shakespeare's train shard: as in llm.c,
val is simply the first 32768 tokens and train the rest).

Only the standard library is needed (python >= 3.9); the GPT-2 datasets additionally
need the `tiktoken` module (and `datasets` for fineweb). Every error ends the program
with one line on stderr and exit status 1 (set PREPARE_DEBUG=1 to get tracebacks).
"""

import argparse
import array
import base64
import hashlib
import json
import logging
import os
import random
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request

SCRIPT_DIR = os.path.dirname(os.path.abspath(__file__))

SHARD_MAGIC, SHARD_VERSION = 20240520, 1
TOKENIZER_MAGIC, TOKENIZER_VERSION = 20240328, 2
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
GPT2_VOCAB, GPT2_EOT = 50257, 50256

# Bump when the output of a dataset changes, so old outputs are not reused.
FORMAT_REVISION = 1


class PrepError(Exception):
    """An expected failure: main() prints its message as one line and exits 1."""


# ----------------------------------------------------------------------------
# File formats

def header_bytes(values):
    """A 256-int32 little-endian header with `values` first and zeros after."""
    ints = array.array("i", list(values) + [0] * (HEADER_INTS - len(values)))
    if sys.byteorder == "big":
        ints.byteswap()
    return ints.tobytes()


def read_header(data, path, what):
    if len(data) < HEADER_BYTES:
        raise PrepError("%s is not a %s (only %d bytes, the header alone is %d)"
                        % (path, what, len(data), HEADER_BYTES))
    ints = array.array("i")
    ints.frombytes(data[:HEADER_BYTES])
    if sys.byteorder == "big":
        ints.byteswap()
    return ints


def tokens_to_uint16(tokens, vocab_size):
    """Token ids -> little-endian uint16 bytes.

    `tokens` is either a bytes object (byte-level tokens, fast path) or a sequence of ints.
    """
    if isinstance(tokens, (bytes, bytearray)):
        out = bytearray(2 * len(tokens))
        out[0::2] = tokens  # low byte = the token, high byte = 0
        bad = max(tokens) if tokens else 0
    else:
        arr = tokens if isinstance(tokens, array.array) else array.array("H", tokens)
        bad = max(arr) if len(arr) else 0
        if sys.byteorder == "big":
            arr = array.array("H", arr)
            arr.byteswap()
        out = arr.tobytes()
    if len(tokens) and bad >= vocab_size:
        raise PrepError("internal error: token %d is outside the vocabulary of %d" % (bad, vocab_size))
    return bytes(out)


def atomic_write(path, data):
    """Write to a temporary name, then rename: a crash never leaves a half-written file, and a write or rename that
    fails (a full disk, a file-size limit, ^C) removes the temporary file."""
    tmp = "%s.tmp.%d" % (path, os.getpid())
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.remove(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise PrepError("cannot write %s: %s" % (path, e.strerror or e))
        raise


def write_shard(path, tokens, vocab_size):
    n = len(tokens)
    if n >= 2**31:
        raise PrepError("%s would hold %d tokens; a shard holds at most 2^31-1" % (path, n))
    if not 0 < vocab_size <= 65536:
        raise PrepError("vocabulary of %d does not fit uint16 tokens" % vocab_size)
    atomic_write(path, header_bytes([SHARD_MAGIC, SHARD_VERSION, n, vocab_size])
                 + tokens_to_uint16(tokens, vocab_size))


def read_shard(path):
    """Returns (vocab_size, array of uint16 tokens); checks the header against the file size."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise PrepError("cannot read shard %s: %s" % (path, e.strerror or e))
    h = read_header(data, path, "token shard")
    if h[0] != SHARD_MAGIC:
        raise PrepError("%s is not a token shard (magic %d, expected %d)" % (path, h[0], SHARD_MAGIC))
    if h[1] != SHARD_VERSION:
        raise PrepError("%s: unsupported shard version %d (expected %d)" % (path, h[1], SHARD_VERSION))
    n = h[2]
    if n < 0 or HEADER_BYTES + 2 * n != len(data):
        raise PrepError("%s is corrupt: header says %d tokens but the file holds %d bytes of tokens"
                        % (path, n, len(data) - HEADER_BYTES))
    tokens = array.array("H")
    tokens.frombytes(data[HEADER_BYTES:])
    if sys.byteorder == "big":
        tokens.byteswap()
    return (h[3] or GPT2_VOCAB), tokens


def write_tokenizer(path, pieces, eot):
    """pieces[i] = the raw bytes of token id i."""
    if not 0 <= eot < len(pieces):
        raise PrepError("internal error: eot %d outside the vocabulary of %d" % (eot, len(pieces)))
    parts = [header_bytes([TOKENIZER_MAGIC, TOKENIZER_VERSION, len(pieces), eot])]
    for i, piece in enumerate(pieces):
        if not 1 <= len(piece) <= 255:
            raise PrepError("token %d is %d bytes long; the tokenizer format needs 1..255"
                            % (i, len(piece)))
        parts.append(bytes([len(piece)]) + piece)
    atomic_write(path, b"".join(parts))


def read_tokenizer(path):
    """Returns (list of token byte strings, eot token id)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise PrepError("cannot read tokenizer %s: %s" % (path, e.strerror or e))
    h = read_header(data, path, "tokenizer file")
    if h[0] != TOKENIZER_MAGIC:
        raise PrepError("%s is not a tokenizer file (magic %d, expected %d)"
                        % (path, h[0], TOKENIZER_MAGIC))
    if h[1] not in (1, 2):
        raise PrepError("%s: unsupported tokenizer version %d" % (path, h[1]))
    vocab_size, eot = h[2], (h[3] if h[1] == 2 else -1)
    pieces, pos = [], HEADER_BYTES
    for i in range(vocab_size):
        length = data[pos] if pos < len(data) else 0
        if length == 0 or pos + 1 + length > len(data):
            raise PrepError("%s is corrupt at token %d" % (path, i))
        pieces.append(data[pos + 1:pos + 1 + length])
        pos += 1 + length
    if pos != len(data):
        raise PrepError("%s is corrupt: %d extra bytes after the last token" % (path, len(data) - pos))
    return pieces, eot


# ----------------------------------------------------------------------------
# Shared output logic: skip check, writing all files, summary

def output_paths(out_dir, name):
    return {kind: os.path.join(out_dir, "%s_%s" % (name, kind))
            for kind in ("train.bin", "val.bin", "tokenizer.bin", "info.json")}


def already_prepared(out_dir, name, settings, force):
    """True when all outputs exist and were made with the same settings (unless --force)."""
    paths = output_paths(out_dir, name)
    if force or not all(os.path.exists(p) for p in paths.values()):
        return False
    try:
        with open(paths["info.json"]) as f:
            info = json.load(f)
    except (OSError, ValueError):
        return False
    if info.get("settings") != settings:
        return False
    print("%s: already prepared in %s (train %d tokens, val %d tokens); use --force to rebuild"
          % (name, out_dir, info.get("train_tokens", -1), info.get("val_tokens", -1)))
    return True


def parents(path):
    """path and the folders above it, deepest first: a/b/c -> a/b/c, a/b, a"""
    out = []
    path = os.path.normpath(path)
    while path and path not in (os.sep, os.curdir) and path not in out:
        out.append(path)
        path = os.path.dirname(path)
    return out


def write_outputs(out_dir, name, settings, train, val, pieces, eot, extra=None):
    """Write the two shards, the tokenizer and the info file (last, it marks completion)."""
    if len(train) == 0 or len(val) == 0:
        raise PrepError("%s: the train or val split is empty (train %d, val %d tokens); "
                        "the input is too small" % (name, len(train), len(val)))
    made = [d for d in parents(out_dir) if not os.path.isdir(d)]  # what a failure below removes again
    paths = output_paths(out_dir, name)
    vocab = len(pieces)
    written = []
    try:
        os.makedirs(out_dir, exist_ok=True)
        for kind, write in (("train.bin", lambda p: write_shard(p, train, vocab)),
                            ("val.bin", lambda p: write_shard(p, val, vocab)),
                            ("tokenizer.bin", lambda p: write_tokenizer(p, pieces, eot))):
            write(paths[kind])
            written.append(paths[kind])
        info = {"settings": settings, "vocab_size": vocab, "eot_token": eot,
                "train_tokens": len(train), "val_tokens": len(val)}
        info.update(extra or {})
        atomic_write(paths["info.json"], (json.dumps(info, indent=2) + "\n").encode())
    except BaseException:  # no half-prepared dataset: what this call wrote goes, and the folders it made
        for path in written:
            try:
                os.remove(path)
            except OSError:
                pass
        for d in made:  # deepest first
            try:
                os.rmdir(d)
            except OSError:
                break
        raise
    print("%s: wrote %s (train %d tokens, val %d tokens = %.1f%%, vocab %d, eot %d)"
          % (name, out_dir, len(train), len(val), 100.0 * len(val) / (len(train) + len(val)),
             vocab, eot))


BYTE_PIECES = [bytes([i]) for i in range(256)]  # byte-level tokenizer: id = byte value
BYTE_EOT = 10                                     # '\n'


# ----------------------------------------------------------------------------
# kjv: the King James Bible from the `bible` command (Debian package bible-kjv)
#
# `bible -l0 Gen1:1-Rev22:21` prints, per chapter, a blank line, a "Book N" line, a blank
# line, then one "  V verse text" line per verse. We turn every verse into one line
# "Book N:V verse text" (whitespace collapsed). The reference makes each line a
# self-contained document (eot = '\n' precedes it) and makes samples easy to eyeball.

KJV_CHAPTERS = 1189
KJV_VAL_EVERY = 20  # chapters 19, 39, 59, ... (0-based) go to val: ~5%, same distribution


def bible_text():
    """Run `bible` and return its output as text."""
    exe = shutil.which("bible")
    if exe is None:
        raise PrepError("the 'bible' command is missing; install it with: "
                        "sudo apt-get install bible-kjv")
    try:
        proc = subprocess.run([exe, "-l0", "Gen1:1-Rev22:21"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise PrepError("running 'bible' failed: %s" % e)
    if proc.returncode != 0:
        msg = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise PrepError("'bible' exited with status %d%s"
                        % (proc.returncode, (": " + msg[0]) if msg else ""))
    try:
        return proc.stdout.decode("utf-8")
    except UnicodeDecodeError:
        raise PrepError("'bible' printed text that is not UTF-8")


def kjv_chapters(raw):
    """Parse `bible` output into a list of chapters, each a list of verse lines."""
    header = re.compile(r"^(\S.*) (\d+)$")     # "Genesis 1", "Song of Solomon 3"
    verse = re.compile(r"^\s+(\d+) (.*)$")      # "  1 In the beginning ..."
    chapters, ref = [], None
    for lineno, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        m = header.match(line)
        if m:
            ref = "%s %s" % (m.group(1), m.group(2))
            chapters.append([])
            continue
        m = verse.match(line)
        if not m or ref is None:
            raise PrepError("unexpected output from 'bible' at line %d: %.60r" % (lineno, line))
        text = " ".join(m.group(2).split())
        chapters[-1].append("%s:%s %s" % (ref, m.group(1), text))
    if len(chapters) != KJV_CHAPTERS or not all(chapters):
        raise PrepError("unexpected output from 'bible': %d chapters (expected %d)"
                        % (len(chapters), KJV_CHAPTERS))
    return chapters


def prepare_kjv(args):
    name, out_dir = "kjv", args.out or os.path.join(SCRIPT_DIR, "kjv")
    settings = {"dataset": "kjv", "revision": FORMAT_REVISION, "val_every": KJV_VAL_EVERY}
    if already_prepared(out_dir, name, settings, args.force):
        return
    chapters = kjv_chapters(bible_text())
    train, val = [], []
    for i, chapter in enumerate(chapters):
        split = val if i % KJV_VAL_EVERY == KJV_VAL_EVERY - 1 else train
        split.extend("\n" + line for line in chapter)  # eot ('\n') before every verse
    write_outputs(out_dir, name, settings,
                  "".join(train).encode("utf-8"), "".join(val).encode("utf-8"),
                  BYTE_PIECES, BYTE_EOT,
                  {"chapters": len(chapters),
                   "val_chapters": sum(1 for i in range(len(chapters))
                                       if i % KJV_VAL_EVERY == KJV_VAL_EVERY - 1)})


# ----------------------------------------------------------------------------
# addition: synthetic "a+b=c" problems, one per line
#
# Vocabulary (13 tokens): '0'..'9' -> 0..9, '+' -> 10, '=' -> 11, '\n' -> 12 (the eot).
# Each operand first draws its digit count uniformly from 1..--digits, then a uniform number
# with that many digits (so short problems are common). With --reverse-answer (the default)
# the answer is written least significant digit first, e.g. 57+68=521 for 57+68=125: a causal
# model then produces each answer digit after the digits (and carry) it depends on.
# Val problems never occur in train: each unordered pair {a, b} is assigned to val or train
# by a seeded hash (10% of all pairs are reserved for val), so b+a is held out with a+b.

ADDITION_CHARS = "0123456789+=\n"
ADDITION_EOT = ADDITION_CHARS.index("\n")
ADDITION_VAL_PAIRS = 10  # 1 in 10 pairs is reserved for val


def addition_is_val_pair(a, b, seed):
    key = ("%d:%d+%d" % (seed, min(a, b), max(a, b))).encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") \
        % ADDITION_VAL_PAIRS == 0


def addition_problems(rng, count, digits, seed, want_val, reverse):
    """Draw `count` problems whose pairs lie in the val (or train) part of the pair space."""
    def operand():
        n = rng.randint(1, digits)
        return rng.randint(0 if n == 1 else 10 ** (n - 1), 10 ** n - 1)

    lines, draws, max_draws = [], 0, 100 * count + 10**5
    while len(lines) < count:
        draws += 1
        if draws > max_draws:
            raise PrepError("could not draw %d %s problems with --digits %d: too few distinct "
                            "pairs; use more digits or fewer problems"
                            % (count, "val" if want_val else "train", digits))
        a, b = operand(), operand()
        if addition_is_val_pair(a, b, seed) != want_val:
            continue
        c = str(a + b)
        lines.append("%d+%d=%s" % (a, b, c[::-1] if reverse else c))
    return lines


def prepare_addition(args):
    name, out_dir = "addition", args.out or os.path.join(SCRIPT_DIR, "addition")
    if not 1 <= args.digits <= 100:
        raise PrepError("--digits must be between 1 and 100")
    if args.train_problems < 1 or args.val_problems < 1:
        raise PrepError("--train-problems and --val-problems must be at least 1")
    settings = {"dataset": "addition", "revision": FORMAT_REVISION, "digits": args.digits,
                "train_problems": args.train_problems, "val_problems": args.val_problems,
                "seed": args.seed, "reverse_answer": args.reverse_answer}
    if already_prepared(out_dir, name, settings, args.force):
        return
    rng = random.Random(args.seed)
    val = addition_problems(rng, args.val_problems, args.digits, args.seed, True,
                            args.reverse_answer)
    train = addition_problems(rng, args.train_problems, args.digits, args.seed, False,
                              args.reverse_answer)
    # characters -> token ids with one bytes.translate (every char is ASCII)
    table = bytearray(range(256))
    for i, ch in enumerate(ADDITION_CHARS):
        table[ord(ch)] = i
    encode = lambda lines: "".join("\n" + s for s in lines).encode("ascii").translate(table)
    pieces = [ch.encode("ascii") for ch in ADDITION_CHARS]
    write_outputs(out_dir, name, settings, encode(train), encode(val), pieces, ADDITION_EOT,
                  {"token_order": ADDITION_CHARS})


# ----------------------------------------------------------------------------
# GPT-2 BPE (tiktoken): shakespeare, fineweb, text --tokenizer gpt2

# GPT-2's split pattern as originally released (tiktoken ships a faster equivalent form).
GPT2_PAT_STR = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def gpt2_encoding(ranks_path):
    """The tiktoken GPT-2 encoding, from --gpt2-ranks PATH or tiktoken's own download."""
    try:
        import tiktoken
    except ImportError:
        raise PrepError("the 'tiktoken' module is missing (GPT-2 BPE needs it); "
                        "install it with: pip install tiktoken")
    if ranks_path:
        # A ranks file has one "base64(token bytes) rank" line per token, as
        # whisper/assets/gpt2.tiktoken in the openai-whisper sdist.
        try:
            with open(ranks_path, "rb") as f:
                lines = f.read().splitlines()
            ranks = {}
            for line in lines:
                if line.strip():
                    token, rank = line.split()
                    ranks[base64.b64decode(token, validate=True)] = int(rank)
        except OSError as e:
            raise PrepError("cannot read --gpt2-ranks %s: %s" % (ranks_path, e.strerror or e))
        except ValueError:
            raise PrepError("--gpt2-ranks %s is not a tiktoken ranks file "
                            "(lines of 'base64 rank')" % ranks_path)
        if sorted(ranks.values()) != list(range(GPT2_EOT)):
            raise PrepError("--gpt2-ranks %s holds %d ranks, not GPT-2's 0..%d"
                            % (ranks_path, len(ranks), GPT2_EOT - 1))
        try:
            from tiktoken_ext.openai_public import r50k_pat_str as pat_str
        except ImportError:
            pat_str = GPT2_PAT_STR
        return tiktoken.Encoding(name="gpt2", pat_str=pat_str, mergeable_ranks=ranks,
                                 special_tokens={"<|endoftext|>": GPT2_EOT})
    try:
        return tiktoken.get_encoding("gpt2")
    except Exception as e:  # tiktoken raises requests/urllib/blobfile errors when offline
        raise PrepError("could not get the GPT-2 BPE ranks (tiktoken downloads them on first "
                        "use: no network?): %s; pass --gpt2-ranks PATH to a gpt2.tiktoken file, "
                        "e.g. whisper/assets/gpt2.tiktoken from the openai-whisper sdist"
                        % one_line(e))


def gpt2_pieces(enc):
    return [enc.decode_single_token_bytes(i) for i in range(GPT2_VOCAB)]


def encode_docs(enc, docs):
    """GPT-2 tokens of docs, each prefixed by eot; returns (tokens, start index of each doc)."""
    tokens, starts = array.array("H"), []
    for ids in enc.encode_ordinary_batch(docs):
        starts.append(len(tokens))
        tokens.append(GPT2_EOT)
        tokens.extend(ids)
    return tokens, starts


def one_line(e):
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= 160 else text[:157] + "..."


def download(url, timeout=60):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.read()
    except Exception as e:
        raise PrepError("could not download %s (no network?): %s" % (url, one_line(e)))


def fetch_cached(url, path):
    """The contents of url, downloaded once to path (which may also be put there by hand)."""
    if os.path.exists(path):
        with open(path, "rb") as f:
            return f.read()
    try:
        data = download(url)
    except PrepError as e:
        raise PrepError("%s; or save that file as %s" % (e, path))
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    atomic_write(path, data)
    return data


def paragraphs(text):
    """Split text into documents at blank lines, keeping the separator (like llm.c)."""
    parts = text.split("\n\n")
    docs = [p + "\n\n" for p in parts[:-1]] + [parts[-1]]
    return [d for d in docs if d]


SHAKESPEARE_URL = ("https://raw.githubusercontent.com/karpathy/char-rnn/master/data/"
                   "tinyshakespeare/input.txt")
SHAKESPEARE_VAL_TOKENS = 32768  # llm.c: the first 32768 tokens are val, the rest train


def prepare_shakespeare(args):
    name, out_dir = "shakespeare", args.out or os.path.join(SCRIPT_DIR, "shakespeare")
    settings = {"dataset": "shakespeare", "revision": FORMAT_REVISION, "tokenizer": "gpt2"}
    if already_prepared(out_dir, name, settings, args.force):
        return
    enc = gpt2_encoding(args.gpt2_ranks)
    raw = fetch_cached(SHAKESPEARE_URL, os.path.join(out_dir, "input.txt"))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise PrepError("%s is not UTF-8 text" % os.path.join(out_dir, "input.txt"))
    tokens, _ = encode_docs(enc, paragraphs(text))
    write_outputs(out_dir, name, settings, tokens[SHAKESPEARE_VAL_TOKENS:],
                  tokens[:SHAKESPEARE_VAL_TOKENS], gpt2_pieces(enc), GPT2_EOT)


def prepare_fineweb(args):
    name, out_dir = "fineweb", args.out or os.path.join(SCRIPT_DIR, "fineweb")
    if args.docs < 1 or args.val_docs < 1:
        raise PrepError("--docs and --val-docs must be at least 1")
    settings = {"dataset": "fineweb", "revision": FORMAT_REVISION, "tokenizer": "gpt2",
                "hf_dataset": "HuggingFaceFW/fineweb-edu/sample-10BT",
                "docs": args.docs, "val_docs": args.val_docs}
    if already_prepared(out_dir, name, settings, args.force):
        return
    enc = gpt2_encoding(args.gpt2_ranks)
    try:
        import datasets
    except ImportError:
        raise PrepError("the 'datasets' module is missing (fineweb streams from the Hugging "
                        "Face hub with it); install it with: pip install datasets")
    # Fail fast (and quietly) when offline: the hub client would retry for ~25 s and print
    # a warning per retry. An HTTP error status still means the host is reachable.
    try:
        urllib.request.urlopen(urllib.request.Request("https://huggingface.co", method="HEAD"),
                               timeout=20).close()
    except urllib.error.HTTPError:
        pass
    except Exception as e:
        raise PrepError("cannot reach huggingface.co (no network?): %s" % one_line(e))
    for logger in ("huggingface_hub", "datasets", "fsspec"):
        logging.getLogger(logger).setLevel(logging.ERROR)
    # The first val_docs documents of the stream are val, the next `docs` are train.
    docs, t0 = [], time.time()
    try:
        stream = datasets.load_dataset("HuggingFaceFW/fineweb-edu", name="sample-10BT",
                                       split="train", streaming=True)
        for row in stream:
            docs.append(row["text"])
            if len(docs) % 5000 == 0:
                print("fineweb: %d documents streamed (%.0f s)" % (len(docs), time.time() - t0))
            if len(docs) == args.val_docs + args.docs:
                break
    except Exception as e:
        raise PrepError("could not stream fineweb-edu from the Hugging Face hub "
                        "(no network?): %s" % one_line(e))
    if len(docs) < args.val_docs + 1:
        raise PrepError("fineweb: the stream ended after %d documents" % len(docs))
    val, _ = encode_docs(enc, docs[:args.val_docs])
    train, _ = encode_docs(enc, docs[args.val_docs:])
    write_outputs(out_dir, name, settings, train, val, gpt2_pieces(enc), GPT2_EOT,
                  {"train_docs": len(docs) - args.val_docs})


# ----------------------------------------------------------------------------
# text: any local UTF-8 text file
#
# bytes tokenizer: every line is a document (eot '\n' before it); gpt2 tokenizer: every
# blank-line separated paragraph is a document (eot 50256 before it). The first
# --val-fraction of the tokens, cut at the next document start, is val; the rest is train.

def prepare_text(args):
    if not args.text:
        raise PrepError("the text dataset needs --text FILE")
    stem = os.path.splitext(os.path.basename(args.text))[0]
    name = args.name or re.sub(r"[^A-Za-z0-9_.-]+", "_", stem) or "text"
    out_dir = args.out or os.path.join(SCRIPT_DIR, name)
    if not 0 < args.val_fraction < 1:
        raise PrepError("--val-fraction must be between 0 and 1")
    try:
        with open(args.text, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise PrepError("cannot read --text %s: %s" % (args.text, e.strerror or e))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PrepError("--text %s is not UTF-8 (bad byte at offset %d)" % (args.text, e.start))
    settings = {"dataset": "text", "revision": FORMAT_REVISION, "tokenizer": args.tokenizer,
                "val_fraction": args.val_fraction, "source": os.path.abspath(args.text),
                "source_sha256": hashlib.sha256(raw).hexdigest()}
    if already_prepared(out_dir, name, settings, args.force):
        return
    if args.tokenizer == "bytes":
        body = raw[:-1] if raw.endswith(b"\n") else raw
        tokens = b"\n" + body                      # eot before every line
        cut = tokens.find(b"\n", int(len(tokens) * args.val_fraction))
        cut = len(tokens) if cut < 0 else cut
        pieces, eot = BYTE_PIECES, BYTE_EOT
    else:
        enc = gpt2_encoding(args.gpt2_ranks)
        tokens, starts = encode_docs(enc, paragraphs(text))
        target = int(len(tokens) * args.val_fraction)
        cut = next((s for s in starts if s >= target), len(tokens))
        pieces, eot = gpt2_pieces(enc), GPT2_EOT
    write_outputs(out_dir, name, settings, tokens[cut:], tokens[:cut], pieces, eot)


# ----------------------------------------------------------------------------
# decode: print a shard as text

def decode_main(argv):
    p = Parser(prog="prepare.py decode", description="Print the text of a token shard.")
    p.add_argument("shard", help="a .bin token shard")
    p.add_argument("--tokenizer", help="tokenizer file (default: NAME_tokenizer.bin next to "
                                       "a NAME_train.bin / NAME_val.bin shard)")
    p.add_argument("--max", type=int, default=0, help="decode at most this many tokens (0: all)")
    args = p.parse_args(argv)
    tok_path = args.tokenizer
    if not tok_path:
        m = re.match(r"^(.*)_(train|val)\.bin$", args.shard)
        if not m:
            raise PrepError("cannot guess the tokenizer of %s; pass --tokenizer FILE" % args.shard)
        tok_path = m.group(1) + "_tokenizer.bin"
    vocab_size, tokens = read_shard(args.shard)
    pieces, _ = read_tokenizer(tok_path)
    if vocab_size != len(pieces):
        raise PrepError("%s has a vocabulary of %d but tokenizer %s has %d"
                        % (args.shard, vocab_size, tok_path, len(pieces)))
    if args.max > 0:
        tokens = tokens[:args.max]
    out = []
    for i, t in enumerate(tokens):
        if t >= len(pieces):
            raise PrepError("%s: token %d at position %d is outside the vocabulary of %d"
                            % (args.shard, t, i, len(pieces)))
        out.append(pieces[t])
    sys.stdout.buffer.write(b"".join(out))
    if out and not out[-1].endswith(b"\n"):
        sys.stdout.buffer.write(b"\n")
    sys.stdout.buffer.flush()


# ----------------------------------------------------------------------------
# Command line

class Parser(argparse.ArgumentParser):
    """argparse, but usage errors are one line and exit 1 like every other error."""

    def error(self, message):
        raise PrepError("%s (see: %s --help)" % (message, self.prog))


DATASETS = {"kjv": prepare_kjv, "addition": prepare_addition, "shakespeare": prepare_shakespeare,
            "fineweb": prepare_fineweb, "text": prepare_text}


def build_parser():
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--out", metavar="DIR", help="output directory (default: data/NAME)")
    common.add_argument("--force", action="store_true", help="rebuild even if already prepared")
    gpt2 = argparse.ArgumentParser(add_help=False)
    gpt2.add_argument("--gpt2-ranks", metavar="PATH",
                      help="GPT-2 BPE ranks file (e.g. whisper/assets/gpt2.tiktoken) instead of "
                           "letting tiktoken download them")

    p = Parser(prog="prepare.py", description=__doc__.split("\n\n")[0],
               epilog="With no DATASET, kjv is prepared. Options of one dataset: "
                      "prepare.py DATASET --help. Print a shard as text: "
                      "prepare.py decode SHARD [--tokenizer TOK] [--max N]")
    sub = p.add_subparsers(dest="dataset", metavar="DATASET", parser_class=Parser)
    sub.add_parser("kjv", parents=[common], help="King James Bible, bytes (offline, default)")
    a = sub.add_parser("addition", parents=[common], help="synthetic addition (offline)")
    a.add_argument("--digits", type=int, default=4, help="max digits per operand (default 4)")
    a.add_argument("--train-problems", type=int, default=200000, help="default 200000")
    a.add_argument("--val-problems", type=int, default=10000, help="default 10000")
    a.add_argument("--seed", type=int, default=1337, help="default 1337")
    a.add_argument("--reverse-answer", action=argparse.BooleanOptionalAction, default=True,
                   help="write the answer least significant digit first (default on)")
    sub.add_parser("shakespeare", parents=[common, gpt2], help="tinyshakespeare, GPT-2 BPE")
    f = sub.add_parser("fineweb", parents=[common, gpt2], help="fineweb-edu sample, GPT-2 BPE")
    f.add_argument("--docs", type=int, default=20000, help="train documents (default 20000)")
    f.add_argument("--val-docs", type=int, default=1000, help="val documents (default 1000)")
    t = sub.add_parser("text", parents=[common, gpt2], help="a local UTF-8 text file")
    t.add_argument("--text", metavar="FILE", help="the text file")
    t.add_argument("--tokenizer", choices=["bytes", "gpt2"], default="bytes",
                   help="bytes (vocab 256, eot '\\n', default) or gpt2 (needs tiktoken)")
    t.add_argument("--name", help="output name (default: the file name without extension)")
    t.add_argument("--val-fraction", type=float, default=0.05, help="default 0.05")
    return p


def main(argv):
    if argv and argv[0] == "decode":
        return decode_main(argv[1:])
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        # no dataset named: `--text FILE ...` means the text dataset, anything else kjv
        argv = (["text"] if "--text" in argv else ["kjv"]) + list(argv)
    args = build_parser().parse_args(argv)
    t0 = time.time()
    DATASETS[args.dataset](args)
    print("done in %.1f s" % (time.time() - t0))


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except PrepError as e:
        print("error: %s" % e, file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        sys.exit(1)
    except BrokenPipeError:  # e.g. `decode ... | head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
    except OSError as e:  # disk full, permission denied, ...
        print("error: %s" % one_line(e), file=sys.stderr)
        sys.exit(1)
    except Exception as e:
        if os.environ.get("PREPARE_DEBUG"):
            raise
        print("error: unexpected %s: %s (rerun with PREPARE_DEBUG=1 for a traceback)"
              % (type(e).__name__, one_line(e)), file=sys.stderr)
        sys.exit(1)
