# %% [markdown]
# # SiameseNorm in 90 minutes
#
# A class notebook for **SiameseNorm** (Li et al., *SiameseNorm: Breaking the Barrier to Reconciling Pre/Post-Norm*,
# ICML 2026, arXiv 2602.08064), beside the two layouts it reconciles, Pre-Norm and Post-Norm. It runs on a laptop's
# CPU with PyTorch alone: the model is `docs/model.py` (the whole GPT on one screen), the trainer
# `docs/train_model.py` (GPT-2's initialization, the KJV shards, AdamW: the C++ trainer's numbers, tested against
# it by `tests/twin_check.py`). The C++ (`reference_cpu.cpp`) is the code you read, and may build and run; nothing
# here needs a compiler.
#
# | part | what | minutes |
# |---|---|---|
# | 0 | setup | 3 |
# | 1 | Pre-Norm and Post-Norm: the equations beside the code | 10 |
# | 2 | SiameseNorm: two streams, one set of weights | 10 |
# | 3 | cover one stream: SiameseNorm contains Post-Norm and Pre-Norm | 15 |
# | 4 | the race: pre, post and siamese trained side by side (you predict first) | 15 |
# | 5 | the streams at depth: dilution and the vanishing gradient, measured | 15 |
# | 6 | the backward pass of one sub-layer, by hand, against autograd | 15 |
# | 7 | what to take home | 5 |
#
# The lesson plan for the lecturer, with the discussion questions and their answers, is
# [lesson_plan.md](lesson_plan.md). This file is kept as text, `docs/siamesenorm_class.py` (jupytext's percent
# format); `docs/siamesenorm_class.ipynb` is built from it by `tools/notebook.py build`, and `make test` runs every
# cell (with the shortest runs: `SIAMESE_CLASS=test`).

# %% [markdown]
# ## 0. Setup (3 min)
#
# Run this from the repository (Jupyter opens the notebook in `docs/`). The data are the King James Bible in bytes:
# if `data/kjv/` is missing, `python3 data/prepare.py kjv` makes it (Debian's `bible-kjv` package, no network).
# `SIAMESE_CLASS=class` (the default) runs the class's experiments (a few minutes on two cores); `test` runs every
# cell with the shortest runs. Debian's PyTorch uses the reference BLAS: `apt install libopenblas0-pthread` makes
# the matrix products several times faster.

# %%
import inspect
import math
import os
import re
import sys
import threading
import time

import matplotlib
import numpy as np
import torch

REPO = next(d for d in (os.getcwd(), os.path.dirname(os.getcwd())) if os.path.isfile(os.path.join(d, "docs", "model.py")))
sys.dont_write_bytecode = True
for folder in ("docs", "tools"):
    sys.path.insert(0, os.path.join(REPO, folder))
import model                    # noqa: E402  docs/model.py: the GPT
import train_model as tm        # noqa: E402  docs/train_model.py: its initialization, data, AdamW, loop
import streams                  # noqa: E402  tools/streams.py: the measurement behind the README's picture
import check_boundary_backward as bb  # noqa: E402  docs/check_boundary_backward.py: LayerNorm's backward by hand

LENGTH = os.environ.get("SIAMESE_CLASS", "class")
assert LENGTH in ("class", "test"), f"SIAMESE_CLASS is 'class' or 'test', not {LENGTH!r}"
FIGURES = os.environ.get("SIAMESE_CLASS_FIGURES")  # where the figures are also written (the lesson plan's)
try:
    from IPython.display import display
    import matplotlib.pyplot as plt
except ImportError:  # run as a plain script: figures are written, not shown
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def display(*args, **kwargs):
        return None
torch.set_num_threads(1)  # tiny models: one thread each; the race below runs three at once
TRAIN, VAL = (os.path.join(REPO, "data", "kjv", f"kjv_{s}.bin") for s in ("train", "val"))
assert os.path.isfile(TRAIN), "no data/kjv/kjv_train.bin: run `python3 data/prepare.py kjv` in the repository"


def show(fig, name):
    """the figure inline, and into SIAMESE_CLASS_FIGURES when that is set"""
    if FIGURES:
        fig.savefig(os.path.join(FIGURES, name), dpi=110, bbox_inches="tight")
    display(fig)
    plt.close(fig)


def report(*words):
    """print, and into SIAMESE_CLASS_FIGURES/class_run.txt when that is set (the numbers beside the figures)"""
    print(*words)
    if FIGURES:
        with open(os.path.join(FIGURES, "class_run.txt"), "a") as f:
            print(*words, file=f)


if FIGURES:  # a fresh file for this run's numbers
    open(os.path.join(FIGURES, "class_run.txt"), "w").close()


def source(function):
    """a function's text, for the equations beside the code"""
    print(inspect.getsource(function).rstrip())


