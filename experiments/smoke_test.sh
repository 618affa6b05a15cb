#!/usr/bin/env bash
# Smoke test of the experiment tooling (docs/experiments.md): each script on a minimal setting (2-layer models,
# a few steps, in a temporary folder), checking that its CSV, PNG and table appear with sane content, that a
# diverging run (lr 1e30) is recorded as "diverged" without failing the script, and that a second run of a script
# reuses its cached runs; the spike definition on made-up curves; docs/check_boundary_backward.py (and that it fails
# a planted mistake). Builds experiments/depth_probe with make when missing. Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
PY=/usr/bin/python3
[ -x $PY ] || PY=python3
export OMP_NUM_THREADS=1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   - $1"; }
bad() { fail=$((fail + 1)); echo "FAIL - $1: $2"; }

for target in reference_cpu experiments/depth_probe; do
    [ -x $target ] || make -s $target > "$TMP/make.log" 2>&1 || { bad "make $target" "$(tail -n 3 "$TMP/make.log")"; }
done
[ -f data/kjv/kjv_train.bin ] || $PY data/prepare.py kjv > /dev/null 2>&1

TINY=(--layers 2 --channels 32 --heads 2 -B 2 -T 16 --steps 6 --warmup 1 --val-every 3 --val-batches 2
      --runs-dir "$TMP/runs" --jobs 2)

# csv_check NAME FILE ROWS PYTHON_CONDITION: FILE has ROWS data rows and the condition holds for `rows` (dicts)
csv_check() {
    local name=$1 file=$2 n=$3 cond=$4 msg
    if msg=$($PY - "$file" "$n" "$cond" 2>&1 <<'EOF'
import csv, math, sys
path, n, cond = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows = list(csv.DictReader(open(path)))
assert len(rows) == n, "%d rows, expected %d" % (len(rows), n)
assert eval("(" + cond + ")", {"math": math, "rows": rows}), "condition failed: %s; rows: %s" % (cond, rows[:4])
EOF
    ); then ok "$name"; else bad "$name" "$msg"; fi
}
png_check() {  # a PNG file of some substance
    if [ "$(head -c 4 "$2" 2>/dev/null | od -An -c | tr -d ' ')" = "211PNG" ] && [ "$(wc -c < "$2")" -gt 10000 ]; then
        ok "$1"; else bad "$1" "$2 is missing or not a plot"; fi
}

# ---- lr_sweep: two layouts, a sane lr and one that must diverge
$PY experiments/lr_sweep.py "${TINY[@]}" --variants pre,siamese --lrs 1e-3,1e30 --results "$TMP/res/lr" \
    > "$TMP/lr.out" 2>&1
rc=$?
[ $rc -eq 0 ] && ok "lr_sweep runs (a diverged run is a result, exit 0)" || bad "lr_sweep" "exit $rc: $(tail -n 5 "$TMP/lr.out")"
csv_check "lr_sweep CSV: 4 runs, lr 1e30 diverged, lr 1e-3 finite and learning" "$TMP/res/lr.csv" 4 \
    "all(r['status'] == ('diverged' if r['lr'] == '1e+30' else 'ok') for r in rows) and
     all(5.0 < float(r['final_val_loss']) < 5.56 for r in rows if r['status'] == 'ok')"
png_check "lr_sweep loss curves PNG" "$TMP/res/lr.png"
png_check "lr_sweep final-loss PNG" "$TMP/res/lr_final.png"
grep -q "diverged @2" "$TMP/res/lr.md" && grep -q "^| siamese |" "$TMP/res/lr.md" && ok "lr_sweep table" \
    || bad "lr_sweep table" "$(cat "$TMP/res/lr.md")"
cp "$TMP/res/lr.md" "$TMP/lr_first.md"
$PY experiments/lr_sweep.py "${TINY[@]}" --variants pre,siamese --lrs 1e-3,1e30 --results "$TMP/res/lr" \
    > "$TMP/lr2.out" 2>&1
