// A CPU stand-in for the part of the CUDA runtime that this project uses, so that its kernels run on a machine
// without a GPU (tools/emulate_gpu.sh, tests/test_emulator.cu, the emulated tests of `make test`). Build with
// tools/cuda_emulator/emucc, which rewrites kernel<<<...>>> launches and __shared__ declarations into the calls
// below and instruments every memory access of the kernels.
//
// What it does, and where:
//   emu_device.h   the limits of the GPU it imitates (EMU_DEVICE=sm_80|sm_86|sm_89|sm_90, default sm_90)
//   emu_core.h     indices, the launch that runs, seeded random numbers (EMU_SEED), how errors are reported
//   emu_threads.h  a block's threads as coroutines under an adversarial scheduler; barriers and shuffles
//   emu_memory.h   device memory with guards, the shared-memory window, the checks on every access
//   this file      the runtime API: errors, device properties, memory, events, launches
// A launch is checked as the driver checks it: a bad configuration does not run, and cudaGetLastError returns the
// error (so the program's own launch checks run). The blocks of a grid run one after another in a random order
// (EMU_SEED), each on NaN-filled shared memory. Every bug the emulator finds ends the program with lines that start
// "EMU: error:" and name the kernel, the launch, the block and the thread.
//
// What it cannot show: speed, coalescing, bank conflicts, the GPU's own rounding (fused multiply-adds, fast math),
// cuBLAS's algorithm choice, memory ordering beyond its barrier model (global memory between blocks or between
// warps, atomics, fences), registers and __launch_bounds__. tests/gpu_check.sh on a GPU covers those.
#pragma once
// defined in every program built for the emulator (tools/cuda_emulator/emucc): a test may use what only the emulator
// can do (cublasLt.h's EMU_LT_* faults), and must leave that out on a GPU
#define CUDA_EMULATOR 1
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <type_traits>
#include <vector>
#include <math.h>
#include <time.h>
#include "emu_core.h"
#include "emu_threads.h"
#include "emu_memory.h"
using std::max;
using std::min;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
// the dynamic shared memory of the running block, as an array of T (cuda_common.cuh's macro of the same name)
#define DYNAMIC_SHARED(T, name) T* name = (T*)emu_dynamic_shared

// CUDA's vector types, with the GPU's alignment (a misaligned load of one is reported)
struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) int2 { int x, y; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }

// ---- errors: the last one is kept until cudaGetLastError reads it (cudaPeekAtLastError leaves it)
enum cudaError_t {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidDeviceFunction = 98,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorNoKernelImageForDevice = 209,
};
inline const char* cudaGetErrorString(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorMemoryAllocation: return "out of memory";
        case cudaErrorInvalidConfiguration: return "invalid configuration argument";
        case cudaErrorInvalidDevicePointer: return "invalid device pointer";
        case cudaErrorInvalidDeviceFunction: return "invalid device function";
        case cudaErrorNoKernelImageForDevice: return "no kernel image is available for execution on the device";
        case cudaErrorNoDevice: return "no CUDA-capable device is detected";
        case cudaErrorInvalidDevice: return "invalid device ordinal";
    }
    return "unknown error";
}
inline const char* cudaGetErrorName(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "cudaSuccess";
        case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
        case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
        case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
        case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
        case cudaErrorInvalidDeviceFunction: return "cudaErrorInvalidDeviceFunction";
        case cudaErrorNoKernelImageForDevice: return "cudaErrorNoKernelImageForDevice";
        case cudaErrorNoDevice: return "cudaErrorNoDevice";
        case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    }
    return "cudaErrorUnknown";
}
inline cudaError_t emu_last_error = cudaSuccess;
inline bool emu_unread_refusal = false;  // a launch was refused and the program has not asked since
inline cudaError_t emu_fails(cudaError_t e) {
    emu_last_error = e;
    return e;
}
inline cudaError_t cudaGetLastError() {
    cudaError_t e = emu_last_error;
    emu_last_error = cudaSuccess;
    emu_unread_refusal = false;
    return e;
}
inline cudaError_t cudaPeekAtLastError() {
    emu_unread_refusal = false;
    return emu_last_error;
}

