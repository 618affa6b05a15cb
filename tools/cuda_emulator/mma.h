// A CPU stand-in for the WMMA part of mma.h (nvcuda::wmma, 16x16x16 tiles), for tools/emulate_gpu.sh. On the GPU a
// fragment is spread over the 32 lanes of a warp in an unspecified way; code that only loads, stores, multiplies
// and fills fragments (as attention.cuh does) cannot depend on that, so here every lane holds the whole tile.
// load_matrix_sync reads the whole tile in each lane, with no barrier: a tile that some lane has not written yet
// (a missing __syncwarp or __syncthreads) reads stale or NaN values. store_matrix_sync writes each element from one
// lane only (element e from lane e % 32), so a lane that reads the stored tile before the others have written their
// part also sees stale values. Pointers must be 32-byte aligned and ldm a multiple of 16 bytes, as on the GPU.
#pragma once
#include "cuda_runtime.h"
#include "cuda_bf16.h"
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
    static const int rows = std::is_same<Use, matrix_b>::value ? K : M;
    static const int cols = std::is_same<Use, matrix_a>::value ? K : N;
    static const int num_elements = rows * cols;
    T x[rows * cols];  // (r, c) at x[r * cols + c], the whole tile in every lane
};

inline void emu_wmma_check(const void* p, unsigned ldm, size_t elem) {
    if ((uintptr_t)p % 32 != 0 || (ldm * elem) % 16 != 0) {
        fprintf(stderr, "EMU: wmma pointer %p not 32-byte aligned or ldm %u not a multiple of 16 bytes\n", p, ldm);
        abort();
    }
}

template <typename Use, int M, int N, int K, typename T, typename Layout>
void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, T v) {
    for (int e = 0; e < f.num_elements; e++) f.x[e] = v;
}

// matrix_a / matrix_b: the layout is part of the fragment's type
template <typename Use, int M, int N, int K, typename T, typename Layout>
void load_matrix_sync(fragment<Use, M, N, K, T, Layout>& f, const T* p, unsigned ldm) {
    emu_wmma_check(p, ldm, sizeof(T));
    typedef fragment<Use, M, N, K, T, Layout> F;
    for (int r = 0; r < F::rows; r++)
        for (int c = 0; c < F::cols; c++)
            f.x[r * F::cols + c] = std::is_same<Layout, row_major>::value ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
}

template <int M, int N, int K, typename T>
void store_matrix_sync(T* p, const fragment<accumulator, M, N, K, T, void>& f, unsigned ldm, layout_t layout) {
    emu_wmma_check(p, ldm, sizeof(T));
    int lane = threadIdx.x % 32;
    for (int r = 0; r < M; r++)
        for (int c = 0; c < N; c++) {
            if ((r * N + c) % 32 != lane) continue;
            if (layout == mem_row_major) p[(size_t)r * ldm + c] = f.x[r * N + c];
            else p[(size_t)c * ldm + r] = f.x[r * N + c];
        }
}

// d = a b + c, the products of the (bf16) inputs summed in float
template <int M, int N, int K, typename TA, typename LA, typename LB>
void mma_sync(fragment<accumulator, M, N, K, float, void>& d, const fragment<matrix_a, M, N, K, TA, LA>& a,
              const fragment<matrix_b, M, N, K, TA, LB>& b, const fragment<accumulator, M, N, K, float, void>& c) {
    float out[M * N];
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float s = c.x[i * N + j];
            for (int k = 0; k < K; k++) s += (float)a.x[i * K + k] * (float)b.x[k * N + j];
            out[i * N + j] = s;
        }
    for (int e = 0; e < M * N; e++) d.x[e] = out[e];
}
}  // namespace wmma
}  // namespace nvcuda
