/*
exercises/grader.cpp: the autograder of the course unit (docs/exercises.md). It is the reference's own float64
finite-difference check (tests/finite_differences.h: the five-point stencil, bound 1e-6) run on one exercise's
function, on exactly the tensors that function touches, each printed with its error, PASS or FAIL and the equation
that makes it; the first one off names the equation to look at. A forward function is also held, tensor by tensor,
to the reference's forward from the same inputs.

exercises/exercise.py builds it: a copy of reference_cpu.cpp, reference_exercise.cpp, in which exercise N's marked
region (// EXERCISE N BEGIN ... // EXERCISE N END) holds the student's file (its functions renamed), the reference's
own functions (renamed too), and, under the region's names, functions that call the one exercise_variant[N][i] says:
-1 the reference's, k >= 0 the k-th file put in its place (`make test` builds the stub, planted mistakes and the
solution into one program). Usage: grader N VARIANT [NAME OF THE FILE]; exit status 0 PASS, 1 FAIL, 2 internal error.

The verdict's channel: the student's function runs inside this process, so the process's exit status and its stdout
are not the verdict (a leftover exit(0), an abort, a closed or flooded stdout would decide it). exercise.py passes a
pipe's file descriptor (GRADER_REPORT_FD) and writes a nonce on stdin; the grader reads the nonce before any check,
sends one line a check and, once every check has run, the verdict and a last line with the number of checks and
failures, each line tagged with the nonce. exercise.py takes the verdict from that completed report alone, and prints
it itself: a report cut short (the process ended by the function) is a FAIL that says so.
*/
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

static int exercise_variant[9][2];  // [exercise][function of its region]: -1 the reference's, k the k-th variant

#define REFERENCE_CPU_NO_MAIN
#include "reference_exercise.cpp"
#include "tests/finite_differences.h"

// ----------------------------------------------------------------------------------------------------------------
// what the grader prints: one line a check, then the verdict; and the report (above) of both to exercise.py

static FILE* report_file = nullptr;  // the report's pipe (GRADER_REPORT_FD), or none when run by hand
static char report_nonce[80];        // exercise.py's nonce, from stdin: it tags every line of the report

static void report_line(const char* kind, const std::string& text) {
    if (!report_file) return;
    fprintf(report_file, "%s %s %s\n", report_nonce, kind, text.c_str());
    fflush(report_file);  // line by line: a report cut short still says how far the checks got
}

[[noreturn]] static void internal(const char* format, ...) {
    va_list args, copy;
    va_start(args, format);
    va_copy(copy, args);
    char message[512];
    vsnprintf(message, sizeof(message), format, copy);
    va_end(copy);
    va_end(args);
    fprintf(stderr, "error: internal (the grader, not your function): %s\n", message);
    report_line("internal", message);
    exit(2);
}

static void open_report() {
    const char* fd = getenv("GRADER_REPORT_FD");
    if (!fd) return;
    size_t n = fgets(report_nonce, sizeof(report_nonce), stdin) ? strcspn(report_nonce, "\n") : 0;
    report_nonce[n] = 0;
    if (n == 0) internal("GRADER_REPORT_FD is set, but no nonce came on stdin");
    report_file = fdopen(atoi(fd), "w");
    if (!report_file) internal("cannot write the report to file descriptor %s (GRADER_REPORT_FD)", fd);
}

struct Miss {
    std::string what, where, equation, hint;
};
static int checks = 0;
static std::vector<Miss> misses;  // the failed checks, in the order printed

// err < bound passes (NaN and infinity fail); INFINITY stands for "no gradient at all"
static bool report(const std::string& what, const std::string& where, double err, double bound,
                   const std::string& equation, const std::string& hint = "") {
    bool pass = err < bound;
    checks++;
    if (!pass) misses.push_back({what, where, equation, hint});
    char e[32];
    if (std::isinf(err)) snprintf(e, sizeof(e), "%8s", "no grad");
    else snprintf(e, sizeof(e), "%8.1e", err);
    printf("    %-32s %s  %s   %s\n", what.c_str(), e, pass ? "PASS" : "FAIL", equation.c_str());
    report_line(pass ? "PASS" : "FAIL", what);
    return pass;
}

// a number as the report prints it (NaN as "nan", whatever its sign)
static std::string number(double x) {
    char buf[32];
    snprintf(buf, sizeof(buf), "%.6g", std::fabs(x) >= 0 ? x : std::fabs(x));
    return buf;
}

static double worse(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); }

// the largest difference of a from the reference's r over n values, relative to the largest of r
static double difference(const real* a, const real* r, size_t n) {
    double d = 0, scale = 0;
    for (size_t i = 0; i < n; i++) {
        d = worse(d, std::fabs((double)a[i] - (double)r[i]));
        scale = std::max(scale, std::fabs((double)r[i]));
    }
    return d / (scale > 0 ? scale : 1);
}

// A forward is held to the reference's from the same inputs: the same pieces in the same order give the same bits;
// another order of the same float64 operations (z / c_l for z * (1/c_l), a sum split in two) moves a value by a few
// units of 1.1e-16; a wrong equation moves it by 1e-2..1. 1e-10 sits between them.
static const double SAME_BOUND = 1e-10;

