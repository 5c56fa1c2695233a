#include "dsl/op.hpp"

namespace fj {

namespace {
constexpr OpInfo kOps[] = {
#define FJ_OP_ROW(e, name, kind, arity, infix) {Op::e, name, OpKind::kind, arity, infix},
    FJ_OPS(FJ_OP_ROW)
#undef FJ_OP_ROW
};
}  // namespace

const OpInfo& op_info(Op op) { return kOps[static_cast<int>(op)]; }

}  // namespace fj
