// fj::parse: formula text to the same hash-consed nodes the C++ builders give, Expr::str() round
// trips, and ParseError messages (line, column, caret).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "dsl/expr.hpp"
#include "dsl/parse.hpp"

namespace {

using fj::Expr;

Expr in(const char* name) { return fj::input(name); }

// parse(text) is the node `want`; on failure the message shows both formulas.
#define CHECK_PARSES_TO(text, want, ...)                                                             \
    do {                                                                                             \
        const Expr want_ = (want);                                                                   \
        Expr got_;                                                                                   \
        REQUIRE_NOTHROW(got_ = fj::parse(text __VA_OPT__(, ) __VA_ARGS__));                          \
        INFO("text: " << (text) << "\n got: " << got_.str() << "\nwant: " << want_.str());           \
        CHECK(got_.same(want_));                                                                     \
    } while (0)

struct Failure {
    bool thrown = false;
    std::string what;
    int line = 0, column = 0;
    std::string message;     // what() up to the first newline, after "line L, column C: "
    std::string shown_line;  // the second line of what()
    std::string caret_line;  // the third line of what()
    std::string at_caret;    // the shown line from the caret's position on
};

Failure parse_failure(std::string_view text, const fj::ParseOptions& options = {}) {
    Failure f;
    try {
        fj::parse(text, options);
    } catch (const fj::ParseError& e) {
        f.thrown = true;
        f.what = e.what();
        f.line = e.line();
        f.column = e.column();
        const std::size_t nl1 = f.what.find('\n');
        const std::size_t nl2 = f.what.find('\n', nl1 + 1);
        const std::string head = f.what.substr(0, nl1);
        const std::size_t colon = head.find(": ");
        f.message = colon == std::string::npos ? head : head.substr(colon + 2);
        f.shown_line = f.what.substr(nl1 + 1, nl2 - nl1 - 1);
        f.caret_line = f.what.substr(nl2 + 1);
        const std::size_t caret = f.caret_line.find('^');
        if (caret != std::string::npos && caret <= f.shown_line.size()) f.at_caret = f.shown_line.substr(caret);
    }
    return f;
}

bool has_input(const Expr& e) { return !fj::input_names({e}).empty(); }

// A small deterministic generator of random expressions, for the round trip.
struct Gen {
    std::uint64_t state;
    explicit Gen(std::uint64_t seed) : state(seed) {}
    std::uint32_t next() {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        return static_cast<std::uint32_t>(state >> 33);
    }
    int below(int n) { return static_cast<int>(next() % static_cast<std::uint32_t>(n)); }

    Expr leaf() {
        static const char* names[] = {"open", "close", "volume", "ind.sector", "x_1", "window", "sum"};
        static const double values[] = {0,       1,        -1,       0.5,      -0.25,   2,       10,
                                        1e-05,   1e+20,    -3.75e-7, 123456789, 0.1 + 0.2, 5e-324,
                                        std::numeric_limits<double>::max(),
                                        std::numeric_limits<double>::quiet_NaN(),
                                        std::numeric_limits<double>::infinity(),
                                        -std::numeric_limits<double>::infinity()};
        if (below(3) > 0) return fj::input(names[below(7)]);
        return fj::constant(values[below(static_cast<int>(std::size(values)))]);
    }

    fj::Window win(int depth, int d) {
        const int mp = below(3) == 0 ? below(d + 1) : -1;
        return fj::window(expr(depth - 1), d, mp);
    }

    Expr expr(int depth) {
        if (depth <= 0 || below(5) == 0) return leaf();
        const int d = 1 + below(30);
        switch (below(16)) {
        case 0: {
            Expr a = expr(depth - 1);
            // -constant prints like a negative constant: see the note in the round-trip test.
            return a.op() == fj::Op::Const ? !a : -a;
        }
        case 1: {
            static const fj::Op ops[] = {fj::Op::Abs, fj::Op::Sign, fj::Op::Sqrt, fj::Op::Exp, fj::Op::Log};
            return fj::make(ops[below(5)], {expr(depth - 1)});
        }
        case 2:
        case 3:
        case 4: {
            static const fj::Op ops[] = {fj::Op::Add, fj::Op::Sub, fj::Op::Mul, fj::Op::Div, fj::Op::Lt,
                                         fj::Op::Le,  fj::Op::Gt,  fj::Op::Ge,  fj::Op::Eq,  fj::Op::Ne,
                                         fj::Op::And, fj::Op::Or,  fj::Op::Pow, fj::Op::SignedPower};
            return fj::make(ops[below(14)], {expr(depth - 1), expr(depth - 1)});
        }
        case 5: {
            // Element-wise min/max whose second argument is constant-only prints like ts_min/ts_max.
            Expr a = expr(depth - 1), b = expr(depth - 1);
            if (!has_input(b)) b = b + fj::input("close");
            return below(2) ? fj::min(a, b) : fj::max(a, b);
        }
        case 6: return fj::where(expr(depth - 1), expr(depth - 1), expr(depth - 1));
        case 7: return fj::delay(expr(depth - 1), below(6));
        case 8: return fj::delta(expr(depth - 1), below(6));
        case 9:
        case 10:
        case 11: {
            static Expr (*const reducers[])(const fj::Window&) = {fj::sum, fj::mean, fj::count, fj::var,
                                                                  fj::std, fj::min,  fj::max};
            return reducers[below(7)](win(depth, d));
        }
        case 12: return fj::corr(win(depth, d), win(depth, d));
        case 13: return fj::cov(win(depth, d), win(depth, d));
        default: return leaf();
        }
    }
};

}  // namespace

