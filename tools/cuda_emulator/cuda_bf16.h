// A CPU stand-in for cuda_bf16.h (tools/emulate_gpu.sh): bfloat16 as 16 bits, float conversions rounding to nearest
// even as the GPU's __float2bfloat16 does, so the emulated bf16 build rounds where the real one rounds.
#pragma once
#include <cstdint>
#include <cstring>
// always inlined: into the (instrumented) kernels and into the emulator's own unchecked code alike (emu_core.h)
#define EMU_INLINE inline __attribute__((always_inline))
struct __nv_bfloat16 {
    unsigned short x;
    __nv_bfloat16() = default;
    EMU_INLINE __nv_bfloat16(float f) {
        uint32_t u;
        memcpy(&u, &f, 4);
        if ((u & 0x7fffffffu) > 0x7f800000u) x = 0x7fc0;  // NaN stays NaN
        else x = (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
    EMU_INLINE __nv_bfloat16(double d) : __nv_bfloat16((float)d) {}
    EMU_INLINE __nv_bfloat16(int i) : __nv_bfloat16((float)i) {}
    EMU_INLINE operator float() const {
        uint32_t u = (uint32_t)x << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
};
struct alignas(4) __nv_bfloat162 {  // 4-byte aligned, as on the GPU
    __nv_bfloat16 x, y;
};
inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 b) { return (float)b; }
