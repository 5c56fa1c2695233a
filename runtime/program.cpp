#include "runtime/program.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include <fmt/format.h>

#include "codegen/plan.hpp"
#include "runtime/backend.hpp"

namespace fj {

namespace rt {
#ifndef FJ_WITH_LLVM
BackendImpl* cpu_backend() { return nullptr; }
#endif
#ifndef FJ_WITH_CUDA
BackendImpl* cuda_backend(std::string* why_not) {
    if (why_not) *why_not = "this build has no CUDA backend (configured with FJ_WITH_CUDA=OFF or without cuda.h)";
    return nullptr;
}
#endif
}  // namespace rt

struct Program::Impl {
    std::vector<std::pair<std::string, Expr>> outputs;
    CompileOptions options;
    Backend backend = Backend::Cpu;
    rt::BackendImpl* impl = nullptr;
    std::mutex mutex;
    // By dtype: float64 kernels keep exact sums, so they differ. The float32 plan is made by compile()
    // (it validates the program and names its inputs and outputs); the float64 one at the first float64 run.
    std::unique_ptr<codegen::Plan> plans[2];
    std::unique_ptr<rt::Executable> executables[2];

    codegen::PlanOptions plan_options() const {
        return {options.exact_sums ? codegen::Sums::Exact : codegen::Sums::Auto, options.materialize};
    }
    const codegen::Plan& plan() const { return *plans[0]; }

