/*
siamese.cuh: the SiameseNorm kernels of the CUDA trainer (SiameseNorm: Li et al., ICML 2026, arXiv 2602.08064).

The method. Two residual streams share every weight. x is normalized after each update ("post-norm" stream), y is
never normalized ("pre-norm" stream). Both start as the embedding h0. For each sub-layer F (attention, then MLP) of
block l, with the depth scale c_l = sqrt(2(l+1)):

    xh = LN_x(x)                     the normalized x stream
    u  = LN_in(xh + LN_y(y))         the input of F: both streams, each normalized, normalized once more
    z  = F(u)
    x  = xh + z / c_l                x grows from a normalized state by a damped update
    y  = y + z                       y is an identity path: the gradient reaches every layer undamped

and the head feeds LN_f(LN_xf(x) + LN_yf(y)) to the tied output projection.

Boundaries. The CPU reference (reference_cpu.cpp) computes this in small passes: LN, LN, add, LN, add, add. Here the
work between two sub-layers is ONE kernel, a "boundary": boundary b ends sub-layer b-1 and starts sub-layer b
(b = 0 follows the embedding; b = 2L, after the last sub-layer, is the head). Per row of C channels, one block:

    b > 0:   x_b = xh_{b-1} + z_{b-1} / c     (xh_{b-1} recomputed from x_{b-1} and its LN_x statistics)
             y_b = y_{b-1} + z_{b-1}
    b = 0:   x_0 = y_0 = h0
    all:     xh = LN_x(x_b);  u_b = LN_in(xh + LN_y(y_b))        at b = 2L with LN_xf, LN_yf, LN_f: u_2L = hf

What is stored for the backward pass, per boundary: x_b and y_b (2 rows of C), u_b (needed anyway: it is the input of
F's first matrix product, whose weight gradient reads it), and a mean and an rstd per LayerNorm (6 floats a row).
xh, LN_y(y) and their sum are recomputed from x_b, y_b and the statistics, in registers, at no memory cost. z is
not kept at all: the next boundary consumes it and the backward never needs it. So 3 rows a boundary, against 7 in
the CPU reference (x, y, xh, LN_y(y), their sum, u and z); y_0 is x_0 and is not stored twice.

The backward kernel of boundary b gets dL/du_b from F's backward and the gradients of the streams leaving the
sub-layer, dL/dx_{b+1} and dL/dy_{b+1} (none at the head), and walks the same row back:

    ds   = LN_in'(du)                        (the identity under --no-ln-in)
    dxh  = dL/dx_{b+1} + ds                  xh reaches the next x directly, and u through the sum
    dy_b = dL/dy_{b+1} + LN_y'(ds)           y collects the identity path and the LN_y branch
    dx_b = LN_x'(dxh)
    b > 0:  dz_{b-1} = dx_b / c + dy_b       z went into both streams, into x damped by 1/c
    b = 0:  dL/dh0   = dx_0 + dy_0           both streams start as h0

Ablations (header[9] of the checkpoint): ABLATE_NO_DEPTH_SCALE sets c = 1 (the caller passes inv_c = 1);
ABLATE_NO_LN_IN makes u = xh + LN_y(y) (use_ln_in = 0: the LN_in parameters are unused and their gradients stay 0).
The head always applies LN_f.

siamese-hybrid (SiameseNorm's language-model form, the official code's hybrid_pre): its attention sub-layers are of
the kind siamese_c1, whose X stream is HybridNorm's (no LN_x), with a learned gain c1 of C channels per block:

    u = c1 * x + LN_y(y)             (no LN_x, no LN_in)
    x = x + z / c_l;  y = y + z

The same kernels do it, one a boundary whichever of the two kinds ends and starts there: their source carries
siamese-hybrid's branches, behind template flags (END_C1, START_C1, C1) that siamese's instantiations leave false.
Forward: after siamese_c1 the end is x_b = x_{b-1} + z / c; before it the start is u_b = c1 * x_b + LN_y(y_b).
Backward, a siamese_c1 start:

    dx_b = dL/dx_{b+1} + c1 * du      x_{b+1} = x_b + z_b / c reads x_b directly, u_b through c1
    dy_b = dL/dy_{b+1} + LN_y'(du)
    dc1 += du * x_b                   (summed over rows in the registers of LN_x's gain, which is not there)

and the end of sub-layer b-1 (dz = dx_b / c + dy_b) is the same for both kinds. -r 1 recomputes u_b from x_b, y_b
and LN_y's statistics. The end of this file has HybridNorm's one-stream pieces (the layouts hybrid, hybrid-star).

Included by train_gpt2.cu; uses the row building blocks of cuda_common.cuh (layernorm_row and its backward).
*/
#pragma once
#include "cuda_common.cuh"

