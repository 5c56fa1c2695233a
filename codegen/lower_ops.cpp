#include "codegen/lower_ops.hpp"

#include <algorithm>
#include <cmath>
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
    bool r = !is_windowed(n->op) && op_info(n->op).kind != OpKind::Recursive;
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
    if (kind == OpKind::Recursive) h = kSequentialHalo;
    h = std::min(h, kSequentialHalo);
    cache.emplace(n, h);
    return h;
}

namespace {

struct Dd {  // a double-double value, or a plain double when lo < 0
    V hi, lo = -1;
};

// ---------------------------------------------------------------------------------------------------
// The lowering context. Values are produced on demand, memoised by (node, lag): a pointwise node can
// be evaluated at any lag by re-reading inputs; any other node only at lag 0, and its history comes
// from a ring that is pushed right after the value is computed.
class Lowering {
public:
    Lowering(ir::Kernel& k, const std::vector<const Node*>& roots, bool exact, double tolerance)
        : k_(k), ir_(k), exact_(exact), tolerance_(tolerance) {
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
    // The time-series operators of Alpha101 (after extreme() below).
    V arg_extreme(const Node* n, bool max);  // argmin, argmax
    V ts_rank(const Node* n);
    V product(const Node* n);
    V decay_linear(const Node* n);
    // The rest of docs/operators.md's time-series operators (skew and kurt are in moments()).
    V regression(const Node* n);        // slope, rsquare, resid
    V order_statistic(const Node* n);   // median, quantile
    V ema(const Node* n);
    struct WindowCount { V n, before; };   // valid rows in the window, this row and the row before
    WindowCount window_count(const Node* x, int d);
    struct BlockCombine;
    std::vector<V> window_blocks(const std::vector<V>& leaf, int d, const BlockCombine& how, const std::string& what);
    V at_refold_lag(IrBuilder& part, const Node* x, int lag, std::map<std::pair<const Node*, int>, V>& memo);
    V last_finite(V x, V finite, const std::string& what);

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
    std::set<std::pair<const Node*, int>> needs_sum_;            // (x, d) windows needing sum/mean
    std::set<std::pair<const Node*, int>> needs_third_;          // (x, d) windows needing skew or kurt
    std::set<std::pair<const Node*, int>> needs_fourth_;         // (x, d) windows needing kurt
    std::set<std::pair<const Node*, int>> needs_r2_;             // (x, d) regressions needing rsquare
    std::set<std::pair<const Node*, int>> read_by_window_;       // (x, d) whose sum or mean another window reads

    struct MomentGroup {
        V n, finite, infinities, signed_infinities = -1, shift, s1v, m2n = -1, is_const = -1;
        V m3 = -1, m4 = -1;  // (skew, kurt: centred_higher_moments)
        Dd s1, s2;
        bool exact_terms = false;  // s1 holds the sum of exact terms x - shift (read_by_window_): sum and mean from it
    };
    struct RegressionGroup { V n, nf, sj, cjj, cjy, cyy, sy, shift, is_const; };
    std::map<std::pair<const Node*, int>, RegressionGroup> regression_groups_;
    std::map<std::pair<const Node*, int>, std::vector<V>> sorted_windows_;  // order statistics' sorted values
    std::map<std::pair<const Node*, int>, MomentGroup> moment_groups_;
    struct PairGroup { V n, infinities, cxy, vx = -1, vy = -1, const_x = -1, const_y = -1; bool full = false; };
    std::map<std::tuple<const Node*, const Node*, int>, PairGroup> pair_groups_;
    std::set<std::tuple<const Node*, const Node*, int>> needs_corr_;  // pairs whose variances are needed
    // Groups with a consumer whose min_periods is below d. The others only ever answer for windows whose
    // d rows are all valid and finite, which needs one count and a simpler constancy tracker.
    std::set<std::pair<const Node*, int>> partial_;
    std::set<std::tuple<const Node*, const Node*, int>> partial_pairs_;
    bool exact_ = false;  // double-double sums (float64 panels)
    double tolerance_ = 0;  // relative error of the sums' results at which a refold rebuilds them
    std::map<std::pair<const Node*, int>, WindowCount> window_counts_;  // shared by the operators after extreme()
    std::map<std::pair<const Node*, int>, V> rank_sums_;  // ts_rank's 2 * rank * n, shared across min_periods
};

std::string Lowering::label(const Node* n) const {
    std::string s = Expr(n).str();
    return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

// Which nodes need a ring, and how long: a window or delay over a non-pointwise value.
void Lowering::plan_history(const std::vector<const Node*>& roots) {
    for (const Node* n : topo_order(roots)) {
        auto need = [&](const Node* x, int lag) {
            int& s = ring_size_[x];
            s = std::max(s, lag + 1);
        };
        const OpKind kind = op_info(n->op).kind;
        if (kind == OpKind::Window || kind == OpKind::PairWindow) {
            for (const Node* a : n->args)
                if (!is_pointwise(a)) need(a, n->d);
        } else if (kind == OpKind::Lag && !is_pointwise(n->args[0])) {
            need(n->args[0], n->d);
        }
    }
}

void Lowering::plan_moment_groups(const std::vector<const Node*>& roots) {
    for (const Node* n : topo_order(roots)) {
        if (n->op == Op::WVar || n->op == Op::WStd) needs_second_moment_.insert({n->args[0], n->d});
        if (n->op == Op::WCorr) needs_corr_.insert({n->args[0], n->args[1], n->d});
        if (n->op == Op::WSum || n->op == Op::WMean) needs_sum_.insert({n->args[0], n->d});
        if (n->op == Op::WSkew || n->op == Op::WKurt) {
            needs_second_moment_.insert({n->args[0], n->d});
            needs_third_.insert({n->args[0], n->d});
        }
        if (n->op == Op::WKurt) needs_fourth_.insert({n->args[0], n->d});
        if (n->op == Op::WRSquare) needs_r2_.insert({n->args[0], n->d});
        // Count, sum and mean keep NaN and infinity counts apart (a window with +inf sums to +inf).
        const bool partial = n->min_periods < n->d || n->op == Op::WCount || n->op == Op::WSum || n->op == Op::WMean;
        const bool moment_op = n->op == Op::WSum || n->op == Op::WMean || n->op == Op::WCount || n->op == Op::WVar ||
                               n->op == Op::WStd || n->op == Op::WSkew || n->op == Op::WKurt;
        if (partial && moment_op) partial_.insert({n->args[0], n->d});
        if (partial && op_info(n->op).kind == OpKind::PairWindow) partial_pairs_.insert({n->args[0], n->args[1], n->d});
    }
    // Sums and means that another window reads, through pointwise operators and delays: the outer window's var,
    // std and corr divide by the spread of these values over its rows, which may be far below their magnitude
    // (a mean of prices at 100 +- 1e-4), so their rounding must stay near that of the values themselves.
    std::set<const Node*> seen;
    std::function<void(const Node*)> mark = [&](const Node* a) {
        if (!seen.insert(a).second) return;
        const OpKind kind = op_info(a->op).kind;
        if (a->op == Op::WSum || a->op == Op::WMean) read_by_window_.insert({a->args[0], a->d});
        if (kind == OpKind::Elementwise || kind == OpKind::Lag)
            for (const Node* b : a->args) mark(b);
    };
    for (const Node* n : topo_order(roots)) {
        const OpKind kind = op_info(n->op).kind;
        if (kind == OpKind::Window || kind == OpKind::PairWindow)
            for (const Node* a : n->args) mark(a);
    }
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
// Element-wise operators: NaN rules of docs/operators.md, spelled once.
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
        switch (n->op) {
        case Op::WMin:
        case Op::WMax: return extreme(n, n->op == Op::WMax);
        case Op::WArgMin:
        case Op::WArgMax: return arg_extreme(n, n->op == Op::WArgMax);
        case Op::WTsRank: return ts_rank(n);
        case Op::WProduct: return product(n);
        case Op::WDecayLinear: return decay_linear(n);
        case Op::WSlope:
        case Op::WRSquare:
        case Op::WResid: return regression(n);
        case Op::WMedian:
        case Op::WQuantile: return order_statistic(n);
        default: return moments(n);
        }
    case OpKind::PairWindow: return pair_moments(n);
    case OpKind::Recursive: return ema(n);
    case OpKind::CrossSection: break;  // row steps, never in a kernel (the planner cuts them out)
    }
    throw BackendError(fmt::format("lowering: operator {} has no lowering", op_name(n->op)));
}

// ---------------------------------------------------------------------------------------------------
// Constancy tracker. A window's valid values are all equal iff no "change" (a valid value different from
// the previous valid value) happened with that previous value inside the window. Only the latest change
// matters, so the state is: the previous valid value and its row, and the row of the value before the
// latest change. This gives var = 0 and corr = NaN exactly on constant windows, whatever rounding the
// running sums carry: a relative zero test (the design's first idea) made exact.
V constancy(IrBuilder& ir, V x, V valid, V t, int d, const std::string& what) {
    int prev = ir.new_state(std::numeric_limits<double>::quiet_NaN(), "previous valid " + what);
    int prev_row = ir.new_state(-kInf, "row of previous valid " + what);
    int before_change = ir.new_state(-kInf, "row before last change of " + what);
    V p = ir.load(prev), pr = ir.load(prev_row), bc = ir.load(before_change);
    V changed = ir.land(valid, ir.b(Prim::CmpONE, x, p));  // CmpONE is false when either is NaN
    V bc1 = ir.select(changed, pr, bc);
    ir.store(before_change, bc1);
    ir.store(prev, ir.select(valid, x, p));
    ir.store(prev_row, ir.select(valid, t, pr));
    return ir.lt(bc1, ir.sub(t, ir.constant(d - 1)));
}

// Rows since `reset` last held (or since the pass's start; 0 on a reset row): a small integer state of the
// one shape `reset ? 0 : s + 1`, which backends keep in an integer register and the CUDA emitter as a run
// counter (codegen/cuda/emit.cpp, run_counters()).
V rows_since(IrBuilder& ir, V reset, const std::string& what) {
    int since = ir.new_state(0, "rows since " + what);
    V s = ir.select(reset, ir.constant(0), ir.add(ir.load(since), ir.constant(1)));
    ir.store(since, s);
    return s;
}

// The same for groups that only answer on full windows (d valid values): a window with a NaN is NaN
// anyway, so every row counts, NaN rows as changes. The state is the previous row's value and the rows
// since the last change (a small integer, which backends keep in an integer register); the window
// t-d+1 .. t is constant iff none of its last d-1 rows changed.
V constancy_full(IrBuilder& ir, V x, int d, const std::string& what) {
    int prev = ir.new_state(std::numeric_limits<double>::quiet_NaN(), "previous " + what);
    V changed = ir.b(Prim::CmpUNE, x, ir.load(prev));  // true when either is NaN
    V s = rows_since(ir, changed, "a change of " + what);
    ir.store(prev, x);
    return ir.b(Prim::CmpGE, s, ir.constant(d - 1));
}

// For groups that only answer on full windows: the rows since the last non-finite one, so that
// `run >= d` says the window's d rows are all finite. A count of the finite rows in the window says the
// same for d >= 2 but adds the row entering and subtracts the one leaving (two selects and two adds per
// row instead of one select; a run counter is also a select of a constant on a GPU).
V finite_run(IrBuilder& ir, V finite, const std::string& what) { return rows_since(ir, ir.lnot(finite), "a non-finite " + what); }

// Double-double arithmetic on IR values, in whichever builder needs it (the running sums of a kernel's body,
// a refold's epilogue): exact products by FMA, TwoSum, and the centred moment n*a - b*c.
struct DdMath {
    IrBuilder& ir;
    bool exact;

