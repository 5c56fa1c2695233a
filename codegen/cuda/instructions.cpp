// Printing one instruction of the kernel IR (see instructions.hpp).
#include "codegen/cuda/instructions.hpp"

#include <cmath>
#include <cstring>

#include "dsl/error.hpp"

namespace fj::codegen::detail {

namespace {
// The CUDA expression of an arithmetic or logic primitive from its operands' texts, for the primitives
// whose text depends on nothing else: one table for the main body and a refold's body. Empty for the others
// (leaves, effects, refold primitives, and RSqrt, comparisons and IsNaN, which the main body prints with
// knowledge of its values).
std::string operand_expression(ir::Prim op, const std::string& a, const std::string& b, const std::string& c) {
    switch (op) {
    case Prim::Add: return fmt::format("{} + {}", a, b);
    case Prim::Sub: return fmt::format("{} - {}", a, b);
    case Prim::Mul: return fmt::format("{} * {}", a, b);
    case Prim::Div: return fmt::format("{} / {}", a, b);
    case Prim::Neg: return fmt::format("-{}", a);
    case Prim::Abs: return fmt::format("fabs({})", a);
    case Prim::Sqrt: return fmt::format("sqrt({})", a);
    case Prim::Exp: return fmt::format("exp({})", a);
    case Prim::Log: return fmt::format("log({})", a);
    case Prim::Pow: return fmt::format("pow({}, {})", a, b);
    case Prim::Floor: return fmt::format("floor({})", a);
    // Correctly rounded 1/a without a division's extra steps.
    case Prim::Recip: return fmt::format("__drcp_rn({})", a);
    case Prim::Fma: return fmt::format("fma({}, {}, {})", a, b, c);  // kept by --fmad=false
    case Prim::Min: return fmt::format("fmin({}, {})", a, b);  // one DMNMX
    case Prim::Max: return fmt::format("fmax({}, {})", a, b);
    case Prim::CmpLT: return fmt::format("{} < {}", a, b);
    case Prim::CmpLE: return fmt::format("{} <= {}", a, b);
    case Prim::CmpGT: return fmt::format("{} > {}", a, b);
    case Prim::CmpGE: return fmt::format("{} >= {}", a, b);
    case Prim::CmpEQ: return fmt::format("{} == {}", a, b);
    case Prim::CmpONE: return fmt::format("{} < {} || {} > {}", a, b, a, b);
    case Prim::CmpUNE: return fmt::format("!({} == {})", a, b);
    case Prim::And: return fmt::format("{} && {}", a, b);
    case Prim::Or: return fmt::format("{} || {}", a, b);
    case Prim::Not: return fmt::format("!{}", a);
    case Prim::Select: return fmt::format("{} ? {} : {}", a, b, c);
    case Prim::BoolToF64: return fmt::format("{} ? 1.0 : 0.0", a);
    default: return {};
    }
}
}  // namespace

std::string InstructionPrinter::float_exact(std::int32_t i, int u) const {
    if (o_.dtype != DType::F32) return "";
    const Inst& x = k_.body[static_cast<std::size_t>(i)];
    if (f_.fmat[static_cast<std::size_t>(i)]) return fmt::format("fv{}", i);
    switch (x.op) {
    case Prim::Input: return load_name(x.slot, u - x.lag);
    case Prim::Const: {
        const float f = static_cast<float>(x.imm);
        if (!(static_cast<double>(f) == x.imm) && !std::isnan(x.imm)) return "";
        std::uint32_t bits;
        std::memcpy(&bits, &f, sizeof bits);
        return fmt::format("__int_as_float(0x{:08x})", bits);
    }
    case Prim::Abs: {
        const std::string e = float_exact(x.a, u);
        return e.empty() ? "" : "fabsf(" + e + ")";
    }
    case Prim::Neg: {
        const std::string e = float_exact(x.a, u);
        return e.empty() ? "" : "(-" + e + ")";
    }
    default: return "";
    }
}

std::string InstructionPrinter::ring_at(int r, int lag) const {
    const RingInfo& ri = f_.rings[r];
    if (ri.in_regs) return fmt::format("r{}[{}]", r, lag);
    if (lag == 0) return fmt::format("r{}[rp{}]", r, r);
    return fmt::format("r{}[rp{} >= {} ? rp{} - {} : rp{} + {}]", r, r, lag, r, lag, r, ri.size - lag);
}

// Operand o as a float32 expression: its float form, else its float64 value rounded.
std::string InstructionPrinter::rounded(std::int32_t o, int u) const {
    const std::string f = float_exact(o, u);
    return f.empty() ? fmt::format("(float)v{}", o) : f;
}

// A main-body value read by a refold (Outer) or a RefoldValue's fallback: every such value has its float64
// form `v<o>` (KernelFacts::for_operands makes the refold a reader: no narrow-only values, integers' doubles).
std::string InstructionPrinter::main_value(std::int32_t o) const { return fmt::format("v{}", o); }

const char* InstructionPrinter::rsqrt_function() const {
    return !f_.fast_rsqrt ? "rsqrt" : o_.rsqrt_refine ? "fj_rsqrt" : "fj_rsqrt0";
}

// Echo ring e takes row u's earlier value (the column scan's step() does it after the row, or before the
// first Refold that refreshes the ring).
std::string InstructionPrinter::echo_store(const EchoRing& e, int u, const RowMode& m) const {
    if (m.echo == EchoRows::Ring) return fmt::format("fj_echo[{}] = v{};", e.offset + u % e.lag, e.earlier);
    return fmt::format("fj_echo[{} + (int)((unsigned long long)({} - row_begin) % {}u)] = v{};", e.offset, row(u), e.lag, e.earlier);
}

// A Refold (kernel_ir.hpp): where its condition holds on this row, its per-lag part runs for each of the
// window's rows (inputs read from the panel at row t - lag - k, NaN before row 0; rings at lag + k; RowInPass
// tested), its sums are compensated (Neumaier) sums over them, its epilogue gives the exports, which the
// RefoldValues after it read (`rv<i>`, holding the fallback where the fallback comes before the Refold, so
// that rows without a refold pay the test alone). Echo rings it refreshes take this row's value first, then
// the recomputed values of the rows they keep; sticky states it moves (KernelFacts::sticky_refold) take
// their export here where the rows treat them as set. A rare path: one loop over the rows, not unrolled.
// (As a __noinline__ device function called from each row instead, corr w=20's batched kernel compiled in
// 1.5 s instead of 4-6 s, but took 156 registers against 134 inline at the time: ptxas gives the callee
// registers of its own on top of the caller's live ones; with the exports returned through local memory and
// one sum at a time, 144. An indirect call: 170.)
void InstructionPrinter::refold(int ind, int u, std::size_t i, const RowMode& m) {
    const Inst& x = k_.body[i];
    if (m.window_scan) bad_ir(k_, i, "window scans do not run refolds (select_kernel plans them from the kernel without)");
    const auto r = static_cast<std::size_t>(x.slot);
    const ir::Refold& rf = k_.refolds[r];
    const std::vector<bool>& live = m.live ? *m.live : f_.live;
    const auto at = static_cast<std::int32_t>(i);
    // Echo rings refreshed here: this row's value first, so that the block below may overwrite it.
    std::vector<std::pair<const EchoRing*, std::int32_t>> refresh;
    if (m.echo != EchoRows::None)
        for (const EchoRing& e : echo_) {
            if (e.store_at == at) line(ind, "{}", echo_store(e, u, m));
            for (const ir::Refresh& h : rf.refreshes)
                if (h.main == e.earlier) refresh.push_back({&e, h.value});
        }
    std::vector<std::int32_t> values;  // its RefoldValues these rows read
    for (std::int32_t v : f_.refold_values[r])
        if (live[static_cast<std::size_t>(v)]) values.push_back(v);
    std::vector<std::pair<int, std::int32_t>> sticky;  // (state, its RefoldValue) set here
    if (!m.guarded || m.presets)
        for (std::size_t st = 0; st < f_.sticky_refold.size(); ++st) {
            const std::int32_t v = f_.sticky_refold[st];
            if (v >= 0 && k_.body[static_cast<std::size_t>(v)].slot == x.slot && live[static_cast<std::size_t>(v)])
                sticky.push_back({static_cast<int>(st), v});
        }
    if (values.empty() && refresh.empty()) return;
    for (std::int32_t v : values) {
        const Inst& y = k_.body[static_cast<std::size_t>(v)];
        line(ind, "double rv{} = {};", v, y.a < at ? main_value(y.a) : std::string("0.0"));
    }
    std::string cond = fmt::format("v{}", x.a);
    if (m.tail && u > 0) cond += fmt::format(" && {} < row_end", row(u));  // (rows from row_end on are dropped)
    line(ind, "if ({}) {{  // refold {}: the sums again from the window's {} rows", cond, r, rf.rows);
    const int in = ind + 1;
    for (std::size_t s = 0; s < rf.sums.size(); ++s) line(in, "double fs{} = 0.0, fc{} = 0.0;  // sum, compensation", s, s);
    line(in, "#pragma unroll 1");
    line(in, "for (int k = 0; k < {}; ++k) {{", rf.rows);
    for (std::size_t j = 0; j < static_cast<std::size_t>(rf.per_lag); ++j) refold_inst(in + 1, u, rf, j);
    for (std::size_t s = 0; s < rf.sums.size(); ++s) {
        line(in + 1, "{{  // Neumaier: fs{} + fc{} is the sum", s, s);
        line(in + 2, "const double y = w{}, z = fs{} + y;", rf.sums[s], s);
        line(in + 2, "fc{} += fabs(fs{}) >= fabs(y) ? (fs{} - z) + y : (y - z) + fs{};", s, s, s, s);
        line(in + 2, "fs{} = z;", s);
        line(in + 1, "}}");
    }
    for (const auto& [e, value] : refresh) {
        // Rows t - k the ring keeps (k < lag: plan_echo() keeps rings whose refolds span no more rows).
        if (m.echo == EchoRows::Ring)
            line(in + 1, "fj_echo[{} + ({} - k) % {}] = w{};", e->offset, u % e->lag + e->lag, e->lag, value);
        else
            line(in + 1, "if ({} - k >= row_begin) fj_echo[{} + (int)((unsigned long long)({} - k - row_begin) % {}u)] = w{};", row(u),
                 e->offset, row(u), e->lag, value);
    }
    line(in, "}}");
    for (std::size_t j = static_cast<std::size_t>(rf.per_lag); j < rf.body.size(); ++j) refold_inst(in, u, rf, j);
    for (std::int32_t v : values) line(in, "rv{} = w{};", v, rf.exports[static_cast<std::size_t>(k_.body[static_cast<std::size_t>(v)].lag)]);
    for (const auto& [st, v] : sticky) {
        // A number wherever the state is one (KernelFacts::refold_keeps_sticky()), as after the pass's first
        // rows. A preset state (CudaEmitOptions::one_loop) is one before the row that sets it too, where the
        // refold would leave it NaN: the test keeps it there. (The test in the batched loops took corr w=20
        // from 128 to 134 registers.)
        const int in2 = m.guarded ? in + 1 : in;
        if (m.guarded) line(in, "if (rv{} == rv{}) {{  // the window's new shift", v, v);
        else line(in, "// the window's new shift");
        line(in2, "s{} = {}rv{};", st, f_.float_state[static_cast<std::size_t>(st)] ? "(float)" : "", v);
        if (!m.guarded && f_.live_sticky[static_cast<std::size_t>(st)] && f_.state_fexact[static_cast<std::size_t>(st)])
            line(in2, "sf{} = (float)rv{};", st, v);
        if (m.guarded) line(in, "}}");
    }
    line(ind, "}}");
}

// Instruction j of refold r's body (per-lag part: at lag k of the loop) at batch row u, as `w<j>`.
void InstructionPrinter::refold_inst(int ind, int u, const ir::Refold& r, std::size_t j) {
    const Inst& y = r.body[j];
    const char* ty = y.type == Type::Bool ? "bool" : "double";
    auto w = [](std::int32_t n) { return fmt::format("w{}", n); };
    auto def = [&](const std::string& expr) { line(ind, "const {} w{} = {};", ty, j, expr); };
    switch (y.op) {
    case Prim::Const: def(lit(y.imm)); break;
    case Prim::Input:
        def(fmt::format("{} - {} - k >= 0 ? (double)in{}[((long long){} - k) * ld_in{}] : FJ_NAN", row(u), y.lag, y.slot, u - y.lag,
                        y.slot));
        break;
    case Prim::RowInPass: def(fmt::format("{} - {} - k >= row_begin", row(u), y.lag)); break;
    case Prim::RingRead: {
        const RingInfo& ri = f_.rings[static_cast<std::size_t>(y.slot)];
        if (ri.in_regs) {  // constant indices only (the ring stays in registers)
            std::string e = ring_at(y.slot, y.lag + r.rows - 1);
            for (int q = r.rows - 2; q >= 0; --q) e = fmt::format("k == {} ? {} : {}", q, ring_at(y.slot, y.lag + q), e);
            def(e);
        } else {
            def(fmt::format("r{0}[rp{0} >= {1} + k ? rp{0} - ({1} + k) : rp{0} + {2} - ({1} + k)]", y.slot, y.lag, ri.size));
        }
        break;
    }
    case Prim::Outer: def(main_value(y.a)); break;
    case Prim::Fold: def(fmt::format("{}{}", y.imm != 0 ? "fc" : "fs", y.slot)); break;
    case Prim::RSqrt: def(fmt::format("{}({})", rsqrt_function(), w(y.a))); break;  // as the main body's
    case Prim::IsNaN: def(fmt::format("{0} != {0}", w(y.a))); break;
    default: {
        auto name = [&](std::int32_t o) { return o < 0 ? std::string() : w(o); };
        const std::string e = operand_expression(y.op, name(y.a), name(y.b), name(y.c));
        if (!e.empty()) {
            def(e);
            break;
        }
        throw BackendError(fmt::format("CUDA emitter: kernel {}: refold instruction {} ({}) cannot be in a refold", k_.name, j,
                                       ir::prim_name(y.op)));
    }
    }
}

// An output of batch row u (stored only from out_begin on in the pass's first rows). Holding a
// batch's stores back to its end was tried: more registers, no gain (H200, corr w=20).
void InstructionPrinter::store_output(int ind, int u, int slot, const std::string& value, const RowMode& m) {
    const std::string at = u == 0 ? std::string("0") : fmt::format("{}LL * ld_out{}", u, slot);
    if (m.no_stores) return;
    if (m.window_scan) {
        const std::string r = row(u);
        if (m.guarded) line(ind, "if (fj_active && {} >= out_begin && {} < row_end) out{}[{}] = {};", r, r, slot, at, value);
        else line(ind, "if (fj_active) out{}[{}] = {};", slot, at, value);
        return;
    }
    if (m.guarded) line(ind, "if ({} >= out_begin) out{}[{}] = {};", row(u), slot, at, value);
    else if (m.tail && u > 0) line(ind, "if ({} < row_end) out{}[{}] = {};", row(u), slot, at, value);
    else if (m.stream_stores) line(ind, "FJ_ST_STREAM(&out{}[{}], {});", slot, at, value);
    else line(ind, "out{}[{}] = {};", slot, at, value);
}

// `c ? a - s : 0` with a float32 value a and a finite float-exact sticky state s (the shifted,
// masked values of window sums) as `(double)(c ? a : (float)s) - s`: the select picks between two
// float32 registers instead of two float64 ones, and s - s is exactly 0.
bool InstructionPrinter::masked_shift(std::size_t i, int u, int ind) {
    const Inst& x = k_.body[i];
    const Inst& zero = k_.body[x.c];
    if (zero.op != Prim::Const || zero.imm != 0 || std::signbit(zero.imm)) return false;
    const Inst& sub = k_.body[x.b];
    if (sub.op != Prim::Sub) return false;
    const int st = f_.sticky_value(sub.b);
    if (st < 0 || !f_.live_sticky[st] || !f_.state_fexact[st]) return false;  // sf<st> exists
    const std::string a = float_exact(sub.a, u);
    if (a.empty()) return false;
    line(ind, "const double v{} = (double)(v{} ? {} : sf{}) - v{};", i, x.a, a, st, sub.b);
    return true;
}

// An integer-valued instruction as `long long iv<i>` (and its float64 twin when something reads it).
void InstructionPrinter::int_inst(int ind, int u, std::size_t i, const RowMode& m) {
    const Inst& x = k_.body[i];
    auto iv = [](std::int32_t n) { return fmt::format("iv{}", n); };
    if (f_.counter_part[i]) return;
    std::string e;
    if (const std::int32_t st = f_.counter_state[i]; st >= 0) {
        if (!(m.quiet && m.quiet->has(st))) line(ind, "s{} = v{} ? {} : s{};  // run counter, q", st, x.a, -(u + 1), st);
        e = fmt::format("s{} + {}", st, u + 1);
    }
    if (e.empty()) switch (x.op) {
    case Prim::Const: e = fmt::format("{}", static_cast<long long>(x.imm)); break;
    case Prim::BoolToF64: e = fmt::format("v{} ? 1 : 0", x.a); break;
    case Prim::RowIndex: e = row(u); break;
    case Prim::LoadState: e = fmt::format("s{}", x.slot); break;
    case Prim::Neg: e = fmt::format("-iv{}", x.a); break;
    case Prim::Add: e = fmt::format("iv{} + iv{}", x.a, x.b); break;
    case Prim::Sub: e = fmt::format("iv{} - iv{}", x.a, x.b); break;
    case Prim::Select: e = fmt::format("v{} ? {} : {}", x.a, iv(x.b), iv(x.c)); break;
    default: bad_ir(k_, i, "not an integer value");
    }
    line(ind, "const {} iv{} = {};", f_.int32[i] ? "int" : "long long", i, e);
    if (f_.need_double[i]) line(ind, "const double v{} = (double)iv{};", i, i);
}

void InstructionPrinter::inst(int ind, int u, std::size_t i, const RowMode& m) {
    const Inst& x = k_.body[i];
    if (m.quiet && x.type == Type::Bool)
        if (const auto it = m.quiet->known.find(static_cast<std::int32_t>(i)); it != m.quiet->known.end()) {
            line(ind, "const bool v{} = {};", i, it->second ? "true" : "false");
            return;
        }
    const char* ty = x.type == Type::Bool ? "bool" : "double";
    auto v = [](std::int32_t n) { return fmt::format("v{}", n); };
    auto def = [&](const std::string& expr) { line(ind, "const {} v{} = {};", ty, i, expr); };
    if (m.echo == EchoRows::Ring)
        for (std::size_t e = 0; e < echo_.size(); ++e)
            if (static_cast<std::size_t>(echo_[e].later) == i) return def(fmt::format("ve{}", e));
    if (x.op == Prim::Refold) return refold(ind, u, i, m);
    if (x.op == Prim::Flag) {  // (ir::flag_refolds; rows past row_end in a pass's last batch raise none)
        if (m.window_scan) bad_ir(k_, i, "window scans raise no repair flags (select_kernel plans them from the kernel without)");
        if (const PassFlags::Test* t = m.pass_flags ? m.pass_flags->test_of(i) : nullptr) {
            m.pass_flags->row(out_, ind, *t, m.tail && u > 0 ? fmt::format("{} < row_end", row(u)) : std::string());
            return;
        }
        if (m.tail && u > 0) line(ind, "fj_need |= v{} && {} < row_end;", x.a, row(u));
        else line(ind, "fj_need |= v{};", x.a);
        return;
    }
    if (x.op == Prim::RefoldValue) {  // (its Refold declared rv<i>)
        if (x.a < f_.refold_at[static_cast<std::size_t>(x.slot)]) return def(fmt::format("rv{}", i));
        return def(fmt::format("v{} ? rv{} : {}", k_.body[static_cast<std::size_t>(f_.refold_at[static_cast<std::size_t>(x.slot)])].a,
                               i, main_value(x.a)));
    }
    if (x.op == Prim::StoreState && m.sample_u >= 0 && m.pass_flags)
        if (const PassFlags::Sampled* s = m.pass_flags->sampled_state(x.slot)) {
            if (u == m.sample_u) line(ind, "s{} = fma({}, v{}, s{});  // sampled rounding bound", x.slot, lit(s->step), s->size, x.slot);
            return;
        }
    if (f_.int_value[i]) return int_inst(ind, u, i, m);
    if (x.op == Prim::StoreState && f_.int_state[x.slot]) {
        if (f_.counter_select[static_cast<std::size_t>(x.slot)] < 0) line(ind, "s{} = iv{};", x.slot, x.a);
        return;
    }
    if (x.op == Prim::IsNaN && f_.is_int(x.a)) {
        def("false");
        return;
    }
    // Set already (or, preset, by no row of the pass): the select keeps the state, the test fails.
    if ((!m.guarded || m.presets) && f_.sticky_of[i] >= 0) {
        if (x.op == Prim::IsNaN) {
            // (Preset, a state no row of the pass sets stays NaN: tested, a loop invariant.)
            def(m.guarded ? fmt::format("s{} != s{}", f_.sticky_of[i], f_.sticky_of[i]) : "false");
        } else if (f_.fmat[i]) {
            line(ind, "const float fv{} = {};", i, float_exact(x.c, u));
            line(ind, "const double v{} = (double)fv{};", i, i);
        } else {
            def(v(x.c));
        }
        return;
    }
    if ((!m.guarded || m.presets) && x.op == Prim::StoreState && f_.sticky_state[x.slot]) return;
    if (!m.guarded && x.op == Prim::Select && !f_.fmat[i] && masked_shift(i, u, ind)) return;
    if (f_.narrow[i]) {
        if (x.op == Prim::Select) line(ind, "const float fv{} = v{} ? {} : {};", i, x.a, rounded(x.b, u), rounded(x.c, u));
        else line(ind, "const float fv{} = {}({}, {});", i, x.op == Prim::Min ? "fminf" : "fmaxf", rounded(x.a, u), rounded(x.b, u));
        return;
    }
    if (f_.fmat[i]) {
        if (x.op == Prim::LoadState) line(ind, "const float fv{} = s{};", i, x.slot);
        else line(ind, "const float fv{} = v{} ? {} : {};", i, x.a, float_exact(x.b, u), float_exact(x.c, u));
        line(ind, "const double v{} = (double)fv{};", i, i);  // dropped by NVRTC when unused
        return;
    }
    if (x.op == Prim::StoreState && f_.float_state[x.slot]) {
        line(ind, "s{} = {};", x.slot, float_exact(x.a, u));
        return;
    }
    if (x.op == Prim::Output && f_.float_available(x.a)) {  // float32 panel: the value is a float already
        store_output(ind, u, x.slot, float_exact(x.a, u), m);
        return;
    }
    if (x.op == Prim::IsNaN && f_.float_available(x.a)) {
        const std::string f = float_exact(x.a, u);
        def(fmt::format("{} != {}", f, f));
        return;
    }
    if (f_.is_compare(x.op) && f_.is_int(x.a) && f_.is_int(x.b)) {
        const char* o = x.op == Prim::CmpLT ? "<" : x.op == Prim::CmpLE ? "<=" : x.op == Prim::CmpGT ? ">"
                      : x.op == Prim::CmpGE ? ">=" : x.op == Prim::CmpEQ ? "==" : "!=";
        def(fmt::format("iv{} {} iv{}", x.a, o, x.b));
        return;
    }
    switch (x.op) {
    case Prim::Const: def(lit(x.imm)); break;
    case Prim::Input: def(fmt::format("(double){}", load_name(x.slot, u - x.lag))); break;
    case Prim::RowIndex: def(fmt::format("(double){}", row(u))); break;
    case Prim::RowInPass:
        // Rows before out_begin <= row_begin + halo: a lag of at least the halo reaches before the pass.
        if (m.no_stores && x.lag >= k_.halo) def("false");
        else def(m.guarded ? fmt::format("{} - {} >= row_begin", row(u), x.lag) : "true");
        break;
    case Prim::LoadState: def(fmt::format("s{}", x.slot)); break;
    case Prim::RingRead: def(ring_at(x.slot, x.lag)); break;
    case Prim::StoreState: line(ind, "s{} = {};", x.slot, v(x.a)); break;
    case Prim::RingPush: line(ind, "{} = {};", ring_at(x.slot, 0), v(x.a)); break;
    case Prim::Output:
        store_output(ind, u, x.slot, fmt::format("({}){}", T_, v(x.a)), m);
        break;
    // rsqrt is within 1 ulp (CUDA math API); fj_rsqrt, an estimate and a Newton step (printing.cpp).
    case Prim::RSqrt: def(fmt::format("{}({})", rsqrt_function(), v(x.a))); break;
    case Prim::CmpLT: case Prim::CmpLE: case Prim::CmpGT: case Prim::CmpGE: case Prim::CmpEQ:
    case Prim::CmpONE: case Prim::CmpUNE: {
        // Float32 panels: a comparison of values that are exactly float32 numbers (inputs, their
        // absolute values and negations, float-exact constants) gives the same answer in float32,
        // which costs a float32 compare instead of a float64 one on the scarcer float64 pipe.
        std::string a = v(x.a), b = v(x.b);
        const std::string fa = float_exact(x.a, u), fb = float_exact(x.b, u);
        if (!fa.empty() && !fb.empty() && !(k_.body[x.a].op == Prim::Const && k_.body[x.b].op == Prim::Const)) {
            a = fa;
            b = fb;
        }
        def(operand_expression(x.op, a, b, {}));
        break;
    }
    case Prim::IsNaN:
        // Of an input: test the loaded value itself (a float32 compare instead of a float64 one).
        if (k_.body[x.a].op == Prim::Input) {
            const std::string l = load_name(k_.body[x.a].slot, u - k_.body[x.a].lag);
            def(fmt::format("{} != {}", l, l));
        } else if (f_.fexact[x.a]) {
            // A float32 number in a double: a NaN's payload reaches the high word (converted float
            // NaNs are quiet), so the high word alone tells.
            def(fmt::format("(__double2hiint({}) & 0x7fffffff) > 0x7ff00000", v(x.a)));
        } else {
            // An integer test of the bits (exponent all ones, mantissa not zero): keeps the float64
            // pipe, the scarce one on most GPUs, for arithmetic.
            def(fmt::format("((unsigned long long)__double_as_longlong({}) << 1) > 0xffe0000000000000ULL", v(x.a)));
        }
        break;
    case Prim::Refold: case Prim::RefoldValue: case Prim::Flag: break;  // (above)
    case Prim::Outer: case Prim::Fold: bad_ir(k_, i, "a refold's instruction in the main body");
    default: {
        auto name = [&](std::int32_t o) { return o < 0 ? std::string() : v(o); };
        def(operand_expression(x.op, name(x.a), name(x.b), name(x.c)));
        break;
    }
    }
}

}  // namespace fj::codegen::detail