// the LayerNorm slots of a siamese boundary: LN_x, LN_y, LN_in (host/layouts.h's LN_X, LN_Y, LN_IN; at the head
// LN_xf, LN_yf, LN_f), each a mean, an rstd, a gain and a shift in the structs below
enum { SIAMESE_SLOTS = LN_IN + 1 };

// Everything the forward kernel of one boundary needs, passed by value.
struct SiameseBoundary {
    // the sub-layer that ends here; all null at b = 0
    const floatX* x_prev;     // x_{b-1} (N, C)
    const float* mean_prev;   // its LN_x statistics (N)
    const float* rstd_prev;
    const floatX* wx_prev;    // the LN_x gain and shift of boundary b-1 (C)
    const floatX* bx_prev;
    const floatX* y_prev;     // y_{b-1} (N, C)
    const floatX* z;          // z_{b-1} = F(u_{b-1}) (N, C)
    float inv_c;              // 1/c_l of the block that sub-layer b-1 belongs to
    // this boundary
    floatX* x;                // x_b (N, C): written when b > 0; at b = 0 it is h0 and only read
    floatX* y;                // y_b (N, C): written when b > 0; unused at b = 0 (y_0 = x_0)
    floatX* u;                // out: u_b, or hf at the head (N, C)
    float* mean[SIAMESE_SLOTS];    // out: statistics (N) of LN_x, LN_y, LN_in
    float* rstd[SIAMESE_SLOTS];
    const floatX* w[SIAMESE_SLOTS];  // gains and shifts (C) of LN_x, LN_y, LN_in (LN_xf, LN_yf, LN_f at the head)
    const floatX* b[SIAMESE_SLOTS];
    int use_ln_in;            // 0 under --no-ln-in: u = xh + LN_y(y)
    const floatX* c1;         // siamese_c1 (siamese-hybrid's attention) starts here: u = c1 * x + LN_y(y), c1 (C) of
                              // the block; null: siamese's u above
};