    rt::Executable& executable(DType dtype) {
        std::lock_guard<std::mutex> lock(mutex);
        const int k = static_cast<int>(dtype);
        if (!plans[k]) plans[k] = std::make_unique<codegen::Plan>(codegen::make_plan(outputs, dtype, plan_options()));
        if (!executables[k]) executables[k] = impl->prepare(*plans[k], dtype, options);
        return *executables[k];
    }
};

namespace {

rt::BackendImpl* choose_backend(Backend requested, Backend& chosen) {
    if (requested == Backend::Cpu) {
        chosen = Backend::Cpu;
        if (rt::BackendImpl* b = rt::cpu_backend()) return b;
        throw BackendError("compile: the CPU backend is not in this build (built without LLVM)");
    }
    std::string why;
    if (rt::BackendImpl* b = rt::cuda_backend(&why)) {
        chosen = Backend::Cuda;
        return b;
    }
    if (requested == Backend::Cuda) throw BackendError(fmt::format("compile: the CUDA backend is unavailable: {}", why));
    rt::BackendImpl* cpu = rt::cpu_backend();
    if (!cpu) throw BackendError(fmt::format("compile: no backend: CUDA is unavailable ({}) and this build has no CPU backend", why));
    static std::once_flag said;
    std::call_once(said, [&] {
        if (!std::getenv("FJ_QUIET")) std::fprintf(stderr, "factorjit: no usable GPU (%s); running on the CPU\n", why.c_str());
    });
    chosen = Backend::Cpu;
    return cpu;
}

std::string shape(const Panel& p) {
    return fmt::format("{} x {} {} (ld {})", p.rows, p.cols, dtype_name(p.dtype), p.ld);
}

void check_view(const Panel& p, const std::string& role, const std::string& name) {
    if (p.rows < 0 || p.cols < 0) throw InputError(fmt::format("{} '{}': negative shape {} x {}", role, name, p.rows, p.cols));
    if (p.cols > 0 && p.ld < p.cols)
        throw InputError(fmt::format("{} '{}': leading dimension {} is smaller than its {} columns", role, name, p.ld, p.cols));
    if (!p.data && p.rows > 0 && p.cols > 0) throw InputError(fmt::format("{} '{}': null data pointer", role, name));
}

// Byte range a panel covers, for overlap checks between outputs and everything else.
std::pair<const char*, const char*> extent(const Panel& p) {
    const char* b = static_cast<const char*>(p.data);
    if (p.rows == 0 || p.cols == 0) return {b, b};
    return {b, b + ((p.rows - 1) * p.ld + p.cols) * static_cast<std::int64_t>(dtype_size(p.dtype))};
}

bool overlaps(const Panel& a, const Panel& b) {
    auto [a0, a1] = extent(a);
    auto [b0, b1] = extent(b);
    return a.memory == b.memory && a0 < b1 && b0 < a1;
}

}  // namespace

Program compile(const std::vector<std::pair<std::string, Expr>>& outputs, const CompileOptions& options) {
    auto impl = std::make_shared<Program::Impl>();
    impl->outputs = outputs;
    impl->options = options;
    impl->plans[0] = std::make_unique<codegen::Plan>(codegen::make_plan(outputs, DType::F32, impl->plan_options()));
    impl->impl = choose_backend(options.backend, impl->backend);
    // Cross-sectional operators run as row steps, which only some backends have (not CUDA yet): Auto takes
    // the CPU for such a program, with a notice; a backend asked for by name refuses it here, at compile.
    const codegen::Plan& plan = *impl->plans[0];
    if (plan.has_row_steps() && !impl->impl->runs_row_steps()) {
        rt::BackendImpl* cpu = rt::cpu_backend();
        const std::string backend = impl->backend == Backend::Cuda ? "CUDA" : impl->impl->name();
        if (options.backend == Backend::Auto && cpu && cpu->runs_row_steps()) {
            if (!std::getenv("FJ_QUIET"))
                std::fprintf(stderr, "factorjit: cross-sectional operator '%s' is not on the %s backend yet; running "
                                     "this program on the CPU\n",
                             std::string(op_name(plan.first_row_step()->row_op()->op)).c_str(), backend.c_str());
            impl->impl = cpu;
            impl->backend = Backend::Cpu;
        } else {
            codegen::refuse_row_steps(plan, backend);
        }
    }
    return Program(impl);
}

const std::vector<std::string>& Program::output_names() const { return impl_->plan().outputs; }
const std::vector<std::string>& Program::input_names() const { return impl_->plan().inputs; }
Backend Program::backend() const { return impl_->backend; }

namespace {

// The checked run: the executable for the panels' dtype and the panels in the plan's order.
struct CheckedRun {
    rt::Executable* executable = nullptr;
    std::vector<Panel> ins, outs;
};

CheckedRun check_run(Program::Impl& impl, const std::map<std::string, Panel>& inputs,
                            const std::map<std::string, Panel>& outputs) {
    const codegen::Plan& plan = impl.plan();
    std::vector<Panel> ins, outs;
    const Panel* first = nullptr;
    std::string first_name;
    auto same_as_first = [&](const Panel& p, const std::string& role, const std::string& name) {
        check_view(p, role, name);
        if (!first) {
            first = &p;
            first_name = name;
            return;
        }
        if (p.rows != first->rows || p.cols != first->cols || p.dtype != first->dtype || p.memory != first->memory)
            throw InputError(fmt::format("{} '{}' is {}{}, but '{}' is {}{}: all inputs and outputs of a program must "
                                         "have the same shape and dtype",
                                         role, name, shape(p), p.memory == Memory::Cuda ? " on the GPU" : "",
                                         first_name, shape(*first), first->memory == Memory::Cuda ? " on the GPU" : ""));
    };
    for (const std::string& name : plan.inputs) {
        auto it = inputs.find(name);
        if (it == inputs.end())
            throw InputError(fmt::format("missing input '{}' (the program reads {})", name, fmt::join(plan.inputs, ", ")));
        same_as_first(it->second, "input", name);
        ins.push_back(it->second);
    }
    for (const auto& [name, p] : outputs)
        if (std::find(plan.outputs.begin(), plan.outputs.end(), name) == plan.outputs.end())
            throw InputError(fmt::format("unknown output '{}' (the program writes {})", name, fmt::join(plan.outputs, ", ")));
    for (const std::string& name : plan.outputs) {
        auto it = outputs.find(name);
        if (it == outputs.end())
            throw InputError(fmt::format("missing output '{}' (the program writes {})", name, fmt::join(plan.outputs, ", ")));
        same_as_first(it->second, "output", name);
        outs.push_back(it->second);
    }
    // Kernels re-read inputs at earlier rows after writing later ones: outputs must not alias anything.
    for (std::size_t o = 0; o < outs.size(); ++o) {
        for (std::size_t i = 0; i < ins.size(); ++i)
            if (overlaps(outs[o], ins[i]))
                throw InputError(fmt::format("output '{}' overlaps input '{}': outputs need their own memory",
                                             plan.outputs[o], plan.inputs[i]));
        for (std::size_t p = 0; p < o; ++p)
            if (overlaps(outs[o], outs[p]))
                throw InputError(fmt::format("outputs '{}' and '{}' overlap", plan.outputs[p], plan.outputs[o]));
    }
    if (first->memory == Memory::Cuda && impl.backend != Backend::Cuda)
        throw InputError(fmt::format("'{}' is GPU memory but the program was compiled for the CPU backend", first_name));
    return {&impl.executable(first->dtype), std::move(ins), std::move(outs)};
}

void check_options(const RunOptions& options) {
    if (options.max_device_bytes < 0 || options.max_host_bytes < 0 || options.chunk_rows < 0 || options.chunk_cols < 0)
        throw InputError(fmt::format("RunOptions: negative budget or chunk size (max_device_bytes {}, max_host_bytes {}, "
                                     "chunk_rows {}, chunk_cols {})",
                                     options.max_device_bytes, options.max_host_bytes, options.chunk_rows,
                                     options.chunk_cols));
    if (options.chunk_rows > 0 && options.chunk_cols > 0)
        throw InputError("RunOptions: chunk_rows and chunk_cols are both set; a run is chunked over time or over "
                         "columns, not both");
    for (int d : options.devices)
        if (d < 0) throw InputError(fmt::format("RunOptions::devices: {} is not a device ordinal (negative)", d));
}

}  // namespace

void Program::run(const std::map<std::string, Panel>& inputs, const std::map<std::string, Panel>& outputs,
                  const RunOptions& options) const {
    check_options(options);
    CheckedRun r = check_run(*impl_, inputs, outputs);
    r.executable->run(r.ins, r.outs, options);
}

void Program::run_async(const std::map<std::string, Panel>& inputs, const std::map<std::string, Panel>& outputs,
                        void* stream, const RunOptions& options) const {
    check_options(options);
    CheckedRun r = check_run(*impl_, inputs, outputs);
    r.executable->run_async(r.ins, r.outs, stream, options);
}

std::string Program::explain() const {
    std::string out = codegen::explain(impl_->plan());
    std::lock_guard<std::mutex> lock(impl_->mutex);
    bool any = false;
    for (const auto& e : impl_->executables)
        if (e) {
            out += e->explain();
            any = true;
        }
    if (!any) out += fmt::format("backend {} (kernels are compiled at the first run of each dtype)\n", impl_->impl->name());
    return out;
}

}  // namespace fj
