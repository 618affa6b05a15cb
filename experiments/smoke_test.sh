#!/usr/bin/env bash
# Smoke test of the experiment tooling (docs/experiments.md): each script on a minimal setting (2-layer models,
# a few steps, in a temporary folder), checking that its CSV, PNG and table appear with sane content, that a
# diverging run (lr 1e30) is recorded as "diverged" (outcome non-finite) without failing the script, that a run the
# trainer refuses stops a script with one error line and no results, and that a second run of a script reuses its
# cached runs; the spike and outcome definitions on made-up curves and on the curves of section 5's runs;
# docs/check_boundary_backward.py (and that it fails a planted mistake). Builds experiments/depth_probe with make when
# missing. Ends with "N passed, N failed".
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
     all((r['outcome'], r['outcome_step']) == ('non-finite', '2') for r in rows if r['lr'] == '1e+30') and
     all(5.0 < float(r['final_val_loss']) < 5.56 for r in rows if r['status'] == 'ok')"
png_check "lr_sweep loss curves PNG" "$TMP/res/lr.png"
png_check "lr_sweep final-loss PNG" "$TMP/res/lr_final.png"
grep -q "non-finite @2" "$TMP/res/lr.md" && grep -q "^| siamese |" "$TMP/res/lr.md" && ok "lr_sweep table" \
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

# a report of the runs complete so far (--no-run, a seed not run yet): every table made from the series says so
$PY experiments/depth_scaling.py "${DS[@]:0:${#DS[@]}-2}" --seeds 1,2,5 --no-run --results "$TMP/res/dsp" \
    > "$TMP/dsp.out" 2>&1
rc=$?
marked=$(grep -l '^INCOMPLETE (depth series at L=2, own best settings: 3 of 9 runs not run yet (--no-run); ' \
    "$TMP"/res/dsp.md "$TMP"/res/dsp_spikes.md "$TMP"/res/dsp_drop.md "$TMP"/res/dsp_cost.md 2> /dev/null | wc -l)
if [ $rc -eq 0 ] && [ "$marked" -eq 4 ]; then ok "depth_scaling --no-run with runs missing: the series' tables open with INCOMPLETE"
else bad "depth_scaling --no-run" "exit $rc, $marked of 4 marked: $(head -c 200 "$TMP/res/dsp.md" 2>&1) $(tail -n 3 "$TMP/dsp.out")"; fi

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

# ---- high_lr: each layout at its best lr (from a search table) and one rung above it, which here diverges
printf 'layout,setting,layers,lr,warmup,final_val_loss\n%s\n' "pre,search,2,0.03,1,5.1" "pre,search,2,0.001,1,5.3" \
    "post,search,2,0.03,1,5.2" "siamese,search,2,0.03,1,5.2" "siamese,search,3,0.001,1,4.0" > "$TMP/hl_search.csv"
$PY experiments/high_lr.py --search "$TMP/hl_search.csv" --rungs 1 --ladder 1e-3,3e-2,1e30 --seeds 1,2 \
    --search-layers 2 --channels 32 --heads 2 -B 2 -T 16 --steps 6 --val-every 3 --val-batches 2 \
    --runs-dir "$TMP/runs" --results "$TMP/res/hl" > "$TMP/hl.out" 2>&1
rc=$?
[ $rc -eq 0 ] && ok "high_lr runs" || bad "high_lr" "exit $rc: $(tail -n 5 "$TMP/hl.out")"
csv_check "high_lr CSV: 3 layouts x (best 3e-2, one rung 1e30) x 2 seeds; the rung diverged, the best did not" \
    "$TMP/res/hl.csv" 12 \
    "all(r['layers'] == '2' and r['warmup'] == '1' for r in rows) and
     all((r['verdict'] == 'non-finite') == (r['lr'] == '1e+30') for r in rows) and
     all(r['outcome_step'] == '2' for r in rows if r['lr'] == '1e+30') and
     sorted(r['rungs_above_best'] for r in rows) == ['0'] * 6 + ['1'] * 6"
