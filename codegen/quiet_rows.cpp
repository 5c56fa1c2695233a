// Quiet rows (see quiet_rows.hpp).
#include "codegen/quiet_rows.hpp"

#include <algorithm>
#include <cmath>

#include "codegen/window_terms.hpp"

namespace fj::codegen {

using ir::Inst;
using ir::Prim;

namespace {

bool is_nan_const(const ir::Kernel& k, std::int32_t i) {
    return i >= 0 && k.body[static_cast<std::size_t>(i)].op == Prim::Const && std::isnan(k.body[static_cast<std::size_t>(i)].imm);
}

// Records that instruction i is v on a row, and what that implies through Not, a true And and a false Or.
// False where that contradicts what is already recorded; `torn`, when given, collects the instructions
// recorded both ways (the walk goes on through both operands then).
bool imply(const ir::Kernel& k, std::int32_t i, bool v, std::map<std::int32_t, bool>* known,
           std::set<std::int32_t>* torn = nullptr) {
    if (auto it = known->find(i); it != known->end()) {
        if (it->second != v && torn) torn->insert(i);
        return it->second == v;
    }
    (*known)[i] = v;
    const Inst& x = k.body[static_cast<std::size_t>(i)];
    if (x.op == Prim::Not) return imply(k, x.a, !v, known, torn);
    if ((x.op == Prim::And && v) || (x.op == Prim::Or && !v)) {
        const bool a = imply(k, x.a, v, known, torn), b = imply(k, x.b, v, known, torn);
        return a && b;
    }
    return true;
}

// The values the outputs' NaN gates want of their conditions, and what those want of their operands
// (imply()); `torn`: wanted both ways.
void gate_wants(const ir::Kernel& k, std::map<std::int32_t, bool>* want, std::set<std::int32_t>* torn) {
    auto wish = [&](std::int32_t i, bool v) { imply(k, i, v, want, torn); };
    for (const Inst& o : k.body) {
        if (o.op != Prim::Output) continue;
        for (std::int32_t i = o.a; i >= 0 && k.body[static_cast<std::size_t>(i)].op == Prim::Select;) {
            const Inst& s = k.body[static_cast<std::size_t>(i)];
            if (is_nan_const(k, s.c)) wish(s.a, true), i = s.b;
            else if (is_nan_const(k, s.b)) wish(s.a, false), i = s.c;
            else break;
        }
    }
}

}  // namespace

bool QuietRows::has(int state) const {
    return std::any_of(counters.begin(), counters.end(), [&](const QuietCounter& c) { return c.state == state; });
}

QuietRows plan_quiet_rows(const ir::Kernel& kernel, const std::vector<RunCounter>& counters,
                          const std::vector<CountTest>& tests, int window, const std::set<std::int32_t>& row_constants) {
    std::map<std::int32_t, bool> want;
    std::set<std::int32_t> torn;
    gate_wants(kernel, &want, &torn);
    QuietRows q;
    for (const RunCounter& c : counters) {
        int at_least_max = 0, wanted = -1;  // wanted: 1 count >= C, 0 count < C, -1 not yet
        bool left_out = false;
        for (const CountTest& t : tests) {
            if (t.state != c.state) continue;
            at_least_max = std::max(at_least_max, t.at_least);
            const auto it = want.find(t.compare);
            if (it == want.end()) continue;
            const int ge = it->second != t.negate ? 1 : 0;
            left_out = left_out || torn.count(t.compare) || (wanted >= 0 && wanted != ge) || (ge == 0 && t.at_least < 1);
            wanted = ge;
        }
        if (left_out || wanted < 0) continue;
        q.counters.push_back({c.state, c.cond, wanted ? QuietState::NoReset : QuietState::ResetEveryRow,
                              wanted ? std::max(window, at_least_max - 1) : 0});
    }
    if (q.counters.empty()) return q;
    // Without resets the conditions are false on the batch's rows and `clear_rows` >= window rows before
    // them: what that implies holds for values read `window` rows back too.
    for (const QuietCounter& c : q.counters)
        if (c.how == QuietState::NoReset && !imply(kernel, c.cond, false, &q.known)) return {};
    if (window > 0 && !q.known.empty()) {
        ShiftedValues sv(kernel, row_constants);
        const std::map<std::int32_t, bool> back = q.known;
        for (std::size_t i = 0; i < kernel.body.size(); ++i) {
            const auto l = static_cast<std::int32_t>(i);
            if (kernel.body[i].type != ir::Type::Bool || q.known.count(l)) continue;
            for (const auto& [e, v] : back)
                if (sv.shifted(e, l, window)) {
                    if (!imply(kernel, l, v, &q.known)) return {};
                    break;
                }
        }
    }
    for (const QuietCounter& c : q.counters)
        if (c.how == QuietState::ResetEveryRow && !imply(kernel, c.cond, true, &q.known)) return {};
    // The counts: at least clear_rows + 1 on every row without resets, 0 where every row resets.
    for (const CountTest& t : tests)
        for (const QuietCounter& c : q.counters) {
            if (c.state != t.state) continue;
            const bool ge = c.how == QuietState::NoReset ? t.at_least <= c.clear_rows + 1 : t.at_least <= 0;
            if (!imply(kernel, t.compare, ge != t.negate, &q.known)) return {};
        }
    q.ok = true;
    return q;
}

}  // namespace fj::codegen
