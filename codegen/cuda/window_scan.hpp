// The two window-scan kernels, which keep a block's columns' windows in shared memory: the window scan
// (window_scan.cpp: a batch's rows in segments on the block's warps, combined by a scan) and the chained
// scan (chained_scan.cpp: a warp runs whole batches, handing its window sums on). Their plans, from the
// kernel's facts, and their emitter, which shares a pass's start, first values and row values between them.
// Internal to codegen/cuda/.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "codegen/cuda/instructions.hpp"
#include "codegen/cuda/kernel_facts.hpp"
#include "codegen/quiet_rows.hpp"
#include "codegen/state_kinds.hpp"
#include "codegen/window_terms.hpp"

namespace fj::codegen::detail {

// Whether the kernel can run as a window scan and how (plan_window_scan(); ok false, with why_not, if not).
struct WindowScanPlan {
    bool ok = false;
    std::string why_not;
    std::vector<WindowSum> sums;
    std::vector<RunCounter> counters;
    std::vector<StickyValue> stickies;
    std::vector<PrevValue> prevs;
    std::vector<bool> in_a, in_c, in_pre;  // emitted in the segment rows, the results, the sticky pre-scan
    std::vector<bool> predef;              // values the results phase defines (sum, counter, sticky roots)
    std::vector<CountTest> count_tests;  // comparisons the results phase defines (instead of the counts)
    std::set<int> tested_counters;         // counters whose count is only compared so (never formed)
    std::vector<int> ring_inputs;          // inputs kept in shared memory, in ring order
    std::set<std::pair<int, int>> reads;   // (input, lag) read from the rings (previous values: lag + 1)
    int reach = 0;                         // rows back the rows read reach (RowInPass included)
    // Rows back from a batch's first row that its segment rows and the results of the batch before
    // read (the ring keeps them while the batch's copy ahead is issued: see scan_loader()).
    int back_rows = 0;
    int ring_rows = 0;
    // Shared memory (bytes): one input's ring with its mirrored rows, and where the segments' sums, the
    // copies' mbarriers, the segments' counters and the ready row start.
    std::size_t ring_bytes = 0, tsum_at = 0, mbar_at = 0, tcnt_at = 0, ready_at = 0;
    int ahead = 0;                         // batches copied ahead of the one computed
    int segments = 0, segment_rows = 0;    // a batch's segments (the block's warps) and their rows
    int issuers = 0;                       // warps whose lane 0 issues the copies (scan_loader())
    int smem_bytes = 0;
};

WindowScanPlan plan_window_scan(const KernelFacts& facts);
// Values that hold one value per column over the rows a window compares (its first values: the sticky
// states' setting selects), for window_terms.hpp's proofs.
std::set<std::int32_t> row_constants(const WindowScanPlan& plan);
// Whether the planned sums' leaving terms are their entering terms w rows back (first values hold one value
// a column), for chained window scans; only they need it.
WindowSplit window_sum_split(const KernelFacts& facts, const WindowScanPlan& plan);

// The chained window scan (chained_scan.cpp): a warp runs whole batches of `rows` rows.
struct ChainPlan {
    bool ok = false;
    std::string why_not;
    int rows = 0;                // R: rows per batch, dividing the window
    int group = 0;               // rows per iteration of the batch's row loops (divides R)
    int window_batches = 0;      // w / R: the batch whose entering sums leave with this one's rows
    int warps = 0;               // W: batch b runs on warp b % W
    int ahead = 0;               // ring slots beyond those the warps' batches read
    WindowSplit split;           // the sums' entering terms (they leave window_batches batches later)
    std::vector<bool> in_entering;  // instructions phase A evaluates (entering terms, counters' conditions)
    std::vector<int> dists;      // batches back the rows a batch reads lie (0 first)
    int slots = 0;               // NB: ring slots (batches) per input
    int sum_slots = 0;           // NE: batches whose entering sums are kept
    // Shared memory (bytes): one input's ring, and where the entering sums, the hand-over sums and
    // counters, the mbarriers and the ready row start.
    std::size_t ring_bytes = 0, esum_at = 0, csum_at = 0, ccnt_at = 0, bars_at = 0, ready_at = 0;
    int smem_bytes = 0;
    QuietRows quiet;             // the counters' quiet states (CudaEmitOptions::quiet_batches)
};

ChainPlan plan_chained_scan(const KernelFacts& facts, const WindowScanPlan& scan);

class ScanEmitter {
public:
    // `chain`: the chained scan's plan, for run_chain().
    ScanEmitter(const KernelFacts& facts, const WindowScanPlan& scan, const ChainPlan& chain)
        : f_(facts), k_(facts.kernel), o_(facts.options), T_(facts.options.dtype == DType::F32 ? "float" : "double"),
          name_(cuda_kernel_name(facts.kernel)), scan_(scan), chain_(chain), printer_(src_, facts, no_echo_) {}
    // The whole translation unit of the window-scan kernel (throws BackendError when the plan is not ok).
    std::string run_scan();
    // The chained window scan's translation unit (throws BackendError when the plan is not ok).
    std::string run_chain();

private:
    template <class... A>
    void line(int indent, fmt::format_string<A...> f, A&&... a) { src_.line(indent, f, std::forward<A>(a)...); }
    void inst(int ind, int u, std::size_t i, const RowMode& mode) { printer_.inst(ind, u, i, mode); }
    // A window scan's rows (stores also test the lane, and row_end when guarded): guarded in a pass's first
    // batches, with what is known in a chained scan's quiet batches.
    static RowMode scan_rows(bool guarded, const QuietRows* quiet = nullptr) {
        RowMode m;
        m.window_scan = true;
        m.guarded = guarded;
        m.quiet = quiet;
        return m;
    }
    static std::string load_name(int slot, int off) { return InstructionPrinter::load_name(slot, off); }
    // (window_scan.cpp)
    void scan_prescan(int ind);
    void scan_pass_begin(int batch_rows);
    std::string scan_first_values_row() const;
    void scan_loader(int ind);
    void scan_batch(int ind, bool guarded);
    void scan_segment_loads(int ind, const std::vector<bool>& phase, bool guarded);
    void scan_prev_values(int ind, int i, bool guarded);
    void scan_predefine(int ind, std::int32_t i, const std::string& expr);
    void scan_sticky_values(int ind, int i, bool guarded, const std::vector<bool>& phase);
    // (L2 hints' macros as for a column scan with the options' cache_hints: unused, but part of the source.)
    void header() { print_header(src_, f_, {f_.batch_rows, false, o_.cache_hints && !o_.strides.empty(), true}); }
    // (chained_scan.cpp)
    void chain_loads(int ind, const std::vector<bool>& phase, int i, bool guarded);
    void chain_row_begin(int ind, const std::vector<bool>& phase, int i, bool guarded);
    void chain_batch(int ind, bool guarded);
    void chain_rows(int ind, bool guarded, const QuietRows* quiet);
    void chain_group_begin(int ind);

    const KernelFacts& f_;
    const ir::Kernel& k_;
    const CudaEmitOptions& o_;
    const char* const T_;
    const std::string name_;
    const WindowScanPlan& scan_;
    const ChainPlan& chain_;
    const std::vector<EchoRing> no_echo_;
    Source src_;
    InstructionPrinter printer_;
};

}  // namespace fj::codegen::detail
