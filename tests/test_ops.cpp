// Every operator against the reference (tests/reference.cpp) on the CPU backend, float64 and float32.
//
// Each test body is a doctest template over fj::test::Target types, so the same body runs for every
// backend and dtype: TEST_CASE_TEMPLATE_APPLY(id, fj::test::CudaTargets) adds the CUDA backend.
// Data sets: 600 x 37 (37 columns leave a tail after any SIMD width), leading dimensions larger than
// the column count for inputs and outputs, the contract's flavours (price-like random walks, 1e4 + noise)
// plus N(0,1), with isolated NaNs, suspensions, constant stretches and all-NaN columns.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "backend_cases.hpp"
#include "test_data.hpp"

namespace {

using fj::Expr;
using fj::test::CheckOptions;
using fj::test::Dataset;
using fj::test::Flavour;
using fj::test::NamedExprs;

struct OpsData {
    Dataset ds;
    CheckOptions check;
};

std::vector<OpsData> ops_data() {
    std::vector<OpsData> v;
    CheckOptions padded;
    padded.ld_in = 41;
    padded.ld_out = 40;
    v.push_back({fj::test::dataset("price, messy", 600, 37, fj::test::messy(Flavour::Price), 11), padded});
    v.push_back({fj::test::dataset("1e4 + N(0,1), messy", 600, 37, fj::test::messy(Flavour::Offset1e4), 12), {}});
    v.push_back({fj::test::dataset("N(0,1), messy", 257, 19, fj::test::messy(Flavour::Normal), 13), {}});
    CheckOptions padded2;
    padded2.ld_in = 64 + 3;
    padded2.ld_out = 64 + 17;
    v.push_back({fj::test::dataset("price, clean", 128, 64, fj::test::clean(Flavour::Price), 14), padded2});
    return v;
}

// Each expression as its own program, on every data set.
template <class T>
void each_on_all(const std::vector<Expr>& exprs) {
    for (const OpsData& d : ops_data())
        fj::test::check_each(exprs, d.ds, T::dtype, T::options(), d.check);
}

// One program with several outputs, on every data set.
template <class T>
void program_on_all(const NamedExprs& exprs) {
    for (const OpsData& d : ops_data())
        fj::test::check_against_reference(exprs, d.ds, T::dtype, T::options(), d.check);
}

const Expr A = fj::input("A"), B = fj::input("B"), C = fj::input("C");
// A's one-row change: exactly 0 in constant stretches (x - x is +0), NaN next to missing values.
const Expr dA = A - fj::delay(A, 1);

std::string mp_name(const char* op, int d, int mp) { return std::string(op) + "_d" + std::to_string(d) + "_mp" + std::to_string(mp); }

}  // namespace

