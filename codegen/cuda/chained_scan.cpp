// The chained window scan: kernel IR -> CUDA C++ for long windows whose sums split (see codegen/cuda/emit.hpp,
// CudaEmitOptions::window_scan_chain; the design of bench/proto/chain_corr.cu, measured there).
//
// Why: the window scan (window_scan.cpp) runs a batch's 32 rows as 8 segments on 8 warps and combines
// them with two block barriers per batch; on the H200 14 % of its warps' time went to those barriers and
// it evaluates every row's leaving terms for the segments' sums. Here warp q of the block's W runs whole
// batches of R rows (batch b on warp b % W), one row after the other, from the window sums through the
// batch before, which the warp running that batch hands over:
//   A  the batch's entering terms (window_terms.hpp: the leaving terms are the same terms w rows back,
//      negated) summed, kept by batch in shared memory, and its run counters' latest reset row;
//   K  the batch's entering sums minus those of the batch w / R before (R divides w: its rows are the ones
//      leaving), taken before the wait, plus the sums through the batch before (from warp b - 1 % W through
//      mbarrier b - 1 % W), handed on to the next batch's warp; counters by max. The hand-over is the
//      chain's critical path: after the wait come only loads, one addition per sum and stores (with the
//      subtraction after the wait too, ncu put 33 % of the warps' samples at that wait on the H200);
//   C  the batch's rows from the sums through the batch before, each row's whole update (entering and
//      leaving terms) and its results, as the column scan would.
// No block barrier: a warp waits only for the sums it needs after its own A. W mbarriers, one per warp,
// because a parity wait cannot tell a phase from the one two later: a warp waiting for batch b - 1's sums
// is at most one phase ahead of mbarrier (b - 1) % W, as it needed batch b - 1 - W's sums for its own last
// batch. Rows arrive by tensor copies of R rows into a ring of `slots` batches per input, the ring's first
// slot preceded by a copy of the last slot's last kWindowScanMirrorRows rows (so that the rows a batch reads
// at any lag are contiguous: a lag's rows lie in one slot, or in the end of the slot before and the start of
// the next); a slot is freed when every batch reading it has arrived on its mbarrier (all lanes), and
// refilled by the batch that reads it from furthest back. A batch's rows run in loops of `group` rows (a
// divisor of R): straight-line code for all R rows was slower (see kChainGroupMax). First values (the sums' shift) come from a search before the pass as in the window
// scan; the entering sums of a batch use the first values of its own rows, which is what the leaving terms
// w rows later would use wherever the terms are not 0 (lowering's shifted sums mask every row before the
// value is set). One block of W warps per SM: its rings hold the w rows of the window and W + ahead batches.
#include <fmt/ranges.h>

#include "codegen/cuda/window_scan.hpp"

#include "dsl/error.hpp"

