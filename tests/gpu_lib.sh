# What tests/gpu_check.sh and tests/bench_gpu.sh share (sourced, not run): the prepared folder, the CUDA toolkit,
# the "is there a usable GPU" probe, steps under a time budget, and how a test program's log reads.
#
# The budget. A script declares its stages in order with their nominal seconds (`plan NAME:SECONDS ...`; BUDGET is
# their sum, which must fit the script's whole time, DEADLINE seconds after it started) and enters each with `stage
# NAME`. A stage may run until DEADLINE minus the nominal seconds of every later stage: what an earlier stage left
# unused passes on, and a slow stage is cut before it eats what a later, less important one was given. A step is
# a command run under a timeout with its output in a log: `run_step NAME SECONDS CMD...` (or several side by side,
# `start_step` and `wait_steps`); its timeout is the smaller of its own SECONDS and what is left of its stage, so
# the script can never outrun its budget, and a step that no longer fits is not started and reads "not run (time)".
# `start_background NAME SECONDS CMD...` is bound by DEADLINE only (a build beside the stages). After the last
# stage, `stage_extra NAME` runs what is left to the end. DRY_RUN=1 runs nothing: each stage is taken to last its
# nominal seconds, each step prints what it would run and its timeout, and `print_plan` prints the budget table.
# The script sets T0 (its start, in $SECONDS) and DEADLINE (T0 + its whole time) before its first stage.

PREP=${GPU_PREP:-.gpu}
DRY_RUN=${DRY_RUN:-0}
BUDGET=0               # the nominal seconds of all stages (plan)
declare -A STEP_RC     # NAME -> exit status (124 or 137: timed out; "-": not run)
declare -A STEP_SECONDS
declare -A STEP_PID STEP_EPOCH STEP_LOG_OF
declare -A STAGE_SECONDS STAGE_STEPS
STEP_ORDER=()
STAGE_ORDER=()
STAGE="" STAGE_END=0   # the stage now running and when it must end (in $SECONDS)
# A step's output goes to its log line by line, not in blocks: a program whose stdout is a file keeps up to a few KiB
# in its buffer (doctest's MESSAGE lines, for one), and a step cut at its timeout would lose them with its buffer.
# stdbuf (coreutils) makes C's stdio, and so C++'s std::cout, flush at every newline in the program and the ones it
# starts (compute-sanitizer's target too)
LINE_BUFFERED=()
command -v stdbuf > /dev/null && LINE_BUFFERED=(stdbuf -oL -eL)
DRY_CLOCK=0            # DRY_RUN: where the stages would be, each taking its nominal seconds

die() { echo "error: $*" >&2; exit 2; }

