#!/usr/bin/env python3
"""Compares two trainers' main.log files (the same flags, e.g. ./reference_cpu and ./train_gpt2cu): the same lines
with the same fields, the step numbers equal and every other number within TOL relative, the timings (ms:) aside.
Prints the worst relative difference and exits 0 when the logs agree, 1 when not (with the first line that differs).
Used by tools/emulate_gpu.sh (the emulated CUDA trainer against the CPU) and tests/gpu_check.sh (the real one).

    python3 tools/compare_logs.py A/main.log B/main.log TOL
"""
import sys


def compare(lines_a, lines_b, tol):
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
            a, b = float(vx), float(vy)
            worst = max(worst, abs(a - b) / (abs(a) + 1e-30))
            if not abs(a - b) <= tol * abs(a) + 1e-9:  # also false for NaN
                return False, worst, "differs: %s | %s" % (la, lb)
    return True, worst, ""


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    a, b = (open(p).read().strip().split("\n") for p in sys.argv[1:3])
    tol = float(sys.argv[3])
    ok, worst, why = compare(a, b, tol)
    if why:
        print(why)
    print("worst relative difference %.2e (bound %.0e) over %d lines" % (worst, tol, len(a)))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