def cpp(*names):
    """a function of reference_cpu.cpp, the C++ reference: the code you read (the first of names it holds)"""
    text = open(os.path.join(REPO, "reference_cpu.cpp")).read()
    found = [m for m in (re.search(r"^static void " + n + r"\(.*?^}", text, re.S | re.M) for n in names) if m]
    assert found, f"reference_cpu.cpp holds none of {names}"
    print(found[0].group(0))


print(f"PyTorch {torch.__version__}; the {LENGTH} length; data {os.path.relpath(TRAIN, REPO)}")

# %% [markdown]
# ## 1. Pre-Norm and Post-Norm (10 min)
#
# A transformer is a residual stream `x` that each sub-layer `F` (an attention, then an MLP, in each of `L` blocks)
# reads and writes. Where the LayerNorm `LN` goes is the whole difference:
#
# | layout | each sub-layer | head | the trouble |
# |---|---|---|---|
# | **Post-Norm** (the Transformer, GPT-1) | `x = LN(x + F(x))` | `x` | the gradient crosses `2L` LayerNorms on its way down: it shrinks and distorts, training needs a careful warmup |
# | **Pre-Norm** (GPT-2 and after) | `x = x + F(LN(x))` | `LN_f(x)` | the stream is a plain sum that grows: each deep sub-layer's share of it shrinks (*dilution*) |
#
# Here is each in `docs/model.py`: the body is the equation.

# %%
source(model.GPT.post)
source(model.GPT.pre)
source(model.GPT.head_ln)

# %% [markdown]
# Every layout shares `F`: GPT-2's attention and MLP (`GPT.attention`, `GPT.mlp`). The whole model is
# `GPT.forward`: the embedding `h0 = wte[tok] + wpe[pos]`, then each sub-layer's boundary, then the head.

# %%
source(model.GPT.forward)

# %% [markdown]
# ## 2. SiameseNorm: two streams, one set of weights (10 min)
#
# SiameseNorm runs both designs at once, on two streams that share every weight of `F`. Both start as `h0`.
# Sub-layer `s` of block `l`, with the depth scale `c_l = sqrt(2(l+1))`:
#
# ```
# xh = LN_x(x)                   X is normalized here, as Post-Norm's stream
# u  = LN_in(xh + LN_y(y))       F reads both streams, through a LayerNorm of their sum
# z  = F(u)
# x' = xh + z / c_l              X takes F's output scaled down by depth
# y' = y + z                     Y is a plain sum, never normalized: Pre-Norm's stream
# head: LN_f(LN_xf(x) + LN_yf(y))
# ```
#
# No new matrices: six LayerNorms per block instead of two, three at the head. In `docs/model.py`, and in the C++
# you will read (its `F_forward` is the attention or the MLP; `t` holds the sub-layer's tensors, named as here):

# %%
source(model.GPT.siamese)
source(model.GPT.head_siamese)
cpp("siamese_sublayer_forward", "siamese_boundary_forward")  # (its name before issue 29)

# %% [markdown]
# ## 3. Cover one stream (15 min)
#
# The paper's figure draws the two streams side by side. Cover one half and the other is a layout you know. In the
# equations, "covering" Y means setting the gains and shifts of `LN_y` (every sub-layer's) and `LN_yf` (the head's)
# to 0, so that `LN_y(y) = 0`:
#
# ```
# u = LN_in(xh);   z = F(u);   x' = xh + z / c_l;   the next sub-layer's xh = LN_x'(x')
# head: LN_f(LN_xf(x))
# ```
#
# Follow the normalized stream `p = xh`: `p' = LN_x'(p + F(LN_in(p)) / c_l)`. That is Post-Norm's
# `p' = LN(p + F(p))` with three named differences and one that is not a difference:
#
# 1. **LN_x on the embedding**: SiameseNorm's first sub-layer reads `LN_x(h0)`, Post-Norm's reads `h0` itself;
# 2. **the head's extra LayerNorm**: Post-Norm's stream ends with its last LayerNorm (SiameseNorm's `LN_xf`),
#    SiameseNorm puts `LN_f` on top;
# 3. **`LN_in`**: `F` reads `LN_in(p)`, a LayerNorm of an already normalized stream (gone under the `--no-ln-in`
#    ablation, where `u = xh + LN_y(y)`);
# 4. not a difference: **`1/c_l`** scales `F`'s output, which is linear in `F`'s last matrix and bias, so it folds
#    into them (`attprojw`, `attprojb`, `fcprojw`, `fcprojb` of block `l` divided by `c_l`).
#
# Covering X instead (`LN_x`'s and `LN_xf`'s gains and shifts at 0): `xh = 0`, so `u = LN_in(LN_y(y))`,
# `y' = y + F(u)`, head `LN_f(LN_yf(y))`: Pre-Norm, `y' = y + F(LN(y))`, with `LN_in` after its LayerNorm
# (gone under `--no-ln-in`) and, again, the head's extra LayerNorm (`LN_yf` before `LN_f`).
#
# So under `--no-ln-in` SiameseNorm is Post-Norm *up to LN_x on the embedding and the head's extra LayerNorm*, and
# Pre-Norm *up to the head's extra LayerNorm*. Below, that is checked numerically: a SiameseNorm model with
# random gains and shifts (not GPT-2's 1 and 0, so that nothing holds by accident), one stream covered, against
# the Post-Norm (Pre-Norm) model made from the same weights, once with the named differences put in and once
# without. For the C++ reference, docs/siamesenorm.md derives the same and its tests check it.

