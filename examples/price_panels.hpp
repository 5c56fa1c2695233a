// Two correlated multiplicative random walks around 100 (about 1 % steps), float32, row-major rows x cols:
// the price-like data of the demo and the CPU benchmark.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace fj::examples {

inline void make_prices(std::int64_t rows, std::int64_t cols, std::vector<float>& a, std::vector<float>& b,
                        std::uint64_t seed = 42) {
    a.resize(rows * cols);
    b.resize(rows * cols);
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> n01(0.0, 1.0);
    std::vector<double> pa(cols, 100.0), pb(cols, 100.0);
    for (std::int64_t t = 0; t < rows; ++t)
        for (std::int64_t j = 0; j < cols; ++j) {
            const double common = n01(rng);
            pa[j] *= std::exp(0.01 * common);
            pb[j] *= std::exp(0.01 * (0.6 * common + 0.8 * n01(rng)));
            a[t * cols + j] = static_cast<float>(pa[j]);
            b[t * cols + j] = static_cast<float>(pb[j]);
        }
}

}  // namespace fj::examples
