// host/gemm.h, the CPU's fast matrix product C += A @ B, bit for bit against the plain loop in the order its top
// comment states: c <- c + A(m, k) B(k, n) for k = 0, 1, ..., K - 1, one rounding each where gemm_cpu::FUSED (an
// FMA), two where not. For each register tile (AVX-512's, AVX2's and the 16-byte one, whatever this machine has: a
// vector wider than the machine's is split by the compiler), float and double, A and B plain or transposed views,
// 1 to 4 threads, on shapes that reach every path: edge tiles in M and N, more than one K block (KC = 256; a
// transposed B's, KCT = 768) and N block (NC = 1024; NCT = 256) for a thread, the transposed B's blocks of VL x VL
// and what is left of them, the threads' grids of rows only, columns only and both (the check below says each was
// reached); the unpacked path that small products take (gemm_small), the same order; and attention's weighted sums
// of rows (weighted_rows), the same rounding.
// tests/test_reference.cpp holds the model's products (matmul_forward, matmul_backward) to the naive loops, the
// math, within float32's rounding bound.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "doctest.h"
#include "../host/gemm.h"
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <unistd.h>
#include <vector>

template <typename T> static T step(T c, T a, T b) { return gemm_cpu::FUSED ? std::fma(a, b, c) : c + a * b; }

// the plain loop, in the order gemm_packed and gemm_small promise
template <typename T>
static void gemm_plain(T* c, size_t ldc, const T* a, size_t sam, size_t sak, const T* b, size_t sbk, size_t sbn,
                       int M, int N, int K) {
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            T s = c[(size_t)m * ldc + n];
            for (int k = 0; k < K; k++) s = step(s, a[m * sam + k * sak], b[k * sbk + n * sbn]);
            c[(size_t)m * ldc + n] = s;
        }
}

struct Case { int M, N, K; };
static const Case CASES[] = {{1, 1, 1},    {13, 36, 64},   {6, 10, 40},  {300, 7, 24}, {9, 300, 18},
                             {257, 70, 600}, {5, 5000, 3}, {40, 4200, 9}, {31, 33, 513}, {140, 120, 64},
                             {20, 300, 1000}};  // the last: two K blocks and two N blocks of a transposed B too

template <typename T, typename S> static void check_tile(const char* name) {
    uint64_t seed = 7;
    auto rnd = [&]() {  // uniform in [-1, 1)
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        return (T)((double)(seed >> 11) / 9007199254740992.0 * 2 - 1);
    };
    int cases = 0;
    bool grid_rows = false, grid_cols = false, grid_both = false;  // which kinds of the threads' grid were reached
    for (const Case& cs : CASES) {
        int M = cs.M, N = cs.N, K = cs.K;
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                CAPTURE(name);
                CAPTURE(M);
                CAPTURE(N);
                CAPTURE(K);
                CAPTURE(ta);
                CAPTURE(tb);
                std::vector<T> a((size_t)M * K), b((size_t)K * N), c0((size_t)M * N);
                for (T& x : a) x = rnd();
                for (T& x : b) x = rnd();
                for (T& x : c0) x = rnd();
                size_t sam = ta ? 1 : K, sak = ta ? M : 1, sbk = tb ? 1 : N, sbn = tb ? K : 1;
                std::vector<T> want(c0);
                gemm_plain(want.data(), N, a.data(), sam, sak, b.data(), sbk, sbn, M, N, K);
                for (int threads = 1; threads <= 4; threads++) {
                    CAPTURE(threads);
                    if ((double)M * N * K >= (1 << 20)) {  // gemm_packed's threshold for more than one thread
                        gemm_cpu::Grid g = gemm_cpu::share_out(threads, (M + S::MR - 1) / S::MR,
                                                               (N + S::NR - 1) / S::NR, S::MR, S::NR, K);
                        grid_rows |= g.gm > 1 && g.gn == 1, grid_cols |= g.gm == 1 && g.gn > 1;
                        grid_both |= g.gm > 1 && g.gn > 1;
                    }
                    omp_set_num_threads(threads);
                    std::vector<T> got(c0);
                    gemm_cpu::gemm_packed<T, S>(got.data(), N, a.data(), sam, sak, b.data(), sbk, sbn, M, N, K);
                    REQUIRE(memcmp(got.data(), want.data(), got.size() * sizeof(T)) == 0);
                }
                {  // the unpacked path for small products, and what the model calls
                    std::vector<T> small(c0), called(c0);
                    gemm_cpu::gemm_small(small.data(), N, a.data(), sam, sak, b.data(), sbk, sbn, M, N, K);
                    REQUIRE(memcmp(small.data(), want.data(), want.size() * sizeof(T)) == 0);
                    gemm_cpu::gemm_acc(called.data(), N, a.data(), sam, sak, b.data(), sbk, sbn, M, N, K);
                    REQUIRE(memcmp(called.data(), want.data(), want.size() * sizeof(T)) == 0);
                }
                // the check can fail: the same product with B's last row (k = K - 1) left out differs from it
                if (K > 1) {
                    std::vector<T> short_by_one(c0);
                    gemm_cpu::gemm_packed<T, S>(short_by_one.data(), N, a.data(), sam, sak, b.data(), sbk, sbn, M, N,
                                                K - 1);
                    CHECK(memcmp(short_by_one.data(), want.data(), want.size() * sizeof(T)) != 0);
                }
                cases++;
            }
    }
    CHECK(grid_rows);
    CHECK(grid_cols);
    CHECK(grid_both);
    omp_set_num_threads(2);
    MESSAGE(std::string(name) << ": " << cases << " products bit for bit (tile " << S::MR << " x " << S::NR << ", "
                              << S::VL << " numbers a vector), the multiply-add "
                              << std::string(gemm_cpu::FUSED ? "fused" : "not fused"));
}

