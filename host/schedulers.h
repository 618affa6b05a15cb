/*
host/schedulers.h: the learning-rate schedule, llm.c's: a linear warmup, then a cosine decay to a fraction of the peak.
*/
#pragma once
#include <cmath>

// ----------------------------------------------------------------------------------------------------------------
// learning rate: linear warmup over `warmup` steps, then cosine decay to final_frac * max_lr at the last step

static double learning_rate_at(int step, int total, double max_lr, int warmup, double final_frac) {
    if (step < warmup) return max_lr * (step + 1) / warmup;
    if (total <= warmup) return max_lr;
    double progress = (double)(step - warmup) / (total - warmup);
    double coeff = 0.5 * (1.0 + std::cos(M_PI * progress));  // 1 -> 0
    return max_lr * (final_frac + (1 - final_frac) * coeff);
}
