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

Everything is written out by hand in the spirit of llm.c's train_gpt2.c: each layer is a pair of functions,
`op_forward` and `op_backward`, side by side. Backward functions ACCUMULATE (+=) into gradient buffers that are
zeroed once per step, so a value that feeds several consumers simply collects their gradients: that is all the
Y stream of SiameseNorm needs. The layouts share one attention and one MLP; they differ only in the small
"sub-layer boundary" and "head" functions further down, which switch on the kind of each sub-layer (pre, post,
siamese: what the registry says sub-layer s is) and of the head, and nowhere else.

The scalar type is `real`: float by default, double when built with -DREAL=double (the finite-difference tests).
Define REFERENCE_CPU_NO_MAIN before including this file to use it as a library (the tests and the CUDA checks do).
*/
#include "host/train_loop.h"
#ifdef _OPENMP
#include <omp.h>
#endif

#ifndef REAL
#define REAL float
#endif
typedef REAL real;

typedef ParameterTensorsT<real> ParameterTensors;

// ----------------------------------------------------------------------------------------------------------------
// vectors for the matrix products: GCC/Clang vector extensions, 32 bytes (8 floats or 4 doubles). Every output is
// summed in a fixed order by one thread, so results are bit-for-bit the same for any number of threads.

typedef real vreal __attribute__((vector_size(32)));
typedef real vreal_u __attribute__((vector_size(32), aligned(sizeof(real)), may_alias));  // unaligned access
static const int VL = (int)(32 / sizeof(real));
static inline vreal vload(const real* p) { return *(const vreal_u*)p; }
static inline void vstore(real* p, vreal v) { *(vreal_u*)p = v; }
static inline real hsum(vreal v) {
    real s = 0;
    for (int i = 0; i < VL; i++) s += v[i];
    return s;
}

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

// ----------------------------------------------------------------------------------------------------------------
// matmul: out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC), weight stored as PyTorch's nn.Linear.
// The forward is a dot product along C for each output: register tiles of 4 rows x 4 outputs.

template <int NR, int NO>
static inline void matmul_forward_tile(real* out, const real* inp, const real* weight, const real* bias, int C,
                                       int OC, int n0, int o0) {
    vreal acc[NR][NO] = {};
    for (int i = 0; i < C; i += VL) {
        vreal a[NR], w[NO];
        for (int r = 0; r < NR; r++) a[r] = vload(inp + (size_t)(n0 + r) * C + i);
        for (int c = 0; c < NO; c++) w[c] = vload(weight + (size_t)(o0 + c) * C + i);
        for (int r = 0; r < NR; r++)
            for (int c = 0; c < NO; c++) acc[r][c] += a[r] * w[c];
    }
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NO; c++)
            out[(size_t)(n0 + r) * OC + o0 + c] = hsum(acc[r][c]) + (bias ? bias[o0 + c] : (real)0);
}

static void matmul_forward(real* out, const real* inp, const real* weight, const real* bias, int N, int C, int OC) {
    if (C % VL != 0) {  // plain loops for shapes the vector tiles do not cover
#pragma omp parallel for
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) {
                real s = bias ? bias[o] : (real)0;
                for (int i = 0; i < C; i++) s += inp[(size_t)n * C + i] * weight[(size_t)o * C + i];
                out[(size_t)n * OC + o] = s;
            }
        return;
    }
    // each thread owns blocks of 4 weight rows (loaded once) and runs them against every input row (from cache)
#pragma omp parallel for schedule(static)
    for (int o0 = 0; o0 < OC; o0 += 4) {
        int n0 = 0;
        if (o0 + 4 <= OC) {
            for (; n0 + 4 <= N; n0 += 4) matmul_forward_tile<4, 4>(out, inp, weight, bias, C, OC, n0, o0);
            for (; n0 < N; n0++) matmul_forward_tile<1, 4>(out, inp, weight, bias, C, OC, n0, o0);
        } else {
            for (int o = o0; o < OC; o++)
                for (n0 = 0; n0 < N; n0++) matmul_forward_tile<1, 1>(out, inp, weight, bias, C, OC, n0, o);
        }
    }
}

// The backward pass needs two products of the form  D (M, Nc) += A (M, K) @ Bm (K, Nc), Bm row-major with rows
// of length Nc, A read through strides so that it can be a transposed view:  A(m, k) = a[m * sam + k * sak].
//   dinp (N, C)     += dout (N, OC) @ weight (OC, C)          A = dout, K = OC
//   dweight (OC, C) += dout^T (OC, N) @ inp (N, C)            A = dout viewed transposed, K = N
// Tiles of 4 rows x 4 vectors of D stay in registers while k runs over a block of 256 (so that the block of Bm
// stays in cache); each D element is summed over k in increasing order by one thread.
template <int NR, int NV>
static inline void gemm_acc_tile(real* D, const real* a, const real* Bm, int Nc, size_t sam, size_t sak, int m0,
                                 int j0, int k0, int k1) {
    vreal acc[NR][NV];
    for (int r = 0; r < NR; r++)
        for (int v = 0; v < NV; v++) acc[r][v] = vload(D + (size_t)(m0 + r) * Nc + j0 + v * VL);
    for (int k = k0; k < k1; k++) {
        vreal b[NV];
        for (int v = 0; v < NV; v++) b[v] = vload(Bm + (size_t)k * Nc + j0 + v * VL);
        for (int r = 0; r < NR; r++) {
            real ark = a[(m0 + r) * sam + k * sak];
            for (int v = 0; v < NV; v++) acc[r][v] += ark * b[v];
        }
    }
    for (int r = 0; r < NR; r++)
        for (int v = 0; v < NV; v++) vstore(D + (size_t)(m0 + r) * Nc + j0 + v * VL, acc[r][v]);
}

