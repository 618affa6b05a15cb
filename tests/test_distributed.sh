#!/usr/bin/env bash
# Data parallelism on the CPU (host/distributed.h): `mpirun -np 2 ./reference_cpu` (1 thread a rank) must train
# bit for bit as one process with twice the gradient accumulation: the same main.log (losses, gradient norms,
# learning rates, validation losses) and the same checkpoint and optimizer-state files, byte for byte, for each
# layout, with and without ZeRO-1 (-z 1); a run saved by 2 processes resumes in 1 and the reverse, exactly. A
# control shows the comparison can fail: one micro-batch of 2B is the same arithmetic in another order, and differs.
# Then the errors a user meets: a batch that does not split over the ranks, ranks given other flags or other data,
# a rank that fails alone (the run stops, it does not hang), a build without MPI under mpirun, more ranks than GPUs;
# and the CUDA trainer's NCCL back end is compiled in where MPI and NCCL are installed.
# Needs mpirun and a ./reference_cpu built with MPI (make, with openmpi-bin and libopenmpi-dev installed); skipped
# otherwise. Ends with the line "N passed, N failed[, N skipped]".
set -u
cd "$(dirname "$0")/.."
BIN=${BIN:-./reference_cpu}
KJV_TRAIN=data/kjv/kjv_train.bin KJV_VAL=data/kjv/kjv_val.bin
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass=0 fail=0 skip=0
ok() { pass=$((pass + 1)); echo "ok   - $1"; }
bad() { fail=$((fail + 1)); echo "FAIL - $1: $2"; }
skipped() { skip=$((skip + 1)); echo "skip - $1"; }

for f in $BIN $KJV_TRAIN $KJV_VAL; do
    [ -e "$f" ] || { echo "missing $f (run make first)"; echo "0 passed, 1 failed"; exit 1; }
done
if ! command -v mpirun > /dev/null; then
    echo "skipped: mpirun is not installed (Debian: openmpi-bin libopenmpi-dev; make test installs them)"
    echo "0 passed, 0 failed, 1 skipped"; exit 0
fi
if ! ldd "$BIN" | grep -q libmpi; then
    echo "skipped: $BIN was built without MPI (mpicxx was missing when it was built: make rebuilds it)"
    echo "0 passed, 0 failed, 1 skipped"; exit 0
fi

# OpenMPI as root needs these two; --oversubscribe: 2 ranks on 2 (shared) cores; no binding, 1 thread a rank; no
# single-copy transfers between the ranks (a container's ptrace rules can forbid them)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMP_NUM_THREADS=1
MPIRUN=(timeout 120 mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS)
ONE=(timeout 120)

# 4 steps of a tiny model, validation every 2 steps over 3 batches (split 2 + 1 over the ranks), checkpoints at
# steps 2 and 4, warmup and cosine decay, weight decay, clipping at 1 (the norms are about 1.6); -d 64 = 2 x b*t
TINY=(-i $KJV_TRAIN -j $KJV_VAL --layers 2 --channels 32 --heads 2 -b 2 -t 16 -l 1e-3 -u 1 -q 0.1 -c 0.1 -v 2 -m 3
      -s 0 -n 2)
train() {  # OUT_NAME LAUNCHER... -- FLAGS...: a run into $TMP/OUT_NAME, its output in $TMP/OUT_NAME.txt
    local name=$1; shift
    local launcher=()
    while [ "$1" != -- ]; do launcher+=("$1"); shift; done
    shift
    "${launcher[@]}" "$BIN" "${TINY[@]}" "$@" -o "$TMP/$name" > "$TMP/$name.txt" 2>&1 ||
        echo "(exit status $?: $(grep -m1 error: "$TMP/$name.txt"))" >> "$TMP/$name.failed"
}
log_of() { sed 's/ ms:[0-9.]*//' "$TMP/$1/main.log" 2> /dev/null; }  # main.log without the timings

