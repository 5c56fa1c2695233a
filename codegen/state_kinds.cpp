#include "codegen/state_kinds.hpp"

#include <cmath>

namespace fj::codegen {

using ir::Inst;
using ir::Prim;

bool as_count_test(const ir::Kernel& k, std::int32_t use, std::int32_t count, int state, CountTest* test) {
    const Inst& y = k.body[static_cast<std::size_t>(use)];
    if (y.op != Prim::CmpGE && y.op != Prim::CmpGT && y.op != Prim::CmpLT && y.op != Prim::CmpLE) return false;
    if ((y.a == count) == (y.b == count)) return false;
    const bool left = y.a == count;
    const Inst& other = k.body[static_cast<std::size_t>(left ? y.b : y.a)];
    if (other.op != Prim::Const || std::floor(other.imm) != other.imm || std::fabs(other.imm) >= 1e9) return false;
    const int c = static_cast<int>(other.imm);
    // As `count OP c` (a constant on the left mirrors the comparison); count < c <=> !(count >= c).
    Prim op = y.op;
    if (!left) op = op == Prim::CmpGE ? Prim::CmpLE : op == Prim::CmpGT ? Prim::CmpLT : op == Prim::CmpLE ? Prim::CmpGE : Prim::CmpGT;
    *test = {use, state, op == Prim::CmpGE || op == Prim::CmpLT ? c : c + 1, op == Prim::CmpLT || op == Prim::CmpLE};
    return true;
}

}  // namespace fj::codegen