// the worst finite-difference error of n values' analytic gradients, each moved in turn while loss() is watched;
// INFINITY where neither the gradient nor the loss moves at all (nothing to compare: no gradient reaches it)
static uint64_t fd_rng = 1234;
template <class Loss>
static double fd_error(real* values, const real* grad, size_t n, Loss loss) {
    std::vector<std::pair<double, double>> pairs;
    for (size_t i : pick_entries(grad, n, &fd_rng)) pairs.push_back({five_point(values + i, loss), grad[i]});
    double scale = 0;
    double err = worst_relative_error(pairs, &scale);
    double fd_scale = 0;
    for (auto& pr : pairs) fd_scale = std::max(fd_scale, std::fabs(pr.first));
    return !std::isnan(err) && scale == 0 && fd_scale == 0 ? INFINITY : err;
}

// ----------------------------------------------------------------------------------------------------------------
// the model the exercises run: tiny, parameters moved off their initial values (tests/finite_differences.h)

static const int L_ = 2, C_ = 16, NH_ = 2, B_ = 2, T_ = 4;

// The loss with the forward pass run again from sub-layer s0 up (s0 = 2L: the head only), from the activations below
// it as they are: what the finite difference of a stream entering sub-layer s0 needs. It is gpt2_forward's loop and
// loss from s0 on; Model checks that from 0 it gives gpt2_forward's loss, bit for bit.
static double loss_from(GPT2* m, int s0) {
    const GPT2Config& c = m->config;
    int N = m->B * m->T;
    for (int s = s0; s < 2 * c.num_layers; s++) run_sublayer(sublayer_tensors(m, s), FORWARD);
    run_head(head_tensors(m), FORWARD);
    ActivationTensors* a = &m->acts;
    softmax_forward(a->probs, a->logits, N, c.vocab_size, c.padded_vocab_size);
    crossentropy_forward(a->losses, a->probs, m->targets, N, c.padded_vocab_size);
    double sum = 0;
    for (int i = 0; i < N; i++) sum += a->losses[i];
    return (real)(sum / N);
}

struct Model {
    Problem p;
    GPT2 m;
    Model(const char* layout, int ablations = 0) {
        int norm = find_layout(layout);
        if (norm < 0) internal("the registry has no layout '%s'", layout);
        p = make_problem(norm, ablations, C_, NH_, L_, B_, T_);
        init_model(&m, p);
        double loss = forward();
        if (loss_from(&m, 0) != loss) internal("loss_from(0) is not gpt2_forward's loss: has gpt2_forward changed?");
    }
    ~Model() { gpt2_free(&m); }
    double forward() { return loss_of(&m, p); }
    void forward_backward() {
        forward();
        gpt2_zero_grad(&m);
        gpt2_backward(&m);
    }
    std::vector<real> acts() const { return {m.acts_memory, m.acts_memory + m.num_activations}; }
    std::vector<real> dacts() const { return {m.grads_acts_memory, m.grads_acts_memory + m.num_activation_grads}; }
    std::vector<real> grads() const { return {m.grads_memory, m.grads_memory + m.num_parameters}; }
    size_t n() const { return (size_t)p.B * p.T * p.config.channels; }  // the elements of a (B,T,C) tensor
    const TensorInfo& tensor(const std::string& name) const {
        for (const TensorInfo& t : m.tensors)
            if (name == t.name) return t;
        internal("the model has no tensor '%s'", name.c_str());
    }
};

// which function of exercise n's region runs: -1 the reference's, k >= 0 the k-th variant
static void use(int n, int function, int variant) { exercise_variant[n][function] = variant; }

// ----------------------------------------------------------------------------------------------------------------
// the tensors of sub-layer s (or the head, s = 2L) by the names the equations give them

static real* sublayer_field(const SubLayer& t, const std::string& name) {
    const struct { const char* name; real* p; } fields[] = {
        {"x", t.x},    {"y", t.y},     {"xh", t.xh},       {"yh", t.yh},       {"sum", t.sum}, {"u", t.u},
        {"z", t.z},    {"x'", t.x_out}, {"y'", t.y_out},   {"dx", t.dx},       {"dy", t.dy}, {"dxh", t.dxh},
        {"dyh", t.dyh}, {"dsum", t.dsum}, {"du", t.du},       {"dz", t.dz},       {"dx'", t.dx_out}, {"dy'", t.dy_out},
    };
    for (auto& f : fields)
        if (name == f.name) return f.p;
    internal("SubLayer has no tensor '%s'", name.c_str());
}

static real* head_field(const Head& t, const std::string& name) {
    const struct { const char* name; real* p; } fields[] = {
        {"x", t.x},   {"y", t.y},   {"xf", t.xf},   {"yf", t.yf},   {"sum", t.sum}, {"hf", t.hf},
        {"dx", t.dx}, {"dy", t.dy}, {"dxf", t.dxf}, {"dyf", t.dyf}, {"dsum", t.dsum}, {"dhf", t.dhf},
    };
    for (auto& f : fields)
        if (name == f.name) return f.p;
    if (name == "logits") return t.m->acts.logits;
    internal("Head has no tensor '%s'", name.c_str());
}

