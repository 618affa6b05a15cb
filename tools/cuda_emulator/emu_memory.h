// Memory as a kernel sees it, and the checks on every access a kernel makes.
//
// Device memory (cudaMalloc): each allocation gets its own pages, NaN-filled (0xff bytes: NaN in float, bf16 and
// double, so reading what nobody wrote shows), 256-byte aligned as cudaMalloc's, ending within 256 bytes of a
// PROT_NONE page with a PROT_NONE page before it. A write into the slack next to it is found when the launch ends (or
// at cudaFree), one into the PROT_NONE pages (or a read there) faults at once; either is reported with the launch.
//
// Shared memory: one window for the block that runs, [guard][dynamic shared memory][guard][static __shared__
// variables][guard]. Before each block the dynamic part and the static variables are refilled with NaN, so nothing
// carries over from the previous block. Static __shared__ declarations become EMU_STATIC_SHARED (emucc rewrites
// them), placed in the window by the first thread that reaches them. Outside a launch the window is PROT_NONE: a
// stray host pointer into it faults.
//
// The checks. emucc compiles the kernels with -fsanitize=thread, but links none of ThreadSanitizer: the compiler
// calls __tsan_read4(addr), __tsan_write16(addr), ... before each load and store, and this file defines them.
// While a kernel runs, each access is checked:
//   - alignment: an access the compiler issues as naturally aligned (a 16-byte Pack, a float) must be, as on the GPU
//     (there: "misaligned address");
//   - bounds: an access into the shared window's guards (past the block's dynamic shared memory, before it, past
//     the static variables) is an error at once, for reads as for writes;
//   - the barrier model: shared memory that another thread of the block wrote may be read only after a barrier
//     that both took part in: __syncthreads, or __syncwarp within one warp (a shuffle does not count); likewise a
//     write after another thread's read or write of the same bytes (write-after-read, write-after-write); and a
//     read of shared memory no thread of this block has written is an error (the GPU leaves whatever was there).
//   Each shared 2-byte granule remembers its last writer and its readers with their epochs (emu_threads.h).
#pragma once
#include <map>
#include <csignal>
#include <sys/mman.h>
#include "emu_threads.h"

// ---- device allocations
struct EmuAlloc {
    char* user;          // what cudaMalloc returned
    size_t bytes;        // what was asked for
    char* map;           // the whole mapping, guard pages included
    size_t map_bytes;
    size_t front_slack;  // checked bytes before user (after the front guard page)
    size_t tail_slack;   // checked bytes after user + bytes (before the back guard page)
};
inline std::map<uintptr_t, EmuAlloc> emu_allocs;  // by user address
inline size_t emu_allocated_bytes = 0;
static const size_t EMU_PAGE = 4096;

// the allocation that starts nearest at or below p (it holds p if any does); null if none
EMU_NOCHECK inline const EmuAlloc* emu_alloc_at(const void* p) {
    auto it = emu_allocs.upper_bound((uintptr_t)p);
    if (it == emu_allocs.begin()) return nullptr;
    return &(--it)->second;
}

// "byte 4 past the end of the 1024-byte allocation at 0x..." or "byte 12 of the 1024-byte allocation at 0x..."
EMU_NOCHECK inline std::string emu_describe_address(uintptr_t a) {
    char buf[200];
    const EmuAlloc* al = emu_alloc_at((void*)a);
    auto next = emu_allocs.upper_bound(a);
    uintptr_t u = al ? (uintptr_t)al->user : 0;
    if (al && a < u + al->bytes) {
        snprintf(buf, sizeof(buf), "byte %zu of the %zu-byte cudaMalloc allocation at %p", (size_t)(a - u), al->bytes,
                 (void*)u);
    } else if (al && a < (uintptr_t)al->map + al->map_bytes) {
        snprintf(buf, sizeof(buf), "%zu bytes past the end of the %zu-byte cudaMalloc allocation at %p",
                 (size_t)(a - u - al->bytes), al->bytes, (void*)u);
    } else if (next != emu_allocs.end() && a >= (uintptr_t)next->second.map) {
        snprintf(buf, sizeof(buf), "%zu bytes before the %zu-byte cudaMalloc allocation at %p",
                 (size_t)(next->first - a), next->second.bytes, (void*)next->first);
    } else {
        snprintf(buf, sizeof(buf), "an address in no cudaMalloc allocation");
    }
    return buf;
}