// ---- the device
struct cudaDeviceProp {
    char name[256];
    int major, minor, multiProcessorCount;
    size_t totalGlobalMem, sharedMemPerBlock, sharedMemPerBlockOptin, sharedMemPerMultiprocessor;
    int regsPerBlock, regsPerMultiprocessor, warpSize, maxThreadsPerBlock, maxThreadsPerMultiProcessor;
    int maxThreadsDim[3], maxGridSize[3];
};
enum cudaDeviceAttr {
    cudaDevAttrMaxThreadsPerBlock = 1,
    cudaDevAttrMaxBlockDimX = 2,
    cudaDevAttrMaxBlockDimY = 3,
    cudaDevAttrMaxBlockDimZ = 4,
    cudaDevAttrMaxGridDimX = 5,
    cudaDevAttrMaxGridDimY = 6,
    cudaDevAttrMaxGridDimZ = 7,
    cudaDevAttrMaxSharedMemoryPerBlock = 8,
    cudaDevAttrWarpSize = 10,
    cudaDevAttrMaxRegistersPerBlock = 12,
    cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrMaxThreadsPerMultiProcessor = 39,
    cudaDevAttrComputeCapabilityMajor = 75,
    cudaDevAttrComputeCapabilityMinor = 76,
    cudaDevAttrMaxSharedMemoryPerMultiprocessor = 81,
    cudaDevAttrMaxRegistersPerMultiprocessor = 82,
    cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};
inline size_t emu_global_bytes() { return (size_t)(emu_device().global_gib * (1ull << 30)); }
inline cudaError_t cudaGetDeviceCount(int* n) { *n = 1; return cudaSuccess; }
inline cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : emu_fails(cudaErrorInvalidDevice); }
inline cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
    if (d != 0) return emu_fails(cudaErrorInvalidDevice);
    const EmuDevice& e = emu_device();
    memset(p, 0, sizeof(*p));
    // no product name in it: the trainer would take it for that GPU (its MFU)
    snprintf(p->name, sizeof(p->name), "CPU emulation (%s limits)", e.arch);
    p->major = e.major;
    p->minor = e.minor;
    p->multiProcessorCount = emu_reported_sms();
    p->totalGlobalMem = emu_global_bytes();
    p->sharedMemPerBlock = e.shared_per_block;
    p->sharedMemPerBlockOptin = e.shared_per_block_optin;
    p->sharedMemPerMultiprocessor = e.shared_per_sm;
    p->regsPerBlock = e.regs_per_block;
    p->regsPerMultiprocessor = e.regs_per_sm;
    p->warpSize = 32;
    p->maxThreadsPerBlock = e.max_threads_per_block;
    p->maxThreadsPerMultiProcessor = e.max_threads_per_sm;
    for (int i = 0; i < 3; i++) p->maxThreadsDim[i] = e.max_block_dim[i], p->maxGridSize[i] = e.max_grid_dim[i];
    return cudaSuccess;
}
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr attr, int d) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, d) != cudaSuccess) return emu_last_error;
    switch (attr) {
        case cudaDevAttrMaxThreadsPerBlock: *v = p.maxThreadsPerBlock; break;
        case cudaDevAttrMaxBlockDimX: case cudaDevAttrMaxBlockDimY: case cudaDevAttrMaxBlockDimZ:
            *v = p.maxThreadsDim[attr - cudaDevAttrMaxBlockDimX]; break;
        case cudaDevAttrMaxGridDimX: case cudaDevAttrMaxGridDimY: case cudaDevAttrMaxGridDimZ:
            *v = p.maxGridSize[attr - cudaDevAttrMaxGridDimX]; break;
        case cudaDevAttrMaxSharedMemoryPerBlock: *v = (int)p.sharedMemPerBlock; break;
        case cudaDevAttrWarpSize: *v = 32; break;
        case cudaDevAttrMaxRegistersPerBlock: *v = p.regsPerBlock; break;
        case cudaDevAttrMultiProcessorCount: *v = p.multiProcessorCount; break;
        case cudaDevAttrMaxThreadsPerMultiProcessor: *v = p.maxThreadsPerMultiProcessor; break;
        case cudaDevAttrComputeCapabilityMajor: *v = p.major; break;
        case cudaDevAttrComputeCapabilityMinor: *v = p.minor; break;
        case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *v = (int)p.sharedMemPerMultiprocessor; break;
        case cudaDevAttrMaxRegistersPerMultiprocessor: *v = p.regsPerMultiprocessor; break;
        case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = (int)p.sharedMemPerBlockOptin; break;
        default: return emu_fails(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}
// kernels run when launched: there is nothing to wait for
inline cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }

// ---- device memory (emu_memory.h): its own pages, NaN-filled, guarded; the device's size is the limit
inline cudaError_t cudaMalloc(void** p, size_t bytes) {
    *p = nullptr;
    if (bytes > emu_global_bytes() - std::min(emu_global_bytes(), emu_allocated_bytes))
        return emu_fails(cudaErrorMemoryAllocation);
    size_t rounded = (std::max(bytes, (size_t)1) + 255) / 256 * 256;
    size_t data = (rounded + 256 + EMU_PAGE - 1) / EMU_PAGE * EMU_PAGE;
    size_t total = data + 2 * EMU_PAGE;
    char* map = (char*)mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
                            0);
    if (map == MAP_FAILED) {
        fprintf(stderr, "EMU: cudaMalloc(%zu bytes): this machine has no room for it\n", bytes);
        return emu_fails(cudaErrorMemoryAllocation);
    }
    mprotect(map, EMU_PAGE, PROT_NONE);
    mprotect(map + EMU_PAGE + data, EMU_PAGE, PROT_NONE);
    char* user = map + EMU_PAGE + data - rounded;
    memset(map + EMU_PAGE, 0xff, data);  // NaN, slack included
    emu_allocs[(uintptr_t)user] = EmuAlloc{user, bytes, map, total, data - rounded, rounded - bytes};
    emu_allocated_bytes += bytes;
    emu_install_fault_handler();
    *p = user;
    return cudaSuccess;
}
inline cudaError_t cudaFree(void* p) {
    if (!p) return cudaSuccess;
    auto it = emu_allocs.find((uintptr_t)p);
    if (it == emu_allocs.end())
        emu_error("cudaFree(%p): not a pointer cudaMalloc returned (or freed twice): %s", p,
                  emu_describe_address((uintptr_t)p).c_str());
    emu_check_alloc_guards(it->second);
    emu_allocated_bytes -= it->second.bytes;
    munmap(it->second.map, it->second.map_bytes);
    emu_allocs.erase(it);
    return cudaSuccess;
}
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice,
                      cudaMemcpyDefault };
// a device range must lie in one allocation
inline void emu_check_device_range(const void* p, size_t n, const char* what) {
    if (n && !emu_in_allocation(p, n))
        emu_error("%s: %zu bytes at %p do not lie in one cudaMalloc allocation (it starts at %s)", what, n, p,
                  emu_describe_address((uintptr_t)p).c_str());
}
inline cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind kind) {
    if (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice) emu_check_device_range(d, n, "cudaMemcpy");
    if (kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice) emu_check_device_range(s, n, "cudaMemcpy");
    memcpy(d, s, n);
    return cudaSuccess;
}
inline cudaError_t cudaMemset(void* d, int v, size_t n) {
    emu_check_device_range(d, n, "cudaMemset");
    memset(d, v, n);
    return cudaSuccess;
}
inline cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
    *total_bytes = emu_global_bytes();
    *free_bytes = *total_bytes - std::min(*total_bytes, emu_allocated_bytes);
    return cudaSuccess;
}

// ---- events: kernels run when launched, so an event's time is the host's clock when it is recorded
typedef struct EmuStream* cudaStream_t;
struct EmuEvent { double ms; };
typedef EmuEvent* cudaEvent_t;
inline double emu_now_ms() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }
inline cudaError_t cudaEventCreate(cudaEvent_t* e) { *e = new EmuEvent{0}; return cudaSuccess; }
inline cudaError_t cudaEventDestroy(cudaEvent_t e) { delete e; return cudaSuccess; }
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t = nullptr) { e->ms = emu_now_ms(); return cudaSuccess; }
inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
    *ms = (float)(b->ms - a->ms);
    return cudaSuccess;
}

