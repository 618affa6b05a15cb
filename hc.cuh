/*
hc.cuh: the Hyper-Connections kernels of the CUDA trainer (the layout hc: Zhu et al., ICLR 2025, arXiv 2409.19606;
dynamic, two streams). The CPU reference's hc_sublayer_forward / _backward and sum_head_* (reference_cpu.cpp) are
the specification; docs/adding_a_layout.md, section 6, derives them.

The method. Two streams x, y, both from h0, share every weight. Per sub-layer F (attention, then MLP) and token, a
(2, 4) table A of connection weights, A[j][m] at j * 4 + m (j = 0: x, 1: y), is made from the token's streams:

    hn_j  = LN_h(h_j)  (h_0 = x, h_1 = y; one LayerNorm, its own statistics per stream)
    p_jm  = hn_j . W_m           m = 0..3, W = hc*w of the sub-layer (4, C)
    D_jm  = tanh(p_jm);   A_jm = S_jm + s_m D_jm       s_m = hc*sc[0] (m < 3), hc*sc[1] (m = 3)
    sum   = A00 x + A10 y;  u = LN(sum);  z = F(u)     (LN: ln1/ln2, F's Pre-Norm LayerNorm)
    x'    = A01 x + A11 y + A03 z;   y' = A02 x + A12 y + A13 z

and the head hf = LN_f(x + y).

Boundaries. As in siamese.cuh, the work between two sub-layers is ONE kernel, a boundary: boundary b ends
sub-layer b-1 and starts sub-layer b (b = 0 follows the embedding; b = 2L, after the last sub-layer, is the head).
Per row of C channels, one block:

    b > 0:   x_b = A01 x_{b-1} + A11 y_{b-1} + A03 z_{b-1};  y_b = A02 x_{b-1} + A12 y_{b-1} + A13 z_{b-1}
             (A of sub-layer b-1, kept in float); z_{b-1} is stored aside (the backward reads it)
    b = 0:   x_0 = y_0 = h0
    b < 2L:  the LN_h statistics of x_b and of y_b, the 8 dot products p (one block sum of 8 values), D and A
             (kept: 8 floats a row each), sum = A00 x_b + A10 y_b, u_b = LN(sum) (its statistics kept)
    b = 2L:  hf = LN_f(x_2L + y_2L)

What is kept for the backward pass, per sub-layer s: x_s and y_s (2 rows of C), u_s (F's input, read by its first
product's weight gradient; under -r 1 one buffer, recomputed from x_s, y_s, A_s and LN's statistics), z_s (1 row,
in the trainer's `sum` buffer: dA_j3 = z . dL/dh'_j needs it), A_s and D_s (16 floats a row) and the statistics of
LN_h on each stream and of LN (6 floats a row). hn_x, hn_y and sum are recomputed from x_s, y_s, A_s and the
statistics, in registers. So 4 rows a sub-layer, against the CPU reference's 7 (x, y, xh, yh, sum, u, z).

The backward kernel of boundary b gets dL/du_b from F's backward (dL/dhf at the head), the partial gradients of the
streams, dL/dx_b and dL/dy_b so far (what reached them from x_{b+1} and y_{b+1}, written by boundary b+1), and the
columns 1..3 of dL/dA of sub-layer b (also boundary b+1's), and walks the row back:

  the start of sub-layer b (b < 2L):
    dsum   = LN'(du_b)
    dx_b  += A00 dsum;   dy_b += A10 dsum;   dA00 = x_b . dsum;   dA10 = y_b . dsum
    g_jm   = dA_jm s_m (1 - D_jm^2)                       the gradient of the tanh's argument
    dhn_j  = sum_m g_jm W_m;   dW_m += g_0m hn_x + g_1m hn_y;   dS_jm += dA_jm;   ds_m += dA_jm D_jm
    dy_b  += LN_h'(dhn_y);   dx_b += LN_h'(dhn_x)
  the head (b = 2L):   dsum = LN_f'(dhf);  dx_2L = dy_2L = dsum
  the end of sub-layer b-1 (b > 0), A = A_{b-1}:
    dz_{b-1} = A03 dx_b + A13 dy_b
    dA01 = x_{b-1} . dx_b;  dA11 = y_{b-1} . dx_b;  dA03 = z_{b-1} . dx_b     (into the dA rows of sub-layer b-1)
    dA02 = x_{b-1} . dy_b;  dA12 = y_{b-1} . dy_b;  dA13 = z_{b-1} . dy_b
    dx_{b-1} = A01 dx_b + A02 dy_b;   dy_{b-1} = A11 dx_b + A12 dy_b          (partial: sub-layer b-1's start adds)
  b = 0:  dL/dh0 = dx_0 + dy_0

The parameter gradients are sums over rows, deterministic as everywhere here: a block walks over rows with a
stride of gridDim.x, its threads keep the per-channel sums (dW's 4 rows, LN's and LN_h's gains and shifts) in
registers and every thread the 10 per-row scalars (dS's 8, ds's 2, the same in every thread: block sums give every
thread the same bits); they leave as one partial a block, added up in block order by hc_reduce_partials. (The CPU
reference sums over tokens in token order; the two orders differ by float32 rounding.)

Included by train_gpt2.cu; uses the row building blocks of cuda_common.cuh (layernorm_row and its backward).
*/
#pragma once
#include "cuda_common.cuh"

