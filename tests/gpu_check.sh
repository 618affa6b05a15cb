#!/usr/bin/env bash
# One prepared check of the CUDA trainer on a lent GPU (H100/H200), in about 5 minutes:
#   1. the device, 2. the build (bf16 and fp32 trainers and tests, and a flash-attention trainer),
#   3. tests/test_gpu and tests/test_gpu_bf16 (each precision against the float32 CPU reference, gradient by
#      gradient, with -r 1 and flash attention), 4. d12 training per layout on the KJV shards in bf16 and in fp32:
#      the losses must track each other, 5. TF32, 6. the memory and speed of -r 1 and flash attention at T = 1024,
#   7. d48 (1.5 B parameters) training at T = 1024, 8. checkpoint and resume (-y 1) on a tiny model; ONE table.
# Every step runs under a timeout, prints its exit status, and a failed step does not stop the others.
# Needs data/kjv/kjv_{train,val}.bin (carried; not regenerated here) and doctest.h in $DOCTEST or .carry/doctest.
# Writes $OUT/gpu_check.log (everything printed) and $OUT/summary.txt (the table); OUT defaults to /tmp/gpu_check.
# Usage: bash tests/gpu_check.sh            (about 4 minutes)
#        BENCH=1 bash tests/gpu_check.sh    (then tests/bench_gpu.sh with the binaries built here: the speed table
#                                            for d12..d48 and the profile by part; about 8 minutes in all)
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
LOG="$OUT/gpu_check.log"
SUMMARY="$OUT/summary.txt"
RUNS=$(mktemp -d)  # the per-run logs stay out of $OUT (few files come back from it); their text goes to $LOG
exec > >(tee "$LOG") 2>&1
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
FLASH=$RUNS/train_gpt2cu_flash  # the bf16 trainer with ATTENTION=flash, beside the default one
timeout 300 nvcc -O3 -std=c++17 -arch=sm_90 -lineinfo -DENABLE_BF16 -DFLASH_ATTENTION -o "$FLASH" train_gpt2.cu \
    -lcublas -lcublasLt &
flash_build=$!
timeout 300 make -j16 DOCTEST="$DOCTEST" train_gpt2cu train_gpt2fp32cu tests/test_gpu tests/test_gpu_bf16 reference_cpu \
    tools/profile_gpu
rc=$?
wait $flash_build
rc_flash=$?
status build $rc
status build_flash $rc_flash

for t in test_gpu test_gpu_bf16; do
    step "tests/$t: the GPU against the CPU reference"
    OMP_NUM_THREADS=$(nproc) timeout 240 ./tests/$t > "$RUNS/$t.log" 2>&1
    rc=$?
    grep -E "GRADCHECK|STEPCHECK|VARIANTCHECK|ERROR|values:|logged:|test cases|assertions|SKIPPED" "$RUNS/$t.log" |
        sed 's/^.*MESSAGE: //'
    status "$t" $rc
done

# d12 on the KJV bytes, bf16 (./train_gpt2cu) and fp32 (./train_gpt2fp32cu), 4096 tokens a step
STEPS=200
TRAIN=(-e d12 -b 16 -t 256 -x $STEPS -l 6e-4 -u 50 -q 0.1 -v 100 -m 10 -s 0 -g 64)
show_run() {  # the header table, some step lines, validation and errors
    grep -E "^\||^val loss|^step +(1|10|50|100|150|200|250|300)/|error|warning" "$1"
}
for layout in pre post siamese; do
    for prec in bf16 fp32; do
        bin=./train_gpt2cu
        [ $prec = fp32 ] && bin=./train_gpt2fp32cu
        step "train $layout in $prec: d12, B=16, T=256, $STEPS steps"
        timeout 120 $bin --norm $layout "${TRAIN[@]}" > "$RUNS/${layout}_$prec.log" 2>&1
        rc=$?
        show_run "$RUNS/${layout}_$prec.log"
        status "train_${layout}_$prec" $rc
    done
done

step "TF32: siamese d12 in the fp32 build with -f 1, 60 steps (against the fp32 run above)"
timeout 60 ./train_gpt2fp32cu --norm siamese -e d12 -b 16 -t 256 -x 60 -l 6e-4 -u 20 -v 0 -s 0 -f 1 \
    > "$RUNS/tf32.log" 2>&1
rc=$?
grep -E "^step +(1|10|50|60)/|error" "$RUNS/tf32.log"
status tf32 $rc

