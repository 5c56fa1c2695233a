// The column scan: a thread owns a column and walks a time tile's rows in order (codegen/cuda/emit.hpp
// describes its loops). Its plans (which rows a batch takes, echo rings, preset sticky states, quiet
// batches) and its emitter; column_scan.cpp holds them, quiet_check.cpp the quiet-batch plan and check.
// Internal to codegen/cuda/.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "codegen/cuda/instructions.hpp"
#include "codegen/cuda/kernel_facts.hpp"
#include "codegen/quiet_rows.hpp"

namespace fj::codegen::detail {

struct ColumnScanPlan {
    int batch_rows = 1;  // U: rows per batch (the facts' rows, a multiple of the echo rings' lags with them)
    // Loads (input, row offset within a batch) whose row, when it lies before the pass, no result reads
    // (KernelFacts::pass_only_lag): the batches before out_begin skip them there instead of reading the panel.
    std::set<std::pair<int, int>> pass_only;
    // Echo rings (CudaEmitOptions::echo_rings, plan_echo()).
    std::vector<EchoRing> echo;
    int echo_period = 0;                   // lcm of the lags: the batched loops start a multiple after row_begin
    int echo_stride = 0;                   // doubles of shared memory per thread (odd: no bank conflicts)
    std::vector<bool> echo_live;           // the facts' live where later values come from the rings
    std::set<std::pair<int, int>> echo_loads;  // the facts' loads there
    // Generic one-loop kernels (CudaEmitOptions::one_loop): sticky states whose setting row depends on that
    // row's inputs alone are set by a scan before the loop (plan_presets()), so that the loop treats them as
    // invariants, as the batched loops do; the scan evaluates preset_live.
    bool preset = false;
    std::vector<bool> preset_live;
    struct Preset { int state; std::int32_t valid, value; };
    std::vector<Preset> presets;
    // Quiet batches of the batched loop (quiet_check.cpp, CudaEmitOptions::quiet_batches): the run
    // counters' quiet states; what the check before a batch evaluates (the counters' conditions) and the
    // states it reads, which hold an input's previous value (state -> (input, lag)).
    QuietRows quiet;
    std::vector<bool> quiet_check;
    std::map<int, std::pair<int, int>> quiet_prev;
    bool hints = false;  // L2 eviction hints in the batched loop (CudaEmitOptions::cache_hints)

    CudaColumnScanShape shape() const {
        return {batch_rows, static_cast<int>(echo.size()), echo_stride * static_cast<int>(sizeof(double))};
    }
};

ColumnScanPlan plan_column_scan(const KernelFacts& facts);
// (quiet_check.cpp) The quiet batches' plan, once the echo plan is made.
void plan_quiet_batches(const KernelFacts& facts, ColumnScanPlan& plan);

// The whole translation unit of the column scan.
std::string emit_column_scan(const KernelFacts& facts, const ColumnScanPlan& plan);

class ColumnScanEmitter {
public:
    ColumnScanEmitter(const KernelFacts& facts, const ColumnScanPlan& plan)
        : f_(facts), p_(plan), k_(facts.kernel), o_(facts.options), U_(plan.batch_rows),
          T_(facts.options.dtype == DType::F32 ? "float" : "double"), name_(cuda_kernel_name(facts.kernel)),
          printer_(src_, facts, plan.echo), flags_(raises_flags(facts)),
          pass_flags_(flags_ ? plan_pass_flags(facts, plan.batch_rows) : PassFlags{}) {}
    std::string run();

private:
    // Whether the kernel raises repair flags (ir::flag_refolds; docs/numerics.md): a live Flag instruction.
    static bool raises_flags(const KernelFacts& facts);
    // The end of a tile's pass: its flag raised where a row asked for it; closes the tile loop and the kernel.
    void pass_end();
    template <class... A>
    void line(int indent, fmt::format_string<A...> f, A&&... a) { src_.line(indent, f, std::forward<A>(a)...); }
    // Which rows of a batch may lie outside the panel's pass: none (Inside), those before the panel's
    // first row (First: a pass's first rows), or those from row_end on (Tail: the last, partial batch).
    // Those read as NaN; the pointer is never dereferenced there.
    enum class Rows { Inside, First, Tail };
    void kernel();
    void preset_scan(const RowMode& m);
    std::set<int> l2_prefetched() const;
    void batch_loop_begin(int rows_ahead, const std::set<int>& pf_inputs);
    void l2_prefetch_row(int u, const std::set<int>& pf_inputs);
    void rolling_batches(const RowMode& m);
    enum class Reuse { Later, Never, Again };
    std::map<std::pair<int, int>, Reuse> row_reuse(const std::map<std::pair<int, int>, int>& keys) const;
    void loads(int ind, int rows, Rows where, const RowMode& m);
    void advance(int ind, int rows);
    int echo_slot(std::size_t e, int u) const { return p_.echo[e].offset + u % p_.echo[e].lag; }
    void step(int ind, int u, const RowMode& m);
    void quiet_check(int ind, const RowMode& m);  // (quiet_check.cpp)
    const std::vector<bool>& row_live(const RowMode& m) const { return m.echo == EchoRows::Ring ? p_.echo_live : f_.live; }
    const std::set<std::pair<int, int>>& row_loads(const RowMode& m) const {
        return m.echo == EchoRows::Ring ? p_.echo_loads : f_.loads;
    }
    static std::string load_name(int slot, int off) { return InstructionPrinter::load_name(slot, off); }
    static std::string load_addr(int slot, int off) { return InstructionPrinter::load_addr(slot, off); }
    static std::string row(int u) { return InstructionPrinter::row(u); }

    const KernelFacts& f_;
    const ColumnScanPlan& p_;
    const ir::Kernel& k_;
    const CudaEmitOptions& o_;
    const int U_;
    const char* const T_;
    const std::string name_;
    Source src_;
    InstructionPrinter printer_;
    const bool flags_;
    const PassFlags pass_flags_;  // the flags' tests once a pass, where their conditions allow
};

}  // namespace fj::codegen::detail
