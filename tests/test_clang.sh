#!/usr/bin/env bash
# The CPU programs under Clang, the C++ compiler of macOS (where `g++` is Apple's clang) and of many Linux machines.
# The Makefile builds them with g++; a GCC-only builtin in a header (host/gemm.h had one, __builtin_shuffle, for a
# day) would stop every Clang user at `make train` while every GCC test passes. So, with the Makefile's flags:
#   - the trainer built by clang++ and run (3 steps of a small siamese model: its losses within 1e-4 of g++'s build's);
#   - the model's every number: tests/ref_tool (one training step's loss, gradient norm, logits and every gradient,
#     and the parameters after one AdamW step, for a tiny model) built by clang++, for 8 layouts, within 1e-5 of g++'s
#     ./tests/ref_tool (relative: the norm of the difference over the norm; the parameters after the step within
#     1e-4). The same model; only the roundings may differ, where the compilers fuse other multiply-adds: here the
#     gradients differ by 1e-7 to 3e-7 and the parameters by up to 4e-6, and a GELU whose sqrt(2/pi) is 2% off
#     (0.7788) moves the gradients by 1e-4 to 4e-3;
#   - host/gemm.h, the one file that reaches for compiler builtins and vector extensions, built and its tests run
#     (tests/test_gemm.cpp: every register tile bit for bit its plain loop, under Clang's own rule for fusing
#     multiply-adds, and every path of the threads);
#   - the other C++ sources through clang++ -fsyntax-only (parsed, and every template they use instantiated, where
#     such a builtin fails; about a second each).
# Skipped, saying so, where clang++ is not installed (`bash .ci/deps test` installs it). About 25 s on two cores.
# Ends "N passed, N failed[, N skipped]".
set -u
cd "$(dirname "$0")/.." || exit 1
passed=0 failed=0
ok()  { echo "ok   - $1"; passed=$((passed + 1)); }
bad() { echo "FAIL - $1"; sed 's/^/       /' "$2" | head -n 12; failed=$((failed + 1)); }
CLANG=${CLANG:-clang++}
if ! command -v "$CLANG" > /dev/null; then
    echo "skipped: the CPU programs under Clang: no $CLANG here (bash .ci/deps test installs Debian's clang)"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
fi
for prog in reference_cpu tests/ref_tool; do  # g++'s builds, which make test makes first
    [ -x "$prog" ] || { echo "error: no ./$prog to compare with: make reference_cpu tests/ref_tool first" >&2; exit 1; }
done
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
echo "compiler: $("$CLANG" --version | head -n 1)"
# the Makefile's flags (CXXFLAGS and OMPFLAGS) and doctest's folder, as `make` would pass them
CXXFLAGS=$(make -s print-cxxflags)
DOCTEST=$(make -s print-doctest)

# clang++ with the Makefile's flags (the level at the end of them wins: -O0 and -O1 build in a few seconds)
build() {  # output, source, flags...: its messages in $TMP/out
    local out=$1 src=$2; shift 2
    # shellcheck disable=SC2086  # CXXFLAGS: words
    "$CLANG" $CXXFLAGS "$@" -o "$out" "$src" > "$TMP/out" 2>&1
}

# the trainer, built at -O0 and run: 3 steps, with a validation at the start and at the end
if build "$TMP/reference_cpu" reference_cpu.cpp -O0; then
    ok "the CPU trainer built by clang++ (reference_cpu.cpp)"
    losses() {  # program: its losses, a line each
        OMP_NUM_THREADS=2 "$1" --norm siamese --layers 2 --channels 32 --heads 4 --max-seq-len 32 -b 4 -t 32 -x 3 \
            -v 3 -m 2 -s 0 --seed 7 -i data/kjv/kjv_train.bin -j data/kjv/kjv_val.bin 2>&1 |
            grep -oE '(^step .*\| loss|^val loss) [0-9.]+' | grep -oE '[0-9.]+$'
    }
    mine=$(losses "$TMP/reference_cpu") theirs=$(losses ./reference_cpu)
    if [ "$(wc -l <<< "$mine")" -ge 4 ] && [ "$(wc -l <<< "$mine")" = "$(wc -l <<< "$theirs")" ] &&
        paste <(echo "$mine") <(echo "$theirs") |
        awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-4) b = 1 } END { exit b }'
    then ok "the Clang-built trainer trains: its losses $(paste -s -d' ' <<< "$mine") (g++'s $(
        paste -s -d' ' <<< "$theirs"))"
    else bad "the Clang-built trainer's losses (left) against g++'s ./reference_cpu's (right)" \
        <(paste <(echo "$mine") <(echo "$theirs")); fi
else bad "the CPU trainer built by clang++: its first lines" "$TMP/out"; fi

