// Formula text to fj::Expr: a hand-written recursive-descent parser, precedence climbing for the
// binary operators. Every node comes from the same builders a C++ user calls, so the result is the
// hash-consed node the builders give, and Expr::str() reads back to the node it came from.
//
// Grammar, lowest precedence first:
//   ternary := or ('?' ternary ':' ternary)?          right associative
//   binary  := '||' < '&&' < '== !=' < '< <= > >=' < '+ -' < '* /'   (all left associative)
//   unary   := ('-' | '+' | '!') unary | power         '-' directly before a number is a negative literal
//   power   := primary ('^' unary)?                     right associative; -x^2 is -(x^2)
//   primary := number | name | name '(' args ')' | '(' ternary ')'
// `window(x, d[, min_periods])` is a call that is only valid as a whole argument of a window reducer.
#include "dsl/parse.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace fj {

namespace {

// Nesting limit (parentheses, calls, unary and '^' chains, '?:' branches). The parser recurses a
// handful of small frames per level; this bound keeps a hostile or generated formula from running
// off the stack and reports a ParseError instead.
constexpr int kMaxDepth = 4000;

enum class Tok : std::uint8_t {
    End, Bad, Number, Ident,
    LParen, RParen, Comma, Question, Colon,
    Plus, Minus, Star, Slash, Caret, Bang,
    Lt, Le, Gt, Ge, EqEq, Ne, AndAnd, OrOr,
};

struct Token {
    Tok kind = Tok::End;
    std::size_t pos = 0, end = 0;  // byte offsets of the token's text
    double value = 0;              // Number
    std::string message;           // Bad: the lexical error
};

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_ident_start(char c) { return is_alpha(c) || c == '_'; }
bool is_ident_char(char c) { return is_alpha(c) || is_digit(c) || c == '_' || c == '.'; }

std::string lower(std::string_view s) {
    std::string r(s);
    for (char& c : r)
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    return r;
}

// The character at s[i] for a message: printable ASCII as is, a UTF-8 sequence whole, else \xNN.
std::string show_char(std::string_view s, std::size_t i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) return std::string(1, static_cast<char>(c));
    if (c >= 0xc0) {
        std::size_t n = 1;
        while (i + n < s.size() && (static_cast<unsigned char>(s[i + n]) & 0xc0) == 0x80 && n < 4) ++n;
        return std::string(s.substr(i, n));
    }
    return fmt::format("\\x{:02x}", c);
}

std::vector<Token> lex(std::string_view s) {
    std::vector<Token> out;
    std::size_t i = 0;
    auto bad = [&](std::size_t pos, std::size_t end, std::string message) {
        Token t;
        t.kind = Tok::Bad;
        t.pos = pos;
        t.end = end;
        t.message = std::move(message);
        out.push_back(std::move(t));
    };
    while (true) {
        while (i < s.size()) {
            const char c = s[i];
            if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
                ++i;
            } else if (c == '#') {
                while (i < s.size() && s[i] != '\n') ++i;
            } else {
                break;
            }
        }
        if (i >= s.size()) break;
        const std::size_t start = i;
        const char c = s[i];
        Token t;
        t.pos = start;
        if (is_digit(c) || (c == '.' && i + 1 < s.size() && is_digit(s[i + 1]))) {
            while (i < s.size() && is_digit(s[i])) ++i;
            if (i < s.size() && s[i] == '.') {
                ++i;
                while (i < s.size() && is_digit(s[i])) ++i;
            }
            if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
                std::size_t j = i + 1;
                if (j < s.size() && (s[j] == '+' || s[j] == '-')) ++j;
                if (j < s.size() && is_digit(s[j])) {
                    i = j;
                    while (i < s.size() && is_digit(s[i])) ++i;
                }
            }
            if (i < s.size() && is_ident_char(s[i])) {  // 12abc, 1.2.3, 1e
                while (i < s.size() && is_ident_char(s[i])) ++i;
                bad(start, i, fmt::format("invalid number '{}'", s.substr(start, i - start)));
                break;
            }
            double v = 0;
            const auto r = std::from_chars(s.data() + start, s.data() + i, v);
            if (r.ec != std::errc() || r.ptr != s.data() + i) {
                bad(start, i, fmt::format("number '{}' is out of range", s.substr(start, i - start)));
                break;
            }
            t.kind = Tok::Number;
            t.value = v;
        } else if (is_ident_start(c)) {
            while (i < s.size() && is_ident_char(s[i])) ++i;
            t.kind = Tok::Ident;
        } else {
            const char n = i + 1 < s.size() ? s[i + 1] : '\0';
            auto two = [&](Tok k) { t.kind = k; i += 2; };
            auto one = [&](Tok k) { t.kind = k; i += 1; };
            switch (c) {
            case '(': one(Tok::LParen); break;
            case ')': one(Tok::RParen); break;
            case ',': one(Tok::Comma); break;
            case '?': one(Tok::Question); break;
            case ':': one(Tok::Colon); break;
            case '+': one(Tok::Plus); break;
            case '-': one(Tok::Minus); break;
            case '*': one(Tok::Star); break;
            case '/': one(Tok::Slash); break;
            case '^': one(Tok::Caret); break;
            case '<': n == '=' ? two(Tok::Le) : one(Tok::Lt); break;
            case '>': n == '=' ? two(Tok::Ge) : one(Tok::Gt); break;
            case '!': n == '=' ? two(Tok::Ne) : one(Tok::Bang); break;
            case '=':
                if (n == '=') two(Tok::EqEq);
                break;
            case '&':
                if (n == '&') two(Tok::AndAnd);
                break;
            case '|':
                if (n == '|') two(Tok::OrOr);
                break;
            default: break;
            }
            if (i == start) {  // nothing matched
                std::string msg = fmt::format("unexpected character '{}'", show_char(s, i));
                if (c == '=') msg += "; did you mean '=='?";
                if (c == '&') msg += "; did you mean '&&'?";
                if (c == '|') msg += "; did you mean '||'?";
                bad(start, start + 1, std::move(msg));
                break;
            }
        }
        t.end = i;
        out.push_back(std::move(t));
    }
    // End sits just after the last token, so "unexpected end" points at the end of the text that
    // was read rather than at trailing blank lines or comments.
    Token end;
    end.kind = Tok::End;
    end.pos = end.end = out.empty() ? 0 : out.back().end;
    out.push_back(std::move(end));
    return out;
}

