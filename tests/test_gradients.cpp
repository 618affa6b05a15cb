// Finite-difference checks of every parameter tensor and of the input embeddings, for every layout of the registry and the
// SiameseNorm ablations, on the float64 build of the CPU reference (-DREAL=double).
//
// The stencil, its bound (1e-6, relative to a tensor's largest checked gradient) and why that number: tests/
// finite_differences.h, shared with the course's autograder (exercises/grader.cpp).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "doctest.h"
#define REFERENCE_CPU_NO_MAIN
#include "../reference_cpu.cpp"
#include "finite_differences.h"

static void report(const char* title, const std::vector<TensorError>& errors) {
    MESSAGE(std::string(title));
    std::string line;
    for (const TensorError& e : errors) {
        char buf[96];
        snprintf(buf, sizeof(buf), "  %-9s %.1e (|g| %.1e)", e.name.c_str(), e.err, e.scale);
        line += buf;
        if (line.size() > 80) {
            MESSAGE(line);
            line.clear();
        }
    }
    if (!line.empty()) MESSAGE(line);
}

static void check_layout(int norm, int ablations, int C = 32, int NH = 4, int setting = 0) {
    Problem p = make_problem(norm, ablations, C, NH, 3, 2, 8, setting);
    GPT2 m;
    init_model(&m, p);
    std::vector<real> g = analytic_gradient(&m, p);
    std::vector<TensorError> errors = check_against_fd(&m, p, g);
    char title[128];
    snprintf(title, sizeof(title), "%s (ablations %d, setting %d, C=%d): worst relative error per tensor",
             LAYOUTS[norm].name, ablations, setting, C);
    report(title, errors);
    double top = 0;  // the model's largest checked gradient
    for (const TensorError& e : errors) top = std::max(top, e.scale);
    for (const TensorError& e : errors) {
        CAPTURE(e.name);
        // LN_k's shift (the QKV-norm's lnkb) adds one vector to every key of a head: every score of a query moves by
        // the same q.b and the softmax does not change, so its gradient is 0. Its analytic gradient and its finite
        // differences must both be 0 within the bound (relative to the model's largest gradient).
        if (e.name == "lnkb") {
            const TensorInfo& t = *std::find_if(m.tensors.begin(), m.tensors.end(),
                                                [](const TensorInfo& x) { return std::string(x.name) == "lnkb"; });
            double fd = 0;
            for (size_t i = 0; i < t.size; i++)
                fd = std::max(fd, std::fabs(finite_difference(&m, p, m.params_memory + t.offset + i)));
            MESSAGE("lnkb (gradient 0): largest |analytic| " << e.scale << ", |finite difference| " << fd);
            CHECK(e.scale < FD_BOUND * top);
            CHECK(fd < FD_BOUND * top);
            continue;
        }
        CHECK(e.err < FD_BOUND);
        // every tensor the layout uses has a gradient to check (no vacuous pass on an all-zero tensor),
        // except LN_in under the no-LN_in ablation, whose gradient must then be exactly zero
        int unused = (ablations & ABLATE_NO_LN_IN) && e.name.size() == 5 && e.name.compare(0, 2, "ln") == 0 &&
                     e.name[3] == 'i';
        if (unused) CHECK(e.scale == 0);
        else CHECK(e.scale > 1e-6);
    }
    // the padded vocabulary rows of wte never receive gradient
    const GPT2Config& c = m.config;
    for (size_t i = (size_t)c.vocab_size * c.channels; i < (size_t)c.padded_vocab_size * c.channels; i++)
        REQUIRE(m.grads.wte[i] == 0);
    gpt2_free(&m);
}

