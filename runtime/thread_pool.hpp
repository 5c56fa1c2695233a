// A fixed pool of worker threads for data-parallel loops over independent tasks.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace fj::rt {

class ThreadPool {
public:
    explicit ThreadPool(int threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return static_cast<int>(workers_.size()) + 1; }  // the caller works too

    // Runs fn(task, worker) for task in [0, tasks); worker in [0, size()) names the thread, for
    // per-thread scratch. Tasks are taken in order from a shared counter. Returns when all are done;
    // rethrows the first exception a task threw (the remaining tasks are skipped).
    void parallel_for(std::int64_t tasks, const std::function<void(std::int64_t, int)>& fn);

    // The process-wide pool with `threads` threads (one per distinct count, kept for the process).
    static ThreadPool& shared(int threads);

private:
    void work(int worker);
    void drain(int worker);

    std::vector<std::thread> workers_;
    std::mutex run_mutex_;  // one parallel_for at a time: callers on other threads queue
    std::mutex mutex_;
    std::condition_variable wake_, done_;
    const std::function<void(std::int64_t, int)>* job_ = nullptr;
    std::int64_t tasks_ = 0, next_ = 0, finished_ = 0;
    std::uint64_t generation_ = 0;
    int busy_ = 0;
    bool stop_ = false;
    std::exception_ptr error_;
};

// Worker threads to use: `requested` if > 0, else $FJ_THREADS, else the hardware's count.
int thread_count(int requested);

}  // namespace fj::rt
