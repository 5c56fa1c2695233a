// Facts about a kernel's IR for the CUDA kernel shapes (see kernel_facts.hpp).
#include "codegen/cuda/kernel_facts.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "dsl/error.hpp"

namespace fj::codegen::detail {

void bad_ir(const ir::Kernel& k, std::size_t i, const std::string& what) {
    throw BackendError(fmt::format("CUDA emitter: kernel {}: instruction {} ({}): {}", k.name, i,
                                   ir::prim_name(k.body[i].op), what));
}

KernelFacts::KernelFacts(const ir::Kernel& k, const CudaEmitOptions& o) : kernel(k), options(o) {
    // What is wrong with the IR itself (operands, slots, rings, lags, echoes): kernel_ir.hpp's verifier.
    ir::verify(kernel);
    refold_at.assign(kernel.refolds.size(), -1);
    refold_values.assign(kernel.refolds.size(), {});
    for (std::size_t i = 0; i < kernel.body.size(); ++i) {
        const Inst& x = kernel.body[i];
        if (x.op == Prim::Refold) refold_at[static_cast<std::size_t>(x.slot)] = static_cast<std::int32_t>(i);
        if (x.op == Prim::RefoldValue) refold_values[static_cast<std::size_t>(x.slot)].push_back(static_cast<std::int32_t>(i));
    }
    batch_rows = std::clamp(options.unroll, 1, 16);
    rings.resize(kernel.rings.size());
    for (std::size_t r = 0; r < kernel.rings.size(); ++r) rings[r].size = kernel.rings[r].size;
    for (RingInfo& r : rings) r.in_regs = r.size <= options.reg_ring_max;
    // Liveness: effects are live, and so is every operand of a live instruction. Dead values are not
    // emitted (NVRTC would warn about each, and parse them for nothing).
    live = live_from_effects({});
    loads = loads_of(live);
    const auto n_live = static_cast<std::size_t>(std::count(live.begin(), live.end(), true));
    // Each row of a batch is a copy of the body: big bodies (many fused outputs) batch fewer rows, so
    // NVRTC's time stays reasonable; they have many loads per row in flight anyway.
    big_body = n_live > kBigBody && !options.big_body_shapes;
    if (n_live > 1500) batch_rows = 1;
    else if (n_live > 600) batch_rows = std::min(batch_rows, 2);
    else if (n_live > kBigBody) batch_rows = std::min(batch_rows, 4);
    integer_values();
    float_values();
    narrow_values();
    sticky_states();
    run_counters();
    pass_only_lags();
    fast_rsqrt = options.dtype == DType::F32 && !big_body &&
                 std::any_of(kernel.body.begin(), kernel.body.end(), [&](const Inst& x) {
                     return x.op == Prim::RSqrt && live[static_cast<std::size_t>(&x - kernel.body.data())];
                 });
}

// A window's leaving value is read only where RowInPass(d) holds (lower_ops.cpp): in a pass's first d
// rows it lies before the pass, and every use masks it. Where d is at least the halo, the batches
// before out_begin make that RowInPass false and NVRTC drops the loads; a shorter window under a
// longer halo (std(window(A, 5)) inside a 10-row mean: halo 13) would still read rows before the pass
// for nothing. An input load at lag L is pass-only when its value cannot change any effect while
// RowInPass(L) is false: every use is either fixed then (an And with a RowInPass(L' >= L), and Ands of
// such), the taken-when-true operand of a Select whose condition is, or a value of the same kind.
// (Rows of a batch share a load where u - lag agree, so the column scan skips a batch's load at offset
// u - lag only if all its readers allow it: ColumnScanPlan::pass_only.)
void KernelFacts::pass_only_lags() {
    const std::size_t n = kernel.body.size();
    std::vector<std::vector<std::size_t>> users(n);
    for (std::size_t i = 0; i < n; ++i)
        if (live[i]) for_operands(i, [&](std::int32_t o) { users[static_cast<std::size_t>(o)].push_back(i); });
    // L -> the values whose content no effect reads while RowInPass(L) is false (the same for every
    // load at lag L), found from the last instruction up.
    std::map<int, std::vector<bool>> unread_by_lag;
    auto unread_while_out = [&](int L) -> const std::vector<bool>& {
        auto [it, fresh] = unread_by_lag.try_emplace(L, n, false);
        if (!fresh) return it->second;
        std::vector<bool> off(n, false);  // Bool values false while RowInPass(L) is false
        for (std::size_t k = 0; k < n; ++k) {
            const Inst& y = kernel.body[k];
            off[k] = (y.op == Prim::RowInPass && y.lag >= L) ||
                     (y.op == Prim::And && (off[static_cast<std::size_t>(y.a)] || off[static_cast<std::size_t>(y.b)]));
        }
        std::vector<bool>& unread = it->second;
        for (std::size_t k = n; k-- > 0;) {
            const Inst& y = kernel.body[k];
            if (!live[k] || y.op == Prim::StoreState || y.op == Prim::RingPush || y.op == Prim::Output || y.op == Prim::Flag) continue;
            const auto v = static_cast<std::int32_t>(k);
            unread[k] = std::all_of(users[k].begin(), users[k].end(), [&](std::size_t u) {
                const Inst& z = kernel.body[u];
                const bool masked = z.op == Prim::Select && off[static_cast<std::size_t>(z.a)] && z.b == v &&
                                    z.a != v && z.c != v;
                return off[u] || masked || unread[u];
            });
        }
        return unread;
    };
    std::map<std::pair<int, int>, bool>& by_lag = pass_only_lag;  // (input, lag) -> every load of it is pass-only
    for (std::size_t i = 0; i < n; ++i) {
        const Inst& x = kernel.body[i];
        if (!live[i] || x.op != Prim::Input) continue;
        const bool ok = x.lag > 0 && unread_while_out(x.lag)[i];
        auto [it, fresh] = by_lag.try_emplace({x.slot, x.lag}, ok);
        if (!fresh) it->second = it->second && ok;
    }
}

std::vector<bool> KernelFacts::live_from_effects(const std::vector<bool>& given) const {
    std::vector<bool> live(kernel.body.size(), false);
    for (std::size_t i = 0; i < kernel.body.size(); ++i)
        live[i] = kernel.body[i].op == Prim::StoreState || kernel.body[i].op == Prim::RingPush || kernel.body[i].op == Prim::Output ||
                  kernel.body[i].op == Prim::Flag;
    operand_closure(live, [&](std::size_t i) { return !given.empty() && given[i] ? Reach::Leaf : Reach::Expand; });
    return live;
}

std::set<std::pair<int, int>> KernelFacts::loads_of(const std::vector<bool>& live) const {
    std::set<std::pair<int, int>> loads;
    for (std::size_t i = 0; i < kernel.body.size(); ++i)
        if (live[i] && kernel.body[i].op == Prim::Input) loads.insert({kernel.body[i].slot, kernel.body[i].lag});
    return loads;
}

bool KernelFacts::operand_closure(std::vector<bool>& need, const std::function<Reach(std::size_t)>& reach) const {
    for (std::size_t i = need.size(); i-- > 0;) {
        if (!need[i]) continue;
        const Reach r = reach(i);
        if (r == Reach::Fail) return false;
        if (r == Reach::Leaf) continue;
        for_operands(i, [&](std::int32_t o) { need[static_cast<std::size_t>(o)] = true; });
    }
    return true;
}

// Float32 panels: selects, mins and maxes whose results only reach outputs (through more of the
// same) can run on values already rounded to float32: rounding is monotonic and keeps NaN, so
// rounding first gives the same float as rounding the float64 result (the clamp of corr to [-1, 1],
// the NaN of an incomplete window). One conversion, then float32 selects and FMNMX, instead of
// float64 compares and selects of register pairs.
void KernelFacts::narrow_values() {
    const std::size_t n = kernel.body.size();
    narrow.assign(n, false);
    if (options.dtype != DType::F32) return;
    std::vector<std::vector<std::size_t>> uses(n);
    for (std::size_t i = 0; i < n; ++i)
        if (live[i]) for_operands(i, [&](std::int32_t o) { uses[static_cast<std::size_t>(o)].push_back(i); });
    for (std::size_t i = n; i-- > 0;) {
        const Inst& x = kernel.body[i];
        if (!live[i] || int_value[i] || fmat[i] || x.type != Type::F64) continue;
        if (x.op != Prim::Select && x.op != Prim::Min && x.op != Prim::Max) continue;
        bool ok = !uses[i].empty();
        for (std::size_t u : uses[i]) {
            const Inst& y = kernel.body[u];
            ok = ok && (y.op == Prim::Output || y.op == Prim::IsNaN || (narrow[u] && (y.op != Prim::Select || y.a != static_cast<std::int32_t>(i))));
        }
        narrow[i] = ok;
    }
    for (std::size_t i = 0; i < n; ++i)
        if (narrow[i]) fmat[i] = true;
}

// A state with init NaN whose one store is `isnan(s) && c ? x : s`, or RefoldValue(r, e, that select) where
// refold r's export e is `c ? x : s` (the main body's value, computed before the Refold) with a test c that
// no NaN x passes (an ordered comparison reading x): then the state, once a number, stays one, and a
// refold only moves it to the row's valid value. Its Refold's block stores the export (sticky_refold);
// that is right only where no instruction after the Refold reads the state or its select (the store's
// RefoldValue aside), which is checked.
void KernelFacts::sticky_states() {
    const std::size_t n = kernel.body.size();
    sticky_state.assign(kernel.states.size(), false);
    sticky_refold.assign(kernel.states.size(), -1);
    sticky_of.assign(n, -1);
    std::vector<int> stores(kernel.states.size(), 0);
    for (const Inst& x : kernel.body)
        if (x.op == Prim::StoreState) ++stores[x.slot];
    auto load_of = [&](std::int32_t o, int st) {
        return o >= 0 && kernel.body[o].op == Prim::LoadState && kernel.body[o].slot == st;
    };
    for (std::size_t i = 0; i < n; ++i) {
        const Inst& x = kernel.body[i];
        if (x.op != Prim::StoreState || stores[x.slot] != 1 || !std::isnan(kernel.states[x.slot].init)) continue;
        if (int_state[x.slot]) continue;
        const int st = x.slot;
        std::int32_t select = x.a, through = -1;
        if (kernel.body[static_cast<std::size_t>(select)].op == Prim::RefoldValue) {
            through = select;
            select = kernel.body[static_cast<std::size_t>(select)].a;
        }
        const Inst& sel = kernel.body[select];
        if (sel.op != Prim::Select || !load_of(sel.c, st)) continue;
        const Inst& c = kernel.body[sel.a];
        if (c.op != Prim::And) continue;
        std::int32_t test = -1;
        for (std::int32_t o : {c.a, c.b})
            if (kernel.body[o].op == Prim::IsNaN && load_of(kernel.body[o].a, st)) test = o;
        if (test < 0) continue;
        if (through >= 0 && (!kStickyThroughRefolds || !refold_keeps_sticky(through, select, test == c.a ? c.b : c.a, st))) continue;
        sticky_state[st] = true;
        sticky_refold[static_cast<std::size_t>(st)] = through;
        sticky_of[static_cast<std::size_t>(select)] = st;
        sticky_of[static_cast<std::size_t>(test)] = st;
    }
    live_sticky.assign(kernel.states.size(), false);
    for (std::size_t i = 0; i < n; ++i)
        if (live[i] && kernel.body[i].op == Prim::Select && sticky_of[i] >= 0) live_sticky[sticky_of[i]] = true;
}

bool KernelFacts::refold_keeps_sticky(std::int32_t value, std::int32_t select, std::int32_t valid, int st) const {
    const Inst& rv = kernel.body[static_cast<std::size_t>(value)];
    const ir::Refold& r = kernel.refolds[static_cast<std::size_t>(rv.slot)];
    const std::int32_t at = refold_at[static_cast<std::size_t>(rv.slot)];
    const Inst& ex = r.body[static_cast<std::size_t>(r.exports[static_cast<std::size_t>(rv.lag)])];
    const Inst& sel = kernel.body[static_cast<std::size_t>(select)];
    auto is_state = [&](std::int32_t o) {
        const Inst& y = kernel.body[static_cast<std::size_t>(o)];
        return o == select || (y.op == Prim::LoadState && y.slot == st);
    };
    // The export: `valid ? x : s`, x the select's value and s a value that is a number wherever the state is
    // (the state, its select, the last valid x: a state stored as `valid ? x : itself`, or such a select),
    // as a main-body select read by an Outer, or as a select of Outers in the epilogue.
    std::function<bool(std::int32_t, int)> kept = [&](std::int32_t o, int depth) {
        if (o < 0 || depth > 4) return false;
        if (is_state(o)) return true;
        const Inst& y = kernel.body[static_cast<std::size_t>(o)];
        if (y.op == Prim::Select) return y.a == valid && y.b == sel.b && kept(y.c, depth + 1);
        if (y.op != Prim::LoadState) return false;
        std::int32_t store = -1;  // the state's one store
        for (std::size_t i = 0; i < kernel.body.size(); ++i)
            if (kernel.body[i].op == Prim::StoreState && kernel.body[i].slot == y.slot) store = store < 0 ? static_cast<std::int32_t>(i) : -2;
        if (store < 0) return false;
        const Inst& v = kernel.body[static_cast<std::size_t>(kernel.body[static_cast<std::size_t>(store)].a)];
        const Inst& back = kernel.body[static_cast<std::size_t>(v.c)];
        return v.op == Prim::Select && v.a == valid && v.b == sel.b && back.op == Prim::LoadState && back.slot == y.slot;
    };
    bool ok = false;
    if (ex.op == Prim::Outer) {
        ok = kept(ex.a, 0);
    } else if (ex.op == Prim::Select) {
        auto outer = [&](std::int32_t o) {
            const Inst& y = r.body[static_cast<std::size_t>(o)];
            return o >= r.per_lag && y.op == Prim::Outer ? y.a : -1;
        };
        ok = outer(ex.a) == valid && outer(ex.b) == sel.b && kept(outer(ex.c), 0);
    }
    if (!ok) return false;
    // No NaN x passes `valid`: an ordered comparison of x (or of its absolute value or negation), or an And
    // with such an operand.
    auto reads_x = [&](std::int32_t o) {
        if (o == sel.b) return true;
        const Inst& y = kernel.body[static_cast<std::size_t>(o)];
        return (y.op == Prim::Abs || y.op == Prim::Neg) && y.a == sel.b;
    };
    std::function<bool(std::int32_t, int)> excludes_nan = [&](std::int32_t c, int depth) {
        const Inst& v = kernel.body[static_cast<std::size_t>(c)];
        if (v.op == Prim::And) return depth < 4 && (excludes_nan(v.a, depth + 1) || excludes_nan(v.b, depth + 1));
        const bool ordered = v.op == Prim::CmpLT || v.op == Prim::CmpLE || v.op == Prim::CmpGT || v.op == Prim::CmpGE ||
                             v.op == Prim::CmpEQ || v.op == Prim::CmpONE;
        return ordered && (reads_x(v.a) || reads_x(v.b));
    };
    if (!excludes_nan(valid, 0)) return false;
    // Nothing after the Refold reads the state (its loads, its select) but the store's RefoldValue.
    for (std::size_t i = static_cast<std::size_t>(at) + 1; i < kernel.body.size(); ++i) {
        const Inst& y = kernel.body[i];
        if (static_cast<std::int32_t>(i) == value) continue;
        if (y.op == Prim::LoadState && y.slot == st) return false;
        bool reads = false;
        for_operands(i, [&](std::int32_t o) { reads = reads || is_state(o); });
        if (reads) return false;
    }
    return true;
}

// Run counters: int32 states whose one store is `c ? 0 : s + 1` (rows since a change, since an
// invalid value), read only by that `+ 1`. In a batch they are kept as q = s - (u + 1) after row u,
// which a reset sets to the constant -(u + 1) and every other row leaves alone; `s` after row u is
// q + u + 1, so a comparison of it with a constant becomes one of q with another constant; advance()
// adds the batch's rows back. That saves the add per row and counter (corr: two of them).
// Not in big bodies, which keep the codegen v5 shapes.
void KernelFacts::run_counters() {
    counter_select.assign(kernel.states.size(), -1);
    counter_state.assign(kernel.body.size(), -1);
    counter_part.assign(kernel.body.size(), false);
    if (big_body) return;
    const std::vector<int> uses = use_counts();
    std::vector<int> stores(kernel.states.size(), 0);
    for (std::size_t i = 0; i < kernel.body.size(); ++i)
        if (live[i] && kernel.body[i].op == Prim::StoreState) ++stores[static_cast<std::size_t>(kernel.body[i].slot)];
    for (std::size_t i = 0; i < kernel.body.size(); ++i) {
        const Inst& st = kernel.body[i];
        if (!live[i] || st.op != Prim::StoreState || stores[st.slot] != 1) continue;
        const std::int32_t load = counter_load(i, uses);
        if (load < 0) continue;
        // Every other load of the state would see q instead of s.
        bool other_loads = false;
        for (std::size_t j = 0; j < kernel.body.size(); ++j)
            other_loads |= live[j] && j != static_cast<std::size_t>(load) && kernel.body[j].op == Prim::LoadState &&
                           kernel.body[j].slot == st.slot;
        if (other_loads) continue;
        const Inst& sel = kernel.body[static_cast<std::size_t>(st.a)];
        counter_select[static_cast<std::size_t>(st.slot)] = st.a;
        counter_state[static_cast<std::size_t>(st.a)] = st.slot;
        counter_part[static_cast<std::size_t>(load)] = counter_part[static_cast<std::size_t>(sel.c)] = true;
    }
}

std::vector<int> KernelFacts::use_counts() const {
    std::vector<int> uses(kernel.body.size(), 0);
    for (std::size_t i = 0; i < kernel.body.size(); ++i)
        if (live[i]) for_operands(i, [&](std::int32_t o) { ++uses[static_cast<std::size_t>(o)]; });
    return uses;
}

std::int32_t KernelFacts::counter_load(std::size_t store, const std::vector<int>& uses) const {
    const Inst& st = kernel.body[store];
    if (st.op != Prim::StoreState || !int32_state[st.slot]) return -1;
    auto is_const = [&](std::int32_t o, double c) {
        return o >= 0 && kernel.body[static_cast<std::size_t>(o)].op == Prim::Const &&
               kernel.body[static_cast<std::size_t>(o)].imm == c && is_int(o);
    };
    const Inst& sel = kernel.body[static_cast<std::size_t>(st.a)];
    if (sel.op != Prim::Select || !is_int(st.a) || !is_const(sel.b, 0.0) || sel.c < 0) return -1;
    const Inst& add = kernel.body[static_cast<std::size_t>(sel.c)];
    if (add.op != Prim::Add || uses[static_cast<std::size_t>(sel.c)] != 1) return -1;
    const std::int32_t load = is_const(add.a, 1.0) ? add.b : is_const(add.b, 1.0) ? add.a : -1;
    if (load < 0 || kernel.body[static_cast<std::size_t>(load)].op != Prim::LoadState ||
        kernel.body[static_cast<std::size_t>(load)].slot != st.slot || uses[static_cast<std::size_t>(load)] != 1)
        return -1;
    return load;
}

int KernelFacts::sticky_value(std::int32_t i) const {
    const Inst& x = kernel.body[static_cast<std::size_t>(i)];
    if (x.op == Prim::LoadState) return sticky_state[x.slot] ? x.slot : -1;
    if (x.op == Prim::Select) return sticky_of[static_cast<std::size_t>(i)];
    return -1;
}

bool KernelFacts::float_repr(double v) {
    return std::isnan(v) || static_cast<double>(static_cast<float>(v)) == v;
}

// Which float32-exact values live in float registers (float32 panels only). A state that only
// holds input values (the previous row's value of a constancy tracker) is kept as a float when no
// one needs it as a double, and so is a select of float32 values: their moves, selects and
// comparisons then cost float32 instructions and no conversions. Anything that needs the float64
// value keeps the float64 form (a conversion per row would cost more than it saves).
void KernelFacts::float_values() {
    const std::size_t n = kernel.body.size();
    fexact.assign(n, false);
    fmat.assign(n, false);
    float_state.assign(kernel.states.size(), false);
    state_fexact.assign(kernel.states.size(), false);
    if (options.dtype != DType::F32) return;
    for (std::size_t st = 0; st < kernel.states.size(); ++st)
        float_state[st] = !int_state[st] && float_repr(kernel.states[st].init);
    // Whether value i is a float32 number, given its operands' answers `e` and the states' (in order).
    auto exact = [&](std::size_t i, const std::vector<bool>& e) {
        const Inst& x = kernel.body[i];
        if (x.type != Type::F64 || int_value[i]) return false;
        switch (x.op) {
        case Prim::Input: return true;
        case Prim::Const: return float_repr(x.imm);
        case Prim::Abs: case Prim::Neg: return static_cast<bool>(e[x.a]);
        case Prim::Select: return e[x.b] && e[x.c];
        case Prim::LoadState: return static_cast<bool>(float_state[x.slot]);
        case Prim::RefoldValue: {  // its fallback and the export: an Outer of a float32 number, or such a constant
            const ir::Refold& r = kernel.refolds[static_cast<std::size_t>(x.slot)];
            const Inst& y = r.body[static_cast<std::size_t>(r.exports[static_cast<std::size_t>(x.lag)])];
            const bool ex = (y.op == Prim::Outer && y.type == Type::F64 && e[static_cast<std::size_t>(y.a)]) ||
                            (y.op == Prim::Const && float_repr(y.imm));
            return ex && e[x.a];
        }
        default: return false;
        }
    };
    // Which states only ever hold float32 numbers: every store is one, given the others.
    for (bool changed = true; changed;) {
        changed = false;
        std::vector<bool> e(n, false);
        for (std::size_t i = 0; i < n; ++i) {
            const Inst& x = kernel.body[i];
            e[i] = exact(i, e);
            if (x.op == Prim::StoreState && float_state[x.slot] && !e[x.a]) {
                float_state[x.slot] = false;
                changed = true;
            }
        }
    }
    state_fexact = float_state;
    std::vector<bool> no_fmat(n, false);  // selects that must stay double
    for (bool changed = true; changed;) {
        changed = false;
        for (std::size_t i = 0; i < n; ++i) {
            const Inst& x = kernel.body[i];
            const bool e = exact(i, fexact);
            fexact[i] = e;
            fmat[i] = e && live[i] &&
                       (x.op == Prim::LoadState ||
                        (x.op == Prim::Select && !no_fmat[i] && float_available(x.b) && float_available(x.c)));
        }
        std::vector<bool> needd(n, false);
        for (std::size_t i = 0; i < n; ++i) {
            if (!live[i]) continue;
            const Inst& x = kernel.body[i];
            for (std::int32_t o : {x.a, x.b, x.c})
                if (o >= 0 && fmat[static_cast<std::size_t>(o)] && !float_use(i, o)) needd[static_cast<std::size_t>(o)] = true;
            // A float state's stores must be float values.
            if (x.op == Prim::StoreState && float_state[x.slot] && !float_available(x.a)) {
                float_state[x.slot] = false;
                changed = true;
            }
        }
        for (std::size_t i = 0; i < n; ++i) {
            if (!fmat[i] || !needd[i]) continue;
            const Inst& x = kernel.body[i];
            if (x.op == Prim::LoadState) float_state[x.slot] = false;
            else no_fmat[i] = true;
            changed = true;
        }
    }
}

bool KernelFacts::float_available(std::int32_t i) const {
    if (i >= 0 && !narrow.empty() && narrow[static_cast<std::size_t>(i)]) return true;
    if (i < 0 || !fexact[static_cast<std::size_t>(i)]) return false;
    const Inst& x = kernel.body[static_cast<std::size_t>(i)];
    switch (x.op) {
    case Prim::Input: case Prim::Const: return true;
    case Prim::Abs: case Prim::Neg: return float_available(x.a);
    default: return fmat[static_cast<std::size_t>(i)];
    }
}

bool KernelFacts::float_use(std::size_t i, std::int32_t o) const {
    const Inst& x = kernel.body[i];
    if (is_compare(x.op))
        return float_available(x.a) && float_available(x.b) &&
               !(kernel.body[x.a].op == Prim::Const && kernel.body[x.b].op == Prim::Const);
    switch (x.op) {
    case Prim::IsNaN: case Prim::Output: return true;
    case Prim::StoreState: return float_state[x.slot];
    case Prim::Select: return fmat[i] && o != x.a;
    default: return false;
    }
}

// Which values are integers of bounded magnitude. A value qualifies when its bound (largest possible
// magnitude) is known and below 2^52: integral constants, 0/1 from booleans, row numbers (below 2^40
// rows), sums, differences and selects of those, and states that only ever count: every store is the
// state plus or minus a bounded integer (so a state moves by at most that much per row), or a bounded
// integer. A state's bound is its init plus 2^41 times its largest step. The fixpoint starts from
// every state with an integral init and drops those with any other store.
void KernelFacts::integer_values() {
    const std::size_t n = kernel.body.size();
    constexpr double kLimit = 4503599627370496.0;  // 2^52
    constexpr double kRows = 1099511627776.0;      // 2^40
    std::vector<double> bound(n, -1);              // -1: not an integer value
    // States live for one pass: at most kCudaMaxTileRows output rows after the halo's warm-up rows.
    const double pass_rows = static_cast<double>(kCudaMaxTileRows) + std::max(0, kernel.halo);
    depends_on_state.assign(n, false);
    for (std::size_t i = 0; i < n; ++i) {
        const Inst& x = kernel.body[i];
        bool r = x.op == Prim::LoadState;
        for_operands(i, [&](std::int32_t o) { r = r || depends_on_state[static_cast<std::size_t>(o)]; });
        depends_on_state[i] = r;
    }
    std::vector<double> state_bound(kernel.states.size(), -1);
    int_state.assign(kernel.states.size(), false);
    for (std::size_t st = 0; st < kernel.states.size(); ++st) {
        const double init = kernel.states[st].init;
        int_state[st] = std::isfinite(init) && std::floor(init) == init && std::fabs(init) < kLimit;
    }
    auto compute = [&] {
        for (std::size_t i = 0; i < n; ++i) {
            const Inst& x = kernel.body[i];
            auto b = [&](std::int32_t o) { return bound[static_cast<std::size_t>(o)]; };
            double r = -1;
            if (x.type == Type::F64) switch (x.op) {
                case Prim::Const:
                    if (std::isfinite(x.imm) && std::floor(x.imm) == x.imm && std::fabs(x.imm) < kLimit) r = std::fabs(x.imm);
                    break;
                case Prim::BoolToF64: r = 1; break;
                case Prim::RowIndex: r = kRows; break;
                case Prim::LoadState: r = int_state[x.slot] ? state_bound[x.slot] : -1; break;
                case Prim::Neg: r = b(x.a); break;
                case Prim::Add: case Prim::Sub:
                    if (b(x.a) >= 0 && b(x.b) >= 0) r = b(x.a) + b(x.b);
                    break;
                case Prim::Select:
                    if (b(x.b) >= 0 && b(x.c) >= 0) r = std::max(b(x.b), b(x.c));
                    break;
                default: break;
                }
            bound[i] = r >= 0 && r < kLimit ? r : -1;
        }
    };
    for (bool changed = true; changed;) {
        changed = false;
        // Bounds of states from their steps, with the current guesses (a state's own load counts 0).
        for (std::size_t st = 0; st < kernel.states.size(); ++st)
            if (int_state[st]) state_bound[st] = 0;
        compute();
        std::vector<double> step(kernel.states.size(), 0);
        for (std::size_t i = 0; i < n; ++i) {
            const Inst& x = kernel.body[i];
            if (x.op != Prim::StoreState || !int_state[x.slot]) continue;
            const Inst& v = kernel.body[static_cast<std::size_t>(x.a)];
            auto own = [&](std::int32_t o) {
                const Inst& l = kernel.body[static_cast<std::size_t>(o)];
                return l.op == Prim::LoadState && l.slot == x.slot;
            };
            auto no_state = [&](std::int32_t o) { return bound[static_cast<std::size_t>(o)] >= 0 && !reads_state(o); };
            // How far one store can move the state: 0 for itself, the bound of what it adds, the bound
            // of a value it is reset to; a select moves it as far as its farther branch.
            std::function<double(std::int32_t)> step_of = [&](std::int32_t o) -> double {
                const Inst& e = kernel.body[static_cast<std::size_t>(o)];
                if (own(o)) return 0;
                if ((e.op == Prim::Add || e.op == Prim::Sub) && own(e.a) && no_state(e.b)) return bound[e.b];
                if (e.op == Prim::Add && own(e.b) && no_state(e.a)) return bound[e.a];
                if (e.op == Prim::Select && e.type == Type::F64) {
                    const double a = step_of(e.b), c = step_of(e.c);
                    return a >= 0 && c >= 0 ? std::max(a, c) : -1;
                }
                if (no_state(o)) return bound[o];  // a reset to a bounded value
                return -1;
            };
            (void)v;
            const double d = step_of(x.a);
            if (d < 0) {
                int_state[x.slot] = false;
                changed = true;
            } else {
                step[x.slot] = std::max(step[x.slot], d);
            }
        }
        if (changed) continue;
        for (std::size_t st = 0; st < kernel.states.size(); ++st) {
            if (!int_state[st]) continue;
            const double sb = std::fabs(kernel.states[st].init) + pass_rows * step[st];
            if (!(sb < kLimit)) {
                int_state[st] = false;
                changed = true;
            }
            state_bound[st] = sb;
        }
        if (!changed) compute();  // final bounds with the states' bounds
    }
    int_value.assign(n, false);
    need_double.assign(n, false);
    for (std::size_t i = 0; i < n; ++i) int_value[i] = live[i] && bound[i] >= 0;
    // 32-bit where the bound allows: one instruction per add or compare instead of two.
    constexpr double k2e31 = 2147483648.0;
    int32.assign(n, false);
    for (std::size_t i = 0; i < n; ++i) int32[i] = int_value[i] && bound[i] < k2e31;
    int32_state.assign(kernel.states.size(), false);
    for (std::size_t st = 0; st < kernel.states.size(); ++st)
        int32_state[st] = int_state[st] && state_bound[st] < k2e31;
    // Whose float64 value is needed: any live use other than integer arithmetic, integer compares
    // and stores into integer states.
    for (std::size_t i = 0; i < n; ++i) {
        if (!live[i]) continue;
        const Inst& x = kernel.body[i];
        const bool int_use = int_value[i] || (is_compare(x.op) && is_int(x.a) && is_int(x.b)) ||
                             (x.op == Prim::StoreState && int_state[x.slot]) || (x.op == Prim::IsNaN && is_int(x.a));
        if (int_use) {
            if (x.op == Prim::Select && int_value[i]) continue;  // its condition is a Bool
            continue;
        }
        for_operands(i, [&](std::int32_t o) {
            if (int_value[static_cast<std::size_t>(o)]) need_double[static_cast<std::size_t>(o)] = true;
        });
    }
}

bool KernelFacts::is_compare(Prim p) {
    return p == Prim::CmpLT || p == Prim::CmpLE || p == Prim::CmpGT || p == Prim::CmpGE || p == Prim::CmpEQ ||
           p == Prim::CmpONE || p == Prim::CmpUNE;
}

}  // namespace fj::codegen::detail
