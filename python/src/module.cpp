// factorjit._core: the compiled half of the `factorjit` Python package. The package's Python files
// (python/factorjit/) hold the array handling (NumPy, pandas, CuPy, PyTorch), the error classes and Dask;
// this module holds what needs C++: expressions, compile, and a run over raw panels with the GIL released.
#include "bindings.hpp"

PYBIND11_MODULE(_core, m) {
    m.doc() = "factorjit's C++ core; use the `factorjit` package, not this module";
    fj::python::bind_errors(m);
    fj::python::bind_expr(m);
    fj::python::bind_run_options(m);
    fj::python::bind_program(m);
}
