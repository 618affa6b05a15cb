#!/usr/bin/env python3
"""Plots one or several runs from their main.log files, side by side: train and validation loss, learning rate and
gradient norm against the step (matplotlib), for a reader who would rather look than read.

    python3 tools/plot_runs.py RUN_DIR [RUN_DIR ...] -o FILE.png [--title TEXT] [--smooth N]

A RUN_DIR is a trainer's -o (or its main.log itself); each run is named by its directory in the legend. The train
loss is drawn as logged and, with --smooth N (default 1: none), as a moving average over N steps. main.log's lines
are "s:N trl:LOSS norm:NORM lr:LR ms:MS" (step N, as the terminal numbers it), "s:N tel:LOSS" (validation after N
steps) and "s:N acc:ACCURACY". Needs matplotlib (Debian: python3-matplotlib). The image's format is -o's suffix
(.png, .pdf, .svg, ...); what the tool cannot read or write is one error line, and it leaves no partial file.
"""
import argparse
import os
import sys


def fail(message):
    """One line on stderr and exit status 1, like the trainers: never a traceback."""
    sys.exit("error: " + message)


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit status 1."""

    def error(self, message):
        fail("%s (see %s --help)" % (message, self.prog))


def read_log(path):
    """main.log -> {"trl": [(step, value)], "tel": [...], "acc": [...], "norm": [...], "lr": [...]}"""
    series = {k: [] for k in ("trl", "tel", "acc", "norm", "lr")}
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        fail("cannot read '%s' (%s)" % (path, e.strerror or e))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        fail("'%s' is not a main.log (not text)" % path)
    for n, line in enumerate(text.splitlines(), 1):
        fields = dict(kv.split(":", 1) for kv in line.split() if ":" in kv)
        if "s" not in fields:
            continue
        try:
            step = int(fields["s"])
            for key in series:
                if key in fields:
                    series[key].append((step, float(fields[key])))
        except ValueError:
            fail("%s:%d is not a main.log line: %r" % (path, n, line.strip()))
    return series


def check_output(path):
    """-o must name a file in a directory that exists; returns its image format (the suffix, checked later)."""
    if os.path.isdir(path):
        fail("-o '%s' is a directory: give a file in it, e.g. %s" % (path, os.path.join(path, "runs.png")))
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        fail("-o '%s': there is no directory '%s'" % (path, folder))
    return os.path.splitext(path)[1][1:].lower()


def save(fig, path, fmt):
    """The figure under a temporary name, renamed once whole: a failed write leaves no file."""
    tmp = "%s.tmp.%d" % (path, os.getpid())
    try:
        fig.savefig(tmp, dpi=110, format=fmt)
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.remove(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            fail("cannot write '%s' (%s)" % (path, e.strerror or e))
        raise


def moving_average(values, n):
    if n <= 1:
        return values
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= n:
            total -= values[i - n]
        out.append(total / min(i + 1, n))
    return out


def main():
    ap = Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", metavar="RUN_DIR")
    ap.add_argument("-o", "--output", required=True, metavar="FILE.png")
    ap.add_argument("--title", default="")
    ap.add_argument("--smooth", type=int, default=1, metavar="N")
    args = ap.parse_args()
    if args.smooth < 1:
        fail("--smooth must be at least 1")
    fmt = check_output(args.output)
    logs = []
    for run in args.runs:
        path = os.path.join(run, "main.log") if os.path.isdir(run) else run
        if not os.path.isfile(path):
            fail("no main.log at '%s'" % path)
        name = os.path.basename(os.path.dirname(os.path.abspath(path)))
        logs.append((name, read_log(path)))
        if not (logs[-1][1]["trl"] or logs[-1][1]["tel"]):  # not drawn as if it were a run
            fail("'%s' holds no losses yet (a run that has not logged a step)" % path)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        fail("matplotlib is not installed (Debian: apt-get install python3-matplotlib)")

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    formats = fig.canvas.get_supported_filetypes()
    if fmt not in formats:
        fail("-o '%s': %s (matplotlib writes %s)" % (args.output, "unknown image suffix '.%s'" % fmt if fmt else
                                                     "no image suffix", ", ".join("." + f for f in sorted(formats))))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (name, log) in enumerate(logs):
        color = colors[i % len(colors)]
        if log["trl"]:
            steps, values = zip(*log["trl"])
            if args.smooth > 1:
                axes[0].plot(steps, values, color=color, alpha=0.25, linewidth=0.8)
                axes[0].plot(steps, moving_average(list(values), args.smooth), color=color, label=name + " train")
            else:
                axes[0].plot(steps, values, color=color, label=name + " train")
        if log["tel"]:
            steps, values = zip(*log["tel"])
            axes[0].plot(steps, values, color=color, linestyle="--", marker="o", markersize=3, label=name + " val")
        for ax, key in ((axes[1], "lr"), (axes[2], "norm")):
            if log[key]:
                steps, values = zip(*log[key])
                ax.plot(steps, values, color=color, label=name)
    axes[0].set_title("loss (nats a token)")
    axes[1].set_title("learning rate")
    axes[2].set_title("gradient norm (before clipping)")
    axes[2].set_yscale("log")
    for ax in axes:
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout()
    save(fig, args.output, fmt)
    print("wrote %s (%d run%s)" % (args.output, len(logs), "s" * (len(logs) > 1)))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        fail("interrupted")  # (save() removes a half-written image)
