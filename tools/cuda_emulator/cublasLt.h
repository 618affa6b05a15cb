// A CPU stand-in for the part of cuBLASLt that train_gpt2.cu uses (tools/emulate_gpu.sh): one matmul with the
// epilogues DEFAULT, BIAS, GELU_AUX_BIAS and DGELU, from their documented definitions, column-major as in cuBLAS:
//   acc(i, j) = alpha sum_p op(A)(i, p) op(B)(p, j) + beta C(i, j)     (the sum in double, operands as stored)
//   BIAS:          D = acc + bias(i)
//   GELU_AUX_BIAS: aux(i, j) = acc + bias(i) (stored at aux[i + j * aux_ld]), D = gelu(acc + bias(i))
//   DGELU:         D = acc * gelu'(aux(i, j))
// GELU is the tanh approximation, as cuBLASLt's. The aux leading dimension must be a multiple of 8, as cuBLASLt asks,
// and every matrix and vector 16-byte aligned (train_gpt2.cu's gemm_epilogue promises both). EMU_LT_HEURISTIC and
// EMU_LT_MATMUL (below) make the heuristic or the product fail, as they may on a GPU, for the caller's fallback.
#pragma once
#include "cublas_v2.h"
typedef void* cublasLtHandle_t;
enum cublasLtEpilogue_t {
    CUBLASLT_EPILOGUE_DEFAULT = 1,
    CUBLASLT_EPILOGUE_BIAS = 4,
    CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 164,
    CUBLASLT_EPILOGUE_DGELU = 192
};
enum cublasLtMatmulDescAttributes_t {
    CUBLASLT_MATMUL_DESC_TRANSA,
    CUBLASLT_MATMUL_DESC_TRANSB,
    CUBLASLT_MATMUL_DESC_EPILOGUE,
    CUBLASLT_MATMUL_DESC_BIAS_POINTER,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD
};
enum cublasLtMatmulPreferenceAttributes_t {
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES
};
struct EmuLtDesc {
    cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
    int epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    const void* bias = nullptr;
    void* aux = nullptr;
    int64_t aux_ld = 0;
};
struct EmuLtLayout {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
};
typedef EmuLtDesc* cublasLtMatmulDesc_t;
typedef EmuLtLayout* cublasLtMatrixLayout_t;
typedef void* cublasLtMatmulPreference_t;
struct cublasLtMatmulAlgo_t {
    uint64_t data[8];
};
struct cublasLtMatmulHeuristicResult_t {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize;
    cublasStatus_t state;
    float wavesCount;
    int reserved[4];
};
inline cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) { *h = nullptr; return 0; }
inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t, cudaDataType_t) {
    *d = new EmuLtDesc();
    return 0;
}
inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { delete d; return 0; }
inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a,
                                                     const void* v, size_t) {
    switch (a) {
        case CUBLASLT_MATMUL_DESC_TRANSA: d->ta = *(const cublasOperation_t*)v; break;
        case CUBLASLT_MATMUL_DESC_TRANSB: d->tb = *(const cublasOperation_t*)v; break;
        case CUBLASLT_MATMUL_DESC_EPILOGUE: d->epilogue = *(const cublasLtEpilogue_t*)v; break;
        case CUBLASLT_MATMUL_DESC_BIAS_POINTER: d->bias = *(const void* const*)v; break;
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: d->aux = *(void* const*)v; break;
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: d->aux_ld = *(const int64_t*)v; break;
    }
    return 0;
}
inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType_t t, uint64_t rows,
                                                 uint64_t cols, int64_t ld) {
    *l = new EmuLtLayout{t, rows, cols, ld};
    return 0;
}
inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { delete l; return 0; }
inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) { *p = nullptr; return 0; }
inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t) { return 0; }
inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t,
                                                           cublasLtMatmulPreferenceAttributes_t, const void*, size_t) {
    return 0;
}
inline cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t,
                                                     cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                                     cublasLtMatrixLayout_t, cublasLtMatmulPreference_t, int,
                                                     cublasLtMatmulHeuristicResult_t* r, int* found) {
    memset(r, 0, sizeof(*r));
    *found = 1;
    // EMU_LT_HEURISTIC, read at every call (a test may set it while it runs), makes the heuristic find no usable
    // algorithm, as cuBLASLt may on a GPU: a status number (15 CUBLAS_STATUS_NOT_SUPPORTED, for a combination it has
    // no kernel for; 14 INTERNAL_ERROR, 7 INVALID_VALUE, ...: returned, nothing found), "none" (success, but no
    // algorithm found) or "state" (one found, its state not CUBLAS_STATUS_SUCCESS)
    const char* fault = getenv("EMU_LT_HEURISTIC");
    if (fault && *fault) {
        if (!strcmp(fault, "none")) *found = 0;
        else if (!strcmp(fault, "state")) r->state = CUBLAS_STATUS_NOT_SUPPORTED;
        else { *found = 0; return atoi(fault); }
    }
    return 0;
}
EMU_INLINE float emu_gelu(float x) {
    const float k = 0.79788456080286535588f;
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}
EMU_INLINE float emu_gelu_grad(float x) {
    const float k = 0.79788456080286535588f;
    float th = tanhf(k * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * k * (1.0f + 3.0f * 0.044715f * x * x);
}
inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t d, const void* alpha, const void* A,
                                     cublasLtMatrixLayout_t la, const void* B, cublasLtMatrixLayout_t lb,
                                     const void* beta, const void* C, cublasLtMatrixLayout_t lc, void* D,
                                     cublasLtMatrixLayout_t ld, const cublasLtMatmulAlgo_t*, void*, size_t, int) {
    // EMU_LT_MATMUL=<status number>, read at every call: the product fails with that status and writes nothing (a
    // cuBLASLt kernel that does not launch), for the program's handling of it
    const char* fault = getenv("EMU_LT_MATMUL");
    if (fault && *fault) return atoi(fault);
    int m = (int)ld->rows, n = (int)ld->cols;
    int k = (int)(d->ta == CUBLAS_OP_N ? la->cols : la->rows);
    if ((d->tb == CUBLAS_OP_N ? lb->rows : lb->cols) != (uint64_t)k || lc->rows != ld->rows || C != D ||
        (d->ta == CUBLAS_OP_N ? la->rows : la->cols) != (uint64_t)m || (d->tb == CUBLAS_OP_N ? lb->cols : lb->rows) != (uint64_t)n) {
        emu_error("cublasLtMatmul: the shapes of A, B, C and D do not agree");
    }
    if (d->aux && d->aux_ld % 8) emu_error("cublasLtMatmul: aux ld %lld not a multiple of 8", (long long)d->aux_ld);
    for (const void* p : {A, B, (const void*)D, d->bias, (const void*)d->aux})
        if ((uintptr_t)p % 16) emu_error("cublasLtMatmul: pointer %p not 16-byte aligned", p);
    float a = *(const float*)alpha, b = *(const float*)beta;
    emu_gemm_calls++;
    cudaDataType_t type = ld->type;
    size_t ldd = ld->ld, aux_ld = d->aux_ld;
    int epilogue = d->epilogue;
    const void* bias = d->bias;
    void* aux = d->aux;
    emu_products(d->ta, d->tb, m, n, k, A, la->type, la->ld, B, lb->type, lb->ld,
                 [=](int i, int j, double s) __attribute__((always_inline)) {
        size_t c = i + (size_t)j * ldd;
        float acc = (float)(b == 0.0f ? a * s : a * s + b * emu_get(D, c, type));
        if (epilogue == CUBLASLT_EPILOGUE_BIAS) {
            acc += (float)emu_get(bias, i, type);
        } else if (epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
            acc += (float)emu_get(bias, i, type);
            emu_put(aux, i + (size_t)j * aux_ld, type, acc);
            acc = emu_gelu(acc);
        } else if (epilogue == CUBLASLT_EPILOGUE_DGELU) {
            acc *= emu_gelu_grad((float)emu_get(aux, i + (size_t)j * aux_ld, type));
        }
        emu_put(D, c, type, acc);
    });
    emu_check_all_guards();  // a product that wrote past its D or aux
    return 0;
}
