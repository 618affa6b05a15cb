/*
train_gpt2.cu: the CUDA trainer for GPT-2 in the residual/normalization layouts of host/layouts.h (those whose row
says cuda), one GPU, bf16 mixed precision (the default) or float32 (make PRECISION=FP32; see cuda_common.cuh).

    pre      (GPT-2)                   x += Attn(LN1(x)); x += MLP(LN2(x));          logits from LN_f(x)
    post     (GPT-1, the Transformer)  x = LN1(x + Attn(x)); x = LN2(x + MLP(x));    logits from x
    siamese  (SiameseNorm, arXiv 2602.08064): two streams x, y sharing every weight; see siamese.cuh
    mix (Mix-LN), hybrid and hybrid-star (HybridNorm), siamese-hybrid (SiameseNorm with HybridNorm's X stream):
             kinds of sub-layer mixed block by block (host/layouts.h); the last three with the QKV-norm attention
    pre-qkvnorm (pre with the QKV-norm attention), peri (Peri-LN)  x += LN1o(Attn(LN1(x))); x += LN2o(MLP(LN2(x)))
    hc       (Hyper-Connections, arXiv 2409.19606): two streams mixed by learned weights per token; see hc.cuh

It computes exactly the function of the CPU reference (reference_cpu.cpp), reads and writes the same files and
takes the same flags (host/flags.h); tests/test_gpu.cu holds the two against each other, gradient by gradient.

The shape of the file follows llm.c's train_gpt2_fp32.cu: kernels with their launchers, each pair forward next to
backward, then the model (parameters, activations, forward, backward, update), then the hooks through which the
training loop both trainers share (train_main in host/train_loop.h) drives it. Matrix
products go to cuBLAS (bf16 tensor cores, or float32 with TF32 only under -f 1; in bf16 the products that end in
a bias or a GELU go to cuBLASLt with the bias and GELU fused in); attention is materialized, flash
(attention.cuh) or cuDNN's (attention_cudnn.cpp, make USE_CUDNN=1); everything else is a short kernel of our own
with a comment saying which thread owns which element. -r 1 recomputes the LayerNorm and GELU outputs in the
backward pass instead of keeping them.

How the layouts differ. Between two sub-layers (and after the embedding, and at the head) the normalization and
residual work is done in ONE fused kernel per row, a "boundary": boundary b ends sub-layer b-1 (takes its output z)
and starts sub-layer b (hands on its input u); boundary 0 follows the embedding and boundary 2L is the head. The
layouts share one attention and one MLP and differ only in boundary_forward_<kind> and boundary_backward_<kind>, one
small function per kind of sub-layer (host/layouts.h: pre, post, siamese, residual, normed, siamese_c1, peri, hc) and
direction, further down; where a layout changes kind from one sub-layer to the next (Post-LN blocks, then Pre-LN
ones) a boundary runs the end of one kind and the start of the other, or one kernel where the two fuse (HybridNorm's
residual add and the next LayerNorm; siamese-hybrid's two kinds). boundary_kind is the one place that says which of
them run for a kind, and what the kind keeps. The one change inside F: the QKV-norm layouts' attention LayerNorms
q, k and v of each head before it reads them (qkv_norm_forward, further down).

Backward functions accumulate (+=) into the parameter gradients, zeroed once per step; activation gradients flow
through a few (B,T,C) buffers that the backward pass reuses from layer to layer. Reductions are deterministic (no
atomics): the same run on the same GPU repeats bit for bit.

Define TRAIN_GPT2_NO_MAIN before including this file to use it as a library (tests/test_gpu.cu does).
*/
#include "host/train_loop.h"
#include "cuda_common.cuh"
#include "siamese.cuh"
#include "hc.cuh"
#include "attention.cuh"

// Attention: materialized (cuBLAS products around a softmax kernel, the T x T matrix kept for the backward pass),
// flash (attention.cuh: no T x T matrix, the softmax recomputed from one log-sum-exp a row) or cuDNN (cuDNN's fused
// attention, attention_cudnn.cpp: the same algorithm as flash, reading q, k, v straight from the qkv product's rows).
// Chosen at build time (make ATTENTION=flash -> -DFLASH_ATTENTION, make USE_CUDNN=1 -> -DENABLE_CUDNN
// -DCUDNN_ATTENTION) and per model by the tests and tools/profile_gpu (GPT2::attention). The cuDNN one exists only in
// a bf16 build with ENABLE_CUDNN (cuDNN's fused attention takes bf16 or fp16, not float32); asking another build for
// it is one error line (check_attention).
enum { ATTENTION_MATERIALIZED = 0, ATTENTION_FLASH = 1, ATTENTION_CUDNN = 2 };
#if defined(ENABLE_CUDNN) && !defined(ENABLE_FP32)
#define HAVE_CUDNN_ATTENTION 1
#include "attention_cudnn.h"
#else
#define HAVE_CUDNN_ATTENTION 0
#endif
#if defined(CUDNN_ATTENTION) && !HAVE_CUDNN_ATTENTION
#error "CUDNN_ATTENTION (make ATTENTION=cudnn) needs ENABLE_CUDNN (make USE_CUDNN=1) and the bf16 build"
#endif
#if defined(CUDNN_ATTENTION)
static const int DEFAULT_ATTENTION = ATTENTION_CUDNN;
#elif defined(FLASH_ATTENTION)
static const int DEFAULT_ATTENTION = ATTENTION_FLASH;
#else
static const int DEFAULT_ATTENTION = ATTENTION_MATERIALIZED;
#endif
static const char* const ATTENTION_NAMES[] = {"materialized (cuBLAS + softmax kernel)", "flash (attention.cuh)",
                                              "cuDNN (fused SDPA, attention_cudnn.cpp)"};
static const char* const ATTENTION_FLAGS[] = {"materialized", "flash", "cudnn"};  // --attention's names

// --attention NAME: ATTENTION_MATERIALIZED, ATTENTION_FLASH or ATTENTION_CUDNN (whether this build can run the
// last is checked where the model starts, as for the build's default)
static int parse_attention(const char* name) {
    for (int i = 0; i < (int)(sizeof(ATTENTION_FLAGS) / sizeof(ATTENTION_FLAGS[0])); i++)
        if (!strcmp(name, ATTENTION_FLAGS[i])) return i;
    fail("--attention expects materialized, flash or cudnn, got '%s'", name);
}

// ----------------------------------------------------------------------------------------------------------------
// encoder: h0[n, :] = wte[tok[n], :] + wpe[n % T, :]   (n = b * T + t)

// block per row n of h0, the row kernels' packs of channels (cuda_common.cuh)
template <int VALS>
__global__ void __launch_bounds__(MAX_ROW_THREADS)
    encoder_forward_kernel(floatX* h0, const int* tokens, const floatX* wte, const floatX* wpe, int T, int C) {
    int n = blockIdx.x;
    float v[VALS], p[VALS];
    load_row(v, wte + (size_t)tokens[n] * C, C);
    load_row(p, wpe + (size_t)(n % T) * C, C);
    for (int k = 0; k < VALS; k++) v[k] += p[k];
    store_row(h0 + (size_t)n * C, v, C);
}

static void encoder_forward(floatX* h0, const int* tokens, const floatX* wte, const floatX* wpe, int N, int T, int C) {
    with_row_vals(C, [&](auto vals) {
        encoder_forward_kernel<decltype(vals)::value><<<N, row_threads(C)>>>(h0, tokens, wte, wpe, T, C);
    });
    launchCheck();
}

// The wte gradient without atomics: the host groups the positions of the batch by token (a stable counting sort),
// and one thread per (token, channel) adds up that token's rows in position order. Packed into one int array:
// ids (U distinct tokens), starts (U + 1), rows (N): the positions of token ids[u] are rows[starts[u] .. starts[u+1]).
// count (V) is scratch; both vectors keep their storage from call to call. Returns U.
static int build_token_index(const int* tokens, int N, int V, std::vector<int>* count, std::vector<int>* packed) {
    std::vector<int>& next = *count;  // the count of each token, then where its next position goes
    next.assign(V, 0);
    for (int n = 0; n < N; n++) next[tokens[n]]++;
    int U = 0;
    for (int v = 0; v < V; v++) U += next[v] > 0;
    packed->resize(2 * (size_t)U + 1 + N);
    int *ids = packed->data(), *starts = ids + U, *rows = starts + U + 1;
    for (int v = 0, u = 0, pos = 0; v < V; v++) {
        if (!next[v]) continue;
        ids[u] = v;
        starts[u++] = pos;
        int c = next[v];
        next[v] = pos;
        pos += c;
    }
    starts[U] = N;
    for (int n = 0; n < N; n++) rows[next[tokens[n]]++] = n;
    return U;
}

// block (u, chunk of 256 channels): thread owns channel c of the u-th distinct token
__global__ void wte_backward_kernel(float* dwte, const floatX* dh0, const int* index, int U, int C) {
    const int *ids = index, *starts = index + U, *rows = index + 2 * U + 1;
    int u = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0.0f;
    for (int j = starts[u]; j < starts[u + 1]; j++) s += (float)dh0[(size_t)rows[j] * C + c];
    dwte[(size_t)ids[u] * C + c] += s;
}

// block (t, chunk of 256 channels): thread owns channel c of position t and adds up the B rows at t
__global__ void wpe_backward_kernel(float* dwpe, const floatX* dh0, int B, int T, int C) {
    int t = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0.0f;
    for (int b = 0; b < B; b++) s += (float)dh0[((size_t)b * T + t) * C + c];
    dwpe[(size_t)t * C + c] += s;
}

// index: the device copy of build_token_index's array, U distinct tokens
static void encoder_backward(float* dwte, float* dwpe, const floatX* dh0, const int* index, int U, int B, int T,
                             int C) {
    wte_backward_kernel<<<dim3(U, ceil_div(C, 256)), 256>>>(dwte, dh0, index, U, C);
    launchCheck();
    wpe_backward_kernel<<<dim3(T, ceil_div(C, 256)), 256>>>(dwpe, dh0, B, T, C);
    launchCheck();
}

// ----------------------------------------------------------------------------------------------------------------
// residual + LayerNorm, the boundary of Pre-Norm and Post-Norm: res = a + add;  ln = LN(res) (eps 1e-5).
// Pre:  x_b = x_{b-1} + z;  u_b = LN(x_b).       Post:  sum = x_{b-1} + z;  x_b = LN(sum).
// Caches mean and rstd per row; the backward re-reads res (x_b for pre, sum for post).

// block per row (blockIdx.x); thread t owns the channels row_channel(k). add and res may be null (no residual
// add, res not stored).
template <int VALS>
__global__ void __launch_bounds__(MAX_ROW_THREADS)
    residual_layernorm_forward_kernel(floatX* res, floatX* ln, float* mean, float* rstd, const floatX* a,
                                      const floatX* add, const floatX* w, const floatX* b, int C) {
    size_t off = (size_t)blockIdx.x * C;
    float r[VALS], out[VALS];
    load_row(r, a + off, C);
    if (add) {
        float z[VALS];
        load_row(z, add + off, C);
        for (int k = 0; k < VALS; k++) r[k] += z[k];
    }
    if (res) store_row_keep(res + off, r, C);  // LN(res) of the stored res, which is what the backward reads
    layernorm_row(out, r, w, b, C, mean + blockIdx.x, rstd + blockIdx.x);
    store_row(ln + off, out, C);
}

static void residual_layernorm_forward(floatX* res, floatX* ln, float* mean, float* rstd, const floatX* a,
                                       const floatX* add, const floatX* w, const floatX* b, int N, int C) {
    with_row_vals(C, [&](auto vals) {
        residual_layernorm_forward_kernel<decltype(vals)::value><<<N, row_threads(C)>>>(res, ln, mean, rstd, a, add,
                                                                                        w, b, C);
        launchCheck();
    });
}

// dinp = LN'(dout) (accumulate = 0) or dinp += LN'(dout) (accumulate = 1); dinp may be dout itself (each thread
// reads its elements before it writes them). Block per row, striding over rows by gridDim.x; the gain and shift
// gradients of the thread's channels collect in registers and leave as gpu.partials[block][2][C].
template <int VALS>
__global__ void __launch_bounds__(MAX_ROW_THREADS)
    layernorm_backward_kernel(floatX* dinp, const floatX* dout, const floatX* inp, const floatX* w,
                              const float* mean, const float* rstd, int N, int C, int accumulate, float* partials) {
    float dw[VALS], db[VALS];
    for (int k = 0; k < VALS; k++) dw[k] = db[k] = 0.0f;
    for (int row = blockIdx.x; row < N; row += gridDim.x) {
        size_t off = (size_t)row * C;
        float d[VALS], x[VALS], dx[VALS];
        load_row(d, dout + off, C);
        load_row(x, inp + off, C);
        if (accumulate) load_row(dx, dinp + off, C);
        else for (int k = 0; k < VALS; k++) dx[k] = 0.0f;
        layernorm_row_backward(dx, dw, db, d, x, w, mean[row], rstd[row], C);
        store_row(dinp + off, dx, C);
    }
    store_partials(partials, 2, 0, dw, C);
    store_partials(partials, 2, 1, db, C);
}

static void layernorm_backward(floatX* dinp, float* dw, float* db, const floatX* dout, const floatX* inp,
                               const floatX* w, const float* mean, const float* rstd, int N, int C, int accumulate) {
    with_row_vals(C, [&](auto vals) {
        auto kernel = layernorm_backward_kernel<decltype(vals)::value>;
        int threads = row_threads(C), grid = row_grid(kernel, threads, N);
        if ((size_t)grid * 2 * C > gpu.partials_floats) fail("internal: reduction scratch too small");
        kernel<<<grid, threads>>>(dinp, dout, inp, w, mean, rstd, N, C, accumulate, gpu.partials);
        launchCheck();
        GradTargets t = {{dw, db, nullptr, nullptr, nullptr, nullptr}};
        reduce_partials(t, 2, C, grid);
    });
}

// block per row: u = LN(x) again from the saved statistics (Pre-Norm's recomputation under -r 1), the row kernels'
// packs of channels
template <int VALS>
__global__ void __launch_bounds__(MAX_ROW_THREADS)
    layernorm_recompute_kernel(floatX* u, const floatX* x, const float* mean, const float* rstd, const floatX* w,
                               const floatX* b, int C) {
    size_t row = blockIdx.x, off = row * C;
    float v[VALS];
    load_row(v, x + off, C);
    for (int k = 0; k < VALS; k++) {
        int i = row_channel(k);
        if (i < C) v[k] = ln_apply(v[k], mean[row], rstd[row], (float)w[i], (float)b[i]);
    }
    store_row(u + off, v, C);
}

static void layernorm_recompute(floatX* u, const floatX* x, const float* mean, const float* rstd, const floatX* w,
                                const floatX* b, int N, int C) {
    with_row_vals(C, [&](auto vals) {
        layernorm_recompute_kernel<decltype(vals)::value><<<N, row_threads(C)>>>(u, x, mean, rstd, w, b, C);
    });
    launchCheck();
}

// ----------------------------------------------------------------------------------------------------------------
// matmul: out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC), weight stored as PyTorch's nn.Linear.
// cuBLAS is column-major: a row-major (R, K) matrix is a column-major (K, R) one, so out^T (OC, N) = W (C, OC)^T
// @ inp^T (C, N) is gemm(T, N, m = OC, n = N, k = C, W, lda = C, inp, ldb = C, out, ldc = OC).

// column-major C (m, n) = alpha * op(A) @ op(B) + beta * C, accumulated in float32 (TF32 with -f 1 in the fp32
// build). A and B are floatX; C is floatX (activations) or float (the weight gradients, float32 in both precisions:
// cuBLAS takes bf16 inputs with a float32 output, and so gradient accumulation never rounds to bf16).
template <typename TC>
static void gemm(cublasOperation_t opa, cublasOperation_t opb, int m, int n, int k, float alpha, const floatX* A,
                 int lda, const floatX* B, int ldb, float beta, TC* Cm, int ldc) {
    static_assert(std::is_same<TC, floatX>::value || std::is_same<TC, float>::value, "C is floatX or float");
    cudaDataType_t ctype = std::is_same<TC, float>::value ? CUDA_R_32F : CUBLAS_FLOATX;
    cublasCheck(cublasGemmEx(gpu.cublas, opa, opb, m, n, k, &alpha, A, CUBLAS_FLOATX, lda, B, CUBLAS_FLOATX, ldb,
                             &beta, Cm, ctype, ldc, gpu.compute, CUBLAS_GEMM_DEFAULT));
}

// the same for `batch` independent products, matrix i at A + i * sa, B + i * sb, C + i * sc
static void gemm_batched(cublasOperation_t opa, cublasOperation_t opb, int m, int n, int k, float alpha,
                         const floatX* A, int lda, long long sa, const floatX* B, int ldb, long long sb, float beta,
                         floatX* Cm, int ldc, long long sc, int batch) {
    cublasCheck(cublasGemmStridedBatchedEx(gpu.cublas, opa, opb, m, n, k, &alpha, A, CUBLAS_FLOATX, lda, sa, B,
                                           CUBLAS_FLOATX, ldb, sb, &beta, Cm, CUBLAS_FLOATX, ldc, sc, batch,
                                           gpu.compute, CUBLAS_GEMM_DEFAULT));
}

// The same column-major product with an epilogue applied to every result element before it is stored, on
// cuBLASLt (bf16 build; bf16 in and out, float32 accumulation):
//   EPILOGUE_BIAS           D = product + bias(row)
//   EPILOGUE_GELU_AUX_BIAS  aux = product + bias(row), the GELU's input, kept; D = gelu(aux) (tanh form)
//   EPILOGUE_DGELU          D = product * gelu'(aux)
// aux, when given, has D's shape (m, n) and leading dimension m. Returns false, having done nothing, where the caller
// must run the plain product and a separate kernel instead: cuBLASLt is not used (fp32, -DNO_CUBLASLT), or switched
// off (TRAIN_GPT2_EPILOGUES=0), a matrix or vector does not start 16-byte aligned (its epilogues load 16 bytes at a
// time; every GPT-2 shape is aligned), or cuBLASLt has no usable algorithm for the product: its heuristic fails with
// any status, finds none, or the one it finds fails to run. That last case is said once per epilogue on stderr (a
// missing cuBLASLt kernel costs speed, never the run); the plain path computes the same function.
enum Epilogue { EPILOGUE_BIAS, EPILOGUE_GELU_AUX_BIAS, EPILOGUE_DGELU };
#if USE_CUBLASLT
static const char* const EPILOGUE_NAMES[] = {"BIAS", "GELU_AUX_BIAS", "DGELU"};