grep -q "0 of 4 to run (4 cached)" "$TMP/lr2.out" && cmp -s "$TMP/res/lr.md" "$TMP/lr_first.md" \
    && ok "a second lr_sweep reuses the cached runs" || bad "lr_sweep cache" "$(head -n 2 "$TMP/lr2.out")"
# what a script cannot read or write is one error line and exit status 1 (they were tracebacks, or argparse's two
# lines), and a results file is written whole or not at all (the runs are cached: nothing trains here)
one_error() {  # NAME PATTERN CMD...
    local name=$1 pattern=$2
    shift 2
    "$@" > /dev/null 2> "$TMP/err"
    local rc=$?
    if [ $rc -eq 1 ] && [ "$(wc -l < "$TMP/err")" -eq 1 ] && grep -qE "^error: .*$pattern" "$TMP/err"; then
        ok "$name: $(cat "$TMP/err")"
    else bad "$name" "exit status $rc: $(head -c 300 "$TMP/err")"; fi
}
one_error "lr_sweep: a usage error" "argument --lrs: expected one argument" $PY experiments/lr_sweep.py --lrs
: > "$TMP/a_file"
one_error "lr_sweep: --results in a folder that is a file" "cannot write or read .*a_file.*Not a directory" \
    $PY experiments/lr_sweep.py "${TINY[@]}" --variants pre,siamese --lrs 1e-3,1e30 --results "$TMP/a_file/lr"
mkdir "$TMP/limited"
one_error "lr_sweep: a file-size limit (ulimit -f 24 KiB: the plots do not fit)" "cannot write or read .*File too large" \
    bash -c "ulimit -f 24; exec $PY experiments/lr_sweep.py ${TINY[*]} --variants pre,siamese --lrs 1e-3,1e30 --results $TMP/limited/lr"
if ! ls "$TMP"/limited/*.tmp* > /dev/null 2>&1 && [ ! -e "$TMP/limited/lr.png" ]; then
    ok "... and leaves no partial file ($(ls "$TMP/limited" | tr '\n' ' '))"
else bad "a file-size limit" "it left $(ls "$TMP/limited" | tr '\n' ' ')"; fi
head -c 2000 /bin/sh > "$TMP/binary.csv"
one_error "spike_recount: a binary file as the sweep's CSV" "is not a CSV" $PY experiments/spike_recount.py "$TMP/binary.csv"

# ---- depth_use: the three layouts and one ablation, probed
$PY experiments/depth_use.py "${TINY[@]}" --variants pre,post,siamese,siamese-no-ln-in --lr 1e-3 \
    --probe-B 2 --probe-T 16 --probe-batches 2 --probe-threads 1 --results "$TMP/res/depth" > "$TMP/depth.out" 2>&1
rc=$?
[ $rc -eq 0 ] && ok "depth_use runs" || bad "depth_use" "exit $rc: $(tail -n 5 "$TMP/depth.out")"
# per layout: base 1 + drop1 2 + rank 0 + greedy 0 (k = floor(0.3 * 2) = 0) + lens (2L+1 = 5 per stream);
# siamese: + balance 5 + gain_share 5. pre 8, post 8, siamese 1+2+15+10 = 28, siamese-no-ln-in 28.
csv_check "depth_use CSV: every probe of every layout" "$TMP/res/depth.csv" 72 \
    "all(math.isfinite(float(r['value'])) for r in rows) and
     all(0 < float(r['value']) < 1 for r in rows if r['probe'] in ('balance', 'gain_share')) and
     {r['probe'] for r in rows} == {'base', 'drop1', 'lens', 'balance', 'gain_share'}"
# the lens at the last boundary is the model itself: pre LN_f(x_2L), post x_2L, siamese joint
csv_check "depth_use: the logit lens at the top equals the model's loss" "$TMP/res/depth.csv" 72 \
    "all(abs(float(b['value']) - float(l['value'])) < 1e-5 for b in rows if b['probe'] == 'base'
         for l in rows if l['variant'] == b['variant'] and l['probe'] == 'lens' and l['index'] == '4'
         and l['stream'] in ('x', 'joint') and (l['stream'] == 'joint') == b['variant'].startswith('siamese'))"
for f in drop balance lens; do png_check "depth_use $f PNG" "$TMP/res/depth_$f.png"; done
[ -s "$TMP/res/depth_drop.md" ] && [ -s "$TMP/res/depth_balance.md" ] && [ -s "$TMP/res/depth_lens.md" ] \
    && ok "depth_use tables" || bad "depth_use tables" "missing"

# ---- the probe's greedy and ranked removal, on a 4-layer model (k = 1)
$PY experiments/lr_sweep.py --layers 4 --channels 32 --heads 2 -B 2 -T 16 --steps 2 --warmup 1 --val-every 2 \
    --val-batches 1 --runs-dir "$TMP/runs" --variants siamese --lrs 1e-3 --results "$TMP/res/l4" > /dev/null 2>&1
ckpt=$(ls "$TMP"/runs/siamese_lr0.001-*/model_00000002.bin 2>/dev/null | head -n 1)
if [ -n "$ckpt" ] && ./experiments/depth_probe -e "$ckpt" -j data/kjv/kjv_val.bin -b 2 -t 16 -m 2 \
    > "$TMP/probe.csv" 2> "$TMP/probe.err" && grep -q "^greedy,1,," "$TMP/probe.csv" && grep -q "^rank,1,," "$TMP/probe.csv"; then
    ok "depth_probe removes blocks greedily and by ranking"
