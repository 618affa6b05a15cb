// The CPU emulator's own tests (tools/cuda_emulator): for each class of kernel bug that used to pass on the CPU and
// fail only on a GPU, a small kernel with that bug planted, which the emulator must report as an error (the kernel
// named, the exit status non-zero) or turn into a wrong result in one run; and a correct kernel of the same kind,
// which must pass with the right numbers. Each case runs in a child process (an error ends the program), each planted
// one under two seeds (EMU_SEED): a bug that shows only under a lucky interleaving would not count.
//
// Built only for the emulator: tools/cuda_emulator/emucc -o tests/test_emulator tests/test_emulator.cu (make does it).
// Ends with "N passed, N failed".
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <mma.h>
#define ENABLE_FP32
#include "../cuda_common.cuh"  // the project's launchCheck, cudaCheck, load_pack, store_pack, warp_sum, block_sum
#include <sys/wait.h>
#include <string>
#include <vector>

// ---- helpers: device arrays from and to host vectors
static float* to_device(const std::vector<float>& h) {
    float* d = cuda_malloc<float>(h.size(), "test input");
    cudaCheck(cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
    return d;
}
static std::vector<float> to_host(const float* d, size_t n) {
    std::vector<float> h(n);
    cudaCheck(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}
static std::vector<float> iota(size_t n, float start = 0) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) v[i] = start + (float)i;
    return v;
}

// =====================================================================================================================
// 1. Shared memory is ordered only by barriers: __syncthreads for the block, __syncwarp within a warp. A shuffle
//    exchanges registers and orders no memory.

// planted: a lane reads its neighbour's shared-memory write after a shuffle, with no __syncwarp
__global__ void neighbour_after_shuffle_kernel(float* out, const float* in) {
    __shared__ float s[32];
    int lane = threadIdx.x;
    s[lane] = in[lane];
    float v = __shfl_xor_sync(FULL_MASK, in[lane], 1);
    out[lane] = s[(lane + 1) % 32] + v;
}
// correct: the same with __syncwarp between the write and the read
__global__ void neighbour_after_syncwarp_kernel(float* out, const float* in) {
    __shared__ float s[32];
    int lane = threadIdx.x;
    s[lane] = in[lane];
    float v = __shfl_xor_sync(FULL_MASK, in[lane], 1);
    __syncwarp();
    out[lane] = s[(lane + 1) % 32] + v;
}
template <typename K>
static bool run_neighbour(K kernel) {
    float *in = to_device(iota(32)), *out = cuda_malloc<float>(32, "out");
    kernel<<<1, 32>>>(out, in);
    launchCheck();
    std::vector<float> h = to_host(out, 32);
    for (int l = 0; l < 32; l++)
        if (h[l] != (float)((l + 1) % 32) + (float)(l ^ 1)) return false;
    return true;
}
static bool planted_shuffle_is_no_barrier() { return run_neighbour(neighbour_after_shuffle_kernel); }
static bool correct_syncwarp_orders_the_warp() { return run_neighbour(neighbour_after_syncwarp_kernel); }

// planted: __syncwarp where the reader is in another warp; correct: __syncthreads
__global__ void other_warp_after_syncwarp_kernel(float* out, const float* in) {
    __shared__ float s[64];
    int t = threadIdx.x;
    s[t] = in[t];
    __syncwarp();
    out[t] = s[(t + 32) % 64];
}
__global__ void other_warp_after_syncthreads_kernel(float* out, const float* in) {
    __shared__ float s[64];
    int t = threadIdx.x;
    s[t] = in[t];
    __syncthreads();
    out[t] = s[(t + 32) % 64];
}
template <typename K>
static bool run_other_warp(K kernel) {
    float *in = to_device(iota(64)), *out = cuda_malloc<float>(64, "out");
    kernel<<<1, 64>>>(out, in);
    launchCheck();
    std::vector<float> h = to_host(out, 64);
    for (int t = 0; t < 64; t++)
        if (h[t] != (float)((t + 32) % 64)) return false;
    return true;
}
static bool planted_syncwarp_is_not_block_wide() { return run_other_warp(other_warp_after_syncwarp_kernel); }
static bool correct_syncthreads_orders_the_block() { return run_other_warp(other_warp_after_syncthreads_kernel); }