static void gemm_acc(real* D, const real* a, size_t sam, size_t sak, const real* Bm, int M, int Nc, int K) {
    if (Nc % VL != 0) {
#pragma omp parallel for
        for (int m = 0; m < M; m++)
            for (int k = 0; k < K; k++) {
                real amk = a[m * sam + k * sak];
                for (int j = 0; j < Nc; j++) D[(size_t)m * Nc + j] += amk * Bm[(size_t)k * Nc + j];
            }
        return;
    }
    const int KB = 256, JB = 4 * VL;
    int mtiles = (M + 3) / 4, jtiles = (Nc + JB - 1) / JB;
#pragma omp parallel
    for (int k0 = 0; k0 < K; k0 += KB) {
        int k1 = k0 + KB < K ? k0 + KB : K;
#pragma omp for schedule(static)
        for (int tile = 0; tile < mtiles * jtiles; tile++) {
            int m0 = (tile % mtiles) * 4, j0 = (tile / mtiles) * JB;  // consecutive tiles share one Bm strip
            int nr = M - m0 < 4 ? M - m0 : 4;
            for (int j = j0; j < j0 + JB && j < Nc;) {
                if (j + JB <= Nc && nr == 4) {
                    gemm_acc_tile<4, 4>(D, a, Bm, Nc, sam, sak, m0, j, k0, k1);
                    j += JB;
                } else {
                    for (int r = 0; r < nr; r++) gemm_acc_tile<1, 1>(D, a, Bm, Nc, sam, sak, m0 + r, j, k0, k1);
                    j += VL;
                }
            }
        }  // the implicit barrier of `omp for` orders the k blocks
    }
}

static void matmul_backward(real* dinp, real* dweight, real* dbias, const real* dout, const real* inp,
                            const real* weight, int N, int C, int OC) {
    gemm_acc(dinp, dout, OC, 1, weight, N, C, OC);     // dinp += dout @ weight
    gemm_acc(dweight, dout, 1, OC, inp, OC, C, N);     // dweight += dout^T @ inp
    if (dbias) {                                       // dbias += sum over rows of dout
#pragma omp parallel for
        for (int o = 0; o < OC; o++) {
            real s = 0;
            for (int n = 0; n < N; n++) s += dout[(size_t)n * OC + o];
            dbias[o] += s;
        }
    }
}

// ----------------------------------------------------------------------------------------------------------------
// attention: qkv (B, T, 3C) holds q, k, v; NH heads of size hs = C/NH. Causal softmax(q.k / sqrt(hs)) @ v.
// Caches preatt (the scaled scores) and att (the softmax), both (B, NH, T, T), for the backward pass.

static void attention_forward(real* out, real* preatt, real* att, const real* qkv, int B, int T, int C, int NH) {
    int C3 = 3 * C, hs = C / NH;
    real scale = 1 / std::sqrt((real)hs);
#pragma omp parallel for collapse(3)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++) {
                const real* q = qkv + ((size_t)b * T + t) * C3 + h * hs;
                real* pre = preatt + (((size_t)b * NH + h) * T + t) * T;
                real* a = att + (((size_t)b * NH + h) * T + t) * T;
                real maxv = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++) {  // scores against keys 0..t
                    const real* k = qkv + ((size_t)b * T + t2) * C3 + h * hs + C;
                    real s = 0;
                    for (int i = 0; i < hs; i++) s += q[i] * k[i];
                    s *= scale;
                    pre[t2] = s;
                    if (s > maxv) maxv = s;
                }
                real sum = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    a[t2] = std::exp(pre[t2] - maxv);
                    sum += a[t2];
                }
                for (int t2 = 0; t2 <= t; t2++) a[t2] /= sum;
                for (int t2 = t + 1; t2 < T; t2++) pre[t2] = a[t2] = 0;  // masked: no weight on the future
                real* o = out + ((size_t)b * T + t) * C + h * hs;
                for (int i = 0; i < hs; i++) o[i] = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    const real* v = qkv + ((size_t)b * T + t2) * C3 + h * hs + 2 * C;
                    for (int i = 0; i < hs; i++) o[i] += a[t2] * v[i];
                }
            }
}

// Per query t: dv[t2] += att[t2] * dout;  datt[t2] = v[t2] . dout;  dpre = att * (datt - sum(att * datt));
// dq += dpre[t2] * k[t2] * scale;  dk[t2] += dpre[t2] * q * scale. Parallel over (b, h): each owns its slices.
static void attention_backward(real* dqkv, real* dpreatt, real* datt, const real* dout, const real* qkv,
                               const real* att, int B, int T, int C, int NH) {
    int C3 = 3 * C, hs = C / NH;
    real scale = 1 / std::sqrt((real)hs);
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const real* a = att + (((size_t)b * NH + h) * T + t) * T;
                real* da = datt + (((size_t)b * NH + h) * T + t) * T;
                real* dpre = dpreatt + (((size_t)b * NH + h) * T + t) * T;
                const real* q = qkv + ((size_t)b * T + t) * C3 + h * hs;
                real* dq = dqkv + ((size_t)b * T + t) * C3 + h * hs;
                const real* g = dout + ((size_t)b * T + t) * C + h * hs;
                for (int t2 = 0; t2 <= t; t2++) {  // through out = att @ v
                    const real* v = qkv + ((size_t)b * T + t2) * C3 + h * hs + 2 * C;
                    real* dv = dqkv + ((size_t)b * T + t2) * C3 + h * hs + 2 * C;
                    real s = 0;
                    for (int i = 0; i < hs; i++) {
                        s += v[i] * g[i];
                        dv[i] += a[t2] * g[i];
                    }
                    da[t2] += s;
                }
                real dot = 0;  // through the softmax
                for (int t2 = 0; t2 <= t; t2++) dot += a[t2] * da[t2];
                for (int t2 = 0; t2 <= t; t2++) dpre[t2] += a[t2] * (da[t2] - dot);
                for (int t2 = 0; t2 <= t; t2++) {  // through the scores q.k * scale
                    const real* k = qkv + ((size_t)b * T + t2) * C3 + h * hs + C;
                    real* dk = dqkv + ((size_t)b * T + t2) * C3 + h * hs + C;
                    for (int i = 0; i < hs; i++) {
                        dq[i] += dpre[t2] * k[i] * scale;
                        dk[i] += dpre[t2] * q[i] * scale;
                    }
                }
            }
}