# %%
def draw_sublayer(ax, cover=None, title=""):
    """one SiameseNorm sub-layer as a diagram, X on the left, Y on the right; cover "x" or "y" greys that half"""
    boxes = {"x": (2, 0.6, "x"), "y": (8, 0.6, "y"), "LN_x": (2, 2.4, "LN_x"), "LN_y": (8, 2.4, "LN_y"),
             "h": (5, 4.0, "+"), "LN_in": (5, 5.4, "LN_in"), "F": (5, 6.9, "F (shared)"),
             "x'": (2, 8.5, "+"), "y'": (8, 8.5, "+"), "xo": (2, 9.8, "x'"), "yo": (8, 9.8, "y'")}
    half = {"x": ("x", "LN_x", "x'", "xo"), "y": ("y", "LN_y", "y'", "yo")}
    grey = set(half[cover]) if cover else set()
    arrows = [("x", "LN_x", ""), ("LN_x", "x'", "xh"), ("LN_x", "h", ""), ("y", "LN_y", ""), ("LN_y", "h", ""),
              ("y", "y'", "identity"), ("h", "LN_in", ""), ("LN_in", "F", "u"), ("F", "x'", "z / c_l"),
              ("F", "y'", "z"), ("x'", "xo", ""), ("y'", "yo", "")]
    for a, b, label in arrows:
        (xa, ya, _), (xb, yb, _) = boxes[a], boxes[b]
        faded = a in grey or b in grey
        bend = 0.45 if (a, b) == ("y", "y'") else 0
        ax.annotate("", (xb, yb - 0.35 if yb > ya else yb), (xa, ya + 0.35),
                    arrowprops=dict(arrowstyle="->", color="0.8" if faded else "0.2",
                                    connectionstyle=f"arc3,rad={bend}"))
        if label:
            ax.text((xa + xb) / 2 + (0.9 if bend else 0.15), (ya + yb) / 2, label, fontsize=8,
                    color="0.75" if faded else "0.1")
    for name, (x_, y_, text) in boxes.items():
        style = "circle" if text == "+" else "round"
        ax.text(x_, y_, text, ha="center", va="center", fontsize=10, color="0.75" if name in grey else "black",
                bbox=dict(boxstyle=style, fc="white", ec="0.8" if name in grey else "0.3"))
    if cover:
        ax.axvspan(5.9 if cover == "y" else 0, 10 if cover == "y" else 4.1, color="0.5", alpha=0.12)
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 10.5)
    ax.set_title(title, fontsize=10)
    ax.axis("off")


fig, axes = plt.subplots(1, 3, figsize=(13, 5))
draw_sublayer(axes[0], None, "SiameseNorm: x' = LN_x(x) + z / c_l,  y' = y + z")
draw_sublayer(axes[1], "y", "Y covered (LN_y, LN_yf at 0): Post-Norm\nx' = LN_x(x) + F(LN_in(LN_x(x))) / c_l")
draw_sublayer(axes[2], "x", "X covered (LN_x, LN_xf at 0): Pre-Norm\ny' = y + F(LN_in(LN_y(y)))")
fig.tight_layout()
show(fig, "class_cover.png")

# %%
def random_siamese(ablations, seed=0, L=4, C=32, NH=4):
    """a SiameseNorm model (float64) at GPT-2's initialization, its weights 10x larger and every LayerNorm's gain
    and shift random, so that the LayerNorms and F all matter"""
    cfg = tm.config("siamese", L=L, C=C, NH=NH, maxT=16, V=256, ablations=ablations)
    g = torch.Generator().manual_seed(seed)
    p = {}
    for name, a in tm.init_parameters(cfg, seed=1337).items():
        t = torch.tensor(a, dtype=torch.float64)
        if name.startswith("ln"):
            t = (1 + 0.3 * torch.randn(t.shape, generator=g, dtype=torch.float64) if name.endswith("w")
                 else 0.1 * torch.randn(t.shape, generator=g, dtype=torch.float64))
        p[name] = t * 10 if name in ("qkvw", "attprojw", "fcw", "fcprojw") else t
    return cfg, p


def covered(p, stream):
    """the same parameters with LN_y and LN_yf (stream "y"), or LN_x and LN_xf ("x"), set to 0"""
    return {n: torch.zeros_like(t) if re.fullmatch(rf"ln[12f]{stream}[wb]", n) else t for n, t in p.items()}


