/*
reference_cpu.cpp: the plain CPU reference and trainer for GPT-2 in the residual/normalization layouts of the
registry in host/layouts.h:

    pre      (GPT-2)                   x += Attn(LN1(x)); x += MLP(LN2(x));          logits from LN_f(x)
    post     (GPT-1, the Transformer)  x = LN1(x + Attn(x)); x = LN2(x + MLP(x));    logits from x
    siamese  (SiameseNorm, Li et al., ICML 2026, arXiv 2602.08064): two streams that share every weight
             x = y = h0; for each sub-layer F (Attn, then MLP) of block l, with c_l = sqrt(2(l+1)):
                 xh = LN_x(x);  z = F(LN_in(xh + LN_y(y)));  x = xh + z/c_l;  y = y + z
             logits from LN_f(LN_xf(x) + LN_yf(y))
    mix      (Mix-LN, Li et al. 2024)  post in the first P = floor(alpha L) blocks, pre after;  logits from LN_f(x)
    deepnorm (DeepNet, Wang et al. 2022)  x = LN(alpha x + F(x)), alpha = (2L)^(1/4);  logits from x
    hybrid   (HybridNorm, Zhuo et al. 2025)  x += Attn_qkvnorm(x); xn = LN2(x); x = xn + MLP(xn);  logits from LN_f(x)
    hybrid-star  (HybridNorm*)  hybrid with block 0 Pre-Norm: x += Attn_qkvnorm(LN1(x)); x += MLP(LN2(x))
    siamese-hybrid (SiameseNorm's language-model form, the official code's hybrid_pre): siamese's MLP and head;
             at the attention  u = c1 x + LN_y(y);  z = Attn_qkvnorm(u);  x = x + z/c_l;  y = y + z
             (c1 a learned gain of C channels per block; Attn_qkvnorm: q, k, v each LayerNorm-ed per head)
    pre-qkvnorm  pre with the attention of the HybridNorm layouts: x += Attn_qkvnorm(LN1(x)); x += MLP(LN2(x))
    peri     (Peri-LN, Kim et al. 2025)  x += LN1o(Attn(LN1(x))); x += LN2o(MLP(LN2(x)));  logits from LN_f(x)
    hc       (Hyper-Connections, Zhu et al. 2025; dynamic, two streams x = y = h0)  per sub-layer and token, from
             xh = LN_h(x), yh = LN_h(y): A = S + s tanh([xh; yh] W^T), the learned connection weights; then
                 z = F(LN(A00 x + A10 y));  x = A01 x + A11 y + A03 z;  y = A02 x + A12 y + A13 z
             logits from LN_f(x + y)

Everything is written out by hand in the spirit of llm.c's train_gpt2.c: each layer is a pair of functions,
`op_forward` and `op_backward`, side by side. Backward functions ACCUMULATE (+=) into gradient buffers that are
zeroed once per step, so a value that feeds several consumers simply collects their gradients: that is all the
Y stream of SiameseNorm needs. The layouts share one attention and one MLP (F); they differ only in one small
function per kind of sub-layer (how the streams become F's input and take its output back) and one per head.

How to read it (the functions in this order; C++ wants them defined bottom-up, so the file runs the other way):
  1. gpt2_forward: the encoder makes h0 = x = y; then for each sub-layer s = 2l + k (k = 0 the attention of block
     l, 1 its MLP) its layout's sub-layer function, e.g. siamese_sublayer_forward, whose body is SiameseNorm's line
     above, F included; then the head, e.g. siamese_head_forward, which ends in the logits; then the loss.
  2. The layouts, each a forward and a backward whose comment is the equation: pre_, post_, deepnorm_,
     siamese_, residual_, normed_, siamese_c1_, peri_ and hc_sublayer_forward / _backward, the heads lnf_, identity_,
     siamese_ and sum_head_forward / _backward, and run_sublayer / run_head, the one place that says which runs where
     (Mix-LN is pre and post, block by block; HybridNorm residual at the attention, normed at the MLP).
     They name their tensors as the paper does (x, y, xh, u, z, ...): the structs SubLayer and Head.
  3. F: attention_block_forward and mlp_block_forward, the same for every layout, but for the QKV-norm of the
     HybridNorm layouts (qkv_norm_forward: q, k and v LayerNorm-ed over each head's channels, before the attention).
  4. gpt2_backward: the same path in reverse; each _backward stands beside its _forward.
  5. The operations, llm.c's pairs: encoder, layernorm, matmul (matmul_forward_naive is the math; matmul_forward
     the same product through host/gemm.h), attention (and the QKV-norm), gelu, add (a + scale b: the residual
     adds and the sums; gain_add, c1's), hc's (hc_weights: A = S + s tanh(hn W^T); row_mix: sums with a weight per
     token), softmax and cross-entropy.
  6. gpt2_update: AdamW.
A first reading may skip the fast matrix products (host/gemm.h, which matmul_forward and matmul_backward call, and
attention's sums, weighted_rows_tile: out[t][i] += coef[t][j] rows[j][i] over j, for each query t of a tile),
the section "where the named tensors live" (the activation buffer that SubLayer and Head point into), and the
trainer's hooks at the end (micro-batches, several processes, ZeRO-1: the trainer's business, not the model's).
Outside this file only the configuration is needed: host/model_config.h (GPT2Config, the parameter tensors) and
host/layouts.h (the registry: the kind of each sub-layer of a layout, and its head).

The scalar type is `real`: float by default, double when built with -DREAL=double (the finite-difference tests).
Define REFERENCE_CPU_NO_MAIN before including this file to use it as a library (the tests and the CUDA checks do).
*/
#include "host/train_loop.h"
#include "host/clear.h"
#include "host/fast_math.h"
#include "host/gemm.h"
#ifdef _OPENMP
#include <omp.h>
#endif

#ifndef REAL
#define REAL float
#endif
typedef REAL real;

typedef ParameterTensorsT<real> ParameterTensors;
// ----------------------------------------------------------------------------------------------------------------
// encoder: h0[b,t,:] = wte[tok[b,t],:] + wpe[t,:]

static void encoder_forward(real* out, const int* inp, const real* wte, const real* wpe, int B, int T, int C) {
    for (int bt = 0; bt < B * T; bt++) {
        const real* we = wte + (size_t)inp[bt] * C;
        const real* pe = wpe + (size_t)(bt % T) * C;
        for (int i = 0; i < C; i++) out[(size_t)bt * C + i] = we[i] + pe[i];
    }
}

static void encoder_backward(real* dwte, real* dwpe, const real* dout, const int* inp, int B, int T, int C) {
    for (int bt = 0; bt < B * T; bt++) {  // serial: two positions may share a token
        real* dwe = dwte + (size_t)inp[bt] * C;
        real* dpe = dwpe + (size_t)(bt % T) * C;
        for (int i = 0; i < C; i++) {
            dwe[i] += dout[(size_t)bt * C + i];
            dpe[i] += dout[(size_t)bt * C + i];
        }
    }
}

// ----------------------------------------------------------------------------------------------------------------
// layernorm: out = (inp - mean) * rstd * w + b over the C channels of each row, eps 1e-5.
// Caches mean and rstd (1/std) per row for the backward pass; the backward also re-reads the input.

static void layernorm_forward(real* out, real* mean, real* rstd, const real* inp, const real* w, const real* b,
                              int N, int C) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const real* x = inp + (size_t)n * C;
        real m = 0;
        for (int i = 0; i < C; i++) m += x[i];
        m /= C;
        real v = 0;
        for (int i = 0; i < C; i++) v += (x[i] - m) * (x[i] - m);
        v /= C;
        real s = 1 / std::sqrt(v + (real)1e-5);
        real* o = out + (size_t)n * C;
        for (int i = 0; i < C; i++) o[i] = (x[i] - m) * s * w[i] + b[i];
        mean[n] = m;
        rstd[n] = s;
    }
}

// With xhat = (x - mean) * rstd and g = w * dout:  dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),
// dw = sum over rows of xhat * dout, db = sum over rows of dout. Rows go in fixed chunks of 16: each chunk sums its
// own dw, db, and the chunks are then added in order, so the result does not depend on the number of threads.
// EXERCISE 1 BEGIN: docs/exercises.md
static void layernorm_backward(real* dinp, real* dw, real* db, const real* dout, const real* inp, const real* w,
                               const real* mean, const real* rstd, int N, int C) {
    const int ROWS = 16;
    int chunks = (N + ROWS - 1) / ROWS;
    std::vector<real> partial((size_t)chunks * 2 * C, 0);  // per chunk: dw (C), then db (C)
#pragma omp parallel for
    for (int k = 0; k < chunks; k++) {
        real* pdw = partial.data() + (size_t)k * 2 * C;
        real* pdb = pdw + C;
        for (int n = k * ROWS; n < N && n < (k + 1) * ROWS; n++) {
            const real* x = inp + (size_t)n * C;
            const real* g = dout + (size_t)n * C;
            real m = mean[n], s = rstd[n];
            real gmean = 0, gxmean = 0;
            for (int i = 0; i < C; i++) {
                real xhat = (x[i] - m) * s;
                gmean += w[i] * g[i];
                gxmean += w[i] * g[i] * xhat;
            }
            gmean /= C;
            gxmean /= C;
            real* dx = dinp + (size_t)n * C;
            for (int i = 0; i < C; i++) {
                real xhat = (x[i] - m) * s;
                dx[i] += s * (w[i] * g[i] - gmean - xhat * gxmean);
            }
            for (int i = 0; i < C; i++) {  // its own loop: GCC 12 left one loop of dx, dw and db unvectorized
                real xhat = (x[i] - m) * s;
                pdw[i] += xhat * g[i];
                pdb[i] += g[i];
            }
        }
    }
    for (int k = 0; k < chunks; k++)
        for (int i = 0; i < C; i++) {
            dw[i] += partial[(size_t)k * 2 * C + i];
            db[i] += partial[(size_t)k * 2 * C + C + i];
        }
}
// EXERCISE 1 END

// One LayerNorm of the model as the layout functions use it: its gain w and shift b, their gradients dw and db, and
// the statistics its forward pass keeps for the backward (mean, rstd), over N rows of C channels.
typedef struct {
    const real *w, *b;
    real *dw, *db;
    real *mean, *rstd;
    int N, C;
} LayerNorm;

// out = LN(inp)
static void layernorm_forward(const LayerNorm& ln, real* out, const real* inp) {
    layernorm_forward(out, ln.mean, ln.rstd, inp, ln.w, ln.b, ln.N, ln.C);
}

// dinp += LN'(dout), and the gradients of LN's gain and shift
static void layernorm_backward(const LayerNorm& ln, real* dinp, const real* dout, const real* inp) {
    layernorm_backward(dinp, ln.dw, ln.db, dout, inp, ln.w, ln.mean, ln.rstd, ln.N, ln.C);
}

// ----------------------------------------------------------------------------------------------------------------
// matmul: out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC), weight stored as PyTorch's nn.Linear.
// The plain loops first, as llm.c keeps matmul_forward_naive: the math. The model runs matmul_forward and
// matmul_backward below, the same products through host/gemm.h; tests/test_reference.cpp holds the two together
// (within float rounding: both sum in the same order, but not every loop fuses its multiply-adds alike).

[[maybe_unused]] static void matmul_forward_naive(real* out, const real* inp, const real* weight, const real* bias,
                                                  int N, int C, int OC) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            real s = bias ? bias[o] : (real)0;
            for (int i = 0; i < C; i++) s += inp[(size_t)n * C + i] * weight[(size_t)o * C + i];
            out[(size_t)n * OC + o] = s;
        }
}

// dinp += dout @ weight;  dweight += dout^T @ inp;  dbias += the column sums of dout
[[maybe_unused]] static void matmul_backward_naive(real* dinp, real* dweight, real* dbias, const real* dout,
                                                   const real* inp, const real* weight, int N, int C, int OC) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++)
            for (int i = 0; i < C; i++) dinp[(size_t)n * C + i] += dout[(size_t)n * OC + o] * weight[(size_t)o * C + i];
    for (int o = 0; o < OC; o++)
        for (int n = 0; n < N; n++)
            for (int i = 0; i < C; i++) dweight[(size_t)o * C + i] += dout[(size_t)n * OC + o] * inp[(size_t)n * C + i];
    if (dbias)
        for (int o = 0; o < OC; o++) {
            real s = 0;
            for (int n = 0; n < N; n++) s += dout[(size_t)n * OC + o];
            dbias[o] += s;
        }
}

