// The CUDA trainer against the CPU reference (float32 build), in one program: for each layout (pre, post, siamese
// and siamese with each ablation, mix, the QKV-norm layouts hybrid, hybrid-star and siamese-hybrid, the baselines
// pre-qkvnorm and peri, and hc) both start
// from the same checkpoint and see the same batch, and must agree on the logits, the loss and EVERY parameter
// gradient; then ten AdamW steps (gradient accumulation, clipping, weight decay) must give the same losses; then the
// same at GPT-2 small's shape (12 layers, C 768, vocabulary 50257).
//
// The bound. Both programs compute in float32 (unit roundoff u = 6e-8) but sum in different orders (cuBLAS tiles
// and split sums, our block reductions; the CPU's register tiles and loops), so their results differ by rounding
// noise. A gradient entry is a sum of n ~ C..B*T products, each layer's error feeding the next; a sum of n terms in
// float32 carries a relative error of order sqrt(n) u ~ 1e-6 (n = 512) per product, and about 25 products and
// LayerNorms lie between a weight and the loss at 12 layers. Measured: the float32 CPU reference against the
// float64 one (the same code, so pure rounding noise) differs by at most 1.3e-6 norm-wise (2.3e-6 max-wise) per
// tensor at the small shapes below, and by at most 4.7e-6 (6.2e-6) at the 12-layer shape with GPT-2's vocabulary;
// the loss by 5e-8, and the ten-step losses below by 4e-8. The GPU against the CPU is one float32 rounding pattern
// against another, so we expect the same order, and the bounds leave a factor of about 100 above it. A real mistake
// is far larger: a missing 1/c_l, a lost LayerNorm term or a wrong transpose gives errors of order 1e-1..1
// (tests/test_gradients.cpp shows such deliberately wrong gradients failing).
//
// The bf16 build (tests/test_gpu_bf16, -DENABLE_BF16) runs the same cases against the same float32 reference with
// bounds for bf16. A bf16 number has 8 significant bits, so storing a value rounds it by up to u = 2^-8 = 3.9e-3
// relative (about u/sqrt(3) = 2.3e-3 on average over a tensor); every activation is stored in bf16 once or more
// (and the products read bf16 copies of the weights), while the sums inside the products, LayerNorms and softmaxes
// are float32. So each stored tensor carries ~2e-3 of independent noise, and a gradient sees the noise of the
// ~10 tensors on its path (sqrt(10) * 2e-3 ~ 7e-3). Measured in the emulator (tools/emulate_gpu.sh, which rounds to
// bf16 where the GPU does): 6.8e-3..1.1e-2 norm-wise and 8e-3..1.7e-2 max-wise per tensor, logits 4e-3..8e-3, the
// loss 2e-6..5e-4, the ten-step losses and norms 6e-4..1.3e-3, at the small shapes below. The bounds leave a factor
// of 3..8 above that (3e-2, 6e-2, 5e-3, 1e-2), and at 12 layers, where twice as many roundings lie on a path, 5e-2
// and 1e-1 (siamese at GPT-2 small's shape, emulated once in 70 minutes: 1.24e-2 norm-wise, 1.70e-2 max-wise).
// A real mistake is still far larger (1e-1..1 norm-wise). The bit-for-bit repeat holds in bf16 too.
//
// tests/test_gpu_cudnn is the bf16 build with cuDNN's attention compiled in (-DENABLE_CUDNN, attention_cudnn.cpp): it
// runs the cases named "cuDNN ..." (unless given its own -tc filter); the rest are tests/test_gpu_bf16's.
//
// Without a GPU this program prints "SKIPPED: no CUDA device" and ends with "0 passed, 0 failed, N skipped".
#define DOCTEST_CONFIG_IMPLEMENT
#include "doctest.h"

// the shared host plumbing once, at global scope; its #pragma once makes the reference's own include a no-op
#include "../host/train_loop.h"
#include "../host/fast_math.h"
#include "../host/gemm.h"
#ifdef _OPENMP
#include <omp.h>
#endif
#include <algorithm>
#include <set>
#include <sstream>

// the CPU reference in its own namespace (cpu::GPT2, cpu::gpt2_forward, ...)
#define REFERENCE_CPU_NO_MAIN
namespace cpu {
#include "../reference_cpu.cpp"
}
// the CUDA trainer at global scope (GPT2, gpt2_forward, ...)
#define TRAIN_GPT2_NO_MAIN
#include "../train_gpt2.cu"

static_assert(sizeof(cpu::real) == 4, "the GPU is held against the float32 build of the reference");

// bounds (see the top of the file): small shapes, and the 12-layer shape
#ifdef ENABLE_FP32
static const double SMALL_NORM_BOUND = 1e-4, SMALL_MAX_BOUND = 3e-4;  // measured float32 noise ~1e-6
static const double D12_NORM_BOUND = 5e-4, D12_MAX_BOUND = 1e-3;      // measured ~5e-6
static const double LOSS_BOUND = 1e-5;                                 // relative; measured 5e-8
static const double STEPS_BOUND = 1e-5;  // relative, each of the ten losses and gradient norms; measured 4e-8
#else
static const double SMALL_NORM_BOUND = 3e-2, SMALL_MAX_BOUND = 6e-2;  // bf16: measured (emulated) ~8e-3 and ~1.7e-2
static const double D12_NORM_BOUND = 5e-2, D12_MAX_BOUND = 1e-1;      // siamese emulated: 1.2e-2 and 1.7e-2
static const double LOSS_BOUND = 5e-3;                                 // relative; measured (emulated) <= 5.3e-4
static const double STEPS_BOUND = 1e-2;  // relative, each of the ten losses and norms; measured (emulated) 1.3e-3
#endif

struct Problem {
    const char* label;
    GPT2Config config;
    int B, T;
    std::vector<int> inputs, targets;
};

static Problem make_problem(const char* label, int norm, int ablations, int L, int C, int NH, int maxT, int V, int B,
                            int T, uint64_t seed = 42) {
    Problem p;
    p.label = label;
    p.config = make_config(L, C, NH, maxT, V, norm, ablations);
    p.B = B;
    p.T = T;
    uint64_t rng = seed;
    for (int i = 0; i < B * T; i++) {
        p.inputs.push_back((int)(random_uniform(&rng) * V));
        p.targets.push_back((int)(random_uniform(&rng) * V));
    }
    return p;
}

// GPT-2's initialization, then the LayerNorm gains and shifts and the biases moved off 1 and 0 (by 0.2) so that
// no term of their gradients vanishes; the weights are random already. The QKV-norm layouts' qkv bias moves by
// 0.002: hybrid's attention reads the raw stream (~0.02 a channel at GPT-2's initialization, its product ~0.01), so
// a bias of 0.2 would be nearly all of every token's q and k, every key nearly the same, and the gradients of
// ln_q and ln_k sums that cancel (measured, hybrid L=3 C=96: the float32 reference against the float64 one
// 5e-5 on lnqw, lnqb, lnkw with 0.2, 1.5e-6 with 0.002, as every other tensor). hc's projections W (hc1w, hc2w,
// 0 at the init) move by 0.05: the tanh's argument p = LN_h(h) . W_m is then ~0.05 sqrt(C) ~ 0.5, where the tanh is
// live; by 0.2 it is ~2, the tanh saturated (1 - D^2 ~ 0.07), and the gradients of the last sub-layer's dynamic
// weights (ln2hw, ln2hb, hc2w) become a cancellation that float32 gets only to 5.9e-6 (the sum head makes the
// streams' dL/dA_j1 and dL/dA_j2 opposite: (x + y) . LN_f'(dhf) = 0; measured on the hc-flash problem below, the
// float32 reference against the float64 one; with 0.05 at most 1.1e-6 on every tensor of every hc problem here)
static bool is_hc_projection(const char* name) { return !strcmp(name, "hc1w") || !strcmp(name, "hc2w"); }
static void init_cpu_model(cpu::GPT2* m, const GPT2Config& c) {
    cpu::gpt2_init_random(m, c, 7);
    uint64_t rng = 99;
    for (const TensorInfo& t : m->tensors) {
        if (t.decay) continue;
        double shift = layout_of(c).qkv_norm && !strcmp(t.name, "qkvb") ? 0.002 : 0.2;
        if (is_hc_projection(t.name)) shift = 0.05;
        for (size_t i = 0; i < t.size; i++) m->params_memory[t.offset + i] += (float)(shift * random_normal(&rng));
    }
}

// LN_k's shift (the QKV-norm layouts' lnkb) adds one vector b to every key of a head: each query's scores all move
// by the same q.b, the softmax does not change, and the gradient is 0. What a program computes for it is rounding
// noise, so it is held to 0 relative to the model's largest gradient (as tests/test_gradients.cpp holds the CPU's),
// not relative to itself: a shift's gradient that gathered anything else (another part's, a missed row) is not 0
static bool zero_gradient(const char* name) { return !strcmp(name, "lnkb"); }
static double largest_magnitude(const float* v, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++)
        if (!(std::fabs(v[i]) <= m)) m = std::fabs(v[i]);  // a NaN wins
    return m;
}

