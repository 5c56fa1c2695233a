// The chunk planner (runtime/chunk_plan.hpp) and chunked runs on the CPU backend: chunks over time that
// cut through windows, NaN bursts and constant stretches, and chunks over columns, against the float64
// reference and the unchunked run; budgets, progress, run_async's synchronous CPU form, and failures
// injected part-way (runtime/fault_inject.hpp) that must leave inputs untouched and the next run working.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend_cases.hpp"
#include "codegen/plan.hpp"
#include "reference.hpp"
#include "runtime/backend.hpp"
#include "runtime/chunk_plan.hpp"
#include "runtime/chunk_run.hpp"
#include "runtime/fault_inject.hpp"
#include "test_data.hpp"

namespace {

using fj::Expr;
using fj::rt::ChunkAxis;
using fj::rt::ChunkPlan;
using fj::rt::ChunkRequest;
using fj::test::CheckOptions;
using fj::test::Dataset;
using fj::test::Flavour;
using fj::test::NamedExprs;

const Expr A = fj::input("A"), B = fj::input("B"), G = fj::input("G");
// A chain of three windows: halo 9 + 4 + 2 = 15 rows.
const Expr inner = fj::std(fj::window(A, 10));
const Expr mid = fj::mean(fj::window(inner, 5));
const Expr top = fj::max(fj::window(mid, 3));

// Every chunk of a plan: they tile the rows (over time) or columns (over columns) exactly, in order, and
// each reads its halo (clamped at row 0).
void check_tiling(const ChunkPlan& c) {
    std::int64_t next = 0;
    for (std::int64_t i = 0; i < c.count; ++i) {
        const fj::rt::Chunk k = c.chunk(i);
        CHECK(k.index == i);
        if (c.axis == ChunkAxis::Time) {
            CHECK(k.row_begin == next);
            CHECK(k.row_end > k.row_begin);
            CHECK(k.read_begin == std::max<std::int64_t>(0, k.row_begin - c.halo));
            CHECK(k.col_begin == 0);
            CHECK(k.col_end == c.cols);
            CHECK(k.rows() <= c.chunk_rows);
            next = k.row_end;
        } else {
            CHECK(k.col_begin == next);
            CHECK(k.col_end > k.col_begin);
            CHECK(k.read_begin == 0);
            CHECK(k.row_begin == 0);
            CHECK(k.row_end == c.rows);
            CHECK(k.cols() <= c.chunk_cols);
            next = k.col_end;
        }
    }
    CHECK(next == (c.axis == ChunkAxis::Time ? c.rows : c.cols));
}

ChunkRequest request(std::int64_t rows, std::int64_t cols, std::int64_t budget, int in_flight = 1) {
    ChunkRequest r;
    r.rows = rows;
    r.cols = cols;
    r.budget_bytes = budget;
    r.in_flight = in_flight;
    return r;
}

// A and B messy (isolated NaNs, suspensions, constant stretches, all-NaN columns) plus NaN bursts across
// whole rows and ties, and G a panel of group ids, as the cross-section suite builds them.
Dataset chunk_data(const std::string& label, std::int64_t rows, std::int64_t cols, Flavour flavour, std::uint64_t seed) {
    Dataset ds = fj::test::dataset(label, rows, cols, fj::test::messy(flavour), seed, {"A", "B"});
    fj::test::Rng rng(seed + 5);
    std::vector<double> g(static_cast<std::size_t>(rows * cols));
    for (std::int64_t t = 0; t < rows; ++t)
        for (std::int64_t j = 0; j < cols; ++j) {
            double& a = ds.inputs.at("A")[static_cast<std::size_t>(t * cols + j)];
            if (j % 5 == 4) a = ds.inputs.at("A")[static_cast<std::size_t>(t * cols + j - 1)];  // ties
            if (t % 29 >= 11 && t % 29 <= 14) a = std::numeric_limits<double>::quiet_NaN();    // bursts
            g[static_cast<std::size_t>(t * cols + j)] = std::floor(rng.uniform() * 3);
        }
    ds.inputs["G"] = g;
    return ds;
}

// Windows, pairs, delays and a chain, all fused into one step (no intermediates).
NamedExprs window_program() {
    return {{"corr", fj::corr(fj::window(A, 20), fj::window(B, 20))},
            {"cov", fj::cov(fj::window(A, 7), fj::window(B, 7))},
            {"top", top},
            {"delta", fj::delta(A, 4) / fj::std(fj::window(B, 12, 3))},
            {"ts_rank", fj::ts_rank(fj::window(B, 6))}};
}

// Row steps between windows (chunks over time only).
NamedExprs row_program() {
    return {{"mean_of_rank", fj::mean(fj::window(fj::rank(A), 5))},
            {"zscore_delta", fj::delta(fj::zscore(B), 3)},
            {"neutral", fj::group_neutralize(A, G) * 2.0 + fj::std(fj::window(fj::demean(B), 10))}};
}

fj::CompileOptions materialized(fj::CompileOptions o) {
    o.materialize = {inner, mid};
    return o;
}

fj::CompileOptions cpu_options() {
    fj::CompileOptions o;
    o.backend = fj::Backend::Cpu;
    return o;
}

bool cpu_available() {
    if (!fj::rt::cpu_backend()) {
        MESSAGE("skipped: this build has no CPU backend");
        return false;
    }
    return true;
}

CheckOptions with_run_options(const fj::RunOptions& ro, CheckOptions check = {}) {
    check.runner = [ro](const fj::Program& p, const std::map<std::string, fj::Panel>& in,
                        const std::map<std::string, fj::Panel>& out) { p.run(in, out, ro); };
    return check;
}

// Two result sets within the contract's distance of each other (each is also held to the reference).
void check_close(const std::map<std::string, std::vector<double>>& a, const std::map<std::string, std::vector<double>>& b,
                 fj::DType dtype) {
    const double tol = dtype == fj::DType::F32 ? 2e-5 : 2e-9;
    for (const auto& [name, v] : a) {
        const std::vector<double>& w = b.at(name);
        REQUIRE(v.size() == w.size());
        for (std::size_t i = 0; i < v.size(); ++i) {
            if (v[i] == w[i]) continue;  // (infinities too)
            if (std::isnan(v[i]) || std::isnan(w[i])) {
                REQUIRE_MESSAGE(std::isnan(v[i]) == std::isnan(w[i]), name << " cell " << i);
                continue;
            }
            REQUIRE_MESSAGE(std::abs(v[i] - w[i]) <= tol * std::max(1.0, std::abs(w[i])),
                            name << " cell " << i << ": " << v[i] << " vs " << w[i]);
        }
    }
}

// Bit for bit (NaN payloads included): inputs must come back exactly as they were.
bool same_bytes(const std::vector<double>& x, const std::vector<double>& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(double)) == 0;
}

}  // namespace