grep -q "^| siamese | lr 0.03, warmup 1 |.*2 non-finite" "$TMP/res/hl.md" && ok "high_lr table" \
    || bad "high_lr table" "$(cat "$TMP/res/hl.md")"
png_check "high_lr PNG" "$TMP/res/hl.png"
one_error "high_lr: a search table without a layout's runs" "has no search run of post at 3 layers" \
    $PY experiments/high_lr.py --search "$TMP/hl_search.csv" --search-layers 3 --layouts siamese,post --dry-run
one_error "high_lr: a file that is not a search table" "is not a search table" \
    $PY experiments/high_lr.py --search README.md --dry-run

# ---- a run that did not run is never a result: with a val shard smaller than one batch the trainer refuses every
# run; each script stops at the first with one error line naming it and the trainer's own error, and writes nothing
$PY -c "
import struct, sys
d = open('data/kjv/kjv_val.bin', 'rb').read()
h = bytearray(d[:1024]); struct.pack_into('<i', h, 8, 20)
open(sys.argv[1], 'wb').write(bytes(h) + d[1024:1024 + 40])" "$TMP/tiny_val.bin"
REFUSED="run .* failed \(exit status 1\): '$TMP/tiny_val.bin' holds 20 tokens, fewer than one batch needs.*no results written"
mkdir "$TMP/refused"
one_error "high_lr: every run refused (a val shard smaller than one batch)" "$REFUSED" \
    $PY experiments/high_lr.py --search "$TMP/hl_search.csv" --rungs 1 --ladder 1e-3,3e-2,1e30 --seeds 1,2 \
    --search-layers 2 --channels 32 --heads 2 -B 2 -T 16 --steps 6 --val-every 3 --val-batches 2 \
    --val "$TMP/tiny_val.bin" --runs-dir "$TMP/runs" --results "$TMP/refused/hl"
one_error "depth_scaling --phase search: every run refused" "$REFUSED" \
    $PY experiments/depth_scaling.py "${DS[@]:0:${#DS[@]}-2}" --phase search --val "$TMP/tiny_val.bin" \
    --results "$TMP/refused/ds"
one_error "lr_sweep: every run refused" "$REFUSED" $PY experiments/lr_sweep.py "${TINY[@]}" --variants pre,siamese \
    --lrs 1e-3 --val "$TMP/tiny_val.bin" --results "$TMP/refused/lr"
one_error "addition: every run refused" "run .* failed \(exit status 1\): .* holds 20 tokens.*no results written" \
    $PY experiments/addition.py --layers 2 --channels 32 --heads 2 -B 2 -T 32 --steps 4 --warmup 1 --val-every 2 \
    --val-batches 1 --answers 10 --seeds 1 --variants pre --train data/kjv/kjv_train.bin --val "$TMP/tiny_val.bin" \
    --runs-dir "$TMP/runs" --results "$TMP/refused/add"
one_error "depth_use: every run refused" "$REFUSED" $PY experiments/depth_use.py "${TINY[@]}" --variants pre \
    --lr 1e-3 --val "$TMP/tiny_val.bin" --results "$TMP/refused/du"
if [ -z "$(ls -A "$TMP/refused")" ]; then ok "... and none of them wrote a result file"
else bad "refused runs" "results written: $(ls "$TMP/refused" | tr '\n' ' ')"; fi
# the runs not started after the first refusal are not started at all (high_lr: 12 runs, 2 at a time)
$PY experiments/high_lr.py --search "$TMP/hl_search.csv" --rungs 1 --ladder 1e-3,3e-2,1e30 --seeds 1,2 \
    --search-layers 2 --channels 32 --heads 2 -B 2 -T 16 --steps 6 --val-every 3 --val-batches 2 \
    --val "$TMP/tiny_val.bin" --runs-dir "$TMP/runs_refused" --results "$TMP/refused/hl" --fresh > "$TMP/refused.out" 2>&1