// the one warning a run gives per epilogue whose product took the plain path because cuBLASLt had no usable
// algorithm (why: what cuBLASLt said)
static void warn_epilogue_fallback(Epilogue epilogue, int m, int n, int k, const char* why) {
    static bool said[3];
    gpu.lt_fallbacks++;
    if (said[epilogue]) return;
    said[epilogue] = true;
    fprintf(stderr, "warning: cuBLASLt has no usable algorithm for the %s epilogue of a (%d x %d x %d) product (%s): "
            "that product runs as a plain cuBLAS product and the separate bias/GELU kernels, the same function, "
            "slower (said once per epilogue; TRAIN_GPT2_EPILOGUES=0 turns the epilogues off)\n",
            EPILOGUE_NAMES[epilogue], m, n, k, why);
}

// the largest power of two up to 256 that divides the address (0: null)
static uint32_t alignment_of(const void* p) {
    uint32_t a = 256;
    while (p && a > 1 && (uintptr_t)p % a) a /= 2;
    return p ? a : 0;
}

static bool gemm_epilogue(cublasOperation_t opa, cublasOperation_t opb, int m, int n, int k, const floatX* A, int lda,
                          const floatX* B, int ldb, floatX* D, Epilogue epilogue, const floatX* bias,
                          const floatX* aux) {
    if (gpu.no_epilogues) return false;
    for (const void* p : {(const void*)A, (const void*)B, (const void*)D, (const void*)bias, (const void*)aux})
        if (p && alignment_of(p) < 16) return false;
    if (aux && m % 8) return false;  // the aux leading dimension must be a multiple of 8
    cublasLtEpilogue_t lt_epilogue = epilogue == EPILOGUE_BIAS            ? CUBLASLT_EPILOGUE_BIAS
                                     : epilogue == EPILOGUE_GELU_AUX_BIAS ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                                                          : CUBLASLT_EPILOGUE_DGELU;
    cublasLtMatmulDesc_t desc;
    cublasCheck(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &lt_epilogue, sizeof(lt_epilogue)));
    if (bias) cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    if (aux) {
        int64_t aux_ld = m;
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
        cublasCheck(
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
    }
    cublasLtMatrixLayout_t la, lb, ld;
    cublasCheck(cublasLtMatrixLayoutCreate(&la, CUBLAS_FLOATX, opa == CUBLAS_OP_N ? m : k, opa == CUBLAS_OP_N ? k : m,
                                           lda));
    cublasCheck(cublasLtMatrixLayoutCreate(&lb, CUBLAS_FLOATX, opb == CUBLAS_OP_N ? k : n, opb == CUBLAS_OP_N ? n : k,
                                           ldb));
    cublasCheck(cublasLtMatrixLayoutCreate(&ld, CUBLAS_FLOATX, m, n, m));
    // the heuristic assumes 256-byte aligned matrices unless told otherwise: tell it what they are
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                     &gpu.lt_workspace_bytes, sizeof(gpu.lt_workspace_bytes)));
    uint32_t align_a = alignment_of(A), align_b = alignment_of(B), align_d = alignment_of(D);
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                     sizeof(align_a)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                     sizeof(align_b)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d,
                                                     sizeof(align_d)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d,
                                                     sizeof(align_d)));
    // No usable algorithm (whatever status the heuristic returns, none found, or the one found fails to launch):
    // the caller takes the plain product and the separate kernel instead. D is written whole by either path (beta
    // 0), so a failed attempt leaves nothing behind; a launch error it left is cleared (ours are checked at each
    // launch, so a pending one here is cuBLASLt's).
    cublasLtMatmulHeuristicResult_t heuristic;
    int found = 0;
    cublasStatus_t status =
        cublasLtMatmulAlgoGetHeuristic(gpu.cublaslt, desc, la, lb, ld, ld, pref, 1, &heuristic, &found);
    char why[200] = "";  // empty: the product ran with its epilogue
    if (status != CUBLAS_STATUS_SUCCESS) {
        snprintf(why, sizeof(why), "cublasLtMatmulAlgoGetHeuristic returned %s, status %d",
                 cublasGetStatusString(status), (int)status);
    } else if (found < 1) {
        snprintf(why, sizeof(why), "cublasLtMatmulAlgoGetHeuristic found no algorithm");
    } else if (heuristic.state != CUBLAS_STATUS_SUCCESS) {
        snprintf(why, sizeof(why), "the algorithm cublasLtMatmulAlgoGetHeuristic found has state %s, status %d",
                 cublasGetStatusString(heuristic.state), (int)heuristic.state);
    } else {
        float alpha = 1.0f, beta = 0.0f;
        status = cublasLtMatmul(gpu.cublaslt, desc, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &heuristic.algo,
                                gpu.lt_workspace, gpu.lt_workspace_bytes, 0);
        if (status != CUBLAS_STATUS_SUCCESS) {
            cudaGetLastError();
            snprintf(why, sizeof(why), "cublasLtMatmul returned %s, status %d", cublasGetStatusString(status),
                     (int)status);
        }
    }
    bool usable = !why[0];
    if (usable) gpu.lt_products++;
    else warn_epilogue_fallback(epilogue, m, n, k, why);
    cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
    cublasCheck(cublasLtMatrixLayoutDestroy(la));
    cublasCheck(cublasLtMatrixLayoutDestroy(lb));
    cublasCheck(cublasLtMatrixLayoutDestroy(ld));
    cublasCheck(cublasLtMatmulDescDestroy(desc));
    return usable;
}
#else
static bool gemm_epilogue(cublasOperation_t, cublasOperation_t, int, int, int, const floatX*, int, const floatX*, int,
                          floatX*, Epilogue, const floatX*, const floatX*) {
    return false;
}
#endif

// Elementwise kernels over (N, OC) arrays: thread per Pack<P> of neighbouring elements of a row (cuda_common.cuh),
// P = ROW_PACK (16 bytes: one load or store) when OC is a multiple of it and every pointer is 16-byte aligned, else
// 1; the bias index is one modulo a pack.
static const int ELEMENTWISE_THREADS = 256;
static int elementwise_grid(size_t n) { return ceil_div((long long)n, ELEMENTWISE_THREADS); }

// whether a kernel may move 16-byte packs: rows of whole packs, every pointer 16-byte aligned
static bool can_pack(int row_length, std::initializer_list<const void*> pointers) {
    bool packed = row_length % ROW_PACK == 0;
    for (const void* p : pointers) packed = packed && (uintptr_t)p % 16 == 0;
    return packed;
}

// Calls launch(grid, packs, std::integral_constant<int, P>()) for n elements in rows of OC
template <typename Launch>
static void launch_packs(size_t n, int OC, std::initializer_list<const void*> pointers, Launch launch) {
    bool packed = can_pack(OC, pointers);
    size_t packs = packed ? n / ROW_PACK : n;
    if (packed) launch(elementwise_grid(packs), packs, std::integral_constant<int, ROW_PACK>());
    else launch(elementwise_grid(packs), packs, std::integral_constant<int, 1>());
    launchCheck();
}

// out (N, OC) += bias
template <int P>
__global__ void add_bias_kernel(floatX* out, const floatX* bias, size_t packs, int OC) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= packs) return;
    Pack<P>* o = (Pack<P>*)out + idx;
    Pack<P> x = *o, b = *(const Pack<P>*)(bias + idx * P % OC);
    for (int j = 0; j < P; j++) x.v[j] = (floatX)((float)x.v[j] + (float)b.v[j]);
    *o = x;
}

// bias may be null. (The qkv and fc products pass null and their consumers, the attention permute and the GELU,
// add the bias on their way through; the projections use add_bias.)
static void matmul_forward(floatX* out, const floatX* inp, const floatX* weight, const floatX* bias, int N, int C,
                           int OC) {
    if (bias && gemm_epilogue(CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, weight, C, inp, C, out, EPILOGUE_BIAS, bias, nullptr))
        return;  // the bias in the product's epilogue
    gemm(CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, 1.0f, weight, C, inp, C, 0.0f, out, OC);
    if (bias) {
        launch_packs((size_t)N * OC, OC, {out, bias}, [&](int grid, size_t packs, auto p) {
            add_bias_kernel<decltype(p)::value><<<grid, ELEMENTWISE_THREADS>>>(out, bias, packs, OC);
        });
    }
}

// Bias gradient, first stage: partials[chunk][c] = sum of dout[r][c] over the rows r of the chunk.
// Block (32 columns, chunk): threadIdx.x owns column c, the 32 threadIdx.y stride over the chunk's rows (a warp
// reads 32 consecutive columns of one row), then thread y = 0 adds the 32 sums in order.
__global__ void column_sum_partials_kernel(float* partials, const floatX* dout, int N, int OC, int rows_per_chunk) {
    __shared__ float sums[32][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    int r0 = blockIdx.y * rows_per_chunk, r1 = min(N, r0 + rows_per_chunk);
    float s = 0.0f;
    if (c < OC)
        for (int r = r0 + threadIdx.y; r < r1; r += 32) s += (float)dout[(size_t)r * OC + c];
    sums[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < OC) {
        float t = 0.0f;
        for (int j = 0; j < 32; j++) t += sums[j][threadIdx.x];
        partials[(size_t)blockIdx.y * OC + c] = t;
    }
}

static const int BIAS_MAX_CHUNKS = 32;

// dbias (OC) += sum over the N rows of dout (N, OC)
static void bias_backward(float* dbias, const floatX* dout, int N, int OC) {
    int chunks = std::max(1, std::min(ceil_div(N, 256), BIAS_MAX_CHUNKS));
    int rows = ceil_div(N, chunks);
    if ((size_t)chunks * OC > gpu.partials_floats) fail("internal: reduction scratch too small");
    column_sum_partials_kernel<<<dim3(ceil_div(OC, 32), chunks), dim3(32, 32)>>>(gpu.partials, dout, N, OC, rows);
    launchCheck();
    GradTargets t = {{dbias, nullptr, nullptr, nullptr, nullptr, nullptr}};
    reduce_partials(t, 1, OC, chunks);
}

// dinp = dout @ weight (dinp_beta 0) or dinp += dout @ weight (dinp_beta 1);  dweight += dout^T @ inp;
// dbias += column sums of dout. Column-major: dinp^T (C, N) = W^T (C, OC) @ dout^T (OC, N), and W, dout as stored
// already are W^T and dout^T: gemm(N, N, C, N, OC). dweight^T (C, OC) += inp^T (C, N) @ dout (N, OC): inp as stored
// is inp^T, dout needs a transpose: gemm(N, T, C, OC, N).
static void matmul_backward_weights(float* dweight, float* dbias, const floatX* dout, const floatX* inp, int N, int C,
                                    int OC) {
    gemm(CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, 1.0f, inp, C, dout, OC, 1.0f, dweight, C);
    if (dbias) bias_backward(dbias, dout, N, OC);
}

static void matmul_backward(floatX* dinp, float* dweight, float* dbias, const floatX* dout, const floatX* inp,
                            const floatX* weight, int N, int C, int OC, float dinp_beta) {
    gemm(CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, 1.0f, weight, C, dout, OC, dinp_beta, dinp, C);
    matmul_backward_weights(dweight, dbias, dout, inp, N, C, OC);
}

// ----------------------------------------------------------------------------------------------------------------
// attention: qkv (B, T, 3C) holds q, k, v; NH heads of hs = C/NH channels. The T x T scores are materialized:
// permute into (B, NH, T, hs) per head, att = causal softmax(q k^T / sqrt(hs)) by a batched product and a softmax
// kernel, out = att @ v by a batched product, unpermute back to (B, T, C). att is kept for the backward pass.

// The layout changes around the attention, between rows of C = NH hs channels, (B, T, C), and head matrices,
// (B, NH, T, hs). Thread per pack of P neighbouring channels of one head row (b, h, t): grid (packs of the head's
// T x hs matrix, NH, B), so no thread divides a 64-bit index. P = ROW_PACK (16 bytes: one load or store) when hs is a
// multiple of it and every pointer is 16-byte aligned, else 1.
// this thread's head row t and first channel i; false past the end of the head matrix
template <int P>
__device__ inline bool head_pack_index(int T, int hs, int* t, int* i) {
    int n = blockIdx.x * blockDim.x + threadIdx.x, per_row = hs / P;
    if (n >= T * per_row) return false;
    *t = n / per_row;
    *i = n % per_row * P;
    return true;
}
// where the pack starts in the head matrix (B, NH, T, hs) and in the rows (B, T, NH, hs) = (B, T, C)
__device__ inline size_t head_offset(int T, int NH, int hs, int t, int i) {
    return (((size_t)blockIdx.z * NH + blockIdx.y) * T + t) * hs + i;
}
__device__ inline size_t row_offset(int T, int NH, int hs, int t, int i) {
    return (((size_t)blockIdx.z * T + t) * NH + blockIdx.y) * hs + i;
}
template <int P>
__device__ inline void copy_pack(floatX* dst, const floatX* src) {
    *(Pack<P>*)dst = *(const Pack<P>*)src;
}

// q, k, v (each B, NH, T, hs) from qkv (B, T, 3, NH, hs), plus the qkv bias (the product above left it out; null:
// qkv has it already, as the QKV norm's output does)
template <int P>
__global__ void permute_qkv_kernel(floatX* q, floatX* k, floatX* v, const floatX* qkv, const floatX* bias, int T,
                                   int NH, int hs) {
    int t, i;
    if (!head_pack_index<P>(T, hs, &t, &i)) return;
    int C = NH * hs, c = blockIdx.y * hs + i;
    size_t dst = head_offset(T, NH, hs, t, i), src = ((size_t)blockIdx.z * T + t) * 3 * C + c;
    floatX* out[3] = {q, k, v};
    for (int part = 0; part < 3; part++) {
        Pack<P> x = *(const Pack<P>*)(qkv + src + part * C);
        if (bias) {
            Pack<P> b = *(const Pack<P>*)(bias + part * C + c);
            for (int j = 0; j < P; j++) x.v[j] = (floatX)((float)x.v[j] + (float)b.v[j]);
        }
        *(Pack<P>*)(out[part] + dst) = x;
    }
}

// dqkv (B, T, 3C) <- dq, dk, dv (each B, NH, T, hs)
template <int P>
__global__ void permute_qkv_backward_kernel(floatX* dqkv, const floatX* dq, const floatX* dk, const floatX* dv, int T,
                                            int NH, int hs) {
    int t, i;
    if (!head_pack_index<P>(T, hs, &t, &i)) return;
    int C = NH * hs;
    size_t src = head_offset(T, NH, hs, t, i), dst = ((size_t)blockIdx.z * T + t) * 3 * C + blockIdx.y * hs + i;
    copy_pack<P>(dqkv + dst, dq + src);
    copy_pack<P>(dqkv + dst + C, dk + src);
    copy_pack<P>(dqkv + dst + 2 * C, dv + src);
}

// out (B, T, C) <- inp (B, NH, T, hs)
template <int P>
__global__ void unpermute_kernel(floatX* out, const floatX* inp, int T, int NH, int hs) {
    int t, i;
    if (head_pack_index<P>(T, hs, &t, &i))
        copy_pack<P>(out + row_offset(T, NH, hs, t, i), inp + head_offset(T, NH, hs, t, i));
}

// dinp (B, NH, T, hs) <- dout (B, T, C)
template <int P>
__global__ void unpermute_backward_kernel(floatX* dinp, const floatX* dout, int T, int NH, int hs) {
    int t, i;
    if (head_pack_index<P>(T, hs, &t, &i))
        copy_pack<P>(dinp + head_offset(T, NH, hs, t, i), dout + row_offset(T, NH, hs, t, i));
}

// Calls launch(grid, std::integral_constant<int, P>()) with the pack size that the head size and pointers allow
template <typename Launch>
static void launch_head_packs(int B, int T, int NH, int hs, std::initializer_list<const void*> pointers,
                              Launch launch) {
    bool packed = can_pack(hs, pointers);
    int P = packed ? ROW_PACK : 1;
    dim3 grid(ceil_div((long long)T * hs / P, ELEMENTWISE_THREADS), NH, B);
    if (packed) launch(grid, std::integral_constant<int, ROW_PACK>());
    else launch(grid, std::integral_constant<int, 1>());
    launchCheck();
}

// The softmax kernels give a row of att to a warp; lane l owns the packs of ROW_PACK neighbouring keys (16 bytes:
// 8 in bf16, 4 in fp32) that start at j0 = l ROW_PACK, + 32 ROW_PACK, ... and moves each with one 16-byte load or
// store when T is a multiple of ROW_PACK (the rows then start 16-byte aligned), else key by key (load_pack and
// store_pack, cuda_common.cuh).

// Causal softmax in place over the rows of att (B, NH, T, T): row r is query t = r % T, which sees keys 0..t;
// the masked keys t+1..T-1 get exactly 0 (the product att @ v runs over the whole row). One pass over keys 0..t
// for the max and the sum of exponentials (each lane keeps its running max and rescales its sum when the max
// grows, as the classifier does), then one pass that writes the probabilities.
__global__ void softmax_causal_forward_kernel(floatX* att, int rows, int T) {
    int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (r >= rows) return;  // the whole warp leaves together
    int t = r % T;
    bool packed = T % ROW_PACK == 0;
    floatX* p = att + (size_t)r * T;
    float maxv = -INFINITY, sum = 0.0f;
    for (int j0 = lane * ROW_PACK; j0 <= t; j0 += 32 * ROW_PACK) {
        float v[ROW_PACK], m = maxv;
        load_pack(v, p, j0, t + 1, packed, -INFINITY);  // key j0 <= t: m is finite
        for (int k = 0; k < ROW_PACK; k++) m = fmaxf(m, v[k]);
        sum *= expf(maxv - m);
        for (int k = 0; k < ROW_PACK; k++) sum += expf(v[k] - m);
        maxv = m;
    }
    float row_max = warp_max(maxv);  // finite: key 0 is in lane 0's first pack
    sum = warp_sum(maxv == -INFINITY ? 0.0f : sum * expf(maxv - row_max));
    for (int j0 = lane * ROW_PACK; j0 < T; j0 += 32 * ROW_PACK) {
        float v[ROW_PACK];
        load_pack(v, p, j0, t + 1, packed, -INFINITY);  // masked keys: exp(-inf) = 0
        for (int k = 0; k < ROW_PACK; k++) v[k] = expf(v[k] - row_max) / sum;
        store_pack(p, v, j0, T, packed);
    }
}

// dpreatt = att * (datt - sum_j att_j datt_j) over keys 0..t, 0 beyond; in place over datt. Warp per row, lanes
// own packs of keys as above.
__global__ void softmax_causal_backward_kernel(floatX* datt, const floatX* att, int rows, int T) {
    int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (r >= rows) return;
    int t = r % T;
    bool packed = T % ROW_PACK == 0;
    floatX* d = datt + (size_t)r * T;
    const floatX* a = att + (size_t)r * T;
    float dot = 0.0f;
    for (int j0 = lane * ROW_PACK; j0 <= t; j0 += 32 * ROW_PACK) {
        float av[ROW_PACK], dv[ROW_PACK];
        load_pack(av, a, j0, t + 1, packed, 0.0f);
        load_pack(dv, d, j0, t + 1, packed, 0.0f);
        for (int k = 0; k < ROW_PACK; k++) dot += av[k] * dv[k];
    }
    dot = warp_sum(dot);
    for (int j0 = lane * ROW_PACK; j0 < T; j0 += 32 * ROW_PACK) {
        float av[ROW_PACK], dv[ROW_PACK];
        load_pack(av, a, j0, t + 1, packed, 0.0f);
        load_pack(dv, d, j0, t + 1, packed, 0.0f);
        for (int k = 0; k < ROW_PACK; k++) dv[k] = j0 + k <= t ? av[k] * (dv[k] - dot) : 0.0f;
        store_pack(d, dv, j0, T, packed);
    }
}

static void permute_qkv(floatX* q, floatX* k, floatX* v, const floatX* qkv, const floatX* bias, int B, int T, int NH,
                        int hs) {
    launch_head_packs(B, T, NH, hs, {q, k, v, qkv, bias}, [&](dim3 grid, auto p) {
        permute_qkv_kernel<decltype(p)::value><<<grid, ELEMENTWISE_THREADS>>>(q, k, v, qkv, bias, T, NH, hs);
    });
}

static void permute_qkv_backward(floatX* dqkv, const floatX* dq, const floatX* dk, const floatX* dv, int B, int T,
                                 int NH, int hs) {
    launch_head_packs(B, T, NH, hs, {dqkv, dq, dk, dv}, [&](dim3 grid, auto p) {
        permute_qkv_backward_kernel<decltype(p)::value><<<grid, ELEMENTWISE_THREADS>>>(dqkv, dq, dk, dv, T, NH, hs);
    });
}

// out (B, T, C) = attention(qkv + bias); q, k, v (each B, NH, T, hs) and att (B, NH, T, T) are kept;
// vaccum (B, NH, T, hs) is scratch
static void attention_forward(floatX* out, floatX* q, floatX* k, floatX* v, floatX* att, floatX* vaccum,
                              const floatX* qkv, const floatX* bias, int B, int T, int C, int NH) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    permute_qkv(q, k, v, qkv, bias, B, T, NH, hs);
    // preatt[t][t2] = scale * q_t . k_t2: column-major (T keys, T queries) = k^T q per head
    gemm_batched(CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, scale, k, hs, (long long)T * hs, q, hs, (long long)T * hs, 0.0f,
                 att, T, (long long)T * T, B * NH);
    int rows = B * NH * T;
    softmax_causal_forward_kernel<<<ceil_div(rows, 8), 256>>>(att, rows, T);
    launchCheck();
    // vaccum[t][i] = sum_t2 att[t][t2] v[t2][i]: column-major (hs, T) = v (hs, T) @ att^T-as-stored (T, T)
    gemm_batched(CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, 1.0f, v, hs, (long long)T * hs, att, T, (long long)T * T, 0.0f,
                 vaccum, hs, (long long)T * hs, B * NH);
    launch_head_packs(B, T, NH, hs, {out, vaccum}, [&](dim3 grid, auto p) {
        unpermute_kernel<decltype(p)::value><<<grid, ELEMENTWISE_THREADS>>>(out, vaccum, T, NH, hs);
    });
}

