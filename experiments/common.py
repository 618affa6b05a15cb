"""Shared plumbing of the experiment scripts (docs/experiments.md): the layouts and ablations as trainer flags,
running the trainer (cached by its exact command line), reading main.log, recognizing divergence, tables and CSVs.

A run is one trainer command. Its directory, under --runs-dir (default out/experiments/runs), is named after a
hash of the binary's name and the flags, so two scripts that ask for the same run share it, and running a script
again only redoes what changed (--fresh redoes everything). run.json in that directory records the command, its
exit status and how it ended: "ok", "diverged" (the trainer's own `error: ... diverged`, exit 1: a result, not a
failure of the script) or "error" (anything else: the script reports it and exits 1 at the end).
"""
import argparse
import csv
import ctypes
import errno
import hashlib
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLOT_PYTHON = "/usr/bin/python3"  # Debian's, with python3-matplotlib and numpy


PLOTS = True  # False: no matplotlib here and --no-plot given; CSVs and tables only


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit status 1, like every other error of the scripts."""

    def error(self, message):
        sys.exit("error: %s (see %s --help)" % (message, self.prog))


class CampaignError(Exception):
    """A run that did not run (the trainer refused it or failed), or a campaign interrupted part-way: one error line
    (run_main prints it), and no results are written from the runs, which are incomplete."""


def run_main(main):
    """A script's main(), whose failures to read or write (a full disk, a file-size limit, a results folder that
    is a file), runs that did not run, and ^C or kill (SIGTERM) are one error line and exit status 1, not a
    traceback."""
    def interrupted(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, interrupted)  # as ^C: the runs under way are stopped, what is missing is said
    try:
        return main()
    except CampaignError as e:
        print("error: %s" % e, file=sys.stderr)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
    except OSError as e:
        where = " '%s'" % e.filename if getattr(e, "filename", None) else ""
        print("error: cannot write or read%s (%s)" % (where, e.strerror or e), file=sys.stderr)
    return 1


def use_plotting_python():
    """Re-run the calling script under Debian's python3 when this interpreter lacks matplotlib. With --no-plot
    (a machine without matplotlib, e.g. a GPU box), go on without plots."""
    global PLOTS
    try:
        import matplotlib  # noqa: F401
        return
    except Exception:  # ImportError, or a broken installation (a missing matplotlibrc): the same fallback
        pass
    if (os.path.exists(PLOT_PYTHON) and os.path.realpath(sys.executable) != os.path.realpath(PLOT_PYTHON)
            and not os.environ.get("EXPERIMENTS_REEXEC")):
        os.environ["EXPERIMENTS_REEXEC"] = "1"
        os.execv(PLOT_PYTHON, [PLOT_PYTHON, os.path.abspath(sys.argv[0])] + sys.argv[1:])
    if "--no-plot" in sys.argv:
        PLOTS = False
        return
    sys.exit("error: the plots need matplotlib (Debian: apt-get install python3-matplotlib); run the experiments "
             "with %s, or pass --no-plot for the CSVs and tables alone" % PLOT_PYTHON)


# The layouts and the ablations, as trainer flags; colors and line styles for every plot. (The flags of a variant
# are part of its runs' cache key, common.Run: keep them as they are.)
VARIANTS = {
    "pre": ["--norm", "pre"],
    "post": ["--norm", "post"],
    "siamese": ["--norm", "siamese"],
    "siamese-no-depth-scale": ["--norm", "siamese", "--no-depth-scale"],
    "siamese-no-ln-in": ["--norm", "siamese", "--no-ln-in"],
    "hybrid": ["--norm", "hybrid"],
    "hybrid-star": ["--norm", "hybrid-star"],
    "siamese-hybrid": ["--norm", "siamese-hybrid"],
    "siamese-hybrid-no-depth-scale": ["--norm", "siamese-hybrid", "--no-depth-scale"],
    "siamese-hybrid-no-ln-in": ["--norm", "siamese-hybrid", "--no-ln-in"],
    "pre-qkvnorm": ["--norm", "pre-qkvnorm"],
    "peri": ["--norm", "peri"],
    "hc": ["--norm", "hc"],
}
# the earlier learning-rate sweep's variants (section 2; lr_sweep.py's and depth_use.py's default): the layouts and
# ablations of the time, so that their documented commands run what the docs say (25 runs) as the registry grows
SWEEP_VARIANTS = ["pre", "post", "siamese", "siamese-no-depth-scale", "siamese-no-ln-in"]
STYLE = {
    "pre": dict(color="tab:blue", ls="-"),
    "post": dict(color="tab:red", ls="-"),
    "siamese": dict(color="tab:green", ls="-"),
    "siamese-no-depth-scale": dict(color="tab:olive", ls="--"),
    "siamese-no-ln-in": dict(color="tab:purple", ls=":"),
    "hybrid": dict(color="tab:orange", ls="-"),
    "hybrid-star": dict(color="tab:brown", ls="--"),
    "siamese-hybrid": dict(color="tab:cyan", ls="-"),
    "siamese-hybrid-no-depth-scale": dict(color="tab:pink", ls="--"),
    "siamese-hybrid-no-ln-in": dict(color="tab:gray", ls=":"),
    "pre-qkvnorm": dict(color="tab:blue", ls="--"),  # Pre-Norm's color: Pre-Norm with the QKV norm
    "peri": dict(color="black", ls="-."),
    "hc": dict(color="tab:purple", ls="-"),
}


def parse_variants(text):
    names = [v.strip() for v in text.split(",") if v.strip()]
    for v in names:
        if v not in VARIANTS:
            sys.exit("error: unknown variant '%s' (known: %s)" % (v, ", ".join(VARIANTS)))
    return names


def parse_floats(text):
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        sys.exit("error: '%s' is not a comma-separated list of numbers" % text)


def number(text, default=math.inf):
    """A number from a CSV cell, `default` if it is none ('', '?', 'nan' text)."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return default


