#include "codegen/lower_ops.hpp"

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include <fmt/format.h>

#include "codegen/ir_builder.hpp"

namespace fj::codegen {

using ir::Prim;

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

bool is_pointwise(const Node* n) {
    static thread_local std::unordered_map<const Node*, bool> cache;
    auto it = cache.find(n);
    if (it != cache.end()) return it->second;
    bool r = !is_windowed(n->op);
    for (const Node* a : n->args) r = r && is_pointwise(a);
    cache.emplace(n, r);
    return r;
}

int halo_of(const Node* n) {
    static thread_local std::unordered_map<const Node*, int> cache;
    auto it = cache.find(n);
    if (it != cache.end()) return it->second;
    int h = 0;
    for (const Node* a : n->args) h = std::max(h, halo_of(a));
    const OpKind kind = op_info(n->op).kind;
    if (kind == OpKind::Window || kind == OpKind::PairWindow) h += n->d - 1;
    if (kind == OpKind::Lag && !is_pointwise(n->args[0])) h += n->d;
    cache.emplace(n, h);
    return h;
}

namespace {

// ---------------------------------------------------------------------------------------------------
// The lowering context. Values are produced on demand, memoised by (node, lag): a pointwise node can
// be evaluated at any lag by re-reading inputs; any other node only at lag 0, and its history comes
// from a ring that is pushed right after the value is computed.
class Lowering {
public:
    Lowering(ir::Kernel& k, const std::vector<const Node*>& roots) : k_(k), ir_(k) {
        for (std::size_t i = 0; i < k.inputs.size(); ++i) input_slot_[k.inputs[i]] = static_cast<int>(i);
        plan_history(roots);
        plan_moment_groups(roots);
    }

    V value(const Node* n, int lag);

    IrBuilder& ir() { return ir_; }

private:
    friend struct OpLowering;
    V lower(const Node* n, int lag);
    V history(const Node* x, int lag);  // x at row t - lag, re-read or from x's ring

    // Window state groups, shared by every reducer over the same window.
    V moments(const Node* n);          // sum, mean, count, var, std
    V pair_moments(const Node* n);     // corr, cov
    V extreme(const Node* n, bool max);  // min, max

    void plan_history(const std::vector<const Node*>& roots);
    void plan_moment_groups(const std::vector<const Node*>& roots);
    std::string label(const Node* n) const;

    ir::Kernel& k_;
    IrBuilder ir_;
    std::unordered_map<std::string, int> input_slot_;
    std::map<std::pair<const Node*, int>, V> values_;
    std::unordered_map<const Node*, int> ring_size_;  // nodes whose history is kept in a ring
    std::unordered_map<const Node*, int> ring_of_;
    std::set<std::pair<const Node*, int>> needs_second_moment_;  // (x, d) windows needing var/std