started=$(ls "$TMP/runs_refused" 2> /dev/null | wc -l)
if [ "$started" -le 2 ] && grep -q "stopping after the failed run" "$TMP/refused.out"; then
    ok "after a refused run no new run starts ($started of 12 started)"
else bad "no new run after a refusal" "$started of 12 started: $(head -c 300 "$TMP/refused.out")"; fi
# a campaign interrupted part-way: one error line that says which runs are not complete, no results, no trainer left
# (and while they run, a line every EXPERIMENTS_HEARTBEAT seconds says how far each is)
EXPERIMENTS_HEARTBEAT=1 $PY experiments/lr_sweep.py "${TINY[@]}" --steps 100000 --variants pre,siamese --lrs 1e-3 \
    --seed 777123 --results "$TMP/refused/int" > "$TMP/int.out" 2> "$TMP/int.err" &
sweep=$!
for _ in $(seq 300); do grep -q "under way: .*_lr0.001 (step [1-9][0-9]*/100000)" "$TMP/int.out" && break; sleep 0.1; done
if grep -qE "^  \.\.\. lr sweep, [0-9]+ (s|min): 0 of 2 done; under way: pre_lr0.001 \(step [0-9]+/100000\), siamese_lr0.001 \(step [0-9]+/100000\)$" "$TMP/int.out"
then ok "a long sweep says how far its runs are: $(grep -m1 'under way' "$TMP/int.out")"
else bad "the sweep's heartbeat" "$(tail -n 3 "$TMP/int.out")"; fi
kill -TERM $sweep  # as ^C (a background job of a script ignores SIGINT)
wait $sweep
rc=$?
for _ in $(seq 50); do pgrep -f -- "reference_cpu .*--seed 777123" > /dev/null || break; sleep 0.1; done
if [ $rc -eq 1 ] && [ "$(wc -l < "$TMP/int.err")" -eq 1 ] &&
    grep -q "^error: interrupted: 2 of 2 runs of the lr sweep are not complete (pre_lr0.001, siamese_lr0.001); no results written" "$TMP/int.err" &&
    [ -z "$(ls -A "$TMP/refused")" ] && ! pgrep -f -- "reference_cpu .*--seed 777123" > /dev/null; then
    ok "an interrupted sweep: $(cat "$TMP/int.err")"
else bad "an interrupted sweep" "exit $rc: $(head -c 300 "$TMP/int.err"); $(ls "$TMP/refused")"; pkill -f -- "reference_cpu .*--seed 777123"; fi

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

