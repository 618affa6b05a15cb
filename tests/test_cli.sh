#!/usr/bin/env bash
# The CPU trainer from the outside: every malformed file and impossible flag gives one clear error line and a
# non-zero exit (never a crash); checkpoints resume bit-exactly and are never destroyed by a failing run; runs are
# deterministic; and each layout learns the KJV text. Needs ./reference_cpu and the KJV shards (make data).
# Ends with the line "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
BIN=./reference_cpu
PY=${PYTHON:-python3}
KJV_TRAIN=data/kjv/kjv_train.bin KJV_VAL=data/kjv/kjv_val.bin
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   - $1"; }
bad() { fail=$((fail + 1)); echo "FAIL - $1: $2"; }

for f in $BIN $KJV_TRAIN $KJV_VAL; do
    [ -e "$f" ] || { echo "missing $f (run make first)"; echo "0 passed, 1 failed"; exit 1; }
done

# a tiny model and no validation or sampling unless a check asks for them
TINY=(--layers 2 --channels 32 --heads 2 -b 2 -t 16 -v 0 -s 0)

# expect_error NAME PATTERN CMD...: CMD must exit with status 1 (not a signal), print exactly one line on stderr,
# starting with "error:" and containing PATTERN (an extended regex).
expect_error() {
    local name=$1 pattern=$2; shift 2
    "$@" > "$TMP/out" 2> "$TMP/err"
    local rc=$? lines
    lines=$(wc -l < "$TMP/err")
    if [ $rc -ne 1 ]; then bad "$name" "exit status $rc, expected 1 ($(head -c 200 "$TMP/err"))"
    elif [ "$lines" -ne 1 ]; then bad "$name" "$lines lines on stderr: $(head -c 300 "$TMP/err")"
    elif ! grep -qE "^error: .*($pattern)" "$TMP/err"; then bad "$name" "unexpected message: $(cat "$TMP/err")"
    else ok "$name: $(cat "$TMP/err")"; fi
}

# shard PATH VOCAB NTOKENS_IN_HEADER [TOKENS...] [--magic M] [--extra N]: writes a token shard (values can lie)
shard() {
    $PY - "$@" <<'EOF'
import struct, sys
args = sys.argv[1:]
magic, extra = 20240520, 0
if "--magic" in args: i = args.index("--magic"); magic = int(args[i + 1]); del args[i:i + 2]
if "--extra" in args: i = args.index("--extra"); extra = int(args[i + 1]); del args[i:i + 2]
path, vocab, n = args[0], int(args[1]), int(args[2])
tokens = [int(t) for t in args[3:]] or [i % min(vocab, 60) for i in range(n)]
header = [magic, 1, n, vocab] + [0] * 252
with open(path, "wb") as f:
    f.write(struct.pack("<256i", *header))
    f.write(struct.pack("<%dH" % len(tokens), *tokens))
    f.write(b"\0\0" * extra)
EOF
}

