#include "reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <unordered_map>

namespace fj::test {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using Values = std::vector<double>;

bool all_equal(const Values& v) {
    for (double x : v)
        if (x != v.front()) return false;
    return true;
}

long double sum_of(const Values& v) {
    long double s = 0;
    for (double x : v) s += x;
    return s;
}

long double mean_of(const Values& v) { return sum_of(v) / static_cast<long double>(v.size()); }

// Sample variance, ddof = 1, two passes. Callers handle n < 2 and constant windows.
long double variance_of(const Values& v) {
    const long double m = mean_of(v);
    long double ss = 0;
    for (double x : v) ss += (x - m) * (x - m);
    return ss / static_cast<long double>(v.size() - 1);
}

// Sum of (x - mean x)(y - mean y), two passes.
long double comoment_of(const Values& xs, const Values& ys) {
    const long double mx = mean_of(xs), my = mean_of(ys);
    long double s = 0;
    for (std::size_t i = 0; i < xs.size(); ++i) s += (xs[i] - mx) * (ys[i] - my);
    return s;
}

double sign_of(double x) {
    if (std::isnan(x)) return kNaN;
    if (x > 0) return 1.0;
    if (x < 0) return -1.0;
    return 0.0;
}

double truth(bool b) { return b ? 1.0 : 0.0; }

double elementwise(fj::Op op, double a, double b, double c) {
    using fj::Op;
    switch (op) {
    case Op::Neg: return -a;
    case Op::Not: return std::isnan(a) ? kNaN : truth(a == 0);
    case Op::Abs: return std::fabs(a);
    case Op::Sign: return sign_of(a);
    case Op::Sqrt: return std::sqrt(a);
    case Op::Exp: return std::exp(a);
    case Op::Log: return std::log(a);
    case Op::Add: return a + b;
    case Op::Sub: return a - b;
    case Op::Mul: return a * b;
    case Op::Div: return a / b;
    case Op::Pow: return std::pow(a, b);
    case Op::SignedPower: return sign_of(a) * std::pow(std::fabs(a), b);
    case Op::Min: return std::isnan(a) || std::isnan(b) ? kNaN : std::min(a, b);
    case Op::Max: return std::isnan(a) || std::isnan(b) ? kNaN : std::max(a, b);
    // C++ comparisons are ordered: false when either side is NaN, and != is true then.
    case Op::Lt: return truth(a < b);
    case Op::Le: return truth(a <= b);
    case Op::Gt: return truth(a > b);
    case Op::Ge: return truth(a >= b);
    case Op::Eq: return truth(a == b);
    case Op::Ne: return truth(a != b);
    case Op::And: return std::isnan(a) || std::isnan(b) ? kNaN : truth(a != 0 && b != 0);
    case Op::Or: return std::isnan(a) || std::isnan(b) ? kNaN : truth(a != 0 || b != 0);
    case Op::Where:
        if (std::isnan(a)) return kNaN;
        return a != 0 ? b : c;
    default: break;
    }
    throw std::logic_error("reference: not an element-wise operator: " + std::string(fj::op_name(op)));
}

class Evaluator {
public:
    Evaluator(const Inputs& inputs, std::int64_t rows, std::int64_t cols)
        : inputs_(inputs), rows_(rows), cols_(cols) {}

    const Values& eval(const fj::Node* root) {
        if (!root) throw std::invalid_argument("reference: empty expression");
        // Evaluate in dependency order (iteratively: generated expressions can nest deeply).
        for (const fj::Node* n : fj::topo_order({root}))
            if (!memo_.count(n)) memo_.emplace(n, compute(n));
        return memo_.at(root);
    }

private:
    std::size_t cells() const { return static_cast<std::size_t>(rows_ * cols_); }
    std::size_t at(std::int64_t t, std::int64_t j) const { return static_cast<std::size_t>(t * cols_ + j); }