// planted: a block reduction called twice, without the barrier that keeps the second call's writes of the per-warp
// partials from overtaking the first call's reads (block_sum in cuda_common.cuh has it)
__device__ float block_sum_without_first_barrier(float v) {
    __shared__ float partial[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = warp_sum(v);
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    float s = 0.0f;
    for (int w = 0; w < (int)blockDim.x / 32; w++) s += partial[w];
    return s;
}
__global__ void two_sums_unsafe_kernel(float* out, const float* in) {
    float a = block_sum_without_first_barrier(in[threadIdx.x]);
    float b = block_sum_without_first_barrier(2.0f * in[threadIdx.x]);
    if (threadIdx.x == 0) out[0] = a, out[1] = b;
}
__global__ void two_sums_kernel(float* out, const float* in) {  // the project's block_sum
    float a[1] = {in[threadIdx.x]}, b[1] = {2.0f * in[threadIdx.x]};
    block_sum(a);
    block_sum(b);
    if (threadIdx.x == 0) out[0] = a[0], out[1] = b[0];
}
template <typename K>
static bool run_two_sums(K kernel) {
    float *in = to_device(iota(128)), *out = cuda_malloc<float>(2, "out");
    kernel<<<1, 128>>>(out, in);
    launchCheck();
    std::vector<float> h = to_host(out, 2);
    return h[0] == 127.0f * 64.0f && h[1] == 127.0f * 128.0f;
}
static bool planted_write_after_read() { return run_two_sums(two_sums_unsafe_kernel); }
static bool correct_block_sum_twice() { return run_two_sums(two_sums_kernel); }

// planted: lane 31 reads an element no thread of the block wrote
__global__ void read_unwritten_shared_kernel(float* out) {
    __shared__ float s[32];
    int lane = threadIdx.x;
    if (lane < 31) s[lane] = (float)lane;
    __syncwarp();
    out[lane] = s[(lane + 1) % 32];
}
static bool planted_read_of_unwritten_shared() {
    float* out = cuda_malloc<float>(32, "out");
    read_unwritten_shared_kernel<<<1, 32>>>(out);
    launchCheck();
    return true;
}

// =====================================================================================================================
// 2. Dynamic shared memory above 48 KB needs cudaFuncSetAttribute, and never more than the device's opt-in maximum.

__global__ void touch_dynamic_shared_kernel(float* out, int n) {
    DYNAMIC_SHARED(float, smem);
    for (int i = threadIdx.x; i < n; i += blockDim.x) smem[i] = (float)i;
    __syncthreads();
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += smem[n - 1 - i];
    float v[1] = {s};
    block_sum(v);
    if (threadIdx.x == 0) out[0] = v[0];
}
static bool run_dynamic_shared(int bytes, bool set_attribute) {
    float* out = cuda_malloc<float>(1, "out");
    if (set_attribute)
        cudaCheck(cudaFuncSetAttribute(touch_dynamic_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    int n = bytes / 4;
    touch_dynamic_shared_kernel<<<2, 256, bytes>>>(out, n);
    launchCheck();
    return to_host(out, 1)[0] == (float)((double)n * (n - 1) / 2);
}
static bool planted_64kb_without_attribute() { return run_dynamic_shared(64 << 10, false); }
static bool correct_64kb_with_attribute() { return run_dynamic_shared(64 << 10, true); }
static bool correct_32kb_without_attribute() { return run_dynamic_shared(32 << 10, false); }
static bool planted_120kb_on_sm86() { return run_dynamic_shared(120 << 10, true); }  // run under EMU_DEVICE=sm_86
static bool correct_120kb_on_sm90() { return run_dynamic_shared(120 << 10, true); }
static bool planted_more_than_the_attribute() {
    float* out = cuda_malloc<float>(1, "out");
    cudaCheck(cudaFuncSetAttribute(touch_dynamic_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 << 10));
    touch_dynamic_shared_kernel<<<1, 256, 80 << 10>>>(out, (80 << 10) / 4);
    launchCheck();
    return true;
}

// =====================================================================================================================
// 3. Off by one past dynamic shared memory or a cudaMalloc allocation

__global__ void shared_off_by_one_kernel(float* out, int n, int write) {
    DYNAMIC_SHARED(float, smem);
    int t = threadIdx.x;
    smem[t] = (float)t;
    if (write && t == blockDim.x - 1) smem[t + 1] = 0.0f;  // planted: one past the end when n == blockDim.x
    __syncthreads();
    out[t] = write || t + 1 < n ? smem[t] : smem[t + 1];   // planted (write = 0): the last thread reads one past
}
static bool run_shared_off_by_one(int write, int extra) {
    float* out = cuda_malloc<float>(256, "out");
    shared_off_by_one_kernel<<<1, 256, (256 + extra) * sizeof(float)>>>(out, 256 + extra, write);
    launchCheck();
    std::vector<float> h = to_host(out, 256);
    for (int t = 0; t < 256; t++)
        if (h[t] != (float)t) return false;
    return true;
}
static bool planted_write_past_dynamic_shared() { return run_shared_off_by_one(1, 0); }
static bool planted_read_past_dynamic_shared() { return run_shared_off_by_one(0, 0); }
static bool correct_dynamic_shared_in_bounds() { return run_shared_off_by_one(1, 1); }

__global__ void fill_kernel(float* p, int n, int offset) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i + offset] = 1.0f;  // offset 0: in bounds
}
static bool run_fill(int n, int offset) {
    float* p = cuda_malloc<float>(1000, "1000 floats");
    fill_kernel<<<ceil_div(n, 256), 256>>>(p, n, offset);
    launchCheck();
    std::vector<float> h = to_host(p, 1000);
    for (int i = 0; i < 1000; i++)
        if (h[i] != 1.0f) return false;
    cudaCheck(cudaFree(p));
    return true;
}
static bool planted_write_one_past_allocation() { return run_fill(1001, 0); }
static bool planted_write_far_past_allocation() { return run_fill(1000, 100); }
static bool planted_write_before_allocation() { return run_fill(1000, -1); }
static bool correct_writes_in_bounds() { return run_fill(1000, 0); }

// =====================================================================================================================
// 4. A static __shared__ variable starts each block undefined: nothing carries over from the previous block

__global__ void running_total_kernel(float* out, const float* in, int init) {
    __shared__ float total;
    if (threadIdx.x == 0) {
        if (init) total = 0.0f;
        total += in[blockIdx.x];  // planted (init = 0): assumes total carries over, or starts at 0
        out[blockIdx.x] = total;
    }
}
static bool run_running_total(int init) {
    float *in = to_device(iota(8, 1)), *out = cuda_malloc<float>(8, "out");
    running_total_kernel<<<8, 32>>>(out, in, init);
    launchCheck();
    std::vector<float> h = to_host(out, 8);
    for (int b = 0; b < 8; b++)
        if (h[b] != (float)(b + 1)) return false;
    return true;
}
static bool planted_static_shared_carries_over() { return run_running_total(0); }
static bool correct_static_shared_initialized() { return run_running_total(1); }

// =====================================================================================================================
// 5. Launch configurations the driver refuses: the kernel does not run, and cudaGetLastError says why

__global__ void nothing_kernel(float* out) {
    if (out && threadIdx.x == 0) out[blockIdx.x % 4] = 1.0f;
}
static bool launch_and_check(dim3 grid, dim3 block) {
    float* out = cuda_malloc<float>(4, "out");
    nothing_kernel<<<grid, block>>>(out);
    launchCheck();  // the trainer's check after every launch: error: CUDA error '...' at file:line
    return true;
}
static bool planted_grid_y_above_65535() { return launch_and_check(dim3(1, 70000), 32); }
static bool planted_1056_threads() { return launch_and_check(1, dim3(32, 33)); }
static bool planted_block_z_65() { return launch_and_check(1, dim3(1, 1, 65)); }
static bool correct_grid_y_65535() { return launch_and_check(dim3(1, 65535), 1); }
// cudaPeekAtLastError keeps the error, cudaGetLastError returns it once; a good launch leaves no error
static bool correct_last_error_semantics() {
    nothing_kernel<<<dim3(1, 1, 70000), 32>>>(nullptr);
    bool ok = cudaPeekAtLastError() == cudaErrorInvalidConfiguration &&
              cudaPeekAtLastError() == cudaErrorInvalidConfiguration &&
              cudaGetLastError() == cudaErrorInvalidConfiguration && cudaGetLastError() == cudaSuccess;
    nothing_kernel<<<4, 32>>>(nullptr);
    return ok && cudaGetLastError() == cudaSuccess &&
           !strcmp(cudaGetErrorString(cudaErrorInvalidConfiguration), "invalid configuration argument");
}
static bool planted_unchecked_refused_launch() {
    nothing_kernel<<<1, dim3(32, 64)>>>(nullptr);
    return true;  // no cudaGetLastError: the emulator complains at exit
}

// =====================================================================================================================
// 6. A 16-byte (or any naturally aligned) access must be aligned, as on the GPU

__global__ void pack_copy_kernel(float* dst, const float* src, int n, int src_offset, int dst_offset) {
    float v[ROW_PACK];
    int i0 = threadIdx.x * ROW_PACK;
    load_pack(v, src + src_offset, i0, n, true, 0.0f);  // the project's 16-byte pack load
    store_pack(dst + dst_offset, v, i0, n, true);
}
static bool run_pack_copy(int src_offset, int dst_offset) {
    float *src = to_device(iota(72)), *dst = cuda_malloc<float>(72, "dst");
    pack_copy_kernel<<<1, 16>>>(dst, src, 64, src_offset, dst_offset);
    launchCheck();
    std::vector<float> h = to_host(dst + dst_offset, 64);
    for (int i = 0; i < 64; i++)
        if (h[i] != (float)(i + src_offset)) return false;
    return true;
}
static bool planted_misaligned_pack_load() { return run_pack_copy(1, 0); }
static bool planted_misaligned_pack_store() { return run_pack_copy(0, 2); }
static bool correct_aligned_packs() { return run_pack_copy(4, 8); }

__global__ void float4_kernel(float* out, const float* in, int offset) {
    float4 v = *(const float4*)(in + offset + 4 * threadIdx.x);
    out[threadIdx.x] = v.x + v.y + v.z + v.w;
}
static bool run_float4(int offset) {
    float *in = to_device(iota(40)), *out = cuda_malloc<float>(8, "out");
    float4_kernel<<<1, 8>>>(out, in, offset);
    launchCheck();
    std::vector<float> h = to_host(out, 8);
    for (int t = 0; t < 8; t++)
        if (h[t] != 4.0f * (offset + 4 * t) + 6.0f) return false;
    return true;
}
static bool planted_misaligned_float4() { return run_float4(2); }
static bool correct_aligned_float4() { return run_float4(4); }

// =====================================================================================================================
// 7. Blocks run in no particular order

// planted: block b assumes block b - 1 has finished (a carry chain through global memory)
__global__ void carry_chain_kernel(float* out) {
    int b = blockIdx.x;
    if (threadIdx.x == 0) out[b] = b == 0 ? 0.0f : out[b - 1] + 1.0f;
}
static bool planted_blocks_in_launch_order() {
    float* out = cuda_malloc<float>(64, "out");
    cudaCheck(cudaMemset(out, 0, 64 * sizeof(float)));
    carry_chain_kernel<<<64, 32>>>(out);
    launchCheck();
    std::vector<float> h = to_host(out, 64);
    for (int b = 0; b < 64; b++)
        if (h[b] != (float)b) return false;  // what launch order would give
    return true;
}
__global__ void independent_blocks_kernel(float* out) {
    if (threadIdx.x == 0) out[blockIdx.x] = (float)blockIdx.x;
}
static bool correct_independent_blocks() {
    float* out = cuda_malloc<float>(64, "out");
    independent_blocks_kernel<<<64, 32>>>(out);
    launchCheck();
    std::vector<float> h = to_host(out, 64);
    for (int b = 0; b < 64; b++)
        if (h[b] != (float)b) return false;
    return true;
}

// =====================================================================================================================
// 8. A WMMA fragment's elements are in no known order

namespace wmma = nvcuda::wmma;
// out (16 x 16) = (a b) with each element scaled: by row (planted: indexes the fragment as if x[i] were element
// (i / 16, i % 16)), or by 2 (correct: the same for every element, which any order allows)
__global__ void wmma_scale_kernel(float* out, const __nv_bfloat16* a, const __nv_bfloat16* b, int by_row) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::mma_sync(acc, fa, fb, acc);
    for (int i = 0; i < acc.num_elements; i++) acc.x[i] *= by_row ? (float)(i / 16) : 2.0f;
    wmma::store_matrix_sync(out, acc, 16, wmma::mem_row_major);
}
static bool run_wmma_scale(int by_row) {
    std::vector<__nv_bfloat16> ha(256), hb(256);
    for (int i = 0; i < 256; i++) ha[i] = (float)(i % 7), hb[i] = (float)(i % 5) - 2.0f;
    __nv_bfloat16 *a = cuda_malloc<__nv_bfloat16>(256, "a"), *b = cuda_malloc<__nv_bfloat16>(256, "b");
    cudaCheck(cudaMemcpy(a, ha.data(), 512, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(b, hb.data(), 512, cudaMemcpyHostToDevice));
    float* out = cuda_malloc<float>(256, "out");
    wmma_scale_kernel<<<1, 32>>>(out, a, b, by_row);
    launchCheck();
    std::vector<float> h = to_host(out, 256);
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) {
            float s = 0.0f;
            for (int k = 0; k < 16; k++) s += (float)ha[r * 16 + k] * (float)hb[k * 16 + c];
            if (h[r * 16 + c] != s * (by_row ? (float)r : 2.0f)) return false;
        }
    return true;
}
static bool planted_fragment_indexed_by_position() { return run_wmma_scale(1); }
static bool correct_fragment_scaled_uniformly() { return run_wmma_scale(0); }

