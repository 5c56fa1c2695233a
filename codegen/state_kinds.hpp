// The kinds of state a kernel's IR keeps, recognised from the shape of each state's one store: what every
// kernel shape (the CUDA column scan, window scan and chained scan) and the quiet-row analysis
// (quiet_rows.hpp) say about a state, in one set of types. Backend-neutral: indices into ir::Kernel.
#pragma once
#include <cstdint>

#include "codegen/kernel_ir.hpp"

namespace fj::codegen {

// A window sum: s := s + (row terms), its one StoreState storing `root`, a chain of Add / Sub / Fma onto its
// load (window_terms.hpp splits the terms into entering and leaving ones).
struct WindowSum {
    int state = -1;
    std::int32_t root = -1;
};

// A run counter: s := cond ? 0 : s + 1 (rows since a change, since an invalid value), with `count` the
// instruction of its new value (the select).
struct RunCounter {
    int state = -1;
    std::int32_t count = -1, cond = -1;
};

// A sticky value (a first value, the shift of window sums): NaN until a row sets it, s := isnan(s) && cond ?
// value : s, with `select` that select.
struct StickyValue {
    int state = -1;
    std::int32_t select = -1, cond = -1, value = -1;
};

// A previous value: s := input[t - lag], read on the next row.
struct PrevValue {
    int state = -1;
    int input = -1, lag = 0;
};

// A test of a run counter's count against a constant: compare = (count >= at_least) != negate.
struct CountTest {
    std::int32_t compare = -1;
    int state = -1;
    int at_least = 0;
    bool negate = false;
};

// Whether instruction `use` compares counter `state`'s count (instruction `count`) with an integer
// constant, and as what test (compare = use); the constant may stand on either side.
bool as_count_test(const ir::Kernel& kernel, std::int32_t use, std::int32_t count, int state, CountTest* test);

}  // namespace fj::codegen
