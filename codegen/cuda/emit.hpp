// Kernel IR -> CUDA C++ source for NVRTC.
//
// One ir::Kernel becomes one `extern "C" __global__` function named after kernel.name (made a valid
// identifier). The source has no #include and needs no header: NVRTC's built-in math (sqrt, exp, log,
// pow, floor, fabs) is all it calls. Compile it without fast-math (IEEE division, square root,
// denormals); cuda_compile_options() gives the options the cache key is built from.
//
// Shape (docs/architecture.md): thread j of the grid's x dimension owns column j (adjacent threads, adjacent columns:
// every row read is coalesced); blockIdx.y, striding by gridDim.y, picks time tiles. A tile owns the
// output rows [out_begin, out_begin + tile_rows) and runs the kernel's body from
// row_begin = max(0, out_begin - halo) to row_end = min(rows, out_begin + tile_rows), so the first
// rows only warm the states up (the IR's Output stores nothing before out_begin). States are local
// doubles; rings are local double arrays with a position counter, except small ones (reg_ring_max),
// which become shift registers indexed only by constants so that they stay in registers. Addresses are
// 64-bit throughout.
//
// Loops of a pass, in order:
//   * (fixed leading dimensions only) the rows before out_begin in batches of warm_only_rows that store
//     nothing (NVRTC drops what only outputs need) and skip the loads of rows before the pass that every
//     use masks (a window's leaving rows);
//   * the pass's first rows (the halo, the largest lag read, and until every sticky state - the shift of
//     window sums - is set) with every guard: loads before the panel's first row read NaN, RowInPass is
//     tested, outputs are stored only from out_begin on. Kernels with fixed leading dimensions and bodies
//     of at most 300 live instructions run them in batches of `unroll` rows (loads first) as far as whole
//     batches go, then one at a time; the others one at a time, after requesting all their loads into L1
//     (bigger bodies keep that shape: see the miscompile in bench/RESULTS.md);
//   * the batched loop, `unroll` rows per iteration, with no guards: every loaded value is replaced by the
//     one `unroll` rows later right after its last use (rolling prefetch); kernels with fixed leading
//     dimensions also ask L2 for the rows `l2_prefetch_rows` ahead; it stops 2 batches before the end;
//   * (fixed leading dimensions only) the last whole batches, loads first;
//   * the remaining rows one at a time.
// With echo rings (CudaEmitOptions::echo_rings) the pass's first rows also store the values its window sums
// will remove (kernel_ir.hpp's echoes) in shared memory and run until the batched loop can start a multiple
// of the windows' lengths after row_begin; the two batched loops then read those values back at constant
// slots instead of loading the leaving rows, and the loops after them load them as before.
// Bodies of more than 300, 600 or 1500 live instructions batch at most 4, 2 or 1 rows (NVRTC's time grows
// with the copies of the body).
// Repair flags: a column scan of a kernel from ir::flag_refolds runs no refold; each Flag instruction ORs its
// condition into a per-pass boolean, and a pass (a column's time tile) where one held sets its bit in the
// `flags` words (atomicOr, once per pass). The repair pass (CudaEmitOptions::repair: the generic one-loop column
// scan of the kernel with its refolds) then runs again only the passes whose bit is set, writing their outputs
// over the main kernel's: rows of clean data pay the guard's arithmetic and an OR, a tile with a spike pays
// its pass once more (docs/numerics.md, select.hpp).
// Refolds (kernel_ir.hpp): in every kind of row, a Refold instruction is `if (when) { the window's rows
// again, from the panel (and rings), in compensated sums; the epilogue; the exports }`, and its RefoldValues
// read the exports or their fallbacks (a phi: rows without a refold pay the test alone); echo rings that
// refold refreshes are overwritten with the recomputed values of the rows they keep (instructions.cpp).
// Window and chained scans do not run refolds yet: select_kernel plans and emits them from
// ir::without_refolds(kernel) (docs/numerics.md).
//
// The loop body is bound by instruction issue and load latency on an H200 (bench/RESULTS.md), so the
// emitter spends no instruction it can avoid without changing a result: dead values are not emitted;
// integer-valued values of bounded size (counts, rows since a change) are integers, 32-bit when a pass
// bounds them; values that are exactly float32 numbers (float32 inputs, float-exact constants, states and
// selects of those) live in float registers and are compared in float32; selects, mins and maxes that only
// reach float32 outputs run on rounded values; NaN tests of float64 values are integer tests of their
// bits; sticky states are loop invariants in the batched loops; run counters (`c ? 0 : s + 1`) are kept
// offset by the row within the batch, so that a reset selects a constant. With fixed leading dimensions (one kernel
// per set of them: CudaEmitOptions::strides) every row offset is a constant that loads take as an
// immediate.
//
// Parameter ABI: the kernel takes ONE parameter, a struct of 8-byte words in this order
//     in[0..ni)    : const T*   input panels, kernel.inputs order (T = float or double)
//     in_ld[0..ni) : long long  their leading dimensions (elements)
//     out[0..no)   : T*         output panels, kernel.outputs order
//     out_ld[0..no): long long
//     rows, cols, tile_rows, ntiles : long long
//     flags, flag_words : unsigned*, long long   (column scans that raise repair flags, and repair passes:
//                                                  ntiles * flag_words words, flag_words = ceil(cols / 32))
// so the host fills a uint64_t array of cuda_param_words() words and passes its address.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "codegen/kernel_ir.hpp"
#include "codegen/window_terms.hpp"
#include "dsl/dtype.hpp"

