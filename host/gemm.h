/*
host/gemm.h: the CPU trainer's matrix products, fast. A first reading skips this file: reference_cpu.cpp's
matmul_forward_naive and matmul_backward_naive are the math, and tests/test_reference.cpp holds these equal to them.
At the end, attention's sums (weighted_rows, and weighted_rows_tile for a few queries at once: the plain loop
`out[i] += coef[j] * row_j[i]`, its sums in registers), and the gradient norm's sum of squares (sum_of_squares).

One operation, C (M, N) += A (M, K) @ B (K, N), where A and B are read through strides, so that either may be a
transposed view:  A(m, k) = a[m * sam + k * sak],  B(k, n) = b[k * sbk + n * sbn],  C(m, n) = c[m * ldc + n].
The model's three products are this one with other strides (reference_cpu.cpp, matmul_forward and matmul_backward).

How it is fast (the scheme of BLIS and GotoBLAS; Van Zee and van de Geijn, "BLIS: A Framework for Rapidly
Instantiating BLAS Functionality", 2015):
  - a microkernel keeps an MR x NR tile of C in vector registers (MR rows, NV vectors of VL numbers each) while k
    runs: each step loads NV vectors of B's row k and broadcasts MR numbers of A's column k: MR * NV multiply-adds;
  - K is cut in blocks of KC and N in blocks of NC. A block of B (KC x NC, in L2) is packed first in panels of NR
    columns (k-major), so that the microkernel reads it from consecutive addresses (a transposed B, the forward's
    weight, through VL x VL transposes in registers); then each strip of MR rows of A (KC x MR, in L1) runs against
    every panel of the block. A transposed B is cut otherwise, KCT x NCT: its blocks take all of a K up to 768 (all
    of d12's), so that each tile of C is loaded and stored once, and fewer columns, so that the block still fits.
    A strip is packed too (k-major), except where A is row-major (the forward's inp, the backward's dout) or
    column-major with few panels to pass (the backward's dout^T, for dweight, at the science's 64 channels): then
    its MR rows are read where they lie, and packing them would only copy them;
  - the threads share C out as a grid of row groups x column groups: each thread packs the B it needs for its own
    columns (and the A for its own rows) into buffers of its own and writes its own part of C, so that no thread
    waits for another until the end (share_out picks the grid).
The register tile follows the vector width the compiler targets (-march=native in the Makefile): AVX-512 (32
registers of 16 floats) 6 rows x 4 vectors, AVX and AVX2 (16 registers of 8) 6 x 2, anything else (16 bytes) 6 x 2;
tests/test_gemm.cpp runs all three on any machine.

The order of the sums, and why it does not depend on the threads, the tile or the vector width: every element of
C is c <- c + A(m, k) * B(k, n) for k = 0, 1, ..., K - 1 in turn, each step one rounding where the compiler fuses
the multiply-add (an FMA: GCC's default -ffp-contract=fast on any machine with FMA) and two where it does not. The
tiles only say which thread does which element, the K blocks only when the running sum goes back to memory between
steps (a float stored and loaded is the same float), and the rows and columns past the edges of A and B are packed
as zeros into tiles of their own buffer. So the result is the same for any number of threads and the same for
every tile; tests/test_gemm.cpp checks it bit for bit against that plain loop, for every tile above.
*/
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>
#include <algorithm>
#include "utils.h"
#ifdef _OPENMP
#include <omp.h>
#endif

