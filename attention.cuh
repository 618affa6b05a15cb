/*
attention.cuh: causal self-attention without the T x T matrix ("flash attention": Dao et al. 2022, with the
backward pass of FlashAttention-2), the portable version: float32 math on CUDA cores, tiles in shared memory, any
head size up to FLASH_MAX_HEAD_SIZE. It runs in the emulator (tools/emulate_gpu.sh), so the algorithm itself is
verified without a GPU; a tensor-core version would keep these three kernels' structure and tests.

Per (batch b, head h), with q, k, v (T, hs) and scale = 1/sqrt(hs):

    s_ij = scale * q_i . k_j   for j <= i (causal)          p_ij = exp(s_ij - lse_i),  lse_i = log sum_j exp(s_ij)
    out_i = sum_j p_ij v_j

Forward (online softmax). The keys come in tiles; a query row keeps its running max m, its running sum l of
exp(s - m) and its unnormalized output o. A new tile with scores s_j: m' = max(m, max_j s_j), then
l = l exp(m - m') + sum_j exp(s_j - m') and o = o exp(m - m') + sum_j exp(s_j - m') v_j. At the end out = o / l,
and lse = m + log l is kept (one float a row) for the backward pass: it gives every p_ij back from s_ij alone.

Backward. With dout_i = dL/dout_i and D_i = dout_i . out_i (= sum_j p_ij dp_ij):

    dp_ij = dout_i . v_j        ds_ij = p_ij (dp_ij - D_i)      (the softmax's backward)
    dv_j = sum_i p_ij dout_i    dk_j = scale sum_i ds_ij q_i    dq_i = scale sum_j ds_ij k_j

dk and dv are sums over queries, dq over keys. So the backward pass is two kernels: one owns a tile of keys and
walks the queries that see them (dk, dv), the other owns a tile of queries and walks their keys (dq). Each
recomputes p and ds for its pairs; no sum is shared between blocks, so there are no atomics and the result
repeats bit for bit.

The three kernels share one shape. A block owns FLASH_OWN rows (queries, or keys) of one (b, h): warp w owns rows
w * FLASH_ROWS_PER_WARP ... and keeps their accumulators in registers, lane l the head channels l, l + 32, ...
(at most FLASH_MAX_HEAD_SIZE / 32 of them). The other side comes in tiles of 32 rows in shared memory, one row
per lane: lane l computes the dot products of its tile row with the warp's own row (s, dp), the warp reduces or
shares them (warp_max, warp_sum, a row of shared memory), and each lane adds its channels' share of the weighted
sum over the tile. Shared rows are padded to hs + 1 floats so that the lanes' walks along different rows hit
different banks.

Layouts: q, k, v, dq, dk, dv (B, NH, T, hs) (attention_forward's permute, bias added); out and dout (B, T, C)
with head h at channels h hs .. h hs + hs - 1; lse and D (B, NH, T), float32.
*/
#pragma once
#include "cuda_common.cuh"
// the bf16 build multiplies on tensor cores (WMMA) where the head size allows; -DNO_TENSOR_CORE_ATTENTION keeps the
// portable kernels everywhere (what the emulator runs in the fp32 build)
#if !defined(ENABLE_FP32) && !defined(NO_TENSOR_CORE_ATTENTION)
#define FLASH_TENSOR_CORES 1
#include <mma.h>
#else
#define FLASH_TENSOR_CORES 0
#endif

// tests only: 1 makes the launchers below take the portable kernels even where tensor cores could run
static int flash_force_portable = 0;

static const int FLASH_WARPS = 4, FLASH_ROWS_PER_WARP = 4;
static const int FLASH_OWN = FLASH_WARPS * FLASH_ROWS_PER_WARP;  // rows a block owns
static const int FLASH_TILE = 32;                                // rows of the other side per tile: one per lane
static const int FLASH_MAX_HEAD_SIZE = 128;
static const int FLASH_DIMS = FLASH_MAX_HEAD_SIZE / 32;          // head channels per lane, at most

// the dot product of two rows of hs floats in shared memory
__device__ inline float dot_shared(const float* a, const float* b, int hs) {
    float s = 0.0f;
    for (int d = 0; d < hs; d++) s += a[d] * b[d];
    return s;
}

// rows [r0, r0 + rows) of a (T, hs) head matrix (rows at stride hs) into shared memory at stride hs + 1, as float;
// rows past T become 0. Every thread of the block takes part.
__device__ inline void load_tile(float* dst, const floatX* src, int r0, int rows, int T, int hs) {
    for (int idx = threadIdx.x; idx < rows * hs; idx += blockDim.x) {
        int r = idx / hs, d = idx % hs;
        dst[r * (hs + 1) + d] = r0 + r < T ? (float)src[(size_t)(r0 + r) * hs + d] : 0.0f;
    }
}

// the same for rows of a (T, C) matrix with head h's hs channels at offset h * hs (out, dout)
__device__ inline void load_tile_btc(float* dst, const floatX* src, int r0, int rows, int T, int C, int hs) {
    for (int idx = threadIdx.x; idx < rows * hs; idx += blockDim.x) {
        int r = idx / hs, d = idx % hs;
        dst[r * (hs + 1) + d] = r0 + r < T ? (float)src[(size_t)(r0 + r) * C + d] : 0.0f;
    }
}

// sum over the FLASH_TILE rows i of a tile in shared memory of w[i] * tile[i][d]: a warp's row of 32 weights (p or
// ds) times channel d of the tile (v, dout, q or k)
__device__ inline float weighted_tile_sum(const float* w, const float* tile, int stride, int d) {
    float s = 0.0f;
    for (int i = 0; i < FLASH_TILE; i++) s += w[i] * tile[i * stride + d];
    return s;
}

