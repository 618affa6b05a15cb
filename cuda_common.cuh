/*
cuda_common.cuh: what every kernel file of the CUDA trainer shares.

  - the precision (bf16 or fp32, chosen at build time): the storage type of the activations and of the weights the
    kernels read (floatX) and of cuBLAS (CUBLAS_FLOATX); whether cuBLASLt's epilogues are used
  - failures: every CUDA and cuBLAS call checked with file and line, one line on stderr and exit 1
  - the device context: the cuBLAS (and cuBLASLt) handles, the compute mode, the peak FLOP/s for the MFU, the
    scratch for partial sums
  - profile_part: the marks that tools/profile_gpu.cu times a step's parts by
  - warp and block reductions
  - the row building blocks: a LayerNorm over one row of C channels held in the registers of one block (moved
    16 bytes at a time), forward and backward. Pre-Norm, Post-Norm (train_gpt2.cu) and SiameseNorm (siamese.cuh)
    are all built from these.
  - the second stage of every deterministic reduction: per-block partial sums added up in a fixed order

Reductions never use atomics: a run repeats bit for bit on the same GPU.
*/
#pragma once
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include "host/utils.h"

// The precision, chosen at build time as in llm.c (make PRECISION=BF16|FP32 -> -DENABLE_BF16 / -DENABLE_FP32; bf16
// when neither is given). floatX is the storage type of the activations and of the copy of the parameters that
// the kernels and matrix products read; the math inside every kernel is float32, and cuBLAS accumulates in float32.
// What stays float32 in both modes: the master parameters, their gradients, AdamW's m and v (so the optimizer and
// gradient accumulation see float32 sums), the LayerNorm statistics, the losses, and the checkpoint files.
//   FP32: floatX = float; the kernels read the master parameters themselves (no copy). -f 1 allows TF32 products.
//   BF16: floatX = __nv_bfloat16 (8 significant bits: a stored value is off by at most 2^-8 = 0.4% relative);
//         the matrix products run on bf16 tensor cores with float32 accumulation; AdamW writes the bf16 copy.
#if defined(ENABLE_BF16) && defined(ENABLE_FP32)
#error "define one of ENABLE_BF16 and ENABLE_FP32"
#endif
#if !defined(ENABLE_FP32) && !defined(ENABLE_BF16)
#define ENABLE_BF16
#endif
#ifdef ENABLE_FP32
typedef float floatX;
static const cudaDataType_t CUBLAS_FLOATX = CUDA_R_32F;
static const char* const PRECISION_NAME = "fp32";
#else
#include <cuda_bf16.h>
typedef __nv_bfloat16 floatX;
static const cudaDataType_t CUBLAS_FLOATX = CUDA_R_16BF;
static const char* const PRECISION_NAME = "bf16";
#endif
static const int FLOATX_IS_FLOAT = sizeof(floatX) == sizeof(float);

// bf16: the products that end in a bias or a GELU go to cuBLASLt, which adds the bias and applies the GELU (and in
// the backward pass its derivative) in the product's epilogue, instead of a separate pass over the result.
// -DNO_CUBLASLT keeps the separate kernels; the fp32 build always does. At run time the environment variable
// TRAIN_GPT2_EPILOGUES=0 keeps them too (every program built from train_gpt2.cu: the trainer, the tests, the tools),
// and a product for which cuBLASLt has no usable algorithm takes them by itself (train_gpt2.cu's gemm_epilogue).
#if !defined(ENABLE_FP32) && !defined(NO_CUBLASLT)
#define USE_CUBLASLT 1
#include <cublasLt.h>
#else
#define USE_CUBLASLT 0
#endif

// ----------------------------------------------------------------------------------------------------------------
// failures: one line with the file and line of the call, exit 1

static void cuda_check(cudaError_t err, const char* what, const char* file, int line) {
    if (err != cudaSuccess) fail("CUDA error '%s' at %s:%d in %s", cudaGetErrorString(err), file, line, what);
}
static void cublas_check(cublasStatus_t status, const char* what, const char* file, int line) {
    if (status != CUBLAS_STATUS_SUCCESS)
        fail("cuBLAS error '%s' at %s:%d in %s", cublasGetStatusString(status), file, line, what);
}
#define cudaCheck(call) cuda_check((call), #call, __FILE__, __LINE__)
#define cublasCheck(call) cublas_check((call), #call, __FILE__, __LINE__)
// after every kernel launch: a bad launch configuration shows up here, at the launch that caused it
#define launchCheck() cuda_check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

