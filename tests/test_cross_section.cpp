// Cross-sectional operators (row steps): every operator against the reference (tests/reference.cpp, which
// ranks by counting and finds groups by comparing ids, no sort) on both dtypes of the CPU backend; data with
// NaNs, ties (-0 and +0 among them), whole rows missing, rows of one column, groups of one, NaN group ids
// and large offsets; programs that mix time-series and row steps, on any time tile and thread count.
//
// Ranks of computed values (rank(corr(...))) may swap values that lie within the contract's bound of each
// other (docs/operators.md, "Accuracy contract"): check_ranks_within_bound accepts exactly those swaps.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "backend_cases.hpp"
#include "codegen/plan.hpp"
#include "dsl/parse.hpp"
#include "runtime/backend.hpp"
#include "reference.hpp"
#include "test_data.hpp"

namespace {

using fj::Expr;
using fj::test::CheckOptions;
using fj::test::Dataset;
using fj::test::Flavour;
using fj::test::NamedExprs;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

const Expr A = fj::input("A"), B = fj::input("B"), G = fj::input("G");

// A and B of `flavour` (messy: isolated NaNs, suspensions, constant stretches, all-NaN columns), then:
// ties (every fourth column copies its left neighbour; in N(0,1) data a fifth of the cells rounded to
// halves, with -0 and +0), whole rows missing (rows 3 and 5 mod 17 of A, row 4 mod 17 of both), and G:
// group ids 0..3, NaN in about 10 % of the cells, an id of its own (a group of one) in about 5 %.
Dataset cross_data(const std::string& label, std::int64_t rows, std::int64_t cols, Flavour flavour, std::uint64_t seed) {
    Dataset ds = fj::test::dataset(label, rows, cols, fj::test::messy(flavour), seed, {"A", "B"});
    fj::test::Rng rng(seed + 77);
    auto at = [&](const char* name, std::int64_t t, std::int64_t j) -> double& {
        return ds.inputs.at(name)[static_cast<std::size_t>(t * cols + j)];
    };
    std::vector<double> g(static_cast<std::size_t>(rows * cols));
    for (std::int64_t t = 0; t < rows; ++t) {
        for (std::int64_t j = 0; j < cols; ++j) {
            if (j % 4 == 3) at("A", t, j) = at("A", t, j - 1);
            if (flavour == Flavour::Normal && rng.uniform() < 0.2) {
                const double r = std::round(at("A", t, j) * 2) / 2;
                at("A", t, j) = r == 0 && rng.uniform() < 0.5 ? -0.0 : r;
            }
            const double u = rng.uniform();
            g[static_cast<std::size_t>(t * cols + j)] =
                u < 0.1 ? kNaN : u < 0.15 ? 1000.0 + static_cast<double>(j) : std::floor(rng.uniform() * 4);
        }
        if (t % 17 == 3 || t % 17 == 5 || t % 17 == 4)
            for (std::int64_t j = 0; j < cols; ++j) at("A", t, j) = kNaN;
        if (t % 17 == 4)
            for (std::int64_t j = 0; j < cols; ++j) at("B", t, j) = kNaN;
    }
    ds.inputs["G"] = g;
    return ds;
}

struct CrossData {
    Dataset ds;
    CheckOptions check;
};

std::vector<CrossData> cross_datasets() {
    std::vector<CrossData> v;
    CheckOptions padded;
    padded.ld_in = 41;
    padded.ld_out = 40;
    v.push_back({cross_data("N(0,1) with ties, messy", 120, 37, Flavour::Normal, 31), padded});
    v.push_back({cross_data("price, messy", 90, 37, Flavour::Price, 32), {}});
    v.push_back({cross_data("1e4 + N(0,1), messy", 90, 37, Flavour::Offset1e4, 33), {}});
    v.push_back({cross_data("1e6 + N(0,1), messy", 60, 23, Flavour::Offset1e6, 34), {}});
    v.push_back({cross_data("one column", 40, 1, Flavour::Normal, 35), {}});
    v.push_back({cross_data("two columns", 40, 2, Flavour::Normal, 36), {}});
    v.push_back({cross_data("N(0,1) wide", 12, 300, Flavour::Normal, 37), {}});
    return v;
}

std::vector<Expr> every_cross_op() {
    return {fj::rank(A),          fj::zscore(A),        fj::demean(A),      fj::scale(A),
            fj::scale(A, 3.0),    fj::scale(B, A),      fj::group_neutralize(A, G),
            fj::group_rank(A, G), fj::group_zscore(A, G), fj::group_rank(B, A > 0.0)};
}

// For outputs rank(X) / group_rank(X, g) of a computed X: the result may differ from the reference where
// X's values lie within the contract's bound of each other (docs/operators.md). Accepts a rank in
// [(definitely below + 1) / n, (below or within the bound) / n] of X's reference values in its group; NaN
// placement must be the reference's.
std::string check_ranks_within_bound(const std::vector<double>& got, const std::vector<double>& x_ref,
                                     const std::vector<double>* g_ref, std::int64_t rows, std::int64_t cols,
                                     double tol) {
    std::int64_t bad = 0;
    std::string first;
    for (std::int64_t t = 0; t < rows; ++t)
        for (std::int64_t j = 0; j < cols; ++j) {
            const std::size_t i = static_cast<std::size_t>(t * cols + j);
            const double v = x_ref[i];
            const bool defined = !std::isnan(v) && !(g_ref && std::isnan((*g_ref)[i]));
            if (!defined || std::isnan(got[i])) {
                if (defined != !std::isnan(got[i]) && bad++ == 0)
                    first = "NaN placement differs at (row " + std::to_string(t) + ", col " + std::to_string(j) + ")";
                continue;
            }
            double n = 0, below = 0, close_or_below = 0;
            for (std::int64_t k = 0; k < cols; ++k) {
                const std::size_t m = static_cast<std::size_t>(t * cols + k);
                const double u = x_ref[m];
                if (std::isnan(u) || (g_ref && !((*g_ref)[m] == (*g_ref)[i]))) continue;
                const bool close = std::fabs(u - v) <= 2 * tol * std::max({1.0, std::fabs(u), std::fabs(v)});
                n += 1;
                below += u < v && !close;
                close_or_below += u < v || close;
            }
            const double lo = (below + 1) / n, hi = close_or_below / n, slack = 1e-6;
            if (!(got[i] >= lo - slack && got[i] <= hi + slack) && bad++ == 0)
                first = "(row " + std::to_string(t) + ", col " + std::to_string(j) + "): got " + fj::test::fmt_num(got[i]) +
                        ", allowed [" + fj::test::fmt_num(lo) + ", " + fj::test::fmt_num(hi) + "]";
        }
    return bad ? std::to_string(bad) + " cells bad; first " + first : "";
}

// Programs mixing time-series and row steps whose outputs the usual contract judges: ranks of inputs are
// exact on both sides, and what follows them is smooth.
NamedExprs mixed_program() {
    return {
        {"mean_of_rank", fj::mean(fj::window(fj::rank(A), 5))},
        {"rank_of_rank", fj::rank(fj::rank(A) + 0.5)},
        {"zscore_delta", fj::delta(fj::zscore(A), 3)},
        {"neutral_plus", fj::group_neutralize(A, G) * 2.0 + fj::std(fj::window(fj::demean(B), 10))},
        {"scaled_mean", fj::scale(fj::mean(fj::window(B, 4)), 10.0)},
        {"demean_of_mean", fj::demean(fj::mean(fj::window(fj::rank(B), 3)))},
        {"rank_plain", fj::rank(B)},
    };
}

}  // namespace

