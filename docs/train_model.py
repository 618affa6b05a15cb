#!/usr/bin/env python3
"""docs/train_model.py: docs/model.py trains alone, as llm.c's train_gpt2.py stands beside train_gpt2.c.

Everything the C++ trainer does around the model, in PyTorch and with the C++'s numbers, so that a class needs no
compiler: read top to bottom, each part names the C++ it mirrors.

  parameter_table   the checkpoint's tensors, in order (host/model_config.h's parameter_specs; host/layouts.h's rows)
  init_parameters   GPT-2's initialization from a seed (host/init.h): the same float32 bits as the C++ trainer's
  write_checkpoint, read_checkpoint   llm.c's model file (docs/file_formats.md), both ways, without ./reference_cpu
  Shards            llm.c's token shards, read in order, batch after batch (host/dataloader.h)
  learning_rate_at  the schedule (host/schedulers.h): a linear warmup, then a cosine decay to a fraction of the peak
  AdamW             reference_cpu.cpp's adamw_update, element by element in float32
  train             host/train_loop.h's loop: validate, forward and backward, clip, update, log

The model itself is docs/model.py's GPT; nothing here changes it. As a program it takes the C++ trainer's flags
(a subset, the same letters and defaults) and writes what its -o does, main.log and the last checkpoint:

    /usr/bin/python3 docs/train_model.py --norm siamese --layers 4 --channels 128 --heads 4 -b 8 -t 128 \\
        -l 2e-3 -u 20 -q 0.1 -x 300 -v 50 -o out/twin-siamese      # make train's run, in PyTorch
    /usr/bin/python3 docs/train_model.py -e out/siamese/model_00000300.bin -x 0 -v 1 -m 20   # a C++ checkpoint's
                                                                                          # validation loss
and as a library (the class notebook, docs/siamesenorm_class.py, does this):

    cfg = config("siamese", L=4, C=128, NH=4, maxT=1024, V=256)
    params = as_tensors(init_parameters(cfg, seed=1337))
    log = train(cfg, params, Shards("data/kjv/kjv_train.bin", B=8, T=128), steps=300, lr=2e-3, warmup=20,
                final_frac=0.1, val=Shards("data/kjv/kjv_val.bin", B=8, T=128), val_every=50)
    write_checkpoint("model.bin", cfg, params)

tests/twin_check.py holds this file to the C++ trainer: the tensor table against --print-tensors, the initial
checkpoint against the C++'s byte for byte, each side's checkpoints loaded by the other with the same loss, and a
few steps of training from one checkpoint with the same losses and parameters in both.
"""
import collections
import glob
import math
import os
import sys
import time

import numpy as np
import torch

sys.dont_write_bytecode = True  # no docs/__pycache__ left behind
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model  # noqa: E402  (docs/model.py: the GPT, its Config)

HEADER_INTS = 256
MODEL_MAGIC, MODEL_VERSION_FP32 = 20240326, 3  # llm.c's model file
SHARD_MAGIC, SHARD_VERSION, GPT2_VOCAB = 20240520, 1, 50257  # llm.c's token shard (vocabulary 0 means GPT-2's)


class Error(Exception):
    """what the program prints as one line, `error: ...`, before it exits 1 (the C++ trainer's fail())"""


# ------------------------------------------------------------------------------------------------------------------
# the tensor table: host/layouts.h's rows, as much of them as the checkpoint needs

# A layout's row: its id (header[8]); the LayerNorms at the attention's boundary (ln1*), the blocks that have them
# (0: all L), the LayerNorms at the MLP's (ln2*) and at the head; whether the attention has the QKV-norm and the
# boundary the gain c1; the ablation bits it takes (header[9]); whether it has a setting (mix's P, header[10]);
# whether every boundary has hyper-connections' weights (hc: hc*s, hc*w, hc*sc after its LayerNorms).
Layout = collections.namedtuple("Layout", "id attn_norms attn_norm_blocks mlp_norms head_norms qkv_norm c1 "
                                          "ablations has_setting hc", defaults=(False,))
