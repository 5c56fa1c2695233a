// fj::compile and fj::Program over raw panels. The package (python/factorjit/_program.py) turns arrays of
// NumPy, pandas, CuPy or PyTorch into panel descriptions (pointer, shape, leading dimension, dtype, memory)
// and allocates the outputs; here they become fj::Panel views and the program runs with the GIL released.
// The halo (the rows before a row that its results need, Plan::halo) comes from the planner, for Dask's
// chunks over time.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "codegen/plan.hpp"
#include "runtime/program.hpp"

namespace py = pybind11;

namespace fj::python {
namespace {

// A compiled program and what Python asks of it that fj::Program does not say.
struct CoreProgram {
    Program program;
    int halo = 0;
};

// (name, pointer, rows, cols, ld, is_float64, on_device): what the package hands over for each panel.
using PanelTuple = std::tuple<std::string, std::uint64_t, std::int64_t, std::int64_t, std::int64_t, bool, bool>;

std::map<std::string, Panel> panels(const std::vector<PanelTuple>& list) {
    std::map<std::string, Panel> out;
    for (const auto& [name, ptr, rows, cols, ld, f64, device] : list) {
        Panel p;
        p.data = reinterpret_cast<void*>(ptr);
        p.rows = rows;
        p.cols = cols;
        p.ld = ld;
        p.dtype = f64 ? DType::F64 : DType::F32;
        p.memory = device ? Memory::Cuda : Memory::Host;
        out.emplace(name, p);
    }
    return out;
}

Backend backend_of(const std::string& name) {
    if (name == "auto") return Backend::Auto;
    if (name == "cpu") return Backend::Cpu;
    if (name == "cuda") return Backend::Cuda;
    throw py::value_error("backend must be 'auto', 'cpu' or 'cuda', got '" + name + "'");
}

const char* backend_name(Backend b) { return b == Backend::Cuda ? "cuda" : b == Backend::Cpu ? "cpu" : "auto"; }

}  // namespace

void bind_program(py::module_& m) {
    py::class_<CoreProgram>(m, "CoreProgram")
        .def_property_readonly("outputs", [](const CoreProgram& p) { return p.program.output_names(); })
        .def_property_readonly("inputs", [](const CoreProgram& p) { return p.program.input_names(); })
        .def_property_readonly("backend", [](const CoreProgram& p) { return backend_name(p.program.backend()); })
        .def_property_readonly("halo", [](const CoreProgram& p) { return p.halo; })
        .def("explain", [](const CoreProgram& p) {
            py::gil_scoped_release release;  // explain() may compile (the CUDA backend's kernel report)
            return p.program.explain();
        })
        // Host panels: Program::run, complete on return. Device panels (stream given: the CUstream handle of
        // the caller's library, 0 for the legacy default stream): Program::run_async on that stream, so the
        // run is ordered after the caller's queued work and before what it queues next, without a wait here.
        // `options`: fj.RunOptions' fields (RunOptionArgs), or None for the defaults.
        .def("run", [](const CoreProgram& p, const std::vector<PanelTuple>& in, const std::vector<PanelTuple>& out,
                       std::optional<std::uint64_t> stream, std::optional<RunOptionArgs> options) {
            const auto inputs = panels(in), outputs = panels(out);
            const RunOptions run_opts = options ? run_options(*options) : RunOptions{};
            py::gil_scoped_release release;
            if (stream)
                p.program.run_async(inputs, outputs, reinterpret_cast<void*>(*stream), run_opts);
            else
                p.program.run(inputs, outputs, run_opts);
        }, py::arg("inputs"), py::arg("outputs"), py::arg("stream") = py::none(), py::arg("options") = py::none())
        // Seconds of each of `repeat` calls of Program::run from C++ on the same panels: the baseline of the
        // per-run overhead benchmark (bench/bench_python.py).
        .def("_time_run", [](const CoreProgram& p, const std::vector<PanelTuple>& in, const std::vector<PanelTuple>& out,
                             int repeat) {
            const auto inputs = panels(in), outputs = panels(out);
            std::vector<double> seconds;
            py::gil_scoped_release release;
            for (int i = 0; i < repeat; ++i) {
                const auto t0 = std::chrono::steady_clock::now();
                p.program.run(inputs, outputs);
                seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
            }
            return seconds;
        });

    m.def("compile",
          [](const std::vector<std::pair<std::string, Expr>>& outputs, const std::string& backend, int threads,
             std::int64_t tile_rows, std::int64_t block_cols, bool exact_sums, bool fma_contraction,
             const std::vector<Expr>& materialize) {
              CompileOptions options;
              options.backend = backend_of(backend);
              options.threads = threads;
              options.tile_rows = tile_rows;
              options.block_cols = block_cols;
              options.exact_sums = exact_sums;
              options.fma_contraction = fma_contraction;
              options.materialize = materialize;
              py::gil_scoped_release release;
              CoreProgram p{fj::compile(outputs, options), 0};
              p.halo = codegen::make_plan(outputs, DType::F32, codegen::PlanOptions{codegen::Sums::Auto, materialize}).halo;
              return p;
          },
          py::arg("outputs"), py::arg("backend"), py::arg("threads"), py::arg("tile_rows"), py::arg("block_cols"),
          py::arg("exact_sums"), py::arg("fma_contraction"), py::arg("materialize"));
}

}  // namespace fj::python
