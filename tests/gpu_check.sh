#!/usr/bin/env bash
# Everything a lent GPU must show about the CUDA trainer, and its speed table, in ONE call. Word for word:
#
#   `make gpu-prep` here, then `run(command="bash tests/gpu_check.sh", carry=[".gpu"], timeout_s=590)`
#
# One call, because a lent H200 gives a task 15 minutes of device time in all, the machine's start (1-2 minutes)
# included, and stays warm only 30 s after a call: a second call would usually pay the start and the build again.
# So the check and the bench share 560 s (timeout_s=590 leaves the margin), in order of importance, each stage under
# its own share (tests/gpu_lib.sh: a stage may use what the earlier ones left, never what the later ones reserve;
# DRY_RUN=1 prints the budget table and proves the sum):
#   probe       .gpu/ complete and unchanged, nvcc, make and g++ there, a GPU that runs a kernel; without one:
#               "error: no GPU", exit 2, within 30 seconds, no table
#   build       sm_90 only (GPU_ARCHS=90 TEST_ARCHS=90, -j$(nproc)): the bf16 trainer, tests/test_gpu_bf16, the CPU
#               reference; beside it (not timed in the stages) the cuDNN build (tests/test_gpu_cudnn,
#               train_gpt2cu_cudnn with all three attentions) and the float32 programs
#   gradients   tests/test_gpu_bf16 against the CPU reference (a SKIPPED test fails here): every layout and
#               gradient, -r 1, flash, the classifier's log-sum-exp loss, cuBLASLt with and without its epilogues
#   cudnn       tests/test_gpu_cudnn: the cuDNN attention against the CPU, the materialized and the portable flash
#               attention; a shape cuDNN refuses is recorded (the summary lists it) and the rest go on
#   e2e         the same tiny run on ./reference_cpu and ./train_gpt2cu: main.log against main.log
#   d12         d12 per layout (pre, post, siamese, mix, hybrid, siamese-hybrid) on the KJV bytes, 150 steps, side
#               by side
#   peer        the PyTorch peer's loss of the pre, post and siamese checkpoints on the same batches
#               (tests/bench_torch.py, one process; it has no model of the other layouts)
#   t1024       memory and speed at T = 1024: siamese with each attention (materialized, flash, cuDNN; -r 0 and
#               -r 1), siamese-hybrid (materialized, -r 1, flash -r 1) and hybrid (materialized)
#   d48         20 steps of d48 (1.5 B parameters)
#   resume      checkpoint and resume (-y 1) bit for bit
#   sanitizers  compute-sanitizer memcheck, racecheck, synccheck, initcheck on the bf16 cases of SANITIZE_CASES
#               (below: the small shapes and the new kernels' hard ones, head sizes 30, 48 and 132, C = 90 and
#               C = 2112, T = 264 and 300), each finding ours or the libraries' (tests/sanitizer_report.py: a
#               cuBLAS or cuDNN kernel is not our bug); racecheck and synccheck check our kernels alone
#               (compute-sanitizer's --kernel-name filters, from tests/sanitizer_report.py --kernel-filters)
#   bench       tests/bench_gpu.sh: d12 and d48, each layout of BENCH_LAYOUTS (Mix-LN last, where it fits), each
#               attention at d12, tokens/s, MFU, SiameseNorm's overhead over Pre-Norm, beside the PyTorch peer
#               (torch.compile, SDPA flash, bf16 autocast) at d12
# then, in what time is left: the NCCL check (tests/gpu_nccl_check.sh, where the machine has MPI; "skipped" in
# seconds where not), and the float32 programs (tests/test_gpu, the fp32 trainer against the CPU and at d12, which
# repeat what the float32 build showed at 7fadb1e).
#
# `make gpu-prep` writes .gpu/ (git-ignored: the KJV shards, doctest.h, the cuDNN frontend's headers, a record of
# the tree; tests/gpu_prep.sh), so the GPU machine needs the working tree and that folder and nothing else.
# $OUT/summary.txt is rewritten after every stage, so it stays whole if the call is cut off; a step cut at the end
# of its share keeps what it printed until then (its output goes to its log line by line: tests/gpu_lib.sh), the
# summary reads that and says "TIMED OUT (cut at Ns)"; its gradient table has a row for every layout the CUDA
# trainer runs (host/layouts.h, asked in the probe stage), a layout added there included. The log of everything
# is $OUT/gpu_check.log, the bench's $OUT/bench.txt and $OUT/bench.log, the NCCL check's $OUT/nccl_check.log (five
# files: the device call returns at most 8). OUT defaults to /tmp/gpu_check. TRAIN_GPT2_EPILOGUES=0 in the
# command's environment runs everything without cuBLASLt's epilogues (docs/cuda.md). The exit status is 0 only when
# every step of the stages passed (and the NCCL check did not fail).
set -u
cd "$(dirname "$0")/.."
. tests/gpu_lib.sh
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"
RUNS=$(mktemp -d)  # the per-step logs stay out of $OUT (few files come back from it); their text goes to the log
exec > >(tee "$OUT/gpu_check.log") 2>&1
TEE=$!
# at the end tee has written every line, to the log and to the call's output, before the script returns
trap 'rm -rf "$RUNS"; exec > /dev/null 2>&1; wait $TEE' EXIT
T0=$SECONDS
TOTAL=560
DEADLINE=$((T0 + TOTAL))
plan probe:20 build:60 gradients:60 cudnn:40 e2e:15 d12:30 peer:25 t1024:60 d48:30 resume:15 sanitizers:70 bench:130
NPROC=$(nproc)
KJV="$PREP/kjv"
MAKE=(make -j"$NPROC" DOCTEST="$PREP/doctest" GPU_ARCHS=90 TEST_ARCHS=90)
# the layouts the stages train (each costs GPU time: a layout added to the registry gets its gradient row in the
# summary by itself, a d12 run, a T = 1024 row or a bench row only where it is added here); the PyTorch peer's
# (tests/bench_torch.py has a model of these three)
D12_LAYOUTS="pre post siamese mix hybrid siamese-hybrid"
TORCH_LAYOUTS="pre post siamese"
T1024_RUNS="siamese:materialized siamese:flash siamese:cudnn siamese-hybrid:materialized hybrid:materialized
            siamese:materialized_r1 siamese:flash_r1 siamese-hybrid:flash_r1 siamese-hybrid:materialized_r1"
