#!/usr/bin/env bash
# The GPU check's plumbing, on a machine without a GPU (what it can be held to before the rare GPU call):
#   make gpu-prep writes a complete, checked folder well under the device call's 64 MiB; tests/gpu_check.sh and
#   tests/bench_gpu.sh stop at once on a missing or corrupt input, exit non-zero within 30 s saying "no GPU" where
#   there is none (also when nvidia-smi answers but CUDA does not start), and never print a passing table; their
#   dry runs (DRY_RUN=1) fit their budgets (540 s, 300 s); a SKIPPED or failed test log never reads as passed;
#   tools/compare_logs.py tells equal logs from different ones; and tests/bench_torch.py's PyTorch model computes
#   ./reference_cpu's validation loss from its checkpoint for every layout (so the GPU bench's peer runs our model).
# Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
TORCH_PY=${TORCH_PY:-/usr/bin/python3}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
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

# --- the time budgets, by dry runs
run "$W/dry.txt" env DRY_RUN=1 GPU_PREP="$PREP" OUT="$W/dry" bash tests/gpu_check.sh
check "gpu_check's dry run succeeds" test "$(cat "$W/dry.txt.rc")" = 0
budget=$(sed -n "s/.*timeouts add up to \([0-9]*\)s.*/\1/p" "$W/dry/summary.txt")
check "gpu_check's stages add up to under 540 s (got ${budget:-none})" test "${budget:-999}" -lt 540
steps=27  # build, 2 tests, 3 e2e, 6 trainings, peer, 4 T=1024, d48, resume, 8 sanitizers; + the cuDNN build, test, T=1024
[ -f "$PREP/cudnn-frontend/include/cudnn_frontend.h" ] && steps=30
check "every step of gpu_check is in the dry run ($steps)" test "$(grep -c '^\[dry run\]' "$W/dry.txt")" -eq $steps
check "no step's timeout exceeds its stage's budget (the cuDNN build in the background aside)" bash -c \
    "! grep -v '^\[dry run\] build_cudnn:' '$W/dry.txt' | grep -E '^\[dry run\] .*timeout (1[2-9][0-9]|[2-9][0-9][0-9])s'"
check "the dry run's summary claims nothing passed" bash -c "! grep -qE 'gpu_check: [0-9]+ passed' '$W/dry/summary.txt'"
check "the summary has the NCCL stage (tests/gpu_nccl_check.sh where time is left)" \
    grep -q '^NCCL back end, one rank (tests/gpu_nccl_check.sh): dry run' "$W/dry/summary.txt"
run "$W/bdry.txt" env DRY_RUN=1 GPU_PREP="$PREP" OUT="$W/bdry" bash tests/bench_gpu.sh
bbudget=$(sed -n "s/.*timeouts add up to \([0-9]*\)s.*/\1/p" "$W/bdry.txt")
check "bench_gpu's parts add up to under 300 s (got ${bbudget:-none})" bash -c "[ \$(cat '$W/bdry.txt.rc') = 0 ] && [ '${bbudget:-999}' -lt 300 ]"

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
for bad in "$W/absent.log $W/a.log 1e-5" "$W/f.log $W/a.log 1e-5" "$W/a.log $W/e.log 1e-5" "$W/a.log $W/b.log x" "$W/a.log"; do
    check "compare_logs $(basename -a $bad | tr '\n' ' '): one error line, exit 2 (it was a traceback)" bash -c \
        "python3 tools/compare_logs.py $bad 2> '$W/cl.err'; [ \$? = 2 ] && [ \$(wc -l < '$W/cl.err') = 1 ] && grep -q '^error: ' '$W/cl.err'"
done

# --- the PyTorch peer computes our model: its loss of ./reference_cpu's checkpoints equals the trainer's val loss
run_peer() {  # LAYOUT [FLAGS...]
    local layout=$1 dir="$W/peer_$(tr -d ' -' <<< "$*")"
    shift
    OMP_NUM_THREADS=2 ./reference_cpu --norm "$layout" "$@" --layers 2 --channels 32 --heads 2 -b 4 -t 32 -x 12 \
        -l 3e-3 -v 12 -m 3 -s 0 -o "$dir" > "$dir.txt" 2>&1 || return 1
    local ours theirs
    ours=$(grep '^val loss' "$dir.txt" | tail -n 1 | awk '{ print $3 }')
    theirs=$("$TORCH_PY" tests/bench_torch.py --check "$dir/model_00000012.bin" --shard data/kjv/kjv_val.bin -b 4 -t 32 \
        -m 3 --device cpu | awk '/^loss/ { print $2 }')
    echo "reference_cpu $ours, bench_torch.py $theirs"
    awk -v a="$ours" -v b="$theirs" 'BEGIN { exit !(a + 0 > 0 && (a > b ? a - b : b - a) <= 1e-5 * a) }'
}
if "$TORCH_PY" -c "import torch" 2> /dev/null; then
    check "bench_torch.py --check: pre's loss within 1e-5 of reference_cpu's" run_peer pre
    check "bench_torch.py --check: post's loss within 1e-5 of reference_cpu's" run_peer post
    check "bench_torch.py --check: siamese's loss within 1e-5 of reference_cpu's" run_peer siamese
    check "bench_torch.py --check: siamese with both ablations" run_peer siamese --no-depth-scale --no-ln-in
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
