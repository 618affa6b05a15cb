#!/usr/bin/env bash
# The CPU trainer from the outside: every malformed file and impossible flag gives one clear error line and a
# non-zero exit (never a crash); checkpoints resume bit-exactly and are never destroyed by a failing run; runs are
# deterministic; and each layout learns the KJV text. Needs ./reference_cpu and the KJV shards (make data).
# Ends with the line "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
BIN=${BIN:-./reference_cpu}
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
patch_int "$CKPT" "$TMP/c_layout.bin" 8 99; expect_error "checkpoint with an unknown layout" "unknown layout" $BIN "${DATA[@]}" -e "$TMP/c_layout.bin" -v 0 -s 0
patch_int "$CKPT" "$TMP/c_setting.bin" 10 1; expect_error "checkpoint with a layout setting its layout does not have" "no setting of its own" $BIN "${DATA[@]}" -e "$TMP/c_setting.bin" -v 0 -s 0
patch_int "$CKPT" "$TMP/c_heads.bin" 5 5; expect_error "checkpoint with C not divisible by NH" "divisible" $BIN "${DATA[@]}" -e "$TMP/c_heads.bin" -v 0 -s 0
patch_int "$CKPT" "$TMP/c_field.bin" 40 1; expect_error "checkpoint with an unknown header field" "unknown header field" $BIN "${DATA[@]}" -e "$TMP/c_field.bin" -v 0 -s 0
patch_int "$CKPT" "$TMP/c_neg.bin" 4 -3; expect_error "checkpoint with a negative layer count" "implausible" $BIN "${DATA[@]}" -e "$TMP/c_neg.bin" -v 0 -s 0
expect_error "empty checkpoint file" "truncated" $BIN "${DATA[@]}" -e "$TMP/empty.bin" -v 0 -s 0
expect_error "checkpoint layout differs from --norm" "checkpoint is pre" $BIN "${DATA[@]}" -e "$CKPT" --norm siamese -v 0 -s 0
expect_error "shape flags that differ from the checkpoint" "another shape" $BIN "${DATA[@]}" -e "$CKPT" --layers 3 -v 0 -s 0

# ---- impossible flags
expect_error "-b 0" "-b must be at least 1" $BIN "${DATA[@]}" -b 0
expect_error "-t 0" "-t must be at least 1" $BIN "${DATA[@]}" -t 0
# the shape flags are bounded as the checkpoint loader bounds a header: no count computed from them wraps around
# (--channels 1000000000 printed a parameter count past 2^64)
expect_error "--print-tensors --channels 1000000000" "--channels must be at most 65536" \
    $BIN "${DATA[@]}" --print-tensors --channels 1000000000
for limit in "--layers 1025 1024" "--heads 65537 65536" "--max-seq-len 1048577 1048576" "--vocab 65537 65536" \
             "-t 1048577 1048576" "-b 1073741825 1073741824"; do
    read -r flag value largest <<< "$limit"
    expect_error "$flag $value" "flag $flag must be at most $largest \(" $BIN "${DATA[@]}" "${TINY[@]}" $flag $value
done
expect_error "-b * -t past 2^30 tokens" "-b \* -t = 4294967296 is more than 1073741824" $BIN "${DATA[@]}" -b 65536 -t 65536
# a value that is refused is printed as given, not rounded (--mix-alpha 1.0000001 said 'got 1')
expect_error "--mix-alpha 1.0000001" "--mix-alpha must be in \(0, 1\], got 1.0000001$" $BIN "${DATA[@]}" "${TINY[@]}" --norm mix --mix-alpha 1.0000001
expect_error "-q 1.0000001" "-q must lie in \[0, 1\], got 1.0000001$" $BIN "${DATA[@]}" "${TINY[@]}" -q 1.0000001
expect_error "--temperature -0.001" "--temperature must be >= 0, got -0.001$" $BIN "${DATA[@]}" "${TINY[@]}" --temperature -0.001
expect_error "--grad-clip -0.25" "--grad-clip must be >= 0 .*got -0.25$" $BIN "${DATA[@]}" "${TINY[@]}" --grad-clip -0.25
expect_error "-t beyond the model's maximum" "exceeds" $BIN "${DATA[@]}" "${TINY[@]}" -t 64 --max-seq-len 32
expect_error "-d not a multiple of b*t" "multiple" $BIN "${DATA[@]}" "${TINY[@]}" -d 100
expect_error "negative learning rate" "-l must be" $BIN "${DATA[@]}" -l -1
expect_error "-q outside [0,1]" "-q must" $BIN "${DATA[@]}" -q 2
expect_error "unknown layout" "--norm expects pre, post" $BIN "${DATA[@]}" --norm middle
expect_error "unknown flag" "unknown flag" $BIN "${DATA[@]}" --bogus 1
expect_error "non-numeric value" "expects an integer" $BIN "${DATA[@]}" -x abc
expect_error "flag without its value" "needs a value" $BIN "${DATA[@]}" -b
expect_error "unknown GPT-2 shape" "known shapes" $BIN "${DATA[@]}" -b 2 -t 16 -v 0 -s 0 -e d13
expect_error "heads that do not divide channels" "divisible" $BIN "${DATA[@]}" --channels 30 --heads 4 -b 2 -t 16 -v 0 -s 0
expect_error "siamese ablation on pre-norm" "apply to the siamese and siamese-hybrid layouts only \(not pre\)" $BIN "${DATA[@]}" "${TINY[@]}" --norm pre --no-ln-in
for norm in hybrid hybrid-star pre-qkvnorm peri; do
    expect_error "siamese ablation on $norm" "siamese-hybrid layouts only \(not $norm\)" $BIN "${DATA[@]}" "${TINY[@]}" --norm $norm --no-depth-scale
