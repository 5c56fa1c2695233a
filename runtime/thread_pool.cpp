#include "runtime/thread_pool.hpp"

#include <cstdlib>
#include <map>
#include <memory>

namespace fj::rt {

ThreadPool::ThreadPool(int threads) {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { work(i); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
}

void ThreadPool::drain(int worker) {
    for (;;) {
        std::int64_t task;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (next_ >= tasks_) return;
            task = next_++;
        }
        try {
            (*job_)(task, worker);
        } catch (...) {
            std::lock_guard<std::mutex> lock(mutex_);
            if (!error_) error_ = std::current_exception();
            next_ = tasks_;  // skip what is left
        }
        std::lock_guard<std::mutex> lock(mutex_);
        ++finished_;
    }
}

void ThreadPool::work(int worker) {
    std::uint64_t seen = 0;
    for (;;) {
        {
            std::unique_lock<std::mutex> lock(mutex_);
            wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
            if (stop_) return;
            seen = generation_;
            ++busy_;
        }
        drain(worker);
        {
            std::lock_guard<std::mutex> lock(mutex_);
            --busy_;
        }
        done_.notify_all();
    }
}

void ThreadPool::parallel_for(std::int64_t tasks, const std::function<void(std::int64_t, int)>& fn) {
    if (tasks <= 0) return;
    std::lock_guard<std::mutex> run_lock(run_mutex_);
    {
        std::lock_guard<std::mutex> lock(mutex_);
        job_ = &fn;
        tasks_ = tasks;
        next_ = 0;
        finished_ = 0;
        error_ = nullptr;
        ++generation_;
    }
    if (tasks > 1) wake_.notify_all();
    drain(0);
    std::exception_ptr error;
    {
        std::unique_lock<std::mutex> lock(mutex_);
        // Wait for the tasks in flight and for every worker to leave drain() before job_ dies.
        done_.wait(lock, [&] { return busy_ == 0 && (finished_ == tasks_ || next_ >= tasks_); });
        job_ = nullptr;
        error = error_;
    }
    if (error) std::rethrow_exception(error);
}

ThreadPool& ThreadPool::shared(int threads) {
    // One pool per thread count, kept for the process: a pool another thread is using is never replaced.
    static std::mutex m;
    static auto* pools = new std::map<int, std::unique_ptr<ThreadPool>>;  // not destroyed at exit: workers may run
    std::lock_guard<std::mutex> lock(m);
    auto& pool = (*pools)[threads];
    if (!pool) pool = std::make_unique<ThreadPool>(threads);
    return *pool;
}

int thread_count(int requested) {
    if (requested > 0) return requested;
    if (const char* env = std::getenv("FJ_THREADS")) {
        int v = std::atoi(env);
        if (v > 0) return v;
    }
    unsigned hw = std::thread::hardware_concurrency();
    return hw ? static_cast<int>(hw) : 1;
}

}  // namespace fj::rt