else bad "depth_probe greedy/rank" "$(cat "$TMP/probe.err" 2>/dev/null) $(tail -n 3 "$TMP/probe.csv" 2>/dev/null)"; fi
./experiments/depth_probe -e /nonexistent.bin -j data/kjv/kjv_val.bin > /dev/null 2> "$TMP/err"
[ $? -eq 1 ] && grep -q "^error:" "$TMP/err" && ok "depth_probe: a missing checkpoint is one error line" \
    || bad "depth_probe missing checkpoint" "$(cat "$TMP/err")"

# ---- addition: two layouts, one seed, 10 problems
$PY experiments/addition.py --layers 2 --channels 32 --heads 2 -B 2 -T 32 --steps 4 --warmup 1 --val-every 2 \
    --val-batches 1 --answers 10 --seeds 1,2 --variants pre,post --runs-dir "$TMP/runs" --results "$TMP/res/add" \
    > "$TMP/add.out" 2>&1
rc=$?
[ $rc -eq 0 ] && ok "addition runs" || bad "addition" "exit $rc: $(tail -n 5 "$TMP/add.out")"
csv_check "addition CSV: 4 runs with an accuracy in [0, 1]" "$TMP/res/add.csv" 4 \
    "all(r['status'] == 'ok' and 0 <= float(r['final_acc']) <= 1 for r in rows)"
csv_check "addition curves CSV: accuracy at steps 0, 2, 4" "$TMP/res/add_curves.csv" 12 \
    "sorted({int(r['step']) for r in rows}) == [0, 2, 4]"
png_check "addition PNG" "$TMP/res/add.png"
grep -q "^| post |" "$TMP/res/add.md" && ok "addition table" || bad "addition table" "$(cat "$TMP/res/add.md")"

# ---- depth_scaling: the protocol (search with an edge extension, series, shared setting, confirmation, probe)
DS=(--depths 2,3 --seeds 1,2 --search-layers 2 --channels 32 --heads 2 -B 2 -T 16 --steps 6 --lrs 1e-3,3e-3
    --warmups 0.2,0.5 --drop-depths 3 --boundary-lrs 1e-3 --boundary-warmups 0.2,0.5 --val-every 3 --val-batches 2
    --probe-B 2 --probe-T 16 --probe-batches 2 --shared-depths 2 --confirm --runs-dir "$TMP/runs" --results "$TMP/res/ds")