TEST_CASE("finite differences: pre-norm") { check_layout(NORM_PRE, 0); }
TEST_CASE("finite differences: post-norm") { check_layout(NORM_POST, 0); }
TEST_CASE("finite differences: siamese") { check_layout(NORM_SIAMESE, 0); }
TEST_CASE("finite differences: siamese without depth scaling") { check_layout(NORM_SIAMESE, ABLATE_NO_DEPTH_SCALE); }
TEST_CASE("finite differences: siamese without LN_in") { check_layout(NORM_SIAMESE, ABLATE_NO_LN_IN); }
// Mix-LN with P = 1 and 2 of the 3 blocks Post-LN: the post -> pre change at block 1 and at block 2
TEST_CASE("finite differences: mix (1 of 3 blocks Post-LN)") { check_layout(NORM_MIX, 0, 32, 4, 1); }
TEST_CASE("finite differences: mix (2 of 3 blocks Post-LN)") { check_layout(NORM_MIX, 0, 32, 4, 2); }
TEST_CASE("finite differences: deepnorm") { check_layout(NORM_DEEPNORM, 0); }
// the HybridNorm layouts: their QKV-norm's lnq*, lnk*, lnv* (per head, hs = 8) and siamese-hybrid's c1 among them
TEST_CASE("finite differences: hybrid") { check_layout(NORM_HYBRID, 0); }
TEST_CASE("finite differences: hybrid-star") { check_layout(NORM_HYBRID_STAR, 0); }
TEST_CASE("finite differences: siamese-hybrid") { check_layout(NORM_SIAMESE_HYBRID, 0); }
// both ablations in one model (one case less to run): c_l = 1 in both sub-layers, and the MLP's LN_in unused
TEST_CASE("finite differences: siamese-hybrid without depth scaling and without LN_in") {
    check_layout(NORM_SIAMESE_HYBRID, ABLATE_NO_DEPTH_SCALE | ABLATE_NO_LN_IN);
}
// the two baselines: Pre-Norm with the QKV-norm attention (its lnq*, lnk*, lnv*), and Peri-LN (its output
// LayerNorms ln1o*, ln2o* beside pre's ln1*, ln2*)
TEST_CASE("finite differences: pre-qkvnorm") { check_layout(NORM_PRE_QKVNORM, 0); }
TEST_CASE("finite differences: peri") { check_layout(NORM_PERI, 0); }
// Hyper-Connections: its LN_h (ln1h*, ln2h*) and connection weights (hc*s, hc*w, hc*sc), moved off their init like
// every tensor here (so that the dynamic part, W = 0 at the start, is live)
TEST_CASE("finite differences: hc") { check_layout(NORM_HC, 0); }
// C = 18 is not a multiple of the vector width: the plain-loop fallbacks of the matrix products
TEST_CASE("finite differences: odd shape (C=18, 3 heads), every layout") {
    for (int norm = 0; norm < NUM_LAYOUTS; norm++) check_layout(norm, 0, 18, 3, norm == NORM_MIX ? 1 : 0);
}

// dL/dh0 for the input embeddings h0 = wte[tok] + wpe[pos]: with B = 1, perturbing wpe[t, i] perturbs exactly
// h0[t, i], so the finite difference of wpe is dL/dh0, which must equal the gradient the backward pass leaves at
// the bottom of the stream(s): dx[0] (+ dy[0] for the two-stream layouts, whose two streams both start at h0).
TEST_CASE("finite differences: input embeddings dL/dh0, all layouts") {
    for (int norm = 0; norm < NUM_LAYOUTS; norm++) {
        Problem p = make_problem(norm, 0, 32, 4, 3, 1, 8, norm == NORM_MIX ? 1 : 0);
        GPT2 m;
        init_model(&m, p);
        analytic_gradient(&m, p);
        size_t NC = (size_t)p.T * p.config.channels;
        std::vector<real> dh0(m.grads_acts.x, m.grads_acts.x + NC);
        int two = LAYOUTS[norm].streams == 2;
        if (two)
            for (size_t i = 0; i < NC; i++) dh0[i] += m.grads_acts.y[i];
        double worst = 0, scale = 0;
        uint64_t rng = 5;
        std::vector<std::pair<double, double>> pairs;
        for (int k = 0; k < 48; k++) {
            size_t i = (size_t)(random_uniform(&rng) * NC);
            pairs.push_back({finite_difference(&m, p, m.params.wpe + i), dh0[i]});
            scale = std::max(scale, std::fabs((double)dh0[i]));
        }
        for (auto& pr : pairs) worst = std::max(worst, std::fabs(pr.first - pr.second) / scale);
        MESSAGE(std::string(LAYOUTS[norm].name) << ": dL/dh0 worst relative error " << worst << " (|g| " << scale << ")");
        CHECK(scale > 1e-6);
        CHECK(worst < FD_BOUND);
        if (two) {  // the Y stream really carries gradient down to h0
            double ymax = 0;
            for (size_t i = 0; i < NC; i++) ymax = std::max(ymax, std::fabs((double)m.grads_acts.y[i]));
            CHECK(ymax > 1e-3 * scale);
        }
        gpt2_free(&m);
    }
}

