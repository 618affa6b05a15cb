#!/usr/bin/env bash
# The GPU check's plumbing, on a machine without a GPU (what it can be held to before the rare GPU call):
#   make gpu-prep writes a complete, checked folder well under the device call's 64 MiB; tests/gpu_check.sh and
#   tests/bench_gpu.sh stop at once on a missing or corrupt input, exit non-zero within 30 s saying "no GPU" where
#   there is none (also when nvidia-smi answers but CUDA does not start), and never print a passing table; the one
#   call's dry run (DRY_RUN=1) fits 560 s, lists every step within its stage's share and prints the budget table,
#   and the call is written word for word where a session reads it; a stage's share holds (a slow stage is cut,
#   a fast one passes its time on, a program cut there keeps the lines it printed); the summary, on stand-in programs'
#   made-up logs, gives every layout the CUDA trainer runs its own row (from the registry: a planted row gets one; the
#   planted case of issue 27, siamese at 8e-3 and siamese-hybrid at 2.9e-2, apart), a NaN as the worst, and says
#   where a stage was cut, with what it found until then; a SKIPPED or failed test log never reads as passed;
#   tests/sanitizer_report.py tells the project's kernels from cuBLAS's and cuDNN's, and its kernel filters for
#   racecheck and synccheck match every kernel compiled into tests/test_gpu_bf16; each of the sanitizers' case filters
#   selects a test case; tools/compare_logs.py tells equal logs from different
#   ones; and tests/bench_torch.py's PyTorch model computes ./reference_cpu's validation loss from its checkpoints
#   for every layout, all in one process (so the GPU bench's peer runs our model).
# Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
TORCH_PY=${TORCH_PY:-/usr/bin/python3}
W=$(mktemp -d)
trap '[ -n "${KEEP_W:-}" ] || rm -rf "$W"' EXIT  # KEEP_W=1 keeps the scratch folder, to look into
passed=0 failed=0
check() {  # DESCRIPTION, then a command that must succeed
    local what=$1
    shift
    if "$@" > "$W/check.out" 2>&1; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "FAILED: $what"
        sed 's/^/    /' "$W/check.out" | tail -n 15
    fi
}
# runs a script, records its exit status, seconds and output
run() {  # OUTFILE CMD...
    local out=$1 start=$SECONDS
    shift
    "$@" > "$out" 2>&1
    echo $? > "$out.rc"
    echo $((SECONDS - start)) > "$out.s"
}

make -s reference_cpu data/kjv/kjv_train.bin || { echo "0 passed, 1 failed"; exit 1; }

# --- make gpu-prep
PREP="$W/prep"
run "$W/prep.txt" make -s gpu-prep GPU_PREP="$PREP"
check "make gpu-prep succeeds" test "$(cat "$W/prep.txt.rc")" = 0
for f in kjv/kjv_train.bin kjv/kjv_val.bin kjv/kjv_tokenizer.bin doctest/doctest.h SOURCE SOURCES.sha256 MANIFEST.sha256; do
    check "gpu-prep wrote $f" test -s "$PREP/$f"
done
check "the prepared shards are the data's" cmp data/kjv/kjv_train.bin "$PREP/kjv/kjv_train.bin"
check "MANIFEST.sha256 checks every prepared file" bash -c "cd '$PREP' && sha256sum --quiet -c MANIFEST.sha256 && [ \$(wc -l < MANIFEST.sha256) -eq \$(find . -type f ! -name MANIFEST.sha256 | wc -l) ]"
check "the prepared folder is well under 64 MiB" test "$(du -sb "$PREP" | cut -f1)" -lt $((32 << 20))
check "gpu-prep leaves no temporary folder" bash -c "! ls -d '$PREP'.tmp.* 2> /dev/null"
# git as it sees this tree; in a tree without its repository (a tarball), as a fresh clone's would (.gitignore)
tree_git() {
    if git rev-parse --git-dir > /dev/null 2>&1; then git "$@"; return; fi
    [ -d "$W/bare.git" ] || git init -q --bare "$W/bare.git"
    git --git-dir="$W/bare.git" --work-tree=. "$@"
}
check ".gpu/ is ignored by git (it travels only when carried)" tree_git check-ignore -q .gpu/kjv/kjv_train.bin
# a tree without its repository (git archive, as a tarball is): SOURCES.sha256 still lists every file (it was empty)
mkdir "$W/tree" && tree_git ls-files -z --cached --others --exclude-standard | xargs -0 -r sh -c \
    'for f; do [ -f "$f" ] && printf "%s\0" "$f"; done' _ | xargs -0 -r cp --parents -t "$W/tree"
mkdir -p "$W/tree/data/kjv" && cp data/kjv/kjv_*.bin "$W/tree/data/kjv/"
check "gpu-prep in a tree without git's repository lists its files" bash -c "cd '$W/tree' && bash tests/gpu_prep.sh \
    '$W/tree_prep' > /dev/null && [ \$(wc -l < '$W/tree_prep/SOURCES.sha256') -eq \$(cd '$W/tree' && find . -type f ! -path './data/kjv/*' | wc -l) ] &&
    grep -q '^no git repository' '$W/tree_prep/SOURCE'"

# --- no GPU here: the check and the bench stop within 30 seconds, say so, and print no passing table
run "$W/nogpu.txt" env GPU_PREP="$PREP" OUT="$W/out" bash tests/gpu_check.sh
check "gpu_check without a GPU exits non-zero" test "$(cat "$W/nogpu.txt.rc")" -ne 0
check "gpu_check without a GPU takes under 30 s" test "$(cat "$W/nogpu.txt.s")" -lt 30
check "gpu_check without a GPU says 'no GPU'" grep -q "error: no GPU" "$W/nogpu.txt"
check "gpu_check without a GPU builds nothing" bash -c "! grep -q '=== build' '$W/nogpu.txt'"
check "its summary says no GPU, and nothing passed" bash -c "grep -q 'gpu_check: no GPU, nothing was run' '$W/out/summary.txt' && ! grep -q passed '$W/out/summary.txt'"
# nvidia-smi answers (a stand-in that lists a GPU) but CUDA cannot start: the probe kernel tells
mkdir -p "$W/fakebin"
printf '#!/bin/sh\necho "GPU 0: Stand-in GPU (UUID: GPU-0)"\n' > "$W/fakebin/nvidia-smi"
chmod +x "$W/fakebin/nvidia-smi"
run "$W/fakegpu.txt" env PATH="$W/fakebin:$PATH" GPU_PREP="$PREP" OUT="$W/out2" bash tests/gpu_check.sh
check "gpu_check with nvidia-smi but no usable CUDA exits non-zero" test "$(cat "$W/fakegpu.txt.rc")" -ne 0
check "... within 30 s" test "$(cat "$W/fakegpu.txt.s")" -lt 30
check "... saying 'no GPU usable'" grep -q "error: no GPU usable" "$W/fakegpu.txt"
printf '#!/bin/sh\necho "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver" >&2\nexit 9\n' > "$W/fakebin/nvidia-smi"
run "$W/smifail.txt" env PATH="$W/fakebin:$PATH" GPU_PREP="$PREP" OUT="$W/out3" bash tests/gpu_check.sh
check "gpu_check with a failing nvidia-smi says 'no GPU'" bash -c "grep -q 'error: no GPU: nvidia-smi lists none' '$W/smifail.txt' && [ \$(cat '$W/smifail.txt.rc') -ne 0 ]"
run "$W/bench_nogpu.txt" env GPU_PREP="$PREP" OUT="$W/bout" bash tests/bench_gpu.sh
check "bench_gpu without a GPU exits non-zero within 30 s, saying 'no GPU'" bash -c \
    "[ \$(cat '$W/bench_nogpu.txt.rc') -ne 0 ] && [ \$(cat '$W/bench_nogpu.txt.s') -lt 30 ] && grep -q 'error: no GPU' '$W/bench_nogpu.txt'"

