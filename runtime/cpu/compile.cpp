#include "runtime/cpu/compile.hpp"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <unordered_map>

#include <fmt/format.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/Module.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>

#include "dsl/error.hpp"
#include "codegen/cpu/emit.hpp"

namespace fj::cpu {

namespace {
std::string llvm_message(llvm::Error e) { return llvm::toString(std::move(e)); }

template <class T>
T unwrap(llvm::Expected<T> v, const char* what) {
    if (!v) throw BackendError(fmt::format("cpu backend: {}: {}", what, llvm_message(v.takeError())));
    return std::move(*v);
}
}  // namespace

struct LlvmJit::State {
    std::mutex mutex;
    std::unique_ptr<llvm::orc::LLJIT> jit;
    std::unique_ptr<llvm::TargetMachine> tm;  // for the optimisation pipeline's cost model
    std::unordered_map<std::uint64_t, KernelFn> cache;
    int unique = 0;
};

LlvmJit& LlvmJit::instance() {
    static LlvmJit jit;
    return jit;
}

LlvmJit::LlvmJit() : state_(new State) {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    auto jtmb = unwrap(llvm::orc::JITTargetMachineBuilder::detectHost(), "detecting the host CPU");
    jtmb.setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
    cpu_ = jtmb.getCPU();
    const auto features = llvm::sys::getHostCPUFeatures();
    auto has = [&](const char* f) { auto it = features.find(f); return it != features.end() && it->second; };
    avx512_ = has("avx512f") && has("avx512vl");
    lanes_ = has("avx512f") ? 8 : has("avx") ? 4 : 2;
    if (const char* env = std::getenv("FJ_CPU_LANES")) {  // for tests of other vector widths
        int v = std::atoi(env);
        if (v == 2 || v == 4 || v == 8 || v == 16) lanes_ = v;
    }
    state_->tm = unwrap(jtmb.createTargetMachine(), "creating the target machine");
    state_->jit = unwrap(llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(std::move(jtmb)).create(), "creating the JIT");
    // libm (exp, log, pow on vectors are scalarised into calls) and anything else from the process.
    auto gen = unwrap(llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
                          state_->jit->getDataLayout().getGlobalPrefix()),
                      "opening the process' symbols");
    state_->jit->getMainJITDylib().addGenerator(std::move(gen));
}

CompiledKernel LlvmJit::get(const ir::Kernel& kernel, DType dtype) {
    const std::uint64_t key = kernel.hash() * 31 + static_cast<std::uint64_t>(dtype) * 7 + lanes_ * 2 + avx512_;
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (auto it = state_->cache.find(key); it != state_->cache.end()) return {it->second, true, 0};

    const auto t0 = std::chrono::steady_clock::now();
    auto ctx = std::make_unique<llvm::LLVMContext>();
    // Symbols must be unique in the JIT's dylib: kernels of equal name but different IR can coexist.
    ir::Kernel named = kernel;
    named.name = fmt::format("{}_{}_{}", kernel.name, dtype == DType::F32 ? "f32" : "f64", state_->unique++);
    std::unique_ptr<llvm::Module> mod = emit_llvm(named, dtype, lanes_, avx512_, *ctx);
    mod->setDataLayout(state_->jit->getDataLayout());
    mod->setTargetTriple(state_->tm->getTargetTriple().str());
    for (llvm::Function& f : *mod) {
        f.addFnAttr("target-cpu", state_->tm->getTargetCPU());
        f.addFnAttr("target-features", state_->tm->getTargetFeatureString());
    }

    {  // The optimisation pipeline (O3): hoists per-row work out of the column loop, unswitches the store.
        llvm::LoopAnalysisManager lam;
        llvm::FunctionAnalysisManager fam;
        llvm::CGSCCAnalysisManager cgam;
        llvm::ModuleAnalysisManager mam;
        llvm::PassBuilder pb(state_->tm.get());
        pb.registerModuleAnalyses(mam);
        pb.registerCGSCCAnalyses(cgam);
        pb.registerFunctionAnalyses(fam);
        pb.registerLoopAnalyses(lam);
        pb.crossRegisterProxies(lam, fam, cgam, mam);
        pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(*mod, mam);
    }
    if (const char* dir = std::getenv("FJ_DUMP_DIR")) {
        std::error_code ec;
        std::filesystem::create_directories(dir, ec);
        std::string path = fmt::format("{}/{}.ll", dir, named.name);
        std::ofstream out(path);
        std::string text;
        llvm::raw_string_ostream os(text);
        mod->print(os, nullptr);
        out << os.str();
    }
    if (auto err = state_->jit->addIRModule(llvm::orc::ThreadSafeModule(std::move(mod), std::move(ctx))))
        throw BackendError(fmt::format("cpu backend: adding kernel {}: {}", named.name, llvm_message(std::move(err))));
    auto sym = unwrap(state_->jit->lookup(named.name), "looking up the compiled kernel");
    KernelFn fn = sym.toPtr<KernelFn>();
    state_->cache.emplace(key, fn);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return {fn, false, ms};
}

}  // namespace fj::cpu