# ---- how a run ended (common.outcome): on made-up curves each category and its step, then on the curves of
# section 5's runs (docs/results/hybrid_comparison_curves.csv, rerun at this trainer: the CSVs' final val losses):
# HybridNorm's failed runs, which spike by 8-9 nats and stay at the unigram level, are collapsed at the spike;
# SiameseNorm's at lr 3e-2, which spikes by 1.04 nats and trains on, is not; HybridNorm's third 16-layer seed, which
# stalls without a spike, is stalled
if $PY - 2> "$TMP/outcome.err" <<'EOF'
import csv, math, sys
sys.path.insert(0, "experiments")
import common
U = 3.1
learn = [(s, 5.5 - 0.02 * s) for s in range(1, 121)]             # down to 3.1 at step 120
end = lambda level: [(s, level) for s in range(121, 141)]          # noqa: E731
val = lambda v: [(0, 5.5), (140, v)]                               # noqa: E731
fall = [(s, 3.1 - 0.01 * (s - 120)) for s in range(121, 141)]      # trains on to 2.9
assert common.outcome(learn + fall, val(2.9), U) == ("trained", None)
assert common.outcome(learn + end(3.1), val(3.09), U) == ("stalled", None)        # within 0.05 of the baseline
spike = [(s, 3.0) for s in range(121, 126)] + [(126, 5.0)]          # 2 nats above the running minimum 3.0
assert common.spike_onsets(learn + spike, U)[0][:2] == (126, 2.0), common.spike_onsets(learn + spike, U)
back = [(s, 2.9) for s in range(127, 141)]
assert common.outcome(learn + spike + back, val(2.95), U) == ("trained", None)    # spiked and recovered
high = [(s, 3.0 + common.RECOVERY_NATS + 0.1) for s in range(127, 141)]
assert common.outcome(learn + spike + high, val(2.6), U) == ("collapsed", 126)    # lost 0.6 nats: not recovered
assert common.outcome(learn + spike + [(s, 3.2) for s in range(127, 141)], val(3.2), U) == ("collapsed", 126)
twice = learn + spike + back + [(141, 5.0)] + [(s, 3.5) for s in range(142, 160)]  # back from 126, not from 141
assert common.outcome(twice, val(2.6), U) == ("collapsed", 141), common.outcome(twice, val(2.6), U)
blip = learn + spike + back[:3] + [(130, 5.0)] + high                 # 3 steps down between two spikes: no recovery
assert common.outcome(blip, val(2.6), U) == ("collapsed", 126), common.outcome(blip, val(2.6), U)
assert common.outcome(learn + [(121, math.nan)], val(3.0), U) == ("non-finite", 121)
assert common.outcome(learn, val(3.0), U, diverge_step=77) == ("non-finite", 77)
early = [(1, 5.5), (2, 9.0)] + learn[2:] + fall                      # a rise before the baseline: initial noise
assert common.outcome(early, val(2.9), U) == ("trained", None)
runs = {}
for r in csv.DictReader(open("docs/results/hybrid_comparison_curves.csv")):
    k = (r["layout"], r["layers"], r["warmup"], r["seed"], r["lr"])
    runs.setdefault(k, {"train": [], "val": []})[r["split"]].append((int(r["step"]), float(r["loss"])))
want = {("hybrid", "16", "100", "1337", "0.003"): ("collapsed", 157),
        ("hybrid", "8", "50", "1337", "0.003"): ("collapsed", 66),
        ("siamese", "8", "50", "1337", "0.03"): ("trained", None),
        ("hybrid", "16", "100", "3", "0.003"): ("stalled", None)}
assert set(runs) == set(want), sorted(runs)
for k, w in want.items():
    got = common.outcome(runs[k]["train"], runs[k]["val"], 3.1442)
    assert got == w, (k, got, w)
EOF
then ok "outcomes: trained, stalled, collapsed at the spike not recovered from, non-finite; section 5's curves"
else bad "outcome definition" "$(tail -n 3 "$TMP/outcome.err")"; fi
# the recount of a committed table from its CSV and curves (docs/experiments.md quotes it)
$PY experiments/spike_recount.py docs/results/hybrid_comparison.csv --unigram 3.1442 > "$TMP/recount.out" 2>&1
if grep -q "^| hybrid | own_best | 16 | 1337 | .* collapsed @157 | curves CSV |$" "$TMP/recount.out" &&
    grep -q "^30 runs: 23 trained, 5 stalled, 2 collapsed$" "$TMP/recount.out"; then
    ok "spike_recount: section 5's depth series recounted (2 collapsed, from the curve where there is one)"
else bad "spike_recount of a campaign CSV" "$(tail -n 5 "$TMP/recount.out")"; fi
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

# ---- horizon.py (section 6): the search of every layout, the grid at 1x, 3x, 5x Pre-Norm's best with every seed,
# the outcome of each run, the logit lens of each stream; its protocol as documented (16 layers, 1500 steps, 8% warmup)
HZ=(--layouts pre,siamese,hybrid --search-layers 2 --channels 32 --heads 2 -B 2 -T 16 --steps 6 --lrs 1e-3,3e-3
    --val-every 3 --val-batches 2 --probe-B 2 --probe-T 16 --probe-batches 2 --runs-dir "$TMP/runs_hz")
