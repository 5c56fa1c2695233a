// The time-series operators of Alpha101 (argmin, argmax, ts_rank, product, decay_linear) against the reference
// (tests/reference.cpp), on the CPU backend, float64 and float32: every window length the lowering treats
// differently (1, 2, powers of two and beside them, 64, 250), min_periods, the ops suite's messy data, ties,
// infinities, 1e4 offsets and 1e8 spikes, time tiles, nesting, and the formula spellings.
// (The CUDA kernels of these operators are compiled and run on the host by the cuda_compile suite through
// tests/cuda_cases.hpp.)
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "backend_cases.hpp"
#include "dsl/parse.hpp"
#include "reference.hpp"
#include "test_data.hpp"

namespace {

using fj::Expr;
using fj::test::CheckOptions;
using fj::test::Dataset;
using fj::test::Flavour;
using fj::test::NamedExprs;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

const Expr A = fj::input("A"), B = fj::input("B"), C = fj::input("C");
const Expr dA = A - fj::delay(A, 1);

struct TsOp {
    const char* name;
    fj::Op op;
    Expr (*f)(const fj::Window&);
};

const TsOp kOps[] = {
    {"argmin", fj::Op::WArgMin, [](const fj::Window& w) { return fj::argmin(w); }},
    {"argmax", fj::Op::WArgMax, [](const fj::Window& w) { return fj::argmax(w); }},
    {"ts_rank", fj::Op::WTsRank, [](const fj::Window& w) { return fj::ts_rank(w); }},
    {"product", fj::Op::WProduct, [](const fj::Window& w) { return fj::product(w); }},
    {"decay_linear", fj::Op::WDecayLinear, [](const fj::Window& w) { return fj::decay_linear(w); }},
};

// Small integers (0 .. 4) with NaNs and runs: ties everywhere, for argmin/argmax (the oldest wins) and ts_rank
// (average ranks).
Dataset ties_data(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
    Dataset ds = fj::test::dataset("small integers, ties, NaN", rows, cols, fj::test::messy(Flavour::Normal), seed);
    fj::test::Rng rng(seed);
    for (auto& [name, v] : ds.inputs)
        for (double& x : v)
            if (!std::isnan(x)) x = static_cast<double>(rng.integer(0, 4));
    return ds;
}

// Price-like walks with bad ticks of 1e8 (and one of -1e8) in most columns, and a 1e4 level in column 1 from
// the middle on: the values that left a window must leave nothing behind in decay_linear and product.
Dataset spike_data(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
    Dataset ds = fj::test::dataset("price, spikes of 1e8", rows, cols, fj::test::messy(Flavour::Price), seed);
    fj::test::Rng rng(seed + 1);
    for (auto& [name, v] : ds.inputs) {
        for (std::int64_t j = 0; j < cols; ++j) {
            if (j % 4 == 3) continue;  // some columns stay clean
            for (int s = 0; s < 3; ++s) {
                const std::int64_t t = rng.integer(0, rows - 1);
                v[static_cast<std::size_t>(t * cols + j)] = s == 2 && j % 2 ? -1e8 : 1e8;
            }
        }
        for (std::int64_t t = rows / 2; t < rows; ++t) {
            double& x = v[static_cast<std::size_t>(t * cols + 1)];
            if (!std::isnan(x)) x += 1e4;
        }
    }
    return ds;
}

std::vector<Dataset> all_data() {
    std::vector<Dataset> v;
    v.push_back(fj::test::dataset("price, messy", 600, 37, fj::test::messy(Flavour::Price), 11));
    v.push_back(fj::test::dataset("1e4 + N(0,1), messy", 600, 37, fj::test::messy(Flavour::Offset1e4), 12));
    v.push_back(fj::test::dataset("N(0,1), messy", 400, 19, fj::test::messy(Flavour::Normal), 13));
    v.push_back(ties_data(400, 21, 14));
    v.push_back(spike_data(600, 23, 15));
    return v;
}

template <class T>
void program_on_all(const NamedExprs& exprs, fj::CompileOptions options = {}) {
    for (const Dataset& ds : all_data()) fj::test::check_against_reference(exprs, ds, T::dtype, T::options(options));
}

std::string case_name(const char* op, int d, int mp) {
    return std::string(op) + "_d" + std::to_string(d) + "_mp" + std::to_string(mp);
}

double reduce(fj::Op op, std::vector<double> rows, int min_periods) {
    return fj::test::window_reduce_rows(op, rows, min_periods);
}

}  // namespace

