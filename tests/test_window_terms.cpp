// The split of window sums into entering and leaving terms (codegen/window_terms.hpp): proved on the
// kernels lowering makes for the moments of windows, refused where the leaving half is not the entering
// half w rows back; and the quiet rows built on it (codegen/quiet_rows.hpp). No GPU or NVRTC needed.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "codegen/cuda/emit.hpp"
#include "codegen/ir_builder.hpp"
#include "codegen/plan.hpp"
#include "codegen/quiet_rows.hpp"
#include "codegen/window_terms.hpp"
#include "dsl/expr.hpp"

namespace {

// The split of the one kernel of `e`, as a float32 window scan specialised on a leading dimension.
fj::codegen::WindowSplit split_of(const fj::Expr& e) {
    const fj::codegen::Plan plan = fj::codegen::make_plan({{"o", e}}, fj::DType::F32);
    REQUIRE(plan.steps.size() == 1);
    const fj::ir::Kernel& k = plan.steps[0].kernel;
    fj::codegen::CudaEmitOptions o;
    o.dtype = fj::DType::F32;
    o.strides.assign(k.inputs.size() + k.outputs.size(), 50000);
    o.window_scan = true;
    return fj::codegen::cuda_window_sum_split(k, o);
}

}  // namespace

TEST_SUITE("codegen") {

TEST_CASE("the window sums of corr, cov, mean and std leave as they entered, w rows later") {
    const fj::Expr A = fj::input("A"), B = fj::input("B");
    for (int w : {20, 128, 250}) {
        CAPTURE(w);
        const fj::codegen::WindowSplit corr = split_of(fj::corr(fj::window(A, w), fj::window(B, w)));
        REQUIRE_MESSAGE(corr.ok, corr.why_not);
        CHECK(corr.window == w);
        // Sums of shifted x, y, xy, xx, yy: one entering term each (a value or a product), added.
        REQUIRE(corr.entering.size() == 5);
        int products = 0;
        for (const auto& terms : corr.entering) {
            REQUIRE(terms.size() == 1);
            CHECK(terms[0].sign == 1);
            products += terms[0].b >= 0;
        }
        CHECK(products == 3);
        const fj::codegen::WindowSplit cov = split_of(fj::cov(fj::window(A, w), fj::window(B, w)));
        REQUIRE_MESSAGE(cov.ok, cov.why_not);
        CHECK(cov.window == w);
        CHECK(cov.entering.size() == 3);
        const fj::codegen::WindowSplit sd = split_of(fj::std(fj::window(A, w)));
        REQUIRE_MESSAGE(sd.ok, sd.why_not);
        CHECK(sd.window == w);
        const fj::codegen::WindowSplit mean = split_of(fj::mean(fj::window(A, w)));
        REQUIRE_MESSAGE(mean.ok, mean.why_not);
        CHECK(mean.window == w);
    }
}

TEST_CASE("window sums over different windows in one kernel do not split by one window") {
    const fj::Expr A = fj::input("A"), B = fj::input("B");
    const fj::codegen::WindowSplit s = split_of(fj::corr(fj::window(A, 250), fj::window(B, 250)) + fj::mean(fj::window(A, 20)));
    CHECK_FALSE(s.ok);
    CHECK(s.why_not.find("windows of") != std::string::npos);
}

TEST_CASE("hand-built sums: what splits and what does not") {
    using fj::ir::Prim;
    // s := s + x(t) - x(t - 5) masked before the pass, as lowering writes it.
    auto kernel = [](auto&& terms) {
        fj::ir::Kernel k;
        fj::codegen::IrBuilder b(k);
        const int s = b.new_state(0, "sum");
        const auto root = terms(b, b.load(s));
        b.store(s, root);
        b.output(0, root);
        return std::pair{k, fj::codegen::WindowSum{s, root}};
    };
    auto split = [](const std::pair<fj::ir::Kernel, fj::codegen::WindowSum>& ks) {
        return fj::codegen::split_window_sums(ks.first, {ks.second}, {});
    };
    auto masked = [](fj::codegen::IrBuilder& b, int slot, int lag) {
        const auto x = b.input(slot, lag);
        const auto ok = lag > 0 ? b.land(b.row_in_pass(lag), b.notnan(x)) : b.notnan(x);
        return b.select(ok, x, b.constant(0));
    };
    const auto ok = split(kernel([&](fj::codegen::IrBuilder& b, fj::codegen::V load) {
        return b.add(load, b.sub(masked(b, 0, 0), masked(b, 0, 5)));
    }));
    REQUIRE_MESSAGE(ok.ok, ok.why_not);
    CHECK(ok.window == 5);
    REQUIRE(ok.entering.size() == 1);
    CHECK(ok.entering[0].size() == 1);

    // Products through Fma, the leaving one negated by Neg on either factor, the factors swapped.
    const auto products = split(kernel([&](fj::codegen::IrBuilder& b, fj::codegen::V load) {
        const auto x = masked(b, 0, 0), y = masked(b, 1, 0), xl = masked(b, 0, 7), yl = masked(b, 1, 7);
        const auto in = b.f(Prim::Fma, x, y, load);
        return b.f(Prim::Fma, yl, b.f(Prim::Neg, xl), in);
    }));
    REQUIRE_MESSAGE(products.ok, products.why_not);
    CHECK(products.window == 7);
    REQUIRE(products.entering[0].size() == 1);
    CHECK(products.entering[0][0].b >= 0);

    // The leaving row is another input's: no entering term leaves.
    const auto other = split(kernel([&](fj::codegen::IrBuilder& b, fj::codegen::V load) {
        return b.add(load, b.sub(masked(b, 0, 0), masked(b, 1, 5)));
    }));
    CHECK_FALSE(other.ok);
    CHECK(other.why_not.find("no entering term") != std::string::npos);

    // Added twice, taken away once.
    const auto twice = split(kernel([&](fj::codegen::IrBuilder& b, fj::codegen::V load) {
        const auto x = masked(b, 0, 0);
        return b.add(load, b.sub(b.add(x, x), masked(b, 0, 5)));
    }));
    CHECK_FALSE(twice.ok);
    CHECK(twice.why_not.find("never leaves") != std::string::npos);

    // A running total (nothing leaves), and a term that reads the row index.
    const auto running = split(kernel([&](fj::codegen::IrBuilder& b, fj::codegen::V load) { return b.add(load, masked(b, 0, 0)); }));
    CHECK_FALSE(running.ok);
    CHECK(running.why_not.find("no leaving rows") != std::string::npos);
    const auto indexed = split(kernel([&](fj::codegen::IrBuilder& b, fj::codegen::V load) {
        return b.add(load, b.sub(b.mul(masked(b, 0, 0), b.row()), masked(b, 0, 5)));
    }));
    CHECK_FALSE(indexed.ok);
    CHECK(indexed.why_not.find("row index") != std::string::npos);

    // A leaving row that is not masked by RowInPass(t - w) is not the entering term w rows back... unless
    // the entering side's mask is shifted alike: a mask at another lag does not match.
    const auto wrong_mask = split(kernel([&](fj::codegen::IrBuilder& b, fj::codegen::V load) {
        const auto xl = b.input(0, 5);
        const auto leaving = b.select(b.land(b.row_in_pass(4), b.notnan(xl)), xl, b.constant(0));
        return b.add(load, b.sub(masked(b, 0, 0), leaving));
    }));
    CHECK_FALSE(wrong_mask.ok);
}

}  // TEST_SUITE