    Values compute(const fj::Node* n) {
        using fj::Op;
        const fj::OpInfo& info = fj::op_info(n->op);
        Values out(cells(), kNaN);
        switch (info.kind) {
        case fj::OpKind::Leaf:
            if (n->op == Op::Const) {
                std::fill(out.begin(), out.end(), n->value);
            } else {
                auto it = inputs_.find(n->name);
                if (it == inputs_.end()) throw std::invalid_argument("reference: missing input " + n->name);
                if (it->second.size() != cells())
                    throw std::invalid_argument("reference: input " + n->name + " has the wrong size");
                out = it->second;
            }
            return out;
        case fj::OpKind::Elementwise: {
            const Values* a = &memo_.at(n->args[0]);
            const Values* b = info.arity > 1 ? &memo_.at(n->args[1]) : a;
            const Values* c = info.arity > 2 ? &memo_.at(n->args[2]) : a;
            for (std::size_t i = 0; i < cells(); ++i) out[i] = elementwise(n->op, (*a)[i], (*b)[i], (*c)[i]);
            return out;
        }
        case fj::OpKind::Lag: {
            const Values& x = memo_.at(n->args[0]);
            for (std::int64_t t = n->d; t < rows_; ++t)
                for (std::int64_t j = 0; j < cols_; ++j) out[at(t, j)] = x[at(t - n->d, j)];
            return out;
        }
        case fj::OpKind::Window: {
            const Values& x = memo_.at(n->args[0]);
            Values rows(static_cast<std::size_t>(n->d));
            for (std::int64_t j = 0; j < cols_; ++j)
                for (std::int64_t t = 0; t < rows_; ++t) {
                    // The window's d rows, oldest first; rows before the panel's first are missing.
                    for (std::int64_t i = 0; i < n->d; ++i) {
                        const std::int64_t s = t - n->d + 1 + i;
                        rows[static_cast<std::size_t>(i)] = s < 0 ? kNaN : x[at(s, j)];
                    }
                    out[at(t, j)] = window_reduce_rows(n->op, rows, n->min_periods, n->value);
                }
            return out;
        }
        case fj::OpKind::PairWindow: {
            const Values& x = memo_.at(n->args[0]);
            const Values& y = memo_.at(n->args[1]);
            Values xs, ys;
            for (std::int64_t j = 0; j < cols_; ++j)
                for (std::int64_t t = 0; t < rows_; ++t) {
                    xs.clear();
                    ys.clear();
                    for (std::int64_t s = std::max<std::int64_t>(0, t - n->d + 1); s <= t; ++s)
                        if (!std::isnan(x[at(s, j)]) && !std::isnan(y[at(s, j)])) {
                            xs.push_back(x[at(s, j)]);
                            ys.push_back(y[at(s, j)]);
                        }
                    out[at(t, j)] = pair_window_reduce(n->op, xs, ys, n->min_periods);
                }
            return out;
        }
        case fj::OpKind::Recursive: {
            const Values& x = memo_.at(n->args[0]);
            Values column(static_cast<std::size_t>(rows_));
            for (std::int64_t j = 0; j < cols_; ++j) {
                for (std::int64_t t = 0; t < rows_; ++t) column[static_cast<std::size_t>(t)] = x[at(t, j)];
                const Values e = ema_column(column, n->value);
                for (std::int64_t t = 0; t < rows_; ++t) out[at(t, j)] = e[static_cast<std::size_t>(t)];
            }
            return out;
        }
        case fj::OpKind::CrossSection: {
            const Values& x = memo_.at(n->args[0]);
            const Values* g = info.arity > 1 ? &memo_.at(n->args[1]) : nullptr;
            const fj::Op base = n->op == Op::GroupRank         ? Op::Rank
                                : n->op == Op::GroupZScore     ? Op::ZScore
                                : n->op == Op::GroupNeutralize ? Op::Demean
                                                               : n->op;
            std::vector<bool> done(static_cast<std::size_t>(cols_));
            for (std::int64_t t = 0; t < rows_; ++t) {
                std::fill(done.begin(), done.end(), false);
                for (std::int64_t j = 0; j < cols_; ++j) {
                    // Column j starts a group unless it is missing, has no group or joined an earlier one.
                    if (done[static_cast<std::size_t>(j)] || std::isnan(x[at(t, j)])) continue;
                    if (g && std::isnan((*g)[at(t, j)])) continue;
                    std::vector<std::int64_t> members;
                    Values values;
                    for (std::int64_t k = j; k < cols_; ++k) {
                        if (std::isnan(x[at(t, k)])) continue;
                        if (g && !((*g)[at(t, k)] == (*g)[at(t, j)])) continue;
                        members.push_back(k);
                        values.push_back(x[at(t, k)]);
                        done[static_cast<std::size_t>(k)] = true;
                    }
                    const Values r = cross_section_reduce(base, values);
                    for (std::size_t i = 0; i < members.size(); ++i) out[at(t, members[i])] = r[i];
                }
            }
            return out;
        }
        }
        throw std::logic_error("reference: unknown operator kind");
    }