SIAMESE_HEAD = ("lnfx", "lnfy", "lnf")
LAYOUTS = {
    "pre": Layout(0, ("ln1",), 0, ("ln2",), ("lnf",), False, False, 0, False),
    "post": Layout(1, ("ln1",), 0, ("ln2",), (), False, False, 0, False),
    "siamese": Layout(2, ("ln1x", "ln1y", "ln1i"), 0, ("ln2x", "ln2y", "ln2i"), SIAMESE_HEAD, False, False, 3, False),
    "mix": Layout(3, ("ln1",), 0, ("ln2",), ("lnf",), False, False, 0, True),
    "deepnorm": Layout(4, ("ln1",), 0, ("ln2",), (), False, False, 0, False),
    "hybrid": Layout(5, (), 0, ("ln2",), ("lnf",), True, False, 0, False),
    "hybrid-star": Layout(6, ("ln1",), 1, ("ln2",), ("lnf",), True, False, 0, False),
    "siamese-hybrid": Layout(7, ("ln1y",), 0, ("ln2x", "ln2y", "ln2i"), SIAMESE_HEAD, True, True, 3, False),
    "pre-qkvnorm": Layout(8, ("ln1",), 0, ("ln2",), ("lnf",), True, False, 0, False),
    "peri": Layout(9, ("ln1", "ln1o"), 0, ("ln2", "ln2o"), ("lnf",), False, False, 0, False),
    "hc": Layout(10, ("ln1", "ln1h"), 0, ("ln2", "ln2h"), ("lnf",), False, False, 0, False, True),
}
LAYOUT_OF_ID = {row.id: name for name, row in LAYOUTS.items()}
MIX_ALPHA = 0.25  # --mix-alpha's default: the first floor(alpha L) blocks are Post-LN


def config(layout, L=4, C=128, NH=4, maxT=1024, V=256, ablations=0, setting=None):
    """a new model's Config (docs/model.py's): the C++ trainer's defaults, Vp = V padded to a multiple of 128;
    mix's setting, its Post-LN blocks P, from MIX_ALPHA unless given"""
    if layout not in LAYOUTS:
        raise Error(f"unknown layout '{layout}' (this trainer knows {', '.join(LAYOUTS)})")
    row = LAYOUTS[layout]
    if setting is None:
        setting = math.floor(MIX_ALPHA * L + 1e-9) if row.has_setting else 0
        if row.has_setting and setting < 1:
            raise Error(f"--mix-alpha {MIX_ALPHA} at {L} layers gives no Post-LN block (floor(alpha L) = 0)")
    cfg = model.Config(layout, ablations, setting, L, NH, C, V, (V + 127) // 128 * 128, maxT)
    check_config(cfg)
    return cfg


def check_config(cfg):
    """the C++'s validate_config, for the shapes and settings this file can make or read"""
    row = LAYOUTS[cfg.layout]
    if min(cfg.L, cfg.C, cfg.NH, cfg.maxT, cfg.V) < 1:
        raise Error(f"model shape must be positive (L={cfg.L} C={cfg.C} NH={cfg.NH} maxT={cfg.maxT} V={cfg.V})")
    if cfg.C % cfg.NH:
        raise Error(f"channels ({cfg.C}) must be divisible by heads ({cfg.NH})")
    if cfg.V > 65536 or cfg.Vp < cfg.V:
        raise Error(f"vocabulary {cfg.V} (padded {cfg.Vp}) does not fit the uint16 token shards")
    if cfg.ablations & ~row.ablations:
        raise Error(f"the ablations apply to siamese and siamese-hybrid only (not {cfg.layout})")
    if (not row.has_setting and cfg.setting != 0) or (row.has_setting and not 1 <= cfg.setting <= cfg.L):
        raise Error(f"{cfg.layout} at L={cfg.L}: {cfg.setting} is not a valid setting (header[10])")


def parameter_table(cfg):
    """[(name, shape, decay)] in checkpoint order: the embeddings; for the attention, then the MLP, the boundary's
    LayerNorms (a gain and a shift each) before the sub-layer's weights (hc's connection weights after each
    boundary's LayerNorms, c1 after the attention's, the QKV-norm's right after qkvb); then the head's LayerNorms.
    decay: the 2-D weight matrices (AdamW's weight decay)."""
    row, L, C, hs = LAYOUTS[cfg.layout], cfg.L, cfg.C, cfg.C // cfg.NH
    table = [("wte", (cfg.Vp, C), True), ("wpe", (cfg.maxT, C), True)]
    hc = lambda i: [(f"hc{i}s", (L, 2, 4), False), (f"hc{i}w", (L, 4, C), False), (f"hc{i}sc", (L, 2), False)]  # noqa
    table += [(n + wb, (row.attn_norm_blocks or L, C), False) for n in row.attn_norms for wb in "wb"]
    table += hc(1) * row.hc
    table += [("c1", (L, C), False)] * row.c1
    table += [("qkvw", (L, 3 * C, C), True), ("qkvb", (L, 3 * C), False)]
    table += [(n + wb, (L, hs), False) for n in ("lnq", "lnk", "lnv") for wb in "wb"] * row.qkv_norm
    table += [("attprojw", (L, C, C), True), ("attprojb", (L, C), False)]
    table += [(n + wb, (L, C), False) for n in row.mlp_norms for wb in "wb"]
    table += hc(2) * row.hc
    table += [("fcw", (L, 4 * C, C), True), ("fcb", (L, 4 * C), False), ("fcprojw", (L, C, 4 * C), True),
              ("fcprojb", (L, C), False)]
    table += [(n + wb, (C,), False) for n in row.head_norms for wb in "wb"]
    return table


# ------------------------------------------------------------------------------------------------------------------
# GPT-2's initialization, host/init.h's, with host/rand.h's random numbers: splitmix64, Box-Muller

U64 = np.uint64
SPLITMIX_INCREMENT = 0x9E3779B97F4A7C15


def splitmix64_draws(state, first, count):
    """draws first .. first+count-1 of splitmix64 from `state` (draw k: the state after k+1 increments, mixed)"""
    with np.errstate(over="ignore"):  # uint64 arithmetic wraps, as in C
        z = U64(state) + (np.arange(first + 1, first + count + 1, dtype=U64) * U64(SPLITMIX_INCREMENT))
        z = (z ^ (z >> U64(30))) * U64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> U64(27))) * U64(0x94D049BB133111EB)
        return z ^ (z >> U64(31))