EMU_NOCHECK inline void emu_check_alloc_guards(const EmuAlloc& al) {
    const unsigned char* f = (const unsigned char*)al.user - al.front_slack;
    for (size_t i = 0; i < al.front_slack; i++)
        if (f[i] != 0xff)
            emu_error("something wrote %zu bytes before the start of the %zu-byte cudaMalloc allocation at %p",
                      al.front_slack - i, al.bytes, (void*)al.user);
    const unsigned char* t = (const unsigned char*)al.user + al.bytes;
    for (size_t i = al.tail_slack; i-- > 0;)
        if (t[i] != 0xff)
            emu_error("something wrote past the end of the %zu-byte cudaMalloc allocation at %p (up to byte %zu past "
                      "it)", al.bytes, (void*)al.user, i + 1);
}

EMU_NOCHECK inline void emu_check_all_guards() {
    for (const auto& kv : emu_allocs) emu_check_alloc_guards(kv.second);
}

// whether [p, p + n) lies in one allocation
EMU_NOCHECK inline bool emu_in_allocation(const void* p, size_t n) {
    const EmuAlloc* al = emu_alloc_at(p);
    return al && (uintptr_t)p >= (uintptr_t)al->user && (uintptr_t)p + n <= (uintptr_t)al->user + al->bytes;
}

// ---- the shared-memory window
static const size_t EMU_SMEM_GUARD = 4096;
static const size_t EMU_SMEM_DYNAMIC_MAX = 256 * 1024;  // above every device's opt-in maximum
static const size_t EMU_SMEM_STATIC_MAX = 64 * 1024;
inline char* emu_window;           // [lo, lo + emu_window_bytes)
inline size_t emu_window_bytes;
inline char* emu_dynamic_shared;   // the block's dynamic shared memory (DYNAMIC_SHARED, extern __shared__)
inline char* emu_static_shared;    // the static __shared__ variables
inline size_t emu_static_used;     // bytes of them placed in this block
inline size_t emu_static_room;     // bytes the static variables may take in this launch
inline uint64_t emu_block_serial;  // 1, 2, ... over all blocks of all launches

struct EmuShadow {       // one 2-byte granule of the window
    uint32_t wepoch;     // block epoch of the last write (< emu_block_first_epoch: not written in this block)
    uint32_t wwarp;      // the writer's warp epoch then
    uint32_t repoch;     // block epoch of the reads recorded
    uint32_t rwarp;      // warp epoch of those reads (when one warp read)
    uint32_t rwarps;     // the warps that read in repoch
    uint16_t wtid, rtid; // the writer; the reader (EMU_MANY: several threads of its warp)
};
static const uint16_t EMU_MANY = 0xffff;
inline EmuShadow* emu_shadow;  // one per 2 bytes of the window
inline bool emu_in_kernel = false;  // a kernel's thread runs: its accesses are checked

