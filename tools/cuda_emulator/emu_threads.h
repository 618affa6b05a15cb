// The threads of a block: coroutines on one OS thread, each on its own stack (with a guard page below it), switched
// by a few instructions (x86-64; ucontext elsewhere). The scheduler is adversarial: each block gives its warps random
// priorities, and a lower-priority warp runs only while every higher one waits at a barrier; within a warp the lanes
// run in a random order. So warps race ahead of each other between barriers, and a missing __syncthreads changes
// the results. The choices come from the seeded generator (EMU_SEED): a run repeats exactly.
//
// Barriers are memory barriers and nothing else is: __syncthreads orders the shared memory of the block (it starts
// a new block epoch), __syncwarp that of its warp (a new warp epoch); a shuffle only exchanges registers, as on the
// GPU, where it orders no memory. emu_memory.h checks every shared-memory access against these epochs. The
// scheduler also reports what a GPU would hang on or leave undefined: a deadlock, a __syncthreads after some threads
// of the block exited, a __syncwarp or shuffle after lanes of its warp exited, lanes of one warp at different
// barriers, a shuffle from a lane the block does not have, a mask other than all 32 lanes.
#pragma once
#include <algorithm>
#include <functional>
#include <type_traits>
#include <sys/mman.h>
#include "emu_core.h"
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

enum EmuState : unsigned char { EMU_RUNNABLE, EMU_AT_SYNCTHREADS, EMU_AT_SYNCWARP, EMU_AT_SHUFFLE, EMU_DONE };

struct EmuThread {
#if defined(__x86_64__)
    void* sp;  // saved stack pointer while switched out
#else
    ucontext_t ctx;
#endif
    char* stack;  // EMU_STACK bytes above one PROT_NONE page
    EmuState state;
    unsigned shuffles;  // shuffles this thread has done in this block (their exchange slots alternate)
    dim3 index;         // threadIdx
};

static const size_t EMU_STACK = 256 * 1024;
inline std::vector<EmuThread> emu_thread_storage;
inline EmuThread* emu_threads;  // emu_thread_storage.data(): the unchecked code here indexes it without a call
inline int emu_cur;  // the running thread
inline const std::function<void()>* emu_body;
#if defined(__x86_64__)
inline void* emu_sched_sp;
#else
inline ucontext_t emu_sched_ctx;
#endif

// memory epochs (emu_memory.h): a new block epoch starts at each block and each __syncthreads, a new warp epoch at
// each __syncwarp of that warp
inline uint32_t emu_block_epoch = 1, emu_block_first_epoch = 1;
inline uint32_t emu_warp_epoch[32];

#if defined(__x86_64__)
// emu_switch(&save, load): saves the callee-saved registers on the current stack and its pointer in *save, then
// continues on the stack `load` (where a previous emu_switch saved them, or emu_start_stack laid them out)
extern "C" void emu_switch(void** save, void* load);
asm(R"(
    .text
    .weak emu_switch
    .type emu_switch, @function
emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_switch, .-emu_switch
)");
#endif

EMU_NOCHECK inline void emu_to_scheduler() {
#if defined(__x86_64__)
    emu_switch(&emu_threads[emu_cur].sp, emu_sched_sp);
#else
    swapcontext(&emu_threads[emu_cur].ctx, &emu_sched_ctx);
#endif
}

EMU_NOCHECK [[noreturn]] inline void emu_thread_main() {
    (*emu_body)();
    emu_threads[emu_cur].state = EMU_DONE;
    emu_to_scheduler();
    __builtin_unreachable();
}

EMU_NOCHECK inline void emu_start_stack(EmuThread& th) {
#if defined(__x86_64__)
    // what emu_switch pops: six registers, then the return address (emu_thread_main), 16-byte aligned, and a zero
    // above it where a caller's return address would be
    void** top = (void**)(th.stack + EMU_STACK);
    top[-1] = nullptr;
    top[-2] = (void*)&emu_thread_main;
    for (int i = 3; i <= 8; i++) top[-i] = nullptr;
    th.sp = top - 8;
#else
    getcontext(&th.ctx);
    th.ctx.uc_stack.ss_sp = th.stack;
    th.ctx.uc_stack.ss_size = EMU_STACK;
    th.ctx.uc_link = nullptr;
    makecontext(&th.ctx, (void (*)())emu_thread_main, 0);
#endif
}

