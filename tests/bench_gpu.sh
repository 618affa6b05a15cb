#!/usr/bin/env bash
# The speed table of the CUDA trainer, beside its PyTorch peer, in one call of at most 5 minutes. Word for word:
#
#   here, where the working tree is:   make gpu-prep
#   on the lent GPU, first the check:  run(command="bash tests/gpu_check.sh", carry=[".gpu"], timeout_s=540)
#   then the speed table:              run(command="bash tests/bench_gpu.sh", carry=[".gpu"], timeout_s=330)
#
# (`make bench-gpu` runs it too.) On a machine where tests/gpu_check.sh has just run, nothing is rebuilt. In order:
#   1. ./train_gpt2cu (bf16, as built) for GPT-2's four sizes and the three layouts at T = 1024: ms/step, tokens/s,
#      MFU, GPU memory, and the overhead of SiameseNorm (and Post-Norm) over Pre-Norm at the same size
#   2. the three attentions (materialized, flash, cuDNN: ./train_gpt2cu_cudnn has all three) at each size, Pre-Norm:
#      which is fastest where (the default attention is to be chosen by this and nothing else)
#   3. tests/bench_torch.py, the same models in PyTorch (torch.compile, bf16 autocast, flash SDPA, fused AdamW) at
#      the same shapes and steps: its tokens/s beside ours, and the ratio
#   4. tools/profile_gpu: where a d12 step's time goes, part by part, with each attention, and without cuBLASLt's
#      epilogues
# All measured in this one run: random tokens over GPT-2's vocabulary (speed does not depend on the text); the
# median ms of steps 6..$STEPS (the first five warm up cuBLAS, the allocator and torch.compile); no validation,
# sampling or checkpoints. MFU as the trainer prints it (llm.c's 6N + 6LCT FLOPs a token against 989.5 TFLOP/s
# dense bf16). GPU MiB: cudaMemGetInfo's use after the last step (context and workspace included); torch's GiB:
# torch.cuda.max_memory_allocated (its allocations only). Each part runs under what is left of a 290 s budget, so
# the last parts are cut (and say so) rather than the call; the parts' nominal seconds add up to under 300 (the
# build's 60 only on a machine where nothing is built yet; DRY_RUN=1 prints them).
# Writes $OUT/bench.log (everything) and $OUT/bench.txt (the table), rewritten after each part; OUT defaults to
# /tmp/bench_gpu. A measurement, not a test.
# Usage: bash tests/bench_gpu.sh [extra trainer flags, e.g. -r 1]   (BIN=./train_gpt2fp32cu for another build)
# Environment: STEPS (default 15), SIZES (default "d12:16 d24:16 d36:8 d48:8", shape:micro-batch), TORCH=0 to
# leave the PyTorch peer out. (TF32 in the float32 build was measured once, before bf16: 3.07x at d12,
# docs/results/gpu/gpu_check_h200.txt; it is not re-measured here.)
set -u
cd "$(dirname "$0")/.."
. tests/gpu_lib.sh
BIN=${BIN:-./train_gpt2cu}
STEPS=${STEPS:-15}
SIZES=${SIZES:-"d12:16 d24:16 d36:8 d48:8"}
T=1024
EXTRA=("$@")
OUT=${OUT:-/tmp/bench_gpu}
mkdir -p "$OUT"
RUNS=$(mktemp -d)
trap 'rm -rf "$RUNS"' EXIT
exec > >(tee "$OUT/bench.log") 2>&1
DEADLINE=$((SECONDS + 290))
T0=$SECONDS

setup_toolkit
check_prep
echo "tree: $TREE"
stage 20
if [ "$DRY_RUN" = 1 ]; then
    GPU_NAME="(dry run: no GPU probed)"
elif ! probe_gpu; then
    echo "bench: no GPU, nothing was run" > "$OUT/bench.txt"
    exit 2
fi

stage 45
find_cudnn
echo "cuDNN: ${CUDNN_WHY:-$CUDNN_MAKE}"
[ -n "$CUDNN_WHY" ] || start_step build_cudnn 150 make -j"$(nproc)" DOCTEST="$PREP/doctest" $CUDNN_MAKE \
    train_gpt2cu_cudnn tools/profile_gpu_cudnn
run_step build 90 make -j"$(nproc)" DOCTEST="$PREP/doctest" PRECISION=BF16 ATTENTION=materialized USE_CUDNN=0 \
    train_gpt2cu tools/profile_gpu
