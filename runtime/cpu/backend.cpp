// The CPU backend: a plan's steps in order. Time-series steps are kernels compiled by LLVM
// (codegen/cpu/emit.cpp, runtime/cpu/compile.cpp), each run as tasks over column blocks x time tiles; row
// steps (cross-sectional operators) run over whole rows (runtime/cpu/row_ops.cpp), column steps (long order
// statistics) column by column (runtime/cpu/column_ops.cpp). Intermediates between
// steps live in memory of their own, freed after their last reader.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <utility>

#include <sys/mman.h>

#include <fmt/format.h>

#include "runtime/backend.hpp"
#include "runtime/chunk_run.hpp"
#include "runtime/fault_inject.hpp"
#include "codegen/cpu/emit.hpp"
#include "codegen/lower_ops.hpp"
#include "runtime/cpu/column_ops.hpp"
#include "runtime/cpu/compile.hpp"
#include "runtime/cpu/row_ops.hpp"
#include "runtime/thread_pool.hpp"

namespace fj::rt {

namespace {

// Tile length over time. It must not depend on the thread count, so that results are bitwise the same
// for any number of threads; long enough that the halo's re-computation stays a small share (<= 1/8),
// short enough to bound the drift of running sums and to give threads enough tasks.
std::int64_t auto_tile_rows(std::int64_t halo) { return std::max<std::int64_t>(2048, 8 * halo); }

// Columns per task: a whole row of a block is one contiguous read; 1024 columns keep the states of a
// task (a few hundred bytes a column) in L2.
std::int64_t auto_block_cols(std::int64_t cols, int lanes) {
    const std::int64_t block = std::min<std::int64_t>(cols, 1024);
    return (block + lanes - 1) / lanes * lanes;
}

// A run's intermediates (dense panels, ld = cols, uninitialised: their step writes every element): anonymous
// mappings that ask for transparent huge pages, so that a panel of 80 MB faults 40 times instead of 20,000
// (the 101 alphas at 4,000 x 5,000 took 6.7 M page faults and about 20 s of system time a run with 4 KB pages
// and a fresh allocation per intermediate); a freed intermediate's memory is reused by the next one, so a run
// faults in only its peak (Plan::peak_intermediates).
struct Mapping {
    std::byte* data = nullptr;
    std::size_t bytes = 0;
};

void unmap(const Mapping& m) { ::munmap(m.data, m.bytes); }

// The mappings a run used, kept by its executable for the next run: a fresh mapping is zeroed by the kernel
// page by page on first touch, and on this VM that cost about 1 s of CPU per GB (clear_page in a profile of
// the 101 alphas: 9 % of a run's CPU at 1,000 x 5,000, 4 % inside rank alone). After a run the pool holds
// what that run took (its peak of intermediates), until the next run or the executable's end.
class MappingPool {
public:
    MappingPool() = default;
    MappingPool(const MappingPool&) = delete;
    MappingPool& operator=(const MappingPool&) = delete;
    ~MappingPool() {
        for (const Mapping& m : free_) unmap(m);
    }
    // Everything held, for one run (a concurrent run finds the pool empty and maps its own).
    std::vector<Mapping> take_all() {
        std::lock_guard<std::mutex> lock(mutex_);
        return std::exchange(free_, {});
    }
    void give_back(std::vector<Mapping> ms) {
        std::lock_guard<std::mutex> lock(mutex_);
        free_.insert(free_.end(), ms.begin(), ms.end());
    }

private:
    std::mutex mutex_;
    std::vector<Mapping> free_;
};

class IntermediateMemory {
public:
    // The pool's mappings (an earlier run's) are used before new ones; those smaller than `bytes` are unmapped.
    IntermediateMemory(std::size_t count, std::size_t bytes, MappingPool& pool)
        : at_(count), bytes_(std::max<std::size_t>(bytes, 1)), pool_(pool), unused_(pool.take_all()) {}
    // The mappings this run used go back to the pool; those it did not need are unmapped, so the pool never
    // holds more than one run's peak.
    ~IntermediateMemory() {
        for (const Mapping& m : at_)
            if (m.data) spare_.push_back(m);
        for (const Mapping& m : unused_) unmap(m);
        pool_.give_back(std::move(spare_));
    }
    IntermediateMemory(const IntermediateMemory&) = delete;
    IntermediateMemory& operator=(const IntermediateMemory&) = delete;