BENCH_LAYOUTS="pre siamese siamese-hybrid hybrid post mix"

# ---------------------------------------------------------------------------------------------------------------
# probe: inputs and the GPU
stage probe
setup_toolkit
check_prep
echo "tree: $TREE"
if [ "$DRY_RUN" = 1 ]; then
    GPU_NAME="(dry run: no GPU probed)"
elif ! probe_gpu 2> "$RUNS/probe.txt"; then
    cat "$RUNS/probe.txt"
    { cat "$RUNS/probe.txt"; echo "gpu_check: no GPU, nothing was run; tree: $TREE"; } > "$SUMMARY"
    exit 2
else
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
    echo "CPU cores: $NPROC; $(nvcc --version | tail -n 1); PyTorch: $($TORCH_PY -c 'import torch; print(torch.__version__)' 2>&1 | tail -n 1)"
    echo "compute-sanitizer: $(compute-sanitizer --version 2> /dev/null | tail -n 1 || echo none); mpirun: $(command -v mpirun || echo none)"
fi
echo "TRAIN_GPT2_EPILOGUES=${TRAIN_GPT2_EPILOGUES:-(unset: the cuBLASLt epilogues on)}"
# the summary's gradient rows: the layouts the CUDA trainer runs, as the registry says (tests/gpu_lib.sh)
CUDA_LAYOUTS=$(cuda_layouts 2> "$RUNS/layouts.err" | paste -sd' ' -)
[ -n "$CUDA_LAYOUTS" ] || CUDA_LAYOUTS_WHY="the layouts could not be listed (host/layouts.h): $(tr '\n' ' ' < "$RUNS/layouts.err")"
echo "layouts the CUDA trainer runs: ${CUDA_LAYOUTS:-none: $CUDA_LAYOUTS_WHY}"

# ---------------------------------------------------------------------------------------------------------------
# the summary, rewritten after each stage from the logs that exist so far

