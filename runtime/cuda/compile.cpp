#include "runtime/cuda/compile.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dsl/error.hpp"
#include "runtime/cuda/cuda_api.hpp"
#include "runtime/thread_pool.hpp"

namespace fj::rt::cuda {

NvrtcTarget nvrtc_target(int cc_major, int cc_minor) {
    const Nvrtc& n = nvrtc_api();
    int count = 0;
    FJ_NVRTC(nvrtcGetNumSupportedArchs, &count);
    std::vector<int> archs(static_cast<std::size_t>(std::max(count, 0)));
    if (count > 0) FJ_NVRTC(nvrtcGetSupportedArchs, archs.data());
    (void)n;
    const int want = cc_major * 10 + cc_minor;
    if (archs.empty() || std::find(archs.begin(), archs.end(), want) != archs.end())
        return {fmt::format("sm_{}", want), true};
    // Older NVRTC than the device: the newest virtual arch not above the device's, as PTX.
    int best = -1;
    for (int a : archs)
        if (a <= want) best = std::max(best, a);
    if (best < 0)
        throw BackendError(fmt::format("NVRTC {}.{} supports no arch at or below the device's sm_{} (oldest: sm_{})",
                                       n.version / 1000, n.version % 1000 / 10, want,
                                       *std::min_element(archs.begin(), archs.end())));
    return {fmt::format("compute_{}", best), false};
}

std::string dump_source(const std::string& file_stem, const std::string& source) {
    const char* dir = std::getenv("FJ_DUMP_DIR");
    if (!dir || !*dir) return "";
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    const std::string path = (std::filesystem::path(dir) / (file_stem + ".cu")).string();
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(source.data(), static_cast<std::streamsize>(source.size()));
    return f.good() ? path : "";
}

namespace {

// Destroys the program however the compilation ends.
struct ProgramGuard {
    nvrtcProgram p = nullptr;
    ~ProgramGuard() {
        if (p) nvrtc_api().nvrtcDestroyProgram(&p);
    }
};

std::string program_log(nvrtcProgram p) {
    std::size_t size = 0;
    if (nvrtc_api().nvrtcGetProgramLogSize(p, &size) != NVRTC_SUCCESS || size <= 1) return "";
    std::string log(size, '\0');
    if (nvrtc_api().nvrtcGetProgramLog(p, log.data()) != NVRTC_SUCCESS) return "";
    while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
    return log;
}

}  // namespace

NvrtcOutput nvrtc_compile(const std::string& source, const std::string& program_name,
                          const std::vector<std::string>& options, bool cubin, const std::string& dump_path) {
    const Nvrtc& n = nvrtc_api();
    const auto t0 = std::chrono::steady_clock::now();
    ProgramGuard prog;
    const std::string file = program_name + ".cu";
    FJ_NVRTC(nvrtcCreateProgram, &prog.p, source.c_str(), file.c_str(), 0, nullptr, nullptr);
    std::vector<const char*> opts;
    for (const std::string& o : options) opts.push_back(o.c_str());
    const nvrtcResult r = n.nvrtcCompileProgram(prog.p, static_cast<int>(opts.size()), opts.data());
    NvrtcOutput out;
    out.log = program_log(prog.p);
    if (r != NVRTC_SUCCESS) {
        const std::string where =
            dump_path.empty() ? std::string("set FJ_DUMP_DIR to keep the source") : "source: " + dump_path;
        throw BackendError(fmt::format("nvrtcCompileProgram failed for kernel {}: {} ({})\nNVRTC log:\n{}",
                                       program_name, n.nvrtcGetErrorString(r), where,
                                       out.log.empty() ? "(empty)" : out.log));
    }
    std::size_t size = 0;
    if (cubin) {
        FJ_NVRTC(nvrtcGetCUBINSize, prog.p, &size);
        out.image.resize(size);
        FJ_NVRTC(nvrtcGetCUBIN, prog.p, out.image.data());
    } else {
        FJ_NVRTC(nvrtcGetPTXSize, prog.p, &size);
        out.image.resize(size);
        FJ_NVRTC(nvrtcGetPTX, prog.p, out.image.data());
    }
    out.cubin = cubin;
    out.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return out;
}

// ---- cubin resources ------------------------------------------------------------------------------
// A cubin is a 64-bit little-endian ELF. Per-function attributes live in the section ".nv.info.<fn>"
// (and, for some, in the global ".nv.info"), as records: u8 format, u8 attribute, then for format 0x04
// (EIFMT_SVAL) a u16 size and that many bytes; 0x03 (HVAL) a u16 value; 0x02 (BVAL) one byte; 0x01
// (NVAL) nothing. EIATTR_REGCOUNT (0x2f) holds {u32 symbol index, u32 registers} in the global section;
// EIATTR_FRAME_SIZE (0x11) {u32 symbol, u32 bytes} likewise. The symbol index is that of the function in
// .symtab. Anything that does not parse gives -1: this is a report, never a reason to fail.

namespace {

template <class T>
bool rd(const std::vector<char>& b, std::size_t off, T* v) {
    if (off + sizeof(T) > b.size()) return false;
    std::memcpy(v, b.data() + off, sizeof(T));
    return true;
}

struct Section {
    std::string name;
    std::uint32_t type = 0;
    std::uint64_t offset = 0, size = 0;
    std::uint32_t link = 0;
    std::uint64_t entsize = 0;
};

}  // namespace

CubinResources cubin_resources(const std::vector<char>& b, const std::string& function) {
    CubinResources res;
    if (b.size() < 64 || std::memcmp(b.data(), "\x7f" "ELF", 4) != 0 || b[4] != 2 /* ELFCLASS64 */) return res;
    std::uint64_t shoff = 0;
    std::uint16_t shentsize = 0, shnum = 0, shstrndx = 0;
    if (!rd(b, 0x28, &shoff) || !rd(b, 0x3a, &shentsize) || !rd(b, 0x3c, &shnum) || !rd(b, 0x3e, &shstrndx))
        return res;
    if (shentsize < 64 || shnum == 0 || shstrndx >= shnum) return res;
    std::vector<Section> secs(shnum);
    std::vector<std::uint32_t> name_off(shnum);
    for (std::uint16_t i = 0; i < shnum; ++i) {
        const std::size_t h = shoff + static_cast<std::size_t>(i) * shentsize;
        if (!rd(b, h + 0, &name_off[i]) || !rd(b, h + 4, &secs[i].type) || !rd(b, h + 0x18, &secs[i].offset) ||
            !rd(b, h + 0x20, &secs[i].size) || !rd(b, h + 0x28, &secs[i].link) || !rd(b, h + 0x38, &secs[i].entsize))
            return res;
        if (secs[i].offset + secs[i].size > b.size() && secs[i].type != 8 /* NOBITS */) return res;
    }
    auto cstr = [&](std::uint64_t off) {
        std::string s;
        while (off < b.size() && b[off]) s += b[off++];
        return s;
    };
    for (std::uint16_t i = 0; i < shnum; ++i) secs[i].name = cstr(secs[shstrndx].offset + name_off[i]);

    // The function's symbol index in .symtab.
    std::int64_t sym_index = -1;
    for (const Section& s : secs) {
        if (s.type != 2 /* SYMTAB */ || s.entsize < 24 || s.link >= shnum) continue;
        const Section& strtab = secs[s.link];
        for (std::uint64_t k = 0; k * s.entsize + 24 <= s.size; ++k) {
            std::uint32_t nm = 0;
            if (!rd(b, s.offset + k * s.entsize, &nm)) break;
            if (cstr(strtab.offset + nm) == function) {
                sym_index = static_cast<std::int64_t>(k);
                break;
            }
        }
    }
    auto parse = [&](const Section& s) {
        std::uint64_t p = s.offset, end = s.offset + s.size;
        while (p + 2 <= end) {
            const auto fmtc = static_cast<unsigned char>(b[p]);
            const auto attr = static_cast<unsigned char>(b[p + 1]);
            p += 2;
            std::uint16_t size = 0;
            if (fmtc == 0x04) {
                if (!rd(b, p, &size)) return;
                p += 2;
            } else if (fmtc == 0x03) {
                size = 2;
            } else if (fmtc == 0x02) {
                size = 1;
            } else if (fmtc != 0x01) {
                return;  // unknown format: stop rather than misread
            }
            if (p + size > end) return;
            if (fmtc == 0x04 && size >= 8 && (attr == 0x2f || attr == 0x11)) {
                std::uint32_t sym = 0, val = 0;
                rd(b, p, &sym);
                rd(b, p + 4, &val);
                if (static_cast<std::int64_t>(sym) == sym_index) {
                    if (attr == 0x2f) res.registers = static_cast<int>(val);
                    else res.stack_bytes = static_cast<int>(val);
                }
            }
            p += size;
        }
    };
    for (const Section& s : secs) {
        if (s.name == ".nv.info" && sym_index >= 0) parse(s);
        else if (s.name == ".nv.info." + function) parse(s);
    }
    return res;
}

std::vector<std::string> nvrtc_options(const std::string& arch, const CudaSettings& settings) {
    std::vector<std::string> o = codegen::cuda_compile_options(arch, settings.fmad);
    // NVRTC 12.4+: leave out the texture, device-runtime and driver-type declarations generated kernels
    // never use; the front end's share of a cold compile falls from about 44 to 25-29 ms (NVRTC --time,
    // the development machine; J1 on the H200 in bench/RESULTS.md).
    if (nvrtc_api().version >= kNvrtcMinimalVersion) o.push_back("-minimal");
    o.insert(o.end(), settings.extra_options.begin(), settings.extra_options.end());
    return o;
}

KernelChoice choose_kernel(const ir::Kernel& kernel, DType dtype, const std::string& arch, const CudaSettings& settings,
                           const std::vector<long long>& strides) {
    return codegen::select_kernel(kernel, dtype, {strides, true}, {arch, 0}, settings);
}

std::string cuda_kernel_key(const ir::Kernel& kernel, DType dtype, const std::string& arch, bool cubin,
                            const KernelChoice& choice) {
    const Nvrtc& n = nvrtc_api();
    std::string opts;
    for (const std::string& o : nvrtc_options(arch, choice.settings)) opts += o + ' ';
    std::string key = fmt::format("fj-cuda ir={:016x} dtype={} codegen={} target={}{} nvrtc={} opts=[{}] shape={}",
                                  kernel.hash(), dtype_name(dtype), codegen::kCudaCodegenVersion, arch, cubin ? "" : "(ptx)",
                                  n.version, opts, static_cast<int>(choice.shape));
    if (choice.fixed()) key += fmt::format(" ld=[{}]", fmt::join(choice.options.strides, ","));
    if (choice.options.repair) key += " repair";
    return key + codegen::cache_key_text(choice.settings, choice.fixed());
}

std::string cuda_kernel_key(const ir::Kernel& kernel, DType dtype, const std::string& arch, bool cubin,
                            const CudaSettings& settings, const std::vector<long long>& strides) {
    return cuda_kernel_key(kernel, dtype, arch, cubin, choose_kernel(kernel, dtype, arch, settings, strides));
}

namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

CudaCompiled compile_cuda_kernel(const ir::Kernel& kernel, DType dtype, const std::string& arch, bool cubin,
                                 const KernelChoice& choice) {
    CudaCompiled c;
    c.function = codegen::cuda_kernel_name(kernel);
    c.key = cuda_kernel_key(kernel, dtype, arch, cubin, choice);
    c.choice = choice;
    const auto t0 = std::chrono::steady_clock::now();
    c.source = choice.analysis ? codegen::emit_cuda(*choice.analysis, c.choice.options, &c.shape)
                               : codegen::emit_cuda(choice.kernel_for(kernel), c.choice.options, &c.shape);
    c.choice.analysis.reset();  // (it refers to `kernel`, which need not outlive the result)
    c.emit_ms = ms_since(t0);
    c.dump_path = dump_source(fmt::format("{}-{:016x}", c.function, fnv1a64(c.key.data(), c.key.size())), c.source);
    NvrtcOutput out = nvrtc_compile(c.source, c.function, nvrtc_options(arch, choice.settings), cubin, c.dump_path);
    c.compile_ms = out.ms;
    c.log = std::move(out.log);
    c.entry.function = c.function;
    c.entry.cubin = out.cubin;
    c.entry.smem_per_thread = c.shape.smem_per_thread;
    c.entry.image = std::move(out.image);
    if (c.entry.cubin) {
        const CubinResources r = cubin_resources(c.entry.image, c.function);
        c.registers = r.registers;
        c.stack_bytes = r.stack_bytes;
    }
    return c;
}

CudaCompiled compile_cuda_kernel(const ir::Kernel& kernel, DType dtype, const std::string& arch, bool cubin,
                                 const CudaSettings& settings, const std::vector<long long>& strides) {
    return compile_cuda_kernel(kernel, dtype, arch, cubin, choose_kernel(kernel, dtype, arch, settings, strides));
}

std::vector<CudaCompiled> compile_cuda_kernels(const std::vector<const ir::Kernel*>& kernels, DType dtype,
                                               const std::string& arch, bool cubin, const CudaSettings& settings,
                                               long long fixed_ld) {
    std::vector<CudaCompiled> out(kernels.size());
    ThreadPool::shared(thread_count(0)).parallel_for(static_cast<std::int64_t>(kernels.size()), [&](std::int64_t i, int) {
        const ir::Kernel& k = *kernels[static_cast<std::size_t>(i)];
        std::vector<long long> strides;
        if (fixed_ld > 0) strides.assign(k.inputs.size() + k.outputs.size(), fixed_ld);
        out[static_cast<std::size_t>(i)] = compile_cuda_kernel(k, dtype, arch, cubin, settings, strides);
    });
    return out;
}

}  // namespace fj::rt::cuda