namespace fj::codegen::detail {

namespace {
constexpr int kC = kWindowScanColumns;
constexpr int kNone = -(1 << 30);  // a run counter's "no reset in this batch"
// Rows per iteration of a batch's row loops, at most: the straight-line code of a 25-row batch took 128
// registers, spilled and, at 160 KB of SASS, ran at 15.5 ms where the prototype's 5-row loop ran at 10.8.
constexpr int kChainGroupMax = 6;
}  // namespace

ChainPlan plan_chained_scan(const KernelFacts& f, const WindowScanPlan& P) {
    const ir::Kernel& k_ = f.kernel;
    const CudaEmitOptions& o_ = f.options;
    ChainPlan H;
    H.split = window_sum_split(f, P);
    auto fail = [&](std::string why) {
        H.why_not = std::move(why);
        return H;
    };
    if (!P.ok) return fail(P.why_not);
    if (!H.split.ok) return fail("its window sums do not split into entering and leaving terms: " + H.split.why_not);
    for (std::size_t q = 0; q < P.sums.size(); ++q)  // (integer sums: counts, kept exactly as float64)
        for (const SumTerm& t : H.split.entering[q])
            if (t.b >= 0 && (f.is_int(t.a) || f.is_int(t.b)))
                return fail(fmt::format("window sum s{} has an integer product", P.sums[q].state));
    const int w = H.split.window;
    for (int r = kWindowScanBatchRows; r >= kWindowScanChainMinRows && H.rows == 0; --r)
        if (w % r == 0) H.rows = r;
    if (H.rows == 0)
        return fail(fmt::format("no batch of {} to {} rows divides the window of {} rows", kWindowScanChainMinRows,
                                kWindowScanBatchRows, w));
    const int R = H.rows;
    H.window_batches = w / R;
    std::set<int> dists{0};
    for (const auto& [slot, lag] : P.reads) {  // (previous values' rows included)
        dists.insert(lag / R);
        if (lag % R) dists.insert(lag / R + 1);
    }
    H.dists.assign(dists.begin(), dists.end());
    for (const auto& [slot, lag] : P.reads)
        if (lag % R > kWindowScanMirrorRows)
            return fail(fmt::format("input {} is read {} rows back: {} rows into the batch before, more than the ring's {} mirrored rows",
                                    slot, lag, lag % R, kWindowScanMirrorRows));
    H.group = 1;  // rows per iteration of the batch's row loops: the largest divisor of R up to kChainGroupMax
    for (int g = kChainGroupMax; g >= 1 && H.group == 1; --g)
        if (R % g == 0) H.group = g;
    H.warps = kWindowScanChainWarps;
    H.ahead = kWindowScanChainAhead;
    H.slots = H.dists.back() + H.warps + H.ahead;
    H.sum_slots = H.window_batches + H.warps + 1;
    // What phase A evaluates: the entering terms and the counters' conditions, and what they read.
    std::vector<bool>& in_e = H.in_entering;
    in_e.assign(k_.body.size(), false);
    for (const auto& terms : H.split.entering)
        for (const SumTerm& t : terms) {
            in_e[static_cast<std::size_t>(t.a)] = true;
            if (t.b >= 0) in_e[static_cast<std::size_t>(t.b)] = true;
        }
    for (const RunCounter& c : P.counters) in_e[static_cast<std::size_t>(c.cond)] = true;
    f.operand_closure(in_e, [&](std::size_t i) { return P.predef[i] ? Reach::Leaf : Reach::Expand; });  // (first values: defined per row)
    for (const StickyValue& s : P.stickies) in_e[static_cast<std::size_t>(s.select)] = false;
    // Shared memory, in this order: per input its ring (the mirrored rows, then the slots), the entering
    // sums by batch, the two hand-over slots of sums and of counters, the mbarriers, the ready row.
    const std::size_t QS = P.sums.size(), QC = P.counters.size();
    H.ring_bytes = (static_cast<std::size_t>(H.slots) * R + kWindowScanMirrorRows) * kC * 4;
    H.esum_at = P.ring_inputs.size() * H.ring_bytes;
    H.csum_at = H.esum_at + static_cast<std::size_t>(H.sum_slots) * QS * kC * 8;
    H.ccnt_at = H.csum_at + 2 * QS * kC * 8;
    H.bars_at = H.ccnt_at + 2 * QC * kC * 4;
    H.ready_at = H.bars_at + (2 * static_cast<std::size_t>(H.slots) + H.warps) * 8;
    const std::size_t bytes = H.ready_at + 16;
    if (bytes > static_cast<std::size_t>(kWindowScanChainMaxSharedBytes))
        return fail(fmt::format("its rings would need {} bytes of shared memory per block (at most {})", bytes,
                                kWindowScanChainMaxSharedBytes));
    H.smem_bytes = static_cast<int>(bytes);
    H.ok = true;
    if (o_.quiet_batches) {
        std::vector<RunCounter> counters;  // (counts only tested: the quiet copy of C does not keep them)
        for (const RunCounter& c : P.counters)
            if (P.tested_counters.count(c.state)) counters.push_back(c);
        H.quiet = plan_quiet_rows(k_, counters, P.count_tests, w, row_constants(P));
    }
    return H;
}


// The ring values `phase` reads in row i of the row group (u_seg: its first row), each row once: input
// `slot` at lag L from fj_g<slot>_<L>, the group's row 0 at that lag in the ring (rows a batch reads lie
// in one slot, or in the end of the slot before and the start of its own: contiguous, with the ring's
// first slot preceded by a copy of the last's last rows). NaN before the pass in guarded batches.
void ScanEmitter::chain_loads(int ind, const std::vector<bool>& phase, int i, bool guarded) {
    std::map<std::pair<int, int>, int> want;  // (input, row offset) -> a lag it is read at
    for (std::size_t x = 0; x < k_.body.size(); ++x)
        if (phase[x] && k_.body[x].op == Prim::Input) want.insert({{k_.body[x].slot, i - k_.body[x].lag}, k_.body[x].lag});
    for (const PrevValue& p : scan_.prevs) want.insert({{p.input, i - p.lag - 1}, p.lag + 1});
    for (const auto& [at_row, lag] : want) {
        const auto [slot, off] = at_row;
        const std::string name = load_name(slot, off), at = fmt::format("fj_g{}_{}[{}]", slot, lag, i * kC);
        if (guarded && off < 0)
            line(ind, "const float {} = u_seg >= {} ? {} : __int_as_float(0x7fc00000);", name, -off, at);
        else
            line(ind, "const float {} = {};", name, at);
    }
}

// Row i of a group, opened: the values the phase's instructions read (its inputs at every lag, previous
// values, sticky first values).
void ScanEmitter::chain_row_begin(int ind, const std::vector<bool>& phase, int i, bool guarded) {
    line(ind, "{{  // row u_seg + {}", i);
    chain_loads(ind + 1, phase, i, guarded);
    scan_prev_values(ind + 1, i, guarded);
    scan_sticky_values(ind + 1, i, guarded, phase);
}

// The loop over a batch's row groups (H.group rows an iteration): the group's first row and its row
// pointers at every lag read.
void ScanEmitter::chain_group_begin(int ind) {
    const ChainPlan& H = chain_;
    line(ind, "#pragma unroll 1");
    line(ind, "for (int fj_grp = 0; fj_grp < {}; fj_grp += {}) {{", H.rows, H.group);
    line(ind + 1, "const int u_seg = u_batch + fj_grp;  // the row group's first row in the pass");
    line(ind + 1, "const long long t = row_begin + u_seg;");
    for (const auto& [slot, lag] : scan_.reads)
        line(ind + 1, "const float* const fj_g{}_{} = fj_b{}_{} + fj_grp * {};", slot, lag, slot, lag, kC);
}

// One batch on its warp: A, K, C (see the file's header). Unguarded batches whose counters are all in their
// quiet states on every lane (quiet_rows.hpp: A gathers what decides it) run C's rows with what that state
// implies as constants: a warp vote picks that copy of C or the other.
void ScanEmitter::chain_batch(int ind, bool guarded) {
    const WindowScanPlan& P = scan_;
    const ChainPlan& H = chain_;
    const int QS = static_cast<int>(P.sums.size()), QC = static_cast<int>(P.counters.size());
    const std::size_t n = k_.body.size();
    const QuietRows* quiet = !guarded && H.quiet.ok ? &H.quiet : nullptr;
    const RowMode mode = scan_rows(guarded);
    const std::vector<bool>& in_e = H.in_entering;
    if (quiet) line(ind, "bool fj_quiet;  // this lane's counters are in their quiet states");
    line(ind, "{{  // A: the batch's entering sums and latest resets");
    int in = ind + 1;
    for (const WindowSum& s : P.sums) line(in, "double fj_x{} = 0.0;", s.state);
    for (const RunCounter& c : P.counters) line(in, "int fj_m{} = {};", c.state, kNone);
    if (quiet)
        for (const QuietCounter& c : quiet->counters)
            if (c.how == QuietState::ResetEveryRow) line(in, "bool fj_a{} = true;  // a reset on every row", c.state);
    chain_group_begin(in);
    ++in;
    for (int i = 0; i < H.group; ++i) {
        chain_row_begin(in, in_e, i, guarded);
        for (std::size_t x = 0; x < n; ++x)
            if (in_e[x]) inst(in + 1, i, x, mode);
        for (std::size_t q = 0; q < P.sums.size(); ++q)
            for (const SumTerm& t : H.split.entering[q]) {
                const int st = P.sums[q].state;
                if (t.b < 0) line(in + 1, "fj_x{} {}= {}{};", st, t.sign > 0 ? "+" : "-", f_.is_int(t.a) ? "(double)iv" : "v", t.a);
                else line(in + 1, "fj_x{} = fma({}v{}, v{}, fj_x{});", st, t.sign > 0 ? "" : "-", t.a, t.b, st);
            }
        for (const RunCounter& c : P.counters) line(in + 1, "if (v{}) fj_m{} = u_seg + {};", c.cond, c.state, i);
        if (quiet)
            for (const QuietCounter& c : quiet->counters)
                if (c.how == QuietState::ResetEveryRow) line(in + 1, "fj_a{} = fj_a{} && v{};", c.state, c.state, c.cond);
        line(in, "}}");
    }
    --in;
    line(in, "}}");
    for (int q = 0; q < QS; ++q)
        line(in, "fj_esum[((b % {}) * {} + {}) * {} + lane] = fj_x{};", H.sum_slots, QS, q, kC, P.sums[q].state);
    // K: the sums through the batch before, then through this one for the next batch's warp. The hand-over
    // is the chain's critical path (a batch waits for it after its A): everything that does not need the
    // previous batch's sums is done before the wait, so that after it come only the loads of those sums, one
    // addition each, and the stores. The leaving rows' sums (batch b - w/R's entering sums) are subtracted
    // from this batch's first; they are there once that batch's K is done: waited for on its barrier while
    // it is within W batches (at most one phase ahead of this wait), else implied by this warp's wait for
    // batch b - W - 1 on its previous batch. (c + (x - e) also rounds once at the window's magnitude where
    // (c + x) - e rounded twice.)
    line(in, "if (b >= {}) {{  // batch b - {}'s entering rows leave", H.window_batches, H.window_batches);
    if (H.window_batches <= H.warps)
        line(in + 1, "FJ_MBAR_WAIT(fj_cbar + 8u * ((b - {}) % {}), ((b - {}) / {}) & 1);  // its sums are there",
             H.window_batches, H.warps, H.window_batches, H.warps);
    line(in + 1, "const double* const fj_eo = fj_esum + ((b - {}) % {}) * {} + lane;", H.window_batches, H.sum_slots,
         QS * kC);
    for (int q = 0; q < QS; ++q) line(in + 1, "fj_x{} -= fj_eo[{}];", P.sums[q].state, q * kC);
    line(in, "}}");
    line(in, "if (b > 0) {{");
    line(in + 1, "FJ_MBAR_WAIT(fj_cbar + 8u * ((b - 1) % {}), ((b - 1) / {}) & 1);  // batch b - 1's sums are there", H.warps,
         H.warps);
    for (int q = 0; q < QS; ++q)
        line(in + 1, "fj_c{} = fj_csum[(((b - 1) & 1) * {} + {}) * {} + lane];", P.sums[q].state, QS, q, kC);
    for (int q = 0; q < QC; ++q)
        line(in + 1, "fj_e{} = fj_ccnt[(((b - 1) & 1) * {} + {}) * {} + lane];", P.counters[q].state, QC, q, kC);
    line(in, "}}");
    for (int q = 0; q < QS; ++q) {
        const int st = P.sums[q].state;
        line(in, "fj_csum[((b & 1) * {} + {}) * {} + lane] = fj_c{} + fj_x{};", QS, q, kC, st, st);
    }
    for (int q = 0; q < QC; ++q) {
        const int st = P.counters[q].state;
        line(in, "fj_ccnt[((b & 1) * {} + {}) * {} + lane] = max(fj_e{}, fj_m{});", QC, q, kC, st, st);
    }
    line(in, "FJ_MBAR_ARRIVE(fj_cbar + 8u * (b % {}));", H.warps);
    if (quiet) {
        // (Lanes past the panel's columns store nothing: any state will do for them.)
        std::vector<std::string> conds;
        for (const QuietCounter& c : quiet->counters)
            conds.push_back(c.how == QuietState::ResetEveryRow
                                ? fmt::format("fj_a{}", c.state)
                                : fmt::format("(fj_m{} == {} && fj_e{} < u_batch - {})", c.state, kNone, c.state, c.clear_rows));
        line(in, "fj_quiet = !fj_active || ({});", fmt::join(conds, " && "));
    }
    line(ind, "}}");
    if (quiet) {
        line(ind, "if (__all_sync(0xffffffffu, fj_quiet)) {{  // every lane's rows are quiet");
        chain_rows(ind + 1, guarded, quiet);
        line(ind, "}} else {{");
        chain_rows(ind + 1, guarded, nullptr);
        line(ind, "}}");
    } else {
        chain_rows(ind, guarded, nullptr);
    }
}

// C: the batch's rows from the sums through the batch before; with `quiet`, for a batch whose counters are
// in their quiet states: their tests and what those imply are constants and the counters are not kept.
void ScanEmitter::chain_rows(int ind, bool guarded, const QuietRows* quiet) {
    const WindowScanPlan& P = scan_;
    const ChainPlan& H = chain_;
    const std::size_t n = k_.body.size();
    auto still = [&](int state) { return quiet && quiet->has(state); };  // counters in their quiet states
    const RowMode mode = scan_rows(guarded, quiet);  // (inst() gives what is known its value)
    line(ind, "{{  // C: the batch's rows and results{}", quiet ? " (quiet)" : "");
    int in = ind + 1;
    for (const WindowSum& s : P.sums) {
        const auto st = static_cast<std::size_t>(s.state);
        const char* ty = f_.int_state[st] ? (f_.int32_state[st] ? "int" : "long long") : "double";
        line(in, "{} s{} = ({})fj_c{};  // {}", ty, s.state, ty, s.state, comment_safe(k_.states[st].what));
    }
    // Run counters: a formed count needs the latest reset in the batch so far; a count tested against a
    // constant C only the row of the group from which the count reaches C (the latest reset + C, relative to
    // the group's first row): a reset on row i sets it to i + C, each group moves it back by its rows.
    for (const RunCounter& c : P.counters)
        if (!P.tested_counters.count(c.state)) line(in, "int fj_m{} = {};  // latest reset in the batch", c.state, kNone);
    std::set<std::pair<int, int>> bounds;  // (counter, at_least)
    for (const CountTest& t : P.count_tests)
        if (!still(t.state)) bounds.insert({t.state, t.at_least});
    for (const auto& [state, at_least] : bounds)
        line(in, "int fj_v{}_{} = fj_e{} + {} - u_batch;  // the count reaches {} from this row of the group on", state, at_least,
             state, at_least, at_least);
    std::vector<bool> tested(n, false), both(n, false);
    for (const CountTest& t : P.count_tests) tested[static_cast<std::size_t>(t.compare)] = true;
    for (std::size_t x = 0; x < n; ++x) both[x] = P.in_a[x] || P.in_c[x];
    chain_group_begin(in);
    ++in;
    for (std::size_t o = 0; o < k_.outputs.size(); ++o) line(in, "{}* const out{} = p.out{} + t * ld_out{} + j;", T_, o, o, o);
    for (int i = 0; i < H.group; ++i) {
        chain_row_begin(in, both, i, guarded);
        for (std::size_t x = 0; x < n; ++x)
            if (P.in_a[x]) inst(in + 1, i, x, mode);
        for (const RunCounter& c : P.counters) {
            if (P.tested_counters.count(c.state)) continue;
            line(in + 1, "if (v{}) fj_m{} = u_seg + {};", c.cond, c.state, i);
            scan_predefine(in + 1, c.count, fmt::format("u_seg + {} - max(fj_e{}, fj_m{})", i, c.state, c.state));
        }
        for (const RunCounter& c : P.counters)
            for (const auto& [state, at_least] : bounds)
                if (state == c.state) line(in + 1, "if (v{}) fj_v{}_{} = {};", c.cond, state, at_least, i + at_least);
        for (const CountTest& t : P.count_tests)
            if (still(t.state)) inst(in + 1, i, static_cast<std::size_t>(t.compare), mode);
            else line(in + 1, "const bool v{} = {} {} fj_v{}_{};", t.compare, i, t.negate ? "<" : ">=", t.state, t.at_least);
        for (std::size_t x = 0; x < n; ++x)
            if (P.in_c[x] && !P.in_a[x] && !tested[x]) inst(in + 1, i, x, mode);
        line(in, "}}");
    }
    for (const auto& [state, at_least] : bounds) line(in, "fj_v{}_{} -= {};", state, at_least, H.group);
    --in;
    line(in, "}}");
    line(ind, "}}");
}

std::string ScanEmitter::run_chain() {
    if (!chain_.ok)
        throw BackendError(fmt::format("CUDA emitter: kernel {} cannot run as a chained window scan: {}", k_.name, chain_.why_not));
    const WindowScanPlan& P = scan_;
    const ChainPlan& H = chain_;
    const int R = H.rows, W = H.warps, NB = H.slots, NE = H.sum_slots;
    const int QS = static_cast<int>(P.sums.size()), QC = static_cast<int>(P.counters.size());
    const std::size_t ni = k_.inputs.size(), no = k_.outputs.size();
    if (o_.strides.size() != ni + no)
        throw BackendError(fmt::format("CUDA emitter: kernel {}: {} fixed strides for {} panels", k_.name, o_.strides.size(), ni + no));
    header();
    line(0, "// Chained window scan (chained_scan.cpp): {} columns per block, {} warps each running whole batches of {} rows,",
         kC, W, R);
    line(0, "// window {} rows, rings of {} batches.", H.split.window, NB);
    line(0, "extern \"C\" __global__ void __launch_bounds__({}, 1) {}(const __grid_constant__ fj_params_{} p) {{", kC * W, name_, name_);
    line(1, "FJ_SMEM_DECL;");
    const int kM = kWindowScanMirrorRows;
    // (The layout of plan_chained_scan(); offsets in the pointers' elements.)
    for (std::size_t q = 0; q < P.ring_inputs.size(); ++q) {
        const int slot = P.ring_inputs[q];
        line(1, "float* const fj_ring{} = reinterpret_cast<float*>(fj_smem) + {};  // [{} batches][{} rows][{}], after the last {} rows again",
             slot, (q * H.ring_bytes) / 4 + kM * kC, NB, R, kC, kM);
        line(1, "const unsigned fj_ring_addr{} = FJ_SHARED_ADDR(fj_ring{});", slot, slot);
    }
    line(1, "double* const fj_esum = reinterpret_cast<double*>(reinterpret_cast<float*>(fj_smem) + {});  // [{}][{}][{}] entering sums by batch",
         H.esum_at / 4, NE, QS, kC);
    line(1, "double* const fj_csum = fj_esum + {};  // [2][{}][{}] window sums through a batch", (H.csum_at - H.esum_at) / 8, QS, kC);
    line(1, "int* const fj_ccnt = reinterpret_cast<int*>(fj_csum + {});  // [2][{}][{}] latest resets through a batch",
         (H.ccnt_at - H.csum_at) / 8, QC, kC);
    line(1, "const unsigned fj_full = FJ_SHARED_ADDR(fj_ccnt + {});  // [{}] mbarriers: a slot's rows have landed",
         (H.bars_at - H.ccnt_at) / 4, NB);
    line(1, "const unsigned fj_empty = fj_full + {}u;  // [{}]: every batch reading a slot is done with it", 8 * NB, NB);
    line(1, "const unsigned fj_cbar = fj_empty + {}u;  // [{}]: batch b's sums are handed over (b % {})", 8 * NB, W, W);
    line(1, "int* const fj_ready_at = fj_ccnt + {};", (H.ready_at - H.ccnt_at) / 4);
    line(1, "const int lane = threadIdx.x & {}, fj_warp = threadIdx.x >> 5;", kC - 1);
    line(1, "const long long j = (long long)blockIdx.x * {} + lane;", kC);
    line(1, "const bool fj_active = j < p.cols;");
    line(1, "const long long fj_col0 = (long long)blockIdx.x * {};", kC);
    scan_pass_begin(R);
    line(2, "FJ_SYNC();  // the previous pass is done with the rings, the sums, the barriers and the ready row");
    line(2, "if (threadIdx.x == 0) {{");
    if (!P.stickies.empty()) line(3, "*fj_ready_at = 0;");
    line(3, "for (int k = 0; k < {}; ++k) {{", NB);
    line(4, "FJ_MBAR_INIT(fj_full + 8u * k, 1);");
    line(4, "FJ_MBAR_INIT(fj_empty + 8u * k, {});  // all lanes of the {} batches that read a slot", kC * H.dists.size(),
         H.dists.size());
    line(3, "}}");
    line(3, "for (int k = 0; k < {}; ++k) FJ_MBAR_INIT(fj_cbar + 8u * k, {});", W, kC);
    line(3, "FJ_MBAR_INIT_FENCE();");
    line(2, "}}");
    line(2, "FJ_SYNC();");
    if (!P.stickies.empty()) {
        // (No block barrier follows until the next pass's first: every thread reads the row before it.)
        line(2, "atomicMax(fj_ready_at, {});", scan_first_values_row());
        line(2, "FJ_SYNC();");
    }
    line(2, "const int fj_ready = {};", P.stickies.empty() ? "0" : "*fj_ready_at");
    // Tensor copies of a batch's R rows of the block's 32 columns per input (zeros past the panel).
    line(2, "auto fj_issue = [&](int batch) {{  // (one lane)");
    line(3, "const int s = batch % {};", NB);
    line(3, "const unsigned bar = fj_full + 8u * s;");
    line(3, "const bool last = s == {};  // its last rows again before the first slot", NB - 1);
    line(3, "FJ_MBAR_EXPECT(bar, last ? {}u : {}u);", P.ring_inputs.size() * (R + kM) * kC * 4, P.ring_inputs.size() * R * kC * 4);
    for (int slot : P.ring_inputs) {
        line(3, "FJ_TMA(fj_ring_addr{} + s * {}u, (unsigned long long)&p.tm{}, (int)fj_col0, (int)row_begin + batch * {}, bar);", slot,
             R * kC * 4, slot, R);
        line(3, "if (last) FJ_TMA(fj_ring_addr{} - {}u, (unsigned long long)&p.tm{}_m, (int)fj_col0, (int)row_begin + batch * {} + {}, bar);",
             slot, kM * kC * 4, slot, R, R - kM);
    }
    line(2, "}};");
    line(2, "if (threadIdx.x == 0)");
    line(3, "for (int b = 0; b < {} && b < nb; ++b) fj_issue(b);", NB);
    line(2, "#pragma unroll 1");
    line(2, "for (int b = fj_warp; b < nb; b += {}) {{", W);
    int in = 3;
    line(in, "const int u_seg = b * {};  // the batch's first row in the pass", R);
    line(in, "const long long t = row_begin + u_seg;");
    for (int d : H.dists) {
        if (d == 0) line(in, "FJ_MBAR_WAIT(fj_full + 8u * (b % {}), (b / {}) & 1);  // the batch's rows have landed", NB, NB);
        else line(in, "if (b >= {}) FJ_MBAR_WAIT(fj_full + 8u * ((b - {}) % {}), ((b - {}) / {}) & 1);", d, d, NB, d, NB);
    }
    line(in, "const int u_batch = u_seg;");
    // The batch's row 0 at each lag read (see chain_loads()), from the start of the slot of batch b - lag / R,
    // so that one row read at two lags (a row and the previous value of the next) is one address.
    std::set<std::pair<int, int>> starts;  // (input, batches back)
    for (const auto& [slot, lag] : P.reads) starts.insert({slot, lag / R});
    for (const auto& [slot, q] : starts)
        line(in, "const float* const fj_s{}_{} = fj_ring{} + (b >= {} ? (b - {}) % {} : 0) * {} + lane;", slot, q, slot, q, q, NB, R * kC);
    for (const auto& [slot, lag] : P.reads)
        line(in, "const float* const fj_b{}_{} = fj_s{}_{} - {};", slot, lag, slot, lag / R, lag % R * kC);
    for (const WindowSum& s : P.sums) line(in, "double fj_c{} = {};", s.state, lit(k_.states[s.state].init));
    for (const RunCounter& c : P.counters)
        line(in, "int fj_e{} = {};", c.state, -static_cast<long long>(k_.states[c.state].init) - 1);
    line(in, "if (u_seg >= fj_ready && u_seg >= {} && u_seg >= first_out && u_seg + {} <= n_pass) {{", P.reach, R);
    chain_batch(in + 1, false);
    line(in, "}} else {{");
    chain_batch(in + 1, true);
    line(in, "}}");
    // Every lane arrives on the slots it read; the batch reading a slot from furthest ahead refills it.
    for (int d : H.dists) line(in, "if (b >= {}) FJ_MBAR_ARRIVE(fj_empty + 8u * ((b - {}) % {}));", d, d, NB);
    const int far = H.dists.back();
    line(in, "if (lane == 0 && b >= {} && b - {} + {} < nb) {{", far, far, NB);
    line(in + 1, "FJ_MBAR_WAIT(fj_empty + 8u * ((b - {}) % {}), ((b - {}) / {}) & 1);", far, NB, far, NB);
    line(in + 1, "fj_issue(b - {} + {});", far, NB);
    line(in, "}}");
    line(2, "}}");
    line(1, "}}");
    line(0, "}}");
    return src_.take();
}

}  // namespace fj::codegen::detail
