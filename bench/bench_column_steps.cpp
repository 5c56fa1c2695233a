// The order statistics (ts_rank, median, quantile 0.25) on the CPU backend: at w = 20 (fused into a kernel,
// O(w) a row), and at each long window both as the planner makes it (a column step, O(log w) a row, which the CPU
// backend runs fused below cpu::kColumnStepCpuWindow) and fused (the plan made with PlanOptions::column_steps off:
// what it cost before column steps). The variants run in alternation, so that a busy machine slows them alike; wall
// and process CPU time, the median of each.
//
//   bench_column_steps [rows] [cols] [threads] [reps] [windows]
//   (defaults 10000 1000 1 5 250; float32 random walks; windows: a comma-separated list of the long windows timed)
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "codegen/plan.hpp"
#include "factorjit.hpp"
#include "median_time.hpp"
#include "runtime/backend.hpp"
#include "runtime/cpu/column_ops.hpp"

namespace {

double cpu_seconds() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

struct Variant {
    std::string label;
    std::unique_ptr<fj::rt::Executable> exe;
    std::vector<double> wall, cpu;
};

}  // namespace

int main(int argc, char** argv) {
    const std::int64_t rows = argc > 1 ? std::atoll(argv[1]) : 10000, cols = argc > 2 ? std::atoll(argv[2]) : 1000;
    const int threads = argc > 3 ? std::atoi(argv[3]) : 1, reps = argc > 4 ? std::atoi(argv[4]) : 5;
    std::vector<int> windows;
    for (std::string list = argc > 5 ? argv[5] : "250"; !list.empty();) {
        const std::size_t comma = list.find(',');
        windows.push_back(std::atoi(list.substr(0, comma).c_str()));
        list = comma == std::string::npos ? "" : list.substr(comma + 1);
    }
    std::vector<float> a(static_cast<std::size_t>(rows * cols)), out(a.size());
    std::uint64_t s = 12345;
    for (std::int64_t j = 0; j < cols; ++j) {
        double p = 100;
        for (std::int64_t t = 0; t < rows; ++t) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            p *= 1.0 + 0.01 * (static_cast<double>(s >> 11) * 0x1.0p-53 - 0.5);
            a[static_cast<std::size_t>(t * cols + j)] = static_cast<float>(p);
        }
    }
    fj::CompileOptions co;
    co.backend = fj::Backend::Cpu;
    co.threads = threads;
    const fj::Expr A = fj::input("A");
    std::printf("order statistics on the CPU: %lld x %lld float32, %d thread(s), median of %d runs (wall / process CPU)\n",
                static_cast<long long>(rows), static_cast<long long>(cols), threads, reps);
    for (const char* op : {"ts_rank", "median", "quantile"}) {
        auto stat = [&](int w) {
            const fj::Window win = fj::window(A, w);
            return std::string(op) == "ts_rank" ? fj::ts_rank(win) : std::string(op) == "median" ? fj::median(win) : fj::quantile(win, 0.25);
        };
        std::vector<Variant> vs;
        std::vector<std::pair<int, bool>> variants{{20, true}};
        for (int w : windows) {
            variants.emplace_back(w, true);
            variants.emplace_back(w, false);
        }
        for (const auto& [w, column] : variants) {
            fj::codegen::PlanOptions po;
            po.column_steps = column;
            // (The plan outlives its executable: kept for the program's life, as fj::Program keeps it.)
            static std::vector<std::unique_ptr<fj::codegen::Plan>> plans;
            plans.push_back(std::make_unique<fj::codegen::Plan>(fj::codegen::make_plan({{"c", stat(w)}}, fj::DType::F32, po)));
            const bool is_column = plans.back()->steps.front().kind == fj::codegen::StepKind::Column;
            Variant v;
            v.label = "w = " + std::to_string(w) + (!is_column                              ? ", fused kernel"
                                                    : w >= fj::cpu::kColumnStepCpuWindow ? ", column step"
                                                                                         : ", column plan, run fused");
            v.exe = fj::rt::cpu_backend()->prepare(*plans.back(), fj::DType::F32, co);
            vs.push_back(std::move(v));
        }
        const std::vector<fj::Panel> in{fj::Panel::host(a.data(), rows, cols)}, o{fj::Panel::host(out.data(), rows, cols)};
        for (Variant& v : vs) v.exe->run(in, o, {});  // warm-up: page faults, caches
        for (int r = 0; r < reps; ++r)
            for (Variant& v : vs) {
                const double c0 = cpu_seconds(), t0 = fj::bench::now();
                v.exe->run(in, o, {});
                v.wall.push_back(fj::bench::now() - t0);
                v.cpu.push_back(cpu_seconds() - c0);
            }
        for (const Variant& v : vs)
            std::printf("  %-9s %-26s %9.1f ms wall %9.1f ms CPU  (%.2f ns a cell of CPU)\n", op, v.label.c_str(), 1e3 * median(v.wall),
                        1e3 * median(v.cpu), 1e9 * median(v.cpu) / static_cast<double>(rows * cols));
    }
    return 0;
}