    Dd product(V a, V b) {
        V p = ir.mul(a, b);
        if (!exact) return {p, -1};
        return {p, ir.f(Prim::Fma, a, b, ir.f(Prim::Neg, p))};  // a*b - p exactly
    }
    // (s, e) with s + e == a + b exactly.
    std::pair<V, V> two_sum(V a, V b) {
        V sum = ir.add(a, b);
        V bb = ir.sub(sum, a);
        V err = ir.add(ir.sub(a, ir.sub(sum, bb)), ir.sub(b, bb));
        return {sum, err};
    }
    // n*a - b*c (the centred second moment times n), accurate where the terms cancel.
    V centred(V n, Dd a, Dd b, Dd c) {
        if (!exact) return ir.f(Prim::Fma, n, a.hi, ir.f(Prim::Neg, ir.mul(b.hi, c.hi)));
        Dd q = product(n, a.hi);
        Dd p = product(b.hi, c.hi);
        V q_lo = ir.add(q.lo, ir.mul(n, a.lo));
        V p_lo = ir.add(p.lo, ir.add(ir.mul(b.hi, c.lo), ir.mul(b.lo, c.hi)));
        return ir.add(ir.sub(q.hi, p.hi), ir.sub(q_lo, p_lo));
    }
    V value(Dd s) { return exact ? ir.add(s.hi, s.lo) : s.hi; }
    // a - b as hi + lo exactly (TwoSum of a and -b): a window's term x - shift where its rounding must not count.
    Dd difference(V a, V b) {
        auto [hi, lo] = two_sum(a, ir.f(Prim::Neg, b));
        return {hi, lo};
    }
    // s + a / n rounded once, but for a few units of u^2 |a / n|: where s lies far from the values (a / n near -s)
    // the plain s + a.hi / n would round by u |a / n|, far more than u |s + a / n|. (q is within a few ulp of
    // a.hi / n, so the fused remainder a.hi - q n is exact but for u |a.hi| times a few u.)
    V plus_quotient(V s, Dd a, V n) {
        V inv = ir.f(Prim::Recip, n);
        V q = ir.mul(a.hi, inv);
        V r = ir.add(ir.f(Prim::Fma, ir.f(Prim::Neg, q), n, a.hi), a.lo);
        auto [h, e] = two_sum(s, q);
        return ir.add(h, ir.f(Prim::Fma, r, inv, e));
    }
    // a + n s rounded once, but for a few units of u^2 (|a| + |n s|): the same for a sum and its shift.
    V plus_product(Dd a, V n, V s) {
        Dd p = product(n, s);
        auto [h, e] = two_sum(p.hi, a.hi);
        return ir.add(h, ir.add(e, ir.add(p.lo, a.lo)));
    }
};

// Running shifted sums of the finite values entering and leaving a window.
//
// The shift (the first finite value of the pass) keeps the sums small for price-like data; each pass
// (time tile) re-seeds it. For float32 panels whose values stay within about 2^14 times their spread of
// the shift, the shifted values, their squares and products are exact in float64 and so are their sums
// (multiples of one quantum, far fewer than 2^53 of them): values leave the sums exactly as they
// entered. Float64 panels have no such slack: with exact sums (always for float64, CompileOptions::exact_sums
// for float32) every sum is a double-double (TwoSum) fed with exact products (FMA), and the centred
// moments are formed as n*Sxx - Sx^2 in double-double too. Where neither is enough (a leaving value that
// dominated the sums, a level far from the shift) a refold rebuilds the sums from the window's own rows:
// see WindowGuard below and docs/numerics.md.
// Infinite values are counted, not summed: a window holding +inf sums to +inf, one with both signs to
// NaN, and its variance is NaN, as the two-pass definition gives.
//
// The sums' new values are stored by commit(), after the guard has decided whether to refold them.
class Sums {
public:
    Sums(IrBuilder& ir, bool exact, V in_valid, V out_valid)
        : ir_(ir), dd_{ir, exact}, in_(in_valid), out_(out_valid), zero_(ir.constant(0)) {}

    // Values entering and leaving, zeroed where they do not count: masked once, so that sums and
    // products of masked values need no further selects (each select is two instructions on a GPU).
    V in(V v) { return ir_.select(in_, v, zero_); }
    V out(V v) { return ir_.select(out_, v, zero_); }
    // Adds masked `in` and removes masked `out` from a sum kept in new states; returns the sum's index.
    int add(const std::string& what, V in, V out) { return add_terms(what, {in, -1}, {out, -1}); }
    // The same for the products a*b entering and c*d leaving (masked factors), exact when sums are.
    int add_product(const std::string& what, V a, V b, V c, V d) {
        if (!dd_.exact) {  // two fused steps, each rounding once (exact wherever the plain sums are)
            int slot = ir_.new_state(0, what);
            V s = ir_.f(Prim::Fma, a, b, ir_.load(slot));
            s = ir_.f(Prim::Fma, ir_.f(Prim::Neg, c), d, s);
            sums_.push_back({slot, -1, {s, -1}});
            return static_cast<int>(sums_.size() - 1);
        }
        return add_terms(what, dd_.product(a, b), dd_.product(c, d));
    }
    V count(const std::string& what) {  // small integers: exact in any precision
        V one = ir_.constant(1);  // selects of constants: one masked move each with AVX-512
        V delta = ir_.sub(ir_.select(in_, one, zero_), ir_.select(out_, one, zero_));
        int slot = ir_.new_state(0, what);
        V n = ir_.add(ir_.load(slot), delta);
        ir_.store(slot, n);
        return n;
    }
    Dd running(int sum) const { return sums_[static_cast<std::size_t>(sum)].value; }
    // A sum's value before this row's update (its states as loaded).
    Dd previous(int sum) {
        const Sum& x = sums_[static_cast<std::size_t>(sum)];
        return {ir_.load(x.hi_slot), x.lo_slot >= 0 ? ir_.load(x.lo_slot) : -1};
    }
    // Adds `in` and removes `out`, both already masked (double-double where the sums are); returns the index.
    int add_dd(const std::string& what, Dd in, Dd out) { return add_terms(what, in, out); }
    std::size_t size() const { return sums_.size(); }
    DdMath& dd() { return dd_; }
    // Stores each sum's new value: final(sum index, its running value) (the refolded one where a refold ran).
    template <class Final> void commit(Final final) {
        for (std::size_t i = 0; i < sums_.size(); ++i) {
            Dd v = final(static_cast<int>(i), sums_[i].value);
            ir_.store(sums_[i].hi_slot, v.hi);
            if (sums_[i].lo_slot >= 0) ir_.store(sums_[i].lo_slot, v.lo);
        }
    }
    void commit() {
        commit([](int, Dd v) { return v; });
    }

private:
    struct Sum {
        int hi_slot, lo_slot;
        Dd value;
    };
    int add_terms(const std::string& what, Dd in, Dd out) {
        V vin = in.hi, vout = out.hi;
        int hi_slot = ir_.new_state(0, what);
        if (!dd_.exact) {
            V s = ir_.add(ir_.load(hi_slot), ir_.sub(vin, vout));
            sums_.push_back({hi_slot, -1, {s, -1}});
            return static_cast<int>(sums_.size() - 1);
        }
        int lo_slot = ir_.new_state(0, what + " (low part)");
        auto [s1, e1] = dd_.two_sum(ir_.load(hi_slot), vin);
        auto [s2, e2] = dd_.two_sum(s1, ir_.f(Prim::Neg, vout));
        V lo = ir_.add(ir_.load(lo_slot), ir_.add(e1, e2));
        if (in.lo >= 0) lo = ir_.add(lo, ir_.sub(in.lo, out.lo));
        sums_.push_back({hi_slot, lo_slot, {s2, lo}});
        return static_cast<int>(sums_.size() - 1);
    }

