#!/usr/bin/env python3
"""The fair comparison of the layouts over depth (docs/experiments.md, section 5): pre, post and siamese, or those
of --layouts (any of common.VARIANTS, e.g. --layouts pre,post,siamese,hybrid,siamese-hybrid).

The protocol, the same for every layout:

  1. search: at one depth (CPU: 8 layers), one seed, a grid of peak learning rates x warmup lengths (warmup as a
     fraction of the run: 10%, 25%, 50%); every layout gets exactly the same grid. A layout's best setting is the
     grid point with the lowest final val loss. If that point is at the edge of the lr grid, the grid is extended
     by one lr (x3 or /3) for that layout, with every warmup, until the best is inside (at most --max-extend times).
  2. depth series: 4, 8, 16, 32 layers at fixed width, each layout at its own best setting (lr and warmup fraction
     from step 1, unchanged with depth), with several seeds; and every layout at one shared setting (the one with
     the lowest mean rank over the layouts in the search), with the same seeds, at --shared-depths (CPU default:
     the search depth alone, for the budget).
  3. (--confirm) confirmation at the deepest depth: each layout's best lr one step lower on the ladder, one seed,
     to see whether the best lr moves with depth (the series keeps the search depth's lr).
  4. layer dropping at 16 and 32 layers, on every seed's model at the layout's best setting (experiments/depth_probe,
     no fine-tuning): the val loss with single blocks removed and with up to 30% of the blocks removed, by the
     single-removal ranking (and greedily up to --greedy-max-layers, where it is affordable).
  5. Post-Norm's warmup boundary at the search depth: final val loss against warmup length, at lr 1e-3 and 3e-3.

Writes RESULTS_search.{csv,md,png}, RESULTS.csv (one row per run of the series: layout, layers, seed, lr, warmup,
final val loss, ...), RESULTS.md, RESULTS.png (final val loss against depth, mean and standard deviation over
seeds as error bars), RESULTS_drop.{csv,md,png}, RESULTS_boundary.md, RESULTS_confirm.md. RESULTS is --results
(default docs/results/depth_scaling); with --layouts other than the default three and no --results, it is
docs/results/depth_scaling_TAG, TAG the --tag (default: the layouts joined by "_"), so that the committed results of
the three are not overwritten. The runs' cache keys are their trainer flags alone: a layout's runs are shared by
every --layouts list that has it.

    /usr/bin/python3 experiments/depth_scaling.py                  # CPU default, ~1.5 CPU-hours, 2 runs at a time
    /usr/bin/python3 experiments/depth_scaling.py --phase search   # step 1 alone (and 5)
    /usr/bin/python3 experiments/depth_scaling.py --gpu --dry-run  # the GPU preset's commands (not run on a GPU)
    /usr/bin/python3 experiments/depth_scaling.py --layouts pre,post,siamese,hybrid,siamese-hybrid
                                                  # -> docs/results/depth_scaling_pre_post_siamese_hybrid_siamese-hybrid*

Spikes: the train loss rising more than --spike nats above its running minimum, counted only after the train loss
has first come down to the unigram baseline (common.spike_start): before that the model is still learning the token
frequencies and a rise is part of the initial noise, not an instability.
"""
import math
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

common.use_plotting_python()

DEFAULT_LAYOUTS = ["pre", "post", "siamese"]
LAYOUTS = list(DEFAULT_LAYOUTS)  # the layouts compared: --layouts (parse_args sets it)
RESULTS_DEFAULT = "docs/results/depth_scaling"
# CPU: KJV bytes, 64 channels, 1024 tokens a step, 300 steps (see docs/experiments.md for why 300).
CPU = dict(train="data/kjv/kjv_train.bin", val="data/kjv/kjv_val.bin", gpu_shape=False, channels=64, heads=4,
           B=16, T=64, total=0, steps=200, val_every=100, val_batches=16, search_layers=8, depths="4,8,16,32",
           seeds="1337,2,3", lrs="1e-3,3e-3,1e-2", warmups="0.1,0.25,0.5", drop_depths="16,32",
           boundary_lrs="1e-3,3e-3", boundary_warmups="0.1,0.165,0.25,0.335,0.5", probe_B=8, probe_T=64,
           probe_batches=4, ladder="1e-4,3e-4,1e-3,3e-3,1e-2,3e-2,1e-1", shared_depths="8", greedy_max_layers=16)
# GPU (not run): GPT-2 small width on fineweb, 0.5M tokens a step, 2000 steps (1B tokens). The lr grid spans
# 2e-4..5.4e-3 in steps of 3 around llm.c's 6e-4 for d12, so that the optimum can be inside it; the 250-step KJV
# sweep on an H200 (docs/results/gpu/) was best at its lowest lr, 6e-4, with a 10% warmup.
GPU = dict(train="data/fineweb/fineweb_train.bin", val="data/fineweb/fineweb_val.bin", gpu_shape=True, channels=768,
           heads=12, B=32, T=1024, total=524288, steps=2000, val_every=250, val_batches=20, search_layers=12,
           depths="6,12,24,48", seeds="1,2,3", lrs="2e-4,6e-4,1.8e-3,5.4e-3", warmups="0.1,0.25,0.5",
           drop_depths="24,48", boundary_lrs="6e-4,1.8e-3", boundary_warmups="0.1,0.25,0.5", probe_B=2, probe_T=1024,
           probe_batches=4, ladder="6.7e-5,2e-4,6e-4,1.8e-3,5.4e-3,1.6e-2", shared_depths="6,12,24,48",
           greedy_max_layers=0)


