#!/usr/bin/env python3
"""An independent PyTorch implementation of the layouts, checked against the float32 CPU reference.

For each case (pre, post, siamese, siamese without depth scaling, siamese without LN_in, Mix-LN with its first
block Post-LN, DeepNorm, HybridNorm, HybridNorm* (block 0 Pre-Norm, block 1 HybridNorm), SiameseNorm with the
HybridNorm X stream and its two ablations, and the two baselines: Pre-Norm with the QKV norm, Peri-LN) the C++ tool
tests/ref_tool writes a tiny random model (model.bin, llm.c's checkpoint format), a batch, the reference's loss,
logits and gradients (out.bin) and its parameters after one AdamW step (after_step.bin); see the top of
tests/ref_tool.cpp for the file layouts. The PyTorch model is docs/model.py, the teaching twin of the C++ model,
written from the math of the README, not from the C++ code; this script is what holds it to the C++. What it takes
from the program is where each tensor lies in the files: the tensor table of `./reference_cpu -e model.bin
--print-tensors` (names, shapes, offsets in checkpoint order; docs/model.py's load_checkpoint), the one table every
tool reads instead of keeping a copy. It compares:

  - the loss, the logits over the real vocabulary and the padded logits (those exist, but take no probability: a
    softmax over all Vp columns would change the loss), the global gradient norm;
  - every parameter gradient by name (autograd), and that the padded rows of wte get exactly zero gradient;
  - the parameters after one AdamW step, computed here from the formula (decoupled weight decay on the 2-D weight
    matrices only, bias correction, the gradient scaled by min(1, clip / global norm) first), from the reference's
    own parameters and gradients so that this check isolates the optimizer; torch.optim.AdamW with one parameter
    group per decay rule gives a second opinion.

Every comparison is a relative error ||a - b|| / ||b|| over a whole tensor (b = PyTorch); where b is exactly zero
(LN_in under the no-LN_in ablation) a must be exactly zero too. Then every planted mistake (MUTATIONS below) is run
against the same C++ outputs and must make at least one of these comparisons fail: one line each, a pass when it is
caught. The output is a table and a last line "N passed, N failed"; the exit status is 0 only if everything passed.

    /usr/bin/python3 tests/torch_check.py [--dtype float64] [--mutate NAME]

--dtype float64 runs the PyTorch side in float64 (then the errors are the reference's own float32 rounding).
--mutate NAME deliberately breaks the PyTorch side (or its optimizer) and prints the whole table for it; the run must
then FAIL. The mistakes in the model are made here, by overriding one method of docs/model.py's GPT in a subclass
(planted_model), so that the teaching file holds no switch for them.
"""
import glob
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
         ("deepnorm", 0, 0), ("hybrid", 0, 0), ("hybrid-star", 0, 0), ("siamese-hybrid", 0, 0),
         ("siamese-hybrid", 1, 0), ("siamese-hybrid", 2, 0), ("pre-qkvnorm", 0, 0), ("peri", 0, 0),
         ("hc", 0, 0)]
NO_DEPTH_SCALE, NO_LN_IN = 1, 2

# The AdamW settings of ref_tool (see the top of tests/ref_tool.cpp).
LR, BETA1, BETA2, EPS, WEIGHT_DECAY, GRAD_CLIP = 1e-3, 0.9, 0.95, 1e-8, 0.1, 1.0
DECAY = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}  # the 2-D weight matrices (stacked over layers; not c1,
# (L, C), nor the QKV-norm gains lnqw.. (L, hs): 2-D as stored, they are gains of vectors, decay 0 like every LN's)

