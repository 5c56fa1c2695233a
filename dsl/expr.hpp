// fj::Expr: a factor expression, built by operator overloading or by fj::parse.
//
// Expressions are hash-consed: building the same subtree twice yields the same node, so programs
// share work without a separate CSE pass and node identity is expression identity. Nodes are
// immutable and live for the rest of the process (they are small; a research session builds at most
// a few hundred thousand). Every builder validates its arguments and throws fj::ExprError naming the
// operator and the argument.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dsl/error.hpp"
#include "dsl/op.hpp"

namespace fj {

struct Node {
    Op op;
    std::vector<const Node*> args;
    double value = 0;      // Const; quantile's q; ema's span
    std::string name;      // Input
    int d = 0;             // window length (windows) or lag (delay)
    int min_periods = 0;   // windows: fewer valid values than this give NaN
    std::uint64_t hash = 0;
    std::uint32_t id = 0;  // creation order; stable for a given build order within a process
};

class Expr {
public:
    Expr() = default;
    Expr(double constant);  // NOLINT: scalars broadcast, so 2 * x reads naturally
    explicit Expr(const Node* node) : node_(node) {}

    const Node* node() const { return node_; }
    Op op() const { return node_->op; }
    bool valid() const { return node_ != nullptr; }
    // Structural identity (hash-consing makes it pointer identity). operator== builds a comparison.
    bool same(const Expr& other) const { return node_ == other.node_; }
    std::string str() const;  // formula text that fj::parse reads back to the same node

private:
    const Node* node_ = nullptr;
};

// A trailing window of rows t-d+1..t; not an expression by itself, only the argument of a reducer.
struct Window {
    Expr x;
    int d;
    int min_periods;
};

Expr input(const std::string& name);
Expr constant(double value);

Window window(const Expr& x, int d, int min_periods = -1);  // min_periods -1: d

// Element-wise.
Expr operator-(const Expr& x);
Expr operator!(const Expr& x);
Expr operator+(const Expr& a, const Expr& b);
Expr operator-(const Expr& a, const Expr& b);
Expr operator*(const Expr& a, const Expr& b);
Expr operator/(const Expr& a, const Expr& b);
Expr operator<(const Expr& a, const Expr& b);
Expr operator<=(const Expr& a, const Expr& b);
Expr operator>(const Expr& a, const Expr& b);
Expr operator>=(const Expr& a, const Expr& b);
Expr operator==(const Expr& a, const Expr& b);
Expr operator!=(const Expr& a, const Expr& b);
Expr operator&&(const Expr& a, const Expr& b);
Expr operator||(const Expr& a, const Expr& b);
Expr abs(const Expr& x);
Expr sign(const Expr& x);
Expr sqrt(const Expr& x);
Expr exp(const Expr& x);
Expr log(const Expr& x);
Expr pow(const Expr& x, const Expr& y);
Expr signedpower(const Expr& x, const Expr& a);
Expr min(const Expr& a, const Expr& b);
Expr max(const Expr& a, const Expr& b);
Expr where(const Expr& cond, const Expr& a, const Expr& b);

// Time series.
Expr delay(const Expr& x, int k);
Expr delta(const Expr& x, int k);  // x - delay(x, k)
Expr sum(const Window& w);
Expr mean(const Window& w);
Expr count(const Window& w);
Expr var(const Window& w);
Expr std(const Window& w);
inline Expr stddev(const Window& w) { return std(w); }  // same; reads better after `using namespace fj`
Expr min(const Window& w);
Expr max(const Window& w);
// 1-based position of the window's smallest / largest valid value, counted from the oldest row of the
// window (1 = row t-d+1, d = row t, also for the first rows of a panel, whose window starts before it);
// ties: the oldest. Alpha101 ts_argmin / ts_argmax.
Expr argmin(const Window& w);
Expr argmax(const Window& w);
// Average-tie rank of the newest value among the window's valid values, divided by their count: in (0, 1],
// NaN where the newest value is NaN (pandas rolling(d).rank(pct=True)).
Expr ts_rank(const Window& w);
Expr product(const Window& w);  // of the valid values (1 for none, with min_periods 0)
// sum(w_i x_i) / sum(w_i) over the valid values, w_i = the row's position 1 (oldest) .. d (newest).
Expr decay_linear(const Window& w);
// Bias-corrected sample skewness (n >= 3) and excess kurtosis (n >= 4), as pandas rolling skew / kurt.
Expr skew(const Window& w);
Expr kurt(const Window& w);
// Order statistics with linear interpolation (numpy / pandas "linear"): q in [0, 1]; median is q = 0.5.
Expr median(const Window& w);
Expr quantile(const Window& w, double q);
// Least squares of the window's valid values on their positions 1 (oldest) .. d (newest): the slope, its
// R^2, and the newest value minus the fitted value at position d (NaN where the newest value is missing).
Expr slope(const Window& w);
Expr rsquare(const Window& w);
Expr resid(const Window& w);
Expr corr(const Window& a, const Window& b);
Expr cov(const Window& a, const Window& b);
// Exponential moving average: alpha = 2 / (span + 1), e_t = alpha x_t + (1 - alpha) e_(t-1), started at the
// first valid value, NaN inputs carry the previous value (pandas ewm(span, adjust=False, ignore_na=True)).
// span >= 1. Unbounded memory: kernels holding one scan each column from its first row (docs/operators.md).
Expr ema(const Expr& x, double span);

// Cross-sectional: per row (one time), over the columns; NaN values are left out and stay NaN
// (docs/operators.md, "Cross-sectional"). The group operators work within the columns of a row that share
// a group id: g is a panel of ids (float values; NaN: no group, and the result is NaN there).
Expr rank(const Expr& x);     // average-tie rank / valid count, in (0, 1]
Expr zscore(const Expr& x);   // (x - row mean) / row std, ddof = 1
Expr demean(const Expr& x);   // x - row mean
Expr scale(const Expr& x);    // x / sum(abs(x)) over the row
Expr scale(const Expr& x, const Expr& a);  // x * a / sum(abs(x)): scale(x) * a (scale(x) when a is 1)
Expr group_neutralize(const Expr& x, const Expr& g);  // x - mean of x over its (row, group); Alpha101 indneutralize
Expr group_rank(const Expr& x, const Expr& g);
Expr group_zscore(const Expr& x, const Expr& g);

// Generic builder used by the parser: checks arity and parameters against the op table.
// `value`: quantile's q, ema's span.
Expr make(Op op, std::vector<Expr> args, int d = 0, int min_periods = -1, double value = 0);
// `n` with other arguments and every parameter kept (d, min_periods, quantile's q, ema's span): for passes that
// rewrite a DAG (the planner's intermediates). Leaves are returned as they are.
Expr with_args(const Node* n, std::vector<Expr> args);

// Inputs named in the expression, in first-use order (depth first, left to right).
std::vector<std::string> input_names(const std::vector<Expr>& exprs);

// Nodes reachable from the roots, each once, every node after its arguments.
std::vector<const Node*> topo_order(const std::vector<const Node*>& roots);

}  // namespace fj
