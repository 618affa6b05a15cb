#!/usr/bin/env bash
# Runs the CUDA trainer's own source on the CPU, for checking kernel changes on a machine without a GPU, in each
# precision (PRECISIONS="FP32 BF16" by default; TEST_FILTER picks test cases by name):
#   1. tests/test_gpu.cu built against tools/cuda_emulator (every case but the 12-layer ones: too slow here),
#   2. ./train_gpt2cu's main, emulated, against ./reference_cpu with the same flags: main.log must match
#      (losses, norms, learning rates, validation), apart from the timings: each number within 1e-5 relative in
#      fp32, within 3e-2 in bf16,
#   3. tools/profile_gpu at a tiny shape: every part of a step is timed in each layout.
# The emulator (tools/cuda_emulator; what it checks and what it cannot show: docs/cuda.md, Verification) runs each
# block's threads as coroutines with adversarial interleavings, checks every shared-memory access against its
# barriers, every device access against its allocation and alignment, every launch against the limits of EMU_DEVICE
# (default sm_90), and computes the cuBLAS calls from their definition. It is not a substitute for tests/gpu_check.sh
# on a GPU. `make test` runs the fast part of step 1 (tests/test_gpu_emulated.sh). About 6 minutes on two cores
# (both precisions; 4 CPU-minutes). Needs g++, perl, the KJV shards.
# Usage: bash tools/emulate_gpu.sh
# STAGES="test_gpu train profile" (the default: all three) runs some of them; CPU_TRAINER and GPU_TRAINER replace
# ./reference_cpu and the emulated trainer of step 2 (tests/test_gpu_scripts.sh runs step 2 with two that fail).
# Step 2 passes only when both trainers finish (exit status 0) and their logs agree: two runs that die at the same
# step write the same (partial) main.log.
set -u
cd "$(dirname "$0")/.."
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
DOCTEST=${DOCTEST:-/usr/include/doctest}
# tools/cuda_emulator/emucc rewrites the kernel launches and __shared__ declarations of a copy of the sources and
# compiles it with every kernel memory access checked; OpenMP threads (the emulated cuBLAS, the CPU reference) sleep
# between their parallel loops instead of spinning against the kernels on the other core
EMUCC=tools/cuda_emulator/emucc
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
STAGES=" ${STAGES:-test_gpu train profile} "
stage() { [[ $STAGES == *" $1 "* ]]; }
CPU_TRAINER=${CPU_TRAINER:-./reference_cpu}
GPU_TRAINER=${GPU_TRAINER:-}
[ "$CPU_TRAINER" != ./reference_cpu ] || make -s reference_cpu || exit 1
FL=(--norm siamese --layers 2 --channels 64 --heads 2 -b 4 -t 32 -x 8 -l 1e-3 -u 3 -q 0.1 -v 4 -m 2 -s 8 -g 16
    -c 0.1 -d 256)
cpu_rc=0
stage train && { "$CPU_TRAINER" "${FL[@]}" -o "$W/cpu" > "$W/cpu.txt" 2>&1; cpu_rc=$?; }

passed=0 failed=0
for P in ${PRECISIONS:-FP32 BF16}; do
echo "=== $P"
if stage test_gpu; then
    $EMUCC -DENABLE_$P -I"$DOCTEST" -o "$W/test_gpu" tests/test_gpu.cu || { echo "0 passed, 1 failed"; exit 1; }
    "$W/test_gpu" -tce="*GPT-2 small*" ${TEST_FILTER:+-tc="$TEST_FILTER"} 2>&1 | grep -E "GRADCHECK|STEPCHECK|VARIANTCHECK|TCCHECK|test cases|EMU|ERROR|values"
    if [ "${PIPESTATUS[0]}" -eq 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
fi

if stage train; then
    train=$GPU_TRAINER
    if [ -z "$train" ]; then
        train=$W/train
        $EMUCC -DENABLE_$P -o "$train" train_gpt2.cu || { echo "0 passed, 1 failed"; exit 1; }
    fi
    rm -rf "$W/gpu"
    "$train" "${FL[@]}" -o "$W/gpu" > "$W/gpu.txt" 2>&1
    gpu_rc=$?
    # both finish, and write the same lines, each number within 1e-5 relative in fp32 and 3e-2 in bf16 (the timings
    # aside)
    tol=1e-5
    [ "$P" = FP32 ] || tol=3e-2
    if [ $cpu_rc -ne 0 ] || [ $gpu_rc -ne 0 ]; then
        echo "FAIL: the trainers did not both finish: reference_cpu exit status $cpu_rc, emulated $P train_gpt2cu $gpu_rc"
        echo "  reference_cpu's end:"; tail -n 3 "$W/cpu.txt"; echo "  emulated run's end:"; tail -n 3 "$W/gpu.txt"
        failed=$((failed + 1))
    elif python3 tools/compare_logs.py "$W/cpu/main.log" "$W/gpu/main.log" $tol; then
        echo "emulated $P train_gpt2cu and reference_cpu wrote the same main.log ($(wc -l < "$W/gpu/main.log") lines)"
        passed=$((passed + 1))
    else
        echo "main.log differs (above); emulated run's end:"; tail -n 5 "$W/gpu.txt"
        failed=$((failed + 1))
    fi
fi
done

# tools/profile_gpu (bf16) runs and accounts for every part of a step in each layout
stage profile && echo "=== tools/profile_gpu"
every_part() {  # each part (and the step) on 4 lines: three layouts' tables and the comparison
    for part in embedding norms "attention matmuls" "attention core" mlp "logits and loss" optimizer step; do
        [ "$(grep -c "^$part  " "$1")" -eq 4 ] || { echo "'$part' is not in every table"; return 1; }
    done
}
if ! stage profile; then :
elif $EMUCC -DENABLE_BF16 -o "$W/profile" tools/profile_gpu.cu &&
    "$W/profile" --layers 2 --channels 64 --heads 2 --vocab 64 -b 2 -t 32 -x 1 > "$W/profile.txt" 2>&1 &&
    every_part "$W/profile.txt"; then
    echo "tools/profile_gpu: every part of a step timed in each layout, and the layouts compared"
    passed=$((passed + 1))
else
    echo "tools/profile_gpu failed:"; tail -n 20 "$W/profile.txt"
    failed=$((failed + 1))
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
