// The CUDA backend's executable: a plan's steps as kernels launched through the driver API on one stream,
// with host panels staged through device memory and intermediates in device memory between steps.
// Which kernel runs (generic or specialised on the panels' leading dimensions, column scan or window scan)
// is codegen::select_kernel's choice; compiling is runtime/cuda/compile.cpp, caching kernel_cache.cpp.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dsl/error.hpp"
#include "runtime/backend.hpp"
#include "runtime/cuda/column_kernels.hpp"
#include "runtime/cuda/compile.hpp"
#include "runtime/chunk_plan.hpp"
#include "runtime/chunk_queue.hpp"
#include "runtime/cuda/cuda_api.hpp"
#include "runtime/cuda/host_pipeline.hpp"
#include "runtime/cuda/launch_config.hpp"
#include "runtime/cuda/memory.hpp"
#include "runtime/cuda/row_kernels.hpp"
#include "runtime/thread_pool.hpp"

namespace fj::rt {

namespace cuda {

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Waves of blocks a window scan's time tiles aim at (LaunchInput::waves): few, because each tile pays a
// halo, guarded first batches and the search for first values, and a 32-column block is short already
// (H200, corr w=250: 6 tiles of 8,334 rows 13.38 ms, 2 or 1 tile(s) 13.10 / 13.09 ms).
constexpr int kWindowScanWaves = 4;

// Host panels of at least this many bytes (inputs and outputs together) go through the chunk pipeline, and it
// aims at chunks of about kPipelineChunkBytes (runtime/cuda/host_pipeline.hpp).
constexpr std::int64_t kPipelineBytes = std::int64_t{64} << 20;
constexpr std::int64_t kPipelineChunkBytes = std::int64_t{256} << 20;

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
    // A column scan of a kernel with refolds: its launches take the repair flags' words, and the kernel's repair
    // pass follows it (KernelChoice::flags).
    bool flags = false;
};

using ArgRef = codegen::Plan::Slot;  // where a kernel argument's panel lives in a run

struct KernelInfo {  // one kernel of an executable
    const ir::Kernel* kernel = nullptr;  // its plan step's (the plan outlives the executable)
    std::shared_ptr<const LoadedKernel> loaded;
    CacheSource source = CacheSource::Compiled;
    double ms = 0;       // compile / disk read / 0
    double load_ms = 0;  // cuModuleLoadData and attribute queries (0 when already loaded)
    std::vector<ArgRef> in_refs, out_refs;
    // The same kernel specialised on the leading dimensions of the last big run (see kSpecializeElements).
    std::shared_ptr<const LoadedKernel> fixed;
    std::shared_ptr<const LoadedKernel> fixed_column;  // when `fixed` is a window scan: the column scan, for
                                                       // the panels its tensor copies cannot read
    std::vector<long long> fixed_strides;
    CacheSource fixed_source = CacheSource::Compiled;
    double fixed_ms = 0;
    // Kernels with refolds: the repair pass (codegen::select_repair_kernel), run after a kernel that raises flags.
    std::shared_ptr<const LoadedKernel> repair;
    // Row steps (cross-sectional operators): the operator; `loaded` is the row kernel of the panels' dtype
    // (runtime/cuda/row_kernels.hpp), the same for every row step.
    const Node* row_op = nullptr;
    // Column steps (long order statistics): the operator; `loaded` is the column kernel of the panels' dtype
    // (runtime/cuda/column_kernels.hpp), the same for every column step.
    const Node* column_op = nullptr;
    bool hand_written() const { return row_op || column_op; }
};

// Specialised kernels on these panels (codegen::select_kernel's choice): each from the caches or compiled
// now, the compilations in parallel (a program of a hundred factors specialises hundreds of kernels at its
// first big run), then loaded on the calling thread (the context is current there).
struct SpecializeRequest {
    const ir::Kernel* kernel = nullptr;
    codegen::PanelClass panels;
    std::shared_ptr<const LoadedKernel> result;
    CacheSource source = CacheSource::Compiled;
    double ms = 0;
};
using Specializer = std::function<void(std::vector<SpecializeRequest>&)>;

class CudaBackend;
// The backend of device `ordinal` (the default one for the program's device), made at first use: several GPUs of
// one host each load their own modules into their own primary context (RunOptions::devices).
BackendImpl& backend_on(int ordinal);

// Events between a run's phases (FJ_PROFILE): mark(i) records event i on the stream; intervals() gives the
// times between consecutive marks after the stream is synchronized (the first from the run's first event).
// Size 0: nothing is recorded.
class StepProfile {
public:
    StepProfile(std::size_t marks, CUstream stream) : stream_(stream) {
        events_.resize(marks + (marks ? 1 : 0), nullptr);
        for (CUevent& e : events_) FJ_CU(cuEventCreate, &e, 0u);
        if (!events_.empty()) FJ_CU(cuEventRecord, events_[0], stream_);
    }
    ~StepProfile() {
        for (CUevent e : events_)
            if (e) driver_api().cuEventDestroy(e);
    }
    StepProfile(const StepProfile&) = delete;
    StepProfile& operator=(const StepProfile&) = delete;
    void mark(std::size_t i) {
        if (!events_.empty()) FJ_CU(cuEventRecord, events_[i + 1], stream_);
    }
    std::vector<double> intervals() const {
        std::vector<double> ms;
        for (std::size_t i = 1; i < events_.size(); ++i) {
            float t = 0;
            FJ_CU(cuEventElapsedTime, &t, events_[i - 1], events_[i]);
            ms.push_back(t);
        }
        return ms;
    }

private:
    CUstream stream_;
    std::vector<CUevent> events_;
};

class CudaExecutable final : public Executable {
public:
    CudaExecutable(const Device& dev, const codegen::Plan& plan, DType dtype, const CompileOptions& options,
                   CudaSettings settings, std::vector<KernelInfo> kernels, double prepare_ms, Specializer specialize)
        : dev_(dev), dtype_(dtype), options_(options), settings_(settings), plan_(plan),
          kernels_(std::move(kernels)), prepare_ms_(prepare_ms),
          specialize_(std::move(specialize)) {
        // Argument sources by index, so that a run looks nothing up by name.
        for (KernelInfo& k : kernels_) {
            for (const std::string& n : k.kernel->inputs) k.in_refs.push_back(plan.slot_of(n));
            for (const std::string& n : k.kernel->outputs) k.out_refs.push_back(plan.slot_of(n));
        }
        shapes_.resize(kernels_.size());
        shape_fn_.resize(kernels_.size());
        shape_smem_.resize(kernels_.size());
    }

