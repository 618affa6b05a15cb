#!/usr/bin/env bash
# The GPU check of the CUDA trainer: what a lent GPU must show, in one call of at most 7 minutes. Word for word:
#
#   here, where the working tree is:   make gpu-prep
#   on the lent GPU, first the check:  run(command="bash tests/gpu_check.sh", carry=[".gpu"], timeout_s=540)
#   then the speed table:              run(command="bash tests/bench_gpu.sh", carry=[".gpu"], timeout_s=330)
#   where the lent machine has MPI:    run(command="bash tests/gpu_nccl_check.sh", carry=[".gpu"], timeout_s=300)
#   (the three together, 1,170 s, exceed the 900 s of device time a task gets: after the check, run the bench or,
#   where the bench has run before, the NCCL check)
#     (the NCCL back end with one rank, bit for bit against the plain run; its own call, since this one's stages
#     fill its budget; it says "skipped" in seconds where there is no MPI. This check also runs it at its end,
#     stage 8, where at least 130 s of its budget are left, as they are when the stages take less than their caps)
#
# `make gpu-prep` writes .gpu/ (git-ignored: the KJV shards, doctest.h, a record of the tree; tests/gpu_prep.sh),
# so the GPU machine needs the working tree and that folder and nothing else. In order of importance:
#   1. inputs and the GPU: .gpu/ complete and unchanged, nvcc, make and g++ there, and a GPU that runs a kernel;
#      without one: "error: no GPU", exit 2, within 30 seconds, no table
#   2. the build, once (-j$(nproc)): both trainers, both test programs, the CPU reference, tools/profile_gpu; beside it
#      (it takes longer) the cuDNN build: tests/test_gpu_cudnn and train_gpt2cu_cudnn (all three attentions)
#   3. gradients: tests/test_gpu (fp32) and tests/test_gpu_bf16 against the CPU reference (a SKIPPED test fails
#      here), then tests/test_gpu_cudnn
#   4. training: the CPU and both GPU trainers on one tiny run (main.log against main.log); d12 per layout on the KJV
#      bytes in bf16 and fp32 (the losses must track each other); the PyTorch peer (tests/bench_torch.py) computes
#      the same validation loss from the same checkpoints
#   5. memory and speed at T = 1024 (materialized, flash and cuDNN attention, -r 0 and -r 1), d48 (1.5 B parameters)
#   6. checkpoint and resume (-y 1) bit for bit
#   7. compute-sanitizer memcheck, racecheck, synccheck and initcheck on the small test cases, both precisions
#   8. where time is left: tests/gpu_nccl_check.sh (not one of the counted stages; a FAILED there fails the check)
# Each step runs under a timeout that also respects the whole budget (tests/gpu_lib.sh); the nominal timeouts add up
# to less than 540 s (DRY_RUN=1 prints them and their sum; the cuDNN build runs beside the stages 2 and 3 and adds
# nothing to it). $OUT/summary.txt is rewritten after every stage, so it
# stays whole if the call is cut off; the log of everything is $OUT/gpu_check.log. OUT defaults to /tmp/gpu_check.
# The exit status is 0 only when every step passed.
set -u
cd "$(dirname "$0")/.."
. tests/gpu_lib.sh
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"
RUNS=$(mktemp -d)  # the per-step logs stay out of $OUT (few files come back from it); their text goes to the log
trap 'rm -rf "$RUNS"' EXIT
exec > >(tee "$OUT/gpu_check.log") 2>&1
DEADLINE=$((SECONDS + 535))
NPROC=$(nproc)
KJV="$PREP/kjv"
T0=$SECONDS

# ---------------------------------------------------------------------------------------------------------------
# 1. inputs and the GPU
setup_toolkit
check_prep
echo "tree: $TREE"
stage 30
if [ "$DRY_RUN" = 1 ]; then
    GPU_NAME="(dry run: no GPU probed)"
elif ! probe_gpu 2> "$RUNS/probe.txt"; then
    cat "$RUNS/probe.txt"
    { cat "$RUNS/probe.txt"; echo "gpu_check: no GPU, nothing was run; tree: $TREE"; } > "$SUMMARY"
    exit 2