$PY experiments/horizon.py "${HZ[@]}" --seeds 1,2 --results "$TMP/res/hz" --records "$TMP/hz_records.tar.xz" \
    > "$TMP/hz.out" 2>&1
rc=$?
[ $rc -eq 0 ] && ok "horizon runs" || bad "horizon" "exit $rc: $(tail -n 5 "$TMP/hz.out")"
csv_check "horizon CSV: 3 layouts x 1x, 3x, 5x x 2 seeds, each rate a multiple of pre's best, each run an outcome" \
    "$TMP/res/hz.csv" 18 \
    " {r['layout'] for r in rows} == {'pre', 'siamese', 'hybrid'} and {r['seed'] for r in rows} == {'1', '2'} and
     {r['multiplier'] for r in rows} == {'1', '3', '5'} and
     len({round(float(r['lr']) / float(r['multiplier']), 12) for r in rows}) == 1 and
     all(r['outcome'] in ('trained', 'stalled', 'collapsed', 'non-finite') for r in rows)"
csv_check "horizon lens CSV: X, Y and the joint head for siamese, x for pre and hybrid, at every boundary" \
    "$TMP/res/hz_lens.csv" 150 \
    " {(r['layout'], r['stream']) for r in rows} == {('siamese', 'joint'), ('siamese', 'x'), ('siamese', 'y'),
                                                    ('pre', 'x'), ('hybrid', 'x')} and
     {int(r['boundary']) for r in rows} == set(range(5)) and all(math.isfinite(float(r['loss'])) for r in rows)"
for f in "" _curves _lens; do png_check "horizon$f PNG" "$TMP/res/hz$f.png"; done
grep -q "^| siamese | 3x (lr " "$TMP/res/hz_lens.md" && grep -q "^| total |" "$TMP/res/hz_cost.md" \
    && grep -q "^Each layout at its own best lr" "$TMP/res/hz.md" && ok "horizon tables (grid, own best, lens, cost)" \
    || bad "horizon tables" "$(head -c 400 "$TMP/res/hz.md")"
$PY experiments/horizon.py "${HZ[@]}" --seeds 1,2,5 --no-run --results "$TMP/res/hzp" > "$TMP/hzp.out" 2>&1
rc=$?
marked=$(grep -l '^INCOMPLETE (' "$TMP"/res/hzp.md "$TMP"/res/hzp_lens.md 2> /dev/null | wc -l)
[ $rc -eq 0 ] && [ "$marked" -eq 2 ] && grep -q "missing: .*seed5" "$TMP/res/hzp.md" \
    && ok "horizon --no-run with a seed missing: the tables open with INCOMPLETE and name the missing runs" \
    || bad "horizon --no-run" "exit $rc, $marked of 2 marked: $(head -c 300 "$TMP/res/hzp.md" 2>&1)"
