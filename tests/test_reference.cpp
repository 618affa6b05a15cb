// Invariants of the float32 CPU reference: causality, checkpoint contracts and round trips, the padded vocabulary,
// AdamW's decay rules, gradient accumulation, determinism across thread counts, and the learning-rate schedule.
// (Gradients themselves are proven in test_gradients.cpp by finite differences and in torch_check.py by PyTorch.)
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "doctest.h"
#define REFERENCE_CPU_NO_MAIN
#include "../reference_cpu.cpp"

#include <set>

static GPT2Config tiny_config(int norm, int ablations = 0, int V = 60, int setting = 0) {
    return make_config(3, 32, 4, 16, V, norm, ablations, setting);
}

static std::vector<int> random_tokens(int n, int V, uint64_t seed) {
    std::vector<int> t(n);
    for (int i = 0; i < n; i++) t[i] = (int)(random_uniform(&seed) * V);
    return t;
}

// moves every parameter off its initial value so that no term of the model vanishes (gains 1, biases 0 at init)
static void perturb(GPT2* m, uint64_t seed) {
    for (size_t i = 0; i < m->num_parameters; i++) m->params_memory[i] += (real)(0.05 * random_normal(&seed));
    const GPT2Config& c = m->config;
    for (size_t i = (size_t)c.vocab_size * c.channels; i < (size_t)c.padded_vocab_size * c.channels; i++)
        m->params.wte[i] = 0;
}

// {layout, ablations, setting}: every layout, the ablations, Mix-LN with 1 and 2 of the 3 blocks Post-LN
static const int CASES[][3] = {{NORM_PRE, 0, 0},     {NORM_POST, 0, 0},     {NORM_SIAMESE, 0, 0}, {NORM_SIAMESE, 1, 0},
                               {NORM_SIAMESE, 2, 0}, {NORM_MIX, 0, 1},      {NORM_MIX, 0, 2},     {NORM_DEEPNORM, 0, 0},
                               {NORM_HYBRID, 0, 0},  {NORM_HYBRID_STAR, 0, 0}, {NORM_SIAMESE_HYBRID, 0, 0},
                               {NORM_SIAMESE_HYBRID, 1, 0}, {NORM_SIAMESE_HYBRID, 2, 0}, {NORM_PRE_QKVNORM, 0, 0},
                               {NORM_PERI, 0, 0},    {NORM_HC, 0, 0}};

// The plain matrix products (matmul_forward_naive, matmul_backward_naive: the math) against the fast ones the model
// runs (host/gemm.h's packed products), on shapes that reach edge tiles in both directions, a C that is no multiple
// of any vector width, and a gradient sum over more than one block of 256 rows.
// The bound: a sum of n terms in float32, in any order, is within gamma(n) * (the sum of the terms' magnitudes) of
// the exact sum, gamma(n) = n u / (1 - n u), u = 2^-24 (Higham, Accuracy and Stability of Numerical Algorithms,
// section 3.1), so two ways of summing are within twice that: n = C + 1 for an output (its bias and C products),
// K + 1 for a gradient element (the value already there and K products). Both sum in the same order (over k in
// increasing order, from the bias or the value already there), but the compiler fuses a*b + c into one rounding
// (an FMA) in some loops and not in others, so only the bound holds everywhere; tests/test_gemm.cpp holds the fast
// product bit for bit to that order. The bias gradient (the same sum, no product) is bit for bit.
TEST_CASE("matmul: the plain loops and the fast products agree") {
    static_assert(sizeof(real) == 4, "the bound below is float32's");
    const double u = std::ldexp(1.0, -24);
    auto gamma = [&](int n) { return n * u / (1 - n * u); };
    struct Shape { int N, C, OC, bias; };
    const Shape shapes[] = {{13, 64, 36, 1}, {6, 40, 10, 1}, {300, 24, 7, 0}, {9, 18, 300, 1}};
    uint64_t rng = 77;
    auto fill = [&](std::vector<real>* v, size_t n) {
        v->resize(n);
        for (real& x : *v) x = (real)random_normal(&rng);
    };
    for (const Shape& sh : shapes) {
        int N = sh.N, C = sh.C, OC = sh.OC;
        CAPTURE(N);
        CAPTURE(C);
        CAPTURE(OC);
        std::vector<real> inp, w, b, dout, dinp0, dw0, db0;
        fill(&inp, (size_t)N * C);
        fill(&w, (size_t)OC * C);
        fill(&b, OC);
        fill(&dout, (size_t)N * OC);
        fill(&dinp0, (size_t)N * C);  // the gradients accumulate onto what is there
        fill(&dw0, (size_t)OC * C);
        fill(&db0, OC);
        const real* bias = sh.bias ? b.data() : nullptr;
        auto A = [&](const std::vector<real>& v, int r, int cols, int c) { return (double)v[(size_t)r * cols + c]; };

        std::vector<real> fast((size_t)N * OC), plain((size_t)N * OC);
        matmul_forward(fast.data(), inp.data(), w.data(), bias, N, C, OC);
        matmul_forward_naive(plain.data(), inp.data(), w.data(), bias, N, C, OC);
        double worst = 0, worst_dropped = 0;
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) {
                double mag = bias ? std::fabs((double)bias[o]) : 0, dropped = bias ? bias[o] : 0;
                for (int i = 0; i < C; i++) mag += std::fabs(A(inp, n, C, i) * A(w, o, C, i));
                for (int i = 0; i < C - 1; i++) dropped += A(inp, n, C, i) * A(w, o, C, i);
                double bound = 2 * gamma(C + 1) * mag, diff = std::fabs(A(fast, n, OC, o) - A(plain, n, OC, o));
                REQUIRE(diff <= bound);
                worst = std::max(worst, diff / bound);
                // a product that forgot a term (here the last) is far outside the bound: the check can fail
                worst_dropped = std::max(worst_dropped, std::fabs(dropped - A(plain, n, OC, o)) / bound);
            }
        MESSAGE("forward: worst |fast - plain| / bound " << worst << "; a term dropped: " << worst_dropped);
        CHECK(worst_dropped > 100);

        std::vector<real> dinp_f(dinp0), dw_f(dw0), db_f(db0), dinp_p(dinp0), dw_p(dw0), db_p(db0);
        matmul_backward(dinp_f.data(), dw_f.data(), sh.bias ? db_f.data() : nullptr, dout.data(), inp.data(), w.data(),
                        N, C, OC);
        matmul_backward_naive(dinp_p.data(), dw_p.data(), sh.bias ? db_p.data() : nullptr, dout.data(), inp.data(),
                              w.data(), N, C, OC);
        size_t same = 0, total = 0;
        worst = 0;
        for (int n = 0; n < N; n++)  // dinp (N, C) = dinp0 + dout @ w: K = OC
            for (int i = 0; i < C; i++) {
                double mag = std::fabs(A(dinp0, n, C, i));
                for (int o = 0; o < OC; o++) mag += std::fabs(A(dout, n, OC, o) * A(w, o, C, i));
                double bound = 2 * gamma(OC + 1) * mag, diff = std::fabs(A(dinp_f, n, C, i) - A(dinp_p, n, C, i));
                REQUIRE(diff <= bound);
                worst = std::max(worst, diff / bound);
                same += diff == 0, total++;
            }
        for (int o = 0; o < OC; o++)  // dweight (OC, C) = dw0 + dout^T @ inp: K = N
            for (int i = 0; i < C; i++) {
                double mag = std::fabs(A(dw0, o, C, i));
                for (int n = 0; n < N; n++) mag += std::fabs(A(dout, n, OC, o) * A(inp, n, C, i));
                double bound = 2 * gamma(N + 1) * mag, diff = std::fabs(A(dw_f, o, C, i) - A(dw_p, o, C, i));
                REQUIRE(diff <= bound);
                worst = std::max(worst, diff / bound);
                same += diff == 0, total++;
            }
        MESSAGE("backward: worst |fast - plain| / bound " << worst << ", " << same << " of " << total
                                                                   << " elements bit for bit");
        CHECK(memcmp(db_f.data(), db_p.data(), db_f.size() * sizeof(real)) == 0);
        CHECK(memcmp(dinp_f.data(), dinp0.data(), dinp0.size() * sizeof(real)) != 0);  // something was added
    }
}

