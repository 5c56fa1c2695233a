// The CUDA backend: kernel IR -> CUDA source -> NVRTC -> cubin -> cuLaunchKernel, behind fj::rt::cuda_backend().
//
// Compiling needs only NVRTC (compile_cuda_kernel works without a GPU: `factorjit compile`, CI);
// running needs the driver and a device. The backend object exists only when all three are there.
//
// Environment (documented in one place, as DESIGN.md asks):
//   FJ_CACHE_DIR        disk cache directory; "off" disables it (default $XDG_CACHE_HOME/factorjit
//                       or ~/.cache/factorjit)
//   FJ_DUMP_DIR         write every generated CUDA source there (<kernel>-<key hash>.cu)
//   FJ_CUDA_DEVICE      device ordinal (default 0)
//   FJ_CUDA_UNROLL      rows per load batch in generated kernels (default 1, and 16 for big panels; 1..16;
//                       echo rings round it up to a multiple of the window, at most 24)
//   FJ_CUDA_ONE_LOOP    generic kernels (small panels) in one guarded loop: 1 (the default unless
//                       FJ_CUDA_UNROLL is set) or 0 (CudaSettings::one_loop)
//   FJ_CUDA_FMAD        1: let NVRTC contract a*b+c into FMA (default 0: the same IEEE operations as the
//                       CPU backend, so both backends round identically except in exp/log/pow)
//   FJ_CUDA_BLOCK       threads per block (default: the occupancy API's choice)
//   FJ_CUDA_FIXED_LD    1: always run kernels specialised on the panels' leading dimensions; 0: never;
//                       default: for panels of kSpecializeElements or more
//   FJ_CUDA_PREFETCH    rows ahead that those kernels prefetch into L2 (0: none)
//   FJ_CUDA_STAGES      batches those kernels stage in shared memory with cp.async (default 0: loads
//                       into registers, 16 rows per batch; 2 or more: staged, 8 rows per batch)
//   FJ_CUDA_COPIES      batches per iteration of those kernels' batched loop (register loads; default 1)
//   FJ_CUDA_EDGES       0: those kernels run a pass's last rows one at a time (default 1: in masked
//                       batches of at most 4 rows, and warm-up batches that may run past the warm-up)
//   FJ_CUDA_LAUNCH_BOUNDS  N: those kernels declare __launch_bounds__(N) (register cap; experiment)
//   FJ_CUDA_CACHE_HINTS 1: those kernels give L2 eviction hints (keep rows read again), 0: not;
//                       default: those reading rows kCacheHintMinLag or more rows back
//   FJ_CUDA_WINDOW_SCAN 1: kernels specialised on leading dimensions are window-scan kernels wherever
//                       they can be (codegen/cuda/emit.hpp), 0: never; default: those reading
//                       kWindowScanMinInputs or more inputs kWindowScanMinLag or more rows back
//   FJ_CUDA_SCAN_AHEAD, FJ_CUDA_SCAN_WARPS  window scans' batches copied ahead and warps per block
//   FJ_CUDA_SCAN_CHAIN  1: window scans are chained window scans where their sums split and a batch of
//                       16-32 rows divides the window (codegen/cuda/chained_scan.cpp), 0: never; default: where
//                       they keep kChainMinSums or more window sums (corr, not cov)
//   FJ_CUDA_ECHO        0: those kernels load a window's leaving rows again (default 1: the values their
//                       sums remove come back from shared memory where entering rows left them, batches
//                       of a multiple of the window; codegen::CudaEmitOptions::echo_rings)
//   FJ_CUDA_QUIET       0: chained window scans and big-panel column scans run every batch with its counters
//                       (default 1: batches whose counters are all in their quiet states run a copy of their
//                       rows without them; codegen::CudaEmitOptions::quiet_batches)
//   FJ_CUDA_RSQRT_REFINE  0: float32 kernels' reciprocal square root without its Newton step (an
//                       experiment on the accuracy contract; codegen::CudaEmitOptions::rsqrt_refine)
//   FJ_CUDA_BIG_BODY_SHAPES  1: big fused kernels get the shapes ptxas miscompiled (diagnosis)
//   FJ_NVRTC_OPTIONS    extra NVRTC options, space-separated (e.g. "-Xptxas -O1"; diagnosis)
//   FJ_CUDA_SMEM        unused dynamic shared memory per block, in bytes (default 0): caps the blocks
//                       resident on an SM, for experiments with L2 residency of long windows
//   FJ_LIBCUDA, FJ_NVRTC_LIBRARY   paths of the libraries to dlopen first
#pragma once