// block per row (blockIdx.x); thread t owns the channels row_channel(k) (see the row building blocks)
// END_C1: sub-layer b-1 is a siamese_c1 one (its x_b = x_{b-1} + z / c: no LN_x; wx_prev null); START_C1: sub-layer
// b is one (u = c1 * x + LN_y(y); a.c1 given). Template flags, so that siamese's own kernel (both false) has none of
// siamese-hybrid's code.
template <int VALS, bool END_C1, bool START_C1>
__global__ void __launch_bounds__(MAX_ROW_THREADS) siamese_boundary_forward_kernel(SiameseBoundary a, int C) {
    int row = blockIdx.x;
    size_t off = (size_t)row * C;
    float x[VALS], y[VALS];
    if (a.z) {  // end sub-layer b-1:  x = xh_{b-1} + z / c;  y = y_{b-1} + z
        float xp[VALS], yp[VALS], z[VALS];
        load_row(xp, a.x_prev + off, C);
        load_row(yp, a.y_prev + off, C);
        load_row(z, a.z + off, C);
        float mean = END_C1 ? 0.0f : a.mean_prev[row], rstd = END_C1 ? 0.0f : a.rstd_prev[row];
        for (int k = 0; k < VALS; k++) {
            int i = row_channel(k);
            // xh_{b-1} = LN_x(x_{b-1}); after a siamese_c1 sub-layer (no LN_x) x_{b-1} itself
            float xh = END_C1 ? xp[k] : i < C ? ln_apply(xp[k], mean, rstd, (float)a.wx_prev[i], (float)a.bx_prev[i])
                                              : 0.0f;
            x[k] = xh + a.inv_c * z[k];
            y[k] = yp[k] + z[k];
        }
        store_row_keep(a.x + off, x, C);  // the LayerNorms below see the stored (bf16: rounded) streams
        store_row_keep(a.y + off, y, C);
    } else {  // the first boundary: x = y = h0
        load_row(x, a.x + off, C);
        for (int k = 0; k < VALS; k++) y[k] = x[k];
    }
    if (START_C1) {  // start siamese_c1 sub-layer b:  u = c1 * x + LN_y(y)   (no LN_x, no LN_in)
        float ly[VALS], u[VALS];
        layernorm_row(ly, y, a.w[LN_Y], a.b[LN_Y], C, a.mean[LN_Y] + row, a.rstd[LN_Y] + row);
        for (int k = 0; k < VALS; k++) {
            int i = row_channel(k);
            u[k] = i < C ? (float)a.c1[i] * x[k] + ly[k] : 0.0f;
        }
        store_row(a.u + off, u, C);
        return;
    }
    // start sub-layer b:  u = LN_in(LN_x(x) + LN_y(y))
    float xh[VALS], ly[VALS], sum[VALS];
    layernorm_row(xh, x, a.w[LN_X], a.b[LN_X], C, a.mean[LN_X] + row, a.rstd[LN_X] + row);
    layernorm_row(ly, y, a.w[LN_Y], a.b[LN_Y], C, a.mean[LN_Y] + row, a.rstd[LN_Y] + row);
    for (int k = 0; k < VALS; k++) sum[k] = xh[k] + ly[k];
    if (a.use_ln_in) {
        float u[VALS];
        layernorm_row(u, sum, a.w[LN_IN], a.b[LN_IN], C, a.mean[LN_IN] + row, a.rstd[LN_IN] + row);
        store_row(a.u + off, u, C);
    } else {
        store_row(a.u + off, sum, C);
    }
}

static void siamese_boundary_forward(const SiameseBoundary& a, int N, int C) {
    bool end_c1 = a.z && !a.wx_prev, start_c1 = a.c1 != nullptr;
    if (end_c1 && start_c1) fail("internal: two siamese_c1 sub-layers in a row");
    with_row_vals(C, [&](auto vals) {
        constexpr int V = decltype(vals)::value;
        auto kernel = end_c1     ? siamese_boundary_forward_kernel<V, true, false>
                      : start_c1 ? siamese_boundary_forward_kernel<V, false, true>
                                 : siamese_boundary_forward_kernel<V, false, false>;
        kernel<<<N, row_threads(C)>>>(a, C);
        launchCheck();
    });
}

// Everything the backward kernel of one boundary needs.
struct SiameseBoundaryGrad {
    const floatX* x;          // x_b (N, C) (h0 at b = 0)
    const floatX* y;          // y_b (N, C) (h0 at b = 0)
    const float* mean[SIAMESE_SLOTS];
    const float* rstd[SIAMESE_SLOTS];
    const floatX* w[SIAMESE_SLOTS];
    const floatX* b[SIAMESE_SLOTS];
    int use_ln_in;
    const floatX* du;         // dL/du_b (dL/dhf at the head)
    const floatX* dx_next;    // dL/dx_{b+1}; null at the head
    const floatX* dy_next;    // dL/dy_{b+1}; null at the head
    floatX* dx;               // out: dL/dx_b, or dL/dh0 at b = 0 (may be dx_next itself: each thread reads its
    floatX* dy;               //      element before it writes it); out: dL/dy_b (b > 0; may be dy_next)
    floatX* dz;               // out: dL/dz_{b-1} (b > 0); null at b = 0
    float inv_c;              // 1/c_l of the block of sub-layer b-1
    const floatX* c1;         // a siamese_c1 sub-layer starts here (u = c1 * x + LN_y(y)); null: a siamese one
};

// The forward's sum = LN_x(x) + LN_y(y) of row `row` again, from its streams x, y (the row kernels' channels) and
// the saved statistics: the backward kernel and the -r 1 recomputation of u both start from it
template <int VALS>
__device__ inline void siamese_recompute_sum(float (&sum)[VALS], const float (&x)[VALS], const float (&y)[VALS],
                                             const SiameseBoundaryGrad& a, int row, int C) {
    float mx = a.mean[LN_X][row], rx = a.rstd[LN_X][row], my = a.mean[LN_Y][row], ry = a.rstd[LN_Y][row];
    for (int k = 0; k < VALS; k++) {
        int i = row_channel(k);
        sum[k] = i < C ? ln_apply(x[k], mx, rx, (float)a.w[LN_X][i], (float)a.b[LN_X][i]) +
                             ln_apply(y[k], my, ry, (float)a.w[LN_Y][i], (float)a.b[LN_Y][i])
                       : 0.0f;
    }
}