# Bounds. Both sides compute in float32 (unit roundoff u = 6e-8) the same sums in different orders (SIMD lanes and
# register tiles in the reference, BLAS and autograd here). A float32 sum of n terms is off by up to ~n*u relative to
# the sum of the |terms|, typically ~sqrt(n)*u; the longest sums here have ~C..4C = 32..128 terms (the dot products of
# the matrix products and LayerNorms; the wte gradient sums B*T = 16 rows twice), and some ten layers of such ops
# feed each gradient. Measured: the worst gradient tensor is at 6e-7 (the QKV-norm gains and shifts of the HybridNorm
# layouts at up to 1.7e-6), logits and loss at 2e-7, and the same when this side runs in float64 (--dtype float64),
# so that is the reference's own float32 rounding. 1e-5 leaves a margin of more than 15x (5x for the QKV-norm
# tensors) for other compilers and BLAS libraries, and
# stays 1000x below what an actual mistake does: a missing 1/c_l, a wrong LayerNorm on one stream, an exact GELU or a
# sign flip gives errors of order 1e-3..1.
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
# The shifts of QKV-norm's key LayerNorm, lnkb, have a gradient that is exactly zero in exact arithmetic: adding b to
# every key adds q_i . b to every score of query i, which its softmax ignores (the key part of qkvb likewise in the
# layouts without QKV-norm, but it is a third of a tensor). So both sides hold only rounding noise there, and their
# relative error means nothing; the check is that both are below GRAD_BOUND times the gradient of the gains lnkw, a
# sum of the same dL/dk terms without the cancellation (measured: 2e-7..9e-7 of it; a mistake that made lnkb
# matter, a per-key shift that does not cancel, would be of the size of lnkw's gradient).
ZERO_IN_EXACT_ARITHMETIC = {"lnkb"}

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
    "qkv-norm-no-v": "QKV-norm attention: q and k LayerNorm-ed, v left as it is",
    "qkv-norm-whole-row": "QKV-norm over all C channels of q, k, v (one LN per row) instead of per head",
    "hybrid-post-ffn": "hybrid's MLP in Post-Norm form, x = LN(x + F(x)), instead of xn = LN(x); x = xn + F(xn)",
    "star-all-hybrid": "hybrid-star: block 0 HybridNorm too (its Pre-Norm block ignored)",
    "c1-ignored": "siamese-hybrid: u = x + LN_y(y), the gain c1 left out",
    "pre-qkvnorm-no-qkv-norm": "pre-qkvnorm: its attention without the QKV norm (plain Pre-Norm)",
    "peri-no-output-norm": "peri: x = x + F(LN(x)), the output LayerNorm LN_out left out (plain Pre-Norm)",
    "hc-static-only": "hc: A = S, the dynamic part s tanh(LN_h(H) W) left out (static hyper-connections)",
    "hc-no-depth-weight": "hc: x' = A01 x + A11 y + z, y' likewise: beta (A's column 3) taken as 1",
}
# the case each mistake is run on when every one is checked (the default run): one it must show in
TARGET_CASE = {"siamese-sign": "siamese", "no-depth-scale": "siamese", "wrong-ln-y": "siamese",
               "ln-in-always": "siamese+2", "post-no-final": "post", "mix-all-pre": "mix",
               "deepnorm-alpha-1": "deepnorm", "qkv-norm-no-v": "hybrid", "qkv-norm-whole-row": "siamese-hybrid",
               "hybrid-post-ffn": "hybrid", "star-all-hybrid": "hybrid-star",
               "c1-ignored": "siamese-hybrid", "pre-qkvnorm-no-qkv-norm": "pre-qkvnorm",
               "peri-no-output-norm": "peri", "hc-static-only": "hc", "hc-no-depth-weight": "hc"}  # others: "pre"


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


def read_checkpoint(path):
    """docs/model.py's reader (its Config and the tensors), with the tensor list [(name, shape)] beside them"""
    cfg, params = model.load_checkpoint(path, TRAINER)
    return cfg, [(n, a.shape) for n, a in params.items()], params


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
# the planted mistakes in the model: docs/model.py's GPT with one method replaced