else
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
    echo "CPU cores: $NPROC; $(nvcc --version | tail -n 1); PyTorch: $($TORCH_PY -c 'import torch; print(torch.__version__)' 2>&1 | tail -n 1)"
fi

# ---------------------------------------------------------------------------------------------------------------
# the summary, rewritten after each stage from the logs that exist so far

log_of() { echo "$RUNS/$1.log"; }
or_dash() { read -r v || true; echo "${v:--}"; }
worst_grad() {  # the worst norm-wise/max-wise gradient error of the cases whose label starts with $2
    grep -ho 'GRADCHECK .*' "$1" 2> /dev/null | awk -v p="$2" '
        $2 ~ "^" p "($|-)" {
            for (i = 3; i <= NF; i++) {
                if ($i ~ /^norm_rel=/) { v = substr($i, 10) + 0; if (v > n) n = v; seen = 1 }
                if ($i ~ /^max_rel=/) { v = substr($i, 9) + 0; if (v > m) m = v }
            }
        }
        END { if (seen) printf "%.1e/%.1e", n, m; else printf "-" }'
}
worst_steps() { grep -ho "STEPCHECK $2 worst_rel=[^ ]*" "$1" 2> /dev/null | sed 's/.*worst_rel=//' | head -n 1 | or_dash; }
step_loss() {  # the loss of step line $2 (first or last)
    grep -E '^step ' "$1" 2> /dev/null | { [ "$2" = first ] && head -n 1 || tail -n 1; } |
        awk -F'|' '{ split($2, w, " "); print w[2] }' | or_dash
}
val_loss() { grep '^val loss' "$1" 2> /dev/null | tail -n 1 | awk '{ print $3 }' | or_dash; }
peer_loss() { grep '^loss ' "$RUNS/peer_$1.txt" 2> /dev/null | awk '{ print $2 }' | or_dash; }
reldiff() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%+.2f%%", (a / b - 1) * 100; else print "-" }'; }
absrel() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.1e", (a > b ? a - b : b - a) / b; else print "-" }'; }
median_ms() {  # the median ms of the step lines after the first $2
    grep -E '^step ' "$1" 2> /dev/null | awk -F'|' -v skip="$2" 'NR > skip { v = $5; gsub(/ms/, "", v); print v + 0 }' |
        sort -g | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)]; else print "-" }'
}
last_field() {  # field $2 of the last step line (MFU: 7, MiB GPU: 8)
    grep -E '^step ' "$1" 2> /dev/null | tail -n 1 | awk -F'|' -v f="$2" '{ v = $f; gsub(/MFU|MiB GPU|^ +| +$/, "", v); print v }' | or_dash
}
sanitizer_word() {  # NAME: "clean", "N errors", or the step's word
    local name=$1 log
    log=$(log_of "$1")
    local errors
    errors=$(grep -hoE '(ERROR SUMMARY: [0-9]+ error|RACECHECK SUMMARY: [0-9]+ hazard)' "$log" 2> /dev/null | tail -n 1 | grep -oE '[0-9]+')
    if [ "${STEP_RC[$name]:--}" = 0 ] && [ "${errors:-}" = 0 ]; then echo clean
    elif [ -n "${errors:-}" ] && [ "$errors" != 0 ]; then echo "$errors error(s)"
    else step_word "$name" 0
    fi
}