// ----------------------------------------------------------------------------------------------------------------
// The same products, fast: host/gemm.h (a first reading skips it), packed panels and a register-blocked kernel
// for the machine's vector width. Each is one call of C += A @ B with A and B read through strides. Every output
// is summed over k in increasing order from the value already there (here the bias), so the result is the same for
// any number of threads; tests/test_reference.cpp holds it to the plain loops above (within rounding), and
// tests/test_gemm.cpp to that order bit for bit.

// out = bias; out += inp (N, C) @ weight^T:  A(n, i) = inp[n C + i],  B(i, o) = weight[o C + i]
static void matmul_forward(real* out, const real* inp, const real* weight, const real* bias, int N, int C, int OC) {
#pragma omp parallel for
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) out[(size_t)n * OC + o] = bias ? bias[o] : (real)0;
    gemm_cpu::gemm_acc(out, OC, inp, C, 1, weight, 1, C, N, OC, C);
}

static void matmul_backward(real* dinp, real* dweight, real* dbias, const real* dout, const real* inp,
                            const real* weight, int N, int C, int OC) {
    gemm_cpu::gemm_acc(dinp, C, dout, OC, 1, weight, C, 1, N, C, OC);  // dinp (N, C) += dout (N, OC) @ weight (OC, C)
    gemm_cpu::gemm_acc(dweight, C, dout, 1, OC, inp, C, 1, OC, C, N);  // dweight (OC, C) += dout^T @ inp (N, C)
    if (dbias) {  // dbias += the column sums of dout, each over n in order, 64 columns at a time (along the rows)
#pragma omp parallel for
        for (int o0 = 0; o0 < OC; o0 += 64) {
            int w = OC - o0 < 64 ? OC - o0 : 64;
            real s[64] = {};
            for (int n = 0; n < N; n++)
                for (int j = 0; j < w; j++) s[j] += dout[(size_t)n * OC + o0 + j];
            for (int j = 0; j < w; j++) dbias[o0 + j] += s[j];
        }
    }
}

// ----------------------------------------------------------------------------------------------------------------
// attention: qkv (B, T, 3C) holds q, k, v; NH heads of size hs = C/NH. Causal softmax(q.k / sqrt(hs)) @ v.
// Caches att (the softmax, (B, NH, T, T)) for the backward pass. The scores before the softmax, and the backward's
// gradients of both, are each head's business: they live in a scratch buffer of the thread's (kept from call to call,
// so that the training step allocates nothing), not in three more (B, NH, T, T) tensors as in llm.c (their memory
// traffic was about 4% of the step at 64 channels).
// Every sum below runs over its index in order (i for a dot product, t2 for a sum over keys, t over queries), so the
// result does not depend on the threads. The sums are gemm_cpu::weighted_rows_tile calls (host/gemm.h, which a first
// reading skips): for each query t of a tile of QTILE queries t0 .. t0 + QTILE - 1, out[t][i] = sum over t2 of coef[t][t2]
// rows[t2][i], the plain loop with its running sums kept in registers, the QTILE queries side by side. For the dot products
// q . k[t2] of all keys at once, each head's keys are first copied transposed (kT), so that along t2 they are rows too;
// the same for the values in the backward pass.
static const int QTILE = 4;  // queries (in the backward's second pass, keys) a weighted_rows_tile call sums at once

// The keys 0..t rounded up to whole vectors (at most T): the scores of the keys past t cost nothing more to compute
// along t2, and are masked (forward) or left unused (backward).
static int keys_in_whole_vectors(int t, int T) {
    const int VL = gemm_cpu::Native<real>::VL;
    return std::min(T, (t + VL) / VL * VL);
}

// One head's keys (or values) transposed, hs x T: a buffer of each thread's, kept from call to call, so that the
// training step allocates nothing.
static real* head_transposed(const real* rows, size_t stride, int T, int hs) {
    static thread_local std::vector<real> buf;
    if (buf.size() < (size_t)hs * T) buf.resize((size_t)hs * T);
    for (int t2 = 0; t2 < T; t2++)
        for (int i = 0; i < hs; i++) buf[(size_t)i * T + t2] = rows[(size_t)t2 * stride + i];
    return buf.data();
}

static void attention_forward(real* out, real* att, const real* qkv, int B, int T, int C, int NH) {
    int C3 = 3 * C, hs = C / NH;
    real scale = 1 / std::sqrt((real)hs);
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int hd = 0; hd < NH; hd++) {
            const real* qkv0 = qkv + (size_t)b * T * C3 + hd * hs;  // q[t] at qkv0 + t 3C, k[t] + C, v[t] + 2C
            const real* kT = head_transposed(qkv0 + C, C3, T, hs);   // kT[i T + t2] = k[t2][i]
            static thread_local std::vector<real> scores;  // a tile's: pre[t][t2] at scores[(t - t0) T + t2]
            if (scores.size() < (size_t)QTILE * T) scores.resize((size_t)QTILE * T);
            real* a0 = att + ((size_t)b * NH + hd) * T * T;
            for (int t0 = 0; t0 < T; t0 += QTILE) {  // the queries t0 .. t0 + nq - 1
                int nq = std::min(QTILE, T - t0);
                // scores against keys 0..t: pre[t][t2] = (q[t] . k[t2]) * scale
                gemm_cpu::weighted_rows_tile<false>(nq, scores.data(), T, qkv0 + (size_t)t0 * C3, C3, 1, kT, T,
                                                    keys_in_whole_vectors(t0 + nq - 1, T), 0, 0, hs, 0);
                for (int t = t0; t < t0 + nq; t++) {
                    real* pre = scores.data() + (size_t)(t - t0) * T;
                    real* a = a0 + (size_t)t * T;
                    real maxv = -INFINITY;
                    for (int t2 = 0; t2 <= t; t2++) {
                        pre[t2] *= scale;
                        if (pre[t2] > maxv) maxv = pre[t2];
                    }
                    real sum = 0;
                    for (int t2 = 0; t2 <= t; t2++) {
                        a[t2] = std::exp(pre[t2] - maxv);
                        sum += a[t2];
                    }
                    for (int t2 = 0; t2 <= t; t2++) a[t2] /= sum;
                    for (int t2 = t + 1; t2 < T; t2++) a[t2] = 0;  // masked: no weight on the future
                }
                // out[t] = sum over t2 <= t of a[t][t2] v[t2]
                gemm_cpu::weighted_rows_tile<false>(nq, out + ((size_t)b * T + t0) * C + hd * hs, C, a0 + (size_t)t0 * T,
                                                    T, 1, qkv0 + 2 * C, C3, hs, 0, 0, t0 + 1, 1);
            }
        }
}

// With g = dout[t] (this head's part) and d = dpre[t2] * scale:  datt[t][t2] += v[t2] . g;  dpre = att * (datt -
// sum(att * datt));  dq[t] += sum over t2 <= t of d k[t2];  and, as sums over the queries t >= t2 that see key t2,
// dk[t2] += sum of d q[t], dv[t2] += sum of att[t][t2] g[t]. So two passes per head: the queries, then the keys.
// Parallel over (b, hd): each owns its slices of every buffer; datt and dpre are this head's alone (T x T each).
static void attention_backward(real* dqkv, const real* dout, const real* qkv, const real* att, int B, int T, int C,
                               int NH) {
    int C3 = 3 * C, hs = C / NH;
    real scale = 1 / std::sqrt((real)hs);
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int hd = 0; hd < NH; hd++) {
            static thread_local std::vector<real> w;  // QTILE rows of weights (as head_transposed's buffer)
            if (w.size() < (size_t)QTILE * T) w.resize((size_t)QTILE * T);
            const real* qkv0 = qkv + (size_t)b * T * C3 + hd * hs;  // q[t] at qkv0 + t 3C, k[t] + C, v[t] + 2C
            real* dqkv0 = dqkv + (size_t)b * T * C3 + hd * hs;      // dq, dk, dv alike
            const real* g0 = dout + (size_t)b * T * C + hd * hs;    // g[t] = g0 + t C
            const real* a0 = att + ((size_t)b * NH + hd) * T * T;    // att[t][t2] = a0[t T + t2]
            static thread_local std::vector<real> head_grads;  // datt[t][t2] = da0[t T + t2], dpre alike; from 0
            head_grads.assign((size_t)2 * T * T, 0);
            real *da0 = head_grads.data(), *dpre0 = head_grads.data() + (size_t)T * T;
            const real* vT = head_transposed(qkv0 + 2 * C, C3, T, hs);  // vT[i T + t2] = v[t2][i]
            for (int t0 = 0; t0 < T; t0 += QTILE) {  // the queries t0 .. t0 + nq - 1: datt, dpreatt, dq
                int nq = std::min(QTILE, T - t0);
                // through out = att @ v: datt[t][t2] += v[t2] . g[t]  (w[(t - t0) T + t2] = v[t2] . g[t])
                gemm_cpu::weighted_rows_tile<false>(nq, w.data(), T, g0 + (size_t)t0 * C, C, 1, vT, T,
                                                    keys_in_whole_vectors(t0 + nq - 1, T), 0, 0, hs, 0);
                for (int t = t0; t < t0 + nq; t++) {
                    const real* a = a0 + (size_t)t * T;
                    real *da = da0 + (size_t)t * T, *dpre = dpre0 + (size_t)t * T, *wt = w.data() + (t - t0) * T;
                    for (int t2 = 0; t2 <= t; t2++) da[t2] += wt[t2];
                    real dot = 0;  // through the softmax
                    for (int t2 = 0; t2 <= t; t2++) dot += a[t2] * da[t2];
                    for (int t2 = 0; t2 <= t; t2++) dpre[t2] += a[t2] * (da[t2] - dot);
                    for (int t2 = 0; t2 <= t; t2++) wt[t2] = dpre[t2] * scale;  // d, for the scores' backward
                }
                // through the scores (q . k[t2]) * scale: dq[t] += sum over t2 <= t of d[t][t2] k[t2]
                gemm_cpu::weighted_rows_tile<true>(nq, dqkv0 + (size_t)t0 * C3, C3, w.data(), T, 1, qkv0 + C, C3, hs,
                                                   0, 0, t0 + 1, 1);
            }
            for (int t0 = 0; t0 < T; t0 += QTILE) {  // the keys t0 .. t0 + nq - 1: dv and dk, each over the queries t >= it
                int nq = std::min(QTILE, T - t0);
                // dv[t2] += sum over t >= t2 of att[t][t2] g[t]  (the weights read down att's column t2)
                gemm_cpu::weighted_rows_tile<true>(nq, dqkv0 + (size_t)t0 * C3 + 2 * C, C3, a0 + t0, 1, T,
                                                   g0, C, hs, t0, 1, T, 0);
                // dk[t2] += sum over t >= t2 of d[t][t2] q[t]  (w[t QTILE + r] = d[t][t0 + r])
                for (int t = t0; t < T; t++)
                    for (int r = 0; r < nq; r++) w[(size_t)t * QTILE + r] = dpre0[(size_t)t * T + t0 + r] * scale;
                gemm_cpu::weighted_rows_tile<true>(nq, dqkv0 + (size_t)t0 * C3 + C, C3, w.data(), 1, QTILE, qkv0, C3, hs,
                                                   t0, 1, T, 0);
            }
        }
}

// ----------------------------------------------------------------------------------------------------------------
// QKV-norm (HybridNorm's; the official code's q_norm, k_norm, v_norm): qkv (B, T, 3C) = u W_qkv + b holds q, k and v,
// each NH heads of hs = C/NH channels, so it is B*T*3*NH rows of hs. Each row is LayerNorm-ed over its hs channels,
// as layernorm_forward does (eps 1e-5), with the gain w[j] and shift b[j] (hs each, shared by the heads) of its
// part j (0 q, 1 k, 2 v):  out[bt, j, hd, :] = LN_j(inp[bt, j, hd, :]). Caches mean and rstd per row, (B, T, 3, NH).

