// What every part of the CPU emulator shares: the thread and block indices, the launch that runs (so that every
// error names it), the seeded random numbers behind the block order and the interleavings, and emu_error, the one
// way the emulator reports a bug: a few lines on stderr that name the kernel, the launch, the block and the thread,
// then exit status 1.
#pragma once
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include <cxxabi.h>
#include <elf.h>
#include <execinfo.h>
#include <fcntl.h>
#include <link.h>
#include <unistd.h>
#include "emu_device.h"

// The emulator's own code is not instrumented (see emu_memory.h): only the kernels' accesses are checked.
#define EMU_NOCHECK __attribute__((no_sanitize("thread")))

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
inline dim3 threadIdx, blockIdx, blockDim, gridDim;
static const int warpSize = 32;

// ---- seeded random numbers (EMU_SEED, default 1): the same seed, the same block orders and interleavings
inline unsigned long long emu_rng_state = 0;
EMU_NOCHECK inline unsigned long long emu_seed() {
    static unsigned long long seed = 0;
    if (!seed) {
        const char* s = getenv("EMU_SEED");
        seed = s && *s ? strtoull(s, nullptr, 10) : 1;
        if (!seed) seed = 1;
    }
    return seed;
}
EMU_NOCHECK inline unsigned emu_rand() {
    if (!emu_rng_state) emu_rng_state = 88172645463325252ull ^ (emu_seed() * 0x9E3779B97F4A7C15ull);
    emu_rng_state ^= emu_rng_state << 13;
    emu_rng_state ^= emu_rng_state >> 7;
    emu_rng_state ^= emu_rng_state << 17;
    return (unsigned)(emu_rng_state >> 11);
}

// ---- the launch that runs
struct EmuLaunch {
    long long serial;    // 1, 2, ... in program order (the emulated cuBLAS calls are not counted)
    const char* source;  // the kernel as the launch wrote it
    const char* file;
    int line;
    const void* fn;
    dim3 grid, block;
    size_t dynamic_bytes;
    bool active;         // it is in progress (its blocks run, or its end is being checked)
    bool in_thread;      // a thread of it is running now
    int thread;          // that thread's linear index in its block
};
inline EmuLaunch emu_launch_now;
inline long long emu_launch_count = 0;

// The name of the function at fn, demangled, without its parameter list (flash_tc_forward_kernel<4>), read from the
// program's own symbol table; "" where it has none (a stripped binary).
struct EmuSymbol {
    uintptr_t addr, size;
    std::string name;
};
EMU_NOCHECK inline int emu_main_base(struct dl_phdr_info* info, size_t, void* out) {
    *(uintptr_t*)out = info->dlpi_addr;
    return 1;  // the first object is the program
}
EMU_NOCHECK inline std::string emu_function_name(const void* fn) {
    static std::vector<EmuSymbol> symbols;
    static bool loaded = false;
    if (!loaded) {
        loaded = true;
        std::vector<char> elf;
        if (FILE* f = fopen("/proc/self/exe", "rb")) {  // (may run in the fault handler: nothing big on the stack)
            fseek(f, 0, SEEK_END);
            long size = ftell(f);
            fseek(f, 0, SEEK_SET);
            elf.resize(size > 0 ? (size_t)size : 0);
            if (fread(elf.data(), 1, elf.size(), f) != elf.size()) elf.clear();
            fclose(f);
        }
        uintptr_t base = 0;
        dl_iterate_phdr(emu_main_base, &base);
        if (elf.size() > sizeof(Elf64_Ehdr) && !memcmp(elf.data(), ELFMAG, SELFMAG)) {
            const Elf64_Ehdr* eh = (const Elf64_Ehdr*)elf.data();
            const Elf64_Shdr* sh = (const Elf64_Shdr*)(elf.data() + eh->e_shoff);
            for (int i = 0; i < eh->e_shnum; i++) {
                if (sh[i].sh_type != SHT_SYMTAB) continue;
                const Elf64_Sym* sym = (const Elf64_Sym*)(elf.data() + sh[i].sh_offset);
                const char* names = elf.data() + sh[sh[i].sh_link].sh_offset;
                for (size_t k = 0; k < sh[i].sh_size / sizeof(Elf64_Sym); k++)
                    if (ELF64_ST_TYPE(sym[k].st_info) == STT_FUNC && sym[k].st_value)
                        symbols.push_back({base + sym[k].st_value, sym[k].st_size, names + sym[k].st_name});
            }
        }
    }
    for (const EmuSymbol& s : symbols) {
        if ((uintptr_t)fn < s.addr || (uintptr_t)fn >= s.addr + (s.size ? s.size : 1)) continue;
        int status = 0;
        char* d = abi::__cxa_demangle(s.name.c_str(), nullptr, nullptr, &status);
        std::string name = status == 0 && d ? d : s.name;
        free(d);
        if (!name.compare(0, 5, "void ")) name = name.substr(5);  // a template's return type
        // drop the parameter list: the first '(' outside template brackets
        int depth = 0;
        for (size_t i = 0; i < name.size(); i++) {
            if (name[i] == '<') depth++;
            else if (name[i] == '>') depth--;
            else if (name[i] == '(' && depth == 0 && i > 0) return name.substr(0, i);
        }
        return name;
    }
    return "";
}