summary() {
    {
    echo "=== gpu_check: $GPU_NAME; $((SECONDS - T0))s"
    echo "tree: $TREE"
    echo
    echo "gradients (tests/test_gpu, tests/test_gpu_bf16: every gradient tensor of the GPU against the CPU reference)"
    for t in test_gpu test_gpu_bf16; do
        printf '  tests/%-14s %-10s %s\n' "$t" "$(step_word $t "${TEST_OK[$t]:-0}")" \
            "$(grep -E '^\[doctest\] test cases' "$(log_of $t)" 2> /dev/null | sed 's/^\[doctest\] //' | tail -n 1)"
    done
    printf '  %-8s | %-15s | %-15s | %-19s\n' layout "fp32 norm/max" "bf16 norm/max" "10 steps fp32/bf16"
    for layout in pre post siamese; do
        printf '  %-8s | %-15s | %-15s | %-19s\n' $layout "$(worst_grad "$(log_of test_gpu)" $layout)" \
            "$(worst_grad "$(log_of test_gpu_bf16)" $layout)" \
            "$(worst_steps "$(log_of test_gpu)" $layout)/$(worst_steps "$(log_of test_gpu_bf16)" $layout)"
    done
    echo "  (worst relative error over the layout's cases: ablations, -r 1, flash, long rows, d12; bounds 1e-4/3e-4"
    echo "   fp32 and 3e-2/6e-2 bf16 at small shapes, 5e-4/1e-3 and 5e-2/1e-1 at d12; 10 steps: 1e-5 fp32, 1e-2 bf16)"
    for t in test_gpu test_gpu_bf16; do  # VARIANTCHECK <label> against the default variant: norm_rel=<v> (<tensor>)
        grep -ho "VARIANTCHECK .*" "$(log_of $t)" 2> /dev/null | awk -v t=$t '
            { v = $(NF - 1); sub(/norm_rel=/, "", v); v += 0; n++; if ($2 ~ /flash/) { if (v > f) f = v } else if (v > r) r = v }
            END { if (n) printf "  tests/%s: flash against materialized %.1e, -r 1 against -r 0 %.1e (worst gradient, norm-wise)\n", t, f, r }'
    done
    printf '  tests/%-14s %-10s %s\n' test_gpu_cudnn "$(step_word test_gpu_cudnn "${STEP_PASSED[test_gpu_cudnn]:-0}")" \
        "${CUDNN_WHY:-$(grep -E '^\[doctest\] test cases' "$(log_of test_gpu_cudnn)" 2> /dev/null | sed 's/^\[doctest\] //' | tail -n 1)}"
    grep -ho "CUDNNCHECK .*" "$(log_of test_gpu_cudnn)" 2> /dev/null | head -n 3 | sed 's/^/  /'
    grep -ho "TCCHECK .*" "$(log_of test_gpu_bf16)" 2> /dev/null | awk '
        { for (i = 3; i <= NF; i += 2) if ($(i + 1) + 0 > w) w = $(i + 1) + 0; n++ }
        END { if (n) printf "  tensor-core flash against the portable kernels, worst of out/lse/dq/dk/dv over %d head sizes: %.1e (bound 1e-2)\n", n, w }'
    echo
    echo "training"
    printf '  CPU against GPU, one tiny siamese run (main.log, %s): fp32 %s, bf16 %s\n' "$E2E_DESC" \
        "$(cat "$RUNS/e2e_fp32.cmp" 2> /dev/null | tail -n 1 | or_dash)" "$(cat "$RUNS/e2e_bf16.cmp" 2> /dev/null | tail -n 1 | or_dash)"
    printf '  %-8s | %-17s | %-9s | %-9s | %-8s | %-18s | %s\n' layout "bf16 loss" "val bf16" "val fp32" "bf16-32" \
        "torch val fp32" "torch val bf16"
    for layout in pre post siamese; do
        b=$(log_of train_${layout}_bf16) f=$(log_of train_${layout}_fp32)
        printf '  %-8s | %-17s | %-9s | %-9s | %-8s | %-18s | %s\n' $layout \
            "$(step_loss "$b" first) -> $(step_loss "$b" last)" "$(val_loss "$b")" "$(val_loss "$f")" \
            "$(reldiff "$(val_loss "$b")" "$(val_loss "$f")")" \
            "$(peer_loss ${layout}_fp32) ($(absrel "$(peer_loss ${layout}_fp32)" "$(val_loss "$f")"))" \
            "$(peer_loss ${layout}_bf16) ($(absrel "$(peer_loss ${layout}_bf16)" "$(val_loss "$b")"))"
    done
    echo "  (d12 on the KJV bytes, B=16 T=256, $STEPS steps, the six runs side by side on the GPU (so no timings"
    echo "   here: tests/bench_gpu.sh measures speed); val after the last step over 10 batches; bf16-32 expected within"
    echo "   +-2%; torch: tests/bench_torch.py's loss of the same checkpoint on the same batches, relative to the"
    echo "   trainer's: bound 1e-4 fp32 (float32 rounding), 1e-2 bf16)"
    echo
    echo "memory and size (bf16, GPT-2's vocabulary, the KJV bytes; median ms of steps 6..20, MiB in use on the GPU, MFU)"
    for v in materialized flash cudnn materialized_r1 flash_r1; do
        l=$(log_of t1024_$v)
        printf '  d12 siamese T=1024 B=8 %-16s %-9s %8s ms %8s MiB  MFU %s\n' "$v" "$(step_word t1024_$v)" \
            "$(median_ms "$l" 5)" "$(last_field "$l" 8)" "$(last_field "$l" 7)"
    done
    awk -v m="$(median_ms "$(log_of t1024_materialized)" 5)" -v f="$(median_ms "$(log_of t1024_flash)" 5)" \
        -v c="$(median_ms "$(log_of t1024_cudnn)" 5)" 'BEGIN { best = "-"; b = 1e30
            if (m + 0 > 0 && m < b) { b = m; best = "materialized" }
            if (f + 0 > 0 && f < b) { b = f; best = "flash" }
            if (c + 0 > 0 && c < b) { b = c; best = "cudnn" }
            printf "  fastest attention here (d12, T=1024, one run each; tests/bench_gpu.sh times every size): %s\n", best }'
    l=$(log_of d48)
    echo "  d48 siamese T=1024 B=8 (1.5 B parameters): $(step_word d48); loss $(step_loss "$l" first) ->" \
        "$(step_loss "$l" last) in 20 steps, $(median_ms "$l" 5) ms/step, MFU $(last_field "$l" 7), $(last_field "$l" 8) MiB"
    echo "  resume (-y 1 at step 20 of 30, tiny siamese, bf16): $(step_word resume "${RESUME_OK:-0}") ${RESUME_DESC:-}"
    echo
    echo "compute-sanitizer on the small test cases (${SANITIZE_CASES})"
    printf '  %-10s | %-16s | %s\n' tool tests/test_gpu tests/test_gpu_bf16
    for tool in memcheck racecheck synccheck initcheck; do
        printf '  %-10s | %-16s | %s\n' $tool "$(sanitizer_word san_${tool}_test_gpu)" "$(sanitizer_word san_${tool}_test_gpu_bf16)"
    done
    echo
    echo "NCCL back end, one rank (tests/gpu_nccl_check.sh): $NCCL_LINE"
    echo
    local n_ok=0 n_bad=0 n_not=0 bad=() s w
    for s in "${STEP_ORDER[@]}"; do
        w=$(step_word "$s" "${STEP_PASSED[$s]:-1}")
        case $w in
            ok) n_ok=$((n_ok + 1)) ;;
            "not run") n_not=$((n_not + 1)) ;;
            *) n_bad=$((n_bad + 1)); bad+=("$s: $w") ;;
        esac
    done
    if [ "$DRY_RUN" = 1 ]; then
        echo "dry run: nothing was run; the stages' timeouts add up to ${BUDGET}s (the check must stay under 540s)"
    else
        echo "gpu_check: $n_ok passed, $n_bad failed, $n_not not run${bad:+ (${bad[*]})}"
    fi
    } > "$SUMMARY.tmp"
    mv "$SUMMARY.tmp" "$SUMMARY"
}
declare -A TEST_OK STEP_PASSED
NCCL_LINE="not run yet (stage 8 runs it where at least 130 s of the budget are left)"
STEPS=150
E2E_DESC="2 layers, C=64, 8 steps with accumulation, validation, clipping, weight decay; bounds 1e-5 fp32, 3e-2 bf16"
SANITIZE_CASES="pre: logits*,siamese: logits*,ten AdamW*,flash attention:*,tensor-core*"
summary