// Quiet rows (codegen/quiet_rows.hpp): the run counters' states in which corr's results are numbers, read
// from its IR, and what they imply; a counter wanted both ways has none.
namespace {

// The kernel's run counters (a state stored as `c ? 0 : s + 1`) and their tests against constants.
void counters_of(const fj::ir::Kernel& k, std::vector<fj::codegen::RunCounter>* counters,
                 std::vector<fj::codegen::CountTest>* tests) {
    using fj::ir::Prim;
    for (const fj::ir::Inst& st : k.body) {
        if (st.op != Prim::StoreState) continue;
        const fj::ir::Inst& sel = k.body[static_cast<std::size_t>(st.a)];
        if (sel.op != Prim::Select || k.body[static_cast<std::size_t>(sel.b)].op != Prim::Const ||
            k.body[static_cast<std::size_t>(sel.b)].imm != 0 || k.body[static_cast<std::size_t>(sel.c)].op != Prim::Add)
            continue;
        counters->push_back({st.slot, st.a, sel.a});
        for (std::size_t i = 0; i < k.body.size(); ++i) {
            fj::codegen::CountTest t;
            if (fj::codegen::as_count_test(k, static_cast<std::int32_t>(i), st.a, st.slot, &t)) tests->push_back(t);
        }
    }
}

}  // namespace

