#!/usr/bin/env python3
"""An independent PyTorch implementation of the layouts, checked against the float32 CPU reference.

For each case (pre, post, siamese, siamese without depth scaling, siamese without LN_in, Mix-LN with its first
block Post-LN, DeepNorm) the C++ tool
tests/ref_tool writes a tiny random model (model.bin, llm.c's checkpoint format), a batch, the reference's loss,
logits and gradients (out.bin) and its parameters after one AdamW step (after_step.bin); see the top of
tests/ref_tool.cpp for the file layouts. This script builds the model in PyTorch from the math of the README, not
from the C++ code. What it takes from the program is where each tensor lies in the files: the tensor table of
`./reference_cpu -e model.bin --print-tensors` (names, shapes, offsets in checkpoint order), the one table every
tool reads instead of keeping a copy. It compares:

  - the loss, the logits over the real vocabulary and the padded logits (those exist, but take no probability: a
    softmax over all Vp columns would change the loss), the global gradient norm;
  - every parameter gradient by name (autograd), and that the padded rows of wte get exactly zero gradient;
  - the parameters after one AdamW step, computed here from the formula (decoupled weight decay on the 2-D weight
    matrices only, bias correction, the gradient scaled by min(1, clip / global norm) first), from the reference's
    own parameters and gradients so that this check isolates the optimizer; torch.optim.AdamW with one parameter
    group per decay rule gives a second opinion.

Every comparison is a relative error ||a - b|| / ||b|| over a whole tensor (b = PyTorch); where b is exactly zero
(LN_in under the no-LN_in ablation) a must be exactly zero too. The output is a table and a last line
"N passed, N failed"; the exit status is 0 only if everything passed.

    /usr/bin/python3 tests/torch_check.py [--dtype float64] [--mutate NAME]

--dtype float64 runs the PyTorch side in float64 (then the errors are the reference's own float32 rounding).
--mutate NAME deliberately breaks the PyTorch side (or its optimizer) to show that the checks catch it; the run must
then FAIL. Names: see MUTATIONS below.
"""
import glob
import json
import math
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(REPO, "tests", "ref_tool")
TRAINER = os.path.join(REPO, "reference_cpu")  # --print-tensors: the tensor table of a checkpoint
HOST = sorted(glob.glob(os.path.join(REPO, "host", "*.h")))
PROGRAMS = {TOOL: ["tests/ref_tool.cpp", "reference_cpu.cpp"], TRAINER: ["reference_cpu.cpp"]}  # Makefile prerequisites

# (layout, ablations, the layout's own setting: header[10]); ref_tool's model has L = 2, so mix's P = 1 is the
# post -> pre change in the middle
CASES = [("pre", 0, 0), ("post", 0, 0), ("siamese", 0, 0), ("siamese", 1, 0), ("siamese", 2, 0), ("mix", 0, 1),
         ("deepnorm", 0, 0)]
NO_DEPTH_SCALE, NO_LN_IN = 1, 2

# The AdamW settings of ref_tool (see the top of tests/ref_tool.cpp).
LR, BETA1, BETA2, EPS, WEIGHT_DECAY, GRAD_CLIP = 1e-3, 0.9, 0.95, 1e-8, 0.1, 1.0
DECAY = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}  # the 2-D weight matrices (stacked over layers)