// ---- kernel attributes: the dynamic shared memory a kernel may ask for (48 KB until raised)
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
inline std::map<const void*, int> emu_max_dynamic_shared;
template <typename K> cudaError_t cudaFuncSetAttribute(K kernel, cudaFuncAttribute attr, int bytes) {
    const EmuDevice& d = emu_device();
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return emu_fails(cudaErrorInvalidValue);
    if (bytes < 0 || bytes > d.shared_per_block_optin) {
        fprintf(stderr, "EMU: cudaFuncSetAttribute(%s, cudaFuncAttributeMaxDynamicSharedMemorySize, %d) fails: "
                "more than the %d bytes a block can have on %s (%s); cudaErrorInvalidValue\n",
                emu_function_name((const void*)kernel).c_str(), bytes, d.shared_per_block_optin, d.arch, d.parts);
        return emu_fails(cudaErrorInvalidValue);
    }
    emu_max_dynamic_shared[(const void*)kernel] = bytes;
    return cudaSuccess;
}
// cudaFuncGetAttributes is how a program asks whether its build holds code for the device: EMU_BUILD_ARCHS (a list
// such as "80 86", unset: every generation) imitates a build for those architectures only, and on an emulated device
// outside it the call fails as the driver's does, with cudaErrorNoKernelImageForDevice
struct cudaFuncAttributes { size_t sharedSizeBytes; int maxThreadsPerBlock, numRegs, ptxVersion, binaryVersion; };
template <typename K> cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, K) {
    const EmuDevice& d = emu_device();
    const char* archs = getenv("EMU_BUILD_ARCHS");
    if (archs && *archs) {
        char mine[8];
        snprintf(mine, sizeof(mine), "%d%d", d.major, d.minor);
        bool found = false;
        for (const char* p = archs; *p;) {
            size_t n = strcspn(p, " ,");
            if (n == strlen(mine) && !strncmp(p, mine, n)) found = true;
            p += n;
            p += strspn(p, " ,");
        }
        if (!found) return emu_fails(cudaErrorNoKernelImageForDevice);
    }
    *a = {0, d.max_threads_per_block, 32, d.major * 10 + d.minor, d.major * 10 + d.minor};
    return cudaSuccess;
}
template <typename K> cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, K, int, size_t) {
    *n = 2;
    return cudaSuccess;
}

// ---- launches

// Why the driver would refuse this launch (cudaSuccess if it would not), with the reason in `why`.
inline cudaError_t emu_check_launch(const void* fn, dim3 grid, dim3 block, size_t shared, std::string* why) {
    const EmuDevice& d = emu_device();
    char buf[300];
    unsigned b[3] = {block.x, block.y, block.z}, g[3] = {grid.x, grid.y, grid.z};
    const char* axis = "xyz";
    for (int i = 0; i < 3; i++) {
        if (b[i] == 0 || b[i] > (unsigned)d.max_block_dim[i]) {
            snprintf(buf, sizeof(buf), "blockDim.%c = %u (1 to %d on %s)", axis[i], b[i], d.max_block_dim[i], d.arch);
            *why = buf;
            return cudaErrorInvalidConfiguration;
        }
        if (g[i] == 0 || g[i] > (unsigned)d.max_grid_dim[i]) {
            snprintf(buf, sizeof(buf), "gridDim.%c = %u (1 to %d on %s)", axis[i], g[i], d.max_grid_dim[i], d.arch);
            *why = buf;
            return cudaErrorInvalidConfiguration;
        }
    }
    unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
    if (threads > (unsigned long long)d.max_threads_per_block) {
        snprintf(buf, sizeof(buf), "%llu threads a block (at most %d on %s)", threads, d.max_threads_per_block,
                 d.arch);
        *why = buf;
        return cudaErrorInvalidConfiguration;
    }
    auto it = emu_max_dynamic_shared.find(fn);
    int allowed = it == emu_max_dynamic_shared.end() ? d.shared_per_block : it->second;
    if (shared > (size_t)allowed) {
        if (it == emu_max_dynamic_shared.end())
            snprintf(buf, sizeof(buf), "%zu bytes of dynamic shared memory, more than the %d a kernel gets without "
                     "cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)", shared,
                     allowed);
        else
            snprintf(buf, sizeof(buf), "%zu bytes of dynamic shared memory, more than the %d that "
                     "cudaFuncSetAttribute allowed this kernel", shared, allowed);
        *why = buf;
        return cudaErrorInvalidValue;
    }
    return cudaSuccess;
}