log_of() { echo "$RUNS/$1.log"; }
or_dash() { read -r v || true; echo "${v:--}"; }
grad_rows() {  # LOG: a row for each layout the CUDA trainer runs (CUDA_LAYOUTS), tab-separated: the layout, the
    # worst norm-wise/max-wise gradient error of its cases, the case of the worst norm-wise one, the worst of its ten
    # AdamW steps, its number of cases. A case is the layout's whose name is its label or begins it before a "-",
    # the longest such name: siamese-hybrid-r1 is siamese-hybrid's, not siamese's; hybrid-star-r1 is hybrid-star's.
    # A NaN or inf is the worst there is (awk compares nothing with a NaN: it is kept as text).
    grep -hoE '(GRADCHECK|STEPCHECK) .*' "$1" 2> /dev/null | awk -v layouts="$CUDA_LAYOUTS" '
        function owner(label,   i, best) {
            best = ""
            for (i = 1; i <= n; i++)
                if ((label == L[i] || index(label, L[i] "-") == 1) && length(L[i]) > length(best)) best = L[i]
            return best
        }
        function worse(v, old) { return v ~ /nan|inf/ || (old !~ /nan|inf/ && (old == "" || v + 0 > old + 0)) }
        function value(field, key) { return substr(field, length(key) + 1) }
        BEGIN { n = split(layouts, L, " ") }
        {
            o = owner($2)
            if (o == "") next
            for (i = 3; i <= NF; i++) {
                if ($1 == "GRADCHECK" && index($i, "norm_rel=") == 1 && worse(v = value($i, "norm_rel="), nw[o])) {
                    nw[o] = v; worst_case[o] = $2
                }
                if ($1 == "GRADCHECK" && index($i, "max_rel=") == 1 && worse(v = value($i, "max_rel="), mw[o])) mw[o] = v
                if ($1 == "STEPCHECK" && index($i, "worst_rel=") == 1 && worse(v = value($i, "worst_rel="), sw[o])) sw[o] = v
            }
            if ($1 == "GRADCHECK") cases[o]++
        }
        function e(v) { return v == "" ? "-" : v ~ /nan|inf/ ? v : sprintf("%.1e", v) }
        END {
            for (i = 1; i <= n; i++) {
                o = L[i]
                printf "%s\t%s\t%s\t%s\t%d\n", o, (o in cases) ? e(nw[o]) "/" e(mw[o]) : "-",
                    (o in worst_case) ? worst_case[o] : "-", e(sw[o]), cases[o]
            }
        }'
}
step_loss() {  # the loss of step line $2 (first or last)
    grep -E '^step ' "$1" 2> /dev/null | { [ "$2" = first ] && head -n 1 || tail -n 1; } |
        awk -F'|' '{ split($2, w, " "); print w[2] }' | or_dash
}
val_loss() { grep '^val loss' "$1" 2> /dev/null | tail -n 1 | awk '{ print $3 }' | or_dash; }
peer_loss() {  # checkpoint-dir dtype: tests/bench_torch.py's loss of it
    grep -h "^loss .*($2, .*/$1/model_" "$RUNS"/peer*.log 2> /dev/null | tail -n 1 | awk '{ print $2 }' | or_dash
}
reldiff() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%+.2f%%", (a / b - 1) * 100; else print "-" }'; }
absrel() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.1e", (a > b ? a - b : b - a) / b; else print "-" }'; }
within() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { exit !(a + 0 > 0 && b + 0 > 0 && (a > b ? a - b : b - a) <= t * b) }'; }
median_ms() {  # the median ms of the step lines after the first $2
    grep -E '^step ' "$1" 2> /dev/null | awk -F'|' -v skip="$2" 'NR > skip { v = $5; gsub(/ms/, "", v); print v + 0 }' |
        sort -g | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)]; else print "-" }'
}
last_field() {  # field $2 of the last step line (MFU: 7, MiB GPU: 8)
    grep -E '^step ' "$1" 2> /dev/null | tail -n 1 | awk -F'|' -v f="$2" '{ v = $f; gsub(/MFU|MiB GPU|^ +| +$/, "", v); print v }' | or_dash
}
doctest_line() { grep -E '^\[doctest\] test cases' "$(log_of "$1")" 2> /dev/null | sed 's/^\[doctest\] //' | tail -n 1; }
sanitizer_cell() {  # NAME: "clean", "N OURS", "clean (N in libraries)", a cut one's findings until then, or the
    # step's word
    local line ours libs
    line=$(grep -h "^SANITIZER $1.log " "$RUNS/sanitizers.txt" 2> /dev/null)
    [ -n "$line" ] && [ "${STEP_RC[$1]:--}" != "-" ] || { step_word "$1" 0; return; }
    ours=$(sed -n 's/.* ours=\([0-9]*\).*/\1/p' <<< "$line") libs=$(sed -n 's/.* libraries=\([0-9]*\).*/\1/p' <<< "$line")
    if [ "$ours" != 0 ]; then echo "$ours OURS$(! step_cut "$1" || echo " ($(step_word "$1"))")"
    elif step_cut "$1"; then
        echo "$(step_word "$1"); until then none ours, $libs in libraries, over the first" \
            "$(grep -cE 'GRADCHECK|STEPCHECK|TCCHECK|LSECHECK|LTCHECK' "$(log_of "$1")") checks"
    elif [ "${STEP_PASSED[$1]:-0}" != 1 ]; then step_word "$1" 0
    elif [ "$libs" != 0 ]; then echo "clean ($libs in libraries)"
    else echo clean
    fi
}

