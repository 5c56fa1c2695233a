// The form of a refold's condition, for backends that test a guard once over many rows instead of on each row.
//
// A refold's condition (codegen/lower_ops.cpp, class Guards) is `valid AND (b1 > l1 OR b2 > l2 ...)`: each bound b
// a rounding bound E (a state, E := E + size or E + c * size, that only grows while no refold runs) or sums and
// products of such bounds and non-negative parts; each limit l what the results divide by. A backend that only
// needs to know whether the condition held on some row of a group of rows (the CPU backend's visits, the CUDA
// column scan's repair flags) can test each bound once: an upper bound B of b over the group's valid rows against
// the smallest l of those rows (a row with b_r > l_r gives B >= b_r > l_r >= min l, so the group fires wherever a
// row does). B is formed from b's expression (Upper): a rounding bound's last value stands for all rows (it only
// grows), sums and products of non-negative parts take the bounds of their parts, anything else its largest value
// over the valid rows. NaN bounds and limits fire no row and no group (ordered comparisons; the min and max keep
// their accumulator where either is NaN).
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "codegen/kernel_ir.hpp"

namespace fj::codegen {

struct GuardUpper {  // how B is formed from a value of the main body
    enum Kind { Last, Largest, Add, Mul, Fma } kind;
    std::int32_t value = -1;         // Last, Largest: the value
    std::vector<std::int32_t> args;  // Add, Mul, Fma: indices into GuardForm::uppers
    std::int32_t state = -1;         // Last of a rounding bound: the state that stores it (else -1: a constant)
};

struct GuardForm {
    std::int32_t valid = -1;  // -1: every row
    std::vector<GuardUpper> uppers;
    std::vector<std::pair<std::int32_t, std::int32_t>> leaves;  // (B: index into uppers, limit: a value)
};

// The form of the condition `cond` (a Bool value of `body`), or nullopt where it has another form (a backend then
// tests it on every row).
std::optional<GuardForm> guard_form(const std::vector<ir::Inst>& body, std::int32_t cond);

// Where `v` is a rounding bound's new value (E + size, or Fma(size, c, E) with a constant c >= 0) of a state E
// that stores it wherever no refold ran: E's slot, else -1. `size` and `factor` (1 for E + size) are set then.
std::int32_t rounding_bound_state(const std::vector<ir::Inst>& body, std::int32_t v, std::int32_t* size = nullptr,
                                  double* factor = nullptr);

}  // namespace fj::codegen
