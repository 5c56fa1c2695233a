// Expressions that exercise every operator of dsl/op.hpp, for the CUDA tests: compiled with NVRTC
// without a GPU (test_cuda_compile.cpp) and checked against the reference on one (test_cuda_gpu.cpp).
// ops_not_covered() names the operators that none of them uses, so a new operator fails the compile test
// until it is added here.
#pragma once

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "dsl/expr.hpp"
#include "dsl/op.hpp"

namespace fj::test {

inline std::vector<std::pair<std::string, fj::Expr>> all_cuda_op_cases();

// The cases, or with FJ_TEST_OP_CASES="name,name,..." set only those (to run a few operators' kernels through the
// CUDA suites: emulated, NVRTC, on a GPU; "the op cases cover every operator" fails then, as it should).
inline std::vector<std::pair<std::string, fj::Expr>> cuda_op_cases() {
    auto all = all_cuda_op_cases();
    const char* only = std::getenv("FJ_TEST_OP_CASES");
    if (!only || !*only) return all;
    const std::string list = "," + std::string(only) + ",";
    std::vector<std::pair<std::string, fj::Expr>> some;
    for (auto& c : all)
        if (list.find("," + c.first + ",") != std::string::npos) some.push_back(std::move(c));
    return some;
}

inline std::vector<std::pair<std::string, fj::Expr>> all_cuda_op_cases() {
    using fj::window;
    const fj::Expr A = fj::input("A"), B = fj::input("B"), C = fj::input("C");
    const fj::Expr dA = A - fj::delay(A, 1);
    const fj::Expr A1 = fj::delay(A, 1);
    return {
        {"neg", -A},
        {"not", !(A > B)},
        {"abs", abs(dA)},
        {"sign", sign(dA)},
        {"sqrt", sqrt(B - A)},
        {"exp", exp(A / 100.0)},
        {"log", log(abs(dA))},
        {"add", A + B},
        {"sub", A - 1.5},
        {"mul", 2.0 * A * B},
        {"div", B / dA},
        {"pow", pow(A / 100.0, B / 100.0)},
        {"signedpower", signedpower(dA, fj::constant(0.5))},
        {"min2", min(A, B)},
        {"max2", max(dA, fj::constant(0))},
        {"lt", A < B},
        {"le", A <= A1},
        {"gt", A > 100.0},
        {"ge", A >= A1},
        {"eq", A == A1},
        {"ne", A != A1},
        {"and", (A > B) && (B > C)},
        {"or", (A > B) || (dA != 0.0)},
        {"where", fj::where(A > B, A, B - C)},
        {"delay", fj::delay(A, 5)},
        {"delta", fj::delta(A, 3)},
        {"sum", fj::sum(window(A, 5))},
        {"sum_mp", fj::sum(window(A, 20, 0))},
        {"mean", fj::mean(window(A, 20))},
        {"count", fj::count(window(A, 5))},
        {"var", fj::var(window(A, 5))},
        {"std", fj::std(window(A, 20, 10))},
        {"wmin", fj::min(window(A, 5))},
        {"wmax", fj::max(window(A, 61))},
        {"wmin_long", fj::min(window(dA, 30, 3))},
        {"wmax_inf", fj::max(window(B / dA, 33, 1))},  // +-inf; a table of 17 entries (span 16) in local memory
        // Alpha101's time-series operators: tables of (value, row), O(d) comparisons, blocks of 2^k rows.
        {"argmin", fj::argmin(window(A, 5))},
        {"argmax_inf", fj::argmax(window(B / dA, 33, 1))},  // +-inf; rings longer than the register limit
        {"ts_rank", fj::ts_rank(window(A, 10))},
        {"ts_rank_mp", fj::ts_rank(window(dA, 20, 5))},
        {"product", fj::product(window(A / A1, 10))},
        {"product_mp0", fj::product(window(dA, 7, 0))},
        {"decay_linear", fj::decay_linear(window(A, 20))},
        {"decay_linear_mp", fj::decay_linear(window(B, 37, 3))},
        // skew, kurt (running moments with cubes and fourth powers), median and quantile (a sorted window in
        // d states), slope, rsquare, resid (running positional sums, a ring of row indices for the refold), ema.
        {"skew", fj::skew(window(A, 20))},
        {"kurt_mp", fj::kurt(window(dA, 30, 5))},
        {"median", fj::median(window(A, 9))},
        {"quantile_mp", fj::quantile(window(B, 16, 3), 0.8)},
        {"median_long", fj::median(window(A, 250))},  // 250 sorted states a thread (local memory)
        {"slope", fj::slope(window(A, 20))},
        {"rsquare_mp", fj::rsquare(window(dA, 15, 4))},
        {"resid", fj::resid(window(B, 10))},
        {"ema", fj::ema(A, 10)},
        {"mean_of_ema", fj::mean(window(fj::ema(dA, 5.5), 5))},
        {"corr", fj::corr(window(A, 20), window(B, 20))},
        {"cov", fj::cov(window(A, 10, 5), window(B, 10, 3))},
        // Nesting: rings of windowed values, delays of windowed values, windows over min/max.
        {"mean_of_std", fj::mean(window(fj::std(window(A, 5)), 10))},
        {"max_of_min", fj::max(window(fj::min(window(A, 5)), 5))},
        {"delay_of_mean", fj::delay(fj::mean(window(A, 5)), 2)},
        // Rings longer than the register limit (16): circular buffers in local memory. In one program with
        // the case above, one ring is read at lags 2 and 20.
        {"delay_of_mean_long", fj::delay(fj::mean(window(A, 5)), 20)},
        {"mean_of_std_long", fj::mean(window(fj::std(window(A, 5)), 25))},
        {"delta_of_std", fj::delta(fj::std(window(A, 10)), 3)},
        {"corr_nested", fj::corr(window(fj::mean(window(A, 3)), 20), window(fj::delta(B, 1), 20))},
        {"std_of_corr", fj::std(window(fj::corr(window(A, 10), window(B, 10)), 5))},
        {"decay_of_corr", fj::decay_linear(window(fj::corr(window(A, 10), window(B, 10)), 5))},
        {"argmax_of_max", fj::argmax(window(fj::max(window(A, 5)), 10))},
        {"rank_of_min", fj::ts_rank(window(fj::min(window(A, 3)), 8))},
        {"where_windows", fj::where(A > fj::mean(window(A, 20)), fj::std(window(A, 5)), -fj::std(window(A, 5)))},
    };
}

// Operators of dsl/op.hpp that no expression of `cases` uses.
inline std::vector<std::string> ops_not_covered(const std::vector<std::pair<std::string, fj::Expr>>& cases) {
    std::vector<bool> seen(256, false);
    std::vector<const fj::Node*> roots;
    for (const auto& [name, e] : cases) roots.push_back(e.node());
    for (const fj::Node* n : fj::topo_order(roots)) seen[static_cast<int>(n->op)] = true;
    std::vector<std::string> missing;
    // Cross-sectional operators are row steps, which have no CUDA kernels yet (the CUDA backend refuses them).
#define FJ_CASE_CHECK(e, name, kind, arity, infix) \
    if (!seen[static_cast<int>(fj::Op::e)] && fj::OpKind::kind != fj::OpKind::CrossSection) missing.push_back(#e);
    FJ_OPS(FJ_CASE_CHECK)
#undef FJ_CASE_CHECK
    return missing;
}

}  // namespace fj::test