$PY experiments/depth_scaling.py "${DS[@]}" > "$TMP/ds.out" 2>&1
rc=$?
[ $rc -eq 0 ] && ok "depth_scaling runs" || bad "depth_scaling" "exit $rc: $(tail -n 5 "$TMP/ds.out")"
# at 6 steps the best lr of every layout is the top of the grid: the search must extend it (3e-3 -> 1e-2 -> 3e-2)
grep -q "is best at the edge lr 0.003: adding lr 0.01" "$TMP/ds.out" && ok "depth_scaling extends an edge-of-grid best" \
    || bad "depth_scaling extension" "$(grep search "$TMP/ds.out" | head -n 5)"
# series: 3 layouts x 2 depths x 2 seeds at the own best, the shared setting where it differs (at --shared-depths),
# 3 confirmation runs
# (here the shared setting is no layout's best: 3 x 2 seeds more at 2 layers; 21 in all)
csv_check "depth_scaling CSV: one row per run, each with its setting" "$TMP/res/ds.csv" 21 \
    " {r['layout'] for r in rows} == {'pre', 'post', 'siamese'} and
     sum('own_best' in r['setting'] for r in rows) == 12 and sum(r['setting'] == 'confirm' for r in rows) == 3 and
     all(r['status'] == 'ok' and math.isfinite(float(r['final_val_loss'])) and float(r['lr']) > 0 for r in rows) and
     len({(r['layout'], r['layers'], r['seed'], r['lr'], r['warmup']) for r in rows}) == len(rows)"
csv_check "depth_scaling drop CSV: 30% of 3 blocks is 0: single drops of 3 blocks, 6 models" "$TMP/res/ds_drop.csv" 24 \
    "sum(r['probe'] == 'drop1' for r in rows) == 18 and all(math.isfinite(float(r['increase'])) for r in rows)"
for f in "" _search _drop; do png_check "depth_scaling$f PNG" "$TMP/res/ds$f.png"; done
grep -q "± " "$TMP/res/ds.md" && grep -q "^| lowest |" "$TMP/res/ds.md" && [ -s "$TMP/res/ds_boundary.md" ] \
    && [ -s "$TMP/res/ds_cost.md" ] && ok "depth_scaling tables (mean ± sd, verdict, boundary, cost)" \
    || bad "depth_scaling tables" "$(cat "$TMP/res/ds.md")"

# ---- depth_scaling --layouts: the HybridNorm layouts searched alone (2 layouts x 2 lrs x 2 warmups, 6 steps, and
# the edge extensions), their results under --results; without --results another layout list names its own files,
# and the default three keep docs/results/depth_scaling (parse_args alone: nothing is written there)
$PY experiments/depth_scaling.py "${DS[@]:0:${#DS[@]}-2}" --phase search --layouts hybrid,siamese-hybrid \
    --results "$TMP/res/dsh" > "$TMP/dsh.out" 2>&1
rc=$?
csv_check "depth_scaling --layouts hybrid,siamese-hybrid: the search's runs of these two" "$TMP/res/dsh_search.csv" \
    "$(grep -c '^' "$TMP/res/dsh_search.csv" 2>/dev/null | awk '{print ($1 > 0 ? $1 - 1 : 0)}')" \
    "$rc == 0 and len(rows) >= 8 and {r['layout'] for r in rows} >= {'hybrid', 'siamese-hybrid'} and
     {r['layout'] for r in rows} <= {'hybrid', 'siamese-hybrid', 'post'} and
     all(r['status'] == 'ok' for r in rows if r['layout'] != 'post')"