static void qkv_norm_forward(real* out, real* mean, real* rstd, const real* inp, const real* const w[3],
                             const real* const b[3], int N, int C, int NH) {
    int hs = C / NH;
#pragma omp parallel for
    for (int r = 0; r < N * 3 * NH; r++) {  // row r: token r / (3 NH), part j = (r / NH) % 3, head r % NH
        int j = r / NH % 3;
        const real* x = inp + (size_t)r * hs;
        real m = 0;
        for (int i = 0; i < hs; i++) m += x[i];
        m /= hs;
        real v = 0;
        for (int i = 0; i < hs; i++) v += (x[i] - m) * (x[i] - m);
        v /= hs;
        real s = 1 / std::sqrt(v + (real)1e-5);
        real* o = out + (size_t)r * hs;
        for (int i = 0; i < hs; i++) o[i] = (x[i] - m) * s * w[j][i] + b[j][i];
        mean[r] = m;
        rstd[r] = s;
    }
}

// Each row's backward is layernorm_backward's: with xhat = (x - mean) * rstd and g = w_j * dout,
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)); dw_j += xhat * dout, db_j += dout, summed over the rows of part
// j (every token and head). Tokens go in fixed chunks of 16, as there: each chunk sums its own dw, db, and the chunks
// are then added in order, so the result does not depend on the number of threads.
// EXERCISE 7 BEGIN: docs/exercises.md
static void qkv_norm_backward(real* dinp, real* const dw[3], real* const db[3], const real* dout, const real* inp,
                              const real* const w[3], const real* mean, const real* rstd, int N, int C, int NH) {
    int hs = C / NH;
    const int ROWS = 16;
    int chunks = (N + ROWS - 1) / ROWS;
    std::vector<real> partial((size_t)chunks * 3 * 2 * hs, 0);  // per chunk and part j: dw (hs), then db (hs)
#pragma omp parallel for
    for (int k = 0; k < chunks; k++)
        for (int r = k * ROWS * 3 * NH; r < N * 3 * NH && r < (k + 1) * ROWS * 3 * NH; r++) {
            int j = r / NH % 3;
            real* pdw = partial.data() + ((size_t)k * 3 + j) * 2 * hs;
            real* pdb = pdw + hs;
            const real* x = inp + (size_t)r * hs;
            const real* g = dout + (size_t)r * hs;
            real m = mean[r], s = rstd[r];
            real gmean = 0, gxmean = 0;
            for (int i = 0; i < hs; i++) {
                real xhat = (x[i] - m) * s;
                gmean += w[j][i] * g[i];
                gxmean += w[j][i] * g[i] * xhat;
            }
            gmean /= hs;
            gxmean /= hs;
            real* dx = dinp + (size_t)r * hs;
            for (int i = 0; i < hs; i++) {
                real xhat = (x[i] - m) * s;
                dx[i] += s * (w[j][i] * g[i] - gmean - xhat * gxmean);
                pdw[i] += xhat * g[i];
                pdb[i] += g[i];
            }
        }
    for (int k = 0; k < chunks; k++)
        for (int j = 0; j < 3; j++)
            for (int i = 0; i < hs; i++) {
                dw[j][i] += partial[((size_t)k * 3 + j) * 2 * hs + i];
                db[j][i] += partial[((size_t)k * 3 + j) * 2 * hs + hs + i];
            }
}
// EXERCISE 7 END

// ----------------------------------------------------------------------------------------------------------------
// GELU, tanh approximation: gelu(x) = x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))). fast_tanh is tanh, in a
// form the loops vectorize (host/fast_math.h; the float C library's tanhf to within 1e-7).

static const double GELU_K = 0.79788456080286535588;  // sqrt(2/pi)

static void gelu_forward(real* out, const real* inp, size_t N) {
#pragma omp parallel for
    for (size_t i = 0; i < N; i++) {
        real x = inp[i];
        out[i] = (real)0.5 * x * (1 + fast_tanh((real)GELU_K * (x + (real)0.044715 * x * x * x)));
    }
}

static void gelu_backward(real* dinp, const real* inp, const real* dout, size_t N) {
#pragma omp parallel for
    for (size_t i = 0; i < N; i++) {
        real x = inp[i];
        real u = (real)GELU_K * (x + (real)0.044715 * x * x * x);
        real th = fast_tanh(u);
        real sech2 = 1 - th * th;
        real du = (real)GELU_K * (1 + 3 * (real)0.044715 * x * x);
        dinp[i] += ((real)0.5 * (1 + th) + (real)0.5 * x * sech2 * du) * dout[i];
    }
}

// ----------------------------------------------------------------------------------------------------------------
// add: out = a + scale * b, element by element, and its backward. The residual adds (Pre-Norm's x' = x + z, the Y
// stream's y' = y + z) use scale 1, SiameseNorm's X stream x' = xh + z / c_l scale 1/c_l, DeepNorm's alpha x + z
// scale alpha; and the plain sums (SiameseNorm's sum = xh + yh, which LN_in reads; Post-Norm's x + z) are adds too.

static void add_forward(real* out, const real* a, const real* b, real scale, size_t N) {
#pragma omp parallel for
    for (size_t i = 0; i < N; i++) out[i] = a[i] + scale * b[i];
}

static void add_backward(real* da, real* db, const real* dout, real scale, size_t N) {
#pragma omp parallel for
    for (size_t i = 0; i < N; i++) {
        da[i] += dout[i];
        db[i] += scale * dout[i];
    }
}

// out = g * a + b over rows of C channels, g a gain of C channels (siamese_c1's u = c1 x + LN_y(y)); n elements
static void gain_add_forward(real* out, const real* g, const real* a, const real* b, size_t n, int C) {
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) out[i] = g[i % C] * a[i] + b[i];
}

// dg += the sum over rows of dout * a;  da += g * dout;  db += dout. Parallel over the channels: each channel's dg
// is summed over the rows in order by one thread, so the result does not depend on the number of threads.
static void gain_add_backward(real* dg, real* da, real* db, const real* dout, const real* g, const real* a,
                              size_t n, int C) {
    size_t rows = n / C;
#pragma omp parallel for
    for (int i = 0; i < C; i++) {
        real s = 0;
        for (size_t r = 0; r < rows; r++) {
            size_t e = r * C + i;
            s += dout[e] * a[e];
            da[e] += g[i] * dout[e];
            db[e] += dout[e];
        }
        dg[i] += s;
    }
}

// ----------------------------------------------------------------------------------------------------------------
// hyper-connections (the hc layout): the per-token connection weights and the sums they weigh.
// A token's weights are one row of HC_ROW = 8 numbers, A[j][m] at j * 4 + m: for stream j (0: x, 1: y) the paper's
// alpha_j0 (its share of F's input), alpha_j1 and alpha_j2 (its share of the streams x' and y'), and beta_j (m = 3:
// how much of F's output z stream j takes).
static const int HC_ROW = 8;

// A = S + s tanh(hn W^T) for each token r and stream j: A[r][j][m] = S[j][m] + s_m tanh(hn_j[r] . W[m]), with hn_0 =
// hx (LN_h(x)), hn_1 = hy (LN_h(y)), W (4, C), s_m = sc[0] (alpha's scale) for m < 3 and sc[1] (beta's) for m = 3.
// D keeps the tanh for the backward.
static void hc_weights_forward(real* A, real* D, const real* hx, const real* hy, const real* S, const real* W,
                               const real* sc, int N, int C) {
#pragma omp parallel for
    for (int r = 0; r < N; r++)
        for (int j = 0; j < 2; j++) {
            const real* h = (j ? hy : hx) + (size_t)r * C;
            for (int m = 0; m < 4; m++) {
                real p = 0;
                for (int i = 0; i < C; i++) p += h[i] * W[m * C + i];
                size_t e = (size_t)r * HC_ROW + j * 4 + m;
                D[e] = std::tanh(p);
                A[e] = S[j * 4 + m] + sc[m == 3] * D[e];
            }
        }
}

// With g = dA s_m (1 - D^2), the gradient of the tanh's argument (kept in dD):  dhn_j += sum_m g[j][m] W[m];
// dW[m] += the sum over tokens and streams of g[j][m] hn_j;  dS += the sum over tokens of dA;  ds_m += the sum over
// tokens of dA D (over m < 3 for alpha's scale).  Every sum over tokens runs in token order (dW's, all C channels of
// a row m side by side; dS and ds in one loop), so the result does not depend on the number of threads.
static void hc_weights_backward(real* dhx, real* dhy, real* dS, real* dW, real* dsc, real* g, const real* dA,
                                const real* D, const real* hx, const real* hy, const real* W, const real* sc, int N,
                                int C) {
    for (size_t e = 0; e < (size_t)N * HC_ROW; e++) g[e] = dA[e] * sc[e % 4 == 3] * (1 - D[e] * D[e]);
#pragma omp parallel for
    for (int r = 0; r < N; r++)
        for (int j = 0; j < 2; j++) {
            real* dh = (j ? dhy : dhx) + (size_t)r * C;
            for (int m = 0; m < 4; m++) {
                real gm = g[(size_t)r * HC_ROW + j * 4 + m];
                for (int i = 0; i < C; i++) dh[i] += gm * W[m * C + i];
            }
        }
#pragma omp parallel for
    for (int m = 0; m < 4; m++) {
        static thread_local std::vector<real> sum;  // dW[m]'s, channel by channel (kept from call to call)
        sum.assign(C, 0);
        for (int r = 0; r < N; r++)
            for (int j = 0; j < 2; j++) {
                real gm = g[(size_t)r * HC_ROW + j * 4 + m];
                const real* h = (j ? hy : hx) + (size_t)r * C;
                for (int i = 0; i < C; i++) sum[i] += gm * h[i];
            }
        for (int i = 0; i < C; i++) dW[m * C + i] += sum[i];
    }
    for (int r = 0; r < N; r++)
        for (int e = 0; e < HC_ROW; e++) {
            real da = dA[(size_t)r * HC_ROW + e];
            dS[e] += da;
            dsc[e % 4 == 3] += da * D[(size_t)r * HC_ROW + e];
        }
}

// One term w v of a row mix: rows v (N, C), the weight of row r at w[r * HC_ROW] (a column of A), their gradients
typedef struct {
    const real* v;
    real* dv;
    const real* w;
    real* dw;
} MixTerm;

// out = the sum of the terms' w v, row by row (each row r its own weights): hc's width and depth connections
static void row_mix_forward(real* out, std::initializer_list<MixTerm> terms, int N, int C) {
#pragma omp parallel for
    for (int r = 0; r < N; r++) {
        real* o = out + (size_t)r * C;
        for (int i = 0; i < C; i++) o[i] = 0;
        for (const MixTerm& t : terms) {
            real w = t.w[(size_t)r * HC_ROW];
            for (int i = 0; i < C; i++) o[i] += w * t.v[(size_t)r * C + i];
        }
    }
}

// for each term:  dv += w dout;  dw += dout . v (row by row)
static void row_mix_backward(const real* dout, std::initializer_list<MixTerm> terms, int N, int C) {
#pragma omp parallel for
    for (int r = 0; r < N; r++) {
        const real* d = dout + (size_t)r * C;
        for (const MixTerm& t : terms) {
            real w = t.w[(size_t)r * HC_ROW], dw = 0;
            for (int i = 0; i < C; i++) {
                t.dv[(size_t)r * C + i] += w * d[i];
                dw += d[i] * t.v[(size_t)r * C + i];
            }
            t.dw[(size_t)r * HC_ROW] += dw;
        }
    }
}

// ----------------------------------------------------------------------------------------------------------------
// softmax and cross-entropy over the real vocabulary V; the padded logits V..Vp-1 get probability 0, so they never
// win and never take mass from the loss.  losses[b,t] = -log probs[target];  dlogits = (probs - onehot) * dloss.

static void softmax_forward(real* probs, const real* logits, int N, int V, int Vp) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const real* l = logits + (size_t)n * Vp;
        real* p = probs + (size_t)n * Vp;
        real maxv = -INFINITY;
        for (int i = 0; i < V; i++) maxv = l[i] > maxv ? l[i] : maxv;
        real sum = 0;
        for (int i = 0; i < V; i++) {
            p[i] = std::exp(l[i] - maxv);
            sum += p[i];
        }
        for (int i = 0; i < V; i++) p[i] /= sum;
        for (int i = V; i < Vp; i++) p[i] = 0;
    }
}

static void crossentropy_forward(real* losses, const real* probs, const int* targets, int N, int Vp) {
    for (int n = 0; n < N; n++) losses[n] = -std::log(probs[(size_t)n * Vp + targets[n]]);
}