namespace gemm_cpu {

// The register tile: Tile<T, bytes per vector, rows MR, vectors NV>. Native<T> is the one for the vector width the
// compiler targets; the tests run the others too (a wider vector than the machine's is split in two by the compiler).
template <typename T, int VBYTES, int MR_, int NV_> struct Tile {
    typedef T V __attribute__((vector_size(VBYTES)));                                  // a vector, aligned
    typedef T U __attribute__((vector_size(VBYTES), aligned(sizeof(T)), may_alias));   // unaligned (C's rows)
    typedef typename std::conditional<sizeof(T) == 4, int32_t, int64_t>::type IT;
    typedef IT I __attribute__((vector_size(VBYTES)));  // the indices GCC's __builtin_shuffle takes
    static constexpr int VL = VBYTES / (int)sizeof(T);  // numbers per vector
    static constexpr int MR = MR_, NV = NV_, NR = NV * VL;
    static constexpr int KC = 256;   // K block: a strip of A, KC x MR (6 KB of floats at 6 rows), stays in L1
    static constexpr int NC = 1024;  // N block: a block of B, KC x NC (1 MB of floats), in L2
    // the blocks of a transposed B (the forward's weight): KCT x NCT (768 KB of floats; a strip of A, KCT x MR, is
    // 18 KB, still in L1). tests/bench_gemm, one and two threads, AVX-512, 3 interleaved rounds: d12's forward
    // products 1-10% faster than in blocks of KC x NC (the head's from 67-68% of the FMA loop to 74-76%); the other
    // products, whose packing is a copy, run faster in KC x NC (dweight by 5-10%)
    static constexpr int KCT = 768, NCT = 256;
    static_assert(NC % NR == 0 && NCT % NR == 0, "an N block is whole panels");
};
#if defined(__AVX512F__)
template <typename T> using Native = Tile<T, 64, 6, 4>;   // 32 registers: 24 accumulators, 4 of B, 1 of A
#elif defined(__AVX__)
template <typename T> using Native = Tile<T, 32, 6, 2>;   // 16 registers: 12 accumulators, 2 of B, 1 of A
#else
template <typename T> using Native = Tile<T, 16, 6, 2>;   // SSE, NEON, ...: 16 bytes
#endif

// Whether c + a * b is one rounding in the microkernel: GCC and Clang fuse it where the machine has FMA (GCC's
// default -ffp-contract=fast; Clang's -ffp-contract=on fuses within one expression, as here).
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
static const bool FUSED = true;
#else
static const bool FUSED = false;
#endif

// c + a * b for a vector b and a number a, one FMA per lane where FUSED (std::fma lane by lane, which GCC compiles to
// one vector FMA here), else a multiply and an add. For a lone chain of them in a loop: there GCC's tuning for AMD's
// Zen (-march=native on such a machine) leaves `c += a * b` as a multiply and an add (a shorter latency there), which
// would round differently from the plain loop. Where several chains run side by side (the microkernel's tile, the
// wider blocks of weighted_rows) GCC fuses `+=` itself, and better than it compiles this; tests/test_gemm.cpp holds
// every path to the plain loop bit for bit, so a compiler that did otherwise would fail it.
template <typename V, typename T> static inline void vmadd(V& c, T a, const V& b) {
    if (!FUSED) {
        c += a * b;
        return;
    }
    const int VL = sizeof(V) / sizeof(T);
#pragma GCC unroll 16
    for (int l = 0; l < VL; l++) c[l] = std::fma(a, b[l], c[l]);
}

// The microkernel: the MR x NR tile at c (row stride ldc) += the A strip (kc x MR) times the packed B panel (kc x
// NR), one k after the other. Where the strip's A(r, k) lies (the same sums in the same order in all three):
// PACKED, packed, at ap[k MR + r]; ROWS, a row-major A read where it lies, its MR rows lda apart with k along each,
// at ap[r lda + k]; COLS, a column-major A read where it lies (the backward's dout^T in dweight), its MR rows side
// by side and each k lda further, at ap[k lda + r]. Read where it lies, a strip's few rows stay in cache while every
// panel passes, so that packing them would only copy them (and, with N as small as the science's 64 channels, the
// copy costs as much as a quarter of the product).
enum { PACKED, ROWS, COLS };
template <typename T, typename S, int AT = PACKED>
static inline void micro(int kc, const T* __restrict ap, size_t lda, const T* __restrict bp, T* c, size_t ldc) {
    typedef typename S::V V;
    typedef typename S::U U;
    const int MR = S::MR, NV = S::NV, VL = S::VL, NR = S::NR;
    V acc[MR][NV];
#pragma GCC unroll 16
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) acc[r][v] = *(const U*)(c + r * ldc + v * VL);
#pragma GCC unroll 2  // two k a turn of the loop: 3-5% faster at d12 and 64 channels (tests/bench_gemm)
    for (int k = 0; k < kc; k++) {
        V b[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) b[v] = *(const V*)(bp + (size_t)k * NR + v * VL);
#pragma GCC unroll 16
        for (int r = 0; r < MR; r++) {
            T a = AT == ROWS ? ap[r * lda + k] : AT == COLS ? ap[(size_t)k * lda + r] : ap[(size_t)k * MR + r];
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) acc[r][v] += a * b[v];
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) *(U*)(c + r * ldc + v * VL) = acc[r][v];
}