    struct MomentGroup { V n, s1, s2, shift, is_const; };
    std::map<std::pair<const Node*, int>, MomentGroup> moment_groups_;
    struct PairGroup { V n, sx, sy, sxx, syy, sxy, const_x, const_y; };
    std::map<std::tuple<const Node*, const Node*, int>, PairGroup> pair_groups_;
};

std::string Lowering::label(const Node* n) const {
    std::string s = Expr(n).str();
    return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

// Which nodes need a ring, and how long: a window or delay over a non-pointwise value, and the argument
// of every min/max (their rescans read the whole window).
void Lowering::plan_history(const std::vector<const Node*>& roots) {
    for (const Node* n : topo_order(roots)) {
        auto need = [&](const Node* x, int lag) {
            int& s = ring_size_[x];
            s = std::max(s, lag + 1);
        };
        const OpKind kind = op_info(n->op).kind;
        if (n->op == Op::WMin || n->op == Op::WMax) need(n->args[0], n->d);
        else if (kind == OpKind::Window || kind == OpKind::PairWindow) {
            for (const Node* a : n->args)
                if (!is_pointwise(a)) need(a, n->d);
        } else if (kind == OpKind::Lag && !is_pointwise(n->args[0])) {
            need(n->args[0], n->d);
        }
    }
}

void Lowering::plan_moment_groups(const std::vector<const Node*>& roots) {
    for (const Node* n : topo_order(roots))
        if (n->op == Op::WVar || n->op == Op::WStd) needs_second_moment_.insert({n->args[0], n->d});
}

V Lowering::value(const Node* n, int lag) {
    auto key = std::make_pair(n, lag);
    auto it = values_.find(key);
    if (it != values_.end()) return it->second;
    V v;
    if (lag > 0 && !is_pointwise(n)) {
        v = history(n, lag);
    } else {
        v = lower(n, lag);
        if (lag == 0 && ring_size_.count(n)) {
            int r = ir_.new_ring(ring_size_[n], label(n));
            ring_of_[n] = r;
            ir_.push(r, v);
        }
    }
    values_.emplace(key, v);
    return v;
}

V Lowering::history(const Node* x, int lag) {
    if (is_pointwise(x)) return value(x, lag);
    value(x, 0);  // computes and pushes x for this row
    return ir_.ring_read(ring_of_.at(x), lag);
}

// ---------------------------------------------------------------------------------------------------
// Element-wise operators: NaN rules of SEMANTICS.md, spelled once.
using ElementwiseFn = std::function<V(IrBuilder&, const std::vector<V>&)>;

const std::unordered_map<Op, ElementwiseFn>& elementwise_table() {
    static const std::unordered_map<Op, ElementwiseFn> table = [] {
        std::unordered_map<Op, ElementwiseFn> t;
        auto unary = [](Prim p) { return [p](IrBuilder& b, const std::vector<V>& a) { return b.f(p, a[0]); }; };
        auto binary = [](Prim p) { return [p](IrBuilder& b, const std::vector<V>& a) { return b.f(p, a[0], a[1]); }; };
        auto compare = [](Prim p) {
            return [p](IrBuilder& b, const std::vector<V>& a) { return b.to_f64(b.b(p, a[0], a[1])); };
        };
        // NaN if any operand is NaN, else `v`.
        auto nan_if_any = [](IrBuilder& b, const std::vector<V>& a, V v) {
            V any = b.isnan(a[0]);
            for (std::size_t i = 1; i < a.size(); ++i) any = b.lor(any, b.isnan(a[i]));
            return b.select(any, b.nan(), v);
        };
        auto truth = [](IrBuilder& b, V x) { return b.b(Prim::CmpUNE, x, b.constant(0)); };
        auto sign = [](IrBuilder& b, V x) {
            V zero = b.constant(0);
            V s = b.select(b.b(Prim::CmpGT, x, zero), b.constant(1),
                           b.select(b.lt(x, zero), b.constant(-1), zero));
            return b.select(b.isnan(x), x, s);
        };
        t[Op::Neg] = unary(Prim::Neg);
        t[Op::Abs] = unary(Prim::Abs);
        t[Op::Sqrt] = unary(Prim::Sqrt);
        t[Op::Exp] = unary(Prim::Exp);
        t[Op::Log] = unary(Prim::Log);
        t[Op::Add] = binary(Prim::Add);
        t[Op::Sub] = binary(Prim::Sub);
        t[Op::Mul] = binary(Prim::Mul);
        t[Op::Div] = binary(Prim::Div);
        t[Op::Pow] = binary(Prim::Pow);
        t[Op::Lt] = compare(Prim::CmpLT);
        t[Op::Le] = compare(Prim::CmpLE);
        t[Op::Gt] = compare(Prim::CmpGT);
        t[Op::Ge] = compare(Prim::CmpGE);
        t[Op::Eq] = compare(Prim::CmpEQ);
        t[Op::Ne] = compare(Prim::CmpUNE);
        t[Op::Sign] = [sign](IrBuilder& b, const std::vector<V>& a) { return sign(b, a[0]); };
        t[Op::SignedPower] = [sign](IrBuilder& b, const std::vector<V>& a) {
            return b.mul(sign(b, a[0]), b.f(Prim::Pow, b.f(Prim::Abs, a[0]), a[1]));
        };
        t[Op::Min] = [nan_if_any](IrBuilder& b, const std::vector<V>& a) {
            return nan_if_any(b, a, b.select(b.lt(a[1], a[0]), a[1], a[0]));
        };
        t[Op::Max] = [nan_if_any](IrBuilder& b, const std::vector<V>& a) {
            return nan_if_any(b, a, b.select(b.lt(a[0], a[1]), a[1], a[0]));
        };
        t[Op::Not] = [nan_if_any, truth](IrBuilder& b, const std::vector<V>& a) {
            return nan_if_any(b, a, b.to_f64(b.lnot(truth(b, a[0]))));
        };
        t[Op::And] = [nan_if_any, truth](IrBuilder& b, const std::vector<V>& a) {
            return nan_if_any(b, a, b.to_f64(b.land(truth(b, a[0]), truth(b, a[1]))));
        };
        t[Op::Or] = [nan_if_any, truth](IrBuilder& b, const std::vector<V>& a) {
            return nan_if_any(b, a, b.to_f64(b.lor(truth(b, a[0]), truth(b, a[1]))));
        };
        t[Op::Where] = [truth](IrBuilder& b, const std::vector<V>& a) {
            return b.select(b.isnan(a[0]), b.nan(), b.select(truth(b, a[0]), a[1], a[2]));
        };
        return t;
    }();
    return table;
}

V Lowering::lower(const Node* n, int lag) {
    switch (op_info(n->op).kind) {
    case OpKind::Leaf:
        if (n->op == Op::Const) return ir_.constant(n->value);
        return ir_.input(input_slot_.at(n->name), lag);
    case OpKind::Elementwise: {
        std::vector<V> args;
        for (const Node* a : n->args) args.push_back(value(a, lag));
        return elementwise_table().at(n->op)(ir_, args);
    }
    case OpKind::Lag: return value(n->args[0], lag + n->d);  // pointwise: re-read; else ring (history)
    case OpKind::Window:
        if (n->op == Op::WMin || n->op == Op::WMax) return extreme(n, n->op == Op::WMax);
        return moments(n);
    case OpKind::PairWindow: return pair_moments(n);
    }
    throw BackendError(fmt::format("lowering: operator {} has no lowering", op_name(n->op)));
}

// ---------------------------------------------------------------------------------------------------
// Constancy tracker. A window's valid values are all equal iff no "change" (a valid value different from
// the previous valid value) happened with that previous value inside the window. Only the latest change
// matters, so the state is: the previous valid value and its row, and the row of the value before the
// latest change. This gives var = 0 and corr = NaN exactly on constant windows, whatever rounding the
// running sums carry: the relative zero test of DESIGN.md, made exact.
V constancy(IrBuilder& ir, V x, V valid, V t, int d, const std::string& what) {
    int prev = ir.new_state(std::numeric_limits<double>::quiet_NaN(), "previous valid " + what);
    int prev_row = ir.new_state(-kInf, "row of previous valid " + what);
    int before_change = ir.new_state(-kInf, "row before last change of " + what);
    V p = ir.load(prev), pr = ir.load(prev_row), bc = ir.load(before_change);
    V changed = ir.b(Prim::CmpONE, x, p);  // false when either is NaN
    V bc1 = ir.select(changed, pr, bc);
    ir.store(before_change, bc1);
    ir.store(prev, ir.select(valid, x, p));
    ir.store(prev_row, ir.select(valid, t, pr));
    return ir.lt(bc1, ir.sub(t, ir.constant(d - 1)));
}

// Running shifted sums. The shift (the first valid value of the pass) keeps the sums small for
// price-like data, so float64 moments lose little to cancellation; each pass (time tile) re-seeds it.
struct Accumulator {
    IrBuilder& ir;
    V in_valid, out_valid;
    V add(int slot, V in, V out) {
        V zero = ir.constant(0);
        V delta = ir.sub(ir.select(in_valid, in, zero), ir.select(out_valid, out, zero));
        V s = ir.add(ir.load(slot), delta);
        ir.store(slot, s);
        return s;
    }
};

V shifted(IrBuilder& ir, int slot, V x, V valid) {
    V s = ir.load(slot);
    V s1 = ir.select(ir.land(ir.isnan(s), valid), x, s);
    ir.store(slot, s1);
    return s1;
}

V at_least(IrBuilder& ir, V n, int m) { return ir.b(Prim::CmpGE, n, ir.constant(m)); }

V Lowering::moments(const Node* node) {
    const Node* x = node->args[0];
    const int d = node->d;
    auto key = std::make_pair(x, d);
    auto it = moment_groups_.find(key);
    if (it == moment_groups_.end()) {
        const std::string what = fmt::format("window({}, {})", label(x), d);
        const bool second = needs_second_moment_.count(key) > 0;
        V xv = value(x, 0);
        V leave = history(x, d);
        V in_valid = ir_.notnan(xv);
        V out_valid = ir_.land(ir_.row_in_pass(d), ir_.notnan(leave));
        V shift = shifted(ir_, ir_.new_state(std::numeric_limits<double>::quiet_NaN(), "shift " + what), xv, in_valid);
        V yin = ir_.sub(xv, shift), yout = ir_.sub(leave, shift);
        Accumulator acc{ir_, in_valid, out_valid};
        MomentGroup g{};
        g.shift = shift;
        g.n = acc.add(ir_.new_state(0, "n " + what), ir_.constant(1), ir_.constant(1));
        g.s1 = acc.add(ir_.new_state(0, "sum " + what), yin, yout);
        if (second) {
            g.s2 = acc.add(ir_.new_state(0, "sum of squares " + what), ir_.mul(yin, yin), ir_.mul(yout, yout));
            g.is_const = constancy(ir_, xv, in_valid, ir_.row(), d, what);
        }
        it = moment_groups_.emplace(key, g).first;
    }
    const MomentGroup& g = it->second;
    const int minp = node->min_periods;
    V nan = ir_.nan(), zero = ir_.constant(0);
    switch (node->op) {
    case Op::WCount: return g.n;
    case Op::WSum: {
        V s = ir_.select(at_least(ir_, g.n, 1), ir_.add(g.s1, ir_.mul(g.n, g.shift)), zero);
        return ir_.select(at_least(ir_, g.n, minp), s, nan);
    }
    case Op::WMean:
        return ir_.select(at_least(ir_, g.n, std::max(minp, 1)), ir_.add(g.shift, ir_.mul(g.s1, ir_.f(Prim::Recip, g.n))), nan);
    case Op::WVar:
    case Op::WStd: {
        V m2 = ir_.sub(g.s2, ir_.mul(ir_.mul(g.s1, g.s1), ir_.f(Prim::Recip, g.n)));
        V var = ir_.mul(ir_.select(ir_.lt(zero, m2), m2, zero), ir_.f(Prim::Recip, ir_.sub(g.n, ir_.constant(1))));
        var = ir_.select(g.is_const, zero, var);
        V r = node->op == Op::WStd ? ir_.f(Prim::Sqrt, var) : var;
        return ir_.select(at_least(ir_, g.n, std::max(minp, 2)), r, nan);
    }
    default: break;
    }
    throw BackendError(fmt::format("lowering: {} is not a moment reducer", op_name(node->op)));
}

V Lowering::pair_moments(const Node* node) {
    const Node* x = node->args[0];
    const Node* y = node->args[1];
    const int d = node->d;
    auto key = std::make_tuple(x, y, d);
    auto it = pair_groups_.find(key);
    if (it == pair_groups_.end()) {
        const std::string what = fmt::format("window({}, {}) x window({}, {})", label(x), d, label(y), d);
        V xv = value(x, 0), yv = value(y, 0);
        V lx = history(x, d), ly = history(y, d);
        V in_valid = ir_.land(ir_.notnan(xv), ir_.notnan(yv));
        V out_valid = ir_.land(ir_.row_in_pass(d), ir_.land(ir_.notnan(lx), ir_.notnan(ly)));
        const double qnan = std::numeric_limits<double>::quiet_NaN();
        V shx = shifted(ir_, ir_.new_state(qnan, "shift x " + what), xv, in_valid);
        V shy = shifted(ir_, ir_.new_state(qnan, "shift y " + what), yv, in_valid);
        V xi = ir_.sub(xv, shx), xo = ir_.sub(lx, shx);
        V yi = ir_.sub(yv, shy), yo = ir_.sub(ly, shy);
        Accumulator acc{ir_, in_valid, out_valid};
        PairGroup g{};
        g.n = acc.add(ir_.new_state(0, "n " + what), ir_.constant(1), ir_.constant(1));
        g.sx = acc.add(ir_.new_state(0, "sum x " + what), xi, xo);
        g.sy = acc.add(ir_.new_state(0, "sum y " + what), yi, yo);
        g.sxy = acc.add(ir_.new_state(0, "sum xy " + what), ir_.mul(xi, yi), ir_.mul(xo, yo));
        // Pair keys are per (x, y, d): corr and cov of the same windows share one group, so the
        // second-moment sums are built when the group is; LLVM and NVRTC drop them if only cov reads them.
        g.sxx = acc.add(ir_.new_state(0, "sum xx " + what), ir_.mul(xi, xi), ir_.mul(xo, xo));
        g.syy = acc.add(ir_.new_state(0, "sum yy " + what), ir_.mul(yi, yi), ir_.mul(yo, yo));
        V t = ir_.row();
        V xin = ir_.select(in_valid, xv, ir_.nan()), yin = ir_.select(in_valid, yv, ir_.nan());
        g.const_x = constancy(ir_, xin, in_valid, t, d, "x " + what);
        g.const_y = constancy(ir_, yin, in_valid, t, d, "y " + what);
        it = pair_groups_.emplace(key, g).first;
    }
    const PairGroup& g = it->second;
    V nan = ir_.nan(), zero = ir_.constant(0);
    V enough = at_least(ir_, g.n, std::max(node->min_periods, 2));
    // Divisions and square roots cost more than the rest of the update together on a CPU: use
    // reciprocal estimates refined to a few ulp, on values the selects below keep away from 0 and NaN.
    V inv_n = ir_.f(Prim::Recip, g.n);
    V cxy = ir_.sub(g.sxy, ir_.mul(ir_.mul(g.sx, g.sy), inv_n));
    if (node->op == Op::WCov)
        return ir_.select(enough, ir_.mul(cxy, ir_.f(Prim::Recip, ir_.sub(g.n, ir_.constant(1)))), nan);
    V vx = ir_.sub(g.sxx, ir_.mul(ir_.mul(g.sx, g.sx), inv_n));
    V vy = ir_.sub(g.syy, ir_.mul(ir_.mul(g.sy, g.sy), inv_n));
    V r = ir_.mul(cxy, ir_.f(Prim::RSqrt, ir_.mul(vx, vy)));
    V one = ir_.constant(1), minus_one = ir_.constant(-1);
    r = ir_.select(ir_.lt(one, r), one, ir_.select(ir_.lt(r, minus_one), minus_one, r));
    V degenerate = ir_.lor(ir_.lor(g.const_x, g.const_y),
                           ir_.lor(ir_.b(Prim::CmpLE, vx, zero), ir_.b(Prim::CmpLE, vy, zero)));
    return ir_.select(ir_.land(enough, ir_.lnot(degenerate)), r, nan);
}

// Window min/max: the current extreme and its row; a new value that ties or beats it replaces it (the
// newest tie lives longest); when the extreme leaves the window, the window is rescanned from the ring.
// Rescans cost O(d) but are rare on real data (about once per d rows for a random series).
V Lowering::extreme(const Node* node, bool is_max) {
    const Node* x = node->args[0];
    const int d = node->d;
    const std::string what = fmt::format("{}(window({}, {}))", is_max ? "max" : "min", label(x), d);
    V xv = value(x, 0);
    const int ring = ring_of_.at(x);
    V leave = ir_.ring_read(ring, d);
    V in_valid = ir_.notnan(xv);
    Accumulator acc{ir_, in_valid, ir_.notnan(leave)};
    V n = acc.add(ir_.new_state(0, "n " + what), ir_.constant(1), ir_.constant(1));
    int cur_slot = ir_.new_state(std::numeric_limits<double>::quiet_NaN(), "extreme " + what);
    int row_slot = ir_.new_state(-kInf, "row of extreme " + what);
    V cur = ir_.load(cur_slot), cur_row = ir_.load(row_slot), t = ir_.row();
    V beats = is_max ? ir_.b(Prim::CmpGE, xv, cur) : ir_.le(xv, cur);
    V better = ir_.land(in_valid, ir_.lor(ir_.isnan(cur), beats));
    V cur1 = ir_.select(better, xv, cur);
    V row1 = ir_.select(better, t, cur_row);
    V expired = ir_.land(ir_.notnan(cur1), ir_.le(row1, ir_.sub(t, ir_.constant(d))));
    V lag = ir_.ring_arg_ext(ring, expired, d, is_max);
    V cur2 = ir_.select(expired, ir_.ring_read_dyn(ring, lag), cur1);
    V row2 = ir_.select(expired, ir_.sub(t, lag), row1);
    ir_.store(cur_slot, cur2);
    ir_.store(row_slot, row2);
    return ir_.select(at_least(ir_, n, std::max(node->min_periods, 1)), cur2, ir_.nan());
}

}  // namespace

void lower_region(const std::vector<const Node*>& roots, ir::Kernel& kernel) {
    Lowering l(kernel, roots);
    std::vector<V> outs;
    for (const Node* r : roots) outs.push_back(l.value(r, 0));
    for (std::size_t i = 0; i < outs.size(); ++i) l.ir().output(static_cast<int>(i), outs[i]);
    int halo = 0;
    for (const Node* r : roots) halo = std::max(halo, halo_of(r));
    kernel.halo = halo;
}

}  // namespace fj::codegen
