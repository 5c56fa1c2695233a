#include "runtime/chunk_queue.hpp"

#include <chrono>
#include <thread>
#include <vector>

namespace fj::rt {

namespace {
double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

std::int64_t ChunkQueue::next() {
    if (stopped_.load()) return -1;
    const std::int64_t i = next_.fetch_add(1);
    return i < count_ ? i : -1;
}

SharedProgress::SharedProgress(const ChunkPlan& chunks, const RunOptions& options, ChunkQueue& queue)
    : chunks_(chunks), options_(options), queue_(queue), t0_(now_s()) {
    progress_.chunks_total = chunks.count;
    progress_.rows_total = chunks.rows;
}

void SharedProgress::chunk_done(const Chunk& c, std::int64_t bytes_in, std::int64_t bytes_out) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++progress_.chunks_done;
    // Over columns a row is done only when every column chunk is.
    progress_.rows_done = chunks_.axis == ChunkAxis::Time ? progress_.rows_done + c.rows()
                          : progress_.chunks_done == chunks_.count ? chunks_.rows : 0;
    progress_.bytes_in += bytes_in;
    progress_.bytes_out += bytes_out;
    progress_.elapsed_s = now_s() - t0_;
    if (!options_.progress || queue_.stopped()) return;
    try {
        options_.progress(progress_);
    } catch (...) {
        queue_.stop();
        throw;
    }
}

void run_workers(int workers, ChunkQueue& queue, const std::function<void(int)>& work) {
    std::mutex mutex;
    std::exception_ptr first;
    auto guarded = [&](int w) {
        try {
            work(w);
        } catch (...) {
            queue.stop();
            std::lock_guard<std::mutex> lock(mutex);
            if (!first) first = std::current_exception();
        }
    };
    std::vector<std::thread> threads;
    try {
        for (int w = 1; w < workers; ++w) threads.emplace_back(guarded, w);
    } catch (...) {  // a thread that could not start: no chunk for anyone, the started ones joined below
        queue.stop();
        std::lock_guard<std::mutex> lock(mutex);
        if (!first) first = std::current_exception();
    }
    guarded(0);
    for (std::thread& t : threads) t.join();
    if (first) std::rethrow_exception(first);
}

}  // namespace fj::rt
