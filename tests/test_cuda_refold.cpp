// Refolds (kernel_ir.hpp) on the CUDA backend: the column-scan kernels of the window-sum groups (sum, mean,
// var, std, cov, corr over 5, 20 and 250 rows, float32 and float64, generic and specialised, and a nested
// window whose refold reads a ring) compile with NVRTC and run their refolds, while window and chained scans
// are emitted from the kernel without refolds (select_kernel); and, on a GPU, every shape the selection picks
// agrees with the CPU backend on data with spikes (tests/refold_cases.hpp). The emulated column scans
// (test_cuda_emulated.cpp) check the same agreement without a GPU.
#include <doctest/doctest.h>

#include <cstdlib>
#include <tuple>
#include <string>
#include <vector>

#include "backend_cases.hpp"
#include "codegen/cuda/emit.hpp"
#include "codegen/cuda/select.hpp"
#include "codegen/plan.hpp"
#include "refold_cases.hpp"

#ifdef FJ_WITH_CUDA
#include "runtime/backend.hpp"
#include "runtime/cuda/cuda_api.hpp"
#include "runtime/cuda/compile.hpp"
#endif

#ifdef FJ_WITH_CUDA
namespace {

namespace cu = fj::rt::cuda;

// FJ_CUDA_* variables set for a scope, unset again after it.
struct EnvScope {
    std::vector<std::string> names;
    explicit EnvScope(const std::vector<std::pair<std::string, std::string>>& vars) {
        for (const auto& [n, v] : vars) {
            ::setenv(n.c_str(), v.c_str(), 1);
            names.push_back(n);
        }
    }
    ~EnvScope() {
        for (const std::string& n : names) ::unsetenv(n.c_str());
    }
};

}  // namespace

