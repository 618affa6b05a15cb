#!/usr/bin/env bash
# The GPUs the CUDA programs are built for (the Makefile's GPU_ARCHS), compile-only, so that a machine without a GPU
# holds the build to what it promises: every architecture make built for has its code in the program (cuobjdump
# lists an ELF for each, and the PTX of the newest for GPUs newer still); an explicit GPU_ARCHS gives exactly that
# list; an unsupported architecture stops make with one error; make's default follows nvidia-smi. Ends "N passed,
# N failed" (", 1 skipped" without cuobjdump).
set -u
cd "$(dirname "$0")/.."
passed=0 failed=0
ok()  { echo "ok   - $1"; passed=$((passed + 1)); }
bad() { echo "FAIL - $1: $2"; failed=$((failed + 1)); }
CUOBJDUMP=$(command -v cuobjdump || echo .deps/cuobjdump/cuobjdump)
skipped=0
archs=$(make -s print-gpu-archs)
echo "make builds for: $archs (test programs: $(make -s print-test-archs))"

# each program holds the code of every architecture listed, and nothing else (the ELFs), and the newest one's PTX
holds() {  # program, architectures
    local elf ptx want
    elf=$("$CUOBJDUMP" --list-elf "$1" 2>&1 | sed -nE 's/.*\.sm_([0-9]+)\.cubin$/\1/p' | sort -un | tr '\n' ' ')
    ptx=$("$CUOBJDUMP" --list-ptx "$1" 2>&1 | sed -nE 's/.*\.sm_([0-9]+)\.ptx$/\1/p' | sort -un | tr '\n' ' ')
    want=$(tr ' ' '\n' <<< "$2" | grep . | sort -un | tr '\n' ' ')
    local list=${want% }
    if [ "$elf" = "$want" ] && [ "$ptx" = "$(tr ' ' '\n' <<< "$2" | grep . | tail -n 1) " ]; then
        ok "$1 holds code for sm_${list// /, sm_} and the PTX of sm_${ptx% }"
    else bad "$1" "its ELFs are for '${elf}', its PTX for '${ptx}'; make built it for '$2'"; fi
}
if [ -x "$CUOBJDUMP" ]; then
    for prog in train_gpt2cu train_gpt2fp32cu; do
        if [ -x "$prog" ]; then holds "$prog" "$archs"; else bad "$prog" "not built (make $prog)"; fi
    done
    [ -x tests/test_gpu ] && holds tests/test_gpu "$(make -s print-test-archs)"
else
    echo "skipped: what the programs hold: no cuobjdump (bash .ci/deps test fetches it into .deps/cuobjdump)"
    skipped=1
fi

# what make would run, for an explicit list and for an unsupported architecture
flags=$(make -s -n -B GPU_ARCHS="86 89" train_gpt2fp32cu 2>&1 | grep -o -- '-gencode [^ ]*' | tr '\n' ' ')
if [ "$flags" = "-gencode arch=compute_86,code=sm_86 -gencode arch=compute_89,code=sm_89 -gencode arch=compute_89,code=compute_89 " ]; then
    ok "GPU_ARCHS=\"86 89\" builds for sm_86 and sm_89 (and sm_89's PTX)"
else bad "GPU_ARCHS=\"86 89\"" "make would pass '$flags'"; fi
out=$(make -s -n GPU_ARCHS=75 train_gpt2cu 2>&1); rc=$?
if [ $rc -ne 0 ] && grep -q "GPU_ARCHS: '75' is not a compute capability of 80 or more" <<< "$out"; then
    ok "GPU_ARCHS=75 stops make: $(grep -o "GPU_ARCHS: '75'.*" <<< "$out" | head -n 1)"
else bad "GPU_ARCHS=75" "exit $rc: $out"; fi
# the default: this machine's GPU as nvidia-smi reports it, and where it reports none (or fails, printing its
# complaint on stdout, as it does without a driver) the fat build
fake=$(mktemp -d)
trap 'rm -rf "$fake"' EXIT
smi() { printf '#!/bin/sh\n%s\n' "$1" > "$fake/nvidia-smi"; chmod +x "$fake/nvidia-smi"; PATH="$fake:$PATH" make -s print-gpu-archs 2>&1; }
got=$(smi 'printf "8.6\n8.6\n"')
if [ "$got" = 86 ]; then ok "on a machine whose nvidia-smi reports two sm_86 GPUs, make builds for 86"
else bad "nvidia-smi reporting 8.6" "make would build for '$got'"; fi
got=$(smi 'echo "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver."')
if [ "$got" = "80 86 89 90" ]; then ok "where nvidia-smi fails (no driver), make builds for all four"
else bad "a failing nvidia-smi" "make would build for '$got'"; fi
echo "$passed passed, $failed failed$([ $skipped -eq 0 ] || echo ", $skipped skipped")"
[ "$failed" -eq 0 ]
