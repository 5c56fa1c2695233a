// The CUDA code generator's tuning and diagnosis settings, declared once.
//
// FJ_CUDA_SETTINGS below is the only list of them: it generates CudaSettings' fields, their parsing from
// the environment (CudaSettings::from_env), their part of the kernel cache key (cache_key_text) and their
// documentation (settings_markdown; bench/TUNING.md holds that table, with the figures behind each default,
// and a test checks that the two agree). Adding a setting is one line here and its use in select.cpp or
// the emitter.
//
// These are not user options: their defaults are the product, measured on the H200 (bench/RESULTS.md,
// bench/TUNING.md). What users choose lives in fj::CompileOptions (numerics such as FMA contraction
// included); the environment variables users need are in README.md.
#pragma once

#include <string>

#include "dsl/dtype.hpp"
#include <vector>

namespace fj::codegen {

// Which kernels a setting changes, and so which cache keys carry it:
//   Generic  kernels that read leading dimensions from their parameters (small panels);
//   Fixed    kernels specialised on the panels' leading dimensions (big panels, select.hpp);
//   All      both;
//   Launch   only how kernels are launched or which variant is chosen, never the code of a variant (no key).
enum class SettingScope { Generic, Fixed, All, Launch };

// X(type, field, environment variable, default, lowest, highest, scope, "what it does")
// Booleans are ints restricted to 0 and 1; -1, where allowed, means "chosen by the rule in select.cpp".
#define FJ_CUDA_SETTINGS(X)                                                                                       \
    X(int, unroll, "FJ_CUDA_UNROLL", 1, 1, 16, All,                                                               \
      "rows per load batch: 1 for generic kernels (a fast cold compile), 16 for specialised ones unless set; "    \
      "echo rings round it up to a multiple of the window (at most 24)")                                          \
    X(int, one_loop, "FJ_CUDA_ONE_LOOP", 1, 0, 1, Generic,                                                        \
      "generic kernels in one guarded loop (half the code to compile); 0 unless set when FJ_CUDA_UNROLL is set")  \
    X(int, block, "FJ_CUDA_BLOCK", 0, 0, 1024, Launch,                                                            \
      "threads per block of column scans, a multiple of 32 (0: the occupancy API's choice)")                     \
    X(int, fixed_ld, "FJ_CUDA_FIXED_LD", -1, -1, 1, Launch,                                                       \
      "kernels specialised on the panels' leading dimensions: 1 always, 0 never, -1 for panels of 2^24 "         \
      "elements or more")                                                                                         \
    X(int, l2_prefetch, "FJ_CUDA_PREFETCH", -1, -1, 4096, Fixed,                                                  \
      "rows ahead of the batch that specialised kernels prefetch into L2 (-1: 16; 0: none)")                     \
    X(int, batched_edges, "FJ_CUDA_EDGES", 1, 0, 1, Fixed,                                                        \
      "a pass's last rows in masked batches of at most 4 rows (0: one row at a time)")                           \
    X(int, warm_rows, "FJ_CUDA_WARM_ROWS", 4, 0, 16, Fixed,                                                       \
      "rows before a pass's first output in store-free batches of this many rows (0: guarded batches)")          \
    X(int, cache_hints, "FJ_CUDA_CACHE_HINTS", -1, -1, 1, Fixed,                                                  \
      "L2 eviction hints (keep rows read again): 1 on, 0 off, -1 for kernels reading 64 or more rows back")       \
    X(int, echo, "FJ_CUDA_ECHO", 1, 0, 1, Fixed,                                                                  \
      "echo rings: values a window of 8-24 rows removes come back from shared memory instead of a reload")        \
    X(int, quiet, "FJ_CUDA_QUIET", 1, 0, 1, Fixed,                                                                \
      "quiet batches: batches whose run counters are all quiet run a copy of their rows without them")            \
    X(int, window_scan, "FJ_CUDA_WINDOW_SCAN", -1, -1, 1, Fixed,                                                  \
      "window scans: 1 wherever a kernel can be one, 0 never, -1 for kernels reading 2 or more inputs 128 or "   \
      "more rows back")                                                                                           \
    X(int, scan_ahead, "FJ_CUDA_SCAN_AHEAD", 0, 0, 8, Fixed,                                                      \
      "window scans' batches copied ahead of the one computed (0: as many as fit, at most 4)")                   \
    X(int, scan_chain, "FJ_CUDA_SCAN_CHAIN", -1, -1, 1, Fixed,                                                    \
      "chained window scans: 1 wherever the sums split, 0 never, -1 for window scans of 4 or more window sums")  \
    X(int, rsqrt_refine, "FJ_CUDA_RSQRT_REFINE", 1, 0, 1, All,                                                    \
      "float32 reciprocal square root with its Newton step (0: the estimate alone; an experiment on the "        \
      "contract: corr(x, x) is then not always exactly 1)")                                                      \
    X(int, guard, "FJ_CUDA_GUARD", -1, -1, 1, All,                                                                \
      "column scans of kernels with refolds raise repair flags and a repair pass reruns the flagged passes with "  \
      "the refolds (the accuracy contract after spikes, docs/numerics.md): 1 always, 0 never, -1 float64 kernels "  \
      "only (float32's cost is not cut yet: corr w=20 took 1.93 ms instead of 1.42 at 20,000 x 20,000, 158 "    \
      "registers; float64 skew and kurt miss their 1e-9 contract without it)")                                 \
    X(int, big_body_shapes, "FJ_CUDA_BIG_BODY_SHAPES", 0, 0, 1, All,                                              \
      "diagnosis: give big fused kernels the code shapes ptxas miscompiled (bench/RESULTS.md)")

struct CudaSettings;
// Whether column scans of `dtype` kernels with refolds raise repair flags (FJ_CUDA_GUARD).
bool guarded(const CudaSettings& settings, DType dtype);

struct CudaSettings {
#define FJ_CUDA_SETTING_FIELD(type, field, env, def, lo, hi, scope, doc) type field = def;
    FJ_CUDA_SETTINGS(FJ_CUDA_SETTING_FIELD)
#undef FJ_CUDA_SETTING_FIELD
    bool unroll_given = false;  // FJ_CUDA_UNROLL was set: specialised kernels take it too (select.hpp)
    // Diagnosis: extra NVRTC options, from FJ_NVRTC_OPTIONS (space-separated). They are part of the cache
    // key through the NVRTC options.
    std::vector<std::string> extra_options;
    // Numerics, set from fj::CompileOptions::fma_contraction (not from the environment): NVRTC may contract
    // a*b+c into one FMA. Off by default, so both backends round the same IEEE operations alike.
    bool fmad = false;

    // The defaults with every FJ_CUDA_* variable of the list and FJ_NVRTC_OPTIONS applied. Throws fj::Error
    // naming the variable for a value that is not an integer in its range.
    static CudaSettings from_env();
};

// " name=value" for every setting whose scope covers generic (fixed = false) or specialised kernels.
std::string cache_key_text(const CudaSettings& settings, bool fixed);

// The Markdown table of the settings (variable, default, range, kernels, what it does), as bench/TUNING.md
// holds it.
std::string settings_markdown();

}  // namespace fj::codegen
