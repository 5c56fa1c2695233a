// Quiet rows: the state of a kernel's run counters in which its results are numbers, and what the rows'
// values are known to be in that state.
//
// Why: corr's kernel counts the rows since a non-finite value (is the window full?) and the rows since each
// input changed (is a window constant?); its results are numbers only where the first count has reached the
// window and the others have not. On most data most rows are like that: no missing value for a window's
// length, and inputs that change from one row to the next. A kernel that knows a whole batch of rows is in
// that state (from the counters' resets, which it gathers anyway) can run those rows with the counters'
// tests, the finiteness tests behind them and the masks those decide as constants, and skip the counters'
// updates: the chained window scan does (chained_scan.cpp). The state is derived from the IR, not assumed
// of the operators that lowered it: from the outputs' NaN gates back to the counters' tests.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "codegen/kernel_ir.hpp"
#include "codegen/state_kinds.hpp"  // RunCounter, CountTest

namespace fj::codegen {

enum class QuietState {
    NoReset,       // no reset on the batch's rows nor on the `clear_rows` rows before them
    ResetEveryRow  // a reset on every row of the batch (its count is 0 on each)
};

struct QuietCounter {
    int state = -1;
    std::int32_t cond = -1;
    QuietState how = QuietState::NoReset;
    int clear_rows = 0;  // NoReset: the rows before the batch that must have no reset
};

struct QuietRows {
    bool ok = false;  // some counter has a quiet state (the others' tests stay as they are)
    std::vector<QuietCounter> counters;
    // Instructions' values on every row of a batch whose counters are all in their quiet states: the
    // counters' tests, their conditions and what those imply (operands of Not, And, Or), and instructions
    // that are one of those read `window` rows back (window_terms.hpp's ShiftedValues).
    std::map<std::int32_t, bool> known;
    // Whether counter `state` has a quiet state here.
    bool has(int state) const;
};

// The quiet state of the counters whose tests decide the kernel's NaN gates (Output of Select(c, x, NaN) or
// Select(c, NaN, x), nested): a count wanted at least C everywhere is quiet when it has no reset for
// max(window, C - 1) rows before a batch and on it; one wanted below C everywhere (C >= 1) when it resets on
// every row. Only counters whose every use is one of `tests` may be given (the others keep their counts);
// a counter wanted both ways is left out, and no quiet state at all (ok false) where the counters' quiet
// states would contradict each other. `window`: the rows back that known values extend to (the split's
// window, or 0); `row_constants` as for split_window_sums.
QuietRows plan_quiet_rows(const ir::Kernel& kernel, const std::vector<RunCounter>& counters,
                          const std::vector<CountTest>& tests, int window, const std::set<std::int32_t>& row_constants);

}  // namespace fj::codegen
