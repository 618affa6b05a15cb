"""docs/model.py: the layouts of siamese-gpt in compact PyTorch, the readable twin of reference_cpu.cpp.

Read GPT.forward first (the whole model on one screen), then the boundary of the layout you came for (GPT.siamese
for SiameseNorm), then its head. The sub-layers F (GPT.attention, GPT.mlp) are GPT-2's, the same in every layout
but for one change inside the attention (QKV-norm, below); a first reading may skip them and load_checkpoint.
Sub-layer s = 2l + k of block l: k = 0 its attention (LayerNorms ln1*), k = 1 its MLP (ln2*). The kinds of boundary
and head are host/layouts.h's:

  pre         x = x + F(LN(x))                                               head LN_f(x)
  post        x = LN(x + F(x))                                               head x
  siamese     xh = LN_x(x); z = F(LN_in(xh + LN_y(y))); x = xh + z/c_l; y = y + z   head LN_f(LN_xf(x) + LN_yf(y))
  deepnorm    x = LN(alpha x + F(x)), alpha = (2L)^(1/4)                     head x
  residual    x = x + F(x)                   (HybridNorm's attention: F reads the raw stream)
  normed      xn = LN(x); x = xn + F(xn)     (HybridNorm's MLP)
  siamese_c1  z = F(c1 * x + LN_y(y)); x = x + z/c_l; y = y + z   (c1: a learned gain of C channels per block)
  peri        x = x + LN_out(F(LN(x)))       (Peri-LN: a LayerNorm on F's input and one on its output)
  hc          A = S + s tanh(LN_h([x; y]) W^T); z = F(LN(A00 x + A10 y)); x = A01 x + A11 y + A03 z;
              y = A02 x + A12 y + A13 z      (Hyper-Connections, dynamic, two streams)       head LN_f(x + y)

A layout is a kind per sub-layer and a head: mix (Mix-LN) is post in its first P blocks and pre after them, with
pre's head; hybrid (HybridNorm) is residual at the attention and normed at the MLP, head LN_f(x); hybrid-star
(HybridNorm*) is hybrid with block 0 pre; siamese-hybrid (SiameseNorm with HybridNorm's X stream, the paper's
language model) is siamese_c1 at the attention and siamese at the MLP, with siamese's head. In these three the
attention is QKV-norm attention: each head's q, k and v are LayerNorm-ed over its hs channels (GPT.qkv_norm).
Two baselines: pre-qkvnorm is pre with that attention; peri (Peri-LN) is peri in every sub-layer, with pre's head.
hc (Hyper-Connections) is hc in every sub-layer: learned connections, per token, between two streams and F.

The parameters come from a checkpoint the C++ trainer wrote, located through its tensor table (./reference_cpu -e
CKPT --print-tensors), so no copy of the file format lives here. tests/torch_check.py holds this file to the C++
reference (logits, loss, every gradient); tools/streams.py uses it to draw the streams.

    cfg, params = load_checkpoint("out/siamese/model_00000300.bin")
    model = GPT(cfg, {name: torch.tensor(a) for name, a in params.items()})
    loss = model.loss(model.forward(inputs), targets)   # inputs, targets: (B, T) torch.long token ids
"""
import dataclasses
import json
import math
import os
import subprocess

import numpy as np
import torch
import torch.nn.functional as F

TRAINER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "reference_cpu")
NO_DEPTH_SCALE, NO_LN_IN = 1, 2  # SiameseNorm's ablations (--no-depth-scale, --no-ln-in): bits of header[9]
TWO_STREAMS = ("siamese", "siamese-hybrid", "hc")  # the layouts with a second stream y
QKV_NORM = ("hybrid", "hybrid-star", "siamese-hybrid", "pre-qkvnorm")  # the layouts whose attention normalizes q, k, v


@dataclasses.dataclass
class Config:
    layout: str     # pre, post, siamese, mix, deepnorm, hybrid, hybrid-star, siamese-hybrid, pre-qkvnorm, peri or hc
    ablations: int  # NO_DEPTH_SCALE | NO_LN_IN (siamese and siamese-hybrid only)
    setting: int    # the layout's own setting: mix's P, its Post-LN blocks (0: none)
    L: int          # blocks
    NH: int         # heads
    C: int          # channels
    V: int          # vocabulary
    Vp: int         # rows of wte: V padded to a multiple of 128
    maxT: int       # rows of wpe


