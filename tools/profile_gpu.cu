// Where a training step's GPU time goes, part by part, for each layout at one shape: the embedding, the norms (the
// boundaries: all that differs between the layouts), the attention's matrix products and its core (softmax or
// flash), the MLP, the logits and loss, the optimizer (zeroing, gradient norm, AdamW), and the host's copies and
// syncs; forward and backward apart. Then what Post-Norm and SiameseNorm add to Pre-Norm, part by part. A
// measurement, not a test: tests/bench_gpu.sh runs it after its table.
//
// The trainer marks its parts itself (profile_part in cuda_common.cuh, one CUDA event per mark), so this times the
// trainer's own code path: full training steps (zero the gradients, forward, backward, gradient norm, AdamW) on
// random tokens. The events are recorded between launches on the one stream the trainer uses, so a part's time is
// the GPU time of its kernels plus any time the GPU waited for the host in between; the parts add up to the step.
// TFLOP/s is given for the parts whose FLOPs are plain matrix products: 2 m n k a product, forward and backward
// (the attention core counts the causal half of q k^T and att v, which is what flash attention computes).
//
//   make tools/profile_gpu && ./tools/profile_gpu [-e d12] [-b 16] [-t 1024] [-x 3] [-r 0|1]
//                                                 [--attention materialized|flash|cudnn] [--norm pre,post,siamese]
//                                                 [--epilogues 1|0]
//   (another shape: --layers L --channels C --heads NH instead of -e, and --vocab V instead of GPT-2's 50257)
// The precision is the build's (make PRECISION=...), as is the default attention (make ATTENTION=...); the
// materialized and flash attentions are always compiled in, cuDNN's in a make USE_CUDNN=1 build, so --attention
// compares them within one build (cuDNN builds its graphs in the warm-up steps; their cost is printed apart).
// --epilogues 0 (bf16 build) turns cuBLASLt's fused bias and GELU epilogues off, for the separate kernels: whether
// the fusion pays on this GPU.
#define TRAIN_GPT2_NO_MAIN
#include "../train_gpt2.cu"

#include <map>
#include <string>

enum { PHASE_FORWARD, PHASE_BACKWARD, PHASE_UPDATE, PHASES };
static const char* const PHASE_NAMES[PHASES] = {"forward", "backward", "update"};

// the parts the trainer marks, in the order the tables list them (a part not named here comes after them)
static const char* const PART_ORDER[] = {"embedding", "norms", "attention matmuls", "attention core", "mlp",
                                         "logits and loss", "optimizer", "copies and syncs"};

struct Profile {
    std::vector<std::string> parts;                      // PART_ORDER's that occur, then any others
    std::map<std::string, double> ms[PHASES];            // ms a step, per part and phase
    double step_ms;                                      // wall time a step, host clock, marks on
};

// ms of each part since the marks were last read: the time from each mark to the next, per (part, phase); the
// marks' events go back to the pool
static void read_marks(Profile* p, int steps) {
    profile_part("end");
    cudaCheck(cudaEventSynchronize(profile.marks.back().event));
    for (size_t i = 0; i + 1 < profile.marks.size(); i++) {
        const ProfileMark& a = profile.marks[i];
        float ms = 0;
        cudaCheck(cudaEventElapsedTime(&ms, a.event, profile.marks[i + 1].event));
        if (std::find(p->parts.begin(), p->parts.end(), a.part) == p->parts.end()) p->parts.push_back(a.part);
        p->ms[a.phase][a.part] += ms / steps;
    }
    for (const ProfileMark& m : profile.marks) profile.spare.push_back(m.event);
    profile.marks.clear();
    auto rank = [](const std::string& part) {
        return std::find(std::begin(PART_ORDER), std::end(PART_ORDER), part) - std::begin(PART_ORDER);
    };
    std::stable_sort(p->parts.begin(), p->parts.end(),
                     [&](const std::string& a, const std::string& b) { return rank(a) < rank(b); });
}

// one training step as train_main takes it (one micro-batch, clipping at 1, lr 1e-4)
static void train_step(GPT2* m, const std::vector<int>& tokens, int B, int T, int t) {
    profile.phase = PHASE_UPDATE;
    gpt2_zero_grad(m);
    profile.phase = PHASE_FORWARD;
    gpt2_forward(m, tokens.data(), tokens.data() + 1, B, T, 1.0f);
    profile.phase = PHASE_BACKWARD;
    gpt2_backward(m);
    profile.phase = PHASE_UPDATE;
    double norm = gpt2_grad_norm(m);
    AdamWConfig opt = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f};
    gpt2_update(m, opt, norm > 1 ? (float)(1 / norm) : 1.0f, t);
}

