#!/usr/bin/env python3
"""The peer of tests/bench_gpu.sh: the three layouts in PyTorch as a user would write them, nanoGPT-style modules
(nn.Linear, nn.LayerNorm, F.scaled_dot_product_attention with the causal flash kernel), torch.compile, bf16
autocast and fused AdamW, so that ./train_gpt2cu's speed is read beside what a plain PyTorch program gets on the
same GPU at the same shapes.

    python3 tests/bench_torch.py --bench [--sizes d12:16,d24:16,d36:8,d48:8] [--layouts pre,post,siamese]
                                 [-t 1024] [--steps 15] [--budget 150] [--compile block|model|none]
        one line per size and layout: TORCH size=d12 layout=pre B=16 T=1024 ms=... tok_s=... gib=... compile_s=...
        (the median ms of the steps after the first five, as tests/bench_gpu.sh takes the trainer's; compile_s is
        the first step's time, which pays for torch.compile; a size may also be LxCxNH, e.g. 2x64x2)
    python3 tests/bench_torch.py --check CKPT [CKPT ...] --shard FILE -b B -t T [-m M] [--dtype fp32|bf16|fp32,bf16]
                                 [--device D]
        the mean loss of each checkpoint CKPT over the first M (B, T) batches of a token shard, exactly as the
        trainers' validation computes it, in each dtype given: one line "loss X (dtype, device, ...) CKPT" each, in
        one process (PyTorch starts once). A checkpoint that cannot be read gets a line "error: CKPT: why" and the
        others go on (the exit status is then 1). tests/gpu_check.sh holds it against ./train_gpt2cu's "val loss" on
        the same checkpoints, and tests/test_gpu_scripts.sh against ./reference_cpu's: both programs compute the
        same model. The checkpoint's tensor order comes from the program itself (./reference_cpu --print-tensors).

The model is the one in the README: pre x = x + F(LN(x)); post x = LN(x + F(x)); siamese xh = LN_x(x),
z = F(LN_in(xh + LN_y(y))), x = xh + z / c_l, y = y + z, head LN_f(LN_xf(x) + LN_yf(y)); the tied wte; the softmax
over the real vocabulary only (the padded logits take no probability). torch.compile is applied block by block
(--compile block, the default: one compiled graph serves every block of a size, so compiling takes seconds rather
than minutes at 48 layers; --compile model compiles the whole model as nanoGPT does). Old PyTorch without
torch.compile or scaled_dot_product_attention (Debian's 1.13) falls back to eager mode and an explicit causal
softmax: the --check mode needs only that.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")
SHAPES = {"d12": (12, 768, 12), "d24": (24, 1024, 16), "d36": (36, 1280, 20), "d48": (48, 1600, 25)}
GPT2_VOCAB = 50257


class CausalSelfAttention(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.NH = NH

    def forward(self, u):
        B, T, C = u.shape
        q, k, v = self.c_attn(u).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        if HAVE_SDPA:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.NH)
            mask = torch.ones(T, T, dtype=torch.bool, device=u.device).tril()
            y = att.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.c_fc = nn.Linear(C, 4 * C)
        self.c_proj = nn.Linear(4 * C, C)

    def forward(self, u):
        return self.c_proj(F.gelu(self.c_fc(u), approximate="tanh"))


class Block(nn.Module):
    """One block: attention then MLP, each F between the layout's boundary (the only place the layouts differ)."""

    def __init__(self, layout, C, NH, l, ablations=0):
        super().__init__()
        self.layout = layout
        self.attn, self.mlp = CausalSelfAttention(C, NH), MLP(C)
        self.ln = nn.ModuleList(nn.LayerNorm(C, eps=1e-5) for _ in range(2))  # pre/post's LN1, LN2; siamese LN_x
        if layout == "siamese":
            self.ln_y = nn.ModuleList(nn.LayerNorm(C, eps=1e-5) for _ in range(2))
            self.ln_in = nn.ModuleList(nn.LayerNorm(C, eps=1e-5) for _ in range(2))
            self.inv_c = 1.0 if ablations & 1 else 1.0 / math.sqrt(2 * (l + 1))
            self.no_ln_in = bool(ablations & 2)

    def forward(self, x, y):
        for k, f in enumerate((self.attn, self.mlp)):
            if self.layout == "pre":
                x = x + f(self.ln[k](x))
            elif self.layout == "post":
                x = self.ln[k](x + f(x))
            else:
                xh = self.ln[k](x)
                s = xh + self.ln_y[k](y)
                z = f(s if self.no_ln_in else self.ln_in[k](s))
                x, y = xh + z * self.inv_c, y + z
        return x, y


