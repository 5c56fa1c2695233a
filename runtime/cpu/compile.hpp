// ORC LLJIT for CPU kernels: one JIT per process. A kernel's LLVM IR (codegen/cpu/emit.cpp) is optimised
// and compiled to a relocatable object file here, which the JIT links; objects are cached by key (the
// kernel IR's structural hash, dtype, codegen version, LLVM version, host CPU and features, the emitter's
// settings) in memory and on disk (runtime/kernel_cache.hpp: FJ_CACHE_DIR, as for CUDA), so that a new
// process links the kernels it compiled before instead of compiling them again. A program's kernels are
// compiled in parallel over the thread pool.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "codegen/kernel_ir.hpp"
#include "codegen/cpu/kernel_abi.hpp"
#include "runtime/kernel_cache.hpp"
#include "runtime/panel.hpp"

namespace fj::rt {
class ThreadPool;
}

namespace fj::cpu {

struct CompiledKernel {
    KernelFn fn = nullptr;
    rt::CacheSource source = rt::CacheSource::Compiled;  // memory: linked before in this process
    double ms = 0;  // this call's time for the kernel: disk read and link, or the whole compile
    // A compile's parts (0 unless compiled here), in this thread's CPU time: LLVM IR emission, the optimisation
    // pipeline, machine code;
    // the IR's instructions as emitted and after optimisation.
    double emit_ms = 0, optimise_ms = 0, codegen_ms = 0;
    std::int64_t ir_instructions = 0, optimised_instructions = 0;
    std::int64_t object_bytes = 0;
};

class LlvmJit {
public:
    static LlvmJit& instance();  // created on first use; throws BackendError if LLVM cannot target the host
    // The kernels, compiled (or read from the disk cache) in parallel over `pool`, each once per process.
    std::vector<CompiledKernel> get(const std::vector<const ir::Kernel*>& kernels, DType dtype, rt::ThreadPool& pool);
    CompiledKernel get(const ir::Kernel& kernel, DType dtype);  // one kernel, on this thread
    int lanes() const { return lanes_; }  // doubles per vector on this host
    const std::string& cpu_name() const { return cpu_; }
    // The disk cache's key of a kernel (everything that changes its object code).
    std::string key(const ir::Kernel& kernel, DType dtype) const;

private:
    LlvmJit();
    CompiledKernel get_one(const ir::Kernel& kernel, DType dtype);
    struct State;
    State* state_;
    int lanes_ = 4;
    bool avx512_ = false;
    std::string cpu_, features_;
};

}  // namespace fj::cpu
