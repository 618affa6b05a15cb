#!/usr/bin/env python3
"""How each layout uses its depth (docs/experiments.md): trains (or reuses) one model per layout, then measures
on the val shard, without any fine-tuning,

  (a) layer dropping: the val loss with each single block removed (its two sub-layers skipped, the streams passing
      through unchanged), and with k blocks removed, k up to 30% of the depth, chosen greedily (each step removes
      the block that hurts least) or by the single-removal ranking;
  (b) siamese stream balance: how much of the LN_in input comes from each stream, per sub-layer. Read from the
      learned gains: share_x = |gamma_x| / (|gamma_x| + |gamma_y|) (L2 norms over channels) of LN_x and LN_y;
      since LN_x(x) = gamma_x * xhat + beta_x with xhat of unit variance per token, |gamma_x| is the size of the
      X term of the sum (if the channels of xhat are roughly uncorrelated). The probe also measures the share on
      activations: the mean over tokens of |LN_x(x)| / (|LN_x(x)| + |LN_y(y)|), biases included.
  (c) logit lens: the val loss of decoding each sub-layer boundary's X and Y state through the head.

(a) and (c) and the activation share come from experiments/depth_probe (C++, the reference's own forward pass);
(b)'s gains are read here from the checkpoint. Writes RESULTS.csv (every number, long format), RESULTS_drop.png,
RESULTS_balance.png, RESULTS_lens.png and RESULTS.md (the printed tables).

    /usr/bin/python3 experiments/depth_use.py          # CPU default: the LR sweep's models at lr 3e-3 (cached)
    /usr/bin/python3 experiments/depth_use.py --gpu    # d12 models from ./train_gpt2cu; the probe still runs on
                                                       # the CPU (slow at d12: hours on a few cores)
"""
import json
import math
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import lr_sweep  # noqa: E402

common.use_plotting_python()

PROBE = "experiments/depth_probe"
PROBE_CPU = dict(B=8, T=64, batches=16)
PROBE_GPU = dict(B=2, T=1024, batches=4)
DEFAULT_LR = dict(cpu=3e-3, gpu=2e-3)


def checkpoint_layout(path):
    """The configuration of a checkpoint and where each named tensor lies in it: {name: (offset in floats, size)},
    from the program's own tensor table (./reference_cpu -e PATH --print-tensors), which also checks the file."""
    res = subprocess.run([os.path.join(common.REPO, "reference_cpu"), "-e", path, "--print-tensors"],
                         capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit("error: reference_cpu -e %s --print-tensors: %s" % (path, res.stderr.strip()))
    table = json.loads(res.stdout)
    layout = {t["name"]: (t["offset"], math.prod(t["shape"])) for t in table["tensors"]}
    return dict(L=table["num_layers"], C=table["channels"], layout=table["layout"]), layout


def read_tensor(path, layout, name):
    import array
    off, n = layout[name]
    t = array.array("f")
    with open(path, "rb") as f:
        f.seek(1024 + 4 * off)
        t.frombytes(f.read(4 * n))
    if sys.byteorder == "big":
        t.byteswap()
    return t


def gain_shares(path):
    """[(s, share_x)] for every sub-layer s = 2l + k and the head (s = 2L), from the LN_x and LN_y gains."""
    cfg, layout = checkpoint_layout(path)
    L, C = cfg["L"], cfg["C"]

    def norm(v):
        return math.sqrt(sum(x * x for x in v))

    out = []
    gains = {name: read_tensor(path, layout, name) for name in ("ln1xw", "ln1yw", "ln2xw", "ln2yw", "lnfxw", "lnfyw")}
    for s in range(2 * L):
        l, k = divmod(s, 2)
        gx = norm(gains["ln%dxw" % (k + 1)][l * C:(l + 1) * C])
        gy = norm(gains["ln%dyw" % (k + 1)][l * C:(l + 1) * C])
        out.append((s, gx / (gx + gy)))
    gx, gy = norm(gains["lnfxw"]), norm(gains["lnfyw"])
    out.append((2 * L, gx / (gx + gy)))
    return out


def run_probe(ckpt, val, args, extra=()):
    """The probe's CSV rows for one checkpoint, cached beside it (keyed by the probe's command line); `extra`: more
    probe flags (e.g. --greedy 0)."""
    cmd = [PROBE, "-e", ckpt, "-j", val, "-b", str(args.probe_B), "-t", str(args.probe_T),
           "-m", str(args.probe_batches)] + list(extra)
    cache = ckpt + ".probe.csv"
    key = " ".join(cmd)
    # a checkpoint removed after its probe ran (a campaign's records kept without the weights: horizon.py --records)
    # keeps its result; a rerun of the training run removes its whole directory, this cache with it
    if not args.fresh and os.path.exists(cache) and (not os.path.exists(ckpt)
                                                     or os.path.getmtime(cache) >= os.path.getmtime(ckpt)):
        with open(cache) as f:
            lines = f.read().splitlines()
        if lines and lines[0] == "# " + key:
            return parse_probe(lines[1:])
    env = dict(os.environ, OMP_NUM_THREADS=str(args.probe_threads))
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=common.REPO)
    if res.returncode != 0:
        sys.exit("error: %s failed: %s" % (" ".join(cmd), res.stderr.strip().splitlines()[-1:]))
    common.write_text(cache, "# " + key + "\n" + res.stdout)  # whole or not at all: a cut one would be read back
    return parse_probe(res.stdout.splitlines())