// the floats of one token's connection weights (A, D, dL/dA): A[j][m] at j * 4 + m
static const int HC_WEIGHTS = 8;
// the backward kernel's partial sums: HC_ARRAYS rows of C per block (dW rows 0..3, LN's gain and shift, LN_h's gain
// and shift), then HC_SCALARS floats per block (dS's 8, ds's 2)
enum { HC_ARRAYS = 8, HC_SCALARS = 10 };
// the reduction scratch the backward kernel needs for `blocks` blocks
static size_t hc_partials_floats(size_t blocks, int C) { return blocks * ((size_t)HC_ARRAYS * C + HC_SCALARS); }

// the scale of column m: alpha's (m < 3) or beta's (m = 3)
__device__ inline int hc_scale_index(int e) { return e % 4 == 3; }

// a two-term weighted sum of one channel: F's input sum = A00 x + A10 y (the head's x + y: weights 1), written once
// so that the forward kernel, the backward kernel and the -r 1 recomputation compute the same number
__device__ inline float hc_mix2(float a, float x, float b, float y) { return a * x + b * y; }

// Everything the forward kernel of one boundary needs, passed by value.
struct HCBoundary {
    // the sub-layer that ends here; all null at b = 0
    const floatX* x_prev;     // x_{b-1} (N, C)
    const floatX* y_prev;     // y_{b-1} (N, C)
    const floatX* z;          // z_{b-1} = F(u_{b-1}) (N, C)
    const float* A_prev;      // A of sub-layer b-1 (N, 8)
    floatX* z_keep;           // out: z_{b-1}, kept for the backward pass (N, C)
    // this boundary
    floatX* x;                // x_b (N, C): written when b > 0; at b = 0 it is h0 and only read
    floatX* y;                // y_b (N, C): written when b > 0; unused at b = 0 (y_0 = x_0)
    floatX* u;                // out: u_b, or hf at the head (N, C)
    float* mean;              // out: LN's statistics (LN_f's at the head) (N)
    float* rstd;
    const floatX* w;          // LN's gain and shift (C): ln1/ln2 of sub-layer b, LN_f at the head
    const floatX* b;
    // the start of sub-layer b: all null at the head
    float *mean_hx, *rstd_hx; // out: LN_h's statistics on x_b and on y_b (N)
    float *mean_hy, *rstd_hy;
    const floatX* wh;         // LN_h's gain and shift (C)
    const floatX* bh;
    const floatX* S;          // the static weights (8), the projections W (4, C), the scales (2) of sub-layer b
    const floatX* W;
    const floatX* sc;
    float* A;                 // out: A and tanh(p) of sub-layer b (N, 8)
    float* D;
};