# same NAME A B: A and B wrote the same main.log and the same model and state files at steps 2 and 4
same() {
    local name=$1 a=$2 b=$3 f why=""
    for r in $a $b; do [ -e "$TMP/$r.failed" ] && why="$why run $r failed $(cat "$TMP/$r.failed");"; done
    [ -s "$TMP/$a/main.log" ] || why="$why no main.log in $a;"
    [ -n "$why" ] || cmp -s <(log_of $a) <(log_of $b) || why="main.log differs: $(diff <(log_of $a) <(log_of $b) | head -n 4 | tr '\n' ' ')"
    for f in model_00000002.bin state_00000002.bin model_00000004.bin state_00000004.bin; do
        [ -n "$why" ] || cmp -s "$TMP/$a/$f" "$TMP/$b/$f" || why="$f differs"
    done
    if [ -z "$why" ]; then ok "$name: main.log, model and state files at steps 2 and 4 identical"
    else bad "$name" "$why"; fi
}

# ---- bit-exact: 2 ranks x 1 micro-batch = 1 process x 2 micro-batches, each layout, -z 0 and -z 1: every layout
# the trainer lists in its usage (host/layouts.h's registry), so that a new layout is tested here without an edit
LAYOUTS=$("$BIN" -h 2>&1 | sed -n 's/^ *--norm <layout> *\([a-z|-]*\) .*/\1/p' | tr '|' ' ')
if [ "$(wc -w <<< "$LAYOUTS")" -ge 5 ]; then ok "the layouts to test, from $BIN -h: $LAYOUTS"
else bad "the layouts from $BIN -h" "found '$LAYOUTS' (fewer than pre post siamese mix deepnorm)"; fi
for norm in $LAYOUTS; do
    own=()  # a layout's own setting where its default does nothing at 2 layers (Mix-LN: floor(0.25 * 2) = 0)
    [ $norm = mix ] && own=(--mix-alpha 0.5)
    train $norm-1 "${ONE[@]}" -- --norm $norm "${own[@]}" -x 4 -d 64
    train $norm-2 "${MPIRUN[@]}" -np 2 -- --norm $norm "${own[@]}" -x 4 -d 64
    train $norm-2z "${MPIRUN[@]}" -np 2 -- --norm $norm "${own[@]}" -x 4 -d 64 -z 1
    same "$norm: mpirun -np 2 = one process with 2 accumulation steps" $norm-1 $norm-2
    same "$norm: mpirun -np 2 -z 1 (ZeRO-1) = one process" $norm-1 $norm-2z
done
# 2 micro-batches on each rank: of the step's 4, rank 0 takes 0 and 2, rank 1 takes 1 and 3; summed 0, 1, 2, 3
train acc4-1 "${ONE[@]}" -- --norm siamese -x 4 -d 128
train acc4-2 "${MPIRUN[@]}" -np 2 -- --norm siamese -x 4 -d 128 -z 1
same "siamese: mpirun -np 2 with 2 micro-batches a rank = one process with 4" acc4-1 acc4-2
# -a 1 (one batch, over and over): every rank trains on it
train overfit-1 "${ONE[@]}" -- --norm siamese -x 4 -d 64 -a 1
train overfit-2 "${MPIRUN[@]}" -np 2 -- --norm siamese -x 4 -d 64 -a 1
same "siamese -a 1: mpirun -np 2 = one process" overfit-1 overfit-2

# the control: one micro-batch of b=4 is the same tokens and the same mathematics, summed in another order, so the
# files must differ (the comparison above can fail) while the losses agree to float rounding
"${ONE[@]}" "$BIN" "${TINY[@]}" --norm siamese -x 4 -b 4 -d 64 -o "$TMP/control" > "$TMP/control.txt" 2>&1
if ! cmp -s "$TMP/control/model_00000004.bin" "$TMP/siamese-1/model_00000004.bin" &&
   paste <(log_of control | grep trl) <(log_of siamese-1 | grep trl) | awk '
       { split($2, a, ":"); split($6, b, ":"); d = a[2] - b[2]; if (d < 0) d = -d; if (d > w) w = d; n++ }
       END { exit !(n == 4 && w < 1e-5) }'; then
    ok "control: -b 4 (one micro-batch) differs in its bits from -b 2 -d 64, its losses agree within 1e-5"