// A tile that runs past C's last row or column: through a full tile of its own, the missing part zeros.
template <typename T, typename S, int AT = PACKED>
static void micro_edge(int kc, const T* ap, size_t lda, const T* bp, T* c, size_t ldc, int mr, int nr) {
    const int MR = S::MR, NR = S::NR;
    alignas(64) T tile[MR * NR] = {};
    for (int r = 0; r < mr; r++) memcpy(tile + r * NR, c + r * ldc, nr * sizeof(T));
    micro<T, S, AT>(kc, ap, lda, bp, tile, NR);
    for (int r = 0; r < mr; r++) memcpy(c + r * ldc, tile + r * NR, nr * sizeof(T));
}

// buffers that only grow, kept from call to call (a training step makes hundreds of products): 64-byte aligned
template <typename T> static T* scratch(T** buf, size_t* have, size_t need) {
    if (need > *have) {
        free(*buf);
        *buf = (T*)aligned_alloc(64, (need * sizeof(T) + 63) / 64 * 64);
        if (!*buf) fail("out of memory: %zu bytes for the matrix products' packed panels", need * sizeof(T));
        *have = need;
    }
    return *buf;
}

// One step of every sum, c + a b, rounded as the microkernel rounds it (see the top of this file)
template <typename T> static inline T madd(T c, T a, T b) { return FUSED ? std::fma(a, b, c) : c + a * b; }

// The same product without packing, for the small ones (the tests' models): the same order, so the same result
template <typename T>
static void gemm_small(T* c, size_t ldc, const T* a, size_t sam, size_t sak, const T* b, size_t sbk, size_t sbn,
                       int M, int N, int K) {
    for (int m = 0; m < M; m++)
        for (int k = 0; k < K; k++) {  // row m of C, one k after the other: each element still in k order
            T amk = a[m * sam + k * sak];
            const T* bk = b + k * sbk;
            T* cm = c + (size_t)m * ldc;
            if (sbn == 1)
                for (int n = 0; n < N; n++) cm[n] = madd(cm[n], amk, bk[n]);
            else
                for (int n = 0; n < N; n++) cm[n] = madd(cm[n], amk, bk[n * sbn]);
        }
}

// Two vectors' lanes picked into one: lane l of the result is lane idx(l) of x (0 .. VL - 1) or of y (VL .. 2 VL - 1),
// for idx(l) = IDX::at(l), known when the program is compiled. GCC's __builtin_shuffle takes the indices as a vector;
// Clang has no builtin of that name, and its __builtin_shufflevector takes them one by one (GCC has that one only from
// GCC 12 on: GCC keeps __builtin_shuffle, which GCC 11, Ubuntu 22.04's, has too).
template <typename S, typename IDX, int... L>
static inline typename S::V shuffle2(typename S::V x, typename S::V y, std::integer_sequence<int, L...>) {
#if defined(__clang__)
    return __builtin_shufflevector(x, y, IDX::at(L)...);
#else
    typename S::I idx = {IDX::at(L)...};
    return __builtin_shuffle(x, y, idx);
#endif
}

