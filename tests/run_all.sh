#!/usr/bin/env bash
# Runs every test suite and ends with one plain line: "N passed, N failed" (", N skipped" when some were skipped).
# A suite is a program whose output ends with either doctest's summary or a line "P passed, F failed[, S skipped]".
# A suite that exits non-zero counts as failed even if its summary says otherwise; one with no summary, likewise.
# --build-cuda (make test): nvcc's programs (make cuda-bins) are built here, in the background, while the suites that
# run none of them go ahead; the suites that run one wait for the build (below wait_cuda_build), and a failed build
# counts as one failed suite, "cuda build".
# The suites share a temporary folder of their own (TMPDIR), which must be empty at the end: a file a suite or a
# script it runs leaves there (in /tmp, for a user) is one more failure. ONLY="NAME ..." runs those suites alone
# (the GPU suites' line, run or skipped, is "gpu"; ONLY=selftest runs a 3-second suite of this script's own, for
# tests/test_commands.py). Each suite says when it starts (what it proves, about how long it takes), and one that
# runs longer than HEARTBEAT seconds (30) says every HEARTBEAT seconds that it still runs and how many cases it has
# done; so does a wait for the CUDA build. The last line stays the plain summary.
set -u
cd "$(dirname "$0")/.."
build_cuda=0
case "${1:-}" in
    --build-cuda) build_cuda=1 ;;
    "") ;;
    *) echo "usage: tests/run_all.sh [--build-cuda]" >&2; exit 2 ;;
esac
TORCH_PY=${TORCH_PY:-/usr/bin/python3}
PY=${PYTHON:-python3}
ONLY=${ONLY:-}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
HEARTBEAT=${HEARTBEAT:-30}
passed=0 failed=0 skipped=0
logdir=$(mktemp -d)
suite_tmp=$(mktemp -d)
export TMPDIR=$suite_tmp

selected() { [ -z "$ONLY" ] || [[ " $ONLY " == *" $1 "* ]]; }

# What each suite proves and about how long it takes on two idle cores (docs/testing.md has the whole list), and
# about how many cases it prints a line for ("ok ..."/"FAIL ..."/"skip ..."; 0: it reports at its end only)
about() {
    case $1 in
        gradients)    echo "float64 finite differences of every layout's gradients|25|0" ;;
        data)         echo "the data tool's formats, splits and failures|25|0" ;;
        reference)    echo "the CPU reference: causality, checkpoints, AdamW, determinism|20|0" ;;
        gemm)         echo "the fast matrix product and attention's sums, bit for bit their plain loops|10|0" ;;
        clang)        echo "the CPU programs built by Clang: the model's numbers as g++'s, host/gemm.h's tests|25|18" ;;
        experiments)  echo "each experiment script at a toy size; the spike and outcome definitions|45|71" ;;
        emulator)     echo "the CUDA emulator catches each planted bug class|15|0" ;;
        gpu_emulated) echo "the CUDA code's small cases and the trainer's errors on the emulator|75|60" ;;
        torch)        echo "the PyTorch twin: logits, loss, every gradient, one AdamW step|30|0" ;;
        twin)         echo "the PyTorch twin trains alone, as the C++ trainer does (docs/train_model.py)|15|0" ;;
        notebook)     echo "the class notebook is what its .py builds, and runs end to end at the test length|20|0" ;;
        cover)        echo "covering one stream in the PyTorch twin, as the C++ reference does|15|0" ;;
        streams)      echo "tools/streams.py on toy models|20|0" ;;
        exercises)    echo "the course's graders fail stubs and planted mistakes, pass the reference|25|67" ;;
        commands)     echo "every command the scripts call is installed by .ci/deps or essential|5|0" ;;
        cli)          echo "every bad input and flag of the trainers is one error line; resume is bit-exact|110|171" ;;
        distributed)  echo "mpirun -np 2 trains bit for bit as one process; its refusals|45|59" ;;
        gpu_scripts)  echo "the GPU check's plumbing without a GPU; the PyTorch peer|60|0" ;;
        no_cuda)      echo "the paths for a machine without CUDA (the toolkit hidden)|20|0" ;;
        archs)        echo "the CUDA programs hold code for every architecture they were built for|10|0" ;;
        gpu)          echo "the CPU reference against CUDA on the GPU, float32 (skipped without one)|5|0" ;;
        gpu_bf16)     echo "the CPU reference against CUDA on the GPU, bf16 (skipped without one)|5|0" ;;
        gpu_cudnn)    echo "the cuDNN attention against the reference on the GPU (skipped without one)|5|0" ;;
        selftest)     echo "this script's start line and heartbeat (ONLY=selftest)|3|3" ;;
        *)            echo "|0|0" ;;
    esac
}

