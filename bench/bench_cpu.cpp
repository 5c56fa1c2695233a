// C1 of TARGETS.md: the CPU backend on the headline case, next to a 2-read-1-write streaming floor
// measured in the same run on the same panels and threads.
// Usage: bench_cpu [rows=50000] [cols=1000] [threads=2] [reps=7] [block_cols=auto] [tile_rows=auto]
// FJ_BENCH_OPS="skew kurt ...": instead of corr, each of these time-series reducers of window(A, w) at w = 20 and
// 250 (the ratio is issue 21's "w = 250 within 1.5 x w = 20"); "ema" times ema(A, w) (span w).
// "quantile" is quantile(window(A, w), 0.25); any other name X is X(window(A, w)).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "examples/price_panels.hpp"
#include "bench/median_time.hpp"
#include "factorjit.hpp"
#include "runtime/thread_pool.hpp"

namespace {

using fj::bench::median_time;
using fj::bench::now;

}  // namespace

int main(int argc, char** argv) {
    const std::int64_t rows = argc > 1 ? std::stoll(argv[1]) : 50000;
    const std::int64_t cols = argc > 2 ? std::stoll(argv[2]) : 1000;
    const int threads = argc > 3 ? std::stoi(argv[3]) : 2;
    const int reps = argc > 4 ? std::stoi(argv[4]) : 7;
    const std::int64_t block_cols = argc > 5 ? std::stoll(argv[5]) : 0;
    const std::int64_t tile_rows = argc > 6 ? std::stoll(argv[6]) : 0;
    const std::int64_t n = rows * cols;

    std::vector<float> a, b, c(n);
    fj::examples::make_prices(rows, cols, a, b, 1);

    // The floor: c = a + b over the same panels, the same threads, in contiguous chunks.
    fj::rt::ThreadPool& pool = fj::rt::ThreadPool::shared(threads);
    const std::int64_t chunks = 64, chunk = (n + chunks - 1) / chunks;
    const double stream = median_time(reps, [&] {
        pool.parallel_for(chunks, [&](std::int64_t k, int) {
            const std::int64_t e = std::min(n, (k + 1) * chunk);
            for (std::int64_t i = k * chunk; i < e; ++i) c[i] = a[i] + b[i];
        });
    });
    std::printf("rows %lld cols %lld threads %d, median of %d\n", static_cast<long long>(rows),
                static_cast<long long>(cols), threads, reps);
    std::printf("%-44s %9.2f ms  %6.1f GB/s\n", "stream c = a + b (2 reads + 1 write)", stream * 1e3,
                3.0 * n * 4 / stream / 1e9);

    fj::CompileOptions opt;
    opt.backend = fj::Backend::Cpu;
    opt.threads = threads;
    opt.block_cols = block_cols;
    opt.tile_rows = tile_rows;
    std::vector<std::string> ops;
    if (const char* v = std::getenv("FJ_BENCH_OPS")) {
        std::istringstream words(v);
        for (std::string op; words >> op;) ops.push_back(op);
    }
    if (!ops.empty()) {
        const std::map<std::string, fj::Panel> in{{"A", fj::Panel::host(a.data(), rows, cols)}};
        const std::map<std::string, fj::Panel> out{{"c", fj::Panel::host(c.data(), rows, cols)}};
        for (const std::string& op : ops) {
            double t20 = 0;
            for (int w : {20, 250}) {
                const std::string ws = std::to_string(w);
                const std::string f = op == "ema"        ? "ema(A, " + ws + ")"
                                      : op == "quantile" ? "quantile(window(A, " + ws + "), 0.25)"
                                                         : op + "(window(A, " + ws + "))";
                fj::Program p = fj::compile({{"c", fj::parse(f)}}, opt);
                const double t = median_time(reps, [&] { p.run(in, out); });
                if (w == 20) t20 = t;
                std::printf("%-44s %9.2f ms  %6.2f x stream%s\n", f.c_str(), t * 1e3, t / stream,
                            w == 20 ? "" : ("  (" + std::to_string(t / t20).substr(0, 4) + " x w=20)").c_str());
            }
        }
        return 0;
    }
    for (int w : {20, 250}) {
        const std::string f = "corr(window(A," + std::to_string(w) + "), window(B," + std::to_string(w) + "))";
        fj::Program p = fj::compile({{"c", fj::parse(f)}}, opt);
        const std::map<std::string, fj::Panel> in{{"A", fj::Panel::host(a.data(), rows, cols)},
                                                  {"B", fj::Panel::host(b.data(), rows, cols)}};
        const std::map<std::string, fj::Panel> out{{"c", fj::Panel::host(c.data(), rows, cols)}};
        const double t = median_time(reps, [&] { p.run(in, out); });
        std::printf("%-44s %9.2f ms  %6.2f x stream\n", f.c_str(), t * 1e3, t / stream);
    }
    return 0;
}
