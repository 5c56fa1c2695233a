// Repair flags tested once a batch (the CUDA column scan of a kernel from ir::flag_refolds; docs/numerics.md).
//
// A flagging pass only has to tell whether some row's guard held. Where every Flag's condition has the form of
// codegen/guard_form.hpp, the rows keep, per limit, a float32 running minimum (rounded down) over their valid rows,
// and per bound of no other form a running maximum; the end of each whole batch (and the pass's end) forms each
// bound's upper value (a rounding bound E: its state, which only grows) and compares it with them once, then starts
// them afresh. A test per row took NVRTC about 30 more registers in the headline kernel (bench/RESULTS.md); one
// per pass, over 400-row tiles, flagged 15 % of clean float32 passes where the rows' tests flag 1.4 %.
//
// The rounding bounds themselves are a chain of additions a row (E := E + size). Where E's size is a window's sum
// of squares (ir::StateSlot::bound_rows = d >= the batch's rows), the batched loops add d * size on each batch's
// last row only, and d times the sums' state once before them: every term of the rows' windows is then in a
// sampled window and each is in at most d of the rows' windows, so E still bounds what the per-row additions
// would have made it (kernel_ir.hpp). Rows outside the batched loops (a pass's first rows, its last partial
// batch) add their sizes row by row. Generic kernels (a row at a time) test each row as before.
// Internal to codegen/cuda/.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "codegen/cuda/kernel_facts.hpp"
#include "codegen/guard_form.hpp"

namespace fj::codegen::detail {

class Source;

struct PassFlags {
    struct Test {
        std::int32_t flag = -1;  // the Flag instruction
        GuardForm form;
    };
    struct Sampled {
        std::int32_t size = -1;        // the size value added a row
        std::int32_t size_state = -1;  // the state that holds it after a row
        double step = 0;               // factor * bound_rows: what a sample adds times the size
    };
    std::vector<Test> tests;
    std::map<std::int32_t, Sampled> sampled;  // by E's state slot

    bool any() const { return !tests.empty(); }
    const Test* test_of(std::size_t flag) const;
    const Sampled* sampled_state(std::int32_t slot) const;

    // Declarations at a pass's start; the tests (fj_need |= ...) of the rows since the last, which start the next
    // rows' minima and maxima afresh: at the end of each whole batch and of the pass.
    void declare(Source& out, int ind) const;
    void test(Source& out, int ind, const ir::Kernel& k) const;
    // A row's part of test t: `row_ok` is "" or a condition the row must meet too (a tail batch's rows).
    void row(Source& out, int ind, const Test& t, const std::string& row_ok) const;
    // Before the batched loops: each sampled bound takes its sums' state, d times.
    void before_batches(Source& out, int ind) const;

private:
    static bool row_test(const Test& t, std::size_t leaf);
    static bool largest_kept(const Test& t, std::size_t upper);
};

// The pass-level tests of a flagging kernel's live Flags, and the bounds the batched loops of `batch_rows` rows may
// sample (only where every live Flag is tested once a pass and E feeds nothing else).
PassFlags plan_pass_flags(const KernelFacts& facts, int batch_rows);

}  // namespace fj::codegen::detail
