// tests/nccl_shim/cuda_runtime.h: the CPU emulator's CUDA runtime (tools/cuda_emulator), with as many devices as
// tests/emulate_nccl.sh starts ranks (the emulator has one), so that each rank finds its own GPU
#pragma once
#include_next <cuda_runtime.h>
inline cudaError_t emu_device_count(int* n) {
    *n = 8;
    return 0;
}
#define cudaGetDeviceCount emu_device_count