def warmup_steps(args, frac):
    return int(round(frac * args.steps))


def make_run(args, layout, layers, lr, warmup, seed):
    """One trainer command. The flags are the cache key: keep their form stable."""
    flags = common.VARIANTS[layout] + [
        "--layers", str(layers), "--channels", str(args.channels), "--heads", str(args.heads),
        "--max-seq-len", str(args.T),
        "-i", args.train, "-j", args.val, "-b", str(args.B), "-t", str(args.T), "-l", common.fmt_lr(lr),
        "-u", str(warmup), "-q", "0.1", "-c", "0.1", "-x", str(args.steps), "-v", str(args.val_every),
        "-m", str(args.val_batches), "-s", "0", "--seed", str(seed)]
    if args.total:
        flags += ["-d", str(args.total)]
    flags += args.extra.split()
    label = "ds_%s_L%d_lr%s_u%d_seed%d" % (layout, layers, common.fmt_lr(lr), warmup, seed)
    return common.Run(label, common.trainer(args), flags, args.runs_dir, variant=layout, layers=layers, lr=lr,
                      warmup=warmup, seed=seed)


def final_val(r, steps):
    """The val loss at the last step of a run that finished; nan otherwise (diverged, or a log cut short)."""
    val = r.log["val"]
    if r.status != "ok" or not val or val[-1][0] != steps:
        return float("nan")
    return val[-1][1]


def key(x):  # nan (diverged) sorts last
    return x if math.isfinite(x) else math.inf


def run(args, runs, what):
    """common.run_all, or with --no-run only the runs that are complete (the others are left out and listed)."""
    if args.no_run and not common.DRY_RUN:
        missing = [r for r in runs if not r.cached()]
        for r in missing:
            print("%s: not run yet (--no-run): %s" % (what, r.label))
        runs = [r for r in runs if r not in missing]
        print("%s: %d complete runs used, %d missing" % (what, len(runs), len(missing)), flush=True)
        if missing:  # every table says so: nothing written from these runs looks complete
            common.INCOMPLETE.append("%s: %d of %d runs not run yet (--no-run)" % (what, len(missing),
                                                                                 len(runs) + len(missing)))
        for r in runs:
            r.load_log()
        return runs
    return common.run_all(runs, args.jobs, args.threads, args.fresh, what)


def search(args):
    """Step 1 (and the boundary runs of step 5): returns (runs, best) with best[layout] = (lr, warmup steps)."""
    lrs = {lay: list(args.lrs) for lay in LAYOUTS}
    L, seed = args.search_layers, args.seeds[0]
    boundary = [make_run(args, "post", L, lr, warmup_steps(args, f), seed)
                for lr in args.boundary_lrs for f in args.boundary_warmups]
    for extension in range(args.max_extend + 1):
        runs = [make_run(args, lay, L, lr, warmup_steps(args, f), seed)
                for lay in LAYOUTS for lr in lrs[lay] for f in args.warmups]
        runs = dedupe(runs + boundary)
        runs = run(args, runs, "search at %d layers" % L + (" (extension %d)" % extension if extension else ""))
        best, grown = {}, False
        for lay in LAYOUTS:
            mine = [r for r in runs if r.meta["variant"] == lay and r.meta["lr"] in lrs[lay]
                    and r.meta["warmup"] in [warmup_steps(args, f) for f in args.warmups]]
            if not mine:
                sys.exit("error: the search has no complete run of %s yet (run without --no-run first)" % lay)
            b = min(mine, key=lambda r: key(final_val(r, args.steps)))
            best[lay] = (b.meta["lr"], b.meta["warmup"])
            for edge, step in ((min(lrs[lay]), -1), (max(lrs[lay]), +1)):
                if b.meta["lr"] == edge and extension < args.max_extend:
                    i = args.ladder.index(edge) + step if edge in args.ladder else -1
                    if 0 <= i < len(args.ladder):
                        print("search: %s is best at the edge lr %s: adding lr %s" % (
                            lay, common.fmt_lr(edge), common.fmt_lr(args.ladder[i])), flush=True)
                        lrs[lay].append(args.ladder[i])
                        grown = True
        if not grown:
            break
    for lay in LAYOUTS:
        lrs[lay].sort()
    return runs, best, lrs


def dedupe(runs):
    seen, out = set(), []
    for r in runs:
        if r.dir not in seen:
            seen.add(r.dir)
            out.append(r)
    return out


def shared_setting(args, runs):
    """The base-grid point with the lowest mean rank over the layouts (rank 1 = a layout's best point); ties go to
    the lower mean final val loss."""
    points = [(lr, warmup_steps(args, f)) for lr in args.lrs for f in args.warmups]
    val = {(r.meta["variant"], r.meta["lr"], r.meta["warmup"]): final_val(r, args.steps) for r in runs}
    rank = {}
    for lay in LAYOUTS:
        order = sorted(points, key=lambda p: key(val.get((lay,) + p, math.nan)))
        for i, p in enumerate(order):
            rank[(lay,) + p] = i + 1
    score = {p: (statistics.mean(rank[(lay,) + p] for lay in LAYOUTS),
                 statistics.mean(key(val.get((lay,) + p, math.nan)) for lay in LAYOUTS)) for p in points}
    return min(points, key=lambda p: score[p]), rank, score


