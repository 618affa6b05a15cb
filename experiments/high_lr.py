#!/usr/bin/env python3
"""The high-learning-rate test (docs/experiments.md): each layout trained at rates above its own best, to see which
diverge, which stall and which still train.

The seed reports that at lr 2e-3, where Pre-Norm is tuned lower, Post-Norm and HybridNorm diverge while
SiameseNorm converges. Here, in miniature and the same for every layout: each layout's best setting comes from the
search of experiments/depth_scaling.py (its _search.csv: the grid point with the lowest final val loss at the
search depth); this script trains it at that warmup with the learning rate one and two steps of the ladder (x3,
x10 on the CPU ladder) above its best, with every seed, at the search depth, beside the best rate itself. The
runs are depth_scaling.py's own (the same flags, so the same cache): the best rate's runs are the depth series'.

A run is counted by how it ended (common.outcome, the same categories as every script's):
  non-finite  the trainer stopped on a non-finite loss (the step is kept);
  collapsed   a loss spike (> 1 nat above the running minimum, after the loss reached the unigram level) that the
              run did not recover from (the step of the spike is kept);
  stalled     no spike, and a final val loss not below the unigram baseline - 0.05 (it learned no context);
  trained     otherwise; its final val loss is compared with the layout's own at its best rate (same seeds).
The `verdict` column holds the category (until the collapsed category, "diverged" stood for non-finite, and the
collapsed runs were counted as stalled), `outcome_step` its step.

Writes RESULTS.csv (one row per run), RESULTS.md (the table) and RESULTS.png (final val loss against the rate).

    /usr/bin/python3 experiments/high_lr.py --search docs/results/hybrid_comparison_search.csv \\
        --layouts pre,post,siamese,hybrid,siamese-hybrid
"""
import csv
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import depth_scaling as ds  # noqa: E402

common.use_plotting_python()