// block per row (blockIdx.x); thread t owns the channels row_channel(k) (see the row building blocks)
template <int VALS>
__global__ void __launch_bounds__(MAX_ROW_THREADS) hc_boundary_forward_kernel(HCBoundary a, int C) {
    int row = blockIdx.x;
    size_t off = (size_t)row * C;
    float x[VALS], y[VALS];
    if (a.z) {  // end sub-layer b-1:  x = A01 x + A11 y + A03 z;  y = A02 x + A12 y + A13 z
        float xp[VALS], yp[VALS], z[VALS];
        load_row(xp, a.x_prev + off, C);
        load_row(yp, a.y_prev + off, C);
        load_row(z, a.z + off, C);
        store_row(a.z_keep + off, z, C);  // z as F stored it
        const float* A = a.A_prev + (size_t)row * HC_WEIGHTS;
        float a01 = A[1], a02 = A[2], a03 = A[3], a11 = A[5], a12 = A[6], a13 = A[7];
        for (int k = 0; k < VALS; k++) {
            x[k] = a01 * xp[k] + a11 * yp[k] + a03 * z[k];
            y[k] = a02 * xp[k] + a12 * yp[k] + a13 * z[k];
        }
        store_row_keep(a.x + off, x, C);  // what follows sees the stored (bf16: rounded) streams
        store_row_keep(a.y + off, y, C);
    } else {  // the first boundary: x = y = h0
        load_row(x, a.x + off, C);
        for (int k = 0; k < VALS; k++) y[k] = x[k];
    }
    float sum[VALS], out[VALS];
    if (!a.W) {  // the head:  hf = LN_f(x + y)
        for (int k = 0; k < VALS; k++) sum[k] = hc_mix2(1.0f, x[k], 1.0f, y[k]);
        layernorm_row(out, sum, a.w, a.b, C, a.mean + row, a.rstd + row);
        store_row(a.u + off, out, C);
        return;
    }
    // start sub-layer b:  hn_j = LN_h(h_j);  p_jm = hn_j . W_m;  A = S + s tanh(p)
    float hx[VALS], hy[VALS], p[HC_WEIGHTS];
    layernorm_row(hx, x, a.wh, a.bh, C, a.mean_hx + row, a.rstd_hx + row);
    layernorm_row(hy, y, a.wh, a.bh, C, a.mean_hy + row, a.rstd_hy + row);
    for (int e = 0; e < HC_WEIGHTS; e++) p[e] = 0.0f;
    for (int k = 0; k < VALS; k++) {
        int i = row_channel(k);
        if (i >= C) continue;
        for (int m = 0; m < 4; m++) {
            float w = (float)a.W[(size_t)m * C + i];
            p[m] += hx[k] * w;
            p[4 + m] += hy[k] * w;
        }
    }
    block_sum(p);  // every thread gets the same 8 sums
    float A[HC_WEIGHTS];
    for (int e = 0; e < HC_WEIGHTS; e++) {
        float d = tanhf(p[e]);
        A[e] = (float)a.S[e] + (float)a.sc[hc_scale_index(e)] * d;
        if (threadIdx.x == 0) {
            a.A[(size_t)row * HC_WEIGHTS + e] = A[e];
            a.D[(size_t)row * HC_WEIGHTS + e] = d;
        }
    }
    // sum = A00 x + A10 y;  u = LN(sum)
    for (int k = 0; k < VALS; k++) sum[k] = hc_mix2(A[0], x[k], A[4], y[k]);
    layernorm_row(out, sum, a.w, a.b, C, a.mean + row, a.rstd + row);
    store_row(a.u + off, out, C);
}

static void hc_boundary_forward(const HCBoundary& a, int N, int C) {
    with_row_vals(C, [&](auto vals) {
        hc_boundary_forward_kernel<decltype(vals)::value><<<N, row_threads(C)>>>(a, C);
        launchCheck();
    });
}