// From dout (B, T, C) to dqkv (B, T, 3C) (overwritten). Scratch: dvaccum (B, NH, T, hs), datt (B, NH, T, T),
// dq, dk, dv (each B, NH, T, hs).
static void attention_backward(floatX* dqkv, floatX* dq, floatX* dk, floatX* dv, floatX* datt, floatX* dvaccum,
                               const floatX* dout, const floatX* q, const floatX* k, const floatX* v,
                               const floatX* att, int B, int T, int C, int NH) {
    int hs = C / NH;
    long long sh = (long long)T * hs, st = (long long)T * T;
    float scale = 1.0f / sqrtf((float)hs);
    launch_head_packs(B, T, NH, hs, {dvaccum, dout}, [&](dim3 grid, auto p) {
        unpermute_backward_kernel<decltype(p)::value><<<grid, ELEMENTWISE_THREADS>>>(dvaccum, dout, T, NH, hs);
    });
    // through vaccum = att @ v:  datt[t][t2] = dvaccum_t . v_t2;  dv[t2] = sum_t att[t][t2] dvaccum_t
    gemm_batched(CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, 1.0f, v, hs, sh, dvaccum, hs, sh, 0.0f, datt, T, st, B * NH);
    gemm_batched(CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f, dvaccum, hs, sh, att, T, st, 0.0f, dv, hs, sh, B * NH);
    // through the softmax (datt becomes dpreatt)
    int rows = B * NH * T;
    softmax_causal_backward_kernel<<<ceil_div(rows, 8), 256>>>(datt, att, rows, T);
    launchCheck();
    // through preatt = scale * q k^T:  dq[t] = scale * sum_t2 dpre[t][t2] k_t2;  dk[t2] = scale * sum_t dpre[t][t2] q_t
    gemm_batched(CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, scale, k, hs, sh, datt, T, st, 0.0f, dq, hs, sh, B * NH);
    gemm_batched(CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, scale, q, hs, sh, datt, T, st, 0.0f, dk, hs, sh, B * NH);
    permute_qkv_backward(dqkv, dq, dk, dv, B, T, NH, hs);
}

// ----------------------------------------------------------------------------------------------------------------
// QKV-norm (HybridNorm's attention; the layouts whose row in host/layouts.h says qkv_norm): each of q, k and v is
// LayerNorm-ed over the head dimension, per token and head, with gains and shifts of hs channels per block, shared
// by the heads (ln_q, ln_k, ln_v; eps 1e-5):
//
//     qkvn[n, p, h, :] = LN_p(qkv[n, p, h, :])        p = q, k, v;  qkv = u qkvw^T + qkvb  (B, T, 3, NH, hs)
//
// qkvn has the product's own layout (B, T, 3C), so every attention reads it unchanged (materialized and flash
// through the permute, with no bias to add; cuDNN straight from the rows). Kept for the backward pass: qkv with its
// bias (acts.qkv_in) and a mean and an rstd per (token, part, head) (acts.qkv_mean, qkv_rstd); qkvn itself only as
// the attention keeps it (acts.qkvr), and under -r 1 not at all: the backward pass recomputes it from the two.
// Backward, per row: dqkv = LN_p'(dqkvn) (the LayerNorm's backward over hs channels, in place), and the gains' and
// shifts' gradients summed over the tokens and the heads.
//
// A row here is hs channels (a head of one of q, k, v), viewed as row r of qkv read as (B T 3 NH, hs): r = (n 3 + p)
// NH + h. Warp per row; lane l owns channels l, l + 32, ... (at most QKV_NORM_DIMS of them) in registers.
static const int QKV_NORM_MAX_HEAD_SIZE = 256, QKV_NORM_DIMS = QKV_NORM_MAX_HEAD_SIZE / 32;
static const int QKV_NORM_WARPS = 8;  // a block's warps

struct QKVNorm {  // the gains and shifts of ln_q, ln_k, ln_v of one block (hs each)
    const floatX* w[3];
    const floatX* b[3];
};

// qkvn = LN_p(qkv) row by row, warp per row; the statistics computed and stored, or (recompute = 1, the backward
// pass under -r 1) read back from the forward pass
__global__ void qkv_norm_forward_kernel(floatX* qkvn, float* mean, float* rstd, const floatX* qkv, QKVNorm ln,
                                        size_t rows, int NH, int hs, int recompute) {
    size_t r = (size_t)blockIdx.x * QKV_NORM_WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (r >= rows) return;  // the whole warp leaves together
    int p = (int)(r / NH % 3);
    const floatX* in = qkv + r * hs;
    // part p's gain and shift, chosen without indexing the parameter struct at run time (which would copy it to local
    // memory)
    const floatX* w = p == 0 ? ln.w[0] : p == 1 ? ln.w[1] : ln.w[2];
    const floatX* b = p == 0 ? ln.b[0] : p == 1 ? ln.b[1] : ln.b[2];
    float v[QKV_NORM_DIMS];
    #pragma unroll
    for (int e = 0; e < QKV_NORM_DIMS; e++) {
        int d = lane + 32 * e;
        v[e] = d < hs ? (float)in[d] : 0.0f;
    }
    float m, s;
    if (recompute) {
        m = mean[r];
        s = rstd[r];
    } else {  // mean, then the variance about it (as layernorm_row)
        float sum = 0.0f, var = 0.0f;
        #pragma unroll
        for (int e = 0; e < QKV_NORM_DIMS; e++) sum += v[e];
        m = warp_sum(sum) / hs;
        #pragma unroll
        for (int e = 0; e < QKV_NORM_DIMS; e++)
            if (lane + 32 * e < hs) var += (v[e] - m) * (v[e] - m);
        s = 1.0f / sqrtf(warp_sum(var) / hs + 1e-5f);
        if (lane == 0) {
            mean[r] = m;
            rstd[r] = s;
        }
    }
    #pragma unroll
    for (int e = 0; e < QKV_NORM_DIMS; e++) {
        int d = lane + 32 * e;
        if (d < hs) qkvn[r * hs + d] = (floatX)ln_apply(v[e], m, s, (float)w[d], (float)b[d]);
    }
}

// dqkv = LN_p'(dqkv) in place (qkv, mean, rstd: the forward's input and statistics). Grid (warps' blocks, part p):
// the warps of part p stride over its N NH rows, each lane summing the gain and shift gradients of its channels in
// registers; warp w of part p leaves them as partials[w][2p, 2p + 1][hs] (reduce_partials adds them up in order).
__global__ void qkv_norm_backward_kernel(floatX* dqkv, const floatX* qkv, const float* mean, const float* rstd,
                                         QKVNorm ln, size_t heads, int NH, int hs, float* partials) {
    int p = blockIdx.y, lane = threadIdx.x % 32;
    int warp = blockIdx.x * QKV_NORM_WARPS + threadIdx.x / 32, warps = gridDim.x * QKV_NORM_WARPS;
    const floatX* w = p == 0 ? ln.w[0] : p == 1 ? ln.w[1] : ln.w[2];  // (as in the forward kernel)
    float dw[QKV_NORM_DIMS], db[QKV_NORM_DIMS];
    #pragma unroll
    for (int e = 0; e < QKV_NORM_DIMS; e++) dw[e] = db[e] = 0.0f;
    for (size_t j = warp; j < heads; j += warps) {  // j = n NH + h: token n, head h of part p
        size_t r = (j / NH * 3 + p) * NH + j % NH;
        float xhat[QKV_NORM_DIMS], dout[QKV_NORM_DIMS], s[2] = {0.0f, 0.0f};
        #pragma unroll
        for (int e = 0; e < QKV_NORM_DIMS; e++) {
            int d = lane + 32 * e;
            xhat[e] = d < hs ? ((float)qkv[r * hs + d] - mean[r]) * rstd[r] : 0.0f;
            dout[e] = d < hs ? (float)dqkv[r * hs + d] : 0.0f;
            float g = d < hs ? (float)w[d] * dout[e] : 0.0f;
            s[0] += g;
            s[1] += g * xhat[e];
        }
        float gmean = warp_sum(s[0]) / hs, gxmean = warp_sum(s[1]) / hs;
        #pragma unroll
        for (int e = 0; e < QKV_NORM_DIMS; e++) {
            int d = lane + 32 * e;
            if (d >= hs) continue;
            dqkv[r * hs + d] = (floatX)(rstd[r] * ((float)w[d] * dout[e] - gmean - xhat[e] * gxmean));
            dw[e] += xhat[e] * dout[e];
            db[e] += dout[e];
        }
    }
    float* out = partials + ((size_t)warp * 6 + 2 * p) * hs;  // partials[warp][2p], then [2p + 1]
    #pragma unroll
    for (int e = 0; e < QKV_NORM_DIMS; e++) {
        int d = lane + 32 * e;
        if (d < hs) {
            out[d] = dw[e];
            out[hs + d] = db[e];
        }
    }
}

// qkvn (N, 3C) = LN_q, LN_k, LN_v of qkv (N, 3C), per head; mean and rstd (N, 3, NH) written, or read (recompute)
static void qkv_norm_forward(floatX* qkvn, float* mean, float* rstd, const floatX* qkv, const QKVNorm& ln, int N,
                             int NH, int hs, int recompute) {
    size_t rows = (size_t)N * 3 * NH;
    qkv_norm_forward_kernel<<<ceil_div(rows, QKV_NORM_WARPS), QKV_NORM_WARPS * 32>>>(qkvn, mean, rstd, qkv, ln, rows,
                                                                                     NH, hs, recompute);
    launchCheck();
}

// dqkv = LN'(dqkv) in place; dparams: the gradients of the gain and shift of ln_q, ln_k, ln_v, in that order (+=)
static void qkv_norm_backward(floatX* dqkv, const GradTargets& dparams, const floatX* qkv, const float* mean,
                              const float* rstd, const QKVNorm& ln, int N, int NH, int hs) {
    size_t heads = (size_t)N * NH;
    int blocks = std::max(1, std::min(ceil_div(heads, QKV_NORM_WARPS), gpu.sms));
    int warps = blocks * QKV_NORM_WARPS;
    if ((size_t)warps * 6 * hs > gpu.partials_floats) fail("internal: reduction scratch too small");
    qkv_norm_backward_kernel<<<dim3(blocks, 3), QKV_NORM_WARPS * 32>>>(dqkv, qkv, mean, rstd, ln, heads, NH, hs,
                                                                       gpu.partials);
    launchCheck();
    reduce_partials(dparams, 6, hs, warps);
}

// The cuDNN attention (attention_cudnn.cpp; the layouts are in attention_cudnn.h): out (B, T, C) and lse from the
// qkv product's rows qkv (B, T, 3C), bias added, and back to dqkv (B, T, 3C). No permutes and no scratch: cuDNN
// reads and writes these rows with strides. Only a bf16 build with ENABLE_CUDNN has it; check_attention keeps any
// other build from getting here.
static void attention_forward_cudnn(floatX* out, float* lse, const floatX* qkv, int B, int T, int NH, int hs) {
#if HAVE_CUDNN_ATTENTION
    cudnn_attention_forward(out, lse, qkv, B, T, NH, hs);
#else
    (void)out, (void)lse, (void)qkv, (void)B, (void)T, (void)NH, (void)hs;
    fail("internal: this build has no cuDNN attention");
#endif
}

static void attention_backward_cudnn(floatX* dqkv, const floatX* dout, const floatX* qkv, const floatX* out,
                                     const float* lse, int B, int T, int NH, int hs) {
#if HAVE_CUDNN_ATTENTION
    cudnn_attention_backward(dqkv, dout, qkv, out, lse, B, T, NH, hs);
#else
    (void)dqkv, (void)dout, (void)qkv, (void)out, (void)lse, (void)B, (void)T, (void)NH, (void)hs;
    fail("internal: this build has no cuDNN attention");
#endif
}

// One error line and exit 1 unless this build can run `attention` at head size hs: flash takes head sizes up to
// FLASH_MAX_HEAD_SIZE, cuDNN multiples of 8, and only where it is built in.
static void check_attention(int attention, int hs) {
    if (attention == ATTENTION_FLASH) flash_check_head_size(hs);
    if (attention != ATTENTION_CUDNN) return;
#if HAVE_CUDNN_ATTENTION
    cudnn_attention_check_head_size(hs);
#else
    if (FLOATX_IS_FLOAT)
        fail("the cuDNN attention needs the bf16 build (cuDNN's fused attention takes bf16 or fp16, not float32): "
             "make train_gpt2cu USE_CUDNN=1 (PRECISION=BF16)");
    fail("this build has no cuDNN attention: build with make USE_CUDNN=1 (see docs/cuda.md)");
#endif
}

// ----------------------------------------------------------------------------------------------------------------
// GELU, tanh approximation: gelu(x) = x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))

#define GELU_K ((float)0.79788456080286535588)  // sqrt(2/pi), rounded to float as in the CPU reference

__device__ inline float gelu(float x) { return 0.5f * x * (1.0f + tanhf(GELU_K * (x + 0.044715f * x * x * x))); }

// the derivative of gelu at x
__device__ inline float gelu_derivative(float x) {
    float th = tanhf(GELU_K * (x + 0.044715f * x * x * x));
    float sech2 = 1.0f - th * th;
    float du = GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * du;
}

// thread per pack (see launch_packs): fch += bias (kept: the backward reads it), fch_gelu = gelu(fch) of the stored
// fch (so that a recomputation from fch gives the same numbers)
template <int P>
__global__ void bias_gelu_forward_kernel(floatX* fch_gelu, floatX* fch, const floatX* bias, size_t packs, int OC) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= packs) return;
    Pack<P> x = ((Pack<P>*)fch)[idx], b = *(const Pack<P>*)(bias + idx * P % OC), g;
    for (int j = 0; j < P; j++) {
        x.v[j] = (floatX)((float)x.v[j] + (float)b.v[j]);
        g.v[j] = (floatX)gelu((float)x.v[j]);
    }
    ((Pack<P>*)fch)[idx] = x;
    ((Pack<P>*)fch_gelu)[idx] = g;
}

