#include "codegen/kernel_ir.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "dsl/error.hpp"

namespace fj::ir {

const char* prim_name(Prim p) {
    static const char* const names[] = {
#define FJ_PRIM_NAME(p) #p,
        FJ_PRIMS(FJ_PRIM_NAME)
#undef FJ_PRIM_NAME
    };
    return names[static_cast<int>(p)];
}

namespace {
// FNV-1a, 64 bit: stable across runs and builds (std::hash is not), so it can key a disk cache.
struct Fnv {
    std::uint64_t h = 0xcbf29ce484222325ULL;
    void bytes(const void* p, std::size_t n) {
        const auto* c = static_cast<const unsigned char*>(p);
        for (std::size_t i = 0; i < n; ++i) { h ^= c[i]; h *= 0x100000001b3ULL; }
    }
    template <class T> void pod(const T& v) { bytes(&v, sizeof v); }
    void str(const std::string& s) { pod(s.size()); bytes(s.data(), s.size()); }
};
}  // namespace

std::uint64_t Kernel::hash() const {
    Fnv f;
    f.str(name);
    f.pod(inputs.size());
    for (const auto& s : inputs) f.str(s);
    f.pod(outputs.size());
    for (const auto& s : outputs) f.str(s);
    f.pod(states.size());
    for (const auto& s : states) {
        f.pod(s.init);
        if (s.bound_rows) f.pod(s.bound_rows);  // (kernels without rounding bounds hash as before)
    }
    f.pod(rings.size());
    for (const auto& r : rings) f.pod(r.size);
    f.pod(body.size());
    for (const Inst& i : body) {
        f.pod(i.op); f.pod(i.type); f.pod(i.a); f.pod(i.b); f.pod(i.c); f.pod(i.slot); f.pod(i.lag); f.pod(i.imm);
    }
    f.pod(echoes.size());
    for (const Echo& e : echoes) {
        f.pod(e.later); f.pod(e.earlier); f.pod(e.lag);
    }
    f.pod(refolds.size());
    for (const Refold& r : refolds) {
        f.pod(r.rows); f.pod(r.per_lag);
        f.pod(r.body.size());
        for (const Inst& i : r.body) {
            f.pod(i.op); f.pod(i.type); f.pod(i.a); f.pod(i.b); f.pod(i.c); f.pod(i.slot); f.pod(i.lag); f.pod(i.imm);
        }
        f.pod(r.sums.size());
        for (std::int32_t v : r.sums) f.pod(v);
        f.pod(r.exports.size());
        for (std::int32_t v : r.exports) f.pod(v);
        f.pod(r.refreshes.size());
        for (const Refresh& x : r.refreshes) { f.pod(x.main); f.pod(x.value); }
    }
    f.pod(halo);
    f.pod(max_input_lag);
    return f.h;
}

std::string Kernel::dump() const {
    std::string out = fmt::format("kernel {}  halo {}  inputs [{}]  outputs [{}]\n", name, halo,
                                  fmt::join(inputs, ", "), fmt::join(outputs, ", "));
    for (std::size_t s = 0; s < states.size(); ++s)
        out += fmt::format("  state s{} = {}    ; {}{}\n", s, states[s].init, states[s].what,
                           states[s].bound_rows ? fmt::format(" (sampled every {} rows)", states[s].bound_rows) : "");
    for (std::size_t r = 0; r < rings.size(); ++r)
        out += fmt::format("  ring r{}[{}]    ; {}\n", r, rings[r].size, rings[r].what);
    auto line = [&](const std::vector<Inst>& insts, std::size_t k, const char* indent, const char* lag_var) {
        const Inst& i = insts[k];
        std::string lhs = i.type == Type::Void ? "      " : fmt::format("  %{:<3} = ", k);
        std::string args;
        auto add = [&](const std::string& s) { args += (args.empty() ? "" : ", ") + s; };
        switch (i.op) {
        case Prim::Const: add(fmt::format("{}", i.imm)); break;
        case Prim::Input: add(fmt::format("{}[t-{}{}]", inputs[i.slot], i.lag, lag_var)); break;
        case Prim::Output: add(outputs[i.slot]); break;
        case Prim::LoadState: case Prim::StoreState: add(fmt::format("s{}", i.slot)); break;
        case Prim::RingRead: add(fmt::format("r{}[t-{}{}]", i.slot, i.lag, lag_var)); break;
        case Prim::RingPush: add(fmt::format("r{}", i.slot)); break;
        case Prim::RowInPass: add(fmt::format("t-{}{}", i.lag, lag_var)); break;
        case Prim::Refold: case Prim::Flag: add(fmt::format("refold {}", i.slot)); break;
        case Prim::RefoldValue: add(fmt::format("refold {} export {}", i.slot, i.lag)); break;
        case Prim::Fold: add(fmt::format("sum {}{}", i.slot, i.imm != 0 ? " (low part)" : "")); break;
        case Prim::Outer: add(fmt::format("main %{}", i.a)); break;
        default: break;
        }
        if (i.op != Prim::Outer)
            for (int o : {i.a, i.b, i.c})
                if (o >= 0) add(fmt::format("%{}", o));
        out += fmt::format("{}{}{}{} {}\n", indent, lhs.size() > 6 ? "" : "  ", lhs, prim_name(i.op), args);
    };
    for (std::size_t k = 0; k < body.size(); ++k) line(body, k, "", "");
    for (const Echo& e : echoes) out += fmt::format("  echo %{} = %{} at t-{}\n", e.later, e.earlier, e.lag);
    for (std::size_t r = 0; r < refolds.size(); ++r) {
        const Refold& f = refolds[r];
        out += fmt::format("  refold {}: lags k = 0 .. {}; sums [{}], exports [{}]\n", r, f.rows - 1, fmt::join(f.sums, ", "),
                           fmt::join(f.exports, ", "));
        for (std::size_t k = 0; k < f.body.size(); ++k) {
            if (static_cast<std::int32_t>(k) == f.per_lag) out += "    epilogue:\n";
            line(f.body, k, "    ", k < static_cast<std::size_t>(f.per_lag) ? "-k" : "");
        }
        for (const Refresh& x : f.refreshes) out += fmt::format("    refreshes %{} from %{}\n", x.main, x.value);
    }
    return out;
}

namespace {
// Where a list of instructions sits: the main body, a refold's per-lag part, or its epilogue.
enum class Part { Main, PerLag, Epilogue };

class Verifier {
public:
    explicit Verifier(const Kernel& k) : k_(k) {}