# --- inputs are checked before anything is built
run "$W/missing.txt" env GPU_PREP="$W/nonexistent" OUT="$W/out4" bash tests/gpu_check.sh
check "a missing prepared folder: one error naming make gpu-prep, exit non-zero" bash -c \
    "[ \$(cat '$W/missing.txt.rc') -ne 0 ] && grep -q \"error: '$W/nonexistent' is missing: run 'make gpu-prep'\" '$W/missing.txt'"
cp -r "$PREP" "$W/bad"
head -c 1000 "$PREP/kjv/kjv_val.bin" > "$W/bad/kjv/kjv_val.bin"
run "$W/corrupt.txt" env GPU_PREP="$W/bad" OUT="$W/out5" bash tests/gpu_check.sh
check "a truncated shard in it: caught by the manifest, exit non-zero" bash -c \
    "[ \$(cat '$W/corrupt.txt.rc') -ne 0 ] && grep -q 'does not match its MANIFEST' '$W/corrupt.txt'"
rm "$W/bad/doctest/doctest.h"
run "$W/nodoctest.txt" env GPU_PREP="$W/bad" OUT="$W/out6" bash tests/bench_gpu.sh
check "a missing doctest.h: named, exit non-zero" bash -c \
    "[ \$(cat '$W/nodoctest.txt.rc') -ne 0 ] && grep -q 'doctest/doctest.h. is missing' '$W/nodoctest.txt'"

# --- the one call: its budget, by a dry run
CALL='`make gpu-prep` here, then `run(command="bash tests/gpu_check.sh", carry=[".gpu"], timeout_s=590)`'
check "the call, word for word, at the top of tests/gpu_check.sh" bash -c "head -n 5 tests/gpu_check.sh | grep -qF '$CALL'"
check "the call, word for word, in docs/cuda.md" grep -qF "$CALL" docs/cuda.md
run "$W/dry.txt" env DRY_RUN=1 GPU_PREP="$PREP" OUT="$W/dry" bash tests/gpu_check.sh
check "gpu_check's dry run succeeds" test "$(cat "$W/dry.txt.rc")" = 0
budget=$(sed -n "s/.*timeouts add up to \([0-9]*\)s.*/\1/p" "$W/dry/summary.txt")
check "gpu_check's stages add up to at most 560 s (got ${budget:-none})" test "${budget:-999}" -le 560
sed -n '/^budget (DRY_RUN=1/,/^  total/p' "$W/dry/summary.txt" > "$W/plan.txt"
check "the dry run prints the budget table, every stage in order" bash -c \
    "awk '\$1 != \"stage\" && \$1 != \"budget\" { print \$1 }' '$W/plan.txt' | paste -sd' ' |
     grep -qx 'probe build gradients cudnn e2e d12 peer t1024 d48 resume sanitizers bench after total'"
steps=33  # build, its fp32 beside it, test_gpu_bf16, 2 e2e, 6 d12, peer, 8 T=1024, d48, resume, 4 sanitizers,
          # the bench; after them test_gpu, e2e and 3 d12 in fp32, their peer; + the cuDNN build, test, T=1024
[ -f "$PREP/cudnn-frontend/include/cudnn_frontend.h" ] && steps=36
check "every step of gpu_check is in the dry run ($steps)" test "$(grep -c '^\[dry run\]' "$W/dry.txt")" -eq $steps
# each step's timeout within its stage's nominal seconds and the plan's slack (560 - their sum); the builds beside
# the stages and the steps after them aside
check "no step's timeout exceeds its stage's share" awk -v slack=$((560 - ${budget:-0})) '
    $2 ~ /^[0-9]+$/ && $1 != "total" {
        line = $0; sub(/^ *[^ ]+ +[0-9]+ +[0-9]+s +/, "", line)
        n = split(line, parts, ", ")
        for (i = 1; i <= n; i++) {
            split(parts[i], w, " ")
            if (w[1] !~ /^build_/ && w[2] + 0 > $2 + slack) { print "too long:", $1, parts[i]; bad = 1 }
        }
    }
    END { exit bad }' "$W/plan.txt"
# the sanitizers' cases (doctest -tc filters) against tests/test_gpu.cu's test cases, listed by the emulated build
# (make test has built it by now): each filter selects a case, so that a case renamed does not drop out of the
# sanitizers unnoticed
if [ -x tests/test_gpu_emu_bf16 ]; then
    : > "$W/san_cases.txt"
    IFS=, read -r -a filters <<< "$(sed -n 's/^\[dry run\] san_memcheck: .* -tc=//p' "$W/dry.txt")"
    for f in "${filters[@]}"; do
        n=$(tests/test_gpu_emu_bf16 -ltc -tc="$f" 2>&1 | sed -n 's/^\[doctest\] unskipped test cases passing the current filters: //p')
        echo "${n:-0} $f" >> "$W/san_cases.txt"
    done
    check "each of the sanitizers' ${#filters[@]} case filters selects a test case of tests/test_gpu.cu" bash -c \
        "cat '$W/san_cases.txt'; [ ${#filters[@]} -ge 13 ] && ! grep -q '^0 ' '$W/san_cases.txt'"
else
    echo "SKIPPED: the sanitizers' case filters against tests/test_gpu.cu (tests/test_gpu_emu_bf16 is not built)"