// The bound is tight enough to catch the mistakes that matter: the finite differences of the full SiameseNorm model
// against wrong analytic gradients must fail it by orders of magnitude.
TEST_CASE("the finite-difference bound catches wrong gradients") {
    Problem p = make_problem(NORM_SIAMESE, 0);
    GPT2 m;
    init_model(&m, p);
    std::vector<real> right = analytic_gradient(&m, p);
    // the worst per-tensor error of a candidate gradient against the finite differences of the full model
    auto worst_error = [&](const std::vector<real>& candidate) {
        double worst = 0;
        for (const TensorError& e : check_against_fd(&m, p, candidate)) worst = std::max(worst, e.err);
        return worst;
    };
    // the exact gradient of an ablated model at the same parameters: what a backward pass that forgot a piece gives
    auto gradient_without = [&](int ablation) {
        GPT2 other;
        Problem q = p;
        q.config.ablations = ablation;
        gpt2_init_random(&other, q.config, 7);
        memcpy(other.params_memory, m.params_memory, m.num_parameters * sizeof(real));
        std::vector<real> g = analytic_gradient(&other, q);
        gpt2_free(&other);
        return g;
    };

    SUBCASE("a wrong sign") {
        std::vector<real> wrong(right);
        for (real& x : wrong) x = -x;
        double worst = worst_error(wrong);
        MESSAGE("negated gradient: worst error " << worst);
        CHECK(worst > 1e3 * FD_BOUND);
    }
    SUBCASE("a missing 1/c_l (the gradient of the model without depth scaling)") {
        double worst = worst_error(gradient_without(ABLATE_NO_DEPTH_SCALE));
        MESSAGE("missing 1/c_l: worst error " << worst);
        CHECK(worst > 1e3 * FD_BOUND);
    }
    SUBCASE("a dropped LayerNorm (the gradient of the model without LN_in)") {
        double worst = worst_error(gradient_without(ABLATE_NO_LN_IN));
        MESSAGE("dropped LN_in: worst error " << worst);
        CHECK(worst > 1e3 * FD_BOUND);
    }
    CHECK(worst_error(right) < FD_BOUND);  // and the right gradient, held to the same bound, passes
    gpt2_free(&m);
}

// A gradient that is not a number fails the bound (std::max would skip it: max(0.1, NaN) is 0.1).
TEST_CASE("the finite-difference bound fails a gradient that is not a number") {
    Problem p = make_problem(NORM_PRE, 0, 16, 2, 1, 1, 4);
    GPT2 m;
    init_model(&m, p);
    std::vector<real> g = analytic_gradient(&m, p);
    const TensorInfo& ln = m.tensors[2];  // ln1w: 16 entries, all checked
    REQUIRE(std::string(ln.name) == "ln1w");
    g[ln.offset + 3] = NAN;
    for (const TensorError& e : check_against_fd(&m, p, g)) {
        CAPTURE(e.name);
        if (e.name == "ln1w") CHECK(!(e.err < FD_BOUND));
        else CHECK(e.err < FD_BOUND);
    }
    gpt2_free(&m);
}

// The new pieces of the HybridNorm layouts, planted wrong as the NaN above: c1's gradient summed without its x
// (dc1 = sum of du instead of sum of du x) and the QKV-norm's gain gradient without its xhat (d lnqw = sum of dq,
// which is lnqb's gradient). Each fails its tensor by orders of magnitude; every other tensor passes. siamese-hybrid,
// 1 block, B = 1, T = 4, C = 16, 2 heads (hs = 8): every entry of c1, lnqw and lnqb is checked.
TEST_CASE("the finite-difference bound catches a wrong c1 gradient and a wrong QKV-norm gain gradient") {
    Problem p = make_problem(NORM_SIAMESE_HYBRID, 0, 16, 2, 1, 1, 4);
    GPT2 m;
    init_model(&m, p);
    std::vector<real> right = analytic_gradient(&m, p);
    auto tensor = [&](const char* name) {
        return *std::find_if(m.tensors.begin(), m.tensors.end(),
                             [&](const TensorInfo& t) { return std::string(t.name) == name; });
    };
    const TensorInfo c1 = tensor("c1"), lnqw = tensor("lnqw"), lnqb = tensor("lnqb");
    auto check_only = [&](const std::vector<real>& g, const std::string& wrong) {
        for (const TensorError& e : check_against_fd(&m, p, g)) {
            CAPTURE(e.name);
            if (e.name == "lnkb") continue;  // gradient 0, checked in check_layout
            if (e.name == wrong) {
                MESSAGE(wrong << " planted wrong: error " << e.err);
                CHECK(e.err > 1e3 * FD_BOUND);
            } else {
                CHECK(e.err < FD_BOUND);
            }
        }
    };
    SUBCASE("dc1 without x") {
        std::vector<real> g(right);
        SubLayer t = sublayer_tensors(&m, 0);  // the attention's boundary: du = dL/du, the gradients of the last backward
        int C = p.config.channels;
        for (int i = 0; i < C; i++) {
            double s = 0;
            for (size_t r = 0; r < t.n / C; r++) s += t.du[r * C + i];
            g[c1.offset + i] = (real)s;
        }
        check_only(g, "c1");
    }
    SUBCASE("the QKV-norm's gain gradient without xhat") {
        std::vector<real> g(right);
        for (size_t i = 0; i < lnqw.size; i++) g[lnqw.offset + i] = right[lnqb.offset + i];
        check_only(g, "lnqw");
    }
    check_only(right, "");  // the right gradient passes everywhere
    gpt2_free(&m);
}
