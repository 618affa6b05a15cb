/*
host/init.h: the GPT-2 initialization, seeded and the same bits on every machine, so that the CPU and the CUDA
trainers start from the same numbers: normals (host/rand.h) drawn on all cores in the order of one loop.
*/
#pragma once
#include <cmath>
#include <string>
#include <thread>
#include <vector>
#include "model_config.h"
#include "rand.h"

// p[i] = std_ * random_normal(&state) for i = 0..n-1, the draws in sequence, on all cores for large n: after k
// draws splitmix64's state is state + k * its increment, so a chunk that starts at normal i0 (two draws a normal)
// starts from state + 2 i0 * increment, and the numbers are bit for bit those of one loop
template <typename T>
static void fill_normal(T* p, size_t n, double std_, uint64_t state) {
    size_t workers = std::thread::hardware_concurrency();
    if (workers < 2 || n < ((size_t)1 << 20)) workers = 1;
    size_t chunk = (n + workers - 1) / workers;
    std::vector<std::thread> threads;
    for (size_t i0 = 0; i0 < n; i0 += chunk) {
        threads.emplace_back([=]() {
            uint64_t s = state + 2 * (uint64_t)i0 * 0x9E3779B97F4A7C15ull;
            for (size_t i = i0; i < std::min(n, i0 + chunk); i++) p[i] = (T)(std_ * random_normal(&s));
        });
    }
    for (std::thread& t : threads) t.join();
}

// GPT-2 initialization into a parameter buffer laid out by parameter_table: weights N(0, 0.02), the residual output
// projections (attprojw, fcprojw) N(0, 0.02/sqrt(2L)), biases 0, LayerNorm gains 1 and shifts 0 (the QKV-norm's
// too), siamese_c1's gain c1 1, hc's connections as Hyper-Connections' paper starts them (static S = [e_(s mod 2) |
// I | 1], dynamic projections 0, their scales 0.01: Pre-Norm), padded vocabulary rows 0; a layout may scale the draws of some weights
// (LayoutInfo::init_std). Each tensor draws from its own stream seeded by (seed, name), so the weights the layouts share start
// identical for the same seed, and the CPU and the GPU trainers start from the same numbers.
template <typename T>
static void init_parameters(const GPT2Config& c, uint64_t seed, T* memory) {
    for (const TensorInfo& t : parameter_table(c)) {
        T* p = memory + t.offset;
        std::string name = t.name;
        int is_gain = (name.compare(0, 2, "ln") == 0 && name.back() == 'w') || name == "c1";
        if (is_gain) {
            for (size_t i = 0; i < t.size; i++) p[i] = (T)1;
        } else if (name == "hc1s" || name == "hc2s") {  // hc's S: [e_(s mod 2) | I | 1] per block, s = 2l + k
            int k = name[2] - '1';
            for (size_t l = 0; l < t.shape[0]; l++)
                for (int j = 0; j < 2; j++) {
                    T* row = p + (l * 2 + j) * 4;  // stream j: alpha_j0 (F's), alpha_j1, alpha_j2 (x's, y's), beta_j
                    row[0] = (T)(j == k), row[1] = (T)(j == 0), row[2] = (T)(j == 1), row[3] = (T)1;
                }
        } else if (name == "hc1sc" || name == "hc2sc") {  // hc's dynamic scales
            for (size_t i = 0; i < t.size; i++) p[i] = (T)0.01;
        } else if (t.decay) {  // every 2-D weight matrix
            uint64_t state = seed;
            for (char ch : name) state = state * 1099511628211ull ^ (uint64_t)(unsigned char)ch;
            double std_ = 0.02;
            if (name == "attprojw" || name == "fcprojw") std_ = 0.02 / std::sqrt(2.0 * c.num_layers);
            size_t n = t.size;
            if (name == "wte") n = (size_t)c.vocab_size * c.channels;  // the padded rows stay 0
            fill_normal(p, n, std_, state);
            for (size_t i = n; i < t.size; i++) p[i] = (T)0;
            // a layout's own initialization (LayoutInfo::init_std, e.g. DeepNorm's beta): the same draws, scaled
            // row by row (row within one block's matrix); GPT-2's layouts have none and keep these bits
            const LayoutInfo& layout = layout_of(c);
            if (layout.init_std) {
                size_t cols = t.shape[t.ndim - 1], rows_per_block = t.ndim == 3 ? t.shape[1] : t.shape[0];
                for (size_t i = 0; i < n; i++) {
                    double want = layout.init_std(t.name, i / cols % rows_per_block, c.num_layers, c.channels, std_);
                    if (want != std_) p[i] = (T)(p[i] * (want / std_));
                }
            }
        } else {  // biases and LayerNorm shifts
            for (size_t i = 0; i < t.size; i++) p[i] = (T)0;
        }
    }
}
