// The GPU memory the CUDA trainer allocates, per shape, layout and batch, from the trainer's own sizing functions
// (count_parameters, point_activations): prints the tables of docs/cuda.md. Needs no GPU.
//   nvcc -std=c++17 -arch=sm_90 -o /tmp/cuda_memory tools/cuda_memory.cu -lcublas && /tmp/cuda_memory
#define TRAIN_GPT2_NO_MAIN
#include "../train_gpt2.cu"

static const int H100_SMS = 132;           // H100 SXM and H200: 132 SMs (sizes the reduction scratch)
static const double CONTEXT_GIB = 0.75;    // CUDA context + cuBLAS workspace: an estimate, see docs/cuda.md

static double gib(double bytes) { return bytes / (1024.0 * 1024 * 1024); }

// bytes the trainer allocates besides the CUDA context: parameters, gradients, AdamW m and v, activations (with
// the backward scratch), token buffers, reduction scratch
static double trainer_bytes(const GPT2Config& c, int B, int T) {
    ActivationTensors a;
    double params = (double)count_parameters(c) * (2 * sizeof(floatX) + 2 * sizeof(float));
    double acts = (double)point_activations(c, B, T, 0, DEFAULT_ATTENTION, &a, nullptr);
    double tokens = (5.0 * B * T + 1) * sizeof(int);
    double partials = 4.0 * std::max((size_t)H100_SMS * MAX_ROW_BLOCKS_PER_SM * 2 * LN_SLOTS * c.channels,
                                     (size_t)BIAS_MAX_CHUNKS * 4 * c.channels);
    return params + acts + tokens + partials;
}

int main() {
    struct { const char* name; int L, C, NH; } shapes[] = {
        {"d12", 12, 768, 12}, {"d24", 24, 1024, 16}, {"d36", 36, 1280, 20}, {"d48", 48, 1600, 25}};
    const int T = 1024, batches[] = {1, 2, 4, 8, 16};
    printf("GPT-2 vocabulary (50257, padded 50304), T = %d; GiB allocated by the trainer (+ %.2f GiB context)\n\n", T,
           CONTEXT_GIB);
    printf("| shape | layout | parameters | weights+grads+AdamW |");
    for (int B : batches) printf(" B=%d |", B);
    printf(" largest B, 80 GB | largest B, 141 GB |\n|---|---|---|---|");
    for (size_t i = 0; i < sizeof(batches) / sizeof(batches[0]); i++) printf("---|");
    printf("---|---|\n");
    for (auto& s : shapes) {
        for (int norm = 0; norm < 3; norm++) {
            GPT2Config c = {T, GPT2_VOCAB, pad_vocab(GPT2_VOCAB), s.L, s.NH, s.C, norm, 0};
            printf("| %s | %s | %.0fM | %.1f |", s.name, NORM_NAMES[norm], count_parameters(c) / 1e6,
                   gib((double)count_parameters(c) * 16));
            for (int B : batches) printf(" %.1f |", gib(trainer_bytes(c, B, T)));
            for (double gpu_gib : {80e9 / (1 << 30), 141e9 / (1 << 30)}) {
                int best = 0;
                for (int B = 1; B <= 256; B++)
                    if (gib(trainer_bytes(c, B, T)) + CONTEXT_GIB <= gpu_gib) best = B;
                printf(" %d |", best);
            }
            printf("\n");
        }
    }
    printf("\nper layer and token at T = 1024 (activation bytes / (L * B * T)), d12:\n");
    for (int norm = 0; norm < 3; norm++) {
        GPT2Config c = {T, GPT2_VOCAB, pad_vocab(GPT2_VOCAB), 12, 12, 768, norm, 0};
        ActivationTensors a;
        double one = (double)point_activations(c, 1, T, 0, DEFAULT_ATTENTION, &a, nullptr), two = (double)point_activations(c, 2, T, 0, DEFAULT_ATTENTION, &a, nullptr);
        printf("  %-8s %.0f KiB per token over all layers (%.1f KiB per layer)\n", NORM_NAMES[norm],
               (two - one) / T / 1024, (two - one) / T / 1024 / 12);
    }
    GPT2Config kjv = {1024, 256, 256, 12, 12, 768, NORM_SIAMESE, 0};
    printf("\ntests/gpu_check.sh's run (d12 siamese, KJV bytes V=256, B=16, T=256): %.2f GiB + context\n",
           gib(trainer_bytes(kjv, 16, 256)));
    return 0;
}
