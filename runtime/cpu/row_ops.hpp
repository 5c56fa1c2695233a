// Row steps on the CPU: a cross-sectional operator (rank, zscore, demean, scale and their group forms)
// over whole rows of a panel, rows spread over the thread pool. What each operator computes is defined
// once, in row_ops.cpp, over one group of a row's valid values; the group operators are the same
// definitions within the groups of a row (codegen/plan.hpp: Step::row_op, StepKind::Row).
#pragma once

#include <cstdint>
#include <vector>

#include "dsl/dtype.hpp"
#include "dsl/op.hpp"

namespace fj::rt {
class ThreadPool;
}

namespace fj::cpu {

struct RowPanel {
    void* data = nullptr;  // row-major, `ld` elements between rows, of the step's dtype
    std::int64_t ld = 0;
};

// out[t][j] = op over row t of x (for the group operators, over the columns of row t whose group id in
// g equals g[t][j]), for every row t < rows and column j < cols; each output gets the same values. x and
// g are read only; outputs must not overlap them. Results do not depend on the thread count.
void run_row_step(Op op, const RowPanel& x, const RowPanel* g, const std::vector<RowPanel>& outputs,
                  std::int64_t rows, std::int64_t cols, DType dtype, rt::ThreadPool& pool);

// Whether run_row_step knows `op` (every CrossSection operator of dsl/op.hpp should).
bool has_row_op(Op op);

}  // namespace fj::cpu