static inline int ceil_div(long long a, long long b) { return (int)((a + b - 1) / b); }

// the dynamic shared memory of a kernel (its size is the third launch parameter), as an array `name` of T
// (tools/cuda_emulator defines its own)
#ifndef DYNAMIC_SHARED
#define DYNAMIC_SHARED(T, name)                                    \
    extern __shared__ __align__(128) unsigned char dynamic_smem_[]; \
    T* name = (T*)dynamic_smem_
#endif

// ----------------------------------------------------------------------------------------------------------------
// the device context

static struct {
    int ready;
    cublasHandle_t cublas;
    cublasComputeType_t compute;  // CUBLAS_COMPUTE_32F, or CUBLAS_COMPUTE_32F_FAST_TF32 with -f 1
    int sms;                      // streaming multiprocessors, for grid sizes
    int cc;                       // compute capability, major * 10 + minor (80 A100, 86 RTX 30, 89 RTX 40, 90 H100)
    size_t smem_optin;            // the most dynamic shared memory a block may have (with cudaFuncSetAttribute):
                                  // 163 KB on sm_80, 99 KB on sm_86/89, 227 KB on sm_90 (kernels that would need more
                                  // take a variant that fits: see attention.cuh)
    size_t total_memory;          // bytes of device memory
    char name[200];
    double peak_flops;            // dense peak of the matrix products in use, for the MFU; 0 where not known
#if USE_CUBLASLT
    cublasLtHandle_t cublaslt;
    void* lt_workspace;
    size_t lt_workspace_bytes;
    bool no_epilogues;            // take the separate kernels anyway: TRAIN_GPT2_EPILOGUES=0 (gpu_init), or
                                  // tools/profile_gpu --epilogues 0, which compares
    long long lt_products;        // products that ran with an epilogue on cuBLASLt, and those that fell back to the
    long long lt_fallbacks;       // plain product and kernels because cuBLASLt had no usable algorithm (the tests)
#endif
    float* partials;              // scratch for the first stage of the reductions (see reduce_partials)
    size_t partials_floats;
} gpu;

static void* cuda_malloc_bytes(size_t bytes, const char* what) {
    if (bytes == 0) return nullptr;
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, bytes);
    if (err == cudaErrorMemoryAllocation) {
        cudaGetLastError();  // clear it
        size_t free_bytes = 0, total_bytes = 0;
        cudaMemGetInfo(&free_bytes, &total_bytes);
        fail("out of GPU memory: %s needs %.1f MiB, but only %.1f MiB of %.1f MiB are free (try a smaller -b or -t)",
             what, bytes / 1048576.0, free_bytes / 1048576.0, total_bytes / 1048576.0);
    }
    cudaCheck(err);
    return p;
}

template <typename T>
static T* cuda_malloc(size_t count, const char* what) {
    return (T*)cuda_malloc_bytes(count * sizeof(T), what);
}

// The datasheet's dense peak for the MFU, as llm.c counts it: an H100 SXM and an H200 (the same GH100 chip and
// clocks) do 989.5 TFLOP/s in bf16 (llm.c's number for the H100 SXM; NVIDIA quotes 989 for the H200), 494.7 in TF32
// and 66.9 in plain float32; an A100 312, 156 and 19.5. Other devices: 0, and the trainer prints no MFU rather than
// a wrong one (the consumer parts' datasheets differ by how they accumulate).
static double device_peak_flops(const char* name, int tf32) {
    double bf16 = 0, tf = 0, fp32 = 0;
    if (strstr(name, "H100") || strstr(name, "H200")) bf16 = 989.5e12, tf = 494.7e12, fp32 = 66.9e12;
    else if (strstr(name, "A100")) bf16 = 312e12, tf = 156e12, fp32 = 19.5e12;
    if (!FLOATX_IS_FLOAT) return bf16;
    return tf32 ? tf : fp32;
}

// TRAIN_GPT2_EPILOGUES: 1 (or unset) lets the bf16 build fuse the bias and GELU into cuBLASLt's products, 0 keeps
// the plain products and the separate bias and GELU kernels (the same function: what to try first if a product's
// epilogue is suspected on a new GPU or cuBLAS). Any other value is one error line. The fp32 build has no epilogues.
static bool epilogues_from_environment(void) {
    const char* e = getenv("TRAIN_GPT2_EPILOGUES");
    if (!e) return true;
    if (strcmp(e, "0") && strcmp(e, "1"))
        fail("TRAIN_GPT2_EPILOGUES must be 0 (cuBLASLt's bias and GELU epilogues off: plain products and separate "
             "kernels) or 1 (on, the default), got '%s'", e);
    return !strcmp(e, "1");
}