// a warp's accumulator rows (row j: head row r0 + j; lane owns channels lane + 32 e) times scale into a (T, hs)
// head matrix; rows past T are skipped
__device__ inline void store_warp_rows(floatX* dst, const float (&acc)[FLASH_ROWS_PER_WARP][FLASH_DIMS], int r0,
                                       int T, int hs, float scale) {
    int lane = threadIdx.x % 32;
    #pragma unroll
    for (int j = 0; j < FLASH_ROWS_PER_WARP; j++) {
        if (r0 + j >= T) continue;
        #pragma unroll
        for (int e = 0; e < FLASH_DIMS; e++) {
            int d = lane + 32 * e;
            if (d < hs) dst[(size_t)(r0 + j) * hs + d] = (floatX)(scale * acc[j][e]);
        }
    }
}

// ----------------------------------------------------------------------------------------------------------------
// forward: block (query tile, h, b) owns FLASH_OWN queries; key tiles of 32 from 0 up to its last query.
// Shared: Qs (FLASH_OWN rows), Ks and Vs (32 rows each), Ps (a row of 32 weights per warp).

__global__ void __launch_bounds__(FLASH_WARPS * 32)
    flash_attention_forward_kernel(floatX* out, float* lse, const floatX* q, const floatX* k, const floatX* v, int T,
                                   int NH, int hs, float scale) {
    DYNAMIC_SHARED(float, smem);
    int stride = hs + 1, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float *Qs = smem, *Ks = Qs + FLASH_OWN * stride, *Vs = Ks + FLASH_TILE * stride, *Ps = Vs + FLASH_TILE * stride;
    int h = blockIdx.y, b = blockIdx.z, C = NH * hs, q0 = blockIdx.x * FLASH_OWN;
    size_t head = ((size_t)b * NH + h) * T;  // row 0 of this (b, h) in the (B, NH, T, ...) arrays
    load_tile(Qs, q + head * hs, q0, FLASH_OWN, T, hs);

    float m[FLASH_ROWS_PER_WARP], l[FLASH_ROWS_PER_WARP], o[FLASH_ROWS_PER_WARP][FLASH_DIMS];
    #pragma unroll
    for (int j = 0; j < FLASH_ROWS_PER_WARP; j++) {
        m[j] = -INFINITY;
        l[j] = 0.0f;
        #pragma unroll
        for (int e = 0; e < FLASH_DIMS; e++) o[j][e] = 0.0f;
    }
    int last = min(T, q0 + FLASH_OWN) - 1;  // the block's last query: keys 0..last matter
    for (int k0 = 0; k0 <= last; k0 += FLASH_TILE) {
        __syncthreads();  // everyone is done with the previous tile
        load_tile(Ks, k + head * hs, k0, FLASH_TILE, T, hs);
        load_tile(Vs, v + head * hs, k0, FLASH_TILE, T, hs);
        __syncthreads();
        #pragma unroll
        for (int j = 0; j < FLASH_ROWS_PER_WARP; j++) {
            int r = warp * FLASH_ROWS_PER_WARP + j, t = q0 + r;  // the warp's query row
            if (t >= T || k0 > t) continue;                       // the same for the whole warp
            int key = k0 + lane;
            float s = key <= t ? scale * dot_shared(Qs + r * stride, Ks + lane * stride, hs) : -INFINITY;
            float m_new = fmaxf(m[j], warp_max(s));  // finite: key k0 <= t is in the tile
            float p = key <= t ? expf(s - m_new) : 0.0f;
            float correction = expf(m[j] - m_new);  // 0 at the first tile (m = -inf)
            l[j] = l[j] * correction + warp_sum(p);
            m[j] = m_new;
            Ps[warp * 32 + lane] = p;
            __syncwarp();
            #pragma unroll
            for (int e = 0; e < FLASH_DIMS; e++) {
                int d = lane + 32 * e;
                if (d >= hs) break;
                o[j][e] = o[j][e] * correction + weighted_tile_sum(Ps + warp * 32, Vs, stride, d);
            }
            __syncwarp();  // Ps is rewritten by the next row
        }
    }
    #pragma unroll
    for (int j = 0; j < FLASH_ROWS_PER_WARP; j++) {
        int t = q0 + warp * FLASH_ROWS_PER_WARP + j;
        if (t >= T) continue;
        #pragma unroll
        for (int e = 0; e < FLASH_DIMS; e++) {
            int d = lane + 32 * e;
            if (d < hs) out[((size_t)b * T + t) * C + h * hs + d] = (floatX)(o[j][e] / l[j]);
        }
        if (lane == 0) lse[head + t] = m[j] + logf(l[j]);
    }
}

// ----------------------------------------------------------------------------------------------------------------
// backward, step 1: D_i = dout_i . out_i, warp per (b, h, t) row

__global__ void flash_attention_backward_d_kernel(float* D, const floatX* out, const floatX* dout, int B, int T,
                                                  int NH, int hs) {
    size_t row = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;  // (b, h, t)
    int lane = threadIdx.x % 32;
    if (row >= (size_t)B * NH * T) return;  // the whole warp leaves together
    int t = (int)(row % T), h = (int)(row / T % NH), b = (int)(row / ((size_t)T * NH)), C = NH * hs;
    size_t off = ((size_t)b * T + t) * C + h * hs;
    float s = 0.0f;
    for (int d = lane; d < hs; d += 32) s += (float)dout[off + d] * (float)out[off + d];
    s = warp_sum(s);
    if (lane == 0) D[row] = s;
}

