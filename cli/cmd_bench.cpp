// `factorjit bench`: times expressions on generated price-like panels, with the GPU's clock, temperature, power and
// throttle reasons sampled through NVML during the timed runs (runtime/cuda/telemetry.hpp), so that a figure taken
// under the power cap or while the card heats says so. On the CUDA backend the panels are on the device (the
// kernels' own speed) unless --host asks for host panels (copies and the chunk pipeline included).
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/device_option.hpp"
#include "factorjit.hpp"
#include "runtime/thread_pool.hpp"

#ifdef FJ_WITH_CUDA
#include "runtime/backend.hpp"
#include "runtime/cuda/cuda_api.hpp"
#include "runtime/cuda/telemetry.hpp"
#endif

namespace {

using namespace fj::cli;

const char* const kUsage = R"USAGE(usage: factorjit bench -e EXPR [-e EXPR ...] [--rows T] [--cols N] [--dtype float32|float64]
                       [--backend auto|cpu|cuda] [--repeat K] [--host] [--threads N]
                       [--devices all|0,1,...] [--registered]

Times the expressions, compiled together as one program, on generated panels: random walks around 100 (one
per input the expressions read, each from its own seed). Prints the compile time, each run's time and
throughput (bytes of inputs and outputs a second) and, on the CUDA backend, the GPU's SM clock, temperature,
power and throttle reasons sampled through NVML during the timed runs. Runs after the first whose times are
within 3 % of the median are marked steady; a power-cap or thermal throttle reason is reported as throttled.

  -e, --expr EXPR    a factor expression; repeat for several outputs
  --rows T           rows (time) of the panels (default 10000)
  --cols N           columns (instruments) of the panels (default 10000)
  --dtype D          float32 (default) or float64
  --backend B        auto (default), cpu or cuda
  --repeat K         timed runs after one warm-up run (default 5)
  --host             CUDA: host panels (copies and the chunk pipeline timed too) instead of device panels
  --threads N        CPU worker threads (default 0: FJ_THREADS or all cores)
  --devices LIST     CUDA: host panels (implies --host) with their chunks over time spread across these
                     GPUs: all, or ordinals such as 0,1; telemetry is printed for each of them
  --registered       host panels (implies --host) page-locked in place with fj::register_host before the runs
                     (its time is printed), so the copies go by DMA without staging
  -h, --help         print this help
)USAGE";

std::int64_t parse_count(const std::string& s, const char* option, std::int64_t lo) {
    std::int64_t n = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
    if (ec != std::errc() || end != s.data() + s.size() || n < lo)
        throw UsageError(fmt::format("{} needs a whole number >= {}, not '{}'", option, lo, s), "bench");
    return n;
}

