// What a backend provides to fj::Program. Each backend folder (runtime/cpu, runtime/cuda) implements
// the same two classes under the same names, so a reader who knows one knows where to look in the other.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "codegen/plan.hpp"
#include "runtime/panel.hpp"
#include "runtime/program.hpp"

namespace fj::rt {

// A plan compiled for one dtype: runnable many times.
class Executable {
public:
    virtual ~Executable() = default;
    // inputs in plan.inputs order, outputs in plan.outputs order; shapes and dtypes already checked
    // by Program::run (all equal, the dtype this executable was compiled for). `options`: budgets,
    // forced chunking and the progress callback (RunOptions); the executable chooses its chunks with
    // runtime/chunk_plan.hpp. Returns when the outputs are complete.
    virtual void run(const std::vector<Panel>& inputs, const std::vector<Panel>& outputs,
                     const RunOptions& options) = 0;
    // Enqueues the run on `stream` (a CUstream as void*) without waiting (Program::run_async). The default,
    // for backends without streams, runs synchronously and ignores the stream.
    virtual void run_async(const std::vector<Panel>& inputs, const std::vector<Panel>& outputs, void* stream,
                           const RunOptions& options) {
        (void)stream;
        run(inputs, outputs, options);
    }
    virtual std::string explain() const = 0;  // kernels, cache hits, compile times
};

class BackendImpl {
public:
    virtual ~BackendImpl() = default;
    virtual const char* name() const = 0;
    virtual std::unique_ptr<Executable> prepare(const codegen::Plan& plan, DType dtype,
                                                const CompileOptions& options) = 0;
    // Whether prepare accepts plans with row steps (cross-sectional operators); fj::compile asks before
    // choosing, so that Backend::Auto can take one that does.
    virtual bool runs_row_steps() const { return false; }
};

// Backends known to this build. cpu_backend() is null when built without LLVM; cuda_backend() is null
// when no usable GPU, driver or NVRTC is found (why_not then says what is missing).
BackendImpl* cpu_backend();
BackendImpl* cuda_backend(std::string* why_not = nullptr);

}  // namespace fj::rt
