/*
host/rand.h: small deterministic random numbers, the same bits on every machine: splitmix64, uniform in [0, 1),
Box-Muller normals. The initialization (host/init.h) and the sampling (host/eval.h) draw from them.
*/
#pragma once
#include <cmath>
#include <cstdint>

static uint64_t splitmix64(uint64_t* state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double random_uniform(uint64_t* state) { return (splitmix64(state) >> 11) * (1.0 / 9007199254740992.0); }
static double random_normal(uint64_t* state) {
    double u1 = random_uniform(state), u2 = random_uniform(state);
    return std::sqrt(-2.0 * std::log(1.0 - u1)) * std::cos(6.283185307179586 * u2);
}