// the offset of tensor `name` of scope s in the activations (a gradient's: in their gradients, the same layout), and
// its size
static std::pair<size_t, size_t> locate(Model& M, int s, const std::string& name) {
    GPT2* m = &M.m;
    bool head = s == 2 * m->config.num_layers, grad = name[0] == 'd';
    real* p = head ? head_field(head_tensors(m), name) : sublayer_field(sublayer_tensors(m, s), name);
    real* base = grad ? m->grads_acts_memory : m->acts_memory;
    if (!p) internal("tensor '%s' of scope %d is not allocated", name.c_str(), s);
    size_t size = name == "logits" ? (size_t)m->B * m->T * m->config.padded_vocab_size : M.n();
    return {(size_t)(p - base), size};
}

static std::string scope_name(const GPT2Config& c, int s) {
    if (s == 2 * c.num_layers) return "the head";
    char buf[96];
    int l = s / 2;
    if (sublayer_kind(c, s) == SUBLAYER_SIAMESE || sublayer_kind(c, s) == SUBLAYER_SIAMESE_C1)
        snprintf(buf, sizeof(buf), "sub-layer %d (block %d, %s, c_l = %.4g)", s, l, s % 2 ? "MLP" : "attention",
                 1 / inv_depth_scale(c, l));
    else snprintf(buf, sizeof(buf), "sub-layer %d (block %d, %s)", s, l, s % 2 ? "MLP" : "attention");
    return buf;
}

// ----------------------------------------------------------------------------------------------------------------
// the checks: a forward against the reference's forward, a backward against the finite differences

struct Equation {
    const char* tensor;    // its name in a SubLayer or the Head (sublayer_field, head_field)
    const char* equation;  // the forward's line that makes it
};

// For each scope (sub-layer, or the head at 2L) of the list: the reference's forward of the whole model, then
// variant v's forward of that scope alone from the same inputs, every other activation NaN first (so that a tensor
// it does not write stays NaN, not the reference's); each of its tensors against the reference's. Then the loss
// with v's forward everywhere, from activations that are all NaN but what the encoder writes.
static void check_forward(Model& M, int n, int v, const std::vector<int>& scopes,
                          const std::vector<Equation>& tensors) {
    GPT2* m = &M.m;
    const GPT2Config& c = m->config;
    use(n, 0, -1);
    double reference_loss = M.forward();
    std::vector<real> R = M.acts();
    std::vector<double> worst(tensors.size(), 0);
    std::vector<int> first(tensors.size(), -1);
    auto poison = [&](int s) {
        std::fill(m->acts_memory, m->acts_memory + m->num_activations, (real)NAN);
        for (const char* input : {"x", "y"}) {
            if (input[0] == 'y' && layout_of(c).streams == 1) continue;
            auto [offset, size] = locate(M, s, input);
            memcpy(m->acts_memory + offset, R.data() + offset, size * sizeof(real));
        }
    };
    for (int s : scopes) {
        poison(s);
        use(n, 0, v);
        if (s == 2 * c.num_layers) run_head(head_tensors(m), FORWARD);
        else run_sublayer(sublayer_tensors(m, s), FORWARD);
        for (size_t i = 0; i < tensors.size(); i++) {
            auto [offset, size] = locate(M, s, tensors[i].tensor);
            double d = difference(m->acts_memory + offset, R.data() + offset, size);
            if (!(d < SAME_BOUND) && first[i] < 0) first[i] = s;
            worst[i] = worse(worst[i], d);
        }
        memcpy(m->acts_memory, R.data(), R.size() * sizeof(real));
        use(n, 0, -1);
    }
    for (size_t i = 0; i < tensors.size(); i++)
        report(tensors[i].tensor, first[i] < 0 ? "" : scope_name(c, first[i]), worst[i], SAME_BOUND,
               tensors[i].equation);
    use(n, 0, v);
    std::fill(m->acts_memory, m->acts_memory + m->num_activations, (real)NAN);
    double loss = M.forward();
    report("the loss", "", std::fabs(loss - reference_loss) / std::fabs(reference_loss), SAME_BOUND,
           "yours " + number(loss) + ", the reference's " + number(reference_loss));
    use(n, 0, -1);
}

// A finite-difference target of scope s: parameters ("F": the sub-layer's attention or MLP weights; "LN_x" and the
// other slot names: its LayerNorm's gain and shift, of its block; "wte", "lnf": whole tensors by name) or a stream
// entering the scope ("dx", "dy": the stream x or y moved, the forward run again from s).
static std::vector<std::string> target_params(Model& M, int s, const std::string& what) {
    const GPT2Config& c = M.m.config;
    const LayoutInfo& layout = layout_of(c);
    int k = s % 2;
    if (what == "F") {
        if (k == 0) return {"qkvw", "qkvb", "attprojw", "attprojb"};
        return {"fcw", "fcb", "fcprojw", "fcprojb"};
    }
    const char* slots[] = {"LN_x", "LN_y", "LN_in"};
    for (int j = 0; j < 3; j++)
        if (what == slots[j] || (what == "LN" && j == 0)) {
            if (j >= layout.norms[k] || !layout.norm_names[k][2 * j]) internal("%s has no %s", layout.name, what.c_str());
            const char* const* names = layout.norm_names[k] + 2 * j;
            return {names[0], names[1]};
        }
    for (int j = 0; j < layout.head_norms; j++) {
        std::string gain = layout.head_norm_names[2 * j];
        if (what == gain.substr(0, gain.size() - 1)) return {gain, layout.head_norm_names[2 * j + 1]};
    }
    return {what};  // a whole tensor: wte
}

