// ORC LLJIT for CPU kernels: one JIT per process, kernels compiled once and cached by the structural
// hash of their IR (plus dtype and vector width).
#pragma once

#include <string>

#include "codegen/kernel_ir.hpp"
#include "codegen/cpu/kernel_abi.hpp"
#include "runtime/panel.hpp"

namespace fj::cpu {

struct CompiledKernel {
    KernelFn fn = nullptr;
    bool cache_hit = false;
    double compile_ms = 0;
};

class LlvmJit {
public:
    static LlvmJit& instance();  // created on first use; throws BackendError if LLVM cannot target the host
    CompiledKernel get(const ir::Kernel& kernel, DType dtype);
    int lanes() const { return lanes_; }  // doubles per vector on this host
    const std::string& cpu_name() const { return cpu_; }

private:
    LlvmJit();
    struct State;
    State* state_;
    int lanes_ = 4;
    bool avx512_ = false;
    std::string cpu_;
};

}  // namespace fj::cpu
