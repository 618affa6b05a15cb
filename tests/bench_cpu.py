#!/usr/bin/env python3
"""tests/bench_cpu.py (make bench-cpu): the CPU trainer's speed in one table, beside llm.c's train_gpt2.c and
beside the machine's peak, all measured in the same run in interleaved rounds. A measurement, not a test: nothing
here asserts a time.

    python3 tests/bench_cpu.py [--rounds 3] [--steps 5] [--parts llmc,d12,science,gemm] [--quick]
                               [--layouts pre,post,siamese,hybrid,siamese-hybrid,hc] [--depths 8,16]
                               [--threads 1,2] [--d12-threads 2] [--base PATH]
    make bench-cpu [BENCH_CPU_ARGS="--quick"]

What runs, in each round (default 3), in this order:
  - the FMA loop: the measured peak at each thread count (below)
  - llm.c's train_gpt2.c (part llmc), GPT-2 small as it hard-codes it: B=4, T=64, its own 40-step loop cut short
    after --steps timed steps. Its source: $LLMC, a checkout of https://github.com/karpathy/llm.c or a bare git
    directory of it (train_gpt2.c, llmc/ and the Makefile are taken from its HEAD); unset, ../llm.c beside this
    repository, and when that is absent llm.c is skipped with one line in the footer. Nothing of llm.c is kept in
    this repository. It is built as its own Makefile builds it (make train_gpt2: cc -Ofast -march=native -fopenmp
    -DOMP ...), in a temporary directory that holds the files it hard-codes: gpt2_124M.bin, a random GPT-2 small
    (d12, V=50257, maxT 1024) written by ./reference_cpu itself (-e d12 -x 1 -l 0 -o DIR: one step at learning
    rate 0, so the file holds the trainer's --seed 1337 initialization), and the random shards below as
    dev/data/tinyshakespeare/tiny_shakespeare_{train,val}.bin (no gpt2_tokenizer.bin: it warns and goes on).
  - ./reference_cpu at d12 (part d12): -e d12 --norm NAME -b 4 -t 64 on the same random shards (vocabulary 50257;
    the same seed, so Pre-Norm starts from the very weights llm.c loads), at --d12-threads (default 2)
  - ./reference_cpu at the science shapes (part science), those of experiments/depth_scaling.py's CPU preset:
    --layers N --channels 64 --heads 4 --max-seq-len 64 -b 16 -t 64 on random bytes (vocabulary 256), N in
    --depths (default 8 and 16), at --threads (default 1, as the campaigns run, and 2)
  - after the rounds (part gemm), the matrix products alone: tests/bench_gemm times host/gemm.h at the step's
    shapes (each layer's forward and its backward's two products, d12 and C64), beside the FMA loop run just before
  - with --base PATH (or BENCH_CPU_BASE=PATH), another build of the trainer right after each of this build's runs,
    labeled "base", so that two versions are compared under the same conditions.

Time: each run's ms/step as the trainer prints it (llm.c: its "took ... ms"; both time the data loading, forward,
backward and update of a step). The first step of a run is not timed (llm.c's step 0, our step 1: they pay for the
first-touch page faults of the gradients and the optimizer state), so a run takes --steps + 1 steps. The table's
ms/step is the median of all timed steps of all rounds; "range" is the lowest and highest of the rounds' medians.

FLOPs, one rule for every program and layout: the matrix products of the GPT-2 shape, 2 FLOPs a multiply-add,
counted exactly. Per layer forward 2*N*C*(3C + C + 4C + 4C) = 24*N*C^2 for N = B*T tokens (qkv, attention
projection, fc, fc projection), plus attention's two products over the causal half that is computed (key t' <= t):
2 * 2*B*C*T*(T+1)/2 = 2*B*C*T*(T+1); the head 2*N*C*Vp (the padded vocabulary, as both programs compute it); the
backward pass twice the forward (the gradients of the inputs and of the weights). A step is 3x the forward. What a
layout adds (its LayerNorms, hc's mixing) is not counted, so it shows as a lower GFLOP/s at the same shape.

Peak, two ways, both in the footer; "% peak" is of the measured one at the row's thread count:
  - nominal: threads (at most the physical cores) x 2 FMA units a core x floats a vector (8 with AVX2, 16 with
    AVX-512; 8 for AMD Zen 4, which executes 512-bit FMAs as two 256-bit halves) x 2 FLOPs x the clock (lscpu's
    "CPU max MHz" where it has one, else /proc/cpuinfo's "cpu MHz"; the footer says which)
  - measured: a small C loop of 12 independent vector FMA chains, one per thread, compiled here with
    cc -O2 -march=native -fopenmp; in each round the best of 3 short runs, and the median over the rounds.

Errors (bad flags, a run that failed) are one "error: ..." line on stderr and exit status 1. Progress goes to
stderr only when it is a terminal.
"""
import argparse
import os
import random
import re
import shlex
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import textwrap
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYOUTS = ["pre", "post", "siamese", "hybrid", "siamese-hybrid", "hc"]
LLMC_MAX_STEPS = 19  # llm.c's loop samples at step 20 (slowly): its runs stop before
SCIENCE = dict(channels=64, heads=4, B=16, T=64, vocab=256)  # experiments/depth_scaling.py's CPU preset
D12 = dict(layers=12, channels=768, heads=12, B=4, T=64, vocab=50257)
SEED = 1337