def mean_sd(values):
    v = [x for x in values if math.isfinite(x)]
    if not v:
        return float("nan"), float("nan"), 0
    return statistics.mean(v), (statistics.stdev(v) if len(v) > 1 else float("nan")), len(v)


# Student's t, two-sided 95% (the 0.975 quantile) for 1..30 degrees of freedom; 1.96 beyond
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def resolved(a, b):
    """Welch's t-test at 95%, two-sided: whether the means of two seed samples differ by more than t * SE, with SE
    = sqrt(sd_a^2/n_a + sd_b^2/n_b) and t the 0.975 quantile at the Welch-Satterthwaite degrees of freedom (rounded
    down: conservative). Returns (resolved, t * SE)."""
    (ma, sa, na), (mb, sb, nb) = mean_sd(a), mean_sd(b)
    if na < 2 or nb < 2:
        return False, float("nan")
    va, vb = sa * sa / na, sb * sb / nb
    se = math.sqrt(va + vb)
    if se == 0:
        return ma != mb, 0.0
    df = (va + vb) ** 2 / (va * va / (na - 1) + vb * vb / (nb - 1))
    t = T975[int(df) - 1] if int(df) <= len(T975) else 1.96
    return abs(ma - mb) > t * se, t * se


def fmt_ms(values, digits=4, expect=None, sign=""):
    """mean ± sd; the number of values when it is not the expected one (a run missing, diverged or not run).
    sign="+": a signed mean (for changes)."""
    m, s, n = mean_sd(values)
    if n == 0:
        return "-"
    f = "%" + sign + ".*f"
    text = ((f + " ± %.*f") % (digits, m, digits, s)) if n > 1 else (f % (digits, m))
    return text + (" (n=%d)" % n if n != (expect or n) or n == 1 else "")


def setting_name(args, lr, warmup):
    return "lr %s, warmup %d (%d%%)" % (common.fmt_lr(lr), warmup, round(100.0 * warmup / args.steps))


def probe(args, r):
    """experiments/depth_probe on a run's final checkpoint (cached beside it), and the CPU seconds it took (kept
    beside the cache, so that the campaign's cost can be added up again from the cache)."""
    import depth_use
    import resource
    ckpt = r.final_checkpoint(args.steps)
    cost = ckpt + ".probe_cpu.txt"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    rows = depth_use.run_probe(ckpt, args.val, args,
                               [] if r.meta["layers"] <= args.greedy_max_layers else ["--greedy", "0"])
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    spent = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if spent > 0.5 or not os.path.exists(cost):
        common.write_text(cost, "%.1f\n" % spent)
    with open(cost) as f:
        return rows, common.number(f.read(), 0.0)


