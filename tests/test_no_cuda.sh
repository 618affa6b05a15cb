#!/usr/bin/env bash
# The paths of the test suite for a machine without CUDA (most machines that run `make test`), run here with the CUDA
# toolkit and driver tools hidden, so that a machine that has them (CI's, this one) exercises those paths too. Hidden
# not only from PATH (the scripts also look in /usr/local/cuda): in a mount namespace of this script's own
# (unshare -m; nothing outside it sees a change), an empty folder is bound over every CUDA toolkit (a folder named
# *cuda* with bin/nvcc and include/cuda_runtime.h: /usr/local/cuda-13.0), and over every other folder that holds an
# nvcc or nvidia-smi (a wrapper in /usr/local/bin, Debian's toolkit in /usr/bin: folders that hold the rest of the
# system too) a folder of links to all it holds but those. Then:
#   - nothing finds CUDA: no nvcc or nvidia-smi on PATH, no /usr/local/cuda/bin/nvcc
#   - make builds no CUDA program (make -n all runs no nvcc) and would build for every GPU generation
#   - .ci/deps test fetches nothing for CUDA (the cuDNN frontend, cuobjdump) and says nothing
#   - make gpu-prep works; tests/gpu_check.sh and tests/bench_gpu.sh exit non-zero within 30 s saying "no GPU",
#     with a stand-in nvidia-smi that lists a GPU "no GPU usable" (no nvcc to build for it); tests/gpu_nccl_check.sh
#     skips; tests/run_all.sh skips the GPU suites, saying nvcc is not installed
#   - and none of them leaves a file in TMPDIR (the GPU probe left /tmp/gpu_probe_<pid>.smi)
# Skipped, saying why, where no mount namespace can be made (unshare -m needs root, or a user namespace).
# Ends with the line "N passed, N failed[, N skipped]".
set -u
cd "$(dirname "$0")/.."
if [ "${1:-}" != --inside ]; then
    probe=$(mktemp -d)
    for how in -m "-r -m"; do  # as root; else as root of a user namespace of its own, where the system allows one
        # shellcheck disable=SC2086
        if unshare $how mount --bind "$probe" "$probe" 2> /dev/null; then rmdir "$probe"; exec unshare $how bash "$0" --inside; fi
    done
    why=$(unshare -m true 2>&1 | head -n 1)
    rmdir "$probe"
    echo "skipped: no mount namespace to hide the CUDA toolkit in (unshare -m: ${why:-no mount})"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
fi

W=$(mktemp -d)  # files; the mounts' own folders are in M, never removed while a mount may be on them
M=$(mktemp -d)
cleanup() {
    local d
    for d in "$M"/*; do umount "$d" 2> /dev/null; done
    rm -rf "$W" "$M"/links*  # links* hold links only (rm follows none); orig* were mount points: rmdir alone
    rmdir "$M"/orig* "$M" 2> /dev/null
}
trap cleanup EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   - $1"; }
bad() { fail=$((fail + 1)); echo "FAIL - $1: $2"; }

# ---- hide CUDA: the toolkits first (their bin/ holds the rest), then every folder that still holds an nvcc or an
# nvidia-smi gets, bound over it, a folder of links to all it holds but those two (bash's command -v finds a file
# that is there but not executable, so the name itself must go)
cuda_tools() {
    local dir tool
    for dir in ${PATH//:/ } /usr/local/cuda*/bin /opt/cuda*/bin /usr/bin /usr/local/bin; do
        for tool in nvcc nvidia-smi; do [ -e "$dir/$tool" ] && echo "$dir/$tool"; done
    done | sort -u
}
mkdir "$W/empty_dir"
hidden=()
for tool in $(cuda_tools); do
    root=$(dirname "$(dirname "$(readlink -f "$tool")")")
    if [[ "$(basename "$root")" == *cuda* ]] && [ -f "$root/include/cuda_runtime.h" ] &&
       [[ " ${hidden[*]} " != *" $root "* ]] && mount --bind "$W/empty_dir" "$root"; then
        hidden+=("$root")
    fi
done
for dir in $(cuda_tools | xargs -r -n 1 dirname | xargs -r -n 1 readlink -f | sort -u); do
    n=${#hidden[@]}
    mkdir "$M/orig$n" "$M/links$n"
    mount --bind "$dir" "$M/orig$n" || continue
    for f in "$M/orig$n"/* "$M/orig$n"/.[!.]*; do
        case "${f##*/}" in nvcc | nvidia-smi | '*' | '.[!.]*') continue ;; esac
        ln -s "$f" "$M/links$n/${f##*/}"
    done
    mount --bind "$M/links$n" "$dir" && hidden+=("$dir (but what else it holds)")