static void crossentropy_softmax_backward(real* dlogits, const real* probs, const int* targets, real dloss, int N,
                                          int V, int Vp) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        real* dl = dlogits + (size_t)n * Vp;
        const real* p = probs + (size_t)n * Vp;
        for (int i = 0; i < V; i++) dl[i] += (p[i] - (i == targets[n] ? 1 : 0)) * dloss;
    }
}

// ----------------------------------------------------------------------------------------------------------------
// the model: parameters (host/model_config.h) and activations, each one buffer of named tensors, as in llm.c

typedef struct {
    // the streams and, for each sub-layer s = 2l + k (k = 0: the attention of block l, 1: its MLP), the tensors its
    // layout's equations name (see SubLayer below; a kind uses those it names, the others stay 0)
    real* x;         // (2L+1, B,T,C) x[s] enters sub-layer s; x[0] = h0 = wte[tok] + wpe[pos], x[2L] the top
    real* y;         // (2L+1, B,T,C) the second stream of two-stream layouts (siamese: Y), y[0] = h0
    real* xh;        // (2L, B,T,C) siamese: LN_x(x) (two-stream layouts)
    real* yh;        // (2L, B,T,C) siamese: LN_y(y) (two-stream layouts)
    real* sum;       // (2L, B,T,C) the sum a LayerNorm reads: siamese xh + yh, post x + z, deepnorm alpha x + z
    real* u;         // (2L, B,T,C) F's input where the boundary makes it: pre LN(x), siamese LN_in(sum), siamese_c1
                     //   c1 x + LN_y(y)
    real* z;         // (2L, B,T,C) F's output
    real* zn;        // (2L, B,T,C) peri: LN_out(z), F's output normalized (the layouts with an output LayerNorm)
    real* hcA;       // (2L, B,T,8) hc: the connection weights A of each token (HC_ROW), and
    real* hcD;       // (2L, B,T,8)   the tanh of their dynamic part, kept for the backward pass (its gradient
                     //   buffer: the gradient of the tanh's argument, hc_weights_backward's g)
    real* ln_mean;   // (2L, 4, B,T) the statistics of each sub-layer's LayerNorms (slots LN_X, LN_Y, LN_IN, LN_OUT),
    real* ln_rstd;   // (2L, 4, B,T)   kept for the backward pass
    // inside F, for each block l
    real* qkv;       // (L, B,T,3C) q, k, v as the attention reads them (QKV-norm layouts: LN_q(q), LN_k(k), LN_v(v))
    real* qkvr;      // (L, B,T,3C) QKV-norm layouts: u W_qkv + b, before the norms
    real* qkvn_mean; // (L, B,T,3,NH) QKV-norm layouts: the statistics of each head's LN_q, LN_k, LN_v, kept for the
    real* qkvn_rstd; // (L, B,T,3,NH)   backward pass
    real* att;       // (L, B,NH,T,T) the softmax (its gradient: attention_backward's scratch, not kept)
    real* atty;      // (L, B,T,C) attention output before its projection
    real* fch;       // (L, B,T,4C)
    real* fch_gelu;  // (L, B,T,4C)
    // the head (see Head below)
    real* xf;        // (B,T,C) siamese: LN_xf(x) (two-stream layouts, as the next two)
    real* yf;        // (B,T,C) siamese: LN_yf(y)
    real* head_sum;  // (B,T,C) siamese: LN_xf(x) + LN_yf(y)
    real* hf;        // (B,T,C) what the tied wte turns into logits, where a LayerNorm makes it: LN_f(...)
    real* lnf_mean;  // (4, B,T) the head's LayerNorm statistics, by slot
    real* lnf_rstd;  // (4, B,T)
    real* logits;    // (B,T,Vp)
    real* probs;     // (B,T,Vp)
    real* losses;    // (B,T)
} ActivationTensors;

typedef struct {
    GPT2Config config;
    std::vector<TensorInfo> tensors;  // checkpoint order
    ParameterTensors params, grads;
    size_t num_parameters;
    real *params_memory, *grads_memory;
    real *m_memory, *v_memory;  // AdamW moments, allocated at the first update
    ActivationTensors acts, grads_acts;
    size_t num_activations, num_activation_grads;  // the sizes of acts_memory and grads_acts_memory
    real *acts_memory, *grads_acts_memory;
    int batch_size, seq_len;  // the shape the activations were allocated for
    int B, T;                 // the shape of the last forward pass
    int *inputs, *targets;
    real mean_loss;  // of the last forward pass with targets; -1 without
} GPT2;

// allocates the parameters and their gradients for model->config (the optimizer state comes with the first update)
static void gpt2_allocate_parameters(GPT2* model) {
    const GPT2Config& c = model->config;
    model->tensors = parameter_table(c);
    model->num_parameters = count_parameters(c);
    model->params_memory = (real*)calloc_or_fail(model->num_parameters, sizeof(real));
    model->grads_memory = (real*)calloc_or_fail(model->num_parameters, sizeof(real));
    point_parameters(c, &model->params, model->params_memory);
    point_parameters(c, &model->grads, model->grads_memory);
    model->m_memory = model->v_memory = nullptr;
    model->acts_memory = model->grads_acts_memory = nullptr;
    model->inputs = model->targets = nullptr;
    model->batch_size = model->seq_len = 0;
    model->mean_loss = -1;
}

// a new model with GPT-2's initialization (see init_parameters)
static void gpt2_init_random(GPT2* model, const GPT2Config& config, uint64_t seed) {
    validate_config(config);
    model->config = config;
    gpt2_allocate_parameters(model);
    init_parameters(config, seed, model->params_memory);
}

static void gpt2_build_from_checkpoint(GPT2* model, const char* path) {
    FILE* f = checkpoint_open(path, &model->config);
    gpt2_allocate_parameters(model);
    checkpoint_read_parameters(f, path, model->params_memory, model->num_parameters);
}

static FileSum gpt2_save_checkpoint(const GPT2* model, const char* path) {
    return checkpoint_write(path, model->config, model->params_memory);
}

// ----------------------------------------------------------------------------------------------------------------
// F, the two sub-layers every layout shares: causal self-attention and the MLP of block l, z = F(u). The backward
// passes go from dz to du (accumulated, +=) and the weight gradients. In the HybridNorm layouts (qkv_norm in their
// row of host/layouts.h) the attention LayerNorms q, k and v of each head before it reads them (qkv_norm_forward).

// block l's rows of the QKV-norm's gains and shifts (q, k, v; hs channels each), of the parameters or of their
// gradients
typedef struct { real* w[3]; real* b[3]; } QKVNormRows;
static QKVNormRows qkv_norm_rows(const ParameterTensors& t, int l, int hs) {
    QKVNormRows r;
    for (int j = 0; j < 3; j++) r.w[j] = t.lnqkvw[j] + (size_t)l * hs, r.b[j] = t.lnqkvb[j] + (size_t)l * hs;
    return r;
}

static void attention_block_forward(GPT2* m, int l, const real* u, real* z) {
    const GPT2Config& c = m->config;
    int B = m->B, T = m->T, C = c.channels, NH = c.num_heads, N = B * T, hs = C / NH;
    ParameterTensors* p = &m->params;
    ActivationTensors* a = &m->acts;
    real* qkv = a->qkv + (size_t)l * N * 3 * C;
    real* att = a->att + (size_t)l * B * NH * T * T;
    real* atty = a->atty + (size_t)l * N * C;
    if (!layout_of(c).qkv_norm) {
        matmul_forward(qkv, u, p->qkvw + (size_t)l * 3 * C * C, p->qkvb + (size_t)l * 3 * C, N, C, 3 * C);
    } else {  // QKV-norm: q, k, v = LN_q, LN_k, LN_v (per head) of u W_qkv + b
        real* qkvr = a->qkvr + (size_t)l * N * 3 * C;
        size_t stats = (size_t)l * N * 3 * NH;
        QKVNormRows n = qkv_norm_rows(*p, l, hs);
        matmul_forward(qkvr, u, p->qkvw + (size_t)l * 3 * C * C, p->qkvb + (size_t)l * 3 * C, N, C, 3 * C);
        qkv_norm_forward(qkv, a->qkvn_mean + stats, a->qkvn_rstd + stats, qkvr, n.w, n.b, N, C, NH);
    }
    attention_forward(atty, att, qkv, B, T, C, NH);
    matmul_forward(z, atty, p->attprojw + (size_t)l * C * C, p->attprojb + (size_t)l * C, N, C, C);
}

static void attention_block_backward(GPT2* m, int l, const real* u, real* du, const real* dz) {
    const GPT2Config& c = m->config;
    int B = m->B, T = m->T, C = c.channels, NH = c.num_heads, N = B * T, hs = C / NH;
    ParameterTensors *p = &m->params, *g = &m->grads;
    ActivationTensors *a = &m->acts, *d = &m->grads_acts;
    size_t qkv_off = (size_t)l * N * 3 * C, att_off = (size_t)l * B * NH * T * T, y_off = (size_t)l * N * C;
    matmul_backward(d->atty + y_off, g->attprojw + (size_t)l * C * C, g->attprojb + (size_t)l * C, dz,
                    a->atty + y_off, p->attprojw + (size_t)l * C * C, N, C, C);
    attention_backward(d->qkv + qkv_off, d->atty + y_off, a->qkv + qkv_off, a->att + att_off, B, T, C, NH);
    real* dqkv = d->qkv + qkv_off;  // the gradient of u W_qkv + b
    if (layout_of(c).qkv_norm) {    // through the QKV-norm: d(u W_qkv + b) = LN_q', LN_k', LN_v' of dq, dk, dv
        size_t stats = (size_t)l * N * 3 * NH;
        QKVNormRows n = qkv_norm_rows(*p, l, hs), dn = qkv_norm_rows(*g, l, hs);
        qkv_norm_backward(d->qkvr + qkv_off, dn.w, dn.b, d->qkv + qkv_off, a->qkvr + qkv_off, n.w, a->qkvn_mean + stats,
                          a->qkvn_rstd + stats, N, C, NH);
        dqkv = d->qkvr + qkv_off;
    }
    matmul_backward(du, g->qkvw + (size_t)l * 3 * C * C, g->qkvb + (size_t)l * 3 * C, dqkv, u,
                    p->qkvw + (size_t)l * 3 * C * C, N, C, 3 * C);
}

static void mlp_block_forward(GPT2* m, int l, const real* u, real* z) {
    const GPT2Config& c = m->config;
    int C = c.channels, N = m->B * m->T;
    ParameterTensors* p = &m->params;
    ActivationTensors* a = &m->acts;
    real* fch = a->fch + (size_t)l * N * 4 * C;
    real* fch_gelu = a->fch_gelu + (size_t)l * N * 4 * C;
    matmul_forward(fch, u, p->fcw + (size_t)l * 4 * C * C, p->fcb + (size_t)l * 4 * C, N, C, 4 * C);
    gelu_forward(fch_gelu, fch, (size_t)N * 4 * C);
    matmul_forward(z, fch_gelu, p->fcprojw + (size_t)l * C * 4 * C, p->fcprojb + (size_t)l * C, N, 4 * C, C);
}

static void mlp_block_backward(GPT2* m, int l, const real* u, real* du, const real* dz) {
    const GPT2Config& c = m->config;
    int C = c.channels, N = m->B * m->T;
    ParameterTensors *p = &m->params, *g = &m->grads;
    ActivationTensors *a = &m->acts, *d = &m->grads_acts;
    size_t off = (size_t)l * N * 4 * C;
    matmul_backward(d->fch_gelu + off, g->fcprojw + (size_t)l * C * 4 * C, g->fcprojb + (size_t)l * C, dz,
                    a->fch_gelu + off, p->fcprojw + (size_t)l * C * 4 * C, N, 4 * C, C);
    gelu_backward(d->fch + off, a->fch + off, d->fch_gelu + off, (size_t)N * 4 * C);
    matmul_backward(du, g->fcw + (size_t)l * 4 * C * C, g->fcb + (size_t)l * 4 * C, d->fch + off, u,
                    p->fcw + (size_t)l * 4 * C * C, N, C, 4 * C);
}

// ----------------------------------------------------------------------------------------------------------------
// The layouts. A layout is what happens around F at each sub-layer, the boundary (how the stream or streams become
// F's input u and take its output z back), and at the head. Each kind of sub-layer (host/layouts.h) is one
// forward and one backward function below, whose body is its equations; each head likewise. They see their
// tensors by the names the equations use, in a SubLayer or a Head; the gradient of tensor t is dt (dx = dL/dx).
// Every backward ACCUMULATES into the gradients, which start at 0, in the reverse order of its forward.