// GELU's tanh (host/fast_math.h) against the exact one, in double: as close in absolute terms as the float C
// library's tanhf, over every float in [-2^-20, 2^-20] on a grid and [-20, 20] every 2^-14, and +-inf and 0 exact.
TEST_CASE("fast_tanh: within 1e-7 of tanh everywhere, as tanhf is") {
    double worst = 0, worst_libm = 0, at = 0;
    auto visit = [&](float u) {
        double exact = std::tanh((double)u), e = std::fabs((double)fast_tanh(u) - exact);
        if (e > worst) worst = e, at = u;
        worst_libm = std::max(worst_libm, std::fabs((double)std::tanh(u) - exact));
    };
    for (int i = -(1 << 20); i <= (1 << 20); i++) visit((float)std::ldexp((double)i, -40));
    for (int i = -20 * (1 << 14); i <= 20 * (1 << 14); i++) visit((float)std::ldexp((double)i, -14));
    MESSAGE("fast_tanh: worst absolute error " << worst << " (at " << at << "), tanhf's " << worst_libm);
    CHECK(worst <= 1e-7);
    CHECK(fast_tanh(INFINITY) == 1.0f);
    CHECK(fast_tanh(-INFINITY) == -1.0f);
    CHECK(fast_tanh(0.0f) == 0.0f);
    CHECK(fast_tanh(1e30f) == 1.0f);
}

TEST_CASE("clear_uncached: zeros exactly the bytes asked for, whatever their alignment") {
    // host/clear.h: streaming stores for the whole 64-byte lines inside, memset for the ends around them
    std::vector<unsigned char> buf(1024 + 256);
    unsigned char* base = (unsigned char*)(((uintptr_t)buf.data() + 63) / 64 * 64);  // a line's start
    int wrong = 0, cases = 0;
    for (int offset = 0; offset < 70; offset++)
        for (size_t bytes : {0, 1, 17, 63, 64, 65, 127, 128, 129, 191, 200, 640, 1000}) {
            memset(base, 0xab, 1024 + 128);
            clear_uncached(base + offset, bytes);
            for (size_t i = 0; i < 1024 + 128; i++) {
                bool inside = i >= (size_t)offset && i < offset + bytes;
                wrong += base[i] != (inside ? 0 : 0xab);
            }
            cases++;
        }
    CHECK(cases == 70 * 13);
    CHECK(wrong == 0);
}

TEST_CASE("gradient norm: each chunk summed in order, for any thread count, groups of chunks side by side or not") {
    // gpt2_grad_norm (host/gemm.h's sum_of_squares) sums squares in double in chunks of 2^16 (each in order, then the
    // chunks in order), 8 chunks side by side over the length they all have: the same bits as one after the other
    const size_t CHUNK = 1 << 16;
    for (size_t n : {(size_t)100, 8 * CHUNK, 9 * CHUNK + 123, 17 * CHUNK - 1}) {
        CAPTURE(n);
        std::vector<real> g(n);
        uint64_t rng = 11;
        for (real& x : g) x = (real)random_normal(&rng);
        double want = 0;
        for (size_t k = 0; k < (n + CHUNK - 1) / CHUNK; k++) {
            double s = 0;
            for (size_t i = k * CHUNK; i < n && i < (k + 1) * CHUNK; i++) s = gemm_cpu::madd(s, (double)g[i], (double)g[i]);
            want += s;
        }
        want = std::sqrt(want);
        GPT2 m = {};
        m.num_parameters = n, m.grads_memory = g.data();
        for (int threads : {1, 2, 3}) {
            omp_set_num_threads(threads);
            CHECK(gpt2_grad_norm(&m) == want);
        }
        omp_set_num_threads(2);
        g[n - 1] += 1;  // the check can fail: the last number counts
        CHECK(gpt2_grad_norm(&m) != want);
    }
}

TEST_CASE("causality: logits at t do not change when tokens after t change") {
    for (auto& lay : CASES) {
        GPT2 m;
        gpt2_init_random(&m, tiny_config(lay[0], lay[1], 60, lay[2]), 1);
        perturb(&m, 2);
        const int B = 2, T = 12, Vp = m.config.padded_vocab_size;
        std::vector<int> a = random_tokens(B * T, 60, 3);
        gpt2_forward(&m, a.data(), nullptr, B, T);
        std::vector<real> before(m.acts.logits, m.acts.logits + (size_t)B * T * Vp);
        for (int t = 0; t < T; t++) {
            std::vector<int> b = a;
            for (int bb = 0; bb < B; bb++)
                for (int t2 = t + 1; t2 < T; t2++) b[bb * T + t2] = (b[bb * T + t2] + 17) % 60;
            gpt2_forward(&m, b.data(), nullptr, B, T);
            for (int bb = 0; bb < B; bb++) {
                size_t off = ((size_t)bb * T + t) * Vp;
                // the computation of row t reads nothing of rows > t, so equality is exact
                REQUIRE(memcmp(m.acts.logits + off, before.data() + off, Vp * sizeof(real)) == 0);
            }
            if (t + 1 < T) {  // and the future does move (the test is not vacuous)
                size_t off = (size_t)(T - 1) * Vp;
                CHECK(memcmp(m.acts.logits + off, before.data() + off, Vp * sizeof(real)) != 0);
            }
        }
        gpt2_free(&m);
    }
}

// The registry (host/layouts.h) is consistent: each row's name finds it, its LayerNorm tensors cover what its kinds
// and its head read (in every block that reads them) and no more, two-stream kinds come with two streams, c1 comes
// with the kind that reads it, and its parameter table names each tensor once.
TEST_CASE("layout registry: every row is consistent with what its kinds need") {
    std::set<std::string> names;
    for (int i = 0; i < NUM_LAYOUTS; i++) {
        const LayoutInfo& l = LAYOUTS[i];
        CAPTURE(l.name);
        CHECK(find_layout(l.name) == i);
        CHECK(names.insert(l.name).second);
        CHECK((l.streams == 1 || l.streams == 2));
        // the head's LayerNorms are those its head function reads: LN_f; none; LN_xf, LN_yf and LN_f; LN_f (sum)
        CHECK(l.head_norms == (l.head == HEAD_LN || l.head == HEAD_SUM ? 1 : l.head == HEAD_IDENTITY ? 0 : 3));
        if (l.head == HEAD_SIAMESE || l.head == HEAD_SUM) CHECK(l.streams == 2);
        for (int L = 1; L <= 8; L++) {
            std::vector<int> settings = {0};
            if (l.setting.flag) {
                settings.clear();
                for (int v = -1; v <= L + 1; v++)
                    if (l.setting.valid(v, L)) settings.push_back(v);
                CHECK(!l.setting.valid(0, L));  // 0 means "none", never a setting
            }
            for (int setting : settings) {
                GPT2Config c = make_config(L, 32, 4, 16, 60, i, 0, setting);
                std::set<std::string> tensors;
                for (const TensorInfo& t : parameter_table(c)) CHECK(tensors.insert(t.name).second);
                std::set<std::vector<int>> read;  // {k, slot, block} of the boundary LayerNorms some kind reads
                int c1_read = 0;
                for (int s = 0; s < 2 * L; s++) {
                    SubLayerKind k = sublayer_kind(c, s);
                    std::vector<int> slots = {LN_X};  // the slots each kind's functions read
                    if (k == SUBLAYER_SIAMESE) slots = {LN_X, LN_Y, LN_IN};
                    if (k == SUBLAYER_SIAMESE_C1) slots = {LN_Y};
                    if (k == SUBLAYER_RESIDUAL) slots = {};
                    if (k == SUBLAYER_PERI) slots = {LN_X, LN_OUT};
                    if (k == SUBLAYER_HC) slots = {LN_X, LN_H};
                    for (int j : slots) read.insert({s % 2, j, s / 2});
                    c1_read |= k == SUBLAYER_SIAMESE_C1;
                    if (k == SUBLAYER_SIAMESE_C1) CHECK(s % 2 == 0);  // c1 is the attention boundary's
                    if (k == SUBLAYER_SIAMESE || k == SUBLAYER_SIAMESE_C1 || k == SUBLAYER_HC) CHECK(l.streams == 2);
                    CHECK(l.hc == (k == SUBLAYER_HC));  // hc's weights come with the kind that reads them
                }
                std::set<std::vector<int>> have;  // and those the row gives tensors
                for (int k = 0; k < 2; k++)
                    for (int j = 0; j < l.norms[k]; j++)
                        for (int b = 0; l.norm_names[k][2 * j] && b < (l.norm_blocks[k] ? l.norm_blocks[k] : L); b++)
                            have.insert({k, j, b});
                CHECK(read == have);
                CHECK(l.c1 == c1_read);
                // the identity head passes x on as it is: only right after a sub-layer that ends normalized
                if (l.head == HEAD_IDENTITY) {
                    SubLayerKind last = sublayer_kind(c, 2 * L - 1);
                    CHECK((last == SUBLAYER_POST || last == SUBLAYER_DEEPNORM));
                }
            }
        }
    }
}