EMU_NOCHECK inline void emu_init_window() {
    if (emu_window) return;
    emu_window_bytes = EMU_SMEM_GUARD + EMU_SMEM_DYNAMIC_MAX + EMU_SMEM_GUARD + EMU_SMEM_STATIC_MAX + EMU_SMEM_GUARD;
    emu_window = (char*)mmap(nullptr, emu_window_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (emu_window == MAP_FAILED) emu_error("no memory for the shared-memory window");
    emu_dynamic_shared = emu_window + EMU_SMEM_GUARD;
    emu_static_shared = emu_dynamic_shared + EMU_SMEM_DYNAMIC_MAX + EMU_SMEM_GUARD;
    emu_shadow = (EmuShadow*)calloc(emu_window_bytes / 2, sizeof(EmuShadow));
    memset(emu_window, 0xff, emu_window_bytes);
}
// the window can be touched only while a launch runs: a stray host pointer into it faults
EMU_NOCHECK inline void emu_open_window(bool open) {
    mprotect(emu_window, emu_window_bytes, open ? PROT_READ | PROT_WRITE : PROT_NONE);
}

// before each block: its shared memory NaN again (as far as any earlier block used it), no static variable placed
inline size_t emu_dynamic_used = 0;
EMU_NOCHECK inline void emu_reset_shared(size_t dynamic_bytes) {
    if (dynamic_bytes > emu_dynamic_used) emu_dynamic_used = dynamic_bytes;
    memset(emu_dynamic_shared, 0xff, emu_dynamic_used);
    emu_dynamic_used = dynamic_bytes;
    memset(emu_static_shared, 0xff, emu_static_used);
    emu_static_used = 0;
    emu_block_serial++;
}

// after each block: the guards next to the dynamic shared memory (for writes the instrumented accesses do not
// see, or a build without them)
EMU_NOCHECK inline void emu_check_shared_guards(size_t dynamic_bytes) {
    const unsigned char* d = (const unsigned char*)emu_dynamic_shared;
    for (size_t i = 1; i <= 256; i++)
        if (d[-(ptrdiff_t)i] != 0xff) emu_error("something wrote before the start of the block's dynamic shared memory");
    size_t end = dynamic_bytes + 256 < EMU_SMEM_DYNAMIC_MAX ? dynamic_bytes + 256 : EMU_SMEM_DYNAMIC_MAX;
    for (size_t i = dynamic_bytes; i < end; i++)
        if (d[i] != 0xff)
            emu_error("something wrote %zu bytes past the end of the block's %zu bytes of dynamic shared memory",
                      i - dynamic_bytes + 1, dynamic_bytes);
}

struct EmuSharedSite {  // one static __shared__ declaration
    uint64_t block;     // the block it was placed for
    size_t offset;
};
EMU_NOCHECK inline void* emu_place_static_shared(EmuSharedSite* site, size_t bytes, size_t align) {
    if (site->block != emu_block_serial) {
        if (align < 16) align = 16;
        size_t offset = (emu_static_used + align - 1) / align * align;
        if (offset + bytes > EMU_SMEM_STATIC_MAX)
            emu_error("more than %zu bytes of static __shared__ variables (the emulator's limit)",
                      EMU_SMEM_STATIC_MAX);
        if (offset + bytes > emu_static_room)
            emu_error("%zu bytes of static __shared__ variables with %zu of dynamic shared memory: more than a block "
                      "may have (48 KB in all without cudaFuncSetAttribute; with it, the device's opt-in maximum of "
                      "%d bytes less the attribute's value)", offset + bytes, emu_launch_now.dynamic_bytes,
                      emu_device().shared_per_block_optin);
        site->offset = offset;
        site->block = emu_block_serial;
        emu_static_used = offset + bytes;
    }
    return emu_static_shared + site->offset;
}
// a static __shared__ variable of type V (an array type for an array); Site is a lambda type, one per declaration
template <typename V, typename Site>
EMU_NOCHECK V* emu_static_shared_var(Site) {
    static EmuSharedSite site = {0, 0};
    return (V*)emu_place_static_shared(&site, sizeof(V), alignof(V));
}
#define EMU_STATIC_SHARED(T, name, dims)     \
    typedef T emu_shared_##name##_type dims; \
    emu_shared_##name##_type& name = *emu_static_shared_var<emu_shared_##name##_type>([] {})

// ---- the checks

// where a window address is, for messages: "dynamic shared memory byte 132" or "static __shared__ byte 4"
EMU_NOCHECK inline std::string emu_describe_shared(uintptr_t a) {
    char buf[120];
    uintptr_t d = (uintptr_t)emu_dynamic_shared, s = (uintptr_t)emu_static_shared;
    if (a >= s) snprintf(buf, sizeof(buf), "byte %zu of the static __shared__ variables", (size_t)(a - s));
    else snprintf(buf, sizeof(buf), "byte %zu of dynamic shared memory", (size_t)(a - d));
    return buf;
}

EMU_NOCHECK inline std::string emu_thread_name(int t) {
    const dim3& i = emu_threads[t].index;
    char buf[80];
    snprintf(buf, sizeof(buf), "thread (%u, %u, %u) (warp %d, lane %d)", i.x, i.y, i.z, t / 32, t % 32);
    return buf;
}

EMU_NOCHECK [[noreturn]] inline void emu_hazard(const char* kind, uintptr_t a, bool write, unsigned size, int other,
                                                const char* other_did, const char* fix) {
    emu_error("%s hazard on shared memory: this thread %s %u bytes at %s, which %s %s with no barrier between that "
              "orders them for both (%s)", kind, write ? "writes" : "reads", size, emu_describe_shared(a).c_str(),
              other < 0 ? "several threads" : emu_thread_name(other).c_str(), other_did, fix);
}

EMU_NOCHECK inline void emu_shared_access(uintptr_t a, unsigned size, bool write) {
    uintptr_t d = (uintptr_t)emu_dynamic_shared, s = (uintptr_t)emu_static_shared;
    size_t dyn = emu_launch_now.dynamic_bytes;
    bool in_dynamic = a >= d && a + size <= d + dyn, in_static = a >= s && a + size <= s + emu_static_used;
    if (!in_dynamic && !in_static) {
        const char* what = write ? "writes" : "reads";
        if (a < d)
            emu_error("this thread %s %u bytes %zu bytes before the start of the block's dynamic shared memory", what,
                      size, (size_t)(d - a));
        if (a < s)
            emu_error("this thread %s %u bytes at byte %zu of dynamic shared memory, past the end of the %zu bytes "
                      "the launch gave the block", what, size, (size_t)(a - d), dyn);
        emu_error("this thread %s %u bytes at byte %zu of the static __shared__ variables, past the %zu bytes they "
                  "take", what, size, (size_t)(a - s), emu_static_used);
    }
    int u = emu_cur, w = u / 32;
    uint32_t be = emu_block_epoch, we = emu_warp_epoch[w];
    size_t first = (a - (uintptr_t)emu_window) / 2, last = (a + size - 1 - (uintptr_t)emu_window) / 2;
    for (size_t g = first; g <= last; g++) {
        EmuShadow& e = emu_shadow[g];
        bool written = e.wepoch >= emu_block_first_epoch;
        // the last write, by another thread, not ordered before this access by a barrier both took part in
        bool unordered_write = written && e.wtid != u && e.wepoch == be && (e.wtid / 32 != w || e.wwarp == we);
        if (!write) {
            if (!written)
                emu_error("this thread reads %u bytes at %s, which no thread of this block has written (on the GPU: "
                          "whatever an earlier block left there)", size, emu_describe_shared(a).c_str());
            if (unordered_write)
                emu_hazard("read-after-write", a, write, size, e.wtid, "wrote",
                           e.wtid / 32 == w ? "a __syncwarp or __syncthreads between them; a shuffle is no memory "
                                              "barrier" : "a __syncthreads between them");
            if (e.repoch != be) {
                e.repoch = be;
                e.rwarps = 1u << w;
                e.rwarp = we;
                e.rtid = (uint16_t)u;
            } else if (e.rwarps == 1u << w) {
                if (e.rwarp != we) e.rwarp = we, e.rtid = (uint16_t)u;
                else if (e.rtid != u) e.rtid = EMU_MANY;
            } else {
                e.rwarps |= 1u << w;
            }
        } else {
            if (unordered_write)
                emu_hazard("write-after-write", a, write, size, e.wtid, "wrote",
                           "a barrier between them, or one writer");
            if (e.repoch == be) {
                uint32_t others = e.rwarps & ~(1u << w);
                if (others)
                    emu_hazard("write-after-read", a, write, size, -1, "read (threads of another warp among them)",
                               "a __syncthreads between the reads and this write");
                if (e.rwarp == we && e.rtid != u)
                    emu_hazard("write-after-read", a, write, size, e.rtid == EMU_MANY ? -1 : e.rtid, "read",
                               "a __syncwarp or __syncthreads between the reads and this write");
            }
            e.wepoch = be;
            e.wwarp = we;
            e.wtid = (uint16_t)u;
        }
    }
}

EMU_NOCHECK [[noreturn]] inline void emu_misaligned(uintptr_t a, unsigned size, bool write) {
    const char* where = a - (uintptr_t)emu_window < emu_window_bytes ? "shared memory" : "";
    emu_error("misaligned %u-byte %s at %p (%u bytes past a %u-byte boundary; on the GPU: 'misaligned address'), %s",
              size, write ? "store" : "load", (void*)a, (unsigned)(a % size), size,
              *where ? emu_describe_shared(a).c_str() : emu_describe_address(a).c_str());
}

EMU_NOCHECK inline void emu_access(void* p, unsigned size, bool write, bool aligned) {
    uintptr_t a = (uintptr_t)p;
    if (aligned && (a & (size - 1))) emu_misaligned(a, size, write);
    if (a - (uintptr_t)emu_window < emu_window_bytes) emu_shared_access(a, size, write);
}

// the hooks -fsanitize=thread calls (weak: one definition however many files include this)
#define EMU_HOOKS(N)                                                                                                 \
    extern "C" EMU_NOCHECK __attribute__((weak)) void __tsan_read##N(void* p) {                                     \
        if (emu_in_kernel) emu_access(p, N, false, true);                                                            \
    }                                                                                                                \
    extern "C" EMU_NOCHECK __attribute__((weak)) void __tsan_write##N(void* p) {                                    \
        if (emu_in_kernel) emu_access(p, N, true, true);                                                             \
    }                                                                                                                \
    extern "C" EMU_NOCHECK __attribute__((weak)) void __tsan_unaligned_read##N(void* p) {                           \
        if (emu_in_kernel) emu_access(p, N, false, false);                                                           \
    }                                                                                                                \
    extern "C" EMU_NOCHECK __attribute__((weak)) void __tsan_unaligned_write##N(void* p) {                          \
        if (emu_in_kernel) emu_access(p, N, true, false);                                                            \
    }                                                                                                                \
    extern "C" EMU_NOCHECK __attribute__((weak)) void __tsan_volatile_read##N(void* p) {                            \
        if (emu_in_kernel) emu_access(p, N, false, true);                                                            \
    }                                                                                                                \
    extern "C" EMU_NOCHECK __attribute__((weak)) void __tsan_volatile_write##N(void* p) {                           \
        if (emu_in_kernel) emu_access(p, N, true, true);                                                             \
    }