// r[0 .. VL) := its transpose, a block of VL x VL numbers in VL vectors. Stage H (VL / 2, ..., 2, 1) swaps the two
// off-diagonal H x H blocks of every 2H x 2H block: after all stages every number has crossed the diagonal.
template <typename S, int H> static inline void transpose_stage(typename S::V* r) {
    typedef typename S::V V;
    const int VL = S::VL;
    typedef std::make_integer_sequence<int, VL> lanes;
    // the shuffles' indices: 0 .. VL - 1 the first vector's lanes, VL .. 2 VL - 1 the second's
    struct Lo { static constexpr int at(int l) { return (l & H) == 0 ? l : S::VL + l - H; } };
    struct Hi { static constexpr int at(int l) { return (l & H) == 0 ? l + H : S::VL + l; } };
#pragma GCC unroll 16
    for (int i = 0; i < VL; i++)
        if ((i & H) == 0) {
            V x = r[i], y = r[i + H];
            r[i] = shuffle2<S, Lo>(x, y, lanes());
            r[i + H] = shuffle2<S, Hi>(x, y, lanes());
        }
    if constexpr (H > 1) transpose_stage<S, H / 2>(r);
}

// Pack a block of B, kc x nc with B(k, j) = b[k sbk + j sbn], in panels of NR columns: panel p holds B(k, p NR + j)
// at dst[p KC NR + k NR + j] (KC: the K block, kc or more), the columns past nc zeros. A transposed view (sbk 1:
// the forward's weight, each of B's columns a row of W) is read VL x VL at a time, VL vectors along k transposed in
// registers; any other, along B's rows (a row-major B, sbn 1, copied NR numbers at a time).
template <typename T, typename S>
static void pack_b(T* dst, const T* b, size_t sbk, size_t sbn, int kc, int nc, int KC) {
    typedef typename S::V V;
    typedef typename S::U U;
    const int VL = S::VL, NR = S::NR;
    int npanels = (nc + NR - 1) / NR;
    for (int p = 0; p < npanels; p++) {
        T* d = dst + (size_t)p * KC * NR;
        const T* bp = b + (size_t)p * NR * sbn;
        int jn = nc - p * NR < NR ? nc - p * NR : NR, k = 0;
        if (sbk == 1 && sbn != 1 && jn == NR)
            for (; k + VL <= kc; k += VL)
                for (int v = 0; v < S::NV; v++) {
                    V r[VL];  // r[i]: B(k .. k + VL, p NR + v VL + i), then (transposed) B(k + i, p NR + v VL ...)
#pragma GCC unroll 16
                    for (int i = 0; i < VL; i++) r[i] = *(const U*)(bp + (size_t)(v * VL + i) * sbn + k);
                    transpose_stage<S, VL / 2>(r);
#pragma GCC unroll 16
                    for (int i = 0; i < VL; i++) *(V*)(d + (size_t)(k + i) * NR + v * VL) = r[i];
                }
        for (; k < kc; k++) {  // row by row: a row-major B, and the rest of a transposed one
            T* dk = d + (size_t)k * NR;
            const T* src = bp + (size_t)k * sbk;
            int j = 0;
            if (sbn == 1 && jn == NR)
                memcpy(dk, src, NR * sizeof(T)), j = NR;
            for (; j < jn; j++) dk[j] = src[(size_t)j * sbn];
            for (; j < NR; j++) dk[j] = 0;
        }
    }
}

// Pack a strip of A, its rows m .. m + rn (rn <= MR) and kc columns from a (A(m + r, k) = a[r sam + k sak]): A(m +
// r, k) at dst[k MR + r], the rows past rn zeros.
template <typename T, typename S> static void pack_a(T* dst, const T* a, size_t sam, size_t sak, int kc, int rn) {
    const int MR = S::MR;
    for (int k = 0; k < kc; k++) {
        T* dk = dst + (size_t)k * MR;
        const T* src = a + (size_t)k * sak;
        int r = 0;
        if (sam == 1 && rn == MR)  // a column-major A (the backward's dout^T): MR numbers side by side
            memcpy(dk, src, MR * sizeof(T)), r = MR;
        for (; r < rn; r++) dk[r] = src[(size_t)r * sam];
        for (; r < MR; r++) dk[r] = 0;
    }
}