def parse_probe(lines):
    rows = []
    for line in lines[1:]:  # after the header
        probe, index, stream, removed, value = line.split(",")
        rows.append(dict(probe=probe, index=int(index) if index else None, stream=stream, removed=removed,
                         value=float(value)))
    return rows


def parse_args(argv=None):
    p = common.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.common_arguments(p, "docs/results/depth_use")
    p.add_argument("--variants", default=",".join(common.SWEEP_VARIANTS),
                   help="names of common.VARIANTS (default: section 2's five, %(default)s)")
    p.add_argument("--lr", type=float, help="peak lr of the models (CPU default %g, GPU %g)"
                   % (DEFAULT_LR["cpu"], DEFAULT_LR["gpu"]))
    p.add_argument("--probe-B", type=int)
    p.add_argument("--probe-T", type=int)
    p.add_argument("--probe-batches", type=int)
    p.add_argument("--probe-threads", type=int, default=2, help="OMP_NUM_THREADS of the probe (default 2)")
    args = p.parse_args(argv)
    # the models are trained exactly as the LR sweep trains them, so the sweep's runs are reused
    preset = lr_sweep.GPU if args.gpu else lr_sweep.CPU
    for key in ("train", "val", "layers", "channels", "heads", "B", "T", "total", "steps", "warmup", "val_every",
                "val_batches"):
        if getattr(args, key) is None:
            setattr(args, key, preset[key])
    if args.lr is None:
        args.lr = DEFAULT_LR["gpu" if args.gpu else "cpu"]
    probe = PROBE_GPU if args.gpu else PROBE_CPU
    args.probe_B = args.probe_B or probe["B"]
    args.probe_T = args.probe_T or min(probe["T"], args.T)
    args.probe_batches = args.probe_batches or probe["batches"]
    return args


