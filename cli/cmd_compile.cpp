// `factorjit compile`: generate the CUDA kernels of expressions and compile them with NVRTC, ahead of
// time and without needing a GPU. Reports per kernel the NVRTC time, the registers and the local-memory
// frame (read from the cubin's ELF attributes; confirmed by the driver when a GPU of that arch is
// present), and optionally writes the generated source. The kernel cache is bypassed: the times are
// cold compilations.
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "codegen/plan.hpp"
#include "factorjit.hpp"

#ifdef FJ_WITH_CUDA
#include "runtime/cuda/cuda_api.hpp"
#include "runtime/cuda/compile.hpp"
#include "runtime/cuda/compile.hpp"
#endif

namespace {

const char* const kUsage = R"USAGE(usage: factorjit compile -e EXPR [-e EXPR ...] [--dtype f32|f64] [--arch sm_XY] [-o FILE.cu]
                         [--round-windows] [--ld N]

Generates the CUDA kernels of the expressions (compiled together, as `factorjit eval` would; the k-th
is named out<k-1>) and compiles them with NVRTC to a cubin. Needs NVRTC, not a GPU.

  -e, --expr EXPR    a factor expression; repeat for several outputs
  --dtype T          panel type the kernels are for: f32 (default) or f64
  --arch sm_XY       target GPU arch, e.g. sm_90 (default: the GPU's, else sm_90)
  -o, --output FILE  write the generated CUDA source there
  --cubin FILE       write the cubin there (FILE.1, FILE.2, ... for further kernels)
  --round-windows    round non-integer window lengths instead of flooring them
  --ld N             the kernels big panels get: specialised on leading dimension N (elements) for
                     every input and output, 16 rows per batch, L2 prefetch
  -h, --help         print this help

Prints, per kernel, the NVRTC compile time, registers per thread and local-memory bytes. Environment:
the FJ_CUDA_* tuning variables of bench/TUNING.md, FJ_DUMP_DIR (keep every source).
)USAGE";

}  // namespace

