#include "runtime/cuda/launch_config.hpp"

#include <algorithm>

#include "codegen/cuda/emit.hpp"

namespace fj::rt::cuda {

namespace {
std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Too few rows for more than kFewWaves waves: the tile count whose modelled run time is least, each
// wave costing its longest block, (tile + halo + kWaveStartRows) rows. Fewer waves pay fewer halos,
// whole waves leave no SM idle; no tile shorter than floor_rows. The loop runs at most rows / floor_rows
// times, which is below kFewWaves * resident / grid_x here.
std::int64_t few_waves_tile(const LaunchInput& in, std::int64_t grid_x, std::int64_t resident,
                            std::int64_t floor_rows) {
    const std::int64_t max_tiles = std::max<std::int64_t>(1, in.rows / floor_rows);
    std::int64_t best_tile = in.rows, best_cost = -1;
    for (std::int64_t n = 1; n <= max_tiles; ++n) {
        const std::int64_t tile = ceil_div(in.rows, n);
        const std::int64_t cost = ceil_div(grid_x * n, resident) * (tile + in.halo + kWaveStartRows);
        if (best_cost < 0 || cost < best_cost) best_cost = cost, best_tile = tile;
    }
    return best_tile;
}
}  // namespace

LaunchShape choose_launch(const LaunchInput& in) {
    LaunchShape s;
    if (in.rows <= 0 || in.cols <= 0) return s;
    const int full = std::max(32, in.block);
    s.block = in.cols_per_block > 0 ? full : static_cast<int>(std::min<std::int64_t>(full, ceil_div(in.cols, 32) * 32));
    s.grid_x = ceil_div(in.cols, in.cols_per_block > 0 ? in.cols_per_block : s.block);
    // Smaller blocks than the occupancy size: about as many more of them fit (registers bound them).
    const std::int64_t per_sm = std::clamp<std::int64_t>(
        static_cast<std::int64_t>(std::max(1, in.blocks_per_sm)) * full / s.block, 1, 32);
    const std::int64_t resident = per_sm * std::max(1, in.sm_count);

    std::int64_t tile = in.tile_rows;
    if (tile <= 0) {
        const std::int64_t want_blocks = resident * std::max(1, in.waves);
        const std::int64_t want_tiles = std::max<std::int64_t>(1, ceil_div(want_blocks, s.grid_x));
        tile = ceil_div(in.rows, want_tiles);
        const std::int64_t floor_rows =
            std::max<std::int64_t>(in.min_tile_rows, static_cast<std::int64_t>(in.min_halo_ratio) * in.halo);
        if (tile < floor_rows) {
            tile = floor_rows;
            const std::int64_t floor_waves = ceil_div(s.grid_x * ceil_div(in.rows, floor_rows), resident);
            if (floor_waves <= kFewWaves) tile = few_waves_tile(in, s.grid_x, resident, floor_rows);
        }
        // Even tiles: the last one as long as the others (no short straggler).
        tile = ceil_div(in.rows, ceil_div(in.rows, tile));
    }
    // Generated kernels count within a pass in 32-bit integers (codegen/cuda/emit.hpp).
    tile = std::clamp<std::int64_t>(tile, 1, std::min<std::int64_t>(in.rows, codegen::kCudaMaxTileRows));
    s.tile_rows = tile;
    s.ntiles = ceil_div(in.rows, tile);
    s.grid_y = std::min<std::int64_t>(s.ntiles, std::max(1, in.max_grid_y));
    return s;
}

}  // namespace fj::rt::cuda
