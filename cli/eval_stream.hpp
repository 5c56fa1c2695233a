// `eval`'s pipeline: reading, computing and writing chunks over time overlapped on three threads.
//
// The chunks come from the chunk planner (runtime/chunk_plan.hpp): each owns a range of output rows and
// reads its halo before them. A reader thread brings chunk k + 1's input rows into memory (faulting in the
// pages of a mapped C-order file, or transposing a Fortran-order one into a buffer) while the calling
// thread computes chunk k with Program::run on views of those rows, and a writer thread writes chunk
// k - 1's owned rows into the outputs' temporary files (pwrite at their offset). Buffers exist for
// `chunks_in_flight` chunks at once (a slot each, reused round-robin), so memory is bounded by the chunk
// plan, not by the panel; input rows no later chunk reads are handed back to the kernel as the run moves on.
//
// A failure in any stage (an allocation, a read, the run, a write) stops the other two at their next
// chunk, the threads are joined, every buffer is freed, and the first failure is rethrown with the chunk's
// rows in its message; the caller's temporary files are then removed by their destructors.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "cli/npy.hpp"
#include "factorjit.hpp"
#include "runtime/chunk_plan.hpp"

namespace fj::cli {

struct StreamInput {
    std::string name;    // the program's input name
    NpyReader* reader;   // its file
};

struct StreamOutput {
    std::string name;    // the program's output name
    PendingFile* file;   // begun (begin_npy) with the panel's shape and dtype
};

// What moved and how long each stage was busy (for -v and bench/RESULTS.md).
struct StreamStats {
    std::int64_t bytes_read = 0;     // input bytes brought in (halo rows again for each chunk)
    std::int64_t bytes_written = 0;  // output bytes written
    double read_s = 0, compute_s = 0, write_s = 0;  // busy time of each stage
    double wall_s = 0;
};

// Runs `program` over the chunks of `chunks` (over time) on rows x cols panels of `dtype`. `run_options`
// is passed to each chunk's Program::run (its progress is not used); `progress`, if set, is called on the
// calling thread after each chunk is computed and once at the end.
StreamStats run_stream(const fj::Program& program, const std::vector<StreamInput>& inputs,
                       const std::vector<StreamOutput>& outputs, std::int64_t rows, std::int64_t cols, fj::DType dtype,
                       const fj::rt::ChunkPlan& chunks, int chunks_in_flight, const fj::RunOptions& run_options,
                       const std::function<void(const fj::RunProgress&)>& progress);

}  // namespace fj::cli
