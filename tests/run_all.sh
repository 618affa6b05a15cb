#!/usr/bin/env bash
# Runs every test suite and ends with one plain line: "N passed, N failed" (", N skipped" when some were skipped).
# A suite is a program whose output ends with either doctest's summary or a line "P passed, F failed[, S skipped]".
# A suite that exits non-zero counts as failed even if its summary says otherwise; one with no summary, likewise.
# The suites share a temporary folder of their own (TMPDIR), which must be empty at the end: a file a suite or a
# script it runs leaves there (in /tmp, for a user) is one more failure. ONLY="NAME ..." runs those suites alone
# (the GPU suites' line, run or skipped, is "gpu").
set -u
cd "$(dirname "$0")/.."
TORCH_PY=${TORCH_PY:-/usr/bin/python3}
PY=${PYTHON:-python3}
ONLY=${ONLY:-}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
passed=0 failed=0 skipped=0
logdir=$(mktemp -d)
suite_tmp=$(mktemp -d)
export TMPDIR=$suite_tmp

selected() { [ -z "$ONLY" ] || [[ " $ONLY " == *" $1 "* ]]; }

run_suite() {
    local name=$1; shift
    selected "$name" || return 0
    local log="$logdir/$name.log" start=$SECONDS
    "$@" > "$log" 2>&1
    local rc=$? p=0 f=0 s=0 line
    line=$(grep -E '^\[doctest\] test cases:' "$log" | tail -n 1)
    if [ -n "$line" ]; then
        p=$(sed -E 's/.*\| *([0-9]+) passed.*/\1/' <<< "$line")
        f=$(sed -E 's/.*\| *([0-9]+) failed.*/\1/' <<< "$line")
        s=$(sed -E 's/.*\| *([0-9]+) skipped.*/\1/' <<< "$line")
    else
        line=$(grep -E '^[0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?$' "$log" | tail -n 1)
        if [ -n "$line" ]; then
            p=$(sed -E 's/^([0-9]+) passed.*/\1/' <<< "$line")
            f=$(sed -E 's/.* ([0-9]+) failed.*/\1/' <<< "$line")
            grep -q skipped <<< "$line" && s=$(sed -E 's/.* ([0-9]+) skipped$/\1/' <<< "$line")
        fi
    fi
    if [ -z "$line" ] || { [ $rc -ne 0 ] && [ "$f" -eq 0 ]; }; then
        f=$((f + 1))
        line="(exit status $rc, no usable summary)"
    fi
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
    printf '%-16s %4d passed %3d failed %3d skipped  %4ds\n' "$name" "$p" "$f" "$s" $((SECONDS - start))
    if [ "$f" -ne 0 ]; then
        echo "---- $name failed; the end of its output ($log):"
        tail -n 40 "$log"
        echo "----"
    fi
    if [ "$s" -ne 0 ]; then grep -m1 -i 'skip' "$log" | sed 's/^/  /'; fi
}

run_suite data          $PY tests/test_data.py
run_suite gradients     ./tests/test_gradients
run_suite reference     ./tests/test_reference
run_suite cli           bash tests/test_cli.sh
run_suite distributed   bash tests/test_distributed.sh
run_suite experiments   bash experiments/smoke_test.sh
run_suite gpu_scripts   bash tests/test_gpu_scripts.sh
run_suite emulator      ./tests/test_emulator
run_suite gpu_emulated  bash tests/test_gpu_emulated.sh
[ -f tests/torch_check.py ] && run_suite torch $TORCH_PY tests/torch_check.py
run_suite streams       env TORCH_PY="$TORCH_PY" bash tests/test_streams.sh
run_suite commands      $PY tests/test_commands.py
run_suite no_cuda       bash tests/test_no_cuda.sh
if ! selected gpu; then :
elif command -v "${NVCC:-nvcc}" > /dev/null; then
    ONLY= run_suite archs bash tests/test_archs.sh
    ONLY= run_suite gpu ./tests/test_gpu
    ONLY= run_suite gpu_bf16 ./tests/test_gpu_bf16
    ONLY= run_suite gpu_cudnn ./tests/test_gpu_cudnn
else  # the CUDA code is not even compiled: say so, rather than leave the GPU suites out silently
    skipped=$((skipped + 4))
    printf '%-16s %4s passed %3s failed %3d skipped\n' "gpu suites" - - 4
    echo "  skipped: the GPU suites (tests/test_archs.sh, tests/test_gpu, tests/test_gpu_bf16, tests/test_gpu_cudnn): nvcc is not installed, so the CUDA code was not compiled"
fi

# what the suites left in their temporary folder (a user's /tmp)
left=$(cd "$suite_tmp" && find . -mindepth 1 -maxdepth 2 | sed 's|^\./||' | head -n 20)
if [ -n "$left" ]; then
    failed=$((failed + 1))
    echo "---- the suites left files in their temporary folder ($TMPDIR): $(tr '\n' ' ' <<< "$left")"
fi
rm -rf "$suite_tmp"
[ "$failed" -eq 0 ] && rm -rf "$logdir"
if [ "$skipped" -gt 0 ]; then
    echo "$passed passed, $failed failed, $skipped skipped"
else
    echo "$passed passed, $failed failed"
fi
[ "$failed" -eq 0 ]