def parse_args(argv=None):
    p = common.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.common_arguments(p, RESULTS_DEFAULT)
    p.set_defaults(results=None)  # known below: it depends on --layouts and --tag
    p._option_string_actions["--results"].help = (
        "prefix of the CSV, PNG and table files (default %s, or %s_TAG: see --tag)" % (RESULTS_DEFAULT, RESULTS_DEFAULT))
    p.add_argument("--layouts", default=",".join(DEFAULT_LAYOUTS),
                   help="the layouts compared, names of common.VARIANTS (default %(default)s)")
    p.add_argument("--tag", help="without --results: the results are %s_TAG; with --layouts other than the "
                                 "default, TAG is by default the layouts joined by '_'" % RESULTS_DEFAULT)
    p.add_argument("--phase", choices=("search", "all"), default="all",
                   help="search: step 1 and the boundary runs only; all: every step (default)")
    p.add_argument("--depths", help="layers of the series (CPU default %s)" % CPU["depths"])
    p.add_argument("--seeds", help="seeds of the series; the first one is the search's (CPU default %s)" % CPU["seeds"])
    p.add_argument("--search-layers", type=int, help="depth of the search (CPU default %d)" % CPU["search_layers"])
    p.add_argument("--lrs", help="the search's peak learning rates (CPU default %s)" % CPU["lrs"])
    p.add_argument("--ladder", help="learning rates an edge-of-grid extension picks from (CPU default %s)"
                   % CPU["ladder"])
    p.add_argument("--max-extend", type=int, default=2, help="edge-of-grid extensions at most (default 2)")
    p.add_argument("--warmups", help="warmup lengths as fractions of the run (default %s)" % CPU["warmups"])
    p.add_argument("--drop-depths", help="depths of the layer-dropping probe (CPU default %s)" % CPU["drop_depths"])
    p.add_argument("--boundary-lrs", help="Post-Norm warmup boundary: lrs (CPU default %s)" % CPU["boundary_lrs"])
    p.add_argument("--boundary-warmups", help="Post-Norm warmup boundary: warmup fractions (CPU default %s)"
                   % CPU["boundary_warmups"])
    p.add_argument("--no-shared", action="store_true", help="skip the series at the shared setting")
    p.add_argument("--no-run", action="store_true",
                   help="run nothing: report the runs that are already complete (the rest are listed as missing)")
    p.add_argument("--shared-depths", help="depths of the series at the shared setting (CPU default %s)"
                   % CPU["shared_depths"])
    p.add_argument("--confirm", action="store_true",
                   help="step 3: each layout's best lr one ladder step lower at the deepest depth, one seed")
    p.add_argument("--greedy-max-layers", type=int,
                   help="greedy layer removal only up to this depth (CPU default %d; above it, by ranking alone)"
                   % CPU["greedy_max_layers"])
    p.add_argument("--probe-B", type=int)
    p.add_argument("--probe-T", type=int)
    p.add_argument("--probe-batches", type=int)
    p.add_argument("--probe-threads", type=int, default=1, help="OMP_NUM_THREADS of the probe (default 1)")
    p.add_argument("--spike", type=float, default=common.SPIKE_NATS,
                   help="rise of the train loss over its running minimum (nats) that counts as a spike, after the "
                        "loss first reached the unigram baseline (default 1.0)")
    args = p.parse_args(argv)
    layouts = common.parse_variants(args.layouts)
    if not layouts or len(set(layouts)) != len(layouts):
        p.error("--layouts needs at least one layout, each once (got '%s')" % args.layouts)
    LAYOUTS[:] = layouts
    if args.tag is not None and not re.fullmatch(r"[A-Za-z0-9_.+-]+", args.tag):
        p.error("--tag takes letters, digits and _ . + - only (it is part of file names), got '%s'" % args.tag)
    if args.results is None:
        args.results = RESULTS_DEFAULT
        if args.tag or layouts != DEFAULT_LAYOUTS:
            args.results += "_" + (args.tag or "_".join(layouts))
    elif args.tag:
        p.error("--tag names the results where --results does not: give one of them")
    preset = GPU if args.gpu else CPU
    for k in ("train", "val", "channels", "heads", "B", "T", "total", "steps", "val_every", "val_batches",
              "search_layers", "depths", "seeds", "lrs", "ladder", "warmups", "drop_depths", "boundary_lrs",
              "boundary_warmups", "probe_B", "probe_T", "probe_batches", "shared_depths", "greedy_max_layers"):
        if getattr(args, k) is None:
            setattr(args, k, preset[k])
    for k in ("depths", "seeds", "drop_depths", "shared_depths"):
        if isinstance(getattr(args, k), str):
            setattr(args, k, [int(v) for v in common.parse_floats(getattr(args, k))])
    for k in ("lrs", "ladder", "warmups", "boundary_lrs", "boundary_warmups"):
        if isinstance(getattr(args, k), str):
            setattr(args, k, common.parse_floats(getattr(args, k)))
    args.depths = sorted(set(args.depths))  # tables and plots go by depth; run_order() says what runs first
    if not args.seeds or not args.depths or not args.lrs or not args.warmups:
        p.error("--seeds, --depths, --lrs and --warmups need at least one value")
    if any(not 0 <= f <= 1 for f in args.warmups + args.boundary_warmups):
        p.error("warmup fractions must lie in [0, 1]")
    if args.layers is not None or args.warmup is not None or args.seed != 1337:
        p.error("--layers, --warmup and --seed are set by the protocol here: use --depths, --warmups, --seeds")
    return args