static std::string target_label(Model& M, int s, const std::string& what) {
    if (what[0] == 'd') return what;
    std::string label;
    std::vector<std::string> names = target_params(M, s, what);
    for (const std::string& name : names) label += (label.empty() ? "" : " ") + name;
    if (s < 2 * M.m.config.num_layers) label += " [" + std::to_string(s / 2) + "]";
    return label;
}

// the finite-difference error of one target of scope s, against the analytic gradients grads and dacts
static double check_target(Model& M, int s, const std::string& what, const std::vector<real>& grads,
                           const std::vector<real>& dacts) {
    GPT2* m = &M.m;
    int L = m->config.num_layers;
    if (what[0] == 'd') {  // the stream x or y entering scope s
        auto [offset, size] = locate(M, s, what.substr(1));
        M.forward();       // the activations below s as the parameters make them
        return fd_error(m->acts_memory + offset, dacts.data() + offset, size, [&] { return loss_from(m, s); });
    }
    double worst = 0;
    for (const std::string& name : target_params(M, s, what)) {
        const TensorInfo& t = M.tensor(name);
        size_t offset = t.offset, size = t.size;
        if (s < 2 * L && name != "wte") size /= L, offset += (size_t)(s / 2) * size;  // block s/2's slice
        if (name == "wte") size = (size_t)m->config.vocab_size * m->config.channels;   // not the padded rows
        worst = worse(worst, fd_error(m->params_memory + offset, grads.data() + offset, size,
                                      [&] { return M.forward(); }));
    }
    return worst;
}

struct Target {
    const char* what;      // for check_target
    const char* equation;  // of the backward, the line that makes this gradient
};

// The finite differences of the targets of each scope, from the top down (the order the backward runs), against the
// gradients of the forward and backward that exercise_variant says; `compare` names the scope's gradients that are
// held to the reference's backward where one fails (a hint: a function may keep its intermediates elsewhere).
static void check_backward(Model& M, int n, const std::vector<int>& scopes, const std::vector<Target>& targets,
                           const std::vector<const char*>& compare) {
    GPT2* m = &M.m;
    const GPT2Config& c = m->config;
    int variant[2] = {exercise_variant[n][0], exercise_variant[n][1]};
    M.forward_backward();
    std::vector<real> grads = M.grads(), dacts = M.dacts();
    use(n, 0, -1), use(n, 1, -1);
    M.forward_backward();
    std::vector<real> reference_dacts = M.dacts();
    use(n, 0, variant[0]), use(n, 1, variant[1]);
    for (int s : scopes) {
        printf("  %s\n", scope_name(c, s).c_str());
        size_t missed = misses.size();
        for (const Target& t : targets)
            report(target_label(M, s, t.what), scope_name(c, s), check_target(M, s, t.what, grads, dacts), FD_BOUND,
                   t.equation);
        if (misses.size() == missed || compare.empty()) continue;
        std::string line;
        for (const char* name : compare) {
            auto [offset, size] = locate(M, s, name);
            double d = difference(dacts.data() + offset, reference_dacts.data() + offset, size);
            char buf[64];
            snprintf(buf, sizeof(buf), "%s%s %s", line.empty() ? "" : ", ", name,
                     d < SAME_BOUND ? "the same" : "differs");
            line += buf;
        }
        misses[missed].hint = "beside the reference's backward at " + scope_name(c, s) + ": " + line;
    }
}

// every scope of a layout's sub-layers of one kind
static std::vector<int> sublayers(Model& M, SubLayerKind kind, bool top_down) {
    std::vector<int> s;
    for (int i = 0; i < 2 * M.m.config.num_layers; i++)
        if (sublayer_kind(M.m.config, i) == kind) s.push_back(i);
    if (top_down) std::reverse(s.begin(), s.end());
    return s;
}

// ----------------------------------------------------------------------------------------------------------------
// exercise 1: layernorm_backward, on one LayerNorm alone, then in the whole SiameseNorm model

