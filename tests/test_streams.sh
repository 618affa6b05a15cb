#!/usr/bin/env bash
# tools/streams.py (the picture of the streams) on toy models, in seconds: its losses against the C++ trainer's, what
# the method says the streams do at initialization, and its errors (one line, exit 1, no file written or left).
# Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
PY=${TORCH_PY:-/usr/bin/python3}
pass=0 fail=0
ok() { echo "ok    $1"; pass=$((pass + 1)); }
bad() { echo "FAIL  $1"; [ -n "${2:-}" ] && echo "$2" | sed 's/^/      /'; fail=$((fail + 1)); }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir "$TMP/tmpdir"
export TMPDIR=$TMP/tmpdir  # the tool's temporary files: none may be left
SHARD=data/kjv/kjv_val.bin
[ -x ./reference_cpu ] || make -s reference_cpu > /dev/null
[ -f "$SHARD" ] || make -s data > /dev/null

# Toy models: 4 blocks of 32 channels, 20 steps at make train's learning rate. The batch of the tool: 4 x 32 tokens.
SHAPE=(--layers 4 --channels 32 --heads 4 --max-seq-len 32)
BATCH=(-b 4 -t 32)
for n in pre post siamese; do
    OMP_NUM_THREADS=1 ./reference_cpu --norm $n "${SHAPE[@]}" "${BATCH[@]}" -l 2e-3 -x 20 -v 0 -s 0 -o "$TMP/$n" \
        > "$TMP/$n.log" 2>&1 || bad "training the toy $n model" "$(tail -n 3 "$TMP/$n.log")"
done

# ---- the tool on them, with --init
if $PY tools/streams.py "$TMP"/{pre,post,siamese}/model_00000020.bin --init "${BATCH[@]}" -o "$TMP/s.png" \
    --csv "$TMP/s.csv" > "$TMP/out.txt" 2> "$TMP/err.txt" && [ ! -s "$TMP/err.txt" ] \
    && head -c 8 "$TMP/s.png" | od -An -c | grep -q 'P   N   G'; then
    ok "tools/streams.py draws the streams of three layouts, trained and at initialization"
else
    bad "tools/streams.py on the toy models" "$(tail -n 5 "$TMP/out.txt" "$TMP/err.txt")"
fi

touch "$TMP/touched"  # the files it writes get the permissions of any new file (the umask's), not a temporary's 0600
[ "$(stat -c %a "$TMP/s.png" "$TMP/s.csv" | sort -u)" = "$(stat -c %a "$TMP/touched")" ] \
    && ok "the plot and the CSV have a new file's permissions ($(stat -c %a "$TMP/touched"))" \
    || bad "the permissions of the plot and the CSV" "$(stat -c '%a %n' "$TMP/s.png" "$TMP/s.csv" "$TMP/touched")"

# The C++ trainer's loss on the same batch: its validation with -m 1 reads the first B*T+1 tokens of the shard, of
# the checkpoint (-e) and of a new model of the same shape and seed (what --init must be: the trainer's own init).
for n in pre post siamese; do
    val=(-x 0 -v 1 -m 1 "${BATCH[@]}" -s 0)
    trained=$(./reference_cpu -e "$TMP/$n/model_00000020.bin" "${val[@]}" 2>&1 | sed -n 's/^val loss //p')
    init=$(./reference_cpu --norm $n "${SHAPE[@]}" "${val[@]}" 2>&1 | sed -n 's/^val loss //p')
    echo "$n ${trained:-none} ${init:-none}" >> "$TMP/cpp_losses.txt"
done

# The numbers. Loss bound: both sides float32, the same sums in other orders, so ~1e-7 relative; 1e-5 as in
# tests/torch_check.py (a wrong batch, model or init changes the loss by 1e-3 or more). At initialization (GPT-2's:
# LayerNorm gains 1, the residual projections N(0, 0.02/sqrt(2L))): each sub-layer adds an update nearly
# uncorrelated with the stream, so Pre-Norm's x and SiameseNorm's y grow at every sub-layer; the LayerNorms keep
# Post-Norm's x and SiameseNorm's x at RMS 1 after sub-layer 0 (x = LN_x(x) + z/c_l: 1 within +-10%, while the
# embedding's h0 has RMS ~0.03); at the head the gradient of every stream is non-zero. And what holds exactly: each
# sub-layer's relative update against the stream RMS before and after it.
if $PY - "$TMP/s.csv" "$TMP/cpp_losses.txt" > "$TMP/check.txt" 2>&1 <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
series = {}
for r in rows:
    series.setdefault((r["layout"], r["state"], r["stream"]), []).append(r)
