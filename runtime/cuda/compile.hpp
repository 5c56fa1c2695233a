// NVRTC: generated CUDA source -> a cubin for the device's own arch (or PTX when NVRTC is older than the
// device), plus the few facts about the result that the CLI and explain() report.
#pragma once

#include <string>
#include <vector>

namespace fj::rt::cuda {

// What NVRTC should target for a device of compute capability major.minor: the device's own sm_XY as a
// cubin when this NVRTC supports it, else PTX for the newest compute_XY it supports (the driver then
// finishes the compilation when loading: slower to load, still correct).
struct NvrtcTarget {
    std::string arch;  // "sm_90" or "compute_90": the --gpu-architecture value
    bool cubin = true;
};
NvrtcTarget nvrtc_target(int cc_major, int cc_minor);

// "sm_90" -> {9, 0}; throws fj::Error for anything else.
void parse_arch(const std::string& arch, int* major, int* minor);

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

}  // namespace fj::rt::cuda