summary() {  # [final]: a dry run writes it once, at the end
    [ "$DRY_RUN" = 1 ] && [ "${1:-}" != final ] && return
    {
    echo "=== gpu_check: $GPU_NAME; $(( SECONDS - T0 ))s of ${TOTAL}s"
    echo "tree: $TREE"
    echo "bias and GELU: $([ "${TRAIN_GPT2_EPILOGUES:-1}" = 0 ] && echo "separate kernels (TRAIN_GPT2_EPILOGUES=0)" || echo "cuBLASLt's epilogues")"
    echo
    echo "gradients (tests/test_gpu_bf16: every gradient tensor of the bf16 GPU trainer against the CPU reference)"
    printf '  tests/%-14s %-10s %s\n' test_gpu_bf16 "$(step_word test_gpu_bf16 "${STEP_PASSED[test_gpu_bf16]:-0}")" \
        "$(doctest_line test_gpu_bf16)"
    local row=(layout "bf16 norm/max" "worst case (norm-wise)" "10 AdamW steps" cases)
    printf '  %-15s | %-15s | %-26s | %-14s | %s\n' "${row[@]}"
    [ -n "$CUDA_LAYOUTS" ] || echo "  ($CUDA_LAYOUTS_WHY)"
    while IFS=$'\t' read -r -a row; do printf '  %-15s | %-15s | %-26s | %-14s | %s\n' "${row[@]}"; done \
        < <(grad_rows "$(log_of test_gpu_bf16)")
    echo "  (a row for each layout the CUDA trainer runs (host/layouts.h); worst relative error over the layout's"
    echo "   cases: its ablations, -r 1, flash, C = 90 and 2112, long rows, d12; cases 0: none of the program's"
    echo "   cases is the layout's; bounds 3e-2/6e-2 at small shapes, 5e-2/1e-1 at d12; 10 steps 1e-2)"
    grep -ho "VARIANTCHECK .*" "$(log_of test_gpu_bf16)" 2> /dev/null | awk '
        { v = $(NF - 1); sub(/norm_rel=/, "", v); v += 0; n++; if ($2 ~ /flash/) { if (v > f) f = v } else if (v > r) r = v }
        END { if (n) printf "  flash against materialized %.1e, -r 1 against -r 0 %.1e (worst gradient, norm-wise)\n", f, r }'
    grep -ho "TCCHECK .*" "$(log_of test_gpu_bf16)" 2> /dev/null | awk '
        { for (i = 3; i <= NF; i += 2) if ($(i + 1) + 0 > w) w = $(i + 1) + 0; n++ }
        END { if (n) printf "  tensor-core flash against the portable kernels, worst of out/lse/dq/dk/dv over %d head sizes: %.1e (bound 1e-2)\n", n, w }'
    grep -ho "LSECHECK Vp=64 training: .*" "$(log_of test_gpu_bf16)" 2> /dev/null | head -n 1 |
        sed 's/^LSECHECK Vp=64 training: /  classifier (log-sum-exp, a target logit 120 below the rest): /'
    grep -ho "LTCHECK [0-9].*" "$(log_of test_gpu_bf16)" 2> /dev/null | head -n 1 | sed 's/^LTCHECK /  cuBLASLt: /'
    grep -ho "LTCHECK switched.*" "$(log_of test_gpu_bf16)" 2> /dev/null | head -n 1 | sed 's/^LTCHECK /  cuBLASLt epilogues /'
    grep -h "^warning: cuBLASLt" "$(log_of test_gpu_bf16)" "$RUNS"/*.log 2> /dev/null | sort -u | head -n 3 | cut -c1-200 | sed 's/^/  /'
    echo
    echo "cuDNN attention (tests/test_gpu_cudnn: against the CPU, the materialized and the portable flash attention)"
    printf '  tests/%-14s %-10s %s\n' test_gpu_cudnn "$(step_word test_gpu_cudnn "${STEP_PASSED[test_gpu_cudnn]:-0}")" \
        "${CUDNN_WHY:-$(doctest_line test_gpu_cudnn)}"
    grep -hoE "(CUDNNCHECK|CUDNNGRAPHS|CUDNNSHAPES) .*" "$(log_of test_gpu_cudnn)" 2> /dev/null | head -n 6 | sed 's/^/  /'
    grep -hoE "CUDNNREFUSED .*" "$(log_of test_gpu_cudnn)" 2> /dev/null | sort -u | head -n 8 | cut -c1-220 | sed 's/^/  /'
    echo
    echo "training"
    printf '  CPU against GPU, one tiny siamese run (main.log, %s): bf16 %s, fp32 %s\n' "$E2E_DESC" \
        "$(tail -n 1 "$RUNS/e2e_bf16.cmp" 2> /dev/null | or_dash)" "$(tail -n 1 "$RUNS/e2e_fp32.cmp" 2> /dev/null | or_dash)"
    printf '  %-14s | %-17s | %-9s | %-17s | %-17s | %-9s | %-8s | %s\n' layout "bf16 loss" "val bf16" \
        "torch bf16 (rel)" "torch fp32 (rel)" "val fp32" "bf16-32" "torch fp32 of fp32 (rel)"
    for layout in $D12_LAYOUTS; do
        b=$(log_of train_${layout}_bf16) f=$(log_of train_${layout}_fp32)
        printf '  %-14s | %-17s | %-9s | %-17s | %-17s | %-9s | %-8s | %s\n' $layout \
            "$(step_loss "$b" first) -> $(step_loss "$b" last)" "$(val_loss "$b")" \
            "$(peer_loss ck_${layout}_bf16 bf16) ($(absrel "$(peer_loss ck_${layout}_bf16 bf16)" "$(val_loss "$b")"))" \
            "$(peer_loss ck_${layout}_bf16 fp32) ($(absrel "$(peer_loss ck_${layout}_bf16 fp32)" "$(val_loss "$b")"))" \
            "$(val_loss "$f")" "$(reldiff "$(val_loss "$b")" "$(val_loss "$f")")" \
            "$(peer_loss ck_${layout}_fp32 fp32) ($(absrel "$(peer_loss ck_${layout}_fp32 fp32)" "$(val_loss "$f")"))"
    done
    echo "  (d12 on the KJV bytes, B=16 T=256, $STEPS steps, the runs side by side on the GPU (so no timings here);"
    echo "   val after the last step over 10 batches; torch: tests/bench_torch.py's loss of the same checkpoint on the"
    echo "   same batches, relative to the trainer's: bound 1e-2 for the bf16 trainer (bf16 rounding), 1e-4 for the"
    echo "   fp32 one (float32 rounding); bf16-32 expected within +-2%; the PyTorch peer has $TORCH_LAYOUTS alone;"
    echo "   fp32 ($TORCH_LAYOUTS) only where time was left)"
    echo
    echo "memory and size (bf16, GPT-2's vocabulary, the KJV bytes; median ms of steps 6..20, MiB in use on the GPU, MFU)"
    for run in $T1024_RUNS; do
        l=$(log_of "t1024_${run/:/_}")
        printf '  d12 %-14s T=1024 B=8 %-16s %-9s %8s ms %8s MiB  MFU %s\n' "${run%%:*}" "${run#*:}" \
            "$(step_word "t1024_${run/:/_}")" "$(median_ms "$l" 5)" "$(last_field "$l" 8)" "$(last_field "$l" 7)"
    done
    l=$(log_of d48)
    echo "  d48 siamese T=1024 B=8 (1.5 B parameters): $(step_word d48); loss $(step_loss "$l" first) ->" \
        "$(step_loss "$l" last) in 20 steps, $(median_ms "$l" 5) ms/step, MFU $(last_field "$l" 7), $(last_field "$l" 8) MiB"
    echo "  resume (-y 1 at step 20 of 30, tiny siamese, bf16): $(step_word resume "${STEP_PASSED[resume]:-0}") ${RESUME_DESC:-}"
    echo
    echo "compute-sanitizer on tests/test_gpu_bf16's cases ${SANITIZE_CASES}"
    echo "  (racecheck and synccheck: our kernels alone, compute-sanitizer's --kernel-name filters; ${FILTERS_LINE:-not checked yet})"
    for tool in memcheck racecheck synccheck initcheck; do
        printf '  %-10s %s\n' $tool "$(sanitizer_cell san_$tool)"
        grep -h "^SANITIZER san_$tool.log " "$RUNS/sanitizers.txt" 2> /dev/null | sed 's/^SANITIZER [^ ]* /    /' | cut -c1-220
    done
    echo "  (OURS: a finding in one of this project's kernels, a failure; in libraries: in cuBLAS's, cuBLASLt's or"
    echo "   cuDNN's kernels or calls, reported and not counted against us: tests/sanitizer_report.py)"
    echo
    echo "speed (tests/bench_gpu.sh; its table, $OUT/bench.txt):"
    if [ -s "$OUT/bench.txt" ] && [ "${STEP_RC[bench]:--}" != "-" ]; then
        sed 's/^/  /' "$OUT/bench.txt"
        ! step_cut bench || echo "  bench: $(step_word bench): the rows above are what it measured before the cut"
    else echo "  $(step_word bench)"; fi
    echo
    echo "after the stages, in the time left:"
    echo "  NCCL back end, one rank (tests/gpu_nccl_check.sh): $NCCL_LINE"
    printf '  float32: tests/test_gpu %s %s; e2e %s; d12 %s; torch fp32 %s\n' "$(step_word test_gpu "${STEP_PASSED[test_gpu]:-0}")" \
        "$(doctest_line test_gpu)" "$(step_word e2e_fp32 "${STEP_PASSED[e2e_fp32]:-0}")" \
        "$(step_word train_pre_fp32)" "$(step_word peer_fp32 "${STEP_PASSED[peer_fp32]:-0}")"
    echo
    local n_ok=0 n_bad=0 n_not=0 bad=() s w
    for s in "${STEP_ORDER[@]}"; do
        w=$(step_word "$s" "${STEP_PASSED[$s]:-1}")
        if [ -n "${EXTRA_STEP[$s]:-}" ]; then  # after the stages: a failure counts, a step not run does not
            case $w in ok|"not run"|"TIMED OUT"*) continue ;; esac
        fi
        case $w in
            ok) n_ok=$((n_ok + 1)) ;;
            "not run") n_not=$((n_not + 1)) ;;
            *) n_bad=$((n_bad + 1)); bad+=("$s: $w") ;;
        esac
    done
    if [ "$DRY_RUN" = 1 ]; then
        echo "budget (DRY_RUN=1; each stage taken to last its nominal seconds):"
        print_plan
        echo "dry run: nothing was run; the stages' timeouts add up to ${BUDGET}s (the check must stay within ${TOTAL}s)"
    else
        echo "gpu_check: $n_ok passed, $n_bad failed, $n_not not run${bad:+ (${bad[*]})}"
    fi
    } > "$SUMMARY.tmp"
    mv "$SUMMARY.tmp" "$SUMMARY"
}
declare -A STEP_PASSED EXTRA_STEP
NCCL_LINE="not run yet (after the stages, where time is left)"
STEPS=150
E2E_DESC="2 layers, C=64, 8 steps with accumulation, validation, clipping, weight decay; bounds 3e-2 bf16, 1e-5 fp32"
# the sanitizers' cases (doctest's -tc filters; a comma separates them): the small shapes of the layouts, ten AdamW
# steps, the attentions, the classifier, cuBLASLt's fallback, and the new kernels' hard cases: the QKV norm at head
# sizes 48 and 30 (C = 90: misaligned rows, the element-at-a-time paths) and 16 (hybrid and hybrid-star,
# siamese-hybrid), 132 at C = 2112 (16 channels a thread), with -r 1 and flash; T = 264 and 300 (partial flash tiles,
# several packs a lane in the softmax); C = 90 in pre and siamese
SANITIZE_CASES="pre: logits*,siamese: logits*,hybrid and hybrid-star*,siamese-hybrid: logits*,*with C > 2048*,ten AdamW*"
SANITIZE_CASES+=",flash attention:*,QKV-norm layouts*,long rows*,C not a multiple of 8*,tensor-core*,classifier*,cuBLASLt*"
summary

# ---------------------------------------------------------------------------------------------------------------
# build: what the next stages need, for sm_90 only; the cuDNN build and the float32 programs beside it
echo; echo "=== build (at $((SECONDS - T0))s)"
stage build
find_cudnn
echo "cuDNN: ${CUDNN_WHY:-$CUDNN_MAKE}"
if [ -z "$CUDNN_WHY" ]; then
    start_background build_cudnn 170 "${MAKE[@]}" $CUDNN_MAKE tests/test_gpu_cudnn train_gpt2cu_cudnn
fi
start_background build_fp32 240 "${MAKE[@]}" train_gpt2fp32cu tests/test_gpu
EXTRA_STEP[build_fp32]=1
run_step build 60 "${MAKE[@]}" PRECISION=BF16 ATTENTION=materialized USE_CUDNN=0 train_gpt2cu tests/test_gpu_bf16 \
    reference_cpu
tail -n 5 "$(log_of build)" 2> /dev/null
summary

# ---------------------------------------------------------------------------------------------------------------
# gradients: the bf16 trainer against the CPU reference, every case
echo; echo "=== gradients (at $((SECONDS - T0))s)"
stage gradients
run_step test_gpu_bf16 150 env OMP_NUM_THREADS=$NPROC ./tests/test_gpu_bf16
grep -E "GRADCHECK|STEPCHECK|VARIANTCHECK|TCCHECK|LSECHECK|LTCHECK|ERROR|warning:|test cases|SKIPPED" \
    "$(log_of test_gpu_bf16)" 2> /dev/null | sed 's/^.*MESSAGE: //'
STEP_PASSED[test_gpu_bf16]=0
test_log_passed "$(log_of test_gpu_bf16)" "${STEP_RC[test_gpu_bf16]}" && STEP_PASSED[test_gpu_bf16]=1
summary

# cudnn: its build has had the time until now
echo; echo "=== cuDNN (at $((SECONDS - T0))s)"
stage cudnn
if [ -z "$CUDNN_WHY" ]; then
    wait_steps build_cudnn
    tail -n 5 "$(log_of build_cudnn)" 2> /dev/null
    if [ "${STEP_RC[build_cudnn]}" = 0 ] || [ "$DRY_RUN" = 1 ]; then
        run_step test_gpu_cudnn 90 env OMP_NUM_THREADS=$NPROC ./tests/test_gpu_cudnn
        grep -E "GRADCHECK|VARIANTCHECK|CUDNN[A-Z]+|ERROR|error:|test cases|SKIPPED" "$(log_of test_gpu_cudnn)" 2> /dev/null |
            sed 's/^.*MESSAGE: //'
        STEP_PASSED[test_gpu_cudnn]=0
        test_log_passed "$(log_of test_gpu_cudnn)" "${STEP_RC[test_gpu_cudnn]}" 1 && STEP_PASSED[test_gpu_cudnn]=1
    fi
fi
summary

# ---------------------------------------------------------------------------------------------------------------
# e2e: the same tiny run on the CPU and the GPU (as tools/emulate_gpu.sh does in the emulator)
echo; echo "=== training (at $((SECONDS - T0))s)"
KJV_FLAGS=(-i "$KJV/kjv_train.bin" -j "$KJV/kjv_val.bin")
E2E=(--norm siamese --layers 2 --channels 64 --heads 2 -b 4 -t 32 -x 8 -l 1e-3 -u 3 -q 0.1 -v 4 -m 2 -s 8 -g 16
     -c 0.1 -d 256)
compare_e2e() {  # PRECISION BOUND: the GPU's main.log against the CPU's
    STEP_PASSED[e2e_$1]=0
    [ "${STEP_RC[e2e_cpu]}" = 0 ] && [ "${STEP_RC[e2e_$1]}" = 0 ] || return 0
    python3 tools/compare_logs.py "$RUNS/e2e_cpu/main.log" "$RUNS/e2e_$1/main.log" "$2" > "$RUNS/e2e_$1.cmp" 2>&1 &&
        STEP_PASSED[e2e_$1]=1
    cat "$RUNS/e2e_$1.cmp"
}
stage e2e
start_step e2e_cpu 15 env OMP_NUM_THREADS=4 ./reference_cpu "${E2E[@]}" "${KJV_FLAGS[@]}" -o "$RUNS/e2e_cpu"
start_step e2e_bf16 15 ./train_gpt2cu "${E2E[@]}" "${KJV_FLAGS[@]}" -o "$RUNS/e2e_bf16"
wait_steps e2e_cpu e2e_bf16
compare_e2e bf16 3e-2
summary

# d12: each layout of D12_LAYOUTS in bf16, side by side (each about 5 GiB)
D12=(-e d12 -b 16 -t 256 -x $STEPS -l 6e-4 -u 50 -q 0.1 -v $STEPS -m 10 -s 0)
stage d12
for layout in $D12_LAYOUTS; do
    start_step train_${layout}_bf16 30 ./train_gpt2cu --norm $layout "${D12[@]}" "${KJV_FLAGS[@]}" -o "$RUNS/ck_${layout}_bf16"
done
for layout in $D12_LAYOUTS; do wait_steps train_${layout}_bf16; done
for layout in $D12_LAYOUTS; do
    grep -E "^step +(1|50|100|150)/|^val loss|error" "$(log_of train_${layout}_bf16)" 2> /dev/null
done
summary

# peer: the PyTorch model's loss of each final checkpoint on the same 10 validation batches, in fp32 and with bf16
# autocast, in one Python process
CKPT=model_$(printf %08d $STEPS).bin
peer_check() {  # STEP DTYPES PRECISION: the checkpoints of ck_<layout>_<PRECISION>
    local step=$1 dtypes=$2 p=$3 ckpts=() layout
    for layout in $TORCH_LAYOUTS; do
        [ "$DRY_RUN" = 1 ] || [ -f "$RUNS/ck_${layout}_$p/$CKPT" ] && ckpts+=("$RUNS/ck_${layout}_$p/$CKPT")
    done
    if [ ${#ckpts[@]} -eq 0 ]; then STEP_RC[$step]="-"; STEP_ORDER+=("$step"); return; fi
    run_step "$step" 25 $TORCH_PY tests/bench_torch.py --check "${ckpts[@]}" --shard "$KJV/kjv_val.bin" -b 16 -t 256 \
        -m 10 --dtype "$dtypes"
    cat "$(log_of "$step")" 2> /dev/null
}
stage peer
peer_check peer fp32,bf16 bf16
STEP_PASSED[peer]=1
for layout in $TORCH_LAYOUTS; do
    v=$(val_loss "$(log_of train_${layout}_bf16)")
    within "$(peer_loss ck_${layout}_bf16 bf16)" "$v" 1e-2 && within "$(peer_loss ck_${layout}_bf16 fp32)" "$v" 1e-2 ||
        STEP_PASSED[peer]=0
done
summary

# ---------------------------------------------------------------------------------------------------------------
# t1024, d48: memory at T = 1024, the runs of T1024_RUNS (layout:attention[_r1]) in that order, one at a time (the
# MiB are the whole GPU's)
echo; echo "=== memory at T = 1024, d48 (at $((SECONDS - T0))s)"
stage t1024
for run in $T1024_RUNS; do
    layout=${run%%:*} v=${run#*:} r=0 bin=./train_gpt2cu
    [ "${v#*_}" = r1 ] && r=1
    if [ "$v" = cudnn ]; then
        bin=./train_gpt2cu_cudnn
        [ -z "$CUDNN_WHY" ] && { [ "${STEP_RC[build_cudnn]:-}" = 0 ] || [ "$DRY_RUN" = 1 ]; } || continue
    fi
    run_step "t1024_${layout}_$v" 10 $bin --norm "$layout" -e d12 --vocab 50257 -b 8 -t 1024 -x 20 -l 6e-4 -u 5 \
        -v 0 -s 0 --attention "${v%%_*}" -r $r "${KJV_FLAGS[@]}"
    grep -E "^\| (attention|memory|bias)|^step +(1|10|20)/|error" "$(log_of "t1024_${layout}_$v")" 2> /dev/null
done
summary
stage d48
run_step d48 30 ./train_gpt2cu --norm siamese -e d48 --vocab 50257 -b 8 -t 1024 -x 20 -l 1e-4 -u 5 -v 0 -s 0 \
    "${KJV_FLAGS[@]}"
grep -E "^\| (parameters|memory|MFU)|^step +(1|2|5|10|15|20)/|error" "$(log_of d48)" 2> /dev/null
summary

# ---------------------------------------------------------------------------------------------------------------
# resume: 20 steps, then -y 1 to 30, against 30 steps in one go: the same bytes
echo; echo "=== resume (at $((SECONDS - T0))s)"
stage resume
TINY=(--norm siamese --layers 2 --channels 64 --heads 2 -b 4 -t 64 -n 10 -v 10 -s 0 "${KJV_FLAGS[@]}")
cat > "$RUNS/resume.sh" << EOF
./train_gpt2cu ${TINY[*]} -x 30 -o "$RUNS/whole" > "$RUNS/whole.txt" 2>&1 &
./train_gpt2cu ${TINY[*]} -x 20 -o "$RUNS/parts" > "$RUNS/part1.txt" 2>&1 || exit 1
./train_gpt2cu ${TINY[*]} -x 30 -o "$RUNS/parts" -y 1 > "$RUNS/part2.txt" 2>&1 || exit 1
wait \$! || exit 1
tail -n 3 "$RUNS/part2.txt"
cmp "$RUNS/whole/model_00000030.bin" "$RUNS/parts/model_00000030.bin" && cmp "$RUNS/whole/state_00000030.bin" "$RUNS/parts/state_00000030.bin"
EOF
run_step resume 15 bash "$RUNS/resume.sh"
cat "$(log_of resume)" 2> /dev/null
STEP_PASSED[resume]=0
case ${STEP_RC[resume]} in
    0) STEP_PASSED[resume]=1; RESUME_DESC="(model and optimizer state at step 30 identical to the uninterrupted run)" ;;
    -) ;;
    *) RESUME_DESC="(see the log)" ;;
esac
summary

# ---------------------------------------------------------------------------------------------------------------
# sanitizers: each tool on the bf16 program's small cases, side by side; each finding ours or a library's
echo; echo "=== compute-sanitizer (at $((SECONDS - T0))s)"
stage sanitizers
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
# racecheck and synccheck look at shared memory and barriers, kernel by kernel: on our kernels alone (the filters
# name each of them), so that their time goes on our kernels and not on cuBLAS's; memcheck and initcheck see every
# kernel (a product given a wrong size reads out of bounds in cuBLAS's kernel: the report names the library's)
mapfile -t OURS_ONLY < <(python3 tests/sanitizer_report.py --kernel-filters)
[ ${#OURS_ONLY[@]} -gt 0 ] || echo "warning: no kernel filters (tests/sanitizer_report.py --kernel-filters): racecheck" \
    "and synccheck check every kernel"
# the filters against the kernels nvcc compiled into the program (nm): a kernel they miss fails racecheck and synccheck
FILTERS_OK=1 FILTERS_LINE="dry run: tests/sanitizer_report.py --check-filters ./tests/test_gpu_bf16"
if [ "$DRY_RUN" != 1 ]; then
    FILTERS_LINE=$(python3 tests/sanitizer_report.py --check-filters ./tests/test_gpu_bf16 2>&1) || FILTERS_OK=0
    echo "$FILTERS_LINE"
fi
for tool in memcheck racecheck synccheck initcheck; do
    filters=()
    case $tool in racecheck|synccheck) filters=("${OURS_ONLY[@]}") ;; esac
    start_step san_$tool 70 env OMP_NUM_THREADS=2 "$SAN" --tool $tool "${filters[@]}" --error-exitcode 9 \
        --print-limit 100 ./tests/test_gpu_bf16 -tc="$SANITIZE_CASES"
done
wait_steps san_{memcheck,racecheck,synccheck,initcheck}
logs=()
for tool in memcheck racecheck synccheck initcheck; do [ -f "$(log_of san_$tool)" ] && logs+=("$(log_of san_$tool)"); done
[ ${#logs[@]} -eq 0 ] || python3 tests/sanitizer_report.py "${logs[@]}" > "$RUNS/sanitizers.txt" 2>&1
cat "$RUNS/sanitizers.txt" 2> /dev/null
for tool in memcheck racecheck synccheck initcheck; do  # passed: the cases passed and no finding is ours
    s=san_$tool
    STEP_PASSED[$s]=0
    [ "${STEP_RC[$s]}" != "-" ] || continue
    # the tool's exit status is 9 where it found anything, a library's findings too: then the test's own summary and
    # the findings that are ours decide, and a pass is the step's status 0
    rc=${STEP_RC[$s]}
    [ "$rc" = 9 ] && rc=0
    case $tool in racecheck|synccheck) [ "$FILTERS_OK" = 1 ] || continue ;; esac  # it may have missed our kernels
    if test_log_passed "$(log_of $s)" "$rc" 1 && grep -q "^SANITIZER $s.log ours=0 " "$RUNS/sanitizers.txt"; then
        STEP_PASSED[$s]=1 STEP_RC[$s]=0
    fi
done
summary

# ---------------------------------------------------------------------------------------------------------------
# bench: the speed table, in what is left of the stage (tests/bench_gpu.sh, its parts in proportion)
echo; echo "=== bench (at $((SECONDS - T0))s)"
stage bench
bench_seconds=$(stage_left)
run_step bench $((bench_seconds > 3 ? bench_seconds - 3 : 1)) env NO_BUILD=1 GPU_NAME="$GPU_NAME" GPU_PREP="$PREP" \
    OUT="$OUT" BENCH_SECONDS=$((bench_seconds > 8 ? bench_seconds - 8 : 1)) SIZES="d12:16 d48:8" ATT_SIZES="d12:16" \
    TORCH_SIZES="d12:16" LAYOUTS="$BENCH_LAYOUTS" PROFILE=0 TRAINER_S=80 ATTENTION_S=15 TORCH_S=30 bash tests/bench_gpu.sh
[ "$DRY_RUN" = 1 ] || cat "$OUT/bench.txt" 2> /dev/null
summary

# ---------------------------------------------------------------------------------------------------------------
# after the stages, in what is left: the NCCL back end with one rank (where the machine has MPI), then the float32
# programs (they repeat what 7fadb1e showed)
stage_extra after
echo; echo "=== NCCL, one rank (at $((SECONDS - T0))s, $(time_left)s left)"
if [ "$DRY_RUN" = 1 ]; then
    NCCL_LINE="dry run: runs in the time left (skipped in seconds without MPI)"
elif [ "$(time_left)" -ge 8 ]; then
    OUT="$OUT" timeout $(($(time_left) - 3)) bash tests/gpu_nccl_check.sh "$KJV" > /dev/null 2>&1
    NCCL_LINE=$(tail -n 1 "$OUT/nccl_check.log" 2> /dev/null | grep '^nccl_check: ' || echo "cut off at the deadline")
    echo "$NCCL_LINE"
else
    NCCL_LINE="not run: $(time_left)s of the budget left"
fi
summary

echo; echo "=== float32 (at $((SECONDS - T0))s, $(time_left)s left)"
wait_steps build_fp32
for s in test_gpu e2e_fp32 peer_fp32; do EXTRA_STEP[$s]=1; done
for layout in $TORCH_LAYOUTS; do EXTRA_STEP[train_${layout}_fp32]=1; done
if [ "${STEP_RC[build_fp32]:-}" = 0 ] || [ "$DRY_RUN" = 1 ]; then
    if [ "$(time_left)" -ge 40 ] || [ "$DRY_RUN" = 1 ]; then
        run_step test_gpu $(time_left) env OMP_NUM_THREADS=$NPROC ./tests/test_gpu
        STEP_PASSED[test_gpu]=0
        test_log_passed "$(log_of test_gpu)" "${STEP_RC[test_gpu]}" && STEP_PASSED[test_gpu]=1
        grep -E "GRADCHECK|STEPCHECK|LSECHECK|ERROR|test cases" "$(log_of test_gpu)" 2> /dev/null | sed 's/^.*MESSAGE: //'
    fi
    if [ "$(time_left)" -ge 15 ] || [ "$DRY_RUN" = 1 ]; then
        run_step e2e_fp32 15 ./train_gpt2fp32cu "${E2E[@]}" "${KJV_FLAGS[@]}" -o "$RUNS/e2e_fp32"
        compare_e2e fp32 1e-5
    fi
    if [ "$(time_left)" -ge 45 ] || [ "$DRY_RUN" = 1 ]; then
        for layout in $TORCH_LAYOUTS; do
            start_step train_${layout}_fp32 30 ./train_gpt2fp32cu --norm $layout "${D12[@]}" "${KJV_FLAGS[@]}" \
                -o "$RUNS/ck_${layout}_fp32"
        done
        for layout in $TORCH_LAYOUTS; do wait_steps train_${layout}_fp32; done
        peer_check peer_fp32 fp32 fp32
        STEP_PASSED[peer_fp32]=1
        for layout in $TORCH_LAYOUTS; do
            within "$(peer_loss ck_${layout}_fp32 fp32)" "$(val_loss "$(log_of train_${layout}_fp32)")" 1e-4 ||
                STEP_PASSED[peer_fp32]=0
        done
    fi
fi
summary final

echo
cat "$SUMMARY"
if [ "$DRY_RUN" = 1 ]; then [ "$BUDGET" -le "$TOTAL" ]; exit; fi
! grep -q '^nccl_check: FAILED' <<< "$NCCL_LINE" &&
    tail -n 1 "$SUMMARY" | grep -qE '^gpu_check: [0-9]+ passed, 0 failed, 0 not run'