// backward, step 2: block (key tile, h, b) owns FLASH_OWN keys and walks the query tiles that can see them.
// Shared: Ks, Vs (own), Qs, dOs (32 rows each), lse and D of the query tile, Ps and dSs (a row of 32 per warp).
__global__ void __launch_bounds__(FLASH_WARPS * 32)
    flash_attention_backward_kv_kernel(floatX* dk, floatX* dv, const floatX* dout, const floatX* q, const floatX* k,
                                       const floatX* v, const float* lse, const float* D, int T, int NH, int hs,
                                       float scale) {
    DYNAMIC_SHARED(float, smem);
    int stride = hs + 1, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float *Ks = smem, *Vs = Ks + FLASH_OWN * stride, *Qs = Vs + FLASH_OWN * stride, *dOs = Qs + FLASH_TILE * stride;
    float *lse_s = dOs + FLASH_TILE * stride, *D_s = lse_s + FLASH_TILE, *Ps = D_s + FLASH_TILE;
    float* dSs = Ps + FLASH_WARPS * 32;
    int h = blockIdx.y, b = blockIdx.z, C = NH * hs, k0 = blockIdx.x * FLASH_OWN;
    size_t head = ((size_t)b * NH + h) * T;
    load_tile(Ks, k + head * hs, k0, FLASH_OWN, T, hs);
    load_tile(Vs, v + head * hs, k0, FLASH_OWN, T, hs);

    float dk_acc[FLASH_ROWS_PER_WARP][FLASH_DIMS], dv_acc[FLASH_ROWS_PER_WARP][FLASH_DIMS];
    #pragma unroll
    for (int j = 0; j < FLASH_ROWS_PER_WARP; j++)
        #pragma unroll
        for (int e = 0; e < FLASH_DIMS; e++) dk_acc[j][e] = dv_acc[j][e] = 0.0f;
    for (int q0 = k0 / FLASH_TILE * FLASH_TILE; q0 < T; q0 += FLASH_TILE) {  // queries before k0 see none
        __syncthreads();
        load_tile(Qs, q + head * hs, q0, FLASH_TILE, T, hs);
        load_tile_btc(dOs, dout + (size_t)b * T * C + h * hs, q0, FLASH_TILE, T, C, hs);
        for (int i = threadIdx.x; i < FLASH_TILE; i += blockDim.x) {
            lse_s[i] = q0 + i < T ? lse[head + q0 + i] : 0.0f;
            D_s[i] = q0 + i < T ? D[head + q0 + i] : 0.0f;
        }
        __syncthreads();
        #pragma unroll
        for (int j = 0; j < FLASH_ROWS_PER_WARP; j++) {
            int r = warp * FLASH_ROWS_PER_WARP + j, key = k0 + r;  // the warp's key
            if (key >= T || q0 + FLASH_TILE - 1 < key) continue;   // no query of the tile sees it
            int i = q0 + lane;                                     // the lane's query
            float p = 0.0f, ds = 0.0f;
            if (i < T && i >= key) {
                float s = scale * dot_shared(Qs + lane * stride, Ks + r * stride, hs);
                p = expf(s - lse_s[lane]);
                float dp = dot_shared(dOs + lane * stride, Vs + r * stride, hs);
                ds = p * (dp - D_s[lane]);
            }
            Ps[warp * 32 + lane] = p;
            dSs[warp * 32 + lane] = ds;
            __syncwarp();
            #pragma unroll
            for (int e = 0; e < FLASH_DIMS; e++) {
                int d = lane + 32 * e;
                if (d >= hs) break;
                float sv = 0.0f, sk = 0.0f;  // both sums in one pass over the tile
                for (int ii = 0; ii < FLASH_TILE; ii++) {
                    sv += Ps[warp * 32 + ii] * dOs[ii * stride + d];
                    sk += dSs[warp * 32 + ii] * Qs[ii * stride + d];
                }
                dv_acc[j][e] += sv;
                dk_acc[j][e] += sk;
            }
            __syncwarp();
        }
    }
    store_warp_rows(dk + head * hs, dk_acc, k0 + warp * FLASH_ROWS_PER_WARP, T, hs, scale);
    store_warp_rows(dv + head * hs, dv_acc, k0 + warp * FLASH_ROWS_PER_WARP, T, hs, 1.0f);
}

