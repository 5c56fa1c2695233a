// NVRTC: generated CUDA source -> a cubin for the device's own arch (or PTX when NVRTC is older than the
// device), plus the few facts about the result that the CLI and explain() report; and the whole compile
// of one kernel: selection (codegen/cuda/select.hpp), cache key, emission, NVRTC. Compiling needs only
// NVRTC, not a GPU (`factorjit compile`, CI).
#pragma once

#include <string>
#include <vector>

#include "codegen/cuda/emit.hpp"
#include "codegen/cuda/select.hpp"
#include "codegen/cuda/settings.hpp"
#include "codegen/kernel_ir.hpp"
#include "dsl/dtype.hpp"
#include "runtime/kernel_cache.hpp"

namespace fj::rt::cuda {

using codegen::CudaSettings;
using codegen::KernelChoice;
using codegen::parse_arch;

// What NVRTC should target for a device of compute capability major.minor: the device's own sm_XY as a
// cubin when this NVRTC supports it, else PTX for the newest compute_XY it supports (the driver then
// finishes the compilation when loading: slower to load, still correct).
struct NvrtcTarget {
    std::string arch;  // "sm_90" or "compute_90": the --gpu-architecture value
    bool cubin = true;
};
NvrtcTarget nvrtc_target(int cc_major, int cc_minor);

struct NvrtcOutput {
    std::vector<char> image;  // cubin (ELF) or PTX text with its terminating NUL
    bool cubin = true;
    std::string log;          // NVRTC's log (warnings), possibly empty
    double ms = 0;            // wall time of nvrtcCompileProgram and the image fetch
};

// Compiles `source`. `options` come from codegen::cuda_compile_options. On failure throws
// fj::BackendError with NVRTC's error, its whole log and `dump_path` (where the source was written, or
// a hint to set FJ_DUMP_DIR).
NvrtcOutput nvrtc_compile(const std::string& source, const std::string& program_name,
                          const std::vector<std::string>& options, bool cubin, const std::string& dump_path);

// FJ_DUMP_DIR: writes `source` as <dir>/<file_stem>.cu and returns the path; "" when unset. A failure to
// write is reported as a path-less "" (dumping is a debugging aid, never an error).
std::string dump_source(const std::string& file_stem, const std::string& source);

// Per-kernel resource use read from a cubin's ELF .nv.info sections, without a GPU. -1 where absent.
struct CubinResources {
    int registers = -1;
    int stack_bytes = -1;   // per-thread local memory frame (spills, local arrays)
};
CubinResources cubin_resources(const std::vector<char>& cubin, const std::string& function);

// The first NVRTC with -minimal (major * 1000 + minor * 10, as nvrtcVersion gives it here).
inline constexpr int kNvrtcMinimalVersion = 12040;

// NVRTC's options for a kernel: codegen::cuda_compile_options and the extra ones.
std::vector<std::string> nvrtc_options(const std::string& arch, const CudaSettings& settings);

// The choice of kernel for panels with these leading dimensions (empty: a generic kernel) on a device of
// `arch` whose other facts are not known (no limit on shared memory, tensor copies possible).
KernelChoice choose_kernel(const ir::Kernel& kernel, DType dtype, const std::string& arch, const CudaSettings& settings,
                           const std::vector<long long>& strides = {});

// The cache key of a kernel: IR hash, dtype, codegen version, NVRTC target, NVRTC version and options, and
// the choice (its shape and the settings that made its options).
std::string cuda_kernel_key(const ir::Kernel& kernel, DType dtype, const std::string& arch, bool cubin,
                            const KernelChoice& choice);
// ... of choose_kernel(kernel, dtype, arch, settings, strides).
std::string cuda_kernel_key(const ir::Kernel& kernel, DType dtype, const std::string& arch, bool cubin,
                            const CudaSettings& settings, const std::vector<long long>& strides = {});

// One kernel compiled, with what the CLI reports. No GPU needed.
struct CudaCompiled {
    std::string function;      // the kernel's symbol
    std::string key;
    std::string source;
    std::string dump_path;     // "" unless FJ_DUMP_DIR is set
    CacheEntry entry;          // the image
    double emit_ms = 0, compile_ms = 0;
    int registers = -1, stack_bytes = -1;  // read from the cubin's ELF (-1 for PTX)
    KernelChoice choice;                   // its shape and how it was generated
    // Column scans: rows per batch, echo rings, the dynamic shared memory launches need per thread
    // (window scans: defaults, 0 bytes per thread; their needs are in choice.scan).
    codegen::CudaColumnScanShape shape;
    std::string log;           // NVRTC warnings
};

// Emits, dumps (FJ_DUMP_DIR) and compiles one kernel for `arch` ("sm_90", or "compute_90" for PTX).
// Throws fj::BackendError with the NVRTC log and the dump path on failure.
CudaCompiled compile_cuda_kernel(const ir::Kernel& kernel, DType dtype, const std::string& arch, bool cubin,
                                 const KernelChoice& choice);
// ... of choose_kernel(kernel, dtype, arch, settings, strides).
CudaCompiled compile_cuda_kernel(const ir::Kernel& kernel, DType dtype, const std::string& arch, bool cubin,
                                 const CudaSettings& settings, const std::vector<long long>& strides = {});

// Compiles several kernels in parallel (on the shared thread pool); results in the order given. A failure
// is rethrown once the pool stops. fixed_ld > 0: the kernels big panels get, specialised on that leading
// dimension for every panel (codegen::kSpecializeElements).
std::vector<CudaCompiled> compile_cuda_kernels(const std::vector<const ir::Kernel*>& kernels, DType dtype,
                                               const std::string& arch, bool cubin, const CudaSettings& settings,
                                               long long fixed_ld = 0);

}  // namespace fj::rt::cuda
