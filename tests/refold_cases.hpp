// Programs and data for the CUDA backend's refolds (kernel_ir.hpp: window sums recomputed from the window's
// own rows where running sums would break the accuracy contract): the window-sum groups (sum, mean, var,
// std, cov, corr, skew, kurt, slope, rsquare, resid) over windows of 5, 20 and 250 rows, a nested window whose refold reads a ring, on
// price-like data around 100 with spikes (float32: 1e8 and 1e30; float64: 1e12 and 1e150), a level shift
// and NaN rows. Used by the emulated column scans (test_cuda_emulated.cpp), the NVRTC compiles and the GPU
// comparison against the CPU backend (test_cuda_refold.cpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "backend_cases.hpp"
#include "dsl/expr.hpp"
#include "test_data.hpp"

namespace fj::test {

// One program per window-sum group and window, each one kernel (its outputs share A, or A and B).
inline std::vector<NamedExprs> refold_programs(bool long_windows = true) {
    using fj::window;
    const fj::Expr A = fj::input("A"), B = fj::input("B");
    std::vector<NamedExprs> p;
    std::vector<int> ws = {5, 20};
    if (long_windows) ws.push_back(250);
    for (int w : ws) {
        const std::string s = std::to_string(w);
        p.push_back({{"sum" + s, fj::sum(window(A, w))}, {"mean" + s, fj::mean(window(A, w))}});
        p.push_back({{"var" + s, fj::var(window(A, w))}, {"std" + s, fj::std(window(A, w))}});
        p.push_back({{"cov" + s, fj::cov(window(A, w), window(B, w))}, {"corr" + s, fj::corr(window(A, w), window(B, w))}});
        p.push_back({{"std" + s + "_mp", fj::std(window(A, w, w / 2))}, {"corr" + s + "_mp", fj::corr(window(A, w, w / 2), window(B, w, w / 2))}});
        // skew and kurt (sums of cubes and fourth powers beside var's), the regressions (positional sums; their
        // refold reads a ring of row indices).
        p.push_back({{"skew" + s, fj::skew(window(A, w))}, {"kurt" + s + "_mp", fj::kurt(window(A, w, w / 2))}});
        p.push_back({{"slope" + s, fj::slope(window(A, w))}, {"rsquare" + s + "_mp", fj::rsquare(window(A, w, w / 2))},
                     {"resid" + s, fj::resid(window(A, w))}});
    }
    // A window over a windowed value: the outer refold reads the inner std from a ring.
    p.push_back({{"mean10_of_std5", fj::mean(window(fj::std(window(A, 5)), 10))}});
    p.push_back({{"std20_of_mean5", fj::std(window(fj::mean(window(A, 5)), 20))}});
    return p;
}

// Price-like random walks around 100 in every column of A and B; spikes of the dtype's two magnitudes (one
// per column in A, at rows that differ from column to column, some near the start of a pass; a few in B),
// a level shift (1e4 down to 100 +- 1e-3) in some columns, NaN rows in others. The spikes leave every
// window long before the panel's end, so that results after them show whether the sums were rebuilt.
inline Dataset refold_data(fj::DType dtype, std::int64_t rows, std::int64_t cols, std::uint64_t seed = 25) {
    Dataset d;
    d.label = std::string("prices around 100 with spikes of ") + (dtype == fj::DType::F64 ? "1e12 and 1e150" : "1e8 and 1e30");
    d.rows = rows;
    d.cols = cols;
    const double mags[2] = {dtype == fj::DType::F64 ? 1e12 : 1e8, dtype == fj::DType::F64 ? 1e150 : 1e30};
    Rng rng(seed);
    for (const char* in : {"A", "B"}) {
        std::vector<double>& x = d.inputs[in];
        x.resize(static_cast<std::size_t>(rows * cols));
        for (std::int64_t j = 0; j < cols; ++j) {
            double p = 100.0 + 5.0 * rng.normal();
            for (std::int64_t t = 0; t < rows; ++t) {
                p += 0.5 * rng.normal();
                x[static_cast<std::size_t>(t * cols + j)] = p;
            }
        }
    }
    auto at = [&](const char* in, std::int64_t t, std::int64_t j) -> double& {
        return d.inputs.at(in)[static_cast<std::size_t>(t * cols + j)];
    };
    for (std::int64_t j = 0; j < cols; ++j) {
        const std::int64_t r = 3 + (j * 37) % (rows / 3);
        at("A", r, j) = (j % 3 == 1 ? -1.0 : 1.0) * mags[j % 2];
        if (r + 7 < rows) at("A", r + 7, j) = mags[(j + 1) % 2];  // a second one while the first is in short windows
        if (j % 3 == 0 && r + 40 < rows) at("B", r + 40, j) = -mags[j % 2];
        if (j % 4 == 3) {  // a level shift: 1e4 (+- 1) up to a row, then 100 +- 1e-3
            const std::int64_t s = rows / 2 + j;
            for (std::int64_t t = 0; t < rows; ++t)
                at("A", t, j) = t < s ? 1e4 + rng.normal() : 100.0 + 1e-3 * rng.normal();
        }
        if (j % 5 == 2)  // a few NaN rows after a spike
            for (std::int64_t t = r + 1; t < r + 4 && t < rows; ++t) at("A", t, j) = std::numeric_limits<double>::quiet_NaN();
    }
    d.inputs = as_dtype(d.inputs, dtype);
    return d;
}

// Two runs of one program meant to compute the same IR (the CUDA backend's kernels and the CPU backend's):
// "" when they agree within a few rounding errors of the outputs (NaN in the same places), else the first
// disagreement. Refolds run on the same rows in both (their conditions are the same IR arithmetic), so
// anything more is a fault of one of them.
inline std::string agree(const std::vector<double>& got, const std::vector<double>& want, std::int64_t cols, fj::DType dtype,
                         const std::vector<double>* ref = nullptr) {
    const double tol = dtype == fj::DType::F32 ? 4e-6 : 1e-11;
    std::size_t bad = 0, first = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
        const double g = got[i], w = want[i];
        bool ok;
        if (std::isnan(g) || std::isnan(w)) ok = std::isnan(g) && std::isnan(w);
        else if (std::isinf(g) || std::isinf(w)) ok = g == w;
        else ok = std::fabs(g - w) <= tol * std::max(1.0, std::fabs(w));
        if (!ok && bad++ == 0) first = i;
    }
    if (!bad) return "";
    return std::to_string(bad) + " cells differ; first at (row " + std::to_string(static_cast<std::int64_t>(first) / cols) + ", col " +
           std::to_string(static_cast<std::int64_t>(first) % cols) + "): " + fmt_num(got[first]) + " against " + fmt_num(want[first]) +
           (ref ? " (reference " + fmt_num((*ref)[first]) + ")" : std::string());
}

}  // namespace fj::test
