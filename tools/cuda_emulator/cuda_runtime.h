// A CPU stand-in for the part of the CUDA runtime that train_gpt2.cu uses, for tools/emulate_gpu.sh: it runs the
// trainer's own kernel source on a machine without a GPU. Each block's threads run as coroutines (ucontext) on one OS
// thread; __syncthreads and warp shuffles are barriers; the scheduler is adversarial (per block, warps get random
// priorities and a lower one runs only when every higher one waits at a barrier), so a missing barrier or a
// cross-warp race changes the results. Fresh allocations are filled with NaN, so reading memory nobody wrote shows.
// What it cannot show: speed, coalescing, the GPU's own rounding, races inside a warp between two barriers.
#pragma once
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>
#include <ucontext.h>
#include <time.h>
#include <math.h>
using std::min;
using std::max;
#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __launch_bounds__(...)
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
inline dim3 threadIdx, blockIdx, blockDim, gridDim;
typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorMemoryAllocation = 2 };
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
struct cudaDeviceProp { char name[256]; int major, minor, multiProcessorCount; };
inline const char* cudaGetErrorString(cudaError_t) { return "emulated error"; }
inline cudaError_t cudaGetDeviceCount(int* n) { *n = 1; return 0; }
inline cudaError_t cudaSetDevice(int) { return 0; }
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
    snprintf(p->name, sizeof(p->name), "CPU emulation"); p->major = 9; p->minor = 0; p->multiProcessorCount = 3; return 0;
}
inline cudaError_t cudaMalloc(void** p, size_t bytes) { *p = malloc(bytes); memset(*p, 0xff, bytes); return 0; }  // NaN
inline cudaError_t cudaFree(void* p) { free(p); return 0; }
inline cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind) { memcpy(d, s, n); return 0; }
inline cudaError_t cudaMemset(void* d, int v, size_t n) { memset(d, v, n); return 0; }
inline cudaError_t cudaGetLastError() { return 0; }
inline cudaError_t cudaDeviceSynchronize() { return 0; }
inline cudaError_t cudaMemGetInfo(size_t* f, size_t* t) { *f = 1 << 30; *t = 2u << 30; return 0; }
// events: kernels run when launched, so an event's time is the host's clock when it is recorded
struct EmuEvent { double ms; };
typedef EmuEvent* cudaEvent_t;
inline double emu_now_ms() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }
inline cudaError_t cudaEventCreate(cudaEvent_t* e) { *e = new EmuEvent{0}; return 0; }
inline cudaError_t cudaEventDestroy(cudaEvent_t e) { delete e; return 0; }
inline cudaError_t cudaEventRecord(cudaEvent_t e, int stream = 0) { (void)stream; e->ms = emu_now_ms(); return 0; }
inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return 0; }
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) { *ms = (float)(b->ms - a->ms); return 0; }
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };
template <typename K> cudaError_t cudaFuncSetAttribute(K, cudaFuncAttribute, int bytes) {
    if (bytes > 227 * 1024) { fprintf(stderr, "EMU: %d bytes of shared memory, more than an H100 has\n", bytes); abort(); }
    return 0;
}
template <typename K> cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, K, int, size_t) { *n = 2; return 0; }