// thread per pack: fch_gelu = gelu(fch), the recomputation of the backward pass under -r 1
template <int P>
__global__ void gelu_forward_kernel(floatX* fch_gelu, const floatX* fch, size_t packs) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= packs) return;
    Pack<P> x = ((const Pack<P>*)fch)[idx];
    for (int j = 0; j < P; j++) x.v[j] = (floatX)gelu((float)x.v[j]);
    ((Pack<P>*)fch_gelu)[idx] = x;
}

// thread per pack: dinp = gelu'(inp) * dout; dinp may be dout itself
template <int P>
__global__ void gelu_backward_kernel(floatX* dinp, const floatX* inp, const floatX* dout, size_t packs) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= packs) return;
    Pack<P> x = ((const Pack<P>*)inp)[idx], d = ((const Pack<P>*)dout)[idx];
    for (int j = 0; j < P; j++) d.v[j] = (floatX)(gelu_derivative((float)x.v[j]) * (float)d.v[j]);
    ((Pack<P>*)dinp)[idx] = d;
}

// ----------------------------------------------------------------------------------------------------------------
// classifier: softmax over the real vocabulary V (the padded logits V..Vp-1 get probability 0), cross-entropy
// loss = -log p[target], and with dloss != 0 the gradient dlogits = (p - onehot(target)) * dloss written over the
// logits in place (0 for the padded ones), like llm.c's fused classifier. With dloss = 0 the logits stay.
// Both come from the log-sum-exp, lse = max + log sum_j exp(l_j - max), never from p itself:
//   loss = lse - l_target = (max - l_target) + log sum_j exp(l_j - max),   p_j = exp((l_j - max) - log sum).
// -log p would be -log 0 = inf once p[target] underflows (below 2^-149 = e^-103.3, float32's smallest number): a
// divergence that did not happen.

// block per row (b, t); thread k owns the packs of ROW_PACK neighbouring logits (16 bytes: one load or store) that
// start at k ROW_PACK, + blockDim.x ROW_PACK, ... (logit by logit if Vp is not a multiple of ROW_PACK)
__global__ void classifier_kernel(floatX* logits, float* losses, const int* targets, int V, int Vp, float dloss) {
    floatX* l = logits + (size_t)blockIdx.x * Vp;
    bool packed = Vp % ROW_PACK == 0;
    int stride = blockDim.x * ROW_PACK;
    int target = targets[blockIdx.x];
    float target_logit = (float)l[target];  // read before the barriers of the reductions: then it is overwritten
    // each thread's running max and sum of exp(l - max) over its logits (the sum rescaled when the max grows),
    // then the block's
    float maxv = -INFINITY, sum = 0.0f;
    for (int i0 = threadIdx.x * ROW_PACK; i0 < V; i0 += stride) {
        float v[ROW_PACK], m = maxv;
        load_pack(v, l, i0, V, packed, -INFINITY);  // the padded logits take no part
        for (int k = 0; k < ROW_PACK; k++) m = fmaxf(m, v[k]);
        sum *= expf(maxv - m);
        for (int k = 0; k < ROW_PACK; k++) sum += expf(v[k] - m);
        maxv = m;
    }
    float block_maxv = block_max(maxv);
    float s[1] = {maxv == -INFINITY ? 0.0f : sum * expf(maxv - block_maxv)};
    block_sum(s);
    float log_sum = logf(s[0]);  // lse = block_maxv + log_sum; the sum is at least 1 (the largest logit's term)
    if (threadIdx.x == 0) losses[blockIdx.x] = (block_maxv - target_logit) + log_sum;
    if (dloss == 0.0f) return;
    for (int i0 = threadIdx.x * ROW_PACK; i0 < Vp; i0 += stride) {  // each logit read, then overwritten, by its owner
        float v[ROW_PACK];
        load_pack(v, l, i0, V, packed, -INFINITY);  // padded: probability 0, gradient 0
        for (int k = 0; k < ROW_PACK; k++) {
            float p = expf((v[k] - block_maxv) - log_sum);
            v[k] = (p - (i0 + k == target ? 1.0f : 0.0f)) * dloss;
        }
        store_pack(l, v, i0, Vp, packed);
    }
}

static void classifier(floatX* logits, float* losses, const int* targets, int N, int V, int Vp, float dloss) {
    int threads = std::min(1024, ceil_div(ceil_div(V, ROW_PACK), 32) * 32);
    classifier_kernel<<<N, threads>>>(logits, losses, targets, V, Vp, dloss);
    launchCheck();
}

// ----------------------------------------------------------------------------------------------------------------
// optimizer: the global gradient norm (for clipping) and AdamW

static const int NORM_BLOCKS = 512, NORM_THREADS = 512;

// partial[block] = sum of g^2 over the block's grid-stride elements, in double
__global__ void sum_squares_kernel(double* partial, const float* g, size_t n) {
    double s = 0.0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        double v = (double)g[i];
        s += v * v;
    }
    s = block_sum_double(s);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// thread per parameter. AdamW with bias correction (bc1 = 1 - beta1^t, bc2 = 1 - beta2^t); the gradient is first
// multiplied by grad_scale (clipping); decoupled weight decay (0 for tensors without decay). params are the float32
// master weights; params_x, when not null (bf16), gets their rounded copy, which the next forward pass reads.
__global__ void adamw_kernel(float* params, floatX* params_x, const float* grads, float* m, float* v, size_t n,
                             float lr, float beta1, float beta2, float bc1, float bc2, float eps, float weight_decay,
                             float grad_scale) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float grad = (float)grads[i] * grad_scale;
    float mi = beta1 * m[i] + (1.0f - beta1) * grad;
    float vi = beta2 * v[i] + (1.0f - beta2) * grad * grad;
    m[i] = mi;
    v[i] = vi;
    float mhat = mi / bc1, vhat = vi / bc2;
    float p = params[i];
    p -= lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * p);
    params[i] = p;
    if (params_x) params_x[i] = (floatX)p;
}

// thread per element: dst = src rounded to floatX (the kernels' copy of the master parameters, bf16 build)
__global__ void copy_to_floatX_kernel(floatX* dst, const float* src, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = (floatX)src[i];
}

// ----------------------------------------------------------------------------------------------------------------
// the model: parameters (one buffer, checkpoint order, as in host/model_config.h) and activations (one buffer)

typedef ParameterTensorsT<floatX> ParameterTensors;  // what the kernels read (the master weights in fp32)
typedef ParameterTensorsT<float> GradTensors;         // float32 in both precisions

// bytes a parameter costs: float32 master weight, gradient, AdamW m and v, and the bf16 copy in the bf16 build
static size_t parameter_bytes(void) { return 4 * sizeof(float) + (FLOATX_IS_FLOAT ? 0 : sizeof(floatX)); }

typedef struct {
    floatX* x;         // (2L+1, B,T,C) the X stream at each boundary b: x[0] = h0, x[2L] leaves the last block.
                       //   Pre/post: the only stream.
    floatX* y;         // (2L, B,T,C) two-stream layouts (siamese): the Y stream y_b for b = 1..2L (y_0 = h0 is x[0])
    floatX* u;         // the input u_s of each sub-layer s that keeps one (B,T,C): pre LN(x_s), siamese
                       //   LN_in(xh + LN_y(y)); a post sub-layer's u is x_s itself (boundary_u).
                       //   -r 1: (B,T,C), the current sub-layer's only, recomputed for the backward pass
    floatX* sum;       // per post or peri sub-layer s (B,T,C): the input of the LayerNorm that ends it: post's
                       //   x_s + z_s, peri's z_s (its LN_out(z_s) is added to the stream)
    float* ln_mean;    // (2L+1, BOUNDARY_NORMS, B,T) LayerNorm statistics of boundary b by slot (LN_X, LN_Y, LN_IN
                       //   for the LayerNorms that start sub-layer b; LN_END for the one that ends sub-layer b-1:
                       //   post's, peri's LN_out)
    float* ln_rstd;    // (2L+1, BOUNDARY_NORMS, B,T)
    floatX* qkvr;      // (L, 3, B,NH,T,hs) q, k, v of each head, bias added; cuDNN: (L, B,T,3C), the qkv product's
                       //   rows with the bias, which cuDNN reads in place. QKV-norm layouts: the normalized q, k, v
                       //   (the same layouts); under -r 1 the current layer's only, recomputed from qkv_in
    floatX* qkv_in;    // (L, B,T,3C) QKV-norm layouts: the qkv product with its bias, the input of ln_q, ln_k, ln_v
    float* qkv_mean;   // (L, B,T,3,NH) QKV-norm layouts: their statistics per token, part (q, k, v) and head
    float* qkv_rstd;   // (L, B,T,3,NH)
    floatX* att;       // (L, B,NH,T,T) the causal softmax (materialized attention only)
    float* lse;        // (L, B,NH,T) log-sum-exp of each query's scores (flash and cuDNN), layer l at layer_lse
    floatX* atty;      // (L, B,T,C) attention output before its projection
    floatX* fch;       // (L, B,T,4C) fc output, bias added
    floatX* fch_gelu;  // (L, B,T,4C); -r 1: (B,T,4C), the current layer's only, recomputed from fch
    floatX* hf;        // (B,T,C) the head output, where the head has LayerNorms (the identity head's is x[2L])
    floatX* logits;    // (B,T,Vp), turned into dlogits in place by a training forward pass
    float* losses;     // (B,T)
    // scratch of the forward pass, reused by every layer
    floatX* z;         // (B,T,C) the output of the current sub-layer
    floatX* qkv;       // (B,T,3C) the qkv product before the permute (materialized, flash); QKV-norm layouts: the
                       //   normalized product, before the permute
    floatX* vaccum;    // (B,NH,T,hs) att @ v before the unpermute (materialized)
    // scratch of the backward pass
    floatX* dx;        // (B,T,C) dL/dx of the stream at the current boundary; pre: also dL/dz, post: also dL/du
    floatX* dy;        // (B,T,C) two-stream layouts: dL/dy
    floatX* dz;        // (B,T,C) two-stream layouts and peri: dL/dz
    floatX* du;        // (B,T,C) pre/siamese: dL/du (and dL/dhf where the head has LayerNorms)
    floatX* dfch;      // (B,T,4C) MLP: dL/dfch_gelu, then dL/dfch in place
    floatX* datty;     // (B,T,C)
    floatX* dvaccum;   // (B,NH,T,hs) (materialized)
    floatX* dqkvr;     // (3, B,NH,T,hs) (materialized, flash; cuDNN writes dqkv itself)
    floatX* dqkv;      // (B,T,3C)
    floatX* datt;      // (B,NH,T,T) (materialized)
    float* attD;       // (B,NH,T) dout . out per query (flash)
    // hc (hc.cuh): each sub-layer's connection weights per token, and the backward pass's dL/dA
    float* hcA;        // (2L, B,T, 8) A = S + s tanh(p) of each sub-layer s
    float* hcD;        // (2L, B,T, 8) tanh(p)
    float* hcdA;       // (2, B,T, 8) dL/dA's columns 1..3 of sub-layer s at s % 2 (boundary s+1 writes them,
                       //   boundary s reads them)
} ActivationTensors;

// the floats of one layer's lse (B NH T of them), rounded up to 64 so that every layer's starts 256-byte aligned
// (cuDNN reads and writes 16-byte aligned tensors only)
static size_t lse_layer_floats(size_t rows) { return (rows + 63) / 64 * 64; }

// the statistics a boundary keeps per row: the LayerNorms that start sub-layer b by slot (LN_X, LN_Y, LN_IN: the
// slot LN_OUT never starts one), then LN_END, the one that ends sub-layer b-1 (post's LN, peri's LN_out)
enum { LN_END = LN_IN + 1, BOUNDARY_NORMS = LN_END + 1 };

// What this trainer does for a kind of sub-layer (host/layouts.h) at the boundaries, and what it keeps: one row
// per kind, in boundary_kind, with the boundary functions further down: the one place that asks which kind a
// sub-layer is. Boundary b ends sub-layer b-1 and starts sub-layer b (or the head, at b = 2L): where both are of
// the row's kind, or the one that ends is the row's `fuses` kind, `forward` does both in one kernel (at b = 0 it
// only starts); where the kind changes otherwise, the end of the one runs and then the start of the other
// (`end_forward`, `start_forward`). The backwards in reverse. A null function is a change of kinds that no layout of
// this trainer has (an error).
struct GPT2;
typedef struct {
    void (*forward)(GPT2* m, int b);
    void (*backward)(GPT2* m, int b);
    void (*start_forward)(GPT2* m, int b);
    void (*start_backward)(GPT2* m, int b);
    void (*end_forward)(GPT2* m, int b);
    void (*end_backward)(GPT2* m, int b);
    void (*recompute_u)(GPT2* m, int s);  // -r 1: u_s again before sub-layer s's backward pass (null: u_s is x_s)
    int keeps_u;    // u_s has a buffer of its own (acts.u); else u_s is x_s (F reads the stream itself)
    int keeps_sum;  // keeps the input of the LayerNorm that ends it (acts.sum): post's x_s + z_s, peri's z_s
    int own_dz;     // dL/dz has a buffer of its own (acts.dz); else it is dx (see grad_dz)
    int fuses;      // the kind (other than its own) whose end `forward` and `backward` also do; -1: none
} BoundaryKind;
static BoundaryKind boundary_kind(SubLayerKind kind);

static int keeps_u(SubLayerKind k) { return boundary_kind(k).keeps_u; }
static int keeps_sum(SubLayerKind k) { return boundary_kind(k).keeps_sum; }
static int own_dz(SubLayerKind k) { return boundary_kind(k).own_dz; }
// how many of the sub-layers before s keep a u (keep = keeps_u) or a sum: s's index into acts.u or acts.sum
static size_t kept_before(const GPT2Config& c, int s, int (*keep)(SubLayerKind)) {
    size_t n = 0;
    for (int r = 0; r < s; r++) n += keep(sublayer_kind(c, r));
    return n;
}

// points the tensors into memory (null: only count); returns the bytes needed. Each tensor starts 256-aligned.
// recompute (-r 1): u and fch_gelu are kept for one sub-layer only and recomputed in the backward pass.
// attention: flash and cuDNN keep no T x T matrix (att, datt), but lse; cuDNN needs no permuted copies either (qkv,
// dqkvr), nor flash's D (attD): it reads and writes the rows of the products.
static size_t point_activations(const GPT2Config& c, int B, int T, int recompute, int attention, ActivationTensors* a,
                                char* memory) {
    size_t C = c.channels, L = c.num_layers, NH = c.num_heads, Vp = c.padded_vocab_size, BT = (size_t)B * T;
    int materialized = attention == ATTENTION_MATERIALIZED, flash = attention == ATTENTION_FLASH;
    int cudnn = attention == ATTENTION_CUDNN;
    size_t NC = BT * C, att = materialized ? (size_t)B * NH * T * T : 0, rows = (size_t)B * NH * T;
    const LayoutInfo& layout = layout_of(c);
    int two = layout.streams == 2, hf = layout.head != HEAD_IDENTITY;
    size_t us = kept_before(c, 2 * L, keeps_u), sums = kept_before(c, 2 * L, keeps_sum);
    size_t dzs = kept_before(c, 2 * L, own_dz);  // the sub-layers whose dL/dz is not dL/dx (siamese's, peri's)
    if (recompute) us = std::min(us, (size_t)1);  // -r 1: the current sub-layer's u only
    size_t kept = recompute ? 1 : L;  // how many layers' fch_gelu are kept
    int qkv_norm = layout.qkv_norm;   // -r 1: the normalized q, k, v of one layer, recomputed from qkv_in
    size_t qkvrs = qkv_norm && recompute ? 1 : L;
    struct { floatX** ptr; size_t count; } xs[] = {
        {&a->x, (2 * L + 1) * NC},        {&a->y, two ? 2 * L * NC : 0},      {&a->u, us * NC},
        {&a->sum, sums * NC},             {&a->qkvr, qkvrs * 3 * NC},         {&a->att, L * att},
        {&a->atty, L * NC},               {&a->fch, L * 4 * NC},              {&a->fch_gelu, kept * 4 * NC},
        {&a->hf, hf ? NC : 0},            {&a->logits, BT * Vp},              {&a->z, NC},
        {&a->qkv, cudnn ? 0 : 3 * NC},    {&a->vaccum, materialized ? NC : 0}, {&a->dx, NC},
        {&a->dy, two ? NC : 0},           {&a->dz, dzs ? NC : 0},             {&a->du, us || hf ? NC : 0},
        {&a->dfch, 4 * NC},               {&a->datty, NC},                    {&a->dvaccum, materialized ? NC : 0},
        {&a->dqkvr, cudnn ? 0 : 3 * NC},  {&a->dqkv, 3 * NC},                 {&a->datt, att},
        {&a->qkv_in, qkv_norm ? L * 3 * NC : 0},
    };
    struct { float** ptr; size_t count; } fs[] = {
        {&a->ln_mean, (2 * L + 1) * BOUNDARY_NORMS * BT},
        {&a->ln_rstd, (2 * L + 1) * BOUNDARY_NORMS * BT},
        {&a->losses, BT},
        {&a->lse, materialized ? 0 : L * lse_layer_floats(rows)},
        {&a->attD, flash ? rows : 0},
        {&a->qkv_mean, qkv_norm ? L * 3 * rows : 0},
        {&a->qkv_rstd, qkv_norm ? L * 3 * rows : 0},
        {&a->hcA, layout.hc ? 2 * L * BT * HC_WEIGHTS : 0},
        {&a->hcD, layout.hc ? 2 * L * BT * HC_WEIGHTS : 0},
        {&a->hcdA, layout.hc ? 2 * BT * HC_WEIGHTS : 0},
    };
    size_t total = 0;
    for (auto& e : xs) {
        *e.ptr = memory && e.count ? (floatX*)(memory + total) : nullptr;
        total += (e.count * sizeof(floatX) + 255) / 256 * 256;
    }
    for (auto& e : fs) {
        *e.ptr = memory && e.count ? (float*)(memory + total) : nullptr;
        total += (e.count * sizeof(float) + 255) / 256 * 256;
    }
    return total;
}

