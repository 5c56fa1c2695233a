#include "codegen/plan.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <numeric>
#include <set>
#include <unordered_map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "codegen/lower_ops.hpp"
#include "codegen/step_order.hpp"

namespace fj::codegen {

namespace {

// A readable kernel symbol from the first output's expression: "fj_corr_A_B_20".
std::string kernel_name(const std::vector<const Node*>& roots, std::size_t step) {
    std::string text = Expr(roots.front()).str(), name = "fj";
    bool sep = true;
    for (char c : text) {
        if (std::isalnum(static_cast<unsigned char>(c))) {
            if (sep) name += '_';
            name += c;
            sep = false;
        } else {
            sep = true;
        }
        if (name.size() >= 48) break;
    }
    if (roots.size() > 1) name += fmt::format("_and{}", roots.size() - 1);
    // Operators do not show in the readable part (A + B and A < B both read "A_B"): a short structural
    // hash keeps names apart in profiles and dumps.
    std::uint64_t h = 0;
    for (const Node* r : roots) h = h * 0x100000001b3ULL ^ r->hash;
    name += fmt::format("_{:06x}", h & 0xffffff);
    return step ? fmt::format("{}_r{}", name, step) : name;
}

// The same expression with the nodes of `leaves` replaced by the input nodes they map to (hash-consing
// gives back the very node where nothing below it changed).
class Substitution {
public:
    explicit Substitution(const std::unordered_map<const Node*, const Node*>& leaves) : leaves_(leaves) {}

