/*
host/gemm.h: the CPU trainer's matrix products, fast. A first reading skips this file: reference_cpu.cpp's
matmul_forward_naive and matmul_backward_naive are the math, and tests/test_reference.cpp holds these equal to them.
At the end, attention's sums (weighted_rows, and weighted_rows_tile for a few queries at once: the plain loop
`out[i] += coef[j] * row_j[i]`, its sums in registers).

One operation, C (M, N) += A (M, K) @ B (K, N), where A and B are read through strides, so that either may be a
transposed view:  A(m, k) = a[m * sam + k * sak],  B(k, n) = b[k * sbk + n * sbn],  C(m, n) = c[m * ldc + n].
The model's three products are this one with other strides (reference_cpu.cpp, matmul_forward and matmul_backward).

How it is fast (the scheme of BLIS and GotoBLAS; Van Zee and van de Geijn, "BLIS: A Framework for Rapidly
Instantiating BLAS Functionality", 2015):
  - a microkernel keeps an MR x NR tile of C in vector registers (MR rows, NV vectors of VL numbers each) while k
    runs: each step loads NV vectors of B's row k and broadcasts MR numbers of A's column k: MR * NV multiply-adds;
  - its operands are packed first, so that the microkernel reads both from consecutive addresses: B in panels of NR
    columns (k-major, KC x NR, in L1), shared by all threads; A in strips of MR rows (k-major), one block of MC rows
    per thread (in L2), except where A is row-major (the forward's inp, the backward's dout) or column-major (the
    backward's dout^T, for dweight): then a strip's MR rows of KC numbers are read where they lie (MR streams along
    k, or KC short runs of MR, that stay in cache while every panel passes), and packing them would only copy them;
  - K is cut in blocks of KC and N in blocks of NC: all threads pack one KC x NC block of B together, then each
    takes MC-row blocks of A and runs the microkernel over every panel of the block.
The register tile follows the vector width the compiler targets (-march=native in the Makefile): AVX-512 (32
registers of 16 floats) 12 rows x 2 vectors, AVX and AVX2 (16 registers of 8) 6 x 2, anything else (16 bytes) 6 x 2;
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
    static const int VL = VBYTES / (int)sizeof(T);  // numbers per vector
    static const int MR = MR_, NV = NV_, NR = NV * VL;
    static const int KC = 256;                      // K block: one B panel, KC x NR, stays in L1
    static const int MC = 16 * MR;                  // rows of A a thread packs at once (at most)
    static const int NC = 16 * 256;                 // columns of B packed at once (a multiple of NR)
};
#if defined(__AVX512F__)
template <typename T> using Native = Tile<T, 64, 12, 2>;  // 32 registers: 24 accumulators, 2 of B, 1 of A
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

// C (M, N) += A (M, K) @ B (K, N), packed; see the top of this file
template <typename T, typename S = Native<T>>
static void gemm_packed(T* c, size_t ldc, const T* a, size_t sam, size_t sak, const T* b, size_t sbk, size_t sbn,
                        int M, int N, int K) {
    if (M <= 0 || N <= 0 || K <= 0) return;
    const int MR = S::MR, NR = S::NR, KC = S::KC, NC = S::NC;
    int threads = 1;
#ifdef _OPENMP
    // a small product on one thread: below about a million multiply-adds (tens of microseconds) the threads' start
    // and their two barriers a block cost more than they share (and much more where the cores are busy)
    if (!omp_in_parallel() && (double)M * N * K >= (1 << 20)) threads = omp_get_max_threads();
#endif
    // the rows in blocks of at most S::MC, as many blocks as a multiple of the threads, as even as the strips of
    // MR rows allow (the blocks only say which thread does which rows, not how anything is summed)
    int mblocks = (M + S::MC - 1) / S::MC;
    mblocks = (mblocks + threads - 1) / threads * threads;
    int mc = ((M + mblocks - 1) / mblocks + MR - 1) / MR * MR;
    mblocks = (M + mc - 1) / mc;
    int npanels_max = (NC < N ? NC : (N + NR - 1) / NR * NR) / NR;
    // where there are fewer row blocks than threads, the panels of a block are shared out too
    int groups = mblocks >= threads ? 1 : (threads + mblocks - 1) / mblocks;
    if (groups > npanels_max) groups = npanels_max;
    static T* bpack = nullptr;
    static size_t bhave = 0;
    static T** apack = nullptr;
    static size_t* ahave = nullptr;
    static int athreads = 0;
    T* bp = scratch<T>(&bpack, &bhave, (size_t)KC * npanels_max * NR);
    if (threads > athreads) {
        apack = (T**)realloc(apack, threads * sizeof(T*));
        ahave = (size_t*)realloc(ahave, threads * sizeof(size_t));
        if (!apack || !ahave) fail("out of memory for the matrix products' packing pointers");
        for (int t = athreads; t < threads; t++) apack[t] = nullptr, ahave[t] = 0;
        athreads = threads;
    }
    for (int t = 0; t < threads; t++) scratch<T>(&apack[t], &ahave[t], (size_t)KC * S::MC);

#pragma omp parallel num_threads(threads)
    {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        T* ap = apack[tid];
        for (int j0 = 0; j0 < N; j0 += NC) {
            int nc = N - j0 < NC ? N - j0 : NC, npanels = (nc + NR - 1) / NR;
            for (int k0 = 0; k0 < K; k0 += KC) {
                int kc = K - k0 < KC ? K - k0 : KC;
                // pack B (kc x nc) in panels of NR columns: panel p holds B(k0 + k, j0 + p NR + j) at k NR + j
#pragma omp for schedule(static)
                for (int p = 0; p < npanels; p++) {
                    T* dst = bp + (size_t)p * KC * NR;
                    int jn = nc - p * NR < NR ? nc - p * NR : NR;
                    for (int k = 0; k < kc; k++) {
                        const T* src = b + (size_t)(k0 + k) * sbk + (size_t)(j0 + p * NR) * sbn;
                        int j = 0;
                        if (sbn == 1)
                            for (; j < jn; j++) dst[(size_t)k * NR + j] = src[j];
                        else
                            for (; j < jn; j++) dst[(size_t)k * NR + j] = src[(size_t)j * sbn];
                        for (; j < NR; j++) dst[(size_t)k * NR + j] = 0;
                    }
                }  // the implicit barrier: B is packed before anyone uses it
#pragma omp for schedule(static)
                for (int item = 0; item < mblocks * groups; item++) {
                    int m0 = (item / groups) * mc, g = item % groups;
                    int mb = M - m0 < mc ? M - m0 : mc, strips = (mb + MR - 1) / MR;
                    int p0 = (int)((long)npanels * g / groups), p1 = (int)((long)npanels * (g + 1) / groups);
                    // pack A's rows m0 .. m0 + mb (x kc) in strips of MR rows: strip s holds A(m0 + s MR + r,
                    // k0 + k) at k MR + r; where A is row-major (sak 1), or column-major (sam 1) with few panels to
                    // pass, only a last strip of fewer than MR rows (the others are read where they lie: micro's
                    // ROWS and COLS; a strip read whole there would read past A's last row). A column-major strip
                    // is KC short runs far apart: read again for each of many panels (d12's 48 and more) it costs
                    // more than its copy once (tests/bench_gemm, one thread: dweight 11-21% slower at d12 read
                    // where it lies; 19-26% faster at 64 channels, 4 panels; 0-5% at 16 panels)
                    const int at = sak == 1 ? ROWS : sam == 1 && npanels <= 16 ? COLS : PACKED;
                    for (int s = at != PACKED ? mb / MR : 0; s < strips; s++) {
                        T* dst = ap + (size_t)s * KC * MR;
                        int rn = mb - s * MR < MR ? mb - s * MR : MR;
                        for (int k = 0; k < kc; k++) {
                            const T* src = a + (size_t)(m0 + s * MR) * sam + (size_t)(k0 + k) * sak;
                            int r = 0;
                            for (; r < rn; r++) dst[(size_t)k * MR + r] = src[(size_t)r * sam];
                            for (; r < MR; r++) dst[(size_t)k * MR + r] = 0;
                        }
                    }
                    for (int p = p0; p < p1; p++) {  // each B panel (in L1) against every strip of the A block
                        int jn = nc - p * NR < NR ? nc - p * NR : NR;
                        for (int s = 0; s < strips; s++) {
                            int rn = mb - s * MR < MR ? mb - s * MR : MR;
                            T* cij = c + (size_t)(m0 + s * MR) * ldc + j0 + p * NR;
                            const T *as = ap + (size_t)s * KC * MR, *bs = bp + (size_t)p * KC * NR;
                            // the strip where it lies
                            const T* ad = a + (size_t)(m0 + s * MR) * sam + (size_t)k0 * sak;
                            if (at == ROWS && rn == MR) {
                                if (jn == NR)
                                    micro<T, S, ROWS>(kc, ad, sam, bs, cij, ldc);
                                else
                                    micro_edge<T, S, ROWS>(kc, ad, sam, bs, cij, ldc, rn, jn);
                            } else if (at == COLS && rn == MR) {
                                if (jn == NR)
                                    micro<T, S, COLS>(kc, ad, sak, bs, cij, ldc);
                                else
                                    micro_edge<T, S, COLS>(kc, ad, sak, bs, cij, ldc, rn, jn);
                            } else if (rn == MR && jn == NR)
                                micro<T, S>(kc, as, 0, bs, cij, ldc);
                            else
                                micro_edge<T, S>(kc, as, 0, bs, cij, ldc, rn, jn);
                        }
                    }
                }  // the implicit barrier: every tile is done with this block of B before it is packed again
            }
        }
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

}  // namespace gemm_cpu