// How the threads share C out: a grid of gm row groups x gn column groups, each thread a cell of whole strips (MR
// rows) and whole panels (NR columns). A thread brings in the A of its own rows and the B of its own columns (packs
// them, or reads them where they lie), so that splitting the columns brings A in once for each column group, and
// splitting the rows B once for each row group. Of the grids of at most `threads` cells, the one whose largest cell
// costs least, counting each number brought in as PACK_COST multiply-adds (packing one takes about a cycle, where
// AVX-512's microkernel does 32 multiply-adds). Which thread does which element is all it decides: the sums are
// the same for any grid.
struct Grid { int gm, gn; };
static const int PACK_COST = 32;
static inline Grid share_out(int threads, int strips, int panels, int MR, int NR, int K) {
    Grid best = {1, 1};
    double best_cost = 0;
    for (int gn = 1; gn <= threads && gn <= panels; gn++) {
        int gm = threads / gn < strips ? threads / gn : strips;
        double rows = (double)((strips + gm - 1) / gm) * MR, cols = (double)((panels + gn - 1) / gn) * NR;
        double cost = (rows * cols + PACK_COST * (rows + cols)) * K;
        if (gn == 1 || cost < best_cost) best = {gm, gn}, best_cost = cost;
    }
    return best;
}

// One thread's cell of C (M, N) += A (M, K) @ B (K, N): the strips s0 .. s1 of MR rows and the columns n0 .. n1,
// in blocks of KC x NC, with its own buffers for a block of B (bp: KC x NC) and a strip of A (ap: KC x MR); see the
// top of this file
template <typename T, typename S>
static void gemm_cell(T* c, size_t ldc, const T* a, size_t sam, size_t sak, const T* b, size_t sbk, size_t sbn, int M,
                      int K, int s0, int s1, int n0, int n1, int KC, int NC, T* bp, T* ap) {
    const int MR = S::MR, NR = S::NR;
    for (int j0 = n0; j0 < n1; j0 += NC) {
        int nc = n1 - j0 < NC ? n1 - j0 : NC, npanels = (nc + NR - 1) / NR;
        // where A's strips are read: where they lie if A is row-major (sak 1), or column-major (sam 1) with few
        // panels to pass: a column-major strip is KC short runs far apart, and read again for each of several
        // panels it costs more than its copy once (tests/bench_gemm, one thread, AVX-512, 2 interleaved rounds:
        // dweight packed 2-19% faster at d12, 12 panels; 0-19% slower at 64 channels, 1 panel)
        const int at = sak == 1 ? ROWS : sam == 1 && npanels <= 4 ? COLS : PACKED;
        for (int k0 = 0; k0 < K; k0 += KC) {
            int kc = K - k0 < KC ? K - k0 : KC;
            pack_b<T, S>(bp, b + (size_t)k0 * sbk + (size_t)j0 * sbn, sbk, sbn, kc, nc, KC);
            for (int s = s0; s < s1; s++) {  // each strip of A against every panel of the block
                int m0 = s * MR, rn = M - m0 < MR ? M - m0 : MR;
                const T* as = a + (size_t)m0 * sam + (size_t)k0 * sak;  // the strip where it lies
                bool packed = at == PACKED || rn < MR;  // a strip of fewer rows than MR is packed with zeros
                if (packed) pack_a<T, S>(ap, as, sam, sak, kc, rn);
                for (int p = 0; p < npanels; p++) {
                    int jn = nc - p * NR < NR ? nc - p * NR : NR;
                    T* cij = c + (size_t)m0 * ldc + j0 + p * NR;
                    const T* bs = bp + (size_t)p * KC * NR;
                    if (packed) {
                        if (rn == MR && jn == NR)
                            micro<T, S>(kc, ap, 0, bs, cij, ldc);
                        else
                            micro_edge<T, S>(kc, ap, 0, bs, cij, ldc, rn, jn);
                    } else if (at == ROWS) {
                        if (jn == NR)
                            micro<T, S, ROWS>(kc, as, sam, bs, cij, ldc);
                        else
                            micro_edge<T, S, ROWS>(kc, as, sam, bs, cij, ldc, rn, jn);
                    } else {
                        if (jn == NR)
                            micro<T, S, COLS>(kc, as, sak, bs, cij, ldc);
                        else
                            micro_edge<T, S, COLS>(kc, as, sak, bs, cij, ldc, rn, jn);
                    }
                }
            }
        }
    }
}