fi
# the table's arithmetic: the stages' seconds add up to its total, and each stage ends by the previous one's end plus
# its own seconds, the last at the whole budget (560 s)
check "the budget table sums right (stages = total, each 'ends by' = the last + its seconds, the last at 560 s)" awk '
    $1 == "stage" || $1 == "budget" || $1 == "after" { next }
    $1 == "total" { total = $2; next }
    { sum += $2; end = $3 + 0; if (prev != "" && end != prev + $2) { print "ends by:", $0; bad = 1 } prev = end }
    END { if (sum != total || end != 560 || total > 560) { print "sum", sum, "total", total, "last end", end; bad = 1 }
          exit bad }' "$W/plan.txt"
check "the dry run's summary claims nothing passed" bash -c "! grep -qE 'gpu_check: [0-9]+ passed' '$W/dry/summary.txt'"
check "the summary has the NCCL check after the stages" \
    grep -q '^  NCCL back end, one rank (tests/gpu_nccl_check.sh): dry run' "$W/dry/summary.txt"
check "the bench runs inside the call, at d12 and d48, the PyTorch peer at d12" bash -c \
    "grep -E '^\[dry run\] bench: ' '$W/dry.txt' | grep -q 'SIZES=d12:16 d48:8 ATT_SIZES=d12:16 TORCH_SIZES=d12:16'"
check "the PyTorch loss check is one Python process (the three layouts' checkpoints, both dtypes)" bash -c \
    "[ \$(grep -c '^\[dry run\] peer: .*bench_torch.py --check' '$W/dry.txt') = 1 ] &&
     grep '^\[dry run\] peer: ' '$W/dry.txt' | grep -q 'ck_pre_bf16/.*ck_post_bf16/.*ck_siamese_bf16/.*--dtype fp32,bf16'"
run "$W/bdry.txt" env DRY_RUN=1 GPU_PREP="$PREP" OUT="$W/bdry" bash tests/bench_gpu.sh
bbudget=$(sed -n "s/.*timeouts add up to \([0-9]*\)s.*/\1/p" "$W/bdry.txt")
check "bench_gpu alone: its parts add up to at most 300 s (got ${bbudget:-none})" bash -c "[ \$(cat '$W/bdry.txt.rc') = 0 ] && [ '${bbudget:-999}' -le 300 ]"
run "$W/bdry2.txt" env DRY_RUN=1 GPU_PREP="$PREP" OUT="$W/bdry2" NO_BUILD=1 GPU_NAME=test BENCH_SECONDS=125 \
    SIZES="d12:16 d48:8" ATT_SIZES="d12:16" TORCH_SIZES="d12:16" PROFILE=0 TRAINER_S=75 ATTENTION_S=15 TORCH_S=35 \
    bash tests/bench_gpu.sh
check "bench_gpu as gpu_check runs it: no probe, no build, 125 s, the d48 rows and the PyTorch peer at d12" bash -c \
    "[ \$(cat '$W/bdry2.txt.rc') = 0 ] && grep -q 'timeouts add up to 125s' '$W/bdry2.txt' &&
     ! grep -qE '^\[dry run\] (build|probe)' '$W/bdry2.txt' && grep -q '^\[dry run\] d48_mix: ' '$W/bdry2.txt' &&
     grep -q '^\[dry run\] torch: .*--sizes d12:16 --layouts pre,siamese,post' '$W/bdry2.txt'"

# --- a stage's share (tests/gpu_lib.sh), in one 7-second plan a:2 b:2 c:3: a fast stage a (true) passes its time
# on, so the slow stage b (sleep 30) may run 4 s, not its 2, and is cut there, before the last 3 s, which c (its
# reserve) still gets
check "a fast stage passes its time on, a slow one is cut at its share, the next keeps its reserve" bash -c \
    ". tests/gpu_lib.sh; RUNS=\$(mktemp -d); T0=\$SECONDS; DEADLINE=\$((T0 + 7)); MIN_STEP_SECONDS=1
     plan a:2 b:2 c:3; stage a; run_step sa 100 true; stage b; run_step sb 100 sleep 30; stage c; run_step sc 100 true
     rm -rf \"\$RUNS\"; echo \"a=\${STEP_RC[sa]} b=\${STEP_RC[sb]} after \${STEP_SECONDS[sb]}s c=\${STEP_RC[sc]}\"
     [ \"\${STEP_RC[sa]}\" = 0 ] && [ \"\${STEP_RC[sb]}\" = 124 ] && [ \${STEP_SECONDS[sb]} -ge 3 ] && [ \"\${STEP_RC[sc]}\" = 0 ]"

# --- compute-sanitizer's findings: ours or the libraries' (tests/sanitizer_report.py)
cat > "$W/san_mixed.log" << 'LOG'
========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 16 bytes
=========     at void classifier_kernel<8>(__nv_bfloat16 *, float *, const int *, int, int, float)+0x1a0 in /w/train_gpt2.cu:760
=========     by thread (3,0,0) in block (0,0,0)
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2dd8f7] in libcuda.so.1
=========         Host Frame: classifier(...) [0x8b84] in /w/tests/test_gpu_bf16
=========
========= Uninitialized __global__ memory read of size 4 bytes
=========     at 0x3c0 in sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_execute_kernel__5x_cublas
=========     by thread (0,0,0) in block (0,0,0)
=========
========= Program hit cudaErrorInvalidValue (error 1) due to "invalid argument" on CUDA API call to cudaFuncSetAttribute.
=========     Saved host backtrace up to driver entry point at error
=========         Host Frame: [0x2dd8f7] in libcuda.so.1
=========         Host Frame: cudaFuncSetAttribute [0x5e1] in libcudart.so.13
=========         Host Frame: [0x99] in libcudnn_engines_precompiled.so.9
=========
========= Error: Race reported between Write access at void siamese_boundary_forward_kernel<2>(float)+0x1c0 in /w/siamese.cuh:10
=========     and Read access at void siamese_boundary_forward_kernel<2>(float)+0x200 in /w/siamese.cuh:12 [1024 hazards]
=========
========= Program hit cudaErrorMemoryAllocation (error 2) due to "out of memory" on CUDA API call to cudaMalloc.
=========     Saved host backtrace up to driver entry point at error
=========         Host Frame: [0x2dd8f7] in libcuda.so.1
=========         Host Frame: cudaMalloc [0x5e1] in libcudart.so.13
=========         Host Frame: cuda_malloc_bytes [0x99] in /w/tests/test_gpu_bf16
=========
========= ERROR SUMMARY: 7 errors
LOG
printf '========= COMPUTE-SANITIZER\n[doctest] test cases: 3 | 3 passed | 0 failed | 16 skipped\n========= ERROR SUMMARY: 0 errors\n' > "$W/san_clean.log"
printf '========= COMPUTE-SANITIZER\n========= Uninitialized __global__ memory read of size 4 bytes\n=========     at 0x10 in cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_64x4_tn_align8(void)\n=========\n========= ERROR SUMMARY: 1 error\n' > "$W/san_library.log"
python3 tests/sanitizer_report.py "$W/san_mixed.log" "$W/san_clean.log" "$W/san_library.log" > "$W/san.txt" 2>&1
check "sanitizer_report: our kernel, a race between two of our accesses, our cudaMalloc, 2 not printed: 5 ours" \
    grep -qE '^SANITIZER san_mixed.log ours=5 libraries=2 .*classifier_kernel x1.*siamese_boundary_forward_kernel x1' "$W/san.txt"