// Block per row, striding over the rows by gridDim.x; thread t owns the channels row_channel(k) in every row and
// sums the six LayerNorm parameter gradients (gain and shift of LN_x, LN_y, LN_in) of its channels in registers;
// they leave as gpu.partials[block][6][C], added up by reduce_partials.
// C1: sub-layer b is a siamese_c1 one (a.c1 given); a template flag, as in the forward kernel
template <int VALS, bool C1>
__global__ void __launch_bounds__(MAX_ROW_THREADS) siamese_boundary_backward_kernel(SiameseBoundaryGrad a, int N,
                                                                                    int C, float* partials) {
    float dw[SIAMESE_SLOTS][VALS], db[SIAMESE_SLOTS][VALS];
    for (int j = 0; j < SIAMESE_SLOTS; j++)
        for (int k = 0; k < VALS; k++) dw[j][k] = db[j][k] = 0.0f;
    for (int row = blockIdx.x; row < N; row += gridDim.x) {
        size_t off = (size_t)row * C;
        float x[VALS], y[VALS], du[VALS], dx[VALS], dy[VALS];
        load_row(x, a.x + off, C);
        load_row(y, a.y + off, C);
        load_row(du, a.du + off, C);
        if (C1) {  // siamese_c1: u = c1 * x + LN_y(y)
            // dx = dL/dx_{b+1} + c1 * du;  dy = dL/dy_{b+1} + LN_y'(du);  dc1 += du * x
            float (&dc1)[VALS] = dw[LN_X];  // (no LN_x here: its gain's registers and partials slot carry dc1)
            if (a.dx_next) load_row(dx, a.dx_next + off, C);
            else for (int k = 0; k < VALS; k++) dx[k] = 0.0f;
            if (a.dy_next) load_row(dy, a.dy_next + off, C);
            else for (int k = 0; k < VALS; k++) dy[k] = 0.0f;
            for (int k = 0; k < VALS; k++) {
                int i = row_channel(k);
                if (i >= C) continue;
                dx[k] += (float)a.c1[i] * du[k];
                dc1[k] += du[k] * x[k];
            }
            layernorm_row_backward(dy, dw[LN_Y], db[LN_Y], du, y, a.w[LN_Y], a.mean[LN_Y][row], a.rstd[LN_Y][row], C);
        } else {  // siamese: u = LN_in(xh + LN_y(y)), xh = LN_x(x)
            float sum[VALS];
            siamese_recompute_sum(sum, x, y, a, row, C);
            float mx = a.mean[LN_X][row], rx = a.rstd[LN_X][row], my = a.mean[LN_Y][row], ry = a.rstd[LN_Y][row];
            // ds = LN_in'(du)
            float ds[VALS];
            if (a.use_ln_in) {
                for (int k = 0; k < VALS; k++) ds[k] = 0.0f;
                layernorm_row_backward(ds, dw[LN_IN], db[LN_IN], du, sum, a.w[LN_IN], a.mean[LN_IN][row],
                                       a.rstd[LN_IN][row], C);
            } else {
                for (int k = 0; k < VALS; k++) ds[k] = du[k];
            }
            // dxh = dL/dx_{b+1} + ds;  dy = dL/dy_{b+1} + LN_y'(ds);  dx = LN_x'(dxh)
            float dxh[VALS];
            if (a.dx_next) load_row(dxh, a.dx_next + off, C);
            else for (int k = 0; k < VALS; k++) dxh[k] = 0.0f;
            if (a.dy_next) load_row(dy, a.dy_next + off, C);
            else for (int k = 0; k < VALS; k++) dy[k] = 0.0f;
            for (int k = 0; k < VALS; k++) {
                dxh[k] += ds[k];
                dx[k] = 0.0f;
            }
            layernorm_row_backward(dy, dw[LN_Y], db[LN_Y], ds, y, a.w[LN_Y], my, ry, C);
            layernorm_row_backward(dx, dw[LN_X], db[LN_X], dxh, x, a.w[LN_X], mx, rx, C);
        }
        if (a.dz) {  // into sub-layer b-1: dz = dx / c + dy; the streams' gradients travel on
            float dz[VALS];
            for (int k = 0; k < VALS; k++) dz[k] = a.inv_c * dx[k] + dy[k];
            store_row(a.dz + off, dz, C);
            store_row(a.dx + off, dx, C);
            store_row(a.dy + off, dy, C);
        } else {  // b = 0: both streams were h0
            for (int k = 0; k < VALS; k++) dx[k] += dy[k];
            store_row(a.dx + off, dx, C);
        }
    }
    for (int j = 0; j < SIAMESE_SLOTS; j++) {
        store_partials(partials, 2 * SIAMESE_SLOTS, 2 * j, dw[j], C);
        store_partials(partials, 2 * SIAMESE_SLOTS, 2 * j + 1, db[j], C);
    }
}

