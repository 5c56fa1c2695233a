#include "runtime/chunk_run.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <new>
#include <string>

#include <fmt/format.h>

#include "runtime/fault_inject.hpp"

namespace fj::rt {

Panel sub_panel(const Panel& p, std::int64_t row0, std::int64_t rows, std::int64_t col0, std::int64_t cols) {
    Panel s = p;
    s.data = static_cast<char*>(p.data) + (row0 * p.ld + col0) * static_cast<std::int64_t>(dtype_size(p.dtype));
    s.rows = rows;
    s.cols = cols;
    return s;
}

ChunkRequest in_place_request(const codegen::Plan& plan, std::int64_t rows, std::int64_t cols, DType dtype,
                              const RunOptions& options, int threads) {
    ChunkRequest r;
    r.rows = rows;
    r.cols = cols;
    r.dtype = dtype;
    r.budget_bytes = options.max_host_bytes;
    r.count_inputs = r.count_outputs = false;
    r.in_flight = 1;
    r.min_chunks = options.progress ? 16 : 1;
    r.row_quantum = std::max<std::int64_t>(2048, 8 * static_cast<std::int64_t>(plan.halo));
    r.min_rows = r.row_quantum * std::max(1, threads);
    r.chunk_rows = options.chunk_rows;
    r.chunk_cols = options.chunk_cols;
    return r;
}

namespace {

std::string where(const ChunkPlan& plan, const Chunk& c) {
    if (plan.count == 1) return fmt::format("run of {} x {}", plan.rows, plan.cols);
    return fmt::format("chunk {} of {} (rows {}-{}, columns {}-{})", c.index + 1, plan.count, c.row_begin, c.row_end,
                       c.col_begin, c.col_end);
}

// The current fj::Error again, its message prefixed with the chunk; backend and input errors keep their type.
[[noreturn]] void rethrow_in_chunk(const std::string& where) {
    try {
        throw;
    } catch (const BackendError& e) {
        throw BackendError(fmt::format("{}: {}", where, e.what()));
    } catch (const InputError& e) {
        throw InputError(fmt::format("{}: {}", where, e.what()));
    } catch (const Error& e) {
        throw RunError(fmt::format("{}: {}", where, e.what()));
    }
}

}  // namespace

void run_chunks(const ChunkPlan& chunks, const std::vector<Panel>& inputs, const std::vector<Panel>& outputs,
                const RunOptions& options, const WholeRun& run_whole) {
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    RunProgress progress;
    progress.rows_total = chunks.rows;
    progress.chunks_total = chunks.count;
    const std::int64_t elem = static_cast<std::int64_t>(dtype_size(outputs.empty() ? inputs.front().dtype : outputs.front().dtype));
    std::vector<Panel> ins(inputs.size()), outs(outputs.size());
    if (chunks.count == 0 && options.progress) options.progress(progress);  // an empty panel: done at once
    for (std::int64_t k = 0; k < chunks.count; ++k) {
        const std::int64_t i = chunks.axis == ChunkAxis::Time ? chunks.count - 1 - k : k;
        const Chunk c = chunks.chunk(i);
        try {
            fault_point(FaultKind::Chunk, "chunk");
            if (chunks.count == 1) {
                run_whole(inputs, outputs);
            } else {
                for (std::size_t j = 0; j < inputs.size(); ++j) ins[j] = chunk_panel(inputs[j], c);
                for (std::size_t j = 0; j < outputs.size(); ++j) outs[j] = chunk_panel(outputs[j], c);
                run_whole(ins, outs);
            }
        } catch (const std::bad_alloc&) {
            throw RunError(fmt::format("{}: out of memory", where(chunks, c)));
        } catch (const Error&) {
            if (chunks.count == 1) throw;  // a whole-panel run: the error as the backend said it
            rethrow_in_chunk(where(chunks, c));
        }
        progress.rows_done += chunks.axis == ChunkAxis::Time ? c.rows() : (k + 1 == chunks.count ? chunks.rows : 0);
        progress.chunks_done = k + 1;
        progress.bytes_in += static_cast<std::int64_t>(inputs.size()) * c.rows_run() * c.cols() * elem;
        progress.bytes_out += static_cast<std::int64_t>(outputs.size()) * c.rows() * c.cols() * elem;
        progress.elapsed_s = std::chrono::duration<double>(clock::now() - t0).count();
        if (options.progress) options.progress(progress);
    }
}

}  // namespace fj::rt
