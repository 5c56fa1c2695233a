// Row steps on CUDA: the cross-sectional operators (rank, zscore, demean, scale and their group forms) as
// hand-written kernels, compiled once per panel dtype with NVRTC and cached like the generated ones
// (docs/architecture.md, "Row steps"; the definitions are docs/operators.md's, the same as runtime/cpu/row_ops.cpp).
//
// A block owns a row (blocks stride over rows). It keys the row's valid columns by (group id, value) in an
// order-preserving integer form (NaN values and NaN group ids are left out and their outputs are NaN) and sorts
// them: float32 keys packed with the column into one 64-bit word (the value's key for rank; the group's key, or
// none, for the operators that need no order of values: all but the ranks) by a radix sort of 6-bit digits in
// shared memory, the others (float64, group_rank, rows whose radix buffers do not fit shared memory: beyond
// 12,288 columns for rank, about 9,000 for the others) by a bitonic sort, in shared memory where the row fits
// (row_kernel_smem_columns()) and in a global scratch area of the launch otherwise.
// Then each group (the whole row for the plain operators) goes to a warp: its count, sums and extremes in a fixed
// order (results do not depend on the launch). Ranks take every thread of the block: each sorted position finds
// its group's bounds and its tie run by binary search. Columns of a row: 1 to 2^30.
#pragma once

#include <cstdint>
#include <string>

#include "dsl/dtype.hpp"
#include "dsl/op.hpp"

namespace fj::rt::cuda {

// The operator codes the kernels take (their `op` parameter).
int row_kernel_op_code(Op op);  // throws fj::BackendError for an operator that is not cross-sectional
bool row_kernel_grouped(Op op);

// The translation unit (no #include); its kernel is row_kernel_name(dtype).
std::string row_kernels_source(DType dtype);
std::string row_kernel_name(DType dtype);

// Threads per block, and the bytes of sort keys per column (a power-of-two count of columns is sorted).
inline constexpr int kRowKernelThreads = 1024;
int row_kernel_key_bytes(DType dtype, Op op);
// The padded column count a row of `cols` columns sorts (the next power of two).
std::int64_t row_kernel_padded(std::int64_t cols);
// The widest padded row whose keys fit `smem_bytes` of a block's shared memory; wider rows sort in global memory.
std::int64_t row_kernel_smem_columns(DType dtype, Op op, int smem_bytes);

// How a row step launches for rows of `cols` columns: threads a block, the keys' padded count, the dynamic shared
// memory, and whether the keys sort in shared memory (else in a global scratch area of padded * key bytes a block).
// Float32 rows (but for group_rank) whose keys, spare keys and counters fit take the radix sort, a block of
// ceil(cols / 384) warps; the others a bitonic sort of the next power of two, 1,024 threads a block.
struct RowLaunch {
    int threads = 0;
    std::int64_t padded = 0;
    std::int64_t smem_bytes = 0;
    bool in_smem = false;
    bool radix = false;
};
RowLaunch row_kernel_launch(DType dtype, Op op, std::int64_t cols, int smem_bytes);

// Parameter block (8-byte words): x, x_ld, g (0: none), g_ld, out, out_ld, rows, cols, op, padded, scratch
// (0: keys in shared memory; else padded * key bytes per block of the grid, in global memory).
inline constexpr int kRowKernelParamWords = 11;

}  // namespace fj::rt::cuda