    void run() {
        for (std::size_t r = 0; r < k_.rings.size(); ++r)
            if (k_.rings[r].size < 1) throw BackendError(fmt::format("kernel IR: kernel {}: ring {} size {}", k_.name, r, k_.rings[r].size));
        refold_at_.assign(k_.refolds.size(), -1);
        check(k_.body, 0, k_.body.size(), Part::Main, nullptr);
        const auto n = static_cast<std::int32_t>(k_.body.size());
        for (const Echo& e : k_.echoes)
            if (e.later < 0 || e.earlier < 0 || e.later >= n || e.earlier >= n || e.lag < 1)
                throw BackendError(fmt::format("kernel IR: kernel {}: echo %{} = %{} at lag {} out of range", k_.name, e.later,
                                               e.earlier, e.lag));
        for (std::size_t r = 0; r < k_.refolds.size(); ++r) {
            const Refold& f = k_.refolds[r];
            where_ = fmt::format("refold {}: ", r);
            if (refold_at_[r] < 0) fail("no Refold instruction runs it");
            if (f.rows < 1 || f.per_lag < 0 || static_cast<std::size_t>(f.per_lag) > f.body.size()) fail("bad rows or per-lag part");
            check(f.body, 0, static_cast<std::size_t>(f.per_lag), Part::PerLag, &f);
            check(f.body, static_cast<std::size_t>(f.per_lag), f.body.size(), Part::Epilogue, &f);
            auto in_part = [&](std::int32_t v, std::size_t lo, std::size_t hi, const char* what) {
                if (v < static_cast<std::int32_t>(lo) || v >= static_cast<std::int32_t>(hi) || f.body[static_cast<std::size_t>(v)].type != Type::F64)
                    fail(fmt::format("{} %{} is not an F64 value of its part", what, v));
            };
            for (std::int32_t v : f.sums) in_part(v, 0, static_cast<std::size_t>(f.per_lag), "sum");
            for (std::int32_t v : f.exports) in_part(v, static_cast<std::size_t>(f.per_lag), f.body.size(), "export");
            for (const Refresh& x : f.refreshes) {
                in_part(x.value, 0, static_cast<std::size_t>(f.per_lag), "refreshed value");
                if (x.main < 0 || x.main >= n) fail(fmt::format("refreshed main value %{} out of range", x.main));
            }
        }
    }

private:
    [[noreturn]] void fail(const std::string& what) const {
        throw BackendError(fmt::format("kernel IR: kernel {}: {}{}", k_.name, where_, what));
    }
    [[noreturn]] void bad_inst(const std::vector<Inst>& body, std::size_t i, const std::string& what) const {
        fail(fmt::format("instruction {} ({}): {}", i, prim_name(body[i].op), what));
    }