class BenchError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit status 1, as the project's scripts do
        raise BenchError(message)


def csv_ints(text, flag, low, high=None):
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise BenchError("%s expects whole numbers separated by commas, got '%s'" % (flag, text))
    if not values or any(v < low or (high is not None and v > high) for v in values):
        raise BenchError("%s expects numbers from %d%s, got '%s'" % (flag, low, "" if high is None else
                                                                     " to %d" % high, text))
    return values


def parse_args(argv):
    p = Parser(description="CPU training speed: llm.c, this trainer's layouts, the machine's peak; one table.",
               allow_abbrev=False)
    p.add_argument("--rounds", default="3", help="interleaved rounds (default 3)")
    p.add_argument("--steps", default="5", help="timed steps a run, after its untimed first (default 5; at most "
                   "%d with llm.c, which samples at step 20)" % LLMC_MAX_STEPS)
    p.add_argument("--parts", default="llmc,d12,science,gemm",
                   help="what to run: llmc, d12, science, gemm (the products alone; default all)")
    p.add_argument("--layouts", default=",".join(LAYOUTS), help="this trainer's layouts (default %(default)s)")
    p.add_argument("--depths", default="8,16", help="science shapes' layers (default %(default)s)")
    p.add_argument("--threads", default="1,2", help="science shapes' thread counts (default %(default)s)")
    p.add_argument("--d12-threads", default="2", help="thread counts of llm.c and d12 (default %(default)s)")
    p.add_argument("--base", default=os.environ.get("BENCH_CPU_BASE", ""),
                   help="another build of reference_cpu, run beside this one as 'base' (default $BENCH_CPU_BASE)")
    p.add_argument("--quick", action="store_true",
                   help="a short check: 1 round, 2 timed steps, layouts pre and siamese, depth 8 (flags given "
                        "explicitly still win)")
    given = {a.split("=")[0] for a in argv if a.startswith("--")}
    a = p.parse_args(argv)
    if a.quick:
        for flag, value in (("rounds", "1"), ("steps", "2"), ("layouts", "pre,siamese"), ("depths", "8")):
            if "--" + flag not in given:
                setattr(a, flag, value)
    parts = [s.strip() for s in a.parts.split(",") if s.strip()]
    if not parts or any(s not in ("llmc", "d12", "science", "gemm") for s in parts):
        raise BenchError("--parts takes a list of llmc, d12, science and gemm, got '%s'" % a.parts)
    if "gemm" in parts and not ({"d12", "science"} & set(parts)):
        raise BenchError("--parts gemm runs at the thread counts of the trainer's rows: give d12 or science with it")
    a.parts = parts
    if not re.fullmatch(r"[0-9]+", a.rounds) or int(a.rounds) < 1:
        raise BenchError("--rounds must be a whole number of at least 1, got '%s'" % a.rounds)
    a.rounds = int(a.rounds)
    high = LLMC_MAX_STEPS if "llmc" in parts else 100000
    if not re.fullmatch(r"[0-9]+", a.steps) or not 1 <= int(a.steps) <= high:
        raise BenchError("steps must be a whole number of timed steps from 1 to %d%s (the first step of a run is "
                         "never timed), got '%s'" % (high, " with llm.c, which samples at step 20" if
                                                     "llmc" in parts else "", a.steps))
    a.steps = int(a.steps)
    a.layouts = [s.strip() for s in a.layouts.split(",") if s.strip()]
    if not a.layouts:
        raise BenchError("--layouts needs at least one layout")
    a.depths = csv_ints(a.depths, "--depths", 1)
    a.threads = csv_ints(a.threads, "--threads", 1)
    a.d12_threads = csv_ints(a.d12_threads, "--d12-threads", 1)
    if a.base and not (os.path.isfile(a.base) and os.access(a.base, os.X_OK)):
        raise BenchError("--base / BENCH_CPU_BASE: '%s' is not an executable file" % a.base)
    a.base = os.path.abspath(a.base) if a.base else ""
    return a