#include <string>
#include <vector>

#include "codegen/cuda/emit.hpp"
#include "codegen/kernel_ir.hpp"
#include "runtime/cuda/kernel_cache.hpp"
#include "runtime/panel.hpp"

namespace fj::rt::cuda {

// Panels of at least this many elements run on kernels specialised on their leading dimensions (a
// compile on the first run with new ones, then from the caches): constant row offsets save address
// arithmetic on every load, which only pays off where a run is long.
inline constexpr long long kSpecializeElements = 1LL << 24;
// Rows per batch of those kernels: more loads in flight per thread, which a long scan at full bandwidth
// needs (H200, corr w=20, 50,000 x 50,000: 8 rows 12.3 ms, 16 rows 11.4 ms); compiled only for big
// panels, so the longer compile (about twice the body) does not touch the common cold-compile time.
inline constexpr int kSpecializedUnroll = 16;
inline constexpr int kSpecializedL2Prefetch = 16;
// With FJ_CUDA_STAGES=N (N >= 2) they stage their loads in shared memory (cp.async) instead, N batches
// of kSpecializedStagedUnroll rows (kernels whose stages would need more than
// kCudaMaxStageBytesPerThread keep register loads). Off by default: on the H200 it measured slower
// (corr w=20, 50,000 x 50,000: 12.5 ms against 9.0 ms with register loads; bench/RESULTS.md).
inline constexpr int kSpecializedStages = 0;
inline constexpr int kSpecializedStagedUnroll = 8;
// Batches per iteration of their batched loop (codegen::CudaEmitOptions::loop_copies; 2 measured 9.6
// against 8.9 ms).
inline constexpr int kSpecializedLoopCopies = 1;
// L2 eviction hints (codegen::CudaEmitOptions::cache_hints) by default for those kernels that read a row
// again this many rows or more after first reading it: a long window's leaving rows, which with every
// column in flight are more than L2 holds (H200, corr w=250, 50,000 x 50,000: 14.7-15.0 against
// 15.7-16.2 ms). Not for short ones, whose re-reads hit L2 anyway (corr w=20 in three visits: 9.18, 8.56
// and 8.74 ms with them against 8.84, 8.81 and 8.72 without: no consistent gain).
inline constexpr int kCacheHintMinLag = 64;
// Kernels specialised on leading dimensions that read kWindowScanMinInputs or more inputs kWindowScanMinLag
// or more rows back are window-scan kernels where they can be (the whole window on chip:
// codegen/cuda/emit.hpp). A window scan's time does not depend on the window; the column scan's grows
// once the windows in flight overflow L2. Measured on the H200, 50,000 x 50,000 float32 (bench/RESULTS.md,
// ms, window / column scan): corr w=128 12.65 / 13.55, w=250 12.63 / 14.37, cov w=250 9.52 / 14.05; with
// the tensor copies (fourth session of 2026-12-01) corr w=250 12.53-12.61 / 14.97, cov w=250 8.86 / 14.54;
// corr w=100 13.42 / 13.23 with an earlier window scan; with one input the column scan wins: std w=500
// 11.18 / 8.89, mean w=500 12.58 / 9.38.
inline constexpr int kWindowScanMinLag = 128;
inline constexpr int kWindowScanMinInputs = 2;
// Window scans whose sums split are chained (codegen/cuda/chained_scan.cpp) by default when they keep at least
// this many window sums: the chain's warps run without block barriers but sum each batch's entering terms
// twice (once to hand the sums over, once row by row), which pays where the rows' work bounds the kernel
// and not where the memory does. Measured on the H200, 50,000 x 50,000 float32, one visit (bench/RESULTS.md,
// seventh session; ms, chained / window scan): corr (5 sums) w=250 10.70 and 10.99 / 12.05 and 12.20,
// w=128 10.21 / 12.01; cov (3 sums) w=250 8.62 / 8.32; one input (the column scan's, see above) std w=500
// 9.59 / 8.85 (column scan), mean w=500 9.78 / 9.38 (column scan).
inline constexpr int kChainMinSums = 4;
// Waves of blocks a window scan's time tiles aim at (LaunchInput::waves): few, because each tile pays a
// halo, guarded first batches and the search for first values, and a 32-column block is short already
// (H200, corr w=250: 6 tiles of 8,334 rows 13.38 ms, 2 or 1 tile(s) 13.10 / 13.09 ms).
inline constexpr int kWindowScanWaves = 4;
// Inputs `kernel` reads kWindowScanMinLag or more rows back.
int long_window_inputs(const ir::Kernel& kernel);
// The first NVRTC with -minimal (major * 1000 + minor * 10, as nvrtcVersion gives it here).
inline constexpr int kNvrtcMinimalVersion = 12040;

// Code-generation settings that are not in CompileOptions (benchmark knobs), read from the environment.
struct CudaSettings {
    // Rows per batch of the generic kernels (small panels, below kSpecializeElements): one, so that a cold
    // compile stays fast (NVRTC's time grows with the copies of the body); big panels get
    // kSpecializedUnroll. H200, cold compiles of new sources (bench_gpu --j1, bench/RESULTS.md seventh
    // session), median of J1's five kernels: 222 ms with 4 rows, 193 with 2, 165 with 1; the generic kernels'
    // run time did not move (corr w=20, 20,000 x 20,000: 2.133 / 2.143 ms; 5,000 x 4,000: 0.136 / 0.136).
    int unroll = 1;
    // Generic kernels in one guarded loop (codegen::CudaEmitOptions::one_loop; FJ_CUDA_ONE_LOOP=0 for the
    // guarded warm-up loop plus an unguarded one): half the code for NVRTC to compile, for small panels,
    // whose runs cost far less than a cold compile. H200 (bench/RESULTS.md, eighth session): J1's median
    // 98.9 against 134.7 ms; the generic kernels' run time +2 % (corr w=20), +6 % (max w=30), -7 % (std
    // w=250) at 50,000 x 50,000, +10 % for corr at 5,000 x 4,000 (0.182 against 0.166 ms). Since the window
    // shifts are set before the loop (ninth session): corr w=20 15.959 against 15.975 ms, std w=250 11.844
    // against 13.177.
    bool one_loop = true;
    bool unroll_given = false;  // FJ_CUDA_UNROLL set: kernels specialised on leading dimensions use it too
    bool fmad = false;
    int reg_ring_max = 16;
    int block = 0;  // 0: occupancy API
    int smem = 0;   // dynamic shared memory per block (bytes): fewer resident blocks per SM
    int l2_prefetch = -1;  // rows ahead prefetched into L2 by kernels specialised on leading dimensions (-1: default)
    int fixed_ld = -1;  // kernels specialised on the panels' leading dimensions: -1 for big panels, 0 never, 1 always
    int stages = kSpecializedStages;  // see codegen::CudaEmitOptions::async_stages (specialised kernels only)
    int copies = kSpecializedLoopCopies;  // FJ_CUDA_COPIES
    bool big_body_shapes = false;         // FJ_CUDA_BIG_BODY_SHAPES=1 (diagnosis, see codegen::CudaEmitOptions)
    bool batched_edges = true;            // FJ_CUDA_EDGES (specialised kernels; codegen::CudaEmitOptions)
    int launch_bounds = 0;                // FJ_CUDA_LAUNCH_BOUNDS=N (specialised kernels; max_threads)
    int cache_hints = -1;                 // FJ_CUDA_CACHE_HINTS: 1 on, 0 off, -1 by kCacheHintMinLag
    int warm_rows = 4;                    // FJ_CUDA_WARM_ROWS (specialised kernels; warm_only_rows)
    int window_scan = -1;                 // FJ_CUDA_WINDOW_SCAN: 1 wherever possible, 0 never, -1 by long_window_inputs()
    int scan_ahead = 0;                   // FJ_CUDA_SCAN_AHEAD: window scans' batches copied ahead (0: as many as fit)
    int scan_warps = 0;                   // FJ_CUDA_SCAN_WARPS: window scans' warps per block, 8 or 16 (0: 8)
    int scan_chain = -1;                  // FJ_CUDA_SCAN_CHAIN: 1 wherever sums split, 0 never, -1 by kChainMinSums
    bool echo = true;                     // FJ_CUDA_ECHO: echo rings (specialised kernels; codegen::CudaEmitOptions::echo_rings)
    bool quiet = true;                    // FJ_CUDA_QUIET: quiet batches (codegen::CudaEmitOptions::quiet_batches)
    bool rsqrt_refine = true;             // FJ_CUDA_RSQRT_REFINE=0: float32 rsqrt without its Newton step (experiment)
    std::vector<std::string> extra_options;  // FJ_NVRTC_OPTIONS, appended to NVRTC's (part of the cache key)
    static CudaSettings from_env();
};

// NVRTC's options for a kernel: codegen::cuda_compile_options and the extra ones.
std::vector<std::string> nvrtc_options(const std::string& arch, const CudaSettings& settings);

// The emitter's options for a kernel with these settings (strides: see codegen::CudaEmitOptions) and NVRTC
// target ("sm_90"): what compile_cuda_kernel generates and what its launches must provide (shared memory).
// Window scans only for targets of codegen::kWindowScanMinArch or later (their copies are sm_90's);
// scan, when given, receives a window scan's launch needs (shared memory per block, tensor copies' rows;
// smem_bytes 0 for the column scan).
codegen::CudaEmitOptions cuda_emit_options(const ir::Kernel& kernel, DType dtype, const CudaSettings& settings,
                                           const std::vector<long long>& strides, const std::string& arch,
                                           codegen::WindowScanLayout* scan = nullptr);


// The cache key of a kernel: IR hash, dtype, codegen version, NVRTC target, NVRTC version, options.
// `strides`: see codegen::CudaEmitOptions::strides (empty: leading dimensions from the parameters).
std::string cuda_kernel_key(const ir::Kernel& kernel, DType dtype, const std::string& arch, bool cubin,
                            const CudaSettings& settings, const std::vector<long long>& strides = {});

// One kernel compiled, with what the CLI reports. No GPU needed.
struct CudaCompiled {
    std::string function;      // the kernel's symbol
    std::string key;
    std::string source;
    std::string dump_path;     // "" unless FJ_DUMP_DIR is set
    CacheEntry entry;          // the image
    double emit_ms = 0, compile_ms = 0;
    int registers = -1, stack_bytes = -1;  // read from the cubin's ELF (-1 for PTX)
    codegen::CudaEmitOptions emitted;      // how it was generated
    // Column scans: rows per batch, echo rings, the dynamic shared memory launches need per thread
    // (window scans: defaults, 0 bytes per thread; their needs are in `scan`).
    codegen::CudaColumnScanShape shape;
    codegen::WindowScanLayout scan;        // window-scan kernels: shared memory per block, copies' rows
    std::string log;           // NVRTC warnings
};

// Emits, dumps (FJ_DUMP_DIR) and compiles one kernel for `arch` ("sm_90", or "compute_90" for PTX).
// Throws fj::BackendError with the NVRTC log and the dump path on failure.
CudaCompiled compile_cuda_kernel(const ir::Kernel& kernel, DType dtype, const std::string& arch, bool cubin,
                                 const CudaSettings& settings, const std::vector<long long>& strides = {});

// Compiles several kernels in parallel (one thread each, at most the hardware's count at a time);
// results in the order given. The first failure is rethrown after all have finished. fixed_ld > 0: the
// kernels big panels get, specialised on that leading dimension for every panel (see kSpecializeElements).
std::vector<CudaCompiled> compile_cuda_kernels(const std::vector<const ir::Kernel*>& kernels, DType dtype,
                                               const std::string& arch, bool cubin, const CudaSettings& settings,
                                               long long fixed_ld = 0);

// The settings kernels specialised on leading dimensions are compiled with.
CudaSettings specialised_settings(const CudaSettings& settings);

}  // namespace fj::rt::cuda
