// The window-scan kernel: kernel IR -> CUDA C++ for long windows (see codegen/cuda/emit.hpp, "Window-scan kernels").
//
// Why: the column-scan kernel re-reads each row from global memory as it leaves a window. With 512 threads
// per SM in flight, a 250-row window keeps 132 x 512 x 250 rows x 8 bytes = 135 MB of rows to re-read, far
// more than the H200's 50 MB L2, so the re-reads come from DRAM: 5 units of traffic against the floor's 3.
// Here a block keeps its 32 columns' whole window in shared memory instead (rings filled by tensor copies,
// sm_90), and so
// that 256 threads still share those columns, each 32-row batch is cut into 8 segments of 4 rows, one per
// warp (lanes are the columns). A segment runs its rows from zero: window sums accumulate their terms from
// 0, run counters note the latest row that reset them. The segments' totals are then combined across warps
// (an exclusive scan, one quantity per warp), and each row's states are the prefix plus its own partial
// value, from which its outputs follow. Measured on the H200 as bench/proto/scan_corr.cu before it was
// generated (bench/RESULTS.md).
//
// Which kernels (plan_window_scan()): every state is one of
//   * a window sum: its one store is s + terms (Add, Sub, Fma chains onto its load) whose terms read no
//     state; the scan adds the segments' sums, so results differ from a sequential run only by rounding
//     (the window sums of lower_ops.cpp are of shifted values, where float64 is nearly exact);
//   * a run counter `c ? 0 : s + 1`: the latest reset row, scanned with max;
//   * a first value `isnan(s) && c ? v : s` (the shift of window sums): found before the pass's rows by a
//     per-column search from the pass's first row, so every row sees the value a sequential run gives it;
//   * a previous value `s := input[t]`: read as input[t - 1] (the state's init on the pass's first row);
// there are no rings, and every lagged input is read only where RowInPass masks its value before the pass
// (KernelFacts::pass_only_lags()): the rings hold the pass's rows only.
//
// Block: 8 warps (kWindowScanWarps; `segs` below, each running `seg_rows` rows of a batch)
// of 32 columns, batches copied ahead by lane 0 of a warp per input (scan_loader(); as many batches as fit,
// up to kWindowScanMaxAhead: at w = 250, 3 for corr, 4 for cov), each completing on its own mbarrier, which
// every thread waits for. Per batch two block barriers: the segments' totals are written; their prefixes
// are written. None is needed before a batch: a warp's segment rows write only its own segment's totals,
// whose prefixes only it read in the batch before, and the ring slot a batch's copy overwrites was last
// read by the segment rows of the batch before, which every warp finished before that batch's second
// barrier (the ring is sized for the results of the batch before still running: back_rows). A third
// barrier there cost 1 % (bench/RESULTS.md). Batches run without guards from the row on which every column
// of the block has its first values (found once per pass), the window's reach and the first output row, up
// to the pass's last whole batch; the others are guarded.
#include "codegen/cuda/window_scan.hpp"

#include <algorithm>
#include <functional>

#include "dsl/error.hpp"

