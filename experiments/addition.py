#!/usr/bin/env python3
"""The depth-hungry task: multi-digit addition (answers least significant digit first), exact-match accuracy of
greedy answers for Pre-Norm, Post-Norm and SiameseNorm, over several seeds (docs/experiments.md).

The paper's largest gain was on arithmetic (28.1% -> 39.6%). Every run has the same data, batch, schedule and
learning rate; --seed changes the initialization only (the data order is the same). Accuracy is measured by the
trainer (--eval-answers N: the first N val problems, which share no pair {a, b} with train) at every validation.
Writes RESULTS.csv (one row per run), RESULTS_curves.csv (accuracy at every validation), RESULTS.png and RESULTS.md.

    /usr/bin/python3 experiments/addition.py                  # CPU default: 2-digit operands, L=8 C=64, 2 seeds
    /usr/bin/python3 experiments/addition.py --gpu            # GPT-2 small (d12) on ./train_gpt2cu, 4 digits
"""
import math
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

common.use_plotting_python()

CPU = dict(digits=2, layers=8, channels=64, heads=4, B=16, T=32, total=0, steps=3000, warmup=100, lr=3e-3,
           val_every=500, val_batches=8, answers=500, seeds="1,2")
GPU = dict(digits=4, layers=12, channels=768, heads=12, B=32, T=512, total=131072, steps=3000, warmup=200,
           lr=6e-4, val_every=250, val_batches=20, answers=500, seeds="1,2,3")


def data_paths(digits):
    """data/addition holds the default 4-digit data; other operand sizes get data/addition_dN."""
    d = "data/addition" if digits == 4 else "data/addition_d%d" % digits
    return d, os.path.join(d, "addition_train.bin"), os.path.join(d, "addition_val.bin")


def ensure_data(digits):
    d, train, val = data_paths(digits)
    if not (os.path.exists(train) and os.path.exists(val)):
        cmd = [sys.executable, "data/prepare.py", "addition", "--digits", str(digits), "--out", d]
        print("preparing the %d-digit addition data: %s" % (digits, " ".join(cmd)), flush=True)
        if subprocess.call(cmd, cwd=common.REPO) != 0:
            sys.exit("error: could not prepare the addition data")
    return train, val


def parse_args(argv=None):
    p = common.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.common_arguments(p, "docs/results/addition")
    p.add_argument("--variants", default="pre,post,siamese", help="default: %(default)s")
    p.add_argument("--seeds", help="comma-separated initialization seeds (default %s)" % CPU["seeds"])
    p.add_argument("--digits", type=int, help="max digits per operand (CPU default %d, GPU %d)"
                   % (CPU["digits"], GPU["digits"]))
    p.add_argument("--lr", type=float)
    p.add_argument("--answers", type=int, help="val problems scored (--eval-answers, default 500)")
    args = p.parse_args(argv)
    preset = GPU if args.gpu else CPU
    for key in ("digits", "layers", "channels", "heads", "B", "T", "total", "steps", "warmup", "lr", "val_every",
                "val_batches", "answers", "seeds"):
        if getattr(args, key) is None:
            setattr(args, key, preset[key])
    return args


def build_runs(args, variants, seeds):
    shape = ["-e", "d12"] if args.gpu else ["--layers", str(args.layers), "--channels", str(args.channels),
                                            "--heads", str(args.heads), "--max-seq-len", str(args.T)]
    runs = []
    for v in variants:
        for seed in seeds:
            flags = common.VARIANTS[v] + shape + [
                "-i", args.train, "-j", args.val, "-b", str(args.B), "-t", str(args.T), "-l", common.fmt_lr(args.lr),
                "-u", str(args.warmup), "-q", "0.1", "-c", "0.1", "-x", str(args.steps), "-v", str(args.val_every),
                "-m", str(args.val_batches), "-s", "0", "--seed", str(seed), "--eval-answers", str(args.answers)]
            if args.total:
                flags += ["-d", str(args.total)]
            flags += args.extra.split()
            runs.append(common.Run("add%d_%s_seed%d" % (args.digits, v, seed), common.trainer(args), flags,
                                   args.runs_dir, variant=v, seed=seed))
    return runs


def mean_std(xs):
    if not xs:
        return float("nan"), float("nan")
    m = sum(xs) / len(xs)
    return m, (math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0)


