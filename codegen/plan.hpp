// The planner: a program's outputs -> an ordered list of steps -> kernel IR.
//
// A step computes some of the program's panels from others. A time-series step is one kernel: element-wise
// operators, windows and delays fuse into it, and it reads each of its inputs once per row and writes all
// the outputs it owns. Outputs that share no work and no input are separate steps (each gets the kernel
// shape that suits it); subexpressions named in PlanOptions::materialize are computed by a step of their
// own into an intermediate panel that later steps read as an input. A row step computes one
// cross-sectional operator (rank, zscore, group ops), which needs whole rows: its arguments are panels
// (program inputs, or intermediates that a time-series step computed), and its result is an intermediate
// (or an output) that later steps read like any other (docs/architecture.md, "The plan"). A column step is
// the same for one long order statistic (ts_rank, median, quantile over d >= kColumnStepWindow rows): the
// kernel IR keeps a window's order only as d states or d comparisons a row (it has no state read at a
// computed index), so each backend runs such a window with a structure of its own, O(log d) a row, over
// the argument's panel (runtime/cpu/column_ops.hpp, runtime/cuda/column_kernels.hpp).
//
// Intermediates have names of their own ("_fj_t0", ...), a producing step and a last reading step, after
// which an executable frees them. They hold the panel's dtype, as outputs do. Halos add up along a chain:
// a step's chain_halo is the rows before a row that its result needs of the program's inputs, its own
// kernel's halo plus the largest chain_halo of the steps whose intermediates it reads; Plan::halo is the
// largest over the steps, what a chunk of rows (a tile, a stream's chunk, a Dask block) must carry. A row
// step reads no earlier rows (its own halo is 0) but passes the chain halo of what it reads on; a column
// step's own halo is its window's d - 1.
#pragma once

#include <algorithm>
#include <string_view>
#include <string>
#include <utility>
#include <vector>

#include "codegen/kernel_ir.hpp"
#include "dsl/dtype.hpp"
#include "dsl/expr.hpp"

namespace fj::codegen {

enum class StepKind : std::uint8_t {
    TimeSeries,  // one kernel over rows in time order (tiles over time and column blocks)
    Row,         // one cross-sectional operator, row by row over whole rows (no kernel IR)
    Column,      // one long windowed order statistic, column by column (no kernel IR)
};

// Order statistics over windows of at least this many rows get a column step (O(log d) a row); shorter
// ones fuse into kernels (O(d) a row, cheaper than a step of their own at small d).
inline constexpr int kColumnStepWindow = 64;
// Whether n (over its argument) is computed by a column step: ts_rank, median or quantile with d >= kColumnStepWindow.
bool is_column_op(const Node* n);

struct Step {
    StepKind kind = StepKind::TimeSeries;
    // kernel.inputs / kernel.outputs name panels of the plan. A time-series step's kernel is the whole
    // kernel. A row step's has only its name, its inputs (the operator's arguments in order: x, then g
    // for the group operators; each a panel) and outputs (its one result, under every name it has); its
    // body is empty and its halo 0. A column step's likewise, with its one input x and its halo d - 1.
    ir::Kernel kernel;
    std::vector<const Node*> roots;  // the expression of each kernel output (intermediates it reads included);
                                     // a row step's: its operator over input nodes of its argument panels
    std::int32_t chain_halo = 0;     // see above
    std::vector<int> frees;          // intermediates (indices) nothing reads after this step
    // Row steps: the cross-sectional node (Op::Rank, ... with the argument panels as input nodes).
    const Node* row_op() const { return kind == StepKind::Row ? roots.front() : nullptr; }
    // Column steps: the order statistic (Op::WTsRank, WMedian or WQuantile, with its d, min_periods and q)
    // over an input node of its argument panel.
    const Node* column_op() const { return kind == StepKind::Column ? roots.front() : nullptr; }
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

    // Panels alive at once, for memory: the program's inputs and outputs throughout, plus the
    // intermediates (with memory of their own) alive during a step: from their producer through the last
    // step that reads them.
    int intermediates_alive(std::size_t step) const;
    int peak_intermediates() const;  // the largest intermediates_alive over the steps
    // Bytes of the panels alive at the peak for rows x cols panels of `dtype`: inputs + outputs + the peak
    // intermediates (inputs and outputs counted dense, ld = cols).
    std::int64_t peak_bytes(std::int64_t rows, std::int64_t cols, DType dtype) const;
    bool has_row_steps() const;
    const Step* first_row_step() const;
};

// Backends without row steps (CUDA today) refuse a plan that has them, with this message:
// "cross-sectional operator 'rank' is not on the CUDA backend yet; use backend cpu". Throws BackendError.
void refuse_row_steps(const Plan& plan, std::string_view backend);

// How window sums are kept: exact (double-double) for float64 panels, or when asked for float32 too.
enum class Sums : std::uint8_t { Auto, Exact };

struct PlanOptions {
    Sums sums = Sums::Auto;
    // Subexpressions computed by a step of their own into an intermediate panel (of the panels' dtype),
    // which the steps that use them read as an input. Leaves (inputs, constants) and expressions the
    // program does not contain are ignored.
    std::vector<Expr> materialize;
    // Long order statistics as column steps (is_column_op). Off, they fuse into kernels at any d: for tests
    // that hold the two paths to each other, not a user option.
    bool column_steps = true;
};

Plan make_plan(const std::vector<std::pair<std::string, Expr>>& outputs, DType dtype = DType::F32,
               const PlanOptions& options = {});
inline Plan make_plan(const std::vector<std::pair<std::string, Expr>>& outputs, DType dtype, Sums sums) {
    return make_plan(outputs, dtype, PlanOptions{sums, {}, true});
}

std::string explain(const Plan& plan);

}  // namespace fj::codegen