check "sanitizer_report: cuBLAS's kernel and cuDNN's API call are the libraries'" \
    grep -qE '^SANITIZER san_mixed.log .*libraries: .*sm90_xmma_gemm.*libcudnn_engines_precompiled' "$W/san.txt"
check "sanitizer_report: a clean log is clean; a library's only finding is not ours" bash -c \
    "grep -q '^SANITIZER san_clean.log ours=0 libraries=0 warnings=0' '$W/san.txt' &&
     grep -q '^SANITIZER san_library.log ours=0 libraries=1 ' '$W/san.txt'"
# racecheck's and synccheck's kernel filters (--kernel-filters: a --kernel-name kns=<length><name> for each kernel)
# against what nvcc compiled (make test has built tests/test_gpu_bf16 by now): every kernel in it is ours and its
# mangled name holds its filter; with attention.cuh left out of the sources, its kernels are named as missed
if [ -x tests/test_gpu_bf16 ]; then
    check "sanitizer_report --check-filters: every kernel compiled into tests/test_gpu_bf16 is ours and matched" \
        python3 tests/sanitizer_report.py --check-filters tests/test_gpu_bf16
    mkdir -p "$W/nosrc/tests" && cp tests/sanitizer_report.py "$W/nosrc/tests/" &&
        cp train_gpt2.cu siamese.cuh hc.cuh cuda_common.cuh "$W/nosrc/"
    check "... and fails, naming the kernel, where a source is left out (attention.cuh)" bash -c \
        "! python3 '$W/nosrc/tests/sanitizer_report.py' --check-filters tests/test_gpu_bf16 > '$W/nosrc.txt' ||
         exit 1; grep -q 'flash_attention_backward_d_kernel is compiled in but is not one of ours' '$W/nosrc.txt'"
else
    echo "SKIPPED: the kernel filters against a built tests/test_gpu_bf16 (not built: make tests/test_gpu_bf16)"
fi

# --- the check's own path (not the dry run), end to end on stand-in programs: a stand-in nvidia-smi, nvcc, make
# (which writes stand-ins of the programs it is asked for), compute-sanitizer and PyTorch, in a copy of the tree, so
# that every stage runs, the summary reads what the programs printed, the bench's table and the NCCL check's line
# arrive, and a failure planted in a test program and a sanitizer's finding in our kernel fail the check
M="$W/mock"
mkdir -p "$M/bin" "$M/include" "$M/tree"
tree_git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$M/tree" 2> /dev/null
: > "$M/include/cudnn.h"  # cuDNN "with the toolkit" (beside the stand-in nvcc)
cat > "$M/bin/nvidia-smi" << 'SH'
#!/bin/sh
case "$*" in
    -L) echo "GPU 0: NVIDIA H200 (UUID: GPU-stand-in)" ;;
    *query-gpu=compute_cap*) echo "9.0" ;;
    *) echo "NVIDIA H200, 143771 MiB, 580.159.04, 1980 MHz" ;;
esac
SH
cat > "$M/bin/nvcc" << 'SH'
#!/bin/sh
[ "$1" = --version ] && { echo "Cuda compilation tools, release 13.0, V13.0.88 (stand-in)"; exit 0; }
[ "$1" = -o ] && { printf '#!/bin/sh\necho "GPU: NVIDIA H200 (stand-in)"\n' > "$2"; chmod +x "$2"; }
SH
cat > "$M/bin/make" << 'SH'
#!/bin/sh
# every target named (not VAR=value, not an option) becomes a stand-in of that program
for a in "$@"; do
    case "$a" in -*|*=*) ;; *) mkdir -p "$(dirname "$a")"; cp "$MOCK/program" "$a"; chmod +x "$a" ;; esac