    void check(const std::vector<Inst>& body, std::size_t begin, std::size_t end, Part part, const Refold* refold) {
        // Operands point backwards (SSA) at values of the expected type within the same part: Folds carry the
        // per-lag part's sums into the epilogue, Outers the main body's values into a refold.
        auto operand = [&](std::size_t i, std::int32_t x, Type want) {
            if (x < static_cast<std::int32_t>(begin) || static_cast<std::size_t>(x) >= i) bad_inst(body, i, fmt::format("operand {} out of range", x));
            if (body[static_cast<std::size_t>(x)].type != want) bad_inst(body, i, fmt::format("operand {} has the wrong type", x));
        };
        auto slot = [&](std::size_t i, std::size_t n, const char* what) {
            const Inst& in = body[i];
            if (in.slot < 0 || static_cast<std::size_t>(in.slot) >= n) bad_inst(body, i, fmt::format("{} slot {} out of range", what, in.slot));
        };
        auto only = [&](std::size_t i, bool ok, const char* where) {
            if (!ok) bad_inst(body, i, fmt::format("allowed only in {}", where));
        };
        const int extra_lag = refold ? refold->rows - 1 : 0;
        for (std::size_t i = begin; i < end; ++i) {
            const Inst& in = body[i];
            switch (in.op) {
            case Prim::Const:
                break;
            case Prim::RowIndex:
                only(i, part == Part::Main, "the main body");
                break;
            case Prim::Input:
                only(i, part != Part::Epilogue, "the main body and a refold's per-lag part");
                slot(i, k_.inputs.size(), "input");
                if (in.lag < 0) bad_inst(body, i, "negative lag");
                break;
            case Prim::RowInPass:
                only(i, part != Part::Epilogue, "the main body and a refold's per-lag part");
                if (in.lag < 0) bad_inst(body, i, "negative lag");
                break;
            case Prim::LoadState:
                only(i, part == Part::Main, "the main body");
                slot(i, k_.states.size(), "state");
                break;
            case Prim::StoreState:
                only(i, part == Part::Main, "the main body");
                slot(i, k_.states.size(), "state");
                operand(i, in.a, Type::F64);
                break;
            case Prim::RingRead:
                only(i, part != Part::Epilogue, "the main body and a refold's per-lag part");
                slot(i, k_.rings.size(), "ring");
                if (in.lag < 0 || in.lag + extra_lag >= k_.rings[static_cast<std::size_t>(in.slot)].size) bad_inst(body, i, "lag outside the ring");
                break;
            case Prim::RingPush:
                only(i, part == Part::Main, "the main body");
                slot(i, k_.rings.size(), "ring");
                operand(i, in.a, Type::F64);
                break;
            case Prim::Output:
                only(i, part == Part::Main, "the main body");
                slot(i, k_.outputs.size(), "output");
                operand(i, in.a, Type::F64);
                break;
            case Prim::Refold:
                only(i, part == Part::Main, "the main body");
                slot(i, k_.refolds.size(), "refold");
                operand(i, in.a, Type::Bool);
                if (refold_at_[static_cast<std::size_t>(in.slot)] >= 0) bad_inst(body, i, "a second Refold instruction for the refold");
                refold_at_[static_cast<std::size_t>(in.slot)] = static_cast<std::int32_t>(i);
                break;
            case Prim::Flag:
                only(i, part == Part::Main, "the main body");
                operand(i, in.a, Type::Bool);
                break;
            case Prim::RefoldValue:
                only(i, part == Part::Main, "the main body");
                slot(i, k_.refolds.size(), "refold");
                if (refold_at_[static_cast<std::size_t>(in.slot)] < 0) bad_inst(body, i, "before its Refold instruction");
                if (in.lag < 0 || static_cast<std::size_t>(in.lag) >= k_.refolds[static_cast<std::size_t>(in.slot)].exports.size())
                    bad_inst(body, i, "export out of range");
                operand(i, in.a, Type::F64);
                break;
            case Prim::Outer: {
                only(i, part != Part::Main, "a refold");
                const std::int32_t at = refold_at_[static_cast<std::size_t>(refold - k_.refolds.data())];
                if (in.a < 0 || in.a >= at || k_.body[static_cast<std::size_t>(in.a)].type != in.type)
                    bad_inst(body, i, fmt::format("main-body value {} is not one computed before the Refold, of its type", in.a));
                break;
            }
            case Prim::Fold:
                only(i, part == Part::Epilogue, "a refold's epilogue");
                if (in.slot < 0 || static_cast<std::size_t>(in.slot) >= refold->sums.size()) bad_inst(body, i, "sum out of range");
                break;
            case Prim::Add: case Prim::Sub: case Prim::Mul: case Prim::Div: case Prim::Pow:
            case Prim::Min: case Prim::Max:
            case Prim::CmpLT: case Prim::CmpLE: case Prim::CmpGT: case Prim::CmpGE: case Prim::CmpEQ:
            case Prim::CmpONE: case Prim::CmpUNE:
                operand(i, in.a, Type::F64);
                operand(i, in.b, Type::F64);
                break;
            case Prim::Neg: case Prim::Abs: case Prim::Sqrt: case Prim::Exp: case Prim::Log:
            case Prim::Floor: case Prim::Recip: case Prim::RSqrt: case Prim::IsNaN:
                operand(i, in.a, Type::F64);
                break;
            case Prim::And: case Prim::Or:
                operand(i, in.a, Type::Bool);
                operand(i, in.b, Type::Bool);
                break;
            case Prim::Not: case Prim::BoolToF64:
                operand(i, in.a, Type::Bool);
                break;
            case Prim::Fma:
                operand(i, in.a, Type::F64);
                operand(i, in.b, Type::F64);
                operand(i, in.c, Type::F64);
                break;
            case Prim::Select:
                operand(i, in.a, Type::Bool);
                operand(i, in.b, in.type);
                operand(i, in.c, in.type);
                break;
            }
        }
    }

