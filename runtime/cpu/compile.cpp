#include "runtime/cpu/compile.hpp"

#include <time.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <unordered_map>

#include <fmt/format.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>

#include "dsl/error.hpp"
#include "codegen/cpu/emit.hpp"
#include "runtime/cpu/perf_map.hpp"
#include "runtime/thread_pool.hpp"

namespace fj::cpu {

namespace {
std::string llvm_message(llvm::Error e) { return llvm::toString(std::move(e)); }

template <class T>
T unwrap(llvm::Expected<T> v, const char* what) {
    if (!v) throw BackendError(fmt::format("cpu backend: {}: {}", what, llvm_message(v.takeError())));
    return std::move(*v);
}

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// This thread's CPU time: a compile's parts are timed by it, so that other work on a shared machine does not
// count (the development machine's 2 cores often run 8 jobs).
double thread_cpu_ms() {
    timespec ts{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}
}  // namespace

struct LlvmJit::State {
    std::mutex mutex;  // the JIT's dylib and `linked`
    std::unique_ptr<llvm::orc::LLJIT> jit;
    std::optional<llvm::orc::JITTargetMachineBuilder> jtmb;  // a TargetMachine per compile (they are not shared
                                                            // between threads)
    std::string triple;
    llvm::DataLayout layout{""};
    std::unordered_map<std::string, KernelFn> linked;  // by key: each object is linked once per process
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
    features_ = jtmb.getFeatures().getString();
    state_->jtmb = jtmb;
    state_->triple = jtmb.getTargetTriple().str();
    state_->jit = unwrap(llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(std::move(jtmb)).create(), "creating the JIT");
    state_->layout = state_->jit->getDataLayout();
    // libm (exp, log, pow on vectors are scalarised into calls) and anything else from the process.
    auto gen = unwrap(llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
                          state_->jit->getDataLayout().getGlobalPrefix()),
                      "opening the process' symbols");
    state_->jit->getMainJITDylib().addGenerator(std::move(gen));
}

std::string LlvmJit::key(const ir::Kernel& kernel, DType dtype) const {
    return fmt::format("fj-cpu ir={:016x} dtype={} codegen={} llvm={} cpu={} lanes={} avx512={} {} features={}",
                       kernel.hash(), dtype_name(dtype), kCpuCodegenVersion, LLVM_VERSION_STRING, cpu_, lanes_,
                       avx512_ ? 1 : 0, emit_settings_text(), features_);
}

std::vector<CompiledKernel> LlvmJit::get(const std::vector<const ir::Kernel*>& kernels, DType dtype,
                                         rt::ThreadPool& pool) {
    std::vector<CompiledKernel> out(kernels.size());
    pool.parallel_for(static_cast<std::int64_t>(kernels.size()), [&](std::int64_t i, int) {
        out[static_cast<std::size_t>(i)] = get_one(*kernels[static_cast<std::size_t>(i)], dtype);
    });
    return out;
}

CompiledKernel LlvmJit::get(const ir::Kernel& kernel, DType dtype) { return get_one(kernel, dtype); }

CompiledKernel LlvmJit::get_one(const ir::Kernel& kernel, DType dtype) {
    const std::string k = key(kernel, dtype);
    {
        std::lock_guard<std::mutex> lock(state_->mutex);
        if (auto it = state_->linked.find(k); it != state_->linked.end()) return {it->second, rt::CacheSource::Memory};
    }
    const auto t0 = std::chrono::steady_clock::now();
    CompiledKernel c;
    // Symbols must be unique in the JIT's dylib: kernels of equal name but different IR can coexist.
    const std::string symbol = fmt::format("{}_{}_{:012x}", kernel.name, dtype == DType::F32 ? "f32" : "f64",
                                           rt::fnv1a64(k.data(), k.size()) & 0xffffffffffffULL);
    const rt::CacheResult r = rt::KernelCache::global().get(k, [&] {
        double t = thread_cpu_ms();
        auto ctx = std::make_unique<llvm::LLVMContext>();
        ir::Kernel named = kernel;
        named.name = symbol;
        std::unique_ptr<llvm::Module> mod = emit_llvm(named, dtype, lanes_, avx512_, *ctx);
        std::unique_ptr<llvm::TargetMachine> tm;
        {
            std::lock_guard<std::mutex> lock(state_->mutex);
            tm = unwrap(state_->jtmb->createTargetMachine(), "creating the target machine");
        }
        mod->setDataLayout(state_->layout);
        mod->setTargetTriple(state_->triple);
        for (llvm::Function& f : *mod) {
            f.addFnAttr("target-cpu", tm->getTargetCPU());
            f.addFnAttr("target-features", tm->getTargetFeatureString());
        }
        c.ir_instructions = static_cast<std::int64_t>(mod->getInstructionCount());
        c.emit_ms = thread_cpu_ms() - t;
        t = thread_cpu_ms();
        {  // The optimisation pipeline (O3): hoists per-row work out of the column loop, unswitches the store.
            llvm::LoopAnalysisManager lam;
            llvm::FunctionAnalysisManager fam;
            llvm::CGSCCAnalysisManager cgam;
            llvm::ModuleAnalysisManager mam;
            llvm::PassBuilder pb(tm.get());
            pb.registerModuleAnalyses(mam);
            pb.registerCGSCCAnalyses(cgam);
            pb.registerFunctionAnalyses(fam);
            pb.registerLoopAnalyses(lam);
            pb.crossRegisterProxies(lam, fam, cgam, mam);
            pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(*mod, mam);
        }
        c.optimised_instructions = static_cast<std::int64_t>(mod->getInstructionCount());
        c.optimise_ms = thread_cpu_ms() - t;
        if (const char* dir = std::getenv("FJ_DUMP_DIR")) {
            std::error_code ec;
            std::filesystem::create_directories(dir, ec);
            std::ofstream out(fmt::format("{}/{}.ll", dir, symbol));
            std::string text;
            llvm::raw_string_ostream os(text);
            mod->print(os, nullptr);
            out << os.str();
        }
        t = thread_cpu_ms();
        rt::CacheEntry e;
        e.function = symbol;
        {
            llvm::SmallVector<char, 0> object;
            llvm::raw_svector_ostream os(object);
            llvm::legacy::PassManager pm;
            if (tm->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::ObjectFile))
                throw BackendError(fmt::format("cpu backend: kernel {}: the target cannot emit object files", symbol));
            pm.run(*mod);
            e.image.assign(object.begin(), object.end());
        }
        c.codegen_ms = thread_cpu_ms() - t;
        return e;
    });
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (auto it = state_->linked.find(k); it != state_->linked.end()) {  // another thread linked it meanwhile
        c.fn = it->second;
        c.source = rt::CacheSource::Memory;
        c.ms = ms_since(t0);
        return c;
    }
    const rt::CacheEntry& e = *r.entry;
    auto buffer = llvm::MemoryBuffer::getMemBufferCopy(llvm::StringRef(e.image.data(), e.image.size()), e.function);
    if (auto err = state_->jit->addObjectFile(std::move(buffer)))
        throw BackendError(fmt::format("cpu backend: linking kernel {}: {}", e.function, llvm_message(std::move(err))));
    auto sym = unwrap(state_->jit->lookup(e.function), "looking up the compiled kernel");
    c.fn = sym.toPtr<KernelFn>();
    perf_map_add(std::string_view(e.image.data(), e.image.size()), e.function, sym.getValue());
    state_->linked.emplace(k, c.fn);
    c.source = r.source;  // (memory: another thread compiled it)
    c.object_bytes = static_cast<std::int64_t>(e.image.size());
    c.ms = ms_since(t0);
    return c;
}

}  // namespace fj::cpu