// FLOPs a step of each matrix-product part (forward + backward = 3x forward), and of the attention core
static std::map<std::string, double> part_flops(const GPT2Config& c, int B, int T) {
    double N = (double)B * T, C = c.channels, L = c.num_layers;
    return {{"attention matmuls", 3 * L * 2 * N * C * 4 * C},  // qkv (C -> 3C) and the projection (C -> C)
            {"mlp", 3 * L * 2 * N * C * 8 * C},                // fc (C -> 4C) and its projection (4C -> C)
            {"logits and loss", 3 * 2 * N * C * c.padded_vocab_size},
            {"attention core", 3 * L * 2 * (double)B * T * T * C}};  // q k^T and att v, each 2 B T^2 C / 2
}

static Profile profile_layout(const GPT2Config& c, int B, int T, int steps, int recompute, int attention) {
    GPT2 m;
    m.recompute = recompute;
    m.attention = attention;
    gpt2_init_random(&m, c, 1);
    std::vector<int> tokens(B * T + 1);
    uint64_t rng = 7;
    for (int& t : tokens) t = (int)(random_uniform(&rng) * c.vocab_size);
    Profile p;
    for (int s = 0; s < 2; s++) train_step(&m, tokens, B, T, s + 1);  // warm up cuBLAS and the allocator
    cudaCheck(cudaDeviceSynchronize());
    profile.on = true;
    double t0 = now_seconds();
    for (int s = 0; s < steps; s++) train_step(&m, tokens, B, T, s + 3);
    read_marks(&p, steps);
    p.step_ms = (now_seconds() - t0) * 1000 / steps;
    profile.on = false;
    gpt2_free(&m);
    return p;
}

static double total(const Profile& p, const std::string& part) {
    double s = 0;
    for (int ph = 0; ph < PHASES; ph++) {
        auto it = p.ms[ph].find(part);
        if (it != p.ms[ph].end()) s += it->second;
    }
    return s;
}

static double step_total(const Profile& p) {
    double s = 0;
    for (const std::string& part : p.parts) s += total(p, part);
    return s;
}

static void print_layout(const char* name, const Profile& p, const std::map<std::string, double>& flops) {
    double all = step_total(p);
    printf("\n%s: ms a step by part (GPU time between the trainer's marks)\n", name);
    printf("%-18s %9s %9s %9s %9s %7s %8s\n", "part", PHASE_NAMES[0], PHASE_NAMES[1], PHASE_NAMES[2], "total", "share",
           "TFLOP/s");
    for (const std::string& part : p.parts) {
        printf("%-18s", part.c_str());
        for (int ph = 0; ph < PHASES; ph++) {
            auto it = p.ms[ph].find(part);
            if (it == p.ms[ph].end()) printf(" %9s", "-");
            else printf(" %9.3f", it->second);
        }
        double t = total(p, part);
        auto f = flops.find(part);
        char rate[16] = "";
        if (f != flops.end() && t > 0) snprintf(rate, sizeof(rate), "%.1f", f->second / (t / 1000) / 1e12);
        printf(" %9.3f %6.1f%% %8s\n", t, 100 * t / all, rate);
    }
    printf("%-18s %9s %9s %9s %9.3f %7s   (host clock: %.3f ms a step)\n", "step", "", "", "", all, "", p.step_ms);
}

