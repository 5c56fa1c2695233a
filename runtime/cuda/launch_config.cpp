#include "runtime/cuda/launch_config.hpp"

#include <algorithm>

#include "codegen/cuda_emit.hpp"

namespace fj::rt::cuda {

namespace {
std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }
}  // namespace

LaunchShape choose_launch(const LaunchInput& in) {
    LaunchShape s;
    if (in.rows <= 0 || in.cols <= 0) return s;
    const int full = std::max(32, in.block);
    s.block = static_cast<int>(std::min<std::int64_t>(full, ceil_div(in.cols, 32) * 32));
    const std::int64_t work = ceil_div(in.cols, s.block) * in.rows;  // (column block, row) pairs
    // Smaller blocks than the occupancy size: about as many more of them fit (registers bound them).
    const std::int64_t per_sm = std::clamp<std::int64_t>(
        static_cast<std::int64_t>(std::max(1, in.blocks_per_sm)) * full / s.block, 1, 32);
    const std::int64_t resident = per_sm * std::max(1, in.sm_count);

    std::int64_t share = in.tile_rows;
    if (share <= 0) {
        share = ceil_div(work, resident * std::max(1, in.waves));
        const std::int64_t floor_rows =
            std::max<std::int64_t>(in.min_tile_rows, static_cast<std::int64_t>(in.min_halo_ratio) * in.halo);
        share = std::max(share, floor_rows);
        share = ceil_div(work, ceil_div(work, share));  // equal shares: the last as long as the others
    }
    // Generated kernels count within a pass in 32-bit integers (codegen/cuda_emit.hpp); a pass is at
    // most a share long.
    share = std::clamp<std::int64_t>(share, 1, std::min<std::int64_t>(work, codegen::kCudaMaxTileRows));
    s.tile_rows = share;
    s.ntiles = ceil_div(work, share);
    s.grid_x = std::min<std::int64_t>(s.ntiles, std::max(1, in.max_grid_x));
    s.grid_y = 1;
    return s;
}

}  // namespace fj::rt::cuda
