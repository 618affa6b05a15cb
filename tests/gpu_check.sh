#!/usr/bin/env bash
# One prepared check of the CUDA trainer on a lent GPU (H100/H200), in well under 5 minutes:
#   1. the device, 2. the build, 3. tests/test_gpu (the GPU against the CPU reference, gradient by gradient),
#   4. a short GPT-2-small (d12) training run per layout on the KJV shards, 5. TF32 off against on,
#   6. checkpoint and resume (-y 1) on a tiny model, then ONE summary table.
# Every step runs under a timeout, prints its exit status, and a failed step does not stop the others.
# Needs data/kjv/kjv_{train,val}.bin (carried; not regenerated here) and doctest.h in $DOCTEST or .carry/doctest.
# Writes $OUT/gpu_check.log (everything printed) and $OUT/summary.txt (the table); OUT defaults to /tmp/gpu_check.
# Usage: bash tests/gpu_check.sh
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
LOG="$OUT/gpu_check.log"
SUMMARY="$OUT/summary.txt"
RUNS=$(mktemp -d)  # the per-run logs stay out of $OUT (few files come back from it); their text goes to $LOG
exec > >(tee "$LOG") 2>&1
T0=$SECONDS
STATUS=()
step() { echo; echo "=== $* (at ${SECONDS}s)"; }
status() {
    echo "--- $1: exit status $2"
    STATUS+=("$1=$2")
}

# the CUDA toolkit where it usually lives, if it is not on the path (nvcc to build, libcublas to run)
command -v nvcc > /dev/null || { [ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"; }
[ -d /usr/local/cuda/lib64 ] && export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

step "device"
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version,clocks.max.sm --format=csv,noheader ||
    echo "nvidia-smi failed"
echo "CPU cores: $(nproc); $(nvcc --version 2>/dev/null | tail -n 1)"
for f in data/kjv/kjv_train.bin data/kjv/kjv_val.bin; do [ -f "$f" ] || echo "MISSING $f: the training runs will fail"; done

step "build"
DOCTEST=${DOCTEST:-/usr/include/doctest}
[ -f "$DOCTEST/doctest.h" ] || DOCTEST=.carry/doctest
[ -f "$DOCTEST/doctest.h" ] || echo "no doctest.h in \$DOCTEST or .carry/doctest: tests/test_gpu will not build"
timeout 240 make -j16 DOCTEST="$DOCTEST" train_gpt2cu train_gpt2fp32cu tests/test_gpu tests/test_gpu_bf16 reference_cpu
status build $?

step "tests/test_gpu: the GPU against the CPU reference"
OMP_NUM_THREADS=$(nproc) timeout 240 ./tests/test_gpu > "$RUNS/test_gpu.log" 2>&1
rc=$?
cat "$RUNS/test_gpu.log"
status test_gpu $rc

step "tests/test_gpu_bf16: the bf16 build against the CPU reference (bf16 bounds)"
OMP_NUM_THREADS=$(nproc) timeout 240 ./tests/test_gpu_bf16 > "$RUNS/test_gpu_bf16.log" 2>&1
rc=$?
cat "$RUNS/test_gpu_bf16.log"
status test_gpu_bf16 $rc

# d12 on the KJV bytes: 4096 tokens a step, about 2 TFLOP; expect ~60 ms a step in float32 on an H200
STEPS=300
TRAIN=(-e d12 -b 16 -t 256 -x $STEPS -l 6e-4 -u 50 -q 0.1 -v 100 -m 10 -s 0 -g 64)
show_run() {  # the header table, every 50th step, validation and errors
    grep -E "^\||^val loss|^step +(1|10|50|100|150|200|250|300)/|error|warning" "$1"
}
for layout in pre post siamese; do
    step "train $layout: d12, B=16, T=256, $STEPS steps"
    timeout 120 ./train_gpt2cu --norm $layout "${TRAIN[@]}" > "$RUNS/$layout.log" 2>&1
    rc=$?
    show_run "$RUNS/$layout.log"
    status "train_$layout" $rc
done

step "TF32 off against on: siamese d12, 60 steps each"
for f in 0 1; do
    timeout 60 ./train_gpt2fp32cu --norm siamese -e d12 -b 16 -t 256 -x 60 -l 6e-4 -u 20 -v 0 -s 0 -f $f \
        > "$RUNS/tf32_$f.log" 2>&1
    rc=$?
    show_run "$RUNS/tf32_$f.log" | grep -E "^step +(1|10|50)/|error"
    grep -E "^step +60/" "$RUNS/tf32_$f.log"
    status "tf32_$f" $rc
done

step "checkpoint and resume (-y 1), sampling: a tiny siamese model"
CK="$RUNS/resume"
timeout 60 ./train_gpt2cu --norm siamese --layers 2 --channels 64 --heads 2 -b 4 -t 64 -x 20 -n 10 -v 10 -s 20 \
    -g 32 -o "$CK" > "$RUNS/resume1.log" 2>&1
rc1=$?
timeout 60 ./train_gpt2cu --norm siamese --layers 2 --channels 64 --heads 2 -b 4 -t 64 -x 30 -n 10 -v 10 -s 0 \
    -o "$CK" -y 1 > "$RUNS/resume2.log" 2>&1
rc2=$?
tail -n 6 "$RUNS/resume1.log"
tail -n 4 "$RUNS/resume2.log"
ls "$CK"
grep -c "^s:" "$CK/main.log" | sed 's/^/main.log lines: /'
[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ -f "$CK/DONE_00000030" ]
status resume $?

# ---------------------------------------------------------------------------------------------------------------
# the summary table

median_ms() {  # median ms of the step lines after the first 10 (warm-up)
    grep -E '^step ' "$1" 2>/dev/null | awk -F'|' 'NR > 10 { v = $5; gsub(/ms/, "", v); print v + 0 }' | sort -g |
        awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)]; else print "-" }'
}
last_step_field() {  # field $2 (1-based, split on '|') of the last step line, first word
    grep -E '^step ' "$1" 2>/dev/null | tail -n 1 | awk -F'|' -v f="$2" '{ split($f, w, " "); print w[1] }' | or_dash
}
or_dash() { read -r v || true; echo "${v:--}"; }
final_loss() { grep -E '^step ' "$1" 2>/dev/null | tail -n 1 | awk -F'|' '{ split($2, w, " "); print w[2] }' | or_dash; }
val_loss() { grep '^val loss' "$1" 2>/dev/null | tail -n 1 | awk '{ print $3 }' | or_dash; }
worst_grad() {  # the worst norm-wise and max-wise gradient errors of the test cases whose label starts with $1
    grep -ho 'GRADCHECK .*' "$RUNS/test_gpu.log" 2>/dev/null | awk -v p="$1" '
        $2 ~ "^" p "($|-)" {
            for (i = 3; i <= NF; i++) {
                if ($i ~ /^norm_rel=/) { v = substr($i, 10) + 0; if (v > n) n = v; seen = 1 }
                if ($i ~ /^max_rel=/) { v = substr($i, 9) + 0; if (v > m) m = v }
            }
        }
        END { if (seen) printf "%.1e / %.1e", n, m; else printf "-" }'
}
worst_steps() {
    grep -ho "STEPCHECK $1 worst_rel=[^ ]*" "$RUNS/test_gpu.log" 2>/dev/null | sed 's/.*worst_rel=//' | head -n 1 |
        or_dash
}

