// The selection step: which kernel shape runs a kernel IR on which panels, and with what code options.
//
// One function, select_kernel(), from (kernel IR, panel class, device facts, settings) to a KernelChoice:
// a shape (column scan, window scan, chained window scan; row kernels next) and the emitter's options for
// it. Emitting (emit_cuda) and the kernel cache key (runtime/cuda/compile.hpp) both follow from that choice,
// and the thresholds that decide it live here with the measurements behind them (bench/TUNING.md has the
// settings that override them).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "codegen/cuda/emit.hpp"
#include "codegen/cuda/settings.hpp"
#include "codegen/kernel_ir.hpp"
#include "dsl/dtype.hpp"

namespace fj::codegen {

// Panels of at least this many elements run on kernels specialised on their leading dimensions (a
// compile on the first run with new ones, then from the caches): constant row offsets save address
// arithmetic on every load, which only pays off where a run is long.
inline constexpr long long kSpecializeElements = 1LL << 24;
// Rows per batch of those kernels: more loads in flight per thread, which a long scan at full bandwidth
// needs (H200, corr w=20, 50,000 x 50,000: 8 rows 12.3 ms, 16 rows 11.4 ms); compiled only for big
// panels, so the longer compile (about twice the body) does not touch the common cold-compile time.
inline constexpr int kSpecializedUnroll = 16;
inline constexpr int kSpecializedL2Prefetch = 16;
// L2 eviction hints (CudaEmitOptions::cache_hints) by default for those kernels that read a row again
// this many rows or more after first reading it: a long window's leaving rows, which with every column in
// flight are more than L2 holds (H200, corr w=250, 50,000 x 50,000: 14.7-15.0 against 15.7-16.2 ms). Not
// for short ones, whose re-reads hit L2 anyway (corr w=20 in three visits: 9.18, 8.56 and 8.74 ms with
// them against 8.84, 8.81 and 8.72 without: no consistent gain).
inline constexpr int kCacheHintMinLag = 64;
// Kernels specialised on leading dimensions that read kWindowScanMinInputs or more inputs kWindowScanMinLag
// or more rows back are window-scan kernels where they can be (the whole window on chip). A window scan's
// time does not depend on the window; the column scan's grows once the windows in flight overflow L2.
// Measured on the H200, 50,000 x 50,000 float32 (bench/RESULTS.md, ms, window / column scan): corr w=128
// 12.65 / 13.55, w=250 12.63 / 14.37, cov w=250 9.52 / 14.05; with the tensor copies (fourth session of
// 2026-12-01) corr w=250 12.53-12.61 / 14.97, cov w=250 8.86 / 14.54; corr w=100 13.42 / 13.23 with an
// earlier window scan; with one input the column scan wins: std w=500 11.18 / 8.89, mean w=500 12.58 / 9.38.
inline constexpr int kWindowScanMinLag = 128;
inline constexpr int kWindowScanMinInputs = 2;
// Window scans whose sums split are chained (chained_scan.cpp) by default when they keep at least this
// many window sums: the chain's warps run without block barriers but sum each batch's entering terms twice
// (once to hand the sums over, once row by row), which pays where the rows' work bounds the kernel and not
// where the memory does. Measured on the H200, 50,000 x 50,000 float32, one visit (bench/RESULTS.md,
// seventh session; ms, chained / window scan): corr (5 sums) w=250 10.70 and 10.99 / 12.05 and 12.20,
// w=128 10.21 / 12.01; cov (3 sums) w=250 8.62 / 8.32; one input (the column scan's, see above) std w=500
// 9.59 / 8.85 (column scan), mean w=500 9.78 / 9.38 (column scan).
inline constexpr int kChainMinSums = 4;

// "sm_90" (or "compute_90", "sm_90a") -> {9, 0}; throws fj::Error for anything else.
void parse_arch(const std::string& arch, int* major, int* minor);

enum class KernelShape : std::uint8_t { ColumnScan, WindowScan, ChainedScan };
const char* kernel_shape_name(KernelShape shape);

// What of the panels a run's kernel depends on.
struct PanelClass {
    // Leading dimensions (elements), one per input then one per output, that the kernel is specialised on;
    // empty: a generic kernel reading them from its parameters (small panels, see specialise_for()).
    std::vector<long long> strides;
    // Whether a window scan's tensor copies can read the panels: inputs on 16 bytes, a multiple of 4
    // columns, fewer than 2^31 - 32 rows, a driver with cuTensorMapEncodeTiled. Otherwise a column scan.
    bool tensor_copies = true;
};

// What of the device the choice depends on.
struct DeviceFacts {
    std::string arch;        // NVRTC's target, "sm_90" (window scans need kWindowScanMinArch)
    int max_block_smem = 0;  // dynamic shared memory a block may opt in to (bytes); 0: not known, no limit
};

struct KernelChoice {
    KernelShape shape = KernelShape::ColumnScan;
    CudaEmitOptions options;  // what emit_cuda generates
    WindowScanLayout scan;    // window scans' launch needs (smem_bytes 0 for column scans)
    CudaSettings settings;    // the settings the choice was made with (specialised: their rows per batch)
    // For kernels with refolds, what the choice's code is generated from (null for the others): with
    // FJ_CUDA_GUARD=1, column scans from ir::flag_refolds(kernel), whose passes raise repair flags for
    // select_repair_kernel's pass; otherwise, and for window and chained scans (no guard yet, docs/numerics.md),
    // ir::without_refolds(kernel).
    std::shared_ptr<const ir::Kernel> scan_kernel;
    // Whether the code raises repair flags (a column scan of a kernel with refolds): its launches take the flags
    // words, zeroed first, and the repair pass (select_repair_kernel) follows them on the same stream with the same
    // tiles (emit.hpp, "Repair flags").
    bool flags = false;
    // The emitter's analysis of the kernel, made once while choosing (specialised kernels), so that emitting
    // the choice does not analyse the kernel again; it refers to the kernel (or to scan_kernel, which it then
    // keeps alive itself), which must outlive it.
    std::shared_ptr<const CudaKernelAnalysis> analysis;
    bool fixed() const { return !options.strides.empty(); }
    // The kernel the choice's code is generated from: scan_kernel where there is one, else `kernel`.
    const ir::Kernel& kernel_for(const ir::Kernel& kernel) const { return scan_kernel ? *scan_kernel : kernel; }
};

// Whether panels of rows x cols run on kernels specialised on their leading dimensions.
bool specialise_for(std::int64_t rows, std::int64_t cols, const CudaSettings& settings);
// Inputs `kernel` reads kWindowScanMinLag or more rows back.
int long_window_inputs(const ir::Kernel& kernel);

KernelChoice select_kernel(const ir::Kernel& kernel, DType dtype, const PanelClass& panels, const DeviceFacts& device,
                           const CudaSettings& settings);

// The repair pass of kernels with refolds: the generic column scan of the kernel, refolds and all, in one
// guarded loop (one copy of the body: it runs rarely, and its compile adds to every cold compile), that runs a
// column's time tile only where its flag is set. Any block size and grid; tile_rows and ntiles as the main
// kernel's launch.
KernelChoice select_repair_kernel(DType dtype, const CudaSettings& settings);

}  // namespace fj::codegen
