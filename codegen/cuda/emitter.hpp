// The CUDA emitter's analyses and instruction emission, shared by the column-scan kernel
// (cuda_emit.cpp) and the window-scan kernel (window_scan.cpp). Internal to codegen/: the public
// interface is codegen/cuda/emit.hpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include <fmt/format.h>

#include "codegen/cuda/emit.hpp"
#include "codegen/quiet_rows.hpp"
#include "codegen/window_terms.hpp"
#include "dsl/error.hpp"

namespace fj::codegen::detail {

using ir::Inst;
using ir::Prim;
using ir::Type;

// An f64 literal that reads back to the same bits: %.17g for finite values, bit patterns otherwise.
inline std::string lit(double v) {
    if (std::isfinite(v)) {
        std::string s = fmt::format("{:.17g}", v);
        if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
        return s;
    }
    std::uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    return fmt::format("__longlong_as_double(0x{:016x}LL)", bits);
}

// A float literal with the exact bits of (float)v.
inline std::string flit(double v) {
    const float f = static_cast<float>(v);
    std::uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    return fmt::format("__int_as_float(0x{:08x})", bits);
}

// Comment text must not end the comment or the line.
inline std::string comment_safe(std::string s) {
    for (char& c : s)
        if (c == '\n' || c == '\r') c = ' ';
    for (std::size_t p; (p = s.find("*/")) != std::string::npos;) s.replace(p, 2, "* /");
    return s;
}

[[noreturn]] inline void bad_ir(const ir::Kernel& k, std::size_t i, const std::string& what) {
    throw BackendError(fmt::format("CUDA emitter: kernel {}: instruction {} ({}): {}", k.name, i,
                                   ir::prim_name(k.body[i].op), what));
}

struct RingInfo {
    int size = 1;
    bool in_regs = false;  // shift register, indexed only by constants (dynamic reads become selects)
};

class Emitter {
public:
    Emitter(const ir::Kernel& k, const CudaEmitOptions& o) : k_(k), o_(o) {
        U_ = std::clamp(o.unroll, 1, 16);
        T_ = o.dtype == DType::F32 ? "float" : "double";
        name_ = cuda_kernel_name(k);
        check();
    }

    std::string run() {
        header();
        kernel();
        return std::move(s_);
    }

    static bool echo_requested(const CudaEmitOptions& o) { return !o.strides.empty() && o.echo_rings && !o.window_scan; }
    CudaColumnScanShape column_scan_shape() const {
        return {U_, static_cast<int>(echo_.size()), shared_bytes_per_thread()};
    }

    int shared_bytes_per_thread() const { return echo_stride_ * static_cast<int>(sizeof(double)); }

private:
    const ir::Kernel& k_;
    const CudaEmitOptions& o_;
    int U_ = 1;
    const char* T_ = "float";
    std::string name_;
    std::string s_;
    std::vector<RingInfo> rings_;
    std::set<std::pair<int, int>> loads_;  // (input slot, lag) pairs read by the body
    bool guarded_ = false;                 // emitting the pass's first rows (see kernel())
    bool tail_ = false;                    // emitting the pass's last, partial batch (see kernel())
    bool no_stores_ = false;               // emitting rows before out_begin only: outputs not stored
    // Bodies of more than kBigBody live instructions (many fused outputs) keep the code shape of codegen
    // v5: with the guarded warm-up batches or fj_rsqrt, two such kernels (every operator in one program,
    // float32, fixed leading dimensions) stored wrong comparison results on the H200 when ptxas optimised
    // at -O2 or -O3, and right ones at -O1, while the same source run on the host was right (bench/
    // RESULTS.md, 2026-11-29). Until that is understood, only the small bodies the benchmarks need get them.
    static constexpr std::size_t kBigBody = 300;
    bool big_body_ = false;
    bool fast_rsqrt_ = false;              // float32 RSqrt as fj_rsqrt (see header())
    bool hints_ = false;                   // L2 eviction hints in the batched loop (CudaEmitOptions::cache_hints)
    bool stream_stores_ = false;           // while emitting it: outputs stored with st.global.cs
    std::vector<bool> live_;               // instructions whose value an effect needs
    // Integer-valued values (counts, row numbers, 0/1 flags as numbers), kept in 64-bit integers: their
    // arithmetic and comparisons then run on the integer pipes instead of the float64 one, with the same
    // results (every such value is an integer below 2^53 in magnitude, where float64 is exact too).
    std::vector<bool> is_int_;             // instruction computed as `long long iv<i>`
    std::vector<bool> need_double_;        // ... whose float64 value is read too (`v<i>` = (double)iv<i>)
    std::vector<bool> int_state_;          // state kept as `long long s<k>`
    std::vector<bool> int32_, int32_state_;  // ... as `int` (bounded below 2^31)
    // Run counters (run_counters()): state -> its select `c ? 0 : s + 1`, or -1; and back.
    std::vector<std::int32_t> counter_select_;
    std::vector<std::int32_t> counter_state_;  // instruction -> the state whose select it is, or -1
    std::vector<bool> counter_part_;      // the counter's load and `+ 1`, not emitted
    // Float32 panels: values that are exactly float32 numbers (inputs, float-exact constants, their
    // abs/neg, selects of such, states only ever holding such), see float_values().
    std::vector<bool> fexact_;             // value is a float32 number (or NaN)
    std::vector<bool> fmat_;               // ... computed as `const float fv<i>` (state loads, selects)
    std::vector<bool> float_state_;        // state kept as `float s<k>`
    std::vector<bool> state_fexact_;       // state only ever holds float32 numbers (or NaN)
    std::vector<bool> narrow_;             // computed in float32 from rounded operands (see narrow_values())
    // Sticky states: NaN until a row sets them, then fixed for the pass (the shift of window sums).
    // The pass's first rows run until every live one is set and finite; the batched loops after them
    // treat each as a loop invariant (see sticky_states()).
    std::vector<bool> sticky_state_;
    std::vector<int> sticky_of_;           // instruction -> its sticky state: the setting select, or the
                                           // NaN test of the state; -1 for other instructions
    std::vector<bool> live_sticky_;        // sticky states whose setting select is emitted
    std::vector<bool> reads_state_;        // value depends on a state
    // Loads (input, row offset within a batch) whose row, when it lies before the pass, no result reads
    // (see pass_only_loads()): the batches before out_begin skip them there instead of reading the panel.
    std::set<std::pair<int, int>> pass_only_;
    // (input, lag) -> whether every load of it is pass-only (see pass_only_loads()).
    std::map<std::pair<int, int>, bool> pass_only_lag_;
    // Echo rings (CudaEmitOptions::echo_rings, echo_plan()): ring k keeps body[earlier] of the last `lag`
    // rows at doubles [offset, offset + lag) of this thread's shared memory, row r at slot (r - row_begin)
    // % lag; the batched loops read body[later] from there.
    struct EchoRing { std::int32_t later, earlier; int lag, offset; };
    std::vector<EchoRing> echo_;
    int echo_period_ = 0;                  // lcm of the lags: the batched loops start a multiple after row_begin
    int echo_stride_ = 0;                  // doubles of shared memory per thread (odd: no bank conflicts)
    std::vector<bool> echo_live_;          // live_ where later values come from the rings
    std::set<std::pair<int, int>> echo_loads_;  // loads_ there
    // Generic one-loop kernels (CudaEmitOptions::one_loop): sticky states whose setting row depends on that
    // row's inputs alone are set by a scan before the loop (preset_plan()), so that the loop treats them as
    // invariants, as the batched loops do; the scan evaluates preset_live_.
    bool preset_ = false;
    std::vector<bool> preset_live_;
    struct Preset { int state; std::int32_t valid, value; };
    std::vector<Preset> presets_;
    // Rows being emitted: no ring, rows that store their earlier values (a pass's first rows, one slot
    // computed per row), or rows of the batched loops (slots known: they read the later values too).
    enum class EchoRows { None, Store, Ring };
    EchoRows echo_rows_ = EchoRows::None;
    // Quiet batches of the batched loop (quiet_check.cpp, CudaEmitOptions::quiet_batches): the run
    // counters' quiet states; what the check before a batch evaluates (the counters' conditions) and the
    // states it reads, which hold an input's previous value (state -> (input, lag)); and, while a batch's
    // quiet rows are emitted, what is known there.
    QuietRows quiet_;
    std::vector<bool> quiet_check_;
    std::map<int, std::pair<int, int>> quiet_prev_;
    const QuietRows* quiet_rows_ = nullptr;
    void quiet_plan();
    void quiet_check(int ind);