// Constant folding of constant-only expressions, for window lengths and lags written as
// arithmetic (`10*2`). Same definitions as docs/operators.md; anything that reads an input, a window or
// a lag is not a constant.
std::optional<double> eval_const(const Node* n) {
    if (n->op == Op::Const) return n->value;
    if (op_info(n->op).kind != OpKind::Elementwise) return std::nullopt;
    double a[3] = {0, 0, 0};
    for (std::size_t k = 0; k < n->args.size() && k < 3; ++k) {
        const std::optional<double> v = eval_const(n->args[k]);
        if (!v) return std::nullopt;
        a[k] = *v;
    }
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double x = a[0], y = a[1];
    auto sgn = [&](double v) { return std::isnan(v) ? nan : static_cast<double>((v > 0) - (v < 0)); };
    auto truth = [&](bool b) { return b ? 1.0 : 0.0; };
    switch (n->op) {
    case Op::Neg: return -x;
    case Op::Not: return std::isnan(x) ? nan : truth(x == 0);
    case Op::Abs: return std::fabs(x);
    case Op::Sign: return sgn(x);
    case Op::Sqrt: return std::sqrt(x);
    case Op::Exp: return std::exp(x);
    case Op::Log: return std::log(x);
    case Op::Add: return x + y;
    case Op::Sub: return x - y;
    case Op::Mul: return x * y;
    case Op::Div: return x / y;
    case Op::Pow: return std::pow(x, y);
    case Op::SignedPower: return sgn(x) * std::pow(std::fabs(x), y);
    case Op::Min: return std::isnan(x) || std::isnan(y) ? nan : std::min(x, y);
    case Op::Max: return std::isnan(x) || std::isnan(y) ? nan : std::max(x, y);
    case Op::Lt: return truth(x < y);
    case Op::Le: return truth(x <= y);
    case Op::Gt: return truth(x > y);
    case Op::Ge: return truth(x >= y);
    case Op::Eq: return truth(x == y);
    case Op::Ne: return truth(x != y);
    case Op::And: return std::isnan(x) || std::isnan(y) ? nan : truth(x != 0 && y != 0);
    case Op::Or: return std::isnan(x) || std::isnan(y) ? nan : truth(x != 0 || y != 0);
    case Op::Where: return std::isnan(x) ? nan : (x != 0 ? a[1] : a[2]);
    default: return std::nullopt;
    }
}

// ---- the function table ------------------------------------------------------------------------

enum class Fn : std::uint8_t {
    Elementwise,  // abs(x), pow(x, y), where(c, a, b): arity from the op table
    Reducer,      // sum(window(x, d)) and/or sum(x, d)
    PairReducer,  // corr(window(x, d), window(y, d)) and/or correlation(x, y, d)
    MinMax,       // min(window(x, d)), min(x, d) with a number d, min(a, b) element-wise
    Lag,          // delay(x, k)
    Delta,        // delta(x, k)
    CrossSection, // rank(x), scale(x[, a]), group_neutralize(x, g): arity from the op table
    Quantile,     // quantile(window(x, d), q) and quantile(x, d, q)
    Recursive,    // ema(x, span)
};

struct FnSpec {
    std::string_view name;  // lower case; calls match names case-insensitively (Alpha101 writes SignedPower)
    Fn kind;
    Op op;
    bool window_form;  // takes window(...) arguments
    bool alpha_form;   // takes (x, d) / (x, y, d)
};