// a stack with a PROT_NONE page below it, so that an overflow faults (emu_memory.h reports it) instead of
// overwriting the neighbour's
EMU_NOCHECK inline char* emu_new_stack() {
    size_t page = 4096;
    char* p = (char*)mmap(nullptr, EMU_STACK + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) emu_error("no memory for a thread's stack");
    mprotect(p, page, PROT_NONE);
    return p + page;
}

inline bool emu_is_stack_guard(uintptr_t a) {
    for (const EmuThread& th : emu_thread_storage)
        if (a >= (uintptr_t)th.stack - 4096 && a < (uintptr_t)th.stack) return true;
    return false;
}

// the running thread waits (a barrier or a shuffle) until the scheduler releases it
EMU_NOCHECK inline void emu_wait(EmuState why) {
    emu_threads[emu_cur].state = why;
    emu_to_scheduler();
}

static const unsigned EMU_FULL_MASK = 0xffffffffu;
EMU_NOCHECK inline void emu_check_mask(unsigned mask, const char* what) {
    if (mask != EMU_FULL_MASK) emu_error("%s with mask 0x%08x: the emulator runs only full-warp masks", what, mask);
}

EMU_NOCHECK inline void __syncthreads() { emu_wait(EMU_AT_SYNCTHREADS); }
EMU_NOCHECK inline void __syncwarp(unsigned mask = EMU_FULL_MASK) {
    emu_check_mask(mask, "__syncwarp");
    emu_wait(EMU_AT_SYNCWARP);
}

// Shuffles: each lane puts its value in a slot, all lanes of the warp meet (no memory is ordered), each reads the
// slot of its source lane. Consecutive shuffles alternate between two sets of slots: a lane can start the next but
// one only after every lane reached the next one, so after every lane has read this one.
inline uint64_t emu_shuffle_slots[2][1024];
enum EmuShuffle { EMU_SHFL_IDX, EMU_SHFL_UP, EMU_SHFL_DOWN, EMU_SHFL_XOR };
template <typename T>
EMU_NOCHECK T emu_shuffle(unsigned mask, T v, EmuShuffle kind, int arg, int width, const char* what) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "a shuffle moves at most 8 bytes");
    emu_check_mask(mask, what);
    if (width < 1 || width > 32 || (width & (width - 1)))
        emu_error("%s with width %d: not a power of 2 from 1 to 32", what, width);
    int t = emu_cur, lane = t % 32, first = lane & ~(width - 1), src = lane;
    switch (kind) {
        case EMU_SHFL_IDX: src = first + (arg & (width - 1)); break;
        case EMU_SHFL_UP: src = lane - arg >= first ? lane - arg : lane; break;
        case EMU_SHFL_DOWN: src = lane + arg < first + width ? lane + arg : lane; break;
        case EMU_SHFL_XOR: src = lane ^ arg; if (src >= first + width) src = lane; break;
    }
    int n = (int)(blockDim.x * blockDim.y * blockDim.z), source = (t & ~31) | (src & 31);
    if (source >= n)
        emu_error("%s reads lane %d of warp %d, which a block of %d threads does not have", what, src & 31, t / 32,
                  n);
    int set = emu_threads[t].shuffles++ & 1;
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof(T));
    emu_shuffle_slots[set][t] = bits;
    emu_wait(EMU_AT_SHUFFLE);
    T r;
    memcpy(&r, &emu_shuffle_slots[set][source], sizeof(T));
    return r;
}
template <typename T> T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    return emu_shuffle(mask, v, EMU_SHFL_IDX, src, width, "__shfl_sync");
}
template <typename T> T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    return emu_shuffle(mask, v, EMU_SHFL_UP, (int)delta, width, "__shfl_up_sync");
}
template <typename T> T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    return emu_shuffle(mask, v, EMU_SHFL_DOWN, (int)delta, width, "__shfl_down_sync");
}
template <typename T> T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    return emu_shuffle(mask, v, EMU_SHFL_XOR, lane_mask, width, "__shfl_xor_sync");
}

// ---- the scheduler

struct EmuWarpCount {
    int lanes, live, runnable, at_syncwarp, at_shuffle;
};

EMU_NOCHECK inline void emu_run_thread(int t) {
    emu_cur = t;
    emu_launch_now.thread = t;
    threadIdx = emu_threads[t].index;
#if defined(__x86_64__)
    emu_switch(&emu_sched_sp, emu_threads[t].sp);
#else
    swapcontext(&emu_sched_ctx, &emu_threads[t].ctx);
#endif
}