    // ---- The window-scan kernel (window_scan.cpp; see emit_cuda_window_scan()) ----
public:
    // The whole translation unit of the window-scan kernel; throws BackendError when the kernel cannot
    // be one (scan_plan() says why).
    std::string run_scan();
    // The window-scan kernel's launch needs (cuda_window_scan_layout): smem_bytes 0 and why_not set when
    // the kernel cannot run as one.
    WindowScanLayout scan_layout();
    // The window sums of a kernel that can run as a window scan (planned), split into entering and leaving
    // terms (window_terms.hpp); why_not says why the kernel cannot run as a window scan at all.
    WindowSplit scan_window_split();
    std::set<std::int32_t> scan_row_constants() const;
    // The chained window scan's translation unit (throws BackendError when the kernel cannot be one) and
    // launch needs (as scan_layout()).
    std::string run_chain();
    WindowScanLayout chain_layout();

private:
    struct ScanSum { int state; std::int32_t root; };                       // s := s + (row terms)
    struct ScanCounter { int state; std::int32_t select, cond; };           // s := c ? 0 : s + 1
    struct ScanSticky { int state; std::int32_t select, cond, value; };     // s := isnan(s) && c ? v : s
    struct ScanPrev { int state; int input, lag; };                         // s := input[t - lag]
    // A counter's count compared with a constant: (count >= at_least) != negate, where at_least >= the
    // segment's rows (so a reset in the segment up to the row decides it: see scan_count_tests()).
    struct ScanCountTest { std::int32_t compare; int state; int at_least; bool negate; };
    struct ScanPlan {
        bool ok = false;
        std::string why_not;
        std::vector<ScanSum> sums;
        std::vector<ScanCounter> counters;
        std::vector<ScanSticky> stickies;
        std::vector<ScanPrev> prevs;
        std::vector<bool> in_a, in_c, in_pre;  // emitted in the segment rows, the results, the sticky pre-scan
        std::vector<bool> predef;              // values the results phase defines (sum, counter, sticky roots)
        std::vector<ScanCountTest> count_tests;  // comparisons the results phase defines (instead of the counts)
        std::set<int> tested_counters;         // counters whose count is only compared so (never formed)
        std::vector<int> ring_inputs;          // inputs kept in shared memory, in ring order
        std::set<std::pair<int, int>> reads;   // (input, lag) read from the rings (previous values: lag + 1)
        int reach = 0;                         // rows back the rows read reach (RowInPass included)
        // Rows back from a batch's first row that its segment rows and the results of the batch before
        // read (the ring keeps them while the batch's copy ahead is issued: see scan_loader()).
        int back_rows = 0;
        int ring_rows = 0;
        // Shared memory (bytes): one input's ring with its mirrored rows, and where the segments' sums, the
        // copies' mbarriers, the segments' counters and the ready row start.
        std::size_t ring_bytes = 0, tsum_at = 0, mbar_at = 0, tcnt_at = 0, ready_at = 0;
        int ahead = 0;                         // batches copied ahead of the one computed
        int segments = 0, segment_rows = 0;    // a batch's segments (the block's warps) and their rows
        int issuers = 0;                       // warps whose lane 0 issues the copies (scan_loader())
        int smem_bytes = 0;
    };
    ScanPlan scan_;
    // The chained window scan (chained_scan.cpp): a warp runs whole batches of `rows` rows.
    struct ChainPlan {
        bool ok = false;
        std::string why_not;
        int rows = 0;                // R: rows per batch, dividing the window
        int group = 0;               // rows per iteration of the batch's row loops (divides R)
        int window_batches = 0;      // w / R: the batch whose entering sums leave with this one's rows
        int warps = 0;               // W: batch b runs on warp b % W
        int ahead = 0;               // ring slots beyond those the warps' batches read
        WindowSplit split;           // the sums' entering terms (they leave window_batches batches later)
        std::vector<bool> in_entering;  // instructions phase A evaluates (entering terms, counters' conditions)
        std::vector<int> dists;      // batches back the rows a batch reads lie (0 first)
        int slots = 0;               // NB: ring slots (batches) per input
        int sum_slots = 0;           // NE: batches whose entering sums are kept
        // Shared memory (bytes): one input's ring, and where the entering sums, the hand-over sums and
        // counters, the mbarriers and the ready row start.
        std::size_t ring_bytes = 0, esum_at = 0, csum_at = 0, ccnt_at = 0, bars_at = 0, ready_at = 0;
        int smem_bytes = 0;
        QuietRows quiet;             // the counters' quiet states (CudaEmitOptions::quiet_batches)
    };
    ChainPlan chain_;
    void chain_plan();
    void chain_loads(int ind, const std::vector<bool>& phase, int i);
    void chain_row_begin(int ind, const std::vector<bool>& phase, int i, bool guarded);
    void chain_batch(int ind, bool guarded);
    void chain_rows(int ind, const QuietRows* quiet);
    void chain_group_begin(int ind);
    bool scan_mode_ = false;  // emitting the window-scan kernel: stores also test the lane and row_end
    void scan_plan();
    void scan_prescan(int ind);
    void scan_pass_begin(int batch_rows);
    std::string scan_first_values_row() const;
    void scan_loader(int ind);
    void scan_macros();
    void scan_count_tests();
    void scan_batch(int ind, bool guarded);
    void scan_segment_loads(int ind, const std::vector<bool>& phase);
    void scan_prev_values(int ind, int i);
    void scan_predefine(int ind, std::int32_t i, const std::string& expr);
    void scan_sticky_values(int ind, int i, bool guarded, const std::vector<bool>& phase);

    template <class... A>
    void line(int indent, fmt::format_string<A...> f, A&&... a) {
        s_.append(static_cast<std::size_t>(indent) * 2, ' ');
        s_ += fmt::format(f, std::forward<A>(a)...);
        s_ += '\n';
    }

    void check() {
        // What is wrong with the IR itself (operands, slots, rings, lags, echoes): kernel_ir.hpp's verifier.
        ir::verify(k_);
        rings_.resize(k_.rings.size());
        for (std::size_t r = 0; r < k_.rings.size(); ++r) rings_[r].size = k_.rings[r].size;
        for (RingInfo& r : rings_) r.in_regs = r.size <= o_.reg_ring_max;
        // Liveness: effects are live, and so is every operand of a live instruction. Dead values are not
        // emitted (NVRTC would warn about each, and parse them for nothing).
        live_ = live_from_effects({});
        loads_ = loads_of(live_);
        const auto n_live = static_cast<std::size_t>(std::count(live_.begin(), live_.end(), true));
        // Each row of a batch is a copy of the body: big bodies (many fused outputs) batch fewer rows, so
        // NVRTC's time stays reasonable; they have many loads per row in flight anyway.
        big_body_ = n_live > kBigBody && !o_.big_body_shapes;
        if (n_live > 1500) U_ = 1;
        else if (n_live > 600) U_ = std::min(U_, 2);
        else if (n_live > kBigBody) U_ = std::min(U_, 4);
        integer_values();
        float_values();
        narrow_values();
        sticky_states();
        run_counters();
        pass_only_loads();
        echo_plan();
        preset_plan();
        quiet_plan();
        hints_ = o_.cache_hints && !o_.strides.empty();
        fast_rsqrt_ = o_.dtype == DType::F32 && !big_body_ &&
                      std::any_of(k_.body.begin(), k_.body.end(), [&](const Inst& x) {
                          return x.op == Prim::RSqrt && live_[static_cast<std::size_t>(&x - k_.body.data())];
                      });
    }

    // A window's leaving value is read only where RowInPass(d) holds (lower_ops.cpp): in a pass's first d
    // rows it lies before the pass, and every use masks it. Where d is at least the halo, the batches
    // before out_begin make that RowInPass false and NVRTC drops the loads; a shorter window under a
    // longer halo (std(window(A, 5)) inside a 10-row mean: halo 13) would still read rows before the pass
    // for nothing. An input load at lag L is pass-only when its value cannot change any effect while
    // RowInPass(L) is false: every use is either fixed then (an And with a RowInPass(L' >= L), and Ands of
    // such), the taken-when-true operand of a Select whose condition is, or a value of the same kind.
    // Rows of a batch share a load where u - lag agree, so a batch's load at offset u - lag is skipped only
    // if all its readers allow it.
    void pass_only_loads() {
        const std::size_t n = k_.body.size();
        std::vector<std::vector<std::size_t>> users(n);
        for (std::size_t i = 0; i < n; ++i)
            if (live_[i])
                for (std::int32_t o : {k_.body[i].a, k_.body[i].b, k_.body[i].c})
                    if (o >= 0) users[static_cast<std::size_t>(o)].push_back(i);
        // L -> the values whose content no effect reads while RowInPass(L) is false (the same for every
        // load at lag L), found from the last instruction up.
        std::map<int, std::vector<bool>> unread_by_lag;
        auto unread_while_out = [&](int L) -> const std::vector<bool>& {
            auto [it, fresh] = unread_by_lag.try_emplace(L, n, false);
            if (!fresh) return it->second;
            std::vector<bool> off(n, false);  // Bool values false while RowInPass(L) is false
            for (std::size_t k = 0; k < n; ++k) {
                const Inst& y = k_.body[k];
                off[k] = (y.op == Prim::RowInPass && y.lag >= L) ||
                         (y.op == Prim::And && (off[static_cast<std::size_t>(y.a)] || off[static_cast<std::size_t>(y.b)]));
            }
            std::vector<bool>& unread = it->second;
            for (std::size_t k = n; k-- > 0;) {
                const Inst& y = k_.body[k];
                if (!live_[k] || y.op == Prim::StoreState || y.op == Prim::RingPush || y.op == Prim::Output) continue;
                const auto v = static_cast<std::int32_t>(k);
                unread[k] = std::all_of(users[k].begin(), users[k].end(), [&](std::size_t u) {
                    const Inst& z = k_.body[u];
                    const bool masked = z.op == Prim::Select && off[static_cast<std::size_t>(z.a)] && z.b == v &&
                                        z.a != v && z.c != v;
                    return off[u] || masked || unread[u];
                });
            }
            return unread;
        };
        std::map<std::pair<int, int>, bool>& by_lag = pass_only_lag_;  // (input, lag) -> every load of it is pass-only
        for (std::size_t i = 0; i < n; ++i) {
            const Inst& x = k_.body[i];
            if (!live_[i] || x.op != Prim::Input) continue;
            const bool ok = x.lag > 0 && unread_while_out(x.lag)[i];
            auto [it, fresh] = by_lag.try_emplace({x.slot, x.lag}, ok);
            if (!fresh) it->second = it->second && ok;
        }
        // Per batch row offset: every (row u, lag) that reads it must allow the skip.
        std::map<std::pair<int, int>, bool> by_off;
        for (int u = 0; u < U_; ++u)
            for (const auto& [key, ok] : by_lag) {
                auto [it, fresh] = by_off.try_emplace({key.first, u - key.second}, ok);
                if (!fresh) it->second = it->second && ok;
            }
        for (const auto& [key, ok] : by_off)
            if (ok) pass_only_.insert(key);
    }