def normals(n, std, state):
    """float32(std * random_normal()) for n normals in sequence, host/init.h's fill_normal: normal i from draws 2i
    (u1) and 2i+1 (u2), sqrt(-2 log(1 - u1)) cos(2 pi u2), in float64, rounded to float32. NumPy's log and cos may
    differ from the C library's (the C++'s) in the last bit of a float64; that changes the float32 only where the
    float64 lies within a few of its ulps of a float32 rounding boundary, so those (within 2^-40 of one, relative:
    about 20 in a million) are computed again with Python's math module, which calls the C library's, as the C++
    does. (NumPy 1.24's float64 cos differs from glibc's in the last bit for most inputs here, its log for 10%.)"""
    out = np.empty(n, dtype=np.float32)
    chunk = 1 << 20
    for i0 in range(0, n, chunk):
        k = min(chunk, n - i0)
        u = (splitmix64_draws(state, 2 * i0, 2 * k) >> U64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)
        u1, u2 = u[0::2], u[1::2]
        r = std * (np.sqrt(-2.0 * np.log(1.0 - u1)) * np.cos(6.283185307179586 * u2))
        near = (r * (1 - 2.0 ** -40)).astype(np.float32) != (r * (1 + 2.0 ** -40)).astype(np.float32)
        for j in np.flatnonzero(near):
            r[j] = std * (math.sqrt(-2.0 * math.log(1.0 - u1[j])) * math.cos(6.283185307179586 * u2[j]))
        out[i0:i0 + k] = r.astype(np.float32)
    return out


def tensor_seed(seed, name):
    """each tensor's own stream, seeded by (seed, name): FNV-style, state = state * 1099511628211 ^ byte"""
    state = seed % 2 ** 64
    for ch in name.encode():
        state = (state * 1099511628211 % 2 ** 64) ^ ch
    return state


def init_std_scale(cfg, name):
    """a layout's own initialization (host/layouts.h's init_std): DeepNorm's beta = (8L)^(-1/4) on the value rows of
    qkvw and on attprojw, fcw, fcprojw, in place of GPT-2's scale; None for the other layouts and tensors. Returns
    (the rows of one block's matrix it applies to, the std they get)."""
    if cfg.layout != "deepnorm" or name not in ("qkvw", "attprojw", "fcw", "fcprojw"):
        return None
    beta = (8.0 * cfg.L) ** -0.25
    return (slice(2 * cfg.C, None) if name == "qkvw" else slice(None)), 0.02 * beta


