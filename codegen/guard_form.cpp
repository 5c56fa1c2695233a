#include "codegen/guard_form.hpp"

namespace fj::codegen {

using ir::Prim;

namespace {

class GuardAnalysis {
public:
    explicit GuardAnalysis(const std::vector<ir::Inst>& body) : body_(body) {}
    std::optional<GuardForm> form(std::int32_t cond) {
        const ir::Inst& c = at(cond);
        if (leaves(cond)) return g_;
        if (c.op == Prim::And) {
            for (auto [test, valid] : {std::pair{c.a, c.b}, std::pair{c.b, c.a}}) {
                g_ = GuardForm{};
                if (leaves(test)) {
                    g_.valid = valid;
                    return g_;
                }
            }
        }
        return std::nullopt;
    }

private:
    const ir::Inst& at(std::int32_t i) const { return body_[static_cast<std::size_t>(i)]; }
    bool leaves(std::int32_t v) {
        const ir::Inst& x = at(v);
        if (x.op == Prim::CmpGT) {
            g_.leaves.push_back({upper(x.a), x.b});
            return true;
        }
        return x.op == Prim::Or && leaves(x.a) && leaves(x.b);
    }
    bool constant(std::int32_t v) const { return at(v).op == Prim::Const && at(v).imm >= 0; }
    std::int32_t grows(std::int32_t v) const { return rounding_bound_state(body_, v); }
    bool nonnegative(std::int32_t v) const {
        const ir::Inst& x = at(v);
        switch (x.op) {
        case Prim::Abs: return true;
        case Prim::Const: return x.imm >= 0;
        case Prim::Add: case Prim::Mul: return grows(v) >= 0 || (nonnegative(x.a) && nonnegative(x.b));
        case Prim::Fma: return grows(v) >= 0 || (nonnegative(x.a) && nonnegative(x.b) && nonnegative(x.c));
        default: return false;
        }
    }
    std::int32_t add(GuardUpper u) {
        g_.uppers.push_back(std::move(u));
        return static_cast<std::int32_t>(g_.uppers.size() - 1);
    }
    bool holds_bound(std::int32_t v) const {  // a rounding bound, or an Add, Mul or Fma of one
        const ir::Inst& x = at(v);
        if (grows(v) >= 0) return true;
        if (x.op == Prim::Add || x.op == Prim::Mul) return holds_bound(x.a) || holds_bound(x.b);
        return x.op == Prim::Fma && (holds_bound(x.a) || holds_bound(x.b) || holds_bound(x.c));
    }
    std::int32_t upper(std::int32_t v) {
        const ir::Inst& x = at(v);
        if (const std::int32_t e = grows(v); e >= 0) return add({GuardUpper::Last, v, {}, e});
        if (x.op == Prim::Const) return add({GuardUpper::Last, v, {}});
        if (!holds_bound(v)) return add({GuardUpper::Largest, v, {}});
        // (monotone in each part: a product's factors not negative)
        if (x.op == Prim::Add) return add({GuardUpper::Add, -1, {upper(x.a), upper(x.b)}});
        if (x.op == Prim::Mul && nonnegative(x.a) && nonnegative(x.b)) return add({GuardUpper::Mul, -1, {upper(x.a), upper(x.b)}});
        if (x.op == Prim::Fma && ((nonnegative(x.a) && nonnegative(x.b)) || constant(x.b)))
            return add({GuardUpper::Fma, -1, {upper(x.a), upper(x.b), upper(x.c)}});
        return add({GuardUpper::Largest, v, {}});
    }
    const std::vector<ir::Inst>& body_;
    GuardForm g_;
};

}  // namespace

std::optional<GuardForm> guard_form(const std::vector<ir::Inst>& body, std::int32_t cond) {
    return GuardAnalysis(body).form(cond);
}

std::int32_t rounding_bound_state(const std::vector<ir::Inst>& body, std::int32_t v, std::int32_t* size, double* factor) {
    auto at = [&](std::int32_t i) -> const ir::Inst& { return body[static_cast<std::size_t>(i)]; };
    const ir::Inst& x = at(v);
    std::int32_t load = -1, sz = -1;
    double k = 1.0;
    if (x.op == Prim::Add) {
        if (at(x.a).op == Prim::LoadState) load = x.a, sz = x.b;
        else if (at(x.b).op == Prim::LoadState) load = x.b, sz = x.a;
    }
    if (x.op == Prim::Fma && at(x.b).op == Prim::Const && at(x.b).imm >= 0 && at(x.c).op == Prim::LoadState)
        load = x.c, sz = x.a, k = at(x.b).imm;
    if (load < 0) return -1;
    const std::int32_t slot = at(load).slot;
    bool stored = false;
    for (const ir::Inst& y : body) {
        if (y.op != Prim::StoreState || y.slot != slot) continue;
        std::int32_t w = y.a;
        while (at(w).op == Prim::RefoldValue) w = at(w).a;
        if (w != v) return -1;
        stored = true;
    }
    if (!stored) return -1;
    if (size) *size = sz;
    if (factor) *factor = k;
    return slot;
}

}  // namespace fj::codegen