// backward, step 3: block (query tile, h, b) owns FLASH_OWN queries and walks their key tiles: dq.
// Shared: Qs, dOs (own), Ks, Vs (32 rows each), dSs (a row of 32 per warp).
__global__ void __launch_bounds__(FLASH_WARPS * 32)
    flash_attention_backward_q_kernel(floatX* dq, const floatX* dout, const floatX* q, const floatX* k,
                                      const floatX* v, const float* lse, const float* D, int T, int NH, int hs,
                                      float scale) {
    DYNAMIC_SHARED(float, smem);
    int stride = hs + 1, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float *Qs = smem, *dOs = Qs + FLASH_OWN * stride, *Ks = dOs + FLASH_OWN * stride, *Vs = Ks + FLASH_TILE * stride;
    float* dSs = Vs + FLASH_TILE * stride;
    int h = blockIdx.y, b = blockIdx.z, C = NH * hs, q0 = blockIdx.x * FLASH_OWN;
    size_t head = ((size_t)b * NH + h) * T;
    load_tile(Qs, q + head * hs, q0, FLASH_OWN, T, hs);
    load_tile_btc(dOs, dout + (size_t)b * T * C + h * hs, q0, FLASH_OWN, T, C, hs);

    float dq_acc[FLASH_ROWS_PER_WARP][FLASH_DIMS], lse_t[FLASH_ROWS_PER_WARP], D_t[FLASH_ROWS_PER_WARP];
    #pragma unroll
    for (int j = 0; j < FLASH_ROWS_PER_WARP; j++) {
        int t = q0 + warp * FLASH_ROWS_PER_WARP + j;
        lse_t[j] = t < T ? lse[head + t] : 0.0f;
        D_t[j] = t < T ? D[head + t] : 0.0f;
        #pragma unroll
        for (int e = 0; e < FLASH_DIMS; e++) dq_acc[j][e] = 0.0f;
    }
    int last = min(T, q0 + FLASH_OWN) - 1;
    for (int k0 = 0; k0 <= last; k0 += FLASH_TILE) {
        __syncthreads();
        load_tile(Ks, k + head * hs, k0, FLASH_TILE, T, hs);
        load_tile(Vs, v + head * hs, k0, FLASH_TILE, T, hs);
        __syncthreads();
        #pragma unroll
        for (int j = 0; j < FLASH_ROWS_PER_WARP; j++) {
            int r = warp * FLASH_ROWS_PER_WARP + j, t = q0 + r;
            if (t >= T || k0 > t) continue;
            int key = k0 + lane;
            float ds = 0.0f;
            if (key <= t) {
                float s = scale * dot_shared(Qs + r * stride, Ks + lane * stride, hs);
                float p = expf(s - lse_t[j]);
                float dp = dot_shared(dOs + r * stride, Vs + lane * stride, hs);
                ds = p * (dp - D_t[j]);
            }
            dSs[warp * 32 + lane] = ds;
            __syncwarp();
            #pragma unroll
            for (int e = 0; e < FLASH_DIMS; e++) {
                int d = lane + 32 * e;
                if (d >= hs) break;
                dq_acc[j][e] += weighted_tile_sum(dSs + warp * 32, Ks, stride, d);
            }
            __syncwarp();
        }
    }
    store_warp_rows(dq + head * hs, dq_acc, q0 + warp * FLASH_ROWS_PER_WARP, T, hs, scale);
}

#if FLASH_TENSOR_CORES
// ----------------------------------------------------------------------------------------------------------------
// The same three kernels on bf16 tensor cores (WMMA, 16x16x16 tiles, float32 accumulators), for head sizes
// hs = 16 DN with DN = 1, 2, 3, 4 or 8 (GPT-2: 64). A block of 4 warps owns 64 rows (16 a warp) and walks tiles of
// 64 rows of the other side; all tiles sit in shared memory as bf16 rows of hs + 8 (the padding spreads the rows
// over the banks and keeps every 16x16 sub-tile 32-byte aligned, as WMMA needs). Each warp multiplies its 16 rows
// by the tile on tensor cores into a 16 x 64 float scratch of its own, then works on that scratch element by
// element with a known owner: the lanes 2r and 2r + 1 own row r, each one half of the 64 columns (and one half of
// the head channels of the output). A fragment's layout over the lanes is unspecified, so nothing here reads one
// directly: products go through the scratch, and the per-row rescaling of the forward's output is done on the
// lane-owned copy in registers. p and ds are rounded to bf16 for the products with v, dout, q, k (FlashAttention
// does the same); every sum is float32. The math is the portable kernels' (the comments above).

namespace wmma = nvcuda::wmma;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, floatX, wmma::row_major> FragA;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, floatX, wmma::row_major> FragB;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, floatX, wmma::col_major> FragBt;  // a row-major tile, transposed
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> FragC;

static const int TC_WARPS = 4, TC_OWN = 64, TC_TILE = 64;

// shared memory strides: bf16 tiles (rows of hs), per-warp float scratch (16 rows), per-warp bf16 p/ds (16 rows)
template <int DN> struct TcShape {
    static const int HS = 16 * DN, LDX = HS + 8, LDF = (HS > TC_TILE ? HS : TC_TILE) + 4, LDP = TC_TILE + 8;
    static const int TILE = TC_TILE * LDX;  // elements of one bf16 tile
    static const int SCRATCH = 16 * LDF;    // floats of one warp's scratch
    static const int PW = 16 * LDP;         // elements of one warp's bf16 p (or ds)
};

// The lane-owned passes over a warp's scratch: lanes 2r and 2r + 1 (half = lane % 2) own row r, each n of its
// columns (n = 32 of the 64, or HS/2 channels), and all 32 lanes step through their n together. Started at the same
// column, they would collide in the shared-memory banks: LDF is 4 mod 32 floats, so rows r and r + 8 fall on the
// same bank, and so do the two halves (32 or HS/2 columns apart): 4 lanes a bank, 4 passes for each access. So each
// lane starts its walk at its own offset, 2 (r / 8) + half, and wraps around: row r's bank is 4 (r % 8), the offset
// adds 0..3, and the 32 lanes land on 32 banks. (The bf16 p and ds rows, LDP = 36 words, still pair up 2 a bank.)
// The lane's column at step s of the pass (of its n): tc_column(s, tc_offset(r, half), n).
__device__ inline int tc_offset(int r, int half) { return 2 * (r / 8) + half; }
__device__ inline int tc_column(int s, int offset, int n) { return s + offset < n ? s + offset : s + offset - n; }

// rows [r0, r0 + 64) of a head matrix (row stride src_stride, hs channels) into a shared tile, 16 bytes at a time;
// rows past T become 0. Every thread of the block takes part.
template <int DN>
__device__ inline void tc_load_tile(floatX* dst, const floatX* src, size_t src_stride, int r0, int T) {
    const int chunks = 2 * DN, LDX = TcShape<DN>::LDX;  // 8 channels a chunk
    for (int idx = threadIdx.x; idx < TC_TILE * chunks; idx += blockDim.x) {
        int r = idx / chunks, c = idx % chunks * 8;
        RowPack v;
        if (r0 + r < T) v = *(const RowPack*)(src + (size_t)(r0 + r) * src_stride + c);
        else for (int j = 0; j < 8; j++) v.v[j] = (floatX)0.0f;
        *(RowPack*)(dst + r * LDX + c) = v;
    }
}