def init_parameters(cfg, seed=1337):
    """{name: float32 array} in checkpoint order, host/init.h's init_parameters: the 2-D weights N(0, 0.02), the
    residual output projections (attprojw, fcprojw) N(0, 0.02/sqrt(2L)), biases 0, LayerNorm gains 1 and shifts 0,
    c1 1, hc's connections the paper's start (S = [e_(s mod 2) | I | 1] per block, projections 0, scales 0.01),
    wte's padded rows 0; each 2-D weight from its own stream, so that the layouts' shared weights start equal"""
    params = {}
    for name, shape, decay in parameter_table(cfg):
        size = int(np.prod(shape))
        if (name.startswith("ln") and name.endswith("w")) or name == "c1":
            p = np.ones(size, dtype=np.float32)
        elif name in ("hc1s", "hc2s"):  # row j (stream j): alpha_j0 (F's input), alpha_j1, alpha_j2, beta_j
            k = int(name[2]) - 1  # the sub-layer s = 2l + k: s mod 2 = k
            p = np.tile(np.array([[j == k, j == 0, j == 1, 1] for j in range(2)], dtype=np.float32), (cfg.L, 1, 1))
        elif name in ("hc1sc", "hc2sc"):
            p = np.full(size, 0.01, dtype=np.float32)
        elif decay:
            std = 0.02 / math.sqrt(2.0 * cfg.L) if name in ("attprojw", "fcprojw") else 0.02
            drawn = cfg.V * cfg.C if name == "wte" else size  # the padded vocabulary rows stay 0
            p = np.zeros(size, dtype=np.float32)
            p[:drawn] = normals(drawn, std, tensor_seed(seed, name))
            scale = init_std_scale(cfg, name)
            if scale is not None:  # the same draws, scaled in float64 and rounded again, as the C++ does
                rows, want = scale
                block = p.reshape(-1, *shape[-2:])[:, rows]
                p.reshape(-1, *shape[-2:])[:, rows] = (block.astype(np.float64) * (want / std)).astype(np.float32)
        else:
            p = np.zeros(size, dtype=np.float32)
        params[name] = p.reshape(shape)
    return params


# ------------------------------------------------------------------------------------------------------------------
# llm.c's model file: 256 int32 (magic, version 3, maxT, V, L, NH, C, Vp, [8] layout, [9] ablations, [10] setting),
# then the float32 parameters in parameter_table's order

def as_tensors(params):
    """{name: array} -> {name: float32 leaf tensor that requires grad}, what train updates in place"""
    return {n: torch.tensor(np.asarray(a), dtype=torch.float32).requires_grad_(True) for n, a in params.items()}


def write_checkpoint(path, cfg, params):
    """the C++ trainer's checkpoint_write: the header, then the parameters (arrays or tensors) as float32; written
    to a temporary name beside path and renamed, so that a failure never leaves half a file"""
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[:11] = (MODEL_MAGIC, MODEL_VERSION_FP32, cfg.maxT, cfg.V, cfg.L, cfg.NH, cfg.C, cfg.Vp,
                   LAYOUTS[cfg.layout].id, cfg.ablations, cfg.setting)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(header.tobytes())
            for name, shape, _ in parameter_table(cfg):
                a = params[name].detach().numpy() if torch.is_tensor(params[name]) else np.asarray(params[name])
                if a.shape != shape:
                    raise Error(f"{path}: tensor {name} has shape {a.shape}, the layout's table says {shape}")
                f.write(a.astype("<f4").tobytes())
        os.replace(tmp, path)
    except OSError as e:
        raise Error(f"cannot write '{path}' ({e.strerror or e})")
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def read_checkpoint(path):
    """the C++ trainer's checkpoint_open and checkpoint_read_parameters: (Config, {name: float32 array}), with the
    same checks of the header, the size and every value"""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise Error(f"cannot read '{path}' ({e.strerror or e})")
    if len(data) < 4 * HEADER_INTS:
        raise Error(f"'{path}' is shorter than a checkpoint's header ({len(data)} bytes)")
    h = np.frombuffer(data[:4 * HEADER_INTS], dtype="<i4")
    if h[0] != MODEL_MAGIC:
        raise Error(f"'{path}' is not a model checkpoint (bad magic {h[0]})")
    if h[1] != MODEL_VERSION_FP32:
        raise Error(f"'{path}' has version {h[1]}; this trainer reads float32 checkpoints (version 3)")
    if np.any(h[11:]):
        i = 11 + int(np.flatnonzero(h[11:])[0])
        raise Error(f"'{path}' has unknown header field {i} = {h[i]}")
    if int(h[8]) not in LAYOUT_OF_ID:
        raise Error(f"'{path}' has layout {h[8]} (header[8]), which docs/train_model.py's table does not hold")
    maxT, V, L, NH, C, Vp = (int(v) for v in h[2:8])
    if min(maxT, V, L, NH, C, Vp) < 1 or Vp < V or L > 1024 or C > 65536 or maxT > 1 << 20:
        raise Error(f"'{path}' has an implausible header (maxT={maxT} V={V} L={L} NH={NH} C={C} Vp={Vp})")
    cfg = model.Config(LAYOUT_OF_ID[int(h[8])], int(h[9]), int(h[10]), L, NH, C, V, Vp, maxT)
    check_config(cfg)
    table = parameter_table(cfg)
    expected = 4 * HEADER_INTS + 4 * sum(int(np.prod(shape)) for _, shape, _ in table)
    if len(data) != expected:
        raise Error(f"'{path}' has {len(data)} bytes, expected {expected} for this {cfg.layout} model "
                    f"({'truncated' if len(data) < expected else 'trailing data'})")
    flat = np.frombuffer(data, dtype="<f4", offset=4 * HEADER_INTS)
    if not np.all(np.isfinite(flat)):
        raise Error(f"'{path}' holds a non-finite parameter at index {int(np.flatnonzero(~np.isfinite(flat))[0])}")
    params, offset = {}, 0
    for name, shape, _ in table:
        size = int(np.prod(shape))
        params[name] = flat[offset:offset + size].reshape(shape).copy()
        offset += size
    return cfg, params