    ~CudaExecutable() override {
        if (stream_)
            if (const Driver* d = driver()) d->cuStreamDestroy(stream_);  // errors at process exit are moot
    }

    void run(const std::vector<Panel>& inputs, const std::vector<Panel>& outputs, const RunOptions& options) override;
    void run_async(const std::vector<Panel>& inputs, const std::vector<Panel>& outputs, void* stream,
                   const RunOptions& options) override;
    std::string explain() const override;

private:
    DevView view(const ArgRef& r) const {
        switch (r.kind) {
        case ArgRef::Input: return in_views_[static_cast<std::size_t>(r.index)];
        case ArgRef::Output: return out_views_[static_cast<std::size_t>(r.index)];
        case ArgRef::Intermediate: break;
        }
        return tmp_views_[static_cast<std::size_t>(r.index)];
    }
    std::vector<long long> strides_of(const KernelInfo& k) const;
    void specialise_all(std::int64_t rows, std::int64_t cols);
    void update_shapes(std::int64_t rows, std::int64_t cols);
    void report_profile(const std::vector<double>& ms, double wall_ms, std::int64_t rows, std::int64_t cols) const;
    void check_counts(const std::vector<Panel>& inputs, const std::vector<Panel>& outputs) const;
    void enqueue_steps(std::int64_t rows, std::int64_t cols, RunMemory& mem, CUstream s, StepProfile* profile);
    void run_kernel_step(std::size_t i, std::int64_t rows, std::int64_t cols, RunMemory& mem, CUstream stream);
    void run_row_step(const KernelInfo& k, std::int64_t rows, std::int64_t cols, RunMemory& mem, CUstream stream);
    void run_column_step(const KernelInfo& k, std::int64_t rows, std::int64_t cols, RunMemory& mem, CUstream stream);
    // Host panels through the chunk pipeline (runtime/cuda/host_pipeline.hpp): which runs take it, and the run.
    bool use_host_pipeline(const std::vector<Panel>& inputs, const std::vector<Panel>& outputs, const RunOptions& options) const;
    // `workers`: the device ordinal of each worker (the program's device alone, or RunOptions::devices).
    void run_host_pipeline(const std::vector<Panel>& inputs, const std::vector<Panel>& outputs, const RunOptions& options,
                           const std::vector<int>& workers);
    // The device that holds the run's device panels (-1: none), after checking they are all on one device.
    int device_of_panels(const std::vector<Panel>& inputs, const std::vector<Panel>& outputs) const;
    // This plan as executable on device `ordinal` for the k-th worker there (this one for the program's device's
    // first): prepared at first use, kept. Each has its own streams, pipeline and per-run scratch, so workers on
    // one device do not share state. Called with run_mutex_ held.
    CudaExecutable& replica(int ordinal, int k);
    void append_tensor_maps(const KernelInfo& k, std::int64_t rows, std::int64_t cols, int box_rows);