TEST_SUITE("ops") {

TEST_CASE("the reference's definitions on hand-made windows") {
    using fj::Op;
    // Positions count from the window's oldest row, 1 .. d; missing rows keep their place.
    CHECK(reduce(Op::WArgMax, {1, 3, 2}, 3) == 2);
    CHECK(reduce(Op::WArgMax, {3, 1, 3}, 3) == 1);                // ties: the oldest
    CHECK(reduce(Op::WArgMin, {kNaN, 2, 1, 1}, 1) == 3);
    CHECK(reduce(Op::WArgMax, {kNaN, -kInf, -kInf}, 1) == 2);     // -inf is a value
    CHECK(std::isnan(reduce(Op::WArgMax, {kNaN, 1, 2}, 3)));      // fewer than min_periods
    CHECK(std::isnan(reduce(Op::WArgMin, {kNaN, kNaN}, 0)));      // no value at all
    // ts_rank: average-tie rank of the newest among the valid values, / n.
    CHECK(reduce(Op::WTsRank, {1, 2, 3}, 3) == 1.0);
    CHECK(reduce(Op::WTsRank, {3, 2, 1}, 3) == 1.0 / 3);
    CHECK(reduce(Op::WTsRank, {2, kNaN, 1, 2}, 1) == 2.5 / 3);    // below 1, equal 2 (itself included)
    CHECK(std::isnan(reduce(Op::WTsRank, {1, 2, kNaN}, 1)));       // the newest missing
    CHECK(reduce(Op::WTsRank, {kNaN, 5}, 1) == 1.0);
    // product: of the valid values; of none 1 (min_periods 0).
    CHECK(reduce(Op::WProduct, {2, kNaN, 3}, 2) == 6);
    CHECK(reduce(Op::WProduct, {kNaN, kNaN}, 0) == 1);
    CHECK(std::isnan(reduce(Op::WProduct, {kInf, 0}, 2)));
    // decay_linear: weights 1 .. d oldest to newest over the valid rows.
    CHECK(reduce(Op::WDecayLinear, {1, 2, 3}, 3) == doctest::Approx(14.0 / 6));
    CHECK(reduce(Op::WDecayLinear, {4, kNaN, 1}, 1) == doctest::Approx((4.0 + 3.0) / 4));
    CHECK(reduce(Op::WDecayLinear, {kNaN, kNaN, 7}, 1) == 7);
    CHECK(std::isnan(reduce(Op::WDecayLinear, {kNaN, kNaN}, 0)));
}

TEST_CASE("formula spellings and round trips") {
    const Expr x = fj::input("x");
    auto same = [](const char* text, const Expr& e) {
        CAPTURE(text);
        CHECK(fj::parse(text).same(e));
    };
    same("Ts_ArgMax(x, 5)", fj::argmax(fj::window(x, 5)));
    same("ts_argmax(x, 5)", fj::argmax(fj::window(x, 5)));
    same("argmax(window(x, 5, 2))", fj::argmax(fj::window(x, 5, 2)));
    same("argmax(x, 5)", fj::argmax(fj::window(x, 5)));
    same("Ts_ArgMin(x, 9.7)", fj::argmin(fj::window(x, 9)));  // floored
    same("argmin(window(x, 3))", fj::argmin(fj::window(x, 3)));
    same("Ts_Rank(x, 5)", fj::ts_rank(fj::window(x, 5)));
    same("ts_rank(window(x, 5, 1))", fj::ts_rank(fj::window(x, 5, 1)));
    same("product(x, 10)", fj::product(fj::window(x, 10)));
    same("Product(x, 10)", fj::product(fj::window(x, 10)));
    same("ts_product(x, 10)", fj::product(fj::window(x, 10)));
    same("product(window(x, 10, 0))", fj::product(fj::window(x, 10, 0)));
    same("Decay_linear(x, 5)", fj::decay_linear(fj::window(x, 5)));
    same("decay_linear(window(x, 20, 10))", fj::decay_linear(fj::window(x, 20, 10)));
    same("min(product(x, 1), 5)", fj::min(fj::window(fj::product(fj::window(x, 1)), 5)));  // Alpha #29
    for (const TsOp& op : kOps) {
        for (const Expr& e : {op.f(fj::window(x, 7)), op.f(fj::window(x * 2.0, 7, 3)), op.f(fj::window(x, 1, 0))}) {
            CAPTURE(e.str());
            CHECK(fj::parse(e.str()).same(e));
            CHECK(e.op() == op.op);
        }
    }
    CHECK_THROWS_AS(fj::argmax(fj::window(x, 0)), fj::ExprError);
    CHECK_THROWS_WITH_AS(fj::parse("ts_rank(x)"), doctest::Contains("ts_rank of one argument takes a window"), fj::ParseError);
    CHECK_THROWS_WITH_AS(fj::parse("decay_linear(x, 0)"), doctest::Contains("window length must be >= 1"), fj::ParseError);
    CHECK_THROWS_WITH_AS(fj::parse("rank(window(x, 5))"), doctest::Contains("ts_rank(window(x, d))"), fj::ParseError);
}

TEST_CASE_TEMPLATE_DEFINE("argmin, argmax, ts_rank, product, decay_linear: every d and min_periods", T, ts_ops_windows) {
    for (const TsOp& op : kOps) {
        CAPTURE(std::string(op.name));
        NamedExprs prog;
        // product of prices overflows from about 150 rows on (both sides say inf): its long windows take returns.
        const Expr x = op.op == fj::Op::WProduct ? A / fj::delay(A, 1) : A;
        for (int d : {1, 2, 3, 4, 5, 7, 8, 9, 20, 64, 250}) {
            prog.push_back({case_name(op.name, d, d), op.f(fj::window(x, d))});
            if (d >= 4) prog.push_back({case_name(op.name, d, d / 2), op.f(fj::window(x, d, d / 2))});
            if (d >= 2) prog.push_back({case_name(op.name, d, 1), op.f(fj::window(x, d, 1))});
            prog.push_back({case_name(op.name, d, 0), op.f(fj::window(x, d, 0))});
        }
        program_on_all<T>(prog);
    }
}
TEST_CASE_TEMPLATE_APPLY(ts_ops_windows, fj::test::CpuTargets);

TEST_CASE_TEMPLATE_DEFINE("argmin, argmax, ts_rank, product, decay_linear: each alone, of expressions, infinities", T,
                          ts_ops_single) {
    const Expr q = B / dA;  // +-inf in constant stretches, NaN at 0 / 0
    for (const TsOp& op : kOps) {
        CAPTURE(std::string(op.name));
        for (const Dataset& ds : all_data()) {
            fj::test::check_each({op.f(fj::window(A, 5)), op.f(fj::window(A, 16)), op.f(fj::window(A, 17, 3)),
                                  op.f(fj::window(dA, 10, 4)), op.f(fj::window(A - B * 0.5, 12)),
                                  op.f(fj::window(q, 6, 1)), op.f(fj::window(q, 33))},
                                 ds, T::dtype, T::options());
        }
    }
}
TEST_CASE_TEMPLATE_APPLY(ts_ops_single, fj::test::CpuTargets);

TEST_CASE_TEMPLATE_DEFINE("results do not depend on time tiles, column blocks or threads", T, ts_ops_tiles) {
    NamedExprs prog;
    for (const TsOp& op : kOps)
        for (int d : {5, 20, 64}) prog.push_back({case_name(op.name, d, d / 2), op.f(fj::window(op.op == fj::Op::WProduct ? A / fj::delay(A, 1) : A, d, d / 2))});
    prog.push_back({"rank_of_max", fj::ts_rank(fj::window(fj::max(fj::window(A, 5)), 12))});
    prog.push_back({"mean_of_decay", fj::mean(fj::window(fj::decay_linear(fj::window(A, 9)), 7))});
    struct Chunking {
        int threads;
        std::int64_t tile_rows, block_cols;
    };
    for (const Chunking& c : {Chunking{1, 7, 0}, Chunking{2, 33, 8}, Chunking{3, 64, 16}, Chunking{2, 250, 0}}) {
        CAPTURE(c.tile_rows);
        fj::CompileOptions o;
        o.threads = c.threads;
        o.tile_rows = c.tile_rows;
        o.block_cols = c.block_cols;
        for (const Dataset& ds : all_data()) fj::test::check_against_reference(prog, ds, T::dtype, T::options(o));
    }
}
TEST_CASE_TEMPLATE_APPLY(ts_ops_tiles, fj::test::CpuTargets);

TEST_CASE_TEMPLATE_DEFINE("nested and beside the other window operators", T, ts_ops_nested) {
    using fj::window;
    const Expr volume = fj::input("C");
    // Inner windows whose values both sides compute exactly (ties must be the same ties): inputs, extremes,
    // element-wise expressions; smooth inner windows under smooth outer ones.
    program_on_all<T>({
        {"ts_rank_volume_32", fj::ts_rank(window(volume, 32))},
        {"decay_of_corr", fj::decay_linear(window(fj::corr(window(A, 10), window(B, 10)), 5))},
        {"argmax_of_max", fj::argmax(window(fj::max(window(A, 5)), 10))},
        {"argmin_of_delta", fj::argmin(window(fj::delta(A, 3), 10, 5))},
        {"rank_of_min", fj::ts_rank(window(fj::min(window(A, 3)), 10))},
        {"product_of_ratio", fj::product(window(fj::mean(window(A, 3)) / fj::mean(window(A, 6)), 20))},
        {"std_of_decay", fj::std(window(fj::decay_linear(window(A, 10)), 20))},
        {"mean_of_argmax", fj::mean(window(fj::argmax(window(A, 10)), 5))},
        {"decay_of_rank", fj::decay_linear(window(fj::ts_rank(window(A, 6)), 8))},
        {"delay_of_product", fj::delay(fj::product(window(A / fj::delay(A, 1), 12)), 3)},
        {"where_rank", fj::where(fj::ts_rank(window(A, 10)) > 0.5, fj::decay_linear(window(B, 10)), -fj::argmin(window(B, 10)))},
        // The same window under every kind of reducer: rings, counts and sums side by side.
        {"w_min", fj::min(window(A, 20))},
        {"w_argmin", fj::argmin(window(A, 20))},
        {"w_max", fj::max(window(A, 20, 5))},
        {"w_argmax", fj::argmax(window(A, 20, 5))},
        {"w_mean", fj::mean(window(A, 20))},
        {"w_std", fj::std(window(A, 20, 5))},
        {"w_rank", fj::ts_rank(window(A, 20, 5))},
        {"w_decay", fj::decay_linear(window(A, 20))},
        {"w_sum0", fj::sum(window(A, 20, 0))},
    });
}
TEST_CASE_TEMPLATE_APPLY(ts_ops_nested, fj::test::CpuTargets);

TEST_CASE_TEMPLATE_DEFINE("w = 250 on a tall panel with spikes", T, ts_ops_w250) {
    using fj::window;
    fj::test::PanelSpec spec = fj::test::messy(Flavour::Price);
    spec.max_constant = 400;  // constant stretches longer than the window: ties throughout
    Dataset tall = fj::test::dataset("price, messy, tall", 2000, 24, spec, 31, {"A", "B"});
    Dataset spikes = spike_data(2000, 24, 32);
    for (const Dataset* ds : {&tall, &spikes}) {
        fj::test::check_against_reference(
            {
                {"argmin", fj::argmin(window(A, 250))},
                {"argmax", fj::argmax(window(A, 250, 1))},
                {"ts_rank", fj::ts_rank(window(A, 250, 100))},
                {"product", fj::product(window(A / fj::delay(A, 1), 250))},
                {"decay", fj::decay_linear(window(A, 250))},
                {"decay_mp", fj::decay_linear(window(B, 250, 10))},
            },
            *ds, T::dtype, T::options());
    }
}
TEST_CASE_TEMPLATE_APPLY(ts_ops_w250, fj::test::CpuTargets);

}  // TEST_SUITE("ops")
