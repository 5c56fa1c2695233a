// fj::RunProgress as a Python class, and fj::RunOptions from the fields of the package's fj.RunOptions
// (python/factorjit/_run_options.py, which checks them).
//
// The progress callable is called from the thread that runs the program (a CUDA pipeline's worker, or the
// caller's thread on the CPU) while the GIL is released: each call takes the GIL. A Python exception it raises
// leaves as pybind11's error_already_set, which the library lets through unchanged (RunOptions::progress:
// "propagates out of run()"), and pybind11 raises the original exception again in the caller.
#include <pybind11/pybind11.h>

#include <memory>

#include <fmt/format.h>

#include "bindings.hpp"
#include "runtime/program.hpp"

namespace py = pybind11;

namespace fj::python {

void bind_run_options(py::module_& m) {
    py::class_<RunProgress>(m, "RunProgress",
                            "Where a run stands (C++ fj::RunProgress), handed to RunOptions.progress. Counts are "
                            "cumulative since the run began.")
        .def_readonly("rows_done", &RunProgress::rows_done, "output rows finished (all outputs of those rows)")
        .def_readonly("rows_total", &RunProgress::rows_total)
        .def_readonly("chunks_done", &RunProgress::chunks_done)
        .def_readonly("chunks_total", &RunProgress::chunks_total, "chunks of the run's chunk plan (1: the whole panel)")
        .def_readonly("bytes_in", &RunProgress::bytes_in, "bytes of input moved so far (host to device copies)")
        .def_readonly("bytes_out", &RunProgress::bytes_out, "bytes of output moved so far")
        .def_readonly("elapsed_s", &RunProgress::elapsed_s, "seconds since the run began")
        .def("__repr__", [](const RunProgress& p) {
            return fmt::format("factorjit.RunProgress(rows {}/{}, chunks {}/{}, bytes_in {}, bytes_out {}, {:.3f} s)",
                               p.rows_done, p.rows_total, p.chunks_done, p.chunks_total, p.bytes_in, p.bytes_out,
                               p.elapsed_s);
        });
}

RunOptions run_options(const RunOptionArgs& args) {
    const auto& [max_device_bytes, max_host_bytes, chunk_rows, chunk_cols, progress, devices] = args;
    RunOptions o;
    o.max_device_bytes = max_device_bytes;
    o.max_host_bytes = max_host_bytes;
    o.chunk_rows = chunk_rows;
    o.chunk_cols = chunk_cols;
    o.devices = devices;
    if (!progress.is_none()) {
        // The library may copy and destroy the std::function on threads that do not hold the GIL: the callable's
        // reference is owned by one shared_ptr, whose copies touch no Python refcount, and released under the GIL.
        std::shared_ptr<py::object> fn(new py::object(progress), [](py::object* f) {
            py::gil_scoped_acquire gil;
            delete f;
        });
        o.progress = [fn](const RunProgress& p) {
            py::gil_scoped_acquire gil;
            (*fn)(p);  // a Python exception: py::error_already_set, out of run() as it is
        };
    }
    return o;
}

}  // namespace fj::python
