// Runs a plan chunk by chunk on panels the runner can address directly (host panels on the CPU backend):
// each chunk's sub-panels (runtime/chunk_plan.hpp) are handed to a whole-panel runner in turn, progress is
// reported after each, and a failure names the chunk it happened in.
#pragma once

#include <functional>
#include <vector>

#include "codegen/plan.hpp"
#include "runtime/chunk_plan.hpp"
#include "runtime/panel.hpp"
#include "runtime/program.hpp"

namespace fj::rt {

// Rows [row0, row0 + rows) x columns [col0, col0 + cols) of p, as a panel of its own (same ld, dtype, memory).
Panel sub_panel(const Panel& p, std::int64_t row0, std::int64_t rows, std::int64_t col0, std::int64_t cols);

// The sub-panel chunk c runs: rows [read_begin, row_end) x columns [col_begin, col_end).
inline Panel chunk_panel(const Panel& p, const Chunk& c) {
    return sub_panel(p, c.read_begin, c.rows_run(), c.col_begin, c.cols());
}

// The chunk request of a run on the caller's panels in place (the CPU backend): only intermediates take
// budgeted memory (RunOptions::max_host_bytes); a progress callback asks for 16 chunks where the rows
// allow, so that it is called as the run goes, not only at its end. The backend's `threads` take a chunk's
// time tiles (2048 rows, or 8 halos) as tasks, so chunks are whole tiles, at least one per thread, unless
// a budget needs smaller ones. Forced sizes are taken as given.
ChunkRequest in_place_request(const codegen::Plan& plan, std::int64_t rows, std::int64_t cols, DType dtype,
                              const RunOptions& options, int threads);

// Runs the chunks of `chunks` through `run_whole`, a synchronous run of whole panels (the inputs and outputs
// in the plan's order). Chunks over time go from the last to the first: a chunk's warm-up rows land in the
// caller's output rows that the chunk before it owns, and that chunk, run next, overwrites them with its
// results. A failure throws with the chunk's rows and columns in the message (std::bad_alloc becomes
// fj::RunError "out of memory"); the runner's own memory is freed by its destructors.
using WholeRun = std::function<void(const std::vector<Panel>& inputs, const std::vector<Panel>& outputs)>;
void run_chunks(const ChunkPlan& chunks, const std::vector<Panel>& inputs, const std::vector<Panel>& outputs,
                const RunOptions& options, const WholeRun& run_whole);

}  // namespace fj::rt