// Everything the backward kernel of one boundary needs.
struct HCBoundaryGrad {
    const floatX* x;          // x_b (N, C) (h0 at b = 0)
    const floatX* y;          // y_b (N, C) (h0 at b = 0)
    const float* mean;        // LN's statistics (LN_f's at the head), gain (shift: not needed)
    const float* rstd;
    const floatX* w;
    const floatX* b;          // LN's shift: only the -r 1 recomputation reads it
    // the start of sub-layer b: all null at the head
    const float *mean_hx, *rstd_hx, *mean_hy, *rstd_hy;
    const floatX* wh;         // LN_h's gain and shift
    const floatX* bh;
    const floatX* W;          // the projections (4, C) and the scales (2) of sub-layer b
    const floatX* sc;
    const float* A;           // A and tanh(p) of sub-layer b (N, 8)
    const float* D;
    const float* dA_in;       // dL/dA of sub-layer b, columns 1..3 (boundary b+1 wrote them) (N, 8)
    const floatX* du;         // dL/du_b (dL/dhf at the head)
    floatX* dx;               // in: dL/dx_b and dL/dy_b so far (b < 2L; not read at the head); out: the partial
    floatX* dy;               //   dL/dx_{b-1}, dL/dy_{b-1} (b > 0), or dL/dh0 in dx (b = 0). In place: each thread
                              //   reads its elements before it writes them
    // the sub-layer that ends here; all null at b = 0
    const floatX* x_prev;     // x_{b-1}, y_{b-1}, z_{b-1} (N, C)
    const floatX* y_prev;
    const floatX* z_prev;
    const float* A_prev;      // A of sub-layer b-1 (N, 8)
    floatX* dz;               // out: dL/dz_{b-1} (N, C)
    float* dA_out;            // out: dL/dA of sub-layer b-1, columns 1..3 (N, 8)
};