namespace fj::codegen {

// Bump whenever the generated code changes for the same IR: it is part of every cache key.
// 19: column scans run the kernels' refolds (window and chained scans are emitted without them).
// 20: column scans raise repair flags (ir::flag_refolds) and repair passes rerun the flagged passes with refolds.
inline constexpr int kCudaCodegenVersion = 20;

// The longest time tile a launch may use (launch_config caps it): states then live for at most this
// many rows plus the halo, which bounds counters enough to keep them in 32-bit registers.
inline constexpr long long kCudaMaxTileRows = 1LL << 29;

struct CudaEmitOptions {
    DType dtype = DType::F32;
    int unroll = 8;          // rows whose loads are issued together (1 .. 16; fewer for big bodies)
    int reg_ring_max = 16;   // rings up to this size live in registers (shift registers)
    // Leading dimensions (elements) fixed at compile time, one per input then one per output; empty:
    // read from the parameters. Fixed, every row offset of a batch is a constant, which the loads take as
    // an immediate (no address arithmetic per load); the kernel then only runs on panels with these.
    std::vector<long long> strides;
    // Rows ahead of the batch that the batched loop asks L2 to prefetch (prefetch.global.L2, one per
    // input and row, no register): more of the panel in flight than registers can hold. 0: none.
    int l2_prefetch_rows = 0;
    // (Loads staged in shared memory by cp.async, several batches per iteration of the batched loop,
    // __launch_bounds__ on column scans and 16-warp window scans were options once; each measured slower
    // or no better on the H200 and was removed with its code: bench/RESULTS.md keeps the figures.)
    // With fixed leading dimensions: a pass's last rows in masked batches of at most 4 rows and warm-up
    // batches that may run past the warm-up rows, instead of one row at a time (the runtime's default;
    // a 16-row masked batch raised the G1 kernel's registers past 128 and lost: 9.70 against 8.86 ms).
    bool batched_edges = false;
    // With fixed leading dimensions: the pass's rows before out_begin (the halo) in batches of this many
    // rows that store nothing and skip the loads of rows before the pass that no result reads; the guarded
    // warm-up batches after them take this many rows too (0: none of that, guarded batches of `unroll`).
    // 8 or 16 rows raised corr's registers past 128 (130, 139).
    int warm_only_rows = 4;
    // With fixed leading dimensions: L2 eviction hints in the batched loop. A row this thread reads again
    // later (a window's entering row, read again as it leaves) loads with evict_last, its last read and
    // rows read once with evict_first (ld.global.cs), and outputs are stored with st.global.cs, so that
    // L2 keeps the rows a long window reads again instead of the streams that pass through it.
    bool cache_hints = false;
    // Diagnosis only: give bodies of more than 300 live instructions the guarded warm-up batches and
    // fj_rsqrt too, the shapes ptxas -O2/-O3 miscompiled on the H200 (bench/RESULTS.md).
    bool big_body_shapes = false;
    // With fixed leading dimensions and register loads: the values a window's sums remove (the kernel's
    // echoes, kernel_ir.hpp) read back from this thread's rings in shared memory, where the row that
    // entered d rows earlier left them, instead of loading that row again, converting it to float64,
    // testing it and shifting it (corr: two loads, two conversions, two float64 subtractions and the tests
    // of two values per row, and no re-reads of lagged rows through L2). Batches then take a multiple of
    // the windows' lengths (at most kCudaMaxEchoUnroll rows), and a pass's batched loop starts a multiple of
    // them after its first row. Kernels whose rings would take more than kCudaMaxEchoBytesPerThread, or
    // whose windows' lengths have no multiple that short, load the leaving rows as before, and so do windows
    // shorter than echo_min_lag. The rings are volatile: without that, NVVM forwarded a ring's value from
    // its store to its read in the same batch and hoisted reads, and registers rose (corr w=10 128 -> 144,
    // cov w=20 126 -> 192). H200 (bench/RESULTS.md, ninth session), 50,000 x 50,000 float32, rings against
    // loads: corr w=20 8.333 against 8.684 ms (sustained 9.531 against 9.958), corr w=10 8.258 / 8.419,
    // cov w=20 8.235 / 8.489, std w=20 6.574 / 7.072, mean w=10 6.280 / 6.331, corr w=20 at 5,000 x 4,000
    // 0.0900 / 0.0924; but std w=5 6.511 against 6.161, hence the minimum lag.
    bool echo_rings = false;
    int echo_min_lag = 8;
    // Float32 kernels' reciprocal square root (corr): the hardware estimate and one Newton step, or, off,
    // the estimate alone. Off is within docs/operators.md's float32 bounds (1e-6 relative overall, 1e-5 per
    // element; cross-checks pass) but loses what users see: on the H200 corr of a panel with itself was
    // exactly 1 in 37 % of the outputs instead of all, and up to 8.9e-7 (15 float32 steps) below it. So
    // off only as an experiment for whoever owns that contract (FJ_CUDA_RSQRT_REFINE=0; bench/RESULTS.md,
    // ninth session: sustained G1 9.5 -> 8.7-9.0 ms).
    bool rsqrt_refine = true;
    // Generic kernels (no strides) only: every row of a pass in the guarded one-row loop, instead of the
    // guarded loop for the warm-up rows and a second copy of the body, without guards, for the rest (and
    // `unroll` is then ignored). One copy of the body for NVRTC to compile: cold compiles of J1's kernels
    // took 10-25 % less on the development machine, 27 % on the H200; the guards cost a few instructions
    // per row (CudaSettings::one_loop has the run times). Window shifts whose setting row depends on that
    // row's inputs alone are set by a scan before the loop, so the loop does not test them in every row.
    bool one_loop = false;
    // The window-scan kernel instead of the column scan (see "Window-scan kernels" below): float32 and
    // fixed leading dimensions only; emit_cuda throws for kernels cuda_window_scan_smem() refuses.
    bool window_scan = false;
    // Window scans: batches copied ahead of the one computed, 0 for as many as shared memory holds at two
    // blocks per SM, up to kWindowScanMaxAhead. Each batch's copies are issued as the block starts the
    // batch that many before it.
    int window_scan_ahead = 0;
    // Window scans: the chained variant (chained_scan.cpp) instead, where the kernel's window sums
    // split (cuda_window_sum_split) and a batch length of kWindowScanChainMinRows to kWindowScanBatchRows
    // rows divides the window; emit_cuda throws for kernels cuda_window_scan_smem() refuses.
    bool window_scan_chain = false;
    // Batches whose run counters are all in their quiet states on every lane of the warp (codegen/
    // quiet_rows.hpp; corr: no missing value in the window, both inputs changing on every row) run their rows
    // with the counters' tests and what those imply as constants, skipping the counters' updates and the
    // finiteness tests and masks of the rows (a warp vote picks the copy): chained window scans (decided from
    // what their phase A gathers) and the batched loop of column scans with register loads (a check of the
    // counters' conditions on the batch's rows, in registers already, before it; quiet_check.cpp).
    bool quiet_batches = true;
    // The repair pass (above, "Repair flags"): a column scan that runs a column's tile only where the flags
    // words say the main kernel's pass needs the kernel's refolds; generic kernels only.
    bool repair = false;