def planted_model(mutate):
    """docs/model.py's GPT, or a subclass with the methods that mutation `mutate` replaces (none for the optimizer's
    mistakes); each replaced method must exist in GPT, so that renaming one there cannot make its mistake vanish"""
    GPT = model.GPT
    overrides = {
        "siamese-sign": {"c_l": lambda m, l: -GPT.c_l(m, l)},  # c_l appears only in x = xh + z / c_l
        "no-depth-scale": {"c_l": lambda m, l: 1.0},
        "wrong-ln-y": {"ln": lambda m, name, v, l=None: GPT.ln(m, name[:-1] + "x" if name in ("ln1y", "ln2y")
                                                               else name, v, l)},
        "ln-in-always": {"ln_in": lambda m, l, n, v: m.ln(n + "i", v, l)},
        "post-no-final": {"head_identity": lambda m, x: m.ln("ln2", x, m.cfg.L - 1) if m.cfg.layout == "post" else x},
        "padded-softmax": {"loss": lambda m, logits, targets: F.cross_entropy(logits.reshape(-1, m.cfg.Vp),
                                                                              targets.reshape(-1))},
        "gelu-exact": {"gelu": lambda m, h: F.gelu(h)},
        "mix-all-pre": {"kind": lambda m, l, k: "pre" if m.cfg.layout == "mix" else GPT.kind(m, l, k)},
        "deepnorm-alpha-1": {"alpha": lambda m: 1.0},
        "qkv-norm-no-v": {"qkv_norm": lambda m, l, q, k, v: (m.ln("lnq", q, l), m.ln("lnk", k, l), v)},
        "qkv-norm-whole-row": {"qkv_norm": lambda m, l, q, k, v: tuple(whole_row_ln(m, name, t, l) for name, t in
                                                                       (("lnq", q), ("lnk", k), ("lnv", v)))},
        "hybrid-post-ffn": {"normed": lambda m, l, n, f, x: m.ln(n, x + f(x), l)},
        "star-all-hybrid": {"kind": lambda m, l, k: GPT.kind(m, l if m.cfg.layout != "hybrid-star" else 1, k)},
        "c1-ignored": {"siamese_c1": lambda m, l, n, f, x, y: siamese_c1_from(m, l, f, x, y, x + m.ln(n + "y", y, l))},
        "pre-qkvnorm-no-qkv-norm": {"qkv_norm": lambda m, l, q, k, v: (q, k, v) if m.cfg.layout == "pre-qkvnorm"
                                    else GPT.qkv_norm(m, l, q, k, v)},
        "peri-no-output-norm": {"peri": lambda m, l, n, f, x: m.pre(l, n, f, x)},
        "hc-static-only": {"hc": lambda m, l, n, f, x, y: hc_planted(m, l, n, f, x, y, dynamic=False)},
        "hc-no-depth-weight": {"hc": lambda m, l, n, f, x, y: hc_planted(m, l, n, f, x, y, beta=False)},
    }.get(mutate, {})
    for method in overrides:
        if not callable(getattr(GPT, method, None)):
            raise ValueError(f"--mutate {mutate} replaces GPT.{method}, which docs/model.py no longer has")
    return type(f"GPT_{mutate}", (GPT,), overrides) if overrides else GPT


def hc_planted(m, l, n, f, x, y, dynamic=True, beta=True):
    """hc's sub-layer written out again with a part left out: the dynamic weights (A = S) or beta (taken as 1)"""
    p, h = m.p, n.replace("ln", "hc")
    A = p[h + "s"][l].expand(*x.shape[:-1], 2, 4)
    if dynamic:
        hn = torch.stack([m.ln(n + "h", x, l), m.ln(n + "h", y, l)], dim=-2)
        A = A + p[h + "sc"][l][[0, 0, 0, 1]] * torch.tanh(hn @ p[h + "w"][l].t())
    w = [[A[..., j, c:c + 1] for c in range(4)] for j in range(2)]
    z = f(m.ln(n, w[0][0] * x + w[1][0] * y, l))
    b0, b1 = (w[0][3], w[1][3]) if beta else (1, 1)
    return w[0][1] * x + w[1][1] * y + b0 * z, w[0][2] * x + w[1][2] * y + b1 * z


def whole_row_ln(m, name, t, l):
    """t (B, NH, T, hs) LayerNorm-ed over all NH * hs channels of its token, the gains of size hs repeated per head"""
    B, NH, T, hs = t.shape
    rows = t.transpose(1, 2).reshape(B, T, NH * hs)
    w, b = m.p[name + "w"][l].repeat(NH), m.p[name + "b"][l].repeat(NH)
    return F.layer_norm(rows, (NH * hs,), w, b, eps=1e-5).reshape(B, T, NH, hs).transpose(1, 2)