// A random walk around 100 per column (steps of about 1 %), columns in parallel, each from its own stream.
template <class T>
std::vector<T> price_panel(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
    std::vector<T> x(static_cast<std::size_t>(rows * cols));
    const std::int64_t block = 64;
    fj::rt::ThreadPool::shared(fj::rt::thread_count(0)).parallel_for((cols + block - 1) / block, [&](std::int64_t b, int) {
        for (std::int64_t j = b * block; j < std::min(cols, (b + 1) * block); ++j) {
            std::mt19937_64 rng(seed * 1000003 + static_cast<std::uint64_t>(j));
            std::normal_distribution<double> n01;
            double p = 100;
            for (std::int64_t t = 0; t < rows; ++t) {
                p *= std::exp(0.01 * n01(rng));
                x[static_cast<std::size_t>(t * cols + j)] = static_cast<T>(p);
            }
        }
    });
    return x;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

template <class T>
int bench(const std::vector<std::pair<std::string, fj::Expr>>& named, const fj::CompileOptions& options,
          std::int64_t rows, std::int64_t cols, int repeat, bool host, bool registered, const std::vector<int>& devices) {
    const auto t0 = std::chrono::steady_clock::now();
    const fj::Program program = fj::compile(named, options);
    const fj::DType dtype = std::is_same_v<T, float> ? fj::DType::F32 : fj::DType::F64;
    std::printf("compiled %zu output(s) from input(s) %s on the %s backend in %.1f ms\n", named.size(),
                fmt::format("{}", fmt::join(program.input_names(), ", ")).c_str(), backend_name(program.backend()),
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    std::map<std::string, std::vector<T>> in_data, out_data;
    std::map<std::string, fj::Panel> ins, outs;
    std::uint64_t seed = 1;
    for (const std::string& name : program.input_names()) {
        in_data[name] = price_panel<T>(rows, cols, seed++);
        ins[name] = fj::Panel::host(in_data[name].data(), rows, cols);
    }
    for (const std::string& name : program.output_names()) {
        out_data[name].assign(static_cast<std::size_t>(rows * cols), T(0));
        outs[name] = fj::Panel::host(out_data[name].data(), rows, cols);
    }
    const double bytes = static_cast<double>((ins.size() + outs.size()) * static_cast<std::size_t>(rows * cols) * sizeof(T));
    const bool cuda = program.backend() == fj::Backend::Cuda;
    // --registered: the host arrays page-locked for the runs (unregistered before the arrays are freed: declared after them).
    std::vector<fj::HostRegistration> registrations;
    if (cuda && host && registered) {
        const auto t_reg = std::chrono::steady_clock::now();
        double reg_bytes = 0;
        for (auto* data : {&in_data, &out_data})
            for (auto& [name, v] : *data) {
                registrations.push_back(fj::register_host(v.data(), v.size() * sizeof(T)));
                reg_bytes += static_cast<double>(v.size() * sizeof(T));
            }
        const double reg_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_reg).count();
        std::printf("registered %zu host arrays (%.2f GB) with fj::register_host in %.1f ms (%.1f GB/s)\n", registrations.size(),
                    reg_bytes / 1e9, reg_ms, reg_bytes / std::max(reg_ms, 1e-3) / 1e6);
    }
    std::string where = cuda ? (host ? (registered ? "registered host panels" : "host panels") : "device panels") : "host panels";

#ifdef FJ_WITH_CUDA
    namespace cu = fj::rt::cuda;
    std::vector<cu::CUdeviceptr> device_buffers;
    struct Free {
        std::vector<cu::CUdeviceptr>& b;
        ~Free() {
            for (cu::CUdeviceptr p : b) cu::driver_api().cuMemFree(p);
        }
    } free_them{device_buffers};
    // Telemetry of every GPU the runs use: the program's device, or each device of --devices once.
    std::vector<std::unique_ptr<cu::TelemetrySampler>> telemetry;
    std::vector<int> telemetry_of;  // the device ordinal of each sampler
    if (cuda) {
        const cu::Device& dev = *cu::device();
        std::vector<int> used = devices.empty() ? std::vector<int>{dev.ordinal} : devices;
        std::sort(used.begin(), used.end());
        used.erase(std::unique(used.begin(), used.end()), used.end());
        for (int d : used) telemetry.push_back(std::make_unique<cu::TelemetrySampler>(cu::device_at(d)));
        telemetry_of = used;
        cu::make_current(dev);
        if (!host) {
            const std::size_t panel_bytes = static_cast<std::size_t>(rows * cols) * sizeof(T);
            auto to_device = [&](std::map<std::string, fj::Panel>& panels, bool copy) {
                for (auto& [name, p] : panels) {
                    cu::CUdeviceptr d = 0;
                    FJ_CU(cuMemAlloc, &d, std::max<std::size_t>(panel_bytes, 1));
                    device_buffers.push_back(d);
                    if (copy && panel_bytes) FJ_CU(cuMemcpyHtoD, d, p.data, panel_bytes);
                    p = fj::Panel::device(d, rows, cols, cols, dtype);
                }
            };
            to_device(ins, true);
            to_device(outs, false);
        }
    }
#else
    (void)host;
#endif
    std::printf("%lld x %lld %s, %s, %.1f MB of inputs and outputs a run\n", static_cast<long long>(rows),
                static_cast<long long>(cols), std::string(fj::dtype_name(dtype)).c_str(), where.c_str(), bytes / 1e6);
    fj::RunOptions run_options;
    run_options.devices = devices;
    if (cuda && !devices.empty()) std::printf("runs on %s\n", describe_devices(devices).c_str());
    program.run(ins, outs, run_options);  // warm-up: specialised kernels, pinned buffers, caches
#ifdef FJ_WITH_CUDA
    for (auto& t : telemetry) t->start();
#endif
    std::vector<double> ms;
    for (int k = 0; k < repeat; ++k) {
        const auto t = std::chrono::steady_clock::now();
        program.run(ins, outs, run_options);
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count());
    }
    const double med = median(ms);
    for (int k = 0; k < repeat; ++k)
        std::printf("run %d of %d: %.3f ms, %.1f GB/s%s\n", k + 1, repeat, ms[static_cast<std::size_t>(k)],
                    bytes / (ms[static_cast<std::size_t>(k)] * 1e-3) / 1e9,
                    k > 0 && std::fabs(ms[static_cast<std::size_t>(k)] - med) <= 0.03 * med ? " (steady)" : "");
    std::printf("median %.3f ms, %.1f GB/s\n", med, bytes / (med * 1e-3) / 1e9);
#ifdef FJ_WITH_CUDA
    for (std::size_t i = 0; i < telemetry.size(); ++i) {
        const cu::TelemetrySummary t = telemetry[i]->stop();
        if (telemetry.size() == 1)
            std::printf("GPU during the timed runs: %s%s\n", t.describe().c_str(), t.throttled() ? " (THROTTLED)" : "");
        else
            std::printf("GPU %d during the timed runs: %s%s\n", telemetry_of[i], t.describe().c_str(),
                        t.throttled() ? " (THROTTLED)" : "");
    }
#endif
    if (!cuda) std::printf("(CPU backend: no GPU telemetry)\n");
    return 0;
}

}  // namespace

