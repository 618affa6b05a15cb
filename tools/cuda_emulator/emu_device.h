// The limits of the GPU the emulator imitates: one row per compute capability, chosen by EMU_DEVICE (sm_80, sm_86,
// sm_89, sm_90; default sm_90). cudaGetDeviceProperties and cudaDeviceGetAttribute answer from the row, and every
// launch is checked against it as the driver checks it (cuda_runtime.h, emu_check_launch): threads per block and
// block dimensions, grid dimensions (gridDim.y and .z at most 65535), dynamic shared memory above 48 KB only after
// cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), and never above the device's
// opt-in maximum. A new generation is one more row.
//
// The SM count the emulated device reports is EMU_SMS (default 3), not the part's: the kernels size some grids by
// it (the backward row kernels' partial sums), so a fixed count keeps the emulated numbers the same under every
// device, and a small one makes those kernels stride over several rows a block as they do on a GPU at large B*T.
#pragma once
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>

struct EmuDevice {
    const char* arch;          // as EMU_DEVICE names it
    const char* parts;         // what it stands for
    int major, minor;          // compute capability
    int sms;                   // SMs of the largest part named (documentation; see EMU_SMS above)
    int max_threads_per_block;
    int max_block_dim[3];
    int max_grid_dim[3];
    int shared_per_block;        // bytes a block gets without opting in
    int shared_per_block_optin;  // the most cudaFuncSetAttribute may allow a block
    int shared_per_sm;
    int regs_per_block, regs_per_sm;
    int max_threads_per_sm;
    double global_gib;           // device memory of the largest part named
};

// CUDA C++ Programming Guide, "Technical Specifications per Compute Capability"
static const EmuDevice EMU_DEVICES[] = {
    {"sm_80", "A100", 8, 0, 108, 1024, {1024, 1024, 64}, {2147483647, 65535, 65535}, 48 << 10, 163 << 10, 164 << 10,
     65536, 65536, 2048, 80},
    {"sm_86", "RTX 30 series, A10, A6000", 8, 6, 84, 1024, {1024, 1024, 64}, {2147483647, 65535, 65535}, 48 << 10,
     99 << 10, 100 << 10, 65536, 65536, 1536, 48},
    {"sm_89", "RTX 40 series, L4, L40", 8, 9, 142, 1024, {1024, 1024, 64}, {2147483647, 65535, 65535}, 48 << 10,
     99 << 10, 100 << 10, 65536, 65536, 1536, 48},
    {"sm_90", "H100, H200", 9, 0, 132, 1024, {1024, 1024, 64}, {2147483647, 65535, 65535}, 48 << 10, 227 << 10,
     228 << 10, 65536, 65536, 2048, 141},
};

// the row EMU_DEVICE names (sm_90 when unset); an unknown name is one error line and exit 1
inline const EmuDevice& emu_device() {
    static const EmuDevice* device = nullptr;
    if (!device) {
        const char* want = getenv("EMU_DEVICE");
        if (!want || !*want) want = "sm_90";
        for (const EmuDevice& d : EMU_DEVICES)
            if (!strcmp(d.arch, want)) device = &d;
        if (!device) {
            fprintf(stderr, "EMU: error: EMU_DEVICE=%s is not one of", want);
            for (const EmuDevice& d : EMU_DEVICES) fprintf(stderr, " %s", d.arch);
            fprintf(stderr, "\n");
            exit(1);
        }
    }
    return *device;
}

inline int emu_reported_sms() {
    const char* s = getenv("EMU_SMS");
    int n = s && *s ? atoi(s) : 3;
    return n > 0 ? n : 3;
}