TEST_SUITE("ops") {

TEST_CASE_TEMPLATE_DEFINE("element-wise: arithmetic and functions", T, ops_elementwise_arith) {
    using fj::constant;
    each_on_all<T>({
        -A,
        A + B, A - B, A * B, A / B,
        A + 1.5, 2.0 * A, (A - 100.0) / 3.0, 1.0 / A, 1.0 - A,
        abs(B - A), abs(dA),
        sign(dA), sign(B - A), sign(A),
        sqrt(A), sqrt(B - A),
        exp(A / 100.0), exp(-A / 50.0),
        exp(A),   // overflows float32 (e^100 > 3.4e38): float32 output must be +inf where the reference is > FLT_MAX
        log(A), log(B - A), log(abs(dA)),  // log of negatives: NaN; log(0): -inf
        B / dA,   // x / +0: +-inf
        dA / dA,  // 0 / 0: NaN
        pow(A, constant(2)), pow(A, constant(0.5)), pow(B - A, constant(2)), pow(B - A, constant(0.5)),
        pow(A / 100.0, B / 50.0), pow(abs(B - A) + 0.5, C / A),
        pow(dA, constant(0)),  // C's pow: pow(NaN, 0) = 1, pow(0, 0) = 1
        pow(A / A, B),         // C's pow: pow(1, y) = 1 for any y, NaN too
        signedpower(B - A, constant(2)), signedpower(B - A, constant(0.5)), signedpower(dA, constant(3)),
        signedpower(A - B, B / A),
        min(A, B), max(A, B), min(A, fj::delay(A, 1)), max(dA, constant(0)),
        abs(A - B) / (A + B) * 2.0,
    });
}
TEST_CASE_TEMPLATE_APPLY(ops_elementwise_arith, fj::test::CpuTargets);

TEST_CASE_TEMPLATE_DEFINE("element-wise: signedpower of 0 with a negative exponent", T, ops_signedpower_zero) {
    // sign(0) * pow(0, -1) = 0 * inf = NaN, by docs/operators.md's definition taken literally.
    each_on_all<T>({signedpower(dA, fj::constant(-1)), signedpower(dA, fj::constant(-0.5))});
}
TEST_CASE_TEMPLATE_APPLY(ops_signedpower_zero, fj::test::CpuTargets);

TEST_CASE_TEMPLATE_DEFINE("element-wise: comparisons, logic, where", T, ops_elementwise_logic) {
    const Expr A1 = fj::delay(A, 1);
    each_on_all<T>({
        A < B, A <= A1, A > B, A >= A1, A == A1, A != A1, A < 100.0, A != B,
        !A, !dA, !(A > B),
        (A > B) && (B > C), (A > B) || (B > C), dA && B, dA || (A > B), dA && dA, !dA || dA,
        where(A > B, A, C), where(dA, A, B), where(A > B, 1.0, 0.0), where(sign(dA), A - B, A + B),
        where(A < B, min(A, C), max(B, C)),
    });
}
TEST_CASE_TEMPLATE_APPLY(ops_elementwise_logic, fj::test::CpuTargets);

TEST_CASE_TEMPLATE_DEFINE("delay and delta", T, ops_delay) {
    each_on_all<T>({
        fj::delay(A, 1), fj::delay(A, 5), fj::delay(A, 599), fj::delay(A, 700),  // 700 > rows: all NaN
        fj::delta(A, 1), fj::delta(A, 20), fj::delta(A, 0),
        fj::delay(A * B, 3), fj::delay(fj::delay(A, 2), 3), fj::delay(A, 2) - fj::delay(B, 7),
    });
}
TEST_CASE_TEMPLATE_APPLY(ops_delay, fj::test::CpuTargets);

TEST_CASE_TEMPLATE_DEFINE("window reductions: every d and min_periods", T, ops_windows) {
    struct Red {
        const char* name;
        Expr (*f)(const fj::Window&);
        bool empty_ok;  // min_periods 0 meaningful (sum of nothing is 0, count 0; mean/min/max of nothing NaN)
    };
    const Red reds[] = {
        {"sum", [](const fj::Window& w) { return fj::sum(w); }, true},
        {"mean", [](const fj::Window& w) { return fj::mean(w); }, true},
        {"count", [](const fj::Window& w) { return fj::count(w); }, true},
        {"var", [](const fj::Window& w) { return fj::var(w); }, false},
        {"std", [](const fj::Window& w) { return fj::std(w); }, false},
        {"min", [](const fj::Window& w) { return fj::min(w); }, true},
        {"max", [](const fj::Window& w) { return fj::max(w); }, true},
    };
    for (const Red& r : reds) {
        const std::string red = r.name;
        CAPTURE(red);
        NamedExprs prog;
        for (int d : {1, 2, 5, 20, 61}) {
            prog.push_back({mp_name(r.name, d, d), r.f(fj::window(A, d))});
            if (d >= 4) prog.push_back({mp_name(r.name, d, d / 2), r.f(fj::window(A, d, d / 2))});
            if (d >= 2) prog.push_back({mp_name(r.name, d, 1), r.f(fj::window(A, d, 1))});
            if (r.empty_ok) prog.push_back({mp_name(r.name, d, 0), r.f(fj::window(A, d, 0))});
        }
        program_on_all<T>(prog);
    }
}
TEST_CASE_TEMPLATE_APPLY(ops_windows, fj::test::CpuTargets);

TEST_CASE_TEMPLATE_DEFINE("window reductions: one output per program", T, ops_windows_single) {
    // The same reductions alone, so that a failure above that comes from fusing many windows shows here.
    each_on_all<T>({
        fj::sum(fj::window(A, 5)), fj::mean(fj::window(A, 20)), fj::count(fj::window(A, 5)),
        fj::var(fj::window(A, 5)), fj::std(fj::window(A, 20)), fj::min(fj::window(A, 5)), fj::max(fj::window(A, 61)),
        fj::sum(fj::window(A, 20, 0)), fj::mean(fj::window(A, 20, 0)), fj::std(fj::window(A, 20, 0)),
    });
}
TEST_CASE_TEMPLATE_APPLY(ops_windows_single, fj::test::CpuTargets);

TEST_CASE_TEMPLATE_DEFINE("corr and cov", T, ops_corr_cov) {
    NamedExprs prog;
    for (int d : {1, 2, 5, 20, 61}) {
        const std::string s = std::to_string(d);
        prog.push_back({"corr_" + s, fj::corr(fj::window(A, d), fj::window(B, d))});
        prog.push_back({"cov_" + s, fj::cov(fj::window(A, d), fj::window(B, d))});
        if (d >= 4) {
            prog.push_back({"corr_mp_" + s, fj::corr(fj::window(A, d, d / 2), fj::window(B, d, d / 4))});
            prog.push_back({"cov_mp_" + s, fj::cov(fj::window(A, d, 2), fj::window(B, d, d / 2))});
        }
        if (d >= 2) {
            prog.push_back({"corr_mp0_" + s, fj::corr(fj::window(A, d, 0), fj::window(B, d, 0))});
            prog.push_back({"cov_mp0_" + s, fj::cov(fj::window(A, d, 0), fj::window(B, d, 0))});
        }
    }
    program_on_all<T>(prog);

    // Perfectly (anti-)correlated, self-covariance, windows of expressions.
    each_on_all<T>({
        fj::corr(fj::window(A, 10), fj::window(A * 2.0 + 1.0, 10)),
        fj::corr(fj::window(A, 10), fj::window(-A, 10)),
        fj::cov(fj::window(A, 10), fj::window(A, 10)),
        fj::corr(fj::window(A, 20), fj::window(B, 20)),
        fj::corr(fj::window(A - B, 20), fj::window(B * C, 20)),
        fj::cov(fj::window(dA, 20, 10), fj::window(fj::delta(B, 1), 20, 10)),
        fj::corr(fj::window(dA, 20, 10), fj::window(fj::delta(B, 1), 20, 10)),
        fj::corr(fj::window(A, 5), fj::window(B, 5)),
    });
}
TEST_CASE_TEMPLATE_APPLY(ops_corr_cov, fj::test::CpuTargets);

TEST_CASE_TEMPLATE_DEFINE("nested windows and windows of expressions", T, ops_nested) {
    using fj::window;
    each_on_all<T>({
        fj::mean(window(fj::std(window(A, 5)), 10)),
        fj::mean(window(fj::std(window(A, 5, 3)), 10, 5)),
        fj::mean(window(fj::mean(window(fj::mean(window(A, 5)), 5)), 5)),
        fj::sum(window(fj::delay(A, 3), 7)),
        fj::delay(fj::mean(window(A, 5)), 2),
        fj::delta(fj::std(window(A, 10)), 3),
        fj::mean(window(A * B - C, 10)),
        fj::std(window(A * B - C, 20)),
        fj::var(window(dA, 20, 10)),
        fj::std(window(fj::delta(A, 1), 20, 10)),
        fj::max(window(fj::min(window(A, 5)), 5)),
        fj::min(window(fj::max(window(A, 7, 3)), 9)),
        fj::corr(window(fj::mean(window(A, 3)), 20), window(fj::delta(B, 1), 20)),
        fj::cov(window(A - fj::mean(window(A, 10)), 15), window(B, 15)),
        fj::var(window(fj::sum(window(A, 3)) / fj::count(window(A, 3)), 7)),
        fj::count(window(fj::std(window(A, 5)), 10)),
        fj::where(A > fj::mean(window(A, 20)), fj::std(window(A, 5)), -fj::std(window(A, 5))),
        fj::sum(window(fj::delay(fj::mean(window(A, 4)), 6) * fj::delay(B, 2), 8, 3)),
        fj::std(window(fj::corr(window(A, 10), window(B, 10)), 5)),
    });
}
TEST_CASE_TEMPLATE_APPLY(ops_nested, fj::test::CpuTargets);

TEST_CASE_TEMPLATE_DEFINE("windows over infinities", T, ops_windows_inf) {
    // B / dA is +-inf in constant stretches (x / +0). A window holding +inf sums to +inf, one holding
    // +inf and -inf to NaN, and once the infinity has left the window the result is finite again:
    // the definition is over the window's values, so running sums must not keep inf - inf = NaN.
    const Expr q = B / dA;
    each_on_all<T>({
        fj::sum(fj::window(q, 5)), fj::mean(fj::window(q, 5, 1)), fj::min(fj::window(q, 5)),
        fj::max(fj::window(q, 5)), fj::count(fj::window(q, 5)),
    });
}
TEST_CASE_TEMPLATE_APPLY(ops_windows_inf, fj::test::CpuTargets);

TEST_CASE_TEMPLATE_DEFINE("window min/max: every table shape", T, ops_extremes) {
    // The lowering combines extremes of 1, 2, 4, ... rows: window lengths at, just above and just below
    // powers of two, tables longer than the CUDA emitter's register rings (16), and windows of +-inf.
    const Expr q = B / dA;
    NamedExprs prog;
    for (int d : {3, 4, 8, 15, 16, 17, 31, 32, 33}) {
        prog.push_back({mp_name("min", d, d), fj::min(fj::window(A, d))});
        prog.push_back({mp_name("max", d, 1), fj::max(fj::window(A, d, 1))});
    }
    for (int d : {4, 16, 17}) {
        prog.push_back({"min_inf" + std::to_string(d), fj::min(fj::window(q, d, 1))});
        prog.push_back({"max_inf" + std::to_string(d), fj::max(fj::window(q, d))});
    }
    program_on_all<T>(prog);
}
TEST_CASE_TEMPLATE_APPLY(ops_extremes, fj::test::CpuTargets);

TEST_CASE_TEMPLATE_DEFINE("several outputs in one program share work", T, ops_multi_output) {
    using fj::window;
    const Expr m = fj::mean(window(A, 20)), s = fj::std(window(A, 20));
    program_on_all<T>({
        {"m20", m},
        {"s20", s},
        {"z", (A - fj::delay(A, 5)) / s},  // 0 / 0 = NaN on constant stretches, on both sides exactly
        {"c", fj::corr(window(A, 20), window(B, 20))},
        {"cv", fj::cov(window(A, 20), window(B, 20))},
        {"band", m + 2.0 * s},
        {"A_copy", A},
        {"d", fj::delta(A, 1)},
        {"k", fj::mean(window(C, 5)) * 0.0 + 2.5},
        {"nested", fj::mean(window(s, 10))},
    });
}
TEST_CASE_TEMPLATE_APPLY(ops_multi_output, fj::test::CpuTargets);

TEST_CASE_TEMPLATE_DEFINE("an output that is an input", T, ops_output_is_input) {
    program_on_all<T>({{"out", A}});
    program_on_all<T>({{"a", A}, {"b", B}, {"sum", A + B}});
}
TEST_CASE_TEMPLATE_APPLY(ops_output_is_input, fj::test::CpuTargets);

TEST_CASE_TEMPLATE_DEFINE("a constant output", T, ops_constant_output) {
    program_on_all<T>({{"m", fj::mean(fj::window(A, 5))}, {"k", fj::constant(2.5)}});
}
TEST_CASE_TEMPLATE_APPLY(ops_constant_output, fj::test::CpuTargets);

TEST_CASE_TEMPLATE_DEFINE("headline: corr(window(A,20), window(B,20))", T, ops_headline) {
    const NamedExprs prog = {{"corr", fj::corr(fj::window(A, 20), fj::window(B, 20))}};
    program_on_all<T>(prog);
    fj::test::PanelSpec spec = fj::test::messy(Flavour::Price);
    const Dataset wide = fj::test::dataset("price, messy, wide", 300, 1000, spec, 21, {"A", "B"});
    fj::test::check_against_reference(prog, wide, T::dtype, T::options());
}
TEST_CASE_TEMPLATE_APPLY(ops_headline, fj::test::CpuTargets);

TEST_CASE_TEMPLATE_DEFINE("w = 250 on a tall panel", T, ops_w250) {
    using fj::window;
    fj::test::PanelSpec spec = fj::test::messy(Flavour::Price);
    spec.max_constant = 400;  // some constant stretches longer than the window
    const Dataset tall = fj::test::dataset("price, messy, tall", 3000, 40, spec, 31, {"A", "B"});
    fj::test::check_against_reference(
        {
            {"corr", fj::corr(window(A, 250), window(B, 250))},
            {"cov", fj::cov(window(A, 250), window(B, 250))},
            {"mean", fj::mean(window(A, 250))},
            {"std", fj::std(window(A, 250))},
            {"var_mp", fj::var(window(A, 250, 100))},
            {"sum0", fj::sum(window(A, 250, 0))},
            {"min", fj::min(window(A, 250))},
            {"max", fj::max(window(A, 250, 1))},
        },
        tall, T::dtype, T::options());
}
TEST_CASE_TEMPLATE_APPLY(ops_w250, fj::test::CpuTargets);

}  // TEST_SUITE("ops")