// a kernel that does nothing: whether this build has code the device can run (cudaFuncGetAttributes of it)
__global__ void gpu_code_probe_kernel() {}

// Picks the device (0, or a rank's under mpirun) and sets up cuBLAS. Without a usable GPU: one line, exit 1.
static void gpu_init(int tf32, int device = 0) {
    if (!gpu.ready) {
        bool epilogues = epilogues_from_environment();  // a bad value fails first, in every build
        int count = 0;
        cudaError_t err = cudaGetDeviceCount(&count);
        if (err != cudaSuccess || count == 0)
            fail("no CUDA device found (%s); the CUDA trainer needs a GPU, the CPU trainer is ./reference_cpu",
                 err != cudaSuccess ? cudaGetErrorString(err) : "cudaGetDeviceCount returned 0");
        if (device >= count) fail("GPU %d was asked for but there are %d", device, count);
        cudaCheck(cudaSetDevice(device));
        cudaDeviceProp prop;
        cudaCheck(cudaGetDeviceProperties(&prop, device));
        int cc = prop.major * 10 + prop.minor;
        if (cc < 80)
            fail("'%s' is sm_%d: the CUDA trainer needs sm_80 or newer (A100, RTX 30 and later: bf16 tensor cores); "
                 "on this machine train with ./reference_cpu", prop.name, cc);
        cudaFuncAttributes attributes;
        err = cudaFuncGetAttributes(&attributes, gpu_code_probe_kernel);
        if (err == cudaErrorNoKernelImageForDevice || err == cudaErrorInvalidDeviceFunction)
            fail("this build has no code for '%s' (sm_%d): rebuild for it, make clean && make GPU_ARCHS=%d "
                 "(make alone builds for the GPU it finds)", prop.name, cc, cc);
        cudaCheck(err);
        gpu.sms = prop.multiProcessorCount;
        gpu.cc = cc;
        gpu.smem_optin = prop.sharedMemPerBlockOptin;
        gpu.total_memory = prop.totalGlobalMem;
        snprintf(gpu.name, sizeof(gpu.name), "%.120s", prop.name);
        cublasCheck(cublasCreate(&gpu.cublas));
#if USE_CUBLASLT
        cublasCheck(cublasLtCreate(&gpu.cublaslt));
        gpu.lt_workspace_bytes = 32 << 20;  // as llm.c: enough for the fastest algorithms on Hopper
        cudaCheck(cudaMalloc(&gpu.lt_workspace, gpu.lt_workspace_bytes));
        gpu.no_epilogues = !epilogues;
#else
        (void)epilogues;
#endif
        gpu.ready = 1;
    }
    // CUBLAS_COMPUTE_32F is true float32; the math mode keeps the batched and legacy paths the same
    // (bf16: the products are bf16 tensor-core products with float32 accumulation whatever -f says)
    if (!FLOATX_IS_FLOAT) tf32 = 0;
    gpu.compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasCheck(cublasSetMathMode(gpu.cublas, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    gpu.peak_flops = device_peak_flops(gpu.name, tf32);
}

static void gpu_reserve_partials(size_t floats) {
    if (floats <= gpu.partials_floats) return;
    if (gpu.partials) cudaCheck(cudaFree(gpu.partials));
    gpu.partials = cuda_malloc<float>(floats, "reduction scratch");
    gpu.partials_floats = floats;
}

static double gpu_memory_used_mib(void) {
    size_t free_bytes = 0, total_bytes = 0;
    cudaCheck(cudaMemGetInfo(&free_bytes, &total_bytes));
    return (total_bytes - free_bytes) / 1048576.0;
}

// ----------------------------------------------------------------------------------------------------------------
// Where a step's time goes (tools/profile_gpu.cu; llm.c marks its code with NVTX ranges for the same purpose).
// profile_part("mlp") says that the GPU work launched from here until the next profile_part() call belongs to the
// part "mlp" (a string literal). Off, it tests one flag. On, it records a CUDA event; all work runs in order on one
// stream, so the time between two consecutive events is the GPU time of the work launched between them, including
// any time the GPU waits for the host.

struct ProfileMark {
    const char* part;    // the part the work after the event belongs to
    int phase;           // profile.phase when the mark was made (the profiler's own label, e.g. forward)
    cudaEvent_t event;
};
static struct {
    bool on;
    int phase;
    std::vector<ProfileMark> marks;   // in launch order
    std::vector<cudaEvent_t> spare;   // events whose marks have been read, for reuse
} profile;

static void profile_part(const char* part) {
    if (!profile.on) return;
    cudaEvent_t event;
    if (profile.spare.empty()) {
        cudaCheck(cudaEventCreate(&event));
    } else {
        event = profile.spare.back();
        profile.spare.pop_back();
    }
    cudaCheck(cudaEventRecord(event));
    profile.marks.push_back({part, profile.phase, event});
}

// ----------------------------------------------------------------------------------------------------------------
// reductions. Every lane of a warp ends with the same value (the butterfly adds the same two numbers on both sides),
// and every thread of a block reads the per-warp partials in the same order, so all threads agree bit for bit.

static const unsigned FULL_MASK = 0xffffffffu;

struct SumOp {
    template <typename T>
    __device__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// every lane of the warp gets op over the 32 lanes' values (a butterfly: the same order, so the same bits, in all)
template <typename T, typename Op>
__device__ inline T warp_reduce(T v, Op op) {
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(FULL_MASK, v, o));
    return v;
}
template <typename T>
__device__ inline T warp_sum(T v) { return warp_reduce(v, SumOp()); }
__device__ inline float warp_max(float v) { return warp_reduce(v, MaxOp()); }

// Sums K values over the whole block; every thread must call it (blockDim.x a multiple of 32, at most 1024).
template <int K>
__device__ void block_sum(float (&v)[K]) {
    __shared__ float shared[K][32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    for (int k = 0; k < K; k++) v[k] = warp_sum(v[k]);
    __syncthreads();  // the previous call's readers are done with `shared`
    if (lane == 0)
        for (int k = 0; k < K; k++) shared[k][warp] = v[k];
    __syncthreads();
    for (int k = 0; k < K; k++) {
        float s = 0;
        for (int w = 0; w < warps; w++) s += shared[k][w];
        v[k] = s;
    }
}

// One value reduced by op over the whole block: op of `identity` and the warps' results in warp order. Every thread
// must call it and gets the result.
template <typename T, typename Op>
__device__ T block_reduce(T v, Op op, T identity) {
    __shared__ T shared[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = warp_reduce(v, op);
    __syncthreads();  // the previous call's readers are done with `shared`
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    T r = identity;
    for (int w = 0; w < warps; w++) r = op(r, shared[w]);
    return r;
}
__device__ inline float block_max(float v) { return block_reduce(v, MaxOp(), -INFINITY); }
__device__ inline double block_sum_double(double v) { return block_reduce(v, SumOp(), 0.0); }

// ----------------------------------------------------------------------------------------------------------------
// Row building blocks. A "row kernel" gives each row of C channels to one block; thread t owns VALS channels (the
// last ones possibly past C) in packs of ROW_PACK neighbours, 16 bytes of floatX (8 channels in bf16, 4 in fp32):
// pack p of thread t is channels p * ROW_PACK * blockDim.x + t * ROW_PACK + 0 .. ROW_PACK - 1 (row_channel). It
// keeps them in registers, so a row is read from memory once however many LayerNorms it goes through. A pack moves
// in one 16-byte load or store (when C is a multiple of ROW_PACK, which keeps every row 16-byte aligned; else one
// element at a time, the same channels), and the threads of a warp move 512 consecutive bytes. Backward kernels walk
// over rows with a stride of gridDim.x; a thread owns the same channels in every row, so the LayerNorm parameter
// gradients (sums over rows) collect in its registers and leave as one partial sum per block.

static const int ROW_PACK = 16 / (int)sizeof(floatX);
// P neighbouring elements moved as one (a 16-byte load or store for P = ROW_PACK)
template <int P>
struct alignas(P * sizeof(floatX)) Pack {
    floatX v[P];
};
typedef Pack<ROW_PACK> RowPack;

// __launch_bounds__ of every row kernel: 512 threads (at most 128 registers a thread) in fp32, where a thread owns 4
// channels; 256 (at most 255 registers) in bf16, where it owns 8 and the siamese backward kernel needs ~140. Both
// cover C = 2048 with the small VALS.
static const int MAX_ROW_THREADS = sizeof(floatX) == 2 ? 256 : 512;
static const int MAX_ROW_BLOCKS_PER_SM = 8; // backward row kernels: at most this many blocks per SM (partials size)


// channels per thread: one pack (8 in bf16, 4 in fp32) up to C = 2048 (GPT-2 XL has 1600), else 16 up to 4096
// (bf16) or 8192 (fp32)
static const int ROW_VALS_SMALL = ROW_PACK;
static int row_vals(int C) {
    if (C <= ROW_VALS_SMALL * MAX_ROW_THREADS) return ROW_VALS_SMALL;
    if (C <= 16 * MAX_ROW_THREADS) return 16;
    fail("%d channels exceed what the row kernels support (%d)", C, 16 * MAX_ROW_THREADS);
}
static int row_threads(int C) { return ceil_div(ceil_div(C, row_vals(C)), 32) * 32; }

// the channel of the thread's k-th value (k = 0 .. VALS-1)
__device__ inline int row_channel(int k) {
    return (k / ROW_PACK) * ROW_PACK * blockDim.x + threadIdx.x * ROW_PACK + k % ROW_PACK;
}

// Calls launch(std::integral_constant<int, VALS>()) with the VALS that fits C: the kernels are templates on VALS so
// that the per-thread arrays have a compile-time size and live in registers.
template <typename Launch>
static void with_row_vals(int C, Launch launch) {
    if (row_vals(C) == ROW_VALS_SMALL) launch(std::integral_constant<int, ROW_VALS_SMALL>());
    else launch(std::integral_constant<int, 16>());
}

// grid of a backward row kernel: as many blocks as fit on the GPU at once (capped), never more than rows
template <typename Kernel>
static int row_grid(Kernel kernel, int threads, int rows) {
    int per_sm = 0;
    cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0));
    per_sm = std::max(1, std::min(per_sm, MAX_ROW_BLOCKS_PER_SM));
    return std::max(1, std::min(rows, gpu.sms * per_sm));
}
static size_t row_partials_floats(int C, int arrays) { return (size_t)gpu.sms * MAX_ROW_BLOCKS_PER_SM * arrays * C; }

// Elements i0 .. i0 + ROW_PACK - 1 of a row into v[0 .. ROW_PACK - 1] as floats: those below n read, the others
// `fill`. One 16-byte load when `packed` (the row is made of whole packs and starts 16-byte aligned) and the pack
// lies below n.
__device__ inline void load_pack(float* v, const floatX* row, int i0, int n, bool packed, float fill) {
    if (packed && i0 + ROW_PACK <= n) {
        RowPack pack = *(const RowPack*)(row + i0);
        for (int k = 0; k < ROW_PACK; k++) v[k] = (float)pack.v[k];
    } else {
        for (int k = 0; k < ROW_PACK; k++) v[k] = i0 + k < n ? (float)row[i0 + k] : fill;
    }
}

// elements i0 (< n) .. of a row of n from v[0 .. ROW_PACK - 1] (those below n); one 16-byte store when `packed`
// (n a multiple of ROW_PACK)
__device__ inline void store_pack(floatX* row, const float* v, int i0, int n, bool packed) {
    if (packed) {
        RowPack pack;
        for (int k = 0; k < ROW_PACK; k++) pack.v[k] = (floatX)v[k];
        *(RowPack*)(row + i0) = pack;
    } else {
        for (int k = 0; k < ROW_PACK; k++)
            if (i0 + k < n) row[i0 + k] = (floatX)v[k];
    }
}

// the thread's VALS channels of a row of C (0 past C), pack by pack
template <int VALS>
__device__ inline void load_row(float (&v)[VALS], const floatX* row, int C) {
    static_assert(VALS % ROW_PACK == 0, "whole packs");
    for (int k0 = 0; k0 < VALS; k0 += ROW_PACK)
        load_pack(v + k0, row, row_channel(k0), C, C % ROW_PACK == 0, 0.0f);
}

template <int VALS>
__device__ inline void store_row(floatX* row, const float (&v)[VALS], int C) {
    for (int k0 = 0; k0 < VALS; k0 += ROW_PACK)
        if (row_channel(k0) < C) store_pack(row, v + k0, row_channel(k0), C, C % ROW_PACK == 0);
}

// Stores v and replaces it by what was stored (bf16: the rounded values; fp32: nothing changes), so that the rest
// of a forward kernel computes with exactly the values that the backward pass (and a recomputation) reads back.
template <int VALS>
__device__ inline void store_row_keep(floatX* row, float (&v)[VALS], int C) {
    for (int k = 0; k < VALS; k++) v[k] = (float)(floatX)v[k];
    store_row(row, v, C);
}

// the normalization itself, written once: a backward kernel that recomputes a LayerNorm output from the saved
// statistics uses the forward's formula (the same numbers, up to how the compiler fuses multiply-adds)
__device__ inline float ln_apply(float v, float mean, float rstd, float w, float b) { return (v - mean) * rstd * w + b; }

// out = LN(in) = (in - mean) * rstd * w + b over the C channels of the block's row, eps 1e-5; thread 0 stores
// mean and rstd (= 1/std) for the backward pass. Every thread of the block must call it.
template <int VALS>
__device__ void layernorm_row(float (&out)[VALS], const float (&in)[VALS], const floatX* w, const floatX* b, int C,
                              float* mean_out, float* rstd_out) {
    float s[1] = {0.0f};
    for (int k = 0; k < VALS; k++)
        if (row_channel(k) < C) s[0] += in[k];
    block_sum(s);
    float mean = s[0] / C;
    float var[1] = {0.0f};
    for (int k = 0; k < VALS; k++)
        if (row_channel(k) < C) var[0] += (in[k] - mean) * (in[k] - mean);
    block_sum(var);
    float rstd = 1.0f / sqrtf(var[0] / C + 1e-5f);
    for (int k = 0; k < VALS; k++) {
        int i = row_channel(k);
        out[k] = i < C ? ln_apply(in[k], mean, rstd, (float)w[i], (float)b[i]) : 0.0f;
    }
    if (threadIdx.x == 0) {
        *mean_out = mean;
        *rstd_out = rstd;
    }
}

// Backward of layernorm_row. With xhat = (in - mean) * rstd and g = w * dout:
//   dinp += rstd * (g - mean(g) - xhat * mean(g * xhat)),   dw += xhat * dout,   db += dout
// dw and db are the thread's running sums over the rows it has seen. Every thread of the block must call it.
template <int VALS>
__device__ void layernorm_row_backward(float (&dinp)[VALS], float (&dw)[VALS], float (&db)[VALS],
                                       const float (&dout)[VALS], const float (&in)[VALS], const floatX* w,
                                       float mean, float rstd, int C) {
    float xhat[VALS], g[VALS], s[2] = {0.0f, 0.0f};
    for (int k = 0; k < VALS; k++) {
        int i = row_channel(k);
        xhat[k] = i < C ? (in[k] - mean) * rstd : 0.0f;
        g[k] = i < C ? (float)w[i] * dout[k] : 0.0f;
        s[0] += g[k];
        s[1] += g[k] * xhat[k];
    }
    block_sum(s);
    float gmean = s[0] / C, gxmean = s[1] / C;
    for (int k = 0; k < VALS; k++) {
        if (row_channel(k) >= C) continue;
        dinp[k] += rstd * (g[k] - gmean - xhat[k] * gxmean);
        dw[k] += xhat[k] * dout[k];
        db[k] += dout[k];
    }
}

// A backward row kernel's parameter-gradient sums leave as partials[block][array][C].
template <int VALS>
__device__ inline void store_partials(float* partials, int arrays, int a, const float (&v)[VALS], int C) {
    float* row = partials + ((size_t)blockIdx.x * arrays + a) * C;
    for (int k = 0; k < VALS; k++) {
        int i = row_channel(k);
        if (i < C) row[i] = v[k];
    }
}

// ----------------------------------------------------------------------------------------------------------------
// second stage of every reduction: dst[a][i] += sum over p of partials[p][a][i], p in increasing order.
// Thread per (a, i): blockIdx.y is the array a, threads run along i (coalesced reads of each partial row).

struct GradTargets {
    float* dst[6];  // up to 6 gradient vectors of n elements (float32 in both precisions); a null entry is skipped
};

__global__ void reduce_partials_kernel(GradTargets t, const float* partials, int parts, int arrays, int n) {
    int a = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n || t.dst[a] == nullptr) return;
    float s = 0.0f;
    for (int p = 0; p < parts; p++) s += partials[((size_t)p * arrays + a) * n + i];
    t.dst[a][i] += s;
}

static void reduce_partials(const GradTargets& t, int arrays, int n, int parts) {
    reduce_partials_kernel<<<dim3(ceil_div(n, 256), arrays), 256>>>(t, gpu.partials, parts, arrays, n);
    launchCheck();
}
