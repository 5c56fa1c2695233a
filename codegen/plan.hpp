// The planner: a program's outputs -> an ordered list of steps -> kernel IR.
//
// A step computes some of the program's panels from others. Today every step is a time-series kernel:
// element-wise operators, windows and delays fuse into it, and it reads each of its inputs once per row
// and writes all the outputs it owns. Outputs that share no work and no input are separate steps (each
// gets the kernel shape that suits it); subexpressions named in PlanOptions::materialize are computed by a
// step of their own into an intermediate panel that later steps read as an input. Cross-sectional
// operators (rank, zscore, group ops: the next issue) will be row steps between time-series steps, with
// their results as intermediates in the same way (docs/architecture.md, "The plan").
//
// Intermediates have names of their own ("_fj_t0", ...), a producing step and a last reading step, after
// which an executable frees them. They hold the panel's dtype, as outputs do. Halos add up along a chain:
// a step's chain_halo is the rows before a row that its result needs of the program's inputs, its own
// kernel's halo plus the largest chain_halo of the steps whose intermediates it reads; Plan::halo is the
// largest over the steps, what a chunk of rows (a tile, a stream's chunk, a Dask block) must carry.
#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "codegen/kernel_ir.hpp"
#include "dsl/dtype.hpp"
#include "dsl/expr.hpp"

namespace fj::codegen {

enum class StepKind : std::uint8_t { TimeSeries };

struct Step {
    StepKind kind = StepKind::TimeSeries;
    ir::Kernel kernel;               // kernel.inputs / kernel.outputs name panels of the plan
    std::vector<const Node*> roots;  // the expression of each kernel output (intermediates it reads included)
    std::int32_t chain_halo = 0;     // see above
    std::vector<int> frees;          // intermediates (indices) nothing reads after this step
};

// A panel between steps that the program does not return (or returns under an output's name: `output`).
struct Intermediate {
    std::string name;      // what the steps' kernels call it ("_fj_t0")
    const Node* node = nullptr;
    int producer = -1;     // the step that writes it
    int last_reader = -1;  // the last step that reads it: it can be freed after that step
    int output = -1;       // >= 0: it is the program's output of that index (no memory of its own)
    int freed_after() const { return std::max(producer, last_reader); }
};

struct Plan {
    std::vector<std::string> inputs;   // the program's input panels, sorted by name
    std::vector<std::string> outputs;  // the program's outputs, in the order given
    std::vector<Step> steps;           // in execution order
    std::vector<Intermediate> intermediates;
    std::int32_t halo = 0;             // the largest chain_halo of any step
    DType dtype = DType::F32;          // the panels' dtype the kernels were lowered for
    bool exact_sums = false;           // window sums kept as double-double

    // Where a panel name of a step's kernel lives: the program's input or output of that index, or an
    // intermediate of that index (that is not an output).
    struct Slot {
        enum Kind : std::uint8_t { Input, Output, Intermediate } kind = Input;
        int index = 0;
    };
    Slot slot_of(const std::string& panel) const;
};

// How window sums are kept: exact (double-double) for float64 panels, or when asked for float32 too.
enum class Sums : std::uint8_t { Auto, Exact };

struct PlanOptions {
    Sums sums = Sums::Auto;
    // Subexpressions computed by a step of their own into an intermediate panel (of the panels' dtype),
    // which the steps that use them read as an input. Leaves (inputs, constants) and expressions the
    // program does not contain are ignored.
    std::vector<Expr> materialize;
};

Plan make_plan(const std::vector<std::pair<std::string, Expr>>& outputs, DType dtype = DType::F32,
               const PlanOptions& options = {});
inline Plan make_plan(const std::vector<std::pair<std::string, Expr>>& outputs, DType dtype, Sums sums) {
    return make_plan(outputs, dtype, PlanOptions{sums, {}});
}

std::string explain(const Plan& plan);

}  // namespace fj::codegen
