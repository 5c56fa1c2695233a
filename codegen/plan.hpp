// The planner: a program's outputs -> fused regions -> kernel IR.
//
// Time-series operators (element-wise, windows, delay) fuse into one region; each region becomes one
// kernel that reads every input once per row and writes all the outputs it owns. Cross-sectional
// operators (rank, zscore, group ops: a later issue) need whole rows and will end a region: the
// producing region writes an intermediate panel, a per-row kernel consumes it, and the next region reads
// it as an input. Region::inputs already name panels or intermediates so that this fits without change.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "codegen/kernel_ir.hpp"
#include "dsl/expr.hpp"
#include "dsl/dtype.hpp"

namespace fj::codegen {

struct Region {
    ir::Kernel kernel;             // kernel.inputs / kernel.outputs name panels of the program
    std::vector<const Node*> roots;  // the expression of each kernel output
};

struct Plan {
    std::vector<std::string> inputs;   // the program's input panels, sorted by name
    std::vector<std::string> outputs;  // the program's outputs, in the order given
    std::vector<Region> regions;       // in execution order
    std::int32_t halo = 0;             // the largest halo of any region
    DType dtype = DType::F32;          // the panels' dtype the kernels were lowered for
    bool exact_sums = false;           // window sums kept as double-double
};

// How window sums are kept: exact (double-double) for float64 panels, or when asked for float32 too.
enum class Sums : std::uint8_t { Auto, Exact };

Plan make_plan(const std::vector<std::pair<std::string, Expr>>& outputs, DType dtype = DType::F32,
               Sums sums = Sums::Auto);

std::string explain(const Plan& plan);

}  // namespace fj::codegen