// Calls other than the element-wise ones, which come from the operator table (op_info: element-wise
// operators without an infix spelling), so a new element-wise operator needs no change here.
constexpr FnSpec kOtherFns[] = {
    {"min", Fn::MinMax, Op::WMin, true, true},
    {"max", Fn::MinMax, Op::WMax, true, true},
    {"sum", Fn::Reducer, Op::WSum, true, true},
    {"mean", Fn::Reducer, Op::WMean, true, true},
    {"count", Fn::Reducer, Op::WCount, true, true},
    {"var", Fn::Reducer, Op::WVar, true, true},
    {"std", Fn::Reducer, Op::WStd, true, true},
    {"corr", Fn::PairReducer, Op::WCorr, true, true},
    {"cov", Fn::PairReducer, Op::WCov, true, true},
    {"argmin", Fn::Reducer, Op::WArgMin, true, true},
    {"argmax", Fn::Reducer, Op::WArgMax, true, true},
    {"ts_rank", Fn::Reducer, Op::WTsRank, true, true},
    {"product", Fn::Reducer, Op::WProduct, true, true},
    {"decay_linear", Fn::Reducer, Op::WDecayLinear, true, true},
    {"skew", Fn::Reducer, Op::WSkew, true, true},
    {"kurt", Fn::Reducer, Op::WKurt, true, true},
    {"median", Fn::Reducer, Op::WMedian, true, true},
    {"quantile", Fn::Quantile, Op::WQuantile, true, true},
    {"slope", Fn::Reducer, Op::WSlope, true, true},
    {"rsquare", Fn::Reducer, Op::WRSquare, true, true},
    {"resid", Fn::Reducer, Op::WResid, true, true},
    {"ema", Fn::Recursive, Op::Ema, false, false},
    // Alpha101 spellings.
    {"ts_sum", Fn::Reducer, Op::WSum, false, true},
    {"ts_mean", Fn::Reducer, Op::WMean, false, true},
    {"sma", Fn::Reducer, Op::WMean, false, true},
    {"stddev", Fn::Reducer, Op::WStd, false, true},
    {"ts_var", Fn::Reducer, Op::WVar, false, true},
    {"ts_count", Fn::Reducer, Op::WCount, false, true},
    {"ts_min", Fn::Reducer, Op::WMin, false, true},
    {"ts_max", Fn::Reducer, Op::WMax, false, true},
    {"ts_argmin", Fn::Reducer, Op::WArgMin, false, true},
    {"ts_argmax", Fn::Reducer, Op::WArgMax, false, true},
    {"ts_product", Fn::Reducer, Op::WProduct, false, true},
    // ts_ spellings of the other time-series reducers, and Qlib's (Med, Resi, EMA; names are case-insensitive).
    {"ts_skew", Fn::Reducer, Op::WSkew, false, true},
    {"ts_kurt", Fn::Reducer, Op::WKurt, false, true},
    {"ts_median", Fn::Reducer, Op::WMedian, false, true},
    {"med", Fn::Reducer, Op::WMedian, false, true},
    {"ts_quantile", Fn::Quantile, Op::WQuantile, false, true},
    {"ts_slope", Fn::Reducer, Op::WSlope, false, true},
    {"ts_rsquare", Fn::Reducer, Op::WRSquare, false, true},
    {"ts_resid", Fn::Reducer, Op::WResid, false, true},
    {"resi", Fn::Reducer, Op::WResid, false, true},
    {"correlation", Fn::PairReducer, Op::WCorr, false, true},
    {"covariance", Fn::PairReducer, Op::WCov, false, true},
    {"delay", Fn::Lag, Op::Delay, false, false},
    {"delta", Fn::Delta, Op::Delay, false, false},
    {"indneutralize", Fn::CrossSection, Op::GroupNeutralize, false, false},
};

// Operators of docs/operators.md and Alpha101 that the DSL does not have yet: a clear error, not "unknown".
// (Empty: every operator of SEMANTICS.md is built. The mechanism stays for the next one.)
constexpr std::array<std::string_view, 0> kNotYet{};

constexpr std::string_view kReducerList =
    "sum, mean, count, var, std, min, max, argmin, argmax, ts_rank, product, decay_linear, skew, kurt, median, "
    "quantile, slope, rsquare, resid, corr, cov";

const std::vector<FnSpec>& functions() {
    static const std::vector<FnSpec> fns = [] {
        std::vector<FnSpec> v;
        for (int i = 0; i < kOpCount; ++i) {
            const OpInfo& info = op_info(static_cast<Op>(i));
            if (info.kind == OpKind::Elementwise && !info.infix) v.push_back({info.name, Fn::Elementwise, info.op, false, false});
            if (info.kind == OpKind::CrossSection) v.push_back({info.name, Fn::CrossSection, info.op, false, false});
        }
        v.insert(v.end(), std::begin(kOtherFns), std::end(kOtherFns));
        return v;
    }();
    return fns;
}

const FnSpec* find_fn(std::string_view lname) {
    for (const FnSpec& f : functions())
        if (f.name == lname) return &f;
    return nullptr;
}

bool not_yet(std::string_view lname) {
    return std::find(std::begin(kNotYet), std::end(kNotYet), lname) != std::end(kNotYet);
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<std::size_t> row(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
        std::size_t diag = row[0];
        row[0] = i;
        for (std::size_t j = 1; j <= b.size(); ++j) {
            const std::size_t up = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
            diag = up;
        }
    }
    return row[b.size()];
}

// "; did you mean 'corr' or 'cov'?" for names within a small edit distance (or containing one
// another), closest first, at most three; empty if nothing is close.
std::string suggestions(std::string_view lname) {
    std::vector<std::pair<std::size_t, std::string_view>> close;
    auto consider = [&](std::string_view cand) {
        const std::size_t d = edit_distance(lname, cand);
        const std::size_t limit = lname.size() <= 3 ? 1 : 2;
        const bool contains = lname.size() >= 3 && cand.size() >= 3 &&
                              (lname.find(cand) != std::string_view::npos ||
                               cand.find(lname) != std::string_view::npos);
        if (d <= limit || contains) close.push_back({d, cand});
    };
    for (const FnSpec& f : functions()) consider(f.name);
    consider("window");
    for (std::string_view n : kNotYet) consider(n);
    std::sort(close.begin(), close.end());
    close.erase(std::unique(close.begin(), close.end()), close.end());
    if (close.size() > 3) close.resize(3);
    if (close.empty()) return "";
    std::string s = "; did you mean ";
    for (std::size_t k = 0; k < close.size(); ++k) {
        if (k > 0) s += k + 1 == close.size() ? " or " : ", ";
        s += fmt::format("'{}'", close[k].second);
    }
    return s + "?";
}

// "sum: window length ..." from a builder, reworded with the name as the formula spelled it.
std::string respell(const std::string& msg, std::string_view canonical, std::string_view spelling) {
    if (spelling != canonical && msg.size() > canonical.size() && msg.compare(0, canonical.size(), canonical) == 0 &&
        msg[canonical.size()] == ':')
        return std::string(spelling) + msg.substr(canonical.size());
    return msg;
}