class PostNamed(model.GPT):
    """Post-Norm with SiameseNorm's named differences put in: the embedding LayerNorm-ed first (lne), the head's
    extra LN_f, and (with_ln_in) F reading LN_in of the stream (ln1i, ln2i)"""
    with_ln_in = True

    def post(self, l, n, f, x):
        if (l, n) == (0, "ln1"):
            x = self.ln("lne", x)
        u = self.ln(n + "i", x, l) if self.with_ln_in else x
        return self.ln(n, x + f(u), l)

    def head_identity(self, x):
        return self.ln("lnf", x)


class PreNamed(model.GPT):
    """Pre-Norm with SiameseNorm's named differences put in: the head's extra LayerNorm (lnfy before lnf), and
    (with_ln_in) LN_in after each sub-layer's LayerNorm"""
    with_ln_in = True

    def pre(self, l, n, f, x):
        u = self.ln(n, x, l)
        return x + f(self.ln(n + "i", u, l) if self.with_ln_in else u)

    def head_ln(self, x):
        return self.ln("lnf", self.ln("lnfy", x))


def post_weights(cfg, sp):
    """Post-Norm's parameters from SiameseNorm's: F's with 1/c_l folded into its last matrix and bias; the LayerNorm
    after sub-layer s is SiameseNorm's LN_x before sub-layer s+1 (the last one, LN_xf)"""
    c = torch.tensor([math.sqrt(2 * (l + 1)) for l in range(cfg.L)], dtype=torch.float64)
    if cfg.ablations & model.NO_DEPTH_SCALE:
        c = torch.ones_like(c)
    pp = {n: sp[n] for n in ("wte", "wpe", "qkvw", "qkvb", "attprojw", "attprojb", "fcw", "fcb", "fcprojw", "fcprojb")}
    for n in ("attprojw", "attprojb", "fcprojw", "fcprojb"):
        pp[n] = sp[n] / c.view(-1, *[1] * (sp[n].dim() - 1))
    for wb in "wb":
        pp["ln1" + wb] = sp["ln2x" + wb]                                          # after block l's attention
        pp["ln2" + wb] = torch.cat([sp["ln1x" + wb][1:], sp["lnfx" + wb][None]])  # after its MLP
        pp["lne" + wb] = sp["ln1x" + wb][0]                                       # difference 1
        pp["lnf" + wb] = sp["lnf" + wb]                                           # difference 2
        pp["ln1i" + wb], pp["ln2i" + wb] = sp["ln1i" + wb], sp["ln2i" + wb]       # difference 3
    return pp


def pre_weights(cfg, sp):
    """Pre-Norm's parameters from SiameseNorm's: F's as they are (X, which 1/c_l scales, is covered), each
    sub-layer's LayerNorm SiameseNorm's LN_y"""
    pp = {n: sp[n] for n in ("wte", "wpe", "qkvw", "qkvb", "attprojw", "attprojb", "fcw", "fcb", "fcprojw", "fcprojb")}
    for wb in "wb":
        pp["ln1" + wb], pp["ln2" + wb] = sp["ln1y" + wb], sp["ln2y" + wb]
        pp["lnf" + wb], pp["lnfy" + wb] = sp["lnf" + wb], sp["lnfy" + wb]         # difference: LN_yf
        pp["ln1i" + wb], pp["ln2i" + wb] = sp["ln1i" + wb], sp["ln2i" + wb]
    return pp


def relative(a, b):
    return float((a - b).norm() / b.norm())


inputs = torch.tensor(np.fromfile(VAL, dtype="<u2", offset=1024, count=2 * 16).astype(np.int64).reshape(2, 16))
rows = []
for ablations, label in ((model.NO_LN_IN, "--no-ln-in"), (0, "the full method")):
    cfg, sp = random_siamese(ablations)
    for stream, target, make_weights, Named in (("y", "post", post_weights, PostNamed), ("x", "pre", pre_weights,
                                                                                         PreNamed)):
        siamese_logits = model.GPT(cfg, covered(sp, stream)).forward(inputs)
        tcfg = tm.config(target, L=cfg.L, C=cfg.C, NH=cfg.NH, maxT=cfg.maxT, V=cfg.V)
        pp = make_weights(cfg, sp)
        Named.with_ln_in = not ablations & model.NO_LN_IN
        named = relative(Named(tcfg, pp).forward(inputs), siamese_logits)
        plain = relative(model.GPT(tcfg, pp).forward(inputs), siamese_logits)
        rows.append((label, stream, target, named, plain))
        assert named < 1e-12, f"{label}, {stream} covered: SiameseNorm is not {target} up to the named differences"
        assert plain > 1e-3, f"{label}, {stream} covered: the named differences make no difference"
report("float64; relative difference of the logits, ||siamese - target|| / ||siamese||")
report(f"{'ablation':18s} {'covered':8s} {'target':7s} {'with the named differences':>27s} {'without them':>14s}")
for label, stream, target, named, plain in rows:
    report(f"{label:18s} {stream:8s} {target:7s} {named:27.1e} {plain:14.1e}")