// C (M, N) += A (M, K) @ B (K, N), packed; see the top of this file
template <typename T, typename S = Native<T>>
static void gemm_packed(T* c, size_t ldc, const T* a, size_t sam, size_t sak, const T* b, size_t sbk, size_t sbn,
                        int M, int N, int K) {
    if (M <= 0 || N <= 0 || K <= 0) return;
    const int MR = S::MR, NR = S::NR;
    const bool transposed = sbk == 1 && sbn != 1;  // B's columns along memory: the forward's weight
    const int KC = transposed ? S::KCT : S::KC, NC = transposed ? S::NCT : S::NC;
    const int strips = (M + MR - 1) / MR, panels = (N + NR - 1) / NR;
    int threads = 1;
#ifdef _OPENMP
    // a small product on one thread: below about a million multiply-adds (tens of microseconds) starting the
    // threads costs more than they share (and much more where the cores are busy)
    if (!omp_in_parallel() && (double)M * N * K >= (1 << 20)) threads = omp_get_max_threads();
#endif
    const Grid grid = share_out(threads, strips, panels, MR, NR, K);
    const int cells = grid.gm * grid.gn;
    // each thread's packing buffer, kept from call to call (one product at a time: the model never runs two at
    // once): a block of B (KC x NC), then a strip of A (KC x MR)
    static T** buf = nullptr;
    static size_t* have = nullptr;
    static int bufs = 0;
    if (cells > bufs) {
        buf = (T**)realloc(buf, cells * sizeof(T*)), have = (size_t*)realloc(have, cells * sizeof(size_t));
        if (!buf || !have) fail("out of memory for the matrix products' packing pointers");
        for (int t = bufs; t < cells; t++) buf[t] = nullptr, have[t] = 0;
        bufs = cells;
    }
    for (int t = 0; t < cells; t++) scratch<T>(&buf[t], &have[t], (size_t)KC * (NC + MR));
    // a cell a thread (cell i to thread i, or i modulo the threads where OpenMP gives fewer than asked for)
#pragma omp parallel for schedule(static, 1) num_threads(cells)
    for (int cell = 0; cell < cells; cell++) {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        int gi = cell / grid.gn, gj = cell % grid.gn;
        int s0 = (int)((long)strips * gi / grid.gm), s1 = (int)((long)strips * (gi + 1) / grid.gm);
        int n0 = (int)((long)panels * gj / grid.gn) * NR, n1 = (int)((long)panels * (gj + 1) / grid.gn) * NR;
        gemm_cell<T, S>(c, ldc, a, sam, sak, b, sbk, sbn, M, K, s0, s1, n0, n1 < N ? n1 : N, KC, NC, buf[tid],
                        buf[tid] + (size_t)KC * NC);
    }
}