TEST_SUITE("cuda_compile") {

// (No shape runs refolds on CUDA yet, select.cpp says why: the kernels of these programs, which have them,
// compile as their kernels without them; the column scan's refold code is compiled and run on the host by
// tests/test_cuda_emulated.cpp.)
TEST_CASE("kernels with refolds compile with NVRTC, without them: window sums over 5, 20 and 250 rows, nested windows") {
    std::string why;
    if (!cu::nvrtc(&why)) {
        MESSAGE("skipped: NVRTC unavailable: " << why);
        return;
    }
    const std::vector<fj::test::NamedExprs> progs = fj::test::refold_programs();
    for (fj::DType dtype : {fj::DType::F32, fj::DType::F64}) {
        CAPTURE(fj::dtype_name(dtype));
        std::vector<fj::codegen::Plan> plans;
        for (const auto& p : progs) plans.push_back(fj::codegen::make_plan(p, dtype));
        std::vector<const fj::ir::Kernel*> kernels;
        for (const auto& p : plans)
            for (const auto& s : p.steps) {
                CHECK(!s.kernel.refolds.empty());
                kernels.push_back(&s.kernel);
            }
        // Generic kernels (the default: one guarded loop), generic in batches, specialised column scans
        // (window scans off: they would take the long windows).
        cu::CudaSettings generic, batched, fixed;
        generic.guard = batched.guard = fixed.guard = 1;
        batched.one_loop = 0;
        batched.unroll = 4;
        fixed.window_scan = 0;
        for (const auto& [name, s, ld] : {std::tuple{"generic", generic, 0LL}, std::tuple{"batched", batched, 0LL},
                                          std::tuple{"specialised", fixed, 50000LL}}) {
            CAPTURE(name);
            std::vector<cu::CudaCompiled> out;
            try {
                out = cu::compile_cuda_kernels(kernels, dtype, "sm_90", true, s, ld);
            } catch (const fj::Error& e) {
                FAIL(e.what());
            }
            REQUIRE(out.size() == kernels.size());
            for (std::size_t i = 0; i < out.size(); ++i) {
                const cu::CudaCompiled& c = out[i];
                CAPTURE(c.function);
                bool rings_in_registers = true;  // (longer rings are local arrays, refolds or not)
                for (const fj::ir::Ring& r : kernels[i]->rings) rings_in_registers = rings_in_registers && r.size <= fj::codegen::CudaEmitOptions{}.reg_ring_max;
                CHECK(c.choice.shape == fj::codegen::KernelShape::ColumnScan);
                CHECK(c.choice.flags);  // (raises repair flags: no refold of its own)
                CHECK(c.source.find("// refold") == std::string::npos);
                CHECK(c.source.find("atomicOr(p.flags") != std::string::npos);
                CHECK(c.registers > 0);
                // (Flagging kernels are held to 128 registers, which spills a few bytes: codegen/cuda/column_scan.cpp.)
                if (rings_in_registers) CHECK(c.stack_bytes <= 512);
                CHECK_MESSAGE(c.log.find("warning") == std::string::npos, c.log);
            }
        }
        // The repair passes: the generic one-loop column scan with the refolds, run where flags are set.
        for (const fj::ir::Kernel* k : kernels) {
            CAPTURE(k->name);
            const fj::codegen::KernelChoice repair = fj::codegen::select_repair_kernel(dtype, generic);
            cu::CudaCompiled c;
            try {
                c = cu::compile_cuda_kernel(*k, dtype, "sm_90", true, repair);
            } catch (const fj::Error& e) {
                FAIL(e.what());
            }
            CHECK(c.source.find("// refold 0:") != std::string::npos);
            CHECK(c.source.find(">> (j & 31)) & 1u)) continue;") != std::string::npos);
            CHECK(c.key != cu::cuda_kernel_key(*k, dtype, "sm_90", true, generic));
            CHECK(c.registers > 0);
            CHECK_MESSAGE(c.log.find("warning") == std::string::npos, c.log);
        }
    }
}

TEST_CASE("window scans are chosen and emitted from the kernel without refolds, column scans from the one raising flags") {
    const fj::Expr A = fj::input("A"), B = fj::input("B");
    const fj::codegen::Plan plan =
        fj::codegen::make_plan({{"c", fj::corr(fj::window(A, 250), fj::window(B, 250))}}, fj::DType::F32);
    const fj::ir::Kernel& k = plan.steps[0].kernel;
    REQUIRE(!k.refolds.empty());
    const std::vector<long long> lds(k.inputs.size() + k.outputs.size(), 50000);
    cu::CudaSettings s;
    s.unroll = 16;
    s.guard = 1;
    for (int chain : {0, 1}) {
        CAPTURE(chain);
        s.window_scan = 1;
        s.scan_chain = chain;
        const fj::codegen::KernelChoice c = fj::codegen::select_kernel(k, fj::DType::F32, {lds, true}, {"sm_90", 0}, s);
        REQUIRE(c.shape == (chain ? fj::codegen::KernelShape::ChainedScan : fj::codegen::KernelShape::WindowScan));
        REQUIRE(c.scan_kernel);
        CHECK(c.scan_kernel->refolds.empty());
        CHECK(&c.kernel_for(k) == c.scan_kernel.get());
        CHECK(&c.analysis->kernel() == c.scan_kernel.get());
        // The same source as the kernel without refolds gives, through the kernel-only functions too.
        const std::string src = fj::codegen::emit_cuda(*c.analysis, c.options);
        CHECK(src == fj::codegen::emit_cuda(fj::ir::without_refolds(k), c.options));
        CHECK(src == fj::codegen::emit_cuda(k, c.options));
        CHECK(src.find("refold") == std::string::npos);
    }
    // Column scans: from ir::flag_refolds (flags, no refold of their own); the kernel-only emission still emits
    // the refolds (the repair pass and the emulated tests run it), and the cache key changes with the refolds.
    s.window_scan = 0;
    const fj::codegen::KernelChoice col = fj::codegen::select_kernel(k, fj::DType::F32, {lds, true}, {"sm_90", 0}, s);
    CHECK(col.shape == fj::codegen::KernelShape::ColumnScan);
    CHECK(col.flags);
    REQUIRE(col.scan_kernel);
    CHECK(col.scan_kernel->refolds.empty());
    CHECK(col.scan_kernel->hash() == fj::ir::flag_refolds(k).hash());
    CHECK(&col.kernel_for(k) == col.scan_kernel.get());
    const std::string flagging = fj::codegen::emit_cuda(col.kernel_for(k), col.options);
    CHECK(flagging.find("// refold") == std::string::npos);
    CHECK(flagging.find("fj_need |=") != std::string::npos);
    CHECK(fj::codegen::emit_cuda(k, col.options).find("// refold 0:") != std::string::npos);
    // With FJ_CUDA_GUARD=0 (and by default for float32) the column scan is the kernel without refolds, as before them.
    cu::CudaSettings off = s;
    off.guard = 0;
    const fj::codegen::KernelChoice col0 = fj::codegen::select_kernel(k, fj::DType::F32, {lds, true}, {"sm_90", 0}, off);
    CHECK(!col0.flags);
    REQUIRE(col0.scan_kernel);
    CHECK(col0.scan_kernel->hash() == fj::ir::without_refolds(k).hash());
    // By default (FJ_CUDA_WINDOW_SCAN=-1) a guarded kernel takes the column scan, whose guards hold the contract after
    // spikes, where the unguarded one would be a window scan (w = 250: kWindowScanMinLag).
    cu::CudaSettings by_default = s;
    by_default.window_scan = -1;
    by_default.scan_chain = -1;
    const fj::codegen::KernelChoice guarded_default =
        fj::codegen::select_kernel(k, fj::DType::F32, {lds, true}, {"sm_90", 0}, by_default);
    CHECK(guarded_default.shape == fj::codegen::KernelShape::ColumnScan);
    CHECK(guarded_default.flags);
    by_default.guard = 0;
    CHECK(fj::codegen::select_kernel(k, fj::DType::F32, {lds, true}, {"sm_90", 0}, by_default).shape != fj::codegen::KernelShape::ColumnScan);
    // A kernel without refolds raises none.
    const fj::codegen::KernelChoice plain =
        fj::codegen::select_kernel(fj::ir::without_refolds(k), fj::DType::F32, {lds, true}, {"sm_90", 0}, s);
    CHECK(!plain.flags);
    CHECK(fj::codegen::emit_cuda(plain.kernel_for(fj::ir::without_refolds(k)), plain.options).find("fj_need") == std::string::npos);
    if (cu::nvrtc(nullptr)) {
        fj::ir::Kernel changed = k;
        changed.refolds[0].body.push_back({fj::ir::Prim::Const, fj::ir::Type::F64});
        CHECK(cu::cuda_kernel_key(changed, fj::DType::F32, "sm_90", true, col) !=
              cu::cuda_kernel_key(k, fj::DType::F32, "sm_90", true, col));
        CHECK(cu::cuda_kernel_key(fj::ir::without_refolds(k), fj::DType::F32, "sm_90", true, col) !=
              cu::cuda_kernel_key(k, fj::DType::F32, "sm_90", true, col));
    }
}

}  // TEST_SUITE

