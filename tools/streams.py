#!/usr/bin/env python3
"""The residual streams of trained models (and of the same models at initialization), sub-layer by sub-layer: the
paper's argument made visible. For each checkpoint it prints a table and draws, against the sub-layer s:

  - the RMS of each stream as it enters sub-layer s (s = 2L: as the head reads it): Pre-Norm's x, Post-Norm's x,
    SiameseNorm's x and y (Mix-LN's, DeepNorm's and HybridNorm's x too, siamese-hybrid's x and y);
  - the RMS of the gradient that reaches it, dL/dstream, with L the mean loss below;
  - the relative update of sub-layer s, |what it adds| / |the stream it adds it to|: Pre-Norm |z| / |x|,
    Post-Norm |z| / |x| (before its LayerNorm), DeepNorm |z| / |alpha x|, SiameseNorm |z / c_l| / |LN_x(x)| on X
    (x' = xh + z / c_l) and |z| / |y| on Y (y' = y + z); z = F(u) is the sub-layer's output. HybridNorm's attention
    |z| / |x|, its MLP |z| / |LN(x)| (x' = LN(x) + z); siamese-hybrid's attention |z / c_l| / |x| on X (x' = x +
    z / c_l, no LN_x there), its MLP as SiameseNorm's; Peri-LN |LN_out(z)| / |x| (x' = x + LN_out(z)).

The batch is the first B*T+1 tokens of a validation shard (the first batch the trainer's validation reads: -m 1 and
the same -b, -t give the same mean loss), RMS and |.| over all its B*T tokens and C channels. The model is
docs/model.py's, which tests/torch_check.py holds to the C++ reference; a subclass of its GPT records the streams and
each z as the forward pass makes them (only LN_x(x), the denominator of X's update, is evaluated once more).

    /usr/bin/python3 tools/streams.py CKPT [CKPT ...] -o FILE.png [--csv FILE.csv] [--init] [--seed N] [-b B] [-t T]
                                      [--val SHARD] [--title TEXT]

--init adds, for each checkpoint, the model of the same shape and layout at initialization, made by the C++ trainer
(GPT-2's initialization with --seed N, default 1337, the trainer's: what `make train` starts from): one training
step at learning rate 0 (-l 0 -x 1), which leaves every parameter as it was initialized, written to a temporary
directory and removed after (tests/test_streams.sh checks its loss against the trainer's new model of that seed).
--csv writes the printed numbers, one row per model, sub-layer and stream. Errors are one line (error: ...) and exit
status 1; FILE.png (and FILE.csv) are written only when everything else succeeded. Needs torch, numpy and
matplotlib (Debian: python3-torch python3-matplotlib).
"""
import argparse
import csv
import importlib
import json
import math
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINER = os.path.join(REPO, "reference_cpu")
SHARD_MAGIC, HEADER_INTS = 20240520, 256
FORMATS = (".png", ".pdf", ".svg")


