// Plans of steps (codegen/plan.hpp): which outputs fuse into one kernel, intermediates and their
// lifetimes, halos along chains; and multi-step programs run on the backends against the reference.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "backend_cases.hpp"
#include "codegen/plan.hpp"
#include "runtime/backend.hpp"
#include "test_data.hpp"

namespace {

using fj::Expr;
using fj::codegen::Plan;

const Expr A = fj::input("A"), B = fj::input("B"), C = fj::input("C");

std::vector<std::string> outputs_of(const Plan& p, std::size_t step) { return p.steps.at(step).kernel.outputs; }

// inner = std(A, 10) -> mid = mean(inner, 5) -> top = max(mid, 3): a chain of three windows.
const Expr inner = fj::std(fj::window(A, 10));
const Expr mid = fj::mean(fj::window(inner, 5));
const Expr top = fj::max(fj::window(mid, 3));

}  // namespace

TEST_SUITE("plan") {

TEST_CASE("outputs that share work or an input fuse into one step; outputs that share nothing are steps of their own") {
    const Expr corr = fj::corr(fj::window(A, 20), fj::window(B, 20));
    const Plan one = fj::codegen::make_plan({{"c", corr}});
    REQUIRE(one.steps.size() == 1);
    CHECK(one.intermediates.empty());
    CHECK(one.halo == 19);
    CHECK(one.steps[0].chain_halo == 19);
    CHECK(one.steps[0].kernel.name.find("_r") == std::string::npos);  // the one kernel keeps its name

    const Plan shared = fj::codegen::make_plan({{"m", fj::mean(fj::window(A, 5))}, {"s", fj::std(fj::window(A, 30))}});
    REQUIRE(shared.steps.size() == 1);
    CHECK(outputs_of(shared, 0) == std::vector<std::string>{"m", "s"});

    // c reads A and B, z reads C only, w reads B: c and w fuse (B), z is a step of its own.
    const Plan split = fj::codegen::make_plan(
        {{"c", corr}, {"z", fj::std(fj::window(C, 250))}, {"w", fj::delta(B, 3)}});
    REQUIRE(split.steps.size() == 2);
    CHECK(outputs_of(split, 0) == std::vector<std::string>{"c", "w"});
    CHECK(outputs_of(split, 1) == std::vector<std::string>{"z"});
    CHECK(split.steps[0].kernel.inputs == std::vector<std::string>{"A", "B"});
    CHECK(split.steps[1].kernel.inputs == std::vector<std::string>{"C"});
    CHECK(split.steps[1].kernel.halo == 249);
    CHECK(split.halo == 249);
    CHECK(split.inputs == std::vector<std::string>{"A", "B", "C"});
    CHECK(split.steps[0].kernel.name != split.steps[1].kernel.name);
    const std::string text = fj::codegen::explain(split);
    CHECK(text.find("2 step(s)") != std::string::npos);
    CHECK(text.find("step 1: time series, halo 249 rows") != std::string::npos);
}

TEST_CASE("materialised subexpressions: intermediates, lifetimes, halos that add up along the chain") {
    fj::codegen::PlanOptions po;
    po.materialize = {inner, mid};
    const Plan p = fj::codegen::make_plan({{"top", top}, {"other", fj::corr(fj::window(B, 20), fj::window(C, 20))}},
                                          fj::DType::F32, po);
    REQUIRE(p.intermediates.size() == 2);
    REQUIRE(p.steps.size() == 4);  // other (level 0), inner (level 0), mid (1), top (2)
    CHECK(outputs_of(p, 0) == std::vector<std::string>{"other"});
    CHECK(outputs_of(p, 1) == std::vector<std::string>{p.intermediates[0].name});
    CHECK(outputs_of(p, 2) == std::vector<std::string>{p.intermediates[1].name});
    CHECK(outputs_of(p, 3) == std::vector<std::string>{"top"});
    CHECK(p.intermediates[0].name == "_fj_t0");
    CHECK(p.intermediates[0].producer == 1);
    CHECK(p.intermediates[0].last_reader == 2);
    CHECK(p.intermediates[1].producer == 2);
    CHECK(p.intermediates[1].last_reader == 3);
    CHECK(p.steps[2].kernel.inputs == std::vector<std::string>{"_fj_t0"});
    // Each step's own halo, and the chain's sum: 9, 9 + 4, 9 + 4 + 2.
    CHECK(p.steps[1].kernel.halo == 9);
    CHECK(p.steps[2].kernel.halo == 4);
    CHECK(p.steps[3].kernel.halo == 2);
    CHECK(p.steps[1].chain_halo == 9);
    CHECK(p.steps[2].chain_halo == 13);
    CHECK(p.steps[3].chain_halo == 15);
    CHECK(p.halo == 19);  // the correlation's, longer than the chain
    CHECK(p.slot_of("_fj_t1").kind == Plan::Slot::Intermediate);
    CHECK(p.slot_of("top").kind == Plan::Slot::Output);
    CHECK(p.slot_of("C").kind == Plan::Slot::Input);
    CHECK_THROWS_AS(p.slot_of("nothing"), fj::Error);
    const std::string text = fj::codegen::explain(p);
    CHECK(text.find("intermediate _fj_t0 = std(window(A, 10)): written by step 1, read until step 2") != std::string::npos);

    // Without materialising, the same program is two fused steps whose halo is the sum of the windows'.
    const Plan fused = fj::codegen::make_plan({{"top", top}});
    REQUIRE(fused.steps.size() == 1);
    CHECK(fused.halo == 15);
}

TEST_CASE("a materialised node that is an output is read from the output; names avoid the program's inputs") {
    fj::codegen::PlanOptions po;
    po.materialize = {inner, A, fj::constant(2.0)};  // (leaves are ignored)
    const Expr t0 = fj::input("_fj_t0");
    const Plan p = fj::codegen::make_plan({{"x", inner}, {"y", mid + t0}}, fj::DType::F64, po);
    REQUIRE(p.intermediates.size() == 1);
    CHECK(p.intermediates[0].name == "_fj_t0_");
    CHECK(p.intermediates[0].output == 0);
    REQUIRE(p.steps.size() == 2);
    CHECK(outputs_of(p, 0) == std::vector<std::string>{"x"});
    CHECK(p.slot_of("_fj_t0_").kind == Plan::Slot::Output);
    CHECK(p.slot_of("_fj_t0_").index == 0);
    CHECK(p.slot_of("_fj_t0").kind == Plan::Slot::Input);
    CHECK(p.steps[1].kernel.inputs == std::vector<std::string>{"_fj_t0", "_fj_t0_"});
}

TEST_CASE("row steps: a cross-sectional node is a step of its own between time-series steps") {
    using fj::codegen::StepKind;
    // rank(-1 * corr(A, B, 10)): the argument in a time-series step, the rank in a row step writing the output.
    const Expr corr = -1 * fj::corr(fj::window(A, 10), fj::window(B, 10));
    const Plan p = fj::codegen::make_plan({{"r", fj::rank(corr)}});
    REQUIRE(p.steps.size() == 2);
    CHECK(p.steps[0].kind == StepKind::TimeSeries);
    CHECK(p.steps[1].kind == StepKind::Row);
    CHECK(p.steps[1].row_op()->op == fj::Op::Rank);
    CHECK(p.steps[0].row_op() == nullptr);
    REQUIRE(p.intermediates.size() == 2);  // the argument, and the rank (which is the output)
    CHECK(p.intermediates[0].producer == 0);
    CHECK(p.intermediates[0].last_reader == 1);
    CHECK(p.intermediates[1].output == 0);
    CHECK(p.steps[1].kernel.inputs == std::vector<std::string>{p.intermediates[0].name});
    CHECK(outputs_of(p, 1) == std::vector<std::string>{"r"});
    CHECK(p.steps[1].kernel.halo == 0);
    CHECK(p.steps[1].kernel.body.empty());
    CHECK(p.steps[1].chain_halo == 9);  // no halo of its own, the chain's passes through
    CHECK(p.halo == 9);
    CHECK(p.has_row_steps());

    // mean(rank(A), 5) + delta(B, 1): the rank reads A directly; the time-series step after it reads the
    // rank's intermediate and B. rank(rank(A)) needs no time-series step at all.
    const Plan q = fj::codegen::make_plan(
        {{"m", fj::mean(fj::window(fj::rank(A), 5)) + fj::delta(B, 1)}, {"rr", fj::rank(fj::rank(A))}});
    REQUIRE(q.steps.size() == 3);
    CHECK(q.steps[0].kind == StepKind::Row);
    CHECK(q.steps[0].kernel.inputs == std::vector<std::string>{"A"});
    CHECK(q.steps[1].kind == StepKind::TimeSeries);  // level 1, the first output's
    CHECK(q.steps[1].kernel.inputs == std::vector<std::string>{"B", q.steps[0].kernel.outputs[0]});
    CHECK(q.steps[1].chain_halo == 4);
    CHECK(q.steps[2].kind == StepKind::Row);
    CHECK(q.steps[2].kernel.inputs == q.steps[0].kernel.outputs);
    CHECK(outputs_of(q, 2) == std::vector<std::string>{"rr"});
    CHECK(q.intermediates.size() == 2);
    // The rank of A is alive from step 0 through its last reader, step 2.
    CHECK(q.intermediates_alive(0) == 1);
    CHECK(q.intermediates_alive(2) == 1);
    CHECK(q.peak_intermediates() == 1);
    CHECK(q.peak_bytes(1000, 100, fj::DType::F32) == (2 + 2 + 1) * 1000 * 100 * 4);

    // A group operator reads x then g, in that order; g is computed by a time-series step when it is an
    // expression, which fuses with the output that shares A with it (not with the row step, which shares C).
    const Plan g = fj::codegen::make_plan({{"n", fj::group_neutralize(C, A > B)}, {"s", C + A}});
    REQUIRE(g.steps.size() == 2);
    CHECK(outputs_of(g, 0) == std::vector<std::string>{"s", "_fj_t0"});
    const fj::codegen::Step* row = g.first_row_step();
    REQUIRE(row == &g.steps[1]);
    CHECK(row->kernel.inputs == std::vector<std::string>{"C", "_fj_t0"});
    CHECK(row->kernel.outputs == std::vector<std::string>{"n"});

    // Chains add up through row steps: mean(rank(std(A, 10)), 5) -> 9 + 0 + 4.
    const Plan chain = fj::codegen::make_plan({{"c", fj::mean(fj::window(fj::rank(fj::std(fj::window(A, 10))), 5))}});
    REQUIRE(chain.steps.size() == 3);
    CHECK(chain.steps[2].chain_halo == 13);
    CHECK(chain.halo == 13);

    const std::string text = fj::codegen::explain(p);
    CHECK(text.find("step 1: row (rank over whole rows, reads [_fj_t0]), no halo of its own (9 along its chain)") !=
          std::string::npos);
    CHECK(text.find("panel(s) alive") != std::string::npos);
    CHECK(text.find("memory: 2 input and 1 output panel(s), at most 1 intermediate(s) alive at once") != std::string::npos);
}

// Multi-step programs on the backends: results against the reference, on messy data, with tiles short
// enough that every step runs several of them.
TEST_CASE_TEMPLATE_DEFINE("multi-step programs against the reference", T, plan_backends) {
    if (T::backend == fj::Backend::Cuda && !fj::rt::cuda_backend()) {
        MESSAGE("no usable GPU: multi-step programs on the CUDA backend not run");
        return;
    }
    if (T::backend == fj::Backend::Cpu && !fj::rt::cpu_backend()) {
        MESSAGE("this build has no CPU backend: multi-step programs on it not run");
        return;
    }
    const fj::test::Dataset ds = fj::test::dataset("price, messy", 700, 37, fj::test::messy(fj::test::Flavour::Price), 21);
    const fj::test::NamedExprs program = {{"top", top},
                                          {"inner_out", inner},
                                          {"mixed", fj::max(fj::window(mid, 7)) - B},
                                          {"other", fj::corr(fj::window(B, 20), fj::window(C, 20))}};
    for (std::int64_t tile : {0, 97}) {
        CAPTURE(tile);
        fj::CompileOptions split = T::options();
        split.tile_rows = tile;
        split.materialize = {inner, mid};
        fj::test::check_against_reference(program, ds, T::dtype, split);
        fj::CompileOptions fused = T::options();
        fused.tile_rows = tile;
        fj::test::check_against_reference(program, ds, T::dtype, fused);
    }
    const fj::Program p = fj::compile(program, [] {
        fj::CompileOptions o = T::options();
        o.materialize = {inner, mid};
        return o;
    }());
    CHECK(p.explain().find("4 step(s), 2 intermediate(s)") != std::string::npos);
}
TEST_CASE_TEMPLATE_APPLY(plan_backends, fj::test::CpuTargets);
TEST_CASE_TEMPLATE_APPLY(plan_backends, fj::test::CudaTargets);

}  // TEST_SUITE
