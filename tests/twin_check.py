#!/usr/bin/env python3
"""docs/train_model.py, the PyTorch twin's trainer, held to the C++ trainer ./reference_cpu on the KJV shards:

  1. the tensor table: parameter_table against `./reference_cpu --print-tensors` (names, shapes, offsets, decay)
     for every layout of the twin's table, and a skip line for each layout of the C++'s registry it lacks;
  2. the initialization: the twin's initial checkpoint against the C++'s (a step at learning rate 0, which leaves
     every parameter as initialized) byte for byte (cmp), for every layout, another seed, a padded vocabulary
     (V = 300, Vp = 384) and one tensor of 2^20 normals (where the C++ draws on several threads);
  3. training: from the C++'s initial checkpoint, 6 steps in both (AdamW with weight decay, a warmup and cosine
     decay, clipping active at some steps, validation at steps 0, 3 and 6; siamese with two micro-batches a step):
     every step's loss, gradient norm and learning rate, every validation loss, and every parameter after the 6
     steps; then each side's final checkpoint loaded by the other, with the same validation loss;
  4. the program: a run of docs/train_model.py as the C++ trainer is run (main.log in the C++'s format, the
     checkpoint in -o that ./reference_cpu loads), and its errors (one `error:` line, exit status 1, no file left);
  5. planted mistakes in the twin (its initialization, data, schedule and optimizer), each of which must make a
     comparison above fail.

The last line is "N passed, N failed[, N skipped]"; the exit status is 0 only if nothing failed.

    /usr/bin/python3 tests/twin_check.py [-v]      (-v: every comparison's row, not only the failures)

The bounds, and why they are these numbers (relative errors ||twin - C++|| / ||C++||):

  - Initialization: exact (cmp). The twin computes host/rand.h's splitmix64 in uint64 and Box-Muller in float64,
    then rounds to float32 as the C++ does; where NumPy's log or cos could round the float64 to another float32
    than the C library's, train_model.normals uses the C library's (Python's math), so the bits are the same.
  - Losses and logits of one model: 1e-5, as tests/torch_check.py's outputs (both sides float32, the same sums in
    other orders: measured there at 2e-7).
  - Training, each step's loss and each validation loss: STEP_LOSS_BOUND 1e-5. A gradient differs between the
    sides by float32 rounding, ~1e-6 relative at most (tests/torch_check.py measures 6e-7; 1.7e-6 for the QKV-norm
    tensors), and AdamW's step m / (sqrt(v) + eps) is invariant to the gradient's scale, so it passes a relative
    error of the gradient through about unchanged: after k steps of ~lr each parameter differs by ~k lr 1e-6 and
    the loss by its gradient times that. Measured: 2.3e-7 at worst (main.log prints 6 decimals: 1e-7 on losses
    near 5). The smallest planted mistake moves a loss by 5e-4 (no weight decay), 50x above the bound.
  - Training, each tensor after the 6 steps: PARAM_BOUND 3e-4. The same argument holds entry by entry where an
    entry's gradient is well above its rounding noise; where it changes sign from one step to the next, m is a
    difference of nearly equal numbers, and that cancellation magnifies the gradient's rounding. A handful of such
    entries carry most of a tensor's difference: measured 2.7e-5 for pre's fcprojw, 91% of it in 10 of its 12288
    entries (the largest 6.7e-5, on entries the 6 steps moved by up to 0.019), 8.7e-6 at worst in the other cases.
    3e-4 leaves 11x over that, and is 11x below the smallest planted effect on a tensor (no weight decay: wpe
    3.5e-3; every other mistake 4e-3 or more).
  - Two exceptions, as in tests/torch_check.py: gradients that are zero in exact arithmetic, because a shift of
    every key adds a constant to each row of the softmax's scores: the key third of qkvb (the layouts without
    QKV-norm) and the QKV-norm's key shifts lnkb. Both sides hold only rounding noise there (~1e-10), and Adam makes
    of each side's noise another update (lr noise / (|noise| + eps), up to 1e-4 a step); they are not compared
    (they cannot change a loss, which is compared). The gradient norm is printed with 4 decimals by the C++
    (main.log's norm:), so it is held to 1e-4 absolute + 1e-5 relative, and the learning rate (%.3e) to 5e-4.
"""
import filecmp
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import types

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINER = os.path.join(REPO, "reference_cpu")
TWIN = os.path.join(REPO, "docs", "train_model.py")
TRAIN_SHARD = os.path.join(REPO, "data", "kjv", "kjv_train.bin")
VAL_SHARD = os.path.join(REPO, "data", "kjv", "kjv_val.bin")