class GPT:
    def __init__(self, cfg, p):
        self.cfg, self.p = cfg, p  # p: name -> tensor, stacked over blocks: p["qkvw"] (L, 3C, C), p["ln1xw"] (L, C)

    # ---- LayerNorm, and the sub-layers F: the same in every layout (but QKV-norm, in the layouts of QKV_NORM)
    def ln(self, name, v, l=None):
        """LayerNorm `name` (ln1x: block l's LN_x before its attention; lnf: the head's) over v's last dimension"""
        w, b = (self.p[name + "w"], self.p[name + "b"]) if l is None else (self.p[name + "w"][l], self.p[name + "b"][l])
        return F.layer_norm(v, (v.shape[-1],), w, b, eps=1e-5)

    def attention(self, l, u):
        """block l's causal self-attention of u (B, T, C), NH heads of hs = C / NH channels"""
        p, (B, T, C), NH = self.p, u.shape, self.cfg.NH
        q, k, v = (t.reshape(B, T, NH, C // NH).transpose(1, 2)  # (B, NH, T, hs)
                   for t in F.linear(u, p["qkvw"][l], p["qkvb"][l]).split(C, dim=-1))
        if self.cfg.layout in QKV_NORM:
            q, k, v = self.qkv_norm(l, q, k, v)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(C // NH)
        att = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf")).softmax(dim=-1)
        return F.linear((att @ v).transpose(1, 2).reshape(B, T, C), p["attprojw"][l], p["attprojb"][l])

    def qkv_norm(self, l, q, k, v):
        """HybridNorm's QKV-norm: each of q, k, v (B, NH, T, hs) LayerNorm-ed over the hs channels of each head and
        token, with block l's gains and shifts of size hs (lnq, lnk, lnv), shared by the heads"""
        return self.ln("lnq", q, l), self.ln("lnk", k, l), self.ln("lnv", v, l)

    def gelu(self, h):
        return F.gelu(h, approximate="tanh")  # GPT-2's tanh approximation

    def mlp(self, l, u):
        p = self.p
        return F.linear(self.gelu(F.linear(u, p["fcw"][l], p["fcb"][l])), p["fcprojw"][l], p["fcprojb"][l])

    # ---- the sub-layer boundaries, one per kind: n names the sub-layer's LayerNorms (ln1, ln2), f is its F
    def pre(self, l, n, f, x):       # x = x + F(LN(x))
        return x + f(self.ln(n, x, l))

    def post(self, l, n, f, x):      # x = LN(x + F(x))
        return self.ln(n, x + f(x), l)

    def deepnorm(self, l, n, f, x):  # x = LN(alpha x + F(x))
        return self.ln(n, self.alpha() * x + f(x), l)

    def siamese(self, l, n, f, x, y):  # xh = LN_x(x); z = F(LN_in(xh + LN_y(y))); x = xh + z/c_l; y = y + z
        xh = self.ln(n + "x", x, l)
        u = self.ln_in(l, n, xh + self.ln(n + "y", y, l))
        z = f(u)
        return xh + z / self.c_l(l), y + z

    def residual(self, l, n, f, x):  # x = x + F(x): no LayerNorm at this boundary
        return x + f(x)

    def normed(self, l, n, f, x):    # xn = LN(x); x = xn + F(xn)
        xn = self.ln(n, x, l)
        return xn + f(xn)

    def siamese_c1(self, l, n, f, x, y):  # z = F(c1 * x + LN_y(y)); x = x + z/c_l; y = y + z
        z = f(self.p["c1"][l] * x + self.ln(n + "y", y, l))
        return x + z / self.c_l(l), y + z

    def peri(self, l, n, f, x):      # x = x + LN_out(F(LN(x))): LN is pre's (ln1, ln2), LN_out ln1o, ln2o
        return x + self.ln(n + "o", f(self.ln(n, x, l)), l)

    def hc(self, l, n, f, x, y):     # A = S + s tanh(LN_h([x; y]) W^T); z = F(LN(A00 x + A10 y)); the streams
        p, h = self.p, n.replace("ln", "hc")  # mixed by A, plus A_j3 z.  hc1*, hc2*: the sub-layer's tensors
        D = torch.tanh(torch.stack([self.ln(n + "h", x, l), self.ln(n + "h", y, l)], dim=-2) @ p[h + "w"][l].t())
        A = p[h + "s"][l] + p[h + "sc"][l][[0, 0, 0, 1]] * D  # (B, T, 2, 4); the scales: alpha's, alpha's, .., beta's
        a = lambda j, m: A[..., j, m:m + 1]  # noqa: E731  stream j's weight m of each token, (B, T, 1)
        z = f(self.ln(n, a(0, 0) * x + a(1, 0) * y, l))
        return a(0, 1) * x + a(1, 1) * y + a(0, 3) * z, a(0, 2) * x + a(1, 2) * y + a(1, 3) * z

    def ln_in(self, l, n, v):        # LN_in, the normalized input; the identity under --no-ln-in
        return v if self.cfg.ablations & NO_LN_IN else self.ln(n + "i", v, l)

    def c_l(self, l):                # the depth scale of block l, sqrt(2(l+1)); 1 under --no-depth-scale
        return 1.0 if self.cfg.ablations & NO_DEPTH_SCALE else math.sqrt(2 * (l + 1))

    def alpha(self):                 # DeepNorm's residual scale
        return (2 * self.cfg.L) ** 0.25

    # ---- the heads: the last streams -> hf, which the tied wte turns into logits
    def head_ln(self, x):
        return self.ln("lnf", x)

    def head_identity(self, x):
        return x  # the last sub-layer ended with a LayerNorm

    def head_siamese(self, x, y):
        return self.ln("lnf", self.ln("lnfx", x) + self.ln("lnfy", y))

    def head_sum(self, x, y):        # Hyper-Connections: the streams summed
        return self.ln("lnf", x + y)

    # ---- the dispatch (host/layouts.h's registry): which boundary sub-layer k of block l has, which head the layout
    def kind(self, l, k):
        layout = self.cfg.layout
        if layout == "mix":
            return "post" if l < self.cfg.setting else "pre"
        if layout == "hybrid-star" and l == 0:
            return "pre"
        if layout in ("hybrid", "hybrid-star"):
            return ("residual", "normed")[k]
        if layout == "siamese-hybrid":
            return ("siamese_c1", "siamese")[k]
        if layout == "pre-qkvnorm":
            return "pre"  # its QKV-norm is inside F (GPT.attention)
        return layout  # pre, post, siamese, deepnorm, peri, hc: one kind in every sub-layer

    def head(self, *streams):
        return {"pre": self.head_ln, "mix": self.head_ln, "hybrid": self.head_ln, "hybrid-star": self.head_ln,
                "post": self.head_identity, "deepnorm": self.head_identity, "siamese": self.head_siamese,
                "siamese-hybrid": self.head_siamese, "pre-qkvnorm": self.head_ln,
                "peri": self.head_ln, "hc": self.head_sum}[self.cfg.layout](*streams)

    def boundary(self, l, k, f, streams):
        """sub-layer k of block l with its layout's boundary: the streams (x,) or (x, y) before F -> after"""
        out = getattr(self, self.kind(l, k))(l, f"ln{k + 1}", f, *streams)
        return out if isinstance(out, tuple) else (out,)

    # ---- the model
    def forward(self, inputs):
        """the logits (B, T, Vp) of the token ids inputs (B, T), the padded columns V..Vp-1 included"""
        p, T = self.p, inputs.shape[1]
        h0 = p["wte"][inputs] + p["wpe"][:T]
        streams = (h0, h0) if self.cfg.layout in TWO_STREAMS else (h0,)  # x (and y): both start as h0
        for l in range(self.cfg.L):
            streams = self.boundary(l, 0, lambda u: self.attention(l, u), streams)
            streams = self.boundary(l, 1, lambda u: self.mlp(l, u), streams)
        return self.head(*streams) @ p["wte"].t()  # the output projection is the token embedding (tied)

    def loss(self, logits, targets):
        """the mean cross-entropy over the real vocabulary: the padded logits take no probability"""
        V = self.cfg.V
        return F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1))