// "flash_tc_forward_kernel<4> (attention.cuh:652)": the symbol where the program has one, else the launch's text
EMU_NOCHECK inline std::string emu_kernel_label(const EmuLaunch& l) {
    std::string name = emu_function_name(l.fn);
    if (name.empty()) name = l.source;
    const char* file = strrchr(l.file, '/');
    return name + " (" + (file ? file + 1 : l.file) + ":" + std::to_string(l.line) + ")";
}

// Reports a bug and ends the program (exit status 1): the message, then the launch, block and thread where it
// happened when a kernel runs, then how to repeat the run.
EMU_NOCHECK [[noreturn]] inline void emu_error(const char* format, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, format);
    vsnprintf(msg, sizeof(msg), format, ap);
    va_end(ap);
    fprintf(stderr, "EMU: error: %s\n", msg);
    const EmuLaunch& l = emu_launch_now;
    if (l.serial) {
        fprintf(stderr, "EMU:   %s #%lld of %s: grid (%u, %u, %u), block (%u, %u, %u), %zu bytes of dynamic "
                "shared memory\n", l.active ? "in launch" : "in host code after launch", l.serial,
                emu_kernel_label(l).c_str(), l.grid.x, l.grid.y, l.grid.z, l.block.x, l.block.y, l.block.z,
                l.dynamic_bytes);
        if (l.in_thread)
            fprintf(stderr, "EMU:   block (%u, %u, %u), thread (%u, %u, %u) (warp %d, lane %d)\n", blockIdx.x,
                    blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z, l.thread / 32, l.thread % 32);
    }
    // where: the functions on the stack (a kernel's thread, or the host), innermost first
    void* frames[24];
    int n = backtrace(frames, 24);
    std::string where;
    for (int i = 1, shown = 0; i < n && shown < 10; i++) {
        std::string f = emu_function_name((char*)frames[i] - 1);
        // the kernel's own functions and the host's, not the emulator's machinery
        if (f.empty() || !f.compare(0, 4, "emu_") || !f.compare(0, 2, "_Z") || !f.compare(0, 5, "std::") ||
            f.find("__tsan_") != std::string::npos || f.find("emu_launch") != std::string::npos)
            continue;
        where += (shown++ ? " <- " : "") + f;
    }
    if (!where.empty()) fprintf(stderr, "EMU:   in %s\n", where.c_str());
    fprintf(stderr, "EMU:   emulating %s (EMU_DEVICE); EMU_SEED=%llu repeats this run\n", emu_device().arch,
            emu_seed());
    fflush(stdout);
    fflush(stderr);
    _exit(1);
}
