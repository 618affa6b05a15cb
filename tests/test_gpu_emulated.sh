#!/usr/bin/env bash
# The CUDA kernels' logic on every commit, without a GPU: the small cases of tests/test_gpu.cu (the trainer against
# the CPU reference, gradient by gradient) on the CPU emulator, tools/cuda_emulator, which checks every shared-memory
# access against its barriers, every device access against its allocation, every launch against the device's
# limits. fp32 (tests/test_gpu_emu) and bf16 (tests/test_gpu_emu_bf16, with the tensor-core flash attention) under
# sm_90's limits, then bf16's attention cases (every layout) under the limits of each other supported generation (sm_80,
# sm_86, sm_89: where shared memory per block differs, and head size 128 must fall back to the portable kernels on
# sm_86/89), two at a time, a core each; then what the emulated trainer (tests/train_gpt2cu_emu) says on a device
# its build has no code for, where the activations do not fit, to a bad TRAIN_GPT2_EPILOGUES and to a head size the
# QKV norm does not take; that it trains on, saying so once per epilogue, where cuBLASLt's heuristic fails
# (EMU_LT_HEURISTIC), exactly as with the epilogues switched off; and that in the QKV-norm layouts (hybrid,
# hybrid-star, siamese-hybrid, pre-qkvnorm), in peri and in hc it trains as ./reference_cpu does and writes checkpoints
# ./reference_cpu reads. The cases left out here (C > 2048, GPT-2 small's
# shape) are in tools/emulate_gpu.sh. EMU_CASES overrides the list of the sm_90 runs (doctest's -tc filters,
# comma-separated), EMU_DEVICE_CASES that of the others. Ends with "N passed, N failed": test cases and checks.
set -u
cd "$(dirname "$0")/.."
CASES=${EMU_CASES:-"pre: *,post: *,mix: *,siamese: *,siamese --*,siamese with both*,hybrid and*,siamese-hybrid: *,pre-qkvnorm and peri*,hc: *,ten AdamW*,-r 1: *,flash attention*,QKV-norm*,long rows*,C not a multiple*,tensor-core flash*,classifier*,cuBLASLt*"}
DEVICE_CASES=${EMU_DEVICE_CASES:-"flash attention*,tensor-core flash*"}
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
for bin in tests/test_gpu_emu tests/test_gpu_emu_bf16 tests/train_gpt2cu_emu reference_cpu; do
    if [ ! -x "$bin" ]; then echo "$bin is not built (make $bin)"; echo "0 passed, 1 failed"; exit 1; fi
done
# name, device, program, cases
jobs=("fp32|sm_90|tests/test_gpu_emu|$CASES" "bf16|sm_90|tests/test_gpu_emu_bf16|$CASES")
for d in sm_80 sm_86 sm_89; do jobs+=("bf16 on $d|$d|tests/test_gpu_emu_bf16|$DEVICE_CASES"); done

passed=0 failed=0
report() {  # name, exit status, log: the job's CHECK lines and its doctest summary, counted
    local name=$1 rc=$2 log=$3 line p f
    echo "=== $name"
    grep -E "GRADCHECK|STEPCHECK|VARIANTCHECK|TCCHECK|TCFALLBACK|LSECHECK|LTCHECK|EMU|ERROR|error:" "$log" | sed 's/^.*MESSAGE: //'
    # doctest's summary, e.g. "[doctest] test cases: 11 | 11 passed | 0 failed | 4 skipped" (skipped: the cases
    # the filter leaves out); echoed in other words, so that tests/run_all.sh reads the total below
    line=$(grep -E '^\[doctest\] test cases:' "$log" | tail -n 1)
    p=$(sed -nE 's/.*\| *([0-9]+) passed.*/\1/p' <<< "$line")
    f=$(sed -nE 's/.*\| *([0-9]+) failed.*/\1/p' <<< "$line")
    if [ -z "$line" ] || { [ "$rc" -ne 0 ] && [ "${f:-0}" -eq 0 ]; }; then
        echo "$name: exit status $rc; the end of its output:"
        tail -n 30 "$log"
        p=${p:-0} f=$((${f:-0} + 1))
    fi
    echo "$name: ${p:-0} test cases passed, ${f:-0} failed"
    passed=$((passed + p)) failed=$((failed + f))
}
# two jobs at a time, reported in the order of the list
pids=()
for i in "${!jobs[@]}"; do
    IFS='|' read -r name device bin cases <<< "${jobs[$i]}"
    if [ "$i" -ge 2 ]; then wait "${pids[$((i - 2))]}"; echo $? > "$logs/$((i - 2)).rc"; fi
    EMU_DEVICE=$device "$bin" -tc="$cases" > "$logs/$i.log" 2>&1 &
    pids+=($!)
