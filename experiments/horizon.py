#!/usr/bin/env python3
"""The horizon campaign (docs/experiments.md, section 6): the paper's high-learning-rate claim at a horizon that
could show it, the same protocol for every layout.

The earlier campaigns trained for 200 steps with warmups of 10-50%: the peak learning rate was hardly held, and
every run was still improving at the end. Here every run is 16 layers x 64 channels (4 heads), 1500 steps of
16 x 64 KJV bytes, a warmup of 8% of the run (120 steps; the OLMo recipe the paper follows warms up 2,000 of about
24,000 steps) and a cosine decay to 10%, weight decay 0.1, clipping at 1.0, validation on 16 batches every 250
steps. The protocol:

1. Search (seed 1337): every layout's own best peak lr at 16 layers on the ladder 1e-3, 3e-3, 1e-2, grown by
   one rung at an edge (experiments/depth_scaling.py's search: these are its runs). Every layout gets the same
   search; HybridNorm, tuned at 8 layers before, is tuned again at 16 here.
2. Grid: every layout at 1x, 3x and 5x Pre-Norm's best (--reference; the paper's 2e-3 is 5x OLMo's 4e-4), and at
   its own best, with every seed (1337, 2, 3), seed by seed, so that a campaign cut short has whole seeds.

Each run ends as one of common.py's outcomes: trained, stalled (learned no context), collapsed (a spike that never
recovered) or non-finite (the trainer's `diverged`). The tables give, per layout and rate, the final val loss of the
trained runs (mean ± sd over seeds) and the count of each outcome, and each layout's difference from Pre-Norm at the
same rate, and at each one's own best, with the 95% margin of Welch's t-test (depth_scaling.resolved).

Writes RESULTS.csv (one row per run), RESULTS.md (the tables), RESULTS_curves.png, RESULTS.png (final val loss
against the rate) and RESULTS_cost.md. A run that did not run is never a result: with --no-run (report from the
complete runs only) the tables say INCOMPLETE and name the missing runs; a run the trainer refused stops the
campaign with one error line, before anything is written.

    /usr/bin/python3 experiments/horizon.py --dry-run   # the search's commands
    /usr/bin/python3 experiments/horizon.py --jobs 1    # about 700 CPU-seconds a run on one 2026 EPYC core
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import depth_scaling as ds  # noqa: E402

common.use_plotting_python()

# the layouts, the two baselines that separate what SiameseNorm's language-model form combines, its ablation
# without 1/c_l (section 6's mechanism), and Hyper-Connections (the paper's strongest baseline); pass 1 runs the first
# four (--layouts pre,siamese,siamese-hybrid,hybrid)
LAYOUTS_DEFAULT = "pre,siamese,siamese-hybrid,hybrid,pre-qkvnorm,peri,siamese-hybrid-no-depth-scale,hc"
# the protocol above, as depth_scaling.py's flags (any of them can still be given and wins)
PROTOCOL = ["--search-layers", "16", "--depths", "16", "--steps", "1500", "--warmups", "0.08", "--val-every", "250",
            "--lrs", "1e-3,3e-3,1e-2", "--boundary-lrs", "", "--seeds", "1337,2,3", "--drop-depths", "",
            "--probe-batches", "16"]
# the logit lens (section 6's mechanism): experiments/depth_probe on each final checkpoint of these layouts
LENS_DEFAULT = "pre,siamese,siamese-hybrid,hybrid,siamese-hybrid-no-depth-scale"


def parse_args(argv=None):
    p = common.ArgumentParser(description=__doc__.split("\n\n")[0],
                              epilog="Any other flag is experiments/depth_scaling.py's (the model, the data, "
                                     "--seeds, --steps, --runs-dir, --jobs, --no-run, --dry-run, ...; see its --help).")
    p.add_argument("--layouts", default=LAYOUTS_DEFAULT,
                   help="the layouts of the grid, names of common.VARIANTS (default %(default)s)")
    p.add_argument("--reference", default="pre",
                   help="the layout (of --layouts) whose best lr the multipliers scale (default %(default)s)")
    p.add_argument("--multipliers", default="1,3,5", help="the grid's rates as multiples of the reference's best "
                                                          "(default %(default)s)")
    p.add_argument("--order", choices=("seed", "rate"), default="seed",
                   help="the grid's run order: seed (default: every rate of a seed before the next seed, so that a "
                        "campaign cut short has whole seeds) or rate (every seed of a rate before the next rate, in "
                        "--multipliers' order, then the own bests: a pass too short for the grid has whole cells, "
                        "mean ± sd over the seeds, at its first rates)")
    p.add_argument("--lens-layouts", default=LENS_DEFAULT,
                   help="the layouts (of --layouts) whose final checkpoints the logit lens reads, '' for none "
                        "(default %(default)s)")
    p.add_argument("--records", metavar="FILE.tar.xz",
                   help="also write the record of every run (run.json, main.log, the lens's probe CSV; no weights) "
                        "to this archive: unpacked into --runs-dir of another checkout, it reports the campaign (or "
                        "resumes it) without rerunning what ran")
    p.add_argument("--results", default="docs/results/horizon",
                   help="prefix of the CSV, PNG and table files (default %(default)s)")
    args, rest = p.parse_known_args(argv)
    args.layouts = common.parse_variants(args.layouts)
    if args.reference not in args.layouts:
        p.error("--reference %s is not one of --layouts" % args.reference)
    args.search_layouts = [args.reference] + [v for v in args.layouts if v != args.reference]
    args.run_multipliers = common.parse_floats(args.multipliers)  # the run order (--order rate)
    args.multipliers = sorted(args.run_multipliers)  # the tables' and plots' order
    args.lens_layouts = [v for v in common.parse_variants(args.lens_layouts) if v in args.layouts]
    if not args.layouts or not args.multipliers:
        p.error("--layouts and --multipliers need at least one value each")
    if len(set(args.layouts)) != len(args.layouts):
        p.error("a layout is named twice")
    if len(set(args.multipliers)) != len(args.multipliers):
        p.error("a multiplier is named twice")
    if any(not (m > 0 and math.isfinite(m)) for m in args.multipliers):
        p.error("--multipliers must be positive numbers")
    if "--results" in rest or "--layouts" in rest or "--tag" in rest:
        p.error("--results and --layouts are this script's (--tag is not taken here)")
    args.ds = ds.parse_args(PROTOCOL + rest + ["--layouts", ",".join(args.search_layouts),
                                               "--results", args.results])
    if len(args.ds.warmups) != 1:
        p.error("the horizon protocol has one warmup (got --warmups %s)" % ",".join(map(str, args.ds.warmups)))
    if args.ds.search_layers not in args.ds.depths or len(args.ds.depths) != 1:
        args.ds.depths = [args.ds.search_layers]
    return args


def rate(base, m):
    """m x base, to three significant digits (1x 3e-3 = 0.003, 3x = 0.009, 5x = 0.015: clean flags, stable keys)."""
    return float("%.3g" % (base * m))


def outcome(r, steps, unigram):
    """(outcome, step, final val loss) of a finished run (common.outcome's categories)."""
    what, step = r.outcome(unigram)
    return what, step, ds.final_val(r, steps)


def grid_runs(args, best):
    d = args.ds
    L, u = d.search_layers, ds.warmup_steps(d, d.warmups[0])
    base = best[args.search_layouts[0]][0]
    runs = []

    def at_rate(m, seed):
        for lay in args.layouts:
            r = ds.make_run(d, lay, L, rate(base, m), u, seed)
            r.meta["setting"] = "%gx" % m
            runs.append(r)

    def own_best(seed):
        for lay in args.search_layouts:
            lr = best[lay][0]
            if lay in args.layouts and lr not in [rate(base, m) for m in args.multipliers]:
                r = ds.make_run(d, lay, L, lr, u, seed)
                r.meta["setting"] = "own best"
                runs.append(r)

    if args.order == "seed":  # seed by seed: a campaign cut short has whole seeds
        for seed in d.seeds:
            for m in args.run_multipliers:
                at_rate(m, seed)
            own_best(seed)
    else:  # rate by rate, every seed: a campaign cut short has whole cells at its first rates
        for m in args.run_multipliers:
            for seed in d.seeds:
                at_rate(m, seed)
        for seed in d.seeds:
            own_best(seed)
    return ds.dedupe(runs)


COLUMNS = ["layout", "setting", "multiplier", "lr", "layers", "seed", "warmup", "steps", "status", "outcome",
           "outcome_step", "final_val_loss", "best_val_loss", "max_rise_after_start", "max_rise_step", "seconds",
           "cpu_seconds", "run_dir"]


def report(args, runs, missing, base, best, unigram):
    d = args.ds
    partial = ""
    if common.INCOMPLETE:  # --no-run with runs still missing: every table says so, first
        partial = "INCOMPLETE (%s; missing: %s). " % ("; ".join(common.INCOMPLETE),
                                                     ", ".join(r.label for r in missing))
    rows = []
    for r in runs:
        what, step, v = outcome(r, d.steps, unigram)
        rise, at, _ = common.spike(r.log["train"], unigram, 1.0)
        m = r.meta["lr"] / base
        rows.append(dict(layout=r.meta["variant"], setting=r.meta.get("setting", ""), multiplier="%.3g" % m,
                         lr=common.fmt_lr(r.meta["lr"]), layers=r.meta["layers"], seed=r.meta["seed"],
                         warmup=r.meta["warmup"], steps=d.steps, status=r.status, outcome=what,
                         outcome_step="" if step is None else step, final_val_loss="%.4f" % v,
                         best_val_loss="%.4f" % min((l for _, l in r.log["val"]), default=math.nan),
                         max_rise_after_start="%.3f" % rise, max_rise_step="" if at is None else at,
                         seconds="%.1f" % r.seconds,
                         cpu_seconds="" if r.cpu_seconds is None else "%.1f" % r.cpu_seconds, run_dir=r.dir))
    common.write_csv(args.results + ".csv", COLUMNS, [[row[c] for c in COLUMNS] for row in rows])

    def cell_rows(lay, lr):
        return [row for row in rows if row["layout"] == lay and row["lr"] == common.fmt_lr(lr)]

    def trained(lay, lr):
        return [float(row["final_val_loss"]) for row in cell_rows(lay, lr) if row["outcome"] == "trained"]

    def counts(lay, lr):
        out = []
        for what in common.OUTCOMES:
            mine = [row for row in cell_rows(lay, lr) if row["outcome"] == what]
            if mine and what != "trained":
                steps = ",".join(str(row["outcome_step"]) for row in mine if row["outcome_step"] != "")
                out.append("%d %s%s" % (len(mine), what, " (step %s)" % steps if steps else ""))
            elif mine:
                out.append("%d trained" % len(mine))
        return "; ".join(out) or "not run"

    lrs = [rate(base, m) for m in args.multipliers]
    n = len(d.seeds)
    table = []
    for lay in args.layouts:
        cells = ["%s; %s" % (ds.fmt_ms(trained(lay, lr), expect=n), counts(lay, lr)) for lr in lrs]
        own = best.get(lay)
        own_cell = ""
        if own and own[0] not in lrs:
            own_cell = "lr %s: %s; %s" % (common.fmt_lr(own[0]), ds.fmt_ms(trained(lay, own[0]), expect=n),
                                          counts(lay, own[0]))
        elif own:
            own_cell = "lr %s (a column)" % common.fmt_lr(own[0])
        table.append([lay] + cells + [own_cell])
    ref = args.search_layouts[0]
    title = partial + ("Horizon campaign: final val loss after %d steps, %d layers, C=%d, warmup %d steps, seeds %s (mean ± sd "
             "over the trained runs; then how each run ended: common.OUTCOMES, with the step); rates are multiples "
             "of %s's best lr %s (search, seed %d)"
             % (d.steps, d.search_layers, d.channels, ds.warmup_steps(d, d.warmups[0]),
                ",".join(map(str, d.seeds)), ref, common.fmt_lr(base), d.seeds[0]))
    text = "%s\n\n%s\n" % (title, common.markdown_table(
        ["layout"] + ["%gx (lr %s)" % (m, common.fmt_lr(lr)) for m, lr in zip(args.multipliers, lrs)]
        + ["own best (search)"], table))

    def compare(a, b):
        """a's mean against b's, Welch's 95% margin; the runs that did not train are left out (and counted)."""
        if len(a) < 2 or len(b) < 2:
            return "- (%d and %d trained runs)" % (len(a), len(b))
        ma, mb = ds.mean_sd(a)[0], ds.mean_sd(b)[0]
        ok, margin = ds.resolved(a, b)
        return "%+.4f (margin %.4f): %s" % (ma - mb, margin,
                                            ("resolved, " + ("lower" if ma < mb else "higher")) if ok else "not resolved")

    diff = [[lay] + [compare(trained(lay, lr), trained(ref, lr)) for lr in lrs] for lay in args.layouts if lay != ref]
    text += "\n%sEach layout's difference from %s at the same rate (trained runs only; negative = lower loss)\n\n%s\n" % (
        partial, ref, common.markdown_table(["layout"] + ["%gx" % m for m in args.multipliers], diff))
    own = []
    for lay in args.layouts:
        lr = best[lay][0]
        own.append([lay, "lr %s" % common.fmt_lr(lr), "%s; %s" % (ds.fmt_ms(trained(lay, lr), expect=n), counts(lay, lr)),
                    "" if lay == ref else compare(trained(lay, lr), trained(ref, best[ref][0]))])
    text += ("\n%sEach layout at its own best lr (the search's, seed %d), every seed; the difference is from %s at "
             "its own best\n\n%s\n" % (partial, d.seeds[0], ref, common.markdown_table(
                 ["layout", "own best", "final val loss; outcomes", "difference from %s" % ref], own)))
    print("\n" + text)
    common.write_text(args.results + ".md", text)
    print("wrote %s.md" % args.results)
    return rows


def plot(args, runs, rows, base, unigram):
    if not common.PLOTS:
        return
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    d = args.ds
    lrs = [rate(base, m) for m in args.multipliers]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for k, lay in enumerate(args.layouts):
        xs, ms, sds, bad = [], [], [], []
        for m, lr in zip(args.multipliers, lrs):
            mine = [row for row in rows if row["layout"] == lay and row["lr"] == common.fmt_lr(lr)]
            vals = [float(row["final_val_loss"]) for row in mine if row["outcome"] == "trained"]
            mean, sd, n = ds.mean_sd(vals)
            if n:
                xs.append(m * (1 + 0.02 * (k - len(args.layouts) / 2)))  # a little apart, for the error bars
                ms.append(mean)
                sds.append(sd if math.isfinite(sd) else 0)
            bad += [m] * sum(row["outcome"] != "trained" for row in mine)
        style = common.STYLE.get(lay, {})
        ax.errorbar(xs, ms, yerr=sds, marker="o", capsize=3, label=lay, **style)
        for m in sorted(set(bad)):
            ax.plot([m], [unigram], marker="x", ms=9, color=style.get("color", "k"))
    ax.axhline(unigram, color="grey", lw=0.8, ls="--", label="unigram baseline (x: a run that did not train)")
    ax.set_xscale("log")
    ax.set_xticks(args.multipliers)
    ax.set_xticklabels(["%gx\n(%s)" % (m, common.fmt_lr(lr)) for m, lr in zip(args.multipliers, lrs)])
    ax.set_xticks([], minor=True)  # the log axis's own minor ticks were labeled 2 x 10^0, 4 x 10^0 between them
    ax.set_xlabel("peak learning rate, as a multiple of Pre-Norm's best")
    ax.set_ylabel("final val loss of the trained runs (mean ± sd)")
    ax.set_title("%d layers, C=%d, %d steps, seeds %s" % (d.search_layers, d.channels, d.steps,
                                                         ",".join(map(str, d.seeds))), fontsize=9)
    ax.legend(fontsize=7)
    common.save_figure(fig, args.results + ".png")
    plt.close(fig)

    fig, axes = plt.subplots(1, len(lrs), figsize=(4.2 * len(lrs), 3.8), sharey=True, squeeze=False)
    for ax, m, lr in zip(axes[0], args.multipliers, lrs):
        for lay in args.layouts:
            style = common.STYLE.get(lay, {})
            first = True
            for r in runs:
                if r.meta["variant"] != lay or r.meta["lr"] != lr:
                    continue
                steps = [s for s, _ in r.log["train"]]
                ax.plot(steps, common.smooth([v for _, v in r.log["train"]], 25), lw=0.8, alpha=0.8,
                        label=lay if first else None, **style)
                first = False
        ax.axhline(unigram, color="grey", lw=0.8, ls="--")
        ax.set_title("%gx Pre-Norm's best (lr %s)" % (m, common.fmt_lr(lr)), fontsize=9)
        ax.set_xlabel("step")
        ax.set_ylim(1.0, max(4.0, unigram + 0.5))
    axes[0][0].set_ylabel("train loss (25-step mean), every seed")
    axes[0][0].legend(fontsize=7)
    common.save_figure(fig, args.results + "_curves.png")
    plt.close(fig)


def lens_rates(args, base, best, lay):
    """The rates of a layout's lens rows: (label, lr) for each multiplier, then its own best where that is another"""
    rates = [("%gx" % m, rate(base, m)) for m in args.multipliers]
    if lay in best and best[lay][0] not in [lr for _, lr in rates]:
        rates.append(("own best", best[lay][0]))
    return rates


def lens(args, runs, base, best, unigram):
    """The logit lens of every run of --lens-layouts that finished (docs/experiments.md, section 6): the val loss of
    decoding each sub-layer boundary's state through the layout's own trained head (experiments/depth_probe's
    `lens` rows; for a two-stream head X alone is LN_f(LN_xf(x)), Y alone LN_f(LN_yf(y)), joint the real head).
    Cached beside each checkpoint. Returns the rows and the probe's CPU seconds."""
    import depth_use
    import resource
    d = args.ds
    rows, spent, unweighed = [], 0.0, []
    for r in runs:
        if r.meta["variant"] not in args.lens_layouts or r.status != "ok":
            continue
        ckpt = r.final_checkpoint(d.steps)
        if not os.path.exists(ckpt) and not os.path.exists(ckpt + ".probe.csv"):
            unweighed.append(os.path.basename(r.dir))  # its record came from --records, its weights did not
            continue
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        probe = depth_use.run_probe(ckpt, d.val, d, ["--drop-frac", "0", "--greedy", "0"])
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        spent += (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        for q in probe:
            if q["probe"] == "lens":
                rows.append(dict(layout=r.meta["variant"], multiplier="%.3g" % (r.meta["lr"] / base),
                                 lr=common.fmt_lr(r.meta["lr"]), seed=r.meta["seed"], boundary=q["index"],
                                 stream=q["stream"], loss="%.4f" % q["value"]))
    if unweighed:
        print("the logit lens skips %d finished run(s) whose weights are not on this machine (rerun them to read "
              "them): %s" % (len(unweighed), ", ".join(unweighed)))
    if not rows:
        return rows, spent
    cols = ["layout", "multiplier", "lr", "seed", "boundary", "stream", "loss"]
    common.write_csv(args.results + "_lens.csv", cols, [[row[c] for c in cols] for row in rows])
    end = 2 * d.search_layers
    table = []
    for lay in args.lens_layouts:
        for label, lr in lens_rates(args, base, best, lay):
            lr = common.fmt_lr(lr)
            cells = []
            for stream in ("joint", "x", "y"):
                v = [float(row["loss"]) for row in rows if row["layout"] == lay and row["lr"] == lr
                     and row["boundary"] == end and row["stream"] == stream]
                cells.append(ds.fmt_ms(v, expect=len(d.seeds)) if v else "")
            if any(cells):
                table.append([lay, "%s (lr %s)" % (label, lr)] + cells)
    text = (("INCOMPLETE (%s). " % "; ".join(common.INCOMPLETE) if common.INCOMPLETE else "") +
            "The logit lens at the last boundary (s = 2L = %d): val loss over %d batches of %d x %d, mean ± sd over "
            "the seeds whose run finished with its weights on this machine (n = their number where it is not %d; "
            "%d finished run(s) of these layouts had no weights to read); joint = the model's own head; X alone = "
            "LN_f(LN_xf(x)), Y alone = LN_f(LN_yf(y)) through the same trained head (one-stream layouts: LN_f(x), "
            "the x column)\n\n%s\n"
            % (end, d.probe_batches, d.probe_B, d.probe_T, len(d.seeds), len(unweighed),
               common.markdown_table(["layout", "rate", "joint", "X alone (or x)", "Y alone"], table)))
    print("\n" + text)
    common.write_text(args.results + "_lens.md", text)
    print("wrote %s_lens.md" % args.results)
    if common.PLOTS:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        # a panel per multiplier (every layout at that rate), then one of each layout at its own best where that
        # is another rate (e.g. HybridNorm's, the one rate where it trains alone)
        panels = [("%gx Pre-Norm's best (lr %s)" % (m, common.fmt_lr(rate(base, m))),
                   {lay: common.fmt_lr(rate(base, m)) for lay in args.lens_layouts}) for m in args.multipliers]
        own = {lay: common.fmt_lr(lr) for lay in args.lens_layouts
               for label, lr in lens_rates(args, base, best, lay) if label == "own best"}
        if own:
            panels.append(("each at its own best (%s)" % ", ".join("%s %s" % kv for kv in own.items()), own))
        panels = [(title, lrs) for title, lrs in panels  # a rate with no run read (no weights here): no panel
                  if any(row["layout"] == lay and row["lr"] == lr for lay, lr in lrs.items() for row in rows)]
        fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.8), sharey=True, squeeze=False)
        for ax, (title, lrs) in zip(axes[0], panels):
            for lay, lr in lrs.items():
                style = dict(common.STYLE.get(lay, {}))
                for stream, ls in (("joint", "-"), ("x", "--"), ("y", ":")):
                    mine = [row for row in rows if row["layout"] == lay and row["lr"] == lr and row["stream"] == stream]
                    if not mine:
                        continue
                    xs = sorted(set(row["boundary"] for row in mine))
                    ys = [ds.mean_sd([float(row["loss"]) for row in mine if row["boundary"] == x])[0] for x in xs]
                    style["ls"] = ls
                    ax.plot([x / 2 for x in xs], ys, lw=1, label="%s %s" % (lay, stream), **style)
            ax.set_title(title, fontsize=8)
            ax.set_xlabel("block boundary l (.5: attention to MLP)", fontsize=8)
            ax.set_ylim(1.0, unigram + 2.0)  # a collapsed run's lens runs off the top (its outcome: the grid's table)
        axes[0][0].set_ylabel("val loss through the head (mean over seeds)")
        axes[0][0].legend(fontsize=6)
        common.save_figure(fig, args.results + "_lens.png")
        plt.close(fig)
    return rows, spent