static void exercise_1(int v) {
    use(1, 0, v);
    const int N = 20, C = C_;  // 20 rows: past the reference's chunks of 16
    std::vector<real> inp(N * C), w(C), b(C), dout(N * C), out(N * C), mean(N), rstd(N);
    uint64_t rng = 5;
    for (int i = 0; i < N * C; i++) inp[i] = (real)(0.3 * (i / C) + 1.5 * random_normal(&rng));
    for (int i = 0; i < C; i++) w[i] = (real)(1 + 0.3 * random_normal(&rng)), b[i] = (real)(0.3 * random_normal(&rng));
    for (int i = 0; i < N * C; i++) dout[i] = (real)random_normal(&rng);
    auto loss = [&] {  // sum(dout * LN(inp)): its gradient by out is dout
        layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
        double s = 0;
        for (int i = 0; i < N * C; i++) s += (double)dout[i] * out[i];
        return s;
    };
    auto backward = [&](real fill, std::vector<real>* dinp, std::vector<real>* dw, std::vector<real>* db) {
        dinp->assign(N * C, fill), dw->assign(C, fill), db->assign(C, fill);
        loss();
        layernorm_backward(dinp->data(), dw->data(), db->data(), dout.data(), inp.data(), w.data(), mean.data(),
                           rstd.data(), N, C);
    };
    std::vector<real> dinp, dw, db;
    backward(0, &dinp, &dw, &db);
    auto error = [&](std::vector<real>& values, const std::vector<real>& grad) {
        std::vector<std::pair<double, double>> pairs;
        for (size_t i = 0; i < values.size(); i++) pairs.push_back({five_point(&values[i], loss), grad[i]});
        return worst_relative_error(pairs);
    };
    printf("  one LayerNorm, %d rows of %d (loss = sum(dout * LN(x)), so dL/dLN(x) = dout):\n", N, C);
    report("db", "", error(b, db), FD_BOUND, "db += sum over the rows of dout");
    report("dw", "", error(w, dw), FD_BOUND, "dw += sum over the rows of xhat * dout");
    // what an equation of dx that is off breaks: LN(x + a) = LN(x) for a constant a, so each row of dx sums to 0
    // (the - mean(g) term); and sum_i dx_i xhat_i = rstd sum_i g_i xhat_i (1 - mean(xhat^2)) (the - xhat mean(g xhat)
    // term: near 0, not 0, for eps's sake)
    double row_sum = 0, row_proj = 0;
    for (int r = 0; r < N; r++) {
        double sum = 0, absum = 0, proj = 0, gx = 0, xx = 0;
        for (int i = 0; i < C; i++) {
            double xhat = (inp[r * C + i] - mean[r]) * rstd[r], g = w[i] * dout[r * C + i];
            sum += dinp[r * C + i], absum += std::fabs(dinp[r * C + i]);
            proj += dinp[r * C + i] * xhat, gx += g * xhat, xx += xhat * xhat;
        }
        double want = rstd[r] * gx * (1 - xx / C);
        row_sum = worse(row_sum, std::fabs(sum) / (absum > 0 ? absum : 1));
        row_proj = worse(row_proj, std::fabs(proj - want) / (std::fabs(want) + absum * 1e-3));
    }
    std::string dx_hint;
    if (!(row_sum < 1e-9))
        dx_hint = "a row of your dx sums to " + number(row_sum) + " times the sum of its |dx|, not to 0: LN(x + a) = "
                  "LN(x) for a constant a, so the rows of dx sum to 0. That is the - mean(g) term";
    else if (!(row_proj < 1e-6))
        dx_hint = "your rows of dx sum to 0 (the - mean(g) term is right), but dx . xhat is not rstd g.xhat (1 - "
                  "mean(xhat^2)): the - xhat mean(g xhat) term, or g = w dout in it";
    report("dx", "", error(inp, dinp), FD_BOUND, "dx += rstd (g - mean(g) - xhat mean(g xhat)),  g = w dout", dx_hint);
    std::vector<real> dinp2, dw2, db2;
    backward((real)0.25, &dinp2, &dw2, &db2);
    double acc = 0;
    for (auto [got, want] : {std::make_pair(&dinp2, &dinp), std::make_pair(&dw2, &dw), std::make_pair(&db2, &db)}) {
        for (real& g : *got) g -= (real)0.25;
        acc = worse(acc, difference(got->data(), want->data(), want->size()));
    }
    report("dx, dw, db accumulate", "", acc, SAME_BOUND, "each adds (+=) to what the buffer holds",
           "started from 0.25 instead of 0, dx, dw or db did not end 0.25 above what they end from 0: a backward "
           "function adds into its gradients (+=), as where a stream feeds two consumers (y: dy += dy', then "
           "dy += LN_y'(dyh))");

    Model M("siamese");
    M.forward_backward();
    std::vector<TensorError> errors = check_against_fd(&M.m, M.p, M.grads());
    double worst = -1;
    std::string worst_name;
    for (const TensorError& e : errors)
        if (!std::isnan(worst) && !(e.err <= worst)) worst = e.err, worst_name = e.name;  // NaN is the worst
    printf("  the whole SiameseNorm model (L=%d, C=%d; every gradient passes through a LayerNorm), all %zu tensors:\n",
           L_, C_, errors.size());
    report("worst: " + worst_name, "", worst, FD_BOUND, "every LayerNorm's dx, dw, db");
}

// ----------------------------------------------------------------------------------------------------------------
// exercises 2 to 5: the layouts' functions in a model

static const std::vector<Equation> SIAMESE_FORWARD = {
    {"xh", "xh = LN_x(x)"},  {"yh", "yh = LN_y(y)"},           {"sum", "sum = xh + yh"}, {"u", "u = LN_in(sum)"},
    {"z", "z = F(u)"},       {"x'", "x' = xh + z / c_l"},      {"y'", "y' = y + z"},
};

static const std::vector<Target> SIAMESE_BACKWARD = {
    {"F", "dz = dx' / c_l + dy';  du = F'(dz)"},
    {"LN_in", "dsum = LN_in'(du)"},
    {"LN_y", "dyh += dsum;  dy += LN_y'(dyh)"},
    {"LN_x", "dxh = dx' + dsum;  dx += LN_x'(dxh)"},
    {"dy", "dy = dy' + LN_y'(dyh)  (the identity path and LN_y's, both +=)"},
    {"dx", "dx = LN_x'(dxh)"},
};