// out (16 x 64, the warp's scratch) = A (16 rows of hs, row-major) B^T (64 rows of hs, row-major): 16 x 64 dot
// products over the head channels
template <int DN>
__device__ inline void tc_rows_times_tile_t(float* out, const floatX* A, const floatX* B) {
    const int LDX = TcShape<DN>::LDX, LDF = TcShape<DN>::LDF;
    constexpr int KEEP = DN <= 4 ? DN : 1;  // the warp's rows stay in registers for the 4 column blocks up to hs 64
    FragA kept[KEEP];
    if (DN <= 4) {
#pragma unroll
        for (int d = 0; d < KEEP; d++) wmma::load_matrix_sync(kept[d], A + d * 16, LDX);
    }
#pragma unroll
    for (int n = 0; n < TC_TILE / 16; n++) {
        FragC acc;
        wmma::fill_fragment(acc, 0.0f);
#pragma unroll
        for (int d = 0; d < DN; d++) {
            FragBt bt;
            wmma::load_matrix_sync(bt, B + n * 16 * LDX + d * 16, LDX);
            if (DN <= 4) {
                wmma::mma_sync(acc, kept[d % KEEP], bt, acc);
            } else {  // hs 128: reloading the rows is cheaper than the registers they would take
                FragA a;
                wmma::load_matrix_sync(a, A + d * 16, LDX);
                wmma::mma_sync(acc, a, bt, acc);
            }
        }
        wmma::store_matrix_sync(out + n * 16, acc, LDF, wmma::mem_row_major);
    }
}

// acc[dn] += P (16 x 64, bf16, row-major, stride LDP) M (64 rows of hs, row-major): the warp's 16 rows of a
// weighted sum over the tile
template <int DN>
__device__ inline void tc_weights_times_tile(FragC (&acc)[DN], const floatX* P, const floatX* M) {
    const int LDX = TcShape<DN>::LDX, LDP = TcShape<DN>::LDP;
#pragma unroll
    for (int dn = 0; dn < DN; dn++)
#pragma unroll
        for (int kk = 0; kk < TC_TILE / 16; kk++) {
            FragA a;
            FragB bm;
            wmma::load_matrix_sync(a, P + kk * 16, LDP);
            wmma::load_matrix_sync(bm, M + kk * 16 * LDX + dn * 16, LDX);
            wmma::mma_sync(acc[dn], a, bm, acc[dn]);
        }
}

// forward: block (64 queries, h, b); shared: Qs, Ks, Vs tiles, then per warp the float scratch and the bf16 p
template <int DN>
__global__ void __launch_bounds__(TC_WARPS * 32)
    flash_tc_forward_kernel(floatX* out, float* lse, const floatX* q, const floatX* k, const floatX* v, int T,
                            int NH, float scale) {
    typedef TcShape<DN> S;
    DYNAMIC_SHARED(unsigned char, smem);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    floatX *Qs = (floatX*)smem, *Ks = Qs + S::TILE, *Vs = Ks + S::TILE;
    float* Sf = (float*)(Vs + S::TILE) + warp * S::SCRATCH;
    floatX* Pw = (floatX*)((float*)(Vs + S::TILE) + TC_WARPS * S::SCRATCH) + warp * S::PW;
    int h = blockIdx.y, b = blockIdx.z, C = NH * S::HS, q0 = blockIdx.x * TC_OWN;
    size_t head = ((size_t)b * NH + h) * T;
    tc_load_tile<DN>(Qs, q + head * S::HS, S::HS, q0, T);

    // lanes 2r, 2r + 1: row r of the warp's queries; key columns half * 32 .. + 31; output channels half * HS/2 ..,
    // o[c] holding channel half * HS/2 + tc_column(c, offset, HS/2)
    int r = lane / 2, half = lane % 2, t = q0 + warp * 16 + r, offset = tc_offset(r, half);
    float m = -INFINITY, l = 0.0f, o[S::HS / 2];
#pragma unroll
    for (int c = 0; c < S::HS / 2; c++) o[c] = 0.0f;
    int last = min(T, q0 + TC_OWN) - 1;
    for (int k0 = 0; k0 <= last; k0 += TC_TILE) {  // k0 <= q0: every row of the block sees key k0
        __syncthreads();
        tc_load_tile<DN>(Ks, k + head * S::HS, S::HS, k0, T);
        tc_load_tile<DN>(Vs, v + head * S::HS, S::HS, k0, T);
        __syncthreads();
        if (q0 + warp * 16 >= T) continue;  // the warp's rows are all past T (the same for the whole warp)
        tc_rows_times_tile_t<DN>(Sf, Qs + warp * 16 * S::LDX, Ks);  // q . k for the warp's 16 rows x 64 keys
        __syncwarp();
        float* srow = Sf + r * S::LDF;
        float mx = -INFINITY;
        for (int step = 0; step < 32; step++) {
            int j = half * 32 + tc_column(step, offset, 32), key = k0 + j;
            srow[j] = key <= t && key < T ? scale * srow[j] : -INFINITY;
            mx = fmaxf(mx, srow[j]);
        }
        float m_new = fmaxf(m, fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 1)));  // finite: key k0 is seen
        float correction = expf(m - m_new), sum = 0.0f;
        for (int step = 0; step < 32; step++) {
            int j = half * 32 + tc_column(step, offset, 32);
            float p = expf(srow[j] - m_new);
            Pw[r * S::LDP + j] = (floatX)p;
            sum += p;
        }
        l = l * correction + sum + __shfl_xor_sync(FULL_MASK, sum, 1);
        m = m_new;
        __syncwarp();
        FragC pv[DN];