TEST_SUITE("cuda_gpu") {

// On a GPU: every refold program (tests/refold_cases.hpp) in every kernel shape the selection picks (generic
// and specialised column scans, which raise repair flags for the repair pass; window and chained window scans
// where settings force them, for the float32 programs they can run), against the CPU backend on the same time
// tiles. Window and chained scans have no guard yet (select_kernel): their outputs after a spike are only
// reported, not held to the CPU's.
TEST_CASE("refolds on the GPU agree with the CPU backend on data with spikes, in every kernel shape") {
    std::string why;
    if (!fj::rt::cuda_backend(&why)) {
        MESSAGE("skipped: no CUDA backend: " << why);
        return;
    }
    if (!fj::rt::cpu_backend()) {  // (the GPU machine's build has no LLVM: the spikes suite judges CUDA there)
        MESSAGE("skipped: no CPU backend in this build to compare with");
        return;
    }
    const std::int64_t rows = 1200, cols = 256;
    const std::vector<fj::test::NamedExprs> progs = fj::test::refold_programs();
    struct Shape {
        const char* name;
        std::vector<std::pair<std::string, std::string>> env;
        bool guarded;  // runs refolds (column scans)
    };
    // (Batches of 4 rows in the specialised kernels: NVRTC's time; the emulated test covers other batches.)
    const std::vector<Shape> shapes = {
        // (Window and chained scans have no guard yet, select.cpp: their comparisons are reported, not held.)
        {"generic column scan", {{"FJ_CUDA_FIXED_LD", "0"}, {"FJ_CUDA_GUARD", "1"}}, true},
        {"specialised column scan", {{"FJ_CUDA_FIXED_LD", "1"}, {"FJ_CUDA_WINDOW_SCAN", "0"}, {"FJ_CUDA_UNROLL", "4"}, {"FJ_CUDA_GUARD", "1"}}, true},
        {"specialised column scan, FJ_CUDA_GUARD unset (the default: float32 unguarded)", {{"FJ_CUDA_FIXED_LD", "1"}, {"FJ_CUDA_WINDOW_SCAN", "0"}, {"FJ_CUDA_UNROLL", "4"}}, false},
        {"window scan", {{"FJ_CUDA_FIXED_LD", "1"}, {"FJ_CUDA_WINDOW_SCAN", "1"}, {"FJ_CUDA_SCAN_CHAIN", "0"}}, false},
        {"chained window scan", {{"FJ_CUDA_FIXED_LD", "1"}, {"FJ_CUDA_WINDOW_SCAN", "1"}, {"FJ_CUDA_SCAN_CHAIN", "1"}}, false},
    };
    for (fj::DType dtype : {fj::DType::F32, fj::DType::F64}) {
        CAPTURE(fj::dtype_name(dtype));
        const fj::test::Dataset ds = fj::test::refold_data(dtype, rows, cols);
        for (std::int64_t tile : {0LL, 97LL}) {
            CAPTURE(tile);
            fj::CompileOptions cpu;
            cpu.backend = fj::Backend::Cpu;
            cpu.tile_rows = tile > 0 ? tile : rows;
            fj::CompileOptions gpu;
            gpu.backend = fj::Backend::Cuda;
            gpu.tile_rows = cpu.tile_rows;  // (the same passes: a pass's first rows decide its shifts)
            for (const auto& p : progs) {
                const auto want = fj::test::compile_and_run(p, ds.inputs, rows, cols, dtype, cpu);
                REQUIRE(want);
                for (const Shape& sh : shapes) {
                    if (!sh.guarded && dtype != fj::DType::F32) continue;  // (window scans: float32 panels only)
                    CAPTURE(sh.name);
                    EnvScope env(sh.env);
                    const auto got = fj::test::compile_and_run(p, ds.inputs, rows, cols, dtype, gpu);
                    REQUIRE(got);
                    for (const auto& [name, e] : p) {
                        const std::string msg = fj::test::agree(got->at(name), want->at(name), cols, dtype);
                        if (sh.guarded) CHECK_MESSAGE(msg.empty(), "`" << e.str() << "`: " << msg);
                        else if (!msg.empty()) MESSAGE(sh.name << ", `" << e.str() << "` (no refolds in this shape yet): " << msg);
                    }
                }
            }
        }
    }
}

}  // TEST_SUITE

#else

TEST_SUITE("cuda_compile") {
TEST_CASE("refolds on CUDA: compiled out (no CUDA backend)") { MESSAGE("skipped: built without the CUDA backend"); }
}  // TEST_SUITE

#endif  // FJ_WITH_CUDA