# T = 1024: the T x T attention matrix is what -r 1 cannot save and flash attention does
VARIANTS=(materialized "-r 0" flash "-r 0" materialized_r1 "-r 1" flash_r1 "-r 1")
for ((i = 0; i < ${#VARIANTS[@]}; i += 2)); do
    name=${VARIANTS[i]} flags=${VARIANTS[i + 1]}
    bin=./train_gpt2cu
    [ "${name%%_*}" = flash ] && bin=$FLASH
    step "siamese d12 at T=1024, B=8, bf16, $name ($flags), 20 steps"
    timeout 90 $bin --norm siamese -e d12 -b 8 -t 1024 -x 20 -l 6e-4 -u 5 -v 0 -s 0 $flags > "$RUNS/var_$name.log" 2>&1
    rc=$?
    grep -E "^\| (attention|memory)|^step +(1|10|20)/|error" "$RUNS/var_$name.log"
    status "t1024_$name" $rc
done

step "d48 (1.5 B parameters) siamese at T=1024, B=8, bf16: 20 steps on the KJV bytes"
timeout 150 ./train_gpt2cu --norm siamese -e d48 -b 8 -t 1024 -x 20 -l 1e-4 -u 5 -v 0 -s 0 > "$RUNS/d48.log" 2>&1
rc=$?
grep -E "^\| (parameters|memory|MFU)|^step +(1|2|5|10|15|20)/|error" "$RUNS/d48.log"
status d48 $rc

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
# the summary table. Step lines: step n/N | loss | norm | lr | ms | tok/s | MFU | MiB GPU

median_ms() {  # median ms of the step lines after the first $2 (warm-up; default 10)
    grep -E '^step ' "$1" 2>/dev/null | awk -F'|' -v skip="${2:-10}" 'NR > skip { v = $5; gsub(/ms/, "", v); print v + 0 }' |
        sort -g | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)]; else print "-" }'
}
or_dash() { read -r v || true; echo "${v:--}"; }
last_step_field() {  # field $2 (1-based, split on '|') of the last step line, without its label
    grep -E '^step ' "$1" 2>/dev/null | tail -n 1 | awk -F'|' -v f="$2" '{ v = $f; gsub(/MFU|MiB GPU|^ +| +$/, "", v); print v }' |
        or_dash
}
first_loss() { grep -E '^step ' "$1" 2>/dev/null | head -n 1 | awk -F'|' '{ split($2, w, " "); print w[2] }' | or_dash; }
final_loss() { grep -E '^step ' "$1" 2>/dev/null | tail -n 1 | awk -F'|' '{ split($2, w, " "); print w[2] }' | or_dash; }
val_loss() { grep '^val loss' "$1" 2>/dev/null | tail -n 1 | awk '{ print $3 }' | or_dash; }
worst_grad() {  # the worst norm-wise and max-wise gradient errors in log $1 of the cases whose label starts with $2
    grep -ho 'GRADCHECK .*' "$1" 2>/dev/null | awk -v p="$2" '
        $2 ~ "^" p "($|-)" {
            for (i = 3; i <= NF; i++) {
                if ($i ~ /^norm_rel=/) { v = substr($i, 10) + 0; if (v > n) n = v; seen = 1 }
                if ($i ~ /^max_rel=/) { v = substr($i, 9) + 0; if (v > m) m = v }
            }
        }
        END { if (seen) printf "%.1e/%.1e", n, m; else printf "-" }'
}
worst_steps() {
    grep -ho "STEPCHECK $2 worst_rel=[^ ]*" "$1" 2>/dev/null | sed 's/.*worst_rel=//' | head -n 1 | or_dash
}
reldiff() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%+.2f%%", (a / b - 1) * 100; else print "-" }'; }