done
left=$(for tool in nvcc nvidia-smi; do command -v $tool; done; [ -e /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc)
if [ -z "$left" ]; then ok "the CUDA toolkit is hidden: ${hidden[*]:-there was none to hide}"
else bad "hiding CUDA" "still found: $left"; fi

# ---- make and .ci/deps
make -n all > "$W/make_n.txt" 2>&1
if [ $? -eq 0 ] && ! grep -qw nvcc "$W/make_n.txt"; then ok "make all builds no CUDA program (make -n runs no nvcc)"
else bad "make -n all" "$(grep -m2 -w nvcc "$W/make_n.txt")"; fi
archs=$(make -s print-gpu-archs 2>&1)
if [ "$archs" = "80 86 89 90" ]; then ok "without a GPU to ask, make's GPU_ARCHS is every supported one ($archs)"
else bad "make print-gpu-archs" "'$archs'"; fi
bash .ci/deps test > "$W/deps.txt" 2>&1
if [ $? -eq 0 ] && [ ! -s "$W/deps.txt" ]; then ok ".ci/deps test fetches nothing for CUDA and says nothing"
else bad ".ci/deps test" "$(head -n 3 "$W/deps.txt")"; fi

# ---- the GPU scripts: a prepared folder, then each says why it runs nothing
PREP="$W/prep"
if make -s gpu-prep GPU_PREP="$PREP" > "$W/prep.txt" 2>&1; then ok "make gpu-prep works without CUDA"
else bad "make gpu-prep" "$(tail -n 3 "$W/prep.txt")"; fi
mkdir "$W/tmp"  # the scripts' TMPDIR, empty at the end
run() {  # OUTFILE CMD...: exit status and seconds beside the output
    local out=$1 start=$SECONDS
    shift
    env TMPDIR="$W/tmp" GPU_PREP="$PREP" "$@" > "$out" 2>&1
    echo $? > "$out.rc"
    echo $((SECONDS - start)) > "$out.s"
}
says() {  # NAME OUTFILE PATTERN: a non-zero exit within 30 s, the pattern in the output
    local rc
    rc=$(cat "$2.rc")
    if [ "$rc" -ne 0 ] && [ "$(cat "$2.s")" -lt 30 ] && grep -qE "$3" "$2"; then ok "$1: $(grep -m1 -E "$3" "$2")"
    else bad "$1" "exit status $rc, $(cat "$2.s") s: $(grep -m1 . "$2")"; fi
}
run "$W/check.txt" OUT="$W/out" bash tests/gpu_check.sh
says "tests/gpu_check.sh without CUDA" "$W/check.txt" "^error: no GPU: nvidia-smi is not on this machine"
if grep -q 'gpu_check: no GPU, nothing was run' "$W/out/summary.txt" 2> /dev/null && ! grep -q passed "$W/out/summary.txt"
then ok "... its summary says no GPU, and nothing passed"; else bad "gpu_check's summary" "$(cat "$W/out/summary.txt")"; fi
mkdir "$W/bin"
printf '#!/bin/sh\necho "GPU 0: Stand-in GPU (UUID: GPU-0)"\n' > "$W/bin/nvidia-smi" && chmod +x "$W/bin/nvidia-smi"
run "$W/standin.txt" PATH="$W/bin:$PATH" OUT="$W/out2" bash tests/gpu_check.sh
says "tests/gpu_check.sh with an nvidia-smi that lists a GPU, and no nvcc" "$W/standin.txt" "^error: no GPU usable"
run "$W/bench.txt" OUT="$W/bout" bash tests/bench_gpu.sh
says "tests/bench_gpu.sh without CUDA" "$W/bench.txt" "^error: no GPU"
run "$W/nccl.txt" OUT="$W/nout" bash tests/gpu_nccl_check.sh
if [ "$(cat "$W/nccl.txt.rc")" = 0 ] && [ "$(tail -n 1 "$W/nccl.txt")" = "nccl_check: skipped: no GPU (nvidia-smi lists none)" ]
then ok "tests/gpu_nccl_check.sh without CUDA: $(tail -n 1 "$W/nccl.txt")"; else bad "gpu_nccl_check.sh" "$(tail -n 2 "$W/nccl.txt")"; fi
run "$W/run_all.txt" ONLY=gpu bash tests/run_all.sh
if [ "$(tail -n 1 "$W/run_all.txt")" = "0 passed, 0 failed, 4 skipped" ] &&
   grep -q "skipped: the GPU suites .*nvcc is not installed" "$W/run_all.txt"; then
    ok "tests/run_all.sh skips the GPU suites, saying nvcc is not installed"
else bad "tests/run_all.sh without nvcc" "$(tail -n 3 "$W/run_all.txt" | tr '\n' ' ')"; fi
if [ -z "$(ls -A "$W/tmp")" ]; then ok "... and none of them left a file in TMPDIR"
else bad "files left in TMPDIR" "$(ls -A "$W/tmp" | tr '\n' ' ')"; fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
