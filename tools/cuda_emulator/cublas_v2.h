// A CPU stand-in for the cuBLAS calls train_gpt2.cu uses (tools/emulate_gpu.sh), from cuBLAS's column-major definition:
// C(i,j) = alpha * sum_p op(A)(i,p) op(B)(p,j) + beta * C(i,j); op N: A(i,p) = A[i + p*lda]; op T: A[p + i*lda].
// With beta = 0, C is not read (as in cuBLAS). Float32 and bf16 operands (bf16 read exactly, the sum in double, the
// result rounded to C's type), as the GPU's float32 accumulation does up to the order of the sum.
#pragma once
#include "cuda_runtime.h"
#include "cuda_bf16.h"
typedef int cublasStatus_t;
#define CUBLAS_STATUS_SUCCESS 0
#define CUBLAS_STATUS_NOT_SUPPORTED 15
typedef void* cublasHandle_t;
enum cublasOperation_t { CUBLAS_OP_N, CUBLAS_OP_T };
enum cublasComputeType_t { CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_FAST_TF32 };
enum cudaDataType_t { CUDA_R_32F, CUDA_R_16BF };
enum cublasGemmAlgo_t { CUBLAS_GEMM_DEFAULT };
enum cublasMath_t { CUBLAS_DEFAULT_MATH, CUBLAS_TF32_TENSOR_OP_MATH };
inline const char* cublasGetStatusString(cublasStatus_t) { return "emulated"; }
inline cublasStatus_t cublasCreate(cublasHandle_t* h) { *h = nullptr; return 0; }
inline cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return 0; }
inline long long emu_gemm_calls;
inline double emu_get(const void* p, size_t i, cudaDataType_t t) {
    return t == CUDA_R_16BF ? (double)(float)((const __nv_bfloat16*)p)[i] : (double)((const float*)p)[i];
}
inline void emu_put(void* p, size_t i, cudaDataType_t t, double v) {
    if (t == CUDA_R_16BF) ((__nv_bfloat16*)p)[i] = __nv_bfloat16((float)v);
    else ((float*)p)[i] = (float)v;
}
// element (i, j) of op(A) op(B), column-major, in double: the definition of every product the emulator runs
inline double emu_dot(cublasOperation_t ta, cublasOperation_t tb, int i, int j, int k, const void* A,
                      cudaDataType_t at, size_t lda, const void* B, cudaDataType_t bt, size_t ldb) {
    double s = 0;
    for (int p = 0; p < k; p++) {
        double a = ta == CUBLAS_OP_N ? emu_get(A, i + (size_t)p * lda, at) : emu_get(A, p + (size_t)i * lda, at);
        double b = tb == CUBLAS_OP_N ? emu_get(B, p + (size_t)j * ldb, bt) : emu_get(B, j + (size_t)p * ldb, bt);
        s += a * b;
    }
    return s;
}
inline void emu_gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha, const void* A,
                     cudaDataType_t at, int lda, const void* B, cudaDataType_t bt, int ldb, float beta, void* C,
                     cudaDataType_t ct, int ldc) {
    emu_gemm_calls++;
#pragma omp parallel for collapse(2)
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = emu_dot(ta, tb, i, j, k, A, at, lda, B, bt, ldb);
            size_t c = i + (size_t)j * ldc;
            emu_put(C, c, ct, beta == 0.0f ? alpha * s : alpha * s + beta * emu_get(C, c, ct));
        }
}
inline cublasStatus_t cublasGemmEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                   const void* alpha, const void* A, cudaDataType_t at, int lda, const void* B,
                                   cudaDataType_t bt, int ldb, const void* beta, void* C, cudaDataType_t ct, int ldc,
                                   cublasComputeType_t, cublasGemmAlgo_t) {
    emu_gemm(ta, tb, m, n, k, *(const float*)alpha, A, at, lda, B, bt, ldb, *(const float*)beta, C, ct, ldc);
    return 0;
}
inline size_t emu_type_size(cudaDataType_t t) { return t == CUDA_R_16BF ? 2 : 4; }
inline cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m,
                                                 int n, int k, const void* alpha, const void* A, cudaDataType_t at,
                                                 int lda, long long sa, const void* B, cudaDataType_t bt, int ldb,
                                                 long long sb, const void* beta, void* C, cudaDataType_t ct, int ldc,
                                                 long long sc, int batch, cublasComputeType_t, cublasGemmAlgo_t) {
    for (int i = 0; i < batch; i++)
        emu_gemm(ta, tb, m, n, k, *(const float*)alpha, (const char*)A + i * sa * emu_type_size(at), at, lda,
                 (const char*)B + i * sb * emu_type_size(bt), bt, ldb, *(const float*)beta,
                 (char*)C + i * sc * emu_type_size(ct), ct, ldc);
    return 0;
}