# Bounds. Both sides compute in float32 (unit roundoff u = 6e-8) the same sums in different orders (SIMD lanes and
# register tiles in the reference, BLAS and autograd here). A float32 sum of n terms is off by up to ~n*u relative to
# the sum of the |terms|, typically ~sqrt(n)*u; the longest sums here have ~C..4C = 32..128 terms (the dot products of
# the matrix products and LayerNorms; the wte gradient sums B*T = 16 rows twice), and some ten layers of such ops
# feed each gradient. Measured: the worst gradient tensor is at 6e-7, logits and loss at 2e-7, and the same when this
# side runs in float64 (--dtype float64), so that is the reference's own float32 rounding. 1e-5 leaves a margin of
# more than 15x for other compilers and BLAS libraries, and stays 1000x below what an actual mistake does: a missing
# 1/c_l, a wrong LayerNorm on one stream, an exact GELU or a sign flip gives errors of order 1e-3..1.
GRAD_BOUND = 1e-5   # gradients and the gradient norm
OUT_BOUND = 1e-5    # loss and logits (shorter error chains than the gradients; the same bound for simplicity)
# After one step the parameters differ by the rounding of p - lr * update: both sides compute it in float32 from
# the same inputs, so a parameter lands at most an ulp or two apart, ~1e-7 relative (measured: <= 6e-8). The
# smallest effect of a mistake: weight decay missing or applied to the wrong tensors moves a parameter by
# lr * wd = 1e-4 relative, a wrong bias correction or step size by ~lr / |p| >= 1e-3, no clipping by 1e-4..1e-3
# (at t = 1 Adam's update g / (|g| + eps) sees the gradient's scale only through eps, on its smallest entries).
# 1e-6 sits in between with a 10x margin on each side.
# The step starts from the reference's own gradients, not from ours: a few gradient entries are mathematically zero
# (the key biases: adding a constant to every score of a softmax row changes nothing), so both sides hold rounding
# noise of ~1e-13 there, and Adam turns noise into an update of lr * noise / (|noise| + eps), different on each side.
STEP_BOUND = 1e-6

MUTATIONS = {
    "siamese-sign": "x = xh - z/c_l instead of + z/c_l",
    "no-depth-scale": "drops 1/c_l in the X stream (c_l = 1 always)",
    "wrong-ln-y": "normalizes the Y stream with LN_x's parameters",
    "ln-in-always": "applies LN_in even under the no-LN_in ablation",
    "post-no-final": "post: adds a final LayerNorm (lnfw/lnfb absent: uses ln2 of the last block)",
    "padded-softmax": "softmax over all Vp logits instead of the real V",
    "gelu-exact": "the exact (erf) GELU instead of the tanh approximation",
    "decay-all": "AdamW decays every tensor, biases and LayerNorms too",
    "no-bias-correction": "AdamW without bias correction",
    "no-clip": "AdamW without gradient clipping",
    "mix-all-pre": "mix: every block Pre-LN (the Post-LN blocks ignored)",
    "deepnorm-alpha-1": "deepnorm: alpha = 1 (Post-LN) instead of (2L)^(1/4)",
}


def report_and_exit(passed, failed, message=None):
    if message:
        print(message)
    print(f"{passed} passed, {failed} failed")
    sys.exit(0 if failed == 0 and passed > 0 else 1)


def parse_args(argv):
    dtype, mutate = "float32", None
    i = 0
    while i < len(argv):
        if argv[i] == "--dtype" and i + 1 < len(argv) and argv[i + 1] in ("float32", "float64"):
            dtype = argv[i + 1]
            i += 2
        elif argv[i] == "--mutate" and i + 1 < len(argv) and argv[i + 1] in MUTATIONS:
            mutate = argv[i + 1]
            i += 2
        else:
            names = "\n".join(f"  {k:20s} {v}" for k, v in MUTATIONS.items())
            print(f"usage: torch_check.py [--dtype float32|float64] [--mutate NAME]\nmutations:\n{names}",
                  file=sys.stderr)
            sys.exit(2)
    return dtype, mutate


# ------------------------------------------------------------------------------------------------------------------
# the C++ side: build the tool if needed, run it, read its files

def ensure_programs():
    """Builds tests/ref_tool and ./reference_cpu with make where missing or older than a source; an error or None."""
    for program, sources in PROGRAMS.items():
        paths = [os.path.join(REPO, s) for s in sources] + HOST
        newest = max(os.path.getmtime(p) for p in paths if os.path.exists(p))
        if os.path.exists(program) and os.path.getmtime(program) >= newest:
            continue
        target = os.path.relpath(program, REPO)
        try:
            r = subprocess.run(["make", target], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               universal_newlines=True)
        except OSError as e:
            return f"torch_check: cannot run make to build {target} ({e})"
        if r.returncode != 0 or not os.path.exists(program):
            tail = "\n".join(r.stdout.strip().splitlines()[-15:])
            return f"torch_check: 'make {target}' failed (exit {r.returncode}):\n{tail}"
    return None