// A weighted sum of rows, for attention (its scores, its output and its backward): out[i] = sum over j of coef[j] *
// rows[j * stride + i] for i < n, j < count (ACC: out[i] += it, the sum starting from out[i]; else from 0). Each
// element is summed over j in order, one multiply-add a step, as the plain loop `for j: for i: out[i] += coef[j] *
// row_j[i]` sums it; but the running sums stay in vector registers, a few vectors at once, instead of going to memory
// and back at every j (that round trip, not the arithmetic, is what limits the plain loop).
//
// R such sums of the same rows at once (R queries of one head: rows_tile): sum r < R has its own coefficients,
// coef[r * crs + j * cjs], and its own output, out + r * os. Each row vector is loaded once for all R, and the R * NVEC
// running sums are independent chains that keep the FMA units busy where one head's few vectors (16 channels: one or
// two vectors) would leave them waiting on each other. Each sum is still its own, over j in order.
template <bool ACC, int R, int NVEC, typename T, typename S>
static inline int rows_tile_block(T* out, size_t os, const T* coef, size_t crs, size_t cjs, const T* rows,
                                  size_t stride, int n, int count, int i) {
    typedef typename S::V V;
    typedef typename S::U U;
    const int VL = S::VL;
    for (; i + NVEC * VL <= n; i += NVEC * VL) {
        V s[R][NVEC];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int v = 0; v < NVEC; v++) s[r][v] = ACC ? *(const U*)(out + r * os + i + v * VL) : V{};
        for (int j = 0; j < count; j++) {
            const T* row = rows + (size_t)j * stride + i;
            V x[NVEC];
#pragma GCC unroll 4
            for (int v = 0; v < NVEC; v++) x[v] = *(const U*)(row + v * VL);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                T c = coef[r * crs + (size_t)j * cjs];
#pragma GCC unroll 4
                for (int v = 0; v < NVEC; v++) {
                    if (R * NVEC == 1)
                        vmadd(s[r][v], c, x[v]);  // a lone chain: see vmadd
                    else
                        s[r][v] += c * x[v];
                }
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int v = 0; v < NVEC; v++) *(U*)(out + r * os + i + v * VL) = s[r][v];
    }
    return i;
}

template <bool ACC, int R, typename T, typename S>
static inline void rows_tile(T* out, size_t os, const T* coef, size_t crs, size_t cjs, const T* rows, size_t stride,
                             int n, int count) {
    int i = 0;  // 4 vectors at once for one sum, 2 for several (R * 2 chains), then 1
    if (R == 1) i = rows_tile_block<ACC, R, 4, T, S>(out, os, coef, crs, cjs, rows, stride, n, count, i);
    i = rows_tile_block<ACC, R, 2, T, S>(out, os, coef, crs, cjs, rows, stride, n, count, i);
    i = rows_tile_block<ACC, R, 1, T, S>(out, os, coef, crs, cjs, rows, stride, n, count, i);
    for (int r = 0; r < R; r++)
        for (int k = i; k < n; k++) {  // the last n % VL elements one at a time
            T s = ACC ? out[r * os + k] : 0;
            for (int j = 0; j < count; j++) s = madd(s, coef[r * crs + (size_t)j * cjs], rows[(size_t)j * stride + k]);
            out[r * os + k] = s;
        }
}

template <bool ACC, typename T, typename S = Native<T>>
static inline void weighted_rows(T* out, const T* coef, const T* rows, size_t stride, int n, int count) {
    rows_tile<ACC, 1, T, S>(out, 0, coef, 0, 1, rows, stride, n, count);
}