# %% [markdown]
# With the differences put in, the logits agree to float64 rounding (1e-16: the same sums in other orders); the
# check stops at 1e-12. Without them they differ by 1e-1 or more: the differences are real, and they are the only
# ones. The weights of `F` are *shared*, so this is not an analogy: SiameseNorm computes Post-Norm's function on one
# stream and Pre-Norm's on the other, and the learned gains of `LN_y`, `LN_x`, `LN_yf`, `LN_xf` decide how much of
# each reaches `F` and the head.
#
# **Discuss** (answers in the lesson plan): why does covering X need no depth-scale folding, while covering Y does?
# What would a model trained with both streams do if the optimizer drove `LN_y`'s gains to 0?

# %% [markdown]
# ## 4. The race (15 min)
#
# Three 16-block models, 32 channels wide, the same initialization (GPT-2's, seed 1337: every weight they share
# starts equal), the same data (the KJV in bytes, 8 sequences of 64 a step), the same AdamW (peak lr 3e-3, 30
# warmup steps, cosine to 0.1 of it over 150 steps). Only the layout differs. The token-frequency level, a model
# that learned no context at all, is 3.144 nats.
#
# **Predict before you run**: rank `pre`, `post` and `siamese` by their validation loss after the 150 steps, and
# say which, if any, stays at the token-frequency level. Write it in the cell, then run the next one.

# %%
prediction_race = None  # e.g. ["siamese", "pre", "post"], lowest loss first; "post" stalls?

# %%
RACE = dict(L=16, C=32, NH=4, maxT=64, B=8, T=64, lr=3e-3, warmup=30, final_frac=0.1, val_every=25, val_steps=8,
            steps=150)
if LENGTH == "test":
    RACE.update(steps=4, warmup=2, val_every=4, val_steps=2)
race = {}


def run_one(layout):
    """one model of the race, trained by docs/train_model.py; its log grows while it runs"""
    cfg = tm.config(layout, L=RACE["L"], C=RACE["C"], NH=RACE["NH"], maxT=RACE["maxT"], V=256)
    params = tm.as_tensors(tm.init_parameters(cfg, seed=1337))
    race[layout] = dict(cfg=cfg, params=params, init=tm.init_parameters(cfg, seed=1337), log=[])
    tm.train(cfg, params, tm.Shards(TRAIN, RACE["B"], RACE["T"]), RACE["steps"], lr=RACE["lr"],
             warmup=RACE["warmup"], final_frac=RACE["final_frac"], val=tm.Shards(VAL, RACE["B"], RACE["T"]),
             val_every=RACE["val_every"], val_steps=RACE["val_steps"], report=race[layout]["log"].append)


COLOR = {"pre": "C0", "post": "C1", "siamese": "C2"}


def draw_race(fig, ax):
    ax.clear()
    for layout, r in sorted(race.items()):
        steps = [e["step"] for e in r["log"] if "trl" in e]
        ax.plot(steps, [e["trl"] for e in r["log"] if "trl" in e], alpha=0.5, color=COLOR[layout],
                label=f"{layout} train")
        vals = [(e["step"], e["tel"]) for e in r["log"] if "tel" in e]
        if vals:
            ax.plot(*zip(*vals), "o-", color=COLOR[layout], label=f"{layout} validation")
    ax.axhline(3.1442, color="gray", linestyle=":", label="token frequencies (3.144)")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats per byte)")
    ax.set_title(f"{RACE['L']} blocks x {RACE['C']} channels, lr {RACE['lr']}, the same init and data")
    ax.set_ylim(1.8, 6)
    ax.legend(fontsize=8)


start = time.time()
threads = [threading.Thread(target=run_one, args=(n,)) for n in ("pre", "post", "siamese")]
for t in threads:
    t.start()
fig, ax = plt.subplots(figsize=(7, 4))
handle = display(fig, display_id=True)
while any(t.is_alive() for t in threads):
    time.sleep(5)
    draw_race(fig, ax)
    if handle is not None:
        handle.update(fig)
for t in threads:
    t.join()
assert all(r["log"] and "tel" in r["log"][-1] for r in race.values()), "a run of the race did not finish"
draw_race(fig, ax)
if handle is not None:
    handle.update(fig)
if FIGURES:
    fig.savefig(os.path.join(FIGURES, "class_race.png"), dpi=110, bbox_inches="tight")
plt.close(fig)
final = {n: r["log"][-1]["tel"] for n, r in race.items()}
report(f"{RACE['steps']} steps in {time.time() - start:.0f} s; validation loss at the end:")
for n in sorted(final, key=final.get):
    stalled = final[n] > 3.1442 - 0.05  # experiments.md's "stuck": not 0.05 below the token-frequency level
    report(f"  {n:8s} {final[n]:.4f}" + ("   (at the token-frequency level: stalled)" if stalled else ""))