// the GPU model loads the checkpoint the CPU model writes: both start from the same numbers
static void load_gpu_model(GPT2* g, const cpu::GPT2& m) {
    const char* dir = getenv("TMPDIR");
    std::string path = std::string(dir && *dir ? dir : "/tmp") + "/test_gpu_" + std::to_string(getpid()) + ".bin";
    checkpoint_write(path.c_str(), m.config, m.params_memory);
    gpt2_build_from_checkpoint(g, path.c_str());
    remove(path.c_str());
}

// a NaN anywhere makes the worst error NaN, which fails every bound
static void keep_worst(double* worst, double x) {
    if (!(x <= *worst)) *worst = x;
}

struct Diff {
    double norm_rel, max_rel;  // ||gpu - cpu|| / ||cpu||;  max |gpu - cpu| / max |cpu|  (absolute where cpu is 0)
};

static Diff compare(const float* gpu_values, const float* cpu_values, size_t n) {
    double d2 = 0, r2 = 0, dmax = 0, rmax = 0;
    for (size_t i = 0; i < n; i++) {
        double a = gpu_values[i], b = cpu_values[i], d = a - b;
        d2 += d * d;
        r2 += b * b;
        keep_worst(&dmax, std::fabs(d));
        rmax = std::max(rmax, std::fabs(b));
    }
    return {r2 > 0 ? std::sqrt(d2 / r2) : std::sqrt(d2), rmax > 0 ? dmax / rmax : dmax};
}

template <typename T>
static std::vector<float> as_float(const std::vector<T>& v) {
    std::vector<float> out(v.size());
    for (size_t i = 0; i < v.size(); i++) out[i] = (float)v[i];
    return out;
}

static char* fmt(char* buf, size_t size, const char* format, ...) {
    va_list ap;
    va_start(ap, format);
    vsnprintf(buf, size, format, ap);
    va_end(ap);
    return buf;
}

// How the GPU model runs, beyond its configuration: -r 1 recomputation, the attention (the test's default is the
// materialized one whatever the build's is, so that both are held against the CPU and against each other)
struct Variant {
    int recompute;
    int attention;
};

static void apply_variant(GPT2* g, const Variant& v) {
    g->recompute = v.recompute;
    g->attention = v.attention;
}
static bool is_default(const Variant& v) { return v.recompute == 0 && v.attention == ATTENTION_MATERIALIZED; }

// the gradients of one batch (loss scale 1)
static std::vector<float> gpu_gradients(GPT2* g, const Problem& p) {
    gpt2_zero_grad(g);
    gpt2_forward(g, p.inputs.data(), p.targets.data(), p.B, p.T, 1.0f);
    gpt2_backward(g);
    return download(g->grads_memory, g->num_parameters);
}

#if HAVE_CUDNN_ATTENTION
// The shapes cuDNN takes and those it refuses (cudnn_attention_refusal builds a shape's graphs without running them):
// every cuDNN case asks before it runs a shape, and one that cuDNN refuses is recorded and left out, so that it does
// not end the program and lose every later case; main lists them at the end (CUDNNREFUSED). A refused shape is not a
// wrong result (the trainer stops on it with the same line); a run in which cuDNN took no shape at all fails.
static std::set<std::string> cudnn_taken, cudnn_refused;
static bool cudnn_takes(int B, int T, int NH, int hs, bool backward) {
    char shape[128];
    snprintf(shape, sizeof(shape), "B=%d T=%d NH=%d hs=%d %s", B, T, NH, hs, backward ? "forward+backward" : "forward");
    std::string why = cudnn_attention_refusal(B, T, NH, hs, backward);
    if (why.empty()) {
        cudnn_taken.insert(shape);
        return true;
    }
    if (cudnn_refused.insert(std::string(shape) + ": " + why).second) MESSAGE("CUDNNREFUSED " << shape << ": " << why);
    return false;
}
#endif
// whether the attention runs a shape: always, except one cuDNN refuses (recorded above)
static bool attention_takes(int attention, int B, int T, int NH, int hs, bool backward) {
#if HAVE_CUDNN_ATTENTION
    if (attention == ATTENTION_CUDNN) return cudnn_takes(B, T, NH, hs, backward);
#endif
    (void)attention, (void)B, (void)T, (void)NH, (void)hs, (void)backward;
    return true;
}

// One layout, one batch: logits, loss and every gradient tensor of the GPU against the CPU reference; then the
// GPU's backward pass once more (bit-for-bit the same: no atomics), and a forward pass with a smaller batch than
// the allocated one (what sampling does). A variant other than the default is also held against the default's
// gradients (variant_bound, norm-wise per tensor): what the variant itself changes, without the CPU's share.
// one sequence's forward pass at length n in an allocation made for more, as sampling runs it: the GPU's logits
// against the CPU's
static void check_sequence_logits(cpu::GPT2* ref, GPT2* g, const int* inputs, int n, double bound) {
    size_t count = (size_t)n * ref->config.padded_vocab_size;
    cpu::gpt2_forward(ref, inputs, nullptr, 1, n);
    gpt2_forward(g, inputs, nullptr, 1, n);
    std::vector<float> logits = as_float(download(g->acts.logits, count));
    Diff d = compare(logits.data(), ref->acts.logits, count);
    INFO("logits of a (1, " << n << ") batch: norm-rel " << d.norm_rel);
    CHECK(d.norm_rel <= bound);
}

static void check_against_cpu(const Problem& p, double norm_bound, double max_bound,
                              Variant v = Variant{0, ATTENTION_MATERIALIZED}, double variant_bound = 0) {
    const GPT2Config& c = p.config;
    int B = p.B, T = p.T, N = B * T, Vp = c.padded_vocab_size, NH = c.num_heads, hs = c.channels / NH;
    if (!attention_takes(v.attention, B, T, NH, hs, true)) return;  // recorded: the later cases go on
    cpu::GPT2 ref;
    init_cpu_model(&ref, c);
    GPT2 g;
    load_gpu_model(&g, ref);
    apply_variant(&g, v);

    cpu::gpt2_forward(&ref, p.inputs.data(), p.targets.data(), B, T);
    cpu::gpt2_zero_grad(&ref);
    cpu::gpt2_backward(&ref, 1);

    gpt2_forward(&g, p.inputs.data(), p.targets.data(), B, T);  // logits kept
    std::vector<float> logits = as_float(download(g.acts.logits, (size_t)N * Vp));
    Diff dl = compare(logits.data(), ref.acts.logits, (size_t)N * Vp);
    double loss_rel = std::fabs((double)g.mean_loss - ref.mean_loss) / std::fabs((double)ref.mean_loss);

    gpt2_zero_grad(&g);
    gpt2_forward(&g, p.inputs.data(), p.targets.data(), B, T, 1.0f);
    gpt2_backward(&g);
    std::vector<float> grads = download(g.grads_memory, g.num_parameters);

    char buf[256];
    std::string table = fmt(buf, sizeof(buf), "%s (L=%d C=%d NH=%d B=%d T=%d V=%d Vp=%d): loss cpu %.7f gpu %.7f "
                            "(rel %.1e), logits norm-rel %.1e\n  %-10s %10s %10s\n", p.label, c.num_layers,
                            c.channels, c.num_heads, B, T, c.vocab_size, Vp, (double)ref.mean_loss,
                            (double)g.mean_loss, loss_rel, dl.norm_rel, "gradient", "norm-rel", "max-rel");
    double worst_norm = 0, worst_max = 0, top = largest_magnitude(ref.grads_memory, g.num_parameters), zero = 0;
    std::string worst_norm_name = "-", worst_max_name = "-";
    for (const TensorInfo& t : g.tensors) {
        if (zero_gradient(t.name)) {  // 0: the GPU's largest entry against the model's largest gradient
            double z = largest_magnitude(grads.data() + t.offset, t.size) / top;
            table += fmt(buf, sizeof(buf), "  %-10s %10s %10.2e  (0 in exact arithmetic: largest entry / the "
                         "model's largest gradient; the CPU's %.1e)\n", t.name, "-", z,
                         largest_magnitude(ref.grads_memory + t.offset, t.size) / top);
            keep_worst(&zero, z);
            continue;
        }
        Diff d = compare(grads.data() + t.offset, ref.grads_memory + t.offset, t.size);
        table += fmt(buf, sizeof(buf), "  %-10s %10.2e %10.2e\n", t.name, d.norm_rel, d.max_rel);
        if (!(d.norm_rel <= worst_norm)) worst_norm = d.norm_rel, worst_norm_name = t.name;
        if (!(d.max_rel <= worst_max)) worst_max = d.max_rel, worst_max_name = t.name;
    }
    table += fmt(buf, sizeof(buf), "GRADCHECK %s norm_rel=%.2e (%s) max_rel=%.2e (%s) loss_rel=%.1e logits_rel=%.1e",
                 p.label, worst_norm, worst_norm_name.c_str(), worst_max, worst_max_name.c_str(), loss_rel,
                 dl.norm_rel);
    if (layout_of(c).qkv_norm) table += fmt(buf, sizeof(buf), " lnkb_zero=%.1e", zero);
    MESSAGE(table);
    CHECK(loss_rel <= LOSS_BOUND);
    CHECK(dl.norm_rel <= norm_bound);
    CHECK(worst_norm <= norm_bound);
    CHECK(worst_max <= max_bound);
    CHECK(zero <= max_bound);

    // the same backward pass again: the same bits
    gpt2_zero_grad(&g);
    gpt2_forward(&g, p.inputs.data(), p.targets.data(), B, T, 1.0f);
    gpt2_backward(&g);
    std::vector<float> again = download(g.grads_memory, g.num_parameters);
    CHECK_MESSAGE(memcmp(again.data(), grads.data(), grads.size() * sizeof(float)) == 0,
                  "two backward passes of the same batch differ");

    if (!is_default(v)) {
        GPT2 g0;
        load_gpu_model(&g0, ref);
        apply_variant(&g0, Variant{0, ATTENTION_MATERIALIZED});
        std::vector<float> grads0 = gpu_gradients(&g0, p);
        double worst = 0;
        std::string worst_name = "-";
        for (const TensorInfo& t : g.tensors) {
            if (zero_gradient(t.name)) continue;  // 0, held to it above
            Diff d = compare(grads.data() + t.offset, grads0.data() + t.offset, t.size);
            if (!(d.norm_rel <= worst)) worst = d.norm_rel, worst_name = t.name;
        }
        MESSAGE(std::string(fmt(buf, sizeof(buf), "VARIANTCHECK %s against the default variant: norm_rel=%.2e (%s)",
                                p.label, worst, worst_name.c_str())));
        CHECK(worst <= variant_bound);
        gpt2_free(&g0);
    }

    // a smaller batch in the same allocation, as sampling runs it: the first row, T - 3 positions
    int n = std::max(1, T - 3);
    if (attention_takes(v.attention, 1, n, NH, hs, false)) check_sequence_logits(&ref, &g, p.inputs.data(), n, norm_bound);

    gpt2_free(&g);
    cpu::gpt2_free(&ref);
}

