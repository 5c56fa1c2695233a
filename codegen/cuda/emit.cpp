#include "codegen/cuda/emit.hpp"

#include <optional>

#include <fmt/format.h>

#include "codegen/cuda/column_scan.hpp"
#include "codegen/cuda/kernel_facts.hpp"
#include "codegen/cuda/window_scan.hpp"
#include "dsl/error.hpp"

namespace fj::codegen {

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

// The analyses of one kernel: its facts at once, each shape's plan when first asked for.
struct CudaKernelAnalysis::Impl {
    Impl(const ir::Kernel& k, const CudaEmitOptions& o) : options(o), facts(k, options) {}
    const CudaEmitOptions options;  // (before facts, which keep a reference)
    const detail::KernelFacts facts;
    std::optional<detail::ColumnScanPlan> column;
    std::optional<detail::WindowScanPlan> scan;
    std::optional<detail::ChainPlan> chain;
    const detail::ColumnScanPlan& column_plan() {
        if (!column) column = detail::plan_column_scan(facts);
        return *column;
    }
    const detail::WindowScanPlan& scan_plan() {
        if (!scan) scan = detail::plan_window_scan(facts);
        return *scan;
    }
    const detail::ChainPlan& chain_plan() {
        if (!chain) chain = detail::plan_chained_scan(facts, scan_plan());
        return *chain;
    }
};

CudaKernelAnalysis::CudaKernelAnalysis(const ir::Kernel& kernel, const CudaEmitOptions& options)
    : impl_(std::make_unique<Impl>(kernel, options)) {}
CudaKernelAnalysis::CudaKernelAnalysis(CudaKernelAnalysis&&) noexcept = default;
CudaKernelAnalysis& CudaKernelAnalysis::operator=(CudaKernelAnalysis&&) noexcept = default;
CudaKernelAnalysis::~CudaKernelAnalysis() = default;
const ir::Kernel& CudaKernelAnalysis::kernel() const { return impl_->facts.kernel; }
const CudaEmitOptions& CudaKernelAnalysis::options() const { return impl_->options; }

namespace {

// The analysis of `analysis` is that of `o`: every option but the shape's (window_scan, window_scan_chain)
// equal to those it was built with.
CudaKernelAnalysis::Impl& analysis_for(const CudaKernelAnalysis& analysis, const CudaEmitOptions& o) {
    CudaEmitOptions shape_aside = o;
    shape_aside.window_scan = analysis.options().window_scan;
    shape_aside.window_scan_chain = analysis.options().window_scan_chain;
    const bool same = shape_aside == analysis.options();
    if (!same)
        throw BackendError(fmt::format("CUDA emitter: kernel {}: options other than the analysis's (besides the kernel shape)",
                                       analysis.kernel().name));
    return analysis.impl();
}

}  // namespace

CudaColumnScanShape cuda_column_scan_shape(const CudaKernelAnalysis& analysis, const CudaEmitOptions& options) {
    return analysis_for(analysis, options).column_plan().shape();
}

std::string emit_cuda(const CudaKernelAnalysis& analysis, const CudaEmitOptions& options, CudaColumnScanShape* shape) {
    CudaKernelAnalysis::Impl& a = analysis_for(analysis, options);
    if (shape) *shape = {};
    if (options.repair && (options.window_scan || !options.strides.empty()))
        throw BackendError(fmt::format("CUDA emitter: kernel {}: a repair pass is a generic column scan", a.facts.kernel.name));
    if (options.window_scan && options.window_scan_chain)
        return detail::ScanEmitter(a.facts, a.scan_plan(), a.chain_plan()).run_chain();
    if (options.window_scan) return detail::ScanEmitter(a.facts, a.scan_plan(), detail::ChainPlan{}).run_scan();
    if (shape) *shape = a.column_plan().shape();
    return detail::emit_column_scan(a.facts, a.column_plan());
}

WindowScanLayout cuda_window_scan_layout(const CudaKernelAnalysis& analysis, const CudaEmitOptions& options) {
    CudaKernelAnalysis::Impl& a = analysis_for(analysis, options);
    if (options.window_scan_chain) {
        const detail::ChainPlan& h = a.chain_plan();
        if (!h.ok) return {0, 0, 0, h.why_not};
        return {h.smem_bytes, h.rows, static_cast<int>(a.scan_plan().sums.size()), ""};
    }
    const detail::WindowScanPlan& p = a.scan_plan();
    if (!p.ok) return {0, 0, 0, p.why_not};
    return {p.smem_bytes, kWindowScanBatchRows, static_cast<int>(p.sums.size()), ""};
}

WindowSplit cuda_window_sum_split(const CudaKernelAnalysis& analysis, const CudaEmitOptions& options) {
    CudaKernelAnalysis::Impl& a = analysis_for(analysis, options);
    return detail::window_sum_split(a.facts, a.scan_plan());
}

// The functions of a kernel and options alone: one analysis per call. Window and chained scans do not run
// refolds yet (as select_kernel, which says why): they take the kernel as if no refold ever ran.
namespace {
struct ScanKernel {
    std::optional<ir::Kernel> stripped;
    const ir::Kernel& kernel;
    ScanKernel(const ir::Kernel& k, bool scan)
        : stripped(scan && !k.refolds.empty() ? std::optional<ir::Kernel>(ir::without_refolds(k)) : std::nullopt),
          kernel(stripped ? *stripped : k) {}
};
}  // namespace

CudaColumnScanShape cuda_column_scan_shape(const ir::Kernel& kernel, const CudaEmitOptions& options) {
    return cuda_column_scan_shape(CudaKernelAnalysis(kernel, options), options);
}

std::string emit_cuda(const ir::Kernel& kernel, const CudaEmitOptions& options, CudaColumnScanShape* shape) {
    const ScanKernel k(kernel, options.window_scan);
    return emit_cuda(CudaKernelAnalysis(k.kernel, options), options, shape);
}

WindowScanLayout cuda_window_scan_layout(const ir::Kernel& kernel, const CudaEmitOptions& options) {
    const ScanKernel k(kernel, true);
    return cuda_window_scan_layout(CudaKernelAnalysis(k.kernel, options), options);
}

WindowSplit cuda_window_sum_split(const ir::Kernel& kernel, const CudaEmitOptions& options) {
    const ScanKernel k(kernel, true);
    return cuda_window_sum_split(CudaKernelAnalysis(k.kernel, options), options);
}

std::vector<std::string> cuda_compile_options(const std::string& arch, bool fmad) {
    // No --use_fast_math: IEEE division and square root, denormals kept (compensated sums need them).
    // Warning 177 (a variable never used): the float32 comparisons of inputs can leave an input's
    // float64 copy unused; NVRTC drops it, and the warning would only hide real ones in the log.
    return {"--gpu-architecture=" + arch, "-default-device", "--std=c++17", fmad ? "--fmad=true" : "--fmad=false",
            "--diag-suppress=177"};
}

}  // namespace fj::codegen