def tensor_table(path):
    """The program's tensor table of a checkpoint (./reference_cpu -e PATH --print-tensors): its configuration and
    [(name, shape)] in checkpoint order, each offset checked to follow the one before (so the list is the file)."""
    r = subprocess.run([TRAINER, "-e", path, "--print-tensors"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    if r.returncode != 0:
        raise ValueError(f"{TRAINER} -e {path} --print-tensors: {r.stderr.strip()}")
    table = json.loads(r.stdout)
    shapes, offset = [], 0
    for t in table["tensors"]:
        if t["offset"] != offset:
            raise ValueError(f"{path}: tensor {t['name']} at offset {t['offset']}, expected {offset}")
        shapes.append((t["name"], tuple(t["shape"])))
        offset += int(np.prod(t["shape"]))
    return table, shapes


def split_tensors(flat, shapes, what):
    total = sum(int(np.prod(s)) for _, s in shapes)
    if flat.size != total:
        raise ValueError(f"{what}: {flat.size} floats, but the layout's tensors need {total}")
    out, off = {}, 0
    for name, shape in shapes:
        n = int(np.prod(shape))
        out[name] = flat[off:off + n].reshape(shape)
        off += n
    return out


def read_checkpoint(path):
    table, shapes = tensor_table(path)
    raw = open(path, "rb").read()
    cfg = dict(maxT=table["max_seq_len"], V=table["vocab_size"], L=table["num_layers"], NH=table["num_heads"],
               C=table["channels"], Vp=table["padded_vocab_size"], layout=table["layout"],
               ablations=table["ablations"], setting=table["layout_setting"])
    params = split_tensors(np.frombuffer(raw[4 * table["header_ints"]:], dtype="<f4"), shapes, path)
    return cfg, shapes, params


def read_batch(path):
    a = np.fromfile(path, dtype="<i4")
    B, T = int(a[0]), int(a[1])
    if a.size != 2 + 2 * B * T:
        raise ValueError(f"{path}: {a.size} ints, expected {2 + 2 * B * T}")
    return a[2:2 + B * T].reshape(B, T), a[2 + B * T:].reshape(B, T)


def read_outputs(path, shapes):
    raw = open(path, "rb").read()
    B, T, Vp, P = (int(v) for v in np.frombuffer(raw[:16], dtype="<i4"))
    f = np.frombuffer(raw[16:], dtype="<f4")
    if f.size != 2 + B * T * Vp + P:
        raise ValueError(f"{path}: {f.size} floats, expected {2 + B * T * Vp + P}")
    loss, norm = float(f[0]), float(f[1])
    logits = f[2:2 + B * T * Vp].reshape(B, T, Vp)
    grads = split_tensors(f[2 + B * T * Vp:], shapes, path)
    return loss, norm, logits, grads


# ------------------------------------------------------------------------------------------------------------------
# the PyTorch model, from the README's math

def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5)


def attention(u, p, l, NH, mutate):
    B, T, C = u.shape
    hs = C // NH
    q, k, v = F.linear(u, p["qkvw"][l], p["qkvb"][l]).split(C, dim=-1)
    q, k, v = (t.reshape(B, T, NH, hs).transpose(1, 2) for t in (q, k, v))  # (B, NH, T, hs)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    att = scores.masked_fill(~causal, float("-inf")).softmax(dim=-1)
    y = (att @ v).transpose(1, 2).reshape(B, T, C)
    return F.linear(y, p["attprojw"][l], p["attprojb"][l])


def mlp(u, p, l, mutate):
    h = F.linear(u, p["fcw"][l], p["fcb"][l])
    h = F.gelu(h) if mutate == "gelu-exact" else F.gelu(h, approximate="tanh")
    return F.linear(h, p["fcprojw"][l], p["fcprojb"][l])


def sublayers(p, l, NH, mutate):
    """(k, F) for the two sub-layers of block l: k = 1 attention (ln1*), k = 2 MLP (ln2*)."""
    return [(1, lambda u: attention(u, p, l, NH, mutate)), (2, lambda u: mlp(u, p, l, mutate))]


def forward(cfg, p, inputs, mutate=None):
    """The logits (B, T, Vp) of the model with parameters p on inputs (B, T)."""
    L, NH, layout = cfg["L"], cfg["NH"], cfg["layout"]
    T = inputs.shape[1]
    h0 = p["wte"][inputs] + p["wpe"][:T]
    if layout == "pre":
        x = h0
        for l in range(L):
            for k, Fn in sublayers(p, l, NH, mutate):
                x = x + Fn(layer_norm(x, p[f"ln{k}w"][l], p[f"ln{k}b"][l]))
        hf = layer_norm(x, p["lnfw"], p["lnfb"])
    elif layout == "post":
        x = h0
        for l in range(L):
            for k, Fn in sublayers(p, l, NH, mutate):
                x = layer_norm(x + Fn(x), p[f"ln{k}w"][l], p[f"ln{k}b"][l])
        hf = x
        if mutate == "post-no-final":
            hf = layer_norm(x, p["ln2w"][L - 1], p["ln2b"][L - 1])
    elif layout == "mix":  # Mix-LN: the first P blocks Post-LN, the rest Pre-LN, Pre-LN's final LayerNorm
        P = 0 if mutate == "mix-all-pre" else cfg["setting"]
        x = h0
        for l in range(L):
            for k, Fn in sublayers(p, l, NH, mutate):
                w, b = p[f"ln{k}w"][l], p[f"ln{k}b"][l]
                x = layer_norm(x + Fn(x), w, b) if l < P else x + Fn(layer_norm(x, w, b))
        hf = layer_norm(x, p["lnfw"], p["lnfb"])
    elif layout == "deepnorm":  # DeepNet: x = LN(alpha x + F(x)), alpha = (2L)^(1/4); no final LayerNorm
        alpha = 1.0 if mutate == "deepnorm-alpha-1" else (2.0 * L) ** 0.25
        x = h0
        for l in range(L):
            for k, Fn in sublayers(p, l, NH, mutate):
                x = layer_norm(alpha * x + Fn(x), p[f"ln{k}w"][l], p[f"ln{k}b"][l])
        hf = x
    elif layout == "siamese":
        ablations = cfg["ablations"]
        x = y = h0
        for l in range(L):
            c = 1.0 if ablations & NO_DEPTH_SCALE or mutate == "no-depth-scale" else math.sqrt(2 * (l + 1))
            for k, Fn in sublayers(p, l, NH, mutate):
                xh = layer_norm(x, p[f"ln{k}xw"][l], p[f"ln{k}xb"][l])
                ys = "x" if mutate == "wrong-ln-y" else "y"
                s = xh + layer_norm(y, p[f"ln{k}{ys}w"][l], p[f"ln{k}{ys}b"][l])
                if not ablations & NO_LN_IN or mutate == "ln-in-always":
                    s = layer_norm(s, p[f"ln{k}iw"][l], p[f"ln{k}ib"][l])
                z = Fn(s)
                x = xh - z / c if mutate == "siamese-sign" else xh + z / c
                y = y + z
        hf = layer_norm(layer_norm(x, p["lnfxw"], p["lnfxb"]) + layer_norm(y, p["lnfyw"], p["lnfyb"]),
                        p["lnfw"], p["lnfb"])
    else:
        raise ValueError(f"no PyTorch model of the layout {layout}")
    return hf @ p["wte"].t()  # tied output projection: (B, T, Vp), the padded columns included


def mean_loss(cfg, logits, targets, mutate=None):
    V = cfg["V"] if mutate != "padded-softmax" else cfg["Vp"]
    return F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1))