def row_of(args, r, setting, unigram):
    train = r.log["train"]
    fv = final_val(r, args.steps)
    start = common.spike_start(train, unigram)
    rise, at, spiked = common.spike(train, unigram, args.spike)
    category, when = r.outcome(unigram, args.spike)
    last = [l for _, l in train[-10:] if math.isfinite(l)]
    return dict(layout=r.meta["variant"], setting=setting, layers=r.meta["layers"], seed=r.meta["seed"],
                lr=common.fmt_lr(r.meta["lr"]), warmup=r.meta["warmup"],
                warmup_frac="%.3f" % (r.meta["warmup"] / args.steps), steps=args.steps, status=r.status,
                diverge_step="" if r.diverge_step is None else r.diverge_step, final_val_loss="%.4f" % fv,
                best_val_loss="%.4f" % min((l for _, l in r.log["val"]), default=float("nan")),
                val_loss_mid="%.4f" % dict(r.log["val"]).get(args.steps // 2, float("nan")),
                final_train_loss_last10="%.4f" % (sum(last) / len(last)) if last else "nan",
                stuck=int(r.status == "ok" and fv > unigram - common.STALL_MARGIN), spike_start="" if start is None else start,
                max_rise_after_start="%.3f" % rise, max_rise_step="" if at is None else at, spike=int(spiked),
                seconds="%.1f" % r.seconds,
                cpu_seconds="" if r.cpu_seconds is None else "%.1f" % r.cpu_seconds, run_dir=r.dir,
                outcome=category, outcome_step="" if when is None else when)


COLUMNS = ["layout", "setting", "layers", "seed", "lr", "warmup", "warmup_frac", "steps", "status", "diverge_step",
           "final_val_loss", "best_val_loss", "val_loss_mid", "final_train_loss_last10", "stuck", "spike_start",
           "max_rise_after_start", "max_rise_step", "spike", "seconds", "cpu_seconds", "run_dir",
           "outcome", "outcome_step"]  # how the run ended (common.outcome), after the older columns


def write_rows(path, rows):
    common.write_csv(path, COLUMNS, [[row[c] for c in COLUMNS] for row in rows])


def search_report(args, runs, best, lrs, unigram, shared, rank):
    rows = [row_of(args, r, "search", unigram) for r in runs]
    write_rows(args.results + "_search.csv", rows)
    val = {(r.meta["variant"], r.meta["lr"], r.meta["warmup"]): final_val(r, args.steps) for r in runs}
    ended = {(r.meta["variant"], r.meta["lr"], r.meta["warmup"]): row for r, row in zip(runs, rows)}
    ws = [warmup_steps(args, f) for f in args.warmups]
    table = []
    for lay in LAYOUTS:
        for u in ws:
            cells = []
            for lr in sorted(set(x for l in LAYOUTS for x in lrs[l])):
                v = val.get((lay, lr, u))
                if v is None:
                    cells.append("")
                    continue
                mark = "**" if best[lay] == (lr, u) else ""
                cells.append(("%s%.4f%s" % (mark, v, mark) if math.isfinite(v) else "") + outcome_mark(ended[(lay, lr, u)]))
            table.append([lay, "%d (%d%%)" % (u, round(100.0 * u / args.steps))] + cells)
    all_lrs = sorted(set(x for l in LAYOUTS for x in lrs[l]))
    common.emit_table(
        args.results + "_search.md",
        "Search (step 1): final val loss after %d steps, %d layers, C=%d, seed %d; **bold** = the layout's best; "
        "%s" % (args.steps, args.search_layers, args.channels, args.seeds[0], outcome_legend(unigram, args.spike)),
        ["layout", "warmup"] + ["lr %s" % common.fmt_lr(lr) for lr in all_lrs], table)
    table = [[lay, setting_name(args, *best[lay]), "%.4f" % val[(lay,) + best[lay]],
              "%.4f" % val.get((lay,) + shared, math.nan), rank[(lay,) + shared]] for lay in LAYOUTS]
    common.emit_table(
        args.results + "_settings.md",
        "Settings chosen by the search (%d layers, seed %d): each layout's best, and the shared setting %s (the "
        "lowest mean rank over the layouts)" % (args.search_layers, args.seeds[0], setting_name(args, *shared)),
        ["layout", "own best setting", "val loss at own best", "val loss at the shared setting",
         "rank of the shared setting (of %d)" % (len(args.lrs) * len(args.warmups))], table)


# the marks of a table cell for how a run ended (the row of row_of), and what they mean (for a table's title)
def outcome_legend(unigram, spike):
    return ("* = stalled (not below the unigram baseline %.4f - %.2f), collapsed @N = a loss spike (> %.1f nats above "
            "the running minimum) at step N not recovered from, non-finite @N = a non-finite loss at step N, ^ = a "
            "spike recovered from" % (unigram, common.STALL_MARGIN, spike))


def outcome_mark(row):
    what, step = row["outcome"], row["outcome_step"]
    if what in ("collapsed", "non-finite"):
        return " %s @%s" % (what, step)
    return (" *" if what == "stalled" else "") + (" ^" if row["spike"] else "")


def boundary_report(args, runs, unigram):
    L, seed = args.search_layers, args.seeds[0]
    by = {(r.meta["variant"], r.meta["lr"], r.meta["warmup"]): r for r in runs}
    table = []
    for f in args.boundary_warmups:
        u = warmup_steps(args, f)
        cells = []
        for lr in args.boundary_lrs:
            r = by.get(("post", lr, u))
            if r is None:
                cells.append("not run")
                continue
            v = final_val(r, args.steps)
            cells.append(("%.4f" % v if math.isfinite(v) else "") + outcome_mark(row_of(args, r, "boundary", unigram)))
        table.append(["%d (%d%%)" % (u, round(100.0 * u / args.steps))] + cells)
    common.emit_table(
        args.results + "_boundary.md",
        "Post-Norm's warmup boundary: final val loss after %d steps, %d layers, C=%d, seed %d; %s"
        % (args.steps, L, args.channels, seed, outcome_legend(unigram, args.spike)),
        ["warmup steps"] + ["lr %s" % common.fmt_lr(lr) for lr in args.boundary_lrs], table)


def series_runs(args, best, shared):
    """Step 2: every layout at its own best setting at every depth and seed, then (where it differs) at the shared
    setting."""
    own, extra = [], []
    for lay in LAYOUTS:
        for L in args.depths:
            for seed in args.seeds:
                own.append(make_run(args, lay, L, *best[lay], seed))
                if not args.no_shared and shared != best[lay] and L in args.shared_depths:
                    extra.append(make_run(args, lay, L, *shared, seed))
    order = lambda r: (run_order(args).index(r.meta["layers"]), args.seeds.index(r.meta["seed"]))  # noqa: E731
    return sorted(own, key=order), sorted(extra, key=order)


def run_order(args):
    """The order the series runs its depths in: the search depth first (the comparison at own best and shared
    setting), then the others from the shallowest (cheapest) up; within a depth seed by seed. A campaign stopped
    early (see --no-run) then has every seed of every layout at the depths it reached."""
    first = [L for L in [args.search_layers] if L in args.depths]
    return list(dict.fromkeys(first + sorted(args.depths)))


def series_report(args, own, extra, best, shared, unigram):
    rows = [row_of(args, r, "own_best", unigram) for r in own]
    rows += [row_of(args, r, "shared", unigram) for r in extra]
    for row in rows:  # a layout whose own best is the shared setting: its runs are the shared series too
        if row["setting"] == "own_best" and best[row["layout"]] == shared and not args.no_shared:
            row["setting"] = "own_best+shared"
    write_rows(args.results + ".csv", rows)

    def vals(lay, setting, L):
        return [float(r["final_val_loss"]) for r in rows
                if r["layout"] == lay and setting in r["setting"].split("+") and r["layers"] == L]

    table = []
    for setting in ("own_best", "shared"):
        if setting == "shared" and args.no_shared:
            continue
        for lay in LAYOUTS:
            s = best[lay] if setting == "own_best" else shared
            table.append([lay, ("own best: " if setting == "own_best" else "shared: ") + setting_name(args, *s)]
                         + [fmt_ms(vals(lay, setting, L), expect=len(args.seeds)) for L in args.depths])
        verdict = []
        for L in args.depths:
            means = sorted((mean_sd(vals(lay, setting, L))[0], lay) for lay in LAYOUTS)
            means = [m for m in means if math.isfinite(m[0])]
            if len(means) < 2:
                verdict.append("-")
                continue
            (m1, a), (m2, b) = means[0], means[1]
            ok, se = resolved(vals(a, setting, L), vals(b, setting, L))
            verdict.append("%s by %.4f (95%% margin %.4f): %s" % (a, m2 - m1, se, "resolved over " + b if ok
                                                                     else "not resolved from " + b))
        table.append(["lowest", "(%s)" % setting.replace("_", " ")] + verdict)
    common.emit_table(
        args.results + ".md",
        "Depth series: final val loss after %d steps (C=%d, %d tokens a step), mean ± standard deviation over seeds "
        "%s; 'resolved' = the two lowest means differ by more than the 95%% margin of Welch's t-test"
        % (args.steps, args.channels, args.B * args.T if not args.total else args.total,
           ",".join(str(s) for s in args.seeds)),
        ["layout", "setting"] + ["L=%d" % L for L in args.depths], table)

    table = []
    for lay in LAYOUTS:
        cells = []
        for L in args.depths:
            mine = [r for r in rows if r["layout"] == lay and "own_best" in r["setting"] and r["layers"] == L]
            if not mine:
                cells.append("-")
                continue
            n = sum(int(r["spike"]) for r in mine)
            top = max(float(r["max_rise_after_start"]) for r in mine)
            count = {k: sum(r["outcome"] == k for r in mine) for k in common.OUTCOMES}
            at = ",".join(str(r["outcome_step"]) for r in mine if r["outcome"] == "collapsed")
            cells.append("%d/%d spikes (max rise %.2f), %d collapsed%s, %d stalled, %d non-finite"
                         % (n, len(mine), top, count["collapsed"], " (@%s)" % at if at else "", count["stalled"],
                            count["non-finite"]))
        table.append([lay] + cells)
    common.emit_table(
        args.results + "_spikes.md",
        "Depth series at each layout's own best: runs with a loss spike (a rise > %.1f nats above the running "
        "minimum after the train loss first reached the unigram baseline %.4f), and how the runs ended (common.outcome: "
        "collapsed = a spike not recovered from, at the step given; stalled = no spike, final val loss not below the "
        "baseline - %.2f; non-finite)" % (args.spike, unigram, common.STALL_MARGIN),
        ["layout"] + ["L=%d" % L for L in args.depths], table)
    return rows


def confirm_report(args, runs, series_rows, best, unigram):
    L, seed = max(args.depths), args.seeds[0]
    table = []
    for r in runs:
        lay = r.meta["variant"]
        own = [x for x in series_rows if x["layout"] == lay and "own_best" in x["setting"] and x["layers"] == L
               and x["seed"] == seed]
        table.append([lay, setting_name(args, *best[lay]), own[0]["final_val_loss"] if own else "-",
                      setting_name(args, r.meta["lr"], r.meta["warmup"]), "%.4f" % final_val(r, args.steps)])
    common.emit_table(
        args.results + "_confirm.md",
        "Does the best lr move with depth? At %d layers, seed %d: each layout's best lr from the %d-layer search, "
        "and one step lower on the lr ladder" % (L, seed, args.search_layers),
        ["layout", "own best (from the search)", "val loss", "lower lr", "val loss"], table)
    return [row_of(args, r, "confirm", unigram) for r in runs]


def drop_report(args, own):
    """Step 4: the probe on every seed's model at each layout's own best, at each drop depth."""
    results, cost = [], 0.0
    for L in args.drop_depths:
        for lay in LAYOUTS:
            for r in own:
                if r.meta["variant"] != lay or r.meta["layers"] != L or r.status != "ok":
                    continue
                print("probing %s L=%d seed %d" % (lay, L, r.meta["seed"]), flush=True)
                rows, spent = probe(args, r)
                cost += spent
                results.append((lay, L, r.meta["seed"], rows))
    csv_rows = []
    for lay, L, seed, rows in results:
        base = [x["value"] for x in rows if x["probe"] == "base"][0]
        for x in rows:
            if x["probe"] in ("base", "drop1", "greedy", "rank"):
                csv_rows.append([lay, L, seed, x["probe"], "" if x["index"] is None else x["index"],
                                 x["removed"], "%.6f" % x["value"], "%+.6f" % (x["value"] - base)])
    common.write_csv(args.results + "_drop.csv", ["layout", "layers", "seed", "probe", "index", "removed",
                                                  "val_loss", "increase"], csv_rows)
    table = []
    for L in args.drop_depths:
        for lay in LAYOUTS:
            mine = [(seed, rows) for l2, L2, seed, rows in results if l2 == lay and L2 == L]
            if not mine:
                continue
            stats = dict(mean=[], least=[], helps=[], greedy=[], rank=[])
            k = 0
            for seed, rows in mine:
                base = [x["value"] for x in rows if x["probe"] == "base"][0]
                d = [x["value"] - base for x in rows if x["probe"] == "drop1"]
                g = [x for x in rows if x["probe"] == "greedy"]
                rk = [x for x in rows if x["probe"] == "rank"]
                stats["mean"].append(statistics.mean(d))
                stats["least"].append(min(d))
                stats["helps"].append(float(sum(x < 0 for x in d)))
                if rk:
                    k = rk[-1]["index"]
                    stats["rank"].append(rk[-1]["value"] - base)
                if g:
                    stats["greedy"].append(g[-1]["value"] - base)
            table.append([lay, L, len(mine), fmt_ms(stats["mean"], sign="+"), fmt_ms(stats["least"], sign="+"),
                          fmt_ms(stats["helps"], 1), "%d" % k, fmt_ms(stats["greedy"], sign="+"),
                          fmt_ms(stats["rank"], sign="+")])
    common.emit_table(
        args.results + "_drop.md",
        "Layer dropping without fine-tuning, each layout at its own best setting (val loss over %d batches of %dx%d; "
        "increase of the val loss, mean ± standard deviation over seeds)" % (args.probe_batches, args.probe_B,
                                                                              args.probe_T),
        ["layout", "layers", "seeds", "mean single drop", "least harmful single drop",
         "blocks whose removal lowers the loss", "k (largest <= 30%)", "k blocks removed, greedy",
         "k blocks, by ranking"],
        table)
    return results, cost


def cost_report(args, phases):
    table = []
    total_cpu = total_wall = 0.0
    for name, runs, extra_cpu in phases:
        cpu = sum(r.cpu_seconds or 0.0 for r in runs) + extra_cpu
        wall = sum(r.seconds for r in runs)
        missing = sum(r.cpu_seconds is None for r in runs)
        total_cpu += cpu
        total_wall += wall
        table.append([name, len(runs), "%.0f" % cpu, "%.0f" % wall, missing])
    table.append(["total", sum(len(p[1]) for p in phases), "%.0f (%.2f CPU-hours)" % (total_cpu, total_cpu / 3600),
                  "%.0f" % total_wall, ""])
    common.emit_table(args.results + "_cost.md",
                      "What the campaign cost: CPU seconds (user + system, of every trainer and probe process, "
                      "from the run records) and the wall seconds of the runs (two at a time, on a shared machine)",
                      ["phase", "runs", "CPU seconds", "wall seconds (sum over runs)",
                       "runs without a CPU record"], table)


def main():
    args = parse_args()
    common.prepare_trainer(args)
    if not common.DRY_RUN and args.phase == "all":
        common.ensure_binary(os.path.join("experiments", "depth_probe"), "experiments")
    common.ensure_file(args.train, "prepare it with data/prepare.py")
    common.ensure_file(args.val, "prepare it with data/prepare.py")
    if args.dry_run:  # the search's commands; the rest depends on its results
        print("# step 1 (the search); the series' settings come from its results")
    s_runs, best, lrs = search(args)
    unigram = common.unigram_loss(args.train, args.val)
    print("unigram baseline (val loss of train's token frequencies): %.4f" % unigram)
    shared, rank, _ = shared_setting(args, s_runs)
    search_report(args, s_runs, best, lrs, unigram, shared, rank)
    boundary_report(args, s_runs, unigram)
    for lay in LAYOUTS:
        print("best setting of %s: %s" % (lay, setting_name(args, *best[lay])))
    print("shared setting: %s" % setting_name(args, *shared))
    phases = [("search at %d layers (incl. Post-Norm boundary)" % args.search_layers, s_runs, 0.0)]
    if args.phase == "search":
        plot_search(args, s_runs, lrs, unigram)
        cost_report(args, phases)
        return common.report_errors(s_runs)
    own, extra = series_runs(args, best, shared)
    done, done_extra = [], []
    for L in run_order(args):  # depth by depth, each probed as soon as it is complete
        done += run(args, [r for r in own if r.meta["layers"] == L], "depth series at L=%d, own best settings" % L)
        done_extra += run(args, [r for r in extra if r.meta["layers"] == L], "depth series at L=%d, shared setting" % L)
        if L in args.drop_depths:
            for r in done:
                if r.meta["layers"] == L and r.status == "ok":
                    probe(args, r)
    own, extra = done, done_extra
    confirm = []
    if args.confirm:
        L = max(args.depths)
        for lay in LAYOUTS:
            lr, u = best[lay]
            i = args.ladder.index(lr) - 1 if lr in args.ladder else -1
            confirm.append(make_run(args, lay, L, args.ladder[i] if i >= 0 else lr / 3, u, args.seeds[0]))
        confirm = run(args, confirm, "confirmation at %d layers" % L)
    rows = series_report(args, own, extra, best, shared, unigram)
    if confirm:
        rows += confirm_report(args, confirm, rows, best, unigram)
        write_rows(args.results + ".csv", rows)
    drops, probe_cpu = drop_report(args, own)
    plot_search(args, s_runs, lrs, unigram)
    plot_series(args, rows)
    plot_drop(args, drops)
    searched = {x.dir for x in s_runs}  # runs the series shares with the search are counted there
    phases += [("depth series, own best", [r for r in own if r.dir not in searched], 0.0),
               ("depth series, shared setting", [r for r in extra if r.dir not in searched], 0.0),
               ("confirmation (lr one step lower)", confirm, 0.0),
               ("layer-dropping probe (%d models)" % len(drops), [], probe_cpu)]
    cost_report(args, phases)
    return common.report_errors(s_runs + own + extra + confirm)


def plot_search(args, runs, lrs, unigram):
    if not common.PLOTS:
        return
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(LAYOUTS), figsize=(4.2 * len(LAYOUTS), 3.6), sharey=True, squeeze=False)
    axes = axes[0]
    ws = [warmup_steps(args, f) for f in args.warmups]
    finite = [final_val(r, args.steps) for r in runs if math.isfinite(final_val(r, args.steps))]
    for ax, lay in zip(axes, LAYOUTS):
        for u, ls in zip(ws, ("-", "--", ":", "-.")):
            pts = sorted((r.meta["lr"], final_val(r, args.steps)) for r in runs
                         if r.meta["variant"] == lay and r.meta["warmup"] == u and r.meta["lr"] in lrs[lay])
            ax.plot([p[0] for p in pts if math.isfinite(p[1])], [p[1] for p in pts if math.isfinite(p[1])],
                    marker="o", ls=ls, color=common.STYLE[lay]["color"], label="warmup %d (%d%%)"
                    % (u, round(100.0 * u / args.steps)))
        ax.axhline(unigram, color="gray", lw=0.8, ls="--")
        ax.text(min(lrs[lay]), unigram, "unigram", fontsize=7, color="gray", va="bottom")
        ax.set_xscale("log")
        ax.set_title(lay, fontsize=10)
        ax.set_xlabel("peak learning rate")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("final val loss")
    if finite:
        axes[0].set_ylim(min(finite) - 0.05, max(finite + [unigram]) + 0.05)
    fig.suptitle("Search: %d layers, C=%d, %d steps, seed %d" % (args.search_layers, args.channels, args.steps,
                                                                 args.seeds[0]), fontsize=10)
    fig.tight_layout()
    common.save_figure(fig, args.results + "_search.png")
    plt.close(fig)