# ---------------------------------------------------------------------------------------------------------------
# 2. the build, once; the cuDNN build beside it, in the background until the cuDNN stage needs it
echo; echo "=== build (at $((SECONDS - T0))s)"
find_cudnn
echo "cuDNN: ${CUDNN_WHY:-$CUDNN_MAKE}"
if [ -z "$CUDNN_WHY" ]; then
    start_step build_cudnn 240 make -j"$NPROC" DOCTEST="$PREP/doctest" $CUDNN_MAKE tests/test_gpu_cudnn \
        train_gpt2cu_cudnn tools/profile_gpu_cudnn
fi
stage 100
run_step build 100 make -j"$NPROC" DOCTEST="$PREP/doctest" PRECISION=BF16 ATTENTION=materialized USE_CUDNN=0 \
    train_gpt2cu train_gpt2fp32cu tests/test_gpu tests/test_gpu_bf16 reference_cpu tools/profile_gpu
tail -n 5 "$(log_of build)"
summary

# ---------------------------------------------------------------------------------------------------------------
# 3. gradients, both precisions side by side
echo; echo "=== gradients (at $((SECONDS - T0))s)"
stage 90
for t in test_gpu test_gpu_bf16; do start_step $t 90 env OMP_NUM_THREADS=$((NPROC / 2)) ./tests/$t; done
wait_steps test_gpu test_gpu_bf16
for t in test_gpu test_gpu_bf16; do
    grep -E "GRADCHECK|STEPCHECK|VARIANTCHECK|TCCHECK|ERROR|test cases|SKIPPED" "$(log_of $t)" 2> /dev/null | sed 's/^.*MESSAGE: //'
    if test_log_passed "$(log_of $t)" "${STEP_RC[$t]}"; then TEST_OK[$t]=1; else TEST_OK[$t]=0; fi
    STEP_PASSED[$t]=${TEST_OK[$t]}