// =====================================================================================================================
// 9. What the GPU would hang on or leave undefined

__global__ void divergent_syncthreads_kernel(float* out) {
    if (threadIdx.x < 16) return;  // planted: the others wait at a barrier the first 16 never reach
    __syncthreads();
    out[threadIdx.x] = 1.0f;
}
static bool planted_syncthreads_after_exit() {
    float* out = cuda_malloc<float>(64, "out");
    divergent_syncthreads_kernel<<<1, 64>>>(out);
    launchCheck();
    return true;
}
__global__ void shuffle_after_exit_kernel(float* out) {
    if (threadIdx.x % 32 >= 16) return;  // planted: half the warp leaves, then a full-mask shuffle
    out[threadIdx.x] = warp_sum(1.0f);
}
static bool planted_shuffle_after_lanes_exit() {
    float* out = cuda_malloc<float>(32, "out");
    shuffle_after_exit_kernel<<<1, 32>>>(out);
    launchCheck();
    return true;
}
__device__ int deep(int d) {
    volatile char pad[256];
    pad[0] = (char)d;
    return d == 0 ? pad[0] : deep(d - 1) + pad[0];
}
__global__ void stack_overflow_kernel(float* out, int depth) { out[threadIdx.x] = (float)deep(depth); }
static bool planted_stack_overflow() {
    float* out = cuda_malloc<float>(32, "out");
    stack_overflow_kernel<<<1, 32>>>(out, 100000);
    launchCheck();
    return true;
}
// =====================================================================================================================
// the runner