#pragma unroll
        for (int dn = 0; dn < DN; dn++) wmma::fill_fragment(pv[dn], 0.0f);
        tc_weights_times_tile<DN>(pv, Pw, Vs);  // p v for the warp's rows, into the scratch
#pragma unroll
        for (int dn = 0; dn < DN; dn++) wmma::store_matrix_sync(Sf + dn * 16, pv[dn], S::LDF, wmma::mem_row_major);
        __syncwarp();
#pragma unroll
        for (int c = 0; c < S::HS / 2; c++)
            o[c] = o[c] * correction + srow[half * (S::HS / 2) + tc_column(c, offset, S::HS / 2)];
        __syncwarp();  // the scratch is rewritten by the next tile
    }
    if (t < T) {
#pragma unroll
        for (int c = 0; c < S::HS / 2; c++)
            out[((size_t)b * T + t) * C + h * S::HS + half * (S::HS / 2) + tc_column(c, offset, S::HS / 2)] =
                (floatX)(o[c] / l);
        if (half == 0) lse[head + t] = m + logf(l);
    }
}

// backward dk, dv: block (64 keys, h, b) walks the query tiles from its first key on. Shared: Ks, Vs (own), Qs,
// dOs (the query tile), lse and D of the tile, then per warp two float scratches (s, dp) and bf16 p and ds.
template <int DN>
__global__ void __launch_bounds__(TC_WARPS * 32)
    flash_tc_backward_kv_kernel(floatX* dk, floatX* dv, const floatX* dout, const floatX* q, const floatX* k,
                                const floatX* v, const float* lse, const float* D, int T, int NH, float scale) {
    typedef TcShape<DN> S;
    DYNAMIC_SHARED(unsigned char, smem);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    floatX *Ks = (floatX*)smem, *Vs = Ks + S::TILE, *Qs = Vs + S::TILE, *dOs = Qs + S::TILE;
    float *lse_s = (float*)(dOs + S::TILE), *D_s = lse_s + TC_TILE;
    float* Sf = D_s + TC_TILE + warp * 2 * S::SCRATCH;
    float* dPf = Sf + S::SCRATCH;
    floatX* Pw = (floatX*)(D_s + TC_TILE + TC_WARPS * 2 * S::SCRATCH) + warp * 2 * S::PW;
    floatX* dSw = Pw + S::PW;
    int h = blockIdx.y, b = blockIdx.z, C = NH * S::HS, k0 = blockIdx.x * TC_OWN;
    size_t head = ((size_t)b * NH + h) * T;
    tc_load_tile<DN>(Ks, k + head * S::HS, S::HS, k0, T);
    tc_load_tile<DN>(Vs, v + head * S::HS, S::HS, k0, T);
    int r = lane / 2, half = lane % 2, key = k0 + warp * 16 + r;  // lanes 2r, 2r + 1: the warp's key row r
    int offset = tc_offset(r, half);
    FragC dk_acc[DN], dv_acc[DN];
#pragma unroll
    for (int dn = 0; dn < DN; dn++) {
        wmma::fill_fragment(dk_acc[dn], 0.0f);
        wmma::fill_fragment(dv_acc[dn], 0.0f);
    }
    for (int q0 = k0; q0 < T; q0 += TC_TILE) {  // queries before k0 see none of the block's keys
        __syncthreads();
        tc_load_tile<DN>(Qs, q + head * S::HS, S::HS, q0, T);
        tc_load_tile<DN>(dOs, dout + (size_t)b * T * C + h * S::HS, C, q0, T);
        for (int i = threadIdx.x; i < TC_TILE; i += blockDim.x) {
            lse_s[i] = q0 + i < T ? lse[head + q0 + i] : 0.0f;
            D_s[i] = q0 + i < T ? D[head + q0 + i] : 0.0f;
        }
        __syncthreads();
        if (k0 + warp * 16 >= T) continue;  // the warp's keys are all past T
        tc_rows_times_tile_t<DN>(Sf, Ks + warp * 16 * S::LDX, Qs);    // k . q: 16 keys x 64 queries
        tc_rows_times_tile_t<DN>(dPf, Vs + warp * 16 * S::LDX, dOs);  // v . dout
        __syncwarp();
        for (int step = 0; step < 32; step++) {
            int j = half * 32 + tc_column(step, offset, 32), i = q0 + j;  // i: the query
            float p = 0.0f, ds = 0.0f;
            if (i >= key && i < T && key < T) {
                p = expf(scale * Sf[r * S::LDF + j] - lse_s[j]);
                ds = p * (dPf[r * S::LDF + j] - D_s[j]);
            }
            Pw[r * S::LDP + j] = (floatX)p;
            dSw[r * S::LDP + j] = (floatX)ds;
        }
        __syncwarp();
        tc_weights_times_tile<DN>(dv_acc, Pw, dOs);  // dv += sum over the queries of p dout
        tc_weights_times_tile<DN>(dk_acc, dSw, Qs);  // dk += sum of ds q (times scale at the end)
        __syncwarp();
    }
    if (k0 + warp * 16 >= T) return;
#pragma unroll
    for (int dn = 0; dn < DN; dn++) {
        wmma::store_matrix_sync(Sf + dn * 16, dk_acc[dn], S::LDF, wmma::mem_row_major);
        wmma::store_matrix_sync(dPf + dn * 16, dv_acc[dn], S::LDF, wmma::mem_row_major);
    }
    __syncwarp();
    if (key < T)
        for (int c = half * (S::HS / 2); c < (half + 1) * (S::HS / 2); c++) {
            dk[(head + key) * S::HS + c] = (floatX)(scale * Sf[r * S::LDF + c]);
            dv[(head + key) * S::HS + c] = (floatX)dPf[r * S::LDF + c];
        }
}