[ "$DRY_RUN" = 1 ] || [ -x "$BIN" ] || { tail -n 20 "$RUNS/build.log"; echo "error: $BIN is not built"; exit 1; }

# a shard of random tokens over GPT-2's vocabulary: header (magic 20240520, version 1, count, vocabulary 0 = 50257)
SHARD="$RUNS/bench_tokens.bin"
[ "$DRY_RUN" = 1 ] || python3 - "$SHARD" << 'EOF'
import random, struct, sys
n = 1 << 21
random.seed(1)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", *([20240520, 1, n, 0] + [0] * 252)))
    f.write(struct.pack("<%dH" % n, *(random.randrange(50257) for _ in range(n))))
EOF

# median ms of the step lines after the first five, and the MFU and GPU MiB of the step line with that ms
summarize() {
    grep -E '^step ' "$1" 2> /dev/null | awk -F'|' 'NR > 5 {
        ms = $5; gsub(/[^0-9.]/, "", ms); mfu = $7; sub(/^ *MFU */, "", mfu); sub(/ *$/, "", mfu);
        mib = $8; gsub(/[^0-9]/, "", mib); print ms + 0, mfu, mib }' | sort -g |
        awk '{ a[NR] = $0 } END { if (NR) print a[int((NR + 1) / 2)]; else print "- - -" }'
}
pct() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%+.1f%%", (a / b - 1) * 100; else print "-" }'; }
torch_field() {  # size layout field: from the TORCH lines of tests/bench_torch.py
    grep -h "^TORCH size=$1 layout=$2 " "$RUNS/torch.log" 2> /dev/null | tail -n 1 | tr ' ' '\n' |
        sed -n "s/^$3=//p" | head -n 1
}
declare -A MS MFU MIB ATT