done
SH
cat > "$M/program" << 'SH'
#!/usr/bin/env bash
# a stand-in of a program of this project: the lines tests/gpu_check.sh reads from the real one
name=$(basename "$0")
case $name in
    test_gpu|test_gpu_bf16)
        # made-up cases, labelled as tests/test_gpu.cu labels them: siamese at 8e-3 and siamese-hybrid at 2.9e-2
        # (each in its own row; a label's layout is the longest name that begins it), hybrid's and hybrid-star's
        # apart, the ablations in their layout's row, a NaN (post-flash), and the planted registry rows' cases
        grad() { echo "[doctest] MESSAGE: GRADCHECK $1 norm_rel=$2 (fcw) max_rel=$3 (wte) loss_rel=1.0e-05 logits_rel=4.0e-03"; }
        grad pre 1.00e-02 2.00e-02; grad post 1.00e-02 2.00e-02; grad mix-p1 1.00e-02 2.00e-02
        grad siamese 8.00e-03 1.60e-02; grad siamese-no-ln-in 7.00e-03 1.70e-02; grad siamese-c90 6.00e-03 1.80e-02
        grad siamese-hybrid 2.90e-02 3.10e-02; grad siamese-hybrid-no-ln-in 1.10e-02 2.00e-02
        grad siamese-hybrid-wide 9.00e-03 4.00e-02; grad hybrid 1.20e-02 2.20e-02; grad hybrid-star-r1 1.50e-02 2.50e-02
        grad pre-planted-r1 4.00e-02 5.00e-02; grad planted-cpu 9.00e-02 9.00e-02; grad post-flash -nan 1.00e-02
        for l in pre post siamese siamese-no-ln-in hybrid-star siamese-hybrid; do
            echo "[doctest] MESSAGE: STEPCHECK $l worst_rel=$([ $l = siamese-hybrid ] && echo 3.00e-03 || echo 1.00e-03) clipped_steps=3"
        done
        case "$*" in
            *-tc=*) ;;
            *) if [ "${MOCK_CUT:-}" = "$name" ]; then  # MOCK_CUT: that program (its unfiltered run) is cut here
                   echo "TEST CASE: long rows; CRASHED: SIGTERM - Termination request signal"; exit 124
               fi ;;
        esac
        echo "[doctest] MESSAGE: LSECHECK Vp=64 training: loss 124.530792 (want 124.530791, rel 1.2e-08)"
        echo "[doctest] MESSAGE: LTCHECK 8 products of one step ran with a cuBLASLt epilogue, 0 fell back"
        case "$*" in
            *-tc=*) echo "[doctest] test cases:  6 |  6 passed | 0 failed | 13 skipped" ;;
            *) if [ "${MOCK_FAIL:-}" = "$name" ]; then  # MOCK_FAIL: that test program fails (its unfiltered run)
                   echo "[doctest] test cases: 19 | 18 passed | 1 failed | 0 skipped"; exit 1
               fi
               echo "[doctest] test cases: 19 | 19 passed | 0 failed | 0 skipped" ;;
        esac ;;
    test_gpu_cudnn)
        echo "[doctest] MESSAGE: CUDNNCHECK hs=64: out 2.0e-03 lse 1.0e-06 dq 3.0e-03 dk 3.0e-03 dv 2.0e-03"
        echo "[doctest] test cases:  2 |  2 passed | 0 failed | 17 skipped"
        echo "CUDNNSHAPES cuDNN took 20 shape(s) and refused 1 (left out of the checks above; each below)"
        echo "CUDNNREFUSED B=1 T=1 NH=2 hs=16 forward: cuDNN's fused attention does not support this forward pass (stand-in)" ;;
    *)  # the trainers and reference_cpu
        out="" steps=1 e=""
        while [ $# -gt 0 ]; do case $1 in -o) out=$2; shift 2 ;; -x) steps=$2; shift 2 ;; -e) e=$2; shift 2 ;; *) shift ;; esac; done
        echo "| bias and GELU         | cuBLASLt epilogues (off: TRAIN_GPT2_EPILOGUES=0)   |"
        for s in $(seq 1 "$steps"); do
            printf 'step %5d/%d | loss %.6f | norm 1.0000 | lr 1.00e-04 | %s ms | 80000 tok/s | MFU 40.0%% | 5000 MiB GPU\n' \
                "$s" "$steps" "$(awk -v s="$s" 'BEGIN { print 2.5 + 8 / s }')" "$([ "$e" = d48 ] && echo 300.0 || echo 50.0)"
        done
        echo "val loss 2.500000"
        if [ -n "$out" ]; then
            mkdir -p "$out"
            for s in $(seq 1 "$steps"); do echo "s:$s trl:2.500000 norm:1.0000 lr:1.000e-04 ms:50.0"; done > "$out/main.log"
            echo "model $steps" > "$out/$(printf model_%08d.bin "$steps")"
            echo "state $steps" > "$out/$(printf state_%08d.bin "$steps")"
        fi ;;
esac
SH
cat > "$M/bin/compute-sanitizer" << 'SH'
#!/usr/bin/env bash
[ "$1" = --version ] && { echo "Version 2025.3.1 (stand-in)"; exit 0; }
tool=$2
echo "$*" > "$MOCK/sanitizer_$tool.args"  # what it was given (for the kernel filters' check)
while [ "${1#-}" != "$1" ]; do
    case $1 in --tool|--error-exitcode|--print-limit|--kernel-name|--kernel-name-exclude) shift 2 ;; *) shift ;; esac
done
echo "========= COMPUTE-SANITIZER"
if [ "$tool" = memcheck ] && [ -n "${MOCK_CUT:-}" ]; then  # MOCK_CUT: memcheck is cut at its timeout (124)
    "$@" | head -n 4
    echo "========= Uninitialized __global__ memory read of size 4 bytes"
    echo "=========     at 0x10 in cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_64x4_tn_align8(void)"
    echo "========="
    exit 124
fi
"$@"
rc=$?
if [ "$tool" = racecheck ]; then  # a hazard in cuBLAS's kernel (not ours)
    echo "========= Error: Race reported between Write access at sm90_xmma_gemm_bf16_cublas+0x10 in gemm.cu:1"
    echo "=========     and Read access at sm90_xmma_gemm_bf16_cublas+0x20 in gemm.cu:2 [4 hazards]"
    echo "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)"
    exit 9
fi
if [ "$tool" = memcheck ] && [ -n "${MOCK_OURS:-}" ]; then  # MOCK_OURS: one in our kernel
    echo "========= Invalid __global__ read of size 4 bytes"
    echo "=========     at void classifier_kernel<8>(float *)+0x10 in train_gpt2.cu:760"
    echo "========= ERROR SUMMARY: 1 error"
    exit 9
fi
echo "========= ERROR SUMMARY: 0 errors"
exit $rc
SH
cat > "$M/bin/nm" << 'SH'
#!/usr/bin/env bash
# a stand-in nm: the symbols nvcc writes for each of our kernels (its host stub and its host function), as if the
# stand-in program were built from our sources
python3 tests/sanitizer_report.py --kernel-filters | sed -n 's/^kns=//p' | while read -r k; do
    stub="__device_stub__Z${k}v"
    echo "0000000000000000 t _Z${#stub}${stub}v"
    echo "0000000000000000 t _Z${k}v"
done
SH
cat > "$M/bin/torchpy" << 'SH'
#!/usr/bin/env bash
# a stand-in PyTorch: the version, no nvidia.cudnn, and tests/bench_torch.py's lines
case "$*" in *"print(torch.__version__)"*) echo "2.11.0 (stand-in)"; exit 0 ;; *nvidia.cudnn*) exit 1 ;; esac
shift
if [ "$1" = --check ]; then
    shift; ckpts=()
    while [ "${1#--}" = "$1" ]; do ckpts+=("$1"); shift; done
    for c in "${ckpts[@]}"; do for d in fp32 bf16; do case "$*" in *"--dtype fp32 "*|*"--dtype fp32") [ $d = bf16 ] && continue ;; esac
        echo "loss 2.500000 ($d, cuda, 10 batches of B=16 T=256) $c"; done; done
else
    echo "TORCH torch=2.11.0 device=NVIDIA_H200 compile=block sdpa=True"
    for l in pre siamese post; do echo "TORCH size=d12 layout=$l B=16 T=1024 ms=100.0 tok_s=163840 gib=10.0 compile_s=5.0"; done