struct Case {
    const char* name;
    bool (*run)();
    bool planted;                      // a bug is planted
    std::vector<const char*> expect;   // what its output must say ("a|b": either; none: the bug shows as a wrong
                                       // result)
    const char* device;                // EMU_DEVICE, or null
};

static const std::vector<Case>& cases() {
    static const std::vector<Case> all = {
        {"shuffle is no memory barrier", planted_shuffle_is_no_barrier, true,
         {"EMU: error: read-after-write hazard", "a shuffle is no memory barrier", "neighbour_after_shuffle_kernel",
          "thread ("}, nullptr},
        {"__syncwarp orders the warp's shared memory", correct_syncwarp_orders_the_warp, false, {}, nullptr},
        {"__syncwarp does not order another warp", planted_syncwarp_is_not_block_wide, true,
         {"EMU: error: read-after-write hazard|no thread of this block has written",
          "other_warp_after_syncwarp_kernel"}, nullptr},
        {"__syncthreads orders the block's shared memory", correct_syncthreads_orders_the_block, false, {}, nullptr},
        {"a write overtakes another warp's read", planted_write_after_read, true,
         {"EMU: error: write-after-read hazard", "block_sum_without_first_barrier", "two_sums_unsafe_kernel"},
         nullptr},
        {"block_sum twice in a row", correct_block_sum_twice, false, {}, nullptr},
        {"a read of shared memory nobody wrote", planted_read_of_unwritten_shared, true,
         {"EMU: error:", "no thread of this block has written", "read_unwritten_shared_kernel"}, nullptr},

        {"64 KB of dynamic shared memory without the attribute", planted_64kb_without_attribute, true,
         {"refused: 65536 bytes of dynamic shared memory, more than the 49152", "touch_dynamic_shared_kernel",
          "error: CUDA error 'invalid argument'", "kernel launch"}, nullptr},
        {"64 KB of dynamic shared memory with the attribute", correct_64kb_with_attribute, false, {}, nullptr},
        {"32 KB of dynamic shared memory without the attribute", correct_32kb_without_attribute, false, {}, nullptr},
        {"120 KB of dynamic shared memory on sm_86", planted_120kb_on_sm86, true,
         {"more than the 101376 bytes a block can have on sm_86", "touch_dynamic_shared_kernel",
          "error: CUDA error 'invalid argument'", "cudaFuncSetAttribute"}, "sm_86"},
        {"120 KB of dynamic shared memory on sm_90", correct_120kb_on_sm90, false, {}, "sm_90"},
        {"more dynamic shared memory than the attribute allows", planted_more_than_the_attribute, true,
         {"refused: 81920 bytes of dynamic shared memory, more than the 65536 that cudaFuncSetAttribute allowed",
          "error: CUDA error 'invalid argument'"}, nullptr},

        {"a write one past the dynamic shared memory", planted_write_past_dynamic_shared, true,
         {"EMU: error:", "writes 4 bytes at byte 1024 of dynamic shared memory, past the end of the 1024 bytes",
          "shared_off_by_one_kernel", "thread (255, 0, 0)"}, nullptr},
        {"a read one past the dynamic shared memory", planted_read_past_dynamic_shared, true,
         {"EMU: error:", "reads 4 bytes at byte 1024 of dynamic shared memory", "shared_off_by_one_kernel"}, nullptr},
        {"dynamic shared memory in bounds", correct_dynamic_shared_in_bounds, false, {}, nullptr},
        {"a write one past a cudaMalloc allocation", planted_write_one_past_allocation, true,
         {"EMU: error: something wrote past the end of the 4000-byte cudaMalloc allocation", "fill_kernel",
          "in launch #"}, nullptr},
        {"a write far past a cudaMalloc allocation", planted_write_far_past_allocation, true,
         {"EMU: error: this thread touched", "past the end of the 4000-byte cudaMalloc allocation", "fill_kernel",
          "thread ("}, nullptr},
        {"a write before a cudaMalloc allocation", planted_write_before_allocation, true,
         {"EMU: error: something wrote 4 bytes before the start of the 4000-byte cudaMalloc allocation",
          "fill_kernel"}, nullptr},
        {"writes within a cudaMalloc allocation", correct_writes_in_bounds, false, {}, nullptr},

        {"a static __shared__ variable carried over from the previous block", planted_static_shared_carries_over, true,
         {"EMU: error:", "no thread of this block has written", "static __shared__", "running_total_kernel"},
         nullptr},
        {"a static __shared__ variable set before use", correct_static_shared_initialized, false, {}, nullptr},

        {"gridDim.y = 70000", planted_grid_y_above_65535, true,
         {"refused: gridDim.y = 70000 (1 to 65535 on sm_90)", "nothing_kernel",
          "error: CUDA error 'invalid configuration argument'", "kernel launch"}, nullptr},
        {"1056 threads a block", planted_1056_threads, true,
         {"refused: 1056 threads a block (at most 1024", "error: CUDA error 'invalid configuration argument'"},
         nullptr},
        {"blockDim.z = 65", planted_block_z_65, true,
         {"refused: blockDim.z = 65", "error: CUDA error 'invalid configuration argument'"}, nullptr},
        {"gridDim.y = 65535", correct_grid_y_65535, false, {}, nullptr},
        {"cudaGetLastError and cudaPeekAtLastError", correct_last_error_semantics, false, {}, nullptr},
        {"a refused launch nobody checks", planted_unchecked_refused_launch, true,
         {"refused: 2048 threads a block", "EMU: error: a kernel launch was refused (above) and the program never "
          "asked"}, nullptr},

        {"a misaligned 16-byte pack load", planted_misaligned_pack_load, true,
         {"EMU: error: misaligned 16-byte load", "pack_copy_kernel", "'misaligned address'", "thread ("}, nullptr},
        {"a misaligned 16-byte pack store", planted_misaligned_pack_store, true,
         {"EMU: error: misaligned 16-byte store", "pack_copy_kernel"}, nullptr},
        {"aligned 16-byte packs", correct_aligned_packs, false, {}, nullptr},
        {"a misaligned float4 load", planted_misaligned_float4, true,
         {"EMU: error: misaligned 16-byte load", "float4_kernel"}, nullptr},
        {"an aligned float4 load", correct_aligned_float4, false, {}, nullptr},

        {"blocks assumed to run in launch order", planted_blocks_in_launch_order, true, {}, nullptr},
        {"independent blocks", correct_independent_blocks, false, {}, nullptr},

        {"a WMMA fragment indexed by position", planted_fragment_indexed_by_position, true, {}, nullptr},
        {"a WMMA fragment scaled element by element", correct_fragment_scaled_uniformly, false, {}, nullptr},

        {"__syncthreads after some threads exited", planted_syncthreads_after_exit, true,
         {"EMU: error: __syncthreads reached after 16 threads of the block exited", "divergent_syncthreads_kernel"},
         nullptr},
        {"a shuffle after half the warp exited", planted_shuffle_after_lanes_exit, true,
         {"EMU: error: a shuffle in warp 0 after 16 of its lanes exited", "shuffle_after_exit_kernel"}, nullptr},
        {"a thread's stack overflows", planted_stack_overflow, true,
         {"EMU: error: a thread's stack overflowed", "stack_overflow_kernel"}, nullptr},
    };
    return all;
}