    bool operator==(const CudaEmitOptions&) const = default;
};

// Window-scan kernels (codegen/cuda/window_scan.cpp) keep a block's 32 columns' whole window in shared
// memory, so that a long window's leaving rows are not read from global memory again, and share each column
// among the block's warps (by default 8, each running 4 rows of a 32-row batch; their window sums and run
// counters are combined by a scan across warps). For kernels whose states are window sums, run counters,
// first values and previous values only (the moments of corr, cov, mean, std, ...). Launch: blocks of 32 x
// warps threads owning kWindowScanColumns columns, cuda_window_scan_smem() bytes of dynamic shared memory
// per block; time tiles as for the column scan. Its rows arrive by tensor copies (TMA): panels must start on
// 16 bytes and have a multiple of 4 columns (the runtime checks, and runs the column scan otherwise).
// Window scans copy with tensor copies and mbarrier transaction counts: sm_90 and later.
inline constexpr int kWindowScanMinArch = 90;
// Warps per block: a batch's segments, each running kWindowScanBatchRows / kWindowScanWarps rows (16 warps
// of 2-row segments measured slower). The block's size is its kernel's maximum threads per block
// (__launch_bounds__; CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK).
inline constexpr int kWindowScanWarps = 8;
inline constexpr int kWindowScanColumns = 32;
// Its parameters end with two tensor maps per input (CUtensorMap, 128 bytes, 128-byte aligned after the
// words of the ABI above): boxes of kWindowScanColumns columns by kWindowScanBatchRows rows (a batch) and by
// kWindowScanMirrorRows rows (the ring's mirror), of float32 with zeros out of bounds.
inline constexpr int kWindowScanBatchRows = 32;
inline constexpr int kWindowScanMirrorRows = 4;
// At most this much shared memory per block, so that two blocks fit an SM of sm_90 (227 KB).
inline constexpr int kWindowScanMaxSharedBytes = 113 * 1024;
// The most batches a window scan copies ahead by default (CudaEmitOptions::window_scan_ahead).
inline constexpr int kWindowScanMaxAhead = 4;
// Chained window scans (CudaEmitOptions::window_scan_chain): warps per block (one block per SM), batch rows
// at least, ring slots beyond those the warps read, and the shared memory a block may take (sm_90).
inline constexpr int kWindowScanChainWarps = 16;
inline constexpr int kWindowScanChainMinRows = 16;
inline constexpr int kWindowScanChainAhead = 2;
inline constexpr int kWindowScanChainMaxSharedBytes = 227 * 1024;
// What launching the window-scan kernel of `kernel` with these options (plain or chained) takes, from one
// plan of it: its dynamic shared memory per block (0 when it cannot run as one; why_not says why), the rows
// of its tensor copies' batch box (the runtime's tensor maps: kWindowScanBatchRows, or a chained scan's
// batch rows) and the window sums it keeps.
struct WindowScanLayout {
    int smem_bytes = 0;
    int box_rows = 0;
    int sums = 0;
    std::string why_not;
};
WindowScanLayout cuda_window_scan_layout(const ir::Kernel& kernel, const CudaEmitOptions& options);
// Its shared memory alone (0: it cannot be one).
inline int cuda_window_scan_smem(const ir::Kernel& kernel, const CudaEmitOptions& options, std::string* why_not = nullptr) {
    WindowScanLayout l = cuda_window_scan_layout(kernel, options);
    if (why_not) *why_not = std::move(l.why_not);
    return l.smem_bytes;
}
// The window sums of a kernel that can be a window scan with these options, split into the terms rows
// add as they enter and take away w rows later (codegen/window_terms.hpp); not ok, with why_not, when
// the kernel cannot be a window scan or its sums do not split so.
WindowSplit cuda_window_sum_split(const ir::Kernel& kernel, const CudaEmitOptions& options);

// Echo rings (CudaEmitOptions::echo_rings): the most shared memory per thread (so that 512 threads, the
// register limit of corr's 128 registers, still fit an SM of sm_90: corr w=20 takes 41 doubles, 328 bytes)
// and the longest batch (registers for its rolling loads).
inline constexpr int kCudaMaxEchoBytesPerThread = 400;
inline constexpr int kCudaMaxEchoUnroll = 24;

// A valid C identifier from kernel.name ("fj_" prefixed when needed, at most 120 characters).
std::string cuda_kernel_name(const ir::Kernel& kernel);

// The column scan that emit_cuda generates for these options (with window_scan off): rows per batch (the option's, after the limits
// of big bodies and the multiple echo rings need), its echo rings, its shared memory per thread.
struct CudaColumnScanShape {
    int batch_rows = 1;
    int echo_rings = 0;
    int smem_per_thread = 0;
};
// (emit_cuda gives it too, from the same pass over the kernel, and the runtime keeps the shared memory in
// the kernel cache's entry, so that loading a cached kernel takes no pass over it.)
CudaColumnScanShape cuda_column_scan_shape(const ir::Kernel& kernel, const CudaEmitOptions& options);

// The whole translation unit for NVRTC. Throws fj::BackendError for IR it cannot emit (a malformed
// operand index, a type mismatch: ir::verify, kernel_ir.hpp, runs first).
// `shape`, when given, receives the column scan's shape (defaults for window scans).
std::string emit_cuda(const ir::Kernel& kernel, const CudaEmitOptions& options, CudaColumnScanShape* shape = nullptr);

// One kernel's analyses, made once and shared by the queries above and emit_cuda: the facts about its IR
// (codegen/cuda/kernel_facts.hpp: liveness, integer and float32 value forms, sticky states, run counters)
// and, as each is first asked for, the plans of the column scan, the window scan and the chained scan. A
// caller that asks for layouts and then emits (the kernel shape selection) builds one and passes it to
// the overloads below; the functions above build one per call. The options given with it must be those it
// was built with, except window_scan and window_scan_chain, which pick the shape (they throw
// fj::BackendError otherwise). The kernel must outlive it; not for use by several threads at once.
//     CudaKernelAnalysis a(kernel, options);
//     CudaEmitOptions chain = options; chain.window_scan = chain.window_scan_chain = true;
//     if (cuda_window_scan_layout(a, chain).smem_bytes > 0) source = emit_cuda(a, chain);
class CudaKernelAnalysis {
public:
    CudaKernelAnalysis(const ir::Kernel& kernel, const CudaEmitOptions& options);
    CudaKernelAnalysis(CudaKernelAnalysis&&) noexcept;
    CudaKernelAnalysis& operator=(CudaKernelAnalysis&&) noexcept;
    ~CudaKernelAnalysis();
    const ir::Kernel& kernel() const;
    const CudaEmitOptions& options() const;
    struct Impl;  // (codegen/cuda/emit.cpp)
    Impl& impl() const { return *impl_; }

private:
    std::unique_ptr<Impl> impl_;
};
WindowScanLayout cuda_window_scan_layout(const CudaKernelAnalysis& analysis, const CudaEmitOptions& options);
WindowSplit cuda_window_sum_split(const CudaKernelAnalysis& analysis, const CudaEmitOptions& options);
CudaColumnScanShape cuda_column_scan_shape(const CudaKernelAnalysis& analysis, const CudaEmitOptions& options);
std::string emit_cuda(const CudaKernelAnalysis& analysis, const CudaEmitOptions& options, CudaColumnScanShape* shape = nullptr);


// Words in the parameter block of `kernel` (see the ABI above), without the repair flags' two.
inline int cuda_param_words(const ir::Kernel& kernel) {
    return 2 * static_cast<int>(kernel.inputs.size()) + 2 * static_cast<int>(kernel.outputs.size()) + 4;
}
// The flags words a pass over panels of `cols` columns takes per time tile.
inline long long cuda_flag_words(long long cols) { return (cols + 31) / 32; }

// NVRTC options for an arch ("sm_90"); `fmad` allows fused multiply-add contraction.
std::vector<std::string> cuda_compile_options(const std::string& arch, bool fmad);

}  // namespace fj::codegen