// The order of the tensors is the program's (--print-tensors; tests/test_cli.sh holds docs/file_formats.md's table to it).
// What is checked here is the one contract from outside: llm.c's order and size for Pre-Norm (llm.c's
// train_gpt2.c, fill_in_parameter_sizes), so that GPT-2 checkpoints written by llm.c's tooling load unchanged.
TEST_CASE("checkpoint: Pre-Norm keeps llm.c's tensor order and parameter count") {
    std::vector<std::string> names;
    for (const TensorInfo& t : parameter_table(tiny_config(NORM_PRE))) names.push_back(t.name);
    std::vector<std::string> llmc = {"wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
                                     "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};
    CHECK(names == llmc);
    // GPT-2 small (d12, vocabulary 50257 padded to 50304) has llm.c's 124,475,904 parameters; the other layouts
    // differ by their LayerNorms only, (L, C) gains and shifts per boundary slot and (C) ones at the head
    for (int norm = 0; norm < NUM_LAYOUTS; norm++) {
        const LayoutInfo& l = LAYOUTS[norm];
        GPT2Config d12 = make_config(12, 768, 12, 1024, 50257, norm, 0, default_layout_setting(norm, 12));
        CAPTURE(l.name);
        // a boundary slot's gain and shift are (blocks, C) each; Pre-Norm's 2 slots are in llm.c's count; c1 is (L, C);
        // the QKV-norm's three gains and shifts are (L, hs), hs = 64; hc's connection weights per sub-layer (L, 2, 4),
        // (L, 4, C) and (L, 2)
        long boundary_extra = -2 * 2 * 12 * 768;
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < l.norms[k]; j++)
                if (l.norm_names[k][2 * j]) boundary_extra += 2 * (l.norm_blocks[k] ? l.norm_blocks[k] : 12) * 768;
        long c1_extra = l.c1 * 12 * 768, qkv_extra = l.qkv_norm * 6 * 12 * 64, head_extra = (l.head_norms - 1) * 2 * 768;
        long hc_extra = l.hc * 2 * 12 * (8 + 4 * 768 + 2);
        CHECK(count_parameters(d12) ==
              (size_t)(124475904 + boundary_extra + c1_extra + qkv_extra + head_extra + hc_extra));
    }
}

TEST_CASE("checkpoint: save and load round-trip bit-exact, header included") {
    for (auto& lay : CASES) {
        GPT2 m, n;
        gpt2_init_random(&m, tiny_config(lay[0], lay[1], 60, lay[2]), 5);
        perturb(&m, 6);
        char path[] = "/tmp/siamese_ckpt_XXXXXX";
        int fd = mkstemp(path);
        REQUIRE(fd >= 0);
        close(fd);
        gpt2_save_checkpoint(&m, path);
        FILE* f = fopen(path, "rb");
        int header[HEADER_INTS];
        REQUIRE(fread(header, sizeof(int), HEADER_INTS, f) == (size_t)HEADER_INTS);
        fclose(f);
        CHECK(header[0] == 20240326);
        CHECK(header[1] == 3);
        CHECK(header[8] == lay[0]);
        CHECK(header[9] == lay[1]);
        CHECK(header[10] == lay[2]);
        gpt2_build_from_checkpoint(&n, path);
        CHECK(memcmp(&n.config, &m.config, sizeof(GPT2Config)) == 0);
        REQUIRE(n.num_parameters == m.num_parameters);
        CHECK(memcmp(n.params_memory, m.params_memory, m.num_parameters * sizeof(real)) == 0);
        remove(path);
        gpt2_free(&m);
        gpt2_free(&n);
    }
}

TEST_CASE("initialization: seeded, shared weights identical across layouts, GPT-2's scales") {
    GPT2 pre, sia, again;
    gpt2_init_random(&pre, tiny_config(NORM_PRE), 11);
    gpt2_init_random(&sia, tiny_config(NORM_SIAMESE), 11);
    gpt2_init_random(&again, tiny_config(NORM_SIAMESE), 11);
    CHECK(memcmp(sia.params_memory, again.params_memory, sia.num_parameters * sizeof(real)) == 0);
    size_t C = 32, L = 3;
    CHECK(memcmp(pre.params.wte, sia.params.wte, 128 * C * sizeof(real)) == 0);
    CHECK(memcmp(pre.params.qkvw, sia.params.qkvw, L * 3 * C * C * sizeof(real)) == 0);
    CHECK(memcmp(pre.params.fcprojw, sia.params.fcprojw, L * C * 4 * C * sizeof(real)) == 0);
    // standard deviations: 0.02 for weights, 0.02/sqrt(2L) for the residual projections; gains 1, biases 0
    auto stddev = [](const real* p, size_t n) {
        double s = 0;
        for (size_t i = 0; i < n; i++) s += (double)p[i] * p[i];
        return std::sqrt(s / n);
    };
    CHECK(stddev(sia.params.qkvw, L * 3 * C * C) == doctest::Approx(0.02).epsilon(0.05));
    CHECK(stddev(sia.params.fcprojw, L * 4 * C * C) == doctest::Approx(0.02 / std::sqrt(6.0)).epsilon(0.05));
    for (size_t i = 0; i < L * C; i++) {
        REQUIRE(sia.params.lnw[1][LN_Y][i] == 1);
        REQUIRE(sia.params.lnb[0][LN_IN][i] == 0);
        REQUIRE(sia.params.qkvb[i] == 0);
    }
    for (size_t i = 60 * C; i < 128 * C; i++) REQUIRE(sia.params.wte[i] == 0);  // padded rows
    // siamese-hybrid: the same draws for the weights it shares; c1 and the QKV-norm's gains 1, their shifts 0
    GPT2 sh;
    gpt2_init_random(&sh, tiny_config(NORM_SIAMESE_HYBRID), 11);
    CHECK(memcmp(pre.params.qkvw, sh.params.qkvw, L * 3 * C * C * sizeof(real)) == 0);
    CHECK(memcmp(pre.params.fcprojw, sh.params.fcprojw, L * C * 4 * C * sizeof(real)) == 0);
    for (size_t i = 0; i < L * C; i++) {
        REQUIRE(sh.params.c1[i] == 1);
        REQUIRE(sh.params.lnw[0][LN_Y][i] == 1);
    }
    for (int j = 0; j < 3; j++)
        for (size_t i = 0; i < L * 8; i++) {  // (L, hs), hs = 32 / 4
            REQUIRE(sh.params.lnqkvw[j][i] == 1);
            REQUIRE(sh.params.lnqkvb[j][i] == 0);
        }
    CHECK(sh.params.lnw[0][LN_X] == nullptr);  // siamese_c1 has no LN_x, and no LN_in
    CHECK(sh.params.lnw[0][LN_IN] == nullptr);
    gpt2_free(&sh);
    gpt2_free(&pre);
    gpt2_free(&sia);
    gpt2_free(&again);
}