// ---- the scheduler
struct EmuThread { ucontext_t ctx; char* stack; int state; };  // 0 runnable, 1 block barrier, 2 warp barrier, 3 done
inline std::vector<EmuThread> emu_threads;
inline ucontext_t emu_sched;
inline int emu_cur;
inline const std::function<void()>* emu_body;
inline double emu_slots[1024];
inline unsigned emu_prio[32];
inline long long emu_launches;
inline unsigned long long emu_rng = 88172645463325252ull;
inline unsigned emu_rand() { emu_rng ^= emu_rng << 13; emu_rng ^= emu_rng >> 7; emu_rng ^= emu_rng << 17; return (unsigned)(emu_rng >> 11); }
static const size_t EMU_STACK = 256 * 1024;
inline void emu_set_thread_index(int t) {
    threadIdx.x = t % blockDim.x; threadIdx.y = (t / blockDim.x) % blockDim.y; threadIdx.z = t / (blockDim.x * blockDim.y);
}
inline void emu_wait(int kind) {
    emu_threads[emu_cur].state = kind;
    swapcontext(&emu_threads[emu_cur].ctx, &emu_sched);
}
inline void emu_entry() {
    (*emu_body)();
    emu_threads[emu_cur].state = 3;
    swapcontext(&emu_threads[emu_cur].ctx, &emu_sched);
}
inline void __syncthreads() { emu_wait(1); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
    if (mask != 0xffffffffu) { fprintf(stderr, "EMU: partial __syncwarp mask\n"); abort(); }
    emu_wait(2);
}
// dynamic shared memory: one buffer for the block that runs, NaN-filled before each block (reading what nobody
// wrote shows)
inline std::vector<float> emu_dynamic_shared_buffer;
inline float* emu_dynamic_shared;  // 128-byte aligned, inside the buffer
#define DYNAMIC_SHARED(T, name) T* name = (T*)emu_dynamic_shared
template <typename T> T __shfl_xor_sync(unsigned mask, T v, int o) {
    if (mask != 0xffffffffu) { fprintf(stderr, "EMU: partial shuffle mask\n"); abort(); }
    int t = emu_cur;
    emu_slots[t] = (double)v;
    emu_wait(2);
    T r = (T)emu_slots[(t & ~31) | ((t & 31) ^ o)];
    emu_wait(2);
    return r;
}
inline void emu_run_block(int n) {
    if ((int)emu_threads.size() < n) {
        size_t old = emu_threads.size();
        emu_threads.resize(n);
        for (size_t i = old; i < (size_t)n; i++) emu_threads[i].stack = (char*)malloc(EMU_STACK);
    }
    for (int t = 0; t < n; t++) {
        EmuThread& th = emu_threads[t];
        getcontext(&th.ctx);
        th.ctx.uc_stack.ss_sp = th.stack;
        th.ctx.uc_stack.ss_size = EMU_STACK;
        th.ctx.uc_link = nullptr;
        makecontext(&th.ctx, emu_entry, 0);
        th.state = 0;
    }
    for (int w = 0; w < 32; w++) emu_prio[w] = emu_rand();
    std::vector<int> order(n);
    for (int t = 0; t < n; t++) order[t] = t;
    for (;;) {
        // adversarial interleaving: only the runnable threads of the highest-priority warp that has any run this
        // pass (random priorities per block), in random order, so warps race ahead of each other between barriers
        for (int t = n - 1; t > 0; t--) std::swap(order[t], order[emu_rand() % (t + 1)]);
        int best = -1;
        for (int t = 0; t < n; t++)
            if (emu_threads[t].state == 0 && (best < 0 || emu_prio[t / 32] > emu_prio[best / 32])) best = t;
        for (int t : order) {
            if (emu_threads[t].state != 0 || t / 32 != best / 32) continue;
            emu_cur = t;
            emu_set_thread_index(t);
            swapcontext(&emu_sched, &emu_threads[t].ctx);
        }
        int live = 0, at_block = 0;
        for (int t = 0; t < n; t++) {
            live += emu_threads[t].state != 3;
            at_block += emu_threads[t].state == 1;
        }
        if (!live) return;
        bool released = false;
        for (int w = 0; w * 32 < n; w++) {  // a warp barrier opens when every live lane of the warp waits at it
            int lanes = 0, waiting = 0;
            for (int t = w * 32; t < std::min(n, w * 32 + 32); t++) {
                lanes += emu_threads[t].state != 3;
                waiting += emu_threads[t].state == 2;
            }
            if (waiting && waiting == lanes) {
                if (lanes != 32 && lanes != std::min(n - w * 32, 32)) { fprintf(stderr, "EMU: shuffle in a partial warp\n"); abort(); }
                for (int t = w * 32; t < std::min(n, w * 32 + 32); t++) emu_threads[t].state = 0;
                released = true;
            }
        }
        if (at_block && at_block == live) {
            if (live != n) { fprintf(stderr, "EMU: __syncthreads after some threads exited\n"); abort(); }
            for (int t = 0; t < n; t++) emu_threads[t].state = 0;
            released = true;
        }
        int runnable = 0;
        for (int t = 0; t < n; t++) runnable += emu_threads[t].state == 0;
        if (!runnable && !released) { fprintf(stderr, "EMU: deadlock (%d live, %d at __syncthreads)\n", live, at_block); abort(); }
    }
}
inline void emu_run(dim3 grid, dim3 block, const std::function<void()>& body) {
    emu_launches++;
    gridDim = grid;
    blockDim = block;
    int n = block.x * block.y * block.z;
    if (n > 1024 || n < 1) { fprintf(stderr, "EMU: block of %d threads\n", n); abort(); }
    emu_body = &body;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                blockIdx = dim3(x, y, z);
                std::fill(emu_dynamic_shared_buffer.begin(), emu_dynamic_shared_buffer.end(), NAN);
                emu_run_block(n);
            }
}
template <typename K> auto emu_launch(K kernel, dim3 grid, dim3 block, size_t shared_bytes = 0) {
    return [=](auto... args) {
        emu_dynamic_shared_buffer.assign((shared_bytes + 3) / 4 + 32, NAN);
        emu_dynamic_shared = emu_dynamic_shared_buffer.data();
        while ((uintptr_t)emu_dynamic_shared % 128) emu_dynamic_shared++;
        emu_run(grid, block, [&]() { kernel(args...); });
    };
}