def main():
    args = parse_args()
    common.prepare_trainer(args)
    if not common.DRY_RUN:
        common.ensure_binary(PROBE, "experiments")
    common.ensure_file(args.train, "prepare it with data/prepare.py")
    common.ensure_file(args.val, "prepare it with data/prepare.py")
    variants = common.parse_variants(args.variants)
    runs = common.run_all(lr_sweep.build_runs(args, variants, [args.lr]), args.jobs, args.threads, args.fresh,
                          "depth-use models")
    results = {}
    for r in runs:
        v = r.meta["variant"]
        if r.status != "ok":
            print("%s: %s, no model to probe" % (v, r.describe()))
            continue
        ckpt = r.final_checkpoint(args.steps)
        print("probing %s (%s)" % (v, ckpt), flush=True)
        rows = run_probe(ckpt, args.val, args)
        if v.startswith("siamese"):
            rows += [dict(probe="gain_share", index=s, stream="", removed="", value=float(x))
                     for s, x in gain_shares(ckpt)]
        results[v] = rows
    if not results:
        sys.exit("error: no model finished training")
    L = args.layers

    csv_rows = [[v, row["probe"], "" if row["index"] is None else row["index"], row["stream"], row["removed"],
                 "%.6f" % row["value"]] for v, rows in results.items() for row in rows]
    common.write_csv(args.results + ".csv", ["variant", "probe", "index", "stream", "removed", "value"], csv_rows)

    def get(v, probe, stream=None):
        return [r for r in results[v] if r["probe"] == probe and (stream is None or r["stream"] == stream)]

    # (a) dropping
    table = []
    for v in results:
        base = get(v, "base")[0]["value"]
        drops = get(v, "drop1")
        deltas = [d["value"] - base for d in drops]
        worst = max(drops, key=lambda d: d["value"])
        least = min(drops, key=lambda d: d["value"])
        greedy, rank = get(v, "greedy"), get(v, "rank")
        k = greedy[-1]["index"] if greedy else 0
        table.append([v, "%.4f" % base, "%+.4f" % (sum(deltas) / len(deltas)),
                      "%+.4f (block %d)" % (least["value"] - base, least["index"]),
                      "%+.4f (block %d)" % (worst["value"] - base, worst["index"]),
                      ("%+.4f (%s)" % (greedy[-1]["value"] - base, greedy[-1]["removed"].replace(";", ","))) if greedy else "-",
                      ("%+.4f (%s)" % (rank[-1]["value"] - base, rank[-1]["removed"].replace(";", ","))) if rank else "-",
                      k])
    common.emit_table(args.results + "_drop.md",
                      "Layer dropping, no fine-tuning (L=%d, val loss over %d batches of %dx%d): increase of the "
                      "val loss" % (L, args.probe_batches, args.probe_B, args.probe_T),
                      ["variant", "val loss", "mean single drop", "least harmful single", "most harmful single",
                       "greedy k blocks", "by ranking k blocks", "k"], table)

    # (b) balance
    table = []
    for v in results:
        if not v.startswith("siamese"):
            continue
        g = {r["index"]: r["value"] for r in get(v, "gain_share")}
        a = {r["index"]: r["value"] for r in get(v, "balance")}
        attn = [g[s] for s in range(0, 2 * L, 2)]
        mlp = [g[s] for s in range(1, 2 * L, 2)]
        table.append([v, " ".join("%.2f" % x for x in attn), " ".join("%.2f" % x for x in mlp), "%.2f" % g[2 * L],
                      "%.2f" % (sum(a[s] for s in range(2 * L)) / (2 * L)), "%.2f" % a[2 * L]])
    if table:
        common.emit_table(args.results + "_balance.md",
                          "Siamese stream balance: X share of the LN_in input, |g_x|/(|g_x|+|g_y|) from the gains "
                          "per block (0.5 = equal; < 0.5 = the Y, pre-norm stream dominates)",
                          ["variant", "attention blocks 0..L-1 (gains)", "MLP blocks 0..L-1 (gains)",
                           "head LN_xf/LN_yf (gains)", "mean over sub-layers (activations)", "head (activations)"],
                          table)

    # (c) lens
    table = []
    for v in results:
        streams = ("x", "y", "joint") if v.startswith("siamese") else ("x",)
        cells = []
        for st in streams:
            lens = {r["index"]: r["value"] for r in get(v, "lens", st)}
            cells.append("%s: %s" % (st, " ".join("%.3f" % lens[s] for s in range(0, 2 * L + 1, 2))))
        table.append([v, "%.4f" % get(v, "base")[0]["value"], "<br>".join(cells)])
    common.emit_table(args.results + "_lens.md",
                      "Logit lens: val loss of each stream decoded through the head at the block boundaries "
                      "s = 0, 2, ..., 2L (entering block 0, 1, ..., leaving the last)",
                      ["variant", "model val loss", "lens loss per block boundary"], table)
    plot(args, results, L)
    return 0


