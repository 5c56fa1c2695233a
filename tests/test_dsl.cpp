// The DSL: hash-consing, validation at build time, str(), and Program's input checking.
#include <doctest/doctest.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "backend_cases.hpp"
#include "dsl/error.hpp"
#include "dsl/expr.hpp"
#include "reference.hpp"
#include "runtime/program.hpp"

namespace {

using fj::Expr;
using fj::window;

// Runs `f`, which must throw E; returns its message ("" and a failed check if it did not).
template <class E, class F>
std::string message_of(F&& f) {
    try {
        f();
    } catch (const E& e) {
        return e.what();
    } catch (const std::exception& e) {
        FAIL_CHECK("threw the wrong exception type: " << std::string(e.what()));
        return "";
    }
    FAIL_CHECK("did not throw");
    return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// `word` appears in `s` as a whole word (an input's name "A" inside "Actual" does not count).
bool names_word(const std::string& s, const std::string& word) {
    auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.'; };
    for (std::size_t i = s.find(word); i != std::string::npos; i = s.find(word, i + 1))
        if ((i == 0 || !ident(s[i - 1])) && (i + word.size() == s.size() || !ident(s[i + word.size()]))) return true;
    return false;
}

}  // namespace

TEST_SUITE("dsl") {

TEST_CASE("hash-consing: equal subtrees are one node") {
    const Expr A = fj::input("A"), B = fj::input("B");
    CHECK(fj::input("A").same(A));
    CHECK(fj::constant(2.0).same(Expr(2.0)));
    CHECK(fj::constant(-0.0).same(fj::constant(0.0)));  // -0 and 0 are one constant

    auto build = [&] { return fj::corr(window(A * B - 1.5, 20), window(fj::delay(B, 3), 20, 10)); };
    const Expr e1 = build(), e2 = build();
    CHECK(e1.same(e2));
    CHECK(e1.node() == e2.node());
    CHECK(e1.node()->args[0] == (A * B - 1.5).node());
    CHECK(fj::mean(window(A, 20)).same(fj::mean(window(A, 20, 20))));  // min_periods defaults to d
    CHECK(fj::count(window(A, 5, 2)).same(fj::count(window(A, 5))));   // count ignores min_periods
    CHECK(fj::delay(A, 0).same(A));
    CHECK(fj::delta(A, 2).same(A - fj::delay(A, 2)));

    // Different expressions are different nodes.
    CHECK_FALSE((A + B).same(B + A));
    CHECK_FALSE((A + B).same(A - B));
    CHECK_FALSE(fj::mean(window(A, 20)).same(fj::mean(window(A, 21))));
    CHECK_FALSE(fj::mean(window(A, 20)).same(fj::mean(window(A, 20, 19))));
    CHECK_FALSE(fj::mean(window(A, 20)).same(fj::sum(window(A, 20))));
    CHECK_FALSE(fj::min(window(A, 5)).same(fj::max(window(A, 5))));
    CHECK_FALSE(fj::constant(1.0).same(fj::constant(2.0)));
    CHECK_FALSE(fj::delay(A, 1).same(fj::delay(A, 2)));
    CHECK_FALSE(fj::input("A").same(fj::input("a")));
    CHECK_FALSE(fj::corr(window(A, 5), window(B, 5)).same(fj::corr(window(B, 5), window(A, 5))));
    CHECK_FALSE(fj::corr(window(A, 5), window(B, 5)).same(fj::cov(window(A, 5), window(B, 5))));

    // Nodes carry their parameters.
    const fj::Node* n = fj::std(window(A, 20, 7)).node();
    CHECK(n->op == fj::Op::WStd);
    CHECK(n->d == 20);
    CHECK(n->min_periods == 7);
    CHECK(fj::corr(window(A, 9, 3), window(B, 9, 5)).node()->min_periods == 5);  // the stricter of the two
    CHECK(fj::count(window(A, 9, 3)).node()->min_periods == 0);
}

TEST_CASE("validation: errors at build time name the operator and the argument") {
    const Expr A = fj::input("A"), B = fj::input("B");
    std::string m;

    m = message_of<fj::ExprError>([&] { (void)window(A, 0); });
    CHECK_MESSAGE(contains(m, "window"), m);
    CHECK_MESSAGE(contains(m, "0"), m);
    m = message_of<fj::ExprError>([&] { (void)fj::mean(window(A, -3)); });
    CHECK_MESSAGE(contains(m, "window"), m);
    CHECK_MESSAGE(contains(m, "-3"), m);
    m = message_of<fj::ExprError>([&] { (void)fj::make(fj::Op::WSum, {A}, 0); });
    CHECK_MESSAGE(contains(m, "sum"), m);

    m = message_of<fj::ExprError>([&] { (void)window(A, 5, 6); });
    CHECK_MESSAGE(contains(m, "min_periods"), m);
    CHECK_MESSAGE(contains(m, "6"), m);
    m = message_of<fj::ExprError>([&] { (void)fj::make(fj::Op::WStd, {A}, 5, 9); });
    CHECK_MESSAGE(contains(m, "std"), m);
    CHECK_MESSAGE(contains(m, "min_periods"), m);
    m = message_of<fj::ExprError>([&] { (void)window(A, 5, -2); });
    CHECK_MESSAGE(contains(m, "min_periods"), m);

    m = message_of<fj::ExprError>([&] { (void)fj::corr(window(A, 20), window(B, 10)); });
    CHECK_MESSAGE(contains(m, "corr"), m);
    CHECK_MESSAGE(contains(m, "20"), m);
    CHECK_MESSAGE(contains(m, "10"), m);
    m = message_of<fj::ExprError>([&] { (void)fj::cov(window(A, 3), window(B, 4)); });
    CHECK_MESSAGE(contains(m, "cov"), m);

    m = message_of<fj::ExprError>([&] { (void)fj::delay(A, -1); });
    CHECK_MESSAGE(contains(m, "delay"), m);
    CHECK_MESSAGE(contains(m, "-1"), m);
    m = message_of<fj::ExprError>([&] { (void)fj::delta(A, -2); });
    CHECK_MESSAGE(contains(m, "delta"), m);

    m = message_of<fj::ExprError>([&] { (void)(Expr() + A); });
    CHECK_MESSAGE(contains(m, "add"), m);
    CHECK_MESSAGE(contains(m, "argument 1"), m);
    m = message_of<fj::ExprError>([&] { (void)fj::where(A, B, Expr()); });
    CHECK_MESSAGE(contains(m, "where"), m);
    CHECK_MESSAGE(contains(m, "argument 3"), m);
    m = message_of<fj::ExprError>([&] { (void)fj::mean(window(Expr(), 5)); });
    CHECK_MESSAGE(contains(m, "window"), m);
    m = message_of<fj::ExprError>([&] { (void)fj::sqrt(Expr()); });
    CHECK_MESSAGE(contains(m, "sqrt"), m);

    m = message_of<fj::ExprError>([&] { (void)fj::make(fj::Op::Add, {A}); });
    CHECK_MESSAGE(contains(m, "add"), m);
    m = message_of<fj::ExprError>([&] { (void)fj::input("1bad name"); });
    CHECK_MESSAGE(contains(m, "1bad name"), m);
    m = message_of<fj::ExprError>([&] { (void)fj::input(""); });
    CHECK_MESSAGE(contains(m, "input"), m);
}

TEST_CASE("str(): formula text") {
    const Expr A = fj::input("A"), B = fj::input("B");
    CHECK(A.str() == "A");
    CHECK(Expr(2.0).str() == "2");
    CHECK(Expr(-1.5).str() == "(-1.5)");
    CHECK((A + B).str() == "(A + B)");
    CHECK((A * 2.0 - B / 3.0).str() == "((A * 2) - (B / 3))");
    CHECK((-A).str() == "(-A)");
    CHECK((!(A < B)).str() == "(!(A < B))");
    CHECK(((A <= B) && (A != B)).str() == "((A <= B) && (A != B))");
    CHECK(fj::where(A > B, A, B).str() == "((A > B) ? A : B)");
    CHECK(fj::pow(A, B).str() == "pow(A, B)");
    CHECK(fj::abs(A).str() == "abs(A)");
    // Element-wise min/max print under the op table's name: "min(A, 5)" would read back as ts_min(A, 5).
    CHECK(fj::min(A, B).str() == std::string(fj::op_name(fj::Op::Min)) + "(A, B)");
    CHECK(fj::max(A, B).str() == std::string(fj::op_name(fj::Op::Max)) + "(A, B)");
    CHECK(fj::min(A, 5.0).str() != "min(A, 5)");
    CHECK(fj::max(A, 5.0).str() != "max(A, 5)");
    CHECK(fj::delay(A, 3).str() == "delay(A, 3)");
    CHECK(fj::delta(A, 3).str() == "(A - delay(A, 3))");
    CHECK(fj::corr(window(A, 20), window(B, 20)).str() == "corr(window(A, 20), window(B, 20))");
    CHECK(fj::mean(window(A, 20, 5)).str() == "mean(window(A, 20, 5))");
    CHECK(fj::count(window(A, 20, 5)).str() == "count(window(A, 20))");
    CHECK(fj::min(window(A, 5)).str() == "min(window(A, 5))");
    CHECK(fj::mean(window(fj::std(window(A, 5)), 10)).str() == "mean(window(std(window(A, 5)), 10))");
    CHECK(Expr().str() == "<empty>");
    CHECK(fj::constant(std::numeric_limits<double>::quiet_NaN()).str() == "(0/0)");
    CHECK(fj::constant(std::numeric_limits<double>::infinity()).str() == "(1/0)");
}

TEST_CASE("input_names and topo_order") {
    const Expr A = fj::input("A"), B = fj::input("B"), C = fj::input("C");
    const std::vector<std::string> names = fj::input_names({C * A, B + A});
    CHECK(names == std::vector<std::string>{"C", "A", "B"});
    const Expr e = fj::mean(window(A * B, 5)) + A * B;
    const std::vector<const fj::Node*> order = fj::topo_order({e.node()});
    CHECK(order.back() == e.node());
    CHECK(order.size() == 5);  // A, B, A*B, mean, +
}

TEST_CASE("reference: hand-checked windows") {
    // Pins the reference's own definitions, so that the library is compared with docs/operators.md.
    const double nan = std::numeric_limits<double>::quiet_NaN();
    using fj::Op;
    using fj::test::window_reduce;
    CHECK(window_reduce(Op::WSum, {}, 0) == 0.0);
    CHECK(std::isnan(window_reduce(Op::WMean, {}, 0)));
    CHECK(std::isnan(window_reduce(Op::WMin, {}, 0)));
    CHECK(window_reduce(Op::WCount, {}, 5) == 0.0);
    CHECK(std::isnan(window_reduce(Op::WSum, {1, 2}, 3)));
    CHECK(window_reduce(Op::WMean, {1, 2, 6}, 3) == 3.0);
    CHECK(window_reduce(Op::WVar, {1, 2, 6}, 3) == doctest::Approx(7.0));
    CHECK(window_reduce(Op::WVar, {0.1, 0.1, 0.1}, 3) == 0.0);
    CHECK(std::isnan(window_reduce(Op::WStd, {4}, 0)));
    CHECK(window_reduce(Op::WMax, {1, 7, 3}, 1) == 7.0);
    CHECK(fj::test::pair_window_reduce(Op::WCorr, {1, 2, 3}, {2, 4, 6.5}, 2) == doctest::Approx(4.5 / std::sqrt(2.0 * 61.0 / 6.0)));
    CHECK(std::isnan(fj::test::pair_window_reduce(Op::WCorr, {1, 2, 3}, {5, 5, 5}, 2)));
    CHECK(fj::test::pair_window_reduce(Op::WCov, {1, 2, 3}, {5, 5, 5}, 2) == 0.0);
    CHECK(fj::test::pair_window_reduce(Op::WCov, {1, 2, 3}, {1, 2, 3}, 2) == 1.0);
    CHECK(std::isnan(fj::test::pair_window_reduce(Op::WCov, {1}, {1}, 0)));

    const Expr A = fj::input("A");
    const fj::test::Inputs in = {{"A", {1, nan, 3, 4, nan, nan, 7}}};
    const std::vector<double> m = fj::test::reference(fj::mean(window(A, 3, 2)), in, 7, 1);
    CHECK(std::isnan(m[0]));
    CHECK(std::isnan(m[1]));
    CHECK(m[2] == 2.0);
    CHECK(m[3] == 3.5);
    CHECK(m[4] == 3.5);
    CHECK(std::isnan(m[5]));
    CHECK(std::isnan(m[6]));
    const std::vector<double> d = fj::test::reference(fj::delay(A, 2), in, 7, 1);
    CHECK(std::isnan(d[1]));
    CHECK(d[2] == 1.0);
    const std::vector<double> w = fj::test::reference(fj::where(A > 2.0, A, -A) + (A != A), in, 7, 1);
    CHECK(w[0] == -1.0);
    CHECK(std::isnan(w[1]));  // the condition A > 2 is 0 for NaN A, so -A: NaN; and (NaN != NaN) is 1
    CHECK(w[2] == 3.0);
    const std::vector<double> s = fj::test::reference(fj::sign(A - 3.0) && A, in, 7, 1);
    CHECK(s[0] == 1.0);
    CHECK(std::isnan(s[1]));
    CHECK(s[2] == 0.0);
}

// ------------------------------------------------------------------------------------------------
// Program::run input checking.

TEST_CASE("program errors: bad inputs and outputs throw fj::InputError naming the panel, and write nothing") {
    const Expr A = fj::input("A"), B = fj::input("B");
    fj::CompileOptions o;
    o.backend = fj::Backend::Cpu;
    const fj::Program p = fj::compile({{"out", fj::corr(window(A, 5), window(B, 5))}, {"m", fj::mean(window(A, 3))}}, o);
    CHECK(p.output_names() == std::vector<std::string>{"out", "m"});
    CHECK(p.input_names() == std::vector<std::string>{"A", "B"});
    CHECK(p.backend() == fj::Backend::Cpu);

    const std::int64_t rows = 30, cols = 6;
    std::vector<double> a(rows * cols), b(rows * cols);
    for (std::size_t i = 0; i < a.size(); ++i) {
        a[i] = 100.0 + std::sin(static_cast<double>(i));
        b[i] = 50.0 + std::cos(0.7 * static_cast<double>(i));
    }
    std::vector<float> af(a.begin(), a.end());
    std::vector<double> a_short(static_cast<std::size_t>((rows - 1) * cols), 1.0), a_narrow(rows * (cols - 1), 1.0);
    std::vector<double> out(rows * cols), m(rows * cols), out_short((rows - 1) * cols);
    std::vector<float> out_f(rows * cols);
    const std::vector<double> a0 = a, b0 = b;

    auto poison = [&] {
        std::fill(out.begin(), out.end(), 12345.0);
        std::fill(m.begin(), m.end(), 12345.0);
    };
    auto untouched = [&] {
        bool ok = a == a0 && b == b0;
        for (double v : out) ok = ok && v == 12345.0;
        for (double v : m) ok = ok && v == 12345.0;
        return ok;
    };
    using Panels = std::map<std::string, fj::Panel>;
    const Panels good_out = {{"out", fj::Panel::host(out.data(), rows, cols)}, {"m", fj::Panel::host(m.data(), rows, cols)}};
    const Panels good_in = {{"A", fj::Panel::host(a.data(), rows, cols)}, {"B", fj::Panel::host(b.data(), rows, cols)}};

    struct Bad {
        std::string what;
        Panels in, out;
        std::vector<std::string> names;  // the message must name one of these panels
    };
    const std::vector<Bad> cases = {
        {"missing input", {{"A", fj::Panel::host(a.data(), rows, cols)}}, good_out, {"B"}},
        {"input of fewer rows",
         {{"A", fj::Panel::host(a.data(), rows, cols)}, {"B", fj::Panel::host(a_short.data(), rows - 1, cols)}},
         good_out, {"A", "B"}},
        {"input of fewer columns",
         {{"A", fj::Panel::host(a_narrow.data(), rows, cols - 1)}, {"B", fj::Panel::host(b.data(), rows, cols)}},
         good_out, {"A", "B"}},
        {"input of another dtype",
         {{"A", fj::Panel::host(a.data(), rows, cols)}, {"B", fj::Panel::host(af.data(), rows, cols)}}, good_out, {"A", "B"}},
        {"input ld < cols",
         {{"A", fj::Panel::host(a.data(), rows, cols)}, {"B", fj::Panel::host(b.data(), rows, cols, cols - 1)}},
         good_out, {"B"}},
        {"missing output", good_in, {{"out", fj::Panel::host(out.data(), rows, cols)}}, {"m"}},
        {"output of the wrong shape", good_in,
         {{"out", fj::Panel::host(out.data(), rows, cols)}, {"m", fj::Panel::host(out_short.data(), rows - 1, cols)}},
         {"m"}},
        {"output of the wrong dtype", good_in,
         {{"out", fj::Panel::host(out_f.data(), rows, cols)}, {"m", fj::Panel::host(m.data(), rows, cols)}}, {"out"}},
        {"output ld < cols", good_in,
         {{"out", fj::Panel::host(out.data(), rows, cols)}, {"m", fj::Panel::host(m.data(), rows, cols, 2)}}, {"m"}},
        {"null input data",
         {{"A", fj::Panel::host(static_cast<const double*>(nullptr), rows, cols)}, {"B", fj::Panel::host(b.data(), rows, cols)}},
         good_out, {"A"}},
    };
    for (const Bad& c : cases) {
        CAPTURE(c.what);
        poison();
        const std::string msg = message_of<fj::InputError>([&] { p.run(c.in, c.out); });
        bool named = false;
        for (const std::string& w : c.names) named = named || names_word(msg, w);
        CHECK_MESSAGE(named, c.what << ": message '" << msg << "' should name " << c.names.front()
                                    << (c.names.size() > 1 ? " or " + c.names.back() : std::string()));
        CHECK_MESSAGE(untouched(), c.what << ": a failed run wrote to caller data");
    }

    // The same panels, corrected, run.
    poison();
    p.run(good_in, good_out);
    CHECK(std::isnan(out[0]));
    CHECK(!std::isnan(out[rows * cols - 1]));
    CHECK(m[rows * cols - 1] != 12345.0);
    CHECK(a == a0);
}

TEST_CASE("program errors: a shape mismatch across outputs and inputs alike") {
    const Expr A = fj::input("A");
    fj::CompileOptions o;
    o.backend = fj::Backend::Cpu;
    const fj::Program p = fj::compile({{"x", A * 2.0}}, o);
    std::vector<double> a(12, 1.0), x(12, 12345.0), x_big(20, 12345.0);
    CHECK_THROWS_AS(p.run({{"A", fj::Panel::host(a.data(), 3, 4)}}, {{"x", fj::Panel::host(x_big.data(), 4, 5)}}),
                    fj::InputError);
    for (double v : x_big) CHECK(v == 12345.0);
    // Transposed shape (same number of cells) is still a mismatch.
    CHECK_THROWS_AS(p.run({{"A", fj::Panel::host(a.data(), 3, 4)}}, {{"x", fj::Panel::host(x.data(), 4, 3)}}),
                    fj::InputError);
    for (double v : x) CHECK(v == 12345.0);
    // Inputs the program does not read are ignored, whatever their shape.
    std::vector<double> other(2, 0.5);
    p.run({{"A", fj::Panel::host(a.data(), 3, 4)}, {"unused", fj::Panel::host(other.data(), 1, 2)}},
          {{"x", fj::Panel::host(x.data(), 3, 4)}});
    for (double v : x) CHECK(v == 2.0);
    // Compile errors: an output name twice, no outputs at all.
    CHECK_THROWS_AS(fj::compile({{"x", A}, {"x", A * 2.0}}, o), fj::Error);
    CHECK_THROWS_AS(fj::compile({{"x", Expr()}}, o), fj::Error);
}

}  // TEST_SUITE("dsl")
