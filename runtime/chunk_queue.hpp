// Chunks handed out to several workers (the GPUs of a run, RunOptions::devices): each worker takes the next
// chunk not yet taken when it has room for one, so a slower device takes fewer; the first failure stops the
// hand-out, the other workers finish what they hold, and the failure comes out once every worker is done.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>

#include "runtime/chunk_plan.hpp"
#include "runtime/program.hpp"

namespace fj::rt {

class ChunkQueue {
public:
    explicit ChunkQueue(std::int64_t count) : count_(count) {}
    // The next chunk's index (from 0 up), or -1 once every chunk is taken or the queue was stopped.
    std::int64_t next();
    void stop() { stopped_.store(true); }
    bool stopped() const { return stopped_.load(); }
    std::int64_t count() const { return count_; }

private:
    const std::int64_t count_;
    std::atomic<std::int64_t> next_{0};
    std::atomic<bool> stopped_{false};
};

// A run's progress summed over its workers: each finished chunk is added, and the callback
// (RunOptions::progress) called with the sums, one call at a time, never after the queue was stopped. An
// exception the callback throws stops the queue and propagates to the worker that reported the chunk.
class SharedProgress {
public:
    SharedProgress(const ChunkPlan& chunks, const RunOptions& options, ChunkQueue& queue);
    void chunk_done(const Chunk& c, std::int64_t bytes_in, std::int64_t bytes_out);

private:
    const ChunkPlan& chunks_;
    const RunOptions& options_;
    ChunkQueue& queue_;
    std::mutex mutex_;
    RunProgress progress_;
    double t0_ = 0;
};

// Runs work(w) for w in [0, workers), worker 0 on the calling thread and each other one on a thread of its
// own. The first worker to throw stops `queue`; every worker is joined; then that first exception is rethrown
// as it was thrown (its message is the worker's to write: which device, which chunk).
void run_workers(int workers, ChunkQueue& queue, const std::function<void(int worker)>& work);

}  // namespace fj::rt