OUT_BOUND = 1e-5          # the loss of one model on one batch (tests/torch_check.py's)
STEP_LOSS_BOUND = 1e-5    # each step's train loss and each validation loss over 6 steps of training
PARAM_BOUND = 3e-4        # each tensor after 6 steps (the cancellation in m: see above)
NORM_ABS, NORM_REL = 1e-4, 1e-5  # main.log's norm has 4 decimals
LR_REL = 5e-4             # main.log's lr has 3 significant digits after the first (%.3e)
ZERO_IN_EXACT_ARITHMETIC = {"lnkb"}

SHAPE = dict(L=3, C=32, NH=4, maxT=64, V=256)   # the training cases' models
B, T, STEPS = 4, 32, 6
TRAIN_FLAGS = dict(lr=1e-2, warmup=2, final_frac=0.1, weight_decay=0.1, grad_clip=2.0, val_every=3, val_steps=2)
# the training cases: (layout, micro-batches a step)
TRAIN_CASES = [("pre", 1), ("post", 1), ("siamese", 2), ("siamese-hybrid", 1), ("peri", 1), ("hc", 1)]


class Tally:
    def __init__(self, verbose):
        self.passed = self.failed = self.skipped = 0
        self.failures = []
        self.verbose = verbose

    def check(self, ok, what, detail=""):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            self.failures.append(what)
        if self.verbose or not ok:
            print(f"{'ok  ' if ok else 'FAIL'}  {what}{'  ' + detail if detail else ''}")
        return ok

    def skip(self, what):
        self.skipped += 1
        print(f"skip  {what}")