TEST_SUITE("cross_section") {

TEST_CASE("the reference's cross-sectional definitions on hand-made groups") {
    using fj::Op;
    using fj::test::cross_section_reduce;
    CHECK(cross_section_reduce(Op::Rank, {3, 1, 3, 2}) == std::vector<double>{0.875, 0.25, 0.875, 0.5});
    CHECK(cross_section_reduce(Op::Rank, {-0.0, 0.0}) == std::vector<double>{0.75, 0.75});
    CHECK(cross_section_reduce(Op::Rank, {5}) == std::vector<double>{1.0});
    CHECK(cross_section_reduce(Op::Demean, {1, 2, 6}) == std::vector<double>{-2, -1, 3});
    CHECK(cross_section_reduce(Op::Demean, {0.1, 0.1, 0.1}) == std::vector<double>{0, 0, 0});
    CHECK(cross_section_reduce(Op::ZScore, {1, 2, 3}) == std::vector<double>{-1, 0, 1});
    CHECK(std::isnan(cross_section_reduce(Op::ZScore, {4})[0]));
    CHECK(std::isnan(cross_section_reduce(Op::ZScore, {4, 4})[1]));
    CHECK(cross_section_reduce(Op::Scale, {1, -3}) == std::vector<double>{0.25, -0.75});
    CHECK(std::isnan(cross_section_reduce(Op::Scale, {0, 0})[0]));
}

TEST_CASE_TEMPLATE_DEFINE("every cross-sectional operator against the reference", T, cross_ops) {
    if (!fj::test::available<T>()) return;
    for (const CrossData& d : cross_datasets()) {
        CAPTURE(d.ds.label);
        fj::test::check_each(every_cross_op(), d.ds, T::dtype, T::options(), d.check);
        // Every operator of one program (several row steps, one run), and of constants.
        NamedExprs all;
        for (const Expr& e : every_cross_op()) all.push_back({"o" + std::to_string(all.size()), e});
        all.push_back({"rank_const", fj::rank(fj::constant(2.0))});
        all.push_back({"zscore_const", fj::zscore(fj::constant(2.0))});
        all.push_back({"demean_const", fj::demean(fj::constant(2.0) + 0.0 * B)});
        all.push_back({"group_rank_by_self", fj::group_rank(A, A)});
        fj::test::check_against_reference(all, d.ds, T::dtype, T::options(), d.check);
    }
}
TEST_CASE_TEMPLATE_APPLY(cross_ops, fj::test::CpuTargets);
TEST_CASE_TEMPLATE_APPLY(cross_ops, fj::test::CudaTargets);

// The CUDA row kernels (runtime/cuda/row_kernels.hpp) sort float32 rows (but for group_rank) by a radix sort of
// 12 keys a thread in blocks of ceil(cols / 384) warps while its buffers fit shared memory (383, 384 and 385
// columns: one warp's keys short, exact and over; rank up to 12,288 columns, the others to about 9,000), and the
// others by a bitonic sort: in shared memory up to 8,192 columns (float32's packed keys: 16,384) and in global
// memory beyond (12,000 and 40,000 columns).
TEST_CASE_TEMPLATE_DEFINE("rows wider than shared memory holds", T, cross_wide) {
    if (!fj::test::available<T>()) return;
    for (std::int64_t cols : {383, 384, 385, 5000, 12000, 12288, 12289, 40000}) {
        CAPTURE(cols);
        const Dataset ds = cross_data("N(0,1) with ties, messy, wide", 3, cols, Flavour::Normal, 61);
        fj::test::check_each(every_cross_op(), ds, T::dtype, T::options());
    }
}
TEST_CASE_TEMPLATE_APPLY(cross_wide, fj::test::CudaTargets);

TEST_CASE("float64 rows beyond 1e154: zscore is NaN where its sum of squares overflows, the rest as usual") {
    if (!fj::test::available<fj::test::CpuF64>()) return;
    Dataset ds = cross_data("N(0,1), rows x 1e160", 40, 23, Flavour::Normal, 38);
    for (const char* name : {"A", "B"})
        for (std::size_t i = 0; i < ds.inputs.at(name).size(); ++i)
            if ((i / 23) % 3 == 1) ds.inputs.at(name)[i] *= 1e160;
    fj::CompileOptions o;
    o.backend = fj::Backend::Cpu;
    fj::test::check_each(every_cross_op(), ds, fj::DType::F64, o);
    const auto ref = fj::test::reference(fj::zscore(A), ds.inputs, ds.rows, ds.cols);
    CHECK(std::isnan(ref[23 + 1]));  // row 1 (x 1e160) overflows; row 0 does not
    CHECK(!std::isnan(ref[1]));
}

TEST_CASE_TEMPLATE_DEFINE("time-series and row steps mixed, on any time tile and thread count", T, cross_mixed) {
    if (!fj::test::available<T>()) return;
    const Dataset ds = cross_data("price, messy", 260, 37, Flavour::Price, 41);
    std::optional<std::map<std::string, std::vector<double>>> first;
    for (int threads : {1, 2})
        for (std::int64_t tile : {0, 7, 97}) {
            CAPTURE(threads);
            CAPTURE(tile);
            fj::CompileOptions o = T::options();
            o.threads = threads;
            o.tile_rows = tile;
            fj::test::check_against_reference(mixed_program(), ds, T::dtype, o);
            // The same tile on any thread count: bitwise the same.
            const auto got = fj::test::compile_and_run(mixed_program(), ds.inputs, ds.rows, ds.cols, T::dtype, o);
            REQUIRE(got);
            if (tile == 97 && threads == 1) first = got;
            if (tile == 97 && threads == 2)
                for (const auto& [name, v] : *first)
                    for (std::size_t i = 0; i < v.size(); ++i)
                        REQUIRE_MESSAGE(fj::test::same_value(v[i], got->at(name)[i]), name << " cell " << i);
        }
}
TEST_CASE_TEMPLATE_APPLY(cross_mixed, fj::test::CpuTargets);
TEST_CASE_TEMPLATE_APPLY(cross_mixed, fj::test::CudaTargets);

TEST_CASE_TEMPLATE_DEFINE("ranks of computed values: rank(-1 * correlation(open, volume, 10)) and group ranks", T, cross_computed) {
    if (!fj::test::available<T>()) return;
    Dataset ds = cross_data("price, messy", 200, 37, Flavour::Price, 51);
    ds.inputs["open"] = ds.inputs.at("A");
    ds.inputs["volume"] = fj::test::make_panel(ds.rows, ds.cols, fj::test::messy(Flavour::Offset1e4), 52);
    const Expr open = fj::input("open"), volume = fj::input("volume");
    const Expr corr = -1 * fj::corr(fj::window(open, 10), fj::window(volume, 10));
    const Expr detrended = fj::mean(fj::window(open, 5)) - open;
    const Expr rank_corr = fj::parse("rank(-1 * correlation(open, volume, 10))");
    REQUIRE(rank_corr.same(fj::rank(corr)));
    const NamedExprs program = {{"rank_corr", rank_corr}, {"group_rank", fj::group_rank(detrended, G)}};
    const fj::test::Inputs data = fj::test::as_dtype(ds.inputs, T::dtype);
    const auto inner = fj::test::reference(std::vector<Expr>{corr, detrended, G}, data, ds.rows, ds.cols);
    const double tol = T::dtype == fj::DType::F32 ? 1e-5 : 1e-9;
    for (std::int64_t tile : {0, 7, 64}) {
        CAPTURE(tile);
        fj::CompileOptions o = T::options();
        o.tile_rows = tile;
        const auto got = fj::test::compile_and_run(program, ds.inputs, ds.rows, ds.cols, T::dtype, o);
        REQUIRE(got);
        const std::string a = check_ranks_within_bound(got->at("rank_corr"), inner[0], nullptr, ds.rows, ds.cols, tol);
        CHECK_MESSAGE(a.empty(), "rank_corr: " << a);
        const std::string b = check_ranks_within_bound(got->at("group_rank"), inner[1], &inner[2], ds.rows, ds.cols, tol);
        CHECK_MESSAGE(b.empty(), "group_rank: " << b);
    }
    // In float64 the ranks of these continuous values are the reference's, and so is what follows them:
    // a chain of row -> time series -> row -> time series.
    if (T::dtype == fj::DType::F64) {
        const NamedExprs chain = {
            {"rank_corr", rank_corr},
            {"chain", fj::max(fj::window(fj::rank(fj::std(fj::window(fj::rank(open), 10)) / open), 3))},
            {"neutral", fj::group_neutralize(corr, G)},
        };
        for (std::int64_t tile : {0, 11})
            fj::test::check_against_reference(chain, ds, T::dtype, [&] {
                fj::CompileOptions o = T::options();
                o.tile_rows = tile;
                return o;
            }());
    }
}
TEST_CASE_TEMPLATE_APPLY(cross_computed, fj::test::CpuTargets);
TEST_CASE_TEMPLATE_APPLY(cross_computed, fj::test::CudaTargets);

TEST_CASE("explain() shows row steps, the panels alive and the CPU's row-step line") {
    if (!fj::test::available<fj::test::CpuF32>()) return;
    fj::CompileOptions o;
    o.backend = fj::Backend::Cpu;
    const fj::Program p = fj::compile({{"r", fj::mean(fj::window(fj::rank(A), 5))}}, o);
    std::vector<float> a(100, 1.0f), r(100);
    p.run({{"A", fj::Panel::host(a.data(), 20, 5)}}, {{"r", fj::Panel::host(r.data(), 20, 5)}});
    const std::string text = p.explain();
    CAPTURE(text);
    CHECK(text.find("step 0: row (rank over whole rows, reads [A]), no halo of its own (0 along its chain), 3 panel(s) "
                    "alive (1 intermediate(s))") != std::string::npos);
    CHECK(text.find("step 1: time series, halo 4 rows (4 along its chain)") != std::string::npos);
    CHECK(text.find("memory: 1 input and 1 output panel(s), at most 1 intermediate(s) alive at once: 3 panel(s)") !=
          std::string::npos);
    CHECK(text.find("step 0 row step") != std::string::npos);
    CHECK(text.find("last run 20 x 5 float32: at most 0.0012 MB of panels at once (inputs, outputs and 1 intermediate(s))") !=
          std::string::npos);
    CHECK(r[99] == 0.6f);  // a constant row: every rank (1 + 5) / 2 / 5
}

TEST_CASE("refuse_row_steps: a clear message for backends without row steps; the CPU and CUDA run them") {
    const fj::codegen::Plan p = fj::codegen::make_plan({{"r", fj::rank(-A)}, {"m", fj::mean(fj::window(A, 3))}});
    try {
        fj::codegen::refuse_row_steps(p, "CUDA");
        FAIL("refuse_row_steps accepted a plan with a row step");
    } catch (const fj::BackendError& e) {
        CHECK(std::string(e.what()) == "cross-sectional operator 'rank' is not on the CUDA backend yet; use backend cpu");
    }
    CHECK_NOTHROW(fj::codegen::refuse_row_steps(fj::codegen::make_plan({{"m", fj::mean(fj::window(A, 3))}}), "CUDA"));
    if (fj::rt::BackendImpl* cpu = fj::rt::cpu_backend()) CHECK(cpu->runs_row_steps());
    if (fj::rt::BackendImpl* cuda = fj::rt::cuda_backend()) {
        CHECK(cuda->runs_row_steps());  // (runtime/cuda/row_kernels.hpp)
        fj::CompileOptions o;
        o.backend = fj::Backend::Auto;
        CHECK(fj::compile({{"r", fj::rank(A)}}, o).backend() == fj::Backend::Cuda);
    }
}

}  // TEST_SUITE