    std::byte* at(std::size_t i) const { return at_[i].data; }
    // Intermediate i's memory, taken on first use (throws std::bad_alloc when there is none).
    std::byte* take(std::size_t i) {
        if (at_[i].data) return at_[i].data;
        if (!spare_.empty()) {
            at_[i] = spare_.back();
            spare_.pop_back();
            return at_[i].data;
        }
        while (!unused_.empty()) {
            const Mapping m = unused_.back();
            unused_.pop_back();
            if (m.bytes >= bytes_) return (at_[i] = m).data;
            unmap(m);
        }
        void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) throw std::bad_alloc();
        ::madvise(p, bytes_, MADV_HUGEPAGE);  // (a hint: without THP, 4 KB pages)
        return (at_[i] = Mapping{static_cast<std::byte*>(p), bytes_}).data;
    }
    void give(std::size_t i) {
        if (at_[i].data) spare_.push_back(at_[i]);
        at_[i] = Mapping{};
    }

private:
    std::vector<Mapping> at_, spare_;
    std::size_t bytes_;
    MappingPool& pool_;
    std::vector<Mapping> unused_;  // the pool's mappings, not yet needed by this run
};

class CpuExecutable final : public Executable {
public:
    CpuExecutable(const codegen::Plan& plan, DType dtype, const CompileOptions& options)
        : plan_(plan), options_(options), dtype_(dtype) {
        auto& jit = cpu::LlvmJit::instance();
        lanes_ = jit.lanes();
        std::vector<const ir::Kernel*> to_compile;
        for (const codegen::Step& step : plan_.steps) {
            if (step.kind == codegen::StepKind::Row && !cpu::has_row_op(step.row_op()->op))
                throw BackendError(fmt::format("cpu: cross-sectional operator '{}' has no row-step implementation",
                                               op_name(step.row_op()->op)));
            const ir::Kernel* kernel = step.kind == codegen::StepKind::TimeSeries ? &step.kernel : nullptr;
            if (const Node* c = step.column_op(); c && c->d < cpu::kColumnStepCpuWindow) {
                // Shorter than where the column step pays on the CPU: its operator fused into a kernel of its own.
                auto k = std::make_unique<ir::Kernel>();
                k->name = step.kernel.name + "_fused";
                k->inputs = step.kernel.inputs;
                k->outputs = step.kernel.outputs;
                codegen::lower_region(step.roots, plan_.exact_sums, plan_.dtype, *k);
                ir::verify(*k);
                kernel = fused_columns_.emplace_back(std::move(k)).get();
            }
            kernel_of_.push_back(kernel);
            if (kernel) to_compile.push_back(kernel);
            // Where each kernel slot's panel lives: resolved once, not every run.
            Slots s;
            for (const std::string& n : step.kernel.inputs) s.in.push_back(plan_.slot_of(n));
            for (const std::string& n : step.kernel.outputs) s.out.push_back(plan_.slot_of(n));
            slots_.push_back(std::move(s));
        }
        // Compiled (or read from the disk cache) in parallel.
        std::vector<cpu::CompiledKernel> compiled = jit.get(to_compile, dtype, ThreadPool::shared(thread_count(options_.threads)));
        std::size_t next = 0;
        for (const ir::Kernel* kernel : kernel_of_) kernels_.push_back(kernel ? compiled[next++] : cpu::CompiledKernel{});
    }

    // Chunks over time (or forced over columns) when a budget, a progress callback or a forced size asks
    // for them (runtime/chunk_run.hpp); each chunk runs as a panel of its own.
    void run(const std::vector<Panel>& inputs, const std::vector<Panel>& outputs, const RunOptions& options) override {
        const Panel& shape = inputs.empty() ? outputs.front() : inputs.front();
        const ChunkPlan chunks = plan_chunks(plan_, in_place_request(plan_, shape.rows, shape.cols, dtype_, options,
                                                                   thread_count(options_.threads)));
        run_chunks(chunks, inputs, outputs, options, [&](const std::vector<Panel>& in, const std::vector<Panel>& out) {
            run_panel(in, out);
        });
    }