# ----------------------------------------------------------------------------------------------------------------
# the machine

def cpu_info():
    text = open("/proc/cpuinfo").read()
    first = text.split("\n\n")[0]
    field = lambda name: (re.search(r"^%s\s*:\s*(.*)$" % re.escape(name), first, re.M) or [None, ""])[1].strip()
    flags = set(field("flags").split())
    cores = set()
    for block in text.split("\n\n"):
        phys = re.search(r"^physical id\s*:\s*(\d+)", block, re.M)
        core = re.search(r"^core id\s*:\s*(\d+)", block, re.M)
        if core:
            cores.add((phys.group(1) if phys else "0", core.group(1)))
    info = dict(model=field("model name") or "unknown CPU", vendor=field("vendor_id"), family=field("cpu family"),
                cpu_model=field("model"), flags=flags, cores=len(cores) or os.cpu_count(),
                threads=len(os.sched_getaffinity(0)))
    mhz, source = 0.0, ""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        m = re.search(r"^CPU max MHz:\s*([\d.]+)", out, re.M)
        if m and float(m.group(1)) > 0:
            mhz, source = float(m.group(1)), "lscpu's CPU max MHz"
    except OSError:
        pass
    if not mhz and field("cpu MHz"):
        mhz, source = float(field("cpu MHz")), "/proc/cpuinfo's cpu MHz"
    info["mhz"], info["mhz_source"] = mhz, source
    zen4 = info["vendor"] == "AuthenticAMD" and info["family"] == "25" and "avx512f" in flags
    info["floats"] = 16 if "avx512f" in flags and not zen4 else 8 if "avx2" in flags else 4
    info["floats_why"] = ("AVX-512" if info["floats"] == 16 else "Zen 4: AVX-512 as 2x256-bit, AVX2's rate"
                          if zen4 else "AVX2" if info["floats"] == 8 else "SSE")
    return info


def nominal_peak(info, threads):
    """GFLOP/s: threads (at most the cores) x 2 FMA units x floats a vector x 2 FLOPs x clock"""
    return min(threads, info["cores"]) * 2 * info["floats"] * 2 * info["mhz"] / 1000


FMA_C = r"""
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
// 12 independent FMA chains a thread (enough to cover 2 units x 4-5 cycles of latency), each a = a * b + c
#if defined(__AVX512F__)
typedef __m512 vec;
#define W 16
#define SET _mm512_set1_ps
#define FMA _mm512_fmadd_ps
static float total(vec v) { return _mm512_reduce_add_ps(v); }
#elif defined(__FMA__)
typedef __m256 vec;
#define W 8
#define SET _mm256_set1_ps
#define FMA _mm256_fmadd_ps
static float total(vec v) { float f[8]; _mm256_storeu_ps(f, v); return f[0] + f[7]; }
#else
typedef float vec __attribute__((vector_size(16)));
#define W 4
static vec SET(float x) { vec v = {x, x, x, x}; return v; }
#define FMA(a, b, c) ((a) * (b) + (c))
static float total(vec v) { return v[0] + v[3]; }
#endif
int main(int argc, char** argv) {
    long iters = atol(argv[1]);
    int threads = 1;
    float sink = 0;
    double t0 = omp_get_wtime();
#pragma omp parallel reduction(+ : sink)
    {
#pragma omp single
        threads = omp_get_num_threads();
        vec b = SET(0.9999999f), c = SET(1e-7f);
        vec a0 = SET(0.1f), a1 = SET(0.2f), a2 = SET(0.3f), a3 = SET(0.4f), a4 = SET(0.5f), a5 = SET(0.6f);
        vec a6 = SET(0.7f), a7 = SET(0.8f), a8 = SET(0.9f), a9 = SET(1.1f), a10 = SET(1.2f), a11 = SET(1.3f);
        for (long k = 0; k < iters; k++) {
            a0 = FMA(a0, b, c); a1 = FMA(a1, b, c); a2 = FMA(a2, b, c); a3 = FMA(a3, b, c);
            a4 = FMA(a4, b, c); a5 = FMA(a5, b, c); a6 = FMA(a6, b, c); a7 = FMA(a7, b, c);
            a8 = FMA(a8, b, c); a9 = FMA(a9, b, c); a10 = FMA(a10, b, c); a11 = FMA(a11, b, c);
        }
        sink += total(a0) + total(a1) + total(a2) + total(a3) + total(a4) + total(a5) + total(a6) + total(a7) +
                total(a8) + total(a9) + total(a10) + total(a11);
    }
    double s = omp_get_wtime() - t0;
    printf("%d %d %.6f %.3f %g\n", threads, W, s, 2.0 * W * 12 * (double)iters * threads / s / 1e9, sink);
    return 0;
}
"""