EMU_HOOKS(1)
EMU_HOOKS(2)
EMU_HOOKS(4)
EMU_HOOKS(8)
EMU_HOOKS(16)
#undef EMU_HOOKS
extern "C" EMU_NOCHECK __attribute__((weak)) void __tsan_read_range(void* p, unsigned long n) {
    if (emu_in_kernel)
        for (unsigned long i = 0; i < n; i += 2) emu_access((char*)p + i, n - i < 2 ? 1 : 2, false, false);
}
extern "C" EMU_NOCHECK __attribute__((weak)) void __tsan_write_range(void* p, unsigned long n) {
    if (emu_in_kernel)
        for (unsigned long i = 0; i < n; i += 2) emu_access((char*)p + i, n - i < 2 ? 1 : 2, true, false);
}
extern "C" EMU_NOCHECK __attribute__((weak)) void __tsan_init() {}
extern "C" EMU_NOCHECK __attribute__((weak)) void __tsan_func_entry(void*) {}
extern "C" EMU_NOCHECK __attribute__((weak)) void __tsan_func_exit() {}
extern "C" EMU_NOCHECK __attribute__((weak)) void __tsan_vptr_update(void**, void*) {}
extern "C" EMU_NOCHECK __attribute__((weak)) void __tsan_vptr_read(void**) {}