done
for i in "${!jobs[@]}"; do
    [ -f "$logs/$i.rc" ] || { wait "${pids[$i]}"; echo $? > "$logs/$i.rc"; }
    IFS='|' read -r name device bin cases <<< "${jobs[$i]}"
    report "$name" "$(cat "$logs/$i.rc")" "$logs/$i.log"
done

# the trainer on devices it cannot use as asked: one error line that says what to do, exit 1
echo "=== the emulated trainer"
trainer_says() {  # what, expected text, env..., -- trainer flags...
    local what=$1 want=$2 envs=()
    shift 2
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    env "${envs[@]}" tests/train_gpt2cu_emu -i data/kjv/kjv_train.bin -j data/kjv/kjv_val.bin --layers 2 \
        --channels 64 --heads 2 -x 1 -v 0 -s 0 "$@" > "$logs/trainer.log" 2>&1
    local rc=$? msg
    msg=$(grep -m 1 "^error:" "$logs/trainer.log")
    if [ $rc -eq 1 ] && grep -qE "$want" <<< "$msg"; then
        echo "ok   - $what: $msg"; passed=$((passed + 1))
    else
        echo "FAIL - $what: exit status $rc, expected 1 and an error line matching '$want'; its output ends:"
        tail -n 5 "$logs/trainer.log"; failed=$((failed + 1))
    fi
}
trainer_says "a build without code for the device (sm_86 emulated, built for 80 and 90)" \
    "no code for .*\(sm_86\): rebuild for it, make clean && make GPU_ARCHS=86" \
    EMU_DEVICE=sm_86 EMU_BUILD_ARCHS="80 90" -- -b 2 -t 32
trainer_says "activations beyond the device's memory (sm_86 emulated: 48 GiB)" \
    "out of GPU memory: the activations of -b 4096 -t 1024 need .* GiB, .* are free; -b [0-9]+ fits, with -r 1 -b [0-9]+ fits, with --attention flash -r 1 -b [0-9]+ fits" \
    EMU_DEVICE=sm_86 -- --max-seq-len 1024 -b 4096 -t 1024
trainer_says "TRAIN_GPT2_EPILOGUES neither 0 nor 1" "TRAIN_GPT2_EPILOGUES must be 0 .* or 1 .*, got '2'" \
    TRAIN_GPT2_EPILOGUES=2 -- -b 2 -t 32
trainer_says "a QKV-norm layout at head size 512" "the hybrid layout's QKV norm takes head sizes up to 256 .*, not 512" \
    -- --norm hybrid --channels 1024 --layers 1 -b 1 -t 8

# cuBLASLt without a usable algorithm (the emulated heuristic fails as a GPU's may, with a status other than "not
# supported"): the trainer must not stop but take the plain products and the bias/GELU kernels, say so once per
# epilogue (3 lines: BIAS, GELU_AUX_BIAS, DGELU), and train exactly as with the epilogues switched off (the same
# main.log bit for bit, the timings aside: the same code), within bf16's 3e-2 of the run with the epilogues
echo "=== the emulated trainer without cuBLASLt's epilogues"
epilogue_run() {  # NAME ENV...: 3 steps and a validation of a tiny siamese model into $logs/NAME
    local name=$1
    shift
    env "$@" tests/train_gpt2cu_emu -i data/kjv/kjv_train.bin -j data/kjv/kjv_val.bin --layers 2 --channels 64 \
        --heads 2 -b 2 -t 32 -x 3 -v 3 -m 1 -s 0 -o "$logs/$name" > "$logs/$name.out" 2> "$logs/$name.err"
    echo $? > "$logs/$name.rc"
}
epilogue_run lt_on
epilogue_run lt_off TRAIN_GPT2_EPILOGUES=0
epilogue_run lt_fault EMU_LT_HEURISTIC=14
lt_check() {  # what, then a command that must succeed
    local what=$1
    shift
    if "$@" > /dev/null 2>&1; then echo "ok   - $what"; passed=$((passed + 1))
    else echo "FAIL - $what"; for r in lt_on lt_off lt_fault; do echo "  $r: exit $(cat "$logs/$r.rc")"; tail -n 3 "$logs/$r.err"; done
        failed=$((failed + 1)); fi
}
lt_check "with the heuristic failing (CUBLAS_STATUS_INTERNAL_ERROR) the trainer runs to the end" \
    bash -c "[ \$(cat '$logs/lt_fault.rc') = 0 ] && [ -s '$logs/lt_fault/main.log' ]"