int cmd_bench(const std::vector<std::string>& argv) {
    std::vector<std::string> texts;
    fj::CompileOptions options;
    fj::ParseOptions parse_options;
    std::int64_t rows = 10000, cols = 10000;
    int repeat = 5;
    bool host = false, f64 = false, registered = false;
    std::vector<int> devices;
    ArgCursor c(argv, "bench");
    while (c.next()) {
        if (c.is("-h", "--help")) {
            std::fputs(kUsage, stdout);
            return 0;
        } else if (c.is("-e", "--expr")) {
            texts.push_back(c.value("an expression"));
        } else if (c.is("--rows")) {
            rows = parse_count(c.value("a number of rows"), "--rows", 1);
        } else if (c.is("--cols")) {
            cols = parse_count(c.value("a number of columns"), "--cols", 1);
        } else if (c.is("--repeat")) {
            repeat = static_cast<int>(std::min<std::int64_t>(parse_count(c.value("a number of runs"), "--repeat", 1), 1000000));
        } else if (c.is("--dtype")) {
            const std::string d = c.value("float32 or float64");
            if (d != "float32" && d != "float64") throw UsageError("--dtype must be float32 or float64, not '" + d + "'", "bench");
            f64 = d == "float64";
        } else if (c.is("--backend")) {
            options.backend = parse_backend(c.value("auto, cpu or cuda"), "bench");
        } else if (c.is("--threads")) {
            options.threads = parse_threads(c.value("a number of threads"), "bench");
        } else if (c.is("--host")) {
            c.no_value();
            host = true;
        } else if (c.is("--registered")) {
            c.no_value();
            host = registered = true;
        } else if (c.is("--devices")) {
            devices = parse_devices_option(c.value("all or ordinals such as 0,1"), "bench");
            host = true;  // device panels run on the device that holds them: a list means host panels
        } else {
            c.unknown();
        }
    }
    if (texts.empty()) throw UsageError("bench needs at least one -e EXPR", "bench");
    const auto named = numbered_outputs(texts, parse_options);
    return f64 ? bench<double>(named, options, rows, cols, repeat, host, registered, devices)
               : bench<float>(named, options, rows, cols, repeat, host, registered, devices);
}