# ------------------------------------------------------------------------------------------------------------------
# llm.c's token shards: 256 int32 (magic 20240520, version 1, tokens, vocabulary), then uint16 tokens

class Shards:
    """host/dataloader.h's DataLoader: the shards matching `pattern` (sorted, as glob sorts them), read in order;
    a batch is B*T+1 consecutive tokens (targets one after the inputs), and a shard with fewer than that left
    is left for the next (wrapping around)"""

    def __init__(self, pattern, B, T):
        self.files = sorted(glob.glob(pattern))
        if not self.files:
            raise Error(f"no token shards match '{pattern}' (prepare the default data with: python3 data/prepare.py kjv)")
        self.B, self.T, self.tokens, self.vocab_size = B, T, [], None
        for path in self.files:
            if not os.path.isfile(path):
                raise Error(f"'{path}' is not a regular file")
            with open(path, "rb") as f:
                h = np.frombuffer(f.read(4 * HEADER_INTS), dtype="<i4")
            if h.size != HEADER_INTS or h[0] != SHARD_MAGIC:
                raise Error(f"'{path}' is not a token shard (bad magic {h[0] if h.size else 'none'})")
            if h[1] != SHARD_VERSION or np.any(h[4:]):
                raise Error(f"'{path}' has an unsupported shard version {h[1]} or unknown header fields")
            n, size = int(h[2]), os.path.getsize(path)
            if n < 0 or size != 4 * HEADER_INTS + 2 * n:
                raise Error(f"'{path}' has {size} bytes but its header promises {n} tokens")
            vocab = int(h[3]) or GPT2_VOCAB
            if self.vocab_size is not None and vocab != self.vocab_size:
                raise Error(f"'{path}' has vocabulary {vocab} but earlier shards have {self.vocab_size}")
            if n < B * T + 1:
                raise Error(f"'{path}' holds {n} tokens, fewer than one batch needs (B*T+1 = {B * T + 1})")
            self.vocab_size = vocab
            self.tokens.append(np.memmap(path, dtype="<u2", mode="r", offset=4 * HEADER_INTS, shape=(n,)))
        self.reset()

    def reset(self):
        self.shard, self.position = 0, 0

    def next_batch(self):
        """(inputs, targets), (B, T) torch.long each"""
        need = self.B * self.T + 1
        if self.position + need > len(self.tokens[self.shard]):
            self.shard, self.position = (self.shard + 1) % len(self.files), 0
        buf = np.asarray(self.tokens[self.shard][self.position:self.position + need], dtype=np.int64)
        if buf.max() >= self.vocab_size:
            raise Error(f"'{self.files[self.shard]}': a token id at or after position {self.position} is out of "
                        f"range (vocabulary {self.vocab_size})")
        self.position += need - 1
        return (torch.from_numpy(buf[:-1].reshape(self.B, self.T)),
                torch.from_numpy(buf[1:].reshape(self.B, self.T)))

    def num_tokens(self):
        return sum(len(t) for t in self.tokens)


# ------------------------------------------------------------------------------------------------------------------
# the schedule and the optimizer

def learning_rate_at(step, total, max_lr, warmup, final_frac):
    """host/schedulers.h: linear warmup over `warmup` steps, then cosine decay to final_frac * max_lr at the end"""
    if step < warmup:
        return max_lr * (step + 1) / warmup
    if total <= warmup:
        return max_lr
    progress = (step - warmup) / (total - warmup)
    return max_lr * (final_frac + (1 - final_frac) * 0.5 * (1.0 + math.cos(math.pi * progress)))


def f32(v):
    """v rounded to float32, as a Python float: the C++'s (real) casts of its scalars"""
    return float(np.float32(v))


