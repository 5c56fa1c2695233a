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
    // by Program::run (all equal, the dtype this executable was compiled for).
    virtual void run(const std::vector<Panel>& inputs, const std::vector<Panel>& outputs) = 0;
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
