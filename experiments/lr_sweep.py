#!/usr/bin/env python3
"""Learning-rate sweep of Pre-Norm, Post-Norm, SiameseNorm and the two siamese ablations (docs/experiments.md).

Every run has the same data, seed, batch and schedule (linear warmup, cosine decay to 10%); only the layout and
the peak learning rate change. Writes RESULTS.csv (one row per run), RESULTS.png (loss curves, one panel per
learning rate), RESULTS_final.png (final val loss against the learning rate) and RESULTS.md (the printed table).

    /usr/bin/python3 experiments/lr_sweep.py                  # CPU default: KJV bytes, L=8 C=64, ~27 CPU-minutes
    /usr/bin/python3 experiments/lr_sweep.py --gpu            # GPT-2 small (d12) on ./train_gpt2cu, fineweb

A run that diverges (the trainer stops with `error: ... diverged`) is a result: its curve ends with an X. A loss
spike is a rise of the train loss by more than --spike nats above its running minimum, counted only after the train
loss has first come down to the unigram baseline (before that it is the initial noise of a random start; marked ^).
RESULTS_curves.csv keeps every run's train and val loss, so that a sweep can be recounted without its run folders.
A run whose final val loss is not below the unigram baseline (the loss of token frequencies alone) - 0.05 learned
nothing from context: "stuck" (marked with a square, and * in the table). How each run ended is the `outcome`
column (common.outcome: trained, stalled, collapsed = a spike not recovered from, non-finite; `outcome_step` its
step): "stuck" is stalled or collapsed.
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

common.use_plotting_python()

# CPU: a deeper-than-wide tiny model on KJV bytes, a few hundred steps. GPU: GPT-2 small on fineweb at llm.c's batch
# of 0.5M tokens, 2000 steps = 1B tokens (prepare about that much: `python3 data/prepare.py fineweb --docs 1000000`).
# The GPU lrs step by 3 around llm.c's 6e-4 so that the optimum can lie inside the range (the 250-step H200 sweep
# with 6e-4..8e-3 was best at its lowest lr); the warmup is 25% of the run, the middle of the protocol's 10-50%
# (experiments/depth_scaling.py searches warmup too; this script sweeps lr at one warmup). Not run on a GPU yet.
CPU = dict(train="data/kjv/kjv_train.bin", val="data/kjv/kjv_val.bin", shape=None, layers=8, channels=64, heads=4,
           B=16, T=64, total=0, steps=300, warmup=30, val_every=50, val_batches=16,
           lrs="3e-4,1e-3,3e-3,1.2e-2,3e-2")
GPU = dict(train="data/fineweb/fineweb_train.bin", val="data/fineweb/fineweb_val.bin", shape="d12", layers=12,
           channels=768, heads=12, B=32, T=1024, total=524288, steps=2000, warmup=500, val_every=250,
           val_batches=20, lrs="2e-4,6e-4,1.8e-3,5.4e-3")


def model_flags(args):
    if args.gpu:
        return ["-e", GPU["shape"]]
    return ["--layers", str(args.layers), "--channels", str(args.channels), "--heads", str(args.heads),
            "--max-seq-len", str(args.T)]


def train_flags(args, lr):
    flags = ["-i", args.train, "-j", args.val, "-b", str(args.B), "-t", str(args.T), "-l", common.fmt_lr(lr),
             "-u", str(args.warmup), "-q", "0.1", "-c", "0.1", "-x", str(args.steps), "-v", str(args.val_every),
             "-m", str(args.val_batches), "-s", "0", "--seed", str(args.seed)]
    if args.total:
        flags += ["-d", str(args.total)]
    return flags + args.extra.split()


def build_runs(args, variants, lrs):
    runs = []
    for lr in lrs:
        for v in variants:
            flags = common.VARIANTS[v] + model_flags(args) + train_flags(args, lr)
            runs.append(common.Run("%s_lr%s" % (v, common.fmt_lr(lr)), common.trainer(args), flags, args.runs_dir,
                                   variant=v, lr=lr))
    return runs


def parse_args(argv=None):
    p = common.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.common_arguments(p, "docs/results/lr_sweep")
    p.add_argument("--lrs", help="peak learning rates (CPU default %s; GPU %s)" % (CPU["lrs"], GPU["lrs"]))
    p.add_argument("--variants", default=",".join(common.SWEEP_VARIANTS),
                   help="names of common.VARIANTS (default: section 2's five, %(default)s)")
    p.add_argument("--spike", type=float, default=common.SPIKE_NATS,
                   help="train-loss rise over its running minimum (nats) counted as a spike, after the loss first "
                        "reached the unigram baseline (default 1.0)")
    args = p.parse_args(argv)
    preset = GPU if args.gpu else CPU
    for key in ("train", "val", "layers", "channels", "heads", "B", "T", "total", "steps", "warmup", "val_every",
                "val_batches", "lrs"):
        if getattr(args, key) is None:
            setattr(args, key, preset[key])
    return args


def main():
    args = parse_args()
    common.prepare_trainer(args)
    common.ensure_file(args.train, "prepare it with data/prepare.py")
    common.ensure_file(args.val, "prepare it with data/prepare.py")
    variants = common.parse_variants(args.variants)
    lrs = common.parse_floats(args.lrs)
    runs = common.run_all(build_runs(args, variants, lrs), args.jobs, args.threads, args.fresh, "lr sweep")
    unigram = common.unigram_loss(args.train, args.val)
    print("unigram baseline (val loss of train's token frequencies): %.4f" % unigram)

    # ---- the numbers
    rows = []
    for r in runs:
        train, val = r.log["train"], r.log["val"]
        start = common.spike_start(train, unigram)
        rise, rise_step, _ = common.spike(train, unigram, args.spike)
        last = [l for _, l in train[-10:] if math.isfinite(l)]
        final_val = val[-1][1] if (val and r.status == "ok") else float("nan")
        best_val = min((l for _, l in val), default=float("nan"))
        what, when = r.outcome(unigram, args.spike)
        r.meta.update(final_val=final_val, rise=rise, rise_step=rise_step, spike_start=start, outcome=what,
                      outcome_step=when)
        rows.append([r.meta["variant"], common.fmt_lr(r.meta["lr"]), r.status,
                     "" if r.diverge_step is None else r.diverge_step,
                     "%.4f" % (sum(last) / len(last)) if last else "nan", "%.4f" % final_val, "%.4f" % best_val,
                     "" if start is None else start, "%.3f" % rise, "" if rise_step is None else rise_step,
                     int(rise > args.spike),
                     int(r.status == "ok" and final_val > unigram - common.STALL_MARGIN),
                     "%.1f" % r.seconds, r.dir, what, "" if when is None else when])
    common.write_csv(args.results + ".csv",
                     ["variant", "lr", "status", "diverge_step", "final_train_loss_last10", "final_val_loss",
                      "best_val_loss", "spike_start", "max_rise_after_start", "max_rise_step", "spike", "stuck",
                      "seconds", "run_dir", "outcome", "outcome_step"], rows)
    common.write_csv(args.results + "_curves.csv", ["variant", "lr", "split", "step", "loss"],
                     [[r.meta["variant"], common.fmt_lr(r.meta["lr"]), split, step, "%.6f" % loss]
                      for r in runs for split in ("train", "val") for step, loss in r.log[split]])

    def cell(r):
        if r.meta["outcome"] == "non-finite":
            return "non-finite @%s" % r.meta["outcome_step"]
        mark = " (spike %.2f @%d)" % (r.meta["rise"], r.meta["rise_step"]) if r.meta["rise"] > args.spike else ""
        if r.meta["outcome"] == "collapsed":
            mark = " (collapsed: spike %.2f @%d)" % (r.meta["rise"], r.meta["outcome_step"])
        stuck = " *" if r.meta["outcome"] == "stalled" else ""
        return "%.4f%s%s" % (r.meta["final_val"], stuck, mark)

    by = {(r.meta["variant"], r.meta["lr"]): r for r in runs}
    table = [[v] + [cell(by[(v, lr)]) for lr in lrs] for v in variants]
    best = []
    for lr in lrs:  # the best layout at each learning rate, among the runs that finished
        ok = [(by[(v, lr)].meta["final_val"], v) for v in variants if by[(v, lr)].status == "ok"]
        best.append(min(ok)[1] if ok else "-")
    table.append(["best"] + best)
    emit = ("Final val loss after %d steps (%s, L=%s C=%s, B=%d T=%d, seed %d); * = stalled (no spike, not below the "
            "unigram baseline %.4f - %.2f); collapsed = a spike not recovered from (common.outcome)"
            % (args.steps, "GPU d12" if args.gpu else "CPU", args.layers, args.channels, args.B, args.T, args.seed,
               unigram, common.STALL_MARGIN))
    common.emit_table(args.results + ".md", emit, ["variant"] + ["lr %s" % common.fmt_lr(lr) for lr in lrs], table)

    plot(args, runs, variants, lrs, unigram)
    return common.report_errors(runs)


def plot(args, runs, variants, lrs, unigram):
    if not common.PLOTS:
        return
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by = {(r.meta["variant"], r.meta["lr"]): r for r in runs}
    n = len(lrs)
    cols = n if n <= 5 else 4
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.6 * rows), squeeze=False, sharey=True)
    start = max([l for r in runs for _, l in r.log["val"][:1]] + [unigram + 1])
    for i, lr in enumerate(lrs):
        ax = axes[i // cols][i % cols]
        for v in variants:
            r = by[(v, lr)]
            st = common.STYLE[v]
            train = [(s, l) for s, l in r.log["train"] if math.isfinite(l)]
            if train:
                steps = [s for s, _ in train]
                ax.plot(steps, common.smooth([l for _, l in train], 10), color=st["color"], ls=st["ls"], lw=1.2,
                        alpha=0.85, label=v)
            val = r.log["val"]
            if val:
                ax.plot([s for s, _ in val], [l for _, l in val], "o", color=st["color"], ms=3.5)
            if r.status == "diverged":
                s_end = r.diverge_step if r.diverge_step is not None else (train[-1][0] if train else 0)
                y_end = min(train[-1][1], start) if train else start
                ax.plot([s_end], [y_end], "X", color=st["color"], ms=11, mec="black")
                ax.annotate("non-finite", (s_end, y_end), textcoords="offset points", xytext=(4, 6), fontsize=8,
                            color=st["color"])
            elif r.meta["outcome"] in ("stalled", "collapsed") and val:
                ax.plot([val[-1][0]], [val[-1][1]], "s", color=st["color"], ms=8, mec="black")
            if r.status == "ok" and r.meta["rise"] > args.spike and r.meta["rise_step"] is not None:
                y = dict(train).get(r.meta["rise_step"], unigram)
                ax.plot([r.meta["rise_step"]], [min(y, start)], "^", color=st["color"], ms=9, mec="black")
        ax.axhline(unigram, color="gray", lw=0.8, ls="--")
        ax.text(args.steps, unigram, "unigram", fontsize=7, color="gray", ha="right", va="bottom")
        ax.set_title("peak lr %s" % common.fmt_lr(lr))
        ax.set_xlabel("step")
        ax.set_ylim(max(0.0, min([l for r in runs for _, l in r.log["val"]] + [unigram]) - 0.2), start + 0.1)
        ax.grid(alpha=0.3)
    for j in range(n, rows * cols):
        axes[j // cols][j % cols].axis("off")
    axes[0][0].set_ylabel("loss (train: 10-step mean; dots: val)")
    axes[0][0].legend(fontsize=7, loc="upper right")
    fig.suptitle("LR sweep: %s; X = non-finite loss, square = stalled or collapsed at the unigram level, ^ = loss spike > %.1f nats" % (
        "GPT-2 small (d12)" if args.gpu else "L=%d C=%d T=%d, %d steps" % (args.layers, args.channels, args.T,
                                                                           args.steps), args.spike), fontsize=10)
    fig.tight_layout()
    common.save_figure(fig, args.results + ".png")
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    finite = [r.meta["final_val"] for r in runs if r.status == "ok"]
    top = max(finite + [unigram]) + 0.15
    for v in variants:
        st = common.STYLE[v]
        xs, ys = [], []
        for lr in lrs:
            r = by[(v, lr)]
            if r.status == "ok":
                xs.append(lr)
                ys.append(r.meta["final_val"])
            else:
                ax.plot([lr], [top], "X", color=st["color"], ms=10, mec="black")
        ax.plot(xs, ys, marker="o", color=st["color"], ls=st["ls"], label=v)
    ax.axhline(unigram, color="gray", lw=0.8, ls="--", label="unigram baseline")
    ax.set_xscale("log")
    ax.set_xlabel("peak learning rate")
    ax.set_ylabel("final val loss")
    ax.set_title("final val loss (X at the top: non-finite)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    common.save_figure(fig, args.results + "_final.png")
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(common.run_main(main))
