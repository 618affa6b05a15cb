// Is there a GPU that runs CUDA code? Prints "GPU: <name>, sm_XY, <memory>, <SMs>" and exits 0 when one kernel ran
// and wrote what it should; otherwise one line saying why, exit 1. tests/gpu_check.sh and tests/bench_gpu.sh start
// with it (built for the default architecture with PTX, so it runs on any GPU the driver knows).
#include <cstdio>
#include <cuda_runtime.h>

__global__ void fill(int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 3 * i + 1;
}

static int failed(const char* what, cudaError_t err) {
    printf("no GPU usable: %s: %s\n", what, cudaGetErrorString(err));
    return 1;
}

int main() {
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) return failed("cudaGetDeviceCount", err);
    if (count == 0) {
        printf("no GPU: the CUDA driver sees no device\n");
        return 1;
    }
    cudaDeviceProp prop;
    if ((err = cudaGetDeviceProperties(&prop, 0)) != cudaSuccess) return failed("cudaGetDeviceProperties", err);
    const int n = 1 << 20;
    int* d = nullptr;
    if ((err = cudaMalloc(&d, n * sizeof(int))) != cudaSuccess) return failed("cudaMalloc", err);
    fill<<<(n + 255) / 256, 256>>>(d, n);
    if ((err = cudaGetLastError()) != cudaSuccess) return failed("a kernel launch", err);
    static int host[n];
    if ((err = cudaMemcpy(host, d, n * sizeof(int), cudaMemcpyDeviceToHost)) != cudaSuccess)
        return failed("cudaMemcpy after the kernel", err);
    for (int i = 0; i < n; i++)
        if (host[i] != 3 * i + 1) {
            printf("no GPU usable: a test kernel wrote %d at %d instead of %d\n", host[i], i, 3 * i + 1);
            return 1;
        }
    printf("GPU: %s, sm_%d%d, %.1f GiB, %d SMs\n", prop.name, prop.major, prop.minor,
           prop.totalGlobalMem / 1073741824.0, prop.multiProcessorCount);
    return 0;
}