// DeepNorm's initialization (host/layouts.h, deepnorm_init_std): the same draws as GPT-2's, with v, attprojw, fcw
// and fcprojw at 0.02 beta, beta = (8L)^(-1/4), and q, k, wte, wpe at 0.02. Bound: a sample standard deviation of
// n >= 3072 normals is within 5% of the true one with overwhelming probability (relative sd 1/sqrt(2n) <= 1.3%).
TEST_CASE("initialization: DeepNorm scales v, attproj, fc and fcproj by beta") {
    GPT2 pre, deep;
    gpt2_init_random(&pre, tiny_config(NORM_PRE), 11);
    gpt2_init_random(&deep, tiny_config(NORM_DEEPNORM), 11);
    size_t C = 32, L = 3;
    double beta = std::pow(8.0 * L, -0.25);
    auto stddev = [](const real* p, size_t n, size_t stride = 0, size_t take = 0) {
        double s = 0;
        size_t count = 0;
        for (size_t i = 0; i < n; i++)
            if (!stride || i % stride < take) s += (double)p[i] * p[i], count++;
        return std::sqrt(s / count);
    };
    // qkvw (L, 3C, C): per block, rows 0..2C-1 are q and k, 2C..3C-1 are v
    std::vector<real> qk, v;
    for (size_t l = 0; l < L; l++)
        for (size_t r = 0; r < 3 * C; r++)
            for (size_t j = 0; j < C; j++) (r < 2 * C ? qk : v).push_back(deep.params.qkvw[(l * 3 * C + r) * C + j]);
    CHECK(stddev(qk.data(), qk.size()) == doctest::Approx(0.02).epsilon(0.05));
    CHECK(stddev(v.data(), v.size()) == doctest::Approx(0.02 * beta).epsilon(0.05));
    CHECK(stddev(deep.params.attprojw, L * C * C) == doctest::Approx(0.02 * beta).epsilon(0.05));
    CHECK(stddev(deep.params.fcw, L * 4 * C * C) == doctest::Approx(0.02 * beta).epsilon(0.05));
    CHECK(stddev(deep.params.fcprojw, L * 4 * C * C) == doctest::Approx(0.02 * beta).epsilon(0.05));
    // the same draws: q and k as Pre-Norm's bit for bit, and wte, wpe too
    for (size_t l = 0; l < L; l++)
        CHECK(memcmp(pre.params.qkvw + l * 3 * C * C, deep.params.qkvw + l * 3 * C * C, 2 * C * C * sizeof(real)) == 0);
    CHECK(memcmp(pre.params.wte, deep.params.wte, 128 * C * sizeof(real)) == 0);
    CHECK(memcmp(pre.params.wpe, deep.params.wpe, 16 * C * sizeof(real)) == 0);
    gpt2_free(&pre);
    gpt2_free(&deep);
}

TEST_CASE("padded vocabulary: no probability, no gradient") {
    GPT2 m;
    gpt2_init_random(&m, tiny_config(NORM_SIAMESE), 1);
    perturb(&m, 3);
    for (size_t i = 60 * 32; i < 128 * 32; i++) m.params.wte[i] = (real)0.5;  // even non-zero padded rows never win
    std::vector<int> in = random_tokens(24, 60, 4), tg = random_tokens(24, 60, 5);
    gpt2_forward(&m, in.data(), tg.data(), 2, 12);
    for (int n = 0; n < 24; n++) {
        double total = 0;
        for (int v = 0; v < 128; v++) {
            real p = m.acts.probs[(size_t)n * 128 + v];
            if (v >= 60) REQUIRE(p == 0);
            total += p;
        }
        CHECK(total == doctest::Approx(1.0).epsilon(1e-5));
    }
    gpt2_zero_grad(&m);
    gpt2_backward(&m);
    for (size_t i = 60 * 32; i < 128 * 32; i++) REQUIRE(m.grads.wte[i] == 0);
    gpt2_free(&m);
}

TEST_CASE("AdamW: decoupled weight decay on 2-D weights only") {
    GPT2 m;
    gpt2_init_random(&m, tiny_config(NORM_SIAMESE), 1);
    perturb(&m, 7);
    std::vector<real> before(m.params_memory, m.params_memory + m.num_parameters);
    gpt2_zero_grad(&m);  // zero gradient: only the decay moves anything
    AdamWConfig o = {(real)0.01, (real)0.9, (real)0.95, (real)1e-8, (real)0.1};
    gpt2_update(&m, o, 1, 1);
    int decayed = 0, kept = 0;
    for (const TensorInfo& t : m.tensors) {
        std::string name = t.name;
        int should_decay = name == "wte" || name == "wpe" || name == "qkvw" || name == "attprojw" || name == "fcw" ||
                           name == "fcprojw";
        CHECK(t.decay == should_decay);
        for (size_t i = t.offset; i < t.offset + t.size; i++) {
            real expected = t.decay ? before[i] - (real)0.01 * ((real)0.1 * before[i]) : before[i];
            REQUIRE(m.params_memory[i] == expected);
        }
        (t.decay ? decayed : kept)++;
    }
    CHECK(decayed == 6);
    CHECK(kept == 22);
    gpt2_free(&m);
}

TEST_CASE("gradient accumulation: two half batches equal one batch") {
    for (auto& lay : CASES) {
        GPT2 m;
        gpt2_init_random(&m, tiny_config(lay[0], lay[1], 60, lay[2]), 1);
        perturb(&m, 8);
        std::vector<int> in = random_tokens(24, 60, 9), tg = random_tokens(24, 60, 10);
        gpt2_forward(&m, in.data(), tg.data(), 2, 12);
        gpt2_zero_grad(&m);
        gpt2_backward(&m);
        std::vector<real> whole(m.grads_memory, m.grads_memory + m.num_parameters);
        gpt2_zero_grad(&m);
        for (int half = 0; half < 2; half++) {
            gpt2_forward(&m, in.data() + 12 * half, tg.data() + 12 * half, 1, 12);
            gpt2_backward(&m, (real)0.5);
        }
        // float32: the two results differ by rounding in a different summation order over the 2 rows only
        double num = 0, den = 0;
        for (size_t i = 0; i < m.num_parameters; i++) {
            num += (double)(m.grads_memory[i] - whole[i]) * (m.grads_memory[i] - whole[i]);
            den += (double)whole[i] * whole[i];
        }
        CHECK(std::sqrt(num / den) < 1e-6);
        gpt2_free(&m);
    }
}

#ifdef _OPENMP
TEST_CASE("determinism: the same gradients bit for bit with 1 and 2 threads") {
    for (int norm : {NORM_SIAMESE, NORM_SIAMESE_HYBRID, NORM_HYBRID}) {  // and the QKV-norm's and c1's sums
        CAPTURE(LAYOUTS[norm].name);
        GPT2Config c = tiny_config(norm, 0, 300);  // a vocabulary large enough to split across threads
        c.channels = 64;
        GPT2 m;
        gpt2_init_random(&m, c, 1);
        perturb(&m, 12);
        std::vector<int> in = random_tokens(64, 300, 13), tg = random_tokens(64, 300, 14);
        std::vector<real> grads[2];
        for (int k = 0; k < 2; k++) {
            omp_set_num_threads(k + 1);
            gpt2_forward(&m, in.data(), tg.data(), 4, 16);
            gpt2_zero_grad(&m);
            gpt2_backward(&m);
            grads[k].assign(m.grads_memory, m.grads_memory + m.num_parameters);
        }
        omp_set_num_threads(2);
        CHECK(memcmp(grads[0].data(), grads[1].data(), m.num_parameters * sizeof(real)) == 0);
        gpt2_free(&m);
    }
}
#endif

TEST_CASE("learning rate: linear warmup, cosine decay to the final fraction") {
    double lr = 1e-3;
    CHECK(learning_rate_at(0, 100, lr, 10, 0.1) == doctest::Approx(1e-4));
    CHECK(learning_rate_at(9, 100, lr, 10, 0.1) == doctest::Approx(1e-3));
    CHECK(learning_rate_at(10, 100, lr, 10, 0.1) == doctest::Approx(1e-3));
    CHECK(learning_rate_at(55, 100, lr, 10, 0.1) == doctest::Approx(0.55e-3));  // halfway: (1 + 0.1) / 2
    CHECK(learning_rate_at(100, 100, lr, 10, 0.1) == doctest::Approx(1e-4));
    for (int s = 11; s < 100; s++) CHECK(learning_rate_at(s, 100, lr, 10, 0.1) < learning_rate_at(s - 1, 100, lr, 10, 0.1));
    CHECK(learning_rate_at(50, 100, lr, 0, 1.0) == doctest::Approx(1e-3));  // -q 1: constant
}