TEST_CASE("quiet rows: corr's full window, never reset, and its constant-window counters, reset on every row") {
    using fj::codegen::QuietState;
    const fj::Expr A = fj::input("A"), B = fj::input("B");
    const fj::codegen::Plan plan = fj::codegen::make_plan({{"o", fj::corr(fj::window(A, 250), fj::window(B, 250))}}, fj::DType::F32);
    // As the window scans see it: without its refolds (whose guard adds a test of the finite run).
    const fj::ir::Kernel k = fj::ir::without_refolds(plan.steps[0].kernel);
    std::vector<fj::codegen::RunCounter> counters;
    std::vector<fj::codegen::CountTest> tests;
    counters_of(k, &counters, &tests);
    REQUIRE(counters.size() == 3);
    REQUIRE(tests.size() == 3);
    const fj::codegen::QuietRows q = fj::codegen::plan_quiet_rows(k, counters, tests, 250, {});
    REQUIRE(q.ok);
    REQUIRE(q.counters.size() == 3);
    int never = 0, every = 0;
    for (const auto& c : q.counters) {
        const std::string what = k.states[static_cast<std::size_t>(c.state)].what;
        CAPTURE(what);
        if (c.how == QuietState::NoReset) {
            ++never;
            CHECK(what.find("non-finite") != std::string::npos);
            CHECK(c.clear_rows == 250);
            CHECK_FALSE(q.known.at(c.cond));  // no non-finite row
        } else {
            ++every;
            CHECK(what.find("change") != std::string::npos);
            CHECK(q.known.at(c.cond));  // a change on every row
        }
    }
    CHECK(never == 1);
    CHECK(every == 2);
    // The tests: the window is full, no input is constant over it.
    for (const auto& t : tests) {
        const bool full = k.states[static_cast<std::size_t>(t.state)].what.find("non-finite") != std::string::npos;
        CHECK(q.known.at(t.compare) == full);
    }
    // The leaving row's finiteness (masked by RowInPass(t - 250)) is known through the split's proof.
    int leaving = 0;
    for (std::size_t i = 0; i < k.body.size(); ++i) {
        const fj::ir::Inst& x = k.body[i];
        if (x.op != fj::ir::Prim::And) continue;
        for (std::int32_t o : {x.a, x.b})
            if (k.body[static_cast<std::size_t>(o)].op == fj::ir::Prim::RowInPass && k.body[static_cast<std::size_t>(o)].lag == 250 &&
                q.known.count(static_cast<std::int32_t>(i))) {
                ++leaving;
                CHECK(q.known.at(static_cast<std::int32_t>(i)));
            }
    }
    CHECK(leaving >= 1);
    // Without the window, nothing is known of rows 250 back.
    const fj::codegen::QuietRows near = fj::codegen::plan_quiet_rows(k, counters, tests, 0, {});
    REQUIRE(near.ok);
    CHECK(near.known.size() < q.known.size());
}

TEST_CASE("quiet rows: a counter whose test one output wants true and another false has no quiet state") {
    fj::ir::Kernel k;
    fj::codegen::IrBuilder b(k);
    const int s = b.new_state(0, "rows since a NaN");
    const auto x = b.input(0, 0);
    const auto count = b.select(b.isnan(x), b.constant(0), b.add(b.load(s), b.constant(1)));
    b.store(s, count);
    const auto ge = b.b(fj::ir::Prim::CmpGE, count, b.constant(5));
    b.output(0, b.select(ge, x, b.nan()));
    std::vector<fj::codegen::RunCounter> counters;
    std::vector<fj::codegen::CountTest> tests;
    counters_of(k, &counters, &tests);
    REQUIRE(counters.size() == 1);
    REQUIRE(tests.size() == 1);
    CHECK(tests[0].at_least == 5);
    CHECK_FALSE(tests[0].negate);
    const fj::codegen::QuietRows one = fj::codegen::plan_quiet_rows(k, counters, tests, 0, {});
    REQUIRE(one.ok);
    CHECK(one.counters[0].how == fj::codegen::QuietState::NoReset);
    CHECK(one.counters[0].clear_rows == 4);
    b.output(1, b.select(ge, b.nan(), x));  // wants it false
    CHECK_FALSE(fj::codegen::plan_quiet_rows(k, counters, tests, 0, {}).ok);
}