    const Inputs& inputs_;
    std::int64_t rows_, cols_;
    std::unordered_map<const fj::Node*, Values> memo_;
};

}  // namespace

double window_reduce(fj::Op op, const std::vector<double>& v, int min_periods) {
    using fj::Op;
    const std::size_t n = v.size();
    if (op == Op::WCount) return static_cast<double>(n);  // count is never NaN
    if (n < static_cast<std::size_t>(min_periods)) return kNaN;
    switch (op) {
    case Op::WSum: return static_cast<double>(sum_of(v));  // empty window (min_periods 0): 0
    case Op::WMean: return n == 0 ? kNaN : static_cast<double>(mean_of(v));
    case Op::WVar:
    case Op::WStd: {
        if (n < 2) return kNaN;
        if (all_equal(v)) return 0.0;  // exactly 0 for a constant window
        const long double var = variance_of(v);
        return static_cast<double>(op == Op::WVar ? var : std::sqrt(var));
    }
    case Op::WMin: return n == 0 ? kNaN : *std::min_element(v.begin(), v.end());
    case Op::WMax: return n == 0 ? kNaN : *std::max_element(v.begin(), v.end());
    default: break;
    }
    throw std::logic_error("reference: not a window operator: " + std::string(fj::op_name(op)));
}

double pair_window_reduce(fj::Op op, const std::vector<double>& xs, const std::vector<double>& ys, int min_periods) {
    using fj::Op;
    if (xs.size() != ys.size()) throw std::logic_error("reference: pair window of unequal sizes");
    const std::size_t n = xs.size();
    if (n < 2 || n < static_cast<std::size_t>(min_periods)) return kNaN;
    const bool constant = all_equal(xs) || all_equal(ys);
    switch (op) {
    case Op::WCov:
        if (constant) return 0.0;
        return static_cast<double>(comoment_of(xs, ys) / static_cast<long double>(n - 1));
    case Op::WCorr: {
        if (constant) return kNaN;  // a zero variance: correlation undefined
        const long double mx = mean_of(xs), my = mean_of(ys);
        long double sxx = 0, syy = 0, sxy = 0;
        for (std::size_t i = 0; i < n; ++i) {
            sxx += (xs[i] - mx) * (xs[i] - mx);
            syy += (ys[i] - my) * (ys[i] - my);
            sxy += (xs[i] - mx) * (ys[i] - my);
        }
        // cov / sqrt(vx * vy): the (n - 1) factors cancel.
        const long double r = sxy / std::sqrt(sxx * syy);
        return static_cast<double>(std::clamp<long double>(r, -1.0L, 1.0L));
    }
    default: break;
    }
    throw std::logic_error("reference: not a pair window operator: " + std::string(fj::op_name(op)));
}