// Sub-layer s = 2l + k: k = 0 the attention of block l, k = 1 its MLP. Each tensor is (B,T,C).
typedef struct {
    GPT2* m;
    int s;                       // which sub-layer (F_forward picks the attention or the MLP from it)
    size_t n;                    // B*T*C, the elements of each tensor
    real *x, *y;                 // the streams entering the sub-layer (y: two-stream layouts)
    real *x_out, *y_out;         // the streams leaving it: the next sub-layer's x and y
    real *xh, *yh, *sum;         // siamese: xh = LN_x(x), yh = LN_y(y), sum = xh + yh; post: sum = x + z
    real *u, *z;                 // F's input where the boundary makes it (pre LN(x), siamese_c1 c1 x + yh); F's output
    real* zn;                    // peri: zn = LN_out(z)
    real *A, *D;                 // hc: the connection weights of each token (HC_ROW of them) and their tanh part
    real *dx, *dy, *dx_out, *dy_out, *dxh, *dyh, *dsum, *du, *dz, *dzn, *dA, *dD;  // their gradients
    LayerNorm LN;                // pre, post, deepnorm: the sub-layer's LayerNorm (ln1* at the attention, ln2* ...)
    LayerNorm LN_x, LN_y, LN_in; // siamese: its three (ln1x* ln1y* ln1i*, ...; LN_x is LN's slot)
    LayerNorm LN_out;            // peri: the LayerNorm of F's output (ln1o*, ln2o*); its input's is LN
    LayerNorm LN_hx, LN_hy;      // hc: LN_h (ln1h*, ln2h*) on x and on y: one gain and shift, each its statistics
    const real *S, *W, *sc;      // hc: block l's static weights (2, 4), dynamic projections (4, C), scales (2)
    real *dS, *dW, *dsc;         //   and their gradients
    real inv_c;                  // siamese, siamese_c1: 1/c_l, c_l = sqrt(2(l+1)) (1 under --no-depth-scale)
    int has_ln_in;               // siamese: 0 under --no-ln-in (u = sum)
    real alpha;                  // deepnorm: (2L)^(1/4)
    const real* c1;              // siamese_c1: the learned gain of block l on x (C channels)
    real* dc1;                   //   and its gradient
} SubLayer;

// z = F(u): the attention of block l for even s, its MLP for odd s
static void F_forward(const SubLayer& t, const real* u) {
    if (t.s % 2 == 0) attention_block_forward(t.m, t.s / 2, u, t.z);
    else mlp_block_forward(t.m, t.s / 2, u, t.z);
}

// du += F'(dz), and F's weight gradients
static void F_backward(const SubLayer& t, const real* u, real* du) {
    if (t.s % 2 == 0) attention_block_backward(t.m, t.s / 2, u, du, t.dz);
    else mlp_block_backward(t.m, t.s / 2, u, du, t.dz);
}

// Pre-Norm (GPT-2):  u = LN(x);  z = F(u);  x' = x + z
// EXERCISE 8 BEGIN: docs/exercises.md
static void pre_sublayer_forward(const SubLayer& t) {
    layernorm_forward(t.LN, t.u, t.x);              // u = LN(x)
    F_forward(t, t.u);                              // z = F(u)
    add_forward(t.x_out, t.x, t.z, 1, t.n);         // x' = x + z
}

// dx += dx';  dz += dx';  du = F'(dz);  dx += LN'(du)
static void pre_sublayer_backward(const SubLayer& t) {
    add_backward(t.dx, t.dz, t.dx_out, 1, t.n);     // x' = x + z:  dx += dx';  dz += dx'
    F_backward(t, t.u, t.du);                       // z = F(u):  du += F'(dz)
    layernorm_backward(t.LN, t.dx, t.du, t.x);      // u = LN(x):  dx += LN'(du)
}
// EXERCISE 8 END

// Post-Norm (GPT-1, the Transformer):  z = F(x);  sum = x + z;  x' = LN(sum)
// EXERCISE 5 BEGIN: docs/exercises.md
static void post_sublayer_forward(const SubLayer& t) {
    F_forward(t, t.x);                              // z = F(x): F reads the stream itself
    add_forward(t.sum, t.x, t.z, 1, t.n);           // sum = x + z
    layernorm_forward(t.LN, t.x_out, t.sum);        // x' = LN(sum)
}

// dsum = LN'(dx');  dx += dsum;  dz += dsum;  dx += F'(dz)  (F's input is x)
static void post_sublayer_backward(const SubLayer& t) {
    layernorm_backward(t.LN, t.dsum, t.dx_out, t.sum);  // x' = LN(sum):  dsum += LN'(dx')
    add_backward(t.dx, t.dz, t.dsum, 1, t.n);           // sum = x + z:  dx += dsum;  dz += dsum
    F_backward(t, t.x, t.dx);                           // z = F(x):  dx += F'(dz)
}
// EXERCISE 5 END

// DeepNorm (DeepNet):  z = F(x);  sum = alpha x + z;  x' = LN(sum)
static void deepnorm_sublayer_forward(const SubLayer& t) {
    F_forward(t, t.x);                              // z = F(x)
    add_forward(t.sum, t.z, t.x, t.alpha, t.n);     // sum = z + alpha x
    layernorm_forward(t.LN, t.x_out, t.sum);        // x' = LN(sum)
}

// dsum = LN'(dx');  dz += dsum;  dx += alpha dsum;  dx += F'(dz)
static void deepnorm_sublayer_backward(const SubLayer& t) {
    layernorm_backward(t.LN, t.dsum, t.dx_out, t.sum);  // x' = LN(sum):  dsum += LN'(dx')
    add_backward(t.dz, t.dx, t.dsum, t.alpha, t.n);     // sum = z + alpha x:  dz += dsum;  dx += alpha dsum
    F_backward(t, t.x, t.dx);                           // z = F(x):  dx += F'(dz)
}

// HybridNorm's attention (Zhuo et al. 2025): no LayerNorm around F, which normalizes q, k, v inside itself:
//     z = F(x);  x' = x + z
static void residual_sublayer_forward(const SubLayer& t) {
    F_forward(t, t.x);                              // z = F(x): F reads the stream itself
    add_forward(t.x_out, t.x, t.z, 1, t.n);         // x' = x + z
}

// dx += dx';  dz += dx';  dx += F'(dz)
static void residual_sublayer_backward(const SubLayer& t) {
    add_backward(t.dx, t.dz, t.dx_out, 1, t.n);     // x' = x + z:  dx += dx';  dz += dx'
    F_backward(t, t.x, t.dx);                       // z = F(x):  dx += F'(dz)
}

// HybridNorm's MLP: the stream is normalized and the residual branch starts from the normalized stream:
//     u = LN(x);  z = F(u);  x' = u + z
static void normed_sublayer_forward(const SubLayer& t) {
    layernorm_forward(t.LN, t.u, t.x);              // u = LN(x)
    F_forward(t, t.u);                              // z = F(u)
    add_forward(t.x_out, t.u, t.z, 1, t.n);         // x' = u + z
}

// du += dx';  dz += dx';  du += F'(dz);  dx += LN'(du)
static void normed_sublayer_backward(const SubLayer& t) {
    add_backward(t.du, t.dz, t.dx_out, 1, t.n);     // x' = u + z:  du += dx';  dz += dx'
    F_backward(t, t.u, t.du);                       // z = F(u):  du += F'(dz)
    layernorm_backward(t.LN, t.dx, t.du, t.x);      // u = LN(x):  dx += LN'(du)
}

// SiameseNorm (Li et al. 2026), sub-layer F of block l, c_l = sqrt(2(l+1)):
//     xh = LN_x(x);  yh = LN_y(y);  sum = xh + yh;  u = LN_in(sum);  z = F(u);  x' = xh + z / c_l;  y' = y + z
// EXERCISE 2 BEGIN: docs/exercises.md
static void siamese_sublayer_forward(const SubLayer& t) {
    layernorm_forward(t.LN_x, t.xh, t.x);           // xh = LN_x(x)
    layernorm_forward(t.LN_y, t.yh, t.y);           // yh = LN_y(y)
    add_forward(t.sum, t.xh, t.yh, 1, t.n);         // sum = xh + yh
    if (t.has_ln_in) layernorm_forward(t.LN_in, t.u, t.sum);  // u = LN_in(sum)
    const real* u = t.has_ln_in ? t.u : t.sum;      //   (--no-ln-in: u = sum)
    F_forward(t, u);                                // z = F(u)
    add_forward(t.x_out, t.xh, t.z, t.inv_c, t.n);  // x' = xh + z / c_l
    add_forward(t.y_out, t.y, t.z, 1, t.n);         // y' = y + z
}
// EXERCISE 2 END

// The forward's lines in reverse, each one accumulation (dz collects both streams' gradients, dxh the X stream's
// and the sum's, dy the identity path's and LN_y's):
//     dxh += dx';  dz += dx' / c_l;  dy += dy';  dz += dy';  du = F'(dz);
//     dsum = LN_in'(du);  dxh += dsum;  dyh += dsum;  dy += LN_y'(dyh);  dx += LN_x'(dxh)
// EXERCISE 3 BEGIN: docs/exercises.md
static void siamese_sublayer_backward(const SubLayer& t) {
    add_backward(t.dxh, t.dz, t.dx_out, t.inv_c, t.n);  // x' = xh + z / c_l:  dxh += dx';  dz += dx' / c_l
    add_backward(t.dy, t.dz, t.dy_out, 1, t.n);         // y' = y + z:  dy += dy';  dz += dy'
    if (t.has_ln_in) {
        F_backward(t, t.u, t.du);                           // z = F(u):  du += F'(dz)
        layernorm_backward(t.LN_in, t.dsum, t.du, t.sum);   // u = LN_in(sum):  dsum += LN_in'(du)
    } else {
        F_backward(t, t.sum, t.dsum);                       //   (--no-ln-in: z = F(sum), so dsum += F'(dz))
    }
    add_backward(t.dxh, t.dyh, t.dsum, 1, t.n);         // sum = xh + yh:  dxh += dsum;  dyh += dsum
    layernorm_backward(t.LN_y, t.dy, t.dyh, t.y);       // yh = LN_y(y):  dy += LN_y'(dyh)
    layernorm_backward(t.LN_x, t.dx, t.dxh, t.x);       // xh = LN_x(x):  dx += LN_x'(dxh)
}
// EXERCISE 3 END

// SiameseNorm's language-model form at the attention (the official code's hybrid_pre), whose X stream is
// HybridNorm's: no LN_x and no LN_in; a learned gain c1 (C channels, from 1) on x instead. Block l, c_l = sqrt(2(l+1)):
//     yh = LN_y(y);  u = c1 x + yh;  z = F(u);  x' = x + z / c_l;  y' = y + z
// EXERCISE 6 BEGIN: docs/exercises.md
static void siamese_c1_sublayer_forward(const SubLayer& t) {
    int C = t.m->config.channels;
    layernorm_forward(t.LN_y, t.yh, t.y);               // yh = LN_y(y)
    gain_add_forward(t.u, t.c1, t.x, t.yh, t.n, C);     // u = c1 x + yh
    F_forward(t, t.u);                                  // z = F(u)
    add_forward(t.x_out, t.x, t.z, t.inv_c, t.n);       // x' = x + z / c_l
    add_forward(t.y_out, t.y, t.z, 1, t.n);             // y' = y + z
}

// dx += dx';  dz += dx' / c_l;  dy += dy';  dz += dy';  du = F'(dz);
// dc1 += the sum over tokens of du x;  dx += c1 du;  dyh += du;  dy += LN_y'(dyh)
static void siamese_c1_sublayer_backward(const SubLayer& t) {
    int C = t.m->config.channels;
    add_backward(t.dx, t.dz, t.dx_out, t.inv_c, t.n);   // x' = x + z / c_l:  dx += dx';  dz += dx' / c_l
    add_backward(t.dy, t.dz, t.dy_out, 1, t.n);         // y' = y + z:  dy += dy';  dz += dy'
    F_backward(t, t.u, t.du);                           // z = F(u):  du += F'(dz)
    gain_add_backward(t.dc1, t.dx, t.dyh, t.du, t.c1, t.x, t.n, C);  // u = c1 x + yh:  dc1, dx += c1 du, dyh += du
    layernorm_backward(t.LN_y, t.dy, t.dyh, t.y);       // yh = LN_y(y):  dy += LN_y'(dyh)
}
// EXERCISE 6 END