namespace fj::codegen::detail {

namespace {
constexpr int kC = kWindowScanColumns;  // columns per block: a warp's lanes
constexpr int kB = kWindowScanBatchRows;  // rows per batch, in segments of kB / (the block's warps) rows
constexpr int kM = kWindowScanMirrorRows;  // rows of the ring's mirror (at least a segment's)
constexpr int kNone = -(1 << 30);       // a run counter's "no reset in this segment"
static_assert(kB % kWindowScanWarps == 0 && kB / kWindowScanWarps <= kM, "a batch splits into segments of at most kM rows");
}  // namespace

namespace {
void count_tests(const KernelFacts& f, WindowScanPlan& P);  // (below)
}  // namespace

WindowScanPlan plan_window_scan(const KernelFacts& f) {
    const ir::Kernel& k_ = f.kernel;
    const CudaEmitOptions& o_ = f.options;
    WindowScanPlan P;
    P.segments = kWindowScanWarps;
    P.segment_rows = kB / P.segments;
    const int segs = P.segments;
    const std::size_t n = k_.body.size();
    auto fail = [&](std::string why) {
        P.why_not = std::move(why);
        return P;
    };
    if (o_.dtype != DType::F32) return fail("float32 panels only (a float64 window would halve the columns per SM)");
    if (o_.strides.empty()) return fail("needs fixed leading dimensions");
    if (!k_.rings.empty()) return fail("the kernel keeps rings");
    // (select_kernel and the kernel-only functions of emit.hpp give window scans ir::without_refolds(kernel))
    if (!k_.refolds.empty()) return fail("the kernel has refolds, which window scans do not run yet");
    auto state_name = [&](int st) { return fmt::format("state s{} ({})", st, k_.states[static_cast<std::size_t>(st)].what); };

    std::vector<int> stores(k_.states.size(), 0), loads(k_.states.size(), 0);
    std::vector<std::int32_t> store_of(k_.states.size(), -1);
    const std::vector<int> uses = f.use_counts();
    for (std::size_t i = 0; i < n; ++i) {
        if (!f.live[i]) continue;
        const Inst& x = k_.body[i];
        if (x.op == Prim::StoreState) ++stores[x.slot], store_of[x.slot] = static_cast<std::int32_t>(i);
        if (x.op == Prim::LoadState) ++loads[x.slot];
    }
    auto load_of = [&](std::int32_t o, int st) {
        return o >= 0 && k_.body[static_cast<std::size_t>(o)].op == Prim::LoadState && k_.body[o].slot == st;
    };

    // Kinds that need nothing but the store's shape: previous values and first values.
    enum class Kind { None, Sum, Counter, Sticky, Prev };
    std::vector<Kind> kind(k_.states.size(), Kind::None);
    for (std::size_t st = 0; st < k_.states.size(); ++st) {
        if (stores[st] == 0) {
            if (loads[st] > 0) return fail(state_name(static_cast<int>(st)) + " is read but never stored");
            continue;
        }
        if (stores[st] > 1) return fail(state_name(static_cast<int>(st)) + " is stored twice");
        const Inst& v = k_.body[static_cast<std::size_t>(k_.body[store_of[st]].a)];
        if (v.op == Prim::Input) {
            // (Rows before the pass are not in the rings: input[t - 1] must lie in the pass or before the panel.)
            if (v.lag != 0) return fail(state_name(static_cast<int>(st)) + " keeps an input from more than a row back");
            kind[st] = Kind::Prev;
            P.prevs.push_back({static_cast<int>(st), v.slot, v.lag});
        } else if (f.sticky_state[st] && f.live_sticky[st]) {
            const std::int32_t sel = k_.body[store_of[st]].a;
            const Inst& s = k_.body[sel];
            const Inst& c = k_.body[s.a];
            const std::int32_t cond = f.sticky_of[static_cast<std::size_t>(c.a)] == static_cast<int>(st) ? c.b : c.a;
            // The load feeds only the NaN test and the select; the test only the And; the And only the select.
            const std::int32_t test = cond == c.a ? c.b : c.a;
            if (loads[st] != 1 || uses[static_cast<std::size_t>(k_.body[test].a)] != 2 ||
                uses[static_cast<std::size_t>(test)] != 1 || uses[static_cast<std::size_t>(s.a)] != 1)
                return fail(state_name(static_cast<int>(st)) + ": its value before it is set is read");
            kind[st] = Kind::Sticky;
            P.stickies.push_back({static_cast<int>(st), sel, cond, s.b});
        }
    }
    // Values that depend on a state's value from an earlier row (first values and previous values are
    // known per row, so they count as row values).
    std::vector<bool> stateful(n, false);
    for (std::size_t i = 0; i < n; ++i) {
        const Inst& x = k_.body[i];
        if (x.op == Prim::LoadState) {
            stateful[i] = kind[x.slot] != Kind::Prev;
            continue;
        }
        if (x.op == Prim::Select && f.sticky_of[i] >= 0 && kind[f.sticky_of[i]] == Kind::Sticky) continue;
        for (std::int32_t o : {x.a, x.b, x.c})
            if (o >= 0 && stateful[static_cast<std::size_t>(o)]) stateful[i] = true;
    }
    auto row_value = [&](std::int32_t o) { return !stateful[static_cast<std::size_t>(o)]; };
    std::vector<bool> chain(n, false);  // parts of a state's update other than its root (never emitted alone)
    for (std::size_t st = 0; st < k_.states.size(); ++st) {
        if (kind[st] != Kind::None || stores[st] == 0) continue;
        const auto s = static_cast<int>(st);
        const std::int32_t root = k_.body[store_of[st]].a;
        const Inst& r = k_.body[root];
        // A run counter: c ? 0 : s + 1 (f.counter_load()), its condition a row value.
        if (const std::int32_t load = f.counter_load(static_cast<std::size_t>(store_of[st]), uses);
            load >= 0 && loads[st] == 1 && row_value(r.a)) {
            kind[st] = Kind::Counter;
            P.counters.push_back({s, root, r.a});
            chain[static_cast<std::size_t>(load)] = chain[static_cast<std::size_t>(r.c)] = true;
            continue;
        }
        // A window sum: a chain of Add / Sub / Fma from the state's load, every other operand a row value.
        bool ok = loads[st] == 1;
        std::vector<std::int32_t> nodes;
        for (std::int32_t at = root; ok && !load_of(at, s);) {
            const Inst& x = k_.body[at];
            std::int32_t next = -1;
            if (x.op == Prim::Add && !row_value(x.a) && row_value(x.b)) next = x.a;
            else if (x.op == Prim::Add && !row_value(x.b) && row_value(x.a)) next = x.b;
            else if (x.op == Prim::Sub && !row_value(x.a) && row_value(x.b)) next = x.a;
            else if (x.op == Prim::Fma && !row_value(x.c) && row_value(x.a) && row_value(x.b)) next = x.c;
            ok = next >= 0 && uses[static_cast<std::size_t>(next)] == 1;
            if (ok) nodes.push_back(next);
            at = next;
        }
        if (!ok)
            return fail(state_name(s) + " is not a window sum, a run counter, a first value or a previous value");
        kind[st] = Kind::Sum;
        P.sums.push_back({s, root});
        for (std::int32_t c : nodes) chain[static_cast<std::size_t>(c)] = true;
    }
    if (P.sums.empty()) return fail("no window sum to scan");
    for (const StickyValue& st : P.stickies) {
        chain[static_cast<std::size_t>(st.select)] = true;  // (a root: defined per row, never computed)
        const Inst& c = k_.body[k_.body[st.select].a];
        chain[static_cast<std::size_t>(k_.body[st.select].a)] = true;
        for (std::int32_t o : {c.a, c.b})
            if (o != st.cond) chain[static_cast<std::size_t>(o)] = chain[static_cast<std::size_t>(k_.body[o].a)] = true;
    }
    for (const RunCounter& c : P.counters) chain[static_cast<std::size_t>(c.count)] = true;

    // What each phase emits. Segment rows: the sums' chains (their loads become the segment's
    // accumulators) and the counters' conditions. Results: what the outputs need, from the states' roots.
    P.in_a.assign(n, false);
    P.in_c.assign(n, false);
    P.in_pre.assign(n, false);
    P.predef.assign(n, false);
    for (const WindowSum& s : P.sums) P.predef[static_cast<std::size_t>(s.root)] = true;
    for (const RunCounter& c : P.counters) P.predef[static_cast<std::size_t>(c.count)] = true;
    for (const StickyValue& s : P.stickies) P.predef[static_cast<std::size_t>(s.select)] = true;
    std::string bad;
    // Marks `from` and what it needs in `mark`, stopping at `stop`; `allow_chain` lets a sum's own chain in.
    std::function<void(std::int32_t, std::vector<bool>&, const std::vector<bool>&, bool)> need =
        [&](std::int32_t i, std::vector<bool>& mark, const std::vector<bool>& stop, bool allow_chain) {
            const auto u = static_cast<std::size_t>(i);
            if (mark[u] || !bad.empty()) return;
            if (stop[u]) return;
            const Inst& x = k_.body[u];
            if (x.op == Prim::LoadState && kind[x.slot] != Kind::Prev && !(allow_chain && kind[x.slot] == Kind::Sum)) {
                bad = fmt::format("instruction {} reads {} from an earlier row", i, state_name(x.slot));
                return;
            }
            if (chain[u] && !allow_chain) {
                bad = fmt::format("instruction {} is read outside its state's update", i);
                return;
            }
            mark[u] = true;
            for (std::int32_t o : {x.a, x.b, x.c})
                if (o >= 0) need(o, mark, stop, allow_chain);
        };
    std::vector<bool> sticky_roots(n, false), none(n, false);
    for (const StickyValue& s : P.stickies) sticky_roots[static_cast<std::size_t>(s.select)] = true;
    for (const WindowSum& s : P.sums) need(store_of[s.state], P.in_a, sticky_roots, true);
    for (const RunCounter& c : P.counters) need(c.cond, P.in_a, sticky_roots, false);
    for (std::size_t i = 0; i < n; ++i)
        if (f.live[i] && k_.body[i].op == Prim::Output) need(static_cast<std::int32_t>(i), P.in_c, P.predef, false);
    for (const StickyValue& s : P.stickies) {
        need(s.cond, P.in_pre, none, false);
        need(s.value, P.in_pre, none, false);
    }
    if (!bad.empty()) return fail(bad);
    count_tests(f, P);
    for (std::size_t i = 0; i < n; ++i) {
        const Inst& x = k_.body[i];
        if (P.in_pre[i] && ((x.op == Prim::Input && x.lag != 0) || x.op == Prim::RowInPass || x.op == Prim::LoadState))
            return fail("a first value's condition reads more than its own row");
        if (!P.in_a[i] && !P.in_c[i]) continue;
        if (x.op == Prim::Input) {
            const auto pass_only = f.pass_only_lag.find({x.slot, x.lag});
            if (x.lag > 0 && !(pass_only != f.pass_only_lag.end() && pass_only->second))
                return fail(fmt::format("input {} is read {} rows back where RowInPass does not mask it", x.slot, x.lag));
            P.reads.insert({x.slot, x.lag});
            P.reach = std::max(P.reach, x.lag);
            if (P.in_a[i]) P.back_rows = std::max(P.back_rows, x.lag);
            if (P.in_c[i]) P.back_rows = std::max(P.back_rows, x.lag + kB);
        }
        if (x.op == Prim::RowInPass) P.reach = std::max(P.reach, x.lag);
    }
    for (const PrevValue& p : P.prevs) {  // (both phases form a row's previous values)
        P.reads.insert({p.input, p.lag + 1});
        P.reach = std::max(P.reach, p.lag + 1);
        P.back_rows = std::max(P.back_rows, p.lag + 1 + kB);
    }
    std::set<int> ring_set;
    for (const auto& [slot, lag] : P.reads) ring_set.insert(slot);
    for (int slot : ring_set)
        if (o_.strides[static_cast<std::size_t>(slot)] % 4 != 0)
            return fail(fmt::format("input {}'s leading dimension {} is not a multiple of 4 (tensor maps' strides are multiples of 16 bytes)", slot,
                                    o_.strides[static_cast<std::size_t>(slot)]));
    P.ring_inputs.assign(ring_set.begin(), ring_set.end());
    if (P.ring_inputs.empty()) return fail("it reads no input rows");
    P.issuers = std::min(static_cast<int>(P.ring_inputs.size()), segs);
    // Batches copied ahead (each on its own mbarrier, with the batch computed): as many as shared memory
    // holds, up to kWindowScanMaxAhead, unless the options fix it. (Measured on the H200, bench/RESULTS.md:
    // cov w=250 8.40-8.63 ms 4 ahead against 8.67-8.85 ms 2 ahead; corr w=250 12.01-12.03 ms 3 ahead
    // against 12.05-12.17 ms 2 ahead once the copies had no fence before them, 12.49-12.81 against
    // 12.18-12.58 ms while they had.) The ring holds the rows the batch computed and the results of the
    // batch before read (back_rows back from the batch's first row) and those of the batches ahead.
    // Shared memory, in this order: per input its ring (then the mirrored rows), the segments' sums (and the
    // running ones), the copies' mbarriers, the segments' counters (and the running ones), the block's
    // latest row that sets a first value. Sets P's layout for `ahead` batches ahead; its bytes.
    auto bytes_for = [&](int ahead) {
        P.ring_rows = (P.back_rows + (ahead + 1) * kB + kB - 1) / kB * kB;
        P.ring_bytes = static_cast<std::size_t>(P.ring_rows + kM) * kC * sizeof(float);
        P.tsum_at = P.ring_inputs.size() * P.ring_bytes;
        P.mbar_at = P.tsum_at + static_cast<std::size_t>(segs + 1) * kC * P.sums.size() * 8;
        P.tcnt_at = P.mbar_at + static_cast<std::size_t>(ahead + 1) * 8;
        P.ready_at = P.tcnt_at + static_cast<std::size_t>(segs + 1) * kC * P.counters.size() * 4;
        return P.ready_at + 16;
    };
    const int most = o_.window_scan_ahead > 0 ? o_.window_scan_ahead : kWindowScanMaxAhead;
    const int least = o_.window_scan_ahead > 0 ? o_.window_scan_ahead : 1;
    std::size_t bytes = 0;
    for (P.ahead = most; P.ahead >= least; --P.ahead)
        if ((bytes = bytes_for(P.ahead)) <= static_cast<std::size_t>(kWindowScanMaxSharedBytes)) break;
    if (P.ahead < least)
        return fail(fmt::format("its rings would need {} bytes of shared memory per block (at most {}) with {} batch(es) copied ahead",
                                bytes, kWindowScanMaxSharedBytes, least));
    P.smem_bytes = static_cast<int>(bytes);
    P.ok = true;
    return P;
}

std::set<std::int32_t> row_constants(const WindowScanPlan& P) {
    std::set<std::int32_t> constants;
    for (const StickyValue& s : P.stickies) constants.insert(s.select);
    return constants;
}

WindowSplit window_sum_split(const KernelFacts& f, const WindowScanPlan& P) {
    if (!P.ok) return WindowSplit{false, P.why_not, 0, {}};
    return split_window_sums(f.kernel, P.sums, row_constants(P));
}






// A value the results phase (or a guarded row) defines instead of computing it, in the form inst() expects.
void ScanEmitter::scan_predefine(int ind, std::int32_t i, const std::string& expr) {
    const auto u = static_cast<std::size_t>(i);
    if (f_.int_value[u]) {
        line(ind, "const {} iv{} = ({})({});", f_.int32[u] ? "int" : "long long", i, f_.int32[u] ? "int" : "long long", expr);
        if (f_.need_double[u]) line(ind, "const double v{} = (double)iv{};", i, i);
    } else if (f_.fmat[u]) {
        line(ind, "const float fv{} = (float)({});", i, expr);
        line(ind, "const double v{} = (double)fv{};", i, i);
    } else {
        line(ind, "const double v{} = (double)({});", i, expr);
    }
}

// The ring values `phase` reads in the segment's rows, each row once (a row read at two lags, or as a
// previous value and as this row's, is one load), NaN before the pass in guarded batches.
void ScanEmitter::scan_segment_loads(int ind, const std::vector<bool>& phase, bool guarded) {
    const int seg_rows = scan_.segment_rows;
    std::set<std::pair<int, int>> want;  // (input, lag)
    for (std::size_t x = 0; x < k_.body.size(); ++x)
        if (phase[x] && k_.body[x].op == Prim::Input) want.insert({k_.body[x].slot, k_.body[x].lag});
    for (const PrevValue& p : scan_.prevs) want.insert({p.input, p.lag + 1});
    std::set<std::pair<int, int>> done;  // (input, row offset in the segment)
    for (const auto& [slot, lag] : want)
        for (int i = 0; i < seg_rows; ++i) {
            const int off = i - lag;
            if (!done.insert({slot, off}).second) continue;
            const std::string name = load_name(slot, off), at = fmt::format("fj_p{}_{}[{}]", slot, lag, i * kC);
            if (guarded && off < 0)
                line(ind, "const float {} = u_seg >= {} ? {} : __int_as_float(0x7fc00000);", name, -off, at);
            else
                line(ind, "const float {} = {};", name, at);
        }
}

// Previous values of row i: the input one row further back, the state's init on the pass's first row.
void ScanEmitter::scan_prev_values(int ind, int i, bool guarded) {
    for (const PrevValue& p : scan_.prevs) {
        const auto st = static_cast<std::size_t>(p.state);
        const std::string v = load_name(p.input, i - p.lag - 1);
        const char* ty = f_.float_state[st] ? "float" : f_.int_state[st] ? (f_.int32_state[st] ? "int" : "long long") : "double";
        const std::string init = f_.float_state[st] ? flit(k_.states[st].init) : lit(k_.states[st].init);
        const std::string val = fmt::format("({}){}", ty, v);
        if (guarded && i == 0) line(ind, "const {} s{} = u_seg >= 1 ? {} : ({}){};", ty, p.state, val, ty, init);
        else line(ind, "const {} s{} = {};", ty, p.state, val);
    }
}

// First values of row i that `phase` reads: NaN before the column's first row that sets them.
void ScanEmitter::scan_sticky_values(int ind, int i, bool guarded, const std::vector<bool>& phase) {
    for (const StickyValue& s : scan_.stickies) {
        if (!phase[static_cast<std::size_t>(s.select)] && !std::any_of(k_.body.begin(), k_.body.end(), [&](const Inst& x) {
                const auto at = static_cast<std::size_t>(&x - k_.body.data());
                return phase[at] && (x.a == s.select || x.b == s.select || x.c == s.select);
            }))
            continue;
        if (guarded) scan_predefine(ind, s.select, fmt::format("u_seg + {} >= fj_first{} ? s{} : FJ_NAN", i, s.state, s.state));
        else scan_predefine(ind, s.select, fmt::format("s{}", s.state));
    }
}

// The search for each first value: the column's rows from the pass's first, until every one is set.
void ScanEmitter::scan_prescan(int ind) {
    const WindowScanPlan& P = scan_;
    for (const StickyValue& s : P.stickies) {
        line(ind, "double s{} = FJ_NAN;  // {}", s.state, comment_safe(k_.states[s.state].what));
        line(ind, "int fj_first{} = fj_active ? n_pass : 0;  // the row that sets it", s.state);
    }
    if (P.stickies.empty()) return;
    std::set<int> inputs;
    for (std::size_t i = 0; i < k_.body.size(); ++i)
        if (P.in_pre[i] && k_.body[i].op == Prim::Input) inputs.insert(k_.body[i].slot);
    line(ind, "if (fj_active) {{");
    line(ind + 1, "#pragma unroll 1");
    line(ind + 1, "for (int fj_u = 0; fj_u < n_pass; ++fj_u) {{");
    const int in = ind + 2;
    line(in, "const long long t = row_begin + fj_u;");
    for (int slot : inputs) line(in, "const float {} = p.in{}[t * ld_in{} + j];", load_name(slot, 0), slot, slot);
    const RowMode pre = scan_rows(true);
    for (std::size_t i = 0; i < k_.body.size(); ++i)
        if (P.in_pre[i]) inst(in, 0, i, pre);
    std::string all;
    for (const StickyValue& s : P.stickies) {
        line(in, "if (fj_first{} == n_pass && v{}) {{ fj_first{} = fj_u; s{} = v{}; }}", s.state, s.cond, s.state, s.state,
             s.value);
        all += fmt::format("{}fj_first{} < n_pass", all.empty() ? "" : " && ", s.state);
    }
    line(in, "if ({}) break;", all);
    line(ind + 1, "}}");
    line(ind, "}}");
    for (const StickyValue& s : P.stickies)
        if (f_.state_fexact[static_cast<std::size_t>(s.state)]) line(ind, "const float sf{} = (float)s{};", s.state, s.state);
}

// The copy of the next batch into the rings, by lane 0 of the first P.issuers warps (ring input q by warp
// q % P.issuers, so that no one warp, which the block then waits for at the batch's barriers, issues every
// copy): one tensor copy (TMA) per ring input of the batch's 32 rows of the block's 32 columns, and for the
// ring's first slot one more of its first rows into the mirror after the ring's end (read by segments
// whose rows wrap). Rows and columns past the panel arrive as zeros; rows after the pass hold the panel's
// next rows, which feed only rows that are not stored. Each issuer's arrival on the batch's mbarrier
// (initialised for P.issuers arrivals) announces its bytes (a tensor copy always delivers its whole box),
// so the barrier's phase completes when they have all landed. Compared with a 16-byte cp.async per thread,
// the warps are rid of the copies' address arithmetic (bench/RESULTS.md). No proxy fence comes before a
// copy: the threads only ever read the rings (the block barriers of the batch before order those reads), and
// a fence (MEMBAR.ALL.CTA, waiting for the issuer's own stores) made the issuing warp late for every
// batch's barriers (bench/RESULTS.md). The row, ring offset and stage step by a batch per copy (set per
// pass before the first).
void ScanEmitter::scan_loader(int ind) {
    const WindowScanPlan& P = scan_;
    line(ind, "int fj_load_row = (int)row_begin;  // (rows < 2^31: the runtime checks)");
    line(ind, "unsigned fj_dst = 0;  // bytes into a ring");
    line(ind, "auto fj_issue = [&]() {{  // (by lane 0 of warps 0 to {})", P.issuers - 1);
    const int in = ind + 1;
    const int ring_bytes = P.ring_rows * kC * 4;
    line(in, "const unsigned bar = fj_mbar_addr + 8u * fj_issue_stage;");
    line(in, "const bool mirror = fj_dst == 0;  // the ring's first rows again after its end");
    for (int k = 0; k < P.issuers; ++k) {
        std::vector<int> mine;
        for (std::size_t q = 0; q < P.ring_inputs.size(); ++q)
            if (static_cast<int>(q) % P.issuers == k) mine.push_back(P.ring_inputs[q]);
        line(in, "{}if (seg == {}) {{", k == 0 ? "" : "else ", k);
        line(in + 1, "FJ_MBAR_EXPECT(bar, mirror ? {}u : {}u);", mine.size() * (kB + kM) * kC * 4, mine.size() * kB * kC * 4);
        for (int slot : mine) {
            line(in + 1, "FJ_TMA(fj_ring_addr{} + fj_dst, (unsigned long long)&p.tm{}, (int)fj_col0, fj_load_row, bar);", slot, slot);
            line(in + 1, "if (mirror) FJ_TMA(fj_ring_addr{} + {}u, (unsigned long long)&p.tm{}_m, (int)fj_col0, fj_load_row, bar);", slot,
                 ring_bytes, slot);
        }
        line(in, "}}");
    }
    line(in, "fj_load_row += {};", kB);
    line(in, "fj_dst = fj_dst >= {}u ? 0u : fj_dst + {}u;", (P.ring_rows - kB) * kC * 4, kB * kC * 4);
    line(in, "fj_issue_stage = fj_issue_stage == {} ? 0 : fj_issue_stage + 1;", P.ahead);
    line(ind, "}};");
}

// One batch: the segment's rows, the scan of the segments' totals, the results.
void ScanEmitter::scan_batch(int ind, bool guarded) {
    const int segs = scan_.segments, seg_rows = scan_.segment_rows;
    const WindowScanPlan& P = scan_;
    const int QS = static_cast<int>(P.sums.size()), QC = static_cast<int>(P.counters.size());
    const RowMode mode = scan_rows(guarded);
    line(ind, "const int u_seg = u_batch + seg * {};  // the segment's first row in the pass", seg_rows);
    line(ind, "const long long t = row_begin + u_seg;");
    for (const auto& [slot, lag] : P.reads)
        line(ind, "const float* const fj_p{}_{} = reinterpret_cast<const float*>(reinterpret_cast<const unsigned char*>(fj_ring{}) + fj_o{});",
             slot, lag, slot, lag);
    // Segment rows: sums from 0, counters' latest reset row.
    for (const WindowSum& s : P.sums)
        for (int i = 0; i < seg_rows; ++i) line(ind, "double fj_l{}_{};", s.state, i);
    for (const RunCounter& c : P.counters)
        for (int i = 0; i < seg_rows; ++i) line(ind, "int fj_m{}_{};", c.state, i);
    line(ind, "{{");
    const int in = ind + 1;
    // Float64 sums start from -0.0, the identity of addition (0.0 + x is not x for x = -0.0), so that the
    // segment's first row adds nothing. Totals and partial values then differ from a start at 0.0 only in
    // the sign of a zero, and the prefix they are added to is never -0.0 (sums from 0.0), so each row's
    // state is the same.
    for (const WindowSum& s : P.sums) {
        const auto st = static_cast<std::size_t>(s.state);
        if (f_.int_state[st]) line(in, "{} s{} = 0;  // {}", f_.int32_state[st] ? "int" : "long long", s.state, comment_safe(k_.states[st].what));
        else line(in, "double s{} = -0.0;  // {}", s.state, comment_safe(k_.states[st].what));
    }
    for (const RunCounter& c : P.counters)
        line(in, "int fj_m{} = {};  // {}: latest reset", c.state, kNone, comment_safe(k_.states[c.state].what));
    scan_segment_loads(in, P.in_a, guarded);
    for (int i = 0; i < seg_rows; ++i) {
        line(in, "{{  // row u_seg + {}", i);
        scan_prev_values(in + 1, i, guarded);
        scan_sticky_values(in + 1, i, guarded, P.in_a);
        for (std::size_t x = 0; x < k_.body.size(); ++x)
            if (P.in_a[x]) inst(in + 1, i, x, mode);
        for (const RunCounter& c : P.counters)
            line(in + 1, "if (v{}) fj_m{} = u_seg + {};", c.cond, c.state, i);
        for (const WindowSum& s : P.sums) line(in + 1, "fj_l{}_{} = (double)s{};", s.state, i, s.state);
        for (const RunCounter& c : P.counters) line(in + 1, "fj_m{}_{} = fj_m{};", c.state, i, c.state);
        line(in, "}}");
    }
    for (int q = 0; q < QS; ++q) line(in, "fj_tsum[(seg * {} + {}) * {} + lane] = (double)s{};", QS, q, kC, P.sums[q].state);
    for (int q = 0; q < QC; ++q)
        line(in, "fj_tcnt[(seg * {} + {}) * {} + lane] = fj_m{};", QC, q, kC, P.counters[q].state);
    line(ind, "}}");
    line(ind, "FJ_SYNC();  // every segment's totals are written");
    // The exclusive prefix over the segments in place, one quantity per warp; the running total through
    // the previous batch is row segs (after the segments' rows) of each array.
    line(ind, "#pragma unroll 1");
    line(ind, "for (int q = seg; q < {}; q += {}) {{", QS + QC, segs);
    line(ind + 1, "if (q < {}) {{", QS);
    line(ind + 2, "double* const a = fj_tsum + q * {} + lane;", kC);
    line(ind + 2, "double run = a[{}];", segs * QS * kC);
    line(ind + 2, "#pragma unroll");
    line(ind + 2, "for (int k = 0; k < {}; ++k) {{ const double v = a[k * {}]; a[k * {}] = run; run += v; }}", segs, QS * kC,
         QS * kC);
    line(ind + 2, "a[{}] = run;", segs * QS * kC);
    if (QC > 0) {
        line(ind + 1, "}} else {{");
        line(ind + 2, "int* const a = fj_tcnt + (q - {}) * {} + lane;", QS, kC);
        line(ind + 2, "int run = a[{}];", segs * QC * kC);
        line(ind + 2, "#pragma unroll");
        line(ind + 2, "for (int k = 0; k < {}; ++k) {{ const int v = a[k * {}]; a[k * {}] = run; run = max(run, v); }}", segs,
             QC * kC, QC * kC);
        line(ind + 2, "a[{}] = run;", segs * QC * kC);
    }
    line(ind + 1, "}}");
    line(ind, "}}");
    line(ind, "FJ_SYNC();  // every prefix is written");
    // Results: each row's states from the prefix and its partial value, then what the outputs need.
    for (int q = 0; q < QS; ++q)
        line(ind, "const double fj_e{} = fj_tsum[(seg * {} + {}) * {} + lane];", P.sums[q].state, QS, q, kC);
    for (int q = 0; q < QC; ++q)
        line(ind, "const int fj_e{} = fj_tcnt[(seg * {} + {}) * {} + lane];", P.counters[q].state, QC, q, kC);
    std::set<std::pair<int, int>> bounds;  // (counter, at_least): the segment's e - u_seg + C
    for (const CountTest& t : P.count_tests) bounds.insert({t.state, t.at_least});
    for (const auto& [state, at_least] : bounds)
        line(ind, "const int fj_b{}_{} = fj_e{} - u_seg + {};  // the count reaches {} from this row of the segment on",
             state, at_least, state, at_least, at_least);
    std::vector<bool> tested(k_.body.size(), false);
    for (const CountTest& t : P.count_tests) tested[static_cast<std::size_t>(t.compare)] = true;
    for (std::size_t o = 0; o < k_.outputs.size(); ++o) line(ind, "{}* const out{} = fj_out{};", T_, o, o);
    scan_segment_loads(ind, P.in_c, guarded);
    for (int i = 0; i < seg_rows; ++i) {
        line(ind, "{{  // row u_seg + {}", i);
        scan_prev_values(ind + 1, i, guarded);
        scan_sticky_values(ind + 1, i, guarded, P.in_c);
        for (const WindowSum& s : P.sums) scan_predefine(ind + 1, s.root, fmt::format("fj_e{} + fj_l{}_{}", s.state, s.state, i));
        for (const RunCounter& c : P.counters)
            if (!P.tested_counters.count(c.state))
                scan_predefine(ind + 1, c.count, fmt::format("u_seg + {} - max(fj_e{}, fj_m{}_{})", i, c.state, c.state, i));
        for (const CountTest& t : P.count_tests)
            line(ind + 1, "const bool v{} = {}(fj_m{}_{} == {} && fj_b{}_{} <= {});", t.compare, t.negate ? "!" : "", t.state, i,
                 kNone, t.state, t.at_least, i);
        for (std::size_t x = 0; x < k_.body.size(); ++x)
            if (P.in_c[x] && !tested[x]) inst(ind + 1, i, x, mode);
        line(ind, "}}");
    }
}

// The constant leading dimensions, the loop over the block's time tiles, a pass's rows and its batches of
// `batch_rows` rows, and the pass's first values (scan_prescan()): the start of both window-scan kernels.
// Tensor copies need the panels' rows 16-byte aligned (a tensor map's strides are multiples of 16 bytes;
// plan_window_scan() asks for leading dimensions of 4k elements; the runtime runs the column scan on panels that
// are not aligned or whose column count is not a multiple of 4).
void ScanEmitter::scan_pass_begin(int batch_rows) {
    const std::size_t ni = k_.inputs.size(), no = k_.outputs.size();
    for (std::size_t i = 0; i < ni; ++i) line(1, "const long long ld_in{} = {}LL;", i, o_.strides[i]);
    for (std::size_t i = 0; i < no; ++i) line(1, "const long long ld_out{} = {}LL;", i, o_.strides[ni + i]);
    line(1, "for (long long tile = blockIdx.y; tile < p.ntiles; tile += gridDim.y) {{");
    line(2, "const long long out_begin = tile * p.tile_rows;");
    line(2, "const long long row_end = out_begin + p.tile_rows < p.rows ? out_begin + p.tile_rows : p.rows;");
    const int halo = std::max(0, k_.halo);
    line(2, "const long long row_begin = out_begin > {} ? out_begin - {} : 0;", halo, halo);
    line(2, "const int n_pass = (int)(row_end - row_begin), first_out = (int)(out_begin - row_begin);");
    line(2, "const int nb = (n_pass + {}) / {};", batch_rows - 1, batch_rows);
    scan_prescan(2);
}

// The pass's row from which this column has all its first values (for the block's largest, by atomicMax).
std::string ScanEmitter::scan_first_values_row() const {
    std::string m = "0";
    for (const StickyValue& s : scan_.stickies) m = fmt::format("max({}, fj_first{})", m, s.state);
    return m;
}

namespace {

// A run counter's count on row u_seg + i is u_seg + i - max(e, m_i) (e: the latest reset before the
// segment, from the scan; m_i: the latest in the segment up to row i, or kNone). Where the results only
// compare it with constants C of at least seg_rows rows (corr's "the window is full", "x changed in the window"),
// count >= C <=> m_i is kNone (a reset in the segment is fewer than seg_rows rows back) and e - u_seg + C <= i:
// two integer tests per row, with e - u_seg + C once per segment, instead of a max, a subtraction and a
// test. Counters with any other use keep their count.
void count_tests(const KernelFacts& f, WindowScanPlan& P) {
    const ir::Kernel& k_ = f.kernel;
    const int seg_rows = P.segment_rows;
    for (const RunCounter& c : P.counters) {
        std::vector<CountTest> tests;
        bool only_tests = true;
        for (std::size_t x = 0; x < k_.body.size() && only_tests; ++x) {
            const Inst& y = k_.body[x];
            if (!P.in_c[x] || (y.a != c.count && y.b != c.count && y.c != c.count)) continue;
            CountTest t;
            only_tests = as_count_test(k_, static_cast<std::int32_t>(x), c.count, c.state, &t) && t.at_least >= seg_rows;
            if (!only_tests) break;
            tests.push_back({t.compare, t.state, t.at_least, t.negate});
        }
        if (!only_tests || tests.empty()) continue;
        P.tested_counters.insert(c.state);
        P.count_tests.insert(P.count_tests.end(), tests.begin(), tests.end());
    }
}

}  // namespace

std::string ScanEmitter::run_scan() {
    if (!scan_.ok)
        throw BackendError(fmt::format("CUDA emitter: kernel {} cannot run as a window scan: {}", k_.name, scan_.why_not));
    const int segs = scan_.segments, seg_rows = scan_.segment_rows;
    const WindowScanPlan& P = scan_;
    header();
    line(0, "// Window scan (window_scan.cpp): {} columns per block, {} rows per batch in {} segments, rings of {} rows.",
         kC, kB, segs, P.ring_rows);
    // (__grid_constant__: the tensor maps are read where the parameters are, by address.)
    line(0, "extern \"C\" __global__ void __launch_bounds__({}, 2) {}(const __grid_constant__ fj_params_{} p) {{", kC * segs,
         name_, name_);
    const int QS = static_cast<int>(P.sums.size()), QC = static_cast<int>(P.counters.size());
    const std::size_t ni = k_.inputs.size(), no = k_.outputs.size();
    if (o_.strides.size() != ni + no)
        throw BackendError(fmt::format("CUDA emitter: kernel {}: {} fixed strides for {} panels", k_.name,
                                       o_.strides.size(), ni + no));
    line(1, "FJ_SMEM_DECL;");
    // (The layout of plan_window_scan(); offsets in the pointers' elements.)
    for (std::size_t q = 0; q < P.ring_inputs.size(); ++q) {
        const int slot = P.ring_inputs[q];
        line(1, "float* const fj_ring{} = reinterpret_cast<float*>(fj_smem) + {};  // rows by the pass's row modulo {}", slot,
             q * P.ring_bytes / 4, P.ring_rows);
        line(1, "const unsigned fj_ring_addr{} = FJ_SHARED_ADDR(fj_ring{});", slot, slot);
    }
    line(1, "double* const fj_tsum = reinterpret_cast<double*>(reinterpret_cast<float*>(fj_smem) + {});  // [{} + 1][{}][{}]",
         P.tsum_at / 4, segs, QS, kC);
    line(1, "const unsigned fj_mbar_addr = FJ_SHARED_ADDR(fj_tsum + {});  // [{}] mbarriers, one per batch in flight",
         (P.mbar_at - P.tsum_at) / 8, P.ahead + 1);
    line(1, "int* const fj_tcnt = reinterpret_cast<int*>(fj_tsum + {});  // [{} + 1][{}][{}]", (P.tcnt_at - P.tsum_at) / 8, segs,
         QC, kC);
    line(1, "int* const fj_ready_at = fj_tcnt + {};", (P.ready_at - P.tcnt_at) / 4);
    line(1, "const int lane = threadIdx.x & {}, seg = threadIdx.x >> 5;", kC - 1);
    line(1, "const long long j = (long long)blockIdx.x * {} + lane;", kC);
    line(1, "const bool fj_active = j < p.cols;");
    line(1, "const long long fj_col0 = (long long)blockIdx.x * {};", kC);
    line(1, "if (threadIdx.x == 0) {{");
    for (int k = 0; k <= P.ahead; ++k) line(2, "FJ_MBAR_INIT(fj_mbar_addr + {}u, {});", 8 * k, P.issuers);
    line(2, "FJ_MBAR_INIT_FENCE();");
    line(1, "}}");
    line(1, "int fj_stage = 0, fj_issue_stage = 0;  // the mbarrier of the batch waited for, issued");
    line(1, "unsigned fj_parity = 0;  // bit k: the phase parity mbarrier k completes next");
    scan_pass_begin(kB);
    // The rows from which every column of the block has its first values: batches from there on need no
    // guard for them. (The previous pass read this word before its last batch's barriers.)
    if (!P.stickies.empty()) line(2, "if (threadIdx.x == 0) *fj_ready_at = 0;");
    line(2, "FJ_SYNC();  // the previous pass is done with the rings and the totals");
    if (!P.stickies.empty()) {
        line(2, "atomicMax(fj_ready_at, {});", scan_first_values_row());
        line(2, "FJ_SYNC();");
    }
    line(2, "const int fj_ready = {};", P.stickies.empty() ? "0" : "*fj_ready_at");
    for (int q = 0; q < QS; ++q)
        line(2, "if (seg == {}) fj_tsum[{} + lane] = {};", q % segs, (segs * QS + q) * kC, lit(k_.states[P.sums[q].state].init));
    for (int q = 0; q < QC; ++q)
        line(2, "if (seg == {}) fj_tcnt[{} + lane] = {};", (QS + q) % segs, (segs * QC + q) * kC,
             -static_cast<long long>(k_.states[P.counters[q].state].init) - 1);
    scan_loader(2);
    line(2, "const bool fj_issuer = lane == 0 && seg < {};", P.issuers);
    line(2, "if (fj_issuer) {{");
    for (int b = 0; b < P.ahead; ++b) line(3, "if ({} < nb) fj_issue();", b);
    line(2, "}}");
    // Per lag read, the byte offset in a ring of this warp's segment's first row read at that lag and of
    // this lane's column; and this segment's first output row; both stepped by a batch.
    std::set<int> lags;
    for (const auto& [slot, lag] : P.reads) lags.insert(lag);
    for (int lag : lags)
        line(2, "unsigned fj_o{} = (unsigned)(((seg * {} >= {} ? seg * {} - {} : seg * {} + {}) * {} + lane) * 4);", lag, seg_rows, lag,
             seg_rows, lag, seg_rows, P.ring_rows - lag, kC);
    for (std::size_t o = 0; o < no; ++o)
        line(2, "{}* fj_out{} = p.out{} + (row_begin + seg * {}) * ld_out{} + j;", T_, o, o, seg_rows, o);
    line(2, "#pragma unroll 1");
    line(2, "for (int b = 0; b < nb; ++b) {{");
    line(3, "const int u_batch = b * {};", kB);
    line(3, "FJ_MBAR_WAIT(fj_mbar_addr + 8u * fj_stage, (fj_parity >> fj_stage) & 1u);  // the batch has landed");
    line(3, "fj_parity ^= 1u << fj_stage;");
    line(3, "fj_stage = fj_stage == {} ? 0 : fj_stage + 1;", P.ahead);
    line(3, "if (fj_issuer && b + {} < nb) fj_issue();", P.ahead);
    line(3, "if (u_batch >= fj_ready && u_batch >= {} && u_batch >= first_out && u_batch + {} <= n_pass) {{", P.reach, kB);
    scan_batch(4, false);
    line(3, "}} else {{");
    scan_batch(4, true);
    line(3, "}}");
    for (int lag : lags)
        line(3, "fj_o{} = fj_o{} >= {}u ? fj_o{} - {}u : fj_o{} + {}u;", lag, lag, (P.ring_rows - kB) * kC * 4, lag,
             (P.ring_rows - kB) * kC * 4, lag, kB * kC * 4);
    for (std::size_t o = 0; o < no; ++o) line(3, "fj_out{} += {}LL * ld_out{};", o, kB, o);
    line(2, "}}");
    line(1, "}}");
    line(0, "}}");
    return src_.take();
}

}  // namespace fj::codegen::detail