def fmt_lr(lr):
    return "%g" % lr


class Run:
    """One trainer command: label (for humans), binary, flags (without -o)."""

    def __init__(self, label, binary, flags, runs_dir, **meta):
        self.label, self.binary, self.flags, self.meta = label, binary, list(flags), meta
        key = hashlib.sha1(json.dumps([os.path.basename(binary)] + self.flags).encode()).hexdigest()[:10]
        self.dir = os.path.join(runs_dir, "%s-%s" % (label, key))
        self.argv = [binary] + self.flags + ["-o", self.dir]
        self.status, self.rc, self.error, self.seconds, self.diverge_step = None, None, "", 0.0, None
        self.cpu_seconds = None  # user + system CPU seconds of the trainer (None: an older record without it)
        self.log = None
        self.proc = None  # the trainer's process while it runs

    @property
    def record(self):
        return os.path.join(self.dir, "run.json")

    def cached(self):
        try:
            with open(self.record) as f:
                r = json.load(f)
        except (OSError, ValueError):
            return False
        if r.get("argv") != self.argv or r.get("status") not in ("ok", "diverged"):
            return False
        self.status, self.rc, self.error = r["status"], r["rc"], r.get("error", "")
        self.seconds, self.diverge_step = r.get("seconds", 0.0), r.get("diverge_step")
        self.cpu_seconds = r.get("cpu_seconds")
        return True

    def execute(self, threads):
        shutil.rmtree(self.dir, ignore_errors=True)  # never mix with an older run's checkpoints or log
        os.makedirs(self.dir)
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        t0 = time.time()
        with open(os.path.join(self.dir, "stdout.txt"), "w") as out, \
                open(os.path.join(self.dir, "stderr.txt"), "w") as err:
            proc = self.proc = subprocess.Popen(self.argv, stdout=out, stderr=err, env=env, cwd=REPO,
                                                preexec_fn=die_with_parent)
            _, status, usage = os.wait4(proc.pid, 0)  # this child's own CPU time, whatever else runs beside it
            proc.returncode = self.rc = os.waitstatus_to_exitcode(status)
        self.seconds = time.time() - t0
        self.cpu_seconds = usage.ru_utime + usage.ru_stime
        with open(os.path.join(self.dir, "stderr.txt")) as f:
            lines = [l.strip() for l in f if l.strip()]
        self.error = lines[-1] if lines else ""
        if self.rc == 0:
            self.status = "ok"
        elif self.rc == 1 and "diverged" in self.error:
            self.status = "diverged"
            m = re.search(r"at step (\d+)", self.error)
            self.diverge_step = int(m.group(1)) if m else None
        else:
            self.status = "error"
        with open(self.record, "w") as f:
            json.dump({"argv": self.argv, "rc": self.rc, "status": self.status, "error": self.error,
                       "seconds": round(self.seconds, 1), "cpu_seconds": round(self.cpu_seconds, 1),
                       "diverge_step": self.diverge_step}, f, indent=1)

    def load_log(self):
        self.log = read_log(os.path.join(self.dir, "main.log"))
        return self.log

    def final_checkpoint(self, steps):
        return os.path.join(self.dir, "model_%08d.bin" % steps)

    def outcome(self, unigram, spike_nats=None):
        """(category, step): how the run ended (common.outcome, from its main.log; load_log first)."""
        return outcome(self.log["train"], self.log["val"], unigram,
                       self.diverge_step if self.status == "diverged" else None, spike_nats)

    def progress(self):
        """'step N/STEPS' of a run under way, from the last line of its main.log"""
        steps = self.flags[self.flags.index("-x") + 1] if "-x" in self.flags[:-1] else "?"
        try:
            with open(os.path.join(self.dir, "main.log"), "rb") as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - 200))
                last = f.read().decode("utf-8", "replace").strip().split("\n")[-1]
        except OSError:
            last = ""
        m = re.match(r"s:(\d+) ", last)
        return "step %s/%s" % (m.group(1) if m else "0", steps)

    def describe(self):
        if self.status == "diverged":
            return "diverged at step %s" % self.diverge_step
        if self.status == "error":
            return "ERROR (exit %s): %s" % (self.rc, self.error)
        return "ok"


