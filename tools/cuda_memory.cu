// The GPU memory the CUDA trainer allocates, per shape, layout, batch, recomputation and attention, from the
// trainer's own sizing functions (count_parameters, parameter_bytes, point_activations): prints the tables of
// docs/cuda.md for the precision it is built in. Needs no GPU.
//   nvcc -std=c++17 -arch=sm_90 -DENABLE_BF16 -o /tmp/cuda_memory tools/cuda_memory.cu -lcublas -lcublasLt && /tmp/cuda_memory
//   (-DENABLE_FP32 for the float32 build's numbers)
#define TRAIN_GPT2_NO_MAIN
#include "../train_gpt2.cu"

static const int H100_SMS = 132;           // H100 SXM and H200: 132 SMs (sizes the reduction scratch)
static const double CONTEXT_GIB = 0.75;    // CUDA context + cuBLAS workspace: an estimate, see docs/cuda.md

static double gib(double bytes) { return bytes / (1024.0 * 1024 * 1024); }

// bytes the trainer allocates besides the CUDA context: parameters (master, gradient, AdamW m and v, the bf16
// copy), activations (with the backward scratch), token buffers, reduction scratch
static double trainer_bytes(const GPT2Config& c, int B, int T, int recompute, int attention) {
    ActivationTensors a;
    double params = (double)count_parameters(c) * parameter_bytes();
    double acts = (double)point_activations(c, B, T, recompute, attention, &a, nullptr);
    double tokens = (5.0 * B * T + 1) * sizeof(int);
    size_t blocks = (size_t)H100_SMS * MAX_ROW_BLOCKS_PER_SM;
    double partials = 4.0 * std::max({blocks * 2 * SIAMESE_SLOTS * c.channels, (size_t)BIAS_MAX_CHUNKS * 4 * c.channels,
                                      layout_of(c).hc ? hc_partials_floats(blocks, c.channels) : 0});
    return params + acts + tokens + partials;
}

// the largest micro-batch whose allocations and the context estimate fit a card of gpu_gib GiB; 0: not even B = 1
static int largest_batch(const GPT2Config& c, int T, int recompute, int attention, double gpu_gib) {
    int best = 0;
    for (int B = 1; B <= 512; B++)
        if (gib(trainer_bytes(c, B, T, recompute, attention)) + CONTEXT_GIB <= gpu_gib) best = B;
    return best;
}

// what an H200 gives a program: about 139 GiB (of its 141 GB), as the H200 machine this project is lent reports
static const double H200_GIB = 139;