// backward dq: block (64 queries, h, b) walks its key tiles. Shared: Qs, dOs (own), Ks, Vs (the key tile), then per
// warp two float scratches (s, dp) and the bf16 ds.
template <int DN>
__global__ void __launch_bounds__(TC_WARPS * 32)
    flash_tc_backward_q_kernel(floatX* dq, const floatX* dout, const floatX* q, const floatX* k, const floatX* v,
                               const float* lse, const float* D, int T, int NH, float scale) {
    typedef TcShape<DN> S;
    DYNAMIC_SHARED(unsigned char, smem);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    floatX *Qs = (floatX*)smem, *dOs = Qs + S::TILE, *Ks = dOs + S::TILE, *Vs = Ks + S::TILE;
    float* Sf = (float*)(Vs + S::TILE) + warp * 2 * S::SCRATCH;
    float* dPf = Sf + S::SCRATCH;
    floatX* dSw = (floatX*)((float*)(Vs + S::TILE) + TC_WARPS * 2 * S::SCRATCH) + warp * S::PW;
    int h = blockIdx.y, b = blockIdx.z, C = NH * S::HS, q0 = blockIdx.x * TC_OWN;
    size_t head = ((size_t)b * NH + h) * T;
    tc_load_tile<DN>(Qs, q + head * S::HS, S::HS, q0, T);
    tc_load_tile<DN>(dOs, dout + (size_t)b * T * C + h * S::HS, C, q0, T);
    int r = lane / 2, half = lane % 2, t = q0 + warp * 16 + r;  // lanes 2r, 2r + 1: the warp's query row r
    int offset = tc_offset(r, half);
    float lse_t = t < T ? lse[head + t] : 0.0f, D_t = t < T ? D[head + t] : 0.0f;
    FragC dq_acc[DN];
#pragma unroll
    for (int dn = 0; dn < DN; dn++) wmma::fill_fragment(dq_acc[dn], 0.0f);
    int last = min(T, q0 + TC_OWN) - 1;
    for (int k0 = 0; k0 <= last; k0 += TC_TILE) {
        __syncthreads();
        tc_load_tile<DN>(Ks, k + head * S::HS, S::HS, k0, T);
        tc_load_tile<DN>(Vs, v + head * S::HS, S::HS, k0, T);
        __syncthreads();
        if (q0 + warp * 16 >= T) continue;
        tc_rows_times_tile_t<DN>(Sf, Qs + warp * 16 * S::LDX, Ks);    // q . k: 16 queries x 64 keys
        tc_rows_times_tile_t<DN>(dPf, dOs + warp * 16 * S::LDX, Vs);  // dout . v
        __syncwarp();
        for (int step = 0; step < 32; step++) {
            int j = half * 32 + tc_column(step, offset, 32), key = k0 + j;
            float ds = 0.0f;
            if (key <= t && key < T && t < T) {
                float p = expf(scale * Sf[r * S::LDF + j] - lse_t);
                ds = p * (dPf[r * S::LDF + j] - D_t);
            }
            dSw[r * S::LDP + j] = (floatX)ds;
        }
        __syncwarp();
        tc_weights_times_tile<DN>(dq_acc, dSw, Ks);  // dq += sum over the keys of ds k (times scale at the end)
        __syncwarp();
    }
    if (q0 + warp * 16 >= T) return;
#pragma unroll
    for (int dn = 0; dn < DN; dn++) wmma::store_matrix_sync(Sf + dn * 16, dq_acc[dn], S::LDF, wmma::mem_row_major);
    __syncwarp();
    if (t < T)
        for (int c = half * (S::HS / 2); c < (half + 1) * (S::HS / 2); c++)
            dq[(head + t) * S::HS + c] = (floatX)(scale * Sf[r * S::LDF + c]);
}

// bytes of shared memory of each tensor-core kernel
template <int DN> static size_t tc_forward_bytes() {
    typedef TcShape<DN> S;
    return 3 * S::TILE * sizeof(floatX) + TC_WARPS * (S::SCRATCH * sizeof(float) + S::PW * sizeof(floatX));
}
template <int DN> static size_t tc_backward_kv_bytes() {
    typedef TcShape<DN> S;
    return 4 * S::TILE * sizeof(floatX) + 2 * TC_TILE * sizeof(float) +
           TC_WARPS * 2 * (S::SCRATCH * sizeof(float) + S::PW * sizeof(floatX));
}
template <int DN> static size_t tc_backward_q_bytes() {
    typedef TcShape<DN> S;
    return 4 * S::TILE * sizeof(floatX) + TC_WARPS * (2 * S::SCRATCH * sizeof(float) + S::PW * sizeof(floatX));
}
// Whether this device gives a block the shared memory of all three tensor-core kernels at head size 16 DN. At head
// size 128 they need 93, 153 and 143 KB: more than sm_86 and sm_89 allow (99 KB), so there (and for any kernel that
// would not fit) the attention takes the portable kernels, which need at most ~51 KB: slower, never a failed launch.
template <int DN> static bool tc_fits_device() {
    return std::max({tc_forward_bytes<DN>(), tc_backward_kv_bytes<DN>(), tc_backward_q_bytes<DN>()}) <= gpu.smem_optin;
}

// Returns run(std::integral_constant<int, DN>()) for head size 16 DN with DN in 1, 2, 3, 4, 8 (run says whether it
// ran: false where the kernels do not fit the device); false for other sizes
template <typename Run>
static bool with_tc_head_size(int hs, Run run) {
    switch (hs) {
        case 16: return run(std::integral_constant<int, 1>());
        case 32: return run(std::integral_constant<int, 2>());
        case 48: return run(std::integral_constant<int, 3>());
        case 64: return run(std::integral_constant<int, 4>());
        case 128: return run(std::integral_constant<int, 8>());
        default: return false;
    }
}
#endif  // FLASH_TENSOR_CORES