// runs one case in a child process: its exit status and everything it printed
static int run_child(const Case& c, const char* seed, std::string* output) {
    int fd[2];
    if (pipe(fd) != 0) { perror("pipe"); exit(1); }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 1);
        dup2(fd[1], 2);
        close(fd[0]);
        setenv("EMU_SEED", seed, 1);
        if (c.device) setenv("EMU_DEVICE", c.device, 1);
        else unsetenv("EMU_DEVICE");
        alarm(60);
        bool result = c.run();
        fflush(stdout);
        fflush(stderr);
        exit(result ? 0 : 3);  // 3: the kernel ran and gave a wrong result
    }
    close(fd[1]);
    char buf[4096];
    ssize_t n;
    while ((n = read(fd[0], buf, sizeof(buf))) > 0) output->append(buf, n);
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static std::string first_line_with(const std::string& text, const char* what) {
    size_t at = text.find(what);
    if (at == std::string::npos) return "";
    size_t start = text.rfind('\n', at), end = text.find('\n', at);
    start = start == std::string::npos ? 0 : start + 1;
    return text.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

int main(int argc, char** argv) {
    int passed = 0, failed = 0;
    const char* only = argc > 1 ? argv[1] : nullptr;  // a substring of the case names
    for (const Case& c : cases()) {
        if (only && !strstr(c.name, only)) continue;
        std::string verdict, evidence;
        bool ok = true;
        for (const char* seed : {"1", "2"}) {
            if (!c.planted && seed[0] == '2') break;
            std::string out;
            int status = run_child(c, seed, &out);
            if (!c.planted) {
                ok = status == 0 && out.find("EMU: error") == std::string::npos;
                evidence = ok ? "right result, no error" : "exit status " + std::to_string(status) + ":\n" + out;
            } else if (c.expect.empty()) {
                ok = ok && status == 3 && out.find("EMU: error") == std::string::npos;
                evidence = ok ? "the result is wrong (as on a GPU, where it would be by chance)"
                              : "exit status " + std::to_string(status) + " (want 3, a wrong result):\n" + out;
            } else {
                bool all = status != 0 && status != 3;
                std::string missing;
                for (const char* e : c.expect) {
                    bool found = false;
                    for (std::string rest = e; !found && !rest.empty();) {
                        size_t bar = rest.find('|');
                        found = out.find(rest.substr(0, bar)) != std::string::npos;
                        rest = bar == std::string::npos ? "" : rest.substr(bar + 1);
                    }
                    if (!found) all = false, missing += std::string("\n  missing: ") + e;
                }
                ok = ok && all;
                std::string line = first_line_with(out, "EMU: error");
                if (line.empty()) line = first_line_with(out, "EMU:");
                evidence = ok ? line : "exit status " + std::to_string(status) + missing + "\n" + out;
            }
            if (!ok) break;
        }
        printf("%-6s %s %s\n  %s\n", ok ? "ok" : "FAILED", c.planted ? "planted:" : "correct:", c.name,
               evidence.c_str());
        (ok ? passed : failed)++;
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