// block per row, the row kernels' packs of channels: u = LN_in(LN_x(x) + LN_y(y)) again, from the streams and the
// statistics that the forward kernel saved (the recomputation under -r 1; a.du, a.dx_next, ... are not used)
template <int VALS, bool C1>
__global__ void __launch_bounds__(MAX_ROW_THREADS) siamese_u_recompute_kernel(SiameseBoundaryGrad a, floatX* u, int C) {
    size_t row = blockIdx.x, off = row * C;
    float x[VALS], y[VALS], sum[VALS];
    load_row(x, a.x + off, C);
    load_row(y, a.y + off, C);
    if (C1) {  // siamese_c1: u = c1 * x + LN_y(y)
        float my = a.mean[LN_Y][row], ry = a.rstd[LN_Y][row];
        for (int k = 0; k < VALS; k++) {
            int i = row_channel(k);
            if (i < C)
                sum[k] = (float)a.c1[i] * x[k] + ln_apply(y[k], my, ry, (float)a.w[LN_Y][i], (float)a.b[LN_Y][i]);
        }
        store_row(u + off, sum, C);
        return;
    }
    siamese_recompute_sum(sum, x, y, a, (int)row, C);
    if (a.use_ln_in)
        for (int k = 0; k < VALS; k++) {
            int i = row_channel(k);
            if (i < C) sum[k] = ln_apply(sum[k], a.mean[LN_IN][row], a.rstd[LN_IN][row], (float)a.w[LN_IN][i],
                                         (float)a.b[LN_IN][i]);
        }
    store_row(u + off, sum, C);
}

static void siamese_u_recompute(const SiameseBoundaryGrad& a, floatX* u, int N, int C) {
    with_row_vals(C, [&](auto vals) {
        constexpr int V = decltype(vals)::value;
        auto kernel = a.c1 ? siamese_u_recompute_kernel<V, true> : siamese_u_recompute_kernel<V, false>;
        kernel<<<N, row_threads(C)>>>(a, u, C);
    });
    launchCheck();
}

// dparams: gradients of the gain and shift of LN_x, LN_y, LN_in in that order (accumulated, +=)
static void siamese_boundary_backward(const SiameseBoundaryGrad& a, const GradTargets& dparams, int N, int C) {
    with_row_vals(C, [&](auto vals) {
        constexpr int V = decltype(vals)::value;
        auto kernel = a.c1 ? siamese_boundary_backward_kernel<V, true> : siamese_boundary_backward_kernel<V, false>;
        int threads = row_threads(C), grid = row_grid(kernel, threads, N);
        if ((size_t)grid * 2 * SIAMESE_SLOTS * C > gpu.partials_floats) fail("internal: reduction scratch too small");
        kernel<<<grid, threads>>>(a, N, C, gpu.partials);
        launchCheck();
        reduce_partials(dparams, 2 * SIAMESE_SLOTS, C, grid);
    });
}