// small shapes: every odd corner at least once (C not a multiple of 32, odd head sizes, T not a multiple of 32, a
// vocabulary of 60 padded to 128, row blocks of one warp and of two, the second one partly past C)
TEST_CASE("pre: logits, loss and every gradient match the CPU reference") {
    check_against_cpu(make_problem("pre", NORM_PRE, 0, 2, 136, 4, 32, 60, 3, 20), SMALL_NORM_BOUND, SMALL_MAX_BOUND);
}

TEST_CASE("post: logits, loss and every gradient match the CPU reference") {
    check_against_cpu(make_problem("post", NORM_POST, 0, 3, 144, 3, 40, 60, 2, 33), SMALL_NORM_BOUND, SMALL_MAX_BOUND);
}

TEST_CASE("siamese: logits, loss and every gradient match the CPU reference") {
    check_against_cpu(make_problem("siamese", NORM_SIAMESE, 0, 3, 192, 6, 32, 60, 3, 24), SMALL_NORM_BOUND,
                      SMALL_MAX_BOUND);
}

TEST_CASE("siamese --no-depth-scale: logits, loss and every gradient match the CPU reference") {
    check_against_cpu(make_problem("siamese-no-depth-scale", NORM_SIAMESE, ABLATE_NO_DEPTH_SCALE, 3, 64, 4, 32, 60, 3,
                                   24),
                      SMALL_NORM_BOUND, SMALL_MAX_BOUND);
}

TEST_CASE("siamese --no-ln-in: logits, loss and every gradient match the CPU reference") {
    check_against_cpu(make_problem("siamese-no-ln-in", NORM_SIAMESE, ABLATE_NO_LN_IN, 3, 64, 4, 32, 60, 3, 24),
                      SMALL_NORM_BOUND, SMALL_MAX_BOUND);
}

TEST_CASE("siamese with both ablations: logits, loss and every gradient match the CPU reference") {
    check_against_cpu(make_problem("siamese-both-ablations", NORM_SIAMESE, ABLATE_NO_DEPTH_SCALE | ABLATE_NO_LN_IN, 2,
                                   64, 4, 32, 60, 2, 24),
                      SMALL_NORM_BOUND, SMALL_MAX_BOUND);
}

// The QKV-norm layouts (host/layouts.h; HybridNorm's attention: q, k, v LayerNorm-ed per head, train_gpt2.cu's
// qkv_norm_* kernels): hybrid (residual attention, normed MLP), hybrid-star (a pre block 0, then hybrid's: every
// change of kind once) and siamese-hybrid (siamese_c1 attention with its c1, siamese MLP), with head sizes 48 (two
// channels a lane in the QKV norm's warps), 30 (not a multiple of the 16-byte packs: C = 90) and 16
TEST_CASE("hybrid and hybrid-star: logits, loss and every gradient match the CPU reference") {
    check_against_cpu(make_problem("hybrid", NORM_HYBRID, 0, 3, 96, 2, 32, 60, 2, 20), SMALL_NORM_BOUND,
                      SMALL_MAX_BOUND);
    check_against_cpu(make_problem("hybrid-star", NORM_HYBRID_STAR, 0, 3, 90, 3, 32, 60, 2, 20), SMALL_NORM_BOUND,
                      SMALL_MAX_BOUND);
}

TEST_CASE("siamese-hybrid: logits, loss and every gradient match the CPU reference, with each ablation") {
    check_against_cpu(make_problem("siamese-hybrid", NORM_SIAMESE_HYBRID, 0, 3, 64, 4, 32, 60, 3, 24),
                      SMALL_NORM_BOUND, SMALL_MAX_BOUND);
    check_against_cpu(make_problem("siamese-hybrid-no-depth-scale", NORM_SIAMESE_HYBRID, ABLATE_NO_DEPTH_SCALE, 2, 64,
                                   4, 32, 60, 2, 24),
                      SMALL_NORM_BOUND, SMALL_MAX_BOUND);
    check_against_cpu(make_problem("siamese-hybrid-no-ln-in", NORM_SIAMESE_HYBRID, ABLATE_NO_LN_IN, 2, 64, 4, 32, 60,
                                   2, 24),
                      SMALL_NORM_BOUND, SMALL_MAX_BOUND);
}

// C > 2048: the row kernels' 16-channels-per-thread variants
TEST_CASE("pre, siamese and siamese-hybrid with C > 2048 match the CPU reference") {
    check_against_cpu(make_problem("pre-wide", NORM_PRE, 0, 1, 2112, 2, 16, 60, 2, 8), SMALL_NORM_BOUND,
                      SMALL_MAX_BOUND);
    check_against_cpu(make_problem("siamese-wide", NORM_SIAMESE, 0, 1, 2112, 2, 16, 60, 2, 8), SMALL_NORM_BOUND,
                      SMALL_MAX_BOUND);
    // siamese-hybrid's kernels in the same variants (16 heads of 132: the QKV norm takes heads up to 256)
    check_against_cpu(make_problem("siamese-hybrid-wide", NORM_SIAMESE_HYBRID, 0, 1, 2112, 16, 16, 60, 2, 8),
                      SMALL_NORM_BOUND, SMALL_MAX_BOUND);
}

