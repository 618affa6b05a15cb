// A CPU stand-in for the cuBLAS calls train_gpt2.cu uses (tools/emulate_gpu.sh), from cuBLAS's column-major definition:
// C(i,j) = alpha * sum_p op(A)(i,p) op(B)(p,j) + beta * C(i,j); op N: A(i,p) = A[i + p*lda]; op T: A[p + i*lda].
// With beta = 0, C is not read (as in cuBLAS). Float32 and bf16 operands (bf16 read exactly, the sum in double, the
// result rounded to C's type), as the GPU's float32 accumulation does up to the order of the sum.
#pragma once
#include "cuda_runtime.h"
#include "cuda_bf16.h"
typedef int cublasStatus_t;
// cuBLAS's status codes (cublas_api.h), so that a program's handling of each can be tried (cublasLt.h's EMU_LT_*)
#define CUBLAS_STATUS_SUCCESS 0
#define CUBLAS_STATUS_NOT_INITIALIZED 1
#define CUBLAS_STATUS_ALLOC_FAILED 3
#define CUBLAS_STATUS_INVALID_VALUE 7
#define CUBLAS_STATUS_ARCH_MISMATCH 8
#define CUBLAS_STATUS_MAPPING_ERROR 11
#define CUBLAS_STATUS_EXECUTION_FAILED 13
#define CUBLAS_STATUS_INTERNAL_ERROR 14
#define CUBLAS_STATUS_NOT_SUPPORTED 15
typedef void* cublasHandle_t;
enum cublasOperation_t { CUBLAS_OP_N, CUBLAS_OP_T };
enum cublasComputeType_t { CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_FAST_TF32 };
enum cudaDataType_t { CUDA_R_32F, CUDA_R_16BF };
enum cublasGemmAlgo_t { CUBLAS_GEMM_DEFAULT };
enum cublasMath_t { CUBLAS_DEFAULT_MATH, CUBLAS_TF32_TENSOR_OP_MATH };
inline const char* cublasGetStatusString(cublasStatus_t s) {
    switch (s) {
        case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
        case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
        case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
        case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
        case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
        case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
        case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
        case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
        default: return "CUBLAS_STATUS_UNKNOWN (emulated)";
    }
}
inline cublasStatus_t cublasCreate(cublasHandle_t* h) { *h = nullptr; return 0; }
inline cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return 0; }
inline long long emu_gemm_calls;
EMU_INLINE double emu_get(const void* p, size_t i, cudaDataType_t t) {
    return t == CUDA_R_16BF ? (double)(float)((const __nv_bfloat16*)p)[i] : (double)((const float*)p)[i];
}
EMU_INLINE void emu_put(void* p, size_t i, cudaDataType_t t, double v) {
    if (t == CUDA_R_16BF) ((__nv_bfloat16*)p)[i] = __nv_bfloat16((float)v);
    else ((float*)p)[i] = (float)v;
}
// rows of op(M) (rows x k) as doubles: row r is op(M)(r, 0..k-1), or with transposed_op op(M)(0..k-1, r); in whole
// groups of 4 rows (the products take 4 at a time), the padding 0
EMU_NOCHECK inline double* emu_op_rows(bool transposed_op, int rows, int k, const void* M, cudaDataType_t t,
                                       size_t ld) {
    size_t padded = (size_t)(rows + 3) / 4 * 4;
    double* out = new double[padded * k];
    memset(out + (size_t)rows * k, 0, (padded - rows) * k * sizeof(double));
#pragma omp parallel for
    for (int r = 0; r < rows; r++)
        for (int p = 0; p < k; p++)
            out[(size_t)r * k + p] = emu_get(M, transposed_op ? p + (size_t)r * ld : r + (size_t)p * ld, t);
    return out;
}
// Every element of op(A) op(B) (m x n, column-major: op N: A(i, p) = A[i + p lda]; op T: A[p + i lda]) in double,
// the sum over p = 0 .. k-1 in order, handed to out(i, j, sum) (an always-inlined lambda): the definition of every
// product the emulator runs. Four columns at a time (four independent sums, each in its own order), from copies of
// op(A)'s rows and op(B)'s columns as doubles.
template <typename Out>
EMU_NOCHECK void emu_products(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void* A,
                              cudaDataType_t at, size_t lda, const void* B, cudaDataType_t bt, size_t ldb,
                              const Out& out) {
    double* a = emu_op_rows(ta == CUBLAS_OP_T, m, k, A, at, lda);  // row i: op(A)(i, :)
    double* b = emu_op_rows(tb == CUBLAS_OP_N, n, k, B, bt, ldb);  // row j: op(B)(:, j)
#pragma omp parallel for
    for (int j0 = 0; j0 < n; j0 += 4)
        for (int i = 0; i < m; i++) {
            const double *x = a + (size_t)i * k, *b0 = b + (size_t)j0 * k, *b1 = b0 + k, *b2 = b1 + k, *b3 = b2 + k;
            double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            for (int p = 0; p < k; p++) {
                s0 += x[p] * b0[p];
                s1 += x[p] * b1[p];
                s2 += x[p] * b2[p];
                s3 += x[p] * b3[p];
            }
            out(i, j0, s0);
            if (j0 + 1 < n) out(i, j0 + 1, s1);
            if (j0 + 2 < n) out(i, j0 + 2, s2);
            if (j0 + 3 < n) out(i, j0 + 3, s3);
        }
    delete[] a;
    delete[] b;
}
inline void emu_gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha, const void* A,
                     cudaDataType_t at, int lda, const void* B, cudaDataType_t bt, int ldb, float beta, void* C,
                     cudaDataType_t ct, int ldc) {
    emu_gemm_calls++;
    emu_products(ta, tb, m, n, k, A, at, lda, B, bt, ldb, [=](int i, int j, double s) __attribute__((always_inline)) {
        size_t c = i + (size_t)j * ldc;
        emu_put(C, c, ct, beta == 0.0f ? alpha * s : alpha * s + beta * emu_get(C, c, ct));
    });
    emu_check_all_guards();  // a product that wrote past its C
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