# checkpoint surgery: patch SRC DST INT_INDEX VALUE (header int), or truncate/append bytes, or poison a float
patch_int() { $PY -c "
import struct,sys; b=bytearray(open('$1','rb').read()); struct.pack_into('<i', b, 4*$3, $4); open('$2','wb').write(b)"; }
poison_float() { $PY -c "
import struct; b=bytearray(open('$1','rb').read()); struct.pack_into('<f', b, 1024 + 4*$3, float('nan')); open('$2','wb').write(b)"; }

# ---- fixtures
shard "$TMP/ok_train.bin" 256 2000
shard "$TMP/ok_val.bin" 256 500
shard "$TMP/trunc.bin" 256 2000 1 2 3 4 5
shard "$TMP/magic.bin" 256 2000 --magic 12345
shard "$TMP/trailing.bin" 256 2000 --extra 3
shard "$TMP/range.bin" 256 40 300 $(seq 1 39)
shard "$TMP/small.bin" 256 10
shard "$TMP/vocab60.bin" 60 2000
: > "$TMP/empty.bin"
DATA=(-i "$TMP/ok_train.bin" -j "$TMP/ok_val.bin")
$BIN "${DATA[@]}" "${TINY[@]}" -x 1 -o "$TMP/base" > /dev/null 2>&1 || bad "fixture" "could not train the base model"
CKPT="$TMP/base/model_00000001.bin"

# ---- malformed data
expect_error "no shards match" "no token shards match" $BIN -i "$TMP/none_*.bin" "${TINY[@]}"
expect_error "truncated shard" "truncated" $BIN -i "$TMP/trunc.bin" -j "$TMP/ok_val.bin" "${TINY[@]}"
expect_error "shard with bad magic" "not a token shard" $BIN -i "$TMP/magic.bin" "${TINY[@]}"
expect_error "shard with trailing data" "trailing data" $BIN -i "$TMP/trailing.bin" "${TINY[@]}"
expect_error "token id out of range" "out of range" $BIN -i "$TMP/range.bin" "${TINY[@]}" -x 1
expect_error "shard smaller than a batch" "fewer than one batch" $BIN -i "$TMP/small.bin" "${TINY[@]}"
expect_error "empty shard file" "truncated" $BIN -i "$TMP/empty.bin" "${TINY[@]}"
expect_error "val vocabulary larger than the model's" "vocabulary" \
    $BIN -i "$TMP/vocab60.bin" -j "$TMP/ok_val.bin" "${TINY[@]}" -v 1
expect_error "corrupt tokenizer" "not a tokenizer" $BIN "${DATA[@]}" "${TINY[@]}" --tokenizer "$TMP/ok_val.bin"
head -c 1500 data/kjv/kjv_tokenizer.bin > "$TMP/tok_trunc.bin"
expect_error "truncated tokenizer" "truncated" $BIN "${DATA[@]}" "${TINY[@]}" --tokenizer "$TMP/tok_trunc.bin"
expect_error "no question=answer lines for --eval-answers" "question=answer" \
    $BIN -i $KJV_TRAIN -j $KJV_VAL "${TINY[@]}" -v 1 --eval-answers 5

# ---- malformed checkpoints
expect_error "missing checkpoint" "cannot open" $BIN "${DATA[@]}" -e "$TMP/nope.bin" -v 0 -s 0
patch_int "$CKPT" "$TMP/c_magic.bin" 0 7; expect_error "checkpoint bad magic" "not a model checkpoint" $BIN "${DATA[@]}" -e "$TMP/c_magic.bin" -v 0 -s 0
patch_int "$CKPT" "$TMP/c_v5.bin" 1 5; expect_error "bf16 (version 5) checkpoint" "version 5" $BIN "${DATA[@]}" -e "$TMP/c_v5.bin" -v 0 -s 0
head -c 5000 "$CKPT" > "$TMP/c_trunc.bin"; expect_error "truncated checkpoint" "truncated" $BIN "${DATA[@]}" -e "$TMP/c_trunc.bin" -v 0 -s 0
head -c 600 "$CKPT" > "$TMP/c_hdr.bin"; expect_error "checkpoint shorter than its header" "truncated" $BIN "${DATA[@]}" -e "$TMP/c_hdr.bin" -v 0 -s 0
{ cat "$CKPT"; printf 'xxxx'; } > "$TMP/c_tail.bin"; expect_error "checkpoint with trailing data" "trailing data" $BIN "${DATA[@]}" -e "$TMP/c_tail.bin" -v 0 -s 0
poison_float "$CKPT" "$TMP/c_nan.bin" 100; expect_error "checkpoint with a NaN parameter" "non-finite" $BIN "${DATA[@]}" -e "$TMP/c_nan.bin" -v 0 -s 0
patch_int "$CKPT" "$TMP/c_layout.bin" 8 7; expect_error "checkpoint with an unknown layout" "unknown layout" $BIN "${DATA[@]}" -e "$TMP/c_layout.bin" -v 0 -s 0
patch_int "$CKPT" "$TMP/c_heads.bin" 5 5; expect_error "checkpoint with C not divisible by NH" "divisible" $BIN "${DATA[@]}" -e "$TMP/c_heads.bin" -v 0 -s 0
patch_int "$CKPT" "$TMP/c_field.bin" 40 1; expect_error "checkpoint with an unknown header field" "unknown header field" $BIN "${DATA[@]}" -e "$TMP/c_field.bin" -v 0 -s 0
patch_int "$CKPT" "$TMP/c_neg.bin" 4 -3; expect_error "checkpoint with a negative layer count" "implausible" $BIN "${DATA[@]}" -e "$TMP/c_neg.bin" -v 0 -s 0
expect_error "empty checkpoint file" "truncated" $BIN "${DATA[@]}" -e "$TMP/empty.bin" -v 0 -s 0
expect_error "checkpoint layout differs from --norm" "checkpoint is pre" $BIN "${DATA[@]}" -e "$CKPT" --norm siamese -v 0 -s 0
expect_error "shape flags that differ from the checkpoint" "another shape" $BIN "${DATA[@]}" -e "$CKPT" --layers 3 -v 0 -s 0

# ---- impossible flags
expect_error "-b 0" "must be positive" $BIN "${DATA[@]}" -b 0
expect_error "-t 0" "must be positive" $BIN "${DATA[@]}" -t 0
expect_error "-t beyond the model's maximum" "exceeds" $BIN "${DATA[@]}" "${TINY[@]}" -t 64 --max-seq-len 32
expect_error "-d not a multiple of b*t" "multiple" $BIN "${DATA[@]}" "${TINY[@]}" -d 100
expect_error "negative learning rate" "-l must be" $BIN "${DATA[@]}" -l -1
expect_error "-q outside [0,1]" "-q must" $BIN "${DATA[@]}" -q 2
expect_error "unknown layout" "pre, post or siamese" $BIN "${DATA[@]}" --norm middle
expect_error "unknown flag" "unknown flag" $BIN "${DATA[@]}" --bogus 1
expect_error "non-numeric value" "expects an integer" $BIN "${DATA[@]}" -x abc
expect_error "flag without its value" "needs a value" $BIN "${DATA[@]}" -b
expect_error "unknown GPT-2 shape" "known shapes" $BIN "${DATA[@]}" -b 2 -t 16 -v 0 -s 0 -e d13
expect_error "heads that do not divide channels" "divisible" $BIN "${DATA[@]}" --channels 30 --heads 4 -b 2 -t 16 -v 0 -s 0
expect_error "siamese ablation on pre-norm" "siamese layout only" $BIN "${DATA[@]}" "${TINY[@]}" --norm pre --no-ln-in
expect_error "-y 1 without -o" "needs -o" $BIN "${DATA[@]}" -y 1
mkdir -p "$TMP/emptydir"
expect_error "-y 1 with no checkpoint" "no complete checkpoint" $BIN "${DATA[@]}" "${TINY[@]}" -y 1 -o "$TMP/emptydir"
expect_error "-y 2" "take 0 or 1" $BIN "${DATA[@]}" -y 2
expect_error "-f on the CPU" "CUDA trainer only" $BIN "${DATA[@]}" -f 1
expect_error "-r on the CPU" "CUDA trainer only" $BIN "${DATA[@]}" -r 1
expect_error "--attention on the CPU" "CUDA trainer only" $BIN "${DATA[@]}" --attention flash
if [ -x ./train_gpt2cu ]; then  # parsed before the device starts, so this holds without a GPU too
    expect_error "--attention with an unknown name (CUDA trainer)" "--attention expects materialized or flash" \
        ./train_gpt2cu "${DATA[@]}" --attention fast
fi

# ---- --print-tensors: the tensor table as JSON, from the flags or a checkpoint, without training
for layout in pre post siamese; do
    $BIN "${DATA[@]}" "${TINY[@]}" --norm $layout --print-tensors > "$TMP/tensors.json" 2> "$TMP/err"
    if $PY - "$TMP/tensors.json" $layout <<'EOF'
import json, sys
t = json.load(open(sys.argv[1]))
names = [x["name"] for x in t["tensors"]]
size = lambda x: eval("*".join(map(str, x["shape"])))
assert t["layout"] == sys.argv[2] and names[:2] == ["wte", "wpe"], names
assert all(a["offset"] + size(a) == b["offset"] for a, b in zip(t["tensors"], t["tensors"][1:]))
assert t["tensors"][-1]["offset"] + size(t["tensors"][-1]) == t["num_parameters"]
assert ("lnfw" in names) == (sys.argv[2] != "post") and ("ln1yw" in names) == (sys.argv[2] == "siamese")
EOF
    then ok "--print-tensors ($layout): contiguous offsets, the layout's tensors"; else bad "--print-tensors ($layout)" "$(cat "$TMP/err")"; fi
done
n=$($BIN -e "$CKPT" --print-tensors | $PY -c "import json,sys; print(json.load(sys.stdin)['num_parameters'])")
if [ $((1024 + 4 * n)) -eq "$(stat -c %s "$CKPT")" ]; then ok "--print-tensors -e CKPT: the table spans the checkpoint"
else bad "--print-tensors -e CKPT" "$n parameters against $(stat -c %s "$CKPT") bytes"; fi
if [ -x ./train_gpt2cu ] && ./train_gpt2cu -e "$CKPT" --print-tensors 2>&1 | cmp -s - <($BIN -e "$CKPT" --print-tensors); then
    ok "the CUDA trainer prints the same table, without a GPU"
elif [ -x ./train_gpt2cu ]; then bad "--print-tensors (CUDA trainer)" "differs from the CPU trainer's"; fi

# ---- resume: bit-exact, with gradient accumulation (-d = 2 micro-batches)
RUN=(-i $KJV_TRAIN -j $KJV_VAL --layers 2 --channels 32 --heads 2 -b 2 -t 16 -d 64 -x 6 -l 1e-3 -u 2 -q 0.1 -v 0 -s 0)
$BIN "${RUN[@]}" -o "$TMP/a" > /dev/null 2>&1
$BIN "${RUN[@]}" -o "$TMP/b" -n 3 > /dev/null 2>&1
if cmp -s "$TMP/a/model_00000006.bin" "$TMP/b/model_00000006.bin"; then ok "checkpointing mid-run changes nothing"
else bad "checkpointing mid-run changes nothing" "final models differ"; fi
rm -f "$TMP/b/DONE_00000006" "$TMP/b/model_00000006.bin" "$TMP/b/state_00000006.bin"
$BIN "${RUN[@]}" -o "$TMP/b" -n 3 -y 1 > "$TMP/resume.out" 2>&1
if grep -q "3 to 6" "$TMP/resume.out" && cmp -s "$TMP/a/model_00000006.bin" "$TMP/b/model_00000006.bin" &&
   cmp -s "$TMP/a/state_00000006.bin" "$TMP/b/state_00000006.bin"; then
    ok "resume from step 3 reproduces the uninterrupted run bit for bit (model and optimizer state)"
else bad "resume bit-exact" "$(grep -m1 steps "$TMP/resume.out")"; fi
if diff <(grep -E '^s:[345] trl' "$TMP/a/main.log" | cut -d' ' -f1-2) \
        <(grep -E '^s:[345] trl' "$TMP/b/main.log" | tail -n 3 | cut -d' ' -f1-2) > /dev/null; then
    ok "resumed losses equal the uninterrupted run's"
else bad "resumed losses" "main.log differs"; fi
cp -r "$TMP/b" "$TMP/c"; rm -f "$TMP/c/DONE_00000006" "$TMP/c/model_00000006.bin"
head -c 3000 "$TMP/c/state_00000003.bin" > "$TMP/c/s" && mv "$TMP/c/s" "$TMP/c/state_00000003.bin"
expect_error "truncated optimizer state on resume" "truncated" $BIN "${RUN[@]}" -o "$TMP/c" -y 1
expect_error "resume with another batch shape" "same batch shape" $BIN "${RUN[@]}" -b 1 -d 32 -o "$TMP/b" -y 1

# ---- determinism: the same flags give the same bits, for any thread count
OMP_NUM_THREADS=1 $BIN "${RUN[@]}" -o "$TMP/d1" > /dev/null 2>&1
OMP_NUM_THREADS=2 $BIN "${RUN[@]}" -o "$TMP/d2" > /dev/null 2>&1
if cmp -s "$TMP/a/model_00000006.bin" "$TMP/d2/model_00000006.bin" &&
   cmp -s "$TMP/d1/model_00000006.bin" "$TMP/d2/model_00000006.bin"; then
    ok "deterministic: same model bits on repeated runs and with 1 or 2 threads"
else bad "deterministic" "models differ"; fi

# ---- a diverging run stops with an error and leaves the last good checkpoint alone
$BIN "${RUN[@]}" -x 4 -n 2 -o "$TMP/g" > /dev/null 2>&1
sum_before=$(cat "$TMP"/g/model_00000004.bin "$TMP"/g/state_00000004.bin | md5sum)
expect_error "divergence (NaN loss) is caught" "diverged" $BIN "${RUN[@]}" -x 12 -n 1 -l 1e30 -o "$TMP/g" -y 1
sum_after=$(cat "$TMP"/g/model_00000004.bin "$TMP"/g/state_00000004.bin | md5sum)
if [ "$sum_before" = "$sum_after" ] && [ "$(ls "$TMP"/g/DONE_* | wc -l)" -eq 2 ]; then
    ok "the failing run left the good checkpoint intact and wrote no new one"
else bad "checkpoint kept" "checkpoint changed or a diverged checkpoint was written: $(ls "$TMP/g")"; fi
if $BIN "${RUN[@]}" -x 6 -o "$TMP/g" -y 1 > /dev/null 2>&1; then ok "training resumes from the kept checkpoint"
else bad "resume after divergence" "failed"; fi

# ---- end to end: each layout learns the KJV text. The threshold 2.9 nats is far below ln(256) = 5.55 (uniform
# bytes) and below the byte-unigram entropy of the text (3.14 nats), so the model must use context to pass.
for norm in pre post siamese; do
    $BIN -i $KJV_TRAIN -j $KJV_VAL --norm $norm --layers 2 --channels 64 --heads 4 -b 8 -t 64 -l 2e-3 -u 10 \
        -x 200 -v 200 -m 10 -s 200 -g 48 > "$TMP/e2e_$norm.out" 2>&1
    first=$(grep -m1 "val loss" "$TMP/e2e_$norm.out" | awk '{print $3}')
    last=$(grep "val loss" "$TMP/e2e_$norm.out" | tail -n 1 | awk '{print $3}')
    if [ -n "$last" ] && awk -v f="$first" -v l="$last" 'BEGIN { exit !(f > 5.3 && l < 2.9) }'; then
        ok "end to end, $norm: val loss $first -> $last"
    else bad "end to end, $norm" "val loss $first -> $last"; fi
done
if grep -q "^generating:" "$TMP/e2e_siamese.out" && [ "$(sed -n '/^---$/,/^---$/p' "$TMP/e2e_siamese.out" | wc -c)" -gt 40 ]; then
    ok "a text sample is printed"
else bad "sample" "no sample text"; fi

# ---- the addition task's answer accuracy is reported
if [ -f data/addition/addition_train.bin ] || $PY data/prepare.py addition > /dev/null 2>&1; then
    $BIN -i data/addition/addition_train.bin -j data/addition/addition_val.bin --norm siamese --layers 2 \
        --channels 32 --heads 2 -b 4 -t 32 -x 5 -v 5 -s 0 --eval-answers 20 -o "$TMP/add" > "$TMP/add.out" 2>&1
    if grep -qE "^answer accuracy [0-9.]+ \(20 problems\)" "$TMP/add.out" && grep -q "^s:5 acc:" "$TMP/add/main.log"; then
        ok "--eval-answers reports exact-match accuracy"
    else bad "--eval-answers" "$(tail -n 2 "$TMP/add.out")"; fi
else bad "--eval-answers" "could not prepare the addition data"; fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