    const Node* of(const Node* n) {
        if (auto it = leaves_.find(n); it != leaves_.end()) return it->second;
        return below(n);
    }
    // n itself kept, its arguments substituted: the expression a materialised node's own step computes.
    const Node* below(const Node* n) {
        if (auto it = memo_.find(n); it != memo_.end()) return it->second;
        const Node* r = n;
        if (!n->args.empty()) {
            std::vector<Expr> args;
            bool changed = false;
            for (const Node* a : n->args) {
                args.emplace_back(of(a));
                changed = changed || args.back().node() != a;
            }
            if (changed) r = with_args(n, std::move(args)).node();  // (every parameter kept: quantile's q, ema's span)
        }
        memo_.emplace(n, r);
        return r;
    }

private:
    const std::unordered_map<const Node*, const Node*>& leaves_;
    std::unordered_map<const Node*, const Node*> memo_;
};

// What one kernel output computes: a node of the program (an output's, or a materialised one's) and
// the names it is written under.
struct Sink {
    const Node* node = nullptr;  // in the program's expression
    const Node* expr = nullptr;  // what its step lowers: node with materialised nodes below it as inputs
    int cut = -1;                // the intermediate it is, or -1
    int level = 0;               // 1 + the largest level of the intermediates it reads
};

int find(std::vector<int>& parent, int x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
}

// Sinks that fuse (they share inputs or work) cut into kernels of a bounded size: a kernel's states live in
// registers, and one kernel for every window of a hundred alphas that read `close` (A1: 484 states, 7,219
// instructions) spills kilobytes per thread and ran 400 times slower on an H200 than the same work in kernels
// of a few windows each; its LLVM compile is as long. A group within kWholeStates and kWholeInstructions stays one
// kernel (the float64 guards of a nested corr over level shifts hold only with the sums it shares with the other
// sinks of its kernel: bench/RESULTS.md, fifteenth session). Beyond, each sink, in step order, joins the first kernel that
// already computes one of its windows (or ema) while that kernel stays within the larger
// budget, so window sums stay shared and guarded together; otherwise the kernel being filled while it stays
// within the smaller budget; otherwise it starts a kernel. A sink alone beyond the budgets gets a kernel of its own.
constexpr std::size_t kWholeStates = 128, kWholeInstructions = 2500;  // a group within these stays one kernel
constexpr std::size_t kFusedStates = 24, kFusedInstructions = 500;    // sinks that only share inputs
constexpr std::size_t kSharedStates = 96, kSharedInstructions = 2000; // sinks that share windows

bool stateful(const Node* n) {
    const OpKind k = op_info(n->op).kind;
    return k == OpKind::Window || k == OpKind::PairWindow || k == OpKind::Recursive;
}

template <class ExprOf>
std::vector<std::vector<int>> fused_bins(const std::vector<int>& members, ExprOf expr_of, bool exact_sums, DType dtype) {
    struct Bin {
        std::vector<int> sinks;
        std::vector<const Node*> exprs;
        std::set<const Node*> stateful;
    };
    std::vector<Bin> bins;
    auto fits = [&](const Bin& b, const Node* e, std::size_t states, std::size_t instructions) {
        std::vector<const Node*> exprs = b.exprs;
        exprs.push_back(e);
        ir::Kernel trial;
        std::set<std::string> reads;
        for (const Node* n : topo_order(exprs))
            if (n->op == Op::Input) reads.insert(n->name);
        trial.inputs.assign(reads.begin(), reads.end());
        lower_region(exprs, exact_sums, dtype, trial);
        return trial.states.size() <= states && trial.body.size() <= instructions;
    };
    {
        Bin all;
        for (const int s : members) all.exprs.push_back(expr_of(s));
        const Node* last = all.exprs.back();
        all.exprs.pop_back();
        if (fits(all, last, kWholeStates, kWholeInstructions)) return {members};
    }
    for (const int s : members) {
        const Node* e = expr_of(s);
        std::set<const Node*> mine;
        for (const Node* n : topo_order({e}))
            if (stateful(n)) mine.insert(n);
        Bin* into = nullptr;
        for (Bin& b : bins) {
            const bool shares = std::any_of(mine.begin(), mine.end(), [&](const Node* n) { return b.stateful.count(n) > 0; });
            if (shares && fits(b, e, kSharedStates, kSharedInstructions)) {
                into = &b;
                break;
            }
        }
        if (!into && !bins.empty() && fits(bins.back(), e, kFusedStates, kFusedInstructions)) into = &bins.back();
        if (!into) into = &bins.emplace_back();
        into->sinks.push_back(s);
        into->exprs.push_back(e);
        into->stateful.insert(mine.begin(), mine.end());
    }
    std::vector<std::vector<int>> out;
    for (Bin& b : bins) out.push_back(std::move(b.sinks));
    return out;
}

}  // namespace

Plan::Slot Plan::slot_of(const std::string& panel) const {
    if (auto it = std::find(inputs.begin(), inputs.end(), panel); it != inputs.end())
        return {Slot::Input, static_cast<int>(it - inputs.begin())};
    if (auto it = std::find(outputs.begin(), outputs.end(), panel); it != outputs.end())
        return {Slot::Output, static_cast<int>(it - outputs.begin())};
    for (std::size_t i = 0; i < intermediates.size(); ++i)
        if (intermediates[i].name == panel)
            return intermediates[i].output >= 0 ? Slot{Slot::Output, intermediates[i].output}
                                                : Slot{Slot::Intermediate, static_cast<int>(i)};
    throw Error(fmt::format("plan: no panel named '{}'", panel));
}

Plan make_plan(const std::vector<std::pair<std::string, Expr>>& outputs, DType dtype, const PlanOptions& options) {
    if (outputs.empty()) throw ExprError("compile: a program needs at least one output");
    Plan plan;
    plan.dtype = dtype;
    plan.exact_sums = dtype == DType::F64 || options.sums == Sums::Exact;
    std::set<std::string> names;
    std::vector<const Node*> roots;
    for (const auto& [name, e] : outputs) {
        if (!e.valid()) throw ExprError(fmt::format("compile: output '{}' is an empty expression", name));
        if (!names.insert(name).second) throw ExprError(fmt::format("compile: output '{}' is given twice", name));
        plan.outputs.push_back(name);
        roots.push_back(e.node());
    }
    const std::vector<const Node*> program = topo_order(roots);
    std::set<std::string> inputs;
    for (const Node* n : program)
        if (n->op == Op::Input) inputs.insert(n->name);
    plan.inputs.assign(inputs.begin(), inputs.end());

    // Materialised nodes, in the program's topological order; each an input node of a name of its own.
    // Cross-sectional nodes always are (each is a row step), long order statistics too (each a column
    // step), and so are their arguments that are not panels already: a time-series step computes them into
    // an intermediate (a constant too: row and column steps read panels only).
    std::set<const Node*> wanted;
    for (const Expr& e : options.materialize)
        if (e.valid() && op_info(e.op()).kind != OpKind::Leaf) wanted.insert(e.node());
    const auto own_step = [&](const Node* n) {
        return is_cross_section(n->op) || (options.column_steps && is_column_op(n));
    };
    for (const Node* n : program)
        if (own_step(n)) {
            wanted.insert(n);
            for (const Node* a : n->args)
                if (a->op != Op::Input) wanted.insert(a);
        }
    std::unordered_map<const Node*, const Node*> leaves;
    for (const Node* n : program) {
        if (!wanted.count(n)) continue;
        std::string name = fmt::format("_fj_t{}", plan.intermediates.size());
        while (inputs.count(name)) name += '_';
        Intermediate m;
        m.name = name;
        m.node = n;
        for (std::size_t o = 0; o < roots.size() && m.output < 0; ++o)
            if (roots[o] == n) m.output = static_cast<int>(o);
        plan.intermediates.push_back(m);
        leaves.emplace(n, input(name).node());
    }

    // Sinks: each output's node once, then each materialised node that is not an output's.
    Substitution subst(leaves);
    std::vector<Sink> sinks;
    std::unordered_map<const Node*, int> sink_of;
    for (const Node* r : roots)
        if (sink_of.emplace(r, static_cast<int>(sinks.size())).second) sinks.push_back({r, subst.of(r)});
    std::unordered_map<std::string, int> intermediate_of;  // name -> index
    for (std::size_t m = 0; m < plan.intermediates.size(); ++m) {
        const Node* n = plan.intermediates[m].node;
        auto [it, fresh] = sink_of.emplace(n, static_cast<int>(sinks.size()));
        if (fresh) sinks.push_back({n, nullptr});
        Sink& k = sinks[static_cast<std::size_t>(it->second)];
        k.cut = static_cast<int>(m);
        k.expr = subst.below(n);
        intermediate_of.emplace(plan.intermediates[m].name, static_cast<int>(m));
    }
    // Levels: 1 + the largest level of the intermediates a sink reads. Materialised nodes come in
    // topological order, so each one's level is known before anything reads it.
    std::vector<int> level_of_intermediate(plan.intermediates.size(), 0);
    auto level = [&](const Sink& k) {
        int l = 0;
        for (const Node* n : topo_order({k.expr}))
            if (auto it = intermediate_of.find(n->op == Op::Input ? n->name : std::string()); it != intermediate_of.end())
                l = std::max(l, level_of_intermediate[static_cast<std::size_t>(it->second)] + 1);
        return l;
    };
    for (std::size_t m = 0; m < plan.intermediates.size(); ++m) {
        Sink& k = sinks[static_cast<std::size_t>(sink_of.at(plan.intermediates[m].node))];
        k.level = level_of_intermediate[m] = level(k);
    }
    for (Sink& k : sinks)
        if (k.cut < 0) k.level = level(k);
    // A row sink (a cross-sectional node over its argument panels) is a step of its own: it fuses with
    // nothing; so is a column sink (a long order statistic over its argument panel).
    auto is_row = [&](std::size_t s) { return own_step(sinks[s].expr); };
    // Sinks of one level that share any node, inputs included, fuse into one kernel: it reads each input
    // once and computes shared work once. Sinks that share nothing are steps of their own.
    std::vector<int> parent(sinks.size());
    std::iota(parent.begin(), parent.end(), 0);
    std::unordered_map<const Node*, int> first_sink_of_node;
    for (std::size_t s = 0; s < sinks.size(); ++s)
        for (const Node* n : is_row(s) ? std::vector<const Node*>{} : topo_order({sinks[s].expr})) {
            auto [it, fresh] = first_sink_of_node.emplace(n, static_cast<int>(s));
            if (!fresh && sinks[static_cast<std::size_t>(it->second)].level == sinks[s].level)
                parent[static_cast<std::size_t>(find(parent, static_cast<int>(s)))] = find(parent, it->second);
        }
    // Steps by level, then by their first sink (outputs in the order given come first).
    std::vector<int> groups;  // each group's root, in the order of its first sink
    for (std::size_t s = 0; s < sinks.size(); ++s)
        if (const int g = find(parent, static_cast<int>(s)); std::find(groups.begin(), groups.end(), g) == groups.end())
            groups.push_back(g);
    std::stable_sort(groups.begin(), groups.end(), [&](int a, int b) {
        return sinks[static_cast<std::size_t>(a)].level < sinks[static_cast<std::size_t>(b)].level;
    });
    // Each group's sinks in step order: the program's outputs in the order given, then intermediates that are
    // not outputs. A time-series group too big for one kernel is cut into several (fused_bins).
    std::vector<std::vector<int>> bins;
    for (const int group : groups) {
        std::vector<int> members;
        for (std::size_t o = 0; o < roots.size(); ++o)
            if (const int s = sink_of.at(roots[o]); find(parent, s) == group && std::find(members.begin(), members.end(), s) == members.end())
                members.push_back(s);
        for (std::size_t s = 0; s < sinks.size(); ++s)
            if (find(parent, static_cast<int>(s)) == group && sinks[s].cut >= 0 &&
                plan.intermediates[static_cast<std::size_t>(sinks[s].cut)].output < 0)
                members.push_back(static_cast<int>(s));
        if (is_row(static_cast<std::size_t>(group))) {
            bins.push_back(std::move(members));
            continue;
        }
        for (std::vector<int>& bin : fused_bins(members, [&](int s) { return sinks[static_cast<std::size_t>(s)].expr; },
                                                plan.exact_sums, plan.dtype))
            bins.push_back(std::move(bin));
    }

    for (std::size_t st = 0; st < bins.size(); ++st) {
        const std::vector<int>& bin = bins[st];
        Step step;
        const Node* front = sinks[static_cast<std::size_t>(bin.front())].expr;
        step.kind = !is_row(static_cast<std::size_t>(bin.front())) ? StepKind::TimeSeries
                    : is_cross_section(front->op)                  ? StepKind::Row
                                                                   : StepKind::Column;
        for (const int s : bin) {
            const Sink& k = sinks[static_cast<std::size_t>(s)];
            Intermediate* m = k.cut >= 0 ? &plan.intermediates[static_cast<std::size_t>(k.cut)] : nullptr;
            if (m) m->producer = static_cast<int>(st);
            if (m && m->output < 0) {
                step.roots.push_back(k.expr);
                step.kernel.outputs.push_back(m->name);
                continue;
            }
            for (std::size_t o = 0; o < roots.size(); ++o)  // (one expression given under two names: both)
                if (roots[o] == k.node) {
                    step.roots.push_back(k.expr);
                    step.kernel.outputs.push_back(plan.outputs[o]);
                }
        }
        if (step.kind != StepKind::TimeSeries) {
            // The operator's argument panels, in argument order (x, then g).
            for (const Node* a : step.roots.front()->args) step.kernel.inputs.push_back(a->name);
            step.kernel.name = kernel_name(step.roots, st);
            if (step.kind == StepKind::Column) step.kernel.halo = step.roots.front()->d - 1;
        } else {
            std::set<std::string> reads;
            for (const Node* n : topo_order(step.roots))
                if (n->op == Op::Input) reads.insert(n->name);
            step.kernel.inputs.assign(reads.begin(), reads.end());
            step.kernel.name = kernel_name(step.roots, st) + (plan.exact_sums ? "_x" : "");
            lower_region(step.roots, plan.exact_sums, plan.dtype, step.kernel);
        }
        step.chain_halo = step.kernel.halo;
        for (const std::string& in : step.kernel.inputs)
            if (auto it = intermediate_of.find(in); it != intermediate_of.end()) {
                Intermediate& m = plan.intermediates[static_cast<std::size_t>(it->second)];
                step.chain_halo = std::max(step.chain_halo,
                                           step.kernel.halo + plan.steps[static_cast<std::size_t>(m.producer)].chain_halo);
                m.last_reader = static_cast<int>(st);
            }
        if (step.kind == StepKind::TimeSeries) ir::verify(step.kernel);
        plan.halo = std::max(plan.halo, step.chain_halo);
        plan.steps.push_back(std::move(step));
    }
    // What each step's end frees: the intermediates (with memory of their own) nothing later reads.
    for (std::size_t m = 0; m < plan.intermediates.size(); ++m) {
        const Intermediate& t = plan.intermediates[m];
        if (t.output < 0) plan.steps[static_cast<std::size_t>(t.freed_after())].frees.push_back(static_cast<int>(m));
    }
    order_steps_for_memory(plan);
    return plan;
}

int Plan::intermediates_alive(std::size_t step) const {
    int n = 0;
    for (const Intermediate& m : intermediates)
        n += m.output < 0 && m.producer <= static_cast<int>(step) && static_cast<int>(step) <= m.freed_after();
    return n;
}

int Plan::peak_intermediates() const {
    int peak = 0;
    for (std::size_t s = 0; s < steps.size(); ++s) peak = std::max(peak, intermediates_alive(s));
    return peak;
}

std::int64_t Plan::peak_bytes(std::int64_t rows, std::int64_t cols, DType dtype) const {
    const std::int64_t panels = static_cast<std::int64_t>(inputs.size() + outputs.size()) + peak_intermediates();
    return panels * rows * cols * static_cast<std::int64_t>(dtype_size(dtype));
}

const Step* Plan::first_row_step() const {
    for (const Step& s : steps)
        if (s.kind == StepKind::Row) return &s;
    return nullptr;
}

bool Plan::has_row_steps() const { return first_row_step() != nullptr; }

bool is_column_op(const Node* n) {
    return (n->op == Op::WTsRank || n->op == Op::WMedian || n->op == Op::WQuantile) && n->d >= kColumnStepWindow;
}

void refuse_row_steps(const Plan& plan, std::string_view backend) {
    if (const Step* s = plan.first_row_step())
        throw BackendError(fmt::format("cross-sectional operator '{}' is not on the {} backend yet; use backend cpu",
                                       op_name(s->row_op()->op), backend));
}

std::string explain(const Plan& plan) {
    std::string out = fmt::format("program: {} output(s) [{}] from input(s) [{}]; {} step(s), {} intermediate(s), "
                                  "halo {} rows along the longest chain\n",
                                  plan.outputs.size(), fmt::join(plan.outputs, ", "), fmt::join(plan.inputs, ", "),
                                  plan.steps.size(), plan.intermediates.size(), plan.halo);
    for (const Intermediate& m : plan.intermediates) {
        if (m.output >= 0)
            out += fmt::format("intermediate {} = output '{}', written by step {}\n", m.name,
                               plan.outputs[static_cast<std::size_t>(m.output)], m.producer);
        else
            out += fmt::format("intermediate {} = {}: written by step {}, {} ({})\n", m.name, Expr(m.node).str(),
                               m.producer, m.last_reader >= 0 ? fmt::format("read until step {}", m.last_reader) : "never read",
                               fmt::format("freed after step {}", m.freed_after()));
    }
    const std::size_t fixed = plan.inputs.size() + plan.outputs.size();
    for (std::size_t i = 0; i < plan.steps.size(); ++i) {
        const Step& s = plan.steps[i];
        const int alive = plan.intermediates_alive(i);
        const std::string panels = fmt::format("{} panel(s) alive ({} intermediate(s))", fixed + static_cast<std::size_t>(alive), alive);
        if (s.kind == StepKind::Row) {
            out += fmt::format("step {}: row ({} over whole rows, reads [{}]), no halo of its own ({} along its chain), {}\n",
                               i, op_name(s.row_op()->op), fmt::join(s.kernel.inputs, ", "), s.chain_halo, panels);
            for (std::size_t k = 0; k < s.roots.size(); ++k)
                out += fmt::format("  {} = {}\n", s.kernel.outputs[k], Expr(s.roots[k]).str());
            continue;
        }
        if (s.kind == StepKind::Column) {
            const Node* c = s.column_op();
            out += fmt::format("step {}: column ({} over window({}, {}, min_periods {}) column by column, O(log d) a row, "
                               "reads [{}]), halo {} rows ({} along its chain), {}\n",
                               i, op_name(c->op), s.kernel.inputs.front(), c->d, c->min_periods, fmt::join(s.kernel.inputs, ", "),
                               s.kernel.halo, s.chain_halo, panels);
            for (std::size_t k = 0; k < s.roots.size(); ++k)
                out += fmt::format("  {} = {}\n", s.kernel.outputs[k], Expr(s.roots[k]).str());
            continue;
        }
        out += fmt::format("step {}: time series, halo {} rows ({} along its chain), {} state(s), {} ring(s), "
                           "{} instruction(s), {} sums, {}\n",
                           i, s.kernel.halo, s.chain_halo, s.kernel.states.size(), s.kernel.rings.size(),
                           s.kernel.body.size(), plan.exact_sums ? "exact (double-double)" : "float64", panels);
        for (std::size_t k = 0; k < s.roots.size(); ++k)
            out += fmt::format("  {} = {}\n", s.kernel.outputs[k], Expr(s.roots[k]).str());
        out += s.kernel.dump();
    }
    out += fmt::format("memory: {} input and {} output panel(s), at most {} intermediate(s) alive at once: {} panel(s) "
                       "of rows x cols ({:.1f} MB for 1,000 x 1,000 float32)\n",
                       plan.inputs.size(), plan.outputs.size(), plan.peak_intermediates(),
                       fixed + static_cast<std::size_t>(plan.peak_intermediates()),
                       static_cast<double>(plan.peak_bytes(1000, 1000, DType::F32)) / 1e6);
    return out;
}

}  // namespace fj::codegen
