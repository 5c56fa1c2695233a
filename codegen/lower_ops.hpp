// Lowering of operators to kernel-IR primitives: the one place that says what each operator computes
// per row and how its state is updated. Every backend emits from the result.
#pragma once

#include <vector>

#include "codegen/kernel_ir.hpp"
#include "dsl/dtype.hpp"
#include "dsl/expr.hpp"

namespace fj::codegen {

// Appends to `kernel` the instructions computing `roots[i]` into output slot i. kernel.inputs must
// already list every input the roots read; states, rings, halo and max_input_lag are filled in.
// exact_sums: window sums kept as double-double (see lower_ops.cpp, "Running shifted sums"); `dtype`, the
// panels', sets how far the sums may drift before a refold rebuilds them (sums_tolerance).
void lower_region(const std::vector<const Node*>& roots, bool exact_sums, DType dtype, ir::Kernel& kernel);

// The relative error a window's results may take from its running sums before a refold rebuilds them:
// well inside the accuracy contract of docs/operators.md for panels of `dtype` (docs/numerics.md).
double sums_tolerance(DType dtype);

// The halo of a kernel holding a recursive operator (ema): unbounded memory, so every pass starts at the
// column's first row (a time tile "warms up" from row 0: a sequential scan per column, exact for any tiling).
// Halos never exceed it (halo_of saturates), so a chain of steps still adds up within int.
constexpr int kSequentialHalo = 1 << 28;

// Rows of warm-up a node needs before its value is exact (Halide-style bounds inference):
// window(x, d) adds d - 1 to x's, delay(x, k) adds k unless x can be re-read at any lag; a recursive
// operator needs every row before (kSequentialHalo, the most any node gets).
int halo_of(const Node* node);

// True when a node's value at row t - k can be recomputed from the inputs at row t - k (element-wise
// functions of inputs, constants and delays of such): no state, no ring needed for its history.
bool is_pointwise(const Node* node);

}  // namespace fj::codegen