class AdamW:
    """reference_cpu.cpp's adamw_update (Loshchilov & Hutter's AdamW with bias correction), element by element in
    float32 with the C++'s scalars and order of operations; t counts from 1:

        g = grad * grad_scale                    (grad_scale = clip / |grad| when |grad| > clip, else 1)
        m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g g
        p -= lr (m / (1 - beta1^t) / (sqrt(v / (1 - beta2^t)) + eps) + wd p)    (wd only on the 2-D weights)
    """

    def __init__(self, cfg, params, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.0):
        self.params = params
        self.decay = {name for name, _, decay in parameter_table(cfg) if decay}
        self.beta1, self.beta2, self.eps, self.weight_decay = f32(beta1), f32(beta2), f32(eps), f32(weight_decay)
        self.m = {n: torch.zeros_like(p, requires_grad=False) for n, p in params.items()}
        self.v = {n: torch.zeros_like(p, requires_grad=False) for n, p in params.items()}

    @torch.no_grad()
    def step(self, lr, grad_scale, t):
        one = np.float32(1)
        b1, b2 = self.beta1, self.beta2
        bc1, bc2 = float(one - np.float32(b1 ** t)), float(one - np.float32(b2 ** t))
        lr, grad_scale = f32(lr), f32(grad_scale)
        for name, p in self.params.items():
            grad = p.grad * grad_scale
            m, v = self.m[name], self.v[name]
            m.mul_(b1).add_(f32(one - np.float32(b1)) * grad)
            v.mul_(b2).add_(f32(one - np.float32(b2)) * grad * grad)
            wd = self.weight_decay if name in self.decay else 0.0
            p.sub_(lr * ((m / bc1) / ((v / bc2).sqrt() + self.eps) + wd * p))


def grad_norm(params):
    """the global gradient norm, as reference_cpu.cpp's gpt2_grad_norm: the squares summed in float64"""
    return math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in params.values()))


# ------------------------------------------------------------------------------------------------------------------
# the training loop, host/train_loop.h's