{
    echo
    echo "=== summary ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1), ${SECONDS}s in all)"
    for t in test_gpu test_gpu_bf16; do
        grep -E '^\[doctest\] (test cases|assertions)' "$RUNS/$t.log" 2>/dev/null | sed "s/^/tests\/$t /"
    done
    printf '%-8s | %-15s | %-15s | %-17s | %-8s | %-8s | %-7s | %-7s | %-7s | %-6s | %-7s\n' layout \
        "grad err fp32" "grad err bf16" "10-step fp32/bf16" "val bf16" "val fp32" "bf16-32" "ms bf16" "ms fp32" \
        "MFU" "MiB"
    printf '%s\n' "---------+-----------------+-----------------+-------------------+----------+----------+---------+---------+---------+--------+--------"
    for layout in pre post siamese; do
        b="$RUNS/${layout}_bf16.log" f="$RUNS/${layout}_fp32.log"
        printf '%-8s | %-15s | %-15s | %-17s | %-8s | %-8s | %-7s | %-7s | %-7s | %-6s | %-7s\n' "$layout" \
            "$(worst_grad "$RUNS/test_gpu.log" $layout)" "$(worst_grad "$RUNS/test_gpu_bf16.log" $layout)" \
            "$(worst_steps "$RUNS/test_gpu.log" $layout)/$(worst_steps "$RUNS/test_gpu_bf16.log" $layout)" \
            "$(val_loss "$b")" "$(val_loss "$f")" "$(reldiff "$(val_loss "$b")" "$(val_loss "$f")")" \
            "$(median_ms "$b")" "$(median_ms "$f")" "$(last_step_field "$b" 7)" "$(last_step_field "$b" 8)"
    done
    echo "(grad err: worst norm-wise/max-wise relative error over every gradient tensor of the layout's test cases"
    echo " (ablations, -r 1 and flash included); bounds 1e-4/3e-4 fp32, 3e-2/6e-2 bf16. 10-step: worst relative"
    echo " loss/norm difference over ten AdamW steps. Training: d12 B=16 T=256 on the KJV bytes, $STEPS steps; val"
    echo " losses after the last step; bf16-32: bf16's val loss against fp32's, expected within +-2%; MFU, MiB: bf16)"
    for t in test_gpu test_gpu_bf16; do  # VARIANTCHECK <label> against the default variant: norm_rel=<v> (<tensor>)
        grep -ho "VARIANTCHECK .*" "$RUNS/$t.log" 2>/dev/null | awk -v t=$t '
            { v = $(NF - 1); sub(/norm_rel=/, "", v); v += 0; n++; if ($2 ~ /flash/) { if (v > f) f = v } else if (v > r) r = v }
            END { if (n) printf "tests/%s: flash attention against the materialized one %.1e, -r 1 against -r 0 %.1e " \
                                "(worst gradient, norm-wise)\n", t, f, r }'
    done
    grep -ho "TCCHECK .*" "$RUNS/test_gpu_bf16.log" 2>/dev/null | awk '  # TCCHECK hs=64: out 1.9e-03 lse ... dv 2.5e-03
        { for (i = 3; i <= NF; i += 2) if ($(i + 1) + 0 > w) w = $(i + 1) + 0; n++ }
        END { if (n) printf "tests/test_gpu_bf16: tensor-core flash attention against the portable kernels, worst of" \
                            " out/lse/dq/dk/dv over %d head sizes: %.1e (bound 1e-2)\n", n, w }'
    ms0=$(median_ms "$RUNS/siamese_fp32.log") ms1=$(median_ms "$RUNS/tf32.log")
    echo "TF32 (fp32 build, siamese d12): -f 0 $ms0 ms/step, -f 1 $ms1 ms/step (loss $(final_loss "$RUNS/tf32.log")" \
        "at step 60), speed-up $(awk -v a="$ms0" -v b="$ms1" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2fx", a / b; else print "-" }');" \
        "bf16 against fp32: $(awk -v a="$ms0" -v b="$(median_ms "$RUNS/siamese_bf16.log")" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2fx", a / b; else print "-" }')"
    echo "siamese d12, T=1024, B=8, bf16 (median ms of steps 6..20, GPU MiB, MFU):"
    for ((i = 0; i < ${#VARIANTS[@]}; i += 2)); do
        l="$RUNS/var_${VARIANTS[i]}.log"
        printf '  %-16s %8s ms %8s MiB  MFU %s\n' "${VARIANTS[i]}" "$(median_ms "$l" 5)" "$(last_step_field "$l" 8)" \
            "$(last_step_field "$l" 7)"
    done
    awk -v m="$(median_ms "$RUNS/var_materialized.log" 5)" -v f="$(median_ms "$RUNS/var_flash.log" 5)" 'BEGIN {
        if (m + 0 > 0 && f + 0 > 0)
            printf "  flash attention takes %.2fx the materialized one'"'"'s time a step: %s\n", f / m,
                   f < m ? "build train_gpt2cu with ATTENTION=flash for tests/bench_gpu.sh" : "keep the materialized default" }'
    echo "d48 siamese, T=1024, B=8, bf16: loss $(first_loss "$RUNS/d48.log") -> $(final_loss "$RUNS/d48.log") in 20" \
        "steps, $(median_ms "$RUNS/d48.log" 5) ms/step, MFU $(last_step_field "$RUNS/d48.log" 7)," \
        "$(last_step_field "$RUNS/d48.log" 8) MiB GPU"
    echo "exit statuses: ${STATUS[*]}"
} | tee "$SUMMARY"
rm -rf "$RUNS"

# BENCH=1: the speed table of issue 4 too (tests/bench_gpu.sh: d12..d48 x layouts at T = 1024, then the profile by
# part; about 4 minutes), after the summary, so that a time limit reached during it leaves the summary whole. Its
# full output goes to $OUT/bench.txt, its table to the end of the summary.
if [ "${BENCH:-0}" = 1 ]; then
    step "tests/bench_gpu.sh (full output: $OUT/bench.txt)"
    OUT= timeout 330 bash tests/bench_gpu.sh > "$OUT/bench.txt" 2>&1
    rc=$?
    {
        echo
        sed -n '/^=== /,/^(vs pre/p' "$OUT/bench.txt"
        grep -A 12 "^ms a step over pre's" "$OUT/bench.txt"
        echo "bench: exit status $rc (${SECONDS}s in all; the profiles by part are in $OUT/bench.txt)"
    } | tee -a "$SUMMARY"
fi