# ----------------------------------------------------------------------------------------------------------------
# programs and files

def sh(cmd, what, cwd=None, env=None):
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        tail = (r.stderr.strip() or r.stdout.strip()).splitlines()[-1:] or ["no output"]
        raise BenchError("%s failed (exit status %d): %s" % (what, r.returncode, tail[0]))
    return r.stdout + r.stderr


def write_shard(path, n, vocab, rng):
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n, vocab, *([0] * 252)))
        f.write(struct.pack("<%dH" % n, *(rng.randrange(vocab) for _ in range(n))))


def find_llmc():
    """(kind, path, why): kind 'checkout' or 'bare', or None with why it is skipped. LLMC set but unusable: error."""
    path = os.environ.get("LLMC", "")
    explicit = bool(path)
    if not explicit:
        path = os.path.join(os.path.dirname(ROOT), "llm.c")
        if not os.path.exists(path):
            return None, path, ("skipped: no ../llm.c beside this repository (set LLMC to a checkout or a bare git "
                                "directory of https://github.com/karpathy/llm.c)")
    if os.path.isfile(os.path.join(path, "train_gpt2.c")) and os.path.isdir(os.path.join(path, "llmc")):
        return "checkout", os.path.abspath(path), ""
    r = subprocess.run(["git", "--git-dir=" + path, "cat-file", "-e", "HEAD:train_gpt2.c"], capture_output=True)
    if r.returncode == 0:
        return "bare", os.path.abspath(path), ""
    why = "'%s' is neither an llm.c checkout (train_gpt2.c and llmc/) nor a git directory with train_gpt2.c" % path
    if explicit:
        raise BenchError("LLMC: " + why)
    return None, path, "skipped: " + why


