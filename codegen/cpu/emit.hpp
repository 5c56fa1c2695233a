// Kernel IR to LLVM IR for the CPU: the same per-column time scan, with one SIMD lane per column.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "codegen/kernel_ir.hpp"
#include "dsl/dtype.hpp"

namespace llvm {
class LLVMContext;
class Module;
}  // namespace llvm

namespace fj::cpu {

// The function is named kernel.name and has the signature of KernelFn (kernel_abi.hpp).
// `lanes` doubles make one vector (8 with AVX-512, 4 with AVX2); `avx512`: the host has AVX-512F/VL.
std::unique_ptr<llvm::Module> emit_llvm(const ir::Kernel& kernel, DType dtype, int lanes, bool avx512,
                                        llvm::LLVMContext& ctx);

// Changes whenever the emitted code changes for the same kernel IR (the emitter, or what it assumes of the
// runtime): part of the CPU kernel cache's key, so that objects on disk from older code are not linked.
inline constexpr int kCpuCodegenVersion = 3;

// The emitter's tuning variables that change its code (FJ_CPU_UNROLL, FJ_CPU_ROW_GUARDS; bench/TUNING.md), as
// text for the cache key.
std::string emit_settings_text();

// Doubles of scratch a task over `columns` columns needs (states and rings of every lane group).
std::int64_t scratch_doubles(const ir::Kernel& kernel, int lanes, std::int64_t columns);

}  // namespace fj::cpu