def siamese_c1_from(m, l, f, x, y, h):
    """siamese_c1's boundary from a given F input h: z = F(h); x = x + z/c_l; y = y + z"""
    z = f(h)
    return x + z / m.c_l(l), y + z


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


def reference_outputs(tmp, layout, ablations, setting):
    """runs ref_tool for one case and reads what it wrote: a dict, or an error message"""
    case = layout if ablations == 0 else f"{layout}+{ablations}"
    d = os.path.join(tmp, case)
    os.makedirs(d)
    r = subprocess.run([TOOL, d, layout, str(ablations), str(setting)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True)
    if r.returncode != 0:
        return f"{case:16s} ref_tool failed (exit {r.returncode}): {r.stdout.strip()}"
    cfg, shapes, p_np = read_checkpoint(os.path.join(d, "model.bin"))
    if cfg.layout != layout or cfg.ablations != ablations or cfg.setting != setting:
        return f"{case:16s} checkpoint header says layout {cfg.layout}, ablations {cfg.ablations}"
    inputs_np, targets_np = read_batch(os.path.join(d, "batch.bin"))
    loss_c, norm_c, logits_c, grads_c = read_outputs(os.path.join(d, "out.bin"), shapes)
    cfg_after, _, after_c = read_checkpoint(os.path.join(d, "after_step.bin"))
    if cfg_after != cfg:
        raise ValueError(f"after_step.bin's header {cfg_after} differs from model.bin's {cfg}")
    return dict(case=case, cfg=cfg, names=[n for n, _ in shapes], p_np=p_np, inputs_np=inputs_np,
                targets_np=targets_np, loss_c=loss_c, norm_c=norm_c, logits_c=logits_c, grads_c=grads_c,
                after_c=after_c)


def compare(ref, dtype, mutate, tally, out=print):
    """PyTorch (docs/model.py, or its planted mistake) against the reference's outputs `ref`: each check into
    `tally`, each row to `out`"""
    case, cfg, names, grads_c, after_c = ref["case"], ref["cfg"], ref["names"], ref["grads_c"], ref["after_c"]
    V = cfg.V

    # forward and backward in PyTorch
    params = {n: torch.tensor(a, dtype=dtype, requires_grad=True) for n, a in ref["p_np"].items()}
    inputs = torch.tensor(ref["inputs_np"], dtype=torch.long)
    targets = torch.tensor(ref["targets_np"], dtype=torch.long)
    gpt = planted_model(mutate)(cfg, params)
    logits = gpt.forward(inputs)
    loss = gpt.loss(logits, targets)
    gs = torch.autograd.grad(loss, [params[n] for n in names], allow_unused=True)
    grads = {n: (g if g is not None else torch.zeros_like(params[n])).detach() for n, g in zip(names, gs)}
    norm = math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads.values()))

    def row(tensor, err, bound, extra=""):
        tally.check(err < bound, f"{case} {tensor}")
        out(f"{case:16s} {tensor:22s} {fmt(err, bound)}{extra}")

    row("loss", abs(ref["loss_c"] - float(loss)) / abs(float(loss)), OUT_BOUND)
    row("logits[:V]", rel_err(ref["logits_c"][..., :V], logits.detach()[..., :V]), OUT_BOUND)
    row("logits[V:Vp] (padded)", rel_err(ref["logits_c"][..., V:], logits.detach()[..., V:]), OUT_BOUND)
    row("grad norm", abs(ref["norm_c"] - norm) / norm, GRAD_BOUND)
    pad_c = float(np.abs(grads_c["wte"][V:]).max())
    pad_t = float(grads["wte"][V:].abs().max())
    ok = tally.check(pad_c == 0 and pad_t == 0, f"{case} wte padded rows gradient")
    out(f"{case:16s} {'grad wte[V:Vp] == 0':22s} {'exact' if ok else f'max {pad_c:.1e} FAIL'}")

    # the optimizer step, from the reference's own parameters and gradients
    p_ref = {n: torch.tensor(a, dtype=dtype) for n, a in ref["p_np"].items()}
    g_ref = {n: torch.tensor(a, dtype=dtype) for n, a in grads_c.items()}
    mine = adamw_step(p_ref, g_ref, 1, mutate)
    theirs = torch_optim_adamw_step(p_ref, g_ref)

    unused = {f"ln{k}i{wb}" for k in (1, 2) for wb in "wb"} if cfg.ablations & NO_LN_IN else set()
    for n in names:
        if n in ZERO_IN_EXACT_ARITHMETIC:  # both sides' rounding noise, measured against the gains' gradient
            scale = float(grads[n[:-1] + "w"].double().norm())
            both = max(float(grads[n].double().norm()), float(np.linalg.norm(grads_c[n].astype(np.float64))))
            e_grad = both / scale if scale > 0 else math.inf  # no gains' gradient (a model without them): a failure
            used_ok = scale > 0
        else:
            e_grad = rel_err(grads_c[n], grads[n])
            # no vacuous pass: every tensor the layout uses has a non-zero gradient, the unused ones exactly zero
            used_ok = float(grads[n].abs().max()) > 0 if n not in unused else float(np.abs(grads_c[n]).max()) == 0
        tally.check(e_grad < GRAD_BOUND, f"{case} grad {n}")
        tally.check(used_ok, f"{case} grad {n} {'unused' if n in unused else 'is zero'}")
        e_step = rel_err(after_c[n], mine[n])
        tally.check(e_step < STEP_BOUND, f"{case} step {n}")
        e_opt = rel_err(after_c[n], theirs[n])
        tally.check(e_opt < STEP_BOUND, f"{case} torch.optim {n}")
        note = "" if used_ok else (" (unused, not zero)" if n in unused else " (zero gradient)")
        note += " (zero in exact arithmetic: |both| / |grad lnkw|)" if n in ZERO_IN_EXACT_ARITHMETIC else ""
        out(f"{case:16s} {'grad ' + n:22s} {fmt(e_grad, GRAD_BOUND)}  step {fmt(e_step, STEP_BOUND)}"
            f"  torch.optim {fmt(e_opt, STEP_BOUND)}{note}")


