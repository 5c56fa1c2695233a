// Printing one instruction of the kernel IR as CUDA C++, for a row of a batch, in the form the kernel's facts
// (kernel_facts.hpp) give it: integers, float32 registers, sticky states as loop invariants, run counters
// kept offset by the row, values read back from echo rings or known in a quiet batch. How the rows being
// printed run (a pass's first rows, the last partial batch, rows that store nothing, a window scan's rows,
// ...) is an argument, RowMode, that the kernel shapes (column_scan.cpp, window_scan.cpp, chained_scan.cpp)
// give each call. Internal to codegen/cuda/.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "codegen/cuda/kernel_facts.hpp"
#include "codegen/cuda/pass_flags.hpp"
#include "codegen/cuda/printing.hpp"
#include "codegen/quiet_rows.hpp"

namespace fj::codegen::detail {

// Echo rings (CudaEmitOptions::echo_rings, the column scan's echo plan): ring k keeps body[earlier] of the last
// `lag` rows at doubles [offset, offset + lag) of this thread's shared memory, row r at slot (r - row_begin)
// % lag; the batched loops read body[later] from there.
// A ring whose earlier value a refold refreshes (kernel_ir.hpp's Refresh) takes its row's value just before
// the first such Refold instruction (`store_at`) instead of after the row, so that the refold's block can
// overwrite it, and the entries of the rows before it, with the recomputed values.
struct EchoRing {
    std::int32_t later, earlier;
    int lag, offset;
    std::int32_t store_at = -1;
};

// Rows being printed: no ring, rows that store their earlier values (a pass's first rows, one slot
// computed per row), or rows of the batched loops (slots known: they read the later values too).
enum class EchoRows { None, Store, Ring };

// How the rows being printed run.
struct RowMode {
    // A pass's first rows: loads before the panel read NaN, RowInPass is tested, outputs are stored only from
    // out_begin on, and sticky states may not be set yet.
    bool guarded = false;
    bool tail = false;           // the pass's last, partial batch: outputs stored below row_end only
    bool no_stores = false;      // rows before out_begin only: outputs not stored
    bool window_scan = false;    // a window scan's rows: stores also test the lane (and row_end when guarded)
    bool stream_stores = false;  // outputs stored with st.global.cs (L2 eviction hints)
    // Sticky states set by a scan before the loop (the column scan's presets): never set by a row.
    bool presets = false;
    EchoRows echo = EchoRows::None;
    const QuietRows* quiet = nullptr;  // a quiet batch's rows: the values known there
    const std::vector<bool>* live = nullptr;  // the instructions emitted for these rows (null: the facts' live)
    // A flagging column scan's tests once a pass (pass_flags.hpp), and the batch row whose sizes its sampled
    // rounding bounds add (-1: every row adds its own).
    const PassFlags* pass_flags = nullptr;
    int sample_u = -1;
};

class InstructionPrinter {
public:
    // `echo`: the column scan's echo rings (empty for the other shapes).
    InstructionPrinter(Source& out, const KernelFacts& facts, const std::vector<EchoRing>& echo)
        : out_(out), f_(facts), k_(facts.kernel), o_(facts.options), T_(facts.options.dtype == DType::F32 ? "float" : "double"),
          echo_(echo) {}

    // Instruction i at batch row u, indented `ind`.
    void inst(int ind, int u, std::size_t i, const RowMode& m);

    // Loads of the rows a batch reads, in the panel's type (a float32 value takes one register until it
    // is used). One load per distinct (input, row offset): delay(A, 1) next to A shares the loads.
    static std::string load_name(int slot, int off) {
        return off >= 0 ? fmt::format("x{}_{}", slot, off) : fmt::format("x{}_m{}", slot, -off);
    }
    static std::string load_addr(int slot, int off) {
        return off == 0 ? fmt::format("in{}[0]", slot) : fmt::format("in{}[{}LL * ld_in{}]", slot, off, slot);
    }
    static std::string row(int u) { return u == 0 ? "t" : fmt::format("(t + {})", u); }
    // A float32 expression with exactly the value of instruction i at batch row u, or "" when there is
    // none: only for float32 panels, and only for inputs, float-exact constants, and abs/neg of those.
    std::string float_exact(std::int32_t i, int u) const;
    // Entry of ring r at a constant lag.
    std::string ring_at(int r, int lag) const;

private:
    template <class... A>
    void line(int indent, fmt::format_string<A...> f, A&&... a) { out_.line(indent, f, std::forward<A>(a)...); }
    std::string rounded(std::int32_t o, int u) const;
    const char* rsqrt_function() const;  // the reciprocal square root RSqrt prints as
    std::string main_value(std::int32_t o) const;
    std::string echo_store(const EchoRing& e, int u, const RowMode& m) const;
    void refold(int ind, int u, std::size_t i, const RowMode& m);
    void refold_inst(int ind, int u, const ir::Refold& r, std::size_t j);
    void store_output(int ind, int u, int slot, const std::string& value, const RowMode& m);
    bool masked_shift(std::size_t i, int u, int ind);
    void int_inst(int ind, int u, std::size_t i, const RowMode& m);

    Source& out_;
    const KernelFacts& f_;
    const ir::Kernel& k_;
    const CudaEmitOptions& o_;
    const char* T_;
    const std::vector<EchoRing>& echo_;
};

}  // namespace fj::codegen::detail