// A refused launch that the program never asked about (cudaGetLastError, cudaPeekAtLastError) is an error at exit:
// on a GPU the kernel's results would silently be missing.
inline void emu_check_refusals_at_exit() {
    if (emu_unread_refusal) {
        fprintf(stderr, "EMU: error: a kernel launch was refused (above) and the program never asked "
                "cudaGetLastError or cudaPeekAtLastError\n");
        fflush(stderr);
        _exit(1);
    }
}

// Runs every block of the grid, in a random order, then checks the guards of device memory.
template <typename Body>
void emu_run_grid(const Body& body) {
    std::function<void()> fn = body;
    emu_body = &fn;
    unsigned long long blocks = (unsigned long long)gridDim.x * gridDim.y * gridDim.z;
    std::vector<unsigned> order(blocks);
    for (unsigned long long i = 0; i < blocks; i++) order[i] = (unsigned)i;
    for (unsigned long long i = blocks; i > 1; i--) std::swap(order[i - 1], order[emu_rand() % i]);
    int n = (int)(blockDim.x * blockDim.y * blockDim.z);
    for (unsigned long long i = 0; i < blocks; i++) {
        unsigned b = order[i];
        blockIdx = dim3(b % gridDim.x, b / gridDim.x % gridDim.y, b / (gridDim.x * gridDim.y));
        emu_reset_shared(emu_launch_now.dynamic_bytes);
        emu_in_kernel = true;
        emu_run_block(n);
        emu_in_kernel = false;
        emu_check_shared_guards(emu_launch_now.dynamic_bytes);
    }
    emu_check_all_guards();
}

// kernel<<<grid, block, shared_bytes>>>(args) becomes emu_launch(kernel, "kernel", __FILE__, __LINE__, grid, block,
// shared_bytes)(args) (emucc)
template <typename K>
auto emu_launch(K kernel, const char* source, const char* file, int line, dim3 grid, dim3 block,
                size_t shared_bytes = 0, cudaStream_t = nullptr) {
    return [=](auto... args) {
        static bool at_exit = (atexit(emu_check_refusals_at_exit), true);
        (void)at_exit;
        emu_init_window();
        emu_install_fault_handler();
        EmuLaunch& l = emu_launch_now;
        l = EmuLaunch{++emu_launch_count, source, file, line, (const void*)kernel, grid, block, shared_bytes, false,
                      false, 0};
        std::string why;
        cudaError_t refused = emu_check_launch((const void*)kernel, grid, block, shared_bytes, &why);
        if (refused != cudaSuccess) {
            fprintf(stderr, "EMU: launch #%lld of %s refused: %s; cudaGetLastError returns %s\n", l.serial,
                    emu_kernel_label(l).c_str(), why.c_str(), cudaGetErrorName(refused));
            emu_fails(refused);
            emu_unread_refusal = true;
            return;
        }
        // static __shared__ variables and the dynamic shared memory share the block's limit: 48 KB, or with
        // cudaFuncSetAttribute(bytes) the opt-in maximum less those bytes (the driver checks it there)
        auto it = emu_max_dynamic_shared.find((const void*)kernel);
        const EmuDevice& d = emu_device();
        emu_static_room = it == emu_max_dynamic_shared.end() ? d.shared_per_block - shared_bytes
                                                             : d.shared_per_block_optin - it->second;
        gridDim = grid;
        blockDim = block;
        l.active = true;
        emu_open_window(true);
        emu_run_grid([&]() { kernel(args...); });
        emu_open_window(false);
        l.active = false;
    };
}