// ---- the parser --------------------------------------------------------------------------------

struct WindowArg {
    Window w;
    std::size_t d_pos = 0;   // where the length argument starts
    std::size_t mp_pos = 0;  // where min_periods starts (d_pos when not given)
};

struct Arg {
    Expr e;                         // the argument, unless it is a window(...)
    std::optional<WindowArg> win;   // window(x, d[, min_periods])
    std::size_t pos = 0, end = 0;   // source span
};

class Parser {
public:
    Parser(std::string_view src, const ParseOptions& options) : src_(src), options_(options), toks_(lex(src)) {}

    Expr run() {
        if (toks_.front().kind == Tok::End) fail(0, "empty formula: expected an expression");
        Expr e = parse_ternary();
        const Token& t = peek();
        if (t.kind == Tok::End) return e;
        if (t.kind == Tok::RParen) fail(t.pos, "unmatched ')'");
        unexpected(t, "an operator or the end of the formula");
    }

private:
    std::string_view src_;
    ParseOptions options_;
    std::vector<Token> toks_;
    std::size_t i_ = 0;
    int depth_ = 0;

    struct DepthGuard {
        Parser& p;
        DepthGuard(Parser& parser, std::size_t pos) : p(parser) {
            if (++p.depth_ > kMaxDepth)
                p.fail(pos, fmt::format("formula nests too deeply (more than {} levels of parentheses, calls and "
                                        "operators)",
                                        kMaxDepth));
        }
        ~DepthGuard() { --p.depth_; }
    };

    const Token& peek(std::size_t k = 0) const { return toks_[std::min(i_ + k, toks_.size() - 1)]; }
    std::string_view text(const Token& t) const { return src_.substr(t.pos, t.end - t.pos); }

    // "line 2, column 5" of a byte offset, the column counted in characters (UTF-8 aware).
    std::pair<int, int> line_col(std::size_t pos) const {
        int line = 1, col = 1;
        for (std::size_t k = 0; k < pos && k < src_.size(); ++k) {
            if (src_[k] == '\n') {
                ++line;
                col = 1;
            } else if ((static_cast<unsigned char>(src_[k]) & 0xc0) != 0x80) {
                ++col;
            }
        }
        return {line, col};
    }
    std::string where(std::size_t pos) const {
        const auto [line, col] = line_col(pos);
        return fmt::format("line {}, column {}", line, col);
    }

    [[noreturn]] void fail(std::size_t pos, const std::string& message) const {
        pos = std::min(pos, src_.size());
        const auto [line, col] = line_col(pos);
        std::size_t begin = 0;
        if (pos > 0) {
            const std::size_t nl = src_.rfind('\n', pos - 1);
            if (nl != std::string_view::npos) begin = nl + 1;
        }
        std::size_t end = src_.find('\n', pos);
        if (end == std::string_view::npos) end = src_.size();
        while (end > pos && src_[end - 1] == '\r') --end;
        // Very long lines (generated formulas) are shown as an excerpt around the column.
        constexpr std::size_t kContext = 80;
        std::string prefix, suffix;
        if (pos - begin > kContext) {
            begin = pos - kContext;
            while (begin < pos && (static_cast<unsigned char>(src_[begin]) & 0xc0) == 0x80) ++begin;
            prefix = "...";
        }
        if (end > pos && end - pos > kContext) {
            end = pos + kContext;
            while (end > pos && (static_cast<unsigned char>(src_[end]) & 0xc0) == 0x80) --end;
            suffix = "...";
        }
        std::string caret(prefix.size(), ' ');
        for (std::size_t k = begin; k < pos; ++k) {
            const auto c = static_cast<unsigned char>(src_[k]);
            if ((c & 0xc0) == 0x80) continue;
            caret += c == '\t' ? '\t' : ' ';
        }
        const std::string shown = prefix + std::string(src_.substr(begin, end - begin)) + suffix;
        throw ParseError(fmt::format("line {}, column {}: {}\n{}\n{}^", line, col, message, shown, caret), line, col);
    }

    std::string describe(const Token& t) const {
        switch (t.kind) {
        case Tok::End: return "the end of the formula";
        case Tok::Number: return fmt::format("number '{}'", text(t));
        case Tok::Ident: return fmt::format("name '{}'", text(t));
        default: return fmt::format("'{}'", text(t));
        }
    }

    [[noreturn]] void unexpected(const Token& t, std::string_view expected) const {
        if (t.kind == Tok::Bad) fail(t.pos, t.message);
        if (t.kind == Tok::End) fail(t.pos, fmt::format("unexpected end of formula: expected {}", expected));
        fail(t.pos, fmt::format("expected {}, got {}", expected, describe(t)));
    }

    // The source text of an argument, for messages: whitespace runs collapsed, long text cut.
    std::string snippet(const Arg& a) const {
        std::string s;
        for (char c : src_.substr(a.pos, a.end - a.pos)) {
            const bool space = c == ' ' || c == '\t' || c == '\n' || c == '\r';
            if (space) {
                if (!s.empty() && s.back() != ' ') s += ' ';
            } else {
                s += c;
            }
        }
        if (s.size() > 40) s = s.substr(0, 37) + "...";
        return s;
    }

    // ---- expressions ----

    // The functions on the recursive path (ternary, binary, unary, power, primary, call, args) keep
    // their frames small, with messages built in out-of-line helpers, so deep nesting is cheap.
    Expr parse_ternary() {
        DepthGuard guard(*this, peek().pos);
        Expr cond = parse_binary(1);
        if (peek().kind != Tok::Question) return cond;
        return parse_conditional(cond);
    }