def validation_loss(gpt, val, max_batches=20):
    """host/eval.h: the mean loss over the first min(max_batches, what fits) batches of the validation shards"""
    batches = min(max_batches, val.num_tokens() // (val.B * val.T))
    val.reset()
    total = 0.0
    with torch.no_grad():
        for _ in range(batches):
            inputs, targets = val.next_batch()
            total += float(gpt.loss(gpt.forward(inputs), targets))
    return total / batches


def train(cfg, params, data, steps, lr=3e-4, warmup=0, final_frac=1.0, weight_decay=0.0, grad_clip=1.0,
          accum=1, val=None, val_every=20, val_steps=20, report=None, gpt_class=model.GPT):
    """`steps` steps of AdamW on `data` (Shards), updating params ({name: leaf tensor}, as_tensors') in place, as
    the C++ trainer does from step 0: validation (every val_every steps and at the end, when val is given), then
    per step the mean loss of `accum` micro-batches and its gradient, the global norm, clipping, the scheduled
    learning rate, the update. Returns the log records, each also passed to report: {"step", "trl", "norm", "lr",
    "ms"} per step (step counted from 1, as main.log does) and {"step", "tel"} per validation."""
    gpt = gpt_class(cfg, params)
    opt = AdamW(cfg, params, weight_decay=weight_decay)
    log = []

    def record(r):
        log.append(r)
        if report:
            report(r)
    for step in range(steps + 1):
        last = step == steps
        if val is not None and val_every > 0 and (step % val_every == 0 or last):
            loss = validation_loss(gpt, val, val_steps)
            if not math.isfinite(loss):
                raise Error(f"the validation loss is {loss} at step {step}: training diverged")
            record({"step": step, "tel": loss})
        if last:
            break
        t0 = time.time()
        for p in params.values():
            p.grad = None
        loss = 0.0
        for _ in range(accum):
            inputs, targets = data.next_batch()
            micro = gpt.loss(gpt.forward(inputs), targets)
            if not math.isfinite(float(micro)):
                raise Error(f"the loss is {float(micro)} at step {step + 1}: training diverged (try a lower -l)")
            (micro / accum).backward()
            loss += float(micro) / accum
        for p in params.values():  # a tensor the loss does not reach (LN_in under --no-ln-in) has gradient 0
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        norm = grad_norm(params)
        if not math.isfinite(norm):
            raise Error(f"the gradient norm is {norm} at step {step + 1}: training diverged (try a lower -l)")
        grad_scale = grad_clip / norm if grad_clip > 0 and norm > grad_clip else 1.0
        rate = learning_rate_at(step, steps, lr, warmup, final_frac)
        opt.step(rate, grad_scale, step + 1)
        record({"step": step + 1, "trl": loss, "norm": norm, "lr": rate, "ms": (time.time() - t0) * 1000})
    return log


# ------------------------------------------------------------------------------------------------------------------
# the program: the C++ trainer's flags (a subset), its output lines and its main.log

USAGE = """usage: docs/train_model.py [flags]   (the C++ trainer's letters and defaults)
  -i GLOB -j GLOB  train and validation shards (default data/kjv/kjv_train.bin, data/kjv/kjv_val.bin)
  -e CKPT          start from a checkpoint (either trainer's) instead of a new model
  --norm NAME      the layout of a new model: {layouts} (default pre)
  --layers N --channels N --heads N --max-seq-len N   (default 4, 128, 4, 1024)
  --no-depth-scale --no-ln-in   SiameseNorm's ablations   --mix-alpha F  (default 0.25)
  --seed N         initialization seed (default 1337)
  -b N -t N        micro-batch and sequence length (default 8, 128)   -d N  tokens a step (default b*t)
  -l F -u N -q F   peak learning rate, warmup steps, final fraction (default 3e-4, 0, 1.0)
  -c F             weight decay (default 0)    --grad-clip F  (default 1.0; 0 off)
  -x N             steps (default -1: one epoch)
  -v N -m N        validate every N steps, over M batches (default 20, 20; -v 0 never)
  -o DIR           write DIR/main.log and DIR/model_<steps>.bin (--start-over replaces a run there)
  --threads N      PyTorch's CPU threads (default: PyTorch's)"""

FLAGS = {"-i": str, "-j": str, "-e": str, "--norm": str, "--layers": int, "--channels": int, "--heads": int,
         "--max-seq-len": int, "--mix-alpha": float, "--seed": int, "-b": int, "-t": int, "-d": int, "-l": float,
         "-u": int, "-q": float, "-c": float, "--grad-clip": float, "-x": int, "-v": int, "-m": int, "-o": str,
         "--threads": int}
SWITCHES = ("--no-depth-scale", "--no-ln-in", "--start-over")


def parse_flags(argv):
    o = {"-i": "data/kjv/kjv_train.bin", "-j": "data/kjv/kjv_val.bin", "--seed": 1337, "-b": 8, "-t": 128,
         "-l": 3e-4, "-u": 0, "-q": 1.0, "-c": 0.0, "--grad-clip": 1.0, "-x": -1, "-v": 20, "-m": 20}
    i = 0
    while i < len(argv):
        f = argv[i]
        if f in ("-h", "--help"):
            print(USAGE.format(layouts=", ".join(LAYOUTS)))
            sys.exit(0)
        if f in SWITCHES:
            o[f] = True
            i += 1
            continue
        if f not in FLAGS:
            raise Error(f"unknown flag '{f}' (-h for the usage)")
        if i + 1 >= len(argv):
            raise Error(f"{f} needs a value")
        try:
            o[f] = FLAGS[f](argv[i + 1])
        except ValueError:
            raise Error(f"{f}: '{argv[i + 1]}' is not a{'n integer' if FLAGS[f] is int else ' number'}")
        if FLAGS[f] is float and not math.isfinite(o[f]):
            raise Error(f"{f} must be finite, got {argv[i + 1]}")
        i += 2
    for f in ("-b", "-t", "--layers", "--channels", "--heads", "--max-seq-len", "-m"):
        if f in o and o[f] < 1:
            raise Error(f"{f} must be at least 1, got {o[f]}")
    for f in ("-l", "-u", "-c", "--grad-clip", "-v"):
        if o[f] < 0:
            raise Error(f"{f} must be >= 0, got {o[f]}")
    if not 0 <= o["-q"] <= 1:
        raise Error(f"-q must lie in [0, 1], got {o['-q']}")
    if o["-x"] < -1:
        raise Error("-x must be >= 0, or -1 for one epoch")
    if "-d" in o and (o["-d"] < 1 or o["-d"] % (o["-b"] * o["-t"])):
        raise Error(f"-d {o['-d']} must be a positive multiple of b*t = {o['-b'] * o['-t']}")
    if "--threads" in o and o["--threads"] < 1:
        raise Error("--threads must be at least 1")
    return o


def build_model(o, vocab):
    """the model the flags ask for: -e's checkpoint (checked against any shape flag given), or a new one"""
    shape_flags = [f for f in ("--norm", "--layers", "--channels", "--heads", "--max-seq-len", "--mix-alpha",
                               "--no-depth-scale", "--no-ln-in") if f in o]
    if "-e" in o:
        cfg, params = read_checkpoint(o["-e"])
        if shape_flags and (o.get("--norm", cfg.layout) != cfg.layout or o.get("--layers", cfg.L) != cfg.L or
                            o.get("--channels", cfg.C) != cfg.C or o.get("--heads", cfg.NH) != cfg.NH or
                            o.get("--max-seq-len", cfg.maxT) != cfg.maxT):
            raise Error(f"the model flags ask for another model than the checkpoint's ({cfg.layout}, L={cfg.L} "
                        f"C={cfg.C} NH={cfg.NH} maxT={cfg.maxT})")
        return cfg, params
    layout, L = o.get("--norm", "pre"), o.get("--layers", 4)
    if "--mix-alpha" in o and layout != "mix":
        raise Error(f"--mix-alpha applies to --norm mix only (the model is {layout})")
    setting = None
    if "--mix-alpha" in o:
        if not 0 < o["--mix-alpha"] <= 1:
            raise Error(f"--mix-alpha must be in (0, 1], got {o['--mix-alpha']}")
        setting = math.floor(o["--mix-alpha"] * L + 1e-9)
        if setting < 1:
            raise Error(f"--mix-alpha {o['--mix-alpha']} at {L} layers gives no Post-LN block")
    ablations = 1 * bool(o.get("--no-depth-scale")) + 2 * bool(o.get("--no-ln-in"))
    cfg = config(layout, L, o.get("--channels", 128), o.get("--heads", 4), o.get("--max-seq-len", 1024), vocab,
                 ablations, setting)
    return cfg, init_parameters(cfg, o["--seed"])


def main(argv):
    o = parse_flags(argv)
    if "--threads" in o:
        torch.set_num_threads(o["--threads"])
    B, T = o["-b"], o["-t"]
    data = Shards(o["-i"], B, T)
    val = Shards(o["-j"], B, T) if o["-v"] > 0 else None
    cfg, params = build_model(o, data.vocab_size)
    if T > cfg.maxT:
        raise Error(f"-t {T} exceeds the model's maximum sequence length {cfg.maxT}")
    if max(data.vocab_size, val.vocab_size if val else 0) > cfg.V:
        raise Error(f"the data's vocabulary ({data.vocab_size}) is larger than the model's ({cfg.V})")
    total = o.get("-d", B * T)
    steps = o["-x"] if o["-x"] >= 0 else max(1, data.num_tokens() // total)
    logfile = None
    if "-o" in o:
        os.makedirs(o["-o"], exist_ok=True)
        log_path = os.path.join(o["-o"], "main.log")
        if os.path.exists(log_path) and not o.get("--start-over"):
            raise Error(f"'{o['-o']}' holds a run (main.log): give --start-over to replace it, or another -o")
        logfile = open(log_path, "w")
    params = as_tensors(params)
    print(f"layout {cfg.layout}, L={cfg.L} C={cfg.C} NH={cfg.NH} maxT={cfg.maxT} V={cfg.V} Vp={cfg.Vp}, "
          f"{sum(p.numel() for p in params.values())} parameters; B={B} T={T}, {total // (B * T)} micro-step(s); "
          f"steps 0 to {steps}; PyTorch {torch.__version__}, {torch.get_num_threads()} thread(s)", flush=True)

    def report(r):
        if "tel" in r:
            print(f"val loss {r['tel']:.6f}", flush=True)
            line = f"s:{r['step']} tel:{r['tel']:.6f}\n"
        else:
            print(f"step {r['step']:5d}/{steps} | loss {r['trl']:.6f} | norm {r['norm']:.4f} | lr {r['lr']:.2e} | "
                  f"{r['ms']:.1f} ms", flush=True)
            line = f"s:{r['step']} trl:{r['trl']:.6f} norm:{r['norm']:.4f} lr:{r['lr']:.3e} ms:{r['ms']:.1f}\n"
        if logfile:
            logfile.write(line)
            logfile.flush()
    train(cfg, params, data, steps, o["-l"], o["-u"], o["-q"], o["-c"], o["--grad-clip"], total // (B * T), val,
          o["-v"], o["-m"], report)
    if logfile:
        logfile.close()
        if steps > 0:
            path = os.path.join(o["-o"], f"model_{steps:08d}.bin")
            write_checkpoint(path, cfg, params)
            print(f"checkpoint saved: {path}")


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except Error as e:
        sys.exit(f"error: {e}")
    except OSError as e:
        sys.exit(f"error: {e.strerror or e}: {getattr(e, 'filename', '') or ''}")
    except KeyboardInterrupt:
        sys.exit("error: interrupted")