TEST_CASE("SiameseNorm forward: the streams follow the equations") {
    // After the forward pass, check the stored streams against the method's equations directly.
    GPT2 m;
    gpt2_init_random(&m, tiny_config(NORM_SIAMESE), 1);
    perturb(&m, 15);
    std::vector<int> in = random_tokens(24, 60, 16);
    gpt2_forward(&m, in.data(), nullptr, 2, 12);
    size_t NC = 24 * 32;
    for (int s = 0; s < 6; s++) {
        SubLayer a = sublayer_tensors(&m, s);
        double inv_c = 1.0 / std::sqrt(2.0 * (s / 2 + 1));
        for (size_t i = 0; i < NC; i++) {
            REQUIRE(a.x_out[i] == doctest::Approx(a.xh[i] + inv_c * a.z[i]).epsilon(1e-6));  // x = xh + z/c_l
            REQUIRE(a.y_out[i] == doctest::Approx(a.y[i] + a.z[i]).epsilon(1e-6));           // y = y + z
            REQUIRE(a.sum[i] == doctest::Approx(a.xh[i] + a.yh[i]).epsilon(1e-6));           // sum = xh + LN_y(y)
        }
        // xh = LN_x(x): with the gain and shift undone, each row has zero mean and variance var(x) / (var(x) + eps)
        const real* w = m.params.lnw[s % 2][LN_X] + (s / 2) * 32;
        const real* b = m.params.lnb[s % 2][LN_X] + (s / 2) * 32;
        auto moments = [](const real* r, const real* w, const real* b, double* mean, double* var) {
            *mean = *var = 0;
            for (int i = 0; i < 32; i++) *mean += w ? (r[i] - b[i]) / w[i] : r[i];
            *mean /= 32;
            for (int i = 0; i < 32; i++) {
                double v = (w ? (r[i] - b[i]) / w[i] : r[i]) - *mean;
                *var += v * v / 32;
            }
        };
        for (int row = 0; row < 24; row++) {
            double mean, var, xmean, xvar;
            moments(a.xh + row * 32, w, b, &mean, &var);
            moments(a.x + row * 32, nullptr, nullptr, &xmean, &xvar);
            CHECK(std::fabs(mean) < 1e-4);
            CHECK(var == doctest::Approx(xvar / (xvar + 1e-5)).epsilon(1e-4));
        }
    }
    CHECK(memcmp(m.acts.x, m.acts.y, NC * sizeof(real)) == 0);  // both streams start as h0
    gpt2_free(&m);
}

TEST_CASE("HybridNorm layouts' forward: the streams and the QKV-norm follow the equations") {
    // siamese-hybrid: attention u = c1 x + LN_y(y), x' = x + z/c_l, y' = y + z; MLP siamese's. hybrid: attention
    // x' = x + z, MLP u = LN(x), x' = u + z. pre-qkvnorm: x' = x + z. All three: each head's q, k, v rows of hs = 8,
    // with the gain and shift undone, have mean 0 and variance var(raw) / (var(raw) + eps).
    for (int norm : {NORM_SIAMESE_HYBRID, NORM_HYBRID, NORM_PRE_QKVNORM}) {
        CAPTURE(LAYOUTS[norm].name);
        GPT2 m;
        gpt2_init_random(&m, tiny_config(norm), 1);
        perturb(&m, 17);
        std::vector<int> in = random_tokens(24, 60, 18);
        gpt2_forward(&m, in.data(), nullptr, 2, 12);
        size_t NC = 24 * 32, C = 32;
        for (int s = 0; s < 6; s++) {
            SubLayer a = sublayer_tensors(&m, s);
            double inv_c = 1.0 / std::sqrt(2.0 * (s / 2 + 1));
            for (size_t i = 0; i < NC; i++) {
                if (norm == NORM_HYBRID) {
                    const real* res = s % 2 == 0 ? a.x : a.u;  // x' = x + z; x' = LN(x) + z
                    REQUIRE(a.x_out[i] == doctest::Approx(res[i] + a.z[i]).epsilon(1e-6));
                } else if (norm == NORM_PRE_QKVNORM) {
                    REQUIRE(a.x_out[i] == doctest::Approx(a.x[i] + a.z[i]).epsilon(1e-6));  // x' = x + z
                } else if (s % 2 == 0) {
                    REQUIRE(a.u[i] == doctest::Approx(a.c1[i % C] * a.x[i] + a.yh[i]).epsilon(1e-6));
                    REQUIRE(a.x_out[i] == doctest::Approx(a.x[i] + inv_c * a.z[i]).epsilon(1e-6));
                    REQUIRE(a.y_out[i] == doctest::Approx(a.y[i] + a.z[i]).epsilon(1e-6));
                } else {
                    REQUIRE(a.x_out[i] == doctest::Approx(a.xh[i] + inv_c * a.z[i]).epsilon(1e-6));
                    REQUIRE(a.y_out[i] == doctest::Approx(a.y[i] + a.z[i]).epsilon(1e-6));
                }
            }
        }
        const int hs = 8, NH = 4;
        for (int l = 0; l < 3; l++)
            for (int r = 0; r < 24 * 3 * NH; r++) {
                int j = r / NH % 3;
                const real* w = m.params.lnqkvw[j] + l * hs;
                const real* b = m.params.lnqkvb[j] + l * hs;
                const real* out = m.acts.qkv + (size_t)l * 24 * 3 * C + (size_t)r * hs;
                const real* raw = m.acts.qkvr + (size_t)l * 24 * 3 * C + (size_t)r * hs;
                double mean = 0, var = 0, rmean = 0, rvar = 0;
                for (int i = 0; i < hs; i++) mean += (out[i] - b[i]) / w[i] / hs, rmean += raw[i] / hs;
                for (int i = 0; i < hs; i++) {
                    double v = (out[i] - b[i]) / w[i] - mean, rv = raw[i] - rmean;
                    var += v * v / hs, rvar += rv * rv / hs;
                }
                REQUIRE(std::fabs(mean) < 1e-4);
                REQUIRE(var == doctest::Approx(rvar / (rvar + 1e-5)).epsilon(1e-4));
            }
        if (norm == NORM_SIAMESE_HYBRID) CHECK(memcmp(m.acts.x, m.acts.y, NC * sizeof(real)) == 0);
        gpt2_free(&m);
    }
}

TEST_CASE("Peri-LN forward: the stream follows the equations") {
    // x' = x + zn; u = LN(x) and zn = LN_out(z): each row, with its gain and shift undone, has mean 0 and variance
    // var(input) / (var(input) + eps); and LN_out is not the identity (zn is not z: the test can fail)
    GPT2 m;
    gpt2_init_random(&m, tiny_config(NORM_PERI), 1);
    perturb(&m, 19);
    std::vector<int> in = random_tokens(24, 60, 20);
    gpt2_forward(&m, in.data(), nullptr, 2, 12);
    const size_t NC = 24 * 32, C = 32;
    auto check_normalized = [&](const real* out, const real* inp, const real* w, const real* b) {
        for (int row = 0; row < 24; row++) {
            double mean = 0, var = 0, imean = 0, ivar = 0;
            for (size_t i = 0; i < C; i++) mean += (out[row * C + i] - b[i]) / w[i] / C, imean += inp[row * C + i] / C;
            for (size_t i = 0; i < C; i++) {
                double v = (out[row * C + i] - b[i]) / w[i] - mean, iv = inp[row * C + i] - imean;
                var += v * v / C, ivar += iv * iv / C;
            }
            REQUIRE(std::fabs(mean) < 1e-4);
            REQUIRE(var == doctest::Approx(ivar / (ivar + 1e-5)).epsilon(1e-4));
        }
    };
    for (int s = 0; s < 6; s++) {
        SubLayer a = sublayer_tensors(&m, s);
        for (size_t i = 0; i < NC; i++) REQUIRE(a.x_out[i] == doctest::Approx(a.x[i] + a.zn[i]).epsilon(1e-6));
        size_t l = s / 2, k = s % 2;
        check_normalized(a.u, a.x, m.params.lnw[k][LN_X] + l * C, m.params.lnb[k][LN_X] + l * C);
        check_normalized(a.zn, a.z, m.params.lnw[k][LN_OUT] + l * C, m.params.lnb[k][LN_OUT] + l * C);
        CHECK(memcmp(a.zn, a.z, NC * sizeof(real)) != 0);
    }
    gpt2_free(&m);
}