TEST_SUITE("parse") {

TEST_CASE("numbers and names") {
    CHECK_PARSES_TO("42", fj::constant(42));
    CHECK_PARSES_TO("1.5", fj::constant(1.5));
    CHECK_PARSES_TO("1e-3", fj::constant(1e-3));
    CHECK_PARSES_TO("2.5E+2", fj::constant(250));
    CHECK_PARSES_TO("2.", fj::constant(2));  // Alpha101 writes SignedPower(x, 2.)
    CHECK_PARSES_TO(".5", fj::constant(0.5));
    CHECK_PARSES_TO("0.1", fj::constant(0.1));
    CHECK_PARSES_TO("close", in("close"));
    CHECK_PARSES_TO("IndClass.industry", in("industry"));  // the paper's group panels: see "the paper's spellings"
    CHECK_PARSES_TO("_x1.y_2", in("_x1.y_2"));
    // A minus directly before a number is a negative constant, as C++'s -1 * x.
    CHECK_PARSES_TO("-1", fj::constant(-1));
    CHECK_PARSES_TO("- 2.5", fj::constant(-2.5));
    CHECK_PARSES_TO("-1 * close", -1.0 * in("close"));
    // The builder folds a negated constant, so the C++ and formula spellings are one node.
    CHECK(fj::parse("-1").same(-fj::constant(1)));
    CHECK_PARSES_TO("-0", fj::constant(0));
    CHECK_PARSES_TO("--1", -fj::constant(-1));
    CHECK_PARSES_TO("-x", -in("x"));
    CHECK_PARSES_TO("+x", in("x"));
    CHECK_PARSES_TO("+1", fj::constant(1));
    // The printer's NaN and infinities.
    CHECK_PARSES_TO("(0/0)", fj::constant(std::numeric_limits<double>::quiet_NaN()));
    CHECK_PARSES_TO("(1/0)", fj::constant(std::numeric_limits<double>::infinity()));
    CHECK_PARSES_TO("(-1/0)", fj::constant(-std::numeric_limits<double>::infinity()));
    CHECK_PARSES_TO("(0 / 0)", fj::constant(0) / fj::constant(0));
    CHECK_PARSES_TO("abs(0/0)", fj::abs(fj::constant(0) / fj::constant(0)));
    CHECK_PARSES_TO("abs((0/0))", fj::abs(fj::constant(std::numeric_limits<double>::quiet_NaN())));
    // The brief's example, and identity of repeated parses.
    CHECK(fj::parse("corr(window(A,20), window(B,20))")
              .same(fj::corr(fj::window(fj::input("A"), 20), fj::window(fj::input("B"), 20))));
    CHECK(fj::parse("a + b").same(fj::parse("a+b")));
    CHECK_FALSE(fj::parse("a + b").same(fj::parse("b + a")));
}

TEST_CASE("operators") {
    const Expr a = in("a"), b = in("b");
    CHECK_PARSES_TO("a + b", a + b);
    CHECK_PARSES_TO("a - b", a - b);
    CHECK_PARSES_TO("a * b", a * b);
    CHECK_PARSES_TO("a / b", a / b);
    CHECK_PARSES_TO("a ^ b", fj::pow(a, b));
    CHECK_PARSES_TO("a < b", a < b);
    CHECK_PARSES_TO("a <= b", a <= b);
    CHECK_PARSES_TO("a > b", a > b);
    CHECK_PARSES_TO("a >= b", a >= b);
    CHECK_PARSES_TO("a == b", a == b);
    CHECK_PARSES_TO("a != b", a != b);
    CHECK_PARSES_TO("a && b", a && b);
    CHECK_PARSES_TO("a || b", a || b);
    CHECK_PARSES_TO("!a", !a);
    CHECK_PARSES_TO("-a", -a);
    CHECK_PARSES_TO("a ? b : 1", fj::where(a, b, 1.0));
    CHECK_PARSES_TO("a<b", a < b);
    CHECK_PARSES_TO("a<=-b", a <= -b);
    CHECK_PARSES_TO("a!=!b", a != !b);
}

TEST_CASE("element-wise functions") {
    const Expr x = in("x"), y = in("y");
    CHECK_PARSES_TO("abs(x)", fj::abs(x));
    CHECK_PARSES_TO("sign(x)", fj::sign(x));
    CHECK_PARSES_TO("sqrt(x)", fj::sqrt(x));
    CHECK_PARSES_TO("exp(x)", fj::exp(x));
    CHECK_PARSES_TO("log(x)", fj::log(x));
    CHECK_PARSES_TO("pow(x, y)", fj::pow(x, y));
    CHECK_PARSES_TO("pow(x, 2)", fj::pow(x, 2.0));
    CHECK_PARSES_TO("signedpower(x, 2)", fj::signedpower(x, 2.0));
    CHECK_PARSES_TO("where(x > 0, x, y)", fj::where(x > 0.0, x, y));
    CHECK_PARSES_TO("min(x, y)", fj::min(x, y));
    CHECK_PARSES_TO("max(x, y)", fj::max(x, y));
    CHECK_PARSES_TO("min(x, y * 2)", fj::min(x, y * 2.0));
    CHECK_PARSES_TO("max(2, x)", fj::max(2.0, x));  // a constant first argument stays element-wise
    CHECK_PARSES_TO("min(x, sum(window(y, 3)))", fj::min(x, fj::sum(fj::window(y, 3))));
    // Function names are case-insensitive, as Alpha101 writes them; input names are not.
    CHECK_PARSES_TO("SignedPower(x, 2.)", fj::signedpower(x, 2.0));
    CHECK_PARSES_TO("Log(X) + ABS(x)", fj::log(in("X")) + fj::abs(x));
}

TEST_CASE("window reducers") {
    const Expr x = in("x"), y = in("y");
    CHECK_PARSES_TO("sum(window(x, 20))", fj::sum(fj::window(x, 20)));
    CHECK_PARSES_TO("mean(window(x, 20))", fj::mean(fj::window(x, 20)));
    CHECK_PARSES_TO("count(window(x, 20))", fj::count(fj::window(x, 20)));
    CHECK_PARSES_TO("count(window(x, 20, 3))", fj::count(fj::window(x, 20)));
    CHECK_PARSES_TO("var(window(x, 20))", fj::var(fj::window(x, 20)));
    CHECK_PARSES_TO("std(window(x, 20))", fj::std(fj::window(x, 20)));
    CHECK_PARSES_TO("min(window(x, 20))", fj::min(fj::window(x, 20)));
    CHECK_PARSES_TO("max(window(x, 20))", fj::max(fj::window(x, 20)));
    CHECK_PARSES_TO("mean(window(x, 20, 5))", fj::mean(fj::window(x, 20, 5)));
    CHECK_FALSE(fj::parse("mean(window(x, 20, 5))").same(fj::mean(fj::window(x, 20))));
    CHECK_PARSES_TO("mean(window(x, 20, 20))", fj::mean(fj::window(x, 20)));
    CHECK_PARSES_TO("corr(window(x, 10), window(y, 10))", fj::corr(fj::window(x, 10), fj::window(y, 10)));
    CHECK_PARSES_TO("cov(window(x, 10), window(y, 10))", fj::cov(fj::window(x, 10), fj::window(y, 10)));
    CHECK_PARSES_TO("corr(window(x, 10, 4), window(y, 10, 7))",
                    fj::corr(fj::window(x, 10, 4), fj::window(y, 10, 7)));
    CHECK_PARSES_TO("corr(x, y, 10)", fj::corr(fj::window(x, 10), fj::window(y, 10)));
    CHECK_PARSES_TO("cov(x, y, 10)", fj::cov(fj::window(x, 10), fj::window(y, 10)));
    CHECK_PARSES_TO("Mean(Window(x, 5))", fj::mean(fj::window(x, 5)));
    // Windows nest, and window expressions can be anything.
    CHECK_PARSES_TO("std(window(mean(window(x + y, 5)), 10))",
                    fj::std(fj::window(fj::mean(fj::window(x + y, 5)), 10)));
    CHECK_PARSES_TO("delay(x, 3)", fj::delay(x, 3));
    CHECK_PARSES_TO("delay(x, 0)", x);
    CHECK_PARSES_TO("delta(x, 3)", fj::delta(x, 3));
    CHECK_PARSES_TO("delta(x, 1)", x - fj::delay(x, 1));
    // An input may be called like a function name.
    CHECK_PARSES_TO("sum(window(window, 5)) + sum", fj::sum(fj::window(in("window"), 5)) + in("sum"));
}

TEST_CASE("Alpha101 spellings") {
    const Expr x = in("x"), y = in("y");
    CHECK_PARSES_TO("ts_sum(x, 5)", fj::sum(fj::window(x, 5)));
    CHECK_PARSES_TO("sum(x, 5)", fj::sum(fj::window(x, 5)));
    CHECK_PARSES_TO("ts_mean(x, 5)", fj::mean(fj::window(x, 5)));
    CHECK_PARSES_TO("sma(x, 5)", fj::mean(fj::window(x, 5)));
    CHECK_PARSES_TO("mean(x, 5)", fj::mean(fj::window(x, 5)));
    CHECK_PARSES_TO("stddev(x, 5)", fj::std(fj::window(x, 5)));
    CHECK_PARSES_TO("std(x, 5)", fj::std(fj::window(x, 5)));
    CHECK_PARSES_TO("ts_var(x, 5)", fj::var(fj::window(x, 5)));
    CHECK_PARSES_TO("var(x, 5)", fj::var(fj::window(x, 5)));
    CHECK_PARSES_TO("ts_count(x, 5)", fj::count(fj::window(x, 5)));
    CHECK_PARSES_TO("count(x, 5)", fj::count(fj::window(x, 5)));
    CHECK_PARSES_TO("correlation(x, y, 5)", fj::corr(fj::window(x, 5), fj::window(y, 5)));
    CHECK_PARSES_TO("covariance(x, y, 5)", fj::cov(fj::window(x, 5), fj::window(y, 5)));
    CHECK_PARSES_TO("ts_min(x, 5)", fj::min(fj::window(x, 5)));
    CHECK_PARSES_TO("ts_max(x, 5)", fj::max(fj::window(x, 5)));
    CHECK_PARSES_TO("min(x, 5)", fj::min(fj::window(x, 5)));
    CHECK_PARSES_TO("max(x, 5)", fj::max(fj::window(x, 5)));
    CHECK_PARSES_TO("min(x, 10*2)", fj::min(fj::window(x, 20)));
    CHECK_PARSES_TO("max(x, (3 + 1) / 2)", fj::max(fj::window(x, 2)));
    CHECK_PARSES_TO("min(y, 1)", fj::min(fj::window(y, 1)));
    CHECK_PARSES_TO("adv20", fj::mean(fj::window(in("volume"), 20)));
    CHECK_PARSES_TO("adv180 / adv20",
                    fj::mean(fj::window(in("volume"), 180)) / fj::mean(fj::window(in("volume"), 20)));
    CHECK_PARSES_TO("advx", in("advx"));
    CHECK_PARSES_TO("adv", in("adv"));
    CHECK_PARSES_TO("Ts_Max(x, 5)", fj::max(fj::window(x, 5)));
    // Alpha#12, #101 (without rank) and a piece of #1.
    CHECK_PARSES_TO("(sign(delta(volume, 1)) * (-1 * delta(close, 1)))",
                    fj::sign(fj::delta(in("volume"), 1)) * (-1.0 * fj::delta(in("close"), 1)));
    CHECK_PARSES_TO("((close - open) / ((high - low) + .001))",
                    (in("close") - in("open")) / ((in("high") - in("low")) + 0.001));
    CHECK_PARSES_TO("((returns < 0) ? stddev(returns, 20) : close)",
                    fj::where(in("returns") < 0.0, fj::std(fj::window(in("returns"), 20)), in("close")));
}

TEST_CASE("Alpha101: the paper's spellings") {
    const Expr x = in("x"), y = in("y");
    // Function names in the paper's capitalisation (names are case-insensitive; inputs are not).
    CHECK_PARSES_TO("Sum(x, 5)", fj::sum(fj::window(x, 5)));
    CHECK_PARSES_TO("StdDev(x, 5)", fj::std(fj::window(x, 5)));
    CHECK_PARSES_TO("Correlation(x, y, 5)", fj::corr(fj::window(x, 5), fj::window(y, 5)));
    CHECK_PARSES_TO("Covariance(x, y, 5)", fj::cov(fj::window(x, 5), fj::window(y, 5)));
    CHECK_PARSES_TO("Delta(x, 3) + Delay(x, 2)", fj::delta(x, 3) + fj::delay(x, 2));
    CHECK_PARSES_TO("Log(x) * Sign(x) * Abs(x)", fj::log(x) * fj::sign(x) * fj::abs(x));
    CHECK_PARSES_TO("Ts_Min(x, 5) - Ts_Max(x, 5)", fj::min(fj::window(x, 5)) - fj::max(fj::window(x, 5)));
    CHECK_PARSES_TO("Min(x, 5)", fj::min(fj::window(x, 5)));
    CHECK_PARSES_TO("Max(x, y)", fj::max(x, y));
    CHECK_PARSES_TO("SIGNEDPOWER(x, y)", fj::signedpower(x, y));  // a panel exponent (#84)

    // IndClass.sector / .industry / .subindustry name the group-id panels of those names.
    CHECK_PARSES_TO("IndClass.sector", in("sector"));
    CHECK_PARSES_TO("IndClass.industry + IndClass.subindustry", in("industry") + in("subindustry"));
    CHECK_PARSES_TO("indclass.Industry", in("industry"));
    CHECK_PARSES_TO("IndClassX.sector", in("IndClassX.sector"));  // not the prefix: an ordinary input
    Failure f = parse_failure("x / IndClass.industy");
    CHECK(f.message == "unknown industry classification 'IndClass.industy': IndClass.sector, IndClass.industry or "
                       "IndClass.subindustry (the group-id panels sector, industry and subindustry); another group "
                       "panel goes by its own name");
    CHECK(f.column == 5);
    CHECK(parse_failure("IndClass.").message.find("unknown industry classification 'IndClass.'") == 0);

    // adv{d} for any d: ts_mean(volume, d), share volume.
    CHECK_PARSES_TO("adv5 + adv81", fj::mean(fj::window(in("volume"), 5)) + fj::mean(fj::window(in("volume"), 81)));
    CHECK_PARSES_TO("sum(adv20, 22.4101)", fj::sum(fj::window(fj::mean(fj::window(in("volume"), 20)), 22)));

    // ^ is pow, also with a panel exponent; it binds tighter than * and unary minus, and the paper always
    // brackets its operands: (a^b) * -1, (x^0.5) - vwap.
    CHECK_PARSES_TO("((x * y)^0.5)", fj::pow(x * y, 0.5));
    CHECK_PARSES_TO("(abs(x)^sign(y)) * -1", fj::pow(fj::abs(x), fj::sign(y)) * -1.0);
    CHECK_PARSES_TO("x * y^2", x * fj::pow(y, 2.0));
    CHECK_PARSES_TO("x^y * 2", fj::pow(x, y) * 2.0);
    CHECK_PARSES_TO("-x^y", -fj::pow(x, y));
    CHECK_PARSES_TO("(x^1)", fj::pow(x, 1.0));  // #33 writes ^1: kept as a pow node (pow(x, 1) = x for all x)

    // Comparisons, || and ?: as the paper writes them (#21, #24): 1.0 / 0.0 values, nested conditions.
    CHECK_PARSES_TO("(((1 < (x / y)) || ((x / y) == 1)) ? 1 : (-1 * 1))",
                    fj::where((1.0 < x / y) || (x / y == 1.0), 1.0, fj::constant(-1) * 1.0));
    CHECK_PARSES_TO("((x < 0) ? y : ((y < 0) ? x : (-1 * x)))",
                    fj::where(x < 0.0, y, fj::where(y < 0.0, x, -1.0 * x)));
    CHECK_PARSES_TO("((x < y) * -1)", (x < y) * -1.0);
    CHECK_PARSES_TO("(0 - (1 * x))", 0.0 - 1.0 * x);

    // The paper's fractional windows and lags floor; arithmetic on them too.
    CHECK_PARSES_TO("correlation(x, y, 9.91009)", fj::corr(fj::window(x, 9), fj::window(y, 9)));
    CHECK_PARSES_TO("delta(x, 1.06157)", fj::delta(x, 1));
    CHECK_PARSES_TO("ts_min(x, 2.14593)", fj::min(fj::window(x, 2)));
    CHECK_PARSES_TO("sum(x, 8.6911 * 2)", fj::sum(fj::window(x, 17)));
    CHECK_PARSES_TO("(sum(x, 2) / 2.0)", fj::sum(fj::window(x, 2)) / 2.0);

    // The paper's time-series operators, in its spelling.
    CHECK_PARSES_TO("Ts_ArgMax(x, 5)", fj::argmax(fj::window(x, 5)));
    CHECK_PARSES_TO("Ts_ArgMin(x, 5)", fj::argmin(fj::window(x, 5)));
    CHECK_PARSES_TO("Ts_Rank(x, 5)", fj::ts_rank(fj::window(x, 5)));
    CHECK_PARSES_TO("Decay_linear(x, 5)", fj::decay_linear(fj::window(x, 5)));
    CHECK_PARSES_TO("Product(x, 5)", fj::product(fj::window(x, 5)));
    // The other time-series operators of docs/operators.md, in pandas' and Qlib's spellings too.
    CHECK_PARSES_TO("Skew(x, 5)", fj::skew(fj::window(x, 5)));
    CHECK_PARSES_TO("median(x, 5)", fj::median(fj::window(x, 5)));
    CHECK_PARSES_TO("Med(x, 5)", fj::median(fj::window(x, 5)));
    CHECK_PARSES_TO("Quantile(x, 5, 0.8)", fj::quantile(fj::window(x, 5), 0.8));
    CHECK_PARSES_TO("EMA(x, 5)", fj::ema(x, 5));
    CHECK_PARSES_TO("Resi(x, 5)", fj::resid(fj::window(x, 5)));

    // Bad input in the paper's style.
    CHECK(parse_failure("(x^)").message == "expected an expression after '^', got ')'");
    CHECK(parse_failure("x ? y").message == "unexpected end of formula: missing ':' for the '?' at line 1, column 3");
    CHECK(parse_failure("x | y").message == "unexpected character '|'; did you mean '||'?");
    CHECK(parse_failure("x = y").message == "unexpected character '='; did you mean '=='?");
    CHECK(parse_failure("Correlation(x, y, 0.5)").message == "Correlation: window length must be >= 1, got 0");
}

TEST_CASE("cross-sectional operators: names, Alpha101 spellings, errors") {
    const Expr x = in("x"), y = in("y"), g = in("g");
    CHECK_PARSES_TO("rank(x)", fj::rank(x));
    CHECK_PARSES_TO("Rank(-1 * correlation(x, y, 10))", fj::rank(-1.0 * fj::corr(fj::window(x, 10), fj::window(y, 10))));
    CHECK_PARSES_TO("zscore(x) + demean(y)", fj::zscore(x) + fj::demean(y));
    CHECK_PARSES_TO("scale(x)", fj::scale(x));
    CHECK_PARSES_TO("scale(x, 1)", fj::scale(x));
    CHECK_PARSES_TO("scale(x, 3)", fj::scale(x) * 3.0);
    CHECK_PARSES_TO("Scale(x, y)", fj::scale(x, y));
    CHECK_PARSES_TO("ts_mean(rank(x), 5)", fj::mean(fj::window(fj::rank(x), 5)));
    CHECK_PARSES_TO("group_neutralize(x, g)", fj::group_neutralize(x, g));
    CHECK_PARSES_TO("indneutralize(x, g)", fj::group_neutralize(x, g));
    CHECK_PARSES_TO("group_rank(x, g) - group_zscore(x, g)", fj::group_rank(x, g) - fj::group_zscore(x, g));
    // The paper's spelling: IndClass.industry is the group-id panel `industry`.
    CHECK_PARSES_TO("IndNeutralize(x, IndClass.industry)", fj::group_neutralize(x, in("industry")));
    CHECK_PARSES_TO("indneutralize(x, IndClass.subindustry)", fj::group_neutralize(x, in("subindustry")));
    CHECK_PARSES_TO("IndNeutralize(vwap, IndClass.sector)", fj::group_neutralize(in("vwap"), in("sector")));
    CHECK_PARSES_TO("(rank(ts_max(x, 5)) - 0.5)", fj::rank(fj::max(fj::window(x, 5))) - 0.5);
    // Round trips.
    for (const Expr& e : {fj::rank(x), fj::scale(x, 2.0), fj::group_zscore(fj::delta(x, 1), g),
                          fj::group_neutralize(fj::rank(x), in("industry"))})
        CHECK(fj::parse(e.str()).same(e));

    CHECK(parse_failure("rank(x, 5)").message == "rank takes 1 argument, got 2: rank(x)");
    CHECK(parse_failure("group_rank(x)").message == "group_rank takes 2 arguments, got 1: group_rank(x, g) with g a "
                                                    "panel of group ids");
    CHECK(parse_failure("IndNeutralize(x)").message == "IndNeutralize takes 2 arguments, got 1: IndNeutralize(x, g) "
                                                       "with g a panel of group ids");
    CHECK(parse_failure("scale(x, 1, 2)").message == "scale takes 1 or 2 arguments, got 3: scale(x) or scale(x, a)");
    const Failure w = parse_failure("rank(window(x, 5))");
    CHECK(w.message == "window() is only valid as the argument of a window reducer (sum, mean, count, var, std, min, "
                       "max, argmin, argmax, ts_rank, product, decay_linear, skew, kurt, median, quantile, slope, rsquare, "
                         "resid, corr, cov), not of rank (the time-series "
                       "rank is ts_rank(window(x, d)))");
    CHECK(w.column == 6);
}

TEST_CASE("precedence and associativity") {
    const Expr a = in("a"), b = in("b"), c = in("c"), d = in("d"), e = in("e");
    CHECK_PARSES_TO("a + b * c", a + b * c);
    CHECK_PARSES_TO("a * b + c", a * b + c);
    CHECK_PARSES_TO("a - b - c", (a - b) - c);
    CHECK_PARSES_TO("a / b / c", (a / b) / c);
    CHECK_PARSES_TO("a - b + c", (a - b) + c);
    CHECK_PARSES_TO("a * b / c * d", ((a * b) / c) * d);
    CHECK_PARSES_TO("a ^ b ^ c", fj::pow(a, fj::pow(b, c)));
    CHECK_PARSES_TO("-a ^ 2", -fj::pow(a, 2.0));
    CHECK_PARSES_TO("-2 ^ 2", -fj::pow(2.0, 2.0));
    CHECK_PARSES_TO("a ^ -2", fj::pow(a, -2.0));
    CHECK_PARSES_TO("a ^ -b", fj::pow(a, -b));
    CHECK_PARSES_TO("2 * a ^ 2", 2.0 * fj::pow(a, 2.0));
    CHECK_PARSES_TO("-a * b", (-a) * b);
    CHECK_PARSES_TO("a * -b", a * (-b));
    CHECK_PARSES_TO("a - -1", a - fj::constant(-1));
    CHECK_PARSES_TO("- - a", -(-a));
    CHECK_PARSES_TO("!a && b", (!a) && b);
    CHECK_PARSES_TO("!a == b", (!a) == b);
    CHECK_PARSES_TO("a || b && c", a || (b && c));
    CHECK_PARSES_TO("a && b || c", (a && b) || c);
    CHECK_PARSES_TO("a == b && c != d", (a == b) && (c != d));
    CHECK_PARSES_TO("a < b == c < d", (a < b) == (c < d));
    CHECK_PARSES_TO("a == b != c", (a == b) != c);
    CHECK_PARSES_TO("a < b < c", (a < b) < c);
    CHECK_PARSES_TO("a + b < c * d", (a + b) < (c * d));
    CHECK_PARSES_TO("a - b >= c", (a - b) >= c);
    CHECK_PARSES_TO("a ? b : c ? d : e", fj::where(a, b, fj::where(c, d, e)));
    CHECK_PARSES_TO("a ? b ? c : d : e", fj::where(a, fj::where(b, c, d), e));
    CHECK_PARSES_TO("a || b ? c + 1 : d", fj::where(a || b, c + 1.0, d));
    CHECK_PARSES_TO("(a ? b : c) + d", fj::where(a, b, c) + d);
    CHECK_PARSES_TO("a ? b : c + d", fj::where(a, b, c + d));
    CHECK_PARSES_TO("(a + b) * c", (a + b) * c);
    CHECK_PARSES_TO("a * (b + c)", a * (b + c));
    CHECK_PARSES_TO("((a))", a);
    CHECK_PARSES_TO("abs(a) ^ 2", fj::pow(fj::abs(a), 2.0));
}

TEST_CASE("comments, whitespace and several lines") {
    const Expr x = in("close");
    CHECK_PARSES_TO("  sum(\n  close,   # the price\n  5)  # trailing\n\n", fj::sum(fj::window(x, 5)));
    CHECK_PARSES_TO("# a formula\r\n-1 *\r\n\tclose\r\n", -1.0 * x);
    CHECK_PARSES_TO("close#comment right after", x);
}

TEST_CASE("fractional windows: floor by default, nearest with round_windows") {
    const Expr x = in("x"), y = in("y");
    fj::ParseOptions round;
    round.round_windows = true;
    CHECK_PARSES_TO("sum(x, 9.91)", fj::sum(fj::window(x, 9)));
    CHECK_PARSES_TO("sum(x, 9.91)", fj::sum(fj::window(x, 10)), round);
    CHECK_PARSES_TO("ts_mean(x, 9.4)", fj::mean(fj::window(x, 9)), round);
    CHECK_PARSES_TO("correlation(x, y, 16.1219)", fj::corr(fj::window(x, 16), fj::window(y, 16)));
    CHECK_PARSES_TO("correlation(x, y, 16.6219)", fj::corr(fj::window(x, 17), fj::window(y, 17)), round);
    CHECK_PARSES_TO("mean(window(x, 5.9, 2.6))", fj::mean(fj::window(x, 5, 2)));
    CHECK_PARSES_TO("mean(window(x, 5.9, 2.6))", fj::mean(fj::window(x, 6, 3)), round);
    CHECK_PARSES_TO("min(x, 7.5)", fj::min(fj::window(x, 7)));
    // Ties go to even, as Python's round() in the public alpha101 codes.
    CHECK_PARSES_TO("sum(x, 2.5)", fj::sum(fj::window(x, 2)), round);
    CHECK_PARSES_TO("sum(x, 3.5)", fj::sum(fj::window(x, 4)), round);
    CHECK_PARSES_TO("sum(x, 3.5)", fj::sum(fj::window(x, 3)));
    // Lags convert the same way.
    CHECK_PARSES_TO("delay(x, 2.7)", fj::delay(x, 2));
    CHECK_PARSES_TO("delay(x, 2.7)", fj::delay(x, 3), round);
    CHECK_PARSES_TO("delta(x, 1.2)", fj::delta(x, 1), round);
    CHECK_PARSES_TO("delay(x, 0.5)", x);
    // Constant expressions, and values a rounding error away from an integer are that integer.
    CHECK_PARSES_TO("sum(x, 2 ^ 3)", fj::sum(fj::window(x, 8)));
    CHECK_PARSES_TO("delay(x, 1 + 1)", fj::delay(x, 2));
    CHECK_PARSES_TO("sum(x, 0.3 / 0.1)", fj::sum(fj::window(x, 3)));
    CHECK_PARSES_TO("sum(x, where(1 > 2, 3, 4))", fj::sum(fj::window(x, 4)));
    CHECK_PARSES_TO("sum(x, abs(-6))", fj::sum(fj::window(x, 6)));
}

TEST_CASE("round trip of Expr::str()") {
    const Expr a = in("a"), b = in("b"), x = in("close");
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double inf = std::numeric_limits<double>::infinity();
    std::vector<Expr> cases = {
        fj::constant(0), fj::constant(-1), fj::constant(0.1 + 0.2), fj::constant(-0.25), fj::constant(1e-05),
        fj::constant(1e+20), fj::constant(-1.5e-300), fj::constant(5e-324), fj::constant(123456789),
        fj::constant(std::numeric_limits<double>::max()), fj::constant(std::numeric_limits<double>::lowest()),
        fj::constant(nan), fj::constant(inf), fj::constant(-inf),
        -a, !a, -(-a), !(!a), -fj::constant(-1), -fj::constant(nan), -fj::constant(inf), !fj::constant(1),
        a - fj::constant(-1), fj::pow(fj::constant(-2), a), fj::constant(0) / fj::constant(0),
        fj::constant(1) / fj::constant(0), fj::constant(-1) / fj::constant(0),
        fj::where(a > b, fj::where(a, 1.0, 2.0), fj::where(b, a, -b)),
        fj::where(fj::where(a, b, x), a, b),
        fj::mean(fj::window(x, 20, 5)), fj::count(fj::window(x, 7, 2)), fj::count(fj::window(x, 7)),
        fj::corr(fj::window(a, 10, 3), fj::window(b, 10, 8)), fj::cov(fj::window(a * b, 3), fj::window(-b, 3)),
        fj::std(fj::window(fj::corr(fj::window(a, 5), fj::window(b, 5)), 10)),
        fj::delta(fj::delay(x, 2), 3), fj::min(a, b), fj::max(fj::window(fj::min(a, b), 4)),
        fj::signedpower(a - b, 0.5), (a || b) && !(a == b), a != b,
        fj::sum(fj::window(fj::input("window"), 5)), fj::input("rank") + fj::input("ind.sector"),
    };
    for (const Expr& e : cases) {
        const std::string text = e.str();
        INFO("str(): " << text);
        Expr back;
        REQUIRE_NOTHROW(back = fj::parse(text));
        INFO("back: " << back.str());
        CHECK(back.same(e));
    }

    // Random nested expressions.
    Gen gen(20240601);
    int checked = 0;
    for (int k = 0; k < 400; ++k) {
        const Expr e = gen.expr(6);
        const std::string text = e.str();
        INFO("str(): " << text);
        Expr back;
        REQUIRE_NOTHROW(back = fj::parse(text));
        INFO("back: " << back.str());
        CHECK(back.same(e));
        ++checked;
    }
    CHECK(checked == 400);

    // Deep nesting: a left-nested sum of 3000 terms prints 3000 nested parentheses.
    Expr deep = x;
    for (int k = 0; k < 3000; ++k) deep = deep + static_cast<double>(k % 7);
    CHECK(fj::parse(deep.str()).same(deep));
}

TEST_CASE("errors: format, line and column") {
    Failure f = parse_failure("a $ b");
    REQUIRE(f.thrown);
    CHECK(f.what == "line 1, column 3: unexpected character '$'\na $ b\n  ^");
    CHECK(f.line == 1);
    CHECK(f.column == 3);

    f = parse_failure("correlation(a, b)");
    CHECK(f.what ==
          "line 1, column 1: correlation takes 3 arguments, got 2: correlation(x, y, d)\ncorrelation(a, b)\n^");

    // Several lines: the line of the error, and the column in it.
    f = parse_failure("sum(close,\n    # a comment\n    oops $)");
    CHECK(f.line == 3);
    CHECK(f.column == 10);
    CHECK(f.shown_line == "    oops $)");
    CHECK(f.caret_line == "         ^");
    CHECK(f.message == "unexpected character '$'");

    f = parse_failure("ts_mean(close,\n        10)\n  + skew(volume, 0)");
    CHECK(f.line == 3);
    CHECK(f.column == 18);
    CHECK(f.message == "skew: window length must be >= 1, got 0");
    CHECK(f.at_caret == "0)");

    f = parse_failure("# alpha\nsum(close, # window\n    x)");
    CHECK(f.line == 3);
    CHECK(f.column == 5);
    CHECK(f.message == "sum: the window length must be a number, got 'x'");

    // Tabs are kept in the caret line so the caret lines up; columns count characters, not bytes.
    f = parse_failure("\tabs(x, )");
    CHECK(f.column == 9);
    CHECK(f.caret_line == "\t       ^");
    f = parse_failure("x + \xc3\xa9\xc3\xa9");  // "x + éé"
    CHECK(f.column == 5);
    CHECK(f.caret_line == "    ^");
    CHECK(f.message == "unexpected character '\xc3\xa9'");
    f = parse_failure("\xc3\xa9");
    CHECK(f.column == 1);
    f = parse_failure("x +\r\n $\r\n");
    CHECK(f.line == 2);
    CHECK(f.column == 2);
    CHECK(f.shown_line == " $");

    // A very long line is shown as an excerpt around the error, the caret still under it.
    std::string long_text;
    for (int k = 0; k < 300; ++k) long_text += "a + ";
    long_text += "$ + b";
    f = parse_failure(long_text);
    CHECK(f.column == 1201);
    CHECK(f.shown_line.size() < 200);
    CHECK(f.at_caret == "$ + b");

    // ParseError is an ExprError, as parse.hpp promises for invalid expressions.
    CHECK_THROWS_AS(fj::parse("sum(x, 0)"), fj::ExprError);
    CHECK_THROWS_AS(fj::parse("sum(x, 0)"), fj::ParseError);
}

TEST_CASE("errors: syntax") {
    Failure f = parse_failure("");
    CHECK(f.thrown);
    CHECK(f.message == "empty formula: expected an expression");
    CHECK(f.line == 1);
    CHECK(f.column == 1);
    f = parse_failure("  \n  # only a comment\n");
    CHECK(f.message == "empty formula: expected an expression");

    f = parse_failure("a +");
    CHECK(f.message == "unexpected end of formula: expected an expression after '+'");
    CHECK(f.column == 4);
    f = parse_failure("a + )");
    CHECK(f.message == "expected an expression after '+', got ')'");
    CHECK(f.column == 5);
    f = parse_failure("a * * b");
    CHECK(f.message == "expected an expression after '*', got '*'");

    f = parse_failure("sum(window(x, 5)");
    CHECK(f.message == "unexpected end of formula: missing ')' to close sum( at line 1, column 1");
    CHECK(f.column == 17);
    f = parse_failure("sum(close,\n  5   \n# trailing comment\n");
    CHECK(f.line == 2);
    CHECK(f.column == 4);  // just after the last token, not on the comment line
    CHECK(f.message.find("missing ')' to close sum(") != std::string::npos);
    f = parse_failure("(a + b");
    CHECK(f.message == "unexpected end of formula: missing ')' to close the '(' at line 1, column 1");
    CHECK(f.column == 7);
    f = parse_failure("x * (a + b c)");
    CHECK(f.message == "expected an operator or ')' to close the '(' at line 1, column 5, got name 'c'");
    CHECK(f.column == 12);
    f = parse_failure("abs(x y)");
    CHECK(f.message == "expected ',' or ')' after argument 1 of abs, got name 'y'");
    CHECK(f.column == 7);
    f = parse_failure("abs(x,)");
    CHECK(f.message == "expected an expression after ',', got ')'");

    f = parse_failure("a b");
    CHECK(f.message == "expected an operator or the end of the formula, got name 'b'");
    CHECK(f.column == 3);
    f = parse_failure("a)");
    CHECK(f.message == "unmatched ')'");
    CHECK(f.column == 2);
    f = parse_failure("a ? b");
    CHECK(f.message == "unexpected end of formula: missing ':' for the '?' at line 1, column 3");
    f = parse_failure("a ? b c");
    CHECK(f.message == "expected ':' for the '?' at line 1, column 3, got name 'c'");

    f = parse_failure("a = b");
    CHECK(f.message == "unexpected character '='; did you mean '=='?");
    CHECK(f.column == 3);
    CHECK(parse_failure("a & b").message == "unexpected character '&'; did you mean '&&'?");
    CHECK(parse_failure("a | b").message == "unexpected character '|'; did you mean '||'?");
    CHECK(parse_failure("a @ b").message == "unexpected character '@'");
    CHECK(parse_failure("a \x01").message == "unexpected character '\\x01'");
    f = parse_failure("12abc + 1");
    CHECK(f.message == "invalid number '12abc'");
    CHECK(parse_failure("1.2.3").message == "invalid number '1.2.3'");
    CHECK(parse_failure("2e+").message == "invalid number '2e'");
    CHECK(parse_failure("1e999").message == "number '1e999' is out of range");
    // A lexical error later in the text does not hide an earlier syntax error.
    f = parse_failure("(a + ) $");
    CHECK(f.message == "expected an expression after '+', got ')'");

    f = parse_failure(std::string(100000, '(') + "x");
    CHECK(f.thrown);
    CHECK(f.message.find("nests too deeply") != std::string::npos);
}

TEST_CASE("errors: calls and arguments") {
    Failure f = parse_failure("kurt(close)");
    CHECK(f.message.find("kurt of one argument takes a window") != std::string::npos);
    CHECK(parse_failure("ema(x, 0.5)").message == "ema: span must be a finite number >= 1, got 0.5");
    CHECK(parse_failure("ema(x, y)").message == "ema: the span must be a number, got 'y'");
    CHECK(parse_failure("quantile(x, 5)").message.find("quantile takes 2 or 3 arguments") != std::string::npos);
    CHECK(parse_failure("quantile(x, 5, 1.5)").message == "quantile: q must be in [0, 1], got 1.5");

    f = parse_failure("1 + corrr(window(a, 5), window(b, 5))");
    CHECK(f.message == "unknown function 'corrr'; did you mean 'corr'?");
    CHECK(f.column == 5);
    CHECK(parse_failure("stdev(x, 5)").message == "unknown function 'stdev'; did you mean 'stddev' or 'std'?");
    CHECK(parse_failure("foo(x)").message == "unknown function 'foo'");
    CHECK(parse_failure("adv20(x)").message == "unknown function 'adv20'");

    // Arity, pointing at the name.
    f = parse_failure("x + correlation(a, b)");
    CHECK(f.message == "correlation takes 3 arguments, got 2: correlation(x, y, d)");
    CHECK(f.column == 5);
    CHECK(parse_failure("abs(x, y)").message == "abs takes 1 argument, got 2: abs(x)");
    CHECK(parse_failure("abs()").message == "abs takes 1 argument, got 0: abs(x)");
    CHECK(parse_failure("where(a, b)").message == "where takes 3 arguments, got 2: where(c, a, b)");
    CHECK(parse_failure("delay(x)").message == "delay takes 2 arguments, got 1: delay(x, k)");
    CHECK(parse_failure("ts_sum(window(x, 5))").message == "ts_sum takes 2 arguments, got 1: ts_sum(x, d)");
    CHECK(parse_failure("sum(x, 5, 1)").message ==
          "sum takes 1 or 2 arguments, got 3: sum(window(x, d)) or sum(x, d)");
    CHECK(parse_failure("corr(x)").message ==
          "corr takes 2 or 3 arguments, got 1: corr(window(x, d), window(y, d)) or corr(x, y, d)");
    f = parse_failure("sum(window(x))");
    CHECK(f.message == "window takes 2 or 3 arguments, got 1: window(x, d) or window(x, d, min_periods)");
    CHECK(f.column == 5);

    // window() outside a reducer.
    f = parse_failure("window(x, 5)");
    CHECK(f.message.find("window() is only valid as the argument of a window reducer") == 0);
    CHECK(f.column == 1);
    f = parse_failure("1 + abs(window(x, 5))");
    CHECK(f.message == "window() is only valid as the argument of a window reducer "
                       "(sum, mean, count, var, std, min, max, argmin, argmax, ts_rank, product, decay_linear, skew, "
                       "kurt, median, quantile, slope, rsquare, resid, corr, cov), not of abs");
    CHECK(f.column == 9);
    f = parse_failure("sum(window(x, 5) * 2)");
    CHECK(f.message.find("window() must be a whole argument of a window reducer") == 0);
    CHECK(f.column == 5);
    f = parse_failure("mean((window(x, 5)))");
    CHECK(f.message.find("window() is only valid as the argument of a window reducer") == 0);
    CHECK(f.column == 7);
    CHECK(parse_failure("mean(window(window(x, 5), 5))").message.find("a window cannot be an argument of window()") ==
          0);
    CHECK(parse_failure("ts_sum(window(x, 5), 5)").message.find("not of ts_sum") != std::string::npos);
    f = parse_failure("sum(close)");
    CHECK(f.message == "sum of one argument takes a window, got 'close': sum(window(x, d)) or sum(x, d)");
    CHECK(f.column == 5);
    f = parse_failure("corr(window(a, 5), b + 1)");
    CHECK(f.message.find("corr of two arguments takes two windows, got 'b + 1'") == 0);
    CHECK(f.column == 20);

    // Window lengths and lags must be numbers.
    f = parse_failure("sum(x, y)");
    CHECK(f.message == "sum: the window length must be a number, got 'y'");
    CHECK(f.column == 8);
    f = parse_failure("ts_mean(close, volume /\n 2)");
    CHECK(f.message == "ts_mean: the window length must be a number, got 'volume / 2'");
    CHECK(f.line == 1);
    CHECK(f.column == 16);
    CHECK(parse_failure("correlation(a, b, c)").message == "correlation: the window length must be a number, got 'c'");
    CHECK(parse_failure("delay(x, y)").message == "delay: the lag must be a number, got 'y'");
    CHECK(parse_failure("mean(window(x, n))").message == "window: the length must be a number, got 'n'");
    CHECK(parse_failure("mean(window(x, 5, m))").message == "window: the min_periods must be a number, got 'm'");
    CHECK(parse_failure("sum(x, 1/0)").message == "sum: the window length must be a finite number, got inf");
    CHECK(parse_failure("sum(x, 1e12)").message == "sum: the window length 1000000000000 is out of range");
    CHECK(parse_failure("ts_sum(x, delay(2, 1))").message ==
          "ts_sum: the window length must be a number, got 'delay(2, 1)'");
}

TEST_CASE("errors: invalid windows and lags point at the argument") {
    Failure f = parse_failure("ts_sum(x, 0.5)");
    CHECK(f.message == "ts_sum: window length must be >= 1, got 0");
    CHECK(f.column == 11);
    CHECK(f.at_caret == "0.5)");
    f = parse_failure("1 + ts_sum(x, 0.5)", [] { fj::ParseOptions o; o.round_windows = true; return o; }());
    CHECK(f.message == "ts_sum: window length must be >= 1, got 0");
    CHECK(parse_failure("mean(x, 0)").message == "mean: window length must be >= 1, got 0");
    CHECK(parse_failure("correlation(a, b, -3)").message == "correlation: window length must be >= 1, got -3");
    f = parse_failure("min(x, 0)");
    CHECK(f.message == "min: window length must be >= 1, got 0 (min(x, d) with a number d is ts_min(x, d))");
    CHECK(f.column == 8);

    f = parse_failure("sum(window(x, 0))");
    CHECK(f.message == "window: length must be >= 1, got 0");
    CHECK(f.column == 15);
    f = parse_failure("sum(window(x, 5, 6))");
    CHECK(f.message == "window: min_periods 6 exceeds the window length 5");
    CHECK(f.column == 18);
    CHECK(parse_failure("sum(window(x, 5, -1))").message == "window: min_periods must be >= 0, got -1");
    f = parse_failure("corr(window(a, 5), window(b, 6))");
    CHECK(f.message == "corr: both windows must have the same length, got 5 and 6");
    CHECK(f.column == 30);

    f = parse_failure("delay(x, -1)");
    CHECK(f.message == "delay: lag must be >= 0, got -1");
    CHECK(f.column == 10);
    CHECK(parse_failure("delta(x, 0 - 2)").message == "delta: lag must be >= 0, got -2");
    CHECK(parse_failure("delay(x, -0.5)").message == "delay: lag must be >= 0, got -1");
    f = parse_failure("close / adv0");
    CHECK(f.message == "adv0: window length must be >= 1, got 0");
    CHECK(f.column == 9);
}

}  // TEST_SUITE("parse")
