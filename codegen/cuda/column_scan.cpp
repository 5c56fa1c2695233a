// The column scan (see column_scan.hpp and emit.hpp): its plans and its kernel.
#include "codegen/cuda/column_scan.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "dsl/error.hpp"

namespace fj::codegen::detail {

namespace {

// A batch's load at row offset u - lag is skipped before the pass only if every (row u, lag) that reads it
// allows it (KernelFacts::pass_only_lag). (Planned with the facts' rows per batch, before echo rings
// change them: loads at offsets beyond those are not skipped.)
void plan_pass_only(const KernelFacts& f, ColumnScanPlan& p) {
    std::map<std::pair<int, int>, bool> by_off;
    for (int u = 0; u < f.batch_rows; ++u)
        for (const auto& [key, ok] : f.pass_only_lag) {
            auto [it, fresh] = by_off.try_emplace({key.first, u - key.second}, ok);
            if (!fresh) it->second = it->second && ok;
        }
    for (const auto& [key, ok] : by_off)
        if (ok) p.pass_only.insert(key);
}

// Which echoes get rings, the batch length, and the batched loops' liveness and loads without the work
// that only fed the later values.
void plan_echo(const KernelFacts& f, ColumnScanPlan& plan) {
    const ir::Kernel& k = f.kernel;
    const CudaEmitOptions& o = f.options;
    if (o.strides.empty() || !o.echo_rings || plan.batch_rows < 2 || f.big_body || k.echoes.empty()) return;
    const std::size_t n = k.body.size();
    auto plain = [&](std::int32_t i) {  // a float64 value emitted as `const double v<i>` in every kind of row
        const auto u = static_cast<std::size_t>(i);
        return k.body[u].type == Type::F64 && f.live[u] && !f.int_value[u] && !f.fmat[u] && !f.narrow[u] &&
               f.sticky_of[u] < 0 && k.body[u].op != Prim::Const && k.body[u].op != Prim::RefoldValue;
    };
    // A ring whose earlier value refolds refresh (kernel_ir.hpp's Refresh) takes its row's value before the
    // first of their Refold instructions (EchoRing::store_at), so that value must come before it, and their
    // rows must fit the ring (the rows a refold recomputes are the ones it keeps); else no ring for it.
    auto refreshed_at = [&](const ir::Echo& e) -> std::int32_t {  // -1 none, -2 no ring possible
        std::int32_t at = -1;
        for (std::size_t r = 0; r < k.refolds.size(); ++r)
            for (const ir::Refresh& h : k.refolds[r].refreshes) {
                if (h.main != e.earlier) continue;
                if (k.refolds[r].rows > e.lag || f.refold_at[r] <= e.earlier) return -2;
                at = at < 0 ? f.refold_at[r] : std::min(at, f.refold_at[r]);
            }
        return at;
    };
    std::vector<bool> is_later(n, false);
    long long period = 1;
    int doubles = 0;
    std::vector<EchoRing> rings;
    for (const ir::Echo& e : k.echoes) {
        if (e.lag < o.echo_min_lag || !plain(e.later) || !plain(e.earlier) || is_later[static_cast<std::size_t>(e.later)])
            continue;
        const std::int32_t store_at = refreshed_at(e);
        if (store_at == -2) continue;
        is_later[static_cast<std::size_t>(e.later)] = true;
        rings.push_back({e.later, e.earlier, e.lag, doubles, store_at});
        doubles += e.lag;
        period = std::lcm(period, static_cast<long long>(e.lag));
    }
    const int stride = doubles | 1;  // an odd stride: a half-warp's 8-byte accesses hit distinct banks
    if (rings.empty() || period > kCudaMaxEchoUnroll ||
        stride * static_cast<int>(sizeof(double)) > kCudaMaxEchoBytesPerThread)
        return;
    const int p = static_cast<int>(period);
    int u = (plan.batch_rows + p - 1) / p * p;  // the nearest multiple of the period at or above the asked rows
    if (u > kCudaMaxEchoUnroll) u = kCudaMaxEchoUnroll / p * p;
    plan.batch_rows = u;
    plan.echo = std::move(rings);
    plan.echo_period = p;
    plan.echo_stride = stride;
    plan.echo_live = f.live_from_effects(is_later);  // (a later value's operands only fed it)
    for (const EchoRing& r : plan.echo) plan.echo_live[static_cast<std::size_t>(r.earlier)] = true;
    plan.echo_loads = f.loads_of(plan.echo_live);
}

// One-loop generic kernels: whether every live sticky state (a window's shift) is set by a value and a
// condition that read only the row's own inputs (no state, no lagged row): then a scan before the loop
// finds the pass's first row that sets each, and the loop needs no per-row test, select and store of
// them (corr: two of each). Rows before that first row mask what they shift (the sticky's condition is
// false there, and every use of the shifted value is masked by it), so results do not change.
void plan_presets(const KernelFacts& f, ColumnScanPlan& p) {
    const ir::Kernel& k = f.kernel;
    const CudaEmitOptions& o = f.options;
    if (!o.one_loop || !o.strides.empty() || f.big_body) return;
    const std::size_t n = k.body.size();
    std::vector<bool> need(n, false);
    std::vector<ColumnScanPlan::Preset> presets;
    for (std::size_t i = 0; i < n; ++i) {
        if (!f.live[i] || k.body[i].op != Prim::Select || f.sticky_of[i] < 0) continue;
        const Inst& sel = k.body[i];
        const Inst& c = k.body[sel.a];
        const std::int32_t valid = k.body[c.a].op == Prim::IsNaN && f.sticky_of[c.a] >= 0 ? c.b : c.a;
        presets.push_back({f.sticky_of[i], valid, sel.b});
        need[static_cast<std::size_t>(valid)] = need[static_cast<std::size_t>(sel.b)] = true;
    }
    if (presets.empty()) return;
    const bool pure = f.operand_closure(need, [&](std::size_t i) {
        const Inst& x = k.body[i];
        const bool ok = x.op != Prim::LoadState && x.op != Prim::StoreState && x.op != Prim::RowIndex &&
                        x.op != Prim::RowInPass && x.op != Prim::RingRead && x.op != Prim::RingPush &&
                        x.op != Prim::Output && !(x.op == Prim::Input && x.lag != 0) && f.counter_state[i] < 0 &&
                        f.sticky_of[i] < 0 && x.op != Prim::Refold && x.op != Prim::RefoldValue && x.op != Prim::Flag;
        return ok ? Reach::Expand : Reach::Fail;
    });
    if (!pure) return;
    p.preset = true;
    p.preset_live = std::move(need);
    p.presets = std::move(presets);
}

}  // namespace

ColumnScanPlan plan_column_scan(const KernelFacts& f) {
    ColumnScanPlan p;
    p.batch_rows = f.batch_rows;
    plan_pass_only(f, p);
    plan_echo(f, p);
    plan_presets(f, p);
    plan_quiet_batches(f, p);
    p.hints = f.options.cache_hints && !f.options.strides.empty();
    return p;
}

std::string emit_column_scan(const KernelFacts& facts, const ColumnScanPlan& plan) {
    return ColumnScanEmitter(facts, plan).run();
}

bool ColumnScanEmitter::raises_flags(const KernelFacts& f) {
    for (std::size_t i = 0; i < f.kernel.body.size(); ++i)
        if (f.live[i] && f.kernel.body[i].op == Prim::Flag) return true;
    return false;
}

void ColumnScanEmitter::pass_end() {
    // One atomic per column and tile that needs its refolds (rare: docs/numerics.md), none elsewhere.
    pass_flags_.test(src_, 2, k_);
    if (flags_) line(2, "if (fj_need) atomicOr(p.flags + tile * p.flag_words + (j >> 5), 1u << (j & 31));");
    line(1, "}}");
    line(0, "}}");
}

std::string ColumnScanEmitter::run() {
    print_header(src_, f_, {U_, !p_.echo.empty(), p_.hints, false, flags_ || o_.repair});
    kernel();
    return src_.take();
}

// The scan that sets the preset sticky states: from the pass's first row until all are set.
void ColumnScanEmitter::preset_scan(const RowMode& m) {
    line(2, "{{  // the sticky states (window shifts) from the pass's first rows that set them");
    line(3, "#pragma unroll 1");
    line(3, "for (long long r = 0; r < row_end - row_begin; ++r) {{");
    std::set<int> inputs;
    for (std::size_t i = 0; i < k_.body.size(); ++i)
        if (p_.preset_live[i] && k_.body[i].op == Prim::Input) inputs.insert(k_.body[i].slot);
    for (int slot : inputs) line(4, "const {} {} = in{}[r * ld_in{}];", T_, load_name(slot, 0), slot, slot);
    for (std::size_t i = 0; i < k_.body.size(); ++i)
        if (p_.preset_live[i]) printer_.inst(4, 0, i, m);
    std::string all_set;
    for (const ColumnScanPlan::Preset& ps : p_.presets) {
        std::string value = fmt::format("v{}", ps.value);
        if (f_.float_state[static_cast<std::size_t>(ps.state)]) {
            value = printer_.float_exact(ps.value, 0);
            if (value.empty()) value = fmt::format("(float)v{}", ps.value);
        }
        line(4, "if (s{} != s{} && v{}) s{} = {};", ps.state, ps.state, ps.valid, ps.state, value);
        all_set += fmt::format("{}s{} == s{}", all_set.empty() ? "" : " && ", ps.state, ps.state);
    }
    line(4, "if ({}) break;", all_set);
    line(3, "}}");
    line(2, "}}");
}

void ColumnScanEmitter::kernel() {
    const int halo = std::max(0, k_.halo);
    // A flagging kernel at 128 registers (512 threads an SM) spills a few bytes but measured faster than at the
    // 142-158 NVRTC gives it otherwise (bench/RESULTS.md, seventeenth session); other column scans measured slower so.
    if (flags_) line(0, "extern \"C\" __global__ void __launch_bounds__(512, 1) {}(const fj_params_{} p) {{", name_, name_);
    else line(0, "extern \"C\" __global__ void {}(const fj_params_{} p) {{", name_, name_);
    line(1, "const long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;");
    line(1, "if (j >= p.cols) return;");
    if (!p_.echo.empty()) {
        line(1, "FJ_SMEM_DECL;");
        line(1, "volatile double* const fj_echo = reinterpret_cast<double*>(fj_smem) + threadIdx.x * {}u;  // this thread's echo rings",
             p_.echo_stride);
    }
    const std::size_t ni = k_.inputs.size(), no = k_.outputs.size();
    const bool fixed = !o_.strides.empty();
    if (fixed && o_.strides.size() != ni + no)
        throw BackendError(fmt::format("CUDA emitter: kernel {}: {} fixed strides for {} panels", k_.name,
                                       o_.strides.size(), ni + no));
    if (p_.hints) {
        line(1, "unsigned long long fj_keep;  // L2 policy: evict last");
        line(1, "FJ_POLICY_KEEP(fj_keep);");
    }
    for (std::size_t i = 0; i < ni; ++i)
        line(1, "const long long ld_in{} = {};", i, fixed ? fmt::format("{}LL", o_.strides[i]) : fmt::format("p.in_ld{}", i));
    for (std::size_t i = 0; i < no; ++i)
        line(1, "const long long ld_out{} = {};", i,
             fixed ? fmt::format("{}LL", o_.strides[ni + i]) : fmt::format("p.out_ld{}", i));
    line(1, "for (long long tile = blockIdx.y; tile < p.ntiles; tile += gridDim.y) {{");
    line(2, "const long long out_begin = tile * p.tile_rows;");
    line(2, "const long long row_end = out_begin + p.tile_rows < p.rows ? out_begin + p.tile_rows : p.rows;");
    line(2, "const long long row_begin = out_begin > {} ? out_begin - {} : 0;", halo, halo);
    // The repair pass runs a tile of a column only where the main kernel raised its flag.
    if (o_.repair) line(2, "if (!((p.flags[tile * p.flag_words + (j >> 5)] >> (j & 31)) & 1u)) continue;");
    if (flags_) line(2, "bool fj_need = false;  // a row of this pass needs its refolds (the repair pass reruns it)");
    pass_flags_.declare(src_, 2);
    for (std::size_t s = 0; s < k_.states.size(); ++s) {
        if (f_.int_state[s])
            line(2, "{} s{} = {};  // {}", f_.int32_state[s] ? "int" : "long long", s,
                 static_cast<long long>(k_.states[s].init), comment_safe(k_.states[s].what));
        else if (f_.float_state[s])
            line(2, "float s{} = {};  // {}", s, flit(k_.states[s].init), comment_safe(k_.states[s].what));
        else
            line(2, "double s{} = {};  // {}", s, lit(k_.states[s].init), comment_safe(k_.states[s].what));
    }
    for (std::size_t r = 0; r < f_.rings.size(); ++r) {
        const RingInfo& ri = f_.rings[r];
        line(2, "double r{}[{}];  // {}{}", r, ri.size, comment_safe(k_.rings[r].what),
             ri.in_regs ? " (shift register)" : " (circular, position rp)");
        line(2, "#pragma unroll");
        line(2, "for (int q = 0; q < {}; ++q) r{}[q] = FJ_NAN;", ri.size, r);
        if (!ri.in_regs) line(2, "int rp{} = {};", r, ri.size - 1);
    }
    for (std::size_t i = 0; i < k_.inputs.size(); ++i)
        line(2, "const {}* __restrict__ in{} = p.in{} + row_begin * ld_in{} + j;", T_, i, i, i);
    for (std::size_t i = 0; i < k_.outputs.size(); ++i)
        line(2, "{}* __restrict__ out{} = p.out{} + row_begin * ld_out{} + j;", T_, i, i, i);
    line(2, "long long t = row_begin;");
    // How the rows run (RowMode): echo rings store the values their rows' sums will remove until the batched
    // loops, which read them back; the last rows load what leaves (no ring is read after them).
    EchoRows echo = p_.echo.empty() ? EchoRows::None : EchoRows::Store;
    auto mode = [&](bool guarded) {
        RowMode m;
        m.guarded = guarded;
        m.presets = p_.preset;
        m.echo = echo;
        if (pass_flags_.any()) m.pass_flags = &pass_flags_;
        return m;
    };
    // The pass's first rows run one at a time with every guard: loads before the panel's first row
    // read NaN, RowInPass is tested, and outputs are stored only from out_begin on. They are the
    // warm-up rows plus the largest lag read, so in the loops after them every guard holds: t >= out_begin,
    // t - lag >= row_begin >= 0.
    int max_lag = 0;
    for (const auto& [slot, lag] : f_.loads) max_lag = std::max(max_lag, lag);
    for (std::size_t i = 0; i < k_.body.size(); ++i)
        if (f_.live[i] && k_.body[i].op == Prim::RowInPass) max_lag = std::max(max_lag, k_.body[i].lag);
    std::string unset;  // sticky states not yet set to a finite value
    for (std::size_t st = 0; st < k_.states.size(); ++st)
        if (f_.live_sticky[st])
            unset += fmt::format(" || !(fabs((double)s{}) < {})", st, lit(std::numeric_limits<double>::infinity()));
    const bool warm_batches = !o_.strides.empty() && U_ > 1 && !f_.loads.empty() && !f_.big_body;
    if (warm_batches) {
        // Kernels for big panels: those rows in guarded batches first (loads of a batch issued
        // together; with batched_edges the last batch may run past them, guarded code being right on
        // any row), then one at a time for what is left. One at a time, each row waits for its own loads: about 10 % of
        // the samples of corr w=20 on 152-row tiles (bench/RESULTS.md), and a long window's first rows
        // are a large share of its tiles.
        line(2, "{{");
        // Batches wholly before out_begin store nothing, so NVRTC drops every value that only feeds
        // an output (corr's variances, its reciprocal square root and clamp: about half a row), and
        // skip the loads KernelFacts::pass_only_lags() allows: the halo of a long window, and a large share of
        // short tiles. Their rows are asked of L2 ahead, as in the batched loop.
        const int W = std::min(U_, o_.warm_only_rows);
        if (W > 0) {
            // Those batches start a block's work, when no other warp of the SM has work to hide a
            // batch's wait for memory: ask L1 for the pass's first U rows at once, so that only the
            // first batch waits the whole way (the loop asks L2 for the rows after them).
            std::set<int> entering;
            for (const auto& [slot, lag] : f_.loads)
                if (lag == 0) entering.insert(slot);
            if (!entering.empty()) {
                line(3, "#pragma unroll");
                line(3, "for (int r = 0; r < {}; ++r) {{", U_);
                line(4, "if (t + r >= row_end) break;");
                for (int slot : entering) line(4, "FJ_PREFETCH_L1(&in{}[r * ld_in{}]);", slot, slot);
                line(3, "}}");
            }
            line(3, "#pragma unroll 1");
            line(3, "for (; t + {} <= out_begin; t += {}) {{", W, W);
            const std::set<int> pf_inputs = l2_prefetched();
            if (!pf_inputs.empty()) line(4, "const bool pf = t + {} <= p.rows;", o_.l2_prefetch_rows + W);
            RowMode before_out = mode(true);
            before_out.no_stores = true;
            loads(4, W, Rows::First, before_out);
            for (int u = 0; u < W; ++u) {
                step(4, u, before_out);
                l2_prefetch_row(u, pf_inputs);
            }
            pass_flags_.test(src_, 4, k_);
            advance(4, W);
            line(3, "}}");
        }
        line(3, "const long long warm_end = min(row_end, max(out_begin, row_begin + {}LL));", max_lag);
        // The rest of the warm-up in guarded batches of W rows as well: the few rows from there to
        // warm_end (corr w = 20: 4) then cost no whole guarded batch of U.
        const int G = W > 0 ? W : U_;
        line(3, "#pragma unroll 1");
        if (o_.batched_edges) line(3, "for (; t < warm_end && t + {} <= row_end; t += {}) {{", G, G);
        else line(3, "for (; t + {} <= warm_end; t += {}) {{", G, G);
        loads(4, G, Rows::First, mode(true));
        for (int u = 0; u < G; ++u) step(4, u, mode(true));
        pass_flags_.test(src_, 4, k_);
        advance(4, G);
        line(3, "}}");
        line(2, "}}");
    } else if (!f_.loads.empty()) {
        // Those rows wait for each row's loads: ask L1 for all of them first (a tile's first rows,
        // which short tiles make a large share of the work).
        line(2, "{{");
        line(3, "const long long warm_end = min(row_end, max(out_begin, row_begin + {}LL));", max_lag);
        line(3, "#pragma unroll 1");
        line(3, "for (long long r = row_begin; r < warm_end; ++r) {{");
        for (const auto& [slot, lag] : f_.loads)
            line(4, "if (r >= {}) FJ_PREFETCH_L1(&in{}[(r - row_begin - {}) * ld_in{}]);", lag, slot, lag, slot);
        line(3, "}}");
        line(2, "}}");
    }
    const bool one_loop = o_.one_loop && o_.strides.empty();
    if (p_.preset) preset_scan(mode(false));
    line(2, "#pragma unroll 1");
    if (one_loop) line(2, "for (; t < row_end; ++t) {{");
    else
        line(2, "for (; t < row_end && (t < out_begin || t < row_begin + {}{}{}); ++t) {{", max_lag, unset,
             p_.echo.empty() ? std::string() : fmt::format(" || (t - row_begin) % {} != 0", p_.echo_period));
    loads(3, 1, Rows::First, mode(true));
    step(3, 0, mode(true));
    pass_flags_.test(src_, 3, k_);
    advance(3, 1);
    line(2, "}}");
    if (one_loop) {  // (CudaEmitOptions::one_loop: the guarded loop took every row)
        pass_end();
        return;
    }
    // From here on sticky states are finite loop invariants (but where a refold moves them:
    // KernelFacts::sticky_refold); float32 copies of the float-exact ones.
    for (std::size_t st = 0; st < k_.states.size(); ++st)
        if (f_.live_sticky[st] && f_.state_fexact[st])
            line(2, "{}float sf{} = (float)s{};", f_.sticky_refold[st] >= 0 ? "" : "const ", st, st);
    if (!p_.echo.empty()) echo = EchoRows::Ring;
    if (U_ > 1) {
        // Whole batches: sampled rounding bounds add their sizes on each batch's last row (pass_flags.hpp).
        pass_flags_.before_batches(src_, 2);
        RowMode batches = mode(false);
        batches.sample_u = U_ - 1;
        rolling_batches(batches);
        if (!o_.strides.empty()) {
            // Kernels for big panels: the last whole batches too (loads first, then the rows), so that
            // short tiles do not leave up to 2U - 1 rows to the one-row loop. Not in the generic kernel,
            // whose cold compile time it would double.
            line(2, "#pragma unroll 1");
            line(2, "for (; t + {} <= row_end; t += {}) {{", U_, U_);
            loads(3, U_, Rows::Inside, batches);
            for (int u = 0; u < U_; ++u) step(3, u, batches);
            pass_flags_.test(src_, 3, k_);
            advance(3, U_);
            line(2, "}}");
        }
    }
    echo = EchoRows::None;  // (the last rows load what leaves: no ring is read after them)
    if (warm_batches && o_.batched_edges) {
        // The last rows (fewer than U) in masked batches of at most 4 (few registers): rows from
        // row_end on are neither read (NaN) nor stored, and what they do to the states is dropped with
        // the pass.
        const int V = std::min(U_, 4);
        line(2, "#pragma unroll 1");
        line(2, "for (; t < row_end; t += {}) {{", V);
        loads(3, V, Rows::Tail, mode(false));
        RowMode tail = mode(false);
        tail.tail = true;
        for (int u = 0; u < V; ++u) step(3, u, tail);
        advance(3, V);
        line(2, "}}");
    } else {
        line(2, "#pragma unroll 1");
        line(2, "for (; t < row_end; ++t) {{");
        loads(3, 1, Rows::Inside, mode(false));
        step(3, 0, mode(false));
        advance(3, 1);
        line(2, "}}");
    }
    pass_end();
}

// Inputs read at lag 0: the batched loops ask L2 for their rows l2_prefetch_rows ahead (new to L2;
// lagged rows were read before). Empty when there is no such prefetch.
std::set<int> ColumnScanEmitter::l2_prefetched() const {
    std::set<int> in;
    if (o_.l2_prefetch_rows > 0)
        for (const auto& [slot, lag] : f_.loads)
            if (lag == 0) in.insert(slot);
    return in;
}

// The batched loop, `rows_ahead` rows before row_end at most, with its L2 prefetches.
void ColumnScanEmitter::batch_loop_begin(int rows_ahead, const std::set<int>& pf_inputs) {
    line(3, "#pragma unroll 1");
    line(3, "for (; t + {} <= row_end; t += {}) {{", rows_ahead, U_);
    if (!pf_inputs.empty()) line(4, "const bool pf = t + {} <= p.rows;", o_.l2_prefetch_rows + U_);
}

void ColumnScanEmitter::l2_prefetch_row(int u, const std::set<int>& pf_inputs) {
    for (int slot : pf_inputs) line(4, "if (pf) FJ_PREFETCH_L2(&{});", load_addr(slot, u + o_.l2_prefetch_rows));
}

// Rolling prefetch: each loaded value is replaced by the one U rows later right after its last use,
// so the loads of the next batch are in flight while this batch computes (the scan is bound by memory
// latency otherwise: few warps fit an SM with these register counts). Every prefetched row is below
// row_end; the last rows (fewer than 2U) run in the loops after it.
// (ptxas sinks the loads a loop iteration leaves for the next one to its end, where the next iteration
// waits for them: bench/RESULTS.md. Iterations of several batches, so that only the last batch's loads
// cross the back edge, measured slower and were removed.)
void ColumnScanEmitter::rolling_batches(const RowMode& m) {
    std::map<std::pair<int, int>, int> last_use;  // (input, row offset) -> last batch row reading it
    for (int u = 0; u < U_; ++u)
        for (const auto& [slot, lag] : row_loads(m)) last_use[{slot, u - lag}] = u;
    const std::map<std::pair<int, int>, Reuse> reuse = p_.hints ? row_reuse(last_use) : decltype(reuse){};
    auto load = [&](int ind, bool declare, const std::pair<int, int>& key, int rows_on) {
        const std::string name = load_name(key.first, key.second), addr = load_addr(key.first, key.second + rows_on);
        const std::string decl = declare ? std::string(T_) + " " : std::string();
        const auto r = reuse.find(key);
        if (r == reuse.end() || r->second == Reuse::Again) line(ind, "{}{} = {};", decl, name, addr);
        else if (declare) line(ind, "{} {};", T_, name);
        if (r != reuse.end() && r->second == Reuse::Later) line(ind, "FJ_LD_KEEP({}, &{}, fj_keep);", name, addr);
        if (r != reuse.end() && r->second == Reuse::Never) line(ind, "FJ_LD_LAST({}, &{});", name, addr);
    };
    line(2, "if (t + {} <= row_end) {{", 2 * U_);
    for (const auto& [key, u_last] : last_use) load(3, true, key, 0);
    const std::set<int> pf_inputs = l2_prefetched();
    batch_loop_begin(2 * U_, pf_inputs);
    RowMode batch = m;  // (outputs streamed past L2 with hints)
    batch.stream_stores = p_.hints;
    RowMode quiet = batch;  // a quiet batch's rows: what is known there
    quiet.quiet = &p_.quiet;
    auto rows = [&](int ind, const RowMode& rows_mode) {
        for (int u = 0; u < U_; ++u) {
            step(ind, u, rows_mode);
            for (const auto& [key, u_last] : last_use)
                if (u_last == u) load(ind, false, key, U_);
            l2_prefetch_row(u, pf_inputs);
        }
    };
    if (p_.quiet.ok) {
        // Quiet batches (see plan_quiet_batches()): the rows without the counters where every lane's are quiet.
        line(4, "{{");
        quiet_check(5, batch);
        line(5, "if (__all_sync(__activemask(), fj_quiet)) {{  // every lane's rows are quiet");
        rows(6, quiet);
        for (const QuietCounter& q : p_.quiet.counters)
            if (q.how == QuietState::ResetEveryRow) line(6, "s{} = {};  // (a reset on the last row)", q.state, -U_);
        line(5, "}} else {{");
        rows(6, batch);
        line(5, "}}");
        line(4, "}}");
    } else {
        rows(4, batch);
    }
    if (m.sample_u >= 0) pass_flags_.test(src_, 4, k_);
    advance(4, U_);
    line(3, "}}");
    line(2, "}}");
}

std::map<std::pair<int, int>, ColumnScanEmitter::Reuse> ColumnScanEmitter::row_reuse(const std::map<std::pair<int, int>, int>& keys) const {
    std::map<std::pair<int, int>, std::vector<int>> rows;  // (input, offset mod U) -> offsets
    for (const auto& [key, u] : keys) rows[{key.first, ((key.second % U_) + U_) % U_}].push_back(key.second);
    std::map<std::pair<int, int>, Reuse> r;
    for (const auto& [group, offs] : rows) {
        const auto [lo, hi] = std::minmax_element(offs.begin(), offs.end());
        for (int off : offs)
            r[{group.first, off}] = off == *lo ? Reuse::Never : off == *hi ? Reuse::Later : Reuse::Again;
    }
    return r;
}

// The loads of a batch of `rows` rows (the rows `where` says may lie outside the pass read NaN).
void ColumnScanEmitter::loads(int ind, int rows, Rows where, const RowMode& m) {
    std::set<std::pair<int, int>> done;
    for (int u = 0; u < rows; ++u)
        for (const auto& [slot, lag] : row_loads(m)) {
            const int off = u - lag;
            if (!done.insert({slot, off}).second) continue;
            const std::string addr = load_addr(slot, off);
            if (where == Rows::First && off < 0 && m.no_stores && p_.pass_only.count({slot, off}))
                line(ind, "const {} {} = t - {} >= row_begin ? {} : ({})FJ_NAN;", T_, load_name(slot, off), -off, addr, T_);
            else if (where == Rows::First && off < 0)
                line(ind, "const {} {} = t >= {} ? {} : ({})FJ_NAN;", T_, load_name(slot, off), -off, addr, T_);
            else if (where == Rows::Tail && off > 0)
                line(ind, "const {} {} = t + {} < row_end ? {} : ({})FJ_NAN;", T_, load_name(slot, off), off, addr, T_);
            else
                line(ind, "const {} {} = {};", T_, load_name(slot, off), addr);
        }
}

void ColumnScanEmitter::advance(int ind, int rows) {
    for (std::size_t i = 0; i < k_.inputs.size(); ++i) line(ind, "in{} += {}LL * ld_in{};", i, rows, i);
    for (std::size_t i = 0; i < k_.outputs.size(); ++i) line(ind, "out{} += {}LL * ld_out{};", i, rows, i);
    for (std::size_t st = 0; st < f_.counter_select.size(); ++st)
        if (f_.counter_select[st] >= 0) line(ind, "s{} += {};  // run counter: q -> s", st, rows);
}

// One row of the body: rings advance, then the instructions top to bottom; echo rings (plan_echo()) are
// read before them and take this row's values after them.
void ColumnScanEmitter::step(int ind, int u, const RowMode& m) {
    line(ind, "{{  // row {}", row(u));
    const int in = ind + 1;
    for (std::size_t r = 0; r < f_.rings.size(); ++r) {
        const RingInfo& ri = f_.rings[r];
        if (ri.size == 1) continue;
        if (ri.in_regs) {
            line(in, "#pragma unroll");
            line(in, "for (int q = {}; q > 0; --q) r{}[q] = r{}[q - 1];", ri.size - 1, r, r);
        } else {
            line(in, "rp{} = rp{} == {} ? 0 : rp{} + 1;", r, r, ri.size - 1, r);
        }
    }
    if (m.echo == EchoRows::Ring)
        for (std::size_t e = 0; e < p_.echo.size(); ++e)
            line(in, "const double ve{} = fj_echo[{}];  // %{} of row {} - {}", e, echo_slot(e, u), p_.echo[e].earlier,
                 row(u), p_.echo[e].lag);
    const std::vector<bool>& live = row_live(m);
    RowMode rows = m;
    rows.live = &live;
    for (std::size_t i = 0; i < k_.body.size(); ++i)
        if (live[i]) printer_.inst(in, u, i, rows);
    for (std::size_t e = 0; e < p_.echo.size() && m.echo != EchoRows::None; ++e) {
        const EchoRing& r = p_.echo[e];
        if (r.store_at >= 0 && live[static_cast<std::size_t>(r.store_at)]) continue;  // (stored before its refold)
        if (m.echo == EchoRows::Ring) line(in, "fj_echo[{}] = v{};", echo_slot(e, u), r.earlier);
        else line(in, "fj_echo[{} + (int)((unsigned long long)({} - row_begin) % {}u)] = v{};", r.offset, row(u), r.lag, r.earlier);
    }
    line(ind, "}}");
}

}  // namespace fj::codegen::detail