// Ten AdamW steps of two micro-batches each (loss scaled by 1/2), with weight decay and global-norm clipping (the
// clip is half the first gradient norm, so at least the first step clips), on CPU and GPU side by side.
TEST_CASE("ten AdamW steps with accumulation and clipping give the CPU reference's losses") {
    const int layouts[][2] = {{NORM_PRE, 0},         {NORM_POST, 0},          {NORM_SIAMESE, 0},
                              {NORM_SIAMESE, ABLATE_NO_LN_IN}, {NORM_HYBRID_STAR, 0}, {NORM_SIAMESE_HYBRID, 0},
                              {NORM_PERI, 0},        {NORM_HC, 0}};
    for (const auto& layout : layouts) {
        Problem p = make_problem("steps", layout[0], layout[1], 2, 64, 4, 32, 60, 2, 16);
        Problem p2 = make_problem("steps", layout[0], layout[1], 2, 64, 4, 32, 60, 2, 16, 4242);  // 2nd micro-batch
        const Problem* micro[2] = {&p, &p2};
        cpu::GPT2 ref;
        init_cpu_model(&ref, p.config);
        GPT2 g;
        load_gpu_model(&g, ref);
        cpu::AdamWConfig cpu_opt = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
        AdamWConfig gpu_opt = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
        double clip = 0, worst = 0;
        int clipped = 0;
        char buf[256];
        std::string table = fmt(buf, sizeof(buf), "%s%s: ten AdamW steps\n  step   cpu loss     gpu loss     rel      "
                                "cpu norm   gpu norm\n", LAYOUTS[layout[0]].name, layout[1] ? " --no-ln-in" : "");
        for (int step = 0; step < 10; step++) {
            double cpu_loss = 0, gpu_loss = 0;
            cpu::gpt2_zero_grad(&ref);
            gpt2_zero_grad(&g);
            for (int k = 0; k < 2; k++) {
                cpu::gpt2_forward(&ref, micro[k]->inputs.data(), micro[k]->targets.data(), p.B, p.T);
                cpu::gpt2_backward(&ref, 0.5f);
                cpu_loss += ref.mean_loss / 2;
                gpt2_forward(&g, micro[k]->inputs.data(), micro[k]->targets.data(), p.B, p.T, 0.5f);
                gpt2_backward(&g);
                gpu_loss += g.mean_loss / 2;
            }
            double cpu_norm = cpu::gpt2_grad_norm(&ref), gpu_norm = gpt2_grad_norm(&g);
            if (step == 0) clip = cpu_norm / 2;
            clipped += cpu_norm > clip;
            cpu::gpt2_update(&ref, cpu_opt, cpu_norm > clip ? (float)(clip / cpu_norm) : 1.0f, step + 1);
            gpt2_update(&g, gpu_opt, gpu_norm > clip ? (float)(clip / gpu_norm) : 1.0f, step + 1);
            double rel = std::fabs(gpu_loss - cpu_loss) / cpu_loss;
            keep_worst(&worst, rel);
            keep_worst(&worst, std::fabs(gpu_norm - cpu_norm) / cpu_norm);
            table += fmt(buf, sizeof(buf), "  %4d %12.7f %12.7f %8.1e %10.5f %10.5f\n", step + 1, cpu_loss, gpu_loss,
                         rel, cpu_norm, gpu_norm);
        }
        table += fmt(buf, sizeof(buf), "STEPCHECK %s%s worst_rel=%.2e clipped_steps=%d", LAYOUTS[layout[0]].name,
                     layout[1] ? "-no-ln-in" : "", worst, clipped);
        MESSAGE(table);
        CHECK(clipped >= 1);
        CHECK(worst <= STEPS_BOUND);
        gpt2_free(&g);
        cpu::gpt2_free(&ref);
    }
}

// -r 1 recomputes u (each layout's LayerNorm output) and gelu(fch) in the backward pass from what the forward pass
// kept. The recomputation applies the forward's formulas to the same stored numbers, so the gradients should agree
// with -r 0 up to how the compiler fuses multiply-adds in two different kernels: bound 1e-6 (fp32; bit-identical in
// the emulator). In bf16 with cuBLASLt the forward's GELU (the product's epilogue) reads the product before it is
// rounded to bf16, the recomputation reads the stored, rounded fch: the GELU outputs differ by up to one bf16
// rounding, which moves fcprojw's gradient by ~3e-3 (emulated): bound 1e-2.
#ifdef ENABLE_FP32
static const double RECOMPUTE_BOUND = 1e-6;
#else
static const double RECOMPUTE_BOUND = 1e-2;
#endif
TEST_CASE("-r 1: pre, post and siamese with recomputation match the CPU reference and -r 0") {
    Variant r1 = {1, ATTENTION_MATERIALIZED};
    check_against_cpu(make_problem("pre-r1", NORM_PRE, 0, 2, 136, 4, 32, 60, 3, 20), SMALL_NORM_BOUND,
                      SMALL_MAX_BOUND, r1, RECOMPUTE_BOUND);
    check_against_cpu(make_problem("post-r1", NORM_POST, 0, 2, 144, 3, 40, 60, 2, 33), SMALL_NORM_BOUND,
                      SMALL_MAX_BOUND, r1, RECOMPUTE_BOUND);
    check_against_cpu(make_problem("siamese-r1", NORM_SIAMESE, 0, 2, 192, 6, 32, 60, 3, 24), SMALL_NORM_BOUND,
                      SMALL_MAX_BOUND, r1, RECOMPUTE_BOUND);
    check_against_cpu(make_problem("siamese-no-ln-in-r1", NORM_SIAMESE, ABLATE_NO_LN_IN, 2, 64, 4, 32, 60, 3, 24),
                      SMALL_NORM_BOUND, SMALL_MAX_BOUND, r1, RECOMPUTE_BOUND);
}

// Mix-LN (host/layouts.h): P of the L blocks Post-LN, then Pre-LN; the boundary where the kind changes runs post's
// end and pre's start, and -r 1 recomputes the pre sub-layers' inputs only
static Problem mix_problem(const char* label, int post_blocks, int L) {
    Problem p = make_problem(label, NORM_MIX, 0, L, 136, 4, 32, 60, 3, 20);
    p.config.layout_setting = post_blocks;
    validate_config(p.config);
    return p;
}
TEST_CASE("mix: logits, loss and every gradient match the CPU reference (1 and 2 of 3 blocks Post-LN, -r 1)") {
    check_against_cpu(mix_problem("mix-p1", 1, 3), SMALL_NORM_BOUND, SMALL_MAX_BOUND);
    check_against_cpu(mix_problem("mix-p2", 2, 3), SMALL_NORM_BOUND, SMALL_MAX_BOUND);
    check_against_cpu(mix_problem("mix-p1-r1", 1, 3), SMALL_NORM_BOUND, SMALL_MAX_BOUND,
                      Variant{1, ATTENTION_MATERIALIZED}, RECOMPUTE_BOUND);
}

// Flash attention (attention.cuh) against the CPU reference and against the materialized attention: head sizes 16,
// 34, 48 and 128 (the largest it takes), T not a multiple of the 16-query and 32-key tiles and long enough for
// several tiles of each. The two attentions sum in different orders (online softmax), so in fp32 they differ by
// float32 noise (bound 1e-5 as for the CPU, measured in the emulator below 1e-6); in bf16 by bf16 noise (the
// materialized one rounds the T x T matrix to bf16, flash keeps p in float32): the bf16 bound.
#ifdef ENABLE_FP32
static const double FLASH_BOUND = 1e-5;
#else
static const double FLASH_BOUND = 3e-2;
#endif
// The cases of an attention other than the materialized one (named `name` in the labels), held against the CPU and
// the materialized attention at `bound`: each layout, T not a multiple of the tiles and long enough for several, head
// sizes pre_channels / 4, 48, 16 and 128, and -r 1 (as a long run at large T would use it) at head size 32.
static void check_attention_cases(int attention, const char* name, int pre_channels, double bound) {
    auto label = [&](const char* layout, const char* suffix) { return std::string(layout) + "-" + name + suffix; };
    std::string pre = label("pre", ""), post = label("post", ""), siamese = label("siamese", "");
    std::string hs128 = label("siamese", "-hs128"), r1 = label("siamese", "-r1");
    Variant v = {0, attention};
    check_against_cpu(make_problem(pre.c_str(), NORM_PRE, 0, 2, pre_channels, 4, 80, 60, 2, 70), SMALL_NORM_BOUND,
                      SMALL_MAX_BOUND, v, bound);
    check_against_cpu(make_problem(post.c_str(), NORM_POST, 0, 2, 144, 3, 40, 60, 2, 33), SMALL_NORM_BOUND,
                      SMALL_MAX_BOUND, v, bound);
    check_against_cpu(make_problem(siamese.c_str(), NORM_SIAMESE, 0, 2, 64, 4, 80, 60, 2, 75), SMALL_NORM_BOUND,
                      SMALL_MAX_BOUND, v, bound);
    check_against_cpu(make_problem(hs128.c_str(), NORM_SIAMESE, 0, 1, 256, 2, 40, 60, 2, 37), SMALL_NORM_BOUND,
                      SMALL_MAX_BOUND, v, bound);
    check_against_cpu(make_problem(r1.c_str(), NORM_SIAMESE, 0, 2, 192, 6, 32, 60, 3, 24), SMALL_NORM_BOUND,
                      SMALL_MAX_BOUND, Variant{1, attention}, bound);
}

TEST_CASE("flash attention: pre, post and siamese match the CPU reference and the materialized attention") {
    check_attention_cases(ATTENTION_FLASH, "flash", 136, FLASH_BOUND);  // pre: head size 34
}