int main() {
    struct { const char* name; int L, C, NH; } shapes[] = {
        {"d12", 12, 768, 12}, {"d24", 24, 1024, 16}, {"d36", 36, 1280, 20}, {"d48", 48, 1600, 25}};
    const int T = 1024, batches[] = {4, 8, 16};
    printf("%s build, GPT-2 vocabulary (50257, padded 50304), T = %d; GiB allocated by the trainer (+ %.2f GiB "
           "context); m = materialized attention, f = flash, r1 = -r 1\n\n", PRECISION_NAME, T, CONTEXT_GIB);
    printf("| shape | layout | parameters | weights+grads+AdamW |");
    for (int B : batches) printf(" B=%d m | B=%d m r1 | B=%d f r1 |", B, B, B);
    printf(" largest B on an H200 (%.0f GiB): m, m r1, f r1 |\n|---|---|---|---|", H200_GIB);
    for (size_t i = 0; i < 3 * sizeof(batches) / sizeof(batches[0]); i++) printf("---|");
    printf("---|\n");
    for (auto& s : shapes) {
        for (int norm = 0; norm < NUM_LAYOUTS; norm++) {  // the layouts the trainer runs (host/layouts.h)
            if (!LAYOUTS[norm].cuda) continue;
            GPT2Config c = make_config(s.L, s.C, s.NH, T, GPT2_VOCAB, norm, 0, default_layout_setting(norm, s.L));
            printf("| %s | %s | %.0fM | %.1f |", s.name, LAYOUTS[norm].name, count_parameters(c) / 1e6,
                   gib((double)count_parameters(c) * parameter_bytes()));
            for (int B : batches)
                printf(" %.1f | %.1f | %.1f |", gib(trainer_bytes(c, B, T, 0, ATTENTION_MATERIALIZED)),
                       gib(trainer_bytes(c, B, T, 1, ATTENTION_MATERIALIZED)),
                       gib(trainer_bytes(c, B, T, 1, ATTENTION_FLASH)));
            printf(" %d, %d, %d |\n", largest_batch(c, T, 0, ATTENTION_MATERIALIZED, H200_GIB),
                   largest_batch(c, T, 1, ATTENTION_MATERIALIZED, H200_GIB),
                   largest_batch(c, T, 1, ATTENTION_FLASH, H200_GIB));
        }
    }
    printf("\nper token at T = 1024 over all layers (activation bytes / (B * T)), d12:\n");
    for (int norm = 0; norm < NUM_LAYOUTS; norm++) {
        if (!LAYOUTS[norm].cuda) continue;
        GPT2Config c = make_config(12, 768, 12, T, GPT2_VOCAB, norm, 0, default_layout_setting(norm, 12));
        ActivationTensors a;
        for (int variant = 0; variant < 3; variant++) {
            int r = variant > 0, att = variant == 2 ? ATTENTION_FLASH : ATTENTION_MATERIALIZED;
            double one = (double)point_activations(c, 1, T, r, att, &a, nullptr);
            double two = (double)point_activations(c, 2, T, r, att, &a, nullptr);
            printf("  %-15s %-5s %.0f KiB\n", LAYOUTS[norm].name, variant == 0 ? "m" : variant == 1 ? "m r1" : "f r1",
                   (two - one) / T / 1024);
        }
    }
    // What fits the cards people have: for each size, the largest micro-batch of SiameseNorm (Pre- and Post-Norm,
    // Mix-LN and HybridNorm fit 1-5% more) and of its language-model form siamese-hybrid (the layout that needs the
    // most: its QKV norm keeps the product before it, 3 rows a layer) at T = 1024, as it is (materialized attention,
    // -r 0) and at the least memory (flash attention and -r 1); "-" where not even B = 1 fits. A card sold as N GB
    // is taken as N GiB (what CUDA reports of a 24 GB card is about 24 GiB), the H200 as above, less the context
    // estimate: stay a step below the limit, other programs on the GPU take their share.
    struct { const char* card; double gib; const char* examples; } cards[] = {
        {"16 GB", 16, "RTX 4060 Ti 16 GB, RTX 4080, A4000"}, {"24 GB", 24, "RTX 3090, RTX 4090, A10, L4"},
        {"40 GB", 40, "A100 40 GB"}, {"48 GB", 48, "A6000, RTX 6000 Ada, L40S"}, {"80 GB", 80, "A100 80 GB, H100"},
        {"141 GB", H200_GIB, "H200"}};
    for (int norm : {(int)NORM_SIAMESE, (int)NORM_SIAMESE_HYBRID}) {
        printf("\nlargest micro-batch B at T = %d for %s, per card: materialized attention / flash attention with -r 1 "
               "(\"-\": does not fit)\n\n| card | GiB counted | examples |", T, LAYOUTS[norm].name);
        for (auto& s : shapes) printf(" %s |", s.name);
        printf("\n|---|---|---|");
        for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) printf("---|");
        printf("\n");
        for (auto& card : cards) {
            printf("| %s | %.0f | %s |", card.card, card.gib, card.examples);
            for (auto& s : shapes) {
                GPT2Config c = make_config(s.L, s.C, s.NH, T, GPT2_VOCAB, norm);
                int m = largest_batch(c, T, 0, ATTENTION_MATERIALIZED, card.gib);
                int f = largest_batch(c, T, 1, ATTENTION_FLASH, card.gib);
                char a[16] = "-", b[16] = "-";
                if (m) snprintf(a, sizeof(a), "%d", m);
                if (f) snprintf(b, sizeof(b), "%d", f);
                printf(" %s / %s |", a, b);
            }
            printf("\n");
        }
    }
    GPT2Config kjv = make_config(12, 768, 12, 1024, 256, NORM_SIAMESE);
    printf("\ntests/gpu_check.sh's run (d12 siamese, KJV bytes V=256, B=16, T=256): %.2f GiB + context\n",
           gib(trainer_bytes(kjv, 16, 256, 0, ATTENTION_MATERIALIZED)));
    return 0;
}