// ----------------------------------------------------------------------------------------------------------------
// GELU, tanh approximation: gelu(x) = x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))

static const double GELU_K = 0.79788456080286535588;  // sqrt(2/pi)

static void gelu_forward(real* out, const real* inp, size_t N) {
#pragma omp parallel for
    for (size_t i = 0; i < N; i++) {
        real x = inp[i];
        out[i] = (real)0.5 * x * (1 + std::tanh((real)GELU_K * (x + (real)0.044715 * x * x * x)));
    }
}

static void gelu_backward(real* dinp, const real* inp, const real* dout, size_t N) {
#pragma omp parallel for
    for (size_t i = 0; i < N; i++) {
        real x = inp[i];
        real u = (real)GELU_K * (x + (real)0.044715 * x * x * x);
        real th = std::tanh(u);
        real sech2 = 1 - th * th;
        real du = (real)GELU_K * (1 + 3 * (real)0.044715 * x * x);
        dinp[i] += ((real)0.5 * (1 + th) + (real)0.5 * x * sech2 * du) * dout[i];
    }
}

// ----------------------------------------------------------------------------------------------------------------
// residual: out = a + scale * b. Pre-Norm's and the Y stream's identity adds use scale 1; SiameseNorm's X stream
// uses scale 1/c_l.

static void residual_forward(real* out, const real* a, const real* b, real scale, size_t N) {
#pragma omp parallel for
    for (size_t i = 0; i < N; i++) out[i] = a[i] + scale * b[i];
}

