// Numerics: results independent of threads (bitwise) and of chunking (within the contract), large
// offsets, long constant stretches, all-NaN columns, degenerate shapes, windows longer than the panel.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "backend_cases.hpp"
#include "test_data.hpp"

namespace {

using fj::Expr;
using fj::window;
using fj::test::CheckOptions;
using fj::test::Dataset;
using fj::test::Flavour;
using fj::test::NamedExprs;

const Expr A = fj::input("A"), B = fj::input("B");

// Outputs with long-lived running state and nesting: what tiling and threading could disturb.
NamedExprs stateful_program() {
    return {
        {"corr20", fj::corr(window(A, 20), window(B, 20))},
        {"cov61", fj::cov(window(A, 61, 30), window(B, 61, 30))},
        {"mean20", fj::mean(window(A, 20))},
        {"std5", fj::std(window(A, 5))},
        {"var61", fj::var(window(A, 61, 10))},
        {"sum0", fj::sum(window(A, 13, 0))},
        {"max9", fj::max(window(A, 9, 3))},
        {"min9", fj::min(window(A, 9))},
        {"count7", fj::count(window(A, 7))},
        {"nested", fj::mean(window(fj::std(window(A, 5)), 10))},
        {"delayed", fj::sum(window(fj::delay(A, 3), 7)) - fj::delay(fj::mean(window(B, 4)), 2)},
    };
}

fj::CompileOptions opts(fj::CompileOptions o, int threads, std::int64_t tile_rows, std::int64_t block_cols) {
    o.threads = threads;
    o.tile_rows = tile_rows;
    o.block_cols = block_cols;
    return o;
}

// Bitwise equality of two runs' outputs (NaN equals NaN).
void require_identical(const std::map<std::string, std::vector<double>>& a,
                       const std::map<std::string, std::vector<double>>& b, std::int64_t cols, const std::string& what) {
    for (const auto& [name, v] : a) {
        const std::vector<double>& w = b.at(name);
        std::int64_t diffs = 0, first = -1;
        for (std::size_t i = 0; i < v.size(); ++i)
            if (!fj::test::same_value(v[i], w[i]) && diffs++ == 0) first = static_cast<std::int64_t>(i);
        CHECK_MESSAGE(diffs == 0, what << ": output '" << name << "' differs in " << diffs << " cells; first at (row "
                                       << first / cols << ", col " << first % cols << "): "
                                       << fj::test::fmt_num(first >= 0 ? v[first] : 0) << " vs "
                                       << fj::test::fmt_num(first >= 0 ? w[first] : 0));
    }
}

}  // namespace

