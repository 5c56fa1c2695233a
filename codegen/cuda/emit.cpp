#include "codegen/cuda/emit.hpp"

#include "codegen/cuda/emitter.hpp"

namespace fj::codegen {

using detail::Emitter;

std::string cuda_kernel_name(const ir::Kernel& kernel) {
    std::string n;
    for (char c : kernel.name) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
        n += ok ? c : '_';
    }
    if (n.empty() || (n[0] >= '0' && n[0] <= '9') || n.rfind("fj", 0) != 0) n = "fj_" + n;
    if (n.size() > 120) n.resize(120);
    return n;
}

CudaColumnScanShape cuda_column_scan_shape(const ir::Kernel& kernel, const CudaEmitOptions& options) {
    return Emitter(kernel, options).column_scan_shape();
}

std::string emit_cuda(const ir::Kernel& kernel, const CudaEmitOptions& options, CudaColumnScanShape* shape) {
    if (shape) *shape = {};
    if (options.window_scan && options.window_scan_chain) return Emitter(kernel, options).run_chain();
    if (options.window_scan) return Emitter(kernel, options).run_scan();
    Emitter e(kernel, options);
    if (shape) *shape = e.column_scan_shape();
    return e.run();
}

WindowScanLayout cuda_window_scan_layout(const ir::Kernel& kernel, const CudaEmitOptions& options) {
    Emitter e(kernel, options);
    return options.window_scan_chain ? e.chain_layout() : e.scan_layout();
}

WindowSplit cuda_window_sum_split(const ir::Kernel& kernel, const CudaEmitOptions& options) {
    return Emitter(kernel, options).scan_window_split();
}

std::vector<std::string> cuda_compile_options(const std::string& arch, bool fmad) {
    // No --use_fast_math: IEEE division and square root, denormals kept (compensated sums need them).
    // Warning 177 (a variable never used): the float32 comparisons of inputs can leave an input's
    // float64 copy unused; NVRTC drops it, and the warning would only hide real ones in the log.
    return {"--gpu-architecture=" + arch, "-default-device", "--std=c++17", fmad ? "--fmad=true" : "--fmad=false",
            "--diag-suppress=177"};
}

}  // namespace fj::codegen
