/*
host/fast_math.h: tanh for the CPU reference's GELU, in a form the compiler vectorizes. A first reading skips it:
read fast_tanh(u) as std::tanh(u).

Why: the C library's tanhf is a call per number, which no loop vectorizes without -ffast-math; at the science
shapes (64 channels) GELU's tanh was a third of the CPU trainer's step. Here, with m = 2 |u|,

    tanh u = sign(u) (1 - e^-m) / (1 + e^-m),   e^-m = 2^-n e^s,  n = round(m / ln 2),  s = n ln 2 - m,

|s| <= ln 2 / 2, e^s a degree-7 Taylor polynomial (its remainder s^8 / 8! < 6e-9 relative, below float's 6e-8
rounding), 2^-n put into the exponent bits. Every step is a plain operation on floats or their bits, no branch and
no call, so a loop over it vectorizes (a float min or max would not: GCC keeps it a branch unless told that
comparisons cannot trap, -fno-trapping-math; here m is clamped as integer bits, which order like the values for
m >= 0). It is within 1e-7 of the exact tanh in absolute terms, as float's std::tanh is (tests/test_reference.cpp
measures both); relative to tanh itself it is worse near 0, where 1 - e^-m cancels, which GELU does not mind:
it uses 0.5 x (1 + tanh u) and 1 - tanh^2 u, both absolute in tanh. The double build (the finite-difference
tests) uses std::tanh.
*/
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

static inline uint32_t float_bits(float f) {
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}
static inline float bits_float(uint32_t b) {
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

// e^-m for m >= 0 (m past 87 is taken as 87: e^-87 is 1.6e-38, the smallest normal float's order)
static inline float fast_exp_neg(float m) {
    m = bits_float(std::min(float_bits(m), float_bits(87.0f)));
    const float log2e = 1.44269504f, ln2_hi = 0.693145752f, ln2_lo = 1.42860677e-6f;
    const float shifter = 12582912.0f;  // 1.5 * 2^23: adding it and taking it away rounds to a whole number
    float n = (m * log2e + shifter) - shifter;
    float s = (n * ln2_hi - m) + n * ln2_lo;  // ln 2 in two parts, so that n ln 2 is exact enough (Cody and Waite)
    float p = 1.0f / 5040;                    // e^s by Horner's rule
    p = p * s + 1.0f / 720;
    p = p * s + 1.0f / 120;
    p = p * s + 1.0f / 24;
    p = p * s + 1.0f / 6;
    p = p * s + 0.5f;
    p = p * s + 1.0f;
    p = p * s + 1.0f;
    return p * bits_float((uint32_t)(127 - (int32_t)n) << 23);  // times 2^-n
}

static inline float fast_tanh(float u) {
    float e = fast_exp_neg(2.0f * std::fabs(u));
    float t = (1.0f - e) / (1.0f + e);
    return bits_float(float_bits(t) | (float_bits(u) & 0x80000000u));  // the sign of u
}
static inline double fast_tanh(double u) { return std::tanh(u); }