{
    echo
    echo "=== summary ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1), ${SECONDS}s in all)"
    grep -E '^\[doctest\] (test cases|assertions)' "$RUNS/test_gpu.log" 2>/dev/null | sed 's/^/tests\/test_gpu /'
    printf '%-8s | %-19s | %-9s | %-10s | %-9s | %-8s | %-9s | %-8s\n' layout "grad err norm/max" "10-step" \
        "train loss" "val loss" "ms/step" "tokens/s" "GPU MiB"
    printf '%s\n' "---------+---------------------+-----------+------------+-----------+----------+-----------+---------"
    for layout in pre post siamese; do
        log="$RUNS/$layout.log"
        ms=$(median_ms "$log")
        tps=$(awk -v ms="$ms" 'BEGIN { if (ms + 0 > 0) printf "%.0f", 4096 / (ms / 1000); else print "-" }')
        printf '%-8s | %-19s | %-9s | %-10s | %-9s | %-8s | %-9s | %-8s\n' "$layout" "$(worst_grad $layout)" \
            "$(worst_steps $layout)" "$(final_loss "$log")" "$(val_loss "$log")" "$ms" "$tps" \
            "$(last_step_field "$log" 8)"
    done
    echo "(grad err: worst over every gradient tensor of the layout's test cases, ablations included for siamese;"
    echo " 10-step: worst relative loss/norm difference over ten AdamW steps; training: d12 B=16 T=256, $STEPS steps)"
    ms0=$(median_ms "$RUNS/tf32_0.log") ms1=$(median_ms "$RUNS/tf32_1.log")
    echo "TF32 (siamese d12, median of steps 11..60): -f 0 $ms0 ms/step, loss $(final_loss "$RUNS/tf32_0.log");" \
        "-f 1 $ms1 ms/step, loss $(final_loss "$RUNS/tf32_1.log");" \
        "speed-up $(awk -v a="$ms0" -v b="$ms1" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2fx", a / b; else print "-" }')"
    echo "exit statuses: ${STATUS[*]}"
} | tee "$SUMMARY"
rm -rf "$RUNS"