TEST_SUITE("numerics") {

TEST_CASE_TEMPLATE_DEFINE("results are bitwise identical for 1, 2 and 3 threads", T, num_threads) {
    const Dataset ds = fj::test::dataset("price, messy", 700, 45, fj::test::messy(Flavour::Price), 41, {"A", "B"});
    const NamedExprs prog = stateful_program();
    for (std::int64_t tile : {std::int64_t{64}, std::int64_t{1000}})
        for (std::int64_t block : {std::int64_t{0}, std::int64_t{8}}) {
            CheckOptions check;
            check.label = ds.label;
            const auto one = fj::test::compile_and_run(prog, ds.inputs, ds.rows, ds.cols, T::dtype,
                                                       opts(T::options(), 1, tile, block), check);
            REQUIRE(one);
            for (int threads : {2, 3}) {
                const fj::CompileOptions o = opts(T::options(), threads, tile, block);
                const auto other = fj::test::compile_and_run(prog, ds.inputs, ds.rows, ds.cols, T::dtype, o, check);
                REQUIRE(other);
                require_identical(*one, *other, ds.cols,
                                  std::string(fj::dtype_name(T::dtype)) + ", " + fj::test::describe(o) + " vs 1 thread");
            }
        }
}
TEST_CASE_TEMPLATE_APPLY(num_threads, fj::test::CpuTargets);

TEST_CASE_TEMPLATE_DEFINE("results meet the contract for every tile_rows and block_cols", T, num_chunking) {
    const Dataset ds = fj::test::dataset("price, messy", 700, 45, fj::test::messy(Flavour::Price), 42, {"A", "B"});
    const NamedExprs prog = stateful_program();
    for (std::int64_t tile : {std::int64_t{1}, std::int64_t{7}, std::int64_t{64}, std::int64_t{1000}, ds.rows})
        fj::test::check_against_reference(prog, ds, T::dtype, opts(T::options(), 0, tile, 0));
    for (std::int64_t block : {std::int64_t{1}, std::int64_t{3}, std::int64_t{8}, std::int64_t{16}, std::int64_t{45},
                               std::int64_t{1000}})
        fj::test::check_against_reference(prog, ds, T::dtype, opts(T::options(), 2, 50, block));
    // Tiles shorter than the halo, with column blocks and padding together.
    CheckOptions padded;
    padded.ld_in = 50;
    padded.ld_out = 47;
    fj::test::check_against_reference(prog, ds, T::dtype, opts(T::options(), 3, 5, 5), padded);
}
TEST_CASE_TEMPLATE_APPLY(num_chunking, fj::test::CpuTargets);

TEST_CASE_TEMPLATE_DEFINE("large offsets: 1e4 + N(0,1)", T, num_offset_1e4) {
    fj::test::PanelSpec spec = fj::test::messy(Flavour::Offset1e4);
    const Dataset ds = fj::test::dataset("1e4 + N(0,1), messy", 2000, 24, spec, 51, {"A", "B"});
    const NamedExprs prog = {
        {"var20", fj::var(window(A, 20))},   {"std5", fj::std(window(A, 5))},
        {"std250", fj::std(window(A, 250))}, {"corr20", fj::corr(window(A, 20), window(B, 20))},
        {"cov61", fj::cov(window(A, 61), window(B, 61))}, {"mean20", fj::mean(window(A, 20))},
        {"sum250", fj::sum(window(A, 250))}, {"corr250", fj::corr(window(A, 250), window(B, 250))},
    };
    for (std::int64_t tile : {std::int64_t{0}, std::int64_t{100}, ds.rows})
        fj::test::check_against_reference(prog, ds, T::dtype, opts(T::options(), 0, tile, 0));
}
TEST_CASE_TEMPLATE_APPLY(num_offset_1e4, fj::test::CpuTargets);

TEST_CASE("large offsets: 1e6 + N(0,1) in float64") {
    fj::test::PanelSpec spec = fj::test::messy(Flavour::Offset1e6);
    const Dataset ds = fj::test::dataset("1e6 + N(0,1), messy", 2000, 24, spec, 52, {"A", "B"});
    const NamedExprs prog = {
        {"var20", fj::var(window(A, 20))},   {"std5", fj::std(window(A, 5))},
        {"std250", fj::std(window(A, 250))}, {"corr20", fj::corr(window(A, 20), window(B, 20))},
        {"cov61", fj::cov(window(A, 61), window(B, 61))}, {"mean20", fj::mean(window(A, 20))},
        {"sum250", fj::sum(window(A, 250))}, {"corr250", fj::corr(window(A, 250), window(B, 250))},
        {"var2", fj::var(window(A, 2))},
    };
    for (std::int64_t tile : {std::int64_t{0}, std::int64_t{100}, ds.rows})
        fj::test::check_against_reference(prog, ds, fj::DType::F64, opts(fj::test::CpuF64::options(), 0, tile, 0));
}

TEST_CASE_TEMPLATE_DEFINE("very long constant stretches", T, num_constant) {
    // Columns constant for hundreds of rows from the first row, then moving, then constant again for 600
    // rows at another level of the same size, then moving again. Even columns are price-like (walks
    // around 100), odd ones 1e4 + N(0,1), each constant at its own level; the second input moves throughout.
    const std::int64_t rows = 1500, cols = 20;
    fj::test::Inputs in = fj::test::make_inputs({"A", "B"}, rows, cols, fj::test::clean(Flavour::Price), 61);
    const std::vector<double> offset = fj::test::make_panel(rows, cols, fj::test::clean(Flavour::Offset1e4), 62);
    std::vector<double>& a = in["A"];
    for (std::int64_t j = 0; j < cols; ++j) {
        const bool odd = j % 2 != 0;
        const double level1 = odd ? 1e4 + 0.25 * static_cast<double>(j) : 100.0 + 1.0 / (static_cast<double>(j) + 3.0);
        const double level2 = odd ? level1 - 1.5 : level1 * 1.02;
        for (std::int64_t t = 0; t < rows; ++t) {
            const std::size_t i = static_cast<std::size_t>(t * cols + j);
            if (odd) a[i] = offset[i];
            if (t < 400 + 10 * j) a[i] = level1;           // from the first row
            else if (t >= 700 && t < 1300) a[i] = level2;  // 600 rows, then moving again
            else if (j % 3 == 0 && t % 17 == 0) a[i] = std::numeric_limits<double>::quiet_NaN();
        }
    }
    const Dataset ds{"long constant stretches", in, rows, cols};
    const NamedExprs prog = {
        {"var20", fj::var(window(A, 20))},    {"std250", fj::std(window(A, 250))},
        {"std5", fj::std(window(A, 5, 2))},   {"corr20", fj::corr(window(A, 20), window(B, 20))},
        {"corr250", fj::corr(window(A, 250), window(B, 250))}, {"cov20", fj::cov(window(A, 20), window(B, 20))},
        {"mean61", fj::mean(window(A, 61))},  {"sum250", fj::sum(window(A, 250))},
        {"min20", fj::min(window(A, 20))},    {"max20", fj::max(window(A, 20))},
        {"var_mp", fj::var(window(A, 61, 2))},
    };
    for (std::int64_t tile : {std::int64_t{0}, std::int64_t{1}, std::int64_t{37}, std::int64_t{500}, rows})
        fj::test::check_against_reference(prog, ds, T::dtype, opts(T::options(), 0, tile, 0));
}
TEST_CASE_TEMPLATE_APPLY(num_constant, fj::test::CpuTargets);

TEST_CASE_TEMPLATE_DEFINE("level shifts inside a column", T, num_level_shift) {
    // A column that moves from 1e4 + N(0,1) to a price-like walk around 100 and back (an unadjusted split,
    // a units change): a running state centred on the old level must not cost the new level its digits.
    const std::int64_t rows = 1200, cols = 12;
    fj::test::Inputs in = fj::test::make_inputs({"A", "B"}, rows, cols, fj::test::clean(Flavour::Price), 101);
    const std::vector<double> offset = fj::test::make_panel(rows, cols, fj::test::clean(Flavour::Offset1e4), 102);
    std::vector<double>& a = in["A"];
    for (std::int64_t t = 0; t < rows; ++t)
        for (std::int64_t j = 0; j < cols; ++j) {
            const std::size_t i = static_cast<std::size_t>(t * cols + j);
            if (t < 300 + 20 * j || t >= 900) a[i] = offset[i];
        }
    const Dataset ds{"1e4 + N(0,1), then a walk around 100, then 1e4 again", in, rows, cols};
    const NamedExprs prog = {
        {"var20", fj::var(window(A, 20))},  {"std5", fj::std(window(A, 5))},
        {"corr20", fj::corr(window(A, 20), window(B, 20))}, {"cov20", fj::cov(window(A, 20), window(B, 20))},
        {"mean20", fj::mean(window(A, 20))}, {"std250", fj::std(window(A, 250))},
    };
    for (std::int64_t tile : {std::int64_t{0}, std::int64_t{64}, rows})
        fj::test::check_against_reference(prog, ds, T::dtype, opts(T::options(), 0, tile, 0));
}
TEST_CASE_TEMPLATE_APPLY(num_level_shift, fj::test::CpuTargets);

TEST_CASE_TEMPLATE_DEFINE("a small spread far from where the window state started", T, num_small_spread) {
    const std::int64_t rows = 3, cols = 3;  // (level_change_inputs(): what each column holds)
    const fj::test::Inputs in = fj::test::level_change_inputs();
    const NamedExprs prog = fj::test::level_change_program();
    CheckOptions check;
    check.label = "level change, then a tiny move";
    // With exact (double-double) sums, which float64 panels always use; the spikes suite runs the same case
    // with the default float32 sums, which the refolds rebuild.
    fj::CompileOptions options = T::options();
    options.exact_sums = true;
    fj::test::check_against_reference(prog, in, rows, cols, T::dtype, options, check);
}
TEST_CASE_TEMPLATE_APPLY(num_small_spread, fj::test::CpuTargets);

TEST_CASE_TEMPLATE_DEFINE("skew, kurt and the regressions of a trend hundreds of window spreads from the shift", T, num_trend_moments) {
    // Inside one time tile a trend carries the windows' mean hundreds of their spreads away from the value the
    // sums are shifted by (the tile's first): M3 and M4 then cancel from sums of values far from their mean, which
    // neither float64 forming nor rounded squares afford (docs/numerics.md, skew and kurt). Levels of 100 (float64
    // terms x - shift exact) and 1e4 (not), steps of 0.5 and 3 against noise of 1e-5 and 1e-4 of the level, NaNs,
    // a constant stretch, one bad tick.
    const std::int64_t rows = 1500, cols = 16;
    fj::test::Inputs in = fj::test::make_inputs({"A"}, rows, cols, fj::test::clean(Flavour::Price), 131);
    fj::test::Rng rng(132);
    std::vector<double>& a = in["A"];
    for (std::int64_t j = 0; j < cols; ++j) {
        const double level = j % 2 ? 1e4 * (1.0 + 0.1 * static_cast<double>(j)) : 100.0 + static_cast<double>(j);
        const double step = j % 4 < 2 ? 0.5 : 3.0, noise = level * (j % 8 < 4 ? 1e-5 : 1e-4);
        for (std::int64_t t = 0; t < rows; ++t) {
            const std::size_t i = static_cast<std::size_t>(t * cols + j);
            a[i] = level + step * static_cast<double>(t) + noise * rng.normal();
            if (j % 5 == 0 && t >= 600 && t < 640) a[i] = a[i - static_cast<std::size_t>(cols)];  // ties
            if (j % 3 == 0 && t % 23 == 0) a[i] = std::numeric_limits<double>::quiet_NaN();
        }
    }
    a[static_cast<std::size_t>(1000 * cols + 7)] = 1e8;
    const Dataset ds{"trends far from the shift", in, rows, cols};
    const NamedExprs prog = {
        {"skew5", fj::skew(window(A, 5))},        {"kurt5", fj::kurt(window(A, 5))},
        {"skew20", fj::skew(window(A, 20))},      {"kurt20_mp", fj::kurt(window(A, 20, 6))},
        {"skew250", fj::skew(window(A, 250))},    {"kurt250", fj::kurt(window(A, 250))},
        // (the regressions' float64 terms are kept exactly: docs/numerics.md)
        {"slope5", fj::slope(window(A, 5))},      {"resid20", fj::resid(window(A, 20))},
        {"rsquare250_mp", fj::rsquare(window(A, 250, 30))},
    };
    for (std::int64_t tile : {std::int64_t{0}, std::int64_t{400}, rows})
        fj::test::check_against_reference(prog, ds, T::dtype, opts(T::options(), 0, tile, 0));
}
TEST_CASE_TEMPLATE_APPLY(num_trend_moments, fj::test::CpuTargets);

TEST_CASE_TEMPLATE_DEFINE("corr of a panel with itself is 1 (exactly in float32)", T, num_corr_itself) {
    for (std::int64_t tile : {std::int64_t{0}, std::int64_t{37}})
        fj::test::check_judged(fj::test::corr_with_itself(T::dtype, 600, 50), opts(T::options(), 0, tile, 0));
}
TEST_CASE_TEMPLATE_APPLY(num_corr_itself, fj::test::CpuTargets);

TEST_CASE("float64 sums that overflow give NaN, not a wrong number") {
    fj::test::check_judged(fj::test::float64_overflow(), fj::test::CpuF64::options());
}

TEST_CASE_TEMPLATE_DEFINE("all-NaN columns", T, num_all_nan) {
    fj::test::PanelSpec spec = fj::test::messy(Flavour::Price);
    spec.all_nan_cols = 9;
    const Dataset ds = fj::test::dataset("price, 9 of 17 columns all NaN", 300, 17, spec, 71, {"A", "B"});
    NamedExprs prog = stateful_program();
    prog.push_back({"sum0_allnan", fj::sum(window(A, 20, 0))});  // 0 over an empty window
    prog.push_back({"mean0_allnan", fj::mean(window(A, 20, 0))});  // NaN over an empty window
    prog.push_back({"ew", A * 2.0 + B});
    fj::test::check_against_reference(prog, ds, T::dtype, T::options());
    // Every column NaN.
    fj::test::Inputs nan_in = ds.inputs;
    for (auto& [name, v] : nan_in) v.assign(v.size(), std::numeric_limits<double>::quiet_NaN());
    fj::test::check_against_reference(prog, nan_in, ds.rows, ds.cols, T::dtype, T::options());
}
TEST_CASE_TEMPLATE_APPLY(num_all_nan, fj::test::CpuTargets);

TEST_CASE_TEMPLATE_DEFINE("degenerate shapes: 1 x 1, 1 x N, T x 1", T, num_shapes) {
    NamedExprs prog = stateful_program();
    prog.push_back({"sum0_5", fj::sum(window(A, 5, 0))});
    prog.push_back({"count", fj::count(window(A, 3))});
    prog.push_back({"mean1", fj::mean(window(A, 1))});
    prog.push_back({"ew", A - B});
    prog.push_back({"copy", A});
    struct Shape {
        std::int64_t rows, cols;
    };
    for (const Shape s : {Shape{1, 1}, Shape{1, 37}, Shape{1, 8}, Shape{500, 1}, Shape{2, 1}, Shape{3, 3}}) {
        const Dataset ds = fj::test::dataset("price, " + std::to_string(s.rows) + " x " + std::to_string(s.cols),
                                             s.rows, s.cols, fj::test::clean(Flavour::Price), 81, {"A", "B"});
        fj::test::check_against_reference(prog, ds, T::dtype, T::options());
        fj::test::check_against_reference(prog, ds, T::dtype, opts(T::options(), 2, 1, 1));
        CheckOptions padded;
        padded.ld_in = s.cols + 1;
        padded.ld_out = s.cols + 2;
        fj::test::check_against_reference(prog, ds, T::dtype, opts(T::options(), 0, 7, 0), padded);
    }
    const Dataset messy = fj::test::dataset("price, messy, 500 x 1", 500, 1, fj::test::messy(Flavour::Price), 82, {"A", "B"});
    fj::test::check_against_reference(prog, messy, T::dtype, T::options());
}
TEST_CASE_TEMPLATE_APPLY(num_shapes, fj::test::CpuTargets);

TEST_CASE_TEMPLATE_DEFINE("windows longer than the panel", T, num_long_windows) {
    const Dataset ds = fj::test::dataset("price, messy, 40 x 13", 40, 13, fj::test::messy(Flavour::Price), 91, {"A", "B"});
    const NamedExprs prog = {
        {"mean61", fj::mean(window(A, 61))},                  // never enough values: all NaN
        {"mean61_mp5", fj::mean(window(A, 61, 5))},
        {"sum250_mp0", fj::sum(window(A, 250, 0))},
        {"std61_mp3", fj::std(window(A, 61, 3))},
        {"corr61_mp10", fj::corr(window(A, 61, 10), window(B, 61, 10))},
        {"cov250_mp2", fj::cov(window(A, 250, 2), window(B, 250, 2))},
        {"max61_mp1", fj::max(window(A, 61, 1))},
        {"count250", fj::count(window(A, 250))},
        {"nested", fj::mean(window(fj::std(window(A, 30, 2)), 30, 2))},
        {"delay50", fj::delay(A, 50)},
    };
    for (std::int64_t tile : {std::int64_t{0}, std::int64_t{1}, std::int64_t{16}, std::int64_t{40}})
        fj::test::check_against_reference(prog, ds, T::dtype, opts(T::options(), 0, tile, 0));
}
TEST_CASE_TEMPLATE_APPLY(num_long_windows, fj::test::CpuTargets);

}  // TEST_SUITE("numerics")