def read_best(path, layouts, layers):
    """{layout: (lr, warmup)}: the search's best grid point of each layout (lowest final val loss; nan last)."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        sys.exit("error: cannot read the search results %s: %s" % (path, getattr(e, "strerror", None) or e))
    need = {"layout", "setting", "layers", "lr", "warmup", "final_val_loss"}
    if not rows or not need <= set(rows[0]):
        sys.exit("error: %s is not a search table of experiments/depth_scaling.py (columns %s)"
                 % (path, ", ".join(sorted(need))))
    best = {}
    for lay in layouts:
        mine = [r for r in rows if r["layout"] == lay and r["setting"] == "search" and r["layers"] == str(layers)]
        if not mine:
            sys.exit("error: %s has no search run of %s at %d layers" % (path, lay, layers))
        b = min(mine, key=lambda r: ds.key(common.number(r["final_val_loss"], math.nan)))
        best[lay] = (float(b["lr"]), int(b["warmup"]))
    return best


def verdict(r, steps, unigram):
    """(category, final val loss, step of the category)"""
    what, step = r.outcome(unigram)
    return what, ds.final_val(r, steps), step


def parse_args(argv=None):
    """Its own flags here; every other flag is experiments/depth_scaling.py's (the model, the data, the seeds,
    --search-layers, --ladder, --runs-dir, --jobs, --dry-run, ...), so that the runs are made as it makes them."""
    p = common.ArgumentParser(description=__doc__.split("\n\n")[0],
                              epilog="Any other flag is experiments/depth_scaling.py's (see its --help).")
    p.add_argument("--search", required=True, help="the _search.csv of experiments/depth_scaling.py")
    p.add_argument("--layouts", default="pre,post,siamese", help="comma-separated (default %(default)s)")
    p.add_argument("--rungs", type=int, default=2, help="ladder steps above each layout's best lr (default 2)")
    p.add_argument("--results", default="docs/results/high_lr",
                   help="prefix of the CSV, PNG and table files (default %(default)s)")
    args, rest = p.parse_known_args(argv)
    if args.rungs < 1:
        p.error("--rungs must be at least 1")
    args.layouts = [v for v in args.layouts.split(",") if v]
    if not args.layouts:
        p.error("--layouts needs at least one layout")
    for lay in args.layouts:
        if lay not in common.VARIANTS:
            p.error("unknown layout '%s' (known: %s)" % (lay, ", ".join(common.VARIANTS)))
    args.ds = ds.parse_args(rest)
    return args


def main():
    args = parse_args()
    d = args.ds
    common.prepare_trainer(d)
    unigram = common.unigram_loss(d.train, d.val) if not common.DRY_RUN else 0.0
    best = read_best(args.search, args.layouts, d.search_layers)
    runs, rates = [], {}
    for lay in args.layouts:
        lr, warmup = best[lay]
        if lr not in d.ladder:
            sys.exit("error: %s's best lr %s is not on the ladder %s" % (lay, common.fmt_lr(lr), d.ladder))
        i = d.ladder.index(lr)
        rates[lay] = [d.ladder[j] for j in range(i, min(i + args.rungs + 1, len(d.ladder)))]
        for rate in rates[lay]:
            for seed in d.seeds:
                runs.append(ds.make_run(d, lay, d.search_layers, rate, warmup, seed))
    runs = common.run_all(ds.dedupe(runs), d.jobs, d.threads, d.fresh, "high-lr test")
    by = {(r.meta["variant"], r.meta["lr"], r.meta["seed"]): r for r in runs}

    rows = []
    for r in runs:
        what, v, when = verdict(r, d.steps, unigram)
        lay = r.meta["variant"]
        rows.append([lay, r.meta["layers"], r.meta["seed"], common.fmt_lr(r.meta["lr"]),
                     d.ladder.index(r.meta["lr"]) - d.ladder.index(best[lay][0]),
                     r.meta["warmup"], r.status, "" if r.diverge_step is None else r.diverge_step, "%.4f" % v, what,
                     r.dir, "" if when is None else when,
                     "" if r.cpu_seconds is None else "%.1f" % r.cpu_seconds])
    common.write_csv(args.results + ".csv", ["layout", "layers", "seed", "lr", "rungs_above_best", "warmup",
                                             "status", "diverge_step", "final_val_loss", "verdict", "run_dir",
                                             "outcome_step", "cpu_seconds"], rows)

    table = []
    for lay in args.layouts:
        base = [ds.final_val(by[(lay, rates[lay][0], s)], d.steps) for s in d.seeds]
        cells = []
        for k, rate in enumerate(rates[lay]):
            verdicts = [verdict(by[(lay, rate, s)], d.steps, unigram) for s in d.seeds]
            counts = ", ".join("%d %s" % (n, w) for w in common.OUTCOMES
                               for n in [sum(1 for x, _, _ in verdicts if x == w)] if n)
            at = ",".join(str(step) for w, _, step in verdicts if w == "collapsed")
            counts += " (@%s)" % at if at else ""
            vals = [v for w, v, _ in verdicts if w == "trained"]
            text = "lr %s: %s; %s" % (common.fmt_lr(rate), ds.fmt_ms(vals, expect=len(d.seeds)) if vals else "-",
                                      counts)
            if k and vals:
                change = [by[(lay, rate, s)] for s in d.seeds]
                diffs = [ds.final_val(a, d.steps) - b for a, b in zip(change, base)
                         if math.isfinite(ds.final_val(a, d.steps)) and math.isfinite(b)]
                text += "; %s vs best" % ds.fmt_ms(diffs, expect=len(d.seeds), sign="+")
            cells.append(text)
        cells += [""] * (args.rungs + 1 - len(cells))
        table.append([lay, "lr %s, warmup %d" % (common.fmt_lr(best[lay][0]), best[lay][1])] + cells)
    common.emit_table(
        args.results + ".md",
        "High learning rates: final val loss after %d steps, %d layers, C=%d, seeds %s (mean ± sd over the trained "
        "runs; the change is against the same seed at the layout's best lr); how the runs ended (common.outcome): "
        "stalled = no loss spike and a final val loss not below the unigram baseline %.4f - %.2f, collapsed = a "
        "spike of > %.1f nats not recovered from (@ its steps), non-finite"
        % (d.steps, d.search_layers, d.channels, ",".join(map(str, d.seeds)), unigram, common.STALL_MARGIN,
           common.SPIKE_NATS),
        ["layout", "its best (search)", "at its best lr"] + ["%d rung%s above" % (k, "s" if k > 1 else "")
                                                            for k in range(1, args.rungs + 1)], table)

    if not d.no_plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for lay in args.layouts:
            xs, ms, sds, bad = [], [], [], []
            for rate in rates[lay]:
                verdicts = [verdict(by[(lay, rate, s)], d.steps, unigram) for s in d.seeds]
                vals = [v for w, v, _ in verdicts if w != "non-finite"]
                m, sd, n = ds.mean_sd(vals)
                if n:
                    xs.append(rate)
                    ms.append(m)
                    sds.append(sd if math.isfinite(sd) else 0)
                if any(w == "non-finite" for w, _, _ in verdicts):
                    bad.append(rate)
            style = common.STYLE.get(lay, {})
            ax.errorbar(xs, ms, yerr=sds, marker="o", capsize=3, label=lay, **style)
            for rate in bad:
                ax.axvline(rate, color=style.get("color", "k"), ls=":", alpha=0.5)
        ax.axhline(unigram, color="grey", lw=0.8, ls="--", label="unigram baseline")
        ax.set_xscale("log")
        ax.set_xlabel("peak learning rate: each layout's best, then the rungs above (dotted line: a seed's loss went non-finite)", fontsize=8)
        ax.set_ylabel("final val loss (mean ± sd over seeds)")
        ax.set_title("%d layers, C=%d, %d steps, seeds %s" % (d.search_layers, d.channels, d.steps,
                                                             ",".join(map(str, d.seeds))))
        ax.legend(fontsize=8)
        common.save_figure(fig, args.results + ".png")
    return common.report_errors(runs)


if __name__ == "__main__":
    sys.exit(common.run_main(main))