def plot(args, results, L):
    if not common.PLOTS:
        return
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def get(v, probe, stream=None):
        return [r for r in results[v] if r["probe"] == probe and (stream is None or r["stream"] == stream)]

    # (a)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    for v in results:
        st = common.STYLE[v]
        base = get(v, "base")[0]["value"]
        d = get(v, "drop1")
        ax1.plot([r["index"] for r in d], [r["value"] - base for r in d], marker="o", color=st["color"], ls=st["ls"],
                 label=v)
        for probe, ls in (("greedy", "-"), ("rank", ":")):
            g = get(v, probe)
            if g:
                ax2.plot([0] + [r["index"] for r in g], [0] + [r["value"] - base for r in g], marker="o",
                         color=st["color"], ls=ls, label="%s (%s)" % (v, probe))
    ax1.set_xlabel("block removed")
    ax1.set_ylabel("val loss increase (nats)")
    ax1.set_yscale("symlog", linthresh=0.01)
    ax1.set_title("single block removed", fontsize=9)
    ax1.grid(alpha=0.3)
    ax1.legend(fontsize=7)
    ax2.xaxis.get_major_locator().set_params(integer=True)
    ax2.set_xlabel("blocks removed (k)")
    ax2.set_ylabel("val loss increase (nats)")
    ax2.set_yscale("symlog", linthresh=0.01)
    ax2.set_title("k blocks removed: greedy (solid), by single-drop ranking (dotted)", fontsize=9)
    ax2.grid(alpha=0.3)
    fig.suptitle("Layer dropping without fine-tuning (L=%d)" % L, fontsize=10)
    fig.tight_layout()
    common.save_figure(fig, args.results + "_drop.png")
    plt.close(fig)

    # (b)
    siam = [v for v in results if v.startswith("siamese")]
    if siam:
        fig, ax = plt.subplots(figsize=(7, 3.6))
        for v in siam:
            st = common.STYLE[v]
            g = get(v, "gain_share")
            a = get(v, "balance")
            ax.plot([r["index"] / 2 for r in g], [r["value"] for r in g], marker="o", color=st["color"], ls="-",
                    label="%s: gains" % v)
            ax.plot([r["index"] / 2 for r in a], [r["value"] for r in a], marker="x", color=st["color"], ls=":",
                    label="%s: activations" % v)
        ax.axhline(0.5, color="gray", lw=0.8, ls="--")
        shares = [r["value"] for v in siam for r in get(v, "gain_share") + get(v, "balance")]
        ax.set_ylim(min([0.3] + [x - 0.02 for x in shares]), max([0.7] + [x + 0.02 for x in shares]))
        ax.set_xlabel("sub-layer boundary s/2 (block l: l = attention, l+0.5 = MLP; %d = head)" % L)
        ax.set_ylabel("X share of the LN_in input")
        ax.set_title("Stream balance: |LN_x term| / (|LN_x term| + |LN_y term|)", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        common.save_figure(fig, args.results + "_balance.png")
        plt.close(fig)

    # (c)
    fig, axes = plt.subplots(1, len(results), figsize=(3.3 * len(results), 3.4), sharey=True, squeeze=False)
    top = max(r["value"] for v in results for r in get(v, "lens"))
    for ax, v in zip(axes[0], results):
        base = get(v, "base")[0]["value"]
        for stream, color in (("x", "tab:orange"), ("y", "tab:cyan"), ("joint", "black")):
            rows = get(v, "lens", stream)
            if rows:
                name = {"x": "X stream" if v.startswith("siamese") else "x", "y": "Y stream", "joint": "joint"}[stream]
                ax.plot([r["index"] / 2 for r in rows], [r["value"] for r in rows], marker=".", color=color,
                        label=name)
        ax.axhline(base, color="gray", lw=0.8, ls="--")
        ax.set_title(v, fontsize=9)
        ax.set_xlabel("block boundary (s/2)")
        ax.set_ylim(None, min(top, base + 3) + 0.1)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("val loss through the head")
    fig.suptitle("Logit lens (dashed: the model's val loss)", fontsize=10)
    fig.tight_layout()
    common.save_figure(fig, args.results + "_lens.png")
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(common.run_main(main))