else bad "control" "one micro-batch of b=4 gave the same bits as two of b=2, or losses far apart"; fi

# only rank 0 prints: the same progress lines as one process, once
if [ "$(grep -c '^step ' "$TMP/siamese-2.txt")" = 4 ] && grep -q '| processes  *| 2 (mpirun)' "$TMP/siamese-2.txt"
then ok "mpirun -np 2: rank 0 alone prints (4 step lines, the header names 2 processes)"
else bad "rank 0 prints" "$(grep -c '^step ' "$TMP/siamese-2.txt") step lines"; fi

# sampling (-x 0 --prompt) trains nothing: under mpirun the default -d (one micro-batch) need not split over the
# ranks (it was refused), and rank 0 alone prints the text, byte for byte what one process prints
SAMPLE=(-e "$TMP/siamese-1/model_00000004.bin" -x 0 --prompt "And God said" -g 40 -t 16
        --tokenizer data/kjv/kjv_tokenizer.bin)
"${ONE[@]}" "$BIN" "${SAMPLE[@]}" > "$TMP/sample-1.txt" 2>&1
"${MPIRUN[@]}" -np 2 "$BIN" "${SAMPLE[@]}" > "$TMP/sample-2.txt" 2>&1
if [ $? -eq 0 ] && grep -q "^And God said" "$TMP/sample-1.txt" && cmp -s "$TMP/sample-1.txt" "$TMP/sample-2.txt"; then
    ok "sampling under mpirun -np 2 (default -d): printed once, the same text as one process"
else bad "sampling under mpirun" "$(head -c 200 "$TMP/sample-2.txt")"; fi

# ---- resume across process counts: a run stopped after its step-2 checkpoint (the step-4 one removed, as if it
# was killed before), saved by 2 ranks (-z 1) and resumed by 1, and the reverse
interrupt() { rm -f "$TMP/$1/DONE_00000004" "$TMP/$1/model_00000004.bin" "$TMP/$1/state_00000004.bin"; }
cp -r "$TMP/siamese-2z" "$TMP/r21" && interrupt r21
train r21 "${ONE[@]}" -- --norm siamese -x 4 -d 64 -y 1
same "resume: saved by mpirun -np 2 -z 1 at step 2, resumed by one process = one process throughout" siamese-1 r21
cp -r "$TMP/siamese-1" "$TMP/r12" && interrupt r12
train r12 "${MPIRUN[@]}" -np 2 -- --norm siamese -x 4 -d 64 -y 1 -z 1
same "resume: saved by one process at step 2, resumed by mpirun -np 2 -z 1 = one process throughout" siamese-1 r12
if grep -q "2 to 4" "$TMP/r21.txt" && grep -q "2 to 4" "$TMP/r12.txt"; then ok "both resumed at step 2"
else bad "resumed at step 2" "the header's steps row does not say 2 to 4"; fi
# the HybridNorm layouts, the two baselines and hc (their c1, QKV-norm, output-LayerNorm and connection tensors in
# the checkpoint and the AdamW state): a one-process run resumed from its step-2 checkpoint, and the mpirun -np 2 -z 1
# run's resumed by one process, each = one process
for norm in hybrid hybrid-star siamese-hybrid pre-qkvnorm peri hc; do
    case " $LAYOUTS " in *" $norm "*) ;; *) bad "resume $norm" "not a layout of $BIN -h"; continue ;; esac
    cp -r "$TMP/$norm-1" "$TMP/$norm-r11" && interrupt $norm-r11
    train $norm-r11 "${ONE[@]}" -- --norm $norm -x 4 -d 64 -y 1
    same "$norm resume: saved at step 2, resumed by one process = one process throughout" $norm-1 $norm-r11
    cp -r "$TMP/$norm-2z" "$TMP/$norm-r21" && interrupt $norm-r21
    train $norm-r21 "${ONE[@]}" -- --norm $norm -x 4 -d 64 -y 1
    same "$norm resume: saved by mpirun -np 2 -z 1 at step 2, resumed by one process = one process" $norm-1 $norm-r21
    if grep -q "2 to 4" "$TMP/$norm-r11.txt" && grep -q "2 to 4" "$TMP/$norm-r21.txt"; then ok "$norm: both resumed at step 2"
    else bad "$norm resumed at step 2" "the header's steps row does not say 2 to 4"; fi