def prepare_llmc(kind, path, tmp):
    """Copies llm.c's train_gpt2.c, llmc/ and Makefile into tmp/llmc and builds train_gpt2 as its Makefile does."""
    d = os.path.join(tmp, "llmc")
    os.makedirs(d)
    if kind == "bare":
        files = ["train_gpt2.c", "llmc"]
        if subprocess.run(["git", "--git-dir=" + path, "cat-file", "-e", "HEAD:Makefile"],
                          capture_output=True).returncode == 0:
            files.append("Makefile")
        archive = subprocess.run(["git", "--git-dir=" + path, "archive", "HEAD"] + files, capture_output=True)
        if archive.returncode != 0:
            raise BenchError("git archive of llm.c's HEAD in '%s' failed: %s" % (path, archive.stderr.decode().strip()))
        subprocess.run(["tar", "-x", "-C", d], input=archive.stdout, check=True)
        commit = sh(["git", "--git-dir=" + path, "rev-parse", "--short=12", "HEAD"], "git rev-parse").strip()
    else:
        shutil.copy(os.path.join(path, "train_gpt2.c"), d)
        shutil.copytree(os.path.join(path, "llmc"), os.path.join(d, "llmc"))
        if os.path.isfile(os.path.join(path, "Makefile")):
            shutil.copy(os.path.join(path, "Makefile"), d)
        r = subprocess.run(["git", "-C", path, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
        commit = r.stdout.strip() if r.returncode == 0 else "no git commit"
    if os.path.isfile(os.path.join(d, "Makefile")):
        env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}  # not ours
        out = sh(["make", "train_gpt2"], "building llm.c's train_gpt2 (make train_gpt2 in its Makefile)", cwd=d,
                 env=env)
        lines = [l for l in out.splitlines() if "train_gpt2.c" in l and "-o" in l]
        build = lines[-1].strip() if lines else "make train_gpt2"
    else:  # the flags of llm.c's Makefile for train_gpt2 with GCC and OpenMP on Linux
        cmd = [os.environ.get("CC", "cc"), "-Ofast", "-Wno-unused-result", "-Wno-ignored-pragmas",
               "-Wno-unknown-attributes", "-march=native", "-fopenmp", "-DOMP", "train_gpt2.c", "-lm", "-lgomp",
               "-o", "train_gpt2"]
        sh(cmd, "building llm.c's train_gpt2", cwd=d)
        build = " ".join(cmd)
    return d, commit, re.sub(r"\s+", " ", build)


def make_checkpoint(trainer, tmp, train, val, threads):
    """A random GPT-2 small in llm.c's model file: our trainer's --seed 1337 initialization, written after one
    step at learning rate 0 (the trainer writes checkpoints after steps only). Checked to be what llm.c reads."""
    out = os.path.join(tmp, "ckpt")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    sh([trainer, "-i", train, "-j", val, "-e", "d12", "-b", "4", "-t", "64", "-x", "1", "-l", "0", "-v", "0",
        "-s", "0", "--seed", str(SEED), "-o", out], "writing the d12 checkpoint (./reference_cpu -e d12 -x 1 -l 0)",
       env=env)
    model = os.path.join(out, "model_%08d.bin" % 1)
    state = os.path.join(out, "state_%08d.bin" % 1)
    if os.path.exists(state):
        os.remove(state)  # AdamW's moments: twice the model's size, and llm.c needs none
    with open(model, "rb") as f:
        h = struct.unpack("<256i", f.read(1024))
    want = (20240326, 3, 1024, 50257, 12, 12, 768, 50304)
    if h[:8] != want or any(h[8:]):
        raise BenchError("the checkpoint %s is not llm.c's GPT-2 small file: header %s, expected %s and zeros"
                         % (model, list(h[:11]), list(want)))
    return model


# ----------------------------------------------------------------------------------------------------------------
# one run: read its stdout line by line, stop it once it printed its last timed step

OURS_STEP = re.compile(r"^step\s+(\d+)/\d+ \| loss (\S+) \|.*\| ([\d.]+) ms \|")
LLMC_STEP = re.compile(r"^step (\d+): train loss (\S+) \(took ([\d.]+) ms\)")
VAL = re.compile(r"^val loss (\S+)")


def run_steps(label, argv, cwd, threads, pattern, last_step):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    errf = tempfile.TemporaryFile(mode="w+")
    p = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=errf, text=True, bufsize=1)
    steps, val, tail = {}, None, []
    try:
        for line in p.stdout:
            tail = (tail + [line.rstrip()])[-5:]
            m = pattern.match(line)
            if m:
                steps[int(m.group(1))] = (float(m.group(2)), float(m.group(3)))
                if int(m.group(1)) >= last_step:
                    break
            elif val is None and not steps and VAL.match(line):
                val = float(VAL.match(line).group(1))
    finally:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
        rc = p.wait()
    if last_step not in steps:
        errf.seek(0)
        why = [l for l in errf.read().splitlines() + tail if l.strip()][-1:] or ["no output"]
        raise BenchError("%s stopped before its step %d (exit status %d): %s" % (label, last_step, rc, why[0]))
    return steps, val


# ----------------------------------------------------------------------------------------------------------------
# the configurations

def step_flops(L, C, Vp, B, T):
    """the rule in the opening comment: matmul FLOPs of the GPT-2 shape, the backward twice the forward"""
    N = B * T
    forward = L * (24 * N * C * C + 2 * B * C * T * (T + 1)) + 2 * N * C * Vp
    return 3 * forward


class Config:
    def __init__(self, program, layout, shape, threads, argv, cwd, pattern, first, last, tokens, flops, key):
        self.program, self.layout, self.shape, self.threads = program, layout, shape, threads
        self.argv, self.cwd, self.pattern, self.first, self.last = argv, cwd, pattern, first, last
        self.tokens, self.flops, self.key = tokens, flops, key
        self.times, self.round_medians, self.loss, self.val = [], [], None, None
        self.sanity = False  # this run also prints its step-0 validation loss (round 1 only)

    def label(self):
        return "%s %s %s %d thread%s" % (self.program, self.layout, self.shape, self.threads,
                                         "" if self.threads == 1 else "s")


