#!/usr/bin/env python3
"""Recount the loss spikes and the outcomes (how each run ended: trained, stalled, collapsed, non-finite;
common.outcome) of an older results CSV under the current definitions (docs/experiments.md): a spike is a rise of
the train loss by more than --spike nats above its running minimum, counted only after the train loss first came
down to the unigram baseline; older sweeps counted from step 0, so the first updates of a random model, where the
loss swings by nats, showed up as spikes. The "collapsed" outcome (a spike not recovered from) is newer than every
committed table.

    /usr/bin/python3 experiments/spike_recount.py docs/results/gpu/lr_sweep_gpu.csv [--curves CURVES.csv]
    /usr/bin/python3 experiments/spike_recount.py docs/results/hybrid_comparison.csv [--runs-dir DIR]

The CSV is an lr sweep's (experiments/lr_sweep.py: variant, lr, ...) or a depth campaign's (experiments/
depth_scaling.py: layout, setting, layers, seed, ...). Each run is recounted from its loss curve where there is one:
the sweep's RESULTS_curves.csv (written by lr_sweep.py since the new spike definition), or the run's own main.log
where its run_dir still exists (or a folder of that name under --runs-dir). Without a curve, from the CSV's columns
where they decide it, and otherwise the row says what cannot be recounted:
  - an lr sweep's old largest rise (from step 0) bounds the new one (the largest over a subset of the same steps):
    below the threshold, no spike now either;
  - a depth campaign's CSV has the current spike columns and `stuck` (the final val loss not below the baseline -
    0.05): no spike and stuck is stalled; a spike and stuck is collapsed (a run that ends stalled has not recovered),
    at the step of its largest spike (the first spike, the outcome's step, is at or before it); a spike in a run
    that ends below the baseline is collapsed if its end (final_train_loss_last10) is more than RECOVERY_NATS above
    the baseline (the running minimum before any counted spike is at most the baseline), and otherwise needs the
    curve.
"""
import csv
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def read_csv(path, what, columns):
    """The rows of a CSV that must have `columns`; one error line if it cannot be read as one."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        sys.exit("error: cannot read %s: %s" % (path, e.strerror or e))
    except (UnicodeDecodeError, csv.Error) as e:
        sys.exit("error: %s is not a CSV (%s)" % (path, e))
    missing = [c for c in columns if rows and c not in rows[0]]
    if not rows or missing:
        sys.exit("error: %s is not %s (%s)" % (path, what, "no rows" if not rows else "no column " + ", ".join(missing)))
    return rows


# the columns that name a run in a curves CSV: an lr sweep's (lr_sweep.py's _curves.csv), a depth campaign's
SWEEP_KEY = ("variant", "lr")
CAMPAIGN_KEY = ("layout", "layers", "seed", "lr", "warmup")


def read_curves(path, key):
    """{run key: {'train': [(step, loss)], 'val': [...]}} from a curves CSV (columns key + split, step, loss)"""
    curves = {}
    for r in read_csv(path, "a curves CSV", key + ("split", "step", "loss")):
        try:
            point = (int(r["step"]), float(r["loss"]))
        except ValueError:
            sys.exit("error: %s is not a curves CSV: step %r, loss %r" % (path, r["step"], r["loss"]))
        if r["split"] in ("train", "val"):
            curves.setdefault(tuple(r[k] for k in key), {"train": [], "val": []})[r["split"]].append(point)
    return curves


def is_the_run(log, row):
    """the curve is the row's run: complete, with the row's final val loss to the CSV's 4 digits (a folder of the
    same name holds the same command, which another build of the trainer may have run otherwise)"""
    final = "%.4f" % log["val"][-1][1] if log["val"] else None
    return bool(log["train"]) and final == row.get("final_val_loss", final)


def curve_of(row, key, curves, runs_dir):
    """(the row's curves, where they come from), or (None, None)"""
    log = curves.get(tuple(row[k] for k in key))
    if log is not None and is_the_run(log, row):
        return log, "curves CSV"
    log, folder = run_log(row, runs_dir)
    return (log, folder + "/main.log") if log is not None else (None, None)


def run_log(row, runs_dir):
    """main.log's curves of the row's run, where its folder exists (as run_dir, or by its name under runs_dir) with
    a complete run in it (run.json) that is the row's: the same final val loss, to the CSV's 4 digits (a folder of
    the same name holds the same command, which another build of the trainer may have run otherwise)"""
    d = (row.get("run_dir") or "").rstrip("/")
    for folder in [d] + ([os.path.join(runs_dir, os.path.basename(d))] if runs_dir and d else []):
        if not folder or not os.path.isfile(os.path.join(folder, "run.json")):
            continue
        log = common.read_log(os.path.join(folder, "main.log"))
        if is_the_run(log, row):
            return log, folder
    return None, None


def from_curve(log, row, unigram, threshold):
    """(spike cells, outcome cell) from a curve"""
    start = common.spike_start(log["train"], unigram)
    rise, at, spiked = common.spike(log["train"], unigram, threshold)
    diverge = common.number(row.get("diverge_step"), None) if row.get("status") == "diverged" else None
    what, step = common.outcome(log["train"], log["val"], unigram, None if diverge is None else int(diverge),
                                threshold)
    return (["-" if start is None else start, "%.3f @%s" % (rise, at) if at is not None else "%.3f" % rise,
             "spike" if spiked else "none"], what if step is None else "%s @%s" % (what, step), what)


def sweep_row(row, log, source, unigram, threshold):
    """an lr sweep's row: [old rise, spike start, new rise, spike verdict, outcome, source], outcome category"""
    old = "%s @%s" % (row.get("max_loss_rise", "?"), row.get("max_rise_step", "?"))
    if log is not None:
        spikes, ended, what = from_curve(log, row, unigram, threshold)
        return [old] + spikes + [ended, source], what
    if row.get("status") == "diverged":
        return [old, "-", "-", "-", "non-finite @%s" % row.get("diverge_step", "?"), "the CSV"], "non-finite"
    stuck = row.get("stuck") == "1"
    if common.number(row.get("max_loss_rise", "inf")) <= threshold:
        what = "stalled" if stuck else "trained"
        return [old, "-", "-", "none (no curve, but the old largest rise bounds the new one)", what,
                "the CSV"], what
    what = "stalled or collapsed" if stuck else "trained or collapsed"
    return [old, "-", "-", "no curve: cannot be recounted (old: spike)", what + " (needs the curve)", "the CSV"], what


def campaign_row(row, log, source, unigram, threshold):
    """a depth campaign's row: [spike start, rise, spike verdict, outcome, source], outcome category"""
    if log is not None:
        spikes, ended, what = from_curve(log, row, unigram, threshold)
        return spikes + [ended, source], what
    spikes = [row.get("spike_start") or "-", "%s @%s" % (row["max_rise_after_start"], row.get("max_rise_step") or "-"),
              "spike" if row["spike"] == "1" else "none"]
    if row["status"] == "diverged":
        return spikes + ["non-finite @%s" % row.get("diverge_step", "?"), "the CSV"], "non-finite"
    stuck, spiked = row["stuck"] == "1", common.number(row["max_rise_after_start"], 0.0) > threshold
    if not spiked:
        what = "stalled" if stuck else "trained"
        return spikes + [what, "the CSV"], what
    if stuck or common.number(row.get("final_train_loss_last10")) > unigram + common.RECOVERY_NATS:
        return spikes + ["collapsed (largest spike @%s)" % row.get("max_rise_step"), "the CSV"], "collapsed"
    return spikes + ["trained or collapsed (needs the curve)", "the CSV"], "trained or collapsed"


def main():
    p = common.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results_csv")
    p.add_argument("--curves", help="the runs' curves CSV (default: beside the CSV, RESULTS_curves.csv, if there)")
    p.add_argument("--save-curves", metavar="PATH",
                   help="write the curves of the runs recounted from a curve into PATH (a curves CSV for --curves)")
    p.add_argument("--runs-dir", help="where to look for the runs' folders (main.log) by name, besides run_dir")
    p.add_argument("--unigram", type=float, default=None,
                   help="the unigram baseline (default: from the KJV shards, data/kjv/kjv_{train,val}.bin)")
    p.add_argument("--spike", type=float, default=common.SPIKE_NATS,
                   help="threshold in nats (default %(default)s)")
    args = p.parse_args()
    rows = read_csv(args.results_csv, "an lr sweep's or a depth campaign's CSV", ())
    campaign = "layout" in rows[0]
    if campaign:
        read_csv(args.results_csv, "a depth campaign's CSV (experiments/depth_scaling.py)",
                 ("layout", "setting", "layers", "seed", "lr", "warmup", "status", "stuck", "spike",
                  "max_rise_after_start"))
    else:
        read_csv(args.results_csv, "an lr sweep's CSV (experiments/lr_sweep.py)", ("variant", "lr"))
    key = CAMPAIGN_KEY if campaign else SWEEP_KEY
    curves_path = args.curves or args.results_csv[:-4] + "_curves.csv"
    curves = read_curves(curves_path, key) if args.curves or os.path.exists(curves_path) else {}
    unigram = args.unigram
    if unigram is None:
        os.chdir(common.REPO)
        common.ensure_file("data/kjv/kjv_train.bin", "prepare it with data/prepare.py kjv, or pass --unigram")
        unigram = common.unigram_loss("data/kjv/kjv_train.bin", "data/kjv/kjv_val.bin")
    table, ended, saved = [], [], {}
    for r in rows:
        log, source = curve_of(r, key, curves, args.runs_dir)
        if log is not None:
            saved[tuple(r[k] for k in key)] = log
        if campaign:
            cells, what = campaign_row(r, log, source, unigram, args.spike)
            table.append([r["layout"], r["setting"], r["layers"], r["seed"], r["lr"], r["warmup"]] + cells)
        else:
            cells, what = sweep_row(r, log, source, unigram, args.spike)
            table.append([r["variant"], r["lr"]] + cells)
        ended.append(what)
    if args.save_curves:
        common.write_csv(args.save_curves, list(key) + ["split", "step", "loss"],
                         [list(k) + [split, step, "%.6f" % loss] for k, log in saved.items()
                          for split in ("train", "val") for step, loss in log[split]])
    command = " ".join(["experiments/spike_recount.py"] + sys.argv[1:])
    print("Loss spikes and outcomes of %s under the current definitions (printed by %s)\n" % (args.results_csv,
                                                                                              command))
    spike_head = ["loss reached %.4f at step" % unigram, "largest rise after that", "spike (> %.1f nats)" % args.spike]
    outcome_head = ["outcome (common.outcome)", "from"]
    if campaign:
        header = ["layout", "setting", "layers", "seed", "lr", "warmup"] + spike_head + outcome_head
    else:
        header = ["variant", "lr", "old: largest rise from step 0 @ step"] + spike_head + outcome_head
    print(common.markdown_table(header, table))
    counts = {}
    for what in ended:
        counts[what] = counts.get(what, 0) + 1
    order = list(common.OUTCOMES) + sorted(set(counts) - set(common.OUTCOMES))
    print("\n%d runs: %s" % (len(rows), ", ".join("%d %s" % (counts[k], k) for k in order if k in counts)))
    if campaign:  # how the runs ended, by layout and depth, as the campaign's _spikes.md table counts them
        groups = {}
        for r, what in zip(rows, ended):
            groups.setdefault((r["layout"], r["setting"], int(r["layers"])), []).append(what)
        summary = [[lay, setting, L, len(v)] + [sum(w == k for w in v) for k in common.OUTCOMES] +
                   [sum(w not in common.OUTCOMES for w in v)] for (lay, setting, L), v in groups.items()]
        print("\nBy layout, setting and depth:\n")
        print(common.markdown_table(["layout", "setting", "layers", "runs"] + list(common.OUTCOMES) +
                                    ["not decidable without the curve"], summary))
    return 0


if __name__ == "__main__":
    sys.exit(common.run_main(main))
