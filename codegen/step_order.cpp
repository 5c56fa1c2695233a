#include "codegen/step_order.hpp"

#include <algorithm>
#include <unordered_map>

#include "dsl/error.hpp"

namespace fj::codegen {

void order_steps_for_memory(Plan& plan) {
    const std::size_t n = plan.steps.size();
    if (n < 3) return;
    std::unordered_map<std::string, int> intermediate_of;
    for (std::size_t m = 0; m < plan.intermediates.size(); ++m)
        intermediate_of.emplace(plan.intermediates[m].name, static_cast<int>(m));
    // Per step: the intermediates it reads (each once) and those it writes with memory of their own.
    std::vector<std::vector<int>> reads(n), owns(n);
    std::vector<int> readers(plan.intermediates.size(), 0);  // steps that read it, not yet run
    for (std::size_t s = 0; s < n; ++s) {
        for (const std::string& in : plan.steps[s].kernel.inputs)
            if (auto it = intermediate_of.find(in); it != intermediate_of.end() &&
                std::find(reads[s].begin(), reads[s].end(), it->second) == reads[s].end()) {
                reads[s].push_back(it->second);
                ++readers[static_cast<std::size_t>(it->second)];
            }
    }
    for (std::size_t m = 0; m < plan.intermediates.size(); ++m) {
        const Intermediate& t = plan.intermediates[m];
        if (t.producer < 0) throw Error("plan: an intermediate without a producing step");
        if (t.output < 0 && readers[m] > 0) owns[static_cast<std::size_t>(t.producer)].push_back(static_cast<int>(m));
    }
    std::vector<int> waiting(n, 0);  // intermediates a step reads whose producer has not run
    std::vector<std::vector<int>> unblocks(n);  // producer step -> steps reading what it writes
    for (std::size_t s = 0; s < n; ++s)
        for (const int m : reads[s]) {
            const int p = plan.intermediates[static_cast<std::size_t>(m)].producer;
            if (p == static_cast<int>(s)) throw Error("plan: a step reads its own result");
            ++waiting[s];
            unblocks[static_cast<std::size_t>(p)].push_back(static_cast<int>(s));
        }
    std::vector<int> order, ready;
    for (std::size_t s = 0; s < n; ++s)
        if (waiting[s] == 0) ready.push_back(static_cast<int>(s));
    std::vector<int> ran_at(n, -1);  // a step's place in the new order
    while (!ready.empty()) {
        std::size_t best = 0;
        long best_score = 0;
        int best_recent = -1;
        for (std::size_t i = 0; i < ready.size(); ++i) {
            const auto s = static_cast<std::size_t>(ready[i]);
            long score = -static_cast<long>(owns[s].size());
            int recent = -1;  // the latest producer of what it reads: depth first on a tie
            for (const int m : reads[s]) {
                score += readers[static_cast<std::size_t>(m)] == 1;
                recent = std::max(recent, ran_at[static_cast<std::size_t>(plan.intermediates[static_cast<std::size_t>(m)].producer)]);
            }
            if (i == 0 || score > best_score || (score == best_score && recent > best_recent) ||
                (score == best_score && recent == best_recent && ready[i] < ready[best])) {
                best = i;
                best_score = score;
                best_recent = recent;
            }
        }
        const int s = ready[best];
        ready.erase(ready.begin() + static_cast<std::ptrdiff_t>(best));
        ran_at[static_cast<std::size_t>(s)] = static_cast<int>(order.size());
        order.push_back(s);
        for (const int m : reads[static_cast<std::size_t>(s)]) --readers[static_cast<std::size_t>(m)];
        for (const int r : unblocks[static_cast<std::size_t>(s)])
            if (--waiting[static_cast<std::size_t>(r)] == 0) ready.push_back(r);
    }
    if (order.size() != n) throw Error("plan: the steps' dependencies form a cycle");

    std::vector<int> position(n);
    for (std::size_t i = 0; i < n; ++i) position[static_cast<std::size_t>(order[i])] = static_cast<int>(i);
    std::vector<Step> steps;
    steps.reserve(n);
    for (const int s : order) steps.push_back(std::move(plan.steps[static_cast<std::size_t>(s)]));
    plan.steps = std::move(steps);
    for (Step& s : plan.steps) s.frees.clear();
    for (std::size_t m = 0; m < plan.intermediates.size(); ++m) {
        Intermediate& t = plan.intermediates[m];
        t.producer = position[static_cast<std::size_t>(t.producer)];
        t.last_reader = -1;
    }
    for (std::size_t s = 0; s < n; ++s)
        for (const std::string& in : plan.steps[s].kernel.inputs)
            if (auto it = intermediate_of.find(in); it != intermediate_of.end())
                plan.intermediates[static_cast<std::size_t>(it->second)].last_reader =
                    std::max(plan.intermediates[static_cast<std::size_t>(it->second)].last_reader, static_cast<int>(s));
    for (std::size_t m = 0; m < plan.intermediates.size(); ++m) {
        const Intermediate& t = plan.intermediates[m];
        if (t.output < 0) plan.steps[static_cast<std::size_t>(t.freed_after())].frees.push_back(static_cast<int>(m));
    }
}

}  // namespace fj::codegen