    void run_panel(const std::vector<Panel>& inputs, const std::vector<Panel>& outputs) {
        const std::int64_t rows = inputs.empty() ? outputs.front().rows : inputs.front().rows;
        const std::int64_t cols = inputs.empty() ? outputs.front().cols : inputs.front().cols;
        if (rows == 0 || cols == 0) return;
        last_rows_ = rows;
        last_cols_ = cols;
        ThreadPool& pool = ThreadPool::shared(thread_count(options_.threads));
        // Intermediates: dense panels (ld = cols) of the run's dtype, made by their producing step and
        // dropped after their last reader.
        const std::size_t elem = dtype_size(outputs.front().dtype);
        IntermediateMemory tmp(plan_.intermediates.size(), static_cast<std::size_t>(rows * cols) * elem, mappings_);
        auto panel = [&](const codegen::Plan::Slot& at) -> std::pair<void*, std::int64_t> {
            const std::size_t i = static_cast<std::size_t>(at.index);
            switch (at.kind) {
            case codegen::Plan::Slot::Input: return {inputs[i].data, inputs[i].ld};
            case codegen::Plan::Slot::Output: return {outputs[i].data, outputs[i].ld};
            case codegen::Plan::Slot::Intermediate: break;
            }
            if (!tmp.at(i)) fault_point(FaultKind::Alloc, "cpu intermediates");
            return {tmp.take(i), cols};
        };
        std::vector<double> step_ms(plan_.steps.size(), 0.0);  // for explain()
        for (std::size_t si = 0; si < plan_.steps.size(); ++si) {
            const auto t0 = std::chrono::steady_clock::now();
            if (!kernel_of_[si]) {
                run_row_step(si, panel, rows, cols, outputs.front().dtype, pool);
                for (int m : plan_.steps[si].frees) tmp.give(static_cast<std::size_t>(m));
                step_ms[si] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
                continue;
            }
            const ir::Kernel& k = *kernel_of_[si];
            std::vector<const void*> in_ptr;
            std::vector<std::int64_t> in_ld;
            for (const codegen::Plan::Slot& at : slots_[si].in) {
                const auto [p, ld] = panel(at);
                in_ptr.push_back(p);
                in_ld.push_back(ld);
            }
            std::vector<void*> out_ptr;
            std::vector<std::int64_t> out_ld;
            for (const codegen::Plan::Slot& at : slots_[si].out) {
                const auto [p, ld] = panel(at);
                out_ptr.push_back(p);
                out_ld.push_back(ld);
            }
            const std::int64_t tile = options_.tile_rows > 0 ? options_.tile_rows : auto_tile_rows(k.halo);
            const std::int64_t block =
                options_.block_cols > 0 ? options_.block_cols : auto_block_cols(cols, lanes_);
            const std::int64_t tiles = (rows + tile - 1) / tile, blocks = (cols + block - 1) / block;
            const std::int64_t scratch = cpu::scratch_doubles(k, lanes_, block);
            std::vector<std::vector<double>> scratch_of(pool.size());
            const cpu::KernelFn fn = kernels_[si].fn;
            pool.parallel_for(tiles * blocks, [&](std::int64_t task, int worker) {
                // Blocks vary fastest: neighbouring tasks share rows, which helps the shared cache.
                const std::int64_t b = task % blocks, t = task / blocks;
                std::vector<double>& buf = scratch_of[worker];
                if (static_cast<std::int64_t>(buf.size()) < scratch) buf.resize(scratch);
                cpu::KernelArgs a{};
                a.inputs = in_ptr.data();
                a.in_ld = in_ld.data();
                a.outputs = out_ptr.data();
                a.out_ld = out_ld.data();
                a.col_begin = b * block;
                a.col_end = std::min(cols, a.col_begin + block);
                a.out_begin = t * tile;
                a.row_begin = std::max<std::int64_t>(0, a.out_begin - k.halo);
                a.row_end = std::min(rows, a.out_begin + tile);
                a.scratch = buf.data();
                fn(&a);
            });
            for (int m : plan_.steps[si].frees) tmp.give(static_cast<std::size_t>(m));
            step_ms[si] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        }
        std::lock_guard<std::mutex> lock(step_ms_mutex_);
        last_step_ms_ = std::move(step_ms);
    }