class GPT(nn.Module):
    def __init__(self, layout, L, C, NH, maxT, V, ablations=0):
        super().__init__()
        self.layout, self.V, self.Vp = layout, V, (V + 127) // 128 * 128
        self.wte = nn.Embedding(self.Vp, C)
        self.wpe = nn.Embedding(maxT, C)
        self.blocks = nn.ModuleList(Block(layout, C, NH, l, ablations) for l in range(L))
        n_head = {"pre": 1, "post": 0, "siamese": 3}[layout]  # pre LN_f; siamese LN_xf, LN_yf, LN_f
        self.ln_f = nn.ModuleList(nn.LayerNorm(C, eps=1e-5) for _ in range(n_head))

    def gpt2_init(self):  # GPT-2's: N(0, 0.02), the residual projections N(0, 0.02/sqrt(2L)), the padded rows 0
        L = len(self.blocks)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith("c_proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
        with torch.no_grad():
            self.wte.weight[self.V:].zero_()

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        y = x
        for block in self.blocks:
            x, y = block(x, y)
        if self.layout == "pre":
            h = self.ln_f[0](x)
        elif self.layout == "post":
            h = x
        else:
            h = self.ln_f[2](self.ln_f[0](x) + self.ln_f[1](y))
        logits = (h @ self.wte.weight.t())[..., : self.V]  # the padded logits take no probability
        return F.cross_entropy(logits.float().reshape(-1, self.V), targets.reshape(-1))


# ---------------------------------------------------------------------------------------------------------------
# --check: our checkpoint in this model

class CheckpointError(Exception):
    pass


def tensor_table(ckpt, program):
    out = subprocess.run([program, "-e", ckpt, "--print-tensors"], capture_output=True, text=True)
    if out.returncode != 0:
        raise CheckpointError("%s -e %s --print-tensors: %s" % (program, ckpt, out.stderr.strip()))
    return json.loads(out.stdout)


def load_checkpoint(ckpt, program):
    table = tensor_table(ckpt, program)
    flat = np.fromfile(ckpt, dtype="<f4", offset=4 * table["header_ints"])
    w = {}
    for t in table["tensors"]:
        n = int(np.prod(t["shape"]))
        w[t["name"]] = torch.from_numpy(flat[t["offset"]: t["offset"] + n].reshape(t["shape"]).copy())
    layout = table["layout"]
    model = GPT(layout, table["num_layers"], table["channels"], table["num_heads"], table["max_seq_len"],
                table["vocab_size"], table["ablations"])
    slot_names = {"pre": ["ln{k}"], "post": ["ln{k}"], "siamese": ["ln{k}x", "ln{k}y", "ln{k}i"]}[layout]
    with torch.no_grad():
        model.wte.weight.copy_(w["wte"])
        model.wpe.weight.copy_(w["wpe"])
        for l, b in enumerate(model.blocks):
            norms = [b.ln] + ([b.ln_y, b.ln_in] if layout == "siamese" else [])
            for k in range(2):
                for norm, name in zip(norms, slot_names):
                    norm[k].weight.copy_(w[name.format(k=k + 1) + "w"][l])
                    norm[k].bias.copy_(w[name.format(k=k + 1) + "b"][l])
            for lin, name in ((b.attn.c_attn, "qkv"), (b.attn.c_proj, "attproj"), (b.mlp.c_fc, "fc"),
                              (b.mlp.c_proj, "fcproj")):
                lin.weight.copy_(w[name + "w"][l])
                lin.bias.copy_(w[name + "b"][l])
        heads = {"pre": ["lnf"], "post": [], "siamese": ["lnfx", "lnfy", "lnf"]}[layout]
        for norm, name in zip(model.ln_f, heads):
            norm.weight.copy_(w[name + "w"])
            norm.bias.copy_(w[name + "b"])
    return model


def read_shard(path):
    header = np.fromfile(path, dtype="<i4", count=256)
    if header[0] != 20240520:
        sys.exit("error: '%s' is not a token shard" % path)
    return np.fromfile(path, dtype="<u2", offset=1024, count=int(header[2])).astype(np.int64)


def check(args):
    device = torch.device(args.device)
    if device.type == "cuda":  # float32 means float32: no TF32 in the products
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    dtypes = args.dtype.split(",")
    if not dtypes or any(d not in ("fp32", "bf16") for d in dtypes):
        sys.exit("error: --dtype takes fp32, bf16 or fp32,bf16, not '%s'" % args.dtype)
    tokens = read_shard(args.shard)
    B, T = args.b, args.t
    batches = min(args.m, len(tokens) // (B * T))
    if batches < 1 or len(tokens) < B * T + 1:
        sys.exit("error: '%s' holds fewer tokens than one batch needs" % args.shard)
    failed = 0
    for ckpt in args.check:
        try:
            model = load_checkpoint(ckpt, args.program).to(device).eval()
        except CheckpointError as e:
            print("error: %s: %s" % (ckpt, e), flush=True)
            failed += 1
            continue
        for dtype in dtypes:
            total = 0.0
            with torch.no_grad():
                for i in range(batches):  # as the trainers' validation: consecutive batches from the shard's start
                    buf = torch.from_numpy(tokens[i * B * T: i * B * T + B * T + 1]).to(device)
                    inputs, targets = buf[:-1].view(B, T), buf[1:].view(B, T)
                    if dtype == "bf16":
                        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
                            total += model(inputs, targets).item()
                    else:
                        total += model(inputs, targets).item()
            print("loss %.6f (%s, %s, %d batches of B=%d T=%d) %s" % (total / batches, dtype, device, batches, B, T,
                                                                      ckpt), flush=True)
        del model
    if failed:
        sys.exit(1)


# ---------------------------------------------------------------------------------------------------------------
# --bench: training steps timed, as ./train_gpt2cu runs them in tests/bench_gpu.sh

def shape_of(size):  # d12 .. d48, or LxCxNH (e.g. 2x64x2 for a smoke test)
    if size in SHAPES:
        return SHAPES[size]
    L, C, NH = (int(v) for v in size.split("x"))
    return L, C, NH


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def bench_one(layout, size, B, T, steps, mode, device):
    L, C, NH = shape_of(size)
    torch.manual_seed(0)
    model = GPT(layout, L, C, NH, max(T, 1024), GPT2_VOCAB).to(device)
    model.gpt2_init()
    fused = {"fused": True} if device.type == "cuda" else {}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0, **fused)
    step_model = model
    if mode == "block":
        for b in model.blocks:
            b.compile()
    elif mode == "model":
        step_model = torch.compile(model)
    data = torch.randint(0, GPT2_VOCAB, (B, T + 1), device=device)
    inputs, targets = data[:, :-1].contiguous(), data[:, 1:].contiguous()
    times = []
    for s in range(steps):
        sync(device)
        t0 = time.time()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            loss = step_model(inputs, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # the trainer clips at 1.0 too
        opt.step()
        if not math.isfinite(loss.item()):  # the trainer downloads its loss each step, too
            raise RuntimeError("the loss is not finite")
        sync(device)
        times.append((time.time() - t0) * 1000)
    ms = statistics.median(times[5:]) if len(times) > 5 else statistics.median(times)
    gib = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else 0.0
    return ms, gib, times[0] / 1000  # the first step pays for compiling


def bench(args):
    device = torch.device(args.device)
    start = time.time()
    name = torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu"
    print("TORCH torch=%s device=%s compile=%s sdpa=%s" % (torch.__version__, name.replace(" ", "_"), args.compile,
                                                           HAVE_SDPA), flush=True)
    for item in args.sizes.split(","):
        size, B = item.split(":")
        for layout in args.layouts.split(","):
            row = "TORCH size=%s layout=%s B=%s T=%d" % (size, layout, B, args.t)
            if time.time() - start > args.budget:
                print(row, "skipped=time", flush=True)
                continue
            try:
                ms, gib, compile_s = bench_one(layout, size, int(B), args.t, args.steps, args.compile, device)
                print(row, "ms=%.1f tok_s=%.0f gib=%.1f compile_s=%.1f" % (ms, int(B) * args.t / (ms / 1000),
                                                                             gib, compile_s), flush=True)
            except Exception as e:  # one failing size (memory, compiler) must not take the others with it
                print(row, "error=%s" % str(e).splitlines()[0][:160].replace(" ", "_"), flush=True)
            if device.type == "cuda":
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit status 1, like every other error here."""

    def error(self, message):
        sys.exit("error: %s (see %s --help)" % (message, self.prog))


def main():
    ap = Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", metavar="CKPT", nargs="+")
    ap.add_argument("--shard")
    ap.add_argument("-b", type=int, default=8)
    ap.add_argument("-t", type=int, default=1024)
    ap.add_argument("-m", type=int, default=1)
    ap.add_argument("--dtype", default="fp32", help="fp32, bf16, or fp32,bf16 (each checkpoint in both)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--program", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                      "reference_cpu"))
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--sizes", default="d12:16,d24:16,d36:8,d48:8")
    ap.add_argument("--layouts", default="pre,post,siamese")
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--budget", type=float, default=150, help="seconds after which no new size starts")
    ap.add_argument("--compile", choices=["block", "model", "none"], default="block")
    args = ap.parse_args()
    if args.compile != "none" and not hasattr(torch, "compile"):
        args.compile = "none"
    if args.check:
        if not args.shard:
            sys.exit("error: --check needs --shard")
        check(args)
    elif args.bench:
        bench(args)
    else:
        ap.error("give --check CKPT or --bench")


if __name__ == "__main__":
    main()
