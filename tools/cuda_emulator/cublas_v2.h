// A CPU stand-in for the cuBLAS calls train_gpt2.cu uses (tools/emulate_gpu.sh), from cuBLAS's column-major definition:
// C(i,j) = alpha * sum_p op(A)(i,p) op(B)(p,j) + beta * C(i,j); op N: A(i,p) = A[i + p*lda]; op T: A[p + i*lda].
// With beta = 0, C is not read (as in cuBLAS).
#pragma once
#include "cuda_runtime.h"
typedef int cublasStatus_t;
#define CUBLAS_STATUS_SUCCESS 0
typedef void* cublasHandle_t;
enum cublasOperation_t { CUBLAS_OP_N, CUBLAS_OP_T };
enum cublasComputeType_t { CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_FAST_TF32 };
enum cudaDataType_t { CUDA_R_32F };
enum cublasGemmAlgo_t { CUBLAS_GEMM_DEFAULT };
enum cublasMath_t { CUBLAS_DEFAULT_MATH, CUBLAS_TF32_TENSOR_OP_MATH };
inline const char* cublasGetStatusString(cublasStatus_t) { return "emulated"; }
inline cublasStatus_t cublasCreate(cublasHandle_t* h) { *h = nullptr; return 0; }
inline cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return 0; }
inline long long emu_gemm_calls;
inline void emu_gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha, const float* A,
                     int lda, const float* B, int ldb, float beta, float* C, int ldc) {
    emu_gemm_calls++;
#pragma omp parallel for collapse(2)
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0;
            for (int p = 0; p < k; p++) {
                double a = ta == CUBLAS_OP_N ? A[i + (size_t)p * lda] : A[p + (size_t)i * lda];
                double b = tb == CUBLAS_OP_N ? B[p + (size_t)j * ldb] : B[j + (size_t)p * ldb];
                s += a * b;
            }
            float* c = C + i + (size_t)j * ldc;
            *c = beta == 0.0f ? (float)(alpha * s) : (float)(alpha * s + beta * (double)*c);
        }
}
inline cublasStatus_t cublasGemmEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                   const void* alpha, const void* A, cudaDataType_t, int lda, const void* B,
                                   cudaDataType_t, int ldb, const void* beta, void* C, cudaDataType_t, int ldc,
                                   cublasComputeType_t, cublasGemmAlgo_t) {
    emu_gemm(ta, tb, m, n, k, *(const float*)alpha, (const float*)A, lda, (const float*)B, ldb, *(const float*)beta,
             (float*)C, ldc);
    return 0;
}
inline cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m,
                                                 int n, int k, const void* alpha, const void* A, cudaDataType_t,
                                                 int lda, long long sa, const void* B, cudaDataType_t, int ldb,
                                                 long long sb, const void* beta, void* C, cudaDataType_t, int ldc,
                                                 long long sc, int batch, cublasComputeType_t, cublasGemmAlgo_t) {
    for (int i = 0; i < batch; i++)
        emu_gemm(ta, tb, m, n, k, *(const float*)alpha, (const float*)A + i * sa, lda, (const float*)B + i * sb, ldb,
                 *(const float*)beta, (float*)C + i * sc, ldc);
    return 0;
}