def main():
    args = parse_args()
    common.prepare_trainer(args)
    if not args.train:
        args.train, args.val = data_paths(args.digits)[1:] if common.DRY_RUN else ensure_data(args.digits)
    common.ensure_file(args.train, "prepare it with data/prepare.py addition")
    common.ensure_file(args.val, "prepare it with data/prepare.py addition")
    variants = common.parse_variants(args.variants)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    runs = common.run_all(build_runs(args, variants, seeds), args.jobs, args.threads, args.fresh, "addition")
    unigram = common.unigram_loss(args.train, args.val)

    rows, curves = [], []
    for r in runs:
        r.meta["outcome"] = r.outcome(unigram)
        acc, val = r.log["acc"], r.log["val"]
        final = acc[-1][1] if (acc and r.status == "ok") else float("nan")
        r.meta["final_acc"] = final
        r.meta["final_val"] = val[-1][1] if (val and r.status == "ok") else float("nan")
        rows.append([r.meta["variant"], r.meta["seed"], r.status, "" if r.diverge_step is None else r.diverge_step,
                     "%.4f" % final, "%.4f" % max((a for _, a in acc), default=float("nan")),
                     "%.4f" % r.meta["final_val"], "%.1f" % r.seconds, r.dir, r.meta["outcome"][0],
                     "" if r.meta["outcome"][1] is None else r.meta["outcome"][1]])
        curves += [[r.meta["variant"], r.meta["seed"], s, "%.4f" % a] for s, a in acc]
    common.write_csv(args.results + ".csv", ["variant", "seed", "status", "diverge_step", "final_acc", "best_acc",
                                             "final_val_loss", "seconds", "run_dir", "outcome", "outcome_step"], rows)
    common.write_csv(args.results + "_curves.csv", ["variant", "seed", "step", "acc"], curves)

    table = []
    for v in variants:
        rs = [r for r in runs if r.meta["variant"] == v]
        accs = [r.meta["final_acc"] for r in rs if r.status == "ok"]
        losses = [r.meta["final_val"] for r in rs if r.status == "ok"]
        m, s = mean_std(accs)
        ml, _ = mean_std(losses)
        ended = ", ".join("%d %s" % (n, w) for w in common.OUTCOMES
                          for n in [sum(r.meta["outcome"][0] == w for r in rs)] if n)
        table.append([v, "%.1f%% +- %.1f" % (100 * m, 100 * s),
                      " ".join("%.1f%%" % (100 * r.meta["final_acc"]) if r.status == "ok" else "non-finite"
                               for r in rs), "%.4f" % ml, ended])
    title = ("Exact-match accuracy on %d val problems (%d-digit operands), after %d steps (%s, L=%s C=%s, lr %s), "
             "seeds %s" % (args.answers, args.digits, args.steps, "GPU d12" if args.gpu else "CPU", args.layers,
                           args.channels, common.fmt_lr(args.lr), args.seeds))
    common.emit_table(args.results + ".md", title,
                      ["variant", "accuracy (mean +- std over seeds)", "per seed", "final val loss (mean)",
                       "how the runs ended (common.outcome; unigram baseline %.4f)" % unigram], table)
    plot(args, runs, variants, seeds)
    return common.report_errors(runs)


def plot(args, runs, variants, seeds):
    if not common.PLOTS:
        return
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8), gridspec_kw=dict(width_ratios=[3, 2]))
    for v in variants:
        st = common.STYLE[v]
        rs = [r for r in runs if r.meta["variant"] == v]
        for r in rs:
            acc = r.log["acc"]
            if acc:
                ax1.plot([s for s, _ in acc], [100 * a for _, a in acc], color=st["color"], ls=st["ls"], lw=0.8,
                         alpha=0.5)
            if r.status == "diverged":
                ax1.plot([r.diverge_step or 0], [0], "X", color=st["color"], ms=10, mec="black")
        # mean over the seeds that reached each validation step
        steps = sorted({s for r in rs for s, _ in r.log["acc"]})
        mean = [sum(a for r in rs for s2, a in r.log["acc"] if s2 == s) /
                max(1, sum(1 for r in rs for s2, _ in r.log["acc"] if s2 == s)) for s in steps]
        ax1.plot(steps, [100 * m for m in mean], color=st["color"], ls=st["ls"], lw=2.2, marker="o", ms=4, label=v)
        accs = [100 * r.meta["final_acc"] for r in rs if r.status == "ok"]
        i = variants.index(v)
        if accs:
            ax2.bar(i, sum(accs) / len(accs), color=st["color"], alpha=0.5)
            ax2.plot([i] * len(accs), accs, "o", color=st["color"], mec="black")
    ax1.set_xlabel("step")
    ax1.set_ylabel("exact-match accuracy (%)")
    ax1.set_title("accuracy during training (thin: seeds, thick: mean; X = non-finite loss)", fontsize=9)
    ax1.grid(alpha=0.3)
    ax1.legend(fontsize=8)
    ax2.set_xticks(range(len(variants)))
    ax2.set_xticklabels(variants, fontsize=8)
    ax2.set_ylabel("final accuracy (%)")
    ax2.set_title("final accuracy (bars: mean, dots: seeds)", fontsize=9)
    ax2.grid(alpha=0.3, axis="y")
    fig.suptitle("%d-digit addition, %d val problems, %s" % (
        args.digits, args.answers, "GPT-2 small (d12)" if args.gpu else "L=%d C=%d, %d steps, lr %s" % (
            args.layers, args.channels, args.steps, common.fmt_lr(args.lr))), fontsize=10)
    fig.tight_layout()
    common.save_figure(fig, args.results + ".png")
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(common.run_main(main))