    std::string explain() const override {
        std::string out = fmt::format("backend cpu (LLVM ORC, {} lanes of float64, cpu {})\n", lanes_,
                                      cpu::LlvmJit::instance().cpu_name());
        std::vector<double> step_ms;
        {
            std::lock_guard<std::mutex> lock(step_ms_mutex_);
            step_ms = last_step_ms_;
        }
        double kernel_ms = 0, row_ms = 0;
        for (std::size_t i = 0; i < kernels_.size(); ++i) {
            const bool row = !kernel_of_[i];
            const std::string took = i < step_ms.size() ? fmt::format("; last run {:.1f} ms", step_ms[i]) : "";
            if (i < step_ms.size()) (row ? row_ms : kernel_ms) += step_ms[i];
            if (const Node* c = plan_.steps[i].column_op(); c && row)
                out += fmt::format("  step {} column step {}: {} over {} rows, column by column over the thread pool (a sort "
                                   "and a Fenwick tree per column and time tile){}\n",
                                   i, plan_.steps[i].kernel.name, op_name(c->op), c->d, took);
            else if (row)
                out += fmt::format("  step {} row step {}: {} per row over the thread pool (sort per row){}\n", i,
                                   plan_.steps[i].kernel.name, op_name(plan_.steps[i].row_op()->op), took);
            else
                out += fmt::format("  step {} kernel {}{}: {}{}\n", i, kernel_of_[i]->name,
                                   plan_.steps[i].column_op() ? fmt::format(" (column step {} over {} rows, fused: shorter than {})",
                                                                            op_name(plan_.steps[i].column_op()->op),
                                                                            plan_.steps[i].column_op()->d, cpu::kColumnStepCpuWindow)
                                                              : std::string(),
                                   describe(kernels_[i]), took);
        }
        if (!step_ms.empty())
            out += fmt::format("  last run (or its last chunk): kernels {:.1f} ms, row and column steps {:.1f} ms\n", kernel_ms, row_ms);
        if (const std::int64_t rows = last_rows_, cols = last_cols_; rows > 0)
            out += fmt::format("  last run {} x {} {}: at most {:.3g} MB of panels at once (inputs, outputs and {} "
                               "intermediate(s))\n",
                               rows, cols, dtype_name(dtype_),
                               static_cast<double>(plan_.peak_bytes(rows, cols, dtype_)) / 1e6, plan_.peak_intermediates());
        return out;
    }

private:
    static std::string describe(const cpu::CompiledKernel& k) {
        switch (k.source) {
        case rt::CacheSource::Memory: return "linked before in this process";
        case rt::CacheSource::Disk: return fmt::format("disk cache, {:.1f} ms ({} KB object)", k.ms, k.object_bytes / 1024);
        case rt::CacheSource::Compiled: break;
        }
        return fmt::format("compiled in {:.1f} ms (CPU time: LLVM IR {:.1f} ms, {} instructions; optimised {:.1f} ms, {} "
                           "instructions; machine code {:.1f} ms, {} KB)",
                           k.ms, k.emit_ms, k.ir_instructions, k.optimise_ms, k.optimised_instructions, k.codegen_ms,
                           k.object_bytes / 1024);
    }

    // A row or column step: its argument panels (x, then g) and its outputs, resolved as the kernels' are.
    template <class PanelOf>
    void run_row_step(std::size_t si, PanelOf& panel, std::int64_t rows, std::int64_t cols, DType dtype,
                      ThreadPool& pool) {
        std::vector<cpu::RowPanel> in, out;
        for (const codegen::Plan::Slot& at : slots_[si].in) {
            const auto [p, ld] = panel(at);
            in.push_back({p, ld});
        }
        for (const codegen::Plan::Slot& at : slots_[si].out) {
            const auto [p, ld] = panel(at);
            out.push_back({p, ld});
        }
        if (const Node* c = plan_.steps[si].column_op()) {
            cpu::run_column_step(*c, in.at(0), out, rows, cols, dtype, options_.tile_rows, pool);
            return;
        }
        cpu::run_row_step(plan_.steps[si].row_op()->op, in.at(0), in.size() > 1 ? &in[1] : nullptr, out, rows, cols,
                          dtype, pool);
    }

    const codegen::Plan& plan_;
    CompileOptions options_;
    DType dtype_;
    int lanes_ = 4;
    std::atomic<std::int64_t> last_rows_{0}, last_cols_{0};  // for explain(); runs may be concurrent
    mutable std::mutex step_ms_mutex_;
    std::vector<double> last_step_ms_;  // each step's time in the last run (or chunk), for explain()
    std::vector<cpu::CompiledKernel> kernels_;
    // Each step's kernel: a time-series step's own, a short column step's operator fused into one
    // (fused_columns_ holds those), none for the row steps and the column steps run by column_ops.
    std::vector<const ir::Kernel*> kernel_of_;
    std::vector<std::unique_ptr<ir::Kernel>> fused_columns_;
    MappingPool mappings_;  // intermediates' memory kept from one run to the next
    struct Slots {
        std::vector<codegen::Plan::Slot> in, out;  // kernel slot -> where its panel lives in a run
    };
    std::vector<Slots> slots_;
};

class CpuBackend final : public BackendImpl {
public:
    const char* name() const override { return "cpu"; }
    std::unique_ptr<Executable> prepare(const codegen::Plan& plan, DType dtype, const CompileOptions& options) override {
        return std::make_unique<CpuExecutable>(plan, dtype, options);
    }
    bool runs_row_steps() const override { return true; }
};

}  // namespace

BackendImpl* cpu_backend() {
    static CpuBackend backend;
    return &backend;
}

}  // namespace fj::rt
