// The CPU's matrix products alone (host/gemm.h), at the shapes a training step runs them: for each of the model's
// linear layers the forward (out = inp W^T), and the backward's two (dinp += dout W, dweight += dout^T inp), with the
// strides matmul_forward and matmul_backward give them. A measurement, not a test: tests/bench_cpu.py runs it and
// prints its table beside the step's. Usage: tests/bench_gemm THREADS[,THREADS...] [PEAK_1,PEAK_2,...]
// (the peaks in GFLOP/s, one for each thread count, for the % column). Each product: the best of 7 timed calls
// after one untimed call; a shape's total is its products' FLOPs over the sum of their best times.
#include "../host/gemm.h"
#include <chrono>
#include <functional>
#include <cstdio>
#include <string>
#include <vector>

struct Layer { const char* name; int C, OC; };  // inp (N, C) @ W (OC, C)^T
struct Model { const char* name; int N; std::vector<Layer> layers; };

static double best_seconds(const std::function<void()>& f) {
    f();
    double best = 1e30;
    for (int r = 0; r < 7; r++) {
        auto t0 = std::chrono::steady_clock::now();
        f();
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
}

static std::vector<double> parse_list(const char* s) {
    std::vector<double> v;
    for (std::string t = s; !t.empty();) {
        size_t k = t.find(',');
        char* end;
        std::string item = t.substr(0, k);
        double x = strtod(item.c_str(), &end);
        if (item.empty() || *end || !(x > 0)) fail("bench_gemm: '%s' is not a list of positive numbers", s);
        v.push_back(x);
        t = k == std::string::npos ? "" : t.substr(k + 1);
    }
    return v;
}

int main(int argc, char** argv) {
    if (argc < 2 || argc > 3) fail("usage: tests/bench_gemm THREADS[,THREADS...] [PEAK,PEAK...]");
    std::vector<double> threads = parse_list(argv[1]), peaks;
    if (argc == 3) peaks = parse_list(argv[2]);
    if (!peaks.empty() && peaks.size() != threads.size()) fail("bench_gemm: one peak for each thread count");
    const Model models[] = {
        {"d12 b4 t64", 256, {{"qkv", 768, 2304}, {"attproj", 768, 768}, {"fc", 768, 3072}, {"fcproj", 3072, 768},
                             {"head", 768, 50304}}},
        {"C64 b16 t64", 1024, {{"qkv", 64, 192}, {"attproj", 64, 64}, {"fc", 64, 256}, {"fcproj", 256, 64},
                               {"head", 64, 256}}}};
    printf("%-12s %-8s %-22s %3s %9s %8s\n", "shape", "layer", "product", "thr", "GFLOP/s", "% peak");
    for (const Model& md : models)
        for (size_t ti = 0; ti < threads.size(); ti++) {
            int th = (int)threads[ti];
            omp_set_num_threads(th);
            double flops_all = 0, time_all = 0;
            for (const Layer& ly : md.layers) {
                int N = md.N, C = ly.C, OC = ly.OC;
                std::vector<float> inp((size_t)N * C, 0.5f), w((size_t)OC * C, 0.25f), out((size_t)N * OC),
                    dout((size_t)N * OC, 0.125f), dinp((size_t)N * C), dw((size_t)OC * C);
                struct P { const char* what; std::function<void()> f; } ps[] = {
                    {"forward out = inp W^T", [&] { gemm_cpu::gemm_acc(out.data(), OC, inp.data(), C, 1, w.data(), 1,
                                                                       C, N, OC, C); }},
                    {"dinp += dout W", [&] { gemm_cpu::gemm_acc(dinp.data(), C, dout.data(), OC, 1, w.data(), C, 1,
                                                                N, C, OC); }},
                    {"dweight += dout^T inp", [&] { gemm_cpu::gemm_acc(dw.data(), C, dout.data(), 1, OC, inp.data(),
                                                                       C, 1, OC, C, N); }}};
                for (const P& p : ps) {
                    double s = best_seconds(p.f), fl = 2.0 * N * C * OC;
                    flops_all += fl, time_all += s;
                    printf("%-12s %-8s %-22s %3d %9.1f %8s\n", md.name, ly.name, p.what, th, fl / s / 1e9,
                           peaks.empty() ? "" : std::to_string((int)(100 * fl / s / 1e9 / peaks[ti] + 0.5)).c_str());
                }
            }
            double rate = flops_all / time_all / 1e9;
            printf("%-12s %-8s %-22s %3d %9.1f %8s\n", md.name, "all", "every product above", th, rate,
                   peaks.empty() ? "" : std::to_string((int)(100 * rate / peaks[ti] + 0.5)).c_str());
        }
}
