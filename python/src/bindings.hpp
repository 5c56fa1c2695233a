// The parts of the `factorjit._core` extension module, one file each: errors (C++ exceptions to the
// package's Python classes), expressions (Expr, Window and the builders), programs (compile, run on panels).
#pragma once

#include <pybind11/pybind11.h>

namespace fj::python {

void bind_errors(pybind11::module_& m);
void bind_expr(pybind11::module_& m);
void bind_program(pybind11::module_& m);

}  // namespace fj::python