    // After `cond`, at '?': the rest of `cond ? a : b` (right associative).
    Expr parse_conditional(Expr cond) {
        const std::size_t q = peek().pos;
        ++i_;
        Expr a = parse_ternary();
        if (peek().kind != Tok::Colon) fail_missing(q, "':' for the '?'", "");
        ++i_;
        Expr b = parse_ternary();
        return make(Op::Where, {cond, a, b});
    }

    // At a token that should have closed what `open` opened: "missing ')'" at the end of the
    // formula, "expected ..., got X" before anything else.
    [[noreturn, gnu::noinline, gnu::cold]] void fail_missing(std::size_t open, std::string_view what,
                                                             std::string_view alternative) const {
        if (peek().kind == Tok::End)
            fail(peek().pos, fmt::format("unexpected end of formula: missing {} at {}", what, where(open)));
        unexpected(peek(), fmt::format("{}{} at {}", alternative, what, where(open)));
    }

    [[gnu::noinline]] static Expr build(Op op, Expr a) { return make(op, {a}); }
    [[gnu::noinline]] static Expr build(Op op, Expr a, Expr b) { return make(op, {a, b}); }

    static int precedence(Tok k) {
        switch (k) {
        case Tok::OrOr: return 1;
        case Tok::AndAnd: return 2;
        case Tok::EqEq: case Tok::Ne: return 3;
        case Tok::Lt: case Tok::Le: case Tok::Gt: case Tok::Ge: return 4;
        case Tok::Plus: case Tok::Minus: return 5;
        case Tok::Star: case Tok::Slash: return 6;
        default: return 0;
        }
    }
    static Op binary_op(Tok k) {
        switch (k) {
        case Tok::OrOr: return Op::Or;
        case Tok::AndAnd: return Op::And;
        case Tok::EqEq: return Op::Eq;
        case Tok::Ne: return Op::Ne;
        case Tok::Lt: return Op::Lt;
        case Tok::Le: return Op::Le;
        case Tok::Gt: return Op::Gt;
        case Tok::Ge: return Op::Ge;
        case Tok::Plus: return Op::Add;
        case Tok::Minus: return Op::Sub;
        case Tok::Star: return Op::Mul;
        default: return Op::Div;
        }
    }

    // Precedence climbing: a loop for left associativity, recursion only to a higher level.
    Expr parse_binary(int min_prec) {
        Expr lhs = parse_unary();
        while (true) {
            const Tok k = peek().kind;
            const int prec = precedence(k);
            if (prec == 0 || prec < min_prec) return lhs;
            ++i_;
            Expr rhs = parse_binary(prec + 1);
            lhs = build(binary_op(k), lhs, rhs);
        }
    }

    Expr parse_unary() {
        const Token& t = peek();
        switch (t.kind) {
        case Tok::Minus: {
            // A minus directly before a number is a negative literal, as in C++ (-1 * x), and as
            // Expr::str() prints negative constants; -2^2 is still -(2^2).
            if (peek(1).kind == Tok::Number && peek(2).kind != Tok::Caret) {
                const double v = peek(1).value;
                i_ += 2;
                return constant(-v);
            }
            DepthGuard guard(*this, t.pos);
            ++i_;
            return build(Op::Neg, parse_unary());
        }
        case Tok::Plus: {
            DepthGuard guard(*this, t.pos);
            ++i_;
            return parse_unary();
        }
        case Tok::Bang: {
            DepthGuard guard(*this, t.pos);
            ++i_;
            return build(Op::Not, parse_unary());
        }
        default: return parse_power();
        }
    }

    Expr parse_power() {
        Expr base = parse_primary();
        if (peek().kind != Tok::Caret) return base;
        DepthGuard guard(*this, peek().pos);
        ++i_;
        Expr exponent = parse_unary();
        return build(Op::Pow, base, exponent);
    }

    // Expr::str() prints NaN and infinities as (0/0), (1/0) and (-1/0), without spaces; those exact
    // texts read back as the constants (a division the printer writes as "(0 / 0)").
    [[gnu::noinline]] std::optional<Expr> special_constant() {
        const std::string_view rest = src_.substr(peek().pos);
        struct Special {
            std::string_view text;
            double value;
            std::size_t tokens;
        };
        const Special specials[] = {
            {"(0/0)", std::numeric_limits<double>::quiet_NaN(), 5},
            {"(1/0)", std::numeric_limits<double>::infinity(), 5},
            {"(-1/0)", -std::numeric_limits<double>::infinity(), 6},
        };
        for (const Special& s : specials) {
            if (rest.substr(0, s.text.size()) != s.text) continue;
            if (peek(s.tokens - 1).end != peek().pos + s.text.size()) continue;
            i_ += s.tokens;
            return constant(s.value);
        }
        return std::nullopt;
    }

    Expr parse_primary() {
        const Token& t = peek();
        switch (t.kind) {
        case Tok::Number: ++i_; return constant(t.value);
        case Tok::Ident:
            if (peek(1).kind == Tok::LParen) return parse_call();
            return parse_name();
        case Tok::LParen: {
            if (std::optional<Expr> c = special_constant()) return *c;
            const std::size_t open = t.pos;
            ++i_;
            Expr e = parse_ternary();
            if (peek().kind != Tok::RParen) fail_missing(open, "')' to close the '('", "an operator or ");
            ++i_;
            return e;
        }
        default: fail_operand();
        }
    }