done
summary

# the cuDNN attention against the CPU reference and the other attentions (its build has had the time until now)
echo; echo "=== cuDNN (at $((SECONDS - T0))s)"
stage 40
if [ -z "$CUDNN_WHY" ]; then
    wait_steps build_cudnn
    tail -n 5 "$(log_of build_cudnn)"
    if [ "${STEP_RC[build_cudnn]}" = 0 ] || [ "$DRY_RUN" = 1 ]; then
        run_step test_gpu_cudnn 40 env OMP_NUM_THREADS=$NPROC ./tests/test_gpu_cudnn
        grep -E "GRADCHECK|VARIANTCHECK|CUDNNCHECK|CUDNNGRAPHS|ERROR|error:|test cases|SKIPPED" "$(log_of test_gpu_cudnn)" |
            sed 's/^.*MESSAGE: //'
        STEP_PASSED[test_gpu_cudnn]=0
        test_log_passed "$(log_of test_gpu_cudnn)" "${STEP_RC[test_gpu_cudnn]}" 1 && STEP_PASSED[test_gpu_cudnn]=1
    fi
fi
summary

# ---------------------------------------------------------------------------------------------------------------
# 4. training
echo; echo "=== training (at $((SECONDS - T0))s)"
KJV_FLAGS=(-i "$KJV/kjv_train.bin" -j "$KJV/kjv_val.bin")
# the same tiny run on the CPU and on the GPU in both precisions (as tools/emulate_gpu.sh does in the emulator)
E2E=(--norm siamese --layers 2 --channels 64 --heads 2 -b 4 -t 32 -x 8 -l 1e-3 -u 3 -q 0.1 -v 4 -m 2 -s 8 -g 16
     -c 0.1 -d 256)
stage 20
start_step e2e_cpu 25 env OMP_NUM_THREADS=4 ./reference_cpu "${E2E[@]}" "${KJV_FLAGS[@]}" -o "$RUNS/e2e_cpu"
start_step e2e_fp32 25 ./train_gpt2fp32cu "${E2E[@]}" "${KJV_FLAGS[@]}" -o "$RUNS/e2e_fp32"
start_step e2e_bf16 25 ./train_gpt2cu "${E2E[@]}" "${KJV_FLAGS[@]}" -o "$RUNS/e2e_bf16"
wait_steps e2e_cpu e2e_fp32 e2e_bf16
for p in fp32 bf16; do
    tol=1e-5
    [ $p = bf16 ] && tol=3e-2
    STEP_PASSED[e2e_$p]=0
    [ "${STEP_RC[e2e_cpu]}" = 0 ] && [ "${STEP_RC[e2e_$p]}" = 0 ] || continue
    python3 tools/compare_logs.py "$RUNS/e2e_cpu/main.log" "$RUNS/e2e_$p/main.log" $tol > "$RUNS/e2e_$p.cmp" 2>&1 &&
        STEP_PASSED[e2e_$p]=1
    cat "$RUNS/e2e_$p.cmp"
