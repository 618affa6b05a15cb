// A CPU stand-in for the WMMA part of mma.h (nvcuda::wmma, 16x16x16 tiles), for the emulator. On the GPU a fragment
// is spread over the 32 lanes of a warp in an unspecified way, so code may only load, store, fill and multiply
// fragments, or apply one operation to every element (as attention.cuh does). Here every lane holds the whole tile,
// and element (r, c) sits at a position of x[] that is scrambled (a fixed random permutation, rotated by the lane):
// code that reads or writes x[i] as if it knew which element i is gets wrong results, in every lane differently.
//
// load_matrix_sync gives each lane the whole tile, and store_matrix_sync writes each element from one lane; for the
// memory checks (emu_memory.h) element e is read and written by lane e % 32 (on the GPU some lane reads and writes
// each element, which one is unspecified), and neither call is a barrier: the checks want a __syncwarp (or
// __syncthreads) between the lanes' stores of a tile and a load of it, and between a store and the lanes' reads of
// what it stored. Pointers must be 32-byte aligned and ldm a multiple of 16 bytes, as on the GPU.
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

// the position of element e (row-major index in the tile) in lane `lane`'s x[] of an n-element fragment
EMU_NOCHECK inline int emu_fragment_slot(int e, int n, int lane) {
    static int* perm[1025];
    int*& p = perm[n];
    if (!p) {
        p = new int[n];
        for (int i = 0; i < n; i++) p[i] = i;
        unsigned long long r = 0x2545F4914F6CDD1Dull ^ (unsigned long long)n;
        for (int i = n - 1; i > 0; i--) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            int j = (int)(r % (unsigned long long)(i + 1)), t = p[i];
            p[i] = p[j];
            p[j] = t;
        }
    }
    return (p[e] + 7 * lane) % n;
}

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
    static const int rows = std::is_same<Use, matrix_b>::value ? K : M;
    static const int cols = std::is_same<Use, matrix_a>::value ? K : N;
    static const int num_elements = rows * cols;
    T x[rows * cols];  // element (r, c) at x[emu_fragment_slot(r * cols + c, num_elements, lane)]
    T& at(int r, int c) { return x[emu_fragment_slot(r * cols + c, num_elements, emu_cur % 32)]; }
    const T& at(int r, int c) const { return x[emu_fragment_slot(r * cols + c, num_elements, emu_cur % 32)]; }
    // the whole tile in row-major order, as float
    EMU_NOCHECK void natural(float* out) const {
        for (int e = 0; e < num_elements; e++) out[e] = (float)x[emu_fragment_slot(e, num_elements, emu_cur % 32)];
    }
};

EMU_NOCHECK inline void emu_wmma_check(const void* p, unsigned ldm, size_t elem) {
    if ((uintptr_t)p % 32 != 0 || (ldm * elem) % 16 != 0)
        emu_error("wmma pointer %p not 32-byte aligned or ldm %u not a multiple of 16 bytes", p, ldm);
}

template <typename Use, int M, int N, int K, typename T, typename Layout>
EMU_NOCHECK void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, T v) {
    for (int e = 0; e < f.num_elements; e++) f.x[e] = v;
}

// the checks of the lane's share of a load or store (the emulator's own code is not instrumented)
EMU_NOCHECK inline void emu_wmma_access(const void* p, size_t bytes, bool write) {
    if (emu_in_kernel) emu_access((void*)p, (unsigned)bytes, write, true);
}

// matrix_a / matrix_b: the layout is part of the fragment's type
template <typename Use, int M, int N, int K, typename T, typename Layout>
EMU_NOCHECK void load_matrix_sync(fragment<Use, M, N, K, T, Layout>& f, const T* p, unsigned ldm) {
    emu_wmma_check(p, ldm, sizeof(T));
    typedef fragment<Use, M, N, K, T, Layout> F;
    int lane = emu_cur % 32;
    for (int r = 0; r < F::rows; r++)
        for (int c = 0; c < F::cols; c++) {
            const T* q = std::is_same<Layout, row_major>::value ? p + (size_t)r * ldm + c : p + (size_t)c * ldm + r;
            if ((r * F::cols + c) % 32 == lane) emu_wmma_access(q, sizeof(T), false);
            f.x[emu_fragment_slot(r * F::cols + c, F::num_elements, lane)] = *q;
        }
}

template <int M, int N, int K, typename T>
EMU_NOCHECK void store_matrix_sync(T* p, const fragment<accumulator, M, N, K, T, void>& f, unsigned ldm,
                                   layout_t layout) {
    emu_wmma_check(p, ldm, sizeof(T));
    int lane = emu_cur % 32;
    for (int r = 0; r < M; r++)
        for (int c = 0; c < N; c++) {
            if ((r * N + c) % 32 != lane) continue;
            T* q = layout == mem_row_major ? p + (size_t)r * ldm + c : p + (size_t)c * ldm + r;
            emu_wmma_access(q, sizeof(T), true);
            *q = f.x[emu_fragment_slot(r * N + c, M * N, lane)];
        }
}

// d = a b + c, the products of the (bf16) inputs summed in float, k in order. Every lane of a warp multiplies the
// same tiles: the last product of each warp is kept, and a lane whose inputs are the same bits takes its result.
template <int M, int N, int K, typename TA, typename LA, typename LB>
EMU_NOCHECK void mma_sync(fragment<accumulator, M, N, K, float, void>& d, const fragment<matrix_a, M, N, K, TA, LA>& a,
                          const fragment<matrix_b, M, N, K, TA, LB>& b,
                          const fragment<accumulator, M, N, K, float, void>& c) {
    const int IN = M * K + K * N + M * N;
    static float last_in[32][IN], last_out[32][M * N];
    static bool have[32];
    float in[IN], *av = in, *bv = in + M * K, *out = in + M * K + K * N;
    a.natural(av);
    b.natural(bv);
    c.natural(out);
    int warp = emu_cur / 32, lane = emu_cur % 32;
    if (have[warp] && !memcmp(in, last_in[warp], sizeof(in))) {
        for (int e = 0; e < M * N; e++) d.x[emu_fragment_slot(e, M * N, lane)] = last_out[warp][e];
        return;
    }
    memcpy(last_in[warp], in, sizeof(in));
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float s = out[i * N + j];
            for (int k = 0; k < K; k++) s += av[i * K + k] * bv[k * N + j];
            last_out[warp][i * N + j] = s;
        }
    have[warp] = true;
    for (int e = 0; e < M * N; e++) d.x[emu_fragment_slot(e, M * N, lane)] = last_out[warp][e];
}
}  // namespace wmma
}  // namespace nvcuda