# ------------------------------------------------------------------------------------------------------------------
# AdamW, one step from zero moments, from the formula

def adamw_step(params, grads, t=1, mutate=None):
    norm = torch.sqrt(sum((g.double() ** 2).sum() for g in grads.values()))
    scale = 1.0 if mutate == "no-clip" else min(1.0, GRAD_CLIP / float(norm))
    bc1, bc2 = (1.0, 1.0) if mutate == "no-bias-correction" else (1 - BETA1 ** t, 1 - BETA2 ** t)
    out = {}
    for name, p in params.items():
        g = grads[name] * scale
        m = (1 - BETA1) * g  # the moments start at zero
        v = (1 - BETA2) * g * g
        mhat, vhat = m / bc1, v / bc2
        wd = WEIGHT_DECAY if name in DECAY or mutate == "decay-all" else 0.0
        out[name] = p - LR * (mhat / (vhat.sqrt() + EPS) + wd * p)
    return out


def torch_optim_adamw_step(params, grads):
    ps = {n: torch.nn.Parameter(p.clone()) for n, p in params.items()}
    for n, p in ps.items():
        p.grad = grads[n].clone()
    torch.nn.utils.clip_grad_norm_(list(ps.values()), GRAD_CLIP)
    groups = [{"params": [p for n, p in ps.items() if n in DECAY], "weight_decay": WEIGHT_DECAY},
              {"params": [p for n, p in ps.items() if n not in DECAY], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=LR, betas=(BETA1, BETA2), eps=EPS)
    opt.step()
    return {n: p.detach() for n, p in ps.items()}


# ------------------------------------------------------------------------------------------------------------------
# the checks

def rel_err(a, b):
    """||a - b|| / ||b|| in float64; where b is exactly zero, 0 if a is too, else inf."""
    a = torch.as_tensor(np.array(a) if isinstance(a, np.ndarray) else a).double()
    b = torch.as_tensor(np.array(b) if isinstance(b, np.ndarray) else b).double()
    nb = float(b.norm())
    nd = float((a - b).norm())
    if nb == 0:
        return 0.0 if float(a.norm()) == 0 else math.inf
    return nd / nb


class Tally:
    def __init__(self):
        self.passed = self.failed = 0
        self.failures = []

    def check(self, ok, what):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            self.failures.append(what)
        return ok


def fmt(err, bound):
    mark = "" if err < bound else " FAIL"
    return f"{err:9.1e}{mark:5s}"


def run_case(tmp, layout, ablations, setting, dtype, mutate, tally):
    case = layout if ablations == 0 else f"{layout}+{ablations}"
    d = os.path.join(tmp, case)
    os.makedirs(d)
    r = subprocess.run([TOOL, d, layout, str(ablations), str(setting)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True)
    if r.returncode != 0:
        tally.check(False, f"{case}: ref_tool failed")
        print(f"{case:10s} ref_tool failed (exit {r.returncode}): {r.stdout.strip()}")
        return
    cfg, shapes, p_np = read_checkpoint(os.path.join(d, "model.bin"))
    if cfg["layout"] != layout or cfg["ablations"] != ablations or cfg["setting"] != setting:
        tally.check(False, f"{case}: the checkpoint header says {cfg['layout']}+{cfg['ablations']}")
        print(f"{case:10s} checkpoint header says layout {cfg['layout']}, ablations {cfg['ablations']}")
        return
    inputs_np, targets_np = read_batch(os.path.join(d, "batch.bin"))
    loss_c, norm_c, logits_c, grads_c = read_outputs(os.path.join(d, "out.bin"), shapes)
    cfg_after, _, after_c = read_checkpoint(os.path.join(d, "after_step.bin"))
    if cfg_after != cfg:
        raise ValueError(f"after_step.bin's header {cfg_after} differs from model.bin's {cfg}")
    V = cfg["V"]

    # forward and backward in PyTorch
    params = {n: torch.tensor(a, dtype=dtype, requires_grad=True) for n, a in p_np.items()}
    inputs = torch.tensor(inputs_np, dtype=torch.long)
    targets = torch.tensor(targets_np, dtype=torch.long)
    logits = forward(cfg, params, inputs, mutate)
    loss = mean_loss(cfg, logits, targets, mutate)
    names = [n for n, _ in shapes]
    gs = torch.autograd.grad(loss, [params[n] for n in names], allow_unused=True)
    grads = {n: (g if g is not None else torch.zeros_like(params[n])).detach() for n, g in zip(names, gs)}
    norm = math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads.values()))

    def row(tensor, err, bound, extra=""):
        tally.check(err < bound, f"{case} {tensor}")
        print(f"{case:10s} {tensor:22s} {fmt(err, bound)}{extra}")

    row("loss", abs(loss_c - float(loss)) / abs(float(loss)), OUT_BOUND)
    row("logits[:V]", rel_err(logits_c[..., :V], logits.detach()[..., :V]), OUT_BOUND)
    row("logits[V:Vp] (padded)", rel_err(logits_c[..., V:], logits.detach()[..., V:]), OUT_BOUND)
    row("grad norm", abs(norm_c - norm) / norm, GRAD_BOUND)
    pad_c = float(np.abs(grads_c["wte"][V:]).max())
    pad_t = float(grads["wte"][V:].abs().max())
    ok = tally.check(pad_c == 0 and pad_t == 0, f"{case} wte padded rows gradient")
    print(f"{case:10s} {'grad wte[V:Vp] == 0':22s} {'exact' if ok else f'max {pad_c:.1e} FAIL'}")

    # the optimizer step, from the reference's own parameters and gradients
    p_ref = {n: torch.tensor(a, dtype=dtype) for n, a in p_np.items()}
    g_ref = {n: torch.tensor(a, dtype=dtype) for n, a in grads_c.items()}
    mine = adamw_step(p_ref, g_ref, 1, mutate)
    theirs = torch_optim_adamw_step(p_ref, g_ref)

    unused = {f"ln{k}i{wb}" for k in (1, 2) for wb in "wb"} if ablations & NO_LN_IN else set()
    for n in names:
        e_grad = rel_err(grads_c[n], grads[n])
        tally.check(e_grad < GRAD_BOUND, f"{case} grad {n}")
        # no vacuous pass: every tensor the layout uses has a non-zero gradient, the unused ones exactly zero
        used_ok = float(grads[n].abs().max()) > 0 if n not in unused else float(np.abs(grads_c[n]).max()) == 0
        tally.check(used_ok, f"{case} grad {n} {'unused' if n in unused else 'is zero'}")
        e_step = rel_err(after_c[n], mine[n])
        tally.check(e_step < STEP_BOUND, f"{case} step {n}")
        e_opt = rel_err(after_c[n], theirs[n])
        tally.check(e_opt < STEP_BOUND, f"{case} torch.optim {n}")
        note = "" if used_ok else (" (unused, not zero)" if n in unused else " (zero gradient)")
        print(f"{case:10s} {'grad ' + n:22s} {fmt(e_grad, GRAD_BOUND)}  step {fmt(e_step, STEP_BOUND)}"
              f"  torch.optim {fmt(e_opt, STEP_BOUND)}{note}")