# a line every HEARTBEAT seconds while a suite runs: how long, and the cases it has printed so far (in the
# background; its sleep holds none of our output, so that a pipe after make test is not kept open by it)
heartbeat() {  # NAME LOG CASES
    local name=$1 log=$2 cases=$3 t0 n
    t0=$(date +%s)
    while sleep "$HEARTBEAT" > /dev/null 2>&1 < /dev/null; do
        n=$(grep -cE '^(ok|FAIL|skip)\b' "$log" 2> /dev/null)
        if [ "$cases" -gt 0 ]; then
            printf '%-16s ... still running, %ds: %d cases done of about %d\n' "$name" $(($(date +%s) - t0)) "${n:-0}" "$cases"
        else
            printf '%-16s ... still running, %ds (it reports at its end)\n' "$name" $(($(date +%s) - t0))
        fi
    done
}
heartbeat_pid=""
stop_heartbeat() { [ -z "$heartbeat_pid" ] || { kill "$heartbeat_pid" 2> /dev/null; wait "$heartbeat_pid" 2> /dev/null; }; heartbeat_pid=""; }

run_suite() {
    local name=$1; shift
    selected "$name" || return 0
    local log="$logdir/$name.log" start=$SECONDS what secs cases
    IFS='|' read -r what secs cases <<< "$(about "$name")"
    printf '%-16s started: %s (about %d s on two idle cores)\n' "$name" "${what:-$*}" "$secs"
    : > "$log"
    heartbeat "$name" "$log" "$cases" &
    heartbeat_pid=$!
    "$@" > "$log" 2>&1
    local rc=$? p=0 f=0 s=0 line
    stop_heartbeat
    # the suite's own summary is its end: doctest's among its last three lines (test cases, assertions, status), the
    # plain one the last line (not a line of a program it ran, with the suite ending before its own)
    line=$(grep -v '^[[:space:]]*$' "$log" | tail -n 3 | grep -E '^\[doctest\] test cases:' | tail -n 1)
    if [ -n "$line" ]; then
        p=$(sed -E 's/.*\| *([0-9]+) passed.*/\1/' <<< "$line")
        f=$(sed -E 's/.*\| *([0-9]+) failed.*/\1/' <<< "$line")
        s=$(sed -E 's/.*\| *([0-9]+) skipped.*/\1/' <<< "$line")
    else
        line=$(grep -v '^[[:space:]]*$' "$log" | tail -n 1 | grep -E '^[0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?$')
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

# The CUDA build in the background (--build-cuda) starts after the gradients suite, which runs first and alone: its
# two OpenMP threads meet at a barrier in every loop, and a busy core makes each barrier wait. While the build runs,
# a thread that waits sleeps (OMP_WAIT_POLICY=passive, unless set) rather than spin on a core the build could use.
# It makes first the program cli and distributed run (FIRST_CUDA_BINS), so that they need not wait for the rest (make
# cuda-bins): wait_cuda_build first waits for the one, wait_cuda_build for all.
FIRST_CUDA_BINS="train_gpt2cu"
build_pid="" build_log="$logdir/cuda_build.log" first_built="$logdir/cuda_build.first" policy_set=0
start_cuda_build() {
    [ $build_cuda = 1 ] && command -v "${NVCC:-nvcc}" > /dev/null || return 0
    # in its own process group (setsid), so that an interrupted run stops the whole build
    setsid bash -c 'make --no-print-directory -j"$1" $2 && : > "$3" && make --no-print-directory -j"$1" cuda-bins' \
        _ "$(nproc)" "$FIRST_CUDA_BINS" "$first_built" > "$build_log" 2>&1 < /dev/null &
    build_pid=$!
    trap '[ -z "$build_pid" ] || kill -- -"$build_pid" 2> /dev/null; stop_heartbeat' EXIT
    trap 'exit 130' INT TERM
    [ -n "${OMP_WAIT_POLICY+set}" ] || { export OMP_WAIT_POLICY=passive; policy_set=1; }
}
wait_cuda_build() {  # [first]; the build's end is a line of its own (a failure counts once, when the build stops)
    [ -n "$build_pid" ] || return 0
    local start=$SECONDS rc said=0
    wait_note() {  # a line every HEARTBEAT seconds of waiting
        [ $((SECONDS - start)) -ge $((said + HEARTBEAT)) ] || return 0
        said=$((SECONDS - start))
        printf '%-16s ... waiting for %s, %ds\n' "cuda build" "$1" "$said"
    }
    if [ "${1:-}" = first ]; then
        while [ ! -e "$first_built" ] && kill -0 "$build_pid" 2> /dev/null; do sleep 1; wait_note "$FIRST_CUDA_BINS"; done
        if [ -e "$first_built" ]; then
            printf '%-16s %s built in the background, waited %ds\n' "cuda build" "$FIRST_CUDA_BINS" $((SECONDS - start))
            return 0
        fi
    fi
    while kill -0 "$build_pid" 2> /dev/null; do sleep 1; wait_note "make cuda-bins"; done
    wait "$build_pid"; rc=$?
    build_pid=""
    [ $policy_set = 1 ] && unset OMP_WAIT_POLICY
    if [ $rc -eq 0 ]; then
        printf '%-16s built in the background (make cuda-bins), waited %ds\n' "cuda build" $((SECONDS - start))
    else
        failed=$((failed + 1))
        printf '%-16s FAILED (exit status %d)\n' "cuda build" $rc
        echo "---- cuda build failed; the end of its output ($build_log):"
        tail -n 40 "$build_log"
        echo "----"
    fi
}

if [ -n "$ONLY" ]; then  # named only: ONLY=selftest (SELFTEST_SCRIPT replaces its script, for a test)
    run_suite selftest bash -c "${SELFTEST_SCRIPT:-for i in 1 2 3; do echo \"ok - case \$i\"; sleep 1; done; echo \"3 passed, 0 failed\"}"
fi
run_suite gradients     ./tests/test_gradients
start_cuda_build
# the suites that run no CUDA program (nvcc's), beside the build
run_suite data          $PY tests/test_data.py
run_suite reference     ./tests/test_reference
run_suite gemm          ./tests/test_gemm
run_suite clang         bash tests/test_clang.sh
run_suite experiments   bash experiments/smoke_test.sh
run_suite emulator      ./tests/test_emulator
run_suite gpu_emulated  bash tests/test_gpu_emulated.sh
[ -f tests/torch_check.py ] && run_suite torch $TORCH_PY tests/torch_check.py
run_suite twin          $TORCH_PY tests/twin_check.py
run_suite notebook      $TORCH_PY tests/test_notebook.py
run_suite cover         $TORCH_PY tests/cover_stream_check.py
run_suite streams       env TORCH_PY="$TORCH_PY" bash tests/test_streams.sh
run_suite exercises     $PY tests/test_exercises.py
run_suite commands      $PY tests/test_commands.py
# the suites that run one: ./train_gpt2cu (cli, distributed), beside the rest of the build; then tests/test_gpu
# (gpu_scripts and no_cuda, whose no-GPU runs of the GPU scripts must end within 30 s: not beside a build) and the
# GPU suites
wait_cuda_build first
run_suite cli           bash tests/test_cli.sh
run_suite distributed   bash tests/test_distributed.sh
wait_cuda_build
run_suite gpu_scripts   bash tests/test_gpu_scripts.sh
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