def write_records(path, runs, runs_dir):
    """The records of the finished runs, as one .tar.xz (names relative to --runs-dir), written whole or not at all."""
    import tarfile

    def write(name):
        with tarfile.open(name, "w:xz") as tar:
            for r in sorted(runs, key=lambda r: r.dir):
                for f in sorted(os.listdir(r.dir)):
                    if f in ("run.json", "main.log") or f.endswith(".probe.csv"):
                        full = os.path.join(r.dir, f)
                        tar.add(full, arcname=os.path.relpath(full, runs_dir))
    common.write_whole(path, write)
    print("wrote %s (the records of %d runs)" % (path, len(runs)))


def main():
    args = parse_args()
    d = args.ds
    common.prepare_trainer(d)
    common.ensure_file(d.train, "prepare it with data/prepare.py")
    common.ensure_file(d.val, "prepare it with data/prepare.py")
    if d.dry_run:
        print("# step 1 (the search); the grid's rates come from its results")
    s_runs, best, lrs = ds.search(d)
    unigram = common.unigram_loss(d.train, d.val)
    print("unigram baseline (val loss of train's token frequencies): %.4f" % unigram)
    shared, rank, _ = ds.shared_setting(d, s_runs)
    ds.search_report(d, s_runs, best, lrs, unigram, shared, rank)
    base = best[args.search_layouts[0]][0]
    for lay in args.search_layouts:
        print("best lr of %s at %d layers: %s" % (lay, d.search_layers, common.fmt_lr(best[lay][0])))
    wanted = grid_runs(args, best)
    done = ds.run(d, wanted, "horizon grid (%s x %s)" % (",".join(args.layouts), ",".join(
        "%g" % m for m in args.multipliers)))
    missing = [r for r in wanted if r.dir not in {x.dir for x in done}]  # --no-run only: run_all runs them all
    rows = report(args, done, missing, base, best, unigram)
    plot(args, done, rows, base, unigram)
    _, lens_cpu = lens(args, done, base, best, unigram)
    searched = {x.dir for x in s_runs}
    ds.cost_report(d, [("search at %d layers" % d.search_layers, s_runs, 0.0),
                       ("grid", [r for r in done if r.dir not in searched], 0.0),
                       ("logit lens (experiments/depth_probe)", [], lens_cpu)])
    if args.records and not d.dry_run:
        write_records(args.records, [r for r in ds.dedupe(list(s_runs) + list(done)) if r.status in ("ok", "diverged")],
                      d.runs_dir)
    return 0


if __name__ == "__main__":
    sys.exit(common.run_main(main))