// atomics in instrumented host code (doctest's counters, libstdc++): done, unchecked
#define EMU_ATOMIC_HOOKS(N, T)                                                                                       \
    extern "C" EMU_NOCHECK __attribute__((weak)) T __tsan_atomic##N##_load(const volatile T* a, int) {              \
        return __atomic_load_n(a, __ATOMIC_SEQ_CST);                                                                 \
    }                                                                                                                \
    extern "C" EMU_NOCHECK __attribute__((weak)) void __tsan_atomic##N##_store(volatile T* a, T v, int) {           \
        __atomic_store_n(a, v, __ATOMIC_SEQ_CST);                                                                    \
    }                                                                                                                \
    extern "C" EMU_NOCHECK __attribute__((weak)) T __tsan_atomic##N##_exchange(volatile T* a, T v, int) {           \
        return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);                                                          \
    }                                                                                                                \
    extern "C" EMU_NOCHECK __attribute__((weak)) T __tsan_atomic##N##_fetch_add(volatile T* a, T v, int) {          \
        return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);                                                           \
    }                                                                                                                \
    extern "C" EMU_NOCHECK __attribute__((weak)) T __tsan_atomic##N##_fetch_sub(volatile T* a, T v, int) {          \
        return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST);                                                           \
    }                                                                                                                \
    extern "C" EMU_NOCHECK __attribute__((weak)) T __tsan_atomic##N##_fetch_and(volatile T* a, T v, int) {          \
        return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST);                                                           \
    }                                                                                                                \
    extern "C" EMU_NOCHECK __attribute__((weak)) T __tsan_atomic##N##_fetch_or(volatile T* a, T v, int) {           \
        return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST);                                                            \
    }                                                                                                                \
    extern "C" EMU_NOCHECK __attribute__((weak)) T __tsan_atomic##N##_fetch_xor(volatile T* a, T v, int) {          \
        return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST);                                                           \
    }                                                                                                                \
    extern "C" EMU_NOCHECK __attribute__((weak)) T __tsan_atomic##N##_fetch_nand(volatile T* a, T v, int) {         \
        return __atomic_fetch_nand(a, v, __ATOMIC_SEQ_CST);                                                          \
    }                                                                                                                \
    extern "C" EMU_NOCHECK __attribute__((weak)) int __tsan_atomic##N##_compare_exchange_strong(                    \
        volatile T* a, T* c, T v, int, int) {                                                                        \
        return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                      \
    }                                                                                                                \
    extern "C" EMU_NOCHECK __attribute__((weak)) int __tsan_atomic##N##_compare_exchange_weak(                      \
        volatile T* a, T* c, T v, int, int) {                                                                        \
        return __atomic_compare_exchange_n(a, c, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                       \
    }                                                                                                                \
    extern "C" EMU_NOCHECK __attribute__((weak)) T __tsan_atomic##N##_compare_exchange_val(volatile T* a, T c, T v, \
                                                                                           int, int) {               \
        __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                            \
        return c;                                                                                                    \
    }