    // Which echoes get rings, the batch length, and the batched loops' liveness and loads without the work
    // that only fed the later values.
    void echo_plan() {
        if (!echo_requested(o_) || U_ < 2 || big_body_ || k_.echoes.empty()) return;
        const std::size_t n = k_.body.size();
        auto plain = [&](std::int32_t i) {  // a float64 value emitted as `const double v<i>` in every kind of row
            const auto u = static_cast<std::size_t>(i);
            return k_.body[u].type == Type::F64 && live_[u] && !is_int_[u] && !fmat_[u] && !narrow_[u] &&
                   sticky_of_[u] < 0 && k_.body[u].op != Prim::Const;
        };
        std::vector<bool> is_later(n, false);
        long long period = 1;
        int doubles = 0;
        std::vector<EchoRing> rings;
        for (const ir::Echo& e : k_.echoes) {
            if (e.lag < o_.echo_min_lag || !plain(e.later) || !plain(e.earlier) || is_later[static_cast<std::size_t>(e.later)])
                continue;
            is_later[static_cast<std::size_t>(e.later)] = true;
            rings.push_back({e.later, e.earlier, e.lag, doubles});
            doubles += e.lag;
            period = std::lcm(period, static_cast<long long>(e.lag));
        }
        const int stride = doubles | 1;  // an odd stride: a half-warp's 8-byte accesses hit distinct banks
        if (rings.empty() || period > kCudaMaxEchoUnroll ||
            stride * static_cast<int>(sizeof(double)) > kCudaMaxEchoBytesPerThread)
            return;
        const int p = static_cast<int>(period);
        int u = (U_ + p - 1) / p * p;  // the nearest multiple of the period at or above the asked rows
        if (u > kCudaMaxEchoUnroll) u = kCudaMaxEchoUnroll / p * p;
        U_ = u;
        echo_ = std::move(rings);
        echo_period_ = p;
        echo_stride_ = stride;
        echo_live_ = live_from_effects(is_later);  // (a later value's operands only fed it)
        for (const EchoRing& r : echo_) echo_live_[static_cast<std::size_t>(r.earlier)] = true;
        echo_loads_ = loads_of(echo_live_);
    }

    // Instructions an effect (state store, ring push, output) needs, through the operands of those needed,
    // except the operands of `given` ones (values that come from elsewhere; empty: none).
    std::vector<bool> live_from_effects(const std::vector<bool>& given) const {
        std::vector<bool> live(k_.body.size(), false);
        for (std::size_t i = 0; i < k_.body.size(); ++i)
            live[i] = k_.body[i].op == Prim::StoreState || k_.body[i].op == Prim::RingPush || k_.body[i].op == Prim::Output;
        operand_closure(live, [&](std::size_t i) { return !given.empty() && given[i] ? Reach::Leaf : Reach::Expand; });
        return live;
    }

    // The (input, lag) loads of the live instructions.
    std::set<std::pair<int, int>> loads_of(const std::vector<bool>& live) const {
        std::set<std::pair<int, int>> loads;
        for (std::size_t i = 0; i < k_.body.size(); ++i)
            if (live[i] && k_.body[i].op == Prim::Input) loads.insert({k_.body[i].slot, k_.body[i].lag});
        return loads;
    }

    // The instructions `need` holds and their operands, transitively, marked in `need` (operands come before
    // their users: one walk from the last). `reach` judges each instruction the walk arrives at: Expand (take
    // its operands too), Leaf (not), or Fail (the walk stops and returns false).
    enum class Reach { Expand, Leaf, Fail };
    bool operand_closure(std::vector<bool>& need, const std::function<Reach(std::size_t)>& reach) const {
        for (std::size_t i = need.size(); i-- > 0;) {
            if (!need[i]) continue;
            const Reach r = reach(i);
            if (r == Reach::Fail) return false;
            if (r == Reach::Leaf) continue;
            for (std::int32_t o : {k_.body[i].a, k_.body[i].b, k_.body[i].c})
                if (o >= 0) need[static_cast<std::size_t>(o)] = true;
        }
        return true;
    }

    // One-loop generic kernels: whether every live sticky state (a window's shift) is set by a value and a
    // condition that read only the row's own inputs (no state, no lagged row): then a scan before the loop
    // finds the pass's first row that sets each, and the loop needs no per-row test, select and store of
    // them (corr: two of each). Rows before that first row mask what they shift (the sticky's condition is
    // false there, and every use of the shifted value is masked by it), so results do not change.
    void preset_plan() {
        if (!o_.one_loop || !o_.strides.empty() || big_body_) return;
        const std::size_t n = k_.body.size();
        std::vector<bool> need(n, false);
        std::vector<Preset> presets;
        for (std::size_t i = 0; i < n; ++i) {
            if (!live_[i] || k_.body[i].op != Prim::Select || sticky_of_[i] < 0) continue;
            const Inst& sel = k_.body[i];
            const Inst& c = k_.body[sel.a];
            const std::int32_t valid = k_.body[c.a].op == Prim::IsNaN && sticky_of_[c.a] >= 0 ? c.b : c.a;
            presets.push_back({sticky_of_[i], valid, sel.b});
            need[static_cast<std::size_t>(valid)] = need[static_cast<std::size_t>(sel.b)] = true;
        }
        if (presets.empty()) return;
        const bool pure = operand_closure(need, [&](std::size_t i) {
            const Inst& x = k_.body[i];
            const bool ok = x.op != Prim::LoadState && x.op != Prim::StoreState && x.op != Prim::RowIndex &&
                            x.op != Prim::RowInPass && x.op != Prim::RingRead && x.op != Prim::RingPush &&
                            x.op != Prim::Output && !(x.op == Prim::Input && x.lag != 0) && counter_state_[i] < 0 &&
                            sticky_of_[i] < 0;
            return ok ? Reach::Expand : Reach::Fail;
        });
        if (!pure) return;
        preset_ = true;
        preset_live_ = std::move(need);
        presets_ = std::move(presets);
    }

    // The scan that sets the preset sticky states: from the pass's first row until all are set.
    void preset_scan() {
        line(2, "{{  // the sticky states (window shifts) from the pass's first rows that set them");
        line(3, "#pragma unroll 1");
        line(3, "for (long long r = 0; r < row_end - row_begin; ++r) {{");
        std::set<int> inputs;
        for (std::size_t i = 0; i < k_.body.size(); ++i)
            if (preset_live_[i] && k_.body[i].op == Prim::Input) inputs.insert(k_.body[i].slot);
        for (int slot : inputs) line(4, "const {} {} = in{}[r * ld_in{}];", T_, load_name(slot, 0), slot, slot);
        for (std::size_t i = 0; i < k_.body.size(); ++i)
            if (preset_live_[i]) inst(4, 0, i);
        std::string all_set;
        for (const Preset& ps : presets_) {
            std::string value = fmt::format("v{}", ps.value);
            if (float_state_[static_cast<std::size_t>(ps.state)]) {
                value = float_exact(ps.value, 0);
                if (value.empty()) value = fmt::format("(float)v{}", ps.value);
            }
            line(4, "if (s{} != s{} && v{}) s{} = {};", ps.state, ps.state, ps.valid, ps.state, value);
            all_set += fmt::format("{}s{} == s{}", all_set.empty() ? "" : " && ", ps.state, ps.state);
        }
        line(4, "if ({}) break;", all_set);
        line(3, "}}");
        line(2, "}}");
    }

    // The instructions emitted in the rows being emitted, and the loads they read.
    const std::vector<bool>& row_live() const { return echo_rows_ == EchoRows::Ring ? echo_live_ : live_; }
    const std::set<std::pair<int, int>>& row_loads() const { return echo_rows_ == EchoRows::Ring ? echo_loads_ : loads_; }

    // Float32 panels: selects, mins and maxes whose results only reach outputs (through more of the
    // same) can run on values already rounded to float32: rounding is monotonic and keeps NaN, so
    // rounding first gives the same float as rounding the float64 result (the clamp of corr to [-1, 1],
    // the NaN of an incomplete window). One conversion, then float32 selects and FMNMX, instead of
    // float64 compares and selects of register pairs.
    void narrow_values() {
        const std::size_t n = k_.body.size();
        narrow_.assign(n, false);
        if (o_.dtype != DType::F32) return;
        std::vector<std::vector<std::size_t>> uses(n);
        for (std::size_t i = 0; i < n; ++i) {
            if (!live_[i]) continue;
            const Inst& x = k_.body[i];
            for (std::int32_t o : {x.a, x.b, x.c})
                if (o >= 0) uses[static_cast<std::size_t>(o)].push_back(i);
        }
        for (std::size_t i = n; i-- > 0;) {
            const Inst& x = k_.body[i];
            if (!live_[i] || is_int_[i] || fmat_[i] || x.type != Type::F64) continue;
            if (x.op != Prim::Select && x.op != Prim::Min && x.op != Prim::Max) continue;
            bool ok = !uses[i].empty();
            for (std::size_t u : uses[i]) {
                const Inst& y = k_.body[u];
                ok = ok && (y.op == Prim::Output || y.op == Prim::IsNaN || (narrow_[u] && (y.op != Prim::Select || y.a != static_cast<std::int32_t>(i))));
            }
            narrow_[i] = ok;
        }
        for (std::size_t i = 0; i < n; ++i)
            if (narrow_[i]) fmat_[i] = true;
    }

    // Operand o as a float32 expression: its float form, else its float64 value rounded.
    std::string rounded(std::int32_t o, int u) const {
        const std::string f = float_exact(o, u);
        return f.empty() ? fmt::format("(float)v{}", o) : f;
    }

    // A state with init NaN whose one store is `isnan(s) && c ? x : s`.
    void sticky_states() {
        const std::size_t n = k_.body.size();
        sticky_state_.assign(k_.states.size(), false);
        sticky_of_.assign(n, -1);
        std::vector<int> stores(k_.states.size(), 0);
        for (const Inst& x : k_.body)
            if (x.op == Prim::StoreState) ++stores[x.slot];
        auto load_of = [&](std::int32_t o, int st) {
            return o >= 0 && k_.body[o].op == Prim::LoadState && k_.body[o].slot == st;
        };
        for (std::size_t i = 0; i < n; ++i) {
            const Inst& x = k_.body[i];
            if (x.op != Prim::StoreState || stores[x.slot] != 1 || !std::isnan(k_.states[x.slot].init)) continue;
            if (int_state_[x.slot]) continue;
            const int st = x.slot;
            const Inst& sel = k_.body[x.a];
            if (sel.op != Prim::Select || !load_of(sel.c, st)) continue;
            const Inst& c = k_.body[sel.a];
            if (c.op != Prim::And) continue;
            std::int32_t test = -1;
            for (std::int32_t o : {c.a, c.b})
                if (k_.body[o].op == Prim::IsNaN && load_of(k_.body[o].a, st)) test = o;
            if (test < 0) continue;
            sticky_state_[st] = true;
            sticky_of_[static_cast<std::size_t>(x.a)] = st;
            sticky_of_[static_cast<std::size_t>(test)] = st;
        }
        live_sticky_.assign(k_.states.size(), false);
        for (std::size_t i = 0; i < n; ++i)
            if (live_[i] && k_.body[i].op == Prim::Select && sticky_of_[i] >= 0) live_sticky_[sticky_of_[i]] = true;
    }