    IrBuilder& ir_;
    DdMath dd_;
    V in_, out_, zero_;
    std::vector<Sum> sums_;
};

// The shift of a group's sums: the first finite value of the pass, until a refold moves it (stored by the
// group once the guard has decided).
V sticky_shift(IrBuilder& ir, int slot, V x, V valid) {
    V s = ir.load(slot);
    return ir.select(ir.land(ir.isnan(s), valid), x, s);
}

// The masked, shifted value leaving a window is the one that entered it d rows before: where the leaving
// row is finite it was finite on entering too, so the shift (set by the pass's first finite row, or by a
// refold, which refreshes what it changes) was already set and both are x - shift of the same x; elsewhere
// both are 0. Stated as an echo (kernel_ir.hpp), so that a backend can keep the entering value instead of
// loading, converting and shifting the row again.
void leaves_as_entered(IrBuilder& ir, V leaving, V entering, int d) { ir.kernel().echoes.push_back({leaving, entering, d}); }

// A running sum's magnitude for the guard: |hi|, plus |lo| for a double-double, whose parts need not stay
// normalised (after a large value has left, lo may exceed hi and have the other sign).
V magnitude(IrBuilder& ir, Dd s) {
    V m = ir.f(Prim::Abs, s.hi);
    return s.lo < 0 ? m : ir.add(m, ir.f(Prim::Abs, s.lo));
}

// The same for a plain sum of squares: itself. It is negative only where rounding has swamped it, and then
// so is the centred moment the guard compares it with, which fires the guard anyway.
V squares_magnitude(IrBuilder& ir, Dd s) { return s.lo < 0 ? s.hi : magnitude(ir, s); }

V at_least(IrBuilder& ir, V n, int m) { return ir.b(Prim::CmpGE, n, ir.constant(m)); }

V is_finite(IrBuilder& ir, V x) { return ir.lt(ir.f(Prim::Abs, x), ir.constant(kInf)); }

// A refold under construction (kernel_ir.hpp, struct Refold): its per-lag part, its sums, then its epilogue
// and exports, then the Refold instruction and the RefoldValues in the kernel's body.
class RefoldBuilder {
public:
    RefoldBuilder(IrBuilder& main, int rows) : main_(main), lag_part_(scratch_), epilogue_(scratch_) {
        refold_.rows = rows;
    }
    // The per-lag part's builder (Input, RingRead and RowInPass lags count from lag k).
    IrBuilder& lag() { return lag_part_; }
    IrBuilder& epilogue() {
        if (refold_.per_lag == 0 && !in_epilogue_) {
            refold_.per_lag = static_cast<std::int32_t>(scratch_.body.size());
            in_epilogue_ = true;
        }
        return epilogue_;
    }
    V outer(IrBuilder& part, V main_value) {
        const bool ep = &part == &epilogue_;
        auto& memo = ep ? outer_epilogue_ : outer_lag_;
        auto it = memo.find(main_value);
        if (it != memo.end()) return it->second;
        const ir::Type type = main_.kernel().body[static_cast<std::size_t>(main_value)].type;
        return memo[main_value] = part.emit({Prim::Outer, type, main_value});
    }
    int sum(V per_lag_value) {
        refold_.sums.push_back(per_lag_value);
        return static_cast<int>(refold_.sums.size() - 1);
    }
    // A sum of products a*b over the lags: as the running sums keep them, exact (FMA) for double-double sums, so
    // that a product leaving them later takes away exactly what it brought (a rounded product would leave its
    // rounding behind, which a window of small spread cannot afford).
    std::pair<int, int> sum_product(V a, V b, bool exact) {
        V p = lag_part_.mul(a, b);
        if (!exact) return {sum(p), -1};
        return {sum(p), sum(lag_part_.f(Prim::Fma, a, b, lag_part_.f(Prim::Neg, p)))};
    }
    void refresh(V main_value, V per_lag_value) { refold_.refreshes.push_back({main_value, per_lag_value}); }
    // Sum i in the epilogue: the compensated sum (plain: hi only; exact: as a double-double).
    Dd fold(int i, bool exact) { return fold({i, -1}, exact); }
    // The same for a sum of products, adding the products' exact remainders (sum_product) when there are.
    Dd fold(std::pair<int, int> sums, bool exact) {
        IrBuilder& e = epilogue();
        auto part = [&](int i, int which) { return e.emit({Prim::Fold, ir::Type::F64, -1, -1, -1, i, 0, static_cast<double>(which)}); };
        V s = part(sums.first, 0);
        V rest = part(sums.first, 1);
        if (sums.second >= 0) rest = e.add(rest, e.add(part(sums.second, 0), part(sums.second, 1)));
        V hi = e.add(s, rest);
        if (!exact) return {hi, -1};
        return {hi, e.sub(rest, e.sub(hi, s))};  // |s| >= |rest|: hi + lo == s + rest exactly
    }
    int export_value(V epilogue_value) {
        refold_.exports.push_back(epilogue_value);
        return static_cast<int>(refold_.exports.size() - 1);
    }
    // Appends the refold to the kernel and its Refold instruction (run where `when` holds) to the body; nothing
    // may be added to the refold after this.
    void emit(V when) {
        epilogue();
        refold_.body = std::move(scratch_.body);
        ir::Kernel& k = main_.kernel();
        index_ = static_cast<std::int32_t>(k.refolds.size());
        k.refolds.push_back(std::move(refold_));
        main_.emit({Prim::Refold, ir::Type::Void, when, -1, -1, index_});
    }
    V value(int export_index, V fallback) {
        return main_.emit({Prim::RefoldValue, ir::Type::F64, fallback, -1, -1, index_, export_index});
    }
    Dd value(std::pair<int, int> exported, Dd fallback) {
        return {value(exported.first, fallback.hi), fallback.lo < 0 ? -1 : value(exported.second, fallback.lo)};
    }

private:
    IrBuilder& main_;
    ir::Kernel scratch_;  // holds the refold's body while it is built
    IrBuilder lag_part_, epilogue_;  // (separate builders: constants of one part are not the other's)
    ir::Refold refold_;
    bool in_epilogue_ = false;
    std::int32_t index_ = -1;
    std::map<V, V> outer_lag_, outer_epilogue_;
};

// How large a window's sums may grow against its spread before a refold rebuilds them.
//
// A running sum's rounding errors since its last rebuild are at most u * (the sum's magnitude) per addition,
// u = 2^-53 for float64 sums and about 2^-100 for double-double ones, a few additions per row; a value that
// dominated the sums leaves that much behind when it leaves. So each group keeps E, the sum over rows of its
// sums' magnitude (of squares where it keeps them), and refolds where c * u * E exceeds `tolerance` times
// what its results divide by (the centred second moment, or max(1, |sum|)). A refold re-shifts the sums by the
// row's own value and sets E to 0. On clean data E grows by about the window's magnitude a row, so refolds
// come every few thousand rows at most (docs/numerics.md has the measurements).
//
// Double-double sums add nothing of their own worth counting, but their terms are rounded before they are
// summed: x - shift is a float64 subtraction, exact for float32 data but not for float64, whose error u|x -
// shift| is large where the shift is far from the values (a bad tick that was the pass's first value). That
// part is not accumulated: it is the current window's. For a sum, `term` times |Sx|. For a centred moment
// P = n Sxx - Sx^2, terms off by d_i (|d_i| <= u |y_i|) move it by at most 2 sqrt(n P sum d_i^2) (Cauchy-Schwarz),
// so by 2 u sqrt(n Sxx / P) relative: within half the tolerance unless 16 u^2 n Sxx > tolerance^2 P, which is
// `term_squares` n times the sum of squares against P. (A bound linear in Sxx / P, as the first version had,
// fired on a third of the passes of clean float64 prices in windows of 5, where the shift lay 30 steps away.)
//
// E adds the sums' magnitude itself (an Add: the FMA units are the CPU kernel's busiest) and is multiplied by
// c * u / tolerance where it is compared. The sizes it adds are magnitudes, never negative (a plain sum of
// squares is negative only where rounding has swamped it, by less than u times E, and its centred moment is then
// negative too, which fires the guard), so E never decreases between refolds: the CPU backend relies on that to
// test a row group's guards once, with the group's last E (codegen/cpu/emit.cpp, GuardForm).
struct GuardConstants {
    double per_row;       // c * u / tolerance, u of the sums
    double term;          // c * u / tolerance for the rounding of the terms (0: they are exact)
    double term_squares;  // 16 u^2 / tolerance^2 for the rounding of the terms in a centred moment (0: exact)
    static GuardConstants of(bool exact, double tolerance) {
        const double u = exact ? std::ldexp(1.0, -100) : std::ldexp(1.0, -53), u_term = std::ldexp(1.0, -53);
        if (!exact) return {4.0 * u / tolerance, 0.0, 0.0};
        return {4.0 * u / tolerance, 2.0 * u_term / tolerance, 16.0 * u_term * u_term / (tolerance * tolerance)};
    }
};

// The guards of one group of window sums: rounding bounds E (states) and the condition they make, the refold's.
class Guards {
public:
    Guards(IrBuilder& ir, std::string what) : ir_(ir), what_(std::move(what)) {}
    // E := E + factor * size (size: the sums' magnitude after this row's update); returns E's new value.
    // `window_rows` > 0: size is a sum of squares over a window of at most that many rows (ir::StateSlot::bound_rows).
    V bound(const std::string& of, V size, double factor = 1.0, int window_rows = 0) {
        const int e = ir_.new_state(0, "rounding bound of " + of + " " + what_);
        ir_.kernel().states[static_cast<std::size_t>(e)].bound_rows = window_rows;
        V en = factor == 1.0 ? ir_.add(ir_.load(e), size) : ir_.f(Prim::Fma, size, ir_.constant(factor), ir_.load(e));
        bounds_.push_back({e, en, factor});
        return en;
    }
    // Fires where `lhs` exceeds `spread` (not where either is NaN).
    void test(V lhs, V spread) {
        V t = ir_.b(Prim::CmpGT, lhs, spread);
        when_ = when_ < 0 ? t : ir_.lor(when_, t);
    }
    // A bound and its test: factor * E (plus term * size: the current window's rounded terms) against spread.
    V test_bound(const std::string& of, V size, V spread, double factor, double term, int window_rows = 0) {
        V k = ir_.constant(factor);  // (before E: the instruction order of the kernels before E was returned)
        V e = bound(of, size, 1.0, window_rows);
        V lhs = ir_.mul(e, k);
        test(term > 0 ? ir_.f(Prim::Fma, size, ir_.constant(term), lhs) : lhs, spread);
        return e;
    }
    // The refold's condition: only windows that give a result (`valid`) are guarded; -1 where nothing is.
    V when(V valid) { return when_ < 0 ? -1 : ir_.land(when_, valid); }
    // Where the refold runs, each E restarts from the rebuilt sums' magnitude (`fresh`, in the order of the
    // bounds): they hold what they hold (a spike still inside the window), and its rounding leaves with it later.
    void restart(RefoldBuilder& rf, const std::vector<V>& fresh) {
        IrBuilder& ep = rf.epilogue();
        for (std::size_t b = 0; b < bounds_.size(); ++b) {
            Bound& x = bounds_[b];
            x.restart = rf.export_value(x.factor == 1.0 ? fresh[b] : ep.mul(fresh[b], ep.constant(x.factor)));
        }
    }
    // Stores each E (its restarted value where the refold ran, when there is one).
    void store(RefoldBuilder& rf, bool refold) {
        for (const Bound& x : bounds_) ir_.store(x.state, refold ? rf.value(x.restart, x.value) : x.value);
    }

private:
    struct Bound {
        int state;
        V value;
        double factor;
        int restart = -1;
    };
    IrBuilder& ir_;
    std::string what_;
    std::vector<Bound> bounds_;
    V when_ = -1;
};
// y^3 and y^4 as hi + lo, for double-double sums of cubes and fourth powers: y^2 = p + e exactly (FMA), then
// p y and p^2 exactly (hi and an FMA remainder) and e y, 2 p e rounded into lo (u^2 |y|^k at most). A rounded
// square times y, as the plain sums take it, is off by u |y|^3: where the values lie far from the shift (|m| / sd
// of some hundreds, m their mean) that alone is over the tolerance of M3, double-double sums or not. The same
// instructions make a value's terms entering, leaving (an echo of entering) and in a refold, so a value leaves
// exactly what it brought.
struct Powers {
    Dd cube, fourth{-1, -1};
};
Powers exact_powers(IrBuilder& ir, V y, bool fourth) {
    auto fma = [&](V a, V b, V d) { return ir.f(Prim::Fma, a, b, d); };
    V p = ir.mul(y, y);
    V e = fma(y, y, ir.f(Prim::Neg, p));
    V q3 = ir.mul(p, y);
    Powers r{{q3, fma(e, y, fma(p, y, ir.f(Prim::Neg, q3)))}};
    if (fourth) {
        V q4 = ir.mul(p, p);
        r.fourth = {q4, fma(ir.add(p, p), e, fma(p, p, ir.f(Prim::Neg, q4)))};
    }
    return r;
}

// The centred third and fourth moments M3 = sum (y - m)^3 and M4 = sum (y - m)^4 (y: the window's shifted values,
// m their mean) from their power sums S1..S4, in double-double. Formed in float64 as S3 - 3m S2 + 2m^2 S1, they
// lose about u n |m|^3 to cancellation against n sd^3, and a random walk drifts from its pass's first value (the
// shift) by tens to hundreds of its windows' spreads (docs/numerics.md).
//
// About a = fl(S1 / n), with T0 = n and T1 = r = S1 - n a, the binomial expansion S_k = sum_j C(k, j) a^(k-j) T_j
// of T_k = sum (y - a)^k gives
//   T2 = S2 - n a^2 - 2a r,   T3 = S3 - n a^3 - 3a T2 - 3a^2 r,   T4 = S4 - n a^4 - 4a T3 - 6a^2 T2 - 4a^3 r.
// Each product is formed as hi + lo (lo its exact FMA remainder plus the low parts' products) and the hi parts are
// added by TwoSum, so only the sums of low parts round: T_k is within a few tens of u^2 times the magnitude of its
// terms (|S_k| + n |a|^k + ..., about `form_k` of higher_moment_guards), plus u |T_k| for its last rounding. r is
// exact (S1 - n a is small next to S1) but for the rounding of S1's low part into it, and m = a + r / n, so
// M3 = T3 - 3 (r/n) T2 and M4 = T4 - 4 (r/n) T3 but for terms in (r/n)^2, which is u^2 a^2 at most. Plain sums
// (lo < 0) are double-doubles with a zero low part. Where no result is given (M2 <= 0, NaN sums) the values are
// whatever the arithmetic makes of them: the results test M2 and the counts themselves.
struct HigherMoments {
    V m3 = -1, m4 = -1;
};
HigherMoments centred_higher_moments(IrBuilder& ir, Dd s1, Dd s2, Dd s3, Dd s4, V n, V inv_n) {
    auto c = [&](double v) { return ir.constant(v); };
    auto lo = [&](Dd s) { return s.lo >= 0 ? s.lo : c(0); };
    auto fma = [&](V a, V b, V d) { return ir.f(Prim::Fma, a, b, d); };
    // x * y as hi + lo: hi rounded, lo its exact remainder plus the products of the low parts (rounded, small).
    auto times = [&](Dd x, Dd y) {
        V p = ir.mul(x.hi, y.hi);
        V e = fma(x.hi, y.hi, ir.f(Prim::Neg, p));
        if (y.lo >= 0) e = fma(x.hi, y.lo, e);
        if (x.lo >= 0) e = fma(x.lo, y.hi, e);
        return Dd{p, e};
    };
    // s - the terms - rest: the hi parts by TwoSum (exact), the low parts and `rest` (small) summed plainly.
    auto minus = [&](Dd s, const std::vector<Dd>& terms, V rest) {
        V hi = s.hi, low = ir.sub(lo(s), rest);
        for (const Dd& t : terms) {
            V sum = ir.sub(hi, t.hi);
            V bb = ir.sub(sum, hi);
            V err = ir.sub(ir.sub(hi, ir.sub(sum, bb)), ir.add(t.hi, bb));  // hi - t.hi - sum exactly
            low = ir.add(low, ir.sub(err, lo(t)));
            hi = sum;
        }
        return Dd{hi, low};
    };
    auto value = [&](Dd x) { return ir.add(x.hi, x.lo); };
    const Dd nn{n, -1};
    V a = ir.mul(ir.add(s1.hi, lo(s1)), inv_n);
    V r = ir.add(fma(ir.f(Prim::Neg, n), a, s1.hi), lo(s1));
    V r_n = ir.mul(r, inv_n);
    const Dd av{a, -1};
    const Dd a2 = times(av, av);
    const Dd t2 = minus(s2, {times(a2, nn)}, ir.mul(ir.mul(c(2), a), r));
    const Dd a3 = times(a2, av);
    const Dd t3 = minus(s3, {times(a3, nn), times(times(Dd{c(3), -1}, av), t2)}, ir.mul(ir.mul(c(3), a2.hi), r));
    HigherMoments m;
    m.m3 = ir.add(t3.hi, fma(ir.mul(c(-3), r_n), value(t2), t3.lo));
    if (s4.hi < 0) return m;
    const Dd a4 = times(a2, a2);
    const Dd four_a{ir.mul(c(4), a), -1};  // (exact)
    const Dd t4 = minus(s4, {times(a4, nn), times(four_a, t3), times(times(a2, Dd{c(6), -1}), t2)},
                        ir.mul(ir.mul(c(4), a3.hi), r));
    m.m4 = ir.add(t4.hi, fma(ir.mul(c(-4), r_n), value(t3), t4.lo));
    return m;
}

// The same in float64, from plain sums (float32 panels): M3 = S3 - 3a S2 + 2a^2 S1 and M4 = S4 - 4a S3 + 6a^2 S2 -
// 3a^3 S1, a = S1 / n, which round by about 8u times their terms' magnitudes (higher_moment_guards' `form3`). Their
// sums carry more than that already (the sums of cubes and fourth powers round every row; docs/numerics.md).
HigherMoments plain_higher_moments(IrBuilder& ir, V s1, V s2, V s3, V s4, V inv_n) {
    auto c = [&](double v) { return ir.constant(v); };
    V a = ir.mul(s1, inv_n);
    HigherMoments m;
    m.m3 = ir.sub(s3, ir.mul(a, ir.sub(ir.mul(c(3), s2), ir.mul(ir.mul(c(2), a), s1))));
    if (s4 < 0) return m;
    V inner = ir.sub(ir.mul(c(6), s2), ir.mul(ir.mul(c(3), a), s1));
    m.m4 = ir.sub(s4, ir.mul(a, ir.sub(ir.mul(c(4), s3), ir.mul(a, inner))));
    return m;
}

// The guards of skew's and kurt's sums (moments()), beside var's: M3 and M4 (centred_higher_moments) must stay
// within the tolerance of what the results divide by, M2^1.5 / sqrt(n) and M2^2 / n, a share of it for each kind
// of rounding (double-double sums: shares that add up to 7/8; plain sums: 1/4 each for the first three):
// - what the running sums of cubes and fourth powers accumulate (their own E, as every sum's; 1/8);
// - what S2 and S3 accumulate (var's E, the cubes' E), times |a| (a: the shifted values' mean) and a^2, as they
//   enter M3 and M4 (1/8);
// - the forming of M3 and M4: in double-double 128 u^2 times the terms' magnitudes (form3, form4), a bound that
//   grows as (|a| / sd)^4 and fires only where the level lies some thousands of spreads from the shift (1/8); from
//   plain sums in float64 (plain_higher_moments) 8 u times them;
// - float64 terms y_i = x_i - shift, each rounded by d_i, |d_i| <= u |y_i| (1/2). To first order they move M3 by
//   3 sum (z_i^2 - M2/n) d_i (z_i = y_i - m) and M4 by 4 sum (z_i^3 - M3/n) d_i. With |y_i| <= |m| + |z_i|,
//   sum |z_i|^3 <= sqrt(M2) M2, sum |z_i| <= sqrt(n M2), |M3| <= sqrt(M2 M4) and M2^2 <= n M4 (Cauchy-Schwarz):
//   |dM3| <= 6u M2 (|m| + sqrt(M2)) and |dM4| <= 8u (|m| sqrt(M2 M4) + M4); tested with 7u and 9u (the second order).
//   Where x and the shift lie within a factor of 2 (prices) the terms are exact (Sterbenz), but the bound does
//   not know it; it stays below its share up to |m| / sd of about 600 (skew) and 260 (kurt, normal tails).
// The tests of M3 hold only where a window holds 3 finite values, of M4 where it holds 4 (below, no skew or kurt is
// given; E keeps accumulating and is tested on the rows that give one). Sums that overflowed (float64 values beyond
// about 1e102 for cubes, 1e77 for fourth powers) are inf while the value is inside the window and NaN once it has
// left: their magnitude counts as inf and a NaN limit as -inf, so the guard fires and the refold rebuilds them.
void higher_moment_guards(IrBuilder& ir, Guards& guards, Sums& sums, int s2, int s3, int s4, V n, V count, int d,
                          bool full, V s1v, V m2n, const HigherMoments& hm, V e2, double per_row, double term, double tolerance) {
    const bool exact = sums.dd().exact;
    auto abs = [&](V v) { return ir.f(Prim::Abs, v); };
    auto c = [&](double v) { return ir.constant(v); };
    auto size = [&](V v) { return ir.select(ir.lt(v, c(kInf)), v, c(kInf)); };
    // What the results divide by, on the rows that give them (NaN: -inf, which fires).
    auto limit = [&](V v, int need) {
        V l = ir.select(ir.isnan(v), c(-kInf), v);
        return full ? l : ir.select(at_least(ir, count, need), l, c(kInf));
    };
    DdMath& dd = sums.dd();
    V inv_n = ir.f(Prim::Recip, n);
    V a = abs(ir.mul(s1v, inv_n));
    V m2 = ir.mul(m2n, inv_n);
    V s2v = dd.value(sums.running(s2)), s3a = abs(dd.value(sums.running(s3))), s1a = abs(s1v);
    const double formation = exact ? 128.0 * std::ldexp(1.0, -106) / tolerance : 8.0 * std::ldexp(1.0, -53) / tolerance;
    const double share = exact ? 0.125 : 0.25;
    const double root_d = std::sqrt(static_cast<double>(d));  // (n <= d)
    V e3 = guards.bound("cubes", size(magnitude(ir, sums.running(s3))));
    V spread3 = limit(ir.mul(c(share), ir.mul(m2, ir.f(Prim::Sqrt, ir.mul(m2, inv_n)))), 3);
    guards.test(ir.mul(c(per_row), e3), spread3);
    guards.test(ir.mul(c(3.0 * per_row), ir.mul(a, e2)), spread3);
    V form3 = ir.add(s3a, ir.mul(a, ir.add(ir.mul(c(3), s2v), ir.mul(c(2), ir.mul(a, s1a)))));
    guards.test(ir.mul(c(formation), form3), spread3);
    // (7u M2 (|m| + sqrt M2) against half the tolerance of M2^1.5 / sqrt n, divided by M2 / 8; term = 2u / tolerance,
    // sqrt n taken as sqrt d.)
    if (term > 0 && exact) {
        V root_m2 = ir.f(Prim::Sqrt, m2);
        guards.test(ir.mul(c(7.0 * term * root_d / 8.0), ir.add(a, root_m2)), limit(ir.mul(c(0.125), root_m2), 3));
    }
    if (s4 < 0) return;
    V e4 = guards.bound("fourth powers", size(magnitude(ir, sums.running(s4))));
    V spread4 = limit(ir.mul(c(share), ir.mul(m2, ir.mul(m2, inv_n))), 4);
    guards.test(ir.mul(c(per_row), e4), spread4);
    guards.test(ir.mul(c(per_row), ir.mul(a, ir.add(ir.mul(c(4), e3), ir.mul(c(6), ir.mul(a, e2))))), spread4);
    V s4a = abs(dd.value(sums.running(s4)));
    V form4 = ir.add(s4a, ir.mul(a, ir.add(ir.mul(c(4), s3a), ir.mul(a, ir.add(ir.mul(c(6), s2v), ir.mul(c(3), ir.mul(a, s1a)))))));
    guards.test(ir.mul(c(formation), form4), spread4);
    if (term > 0 && exact) {  // (9u (|m| sqrt(M2 M4) + M4) against half the tolerance of M2^2 / n: 4 spread4)
        V m4 = abs(hm.m4);
        guards.test(ir.mul(c(9.0 * term / 8.0), ir.add(ir.mul(a, ir.f(Prim::Sqrt, ir.mul(m2, m4))), m4)), spread4);
    }
}

// A window's value at lag k inside a refold's per-lag part: re-read from the inputs (pointwise values) or
// from the value's ring (kept for d + 1 rows: the window's history).
V Lowering::at_refold_lag(IrBuilder& part, const Node* x, int lag, std::map<std::pair<const Node*, int>, V>& memo) {
    auto key = std::make_pair(x, lag);
    if (auto it = memo.find(key); it != memo.end()) return it->second;
    V v;
    if (!is_pointwise(x)) {
        v = part.ring_read(ring_of_.at(x), lag);
    } else {
        switch (op_info(x->op).kind) {
        case OpKind::Leaf: v = x->op == Op::Const ? part.constant(x->value) : part.input(input_slot_.at(x->name), lag); break;
        case OpKind::Lag: v = at_refold_lag(part, x->args[0], lag + x->d, memo); break;
        case OpKind::Elementwise: {
            std::vector<V> args;
            for (const Node* a : x->args) args.push_back(at_refold_lag(part, a, lag, memo));
            v = elementwise_table().at(x->op)(part, args);
            break;
        }
        default: throw BackendError(fmt::format("lowering: {} in a refold", op_name(x->op)));
        }
    }
    return memo[key] = v;
}

// The latest finite value of x (where `finite`), NaN before the first.
V Lowering::last_finite(V x, V finite, const std::string& what) {
    const int slot = ir_.new_state(std::numeric_limits<double>::quiet_NaN(), "latest finite " + what);
    V v = ir_.select(finite, x, ir_.load(slot));
    ir_.store(slot, v);
    return v;
}

V Lowering::moments(const Node* node) {
    const Node* x = node->args[0];
    const int d = node->d;
    auto key = std::make_pair(x, d);
    auto it = moment_groups_.find(key);
    if (it == moment_groups_.end()) {
        const std::string what = fmt::format("window({}, {})", label(x), d);
        const bool second = needs_second_moment_.count(key) > 0;
        const bool sum = needs_sum_.count(key) > 0;
        V xv = value(x, 0);
        V leave = history(x, d);
        V in_valid = ir_.notnan(xv);
        V out_valid = ir_.land(ir_.row_in_pass(d), ir_.notnan(leave));
        V in_finite = is_finite(ir_, xv);
        V out_finite = ir_.land(ir_.row_in_pass(d), is_finite(ir_, leave));
        const bool full = !partial_.count(key);  // only var/std, on full windows
        MomentGroup g{};
        const int shift_slot = ir_.new_state(std::numeric_limits<double>::quiet_NaN(), "shift " + what);
        V shift = sticky_shift(ir_, shift_slot, xv, in_finite);
        const bool third = needs_third_.count(key) > 0, fourth = needs_fourth_.count(key) > 0;  // skew, kurt
        Sums sums(ir_, exact_, in_finite, out_finite);
        // Float64 terms x - shift round by u |x - shift|, which a level far from the shift makes large. Where a sum
        // or mean is read by another window, that would spoil the outer window's spread, and without var's sum of
        // squares no guard re-shifts the sums: there the terms are kept exactly (hi + lo, lo summed into the
        // double-double's low part) and sum and mean are formed from them rounded once (DdMath::plus_quotient).
        const bool exact_terms = exact_ && !second && read_by_window_.count(key) > 0;
        V yin, yout, lo_in = -1, lo_out = -1;
        if (exact_terms) {
            const Dd tin = sums.dd().difference(xv, shift), tout = sums.dd().difference(leave, shift);
            yin = sums.in(tin.hi);
            lo_in = sums.in(tin.lo);
            yout = sums.out(tout.hi);
            lo_out = sums.out(tout.lo);
        } else {
            yin = sums.in(ir_.sub(xv, shift));
            yout = sums.out(ir_.sub(leave, shift));
        }
        leaves_as_entered(ir_, yout, yin, d);
        if (exact_terms) leaves_as_entered(ir_, lo_out, lo_in, d);
        // d finite values or NaN: n = d wherever the result is not NaN (d >= 2: a run of finite rows).
        g.finite = full && d >= 2 ? finite_run(ir_, in_finite, what) : sums.count("finite n " + what);
        if (full) {
            g.n = g.finite;
            g.infinities = ir_.constant(0);
        } else {
            g.n = Sums(ir_, false, in_valid, out_valid).count("n " + what);
            g.infinities = ir_.sub(g.n, g.finite);
        }
        if (sum) {  // +inf counts +1 and -inf -1: the sign of the sum's infinite part
            V in_inf = ir_.land(in_valid, ir_.lnot(in_finite)), out_inf = ir_.land(out_valid, ir_.lnot(out_finite));
            V one = ir_.constant(1), minus_one = ir_.constant(-1), zero = ir_.constant(0);
            Sums infs(ir_, false, in_inf, out_inf);
            const int si = infs.add("signed infinities " + what, infs.in(ir_.select(ir_.lt(zero, xv), one, minus_one)),
                                    infs.out(ir_.select(ir_.lt(zero, leave), one, minus_one)));
            g.signed_infinities = infs.running(si).hi;
            infs.commit();
        }
        const int s1 = exact_terms ? sums.add_dd("sum " + what, {yin, lo_in}, {yout, lo_out}) : sums.add("sum " + what, yin, yout);
        int s2 = -1;
        V n_c = full ? ir_.constant(d) : g.finite;  // the count the centred moment is formed with
        V m2n = -1;
        if (second) {
            s2 = sums.add_product("sum of squares " + what, yin, yin, yout, yout);
            m2n = sums.dd().centred(n_c, sums.running(s2), sums.running(s1), sums.running(s1));
            g.is_const = full ? constancy_full(ir_, xv, d, what) : constancy(ir_, xv, in_valid, ir_.row(), d, what);
        }
        // skew, kurt: sums of cubes and fourth powers of the same shifted values: exact_ terms in double-double sums
        // (exact_powers); in plain ones the squares rounded once, the same way entering and leaving, so a value
        // leaves exactly what it brought.
        int s3 = -1, s4 = -1;
        if (third && exact_) {
            const Powers pin = exact_powers(ir_, yin, fourth), pout = exact_powers(ir_, yout, fourth);
            s3 = sums.add_dd("sum of cubes " + what, pin.cube, pout.cube);
            if (fourth) s4 = sums.add_dd("sum of fourth powers " + what, pin.fourth, pout.fourth);
        } else if (third) {
            V yin2 = ir_.mul(yin, yin), yout2 = ir_.mul(yout, yout);
            s3 = sums.add_product("sum of cubes " + what, yin2, yin, yout2, yout);
            if (fourth) s4 = sums.add_product("sum of fourth powers " + what, yin2, yin2, yout2, yout2);
        }
        V s1v = sums.dd().value(sums.running(s1));

        // The guard (GuardConstants): E accumulates the sums' magnitude row by row; a refold rebuilds them
        // from the window's rows, shifted by this row's value, where E outgrows what the results divide by.
        const GuardConstants k = GuardConstants::of(exact_, tolerance_);
        RefoldBuilder rf(ir_, d);
        Guards guards(ir_, what);
        V e2 = -1;
        if (second) e2 = guards.test_bound("squares", squares_magnitude(ir_, sums.running(s2)), m2n, 3.0 * d * k.per_row, d * k.term_squares);
        if (sum) {
            V total = ir_.f(Prim::Fma, g.finite, shift, s1v);
            V one = ir_.constant(1), mag = ir_.f(Prim::Abs, total);
            guards.test_bound("sum", magnitude(ir_, sums.running(s1)), ir_.select(ir_.lt(mag, one), one, mag), k.per_row,
                              exact_terms ? 0.0 : k.term);
        }
        HigherMoments hm;
        if (third) {
            const Dd none{-1, -1};
            V inv_n = ir_.f(Prim::Recip, n_c);
            hm = exact_ ? centred_higher_moments(ir_, sums.running(s1), sums.running(s2), sums.running(s3),
                                                fourth ? sums.running(s4) : none, n_c, inv_n)
                       : plain_higher_moments(ir_, s1v, sums.running(s2).hi, sums.running(s3).hi, fourth ? sums.running(s4).hi : -1,
                                              inv_n);
            higher_moment_guards(ir_, guards, sums, s2, s3, s4, n_c, g.finite, d, full, s1v, m2n, hm, e2, k.per_row, k.term,
                                 tolerance_);
        }
        // The refold: the window's finite values, shifted by this row's value where it is finite.
        // (The new shift is formed inside the refold: rows that do not refold do not pay for it.)
        // A window that answers without its newest row (min_periods < d) re-shifts by its latest finite value,
        // kept for that (the old shift may be the bad tick itself); one that needs every row is NaN anyway.
        const V latest = full ? shift : last_finite(xv, in_finite, what);
        auto new_shift = [&](IrBuilder& part) { return part.select(rf.outer(part, in_finite), rf.outer(part, xv), rf.outer(part, latest)); };
        std::map<std::pair<const Node*, int>, V> memo;
        IrBuilder& lag = rf.lag();
        V xk = at_refold_lag(lag, x, 0, memo);
        V ok = lag.land(lag.row_in_pass(0), is_finite(lag, xk));
        V yk, yk_lo = -1;
        if (exact_terms) {
            const Dd t = DdMath{lag, true}.difference(xk, new_shift(lag));
            yk = lag.select(ok, t.hi, lag.constant(0));
            yk_lo = lag.select(ok, t.lo, lag.constant(0));
        } else {
            yk = lag.select(ok, lag.sub(xk, new_shift(lag)), lag.constant(0));
        }
        rf.refresh(yin, yk);
        if (exact_terms) rf.refresh(lo_in, yk_lo);
        const std::pair<int, int> f1{rf.sum(yk), exact_terms ? rf.sum(yk_lo) : -1};
        const std::pair<int, int> f2 = second ? rf.sum_product(yk, yk, exact_) : std::make_pair(-1, -1);
        std::pair<int, int> f3{-1, -1}, f4{-1, -1};
        if (third && exact_) {
            const Powers pk = exact_powers(lag, yk, fourth);
            f3 = {rf.sum(pk.cube.hi), rf.sum(pk.cube.lo)};
            if (fourth) f4 = {rf.sum(pk.fourth.hi), rf.sum(pk.fourth.lo)};
        } else if (third) {
            V yk2 = lag.mul(yk, yk);
            f3 = rf.sum_product(yk2, yk, exact_);
            if (fourth) f4 = rf.sum_product(yk2, yk2, exact_);
        }
        IrBuilder& ep = rf.epilogue();
        DdMath edd{ep, exact_};
        Dd S1 = rf.fold(f1, exact_);
        auto export_dd = [&](Dd v) { return std::make_pair(rf.export_value(v.hi), v.lo < 0 ? -1 : rf.export_value(v.lo)); };
        const auto e_s1 = export_dd(S1);
        const int e_s1v = rf.export_value(edd.value(S1));
        const int e_shift = rf.export_value(new_shift(ep));
        std::pair<int, int> e_s2{-1, -1}, e_s3{-1, -1}, e_s4{-1, -1};
        int e_m2n = -1, e_m3 = -1, e_m4 = -1;
        Dd S2{-1, -1};
        std::vector<V> fresh;  // each bound's size from the rebuilt sums, in the order of the bounds
        if (second) {
            S2 = rf.fold(f2, exact_);
            e_s2 = export_dd(S2);
            e_m2n = rf.export_value(edd.centred(full ? ep.constant(d) : rf.outer(ep, g.finite), S2, S1, S1));
            fresh.push_back(magnitude(ep, S2));
        }
        if (sum) fresh.push_back(magnitude(ep, S1));
        if (third) {
            Dd S3 = rf.fold(f3, exact_), S4{-1, -1};
            e_s3 = export_dd(S3);
            fresh.push_back(magnitude(ep, S3));
            if (fourth) {
                S4 = rf.fold(f4, exact_);
                e_s4 = export_dd(S4);
                fresh.push_back(magnitude(ep, S4));
            }
            V n_ep = full ? ep.constant(d) : rf.outer(ep, g.finite);
            V inv_n = ep.f(Prim::Recip, n_ep);
            const HigherMoments rebuilt = exact_ ? centred_higher_moments(ep, S1, S2, S3, S4, n_ep, inv_n)
                                                : plain_higher_moments(ep, S1.hi, S2.hi, S3.hi, S4.hi, inv_n);
            e_m3 = rf.export_value(rebuilt.m3);
            if (fourth) e_m4 = rf.export_value(rebuilt.m4);
        }
        guards.restart(rf, fresh);
        // Only windows that give a result are guarded: before a full window's d rows have entered, its centred
        // moment is formed with n = d over fewer rows and is meaningless (often negative).
        const V when = guards.when(at_least(ir_, g.finite, full ? d : (second ? 2 : 1)));
        if (when >= 0) rf.emit(when);  // (a count alone has no sums to guard)
        auto final = [&](auto e, auto running) { return when >= 0 ? rf.value(e, running) : running; };
        std::vector<Dd> finals(sums.size());
        sums.commit([&](int i, Dd running) {
            const auto e = i == s1 ? e_s1 : i == s2 ? e_s2 : i == s3 ? e_s3 : e_s4;
            return finals[static_cast<std::size_t>(i)] = final(e, running);
        });
        g.shift = final(e_shift, shift);
        ir_.store(shift_slot, g.shift);
        guards.store(rf, when >= 0);
        g.s1v = final(e_s1v, s1v);
        if (second) g.m2n = final(e_m2n, m2n);
        g.exact_terms = exact_terms;
        if (exact_terms) g.s1 = finals[static_cast<std::size_t>(s1)];
        if (third) {
            g.m3 = final(e_m3, hm.m3);
            if (fourth) g.m4 = final(e_m4, hm.m4);
        }
        it = moment_groups_.emplace(key, g).first;
    }
    const MomentGroup& g = it->second;
    const int minp = node->min_periods;
    V nan = ir_.nan(), zero = ir_.constant(0);
    V any_inf = ir_.lt(zero, g.infinities);
    // The sum's infinite part: +inf, -inf, or NaN when both signs are in the window.
    auto inf_part = [&] {
        return ir_.select(ir_.b(Prim::CmpEQ, g.signed_infinities, g.infinities), ir_.constant(kInf),
                          ir_.select(ir_.b(Prim::CmpEQ, ir_.f(Prim::Neg, g.signed_infinities), g.infinities),
                                     ir_.constant(-kInf), nan));
    };
    switch (node->op) {
    case Op::WCount: return g.n;
    case Op::WSum: {
        V total = g.exact_terms ? DdMath{ir_, true}.plus_product(g.s1, g.finite, g.shift) : ir_.add(g.s1v, ir_.mul(g.finite, g.shift));
        V s = ir_.select(at_least(ir_, g.finite, 1), total, zero);
        return ir_.select(at_least(ir_, g.n, minp), ir_.select(any_inf, inf_part(), s), nan);
    }
    case Op::WMean: {
        V m = g.exact_terms ? DdMath{ir_, true}.plus_quotient(g.shift, g.s1, g.finite)
                            : ir_.add(g.shift, ir_.mul(g.s1v, ir_.f(Prim::Recip, g.finite)));
        return ir_.select(at_least(ir_, g.n, std::max(minp, 1)), ir_.select(any_inf, inf_part(), m), nan);
    }
    case Op::WVar:
    case Op::WStd: {
        // var = (n Sxx - Sx^2) / (n (n - 1))
        const bool full = !partial_.count(std::make_pair(node->args[0], node->d));
        V scale = full ? ir_.constant(1.0 / (static_cast<double>(d) * (d - 1)))  // correctly rounded
                       : ir_.f(Prim::Recip, ir_.mul(g.n, ir_.sub(g.n, ir_.constant(1))));
        // Negative by rounding: 0. NaN (float64 sums of squares that overflowed, |x| beyond about 1e154)
        // stays NaN.
        V var = ir_.mul(ir_.select(ir_.lt(g.m2n, zero), zero, g.m2n), scale);
        var = ir_.select(g.is_const, zero, ir_.select(any_inf, nan, var));
        V r = node->op == Op::WStd ? ir_.f(Prim::Sqrt, var) : var;
        return ir_.select(at_least(ir_, g.n, std::max(minp, 2)), r, nan);
    }
    case Op::WSkew:
    case Op::WKurt: {
        // pandas' rolling skew and kurt, from the centred sums M2, M3, M4 of the shifted values (M3 and M4 from
        // centred_higher_moments):
        // skew = n sqrt(n - 1) / (n - 2) * M3 / M2^1.5,
        // kurt = ((n^2 - 1) n M4 / M2^2 - 3 (n - 1)^2) / ((n - 2)(n - 3)).
        // A constant window gives 0 and -3 exactly (pandas forces the same); M2 <= 0 otherwise (rounding) or
        // NaN (sums that overflowed: float64 values beyond about 1e102 for cubes, 1e77 for fourth powers): NaN.
        const bool skew = node->op == Op::WSkew;
        const int need = skew ? 3 : 4;
        if (d < need) return nan;
        const bool full = !partial_.count(std::make_pair(node->args[0], node->d));
        V n = full ? ir_.constant(d) : g.finite;
        V one = ir_.constant(1), two = ir_.constant(2), three = ir_.constant(3);
        V inv_n = ir_.f(Prim::Recip, n);
        V m2 = ir_.mul(g.m2n, inv_n);
        V m3 = g.m3;
        V n1 = ir_.sub(n, one), n2 = ir_.sub(n, two);
        V r;
        if (skew) {
            V coef = ir_.div(ir_.mul(n, ir_.f(Prim::Sqrt, n1)), n2);
            r = ir_.div(ir_.mul(coef, m3), ir_.mul(m2, ir_.f(Prim::Sqrt, m2)));
        } else {
            V m4 = g.m4;
            V k = ir_.sub(ir_.div(ir_.mul(ir_.mul(ir_.sub(ir_.mul(n, n), one), n), m4), ir_.mul(m2, m2)),
                          ir_.mul(three, ir_.mul(n1, n1)));
            r = ir_.div(k, ir_.mul(n2, ir_.sub(n, three)));
        }
        r = ir_.select(ir_.land(ir_.lt(zero, m2), ir_.lnot(any_inf)), r, nan);
        r = ir_.select(ir_.land(g.is_const, ir_.lnot(any_inf)), ir_.constant(skew ? 0.0 : -3.0), r);  // (inf - inf: NaN)
        return ir_.select(at_least(ir_, g.n, std::max(minp, need)), r, nan);
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
        V in_finite = ir_.land(is_finite(ir_, xv), is_finite(ir_, yv));
        V out_finite = ir_.land(ir_.row_in_pass(d), ir_.land(is_finite(ir_, lx), is_finite(ir_, ly)));
        const bool full = !partial_pairs_.count(key);  // every consumer needs d valid rows
        const bool corr = needs_corr_.count(key) > 0;
        PairGroup g{};
        const double qnan = std::numeric_limits<double>::quiet_NaN();
        const int shx_slot = ir_.new_state(qnan, "shift x " + what), shy_slot = ir_.new_state(qnan, "shift y " + what);
        V shx = sticky_shift(ir_, shx_slot, xv, in_finite);
        V shy = sticky_shift(ir_, shy_slot, yv, in_finite);
        Sums sums(ir_, exact_, in_finite, out_finite);
        V xi = sums.in(ir_.sub(xv, shx)), xo = sums.out(ir_.sub(lx, shx));
        V yi = sums.in(ir_.sub(yv, shy)), yo = sums.out(ir_.sub(ly, shy));
        leaves_as_entered(ir_, xo, xi, d);
        leaves_as_entered(ir_, yo, yi, d);
        // d finite rows or NaN: n = d wherever the result is not NaN (d >= 2: a run of finite rows).
        V nf = full && d >= 2 ? finite_run(ir_, in_finite, what) : sums.count("finite n " + what);
        if (full) {
            g.n = nf;
            g.infinities = ir_.constant(0);
        } else {
            g.n = Sums(ir_, false, in_valid, out_valid).count("n " + what);
            g.infinities = ir_.sub(g.n, nf);
        }
        V n = full ? ir_.constant(d) : nf;
        g.full = full;
        const int sx = sums.add("sum x " + what, xi, xo);
        const int sy = sums.add("sum y " + what, yi, yo);
        const int sxy = sums.add_product("sum xy " + what, xi, yi, xo, yo);
        DdMath& dd = sums.dd();
        V cxy = dd.centred(n, sums.running(sxy), sums.running(sx), sums.running(sy));
        int sxx = -1, syy = -1;
        V vx = -1, vy = -1;
        if (corr) {
            sxx = sums.add_product("sum xx " + what, xi, xi, xo, xo);
            syy = sums.add_product("sum yy " + what, yi, yi, yo, yo);
            vx = dd.centred(n, sums.running(sxx), sums.running(sx), sums.running(sx));
            vy = dd.centred(n, sums.running(syy), sums.running(sy), sums.running(sy));
            if (full) {
                g.const_x = constancy_full(ir_, xv, d, "x " + what);
                g.const_y = constancy_full(ir_, yv, d, "y " + what);
            } else {
                V t = ir_.row();
                g.const_x = constancy(ir_, xv, in_valid, t, d, "x " + what);
                g.const_y = constancy(ir_, yv, in_valid, t, d, "y " + what);
            }
        }

        // The guard (GuardConstants). corr: each variable's centred moment against its sum of squares, which
        // also bounds the cross sum's errors (Cauchy-Schwarz). cov alone keeps no squares: the cross sum's
        // magnitude (and the products entering it) and the plain sums' against n (n - 1) or |n Sxy - Sx Sy|.
        const GuardConstants k = GuardConstants::of(exact_, tolerance_);
        Guards guards(ir_, what);
        const double k2 = 3.0 * d * k.per_row;
        if (corr) {
            // (Plain float64 sums of squares: the CUDA column scan may sample their bounds. A double-double sum's
            // magnitude |hi| + |lo| is not a sum of its window's terms once a large value has left.)
            const int sampled = exact_ ? 0 : d;
            guards.test_bound("x squares", squares_magnitude(ir_, sums.running(sxx)), vx, k2, d * k.term_squares, sampled);
            guards.test_bound("y squares", squares_magnitude(ir_, sums.running(syy)), vy, k2, d * k.term_squares, sampled);
        } else {
            auto abs = [&](V v) { return ir_.f(Prim::Abs, v); };
            V sxa = magnitude(ir_, sums.running(sx)), sya = magnitude(ir_, sums.running(sy));
            const double kc = 2.0 * k.per_row;
            // d kc (the cross sum's E) + (|Sx| + |Sy|) kc (the plain sums' E), the factors kept in the E's
            V exy = guards.bound("the cross sum", ir_.add(magnitude(ir_, sums.running(sxy)), abs(ir_.mul(xi, yi))), d * kc);
            V sums_mag = ir_.add(sxa, sya);
            V err = ir_.f(Prim::Fma, sums_mag, guards.bound("the sums", sums_mag, kc), exy);
            // Rounded terms, where the shifts are far from the values (same signs): about (2n + 2) u |Sx| |Sy|.
            if (k.term > 0) err = ir_.f(Prim::Fma, ir_.mul(sxa, sya), ir_.constant((d + 1.0) * k.term), err);
            V nn1 = ir_.mul(n, ir_.sub(n, ir_.constant(1))), mag = abs(cxy);
            guards.test(err, ir_.select(ir_.lt(mag, nn1), nn1, mag));
        }
        RefoldBuilder rf(ir_, d);
        const V latest_x = full ? shx : last_finite(xv, in_finite, "x " + what);
        const V latest_y = full ? shy : last_finite(yv, in_finite, "y " + what);
        auto new_shift = [&](IrBuilder& part, V value, V latest) {  // formed inside the refold, as for one window
            return part.select(rf.outer(part, in_finite), rf.outer(part, value), rf.outer(part, latest));
        };
        std::map<std::pair<const Node*, int>, V> memo;
        IrBuilder& lag = rf.lag();
        V xk = at_refold_lag(lag, x, 0, memo), yk = at_refold_lag(lag, y, 0, memo);
        V ok = lag.land(lag.row_in_pass(0), lag.land(is_finite(lag, xk), is_finite(lag, yk)));
        V zero_k = lag.constant(0);
        V xs = lag.select(ok, lag.sub(xk, new_shift(lag, xv, latest_x)), zero_k);
        V ys = lag.select(ok, lag.sub(yk, new_shift(lag, yv, latest_y)), zero_k);
        rf.refresh(xi, xs);
        rf.refresh(yi, ys);
        std::vector<std::pair<int, int>> folds(sums.size(), {-1, -1});
        folds[static_cast<std::size_t>(sx)] = {rf.sum(xs), -1};
        folds[static_cast<std::size_t>(sy)] = {rf.sum(ys), -1};
        folds[static_cast<std::size_t>(sxy)] = rf.sum_product(xs, ys, exact_);
        if (corr) {
            folds[static_cast<std::size_t>(sxx)] = rf.sum_product(xs, xs, exact_);
            folds[static_cast<std::size_t>(syy)] = rf.sum_product(ys, ys, exact_);
        }
        IrBuilder& ep = rf.epilogue();
        DdMath edd{ep, exact_};
        std::vector<Dd> S(sums.size());
        std::vector<std::pair<int, int>> exported(sums.size());
        for (std::size_t i = 0; i < sums.size(); ++i) {
            if (folds[i].first < 0) continue;
            S[i] = rf.fold(folds[i], exact_);
            exported[i] = {rf.export_value(S[i].hi), S[i].lo < 0 ? -1 : rf.export_value(S[i].lo)};
        }
        V ne = full ? ep.constant(d) : rf.outer(ep, nf);
        auto su = [&](int i) { return S[static_cast<std::size_t>(i)]; };
        const int e_cxy = rf.export_value(edd.centred(ne, su(sxy), su(sx), su(sy)));
        const int e_vx = corr ? rf.export_value(edd.centred(ne, su(sxx), su(sx), su(sx))) : -1;
        const int e_vy = corr ? rf.export_value(edd.centred(ne, su(syy), su(sy), su(sy))) : -1;
        const int e_shx = rf.export_value(new_shift(ep, xv, latest_x)), e_shy = rf.export_value(new_shift(ep, yv, latest_y));
        if (corr) {  // each bound's size from the rebuilt sums, in the order of the bounds
            guards.restart(rf, {magnitude(ep, su(sxx)), magnitude(ep, su(syy))});
        } else {
            guards.restart(rf, {magnitude(ep, su(sxy)), ep.add(magnitude(ep, su(sx)), magnitude(ep, su(sy)))});
        }
        rf.emit(guards.when(at_least(ir_, nf, full ? d : 2)));  // (windows that give a result, as for one window)
        sums.commit([&](int i, Dd running) { return rf.value(exported[static_cast<std::size_t>(i)], running); });
        ir_.store(shx_slot, rf.value(e_shx, shx));
        ir_.store(shy_slot, rf.value(e_shy, shy));
        guards.store(rf, true);
        g.cxy = rf.value(e_cxy, cxy);
        if (corr) {
            g.vx = rf.value(e_vx, vx);
            g.vy = rf.value(e_vy, vy);
        }
        it = pair_groups_.emplace(key, g).first;
    }
    const PairGroup& g = it->second;
    V nan = ir_.nan(), zero = ir_.constant(0);
    V enough = at_least(ir_, g.n, std::max(node->min_periods, 2));
    if (!g.full) enough = ir_.land(enough, ir_.b(Prim::CmpEQ, g.infinities, zero));
    if (node->op == Op::WCov) {  // (n Sxy - Sx Sy) / (n (n - 1))
        const double d = node->d;
        V scale = g.full ? ir_.constant(1.0 / (d * (d - 1)))  // correctly rounded
                         : ir_.f(Prim::Recip, ir_.mul(g.n, ir_.sub(g.n, ir_.constant(1))));
        return ir_.select(enough, ir_.mul(g.cxy, scale), nan);
    }
    // corr = (n Sxy - Sx Sy) / sqrt((n Sxx - Sx^2)(n Syy - Sy^2)). Divisions and square roots cost more than
    // the whole update on a CPU: a reciprocal square root estimate refined to a few ulp, on values the
    // selects below keep away from 0 and NaN.
    // (Float64 panels: one estimate per variance, since vx * vy overflows for values far below the ~1e154 at
    // which the sums of squares themselves do; float32 panels cannot get there.)
    V r = exact_ ? ir_.mul(ir_.mul(g.cxy, ir_.f(Prim::RSqrt, g.vx)), ir_.f(Prim::RSqrt, g.vy))
                 : ir_.mul(g.cxy, ir_.f(Prim::RSqrt, ir_.mul(g.vx, g.vy)));
    V one = ir_.constant(1), minus_one = ir_.constant(-1);
    r = ir_.f(Prim::Min, ir_.f(Prim::Max, r, minus_one), one);  // NaN r is masked below
    // Not a positive variance: 0 or below by rounding, or NaN where float64 sums overflowed (|x| beyond
    // about 1e154; the clamp would turn that NaN into -1).
    V degenerate = ir_.lor(ir_.lor(g.const_x, g.const_y),
                           ir_.lnot(ir_.land(ir_.lt(zero, g.vx), ir_.lt(zero, g.vy))));
    return ir_.select(ir_.land(enough, ir_.lnot(degenerate)), r, nan);
}

// Window min/max as a sparse table over the last d rows: M_k(t), the extreme of rows t - 2^k + 1 .. t, is
// the extreme of M_{k-1}(t) and M_{k-1}(t - 2^(k-1)); the window's is that of M_K(t) and M_K(t - (d - 2^K))
// for the largest 2^K <= d (the two overlap, which an extreme does not mind). O(log d) per row, and the
// same instructions on every row and column. The lowering before it kept the extreme and its row and
// rescanned the window when that row left it: rare for one column, but a warp runs 32 columns and one of
// them rescanned on almost every row (H200, 50,000 x 50,000: max w = 30 took 10 x its bandwidth floor,
// 2.0 x now; bench/RESULTS.md). NaN enters as the identity (-inf for max, +inf for min), and so do
// the rows before the pass (their ring entries read NaN); n says whether the window has a value. The
// identity is exact: a window whose only values are -inf has n >= 1 and the maximum -inf.
V Lowering::extreme(const Node* node, bool is_max) {
    const Node* x = node->args[0];
    const int d = node->d;
    const std::string what = fmt::format("{}(window({}, {}))", is_max ? "max" : "min", label(x), d);
    V xv = value(x, 0);
    V leave = history(x, d);
    V in_valid = ir_.notnan(xv);
    V n = Sums(ir_, false, in_valid, ir_.land(ir_.row_in_pass(d), ir_.notnan(leave))).count("n " + what);
    const V identity = ir_.constant(is_max ? -kInf : kInf);
    auto ext = [&](V a, V b) { return ir_.f(is_max ? Prim::Max : Prim::Min, a, b); };
    // m as it was `lag` rows ago (the identity before the pass).
    auto ago = [&](V m, int lag, int span) {
        const int r = ir_.new_ring(lag + 1, fmt::format("extreme of {} rows, {}", span, what));
        ir_.push(r, m);
        V old = ir_.ring_read(r, lag);
        return ir_.select(ir_.isnan(old), identity, old);
    };
    V m = ir_.select(in_valid, xv, identity);
    int span = 1;
    for (; 2 * span <= d; span *= 2) m = ext(m, ago(m, span, span));
    if (span < d) m = ext(m, ago(m, d - span, span));
    return ir_.select(at_least(ir_, n, std::max(node->min_periods, 1)), m, ir_.nan());
}

// ---------------------------------------------------------------------------------------------------
// The time-series operators Alpha101 adds: argmin/argmax, ts_rank, product, decay_linear
// (docs/operators.md has their definitions and costs).

// The number of valid rows in the window, n(t), and in the window one row before, n(t - 1) (the row that has
// just left included): small integers, exact, shared by the operators below over the same window. Rows before
// the pass count as missing, as the tables below treat them.
Lowering::WindowCount Lowering::window_count(const Node* x, int d) {
    const auto key = std::make_pair(x, d);
    if (auto it = window_counts_.find(key); it != window_counts_.end()) return it->second;
    const std::string what = fmt::format("window({}, {})", label(x), d);
    V xv = value(x, 0);
    V leave = history(x, d);
    V one = ir_.constant(1), zero = ir_.constant(0);
    V in = ir_.select(ir_.notnan(xv), one, zero);
    V out = ir_.select(ir_.land(ir_.row_in_pass(d), ir_.notnan(leave)), one, zero);
    const int slot = ir_.new_state(0, "valid n " + what);
    V before = ir_.load(slot);
    V n = ir_.add(before, ir_.sub(in, out));
    ir_.store(slot, n);
    return window_counts_[key] = WindowCount{n, before};
}

// Window argmin/argmax: extreme()'s sparse table with each entry's row carried along, O(log d) per row. An
// entry is (value, row); a missing row enters as (the identity, NaN), and ring entries from before the pass
// read (NaN, NaN). Combining an older entry with a newer one takes the newer only where its value is strictly
// better or the older has no row: ties go to the older row, so every table entry holds the oldest of its
// equal extremes, and so does the window's, made of two overlapping entries (a row in both is the same
// entry). The window's position of row r is r - t + d (1 = row t - d + 1, also where that row is before the
// panel's first). A real -inf (for argmax) beats the identity -inf because the identity has no row.
V Lowering::arg_extreme(const Node* node, bool is_max) {
    const Node* x = node->args[0];
    const int d = node->d;
    const char* name = is_max ? "argmax" : "argmin";
    const std::string what = fmt::format("{}(window({}, {}))", name, label(x), d);
    V xv = value(x, 0);
    V valid = ir_.notnan(xv);
    V t = ir_.row();
    struct Entry {
        V value, row;
    };
    Entry m{ir_.select(valid, xv, ir_.constant(is_max ? -kInf : kInf)), ir_.select(valid, t, ir_.nan())};
    auto combine = [&](Entry older, Entry newer) {
        V better = ir_.b(is_max ? Prim::CmpGT : Prim::CmpLT, newer.value, older.value);
        V take = ir_.lor(better, ir_.isnan(older.row));
        return Entry{ir_.select(take, newer.value, older.value), ir_.select(take, newer.row, older.row)};
    };
    auto ago = [&](Entry e, int lag, int span) {  // e as it was `lag` rows ago
        const int rv = ir_.new_ring(lag + 1, fmt::format("extreme of {} rows, {}", span, what));
        const int rr = ir_.new_ring(lag + 1, fmt::format("row of the extreme of {} rows, {}", span, what));
        ir_.push(rv, e.value);
        ir_.push(rr, e.row);
        return Entry{ir_.ring_read(rv, lag), ir_.ring_read(rr, lag)};
    };
    int span = 1;
    for (; 2 * span <= d; span *= 2) m = combine(ago(m, span, span), m);
    if (span < d) m = combine(ago(m, d - span, span), m);
    V position = ir_.add(ir_.sub(m.row, t), ir_.constant(d));
    const WindowCount c = window_count(x, d);
    return ir_.select(at_least(ir_, c.n, std::max(node->min_periods, 1)), position, ir_.nan());
}

// ts_rank: the newest value compared with each older row of the window, O(d) per row (2 comparisons and 2
// adds a row; NaN compares false, so missing rows drop out). Rank = values below + (values equal + 1) / 2
// = (below + at_or_below + 1) / 2, a half-integer, exact; divided by n once, as the reference rounds it.
// Rows before the pass are re-read where x is re-readable while n counts them missing: that only touches
// warm-up rows (a tile's first d - 1), whose values no output sees.
// Windows of kColumnStepWindow rows or more are not lowered here: the planner makes them column steps (O(log d) a
// row: runtime/cpu/column_ops.*, runtime/cuda/column_kernels.*), except where the CPU backend keeps them fused.
V Lowering::ts_rank(const Node* node) {
    const Node* x = node->args[0];
    const int d = node->d;
    V xv = value(x, 0);
    V one = ir_.constant(1);
    const auto key = std::make_pair(x, d);
    if (!rank_sums_.count(key)) {
        V below = ir_.constant(0), at_or_below = one;  // row t itself: equal
        for (int k = 1; k < d; ++k) {
            V v = history(x, k);
            below = ir_.add(below, ir_.to_f64(ir_.lt(v, xv)));
            at_or_below = ir_.add(at_or_below, ir_.to_f64(ir_.le(v, xv)));
        }
        rank_sums_[key] = ir_.add(ir_.add(below, at_or_below), one);
    }
    const WindowCount c = window_count(x, d);
    V rank = ir_.div(ir_.mul(rank_sums_[key], ir_.constant(0.5)), c.n);
    V ok = ir_.land(ir_.notnan(xv), at_least(ir_, c.n, std::max(node->min_periods, 1)));
    return ir_.select(ok, rank, ir_.nan());
}

// How window_blocks() reduces: the identity of each part, and the combination of an older block (of
// `older_rows` rows) with the newer block that follows it.
struct Lowering::BlockCombine {
    std::vector<V> identity;
    std::function<std::vector<V>(const std::vector<V>& older, const std::vector<V>& newer, int older_rows)> combine;
};

// A window of d rows as disjoint blocks of 2^k rows, for reductions that are associative but must not subtract
// what leaves the window (a product has no inverse where a 0 or an infinity leaves; a running sum keeps the
// rounding of a spike that has left: docs/numerics.md). B_k(t), the reduction of rows t - 2^k + 1 .. t, is
// combine(B_{k-1}(t - 2^(k-1)), B_{k-1}(t)), kept in a ring while it is read. The window is the blocks of d's
// binary digits, the smallest ending at row t and each larger one ending where the one before it starts, so
// that level k is read at most 2^k rows back: rings of 2^k + 1 entries, about 2d per part in all. floor(log2 d)
// combinations build the levels and popcount(d) - 1 join the window's blocks: O(log d) per row, the same
// instructions on every row. Entries from before the pass read as the identity (RowInPass), so a block reaching
// before the pass, or the panel, reduces the rows it has, as every window does.
std::vector<V> Lowering::window_blocks(const std::vector<V>& leaf, int d, const BlockCombine& how, const std::string& what) {
    int top = 0;
    while ((2 << top) <= d) ++top;  // 2^top <= d < 2^(top + 1)
    std::vector<int> reach(static_cast<std::size_t>(top + 1), 0);  // the furthest lag each level is read at
    std::vector<std::pair<int, int>> blocks;                       // the window's (level, lag), newest first
    for (int k = 0; k < top; ++k) reach[static_cast<std::size_t>(k)] = 1 << k;
    for (int k = 0, lag = 0; k <= top; ++k)
        if ((d >> k) & 1) {
            blocks.push_back({k, lag});
            reach[static_cast<std::size_t>(k)] = std::max(reach[static_cast<std::size_t>(k)], lag);
            lag += 1 << k;
        }
    std::vector<std::vector<V>> level(static_cast<std::size_t>(top + 1));
    std::vector<std::vector<int>> rings(static_cast<std::size_t>(top + 1));
    auto keep = [&](int k) {  // rings for level k's parts, pushed this row (parts that are one value share one)
        const auto lk = static_cast<std::size_t>(k);
        if (reach[lk] == 0) return;
        for (std::size_t p = 0; p < level[lk].size(); ++p) {
            int r = -1;
            for (std::size_t q = 0; q < p; ++q)
                if (level[lk][q] == level[lk][p]) r = rings[lk][q];
            if (r < 0) {
                r = ir_.new_ring(reach[lk] + 1, fmt::format("block of {} rows, part {}, {}", 1 << k, p, what));
                ir_.push(r, level[lk][p]);
            }
            rings[lk].push_back(r);
        }
    };
    std::map<int, V> in_pass;
    auto at = [&](int k, int lag) {  // B_k(t - lag)
        const auto lk = static_cast<std::size_t>(k);
        if (lag == 0) return level[lk];
        if (!in_pass.count(lag)) in_pass[lag] = ir_.row_in_pass(lag);
        std::vector<V> v;
        for (std::size_t p = 0; p < level[lk].size(); ++p) {
            V read = -1;
            for (std::size_t q = 0; q < p; ++q)
                if (rings[lk][q] == rings[lk][p] && how.identity[q] == how.identity[p]) read = v[q];  // a shared ring
            v.push_back(read >= 0 ? read : ir_.select(in_pass[lag], ir_.ring_read(rings[lk][p], lag), how.identity[p]));
        }
        return v;
    };
    level[0] = leaf;
    keep(0);
    for (int k = 1; k <= top; ++k) {
        level[static_cast<std::size_t>(k)] = how.combine(at(k - 1, 1 << (k - 1)), level[static_cast<std::size_t>(k - 1)], 1 << (k - 1));
        keep(k);
    }
    std::vector<V> window = at(blocks[0].first, blocks[0].second);
    for (std::size_t b = 1; b < blocks.size(); ++b)
        window = how.combine(at(blocks[b].first, blocks[b].second), window, 1 << blocks[b].first);
    return window;
}

// Product of the window's valid values (missing rows enter as 1), in float64 by window_blocks(): O(log d) per
// row, within about (d - 1) float64 roundings of the exact product. Where an intermediate product overflows
// (or underflows) although the whole window's would not, as 1e200 * 1e200 * 1e-200 * 1e-200, the result is
// inf (or 0, or NaN for inf * 0) where an exact product is 1: values that far apart do not occur in prices,
// volumes or returns.
V Lowering::product(const Node* node) {
    const Node* x = node->args[0];
    const int d = node->d;
    const std::string what = fmt::format("product(window({}, {}))", label(x), d);
    V xv = value(x, 0);
    V one = ir_.constant(1);
    BlockCombine how{{one}, [&](const std::vector<V>& older, const std::vector<V>& newer, int) {
                         return std::vector<V>{ir_.mul(older[0], newer[0])};
                     }};
    const std::vector<V> p = window_blocks({ir_.select(ir_.notnan(xv), xv, one)}, d, how, what);
    const WindowCount c = window_count(x, d);
    return ir_.select(at_least(ir_, c.n, node->min_periods), p[0], ir_.nan());  // min_periods 0, no value: 1
}

// decay_linear: sum(w x) / sum(w) over the valid values, w = the row's position 1 .. d in the window.
// Numerator by window_blocks(): a block keeps (sum of x, sum of x weighted by its position in the block), and
// an older block of L rows followed by a newer one gives (S_o + S_n, W_o + W_n + L S_n): no subtraction, so a
// spike that has left the window leaves nothing behind. The denominator, the sum of the valid rows' positions,
// is a small integer kept exactly by a running update: each row every position drops by one (minus the
// previous window's count; the row leaving had position 1) and a valid new row adds d.
V Lowering::decay_linear(const Node* node) {
    const Node* x = node->args[0];
    const int d = node->d;
    const std::string what = fmt::format("decay_linear(window({}, {}))", label(x), d);
    V xv = value(x, 0);
    V valid = ir_.notnan(xv);
    V zero = ir_.constant(0);
    BlockCombine how{{zero, zero}, [&](const std::vector<V>& older, const std::vector<V>& newer, int older_rows) {
                         V s = ir_.add(older[0], newer[0]);
                         V w = ir_.f(Prim::Fma, ir_.constant(older_rows), newer[0], ir_.add(older[1], newer[1]));
                         return std::vector<V>{s, w};
                     }};
    V s = ir_.select(valid, xv, zero);
    const std::vector<V> sums = window_blocks({s, s}, d, how, what);  // one row: weight 1
    const WindowCount c = window_count(x, d);
    const int slot = ir_.new_state(0, "sum of the valid rows' positions " + what);
    V weights = ir_.add(ir_.sub(ir_.load(slot), c.before), ir_.select(valid, ir_.constant(d), zero));
    ir_.store(slot, weights);
    return ir_.select(at_least(ir_, c.n, std::max(node->min_periods, 1)), ir_.div(sums[1], weights), ir_.nan());
}

// ---------------------------------------------------------------------------------------------------
// slope, rsquare, resid: least squares of the window's valid values y on their positions j = 1 (oldest) .. d
// (newest), from running sums over the finite rows: n, Sj, Sjj (small integers, exact), Sy, Syy and
// W = sum(j y). Each row every position drops by one, so W' = W - Sy(t - 1) + d y(t) (the row leaving had
// position 1, now 0): O(1) per row, like the moments. The centred sums Cjy = n W - Sj Sy, Cjj = n Sjj - Sj^2,
// Cyy = n Syy - Sy^2 give slope = Cjy / Cjj, rsquare = Cjy^2 / (Cjj Cyy), resid = y(t) - mean y - slope (d -
// mean j). Values are shifted as in moments() (double-double for float64); W carries the rounding of Sy, so its
// rounding bound adds var's and the sum's. The guard holds Cjy to the tolerance times what slope, rsquare and
// resid need of it (Cjj min(1, sd y) / 2d: an absolute error of slope times d, and one relative to the
// window's spread), Sy to n min(1, sd y) / 2 (resid's mean) and Syy to Cyy (as var); a refold rebuilds the
// sums from the window's rows, the positions read from a ring of row indices. A constant window gives slope 0,
// resid 0 and rsquare NaN exactly (the constancy tracker, as var); a window with an infinity NaN.
V Lowering::regression(const Node* node) {
    const Node* x = node->args[0];
    const int d = node->d;
    const auto key = std::make_pair(x, d);
    auto it = regression_groups_.find(key);
    if (it == regression_groups_.end()) {
        const std::string what = fmt::format("regression on window({}, {})", label(x), d);
        V xv = value(x, 0), leave = history(x, d);
        V in_valid = ir_.notnan(xv), out_valid = ir_.land(ir_.row_in_pass(d), ir_.notnan(leave));
        V in_finite = is_finite(ir_, xv), out_finite = ir_.land(ir_.row_in_pass(d), is_finite(ir_, leave));
        RegressionGroup g{};
        const int shift_slot = ir_.new_state(std::numeric_limits<double>::quiet_NaN(), "shift " + what);
        V shift = sticky_shift(ir_, shift_slot, xv, in_finite);
        Sums sums(ir_, exact_, in_finite, out_finite);
        // Float64 terms x - shift are kept exactly, as hi + lo (TwoSum), lo in the double-double sums' low parts: their
        // rounding, u |y| a term, is absolute where slope and resid need an absolute error of min(1, sd y) times the
        // tolerance, and a guard of it fired on every pass over volumes (y of some hundreds; docs/numerics.md).
        V yin, yout, lo_in = -1, lo_out = -1;
        if (exact_) {
            const Dd tin = sums.dd().difference(xv, shift), tout = sums.dd().difference(leave, shift);
            yin = sums.in(tin.hi);
            lo_in = sums.in(tin.lo);
            yout = sums.out(tout.hi);
            lo_out = sums.out(tout.lo);
            leaves_as_entered(ir_, lo_out, lo_in, d);
        } else {
            yin = sums.in(ir_.sub(xv, shift));
            yout = sums.out(ir_.sub(leave, shift));
        }
        leaves_as_entered(ir_, yout, yin, d);
        // A term's square and its product with its position d, as hi + lo: the exact product of hi plus hi's (rounded)
        // products with lo (u^2 y^2, the same instructions entering, leaving and in a refold).
        auto square = [&](IrBuilder& b, V hi, V lo) {
            V p = b.mul(hi, hi);
            V e = b.f(Prim::Fma, hi, hi, b.f(Prim::Neg, p));
            return Dd{p, b.f(Prim::Fma, b.mul(b.constant(2), hi), lo, e)};
        };
        auto times = [&](IrBuilder& b, V j, V hi, V lo) {
            V p = b.mul(j, hi);
            return Dd{p, b.f(Prim::Fma, j, lo, b.f(Prim::Fma, j, hi, b.f(Prim::Neg, p)))};
        };
        g.n = Sums(ir_, false, in_valid, out_valid).count("n " + what);
        V one = ir_.constant(1), zero = ir_.constant(0), dc = ir_.constant(d);
        V fin_in = ir_.select(in_finite, one, zero), fin_out = ir_.select(out_finite, one, zero);
        const int nf_slot = ir_.new_state(0, "finite n " + what), sj_slot = ir_.new_state(0, "sum of positions " + what),
                  sjj_slot = ir_.new_state(0, "sum of squared positions " + what);
        V nf0 = ir_.load(nf_slot), sj0 = ir_.load(sj_slot), sjj0 = ir_.load(sjj_slot);
        V nf = ir_.add(nf0, ir_.sub(fin_in, fin_out));
        V sj = ir_.add(ir_.sub(sj0, nf0), ir_.mul(dc, fin_in));
        V sjj = ir_.add(ir_.add(ir_.sub(sjj0, ir_.mul(ir_.constant(2), sj0)), nf0), ir_.mul(ir_.constant(static_cast<double>(d) * d), fin_in));
        ir_.store(nf_slot, nf);
        ir_.store(sj_slot, sj);
        ir_.store(sjj_slot, sjj);
        g.nf = nf;
        g.sj = sj;
        g.cjj = ir_.sub(ir_.mul(nf, sjj), ir_.mul(sj, sj));  // exact: below 2^53 for any d below 2^13
        const int s1 = exact_ ? sums.add_dd("sum " + what, {yin, lo_in}, {yout, lo_out}) : sums.add("sum " + what, yin, yout);
        const int s2 = exact_ ? sums.add_dd("sum of squares " + what, square(ir_, yin, lo_in), square(ir_, yout, lo_out))
                              : sums.add_product("sum of squares " + what, yin, yin, yout, yout);
        const int sw = sums.add_dd("sum of positions times values " + what, exact_ ? times(ir_, dc, yin, lo_in) : sums.dd().product(dc, yin),
                                   sums.previous(s1));
        g.is_const = constancy(ir_, xv, in_valid, ir_.row(), d, what);
        DdMath& dd = sums.dd();
        V cyy_run = dd.centred(nf, sums.running(s2), sums.running(s1), sums.running(s1));

        const GuardConstants k = GuardConstants::of(exact_, tolerance_);
        Guards guards(ir_, what);
        auto abs = [&](V v) { return ir_.f(Prim::Abs, v); };
        auto limit = [&](V v) { return ir_.select(ir_.isnan(v), ir_.constant(-kInf), v); };
        guards.test_bound("squares", squares_magnitude(ir_, sums.running(s2)), cyy_run, 3.0 * d * k.per_row, d * k.term_squares);
        V sya = magnitude(ir_, sums.running(s1)), wa = magnitude(ir_, sums.running(sw));
        V e1 = guards.bound("sum", sya);
        V ew = guards.bound("positional sum", ir_.add(ir_.add(wa, sya), ir_.add(abs(ir_.mul(dc, yin)), ir_.mul(ir_.constant(4), e1))));
        V root = ir_.f(Prim::Sqrt, ir_.select(ir_.lt(cyy_run, zero), zero, cyy_run));  // n sd(y), population
        V sd = ir_.mul(root, ir_.f(Prim::Recip, nf));
        V unit = ir_.select(ir_.lt(sd, one), sd, one);  // min(1, sd y)
        // Cjy = nf SW - Sj Sy: what SW and Sy carry (SW also takes each row's error of Sy: its 4 E1), weighted by the
        // window's own nf and Sj (not d and d^2: windows of few values, as at a pass's start, have small Cjj).
        // Float64 terms y_i rounded by d_i (|d_i| <= u |y_i|) move Cjy by nf sum (j_i - mean j) d_i, at most
        // u sqrt(nf Cjj Syy) (Cauchy-Schwarz; Syy the sum of squares), and Sy by at most u sqrt(nf Syy): each of those
        // takes half of its limit (the first version's linear bounds, (|SW| + d |Sy|) and |Sy| times u, fired on most
        // clean passes: docs/numerics.md), the rounding bounds the other half.
        const double share = k.term_squares > 0 && !exact_ ? 0.5 : 1.0;
        V syy = squares_magnitude(ir_, sums.running(s2));
        V lhs_jy = ir_.mul(ir_.constant(k.per_row / share), ir_.add(ir_.mul(nf, ew), ir_.mul(sj, e1)));
        V limit_jy = limit(ir_.mul(ir_.constant(0.5 / d), ir_.mul(g.cjj, unit)));
        guards.test(lhs_jy, limit_jy);
        V lhs_y = ir_.mul(ir_.constant(2.0 * k.per_row / share), e1);
        guards.test(lhs_y, limit(ir_.mul(ir_.constant(0.5), ir_.mul(nf, unit))));
        if (k.term_squares > 0 && !exact_) {  // (float64 terms are exact: above)
            V unit2 = ir_.mul(unit, unit);
            guards.test(ir_.mul(ir_.constant(static_cast<double>(d) * d * k.term_squares), ir_.mul(nf, syy)),
                        limit(ir_.mul(g.cjj, unit2)));
            guards.test(ir_.mul(ir_.constant(k.term_squares), syy), limit(ir_.mul(nf, unit2)));
        }

        // The refold: the window's finite values shifted by this row's (or the latest finite) value, and their
        // positions, d - k at lag k, from a ring of row indices.
        const int rows_ring = ir_.new_ring(d + 1, "row index, " + what);
        V t = ir_.row();
        ir_.push(rows_ring, t);
        RefoldBuilder rf(ir_, d);
        const V latest = last_finite(xv, in_finite, what);
        auto new_shift = [&](IrBuilder& part) { return part.select(rf.outer(part, in_finite), rf.outer(part, xv), rf.outer(part, latest)); };
        std::map<std::pair<const Node*, int>, V> memo;
        IrBuilder& lag = rf.lag();
        V xk = at_refold_lag(lag, x, 0, memo);
        V ok = lag.land(lag.row_in_pass(0), is_finite(lag, xk));
        V yk, yk_lo = -1;
        if (exact_) {
            const Dd tk = DdMath{lag, true}.difference(xk, new_shift(lag));
            yk = lag.select(ok, tk.hi, lag.constant(0));
            yk_lo = lag.select(ok, tk.lo, lag.constant(0));
        } else {
            yk = lag.select(ok, lag.sub(xk, new_shift(lag)), lag.constant(0));
        }
        V jk = lag.select(ok, lag.add(lag.sub(lag.ring_read(rows_ring, 0), rf.outer(lag, t)), lag.constant(d)), lag.constant(0));
        rf.refresh(yin, yk);
        std::pair<int, int> f1{rf.sum(yk), -1}, f2, fw;
        if (exact_) {
            rf.refresh(lo_in, yk_lo);
            f1.second = rf.sum(yk_lo);
            const Dd qk = square(lag, yk, yk_lo), wk = times(lag, jk, yk, yk_lo);
            f2 = {rf.sum(qk.hi), rf.sum(qk.lo)};
            fw = {rf.sum(wk.hi), rf.sum(wk.lo)};
        } else {
            f2 = rf.sum_product(yk, yk, false);
            fw = rf.sum_product(jk, yk, false);
        }
        IrBuilder& ep = rf.epilogue();
        Dd S1 = rf.fold(f1, exact_), S2 = rf.fold(f2, exact_), SW = rf.fold(fw, exact_);
        auto export_dd = [&](Dd v) { return std::make_pair(rf.export_value(v.hi), v.lo < 0 ? -1 : rf.export_value(v.lo)); };
        const auto e_s1 = export_dd(S1), e_s2 = export_dd(S2), e_sw = export_dd(SW);
        const int e_shift = rf.export_value(new_shift(ep));
        guards.restart(rf, {magnitude(ep, S2), magnitude(ep, S1), ep.add(magnitude(ep, SW), magnitude(ep, S1))});
        rf.emit(guards.when(at_least(ir_, nf, 2)));
        std::vector<Dd> finals(sums.size());
        sums.commit([&](int i, Dd running) {
            const auto e = i == s1 ? e_s1 : i == s2 ? e_s2 : e_sw;
            return finals[static_cast<std::size_t>(i)] = rf.value(e, running);
        });
        g.shift = rf.value(e_shift, shift);
        ir_.store(shift_slot, g.shift);
        guards.store(rf, true);
        const Dd Sy = finals[static_cast<std::size_t>(s1)];
        g.sy = dd.value(Sy);
        g.cjy = dd.centred(nf, finals[static_cast<std::size_t>(sw)], Dd{sj, exact_ ? zero : -1}, Sy);
        g.cyy = dd.centred(nf, finals[static_cast<std::size_t>(s2)], Sy, Sy);
        it = regression_groups_.emplace(key, g).first;
    }
    const RegressionGroup& g = it->second;
    V nan = ir_.nan(), zero = ir_.constant(0), one = ir_.constant(1);
    V enough = ir_.land(at_least(ir_, g.n, std::max(node->min_periods, 2)), ir_.b(Prim::CmpEQ, g.n, g.nf));
    V slope = ir_.div(g.cjy, g.cjj);
    switch (node->op) {
    case Op::WSlope: return ir_.select(enough, ir_.select(g.is_const, zero, slope), nan);
    case Op::WRSquare: {
        // slope * Cjy / Cyy: Cjy^2 and Cjj Cyy overflow long before the ratio does.
        V r = ir_.f(Prim::Min, ir_.mul(slope, ir_.div(g.cjy, g.cyy)), one);
        V ok = ir_.land(enough, ir_.land(ir_.lnot(g.is_const), ir_.lt(zero, g.cyy)));
        return ir_.select(ok, ir_.select(ir_.lt(r, zero), zero, r), nan);
    }
    case Op::WResid: {
        V xv = value(node->args[0], 0);
        V inv_n = ir_.f(Prim::Recip, g.nf);
        V fitted = ir_.add(ir_.mul(g.sy, inv_n), ir_.mul(slope, ir_.sub(ir_.constant(node->d), ir_.mul(g.sj, inv_n))));
        V r = ir_.sub(ir_.sub(xv, g.shift), fitted);
        return ir_.select(ir_.land(enough, ir_.notnan(xv)), ir_.select(g.is_const, zero, r), nan);
    }
    default: break;
    }
    throw BackendError(fmt::format("lowering: {} is not a regression", op_name(node->op)));
}

// median and quantile(q): the window's valid values kept sorted in d states, O(d) per row without a branch.
// Each row the value leaving is removed, s'[i] = s[i] < out ? s[i] : s[i + 1] (the first of equal values goes),
// and the one entering inserted, s''[i] = s'[i] < in ? s'[i] : max(s'[i - 1], in). Empty places hold +inf, and a
// missing value (NaN, or a row before the pass) enters or leaves as +inf, which changes nothing: a run of +inf
// at the end stays one, whether its entries are values or places, and the count n of valid values says which.
// Then numpy's / pandas' linear interpolation: position q (n - 1), the values at its floor and the next, read by
// a chain of selects (or, where only full windows answer, directly: the position is a constant). O(d) a row, with
// d states: an order-statistic structure (O(log d)) needs state read at a computed index, which the kernel IR
// does not have (every primitive's operands are fixed slots): long windows are column steps instead (ts_rank's
// comment above).
V Lowering::order_statistic(const Node* node) {
    const Node* x = node->args[0];
    const int d = node->d;
    const auto key = std::make_pair(x, d);
    V inf = ir_.constant(kInf);
    if (!sorted_windows_.count(key)) {
        const std::string what = fmt::format("window({}, {})", label(x), d);
        V xv = value(x, 0), leave = history(x, d);
        V vin = ir_.select(ir_.notnan(xv), xv, inf);
        V vout = ir_.select(ir_.land(ir_.row_in_pass(d), ir_.notnan(leave)), leave, inf);
        std::vector<int> slots;
        std::vector<V> s;
        for (int i = 0; i < d; ++i) {
            slots.push_back(ir_.new_state(kInf, fmt::format("sorted value {} of {}", i, what)));
            s.push_back(ir_.load(slots.back()));
        }
        s.push_back(inf);
        std::vector<V> r(static_cast<std::size_t>(d)), u(static_cast<std::size_t>(d));
        for (std::size_t i = 0; i < r.size(); ++i) r[i] = ir_.select(ir_.lt(s[i], vout), s[i], s[i + 1]);
        for (std::size_t i = 0; i < u.size(); ++i) {
            V above = i == 0 ? vin : ir_.f(Prim::Max, r[i - 1], vin);
            u[i] = ir_.select(ir_.lt(r[i], vin), r[i], above);
            ir_.store(slots[i], u[i]);
        }
        sorted_windows_[key] = u;
    }
    const std::vector<V>& u = sorted_windows_.at(key);
    const double q = node->op == Op::WMedian ? 0.5 : node->value;
    const WindowCount c = window_count(x, d);
    V vlo, vhi, frac;
    if (node->min_periods == d) {
        // Only full windows answer: n = d, so the position is a constant and the two values are states.
        const double pos = q * static_cast<double>(d - 1), lo = std::floor(pos);
        const auto i = static_cast<std::size_t>(lo);
        vlo = u[i];
        vhi = i + 1 < u.size() ? u[i + 1] : inf;
        frac = ir_.constant(pos - lo);
    } else {
        V pos = ir_.mul(ir_.constant(q), ir_.sub(c.n, ir_.constant(1)));
        V lo = ir_.f(Prim::Floor, pos);
        frac = ir_.sub(pos, lo);
        vlo = u[0];
        vhi = d > 1 ? u[1] : inf;
        for (int i = 1; i < d; ++i) {
            V at = ir_.b(Prim::CmpEQ, lo, ir_.constant(i));
            vlo = ir_.select(at, u[static_cast<std::size_t>(i)], vlo);
            vhi = ir_.select(at, i + 1 < d ? u[static_cast<std::size_t>(i + 1)] : inf, vhi);
        }
    }
    V exact = ir_.lor(ir_.b(Prim::CmpEQ, frac, ir_.constant(0)), ir_.b(Prim::CmpEQ, vhi, vlo));
    V r = ir_.select(exact, vlo, ir_.add(vlo, ir_.mul(frac, ir_.sub(vhi, vlo))));
    return ir_.select(at_least(ir_, c.n, std::max(node->min_periods, 1)), r, ir_.nan());
}

// ema(x, span): e = alpha x + (1 - alpha) e, started at the first valid value; a missing value leaves e as it
// was (and is its result). Unbounded memory: the kernel's halo is kSequentialHalo, so every pass starts at the
// column's first row (halo_of).
V Lowering::ema(const Node* node) {
    const Node* x = node->args[0];
    const double alpha = 2.0 / (node->value + 1.0);
    const std::string what = fmt::format("ema({}, {})", label(x), node->value);
    V xv = value(x, 0);
    V valid = ir_.notnan(xv);
    const int e_slot = ir_.new_state(std::numeric_limits<double>::quiet_NaN(), what);
    const int started_slot = ir_.new_state(0, "started " + what);
    V e = ir_.load(e_slot), started = ir_.load(started_slot);
    V next = ir_.add(ir_.mul(ir_.constant(alpha), xv), ir_.mul(ir_.constant(1.0 - alpha), e));
    V en = ir_.select(valid, ir_.select(ir_.b(Prim::CmpGT, started, ir_.constant(0)), next, xv), e);
    ir_.store(e_slot, en);
    ir_.store(started_slot, ir_.select(valid, ir_.constant(1), started));
    return en;
}

}  // namespace

double sums_tolerance(DType dtype) { return dtype == DType::F32 ? std::ldexp(1.0, -26) : std::ldexp(1.0, -40); }

void lower_region(const std::vector<const Node*>& roots, bool exact_sums, DType dtype, ir::Kernel& kernel) {
    Lowering l(kernel, roots, exact_sums, sums_tolerance(dtype));
    std::vector<V> outs;
    for (const Node* r : roots) outs.push_back(l.value(r, 0));
    for (std::size_t i = 0; i < outs.size(); ++i) l.ir().output(static_cast<int>(i), outs[i]);
    int halo = 0;
    for (const Node* r : roots) halo = std::max(halo, halo_of(r));
    kernel.halo = halo;
}

}  // namespace fj::codegen
