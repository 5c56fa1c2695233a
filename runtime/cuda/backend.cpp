#include "runtime/cuda/backend.hpp"

#include <algorithm>
#include <functional>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <map>
#include <limits>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dsl/error.hpp"
#include "runtime/backend.hpp"
#include "runtime/cuda/cuda_api.hpp"
#include "runtime/cuda/launch_config.hpp"
#include "runtime/cuda/compile.hpp"

namespace fj::rt {

namespace cuda {

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

int env_int(const char* name, int fallback, int lo, int hi) {
    const char* v = std::getenv(name);
    if (!v || !*v) return fallback;
    char* end = nullptr;
    const long x = std::strtol(v, &end, 10);
    if (end == v || *end) throw Error(fmt::format("{}={} is not an integer", name, v));
    if (x < lo || x > hi) throw Error(fmt::format("{}={} is outside [{}, {}]", name, v, lo, hi));
    return static_cast<int>(x);
}

}  // namespace

CudaSettings CudaSettings::from_env() {
    CudaSettings s;
    s.unroll = env_int("FJ_CUDA_UNROLL", s.unroll, 1, 16);
    s.unroll_given = std::getenv("FJ_CUDA_UNROLL") != nullptr;
    s.one_loop = env_int("FJ_CUDA_ONE_LOOP", s.unroll_given ? 0 : 1, 0, 1) != 0;  // (FJ_CUDA_UNROLL asks for batches)
    s.fmad = env_int("FJ_CUDA_FMAD", 0, 0, 1) != 0;
    s.block = env_int("FJ_CUDA_BLOCK", 0, 0, 1024);
    if (s.block % 32) throw Error(fmt::format("FJ_CUDA_BLOCK={} is not a multiple of 32", s.block));
    s.smem = env_int("FJ_CUDA_SMEM", 0, 0, 232448);
    s.fixed_ld = env_int("FJ_CUDA_FIXED_LD", -1, -1, 1);
    s.l2_prefetch = env_int("FJ_CUDA_PREFETCH", -1, -1, 4096);
    s.stages = env_int("FJ_CUDA_STAGES", kSpecializedStages, 0, 8);
    s.copies = env_int("FJ_CUDA_COPIES", kSpecializedLoopCopies, 1, 4);
    s.big_body_shapes = env_int("FJ_CUDA_BIG_BODY_SHAPES", 0, 0, 1) != 0;
    s.batched_edges = env_int("FJ_CUDA_EDGES", 1, 0, 1) != 0;
    s.launch_bounds = env_int("FJ_CUDA_LAUNCH_BOUNDS", 0, 0, 1024);
    s.cache_hints = env_int("FJ_CUDA_CACHE_HINTS", -1, -1, 1);
    s.warm_rows = env_int("FJ_CUDA_WARM_ROWS", s.warm_rows, 0, 16);
    s.window_scan = env_int("FJ_CUDA_WINDOW_SCAN", -1, -1, 1);
    s.scan_ahead = env_int("FJ_CUDA_SCAN_AHEAD", 0, 0, 8);
    s.scan_warps = env_int("FJ_CUDA_SCAN_WARPS", 0, 0, 16);
    s.scan_chain = env_int("FJ_CUDA_SCAN_CHAIN", s.scan_chain, -1, 1);
    s.echo = env_int("FJ_CUDA_ECHO", 1, 0, 1) != 0;
    s.quiet = env_int("FJ_CUDA_QUIET", 1, 0, 1) != 0;
    s.rsqrt_refine = env_int("FJ_CUDA_RSQRT_REFINE", 1, 0, 1) != 0;
    if (s.scan_warps != 0 && s.scan_warps != 8 && s.scan_warps != 16)
        throw Error(fmt::format("FJ_CUDA_SCAN_WARPS={} is not 8 or 16", s.scan_warps));
    if (s.launch_bounds % 32) throw Error(fmt::format("FJ_CUDA_LAUNCH_BOUNDS={} is not a multiple of 32", s.launch_bounds));
    if (const char* v = std::getenv("FJ_NVRTC_OPTIONS")) {
        std::istringstream words(v);
        for (std::string w; words >> w;) s.extra_options.push_back(w);
    }
    return s;
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

std::string cuda_kernel_key(const ir::Kernel& kernel, DType dtype, const std::string& arch, bool cubin,
                            const CudaSettings& settings, const std::vector<long long>& strides) {
    const Nvrtc& n = nvrtc_api();
    std::string opts;
    for (const std::string& o : nvrtc_options(arch, settings)) opts += o + ' ';
    return fmt::format("fj-cuda ir={:016x} dtype={} codegen={} target={}{} nvrtc={} opts=[{}] unroll={} ringreg={}{}{}",
                       kernel.hash(), dtype_name(dtype), codegen::kCudaCodegenVersion, arch, cubin ? "" : "(ptx)",
                       n.version, opts, settings.unroll, settings.reg_ring_max,
                       settings.big_body_shapes ? " bigbodyshapes" : "", settings.rsqrt_refine ? "" : " rsqrt0") +
           (strides.empty() ? fmt::format(" oneloop={}", settings.one_loop ? 1 : 0)
                            : fmt::format(" ld=[{}] l2pf={} stages={} copies={} edges={} lb={} hints={} warm={} scan={} ahead={} warps={} chain={} echo={} quiet={}",
                                          fmt::join(strides, ","), settings.l2_prefetch, settings.stages,
                                          settings.copies, settings.batched_edges, settings.launch_bounds,
                                          settings.cache_hints, settings.warm_rows, settings.window_scan, settings.scan_ahead, settings.scan_warps,
                                          settings.scan_chain, settings.echo ? 1 : 0, settings.quiet ? 1 : 0));
}

int long_window_inputs(const ir::Kernel& kernel) {
    std::set<std::int32_t> slots;
    for (const ir::Inst& x : kernel.body)
        if (x.op == ir::Prim::Input && x.lag >= kWindowScanMinLag) slots.insert(x.slot);
    return static_cast<int>(slots.size());
}

codegen::CudaEmitOptions cuda_emit_options(const ir::Kernel& kernel, DType dtype, const CudaSettings& settings,
                                           const std::vector<long long>& strides, const std::string& arch,
                                           codegen::WindowScanLayout* scan_layout) {
    if (scan_layout) *scan_layout = {};
    codegen::CudaEmitOptions eo;
    eo.dtype = dtype;
    eo.unroll = settings.unroll;
    eo.reg_ring_max = settings.reg_ring_max;
    eo.strides = strides;
    eo.big_body_shapes = settings.big_body_shapes;
    eo.one_loop = settings.one_loop;
    eo.rsqrt_refine = settings.rsqrt_refine;
    if (strides.empty()) return eo;
    eo.l2_prefetch_rows = settings.l2_prefetch < 0 ? kSpecializedL2Prefetch : settings.l2_prefetch;
    eo.loop_copies = settings.copies;
    eo.batched_edges = settings.batched_edges;
    eo.max_threads = settings.launch_bounds;
    eo.warm_only_rows = settings.warm_rows;
    eo.echo_rings = settings.echo;
    eo.quiet_batches = settings.quiet;
    eo.cache_hints = settings.cache_hints >= 0 ? settings.cache_hints == 1 : kernel.max_input_lag >= kCacheHintMinLag;
    int major = 0, minor = 0;
    parse_arch(arch, &major, &minor);
    const bool scan_arch = major * 10 + minor >= codegen::kWindowScanMinArch;
    if (scan_arch &&
        (settings.window_scan == 1 || (settings.window_scan == -1 && long_window_inputs(kernel) >= kWindowScanMinInputs))) {
        codegen::CudaEmitOptions scan = eo;
        scan.window_scan = true;
        scan.window_scan_ahead = settings.scan_ahead;
        scan.window_scan_warps = settings.scan_warps;
        codegen::CudaEmitOptions chain = scan;  // the chained variant, where the kernel's sums split
        chain.window_scan_chain = true;
        if (settings.scan_chain != 0) {
            codegen::WindowScanLayout l = codegen::cuda_window_scan_layout(kernel, chain);
            if (l.smem_bytes > 0 && (settings.scan_chain == 1 || l.sums >= kChainMinSums)) {
                if (scan_layout) *scan_layout = std::move(l);
                return chain;
            }
        }
        if (codegen::WindowScanLayout l = codegen::cuda_window_scan_layout(kernel, scan); l.smem_bytes > 0) {
            if (scan_layout) *scan_layout = std::move(l);
            return scan;
        }
    }
    if (settings.stages >= 2) {
        codegen::CudaEmitOptions staged = eo;
        staged.async_stages = settings.stages;
        if (!settings.unroll_given) staged.unroll = kSpecializedStagedUnroll;
        if (codegen::cuda_column_scan_shape(kernel, staged).smem_per_thread > 0) return staged;
    }
    return eo;
}

CudaCompiled compile_cuda_kernel(const ir::Kernel& kernel, DType dtype, const std::string& arch, bool cubin,
                                 const CudaSettings& settings, const std::vector<long long>& strides) {
    CudaCompiled c;
    c.function = codegen::cuda_kernel_name(kernel);
    c.key = cuda_kernel_key(kernel, dtype, arch, cubin, settings, strides);
    const auto t0 = std::chrono::steady_clock::now();
    c.emitted = cuda_emit_options(kernel, dtype, settings, strides, arch, &c.scan);
    c.source = codegen::emit_cuda(kernel, c.emitted, &c.shape);
    c.emit_ms = ms_since(t0);
    c.dump_path = dump_source(fmt::format("{}-{:016x}", c.function, fnv1a64(c.key.data(), c.key.size())), c.source);
    NvrtcOutput out = nvrtc_compile(c.source, c.function, nvrtc_options(arch, settings), cubin,
                                    c.dump_path);
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

// Runs jobs[0..n) on up to the hardware's thread count; rethrows the first failure after all finish.
template <class F>
void parallel_for(std::size_t n, F&& job) {
    if (n <= 1) {
        for (std::size_t i = 0; i < n; ++i) job(i);
        return;
    }
    const std::size_t workers = std::min<std::size_t>(n, std::max(1u, std::thread::hardware_concurrency()));
    std::atomic<std::size_t> next{0};
    std::vector<std::exception_ptr> errors(n);
    auto work = [&] {
        for (std::size_t i; (i = next++) < n;) {
            try {
                job(i);
            } catch (...) {
                errors[i] = std::current_exception();
            }
        }
    };
    std::vector<std::thread> pool;
    for (std::size_t w = 1; w < workers; ++w) pool.emplace_back(work);
    work();
    for (std::thread& t : pool) t.join();
    for (const std::exception_ptr& e : errors)
        if (e) std::rethrow_exception(e);
}

CudaSettings specialised_settings(const CudaSettings& settings) {
    CudaSettings s = settings;
    if (!s.unroll_given) s.unroll = kSpecializedUnroll;
    return s;
}

std::vector<CudaCompiled> compile_cuda_kernels(const std::vector<const ir::Kernel*>& kernels, DType dtype,
                                               const std::string& arch, bool cubin, const CudaSettings& settings,
                                               long long fixed_ld) {
    std::vector<CudaCompiled> out(kernels.size());
    parallel_for(kernels.size(), [&](std::size_t i) {
        const ir::Kernel& k = *kernels[i];
        if (fixed_ld <= 0) {
            out[i] = compile_cuda_kernel(k, dtype, arch, cubin, settings);
            return;
        }
        const std::vector<long long> strides(k.inputs.size() + k.outputs.size(), fixed_ld);
        out[i] = compile_cuda_kernel(k, dtype, arch, cubin, specialised_settings(settings), strides);
    });
    return out;
}

namespace {

// ---------------------------------------------------------------------------------------------------
// Loaded modules, by cache key: a kernel is loaded once per process and kept (modules are small; the
// primary context outlives every Program).
struct LoadedKernel {
    std::string key;
    std::string function;
    CUmodule module = nullptr;
    CUfunction fn = nullptr;
    int registers = 0, local_bytes = 0;
    int block = 0, blocks_per_sm = 0;
    int smem_per_thread = 0;  // dynamic shared memory the kernel uses per thread (staged loads, echo rings)
    // Window-scan kernels: their launch needs (smem_bytes 0 for the column scan): dynamic shared memory per
    // block (blocks of their __launch_bounds__ threads owning codegen::kWindowScanColumns columns) and the
    // rows of their tensor copies.
    codegen::WindowScanLayout scan;
};

// Where a kernel argument's panel comes from in a run: the program's inputs or outputs, or an
// intermediate between regions that lives for the run.
struct ArgRef {
    enum Kind : std::uint8_t { In, Out, Tmp } kind = In;
    int index = 0;
};

struct KernelInfo {  // one kernel of an executable
    ir::Kernel kernel;
    std::shared_ptr<const LoadedKernel> loaded;
    CacheSource source = CacheSource::Compiled;
    double ms = 0;       // compile / disk read / 0
    double load_ms = 0;  // cuModuleLoadData and attribute queries (0 when already loaded)
    std::vector<ArgRef> in_refs, out_refs;
    // The same kernel specialised on the leading dimensions of the last big run (see kSpecializeElements).
    std::shared_ptr<const LoadedKernel> fixed;
    std::shared_ptr<const LoadedKernel> fixed_column;  // when `fixed` is a window scan: the column scan, for
                                                       // the panels it cannot copy (kernel_for_run())
    std::vector<long long> fixed_strides;
    CacheSource fixed_source = CacheSource::Compiled;
    double fixed_ms = 0;
};

// Gives the kernel specialised on `strides`, from the caches or compiled now (CacheResult: how);
// column_only: a column scan even where the settings would give a window scan.
using Specializer = std::function<std::shared_ptr<const LoadedKernel>(const ir::Kernel&, const std::vector<long long>&,
                                                                      bool column_only, CacheSource*, double*)>;

class CudaBackend;

// Device memory for one run's staged panels and intermediates, freed on the stream however the run ends.
class RunMemory {
public:
    RunMemory(const Device& dev, CUstream stream) : dev_(dev), stream_(stream) {}
    ~RunMemory() {
        const Driver* d = driver();
        if (!d) return;
        for (CUdeviceptr p : ptrs_) {
            if (dev_.memory_pools) d->cuMemFreeAsync(p, stream_);
            else d->cuMemFree(p);
        }
    }
    CUdeviceptr alloc(std::size_t bytes) {
        CUdeviceptr p = 0;
        if (dev_.memory_pools) FJ_CU(cuMemAllocAsync, &p, std::max<std::size_t>(bytes, 1), stream_);
        else FJ_CU(cuMemAlloc, &p, std::max<std::size_t>(bytes, 1));
        ptrs_.push_back(p);
        return p;
    }

private:
    const Device& dev_;
    CUstream stream_;
    std::vector<CUdeviceptr> ptrs_;
};

struct DevView {
    CUdeviceptr ptr = 0;
    std::int64_t ld = 0;
};

// Rows of `cols` elements between pitched layouts; one flat copy when both are dense.
void copy_2d(CUstream s, bool to_device, const Panel& host, CUdeviceptr dev, std::int64_t dev_ld) {
    const std::size_t elem = dtype_size(host.dtype);
    const std::size_t width = static_cast<std::size_t>(host.cols) * elem;
    if (host.ld == host.cols && dev_ld == host.cols) {
        const std::size_t bytes = width * static_cast<std::size_t>(host.rows);
        if (to_device) FJ_CU(cuMemcpyHtoDAsync, dev, host.data, bytes, s);
        else FJ_CU(cuMemcpyDtoHAsync, host.data, dev, bytes, s);
        return;
    }
    CUDA_MEMCPY2D c;
    c.WidthInBytes = width;
    c.Height = static_cast<std::size_t>(host.rows);
    if (to_device) {
        c.srcMemoryType = CU_MEMORYTYPE_HOST;
        c.srcHost = host.data;
        c.srcPitch = static_cast<std::size_t>(host.ld) * elem;
        c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
        c.dstDevice = dev;
        c.dstPitch = static_cast<std::size_t>(dev_ld) * elem;
    } else {
        c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
        c.srcDevice = dev;
        c.srcPitch = static_cast<std::size_t>(dev_ld) * elem;
        c.dstMemoryType = CU_MEMORYTYPE_HOST;
        c.dstHost = host.data;
        c.dstPitch = static_cast<std::size_t>(host.ld) * elem;
    }
    FJ_CU(cuMemcpy2DAsync, &c, s);
}


class CudaExecutable final : public Executable {
public:
    CudaExecutable(const Device& dev, const codegen::Plan& plan, DType dtype, const CompileOptions& options,
                   CudaSettings settings, std::vector<KernelInfo> kernels, double prepare_ms, Specializer specialize)
        : dev_(dev), dtype_(dtype), options_(options), settings_(settings), inputs_(plan.inputs),
          outputs_(plan.outputs), kernels_(std::move(kernels)), prepare_ms_(prepare_ms),
          specialize_(std::move(specialize)) {
        // Argument sources by index, so that a run looks nothing up by name.
        std::vector<std::string> tmps;
        auto ref = [&](const std::string& name) {
            auto in = std::find(inputs_.begin(), inputs_.end(), name);
            if (in != inputs_.end()) return ArgRef{ArgRef::In, static_cast<int>(in - inputs_.begin())};
            auto out = std::find(outputs_.begin(), outputs_.end(), name);
            if (out != outputs_.end()) return ArgRef{ArgRef::Out, static_cast<int>(out - outputs_.begin())};
            auto tmp = std::find(tmps.begin(), tmps.end(), name);
            if (tmp == tmps.end()) tmp = tmps.insert(tmps.end(), name);
            return ArgRef{ArgRef::Tmp, static_cast<int>(tmp - tmps.begin())};
        };
        for (KernelInfo& k : kernels_) {
            for (const std::string& n : k.kernel.inputs) k.in_refs.push_back(ref(n));
            for (const std::string& n : k.kernel.outputs) k.out_refs.push_back(ref(n));
        }
        n_tmp_ = tmps.size();
        shapes_.resize(kernels_.size());
        shape_fn_.resize(kernels_.size());
        shape_smem_.resize(kernels_.size());
    }

    ~CudaExecutable() override {
        if (stream_)
            if (const Driver* d = driver()) d->cuStreamDestroy(stream_);  // errors at process exit are moot
    }

    void run(const std::vector<Panel>& inputs, const std::vector<Panel>& outputs) override;
    std::string explain() const override;

private:
    DevView view(const ArgRef& r) const {
        switch (r.kind) {
        case ArgRef::In: return in_views_[static_cast<std::size_t>(r.index)];
        case ArgRef::Out: return out_views_[static_cast<std::size_t>(r.index)];
        case ArgRef::Tmp: break;
        }
        return tmp_views_[static_cast<std::size_t>(r.index)];
    }
    void update_shapes(std::int64_t rows, std::int64_t cols);
    void append_tensor_maps(const KernelInfo& k, std::int64_t rows, std::int64_t cols, int box_rows);

    const Device& dev_;
    DType dtype_;
    CompileOptions options_;
    CudaSettings settings_;
    std::vector<std::string> inputs_, outputs_;
    std::vector<KernelInfo> kernels_;
    double prepare_ms_ = 0;
    std::size_t n_tmp_ = 0;
    CUstream stream_ = nullptr;
    // Per-run scratch, reused (one run at a time: run_mutex_).
    std::mutex run_mutex_;
    std::vector<DevView> in_views_, out_views_, tmp_views_;
    std::vector<std::uint64_t> words_;
    std::vector<LaunchShape> shapes_;
    std::int64_t shape_rows_ = -1, shape_cols_ = -1;
    std::vector<CUfunction> shape_fn_;  // the kernel each shape was chosen for
    std::vector<int> shape_smem_;       // dynamic shared memory of its launches (bytes)
    std::vector<const LoadedKernel*> run_kernels_;  // this run's kernels, from update_shapes
    Specializer specialize_;
    // The kernel a run launches: specialised on the leading dimensions for big panels.
    const LoadedKernel& kernel_for_run(std::size_t i, std::int64_t rows, std::int64_t cols);
};

const LoadedKernel& CudaExecutable::kernel_for_run(std::size_t i, std::int64_t rows, std::int64_t cols) {
    KernelInfo& k = kernels_[i];
    const bool fixed = settings_.fixed_ld == 1 ||
                       (settings_.fixed_ld == -1 && static_cast<double>(rows) * static_cast<double>(cols) >=
                                                        static_cast<double>(kSpecializeElements));
    if (!fixed) return *k.loaded;
    std::vector<long long> strides;
    for (const ArgRef& r : k.in_refs) strides.push_back(view(r).ld);
    for (const ArgRef& r : k.out_refs) strides.push_back(view(r).ld);
    if (!k.fixed || strides != k.fixed_strides) {
        k.fixed = specialize_(k.kernel, strides, false, &k.fixed_source, &k.fixed_ms);
        k.fixed_column.reset();
        k.fixed_strides = strides;
    }
    if (k.fixed->scan.smem_bytes > 0) {
        // A window scan copies its rows with tensor maps (its leading dimensions are multiples of 4 elements):
        // panels that do not start on 16 bytes (views at odd column offsets), whose column count is not a
        // multiple of 4 or whose rows do not fit the maps' 32-bit coordinates, and drivers without
        // cuTensorMapEncodeTiled, get the column scan.
        bool aligned = cols % 4 == 0 && rows <= std::numeric_limits<std::int32_t>::max() - codegen::kWindowScanBatchRows &&
                       driver_api().cuTensorMapEncodeTiled != nullptr;
        for (const ArgRef& r : k.in_refs) aligned = aligned && view(r).ptr % 16 == 0;
        if (!aligned) {
            if (!k.fixed_column) {
                CacheSource source;
                double ms = 0;
                k.fixed_column = specialize_(k.kernel, strides, true, &source, &ms);
            }
            return *k.fixed_column;
        }
    }
    return *k.fixed;
}

void CudaExecutable::update_shapes(std::int64_t rows, std::int64_t cols) {
    run_kernels_.resize(kernels_.size());
    bool same = rows == shape_rows_ && cols == shape_cols_;
    for (std::size_t i = 0; i < kernels_.size(); ++i) {  // once per kernel and run
        run_kernels_[i] = &kernel_for_run(i, rows, cols);
        same = same && shape_fn_[i] == run_kernels_[i]->fn;
    }
    if (same) return;
    for (std::size_t i = 0; i < kernels_.size(); ++i) {
        const LoadedKernel& lk = *run_kernels_[i];
        shape_fn_[i] = lk.fn;
        LaunchInput li;
        li.rows = rows;
        li.cols = cols;
        li.halo = kernels_[i].kernel.halo;
        const bool scan = lk.scan.smem_bytes > 0;  // window scan: its block is fixed
        li.block = settings_.block && !scan ? settings_.block : lk.block;
        li.blocks_per_sm = settings_.block && !scan ? std::max(1, lk.blocks_per_sm * lk.block / settings_.block) : lk.blocks_per_sm;
        li.cols_per_block = scan ? codegen::kWindowScanColumns : 0;
        if (scan) li.waves = kWindowScanWaves;
        shape_smem_[i] = scan ? lk.scan.smem_bytes : settings_.smem + li.block * lk.smem_per_thread;
        if (shape_smem_[i] > dev_.smem_optin)
            throw InputError(fmt::format("cuda: kernel {} with blocks of {} threads needs {} bytes of shared memory; "
                                         "the device allows {} (FJ_CUDA_BLOCK, FJ_CUDA_SMEM)",
                                         lk.function, li.block, shape_smem_[i], dev_.smem_optin));
        if (!scan && (settings_.smem > 0 || (settings_.block && lk.smem_per_thread > 0))) {
            if (shape_smem_[i] > 48 * 1024)
                FJ_CU(cuFuncSetAttribute, lk.fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shape_smem_[i]);
            FJ_CU(cuOccupancyMaxActiveBlocksPerMultiprocessor, &li.blocks_per_sm, lk.fn, li.block,
                  static_cast<std::size_t>(shape_smem_[i]));
            li.blocks_per_sm = std::max(1, li.blocks_per_sm);
        }
        li.sm_count = dev_.sm_count;
        li.max_grid_x = dev_.max_grid_x;
        li.max_grid_y = dev_.max_grid_y;
        li.tile_rows = options_.tile_rows;
        shapes_[i] = choose_launch(li);
    }
    shape_rows_ = rows;
    shape_cols_ = cols;
}

void CudaExecutable::run(const std::vector<Panel>& inputs, const std::vector<Panel>& outputs) {
    if (inputs.size() != inputs_.size() || outputs.size() != outputs_.size())
        throw InputError(fmt::format("cuda: run with {} input(s) and {} output(s); the program has {} and {}",
                                     inputs.size(), outputs.size(), inputs_.size(), outputs_.size()));
    const Panel& shape = !outputs.empty() ? outputs[0] : inputs.at(0);
    const std::int64_t rows = shape.rows, cols = shape.cols;
    std::lock_guard<std::mutex> lock(run_mutex_);
    make_current(dev_);
    // A blocking stream (flags 0) orders itself after work on the legacy default stream, where CuPy and
    // PyTorch put theirs by default, so inputs they just wrote are complete when our kernels read them.
    if (!stream_) FJ_CU(cuStreamCreate, &stream_, 0u);
    if (rows <= 0 || cols <= 0) return;
    const std::size_t elem = dtype_size(dtype_);
    const std::size_t dense = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols) * elem;

    // Host panels are staged through device memory (dense, ld = cols); device panels are used in place.
    RunMemory mem(dev_, stream_);
    in_views_.resize(inputs.size());
    out_views_.resize(outputs.size());
    tmp_views_.resize(n_tmp_);
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        const Panel& p = inputs[i];
        if (p.memory == Memory::Cuda) {
            in_views_[i] = {reinterpret_cast<CUdeviceptr>(p.data), p.ld};
        } else {
            in_views_[i] = {mem.alloc(dense), cols};
            copy_2d(stream_, true, p, in_views_[i].ptr, cols);
        }
    }
    for (std::size_t o = 0; o < outputs.size(); ++o) {
        const Panel& p = outputs[o];
        out_views_[o] = p.memory == Memory::Cuda ? DevView{reinterpret_cast<CUdeviceptr>(p.data), p.ld}
                                                 : DevView{mem.alloc(dense), cols};
    }
    for (DevView& t : tmp_views_) t = {mem.alloc(dense), cols};

    update_shapes(rows, cols);
    for (std::size_t i = 0; i < kernels_.size(); ++i) {
        const KernelInfo& k = kernels_[i];
        const LaunchShape& s = shapes_[i];
        words_.clear();
        for (const ArgRef& r : k.in_refs) words_.push_back(view(r).ptr);
        for (const ArgRef& r : k.in_refs) words_.push_back(static_cast<std::uint64_t>(view(r).ld));
        for (const ArgRef& r : k.out_refs) words_.push_back(view(r).ptr);
        for (const ArgRef& r : k.out_refs) words_.push_back(static_cast<std::uint64_t>(view(r).ld));
        words_.push_back(static_cast<std::uint64_t>(rows));
        words_.push_back(static_cast<std::uint64_t>(cols));
        words_.push_back(static_cast<std::uint64_t>(s.tile_rows));
        words_.push_back(static_cast<std::uint64_t>(s.ntiles));
        if (run_kernels_[i]->scan.smem_bytes > 0) append_tensor_maps(k, rows, cols, run_kernels_[i]->scan.box_rows);
        void* params[] = {words_.data()};
        FJ_CU(cuLaunchKernel, shape_fn_[i], static_cast<unsigned>(s.grid_x), static_cast<unsigned>(s.grid_y), 1u,
              static_cast<unsigned>(s.block), 1u, 1u, static_cast<unsigned>(shape_smem_[i]), stream_, params, nullptr);
    }
    for (std::size_t o = 0; o < outputs.size(); ++o)
        if (outputs[o].memory != Memory::Cuda) copy_2d(stream_, false, outputs[o], out_views_[o].ptr, cols);
    FJ_CU(cuStreamSynchronize, stream_);
}

// A window scan's tensor maps, after the words at the next 128 bytes: per input, boxes of a batch and of the
// ring's mirror rows (codegen/cuda/emit.hpp).
void CudaExecutable::append_tensor_maps(const KernelInfo& k, std::int64_t rows, std::int64_t cols, int box_rows) {
    constexpr std::size_t kMapWords = 16;
    while (words_.size() % kMapWords) words_.push_back(0);
    for (const ArgRef& r : k.in_refs) {
        const DevView v = view(r);
        const std::uint64_t dims[2] = {static_cast<std::uint64_t>(cols), static_cast<std::uint64_t>(rows)};
        const std::uint64_t strides[1] = {static_cast<std::uint64_t>(v.ld) * 4};
        const unsigned element_strides[2] = {1, 1};
        for (int rows_of_box : {box_rows, codegen::kWindowScanMirrorRows}) {
            const unsigned box[2] = {static_cast<unsigned>(codegen::kWindowScanColumns), static_cast<unsigned>(rows_of_box)};
            const std::size_t at = words_.size();
            words_.resize(at + kMapWords);
            FJ_CU(cuTensorMapEncodeTiled, &words_[at], CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2u, reinterpret_cast<void*>(v.ptr),
                  dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                  CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
        }
    }
}

std::string CudaExecutable::explain() const {
    std::string out = fmt::format("backend cuda: {} ({}, {} SMs), {}, {} kernel(s), prepared in {:.2f} ms\n", dev_.name,
                                  dev_.arch(), dev_.sm_count, dtype_name(dtype_), kernels_.size(), prepare_ms_);
    for (std::size_t i = 0; i < kernels_.size(); ++i) {
        const KernelInfo& k = kernels_[i];
        const LoadedKernel& lk = *k.loaded;
        out += fmt::format("  kernel {}: {} ({:.2f} ms, module load {:.2f} ms), {} registers, {} bytes local, "
                           "block {} ({} per SM), halo {}\n",
                           lk.function, cache_source_name(k.source), k.ms, k.load_ms, lk.registers, lk.local_bytes,
                           lk.block, lk.blocks_per_sm, k.kernel.halo);
        if (k.fixed)
            out += fmt::format("    specialised on leading dimensions [{}] ({}, {:.2f} ms), {} registers, block {} ({} per "
                               "SM){}\n",
                               fmt::join(k.fixed_strides, ", "), cache_source_name(k.fixed_source), k.fixed_ms,
                               k.fixed->registers, k.fixed->block, k.fixed->blocks_per_sm,
                               k.fixed->scan.smem_bytes ? fmt::format(", window scan with {} B of shared memory per block",
                                                                      k.fixed->scan.smem_bytes)
                               : k.fixed->smem_per_thread ? fmt::format(", {} B of shared memory per thread (staged loads or echo rings)",
                                                                        k.fixed->smem_per_thread)
                                                          : std::string());
        if (k.fixed_column)
            out += fmt::format("    and as a column scan for panels not 16-byte aligned, with a column count that is not a "
                               "multiple of 4 or with 2^31 rows or more, or without tensor maps in the driver: {} registers, "
                               "block {} ({} per SM)\n",
                               k.fixed_column->registers, k.fixed_column->block, k.fixed_column->blocks_per_sm);
        if (shape_rows_ >= 0) {
            const LaunchShape& s = shapes_[i];
            out += fmt::format("    last launch: {} x {}: grid {} x {}, block {}, {} tile(s) of {} rows\n", shape_rows_,
                               shape_cols_, s.grid_x, s.grid_y, s.block, s.ntiles, s.tile_rows);
        }
    }
    const CacheStats st = KernelCache::global().stats();
    out += fmt::format("  kernel cache ({}): {} memory hit(s), {} disk hit(s), {} compiled, {} rejected\n",
                       KernelCache::global().dir().empty() ? "memory only" : KernelCache::global().dir(),
                       st.memory_hits, st.disk_hits, st.misses, st.rejected);
    return out;
}

class CudaBackend final : public BackendImpl {
public:
    CudaBackend(const Device& dev, NvrtcTarget target) : dev_(dev), target_(std::move(target)) {}
    const char* name() const override { return "cuda"; }
    std::unique_ptr<Executable> prepare(const codegen::Plan& plan, DType dtype, const CompileOptions& options) override;

private:
    std::shared_ptr<const LoadedKernel> load(const std::string& key, const CacheEntry& e, codegen::WindowScanLayout scan = {});

    const Device& dev_;
    NvrtcTarget target_;
    std::mutex mutex_;
    std::map<std::string, std::shared_ptr<const LoadedKernel>> loaded_;
};

std::shared_ptr<const LoadedKernel> CudaBackend::load(const std::string& key, const CacheEntry& e,
                                                      codegen::WindowScanLayout scan) {
    auto lk = std::make_shared<LoadedKernel>();
    lk->key = key;
    lk->function = e.function;
    const int smem_per_thread = e.smem_per_thread;
    lk->smem_per_thread = smem_per_thread;
    lk->scan = std::move(scan);
    const int block_smem = lk->scan.smem_bytes;
    FJ_CU(cuModuleLoadData, &lk->module, e.image.data());
    try {
        FJ_CU(cuModuleGetFunction, &lk->fn, lk->module, e.function.c_str());
        FJ_CU(cuFuncGetAttribute, &lk->registers, CU_FUNC_ATTRIBUTE_NUM_REGS, lk->fn);
        FJ_CU(cuFuncGetAttribute, &lk->local_bytes, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, lk->fn);
        if (block_smem > 0) {
            if (block_smem > dev_.smem_optin)  // (the specialiser chose the column scan for such devices)
                throw BackendError(fmt::format("cuda: window-scan kernel {} needs {} bytes of shared memory per block; "
                                               "the device allows {} (FJ_CUDA_WINDOW_SCAN=0 runs the column scan)",
                                               e.function, block_smem, dev_.smem_optin));
            FJ_CU(cuFuncSetAttribute, lk->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, block_smem);
            // (Its __launch_bounds__: 32 threads per warp of CudaEmitOptions::window_scan_warps.)
            FJ_CU(cuFuncGetAttribute, &lk->block, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, lk->fn);
            FJ_CU(cuOccupancyMaxActiveBlocksPerMultiprocessor, &lk->blocks_per_sm, lk->fn, lk->block,
                  static_cast<std::size_t>(block_smem));
        } else if (smem_per_thread == 0) {
            int min_grid = 0, block = 0;
            FJ_CU(cuOccupancyMaxPotentialBlockSize, &min_grid, &block, lk->fn, nullptr, std::size_t{0}, 0);
            lk->block = std::max(32, block);
            FJ_CU(cuOccupancyMaxActiveBlocksPerMultiprocessor, &lk->blocks_per_sm, lk->fn, lk->block, std::size_t{0});
        } else {
            // Shared memory grows with the block: the block size with the most resident threads (the
            // larger block on ties: fewer, longer column groups).
            FJ_CU(cuFuncSetAttribute, lk->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, dev_.smem_optin);
            int best_threads = 0;
            for (int b = 1024; b >= 64; b -= 32) {
                const std::size_t bytes = static_cast<std::size_t>(b) * static_cast<std::size_t>(smem_per_thread);
                if (bytes > static_cast<std::size_t>(dev_.smem_optin)) continue;
                int n = 0;
                FJ_CU(cuOccupancyMaxActiveBlocksPerMultiprocessor, &n, lk->fn, b, bytes);
                if (n * b > best_threads) {
                    best_threads = n * b;
                    lk->block = b;
                    lk->blocks_per_sm = n;
                }
            }
            if (best_threads == 0)
                throw BackendError(fmt::format("cuda: kernel {}: {} bytes of shared memory per thread fit no block",
                                               e.function, smem_per_thread));
        }
        lk->blocks_per_sm = std::max(1, lk->blocks_per_sm);
    } catch (...) {
        driver_api().cuModuleUnload(lk->module);
        throw;
    }
    return lk;
}

std::unique_ptr<Executable> CudaBackend::prepare(const codegen::Plan& plan, DType dtype, const CompileOptions& options) {
    const auto t0 = std::chrono::steady_clock::now();
    make_current(dev_);
    const CudaSettings settings = CudaSettings::from_env();
    const std::size_t n = plan.regions.size();
    std::vector<KernelInfo> kernels(n);
    std::vector<std::string> keys(n);
    std::vector<std::size_t> missing;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        for (std::size_t i = 0; i < n; ++i) {
            kernels[i].kernel = plan.regions[i].kernel;
            keys[i] = cuda_kernel_key(kernels[i].kernel, dtype, target_.arch, target_.cubin, settings);
            auto it = loaded_.find(keys[i]);
            if (it != loaded_.end()) {
                kernels[i].loaded = it->second;
                kernels[i].source = CacheSource::Memory;
            } else {
                missing.push_back(i);
            }
        }
    }
    // Disk reads and compilations in parallel; module loads afterwards, on this thread (context current).
    std::vector<CacheResult> results(missing.size());
    parallel_for(missing.size(), [&](std::size_t m) {
        const std::size_t i = missing[m];
        results[m] = KernelCache::global().get(keys[i], [&] {
            return compile_cuda_kernel(kernels[i].kernel, dtype, target_.arch, target_.cubin, settings).entry;
        });
    });
    for (std::size_t m = 0; m < missing.size(); ++m) {
        const std::size_t i = missing[m];
        kernels[i].source = results[m].source;
        kernels[i].ms = results[m].ms;
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = loaded_.find(keys[i]);
        if (it == loaded_.end()) {
            const auto tl = std::chrono::steady_clock::now();
            it = loaded_.emplace(keys[i], load(keys[i], *results[m].entry)).first;
            kernels[i].load_ms = ms_since(tl);
        }
        kernels[i].loaded = it->second;
    }
    const CudaSettings fixed_settings = specialised_settings(settings);
    Specializer specialize = [this, dtype, fixed_settings](const ir::Kernel& k, const std::vector<long long>& strides,
                                                           bool column_only, CacheSource* source, double* ms) {
        CudaSettings settings = fixed_settings;
        if (column_only) settings.window_scan = 0;
        codegen::WindowScanLayout scan;
        codegen::CudaEmitOptions eo = cuda_emit_options(k, dtype, settings, strides, target_.arch, &scan);
        // A window scan needs its rings in one block's shared memory: on devices that allow less per block
        // than it needs (kWindowScanMaxSharedBytes is sized for sm_90), the column scan instead.
        if (scan.smem_bytes > dev_.smem_optin) {
            settings.window_scan = 0;
            eo = cuda_emit_options(k, dtype, settings, strides, target_.arch, &scan);
        }
        const std::string key = cuda_kernel_key(k, dtype, target_.arch, target_.cubin, settings, strides);
        {
            std::lock_guard<std::mutex> lock(mutex_);
            auto it = loaded_.find(key);
            if (it != loaded_.end()) {
                *source = CacheSource::Memory;
                *ms = 0;
                return it->second;
            }
        }
        CacheResult r = KernelCache::global().get(
            key, [&] { return compile_cuda_kernel(k, dtype, target_.arch, target_.cubin, settings, strides).entry; });
        *source = r.source;
        *ms = r.ms;
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = loaded_.find(key);
        if (it == loaded_.end()) {
            it = loaded_.emplace(key, load(key, *r.entry, scan)).first;
        }
        return it->second;
    };
    return std::make_unique<CudaExecutable>(dev_, plan, dtype, options, settings, std::move(kernels), ms_since(t0),
                                            std::move(specialize));
}

}  // namespace

}  // namespace cuda

BackendImpl* cuda_backend(std::string* why_not) {
    static std::once_flag once;
    static std::unique_ptr<cuda::CudaBackend> backend;
    static std::string why;
    std::call_once(once, [] {
        try {
            std::string reason;
            if (!cuda::nvrtc(&reason)) {
                why = reason;
                return;
            }
            const cuda::Device* dev = cuda::device(&reason);
            if (!dev) {
                why = reason;
                return;
            }
            backend = std::make_unique<cuda::CudaBackend>(*dev, cuda::nvrtc_target(dev->cc_major, dev->cc_minor));
        } catch (const std::exception& e) {
            why = e.what();
        }
    });
    if (!backend && why_not) *why_not = why;
    return backend.get();
}

}  // namespace fj::rt
