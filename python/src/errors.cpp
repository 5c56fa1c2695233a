// fj::Error and its subclasses as the package's Python exceptions (python/factorjit/errors.py), with the
// same message (the C++ error's whole context: operator, input, NVRTC log, CUDA error name) and, for parse
// errors, `line` and `column`. The classes are defined in Python, where multiple inheritance from the
// built-in exceptions is plain (fj.InputError is also a ValueError); the package hands them over at import.
#include <pybind11/pybind11.h>

#include <exception>

#include "bindings.hpp"
#include "dsl/error.hpp"
#include "runtime/program.hpp"

namespace py = pybind11;

namespace fj::python {
namespace {

// The classes, by C++ type. Heap objects never freed: the translator may run during interpreter shutdown,
// after module globals are gone, and py::object destructors must not run then.
struct ErrorClasses {
    py::object error, expr_error, parse_error, input_error, backend_error, run_error;
};
ErrorClasses* classes = nullptr;

void raise(const py::object& cls, const char* message) {
    if (!cls) {  // the package did not register its classes (the core imported alone)
        PyErr_SetString(PyExc_RuntimeError, message);
        return;
    }
    PyErr_SetObject(cls.ptr(), cls(message).ptr());
}

void translate(std::exception_ptr p) {
    try {
        if (p) std::rethrow_exception(p);
    } catch (const ParseError& e) {
        if (!classes) return raise({}, e.what());
        py::object err = classes->parse_error(e.what());
        err.attr("line") = e.line();
        err.attr("column") = e.column();
        PyErr_SetObject(classes->parse_error.ptr(), err.ptr());
    } catch (const ExprError& e) {
        raise(classes ? classes->expr_error : py::object(), e.what());
    } catch (const InputError& e) {
        raise(classes ? classes->input_error : py::object(), e.what());
    } catch (const RunError& e) {
        raise(classes ? classes->run_error : py::object(), e.what());
    } catch (const BackendError& e) {
        raise(classes ? classes->backend_error : py::object(), e.what());
    } catch (const Error& e) {
        raise(classes ? classes->error : py::object(), e.what());
    }
}

}  // namespace

void bind_errors(py::module_& m) {
    py::register_exception_translator(&translate);
    m.def("_register_errors", [](py::object error, py::object expr_error, py::object parse_error,
                                 py::object input_error, py::object backend_error, py::object run_error) {
        if (!classes) classes = new ErrorClasses;
        *classes = {std::move(error), std::move(expr_error), std::move(parse_error), std::move(input_error),
                    std::move(backend_error), std::move(run_error)};
    });
}

}  // namespace fj::python
