// Quiet batches of the column scan's batched loop (CudaEmitOptions::quiet_batches; quiet_rows.hpp says what
// a quiet state is).
//
// Why: the headline kernel (corr w=20 on big panels) keeps three run counters per row (the window is
// full, x changed, y changed) with their conditions, selects, tests and the masks of the entering values;
// on most rows of most data they decide nothing. Before each batch of U rows, whose inputs are in
// registers already (the rolling loads), a thread evaluates its counters' conditions for those rows; where
// every lane of the warp finds them in their quiet states (a warp vote: the branch stays uniform), the
// batch runs a copy of its rows with the counters' tests and what they imply as constants and without the
// counters' updates; the others run the rows as before. Results are the same bit for bit.
#include "codegen/cuda/emitter.hpp"

namespace fj::codegen::detail {

// The counters kept as q (run_counters()) whose count only meets constants in comparisons, their quiet
// states, and what the check evaluates: their conditions on a batch row, from the row's loads and from
// states that hold an input's value of the row before (the check of row u reads that input at row u - 1
// instead; row 0 the state itself). Anything else a condition reads (another state, a ring, an echo)
// leaves the kernel without quiet batches.
void Emitter::quiet_plan() {
    quiet_ = QuietRows{};
    quiet_prev_.clear();
    if (!o_.quiet_batches || o_.strides.empty() || big_body_ || U_ < 2) return;
    const std::size_t n = k_.body.size();
    const std::vector<bool>& live = echo_.empty() ? live_ : echo_live_;  // (the batched loops' rows)
    std::vector<RunCounter> counters;
    std::vector<CountTest> tests;
    for (std::size_t st = 0; st < counter_select_.size(); ++st) {
        const std::int32_t sel = counter_select_[st];
        if (sel < 0) continue;
        std::vector<CountTest> mine;
        bool only_tests = true;
        for (std::size_t i = 0; i < n && only_tests; ++i) {
            const Inst& y = k_.body[i];
            if (!live[i] || (y.a != sel && y.b != sel && y.c != sel)) continue;
            if (y.op == Prim::StoreState && y.slot == static_cast<std::int32_t>(st)) continue;
            CountTest t;
            only_tests = as_count_test(k_, static_cast<std::int32_t>(i), sel, static_cast<int>(st), &t);
            if (only_tests) mine.push_back(t);
        }
        if (!only_tests || mine.empty()) continue;
        counters.push_back({static_cast<int>(st), sel, k_.body[static_cast<std::size_t>(sel)].a});
        tests.insert(tests.end(), mine.begin(), mine.end());
    }
    if (counters.empty()) return;
    QuietRows q = plan_quiet_rows(k_, counters, tests, 0, {});
    if (!q.ok) return;
    // The conditions' closure.
    std::vector<bool> need(n, false);
    for (const QuietCounter& c : q.counters) need[static_cast<std::size_t>(c.cond)] = true;
    std::map<int, std::pair<int, int>> prev;
    const bool readable = operand_closure(need, [&](std::size_t i) {
        const Inst& x = k_.body[i];
        bool echoed = false;
        for (const EchoRing& e : echo_) echoed |= static_cast<std::size_t>(e.later) == i;
        if (!live[i] || echoed || counter_state_[i] >= 0 || counter_part_[i] || sticky_of_[i] >= 0 ||
            x.op == Prim::RingRead || x.op == Prim::StoreState || x.op == Prim::RingPush || x.op == Prim::Output)
            return Reach::Fail;
        if (x.op != Prim::LoadState) return Reach::Expand;
        std::int32_t store = -1;  // its state's one store, of an input
        for (std::size_t j = 0; j < n; ++j)
            if (live_[j] && k_.body[j].op == Prim::StoreState && k_.body[j].slot == x.slot) store = store < 0 ? static_cast<std::int32_t>(j) : -2;
        if (store < 0 || int_state_[x.slot] || sticky_state_[x.slot]) return Reach::Fail;
        const Inst& v = k_.body[static_cast<std::size_t>(k_.body[static_cast<std::size_t>(store)].a)];
        if (v.op != Prim::Input) return Reach::Fail;
        prev[x.slot] = {v.slot, v.lag};
        return Reach::Leaf;
    });
    if (!readable) return;
    quiet_prev_ = std::move(prev);
    quiet_check_ = std::move(need);
    quiet_ = std::move(q);
}

// Before a batch: fj_quiet, whether this thread's counters are in their quiet states on all its rows.
void Emitter::quiet_check(int ind) {
    std::string start = "true";
    for (const QuietCounter& c : quiet_.counters)
        if (c.how == QuietState::NoReset) start += fmt::format(" && s{} >= {}", c.state, c.clear_rows);  // (s: the count on row t - 1)
    line(ind, "bool fj_quiet = {};", start);
    for (int u = 0; u < U_; ++u) {
        line(ind, "{{  // row {}: the counters' conditions", row(u));
        if (u > 0)
            for (const auto& [st, from] : quiet_prev_) {
                const std::string value = load_name(from.first, u - 1 - from.second);
                if (float_state_[static_cast<std::size_t>(st)]) line(ind + 1, "const float s{} = {};", st, value);
                else line(ind + 1, "const double s{} = (double){};", st, value);
            }
        for (std::size_t i = 0; i < k_.body.size(); ++i)
            if (quiet_check_[i]) inst(ind + 1, u, i);
        for (const QuietCounter& c : quiet_.counters)
            line(ind + 1, "fj_quiet = fj_quiet && {}v{};", c.how == QuietState::NoReset ? "!" : "", c.cond);
        line(ind, "}}");
    }
}

}  // namespace fj::codegen::detail