if prediction_race:
    print("your ranking:", prediction_race, "| measured:", sorted(final, key=final.get))

# %% [markdown]
# What you see is one seed at one shared setting. The project's experiments
# ([experiments.md](experiments.md)) tune every layout the same way (peak lr x warmup), run three seeds at 4 to 32
# layers and report mean ± sd; their short answer is the honest one, in the lesson plan. The same run in the C++
# trainer gives the same numbers (`docs/train_model.py` is tested against it):
#
# ```
# ./reference_cpu --norm siamese --layers 16 --channels 32 --heads 4 --max-seq-len 64 -b 8 -t 64 \
#     -l 3e-3 -u 30 -q 0.1 -x 150 -v 25 -m 8 -s 0
# ```
#
# **Discuss**: why might Post-Norm's loss sit at the token-frequency level rather than diverge? Why is one seed at
# one learning rate not a comparison of layouts?

# %% [markdown]
# ## 5. The streams at depth (15 min)
#
# What each layout does to its streams, sub-layer by sub-layer `s` (`2l` the attention of block `l`, `2l+1` its MLP,
# `2L` the head), on the first validation batch: the RMS of each stream where it enters `s`, the RMS of the loss's
# gradient there, and the sub-layer's **relative update**, the size of what it adds against the stream it adds to
# (`|z| / |x|` for pre and post, `|z/c_l| / |LN_x(x)|` on SiameseNorm's X, `|z| / |y|` on its Y). The
# measurement is `tools/streams.py`'s, the one behind the README's picture (there at 4 blocks, where dilution
# hardly shows).
#
# **Predict before you run**: after the race's steps, the last MLP of the 16-block Pre-Norm model makes a relative
# update that is what fraction of block 1's MLP's? (a) about the same (b) a half (c) a tenth (d) a hundredth.
# And at initialization?

# %%
prediction_dilution = None  # "a", "b", "c" or "d"

# %%
batch = np.fromfile(VAL, dtype="<u2", offset=1024, count=RACE["B"] * RACE["T"] + 1).astype(np.int64)
x_batch, y_batch = batch[:-1].reshape(RACE["B"], RACE["T"]), batch[1:].reshape(RACE["B"], RACE["T"])
measured = {}
for layout, r in race.items():
    trained = {n: t.detach().numpy() for n, t in r["params"].items()}
    measured[layout] = {state: streams.measure(model, r["cfg"], p, x_batch, y_batch)
                        for state, p in (("at initialization", r["init"]), ("trained", trained))}


def update_of(layout, state, stream, sublayers):
    return [row[2][stream][2] for row in measured[layout][state][1] if row[0] in sublayers]


L = RACE["L"]
for state in ("at initialization", "trained"):
    mlp = update_of("pre", state, "x", [2 * l + 1 for l in range(L)])
    report(f"Pre-Norm {state}: MLP relative updates, block 0 to {L - 1}:", " ".join(f"{u:.3f}" for u in mlp))
    report(f"  the last MLP's over block 1's: {mlp[-1] / mlp[1]:.3f}" + (f"   (you said {prediction_dilution})"
                                                                       if prediction_dilution else ""))
    grad = {row[0]: row[2]["x"][1] for row in measured["post"][state][1]}
    report(f"Post-Norm {state}: dL/dx RMS {grad[2 * L]:.1e} at the head, {grad[1]:.1e} at sub-layer 1: "
           f"{math.log10(grad[2 * L] / grad[1]):+.1f} orders of magnitude")
    for stream in ("x", "y"):
        u = update_of("siamese", state, stream, [3, 2 * L - 1])
        g = [row[2][stream][1] for row in measured["siamese"][state][1] if row[0] in (1, 2 * L)]
        report(f"SiameseNorm {state}, {stream}: MLP update block 1 {u[0]:.2g}, block {L - 1} {u[1]:.2g}; "
               f"dL/d{stream} RMS {g[1]:.1e} at the head, {g[0]:.1e} at sub-layer 1")
post_rms = [row[2]["x"][0] for row in measured["post"]["at initialization"][1][1:]]
assert all(abs(v - 1) < 0.01 for v in post_rms), "Post-Norm's stream after sub-layer 0 is not at RMS 1"

fig, axes = plt.subplots(3, 2, figsize=(12, 10), sharex=True)
for c, state in enumerate(("at initialization", "trained")):
    for layout, marker in (("pre", "o"), ("post", "s"), ("siamese", "v")):
        loss, rows_ = measured[layout][state]
        for stream in rows_[0][2]:
            s = [row[0] for row in rows_]
            style = dict(marker=marker, markersize=4, markerfacecolor="none", linestyle="--" if stream == "y" else "-",
                         label=f"{layout} {stream}", color=COLOR[layout])
            axes[0][c].plot(s, [row[2][stream][0] for row in rows_], **style)
            axes[1][c].plot(s, [row[2][stream][1] for row in rows_], **style)
            axes[2][c].plot(s[:-1], [row[2][stream][2] for row in rows_[:-1]], **style)
    losses = ", ".join(f"{n} {measured[n][state][0]:.3f}" for n in ("pre", "post", "siamese"))
    axes[0][c].set_title((f"{state} ({RACE['steps']} steps)" if state == "trained" else state) +
                         f"\nloss on this batch: {losses}", fontsize=10)
    for r_, label in enumerate(("RMS of the stream entering s", "RMS of dL/d(stream) there",
                                "relative update of sub-layer s")):
        axes[r_][c].set_yscale("log")
        axes[r_][c].set_ylabel(label)
        axes[r_][c].grid(alpha=0.3)
    axes[2][c].set_xlabel(f"sub-layer s (2l: attention of block l, 2l+1: its MLP; {2 * L}: the head)")
