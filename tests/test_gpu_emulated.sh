#!/usr/bin/env bash
# The CUDA kernels' logic on every commit, without a GPU: the small cases of tests/test_gpu.cu (the trainer against
# the CPU reference, gradient by gradient) on the CPU emulator, tools/cuda_emulator, which checks every shared-memory
# access against its barriers, every device access against its allocation, every launch against the device's
# limits. fp32 (tests/test_gpu_emu) and bf16 (tests/test_gpu_emu_bf16, with the tensor-core flash attention) run side
# by side, a core each. The cases left out here (C > 2048, GPT-2 small's shape) are in tools/emulate_gpu.sh, with the
# emulated trainer. EMU_CASES overrides the list (doctest's -tc filters, comma-separated).
# Ends with "N passed, N failed" over the test cases of both precisions.
set -u
cd "$(dirname "$0")/.."
CASES=${EMU_CASES:-"pre: *,post: *,siamese: *,siamese --*,siamese with both*,ten AdamW*,-r 1: *,flash attention*,long rows*,C not a multiple*,tensor-core flash*"}
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
pids=()
for bin in tests/test_gpu_emu tests/test_gpu_emu_bf16; do
    if [ ! -x "$bin" ]; then echo "$bin is not built (make $bin)"; echo "0 passed, 1 failed"; exit 1; fi
    "$bin" -tc="$CASES" > "$logs/$(basename "$bin").log" 2>&1 &
    pids+=($!)
done
passed=0 failed=0
for i in 0 1; do
    wait "${pids[$i]}"
    rc=$?
    name=$([ "$i" = 0 ] && echo fp32 || echo bf16)
    log="$logs/$([ "$i" = 0 ] && echo test_gpu_emu || echo test_gpu_emu_bf16).log"
    echo "=== $name"
    grep -E "GRADCHECK|STEPCHECK|VARIANTCHECK|TCCHECK|EMU|ERROR|error:" "$log" | sed 's/^.*MESSAGE: //'
    # doctest's summary, e.g. "[doctest] test cases: 11 | 11 passed | 0 failed | 4 skipped" (skipped: the cases
    # the filter leaves out); echoed in other words, so that tests/run_all.sh reads the total below
    line=$(grep -E '^\[doctest\] test cases:' "$log" | tail -n 1)
    p=$(sed -nE 's/.*\| *([0-9]+) passed.*/\1/p' <<< "$line")
    f=$(sed -nE 's/.*\| *([0-9]+) failed.*/\1/p' <<< "$line")
    if [ -z "$line" ] || { [ "$rc" -ne 0 ] && [ "${f:-0}" -eq 0 ]; }; then
        echo "$name: exit status $rc; the end of its output:"
        tail -n 30 "$log"
        p=${p:-0} f=$((${f:-0} + 1))
    fi
    echo "$name: ${p:-0} test cases passed, ${f:-0} failed"
    passed=$((passed + p)) failed=$((failed + f))
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