// Peri-LN (Kim et al. 2025; the "sandwich" of Gemma 2 and OLMo 2): Pre-Norm with a second LayerNorm on F's output,
// before the residual add:
//     u = LN(x);  z = F(u);  zn = LN_out(z);  x' = x + zn
static void peri_sublayer_forward(const SubLayer& t) {
    layernorm_forward(t.LN, t.u, t.x);              // u = LN(x)
    F_forward(t, t.u);                              // z = F(u)
    layernorm_forward(t.LN_out, t.zn, t.z);         // zn = LN_out(z)
    add_forward(t.x_out, t.x, t.zn, 1, t.n);        // x' = x + zn
}

// dx += dx';  dzn += dx';  dz += LN_out'(dzn);  du = F'(dz);  dx += LN'(du)
static void peri_sublayer_backward(const SubLayer& t) {
    add_backward(t.dx, t.dzn, t.dx_out, 1, t.n);    // x' = x + zn:  dx += dx';  dzn += dx'
    layernorm_backward(t.LN_out, t.dz, t.dzn, t.z); // zn = LN_out(z):  dz += LN_out'(dzn)
    F_backward(t, t.u, t.du);                       // z = F(u):  du += F'(dz)
    layernorm_backward(t.LN, t.dx, t.du, t.x);      // u = LN(x):  dx += LN'(du)
}

// Hyper-Connections (Zhu et al., ICLR 2025), dynamic, two streams (x, y), at every sub-layer. A holds each token's
// connection weights: A[j][0..2] the width connection (alpha: stream j's share of F's input, of x', of y'), A[j][3]
// the depth connection (beta: stream j's share of z); they depend on the token through LN_h of each stream:
//     xh = LN_h(x);  yh = LN_h(y);  A = S + s tanh([xh; yh] W^T)
//     sum = A00 x + A10 y;  u = LN(sum);  z = F(u);  x' = A01 x + A11 y + A03 z;  y' = A02 x + A12 y + A13 z
// hc_x(t, m) is the term A0m x of such a sum, hc_y(t, m) the term A1m y, hc_z(t, j) the term Aj3 z.
static MixTerm hc_x(const SubLayer& t, int m) { return {t.x, t.dx, t.A + m, t.dA + m}; }
static MixTerm hc_y(const SubLayer& t, int m) { return {t.y, t.dy, t.A + 4 + m, t.dA + 4 + m}; }
static MixTerm hc_z(const SubLayer& t, int j) { return {t.z, t.dz, t.A + 4 * j + 3, t.dA + 4 * j + 3}; }

static void hc_sublayer_forward(const SubLayer& t) {
    int N = t.m->B * t.m->T, C = t.m->config.channels;
    layernorm_forward(t.LN_hx, t.xh, t.x);                                   // xh = LN_h(x)
    layernorm_forward(t.LN_hy, t.yh, t.y);                                   // yh = LN_h(y)
    hc_weights_forward(t.A, t.D, t.xh, t.yh, t.S, t.W, t.sc, N, C);          // A = S + s tanh([xh; yh] W^T)
    row_mix_forward(t.sum, {hc_x(t, 0), hc_y(t, 0)}, N, C);                  // sum = A00 x + A10 y
    layernorm_forward(t.LN, t.u, t.sum);                                     // u = LN(sum)
    F_forward(t, t.u);                                                       // z = F(u)
    row_mix_forward(t.x_out, {hc_x(t, 1), hc_y(t, 1), hc_z(t, 0)}, N, C);    // x' = A01 x + A11 y + A03 z
    row_mix_forward(t.y_out, {hc_x(t, 2), hc_y(t, 2), hc_z(t, 1)}, N, C);    // y' = A02 x + A12 y + A13 z
}

// Each weighted sum gives its terms  dv += w dout  and  dw += dout . v  (row_mix_backward); then, in reverse:
//     dx, dy, dz, dA from y' and x';  du = F'(dz);  dsum = LN'(du);  dx, dy, dA from sum;
//     dxh, dyh, dS, dW, ds from A;  dy += LN_h'(dyh);  dx += LN_h'(dxh)
static void hc_sublayer_backward(const SubLayer& t) {
    int N = t.m->B * t.m->T, C = t.m->config.channels;
    row_mix_backward(t.dy_out, {hc_x(t, 2), hc_y(t, 2), hc_z(t, 1)}, N, C);  // y' = A02 x + A12 y + A13 z
    row_mix_backward(t.dx_out, {hc_x(t, 1), hc_y(t, 1), hc_z(t, 0)}, N, C);  // x' = A01 x + A11 y + A03 z
    F_backward(t, t.u, t.du);                                                // z = F(u):  du += F'(dz)
    layernorm_backward(t.LN, t.dsum, t.du, t.sum);                           // u = LN(sum):  dsum += LN'(du)
    row_mix_backward(t.dsum, {hc_x(t, 0), hc_y(t, 0)}, N, C);                // sum = A00 x + A10 y
    hc_weights_backward(t.dxh, t.dyh, t.dS, t.dW, t.dsc, t.dD, t.dA, t.D, t.xh, t.yh, t.W, t.sc, N, C);  // A = ...
    layernorm_backward(t.LN_hy, t.dy, t.dyh, t.y);                           // yh = LN_h(y):  dy += LN_h'(dyh)
    layernorm_backward(t.LN_hx, t.dx, t.dxh, t.x);                           // xh = LN_h(x):  dx += LN_h'(dxh)
}

// The head: from the streams leaving the last block to the logits, through the tied token embedding wte.
typedef struct {
    GPT2* m;
    size_t n;                      // B*T*C
    real *x, *y;                   // the streams leaving the last block
    real *xf, *yf, *sum;           // siamese: xf = LN_xf(x), yf = LN_yf(y), sum = xf + yf
    real* hf;                      // what the logits are made from, where a LayerNorm makes it: LN_f(...)
    real *dx, *dy, *dxf, *dyf, *dsum, *dhf;
    LayerNorm LN_f;                // the last LayerNorm of every head that has one
    LayerNorm LN_xf, LN_yf;        // siamese
} Head;

// logits = hf wte^T (the classifier; the padded vocabulary's logits come out too, and softmax gives them 0)
static void classifier_forward(const Head& t, const real* hf) {
    const GPT2Config& c = t.m->config;
    matmul_forward(t.m->acts.logits, hf, t.m->params.wte, nullptr, t.m->B * t.m->T, c.channels, c.padded_vocab_size);
}

// dhf += dlogits wte (hf's only consumer: dhf starts at 0);  dwte += dlogits^T hf (the tied embedding's output side)
static void classifier_backward(const Head& t, const real* hf, real* dhf) {
    const GPT2Config& c = t.m->config;
    matmul_backward(dhf, t.m->grads.wte, nullptr, t.m->grads_acts.logits, hf, t.m->params.wte, t.m->B * t.m->T,
                    c.channels, c.padded_vocab_size);
}

// Pre-Norm's head (and Mix-LN's):  hf = LN_f(x);  logits = hf wte^T
static void lnf_head_forward(const Head& t) {
    layernorm_forward(t.LN_f, t.hf, t.x);           // hf = LN_f(x)
    classifier_forward(t, t.hf);                    // logits = hf wte^T
}

static void lnf_head_backward(const Head& t) {
    classifier_backward(t, t.hf, t.dhf);            // dhf = dlogits wte
    layernorm_backward(t.LN_f, t.dx, t.dhf, t.x);   // dx += LN_f'(dhf)
}

// Post-Norm's head (and DeepNorm's):  logits = x wte^T  (x is normalized: the last sub-layer ended with its LN)
static void identity_head_forward(const Head& t) { classifier_forward(t, t.x); }

static void identity_head_backward(const Head& t) { classifier_backward(t, t.x, t.dx); }

// SiameseNorm's head:  xf = LN_xf(x);  yf = LN_yf(y);  sum = xf + yf;  hf = LN_f(sum);  logits = hf wte^T
// EXERCISE 4 BEGIN: docs/exercises.md
static void siamese_head_forward(const Head& t) {
    layernorm_forward(t.LN_xf, t.xf, t.x);          // xf = LN_xf(x)
    layernorm_forward(t.LN_yf, t.yf, t.y);          // yf = LN_yf(y)
    add_forward(t.sum, t.xf, t.yf, 1, t.n);         // sum = xf + yf
    layernorm_forward(t.LN_f, t.hf, t.sum);         // hf = LN_f(sum)
    classifier_forward(t, t.hf);                    // logits = hf wte^T
}

// dhf = dlogits wte;  dsum = LN_f'(dhf);  dxf += dsum;  dyf += dsum;  dx += LN_xf'(dxf);  dy += LN_yf'(dyf)
static void siamese_head_backward(const Head& t) {
    classifier_backward(t, t.hf, t.dhf);                // logits = hf wte^T:  dhf = dlogits wte
    layernorm_backward(t.LN_f, t.dsum, t.dhf, t.sum);   // hf = LN_f(sum):  dsum += LN_f'(dhf)
    add_backward(t.dxf, t.dyf, t.dsum, 1, t.n);         // sum = xf + yf:  dxf += dsum;  dyf += dsum
    layernorm_backward(t.LN_xf, t.dx, t.dxf, t.x);      // xf = LN_xf(x):  dx += LN_xf'(dxf)
    layernorm_backward(t.LN_yf, t.dy, t.dyf, t.y);      // yf = LN_yf(y):  dy += LN_yf'(dyf)
}
// EXERCISE 4 END

// Hyper-Connections' head (the paper sums the streams before the final norm):  sum = x + y;  hf = LN_f(sum)
static void sum_head_forward(const Head& t) {
    add_forward(t.sum, t.x, t.y, 1, t.n);           // sum = x + y
    layernorm_forward(t.LN_f, t.hf, t.sum);         // hf = LN_f(sum)
    classifier_forward(t, t.hf);                    // logits = hf wte^T
}

// dhf = dlogits wte;  dsum = LN_f'(dhf);  dx += dsum;  dy += dsum
static void sum_head_backward(const Head& t) {
    classifier_backward(t, t.hf, t.dhf);                // logits = hf wte^T:  dhf = dlogits wte
    layernorm_backward(t.LN_f, t.dsum, t.dhf, t.sum);   // hf = LN_f(sum):  dsum += LN_f'(dhf)
    add_backward(t.dx, t.dy, t.dsum, 1, t.n);           // sum = x + y:  dx += dsum;  dy += dsum
}

// Which function runs for which kind of sub-layer and head: the one place that asks. host/layouts.h says what
// sub-layer s of a layout is (Mix-LN: post in its first blocks, pre after them) and which head it has. Each line
// calls the kind's forward or its backward by name, so that from gpt2_forward an editor's go-to-definition (and its
// list of callers, backwards) goes through here to the function itself.
enum Pass { FORWARD, BACKWARD };

static void run_sublayer(const SubLayer& t, Pass pass) {
    bool fw = pass == FORWARD;
    SubLayerKind kind = sublayer_kind(t.m->config, t.s);
    switch (kind) {
        case SUBLAYER_PRE:        return fw ? pre_sublayer_forward(t) : pre_sublayer_backward(t);
        case SUBLAYER_POST:       return fw ? post_sublayer_forward(t) : post_sublayer_backward(t);
        case SUBLAYER_SIAMESE:    return fw ? siamese_sublayer_forward(t) : siamese_sublayer_backward(t);
        case SUBLAYER_DEEPNORM:   return fw ? deepnorm_sublayer_forward(t) : deepnorm_sublayer_backward(t);
        case SUBLAYER_RESIDUAL:   return fw ? residual_sublayer_forward(t) : residual_sublayer_backward(t);
        case SUBLAYER_NORMED:     return fw ? normed_sublayer_forward(t) : normed_sublayer_backward(t);
        case SUBLAYER_SIAMESE_C1: return fw ? siamese_c1_sublayer_forward(t) : siamese_c1_sublayer_backward(t);
        case SUBLAYER_PERI:       return fw ? peri_sublayer_forward(t) : peri_sublayer_backward(t);
        case SUBLAYER_HC:         return fw ? hc_sublayer_forward(t) : hc_sublayer_backward(t);
    }
    unknown_kind("sub-layer kind", kind);
}