def die_with_parent():
    """In each trainer before it starts: Linux sends it SIGTERM when the runner that started it dies, however it
    dies (kill -9 included), so that no trainer is left running as an orphan (the trainer's SIGTERM handler removes
    its half-written file)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


DRY_RUN = False  # --dry-run: print the trainer commands, run nothing
HEARTBEAT = float(os.environ.get("EXPERIMENTS_HEARTBEAT", 300))  # seconds between run_all's progress lines


def run_all(runs, jobs=2, threads=1, fresh=False, what="runs"):
    """Runs what is not cached, `jobs` at a time with OMP_NUM_THREADS=threads each; prints one line per run.

    A run that did not run is never a result: at the first run that fails (the trainer refused it, or it stopped
    with an error other than a non-finite loss), no new run starts, the runs under way finish (they stay cached),
    and CampaignError names that run and its own error, so that the script writes nothing. ^C likewise says which
    runs are not complete."""
    if DRY_RUN:
        for r in runs:
            print(" ".join(shlex.quote(a) for a in r.argv))
        sys.exit(0)
    todo = [r for r in runs if fresh or not r.cached()]
    print("%s: %d of %d to run (%d cached), %d at a time, %d thread(s) each"
          % (what, len(todo), len(runs), len(runs) - len(todo), jobs, threads), flush=True)
    lock, done, failed, stop = threading.Lock(), [0], [], [False]
    t0 = time.time()

    def one(r):
        with lock:
            if failed or stop[0]:
                return
        r.execute(threads)
        with lock:
            done[0] += 1
            print("  [%d/%d] %-45s %-28s %6.1f s" % (done[0], len(todo), r.label, r.describe(), r.seconds),
                  flush=True)
            if r.status == "error" and not failed and not stop[0]:
                failed.append(r)
                if done[0] < len(todo):
                    print("%s: stopping after the failed run %s (the runs under way finish and are kept)"
                          % (what, r.label), flush=True)

    def heartbeat(stopped):  # every HEARTBEAT seconds: how far the runs under way are (a run can take hours)
        while not stopped.wait(HEARTBEAT):
            with lock:
                going = [r for r in todo if r.proc is not None and r.proc.returncode is None]
                t = time.time() - t0
                print("  ... %s, %s: %d of %d done; under way: %s" % (
                    what, "%.0f s" % t if t < 120 else "%.0f min" % (t / 60), done[0], len(todo),
                    ", ".join("%s (%s)" % (r.label, r.progress()) for r in going) or "none"), flush=True)

    stopped = threading.Event()
    threading.Thread(target=heartbeat, args=(stopped,), daemon=True).start()
    pool = ThreadPoolExecutor(max_workers=max(1, jobs))
    try:
        list(pool.map(one, todo))
    except KeyboardInterrupt:
        with lock:
            stop[0] = True
            for r in todo:  # the trainers under way (a ^C at the terminal has stopped them already)
                if r.proc is not None and r.proc.returncode is None:
                    r.proc.terminate()
        pool.shutdown(wait=True, cancel_futures=True)
        stopped.set()
        missing = [r for r in runs if r.status not in ("ok", "diverged")]
        raise CampaignError("interrupted: %d of %d runs of the %s are not complete (%s%s); no results written"
                            % (len(missing), len(runs), what, ", ".join(r.label for r in missing[:3]),
                               ", ..." if len(missing) > 3 else "")) from None
    pool.shutdown()
    stopped.set()
    if failed:
        r = failed[0]
        not_run = sum(1 for x in runs if x.status is None)
        message = r.error[len("error: "):] if r.error.startswith("error: ") else r.error or "no message"
        raise CampaignError("run %s failed (exit status %s): %s (%s); %sno results written"
                            % (r.label, r.rc, message, os.path.join(r.dir, "stderr.txt"),
                               "%d of %d runs not started, " % (not_run, len(runs)) if not_run else ""))
    if todo:
        print("%s: done in %.0f s wall" % (what, time.time() - t0), flush=True)
    for r in runs:
        r.load_log()
    return runs


def report_errors(runs):
    """One error line per failed run; the exit status of a script: 1 if any run failed. (run_all stops a script
    at its first failed run, so that a script reaching this has none; kept for the scripts that still call it.)"""
    errors = [r for r in runs if r.status == "error"]
    for r in errors:
        print("error: run %s failed: %s (see %s)" % (r.label, r.error, r.dir), file=sys.stderr)
    return 1 if errors else 0


def read_log(path):
    """main.log -> {'train': [(step, loss)], 'val': [(step, loss)], 'acc': [(step, acc)], 'norm': [...]}."""
    log = {"train": [], "val": [], "acc": [], "norm": []}
    try:
        f = open(path)
    except OSError:
        return log
    with f:
        for line in f:
            fields = dict(kv.split(":", 1) for kv in line.split() if ":" in kv)
            if "s" not in fields:
                continue
            step = int(fields["s"])
            for key, name in (("trl", "train"), ("tel", "val"), ("acc", "acc"), ("norm", "norm")):
                if key in fields:
                    log[name].append((step, float(fields[key])))
    return log


def max_rise(train, after_step):
    """The largest jump of the train loss above its running minimum, after `after_step` (a loss spike measure):
    max over t of loss[t] - min(loss[s], s < t), counting only t > after_step. 0 when there is nothing to compare."""
    best, lo, at = 0.0, math.inf, None
    for step, loss in train:
        if not math.isfinite(loss):
            continue
        if step > after_step and loss - lo > best:
            best, at = loss - lo, step
        lo = min(lo, loss)
    return best, at


def spike_start(train, baseline):
    """The first step at which the train loss is at or below `baseline` (the unigram loss): the end of the initial
    noise. Before it the model is still learning the token frequencies from a random start, and the loss swings (by
    nats at the first steps of a large model); a rise there is not an instability. None if the loss never gets there
    (a stuck or diverged run: then no spike is counted)."""
    for step, loss in train:
        if math.isfinite(loss) and loss <= baseline:
            return step
    return None


def spike(train, baseline, threshold):
    """The spike measure of docs/experiments.md: (rise, step) of the largest rise of the train loss above its
    running minimum after spike_start, and whether it exceeds `threshold` nats. (0.0, None, False) if the loss never
    reached the baseline."""
    start = spike_start(train, baseline)
    if start is None:
        return 0.0, None, False
    rise, at = max_rise(train, start)
    return rise, at, rise > threshold


# ------------------------------------------------------------------------------------------------------------------
# How a run ended: the outcome categories (docs/experiments.md, "How a run ends"), with their thresholds, defined
# here once for every script and table.
#
#   non-finite  the trainer stopped on a non-finite loss (its `error: ... diverged at step N`, Run.status
#               "diverged"), or a logged loss is not a number. Step: where.
#   collapsed   a loss spike (a rise of the train loss by more than SPIKE_NATS above its running minimum, after the
#               loss first came down to the unigram baseline: spike()) that the run does not recover from: after it
#               the loss never comes back (the mean of RECOVERY_WINDOW consecutive train losses) to within
#               RECOVERY_NATS of the running minimum it had before the spike, or the run ends stalled. Step: the
#               first such spike.
#   stalled     no spike, and the final val loss is not below the unigram baseline - STALL_MARGIN: it learned
#               nothing from context (the CSVs' `stuck` column, which counts the collapsed runs as well). Step: none.
#   trained     otherwise (it may have spiked and recovered: the spike columns say so). Step: none.
#
# Why these numbers (KJV bytes, 64 channels, 200 steps: the 158 runs of docs/results/depth_scaling*.csv and
# hybrid_comparison*.csv):
#   SPIKE_NATS 1.0       without an instability, the largest rise above the running minimum after the loss reached
#                        the unigram level is 0.21-0.68 nats (the batch-to-batch noise of the train loss: 151 runs);
#                        the instabilities rise 1.04-9.39 nats. 1 nat lies between the two.
#   RECOVERY_NATS 0.5    the mean of 10 consecutive train losses of a run that has stopped improving sits 0.07-0.09
#                        nats above its running minimum (the minimum of noisy values lies below their mean: the
#                        curves of docs/results/hybrid_comparison_curves.csv); 0.5 is well above that and half the
#                        smallest spike: a run back where it was before the spike has recovered, one that stays half
#                        a nat or more above it has not.
#   RECOVERY_WINDOW 10   10 batches, as the CSVs' final_train_loss_last10: one low batch is not a recovery.
#   STALL_MARGIN 0.05    the tables' `*` since the first sweep: the final val loss not more than 0.05 below the
#                        unigram baseline (3.1442 for KJV bytes); the runs that train end 0.07-0.81 below it.
# A run that stalls and spikes is collapsed even where it had stalled before the spike, as HybridNorm's failed runs
# of section 5 did (at 8 and 16 layers the loss sat at the unigram level for 30-100 steps before a spike of 8-9
# nats, and came back to that level within 2-10 steps): the category says that the failure was unstable, not quiet.

OUTCOMES = ("trained", "stalled", "collapsed", "non-finite")
SPIKE_NATS = 1.0
RECOVERY_NATS = 0.5
RECOVERY_WINDOW = 10
STALL_MARGIN = 0.05


def spike_onsets(train, baseline, threshold=SPIKE_NATS):
    """The spikes of a train-loss curve, in order: [(step, rise, running minimum before it)] for the first step of
    each excursion of the loss above its running minimum + threshold, after spike_start (the steps of one excursion
    are one spike)."""
    start = spike_start(train, baseline)
    if start is None:
        return []
    out, lo, inside = [], math.inf, False
    for step, loss in train:
        if not math.isfinite(loss):
            continue
        above = step > start and loss - lo > threshold
        if above and not inside:
            out.append((step, loss - lo, lo))
        inside = above
        lo = min(lo, loss)
    return out


def outcome(train, val, unigram, diverge_step=None, spike_nats=None):
    """How a run ended: (category, step), category one of OUTCOMES (see above), step the step where it happened
    (None for trained and stalled). train, val: [(step, loss)] as read_log gives them; unigram: the unigram
    baseline of the data (unigram_loss); diverge_step: the step of the trainer's `diverged` (Run.diverge_step) if it
    stopped there; spike_nats: the spike threshold, if not SPIKE_NATS (a script's --spike)."""
    if diverge_step is not None:
        return "non-finite", diverge_step
    for step, loss in sorted(train + val):
        if not math.isfinite(loss):
            return "non-finite", step
    end = [loss for _, loss in train[-RECOVERY_WINDOW:]]
    final = val[-1][1] if val else (sum(end) / len(end) if end else math.nan)
    stalled = not final < unigram - STALL_MARGIN
    for step, _, before in spike_onsets(train, unigram, SPIKE_NATS if spike_nats is None else spike_nats):
        after = [loss for s, loss in train if s > step]
        back = any(sum(after[i:i + RECOVERY_WINDOW]) / RECOVERY_WINDOW <= before + RECOVERY_NATS
                   for i in range(len(after) - RECOVERY_WINDOW + 1))
        if stalled or not back:
            return "collapsed", step
    return ("stalled" if stalled else "trained"), None


def smooth(values, window):
    out, acc = [], []
    for v in values:
        acc.append(v)
        if len(acc) > window:
            acc.pop(0)
        out.append(sum(acc) / len(acc))
    return out


def read_tokens(path):
    import array
    tokens = array.array("H")
    with open(path, "rb") as f:
        f.seek(1024)
        tokens.frombytes(f.read())
    if sys.byteorder == "big":
        tokens.byteswap()
    return tokens


def unigram_loss(train_shard, val_shard):
    """The val loss of the best context-free model: cross-entropy of val tokens under train's token frequencies
    (add-one smoothed). A model whose val loss stays at this level has learned nothing from context."""
    from collections import Counter
    train, val = Counter(read_tokens(train_shard)), Counter(read_tokens(val_shard))
    V = max(max(train), max(val)) + 1
    n = sum(train.values())
    return -sum(c * math.log((train.get(t, 0) + 1.0) / (n + V)) for t, c in val.items()) / sum(val.values())


def write_whole(path, write):
    """write(name) writes the file under a temporary name, renamed to `path` once complete: a write that fails (a
    full disk, a file-size limit, ^C) leaves neither a partial file nor the temporary one."""
    folder = os.path.dirname(path) or "."
    try:
        os.makedirs(folder, exist_ok=True)
    except FileExistsError:  # a file where a folder of the path should be
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), folder) from None
    tmp = "%s.tmp.%d" % (path, os.getpid())
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.remove(tmp)
        except OSError:
            pass
        if isinstance(e, OSError) and not e.filename:
            raise OSError(e.errno, e.strerror, path) from None
        raise


