// The chunk planner: how a run is split into pieces that are each computed as a panel of their own.
//
// Every step of a plan is local in time given its halo, and row steps need whole rows, so a run can be cut
// over time: chunk k owns the output rows [row_begin, row_end) and is computed as the sub-panel
// [read_begin, row_end) of every input, where read_begin = max(0, row_begin - Plan::halo). Plan::halo is the
// largest chain halo (the sum of (d - 1) along the deepest chain of windows and delays, intermediates
// included), so every output row of the chunk sees all the input rows its definition reads; the first
// halo_rows() rows of the sub-panel's outputs are warm-up, not results (they lack history), and are
// dropped (a staging buffer) or overwritten by the chunk that owns them. Results then match an unchunked
// run within the accuracy contract: only where the running sums are re-seeded moves, as it does at every
// time tile. Programs without row steps can also be cut over columns (no halo, every row of a range of
// columns); a row step needs every column of a row, so such a plan is only cut over time.
//
// Sizes come from memory: a chunk needs, for each panel it holds (inputs and outputs where the caller
// counts them, plus the plan's peak of live intermediates), (rows it runs) x (columns) x (element size)
// bytes, times the chunks in flight at once (a pipeline of copy in, compute, copy out holds several). The
// largest chunk within the budget bounds the size from above; a halo share of at most 1/8 and a floor of
// rows bound it from below where the budget allows; between them, measured or assumed stage rates choose
// the count that minimises a pipeline model (ChunkRates). The same planner serves the CPU backend (chunks
// over time through runtime/chunk_run.hpp, budget = its intermediates), the command line (reading,
// computing and writing overlapped) and the CUDA pipeline (device buffers per chunk in flight).
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "codegen/plan.hpp"
#include "dsl/dtype.hpp"

namespace fj::rt {

enum class ChunkAxis : std::uint8_t { Time, Columns };

// One chunk of a ChunkPlan. Over time: columns are the whole row; over columns: rows are the whole panel
// and there is no halo (read_begin == row_begin == 0).
struct Chunk {
    std::int64_t index = 0;
    std::int64_t row_begin = 0, row_end = 0;  // the output rows this chunk owns
    std::int64_t read_begin = 0;              // the first row it reads (row_begin - halo, at least 0)
    std::int64_t col_begin = 0, col_end = 0;  // the columns it reads and writes