    [[noreturn, gnu::noinline, gnu::cold]] void fail_operand() const {
        std::string expected = "an expression";
        if (i_ > 0) expected += fmt::format(" after '{}'", text(toks_[i_ - 1]));
        unexpected(peek(), expected);
    }

    // A name that is not a call: adv{d} or an input.
    [[gnu::noinline]] Expr parse_name() {
        const Token& t = peek();
        const std::string name(text(t));
        ++i_;
        if (name.size() > 3 && name.compare(0, 3, "adv") == 0 &&
            std::all_of(name.begin() + 3, name.end(), [](char c) { return is_digit(c); })) {
            // adv{d}: average daily (share) volume over d days, as Alpha101 uses it.
            const double d = std::strtod(name.c_str() + 3, nullptr);
            if (d < 1 || d > 1e9)
                fail(t.pos, fmt::format("{}: window length must be >= 1, got {}", name, name.substr(3)));
            return make(Op::WMean, {input("volume")}, static_cast<int>(d));
        }
        // IndClass.sector / .industry / .subindustry: the paper's industry classifications name the
        // group-id panels `sector`, `industry` and `subindustry` (indneutralize's second argument), so
        // one data set serves every alpha. Any other level is a typo more likely than a panel.
        constexpr std::string_view kIndClass = "indclass.";
        if (name.size() >= kIndClass.size() && lower(std::string_view(name).substr(0, kIndClass.size())) == kIndClass) {
            const std::string level = lower(std::string_view(name).substr(kIndClass.size()));
            if (level != "sector" && level != "industry" && level != "subindustry")
                fail(t.pos, fmt::format("unknown industry classification '{}': IndClass.sector, IndClass.industry or "
                                        "IndClass.subindustry (the group-id panels sector, industry and "
                                        "subindustry); another group panel goes by its own name",
                                        name));
            return input(level);
        }
        return guarded(t.pos, "input", "input", [&] { return input(name); });
    }

    // ---- calls ----

    // After `name (`: the arguments up to and including the closing ')'.
    std::vector<Arg> parse_args(std::size_t name_index) {
        std::vector<Arg> args;
        if (peek().kind == Tok::RParen) {
            ++i_;
            return args;
        }
        while (true) {
            args.emplace_back();
            parse_arg(args.back());
            const Tok k = peek().kind;
            if (k == Tok::Comma) {
                ++i_;
                continue;
            }
            if (k == Tok::RParen) {
                ++i_;
                return args;
            }
            fail_args(name_index, args.size());
        }
    }

    [[noreturn, gnu::noinline, gnu::cold]] void fail_args(std::size_t name_index, std::size_t n) const {
        const Token& name = toks_[name_index];
        if (peek().kind == Tok::End)
            fail(peek().pos, fmt::format("unexpected end of formula: missing ')' to close {}( at {}", text(name),
                                         where(name.pos)));
        unexpected(peek(), fmt::format("',' or ')' after argument {} of {}", n, text(name)));
    }

    bool at_window_call() const {
        if (peek().kind != Tok::Ident || peek(1).kind != Tok::LParen) return false;
        const std::string_view name = text(peek());
        return name.size() == 6 && lower(name) == "window";
    }

    void parse_arg(Arg& a) {
        a.pos = peek().pos;
        if (at_window_call()) {
            a.win = parse_window();
            const Tok k = peek().kind;
            if (precedence(k) != 0 || k == Tok::Caret || k == Tok::Question) fail_window_in_expression(a.pos);
        } else {
            a.e = parse_ternary();
        }
        a.end = toks_[i_ - 1].end;
    }

    [[noreturn, gnu::noinline, gnu::cold]] void fail_window_in_expression(std::size_t pos) const {
        fail(pos, fmt::format("window() must be a whole argument of a window reducer ({}), not part of an "
                              "expression: reduce it first, e.g. mean(window(x, d))",
                              kReducerList));
    }

    WindowArg parse_window() {
        DepthGuard guard(*this, peek().pos);
        const std::size_t name_index = i_;
        const std::size_t name_pos = peek().pos;
        i_ += 2;
        std::vector<Arg> args = parse_args(name_index);
        if (args.size() < 2 || args.size() > 3)
            fail(name_pos, fmt::format("window takes 2 or 3 arguments, got {}: window(x, d) or "
                                       "window(x, d, min_periods)",
                                       args.size()));
        for (const Arg& a : args)
            if (a.win)
                fail(a.pos, fmt::format("a window cannot be an argument of window(); reduce it first, e.g. "
                                        "window(mean(window(x, d)), d)"));
        WindowArg w{{args[0].e, 0, 0}, args[1].pos, args[1].pos};
        const int d = integer_arg(args[1], "window", "length");
        int mp = -1;
        if (args.size() == 3) {
            w.mp_pos = args[2].pos;
            mp = integer_arg(args[2], "window", "min_periods");
            if (mp < 0) fail(w.mp_pos, fmt::format("window: min_periods must be >= 0, got {}", mp));
        }
        try {
            w.w = window(args[0].e, d, mp);
        } catch (const ExprError& e) {
            fail(d < 1 ? w.d_pos : w.mp_pos, e.what());
        }
        return w;
    }

