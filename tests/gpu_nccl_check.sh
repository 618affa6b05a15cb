#!/usr/bin/env bash
# The CUDA trainer's NCCL back end (train_gpt2.cu; the design in host/distributed.h) on the one GPU of a lent
# machine: `mpirun -np 1 ./train_gpt2cu` (NCCL's communicator of one rank, its all-reduce of the gradients) and
# `mpirun -np 1 ... -z 1` (ZeRO-1's shard update and grouped broadcasts) must train bit for bit as the plain run, in
# bf16 and in fp32: the same main.log and the same checkpoint and state files; a run saved without mpirun resumes
# under it exactly; and 2 ranks on 1 GPU stop with one error. With one rank NCCL's sum and broadcasts move no data
# between GPUs: this shows the path runs and changes nothing, not that several GPUs sum correctly (no run of
# several GPUs has been done).
#
#   bash tests/gpu_nccl_check.sh [KJV_DIR]     (default .gpu/kjv, else data/kjv)
#
# On a lent GPU it runs at the end of the one call, tests/gpu_check.sh, after its stages and bench, in the time they
# left: there is no call of its own (a second call would usually find the machine cold). Its own limits: the build
# where the binaries lack NCCL (make; 180 s at most), then the runs under one deadline of 120 s (a run of the tiny
# model takes seconds), both within the timeout gpu_check gives it. Without MPI it says "skipped" in seconds. Its
# log is $OUT/nccl_check.log (OUT defaults to /tmp/gpu_check).
#
# Uses ./train_gpt2cu and ./train_gpt2fp32cu as built (make builds them with MPI and NCCL where mpicxx and nccl.h
# are found), building them if missing. Without a GPU, mpirun, an MPI build or NCCL it runs nothing and says why.
# The last line is one of
#   nccl_check: ok (...)             exit 0
#   nccl_check: skipped: <reason>    exit 0
#   nccl_check: FAILED (<checks>)    exit 1
set -u
cd "$(dirname "$0")/.."
KJV=${1:-$([ -d .gpu/kjv ] && echo .gpu/kjv || echo data/kjv)}
TMP=$(mktemp -d)
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
exec > >(tee "$OUT/nccl_check.log") 2>&1
TEE=$!
trap 'exec > /dev/null 2>&1; wait $TEE; rm -rf "$TMP"' EXIT  # tee has written the last line when this exits
skip() { echo "nccl_check: skipped: $*"; exit 0; }
command -v nvcc > /dev/null || { [ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"; }
[ -d /usr/local/cuda/lib64 ] && export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  # OpenMPI as root (the lent machine's user)

# ---- what this machine has
[ -f "$KJV/kjv_train.bin" ] && [ -f "$KJV/kjv_val.bin" ] || skip "no KJV shards in '$KJV' (make gpu-prep, or make data)"
nvidia-smi -L 2> /dev/null | grep -q '^GPU ' || skip "no GPU (nvidia-smi lists none)"
GPUS=$(nvidia-smi -L | grep -c '^GPU ')
if ! command -v mpirun > /dev/null || ! command -v mpicxx > /dev/null; then
    found=$(ls -d /usr/lib/x86_64-linux-gnu/openmpi /usr/mpi/* /opt/hpcx* /opt/openmpi* 2> /dev/null | tr '\n' ' ')
    skip "no MPI on this machine (mpirun: $(command -v mpirun || echo none), mpicxx: $(command -v mpicxx || echo none)${found:+; seen: $found}): train_gpt2cu is built without MPI and NCCL here and trains on one GPU as always; the NCCL path needs MPI to start its ranks"
fi
timeout 30 mpirun -np 1 true > "$TMP/mpirun.txt" 2>&1 || skip "mpirun cannot start a process here: $(head -c 300 "$TMP/mpirun.txt" | tr '\n' ' ')"
for b in train_gpt2cu train_gpt2fp32cu; do
    if [ ! -x ./$b ] || ! ldd ./$b | grep -q libnccl; then
        echo "building $b"
        timeout 180 make -s -j"$(nproc)" $b > "$TMP/build.txt" 2>&1 || { tail -n 5 "$TMP/build.txt"; echo "nccl_check: FAILED (make $b)"; exit 1; }
    fi
    ldd ./$b | grep -q libnccl || skip "$b was built without NCCL (no nccl.h beside nvcc or in /usr/include, or no MPI when make ran)"
    if ldd ./$b | grep -q 'not found'; then
        skip "$b cannot load a library: $(ldd ./$b | grep 'not found' | tr '\n' ' ')"
    fi
done
echo "GPUs: $GPUS; $(mpirun --version 2>&1 | head -n 1); NCCL: $(ldd ./train_gpt2cu | grep libnccl | awk '{ print $3 }')"

# ---- the runs: a tiny siamese model, 6 steps of 2 micro-batches, validation, clipping, weight decay, checkpoints
# at steps 3 and 6
FLAGS=(-i "$KJV/kjv_train.bin" -j "$KJV/kjv_val.bin" --norm siamese --layers 2 --channels 64 --heads 2 -b 4 -t 64
       -d 512 -x 6 -l 1e-3 -u 2 -q 0.1 -c 0.1 -v 3 -m 2 -s 0 -n 3)
passed=0 failed=()
DEADLINE=$((SECONDS + 120))
left() { local l=$((DEADLINE - SECONDS)); echo $((l < 5 ? 5 : l)); }  # a run's timeout: what is left, 5 s at least
run() {  # NAME LAUNCHER... -- BINARY FLAGS...
    local name=$1; shift
    local launcher=()
    while [ "$1" != -- ]; do launcher+=("$1"); shift; done
    shift
    timeout "$(left)" "${launcher[@]}" "$@" -o "$TMP/$name" > "$TMP/$name.txt" 2>&1 ||
        echo "--- $name: exit status $?: $(grep -m2 -E '^error|NCCL WARN' "$TMP/$name.txt" || tail -n 3 "$TMP/$name.txt")"
}
log_of() { sed 's/ ms:[0-9.]*//' "$TMP/$1/main.log" 2> /dev/null; }
same() {  # LABEL A B
    local why="" f
    [ -s "$TMP/$2/main.log" ] || why="no main.log from $2"
    [ -n "$why" ] || cmp -s <(log_of "$2") <(log_of "$3") || why="main.log differs: $(diff <(log_of "$2") <(log_of "$3") | head -n 4 | tr '\n' ' ')"
    for f in model_00000003.bin state_00000003.bin model_00000006.bin state_00000006.bin; do
        [ -n "$why" ] || cmp -s "$TMP/$2/$f" "$TMP/$3/$f" || why="$f differs"
    done
    if [ -z "$why" ]; then passed=$((passed + 1)); echo "ok   - $1"
    else failed+=("$3"); echo "FAIL - $1: $why"; fi
}
for b in train_gpt2cu train_gpt2fp32cu; do
    run $b-plain -- ./$b "${FLAGS[@]}"
    run $b-np1 mpirun -np 1 -- ./$b "${FLAGS[@]}"
    run $b-np1z mpirun -np 1 -- ./$b "${FLAGS[@]}" -z 1
    same "$b: mpirun -np 1 (NCCL all-reduce) = the plain run" $b-plain $b-np1
    same "$b: mpirun -np 1 -z 1 (ZeRO-1 shard update, NCCL broadcasts) = the plain run" $b-plain $b-np1z
    cp -r "$TMP/$b-plain" "$TMP/$b-resume" 2> /dev/null
    rm -f "$TMP/$b-resume/DONE_00000006" "$TMP/$b-resume/model_00000006.bin" "$TMP/$b-resume/state_00000006.bin"
    run $b-resume mpirun -np 1 -- ./$b "${FLAGS[@]}" -z 1 -y 1
    same "$b: saved by the plain run at step 3, resumed by mpirun -np 1 -z 1 = the plain run" $b-plain $b-resume
done
grep -E '^\| (processes|memory|device) ' "$TMP/train_gpt2cu-np1z.txt"
grep -E '^step +6/' "$TMP/train_gpt2cu-plain.txt" "$TMP/train_gpt2cu-np1.txt" | sed "s|$TMP/||"
if [ "$GPUS" = 1 ]; then  # more ranks than GPUs: one error, not a hang
    timeout "$(left)" mpirun -np 2 ./train_gpt2cu "${FLAGS[@]}" > "$TMP/two.txt" 2>&1
    rc=$?
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(grep -c '^error: 2 ranks on this machine but 1 GPU' "$TMP/two.txt")" = 1 ]; then
        passed=$((passed + 1)); echo "ok   - mpirun -np 2 on 1 GPU: $(grep '^error:' "$TMP/two.txt")"
    else failed+=("np2-on-1-GPU"); echo "FAIL - mpirun -np 2 on 1 GPU: exit status $rc: $(grep -m2 . "$TMP/two.txt" | tr '\n' ' ')"; fi
fi
if [ ${#failed[@]} -eq 0 ]; then
    echo "nccl_check: ok ($passed checks: one rank under mpirun bit-identical to the plain run, bf16 and fp32, -z 0 and 1, resume; no run of several GPUs was done)"
else
    echo "nccl_check: FAILED (${failed[*]}; $passed passed)"; exit 1
fi