def plot_series(args, rows):
    if not common.PLOTS:
        return
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for setting, ls, shift in (("own_best", "-", -0.03), ("shared", "--", 0.03)):
        for i, lay in enumerate(LAYOUTS):
            xs, ms, sds = [], [], []
            for L in args.depths:
                m, sd, n = mean_sd([float(r["final_val_loss"]) for r in rows if r["layout"] == lay
                                    and setting in r["setting"].split("+") and r["layers"] == L])
                if n:
                    xs.append(L * 2 ** (shift * (i - 1) + shift))
                    ms.append(m)
                    sds.append(sd if n > 1 else 0.0)
            if xs:
                ax.errorbar(xs, ms, yerr=sds, marker="o", ls=ls, capsize=3, color=common.STYLE[lay]["color"],
                            label="%s, %s" % (lay, setting.replace("_", " ")))
    ax.set_xscale("log", base=2)
    ax.set_xticks(args.depths)
    ax.set_xticklabels([str(L) for L in args.depths])
    ax.set_xlabel("layers (C=%d)" % args.channels)
    ax.set_ylabel("final val loss (mean ± sd over the seeds; n in the table)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title("Depth series, %d steps: each layout at its own best (solid) and at the shared setting (dashed)"
                 % args.steps, fontsize=9)
    fig.tight_layout()
    common.save_figure(fig, args.results + ".png")
    plt.close(fig)