double window_reduce_rows(fj::Op op, const std::vector<double>& rows, int min_periods, double value) {
    using fj::Op;
    Values valid;
    for (double x : rows)
        if (!std::isnan(x)) valid.push_back(x);
    const std::size_t n = valid.size(), d = rows.size();
    auto position = [](std::size_t i) { return static_cast<double>(i + 1); };  // 1 = the oldest row
    switch (op) {
    case Op::WArgMin:
    case Op::WArgMax: {
        if (n == 0 || n < static_cast<std::size_t>(min_periods)) return kNaN;
        std::size_t best = d;
        for (std::size_t i = 0; i < d; ++i) {
            if (std::isnan(rows[i])) continue;
            // Strictly better only: of equal extremes the oldest stays.
            if (best == d || (op == Op::WArgMax ? rows[i] > rows[best] : rows[i] < rows[best])) best = i;
        }
        return position(best);
    }
    case Op::WTsRank: {
        const double newest = rows.back();
        if (std::isnan(newest) || n < static_cast<std::size_t>(min_periods)) return kNaN;
        std::size_t less = 0, equal = 0;
        for (double u : valid) {
            less += u < newest;
            equal += u == newest;
        }
        return (static_cast<double>(less) + (static_cast<double>(equal) + 1.0) / 2.0) / static_cast<double>(n);
    }
    case Op::WProduct: {
        if (n < static_cast<std::size_t>(min_periods)) return kNaN;
        long double p = 1;  // of no values (min_periods 0): 1
        for (double u : valid) p *= u;
        return static_cast<double>(p);
    }
    case Op::WDecayLinear: {
        if (n == 0 || n < static_cast<std::size_t>(min_periods)) return kNaN;
        long double num = 0, den = 0;
        for (std::size_t i = 0; i < d; ++i) {
            if (std::isnan(rows[i])) continue;
            num += static_cast<long double>(position(i)) * rows[i];
            den += position(i);
        }
        return static_cast<double>(num / den);
    }
    case Op::WSkew:
    case Op::WKurt: {
        // pandas' bias-corrected skewness and excess kurtosis, from two-pass central moments; a constant window
        // gives 0 and -3 (pandas forces them); any infinity NaN; central sums of cubes (fourth powers) beyond
        // float64's range NaN, as the float64 sums that hold them overflow.
        const bool skew = op == Op::WSkew;
        const std::size_t need = skew ? 3 : 4;
        if (n < need || n < static_cast<std::size_t>(min_periods)) return kNaN;
        for (double u : valid)
            if (std::isinf(u)) return kNaN;
        if (all_equal(valid)) return skew ? 0.0 : -3.0;
        const long double m = mean_of(valid);
        long double m2 = 0, m3 = 0, m4 = 0;
        for (double u : valid) {
            const long double e = u - m;
            m2 += e * e;
            m3 += e * e * e;
            m4 += e * e * e * e;
        }
        const long double big = std::numeric_limits<double>::max();
        if (m2 > big || (skew ? std::fabs(m3) : m4) > big) return kNaN;
        const long double nn = static_cast<long double>(n);
        if (skew) return static_cast<double>(nn * std::sqrt(nn - 1) / (nn - 2) * m3 / (m2 * std::sqrt(m2)));
        const long double k = (nn * nn - 1) * nn * m4 / (m2 * m2) - 3 * (nn - 1) * (nn - 1);
        return static_cast<double>(k / ((nn - 2) * (nn - 3)));
    }
    case Op::WMedian:
    case Op::WQuantile: {
        // numpy / pandas "linear": position q (n - 1) in the sorted values, interpolated between its floor and
        // the next; exactly the value where the position is whole or the two are equal.
        if (n == 0 || n < static_cast<std::size_t>(min_periods)) return kNaN;
        Values v = valid;
        std::sort(v.begin(), v.end());
        const double q = op == Op::WMedian ? 0.5 : value;
        const double pos = q * static_cast<double>(n - 1);
        const double lo = std::floor(pos), frac = pos - lo;
        const auto i = static_cast<std::size_t>(lo);
        const double a = v[i], b = i + 1 < n ? v[i + 1] : a;
        if (frac == 0 || a == b) return a;
        return a + frac * (b - a);
    }
    case Op::WSlope:
    case Op::WRSquare:
    case Op::WResid: {
        // Least squares of the valid values on their positions 1 .. d, two passes.
        if (n < 2 || n < static_cast<std::size_t>(min_periods)) return kNaN;
        for (double u : valid)
            if (std::isinf(u)) return kNaN;
        const bool constant = all_equal(valid);
        if (op == Op::WResid && std::isnan(rows.back())) return kNaN;
        if (constant) return op == Op::WRSquare ? kNaN : 0.0;
        long double mj = 0;
        for (std::size_t i = 0; i < d; ++i)
            if (!std::isnan(rows[i])) mj += position(i);
        mj /= static_cast<long double>(n);
        const long double my = mean_of(valid);
        long double sjj = 0, sjy = 0, syy = 0;
        for (std::size_t i = 0; i < d; ++i) {
            if (std::isnan(rows[i])) continue;
            const long double ej = position(i) - mj, ey = rows[i] - my;
            sjj += ej * ej;
            sjy += ej * ey;
            syy += ey * ey;
        }
        const long double slope = sjy / sjj;
        if (op == Op::WSlope) return static_cast<double>(slope);
        if (op == Op::WRSquare) return static_cast<double>(std::clamp<long double>(sjy * sjy / (sjj * syy), 0.0L, 1.0L));
        return static_cast<double>(rows.back() - (my + slope * (static_cast<long double>(d) - mj)));
    }
    default: return window_reduce(op, valid, min_periods);
    }
}