cpp = {n: (float(t), float(i)) for n, t, i in (line.split() for line in open(sys.argv[2]))}
problems = []
short = lambda values: "[" + " ".join("%.4g" % v for v in values) + "]"
def want(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    problems.extend([] if ok else [what])
for n, (trained, init) in cpp.items():
    for state, ref in (("trained", trained), ("at initialization", init)):
        mine = float(series[(n, state, "x")][0]["loss"])
        want(abs(mine - ref) <= 1e-5 * ref, f"{n} {state}: loss {mine:.6f}, the C++ trainer's {ref:.6f}")
want(sorted(series) == sorted((n, s, x) for n in ("pre", "post", "siamese") for s in ("trained", "at initialization")
                              for x in (("x", "y") if n == "siamese" else ("x",))), "the streams of each layout")
want(all(len(v) == 9 and [int(r["s"]) for r in v] == list(range(9)) for v in series.values()), "9 rows (s = 0..2L)")
for name in (("pre", "x"), ("siamese", "y")):
    rms = [float(r["rms"]) for r in series[(name[0], "at initialization", name[1])]]
    want(all(a < b for a, b in zip(rms[::2], rms[2::2])), f"at init {name[0]}'s {name[1]} grows block by block: {short(rms)}")
    for state in ("at initialization", "trained"):  # y' = y + z: |y'| - |y| <= |z| <= |y'| + |y|, |z| = update |y|
        v = series[(name[0], state, name[1])]
        r, z = [float(a["rms"]) for a in v], [float(a["update"]) * float(a["rms"]) for a in v[:-1]]
        want(all(abs(r[s + 1] - r[s]) <= z[s] * (1 + 1e-4) and z[s] <= (r[s + 1] + r[s]) * (1 + 1e-4)
                 for s in range(len(z))), f"{state}: {name[0]}'s {name[1]} updates within the triangle inequality")
# the same z goes to both SiameseNorm streams: |z / c_l| / |xh| on X, |z| / |y| on Y; at init (gains 1) xh = LN_x(x)
# has RMS 1 - 1e-5 where x has RMS ~1 (s >= 1), so update_x * c_l = update_y * |y| to the CSV's 6 digits
x, y = series[("siamese", "at initialization", "x")], series[("siamese", "at initialization", "y")]
ratios = [float(x[s]["update"]) * (2 * (s // 2 + 1)) ** 0.5 / (float(y[s]["update"]) * float(y[s]["rms"]))
          for s in range(1, 8)]
want(all(abs(q - 1) < 1e-3 for q in ratios), f"siamese: X's update is Y's z / c_l, c_l = sqrt(2(l+1)): {short(ratios)}")
for name in (("post", "x"), ("siamese", "x")):
    rms = [float(r["rms"]) for r in series[(name[0], "at initialization", name[1])]]
    want(rms[0] < 0.1 and all(0.9 < v < 1.1 for v in rms[1:]), f"at init {name[0]}'s {name[1]} is h0, then ~1: {short(rms)}")
want(all(float(v[-1]["grad_rms"]) > 0 for v in series.values()), "a gradient reaches every stream at the head")
want(all((r["update"] == "") == (r["sublayer"] == "head") for r in rows), "a relative update for every sub-layer")
sys.exit(1 if problems else 0)
EOF
then :; else  # a failed check is counted below; a crash of the checking script itself here
    grep -q '^FAIL' "$TMP/check.txt" || bad "checking the numbers of tools/streams.py" "$(tail -n 5 "$TMP/check.txt")"
fi
while read -r mark what; do  # each check of the numbers counts
    if [ "$mark" = ok ]; then ok "$what"; elif [ "$mark" = FAIL ]; then bad "$what"; fi
done < "$TMP/check.txt"

# ---- bad input: one error line, exit 1, nothing written, no temporary file left
mkdir "$TMP/errs"
printf 'not a checkpoint' > "$TMP/errs/corrupt.bin"
head -c 5000 "$TMP/pre/model_00000020.bin" > "$TMP/errs/truncated.bin"
mkdir "$TMP/errs/dir.png"
CKPT=$TMP/pre/model_00000020.bin
RUNNER=(tools/streams.py)
error_case() {  # NAME EXPECTED-TEXT ARGS...
    local name=$1 want=$2 before after rc
    shift 2
    before=$(ls -A "$TMP/errs" "$TMPDIR")
    $PY "${RUNNER[@]}" "$@" > "$TMP/e.out" 2> "$TMP/e.err"
    rc=$?
    after=$(ls -A "$TMP/errs" "$TMPDIR")
    if [ $rc -eq 1 ] && [ ! -s "$TMP/e.out" ] && [ "$(wc -l < "$TMP/e.err")" -eq 1 ] \
        && grep -q "^error: .*$want" "$TMP/e.err" && [ "$before" = "$after" ]; then
        ok "$name: $(cat "$TMP/e.err")"
    else
        bad "$name (exit $rc)" "$(cat "$TMP/e.out" "$TMP/e.err" | tail -n 4
                                  [ "$before" = "$after" ] || echo "files: $after")"
    fi
}
error_case "a missing checkpoint" "no checkpoint" "$TMP/errs/none.bin" -o "$TMP/errs/p.png"
error_case "a corrupt checkpoint" "corrupt.bin" "$TMP/errs/corrupt.bin" -o "$TMP/errs/p.png"
error_case "a truncated checkpoint" "truncated" "$TMP/errs/truncated.bin" -o "$TMP/errs/p.png"
error_case "-o in a missing directory" "no writable directory" "$CKPT" -o "$TMP/errs/none/p.png"
error_case "-o a directory" "is a directory" "$CKPT" -o "$TMP/errs/dir.png"
error_case "-o not an image" "must end in" "$CKPT" -o "$TMP/errs/p.txt"
error_case "-t beyond the model's maxT" "maximum sequence length" "$CKPT" -t 64 -o "$TMP/errs/p.png"
error_case "-b 0" "at least 1" "$CKPT" -b 0 -o "$TMP/errs/p.png"
error_case "a missing shard" "no token shard" "$CKPT" -t 32 --val "$TMP/errs/none.bin" -o "$TMP/errs/p.png"
error_case "an unknown flag" "unrecognized" "$CKPT" --bogus -o "$TMP/errs/p.png"
# ^C while it works: a KeyboardInterrupt where the tool imports torch (as a ^C there would raise it)
RUNNER=(-c "
import runpy, sys
class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == 'torch':
            raise KeyboardInterrupt
sys.meta_path.insert(0, Interrupt())
sys.argv = ['tools/streams.py'] + sys.argv[1:]
runpy.run_path('tools/streams.py', run_name='__main__')")
error_case "interrupted (^C)" "interrupted" "$CKPT" --init -t 32 -o "$TMP/errs/p.png" --csv "$TMP/errs/p.csv"
RUNNER=(tools/streams.py)

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