TEST_CASE("gemm_acc: every tile, bit for bit the plain loop in its stated order") {
    check_tile<float, gemm_cpu::Tile<float, 64, 6, 4>>("float, AVX-512's tile");
    check_tile<float, gemm_cpu::Tile<float, 32, 6, 2>>("float, AVX2's tile");
    check_tile<float, gemm_cpu::Tile<float, 16, 6, 2>>("float, the 16-byte tile");
    check_tile<double, gemm_cpu::Tile<double, 64, 6, 4>>("double, AVX-512's tile");
    check_tile<double, gemm_cpu::Tile<double, 32, 6, 2>>("double, AVX2's tile");
    check_tile<float, gemm_cpu::Native<float>>("float, this machine's tile");
}

// Where OpenMP gives fewer threads than gemm_packed asks for (OMP_THREAD_LIMIT, a busy machine's OMP_DYNAMIC), every
// cell of its grid is still done: this binary runs itself again under OMP_THREAD_LIMIT=2 and asks for 4 threads, on
// a product whose grid has 4 cells (2 x 2)
TEST_CASE("gemm_packed: every cell of C done where OpenMP gives fewer threads than asked for") {
    if (!getenv("TEST_GEMM_LIMITED")) {
        char self[4096];
        ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        REQUIRE(n > 0);
        self[n] = 0;
        std::string cmd = std::string("OMP_THREAD_LIMIT=2 TEST_GEMM_LIMITED=1 '") + self +
                          "' -tc='gemm_packed: every cell*' > /dev/null 2>&1";
        CHECK(system(cmd.c_str()) == 0);
        return;
    }
    typedef gemm_cpu::Native<float> S;
    const int M = 140, N = 120, K = 64, threads = 4;
    gemm_cpu::Grid g = gemm_cpu::share_out(threads, (M + S::MR - 1) / S::MR, (N + S::NR - 1) / S::NR, S::MR, S::NR, K);
    REQUIRE(g.gm * g.gn == threads);
    omp_set_num_threads(threads);
    int got = 0;
#pragma omp parallel num_threads(threads)
#pragma omp single
    got = omp_get_num_threads();
    REQUIRE(got == 2);  // the limit holds
    std::vector<float> a((size_t)M * K), b((size_t)K * N), c((size_t)M * N, 0.5f);
    for (size_t i = 0; i < a.size(); i++) a[i] = (float)((i * 37) % 101) / 50 - 1;
    for (size_t i = 0; i < b.size(); i++) b[i] = (float)((i * 53) % 97) / 48 - 1;
    std::vector<float> want(c);
    gemm_plain(want.data(), N, a.data(), K, 1, b.data(), N, 1, M, N, K);
    gemm_cpu::gemm_packed<float, S>(c.data(), N, a.data(), K, 1, b.data(), N, 1, M, N, K);
    CHECK(memcmp(c.data(), want.data(), c.size() * sizeof(float)) == 0);
}

