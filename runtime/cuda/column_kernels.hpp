// Column steps on CUDA: ts_rank, median and quantile over windows of d >= 64 rows (codegen/plan.hpp,
// StepKind::Column) as a hand-written kernel, compiled once per panel dtype with NVRTC and cached like the
// row kernels (runtime/cuda/row_kernels.hpp). The definitions are docs/operators.md's, computed as the CPU's
// runtime/cpu/column_ops.cpp computes them (the same results, bit for bit: exact counts, the same
// interpolation, zeros as +0).
//
// A block owns a (column, time tile) and strides over them: the tile's output rows and the d - 1 rows before
// them, P rows at most (a power of two), are keyed by value (NaN last) and sorted by a bitonic sort; each row's
// coordinate is the first sorted place of its value (equal values share it). A wavelet matrix over the rows'
// coordinates (one level per bit: each level's zeros counted before every position, and the rows stably
// partitioned by that bit) then answers, for every output row at once (a thread each), how many values of its
// window lie below a coordinate and which coordinate is the window's k-th smallest, in one step per level:
// O(log P) a row, with no state carried from row to row. Shared memory holds a block's arrays where they fit
// (P up to 4,096: windows up to 1,024 rows on an H200), a global scratch area otherwise; windows longer than
// 32,768 rows are refused.
#pragma once

#include <cstdint>
#include <string>

#include "dsl/dtype.hpp"
#include "dsl/op.hpp"

namespace fj::rt::cuda {

// The kernel's `op` parameter: 0 ts_rank, 1 median / quantile. Throws fj::BackendError for other operators.
int column_kernel_op_code(Op op);

// The translation unit (no #include); its kernel is column_kernel_name(dtype).
std::string column_kernels_source(DType dtype);
std::string column_kernel_name(DType dtype);

inline constexpr int kColumnKernelThreads = 256;
inline constexpr std::int64_t kColumnKernelMaxPadded = 32768;  // coordinates and counts are 16-bit

// How a column step launches for a window of d rows over `rows` x `cols` panels on a device with `smem_bytes`
// of shared memory a block (opt-in) and `sms` multiprocessors: P (padded), the output rows a tile owns
// (P - (d - 1)), the wavelet levels (2^bits > P + 1), the tiles a column has, the block's bytes, whether they
// are in shared memory, and the grid (every task where shared memory holds them; else a few blocks a
// multiprocessor striding over the tasks, each with its share of a global scratch area of grid x bytes).
// Throws fj::BackendError for d > 32,768.
struct ColumnLaunch {
    std::int64_t padded = 0, tile = 0, bits = 0, tiles = 0;
    std::int64_t bytes = 0;  // a block's arrays
    bool in_smem = false;
    std::int64_t grid = 0;
};
ColumnLaunch column_kernel_launch(int d, std::int64_t rows, std::int64_t cols, int smem_bytes, int sms);

// Parameter block (8-byte words): x, x_ld, out, out_ld, rows, cols, op, d, need (max(min_periods, 1)), q (the
// double's bits), padded, tile, bits, tiles, scratch (0: shared memory), bytes a block.
inline constexpr int kColumnKernelParamWords = 16;

}  // namespace fj::rt::cuda