axes[0][0].legend(fontsize=8)
fig.suptitle(f"The streams of {L}-block, {RACE['C']}-channel models on the first {RACE['B']}x{RACE['T']} "
             "validation bytes (tools/streams.py's measurement)", fontsize=10)
fig.tight_layout()
show(fig, "class_streams.png")

# %% [markdown]
# Read the picture, and the numbers above it:
#
# - **At initialization** little shows in a narrow model: GPT-2's initialization makes each sub-layer's output small
#   against the embedding (32 channels: a relative update of ~0.08), so no stream grows much. Only the
#   LayerNorms act: Post-Norm's `x` and SiameseNorm's `x` enter every sub-layer after the first at RMS 1.
# - **Dilution, trained** (top and bottom right): Pre-Norm's `x` and SiameseNorm's `y` grow with depth, and the
#   relative update of their sub-layers falls with it, block by block. Post-Norm's sub-layers keep theirs. Look at
#   SiameseNorm's X too: its stream is normalized, but does its sub-layers' share stay? (`1/c_l` accounts for a
#   factor of `c_15 / c_1 = 2.8`; compare that with what you measure.)
# - **The vanishing gradient, trained** (middle right): Post-Norm's gradient crosses a LayerNorm at every sub-layer
#   and falls by orders of magnitude toward the input: its first blocks hardly learn, which is why its loss stalls.
#   SiameseNorm's `dL/dy` reaches every block through Y's identity path; its `dL/dx` stays within a small factor
#   of it, although X crosses a LayerNorm at every sub-layer as Post-Norm's stream does.
# - A stream that enters a LayerNorm gets a gradient inversely proportional to its size: compare how each curve
#   changes with depth, not their heights.
#
# **Discuss**: what in SiameseNorm's backward (section 6) keeps `dL/dx` from vanishing as Post-Norm's does?

# %% [markdown]
# ## 6. The backward pass of one sub-layer, by hand (15 min)
#
# Walk the forward lines in reverse; each gives one or two accumulations (`+=`). A value used twice collects both
# gradients: `z` feeds both streams, `xh` feeds `h` and `x'`, `y` feeds `LN_y` and `y'`:
#
# ```
# x' = xh + z / c_l    ->  dxh += dx';       dz += dx' / c_l
# y' = y + z           ->  dy  += dy';       dz += dy'          (Y's identity path)
# z = F(u)             ->  du   = F'(dz)     (and F's weights)
# u = LN_in(h)         ->  dh   = LN_in'(du)
# h = xh + yh          ->  dxh += dh;        dyh += dh
# yh = LN_y(y)         ->  dy  += LN_y'(dyh)
# xh = LN_x(x)         ->  dx  += LN_x'(dxh)
# ```
#
# Below, the same seven lines in float64, with `F` an MLP and LayerNorm's backward from
# `docs/check_boundary_backward.py` (`dv = r (g - mean(g) - v̂ mean(g v̂))` with `g = γ ⊙ d`), against PyTorch's
# autograd. Then the C++'s version, which you will write yourself in exercise 3 (`make exercise-start N=3`).

# %%
def boundary_backward(P, x, y, dx_out, dy_out, c, forget_depth_scale=False):
    """the seven lines above; returns dx, dy and the parameters' gradients"""
    xh, cx = bb.layernorm(x, P["gx"], P["bx"])
    yh, cy = bb.layernorm(y, P["gy"], P["by"])
    h = xh + yh
    u, ci = bb.layernorm(h, P["gi"], P["bi"])
    a = u @ P["W1"] + P["b1"]
    dxh, dz = dx_out.clone(), dx_out / (1 if forget_depth_scale else c)   # x' = xh + z / c_l
    dy = dy_out.clone()                                                   # y' = y + z
    dz = dz + dy_out
    g = {"W2": bb.gelu(a).T @ dz, "b2": dz.sum(0)}                        # z = F(u), F an MLP
    da = (dz @ P["W2"].T) * bb.gelu_backward(a)
    g.update(W1=u.T @ da, b1=da.sum(0))
    du = da @ P["W1"].T
    dh, g["gi"], g["bi"] = bb.layernorm_backward(du, P["gi"], ci)         # u = LN_in(h)
    dxh = dxh + dh                                                        # h = xh + yh
    dyh = dh
    d, g["gy"], g["by"] = bb.layernorm_backward(dyh, P["gy"], cy)         # yh = LN_y(y)
    dy = dy + d
    g["x"], g["gx"], g["bx"] = bb.layernorm_backward(dxh, P["gx"], cx)    # xh = LN_x(x)
    g["y"] = dy
    return g


