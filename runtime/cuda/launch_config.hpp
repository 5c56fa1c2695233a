// Launch configuration of a time-series kernel: block size, time tiles, grid.
//
// A thread owns a column, so a launch has only `cols` threads per tile. Time tiles multiply that: each
// tile re-runs `halo` warm-up rows before its first output row, so more tiles fill more of the GPU but
// re-read more. The choice here:
//   * block: the occupancy API's size for the kernel, shrunk (to a multiple of 32) when there are fewer
//     columns than that, so that few-column panels spread over more SMs;
//   * tiles: enough blocks for `waves` waves of resident blocks (sm_count * blocks_per_sm), but no
//     tile shorter than `min_halo_ratio` x halo (the halo's extra reads stay <= 1 / min_halo_ratio of a
//     tile's) nor than `min_tile_rows`; and never more than the grid's y limit;
//   * where even tiles of that floor make at most kFewWaves waves (5,000 x 4,000 with w = 20), the tile
//     count that runs in the fewest modelled row-times, a wave costing its tile, its halo and
//     kWaveStartRows: in practice whole waves, as few as the floor allows (H200, corr w=20 on
//     5,000 x 4,000: one wave of 313-row tiles 0.096 ms, two waves of 152 rows 0.107 ms);
//   * an explicit tile_rows (CompileOptions::tile_rows, for benchmarks and tests) wins.
// Many waves, because a block holds its SM for its whole tile: with few waves the last one leaves SMs
// idle (H200, corr w=20 on 50,000 x 50,000: 4.5 waves 19.4 ms, 36 waves 17.8 ms).
// Pure arithmetic, so it is tested without a GPU.
#pragma once

#include <cstdint>

namespace fj::rt::cuda {

// The modelled cost of starting a wave, in rows: from the two G5 tilings above (0.107 / 0.096 ms against
// 342 / 332 rows per thread), a wave's start is worth about 30 rows.
inline constexpr std::int64_t kWaveStartRows = 32;
// Up to this many waves the model above picks the tiles; beyond, the floor (measured only on few waves).
inline constexpr std::int64_t kFewWaves = 4;

struct LaunchInput {
    std::int64_t rows = 0, cols = 0;
    int halo = 0;
    int block = 256;           // from cuOccupancyMaxPotentialBlockSize
    int cols_per_block = 0;    // columns a block owns (0: one per thread; window-scan kernels: fixed block)
    int blocks_per_sm = 1;     // resident blocks of that size per SM
    int sm_count = 1;
    int max_grid_x = 2147483647;
    int max_grid_y = 65535;
    std::int64_t tile_rows = 0;  // 0: choose
    int waves = 32;            // see above
    int min_halo_ratio = 8;
    std::int64_t min_tile_rows = 32;
};

struct LaunchShape {
    int block = 0;
    std::int64_t grid_x = 0, grid_y = 0;  // grid_y <= ntiles (the kernel strides over tiles)
    std::int64_t tile_rows = 0, ntiles = 0;
};

// rows or cols == 0: a shape with grid 0 (nothing to launch).
LaunchShape choose_launch(const LaunchInput& in);

}  // namespace fj::rt::cuda