    // Run counters: int32 states whose one store is `c ? 0 : s + 1` (rows since a change, since an
    // invalid value), read only by that `+ 1`. In a batch they are kept as q = s - (u + 1) after row u,
    // which a reset sets to the constant -(u + 1) and every other row leaves alone; `s` after row u is
    // q + u + 1, so a comparison of it with a constant becomes one of q with another constant; advance()
    // adds the batch's rows back. That saves the add per row and counter (corr: two of them).
    // Not in big bodies, which keep the codegen v5 shapes.
    void run_counters() {
        counter_select_.assign(k_.states.size(), -1);
        counter_state_.assign(k_.body.size(), -1);
        counter_part_.assign(k_.body.size(), false);
        if (big_body_) return;
        const std::vector<int> uses = use_counts();
        std::vector<int> stores(k_.states.size(), 0);
        for (std::size_t i = 0; i < k_.body.size(); ++i)
            if (live_[i] && k_.body[i].op == Prim::StoreState) ++stores[static_cast<std::size_t>(k_.body[i].slot)];
        for (std::size_t i = 0; i < k_.body.size(); ++i) {
            const Inst& st = k_.body[i];
            if (!live_[i] || st.op != Prim::StoreState || stores[st.slot] != 1) continue;
            const std::int32_t load = counter_load(i, uses);
            if (load < 0) continue;
            // Every other load of the state would see q instead of s.
            bool other_loads = false;
            for (std::size_t j = 0; j < k_.body.size(); ++j)
                other_loads |= live_[j] && j != static_cast<std::size_t>(load) && k_.body[j].op == Prim::LoadState &&
                               k_.body[j].slot == st.slot;
            if (other_loads) continue;
            const Inst& sel = k_.body[static_cast<std::size_t>(st.a)];
            counter_select_[static_cast<std::size_t>(st.slot)] = st.a;
            counter_state_[static_cast<std::size_t>(st.a)] = st.slot;
            counter_part_[static_cast<std::size_t>(load)] = counter_part_[static_cast<std::size_t>(sel.c)] = true;
        }
    }

    // How many live instructions read each value.
    std::vector<int> use_counts() const {
        std::vector<int> uses(k_.body.size(), 0);
        for (std::size_t i = 0; i < k_.body.size(); ++i)
            if (live_[i])
                for (std::int32_t o : {k_.body[i].a, k_.body[i].b, k_.body[i].c})
                    if (o >= 0) ++uses[static_cast<std::size_t>(o)];
        return uses;
    }

    // A run counter's store: an int32 state stored as `c ? 0 : s + 1`, its `+ 1` and its load read once.
    // Gives the load (the select is the store's operand, `+ 1` the select's third), or -1.
    std::int32_t counter_load(std::size_t store, const std::vector<int>& uses) const {
        const Inst& st = k_.body[store];
        if (st.op != Prim::StoreState || !int32_state_[st.slot]) return -1;
        auto is_const = [&](std::int32_t o, double c) {
            return o >= 0 && k_.body[static_cast<std::size_t>(o)].op == Prim::Const &&
                   k_.body[static_cast<std::size_t>(o)].imm == c && is_int(o);
        };
        const Inst& sel = k_.body[static_cast<std::size_t>(st.a)];
        if (sel.op != Prim::Select || !is_int(st.a) || !is_const(sel.b, 0.0) || sel.c < 0) return -1;
        const Inst& add = k_.body[static_cast<std::size_t>(sel.c)];
        if (add.op != Prim::Add || uses[static_cast<std::size_t>(sel.c)] != 1) return -1;
        const std::int32_t load = is_const(add.a, 1.0) ? add.b : is_const(add.b, 1.0) ? add.a : -1;
        if (load < 0 || k_.body[static_cast<std::size_t>(load)].op != Prim::LoadState ||
            k_.body[static_cast<std::size_t>(load)].slot != st.slot || uses[static_cast<std::size_t>(load)] != 1)
            return -1;
        return load;
    }

    // The sticky state whose value instruction i is (its load or its setting select), or -1.
    int sticky_value(std::int32_t i) const {
        const Inst& x = k_.body[static_cast<std::size_t>(i)];
        if (x.op == Prim::LoadState) return sticky_state_[x.slot] ? x.slot : -1;
        if (x.op == Prim::Select) return sticky_of_[static_cast<std::size_t>(i)];
        return -1;
    }

    static bool float_repr(double v) {
        return std::isnan(v) || static_cast<double>(static_cast<float>(v)) == v;
    }

    // Which float32-exact values live in float registers (float32 panels only). A state that only
    // holds input values (the previous row's value of a constancy tracker) is kept as a float when no
    // one needs it as a double, and so is a select of float32 values: their moves, selects and
    // comparisons then cost float32 instructions and no conversions. Anything that needs the float64
    // value keeps the float64 form (a conversion per row would cost more than it saves).
    void float_values() {
        const std::size_t n = k_.body.size();
        fexact_.assign(n, false);
        fmat_.assign(n, false);
        float_state_.assign(k_.states.size(), false);
        state_fexact_.assign(k_.states.size(), false);
        if (o_.dtype != DType::F32) return;
        for (std::size_t st = 0; st < k_.states.size(); ++st)
            float_state_[st] = !int_state_[st] && float_repr(k_.states[st].init);
        // Whether value i is a float32 number, given its operands' answers `e` and the states' (in order).
        auto exact = [&](std::size_t i, const std::vector<bool>& e) {
            const Inst& x = k_.body[i];
            if (x.type != Type::F64 || is_int_[i]) return false;
            switch (x.op) {
            case Prim::Input: return true;
            case Prim::Const: return float_repr(x.imm);
            case Prim::Abs: case Prim::Neg: return static_cast<bool>(e[x.a]);
            case Prim::Select: return e[x.b] && e[x.c];
            case Prim::LoadState: return static_cast<bool>(float_state_[x.slot]);
            default: return false;
            }
        };
        // Which states only ever hold float32 numbers: every store is one, given the others.
        for (bool changed = true; changed;) {
            changed = false;
            std::vector<bool> e(n, false);
            for (std::size_t i = 0; i < n; ++i) {
                const Inst& x = k_.body[i];
                e[i] = exact(i, e);
                if (x.op == Prim::StoreState && float_state_[x.slot] && !e[x.a]) {
                    float_state_[x.slot] = false;
                    changed = true;
                }
            }
        }
        state_fexact_ = float_state_;
        std::vector<bool> no_fmat(n, false);  // selects that must stay double
        for (bool changed = true; changed;) {
            changed = false;
            for (std::size_t i = 0; i < n; ++i) {
                const Inst& x = k_.body[i];
                const bool e = exact(i, fexact_);
                fexact_[i] = e;
                fmat_[i] = e && live_[i] &&
                           (x.op == Prim::LoadState ||
                            (x.op == Prim::Select && !no_fmat[i] && float_available(x.b) && float_available(x.c)));
            }
            std::vector<bool> needd(n, false);
            for (std::size_t i = 0; i < n; ++i) {
                if (!live_[i]) continue;
                const Inst& x = k_.body[i];
                for (std::int32_t o : {x.a, x.b, x.c})
                    if (o >= 0 && fmat_[static_cast<std::size_t>(o)] && !float_use(i, o)) needd[static_cast<std::size_t>(o)] = true;
                // A float state's stores must be float values.
                if (x.op == Prim::StoreState && float_state_[x.slot] && !float_available(x.a)) {
                    float_state_[x.slot] = false;
                    changed = true;
                }
            }
            for (std::size_t i = 0; i < n; ++i) {
                if (!fmat_[i] || !needd[i]) continue;
                const Inst& x = k_.body[i];
                if (x.op == Prim::LoadState) float_state_[x.slot] = false;
                else no_fmat[i] = true;
                changed = true;
            }
        }
    }

    // A float expression for value i exists (see float_exact()).
    bool float_available(std::int32_t i) const {
        if (i >= 0 && !narrow_.empty() && narrow_[static_cast<std::size_t>(i)]) return true;
        if (i < 0 || !fexact_[static_cast<std::size_t>(i)]) return false;
        const Inst& x = k_.body[static_cast<std::size_t>(i)];
        switch (x.op) {
        case Prim::Input: case Prim::Const: return true;
        case Prim::Abs: case Prim::Neg: return float_available(x.a);
        default: return fmat_[static_cast<std::size_t>(i)];
        }
    }

    // Whether instruction i can use operand o's float form instead of its float64 value.
    bool float_use(std::size_t i, std::int32_t o) const {
        const Inst& x = k_.body[i];
        if (is_compare(x.op))
            return float_available(x.a) && float_available(x.b) &&
                   !(k_.body[x.a].op == Prim::Const && k_.body[x.b].op == Prim::Const);
        switch (x.op) {
        case Prim::IsNaN: case Prim::Output: return true;
        case Prim::StoreState: return float_state_[x.slot];
        case Prim::Select: return fmat_[i] && o != x.a;
        default: return false;
        }
    }