struct GPT2 {
    GPT2Config config;
    std::vector<TensorInfo> tensors;  // checkpoint order
    ParameterTensors params;  // into params_x
    GradTensors grads;        // into grads_memory
    size_t num_parameters;
    float* params_memory;     // the float32 master weights: what AdamW updates and checkpoints hold
    floatX* params_x;         // what the kernels read: params_memory itself (fp32), or its bf16 copy
    float* grads_memory;
    float *m_memory, *v_memory;  // AdamW moments of parameters [opt_begin, opt_end)
    int zero = 0;                // -z 1 (ZeRO-1, set before the model is built): this rank keeps its shard only
    size_t opt_begin, opt_end;   // the parameters this rank updates: all, or its shard (host/distributed.h)
    size_t master_begin;         // params_memory[0] is parameter master_begin's: 0, or (bf16 and -z 1) opt_begin
    double* norm_partials;       // (NORM_BLOCKS)
    ActivationTensors acts;
    size_t acts_bytes;
    char* acts_memory;
    int batch_size, seq_len;  // the shape the activations were allocated for
    int B, T;                 // the shape of the last forward pass
    int *inputs, *targets;    // (B, T) on the device
    int* token_index;         // (3 B T + 1) on the device, see build_token_index; by each training forward pass
    int index_tokens;         // its U, the distinct tokens of the batch
    int recompute = 0;        // -r 1: recompute u and fch_gelu in the backward pass (set before the first forward)
    int attention = DEFAULT_ATTENTION;  // ATTENTION_MATERIALIZED, _FLASH or _CUDNN (set before the first forward)
    std::vector<int> host_count, host_index;  // build_token_index's scratch and result
    std::vector<float> host_losses;
    std::vector<double> host_partials;         // sum_of_squares' partial sums
    float mean_loss;  // of the last forward pass with targets; -1 without
    int has_dlogits;  // the last forward pass left dlogits for gpt2_backward
};

// the layouts this trainer runs are those whose row in host/layouts.h says cuda
static void check_cuda_layout(int norm) {
    if (norm >= 0 && norm < NUM_LAYOUTS && !LAYOUTS[norm].cuda)
        fail("the CUDA trainer runs the layouts %s; %s runs on the CPU trainer (./reference_cpu)",
             layout_names(", ", " and ", 1).c_str(), LAYOUTS[norm].name);
}

// parameters, gradients and AdamW moments for model->config, zeroed
static void gpt2_allocate_parameters(GPT2* model) {
    const GPT2Config& c = model->config;
    check_cuda_layout(c.norm);
    model->tensors = parameter_table(c);
    model->num_parameters = count_parameters(c);
    size_t n = model->num_parameters, free_bytes = 0, total_bytes = 0;
    model->opt_begin = model->zero ? shard_begin(n, dist.rank) : 0;
    model->opt_end = model->zero ? shard_end(n, dist.rank) : n;
    size_t shard = model->opt_end - model->opt_begin;
    // fp32: the master weights are what the kernels read, whole on every rank; bf16: the kernels read their copy
    model->master_begin = FLOATX_IS_FLOAT ? 0 : model->opt_begin;
    size_t masters = FLOATX_IS_FLOAT ? n : shard;
    // the gradients (and bf16 copy) of all n parameters, the master weights and AdamW moments of this rank's
    double need = (double)n * (parameter_bytes() - 3 * sizeof(float)) + 4.0 * masters + 8.0 * shard;
    cudaCheck(cudaMemGetInfo(&free_bytes, &total_bytes));
    if (need > (double)free_bytes)
        fail("out of GPU memory: this model's %.0fM parameters need %.2f GiB for the weights, gradients and AdamW "
             "(%zu bytes each%s), %.2f of %.2f GiB are free: it does not fit this GPU (docs/cuda.md, memory by card)",
             n / 1e6, need / 1073741824.0, parameter_bytes(), shard < n ? ", less with -z 1's shards" : "",
             free_bytes / 1073741824.0, total_bytes / 1073741824.0);
    model->params_memory = cuda_malloc<float>(masters, "the parameters");
    model->params_x = FLOATX_IS_FLOAT ? (floatX*)model->params_memory : cuda_malloc<floatX>(n, "the bf16 weights");
    model->grads_memory = cuda_malloc<float>(n, "the gradients");
    model->m_memory = cuda_malloc<float>(shard, "the AdamW moments");
    model->v_memory = cuda_malloc<float>(shard, "the AdamW moments");
    model->norm_partials = cuda_malloc<double>(NORM_BLOCKS, "the gradient norm");
    cudaCheck(cudaMemset(model->grads_memory, 0, n * sizeof(float)));
    cudaCheck(cudaMemset(model->m_memory, 0, shard * sizeof(float)));
    cudaCheck(cudaMemset(model->v_memory, 0, shard * sizeof(float)));
    point_parameters(c, &model->params, model->params_x);
    point_parameters(c, &model->grads, model->grads_memory);
    model->acts_memory = nullptr;
    model->acts_bytes = 0;
    model->inputs = model->targets = model->token_index = nullptr;
    model->batch_size = model->seq_len = 0;
    model->mean_loss = -1;
    model->has_dlogits = 0;
    // the row kernels' and the bias reductions' partial sums (see cuda_common.cuh)
    gpu_reserve_partials(std::max({row_partials_floats(c.channels, 2 * SIAMESE_SLOTS),
                                   (size_t)BIAS_MAX_CHUNKS * 4 * c.channels,
                                   layout_of(c).hc ? hc_partials_floats((size_t)gpu.sms * MAX_ROW_BLOCKS_PER_SM,
                                                                        c.channels)
                                                   : 0}));
}

// the float32 master weights that params_memory holds (all, or this rank's shard)
static size_t master_count(const GPT2* m) { return FLOATX_IS_FLOAT ? m->num_parameters : m->opt_end - m->opt_begin; }