TEST_CASE("gemm_acc: nothing to do leaves C as it was") {
    std::vector<float> c(12, 3.0f), a(12, 1.0f), b(12, 1.0f);
    gemm_cpu::gemm_acc(c.data(), 4, a.data(), 3, 1, b.data(), 4, 1, 3, 4, 0);  // K = 0: C += nothing
    for (float x : c) CHECK(x == 3.0f);
}

// weighted_rows (attention's sums): out[i] (+)= sum over j of coef[j] rows[j stride + i], each over j in order, bit
// for bit against that plain loop, for lengths n that reach each block (4, 2 and 1 vectors, and the scalar tail)
template <typename T, typename S> static void check_weighted_rows(const char* name) {
    uint64_t seed = 11;
    auto rnd = [&]() {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        return (T)((double)(seed >> 11) / 9007199254740992.0 * 2 - 1);
    };
    int cases = 0;
    for (int n : {1, 3, S::VL, S::VL + 1, 2 * S::VL + 3, 4 * S::VL, 7 * S::VL + 5, 64})
        for (int count : {1, 2, 17, 64}) {
            CAPTURE(name);
            CAPTURE(n);
            CAPTURE(count);
            size_t stride = n + 5;  // rows apart by more than n, as attention's are (3C apart)
            std::vector<T> coef(count), rows(stride * count), out0(n);
            for (T& x : coef) x = rnd();
            for (T& x : rows) x = rnd();
            for (T& x : out0) x = rnd();
            for (int acc = 0; acc < 2; acc++) {
                CAPTURE(acc);
                std::vector<T> want(out0), got(out0), short_by_one(out0);
                for (int i = 0; i < n; i++) {
                    T s = acc ? out0[i] : 0;
                    for (int j = 0; j < count; j++) s = step(s, coef[j], rows[j * stride + i]);
                    want[i] = s;
                }
                auto weighted_rows = [&](T* out, int rows_used) {
                    if (acc)
                        gemm_cpu::weighted_rows<true, T, S>(out, coef.data(), rows.data(), stride, n, rows_used);
                    else
                        gemm_cpu::weighted_rows<false, T, S>(out, coef.data(), rows.data(), stride, n, rows_used);
                };
                weighted_rows(got.data(), count);
                REQUIRE(memcmp(got.data(), want.data(), want.size() * sizeof(T)) == 0);
                if (count > 1) {  // the check can fail: the last row left out
                    weighted_rows(short_by_one.data(), count - 1);
                    CHECK(memcmp(short_by_one.data(), want.data(), want.size() * sizeof(T)) != 0);
                }
                cases++;
            }
        }
    MESSAGE(std::string(name) << ": " << cases << " weighted sums of rows bit for bit");
}