    // Which values are integers of bounded magnitude. A value qualifies when its bound (largest possible
    // magnitude) is known and below 2^52: integral constants, 0/1 from booleans, row numbers (below 2^40
    // rows), sums, differences and selects of those, and states that only ever count: every store is the
    // state plus or minus a bounded integer (so a state moves by at most that much per row), or a bounded
    // integer. A state's bound is its init plus 2^41 times its largest step. The fixpoint starts from
    // every state with an integral init and drops those with any other store.
    void integer_values() {
        const std::size_t n = k_.body.size();
        constexpr double kLimit = 4503599627370496.0;  // 2^52
        constexpr double kRows = 1099511627776.0;      // 2^40
        std::vector<double> bound(n, -1);              // -1: not an integer value
        // States live for one pass: at most kCudaMaxTileRows output rows after the halo's warm-up rows.
        const double pass_rows = static_cast<double>(kCudaMaxTileRows) + std::max(0, k_.halo);
        reads_state_.assign(n, false);
        for (std::size_t i = 0; i < n; ++i) {
            const Inst& x = k_.body[i];
            bool r = x.op == Prim::LoadState;
            for (std::int32_t o : {x.a, x.b, x.c})
                if (o >= 0) r = r || reads_state_[static_cast<std::size_t>(o)];
            reads_state_[i] = r;
        }
        std::vector<double> state_bound(k_.states.size(), -1);
        int_state_.assign(k_.states.size(), false);
        for (std::size_t st = 0; st < k_.states.size(); ++st) {
            const double init = k_.states[st].init;
            int_state_[st] = std::isfinite(init) && std::floor(init) == init && std::fabs(init) < kLimit;
        }
        auto compute = [&] {
            for (std::size_t i = 0; i < n; ++i) {
                const Inst& x = k_.body[i];
                auto b = [&](std::int32_t o) { return bound[static_cast<std::size_t>(o)]; };
                double r = -1;
                if (x.type == Type::F64) switch (x.op) {
                    case Prim::Const:
                        if (std::isfinite(x.imm) && std::floor(x.imm) == x.imm && std::fabs(x.imm) < kLimit) r = std::fabs(x.imm);
                        break;
                    case Prim::BoolToF64: r = 1; break;
                    case Prim::RowIndex: r = kRows; break;
                    case Prim::LoadState: r = int_state_[x.slot] ? state_bound[x.slot] : -1; break;
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
            for (std::size_t st = 0; st < k_.states.size(); ++st)
                if (int_state_[st]) state_bound[st] = 0;
            compute();
            std::vector<double> step(k_.states.size(), 0);
            for (std::size_t i = 0; i < n; ++i) {
                const Inst& x = k_.body[i];
                if (x.op != Prim::StoreState || !int_state_[x.slot]) continue;
                const Inst& v = k_.body[static_cast<std::size_t>(x.a)];
                auto own = [&](std::int32_t o) {
                    const Inst& l = k_.body[static_cast<std::size_t>(o)];
                    return l.op == Prim::LoadState && l.slot == x.slot;
                };
                auto no_state = [&](std::int32_t o) { return bound[static_cast<std::size_t>(o)] >= 0 && !reads_state(o); };
                // How far one store can move the state: 0 for itself, the bound of what it adds, the bound
                // of a value it is reset to; a select moves it as far as its farther branch.
                std::function<double(std::int32_t)> step_of = [&](std::int32_t o) -> double {
                    const Inst& e = k_.body[static_cast<std::size_t>(o)];
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
                    int_state_[x.slot] = false;
                    changed = true;
                } else {
                    step[x.slot] = std::max(step[x.slot], d);
                }
            }
            if (changed) continue;
            for (std::size_t st = 0; st < k_.states.size(); ++st) {
                if (!int_state_[st]) continue;
                const double sb = std::fabs(k_.states[st].init) + pass_rows * step[st];
                if (!(sb < kLimit)) {
                    int_state_[st] = false;
                    changed = true;
                }
                state_bound[st] = sb;
            }
            if (!changed) compute();  // final bounds with the states' bounds
        }
        is_int_.assign(n, false);
        need_double_.assign(n, false);
        for (std::size_t i = 0; i < n; ++i) is_int_[i] = live_[i] && bound[i] >= 0;
        // 32-bit where the bound allows: one instruction per add or compare instead of two.
        constexpr double k2e31 = 2147483648.0;
        int32_.assign(n, false);
        for (std::size_t i = 0; i < n; ++i) int32_[i] = is_int_[i] && bound[i] < k2e31;
        int32_state_.assign(k_.states.size(), false);
        for (std::size_t st = 0; st < k_.states.size(); ++st)
            int32_state_[st] = int_state_[st] && state_bound[st] < k2e31;
        // Whose float64 value is needed: any live use other than integer arithmetic, integer compares
        // and stores into integer states.
        for (std::size_t i = 0; i < n; ++i) {
            if (!live_[i]) continue;
            const Inst& x = k_.body[i];
            const bool int_use = is_int_[i] || (is_compare(x.op) && is_int(x.a) && is_int(x.b)) ||
                                 (x.op == Prim::StoreState && int_state_[x.slot]) || (x.op == Prim::IsNaN && is_int(x.a));
            if (int_use) {
                if (x.op == Prim::Select && is_int_[i]) continue;  // its condition is a Bool
                continue;
            }
            for (std::int32_t o : {x.a, x.b, x.c})
                if (o >= 0 && is_int_[static_cast<std::size_t>(o)]) need_double_[static_cast<std::size_t>(o)] = true;
        }
    }

    static bool is_compare(Prim p) {
        return p == Prim::CmpLT || p == Prim::CmpLE || p == Prim::CmpGT || p == Prim::CmpGE || p == Prim::CmpEQ ||
               p == Prim::CmpONE || p == Prim::CmpUNE;
    }
    bool is_int(std::int32_t i) const { return i >= 0 && is_int_[static_cast<std::size_t>(i)]; }

    // Whether value i depends on any state (directly or through its operands).
    bool reads_state(std::int32_t i) const { return reads_state_[static_cast<std::size_t>(i)]; }

    void header() {
        if (o_.one_loop && o_.strides.empty())
            line(0, "// Generated by factorjit (CUDA codegen v{}): {}, {}, halo {}, one guarded loop.", kCudaCodegenVersion,
                 name_, dtype_name(o_.dtype), k_.halo);
        else
            line(0, "// Generated by factorjit (CUDA codegen v{}): {}, {}, halo {}, {} row(s) per load batch.",
                 kCudaCodegenVersion, name_, dtype_name(o_.dtype), k_.halo, U_);
        for (std::size_t i = 0; i < k_.inputs.size(); ++i)
            line(0, "//   in{} = {}", i, comment_safe(k_.inputs[i]));
        for (std::size_t i = 0; i < k_.outputs.size(); ++i)
            line(0, "//   out{} = {}", i, comment_safe(k_.outputs[i]));
        line(0, "#define FJ_NAN __longlong_as_double(0x7ff8000000000000LL)");
        line(0, "#ifndef FJ_PREFETCH_L2");
        line(0, "#define FJ_PREFETCH_L2(a) asm volatile(\"prefetch.global.L2 [%0];\" :: \"l\"(a))");
        line(0, "#define FJ_PREFETCH_L1(a) asm volatile(\"prefetch.global.L1 [%0];\" :: \"l\"(a))");
        line(0, "#endif");
        if (!echo_.empty()) {
            line(0, "#ifndef FJ_SMEM_DECL");
            line(0, "#define FJ_SMEM_DECL extern __shared__ __align__(16) unsigned char fj_smem[]");
            line(0, "#endif");
        }
        if (hints_) {
            // (Macros, so that host tests can stand in for them.)
            const char* ty = o_.dtype == DType::F32 ? "f32" : "f64";
            const char* con = o_.dtype == DType::F32 ? "f" : "d";
            line(0, "#ifndef FJ_LD_KEEP");
            line(0, "#define FJ_POLICY_KEEP(pol) asm(\"createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\" : \"=l\"(pol))");
            line(0, "#define FJ_LD_KEEP(v, a, pol) asm(\"ld.global.L2::cache_hint.{} %0, [%1], %2;\" : \"={}\"(v) : \"l\"(a), \"l\"(pol))",
                 ty, con);
            line(0, "#define FJ_LD_LAST(v, a) asm(\"ld.global.cs.{} %0, [%1];\" : \"={}\"(v) : \"l\"(a))", ty, con);
            line(0, "#define FJ_ST_STREAM(a, v) asm volatile(\"st.global.cs.{} [%0], %1;\" :: \"l\"(a), \"{}\"(v))", ty, con);
            line(0, "#endif");
        }
        if (fast_rsqrt_) {
            // CUDA's rsqrt(double) is this estimate and cubic correction plus a range check that calls a
            // slow path (subnormal, huge and special arguments): a branch and a convergence barrier per
            // row, which also split the scheduler's view of an unrolled batch. Float32 kernels skip the
            // check: the IR leaves subnormal arguments unspecified there (kernel_ir.hpp), and huge ones
            // only lose a few bits in y * y.
            // (One definition per translation unit; the estimate is a macro so that host tests can run it.)
            line(0, "#ifndef FJ_RSQRT_DEFINED");
            line(0, "#define FJ_RSQRT_DEFINED");
            line(0, "#ifndef FJ_RSQRT_ESTIMATE");
            line(0, "#define FJ_RSQRT_ESTIMATE(y, a) asm(\"rsqrt.approx.ftz.f64 %0, %1;\" : \"=d\"(y) : \"d\"(a))");
            line(0, "#endif");
            line(0, "__device__ __forceinline__ double fj_rsqrt(double a) {{");
            line(1, "double y;");
            line(1, "FJ_RSQRT_ESTIMATE(y, a);  // relative error about 2^-20 (corr of a panel with itself: up to 8.9e-7 from 1)");
            // One Newton step: relative error about 1.5 x (2^-20)^2, far below a float32 result's rounding
            // (the cubic correction CUDA uses costs one more float64 instruction per row). Two variants
            // measured worse (tenth session, bench/RESULTS.md): y / 2 by an integer subtraction from y's
            // exponent instead of 0.5 * e (one float64 instruction fewer, two integer ones more) made G1
            // 8.35 ms against 8.12 and G5 60 % against 65 %; the step applied to the float32 product rounds
            // twice (corr of a panel with itself then 1 in only 87 % of the outputs, emulated).
            line(1, "const double e = fma(-a, y * y, 1.0);");
            line(1, "return fma(0.5 * e, y, y);");
            line(0, "}}");
            line(0, "#endif");
            if (!o_.rsqrt_refine) {
                // The estimate alone (CudaEmitOptions::rsqrt_refine off: an experiment on the accuracy contract).
                line(0, "#ifndef FJ_RSQRT0_DEFINED");
                line(0, "#define FJ_RSQRT0_DEFINED");
                line(0, "__device__ __forceinline__ double fj_rsqrt0(double a) {{");
                line(1, "double y;");
                line(1, "FJ_RSQRT_ESTIMATE(y, a);  // relative error about 2^-20");
                line(1, "return y;");
                line(0, "}}");
                line(0, "#endif");
            }
        }
        if (scan_mode_) scan_macros();
        line(0, "struct fj_params_{} {{", name_);
        for (std::size_t i = 0; i < k_.inputs.size(); ++i) line(1, "const {}* in{};", T_, i);
        for (std::size_t i = 0; i < k_.inputs.size(); ++i) line(1, "long long in_ld{};", i);
        for (std::size_t i = 0; i < k_.outputs.size(); ++i) line(1, "{}* out{};", T_, i);
        for (std::size_t i = 0; i < k_.outputs.size(); ++i) line(1, "long long out_ld{};", i);
        line(1, "long long rows, cols, tile_rows, ntiles;");
        if (scan_mode_) {
            // Window scans: per input, the tensor maps of its batch copies and of the ring's mirror rows
            // (kWindowScanBatchRows and kWindowScanMirrorRows rows of kWindowScanColumns columns; the
            // runtime's ABI, cuda_emit.hpp).
            for (std::size_t i = 0; i < k_.inputs.size(); ++i) line(1, "fj_tmap tm{}, tm{}_m;", i, i);
        }
        line(0, "}};");
    }

    void kernel() {
        const int halo = std::max(0, k_.halo);
        line(0, "extern \"C\" __global__ void {}(const fj_params_{} p) {{", name_, name_);
        line(1, "const long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;");
        line(1, "if (j >= p.cols) return;");
        if (!echo_.empty()) {
            line(1, "FJ_SMEM_DECL;");
            line(1, "volatile double* const fj_echo = reinterpret_cast<double*>(fj_smem) + threadIdx.x * {}u;  // this thread's echo rings",
                 echo_stride_);
        }
        const std::size_t ni = k_.inputs.size(), no = k_.outputs.size();
        const bool fixed = !o_.strides.empty();
        if (fixed && o_.strides.size() != ni + no)
            throw BackendError(fmt::format("CUDA emitter: kernel {}: {} fixed strides for {} panels", k_.name,
                                           o_.strides.size(), ni + no));
        if (hints_) {
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
        for (std::size_t s = 0; s < k_.states.size(); ++s) {
            if (int_state_[s])
                line(2, "{} s{} = {};  // {}", int32_state_[s] ? "int" : "long long", s,
                     static_cast<long long>(k_.states[s].init), comment_safe(k_.states[s].what));
            else if (float_state_[s])
                line(2, "float s{} = {};  // {}", s, flit(k_.states[s].init), comment_safe(k_.states[s].what));
            else
                line(2, "double s{} = {};  // {}", s, lit(k_.states[s].init), comment_safe(k_.states[s].what));
        }
        for (std::size_t r = 0; r < rings_.size(); ++r) {
            const RingInfo& ri = rings_[r];
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
        if (!echo_.empty()) echo_rows_ = EchoRows::Store;  // (until the batched loops)
        // The pass's first rows run one at a time with every guard: loads before the panel's first row
        // read NaN, RowInPass is tested, and outputs are stored only from out_begin on. They are the
        // warm-up rows plus the largest lag read, so in the loops after them every guard holds: t >= out_begin,
        // t - lag >= row_begin >= 0.
        int max_lag = 0;
        for (const auto& [slot, lag] : loads_) max_lag = std::max(max_lag, lag);
        for (std::size_t i = 0; i < k_.body.size(); ++i)
            if (live_[i] && k_.body[i].op == Prim::RowInPass) max_lag = std::max(max_lag, k_.body[i].lag);
        std::string unset;  // sticky states not yet set to a finite value
        for (std::size_t st = 0; st < k_.states.size(); ++st)
            if (live_sticky_[st])
                unset += fmt::format(" || !(fabs((double)s{}) < {})", st, lit(std::numeric_limits<double>::infinity()));
        const bool warm_batches = !o_.strides.empty() && U_ > 1 && !loads_.empty() && !big_body_;
        if (warm_batches) {
            // Kernels for big panels: those rows in guarded batches first (loads of a batch issued
            // together; with batched_edges the last batch may run past them, guarded code being right on
            // any row), then one at a time for what is left. One at a time, each row waits for its own loads: about 10 % of
            // the samples of corr w=20 on 152-row tiles (bench/RESULTS.md), and a long window's first rows
            // are a large share of its tiles.
            line(2, "{{");
            // Batches wholly before out_begin store nothing, so NVRTC drops every value that only feeds
            // an output (corr's variances, its reciprocal square root and clamp: about half a row), and
            // skip the loads pass_only_loads() allows: the halo of a long window, and a large share of
            // short tiles. Their rows are asked of L2 ahead, as in the batched loop.
            const int W = std::min(U_, o_.warm_only_rows);
            if (W > 0) {
                // Those batches start a block's work, when no other warp of the SM has work to hide a
                // batch's wait for memory: ask L1 for the pass's first U rows at once, so that only the
                // first batch waits the whole way (the loop asks L2 for the rows after them).
                std::set<int> entering;
                for (const auto& [slot, lag] : loads_)
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
                guarded_ = no_stores_ = true;
                loads(4, W, Rows::First);
                for (int u = 0; u < W; ++u) {
                    step(4, u);
                    l2_prefetch_row(u, pf_inputs);
                }
                advance(4, W);
                guarded_ = no_stores_ = false;
                line(3, "}}");
            }
            line(3, "const long long warm_end = min(row_end, max(out_begin, row_begin + {}LL));", max_lag);
            // The rest of the warm-up in guarded batches of W rows as well: the few rows from there to
            // warm_end (corr w = 20: 4) then cost no whole guarded batch of U.
            const int G = W > 0 ? W : U_;
            line(3, "#pragma unroll 1");
            if (o_.batched_edges) line(3, "for (; t < warm_end && t + {} <= row_end; t += {}) {{", G, G);
            else line(3, "for (; t + {} <= warm_end; t += {}) {{", G, G);
            guarded_ = true;
            loads(4, G, Rows::First);
            for (int u = 0; u < G; ++u) step(4, u);
            advance(4, G);
            guarded_ = false;
            line(3, "}}");
            line(2, "}}");
        } else if (!loads_.empty()) {
            // Those rows wait for each row's loads: ask L1 for all of them first (a tile's first rows,
            // which short tiles make a large share of the work).
            line(2, "{{");
            line(3, "const long long warm_end = min(row_end, max(out_begin, row_begin + {}LL));", max_lag);
            line(3, "#pragma unroll 1");
            line(3, "for (long long r = row_begin; r < warm_end; ++r) {{");
            for (const auto& [slot, lag] : loads_)
                line(4, "if (r >= {}) FJ_PREFETCH_L1(&in{}[(r - row_begin - {}) * ld_in{}]);", lag, slot, lag, slot);
            line(3, "}}");
            line(2, "}}");
        }
        const bool one_loop = o_.one_loop && o_.strides.empty();
        if (preset_) preset_scan();
        line(2, "#pragma unroll 1");
        if (one_loop) line(2, "for (; t < row_end; ++t) {{");
        else
            line(2, "for (; t < row_end && (t < out_begin || t < row_begin + {}{}{}); ++t) {{", max_lag, unset,
                 echo_.empty() ? std::string() : fmt::format(" || (t - row_begin) % {} != 0", echo_period_));
        guarded_ = true;
        loads(3, 1, Rows::First);
        step(3, 0);
        advance(3, 1);
        guarded_ = false;
        line(2, "}}");
        if (one_loop) {  // (CudaEmitOptions::one_loop: the guarded loop took every row)
            line(1, "}}");
            line(0, "}}");
            return;
        }
        // From here on sticky states are finite loop invariants; float32 copies of the float-exact ones.
        for (std::size_t st = 0; st < k_.states.size(); ++st)
            if (live_sticky_[st] && state_fexact_[st]) line(2, "const float sf{} = (float)s{};", st, st);
        if (!echo_.empty()) echo_rows_ = EchoRows::Ring;
        if (U_ > 1) {
            rolling_batches();
            if (!o_.strides.empty()) {
                // Kernels for big panels: the last whole batches too (loads first, then the rows), so that
                // short tiles do not leave up to 2U - 1 rows to the one-row loop. Not in the generic kernel,
                // whose cold compile time it would double.
                line(2, "#pragma unroll 1");
                line(2, "for (; t + {} <= row_end; t += {}) {{", U_, U_);
                loads(3, U_, Rows::Inside);
                for (int u = 0; u < U_; ++u) step(3, u);
                advance(3, U_);
                line(2, "}}");
            }
        }
        echo_rows_ = EchoRows::None;  // (the last rows load what leaves: no ring is read after them)
        if (warm_batches && o_.batched_edges) {
            // The last rows (fewer than U) in masked batches of at most 4 (few registers): rows from
            // row_end on are neither read (NaN) nor stored, and what they do to the states is dropped with
            // the pass.
            const int V = std::min(U_, 4);
            line(2, "#pragma unroll 1");
            line(2, "for (; t < row_end; t += {}) {{", V);
            loads(3, V, Rows::Tail);
            tail_ = true;
            for (int u = 0; u < V; ++u) step(3, u);
            tail_ = false;
            advance(3, V);
            line(2, "}}");
        } else {
            line(2, "#pragma unroll 1");
            line(2, "for (; t < row_end; ++t) {{");
            loads(3, 1, Rows::Inside);
            step(3, 0);
            advance(3, 1);
            line(2, "}}");
        }
        line(1, "}}");
        line(0, "}}");
    }

    // Inputs read at lag 0: the batched loops ask L2 for their rows l2_prefetch_rows ahead (new to L2;
    // lagged rows were read before). Empty when there is no such prefetch.
    std::set<int> l2_prefetched() const {
        std::set<int> in;
        if (o_.l2_prefetch_rows > 0)
            for (const auto& [slot, lag] : loads_)
                if (lag == 0) in.insert(slot);
        return in;
    }

    // The batched loop, `rows_ahead` rows before row_end at most, with its L2 prefetches.
    void batch_loop_begin(int rows_ahead, const std::set<int>& pf_inputs) {
        line(3, "#pragma unroll 1");
        line(3, "for (; t + {} <= row_end; t += {}) {{", rows_ahead, U_);
        if (!pf_inputs.empty()) line(4, "const bool pf = t + {} <= p.rows;", o_.l2_prefetch_rows + U_);
    }
    void l2_prefetch_row(int u, const std::set<int>& pf_inputs) {
        for (int slot : pf_inputs) line(4, "if (pf) FJ_PREFETCH_L2(&{});", load_addr(slot, u + o_.l2_prefetch_rows));
    }

    // Rolling prefetch: each loaded value is replaced by the one U rows later right after its last use,
    // so the loads of the next batch are in flight while this batch computes (the scan is bound by memory
    // latency otherwise: few warps fit an SM with these register counts). Every prefetched row is below
    // row_end; the last rows (fewer than 2U) run in the loops after it.
    // (ptxas sinks the loads a loop iteration leaves for the next one to its end, where the next iteration
    // waits for them: bench/RESULTS.md. Iterations of several batches, so that only the last batch's loads
    // cross the back edge, measured slower and were removed.)
    void rolling_batches() {
        std::map<std::pair<int, int>, int> last_use;  // (input, row offset) -> last batch row reading it
        for (int u = 0; u < U_; ++u)
            for (const auto& [slot, lag] : row_loads()) last_use[{slot, u - lag}] = u;
        const std::map<std::pair<int, int>, Reuse> reuse = hints_ ? row_reuse(last_use) : decltype(reuse){};
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
        stream_stores_ = hints_;
        auto rows = [&](int ind) {
            for (int u = 0; u < U_; ++u) {
                step(ind, u);
                for (const auto& [key, u_last] : last_use)
                    if (u_last == u) load(ind, false, key, U_);
                l2_prefetch_row(u, pf_inputs);
            }
        };
        {
            if (quiet_.ok) {
                // Quiet batches (see quiet_plan()): the rows without the counters where every lane's are quiet.
                line(4, "{{");
                quiet_check(5);
                line(5, "if (__all_sync(__activemask(), fj_quiet)) {{  // every lane's rows are quiet");
                quiet_rows_ = &quiet_;
                rows(6);
                for (const QuietCounter& q : quiet_.counters)
                    if (q.how == QuietState::ResetEveryRow) line(6, "s{} = {};  // (a reset on the last row)", q.state, -U_);
                quiet_rows_ = nullptr;
                line(5, "}} else {{");
                rows(6);
                line(5, "}}");
                line(4, "}}");
            } else {
                rows(4);
            }
            advance(4, U_);
        }
        stream_stores_ = false;
        line(3, "}}");
        line(2, "}}");
    }

    // Whether this thread reads a row again after a load of the rolling prefetch: the loads of one row
    // are the keys of an input whose offsets agree modulo U (key `off` loads row t + off + U of batch t),
    // the largest offset first. Later: a later load reads it again; Never: the row's last read (or its
    // only one); Again: neither first nor last.
    enum class Reuse { Later, Never, Again };
    std::map<std::pair<int, int>, Reuse> row_reuse(const std::map<std::pair<int, int>, int>& keys) const {
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

    // Loads of the rows a batch reads, in the panel's type (a float32 value takes one register until it
    // is used). One load per distinct (input, row offset): delay(A, 1) next to A shares the loads.
    static std::string load_name(int slot, int off) {
        return off >= 0 ? fmt::format("x{}_{}", slot, off) : fmt::format("x{}_m{}", slot, -off);
    }
    // Which rows of a batch may lie outside the panel's pass: none (Inside), those before the panel's
    // first row (First: a pass's first rows), or those from row_end on (Tail: the last, partial batch).
    // Those read as NaN; the pointer is never dereferenced there.
    enum class Rows { Inside, First, Tail };
    void loads(int ind, int rows, Rows where) {
        std::set<std::pair<int, int>> done;
        for (int u = 0; u < rows; ++u)
            for (const auto& [slot, lag] : row_loads()) {
                const int off = u - lag;
                if (!done.insert({slot, off}).second) continue;
                const std::string addr = load_addr(slot, off);
                if (where == Rows::First && off < 0 && no_stores_ && pass_only_.count({slot, off}))
                    line(ind, "const {} {} = t - {} >= row_begin ? {} : ({})FJ_NAN;", T_, load_name(slot, off), -off, addr, T_);
                else if (where == Rows::First && off < 0)
                    line(ind, "const {} {} = t >= {} ? {} : ({})FJ_NAN;", T_, load_name(slot, off), -off, addr, T_);
                else if (where == Rows::Tail && off > 0)
                    line(ind, "const {} {} = t + {} < row_end ? {} : ({})FJ_NAN;", T_, load_name(slot, off), off, addr, T_);
                else
                    line(ind, "const {} {} = {};", T_, load_name(slot, off), addr);
            }
    }

    static std::string load_addr(int slot, int off) {
        return off == 0 ? fmt::format("in{}[0]", slot) : fmt::format("in{}[{}LL * ld_in{}]", slot, off, slot);
    }

    void advance(int ind, int rows) {
        for (std::size_t i = 0; i < k_.inputs.size(); ++i) line(ind, "in{} += {}LL * ld_in{};", i, rows, i);
        for (std::size_t i = 0; i < k_.outputs.size(); ++i) line(ind, "out{} += {}LL * ld_out{};", i, rows, i);
        for (std::size_t st = 0; st < counter_select_.size(); ++st)
            if (counter_select_[st] >= 0) line(ind, "s{} += {};  // run counter: q -> s", st, rows);
    }

    std::string row(int u) const { return u == 0 ? "t" : fmt::format("(t + {})", u); }

    // A float32 expression with exactly the value of instruction i at batch row u, or "" when there is
    // none: only for float32 panels, and only for inputs, float-exact constants, and abs/neg of those.
    std::string float_exact(std::int32_t i, int u) const {
        if (o_.dtype != DType::F32) return "";
        const Inst& x = k_.body[static_cast<std::size_t>(i)];
        if (fmat_[static_cast<std::size_t>(i)]) return fmt::format("fv{}", i);
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

    // Entry of ring r at a constant lag.
    std::string ring_at(int r, int lag) const {
        const RingInfo& ri = rings_[r];
        if (ri.in_regs) return fmt::format("r{}[{}]", r, lag);
        if (lag == 0) return fmt::format("r{}[rp{}]", r, r);
        return fmt::format("r{}[rp{} >= {} ? rp{} - {} : rp{} + {}]", r, r, lag, r, lag, r, ri.size - lag);
    }

    // Ring e's slot of batch row u in the batched loops (which start a multiple of every lag after row_begin
    // and advance by one).
    int echo_slot(std::size_t e, int u) const { return echo_[e].offset + u % echo_[e].lag; }

    // One row of the body: rings advance, then the instructions top to bottom; echo rings (echo_plan()) are
    // read before them and take this row's values after them.
    void step(int ind, int u) {
        line(ind, "{{  // row {}", row(u));
        const int in = ind + 1;
        for (std::size_t r = 0; r < rings_.size(); ++r) {
            const RingInfo& ri = rings_[r];
            if (ri.size == 1) continue;
            if (ri.in_regs) {
                line(in, "#pragma unroll");
                line(in, "for (int q = {}; q > 0; --q) r{}[q] = r{}[q - 1];", ri.size - 1, r, r);
            } else {
                line(in, "rp{} = rp{} == {} ? 0 : rp{} + 1;", r, r, ri.size - 1, r);
            }
        }
        if (echo_rows_ == EchoRows::Ring)
            for (std::size_t e = 0; e < echo_.size(); ++e)
                line(in, "const double ve{} = fj_echo[{}];  // %{} of row {} - {}", e, echo_slot(e, u), echo_[e].earlier,
                     row(u), echo_[e].lag);
        const std::vector<bool>& live = row_live();
        for (std::size_t i = 0; i < k_.body.size(); ++i)
            if (live[i]) inst(in, u, i);
        for (std::size_t e = 0; e < echo_.size() && echo_rows_ != EchoRows::None; ++e) {
            const EchoRing& r = echo_[e];
            if (echo_rows_ == EchoRows::Ring) line(in, "fj_echo[{}] = v{};", echo_slot(e, u), r.earlier);
            else line(in, "fj_echo[{} + (int)((unsigned long long)({} - row_begin) % {}u)] = v{};", r.offset, row(u), r.lag, r.earlier);
        }
        line(ind, "}}");
    }

    // An output of batch row u (stored only from out_begin on in the pass's first rows). Holding a
    // batch's stores back to its end was tried: more registers, no gain (H200, corr w=20).
    void store_output(int ind, int u, int slot, const std::string& value) {
        const std::string at = u == 0 ? std::string("0") : fmt::format("{}LL * ld_out{}", u, slot);
        if (no_stores_) return;
        if (scan_mode_) {
            const std::string r = row(u);
            if (guarded_) line(ind, "if (fj_active && {} >= out_begin && {} < row_end) out{}[{}] = {};", r, r, slot, at, value);
            else line(ind, "if (fj_active) out{}[{}] = {};", slot, at, value);
            return;
        }
        if (guarded_) line(ind, "if ({} >= out_begin) out{}[{}] = {};", row(u), slot, at, value);
        else if (tail_ && u > 0) line(ind, "if ({} < row_end) out{}[{}] = {};", row(u), slot, at, value);
        else if (stream_stores_) line(ind, "FJ_ST_STREAM(&out{}[{}], {});", slot, at, value);
        else line(ind, "out{}[{}] = {};", slot, at, value);
    }

    // `c ? a - s : 0` with a float32 value a and a finite float-exact sticky state s (the shifted,
    // masked values of window sums) as `(double)(c ? a : (float)s) - s`: the select picks between two
    // float32 registers instead of two float64 ones, and s - s is exactly 0.
    bool masked_shift(std::size_t i, int u, int ind) {
        const Inst& x = k_.body[i];
        const Inst& zero = k_.body[x.c];
        if (zero.op != Prim::Const || zero.imm != 0 || std::signbit(zero.imm)) return false;
        const Inst& sub = k_.body[x.b];
        if (sub.op != Prim::Sub) return false;
        const int st = sticky_value(sub.b);
        if (st < 0 || !live_sticky_[st] || !state_fexact_[st]) return false;  // sf<st> exists
        const std::string a = float_exact(sub.a, u);
        if (a.empty()) return false;
        line(ind, "const double v{} = (double)(v{} ? {} : sf{}) - v{};", i, x.a, a, st, sub.b);
        return true;
    }

    // An integer-valued instruction as `long long iv<i>` (and its float64 twin when something reads it).
    void int_inst(int ind, int u, std::size_t i) {
        const Inst& x = k_.body[i];
        auto iv = [](std::int32_t n) { return fmt::format("iv{}", n); };
        if (counter_part_[i]) return;
        std::string e;
        if (const std::int32_t st = counter_state_[i]; st >= 0) {
            if (!(quiet_rows_ && quiet_rows_->has(st))) line(ind, "s{} = v{} ? {} : s{};  // run counter, q", st, x.a, -(u + 1), st);
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
        line(ind, "const {} iv{} = {};", int32_[i] ? "int" : "long long", i, e);
        if (need_double_[i]) line(ind, "const double v{} = (double)iv{};", i, i);
    }

    void inst(int ind, int u, std::size_t i) {
        const Inst& x = k_.body[i];
        if (quiet_rows_ && x.type == Type::Bool)
            if (const auto it = quiet_rows_->known.find(static_cast<std::int32_t>(i)); it != quiet_rows_->known.end()) {
                line(ind, "const bool v{} = {};", i, it->second ? "true" : "false");
                return;
            }
        const char* ty = x.type == Type::Bool ? "bool" : "double";
        auto v = [](std::int32_t n) { return fmt::format("v{}", n); };
        auto def = [&](const std::string& expr) { line(ind, "const {} v{} = {};", ty, i, expr); };
        if (echo_rows_ == EchoRows::Ring)
            for (std::size_t e = 0; e < echo_.size(); ++e)
                if (static_cast<std::size_t>(echo_[e].later) == i) return def(fmt::format("ve{}", e));
        if (is_int_[i]) return int_inst(ind, u, i);
        if (x.op == Prim::StoreState && int_state_[x.slot]) {
            if (counter_select_[static_cast<std::size_t>(x.slot)] < 0) line(ind, "s{} = iv{};", x.slot, x.a);
            return;
        }
        if (x.op == Prim::IsNaN && is_int(x.a)) {
            def("false");
            return;
        }
        // Set already (or, preset, by no row of the pass): the select keeps the state, the test fails.
        if ((!guarded_ || preset_) && sticky_of_[i] >= 0) {
            if (x.op == Prim::IsNaN) {
                // (Preset, a state no row of the pass sets stays NaN: tested, a loop invariant.)
                def(guarded_ ? fmt::format("s{} != s{}", sticky_of_[i], sticky_of_[i]) : "false");
            } else if (fmat_[i]) {
                line(ind, "const float fv{} = {};", i, float_exact(x.c, u));
                line(ind, "const double v{} = (double)fv{};", i, i);
            } else {
                def(v(x.c));
            }
            return;
        }
        if ((!guarded_ || preset_) && x.op == Prim::StoreState && sticky_state_[x.slot]) return;
        if (!guarded_ && x.op == Prim::Select && !fmat_[i] && masked_shift(i, u, ind)) return;
        if (narrow_[i]) {
            if (x.op == Prim::Select) line(ind, "const float fv{} = v{} ? {} : {};", i, x.a, rounded(x.b, u), rounded(x.c, u));
            else line(ind, "const float fv{} = {}({}, {});", i, x.op == Prim::Min ? "fminf" : "fmaxf", rounded(x.a, u), rounded(x.b, u));
            return;
        }
        if (fmat_[i]) {
            if (x.op == Prim::LoadState) line(ind, "const float fv{} = s{};", i, x.slot);
            else line(ind, "const float fv{} = v{} ? {} : {};", i, x.a, float_exact(x.b, u), float_exact(x.c, u));
            line(ind, "const double v{} = (double)fv{};", i, i);  // dropped by NVRTC when unused
            return;
        }
        if (x.op == Prim::StoreState && float_state_[x.slot]) {
            line(ind, "s{} = {};", x.slot, float_exact(x.a, u));
            return;
        }
        if (x.op == Prim::Output && float_available(x.a)) {  // float32 panel: the value is a float already
            store_output(ind, u, x.slot, float_exact(x.a, u));
            return;
        }
        if (x.op == Prim::IsNaN && float_available(x.a)) {
            const std::string f = float_exact(x.a, u);
            def(fmt::format("{} != {}", f, f));
            return;
        }
        if (is_compare(x.op) && is_int(x.a) && is_int(x.b)) {
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
            if (no_stores_ && x.lag >= k_.halo) def("false");
            else def(guarded_ ? fmt::format("{} - {} >= row_begin", row(u), x.lag) : "true");
            break;
        case Prim::LoadState: def(fmt::format("s{}", x.slot)); break;
        case Prim::RingRead: def(ring_at(x.slot, x.lag)); break;
        case Prim::StoreState: line(ind, "s{} = {};", x.slot, v(x.a)); break;
        case Prim::RingPush: line(ind, "{} = {};", ring_at(x.slot, 0), v(x.a)); break;
        case Prim::Output:
            store_output(ind, u, x.slot, fmt::format("({}){}", T_, v(x.a)));
            break;
        case Prim::Add: def(fmt::format("{} + {}", v(x.a), v(x.b))); break;
        case Prim::Sub: def(fmt::format("{} - {}", v(x.a), v(x.b))); break;
        case Prim::Mul: def(fmt::format("{} * {}", v(x.a), v(x.b))); break;
        case Prim::Div: def(fmt::format("{} / {}", v(x.a), v(x.b))); break;
        case Prim::Neg: def(fmt::format("-{}", v(x.a))); break;
        case Prim::Abs: def(fmt::format("fabs({})", v(x.a))); break;
        case Prim::Sqrt: def(fmt::format("sqrt({})", v(x.a))); break;
        case Prim::Exp: def(fmt::format("exp({})", v(x.a))); break;
        case Prim::Log: def(fmt::format("log({})", v(x.a))); break;
        case Prim::Pow: def(fmt::format("pow({}, {})", v(x.a), v(x.b))); break;
        case Prim::Floor: def(fmt::format("floor({})", v(x.a))); break;
        // Correctly rounded 1/a without a division's extra steps; rsqrt is within 1 ulp (CUDA math API).
        case Prim::Recip: def(fmt::format("__drcp_rn({})", v(x.a))); break;
        case Prim::RSqrt:
            def(fmt::format("{}({})", !fast_rsqrt_ ? "rsqrt" : o_.rsqrt_refine ? "fj_rsqrt" : "fj_rsqrt0", v(x.a)));
            break;
        case Prim::Fma: def(fmt::format("fma({}, {}, {})", v(x.a), v(x.b), v(x.c))); break;  // kept by --fmad=false
        case Prim::Min: def(fmt::format("fmin({}, {})", v(x.a), v(x.b))); break;  // one DMNMX
        case Prim::Max: def(fmt::format("fmax({}, {})", v(x.a), v(x.b))); break;
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
            switch (x.op) {
            case Prim::CmpLT: def(fmt::format("{} < {}", a, b)); break;
            case Prim::CmpLE: def(fmt::format("{} <= {}", a, b)); break;
            case Prim::CmpGT: def(fmt::format("{} > {}", a, b)); break;
            case Prim::CmpGE: def(fmt::format("{} >= {}", a, b)); break;
            case Prim::CmpEQ: def(fmt::format("{} == {}", a, b)); break;
            case Prim::CmpONE: def(fmt::format("{} < {} || {} > {}", a, b, a, b)); break;
            default: def(fmt::format("!({} == {})", a, b)); break;
            }
            break;
        }
        case Prim::IsNaN:
            // Of an input: test the loaded value itself (a float32 compare instead of a float64 one).
            if (k_.body[x.a].op == Prim::Input) {
                const std::string l = load_name(k_.body[x.a].slot, u - k_.body[x.a].lag);
                def(fmt::format("{} != {}", l, l));
            } else if (fexact_[x.a]) {
                // A float32 number in a double: a NaN's payload reaches the high word (converted float
                // NaNs are quiet), so the high word alone tells.
                def(fmt::format("(__double2hiint({}) & 0x7fffffff) > 0x7ff00000", v(x.a)));
            } else {
                // An integer test of the bits (exponent all ones, mantissa not zero): keeps the float64
                // pipe, the scarce one on most GPUs, for arithmetic.
                def(fmt::format("((unsigned long long)__double_as_longlong({}) << 1) > 0xffe0000000000000ULL", v(x.a)));
            }
            break;
        case Prim::And: def(fmt::format("{} && {}", v(x.a), v(x.b))); break;
        case Prim::Or: def(fmt::format("{} || {}", v(x.a), v(x.b))); break;
        case Prim::Not: def(fmt::format("!{}", v(x.a))); break;
        case Prim::Select: def(fmt::format("{} ? {} : {}", v(x.a), v(x.b), v(x.c))); break;
        case Prim::BoolToF64: def(fmt::format("{} ? 1.0 : 0.0", v(x.a))); break;
        }
    }
};


}  // namespace fj::codegen::detail
