#include "dsl/expr.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

namespace fj {

namespace {

std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
    // splitmix-style combine: cheap and well distributed, enough for interning.
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ULL;
    return h ^ (h >> 29);
}

std::uint64_t double_bits(double v) {
    std::uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    return bits;
}

bool same_key(const Node& a, const Node& b) {
    return a.op == b.op && a.args == b.args && double_bits(a.value) == double_bits(b.value) &&
           a.name == b.name && a.d == b.d && a.min_periods == b.min_periods;
}

// The interning table. Nodes are never freed, so a const Node* stays valid for the process.
class NodePool {
public:
    const Node* intern(Node&& n) {
        std::uint64_t h = mix(static_cast<std::uint64_t>(n.op), double_bits(n.value));
        for (const Node* a : n.args) h = mix(h, a->hash);
        h = mix(h, std::hash<std::string>{}(n.name));
        h = mix(h, (static_cast<std::uint64_t>(n.d) << 32) ^ static_cast<std::uint32_t>(n.min_periods));
        n.hash = h;
        std::lock_guard<std::mutex> lock(mutex_);
        auto range = table_.equal_range(h);
        for (auto it = range.first; it != range.second; ++it)
            if (same_key(*it->second, n)) return it->second;
        n.id = static_cast<std::uint32_t>(storage_.size());
        storage_.push_back(std::make_unique<Node>(std::move(n)));
        const Node* p = storage_.back().get();
        table_.emplace(h, p);
        return p;
    }

private:
    std::mutex mutex_;
    std::unordered_multimap<std::uint64_t, const Node*> table_;
    std::vector<std::unique_ptr<Node>> storage_;
};

NodePool& pool() {
    static NodePool* p = new NodePool;  // never destroyed: nodes may be used during static teardown
    return *p;
}

bool valid_identifier(const std::string& s) {
    if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
    for (char c : s)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.')) return false;
    return true;
}

void require(const Expr& e, Op op, int index) {
    if (!e.valid())
        throw ExprError(fmt::format("{}: argument {} is an empty expression", op_name(op), index + 1));
}

// adv{d} is the formula spelling of ts_mean(volume, d): an input of that name could not be written.
bool is_adv_name(const std::string& s) {
    return s.size() > 3 && s.compare(0, 3, "adv") == 0 &&
           std::all_of(s.begin() + 3, s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

}  // namespace

Expr::Expr(double value) { *this = constant(value); }

Expr input(const std::string& name) {
    if (!valid_identifier(name))
        throw ExprError(fmt::format("input: '{}' is not a valid input name (letters, digits, '_', '.')", name));
    if (is_adv_name(name))
        throw ExprError(fmt::format("input: '{}' is reserved: formulas read it as ts_mean(volume, {})", name, name.substr(3)));
    Node n;
    n.op = Op::Input;
    n.name = name;
    return Expr(pool().intern(std::move(n)));
}

Expr constant(double value) {
    Node n;
    n.op = Op::Const;
    // -0 and 0 are one constant; every NaN is one constant (x86 makes negative NaNs).
    n.value = value == 0 ? 0.0 : std::isnan(value) ? std::numeric_limits<double>::quiet_NaN() : value;
    return Expr(pool().intern(std::move(n)));
}

Expr make(Op op, std::vector<Expr> args, int d, int min_periods, double value) {
    const OpInfo& info = op_info(op);
    if (info.kind == OpKind::Leaf)
        throw ExprError(fmt::format("{}: build inputs with fj::input and constants with fj::constant", info.name));
    if (static_cast<int>(args.size()) != info.arity)
        throw ExprError(fmt::format("{}: takes {} argument{}, got {}", info.name, info.arity,
                                    info.arity == 1 ? "" : "s", args.size()));
    for (std::size_t i = 0; i < args.size(); ++i) require(args[i], op, static_cast<int>(i));

    Node n;
    n.op = op;
    if (info.kind == OpKind::Lag) {
        if (d < 0) throw ExprError(fmt::format("{}: lag must be >= 0, got {}", info.name, d));
        if (d == 0) return args[0];  // delay(x, 0) is x
        n.d = d;
    } else if (info.kind == OpKind::Window || info.kind == OpKind::PairWindow) {
        if (d < 1) throw ExprError(fmt::format("{}: window length must be >= 1, got {}", info.name, d));
        if (min_periods < 0) min_periods = d;
        if (min_periods > d)
            throw ExprError(fmt::format("{}: min_periods {} exceeds the window length {}", info.name, min_periods, d));
        n.d = d;
        n.min_periods = op == Op::WCount ? 0 : min_periods;  // count is never NaN
    }
    if (op == Op::WQuantile) {
        if (!(value >= 0 && value <= 1))
            throw ExprError(fmt::format("{}: q must be in [0, 1], got {}", info.name, value));
        n.value = value;
    }
    if (op == Op::Ema) {
        if (!(value >= 1) || std::isinf(value))
            throw ExprError(fmt::format("{}: span must be a finite number >= 1, got {}", info.name, value));
        n.value = value;
    }
    // -c is the constant -c, so -1 * x built in C++ and "-1 * x" parsed are one node.
    if (op == Op::Neg && args[0].op() == Op::Const) return constant(-args[0].node()->value);
    for (const Expr& a : args) n.args.push_back(a.node());
    return Expr(pool().intern(std::move(n)));
}

Expr with_args(const Node* n, std::vector<Expr> args) {
    if (op_info(n->op).kind == OpKind::Leaf) return Expr(n);
    return make(n->op, std::move(args), n->d, n->min_periods, n->value);
}

Window window(const Expr& x, int d, int min_periods) {
    if (!x.valid()) throw ExprError("window: argument 1 is an empty expression");
    if (d < 1) throw ExprError(fmt::format("window: length must be >= 1, got {}", d));
    if (min_periods < -1) throw ExprError(fmt::format("window: min_periods must be >= 0, got {}", min_periods));
    if (min_periods == -1) min_periods = d;
    if (min_periods > d)
        throw ExprError(fmt::format("window: min_periods {} exceeds the window length {}", min_periods, d));
    return Window{x, d, min_periods};
}

Expr operator-(const Expr& x) { return make(Op::Neg, {x}); }
Expr operator!(const Expr& x) { return make(Op::Not, {x}); }
Expr operator+(const Expr& a, const Expr& b) { return make(Op::Add, {a, b}); }
Expr operator-(const Expr& a, const Expr& b) { return make(Op::Sub, {a, b}); }
Expr operator*(const Expr& a, const Expr& b) { return make(Op::Mul, {a, b}); }
Expr operator/(const Expr& a, const Expr& b) { return make(Op::Div, {a, b}); }
Expr operator<(const Expr& a, const Expr& b) { return make(Op::Lt, {a, b}); }
Expr operator<=(const Expr& a, const Expr& b) { return make(Op::Le, {a, b}); }
Expr operator>(const Expr& a, const Expr& b) { return make(Op::Gt, {a, b}); }
Expr operator>=(const Expr& a, const Expr& b) { return make(Op::Ge, {a, b}); }
Expr operator==(const Expr& a, const Expr& b) { return make(Op::Eq, {a, b}); }
Expr operator!=(const Expr& a, const Expr& b) { return make(Op::Ne, {a, b}); }
Expr operator&&(const Expr& a, const Expr& b) { return make(Op::And, {a, b}); }
Expr operator||(const Expr& a, const Expr& b) { return make(Op::Or, {a, b}); }
Expr abs(const Expr& x) { return make(Op::Abs, {x}); }
Expr sign(const Expr& x) { return make(Op::Sign, {x}); }
Expr sqrt(const Expr& x) { return make(Op::Sqrt, {x}); }
Expr exp(const Expr& x) { return make(Op::Exp, {x}); }
Expr log(const Expr& x) { return make(Op::Log, {x}); }
Expr pow(const Expr& x, const Expr& y) { return make(Op::Pow, {x, y}); }
Expr signedpower(const Expr& x, const Expr& a) { return make(Op::SignedPower, {x, a}); }
Expr min(const Expr& a, const Expr& b) { return make(Op::Min, {a, b}); }
Expr max(const Expr& a, const Expr& b) { return make(Op::Max, {a, b}); }
Expr where(const Expr& c, const Expr& a, const Expr& b) { return make(Op::Where, {c, a, b}); }

Expr delay(const Expr& x, int k) { return make(Op::Delay, {x}, k); }
Expr delta(const Expr& x, int k) {
    if (k < 0) throw ExprError(fmt::format("delta: lag must be >= 0, got {}", k));
    return x - delay(x, k);
}

namespace {
Expr reduce(Op op, const Window& w) { return make(op, {w.x}, w.d, w.min_periods); }
Expr reduce_pair(Op op, const Window& a, const Window& b) {
    if (a.d != b.d)
        throw ExprError(fmt::format("{}: both windows must have the same length, got {} and {}", op_name(op), a.d, b.d));
    return make(op, {a.x, b.x}, a.d, std::max(a.min_periods, b.min_periods));
}
}  // namespace

Expr sum(const Window& w) { return reduce(Op::WSum, w); }
Expr mean(const Window& w) { return reduce(Op::WMean, w); }
Expr count(const Window& w) { return reduce(Op::WCount, w); }
Expr var(const Window& w) { return reduce(Op::WVar, w); }
Expr std(const Window& w) { return reduce(Op::WStd, w); }
Expr min(const Window& w) { return reduce(Op::WMin, w); }
Expr max(const Window& w) { return reduce(Op::WMax, w); }
Expr argmin(const Window& w) { return reduce(Op::WArgMin, w); }
Expr argmax(const Window& w) { return reduce(Op::WArgMax, w); }
Expr ts_rank(const Window& w) { return reduce(Op::WTsRank, w); }
Expr product(const Window& w) { return reduce(Op::WProduct, w); }
Expr decay_linear(const Window& w) { return reduce(Op::WDecayLinear, w); }
Expr skew(const Window& w) { return reduce(Op::WSkew, w); }
Expr kurt(const Window& w) { return reduce(Op::WKurt, w); }
Expr median(const Window& w) { return reduce(Op::WMedian, w); }
Expr quantile(const Window& w, double q) { return make(Op::WQuantile, {w.x}, w.d, w.min_periods, q); }
Expr slope(const Window& w) { return reduce(Op::WSlope, w); }
Expr rsquare(const Window& w) { return reduce(Op::WRSquare, w); }
Expr resid(const Window& w) { return reduce(Op::WResid, w); }
Expr ema(const Expr& x, double span) { return make(Op::Ema, {x}, 0, -1, span); }
Expr corr(const Window& a, const Window& b) { return reduce_pair(Op::WCorr, a, b); }
Expr cov(const Window& a, const Window& b) { return reduce_pair(Op::WCov, a, b); }

Expr rank(const Expr& x) { return make(Op::Rank, {x}); }
Expr zscore(const Expr& x) { return make(Op::ZScore, {x}); }
Expr demean(const Expr& x) { return make(Op::Demean, {x}); }
Expr scale(const Expr& x) { return make(Op::Scale, {x}); }
Expr scale(const Expr& x, const Expr& a) {
    require(a, Op::Scale, 1);
    // The factor is applied after the row step, element-wise: one scale node whatever a is, and a may be
    // any expression (a panel scales each cell by its own factor).
    if (a.op() == Op::Const && a.node()->value == 1.0) return scale(x);
    return scale(x) * a;
}
Expr group_neutralize(const Expr& x, const Expr& g) { return make(Op::GroupNeutralize, {x, g}); }
Expr group_rank(const Expr& x, const Expr& g) { return make(Op::GroupRank, {x, g}); }
Expr group_zscore(const Expr& x, const Expr& g) { return make(Op::GroupZScore, {x, g}); }

std::vector<const Node*> topo_order(const std::vector<const Node*>& roots) {
    std::vector<const Node*> order;
    std::unordered_set<const Node*> seen;
    // Iterative post-order: expressions from generated formulas can nest thousands deep.
    std::vector<std::pair<const Node*, std::size_t>> stack;
    for (const Node* r : roots) {
        if (!r || seen.count(r)) continue;
        stack.push_back({r, 0});
        seen.insert(r);
        while (!stack.empty()) {
            auto& [n, i] = stack.back();
            if (i < n->args.size()) {
                const Node* a = n->args[i++];
                if (seen.insert(a).second) stack.push_back({a, 0});
            } else {
                order.push_back(n);
                stack.pop_back();
            }
        }
    }
    return order;
}

std::vector<std::string> input_names(const std::vector<Expr>& exprs) {
    std::vector<const Node*> roots;
    for (const Expr& e : exprs) roots.push_back(e.node());
    std::vector<std::string> names;
    for (const Node* n : topo_order(roots))
        if (n->op == Op::Input) names.push_back(n->name);
    return names;
}

namespace {
std::string format_number(double v) {
    if (std::isnan(v)) return "(0/0)";
    if (std::isinf(v)) return v > 0 ? "(1/0)" : "(-1/0)";
    std::string s = fmt::format("{}", v);  // shortest text that reads back exactly
    return v < 0 ? "(" + s + ")" : s;
}

std::string to_text(const Node* n) {
    const OpInfo& info = op_info(n->op);
    auto arg = [&](int i) { return to_text(n->args[i]); };
    auto win = [&](int i) {
        return n->min_periods == n->d ? fmt::format("window({}, {})", arg(i), n->d)
                                      : fmt::format("window({}, {}, {})", arg(i), n->d, n->min_periods);
    };
    switch (info.kind) {
    case OpKind::Leaf: return n->op == Op::Input ? n->name : format_number(n->value);
    case OpKind::Lag: return fmt::format("delay({}, {})", arg(0), n->d);
    case OpKind::Window:
        if (n->op == Op::WCount) return fmt::format("count(window({}, {}))", arg(0), n->d);
        if (n->op == Op::WQuantile) return fmt::format("quantile({}, {})", win(0), format_number(n->value));
        return fmt::format("{}({})", info.name, win(0));
    case OpKind::Recursive: return fmt::format("{}({}, {})", info.name, arg(0), format_number(n->value));
    case OpKind::PairWindow: return fmt::format("{}({}, {})", info.name, win(0), win(1));
    case OpKind::CrossSection:
        if (info.arity == 1) return fmt::format("{}({})", info.name, arg(0));
        return fmt::format("{}({}, {})", info.name, arg(0), arg(1));
    case OpKind::Elementwise:
        if (n->op == Op::Where) return fmt::format("({} ? {} : {})", arg(0), arg(1), arg(2));
        if (info.infix && info.arity == 1) return fmt::format("({}{})", info.infix, arg(0));
        if (info.infix) return fmt::format("({} {} {})", arg(0), info.infix, arg(1));
        if (info.arity == 1) return fmt::format("{}({})", info.name, arg(0));
        return fmt::format("{}({}, {})", info.name, arg(0), arg(1));
    }
    return "?";
}
}  // namespace

std::string Expr::str() const { return node_ ? to_text(node_) : std::string("<empty>"); }

}  // namespace fj