// The QKV-norm layouts under -r 1, which recomputes their normalized q, k, v (and, materialized and flash, the
// permute) from the kept product and statistics as well as u and gelu(fch), and with flash attention, which reads
// them as it reads the product (the bias already in): against the CPU and against -r 0 with the materialized
// attention (the -r 1 and flash bounds); flash at T = 70, several tiles of queries and keys
TEST_CASE("QKV-norm layouts with -r 1 and flash attention match the CPU reference and the default") {
    Variant r1 = {1, ATTENTION_MATERIALIZED}, flash = {0, ATTENTION_FLASH}, flash_r1 = {1, ATTENTION_FLASH};
    check_against_cpu(make_problem("hybrid-r1", NORM_HYBRID, 0, 2, 96, 2, 32, 60, 2, 20), SMALL_NORM_BOUND,
                      SMALL_MAX_BOUND, r1, RECOMPUTE_BOUND);
    check_against_cpu(make_problem("hybrid-star-r1", NORM_HYBRID_STAR, 0, 2, 90, 3, 32, 60, 2, 20), SMALL_NORM_BOUND,
                      SMALL_MAX_BOUND, r1, RECOMPUTE_BOUND);
    check_against_cpu(make_problem("siamese-hybrid-r1", NORM_SIAMESE_HYBRID, 0, 2, 64, 4, 32, 60, 3, 24),
                      SMALL_NORM_BOUND, SMALL_MAX_BOUND, r1, RECOMPUTE_BOUND);
    check_against_cpu(make_problem("hybrid-flash", NORM_HYBRID, 0, 2, 64, 2, 80, 60, 2, 70), SMALL_NORM_BOUND,
                      SMALL_MAX_BOUND, flash, FLASH_BOUND);
    check_against_cpu(make_problem("siamese-hybrid-flash-r1", NORM_SIAMESE_HYBRID, 0, 2, 96, 2, 40, 60, 2, 33),
                      SMALL_NORM_BOUND, SMALL_MAX_BOUND, flash_r1, FLASH_BOUND);
    check_against_cpu(make_problem("hybrid-star-flash-r1", NORM_HYBRID_STAR, 0, 2, 90, 3, 40, 60, 2, 33),
                      SMALL_NORM_BOUND, SMALL_MAX_BOUND, flash_r1, FLASH_BOUND);
}

// The two baselines: pre-qkvnorm (pre's boundaries around the QKV-norm attention) and peri (Peri-LN: pre's start,
// and an end that LayerNorms z before the add, keeping z for LN_out's backward; at the head peri's end, then LN_f).
// Each at head size 48 or 34 and at C = 90 (no packs of 8), with -r 1 (u recomputed from the kept statistics;
// pre-qkvnorm's q, k, v too) and with flash attention, against the CPU and the default
TEST_CASE("pre-qkvnorm and peri: logits, loss and every gradient match the CPU reference, with -r 1 and flash") {
    Variant r1 = {1, ATTENTION_MATERIALIZED}, flash = {0, ATTENTION_FLASH}, flash_r1 = {1, ATTENTION_FLASH};
    check_against_cpu(make_problem("pre-qkvnorm", NORM_PRE_QKVNORM, 0, 3, 96, 2, 32, 60, 2, 20), SMALL_NORM_BOUND,
                      SMALL_MAX_BOUND);
    check_against_cpu(make_problem("peri", NORM_PERI, 0, 3, 136, 4, 32, 60, 3, 20), SMALL_NORM_BOUND,
                      SMALL_MAX_BOUND);
    check_against_cpu(make_problem("peri-c90", NORM_PERI, 0, 2, 90, 3, 32, 60, 2, 24), SMALL_NORM_BOUND,
                      SMALL_MAX_BOUND);
    check_against_cpu(make_problem("pre-qkvnorm-r1", NORM_PRE_QKVNORM, 0, 2, 90, 3, 32, 60, 2, 20), SMALL_NORM_BOUND,
                      SMALL_MAX_BOUND, r1, RECOMPUTE_BOUND);
    check_against_cpu(make_problem("peri-r1", NORM_PERI, 0, 2, 136, 4, 32, 60, 3, 20), SMALL_NORM_BOUND,
                      SMALL_MAX_BOUND, r1, RECOMPUTE_BOUND);
    check_against_cpu(make_problem("pre-qkvnorm-flash-r1", NORM_PRE_QKVNORM, 0, 2, 64, 2, 80, 60, 2, 70),
                      SMALL_NORM_BOUND, SMALL_MAX_BOUND, flash_r1, FLASH_BOUND);
    check_against_cpu(make_problem("peri-flash", NORM_PERI, 0, 2, 64, 4, 80, 60, 2, 75), SMALL_NORM_BOUND,
                      SMALL_MAX_BOUND, flash, FLASH_BOUND);
}

// Hyper-Connections (hc.cuh: one kernel a boundary, forward and backward; the head's LN_f(x + y) in the last): the
// per-token weights A = S + s tanh(LN_h(x, y) W) (every hc tensor moved off its init by init_cpu_model, so that
// the tanh's argument is live, S off [e | I | 1] and the two streams apart), F's input LN(A00 x + A10 y), the mixed
// streams and z's share in them. At head size 48 (C = 96), at C = 90 (no packs of 8, odd rows in the blocks), with
// -r 1 (u recomputed from the streams, A and LN's statistics) and flash attention, against the CPU and the default
TEST_CASE("hc: logits, loss and every gradient match the CPU reference, with -r 1 and flash") {
    Variant r1 = {1, ATTENTION_MATERIALIZED}, flash = {0, ATTENTION_FLASH}, flash_r1 = {1, ATTENTION_FLASH};
    check_against_cpu(make_problem("hc", NORM_HC, 0, 3, 96, 2, 32, 60, 2, 20), SMALL_NORM_BOUND, SMALL_MAX_BOUND);
    check_against_cpu(make_problem("hc-c90", NORM_HC, 0, 2, 90, 3, 32, 60, 2, 24), SMALL_NORM_BOUND,
                      SMALL_MAX_BOUND);
    check_against_cpu(make_problem("hc-r1", NORM_HC, 0, 2, 136, 4, 32, 60, 3, 20), SMALL_NORM_BOUND,
                      SMALL_MAX_BOUND, r1, RECOMPUTE_BOUND);
    check_against_cpu(make_problem("hc-flash", NORM_HC, 0, 2, 64, 4, 80, 60, 2, 75), SMALL_NORM_BOUND,
                      SMALL_MAX_BOUND, flash, FLASH_BOUND);
    check_against_cpu(make_problem("hc-flash-r1", NORM_HC, 0, 2, 90, 3, 40, 60, 2, 33), SMALL_NORM_BOUND,
                      SMALL_MAX_BOUND, flash_r1, FLASH_BOUND);
}

// Long rows: at T = 264 (33 packs of 8 bf16 keys, 66 of 4 floats) a lane of the softmax kernels walks several packs
// and flash attention several tiles of 64, the last one partial; T = 300 is a multiple of neither 8 nor 4, so the
// softmax goes key by key (the flash attention held against the CPU, the materialized against the flash). The other
// cases have T <= 75: one pack a lane at most.
TEST_CASE("long rows: attention at T = 264 and T = 300 matches the CPU reference, materialized and flash") {
    check_against_cpu(make_problem("pre-t264", NORM_PRE, 0, 1, 64, 2, 300, 60, 1, 264), SMALL_NORM_BOUND,
                      SMALL_MAX_BOUND);  // materialized; its (1, 261) forward pass goes key by key
    check_against_cpu(make_problem("siamese-t300", NORM_SIAMESE, 0, 1, 64, 2, 300, 60, 1, 300), SMALL_NORM_BOUND,
                      SMALL_MAX_BOUND, Variant{0, ATTENTION_FLASH}, FLASH_BOUND);
}

// C = 90, not a multiple of the row kernels' 16-byte packs (8 bf16, 4 fp32): the element-by-element path; in bf16
// also matrices and biases that do not start 16-byte aligned, which cuBLASLt's epilogues are not given (the product
// and a separate kernel instead); head size 30, which flash attention runs on the portable kernels
TEST_CASE("C not a multiple of 8: pre and siamese match the CPU reference") {
    check_against_cpu(make_problem("pre-c90", NORM_PRE, 0, 2, 90, 3, 32, 60, 3, 20), SMALL_NORM_BOUND,
                      SMALL_MAX_BOUND);
    check_against_cpu(make_problem("siamese-c90", NORM_SIAMESE, 0, 2, 90, 3, 32, 60, 2, 24), SMALL_NORM_BOUND,
                      SMALL_MAX_BOUND, Variant{1, ATTENTION_FLASH}, FLASH_BOUND);
}