// the same tensors, by the forward's equation that uses them (exercise 2: its gradients are the reference's
// backward's, against the stencil of the student's forward)
static const std::vector<Target> SIAMESE_FORWARD_TARGETS = {
    {"F", "z = F(u)"},          {"LN_in", "u = LN_in(sum)"},          {"LN_y", "yh = LN_y(y)"},
    {"LN_x", "xh = LN_x(x)"},   {"dy", "y' = y + z"},               {"dx", "x' = xh + z / c_l"},
};

static void exercise_2(int v) {
    {
        Model M("siamese");
        printf("  your forward of each sub-layer against the reference's from the same x and y (relative, bound "
               "%.0e; what it does not write stays NaN):\n", SAME_BOUND);
        check_forward(M, 2, v, sublayers(M, SUBLAYER_SIAMESE, false), SIAMESE_FORWARD);
        printf("  the gradients (the reference's backward) against the finite differences of your forward:\n");
        use(2, 0, v);
        check_backward(M, 2, sublayers(M, SUBLAYER_SIAMESE, true), SIAMESE_FORWARD_TARGETS, {});
        use(2, 0, -1);
    }
    Model A("siamese", ABLATE_NO_LN_IN);
    printf("  --no-ln-in (t.has_ln_in = 0: u = sum, z = F(sum)), your forward against the reference's:\n");
    check_forward(A, 2, v, sublayers(A, SUBLAYER_SIAMESE, false), {{"z", "z = F(sum) when t.has_ln_in is 0"},
                                                                   {"x'", "x' = xh + z / c_l"}});
}

static void exercise_3(int v) {
    {
        Model M("siamese");
        use(3, 0, v);
        check_backward(M, 3, sublayers(M, SUBLAYER_SIAMESE, true), SIAMESE_BACKWARD,
                       {"dz", "du", "dsum", "dxh", "dyh", "dy", "dx"});
    }
    use(3, 0, -1);
    Model A("siamese", ABLATE_NO_LN_IN);
    printf("  --no-ln-in (t.has_ln_in = 0: u = sum, so F's gradient goes to dsum), the top sub-layer:\n");
    use(3, 0, v);
    check_backward(A, 3, {2 * L_ - 1}, {{"F", "dsum += F'(dz) when t.has_ln_in is 0"},
                                        {"LN_x", "dxh = dx' + dsum;  dx += LN_x'(dxh)"}}, {});
}

static void exercise_4(int v) {
    Model M("siamese");
    int head = 2 * L_;
    printf("  siamese_head_forward against the reference's, from the same x and y (relative, bound %.0e; what it "
           "does not write stays NaN):\n", SAME_BOUND);
    check_forward(M, 4, v, {head}, {{"xf", "xf = LN_xf(x)"}, {"yf", "yf = LN_yf(y)"}, {"sum", "sum = xf + yf"},
                                 {"hf", "hf = LN_f(sum)"}, {"logits", "logits = hf wte^T  (classifier_forward)"}});
    printf("  siamese_head_backward (after the reference's forward) against the finite differences:\n");
    use(4, 0, -1), use(4, 1, v);
    check_backward(M, 4, {head},
                   {{"lnf", "dhf = dlogits wte  (classifier_backward);  dsum = LN_f'(dhf)"},
                    {"lnfx", "dxf += dsum;  dx += LN_xf'(dxf)"},
                    {"lnfy", "dyf += dsum;  dy += LN_yf'(dyf)"},
                    {"dx", "dx += LN_xf'(dxf)"},
                    {"dy", "dy += LN_yf'(dyf)"},
                    // last: wte's gradient is also the embeddings', from the dx and dy above, through the model
                    {"wte", "dwte += dlogits^T hf  (classifier_backward), and from dx, dy through the model"}},
                   {"dhf", "dsum", "dxf", "dyf", "dx", "dy"});
}

static void exercise_5(int v) {
    Model M("post");
    printf("  post_sublayer_forward against the reference's from the same x (relative, bound %.0e; what it does not "
           "write stays NaN):\n", SAME_BOUND);
    check_forward(M, 5, v, sublayers(M, SUBLAYER_POST, false),
                  {{"z", "z = F(x)"}, {"sum", "sum = x + z"}, {"x'", "x' = LN(sum)"}});
    printf("  post_sublayer_backward (after the reference's forward) against the finite differences:\n");
    use(5, 0, -1), use(5, 1, v);
    check_backward(M, 5, sublayers(M, SUBLAYER_POST, true),
                   {{"LN", "dsum = LN'(dx')"},
                    {"F", "dz += dsum;  dx += F'(dz)"},
                    {"dx", "dx = dsum + F'(dz)  (x feeds the sum and F: both add into dx)"}},
                   {"dsum", "dz", "dx"});
}

// ----------------------------------------------------------------------------------------------------------------
// exercise 6: siamese_c1's sub-layer (siamese-hybrid's attention), forward and backward; 7: the QKV-norm's backward,
// on one QKV-norm alone, then in siamese-hybrid's attention; 8: Pre-Norm's sub-layer, forward and backward