int main(int argc, char** argv) {
    TrainOptions o{};
    int B = 16, T = 1024, steps = 3, recompute = 0, attention = DEFAULT_ATTENTION, V = GPT2_VOCAB, epilogues = 1;
    std::string norms = "pre,post,siamese";
    for (int i = 1; i < argc; i++) {
        const char* f = argv[i];
        if (i + 1 >= argc) fail("flag %s needs a value (see the top of tools/profile_gpu.cu)", f);
        const char* v = argv[++i];
        if (!strcmp(f, "-e")) o.model = v;
        else if (!strcmp(f, "--layers")) o.layers = (int)parse_int(f, v);
        else if (!strcmp(f, "--channels")) o.channels = (int)parse_int(f, v);
        else if (!strcmp(f, "--heads")) o.heads = (int)parse_int(f, v);
        else if (!strcmp(f, "--vocab")) V = (int)parse_int(f, v);
        else if (!strcmp(f, "-b")) B = (int)parse_int(f, v);
        else if (!strcmp(f, "-t")) T = (int)parse_int(f, v);
        else if (!strcmp(f, "-x")) steps = (int)parse_int(f, v);
        else if (!strcmp(f, "-r")) recompute = (int)parse_int(f, v);
        else if (!strcmp(f, "--epilogues")) epilogues = (int)parse_int(f, v);
        else if (!strcmp(f, "--norm")) norms = v;
        else if (!strcmp(f, "--attention")) attention = parse_attention(v);
        else fail("unknown flag %s (see the top of tools/profile_gpu.cu)", f);
    }
    if (!o.model && !o.layers && !o.channels && !o.heads) o.model = "d12";
    if (o.model && !is_shape_name(o.model)) fail("-e expects a shape name (d12, d24, d36, d48), got '%s'", o.model);
    if (B < 1 || T < 1 || T > 1024 || steps < 1 || (recompute != 0 && recompute != 1) || V < 2 ||
        (epilogues != 0 && epilogues != 1))
        fail("need -b >= 1, 1 <= -t <= 1024, -x >= 1, -r 0 or 1, --vocab >= 2 and --epilogues 0 or 1");
    int L, C, NH;
    requested_shape(o, &L, &C, &NH);
    if (!o.model && (!L || !C || !NH)) fail("give --layers, --channels and --heads together (or -e)");
    check_attention(attention, C / NH);  // before the GPU: a build without the attention asked for says so
    gpu_init(0);
#if USE_CUBLASLT
    gpu.no_epilogues = !epilogues;
#endif
    const char* products = USE_CUBLASLT && epilogues ? "cuBLASLt epilogues" : "separate bias/GELU kernels";

    std::vector<std::pair<std::string, Profile>> runs;
    std::map<std::string, double> flops;
    for (size_t start = 0; start <= norms.size();) {
        size_t end = norms.find(',', start);
        if (end == std::string::npos) end = norms.size();
        std::string name = norms.substr(start, end - start);
        int norm = parse_norm(name.c_str());
        GPT2Config c = make_config(L, C, NH, 1024, V, norm, 0, default_layout_setting(norm, L));
        validate_config(c);
        flops = part_flops(c, B, T);
        runs.push_back({name, profile_layout(c, B, T, steps, recompute, attention)});
        start = end + 1;
    }

    printf("%s, %s, L=%d C=%d NH=%d V=%d B=%d T=%d, %s attention, %s%s; mean of %d steps after 2 warm-up "
           "steps\n", gpu.name, PRECISION_NAME, L, C, NH, V, B, T, ATTENTION_NAMES[attention], products,
           recompute ? ", -r 1" : "", steps);
#if HAVE_CUDNN_ATTENTION
    if (attention == ATTENTION_CUDNN) {
        CudnnAttentionStats st = cudnn_attention_stats();
        printf("cuDNN %zu: %d graphs built (forward and backward per shape) in %.2f s, before the timed steps; "
               "workspace %.1f MiB\n", st.version, st.graphs, st.build_seconds, st.workspace_bytes / 1048576.0);
    }
#endif
    for (const auto& r : runs) print_layout(r.first.c_str(), r.second, flops);

    // each layout against the first (Pre-Norm by default), part by part
    if (runs.size() > 1) {
        const Profile& base = runs[0].second;
        printf("\nms a step over %s's, by part (and in %% of %s's step), %s attention\n%-18s", runs[0].first.c_str(),
               runs[0].first.c_str(), ATTENTION_FLAGS[attention], "part");
        for (size_t r = 1; r < runs.size(); r++) printf(" %18s", runs[r].first.c_str());
        printf("\n");
        for (const std::string& part : base.parts) {
            printf("%-18s", part.c_str());
            for (size_t r = 1; r < runs.size(); r++) {
                double d = total(runs[r].second, part) - total(base, part);
                printf(" %+9.3f (%+5.1f%%)", d, 100 * d / step_total(base));
            }
            printf("\n");
        }
        printf("%-18s", "step");
        for (size_t r = 1; r < runs.size(); r++) {
            double d = step_total(runs[r].second) - step_total(base);
            printf(" %+9.3f (%+5.1f%%)", d, 100 * d / step_total(base));
        }
        printf("\n");
    }
    return 0;
}