    // A window length, min_periods or lag: a number or constant expression, floored (or rounded to
    // nearest, ties to even as Python's round) to an integer. Values within 1e-9 of an integer are
    // that integer, so 0.3/0.1 is 3, not 2.
    int integer_arg(const Arg& a, std::string_view fn, std::string_view what) {
        if (a.win) fail(a.pos, fmt::format("{}: the {} must be a number, not a window", fn, what));
        const std::optional<double> v = eval_const(a.e.node());
        if (!v) fail(a.pos, fmt::format("{}: the {} must be a number, got '{}'", fn, what, snippet(a)));
        const double x = *v;
        if (!std::isfinite(x)) fail(a.pos, fmt::format("{}: the {} must be a finite number, got {}", fn, what, x));
        if (std::fabs(x) > 1e9) fail(a.pos, fmt::format("{}: the {} {} is out of range", fn, what, x));
        const double nearest = std::round(x);
        double r;
        if (std::fabs(x - nearest) <= 1e-9 * std::max(1.0, std::fabs(x))) {
            r = nearest;
        } else if (options_.round_windows) {
            r = std::round(x);
            if (std::fabs(x - std::trunc(x)) == 0.5 && std::fmod(r, 2.0) != 0) r -= std::copysign(1.0, x);
        } else {
            r = std::floor(x);
        }
        return static_cast<int>(r);
    }

    // Build with a builder; an ExprError it throws becomes a ParseError at pos.
    template <class F>
    Expr guarded(std::size_t pos, std::string_view canonical, std::string_view spelling, F&& build,
                 std::string_view hint = {}) {
        try {
            return build();
        } catch (const ParseError&) {
            throw;
        } catch (const ExprError& e) {
            fail(pos, respell(e.what(), canonical, spelling) + std::string(hint));
        }
    }

    [[noreturn]] void window_not_allowed(const Arg& a, std::string_view spelling) const {
        // rank is the cross-sectional rank; the rank of a value in its own window is another operator.
        const bool rank = lower(spelling) == "rank";
        fail(a.pos, fmt::format("window() is only valid as the argument of a window reducer ({}), not of {}{}",
                                kReducerList, spelling, rank ? " (the time-series rank is ts_rank(window(x, d)))" : ""));
    }

    // The plain (x, d) / (x, y, d) form of a reducer takes no window() argument: the window form has its own arity.
    void no_windows(const std::vector<Arg>& args, const FnSpec& fn, std::string_view spelling, std::string_view count,
                    const std::string& usage) const {
        for (const Arg& a : args)
            if (a.win) {
                if (fn.window_form) fail(a.pos, fmt::format("{} of {} arguments takes no window: {}", spelling, count, usage));
                window_not_allowed(a, spelling);
            }
    }

    Expr parse_call() {
        DepthGuard guard(*this, peek().pos);
        const std::size_t name_index = i_;
        const FnSpec& fn = lookup(peek());
        i_ += 2;
        std::vector<Arg> args = parse_args(name_index);
        return apply(fn, name_index, args);
    }

    // The function a call names, or the error: window() outside a reducer, not yet supported, unknown.
    [[gnu::noinline]] const FnSpec& lookup(const Token& name) const {
        const std::string lname = lower(text(name));
        if (const FnSpec* fn = find_fn(lname)) return *fn;
        if (lname == "window")
            fail(name.pos, fmt::format("window() is only valid as the argument of a window reducer ({}), e.g. "
                                       "mean(window(x, 20))",
                                       kReducerList));
        if (not_yet(lname)) fail(name.pos, fmt::format("'{}' is not supported yet", text(name)));
        fail(name.pos, fmt::format("unknown function '{}'{}", text(name), suggestions(lname)));
    }

    // rank(x), zscore(x), demean(x), scale(x[, a]); group_neutralize / indneutralize, group_rank,
    // group_zscore (x, g). The paper's group argument IndClass.industry is already the input `industry`
    // (parse_name).
    [[gnu::noinline]] Expr cross_section(const FnSpec& fn, std::size_t name_index, const std::vector<Arg>& args) {
        const std::string sp(text(toks_[name_index]));
        const std::size_t name_pos = toks_[name_index].pos;
        const std::size_t n = args.size();
        const bool grouped = op_info(fn.op).arity == 2;
        for (const Arg& a : args)
            if (a.win) window_not_allowed(a, sp);
        if (fn.op == Op::Scale) {
            if (n != 1 && n != 2)
                fail(name_pos, fmt::format("{} takes 1 or 2 arguments, got {}: {}(x) or {}(x, a)", sp, n, sp, sp));
            return guarded(name_pos, "scale", sp, [&] { return n == 1 ? scale(args[0].e) : scale(args[0].e, args[1].e); });
        }
        const std::size_t want = grouped ? 2 : 1;
        if (n != want)
            fail(name_pos, fmt::format("{} takes {}, got {}: {}", sp, grouped ? "2 arguments" : "1 argument", n,
                                       grouped ? fmt::format("{}(x, g) with g a panel of group ids", sp)
                                               : fmt::format("{}(x)", sp)));
        std::vector<Expr> xs{args[0].e};
        if (grouped) xs.push_back(args[1].e);
        return guarded(name_pos, op_name(fn.op), sp, [&] { return make(fn.op, xs); });
    }

