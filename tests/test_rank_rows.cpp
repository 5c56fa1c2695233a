// The CPU backend's float32 rank (runtime/cpu/row_ops.cpp, rank_rows_f32: packed keys, a radix sort over the
// varying bits, ranks as a product with 1 / 2n) against a plain count: every valid cell's rank is
// (values below + (values equal + 1) / 2) / n, computed in float64 and rounded once to float32, and the
// backend must give exactly that float32, on rows of 1 to 5,000 columns of data with NaNs, ties, -0 and +0,
// infinities, constant rows, rows missing whole, wide exponent ranges and values of both signs.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "factorjit.hpp"
#include "runtime/backend.hpp"

namespace {

constexpr float kNaNf = std::numeric_limits<float>::quiet_NaN();

// The plain count, row by row, as the contract defines rank (NaN left out, ties averaged).
std::vector<float> reference_rank(const std::vector<float>& x, std::int64_t rows, std::int64_t cols) {
    std::vector<float> out(x.size(), kNaNf);
    for (std::int64_t t = 0; t < rows; ++t) {
        const float* row = &x[static_cast<std::size_t>(t * cols)];
        std::int64_t n = 0;
        for (std::int64_t j = 0; j < cols; ++j) n += !std::isnan(row[j]);
        for (std::int64_t j = 0; j < cols; ++j) {
            if (std::isnan(row[j])) continue;
            std::int64_t below = 0, equal = 0;
            for (std::int64_t k = 0; k < cols; ++k) {
                below += row[k] < row[j];
                equal += row[k] == row[j];
            }
            const double r = (static_cast<double>(below) + static_cast<double>(equal + 1) / 2.0) / static_cast<double>(n);
            out[static_cast<std::size_t>(t * cols + j)] = static_cast<float>(r);
        }
    }
    return out;
}

// Rows of several kinds, cycling: prices, returns around 0 (both signs), volumes over many octaves, few
// distinct values (ties in runs), small integers with -0 and +0 and infinities, a constant row, a row of
// NaNs, and NaNs sprinkled in about one cell in eight of every other row.
std::vector<float> messy_rows(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> normal;
    std::vector<float> x(static_cast<std::size_t>(rows * cols));
    for (std::int64_t t = 0; t < rows; ++t)
        for (std::int64_t j = 0; j < cols; ++j) {
            float v = 0;
            switch (t % 8) {
            case 0: v = static_cast<float>(100 * std::exp(0.5 * normal(rng))); break;
            case 1: v = static_cast<float>(0.02 * normal(rng)); break;
            case 2: v = static_cast<float>(std::exp(13 + 3 * normal(rng))); break;
            case 3: v = static_cast<float>(1 + rng() % 10) / 10.0f; break;
            case 4: {
                const int k = static_cast<int>(rng() % 9);
                v = k == 0 ? -0.0f : k == 1 ? 0.0f : k == 2 ? std::numeric_limits<float>::infinity()
                  : k == 3 ? -std::numeric_limits<float>::infinity() : static_cast<float>(k) - 6.0f;
                break;
            }
            case 5: v = 3.5f; break;
            case 6: v = kNaNf; break;
            case 7: v = static_cast<float>(1e4 + normal(rng)); break;
            }
            if (t % 2 == 1 && t % 8 != 5 && rng() % 8 == 0) v = kNaNf;
            x[static_cast<std::size_t>(t * cols + j)] = v;
        }
    return x;
}

}  // namespace

TEST_SUITE("cross_section") {

TEST_CASE("float32 rank on the CPU equals the plain count's float32, bit for bit") {
    if (!fj::rt::cpu_backend()) {  // the GPU machine builds without LLVM
        MESSAGE("skipped: this build has no CPU backend");
        return;
    }
    fj::CompileOptions o;
    o.backend = fj::Backend::Cpu;
    o.threads = 2;
    // Two outputs of one row step as well (the rank read by a later step and written as an output).
    const fj::Expr r = fj::rank(fj::input("X"));
    const fj::Program p = fj::compile({{"r", r}, {"r2", r + 0.0}}, o);
    for (const std::int64_t cols : {1, 2, 3, 7, 255, 256, 257, 1000, 4099, 5000}) {
        const std::int64_t rows = cols >= 1000 ? 16 : 40;
        const std::vector<float> x = messy_rows(rows, cols, static_cast<std::uint64_t>(cols));
        const std::vector<float> before = x;
        std::vector<float> got(x.size(), -1.0f), got2(x.size(), -1.0f);
        p.run({{"X", fj::Panel::host(x.data(), rows, cols)}},
              {{"r", fj::Panel::host(got.data(), rows, cols)}, {"r2", fj::Panel::host(got2.data(), rows, cols)}});
        const std::vector<float> want = reference_rank(x, rows, cols);
        std::int64_t bad = 0, first_bad = -1;
        for (std::size_t i = 0; i < want.size(); ++i) {
            const bool same = (std::isnan(want[i]) && std::isnan(got[i])) || want[i] == got[i];
            const bool same2 = (std::isnan(want[i]) && std::isnan(got2[i])) || want[i] == got2[i];
            if (!same || !same2) {
                ++bad;
                if (first_bad < 0) first_bad = static_cast<std::int64_t>(i);
            }
        }
        CHECK_MESSAGE(bad == 0, cols << " columns: " << bad << " cells differ, the first at row "
                                      << first_bad / cols << ", column " << first_bad % cols);
        CHECK(std::equal(x.begin(), x.end(), before.begin(), [](float a, float b) {
            return (std::isnan(a) && std::isnan(b)) || std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
        }));
    }
}

TEST_CASE("rank as s * (1 / 2n) in float64 rounds to the float32 of (s / 2) / n for every s and n <= 5,000") {
    std::int64_t bad = 0;
    for (std::int64_t n = 1; n <= 5000; ++n) {
        const double inv = 1.0 / (2.0 * static_cast<double>(n));
        for (std::int64_t s = 2; s <= 2 * n; ++s)
            bad += static_cast<float>(static_cast<double>(s) * inv) !=
                   static_cast<float>((static_cast<double>(s) / 2.0) / static_cast<double>(n));
    }
    CHECK(bad == 0);
}

}  // TEST_SUITE
