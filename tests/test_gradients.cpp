// Finite-difference checks of every parameter tensor and of the input embeddings, for every layout of the registry and the
// SiameseNorm ablations, on the float64 build of the CPU reference (-DREAL=double).
//
// The bound: the five-point stencil f'(p) ~ (f(p-2h) - 8 f(p-h) + 8 f(p+h) - f(p+2h)) / 12h with h = 1e-3 in
// float64 has a truncation error of order h^4 * f^(5) ~ 1e-12 and a rounding error of order eps * |loss| / h ~
// 1e-16 * 4 / 1e-3 ~ 4e-13, against gradients of order 1e-4..1e-1 for the entries we check. So the worst error of a
// tensor, relative to its largest checked gradient, lands near 1e-9 when the backward pass is right; we demand 1e-6.
// A wrong sign gives 2; a missing 1/c_l or a missing LayerNorm gives errors of order 1e-1 (shown at the bottom of
// this file by holding deliberately wrong gradients against the same bound).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "doctest.h"
#define REFERENCE_CPU_NO_MAIN
#include "../reference_cpu.cpp"

#include <algorithm>

static_assert(sizeof(real) == 8, "the finite-difference checks need the float64 build (-DREAL=double)");

static const double FD_STEP = 1e-3;
static const double FD_BOUND = 1e-6;

struct Problem {
    GPT2Config config;
    int B, T;
    std::vector<int> inputs, targets;
};

// a tiny model; parameters are moved off their initial values (gains 1, biases 0) so that no term vanishes
static Problem make_problem(int norm, int ablations, int C = 32, int NH = 4, int L = 3, int B = 2, int T = 8,
                            int setting = 0) {
    Problem p;
    p.config = make_config(L, C, NH, T, 60, norm, ablations, setting);
    p.B = B;
    p.T = T;
    uint64_t rng = 42;
    for (int i = 0; i < B * T; i++) {
        p.inputs.push_back((int)(random_uniform(&rng) * p.config.vocab_size));
        p.targets.push_back((int)(random_uniform(&rng) * p.config.vocab_size));
    }
    return p;
}

static void init_model(GPT2* m, const Problem& p) {
    gpt2_init_random(m, p.config, 7);
    uint64_t rng = 99;
    for (const TensorInfo& t : m->tensors) {
        real* w = m->params_memory + t.offset;
        std::string name = t.name;
        size_t n = name == "wte" ? (size_t)p.config.vocab_size * p.config.channels : t.size;  // padded rows stay 0
        double amount = t.decay ? 0.02 : 0.2;  // weights by 2%-ish of their scale, gains/biases by 0.2
        for (size_t i = 0; i < n; i++) w[i] += (real)(amount * random_normal(&rng));
    }
}

static double loss_of(GPT2* m, const Problem& p) {
    gpt2_forward(m, p.inputs.data(), p.targets.data(), p.B, p.T);
    return m->mean_loss;
}

// dloss/dw by the five-point stencil; w is restored afterwards
static double finite_difference(GPT2* m, const Problem& p, real* w) {
    real saved = *w;
    double f[4];
    const double offsets[4] = {-2, -1, 1, 2};
    for (int k = 0; k < 4; k++) {
        *w = saved + (real)(offsets[k] * FD_STEP);
        f[k] = loss_of(m, p);
    }
    *w = saved;
    return ((f[0] - f[3]) + 8 * (f[2] - f[1])) / (12 * FD_STEP);  // exactly 0 when the loss does not move
}

// indices to check in a tensor: all of a small tensor, else the largest analytic gradients and random others
static std::vector<size_t> pick_entries(const real* grad, size_t n, uint64_t* rng) {
    std::vector<size_t> idx;
    if (n <= 192) {
        for (size_t i = 0; i < n; i++) idx.push_back(i);
        return idx;
    }
    std::vector<size_t> order(n);
    for (size_t i = 0; i < n; i++) order[i] = i;
    std::partial_sort(order.begin(), order.begin() + 12, order.end(),
                      [&](size_t a, size_t b) { return std::fabs(grad[a]) > std::fabs(grad[b]); });
    idx.assign(order.begin(), order.begin() + 12);
    for (int k = 0; k < 12; k++) idx.push_back((size_t)(random_uniform(rng) * n));
    return idx;
}

struct TensorError {
    std::string name;
    double err;       // max |fd - analytic| / max(|analytic|, |fd|) over the checked entries
    double scale;     // max |analytic| over the checked entries
};

// Compares `analytic` (the gradient buffer laid out like the parameters) with central differences of the loss.
static std::vector<TensorError> check_against_fd(GPT2* m, const Problem& p, const std::vector<real>& analytic) {
    std::vector<TensorError> out;
    uint64_t rng = 1234;
    for (const TensorInfo& t : m->tensors) {
        const real* g = analytic.data() + t.offset;
        double worst = 0, scale = 0, fd_scale = 0;
        std::vector<std::pair<double, double>> pairs;
        for (size_t i : pick_entries(g, t.size, &rng)) {
            double fd = finite_difference(m, p, m->params_memory + t.offset + i);
            pairs.push_back({fd, g[i]});
            scale = std::max(scale, std::fabs((double)g[i]));
            fd_scale = std::max(fd_scale, std::fabs(fd));
        }
        double denom = std::max(scale, fd_scale);
        for (auto& pr : pairs) worst = std::max(worst, std::fabs(pr.first - pr.second) / (denom > 0 ? denom : 1));
        out.push_back({t.name, worst, scale});
    }
    return out;
}

static std::vector<real> analytic_gradient(GPT2* m, const Problem& p) {
    loss_of(m, p);
    gpt2_zero_grad(m);
    gpt2_backward(m);
    return std::vector<real>(m->grads_memory, m->grads_memory + m->num_parameters);
}

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
    for (const TensorError& e : errors) {
        CAPTURE(e.name);
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
// C = 18 is not a multiple of the vector width: the plain-loop fallbacks of the matrix products
TEST_CASE("finite differences: odd shape (C=18, 3 heads), every layout") {
    for (int norm = 0; norm < NUM_LAYOUTS; norm++) check_layout(norm, 0, 18, 3, norm == NORM_MIX ? 1 : 0);
}

// dL/dh0 for the input embeddings h0 = wte[tok] + wpe[pos]: with B = 1, perturbing wpe[t, i] perturbs exactly
// h0[t, i], so the finite difference of wpe is dL/dh0, which must equal the gradient the backward pass leaves at
// the bottom of the stream(s): dx[0] (+ dy[0] for siamese, whose two streams both start at h0).
TEST_CASE("finite differences: input embeddings dL/dh0, all layouts") {
    for (int norm = 0; norm < NUM_LAYOUTS; norm++) {
        Problem p = make_problem(norm, 0, 32, 4, 3, 1, 8, norm == NORM_MIX ? 1 : 0);
        GPT2 m;
        init_model(&m, p);
        analytic_gradient(&m, p);
        size_t NC = (size_t)p.T * p.config.channels;
        std::vector<real> dh0(m.grads_acts.x, m.grads_acts.x + NC);
        if (norm == NORM_SIAMESE)
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
        if (norm == NORM_SIAMESE) {  // the Y stream really carries gradient down to h0
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
