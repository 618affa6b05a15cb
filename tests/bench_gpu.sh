#!/usr/bin/env bash
# The speed table of the CUDA trainer, beside its PyTorch peer. On a lent GPU it is the last stage of the one call,
# tests/gpu_check.sh (d12 and d48; the top of that script has the call, word for word); run alone (`make bench-gpu`,
# on a GPU of one's own) it measures GPT-2's four sizes in at most 5 minutes. In order:
#   1. ./train_gpt2cu (bf16, as built) for each size and layout at T = 1024 (pre, siamese, siamese-hybrid, hybrid,
#      post, and mix, Mix-LN at its default --mix-alpha, last "where it fits"): ms/step, tokens/s, MFU, GPU memory,
#      and the overhead of each layout over Pre-Norm at the same size
#   2. the three attentions (materialized, flash, cuDNN: ./train_gpt2cu_cudnn has all three) at each size of
#      ATT_SIZES, Pre-Norm: which is fastest where (the default attention is to be chosen by this and nothing else)
#   3. tests/bench_torch.py, the same models in PyTorch (torch.compile, bf16 autocast, flash SDPA, fused AdamW) at
#      the sizes of TORCH_SIZES and the same steps: its tokens/s beside ours, and the ratio (pre, siamese and post:
#      the layouts it has a model of; the other rows have none)
#   4. (PROFILE=1, alone only) tools/profile_gpu: where a d12 step's time goes, part by part, with each attention,
#      and without cuBLASLt's epilogues
# All measured in this one run: random tokens over GPT-2's vocabulary (speed does not depend on the text); the
# median ms of steps 6..$STEPS (the first five warm up cuBLAS, the allocator and torch.compile); no validation,
# sampling or checkpoints. MFU as the trainer prints it (llm.c's 6N + 6LCT FLOPs a token against 989.5 TFLOP/s
# dense bf16). GPU MiB: cudaMemGetInfo's use after the last step (context and workspace included); torch's GiB:
# torch.cuda.max_memory_allocated (its allocations only). Each part runs under its share of the budget
# (tests/gpu_lib.sh: a part may use what the earlier ones left, never what the later ones reserve), so the last rows
# are cut (and say so) rather than the call; DRY_RUN=1 prints the budget table.
# Writes $OUT/bench.log (everything) and $OUT/bench.txt (the table), rewritten after each part; OUT defaults to
# /tmp/bench_gpu. A measurement, not a test.
# Usage: bash tests/bench_gpu.sh [extra trainer flags, e.g. -r 1]   (BIN=./train_gpt2cu for another build)
# Environment: STEPS (default 15); SIZES (default "d12:16 d24:16 d36:8 d48:8", shape:micro-batch); LAYOUTS (default
# "pre siamese siamese-hybrid hybrid post mix", in that order: a part cut at its share loses the last rows); ATT_SIZES and TORCH_SIZES (default: SIZES; "" leaves the part out); TORCH=0 leaves the
# PyTorch peer out; PROFILE (default 1); the parts' seconds TRAINER_S, ATTENTION_S, TORCH_S, PROFILE_S (defaults
# 90, 45, 55, 35). tests/gpu_check.sh sets NO_BUILD=1 (the programs are built, and the build is not timed again)
# and GPU_NAME (the GPU is probed already). (TF32 in the float32 build was measured once, before bf16: 3.07x at
# d12, docs/results/gpu/gpu_check_h200.txt; it is not re-measured here.)
set -u
cd "$(dirname "$0")/.."
. tests/gpu_lib.sh
BIN=${BIN:-./train_gpt2cu}
STEPS=${STEPS:-15}
SIZES=${SIZES:-"d12:16 d24:16 d36:8 d48:8"}
LAYOUTS=${LAYOUTS:-"pre siamese siamese-hybrid hybrid post mix"}
TORCH_HAS="pre siamese post"  # the layouts tests/bench_torch.py has a model of
ATT_SIZES=${ATT_SIZES-$SIZES}
TORCH_SIZES=${TORCH_SIZES-$SIZES}
[ "${TORCH:-1}" = 1 ] || TORCH_SIZES=""
PROFILE=${PROFILE:-1}
NO_BUILD=${NO_BUILD:-0}
T=1024
EXTRA=("$@")
OUT=${OUT:-/tmp/bench_gpu}
mkdir -p "$OUT"
RUNS=$(mktemp -d)
exec > >(tee "$OUT/bench.log") 2>&1
TEE=$!
# at the end tee has written every line, to the log and to the call's output, before the script returns
trap 'rm -rf "$RUNS"; exec > /dev/null 2>&1; wait $TEE' EXIT
T0=$SECONDS
# the parts, in order; the probe and the build only where this script does them
[ -n "${GPU_NAME:-}" ] || plan probe:20
[ "$NO_BUILD" = 1 ] || plan build:45
plan trainer:${TRAINER_S:-90}
[ -z "$ATT_SIZES" ] || plan attention:${ATTENTION_S:-45}
[ -z "$TORCH_SIZES" ] || plan torch:${TORCH_S:-55}
[ "$PROFILE" != 1 ] || plan profile:${PROFILE_S:-35}
DEADLINE=$((T0 + ${BENCH_SECONDS:-$BUDGET}))

