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
#include "codegen/cuda/column_scan.hpp"

namespace fj::codegen::detail {

// The counters kept as q (KernelFacts::run_counters()) whose count only meets constants in comparisons, their quiet
// states, and what the check evaluates: their conditions on a batch row, from the row's loads and from
// states that hold an input's value of the row before (the check of row u reads that input at row u - 1
// instead; row 0 the state itself). Anything else a condition reads (another state, a ring, an echo)
// leaves the kernel without quiet batches.
void plan_quiet_batches(const KernelFacts& f, ColumnScanPlan& p) {
    const ir::Kernel& k = f.kernel;
    const CudaEmitOptions& o = f.options;
    if (!o.quiet_batches || o.strides.empty() || f.big_body || p.batch_rows < 2) return;
    const std::size_t n = k.body.size();
    const std::vector<bool>& live = p.echo.empty() ? f.live : p.echo_live;  // (the batched loops' rows)
    std::vector<RunCounter> counters;
    std::vector<CountTest> tests;
    for (std::size_t st = 0; st < f.counter_select.size(); ++st) {
        const std::int32_t sel = f.counter_select[st];
        if (sel < 0) continue;
        std::vector<CountTest> mine;
        bool only_tests = true;
        for (std::size_t i = 0; i < n && only_tests; ++i) {
            const Inst& y = k.body[i];
            if (!live[i] || (y.a != sel && y.b != sel && y.c != sel)) continue;
            if (y.op == Prim::StoreState && y.slot == static_cast<std::int32_t>(st)) continue;
            CountTest t;
            only_tests = as_count_test(k, static_cast<std::int32_t>(i), sel, static_cast<int>(st), &t);
            if (only_tests) mine.push_back(t);
        }
        if (!only_tests || mine.empty()) continue;
        counters.push_back({static_cast<int>(st), sel, k.body[static_cast<std::size_t>(sel)].a});
        tests.insert(tests.end(), mine.begin(), mine.end());
    }
    if (counters.empty()) return;
    QuietRows q = plan_quiet_rows(k, counters, tests, 0, {});
    if (!q.ok) return;
    // The conditions' closure.
    std::vector<bool> need(n, false);
    for (const QuietCounter& c : q.counters) need[static_cast<std::size_t>(c.cond)] = true;
    std::map<int, std::pair<int, int>> prev;
    const bool readable = f.operand_closure(need, [&](std::size_t i) {
        const Inst& x = k.body[i];
        bool echoed = false;
        for (const EchoRing& e : p.echo) echoed |= static_cast<std::size_t>(e.later) == i;
        if (!live[i] || echoed || f.counter_state[i] >= 0 || f.counter_part[i] || f.sticky_of[i] >= 0 ||
            x.op == Prim::RingRead || x.op == Prim::StoreState || x.op == Prim::RingPush || x.op == Prim::Output ||
            x.op == Prim::Refold || x.op == Prim::RefoldValue || x.op == Prim::Flag)
            return Reach::Fail;
        if (x.op != Prim::LoadState) return Reach::Expand;
        std::int32_t store = -1;  // its state's one store, of an input
        for (std::size_t j = 0; j < n; ++j)
            if (f.live[j] && k.body[j].op == Prim::StoreState && k.body[j].slot == x.slot) store = store < 0 ? static_cast<std::int32_t>(j) : -2;
        if (store < 0 || f.int_state[x.slot] || f.sticky_state[x.slot]) return Reach::Fail;
        const Inst& v = k.body[static_cast<std::size_t>(k.body[static_cast<std::size_t>(store)].a)];
        if (v.op != Prim::Input) return Reach::Fail;
        prev[x.slot] = {v.slot, v.lag};
        return Reach::Leaf;
    });
    if (!readable) return;
    p.quiet_prev = std::move(prev);
    p.quiet_check = std::move(need);
    p.quiet = std::move(q);
}

// Before a batch: fj_quiet, whether this thread's counters are in their quiet states on all its rows.
void ColumnScanEmitter::quiet_check(int ind, const RowMode& m) {
    std::string start = "true";
    for (const QuietCounter& c : p_.quiet.counters)
        if (c.how == QuietState::NoReset) start += fmt::format(" && s{} >= {}", c.state, c.clear_rows);  // (s: the count on row t - 1)
    line(ind, "bool fj_quiet = {};", start);
    for (int u = 0; u < U_; ++u) {
        line(ind, "{{  // row {}: the counters' conditions", row(u));
        if (u > 0)
            for (const auto& [st, from] : p_.quiet_prev) {
                const std::string value = load_name(from.first, u - 1 - from.second);
                if (f_.float_state[static_cast<std::size_t>(st)]) line(ind + 1, "const float s{} = {};", st, value);
                else line(ind + 1, "const double s{} = (double){};", st, value);
            }
        for (std::size_t i = 0; i < k_.body.size(); ++i)
            if (p_.quiet_check[i]) printer_.inst(ind + 1, u, i, m);
        for (const QuietCounter& c : p_.quiet.counters)
            line(ind + 1, "fj_quiet = fj_quiet && {}v{};", c.how == QuietState::NoReset ? "!" : "", c.cond);
        line(ind, "}}");
    }
}

}  // namespace fj::codegen::detail
