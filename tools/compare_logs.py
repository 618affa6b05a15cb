#!/usr/bin/env python3
"""Compares two trainers' main.log files (the same flags, e.g. ./reference_cpu and ./train_gpt2cu): the same lines
with the same fields, the step numbers equal and every other number within TOL relative, the timings (ms:) aside.
Prints the worst relative difference and exits 0 when the logs agree, 1 when not (with the first line that differs),
2 with one error line when it cannot compare them (a file missing, unreadable or not a main.log, a bad TOL).
Used by tools/emulate_gpu.sh (the emulated CUDA trainer against the CPU) and tests/gpu_check.sh (the real one).

    python3 tools/compare_logs.py A/main.log B/main.log TOL
"""
import math
import sys

USAGE = "python3 tools/compare_logs.py A/main.log B/main.log TOL"


def fail(message):
    print("error: " + message, file=sys.stderr)
    sys.exit(2)


def read_lines(path):
    """the lines of a main.log: at least one, each `s:STEP` and then `key:value` fields (an empty file, a run that
    died before its first line, is not one: two of them would agree on nothing)"""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        fail("cannot read '%s' (%s)" % (path, e.strerror or e))
    try:
        lines = data.decode("utf-8").strip().split("\n")
    except UnicodeDecodeError:
        fail("'%s' is not a main.log (not text)" % path)
    if lines == [""]:
        fail("'%s' is empty, not a main.log (a run that stopped before its first step?)" % path)
    for line in lines:
        fields = line.split()
        if not fields or not fields[0].startswith("s:") or not fields[0][2:].isdigit() or \
                not all(":" in f for f in fields[1:]) or len(fields) < 2:
            fail("'%s' is not a main.log: line '%s' is not 's:STEP key:value ...'" % (path, line[:80]))
    return lines


def number(text, path, line):
    try:
        return float(text)
    except ValueError:
        fail("'%s' is not a main.log: '%s' in line '%s' is not a number" % (path, text, line))


def compare(lines_a, lines_b, tol, paths=("A", "B")):
    worst = 0.0
    if len(lines_a) != len(lines_b) or not lines_a:
        return False, worst, "the logs have %d and %d lines" % (len(lines_a), len(lines_b))
    for la, lb in zip(lines_a, lines_b):
        fa, fb = la.split(), lb.split()
        if len(fa) != len(fb):
            return False, worst, "differs: %s | %s" % (la, lb)
        for x, y in zip(fa, fb):
            kx, _, vx = x.partition(":")
            ky, _, vy = y.partition(":")
            if kx != ky:
                return False, worst, "differs: %s | %s" % (la, lb)
            if kx == "ms":
                continue
            if kx == "s":
                if vx != vy:
                    return False, worst, "differs: %s | %s" % (la, lb)
                continue
            a, b = number(vx, paths[0], la), number(vy, paths[1], lb)
            worst = max(worst, abs(a - b) / (abs(a) + 1e-30))
            if not abs(a - b) <= tol * abs(a) + 1e-9:  # also false for NaN
                return False, worst, "differs: %s | %s" % (la, lb)
    return True, worst, ""


def main():
    if len(sys.argv) != 4:
        fail("expects two logs and a tolerance: " + USAGE)
    a, b = (read_lines(p) for p in sys.argv[1:3])
    try:
        tol = float(sys.argv[3])
    except ValueError:
        tol = -1.0
    if not (tol >= 0 and math.isfinite(tol)):
        fail("TOL must be a number >= 0, got '%s' (%s)" % (sys.argv[3], USAGE))
    ok, worst, why = compare(a, b, tol, sys.argv[1:3])
    if why:
        print(why)
    print("worst relative difference %.2e (bound %.0e) over %d lines" % (worst, tol, len(a)))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        fail("interrupted")