static void run_head(const Head& t, Pass pass) {
    bool fw = pass == FORWARD;
    HeadKind kind = layout_of(t.m->config).head;
    switch (kind) {
        case HEAD_LN:       return fw ? lnf_head_forward(t) : lnf_head_backward(t);
        case HEAD_IDENTITY: return fw ? identity_head_forward(t) : identity_head_backward(t);
        case HEAD_SIAMESE:  return fw ? siamese_head_forward(t) : siamese_head_backward(t);
        case HEAD_SUM:      return fw ? sum_head_forward(t) : sum_head_backward(t);
    }
    unknown_kind("head kind", kind);
}

// ----------------------------------------------------------------------------------------------------------------
// forward, backward, update

// the bookkeeping at the end of the file: the activations, and the named tensors of sub-layer s and of the head
static void gpt2_allocate_activations(GPT2* m, int B, int T);
static SubLayer sublayer_tensors(GPT2* m, int s);
static Head head_tensors(GPT2* m);

// Runs the model on inputs (B, T); with targets, also the loss. Any B <= and T <= the first call's shape works.
static void gpt2_forward(GPT2* m, const int* inputs, const int* targets, int B, int T) {
    const GPT2Config& c = m->config;
    int first = !m->acts_memory;  // the first call sizes the activations
    check_batch(c, inputs, targets, B, T, first ? B : m->batch_size, first ? T : m->seq_len);
    if (first) gpt2_allocate_activations(m, B, T);
    m->B = B;
    m->T = T;
    int C = c.channels, N = B * T, L = c.num_layers;
    memcpy(m->inputs, inputs, (size_t)N * sizeof(int));
    if (targets) memcpy(m->targets, targets, (size_t)N * sizeof(int));
    ActivationTensors* a = &m->acts;

    encoder_forward(a->x, inputs, m->params.wte, m->params.wpe, B, T, C);               // x = h0
    if (layout_of(c).streams == 2) memcpy(a->y, a->x, (size_t)N * C * sizeof(real));  // y = h0
    // each sub-layer s = 2l + k (the attention of block l, then its MLP) as its layout's equations say: e.g.
    // siamese_sublayer_forward (run_sublayer, above, says which function that is), then the head and its logits:
    // e.g. siamese_head_forward
    for (int s = 0; s < 2 * L; s++) run_sublayer(sublayer_tensors(m, s), FORWARD);
    run_head(head_tensors(m), FORWARD);
    softmax_forward(a->probs, a->logits, N, c.vocab_size, c.padded_vocab_size);
    if (targets) {
        crossentropy_forward(a->losses, a->probs, targets, N, c.padded_vocab_size);
        double sum = 0;
        for (int i = 0; i < N; i++) sum += a->losses[i];
        m->mean_loss = (real)(sum / N);
    } else {
        m->mean_loss = -1;
    }
}

// memset(p, 0, n numbers), in chunks shared among the threads (one thread's memset of the activation gradients, 114 MB
// for siamese at 16 layers x 64 channels, would leave the others waiting: 9% of the step on two threads), each by
// stores that bypass the cache (host/clear.h: read clear_uncached as memset)
static void zero_reals(real* p, size_t n) {
    const size_t CHUNK = 1 << 16;
#pragma omp parallel for
    for (size_t k = 0; k < (n + CHUNK - 1) / CHUNK; k++)
        clear_uncached(p + k * CHUNK, std::min(CHUNK, n - k * CHUNK) * sizeof(real));
}

static void gpt2_zero_grad(GPT2* m) { zero_reals(m->grads_memory, m->num_parameters); }

// Accumulates the gradient of loss_scale * mean_loss into the parameter gradients (loss_scale = 1/accumulation
// steps when several micro-batches make one step).
static void gpt2_backward(GPT2* m, real loss_scale = 1) {
    if (m->mean_loss == -1) fail("backward needs a forward pass with targets");
    const GPT2Config& c = m->config;
    int B = m->B, T = m->T, C = c.channels, N = B * T, L = c.num_layers;
    zero_reals(m->grads_acts_memory, m->num_activation_grads);
    ActivationTensors *a = &m->acts, *d = &m->grads_acts;

    crossentropy_softmax_backward(d->logits, a->probs, m->targets, loss_scale / N, N, c.vocab_size,
                                  c.padded_vocab_size);
    // the forward pass in reverse: the head (e.g. siamese_head_backward), then the sub-layers from the last down
    // (e.g. siamese_sublayer_backward)
    run_head(head_tensors(m), BACKWARD);
    for (int s = 2 * L - 1; s >= 0; s--) run_sublayer(sublayer_tensors(m, s), BACKWARD);
    // both streams start as h0, so h0 collects the gradients of both
    encoder_backward(m->grads.wte, m->grads.wpe, d->x, m->inputs, B, T, C);
    if (layout_of(c).streams == 2) encoder_backward(m->grads.wte, m->grads.wpe, d->y, m->inputs, B, T, C);
}

// sqrt of the sum of squared gradients, in double, summed in fixed chunks, each in order and then the chunks in order
// (the same for any thread count; host/gemm.h's sum_of_squares, which sums several chunks side by side)
static double gpt2_grad_norm(const GPT2* m) {
    return std::sqrt(gemm_cpu::sum_of_squares(m->grads_memory, m->num_parameters));
}

typedef struct {
    real learning_rate, beta1, beta2, eps, weight_decay;
} AdamWConfig;

// AdamW (Loshchilov & Hutter) with bias correction; step t counts from 1. The gradient is multiplied by
// grad_scale first (global-norm clipping). Weight decay is decoupled and applies to 2-D weight matrices only.
// This updates the parameters [begin, end) with their moments mm, vv (end - begin each): gpt2_update passes all
// of them; the trainer's ZeRO-1 passes a process's shard.
static void adamw_update(GPT2* m, const AdamWConfig& o, real grad_scale, int t, size_t begin, size_t end, real* mm,
                         real* vv) {
    real bc1 = 1 - (real)std::pow((double)o.beta1, t), bc2 = 1 - (real)std::pow((double)o.beta2, t);
    for (const TensorInfo& tensor : m->tensors) {
        size_t lo = std::max(tensor.offset, begin), hi = std::min(tensor.offset + tensor.size, end);
        if (lo >= hi) continue;
        real wd = tensor.decay ? o.weight_decay : 0;
        real *p = m->params_memory + lo, *g = m->grads_memory + lo, *mt = mm + (lo - begin), *vt = vv + (lo - begin);
#pragma omp parallel for
        for (size_t i = 0; i < hi - lo; i++) {
            real grad = g[i] * grad_scale;
            mt[i] = o.beta1 * mt[i] + (1 - o.beta1) * grad;
            vt[i] = o.beta2 * vt[i] + (1 - o.beta2) * grad * grad;
            real mhat = mt[i] / bc1, vhat = vt[i] / bc2;
            p[i] -= o.learning_rate * (mhat / (std::sqrt(vhat) + o.eps) + wd * p[i]);
        }
    }
}

static void gpt2_allocate_optimizer_state(GPT2* m) {
    if (m->m_memory) return;
    m->m_memory = (real*)calloc_or_fail(m->num_parameters, sizeof(real));
    m->v_memory = (real*)calloc_or_fail(m->num_parameters, sizeof(real));
}

// one AdamW step of every parameter
static void gpt2_update(GPT2* m, const AdamWConfig& o, real grad_scale, int t) {
    gpt2_allocate_optimizer_state(m);
    adamw_update(m, o, grad_scale, t, 0, m->num_parameters, m->m_memory, m->v_memory);
}

static void gpt2_free(GPT2* m) {
    free(m->params_memory);
    free(m->grads_memory);
    free(m->m_memory);
    free(m->v_memory);
    free(m->acts_memory);
    free(m->grads_acts_memory);
    free(m->inputs);
    free(m->targets);
    m->tensors.clear();
}

// ----------------------------------------------------------------------------------------------------------------
// Where the named tensors live (bookkeeping, not the method: a first reading may skip this section). The activations
// and their gradients are one buffer each, llm.c's way; SubLayer and Head point into them and into the parameters.
// Every sub-layer has every tensor of SubLayer that its layout's streams can use, whichever of them its kind uses, so
// that nothing here depends on the kind: y, xh and yh (and the head's xf, yf, sum) where there are two streams, zn
// where the layout has an output LayerNorm (peri), sum, u and z always. A one-stream sub-layer so leaves one (B,T,C)
// tensor at 0, sum or u (memory, and a few per cent more for gpt2_backward's memset of the activation gradients to
// clear).

// the sizes of the activations of a model and a batch shape (B, T), or of their gradients; with memory, points the
// tensors into it. The gradients have the same layout but stop before att, the last (attention_backward keeps each
// head's gradient of it in a scratch of its own), so that a tensor is at the same offset in both buffers.
static size_t point_activations(const GPT2Config& c, int B, int T, ActivationTensors* a, real* memory,
                                bool gradients) {
    size_t C = c.channels, L = c.num_layers, NH = c.num_heads, Vp = c.padded_vocab_size, BT = (size_t)B * T;
    size_t NC = BT * C;
    size_t two = layout_of(c).streams == 2;  // y and the tensors made from it and LN_x(x): two-stream layouts only
    size_t qn = layout_of(c).qkv_norm;       // the QKV-norm's input and statistics: its layouts only
    size_t on = has_output_norm(c);          // LN_out(z): the layouts with an output LayerNorm (peri) only
    size_t hc = layout_of(c).hc;             // the connection weights of each token: hc only
    struct { real** ptr; size_t size; } list[] = {
        {&a->x, (2 * L + 1) * NC},   {&a->y, two * (2 * L + 1) * NC},
        {&a->xh, two * 2 * L * NC},  {&a->yh, two * 2 * L * NC},      {&a->sum, 2 * L * NC},
        {&a->u, 2 * L * NC},         {&a->z, 2 * L * NC},             {&a->zn, on * 2 * L * NC},
        {&a->hcA, hc * 2 * L * BT * HC_ROW}, {&a->hcD, hc * 2 * L * BT * HC_ROW},
        {&a->ln_mean, 2 * L * LN_SLOTS * BT}, {&a->ln_rstd, 2 * L * LN_SLOTS * BT},
        {&a->qkv, L * BT * 3 * C},   {&a->qkvr, qn * L * BT * 3 * C},
        {&a->qkvn_mean, qn * L * BT * 3 * NH}, {&a->qkvn_rstd, qn * L * BT * 3 * NH},
        {&a->atty, L * NC},          {&a->fch, L * BT * 4 * C},       {&a->fch_gelu, L * BT * 4 * C},
        {&a->xf, two * NC},          {&a->yf, two * NC},            {&a->head_sum, two * NC}, {&a->hf, NC},
        {&a->lnf_mean, LN_SLOTS * BT}, {&a->lnf_rstd, LN_SLOTS * BT},
        {&a->logits, BT * Vp},       {&a->probs, BT * Vp},            {&a->losses, BT},
        {&a->att, gradients ? 0 : L * B * NH * T * T},
    };
    size_t total = 0;
    for (auto& e : list) {
        *e.ptr = memory && e.size ? memory + total : nullptr;
        total += e.size;
    }
    return total;
}

static void gpt2_allocate_activations(GPT2* m, int B, int T) {
    m->batch_size = B;
    m->seq_len = T;
    m->num_activations = point_activations(m->config, B, T, &m->acts, nullptr, false);
    m->num_activation_grads = point_activations(m->config, B, T, &m->grads_acts, nullptr, true);
    m->acts_memory = (real*)calloc_or_fail(m->num_activations, sizeof(real));
    m->grads_acts_memory = (real*)calloc_or_fail(m->num_activation_grads, sizeof(real));
    point_activations(m->config, B, T, &m->acts, m->acts_memory, false);
    point_activations(m->config, B, T, &m->grads_acts, m->grads_acts_memory, true);
    m->inputs = (int*)calloc_or_fail((size_t)B * T, sizeof(int));
    m->targets = (int*)calloc_or_fail((size_t)B * T, sizeof(int));
}

static real* at(real* base, size_t offset) { return base ? base + offset : nullptr; }

// the LayerNorm of gain w and shift b (rows of C), gradients dw and db, statistics mean and rstd (rows of N)
static LayerNorm layernorm_of(real* w, real* b, real* dw, real* db, real* mean, real* rstd, size_t offset, int N,
                              int C) {
    return {at(w, offset), at(b, offset), at(dw, offset), at(db, offset), mean, rstd, N, C};
}

