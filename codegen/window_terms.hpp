// Window sums split into what a row adds as it enters the window and what it takes away as it leaves.
//
// Why: a window sum's update s := s + (terms of row t) - (the same terms of row t - w) lets a kernel that
// runs rows in batches of R rows, R dividing w, keep each batch's entering sums and subtract them again,
// whole, w / R batches later, instead of computing every leaving row's terms a second time (the chained
// window scan of bench/proto/chain_corr.cu, about 20 fewer instructions per row for corr than evaluating
// both halves). That is only right when the leaving half is the entering half shifted by w rows, which
// this analysis proves from the kernel IR rather than assuming it of the operators that lowered it.
#pragma once
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "codegen/kernel_ir.hpp"
#include "codegen/state_kinds.hpp"  // WindowSum

namespace fj::codegen {

// sign * a, or sign * a * b when b >= 0 (a product of an Fma); a and b are row values of the IR.
struct SumTerm {
    int sign = 1;
    std::int32_t a = -1, b = -1;
};

struct WindowSplit {
    bool ok = false;
    std::string why_not;
    int window = 0;  // w: each leaving term is an entering term of row t - w, negated
    // Per sum, in the order given: the terms a row adds as it enters (read at lags below w).
    std::vector<std::vector<SumTerm>> entering;
};

// Splits every sum's terms into entering ones (every input read less than w rows back) and leaving ones
// (every input read w or more rows back), and proves each leaving term is an entering one negated and read
// w rows further back: the same instructions with each Input's and RowInPass's lag raised by w, where the
// leaving side may also be masked by RowInPass(t - w) (rows before the pass leave nothing: lowering masks
// them), matched one to one. `row_constants` are instructions that hold one value per column over the
// rows they are compared across (first values, such as the shift of shifted sums); they match only
// themselves. A caller relying on the split also needs those values to be the same on row t - w as on
// row t wherever the terms are not 0 (window_scan.cpp guards the batches where they are not yet set).
WindowSplit split_window_sums(const ir::Kernel& kernel, const std::vector<WindowSum>& sums,
                              const std::set<std::int32_t>& row_constants);

// The proof split_window_sums uses, for any two instructions: whether `later` is `earlier` read w rows
// further back (row by row the same value wherever row t - w was run by the pass), with the same
// `row_constants`, and one w per object (its proofs are kept). For what else knows a value on row t - w
// (quiet_rows.hpp).
class ShiftedValues {
public:
    ShiftedValues(const ir::Kernel& kernel, const std::set<std::int32_t>& row_constants);
    ~ShiftedValues();
    bool shifted(std::int32_t earlier, std::int32_t later, int w);

private:
    class Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace fj::codegen