// Hyper-Connections start as Pre-Norm (Zhu et al. 2025, initialized as the paper does; host/init.h): with
// S = [e_(s mod 2) | I | 1], W = 0 and the same seed, both streams are Pre-Norm's x at every boundary, bit for bit (1 x + 0 y + 1 z is
// x + z exactly), and the logits differ only by the head's eps (LN_f(x + y) = LN_f(2x): the variance 4 var(x) meets
// the same eps 1e-5). After one perturbation of W the streams part (the test can fail).
TEST_CASE("hc at its initialization is Pre-Norm: both streams are Pre-Norm's x, bit for bit") {
    GPT2 pre, hc;
    gpt2_init_random(&pre, tiny_config(NORM_PRE), 5);
    gpt2_init_random(&hc, tiny_config(NORM_HC), 5);
    std::vector<int> in = random_tokens(24, 60, 21);
    gpt2_forward(&pre, in.data(), nullptr, 2, 12);
    gpt2_forward(&hc, in.data(), nullptr, 2, 12);
    const size_t NC = 24 * 32, C = 32;
    for (int s = 0; s <= 6; s++) {
        CAPTURE(s);
        CHECK(memcmp(hc.acts.x + s * NC, pre.acts.x + s * NC, NC * sizeof(real)) == 0);
        CHECK(memcmp(hc.acts.y + s * NC, pre.acts.x + s * NC, NC * sizeof(real)) == 0);
    }
    CHECK(memcmp(hc.acts.x + 6 * NC, hc.acts.x, NC * sizeof(real)) != 0);  // the blocks did move the stream
    double worst = 0;
    for (size_t i = 0; i < 24 * 128; i++)
        worst = std::max(worst, (double)std::fabs(hc.acts.logits[i] - pre.acts.logits[i]));
    MESSAGE("hc at init: largest |logit - Pre-Norm's| " << worst << " (the head's eps)");
    CHECK(worst > 0);
    CHECK(worst < 1e-2);
    // the dynamic part moved off 0: x and y part after the first sub-layer that reads them
    for (size_t i = 0; i < 4 * C; i++) hc.params.hcw[0][i] = (real)(0.1 * ((i * 7) % 5 - 2));
    gpt2_forward(&hc, in.data(), nullptr, 2, 12);
    CHECK(memcmp(hc.acts.x + NC, hc.acts.y + NC, NC * sizeof(real)) != 0);
    gpt2_free(&pre);
    gpt2_free(&hc);
}

// ----------------------------------------------------------------------------------------------------------------
// Covering one stream (docs/siamesenorm.md, section 11). With the gains and shifts of LN_y and LN_yf at 0, Y is never
// read (LN_y(y) = 0 * yhat + 0 = +0 exactly, and xh + 0 = xh), so SiameseNorm computes a Post-Norm model; with LN_x's
// and LN_xf's at 0 a Pre-Norm model. The weights go into a post (pre, mix) model, whose forward below runs the
// reference's own sub-layer and head functions, and each difference from them as one line of its own: an LN of the
// embedding, LN_in, 1/c_l, an LN before the head's, and for Mix-LN the stream its Pre-Norm part starts from.

// a LayerNorm of gain w and shift b (C each, no gradients), with statistics of its own for N rows
struct PlainLN {
    std::vector<real> mean, rstd;
    LayerNorm ln;
    PlainLN(const real* w, const real* b, int N, int C) : mean(N), rstd(N) {
        ln = {w, b, nullptr, nullptr, mean.data(), rstd.data(), N, C};
    }
};

// SiameseNorm's extras, made explicit in a one-stream model; each absent unless set
struct CoverExtras {
    const real *emb_w = nullptr, *emb_b = nullptr;    // p_0 = LN_e(h0) instead of h0
    const real* ln_in[2][2] = {};                       // [k][gain, shift], (L, C) each: F reads LN_in(...)
    double inv_c[64] = {};                              // block l's branch scaled by inv_c[l] (0: by 1)
    const real *last_w = nullptr, *last_b = nullptr;  // an LN of the last stream before the head's own (if any)
    int restart_at = -1;                                // mix: sub-layer restart_at reads h0 + the outputs z of the
};                                                      //   sub-layers below it, not the stream they made

// One sub-layer with the extras: post  p' = LN(p + F(LN_in(p)) / c_l);  pre  p' = p + F(LN_in(LN(p))). Without
// LN_in and 1/c_l, the reference's own post_ or pre_sublayer_forward.
static void cover_sublayer(const SubLayer& t, const CoverExtras& e) {
    int l = t.s / 2, k = t.s % 2, N = t.m->B * t.m->T, C = t.m->config.channels;
    real inv_c = (real)(e.inv_c[l] ? e.inv_c[l] : 1);
    bool post = sublayer_kind(t.m->config, t.s) == SUBLAYER_POST;
    if (!e.ln_in[k][0] && inv_c == 1) return run_sublayer(t, FORWARD);
    if (!post) layernorm_forward(t.LN, t.u, t.x);                    // pre: LN(p)
    const real* f_in = post ? t.x : t.u;
    std::vector<real> u(t.n);
    if (e.ln_in[k][0]) {                                             // LN_in(p) or LN_in(LN(p))
        PlainLN ln_in(e.ln_in[k][0] + (size_t)l * C, e.ln_in[k][1] + (size_t)l * C, N, C);
        layernorm_forward(ln_in.ln, u.data(), f_in);
        f_in = u.data();
    }
    F_forward(t, f_in);                                              // z = F(...)
    if (post) {
        add_forward(t.sum, t.x, t.z, inv_c, t.n);                    // sum = p + z / c_l
        layernorm_forward(t.LN, t.x_out, t.sum);                     // p' = LN(sum)
    } else {
        add_forward(t.x_out, t.x, t.z, 1, t.n);                      // p' = p + z
    }
}

// the one-stream model m (post, pre or mix) on the batch, with the extras: its logits, in m's acts.logits
static void cover_forward(GPT2* m, const std::vector<int>& in, int B, int T, const CoverExtras& e) {
    gpt2_forward(m, in.data(), nullptr, B, T);  // sizes the activations; all of them are written again below
    const GPT2Config& c = m->config;
    int N = B * T, C = c.channels;
    size_t n = (size_t)N * C;
    std::vector<real> h0(n), last(n);
    encoder_forward(h0.data(), in.data(), m->params.wte, m->params.wpe, B, T, C);  // h0 = wte[tok] + wpe[pos]
    if (e.emb_w) layernorm_forward(PlainLN(e.emb_w, e.emb_b, N, C).ln, m->acts.x, h0.data());  // p_0 = LN_e(h0)
    else memcpy(m->acts.x, h0.data(), n * sizeof(real));                                        // p_0 = h0
    std::vector<real> y(h0);  // h0 + the outputs so far: what SiameseNorm's Y holds
    for (int s = 0; s < 2 * c.num_layers; s++) {
        SubLayer t = sublayer_tensors(m, s);
        if (s == e.restart_at) memcpy(t.x, y.data(), n * sizeof(real));  // mix: the Pre-Norm part starts from y
        cover_sublayer(t, e);
        add_forward(y.data(), y.data(), t.z, 1, n);                        // y = y + z
    }
    Head t = head_tensors(m);
    if (!e.last_w) return run_head(t, FORWARD);
    layernorm_forward(PlainLN(e.last_w, e.last_b, N, C).ln, last.data(), t.x);  // LN_last(p_2L)
    if (t.LN_f.w) {                                                             // pre: LN_f(LN_last(p_2L))
        layernorm_forward(t.LN_f, t.hf, last.data());
        classifier_forward(t, t.hf);
    } else {                                                                    // post: LN_last(p_2L)
        classifier_forward(t, last.data());
    }
}

