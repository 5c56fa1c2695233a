// Deterministic test panels: the same seed gives the same panel on every machine and run.
//
// Flavours follow docs/operators.md's accuracy contract: price-like random walks around 100, 1e4 + N(0,1)
// offsets (and 1e6 + N(0,1) for float64), plain N(0,1). Options add what real market data has and
// running-sum kernels get wrong: isolated NaNs, suspensions (runs of NaN, also at a column's start),
// constant stretches (longer than the window too), all-NaN columns. Never all zeros.
//
// Only std::mt19937_64 is used, with hand-written transforms to uniform and normal variates
// (std::normal_distribution's output differs between standard libraries).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "reference.hpp"

namespace fj::test {

enum class Flavour {
    Price,      // multiplicative random walks around 100, ~1% steps
    Offset1e4,  // 1e4 + N(0,1)
    Offset1e6,  // 1e6 + N(0,1): float64 only (float32 keeps 1/16 steps there)
    Normal,     // N(0,1)
};

struct PanelSpec {
    Flavour flavour = Flavour::Price;
    double nan_rate = 0;          // share of isolated NaNs (0.03: ~3 %)
    bool suspensions = false;     // runs of NaN, 5..60 rows, in about a third of the columns
    bool constant_stretches = false;  // a value repeated over 5..max_constant rows, in about half the columns
    int max_constant = 80;        // the longest constant stretch
    int all_nan_cols = 0;         // columns that are NaN throughout (spread over the panel)
};

// Small, portable random source.
class Rng {
public:
    explicit Rng(std::uint64_t seed) : gen_(seed) {}
    double uniform() { return static_cast<double>(gen_() >> 11) * 0x1.0p-53; }  // [0, 1)
    std::int64_t integer(std::int64_t lo, std::int64_t hi) {                   // [lo, hi]
        return lo + static_cast<std::int64_t>(uniform() * static_cast<double>(hi - lo + 1));
    }
    double normal() {  // Box-Muller
        const double u1 = 1.0 - uniform(), u2 = uniform();
        return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    }

private:
    std::mt19937_64 gen_;
};

// A rows x cols row-major panel (leading dimension cols).
inline std::vector<double> make_panel(std::int64_t rows, std::int64_t cols, const PanelSpec& spec, std::uint64_t seed) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    Rng rng(seed * 0x9e3779b97f4a7c15ULL + 0x1234567ULL);
    std::vector<double> x(static_cast<std::size_t>(rows * cols));
    auto at = [&](std::int64_t t, std::int64_t j) -> double& { return x[static_cast<std::size_t>(t * cols + j)]; };

    for (std::int64_t j = 0; j < cols; ++j) {
        double p = 100.0 * std::exp(0.2 * rng.normal());  // each column its own level around 100
        for (std::int64_t t = 0; t < rows; ++t) {
            switch (spec.flavour) {
            case Flavour::Price:
                p *= 1.0 + 0.01 * rng.normal();
                at(t, j) = p;
                break;
            case Flavour::Offset1e4: at(t, j) = 1e4 + rng.normal(); break;
            case Flavour::Offset1e6: at(t, j) = 1e6 + rng.normal(); break;
            case Flavour::Normal: at(t, j) = rng.normal(); break;
            }
        }
    }
    if (rows == 0 || cols == 0) return x;

    if (spec.constant_stretches)
        for (std::int64_t j = 0; j < cols; ++j) {
            if (rng.uniform() < 0.5) continue;
            const int stretches = static_cast<int>(rng.integer(1, 3));
            for (int s = 0; s < stretches; ++s) {
                const std::int64_t len = rng.integer(5, spec.max_constant);
                const std::int64_t start = rng.integer(0, rows - 1);
                const double v = at(start, j);
                for (std::int64_t t = start; t < std::min(rows, start + len); ++t) at(t, j) = v;
            }
        }

    if (spec.suspensions)
        for (std::int64_t j = 0; j < cols; ++j) {
            const double u = rng.uniform();
            // The middle column and a tenth of the others start suspended (listed after the panel's start).
            const bool at_start = j == cols / 2 || u < 0.035;
            if (u > 0.35 && !at_start) continue;
            const std::int64_t len = rng.integer(5, 60);
            const std::int64_t start = at_start ? 0 : rng.integer(0, rows - 1);
            for (std::int64_t t = start; t < std::min(rows, start + len); ++t) at(t, j) = nan;
        }

    if (spec.nan_rate > 0)
        for (double& v : x)
            if (rng.uniform() < spec.nan_rate) v = nan;

    for (int k = 0; k < spec.all_nan_cols && k < cols; ++k) {
        const std::int64_t j = (static_cast<std::int64_t>(k) * 7919 + 3) % cols;
        for (std::int64_t t = 0; t < rows; ++t) at(t, j) = nan;
    }
    return x;
}

// Inputs named names[0], names[1], ... each from its own seed.
inline Inputs make_inputs(const std::vector<std::string>& names, std::int64_t rows, std::int64_t cols,
                          const PanelSpec& spec, std::uint64_t seed) {
    Inputs in;
    for (std::size_t i = 0; i < names.size(); ++i) in[names[i]] = make_panel(rows, cols, spec, seed + 1000 * i);
    return in;
}

// The panel rounded to float32 and back: what a float32 program reads, handed to the reference as float64.
inline std::vector<double> round_to_f32(const std::vector<double>& x) {
    std::vector<double> r(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) r[i] = static_cast<double>(static_cast<float>(x[i]));
    return r;
}

// A named data set: inputs with their shape and a label for failure messages.
struct Dataset {
    std::string label;
    Inputs inputs;
    std::int64_t rows = 0, cols = 0;
};

// The usual data sets of the ops suite: the contract's flavours with missing values and constant stretches.
inline Dataset dataset(const std::string& label, std::int64_t rows, std::int64_t cols, const PanelSpec& spec,
                       std::uint64_t seed, const std::vector<std::string>& names = {"A", "B", "C"}) {
    return Dataset{label, make_inputs(names, rows, cols, spec, seed), rows, cols};
}

inline PanelSpec messy(Flavour f) {
    PanelSpec s;
    s.flavour = f;
    s.nan_rate = 0.03;
    s.suspensions = true;
    s.constant_stretches = true;
    s.all_nan_cols = 2;
    return s;
}

inline PanelSpec clean(Flavour f) {
    PanelSpec s;
    s.flavour = f;
    return s;
}

}  // namespace fj::test