fi
SH
chmod +x "$M/bin"/* "$M/program"
# two rows planted in the copy's registry: pre-planted, which the CUDA trainer runs (a label "pre-planted-r1" is its
# case, not pre's), and planted-cpu, which it does not (no row in the summary)
awk '/^static const LayoutInfo LAYOUTS\[\] = \{/ { in_rows = 1 }
     in_rows && /^\};/ { print "    {.name = \"pre-planted\", .kind = all_pre, .cuda = 1},"
                         print "    {.name = \"planted-cpu\", .kind = all_pre, .cuda = 0},"; in_rows = 0 }
     { print }' host/layouts.h > "$M/tree/host/layouts.h"
# where this machine has no nvcc, gpu-prep fetched no cuDNN frontend: the stand-ins' prepared folder gets a stand-in
# of its header, so that the cuDNN steps run on the stand-ins there too
MOCK_PREP=$PREP
if [ ! -f "$PREP/cudnn-frontend/include/cudnn_frontend.h" ]; then
    mkdir -p "$M/tree/.deps/cudnn-frontend/include" "$M/tree/data/kjv"
    : > "$M/tree/.deps/cudnn-frontend/include/cudnn_frontend.h"
    cp data/kjv/kjv_*.bin "$M/tree/data/kjv/" && (cd "$M/tree" && bash tests/gpu_prep.sh "$M/prep" > /dev/null) &&
        MOCK_PREP="$M/prep"
fi
mock_check() {  # OUTDIR ENV...: the check in the tree copy on the stand-ins
    local out=$1
    shift
    (cd "$M/tree" && env PATH="$M/bin:$PATH" MOCK="$M" TORCH_PY="$M/bin/torchpy" GPU_PREP="$MOCK_PREP" OUT="$out" "$@" \
        bash tests/gpu_check.sh > "$out.txt" 2>&1; echo $? > "$out.rc")
}
# one run, two failures planted (the unfiltered tests/test_gpu_bf16 fails; memcheck finds one in our kernel): every
# other step must pass, those two must fail by name, and the exit status must say so
mock_check "$W/mock_out" MOCK_FAIL=test_gpu_bf16 MOCK_OURS=1
S="$W/mock_out/summary.txt"
check "gpu_check on stand-ins: every stage runs; all passes but the two planted failures, named; exit non-zero" bash -c \
    "[ \$(cat '$W/mock_out.rc') != 0 ] && tail -n 1 '$S' |
     grep -qE '^gpu_check: 2[0-9] passed, 2 failed, 0 not run \\(test_gpu_bf16: FAILED \\(1\\) san_memcheck: FAILED \\(9\\)\\)\$'"
check "... the summary reads the gradients, the cuDNN refusal, the classifier and cuBLASLt lines" bash -c \
    "grep -q '^  pre  *| 1.0e-02/2.0e-02 | pre  *| 1.0e-03  *| 1\$' '$S' && grep -q '^  CUDNNREFUSED B=1 T=1 NH=2 hs=16' '$S' &&
     grep -q '^  classifier (log-sum-exp' '$S' && grep -q '^  cuBLASLt: 8 products' '$S'"
# the planted case of issue 27: siamese at 8e-3 and siamese-hybrid at 2.9e-2, each in its own row (the old
# summary matched "^siamese($|-)" and printed 2.9e-02 in siamese's row, and had no row for the other three)
check "... every layout its own row: siamese 8.0e-03 (its ablation and C = 90 in it), siamese-hybrid 2.9e-02" bash -c \
    "grep -q '^  siamese  *| 8.0e-03/1.8e-02 | siamese  *| 1.0e-03  *| 3\$' '$S' &&
     grep -q '^  siamese-hybrid  | 2.9e-02/4.0e-02 | siamese-hybrid  *| 3.0e-03  *| 3\$' '$S'"
check "... hybrid's and hybrid-star's cases apart, mix's and post's in theirs" bash -c \
    "grep -q '^  hybrid  *| 1.2e-02/2.2e-02 | hybrid  *| -  *| 1\$' '$S' &&
     grep -q '^  hybrid-star  *| 1.5e-02/2.5e-02 | hybrid-star-r1  *| 1.0e-03  *| 1\$' '$S' &&
     grep -q '^  mix  *| 1.0e-02/2.0e-02 | mix-p1 ' '$S'"
check "... a NaN gradient error is its layout's worst (awk's comparisons skip a NaN: the old summary showed 1.0e-02)" \
    grep -q '^  post  *| -nan/2.0e-02  *| post-flash ' "$S"
check "... the rows come from the registry: a layout added to it (CUDA) has its row, one the CUDA trainer does not run none" bash -c \
    "grep -q '^  pre-planted  *| 4.0e-02/5.0e-02 | pre-planted-r1 ' '$S' && ! grep -q '^  planted-cpu ' '$S' &&
     ! grep -q '^  deepnorm ' '$S'"
check "... the gradient rows are the layouts host/layouts.h says the CUDA trainer runs, in its order" bash -c \
    "[ \"\$(sed -n '/^  layout  *| bf16 norm/,/^  (a row/p' '$S' | sed '1d;\$d' | awk '{ print \$1 }' | paste -sd' ')\" = \
       \"\$(cd '$M/tree' && . tests/gpu_lib.sh && cuda_layouts | paste -sd' ')\" ]"
check "... the training table, the PyTorch peer, T = 1024, d48, resume" bash -c \
    "grep -qE '^  pre +\\| 10.500000 -> 2.55333[0-9] +\\| 2.500000 +\\| 2.500000 \\(0.0e\\+00\\)' '$S' &&
     grep -qE 'd12 siamese +T=1024 B=8 flash_r1 +ok +50 ms +5000 MiB  MFU 40.0%' '$S' &&
     grep -qE 'd12 siamese-hybrid +T=1024 B=8 materialized +ok +50 ms' '$S' &&
     grep -qE 'd12 hybrid +T=1024 B=8 materialized +ok +50 ms' '$S' &&
     grep -qE '^  siamese-hybrid +\| 10.500000 -> 2.55333[0-9] +\| 2.500000 +\| - \(-\)' '$S' &&
     grep -qE '^  hybrid +\| 10.500000 -> 2.55333[0-9] ' '$S' &&
     grep -q 'd48 siamese T=1024 B=8 (1.5 B parameters): ok; loss .* 300 ms/step' '$S' &&
     grep -q 'resume (-y 1 at step 20 of 30, tiny siamese, bf16): ok' '$S'"
check "... a finding in our kernel fails its tool; a cuBLAS kernel's is reported, not counted against us" bash -c \
    "grep -q '^  memcheck   1 OURS' '$S' && grep -q '^  racecheck  clean (1 in libraries)' '$S' &&
     grep -q '^  synccheck  clean\$' '$S'"
n_kernels=$(python3 tests/sanitizer_report.py --kernel-filters | grep -c '^kns=')
check "... racecheck and synccheck check our $n_kernels kernels alone (a --kernel-name filter each), memcheck and initcheck every kernel" bash -c \
    "for t in racecheck synccheck; do [ \$(grep -o -- '--kernel-name kns=[0-9]*[a-z_A-Z0-9]*_kernel' '$M/sanitizer_'\$t.args | wc -l) = $n_kernels ] || exit 1; done
     ! grep -q -- '--kernel-name' '$M/sanitizer_memcheck.args' '$M/sanitizer_initcheck.args' && [ $n_kernels -ge 30 ]"
check "... the sanitizers run the new kernels' hard cases (head sizes 48, 30, 132; C = 90, 2112; T = 264, 300)" bash -c \
    "for c in 'hybrid and hybrid-star' 'siamese-hybrid: logits' 'with C > 2048' 'QKV-norm layouts' 'long rows' 'C not a multiple of 8'; do
         for t in memcheck racecheck synccheck initcheck; do grep -qF \"\$c\" '$M/sanitizer_'\$t.args || { echo \"\$t: no \$c\"; exit 1; }; done
     done"
check "... the bench's table (d12 and d48, each layout, the attentions, the PyTorch peer) and the NCCL line" bash -c \
    "grep -qE '^  d48   mix +8 \\| +300' '$S' && grep -qE '^  d12   siamese +16 \\| +50 .*\\+0.0%.*163840 .*2.00x' '$S' &&
     grep -qE '^  d12    16 \\| +50 \\| +50 \\| +50 \\| materialized' '$S' && grep -q '^  NCCL back end, one rank .*: nccl_check: ' '$S'"
check "... and it comes back in at most 8 files under \$OUT" test "$(find "$W/mock_out" -type f | wc -l)" -le 8

# a stage cut at its share: what it found until then stays under $OUT and the summary says it was cut. The stand-ins
# exit as a cut step does (124, the status timeout gives it): tests/test_gpu_bf16 after its gradient lines,
# memcheck after four lines of its program and a library's finding. (That a step is cut at its share, and keeps its
# lines there, is the next check's.)
mock_check "$W/mock_cut" MOCK_CUT=test_gpu_bf16
S="$W/mock_cut/summary.txt"
check "a cut stage: the summary says so, the gradient rows printed before the cut are there, and it counts as failed" bash -c \
    "grep -qE '^  tests/test_gpu_bf16  TIMED OUT \(cut at [0-9]+s\)' '$S' &&
     grep -q '^  siamese-hybrid  | 2.9e-02/4.0e-02 ' '$S' && tail -n 1 '$S' | grep -q 'test_gpu_bf16: TIMED OUT (cut at'"
check "... a cut sanitizer: cut, with what it found until then (none ours, the library's), and over how many checks" \
    grep -qE '^  memcheck   TIMED OUT \(cut at [0-9]+s\); until then none ours, 1 in libraries, over the first 4 checks' "$S"
check "... the lines the cut program printed are under \$OUT (the log)" grep -q 'GRADCHECK siamese-hybrid norm_rel=2.90e-02' \
    "$W/mock_cut/gpu_check.log"

# a step cut at its share keeps every line it printed before the cut, also from a program whose stdout is a file
# (C++ buffers it in blocks of KiB: without tests/gpu_lib.sh's stdbuf the three lines were lost with the buffer)
printf '%s\n' '#include <iostream>' '#include <unistd.h>' \
    'int main() { for (int i = 0; i < 3; i++) std::cout << "GRADCHECK case" << i << " norm_rel=1.0e-03\n"; sleep(30); }' \
    > "$W/slow.cpp"
g++ -o "$W/slow" "$W/slow.cpp"
check "a step cut at its share (2 s) keeps the lines its program printed, and reads 'TIMED OUT (cut at 2s)'" bash -c \
    ". tests/gpu_lib.sh; RUNS=\$(mktemp -d); T0=\$SECONDS; DEADLINE=\$((T0 + 2)); MIN_STEP_SECONDS=1
     plan a:2; stage a; run_step slow 100 '$W/slow'; lines=\$(grep -c GRADCHECK \"\$RUNS/slow.log\"); rm -rf \"\$RUNS\"
     echo \"rc \${STEP_RC[slow]}, \$lines lines, \$(step_word slow)\"
     [ \"\${STEP_RC[slow]}\" = 124 ] && [ \$lines = 3 ] && step_word slow | grep -qE '^TIMED OUT \(cut at [23]s\)\$'"

# --- how a test program's log reads: SKIPPED and failures are never a pass
. tests/gpu_lib.sh
printf 'SKIPPED: no CUDA device (no driver); these tests run where a GPU is present\n0 passed, 0 failed, 16 skipped\n' > "$W/skipped.log"
printf '[doctest] test cases: 16 | 16 passed | 0 failed | 0 skipped\n' > "$W/good.log"
printf '[doctest] test cases: 16 | 15 passed | 1 failed | 0 skipped\n' > "$W/bad.log"
printf '[doctest] test cases:  5 |  5 passed | 0 failed | 11 skipped\n' > "$W/filtered.log"
printf '[doctest] test cases:  0 |  0 passed | 0 failed | 16 skipped\n' > "$W/none.log"
check "a SKIPPED log is a failure" bash -c ". tests/gpu_lib.sh; ! test_log_passed '$W/skipped.log' 0"
check "a full passing doctest log is a pass" test_log_passed "$W/good.log" 0
check "a passing log with a non-zero exit is a failure" bash -c ". tests/gpu_lib.sh; ! test_log_passed '$W/good.log' 1"
check "a log with a failed case is a failure" bash -c ". tests/gpu_lib.sh; ! test_log_passed '$W/bad.log' 0"
check "skipped cases fail an unfiltered run" bash -c ". tests/gpu_lib.sh; ! test_log_passed '$W/filtered.log' 0"
check "a filtered run may skip the cases it left out" test_log_passed "$W/filtered.log" 0 1
check "a filter that ran nothing is a failure" bash -c ". tests/gpu_lib.sh; ! test_log_passed '$W/none.log' 0 1"
if [ -x tests/test_gpu ]; then
    ./tests/test_gpu > "$W/real.log" 2>&1
    check "this machine's tests/test_gpu run (no GPU) does not read as passed" bash -c ". tests/gpu_lib.sh; ! test_log_passed '$W/real.log' $?"
fi

# --- tools/compare_logs.py
printf 's:0 trl:5.500000 norm:1.2000 lr:1.000e-03 ms:10.0\ns:1 tel:5.400000\n' > "$W/a.log"
printf 's:0 trl:5.500001 norm:1.2000 lr:1.000e-03 ms:99.0\ns:1 tel:5.400000\n' > "$W/b.log"
printf 's:0 trl:5.600000 norm:1.2000 lr:1.000e-03 ms:10.0\ns:1 tel:5.400000\n' > "$W/c.log"
printf 's:0 trl:5.500000 norm:1.2000 lr:1.000e-03 ms:10.0\n' > "$W/d.log"
check "compare_logs: equal within the bound, the timings aside" python3 tools/compare_logs.py "$W/a.log" "$W/b.log" 1e-5
check "compare_logs: a loss 2% off fails 1e-5" bash -c "! python3 tools/compare_logs.py '$W/a.log' '$W/c.log' 1e-5"
check "compare_logs: a missing line fails" bash -c "! python3 tools/compare_logs.py '$W/a.log' '$W/d.log' 1e-5"
printf 's:0 trl:abc norm:1.2000 lr:1.000e-03 ms:10.0\ns:1 tel:5.400000\n' > "$W/e.log" && head -c 300 /bin/sh > "$W/f.log"
: > "$W/empty.log" && : > "$W/empty2.log" && printf 'hello world\nbye\n' > "$W/text.log"
# two empty logs (two runs that stopped before their first step) are not two equal main.logs, nor is any text
for bad in "$W/absent.log $W/a.log 1e-5" "$W/f.log $W/a.log 1e-5" "$W/a.log $W/e.log 1e-5" "$W/a.log $W/b.log x" "$W/a.log" \
    "$W/empty.log $W/empty2.log 1e-5" "$W/text.log $W/text.log 1e-5"; do
    check "compare_logs $(basename -a $bad | tr '\n' ' '): one error line, exit 2 (it was a traceback)" bash -c \
        "python3 tools/compare_logs.py $bad 2> '$W/cl.err'; [ \$? = 2 ] && [ \$(wc -l < '$W/cl.err') = 1 ] && grep -q '^error: ' '$W/cl.err'"
done

# --- tools/emulate_gpu.sh's trainer step counts the trainers' exit statuses: two that stop at the same step write
# the same partial main.log, which is not agreement; two that finish with the same one agree
fake_trainer() {  # PATH EXIT_STATUS: a trainer that writes one main.log line into its -o folder
    printf '#!/usr/bin/env bash\nwhile [ $# -gt 0 ]; do [ "$1" = -o ] && out=$2; shift; done\nmkdir -p "$out" && printf "s:0 tel:5.500000\\n" > "$out/main.log"\nexit %s\n' "$2" > "$1"
    chmod +x "$1"
}
fake_trainer "$W/dies.sh" 1 && fake_trainer "$W/ends.sh" 0
check "emulate_gpu.sh: two trainers that die at the same step do not agree (exit 1, '0 passed, 1 failed')" bash -c \
    "STAGES=train PRECISIONS=FP32 CPU_TRAINER='$W/dies.sh' GPU_TRAINER='$W/dies.sh' bash tools/emulate_gpu.sh > '$W/emu.out' 2>&1
     [ \$? = 1 ] && [ \"\$(tail -n 1 '$W/emu.out')\" = '0 passed, 1 failed' ] && grep -q 'did not both finish: reference_cpu exit status 1, emulated FP32 train_gpt2cu 1' '$W/emu.out'"
check "emulate_gpu.sh: ... two that finish with the same main.log agree (exit 0, '1 passed, 0 failed')" bash -c \
    "STAGES=train PRECISIONS=FP32 CPU_TRAINER='$W/ends.sh' GPU_TRAINER='$W/ends.sh' bash tools/emulate_gpu.sh > '$W/emu.out' 2>&1
     [ \$? = 0 ] && [ \"\$(tail -n 1 '$W/emu.out')\" = '1 passed, 0 failed' ]"

# --- the PyTorch peer computes our model: its loss of ./reference_cpu's checkpoints equals the trainer's val loss,
# every layout's in one process (as tests/gpu_check.sh runs it)
peer_train() {  # NAME LAYOUT [FLAGS...]: a checkpoint after 12 steps and the trainer's val loss of it
    local dir="$W/peer_$1" layout=$2
    shift 2
    OMP_NUM_THREADS=1 ./reference_cpu --norm "$layout" "$@" --layers 2 --channels 32 --heads 2 -b 4 -t 32 -x 12 \
        -l 3e-3 -v 12 -m 3 -s 0 -o "$dir" > "$dir.txt" 2>&1
}
if "$TORCH_PY" -c "import torch" 2> /dev/null; then
    peer_train pre pre &
    peer_train post post &
    peer_train siamese siamese &
    peer_train ablations siamese --no-depth-scale --no-ln-in
    wait
    names=(pre post siamese ablations)
    ckpts=()
    for n in "${names[@]}"; do ckpts+=("$W/peer_$n/model_00000012.bin"); done
    "$TORCH_PY" tests/bench_torch.py --check "${ckpts[@]}" "$W/nonexistent.bin" --shard data/kjv/kjv_val.bin \
        -b 4 -t 32 -m 3 --device cpu > "$W/peer.txt" 2>&1
    echo $? > "$W/peer.rc"
    for n in "${names[@]}"; do
        check "bench_torch.py --check: $n's loss within 1e-5 of reference_cpu's (one process for all)" bash -c "
            ours=\$(grep '^val loss' '$W/peer_$n.txt' | tail -n 1 | awk '{ print \$3 }')
            theirs=\$(grep -F ' $W/peer_$n/model_00000012.bin' '$W/peer.txt' | awk '/^loss/ { print \$2 }')
            echo \"reference_cpu \$ours, bench_torch.py \$theirs\"
            awk -v a=\"\$ours\" -v b=\"\$theirs\" 'BEGIN { exit !(a + 0 > 0 && (a > b ? a - b : b - a) <= 1e-5 * a) }'"
    done
    check "bench_torch.py --check: an unreadable checkpoint is one error line, the others still reported, exit 1" bash -c \
        "[ \$(cat '$W/peer.rc') = 1 ] && [ \$(grep -c '^error: $W/nonexistent.bin: ' '$W/peer.txt') = 1 ] &&
         [ \$(grep -c '^loss ' '$W/peer.txt') = 4 ]"
    check "bench_torch.py without --check or --bench: one error line, exit 1 (argparse printed its usage too)" bash -c \
        "'$TORCH_PY' tests/bench_torch.py 2> '$W/bt.err'; [ \$? = 1 ] && [ \$(wc -l < '$W/bt.err') = 1 ] && grep -q '^error: give --check' '$W/bt.err'"
    check "bench_torch.py --bench runs a step loop and prints its row" bash -c \
        "'$TORCH_PY' tests/bench_torch.py --bench --device cpu --sizes 2x64x2:2 --layouts siamese -t 16 --steps 6 |
         grep -qE '^TORCH size=2x64x2 layout=siamese B=2 T=16 ms=[0-9.]+ tok_s=[0-9]+'"
else
    echo "SKIPPED: the PyTorch checks ($TORCH_PY has no torch)"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