def main():
    global torch, F, np
    start = time.time()
    dtype_name, mutate = parse_args(sys.argv[1:])
    try:
        import numpy as np
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        report_and_exit(0, 1, f"torch_check: cannot import PyTorch/NumPy with {sys.executable} ({e}); "
                              "install python3-torch (Debian) or run with an interpreter that has torch")
    torch.manual_seed(0)
    dtype = torch.float64 if dtype_name == "float64" else torch.float32
    err = ensure_programs()
    if err:
        report_and_exit(0, 1, err)
    if mutate:
        print(f"MUTATION {mutate}: {MUTATIONS[mutate]} -- this run must fail")
    print(f"torch {torch.__version__}, PyTorch side in {dtype_name}; bounds: outputs {OUT_BOUND:.0e}, "
          f"gradients {GRAD_BOUND:.0e}, parameters after one AdamW step {STEP_BOUND:.0e}")
    print("relative errors ||C++ - torch|| / ||torch||; on the grad rows also the parameters after one AdamW step "
          "(ours, torch.optim.AdamW)")
    print(f"{'case':10s} {'tensor':22s} {'rel. error':14s}")
    tally = Tally()
    with tempfile.TemporaryDirectory(prefix="torch_check_") as tmp:
        for layout, ablations, setting in CASES:
            try:
                run_case(tmp, layout, ablations, setting, dtype, mutate, tally)
            except (ValueError, FileNotFoundError) as e:
                tally.check(False, f"{layout}+{ablations}: {e}")
                print(f"{layout}+{ablations}: error: {e}")
    if tally.failures:
        print(f"failed: {', '.join(tally.failures[:20])}{' ...' if len(tally.failures) > 20 else ''}")
    print(f"({time.time() - start:.1f} s)")
    report_and_exit(tally.passed, tally.failed)


if __name__ == "__main__":
    main()