// ----------------------------------------------------------------------------------------------------------------
// launchers

// shared memory of each kernel, in floats: (own rows + tile rows) of hs + 1, plus the per-row and per-warp arrays
static size_t flash_shared_bytes(int own_rows, int tile_rows, int extra, int hs) {
    return ((size_t)(own_rows + tile_rows) * (hs + 1) + extra) * sizeof(float);
}

// Lets `kernel` have `bytes` of dynamic shared memory (beyond the 48 KB every block may have), or fails with one
// line where the device has less per block (the portable kernels need at most ~51 KB, less than any supported GPU
// allows: sm_86 and sm_89 allow 99 KB, sm_80 163 KB, sm_90 227 KB)
template <typename Kernel>
static void flash_allow_shared(Kernel kernel, size_t bytes) {
    if (bytes > gpu.smem_optin)
        fail("flash attention needs %zu bytes of shared memory per block, '%s' allows %zu (use --attention materialized)",
             bytes, gpu.name, gpu.smem_optin);
    cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

static void flash_check_head_size(int hs) {
    if (hs > FLASH_MAX_HEAD_SIZE)
        fail("flash attention supports head sizes up to %d, this model has %d (build without ATTENTION=flash)",
             FLASH_MAX_HEAD_SIZE, hs);
}

// out (B, T, C) and lse (B, NH, T) from q, k, v (B, NH, T, hs)
static void flash_attention_forward(floatX* out, float* lse, const floatX* q, const floatX* k, const floatX* v, int B,
                                    int T, int C, int NH) {
    int hs = C / NH;
    flash_check_head_size(hs);
    float scale = 1.0f / sqrtf((float)hs);
#if FLASH_TENSOR_CORES
    bool done = !flash_force_portable && with_tc_head_size(hs, [&](auto dn) {
        constexpr int DN = decltype(dn)::value;
        if (!tc_fits_device<DN>()) return false;
        size_t bytes = tc_forward_bytes<DN>();
        flash_allow_shared(flash_tc_forward_kernel<DN>, bytes);
        dim3 grid(ceil_div(T, TC_OWN), NH, B);
        flash_tc_forward_kernel<DN><<<grid, TC_WARPS * 32, bytes>>>(out, lse, q, k, v, T, NH, scale);
        launchCheck();
        return true;
    });
    if (done) return;
#endif
    size_t bytes = flash_shared_bytes(FLASH_OWN, 2 * FLASH_TILE, FLASH_WARPS * 32, hs);
    flash_allow_shared(flash_attention_forward_kernel, bytes);
    dim3 grid(ceil_div(T, FLASH_OWN), NH, B);
    flash_attention_forward_kernel<<<grid, FLASH_WARPS * 32, bytes>>>(out, lse, q, k, v, T, NH, hs, scale);
    launchCheck();
}

// dq, dk, dv (B, NH, T, hs) (overwritten) from dout (B, T, C), the forward's out and lse, and q, k, v.
// D (B, NH, T) is scratch.
static void flash_attention_backward(floatX* dq, floatX* dk, floatX* dv, float* D, const floatX* dout,
                                     const floatX* out, const floatX* q, const floatX* k, const floatX* v,
                                     const float* lse, int B, int T, int C, int NH) {
    int hs = C / NH;
    flash_check_head_size(hs);
    float scale = 1.0f / sqrtf((float)hs);
    int rows = B * NH * T;
    flash_attention_backward_d_kernel<<<ceil_div(rows, 8), 256>>>(D, out, dout, B, T, NH, hs);
    launchCheck();
#if FLASH_TENSOR_CORES
    bool done = !flash_force_portable && with_tc_head_size(hs, [&](auto dn) {
        constexpr int DN = decltype(dn)::value;
        if (!tc_fits_device<DN>()) return false;
        dim3 grid(ceil_div(T, TC_OWN), NH, B);
        size_t kv_bytes = tc_backward_kv_bytes<DN>(), q_bytes = tc_backward_q_bytes<DN>();
        flash_allow_shared(flash_tc_backward_kv_kernel<DN>, kv_bytes);
        flash_tc_backward_kv_kernel<DN><<<grid, TC_WARPS * 32, kv_bytes>>>(dk, dv, dout, q, k, v, lse, D, T, NH,
                                                                            scale);
        launchCheck();
        flash_allow_shared(flash_tc_backward_q_kernel<DN>, q_bytes);
        flash_tc_backward_q_kernel<DN><<<grid, TC_WARPS * 32, q_bytes>>>(dq, dout, q, k, v, lse, D, T, NH, scale);
        launchCheck();
        return true;
    });
    if (done) return;
#endif
    dim3 grid(ceil_div(T, FLASH_OWN), NH, B);
    size_t kv_bytes = flash_shared_bytes(2 * FLASH_OWN, 2 * FLASH_TILE, 2 * FLASH_TILE + 2 * FLASH_WARPS * 32, hs);
    flash_allow_shared(flash_attention_backward_kv_kernel, kv_bytes);
    flash_attention_backward_kv_kernel<<<grid, FLASH_WARPS * 32, kv_bytes>>>(dk, dv, dout, q, k, v, lse, D, T, NH, hs,
                                                                             scale);
    launchCheck();
    size_t q_bytes = flash_shared_bytes(2 * FLASH_OWN, 2 * FLASH_TILE, FLASH_WARPS * 32, hs);
    flash_allow_shared(flash_attention_backward_q_kernel, q_bytes);
    flash_attention_backward_q_kernel<<<grid, FLASH_WARPS * 32, q_bytes>>>(dq, dout, q, k, v, lse, D, T, NH, hs,
                                                                           scale);
    launchCheck();
}
