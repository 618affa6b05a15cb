// The float64 finite-difference machinery shared by tests/test_gradients.cpp (every parameter of every layout) and
// exercises/grader.cpp (the course's autograder: the tensors one function touches). Include it after the float64
// build of the reference (-DREAL=double, reference_cpu.cpp included as a library).
//
// The bound: the five-point stencil f'(p) ~ (f(p-2h) - 8 f(p-h) + 8 f(p+h) - f(p+2h)) / 12h with h = 1e-3 in
// float64 has a truncation error of order h^4 * f^(5) ~ 1e-12 and a rounding error of order eps * |loss| / h ~
// 1e-16 * 4 / 1e-3 ~ 4e-13, against gradients of order 1e-4..1e-1 for the entries we check. So the worst error of a
// tensor, relative to its largest checked gradient, lands near 1e-9 when the backward pass is right; we demand 1e-6.
// A wrong sign gives 2; a missing 1/c_l or a missing LayerNorm gives errors of order 1e-1 (shown at the bottom of
// tests/test_gradients.cpp by holding deliberately wrong gradients against the same bound).
#pragma once
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

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

// d loss / dw by the five-point stencil, loss() evaluated with *w moved; w is restored afterwards
template <class Loss>
static double five_point(real* w, Loss loss) {
    real saved = *w;
    double f[4];
    const double offsets[4] = {-2, -1, 1, 2};
    for (int k = 0; k < 4; k++) {
        *w = saved + (real)(offsets[k] * FD_STEP);
        f[k] = loss();
    }
    *w = saved;
    return ((f[0] - f[3]) + 8 * (f[2] - f[1])) / (12 * FD_STEP);  // exactly 0 when the loss does not move
}

// dloss/dw of the whole model's loss
static double finite_difference(GPT2* m, const Problem& p, real* w) {
    return five_point(w, [&] { return loss_of(m, p); });
}

// indices to check in a tensor: all of a small tensor, else the largest analytic gradients and random others
// (a gradient that is not a number counts as the largest: it is checked, and fails)
static std::vector<size_t> pick_entries(const real* grad, size_t n, uint64_t* rng) {
    std::vector<size_t> idx;
    if (n <= 192) {
        for (size_t i = 0; i < n; i++) idx.push_back(i);
        return idx;
    }
    auto size = [&](size_t i) { return std::isnan((double)grad[i]) ? INFINITY : std::fabs((double)grad[i]); };
    std::vector<size_t> order(n);
    for (size_t i = 0; i < n; i++) order[i] = i;
    std::partial_sort(order.begin(), order.begin() + 12, order.end(),
                      [&](size_t a, size_t b) { return size(a) > size(b); });
    idx.assign(order.begin(), order.begin() + 12);
    for (int k = 0; k < 12; k++) idx.push_back((size_t)(random_uniform(rng) * n));
    return idx;
}

struct TensorError {
    std::string name;
    double err;       // max |fd - analytic| / max(|analytic|, |fd|) over the checked entries
    double scale;     // max |analytic| over the checked entries
};

// the error of (finite difference, analytic) pairs: the largest difference relative to the largest of either; a
// pair that is not a number gives NaN, which fails every bound
static double worst_relative_error(const std::vector<std::pair<double, double>>& pairs, double* scale = nullptr) {
    double worst = 0, g_scale = 0, fd_scale = 0;
    for (auto& pr : pairs) {
        g_scale = std::max(g_scale, std::fabs(pr.second));
        fd_scale = std::max(fd_scale, std::fabs(pr.first));
    }
    double denom = std::max(g_scale, fd_scale);
    for (auto& pr : pairs) {
        double e = std::fabs(pr.first - pr.second) / (denom > 0 ? denom : 1);
        if (std::isnan(e)) return NAN;
        worst = std::max(worst, e);
    }
    if (scale) *scale = g_scale;
    return worst;
}

// the worst error of n values' analytic gradients `grad` against the stencil of loss() as each value moves
template <class Loss>
static double check_values(real* values, const real* grad, size_t n, Loss loss, uint64_t* rng,
                           double* scale = nullptr) {
    std::vector<std::pair<double, double>> pairs;
    for (size_t i : pick_entries(grad, n, rng)) pairs.push_back({five_point(values + i, loss), grad[i]});
    return worst_relative_error(pairs, scale);
}

// Compares `analytic` (the gradient buffer laid out like the parameters) with central differences of the loss.
static std::vector<TensorError> check_against_fd(GPT2* m, const Problem& p, const std::vector<real>& analytic) {
    std::vector<TensorError> out;
    uint64_t rng = 1234;
    for (const TensorInfo& t : m->tensors) {
        double scale = 0;
        double worst = check_values(m->params_memory + t.offset, analytic.data() + t.offset, t.size,
                                    [&] { return loss_of(m, p); }, &rng, &scale);
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