    const Device& dev_;
    DType dtype_;
    CompileOptions options_;
    CudaSettings settings_;
    const codegen::Plan& plan_;  // (owned by the Program, which outlives its executables)
    std::vector<KernelInfo> kernels_;
    double prepare_ms_ = 0;
    CUstream stream_ = nullptr;
    std::unique_ptr<HostPipeline> pipeline_;  // made at the first run of host panels through it
    std::map<std::pair<int, int>, std::unique_ptr<Executable>> replicas_;  // see replica()
    const bool profile_ = std::getenv("FJ_PROFILE") != nullptr;
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

std::vector<long long> CudaExecutable::strides_of(const KernelInfo& k) const {
    std::vector<long long> strides;
    for (const ArgRef& r : k.in_refs) strides.push_back(view(r).ld);
    for (const ArgRef& r : k.out_refs) strides.push_back(view(r).ld);
    return strides;
}

// Specialises, in one parallel batch, every kernel whose specialisation is missing or was made for other
// leading dimensions, so that kernel_for_run finds them made.
void CudaExecutable::specialise_all(std::int64_t rows, std::int64_t cols) {
    if (!codegen::specialise_for(rows, cols, settings_)) return;
    std::vector<SpecializeRequest> requests;
    std::vector<std::size_t> which;
    for (std::size_t i = 0; i < kernels_.size(); ++i) {
        const KernelInfo& k = kernels_[i];
        if (k.hand_written()) continue;
        std::vector<long long> strides = strides_of(k);
        if (k.fixed && strides == k.fixed_strides) continue;
        requests.push_back({k.kernel, {std::move(strides), true}, nullptr, CacheSource::Compiled, 0});
        which.push_back(i);
    }
    if (requests.empty()) return;
    specialize_(requests);
    for (std::size_t r = 0; r < requests.size(); ++r) {
        KernelInfo& k = kernels_[which[r]];
        k.fixed = requests[r].result;
        k.fixed_source = requests[r].source;
        k.fixed_ms = requests[r].ms;
        k.fixed_column.reset();
        k.fixed_strides = std::move(requests[r].panels.strides);
    }
}

const LoadedKernel& CudaExecutable::kernel_for_run(std::size_t i, std::int64_t rows, std::int64_t cols) {
    KernelInfo& k = kernels_[i];
    if (!codegen::specialise_for(rows, cols, settings_)) return *k.loaded;
    if (!k.fixed || strides_of(k) != k.fixed_strides)
        throw BackendError(fmt::format("cuda: kernel {} was not specialised before its launch", k.kernel->name));
    if (k.fixed->scan.smem_bytes > 0) {
        // A window scan copies its rows with tensor maps (its leading dimensions are multiples of 4 elements):
        // panels that do not start on 16 bytes (views at odd column offsets), whose column count is not a
        // multiple of 4 or whose rows do not fit the maps' 32-bit coordinates, and drivers without
        // cuTensorMapEncodeTiled, get the column scan. (Intermediates, not allocated yet, read 0: device
        // allocations are aligned far beyond 16 bytes.)
        bool copies = cols % 4 == 0 && rows <= std::numeric_limits<std::int32_t>::max() - codegen::kWindowScanBatchRows &&
                      driver_api().cuTensorMapEncodeTiled != nullptr;
        for (const ArgRef& r : k.in_refs) copies = copies && view(r).ptr % 16 == 0;
        if (!copies) {
            if (!k.fixed_column) {
                std::vector<SpecializeRequest> one{{k.kernel, {k.fixed_strides, false}, nullptr, CacheSource::Compiled, 0}};
                specialize_(one);
                k.fixed_column = one[0].result;
            }
            return *k.fixed_column;
        }
    }
    return *k.fixed;
}

void CudaExecutable::update_shapes(std::int64_t rows, std::int64_t cols) {
    specialise_all(rows, cols);
    run_kernels_.resize(kernels_.size());
    bool same = rows == shape_rows_ && cols == shape_cols_;
    for (std::size_t i = 0; i < kernels_.size(); ++i) {  // once per kernel and run
        run_kernels_[i] = kernels_[i].hand_written() ? kernels_[i].loaded.get() : &kernel_for_run(i, rows, cols);
        same = same && shape_fn_[i] == run_kernels_[i]->fn;
    }
    if (same) return;
    for (std::size_t i = 0; i < kernels_.size(); ++i) {
        const LoadedKernel& lk = *run_kernels_[i];
        shape_fn_[i] = lk.fn;
        if (kernels_[i].hand_written()) continue;  // (row and column steps: run_row_step, run_column_step)
        LaunchInput li;
        li.rows = rows;
        li.cols = cols;
        li.halo = kernels_[i].kernel->halo;
        const bool scan = lk.scan.smem_bytes > 0;  // window scan: its block is fixed
        li.block = settings_.block && !scan ? settings_.block : lk.block;
        li.blocks_per_sm = settings_.block && !scan ? std::max(1, lk.blocks_per_sm * lk.block / settings_.block) : lk.blocks_per_sm;
        li.cols_per_block = scan ? codegen::kWindowScanColumns : 0;
        if (scan) li.waves = kWindowScanWaves;
        shape_smem_[i] = scan ? lk.scan.smem_bytes : li.block * lk.smem_per_thread;
        if (shape_smem_[i] > dev_.smem_optin)
            throw InputError(fmt::format("cuda: kernel {} with blocks of {} threads needs {} bytes of shared memory; "
                                         "the device allows {} (FJ_CUDA_BLOCK)",
                                         lk.function, li.block, shape_smem_[i], dev_.smem_optin));
        if (!scan && settings_.block && lk.smem_per_thread > 0) {
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

void CudaExecutable::check_counts(const std::vector<Panel>& inputs, const std::vector<Panel>& outputs) const {
    if (inputs.size() != plan_.inputs.size() || outputs.size() != plan_.outputs.size())
        throw InputError(fmt::format("cuda: run with {} input(s) and {} output(s); the program has {} and {}",
                                     inputs.size(), outputs.size(), plan_.inputs.size(), plan_.outputs.size()));
}

void CudaExecutable::run(const std::vector<Panel>& inputs, const std::vector<Panel>& outputs, const RunOptions& options) {
    check_counts(inputs, outputs);
    const Panel& shape = !outputs.empty() ? outputs[0] : inputs.at(0);
    const std::int64_t rows = shape.rows, cols = shape.cols;
    std::lock_guard<std::mutex> lock(run_mutex_);
    make_current(dev_);
    // A blocking stream (flags 0) orders itself after work on the legacy default stream, where CuPy and
    // PyTorch put theirs by default, so inputs they just wrote are complete when our kernels read them.
    if (!stream_) FJ_CU(cuStreamCreate, &stream_, 0u);
    if (rows <= 0 || cols <= 0) {
        if (options.progress) options.progress(RunProgress{});
        return;
    }
    if (!options.devices.empty()) {
        const int count = device_count();
        for (int d : options.devices)
            if (d >= count)
                throw InputError(fmt::format("cuda: RunOptions::devices names device {} but {} device(s) exist (ordinals 0 to {})",
                                             d, count, count - 1));
    }
    const int holder = device_of_panels(inputs, outputs);
    if (holder >= 0 && holder != dev_.ordinal) {  // device panels run where they are
        RunOptions here = options;
        here.devices.clear();
        replica(holder, 0).run(inputs, outputs, here);  // (it takes its own run_mutex_)
        make_current(dev_);
        return;
    }
    if (holder < 0 && !options.devices.empty() && options.devices != std::vector<int>{dev_.ordinal}) {
        run_host_pipeline(inputs, outputs, options, options.devices);
        return;
    }
    if (use_host_pipeline(inputs, outputs, options)) {
        run_host_pipeline(inputs, outputs, options, {dev_.ordinal});
        return;
    }
    const auto t_run = std::chrono::steady_clock::now();
    StepProfile profile(profile_ ? kernels_.size() + 2 : 0, stream_);
    const std::size_t elem = dtype_size(dtype_);
    const std::size_t dense = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols) * elem;

    // Host panels (small ones, or mixed with device panels) are copied whole into device memory (dense, ld =
    // cols); device panels are used in place.
    RunMemory mem(dev_, stream_);
    in_views_.resize(inputs.size());
    out_views_.resize(outputs.size());
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
    profile.mark(0);
    enqueue_steps(rows, cols, mem, stream_, &profile);
    for (std::size_t o = 0; o < outputs.size(); ++o)
        if (outputs[o].memory != Memory::Cuda) copy_2d(stream_, false, outputs[o], out_views_[o].ptr, cols);
    profile.mark(kernels_.size() + 1);
    FJ_CU(cuStreamSynchronize, stream_);
    if (profile_) report_profile(profile.intervals(), ms_since(t_run), rows, cols);
    if (options.progress) {
        RunProgress done;
        done.chunks_done = done.chunks_total = 1;
        done.rows_done = done.rows_total = rows;
        done.elapsed_s = ms_since(t_run) / 1e3;
        options.progress(done);
    }
}

// Device panels only: the steps enqueued on the caller's stream, nothing waited for. Intermediates come from
// the stream-ordered pool on that stream and go back to it on that stream, after the work that reads them.
void CudaExecutable::run_async(const std::vector<Panel>& inputs, const std::vector<Panel>& outputs, void* stream,
                               const RunOptions& options) {
    check_counts(inputs, outputs);
    for (const Panel& p : inputs)
        if (p.memory != Memory::Cuda) throw InputError("cuda: run_async takes device panels only (an input is in host memory)");
    for (const Panel& p : outputs)
        if (p.memory != Memory::Cuda) throw InputError("cuda: run_async takes device panels only (an output is in host memory)");
    const Panel& shape = !outputs.empty() ? outputs[0] : inputs.at(0);
    const std::int64_t rows = shape.rows, cols = shape.cols;
    std::lock_guard<std::mutex> lock(run_mutex_);
    make_current(dev_);
    if (rows <= 0 || cols <= 0) return;
    CUstream s = static_cast<CUstream>(stream);
    RunMemory mem(dev_, s);
    in_views_.resize(inputs.size());
    out_views_.resize(outputs.size());
    for (std::size_t i = 0; i < inputs.size(); ++i) in_views_[i] = {reinterpret_cast<CUdeviceptr>(inputs[i].data), inputs[i].ld};
    for (std::size_t o = 0; o < outputs.size(); ++o) out_views_[o] = {reinterpret_cast<CUdeviceptr>(outputs[o].data), outputs[o].ld};
    enqueue_steps(rows, cols, mem, s, nullptr);
    if (options.progress) {
        RunProgress queued;
        queued.chunks_total = 1;
        queued.rows_total = rows;
        options.progress(queued);
    }
}

// The plan's steps on `s`, over the panels in in_views_ and out_views_ (rows x cols), intermediates from `mem`.
void CudaExecutable::enqueue_steps(std::int64_t rows, std::int64_t cols, RunMemory& mem, CUstream s, StepProfile* profile) {
    const std::size_t dense = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols) * dtype_size(dtype_);
    tmp_views_.assign(plan_.intermediates.size(), DevView{0, cols});  // allocated by their producing step
    update_shapes(rows, cols);
    for (std::size_t i = 0; i < kernels_.size(); ++i) {
        const KernelInfo& k = kernels_[i];
        for (const ArgRef& r : k.out_refs)
            if (r.kind == ArgRef::Intermediate) tmp_views_[static_cast<std::size_t>(r.index)].ptr = mem.alloc(dense);
        if (k.row_op) run_row_step(k, rows, cols, mem, s);
        else if (k.column_op) run_column_step(k, rows, cols, mem, s);
        else run_kernel_step(i, rows, cols, mem, s);
        if (profile) profile->mark(i + 1);
        // Intermediates nothing later reads go back to the pool, ordered after this step on the stream.
        for (int m : plan_.steps[i].frees) {
            mem.release(tmp_views_[static_cast<std::size_t>(m)].ptr);
            tmp_views_[static_cast<std::size_t>(m)].ptr = 0;
        }
    }
}

// Host panels go through the chunk pipeline when they are all in host memory and big enough for its overlap to
// pay (or a budget or forced chunking asks for chunks); small ones, and host panels mixed with device panels,
// are copied whole (run()).
namespace {
std::int64_t panel_bytes(const std::vector<Panel>& inputs, const std::vector<Panel>& outputs) {
    std::int64_t bytes = 0;
    for (const auto* list : {&inputs, &outputs})
        for (const Panel& p : *list) bytes += p.rows * p.cols * static_cast<std::int64_t>(dtype_size(p.dtype));
    return bytes;
}
}  // namespace

bool CudaExecutable::use_host_pipeline(const std::vector<Panel>& inputs, const std::vector<Panel>& outputs,
                                       const RunOptions& options) const {
    for (const auto* list : {&inputs, &outputs})
        for (const Panel& p : *list)
            if (p.memory != Memory::Host) return false;
    return panel_bytes(inputs, outputs) >= kPipelineBytes || options.max_device_bytes > 0 || options.chunk_rows > 0 || options.chunk_cols > 0;
}

int CudaExecutable::device_of_panels(const std::vector<Panel>& inputs, const std::vector<Panel>& outputs) const {
    // (Program::run has checked that the panels are all in one memory: host or device.)
    int holder = -1;
    std::string holder_name;
    for (int role = 0; role < 2; ++role) {
        const std::vector<Panel>& list = role == 0 ? inputs : outputs;
        for (std::size_t i = 0; i < list.size(); ++i) {
            if (list[i].memory != Memory::Cuda) continue;
            const std::string name = fmt::format("{} '{}'", role == 0 ? "input" : "output",
                                                 role == 0 ? plan_.inputs.at(i) : plan_.outputs.at(i));
            // Memory the driver does not place on a device (mapped host memory passed as a device panel) runs on
            // the program's device, as it always did.
            int ordinal = dev_.ordinal;
            if (driver_api().cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                                   reinterpret_cast<CUdeviceptr>(list[i].data)) != CUDA_SUCCESS)
                ordinal = dev_.ordinal;
            if (holder >= 0 && ordinal != holder)
                throw InputError(fmt::format("cuda: {} is on device {} and {} on device {}: a run's device panels must be "
                                             "on one device (copy them there first)",
                                             holder_name, holder, name, ordinal));
            if (holder < 0) {
                holder = ordinal;
                holder_name = name;
            }
        }
    }
    return holder;
}

CudaExecutable& CudaExecutable::replica(int ordinal, int k) {
    if (ordinal == dev_.ordinal && k == 0) return *this;
    auto& slot = replicas_[{ordinal, k}];
    if (!slot) {
        slot = backend_on(ordinal).prepare(plan_, dtype_, options_);
        make_current(dev_);  // (prepare made its device current on this thread)
    }
    return static_cast<CudaExecutable&>(*slot);
}

void CudaExecutable::run_host_pipeline(const std::vector<Panel>& inputs, const std::vector<Panel>& outputs,
                                       const RunOptions& options, const std::vector<int>& workers) {
    const Panel& shape = !outputs.empty() ? outputs[0] : inputs.at(0);
    const int n_workers = static_cast<int>(workers.size());
    std::vector<CudaExecutable*> ex;
    std::map<int, int> on_device;  // workers so far per device ordinal
    for (int d : workers) ex.push_back(&replica(d, on_device[d]++));
    ChunkRequest r;
    r.rows = shape.rows;
    r.cols = shape.cols;
    r.dtype = dtype_;
    // Each device's budget (what is free, less a margin for the pool's rounding and the kernels' own needs: flags,
    // row scratch; or max_device_bytes), shared by the workers on it (chunk_plan.hpp: worker_budget).
    r.budget_bytes = worker_budget(workers, [&](int ordinal) {
        if (options.max_device_bytes > 0) return options.max_device_bytes;
        make_current(ordinal == dev_.ordinal ? dev_ : device_at(ordinal));
        std::size_t free = 0, total = 0;
        FJ_CU(cuMemGetInfo, &free, &total);
        return static_cast<std::int64_t>(free / 10 * 9);
    });
    make_current(dev_);
    r.in_flight = HostPipeline::kSlots;
    const std::int64_t bytes = panel_bytes(inputs, outputs);
    // Enough chunks for copies and compute to overlap (each stage about a sixteenth of the run at most), and for
    // each worker's slots to fill.
    r.min_chunks = static_cast<int>(std::clamp<std::int64_t>(bytes / kPipelineChunkBytes, 1, 16));
    if (n_workers > 1) r.min_chunks = std::max(r.min_chunks, n_workers * HostPipeline::kSlots);
    r.chunk_rows = options.chunk_rows;
    r.chunk_cols = options.chunk_cols;
    const ChunkPlan chunks = plan_chunks(plan_, r);
    ChunkQueue queue(chunks.count);
    SharedProgress progress(chunks, options, queue);
    auto work = [&](int w) {
        CudaExecutable& e = *ex[static_cast<std::size_t>(w)];
        // This executable's run_mutex_ is held by run(); a replica's is taken here, for its scratch and pipeline.
        std::unique_lock<std::mutex> lock(e.run_mutex_, std::defer_lock);
        if (&e != this) lock.lock();
        const std::string label = n_workers == 1 && workers[0] == dev_.ordinal
                                      ? std::string("cuda")
                                      : fmt::format("cuda device {} ({}), worker {} of {}", e.dev_.ordinal, e.dev_.name, w + 1, n_workers);
        try {
            make_current(e.dev_);
            if (!e.stream_) FJ_CU(cuStreamCreate, &e.stream_, 0u);
            if (!e.pipeline_) e.pipeline_ = std::make_unique<HostPipeline>(e.dev_);
        } catch (const Error& err) {
            throw RunError(fmt::format("{}: could not start: {}", label, err.what()));
        }
        e.pipeline_->run(chunks, queue, progress, inputs, outputs, dtype_, label,
                         [&e](const std::vector<DevView>& ins, const std::vector<DevView>& outs, std::int64_t rows,
                              std::int64_t cols, RunMemory& mem, CUstream s) {
                             e.in_views_ = ins;
                             e.out_views_ = outs;
                             e.enqueue_steps(rows, cols, mem, s, nullptr);
                         });
    };
    try {
        run_workers(n_workers, queue, work);
    } catch (...) {
        make_current(dev_);
        throw;
    }
    make_current(dev_);
}

// FJ_PROFILE: where a run's time went, on stderr after each run: the copies in (from the start of the run,
// with allocations), each step (kernels and row steps), the copies out; the slowest steps by name.
void CudaExecutable::report_profile(const std::vector<double>& ms, double wall_ms, std::int64_t rows, std::int64_t cols) const {
    double kernels = 0, row_steps = 0;
    std::vector<std::pair<double, std::size_t>> slowest;
    for (std::size_t i = 0; i < kernels_.size(); ++i) {
        (kernels_[i].hand_written() ? row_steps : kernels) += ms[i + 1];
        slowest.emplace_back(ms[i + 1], i);
    }
    std::sort(slowest.rbegin(), slowest.rend());
    std::string out = fmt::format("factorjit profile: {} x {} {}, {} steps: wall {:.2f} ms; copies in "
                                  "{:.2f} ms; kernels {:.2f} ms; row and column steps {:.2f} ms; copies out {:.2f} ms\n",
                                  rows, cols, dtype_name(dtype_), kernels_.size(), wall_ms, ms[0], kernels, row_steps,
                                  ms[kernels_.size() + 1]);
    std::map<std::string, std::pair<int, double>> by_op;  // row and column steps by operator: count, total ms
    for (std::size_t i = 0; i < kernels_.size(); ++i)
        if (const Node* op = kernels_[i].row_op ? kernels_[i].row_op : kernels_[i].column_op) {
            auto& [n, t] = by_op[std::string(op_name(op->op))];
            ++n;
            t += ms[i + 1];
        }
    for (const auto& [op, nt] : by_op)
        out += fmt::format("  steps {}: {} taking {:.2f} ms ({:.3f} ms each)\n", op, nt.first, nt.second, nt.second / nt.first);
    for (std::size_t j = 0; j < std::min<std::size_t>(slowest.size(), 12); ++j) {
        const KernelInfo& k = kernels_[slowest[j].second];
        out += fmt::format("  {:8.3f} ms  {} {}\n", slowest[j].first,
                           k.row_op      ? fmt::format("row step {}", op_name(k.row_op->op))
                           : k.column_op ? fmt::format("column step {}", op_name(k.column_op->op))
                                         : std::string("kernel"),
                           k.kernel->name);
    }
    std::fputs(out.c_str(), stderr);
}

// A time-series step: its kernel (and, where it raises repair flags, the repair pass after it).
void CudaExecutable::run_kernel_step(std::size_t i, std::int64_t rows, std::int64_t cols, RunMemory& mem, CUstream stream) {
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
    const bool flags = run_kernels_[i]->flags;
    CUdeviceptr flag_words = 0;
    if (flags) {
        // One bit per column and time tile, zeroed on the stream before the kernel raises them.
        const std::size_t words = static_cast<std::size_t>(s.ntiles) * static_cast<std::size_t>(codegen::cuda_flag_words(cols));
        flag_words = mem.alloc(words * sizeof(std::uint32_t));
        FJ_CU(cuMemsetD32Async, flag_words, 0u, words, stream);
        words_.push_back(flag_words);
        words_.push_back(static_cast<std::uint64_t>(codegen::cuda_flag_words(cols)));
    }
    if (run_kernels_[i]->scan.smem_bytes > 0) append_tensor_maps(k, rows, cols, run_kernels_[i]->scan.box_rows);
    void* params[] = {words_.data()};
    FJ_CU(cuLaunchKernel, shape_fn_[i], static_cast<unsigned>(s.grid_x), static_cast<unsigned>(s.grid_y), 1u,
          static_cast<unsigned>(s.block), 1u, 1u, static_cast<unsigned>(shape_smem_[i]), stream, params, nullptr);
    if (flags) {
        // The repair pass over the same tiles: a block's threads read their flag and leave, except where a pass
        // needs its refolds (docs/numerics.md). Its own block size; as many tiles per grid row as fit.
        if (!k.repair) throw BackendError(fmt::format("cuda: kernel {} raises repair flags but has no repair pass", k.kernel->name));
        const LoadedKernel& r = *k.repair;
        const std::int64_t grid_x = (cols + r.block - 1) / r.block;
        const std::int64_t grid_y = std::min<std::int64_t>(s.ntiles, dev_.max_grid_y);
        FJ_CU(cuLaunchKernel, r.fn, static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y), 1u,
              static_cast<unsigned>(r.block), 1u, 1u, 0u, stream, params, nullptr);
        mem.release(flag_words);
    }
}

// A column step: the column kernel once per name its result has, a block per (column, time tile) where its
// arrays fit shared memory, else a few blocks a multiprocessor over the tasks with a global scratch area.
void CudaExecutable::run_column_step(const KernelInfo& k, std::int64_t rows, std::int64_t cols, RunMemory& mem,
                                     CUstream stream) {
    const LoadedKernel& lk = *k.loaded;
    const Node* c = k.column_op;
    const ColumnLaunch l = column_kernel_launch(c->d, rows, cols, dev_.smem_optin, dev_.sm_count);
    if (l.grid == 0) return;
    CUdeviceptr scratch = 0;
    if (!l.in_smem) scratch = mem.alloc(static_cast<std::size_t>(l.grid * l.bytes));
    const int smem = l.in_smem ? static_cast<int>(l.bytes) : 0;
    if (smem > 48 * 1024) FJ_CU(cuFuncSetAttribute, lk.fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem);
    const DevView x = view(k.in_refs.at(0));
    const double q = c->op == Op::WMedian ? 0.5 : c->value;
    std::uint64_t q_bits = 0;
    std::memcpy(&q_bits, &q, sizeof q);
    for (const ArgRef& r : k.out_refs) {
        const DevView o = view(r);
        std::uint64_t w[kColumnKernelParamWords] = {
            x.ptr, static_cast<std::uint64_t>(x.ld), o.ptr, static_cast<std::uint64_t>(o.ld),
            static_cast<std::uint64_t>(rows), static_cast<std::uint64_t>(cols),
            static_cast<std::uint64_t>(column_kernel_op_code(c->op)), static_cast<std::uint64_t>(c->d),
            static_cast<std::uint64_t>(std::max(c->min_periods, 1)), q_bits, static_cast<std::uint64_t>(l.padded),
            static_cast<std::uint64_t>(l.tile), static_cast<std::uint64_t>(l.bits), static_cast<std::uint64_t>(l.tiles),
            scratch, static_cast<std::uint64_t>(l.bytes)};
        void* params[] = {w};
        FJ_CU(cuLaunchKernel, lk.fn, static_cast<unsigned>(l.grid), 1u, 1u, static_cast<unsigned>(kColumnKernelThreads), 1u, 1u,
              static_cast<unsigned>(smem), stream, params, nullptr);
    }
    if (scratch) mem.release(scratch);
}

// A row step: the row kernel once per name its result has. Rows whose sort keys fit a block's shared memory sort
// there; wider ones in a scratch area of global memory, a block's share each (runtime/cuda/row_kernels.hpp).
void CudaExecutable::run_row_step(const KernelInfo& k, std::int64_t rows, std::int64_t cols, RunMemory& mem, CUstream stream) {
    const LoadedKernel& lk = *k.loaded;
    const Op op = k.row_op->op;
    const bool grouped = row_kernel_grouped(op);
    const RowLaunch l = row_kernel_launch(dtype_, op, cols, dev_.smem_optin);
    const std::int64_t blocks = std::min<std::int64_t>(rows, l.in_smem ? std::int64_t{1} << 30 : 2LL * dev_.sm_count);
    CUdeviceptr scratch = 0;
    if (!l.in_smem) scratch = mem.alloc(static_cast<std::size_t>(blocks * l.padded * row_kernel_key_bytes(dtype_, op)));
    const int smem = static_cast<int>(l.smem_bytes);
    if (smem > 48 * 1024) FJ_CU(cuFuncSetAttribute, lk.fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem);
    const DevView x = view(k.in_refs.at(0));
    const DevView g = grouped ? view(k.in_refs.at(1)) : DevView{0, 0};
    for (const ArgRef& r : k.out_refs) {
        const DevView o = view(r);
        std::uint64_t w[kRowKernelParamWords] = {x.ptr, static_cast<std::uint64_t>(x.ld), g.ptr, static_cast<std::uint64_t>(g.ld),
                                                 o.ptr, static_cast<std::uint64_t>(o.ld), static_cast<std::uint64_t>(rows),
                                                 static_cast<std::uint64_t>(cols), static_cast<std::uint64_t>(row_kernel_op_code(op)),
                                                 static_cast<std::uint64_t>(l.padded), scratch};
        void* params[] = {w};
        FJ_CU(cuLaunchKernel, lk.fn, static_cast<unsigned>(blocks), 1u, 1u, static_cast<unsigned>(l.threads), 1u, 1u,
              static_cast<unsigned>(smem), stream, params, nullptr);
    }
    if (scratch) mem.release(scratch);
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
    for (const auto& [where, r] : replicas_)  // RunOptions::devices: the same kernels loaded for other workers
        out += fmt::format("  also loaded for worker {} on device {} ({})\n", where.second + 1, where.first,
                           static_cast<const CudaExecutable&>(*r).dev_.name);
    for (std::size_t i = 0; i < kernels_.size(); ++i) {
        const KernelInfo& k = kernels_[i];
        const LoadedKernel& lk = *k.loaded;
        if (const Node* c = k.column_op) {
            const ColumnLaunch l = column_kernel_launch(c->d, std::max<std::int64_t>(shape_rows_, 1),
                                                        std::max<std::int64_t>(shape_cols_, 1), dev_.smem_optin, dev_.sm_count);
            out += fmt::format("  column step {}: {} over window(d = {}), kernel {} ({}, {:.2f} ms), {} registers, blocks of {} "
                               "threads, a block per (column, tile of {} rows), {} keys sorted and a wavelet matrix of {} "
                               "levels in {} ({} bytes a block)\n",
                               k.kernel->name, op_name(c->op), c->d, lk.function, cache_source_name(k.source), k.ms,
                               lk.registers, kColumnKernelThreads, l.tile, l.padded, l.bits,
                               l.in_smem ? "shared memory" : "global scratch", l.bytes);
            continue;
        }
        if (k.row_op) {
            out += fmt::format("  row step {}: {} over whole rows, kernel {} ({}, {:.2f} ms), {} registers, blocks of up to {} threads, "
                               "a block per row, keys sorted in shared memory up to {} columns\n",
                               k.kernel->name, op_name(k.row_op->op), lk.function, cache_source_name(k.source), k.ms, lk.registers,
                               kRowKernelThreads, row_kernel_smem_columns(dtype_, k.row_op->op, dev_.smem_optin));
            continue;
        }
        out += fmt::format("  kernel {}: {} ({:.2f} ms, module load {:.2f} ms), {} registers, {} bytes local, "
                           "block {} ({} per SM), halo {}\n",
                           lk.function, cache_source_name(k.source), k.ms, k.load_ms, lk.registers, lk.local_bytes,
                           lk.block, lk.blocks_per_sm, k.kernel->halo);
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
    bool runs_row_steps() const override { return true; }
    const Device& device() const { return dev_; }
    std::unique_ptr<Executable> prepare(const codegen::Plan& plan, DType dtype, const CompileOptions& options) override;

private:
    std::shared_ptr<const LoadedKernel> load(const std::string& key, const CacheEntry& e, const KernelChoice& choice);
    // A hand-written kernel (row steps' and column steps'): compiled once per process and source, cached like the
    // generated ones. `tag` names the family in the cache key.
    std::shared_ptr<const LoadedKernel> hand_kernel(const std::string& src, const std::string& function, const char* tag,
                                                    int block, const CudaSettings& settings, CacheSource* source);

    const Device& dev_;
    NvrtcTarget target_;
    std::mutex mutex_;
    std::map<std::string, std::shared_ptr<const LoadedKernel>> loaded_;
};

BackendImpl& backend_on(int ordinal) {
    auto* main = static_cast<CudaBackend*>(cuda_backend());
    if (!main) {
        std::string why;
        cuda_backend(&why);
        throw BackendError("cuda: no CUDA backend: " + why);
    }
    if (ordinal == main->device().ordinal) return *main;
    static std::mutex mutex;
    static std::map<int, std::unique_ptr<CudaBackend>> others;
    std::lock_guard<std::mutex> lock(mutex);
    auto& b = others[ordinal];
    if (!b) {
        const Device& d = device_at(ordinal);
        b = std::make_unique<CudaBackend>(d, nvrtc_target(d.cc_major, d.cc_minor));
    }
    return *b;
}

std::shared_ptr<const LoadedKernel> CudaBackend::load(const std::string& key, const CacheEntry& e,
                                                      const KernelChoice& choice) {
    auto lk = std::make_shared<LoadedKernel>();
    lk->key = key;
    lk->function = e.function;
    const int smem_per_thread = e.smem_per_thread;
    lk->smem_per_thread = smem_per_thread;
    lk->scan = choice.scan;
    lk->flags = choice.flags;
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
            // (Its __launch_bounds__: the threads of its warps.)
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

std::shared_ptr<const LoadedKernel> CudaBackend::hand_kernel(const std::string& src, const std::string& function,
                                                             const char* tag, int block, const CudaSettings& settings,
                                                             CacheSource* source) {
    const std::string opts = fmt::format("{}", fmt::join(nvrtc_options(target_.arch, settings), " "));
    const std::string key = fmt::format("fj-cuda-{} source={:016x} target={}{} nvrtc={} opts=[{}]", tag, fnv1a64(src.data(), src.size()),
                                        target_.arch, target_.cubin ? "" : "(ptx)", nvrtc_api().version, opts);
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (auto it = loaded_.find(key); it != loaded_.end()) {
            *source = CacheSource::Memory;
            return it->second;
        }
    }
    CacheResult r = KernelCache::global().get(key, [&] {
        NvrtcOutput out = nvrtc_compile(src, function, nvrtc_options(target_.arch, settings), target_.cubin,
                                        dump_source(function, src));
        CacheEntry e;
        e.function = function;
        e.cubin = out.cubin;
        e.image = std::move(out.image);
        return e;
    });
    *source = r.source;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = loaded_.find(key);
    if (it == loaded_.end()) {
        auto lk = std::make_shared<LoadedKernel>();
        lk->key = key;
        lk->function = r.entry->function;
        FJ_CU(cuModuleLoadData, &lk->module, r.entry->image.data());
        try {
            FJ_CU(cuModuleGetFunction, &lk->fn, lk->module, lk->function.c_str());
            FJ_CU(cuFuncGetAttribute, &lk->registers, CU_FUNC_ATTRIBUTE_NUM_REGS, lk->fn);
            FJ_CU(cuFuncGetAttribute, &lk->local_bytes, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, lk->fn);
        } catch (...) {
            driver_api().cuModuleUnload(lk->module);
            throw;
        }
        lk->block = block;
        it = loaded_.emplace(key, std::move(lk)).first;
    }
    return it->second;
}

std::unique_ptr<Executable> CudaBackend::prepare(const codegen::Plan& plan, DType dtype, const CompileOptions& options) {
    const auto t0 = std::chrono::steady_clock::now();
    make_current(dev_);
    CudaSettings settings = CudaSettings::from_env();
    settings.fmad = options.fma_contraction;
    const codegen::DeviceFacts facts{target_.arch, dev_.smem_optin};
    const std::size_t n = plan.steps.size();
    std::vector<KernelInfo> kernels(n);
    // What to load: each step's generic kernel, and with FJ_CUDA_GUARD=1 for kernels with refolds their repair
    // pass too (any shape a run picks may be a column scan that raises flags).
    struct Job {
        std::size_t step;
        bool repair;
        KernelChoice choice;
        std::string key;
    };
    std::vector<Job> jobs;
    std::vector<std::size_t> missing;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        for (std::size_t i = 0; i < n; ++i) {
            kernels[i].kernel = &plan.steps[i].kernel;
            if (plan.steps[i].kind == codegen::StepKind::Row) {
                kernels[i].row_op = plan.steps[i].row_op();
                row_kernel_op_code(kernels[i].row_op->op);  // (throws for an operator without a row kernel)
                continue;
            }
            if (plan.steps[i].kind == codegen::StepKind::Column) {
                kernels[i].column_op = plan.steps[i].column_op();
                column_kernel_op_code(kernels[i].column_op->op);  // (throws for an operator without a column kernel)
                continue;
            }
            jobs.push_back({i, false, codegen::select_kernel(*kernels[i].kernel, dtype, {}, facts, settings), {}});
            if (!kernels[i].kernel->refolds.empty() && codegen::guarded(settings, dtype))
                jobs.push_back({i, true, codegen::select_repair_kernel(dtype, settings), {}});
        }
        for (std::size_t j = 0; j < jobs.size(); ++j) {
            Job& job = jobs[j];
            KernelInfo& k = kernels[job.step];
            job.key = cuda_kernel_key(*k.kernel, dtype, target_.arch, target_.cubin, job.choice);
            auto it = loaded_.find(job.key);
            if (it == loaded_.end()) {
                missing.push_back(j);
            } else if (job.repair) {
                k.repair = it->second;
            } else {
                k.loaded = it->second;
                k.source = CacheSource::Memory;
            }
        }
    }
    // Disk reads and compilations in parallel; module loads afterwards, on this thread (context current).
    std::vector<CacheResult> results(missing.size());
    ThreadPool::shared(thread_count(0)).parallel_for(static_cast<std::int64_t>(missing.size()), [&](std::int64_t m, int) {
        const Job& job = jobs[missing[static_cast<std::size_t>(m)]];
        results[static_cast<std::size_t>(m)] = KernelCache::global().get(job.key, [&] {
            return compile_cuda_kernel(*kernels[job.step].kernel, dtype, target_.arch, target_.cubin, job.choice).entry;
        });
    });
    for (std::size_t m = 0; m < missing.size(); ++m) {
        const Job& job = jobs[missing[m]];
        KernelInfo& k = kernels[job.step];
        if (!job.repair) {
            k.source = results[m].source;
            k.ms = results[m].ms;
        }
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = loaded_.find(job.key);
        if (it == loaded_.end()) {
            const auto tl = std::chrono::steady_clock::now();
            it = loaded_.emplace(job.key, load(job.key, *results[m].entry, job.choice)).first;
            if (!job.repair) k.load_ms = ms_since(tl);
        }
        (job.repair ? k.repair : k.loaded) = it->second;
    }
    // Row and column steps: the row or column kernel of the dtype, compiled once per process and cached like the
    // generated kernels.
    for (KernelInfo& k : kernels)
        if (k.hand_written()) {
            const auto t1 = std::chrono::steady_clock::now();
            k.loaded = k.row_op ? hand_kernel(row_kernels_source(dtype), row_kernel_name(dtype), "rows", kRowKernelThreads,
                                              settings, &k.source)
                                : hand_kernel(column_kernels_source(dtype), column_kernel_name(dtype), "columns",
                                              kColumnKernelThreads, settings, &k.source);
            k.ms = ms_since(t1);
        }
    Specializer specialize = [this, dtype, facts, settings](std::vector<SpecializeRequest>& requests) {
        std::vector<KernelChoice> choices;
        std::vector<std::string> keys;
        std::vector<std::size_t> missing;
        for (SpecializeRequest& q : requests) {
            choices.push_back(codegen::select_kernel(*q.kernel, dtype, q.panels, facts, settings));
            keys.push_back(cuda_kernel_key(*q.kernel, dtype, target_.arch, target_.cubin, choices.back()));
        }
        {
            std::lock_guard<std::mutex> lock(mutex_);
            for (std::size_t r = 0; r < requests.size(); ++r) {
                if (auto it = loaded_.find(keys[r]); it != loaded_.end()) {
                    requests[r].result = it->second;
                    requests[r].source = CacheSource::Memory;
                    requests[r].ms = 0;
                } else {
                    missing.push_back(r);
                }
            }
        }
        std::vector<CacheResult> results(missing.size());
        ThreadPool::shared(thread_count(0)).parallel_for(static_cast<std::int64_t>(missing.size()), [&](std::int64_t m, int) {
            const std::size_t r = missing[static_cast<std::size_t>(m)];
            results[static_cast<std::size_t>(m)] = KernelCache::global().get(keys[r], [&] {
                return compile_cuda_kernel(*requests[r].kernel, dtype, target_.arch, target_.cubin, choices[r]).entry;
            });
        });
        std::lock_guard<std::mutex> lock(mutex_);
        for (std::size_t m = 0; m < missing.size(); ++m) {
            const std::size_t r = missing[m];
            requests[r].source = results[m].source;
            requests[r].ms = results[m].ms;
            auto it = loaded_.find(keys[r]);
            if (it == loaded_.end()) it = loaded_.emplace(keys[r], load(keys[r], *results[m].entry, choices[r])).first;
            requests[r].result = it->second;
        }
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