    const Kernel& k_;
    std::vector<std::int32_t> refold_at_;  // the Refold instruction of each refold
    std::string where_;
};
}  // namespace

void verify(const Kernel& k) { Verifier(k).run(); }

namespace {
// without_refolds(), and with `flags` flag_refolds(): Refold instructions become Flags, live like outputs.
Kernel strip_refolds(const Kernel& k, bool flags) {
    if (k.refolds.empty()) return k;
    const std::size_t n = k.body.size();
    // Forward each RefoldValue to its fallback (through chains of them).
    std::vector<std::int32_t> fwd(n);
    for (std::size_t i = 0; i < n; ++i) {
        fwd[i] = static_cast<std::int32_t>(i);
        if (k.body[i].op == Prim::RefoldValue) fwd[i] = fwd[static_cast<std::size_t>(k.body[i].a)];
    }
    auto operand = [&](std::int32_t x) { return x < 0 ? x : fwd[static_cast<std::size_t>(x)]; };
    // Liveness from the outputs backwards, to a fixed point over states and rings: a store is live when a
    // live instruction loads its state, a push when a live instruction reads its ring.
    std::vector<char> live(n, 0), state_live(k.states.size(), 0), ring_live(k.rings.size(), 0);
    for (bool changed = true; changed;) {
        changed = false;
        for (std::size_t i = n; i-- > 0;) {
            const Inst& in = k.body[i];
            bool want = live[i] != 0;
            if (!want) {
                if (in.op == Prim::Output || (flags && in.op == Prim::Refold)) want = true;
                else if (in.op == Prim::StoreState) want = state_live[static_cast<std::size_t>(in.slot)] != 0;
                else if (in.op == Prim::RingPush) want = ring_live[static_cast<std::size_t>(in.slot)] != 0;
            }
            if (!want || (in.op == Prim::Refold && !flags) || in.op == Prim::RefoldValue) continue;
            if (!live[i]) { live[i] = 1; changed = true; }
            if (in.op == Prim::LoadState && !state_live[static_cast<std::size_t>(in.slot)]) { state_live[static_cast<std::size_t>(in.slot)] = 1; changed = true; }
            if (in.op == Prim::RingRead && !ring_live[static_cast<std::size_t>(in.slot)]) { ring_live[static_cast<std::size_t>(in.slot)] = 1; changed = true; }
            for (std::int32_t o : {in.a, in.b, in.c})
                if (o >= 0 && !live[static_cast<std::size_t>(operand(o))]) { live[static_cast<std::size_t>(operand(o))] = 1; changed = true; }
        }
    }
    Kernel out = k;
    out.body.clear();
    out.states.clear();
    out.rings.clear();
    out.echoes.clear();
    out.refolds.clear();
    std::vector<std::int32_t> state_map(k.states.size(), -1), ring_map(k.rings.size(), -1), inst_map(n, -1);
    for (std::size_t s = 0; s < k.states.size(); ++s)
        if (state_live[s]) { state_map[s] = static_cast<std::int32_t>(out.states.size()); out.states.push_back(k.states[s]); }
    for (std::size_t r = 0; r < k.rings.size(); ++r)
        if (ring_live[r]) { ring_map[r] = static_cast<std::int32_t>(out.rings.size()); out.rings.push_back(k.rings[r]); }
    for (std::size_t i = 0; i < n; ++i) {
        if (!live[i]) continue;
        Inst in = k.body[i];
        for (std::int32_t* o : {&in.a, &in.b, &in.c})
            if (*o >= 0) *o = inst_map[static_cast<std::size_t>(operand(*o))];
        if (in.op == Prim::LoadState || in.op == Prim::StoreState) in.slot = state_map[static_cast<std::size_t>(in.slot)];
        if (in.op == Prim::RingRead || in.op == Prim::RingPush) in.slot = ring_map[static_cast<std::size_t>(in.slot)];
        if (in.op == Prim::Refold) in.op = Prim::Flag;  // (its slot names the refold it stands for)
        inst_map[i] = static_cast<std::int32_t>(out.body.size());
        out.body.push_back(in);
    }
    for (const Echo& e : k.echoes) {
        const std::int32_t later = inst_map[static_cast<std::size_t>(e.later)], earlier = inst_map[static_cast<std::size_t>(e.earlier)];
        if (later >= 0 && earlier >= 0) out.echoes.push_back({later, earlier, e.lag});
    }
    out.max_input_lag = 0;
    for (const Inst& in : out.body)
        if (in.op == Prim::Input) out.max_input_lag = std::max(out.max_input_lag, in.lag);
    return out;
}
}  // namespace

Kernel without_refolds(const Kernel& k) { return strip_refolds(k, false); }
Kernel flag_refolds(const Kernel& k) { return strip_refolds(k, true); }

}  // namespace fj::ir