done

# ---- errors: exit status 1 and one "error:" line (mpirun adds its own notice below it), never a hang; and the rank
# that says it ends every rank at once (MPI_Abort), rather than exit and leave mpirun to find the failed rank and tear
# the others down (a second more a refusal here, about 7 s on another machine): mpirun's notice of that teardown,
# "N process returned a non-zero exit code", must not be there. (Open MPI 4.1 sometimes loses its own MPI_ABORT
# notice in the abort, or prints an ORTE_ERROR_LOG line about it: its race, not ours; the status and the error line
# are right either way.)
expect_error() {  # NAME PATTERN CMD...
    local name=$1 pattern=$2; shift 2
    local start=$SECONDS
    "$@" > "$TMP/out" 2> "$TMP/err"
    local rc=$? n
    n=$(grep -c '^error:' "$TMP/err")
    if [ $rc -eq 124 ]; then bad "$name" "timed out (a hang)"
    elif [ $rc -eq 0 ]; then bad "$name" "exit status 0"
    elif [ "$n" -ne 1 ]; then bad "$name" "$n error lines: $(grep -m3 '^error:' "$TMP/err" | tr '\n' ' ')"
    elif ! grep -qE "^error: .*($pattern)" "$TMP/err"; then bad "$name" "unexpected message: $(grep -m1 . "$TMP/err")"
    elif [ $rc -ne 1 ]; then bad "$name" "exit status $rc"
    elif grep -q "returned$" "$TMP/err" && grep -q "^a non-zero exit code" "$TMP/err"; then
        bad "$name" "the ranks were not ended at once: mpirun tore them down after a rank's exit"
    else ok "$name: $(grep '^error:' "$TMP/err") (every rank ended at once, $((SECONDS - start)) s)"; fi
}
expect_error "-d that does not split over the ranks" "does not split over 2 processes" \
    "${MPIRUN[@]}" -np 2 "$BIN" "${TINY[@]}" -x 1 -d 32
# an error each rank finds for itself (here a layout's setting): said once, by rank 0, not once a rank
expect_error "a bad flag every rank finds, said once" "--mix-alpha 0.25 at 2 layers gives no Post-LN block" \
    "${MPIRUN[@]}" -np 2 "$BIN" "${TINY[@]}" --norm mix -x 1 -d 64
if grep -q '^error: rank' "$TMP/err"; then bad "the bad flag's error from rank 0" "$(grep '^error:' "$TMP/err")"
else ok "the bad flag's error is rank 0's (no rank tag)"; fi
expect_error "ranks given other flags" "disagree on the command line" \
    "${MPIRUN[@]}" -np 1 "$BIN" "${TINY[@]}" -x 1 -d 64 : -np 1 "$BIN" "${TINY[@]}" -x 2 -d 64
# the same command line in two directories whose train.bin differ (mpirun's -wdir): other data
mkdir -p "$TMP/wa" "$TMP/wb"
head -c 40000 $KJV_TRAIN > "$TMP/wa/train.bin"
head -c 40000 $KJV_TRAIN > "$TMP/wb/train.bin"
python3 -c "
import struct; p='$TMP/wb/train.bin'; b=bytearray(open(p,'rb').read()); n=(len(b)-1024)//2 - 100
struct.pack_into('<i', b, 8, n); open(p,'wb').write(b[:1024 + 2*n])"
python3 -c "
import struct; p='$TMP/wa/train.bin'; b=bytearray(open(p,'rb').read()); n=(len(b)-1024)//2
struct.pack_into('<i', b, 8, n); open(p,'wb').write(b)"
ABS=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
SMALL=(-i train.bin -v 0 -s 0 --layers 2 --channels 32 --heads 2 -b 2 -t 16 -d 64 -x 1)
expect_error "ranks that see other data" "disagree on the data" \
    "${MPIRUN[@]}" -np 1 -wdir "$TMP/wa" "$ABS" "${SMALL[@]}" : -np 1 -wdir "$TMP/wb" "$ABS" "${SMALL[@]}"