# the model's every number: clang++'s tests/ref_tool against g++'s
compare() {  # folder of g++'s files, folder of clang++'s: the relative difference of each, within its bound
    python3 - "$1" "$2" << 'EOF'
import math, struct, sys
def floats(b, at, n): return struct.unpack_from("<%df" % n, b, at)
def read(folder):  # out.bin: int32 B, T, Vp, P; float32 loss, norm; logits (B T Vp); gradients (P)
    b = open(folder + "/out.bin", "rb").read()
    B, T, Vp, P = struct.unpack_from("<4i", b)
    step = open(folder + "/after_step.bin", "rb").read()  # a checkpoint: 256 int32 of header, then P floats
    return {"loss": floats(b, 16, 1), "gradient norm": floats(b, 20, 1), "logits": floats(b, 24, B * T * Vp),
            "gradients": floats(b, 24 + 4 * B * T * Vp, P), "parameters after a step": floats(step, 1024, P)}
gcc, clang = read(sys.argv[1]), read(sys.argv[2])
# AdamW's first step divides each gradient by its own size: where a gradient is near 0, a rounding of it is a large
# change of its update, so the parameters after the step get a bound of their own
bound = {"parameters after a step": 1e-4}
over = 0
for name in gcc:
    x, y = gcc[name], clang[name]
    rel = math.sqrt(sum((p - q) ** 2 for p, q in zip(x, y)) / sum(p * p for p in x))
    over += rel > bound.get(name, 1e-5)
    print("%s %.1e" % (name, rel))
sys.exit(1 if over else 0)
EOF
}
if build "$TMP/ref_tool" tests/ref_tool.cpp -O0; then
    ok "the model (tests/ref_tool.cpp, which includes reference_cpu.cpp) built by clang++"
    for layout in pre post siamese hybrid siamese-hybrid peri deepnorm hc; do
        rm -rf "$TMP/gcc" "$TMP/clang"
        mkdir -p "$TMP/gcc" "$TMP/clang"
        if ! ./tests/ref_tool "$TMP/gcc" "$layout" 0 > "$TMP/out" 2>&1 ||
            ! "$TMP/ref_tool" "$TMP/clang" "$layout" 0 >> "$TMP/out" 2>&1; then
            bad "$layout: tests/ref_tool failed" "$TMP/out"
        elif compare "$TMP/gcc" "$TMP/clang" > "$TMP/diff" 2>&1; then
            ok "$layout: one step's numbers within the bounds of g++'s ($(paste -s -d, "$TMP/diff" |
                sed 's/,/, /g'))"
        else bad "$layout: clang++'s tests/ref_tool against g++'s (relative; at most 1e-5, 1e-4 after the step)" \
            "$TMP/diff"; fi
    done
else bad "tests/ref_tool.cpp built by clang++: its first lines" "$TMP/out"; fi

# host/gemm.h built and its tests run, at -O1: its vectors are written out (GCC's vector extensions, which Clang
# has too), so the microkernel is vector code at any level, and the build takes 7 s here against 11 at -O2
if build "$TMP/test_gemm" tests/test_gemm.cpp -O1 -Wno-unused-function -I"$DOCTEST"; then
    ok "tests/test_gemm.cpp built by clang++"
    if OMP_NUM_THREADS=2 "$TMP/test_gemm" > "$TMP/run" 2>&1; then
        ok "tests/test_gemm built by clang++ passes: $(grep -E '^\[doctest\] assertions' "$TMP/run" | tr -s ' ')"
    else bad "tests/test_gemm built by clang++: its end" <(tail -n 12 "$TMP/run"); fi
else bad "tests/test_gemm.cpp built by clang++: its first lines" "$TMP/out"; fi

# the other sources as the Makefile compiles them (their own defines), parsed and instantiated, no code made
check() {  # name, source, extra flags...
    local name=$1 src=$2; shift 2
    # shellcheck disable=SC2086  # CXXFLAGS: words
    if "$CLANG" -fsyntax-only $CXXFLAGS "$@" "$src" > "$TMP/out" 2>&1; then
        ok "$name: clang++ -fsyntax-only $src$([ $# -eq 0 ] || echo " $*")"
    else bad "$name: clang++ -fsyntax-only $src $*: its first lines" "$TMP/out"; fi
}
if command -v mpicxx > /dev/null; then
    # shellcheck disable=SC2046  # mpicxx's flags: words
    check "the CPU trainer with MPI" reference_cpu.cpp -DUSE_MPI $(mpicxx --showme:compile)
fi
check "the reference's tests" tests/test_reference.cpp -Wno-unused-function -I"$DOCTEST"
check "the float64 gradient checks" tests/test_gradients.cpp -Wno-unused-function -I"$DOCTEST" -DREAL=double
check "the products' benchmark" tests/bench_gemm.cpp -Wno-unused-function
check "the depth probe" experiments/depth_probe.cpp

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