static void exercise_6(int v) {
    Model M("siamese-hybrid");
    printf("  siamese_c1_sublayer_forward (siamese-hybrid's attention sub-layers) against the reference's from the "
           "same x\n  and y (relative, bound %.0e; what it does not write stays NaN):\n", SAME_BOUND);
    check_forward(M, 6, v, sublayers(M, SUBLAYER_SIAMESE_C1, false),
                  {{"yh", "yh = LN_y(y)"}, {"u", "u = c1 x + yh"}, {"z", "z = F(u)"}, {"x'", "x' = x + z / c_l"},
                   {"y'", "y' = y + z"}});
    printf("  siamese_c1_sublayer_backward (after the reference's forward) against the finite differences:\n");
    use(6, 0, -1), use(6, 1, v);
    check_backward(M, 6, sublayers(M, SUBLAYER_SIAMESE_C1, true),
                   {{"F", "dz = dx' / c_l + dy';  du = F'(dz)"},
                    {"c1", "dc1 += the sum over tokens of du x"},
                    {"LN_y", "dyh += du;  dy += LN_y'(dyh)"},
                    {"dy", "dy = dy' + LN_y'(dyh)  (the identity path and LN_y's, both +=)"},
                    {"dx", "dx = dx' + c1 du  (x reaches x' directly and u through c1: both add into dx)"}},
                   {"dz", "du", "dyh", "dy", "dx"});
}

static void exercise_7(int v) {
    use(7, 0, v);
    const int N = 20, C = C_, NH = NH_, hs = C / NH, R = N * 3 * NH;  // 20 tokens: past the reference's chunks of 16
    std::vector<real> inp(N * 3 * C), out(N * 3 * C), dout(N * 3 * C), w(3 * hs), b(3 * hs), mean(R), rstd(R);
    uint64_t rng = 7;
    for (int i = 0; i < N * 3 * C; i++) inp[i] = (real)(0.3 * (i / hs % 5) + 1.5 * random_normal(&rng));
    for (int i = 0; i < 3 * hs; i++)
        w[i] = (real)(1 + 0.3 * random_normal(&rng)), b[i] = (real)(0.3 * random_normal(&rng));
    for (int i = 0; i < N * 3 * C; i++) dout[i] = (real)random_normal(&rng);
    const real* wp[3] = {&w[0], &w[hs], &w[2 * hs]};
    const real* bp[3] = {&b[0], &b[hs], &b[2 * hs]};
    auto loss = [&] {  // sum(dout * QKVnorm(inp)): its gradient by out is dout
        qkv_norm_forward(out.data(), mean.data(), rstd.data(), inp.data(), wp, bp, N, C, NH);
        double s = 0;
        for (int i = 0; i < N * 3 * C; i++) s += (double)dout[i] * out[i];
        return s;
    };
    auto backward = [&](real fill, std::vector<real>* dinp, std::vector<real>* dw, std::vector<real>* db) {
        dinp->assign(N * 3 * C, fill), dw->assign(3 * hs, fill), db->assign(3 * hs, fill);
        loss();
        real* dwp[3] = {&(*dw)[0], &(*dw)[hs], &(*dw)[2 * hs]};
        real* dbp[3] = {&(*db)[0], &(*db)[hs], &(*db)[2 * hs]};
        qkv_norm_backward(dinp->data(), dwp, dbp, dout.data(), inp.data(), wp, mean.data(), rstd.data(), N, C, NH);
    };
    std::vector<real> dinp, dw, db;
    backward(0, &dinp, &dw, &db);
    auto error = [&](std::vector<real>& values, const std::vector<real>& grad) {
        std::vector<std::pair<double, double>> pairs;
        for (size_t i = 0; i < values.size(); i++) pairs.push_back({five_point(&values[i], loss), grad[i]});
        return worst_relative_error(pairs);
    };
    printf("  one QKV-norm, %d tokens, %d heads of %d channels in each of q, k, v (loss = sum(dout * out)):\n", N,
           NH, hs);
    report("db (q, k, v)", "", error(b, db), FD_BOUND, "db_j += sum over the tokens and heads of dout_j");
    report("dw (q, k, v)", "", error(w, dw), FD_BOUND, "dw_j += sum over the tokens and heads of xhat * dout_j");
    // what the rows of dx say: each (token, part, head) row is one LayerNorm of hs channels, so it sums to 0
    double row_sum = 0;
    for (int r = 0; r < R; r++) {
        double sum = 0, absum = 0;
        for (int i = 0; i < hs; i++) sum += dinp[r * hs + i], absum += std::fabs(dinp[r * hs + i]);
        row_sum = worse(row_sum, std::fabs(sum) / (absum > 0 ? absum : 1));
    }
    std::string dx_hint;
    if (!(row_sum < 1e-9))
        dx_hint = "a head's row of your dx sums to " + number(row_sum) + " times the sum of its |dx|, not to 0: each "
                  "row of hs channels is one LayerNorm, whose rows of dx sum to 0. The - mean(g) term, over the row's "
                  "hs channels (not C)";
    report("dx", "", error(inp, dinp), FD_BOUND,
           "dx += rstd (g - mean(g) - xhat mean(g xhat)),  g = w_j dout, means over the row's hs channels", dx_hint);
    std::vector<real> dinp2, dw2, db2;
    backward((real)0.25, &dinp2, &dw2, &db2);
    double acc = 0;
    for (auto [got, want] : {std::make_pair(&dinp2, &dinp), std::make_pair(&dw2, &dw), std::make_pair(&db2, &db)}) {
        for (real& g : *got) g -= (real)0.25;
        acc = worse(acc, difference(got->data(), want->data(), want->size()));
    }
    report("dx, dw, db accumulate", "", acc, SAME_BOUND, "each adds (+=) to what the buffer holds",
           "started from 0.25 instead of 0, dx, dw or db did not end 0.25 above what they end from 0: a backward "
           "function adds into its gradients (+=)");

    // In the model: the QKV-norm's gains and shifts of each block, and what its dx feeds (qkvw, qkvb, then the
    // streams). lnkb is left out: its gradient is 0 in exact arithmetic (a shift of every key moves each score row
    // by a constant, which the softmax ignores; docs/siamesenorm.md, section 10.2), so the stencil has nothing to
    // compare; the one QKV-norm above checks it.
    Model M("siamese-hybrid");
    printf("  siamese-hybrid's attention (L=%d, C=%d, %d heads of %d), every block, against the finite differences:\n",
           L_, C_, NH_, C_ / NH_);
    check_backward(M, 7, sublayers(M, SUBLAYER_SIAMESE_C1, true),
                   {{"lnqw", "dw_q += sum over tokens and heads of xhat * dq"},
                    {"lnqb", "db_q += sum over tokens and heads of dq"},
                    {"lnkw", "dw_k += sum over tokens and heads of xhat * dk"},
                    {"lnvw", "dw_v += sum over tokens and heads of xhat * dv"},
                    {"lnvb", "db_v += sum over tokens and heads of dv"},
                    {"F", "d(u W_qkv + b) = LN_q'(dq), LN_k'(dk), LN_v'(dv);  then qkvw, qkvb"},
                    {"dy", "dy: through d(u W_qkv + b), F's input u = c1 x + LN_y(y)"},
                    {"dx", "dx: through d(u W_qkv + b), F's input u = c1 x + LN_y(y)"}},
                   {});
}