done

# d12 per layout and precision, the six runs side by side (each about 5 GiB)
stage 55
for layout in pre post siamese; do
    for p in bf16 fp32; do
        bin=./train_gpt2cu
        [ $p = fp32 ] && bin=./train_gpt2fp32cu
        start_step train_${layout}_$p 55 $bin --norm $layout -e d12 -b 16 -t 256 -x $STEPS -l 6e-4 -u 50 -q 0.1 \
            -v $STEPS -m 10 -s 0 "${KJV_FLAGS[@]}" -o "$RUNS/ck_${layout}_$p"
    done
done
wait_steps train_{pre,post,siamese}_{bf16,fp32}
for layout in pre post siamese; do
    for p in bf16 fp32; do grep -E "^step +(1|50|100|150)/|^val loss|error" "$(log_of train_${layout}_$p)"; done
done
summary

# the PyTorch peer: the loss of each final checkpoint on the same 10 validation batches
stage 35
cat > "$RUNS/peer.sh" << EOF
for layout in pre post siamese; do
    for p in bf16 fp32; do
        $TORCH_PY tests/bench_torch.py --check "$RUNS/ck_\${layout}_\$p/model_$(printf %08d $STEPS).bin" \
            --shard "$KJV/kjv_val.bin" -b 16 -t 256 -m 10 --dtype \$p > "$RUNS/peer_\${layout}_\$p.txt" 2>&1
        cat "$RUNS/peer_\${layout}_\$p.txt"
    done
done
EOF
run_step peer 35 bash "$RUNS/peer.sh"
cat "$(log_of peer)"
peer_ok=1
for layout in pre post siamese; do
    b=$(log_of train_${layout}_bf16) f=$(log_of train_${layout}_fp32)
    awk -v a="$(peer_loss ${layout}_fp32)" -v b="$(val_loss "$f")" 'BEGIN { exit !(a + 0 > 0 && b + 0 > 0 && (a > b ? a - b : b - a) <= 1e-4 * b) }' || peer_ok=0
    awk -v a="$(peer_loss ${layout}_bf16)" -v b="$(val_loss "$b")" 'BEGIN { exit !(a + 0 > 0 && b + 0 > 0 && (a > b ? a - b : b - a) <= 1e-2 * b) }' || peer_ok=0
done
STEP_PASSED[peer]=$peer_ok
summary

# ---------------------------------------------------------------------------------------------------------------
# 5. memory at T = 1024 (one variant at a time: the MiB are the whole GPU's), then d48
echo; echo "=== memory at T = 1024, d48 (at $((SECONDS - T0))s)"
stage 60
for v in materialized flash cudnn materialized_r1 flash_r1; do
    r=0 bin=./train_gpt2cu
    [ "${v#*_}" = r1 ] && r=1
    if [ "$v" = cudnn ]; then
        bin=./train_gpt2cu_cudnn
        [ -z "$CUDNN_WHY" ] && { [ "${STEP_RC[build_cudnn]:-}" = 0 ] || [ "$DRY_RUN" = 1 ]; } || continue
    fi
    run_step t1024_$v 12 $bin --norm siamese -e d12 --vocab 50257 -b 8 -t 1024 -x 20 -l 6e-4 -u 5 -v 0 \
        -s 0 --attention "${v%%_*}" -r $r "${KJV_FLAGS[@]}"
    grep -E "^\| (attention|memory)|^step +(1|10|20)/|error" "$(log_of t1024_$v)" 2> /dev/null
done
stage 35
run_step d48 35 ./train_gpt2cu --norm siamese -e d48 --vocab 50257 -b 8 -t 1024 -x 20 -l 1e-4 -u 5 -v 0 -s 0 \
    "${KJV_FLAGS[@]}"
grep -E "^\| (parameters|memory|MFU)|^step +(1|2|5|10|15|20)/|error" "$(log_of d48)"
summary