// The R sums of a tile of queries (or keys) whose ranges of j differ by one from each to the next, as causal
// attention's do: sum r runs over j in [j0 + r d0, j1 + r d1) (d0, d1 each 0 or 1; j0 + (R - 1) d0 <= j1). The part
// where all R are under way, [j0 + (R - 1) d0, j1), runs as one rows_tile; each sum's part before it and after it
// runs alone, in its place in the order (a running sum stored and loaded is the same number), so that every sum is
// still over its j in order. R from 1 to 4.
template <bool ACC, typename T, typename S = Native<T>>
static void weighted_rows_tile(int R, T* out, size_t os, const T* coef, size_t crs, size_t cjs, const T* rows,
                               size_t stride, int n, int j0, int d0, int j1, int d1) {
    int js = j0 + (R - 1) * d0;  // from here every sum is under way
    bool acc = ACC;
    if (d0) {
        for (int r = 0; r < R; r++) {  // sum r's part before js (none for the last)
            T* o = out + r * os;
            const T* c = coef + r * crs;
            int a = j0 + r;
            if (ACC)
                rows_tile<true, 1, T, S>(o, 0, c + (size_t)a * cjs, 0, cjs, rows + (size_t)a * stride, stride, n, js - a);
            else
                rows_tile<false, 1, T, S>(o, 0, c + (size_t)a * cjs, 0, cjs, rows + (size_t)a * stride, stride, n, js - a);
        }
        acc = true;
    }
    const T* c = coef + (size_t)js * cjs;
    const T* x = rows + (size_t)js * stride;
    int count = j1 - js;
#define ROWS_TILE(RR)                                                                          \
    (acc ? rows_tile<true, RR, T, S>(out, os, c, crs, cjs, x, stride, n, count)                \
         : rows_tile<false, RR, T, S>(out, os, c, crs, cjs, x, stride, n, count))
    switch (R) {
    case 1: ROWS_TILE(1); break;
    case 2: ROWS_TILE(2); break;
    case 3: ROWS_TILE(3); break;
    case 4: ROWS_TILE(4); break;
    default: fail("internal: weighted_rows_tile of %d sums (1 to 4)", R);
    }
#undef ROWS_TILE
    if (d1)
        for (int r = 1; r < R; r++)  // sum r's part after j1
            rows_tile<true, 1, T, S>(out + r * os, 0, coef + r * crs + (size_t)j1 * cjs, 0, cjs,
                                     rows + (size_t)j1 * stride, stride, n, r);
}

// C (M, N) += A (M, K) @ B (K, N): what the model calls. Below about 64 thousand multiply-adds packing costs more
// than it saves; both paths give the same result (tests/test_gemm.cpp runs both on every shape).
template <typename T>
static void gemm_acc(T* c, size_t ldc, const T* a, size_t sam, size_t sak, const T* b, size_t sbk, size_t sbn,
                     int M, int N, int K) {
    if ((double)M * N * K < (1 << 16))
        gemm_small(c, ldc, a, sam, sak, b, sbk, sbn, M, N, K);
    else
        gemm_packed(c, ldc, a, sam, sak, b, sbk, sbn, M, N, K);
}

// The sum of x[i]^2, in double, in fixed chunks of 2^16: each chunk summed in order (each step s + x x through madd:
// one rounding where the machine has FMA, on every compiler's choice), then the chunks in order; so the same for any
// number of threads. 8 chunks are summed side by side, each still in order: one chunk alone is one chain of adds,
// each waiting on the one before (the gradient norm was 10.5% of the d12 step on two threads that way).
template <typename T> static double sum_of_squares(const T* x0, size_t n) {
    const size_t CHUNK = 1 << 16;
    const int GROUP = 8;
    size_t chunks = (n + CHUNK - 1) / CHUNK, groups = (chunks + GROUP - 1) / GROUP;
    std::vector<double> partial(groups * GROUP, 0);
#pragma omp parallel for
    for (size_t q = 0; q < groups; q++) {
        const T* x[GROUP];  // chunk j of the group: its len[j] numbers at x[j] (0 past the last chunk)
        size_t len[GROUP], common = CHUNK;
        for (int j = 0; j < GROUP; j++) {
            size_t begin = std::min(n, (q * GROUP + j) * CHUNK);
            x[j] = x0 + begin, len[j] = std::min(CHUNK, n - begin), common = std::min(common, len[j]);
        }
        double s[GROUP] = {};
        for (size_t i = 0; i < common; i++)  // the part every chunk of the group has, side by side
            for (int j = 0; j < GROUP; j++) s[j] = madd(s[j], (double)x[j][i], (double)x[j][i]);
        for (int j = 0; j < GROUP; j++)  // the rest of each (only a group with the last chunk has any)
            for (size_t i = common; i < len[j]; i++) s[j] = madd(s[j], (double)x[j][i], (double)x[j][i]);
        for (int j = 0; j < GROUP; j++) partial[q * GROUP + j] = s[j];
    }
    double total = 0;
    for (size_t k = 0; k < chunks; k++) total += partial[k];
    return total;
}

}  // namespace gemm_cpu