// a tensor of m by name
static real* tensor_of(GPT2* m, const char* name) {
    for (const TensorInfo& t : m->tensors)
        if (!strcmp(t.name, name)) return m->params_memory + t.offset;
    FAIL("no tensor " << name);
    return nullptr;
}

// F's weights and the embeddings, from the siamese model s into the one-stream model m
static void copy_shared(GPT2* m, GPT2* s) {
    for (const char* name : {"wte", "wpe", "qkvw", "qkvb", "attprojw", "attprojb", "fcw", "fcb", "fcprojw", "fcprojb"})
        for (const TensorInfo& t : m->tensors)
            if (!strcmp(t.name, name)) memcpy(tensor_of(m, name), tensor_of(s, name), t.size * sizeof(real));
}

// block l's C channels of an (L, C) tensor, copied; zeroed
static void copy_row(real* to, int lt, const real* from, int lf, int C) {
    memcpy(to + (size_t)lt * C, from + (size_t)lf * C, C * sizeof(real));
}
static void zero(real* p, size_t n) { memset(p, 0, n * sizeof(real)); }

// the largest |a - b| over the real vocabulary's logits, relative to the largest |b|
static double logits_difference(const GPT2* a, const GPT2* b, int N) {
    int V = a->config.vocab_size, Vp = a->config.padded_vocab_size;
    double d = 0, scale = 0;
    for (int r = 0; r < N; r++)
        for (int v = 0; v < V; v++) {
            double x = a->acts.logits[(size_t)r * Vp + v], y = b->acts.logits[(size_t)r * Vp + v];
            d = std::max(d, std::fabs(x - y)), scale = std::max(scale, std::fabs(y));
        }
    return d / scale;
}

static bool same_logits(const GPT2* a, const GPT2* b, int N) {
    return memcmp(a->acts.logits, b->acts.logits, (size_t)N * a->config.padded_vocab_size * sizeof(real)) == 0;
}

// The bound: both sides run the same float32 operations (the reference's own functions) on the same values in the
// same order, and the covered stream's terms are exact zeros (0 * yhat + 0 = +0, a + 0 = a, 1 * z = z), so the logits
// agree bit for bit (measured: they do). 1e-5 of the largest logit leaves room for a compiler that rounds one inlined
// copy of an operation differently from another (a * b + c fused into one FMA in one and not in the other: 2^-24
// relative, once per operation, carried through the 2L sub-layers and 2L + 2 LayerNorms of these models: well under
// 1e-6, the float32 noise that tests/torch_check.py measures between two whole implementations). Each named
// difference left out must move the logits by more than 1e-3 of the largest, 100 times the bound (the comparison
// can fail). Measured: the embedding's LN 0.24-0.56, the LN before the head's 0.056-0.077, 1/c_l 0.016-0.059, the
// restart (Mix-LN itself) 1.4-1.6, and LN_in 0.004-0.008 in post, 0.07-0.12 in pre and mix: LN_in normalizes a
// stream that a LayerNorm has just normalized, so it changes only what LN_x's (or LN_y's) gain and shift and its
// own make of it, here 1 + N(0, 0.05) and N(0, 0.05) (perturb); at gains 1 and shifts 0 it would be the identity
// but for eps (docs/siamesenorm.md, section 11).
static const double COVER_BOUND = 1e-5, COVER_MATTERS = 1e-3;

// each extra of e left out in turn: the logits must then differ
static void check_each_matters(GPT2* m, const GPT2* s, const std::vector<int>& in, int B, int T, CoverExtras e) {
    const char* names[] = {"the embedding's LN", "the LN before the head's", "LN_in", "1/c_l", "the restart"};
    for (int w = 0; w < 5; w++) {
        CoverExtras without = e;
        bool has = (w == 0 && e.emb_w) || (w == 1 && e.last_w) || (w == 2 && e.ln_in[0][0]) || (w == 3 && e.inv_c[0]) ||
                   (w == 4 && e.restart_at >= 0);
        if (!has) continue;
        if (w == 0) without.emb_w = nullptr;
        if (w == 1) without.last_w = nullptr;
        if (w == 2) for (auto& k : without.ln_in) k[0] = k[1] = nullptr;
        if (w == 3) for (double& v : without.inv_c) v = 0;
        if (w == 4) without.restart_at = -1;
        cover_forward(m, in, B, T, without);
        double d = logits_difference(m, s, B * T);
        MESSAGE("  without " << std::string(names[w]) << ": " << d);
        CHECK(d > COVER_MATTERS);
    }
}

static const int COVER_ABLATIONS[] = {ABLATE_NO_DEPTH_SCALE | ABLATE_NO_LN_IN, ABLATE_NO_LN_IN, ABLATE_NO_DEPTH_SCALE,
                                      0};

// F reads LN_in(...), with the siamese model s's LN_in
static void use_ln_in(CoverExtras* e, GPT2* s) {
    for (int k = 0; k < 2; k++) e->ln_in[k][0] = s->params.lnw[k][LN_IN], e->ln_in[k][1] = s->params.lnb[k][LN_IN];
}

TEST_CASE("SiameseNorm with Y covered (LN_y = LN_yf = 0) is Post-Norm, but for the named differences") {
    const int B = 2, T = 12, N = B * T, L = 3, C = 32;
    std::vector<int> in = random_tokens(N, 60, 41);
    for (int ablations : COVER_ABLATIONS) {
        CAPTURE(ablations);
        GPT2 s, p;
        gpt2_init_random(&s, tiny_config(NORM_SIAMESE, ablations), 1);
        perturb(&s, 42);  // gains and shifts off 1 and 0, so that no difference vanishes by accident
        for (int k = 0; k < 2; k++) zero(s.params.lnw[k][LN_Y], L * C), zero(s.params.lnb[k][LN_Y], L * C);
        zero(s.params.lnfw[LN_Y], C), zero(s.params.lnfb[LN_Y], C);
        gpt2_forward(&s, in.data(), nullptr, B, T);

        gpt2_init_random(&p, tiny_config(NORM_POST), 1);
        copy_shared(&p, &s);
        // Post-Norm's LN after sub-layer j is SiameseNorm's LN_x before sub-layer j + 1 (after the last: LN_xf):
        // post's ln1 of block l <- siamese's ln2x of block l; its ln2 of block l <- ln1x of block l + 1 (lnfx)
        for (int l = 0; l < L; l++) {
            copy_row(p.params.lnw[0][LN_X], l, s.params.lnw[1][LN_X], l, C);
            copy_row(p.params.lnb[0][LN_X], l, s.params.lnb[1][LN_X], l, C);
            bool last = l + 1 == L;
            copy_row(p.params.lnw[1][LN_X], l, last ? s.params.lnfw[LN_X] : s.params.lnw[0][LN_X], last ? 0 : l + 1, C);
            copy_row(p.params.lnb[1][LN_X], l, last ? s.params.lnfb[LN_X] : s.params.lnb[0][LN_X], last ? 0 : l + 1, C);
        }
        CoverExtras e;
        e.emb_w = s.params.lnw[0][LN_X], e.emb_b = s.params.lnb[0][LN_X];  // LN_x of sub-layer 0 normalizes h0
        e.last_w = s.params.lnfw[2], e.last_b = s.params.lnfb[2];          // the head's LN_f, after LN_xf
        if (!(ablations & ABLATE_NO_LN_IN))                                 // F reads LN_in(p)
            use_ln_in(&e, &s);
        if (!(ablations & ABLATE_NO_DEPTH_SCALE))                           // the branch scaled by 1/c_l
            for (int l = 0; l < L; l++) e.inv_c[l] = inv_depth_scale(s.config, l);
        cover_forward(&p, in, B, T, e);
        double d = logits_difference(&p, &s, N);
        MESSAGE("post: logits within " << d << " of siamese's, bit for bit: " << same_logits(&p, &s, N));
        CHECK(d <= COVER_BOUND);
        check_each_matters(&p, &s, in, B, T, e);
        if (e.inv_c[0]) {  // 1/c_l is F's last matrix and bias divided by c_l: the same function, not the same weights
            std::vector<real> weights(p.params_memory, p.params_memory + p.num_parameters);
            for (int l = 0; l < L; l++) {
                real inv_c = (real)e.inv_c[l];
                for (const char* name : {"attprojw", "attprojb", "fcprojw", "fcprojb"}) {
                    size_t rows = !strcmp(name, "attprojw") ? C * C : !strcmp(name, "fcprojw") ? 4 * C * C : C;
                    real* w = tensor_of(&p, name) + l * rows;
                    for (size_t i = 0; i < rows; i++) w[i] *= inv_c;
                }
            }
            CoverExtras folded = e;
            for (double& v : folded.inv_c) v = 0;
            cover_forward(&p, in, B, T, folded);
            d = logits_difference(&p, &s, N);  // (W / c) u + b / c is (W u + b) / c rounded otherwise: within rounding
            MESSAGE("post, 1/c_l folded into attproj and fcproj: logits within " << d);
            CHECK(d <= COVER_BOUND);
            memcpy(p.params_memory, weights.data(), weights.size() * sizeof(real));
        }
        // a point of parameter space, not a training regime: LN_y's gains get a gradient (sum over rows of dyh yhat,
        // dyh = dsum, which LN_in and F keep non-zero), so a step moves Y's LayerNorms off 0
        std::vector<int> targets = random_tokens(N, 60, 48);
        gpt2_forward(&s, in.data(), targets.data(), B, T);
        gpt2_zero_grad(&s);
        gpt2_backward(&s);
        double gain_grad = 0;
        for (int k = 0; k < 2; k++)
            for (int i = 0; i < L * C; i++) gain_grad = std::max(gain_grad, (double)std::fabs(s.grads.lnw[k][LN_Y][i]));
        MESSAGE("  the covered LN_y gains' largest gradient: " << gain_grad);
        CHECK(gain_grad > 0);
        gpt2_free(&s);
        gpt2_free(&p);
    }
}