# ---------------------------------------------------------------------------------------------------------------
# 6. checkpoint and resume: 20 steps, then -y 1 to 30, against 30 steps in one go: the same bytes
echo; echo "=== resume (at $((SECONDS - T0))s)"
stage 15
TINY=(--norm siamese --layers 2 --channels 64 --heads 2 -b 4 -t 64 -n 10 -v 10 -s 0 "${KJV_FLAGS[@]}")
cat > "$RUNS/resume.sh" << EOF
./train_gpt2cu ${TINY[*]} -x 30 -o "$RUNS/whole" > "$RUNS/whole.txt" 2>&1 &
./train_gpt2cu ${TINY[*]} -x 20 -o "$RUNS/parts" > "$RUNS/part1.txt" 2>&1 || exit 1
./train_gpt2cu ${TINY[*]} -x 30 -o "$RUNS/parts" -y 1 > "$RUNS/part2.txt" 2>&1 || exit 1
wait \$! || exit 1
tail -n 3 "$RUNS/part2.txt"
cmp "$RUNS/whole/model_00000030.bin" "$RUNS/parts/model_00000030.bin" && cmp "$RUNS/whole/state_00000030.bin" "$RUNS/parts/state_00000030.bin"
EOF
run_step resume 15 bash "$RUNS/resume.sh"
cat "$(log_of resume)"
RESUME_OK=0
case ${STEP_RC[resume]} in
    0) RESUME_OK=1; RESUME_DESC="(model and optimizer state at step 30 identical to the uninterrupted run)" ;;
    -) ;;
    *) RESUME_DESC="(see the log)" ;;
esac
STEP_PASSED[resume]=$RESUME_OK
summary

# ---------------------------------------------------------------------------------------------------------------
# 7. compute-sanitizer, each tool on each test program's small cases, all side by side
echo; echo "=== compute-sanitizer (at $((SECONDS - T0))s)"
stage 55
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck synccheck initcheck; do
    for t in test_gpu test_gpu_bf16; do
        start_step san_${tool}_$t 55 env OMP_NUM_THREADS=2 "$SAN" --tool $tool --error-exitcode 9 --print-limit 20 \
            ./tests/$t -tc="$SANITIZE_CASES"
    done
done
wait_steps san_{memcheck,racecheck,synccheck,initcheck}_{test_gpu,test_gpu_bf16}
for tool in memcheck racecheck synccheck initcheck; do
    for t in test_gpu test_gpu_bf16; do
        l=$(log_of san_${tool}_$t)
        echo "--- $tool $t: $(grep -E 'SUMMARY' "$l" 2> /dev/null | tail -n 1)"
        grep -E '^=+ (Invalid|Race|Barrier|Uninitialized|Error)' "$l" 2> /dev/null | sort | uniq -c | head -n 5
        STEP_PASSED[san_${tool}_$t]=0
        test_log_passed "$l" "${STEP_RC[san_${tool}_$t]}" 1 && STEP_PASSED[san_${tool}_$t]=1
    done
done
summary

# ---------------------------------------------------------------------------------------------------------------
# 8. where the stages left time: the NCCL back end with one rank, under what remains of the deadline
left=$((DEADLINE - SECONDS))
if [ "$DRY_RUN" = 1 ]; then
    NCCL_LINE="dry run: runs where at least 130 s of the budget are left"
elif [ $left -ge 130 ]; then
    echo; echo "=== NCCL, one rank (at $((SECONDS - T0))s, ${left}s left)"
    OUT="$OUT" timeout $((left - 5)) bash tests/gpu_nccl_check.sh "$KJV" > /dev/null 2>&1
    NCCL_LINE=$(tail -n 1 "$OUT/nccl_check.log" 2> /dev/null | grep '^nccl_check: ' || echo "cut off at the deadline")
    echo "$NCCL_LINE"
else
    NCCL_LINE="not run: ${left}s of the budget left (its own call: see the top)"
fi
summary

echo
cat "$SUMMARY"
if [ "$DRY_RUN" = 1 ]; then [ "$BUDGET" -lt 540 ]; exit; fi
! grep -q '^nccl_check: FAILED' <<< "$NCCL_LINE" &&
    tail -n 1 "$SUMMARY" | grep -qE '^gpu_check: [0-9]+ passed, 0 failed, 0 not run'
