// Row steps on the CPU backend: each cross-sectional operator alone on a float32 panel (100 + N(0,1), group
// ids 0..groups-1), next to mean(window(A, 20)) (a time-series step) on the same panel and threads.
// Usage: bench_rows [rows=2000] [cols=4000] [threads=2] [reps=7] [groups=50]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench/median_time.hpp"
#include "factorjit.hpp"

namespace {

using fj::bench::median_time;
using fj::bench::now;

}  // namespace

int main(int argc, char** argv) {
    const std::int64_t rows = argc > 1 ? std::stoll(argv[1]) : 2000;
    const std::int64_t cols = argc > 2 ? std::stoll(argv[2]) : 4000;
    const int threads = argc > 3 ? std::stoi(argv[3]) : 2;
    const int reps = argc > 4 ? std::stoi(argv[4]) : 7;
    const int groups = argc > 5 ? std::stoi(argv[5]) : 50;

    std::vector<float> a(static_cast<std::size_t>(rows * cols)), g(a.size()), out(a.size());
    std::mt19937_64 rng(1);
    std::normal_distribution<double> normal;
    for (std::size_t i = 0; i < a.size(); ++i) {
        a[i] = static_cast<float>(100 + normal(rng));
        g[i] = static_cast<float>(rng() % static_cast<std::uint64_t>(groups));
    }
    const fj::Expr A = fj::input("A"), G = fj::input("G");
    const std::pair<const char*, fj::Expr> cases[] = {
        {"mean(window(A, 20))", fj::mean(fj::window(A, 20))},
        {"rank(A)", fj::rank(A)},
        {"zscore(A)", fj::zscore(A)},
        {"demean(A)", fj::demean(A)},
        {"scale(A)", fj::scale(A)},
        {"group_neutralize(A, G)", fj::group_neutralize(A, G)},
        {"group_rank(A, G)", fj::group_rank(A, G)},
        {"group_zscore(A, G)", fj::group_zscore(A, G)},
    };
    std::printf("# %lld x %lld float32, %d thread(s), %d groups, median of %d runs\n", static_cast<long long>(rows),
                static_cast<long long>(cols), threads, groups, reps);
    for (const auto& [name, e] : cases) {
        fj::CompileOptions o;
        o.backend = fj::Backend::Cpu;
        o.threads = threads;
        const fj::Program p = fj::compile({{"out", e}}, o);
        const std::map<std::string, fj::Panel> in = {{"A", fj::Panel::host(a.data(), rows, cols)},
                                                     {"G", fj::Panel::host(g.data(), rows, cols)}};
        const std::map<std::string, fj::Panel> outs = {{"out", fj::Panel::host(out.data(), rows, cols)}};
        const double t = median_time(reps, [&] { p.run(in, outs); });
        std::printf("%-24s %9.2f ms  %6.1f ns a cell\n", name, t * 1e3, t * 1e9 / static_cast<double>(rows * cols));
    }
}