def build_configs(a, trainer, shards, llmc_dir):
    configs = []
    builds = [("this", trainer)] + ([("base", a.base)] if a.base else [])
    x = a.steps + 1  # our step 1 is untimed
    d12_shape, d12_tok = "d12 V50257 b4 t64", D12["B"] * D12["T"]
    d12_flops = step_flops(12, 768, 50304, 4, 64)
    if llmc_dir:
        for t in a.d12_threads:
            configs.append(Config("llm.c", "pre", d12_shape, t, ["stdbuf", "-oL", "./train_gpt2"], llmc_dir,
                                  LLMC_STEP, 1, a.steps, d12_tok, d12_flops, ("d12", t)))
    if "d12" in a.parts:
        for t in a.d12_threads:
            for lay in a.layouts:
                for name, exe in builds:
                    c = Config(name, lay, d12_shape, t,
                               [exe, "-i", shards["d12_train"], "-j", shards["d12_val"], "-e", "d12", "--norm", lay,
                                "-b", "4", "-t", "64", "-x", str(x), "-v", "0", "-s", "0", "--seed", str(SEED)],
                               ROOT, OURS_STEP, 2, x, d12_tok, d12_flops, ("d12", t))
                    if lay == "pre" and name == "this" and t == a.d12_threads[0]:
                        c.sanity = True  # the validation loss at step 0 on llm.c's 5 batches, beside llm.c's
                    configs.append(c)
    if "science" in a.parts:
        s = SCIENCE
        for L in a.depths:
            shape = "L%d C%d V%d b%d t%d" % (L, s["channels"], s["vocab"], s["B"], s["T"])
            flops = step_flops(L, s["channels"], (s["vocab"] + 127) // 128 * 128, s["B"], s["T"])
            for t in a.threads:
                for lay in a.layouts:
                    for name, exe in builds:
                        configs.append(Config(
                            name, lay, shape, t,
                            [exe, "-i", shards["bytes_train"], "-j", shards["bytes_val"], "--norm", lay,
                             "--layers", str(L), "--channels", str(s["channels"]), "--heads", str(s["heads"]),
                             "--max-seq-len", str(s["T"]), "-b", str(s["B"]), "-t", str(s["T"]), "-x", str(x),
                             "-v", "0", "-s", "0", "--seed", str(SEED)],
                            ROOT, OURS_STEP, 2, x, s["B"] * s["T"], flops, (shape, t)))
    return configs


def measure_peak(exe, threads):
    """GFLOP/s of the FMA loop, the best of 3 short runs (a peak: the run least disturbed), and its vector width"""
    best = 0.0
    for _ in range(3):
        out = sh([exe, "100000000"], "the FMA loop", env=dict(os.environ, OMP_NUM_THREADS=str(threads))).split()
        best = max(best, float(out[3]))
    return best, int(out[1])


# ----------------------------------------------------------------------------------------------------------------
# the table

def fmt_table(rows, right):
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for k, r in enumerate(rows):
        cells = [(c.rjust(w) if right[i] else c.ljust(w)) for i, (c, w) in enumerate(zip(r, widths))]
        lines.append("  ".join(cells).rstrip())
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv):
    a = parse_args(argv)
    progress = sys.stderr.isatty()
    say = (lambda msg: print(msg, file=sys.stderr, flush=True)) if progress else (lambda msg: None)
    info = cpu_info()
    load_start = open("/proc/loadavg").read().split()[:3]
    tmp = tempfile.mkdtemp(prefix="bench_cpu.")
    try:
        return bench(a, info, load_start, tmp, say)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def bench(a, info, load_start, tmp, say):
    kind, path, skip_why = find_llmc() if "llmc" in a.parts else (None, "", "not run (--parts)")
    if kind and not shutil.which("stdbuf"):
        raise BenchError("stdbuf (coreutils) is needed to read llm.c's output line by line")
    say("building ./reference_cpu (make -s reference_cpu)")
    sh(["make", "-s", "-C", ROOT, "reference_cpu"], "make reference_cpu")
    trainer = os.path.join(ROOT, "reference_cpu")

    rng = random.Random(0)
    shards = {}
    for name, n, vocab in (("d12_train", 60000, 50257), ("d12_val", 5000, 50257), ("bytes_train", 60000, 256),
                           ("bytes_val", 5000, 256)):
        shards[name] = os.path.join(tmp, name + ".bin")
        write_shard(shards[name], n, vocab, rng)

    fma_src = os.path.join(tmp, "fma.c")
    open(fma_src, "w").write(FMA_C)
    fma = os.path.join(tmp, "fma")
    cc = os.environ.get("CC", "cc")
    sh([cc, "-O2", "-march=native", "-fopenmp", fma_src, "-o", fma], "compiling the FMA loop (%s -O2 "
       "-march=native -fopenmp)" % cc)

    llmc_dir = commit = build = None
    if kind:
        say("building llm.c's train_gpt2 from %s (%s)" % (path, kind))
        llmc_dir, commit, build = prepare_llmc(kind, path, tmp)
        say("writing the d12 checkpoint llm.c starts from (one step of ./reference_cpu -e d12 at lr 0)")
        model = make_checkpoint(trainer, tmp, shards["d12_train"], shards["d12_val"], max(a.d12_threads))
        os.symlink(model, os.path.join(llmc_dir, "gpt2_124M.bin"))
        data = os.path.join(llmc_dir, "dev", "data", "tinyshakespeare")
        os.makedirs(data)
        os.symlink(shards["d12_train"], os.path.join(data, "tiny_shakespeare_train.bin"))
        os.symlink(shards["d12_val"], os.path.join(data, "tiny_shakespeare_val.bin"))

    configs = build_configs(a, trainer, shards, llmc_dir)
    if not configs:
        raise BenchError("nothing to run: --parts %s, and llm.c is %s" % (",".join(a.parts), skip_why))
    thread_counts = sorted({c.threads for c in configs})
    peaks = {t: [] for t in thread_counts}
    width = 0
    t_start = time.time()
    for r in range(a.rounds):
        for t in thread_counts:
            gflops, width = measure_peak(fma, t)
            peaks[t].append(gflops)
            say("round %d/%d: FMA loop, %d thread%s: %.1f GFLOP/s" % (r + 1, a.rounds, t, "s"[:t > 1], gflops))
        for c in configs:
            argv = list(c.argv)
            if c.sanity and r == 0:  # the validation loss at step 0 over llm.c's 5 val batches (-m 5)
                argv[argv.index("-v") + 1] = "1000000"
                argv += ["-m", "5"]
            steps, val = run_steps(c.label(), argv, c.cwd, c.threads, c.pattern, c.last)
            timed = [steps[s][1] for s in range(c.first, c.last + 1)]
            c.times += timed
            c.round_medians.append(statistics.median(timed))
            if r == 0:
                c.loss = steps[c.first - 1][0]
                c.val = val
            say("round %d/%d: %s: %.1f ms/step" % (r + 1, a.rounds, c.label(), c.round_medians[-1]))
    minutes = (time.time() - t_start) / 60

    peak = {t: statistics.median(v) for t, v in peaks.items()}
    pre_ms = {}
    for c in configs:
        if c.layout == "pre" and c.program in ("this", "base"):
            pre_ms[(c.program, c.key)] = statistics.median(c.times)
    has_base = bool(a.base)
    head = ["program", "layout", "shape", "thr", "ms/step", "range", "tok/s", "GFLOP/s", "% peak", "vs pre"]
    head += (["vs this"] if has_base else []) + ["1st loss", "val@0"]
    rows = [head]
    this_ms = {(c.layout, c.shape, c.threads): statistics.median(c.times) for c in configs if c.program == "this"}
    for c in configs:
        ms = statistics.median(c.times)
        gf = c.flops / (ms / 1000) / 1e9
        lo, hi = min(c.round_medians), max(c.round_medians)
        ref = pre_ms.get(("this" if c.program == "llm.c" else c.program, c.key))
        row = [c.program, c.layout, c.shape, str(c.threads), "%.1f" % ms,
               ("%.0f-%.0f" if lo >= 100 else "%.1f-%.1f") % (lo, hi), "%.0f" % (c.tokens / (ms / 1000)),
               "%.1f" % gf, "%.1f" % (100 * gf / peak[c.threads]),
               "%+.1f%%" % (100 * (ms / ref - 1)) if ref and not (c.layout == "pre" and c.program != "llm.c") else "-"]
        if has_base:
            other = this_ms.get((c.layout, c.shape, c.threads))
            row.append("%+.1f%%" % (100 * (ms / other - 1)) if c.program == "base" and other else "")
        row += ["%.4f" % c.loss, "%.6f" % c.val if c.val is not None else ""]
        rows.append(row)
    right = [False, False, False] + [True] * (len(head) - 3)
    print(fmt_table(rows, right))
    write = lambda text: print(textwrap.fill(text, 118, subsequent_indent="    ", break_on_hyphens=False,
                                             break_long_words=False))

    # the matrix products alone, at the step's shapes, against the FMA loop run just before them
    if "gemm" in a.parts:
        say("the matrix products alone (tests/bench_gemm)")
        sh(["make", "-s", "-C", ROOT, "tests/bench_gemm"], "make tests/bench_gemm")
        now = [measure_peak(fma, t)[0] for t in thread_counts]
        print()
        write("The matrix products alone (tests/bench_gemm: host/gemm.h at the shapes of a training step, with the "
              "strides matmul_forward and matmul_backward give them; the best of 7 calls each; %% peak: of the FMA "
              "loop run just before, %s):" % ", ".join("%d thread%s %.1f GFLOP/s" % (t, "s"[:t > 1], g)
                                                       for t, g in zip(thread_counts, now)))
        print(sh([os.path.join(ROOT, "tests", "bench_gemm"), ",".join(str(t) for t in thread_counts),
                  ",".join("%.1f" % g for g in now)], "tests/bench_gemm").rstrip())

    # the footer
    print()
    write("ms/step: the median of the timed steps of %d interleaved round%s (%d a run: llm.c's steps 1..%d, ours "
          "2..%d; the first step pays for first-touch page faults); range: the rounds' own medians; %.1f minutes in "
          "all" % (a.rounds, "s"[:a.rounds > 1], a.steps, a.steps, a.steps + 1, minutes))
    write("vs pre: against Pre-Norm of the same program, shape and threads (llm.c: against this trainer's)"
          + ("; vs this: base against this build at the same row" if has_base else ""))
    write("FLOPs: the GPT-2 shape's matrix products, 2 a multiply-add: per layer forward 24*N*C^2 (N = B*T; qkv, "
          "attention projection, fc, fc projection) + attention 2*B*C*T*(T+1) (the causal half); head 2*N*C*Vp; "
          "backward 2x forward; the same count for every layout (a layout's own extra work shows as a lower rate):")
    shapes = {}
    for c in configs:
        shapes.setdefault(c.shape, c.flops)
    write("    " + "; ".join("%s %.2f GFLOP a step" % (s, f / 1e9) for s, f in shapes.items()))
    write("peak (%% peak: of the measured one): measured, the FMA loop (12 chains of %d-float FMAs a thread, %s "
          "-O2 -march=native -fopenmp; the median over %d round%s of each round's best of 3): %s" %
          (width, cc, a.rounds, "s"[:a.rounds > 1],
           ", ".join("%d thread%s %.1f GFLOP/s (%.1f-%.1f)" % (t, "s"[:t > 1], peak[t], min(peaks[t]),
                                                                max(peaks[t])) for t in thread_counts)))
    write("    nominal, threads x 2 FMA units x %d floats (%s) x 2 FLOPs x %.0f MHz (%s): %s" %
          (info["floats"], info["floats_why"], info["mhz"], info["mhz_source"] or "no clock found",
           ", ".join("%d thread%s %.1f GFLOP/s" % (t, "s"[:t > 1], nominal_peak(info, t)) for t in thread_counts)))
    if info["mhz"] and 1 in peak and peak[1] > 1.02 * nominal_peak(info, 1):
        write("    the measured peak is above the nominal: one core's FMA loop runs as at %.0f MHz, not the %.0f MHz "
              "of %s (a boost clock)" % (peak[1] / (2 * 2 * info["floats"]) * 1000, info["mhz"], info["mhz_source"]))
    load_end = open("/proc/loadavg").read().split()[:3]
    write("machine: %s; avx2 %s, avx512f %s; %d cores, %d threads available; load average %s at the start, %s at "
          "the end" % (info["model"], "yes" if "avx2" in info["flags"] else "no",
                       "yes" if "avx512f" in info["flags"] else "no", info["cores"], info["threads"],
                       " ".join(load_start), " ".join(load_end)))
    if float(load_start[0]) > 0.5:
        autogroup = ""
        try:
            if open("/proc/sys/kernel/sched_autogroup_enabled").read().strip() == "1":
                autogroup = " (with sched_autogroup on, another session's nice does not make it give way)"
        except OSError:
            pass
        write("note: other processes were using the CPU%s: the times are this machine's under that load, "
              "not its best" % autogroup)
    if kind:
        write("llm.c: train_gpt2.c of %s (commit %s), built with: %s; its B=4 T=64 loop from gpt2_124M.bin, "
              "%s's --seed %d initialization of -e d12 written as llm.c's model file" %
              (path, commit, build, "./reference_cpu", SEED))
        llmc_val = next((c.val for c in configs if c.program == "llm.c"), None)
        ours_val = next((c.val for c in configs if c.sanity), None)
        if llmc_val is not None and ours_val is not None:
            write("same start: the step-0 validation loss over the same 5 batches (B=4, T=64) of the val shard, "
                  "llm.c %.6f, this trainer's pre %.6f (difference %.1e); 1st loss: the first step's train loss "
                  "(llm.c's loader shuffles the batches, ours reads them in order)" %
                  (llmc_val, ours_val, abs(llmc_val - ours_val)))
    else:
        write("llm.c: %s" % skip_why)
    write("command: python3 tests/bench_cpu.py %s" % " ".join(shlex.quote(x) for x in sys.argv[1:]))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BenchError as e:
        print("error: %s" % e, file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        sys.exit(1)