// Runs the n threads of the current block to their end.
EMU_NOCHECK inline void emu_run_block(int n) {
    if ((int)emu_thread_storage.size() < n) {
        size_t old = emu_thread_storage.size();
        emu_thread_storage.resize(n);
        for (size_t t = old; t < (size_t)n; t++) emu_thread_storage[t].stack = emu_new_stack();
        emu_threads = emu_thread_storage.data();
    }
    int warps = (n + 31) / 32;
    EmuWarpCount count[32];
    unsigned prio[32];
    for (int w = 0; w < warps; w++) {
        int lanes = n - 32 * w < 32 ? n - 32 * w : 32;
        count[w] = {lanes, lanes, lanes, 0, 0};
        prio[w] = emu_rand();
        emu_warp_epoch[w] = 1;
    }
    emu_block_first_epoch = ++emu_block_epoch;
    for (int t = 0; t < n; t++) {
        EmuThread& th = emu_threads[t];
        emu_start_stack(th);
        th.state = EMU_RUNNABLE;
        th.shuffles = 0;
        th.index = dim3(t % blockDim.x, t / blockDim.x % blockDim.y, t / (blockDim.x * blockDim.y));
    }
    int live = n, at_syncthreads = 0;
    emu_launch_now.in_thread = true;
    for (;;) {
        int best = -1;
        for (int w = 0; w < warps; w++)
            if (count[w].runnable && (best < 0 || prio[w] > prio[best])) best = w;
        if (best < 0) {
            if (!live) break;
            int sw = 0, sh = 0;
            for (int w = 0; w < warps; w++) sw += count[w].at_syncwarp, sh += count[w].at_shuffle;
            emu_launch_now.in_thread = false;
            emu_error("deadlock: of %d threads, %d wait at __syncthreads, %d at __syncwarp, %d at a shuffle, %d have "
                      "exited (a barrier that not every thread reaches)", n, at_syncthreads, sw, sh, n - live);
        }
        // the warp's runnable lanes, in a random order, each until it waits or ends
        EmuWarpCount& c = count[best];
        int order[32], k = 0;
        for (int t = 32 * best; t < 32 * best + c.lanes; t++)
            if (emu_threads[t].state == EMU_RUNNABLE) order[k++] = t;
        for (int i = k - 1; i > 0; i--) {
            int j = (int)(emu_rand() % (unsigned)(i + 1)), o = order[i];
            order[i] = order[j];
            order[j] = o;
        }
        for (int i = 0; i < k; i++) {
            emu_run_thread(order[i]);
            c.runnable--;
            switch (emu_threads[order[i]].state) {
                case EMU_AT_SYNCTHREADS: at_syncthreads++; break;
                case EMU_AT_SYNCWARP: c.at_syncwarp++; break;
                case EMU_AT_SHUFFLE: c.at_shuffle++; break;
                case EMU_DONE: c.live--; live--; break;
                default: break;
            }
        }
        // a warp barrier opens when every live lane of the warp waits at it
        if (c.live && c.at_syncwarp + c.at_shuffle == c.live) {
            emu_launch_now.thread = 32 * best;
            threadIdx = emu_threads[32 * best].index;
            if (c.at_syncwarp && c.at_shuffle)
                emu_error("the lanes of warp %d wait at different barriers: %d at __syncwarp, %d at a shuffle", best,
                          c.at_syncwarp, c.at_shuffle);
            if (c.live != c.lanes)
                emu_error("%s in warp %d after %d of its lanes exited (undefined on the GPU)",
                          c.at_syncwarp ? "__syncwarp" : "a shuffle", best, c.lanes - c.live);
            if (c.at_syncwarp) emu_warp_epoch[best]++;
            for (int t = 32 * best; t < 32 * best + c.lanes; t++)
                if (emu_threads[t].state != EMU_DONE) emu_threads[t].state = EMU_RUNNABLE;
            c.runnable = c.live;
            c.at_syncwarp = c.at_shuffle = 0;
        }
        // __syncthreads opens when every thread of the block waits at it
        if (live && at_syncthreads == live) {
            if (live != n) {
                emu_launch_now.in_thread = false;
                emu_error("__syncthreads reached after %d threads of the block exited (undefined on the GPU)",
                          n - live);
            }
            emu_block_epoch++;
            for (int t = 0; t < n; t++) emu_threads[t].state = EMU_RUNNABLE;
            for (int w = 0; w < warps; w++) count[w].runnable = count[w].live;
            at_syncthreads = 0;
        }
    }
    emu_launch_now.in_thread = false;
}