# the records alone (no weights), unpacked where the runs were, report the same campaign: the same tables and lens
rm -rf "$TMP/runs_hz" && mkdir "$TMP/runs_hz" && tar -xJf "$TMP/hz_records.tar.xz" -C "$TMP/runs_hz"
$PY experiments/horizon.py "${HZ[@]}" --seeds 1,2 --no-run --results "$TMP/res/hzr" > "$TMP/hzr.out" 2>&1
rc=$?
same=0
for f in .csv .md _lens.csv _lens.md _search.csv; do cmp -s "$TMP/res/hz$f" "$TMP/res/hzr$f" && same=$((same + 1)); done
[ $rc -eq 0 ] && [ $same -eq 5 ] && ! ls "$TMP"/runs_hz/*/model_*.bin > /dev/null 2>&1 \
    && ok "horizon --records: the runs' records without their weights report the same campaign (5 files cmp-identical)" \
    || bad "horizon --records" "exit $rc, $same of 5 identical: $(tail -n 2 "$TMP/hzr.out")"
# a record whose lens never ran (a pass with --lens-layouts ''), here one siamese run's: its weights are not here, so
# the lens reads the rest, names the one it skipped and counts it in the table's text; the grid's tables are unchanged
one=$(ls -d "$TMP"/runs_hz/*siamese*seed2* | head -n 1)
rm -f "$one"/*.probe.csv
$PY experiments/horizon.py "${HZ[@]}" --seeds 1,2 --no-run --results "$TMP/res/hzs" > "$TMP/hzs.out" 2>&1
rc=$?
csv_check "horizon lens without a run's weights: that run's 15 rows (5 boundaries x 3 streams) left out, no other's" \
    "$TMP/res/hzs_lens.csv" 135 \
    "sum(r['layout'] == 'siamese' and r['seed'] == '2' for r in rows) == 2 * 15 and
     sum(r['layout'] == 'siamese' and r['seed'] == '1' for r in rows) == 3 * 15"
[ $rc -eq 0 ] && cmp -s "$TMP/res/hz.csv" "$TMP/res/hzs.csv" && grep -q "skips 1 finished run.*$(basename "$one")" \
    "$TMP/hzs.out" && grep -q "1 finished run(s) of these layouts had no weights" "$TMP/res/hzs_lens.md" \
    && ok "horizon lens: a run without weights or a cached lens is skipped and named, the grid unchanged" \
    || bad "horizon lens without weights" "exit $rc: $(tail -n 3 "$TMP/hzs.out")"
# --order rate: every seed of the first rate given before the next (here 5x, then 3x, then 1x); the tables keep 1x, 3x, 5x
$PY experiments/horizon.py "${HZ[@]}" --seeds 1,2 --order rate --multipliers 5,3,1 --no-run --results "$TMP/res/hzo" \
    > "$TMP/hzo.out" 2>&1
rc=$?
csv_check "horizon --order rate: the grid's runs rate by rate, every seed" "$TMP/res/hzo.csv" 18 \
    "[(r['multiplier'], r['seed']) for r in rows] == [(m, s) for m in '531' for s in '12' for _ in range(3)]"
grep -q "^| layout | 1x (lr [0-9.e-]*) | 3x (lr [0-9.e-]*) | 5x " "$TMP/res/hzo.md" \
    && ok "horizon --order rate: the tables' columns in the rates' order" || bad "horizon --order rate" "$(head -n 3 "$TMP/res/hzo.md")"
one_error "horizon: a multiplier twice" "a multiplier is named twice" $PY experiments/horizon.py --multipliers 3,3 --dry-run
hz_cmds=$($PY experiments/horizon.py --dry-run --no-plot 2>&1 | grep '^./reference_cpu')
if [ "$(echo "$hz_cmds" | wc -l)" = 24 ] && ! echo "$hz_cmds" | grep -v -- '--layers 16 .* -l [0-9.e-]* -u 120 .* -x 1500 -v 250 '
then ok "horizon --dry-run: the documented protocol (8 layouts x 3 rates: 16 layers, warmup 120 of 1500 steps)"
else bad "horizon protocol" "$(echo "$hz_cmds" | head -n 2)"; fi

# ---- the documented default commands run what the docs say as the registry grows (section 2's sweep: 25 runs of
# five variants; depth_use.py probes 5 of them), not one run per entry of common.VARIANTS
n_sweep=$($PY experiments/lr_sweep.py --dry-run 2>&1 | grep -c '^./reference_cpu')
n_use=$($PY experiments/depth_use.py --dry-run 2>&1 | grep -c '^./reference_cpu')
[ "$n_sweep" = 25 ] && [ "$n_use" = 5 ] && ok "lr_sweep.py and depth_use.py default to section 2's 25 runs and 5 models" \
    || bad "default sweep" "lr_sweep.py --dry-run: $n_sweep runs (docs: 25), depth_use.py: $n_use (docs: 5)"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