# the CUDA toolkit where it usually lives, if it is not on the path (nvcc to build, libcublas to run)
setup_toolkit() {
    command -v nvcc > /dev/null || { [ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"; }
    if [ -d /usr/local/cuda/lib64 ]; then
        export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
    # the Python that holds PyTorch (on the lent H200 machine a plain python3; elsewhere Debian's)
    if [ -z "${TORCH_PY:-}" ]; then
        TORCH_PY=python3
        python3 -c "import torch" 2> /dev/null || { [ -x /usr/bin/python3 ] && TORCH_PY=/usr/bin/python3; }
    fi
}

# The folder `make gpu-prep` writes (docs/cuda.md): its files must all be there and unchanged (MANIFEST.sha256).
# Prints where the working tree stands against the one gpu-prep recorded. Fails at once, before any build.
check_prep() {
    [ -d "$PREP" ] || die "'$PREP' is missing: run 'make gpu-prep' where the working tree is, and carry '$PREP' with the call"
    local f
    for f in MANIFEST.sha256 SOURCE kjv/kjv_train.bin kjv/kjv_val.bin kjv/kjv_tokenizer.bin doctest/doctest.h; do
        [ -f "$PREP/$f" ] || die "'$PREP/$f' is missing: run 'make gpu-prep' again and carry '$PREP'"
    done
    (cd "$PREP" && sha256sum --quiet -c MANIFEST.sha256 > /dev/null 2>&1) ||
        die "'$PREP' does not match its MANIFEST.sha256 (a file is truncated or changed): run 'make gpu-prep' again"
    local changed
    changed=$(sha256sum -c "$PREP/SOURCES.sha256" 2> /dev/null | grep -vc ': OK$')
    TREE="$(head -n 1 "$PREP/SOURCE")"
    if [ "$changed" -gt 0 ]; then TREE="$TREE, and $changed file(s) changed since gpu-prep"; fi
}

# cuDNN for the USE_CUDNN build: the frontend's headers from the prepared folder, cuDNN itself from the toolkit or,
# where the toolkit has none (the lent H200), from PyTorch's pip package nvidia-cudnn-cu13 (site-packages/nvidia/
# cudnn: include/ and lib/). Sets CUDNN_MAKE (the make variables, or empty) and CUDNN_WHY (why not, or empty).
find_cudnn() {
    CUDNN_MAKE="" CUDNN_WHY=""
    if [ ! -f "$PREP/cudnn-frontend/include/cudnn_frontend.h" ]; then
        CUDNN_WHY="no cuDNN frontend in $PREP (make gpu-prep fetches it where nvcc is)"
        return
    fi
    local toolkit
    toolkit=$(dirname "$(command -v nvcc 2> /dev/null || echo /usr/local/cuda/bin/nvcc)")/../include
    if [ -f "$toolkit/cudnn.h" ] || [ -f /usr/include/cudnn.h ] || [ -f /usr/include/x86_64-linux-gnu/cudnn.h ]; then
        CUDNN_MAKE="CUDNN_FRONTEND_PATH=$PREP/cudnn-frontend"
        return
    fi
    local dir
    dir=$($TORCH_PY -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2> /dev/null)
    if [ -n "$dir" ] && [ -f "$dir/include/cudnn.h" ]; then
        CUDNN_MAKE="CUDNN_FRONTEND_PATH=$PREP/cudnn-frontend CUDNN_PATH=$dir"
        export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"  # cuDNN opens its sub-libraries by name
        return
    fi
    CUDNN_WHY="no cuDNN: no cudnn.h with the toolkit, and $TORCH_PY has no nvidia.cudnn package"
}

# Is there a GPU that runs a kernel? Within 30 seconds either way. Sets GPU_NAME; without one: "error: no GPU".
# Its files (the probe, its logs) live in a temporary folder that goes on every outcome.
probe_gpu() {
    local dir rc
    dir=$(mktemp -d) || { echo "error: no GPU usable: no temporary folder for the probe" >&2; return 1; }
    probe_gpu_in "$dir"
    rc=$?
    rm -rf "$dir"
    return $rc
}
probe_gpu_in() {
    local probe=$1/gpu_probe
    if ! command -v nvidia-smi > /dev/null; then
        echo "error: no GPU: nvidia-smi is not on this machine" >&2
        return 1
    fi
    if ! timeout 10 nvidia-smi -L > "$probe.smi" 2>&1 || ! grep -q '^GPU ' "$probe.smi"; then
        echo "error: no GPU: nvidia-smi lists none ($(head -c 200 "$probe.smi" | tr '\n' ' '))" >&2
        return 1
    fi
    if ! command -v nvcc > /dev/null; then  # a driver without the toolkit: nothing here can run on it
        echo "error: no GPU usable: nvidia-smi lists a GPU, but there is no CUDA toolkit (nvcc) to build for it" \
            "(PATH=$PATH)" >&2
        return 1
    fi
    local tool
    for tool in make g++; do
        command -v $tool > /dev/null || { echo "error: '$tool' is not on this machine (PATH=$PATH)" >&2; return 1; }
    done
    if ! timeout 15 nvcc -o "$probe" tests/gpu_probe.cu > "$probe.build" 2>&1; then
        echo "error: no GPU usable: tests/gpu_probe.cu does not build: $(tail -n 3 "$probe.build")" >&2
        return 1
    fi
    if ! timeout 5 "$probe" > "$probe.out" 2>&1; then
        echo "error: no GPU usable: $(tail -n 2 "$probe.out")" >&2
        return 1
    fi
    GPU_NAME=$(sed -n 's/^GPU: //p' "$probe.out")
    echo "GPU: $GPU_NAME"
}

# plan NAME:SECONDS ... : the stages in order and their nominal seconds
plan() {
    local item
    for item in "$@"; do
        STAGE_ORDER+=("${item%%:*}")
        STAGE_SECONDS[${item%%:*}]=${item##*:}
        BUDGET=$((BUDGET + ${item##*:}))
    done
}

# the clock the budget is kept in: $SECONDS, or in a dry run where the stages would be if each took its nominal time
now() { if [ "$DRY_RUN" = 1 ]; then echo $((T0 + DRY_CLOCK)); else echo "$SECONDS"; fi; }

# stage NAME: the stage may run until DEADLINE minus what the later stages reserve
stage() {
    local name=$1 s later=0 seen=0
    [ -n "${STAGE_SECONDS[$name]:-}" ] || die "internal: stage '$name' is not in the plan"
    for s in "${STAGE_ORDER[@]}"; do
        [ $seen = 1 ] && later=$((later + STAGE_SECONDS[$s]))
        [ "$s" = "$name" ] && seen=1
    done
    dry_advance
    STAGE=$name
    STAGE_END=$((DEADLINE - later))
}

# stage_extra NAME: after the planned stages, until DEADLINE (what they left unused)
stage_extra() {
    dry_advance
    STAGE=$1
    STAGE_END=$DEADLINE
}

# a dry run's clock: the stage that ends took its nominal seconds
dry_advance() {
    if [ "$DRY_RUN" = 1 ] && [ -n "$STAGE" ] && [ -n "${STAGE_SECONDS[$STAGE]:-}" ]; then
        DRY_CLOCK=$((DRY_CLOCK + STAGE_SECONDS[$STAGE]))
    fi
}

# seconds left in the stage, and before the deadline
stage_left() { echo $((STAGE_END - $(now))); }
time_left() { echo $((DEADLINE - $(now))); }

# run_step NAME SECONDS CMD... : one step in the foreground, its output in $RUNS/NAME.log
run_step() {
    start_step "$@"
    wait_steps "$1"
}

# start_step NAME SECONDS CMD... : in the background (wait_steps NAME... collects them), within the stage
start_step() {
    local name=$1 seconds=$2
    shift 2
    launch_step "$name" "$seconds" "$STAGE_END" "$@"
}

# start_background NAME SECONDS CMD... : like start_step, bound by DEADLINE only (a build beside the stages)
start_background() {
    local name=$1 seconds=$2
    shift 2
    launch_step "$name" "$seconds" "$DEADLINE" "$@"
}

launch_step() {
    local name=$1 seconds=$2 end=$3
    shift 3
    STEP_ORDER+=("$name")
    STEP_LOG_OF[$name]="$RUNS/$name.log"
    local left=$((end - $(now)))
    [ "$seconds" -lt "$left" ] || seconds=$left
    STAGE_STEPS[$STAGE]+="${STAGE_STEPS[$STAGE]:+, }$name ${seconds}"
    if [ "$DRY_RUN" = 1 ]; then
        echo "[dry run] $name: timeout ${seconds}s: $*"
        STEP_RC[$name]="-"
        STEP_SECONDS[$name]=0
        return
    fi
    if [ "$seconds" -lt "${MIN_STEP_SECONDS:-5}" ]; then
        echo "--- $name: not run (the time budget is spent)"
        STEP_RC[$name]="-"
        STEP_SECONDS[$name]=0
        return
    fi
    # its seconds from its own end (wait_steps may collect a step that ran beside others long after it ended)
    STEP_EPOCH[$name]=$(date +%s)
    ( timeout --kill-after=5 "$seconds" "${LINE_BUFFERED[@]}" "$@"; rc=$?; date +%s > "$RUNS/$name.end"; exit $rc ) \
        > "$RUNS/$name.log" 2>&1 &
    STEP_PID[$name]=$!
}

wait_steps() {
    local name rc
    for name in "$@"; do
        [ -n "${STEP_PID[$name]:-}" ] || continue
        wait "${STEP_PID[$name]}"
        rc=$?
        STEP_RC[$name]=$rc
        STEP_SECONDS[$name]=$(( $(cat "$RUNS/$name.end" 2> /dev/null || date +%s) - STEP_EPOCH[$name] ))
        unset "STEP_PID[$name]"
        local note=""
        if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then note=" (timed out)"; fi
        echo "--- $name: exit status $rc$note, ${STEP_SECONDS[$name]}s"
    done
}

# The budget table: each stage's nominal seconds, when it must end at the latest (in seconds from the start: the
# deadline minus what the later stages reserve) and its steps with their timeouts in seconds (as this run, or the
# dry run with each stage taking its nominal time, computed them); then what ran after the planned stages.
print_plan() {
    local s at=0
    printf '  %-11s %7s %8s   %s\n' stage seconds "ends by" "steps (timeout s)"
    for s in "${STAGE_ORDER[@]}"; do
        at=$((at + STAGE_SECONDS[$s]))
        printf '  %-11s %7s %7ss   %s\n' "$s" "${STAGE_SECONDS[$s]}" "$((DEADLINE - T0 - BUDGET + at))" \
            "${STAGE_STEPS[$s]:--}"
    done
    for s in "${!STAGE_STEPS[@]}"; do
        [ -n "${STAGE_SECONDS[$s]:-}" ] || printf '  %-11s %7s %8s   %s\n' "$s" "(left)" "" "${STAGE_STEPS[$s]}"
    done
    printf '  %-11s %7s            (the whole budget: %ss)\n' total "$BUDGET" "$((DEADLINE - T0))"
}

# A test program's log passed when it exited 0, skipped nothing and doctest counted at least one passing case: on a
# machine with a GPU, "SKIPPED: no CUDA device" is a failure, not a pass. With FILTERED (a -tc filter), doctest
# counts the cases the filter left out as skipped: those are expected.
test_log_passed() {  # LOG RC [FILTERED]
    local log=$1 rc=$2 filtered=${3:-0} line
    [ "$rc" = 0 ] || return 1
    grep -q 'SKIPPED' "$log" && return 1
    line=$(grep -E '^\[doctest\] test cases:' "$log" | tail -n 1)
    [ -n "$line" ] || return 1
    [ "$filtered" = 1 ] || [ "$(sed -E 's/.*\| *([0-9]+) skipped.*/\1/' <<< "$line")" = 0 ] || return 1
    [ "$(sed -E 's/.*\| *([0-9]+) failed.*/\1/' <<< "$line")" = 0 ] || return 1
    [ "$(sed -E 's/.*: *([0-9]+) *\|.*/\1/' <<< "$line")" -gt 0 ]
}

# one word for a step: ok, FAILED (rc), TIMED OUT (cut at Ns: what it printed until then is in its log), not run
step_word() {  # NAME [passed?]
    local rc=${STEP_RC[$1]:--}
    if [ "$rc" = "-" ]; then echo "not run"
    elif step_cut "$1"; then echo "TIMED OUT (cut at ${STEP_SECONDS[$1]:-?}s)"
    elif [ "$rc" = 0 ] && [ "${2:-1}" = 1 ]; then echo "ok"
    else echo "FAILED ($rc)"
    fi
}
step_cut() { [ "${STEP_RC[$1]:-}" = 124 ] || [ "${STEP_RC[$1]:-}" = 137 ]; }  # NAME: it ran out of its time

# The layouts the CUDA trainer runs, one a line, in the registry's order: host/layouts.h asked itself (its rows'
# `cuda` field, through a three-line program), so that a layout added to the registry is in the summary's tables
# without an edit here. Fails with the compiler's message where it cannot be built.
cuda_layouts() {
    local dir rc
    dir=$(mktemp -d) || return 1
    printf '%s\n' '#include "host/layouts.h"' '#include <cstdio>' \
        'int main() { for (int i = 0; i < NUM_LAYOUTS; i++) if (LAYOUTS[i].cuda) puts(LAYOUTS[i].name); }' > "$dir/q.cpp"
    g++ -std=c++17 -I. -o "$dir/q" "$dir/q.cpp" 2> "$dir/err" && "$dir/q"
    rc=$?
    [ $rc = 0 ] || head -c 300 "$dir/err" >&2
    rm -rf "$dir"
    return $rc
}