    [[gnu::noinline]] Expr apply(const FnSpec& fn, std::size_t name_index, const std::vector<Arg>& args) {
        const std::string sp(text(toks_[name_index]));
        const std::size_t name_pos = toks_[name_index].pos;
        const std::size_t n = args.size();
        const std::string_view canonical = op_name(fn.op);
        auto arity = [&](std::string_view counts, std::string_view usage) {
            fail(name_pos, fmt::format("{} takes {}, got {}: {}", sp, counts, n, usage));
        };
        auto plain = [&](const Arg& a) {
            if (a.win) window_not_allowed(a, sp);
            return a.e;
        };

        switch (fn.kind) {
        case Fn::Elementwise: {
            const int k = op_info(fn.op).arity;
            if (static_cast<int>(n) != k) {
                const char* usage = k == 1   ? "{}(x)"
                                    : k == 3 ? "{}(c, a, b)"
                                    : fn.op == Op::Pow ? "{}(x, y)"
                                                       : "{}(x, a)";
                arity(fmt::format("{} argument{}", k, k == 1 ? "" : "s"), fmt::format(fmt::runtime(usage), sp));
            }
            std::vector<Expr> xs;
            for (const Arg& a : args) xs.push_back(plain(a));
            return guarded(name_pos, canonical, sp, [&] { return make(fn.op, xs); });
        }
        case Fn::CrossSection: return cross_section(fn, name_index, args);
        case Fn::Lag:
        case Fn::Delta: {
            if (n != 2) arity("2 arguments", fmt::format("{}(x, k)", sp));
            const Expr x = plain(args[0]);
            plain(args[1]);
            const int k = integer_arg(args[1], sp, "lag");
            if (fn.kind == Fn::Lag) return guarded(args[1].pos, canonical, sp, [&] { return delay(x, k); });
            return guarded(args[1].pos, "delta", sp, [&] { return delta(x, k); });
        }
        case Fn::Reducer:
        case Fn::MinMax: {
            const bool minmax = fn.kind == Fn::MinMax;
            const std::string usage =
                minmax ? fmt::format("{0}(window(x, d)), {0}(x, d) with a number d, or {0}(a, b)", sp)
                : fn.window_form ? fmt::format("{0}(window(x, d)) or {0}(x, d)", sp)
                                 : fmt::format("{}(x, d)", sp);
            if (fn.window_form && n == 1) {
                if (!args[0].win)
                    fail(args[0].pos, fmt::format("{} of one argument takes a window, got '{}': {}", sp,
                                                  snippet(args[0]), usage));
                const Window& w = args[0].win->w;
                return guarded(name_pos, canonical, sp, [&] { return make(fn.op, {w.x}, w.d, w.min_periods); });
            }
            if (n != 2) arity(fn.window_form ? "1 or 2 arguments" : "2 arguments", usage);
            no_windows(args, fn, sp, "two", usage);
            const Expr x = args[0].e;
            if (minmax && !eval_const(args[1].e.node())) {
                const Op ew = fn.op == Op::WMin ? Op::Min : Op::Max;
                return make(ew, {x, args[1].e});
            }
            const int d = integer_arg(args[1], sp, "window length");
            const std::string hint =
                minmax ? fmt::format(" ({0}(x, d) with a number d is ts_{0}(x, d))", canonical) : "";
            return guarded(args[1].pos, canonical, sp, [&] { return make(fn.op, {x}, d); }, hint);
        }
        case Fn::Quantile: {
            const std::string usage = fn.window_form ? fmt::format("{0}(window(x, d), q) or {0}(x, d, q)", sp)
                                                     : fmt::format("{}(x, d, q)", sp);
            auto q_of = [&](const Arg& a) {
                if (a.win) fail(a.pos, fmt::format("{}: q must be a number, not a window: {}", sp, usage));
                const std::optional<double> v = eval_const(a.e.node());
                if (!v) fail(a.pos, fmt::format("{}: q must be a number, got '{}'", sp, snippet(a)));
                return *v;
            };
            if (fn.window_form && n == 2 && args[0].win) {
                const Window& w = args[0].win->w;
                const double q = q_of(args[1]);
                return guarded(args[1].pos, canonical, sp, [&] { return quantile(w, q); });
            }
            if (n != 3) arity(fn.window_form ? "2 or 3 arguments" : "3 arguments", usage);
            no_windows(args, fn, sp, "three", usage);
            const int d = integer_arg(args[1], sp, "window length");
            const double q = q_of(args[2]);
            return guarded(args[1].pos, canonical, sp, [&] { return quantile(window(args[0].e, d), q); });
        }
        case Fn::Recursive: {
            if (n != 2) arity("2 arguments", fmt::format("{}(x, span)", sp));
            const Expr x = plain(args[0]);
            plain(args[1]);
            const std::optional<double> span = eval_const(args[1].e.node());
            if (!span) fail(args[1].pos, fmt::format("{}: the span must be a number, got '{}'", sp, snippet(args[1])));
            return guarded(args[1].pos, canonical, sp, [&] { return ema(x, *span); });
        }
        case Fn::PairReducer: {
            const std::string usage = fn.window_form
                                          ? fmt::format("{0}(window(x, d), window(y, d)) or {0}(x, y, d)", sp)
                                          : fmt::format("{}(x, y, d)", sp);
            if (fn.window_form && n == 2) {
                for (const Arg& a : args)
                    if (!a.win)
                        fail(a.pos, fmt::format("{} of two arguments takes two windows, got '{}': {}", sp, snippet(a),
                                                usage));
                const WindowArg& a = *args[0].win;
                const WindowArg& b = *args[1].win;
                return guarded(b.d_pos, canonical, sp, [&] {
                    return fn.op == Op::WCorr ? corr(a.w, b.w) : cov(a.w, b.w);
                });
            }
            if (n != 3) arity(fn.window_form ? "2 or 3 arguments" : "3 arguments", usage);
            no_windows(args, fn, sp, "three", usage);
            const int d = integer_arg(args[2], sp, "window length");
            return guarded(args[2].pos, canonical, sp, [&] { return make(fn.op, {args[0].e, args[1].e}, d); });
        }
        }
        fail(name_pos, "internal error: unhandled function kind");
    }
};

}  // namespace

Expr parse(std::string_view text, const ParseOptions& options) {
    Parser parser(text, options);
    return parser.run();
}

}  // namespace fj
