#include "codegen/cuda/select.hpp"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "dsl/error.hpp"

namespace fj::codegen {

void parse_arch(const std::string& arch, int* major, int* minor) {
    std::string digits;
    if (arch.rfind("sm_", 0) == 0) digits = arch.substr(3);
    else if (arch.rfind("compute_", 0) == 0) digits = arch.substr(8);
    while (!digits.empty() && (digits.back() == 'a' || digits.back() == 'f')) digits.pop_back();  // sm_90a
    const bool ok = digits.size() >= 2 && digits.size() <= 3 &&
                    std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!ok) throw Error(fmt::format("bad CUDA arch '{}': expected sm_XY such as sm_90", arch));
    const int v = std::stoi(digits);
    *major = v / 10;
    *minor = v % 10;
}

const char* kernel_shape_name(KernelShape shape) {
    switch (shape) {
    case KernelShape::ColumnScan: return "column scan";
    case KernelShape::WindowScan: return "window scan";
    case KernelShape::ChainedScan: return "chained window scan";
    }
    return "?";
}

bool specialise_for(std::int64_t rows, std::int64_t cols, const CudaSettings& settings) {
    if (settings.fixed_ld >= 0) return settings.fixed_ld == 1;
    return static_cast<double>(rows) * static_cast<double>(cols) >= static_cast<double>(kSpecializeElements);
}

namespace {
// The settings specialised kernels are made with: kSpecializedUnroll rows per batch unless FJ_CUDA_UNROLL
// is set.
CudaSettings specialised_settings(const CudaSettings& settings) {
    CudaSettings s = settings;
    if (!s.unroll_given) s.unroll = kSpecializedUnroll;
    return s;
}
}  // namespace

int long_window_inputs(const ir::Kernel& kernel) {
    std::set<std::int32_t> slots;
    for (const ir::Inst& x : kernel.body)
        if (x.op == ir::Prim::Input && x.lag >= kWindowScanMinLag) slots.insert(x.slot);
    return static_cast<int>(slots.size());
}

