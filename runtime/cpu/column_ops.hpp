// Column steps on the CPU: one long windowed order statistic (ts_rank, median, quantile over d >= 64 rows,
// codegen/plan.hpp: StepKind::Column) over a panel, O(log d) a row instead of the fused kernels' O(d).
//
// Work is split into tasks of a block of adjacent columns x a time tile of output rows (with the window's
// d - 1 rows before it): per column, the tile's values are ranked by one sort (equal values, -0 and +0
// included, share a coordinate), then a Fenwick tree over the coordinates counts the window's values as
// rows enter and leave it: ts_rank from two prefix counts, median and quantile from the tree's k-th descent
// and numpy's linear interpolation. Each window is computed from its own values alone, so results do not
// depend on the tiles, the chunks or the thread count, and they are bitwise those of the fused O(d) lowering
// (codegen/lower_ops.cpp: ts_rank, order_statistic), whose definitions (docs/operators.md) they share.
#pragma once

#include <cstdint>
#include <vector>

#include "dsl/dtype.hpp"
#include "dsl/expr.hpp"
#include "runtime/cpu/row_ops.hpp"

namespace fj::rt {
class ThreadPool;
}

namespace fj::cpu {

// The CPU backend runs a column step here from this window length on; shorter ones it fuses into a kernel of
// their own (codegen::lower_region), which costs less on the CPU up to about this length: measured with
// bench/bench_column_steps (10,000 x 1,000 float32, one thread), the column step costs 42-66 ns a cell at any
// d, the fused kernel 10-13 ns at d = 64, 35-40 at 160 and 56-78 at 250 (bench/RESULTS.md, "Column steps").
inline constexpr int kColumnStepCpuWindow = 224;

// out[t][j] = `stat` (WTsRank, WMedian or WQuantile, with its d, min_periods and q) over the window of rows
// t - d + 1 .. t (from row 0 of the panel) of column j of x, for every row t < rows and column j < cols;
// every output gets the same values. x is read only; outputs must not overlap it. `tile_rows`: output rows
// per time tile (CompileOptions::tile_rows; 0: max(2048, 8 (d - 1))); it changes no result. Throws
// fj::BackendError for any other operator.
void run_column_step(const Node& stat, const RowPanel& x, const std::vector<RowPanel>& outputs, std::int64_t rows,
                     std::int64_t cols, DType dtype, std::int64_t tile_rows, rt::ThreadPool& pool);

}  // namespace fj::cpu
