#include "codegen/kernel_ir.hpp"

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
    for (const auto& s : states) f.pod(s.init);
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
    f.pod(halo);
    f.pod(max_input_lag);
    return f.h;
}

std::string Kernel::dump() const {
    std::string out = fmt::format("kernel {}  halo {}  inputs [{}]  outputs [{}]\n", name, halo,
                                  fmt::join(inputs, ", "), fmt::join(outputs, ", "));
    for (std::size_t s = 0; s < states.size(); ++s)
        out += fmt::format("  state s{} = {}    ; {}\n", s, states[s].init, states[s].what);
    for (std::size_t r = 0; r < rings.size(); ++r)
        out += fmt::format("  ring r{}[{}]    ; {}\n", r, rings[r].size, rings[r].what);
    for (std::size_t k = 0; k < body.size(); ++k) {
        const Inst& i = body[k];
        std::string lhs = i.type == Type::Void ? "      " : fmt::format("  %{:<3} = ", k);
        std::string args;
        auto add = [&](const std::string& s) { args += (args.empty() ? "" : ", ") + s; };
        switch (i.op) {
        case Prim::Const: add(fmt::format("{}", i.imm)); break;
        case Prim::Input: add(fmt::format("{}[t-{}]", inputs[i.slot], i.lag)); break;
        case Prim::Output: add(outputs[i.slot]); break;
        case Prim::LoadState: case Prim::StoreState: add(fmt::format("s{}", i.slot)); break;
        case Prim::RingRead: add(fmt::format("r{}[t-{}]", i.slot, i.lag)); break;
        case Prim::RingPush: add(fmt::format("r{}", i.slot)); break;
        case Prim::RowInPass: add(fmt::format("t-{}", i.lag)); break;
        default: break;
        }
        for (int o : {i.a, i.b, i.c})
            if (o >= 0) add(fmt::format("%{}", o));
        out += fmt::format("{}{}{} {}\n", lhs.size() > 6 ? "" : "  ", lhs, prim_name(i.op), args);
    }
    for (const Echo& e : echoes) out += fmt::format("  echo %{} = %{} at t-{}\n", e.later, e.earlier, e.lag);
    return out;
}

namespace {
[[noreturn]] void bad_inst(const Kernel& k, std::size_t i, const std::string& what) {
    throw BackendError(fmt::format("kernel IR: kernel {}: instruction {} ({}): {}", k.name, i, prim_name(k.body[i].op), what));
}
}  // namespace

void verify(const Kernel& k) {
    for (std::size_t r = 0; r < k.rings.size(); ++r)
        if (k.rings[r].size < 1) throw BackendError(fmt::format("kernel IR: kernel {}: ring {} size {}", k.name, r, k.rings[r].size));
    // Operands point backwards (SSA) at values of the expected type.
    auto operand = [&](std::size_t i, std::int32_t x, Type want) {
        if (x < 0 || static_cast<std::size_t>(x) >= i) bad_inst(k, i, fmt::format("operand {} out of range", x));
        if (k.body[static_cast<std::size_t>(x)].type != want) bad_inst(k, i, fmt::format("operand {} has the wrong type", x));
    };
    auto slot = [&](std::size_t i, std::size_t n, const char* what) {
        const Inst& in = k.body[i];
        if (in.slot < 0 || static_cast<std::size_t>(in.slot) >= n) bad_inst(k, i, fmt::format("{} slot {} out of range", what, in.slot));
    };
    for (std::size_t i = 0; i < k.body.size(); ++i) {
        const Inst& in = k.body[i];
        switch (in.op) {
        case Prim::Const:
        case Prim::RowIndex:
            break;
        case Prim::Input:
            slot(i, k.inputs.size(), "input");
            if (in.lag < 0) bad_inst(k, i, "negative lag");
            break;
        case Prim::RowInPass:
            if (in.lag < 0) bad_inst(k, i, "negative lag");
            break;
        case Prim::LoadState:
            slot(i, k.states.size(), "state");
            break;
        case Prim::StoreState:
            slot(i, k.states.size(), "state");
            operand(i, in.a, Type::F64);
            break;
        case Prim::RingRead:
            slot(i, k.rings.size(), "ring");
            if (in.lag < 0 || in.lag >= k.rings[static_cast<std::size_t>(in.slot)].size) bad_inst(k, i, "lag outside the ring");
            break;
        case Prim::RingPush:
            slot(i, k.rings.size(), "ring");
            operand(i, in.a, Type::F64);
            break;
        case Prim::Output:
            slot(i, k.outputs.size(), "output");
            operand(i, in.a, Type::F64);
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
    const auto n = static_cast<std::int32_t>(k.body.size());
    for (const Echo& e : k.echoes)
        if (e.later < 0 || e.earlier < 0 || e.later >= n || e.earlier >= n || e.lag < 1)
            throw BackendError(fmt::format("kernel IR: kernel {}: echo %{} = %{} at lag {} out of range", k.name, e.later,
                                           e.earlier, e.lag));
}

}  // namespace fj::ir