std::vector<double> ema_column(const std::vector<double>& x, double span) {
    const long double alpha = 2.0L / (static_cast<long double>(span) + 1);
    std::vector<double> out(x.size(), kNaN);
    long double e = 0;
    bool started = false;
    for (std::size_t t = 0; t < x.size(); ++t) {
        if (!std::isnan(x[t])) {
            e = started ? alpha * x[t] + (1 - alpha) * e : x[t];
            started = true;
        }
        if (started) out[t] = static_cast<double>(e);
    }
    return out;
}

std::vector<double> cross_section_reduce(fj::Op op, const std::vector<double>& v) {
    using fj::Op;
    const std::size_t n = v.size();
    std::vector<double> out(n, kNaN);
    if (n == 0) return out;
    switch (op) {
    case Op::Rank:
        // Average-tie rank: the values below, plus the middle of the run of equal values (itself included).
        for (std::size_t i = 0; i < n; ++i) {
            std::size_t less = 0, equal = 0;
            for (double u : v) {
                less += u < v[i];
                equal += u == v[i];
            }
            out[i] = (static_cast<double>(less) + (static_cast<double>(equal) + 1.0) / 2.0) / static_cast<double>(n);
        }
        return out;
    case Op::Demean: {
        if (all_equal(v)) return std::vector<double>(n, 0.0);  // exactly 0, whatever the mean's rounding
        const long double m = mean_of(v);
        for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<double>(v[i] - m);
        return out;
    }
    case Op::ZScore: {
        if (n < 2 || all_equal(v)) return out;  // ddof = 1; a constant group: 0 / 0
        const long double m = mean_of(v), sd = std::sqrt(variance_of(v));
        // Beyond float64's range, the sum of squares overflows: NaN, as var and std of windows.
        if (variance_of(v) * static_cast<long double>(n - 1) > std::numeric_limits<double>::max()) return out;
        for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<double>((v[i] - m) / sd);
        return out;
    }
    case Op::Scale: {
        long double s = 0;
        for (double x : v) s += std::fabs(x);
        for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<double>(v[i] / s);
        return out;
    }
    default: break;
    }
    throw std::logic_error("reference: not a cross-sectional operator: " + std::string(fj::op_name(op)));
}

std::vector<std::vector<double>> reference(const std::vector<fj::Expr>& exprs, const Inputs& inputs,
                                           std::int64_t rows, std::int64_t cols) {
    if (rows < 0 || cols < 0) throw std::invalid_argument("reference: negative shape");
    Evaluator ev(inputs, rows, cols);
    std::vector<std::vector<double>> out;
    for (const fj::Expr& e : exprs) out.push_back(ev.eval(e.node()));
    return out;
}

std::vector<double> reference(const fj::Expr& e, const Inputs& inputs, std::int64_t rows, std::int64_t cols) {
    return reference(std::vector<fj::Expr>{e}, inputs, rows, cols).front();
}

}  // namespace fj::test