// Block per row, striding over the rows by gridDim.x; thread t owns the channels row_channel(k) in every row and
// sums the per-channel parameter gradients of its channels in registers, every thread the 10 per-row scalars;
// they leave as partials[block][HC_ARRAYS][C], then partials[grid * HC_ARRAYS * C + block * HC_SCALARS + e]
template <int VALS>
__global__ void __launch_bounds__(MAX_ROW_THREADS) hc_boundary_backward_kernel(HCBoundaryGrad a, int N, int C,
                                                                               float* partials) {
    float dW[4][VALS], dw[VALS], db[VALS], dwh[VALS], dbh[VALS], dS[HC_WEIGHTS], dsc[2] = {0.0f, 0.0f};
    for (int k = 0; k < VALS; k++) {
        for (int m = 0; m < 4; m++) dW[m][k] = 0.0f;
        dw[k] = db[k] = dwh[k] = dbh[k] = 0.0f;
    }
    for (int e = 0; e < HC_WEIGHTS; e++) dS[e] = 0.0f;
    bool head = a.W == nullptr;
    for (int row = blockIdx.x; row < N; row += gridDim.x) {
        size_t off = (size_t)row * C, r8 = (size_t)row * HC_WEIGHTS;
        float x[VALS], y[VALS], du[VALS], dx[VALS], dy[VALS];
        load_row(x, a.x + off, C);
        load_row(y, a.y + off, C);
        load_row(du, a.du + off, C);
        // u = LN(sum), sum = A00 x + A10 y (the head: hf = LN_f(x + y)):  dsum = LN'(du)
        float a00 = head ? 1.0f : a.A[r8], a10 = head ? 1.0f : a.A[r8 + 4];
        float sum[VALS], dsum[VALS];
        for (int k = 0; k < VALS; k++) {
            sum[k] = hc_mix2(a00, x[k], a10, y[k]);
            dsum[k] = 0.0f;
        }
        layernorm_row_backward(dsum, dw, db, du, sum, a.w, a.mean[row], a.rstd[row], C);
        if (head) {  // x + y:  dx = dy = dsum
            for (int k = 0; k < VALS; k++) dx[k] = dy[k] = dsum[k];
        } else {
            load_row(dx, a.dx + off, C);
            load_row(dy, a.dy + off, C);
            // sum = A00 x + A10 y:  dx += A00 dsum;  dy += A10 dsum;  dA00 = x . dsum;  dA10 = y . dsum
            float s[2] = {0.0f, 0.0f};
            for (int k = 0; k < VALS; k++) {
                dx[k] += a00 * dsum[k];
                dy[k] += a10 * dsum[k];
                s[0] += x[k] * dsum[k];
                s[1] += y[k] * dsum[k];
            }
            block_sum(s);
            float dA[HC_WEIGHTS], g[HC_WEIGHTS];
            for (int e = 0; e < HC_WEIGHTS; e++) dA[e] = e % 4 == 0 ? s[e / 4] : a.dA_in[r8 + e];
            // A = S + s tanh(p):  g = dA s (1 - D^2);  dS += dA;  ds += dA D
            for (int e = 0; e < HC_WEIGHTS; e++) {
                float d = a.D[r8 + e];
                g[e] = dA[e] * (float)a.sc[hc_scale_index(e)] * (1.0f - d * d);
                dS[e] += dA[e];
                dsc[hc_scale_index(e)] += dA[e] * d;
            }
            // p_jm = hn_j . W_m:  dhn_j = sum_m g_jm W_m;  dW_m += g_0m hn_x + g_1m hn_y
            float mhx = a.mean_hx[row], rhx = a.rstd_hx[row], mhy = a.mean_hy[row], rhy = a.rstd_hy[row];
            float dhx[VALS], dhy[VALS];
            for (int k = 0; k < VALS; k++) {
                int i = row_channel(k);
                dhx[k] = dhy[k] = 0.0f;
                if (i >= C) continue;
                float wh = (float)a.wh[i], bh = (float)a.bh[i];
                float hx = ln_apply(x[k], mhx, rhx, wh, bh), hy = ln_apply(y[k], mhy, rhy, wh, bh);
                for (int m = 0; m < 4; m++) {
                    float w = (float)a.W[(size_t)m * C + i];
                    dhx[k] += g[m] * w;
                    dhy[k] += g[4 + m] * w;
                    dW[m][k] += g[m] * hx + g[4 + m] * hy;
                }
            }
            // hn_y = LN_h(y):  dy += LN_h'(dhn_y);  hn_x = LN_h(x):  dx += LN_h'(dhn_x)
            layernorm_row_backward(dy, dwh, dbh, dhy, y, a.wh, mhy, rhy, C);
            layernorm_row_backward(dx, dwh, dbh, dhx, x, a.wh, mhx, rhx, C);
        }
        if (a.x_prev) {  // the end of sub-layer b-1 (x_b = A01 x + A11 y + A03 z;  y_b = A02 x + A12 y + A13 z)
            float xp[VALS], yp[VALS], zp[VALS], dz[VALS], s[6] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
            load_row(xp, a.x_prev + off, C);
            load_row(yp, a.y_prev + off, C);
            load_row(zp, a.z_prev + off, C);
            const float* A = a.A_prev + r8;
            float a01 = A[1], a02 = A[2], a03 = A[3], a11 = A[5], a12 = A[6], a13 = A[7];
            for (int k = 0; k < VALS; k++) {
                // dA01, dA02, dA03 (stream x's row of A), dA11, dA12, dA13 (y's)
                s[0] += xp[k] * dx[k];
                s[1] += xp[k] * dy[k];
                s[2] += zp[k] * dx[k];
                s[3] += yp[k] * dx[k];
                s[4] += yp[k] * dy[k];
                s[5] += zp[k] * dy[k];
                dz[k] = a03 * dx[k] + a13 * dy[k];
                float ndx = a01 * dx[k] + a02 * dy[k], ndy = a11 * dx[k] + a12 * dy[k];
                dx[k] = ndx;
                dy[k] = ndy;
            }
            block_sum(s);
            if (threadIdx.x == 0) {
                float* dA = a.dA_out + r8;
                dA[1] = s[0], dA[2] = s[1], dA[3] = s[2], dA[5] = s[3], dA[6] = s[4], dA[7] = s[5];
            }
            store_row(a.dz + off, dz, C);
            store_row(a.dx + off, dx, C);
            store_row(a.dy + off, dy, C);
        } else {  // b = 0: both streams were h0
            for (int k = 0; k < VALS; k++) dx[k] += dy[k];
            store_row(a.dx + off, dx, C);
        }
    }
    for (int m = 0; m < 4; m++) store_partials(partials, HC_ARRAYS, m, dW[m], C);
    store_partials(partials, HC_ARRAYS, 4, dw, C);
    store_partials(partials, HC_ARRAYS, 5, db, C);
    store_partials(partials, HC_ARRAYS, 6, dwh, C);
    store_partials(partials, HC_ARRAYS, 7, dbh, C);
    if (threadIdx.x == 0) {
        float* scalars = partials + (size_t)gridDim.x * HC_ARRAYS * C + (size_t)blockIdx.x * HC_SCALARS;
        for (int e = 0; e < HC_WEIGHTS; e++) scalars[e] = dS[e];
        scalars[8] = dsc[0];
        scalars[9] = dsc[1];
    }
}