def main():
    global torch, F, np, model
    start = time.time()
    dtype_name, mutate = parse_args(sys.argv[1:])
    try:
        import numpy as np
        import torch
        import torch.nn.functional as F
        sys.dont_write_bytecode = True  # no docs/__pycache__ left behind
        sys.path.insert(0, os.path.join(REPO, "docs"))
        import model  # docs/model.py, the PyTorch model under test
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
    print(f"{'case':16s} {'tensor':22s} {'rel. error':14s}")
    tally = Tally()
    refs = []
    with tempfile.TemporaryDirectory(prefix="torch_check_") as tmp:
        for layout, ablations, setting in CASES:
            try:
                ref = reference_outputs(tmp, layout, ablations, setting)
                if isinstance(ref, str):
                    tally.check(False, f"{ref.split()[0]}: ref_tool failed")
                    print(ref)
                    continue
                compare(ref, dtype, mutate, tally)
                refs.append(ref)
            except (ValueError, FileNotFoundError) as e:
                tally.check(False, f"{layout}+{ablations}: {e}")
                print(f"{layout}+{ablations}: error: {e}")
    if tally.failures:
        print(f"failed: {', '.join(tally.failures[:20])}{' ...' if len(tally.failures) > 20 else ''}")
    if not mutate and len(refs) == len(CASES):
        # every planted mistake must be caught: some comparison above fails with it, in the case it targets
        print("planted mistakes (each must make a comparison fail in its case):")
        cases = {ref["case"]: ref for ref in refs}
        for name, what in MUTATIONS.items():
            t = Tally()
            compare(cases[TARGET_CASE.get(name, "pre")], dtype, name, t, out=lambda line: None)
            tally.check(t.failed > 0, f"--mutate {name} not caught")
            print(f"  {name:20s} {TARGET_CASE.get(name, 'pre'):16s} " + (
                f"caught: {t.failed} failed, the first {t.failures[0].split(' ', 1)[1]}" if t.failed else
                "NOT CAUGHT: every comparison passed FAIL"))
    print(f"({time.time() - start:.1f} s)")
    report_and_exit(tally.passed, tally.failed)


if __name__ == "__main__":
    main()