// weighted_rows_tile (a tile of R queries or keys): sum r over j in [j0 + r d0, j1 + r d1), with its own
// coefficients coef[r crs + j cjs] and output out + r os, bit for bit the plain loop over that range in order, for
// the three shapes attention uses (one range for all: the scores; ends growing by one: the output and dq; starts
// growing by one: dk and dv), both coefficient layouts, every R from 1 to 4
template <typename T, typename S> static void check_weighted_rows_tile(const char* name) {
    uint64_t seed = 13;
    auto rnd = [&]() {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        return (T)((double)(seed >> 11) / 9007199254740992.0 * 2 - 1);
    };
    int cases = 0;
    const int J = 40;  // rows 0..J-1; j1 + R - 1 <= J
    for (int n : {1, S::VL, 2 * S::VL + 3, 16, 64})
        for (int R = 1; R <= 4; R++)
            for (int shape = 0; shape < 3; shape++)
                for (int layout = 0; layout < 2; layout++)
                    for (int acc = 0; acc < 2; acc++) {
                        int d0 = shape == 2, d1 = shape == 1, j0 = shape == 2 ? 5 : 0, j1 = shape == 1 ? 9 : J - 3;
                        CAPTURE(name);
                        CAPTURE(n);
                        CAPTURE(R);
                        CAPTURE(shape);
                        CAPTURE(layout);
                        CAPTURE(acc);
                        size_t stride = n + 5, os = n + 3;
                        size_t crs = layout ? 1 : J, cjs = layout ? R : 1;  // r-major or j-major coefficients
                        std::vector<T> coef((size_t)R * J), rows(stride * J), out0(os * R);
                        for (T& x : coef) x = rnd();
                        for (T& x : rows) x = rnd();
                        for (T& x : out0) x = rnd();
                        std::vector<T> want(out0), got(out0);
                        for (int r = 0; r < R; r++)
                            for (int i = 0; i < n; i++) {
                                T s = acc ? out0[r * os + i] : 0;
                                for (int j = j0 + r * d0; j < j1 + r * d1; j++)
                                    s = step(s, coef[r * crs + j * cjs], rows[j * stride + i]);
                                want[r * os + i] = s;
                            }
                        auto tile = [&](T* out, int end) {
                            if (acc)
                                gemm_cpu::weighted_rows_tile<true, T, S>(R, out, os, coef.data(), crs, cjs, rows.data(),
                                                                         stride, n, j0, d0, end, d1);
                            else
                                gemm_cpu::weighted_rows_tile<false, T, S>(R, out, os, coef.data(), crs, cjs,
                                                                          rows.data(), stride, n, j0, d0, end, d1);
                        };
                        tile(got.data(), j1);
                        REQUIRE(memcmp(got.data(), want.data(), want.size() * sizeof(T)) == 0);
                        std::vector<T> short_by_one(out0);  // the check can fail: every sum's last row left out
                        tile(short_by_one.data(), j1 - 1);
                        for (int r = 0; r < R; r++)
                            CHECK(memcmp(short_by_one.data() + r * os, want.data() + r * os, n * sizeof(T)) != 0);
                        cases++;
                    }
    MESSAGE(std::string(name) << ": " << cases << " tiles of weighted sums bit for bit");
}

TEST_CASE("weighted_rows_tile: every vector width, R from 1 to 4, bit for bit the plain loop over each range") {
    check_weighted_rows_tile<float, gemm_cpu::Tile<float, 64, 12, 2>>("float, 64-byte vectors");
    check_weighted_rows_tile<float, gemm_cpu::Tile<float, 32, 6, 2>>("float, 32-byte vectors");
    check_weighted_rows_tile<float, gemm_cpu::Tile<float, 16, 6, 2>>("float, 16-byte vectors");
    check_weighted_rows_tile<double, gemm_cpu::Tile<double, 32, 6, 2>>("double, 32-byte vectors");
    check_weighted_rows_tile<float, gemm_cpu::Native<float>>("float, this machine's vectors");
}

TEST_CASE("weighted_rows: every vector width, bit for bit the plain loop in its stated order") {
    check_weighted_rows<float, gemm_cpu::Tile<float, 64, 12, 2>>("float, 64-byte vectors");
    check_weighted_rows<float, gemm_cpu::Tile<float, 32, 6, 2>>("float, 32-byte vectors");
    check_weighted_rows<float, gemm_cpu::Tile<float, 16, 6, 2>>("float, 16-byte vectors");
    check_weighted_rows<double, gemm_cpu::Tile<double, 32, 6, 2>>("double, 32-byte vectors");
    check_weighted_rows<float, gemm_cpu::Native<float>>("float, this machine's vectors");
}