int cmd_compile(const std::vector<std::string>& argv) {
    using namespace fj::cli;
    std::vector<std::string> texts;
    fj::DType dtype = fj::DType::F32;
    std::string arch, out_path, cubin_path;
    long long fixed_ld = 0;
    fj::ParseOptions parse_options;
    ArgCursor c(argv, "compile");
    while (c.next()) {
        if (c.is("-h", "--help")) {
            std::fputs(kUsage, stdout);
            return 0;
        } else if (c.is("-e", "--expr")) {
            texts.push_back(c.value("an expression"));
        } else if (c.is("--dtype")) {
            const std::string t = c.value("f32 or f64");
            if (t == "f32" || t == "float32") dtype = fj::DType::F32;
            else if (t == "f64" || t == "float64") dtype = fj::DType::F64;
            else throw UsageError("--dtype must be f32 or f64, not '" + t + "'", "compile");
        } else if (c.is("--arch")) {
            arch = c.value("a GPU arch such as sm_90");
        } else if (c.is("-o", "--output")) {
            out_path = c.value("a file name");
        } else if (c.is("--cubin")) {
            cubin_path = c.value("a file name");
        } else if (c.is("--round-windows")) {
            c.no_value();
            parse_options.round_windows = true;
        } else if (c.is("--ld")) {
            const std::string v = c.value("a leading dimension");
            char* end = nullptr;
            fixed_ld = std::strtoll(v.c_str(), &end, 10);
            if (v.empty() || *end || fixed_ld < 1) throw UsageError("--ld must be a positive integer, not '" + v + "'", "compile");
        } else {
            c.unknown();
        }
    }
    if (texts.empty()) throw UsageError("compile needs at least one -e EXPR", "compile");
#ifndef FJ_WITH_CUDA
    (void)dtype;
    (void)fixed_ld;
    throw fj::BackendError("compile: this build has no CUDA backend (configured without cuda.h)");
#else
    namespace cu = fj::rt::cuda;
    std::string why;
    const cu::Nvrtc* nvrtc = cu::nvrtc(&why);
    if (!nvrtc) throw fj::BackendError("compile: " + why);
    const cu::Device* dev = cu::device();  // optional: only to default --arch and confirm registers
    if (arch.empty()) arch = dev ? dev->arch() : "sm_90";
    int major = 0, minor = 0;
    cu::parse_arch(arch, &major, &minor);  // throws on a malformed arch
    if (arch.rfind("sm_", 0) != 0) throw UsageError("--arch must be sm_XY (a cubin target), not '" + arch + "'", "compile");

    const std::vector<std::pair<std::string, fj::Expr>> named = numbered_outputs(texts, parse_options);
    fj::codegen::PlanOptions plan_options;
    plan_options.column_steps = false;  // it compiles generated kernels: long order statistics fused, as before
    const fj::codegen::Plan plan = fj::codegen::make_plan(named, dtype, plan_options);
    fj::codegen::refuse_row_steps(plan, "CUDA");  // cross-sectional operators have no CUDA kernels yet
    std::vector<const fj::ir::Kernel*> kernels;
    for (const auto& r : plan.steps) kernels.push_back(&r.kernel);

    const cu::CudaSettings settings = cu::CudaSettings::from_env();
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<cu::CudaCompiled> done = cu::compile_cuda_kernels(kernels, dtype, arch, true, settings, fixed_ld);
    const double wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

    const bool confirm = dev && dev->arch() == arch;
    for (cu::CudaCompiled& k : done) {
        std::string regs = k.registers >= 0 ? fmt::format("{} registers", k.registers) : "registers unknown";
        if (confirm) {
            // The driver's own count, from the loaded module.
            cu::make_current(*dev);
            cu::CUmodule m = nullptr;
            cu::CUfunction f = nullptr;
            int n = -1;
            FJ_CU(cuModuleLoadData, &m, k.entry.image.data());
            FJ_CU(cuModuleGetFunction, &f, m, k.function.c_str());
            FJ_CU(cuFuncGetAttribute, &n, cu::CU_FUNC_ATTRIBUTE_NUM_REGS, f);
            cu::driver_api().cuModuleUnload(m);
            regs = fmt::format("{} registers (driver)", n);
        }
        std::printf("kernel %s (%s, %s): NVRTC %.1f ms, %s, %s bytes local, cubin %zu bytes\n", k.function.c_str(),
                    std::string(fj::dtype_name(dtype)).c_str(), arch.c_str(), k.compile_ms, regs.c_str(),
                    k.stack_bytes >= 0 ? std::to_string(k.stack_bytes).c_str() : "?", k.entry.image.size());
        if (k.choice.scan.smem_bytes && k.choice.options.window_scan_chain)
            std::printf("  chained window scan: the windows of %d columns per block, batches of %d rows, in %d bytes of shared memory\n",
                        fj::codegen::kWindowScanColumns, k.choice.scan.box_rows, k.choice.scan.smem_bytes);
        else if (k.choice.scan.smem_bytes)
            std::printf("  window scan: the windows of %d columns per block in %d bytes of shared memory\n",
                        fj::codegen::kWindowScanColumns, k.choice.scan.smem_bytes);
        else if (k.choice.options.one_loop && k.choice.options.strides.empty())
            std::printf("  one row at a time, in one guarded loop (FJ_CUDA_ONE_LOOP)\n");
        else {
            const fj::codegen::CudaColumnScanShape& shape = k.shape;
            std::printf("  %d row(s) per batch%s\n", shape.batch_rows,
                        shape.echo_rings ? fmt::format(", {} echo ring(s) in shared memory ({} bytes per thread)",
                                                       shape.echo_rings, shape.smem_per_thread).c_str()
                                         : "");
        }
        if (!k.log.empty()) std::printf("  NVRTC log:\n%s\n", k.log.c_str());
        if (!k.dump_path.empty()) std::printf("  source: %s\n", k.dump_path.c_str());
    }
    std::printf("compiled %zu kernel(s) in %.1f ms (NVRTC %d.%d, %s)\n", done.size(), wall, nvrtc->version / 1000,
                nvrtc->version % 1000 / 10, nvrtc->library.c_str());
    for (std::size_t i = 0; i < done.size() && !cubin_path.empty(); ++i) {
        const std::string path = i == 0 ? cubin_path : cubin_path + "." + std::to_string(i);
        std::ofstream f(path, std::ios::binary | std::ios::trunc);
        f.write(done[i].entry.image.data(), static_cast<std::streamsize>(done[i].entry.image.size()));
        f.close();
        if (!f) throw fj::Error("compile: cannot write " + path);
        std::printf("wrote %s\n", path.c_str());
    }
    if (!out_path.empty()) {
        std::string all;
        for (const cu::CudaCompiled& k : done) all += k.source + "\n";
        std::ofstream f(out_path, std::ios::binary | std::ios::trunc);
        f.write(all.data(), static_cast<std::streamsize>(all.size()));
        f.close();
        if (!f) throw fj::Error("compile: cannot write " + out_path);
        std::printf("wrote %s\n", out_path.c_str());
    }
    return 0;
#endif
}