done
for ablation in --no-ln-in --no-depth-scale; do  # siamese-hybrid takes both: header[9] says which
    bit=$([ $ablation = --no-ln-in ] && echo 2 || echo 1)
    if $BIN "${DATA[@]}" "${TINY[@]}" --norm siamese-hybrid $ablation --print-tensors 2>/dev/null | grep -q "\"layout\": \"siamese-hybrid\", \"ablations\": $bit,"
    then ok "--norm siamese-hybrid $ablation: header[9] = $bit"; else bad "--norm siamese-hybrid $ablation" "not accepted, or not header[9] = $bit"; fi
done
expect_error "-y 1 without -o" "needs -o" $BIN "${DATA[@]}" -y 1
mkdir -p "$TMP/emptydir"
expect_error "-y 1 with no checkpoint" "no complete checkpoint" $BIN "${DATA[@]}" "${TINY[@]}" -y 1 -o "$TMP/emptydir"
# a run that refuses to start creates nothing: no directory, no .lock (they were created before the refusal)
if [ -z "$(ls -A "$TMP/emptydir")" ]; then ok "... and leaves nothing in the directory (no .lock)"
else bad "-y 1 with no checkpoint" "it left $(ls -A "$TMP/emptydir")"; fi
expect_error "-y 1 on a missing -o" "no complete checkpoint" $BIN "${DATA[@]}" "${TINY[@]}" -y 1 -o "$TMP/missing/run"
if [ ! -e "$TMP/missing" ]; then ok "... and creates no directory"; else bad "-y 1 on a missing -o" "it created $TMP/missing"; fi
expect_error "a new -o with data that is refused" "no token shards match" $BIN -i "$TMP/none_*.bin" "${TINY[@]}" -o "$TMP/new/run"
if [ ! -e "$TMP/new" ]; then ok "... creates no directory"; else bad "a refused run" "it created $(find "$TMP/new" | tr '\n' ' ')"; fi
expect_error "-y 2" "take 0 or 1" $BIN "${DATA[@]}" -y 2
expect_error "-f on the CPU" "CUDA trainer only" $BIN "${DATA[@]}" -f 1
expect_error "-r on the CPU" "CUDA trainer only" $BIN "${DATA[@]}" -r 1
expect_error "--attention on the CPU" "CUDA trainer only" $BIN "${DATA[@]}" --attention flash
# a layout's own setting (host/layouts.h): Mix-LN's --mix-alpha
expect_error "--mix-alpha outside (0, 1]" "--mix-alpha must be in" $BIN "${DATA[@]}" "${TINY[@]}" --norm mix --mix-alpha 1.5
expect_error "--mix-alpha that leaves no Post-LN block" "gives no Post-LN block" $BIN "${DATA[@]}" "${TINY[@]}" --layers 2 --norm mix --mix-alpha 0.25
expect_error "--mix-alpha for another layout" "--mix-alpha applies to --norm mix only" $BIN "${DATA[@]}" "${TINY[@]}" --norm pre --mix-alpha 0.5
if $BIN "${DATA[@]}" "${TINY[@]}" --layers 4 --norm mix --mix-alpha 0.5 --print-tensors 2>/dev/null | grep -q '"layout": "mix", "ablations": 0, "layout_setting": 2,'
then ok "--norm mix --mix-alpha 0.5 at 4 layers: header[10] = 2 Post-LN blocks"; else bad "--mix-alpha 0.5" "no layout_setting 2"; fi
if [ -x ./train_gpt2cu ]; then  # parsed before the device starts, so this holds without a GPU too
    expect_error "a layout the CUDA trainer does not run" "the CUDA trainer runs the layouts pre, post, siamese, mix, hybrid, hybrid-star, siamese-hybrid, pre-qkvnorm, peri and hc" \
        ./train_gpt2cu "${DATA[@]}" --norm deepnorm
    expect_error "--attention with an unknown name (CUDA trainer)" "--attention expects materialized, flash or cudnn" \
        ./train_gpt2cu "${DATA[@]}" --attention fast
fi

# ---- inputs that would hang or be taken silently
mkfifo "$TMP/fifo"
expect_error "a FIFO as the checkpoint" "not a regular file" timeout 10 $BIN "${DATA[@]}" "${TINY[@]}" -e "$TMP/fifo"
expect_error "a FIFO as a shard" "not a regular file" timeout 10 $BIN -i "$TMP/fifo" "${TINY[@]}"
expect_error "a FIFO as the tokenizer" "not a regular file" timeout 10 $BIN "${DATA[@]}" "${TINY[@]}" --tokenizer "$TMP/fifo"
expect_error "a directory as a shard" "not a regular file" $BIN -i "$TMP" "${TINY[@]}"
for flag in --layers --heads --channels --max-seq-len --vocab; do
    expect_error "$flag 0" "$flag must be at least 1" $BIN "${DATA[@]}" "${TINY[@]}" $flag 0