def write_text(path, text):
    def write(name):
        with open(name, "w") as f:
            f.write(text)
    write_whole(path, write)


def write_csv(path, header, rows):
    def write(name):
        with open(name, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(header)
            w.writerows(rows)
    write_whole(path, write)
    print("wrote %s" % path)


def markdown_table(header, rows):
    lines = ["| " + " | ".join(str(h) for h in header) + " |",
             "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# What is missing from the runs the tables are made of (a report of the runs complete so far, depth_scaling.py
# --no-run): every table written then opens with it, so that none looks complete.
INCOMPLETE = []


def emit_table(path, title, header, rows):
    """Prints a markdown table and keeps the same text in `path` (docs quote it from there, digit for digit)."""
    if INCOMPLETE:
        title = "INCOMPLETE (%s). %s" % ("; ".join(INCOMPLETE), title)
    text = "%s\n\n%s\n" % (title, markdown_table(header, rows))
    print("\n" + text)
    write_text(path, text)
    print("wrote %s" % path)


def save_figure(fig, path):
    fmt = os.path.splitext(path)[1][1:] or "png"
    write_whole(path, lambda name: fig.savefig(name, dpi=110, bbox_inches="tight", format=fmt))
    print("wrote %s" % path)


def ensure_binary(binary, make_target=None):
    """The CPU programs are built with make when missing; the GPU trainer must already be there."""
    if os.path.exists(binary):
        return
    if make_target:
        print("building %s (make %s)" % (binary, make_target), flush=True)
        if subprocess.call(["make", "-s", make_target], cwd=REPO) == 0 and os.path.exists(binary):
            return
    sys.exit("error: %s is missing (build it with: make %s)" % (binary, make_target or os.path.basename(binary)))


def ensure_file(path, hint):
    if not DRY_RUN and not os.path.exists(path):
        sys.exit("error: %s is missing (%s)" % (path, hint))


def common_arguments(p, results_default):
    """Flags every experiment script takes."""
    p.add_argument("--gpu", action="store_true",
                   help="GPT-2 small scale on the CUDA trainer ./train_gpt2cu (same flags as the CPU one)")
    p.add_argument("--jobs", type=int, default=None, help="runs at a time (default: 2 on the CPU, 1 with --gpu)")
    p.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of each CPU run (default 1)")
    p.add_argument("--runs-dir", default="out/experiments/runs", help="where runs live (default %(default)s)")
    p.add_argument("--results", default=results_default,
                   help="prefix of the CSV, PNG and table files (default %(default)s)")
    p.add_argument("--fresh", action="store_true", help="rerun even the runs that are cached")
    p.add_argument("--dry-run", action="store_true", help="print the trainer commands and stop")
    p.add_argument("--no-plot", action="store_true", help="CSVs and tables only, where matplotlib is missing")
    p.add_argument("--seed", type=int, default=1337, help="initialization seed (default 1337)")
    p.add_argument("--steps", type=int, help="training steps (-x)")
    p.add_argument("--train", help="train shard(s) (-i)")
    p.add_argument("--val", help="val shard (-j)")
    p.add_argument("--layers", type=int, help="model depth (--layers)")
    p.add_argument("--channels", type=int, help="model width (--channels)")
    p.add_argument("--heads", type=int, help="attention heads (--heads)")
    p.add_argument("-B", type=int, help="micro-batch (-b)")
    p.add_argument("-T", type=int, help="sequence length (-t)")
    p.add_argument("--total", type=int, help="tokens per step (-d; 0: B*T)")
    p.add_argument("--warmup", type=int, help="warmup steps (-u)")
    p.add_argument("--val-every", type=int, help="validation every this many steps (-v)")
    p.add_argument("--val-batches", type=int, help="validation batches (-m)")
    p.add_argument("--extra", default="", help="more trainer flags, passed as they are (e.g. '-f 1' on the GPU)")


def trainer(args):
    return "./train_gpt2cu" if args.gpu else "./reference_cpu"


def prepare_trainer(args):
    global DRY_RUN
    os.chdir(REPO)
    DRY_RUN = args.dry_run
    if DRY_RUN:
        return
    if args.jobs is None:
        args.jobs = 1 if args.gpu else 2
    if args.gpu:
        ensure_binary("./train_gpt2cu", "train_gpt2cu")
    else:
        ensure_binary("./reference_cpu", "reference_cpu")