    std::int64_t rows() const { return row_end - row_begin; }        // output rows owned
    std::int64_t rows_run() const { return row_end - read_begin; }   // rows of the sub-panel it runs
    std::int64_t halo_rows() const { return row_begin - read_begin; }  // leading sub-panel rows not owned
    std::int64_t cols() const { return col_end - col_begin; }
};

// Rates of a pipeline's stages, measured or assumed; 0 means unknown. With all three known the planner
// picks the chunk count minimising the modelled time (chunk_plan.cpp: pipeline_seconds); otherwise it takes
// the fewest chunks the budget, min_chunks and the row floor allow.
struct ChunkRates {
    double in_bytes_per_s = 0;       // input bytes moved in a second (host -> device copy, file read)
    double compute_bytes_per_s = 0;  // input + output bytes of panel one second of computing covers
    double out_bytes_per_s = 0;      // output bytes moved in a second (device -> host copy, file write)
    double chunk_overhead_s = 0;     // fixed cost per chunk and stage (launches, synchronisation, syscalls)
};

// Stage rates measured over past chunks, for ChunkRequest::rates: a pipeline keeps one (per executable, say)
// and adds each chunk's bytes and busy seconds per stage, so that the next run's chunk count follows what
// the machine did rather than what was assumed. Thread-safe.
class RateMeter {
public:
    enum Stage : int { In = 0, Compute = 1, Out = 2 };
    void add(Stage stage, std::int64_t bytes, double seconds);
    // Measured rates where a stage has seen at least min_seconds of work, the fallback's elsewhere
    // (chunk_overhead_s always the fallback's).
    ChunkRates rates(const ChunkRates& fallback, double min_seconds = 1e-3) const;

private:
    mutable std::mutex mutex_;
    double bytes_[3] = {0, 0, 0}, seconds_[3] = {0, 0, 0};
};

struct ChunkRequest {
    std::int64_t rows = 0, cols = 0;
    DType dtype = DType::F32;
    // Bytes the chunks in flight may take together (0: unlimited). fixed_bytes is taken off it first:
    // memory the run needs whatever the chunking (scratch, flags).
    std::int64_t budget_bytes = 0;
    std::int64_t fixed_bytes = 0;
    // Whether a chunk holds copies of the inputs and outputs in budgeted memory (staging buffers: yes; the
    // CPU backend running in the caller's panels: no). Intermediates always count.
    bool count_inputs = true;
    bool count_outputs = true;
    int in_flight = 1;   // chunks whose memory exists at once (a 3-stage pipeline: 2 or 3)
    int min_chunks = 1;  // at least this many chunks where each still gets min_rows (overlap, progress)
    // The fewest output rows a time chunk should own when the budget allows (0: 8 x halo, at least 256):
    // below it the halo's re-computation and the per-chunk costs dominate.
    std::int64_t min_rows = 0;
    // Time chunks own a multiple of this many rows where there are more rows than that (0 or 1: any):
    // the CPU backend splits a chunk into time tiles of its own (2048 rows for short halos) as the tasks of
    // its threads, so a chunk of whole tiles keeps them balanced.
    std::int64_t row_quantum = 0;
    // Forced sizes (RunOptions::chunk_rows / chunk_cols): output rows per time chunk, or columns per column
    // chunk (refused with row steps). The budget is then not consulted.
    std::int64_t chunk_rows = 0, chunk_cols = 0;
    ChunkRates rates;
};

struct ChunkPlan {
    ChunkAxis axis = ChunkAxis::Time;
    std::int64_t rows = 0, cols = 0;
    std::int64_t halo = 0;        // rows a time chunk reads before its first output row (Plan::halo)
    std::int64_t chunk_rows = 0;  // output rows per chunk over time (the last may own fewer); rows over columns
    std::int64_t chunk_cols = 0;  // columns per chunk over columns (the last may have fewer); cols over time
    std::int64_t count = 1;       // number of chunks (0 for an empty panel)
    // Panels a chunk holds in budgeted memory (as counted by the request) and the bytes of its largest
    // chunk: panels x rows_run x cols x element size. total_bytes: that times the chunks in flight (at
    // most count), plus fixed_bytes: what the run takes.
    int panels = 0;
    std::int64_t chunk_bytes = 0;
    std::int64_t total_bytes = 0;

    bool whole() const { return count == 1; }  // the whole panel is one chunk: no halo, no splitting
    Chunk chunk(std::int64_t i) const;         // 0 <= i < count
    std::string describe() const;              // "3 chunks over time of 20000 rows (+39 halo), 12.3 MB each"
};

// The chunk plan of a run of `plan` on request.rows x request.cols panels. Throws InputError for a forced
// column chunking of a plan with row steps and RunError when not even the smallest chunk (one output row
// over time plus the halo; 1 column over columns) fits the budget.
ChunkPlan plan_chunks(const codegen::Plan& plan, const ChunkRequest& request);

// The budget each worker of a run over several devices may take (RunOptions::devices lists a device ordinal per
// worker; an ordinal may repeat): each device's budget, device_budget(ordinal), split evenly between the workers
// on it, and the smallest share over the devices, since one chunk plan serves every worker and each worker's
// chunks in flight must fit its share. Empty `workers`: 0 (no budget).
std::int64_t worker_budget(const std::vector<int>& workers, const std::function<std::int64_t(int ordinal)>& device_budget);

// The modelled seconds of a pipeline of `count` chunks (exposed for tests and for explain()).
double pipeline_seconds(const ChunkPlan& chunks, const codegen::Plan& plan, const ChunkRequest& request);

}  // namespace fj::rt