TEST_CASE("SiameseNorm with X covered (LN_x = LN_xf = 0) is Pre-Norm, but for the named differences") {
    const int B = 2, T = 12, N = B * T, L = 3, C = 32;
    std::vector<int> in = random_tokens(N, 60, 43);
    for (int ablations : COVER_ABLATIONS) {
        CAPTURE(ablations);
        GPT2 s, p;
        gpt2_init_random(&s, tiny_config(NORM_SIAMESE, ablations), 1);
        perturb(&s, 44);
        for (int k = 0; k < 2; k++) zero(s.params.lnw[k][LN_X], L * C), zero(s.params.lnb[k][LN_X], L * C);
        zero(s.params.lnfw[LN_X], C), zero(s.params.lnfb[LN_X], C);
        gpt2_forward(&s, in.data(), nullptr, B, T);

        gpt2_init_random(&p, tiny_config(NORM_PRE), 1);
        copy_shared(&p, &s);
        for (int k = 0; k < 2; k++)  // Pre-Norm's LN before sub-layer j is SiameseNorm's LN_y there
            for (int l = 0; l < L; l++) {
                copy_row(p.params.lnw[k][LN_X], l, s.params.lnw[k][LN_Y], l, C);
                copy_row(p.params.lnb[k][LN_X], l, s.params.lnb[k][LN_Y], l, C);
            }
        copy_row(p.params.lnfw[0], 0, s.params.lnfw[2], 0, C);  // LN_f
        copy_row(p.params.lnfb[0], 0, s.params.lnfb[2], 0, C);
        CoverExtras e;                                           // h0 goes in as it is, as in Pre-Norm
        e.last_w = s.params.lnfw[LN_Y], e.last_b = s.params.lnfb[LN_Y];  // the head's LN_yf, before LN_f
        if (!(ablations & ABLATE_NO_LN_IN))                      // F reads LN_in(LN(p)); 1/c_l scales only X
            use_ln_in(&e, &s);
        cover_forward(&p, in, B, T, e);
        double d = logits_difference(&p, &s, N);
        MESSAGE("pre: logits within " << d << " of siamese's, bit for bit: " << same_logits(&p, &s, N));
        CHECK(d <= COVER_BOUND);
        check_each_matters(&p, &s, in, B, T, e);
        gpt2_free(&s);
        gpt2_free(&p);
    }
}

// Mix-LN (post in blocks l < P, pre after): cover Y in blocks l < P and X in the blocks after and at the head. The
// first 2P sub-layers then compute Mix-LN's Post-Norm part (as above); the Pre-Norm part reads Y, which holds
// h0 + the sum of the first 2P sub-layers' outputs, where Mix-LN's continues from the Post-Norm part's normalized
// output. So SiameseNorm computes Mix-LN with its Pre-Norm part restarted from Y, and not Mix-LN.
TEST_CASE("SiameseNorm with Y covered before block P and X after is Mix-LN restarted from Y, not Mix-LN") {
    const int B = 2, T = 12, N = B * T, L = 3, C = 32;
    std::vector<int> in = random_tokens(N, 60, 45);
    for (int ablations : COVER_ABLATIONS)
        for (int P : {1, 2}) {
            CAPTURE(ablations);
            CAPTURE(P);
            GPT2 s, m;
            gpt2_init_random(&s, tiny_config(NORM_SIAMESE, ablations), 1);
            perturb(&s, 46);
            for (int k = 0; k < 2; k++)
                for (int l = 0; l < L; l++) {
                    int slot = l < P ? LN_Y : LN_X;  // what is covered in block l
                    zero(s.params.lnw[k][slot] + (size_t)l * C, C), zero(s.params.lnb[k][slot] + (size_t)l * C, C);
                }
            zero(s.params.lnfw[LN_X], C), zero(s.params.lnfb[LN_X], C);
            gpt2_forward(&s, in.data(), nullptr, B, T);

            gpt2_init_random(&m, tiny_config(NORM_MIX, 0, 60, P), 1);
            copy_shared(&m, &s);
            for (int l = 0; l < L; l++) {
                if (l < P) {  // the Post-Norm part's LNs, as for post; the last (after sub-layer 2P - 1) keeps its
                    copy_row(m.params.lnw[0][LN_X], l, s.params.lnw[1][LN_X], l, C);  // initial values: nothing
                    copy_row(m.params.lnb[0][LN_X], l, s.params.lnb[1][LN_X], l, C);  // reads its output
                    if (l + 1 < P) {
                        copy_row(m.params.lnw[1][LN_X], l, s.params.lnw[0][LN_X], l + 1, C);
                        copy_row(m.params.lnb[1][LN_X], l, s.params.lnb[0][LN_X], l + 1, C);
                    }
                } else {      // the Pre-Norm part's LNs are LN_y
                    for (int k = 0; k < 2; k++) {
                        copy_row(m.params.lnw[k][LN_X], l, s.params.lnw[k][LN_Y], l, C);
                        copy_row(m.params.lnb[k][LN_X], l, s.params.lnb[k][LN_Y], l, C);
                    }
                }
            }
            copy_row(m.params.lnfw[0], 0, s.params.lnfw[2], 0, C);  // LN_f
            copy_row(m.params.lnfb[0], 0, s.params.lnfb[2], 0, C);
            CoverExtras e;
            e.emb_w = s.params.lnw[0][LN_X], e.emb_b = s.params.lnb[0][LN_X];  // the Post-Norm part's, as for post
            if (!(ablations & ABLATE_NO_LN_IN))
                use_ln_in(&e, &s);
            if (!(ablations & ABLATE_NO_DEPTH_SCALE))
                for (int l = 0; l < P; l++) e.inv_c[l] = inv_depth_scale(s.config, l);
            e.last_w = s.params.lnfw[LN_Y], e.last_b = s.params.lnfb[LN_Y];  // the Pre-Norm part's, as for pre
            e.restart_at = 2 * P;
            cover_forward(&m, in, B, T, e);
            double d = logits_difference(&m, &s, N);
            MESSAGE("mix, P = " << P << ": logits within " << d << " of siamese's, bit for bit: "
                                << same_logits(&m, &s, N));
            CHECK(d <= COVER_BOUND);
            check_each_matters(&m, &s, in, B, T, e);  // without the restart: Mix-LN itself, which it is not
            gpt2_free(&s);
            gpt2_free(&m);
        }
}