KernelChoice select_kernel(const ir::Kernel& kernel, DType dtype, const PanelClass& panels, const DeviceFacts& device,
                           const CudaSettings& settings) {
    KernelChoice c;
    // Refolds on CUDA. Where guarded() (float64 kernels by default, all with FJ_CUDA_GUARD=1) a column scan runs the kernel with its refolds as repair flags
    // (ir::flag_refolds), and the repair pass (select_repair_kernel) runs the flagged passes again with the
    // refolds: the spike tests pass on the H200 that way, but the flags' guards took the headline kernel from
    // 114 to 158 registers and G1 at 20,000 x 20,000 from 1.42 to 1.93 ms (G5 from 64 to 29 % of copy
    // bandwidth; bench/RESULTS.md), so it is off for float32 until the guard costs less. A refold block in each of a
    // batch's rows, the first try, took 128 registers and 2.26 ms. By default, and always for window and chained
    // scans (their sums are chained across a block's warps: no guard yet), the code is chosen and emitted from
    // the kernel as if no refold ever ran (ir::without_refolds; docs/numerics.md).
    if (!kernel.refolds.empty()) c.scan_kernel = std::make_shared<const ir::Kernel>(ir::without_refolds(kernel));
    // The column scan's kernel (after the window scans were considered, which look at the one without refolds).
    auto column_scan = [&]() -> KernelChoice& {
        if (!kernel.refolds.empty() && guarded(settings, dtype)) {
            c.analysis.reset();  // (of the kernel without refolds)
            c.scan_kernel = std::make_shared<const ir::Kernel>(ir::flag_refolds(kernel));
            c.flags = true;
        }
        return c;
    };
    const ir::Kernel& k = c.kernel_for(kernel);
    const bool fixed = !panels.strides.empty();
    c.settings = fixed ? specialised_settings(settings) : settings;
    const CudaSettings& s = c.settings;
    CudaEmitOptions& eo = c.options;
    eo.dtype = dtype;
    eo.unroll = s.unroll;
    eo.strides = panels.strides;
    eo.big_body_shapes = s.big_body_shapes;
    eo.one_loop = s.one_loop;
    eo.rsqrt_refine = s.rsqrt_refine;
    if (!fixed) return column_scan();
    eo.l2_prefetch_rows = s.l2_prefetch < 0 ? kSpecializedL2Prefetch : s.l2_prefetch;
    eo.batched_edges = s.batched_edges;
    eo.warm_only_rows = s.warm_rows;
    eo.echo_rings = s.echo;
    eo.quiet_batches = s.quiet;
    eo.cache_hints = s.cache_hints >= 0 ? s.cache_hints == 1 : k.max_input_lag >= kCacheHintMinLag;
    eo.window_scan_ahead = s.scan_ahead;  // (read by window scans only)

    int major = 0, minor = 0;
    parse_arch(device.arch, &major, &minor);
    // Window and chained scans have no guard: a kernel with refolds that is guarded() takes the column scan (with its
    // repair flags), which holds the contract after spikes, unless a window scan is asked for (FJ_CUDA_WINDOW_SCAN=1).
    const bool needs_guard = !kernel.refolds.empty() && guarded(settings, dtype);
    const bool wanted =
        s.window_scan == 1 || (s.window_scan == -1 && !needs_guard && long_window_inputs(k) >= kWindowScanMinInputs);
    if (major * 10 + minor < kWindowScanMinArch || !panels.tensor_copies || !wanted) return column_scan();
    // One analysis of the kernel for both variants' layouts and the emission of whichever is chosen (it refers
    // to the kernel it analysed: a stripped one is kept alive with it).
    std::shared_ptr<const CudaKernelAnalysis> analysis;
    if (!c.scan_kernel) {
        analysis = std::make_shared<const CudaKernelAnalysis>(k, eo);
    } else {
        analysis = std::shared_ptr<const CudaKernelAnalysis>(new CudaKernelAnalysis(k, eo),
                                                             [keep = c.scan_kernel](const CudaKernelAnalysis* a) { delete a; });
    }
    c.analysis = analysis;
    // A window scan needs its rings in one block's shared memory: a device that allows less per block than a
    // variant needs (kWindowScanMaxSharedBytes is sized for sm_90) gets the next variant, then the column scan.
    auto fits = [&](const WindowScanLayout& l) {
        return l.smem_bytes > 0 && (device.max_block_smem <= 0 || l.smem_bytes <= device.max_block_smem);
    };
    CudaEmitOptions scan = eo;
    scan.window_scan = true;
    if (s.scan_chain != 0) {
        CudaEmitOptions chain = scan;  // the chained variant, where the kernel's sums split
        chain.window_scan_chain = true;
        WindowScanLayout l = cuda_window_scan_layout(*analysis, chain);
        if (fits(l) && (s.scan_chain == 1 || l.sums >= kChainMinSums)) {
            c.shape = KernelShape::ChainedScan;
            c.options = std::move(chain);
            c.scan = std::move(l);
            return c;
        }
    }
    if (WindowScanLayout l = cuda_window_scan_layout(*analysis, scan); fits(l)) {
        c.shape = KernelShape::WindowScan;
        c.options = std::move(scan);
        c.scan = std::move(l);
        return c;
    }
    return column_scan();
}

KernelChoice select_repair_kernel(DType dtype, const CudaSettings& settings) {
    KernelChoice c;
    c.settings = settings;
    c.settings.one_loop = 1;
    CudaEmitOptions& eo = c.options;
    eo.dtype = dtype;
    eo.unroll = 1;
    eo.one_loop = true;
    eo.rsqrt_refine = settings.rsqrt_refine;
    eo.repair = true;
    return c;
}

}  // namespace fj::codegen
