#!/usr/bin/env bash
# The CUDA trainer's data-parallel code on a machine without GPUs: train_gpt2.cu built for the CPU emulator
# (tools/cuda_emulator, as tools/emulate_gpu.sh builds it) with MPI and tests/nccl_shim/nccl.h, whose NCCL calls are
# MPI calls on the emulator's host memory, and run as 2 ranks. That exercises what only a run of several GPUs would
# otherwise: ZeRO-1's shards of the master weights (bf16) and moments, their update, the parameters' grouped
# broadcasts, the gathers to rank 0 for checkpoints, a state file read shard by shard. Checked in bf16 and fp32:
#   - 2 ranks -z 1 = 2 ranks -z 0, bit for bit (main.log, model and state files): the same sum, an update per element
#   - a run saved by 2 ranks -z 1 and resumed by 2 ranks -z 0 (and the reverse) = the uninterrupted 2-rank run
#   - 2 ranks against 1 emulated GPU with 2 accumulation steps: main.log within 1e-5 (fp32) and 3e-2 (bf16)
#     relative (tools/compare_logs.py): the sum of 2 ranks is rounded otherwise than one GPU's in-place accumulation
# Not NCCL itself (the shim is MPI's Allreduce and Bcast), and no GPU. Not part of make test: about 10 minutes on two
# busy cores. Needs g++, mpicxx/mpirun (OpenMPI), perl, python3 and the KJV shards. Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
command -v mpicxx > /dev/null && command -v mpirun > /dev/null || { echo "needs OpenMPI (mpicxx, mpirun)"; echo "0 passed, 1 failed"; exit 1; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/src"
SRCS=(train_gpt2.cu siamese.cuh attention.cuh cuda_common.cuh)
cp "${SRCS[@]}" reference_cpu.cpp "$W/src/" && cp -r host "$W/src/"
(cd "$W/src" && perl -0pi -e 's/(\w+(?:<[\w:()]+>)?)<<<(.+?)>>>\(/emu_launch($1, $2)(/g' "${SRCS[@]}")
FLAGS=(-O2 -std=c++17 -fopenmp -x c++ -I"$PWD/tests/nccl_shim" -I"$PWD/tools/cuda_emulator" -Wno-unused-function
       -Wno-psabi -DUSE_MPI -DUSE_NCCL $(mpicxx --showme:compile))
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMP_NUM_THREADS=1
MPIRUN=(mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS -np 2)
FL=(--norm siamese --layers 2 --channels 32 --heads 2 -b 2 -t 16 -d 64 -x 4 -l 1e-3 -u 1 -q 0.1 -c 0.1 -v 2 -m 3
    -s 0 -n 2)
passed=0 failed=0
check() { if [ "$1" = 0 ]; then passed=$((passed + 1)); echo "ok   - $2"; else failed=$((failed + 1)); echo "FAIL - $2"; fi; }
log_of() { sed 's/ ms:[0-9.]*//' "$1/main.log" 2> /dev/null; }
same() {  # A B: the same main.log and files at steps 2 and 4
    [ -s "$1/main.log" ] && cmp -s <(log_of "$1") <(log_of "$2") || return 1
    for f in model_00000002.bin state_00000002.bin model_00000004.bin state_00000004.bin; do
        cmp -s "$1/$f" "$2/$f" || return 1
    done
}
run() {  # DIR LAUNCHER... -- FLAGS...
    local dir=$1; shift
    local launcher=()
    while [ "$1" != -- ]; do launcher+=("$1"); shift; done
    shift
    "${launcher[@]}" "$W/train" "${FL[@]}" "$@" -o "$dir" > "$dir.txt" 2>&1
    local rc=$?
    [ $rc = 0 ] || echo "--- ${dir#$W/}: exit status $rc: $(grep -m1 error "$dir.txt")"
}
for P in ${PRECISIONS:-BF16 FP32}; do
    echo "=== $P"
    g++ "${FLAGS[@]}" -DENABLE_$P -o "$W/train" "$W/src/train_gpt2.cu" $(mpicxx --showme:link) ||
        { echo "0 passed, 1 failed"; exit 1; }
    R="$W/$P"
    mkdir -p "$R"
    run "$R/one" --                             # one emulated GPU, 2 accumulation steps
    run "$R/two" "${MPIRUN[@]}" --              # 2 ranks, 1 micro-batch each
    run "$R/twoz" "${MPIRUN[@]}" -- -z 1
    same "$R/two" "$R/twoz"; check $? "$P: 2 ranks -z 1 = 2 ranks -z 0 (main.log, model and state files at steps 2, 4)"
    grep -E '^\| (processes|memory) ' "$R/twoz.txt"
    for pair in "twoz two" "two twoz"; do  # saved by the first, resumed by the second at step 2
        set -- $pair
        cp -r "$R/$1" "$R/resume-$1"
        rm -f "$R/resume-$1"/*_00000004*
        if [ "$2" = twoz ]; then run "$R/resume-$1" "${MPIRUN[@]}" -- -z 1 -y 1; else run "$R/resume-$1" "${MPIRUN[@]}" -- -y 1; fi
        same "$R/two" "$R/resume-$1"; check $? "$P: saved by 2 ranks ($1) at step 2, resumed by 2 ranks ($2) = uninterrupted"
    done
    tol=1e-5
    [ "$P" = FP32 ] || tol=3e-2
    python3 tools/compare_logs.py "$R/one/main.log" "$R/two/main.log" $tol; check $? "$P: 2 ranks = 1 GPU with 2 accumulation steps, main.log within $tol"
done
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