class Fail(Exception):
    """one line for the user: main prints it after 'error: ' and exits 1"""


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, as every other error here (argparse's own is the usage and a line)
        raise Fail(f"{message} (-h for the usage)")


def parse_args():
    ap = Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoints", nargs="+", metavar="CKPT")
    ap.add_argument("-o", "--output", required=True, metavar="FILE.png")
    ap.add_argument("--csv", metavar="FILE.csv", help="the numbers of the tables")
    ap.add_argument("--init", action="store_true", help="also each model at initialization (the C++ trainer's)")
    ap.add_argument("--seed", type=int, default=1337, help="of the initialization (default 1337, the trainer's)")
    ap.add_argument("-b", type=int, default=8, metavar="B", help="sequences in the batch (default 8, make train's)")
    ap.add_argument("-t", type=int, default=128, metavar="T", help="their length (default 128, make train's)")
    ap.add_argument("--val", default=os.path.join(REPO, "data", "kjv", "kjv_val.bin"), metavar="SHARD",
                    help="the token shard of the batch (default data/kjv/kjv_val.bin)")
    ap.add_argument("--title", default="", help="above the plot")
    args = ap.parse_args()
    if args.b < 1 or args.t < 1:
        raise Fail(f"-b and -t must be at least 1 (got -b {args.b} -t {args.t})")
    for flag, path, endings in (("-o", args.output, FORMATS), ("--csv", args.csv, (".csv",))):
        if path is None:
            continue
        out = os.path.abspath(path)
        if os.path.splitext(out)[1].lower() not in endings:
            raise Fail(f"{flag} {path}: the file name must end in {', '.join(endings)}")
        if os.path.isdir(out):
            raise Fail(f"{flag} {path} is a directory")
        if not os.path.isdir(os.path.dirname(out)) or not os.access(os.path.dirname(out), os.W_OK):
            raise Fail(f"{flag} {path}: no writable directory {os.path.dirname(out)}")
    for path in args.checkpoints:
        if not os.path.isfile(path):
            raise Fail(f"no checkpoint file '{path}'")
    if not os.path.isfile(args.val):
        raise Fail(f"no token shard '{args.val}' (make data writes data/kjv/)")
    if not os.path.isfile(TRAINER):
        raise Fail(f"{os.path.relpath(TRAINER)} is not built (make reference_cpu): it reads the checkpoints")
    for path in args.checkpoints:  # before PyTorch is imported (seconds): the trainer's own checks of the file
        r = subprocess.run([TRAINER, "-e", path, "--print-tensors"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True)
        if r.returncode != 0:
            said = (r.stderr.strip().splitlines() or [f"exit status {r.returncode}"])[-1]
            raise Fail(said[len("error: "):] if said.startswith("error: ") else f"{path}: {said}")
        max_t = json.loads(r.stdout)["max_seq_len"]
        if args.t > max_t:
            raise Fail(f"-t {args.t} is longer than {path}'s maximum sequence length {max_t}")
    return args


def read_batch(path, B, T, V):
    """inputs and targets (B, T) from the first B*T+1 tokens of the shard (llm.c's format: data/README.md)"""
    import numpy as np
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(4 * HEADER_INTS), dtype="<i4")
        if header.size != HEADER_INTS or header[0] != SHARD_MAGIC:
            raise Fail(f"'{path}' is not a token shard (no {SHARD_MAGIC} header)")
        tokens = np.frombuffer(f.read(2 * (B * T + 1)), dtype="<u2").astype(np.int64)
    if tokens.size < B * T + 1:
        raise Fail(f"'{path}' holds {tokens.size} tokens, fewer than -b {B} x -t {T} + 1")
    if header[3] != V or tokens.max() >= V:
        raise Fail(f"'{path}' has a vocabulary of {header[3]}, the model one of {V}")
    return tokens[:-1].reshape(B, T), tokens[1:].reshape(B, T)


def init_checkpoint(cfg, seed, shard, tmp):
    """the trainer's model of cfg's shape and layout at initialization: a step at learning rate 0 changes nothing"""
    flags = ["--norm", cfg.layout, "--layers", cfg.L, "--channels", cfg.C, "--heads", cfg.NH, "--max-seq-len",
             cfg.maxT, "--vocab", cfg.V, "--seed", seed, "-l", 0, "-x", 1, "-b", 1, "-t", min(8, cfg.maxT),
             "-v", 0, "-s", 0, "-i", shard, "-j", shard, "-o", os.path.join(tmp, "init")]
    flags += ["--no-depth-scale"] * bool(cfg.ablations & 1) + ["--no-ln-in"] * bool(cfg.ablations & 2)
    if cfg.layout == "mix":
        flags += ["--mix-alpha", cfg.setting / cfg.L]  # floor(alpha L) = P, its Post-LN blocks
    r = subprocess.run([TRAINER] + [str(f) for f in flags], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    path = os.path.join(tmp, "init", "model_00000001.bin")
    if r.returncode != 0 or not os.path.isfile(path):
        last = (r.stdout.strip().splitlines() or ["no output"])[-1]
        raise Fail(f"the trainer could not make the {cfg.layout} model at initialization: {last}")
    return path


def measure(model, cfg, params, inputs, targets):
    """one forward and backward pass of docs/model.py's GPT on the batch, recording each stream where it enters a
    sub-layer or the head: the mean loss and rows (s, name, {stream: (rms, grad rms, relative update)})"""
    import torch

    rms = lambda v: float(v.detach().double().pow(2).mean().sqrt())

    class Recorder(model.GPT):
        """model.GPT that keeps the streams entering each boundary and the head, and each sub-layer's output z"""
        def __init__(self, cfg, p):
            super().__init__(cfg, p)
            self.seen = []  # (l, k, the streams entering, z), in order; (None, None, streams, None) for the head

        def boundary(self, l, k, f, streams):
            streams = tuple(s.clone() for s in streams)  # one node each: x_0 and y_0 are the same h0
            for s in streams:
                s.retain_grad()
            zs = []

            def f_kept(u):
                zs.append(f(u))
                return zs[-1]
            out = super().boundary(l, k, f_kept, streams)
            self.seen.append((l, k, streams, zs[0]))
            return out

        def head(self, *streams):
            streams = tuple(s.clone() for s in streams)
            for s in streams:
                s.retain_grad()
            self.seen.append((None, None, streams, None))
            return super().head(*streams)

    p = {n: torch.tensor(a, dtype=torch.float32, requires_grad=True) for n, a in params.items()}
    gpt = Recorder(cfg, p)
    loss = gpt.loss(gpt.forward(torch.tensor(inputs)), torch.tensor(targets))
    if not math.isfinite(float(loss)):
        raise Fail(f"the loss is {float(loss)}: the checkpoint holds a diverged model")
    loss.backward()
    rows = []
    with torch.no_grad():
        for s, (l, k, streams, z) in enumerate(gpt.seen):
            kind = gpt.kind(l, k) if l is not None else None
            name = "head" if l is None else f"{'attn' if k == 0 else 'mlp'} {l}"
            names = ("x", "y") if len(streams) == 2 else ("x",)
            cells = {}
            for stream_name, v in zip(names, streams):
                update = None
                if kind in ("pre", "post", "residual", "hc"):  # hc: what z is before its weight beta_j
                    update = rms(z) / rms(v)
                elif kind == "normed":
                    update = rms(z) / rms(gpt.ln(f"ln{k + 1}", v, l))
                elif kind == "siamese_c1":
                    update = rms(z / gpt.c_l(l)) / rms(v) if stream_name == "x" else rms(z) / rms(v)
                elif kind == "deepnorm":
                    update = rms(z) / rms(gpt.alpha() * v)
                elif kind == "peri":  # what it adds is LN_out(z)
                    update = rms(gpt.ln(f"ln{k + 1}o", z, l)) / rms(v)
                elif kind == "siamese":
                    update = (rms(z / gpt.c_l(l)) / rms(gpt.ln(f"ln{k + 1}x", v, l)) if stream_name == "x"
                              else rms(z) / rms(v))
                cells[stream_name] = (rms(v), rms(v.grad), update)
            rows.append((s, name, cells))
    return float(loss), rows


def label(cfg):
    ablations = [a for bit, a in ((1, "no depth scale"), (2, "no LN_in")) if cfg.ablations & bit]
    return cfg.layout + (f" ({', '.join(ablations)})" if ablations else "") + (
        f" (P={cfg.setting})" if cfg.layout == "mix" else "")


def print_table(title, cfg, loss, rows, B, T, shard):
    print(f"{title}: {label(cfg)}, {cfg.L} blocks, C={cfg.C}; mean loss {loss:.6f} on the first {B}x{T} tokens of "
          f"{os.path.relpath(shard)}")
    streams = list(rows[0][2])
    update = {"siamese": {"x": "|z/c_l|/|xh|"}, "siamese-hybrid": {"x": "|z/c_l|/|xh|"}, "deepnorm": {"x": "|z|/|ax|"},
              "hybrid": {"x": "|z|/|xn|"}, "hybrid-star": {"x": "|z|/|xn|"}, "peri": {"x": "|zn|/|x|"}}.get(cfg.layout, {})
    # (at siamese-hybrid's attention xh stands for x, at hybrid's attention xn for x: no LayerNorm there)
    head = f"{'s':>3s} {'sub-layer':9s}" + "".join(
        f" | {n + ' rms':>9s} {'dL/d' + n + ' rms':>11s} {update.get(n, '|z|/|' + n + '|'):>12s}" for n in streams)
    print(head)
    for s, name, cells in rows:
        line = f"{s:3d} {name:9s}"
        for n in streams:
            r, g, u = cells[n]
            line += f" | {r:9.4f} {g:11.3e} {('%12.4f' % u) if u is not None else '-':>12s}"
        print(line)
    print()


def plot(results, path, title, B, T, shard, init, staged):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = ["at initialization", "trained"] if init else ["trained"]
    fig, axes = plt.subplots(3, len(columns), figsize=(6.2 * len(columns), 10), squeeze=False, sharex=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    layouts = []
    for cfg, column, loss, rows, _ in results:
        if label(cfg) not in layouts:
            layouts.append(label(cfg))
        color = colors[layouts.index(label(cfg)) % len(colors)]
        c = columns.index(column)
        for n in rows[0][2]:
            # y dashed; open markers of a shape per layout, so that lines on top of each other stay visible
            style = dict(color=color, linestyle="--" if n == "y" else "-", marker="osv^D<>"[len(layouts) - 1],
                         markersize=6 if n == "x" else 4, markerfacecolor="none", label=f"{label(cfg)} {n}")
            s = [row[0] for row in rows]
            for r in (0, 1):
                axes[r][c].plot(s, [row[2][n][r] for row in rows], **style)
            axes[2][c].plot(s[:-1], [row[2][n][2] for row in rows[:-1]], **style)
        axes[0][c].set_title(f"{column}" + "".join(f"\n{label(cf)}: loss {lo:.3f}" for cf, co, lo, _, _ in results
                                                   if co == column), fontsize=9)
    for c in range(len(columns)):
        axes[0][c].set_ylabel("RMS of the stream entering s")
        axes[1][c].set_ylabel("RMS of dL/d(stream) there")
        axes[2][c].set_ylabel("relative update of sub-layer s")
        axes[2][c].set_xlabel("sub-layer s (2l: attention of block l, 2l+1: its MLP; 2L: the head)")
        for r in range(3):
            axes[r][c].set_yscale("log")
            axes[r][c].grid(alpha=0.3)
        axes[0][c].legend(fontsize=8)
    fig.suptitle((title + "\n" if title else "") + f"L = the mean loss on the first {B}x{T} tokens of "
                 f"{os.path.basename(shard)}; RMS and |.| over the batch's tokens and channels\nrelative update of "
                 "sub-layer s: |z| / |x| (pre, post), |z/c_l| / |LN_x(x)| (siamese x), |z| / |y| (siamese y); "
                 "z = F(u), the sub-layer's output", fontsize=9)
    fig.tight_layout()
    write_beside(path, lambda tmp: fig.savefig(tmp, dpi=110), staged)


def write_csv(results, path, staged):
    def write(tmp):
        with open(tmp, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["checkpoint", "state", "layout", "ablations", "setting", "loss", "s", "sublayer", "stream",
                        "rms", "grad_rms", "update"])
            for cfg, column, loss, rows, source in results:
                for s, name, cells in rows:
                    for n, (r, g, u) in cells.items():
                        w.writerow([source, column, cfg.layout, cfg.ablations, cfg.setting, "%.6f" % loss, s, name,
                                    n, "%.6g" % r, "%.6g" % g, "" if u is None else "%.6g" % u])
    write_beside(path, write, staged)


def write_beside(path, write, staged):
    """write(tmp) into a temporary file beside path; (tmp, path) goes to staged, renamed by main when all succeeded"""
    fd, tmp = tempfile.mkstemp(suffix=os.path.splitext(path)[1], dir=os.path.dirname(os.path.abspath(path)))
    os.close(fd)
    staged.append((tmp, path))
    try:
        write(tmp)
    except OSError as e:
        raise Fail(f"cannot write {path} ({e.strerror or e})")


def main():
    staged = []  # (temporary file, its final name)
    try:
        args = parse_args()
        try:
            for name in ("numpy", "matplotlib", "torch"):
                importlib.import_module(name)
        except ImportError as e:
            raise Fail(f"{e} with {sys.executable} (Debian: python3-torch python3-matplotlib; /usr/bin/python3)")
        sys.dont_write_bytecode = True  # no docs/__pycache__ left behind
        sys.path.insert(0, os.path.join(REPO, "docs"))
        import model
        import torch
        torch.set_num_threads(min(2, torch.get_num_threads()))
        results = []
        with tempfile.TemporaryDirectory(prefix="streams_") as tmp:
            for path in args.checkpoints:
                try:
                    cfg, params = model.load_checkpoint(path, TRAINER)
                except ValueError as e:
                    raise Fail(f"{path}: {e}")
                inputs, targets = read_batch(args.val, args.b, args.t, cfg.V)
                models = [("trained", path, cfg, params)]
                if args.init:
                    init_path = init_checkpoint(cfg, args.seed, args.val, os.path.join(tmp, str(len(results))))
                    init_cfg, init_params = model.load_checkpoint(init_path, TRAINER)
                    if init_cfg != cfg:
                        raise Fail(f"the trainer's model at initialization is {init_cfg}, not {cfg}")
                    models.insert(0, ("at initialization", f"{path} at initialization (seed {args.seed})",
                                      init_cfg, init_params))
                for column, title, c, p in models:
                    loss, rows = measure(model, c, p, inputs, targets)
                    print_table(title, c, loss, rows, args.b, args.t, args.val)
                    results.append((c, column, loss, rows, path))
        plot(results, args.output, args.title, args.b, args.t, args.val, args.init, staged)
        if args.csv:
            write_csv(results, args.csv, staged)
        umask = os.umask(0)
        os.umask(umask)
        for tmp, path in staged:
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 -> what any new file gets
            os.replace(tmp, path)
        print(f"wrote {args.output}" + (f" and {args.csv}" if args.csv else ""))
    except Fail as e:
        sys.exit(f"error: {e}")
    except OSError as e:
        sys.exit(f"error: {e}")
    except KeyboardInterrupt:
        sys.exit("error: interrupted")  # (the finally below removes what was staged)
    finally:
        for tmp, _ in staged:
            if os.path.exists(tmp):
                os.remove(tmp)


if __name__ == "__main__":
    main()