// ----------------------------------------------------------------------------------------------------------------
// HybridNorm's one-stream boundaries (Zhuo et al. 2025, arXiv 2503.04598; the layouts hybrid and hybrid-star):
//
//   residual (the attention):  u = x;         z = F(u);  x' = x + z        F reads the stream itself
//   normed   (the MLP):        xn = LN(x);    u = xn;    z = F(u);  x' = xn + z
//
// Forward, boundary b: the end of sub-layer b-1 is a residual add, x_b = base + z, base = x_{b-1} after a residual
// (or pre) sub-layer and xn_{b-1} = u_{b-1} after a normed one; a normed start is u_b = LN(x_b), which
// train_gpt2.cu's residual_layernorm_forward does in the same kernel as the add (as for pre); a residual start does
// nothing. Kept: x_b, and for a normed sub-layer u_b (or, under -r 1, only its LayerNorm statistics: u_b is
// recomputed from x_b as pre's is).
// Backward: a residual add passes dL/dx_b on unchanged to z and to base (dz is dx: nothing to do), and a residual
// start adds F's du into dx (as post's does). A normed sub-layer's input u_b reaches the loss twice, through F and
// through x_{b+1} = u_b + z_b, so before its LayerNorm's backward the two gradients add:
//   dx_b = LN'(du_b + dL/dx_{b+1})        (nothing else of x_b reaches the loss)

// block per row: x = base + z (the row kernels' packs of channels)
template <int VALS>
__global__ void __launch_bounds__(MAX_ROW_THREADS)
    residual_forward_kernel(floatX* x, const floatX* base, const floatX* z, int C) {
    size_t off = (size_t)blockIdx.x * C;
    float v[VALS], d[VALS];
    load_row(v, base + off, C);
    load_row(d, z + off, C);
    for (int k = 0; k < VALS; k++) v[k] += d[k];
    store_row(x + off, v, C);
}

static void residual_forward(floatX* x, const floatX* base, const floatX* z, int N, int C) {
    with_row_vals(C, [&](auto vals) {
        residual_forward_kernel<decltype(vals)::value><<<N, row_threads(C)>>>(x, base, z, C);
    });
    launchCheck();
}

// dx = LN'(du + dx) in place over dx (x, mean, rstd: x_b and its statistics). Block per row, striding over rows by
// gridDim.x, as layernorm_backward_kernel; the gain and shift gradients leave as gpu.partials[block][2][C].
template <int VALS>
__global__ void __launch_bounds__(MAX_ROW_THREADS)
    normed_boundary_backward_kernel(floatX* dx, const floatX* du, const floatX* x, const floatX* w,
                                    const float* mean, const float* rstd, int N, int C, float* partials) {
    float dw[VALS], db[VALS];
    for (int k = 0; k < VALS; k++) dw[k] = db[k] = 0.0f;
    for (int row = blockIdx.x; row < N; row += gridDim.x) {
        size_t off = (size_t)row * C;
        float d[VALS], dnext[VALS], v[VALS], out[VALS];
        load_row(d, du + off, C);
        load_row(dnext, dx + off, C);
        load_row(v, x + off, C);
        for (int k = 0; k < VALS; k++) {
            d[k] += dnext[k];  // dL/du_b: through F, and through x_{b+1} = u_b + z_b
            out[k] = 0.0f;
        }
        layernorm_row_backward(out, dw, db, d, v, w, mean[row], rstd[row], C);
        store_row(dx + off, out, C);
    }
    store_partials(partials, 2, 0, dw, C);
    store_partials(partials, 2, 1, db, C);
}

// dw, db: the LayerNorm's gain and shift gradients (accumulated, +=)
static void normed_boundary_backward(floatX* dx, float* dw, float* db, const floatX* du, const floatX* x,
                                     const floatX* w, const float* mean, const float* rstd, int N, int C) {
    with_row_vals(C, [&](auto vals) {
        auto kernel = normed_boundary_backward_kernel<decltype(vals)::value>;
        int threads = row_threads(C), grid = row_grid(kernel, threads, N);
        if ((size_t)grid * 2 * C > gpu.partials_floats) fail("internal: reduction scratch too small");
        kernel<<<grid, threads>>>(dx, du, x, w, mean, rstd, N, C, gpu.partials);
        launchCheck();
        GradTargets t = {{dw, db, nullptr, nullptr, nullptr, nullptr}};
        reduce_partials(t, 2, C, grid);
    });
}