lt_check "... and says so once per epilogue, on stderr (3 warnings)" \
    bash -c "[ \$(grep -c '^warning: cuBLASLt has no usable algorithm for the' '$logs/lt_fault.err') = 3 ] &&
             [ \$(grep -c '^warning: cuBLASLt' '$logs/lt_fault.out') = 0 ]"
lt_check "... and trains bit for bit as with TRAIN_GPT2_EPILOGUES=0 (main.log)" \
    bash -c "[ \$(cat '$logs/lt_off.rc') = 0 ] && [ -n \"\$(sed 's/ ms:[0-9.]*//' '$logs/lt_off/main.log')\" ] &&
             cmp -s <(sed 's/ ms:[0-9.]*//' '$logs/lt_off/main.log') <(sed 's/ ms:[0-9.]*//' '$logs/lt_fault/main.log')"
lt_check "... within 3e-2 (bf16) of the run with the epilogues (main.log)" \
    bash -c "[ \$(cat '$logs/lt_on.rc') = 0 ] && python3 tools/compare_logs.py '$logs/lt_on/main.log' '$logs/lt_fault/main.log' 3e-2"
lt_check "the trainer's table says where the bias and GELU go" \
    bash -c "grep -q '| bias and GELU .*cuBLASLt epilogues' '$logs/lt_on.out' && grep -q '| bias and GELU .*separate kernels (TRAIN_GPT2_EPILOGUES=0)' '$logs/lt_off.out'"

# The QKV-norm layouts, peri and hc end to end: the emulated trainer (bf16) and ./reference_cpu from the same flags write the same
# main.log, each number within bf16's 3e-2 (tools/compare_logs.py), with -r 1 for the GPU; and ./reference_cpu reads
# the checkpoint the GPU wrote: its validation loss of it (-x 0 ... -v: step 0) is the GPU's last, within 3e-2
echo "=== the emulated trainer against ./reference_cpu, QKV-norm layouts, peri and hc"
for layout in hybrid hybrid-star siamese-hybrid pre-qkvnorm peri hc; do
    F=(-i data/kjv/kjv_train.bin -j data/kjv/kjv_val.bin --norm $layout --layers 2 --channels 64 --heads 4 -b 2 -t 32
       -x 3 -l 1e-3 -v 3 -m 2 -s 0)
    # each run must finish (exit status 0): two that stop at the same step write the same partial main.log
    ./reference_cpu "${F[@]}" -o "$logs/cpu_$layout" > "$logs/cpu_$layout.out" 2>&1
    cpu_rc=$?
    tests/train_gpt2cu_emu "${F[@]}" -r 1 -o "$logs/gpu_$layout" > "$logs/gpu_$layout.out" 2>&1
    gpu_rc=$?
    ckpt=$logs/gpu_$layout/model_00000003.bin
    ./reference_cpu -e "$ckpt" -i data/kjv/kjv_train.bin -j data/kjv/kjv_val.bin -b 2 -t 32 -x 1 -v 1 -m 2 -s 0 \
        -o "$logs/cpu_of_gpu_$layout" > "$logs/cpu_of_gpu_$layout.out" 2>&1
    read_rc=$?
    lt_check "$layout: the emulated trainer (bf16, -r 1) writes ./reference_cpu's main.log, within 3e-2 (exit statuses $cpu_rc, $gpu_rc)" \
        bash -c "[ $cpu_rc = 0 ] && [ $gpu_rc = 0 ] &&
                 python3 tools/compare_logs.py '$logs/cpu_$layout/main.log' '$logs/gpu_$layout/main.log' 3e-2"
    gpu_val=$(grep -m 1 '^s:3 tel:' "$logs/gpu_$layout/main.log" | sed 's/.*tel://')
    cpu_val=$(grep -m 1 '^s:0 tel:' "$logs/cpu_of_gpu_$layout/main.log" 2> /dev/null | sed 's/.*tel://')
    lt_check "$layout: ./reference_cpu reads the GPU's checkpoint: validation loss ${cpu_val:-none} against ${gpu_val:-none}" \
        python3 -c "import sys; a, b = map(float, sys.argv[1:3]); sys.exit(sys.argv[3] != '0' or not abs(a - b) <= 3e-2 * abs(b))" \
        "${cpu_val:-nan}" "${gpu_val:-nan}" "$read_rc"
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
