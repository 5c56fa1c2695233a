#include "codegen/kernel_ir.hpp"

#include <cstring>

#include <fmt/format.h>

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

}  // namespace fj::ir