if $PY -c "
import sys; sys.path.insert(0, 'experiments'); import depth_scaling as d
assert d.parse_args([]).results == 'docs/results/depth_scaling' and d.LAYOUTS == ['pre', 'post', 'siamese']
a = d.parse_args(['--layouts', 'pre,post,siamese,hybrid,siamese-hybrid'])
assert a.results == 'docs/results/depth_scaling_pre_post_siamese_hybrid_siamese-hybrid', a.results
assert d.parse_args(['--layouts', 'hybrid', '--tag', 'h']).results == 'docs/results/depth_scaling_h'
" 2> "$TMP/names.err"; then ok "depth_scaling: another --layouts list writes its own files (the default keeps its names)"
else bad "depth_scaling result names" "$(tail -n 2 "$TMP/names.err")"; fi

# ---- the spike definition: a rise before the loss first reaches the baseline is initial noise, one after counts
if $PY -c "
import sys; sys.path.insert(0, 'experiments'); import common
noise = [(0, 5.5), (1, 7.0), (2, 4.0), (3, 3.0), (4, 2.9)]
assert common.spike_start(noise, 3.1) == 3, common.spike_start(noise, 3.1)
assert common.spike(noise, 3.1, 1.0) == (0.0, None, False), common.spike(noise, 3.1, 1.0)
late = noise + [(5, 4.2), (6, 2.8)]
rise, at, spiked = common.spike(late, 3.1, 1.0)
assert spiked and at == 5 and abs(rise - 1.3) < 1e-9, (rise, at, spiked)
assert common.spike([(0, 5.5), (1, 9.0)], 3.1, 1.0) == (0.0, None, False)
" 2> "$TMP/spike.err"; then ok "spikes count only after the loss reached the baseline"
else bad "spike definition" "$(tail -n 2 "$TMP/spike.err")"; fi

# ---- the derivation's check (docs/siamesenorm.md): the formulas pass, a planted mistake fails
if $PY -c "import torch" 2> /dev/null; then
    $PY docs/check_boundary_backward.py > "$TMP/bw.out" 2>&1 && grep -q "PASS" "$TMP/bw.out" \
        && ok "docs/check_boundary_backward.py: the doc's backward equals autograd" || bad "boundary backward" "$(tail -n 3 "$TMP/bw.out")"
    $PY docs/check_boundary_backward.py --mutate no-depth-scale > "$TMP/bw2.out" 2>&1
    [ $? -eq 1 ] && grep -q "FAIL" "$TMP/bw2.out" && ok "docs/check_boundary_backward.py fails a missing 1/c_l" \
        || bad "boundary backward mutation" "$(tail -n 3 "$TMP/bw2.out")"
else bad "docs/check_boundary_backward.py" "no torch for $PY (Debian: python3-torch)"; fi

# ---- a runner killed (even by kill -9) takes its trainers with it: none is left running as an orphan
cat > "$TMP/orphan.py" <<'EOF'
import sys
sys.path.insert(0, "experiments")
import common
run = common.Run("orphan", "./reference_cpu", ["--layers", "2", "--channels", "32", "--heads", "2", "-b", "2", "-t",
                 "16", "-x", "1000000", "-v", "0", "-s", "0", "--seed", "424242"], sys.argv[1])
common.run_all([run], jobs=1)
EOF
$PY "$TMP/orphan.py" "$TMP/orphan_runs" > /dev/null 2>&1 &
runner=$!
disown $runner  # no "Killed" report from the shell
for _ in $(seq 100); do pgrep -f -- "--seed 424242" > /dev/null && break; sleep 0.1; done
started=$(pgrep -f -- "--seed 424242" | wc -l)
kill -9 $runner
for _ in $(seq 50); do pgrep -f -- "--seed 424242" > /dev/null || break; sleep 0.1; done
if [ "$started" -ge 1 ] && ! pgrep -f -- "--seed 424242" > /dev/null; then ok "a killed runner leaves no trainer running"
else bad "orphans" "started $started, still running: $(pgrep -f -- '--seed 424242' | tr '\n' ' ')"; pkill -f -- "--seed 424242"; fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
