#include "codegen/cuda/pass_flags.hpp"

#include <algorithm>
#include <limits>

#include "codegen/cuda/printing.hpp"

namespace fj::codegen::detail {

using ir::Prim;

namespace {
const char* const kMinusInf = "__longlong_as_double(0xfff0000000000000LL)";
const char* const kPlusInfF = "__int_as_float(0x7f800000)";
}  // namespace

// Leaf j's bound is a row's own value (no rounding bound in it): the rows test b - l, exactly what they would test
// one at a time; the others take the rows' smallest limit (the bound's upper value is formed at the test).
bool PassFlags::row_test(const Test& t, std::size_t j) {
    return t.form.uppers[static_cast<std::size_t>(t.form.leaves[j].first)].kind == GuardUpper::Largest;
}

// Upper u is a Largest that a sum or product of bounds reads (kept as the rows' largest value).
bool PassFlags::largest_kept(const Test& t, std::size_t u) {
    if (t.form.uppers[u].kind != GuardUpper::Largest) return false;
    for (const GuardUpper& g : t.form.uppers)
        for (std::int32_t a : g.args)
            if (static_cast<std::size_t>(a) == u) return true;
    return false;
}

const PassFlags::Test* PassFlags::test_of(std::size_t flag) const {
    for (const Test& t : tests)
        if (static_cast<std::size_t>(t.flag) == flag) return &t;
    return nullptr;
}

const PassFlags::Sampled* PassFlags::sampled_state(std::int32_t slot) const {
    const auto it = sampled.find(slot);
    return it == sampled.end() ? nullptr : &it->second;
}

void PassFlags::declare(Source& out, int ind) const {
    for (const Test& t : tests) {
        for (std::size_t j = 0; j < t.form.leaves.size(); ++j) {
            if (row_test(t, j)) out.line(ind, "double fj_dif{}_{} = {};  // the largest bound - limit of the rows", t.flag, j, kMinusInf);
            else out.line(ind, "float fj_lim{}_{} = {};  // the smallest limit of the rows", t.flag, j, kPlusInfF);
        }
        for (std::size_t u = 0; u < t.form.uppers.size(); ++u)
            if (largest_kept(t, u)) out.line(ind, "double fj_max{}_{} = {};  // the largest bound of the rows", t.flag, u, kMinusInf);
    }
}

void PassFlags::row(Source& out, int ind, const Test& t, const std::string& row_ok) const {
    std::string ok = t.form.valid >= 0 ? fmt::format("v{}", t.form.valid) : std::string();
    if (!row_ok.empty()) ok = ok.empty() ? row_ok : ok + " && " + row_ok;
    auto keep = [&](const std::string& acc, const std::string& next) {
        if (ok.empty()) out.line(ind, "{} = {};", acc, next);
        else out.line(ind, "{} = {} ? {} : {};", acc, ok, next, acc);
    };
    // (fminf and fmax keep the accumulator where the row's value is NaN: a NaN limit or bound fires no row.)
    for (std::size_t j = 0; j < t.form.leaves.size(); ++j) {
        const auto [b, l] = t.form.leaves[j];
        if (row_test(t, j)) {
            // (b > l exactly where b - l > 0: a difference of unequal finite values is not 0; inf - inf and NaN are
            // NaN, which fmax skips, as b > l is false there.)
            const std::string acc = fmt::format("fj_dif{}_{}", t.flag, j);
            keep(acc, fmt::format("fmax({}, v{} - v{})", acc, t.form.uppers[static_cast<std::size_t>(b)].value, l));
            continue;
        }
        const std::string acc = fmt::format("fj_lim{}_{}", t.flag, j);
        keep(acc, fmt::format("fminf({}, FJ_F32_DOWN(v{}))", acc, l));
    }
    for (std::size_t u = 0; u < t.form.uppers.size(); ++u)
        if (largest_kept(t, u)) {
            const std::string acc = fmt::format("fj_max{}_{}", t.flag, u);
            keep(acc, fmt::format("fmax({}, v{})", acc, t.form.uppers[u].value));
        }
}

void PassFlags::test(Source& out, int ind, const ir::Kernel& k) const {
    for (const Test& t : tests) {
        std::vector<std::string> up(t.form.uppers.size());
        for (std::size_t i = 0; i < up.size(); ++i) {  // (parts before the sums and products of them)
            const GuardUpper& g = t.form.uppers[i];
            auto arg = [&](int a) { return up[static_cast<std::size_t>(g.args[static_cast<std::size_t>(a)])]; };
            switch (g.kind) {
            case GuardUpper::Last:
                up[i] = g.state >= 0 ? fmt::format("s{}", g.state) : lit(k.body[static_cast<std::size_t>(g.value)].imm);
                break;
            case GuardUpper::Largest: up[i] = largest_kept(t, i) ? fmt::format("fj_max{}_{}", t.flag, i) : std::string(); break;
            case GuardUpper::Add: up[i] = fmt::format("({} + {})", arg(0), arg(1)); break;
            case GuardUpper::Mul: up[i] = fmt::format("({} * {})", arg(0), arg(1)); break;
            case GuardUpper::Fma: up[i] = fmt::format("fma({}, {}, {})", arg(0), arg(1), arg(2)); break;
            }
        }
        for (std::size_t j = 0; j < t.form.leaves.size(); ++j) {
            if (row_test(t, j)) {
                out.line(ind, "fj_need |= fj_dif{}_{} > 0.0;", t.flag, j);
                out.line(ind, "fj_dif{}_{} = {};", t.flag, j, kMinusInf);
                continue;
            }
            out.line(ind, "fj_need |= {} > (double)fj_lim{}_{};", up[static_cast<std::size_t>(t.form.leaves[j].first)], t.flag, j);
            out.line(ind, "fj_lim{}_{} = {};", t.flag, j, kPlusInfF);
        }
        for (std::size_t u = 0; u < t.form.uppers.size(); ++u)
            if (largest_kept(t, u)) out.line(ind, "fj_max{}_{} = {};", t.flag, u, kMinusInf);
    }
}

void PassFlags::before_batches(Source& out, int ind) const {
    for (const auto& [slot, s] : sampled)
        out.line(ind, "s{} = fma({}, s{}, s{});  // sampled rounding bound: the sums before the batches", slot, lit(s.step),
                 s.size_state, slot);
}

PassFlags plan_pass_flags(const KernelFacts& facts, int batch_rows) {
    // (Generic kernels run a row at a time, CudaEmitOptions::one_loop: each row tests its own guards.)
    if (facts.options.one_loop && facts.options.strides.empty()) return {};
    PassFlags p;
    const ir::Kernel& k = facts.kernel;
    const std::vector<ir::Inst>& body = k.body;
    int flags = 0;
    for (std::size_t i = 0; i < body.size(); ++i) {
        if (!facts.live[i] || body[i].op != Prim::Flag) continue;
        ++flags;
        if (auto form = guard_form(body, body[i].a)) p.tests.push_back({static_cast<std::int32_t>(i), std::move(*form)});
    }
    if (p.tests.size() != static_cast<std::size_t>(flags)) return {};  // (then every flag is tested on its rows)
    if (batch_rows <= 1 || p.tests.empty() || static_cast<int>(p.tests.size()) != flags) return p;
    // Bounds to sample: E of a state with bound_rows >= the batch's rows, a Last upper of some test, whose values
    // feed nothing but E's own store and the flags' conditions (then the rows' values of E are not needed).
    for (const PassFlags::Test& t : p.tests)
        for (const GuardUpper& g : t.form.uppers) {
            if (g.kind != GuardUpper::Last || g.state < 0 || p.sampled.count(g.state)) continue;
            const ir::StateSlot& st = k.states[static_cast<std::size_t>(g.state)];
            if (st.bound_rows < batch_rows) continue;
            std::int32_t size = -1;
            double factor = 1;
            if (rounding_bound_state(body, g.value, &size, &factor) != g.state) continue;
            std::int32_t size_state = -1;
            for (const ir::Inst& y : body)
                if (y.op == Prim::StoreState && y.a == size && y.slot != g.state) size_state = y.slot;
            if (size_state < 0) continue;
            // What E's values feed: through arithmetic and comparisons to Flags only.
            std::vector<bool> feeds(body.size(), false);
            bool only_flags = true;
            for (std::size_t i = 0; i < body.size() && only_flags; ++i) {
                const ir::Inst& y = body[i];
                if (!facts.live[i]) continue;
                auto from = [&](std::int32_t o) { return o >= 0 && feeds[static_cast<std::size_t>(o)]; };
                const bool in = (y.op == Prim::LoadState && y.slot == g.state) || from(y.a) || from(y.b) || from(y.c);
                if (!in) continue;
                if (y.op == Prim::StoreState) only_flags = y.slot == g.state;
                else if (y.op == Prim::Flag) continue;
                else if (y.op == Prim::Output || y.op == Prim::RingPush || y.op == Prim::Refold || y.op == Prim::RefoldValue) only_flags = false;
                else feeds[i] = true;
            }
            if (!only_flags) continue;
            // Samples U rows apart: an interval of L <= d rows holds at least max(1, floor(L / U)) of them,
            // so min(d, 2U - 1) times the samples' sizes bound the sizes of the rows (kernel_ir.hpp).
            p.sampled[g.state] = {size, size_state, factor * std::min(st.bound_rows, 2 * batch_rows - 1)};
        }
    return p;
}

}  // namespace fj::codegen::detail