#if FLASH_TENSOR_CORES
// The tensor-core flash attention (bf16 build, head sizes 16, 32, 48, 64, 128) against the portable one on the same
// bf16 q, k, v and dout: out, lse, dq, dk, dv. Both compute in float32 but the tensor-core kernels round p and ds
// to bf16 (2^-9 relative on average) before their products, so they differ by ~2e-3; bound 1e-2. A wrong index or
// a missing scale is O(1). T = 150: three tiles of 64 keys, the last one ragged.
TEST_CASE("tensor-core flash attention matches the portable kernels") {
    for (int hs : {16, 32, 48, 64, 128}) {
        int B = 2, NH = 2, T = 150, C = NH * hs;
        size_t n = (size_t)B * NH * T * hs, rows = (size_t)B * NH * T;
        uint64_t rng = 1000 + hs;
        auto randoms = [&](size_t count, double scale) {
            std::vector<floatX> v(count);
            for (auto& x : v) x = (floatX)(float)(scale * random_normal(&rng));
            return v;
        };
        std::vector<floatX> hq = randoms(n, 1.0), hk = randoms(n, 1.0), hv = randoms(n, 1.0), hd = randoms(n, 1.0);
        floatX *q = cuda_malloc<floatX>(n, "q"), *k = cuda_malloc<floatX>(n, "k"), *v = cuda_malloc<floatX>(n, "v");
        floatX* dout = cuda_malloc<floatX>(n, "dout");
        cudaCheck(cudaMemcpy(q, hq.data(), n * sizeof(floatX), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(k, hk.data(), n * sizeof(floatX), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(v, hv.data(), n * sizeof(floatX), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(dout, hd.data(), n * sizeof(floatX), cudaMemcpyHostToDevice));
        std::vector<float> results[2][5];  // [portable, tensor cores][out, lse, dq, dk, dv]
        for (int tc = 0; tc < 2; tc++) {
            flash_force_portable = !tc;
            floatX *out = cuda_malloc<floatX>(n, "out"), *dq = cuda_malloc<floatX>(n, "dq");
            floatX *dk = cuda_malloc<floatX>(n, "dk"), *dv = cuda_malloc<floatX>(n, "dv");
            float *lse = cuda_malloc<float>(rows, "lse"), *D = cuda_malloc<float>(rows, "D");
            flash_attention_forward(out, lse, q, k, v, B, T, C, NH);
            flash_attention_backward(dq, dk, dv, D, dout, out, q, k, v, lse, B, T, C, NH);
            results[tc][0] = as_float(download(out, n));
            results[tc][1] = download(lse, rows);
            results[tc][2] = as_float(download(dq, n));
            results[tc][3] = as_float(download(dk, n));
            results[tc][4] = as_float(download(dv, n));
            for (void* p : {(void*)out, (void*)dq, (void*)dk, (void*)dv, (void*)lse, (void*)D}) cudaCheck(cudaFree(p));
        }
        flash_force_portable = 0;
        const char* names[5] = {"out", "lse", "dq", "dk", "dv"};
        char buf[256];
        // where the device's shared memory cannot hold the tensor-core kernels (head size 128 on sm_86/89), the
        // attention must have taken the portable kernels: the same bits as the forced portable run
        bool fits = true;
        with_tc_head_size(hs, [&](auto dn) { return fits = tc_fits_device<decltype(dn)::value>(); });
        if (!fits) {
            for (int i = 0; i < 5; i++)
                CHECK_MESSAGE(results[1][i] == results[0][i], "hs=" << hs << " " << names[i]
                                                                    << ": the fallback to the portable kernels differs");
            MESSAGE(std::string(fmt(buf, sizeof(buf), "TCFALLBACK hs=%d: the tensor-core kernels need more shared "
                                    "memory than %s allows (%zu bytes): the portable kernels ran, bit for bit",
                                    hs, gpu.name, gpu.smem_optin)));
            for (void* p : {(void*)q, (void*)k, (void*)v, (void*)dout}) cudaCheck(cudaFree(p));
            continue;
        }
        std::string line = fmt(buf, sizeof(buf), "TCCHECK hs=%d:", hs);
        for (int i = 0; i < 5; i++) {
            Diff d = compare(results[1][i].data(), results[0][i].data(), results[0][i].size());
            line += fmt(buf, sizeof(buf), " %s %.1e", names[i], d.norm_rel);
            CHECK(d.norm_rel <= 1e-2);
        }
        MESSAGE(line);
        for (void* p : {(void*)q, (void*)k, (void*)v, (void*)dout}) cudaCheck(cudaFree(p));
    }
}
#endif

#if HAVE_CUDNN_ATTENTION
// cuDNN's fused attention (attention_cudnn.cpp) against the CPU reference and against the materialized attention:
// flash's cases (pre at head size 32: cuDNN takes multiples of 8) and T = 300; each case also runs a (1, T - 3)
// forward pass, a second shape and so a second cached graph; then sampling's passes at lengths 1, 2 and 3. cuDNN
// sums in float32 and rounds p to bf16 for its product with v (as FlashAttention and our tensor-core kernels do),
// the materialized attention stores the whole softmax in bf16: bf16 noise either way, so flash's bound (3e-2). The
// bit-for-bit repeat of the backward pass holds only with cuDNN's deterministic backward algorithm, which
// attention_cudnn.cpp asks for.
TEST_CASE("cuDNN attention: pre, post, siamese, QKV-norm layouts match the CPU and the materialized attention") {
    check_attention_cases(ATTENTION_CUDNN, "cudnn", 128, FLASH_BOUND);
    check_against_cpu(make_problem("siamese-cudnn-t300", NORM_SIAMESE, 0, 1, 64, 2, 300, 60, 1, 300),
                      SMALL_NORM_BOUND, SMALL_MAX_BOUND, Variant{0, ATTENTION_CUDNN}, FLASH_BOUND);
    // the QKV-norm layouts: cuDNN reads the normalized rows (its kept qkvr) as it reads the product's; under -r 1
    // they are recomputed into the one layer's rows before its backward pass (head sizes 32 and 16)
    Variant cudnn = {0, ATTENTION_CUDNN}, cudnn_r1 = {1, ATTENTION_CUDNN};
    check_against_cpu(make_problem("hybrid-cudnn", NORM_HYBRID, 0, 2, 64, 2, 80, 60, 2, 70), SMALL_NORM_BOUND,
                      SMALL_MAX_BOUND, cudnn, FLASH_BOUND);
    check_against_cpu(make_problem("hybrid-star-cudnn-r1", NORM_HYBRID_STAR, 0, 2, 64, 4, 40, 60, 2, 33),
                      SMALL_NORM_BOUND, SMALL_MAX_BOUND, cudnn_r1, FLASH_BOUND);
    check_against_cpu(make_problem("siamese-hybrid-cudnn", NORM_SIAMESE_HYBRID, 0, 2, 64, 2, 80, 60, 2, 75),
                      SMALL_NORM_BOUND, SMALL_MAX_BOUND, cudnn, FLASH_BOUND);
    check_against_cpu(make_problem("siamese-hybrid-cudnn-r1", NORM_SIAMESE_HYBRID, 0, 2, 64, 4, 32, 60, 3, 24),
                      SMALL_NORM_BOUND, SMALL_MAX_BOUND, cudnn_r1, FLASH_BOUND);
    // the two baselines: pre-qkvnorm's normalized rows as the QKV-norm layouts', Peri-LN's boundaries around it
    check_against_cpu(make_problem("pre-qkvnorm-cudnn-r1", NORM_PRE_QKVNORM, 0, 2, 64, 2, 80, 60, 2, 70),
                      SMALL_NORM_BOUND, SMALL_MAX_BOUND, cudnn_r1, FLASH_BOUND);
    check_against_cpu(make_problem("peri-cudnn", NORM_PERI, 0, 2, 64, 4, 40, 60, 2, 33), SMALL_NORM_BOUND,
                      SMALL_MAX_BOUND, cudnn, FLASH_BOUND);

    // sampling's forward passes: one sequence at lengths 1, 2, 3 (a graph each), the logits against the CPU's
    Problem p = make_problem("pre-cudnn-sampling", NORM_PRE, 0, 2, 64, 2, 32, 60, 1, 8);
    cpu::GPT2 ref;
    init_cpu_model(&ref, p.config);
    GPT2 g;
    load_gpu_model(&g, ref);
    g.attention = ATTENTION_CUDNN;
    int NH = p.config.num_heads, hs = p.config.channels / NH;
    if (cudnn_takes(1, p.T, NH, hs, false)) {
        cpu::gpt2_forward(&ref, p.inputs.data(), nullptr, 1, p.T);  // both allocate for (1, 8)
        gpt2_forward(&g, p.inputs.data(), nullptr, 1, p.T);
        for (int n = 1; n <= 3; n++)
            if (cudnn_takes(1, n, NH, hs, false)) check_sequence_logits(&ref, &g, p.inputs.data(), n, SMALL_NORM_BOUND);
    }
    gpt2_free(&g);
    cpu::gpt2_free(&ref);
    CudnnAttentionStats st = cudnn_attention_stats();
    MESSAGE("CUDNNGRAPHS cuDNN " << st.version << ": " << st.graphs << " graphs built in " << st.build_seconds
                                 << " s, workspace " << st.workspace_bytes << " bytes");
}

// cuDNN's attention against the portable flash kernels (attention.cuh, float32 throughout) on the same bf16 q, k, v
// (in qkv's rows for cuDNN, permuted for flash) and dout: out, lse, dq, dk, dv. cuDNN rounds p (and ds) to bf16 for
// its products (2^-9 relative on average), the portable kernels do not: they differ by ~2e-3, as the tensor-core
// kernels do; bound 1e-2. lse is a float32 log of float32 sums in both (the scores are exact products of bf16
// numbers, summed in float32): bound 1e-4 (a wrong scale or a log base other than e is off by 1e-1 or more).
// T = 150: not a multiple of 64 or 128, cuDNN's tiles.
TEST_CASE("cuDNN attention matches the portable flash kernels") {
    for (int hs : {16, 32, 64, 128}) {
        int B = 2, NH = 2, T = 150, C = NH * hs;
        if (!cudnn_takes(B, T, NH, hs, true)) continue;  // recorded: the other head sizes go on
        size_t n = (size_t)B * T * C, rows = (size_t)B * NH * T;
        uint64_t rng = 2000 + hs;
        std::vector<floatX> hqkv(3 * n), hdout(n), zero_bias(3 * C, (floatX)0.0f);
        for (auto& x : hqkv) x = (floatX)(float)random_normal(&rng);
        for (auto& x : hdout) x = (floatX)(float)random_normal(&rng);
        floatX *qkv = cuda_malloc<floatX>(3 * n, "qkv"), *dout = cuda_malloc<floatX>(n, "dout");
        floatX* bias = cuda_malloc<floatX>(3 * C, "bias");
        cudaCheck(cudaMemcpy(qkv, hqkv.data(), 3 * n * sizeof(floatX), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(dout, hdout.data(), n * sizeof(floatX), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(bias, zero_bias.data(), 3 * C * sizeof(floatX), cudaMemcpyHostToDevice));
        // results[cuDNN, flash] = out, lse, dqkv (B, T, 3C)
        std::vector<float> out[2], lse[2], dqkv[2];
        for (int flash = 0; flash < 2; flash++) {
            floatX *o = cuda_malloc<floatX>(n, "out"), *d = cuda_malloc<floatX>(3 * n, "dqkv");
            float* l = cuda_malloc<float>(rows, "lse");
            if (!flash) {
                cudnn_attention_forward(o, l, qkv, B, T, NH, hs);
                cudnn_attention_backward(d, dout, qkv, o, l, B, T, NH, hs);
            } else {
                flash_force_portable = 1;
                floatX* heads = cuda_malloc<floatX>(6 * n, "q, k, v, dq, dk, dv");
                float* D = cuda_malloc<float>(rows, "D");
                floatX *q = heads, *k = q + n, *v = k + n, *dq = v + n, *dk = dq + n, *dv = dk + n;
                permute_qkv(q, k, v, qkv, bias, B, T, NH, hs);
                flash_attention_forward(o, l, q, k, v, B, T, C, NH);
                flash_attention_backward(dq, dk, dv, D, dout, o, q, k, v, l, B, T, C, NH);
                permute_qkv_backward(d, dq, dk, dv, B, T, NH, hs);
                flash_force_portable = 0;
                for (void* p : {(void*)heads, (void*)D}) cudaCheck(cudaFree(p));
            }
            out[flash] = as_float(download(o, n));
            lse[flash] = download(l, rows);
            dqkv[flash] = as_float(download(d, 3 * n));
            for (void* p : {(void*)o, (void*)d, (void*)l}) cudaCheck(cudaFree(p));
        }
        // dq, dk, dv: the thirds of each dqkv row
        std::vector<float> parts[2][3];
        for (int r = 0; r < 2; r++)
            for (size_t row = 0; row < (size_t)B * T; row++)
                for (int part = 0; part < 3; part++)
                    parts[r][part].insert(parts[r][part].end(), dqkv[r].begin() + (row * 3 + part) * C,
                                          dqkv[r].begin() + (row * 3 + part + 1) * C);
        Diff d_out = compare(out[0].data(), out[1].data(), n), d_lse = compare(lse[0].data(), lse[1].data(), rows);
        char buf[256];
        std::string line = fmt(buf, sizeof(buf), "CUDNNCHECK hs=%d: out %.1e lse %.1e", hs, d_out.norm_rel,
                               d_lse.norm_rel);
        CHECK(d_out.norm_rel <= 1e-2);
        CHECK(d_lse.norm_rel <= 1e-4);
        const char* names[3] = {"dq", "dk", "dv"};
        for (int part = 0; part < 3; part++) {
            Diff d = compare(parts[0][part].data(), parts[1][part].data(), n);
            line += fmt(buf, sizeof(buf), " %s %.1e", names[part], d.norm_rel);
            CHECK(d.norm_rel <= 1e-2);
        }
        MESSAGE(line);
        for (void* p : {(void*)qkv, (void*)dout, (void*)bias}) cudaCheck(cudaFree(p));
    }
}
#endif

// The classifier's loss from the log-sum-exp: loss = (max - l_target) + log sum_j exp(l_j - max), and its gradient
// (p_j - [j = target]) dloss with p_j = exp((l_j - max) - log sum), never -log p. Row 0's target logit lies 120 below
// the others: p_target = e^-120 / 60 ~ 1e-54, below float32's smallest number (1.4e-45), so -log p would be
// -log 0 = inf, a divergence that did not happen, where the loss is 124.1. Row 1's lies 90 below (p ~ 1e-41, a
// float32 subnormal of 13 bits); row 2 is random. The padded logits V..Vp-1 hold 50 (were they counted, every loss
// would be off by ~50) and must get gradient 0. Against float64 on the same stored logits, with Vp a multiple of the
// 16-byte pack and not (the logit-by-logit path): the loss within 1e-6 relative (a few float32 roundings of numbers
// up to ~130); each gradient entry within 1e-6 of the row's largest in fp32 (the exponent's two roundings move p by
// ~3e-7 relative), in bf16 within 4e-3 (the stored gradient is rounded to bf16 once: 2^-9 relative, and the
// float32 share). Validation's pass (dloss 0) must leave the logits as they were.
TEST_CASE("classifier: the loss and its gradient from the log-sum-exp, finite where p underflows") {
    const int V = 60, N = 3;
    const double grad_bound = FLOATX_IS_FLOAT ? 1e-6 : 4e-3;
    for (int Vp : {64, 63}) {
        std::vector<floatX> logits((size_t)N * Vp, (floatX)50.0f);
        std::vector<int> targets = {7, 31, 12};
        uint64_t rng = 77;
        for (int n = 0; n < N; n++)
            for (int j = 0; j < V; j++) {
                double l = n < 2 ? random_uniform(&rng) : 3.0 * random_normal(&rng);
                if (j == targets[n] && n < 2) l = n == 0 ? -120.0 : -90.0;
                logits[(size_t)n * Vp + j] = (floatX)(float)l;
            }
        // float64 on the stored logits: the losses and the gradient with dloss = 1/N
        const double dloss = 1.0 / N;
        std::vector<double> want_loss(N), want_grad((size_t)N * Vp, 0.0);
        for (int n = 0; n < N; n++) {
            const floatX* l = logits.data() + (size_t)n * Vp;
            double maxv = -INFINITY, sum = 0;
            for (int j = 0; j < V; j++) maxv = std::max(maxv, (double)(float)l[j]);
            for (int j = 0; j < V; j++) sum += std::exp((double)(float)l[j] - maxv);
            want_loss[n] = maxv + std::log(sum) - (double)(float)l[targets[n]];
            for (int j = 0; j < V; j++)
                want_grad[(size_t)n * Vp + j] =
                    (std::exp((double)(float)l[j] - maxv) / sum - (j == targets[n] ? 1.0 : 0.0)) * dloss;
        }
        floatX* d_logits = cuda_malloc<floatX>(logits.size(), "logits");
        int* d_targets = cuda_malloc<int>(N, "targets");
        float* d_losses = cuda_malloc<float>(N, "losses");
        cudaCheck(cudaMemcpy(d_targets, targets.data(), N * sizeof(int), cudaMemcpyHostToDevice));
        for (int training = 0; training < 2; training++) {
            cudaCheck(cudaMemcpy(d_logits, logits.data(), logits.size() * sizeof(floatX), cudaMemcpyHostToDevice));
            classifier(d_logits, d_losses, d_targets, N, V, Vp, training ? (float)dloss : 0.0f);
            std::vector<float> losses = download(d_losses, N);
            std::vector<floatX> out = download(d_logits, logits.size());
            char buf[256];
            std::string line = fmt(buf, sizeof(buf), "LSECHECK Vp=%d %s:", Vp, training ? "training" : "validation");
            for (int n = 0; n < N; n++) {
                double rel = std::fabs(losses[n] - want_loss[n]) / want_loss[n];
                line += fmt(buf, sizeof(buf), " loss %.6f (want %.6f, rel %.1e)", (double)losses[n], want_loss[n],
                            rel);
                CHECK_MESSAGE(std::isfinite(losses[n]), "row " << n << ": the loss is " << losses[n]);
                CHECK_MESSAGE(rel <= 1e-6, "row " << n << ": loss " << losses[n] << ", want " << want_loss[n]);
            }
            if (training) {
                double worst = 0, padded = 0;
                for (int n = 0; n < N; n++) {
                    double row_max = 0, d = 0;
                    for (int j = 0; j < V; j++) row_max = std::max(row_max, std::fabs(want_grad[(size_t)n * Vp + j]));
                    for (int j = 0; j < V; j++) {
                        size_t i = (size_t)n * Vp + j;
                        keep_worst(&d, std::fabs((double)(float)out[i] - want_grad[i]));
                    }
                    keep_worst(&worst, d / row_max);
                    for (int j = V; j < Vp; j++) padded = std::max(padded, std::fabs((double)(float)out[(size_t)n * Vp + j]));
                }
                line += fmt(buf, sizeof(buf), "; gradient max-rel %.1e (bound %.0e)", worst, grad_bound);
                CHECK(worst <= grad_bound);
                CHECK_MESSAGE(padded == 0.0, "a padded logit's gradient is " << padded);
            } else {
                CHECK_MESSAGE(memcmp(out.data(), logits.data(), logits.size() * sizeof(floatX)) == 0,
                              "validation's pass (dloss 0) changed the logits");
            }
            MESSAGE(line);
        }
        for (void* p : {(void*)d_logits, (void*)d_targets, (void*)d_losses}) cudaCheck(cudaFree(p));
    }
}

#if USE_CUBLASLT
// cuBLASLt's epilogues (bf16): switched off (TRAIN_GPT2_EPILOGUES=0, which sets gpu.no_epilogues) and, on the
// emulator, with cuBLASLt failing as it may on a GPU (tools/cuda_emulator/cublasLt.h: a heuristic returning
// CUBLAS_STATUS_INTERNAL_ERROR or NOT_SUPPORTED, finding none, or one it cannot run; a product that does not launch):
// every product that had an epilogue must run as the plain product and the separate bias/GELU kernels, never stop.
// Every way without the epilogues is the same code, so the same bits; against the epilogue path the gradients differ
// by one bf16 rounding: the epilogue adds the bias and applies the GELU to the float32 accumulator before it rounds
// once, the kernels read the product already rounded to bf16 (as -r 1's recomputed GELU does: emulated 3e-3);
// bound 1e-2, norm-wise per tensor. Then the plain path against the CPU reference at the usual bounds.
TEST_CASE("cuBLASLt: without its epilogues (switched off, or no usable algorithm) the same gradients") {
    Problem p = make_problem("siamese-no-epilogues", NORM_SIAMESE, 0, 2, 64, 4, 32, 60, 2, 24);
    cpu::GPT2 ref;
    init_cpu_model(&ref, p.config);
    GPT2 g;
    load_gpu_model(&g, ref);
    bool switched_off = gpu.no_epilogues;  // as the environment set it (TRAIN_GPT2_EPILOGUES); restored at the end
    gpu.no_epilogues = false;
    long long products0 = gpu.lt_products, fallbacks0 = gpu.lt_fallbacks;
    std::vector<float> with_epilogues = gpu_gradients(&g, p);
    long long with_products = gpu.lt_products - products0;
    char buf[256];
    MESSAGE(std::string(fmt(buf, sizeof(buf), "LTCHECK %lld products of one step ran with a cuBLASLt epilogue, %lld "
                            "fell back (cuBLASLt had no usable algorithm)", with_products,
                            gpu.lt_fallbacks - fallbacks0)));
#ifdef CUDA_EMULATOR
    CHECK(with_products > 0);  // the emulated cuBLASLt has every algorithm: the comparison below means something
#endif
    struct Way {
        const char* name;
        const char* env;    // the emulated cuBLASLt's fault (tools/cuda_emulator/cublasLt.h), or null
        const char* value;
    };
    std::vector<Way> ways = {{"switched off (gpu.no_epilogues: TRAIN_GPT2_EPILOGUES=0)", nullptr, nullptr}};
#ifdef CUDA_EMULATOR
    ways.push_back({"heuristic returns CUBLAS_STATUS_INTERNAL_ERROR", "EMU_LT_HEURISTIC", "14"});
    ways.push_back({"heuristic returns CUBLAS_STATUS_NOT_SUPPORTED", "EMU_LT_HEURISTIC", "15"});
    ways.push_back({"heuristic finds no algorithm", "EMU_LT_HEURISTIC", "none"});
    ways.push_back({"heuristic's algorithm not usable (state)", "EMU_LT_HEURISTIC", "state"});
    ways.push_back({"cublasLtMatmul returns CUBLAS_STATUS_EXECUTION_FAILED", "EMU_LT_MATMUL", "13"});
#endif
    std::vector<float> plain;
    for (const Way& w : ways) {
        long long products = gpu.lt_products, fallbacks = gpu.lt_fallbacks;
        if (w.env) setenv(w.env, w.value, 1);
        else gpu.no_epilogues = true;
        std::vector<float> grads = gpu_gradients(&g, p);
        if (w.env) unsetenv(w.env);
        else gpu.no_epilogues = false;
        double worst = 0;
        std::string worst_name = "-";
        for (const TensorInfo& t : g.tensors) {
            Diff d = compare(grads.data() + t.offset, with_epilogues.data() + t.offset, t.size);
            if (!(d.norm_rel <= worst)) worst = d.norm_rel, worst_name = t.name;
        }
        MESSAGE(std::string(fmt(buf, sizeof(buf), "LTCHECK %s: %lld products with an epilogue, %lld fell back; "
                                "against the epilogues norm_rel=%.2e (%s)", w.name, gpu.lt_products - products,
                                gpu.lt_fallbacks - fallbacks, worst, worst_name.c_str())));
        CHECK_MESSAGE(gpu.lt_products == products, w.name << ": a product still ran with its epilogue");
        if (w.env) CHECK_MESSAGE(gpu.lt_fallbacks - fallbacks == with_products, w.name << ": not every product fell back");
        CHECK(worst <= 1e-2);
        if (plain.empty()) plain = grads;
        else CHECK_MESSAGE(memcmp(grads.data(), plain.data(), grads.size() * sizeof(float)) == 0,
                           w.name << ": not the same bits as with the epilogues switched off");
    }
    gpt2_free(&g);
    cpu::gpt2_free(&ref);
    gpu.no_epilogues = true;  // the plain path against the CPU reference
    check_against_cpu(p, SMALL_NORM_BOUND, SMALL_MAX_BOUND);
    gpu.no_epilogues = switched_off;
}
#endif

// GPT-2 small's shape: 12 layers, 768 channels, 12 heads, T 256, B 2, GPT-2's vocabulary (padded to 50304)
TEST_CASE("siamese at GPT-2 small's shape matches the CPU reference") {
    check_against_cpu(make_problem("siamese-d12", NORM_SIAMESE, 0, 12, 768, 12, 1024, GPT2_VOCAB, 2, 256),
                      D12_NORM_BOUND, D12_MAX_BOUND);
}

TEST_CASE("pre at GPT-2 small's shape matches the CPU reference") {
    check_against_cpu(make_problem("pre-d12", NORM_PRE, 0, 12, 768, 12, 1024, GPT2_VOCAB, 2, 256), D12_NORM_BOUND,
                      D12_MAX_BOUND);
}

TEST_CASE("post at GPT-2 small's shape matches the CPU reference") {
    check_against_cpu(make_problem("post-d12", NORM_POST, 0, 12, 768, 12, 1024, GPT2_VOCAB, 2, 256), D12_NORM_BOUND,
                      D12_MAX_BOUND);
}

int main(int argc, char** argv) {
    const char* filter = nullptr;  // the test cases a run without -tc runs (null: all)
#if HAVE_CUDNN_ATTENTION
    filter = "cuDNN*";  // tests/test_gpu_cudnn: its own cases, unless the command line picks others
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i] + strspn(argv[i], "-");
        if (!strncmp(a, "dt-", 3)) a += 3;
        for (const char* name : {"tc", "test-case"}) {  // -tc=..., --test-case=..., -dt-tc=... (not -tce)
            size_t n = strlen(name);
            if (!strncmp(a, name, n) && (a[n] == '=' || a[n] == 0)) filter = nullptr;
        }
    }
#endif
    int devices = 0;
    cudaError_t err = cudaGetDeviceCount(&devices);
    if (err != cudaSuccess || devices == 0) {
        // count the test cases without running them, then report them all as skipped
        const char* count_args[] = {argv[0], "-dt-count"};
        doctest::Context counter(2, count_args);
        if (filter) counter.setOption("test-case", filter);
        std::ostringstream out;
        counter.setCout(&out);
        counter.run();
        std::string text = out.str();
        size_t at = text.find("filters: ");
        int cases = at == std::string::npos ? 0 : atoi(text.c_str() + at + 9);
        printf("SKIPPED: no CUDA device (%s); these tests run where a GPU is present\n",
               err != cudaSuccess ? cudaGetErrorString(err) : "cudaGetDeviceCount returned 0");
        printf("0 passed, 0 failed, %d skipped\n", cases);
        return 0;
    }
    gpu_init(0);  // float32 matrix products, no TF32
    doctest::Context context;
    if (filter) context.setOption("test-case", filter);
    context.applyCommandLine(argc, argv);
    int rc = context.run();
#if HAVE_CUDNN_ATTENTION
    if (!cudnn_taken.empty() || !cudnn_refused.empty()) {
        printf("CUDNNSHAPES cuDNN took %zu shape(s) and refused %zu%s\n", cudnn_taken.size(), cudnn_refused.size(),
               cudnn_refused.empty() ? "" : " (left out of the checks above; each below)");
        for (const std::string& r : cudnn_refused) printf("CUDNNREFUSED %s\n", r.c_str());
        if (cudnn_taken.empty() && !rc) {
            printf("error: cuDNN refused every shape: nothing about its attention was checked\n");
            rc = 1;
        }
    }
#endif
    return rc;
}