setup_toolkit
check_prep
echo "tree: $TREE"
if [ -z "${GPU_NAME:-}" ]; then
    stage probe
    if [ "$DRY_RUN" = 1 ]; then
        GPU_NAME="(dry run: no GPU probed)"
    elif ! probe_gpu; then
        echo "bench: no GPU, nothing was run" > "$OUT/bench.txt"
        exit 2
    fi
fi

find_cudnn
echo "cuDNN: ${CUDNN_WHY:-$CUDNN_MAKE}"
ATTBIN=./train_gpt2cu_cudnn
if [ "$NO_BUILD" != 1 ]; then
    stage build
    [ -n "$CUDNN_WHY" ] || start_background build_cudnn 150 make -j"$(nproc)" DOCTEST="$PREP/doctest" $CUDNN_MAKE \
        train_gpt2cu_cudnn tools/profile_gpu_cudnn
    run_step build 45 make -j"$(nproc)" DOCTEST="$PREP/doctest" PRECISION=BF16 ATTENTION=materialized USE_CUDNN=0 \
        train_gpt2cu tools/profile_gpu
fi
[ "$DRY_RUN" = 1 ] || [ -x "$BIN" ] || { tail -n 20 "$RUNS/build.log" 2> /dev/null; echo "error: $BIN is not built"; exit 1; }

# a shard of random tokens over GPT-2's vocabulary: header (magic 20240520, version 1, count, vocabulary 0 = 50257)
SHARD="$RUNS/bench_tokens.bin"
[ "$DRY_RUN" = 1 ] || python3 - "$SHARD" << 'EOF'
import random, struct, sys
n = 1 << 21
random.seed(1)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", *([20240520, 1, n, 0] + [0] * 252)))
    f.write(struct.pack("<%dH" % n, *random.choices(range(50257), k=n)))
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
# why a row has no number: the run's error line, "not run (time)", or "-"
why_not() {  # step name
    local rc=${STEP_RC[$1]:-}
    if [ "$rc" = "-" ]; then echo "not run (time)"
    elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then echo "timed out"
    elif [ -n "$rc" ] && [ "$rc" != 0 ]; then grep -m 1 -oE '(error|out of memory)[^|]{0,40}' "$RUNS/$1.log" 2> /dev/null || echo "exit $rc"
    else echo "-"; fi
}
declare -A MS MFU MIB ATT