expect_error "a rank that fails alone stops the run" "rank 1: no token shards match" \
    "${MPIRUN[@]}" -np 1 -wdir "$TMP/wa" "$ABS" "${SMALL[@]}" : -np 1 -wdir "$TMP" "$ABS" "${SMALL[@]}"
# a build without MPI, started by mpirun with 2 processes (-O0: a quick build)
if g++ -O0 -std=c++17 -fopenmp -w -o "$TMP/reference_nompi" reference_cpu.cpp 2> "$TMP/build.txt"; then
    "${MPIRUN[@]}" -np 2 "$TMP/reference_nompi" "${TINY[@]}" -x 1 -d 64 > "$TMP/out" 2> "$TMP/err"
    if [ $? -ne 0 ] && [ "$(grep -c '^error: .*built without MPI but started by mpirun' "$TMP/err")" -ge 1 ]; then ok "a build without MPI under mpirun -np 2: $(grep -m1 '^error:' "$TMP/err")"
    else bad "a build without MPI under mpirun" "$(grep -m2 . "$TMP/err" | tr '\n' ' ')"; fi
else bad "a build without MPI" "did not compile: $(tail -n 3 "$TMP/build.txt")"; fi

# ---- the CUDA trainer: built with MPI and NCCL where both are installed (the NCCL back end compiles), and more
# ranks than GPUs is an error (here, where there is no GPU, two ranks are more than the 0 GPUs)
NCCL_H=$(ls "$(dirname "$(command -v nvcc 2> /dev/null || echo /nonexistent/bin/nvcc)")"/../include/nccl.h \
    /usr/include/nccl.h 2> /dev/null | head -n 1)
if [ ! -x ./train_gpt2cu ]; then
    skipped "the CUDA trainer's NCCL back end: no ./train_gpt2cu (nvcc is not installed)"
elif [ -z "$NCCL_H" ]; then
    skipped "the CUDA trainer's NCCL back end: no nccl.h beside nvcc or in /usr/include"
else
    if ldd ./train_gpt2cu | grep -q libnccl && ldd ./train_gpt2cu | grep -q libmpi; then
        ok "train_gpt2cu is built with MPI and NCCL ($NCCL_H)"
    else bad "train_gpt2cu with NCCL" "it links neither libnccl nor libmpi: $(ldd ./train_gpt2cu | grep -E 'nccl|mpi')"; fi
    if ! nvidia-smi -L 2> /dev/null | grep -q '^GPU '; then
        expect_error "mpirun -np 2 ./train_gpt2cu on a machine without 2 GPUs" "2 ranks on this machine but 0 GPU" \
            "${MPIRUN[@]}" -np 2 ./train_gpt2cu "${TINY[@]}" -x 1 -d 64
    fi
fi

# the GPU check's NCCL step (tests/gpu_nccl_check.sh) on a machine without a GPU: it runs nothing and says why
if ! nvidia-smi -L 2> /dev/null | grep -q '^GPU '; then
    OUT="$TMP/nccl_out" timeout 60 bash tests/gpu_nccl_check.sh > "$TMP/nccl_check.txt" 2>&1
    rc=$? last=$(tail -n 1 "$TMP/nccl_check.txt")
    if [ $rc = 0 ] && [ "$last" = "nccl_check: skipped: no GPU (nvidia-smi lists none)" ]; then
        ok "tests/gpu_nccl_check.sh without a GPU: '$last', exit status 0"
    else bad "tests/gpu_nccl_check.sh without a GPU" "last line '$last'"; fi
fi

echo "$pass passed, $fail failed$([ $skip -gt 0 ] && echo ", $skip skipped")"
[ $fail -eq 0 ]