// where the gradients of one boundary go (accumulated, +=; a null one is skipped): dW (4, C) as one row each, LN's
// and LN_h's gains and shifts (C), dS (8) and ds (2)
struct HCGradTargets {
    float* arrays[HC_ARRAYS];
    float* dS;
    float* dsc;
};

// the second stage: dst += the sum over the parts p in increasing order. blockIdx.y < HC_ARRAYS: array blockIdx.y,
// a thread per channel; blockIdx.y = HC_ARRAYS: the scalars, a thread each
__global__ void hc_reduce_partials_kernel(HCGradTargets t, const float* partials, int parts, int C) {
    int a = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
    if (a < HC_ARRAYS) {
        if (i >= C || !t.arrays[a]) return;
        float s = 0.0f;
        for (int p = 0; p < parts; p++) s += partials[((size_t)p * HC_ARRAYS + a) * C + i];
        t.arrays[a][i] += s;
        return;
    }
    float* dst = i < HC_WEIGHTS ? t.dS : t.dsc;
    if (i >= HC_SCALARS || !dst) return;
    const float* scalars = partials + (size_t)parts * HC_ARRAYS * C;
    float s = 0.0f;
    for (int p = 0; p < parts; p++) s += scalars[(size_t)p * HC_SCALARS + i];
    dst[i < HC_WEIGHTS ? i : i - HC_WEIGHTS] += s;
}

static void hc_boundary_backward(const HCBoundaryGrad& a, const HCGradTargets& t, int N, int C) {
    with_row_vals(C, [&](auto vals) {
        auto kernel = hc_boundary_backward_kernel<decltype(vals)::value>;
        int threads = row_threads(C), grid = row_grid(kernel, threads, N);
        if (hc_partials_floats(grid, C) > gpu.partials_floats) fail("internal: reduction scratch too small");
        kernel<<<grid, threads>>>(a, N, C, gpu.partials);
        launchCheck();
        hc_reduce_partials_kernel<<<dim3(ceil_div(C, 256), HC_ARRAYS + 1), 256>>>(t, gpu.partials, grid, C);
        launchCheck();
    });
}

// block per row, the row kernels' packs of channels: u = LN(A00 x + A10 y) again, from the streams, A and LN's
// statistics that the forward kernel saved (the recomputation under -r 1; the gradients in `a` are not used)
template <int VALS>
__global__ void __launch_bounds__(MAX_ROW_THREADS) hc_u_recompute_kernel(HCBoundaryGrad a, floatX* u, int C) {
    size_t row = blockIdx.x, off = row * C;
    float x[VALS], y[VALS], v[VALS];
    load_row(x, a.x + off, C);
    load_row(y, a.y + off, C);
    float a00 = a.A[row * HC_WEIGHTS], a10 = a.A[row * HC_WEIGHTS + 4], mean = a.mean[row], rstd = a.rstd[row];
    for (int k = 0; k < VALS; k++) {
        int i = row_channel(k);
        v[k] = i < C ? ln_apply(hc_mix2(a00, x[k], a10, y[k]), mean, rstd, (float)a.w[i], (float)a.b[i]) : 0.0f;
    }
    store_row(u + off, v, C);
}

static void hc_u_recompute(const HCBoundaryGrad& a, floatX* u, int N, int C) {
    with_row_vals(C, [&](auto vals) {
        hc_u_recompute_kernel<decltype(vals)::value><<<N, row_threads(C)>>>(a, u, C);
    });
    launchCheck();
}