static SubLayer sublayer_tensors(GPT2* m, int s) {
    const GPT2Config& c = m->config;
    int l = s / 2, k = s % 2, N = m->B * m->T, C = c.channels;
    size_t n = (size_t)N * C;
    ActivationTensors &a = m->acts, &d = m->grads_acts;
    ParameterTensors &p = m->params, &g = m->grads;
    SubLayer t;
    t.m = m;
    t.s = s;
    t.n = n;
    t.x = at(a.x, s * n), t.x_out = at(a.x, (s + 1) * n), t.dx = at(d.x, s * n), t.dx_out = at(d.x, (s + 1) * n);
    t.y = at(a.y, s * n), t.y_out = at(a.y, (s + 1) * n), t.dy = at(d.y, s * n), t.dy_out = at(d.y, (s + 1) * n);
    t.xh = at(a.xh, s * n), t.yh = at(a.yh, s * n), t.sum = at(a.sum, s * n), t.u = at(a.u, s * n);
    t.z = at(a.z, s * n), t.zn = at(a.zn, s * n);
    t.dxh = at(d.xh, s * n), t.dyh = at(d.yh, s * n), t.dsum = at(d.sum, s * n), t.du = at(d.u, s * n);
    t.dz = at(d.z, s * n), t.dzn = at(d.zn, s * n);
    LayerNorm ln[LN_SLOTS];
    // a layout whose boundary LayerNorms exist in its first blocks only (norm_blocks: hybrid-star's ln1, block 0)
    int blocks = layout_of(c).norm_blocks[k], has_ln = blocks == 0 || l < blocks;
    for (int j = 0; j < LN_SLOTS; j++)
        ln[j] = layernorm_of(has_ln ? p.lnw[k][j] : nullptr, has_ln ? p.lnb[k][j] : nullptr,
                             has_ln ? g.lnw[k][j] : nullptr, has_ln ? g.lnb[k][j] : nullptr,
                             a.ln_mean + ((size_t)s * LN_SLOTS + j) * N, a.ln_rstd + ((size_t)s * LN_SLOTS + j) * N,
                             (size_t)l * C, N, C);
    t.LN = t.LN_x = ln[LN_X];
    t.LN_y = ln[LN_Y];
    t.LN_in = ln[LN_IN];
    t.LN_out = ln[LN_OUT];
    t.inv_c = (real)inv_depth_scale(c, l);
    t.has_ln_in = !(c.ablations & ABLATE_NO_LN_IN);
    t.alpha = (real)deepnorm_alpha(c.num_layers);
    t.c1 = at(p.c1, (size_t)l * C), t.dc1 = at(g.c1, (size_t)l * C);
    // hc: LN_h's gain and shift are slot LN_H's; on y its statistics go to the slot LN_IN, which hc does not use
    t.LN_hx = t.LN_hy = ln[LN_H];
    size_t y_stats = ((size_t)s * LN_SLOTS + LN_IN) * N, hc_rows = (size_t)s * N * HC_ROW;
    t.LN_hy.mean = a.ln_mean + y_stats, t.LN_hy.rstd = a.ln_rstd + y_stats;
    t.A = at(a.hcA, hc_rows), t.D = at(a.hcD, hc_rows), t.dA = at(d.hcA, hc_rows), t.dD = at(d.hcD, hc_rows);
    t.S = at(p.hcs[k], (size_t)l * 8), t.W = at(p.hcw[k], (size_t)l * 4 * C), t.sc = at(p.hcsc[k], (size_t)l * 2);
    t.dS = at(g.hcs[k], (size_t)l * 8), t.dW = at(g.hcw[k], (size_t)l * 4 * C), t.dsc = at(g.hcsc[k], (size_t)l * 2);
    return t;
}

// The head's LayerNorms are the registry's head_norms slots, in its order: LN_f is the last (pre: the only one);
// siamese's LN_xf and LN_yf come first.
static Head head_tensors(GPT2* m) {
    const GPT2Config& c = m->config;
    int N = m->B * m->T, C = c.channels, last = layout_of(c).head_norms - 1;
    size_t n = (size_t)N * C, top = 2 * (size_t)c.num_layers * n;  // x[2L], y[2L]
    ActivationTensors &a = m->acts, &d = m->grads_acts;
    ParameterTensors &p = m->params, &g = m->grads;
    Head t;
    t.m = m;
    t.n = n;
    t.x = at(a.x, top), t.y = at(a.y, top), t.dx = at(d.x, top), t.dy = at(d.y, top);
    t.xf = a.xf, t.yf = a.yf, t.sum = a.head_sum, t.hf = a.hf;
    t.dxf = d.xf, t.dyf = d.yf, t.dsum = d.head_sum, t.dhf = d.hf;
    LayerNorm ln[LN_SLOTS + 1];  // slot -1 (no LayerNorm) at index 0
    memset(ln, 0, sizeof(ln));
    for (int j = 0; j < LN_SLOTS; j++)
        ln[j + 1] = layernorm_of(p.lnfw[j], p.lnfb[j], g.lnfw[j], g.lnfb[j], a.lnf_mean + (size_t)j * N,
                                 a.lnf_rstd + (size_t)j * N, 0, N, C);
    t.LN_f = ln[last + 1];
    t.LN_xf = ln[LN_X + 1];
    t.LN_yf = ln[LN_Y + 1];
    return t;
}

// ----------------------------------------------------------------------------------------------------------------
// the trainer: the training loop is train_main in host/train_loop.h, shared with the CUDA trainer; these are its
// hooks. What a step's micro-batches, several processes (host/distributed.h) and ZeRO-1 need lives here, beside
// the model: the model itself computes one batch's gradient and takes plain AdamW steps.

#ifndef REFERENCE_CPU_NO_MAIN

static struct {
    real* micro_grads;                          // one process, a step's later micro-batches: each one's gradient
    std::vector<real> grad_shard, grad_pieces;  // several processes: this rank's shard of the summed gradient
    size_t opt_begin, opt_end;                  // ZeRO-1 (-z 1) with several processes: the parameters this rank
    real *m, *v;                                //   updates, and their AdamW moments
} trainer = {nullptr, {}, {}, 0, 0, nullptr, nullptr};

static void train_backend_init(GPT2*, const TrainOptions& o) {
    if (o.tf32) fail("-f (TF32) applies to the CUDA trainer only");
    if (o.recompute) fail("-r (recomputation) applies to the CUDA trainer only");
    if (o.attention) fail("--attention applies to the CUDA trainer only");
}

static void train_backend_free(GPT2*) {
    free(trainer.micro_grads);
    free(trainer.m);
    free(trainer.v);
    trainer.micro_grads = trainer.m = trainer.v = nullptr;
}

// The step's gradient is the sum of each micro-batch's own gradient, in micro-batch order (host/distributed.h), so
// each micro-batch's gradient is computed alone, into zeroed memory: the step's first into the gradient itself; in
// one process the later ones into micro_grads, which train_sum_gradients adds; with several processes every one
// into the gradient buffer, which train_sum_gradients sends to the ranks that sum it.
static double train_micro_step(GPT2* m, const int* inputs, const int* targets, int B, int T, double loss_scale,
                               int micro) {
    real* into = m->grads_memory;  // zeroed by gpt2_zero_grad at the start of the step
    if (micro > 0) {
        if (dist.size == 1) {
            if (!trainer.micro_grads) trainer.micro_grads = (real*)calloc_or_fail(m->num_parameters, sizeof(real));
            into = trainer.micro_grads;
        }
        zero_reals(into, m->num_parameters);
    }
    point_parameters(m->config, &m->grads, into);
    gpt2_forward(m, inputs, targets, B, T);
    if (std::isfinite(m->mean_loss)) gpt2_backward(m, (real)loss_scale);
    point_parameters(m->config, &m->grads, m->grads_memory);
    return m->mean_loss;
}

// the step's gradient += this micro-batch's, from every rank in rank order (MPI, host/distributed.h): each rank sums
// its shard of the parameters, and after the step's last micro-batch the shards are gathered into grads_memory
static void train_sum_gradients(GPT2* m, int micro, int last) {
    size_t n = m->num_parameters;
    if (dist.size == 1) {
        if (micro == 0) return;  // the gradient itself
        real *g = m->grads_memory, *add = trainer.micro_grads;
#pragma omp parallel for
        for (size_t i = 0; i < n; i++) g[i] += add[i];
        return;
    }
    size_t begin = shard_begin(n, dist.rank);
    trainer.grad_shard.resize(shard_end(n, dist.rank) - begin);
    dist_sum_into_shard(m->grads_memory, n, trainer.grad_shard.data(), micro > 0, &trainer.grad_pieces);
    if (!last) return;
    memcpy(m->grads_memory + begin, trainer.grad_shard.data(), trainer.grad_shard.size() * sizeof(real));
    dist_gather_shards(m->grads_memory, n);
}

static void train_next_token_probs(GPT2* m, const int* tokens, int n, std::vector<double>* probs) {
    gpt2_forward(m, tokens, nullptr, 1, n);
    const real* row = m->acts.probs + (size_t)(n - 1) * m->config.padded_vocab_size;
    probs->assign(row, row + m->config.vocab_size);
}

// ZeRO-1 (-z 1) with several processes: this rank keeps the AdamW moments of its shard of the parameters only
static bool zero1() { return dist.zero && dist.size > 1; }

static void zero1_allocate(GPT2* m) {
    if (trainer.m) return;
    trainer.opt_begin = shard_begin(m->num_parameters, dist.rank);
    trainer.opt_end = shard_end(m->num_parameters, dist.rank);
    trainer.m = (real*)calloc_or_fail(trainer.opt_end - trainer.opt_begin, sizeof(real));
    trainer.v = (real*)calloc_or_fail(trainer.opt_end - trainer.opt_begin, sizeof(real));
}

// every rank has the whole gradient; with -z 1 each updates its shard, and the updated parameters are gathered
static void train_update(GPT2* m, const TrainOptions& o, double lr, double grad_scale, int t) {
    AdamWConfig opt = {(real)lr, (real)0.9, (real)0.95, (real)1e-8, (real)o.weight_decay};
    if (!zero1()) {
        gpt2_update(m, opt, (real)grad_scale, t);
        return;
    }
    zero1_allocate(m);
    adamw_update(m, opt, (real)grad_scale, t, trainer.opt_begin, trainer.opt_end, trainer.m, trainer.v);
    dist_gather_shards(m->params_memory, m->num_parameters);
}

static bool train_params_finite(GPT2* m) {
    for (size_t i = 0; i < m->num_parameters; i++)
        if (!std::isfinite(m->params_memory[i])) return false;
    return true;
}

// every rank holds the whole model; the moments of a ZeRO-1 run are gathered to rank 0, which writes both files
static SavedFiles train_save(GPT2* m, const char* model_path, const char* state_path, const TrainState& st) {
    size_t n = m->num_parameters;
    std::vector<real> mm, vv;
    const real *m_all = m->m_memory, *v_all = m->v_memory;
    if (zero1()) {
        mm = dist_gather_to_rank0(trainer.m, n), vv = dist_gather_to_rank0(trainer.v, n);
        m_all = mm.data(), v_all = vv.data();
    }
    if (dist.rank != 0) return {};
    FileSum model = gpt2_save_checkpoint(m, model_path);
    return {model, state_write(state_path, st, m_all, v_all)};
}

static TrainState train_load_state(GPT2* m, const char* path, DataLoader* loader) {
    if (!zero1()) {
        gpt2_allocate_optimizer_state(m);
        return state_read(path, m->num_parameters, loader, m->m_memory, m->v_memory, 0, m->num_parameters);
    }
    zero1_allocate(m);
    return state_read(path, m->num_parameters, loader, trainer.m, trainer.v, trainer.opt_begin, trainer.opt_end);
}

static void train_describe(GPT2*, const TrainOptions&, std::vector<std::pair<std::string, std::string>>* rows) {
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    rows->push_back({"threads", std::to_string(threads) + " (CPU)"});
}

static std::string train_progress_suffix(GPT2*, double) { return ""; }
static void train_sync(GPT2*) {}

int main(int argc, char** argv) { return train_main<GPT2>(argc, argv); }
#endif  // REFERENCE_CPU_NO_MAIN