table() {
    {
    echo "=== $GPU_NAME; $BIN ${EXTRA[*]}; T=$T, median of steps 6..$STEPS; $((SECONDS - T0))s in all"
    echo "tree: $TREE"
    printf '%-5s %-8s %3s | %8s | %9s | %6s | %8s | %-9s | %10s | %6s | %s\n' size layout B "ms/step" "tokens/s" \
        MFU "GPU MiB" "vs pre" "torch tok/s" "ours/torch" "torch GiB"
    echo "------------------+----------+-----------+--------+----------+-----------+-------------+------------+----------"
    local size shape B layout ms tps vs ttps ratio
    for size in $SIZES; do
        shape=${size%%:*} B=${size##*:}
        for layout in pre post siamese; do
            ms=${MS[$shape,$layout]:--}
            tps=$(awk -v ms="$ms" -v n=$((B * T)) 'BEGIN { if (ms + 0 > 0) printf "%.0f", n / (ms / 1000); else print "-" }')
            vs="-"
            [ "$layout" != pre ] && vs=$(pct "$ms" "${MS[$shape,pre]:--}")
            ttps=$(torch_field "$shape" "$layout" tok_s)
            [ -n "$ttps" ] || ttps=$(torch_field "$shape" "$layout" error | cut -c1-11)
            ratio=$(awk -v a="$tps" -v b="$ttps" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2fx", a / b; else print "-" }')
            printf '%-5s %-8s %3s | %8s | %9s | %6s | %8s | %-9s | %11s | %10s | %s\n' "$shape" "$layout" "$B" "$ms" \
                "$tps" "${MFU[$shape,$layout]:--}" "${MIB[$shape,$layout]:--}" "$vs" "${ttps:--}" "$ratio" \
                "$(torch_field "$shape" "$layout" gib)"
        done
    done
    echo "(vs pre: ms/step over Pre-Norm's at the same size; SiameseNorm's target is within +3%, Post-Norm's +1%."
    echo " torch: tests/bench_torch.py, $(grep -h '^TORCH torch=' "$RUNS/torch.log" 2> /dev/null | cut -c7- | or_dash))"
    echo
    echo "attention, Pre-Norm, ms/step (./train_gpt2cu_cudnn --attention ...; ${CUDNN_WHY:-all three in one program})"
    printf '%-5s %3s | %12s | %8s | %8s | %s\n' size B materialized flash cudnn fastest
    for size in $SIZES; do
        shape=${size%%:*} B=${size##*:}
        printf '%-5s %3s | %12s | %8s | %8s | %s\n' "$shape" "$B" "${ATT[$shape,materialized]:--}" \
            "${ATT[$shape,flash]:--}" "${ATT[$shape,cudnn]:--}" "$(fastest "$shape")"
    done
    } > "$OUT/bench.txt.tmp"
    mv "$OUT/bench.txt.tmp" "$OUT/bench.txt"
}
or_dash() { read -r v || true; echo "${v:--}"; }
fastest() {  # the attention with the least ms at size $1
    local best=- b=1e30 a
    for a in materialized flash cudnn; do
        if awk -v x="${ATT[$1,$a]:--}" -v y="$b" 'BEGIN { exit !(x + 0 > 0 && x + 0 < y) }'; then best=$a b=${ATT[$1,$a]}; fi
    done
    echo "$best"
}

# 1. the trainer, size by size
stage 90
for size in $SIZES; do
    shape=${size%%:*} B=${size##*:}
    for layout in pre post siamese; do
        run_step "${shape}_$layout" 40 "$BIN" -e "$shape" --norm "$layout" -b "$B" -t $T -x "$STEPS" -l 1e-4 -v 0 \
            -s 0 -i "$SHARD" "${EXTRA[@]}"
        l="$RUNS/${shape}_$layout.log"
        [ "${STEP_RC[${shape}_$layout]}" = 0 ] || grep -E "error|out of memory" "$l" 2> /dev/null | head -n 3
        read -r ms mfu mib <<< "$(summarize "$l")"
        MS[$shape,$layout]=$ms MFU[$shape,$layout]=$mfu MIB[$shape,$layout]=$mib
        echo "$shape $layout B=$B: $ms ms/step, MFU $mfu, $mib MiB"
    done
done
table

# 2. the attentions, size by size (Pre-Norm; ./train_gpt2cu_cudnn's default, the materialized one, is the one above)
stage 45
[ -n "$CUDNN_WHY" ] || wait_steps build_cudnn
ATTBIN=./train_gpt2cu_cudnn
if [ -n "$CUDNN_WHY" ] || { [ "${STEP_RC[build_cudnn]:-}" != 0 ] && [ "$DRY_RUN" != 1 ]; }; then ATTBIN=$BIN; fi
for size in $SIZES; do
    shape=${size%%:*} B=${size##*:}
    ATT[$shape,materialized]=${MS[$shape,pre]:--}
    for a in flash cudnn; do
        [ "$a" = cudnn ] && [ "$ATTBIN" = "$BIN" ] && continue
        run_step "att_${shape}_$a" 25 "$ATTBIN" -e "$shape" --norm pre -b "$B" -t $T -x "$STEPS" -l 1e-4 -v 0 -s 0 \
            -i "$SHARD" --attention $a "${EXTRA[@]}"
        read -r ms _ <<< "$(summarize "$RUNS/att_${shape}_$a.log")"
        ATT[$shape,$a]=$ms
        echo "$shape pre --attention $a: $ms ms/step"
    done
done
table

# 3. the PyTorch peer, the same sizes and steps, in one process (torch.compile's cache serves every block)
stage 55
if [ "${TORCH:-1}" = 1 ]; then
    left=$((DEADLINE - SECONDS - 30))  # leave the profiles their time
    run_step torch 100 env PYTHONUNBUFFERED=1 $TORCH_PY tests/bench_torch.py --bench --sizes "$(tr ' ' ',' <<< "$SIZES")" \
        -t $T --steps "$STEPS" --budget $((left > 10 ? left - 40 : 1))
    grep -E '^TORCH|Error|error' "$RUNS/torch.log" 2> /dev/null | head -n 30
    table
fi

# 4. where the time goes: d12 by part with each attention, and Pre-Norm without cuBLASLt's epilogues
stage 35
PROFILE=./tools/profile_gpu
[ "$ATTBIN" = "$BIN" ] || PROFILE=./tools/profile_gpu_cudnn
for attention in materialized flash cudnn; do
    [ "$attention" = cudnn ] && [ "$PROFILE" = ./tools/profile_gpu ] && continue
    run_step profile_$attention 20 $PROFILE -e d12 -b 16 -t $T --attention $attention ${PROFILE_FLAGS:-}
    cat "$RUNS/profile_$attention.log" 2> /dev/null
done
run_step profile_no_epilogues 15 ./tools/profile_gpu -e d12 -b 16 -t $T --norm pre --epilogues 0 ${PROFILE_FLAGS:-}
cat "$RUNS/profile_no_epilogues.log" 2> /dev/null

echo
if [ "$DRY_RUN" = 1 ]; then
    echo "dry run: nothing was run; the parts' timeouts add up to ${BUDGET}s (the bench must stay under 300s)"
    [ "$BUDGET" -lt 300 ]
    exit
fi
table
cat "$OUT/bench.txt"
