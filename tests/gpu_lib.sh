# What tests/gpu_check.sh and tests/bench_gpu.sh share (sourced, not run): the prepared folder, the CUDA toolkit,
# the "is there a usable GPU" probe, steps under a time budget, and how a test program's log reads.
#
# A step is a command run under a timeout with its output in a log: `run_step NAME SECONDS CMD...` (or several
# commands of one stage started with `start_step` and awaited with `wait_steps`, sharing the stage's seconds). Each
# timeout is the smaller of the step's own and what is left before DEADLINE (seconds since the script started), so
# the whole script can never outrun its budget; a step that no longer fits is not started and reads "not run
# (time)". DRY_RUN=1 runs nothing: each step prints what it would run and its timeout, and BUDGET adds them up.

PREP=${GPU_PREP:-.gpu}
DRY_RUN=${DRY_RUN:-0}
BUDGET=0               # the nominal seconds of every stage so far (the dry run prints it)
declare -A STEP_RC     # NAME -> exit status (124 or 137: timed out; "-": not run)
declare -A STEP_SECONDS
declare -A STEP_PID STEP_START STEP_LOG_OF
STEP_ORDER=()

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

# run_step NAME SECONDS CMD... : one step in the foreground, its output in $RUNS/NAME.log
run_step() {
    start_step "$@"
    wait_steps "$1"
}

# start_step NAME SECONDS CMD... : in the background (wait_steps NAME... collects them)
start_step() {
    local name=$1 seconds=$2
    shift 2
    STEP_ORDER+=("$name")
    STEP_LOG_OF[$name]="$RUNS/$name.log"
    local left=$((DEADLINE - SECONDS))
    [ "$seconds" -lt "$left" ] || seconds=$left
    if [ "$DRY_RUN" = 1 ]; then
        echo "[dry run] $name: timeout ${seconds}s: $*"
        STEP_RC[$name]="-"
        STEP_SECONDS[$name]=0
        return
    fi
    if [ "$seconds" -lt 5 ]; then
        echo "--- $name: not run (the time budget is spent)"
        STEP_RC[$name]="-"
        STEP_SECONDS[$name]=0
        return
    fi
    STEP_START[$name]=$SECONDS
    timeout --kill-after=5 "$seconds" "$@" > "$RUNS/$name.log" 2>&1 &
    STEP_PID[$name]=$!
}

wait_steps() {
    local name rc
    for name in "$@"; do
        [ -n "${STEP_PID[$name]:-}" ] || continue
        wait "${STEP_PID[$name]}"
        rc=$?
        STEP_RC[$name]=$rc
        STEP_SECONDS[$name]=$((SECONDS - STEP_START[$name]))
        unset "STEP_PID[$name]"
        local note=""
        if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then note=" (timed out)"; fi
        echo "--- $name: exit status $rc$note, ${STEP_SECONDS[$name]}s"
    done
}

# stage SECONDS: the nominal length of the next stage, for the budget (several steps started in parallel count once)
stage() { BUDGET=$((BUDGET + $1)); }

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

# one word for a step: ok, FAILED (rc), TIMED OUT, not run
step_word() {  # NAME [passed?]
    local rc=${STEP_RC[$1]:--}
    if [ "$rc" = "-" ]; then echo "not run"
    elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then echo "TIMED OUT"
    elif [ "$rc" = 0 ] && [ "${2:-1}" = 1 ]; then echo "ok"
    else echo "FAILED ($rc)"
    fi
}
