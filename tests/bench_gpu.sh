#!/usr/bin/env bash
# GPU speed of the CUDA trainer (./train_gpt2cu as built, bf16 by default) for GPT-2's four sizes and the three
# layouts, ONE table: tokens/s, MFU, ms/step, GPU memory, and the overhead of SiameseNorm (and Post-Norm) over
# Pre-Norm at the same size, all measured in this one run; then tools/profile_gpu's breakdown of a d12 step by part,
# with each attention (PROFILE_FLAGS passes it more flags, e.g. "-r 1"). About 3 minutes on an H200. A measurement,
# not a test.
#   T = 1024, GPT-2's vocabulary (50257); data: random tokens (speed does not depend on the text); the median ms of
#   steps 6..$STEPS (the first five warm up cuBLAS and the allocator); no validation, sampling or checkpoints.
#   MFU as the trainer prints it (llm.c's 6N + 6LCT FLOPs a token against 989.5 TFLOP/s dense bf16).
#   GPU MiB: what cudaMemGetInfo reports in use after the last step, CUDA context and cuBLAS workspace included.
# Usage: bash tests/bench_gpu.sh [extra trainer flags, e.g. -r 1]     (BIN=./train_gpt2fp32cu for another build)
# Environment: STEPS (default 15), SIZES (default "d12:16 d24:16 d36:8 d48:8", shape:micro-batch), OUT (a folder
# for the per-run logs; default a temporary one).
set -u
cd "$(dirname "$0")/.."
BIN=${BIN:-./train_gpt2cu}
STEPS=${STEPS:-15}
SIZES=${SIZES:-"d12:16 d24:16 d36:8 d48:8"}
T=1024
EXTRA=("$@")
LOGS=${OUT:-$(mktemp -d)}
mkdir -p "$LOGS"
[ -x "$BIN" ] || { echo "error: $BIN is not built (make train_gpt2cu)"; exit 1; }
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

# a shard of random tokens over GPT-2's vocabulary: header (magic 20240520, version 1, count, vocabulary 0 = 50257)
SHARD="$LOGS/bench_tokens.bin"
python3 - "$SHARD" <<'EOF'
import random, struct, sys
n = 1 << 21
random.seed(1)
header = [20240520, 1, n, 0] + [0] * 252
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", *header))
    f.write(struct.pack("<%dH" % n, *(random.randrange(50257) for _ in range(n))))
EOF

# median ms of the step lines after the first five, and the MFU and GPU MiB of the step line with that ms
summarize() {
    grep -E '^step ' "$1" 2>/dev/null | awk -F'|' 'NR > 5 {
        ms = $5; gsub(/[^0-9.]/, "", ms); mfu = $7; sub(/^ *MFU */, "", mfu); sub(/ *$/, "", mfu);
        mib = $8; gsub(/[^0-9]/, "", mib); print ms + 0, mfu, mib }' | sort -g |
        awk '{ a[NR] = $0 } END { if (NR) print a[int((NR + 1) / 2)]; else print "- - -" }'
}

START=$SECONDS
declare -A MS MFU MIB
for size in $SIZES; do
    shape=${size%%:*} B=${size##*:}
    for layout in pre post siamese; do
        log="$LOGS/${shape}_$layout.log"
        echo "--- $shape $layout B=$B T=$T (at $((SECONDS - START))s)"
        timeout 120 "$BIN" -e "$shape" --norm "$layout" -b "$B" -t $T -x "$STEPS" -l 1e-4 -v 0 -s 0 -i "$SHARD" \
            "${EXTRA[@]}" > "$log" 2>&1
        rc=$?
        [ $rc -eq 0 ] || { echo "exit status $rc:"; grep -E "error|out of memory" "$log" | head -n 3; tail -n 2 "$log"; }
        read -r ms mfu mib <<< "$(summarize "$log")"
        MS[$shape,$layout]=$ms MFU[$shape,$layout]=$mfu MIB[$shape,$layout]=$mib
    done
done

pct() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%+.1f%%", (a / b - 1) * 100; else print "-" }'; }
echo
echo "=== $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)," \
    "$BIN ${EXTRA[*]}, T=$T, median of steps 6..$STEPS, $((SECONDS - START))s in all"
printf '%-5s %-8s %4s | %9s | %10s | %6s | %8s | %-16s\n' size layout B "ms/step" "tokens/s" MFU "GPU MiB" "vs pre (time)"
echo "------------------+-----------+------------+--------+----------+-----------------"
for size in $SIZES; do
    shape=${size%%:*} B=${size##*:}
    for layout in pre post siamese; do
        ms=${MS[$shape,$layout]}
        tps=$(awk -v ms="$ms" -v n=$((B * T)) 'BEGIN { if (ms + 0 > 0) printf "%.0f", n / (ms / 1000); else print "-" }')
        vs="-"
        [ "$layout" != pre ] && vs=$(pct "$ms" "${MS[$shape,pre]}")
        printf '%-5s %-8s %4s | %9s | %10s | %6s | %8s | %-16s\n' "$shape" "$layout" "$B" "$ms" "$tps" \
            "${MFU[$shape,$layout]}" "${MIB[$shape,$layout]}" "$vs"
    done
done
echo "(vs pre: ms/step over Pre-Norm's at the same size and batch; SiameseNorm's target is within +3%, Post-Norm's +1%)"

# where a d12 step's time goes, part by part, and what each layout adds to Pre-Norm, with the materialized and the
# flash attention, and Pre-Norm without cuBLASLt's epilogues (tools/profile_gpu: train_gpt2cu's precision; make
# bench-gpu builds both)
if [ -x ./tools/profile_gpu ]; then
    echo
    for attention in materialized flash; do
        timeout 120 ./tools/profile_gpu -e d12 -b 16 -t $T --attention $attention ${PROFILE_FLAGS:-} ||
            echo "tools/profile_gpu: exit status $?"
    done
    # whether cuBLASLt's fused bias/GELU epilogues beat the separate kernels here (see the "mlp" rows)
    timeout 60 ./tools/profile_gpu -e d12 -b 16 -t $T --norm pre --epilogues 0 ${PROFILE_FLAGS:-} ||
        echo "tools/profile_gpu: exit status $?"
else
    echo "(no ./tools/profile_gpu: make tools/profile_gpu for the breakdown by part)"
fi