torch.manual_seed(0)
N, C, H, l = 8, 16, 64, 2
c = math.sqrt(2 * (l + 1))
f64 = dict(dtype=torch.float64)
P = {n: (1 + 0.3 * torch.randn(C, **f64)) if n[0] == "g" else 0.3 * torch.randn(C, **f64)
     for n in ("gx", "bx", "gy", "by", "gi", "bi")}
P.update(W1=torch.randn(C, H, **f64) / math.sqrt(C), b1=0.1 * torch.randn(H, **f64),
         W2=torch.randn(H, C, **f64) / math.sqrt(H), b2=0.1 * torch.randn(C, **f64))
x, y = torch.randn(N, C, **f64), 3 * torch.randn(N, C, **f64)
dx_out, dy_out = torch.randn(N, C, **f64), torch.randn(N, C, **f64)   # dL/dx', dL/dy' from above

leaves = {n: t.clone().requires_grad_(True) for n, t in dict(P, x=x, y=y).items()}
xh = bb.layernorm(leaves["x"], leaves["gx"], leaves["bx"])[0]
u = bb.layernorm(xh + bb.layernorm(leaves["y"], leaves["gy"], leaves["by"])[0], leaves["gi"], leaves["bi"])[0]
z = bb.gelu(u @ leaves["W1"] + leaves["b1"]) @ leaves["W2"] + leaves["b2"]
((dx_out * (xh + z / c)).sum() + (dy_out * (leaves["y"] + z)).sum()).backward()
ours = boundary_backward(P, x, y, dx_out, dy_out, c)
report(f"block {l} (c_l = {c:.4f}); relative error of each gradient, by hand against autograd:")
for n in ("x", "y", "gx", "bx", "gy", "by", "gi", "bi", "W1", "b1", "W2", "b2"):
    e = relative(ours[n], leaves[n].grad)
    report(f"  d{n:3s} {e:.1e}")
    assert e < 1e-10, f"the hand-written backward's d{n} is off ({e:.1e})"
cpp("siamese_sublayer_backward", "siamese_boundary_backward")

# %% [markdown]
# All twelve agree to about 1e-16, float64's rounding (the check stops at 1e-10; a mistake gives 1e-2 to 1).
#
# **Predict before you run**: the commonest mistake is `dz += dx'`, forgetting the depth scale. Which of the twelve
# gradients go wrong? Only `W1, b1, W2, b2` (F's)? Or the streams' too?

# %%
prediction_forgotten_scale = None  # e.g. ["W1", "b1", "W2", "b2"]

# %%
wrong = boundary_backward(P, x, y, dx_out, dy_out, c, forget_depth_scale=True)
off = [n for n in ours if relative(wrong[n], leaves[n].grad) > 1e-6]
print("wrong with dz += dx':", " ".join(off) + (f"   (you said {' '.join(prediction_forgotten_scale)})"
                                                 if prediction_forgotten_scale else ""))
assert set(off) == set(ours), "forgetting 1/c_l should reach every gradient"

# %% [markdown]
# Every one: `dz` feeds `F`'s backward, whose `du` reaches `LN_in`, then both streams. A mistake in the backward
# propagates to everything below it, which is why the C++ grader names *the first* gradient that is off
# (docs/exercises.md, "Reading the grader").
#
# ## 7. What to take home (5 min)
#
# - Pre-Norm trains stably because its gradient has an identity path; Post-Norm uses its depth because every
#   sub-layer writes a normalized stream. SiameseNorm keeps both streams and shares every weight between them.
# - Cover one stream and the other is Post-Norm or Pre-Norm, up to named LayerNorms (section 3): the method is the
#   two layouts at once, mixed by learned gains.
# - The backward is seven accumulations; `dy += dy'` is the identity path that carries the gradient to every block.
# - At this project's scale (CPU, 64 channels, a few hundred steps), Pre-Norm is ahead in every miniature so far,
#   and SiameseNorm trains where Post-Norm stalls: see the lesson plan and [experiments.md](experiments.md). The
#   paper's claims are about GPT-2-sized models and more data.
#
# Next: the exercises (`make exercise-start N=2`, [exercises.md](exercises.md)), the C++ reference from
# `gpt2_forward` (README, "Read the code"), the derivations in [siamesenorm.md](siamesenorm.md), or train a model:
# `python3 docs/train_model.py --norm siamese -x 300 -l 2e-3 -u 20 -q 0.1 -o out/twin-siamese` (PyTorch) or
# `make train` (C++).