def run(cmd, **kw):
    return subprocess.run([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, env=dict(os.environ, OMP_NUM_THREADS="1"), **kw)


def rel_err(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    nb = float(np.linalg.norm(b))
    return float(np.linalg.norm(a - b)) / nb if nb > 0 else (0.0 if not np.any(a) else math.inf)


def shape_flags(layout, L, C, NH, maxT, V, ablations=0, alpha=None):
    flags = ["--norm", layout, "--layers", L, "--channels", C, "--heads", NH, "--max-seq-len", maxT, "--vocab", V]
    flags += ["--no-depth-scale"] * (ablations & 1 > 0) + ["--no-ln-in"] * (ablations & 2 > 0)
    return flags + (["--mix-alpha", alpha] if alpha is not None else [])


def cpp_layouts():
    """the layouts of the C++'s registry, from its usage (--norm a|b|c)"""
    usage = run([TRAINER, "-h"]).stderr + run([TRAINER, "-h"]).stdout
    for line in usage.splitlines():
        if line.strip().startswith("--norm <layout>"):
            return line.split()[2].split("|")
    raise RuntimeError("./reference_cpu -h lists no --norm <layout> line")


# ------------------------------------------------------------------------------------------------------------------
# 1 and 2: the tensor table and the initialization

# (layout, L, C, NH, V, ablations, --mix-alpha, seed): every layout, and the variants named in the docstring
INIT_CASES = [(n, 4, 32, 4, 256, 0, None, 1337) for n in ("pre", "post", "siamese", "mix", "deepnorm", "hybrid",
                                                           "hybrid-star", "siamese-hybrid", "pre-qkvnorm",
                                                           "peri", "hc")]
INIT_CASES += [("siamese", 4, 32, 4, 256, 3, None, 1337), ("mix", 4, 32, 4, 256, 0, 0.5, 1337),
               ("siamese", 2, 48, 3, 300, 0, None, 7), ("pre", 1, 512, 8, 256, 0, None, 1337)]


def twin_config(layout, L, C, NH, V, ablations, alpha, maxT=64):
    setting = math.floor(alpha * L + 1e-9) if alpha is not None else None
    return tm.config(layout, L, C, NH, maxT, V, ablations, setting)


def cpp_init(tmp, layout, L, C, NH, V, ablations, alpha, seed, maxT=64):
    """the C++ trainer's model at initialization: one step at learning rate 0 (-l 0 -x 1), written by -o"""
    out = os.path.join(tmp, f"init-{layout}-{L}-{C}-{V}-{ablations}-{alpha}-{seed}")
    if os.path.isfile(os.path.join(out, "model_00000001.bin")):  # made before with the same flags
        return os.path.join(out, "model_00000001.bin")
    r = run([TRAINER] + shape_flags(layout, L, C, NH, maxT, V, ablations, alpha) +
            ["--seed", seed, "-l", 0, "-x", 1, "-b", 1, "-t", 8, "-v", 0, "-s", 0, "-i", VAL_SHARD, "-j", VAL_SHARD,
             "-o", out])
    path = os.path.join(out, "model_00000001.bin")
    if r.returncode != 0 or not os.path.isfile(path):
        raise RuntimeError(f"./reference_cpu could not make the {layout} model: {r.stderr.strip()[-300:]}")
    return path


def check_tables(tally):
    for layout, L, C, NH, V, ablations, alpha, _ in INIT_CASES:
        cfg = twin_config(layout, L, C, NH, V, ablations, alpha)
        r = run([TRAINER] + shape_flags(layout, L, C, NH, 64, V, ablations, alpha) + ["--print-tensors"])
        if not tally.check(r.returncode == 0, f"table {layout}: ./reference_cpu --print-tensors", r.stderr.strip()):
            continue
        t = json.loads(r.stdout)
        theirs = [(x["name"], tuple(x["shape"]), bool(x["decay"]), x["offset"]) for x in t["tensors"]]
        mine, offset = [], 0
        for name, shape, decay in tm.parameter_table(cfg):
            mine.append((name, shape, decay, offset))
            offset += int(np.prod(shape))
        head_ok = (t["layout"], t["ablations"], t["layout_setting"], t["num_layers"], t["channels"], t["num_heads"],
                   t["vocab_size"], t["padded_vocab_size"], t["max_seq_len"]) == (
                   cfg.layout, cfg.ablations, cfg.setting, cfg.L, cfg.C, cfg.NH, cfg.V, cfg.Vp, cfg.maxT)
        first_off = next((f"{m} != {c}" for m, c in zip(mine, theirs) if m != c), f"{len(mine)} != {len(theirs)}")
        tally.check(head_ok and mine == theirs, f"table {layout} L={L} C={C} V={V} ablations={ablations} "
                    f"setting={cfg.setting}: names, shapes, offsets, decay", "" if mine == theirs else first_off)
    known = set(tm.LAYOUTS)
    for layout in cpp_layouts():
        if layout not in known:
            tally.skip(f"the C++ layout {layout} is not in docs/train_model.py's LAYOUTS (the twin cannot make, "
                       f"read or train it)")


def check_init(tally, tmp, cases=INIT_CASES, twin=None):
    """the twin's (or a planted mistake's) initial checkpoints against the C++'s, byte for byte; returns how many
    differed"""
    tw = twin or tm
    differed = 0
    for layout, L, C, NH, V, ablations, alpha, seed in cases:
        cfg = twin_config(layout, L, C, NH, V, ablations, alpha)
        theirs = cpp_init(tmp, layout, L, C, NH, V, ablations, alpha, seed)
        mine = os.path.join(tmp, "twin_init.bin")
        tw.write_checkpoint(mine, cfg, tw.init_parameters(cfg, seed))
        same = filecmp.cmp(mine, theirs, shallow=False)
        differed += not same
        if tally:
            n = sum(int(np.prod(s)) for _, s, _ in tm.parameter_table(cfg))
            detail = "" if same else first_difference(mine, theirs)
            tally.check(same, f"init {layout} L={L} C={C} V={V} ablations={ablations} setting={cfg.setting} "
                              f"seed={seed}: {n} parameters, the checkpoint byte for byte", detail)
    return differed


def first_difference(a, b):
    cfg_a, pa = tm.read_checkpoint(a)
    _, pb = tm.read_checkpoint(b)
    for name in pa:
        if not np.array_equal(pa[name], pb[name]):
            i = int(np.flatnonzero(pa[name].ravel() != pb[name].ravel())[0])
            return f"first in {name}[{i}]: {pa[name].ravel()[i]!r} against {pb[name].ravel()[i]!r}"
    return "the headers differ"


# ------------------------------------------------------------------------------------------------------------------
# 3: training

def read_main_log(path):
    """the C++'s main.log -> {step: {"trl": .., "norm": .., "lr": ..}} and {step: tel}"""
    steps, vals = {}, {}
    for line in open(path):
        f = dict(kv.split(":", 1) for kv in line.split())
        s = int(f["s"])
        if "tel" in f:
            vals[s] = float(f["tel"])
        elif "trl" in f:
            steps[s] = {k: float(f[k]) for k in ("trl", "norm", "lr")}
    return steps, vals


def cpp_train(tmp, init, layout, accum):
    out = os.path.join(tmp, f"cpp-{layout}")
    f = TRAIN_FLAGS
    r = run([TRAINER, "-e", init, "-b", B, "-t", T, "-d", B * T * accum, "-l", f["lr"], "-u", f["warmup"], "-q",
             f["final_frac"], "-c", f["weight_decay"], "--grad-clip", f["grad_clip"], "-x", STEPS, "-v",
             f["val_every"], "-m", f["val_steps"], "-s", 0, "-i", TRAIN_SHARD, "-j", VAL_SHARD, "-o", out])
    if r.returncode != 0:
        raise RuntimeError(f"./reference_cpu -e {init}: {r.stderr.strip()[-300:]}")
    steps, vals = read_main_log(os.path.join(out, "main.log"))
    return steps, vals, os.path.join(out, f"model_{STEPS:08d}.bin")


def twin_train(init, accum, twin=None):
    """the twin's (or a planted mistake's) 6 steps from the checkpoint init: (cfg, params, steps, validations)"""
    tw = twin or tm
    cfg, params = tw.read_checkpoint(init)
    params = tw.as_tensors(params)
    f = TRAIN_FLAGS
    log = tw.train(cfg, params, tw.Shards(TRAIN_SHARD, B, T), STEPS, f["lr"], f["warmup"], f["final_frac"],
                   f["weight_decay"], f["grad_clip"], accum, tw.Shards(VAL_SHARD, B, T), f["val_every"],
                   f["val_steps"])
    steps = {r["step"]: r for r in log if "trl" in r}
    vals = {r["step"]: r["tel"] for r in log if "tel" in r}
    return cfg, params, steps, vals


def compare_training(tally, case, cpp, twin, cpp_params):
    """one case's comparisons into tally (None: count only); returns the number that failed"""
    (c_steps, c_vals), (cfg, params, t_steps, t_vals) = cpp, twin
    failed = 0

    def check(ok, what, detail):
        nonlocal failed
        failed += not ok
        if tally:
            tally.check(ok, f"train {case}: {what}", detail)
    worst = {"trl": 0.0, "norm": 0.0, "lr": 0.0}
    ok = {"trl": True, "norm": True, "lr": True}
    for s in range(1, STEPS + 1):
        if s not in c_steps or s not in t_steps:
            check(False, f"step {s} in both logs", "missing")
            return failed + 1
        c, t = c_steps[s], t_steps[s]
        e = abs(t["trl"] - c["trl"]) / abs(c["trl"])
        worst["trl"], ok["trl"] = max(worst["trl"], e), ok["trl"] and e < STEP_LOSS_BOUND
        e = abs(t["norm"] - c["norm"])
        worst["norm"], ok["norm"] = max(worst["norm"], e), ok["norm"] and e < NORM_ABS + NORM_REL * c["norm"]
        e = abs(t["lr"] - c["lr"]) / c["lr"]
        worst["lr"], ok["lr"] = max(worst["lr"], e), ok["lr"] and e < LR_REL
    check(ok["trl"], f"the {STEPS} steps' train losses", f"worst relative {worst['trl']:.1e} (bound "
          f"{STEP_LOSS_BOUND:.0e})")
    check(ok["norm"], f"the {STEPS} steps' gradient norms", f"worst absolute {worst['norm']:.1e} (bound "
          f"{NORM_ABS:.0e} + {NORM_REL:.0e} relative)")
    check(ok["lr"], f"the {STEPS} steps' learning rates", f"worst relative {worst['lr']:.1e} (bound {LR_REL:.0e})")
    e = max(abs(t_vals.get(s, math.inf) - v) / v for s, v in c_vals.items())
    check(sorted(c_vals) == sorted(t_vals) and e < STEP_LOSS_BOUND, f"the validation losses at steps "
          f"{sorted(c_vals)}", f"worst relative {e:.1e} (bound {STEP_LOSS_BOUND:.0e})")
    worst_p, worst_name, bad = 0.0, "", []
    for name, p in params.items():
        if name in ZERO_IN_EXACT_ARITHMETIC:
            continue
        e = rel_err(*(compared_part(name, a, cfg) for a in (p.detach().numpy(), cpp_params[name])))
        if e > worst_p:
            worst_p, worst_name = e, name
        if not e < PARAM_BOUND:
            bad.append(f"{name} {e:.1e}")
    aside = ["qkvb's key third" if cfg.layout not in model.QKV_NORM else "lnkb"]
    check(not bad, f"every parameter after {STEPS} steps ({aside[0]} aside: zero gradient in exact arithmetic)", f"worst {worst_name} {worst_p:.1e} (bound {PARAM_BOUND:.0e})"
          + (f"; over: {', '.join(bad[:4])}" if bad else ""))
    return failed


def compared_part(name, a, cfg):
    """what of tensor `name` the parameter comparison holds: all of it but the key biases where the attention has
    no QKV-norm (qkvb's rows C..2C of each block: a shift of every key adds a constant to each score row of the
    softmax, so their gradient is zero in exact arithmetic)"""
    if name == "qkvb" and cfg.layout not in model.QKV_NORM:
        return np.concatenate([a[:, :cfg.C], a[:, 2 * cfg.C:]], axis=1)
    return a


def cpp_val_loss(path):
    r = run([TRAINER, "-e", path, "-x", 0, "-v", 1, "-m", TRAIN_FLAGS["val_steps"], "-b", B, "-t", T, "-s", 0,
             "-i", TRAIN_SHARD, "-j", VAL_SHARD])
    for line in r.stdout.splitlines():
        if line.startswith("val loss "):
            return float(line.split()[2])
    raise RuntimeError(f"./reference_cpu -e {path} printed no val loss: {r.stderr.strip()[-300:]}")


def twin_val_loss(path):
    cfg, params = tm.read_checkpoint(path)
    gpt = model.GPT(cfg, {n: torch.tensor(a) for n, a in params.items()})
    return tm.validation_loss(gpt, tm.Shards(VAL_SHARD, B, T), TRAIN_FLAGS["val_steps"])


def check_training(tally, tmp):
    """section 3; returns what the planted mistakes of section 5 are compared with"""
    results = {}
    for layout, accum in TRAIN_CASES:
        init = cpp_init(tmp, layout, SHAPE["L"], SHAPE["C"], SHAPE["NH"], SHAPE["V"], 0, None, 1337, SHAPE["maxT"])
        case = f"{layout}" + (f", {accum} micro-batches a step" if accum > 1 else "")
        c_steps, c_vals, c_ckpt = cpp_train(tmp, init, layout, accum)
        _, cpp_params = tm.read_checkpoint(c_ckpt)
        twin = twin_train(init, accum)
        compare_training(tally, case, (c_steps, c_vals), twin, cpp_params)
        cfg, params, _, t_vals = twin
        # both ways: the twin's final checkpoint in the C++, the C++'s in the twin
        mine = os.path.join(tmp, f"twin-{layout}-{STEPS}.bin")
        tm.write_checkpoint(mine, cfg, params)
        e = abs(cpp_val_loss(mine) - t_vals[STEPS]) / t_vals[STEPS]
        tally.check(e < OUT_BOUND, f"load {case}: the twin's checkpoint after {STEPS} steps in ./reference_cpu, "
                    "its validation loss", f"relative {e:.1e} (bound {OUT_BOUND:.0e})")
        e = abs(twin_val_loss(c_ckpt) - c_vals[STEPS]) / c_vals[STEPS]
        tally.check(e < OUT_BOUND, f"load {case}: the C++'s checkpoint after {STEPS} steps in the twin, its "
                    "validation loss", f"relative {e:.1e} (bound {OUT_BOUND:.0e})")
        _, via_table = model.load_checkpoint(c_ckpt, TRAINER)
        _, mine_read = tm.read_checkpoint(c_ckpt)
        tally.check(list(via_table) == list(mine_read) and all(np.array_equal(via_table[n], mine_read[n])
                                                               for n in mine_read),
                    f"load {case}: read_checkpoint reads what docs/model.py's load_checkpoint (--print-tensors) reads")
        results[layout] = (init, accum, (c_steps, c_vals), cpp_params)
    return results


# ------------------------------------------------------------------------------------------------------------------
# 4: the program

def check_program(tally, tmp):
    out = os.path.join(tmp, "twin-run")
    cmd = [sys.executable, TWIN, "--norm", "siamese", "--layers", 2, "--channels", 32, "--heads", 4,
           "--max-seq-len", 64, "-b", B, "-t", T, "-l", 1e-2, "-u", 1, "-x", 3, "-v", 3, "-m", 1, "-o", out,
           "--threads", 1]
    r = run(cmd)
    ckpt = os.path.join(out, "model_00000003.bin")
    ok = tally.check(r.returncode == 0 and os.path.isfile(ckpt), "program: docs/train_model.py trains and writes "
                     "-o's main.log and model_00000003.bin", r.stderr.strip()[-300:])
    if ok:
        steps, vals = read_main_log(os.path.join(out, "main.log"))
        tally.check(sorted(steps) == [1, 2, 3] and sorted(vals) == [0, 3], "program: main.log in the C++'s format "
                    "(s:N trl: norm: lr: ms:, s:N tel:)", f"steps {sorted(steps)}, validations {sorted(vals)}")
        e = abs(cpp_val_loss_at(ckpt, 1) - vals[3]) / vals[3]
        tally.check(e < OUT_BOUND, "program: ./reference_cpu -e model_00000003.bin: the same validation loss",
                    f"relative {e:.1e}")
        try:
            tm.main([str(a) for a in cmd[2:]])
            said = "no error"
        except tm.Error as e:
            said = str(e)
        tally.check("--start-over" in said and sorted(os.listdir(out)) == ["main.log", "model_00000003.bin"],
                    "program: an -o that holds a run is refused without --start-over, and left as it was", said)
    truncated = os.path.join(tmp, "truncated.bin")
    nan = os.path.join(tmp, "nan.bin")
    if ok:
        data = open(ckpt, "rb").read()
        open(truncated, "wb").write(data[:-4])
        a = bytearray(data)
        a[4 * 256 + 8:4 * 256 + 12] = np.array([np.nan], dtype="<f4").tobytes()
        open(nan, "wb").write(bytes(a))
    errors = [
        (["-i", os.path.join(tmp, "none_*.bin")], "no token shards match"),
        (["-e", truncated, "-x", 0], "truncated"),
        (["-e", nan, "-x", 0], "non-finite parameter at index 2"),
        (["-e", TRAIN_SHARD, "-x", 0], "not a model checkpoint"),
        (["-e", os.path.join(tmp, "missing.bin")], "cannot read"),
        (["--layers", "two"], "is not an integer"),
        (["--bogus", 1], "unknown flag"),
        (["-l", "nan"], "must be finite"),
        (["--norm", "mix", "--layers", 3], "gives no Post-LN block"),
        (["--channels", 30, "--heads", 4], "divisible by heads"),
        (["-t", 2048, "--max-seq-len", 1024], "exceeds the model's maximum"),
    ]
    # the first through the program (its exit status and its one line), the others through main() in this process
    # (the same Error, which the program prints as that line): each Python start imports PyTorch, seconds
    for i, (flags, said) in enumerate(errors):
        before = set(os.listdir(tmp))
        argv = ["-x", 1, "-v", 0] + flags
        if i == 0:
            r = run([sys.executable, TWIN] + argv)
            lines = r.stderr.strip().splitlines()
            ok = r.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: ") and not r.stdout
            message = r.stderr.strip() if ok else f"exit {r.returncode}: {r.stderr.strip()[-200:]}"
        else:
            try:
                tm.main([str(a) for a in argv])
                ok, message = False, "no error"
            except tm.Error as e:
                ok, message = "\n" not in str(e), f"error: {e}"
        tally.check(ok and said in message and set(os.listdir(tmp)) == before,
                    f"program error: {' '.join(map(str, flags))} -> one line with '{said}'" +
                    (", exit 1" if i == 0 else "") + ", nothing left", message)


def cpp_val_loss_at(path, batches):
    r = run([TRAINER, "-e", path, "-x", 0, "-v", 1, "-m", batches, "-b", B, "-t", T, "-s", 0, "-i", TRAIN_SHARD,
             "-j", VAL_SHARD])
    lines = [line for line in r.stdout.splitlines() if line.startswith("val loss ")]
    if not lines:
        raise RuntimeError(f"./reference_cpu -e {path}: {r.stderr.strip()[-300:]}")
    return float(lines[0].split()[2])


# ------------------------------------------------------------------------------------------------------------------
# 5: planted mistakes: each an edit of docs/train_model.py's own text (one line), loaded as a module of its own and
# compared as in sections 2 and 3; an edit whose text is no longer in the file fails its check and says so

MUTATIONS = [  # (name, the case it runs on, the text, what it becomes)
    ("init-sin", "init", "np.cos(6.283185307179586 * u2)", "np.sin(6.283185307179586 * u2)"),
    ("init-proj-std", "init", 'std = 0.02 / math.sqrt(2.0 * cfg.L) if name in ("attprojw", "fcprojw") else 0.02',
     "std = 0.02"),
    ("init-one-seed", "init", "normals(drawn, std, tensor_seed(seed, name))", "normals(drawn, std, seed)"),
    ("init-padded-rows-drawn", "init-padded", 'drawn = cfg.V * cfg.C if name == "wte" else size', "drawn = size"),
    ("batch-skips-a-token", "pre", "self.position += need - 1", "self.position += need"),
    ("val-not-reset", "pre", "    val.reset()\n    total = 0.0", "    total = 0.0"),
    ("warmup-from-0", "pre", "return max_lr * (step + 1) / warmup", "return max_lr * step / warmup"),
    ("no-cosine", "pre", "0.5 * (1.0 + math.cos(math.pi * progress))", "1.0"),
    ("no-bias-correction", "pre", "bc1, bc2 = float(one - np.float32(b1 ** t)), float(one - np.float32(b2 ** t))",
     "bc1, bc2 = 1.0, 1.0"),
    ("eps-in-sqrt", "pre", "((v / bc2).sqrt() + self.eps)", "((v / bc2 + self.eps).sqrt())"),
    ("beta2-0.999", "pre", "beta2=0.95", "beta2=0.999"),
    ("decay-all", "pre", "wd = self.weight_decay if name in self.decay else 0.0", "wd = self.weight_decay"),
    ("decay-none", "pre", "wd = self.weight_decay if name in self.decay else 0.0", "wd = 0.0"),
    ("no-clip", "pre", "grad_scale = grad_clip / norm if grad_clip > 0 and norm > grad_clip else 1.0",
     "grad_scale = 1.0"),
    ("clip-always", "pre", "grad_scale = grad_clip / norm if grad_clip > 0 and norm > grad_clip else 1.0",
     "grad_scale = grad_clip / norm"),
    ("micro-batches-summed", "siamese", "(micro / accum).backward()", "micro.backward()"),
]


def planted_module(old, new):
    """docs/train_model.py with `old` (which must occur once) replaced by `new`, as a module of its own"""
    src = open(TWIN).read()
    if src.count(old) != 1:
        raise RuntimeError(f"the planted mistake's text occurs {src.count(old)} times in docs/train_model.py: "
                           f"{old!r}")
    module = types.ModuleType("train_model_planted")
    module.__file__ = TWIN
    path = list(sys.path)
    try:
        exec(compile(src.replace(old, new), TWIN, "exec"), module.__dict__)
    finally:
        sys.path[:] = path
    return module


def check_planted(tally, tmp, results):
    print("planted mistakes in docs/train_model.py (each must make a comparison fail):")
    cases = {"init": [("pre", 4, 32, 4, 256, 0, None, 1337)], "init-padded": [("siamese", 2, 48, 3, 300, 0, None, 7)]}
    for name, case, old, new in MUTATIONS:
        try:
            tw = planted_module(old, new)
        except RuntimeError as e:
            tally.check(False, f"planted {name}: {e}")
            continue
        if case in cases:
            caught = check_init(None, tmp, cases[case], twin=tw)
        else:
            init, accum, cpp, cpp_params = results[case]
            caught = compare_training(None, case, cpp, twin_train(init, accum, twin=tw), cpp_params)
        tally.check(caught > 0, f"planted {name:24s} on {case:12s}: " + (f"caught ({caught} comparisons failed)"
                                                                          if caught else "NOT CAUGHT"))


def main():
    global np, torch, tm, model
    verbose = "-v" in sys.argv[1:]
    if [a for a in sys.argv[1:] if a != "-v"]:
        sys.exit("usage: tests/twin_check.py [-v]")
    start = time.time()
    try:
        import numpy as np
        import torch
        sys.dont_write_bytecode = True
        sys.path.insert(0, os.path.join(REPO, "docs"))
        import train_model as tm
        import model
    except ImportError as e:
        print(f"twin_check: cannot import PyTorch/NumPy with {sys.executable} ({e}); Debian: python3-torch")
        print("0 passed, 1 failed")
        sys.exit(1)
    torch.set_num_threads(1)
    tally = Tally(verbose)
    times = []
    if not os.path.exists(TRAINER):
        subprocess.run(["make", "reference_cpu"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    for path in (TRAINER, TRAIN_SHARD, VAL_SHARD):
        if not os.path.exists(path):
            print(f"twin_check: {os.path.relpath(path, REPO)} is missing (make reference_cpu data)")
            print("0 passed, 1 failed")
            sys.exit(1)
    with tempfile.TemporaryDirectory(prefix="twin_check_") as tmp:
        try:
            for section in ("tables", "init", "training", "program", "planted"):
                t0 = time.time()
                if section == "tables":
                    check_tables(tally)
                elif section == "init":
                    check_init(tally, tmp)
                elif section == "training":
                    results = check_training(tally, tmp)
                elif section == "program":
                    check_program(tally, tmp)
                else:
                    check_planted(tally, tmp, results)
                times.append(f"{section} {time.time() - t0:.1f} s")
        except RuntimeError as e:
            tally.check(False, f"error: {e}")
    if tally.failures:
        print(f"failed: {', '.join(tally.failures[:10])}{' ...' if len(tally.failures) > 10 else ''}")
    print(f"({time.time() - start:.1f} s: {', '.join(times)})")
    summary = f"{tally.passed} passed, {tally.failed} failed"
    print(summary + (f", {tally.skipped} skipped" if tally.skipped else ""))
    sys.exit(0 if tally.failed == 0 and tally.passed > 0 else 1)


if __name__ == "__main__":
    main()