table() {  # [final]: a dry run writes it once, at the end
    [ "$DRY_RUN" = 1 ] && [ "${1:-}" != final ] && return
    {
    echo "=== $GPU_NAME; $BIN ${EXTRA[*]}; T=$T, median of steps 6..$STEPS; $((SECONDS - T0))s in all"
    echo "tree: $TREE"
    printf '%-5s %-14s %3s | %8s | %9s | %6s | %8s | %-9s | %11s | %10s | %s\n' size layout B "ms/step" "tokens/s" \
        MFU "GPU MiB" "vs pre" "torch tok/s" "ours/torch" "torch GiB"
    echo "------------------------+----------+-----------+--------+----------+-----------+-------------+------------+----------"
    local size shape B layout ms tps vs ttps ratio
    for size in $SIZES; do
        shape=${size%%:*} B=${size##*:}
        for layout in $LAYOUTS; do
            ms=${MS[$shape,$layout]:--}
            tps=$(awk -v ms="$ms" -v n=$((B * T)) 'BEGIN { if (ms + 0 > 0) printf "%.0f", n / (ms / 1000); else print "-" }')
            [ "$ms" != "-" ] || ms=$(why_not "${shape}_$layout" | cut -c1-24)
            vs="-"
            [ "$layout" != pre ] && vs=$(pct "${MS[$shape,$layout]:--}" "${MS[$shape,pre]:--}")
            ttps=$(torch_field "$shape" "$layout" tok_s)
            [ -n "$ttps" ] || ttps=$(torch_field "$shape" "$layout" error | cut -c1-11)
            [ -n "$ttps" ] || ttps=$(torch_field "$shape" "$layout" skipped | sed 's/^/skipped: /')
            ratio=$(awk -v a="$tps" -v b="$ttps" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2fx", a / b; else print "-" }')
            printf '%-5s %-14s %3s | %8s | %9s | %6s | %8s | %-9s | %11s | %10s | %s\n' "$shape" "$layout" "$B" "$ms" \
                "$tps" "${MFU[$shape,$layout]:--}" "${MIB[$shape,$layout]:--}" "$vs" "${ttps:--}" "$ratio" \
                "$(torch_field "$shape" "$layout" gib)"
        done
    done
    echo "(vs pre: ms/step over Pre-Norm's at the same size; SiameseNorm's target is within +3%, Post-Norm's +1%;"
    echo " mix: Mix-LN at its default --mix-alpha. torch: tests/bench_torch.py ($TORCH_HAS) at the sizes ${TORCH_SIZES:-(none)},"
    echo " $(grep -h '^TORCH torch=' "$RUNS/torch.log" 2> /dev/null | cut -c7- | or_dash))"
    if [ -n "$ATT_SIZES" ]; then
        echo
        echo "attention, Pre-Norm, ms/step (./train_gpt2cu_cudnn --attention ...; ${CUDNN_WHY:-all three in one program})"
        printf '%-5s %3s | %12s | %8s | %8s | %s\n' size B materialized flash cudnn fastest
        for size in $ATT_SIZES; do
            shape=${size%%:*} B=${size##*:}
            printf '%-5s %3s | %12s | %8s | %8s | %s\n' "$shape" "$B" "${ATT[$shape,materialized]:--}" \
                "${ATT[$shape,flash]:-$(why_not "att_${shape}_flash" | cut -c1-8)}" \
                "${ATT[$shape,cudnn]:-$(why_not "att_${shape}_cudnn" | cut -c1-8)}" "$(fastest "$shape")"
        done
    fi
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
bench_run() {  # STEP BINARY FLAGS...: one timed run (each at most 40 s, and what is left of the part)
    local name=$1
    shift
    run_step "$name" 40 "$@" -b "$B" -t $T -x "$STEPS" -l 1e-4 -v 0 -s 0 -i "$SHARD" "${EXTRA[@]}"
    [ "${STEP_RC[$name]}" = 0 ] || [ "${STEP_RC[$name]}" = "-" ] ||
        grep -E "error|out of memory" "$RUNS/$name.log" 2> /dev/null | head -n 3
}

# 1. the trainer, size by size
stage trainer
for size in $SIZES; do
    shape=${size%%:*} B=${size##*:}
    for layout in $LAYOUTS; do
        bench_run "${shape}_$layout" "$BIN" -e "$shape" --norm "$layout"
        read -r ms mfu mib <<< "$(summarize "$RUNS/${shape}_$layout.log")"
        [ "$ms" = "-" ] || MS[$shape,$layout]=$ms MFU[$shape,$layout]=$mfu MIB[$shape,$layout]=$mib
        echo "$shape $layout B=$B: $ms ms/step, MFU $mfu, $mib MiB"
        table
    done
done

# 2. the attentions, size by size (Pre-Norm; ./train_gpt2cu_cudnn's default, the materialized one, is the one above)
if [ -n "$ATT_SIZES" ]; then
    stage attention
    [ -n "$CUDNN_WHY" ] || wait_steps build_cudnn
    if [ -n "$CUDNN_WHY" ] || { [ "$DRY_RUN" != 1 ] && [ ! -x "$ATTBIN" ]; }; then ATTBIN=$BIN; fi
    for size in $ATT_SIZES; do
        shape=${size%%:*} B=${size##*:}
        ATT[$shape,materialized]=${MS[$shape,pre]:--}
        for a in flash cudnn; do
            [ "$a" = cudnn ] && [ "$ATTBIN" = "$BIN" ] && continue
            bench_run "att_${shape}_$a" "$ATTBIN" -e "$shape" --norm pre --attention $a
            read -r ms _ <<< "$(summarize "$RUNS/att_${shape}_$a.log")"
            [ "$ms" = "-" ] || ATT[$shape,$a]=$ms
            echo "$shape pre --attention $a: $ms ms/step"
        done
    done
    table
fi

# 3. the PyTorch peer, the same steps, in one process (torch.compile's cache serves every block of a size); no new
# size or layout starts in the last 15 s of its part
if [ -n "$TORCH_SIZES" ]; then
    stage torch
    left=$(stage_left)
    torch_layouts=$(tr ' ' '\n' <<< "$LAYOUTS" | grep -xF -f <(tr ' ' '\n' <<< "$TORCH_HAS") | paste -sd, -)
    run_step torch "$left" env PYTHONUNBUFFERED=1 $TORCH_PY tests/bench_torch.py --bench \
        --sizes "$(tr ' ' ',' <<< "$TORCH_SIZES")" --layouts "$torch_layouts" -t $T --steps "$STEPS" \
        --budget $((left > 30 ? left - 15 : 1))
    grep -E '^TORCH|Error|error' "$RUNS/torch.log" 2> /dev/null | head -n 30
    table
fi

# 4. where the time goes: d12 by part with each attention, and Pre-Norm without cuBLASLt's epilogues
if [ "$PROFILE" = 1 ]; then
    stage profile
    PROFILE_BIN=./tools/profile_gpu
    [ "$ATTBIN" = "$BIN" ] || PROFILE_BIN=./tools/profile_gpu_cudnn
    for attention in materialized flash cudnn; do
        [ "$attention" = cudnn ] && [ "$PROFILE_BIN" = ./tools/profile_gpu ] && continue
        run_step profile_$attention 20 $PROFILE_BIN -e d12 -b 16 -t $T --attention $attention ${PROFILE_FLAGS:-}
        cat "$RUNS/profile_$attention.log" 2> /dev/null
    done
    run_step profile_no_epilogues 15 ./tools/profile_gpu -e d12 -b 16 -t $T --norm pre --epilogues 0 ${PROFILE_FLAGS:-}
    cat "$RUNS/profile_no_epilogues.log" 2> /dev/null
fi

echo
if [ "$DRY_RUN" = 1 ]; then
    table final
    echo "budget:"
    print_plan
    echo "dry run: nothing was run; the parts' timeouts add up to ${BUDGET}s (the bench must stay within $((DEADLINE - T0))s)"
    [ "$BUDGET" -le $((DEADLINE - T0)) ] && [ "$BUDGET" -le 300 ]
    exit
fi
table
cat "$OUT/bench.txt"