done
expect_error "-o ''" "-o needs a directory name" $BIN "${DATA[@]}" "${TINY[@]}" -o ''
# a run directory just short of the system's path limit (4096): the directory fits, the files in it do not; they
# must fail to open rather than be written under a silently shortened name
long=$TMP
while [ ${#long} -lt 3860 ]; do long=$long/$(printf 'd%.0s' $(seq 200)); done
long=$long/$(printf 'e%.0s' $(seq $((4090 - ${#long} - 1))))
expect_error "a run directory whose files' paths are too long" "File name too long" $BIN "${DATA[@]}" "${TINY[@]}" -x 1 -o "$long"
if [ -z "$(ls -A "$long" 2> /dev/null)" ]; then ok "... and nothing was written under a shortened name"
else bad "long paths" "written into the directory: $(ls -A "$long" | tr '\n' ' ')"; fi
expect_error "a step count past int range" "out of range" $BIN "${DATA[@]}" "${TINY[@]}" -x 2147483648
# one epoch of more than 2^31 steps (two sparse shards of 2^31 - 1 tokens, -b 1 -t 1) must not wrap around
for k in 1 2; do
    python3 -c "import struct,sys; sys.stdout.buffer.write(struct.pack('<256i', 20240520, 1, 2**31 - 1, 256, *([0] * 252)))" > "$TMP/huge_$k.bin"
    truncate -s $((1024 + 2 * (2**31 - 1))) "$TMP/huge_$k.bin"
done
expect_error "an epoch past int range (-x -1)" "one epoch is 4294967294 steps: give -x" \
    $BIN -i "$TMP/huge_*.bin" -b 1 -t 1 --layers 1 --channels 8 --heads 1 -v 0 -s 0
rm -f "$TMP"/huge_*.bin
python3 - "$TMP/tok_eot.bin" <<'EOF'
import struct, sys
with open(sys.argv[1], "wb") as f:  # a valid tokenizer of 300 tokens whose eot (299) is past a 256-token model
    f.write(struct.pack("<256i", 20240328, 2, 300, 299, *([0] * 252)))
    for i in range(300):
        f.write(bytes([1, i % 256]))
EOF
expect_error "a tokenizer whose eot is outside the model's vocabulary, before training" "eot token 299 is outside" \
    $BIN "${DATA[@]}" "${TINY[@]}" -x 5 -s 5 --tokenizer "$TMP/tok_eot.bin"
python3 -c "
import struct; b = bytearray(open('$TMP/ok_train.bin', 'rb').read()); struct.pack_into('<i', b, 4 * 7, 9)
open('$TMP/shard_field.bin', 'wb').write(b)"
expect_error "a shard with a reserved header field set" "unknown header field 7" $BIN -i "$TMP/shard_field.bin" "${TINY[@]}"

# ---- --print-tensors: the tensor table as JSON, from the flags or a checkpoint, without training
# the layouts of the registry, in header[8] order, as -h lists them ("--norm <layout>    pre|post|...")
LAYOUT_NAMES=$($BIN -h 2>&1 | sed -nE 's/^ *--norm <layout> +([a-z|-]+) .*/\1/p' | tr '|' ' ')
[ -n "$LAYOUT_NAMES" ] || bad "the layouts from -h" "no --norm line in $BIN -h"
for layout in $LAYOUT_NAMES; do
    # 4 layers: every layout's default setting is valid there (mix: floor(0.25 * 4) = 1 Post-LN block)
    $BIN "${DATA[@]}" "${TINY[@]}" --layers 4 --norm $layout --print-tensors > "$TMP/tensors.json" 2> "$TMP/err"
    if $PY - "$TMP/tensors.json" $layout <<'EOF'
import json, sys
t = json.load(open(sys.argv[1]))
names = [x["name"] for x in t["tensors"]]
size = lambda x: eval("*".join(map(str, x["shape"])))
assert t["layout"] == sys.argv[2] and names[:2] == ["wte", "wpe"], names
assert all(a["offset"] + size(a) == b["offset"] for a, b in zip(t["tensors"], t["tensors"][1:]))
assert t["tensors"][-1]["offset"] + size(t["tensors"][-1]) == t["num_parameters"]
assert len(set(names)) == len(names), names
EOF
    then ok "--print-tensors ($layout): contiguous offsets, each tensor once"; else bad "--print-tensors ($layout)" "$(cat "$TMP/err")"; fi
done
# docs/file_formats.md's table of the checkpoint order is the program's, layout by layout: each row rendered
# from --print-tensors at a shape whose every dimension is a different number (L=5, C=16, 3C=48, 4C=64, maxT=40,
# Vp=256, hs = C/NH = 8; and the constants 1, hybrid-star's ln1 of block 0, 2 and 4, hc's streams and columns), and a
# row for every layout, its [8] the layout's place in the registry
if $PY - $BIN docs/file_formats.md $LAYOUT_NAMES > "$TMP/readme_table" 2>&1 <<'EOF'
import json, re, subprocess, sys
program, readme, layouts = sys.argv[1], sys.argv[2], sys.argv[3:]
shape = ["--layers", "5", "--channels", "16", "--heads", "2", "--max-seq-len", "40", "--vocab", "200"]
symbol = {5: "L", 16: "C", 48: "3C", 64: "4C", 40: "maxT", 256: "Vp", 8: "hs", 1: "1", 2: "2", 4: "4"}
assert len(set(symbol.values())) == len(symbol)
rows = {m.group(2): (int(m.group(1)), m.group(3).strip()) for m in
        re.finditer(r"^ *\| (\d+) \| `([\w-]+)` \| (`.*`) \|$", open(readme).read(), re.M)}
bad = []
for i, layout in enumerate(layouts):
    t = json.loads(subprocess.run([program, *shape, "--norm", layout, "--print-tensors"], capture_output=True,
                                  text=True, check=True).stdout)
    want = " ".join("`%s (%s)`" % (x["name"], ",".join(symbol[d] for d in x["shape"])) for x in t["tensors"])
    if rows.get(layout) != (i, want):
        bad.append("%s: docs/file_formats.md has %s, the program %s" % (layout, rows.get(layout), (i, want)))
extra = set(rows) - set(layouts)
if extra: bad.append("docs/file_formats.md rows for layouts the program does not have: %s" % sorted(extra))
print("\n".join(bad) or "%d rows" % len(layouts))
sys.exit(1 if bad else 0)
EOF
then ok "docs/file_formats.md's tensor table is the program's ($(cat "$TMP/readme_table"))"; else bad "docs/file_formats.md's tensor table" "$(cat "$TMP/readme_table")"; fi
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
# main.log is one record: the resumed run's log equals the uninterrupted run's line for line (timings aside), with
# the terminal's step numbers
if diff <(cut -d' ' -f1-4 "$TMP/a/main.log") <(cut -d' ' -f1-4 "$TMP/b/main.log") > /dev/null &&
   [ "$(grep -c trl "$TMP/a/main.log")" -eq 6 ]; then
    ok "main.log after a resume is the uninterrupted run's, one line a step"
else bad "main.log after a resume" "$(diff <(cut -d' ' -f1-4 "$TMP/a/main.log") <(cut -d' ' -f1-4 "$TMP/b/main.log") | head -n 4)"; fi
if [ "$(grep -m1 trl "$TMP/a/main.log" | cut -d' ' -f1)" = "s:1" ] &&
   grep -q "^step     6/6 | loss $(grep '^s:6 trl' "$TMP/a/main.log" | sed 's/.*trl:\([0-9.]*\).*/\1/')" "$TMP/resume.out"; then
    ok "main.log numbers the steps as the terminal does (s:1 is 'step 1/N')"
else bad "main.log step numbers" "$(head -n 2 "$TMP/a/main.log")"; fi
# a resume with validation logs each validation once, however often it resumes: checkpoints at 2, 4, 6; resume from
# 2, then from 4 (the later markers removed as a crash would have left them), against the run in one go
RUNV=("${RUN[@]}" -v 2 -m 2 -n 2)
$BIN "${RUNV[@]}" -o "$TMP/v" > /dev/null 2>&1 && $BIN "${RUNV[@]}" -o "$TMP/vw" > /dev/null 2>&1
rm -f "$TMP/v/DONE_00000004" "$TMP/v/DONE_00000006"
$BIN "${RUNV[@]}" -o "$TMP/v" -y 1 > /dev/null 2>&1
rm -f "$TMP/v/DONE_00000006"
$BIN "${RUNV[@]}" -o "$TMP/v" -y 1 > /dev/null 2>&1
if diff <(cut -d' ' -f1-2 "$TMP/vw/main.log") <(cut -d' ' -f1-2 "$TMP/v/main.log") > /dev/null &&
   [ "$(grep -c tel "$TMP/v/main.log")" -eq 4 ]; then
    ok "two resumes: one validation line per validation, no duplicates"
else bad "validation lines after resumes" "$(grep -c tel "$TMP/v/main.log") tel lines: $(tr '\n' ' ' < "$TMP/v/main.log")"; fi
# -a 1 (one batch, over and over): the checkpoint records that batch, so a resume trains on it too
RUNA=("${RUN[@]}" -a 1)
$BIN "${RUNA[@]}" -o "$TMP/oa" > /dev/null 2>&1
$BIN "${RUNA[@]}" -x 3 -o "$TMP/ob" > /dev/null 2>&1 && $BIN "${RUNA[@]}" -o "$TMP/ob" -y 1 > /dev/null 2>&1
if cmp -s "$TMP/oa/model_00000006.bin" "$TMP/ob/model_00000006.bin"; then ok "-a 1: resume is bit-exact"
else bad "-a 1 resume" "the resumed model differs from the uninterrupted one"; fi
cp -r "$TMP/b" "$TMP/c"; rm -f "$TMP/c/DONE_00000006" "$TMP/c/model_00000006.bin"
head -c 3000 "$TMP/c/state_00000003.bin" > "$TMP/c/s" && mv "$TMP/c/s" "$TMP/c/state_00000003.bin"
expect_error "truncated optimizer state on resume" "not the file that" $BIN "${RUN[@]}" -o "$TMP/c" -y 1
expect_error "resume with another batch shape" "same batch shape" $BIN "${RUN[@]}" -b 1 -d 32 -x 8 -o "$TMP/b" -y 1
$BIN "${RUN[@]}" -o "$TMP/b" -y 1 > "$TMP/nothing.out" 2>&1
if [ $? -eq 0 ] && grep -q "^nothing to do: the latest checkpoint in .* is at step 6 and -x is 6" "$TMP/nothing.out"; then
    ok "-y 1 with -x at the checkpoint's step says 'nothing to do'"
else bad "-y 1 with nothing to do" "$(cat "$TMP/nothing.out" | head -n 3)"; fi
$BIN "${RUN[@]}" -x 8 -o "$TMP/b" -y 1 > "$TMP/extend.out" 2>&1
if grep -q "^note: the run had -x 6, now 8: the learning-rate schedule is recomputed" "$TMP/extend.out" &&
   [ -f "$TMP/b/DONE_00000008" ]; then ok "raising -x extends a finished run, and says what it does to the schedule"
else bad "extending a run" "$(grep -E 'note|error' "$TMP/extend.out")"; fi

# an optimizer state with a reserved header field set (behind an empty marker, as older versions wrote: unchecked)
cp -r "$TMP/a" "$TMP/sf" && $BIN "${RUN[@]}" -x 3 -o "$TMP/sf" --start-over > /dev/null 2>&1
patch_int "$TMP/sf/state_00000003.bin" "$TMP/sf/s" 20 1 && mv "$TMP/sf/s" "$TMP/sf/state_00000003.bin" && : > "$TMP/sf/DONE_00000003"
expect_error "an optimizer state with a reserved header field set" "unknown header field 20" $BIN "${RUN[@]}" -o "$TMP/sf" -y 1

# ---- the run directory belongs to one run
mkdir -p "$TMP/fresh" && cp "$TMP/a/"* "$TMP/fresh/"
sum_before=$(cat "$TMP/fresh/model_00000006.bin" | md5sum)
expect_error "a fresh run into another run's -o" "holds the checkpoints of another run" $BIN "${RUN[@]}" -o "$TMP/fresh"
if [ "$(cat "$TMP/fresh/model_00000006.bin" | md5sum)" = "$sum_before" ]; then ok "... and the other run's checkpoint is untouched"
else bad "refused run" "it changed the other run's checkpoint"; fi
$BIN "${RUN[@]}" -x 2 -o "$TMP/fresh" --start-over > "$TMP/over.out" 2>&1
if grep -q "^--start-over: removed" "$TMP/over.out" && [ "$(ls "$TMP/fresh" | tr '\n' ' ')" = "DONE_00000002 main.log model_00000002.bin state_00000002.bin " ]; then
    ok "--start-over removes the previous run's files first (no stale markers)"
else bad "--start-over" "$(ls "$TMP/fresh" | tr '\n' ' ')"; fi
expect_error "--start-over with -y 1" "contradict" $BIN "${RUN[@]}" -o "$TMP/fresh" --start-over -y 1
# --start-over removes the previous run only once the new one starts: a new run that is refused keeps it
expect_error "--start-over with data that is refused" "truncated" $BIN "${RUN[@]}" -i "$TMP/trunc.bin" -o "$TMP/fresh" --start-over
if [ "$(ls "$TMP/fresh" | tr '\n' ' ')" = "DONE_00000002 main.log model_00000002.bin state_00000002.bin " ]; then
    ok "... and the previous run's files are still there"
else bad "a refused --start-over" "left $(ls -A "$TMP/fresh" | tr '\n' ' ')"; fi
# two trainers on one -o: the second stops at once, the first finishes. The first prints its run table once it holds
# the lock; it is stopped there (SIGSTOP), so the second meets a held lock however fast the machine (40 steps take
# 0.1 s on an idle one: waiting a fixed time let the first finish before the second started)
$BIN "${RUN[@]}" -x 1000 -o "$TMP/shared" > "$TMP/first.out" 2>&1 &
first=$!
for _ in $(seq 1000); do grep -q "^| run directory" "$TMP/first.out" && break; sleep 0.01; done
kill -STOP $first
expect_error "a second trainer on the same -o" "in use by another trainer" $BIN "${RUN[@]}" -x 1000 -o "$TMP/shared" -y 1
kill -CONT $first
if wait $first && [ -f "$TMP/shared/DONE_00001000" ] && ! ls "$TMP"/shared/*.tmp* > /dev/null 2>&1; then
    ok "... while the first finishes its run alone"
else bad "the first of two trainers" "$(tail -n 2 "$TMP/first.out")"; fi
# a model of one run with the state of another (what sharing an -o could leave): the marker tells
$BIN "${RUN[@]}" -x 3 -n 3 -o "$TMP/m1" > /dev/null 2>&1
$BIN "${RUN[@]}" -x 3 -n 3 -l 5e-3 -o "$TMP/m2" > /dev/null 2>&1
cp "$TMP/m2/state_00000003.bin" "$TMP/m1/state_00000003.bin"
expect_error "resume a model of one run with the state of another" "not the file that .*DONE_00000003 completes" \
    $BIN "${RUN[@]}" -o "$TMP/m1" -y 1
printf 'junk' > "$TMP/m2/DONE_00000003"
expect_error "a corrupt checkpoint marker" "not a checkpoint marker" $BIN "${RUN[@]}" -o "$TMP/m2" -y 1
# files a killed run left half-written go when the next run takes the directory
touch "$TMP/m2/model_00000009.bin.tmp.12345"
$BIN "${RUN[@]}" -x 2 -o "$TMP/m2" --start-over > /dev/null 2>&1
if ! ls "$TMP"/m2/*.tmp* > /dev/null 2>&1; then ok "a killed run's temporary files are removed by the next run"
else bad "stale temporary files" "$(ls "$TMP/m2")"; fi

# ---- write failures: one error line, the partial file removed, the last good checkpoint untouched
$BIN "${RUN[@]}" -x 2 -o "$TMP/w" > /dev/null 2>&1
sum_before=$(cat "$TMP/w/model_00000002.bin" "$TMP/w/state_00000002.bin" | md5sum)
# beyond a file-size limit (ulimit -f, 256 KiB: the 260 KiB model file cannot be written): EFBIG, not SIGXFSZ
expect_error "a file-size limit (ulimit -f)" "cannot write .*model_00000004.bin.*File too large" \
    bash -c "ulimit -f 256; exec $BIN ${RUN[*]} -x 4 -o $TMP/w -y 1"
if ! ls "$TMP"/w/*.tmp* > /dev/null 2>&1 && [ ! -e "$TMP/w/DONE_00000004" ] &&
   [ "$(cat "$TMP/w/model_00000002.bin" "$TMP/w/state_00000002.bin" | md5sum)" = "$sum_before" ]; then
    ok "... no partial file, no marker, the last checkpoint untouched"
else bad "after a size limit" "$(ls "$TMP/w" | tr '\n' ' ')"; fi
# a full disk: fwrite fails with ENOSPC once 100 KiB went into a temporary file (a preloaded stand-in for the disk)
cat > "$TMP/enospc.c" <<'EOF'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
static size_t written;
size_t fwrite(const void* p, size_t size, size_t n, FILE* f) {
    static size_t (*real)(const void*, size_t, size_t, FILE*);
    if (!real) real = (size_t (*)(const void*, size_t, size_t, FILE*))dlsym(RTLD_NEXT, "fwrite");
    if (f != stdout && f != stderr && (written += size * n) > 100 * 1024) { errno = ENOSPC; return 0; }
    return real(p, size, n, f);
}
EOF
if gcc -shared -fPIC -o "$TMP/enospc.so" "$TMP/enospc.c" -ldl 2> /dev/null; then
    expect_error "a full disk" "cannot write .*No space left on device" \
        env LD_PRELOAD="$TMP/enospc.so" $BIN "${RUN[@]}" -x 4 -o "$TMP/w" -y 1
    if ! ls "$TMP"/w/*.tmp* > /dev/null 2>&1 && [ ! -e "$TMP/w/DONE_00000004" ] &&
       [ "$(cat "$TMP/w/model_00000002.bin" "$TMP/w/state_00000002.bin" | md5sum)" = "$sum_before" ]; then
        ok "... no partial file, no marker, the last checkpoint untouched"
    else bad "after a full disk" "$(ls "$TMP/w" | tr '\n' ' ')"; fi
    if $BIN "${RUN[@]}" -x 4 -o "$TMP/w" -y 1 > /dev/null 2>&1 && [ -e "$TMP/w/DONE_00000004" ]; then
        ok "... and the retry, with room again, succeeds"
    else bad "retry after a full disk" "failed"; fi
else bad "a full disk" "could not build the ENOSPC stand-in"; fi

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
if [ "$sum_before" = "$sum_after" ] && [ "$(ls "$TMP"/g/DONE_* | wc -l)" -eq 2 ] && ! ls "$TMP"/g/*.tmp* > /dev/null 2>&1; then
    ok "the failing run left the good checkpoint intact and wrote no new one"
else bad "checkpoint kept" "checkpoint changed or a diverged checkpoint was written: $(ls "$TMP/g")"; fi
if $BIN "${RUN[@]}" -x 6 -o "$TMP/g" -y 1 > /dev/null 2>&1; then ok "training resumes from the kept checkpoint"
else bad "resume after divergence" "failed"; fi

# ---- end to end: each layout learns the KJV text. The threshold 2.9 nats is far below ln(256) = 5.55 (uniform
# bytes) and below the byte-unigram entropy of the text (3.14 nats), so the model must use context to pass.
for norm in pre post siamese hybrid siamese-hybrid hc; do
    out=()
    [ $norm = siamese ] && out=(-o "$TMP/e2e_ckpt")
    $BIN -i $KJV_TRAIN -j $KJV_VAL --norm $norm --layers 2 --channels 64 --heads 4 -b 8 -t 64 -l 2e-3 -u 10 \
        -x 200 -v 200 -m 10 -s 200 -g 48 "${out[@]}" > "$TMP/e2e_$norm.out" 2>&1
    first=$(grep -m1 "val loss" "$TMP/e2e_$norm.out" | awk '{print $3}')
    last=$(grep "val loss" "$TMP/e2e_$norm.out" | tail -n 1 | awk '{print $3}')
    if [ -n "$last" ] && awk -v f="$first" -v l="$last" 'BEGIN { exit !(f > 5.3 && l < 2.9) }'; then
        ok "end to end, $norm: val loss $first -> $last"
    else bad "end to end, $norm" "val loss $first -> $last"; fi
done
if grep -q "^generating:" "$TMP/e2e_siamese.out" && [ "$(sed -n '/^---$/,/^---$/p' "$TMP/e2e_siamese.out" | wc -c)" -gt 40 ]; then
    ok "a text sample is printed"
else bad "sample" "no sample text"; fi

# ---- sampling from a checkpoint: -x 0 --prompt TEXT -g N, no data needed
SAMPLE=(-e "$TMP/e2e_ckpt/model_00000200.bin" -x 0 -i "$TMP/none_*.bin" --tokenizer data/kjv/kjv_tokenizer.bin -t 64)
if [ -f "$TMP/e2e_ckpt/model_00000200.bin" ]; then
    $BIN "${SAMPLE[@]}" --prompt "In the beginning" -g 200 > "$TMP/sample.out" 2> "$TMP/sample.err"
    if [ $? -eq 0 ] && [ "$(head -c 16 "$TMP/sample.out")" = "In the beginning" ] && [ "$(wc -c < "$TMP/sample.out")" -ge 217 ]; then
        ok "-x 0 --prompt: the prompt and 200 tokens after it (beyond -t 64: a sliding window), without data"
    else bad "sampling from a checkpoint" "$(head -c 300 "$TMP/sample.out") $(cat "$TMP/sample.err")"; fi
    $BIN "${SAMPLE[@]}" --prompt "And God said" -g 60 --temperature 0 > "$TMP/greedy1.out" 2>&1
    $BIN "${SAMPLE[@]}" --prompt "And God said" -g 60 --temperature 0 --seed 7 > "$TMP/greedy2.out" 2>&1
    $BIN "${SAMPLE[@]}" --prompt "And God said" -g 60 --top-k 1 --seed 9 > "$TMP/top1.out" 2>&1
    $BIN "${SAMPLE[@]}" --prompt "And God said" -g 60 --seed 9 > "$TMP/free.out" 2>&1
    if cmp -s "$TMP/greedy1.out" "$TMP/greedy2.out" && cmp -s "$TMP/greedy1.out" "$TMP/top1.out" &&
       ! cmp -s "$TMP/greedy1.out" "$TMP/free.out"; then
        ok "--temperature 0 and --top-k 1 both take the most likely token (whatever the seed); sampling does not"
    else bad "--temperature / --top-k" "$(head -c 120 "$TMP/greedy1.out") | $(head -c 120 "$TMP/top1.out")"; fi
    # a temperature near 0 is the most likely token too (p^(1/T) rounded every weight to 0: token 0, '\x00', each
    # time); 1e-320 is a number (a denormal), not a parse error
    for cold in "--top-k 1 --temperature 0.001" "--temperature 1e-6" "--temperature 1e-320"; do
        $BIN "${SAMPLE[@]}" --prompt "And God said" -g 60 $cold --seed 11 > "$TMP/cold.out" 2>&1
        if cmp -s "$TMP/greedy1.out" "$TMP/cold.out"; then ok "$cold: the most likely token, as --temperature 0"
        else bad "$cold" "$(head -c 120 "$TMP/cold.out") against $(head -c 120 "$TMP/greedy1.out")"; fi
    done
    # -y 1 -o RUN: the run's latest complete checkpoint (step 200), not a new random model
    $BIN -x 0 -y 1 -o "$TMP/e2e_ckpt" -i "$TMP/none_*.bin" --tokenizer data/kjv/kjv_tokenizer.bin -t 64 \
        --prompt "And God said" -g 60 --temperature 0 > "$TMP/run_sample.out" 2> "$TMP/run_sample.err"
    if cmp -s "$TMP/greedy1.out" "$TMP/run_sample.out" && grep -q "^sampling from .*/model_00000200.bin" "$TMP/run_sample.err"
    then ok "-x 0 --prompt -y 1 -o RUN samples from the run's latest checkpoint ($(cat "$TMP/run_sample.err"))"
    else bad "-x 0 -y 1 -o RUN" "$(head -c 120 "$TMP/run_sample.out") $(cat "$TMP/run_sample.err")"; fi
    expect_error "-x 0 --prompt with -o but no -y 1" "only samples and writes nothing: give -y 1" \
        $BIN -x 0 -o "$TMP/e2e_ckpt" -i "$TMP/none_*.bin" --tokenizer data/kjv/kjv_tokenizer.bin --prompt "And"
    expect_error "-x 0 --prompt -y 1 on a missing -o" "-y 1: no complete checkpoint" \
        $BIN -x 0 -y 1 -o "$TMP/missing/run" -i "$TMP/none_*.bin" --tokenizer data/kjv/kjv_tokenizer.bin --prompt "And"
    if [ ! -e "$TMP/missing" ]; then ok "... and creates nothing"; else bad "sampling a missing run" "it created $TMP/missing"; fi
else bad "sampling from a checkpoint" "the end-to-end run left no checkpoint"; fi
# a fresh random model samples bytes of every kind: none reaches the terminal raw but newline and tab
$BIN --layers 1 --channels 16 --heads 1 -x 0 -i "$TMP/none_*.bin" --vocab 256 --tokenizer data/kjv/kjv_tokenizer.bin \
    --prompt "x" -g 2000 -t 32 --seed 3 > "$TMP/raw.out" 2>&1
if $PY - "$TMP/raw.out" <<'EOF'
import sys
b = open(sys.argv[1], "rb").read()
assert len(b) > 2000 and b"\\x" in b, len(b)  # it did sample non-printable bytes, and escaped them
assert all(c >= 32 or c in (9, 10) for c in b) and 127 not in b, "a raw control byte"
b.decode("utf-8")  # every byte of 128 or more that went out raw is part of a valid character
EOF
then ok "non-printable and invalid UTF-8 bytes of a sample are printed escaped"; else bad "escaped samples" "$(head -c 200 "$TMP/raw.out")"; fi
$PY - "$TMP/tok60.bin" <<'EOF'
import struct, sys
with open(sys.argv[1], "wb") as f:  # 60 one-byte tokens '0'..'k', eot 0
    f.write(struct.pack("<256i", 20240328, 2, 60, 0, *([0] * 252)))
    for i in range(60):
        f.write(bytes([1, 48 + i]))
EOF
expect_error "a prompt byte the vocabulary lacks" "is no token of the vocabulary" \
    $BIN "${DATA[@]}" "${TINY[@]}" -x 0 --vocab 60 --tokenizer "$TMP/tok60.bin" --prompt "~"
expect_error "sampling without a tokenizer" "no tokenizer beside" $BIN -i "$TMP/none_*.bin" --vocab 256 -x 0 --prompt "a"

# ---- tests/bench_cpu.py (make bench-cpu): a table of medians needs timed steps (it printed a row from none), and llm.c
# stops before its step 20 (it samples there); the flags are checked before anything is built or run
expect_error "tests/bench_cpu.py --steps 0: no timed step" "steps must be a whole number of timed steps from 1 to 19" \
    $PY tests/bench_cpu.py --steps 0
expect_error "tests/bench_cpu.py --steps 20: llm.c samples at step 20" "from 1 to 19 with llm.c" \
    $PY tests/bench_cpu.py --steps 20
expect_error "tests/bench_cpu.py --parts: a part it has not" "--parts takes a list of llmc, d12, science and gemm" \
    $PY tests/bench_cpu.py --parts llmc,gpu

# ---- tools/plot_runs.py: the runs side by side in one picture
PLOT_PY=${TORCH_PY:-/usr/bin/python3}  # Debian's Python, which has matplotlib (make test installs it)
if $PLOT_PY -c "import matplotlib" 2> /dev/null; then
    if $PLOT_PY tools/plot_runs.py "$TMP/a" "$TMP/v" -o "$TMP/runs.png" --smooth 2 > "$TMP/plot.out" 2>&1 &&
       [ "$(head -c 8 "$TMP/runs.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]; then
        ok "tools/plot_runs.py draws two runs into one PNG"
    else bad "tools/plot_runs.py" "$(cat "$TMP/plot.out")"; fi
    $PLOT_PY tools/plot_runs.py "$TMP/emptydir" -o "$TMP/none.png" > /dev/null 2> "$TMP/plot.err"
    if [ $? -ne 0 ] && grep -q "^error: no main.log" "$TMP/plot.err"; then ok "tools/plot_runs.py: a directory without a log is one error"
    else bad "tools/plot_runs.py without a log" "$(cat "$TMP/plot.err")"; fi
    # what it cannot read or write is one error line each (they were tracebacks), and leaves no file behind
    mkdir -p "$TMP/plots" "$TMP/binary" "$TMP/unreadable"
    $PY -c "import sys; sys.stdout.buffer.write(bytes(range(256)) * 8)" > "$TMP/binary/main.log"
    cp "$TMP/a/main.log" "$TMP/unreadable/main.log" && chmod 000 "$TMP/unreadable/main.log"
    # unreadable: tests run as root, whom no file mode stops (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH); the tool then
    # runs without those two (setpriv --bounding-set), still root, so that the log's mode 000 is what stops it
    no_override=()
    [ "$(id -u)" = 0 ] && no_override=(setpriv --bounding-set=-dac_override,-dac_read_search)
    expect_error "tools/plot_runs.py: a binary file as the log" "is not a main.log \(not text\)" \
        $PLOT_PY tools/plot_runs.py "$TMP/binary" -o "$TMP/plots/runs.png"
    expect_error "tools/plot_runs.py: an unreadable log" "cannot read .*Permission denied" \
        "${no_override[@]}" $PLOT_PY tools/plot_runs.py "$TMP/unreadable" -o "$TMP/plots/runs.png"
    expect_error "tools/plot_runs.py: -o in a missing directory" "there is no directory" \
        $PLOT_PY tools/plot_runs.py "$TMP/a" -o "$TMP/nodir/runs.png"
    expect_error "tools/plot_runs.py: -o naming a directory" "is a directory" \
        $PLOT_PY tools/plot_runs.py "$TMP/a" -o "$TMP/plots"
    expect_error "tools/plot_runs.py: an unknown image suffix" "unknown image suffix '.xyz' .*png" \
        $PLOT_PY tools/plot_runs.py "$TMP/a" -o "$TMP/plots/runs.xyz"
    expect_error "tools/plot_runs.py: a file-size limit (ulimit -f 16 KiB)" "cannot write .*File too large" \
        bash -c "ulimit -f 16; exec $PLOT_PY tools/plot_runs.py '$TMP/a' -o '$TMP/plots/runs.png'"
    expect_error "tools/plot_runs.py: a usage error" "argument --smooth: invalid int value" \
        $PLOT_PY tools/plot_runs.py "$TMP/a" -o "$TMP/plots/runs.png" --smooth many
    # a run without a loss beside one with: an error that names it, not a picture without it
    mkdir -p "$TMP/nolosses" && : > "$TMP/nolosses/main.log"
    expect_error "tools/plot_runs.py: an empty log beside a full one" "nolosses/main.log' holds no losses yet" \
        $PLOT_PY tools/plot_runs.py "$TMP/a" "$TMP/nolosses" -o "$TMP/plots/runs.png"
    # ^C while it works: a KeyboardInterrupt where the tool imports matplotlib (as a ^C there would raise it)
    expect_error "tools/plot_runs.py: interrupted" "interrupted" $PLOT_PY -c "
import runpy, sys
class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == 'matplotlib':
            raise KeyboardInterrupt
sys.meta_path.insert(0, Interrupt())
sys.argv = ['tools/plot_runs.py', '$TMP/a', '-o', '$TMP/plots/runs.png']
runpy.run_path('tools/plot_runs.py', run_name='__main__')"
    if [ -z "$(ls -A "$TMP/plots")" ] && [ ! -e "$TMP/nodir" ] && [ ! -e "$TMP/plots.png" ]; then ok "... and none of them wrote a file"
    else bad "tools/plot_runs.py's errors" "they left $(ls -A "$TMP/plots" | tr '\n' ' ')"; fi
else bad "tools/plot_runs.py" "no matplotlib for $PLOT_PY (make test installs python3-matplotlib)"; fi

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