EMU_ATOMIC_HOOKS(8, char)
EMU_ATOMIC_HOOKS(16, short)
EMU_ATOMIC_HOOKS(32, int)
EMU_ATOMIC_HOOKS(64, long)
#undef EMU_ATOMIC_HOOKS
extern "C" EMU_NOCHECK __attribute__((weak)) void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
extern "C" EMU_NOCHECK __attribute__((weak)) void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }

// ---- faults: an access into a guard page (device memory, a thread's stack) is reported with the launch
EMU_NOCHECK inline void emu_on_fault(int sig, siginfo_t* info, void*) {
    uintptr_t a = (uintptr_t)info->si_addr;
    bool kernel = emu_in_kernel;
    emu_in_kernel = false;
    if (emu_is_stack_guard(a))
        emu_error("a thread's stack overflowed (the emulator gives each %zu KB)", EMU_STACK / 1024);
    if (kernel) emu_error("this thread touched %p: %s", (void*)a, emu_describe_address(a).c_str());
    if (a - (uintptr_t)emu_window < emu_window_bytes)
        emu_error("host code touched %p, in the emulator's shared-memory window (a dangling pointer?)", (void*)a);
    std::string what = emu_describe_address(a);
    if (what != "an address in no cudaMalloc allocation")
        emu_error("host code (the emulated cuBLAS, cudaMemcpy, ...) touched %p: %s", (void*)a, what.c_str());
    signal(sig, SIG_DFL);  // not near device memory: the ordinary crash
}

EMU_NOCHECK inline void emu_install_fault_handler() {
    static bool done = false;
    if (done) return;
    done = true;
    static char altstack[256 * 1024];  // the report reads the symbol table and walks the stack
    stack_t ss = {};
    ss.ss_sp = altstack;
    ss.ss_size = sizeof(altstack);
    sigaltstack(&ss, nullptr);
    struct sigaction sa = {};
    sa.sa_sigaction = emu_on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
}