static void exercise_8(int v) {
    Model M("pre");
    printf("  pre_sublayer_forward against the reference's from the same x (relative, bound %.0e; what it does not "
           "write stays NaN):\n", SAME_BOUND);
    check_forward(M, 8, v, sublayers(M, SUBLAYER_PRE, false),
                  {{"u", "u = LN(x)"}, {"z", "z = F(u)"}, {"x'", "x' = x + z"}});
    printf("  pre_sublayer_backward (after the reference's forward) against the finite differences:\n");
    use(8, 0, -1), use(8, 1, v);
    check_backward(M, 8, sublayers(M, SUBLAYER_PRE, true),
                   {{"F", "dz = dx';  du = F'(dz)"},
                    {"LN", "dx += LN'(du)"},
                    {"dx", "dx = dx' + LN'(du)  (x feeds the sum and LN: both add into dx)"}},
                   {"dz", "du", "dx"});
}

static const char* const TITLES[] = {
    nullptr,
    "layernorm_backward",
    "siamese_sublayer_forward",
    "siamese_sublayer_backward",
    "siamese_head_forward and siamese_head_backward",
    "post_sublayer_forward and post_sublayer_backward",
    "siamese_c1_sublayer_forward and siamese_c1_sublayer_backward",
    "qkv_norm_backward",
    "pre_sublayer_forward and pre_sublayer_backward",
};

int main(int argc, char** argv) {
    if (argc < 3) internal("usage: grader N VARIANT [NAME]");
    int n = atoi(argv[1]), v = atoi(argv[2]);
    const int EXERCISES = (int)(sizeof(TITLES) / sizeof(TITLES[0])) - 1;
    if (n < 1 || n > EXERCISES) internal("no exercise %s", argv[1]);
    for (auto& e : exercise_variant) e[0] = e[1] = -1;
    open_report();
    printf("exercise %d: %s%s%s\n", n, TITLES[n], argc > 3 ? ", from " : "", argc > 3 ? argv[3] : "");
    printf("float64; gradients against finite differences (the five-point stencil, h = %.0e): error = max |fd - "
           "yours|\n  / max(|fd|, |yours|) over a tensor's checked entries, bound %.0e\n", FD_STEP, FD_BOUND);
    if (n > 1) printf("model: L=%d, C=%d, %d heads, B=%d, T=%d\n", L_, C_, NH_, B_, T_);
    void (*exercises[])(int) = {nullptr,    exercise_1, exercise_2, exercise_3, exercise_4,
                                exercise_5, exercise_6, exercise_7, exercise_8};
    exercises[n](v);
    // the verdict, every check having run: printed here when run by hand, else sent in the report (exercise.py
    // prints it, after everything the checks printed)
    std::vector<std::string> verdict;
    char line[256];
    if (misses.empty()) {
        snprintf(line, sizeof(line), "PASS: exercise %d, all %d checks", n, checks);
        verdict.push_back(line);
    } else {
        const Miss& first = misses[0];
        snprintf(line, sizeof(line), "FAIL: %zu of %d checks. The first one off: ", misses.size(), checks);
        verdict.push_back(line + first.what + (first.where.empty() ? "" : " at ") + first.where);
        verdict.push_back("  look at:  " + first.equation);
        if (!first.hint.empty()) verdict.push_back("  " + first.hint);
    }
    fflush(stdout);
    for (const std::string& text : verdict) {
        if (report_file) report_line("verdict", text);
        else printf("%s\n", text.c_str());
    }
    report_line("end", std::to_string(checks) + " " + std::to_string(misses.size()));
    return misses.empty() ? 0 : 1;
}