static void residual_backward(real* da, real* db, const real* dout, real scale, size_t N) {
#pragma omp parallel for
    for (size_t i = 0; i < N; i++) {
        da[i] += dout[i];
        db[i] += scale * dout[i];
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
// activations: one buffer, named pointers, sized from the config and the batch shape (B, T)

typedef struct {
    real* x;         // (2L+1, B,T,C) the X stream entering each sub-layer s = 2l + k (k = 0 attention, 1 MLP);
                     //   x[0] = h0 = wte[tok] + wpe[pos], x[2L] leaves the last block. Pre/post: the only stream.
    real* y;         // (2L+1, B,T,C) the second stream of two-stream layouts (siamese: Y), likewise (y[0] = h0)
    real* ln;        // per sub-layer s, the LayerNorm outputs its kind keeps (kept_norms): pre u = LN(x); siamese
                     //   xh = LN_x(x), LN_y(y) and u = LN_in(xh + LN_y(y)); post none (its LN writes x[s+1])
    real* ln_mean;   // (2L, 3, B,T) statistics of every LayerNorm, cached for the backward pass
    real* ln_rstd;   // (2L, 3, B,T)
    real* sum;       // per sub-layer whose kind keeps one (B,T,C): post x + z, the input of the LN after the add;
                     //   siamese xh + LN_y(y)
    real* qkv;       // (L, B,T,3C)
    real* preatt;    // (L, B,NH,T,T)
    real* att;       // (L, B,NH,T,T)
    real* atty;      // (L, B,T,C) attention output before its projection
    real* fch;       // (L, B,T,4C)
    real* fch_gelu;  // (L, B,T,4C)
    real* z;         // (2L, B,T,C) the sub-layer outputs z = F(u)
    real* lnf;       // (head LayerNorms, B,T,C) head LayerNorm outputs: ln LN_f(x); siamese LN_xf(x), LN_yf(y), LN_f(.)
    real* lnf_mean;  // (3, B,T)
    real* lnf_rstd;  // (3, B,T)
    real* head_sum;  // (B,T,C) siamese head: LN_xf(x) + LN_yf(y)
    real* logits;    // (B,T,Vp)
    real* probs;     // (B,T,Vp)
    real* losses;    // (B,T)
} ActivationTensors;

// What each kind of sub-layer keeps for its backward pass beyond the streams and z, in (B,T,C) tensors: its
// LayerNorm outputs (in ActivationTensors::ln) and the sum that a LayerNorm reads (in ::sum).
static int kept_norms(SubLayerKind k) {
    switch (k) {
        case SUBLAYER_PRE: return 1;      // u = LN(x)
        case SUBLAYER_POST: return 0;     // its LN writes x[s+1]
        case SUBLAYER_SIAMESE: return 3;  // xh, LN_y(y), u
        case SUBLAYER_DEEPNORM: return 0; // its LN writes x[s+1]
        default: unknown_kind("sub-layer kind", k);
    }
}
static int kept_sums(SubLayerKind k) {
    switch (k) {
        case SUBLAYER_PRE: return 0;
        case SUBLAYER_POST: return 1;     // x + z
        case SUBLAYER_SIAMESE: return 1;  // xh + LN_y(y)
        case SUBLAYER_DEEPNORM: return 1; // alpha x + z
        default: unknown_kind("sub-layer kind", k);
    }
}
// the LayerNorm outputs the head keeps, in ActivationTensors::lnf
static int head_kept_norms(HeadKind h) {
    switch (h) {
        case HEAD_LN: return 1;
        case HEAD_IDENTITY: return 0;
        case HEAD_SIAMESE: return 3;
        default: unknown_kind("head kind", h);
    }
}

// where sub-layer s's slices of ActivationTensors::ln and ::sum start, in (B,T,C) tensors: the count kept by the
// sub-layers before it
static void sublayer_offsets(const GPT2Config& c, int s, size_t* ln, size_t* sum) {
    *ln = *sum = 0;
    for (int r = 0; r < s; r++) {
        SubLayerKind k = sublayer_kind(c, r);
        *ln += kept_norms(k);
        *sum += kept_sums(k);
    }
}

static size_t point_activations(const GPT2Config& c, int B, int T, ActivationTensors* a, real* memory) {
    size_t C = c.channels, L = c.num_layers, NH = c.num_heads, Vp = c.padded_vocab_size, BT = (size_t)B * T;
    const LayoutInfo& layout = layout_of(c);
    size_t norms, sums;  // over all sub-layers
    sublayer_offsets(c, 2 * L, &norms, &sums);
    struct { real** ptr; size_t size; } list[] = {
        {&a->x, (2 * L + 1) * BT * C},
        {&a->y, layout.streams == 2 ? (2 * L + 1) * BT * C : 0},
        {&a->ln, norms * BT * C},
        {&a->ln_mean, 2 * L * LN_SLOTS * BT},
        {&a->ln_rstd, 2 * L * LN_SLOTS * BT},
        {&a->sum, sums * BT * C},
        {&a->qkv, L * BT * 3 * C},
        {&a->preatt, L * B * NH * T * T},
        {&a->att, L * B * NH * T * T},
        {&a->atty, L * BT * C},
        {&a->fch, L * BT * 4 * C},
        {&a->fch_gelu, L * BT * 4 * C},
        {&a->z, 2 * L * BT * C},
        {&a->lnf, (size_t)head_kept_norms(layout.head) * BT * C},
        {&a->lnf_mean, LN_SLOTS * BT},
        {&a->lnf_rstd, LN_SLOTS * BT},
        {&a->head_sum, layout.head == HEAD_SIAMESE ? BT * C : 0},
        {&a->logits, BT * Vp},
        {&a->probs, BT * Vp},
        {&a->losses, BT},
    };
    size_t total = 0;
    for (auto& e : list) {
        *e.ptr = memory ? memory + total : nullptr;
        total += e.size;
    }
    return total;
}

// The slices of one sub-layer s, as the boundary functions see them (the same view serves the gradients).
typedef struct {
    real *x, *x_next;                    // X stream entering and leaving the sub-layer (B,T,C)
    real *y, *y_next;                    // Y stream (two-stream layouts)
    real* ln[LN_SLOTS];                  // LayerNorm outputs by slot; post: ln[LN_X] is x_next
    real *mean[LN_SLOTS], *rstd[LN_SLOTS];
    real* sum;                           // post: x + z; siamese: xh + LN_y(y)
    real* u;                             // the input of F
    real* z;                             // the output of F
} SubLayerActs;

// Sub-layer s's view. Some slices are another slice under a second name, and the backward pass relies on it: the
// gradient a function accumulates into one name is the gradient of the other. The aliases, by kind:
//
//   kind      u                               ln[LN_X]     why
//   pre       ln[LN_X] = LN(x)                its own      F reads the LayerNorm's output
//   post      x                               x_next       F reads the stream itself; its LN writes x_next
//   deepnorm  x                               x_next       likewise (LN(alpha x + z) writes x_next)
//   siamese   ln[LN_IN]  (--no-ln-in: sum)    its own      F reads LN_in's output (or the sum, with no LN_in)
static SubLayerActs sublayer_acts(const GPT2Config& c, const ActivationTensors& a, int s, int B, int T) {
    size_t BTC = (size_t)B * T * c.channels, BT = (size_t)B * T;
    SubLayerActs v;
    memset(&v, 0, sizeof(v));
    v.x = a.x + s * BTC;
    v.x_next = a.x + (s + 1) * BTC;
    if (layout_of(c).streams == 2) {
        v.y = a.y + s * BTC;
        v.y_next = a.y + (s + 1) * BTC;
    }
    for (int j = 0; j < LN_SLOTS; j++) {
        v.mean[j] = a.ln_mean + ((size_t)s * LN_SLOTS + j) * BT;
        v.rstd[j] = a.ln_rstd + ((size_t)s * LN_SLOTS + j) * BT;
    }
    v.z = a.z + s * BTC;
    size_t ln_at, sum_at;
    sublayer_offsets(c, s, &ln_at, &sum_at);
    SubLayerKind kind = sublayer_kind(c, s);
    for (int j = 0; j < kept_norms(kind); j++) v.ln[j] = a.ln + (ln_at + j) * BTC;
    if (kept_sums(kind)) v.sum = a.sum + sum_at * BTC;
    switch (kind) {
        case SUBLAYER_PRE:
            v.u = v.ln[LN_X];  // u = LN(x)
            break;
        case SUBLAYER_POST:
        case SUBLAYER_DEEPNORM:
            v.ln[LN_X] = v.x_next;  // x_next = LN(x + z), deepnorm LN(alpha x + z)
            v.u = v.x;              // u = x
            break;
        case SUBLAYER_SIAMESE:
            v.u = (c.ablations & ABLATE_NO_LN_IN) ? v.sum : v.ln[LN_IN];  // u = LN_in(xh + LN_y(y))
            break;
        default: unknown_kind("sub-layer kind", kind);
    }
    return v;
}

// ----------------------------------------------------------------------------------------------------------------
// the model

typedef struct {
    GPT2Config config;
    std::vector<TensorInfo> tensors;  // checkpoint order
    ParameterTensors params, grads;
    size_t num_parameters;
    real *params_memory, *grads_memory;
    real *m_memory, *v_memory;  // AdamW moments of parameters [opt_begin, opt_end), allocated at the first update
    size_t opt_begin, opt_end;  // the parameters this process updates: all, or its shard under ZeRO-1 (-z 1)
    real* micro_grads;          // one process, a step's later micro-batches: each one's own gradient (the trainer)
    std::vector<real> grad_shard, grad_pieces;  // several processes: the summed gradient's shard (the trainer)
    ActivationTensors acts, grads_acts;
    size_t num_activations;
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
    model->m_memory = model->v_memory = model->micro_grads = nullptr;
    model->opt_begin = 0;
    model->opt_end = model->num_parameters;
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

static void gpt2_allocate_optimizer_state(GPT2* model) {
    if (model->m_memory) return;
    model->m_memory = (real*)calloc_or_fail(model->opt_end - model->opt_begin, sizeof(real));
    model->v_memory = (real*)calloc_or_fail(model->opt_end - model->opt_begin, sizeof(real));
}

// ----------------------------------------------------------------------------------------------------------------
// the LayerNorm parameters of sub-layer s = 2l + k, slot j (and their gradients)

static real* ln_w(ParameterTensors* p, const GPT2Config& c, int s, int j) { return p->lnw[s % 2][j] + (s / 2) * c.channels; }
static real* ln_b(ParameterTensors* p, const GPT2Config& c, int s, int j) { return p->lnb[s % 2][j] + (s / 2) * c.channels; }

// ----------------------------------------------------------------------------------------------------------------
// The sub-layer boundary: how each kind of sub-layer (host/layouts.h) turns the streams into the input u of F, and
// takes F's output z back. This, and the head below, is the ONLY place where the layouts differ.

static void boundary_in_forward(GPT2* m, int s) {
    const GPT2Config& c = m->config;
    int N = m->B * m->T, C = c.channels;
    SubLayerActs a = sublayer_acts(c, m->acts, s, m->B, m->T);
    ParameterTensors* p = &m->params;
    SubLayerKind kind = sublayer_kind(c, s);
    switch (kind) {
        case SUBLAYER_PRE:  // u = LN(x)
            layernorm_forward(a.ln[LN_X], a.mean[LN_X], a.rstd[LN_X], a.x, ln_w(p, c, s, LN_X), ln_b(p, c, s, LN_X), N, C);
            break;
        case SUBLAYER_POST:      // u = x; the norm comes after the add
        case SUBLAYER_DEEPNORM:  // likewise
            break;
        case SUBLAYER_SIAMESE:  // xh = LN_x(x);  u = LN_in(xh + LN_y(y))
            layernorm_forward(a.ln[LN_X], a.mean[LN_X], a.rstd[LN_X], a.x, ln_w(p, c, s, LN_X), ln_b(p, c, s, LN_X), N, C);
            layernorm_forward(a.ln[LN_Y], a.mean[LN_Y], a.rstd[LN_Y], a.y, ln_w(p, c, s, LN_Y), ln_b(p, c, s, LN_Y), N, C);
            residual_forward(a.sum, a.ln[LN_X], a.ln[LN_Y], 1, (size_t)N * C);
            if (!(c.ablations & ABLATE_NO_LN_IN))
                layernorm_forward(a.ln[LN_IN], a.mean[LN_IN], a.rstd[LN_IN], a.sum, ln_w(p, c, s, LN_IN), ln_b(p, c, s, LN_IN), N, C);
            break;
        default: unknown_kind("sub-layer kind", kind);
    }
}

static void boundary_out_forward(GPT2* m, int s) {
    const GPT2Config& c = m->config;
    int N = m->B * m->T, C = c.channels;
    size_t NC = (size_t)N * C;
    SubLayerActs a = sublayer_acts(c, m->acts, s, m->B, m->T);
    ParameterTensors* p = &m->params;
    SubLayerKind kind = sublayer_kind(c, s);
    switch (kind) {
        case SUBLAYER_PRE:  // x = x + z
            residual_forward(a.x_next, a.x, a.z, 1, NC);
            break;
        case SUBLAYER_POST:  // x = LN(x + z)
            residual_forward(a.sum, a.x, a.z, 1, NC);
            layernorm_forward(a.x_next, a.mean[LN_X], a.rstd[LN_X], a.sum, ln_w(p, c, s, LN_X), ln_b(p, c, s, LN_X), N, C);
            break;
        case SUBLAYER_SIAMESE:  // x = xh + z / c_l;  y = y + z
            residual_forward(a.x_next, a.ln[LN_X], a.z, (real)inv_depth_scale(c, s / 2), NC);
            residual_forward(a.y_next, a.y, a.z, 1, NC);
            break;
        case SUBLAYER_DEEPNORM:  // x = LN(alpha x + z)
            residual_forward(a.sum, a.z, a.x, (real)deepnorm_alpha(c.num_layers), NC);
            layernorm_forward(a.x_next, a.mean[LN_X], a.rstd[LN_X], a.sum, ln_w(p, c, s, LN_X), ln_b(p, c, s, LN_X), N, C);
            break;
        default: unknown_kind("sub-layer kind", kind);
    }
}

// backward of boundary_out_forward: from the gradients of the streams leaving (x_next, y_next) to dz and onwards
static void boundary_out_backward(GPT2* m, int s) {
    const GPT2Config& c = m->config;
    int N = m->B * m->T, C = c.channels;
    size_t NC = (size_t)N * C;
    SubLayerActs a = sublayer_acts(c, m->acts, s, m->B, m->T);
    SubLayerActs d = sublayer_acts(c, m->grads_acts, s, m->B, m->T);
    ParameterTensors *p = &m->params, *g = &m->grads;
    SubLayerKind kind = sublayer_kind(c, s);
    switch (kind) {
        case SUBLAYER_PRE:
            residual_backward(d.x, d.z, d.x_next, 1, NC);
            break;
        case SUBLAYER_POST:
            layernorm_backward(d.sum, ln_w(g, c, s, LN_X), ln_b(g, c, s, LN_X), d.x_next, a.sum, ln_w(p, c, s, LN_X),
                               a.mean[LN_X], a.rstd[LN_X], N, C);
            residual_backward(d.x, d.z, d.sum, 1, NC);
            break;
        case SUBLAYER_SIAMESE:  // dxh += dx_next;  dz += dx_next / c_l + dy_next;  dy += dy_next
            residual_backward(d.ln[LN_X], d.z, d.x_next, (real)inv_depth_scale(c, s / 2), NC);
            residual_backward(d.y, d.z, d.y_next, 1, NC);
            break;
        case SUBLAYER_DEEPNORM:  // dsum = LN'(dx_next);  dz += dsum;  dx += alpha dsum
            layernorm_backward(d.sum, ln_w(g, c, s, LN_X), ln_b(g, c, s, LN_X), d.x_next, a.sum, ln_w(p, c, s, LN_X),
                               a.mean[LN_X], a.rstd[LN_X], N, C);
            residual_backward(d.z, d.x, d.sum, (real)deepnorm_alpha(c.num_layers), NC);
            break;
        default: unknown_kind("sub-layer kind", kind);
    }
}

// backward of boundary_in_forward: from du to the gradients of the streams entering the sub-layer
static void boundary_in_backward(GPT2* m, int s) {
    const GPT2Config& c = m->config;
    int N = m->B * m->T, C = c.channels;
    SubLayerActs a = sublayer_acts(c, m->acts, s, m->B, m->T);
    SubLayerActs d = sublayer_acts(c, m->grads_acts, s, m->B, m->T);
    ParameterTensors *p = &m->params, *g = &m->grads;
    SubLayerKind kind = sublayer_kind(c, s);
    switch (kind) {
        case SUBLAYER_PRE:
            layernorm_backward(d.x, ln_w(g, c, s, LN_X), ln_b(g, c, s, LN_X), d.ln[LN_X], a.x, ln_w(p, c, s, LN_X),
                               a.mean[LN_X], a.rstd[LN_X], N, C);
            break;
        case SUBLAYER_POST:      // u is x itself: F's backward already accumulated into dx
        case SUBLAYER_DEEPNORM:  // likewise
            break;
        case SUBLAYER_SIAMESE:
            if (!(c.ablations & ABLATE_NO_LN_IN))
                layernorm_backward(d.sum, ln_w(g, c, s, LN_IN), ln_b(g, c, s, LN_IN), d.ln[LN_IN], a.sum,
                                   ln_w(p, c, s, LN_IN), a.mean[LN_IN], a.rstd[LN_IN], N, C);
            residual_backward(d.ln[LN_X], d.ln[LN_Y], d.sum, 1, (size_t)N * C);  // dxh += dsum; dLN_y(y) += dsum
            layernorm_backward(d.y, ln_w(g, c, s, LN_Y), ln_b(g, c, s, LN_Y), d.ln[LN_Y], a.y, ln_w(p, c, s, LN_Y),
                               a.mean[LN_Y], a.rstd[LN_Y], N, C);
            layernorm_backward(d.x, ln_w(g, c, s, LN_X), ln_b(g, c, s, LN_X), d.ln[LN_X], a.x, ln_w(p, c, s, LN_X),
                               a.mean[LN_X], a.rstd[LN_X], N, C);
            break;
        default: unknown_kind("sub-layer kind", kind);
    }
}

// where the head leaves hf (in the activations) and where the classifier's backward writes dhf (in their gradients)
static real* head_output(const GPT2Config& c, const ActivationTensors& a, size_t NC) {
    HeadKind head = layout_of(c).head;
    switch (head) {
        case HEAD_LN: return a.lnf;                                // LN_f(x)
        case HEAD_IDENTITY: return a.x + 2 * c.num_layers * NC;    // x
        case HEAD_SIAMESE: return a.lnf + 2 * NC;                  // LN_f(LN_xf(x) + LN_yf(y))
        default: unknown_kind("head kind", head);
    }
}

// The head: the hidden state hf that the tied wte projection turns into logits.
static void head_forward(GPT2* m) {
    const GPT2Config& c = m->config;
    int N = m->B * m->T, C = c.channels;
    size_t NC = (size_t)N * C;
    ActivationTensors* a = &m->acts;
    ParameterTensors* p = &m->params;
    real* x = a->x + 2 * c.num_layers * NC;
    HeadKind head = layout_of(c).head;
    switch (head) {
        case HEAD_LN:  // hf = LN_f(x)
            layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, x, p->lnfw[0], p->lnfb[0], N, C);
            break;
        case HEAD_IDENTITY:  // hf = x, already normalized by the last sub-layer
            break;
        case HEAD_SIAMESE: {  // hf = LN_f(LN_xf(x) + LN_yf(y))
            real* y = a->y + 2 * c.num_layers * NC;
            for (int j = 0; j < 2; j++)
                layernorm_forward(a->lnf + j * NC, a->lnf_mean + j * N, a->lnf_rstd + j * N, j == LN_X ? x : y,
                                  p->lnfw[j], p->lnfb[j], N, C);
            residual_forward(a->head_sum, a->lnf, a->lnf + NC, 1, NC);
            layernorm_forward(a->lnf + 2 * NC, a->lnf_mean + 2 * N, a->lnf_rstd + 2 * N, a->head_sum, p->lnfw[2],
                              p->lnfb[2], N, C);
            break;
        }
        default: unknown_kind("head kind", head);
    }
}

static void head_backward(GPT2* m) {
    const GPT2Config& c = m->config;
    int N = m->B * m->T, C = c.channels;
    size_t NC = (size_t)N * C;
    ActivationTensors *a = &m->acts, *d = &m->grads_acts;
    ParameterTensors *p = &m->params, *g = &m->grads;
    real* x = a->x + 2 * c.num_layers * NC;
    real* dx = d->x + 2 * c.num_layers * NC;
    HeadKind head = layout_of(c).head;
    switch (head) {
        case HEAD_LN:
            layernorm_backward(dx, g->lnfw[0], g->lnfb[0], d->lnf, x, p->lnfw[0], a->lnf_mean, a->lnf_rstd, N, C);
            break;
        case HEAD_IDENTITY:  // the classifier's backward wrote into dx directly
            break;
        case HEAD_SIAMESE: {
            real* y = a->y + 2 * c.num_layers * NC;
            real* dy = d->y + 2 * c.num_layers * NC;
            layernorm_backward(d->head_sum, g->lnfw[2], g->lnfb[2], d->lnf + 2 * NC, a->head_sum, p->lnfw[2],
                               a->lnf_mean + 2 * N, a->lnf_rstd + 2 * N, N, C);
            residual_backward(d->lnf, d->lnf + NC, d->head_sum, 1, NC);
            layernorm_backward(dx, g->lnfw[0], g->lnfb[0], d->lnf, x, p->lnfw[0], a->lnf_mean, a->lnf_rstd, N, C);
            layernorm_backward(dy, g->lnfw[1], g->lnfb[1], d->lnf + NC, y, p->lnfw[1], a->lnf_mean + N,
                               a->lnf_rstd + N, N, C);
            break;
        }
        default: unknown_kind("head kind", head);
    }
}

// ----------------------------------------------------------------------------------------------------------------
// The two sub-layers F that all layouts share: causal self-attention and the MLP of block l.

static void attention_block_forward(GPT2* m, int l, const real* u, real* z) {
    const GPT2Config& c = m->config;
    int B = m->B, T = m->T, C = c.channels, NH = c.num_heads, N = B * T;
    ParameterTensors* p = &m->params;
    ActivationTensors* a = &m->acts;
    real* qkv = a->qkv + (size_t)l * N * 3 * C;
    real* preatt = a->preatt + (size_t)l * B * NH * T * T;
    real* att = a->att + (size_t)l * B * NH * T * T;
    real* atty = a->atty + (size_t)l * N * C;
    matmul_forward(qkv, u, p->qkvw + (size_t)l * 3 * C * C, p->qkvb + (size_t)l * 3 * C, N, C, 3 * C);
    attention_forward(atty, preatt, att, qkv, B, T, C, NH);
    matmul_forward(z, atty, p->attprojw + (size_t)l * C * C, p->attprojb + (size_t)l * C, N, C, C);
}

static void attention_block_backward(GPT2* m, int l, const real* u, real* du, const real* dz) {
    const GPT2Config& c = m->config;
    int B = m->B, T = m->T, C = c.channels, NH = c.num_heads, N = B * T;
    ParameterTensors *p = &m->params, *g = &m->grads;
    ActivationTensors *a = &m->acts, *d = &m->grads_acts;
    size_t qkv_off = (size_t)l * N * 3 * C, att_off = (size_t)l * B * NH * T * T, y_off = (size_t)l * N * C;
    matmul_backward(d->atty + y_off, g->attprojw + (size_t)l * C * C, g->attprojb + (size_t)l * C, dz,
                    a->atty + y_off, p->attprojw + (size_t)l * C * C, N, C, C);
    attention_backward(d->qkv + qkv_off, d->preatt + att_off, d->att + att_off, d->atty + y_off, a->qkv + qkv_off,
                       a->att + att_off, B, T, C, NH);
    matmul_backward(du, g->qkvw + (size_t)l * 3 * C * C, g->qkvb + (size_t)l * 3 * C, d->qkv + qkv_off, u,
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
// forward, backward, update

static void gpt2_allocate_activations(GPT2* m, int B, int T) {
    m->batch_size = B;
    m->seq_len = T;
    m->num_activations = point_activations(m->config, B, T, &m->acts, nullptr);
    m->acts_memory = (real*)calloc_or_fail(m->num_activations, sizeof(real));
    m->grads_acts_memory = (real*)calloc_or_fail(m->num_activations, sizeof(real));
    point_activations(m->config, B, T, &m->acts, m->acts_memory);
    point_activations(m->config, B, T, &m->grads_acts, m->grads_acts_memory);
    m->inputs = (int*)calloc_or_fail((size_t)B * T, sizeof(int));
    m->targets = (int*)calloc_or_fail((size_t)B * T, sizeof(int));
}

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

    encoder_forward(a->x, inputs, m->params.wte, m->params.wpe, B, T, C);  // x = h0
    if (layout_of(c).streams == 2) memcpy(a->y, a->x, (size_t)N * C * sizeof(real));  // y = h0
    for (int s = 0; s < 2 * L; s++) {
        SubLayerActs v = sublayer_acts(c, *a, s, B, T);
        boundary_in_forward(m, s);
        if (s % 2 == 0) attention_block_forward(m, s / 2, v.u, v.z);
        else mlp_block_forward(m, s / 2, v.u, v.z);
        boundary_out_forward(m, s);
    }
    head_forward(m);
    matmul_forward(a->logits, head_output(c, *a, (size_t)N * C), m->params.wte, nullptr, N, C, c.padded_vocab_size);
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

static void gpt2_zero_grad(GPT2* m) { memset(m->grads_memory, 0, m->num_parameters * sizeof(real)); }

// Accumulates the gradient of loss_scale * mean_loss into the parameter gradients (loss_scale = 1/accumulation
// steps when several micro-batches make one step).
static void gpt2_backward(GPT2* m, real loss_scale = 1) {
    if (m->mean_loss == -1) fail("backward needs a forward pass with targets");
    const GPT2Config& c = m->config;
    int B = m->B, T = m->T, C = c.channels, N = B * T, L = c.num_layers;
    size_t NC = (size_t)N * C;
    memset(m->grads_acts_memory, 0, m->num_activations * sizeof(real));
    ActivationTensors *a = &m->acts, *d = &m->grads_acts;

    crossentropy_softmax_backward(d->logits, a->probs, m->targets, loss_scale / N, N, c.vocab_size,
                                  c.padded_vocab_size);
    matmul_backward(head_output(c, *d, NC), m->grads.wte, nullptr, d->logits, head_output(c, *a, NC),
                    m->params.wte, N, C, c.padded_vocab_size);
    head_backward(m);
    for (int s = 2 * L - 1; s >= 0; s--) {
        SubLayerActs v = sublayer_acts(c, *a, s, B, T);
        SubLayerActs dv = sublayer_acts(c, *d, s, B, T);
        boundary_out_backward(m, s);
        if (s % 2 == 0) attention_block_backward(m, s / 2, v.u, dv.u, dv.z);
        else mlp_block_backward(m, s / 2, v.u, dv.u, dv.z);
        boundary_in_backward(m, s);
    }
    // both streams start as h0, so h0 collects the gradients of both
    encoder_backward(m->grads.wte, m->grads.wpe, d->x, m->inputs, B, T, C);
    if (layout_of(c).streams == 2) encoder_backward(m->grads.wte, m->grads.wpe, d->y, m->inputs, B, T, C);
}

// sqrt of the sum of squared gradients, in double, summed in fixed chunks (the same for any thread count)
static double gpt2_grad_norm(const GPT2* m) {
    const size_t CHUNK = 1 << 16;
    size_t n = m->num_parameters, chunks = (n + CHUNK - 1) / CHUNK;
    std::vector<double> partial(chunks);
#pragma omp parallel for
    for (size_t k = 0; k < chunks; k++) {
        double s = 0;
        for (size_t i = k * CHUNK; i < n && i < (k + 1) * CHUNK; i++) s += (double)m->grads_memory[i] * m->grads_memory[i];
        partial[k] = s;
    }
    double total = 0;
    for (double s : partial) total += s;
    return std::sqrt(total);
}

typedef struct {
    real learning_rate, beta1, beta2, eps, weight_decay;
} AdamWConfig;

// AdamW (Loshchilov & Hutter) with bias correction; step t counts from 1. The gradient is multiplied by
// grad_scale first (global-norm clipping). Weight decay is decoupled and applies to 2-D weight matrices only.
// Updates the parameters [opt_begin, opt_end) (all, but for a rank's shard under ZeRO-1).
static void gpt2_update(GPT2* m, const AdamWConfig& o, real grad_scale, int t) {
    gpt2_allocate_optimizer_state(m);
    real bc1 = 1 - (real)std::pow((double)o.beta1, t), bc2 = 1 - (real)std::pow((double)o.beta2, t);
    for (const TensorInfo& tensor : m->tensors) {
        size_t begin = std::max(tensor.offset, m->opt_begin), end = std::min(tensor.offset + tensor.size, m->opt_end);
        if (begin >= end) continue;
        real wd = tensor.decay ? o.weight_decay : 0;
        real *p = m->params_memory + begin, *g = m->grads_memory + begin;
        real *mm = m->m_memory + (begin - m->opt_begin), *vv = m->v_memory + (begin - m->opt_begin);
#pragma omp parallel for
        for (size_t i = 0; i < end - begin; i++) {
            real grad = g[i] * grad_scale;
            mm[i] = o.beta1 * mm[i] + (1 - o.beta1) * grad;
            vv[i] = o.beta2 * vv[i] + (1 - o.beta2) * grad * grad;
            real mhat = mm[i] / bc1, vhat = vv[i] / bc2;
            p[i] -= o.learning_rate * (mhat / (std::sqrt(vhat) + o.eps) + wd * p[i]);
        }
    }
}

static void gpt2_free(GPT2* m) {
    free(m->params_memory);
    free(m->grads_memory);
    free(m->m_memory);
    free(m->v_memory);
    free(m->micro_grads);
    free(m->acts_memory);
    free(m->grads_acts_memory);
    free(m->inputs);
    free(m->targets);
    m->tensors.clear();
}

// ----------------------------------------------------------------------------------------------------------------
// the trainer: the training loop is train_main in host/train_loop.h, shared with the CUDA trainer; these are its hooks

#ifndef REFERENCE_CPU_NO_MAIN

static void train_backend_init(GPT2*, const TrainOptions& o) {
    if (o.tf32) fail("-f (TF32) applies to the CUDA trainer only");
    if (o.recompute) fail("-r (recomputation) applies to the CUDA trainer only");
    if (o.attention) fail("--attention applies to the CUDA trainer only");
}

static void train_backend_free(GPT2*) {}

// The step's gradient is the sum of each micro-batch's own gradient, in micro-batch order (host/distributed.h), so
// each micro-batch's gradient is computed alone, into zeroed memory: the step's first into the gradient itself; in
// one process the later ones into micro_grads, which train_sum_gradients adds; with several processes every one
// into the gradient buffer, which train_sum_gradients sends to the ranks that sum it.
static double train_micro_step(GPT2* m, const int* inputs, const int* targets, int B, int T, double loss_scale,
                               int micro) {
    real* into = m->grads_memory;  // zeroed by gpt2_zero_grad at the start of the step
    if (micro > 0) {
        if (dist.size == 1) {
            if (!m->micro_grads) m->micro_grads = (real*)calloc_or_fail(m->num_parameters, sizeof(real));
            into = m->micro_grads;
        }
        memset(into, 0, m->num_parameters * sizeof(real));
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
        real *g = m->grads_memory, *add = m->micro_grads;
#pragma omp parallel for
        for (size_t i = 0; i < n; i++) g[i] += add[i];
        return;
    }
    size_t begin = shard_begin(n, dist.rank);
    m->grad_shard.resize(shard_end(n, dist.rank) - begin);
    dist_sum_into_shard(m->grads_memory, n, m->grad_shard.data(), micro > 0, &m->grad_pieces);
    if (!last) return;
    memcpy(m->grads_memory + begin, m->grad_shard.data(), m->grad_shard.size() * sizeof(real));
    dist_gather_shards(m->grads_memory, n);
}

static void train_next_token_probs(GPT2* m, const int* tokens, int n, std::vector<double>* probs) {
    gpt2_forward(m, tokens, nullptr, 1, n);
    const real* row = m->acts.probs + (size_t)(n - 1) * m->config.padded_vocab_size;
    probs->assign(row, row + m->config.vocab_size);
}

// ZeRO-1 (-z 1): this rank keeps the optimizer state of its shard only (before that state exists)
static void keep_optimizer_shard(GPT2* m) {
    if (m->m_memory || !dist.zero) return;
    m->opt_begin = shard_begin(m->num_parameters, dist.rank);
    m->opt_end = shard_end(m->num_parameters, dist.rank);
}

// every rank has the whole gradient; with -z 1 each updates its shard, and the updated parameters are gathered
static void train_update(GPT2* m, const TrainOptions& o, double lr, double grad_scale, int t) {
    AdamWConfig opt = {(real)lr, (real)0.9, (real)0.95, (real)1e-8, (real)o.weight_decay};
    keep_optimizer_shard(m);
    gpt2_update(m, opt, (real)grad_scale, t);
    if (m->opt_end - m->opt_begin < m->num_parameters) dist_gather_shards(m->params_memory, m->num_parameters);
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
    if (m->opt_end - m->opt_begin < n) {
        mm = dist_gather_to_rank0(m->m_memory, n), vv = dist_gather_to_rank0(m->v_memory, n);
        m_all = mm.data(), v_all = vv.data();
    }
    if (dist.rank != 0) return {};
    FileSum model = gpt2_save_checkpoint(m, model_path);
    return {model, state_write(state_path, st, m_all, v_all)};
}

static TrainState train_load_state(GPT2* m, const char* path, DataLoader* loader) {
    keep_optimizer_shard(m);
    gpt2_allocate_optimizer_state(m);
    return state_read(path, m->num_parameters, loader, m->m_memory, m->v_memory, m->opt_begin, m->opt_end);
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
