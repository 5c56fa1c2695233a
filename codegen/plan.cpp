#include "codegen/plan.hpp"

#include <algorithm>
#include <cctype>
#include <set>

#include <fmt/format.h>

#include "codegen/lower_ops.hpp"

namespace fj::codegen {

namespace {

// A readable kernel symbol from the first output's expression: "fj_corr_A_B_20".
std::string kernel_name(const std::vector<const Node*>& roots, std::size_t region) {
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
    return region ? fmt::format("{}_r{}", name, region) : name;
}

}  // namespace

Plan make_plan(const std::vector<std::pair<std::string, Expr>>& outputs, DType dtype, Sums sums) {
    if (outputs.empty()) throw ExprError("compile: a program needs at least one output");
    Plan plan;
    plan.dtype = dtype;
    plan.exact_sums = dtype == DType::F64 || sums == Sums::Exact;
    std::set<std::string> names;
    std::vector<const Node*> roots;
    for (const auto& [name, e] : outputs) {
        if (!e.valid()) throw ExprError(fmt::format("compile: output '{}' is an empty expression", name));
        if (!names.insert(name).second) throw ExprError(fmt::format("compile: output '{}' is given twice", name));
        plan.outputs.push_back(name);
        roots.push_back(e.node());
    }
    std::set<std::string> inputs;
    for (const Node* n : topo_order(roots))
        if (n->op == Op::Input) inputs.insert(n->name);
    plan.inputs.assign(inputs.begin(), inputs.end());

    // Every operator so far is a time-series one, so a program is one fused region. Cross-sectional
    // operators will split here: a region ends where one of them consumes its result.
    Region region;
    region.roots = roots;
    region.kernel.name = kernel_name(roots, 0) + (plan.exact_sums ? "_x" : "");
    region.kernel.inputs = plan.inputs;
    region.kernel.outputs = plan.outputs;
    lower_region(roots, plan.exact_sums, region.kernel);
    plan.halo = region.kernel.halo;
    plan.regions.push_back(std::move(region));
    return plan;
}

std::string explain(const Plan& plan) {
    std::string out = fmt::format("program: {} output(s) [{}] from input(s) [{}]; {} region(s)\n",
                                  plan.outputs.size(), fmt::join(plan.outputs, ", "), fmt::join(plan.inputs, ", "),
                                  plan.regions.size());
    for (std::size_t i = 0; i < plan.regions.size(); ++i) {
        const Region& r = plan.regions[i];
        out += fmt::format("region {}: time series, halo {} rows, {} state(s), {} ring(s), {} instruction(s), {} sums\n",
                           i, r.kernel.halo, r.kernel.states.size(), r.kernel.rings.size(), r.kernel.body.size(),
                           plan.exact_sums ? "exact (double-double)" : "float64");
        for (std::size_t k = 0; k < r.roots.size(); ++k)
            out += fmt::format("  {} = {}\n", r.kernel.outputs[k], Expr(r.roots[k]).str());
        out += r.kernel.dump();
    }
    return out;
}

}  // namespace fj::codegen
