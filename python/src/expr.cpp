// fj::Expr and fj::Window in Python: operators build expressions as in C++ (`a + b`, `a < b`, `-a`), with
// `&`, `|`, `~` for && || ! (Python's `and`/`or`/`not` cannot be overloaded, and an expression has no
// truth value: `bool(expr)` raises, so `a < b < c` fails loudly instead of meaning something else).
// Numbers mix in as constants on either side. `==` builds a comparison, as in C++, so expressions are not
// hashable; `a.same(b)` is structural identity (hash-consing makes it node identity).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>

#include "bindings.hpp"
#include "dsl/expr.hpp"
#include "dsl/parse.hpp"

namespace py = pybind11;

namespace fj::python {
namespace {

// An operand: an Expr, or a real number (Python int/float, NumPy scalar) as a constant. Anything else:
// nothing, so that operators can return NotImplemented and builders can raise a TypeError naming it.
bool as_expr(const py::handle& h, Expr& out) {
    if (py::isinstance<Expr>(h)) {
        out = h.cast<Expr>();
        return true;
    }
    if (PyBool_Check(h.ptr()) || PyLong_Check(h.ptr()) || PyFloat_Check(h.ptr()) ||
        (py::hasattr(h, "dtype") && py::hasattr(h, "__float__") && py::getattr(h, "ndim", py::int_(1)).cast<int>() == 0)) {
        out = Expr(py::float_(py::reinterpret_borrow<py::object>(h)).cast<double>());
        return true;
    }
    return false;
}

Expr arg(const py::handle& h, const char* op, int index) {
    Expr e;
    if (!as_expr(h, e))
        throw py::type_error(std::string(op) + ": argument " + std::to_string(index) +
                             " must be an expression or a number, got " +
                             std::string(py::str(py::type::of(h).attr("__name__"))));
    return e;
}

template <class F>
auto binary(F f) {
    return [f](const Expr& a, const py::object& b) -> py::object {
        Expr e;
        if (!as_expr(b, e)) return py::reinterpret_borrow<py::object>(Py_NotImplemented);
        return py::cast(f(a, e));
    };
}
template <class F>
auto reflected(F f) {
    return [f](const Expr& a, const py::object& b) -> py::object {
        Expr e;
        if (!as_expr(b, e)) return py::reinterpret_borrow<py::object>(Py_NotImplemented);
        return py::cast(f(e, a));
    };
}

}  // namespace

void bind_expr(py::module_& m) {
    py::class_<Expr> expr(m, "Expr", "A factor expression (hash-consed: equal subtrees are one node).");
    expr.def(py::init([](double v) { return Expr(v); }), "A constant.")
        .def("__str__", &Expr::str)
        .def("__repr__", [](const Expr& e) { return "factorjit.Expr(" + e.str() + ")"; })
        .def("same", &Expr::same, "Structural identity: the same node.")
        .def("__bool__", [](const Expr&) -> bool {
            throw py::type_error("an expression has no truth value: use & | ~ for and, or, not, and "
                                 "fj.where(c, a, b) for a choice");
        })
        .def("__add__", binary([](const Expr& a, const Expr& b) { return a + b; }))
        .def("__radd__", reflected([](const Expr& a, const Expr& b) { return a + b; }))
        .def("__sub__", binary([](const Expr& a, const Expr& b) { return a - b; }))
        .def("__rsub__", reflected([](const Expr& a, const Expr& b) { return a - b; }))
        .def("__mul__", binary([](const Expr& a, const Expr& b) { return a * b; }))
        .def("__rmul__", reflected([](const Expr& a, const Expr& b) { return a * b; }))
        .def("__truediv__", binary([](const Expr& a, const Expr& b) { return a / b; }))
        .def("__rtruediv__", reflected([](const Expr& a, const Expr& b) { return a / b; }))
        .def("__pow__", binary([](const Expr& a, const Expr& b) { return fj::pow(a, b); }))
        .def("__rpow__", reflected([](const Expr& a, const Expr& b) { return fj::pow(a, b); }))
        .def("__lt__", binary([](const Expr& a, const Expr& b) { return a < b; }))
        .def("__le__", binary([](const Expr& a, const Expr& b) { return a <= b; }))
        .def("__gt__", binary([](const Expr& a, const Expr& b) { return a > b; }))
        .def("__ge__", binary([](const Expr& a, const Expr& b) { return a >= b; }))
        .def("__eq__", binary([](const Expr& a, const Expr& b) { return a == b; }))
        .def("__ne__", binary([](const Expr& a, const Expr& b) { return a != b; }))
        .def("__and__", binary([](const Expr& a, const Expr& b) { return a && b; }))
        .def("__rand__", reflected([](const Expr& a, const Expr& b) { return a && b; }))
        .def("__or__", binary([](const Expr& a, const Expr& b) { return a || b; }))
        .def("__ror__", reflected([](const Expr& a, const Expr& b) { return a || b; }))
        .def("__invert__", [](const Expr& a) { return !a; })
        .def("__neg__", [](const Expr& a) { return -a; })
        .def("__pos__", [](const Expr& a) { return a; })
        .def("__abs__", [](const Expr& a) { return fj::abs(a); });
    expr.attr("__hash__") = py::none();
    // NumPy scalars and arrays on the left defer to the Expr's reflected operator instead of broadcasting.
    expr.attr("__array_ufunc__") = py::none();

    py::class_<Window>(m, "Window", "window(x, d, min_periods): the argument of a window reducer.")
        .def_property_readonly("x", [](const Window& w) { return w.x; })
        .def_property_readonly("d", [](const Window& w) { return w.d; })
        .def_property_readonly("min_periods", [](const Window& w) { return w.min_periods; })
        .def("__repr__", [](const Window& w) {
            return "factorjit.window(" + w.x.str() + ", " + std::to_string(w.d) + ", " + std::to_string(w.min_periods) + ")";
        });

    m.def("input", &fj::input, py::arg("name"), "A named input panel.");
    m.def("constant", &fj::constant, py::arg("value"));
    m.def("parse", [](const std::string& text, bool round_windows) { return fj::parse(text, {round_windows}); },
          py::arg("text"), py::arg("round_windows") = false, "Formula text to an expression.");
    m.def("window", [](const py::object& x, int d, int min_periods) { return fj::window(arg(x, "window", 1), d, min_periods); },
          py::arg("x"), py::arg("d"), py::arg("min_periods") = -1);

#define FJ_UNARY(name, fn) m.def(name, [](const py::object& x) { return fn(arg(x, name, 1)); }, py::arg("x"))
    FJ_UNARY("sign", fj::sign);
    FJ_UNARY("sqrt", fj::sqrt);
    FJ_UNARY("exp", fj::exp);
    FJ_UNARY("log", fj::log);
    FJ_UNARY("rank", fj::rank);
    FJ_UNARY("zscore", fj::zscore);
    FJ_UNARY("demean", fj::demean);
#undef FJ_UNARY
    m.def("abs", [](const py::object& x) { return fj::abs(arg(x, "abs", 1)); }, py::arg("x"));
#define FJ_BINARY(name, fn) \
    m.def(name, [](const py::object& a, const py::object& b) { return fn(arg(a, name, 1), arg(b, name, 2)); })
    FJ_BINARY("pow", fj::pow);
    FJ_BINARY("signedpower", fj::signedpower);
    FJ_BINARY("fmin", fj::min);
    FJ_BINARY("fmax", fj::max);
    FJ_BINARY("group_neutralize", fj::group_neutralize);
    FJ_BINARY("group_rank", fj::group_rank);
    FJ_BINARY("group_zscore", fj::group_zscore);
#undef FJ_BINARY
    m.def("where", [](const py::object& c, const py::object& a, const py::object& b) {
        return fj::where(arg(c, "where", 1), arg(a, "where", 2), arg(b, "where", 3));
    });
    m.def("scale", [](const py::object& x, const py::object& a) {
        return a.is_none() ? fj::scale(arg(x, "scale", 1)) : fj::scale(arg(x, "scale", 1), arg(a, "scale", 2));
    }, py::arg("x"), py::arg("a") = py::none());
    m.def("delay", [](const py::object& x, int k) { return fj::delay(arg(x, "delay", 1), k); }, py::arg("x"), py::arg("k"));
    m.def("delta", [](const py::object& x, int k) { return fj::delta(arg(x, "delta", 1), k); }, py::arg("x"), py::arg("k"));

    // Window reducers take a Window; min and max also take two operands (element-wise), as in C++.
    m.def("sum", py::overload_cast<const Window&>(&fj::sum), py::arg("w"));
    m.def("mean", py::overload_cast<const Window&>(&fj::mean), py::arg("w"));
    m.def("count", &fj::count, py::arg("w"));
    m.def("var", &fj::var, py::arg("w"));
    m.def("std", &fj::std, py::arg("w"));
    m.def("stddev", &fj::std, py::arg("w"));
    m.def("argmin", &fj::argmin, py::arg("w"));
    m.def("argmax", &fj::argmax, py::arg("w"));
    m.def("ts_rank", &fj::ts_rank, py::arg("w"));
    m.def("product", &fj::product, py::arg("w"));
    m.def("decay_linear", &fj::decay_linear, py::arg("w"));
    m.def("skew", &fj::skew, py::arg("w"));
    m.def("kurt", &fj::kurt, py::arg("w"));
    m.def("median", &fj::median, py::arg("w"));
    m.def("quantile", &fj::quantile, py::arg("w"), py::arg("q"));
    m.def("slope", &fj::slope, py::arg("w"));
    m.def("rsquare", &fj::rsquare, py::arg("w"));
    m.def("resid", &fj::resid, py::arg("w"));
    m.def("ema", [](const py::object& x, double span) { return fj::ema(arg(x, "ema", 1), span); }, py::arg("x"),
          py::arg("span"));
    m.def("corr", &fj::corr, py::arg("a"), py::arg("b"));
    m.def("cov", &fj::cov, py::arg("a"), py::arg("b"));
    m.def("min", py::overload_cast<const Window&>(&fj::min), py::arg("w"));
    m.def("min", [](const py::object& a, const py::object& b) { return fj::min(arg(a, "min", 1), arg(b, "min", 2)); });
    m.def("max", py::overload_cast<const Window&>(&fj::max), py::arg("w"));
    m.def("max", [](const py::object& a, const py::object& b) { return fj::max(arg(a, "max", 1), arg(b, "max", 2)); });
}

}  // namespace fj::python
