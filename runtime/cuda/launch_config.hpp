// Launch configuration of a time-series kernel: block size and work shares.
//
// A thread owns a column of its block's column block and walks rows; a pass over a run of rows first
// re-runs `halo` warm-up rows. The work, the (column block, row) pairs of the panel in column-block order,
// is cut into equal shares of `tile_rows` pairs; block b of the 1-D grid runs shares b, b + grid_x, ...
// and a share is one pass, or several where it crosses from one column block into the next
// (codegen/cuda_emit.hpp). The choice here:
//   * block: the occupancy API's size for the kernel, shrunk (to a multiple of 32) when there are fewer
//     columns than that, so that few-column panels spread over more SMs;
//   * shares: `waves` shares per resident block (sm_count * blocks_per_sm), all of the same length, so
//     that resident blocks finish together, but none shorter than `min_halo_ratio` x halo (the halo's
//     extra work stays <= 1 / min_halo_ratio of a share's) nor than `min_tile_rows`;
//   * an explicit tile_rows (CompileOptions::tile_rows, for benchmarks and tests) wins.
// Earlier launches cut rows into time tiles per column block (a 2-D grid) and needed many waves to keep
// the last one from leaving SMs idle (H200, corr w=20 on 50,000 x 50,000: 4.5 waves 19.4 ms, 36 waves
// 17.8 ms); those tiles then paid a halo each (1137-row tiles at w = 20, 1924-row tiles at w = 250: 13 %
// more rows). Equal shares need neither.
// Pure arithmetic, so it is tested without a GPU.
#pragma once

#include <cstdint>

namespace fj::rt::cuda {

struct LaunchInput {
    std::int64_t rows = 0, cols = 0;
    int halo = 0;
    int block = 256;           // from cuOccupancyMaxPotentialBlockSize
    int blocks_per_sm = 1;     // resident blocks of that size per SM
    int sm_count = 1;
    int max_grid_x = 2147483647;
    std::int64_t tile_rows = 0;  // pairs per share; 0: choose
    int waves = 1;             // shares per resident block (FJ_CUDA_WAVES)
    int min_halo_ratio = 8;
    std::int64_t min_tile_rows = 32;
};

struct LaunchShape {
    int block = 0;
    std::int64_t grid_x = 0, grid_y = 0;  // grid_x <= ntiles (the kernel strides over shares); grid_y 1
    std::int64_t tile_rows = 0, ntiles = 0;  // pairs per share, shares
};

// rows or cols == 0: a shape with grid 0 (nothing to launch).
LaunchShape choose_launch(const LaunchInput& in);

}  // namespace fj::rt::cuda