def load_checkpoint(path, trainer=TRAINER):
    """A checkpoint of the C++ trainer: its Config and {name: float32 array} in checkpoint order, located by the
    trainer's tensor table (each offset checked to follow the one before, the sizes against the file's)."""
    r = subprocess.run([trainer, "-e", path, "--print-tensors"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    if r.returncode != 0:
        raise ValueError(r.stderr.strip() or f"{trainer} -e {path} --print-tensors: exit {r.returncode}")
    t = json.loads(r.stdout)
    cfg = Config(t["layout"], t["ablations"], t["layout_setting"], t["num_layers"], t["num_heads"], t["channels"],
                 t["vocab_size"], t["padded_vocab_size"], t["max_seq_len"])
    with open(path, "rb") as f:
        flat = np.frombuffer(f.read()[4 * t["header_ints"]:], dtype="<f4")
    params, offset = {}, 0
    for tensor in t["tensors"]:
        size = int(np.prod(tensor["shape"]))
        if tensor["offset"] != offset or offset + size > flat.size:
            raise ValueError(f"{path}: tensor {tensor['name']} does not follow the one before, or the file ends")
        params[tensor["name"]] = flat[offset:offset + size].reshape(tensor["shape"])
        offset += size
    if offset != flat.size:
        raise ValueError(f"{path}: {flat.size} floats after the header, but the layout's tensors are {offset}")
    return cfg, params
