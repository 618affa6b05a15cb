#!/usr/bin/env bash
# CPU trainer speed at GPT-2 small: -e d12 with GPT-2's vocabulary (50257), -b 4 -t 64, for each layout.
# Prints the median ms/step over steps 2..N (step 1 pays for first-touch page faults) and SiameseNorm's and
# Post-Norm's overhead against Pre-Norm. Threads: OMP_NUM_THREADS (default 2). Usage: tests/bench_cpu.sh [steps]
set -eu
cd "$(dirname "$0")/.."
steps=${1:-6}
# a median needs a timed step: step 1 is not one (it pays for first-touch page faults)
[[ $steps =~ ^[0-9]+$ ]] && [ "$steps" -ge 2 ] ||
    { echo "error: steps must be a whole number of at least 2 (step 1 is not timed), got '$steps'" >&2; exit 1; }
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$tmp" <<'PY'
import random, struct, sys
rng = random.Random(0)
for name, n in (("train", 60000), ("val", 5000)):
    with open(f"{sys.argv[1]}/rand_{name}.bin", "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n, 50257, *([0] * 252)))
        f.write(struct.pack(f"<{n}H", *(rng.randrange(50257) for _ in range(n))))
PY
make -s reference_cpu
printf '%-9s %12s %10s %10s\n' layout "ms/step" "tok/s" "vs pre"
pre=""
for norm in pre post siamese; do
    ./reference_cpu -i "$tmp/rand_train.bin" -j "$tmp/rand_val.bin" -e d12 -b 4 -t 64 -x "$steps" -v 0 -s 0 \
        --norm $norm > "$tmp/$norm.log" ||
        { echo "error: ./reference_cpu --norm $norm failed (exit status $?): no time for it" >&2; exit 1; }
    ms=$(grep '^step' "$tmp/$norm.log" | tail -n +2 | sed -E 's/.*\| ([0-9.]+) ms.*/\1/' | sort -g |
         awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}')
    [ -z "$pre" ] && pre=$ms
    awk -v n=$norm -v ms="$ms" -v pre="$pre" 'BEGIN { printf "%-9s %12.1f %10.0f %+9.1f%%\n", n, ms, 256000 / ms, (ms / pre - 1) * 100 }'
done
echo "(median over steps 2..$steps, $OMP_NUM_THREADS threads, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))"
