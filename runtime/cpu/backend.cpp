// The CPU backend: a plan's steps in order. Time-series steps are kernels compiled by LLVM
// (codegen/cpu/emit.cpp, runtime/cpu/compile.cpp), each run as tasks over column blocks x time tiles; row
// steps (cross-sectional operators) run over whole rows (runtime/cpu/row_ops.cpp). Intermediates between
// steps live in memory of their own, freed after their last reader.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>

#include <fmt/format.h>

#include "runtime/backend.hpp"
#include "runtime/chunk_run.hpp"
#include "runtime/fault_inject.hpp"
#include "codegen/cpu/emit.hpp"
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

class CpuExecutable final : public Executable {
public:
    CpuExecutable(const codegen::Plan& plan, DType dtype, const CompileOptions& options)
        : plan_(plan), options_(options), dtype_(dtype) {
        auto& jit = cpu::LlvmJit::instance();
        lanes_ = jit.lanes();
        for (const codegen::Step& step : plan_.steps) {
            if (step.kind == codegen::StepKind::Row && !cpu::has_row_op(step.row_op()->op))
                throw BackendError(fmt::format("cpu: cross-sectional operator '{}' has no row-step implementation",
                                               op_name(step.row_op()->op)));
            kernels_.push_back(step.kind == codegen::StepKind::Row ? cpu::CompiledKernel{} : jit.get(step.kernel, dtype));
            // Where each kernel slot's panel lives: resolved once, not every run.
            Slots s;
            for (const std::string& n : step.kernel.inputs) s.in.push_back(plan_.slot_of(n));
            for (const std::string& n : step.kernel.outputs) s.out.push_back(plan_.slot_of(n));
            slots_.push_back(std::move(s));
        }
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
        std::vector<std::unique_ptr<std::byte[]>> tmp(plan_.intermediates.size());  // (uninitialised: the step writes every element)
        auto panel = [&](const codegen::Plan::Slot& at) -> std::pair<void*, std::int64_t> {
            const std::size_t i = static_cast<std::size_t>(at.index);
            switch (at.kind) {
            case codegen::Plan::Slot::Input: return {inputs[i].data, inputs[i].ld};
            case codegen::Plan::Slot::Output: return {outputs[i].data, outputs[i].ld};
            case codegen::Plan::Slot::Intermediate: break;
            }
            if (!tmp[i]) {
                fault_point(FaultKind::Alloc, "cpu intermediates");
                tmp[i].reset(new std::byte[static_cast<std::size_t>(rows * cols) * elem]);
            }
            return {tmp[i].get(), cols};
        };
        for (std::size_t si = 0; si < plan_.steps.size(); ++si) {
            if (plan_.steps[si].kind == codegen::StepKind::Row) {
                run_row_step(si, panel, rows, cols, outputs.front().dtype, pool);
                for (int m : plan_.steps[si].frees) tmp[static_cast<std::size_t>(m)].reset();
                continue;
            }
            const ir::Kernel& k = plan_.steps[si].kernel;
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
            for (int m : plan_.steps[si].frees) tmp[static_cast<std::size_t>(m)].reset();
        }
    }

    std::string explain() const override {
        std::string out = fmt::format("backend cpu (LLVM ORC, {} lanes of float64, cpu {})\n", lanes_,
                                      cpu::LlvmJit::instance().cpu_name());
        for (std::size_t i = 0; i < kernels_.size(); ++i)
            if (plan_.steps[i].kind == codegen::StepKind::Row)
                out += fmt::format("  step {} row step {}: {} per row over the thread pool (sort per row)\n", i,
                                   plan_.steps[i].kernel.name, op_name(plan_.steps[i].row_op()->op));
            else
                out += fmt::format("  step {} kernel {}: {}\n", i, plan_.steps[i].kernel.name,
                                   kernels_[i].cache_hit ? std::string("cache hit")
                                                         : fmt::format("compiled in {:.1f} ms", kernels_[i].compile_ms));
        if (const std::int64_t rows = last_rows_, cols = last_cols_; rows > 0)
            out += fmt::format("  last run {} x {} {}: at most {:.3g} MB of panels at once (inputs, outputs and {} "
                               "intermediate(s))\n",
                               rows, cols, dtype_name(dtype_),
                               static_cast<double>(plan_.peak_bytes(rows, cols, dtype_)) / 1e6, plan_.peak_intermediates());
        return out;
    }

private:
    // A row step: its argument panels (x, then g) and its outputs, resolved as the kernels' are.
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
        cpu::run_row_step(plan_.steps[si].row_op()->op, in.at(0), in.size() > 1 ? &in[1] : nullptr, out, rows, cols,
                          dtype, pool);
    }

    const codegen::Plan& plan_;
    CompileOptions options_;
    DType dtype_;
    int lanes_ = 4;
    std::atomic<std::int64_t> last_rows_{0}, last_cols_{0};  // for explain(); runs may be concurrent
    std::vector<cpu::CompiledKernel> kernels_;
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