TEST_SUITE("chunks") {

TEST_CASE("the whole panel is one chunk when it fits; a budget cuts it over time, halo carried") {
    const fj::codegen::Plan plan = fj::codegen::make_plan({{"top", top}, {"c", fj::corr(fj::window(A, 20), fj::window(B, 20))}});
    REQUIRE(plan.halo == 19);
    const std::int64_t rows = 10000, cols = 300;
    // Two inputs, two outputs, no intermediates: 4 panels.
    const ChunkPlan whole = fj::rt::plan_chunks(plan, request(rows, cols, 0));
    CHECK(whole.whole());
    CHECK(whole.count == 1);
    CHECK(whole.panels == 4);
    CHECK(whole.chunk_bytes == 4 * rows * cols * 4);
    check_tiling(whole);
    CHECK(whole.chunk(0).halo_rows() == 0);
    // Exactly the whole panel's bytes still fits in one chunk.
    CHECK(fj::rt::plan_chunks(plan, request(rows, cols, whole.chunk_bytes)).whole());

    for (int in_flight : {1, 2, 3})
        for (std::int64_t budget : {whole.chunk_bytes - 1, whole.chunk_bytes / 3, std::int64_t{400000}}) {
            CAPTURE(in_flight);
            CAPTURE(budget);
            const ChunkPlan c = fj::rt::plan_chunks(plan, request(rows, cols, budget, in_flight));
            CHECK(c.axis == ChunkAxis::Time);
            CHECK(c.count > 1);
            CHECK(c.halo == 19);
            CHECK(c.total_bytes <= budget);
            CHECK(c.chunk_bytes == 4 * (c.chunk_rows + 19) * cols * 4);
            // The fewest chunks that fit: one chunk fewer would need more than the budget for in_flight of them.
            const std::int64_t fewer_rows = (rows + c.count - 2) / (c.count - 1);
            CHECK(4 * (fewer_rows + 19) * cols * 4 * in_flight > budget);
            check_tiling(c);
            CHECK(c.chunk(1).halo_rows() == std::min<std::int64_t>(19, c.chunk(1).row_begin));
            CHECK(c.describe().find("over time") != std::string::npos);
        }
    // The caller's panels in place (the CPU): nothing counts, so any budget fits.
    ChunkRequest in_place = request(rows, cols, 1000);
    in_place.count_inputs = in_place.count_outputs = false;
    const ChunkPlan free_run = fj::rt::plan_chunks(plan, in_place);
    CHECK(free_run.whole());
    CHECK(free_run.panels == 0);
    // An empty panel: no chunks.
    CHECK(fj::rt::plan_chunks(plan, request(0, cols, 0)).count == 0);
    CHECK(fj::rt::plan_chunks(plan, request(rows, 0, 0)).count == 0);
}

TEST_CASE("intermediates count at their peak; a budget too small for one row and its halo is refused with numbers") {
    fj::codegen::PlanOptions po;
    po.materialize = {inner, mid};
    const fj::codegen::Plan plan = fj::codegen::make_plan({{"top", top}, {"g", fj::rank(A)}}, fj::DType::F64, po);
    REQUIRE(plan.peak_intermediates() >= 1);
    REQUIRE(plan.halo == 15);
    REQUIRE(plan.has_row_steps());
    ChunkRequest r = request(5000, 100, 0);
    r.dtype = fj::DType::F64;
    r.count_inputs = r.count_outputs = false;
    const ChunkPlan whole = fj::rt::plan_chunks(plan, r);
    CHECK(whole.panels == plan.peak_intermediates());
    CHECK(whole.chunk_bytes == plan.peak_intermediates() * 5000 * 100 * 8);
    r.budget_bytes = whole.chunk_bytes / 10;
    const ChunkPlan c = fj::rt::plan_chunks(plan, r);
    CHECK(c.count >= 10);
    CHECK(c.total_bytes <= r.budget_bytes);
    check_tiling(c);
    // One output row plus 15 halo rows of the intermediates: anything less is refused, naming the budget.
    r.budget_bytes = plan.peak_intermediates() * 16 * 100 * 8 - 1;
    try {
        (void)fj::rt::plan_chunks(plan, r);
        FAIL("a budget below one chunk was accepted");
    } catch (const fj::RunError& e) {
        const std::string m = e.what();
        CHECK(m.find("too small") != std::string::npos);
        CHECK(m.find("15 halo") != std::string::npos);
        CHECK(m.find("row steps") != std::string::npos);
    }
    r.budget_bytes += 1;
    CHECK(fj::rt::plan_chunks(plan, r).chunk_rows == 1);
    // Chunks over columns cannot split a row step.
    r.budget_bytes = 0;
    r.chunk_cols = 10;
    CHECK_THROWS_AS(fj::rt::plan_chunks(plan, r), fj::InputError);
    // A fixed cost larger than the budget is refused too.
    r.chunk_cols = 0;
    r.budget_bytes = 100;
    r.fixed_bytes = 200;
    CHECK_THROWS_AS(fj::rt::plan_chunks(plan, r), fj::RunError);
}

TEST_CASE("a long halo under a tight budget goes over columns when the plan has no row steps") {
    const fj::codegen::Plan plan = fj::codegen::make_plan({{"s", fj::std(fj::window(fj::mean(fj::window(A, 250)), 250))}});
    REQUIRE(plan.halo == 498);
    const std::int64_t rows = 4000, cols = 1000;
    // Room for 2 panels x 600 rows: time chunks would be mostly halo.
    const ChunkPlan c = fj::rt::plan_chunks(plan, request(rows, cols, 2 * 600 * cols * 4));
    CHECK(c.axis == ChunkAxis::Columns);
    CHECK(c.halo == 498);
    CHECK(c.chunk_cols % 32 == 0);
    CHECK(c.total_bytes <= 2 * 600 * cols * 4);
    CHECK(c.chunk_bytes == 2 * rows * c.chunk_cols * 4);
    check_tiling(c);
    CHECK(c.chunk(0).halo_rows() == 0);
    CHECK(c.describe().find("over columns") != std::string::npos);
    // Forced sizes are taken as given.
    ChunkRequest forced = request(rows, cols, 0);
    forced.chunk_cols = 100;
    const ChunkPlan f = fj::rt::plan_chunks(plan, forced);
    CHECK(f.axis == ChunkAxis::Columns);
    CHECK(f.count == 10);
    check_tiling(f);
    forced.chunk_cols = 0;
    forced.chunk_rows = 333;
    const ChunkPlan t = fj::rt::plan_chunks(plan, forced);
    CHECK(t.axis == ChunkAxis::Time);
    CHECK(t.count == 13);
    CHECK(t.chunk(12).rows() == 4000 - 12 * 333);
    check_tiling(t);
}

TEST_CASE("min_chunks asks for overlap where the rows allow; known rates choose the count by the pipeline model") {
    const fj::codegen::Plan plan = fj::codegen::make_plan({{"c", fj::corr(fj::window(A, 20), fj::window(B, 20))}});
    ChunkRequest r = request(50000, 1000, 0, 3);
    r.min_chunks = 8;
    const ChunkPlan eight = fj::rt::plan_chunks(plan, r);
    CHECK(eight.count == 8);
    check_tiling(eight);
    // Whole quanta (the CPU's time tiles) where the rows allow: 8 chunks of 6250 rows become 6144-row ones.
    r.row_quantum = 2048;
    const ChunkPlan tiles = fj::rt::plan_chunks(plan, r);
    CHECK(tiles.chunk_rows == 6144);
    CHECK(tiles.count == 9);
    check_tiling(tiles);
    r.row_quantum = 0;
    // Each chunk keeps at least min_rows (default: 8 x halo, at least 256).
    r.rows = 1000;
    CHECK(fj::rt::plan_chunks(plan, r).count == 1000 / 256);
    r.rows = 100;
    CHECK(fj::rt::plan_chunks(plan, r).whole());

    // Copy in, compute, copy out at equal rates, 1 ms per chunk and stage: overlap pays until the overhead
    // does not. The model's optimum is interior, and beats both one chunk and the most chunks.
    r.rows = 50000;
    r.min_chunks = 1;
    r.rates = {10e9, 10e9, 10e9, 1e-3};
    const ChunkPlan best = fj::rt::plan_chunks(plan, r);
    CHECK(best.count > 1);
    const double t_best = fj::rt::pipeline_seconds(best, plan, r);
    ChunkPlan one = fj::rt::plan_chunks(plan, request(50000, 1000, 0, 3));
    CHECK(t_best < fj::rt::pipeline_seconds(one, plan, r));
    ChunkRequest many = r;
    many.chunk_rows = 256;
    CHECK(t_best < fj::rt::pipeline_seconds(fj::rt::plan_chunks(plan, many), plan, r));
    // Without overlap (one chunk in flight), more chunks only add overhead and halo: one chunk.
    r.in_flight = 1;
    CHECK(fj::rt::plan_chunks(plan, r).whole());
}

TEST_CASE("measured rates replace assumed ones once a stage has seen enough work, and move the chunk count") {
    const fj::codegen::Plan plan = fj::codegen::make_plan({{"c", fj::corr(fj::window(A, 20), fj::window(B, 20))}});
    fj::rt::RateMeter meter;
    const fj::rt::ChunkRates assumed{2e9, 1.5e9, 1e9, 1e-3};
    fj::rt::ChunkRates r = meter.rates(assumed);
    CHECK(r.in_bytes_per_s == 2e9);
    CHECK(r.compute_bytes_per_s == 1.5e9);
    meter.add(fj::rt::RateMeter::In, 100'000'000, 0.5);
    meter.add(fj::rt::RateMeter::In, 100'000'000, 0.5);
    meter.add(fj::rt::RateMeter::Out, 1000, 1e-6);  // too little to trust
    r = meter.rates(assumed);
    CHECK(r.in_bytes_per_s == doctest::Approx(2e8));
    CHECK(r.compute_bytes_per_s == 1.5e9);
    CHECK(r.out_bytes_per_s == 1e9);
    CHECK(r.chunk_overhead_s == 1e-3);
    // The plan from measured rates is the model's best count under them (every count up to 64 tried), and
    // the model expects it to take longer than with the assumed rates (reading is 10x slower).
    ChunkRequest q = request(50000, 1000, 0, 3);
    q.rates = r;
    const ChunkPlan measured = fj::rt::plan_chunks(plan, q);
    const double best = fj::rt::pipeline_seconds(measured, plan, q);
    for (std::int64_t n = 1; n <= 64; ++n) {
        ChunkRequest forced = q;
        forced.chunk_rows = (50000 + n - 1) / n;
        CHECK(best <= fj::rt::pipeline_seconds(fj::rt::plan_chunks(plan, forced), plan, q) * (1 + 1e-12));
    }
    ChunkRequest a = q;
    a.rates = assumed;
    CHECK(best > fj::rt::pipeline_seconds(fj::rt::plan_chunks(plan, a), plan, a));
}

TEST_CASE("RunOptions are checked before anything runs") {
    if (!cpu_available()) return;
    std::vector<float> a(40, 1.0f), out(40);
    const fj::Program p = fj::compile({{"m", fj::mean(fj::window(A, 3))}}, cpu_options());
    fj::RunOptions bad;
    bad.max_host_bytes = -1;
    CHECK_THROWS_AS(p.run({{"A", fj::Panel::host(a.data(), 10, 4)}}, {{"m", fj::Panel::host(out.data(), 10, 4)}}, bad),
                    fj::InputError);
    bad = {};
    bad.chunk_rows = 3;
    bad.chunk_cols = 2;
    CHECK_THROWS_AS(p.run({{"A", fj::Panel::host(a.data(), 10, 4)}}, {{"m", fj::Panel::host(out.data(), 10, 4)}}, bad),
                    fj::InputError);
}

TEST_CASE_TEMPLATE_DEFINE("chunks over time that cut windows, bursts and row steps match the reference and the unchunked run", T,
                          chunks_time) {
    if (!cpu_available()) return;
    const Dataset ds = chunk_data("price, messy, bursts", 230, 29, Flavour::Price, 7);
    CheckOptions padded;
    padded.ld_in = 33;
    padded.ld_out = 31;
    struct Case {
        const char* name;
        NamedExprs program;
        fj::CompileOptions options;
    };
    const std::vector<Case> cases = {{"windows", window_program(), T::options()},
                                     {"materialized chain", {{"top", top}, {"mid", mid}, {"c", fj::corr(fj::window(A, 9), fj::window(mid, 9))}},
                                      materialized(T::options())},
                                     {"row steps", row_program(), T::options()}};
    for (const Case& c : cases) {
        CAPTURE(c.name);
        const auto plain = fj::test::compile_and_run(c.program, ds.inputs, ds.rows, ds.cols, T::dtype, c.options);
        REQUIRE(plain);
        // 1 row (every chunk but the first all halo), sizes that cut windows and bursts, one short of the panel.
        for (std::int64_t rows : {1, 7, 13, 64, 229}) {
            CAPTURE(rows);
            fj::RunOptions ro;
            ro.chunk_rows = rows;
            fj::test::check_against_reference(c.program, ds, T::dtype, c.options, with_run_options(ro, padded));
            const auto got = fj::test::compile_and_run(c.program, ds.inputs, ds.rows, ds.cols, T::dtype, c.options,
                                                       with_run_options(ro));
            REQUIRE(got);
            check_close(*got, *plain, T::dtype);
        }
    }
}
TEST_CASE_TEMPLATE_APPLY(chunks_time, fj::test::CpuTargets);

TEST_CASE_TEMPLATE_DEFINE("chunks over columns match the reference; a budget on intermediates chunks by itself", T, chunks_cols) {
    if (!cpu_available()) return;
    const Dataset ds = chunk_data("1e4 + N(0,1), messy", 150, 45, Flavour::Offset1e4, 9);
    CheckOptions padded;
    padded.ld_in = 47;
    padded.ld_out = 50;
    const NamedExprs chain = {{"top", top}, {"mid", mid}, {"c", fj::corr(fj::window(A, 9), fj::window(mid, 9))}};
    for (std::int64_t cols : {1, 5, 16, 44}) {
        CAPTURE(cols);
        fj::RunOptions ro;
        ro.chunk_cols = cols;
        fj::test::check_against_reference(window_program(), ds, T::dtype, T::options(), with_run_options(ro, padded));
        fj::test::check_against_reference(chain, ds, T::dtype, materialized(T::options()), with_run_options(ro));
    }
    // A budget for the intermediates of 12 output rows and the halo: 13 chunks, seen through progress.
    fj::codegen::PlanOptions po;
    po.materialize = {inner, mid};
    const fj::codegen::Plan plan = fj::codegen::make_plan(chain, T::dtype, po);
    REQUIRE(plan.halo == 21);  // corr over 9 rows of mid: 8 + 4 + 9
    const std::int64_t elem = T::dtype == fj::DType::F32 ? 4 : 8;
    fj::RunOptions ro;
    ro.max_host_bytes = plan.peak_intermediates() * (12 + 21) * ds.cols * elem;
    std::int64_t chunks = 0;
    ro.progress = [&](const fj::RunProgress& pr) { chunks = pr.chunks_total; };
    fj::test::check_against_reference(chain, ds, T::dtype, materialized(T::options()), with_run_options(ro));
    CHECK(chunks == 13);
}
TEST_CASE_TEMPLATE_APPLY(chunks_cols, fj::test::CpuTargets);

TEST_CASE("progress: once per chunk, counts that only grow, the totals at the end; its exception stops the run") {
    if (!cpu_available()) return;
    const std::int64_t rows = 20000, cols = 8;
    const Dataset ds = chunk_data("price", rows, cols, Flavour::Price, 3);
    std::vector<double> a = ds.inputs.at("A"), b = ds.inputs.at("B"), out(static_cast<std::size_t>(rows * cols));
    fj::CompileOptions one_thread = cpu_options();
    one_thread.threads = 1;  // chunks of whole 2048-row tiles, at least one per thread: 10 here
    const fj::Program p = fj::compile({{"c", fj::corr(fj::window(A, 20), fj::window(B, 20))}}, one_thread);
    const std::map<std::string, fj::Panel> in = {{"A", fj::Panel::host(a.data(), rows, cols)},
                                                 {"B", fj::Panel::host(b.data(), rows, cols)}};
    const std::map<std::string, fj::Panel> outp = {{"c", fj::Panel::host(out.data(), rows, cols)}};
    std::vector<fj::RunProgress> seen;
    fj::RunOptions ro;
    ro.progress = [&](const fj::RunProgress& pr) { seen.push_back(pr); };
    p.run(in, outp, ro);
    // A callback asks for 16 chunks where the rows allow: 20000 rows hold 9 of 2048 rows or more, which
    // become 10 of whole tiles (9 x 2048 + 1568).
    REQUIRE(seen.size() == 10);
    for (std::size_t i = 0; i < seen.size(); ++i) {
        CHECK(seen[i].chunks_done == static_cast<std::int64_t>(i) + 1);
        CHECK(seen[i].chunks_total == 10);
        CHECK(seen[i].rows_total == rows);
        if (i) {
            CHECK(seen[i].rows_done > seen[i - 1].rows_done);
            CHECK(seen[i].bytes_in > seen[i - 1].bytes_in);
            CHECK(seen[i].elapsed_s >= seen[i - 1].elapsed_s);
        }
    }
    CHECK(seen.back().rows_done == rows);
    CHECK(seen.back().bytes_out == rows * cols * 8);
    CHECK(seen.back().bytes_in >= 2 * rows * cols * 8);
    const std::vector<double> first = out;
    // The callback's exception comes out of run(); the next run works and gives the same results.
    ro.progress = [](const fj::RunProgress& pr) {
        if (pr.chunks_done == 3) throw std::runtime_error("stop at three");
    };
    CHECK_THROWS_WITH_AS(p.run(in, outp, ro), "stop at three", std::runtime_error);
    std::fill(out.begin(), out.end(), 0.0);
    ro.progress = {};
    ro.chunk_rows = 2048;  // the chunks the progress run had: the same bits
    p.run(in, outp, ro);
    for (std::size_t i = 0; i < out.size(); ++i) REQUIRE(fj::test::same_value(out[i], first[i]));
}

TEST_CASE("run_async on the CPU runs synchronously: the outputs are complete when it returns") {
    if (!cpu_available()) return;
    const Dataset ds = chunk_data("price", 300, 6, Flavour::Price, 4);
    std::vector<double> a = ds.inputs.at("A"), out(300 * 6, 0.0);
    const Expr e = fj::mean(fj::window(A, 5));
    const fj::Program p = fj::compile({{"m", e}}, cpu_options());
    fj::RunOptions ro;
    int calls = 0;
    ro.progress = [&](const fj::RunProgress&) { ++calls; };
    p.run_async({{"A", fj::Panel::host(a.data(), 300, 6)}}, {{"m", fj::Panel::host(out.data(), 300, 6)}}, nullptr, ro);
    CHECK(calls == 1);  // 300 rows: one chunk (chunks are at least a 2048-row tile)
    const std::vector<double> ref = fj::test::reference(e, {{"A", a}}, 300, 6);
    for (std::size_t i = 0; i < out.size(); ++i)
        REQUIRE((std::isnan(ref[i]) ? std::isnan(out[i]) : std::abs(out[i] - ref[i]) <= 1e-9 * std::max(1.0, std::abs(ref[i]))));
}

TEST_CASE("a failure part-way (allocation, chunk) throws with the chunk, leaves inputs untouched, and the next run works") {
    if (!cpu_available()) return;
    const std::int64_t rows = 400, cols = 19;
    const Dataset ds = chunk_data("price, messy", rows, cols, Flavour::Price, 11);
    std::vector<double> a = ds.inputs.at("A"), b = ds.inputs.at("B");
    const std::vector<double> a0 = a, b0 = b;
    const NamedExprs chain = {{"top", top}, {"c", fj::corr(fj::window(A, 9), fj::window(mid, 9))}};
    fj::CompileOptions o = materialized(cpu_options());
    const fj::Program p = fj::compile(chain, o);
    std::vector<double> top_out(static_cast<std::size_t>(rows * cols)), c_out(top_out.size());
    const std::map<std::string, fj::Panel> in = {{"A", fj::Panel::host(a.data(), rows, cols)},
                                                 {"B", fj::Panel::host(b.data(), rows, cols)}};
    const std::map<std::string, fj::Panel> out = {{"top", fj::Panel::host(top_out.data(), rows, cols)},
                                                  {"c", fj::Panel::host(c_out.data(), rows, cols)}};
    fj::RunOptions ro;
    ro.chunk_rows = 50;  // 8 chunks
    p.run(in, out, ro);
    const std::vector<double> good_top = top_out, good_c = c_out;
    // How many allocations a chunked run makes, to aim at the middle of one.
    fj::rt::testing::fail_at(fj::rt::FaultKind::Alloc, 0);
    p.run(in, out, ro);
    const std::int64_t allocs = fj::rt::testing::fault_points_seen(fj::rt::FaultKind::Alloc);
    REQUIRE(allocs >= 8);
    for (std::int64_t n : {std::int64_t{1}, allocs / 2, allocs}) {
        CAPTURE(n);
        fj::rt::testing::fail_at(fj::rt::FaultKind::Alloc, n);
        try {
            p.run(in, out, ro);
            FAIL("the injected allocation failure was not reported");
        } catch (const fj::RunError& e) {
            const std::string m = e.what();
            CHECK(m.find("out of memory") != std::string::npos);
            CHECK(m.find("chunk ") != std::string::npos);
            CHECK(m.find(" of 8 (rows ") != std::string::npos);
        }
        CHECK(same_bytes(a, a0));
        CHECK(same_bytes(b, b0));
        std::fill(top_out.begin(), top_out.end(), 0.0);
        std::fill(c_out.begin(), c_out.end(), 0.0);
        p.run(in, out, ro);  // disarmed: works, the same results
        for (std::size_t i = 0; i < top_out.size(); ++i) {
            REQUIRE(fj::test::same_value(top_out[i], good_top[i]));
            REQUIRE(fj::test::same_value(c_out[i], good_c[i]));
        }
    }
    // A chunk that fails to start, in a whole-panel run and a chunked one.
    for (std::int64_t chunk_rows : {std::int64_t{0}, std::int64_t{50}}) {
        CAPTURE(chunk_rows);
        ro.chunk_rows = chunk_rows;
        fj::rt::testing::fail_at(fj::rt::FaultKind::Chunk, chunk_rows ? 5 : 1);
        CHECK_THROWS_AS(p.run(in, out, ro), fj::RunError);
        CHECK(same_bytes(a, a0));
        p.run(in, out, ro);
        for (std::size_t i = 0; i < c_out.size(); ++i) {
            const bool close = std::isnan(good_c[i]) ? std::isnan(c_out[i]) : std::abs(c_out[i] - good_c[i]) <= 1e-9;
            REQUIRE_MESSAGE(close, "cell " << i << ": " << c_out[i] << " vs " << good_c[i]);
        }
    }
    fj::rt::testing::fail_at(fj::rt::FaultKind::Chunk, 0);
}

}  // TEST_SUITE("chunks")
