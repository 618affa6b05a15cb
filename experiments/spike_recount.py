#!/usr/bin/env python3
"""Recount the loss spikes of an lr sweep under the current definition (docs/experiments.md): a rise of the train
loss by more than --spike nats above its running minimum, counted only after the train loss first came down to the
unigram baseline. Older sweeps counted from step 0, so the first updates of a random model, where the loss swings by
nats, showed up as spikes.

    /usr/bin/python3 experiments/spike_recount.py docs/results/gpu/lr_sweep_gpu.csv [--curves CURVES.csv]

Each run is recounted from its loss curve: the sweep's RESULTS_curves.csv (written by lr_sweep.py since the new
definition), or the run's own main.log where its run_dir still exists. A run with neither is listed with what the
old CSV recorded (its largest rise from step 0 and that step): if that rise is below the threshold, so is the new
one (it is the largest over a subset of the same steps); otherwise the verdict is "cannot be recounted".
"""
import csv
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def read_csv(path, columns):
    """The rows of a CSV of lr_sweep's, which must have `columns`; one error line if it cannot be read as one."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        sys.exit("error: cannot read %s: %s" % (path, e.strerror or e))
    except (UnicodeDecodeError, csv.Error) as e:
        sys.exit("error: %s is not a CSV (%s)" % (path, e))
    missing = [c for c in columns if rows and c not in rows[0]]
    if not rows or missing:
        sys.exit("error: %s is not an lr_sweep CSV (%s)" % (path, "no rows" if not rows else
                                                            "no column " + ", ".join(missing)))
    return rows


def main():
    p = common.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("sweep_csv")
    p.add_argument("--curves", help="the sweep's _curves.csv (default: beside the CSV, if there)")
    p.add_argument("--unigram", type=float, default=None,
                   help="the unigram baseline (default: from the KJV shards, data/kjv/kjv_{train,val}.bin)")
    p.add_argument("--spike", type=float, default=1.0, help="threshold in nats (default 1.0)")
    args = p.parse_args()
    rows = read_csv(args.sweep_csv, ("variant", "lr"))
    curves_path = args.curves or args.sweep_csv[:-4] + "_curves.csv"
    curves = {}
    if os.path.exists(curves_path):
        for r in read_csv(curves_path, ("split", "variant", "lr", "step", "loss")):
            if r["split"] == "train":
                try:
                    curves.setdefault((r["variant"], r["lr"]), []).append((int(r["step"]), float(r["loss"])))
                except ValueError:
                    sys.exit("error: %s is not a sweep's curves CSV: step %r, loss %r" % (curves_path, r["step"],
                                                                                          r["loss"]))
    unigram = args.unigram
    if unigram is None:
        os.chdir(common.REPO)
        common.ensure_file("data/kjv/kjv_train.bin", "prepare it with data/prepare.py kjv, or pass --unigram")
        unigram = common.unigram_loss("data/kjv/kjv_train.bin", "data/kjv/kjv_val.bin")
    table, counted, unknown = [], 0, 0
    for r in rows:
        train = curves.get((r["variant"], r["lr"]))
        if train is None and r.get("run_dir") and os.path.exists(os.path.join(r["run_dir"], "main.log")):
            train = common.read_log(os.path.join(r["run_dir"], "main.log"))["train"]
        old = "%s @%s" % (r.get("max_loss_rise", "?"), r.get("max_rise_step", "?"))
        if train is None:
            # the old rise was the largest over every step, so it bounds the new one (a subset of the steps)
            if common.number(r.get("max_loss_rise", "inf")) <= args.spike:
                verdict = "none (no curve, but the old largest rise bounds the new one)"
            else:
                unknown += 1
                verdict = "no curve: cannot be recounted (old: spike)"
            table.append([r["variant"], r["lr"], old, "-", "-", verdict])
            continue
        start = common.spike_start(train, unigram)
        rise, at, spiked = common.spike(train, unigram, args.spike)
        counted += int(spiked)
        table.append([r["variant"], r["lr"], old, "-" if start is None else start,
                      "%.3f @%s" % (rise, at) if at is not None else "%.3f" % rise, "spike" if spiked else "none"])
    print("Loss spikes of %s under the current definition (printed by experiments/spike_recount.py %s)\n"
          % (args.sweep_csv, args.sweep_csv))
    print(common.markdown_table(["variant", "lr", "old: largest rise from step 0 @ step", "loss reached %.4f at step"
                                 % unigram, "largest rise after that", "verdict (> %.1f nats)" % args.spike], table))
    print("\n%d runs: %d spikes under the current definition, %d old spikes that cannot be recounted (no curve)"
          % (len(rows), counted, unknown))
    return 0


if __name__ == "__main__":
    sys.exit(common.run_main(main))
