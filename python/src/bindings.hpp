// The parts of the `factorjit._core` extension module, one file each: errors (C++ exceptions to the
// package's Python classes), expressions (Expr, Window and the builders), run options (RunProgress, and
// fj::RunOptions from fj.RunOptions' fields), programs (compile, run on panels).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <tuple>
#include <vector>

#include "runtime/program.hpp"

namespace fj::python {

// fj.RunOptions' fields as the package hands them over (RunOptions._core_args): max_device_bytes,
// max_host_bytes, chunk_rows, chunk_cols, progress (None or a callable), devices.
using RunOptionArgs =
    std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, pybind11::object, std::vector<int>>;
// Needs the GIL (it holds a reference to the progress callable).
RunOptions run_options(const RunOptionArgs& args);

void bind_errors(pybind11::module_& m);
void bind_expr(pybind11::module_& m);
void bind_run_options(pybind11::module_& m);
void bind_program(pybind11::module_& m);

}  // namespace fj::python