def plot_drop(args, drops):
    if not common.PLOTS or not drops:
        return
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(args.drop_depths), figsize=(5.5 * len(args.drop_depths), 3.8), squeeze=False)
    for ax, L in zip(axes[0], args.drop_depths):
        for lay in LAYOUTS:
            per_seed = []
            for l2, L2, seed, rows in drops:
                if l2 == lay and L2 == L:
                    base = [x["value"] for x in rows if x["probe"] == "base"][0]
                    per_seed.append([x["value"] - base for x in rows if x["probe"] == "drop1"])
            if not per_seed:
                continue
            ms = [mean_sd([s[l] for s in per_seed]) for l in range(L)]
            ax.errorbar(range(L), [m[0] for m in ms], yerr=[m[1] if m[2] > 1 else 0.0 for m in ms], marker=".",
                        capsize=2, color=common.STYLE[lay]["color"], label="%s (%d seeds)" % (lay, len(per_seed)))
        ax.axhline(0, color="gray", lw=0.8)
        ax.set_yscale("symlog", linthresh=0.01)
        ax.set_xlabel("block removed")
        ax.set_ylabel("val loss increase (mean ± sd over seeds)")
        ax.set_title("L=%d" % L, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Single-block removal without fine-tuning, each layout at its own best setting", fontsize=10)
    fig.tight_layout()
    common.save_figure(fig, args.results + "_drop.png")
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(common.run_main(main))