// all n parameters from the host; with sharded master weights (bf16, -z 1) the whole float32 array passes through
// the gradient buffer, unused until the first backward pass, on its way to the bf16 copy
static void upload_parameters(GPT2* model, const std::vector<float>& host) {
    size_t n = model->num_parameters;
    float* whole = master_count(model) == n ? model->params_memory : model->grads_memory;
    cudaCheck(cudaMemcpy(whole, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    if ((void*)model->params_x != (void*)model->params_memory) {
        copy_to_floatX_kernel<<<ceil_div((long long)n, 256), 256>>>(model->params_x, whole, n);
        launchCheck();
    }
    if (whole != model->params_memory) {
        cudaCheck(cudaMemcpy(model->params_memory, host.data() + model->master_begin,
                             master_count(model) * sizeof(float), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemset(model->grads_memory, 0, n * sizeof(float)));
    }
}

// a new model with GPT-2's initialization (init_parameters: the same numbers as the CPU trainer)
static void gpt2_init_random(GPT2* model, const GPT2Config& config, uint64_t seed) {
    validate_config(config);
    model->config = config;
    gpt2_allocate_parameters(model);
    std::vector<float> host(model->num_parameters);
    init_parameters(config, seed, host.data());
    upload_parameters(model, host);
}

static void gpt2_build_from_checkpoint(GPT2* model, const char* path) {
    FILE* f = checkpoint_open(path, &model->config);
    gpt2_allocate_parameters(model);
    std::vector<float> host(model->num_parameters);
    checkpoint_read_parameters(f, path, host.data(), host.size());
    upload_parameters(model, host);
}

template <typename T>
static void download(std::vector<T>* host, const T* device, size_t n) {  // into host, resized (its storage kept)
    host->resize(n);
    cudaCheck(cudaMemcpy(host->data(), device, n * sizeof(T), cudaMemcpyDeviceToHost));
}
template <typename T>
static std::vector<T> download(const T* device, size_t n) {
    std::vector<T> host;
    download(&host, device, n);
    return host;
}

// Before the activations are allocated: where they would not fit, one line that says what would (the largest -b
// as it is, with -r 1, and with flash attention and -r 1) rather than cudaMalloc's bare failure. The token buffers
// and the reduction scratch come on top: a margin of 64 MiB.
static void check_activations_fit(const GPT2Config& c, int B, int T, int recompute, int attention, size_t bytes) {
    size_t free_bytes = 0, total_bytes = 0, margin = (size_t)64 << 20;
    cudaCheck(cudaMemGetInfo(&free_bytes, &total_bytes));
    if (bytes + margin <= free_bytes) return;
    ActivationTensors a;
    auto largest_b = [&](int r, int att) {
        for (int b = B - 1; b >= 1; b--)
            if (point_activations(c, b, T, r, att, &a, nullptr) + margin <= free_bytes) return b;
        return 0;
    };
    int as_is = largest_b(recompute, attention), r1 = recompute ? 0 : largest_b(1, attention);
    int flash_r1 = attention == ATTENTION_FLASH && recompute ? 0 : largest_b(1, ATTENTION_FLASH);
    std::string hint;
    auto option = [&](int b, const char* how) {
        if (b) hint += (hint.empty() ? "" : ", ") + std::string(how) + "-b " + std::to_string(b) + " fits";
    };
    option(as_is, "");
    option(r1, "with -r 1 ");
    option(flash_r1, "with --attention flash -r 1 ");
    if (hint.empty()) hint = "not even -b 1 fits at -t " + std::to_string(T) + ": a smaller -t, or a GPU with more memory";
    else hint += " (-d keeps a step's tokens by gradient accumulation; it must divide by -b x -t)";
    fail("out of GPU memory: the activations of -b %d -t %d need %.2f GiB, %.2f of %.2f GiB are free; %s", B, T,
         bytes / 1073741824.0, free_bytes / 1073741824.0, total_bytes / 1073741824.0, hint.c_str());
}

static void gpt2_allocate_activations(GPT2* m, int B, int T) {
    m->batch_size = B;
    m->seq_len = T;
    int hs = m->config.channels / m->config.num_heads;
    check_attention(m->attention, hs);
    if (layout_of(m->config).qkv_norm && hs > QKV_NORM_MAX_HEAD_SIZE)
        fail("the %s layout's QKV norm takes head sizes up to %d (a warp's registers), not %d: more heads",
             layout_of(m->config).name, QKV_NORM_MAX_HEAD_SIZE, hs);
    m->acts_bytes = point_activations(m->config, B, T, m->recompute, m->attention, &m->acts, nullptr);
    check_activations_fit(m->config, B, T, m->recompute, m->attention, m->acts_bytes);
    m->acts_memory = cuda_malloc<char>(m->acts_bytes, "the activations");
    point_activations(m->config, B, T, m->recompute, m->attention, &m->acts, m->acts_memory);
    size_t N = (size_t)B * T;
    m->inputs = cuda_malloc<int>(N, "the inputs");
    m->targets = cuda_malloc<int>(N, "the targets");
    m->token_index = cuda_malloc<int>(3 * N + 1, "the token index");
}

// ----------------------------------------------------------------------------------------------------------------
// Views of the activations at boundary b (0..2L) for the current batch shape, so the layout functions below read
// like the math. NC is B*T*C of the current forward pass (any B, T up to the allocated ones).

static size_t NCof(const GPT2* m) { return (size_t)m->B * m->T * m->config.channels; }
static floatX* stream_x(GPT2* m, int b) { return m->acts.x + b * NCof(m); }
static floatX* stream_y(GPT2* m, int b) { return b == 0 ? m->acts.x : m->acts.y + (b - 1) * NCof(m); }
// Boundary b joins the end of sub-layer b-1 (none at b = 0) to the start of sub-layer b, or of the head at b = 2L,
// which starts as the kind whose normalization it repeats: LN_f as pre, the identity as post, siamese's as siamese.
static const int NO_SUBLAYER = -1;
static int boundary_end(GPT2* m, int b) { return b > 0 ? (int)sublayer_kind(m->config, b - 1) : NO_SUBLAYER; }
static SubLayerKind boundary_start(GPT2* m, int b) {
    const GPT2Config& c = m->config;
    if (b < 2 * c.num_layers) return sublayer_kind(c, b);
    HeadKind head = layout_of(c).head;
    switch (head) {
        case HEAD_LN: return SUBLAYER_PRE;
        case HEAD_IDENTITY: return SUBLAYER_POST;
        case HEAD_SIAMESE: return SUBLAYER_SIAMESE;
        case HEAD_SUM: return SUBLAYER_HC;  // hf = LN_f(x + y): hc's boundary function does it at b = 2L
    }
    unknown_kind("head kind", head);
}
// What boundary b hands on: the input u_b of sub-layer b, or the head output hf at b = 2L. Where the kind that
// starts there keeps no u (post), it is another tensor under a second name, and the backward pass relies on it
// (what it accumulates into one is the other's gradient): a post sub-layer's u_b is x_b (F reads the stream
// itself), the identity head's hf is x_2L (the last post sub-layer's LayerNorm wrote it). The others have their
// own: u_b in acts.u (its index among the sub-layers that keep one), hf in acts.hf.
static floatX* boundary_u(GPT2* m, int b) {
    const GPT2Config& c = m->config;
    if (!boundary_kind(boundary_start(m, b)).keeps_u) return stream_x(m, b);
    if (b == 2 * c.num_layers) return m->acts.hf;
    return m->acts.u + (m->recompute ? 0 : kept_before(c, b, keeps_u) * NCof(m));
}
// the input of the LayerNorm that ends post or peri sub-layer s: x_s + z_s (post), z_s (peri)
static floatX* post_sum(GPT2* m, int s) { return m->acts.sum + kept_before(m->config, s, keeps_sum) * NCof(m); }
static float* ln_mean(GPT2* m, int b, int slot) {
    return m->acts.ln_mean + ((size_t)b * BOUNDARY_NORMS + slot) * m->B * m->T;
}
static float* ln_rstd(GPT2* m, int b, int slot) {
    return m->acts.ln_rstd + ((size_t)b * BOUNDARY_NORMS + slot) * m->B * m->T;
}
// layer l's log-sum-exp of each query (B, NH, T) (flash and cuDNN attention)
static float* layer_lse(GPT2* m, int l) {
    return m->acts.lse + l * lse_layer_floats((size_t)m->B * m->config.num_heads * m->T);
}
// the LayerNorm parameters (or their gradients) of boundary b, slot j: sub-layer b = 2l + k, or the head at 2L;
// null where the layout has no such LayerNorm (siamese_c1 has LN_y only, hybrid's attention none)
template <typename T>
static T* ln_w(ParameterTensorsT<T>* p, const GPT2Config& c, int b, int j) {
    if (b == 2 * c.num_layers) return p->lnfw[j];
    T* w = p->lnw[b % 2][j];
    return w ? w + (size_t)(b / 2) * c.channels : nullptr;
}
template <typename T>
static T* ln_b(ParameterTensorsT<T>* p, const GPT2Config& c, int b, int j) {
    if (b == 2 * c.num_layers) return p->lnfb[j];
    T* w = p->lnb[b % 2][j];
    return w ? w + (size_t)(b / 2) * c.channels : nullptr;
}
// siamese-hybrid's c1 (or its gradient) of the attention sub-layer that boundary b starts (b = 2l)
template <typename T>
static T* c1_of(ParameterTensorsT<T>* p, const GPT2Config& c, int b) {
    return p->c1 + (size_t)(b / 2) * c.channels;
}
// QKV-norm: layer l's product with its bias (qkv_in), its statistics, and its normalized q, k, v (qkvr: by head, or
// cuDNN's rows; -r 1 keeps one layer's)
static size_t qkv_norm_rows(GPT2* m) { return (size_t)m->B * m->T * 3 * m->config.num_heads; }
static floatX* layer_qkv_in(GPT2* m, int l) { return m->acts.qkv_in + (size_t)l * 3 * NCof(m); }
static float* layer_qkv_mean(GPT2* m, int l) { return m->acts.qkv_mean + (size_t)l * qkv_norm_rows(m); }
static float* layer_qkv_rstd(GPT2* m, int l) { return m->acts.qkv_rstd + (size_t)l * qkv_norm_rows(m); }
static floatX* layer_qkvr(GPT2* m, int l) {
    int one = layout_of(m->config).qkv_norm && m->recompute;
    return m->acts.qkvr + (one ? 0 : (size_t)l * 3 * NCof(m));
}
static QKVNorm layer_qkv_norm(GPT2* m, int l) {
    int hs = m->config.channels / m->config.num_heads;
    QKVNorm ln;
    for (int p = 0; p < 3; p++) {
        ln.w[p] = m->params.lnqkvw[p] + (size_t)l * hs;
        ln.b[p] = m->params.lnqkvb[p] + (size_t)l * hs;
    }
    return ln;
}
// Where the backward pass keeps dL/dz_s and dL/du_s of sub-layer s, and with which beta F's backward writes du
// (du = beta * du + ...): pre keeps dz in dx (x_{s+1} = x_s + z_s: the same gradient); post keeps both in dx (its
// LayerNorm backward leaves dL/d(x_s + z_s) there, which is dz and, so far, dx; F's backward adds its du to it:
// beta 1, as for every kind whose u is x); siamese has a dz (own_dz) and a du of its own.
static floatX* grad_dz(GPT2* m, int s) {
    return boundary_kind(sublayer_kind(m->config, s)).own_dz ? m->acts.dz : m->acts.dx;
}
static floatX* grad_du(GPT2* m, int s, float* beta) {
    int own = boundary_kind(sublayer_kind(m->config, s)).keeps_u;
    *beta = own ? 0.0f : 1.0f;
    return own ? m->acts.du : m->acts.dx;
}
// dL/dhf, which the classifier's backward writes (overwriting): into du, or dx where hf is x_2L (the identity head)
static floatX* grad_dhf(GPT2* m) {
    return boundary_kind(boundary_start(m, 2 * m->config.num_layers)).keeps_u ? m->acts.du : m->acts.dx;
}

// ----------------------------------------------------------------------------------------------------------------
// The boundaries: the ONLY place where the layouts differ (see the top of the file). Boundary b ends sub-layer b-1
// (its output is acts.z) and starts sub-layer b; b = 0 follows the embedding, b = 2L is the head.

// What the residual add that ends sub-layer b-1 adds its z to: x_{b-1} after a pre or residual sub-layer, and
// xn_{b-1} = u_{b-1} after a normed one (HybridNorm's MLP: x_b = xn_{b-1} + z)
static const floatX* residual_base(GPT2* m, int b) {
    return sublayer_kind(m->config, b - 1) == SUBLAYER_NORMED ? boundary_u(m, b - 1) : stream_x(m, b - 1);
}

// Pre-Norm:  x_b = x_{b-1} + z;  u_b = LN(x_b)        (b = 0: u_0 = LN(h0);  b = 2L: hf = LN_f(x_2L)). Without
// `residual` (b = 0, or after a post sub-layer, whose LayerNorm already wrote x_b) only u_b = LN(x_b). The same
// kernel starts HybridNorm's normed sub-layers (u_b = LN(x_b), after a residual one: x_b = x_{b-1} + z) and its
// head (hf = LN_f(x_2L), after a normed one: x_2L = xn_{2L-1} + z): residual_base says what z is added to.
static void pre_residual_layernorm(GPT2* m, int b, int residual) {
    const GPT2Config& c = m->config;
    ParameterTensors* p = &m->params;
    residual_layernorm_forward(residual ? stream_x(m, b) : nullptr, boundary_u(m, b), ln_mean(m, b, LN_X),
                               ln_rstd(m, b, LN_X), residual ? residual_base(m, b) : stream_x(m, b),
                               residual ? m->acts.z : nullptr, ln_w(p, c, b, LN_X), ln_b(p, c, b, LN_X), m->B * m->T,
                               c.channels);
}
static void boundary_forward_pre(GPT2* m, int b) { pre_residual_layernorm(m, b, b > 0); }
static void boundary_start_forward_pre(GPT2* m, int b) { pre_residual_layernorm(m, b, 0); }

// The residual add alone, x_b = base + z (siamese.cuh): the end of a pre, residual or normed sub-layer b-1 where
// the next one starts with nothing to fuse it with (a residual one: u_b = x_b)
static void boundary_end_forward_residual(GPT2* m, int b) {
    residual_forward(stream_x(m, b), residual_base(m, b), m->acts.z, m->B * m->T, m->config.channels);
}
// HybridNorm's attention (residual):  x_b = x_{b-1} + z;  u_b = x_b: F reads the stream (nothing at b = 0)
static void boundary_forward_residual(GPT2* m, int b) {
    if (b > 0) boundary_end_forward_residual(m, b);
}

// dL/dx_b += LN'(dL/du_b): dx already holds dL/dx_{b+1}, which reached x_b through the identity. The result is
// also dL/dz_{b-1} (after a pre sub-layer), which is why pre keeps dz and dx in one buffer. At the head dx starts
// from LN_f' alone.
static void boundary_backward_pre(GPT2* m, int b) {
    const GPT2Config& c = m->config;
    ParameterTensors* p = &m->params;
    GradTensors* g = &m->grads;
    layernorm_backward(m->acts.dx, ln_w(g, c, b, LN_X), ln_b(g, c, b, LN_X), m->acts.du, stream_x(m, b),
                       ln_w(p, c, b, LN_X), ln_mean(m, b, LN_X), ln_rstd(m, b, LN_X), m->B * m->T, c.channels,
                       b < 2 * c.num_layers);
}

// HybridNorm's MLP (normed), u_b = xn_b = LN(x_b), after its F's backward: dx holds dL/dx_{b+1}, which reached
// u_b directly (x_{b+1} = u_b + z_b), du holds F's dL/du_b:  dx = dL/dx_b = LN'(du + dx) (siamese.cuh)
static void boundary_backward_normed(GPT2* m, int b) {
    const GPT2Config& c = m->config;
    ParameterTensors* p = &m->params;
    GradTensors* g = &m->grads;
    normed_boundary_backward(m->acts.dx, ln_w(g, c, b, LN_X), ln_b(g, c, b, LN_X), m->acts.du, stream_x(m, b),
                             ln_w(p, c, b, LN_X), ln_mean(m, b, LN_X), ln_rstd(m, b, LN_X), m->B * m->T, c.channels);
}

// Post-Norm:  x_b = LN(x_{b-1} + z) with the LayerNorm of sub-layer b-1;  u_b = x_b   (nothing at b = 0)
static void boundary_forward_post(GPT2* m, int b) {
    if (b == 0) return;
    const GPT2Config& c = m->config;
    ParameterTensors* p = &m->params;
    residual_layernorm_forward(post_sum(m, b - 1), stream_x(m, b), ln_mean(m, b, LN_END), ln_rstd(m, b, LN_END),
                               stream_x(m, b - 1), m->acts.z, ln_w(p, c, b - 1, LN_X), ln_b(p, c, b - 1, LN_X),
                               m->B * m->T, c.channels);
}

// F's backward has already added dL/du_b into dx = dL/dx_b. Through x_b = LN(sum): dL/dsum = LN'(dx), which is
// both dL/dz_{b-1} and (so far) dL/dx_{b-1}: one buffer, in place.
static void boundary_backward_post(GPT2* m, int b) {
    if (b == 0) return;
    const GPT2Config& c = m->config;
    ParameterTensors* p = &m->params;
    GradTensors* g = &m->grads;
    layernorm_backward(m->acts.dx, ln_w(g, c, b - 1, LN_X), ln_b(g, c, b - 1, LN_X), m->acts.dx, post_sum(m, b - 1),
                       ln_w(p, c, b - 1, LN_X), ln_mean(m, b, LN_END), ln_rstd(m, b, LN_END), m->B * m->T,
                       c.channels, 0);
}

// Peri-LN: a sub-layer starts as pre's, u_b = LN(x_b), and ends with a LayerNorm of F's output before the add:
//   zn = LN_out(z);  x_b = x_{b-1} + zn;  u_b = LN(x_b)          (b = 0: u_0 = LN(h0);  b = 2L: hf = LN_f(x_2L))
// in two kernels: LN_out first (z_{b-1} kept in acts.sum for its backward, zn written over z), then pre's fused add
// and LayerNorm (at the head the add alone: LN_f is the head's start, pre's).
static void peri_output_norm(GPT2* m, int b) {
    const GPT2Config& c = m->config;
    ParameterTensors* p = &m->params;
    residual_layernorm_forward(post_sum(m, b - 1), m->acts.z, ln_mean(m, b, LN_END), ln_rstd(m, b, LN_END),
                               m->acts.z, nullptr, ln_w(p, c, b - 1, LN_OUT), ln_b(p, c, b - 1, LN_OUT), m->B * m->T,
                               c.channels);
}
static void boundary_forward_peri(GPT2* m, int b) {
    if (b > 0) peri_output_norm(m, b);
    pre_residual_layernorm(m, b, b > 0);
}
static void boundary_end_forward_peri(GPT2* m, int b) {
    peri_output_norm(m, b);
    boundary_end_forward_residual(m, b);
}

// The end's backward: dx holds dL/dx_b, which is also dL/dx_{b-1} (the identity: dx stays) and dL/dzn:
//   dz = LN_out'(dx)
static void boundary_end_backward_peri(GPT2* m, int b) {
    const GPT2Config& c = m->config;
    ParameterTensors* p = &m->params;
    GradTensors* g = &m->grads;
    layernorm_backward(m->acts.dz, ln_w(g, c, b - 1, LN_OUT), ln_b(g, c, b - 1, LN_OUT), m->acts.dx,
                       post_sum(m, b - 1), ln_w(p, c, b - 1, LN_OUT), ln_mean(m, b, LN_END), ln_rstd(m, b, LN_END),
                       m->B * m->T, c.channels, 0);
}
// the start's (pre's: dx += LN'(du)), then the end's
static void boundary_backward_peri(GPT2* m, int b) {
    boundary_backward_pre(m, b);
    if (b > 0) boundary_end_backward_peri(m, b);
}

// The three LayerNorms of siamese boundary b (LN_x, LN_y, LN_in; at the head LN_xf, LN_yf, LN_f) into the arguments
// of a siamese.cuh kernel (SiameseBoundary or SiameseBoundaryGrad): statistics, gains and shifts, and whether LN_in
// applies (not under --no-ln-in; the head always applies LN_f)
template <typename Args>
static void point_boundary_norms(GPT2* m, int b, Args* a) {
    const GPT2Config& c = m->config;
    for (int j = 0; j < SIAMESE_SLOTS; j++) {
        a->mean[j] = ln_mean(m, b, j);
        a->rstd[j] = ln_rstd(m, b, j);
        a->w[j] = ln_w(&m->params, c, b, j);
        a->b[j] = ln_b(&m->params, c, b, j);
    }
    a->use_ln_in = b == 2 * c.num_layers || !(c.ablations & ABLATE_NO_LN_IN);
}

// SiameseNorm (siamese.cuh):  x_b = xh_{b-1} + z / c;  y_b = y_{b-1} + z;  u_b = LN_in(LN_x(x_b) + LN_y(y_b)).
// siamese-hybrid's attention (siamese_c1) in the same kernel:  u_b = c1 * x_b + LN_y(y_b) (c1 given), and after it
// x_b = x_{b-1} + z / c (no LN_x: the end of a siamese_c1 sub-layer leaves wx_prev null); one kernel a boundary
// whichever of the two ends and starts there.
static void siamese_forward(GPT2* m, int b, const floatX* c1) {
    const GPT2Config& c = m->config;
    ParameterTensors* p = &m->params;
    SiameseBoundary a;
    memset(&a, 0, sizeof(a));
    if (b > 0) {
        a.x_prev = stream_x(m, b - 1);
        if (sublayer_kind(c, b - 1) == SUBLAYER_SIAMESE) {  // xh_{b-1} = LN_x(x_{b-1})
            a.mean_prev = ln_mean(m, b - 1, LN_X);
            a.rstd_prev = ln_rstd(m, b - 1, LN_X);
            a.wx_prev = ln_w(p, c, b - 1, LN_X);
            a.bx_prev = ln_b(p, c, b - 1, LN_X);
        }
        a.y_prev = stream_y(m, b - 1);
        a.z = m->acts.z;
        a.inv_c = (float)inv_depth_scale(c, (b - 1) / 2);
        a.y = stream_y(m, b);
    }
    a.x = stream_x(m, b);
    a.u = boundary_u(m, b);
    point_boundary_norms(m, b, &a);
    a.c1 = c1;
    siamese_boundary_forward(a, m->B * m->T, c.channels);
}
static void boundary_forward_siamese(GPT2* m, int b) { siamese_forward(m, b, nullptr); }
static void boundary_forward_siamese_c1(GPT2* m, int b) { siamese_forward(m, b, c1_of(&m->params, m->config, b)); }

// The backward does not depend on which kind ended at b (see siamese.cuh): only the start's (c1 given: siamese_c1,
// whose dc1 leaves through the LN_x gain's slot of the kernel's partials; it has no LN_x)
static void siamese_backward(GPT2* m, int b, const floatX* c1) {
    const GPT2Config& c = m->config;
    GradTensors* g = &m->grads;
    int head = b == 2 * c.num_layers;
    SiameseBoundaryGrad a;
    memset(&a, 0, sizeof(a));
    a.x = stream_x(m, b);
    a.y = stream_y(m, b);
    point_boundary_norms(m, b, &a);
    a.du = m->acts.du;
    a.dx_next = head ? nullptr : m->acts.dx;
    a.dy_next = head ? nullptr : m->acts.dy;
    a.dx = m->acts.dx;
    a.dy = m->acts.dy;
    a.dz = b > 0 ? m->acts.dz : nullptr;
    a.inv_c = b > 0 ? (float)inv_depth_scale(c, (b - 1) / 2) : 1.0f;
    a.c1 = c1;
    GradTargets t = {{c1 ? c1_of(g, c, b) : ln_w(g, c, b, LN_X), ln_b(g, c, b, LN_X), ln_w(g, c, b, LN_Y),
                      ln_b(g, c, b, LN_Y), ln_w(g, c, b, LN_IN), ln_b(g, c, b, LN_IN)}};
    siamese_boundary_backward(a, t, m->B * m->T, c.channels);
}
static void boundary_backward_siamese(GPT2* m, int b) { siamese_backward(m, b, nullptr); }
static void boundary_backward_siamese_c1(GPT2* m, int b) { siamese_backward(m, b, c1_of(&m->params, m->config, b)); }

// -r 1: u_s again, from what the forward pass kept of boundary s (its streams and LayerNorm statistics), into the
// one u buffer, just before sub-layer s's backward pass reads it
static void recompute_u_pre(GPT2* m, int s) {
    const GPT2Config& c = m->config;
    ParameterTensors* p = &m->params;
    layernorm_recompute(boundary_u(m, s), stream_x(m, s), ln_mean(m, s, LN_X), ln_rstd(m, s, LN_X),
                        ln_w(p, c, s, LN_X), ln_b(p, c, s, LN_X), m->B * m->T, c.channels);
}

static void siamese_recompute(GPT2* m, int s, const floatX* c1) {
    SiameseBoundaryGrad a;
    memset(&a, 0, sizeof(a));
    a.x = stream_x(m, s);
    a.y = stream_y(m, s);
    point_boundary_norms(m, s, &a);
    a.c1 = c1;
    siamese_u_recompute(a, boundary_u(m, s), m->B * m->T, m->config.channels);
}
static void recompute_u_siamese(GPT2* m, int s) { siamese_recompute(m, s, nullptr); }
static void recompute_u_siamese_c1(GPT2* m, int s) { siamese_recompute(m, s, c1_of(&m->params, m->config, s)); }

// Hyper-Connections (hc.cuh). Sub-layer s's connection weights A and tanh(p) (8 floats a token each), and the rows
// of dL/dA that boundary s+1's backward writes for boundary s's (two buffers, by the parity of s)
static float* hc_A(GPT2* m, int s) { return m->acts.hcA + (size_t)s * m->B * m->T * HC_WEIGHTS; }
static float* hc_D(GPT2* m, int s) { return m->acts.hcD + (size_t)s * m->B * m->T * HC_WEIGHTS; }
static float* hc_dA(GPT2* m, int s) { return m->acts.hcdA + (size_t)(s % 2) * m->B * m->T * HC_WEIGHTS; }
// sub-layer s's static weights S (2, 4), projections W (4, C) and scales (2), or their gradients
template <typename T>
static T* hc_S(ParameterTensorsT<T>* p, const GPT2Config&, int s) { return p->hcs[s % 2] + (size_t)(s / 2) * 8; }
template <typename T>
static T* hc_W(ParameterTensorsT<T>* p, const GPT2Config& c, int s) {
    return p->hcw[s % 2] + (size_t)(s / 2) * 4 * c.channels;
}
template <typename T>
static T* hc_sc(ParameterTensorsT<T>* p, const GPT2Config&, int s) { return p->hcsc[s % 2] + (size_t)(s / 2) * 2; }

// What the backward kernel and the -r 1 recomputation of boundary b read of the forward pass: the streams, LN's
// statistics, gain and shift (the head's LN_f), and before a sub-layer LN_h's (its statistics on x in slot LN_H, on
// y in slot LN_IN, which hc does not use otherwise, as the CPU reference keeps them), W, the scales, A and tanh(p)
static HCBoundaryGrad hc_kept(GPT2* m, int b) {
    const GPT2Config& c = m->config;
    ParameterTensors* p = &m->params;
    HCBoundaryGrad a;
    memset(&a, 0, sizeof(a));
    a.x = stream_x(m, b);
    a.y = stream_y(m, b);
    a.mean = ln_mean(m, b, LN_X);
    a.rstd = ln_rstd(m, b, LN_X);
    a.w = ln_w(p, c, b, LN_X);
    a.b = ln_b(p, c, b, LN_X);
    if (b < 2 * c.num_layers) {
        a.mean_hx = ln_mean(m, b, LN_H);
        a.rstd_hx = ln_rstd(m, b, LN_H);
        a.mean_hy = ln_mean(m, b, LN_IN);
        a.rstd_hy = ln_rstd(m, b, LN_IN);
        a.wh = ln_w(p, c, b, LN_H);
        a.bh = ln_b(p, c, b, LN_H);
        a.W = hc_W(p, c, b);
        a.sc = hc_sc(p, c, b);
        a.A = hc_A(m, b);
        a.D = hc_D(m, b);
    }
    return a;
}

// x_b = A01 x_{b-1} + A11 y_{b-1} + A03 z;  y_b = A02 x_{b-1} + A12 y_{b-1} + A13 z  (z_{b-1} kept in acts.sum);
// then A = S + s tanh(LN_h(x_b, y_b) W) and u_b = LN(A00 x_b + A10 y_b), or at the head hf = LN_f(x_2L + y_2L):
// one kernel a boundary
static void boundary_forward_hc(GPT2* m, int b) {
    const GPT2Config& c = m->config;
    ParameterTensors* p = &m->params;
    HCBoundary a;
    memset(&a, 0, sizeof(a));
    if (b > 0) {
        a.x_prev = stream_x(m, b - 1);
        a.y_prev = stream_y(m, b - 1);
        a.z = m->acts.z;
        a.A_prev = hc_A(m, b - 1);
        a.z_keep = post_sum(m, b - 1);
        a.y = stream_y(m, b);
    }
    HCBoundaryGrad k = hc_kept(m, b);
    a.x = stream_x(m, b);
    a.u = boundary_u(m, b);
    a.mean = ln_mean(m, b, LN_X);
    a.rstd = ln_rstd(m, b, LN_X);
    a.w = k.w;
    a.b = k.b;
    if (b < 2 * c.num_layers) {
        a.mean_hx = ln_mean(m, b, LN_H);
        a.rstd_hx = ln_rstd(m, b, LN_H);
        a.mean_hy = ln_mean(m, b, LN_IN);
        a.rstd_hy = ln_rstd(m, b, LN_IN);
        a.wh = k.wh;
        a.bh = k.bh;
        a.S = hc_S(p, c, b);
        a.W = k.W;
        a.sc = k.sc;
        a.A = hc_A(m, b);
        a.D = hc_D(m, b);
    }
    hc_boundary_forward(a, m->B * m->T, c.channels);
}

// The start of sub-layer b (or the head) and the end of sub-layer b-1 in one kernel (hc.cuh): dx, dy hold dL/dx_b
// and dL/dy_b so far and leave as dL/dx_{b-1}, dL/dy_{b-1} so far (dL/dh0 in dx at b = 0); dz gets dL/dz_{b-1}
static void boundary_backward_hc(GPT2* m, int b) {
    const GPT2Config& c = m->config;
    GradTensors* g = &m->grads;
    int head = b == 2 * c.num_layers;
    HCBoundaryGrad a = hc_kept(m, b);
    a.du = m->acts.du;
    a.dx = m->acts.dx;
    a.dy = m->acts.dy;
    if (!head) a.dA_in = hc_dA(m, b);
    if (b > 0) {
        a.x_prev = stream_x(m, b - 1);
        a.y_prev = stream_y(m, b - 1);
        a.z_prev = post_sum(m, b - 1);
        a.A_prev = hc_A(m, b - 1);
        a.dz = m->acts.dz;
        a.dA_out = hc_dA(m, b - 1);
    }
    HCGradTargets t;
    memset(&t, 0, sizeof(t));
    t.arrays[4] = ln_w(g, c, b, LN_X);
    t.arrays[5] = ln_b(g, c, b, LN_X);
    if (!head) {
        for (int r = 0; r < 4; r++) t.arrays[r] = hc_W(g, c, b) + (size_t)r * c.channels;
        t.arrays[6] = ln_w(g, c, b, LN_H);
        t.arrays[7] = ln_b(g, c, b, LN_H);
        t.dS = hc_S(g, c, b);
        t.dsc = hc_sc(g, c, b);
    }
    hc_boundary_backward(a, t, m->B * m->T, c.channels);
}

// -r 1: u_s = LN(A00 x_s + A10 y_s) again, from the kept streams, A and statistics
static void recompute_u_hc(GPT2* m, int s) {
    hc_u_recompute(hc_kept(m, s), boundary_u(m, s), m->B * m->T, m->config.channels);
}

// post and residual start nothing: F reads x_b itself (and its backward adds into dx); the backward of a residual
// add is nothing too: dL/dz and dL/dx_{b-1} are dL/dx_b, which dx holds already
static void nothing(GPT2*, int) {}

// The one place that says which of the functions above run for a kind of sub-layer (BoundaryKind, above). The
// kinds a layout of this trainer mixes: Mix-LN's post blocks, then pre ones (post's end, then pre's start);
// HybridNorm's residual and normed sub-layers (hybrid), after a pre block (hybrid-star); siamese-hybrid's
// siamese_c1 and siamese ones, fused into one kernel a boundary either way; Peri-LN's last sub-layer before the head
// (peri's end, then pre's start: LN_f).
static BoundaryKind boundary_kind(SubLayerKind kind) {
    const int none = -1;
    switch (kind) {
        case SUBLAYER_PRE:  // fuses: HybridNorm's head, LN_f after its last (normed) sub-layer
            return {boundary_forward_pre, boundary_backward_pre, boundary_start_forward_pre, boundary_backward_pre,
                    boundary_end_forward_residual, nothing, recompute_u_pre, 1, 0, 0, SUBLAYER_NORMED};
        case SUBLAYER_POST:
            return {boundary_forward_post, boundary_backward_post, nothing, nothing, boundary_forward_post,
                    boundary_backward_post, nullptr, 0, 1, 0, none};
        case SUBLAYER_SIAMESE:  // the sum LN_in reads is recomputed from the statistics (siamese.cuh): no sum kept
            return {boundary_forward_siamese, boundary_backward_siamese, nullptr, nullptr, nullptr, nullptr,
                    recompute_u_siamese, 1, 0, 1, SUBLAYER_SIAMESE_C1};
        case SUBLAYER_RESIDUAL:  // u is x: nothing kept
            return {boundary_forward_residual, nothing, nothing, nothing, boundary_end_forward_residual, nothing,
                    nullptr, 0, 0, 0, none};
        case SUBLAYER_NORMED:  // the forward is pre's: x_b = base + z; u_b = LN(x_b); its backward adds dx to du
            return {boundary_forward_pre, boundary_backward_normed, boundary_start_forward_pre,
                    boundary_backward_normed, boundary_end_forward_residual, nothing, recompute_u_pre, 1, 0, 0,
                    SUBLAYER_RESIDUAL};
        case SUBLAYER_SIAMESE_C1:  // u = c1 * x + LN_y(y), kept; no sum
            return {boundary_forward_siamese_c1, boundary_backward_siamese_c1, nullptr, nullptr, nullptr, nullptr,
                    recompute_u_siamese_c1, 1, 0, 1, SUBLAYER_SIAMESE};
        case SUBLAYER_PERI:  // pre's start; z kept (the input of LN_out) and dL/dz apart from dL/dx
            return {boundary_forward_peri, boundary_backward_peri, boundary_start_forward_pre, boundary_backward_pre,
                    boundary_end_forward_peri, boundary_end_backward_peri, recompute_u_pre, 1, 1, 1, none};
        case SUBLAYER_HC:  // one kernel a boundary, the head's too; u kept (-r 1: recomputed), z kept (acts.sum:
                           // dA_j3 reads it), dL/dz apart from dL/dx
            return {boundary_forward_hc, boundary_backward_hc, nullptr, nullptr, nullptr, nullptr, recompute_u_hc, 1,
                    1, 1, none};
        case SUBLAYER_DEEPNORM: break;  // not run here (cuda = 0 in its row: refused before the model is built)
    }
    unknown_kind("sub-layer kind", kind);
}

// the input u_s of sub-layer s for its backward pass: kept by the forward pass, or recomputed now (-r 1)
static const floatX* backward_input(GPT2* m, int s) {
    if (m->recompute) {
        void (*recompute)(GPT2*, int) = boundary_kind(sublayer_kind(m->config, s)).recompute_u;
        if (recompute) recompute(m, s);
    }
    return boundary_u(m, s);
}

[[noreturn]] static void no_boundary(GPT2* m, int b, int end, SubLayerKind start) {
    fail("internal: the CUDA trainer has no boundary from a %s sub-layer to a %s one (layout %s, boundary %d)",
         SUBLAYER_KIND_NAMES[end], SUBLAYER_KIND_NAMES[start], layout_of(m->config).name, b);
}

// boundary b: one kernel where sub-layers b-1 and b are of one kind; the end of the one, then the start of the
// other, where the kind changes
static void boundary_forward(GPT2* m, int b) {
    profile_part("norms");
    int end = boundary_end(m, b);
    SubLayerKind start = boundary_start(m, b);
    BoundaryKind k = boundary_kind(start);
    if (end == (int)start || end == NO_SUBLAYER || end == k.fuses) return k.forward(m, b);
    BoundaryKind e = boundary_kind((SubLayerKind)end);
    if (!e.end_forward || !k.start_forward) no_boundary(m, b, end, start);
    e.end_forward(m, b);
    k.start_forward(m, b);
}

// the reverse: the start's backward, then the end's
static void boundary_backward(GPT2* m, int b) {
    profile_part("norms");
    int end = boundary_end(m, b);
    SubLayerKind start = boundary_start(m, b);
    BoundaryKind k = boundary_kind(start);
    if (end == (int)start || end == NO_SUBLAYER || end == k.fuses) return k.backward(m, b);
    BoundaryKind e = boundary_kind((SubLayerKind)end);
    if (!e.end_backward || !k.start_backward) no_boundary(m, b, end, start);
    k.start_backward(m, b);
    e.end_backward(m, b);
}

// ----------------------------------------------------------------------------------------------------------------
// The two sub-layers F that all layouts share: causal self-attention and the MLP of block l, z = F(u).
// Backward: from dz to du (du_beta 0: du = ..., 1: du += ..., for post, whose du is dx) and the weight gradients.

// QKV-norm (the layouts whose row says qkv_norm): the normalized q, k, v of layer l, qkvn = LN_qkv(qkv_in), into
// the rows the attention reads (cuDNN: its kept rows; the others: the product's scratch, before the permute), from
// the kept product and, with recompute (-r 1's backward pass), the kept statistics
static floatX* qkv_norm_rows_of(GPT2* m, int l) { return m->attention == ATTENTION_CUDNN ? layer_qkvr(m, l) : m->acts.qkv; }
static void layer_qkv_norm_forward(GPT2* m, int l, int recompute) {
    int NH = m->config.num_heads;
    qkv_norm_forward(qkv_norm_rows_of(m, l), layer_qkv_mean(m, l), layer_qkv_rstd(m, l), layer_qkv_in(m, l),
                     layer_qkv_norm(m, l), m->B * m->T, NH, m->config.channels / NH, recompute);
}

static void attention_block_forward(GPT2* m, int l, const floatX* u, floatX* z) {
    const GPT2Config& c = m->config;
    int B = m->B, T = m->T, C = c.channels, NH = c.num_heads, N = B * T;
    size_t NC = (size_t)N * C;
    ParameterTensors* p = &m->params;
    ActivationTensors* a = &m->acts;
    floatX* q = layer_qkvr(m, l);
    floatX* atty = a->atty + (size_t)l * NC;
    const floatX *qkvw = p->qkvw + (size_t)l * 3 * C * C, *qkvb = p->qkvb + (size_t)l * 3 * C;
    int qkv_norm = layout_of(c).qkv_norm;
    const floatX* bias = qkv_norm ? nullptr : qkvb;  // what the permute adds: the normalized rows need nothing
    profile_part("attention matmuls");
    if (qkv_norm) {  // HybridNorm: qkv_in = u qkvw^T + qkvb, kept; the attention reads LN_qkv(qkv_in) (below)
        matmul_forward(layer_qkv_in(m, l), u, qkvw, qkvb, N, C, 3 * C);
    } else if (m->attention == ATTENTION_CUDNN) {  // cuDNN reads q, k, v from the product's rows: kept, with the bias
        matmul_forward(q, u, qkvw, qkvb, N, C, 3 * C);
    } else {  // the bias comes with the permute
        matmul_forward(a->qkv, u, qkvw, nullptr, N, C, 3 * C);
    }
    profile_part("attention core");
    if (qkv_norm) layer_qkv_norm_forward(m, l, 0);
    if (m->attention == ATTENTION_CUDNN) {
        attention_forward_cudnn(atty, layer_lse(m, l), q, B, T, NH, C / NH);
    } else if (m->attention == ATTENTION_FLASH) {
        permute_qkv(q, q + NC, q + 2 * NC, a->qkv, bias, B, T, NH, C / NH);
        flash_attention_forward(atty, layer_lse(m, l), q, q + NC, q + 2 * NC, B, T, C, NH);
    } else {
        floatX* att = a->att + (size_t)l * B * NH * T * T;
        attention_forward(atty, q, q + NC, q + 2 * NC, att, a->vaccum, a->qkv, bias, B, T, C, NH);
    }
    profile_part("attention matmuls");
    matmul_forward(z, atty, p->attprojw + (size_t)l * C * C, p->attprojb + (size_t)l * C, N, C, C);
}

static void attention_block_backward(GPT2* m, int l, const floatX* u, floatX* du, float du_beta, const floatX* dz) {
    const GPT2Config& c = m->config;
    int B = m->B, T = m->T, C = c.channels, NH = c.num_heads, N = B * T;
    size_t NC = (size_t)N * C;
    ParameterTensors* p = &m->params;
    GradTensors* g = &m->grads;
    ActivationTensors* a = &m->acts;
    floatX* q = layer_qkvr(m, l);
    const floatX* atty = a->atty + (size_t)l * NC;
    int qkv_norm = layout_of(c).qkv_norm;
    profile_part("attention matmuls");
    matmul_backward(a->datty, g->attprojw + (size_t)l * C * C, g->attprojb + (size_t)l * C, dz, atty,
                    p->attprojw + (size_t)l * C * C, N, C, C, 0.0f);
    profile_part("attention core");
    if (qkv_norm && m->recompute) {  // -r 1: the normalized q, k, v again, from qkv_in and the statistics
        layer_qkv_norm_forward(m, l, 1);
        if (m->attention != ATTENTION_CUDNN) permute_qkv(q, q + NC, q + 2 * NC, a->qkv, nullptr, B, T, NH, C / NH);
    }
    floatX *dq = a->dqkvr, *dk = dq + NC, *dv = dq + 2 * NC;
    if (m->attention == ATTENTION_CUDNN) {
        attention_backward_cudnn(a->dqkv, a->datty, q, atty, layer_lse(m, l), B, T, NH, C / NH);
    } else if (m->attention == ATTENTION_FLASH) {
        flash_attention_backward(dq, dk, dv, a->attD, a->datty, atty, q, q + NC, q + 2 * NC, layer_lse(m, l), B, T,
                                 C, NH);
        permute_qkv_backward(a->dqkv, dq, dk, dv, B, T, NH, C / NH);
    } else {
        const floatX* att = a->att + (size_t)l * B * NH * T * T;
        attention_backward(a->dqkv, dq, dk, dv, a->datt, a->dvaccum, a->datty, q, q + NC, q + 2 * NC, att, B, T, C,
                           NH);
    }
    if (qkv_norm) {  // dqkv: from the normalized rows' gradient to the product's, dqkv = LN_qkv'(dqkv)
        int hs = C / NH;
        GradTargets t = {{g->lnqkvw[0] + (size_t)l * hs, g->lnqkvb[0] + (size_t)l * hs, g->lnqkvw[1] + (size_t)l * hs,
                          g->lnqkvb[1] + (size_t)l * hs, g->lnqkvw[2] + (size_t)l * hs, g->lnqkvb[2] + (size_t)l * hs}};
        qkv_norm_backward(a->dqkv, t, layer_qkv_in(m, l), layer_qkv_mean(m, l), layer_qkv_rstd(m, l),
                          layer_qkv_norm(m, l), N, NH, hs);
    }
    profile_part("attention matmuls");
    matmul_backward(du, g->qkvw + (size_t)l * 3 * C * C, g->qkvb + (size_t)l * 3 * C, a->dqkv, u,
                    p->qkvw + (size_t)l * 3 * C * C, N, C, 3 * C, du_beta);
}

static void mlp_block_forward(GPT2* m, int l, const floatX* u, floatX* z) {
    const GPT2Config& c = m->config;
    int C = c.channels, N = m->B * m->T;
    size_t n4 = (size_t)N * 4 * C;
    ParameterTensors* p = &m->params;
    floatX* fch = m->acts.fch + (size_t)l * n4;
    floatX* fch_gelu = m->acts.fch_gelu + (m->recompute ? 0 : (size_t)l * n4);
    profile_part("mlp");
    // fch = u fcw^T + fcb (kept for the backward pass) and fch_gelu = gelu(fch): both from the product's epilogue,
    // or a product and a kernel
    const floatX *fcw = p->fcw + (size_t)l * 4 * C * C, *fcb = p->fcb + (size_t)l * 4 * C;
    if (!gemm_epilogue(CUBLAS_OP_T, CUBLAS_OP_N, 4 * C, N, C, fcw, C, u, C, fch_gelu, EPILOGUE_GELU_AUX_BIAS, fcb, fch)) {
        matmul_forward(fch, u, fcw, nullptr, N, C, 4 * C);
        launch_packs(n4, 4 * C, {fch_gelu, fch, fcb}, [&](int grid, size_t packs, auto p) {
            auto kernel = bias_gelu_forward_kernel<decltype(p)::value>;
            kernel<<<grid, ELEMENTWISE_THREADS>>>(fch_gelu, fch, fcb, packs, 4 * C);
        });
    }
    matmul_forward(z, fch_gelu, p->fcprojw + (size_t)l * C * 4 * C, p->fcprojb + (size_t)l * C, N, 4 * C, C);
}

static void mlp_block_backward(GPT2* m, int l, const floatX* u, floatX* du, float du_beta, const floatX* dz) {
    const GPT2Config& c = m->config;
    int C = c.channels, N = m->B * m->T;
    size_t n4 = (size_t)N * 4 * C;
    ParameterTensors* p = &m->params;
    GradTensors* g = &m->grads;
    floatX* dfch = m->acts.dfch;
    const floatX* fch = m->acts.fch + (size_t)l * n4;
    floatX* fch_gelu = m->acts.fch_gelu + (m->recompute ? 0 : (size_t)l * n4);
    profile_part("mlp");
    if (m->recompute) {  // -r 1: gelu(fch) again, into the one fch_gelu buffer
        launch_packs(n4, 4 * C, {fch_gelu, fch}, [&](int grid, size_t packs, auto p) {
            gelu_forward_kernel<decltype(p)::value><<<grid, ELEMENTWISE_THREADS>>>(fch_gelu, fch, packs);
        });
    }
    // dL/dfch = (dz fcprojw) * gelu'(fch): in one product (its epilogue), or a product and a kernel; then the
    // fcproj weight and bias gradients
    const floatX* fcprojw = p->fcprojw + (size_t)l * C * 4 * C;
    if (!gemm_epilogue(CUBLAS_OP_N, CUBLAS_OP_N, 4 * C, N, C, fcprojw, 4 * C, dz, C, dfch, EPILOGUE_DGELU, nullptr,
                       fch)) {
        gemm(CUBLAS_OP_N, CUBLAS_OP_N, 4 * C, N, C, 1.0f, fcprojw, 4 * C, dz, C, 0.0f, dfch, 4 * C);
        launch_packs(n4, 4 * C, {dfch, fch}, [&](int grid, size_t packs, auto p) {
            gelu_backward_kernel<decltype(p)::value><<<grid, ELEMENTWISE_THREADS>>>(dfch, fch, dfch, packs);
        });
    }
    matmul_backward_weights(g->fcprojw + (size_t)l * C * 4 * C, g->fcprojb + (size_t)l * C, dz, fch_gelu, N, 4 * C, C);
    matmul_backward(du, g->fcw + (size_t)l * 4 * C * C, g->fcb + (size_t)l * 4 * C, dfch, u,
                    p->fcw + (size_t)l * 4 * C * C, N, C, 4 * C, du_beta);
}

// ----------------------------------------------------------------------------------------------------------------
// forward, backward, update

// Runs the model on inputs (B, T) (host arrays); with targets also the loss (mean_loss). Any B and T up to the
// first call's shape work. With grad_loss_scale > 0 (training) the classifier also leaves the gradient of
// grad_loss_scale * mean loss with respect to the logits, in place of the logits, for gpt2_backward.
static void gpt2_forward(GPT2* m, const int* inputs, const int* targets, int B, int T, float grad_loss_scale = 0) {
    const GPT2Config& c = m->config;
    int first = !m->acts_memory;  // the first call sizes the activations
    check_batch(c, inputs, targets, B, T, first ? B : m->batch_size, first ? T : m->seq_len);
    if (first) gpt2_allocate_activations(m, B, T);
    m->B = B;
    m->T = T;
    int C = c.channels, N = B * T, L = c.num_layers;
    profile_part("copies and syncs");
    cudaCheck(cudaMemcpy(m->inputs, inputs, (size_t)N * sizeof(int), cudaMemcpyHostToDevice));
    if (targets) cudaCheck(cudaMemcpy(m->targets, targets, (size_t)N * sizeof(int), cudaMemcpyHostToDevice));
    ActivationTensors* a = &m->acts;

    profile_part("embedding");
    encoder_forward(stream_x(m, 0), m->inputs, m->params.wte, m->params.wpe, N, T, C);  // x_0 = h0
    boundary_forward(m, 0);
    for (int s = 0; s < 2 * L; s++) {
        if (s % 2 == 0) attention_block_forward(m, s / 2, boundary_u(m, s), a->z);
        else mlp_block_forward(m, s / 2, boundary_u(m, s), a->z);
        boundary_forward(m, s + 1);
    }
    profile_part("logits and loss");
    matmul_forward(a->logits, boundary_u(m, 2 * L), m->params.wte, nullptr, N, C, c.padded_vocab_size);
    m->has_dlogits = 0;
    m->mean_loss = -1;
    if (targets) {
        float dloss = grad_loss_scale > 0 ? grad_loss_scale / N : 0.0f;  // d(scale * mean loss) / d(loss of a row)
        classifier(a->logits, a->losses, m->targets, N, c.vocab_size, c.padded_vocab_size, dloss);
        profile_part("copies and syncs");
        if (dloss > 0) {  // the backward pass's wte index, built while the GPU runs the forward pass
            m->index_tokens = build_token_index(inputs, N, c.vocab_size, &m->host_count, &m->host_index);
            cudaCheck(cudaMemcpy(m->token_index, m->host_index.data(), m->host_index.size() * sizeof(int),
                                 cudaMemcpyHostToDevice));
        }
        download(&m->host_losses, a->losses, N);
        double sum = 0;
        for (int i = 0; i < N; i++) sum += m->host_losses[i];
        m->mean_loss = (float)(sum / N);
        m->has_dlogits = dloss > 0;
    }
}

static void gpt2_zero_grad(GPT2* m) {
    profile_part("optimizer");
    cudaCheck(cudaMemset(m->grads_memory, 0, m->num_parameters * sizeof(float)));
}

// Accumulates the gradient of grad_loss_scale * mean_loss (from the training forward pass) into the parameter
// gradients. Mirrors reference_cpu.cpp's gpt2_backward, boundary by boundary.
static void gpt2_backward(GPT2* m) {
    if (!m->has_dlogits) fail("backward needs a forward pass with targets and a loss scale");
    const GPT2Config& c = m->config;
    int B = m->B, T = m->T, C = c.channels, N = B * T, L = c.num_layers;
    ActivationTensors* a = &m->acts;

    // logits = hf @ wte^T:  dhf = dlogits @ wte (into du; the identity head: into dx, overwriting);
    // dwte += dlogits^T @ hf
    profile_part("logits and loss");
    matmul_backward(grad_dhf(m), m->grads.wte, nullptr, a->logits, boundary_u(m, 2 * L), m->params.wte, N, C,
                    c.padded_vocab_size, 0.0f);
    boundary_backward(m, 2 * L);
    for (int s = 2 * L - 1; s >= 0; s--) {
        float du_beta;
        floatX *du = grad_du(m, s, &du_beta), *dz = grad_dz(m, s);
        if (s % 2 == 0) attention_block_backward(m, s / 2, backward_input(m, s), du, du_beta, dz);
        else mlp_block_backward(m, s / 2, backward_input(m, s), du, du_beta, dz);
        boundary_backward(m, s);
    }
    // dx now holds dL/dh0 (siamese: both streams' share, added by boundary 0)
    profile_part("embedding");
    encoder_backward(m->grads.wte, m->grads.wpe, a->dx, m->token_index, m->index_tokens, B, T, C);
    m->has_dlogits = 0;
}

// FLOPs of one token of training, as llm.c counts them for its MFU: 6 N for the parameters (2 N forward, 4 N
// backward: every weight is one multiply-add per token in each of the three products) plus 6 L C T for the
// attention products q k^T and att v (forward and backward, the causal half not discounted). N counts every
// parameter, LayerNorms and embeddings included, as llm.c does; SiameseNorm's extra LayerNorms add 0.062% to N.
static double flops_per_token(const GPT2* m, int T) {
    const GPT2Config& c = m->config;
    return 6.0 * m->num_parameters + 6.0 * c.num_layers * c.channels * T;
}

// the sum of squares of the n floats at p (parameters or gradients): per-block partial sums in double, added on the
// host in order
static double sum_of_squares(GPT2* m, const float* p, size_t n) {
    sum_squares_kernel<<<NORM_BLOCKS, NORM_THREADS>>>(m->norm_partials, p, n);
    launchCheck();
    download(&m->host_partials, m->norm_partials, NORM_BLOCKS);
    double total = 0;
    for (double s : m->host_partials) total += s;
    return total;
}

static double gpt2_grad_norm(GPT2* m) {
    profile_part("optimizer");
    return std::sqrt(sum_of_squares(m, m->grads_memory, m->num_parameters));
}

typedef struct {
    float learning_rate, beta1, beta2, eps, weight_decay;
} AdamWConfig;

// AdamW (Loshchilov & Hutter) with bias correction; step t counts from 1. The gradient is multiplied by
// grad_scale first (global-norm clipping). Weight decay is decoupled and applies to 2-D weight matrices only.
// Updates the parameters [opt_begin, opt_end) (all, but for a rank's shard under ZeRO-1).
static void gpt2_update(GPT2* m, const AdamWConfig& o, float grad_scale, int t) {
    profile_part("optimizer");
    float bc1 = 1 - (float)std::pow((double)o.beta1, t), bc2 = 1 - (float)std::pow((double)o.beta2, t);
    for (const TensorInfo& tensor : m->tensors) {
        size_t begin = std::max(tensor.offset, m->opt_begin), end = std::min(tensor.offset + tensor.size, m->opt_end);
        if (begin >= end) continue;
        float wd = tensor.decay ? o.weight_decay : 0.0f;
        adamw_kernel<<<elementwise_grid(end - begin), ELEMENTWISE_THREADS>>>(
            m->params_memory + (begin - m->master_begin),
            (void*)m->params_x == (void*)m->params_memory ? nullptr : m->params_x + begin, m->grads_memory + begin,
            m->m_memory + (begin - m->opt_begin), m->v_memory + (begin - m->opt_begin), end - begin,
            o.learning_rate, o.beta1, o.beta2, bc1, bc2, o.eps, wd, grad_scale);
        launchCheck();
    }
}

static void gpt2_free(GPT2* m) {
    if ((void*)m->params_x != (void*)m->params_memory) cudaCheck(cudaFree(m->params_x));
    cudaCheck(cudaFree(m->params_memory));
    cudaCheck(cudaFree(m->grads_memory));
    cudaCheck(cudaFree(m->m_memory));
    cudaCheck(cudaFree(m->v_memory));
    cudaCheck(cudaFree(m->norm_partials));
    cudaCheck(cudaFree(m->acts_memory));
    cudaCheck(cudaFree(m->inputs));
    cudaCheck(cudaFree(m->targets));
    cudaCheck(cudaFree(m->token_index));
    m->tensors.clear();
    m->acts_memory = nullptr;
}

// ----------------------------------------------------------------------------------------------------------------
// data parallelism: the NCCL back end (host/distributed.h holds the design and the MPI side), as llm.c does it. One
// GPU per rank; rank 0 makes the communicator's id and MPI hands it to the others. Built with NCCL where `make` finds
// it beside MPI (-DUSE_NCCL); without it, a run of several ranks stops at once. The collectives run on the default
// stream, ordered with the kernels around them.

#ifdef USE_NCCL
#include <nccl.h>

#define ncclCheck(call) nccl_check((call), #call, __FILE__, __LINE__)
static void nccl_check(ncclResult_t r, const char* call, const char* file, int line) {
    if (r != ncclSuccess) fail("NCCL: %s (%s) at %s:%d", ncclGetErrorString(r), call, file, line);
}

inline ncclDataType_t nccl_type(const float*) { return ncclFloat; }
#ifndef ENABLE_FP32
inline ncclDataType_t nccl_type(const floatX*) { return ncclBfloat16; }
#endif

static ncclComm_t nccl_comm = nullptr;  // under mpirun (also -np 1), after nccl_init

static void nccl_init() {
    if (!dist.mpi) return;
    ncclUniqueId id;
    if (dist.rank == 0) ncclCheck(ncclGetUniqueId(&id));
    dist_broadcast_bytes(&id, sizeof(id));
    ncclCheck(ncclCommInitRank(&nccl_comm, dist.size, id, dist.rank));
}

static void nccl_free() {
    if (nccl_comm) ncclCheck(ncclCommDestroy(nccl_comm));
    nccl_comm = nullptr;
}

// buf[0..n) = its sum over the ranks, in place
static void nccl_sum(float* buf, size_t n) {
    if (nccl_comm) ncclCheck(ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, nccl_comm, 0));
}

// every rank's shard of buf[0..n) (host/distributed.h's shard_begin) to every rank, in place: one broadcast from
// each rank, grouped (the shards need not be of one size, as ncclAllGather's must)
template <typename T>
static void nccl_gather_shards(T* buf, size_t n) {
    if (!nccl_comm) return;
    ncclCheck(ncclGroupStart());
    for (int r = 0; r < dist.size; r++)
        ncclCheck(ncclBroadcast(buf + shard_begin(n, r), buf + shard_begin(n, r), shard_end(n, r) - shard_begin(n, r),
                                nccl_type(buf), r, nccl_comm, 0));
    ncclCheck(ncclGroupEnd());
}
#else
static void nccl_init() {
    if (dist.size > 1)
        fail("this train_gpt2cu was built without NCCL, so it trains on one GPU: rebuild where NCCL is installed "
             "(nccl.h beside nvcc, or in /usr/include) for %d ranks", dist.size);
}
static void nccl_free() {}
static void nccl_sum(float*, size_t) {}
template <typename T>
static void nccl_gather_shards(T*, size_t) {}
#endif

// ----------------------------------------------------------------------------------------------------------------
// the trainer: the training loop is train_main in host/train_loop.h, shared with the CPU trainer (its flags, logs,
// checkpoints and samples); these are its hooks, plus -f for TF32 and -r for recomputation

#ifndef TRAIN_GPT2_NO_MAIN

// one GPU per rank: rank r of a machine drives its GPU r; under mpirun the NCCL communicator is set up
static void train_backend_init(GPT2* m, const TrainOptions& o) {
    if (o.attention) m->attention = parse_attention(o.attention);  // before the device starts: a typo fails at once
    check_cuda_layout(o.norm);
    if (dist.size > 1) {  // every rank asks, and rank 0 says it once if a machine has too few
        int count = 0;
        cudaError_t err = cudaGetDeviceCount(&count);
        if (err != cudaSuccess) count = 0;
        if (!dist_all(count >= dist.local_size))
            dist_fail_together("%d ranks on this machine but %d GPU(s)%s%s%s, or too few on another machine: the "
                               "CUDA trainer takes one GPU per rank (mpirun -np at most the GPUs; in a hostfile, "
                               "slots = the machine's GPUs)", dist.local_size, count, err ? " (" : "",
                               err ? cudaGetErrorString(err) : "", err ? ")" : "");
    }
    gpu_init(o.tf32, dist.local_rank);
    m->recompute = o.recompute;  // before gpt2_allocate_activations, which sizes for it
    m->zero = o.zero;            // before gpt2_allocate_parameters, which keeps this rank's shard
    nccl_init();
}

static void train_backend_free(GPT2*) { nccl_free(); }

// The gradients of the step's micro-batches accumulate in place; NCCL sums the ranks' once a step (below).
static double train_micro_step(GPT2* m, const int* inputs, const int* targets, int B, int T, double loss_scale,
                               int) {
    gpt2_forward(m, inputs, targets, B, T, (float)loss_scale);  // leaves dlogits in place of the logits
    if (std::isfinite(m->mean_loss)) gpt2_backward(m);
    return m->mean_loss;
}

// after the step's last micro-batch: the sum over the ranks, in NCCL's order (host/distributed.h says what the CPU
// back end does to be exact); with one rank under mpirun NCCL's sum is a copy, so the run matches one without mpirun
static void train_sum_gradients(GPT2* m, int, int last) {
    if (last) nccl_sum(m->grads_memory, m->num_parameters);
}

// the softmax of the V real logits at the last position, on the host in double
static void train_next_token_probs(GPT2* m, const int* tokens, int n, std::vector<double>* probs) {
    gpt2_forward(m, tokens, nullptr, 1, n);
    int V = m->config.vocab_size;
    std::vector<floatX> logits = download(m->acts.logits + (size_t)(n - 1) * m->config.padded_vocab_size, V);
    double maxv = (double)(float)logits[0], sum = 0;
    for (int i = 1; i < V; i++) maxv = std::max(maxv, (double)(float)logits[i]);
    probs->resize(V);
    for (int i = 0; i < V; i++) sum += (*probs)[i] = std::exp((double)(float)logits[i] - maxv);
    for (int i = 0; i < V; i++) (*probs)[i] /= sum;
}

// every rank has the whole gradient; under -z 1 each updates its shard and the parameters the kernels read are
// gathered (NCCL)
static void train_update(GPT2* m, const TrainOptions& o, double lr, double grad_scale, int t) {
    AdamWConfig opt = {(float)lr, 0.9f, 0.95f, 1e-8f, (float)o.weight_decay};
    gpt2_update(m, opt, (float)grad_scale, t);
    if (m->zero) nccl_gather_shards(m->params_x, m->num_parameters);
}

// the float32 master weights are all finite exactly when their sum of squares in double is (no float squared
// overflows a double); under -z 1 each rank checks its shard
static bool train_params_finite(GPT2* m) {
    return dist_all(std::isfinite(sum_of_squares(m, m->params_memory, master_count(m))));
}

// the master weights and the moments, gathered to rank 0 where a rank holds its shard only (MPI, on the host);
// rank 0 writes both files
static SavedFiles train_save(GPT2* m, const char* model_path, const char* state_path, const TrainState& st) {
    size_t n = m->num_parameters, shard = m->opt_end - m->opt_begin;
    auto whole = [&](const float* device, size_t count) {  // on rank 0: all n values
        return count == n ? (dist.rank == 0 ? download(device, n) : std::vector<float>())
                          : dist_gather_to_rank0(download(device, count).data(), n);
    };
    std::vector<float> params = whole(m->params_memory, master_count(m)), mm = whole(m->m_memory, shard),
                       vv = whole(m->v_memory, shard);
    if (dist.rank != 0) return {};
    FileSum model = checkpoint_write(model_path, m->config, params.data());  // master weights
    return {model, state_write(state_path, st, mm.data(), vv.data())};
}

static TrainState train_load_state(GPT2* m, const char* path, DataLoader* loader) {
    size_t n = m->num_parameters, shard = m->opt_end - m->opt_begin;
    std::vector<float> m_host(shard), v_host(shard);
    TrainState st = state_read(path, n, loader, m_host.data(), v_host.data(), m->opt_begin, m->opt_end);
    cudaCheck(cudaMemcpy(m->m_memory, m_host.data(), shard * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(m->v_memory, v_host.data(), shard * sizeof(float), cudaMemcpyHostToDevice));
    return st;
}

static void train_describe(GPT2* m, const TrainOptions& o, std::vector<std::pair<std::string, std::string>>* rows) {
    char line[256];
    snprintf(line, sizeof(line), "%s (%d SMs)", gpu.name, gpu.sms);
    rows->push_back({"device", line});
    rows->push_back({"precision", !FLOATX_IS_FLOAT ? "bf16 mixed (float32 master weights and AdamW)"
                                  : o.tf32        ? "float32, TF32 tensor-core matmuls (-f 1)"
                                                  : "float32"});
    rows->push_back({"attention", ATTENTION_NAMES[m->attention]});
#if USE_CUBLASLT
    rows->push_back({"bias and GELU", gpu.no_epilogues ? "separate kernels (TRAIN_GPT2_EPILOGUES=0)"
                                                       : "cuBLASLt epilogues (off: TRAIN_GPT2_EPILOGUES=0)"});
#else
    rows->push_back({"bias and GELU", "separate kernels (no cuBLASLt in this build)"});
#endif
    if (gpu.peak_flops > 0) {
        snprintf(line, sizeof(line), "%.1f TFLOP/s (datasheet, dense); %.3g GFLOP a token", gpu.peak_flops / 1e12,
                 flops_per_token(m, m->seq_len) / 1e9);
        rows->push_back({"MFU against", line});
    }
    size_t shard = m->opt_end - m->opt_begin;  // -z 1: the master weights (bf16) and moments of a shard
    double bytes = m->num_parameters * (parameter_bytes() - 3 * sizeof(float)) + 4.0 * master_count(m) + 8.0 * shard;
    snprintf(line, sizeof(line), "%.0f MiB parameters+grads+AdamW%s, %.0f MiB activations%s", bytes / 1048576.0,
             shard < m->num_parameters ? " (-z 1)" : "", m->acts_bytes / 1048576.0, m->recompute ? " (-r 1)" : "");
    rows->push_back({"memory", line});
}

// " | MFU x% | y MiB GPU" after the CPU trainer's progress line
static std::string train_progress_suffix(GPT2* m, double tokens_per_s) {
    char mfu[32] = "-", line[96];
    if (gpu.peak_flops > 0)
        snprintf(mfu, sizeof(mfu), "%.1f%%", 100 * tokens_per_s * flops_per_token(m, m->seq_len) / gpu.peak_flops);
    snprintf(line, sizeof(line), " | MFU %s | %.0f MiB GPU", mfu, gpu_memory_used_mib());
    return line;
}

static void train_sync(GPT2*) { cudaCheck(cudaDeviceSynchronize()); }

int main(int argc, char** argv) { return train_main<GPT2>(argc, argv); }
#endif  // TRAIN_GPT2_NO_MAIN
