// GPU benchmarks of TARGETS.md: G1, G4, G5, J1, J2, J3 (run by bench/gpu_run.sh on the GPU machine).
//
//   bench_gpu [--quick]        all cases, a table last ("--quick": smaller G1/G4 panels)
//   bench_gpu --j1             J1 alone (cold compiles)
//   bench_gpu --j3             internal: one cold-or-warm process for J3 (prints "J3 ms")
//   bench_gpu --a1 [T N]       A1: the 101 alphas as one program on device panels, 4,000 x 5,000 by default (the
//                              market of bench/alpha_data.py, made here): compile, first run, warm runs (events);
//                              with FJ_PROFILE=1 the steps' breakdown
//   bench_gpu --host [T N]     H1: corr w=20 on host panels (pageable memory), host to host, 50,000 x 50,000 by
//                              default: the first run (pinned staging allocated) and the median of 3 more, with
//                              the progress callback's chunk count and bytes, and the PCIe floor (both directions
//                              at once, 55 GB/s each way measured on this machine: DEVICE.md) beside it
//
// Method (TARGETS.md, METHOD.md): data generated on the device (price-like random walks around 100 and a
// correlated partner, never zeros), warm-up first, medians of timed runs with CUDA events on the legacy
// default stream (the backend's blocking stream orders itself after them), the copy floor measured in the
// same run with cuMemcpyDtoD (bytes read + written), and nvidia-smi's SM clock, temperature, power and
// throttle reasons sampled while each case runs. The 50,000 x 50,000 cases in two states (time_cool,
// time_sustained): a single computation on a cool GPU (the G rows) and back-to-back runs under the power
// cap (the "s" rows, against a copy floor in the same state). Results are checked: G1's output against a
// float64 two-pass reference on columns spread over the panel, the last ones included (indices beyond
// 2^31 elements). Settings are "key=value,..." lists of the FJ_CUDA_* knobs (parse_setting below):
//   FJ_BENCH_VARIANTS=0        G1 and G5 with the library's defaults only
//   FJ_BENCH_G1_VARIANTS="default hints=1 edges=0 ..."   the G1 settings, in order (default first: the G1 row)
//   FJ_BENCH_G5_SETTINGS="default edges=0 block=256,tile=313 ..."   the G5 settings, each at its `tile`
//                              or, without one, at two tile lengths (auto and 160 rows)
//   FJ_BENCH_SWEEP="w=250,hints=0 tile=4000 op=max,w=30 ..."   more settings on the 50,000 x 50,000 panel
//                              (op: corr, the default, or max min std mean skew kurt slope rsquare resid median
//                              quantile (q = 0.25) ts_rank argmax decay_linear product of window(A, w), or ema(A, w);
//                              "sustained=1": measured in that state, see time_sustained(), instead of time_cool();
//                              "holes=K": on panels with NaNs in A every K rows of every 32nd column, see fj_bench_gen;
//                              "spikes=K": on panels with a bad tick of 1e8 in A in K columns spread evenly, see
//                              inject_spikes(): with guard=1, what the repair pass costs)
//   FJ_BENCH_COOL_MS=2000      the idle pause before each 50,000 x 50,000 measurement (see cool_down())
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "alphas/alpha101.hpp"
#include "factorjit.hpp"

#ifdef FJ_WITH_CUDA
#include "codegen/plan.hpp"
#include "runtime/backend.hpp"
#include "runtime/cuda/cuda_api.hpp"
#include "runtime/cuda/compile.hpp"
#include "runtime/cuda/compile.hpp"

namespace {

namespace cu = fj::rt::cuda;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? NAN : v[v.size() / 2];
}

// ---- telemetry: nvidia-smi sampled while a case runs -------------------------------------------------
// One nvidia-smi --query-gpu line (read only), or "" where it fails.
std::string smi_query(const std::string& fields) {
    FILE* f = popen(("nvidia-smi --query-gpu=" + fields + " --format=csv,noheader 2>/dev/null").c_str(), "r");
    if (!f) return "";
    char buf[256] = {};
    std::string s = std::fgets(buf, sizeof buf, f) ? buf : "";
    if (pclose(f) != 0) s.clear();
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    return s;
}

std::string smi_once() {
    for (const char* q : {"clocks.sm,temperature.gpu,power.draw,clocks_throttle_reasons.active",
                          "clocks.sm,temperature.gpu,power.draw,clocks_event_reasons.active"}) {
        const std::string s = smi_query(q);
        if (!s.empty()) return s;
    }
    return "nvidia-smi unavailable";
}

// Samples once, `delay_ms` after construction, on its own thread.
class Telemetry {
public:
    explicit Telemetry(int delay_ms = 30) : t_([this, delay_ms] {
        std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
        sample_ = smi_once();
    }) {}
    std::string get() {
        if (t_.joinable()) t_.join();
        return sample_;
    }
    ~Telemetry() {
        if (t_.joinable()) t_.join();
    }

private:
    std::string sample_;
    std::thread t_;
};

// ---- device buffers and events ----------------------------------------------------------------------
struct DevBuf {
    cu::CUdeviceptr p = 0;
    std::size_t bytes = 0;
    explicit DevBuf(std::size_t n) : bytes(n) { FJ_CU(cuMemAlloc, &p, n); }
    ~DevBuf() { cu::driver_api().cuMemFree(p); }
};

struct Events {
    cu::CUevent a = nullptr, b = nullptr;
    Events() {
        FJ_CU(cuEventCreate, &a, cu::CU_EVENT_DEFAULT);
        FJ_CU(cuEventCreate, &b, cu::CU_EVENT_DEFAULT);
    }
    ~Events() {
        cu::driver_api().cuEventDestroy(a);
        cu::driver_api().cuEventDestroy(b);
    }
    void start() { FJ_CU(cuEventRecord, a, nullptr); }
    double stop_ms() {
        FJ_CU(cuEventRecord, b, nullptr);
        FJ_CU(cuEventSynchronize, b);
        float ms = 0;
        FJ_CU(cuEventElapsedTime, &ms, a, b);
        return ms;
    }
};

// ---- data: generated on the device ---------------------------------------------------------------------
const char* kGenSource = R"(
__device__ unsigned long long mixbits(unsigned long long z) {
    z += 0x9e3779b97f4a7c15ULL; z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL; return z ^ (z >> 31);
}
// Box-Muller in float32 with the fast intrinsics: this is test data, and generating 2.5e9 values in
// double-precision transcendentals would take seconds.
__device__ float gauss(unsigned long long k) {
    const unsigned long long h = mixbits(k);
    const float u1 = ((unsigned)(h >> 40) + 0.5f) * (1.0f / 16777216.0f);
    const float u2 = ((unsigned)(h & 0xffffffu) + 0.5f) * (1.0f / 16777216.0f);
    return sqrtf(-2.0f * __logf(u1)) * __cosf(6.2831853f * u2);
}
extern "C" __global__ void fj_bench_empty() {}
// A: a random walk around 100 per column (steps 0.1 N(0,1)); B = 0.5 A + N(0,1). Row-major, ld = cols.
// holes > 0: A is NaN on every holes-th row of every 32nd column (column 7 of each 32), so that no batch of
// a window scan's strip is free of missing values for a window (the sweep key `holes`).
extern "C" __global__ void fj_bench_gen(float* a, float* b, long long rows, long long cols, unsigned long long seed,
                                        long long holes) {
    const long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= cols) return;
    const unsigned long long base = (seed * 0x100000001b3ULL + (unsigned long long)j) * 0x2545F4914F6CDD1DULL;
    double p = 100.0 + 5.0 * gauss(base);
    for (long long t = 0; t < rows; ++t) {
        const unsigned long long k = base + 2ULL * (unsigned long long)t * 0x9E3779B97F4A7C15ULL;
        p += 0.1 * gauss(k);
        a[t * cols + j] = holes > 0 && j % 32 == 7 && t % holes == 0 ? __int_as_float(0x7fc00000) : (float)p;
        b[t * cols + j] = (float)(0.5 * p + gauss(k + 1));
    }
}
)";

cu::CUmodule gen_module() {
    static cu::CUmodule m = [] {
        const cu::Device& d = *cu::device();
        cu::NvrtcOutput o = cu::nvrtc_compile(kGenSource, "fj_bench_gen", fj::codegen::cuda_compile_options(d.arch(), false),
                                              true, "");
        cu::CUmodule mod = nullptr;
        FJ_CU(cuModuleLoadData, &mod, o.image.data());
        return mod;
    }();
    return m;
}

cu::CUfunction gen_kernel() {
    static cu::CUfunction f = [] {
        cu::CUfunction fn = nullptr;
        FJ_CU(cuModuleGetFunction, &fn, gen_module(), "fj_bench_gen");
        return fn;
    }();
    return f;
}

// Wall time of launching an empty kernel and synchronizing its stream: the least any run can cost.
double bare_launch_us() {
    cu::CUfunction fn = nullptr;
    FJ_CU(cuModuleGetFunction, &fn, gen_module(), "fj_bench_empty");
    cu::CUstream s = nullptr;
    FJ_CU(cuStreamCreate, &s, 0u);
    std::vector<double> us;
    for (int i = 0; i < 2100; ++i) {
        const auto t0 = Clock::now();
        FJ_CU(cuLaunchKernel, fn, 1u, 1u, 1u, 32u, 1u, 1u, 0u, s, nullptr, nullptr);
        FJ_CU(cuStreamSynchronize, s);
        if (i >= 100) us.push_back(ms_since(t0) * 1e3);
    }
    cu::driver_api().cuStreamDestroy(s);
    return median(us);
}

void generate(cu::CUdeviceptr a, cu::CUdeviceptr b, long long rows, long long cols, unsigned long long seed,
              long long holes = 0) {
    void* args[] = {&a, &b, &rows, &cols, &seed, &holes};
    const unsigned grid = static_cast<unsigned>((cols + 127) / 128);
    FJ_CU(cuLaunchKernel, gen_kernel(), grid, 1u, 1u, 128u, 1u, 1u, 0u, nullptr, args, nullptr);
    FJ_CU(cuCtxSynchronize);
}

// One bad tick of 1e8 in each of k columns of a (spread over the columns, at rows spread over the panel): the
// passes that hold one need their refolds (FJ_CUDA_GUARD=1 reruns them in the repair pass).
void inject_spikes(cu::CUdeviceptr a, long long rows, long long cols, long long k) {
    const float tick = 1e8f;
    for (long long i = 0; i < k; ++i) {
        const long long j = i * cols / k, t = (rows / 7 + i * 7919) % rows;
        FJ_CU(cuMemcpyHtoD, a + static_cast<cu::CUdeviceptr>((t * cols + j) * 4), &tick, sizeof tick);
    }
}

// Copy bandwidth: DtoD of `bytes`, counting bytes read + written per second, median of 7 copies;
// `sustain_ms` > 0: after that long of back-to-back copies (the state of time_sustained()).
double copy_bandwidth(cu::CUdeviceptr dst, cu::CUdeviceptr src, std::size_t bytes, std::string* smi, double sustain_ms = 0) {
    Events ev;
    const auto t0 = Clock::now();
    do {
        FJ_CU(cuMemcpyDtoD, dst, src, bytes);
        FJ_CU(cuCtxSynchronize);
    } while (ms_since(t0) < sustain_ms);
    std::vector<double> ts;
    Telemetry tel;
    for (int r = 0; r < 7; ++r) {
        ev.start();
        FJ_CU(cuMemcpyDtoDAsync, dst, src, bytes, nullptr);
        ts.push_back(ev.stop_ms());
    }
    *smi = tel.get();
    return 2.0 * static_cast<double>(bytes) / (median(ts) * 1e-3);
}

// One column of a device panel, to the host, as double.
std::vector<double> column(cu::CUdeviceptr p, long long rows, long long cols, long long j) {
    std::vector<float> f(static_cast<std::size_t>(rows));
    cu::CUDA_MEMCPY2D c;
    c.srcMemoryType = cu::CU_MEMORYTYPE_DEVICE;
    c.srcDevice = p + static_cast<cu::CUdeviceptr>(j) * 4;
    c.srcPitch = static_cast<std::size_t>(cols) * 4;
    c.dstMemoryType = cu::CU_MEMORYTYPE_HOST;
    c.dstHost = f.data();
    c.dstPitch = 4;
    c.WidthInBytes = 4;
    c.Height = static_cast<std::size_t>(rows);
    FJ_CU(cuMemcpy2DAsync, &c, nullptr);
    FJ_CU(cuCtxSynchronize);
    return std::vector<double>(f.begin(), f.end());
}

struct Check {
    double max_abs = 0, rel_frob = 0;
    long long nan_mismatch = 0;
};

// corr of columns against a float64 two-pass reference, window w.
Check check_corr(cu::CUdeviceptr a, cu::CUdeviceptr b, cu::CUdeviceptr out, long long rows, long long cols, int w) {
    Check c;
    long double e2 = 0, r2 = 0;
    std::vector<long long> js = {0, 1, cols / 3, cols / 2 + 7, cols - 2, cols - 1};
    for (long long j : js) {
        if (j < 0 || j >= cols) continue;
        const auto x = column(a, rows, cols, j), y = column(b, rows, cols, j), o = column(out, rows, cols, j);
        for (long long t = 0; t < rows; ++t) {
            double ref = NAN;
            if (t >= w - 1) {
                double mx = 0, my = 0;
                for (long long k = t - w + 1; k <= t; ++k) mx += x[k], my += y[k];
                mx /= w;
                my /= w;
                double sxy = 0, sxx = 0, syy = 0;
                for (long long k = t - w + 1; k <= t; ++k) {
                    sxy += (x[k] - mx) * (y[k] - my);
                    sxx += (x[k] - mx) * (x[k] - mx);
                    syy += (y[k] - my) * (y[k] - my);
                }
                ref = sxy / std::sqrt(sxx * syy);
            }
            if (std::isnan(ref) != std::isnan(o[t])) {
                ++c.nan_mismatch;
                continue;
            }
            if (std::isnan(ref)) continue;
            c.max_abs = std::max(c.max_abs, std::fabs(o[t] - ref));
            e2 += (o[t] - ref) * (o[t] - ref);
            r2 += ref * ref;
        }
    }
    c.rel_frob = r2 > 0 ? static_cast<double>(std::sqrt(e2 / r2)) : 0;
    return c;
}

struct Row {
    std::string id, what;
    double ms = NAN, floor_ms = NAN;
    std::string note, smi;
    std::string unit = "ms";
};
std::vector<Row> g_rows;

void print_row(const Row& r) {
    std::printf("%-4s | %-52s | %9.3f %s | %s %8.3f %s | x%5.2f | %s | smi: %s\n", r.id.c_str(), r.what.c_str(), r.ms,
                r.unit.c_str(), r.id[0] == 'G' ? "floor " : "target", r.floor_ms, r.unit.c_str(), r.ms / r.floor_ms,
                r.note.c_str(), r.smi.c_str());
    std::fflush(stdout);
}

// Times program.run on device panels: events (on the legacy stream) and wall clock, median of reps.
struct Timing {
    double event_ms = NAN, wall_ms = NAN;
    std::string smi;
};
// Warm-up: `warm` runs, or runs for `for_ms` milliseconds where that is longer.
void warm_up(const fj::Program& p, const std::map<std::string, fj::Panel>& in, const std::map<std::string, fj::Panel>& out,
             int warm, double for_ms = 0) {
    const auto t0 = Clock::now();
    for (int i = 0; i < warm || ms_since(t0) < for_ms; ++i) p.run(in, out);
}

Timing time_run(const fj::Program& p, const std::map<std::string, fj::Panel>& in,
                const std::map<std::string, fj::Panel>& out, int reps, int warm = 2) {
    warm_up(p, in, out, warm);
    Events ev;
    std::vector<double> e, w;
    Telemetry tel;
    for (int i = 0; i < reps; ++i) {
        const auto t0 = Clock::now();
        ev.start();
        p.run(in, out);
        e.push_back(ev.stop_ms());
        w.push_back(ms_since(t0));
    }
    return {median(e), median(w), tel.get()};
}

// The two states a 50,000 x 50,000 case is measured in. On the H200 single G1 runs from an idle GPU took
// 8.63-8.74 ms for the first 4 runs (about 35 ms), 9.0 at the 6th, 9.7 from the 11th and 9.8-10.5 after
// 1 s: the software power cap (700 W) lowers the SM clock to 1,290-1,440 MHz within about 50 ms of load
// (2026-12-01, eighth session). So: "cool", a single computation's state, is the median of runs 2-6 after
// cool_down() (one run of warm-up, then five timed, as TARGETS.md asks); "sustained", a library of factors
// run back to back, the median of 9 runs after 2 s of back-to-back runs.
void cool_down();
Timing time_cool(const fj::Program& p, const std::map<std::string, fj::Panel>& in,
                 const std::map<std::string, fj::Panel>& out) {
    cool_down();
    return time_run(p, in, out, 5, 1);
}
Timing time_sustained(const fj::Program& p, const std::map<std::string, fj::Panel>& in,
                      const std::map<std::string, fj::Panel>& out) {
    warm_up(p, in, out, 2, 2000);
    return time_run(p, in, out, 9, 0);
}

fj::Expr corr_w(int w) {
    const fj::Expr A = fj::input("A"), B = fj::input("B");
    return fj::corr(fj::window(A, w), fj::window(B, w));
}

// A sweep's expression: `op` of window(A, w) (and B for corr), and the number of panels it reads.
std::pair<fj::Expr, int> sweep_expr(const std::string& op, int w) {
    const fj::Expr A = fj::input("A");
    if (op == "corr") return {corr_w(w), 2};
    if (op == "max") return {fj::max(fj::window(A, w)), 1};
    if (op == "min") return {fj::min(fj::window(A, w)), 1};
    if (op == "std") return {fj::std(fj::window(A, w)), 1};
    if (op == "mean") return {fj::mean(fj::window(A, w)), 1};
    if (op == "cov") return {fj::cov(fj::window(A, w), fj::window(fj::input("B"), w)), 2};
    // The other time-series operators (issue 21: each at w = 250 within 1.5 x its own w = 20, order statistics
    // excepted); ema takes w as its span.
    if (op == "skew") return {fj::skew(fj::window(A, w)), 1};
    if (op == "kurt") return {fj::kurt(fj::window(A, w)), 1};
    if (op == "slope") return {fj::slope(fj::window(A, w)), 1};
    if (op == "rsquare") return {fj::rsquare(fj::window(A, w)), 1};
    if (op == "resid") return {fj::resid(fj::window(A, w)), 1};
    if (op == "median") return {fj::median(fj::window(A, w)), 1};
    if (op == "quantile") return {fj::quantile(fj::window(A, w), 0.25), 1};
    if (op == "ts_rank") return {fj::ts_rank(fj::window(A, w)), 1};
    if (op == "argmax") return {fj::argmax(fj::window(A, w)), 1};
    if (op == "decay_linear") return {fj::decay_linear(fj::window(A, w)), 1};
    if (op == "product") return {fj::product(fj::window(A, w)), 1};
    if (op == "ema") return {fj::ema(A, w), 1};
    throw std::runtime_error("FJ_BENCH_SWEEP: op=" + op +
                             " is not one of corr cov max min std mean skew kurt slope rsquare resid median quantile "
                             "ts_rank argmax decay_linear product ema");
}

void setenv_or_unset(const char* name, const std::string& v) {
    if (v.empty()) ::unsetenv(name);
    else ::setenv(name, v.c_str(), 1);
}

// Benchmark settings as "key=value,key=value" (keys: unroll block pf edges hints warm scan ahead chain fixed
// oneloop echo refine quiet, each an FJ_CUDA_* variable of bench/TUNING.md, and nvrtc (one option for
// FJ_NVRTC_OPTIONS, e.g. nvrtc=--pre-include=FILE to compare a helper's other definition); tile, w and op, read by
// the cases): the FJ_CUDA_* variables of the keys given are set, the others unset (library defaults).
std::map<std::string, std::string> parse_setting(const std::string& item) {
    std::map<std::string, std::string> kv;
    std::istringstream fields(item);
    for (std::string f; std::getline(fields, f, ',');) {
        const auto eq = f.find('=');
        if (eq != std::string::npos) kv[f.substr(0, eq)] = f.substr(eq + 1);
    }
    return kv;
}
void apply_setting(const std::map<std::string, std::string>& kv) {
    static const std::map<std::string, const char*> vars = {{"unroll", "FJ_CUDA_UNROLL"},
                                                            {"block", "FJ_CUDA_BLOCK"},
                                                            {"pf", "FJ_CUDA_PREFETCH"},
                                                            {"edges", "FJ_CUDA_EDGES"},
                                                            {"hints", "FJ_CUDA_CACHE_HINTS"},
                                                            {"warm", "FJ_CUDA_WARM_ROWS"}, {"scan", "FJ_CUDA_WINDOW_SCAN"},
                                                            {"ahead", "FJ_CUDA_SCAN_AHEAD"},
                                                            {"chain", "FJ_CUDA_SCAN_CHAIN"}, {"fixed", "FJ_CUDA_FIXED_LD"},
                                                            {"oneloop", "FJ_CUDA_ONE_LOOP"}, {"echo", "FJ_CUDA_ECHO"},
                                                            {"refine", "FJ_CUDA_RSQRT_REFINE"}, {"quiet", "FJ_CUDA_QUIET"},
                                                            {"guard", "FJ_CUDA_GUARD"},
                                                            {"nvrtc", "FJ_NVRTC_OPTIONS"}};
    for (const auto& [key, var] : vars) {
        auto it = kv.find(key);
        setenv_or_unset(var, it == kv.end() ? std::string() : it->second);
    }
}

// An idle pause before each 50,000 x 50,000 measurement, so that one case's heat and power do not carry
// into the next: under back-to-back G1 runs the H200 reaches its 700 W limit within about 50 ms and the
// software power cap (throttle reason 0x4) takes the SM clock from 1,980 to 1,290-1,680 MHz, and G1 from
// 8.6 to 9.2-10.5 ms (2026-12-01, eighth session): the order of the cases then decided their times. After the pause each case is measured from the state a single computation meets; the sustained
// state has its own row (G1s). FJ_BENCH_COOL_MS=N sets the pause (default 2000 ms; 0: none).
void cool_down() {
    static const long ms = [] {
        const char* v = std::getenv("FJ_BENCH_COOL_MS");
        return v ? std::max(0L, std::atol(v)) : 2000L;
    }();
    if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

// The space-separated settings of environment variable `name`, or `fallback` where it is unset;
// FJ_BENCH_VARIANTS=0 keeps only "default" (for the variant lists).
bool only_defaults() {
    const char* v = std::getenv("FJ_BENCH_VARIANTS");
    return v && std::string(v) == "0";
}
std::vector<std::string> settings_from_env(const char* name, std::vector<std::string> fallback) {
    const char* v = std::getenv(name);
    if (!v) return fallback;
    std::vector<std::string> items;
    std::istringstream words(v);
    for (std::string w; words >> w;) items.push_back(w);
    return items;
}

// A setting's own `tile` where it names one, else `fallback`.
std::vector<long long> tiles_of(const std::map<std::string, std::string>& kv, std::vector<long long> fallback) {
    auto it = kv.find("tile");
    return it == kv.end() ? fallback : std::vector<long long>{std::stoll(it->second)};
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

// The launch line of explain() ("grid ... tile(s) of ... rows") and the kernel line's registers.
std::string launch_summary(const fj::Program& p) {
    const std::string e = p.explain();
    std::string regs, launch;
    auto k = e.find("  kernel fj_");
    if (k != std::string::npos) {
        auto r = e.find(" registers", k);
        auto c = e.rfind(", ", r);
        if (r != std::string::npos && c != std::string::npos) regs = e.substr(c + 2, r - c - 2) + " regs";
    }
    auto l = e.find("last launch: ");
    if (l != std::string::npos) launch = first_line(e.substr(l + 13));
    auto f = e.find("specialised on leading dimensions");
    if (f != std::string::npos) {  // the kernel that ran: "... ms), 88 registers, block 512 (1 per SM)[, loads staged ...]"
        const std::string line = first_line(e.substr(f));
        auto r = line.find(" registers"), c = line.rfind(", ", r);
        if (r != std::string::npos && c != std::string::npos)
            regs = "fixed-ld kernel " + line.substr(c + 2, r - c - 2) + " regs" + line.substr(r + 10);
    }
    return regs + ", " + launch;
}

// Fixed pieces of single-threaded host work, timed: the host's speed at that moment, for arithmetic and
// for memory. On the device machine the same cold compiles took 65 ms in one process and 100-160 ms in
// another (2026-12-01, eighth session), CPU time equal to wall time, while an integer loop timed the same
// (44-48 ms) throughout; J1 prints both references next to its compiles, to tell a slow compile from a
// slow host (a compiler's work is mostly cache misses; the machine is a VM that shares its host's caches
// and memory).
struct HostReference {
    double int_ms, mem_ms;
};
HostReference host_reference() {
    HostReference r{};
    auto t0 = Clock::now();
    std::uint64_t x = 0x9E3779B97F4A7C15ULL, acc = 0;
    for (int i = 0; i < 20000000; ++i) {  // xorshift64: a dependent chain the compiler cannot fold
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        acc += x >> 60;
    }
    r.int_ms = ms_since(t0);
    // 500,000 dependent loads through one random cycle over 64 MB (Sattolo's shuffle): a cache miss each.
    static const std::vector<std::uint32_t> next = [] {
        std::vector<std::uint32_t> v(16u << 20);
        for (std::uint32_t i = 0; i < v.size(); ++i) v[i] = i;
        std::uint64_t z = 88172645463325252ULL;
        for (std::size_t i = v.size() - 1; i > 0; --i) {
            z ^= z << 13, z ^= z >> 7, z ^= z << 17;
            std::swap(v[i], v[z % i]);
        }
        return v;
    }();
    t0 = Clock::now();
    std::uint32_t at = 0;
    for (int i = 0; i < 500000; ++i) at = next[at];
    r.mem_ms = ms_since(t0);
    static volatile std::uint64_t sink;
    sink = acc + at;
    return r;
}

// J1: cold NVRTC compiles of five kernels of different shapes, in rounds. Each round's kernels add a
// constant no other round or process uses (the next visit's too: it comes from the clock), so that their
// sources are new: on the device machine NVRTC compiles a source it has compiled before, in this process
// or an earlier one, in 11-25 ms instead of 100-300 (its code generation seems cached with the driver's
// JIT cache; on a machine without a driver repeats cost the same), which made earlier J1 figures depend on
// what had run before. One more round repeats the first round's sources, to show that cache. The process's
// CPU time next to each wall time tells compiler work from waiting.
void j1_case(const std::string& arch) {
    const fj::Expr A = fj::input("A"), B = fj::input("B");
    const std::vector<std::pair<std::string, fj::Expr>> js = {
        {"corr w=20", corr_w(20)},
        {"std w=250", fj::std(fj::window(A, 250))},
        {"mean(std(w5), w10)", fj::mean(fj::window(fj::std(fj::window(A, 5)), 10))},
        {"max(A, w=30)", fj::max(fj::window(A, 30))},
        {"A*B - delay(A,1)", A * B - fj::delay(A, 1)},
    };
    const cu::CudaSettings s = cu::CudaSettings::from_env();
    const char* env_rounds = std::getenv("FJ_BENCH_J1_ROUNDS");
    const int rounds = std::max(1, env_rounds ? std::atoi(env_rounds) : 3);
    auto cpu_ms = [] {
        timespec ts{};
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
        return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
    };
    // A salt per process: microseconds of the clock, small enough not to change the kernels' work.
    const double salt = 1e-9 * static_cast<double>(std::chrono::duration_cast<std::chrono::microseconds>(
                                                       std::chrono::system_clock::now().time_since_epoch()).count() %
                                                   1000000007LL);
    std::vector<double> cold, int_ref, mem_ref;
    std::map<std::string, std::vector<double>> by_kernel;
    std::vector<double> repeat;
    for (int round = 0; round <= rounds; ++round) {
        const HostReference host = host_reference();
        int_ref.push_back(host.int_ms);
        mem_ref.push_back(host.mem_ms);
        const bool again = round == rounds;  // the first round's sources once more
        for (const auto& [name, e] : js) {
            const double c = salt + (again ? 0 : round) * 1e-3;
            const fj::codegen::Plan plan = fj::codegen::make_plan({{"o", e + c}});
            const double c0 = cpu_ms();
            const auto t0 = Clock::now();
            cu::CudaCompiled k = cu::compile_cuda_kernel(plan.steps[0].kernel, fj::DType::F32, arch, true, s);
            const double total = ms_since(t0), cpu = cpu_ms() - c0;
            (again ? repeat : cold).push_back(total);
            if (!again) by_kernel[name].push_back(total);
            std::printf("  J1 %s %-22s emit %.2f ms, NVRTC %.1f ms, total %.1f ms (CPU %.1f ms), %d regs; host references %.1f / %.1f ms\n",
                        again ? "repeat " : fmt::format("round {}", round).c_str(), name.c_str(), k.emit_ms, k.compile_ms,
                        total, cpu, k.registers, host.int_ms, host.mem_ms);
        }
    }
    std::string detail;
    for (const auto& [name, e] : js) detail += fmt::format("{} {:.0f}; ", name, median(by_kernel[name]));
    // Parallel: the five kernels at once (new sources too).
    std::vector<fj::codegen::Plan> plans;
    for (const auto& [name, e] : js) plans.push_back(fj::codegen::make_plan({{"o", e + (salt + 0.5)}}));
    std::vector<const fj::ir::Kernel*> ks;
    for (const auto& p : plans) ks.push_back(&p.steps[0].kernel);
    const auto t0 = Clock::now();
    cu::compile_cuda_kernels(ks, fj::DType::F32, arch, true, s);
    const double par = ms_since(t0);
    g_rows.push_back({"J1", fmt::format("cold compile per kernel (NVRTC, median of 5 x {})", rounds), median(cold), 150.0,
                      fmt::format("new sources; medians {}5 in parallel {:.0f} ms; the same sources again: median {:.0f} ms; "
                                  "host references: integer loop {:.1f}-{:.1f} ms, memory chase {:.1f}-{:.1f} ms",
                                  detail, par, median(repeat), *std::min_element(int_ref.begin(), int_ref.end()),
                                  *std::max_element(int_ref.begin(), int_ref.end()),
                                  *std::min_element(mem_ref.begin(), mem_ref.end()),
                                  *std::max_element(mem_ref.begin(), mem_ref.end())),
                      ""});
}

int j3_child() {
    // Device and driver first: their start-up is not JIT work.
    std::string why;
    if (!fj::rt::cuda_backend(&why)) {
        std::printf("J3 unavailable: %s\n", why.c_str());
        return 1;
    }
    const cu::Device& d = *cu::device();
    cu::make_current(d);
    std::vector<float> a(64 * 32, 1.0f), b(64 * 32, 2.0f), o(64 * 32);
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = 100.0f + static_cast<float>(i % 7), b[i] = static_cast<float>(i % 5);
    fj::CompileOptions opt;
    opt.backend = fj::Backend::Cuda;
    const auto t0 = Clock::now();
    fj::Program p = fj::compile({{"c", corr_w(20)}, {"s", fj::std(fj::window(fj::input("A"), 250))}}, opt);
    const std::map<std::string, fj::Panel> in = {{"A", fj::Panel::host(a.data(), 64, 32)}, {"B", fj::Panel::host(b.data(), 64, 32)}};
    std::vector<float> o2(64 * 32);
    const std::map<std::string, fj::Panel> out = {{"c", fj::Panel::host(o.data(), 64, 32)}, {"s", fj::Panel::host(o2.data(), 64, 32)}};
    p.run(in, out);
    const double first = ms_since(t0);
    std::vector<double> steady;
    for (int i = 0; i < 20; ++i) {
        const auto t1 = Clock::now();
        p.run(in, out);
        steady.push_back(ms_since(t1));
    }
    const std::string e = p.explain();
    const bool from_disk = e.find(": disk") != std::string::npos;
    double prepared = NAN;
    if (auto at = e.find("prepared in "); at != std::string::npos) prepared = std::atof(e.c_str() + at + 12);
    std::printf("J3 %.3f ms (JIT work in prepare; first run %.3f ms, steady run %.3f ms, kernels from %s)\n", prepared,
                first, median(steady), from_disk ? "disk" : "compiler");
    return 0;
}

}  // namespace

// For ncu: corr w=20 on 10,000 x 10,000 float32 (FJ_PROFILE_ROWS, FJ_PROFILE_COLS), three runs.
int profile_child() {
    std::string why;
    if (!fj::rt::cuda_backend(&why)) return 1;
    cu::make_current(*cu::device());
    auto env_or = [](const char* name, long long dflt) {
        const char* v = std::getenv(name);
        return v && *v ? std::atoll(v) : dflt;
    };
    const long long T = env_or("FJ_PROFILE_ROWS", 10000), N = env_or("FJ_PROFILE_COLS", 10000);
    DevBuf a(T * N * 4), b(T * N * 4), out(T * N * 4);
    generate(a.p, b.p, T, N, 3);
    fj::CompileOptions o;
    o.backend = fj::Backend::Cuda;
    fj::Program p = fj::compile({{"c", corr_w(static_cast<int>(env_or("FJ_PROFILE_W", 20)))}}, o);
    for (int i = 0; i < 3; ++i)
        p.run({{"A", fj::Panel::device(a.p, T, N, N, fj::DType::F32)}, {"B", fj::Panel::device(b.p, T, N, N, fj::DType::F32)}},
              {{"c", fj::Panel::device(out.p, T, N, N, fj::DType::F32)}});
    std::printf("%s", p.explain().c_str());
    return 0;
}


// A1 (issue 21): all 101 alphas compiled as one program and run on device-resident panels: the market of
// bench/alpha_data.py (random walks, log-normal volumes, group ids per stock), made here with the same recipe.
int alphas_on_device(long long T, long long N) {
    const cu::Device& dev = *cu::device();
    cu::make_current(dev);
    const std::size_t elems = static_cast<std::size_t>(T * N), bytes = elems * 4;
    std::mt19937_64 rng(7);
    std::normal_distribution<double> n01;
    std::map<std::string, std::vector<float>> host;
    for (const char* k : {"open", "high", "low", "close", "volume", "vwap", "returns", "cap", "sector", "industry", "subindustry"})
        host[k].resize(elems);
    std::vector<double> price(static_cast<std::size_t>(N), 100.0), shares(static_cast<std::size_t>(N));
    std::vector<float> sector(static_cast<std::size_t>(N)), industry(static_cast<std::size_t>(N)), sub(static_cast<std::size_t>(N));
    for (long long j = 0; j < N; ++j) {
        shares[j] = std::exp(18 + n01(rng));
        sector[j] = static_cast<float>(rng() % 11), industry[j] = static_cast<float>(rng() % 60), sub[j] = static_cast<float>(rng() % 200);
    }
    for (long long t = 0; t < T; ++t)
        for (long long j = 0; j < N; ++j) {
            const std::size_t i = static_cast<std::size_t>(t * N + j);
            const double r = 0.02 * n01(rng);
            price[j] *= std::exp(r);
            const double c = price[j], o = c * (1 + 0.005 * n01(rng));
            const double h = std::max(o, c) * (1 + 0.01 * std::fabs(n01(rng))), l = std::min(o, c) * (1 - 0.01 * std::fabs(n01(rng)));
            host["open"][i] = static_cast<float>(o), host["high"][i] = static_cast<float>(h), host["low"][i] = static_cast<float>(l);
            host["close"][i] = static_cast<float>(c), host["volume"][i] = static_cast<float>(std::exp(13 + n01(rng)));
            host["vwap"][i] = static_cast<float>((h + l + c) / 3), host["returns"][i] = static_cast<float>(r);
            host["cap"][i] = static_cast<float>(c * shares[j]);
            host["sector"][i] = sector[j], host["industry"][i] = industry[j], host["subindustry"][i] = sub[j];
        }
    std::vector<std::pair<std::string, fj::Expr>> outputs;
    for (const fj::alpha101::Alpha& a : fj::alpha101::all()) outputs.emplace_back(std::string(a.name), fj::parse(std::string(a.formula)));
    fj::CompileOptions cuda;
    cuda.backend = fj::Backend::Cuda;
    auto t0 = Clock::now();
    const fj::Program p = fj::compile(outputs, cuda);
    std::map<std::string, std::unique_ptr<DevBuf>> bufs;
    std::map<std::string, fj::Panel> in, out;
    for (const std::string& name : p.input_names()) {
        bufs[name] = std::make_unique<DevBuf>(bytes);
        FJ_CU(cuMemcpyHtoD, bufs[name]->p, host.at(name).data(), bytes);
        in[name] = fj::Panel::device(bufs[name]->p, T, N, N, fj::DType::F32);
    }
    for (const std::string& name : p.output_names()) {
        bufs[name] = std::make_unique<DevBuf>(bytes);
        out[name] = fj::Panel::device(bufs[name]->p, T, N, N, fj::DType::F32);
    }
    p.run(in, out);  // the first run: kernels specialised on the panels' leading dimensions (compiled, or from the disk cache)
    const double first_ms = ms_since(t0);
    std::vector<double> ms;
    for (int i = 0; i < 5; ++i) {
        Events ev;
        ev.start();
        p.run(in, out);
        ms.push_back(ev.stop_ms());
    }
    std::printf("A1 101 alphas, %lld x %lld float32 on the device: compile + first run %.0f ms; warm runs %.1f %.1f %.1f %.1f %.1f "
                "ms, median %.1f ms  [smi %s]\n",
                T, N, first_ms, ms[0], ms[1], ms[2], ms[3], ms[4], median(ms), smi_once().c_str());
    return 0;
}

// H1 (issue 22): Program::run on ordinary host panels (std::vector, pageable), copy in, compute and copy out through
// the CUDA backend's chunk pipeline, timed on the host clock.
int host_to_host(long long T, long long N) {
    const cu::Device& dev = *cu::device();
    cu::make_current(dev);
    const std::size_t elems = static_cast<std::size_t>(T * N), bytes = elems * 4;
    std::vector<float> a(elems), b(elems), out(elems);
    {
        DevBuf da(bytes), db(bytes);
        generate(da.p, db.p, T, N, 7);
        FJ_CU(cuMemcpyDtoH, a.data(), da.p, bytes);
        FJ_CU(cuMemcpyDtoH, b.data(), db.p, bytes);
    }
    std::memset(out.data(), 0, bytes);  // (pages touched, as a caller's array would be)
    fj::CompileOptions cuda;
    cuda.backend = fj::Backend::Cuda;
    const fj::Program p = fj::compile({{"c", corr_w(20)}}, cuda);
    const std::map<std::string, fj::Panel> in = {{"A", fj::Panel::host(a.data(), T, N)}, {"B", fj::Panel::host(b.data(), T, N)}};
    const std::map<std::string, fj::Panel> outs = {{"c", fj::Panel::host(out.data(), T, N)}};
    fj::RunOptions ro;
    fj::RunProgress last;
    ro.progress = [&](const fj::RunProgress& pr) { last = pr; };
    std::vector<double> ms;
    for (int i = 0; i < 4; ++i) {
        const auto t0 = Clock::now();
        p.run(in, outs, ro);
        ms.push_back(ms_since(t0));
        std::printf("H1 run %d: %.1f ms (%lld chunks, %.1f GB in, %.1f GB out)  [smi %s]\n", i + 1, ms.back(),
                    static_cast<long long>(last.chunks_total), last.bytes_in / 1e9, last.bytes_out / 1e9, smi_once().c_str());
    }
    // A spot check of the result against a float64 two-pass reference at a few cells.
    double worst = 0;
    for (long long k = 0; k < 64; ++k) {
        const long long t = 19 + (k * 7919) % (T - 19), j = (k * 104729) % N;
        double ma = 0, mb = 0;
        for (long long r = t - 19; r <= t; ++r) ma += a[r * N + j], mb += b[r * N + j];
        ma /= 20, mb /= 20;
        double sab = 0, saa = 0, sbb = 0;
        for (long long r = t - 19; r <= t; ++r) {
            const double x = a[r * N + j] - ma, y = b[r * N + j] - mb;
            sab += x * y, saa += x * x, sbb += y * y;
        }
        worst = std::max(worst, std::fabs(out[t * N + j] - sab / std::sqrt(saa * sbb)));
    }
    const double first = ms.front();
    ms.erase(ms.begin());
    const double floor_ms = 2.0 * static_cast<double>(bytes) / 55e9 * 1e3;  // 2 panels in, 1 out: in and out overlap
    std::printf("H1 %lld x %lld float32 host to host, pageable: first %.1f ms, warm median %.1f ms; PCIe floor %.1f ms "
                "(%.2f x); worst |error| at 64 cells %.2e\n",
                T, N, first, median(ms), floor_ms, median(ms) / floor_ms, worst);
    // The same panels in page-locked memory (as the talk's demo 3 had them): copied by DMA without staging.
    void *pa = nullptr, *pb = nullptr, *pout = nullptr;
    FJ_CU(cuMemHostAlloc, &pa, bytes, 0u);
    FJ_CU(cuMemHostAlloc, &pb, bytes, 0u);
    FJ_CU(cuMemHostAlloc, &pout, bytes, 0u);
    std::memcpy(pa, a.data(), bytes);
    std::memcpy(pb, b.data(), bytes);
    const std::map<std::string, fj::Panel> pin = {{"A", fj::Panel::host(static_cast<const float*>(pa), T, N)},
                                                  {"B", fj::Panel::host(static_cast<const float*>(pb), T, N)}};
    const std::map<std::string, fj::Panel> pouts = {{"c", fj::Panel::host(static_cast<const float*>(pout), T, N)}};
    std::vector<double> pms;
    for (int i = 0; i < 3; ++i) {
        const auto t0 = Clock::now();
        p.run(pin, pouts, ro);
        pms.push_back(ms_since(t0));
    }
    const bool same = std::memcmp(pout, out.data(), bytes) == 0;
    std::printf("H1 %lld x %lld float32 host to host, page-locked: runs %.1f %.1f %.1f ms, median %.1f ms (%.2f x the "
                "floor); results %s the pageable run's\n",
                T, N, pms[0], pms[1], pms[2], median(pms), median(pms) / floor_ms, same ? "bitwise equal to" : "DIFFER from");
    cu::driver_api().cuMemFreeHost(pa);
    cu::driver_api().cuMemFreeHost(pb);
    cu::driver_api().cuMemFreeHost(pout);
    return worst < 1e-4 && same ? 0 : 1;
}

int main(int argc, char** argv) {
    const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
    if (argc > 1 && std::string(argv[1]) == "--j3") return j3_child();
    if (argc > 1 && std::string(argv[1]) == "--profile") return profile_child();
    const bool j1_only = argc > 1 && std::string(argv[1]) == "--j1";
    if (argc > 1 && (std::string(argv[1]) == "--host" || std::string(argv[1]) == "--a1")) {
        try {
            std::string why;
            if (!fj::rt::cuda_backend(&why)) {
                std::printf("bench_gpu: no CUDA backend: %s\n", why.c_str());
                return 1;
            }
            if (std::string(argv[1]) == "--a1") return alphas_on_device(argc > 3 ? std::atoll(argv[2]) : 4000, argc > 3 ? std::atoll(argv[3]) : 5000);
            return host_to_host(argc > 3 ? std::atoll(argv[2]) : 50000, argc > 3 ? std::atoll(argv[3]) : 50000);
        } catch (const std::exception& e) {
            std::printf("bench_gpu %s: %s\n", argv[1], e.what());
            return 1;
        }
    }
    try {
        std::string why;
        if (!fj::rt::cuda_backend(&why)) {
            std::printf("bench_gpu: no CUDA backend: %s\n", why.c_str());
            return 1;
        }
        const cu::Device& dev = *cu::device();
        cu::make_current(dev);
        std::printf("device: %s, %s, %d SMs, %.1f GiB, driver %d, NVRTC %d, cache %s\n", dev.name.c_str(),
                    dev.arch().c_str(), dev.sm_count, dev.total_mem / 1073741824.0, dev.driver_version,
                    cu::nvrtc_api().version, std::getenv("FJ_CACHE_DIR") ? std::getenv("FJ_CACHE_DIR") : "(default)");
        std::printf("idle: %s; limits: %s\n", smi_once().c_str(),
                    smi_query("power.limit,enforced.power.limit,power.max_limit,clocks.max.sm").c_str());
        if (j1_only) {  // (J1 alone: bench_gpu --j1)
            j1_case(dev.arch());
            print_row(g_rows.back());
            return 0;
        }
        fj::CompileOptions cuda;
        cuda.backend = fj::Backend::Cuda;

        // ---------------- G1 / G4: 50,000 x 50,000 float32 on the device ----------------
        const long long T = quick ? 20000 : 50000, N = quick ? 20000 : 50000;
        const std::size_t bytes = static_cast<std::size_t>(T * N) * 4;
        double bw = 0;
        {
            DevBuf a(bytes), b(bytes), out(bytes);
            auto t0 = Clock::now();
            generate(a.p, b.p, T, N, 1);
            std::printf("data %lld x %lld float32 generated in %.0f ms\n", T, N, ms_since(t0));
            std::string smi;
            bw = copy_bandwidth(out.p, a.p, bytes, &smi);
            const double floor = 3.0 * static_cast<double>(bytes) / bw * 1e3;
            std::printf("copy bandwidth %.3f TB/s (DtoD %.1f GB, read+write) -> G1 floor %.3f ms  [smi %s]\n", bw / 1e12,
                        bytes / 1e9, floor, smi.c_str());
            const std::map<std::string, fj::Panel> in = {{"A", fj::Panel::device(a.p, T, N, N, fj::DType::F32)},
                                                         {"B", fj::Panel::device(b.p, T, N, N, fj::DType::F32)}};
            const std::map<std::string, fj::Panel> outs = {{"c", fj::Panel::device(out.p, T, N, N, fj::DType::F32)}};

            // Variant sweep on the headline case. "default" (the library's defaults, measured first while
            // the GPU is cool) is the G1 row; the others and the tile lengths below are for tuning.
            // (Staged loads and two batches per iteration measured slower on 2026-11-29, 12.5 and 9.56 against
            // 8.86 ms, and were deleted: bench/RESULTS.md.)
            const std::vector<std::string> variants =
                only_defaults() ? std::vector<std::string>{"default"}
                                : settings_from_env("FJ_BENCH_G1_VARIANTS", {"default", "echo=0", "edges=0"});
            double g1 = 1e30;
            for (const std::string& v : variants) {
                apply_setting(parse_setting(v));
                fj::Program p = fj::compile({{"c", corr_w(20)}}, cuda);
                const Timing t = time_cool(p, in, outs);
                std::printf("  G1 variant %s: %.3f ms (wall %.3f), x%.2f floor; %s  [smi %s]\n", v.c_str(), t.event_ms,
                            t.wall_ms, t.event_ms / floor, launch_summary(p).c_str(), t.smi.c_str());
                if (v == "default") {
                    const Check c = check_corr(a.p, b.p, out.p, T, N, 20);
                    std::printf("  G1 check vs float64 two-pass (6 columns incl. the last): max |err| %.2e, rel frob %.2e, NaN mismatches %lld\n",
                                c.max_abs, c.rel_frob, c.nan_mismatch);
                    g1 = t.event_ms;
                    g_rows.push_back({"G1", fmt::format("corr w=20, {}x{} f32, device", T, N), t.event_ms, floor,
                                      fmt::format("library defaults; rel err {:.1e}, NaN mismatches {}; {}", c.rel_frob,
                                                  c.nan_mismatch, launch_summary(p)),
                                      t.smi});
                }
            }
            double g1s = 0, floor_s = 0;
            {
                // G1 under sustained load (time_sustained), against the copy floor after as long of copies.
                // First the times of single runs from an idle GPU on, 3 s of them: how soon the power cap
                // lowers the SM clock.
                apply_setting({});
                fj::Program p = fj::compile({{"c", corr_w(20)}}, cuda);
                cool_down();
                Events ev;
                std::vector<double> series;
                const auto t_series = Clock::now();
                while (ms_since(t_series) < 3000) {
                    ev.start();
                    p.run(in, outs);
                    series.push_back(ev.stop_ms());
                }
                std::string at;
                for (std::size_t i : {0, 1, 2, 3, 5, 10, 20, 30, 50, 100, 150, 200, 250, 300})
                    if (i < series.size()) at += fmt::format(" #{} {:.2f}", i, series[i]);
                std::printf("  G1 from idle, single runs back to back (ms):%s; %zu runs in 3 s\n", at.c_str(), series.size());
                const Timing t = time_sustained(p, in, outs);
                g1s = t.event_ms;
                std::string copy_smi;
                const double bw_s = copy_bandwidth(out.p, a.p, bytes, &copy_smi, 2000);
                floor_s = 3.0 * static_cast<double>(bytes) / bw_s * 1e3;
                g_rows.push_back({"G1s", "same, sustained (after 2 s of back-to-back runs)", t.event_ms, floor_s,
                                  fmt::format("floor: copies after 2 s of copies, {:.3f} TB/s [smi {}]; {:.2f} x the cool floor",
                                              bw_s / 1e12, copy_smi, t.event_ms / floor),
                                  t.smi});
                print_row(g_rows.back());
            }
            // Exploratory sweeps (tuning): FJ_BENCH_SWEEP="w=250,unroll=16,block=256,smem=100000,tile=2048 w=20,..."
            // times each setting (FJ_CUDA_* variables and CompileOptions::tile_rows) on this panel.
            for (const std::string& item : settings_from_env("FJ_BENCH_SWEEP", {})) {
                std::map<std::string, std::string> kv = parse_setting(item);
                apply_setting(kv);
                fj::CompileOptions o = cuda;
                o.tile_rows = tiles_of(kv, {0LL}).front();
                const int w = kv.count("w") ? std::stoi(kv["w"]) : 20;
                const auto [expr, reads] = sweep_expr(kv.count("op") ? kv["op"] : "corr", w);
                fj::Program p = fj::compile({{"c", expr}}, o);
                const long long holes = kv.count("holes") ? std::stoll(kv["holes"]) : 0;
                const long long spikes = kv.count("spikes") ? std::stoll(kv["spikes"]) : 0;
                if (holes > 0) generate(a.p, b.p, T, N, 1, holes);
                if (spikes > 0) inject_spikes(a.p, T, N, spikes);
                const Timing t = kv.count("sustained") ? time_sustained(p, in, outs) : time_cool(p, in, outs);
                if (holes > 0 || spikes > 0) generate(a.p, b.p, T, N, 1);  // (the clean panels again)
                const double op_floor = floor * (reads + 1) / 3.0;  // its reads and one write
                std::printf("  sweep %s: %.3f ms, x%.2f its floor (%.3f ms); %s  [smi %s]\n", item.c_str(), t.event_ms,
                            t.event_ms / op_floor, op_floor, launch_summary(p).c_str(), t.smi.c_str());
            }
            apply_setting({});  // G4 and G5 with the library's defaults
            {
                // G4 is a ratio, w=250 against w=20: each state against the same state of G1.
                fj::Program p = fj::compile({{"c", corr_w(250)}}, cuda);
                const Timing t = time_cool(p, in, outs);
                const Check c = check_corr(a.p, b.p, out.p, T, N, 250);
                g_rows.push_back({"G4", fmt::format("corr w=250, {}x{} f32, device", T, N), t.event_ms, floor,
                                  fmt::format("{:.2f} x G1 (target <= 1.3); rel err {:.1e}, NaN mismatches {}; {}",
                                              t.event_ms / g1, c.rel_frob, c.nan_mismatch, launch_summary(p)),
                                  t.smi});
                print_row(g_rows.back());
                const Timing ts = time_sustained(p, in, outs);
                g_rows.push_back({"G4s", "same, sustained", ts.event_ms, floor_s,
                                  fmt::format("{:.2f} x G1s (target <= 1.3)", ts.event_ms / g1s), ts.smi});
                print_row(g_rows.back());
            }
        }

        // ---------------- G5: 5,000 x 4,000 ----------------
        {
            const long long t5 = 5000, n5 = 4000;
            const std::size_t b5 = static_cast<std::size_t>(t5 * n5) * 4;
            DevBuf a(b5), b(b5), out(b5);
            generate(a.p, b.p, t5, n5, 5);
            const double floor = 3.0 * static_cast<double>(b5) / bw * 1e3;
            const std::map<std::string, fj::Panel> in = {{"A", fj::Panel::device(a.p, t5, n5, n5, fj::DType::F32)},
                                                         {"B", fj::Panel::device(b.p, t5, n5, n5, fj::DType::F32)}};
            const std::map<std::string, fj::Panel> outs = {{"c", fj::Panel::device(out.p, t5, n5, n5, fj::DType::F32)}};
            double best = 1e30;
            long long best_tile = 0;
            std::string best_smi, best_launch;
            // The library's defaults (the G5 row), then other settings.
            const std::vector<std::string> g5_settings =
                only_defaults() ? std::vector<std::string>{"default"}
                                : settings_from_env("FJ_BENCH_G5_SETTINGS", {"default", "echo=0", "edges=0"});
            for (const std::string& u : g5_settings) {
                const std::map<std::string, std::string> kv = parse_setting(u);
                for (long long tile : tiles_of(kv, {0LL, 160LL})) {
                    apply_setting(kv);
                    fj::CompileOptions o = cuda;
                    o.tile_rows = tile;
                    fj::Program p = fj::compile({{"c", corr_w(20)}}, o);
                    cool_down();
                    const Timing t = time_run(p, in, outs, 21, 3);
                    std::printf("  G5 %s tile_rows=%lld: %.4f ms (wall %.4f), %.0f%% of copy bandwidth; %s\n", u.c_str(), tile, t.event_ms, t.wall_ms, 100.0 * floor / t.event_ms,
                                launch_summary(p).c_str());
                    if (tile == 0 && u == "default") {
                        const Check c = check_corr(a.p, b.p, out.p, t5, n5, 20);
                        g_rows.push_back({"G5", "corr w=20, 5000x4000 f32, device, auto tiles", t.event_ms, floor,
                                          fmt::format("{:.0f}% of copy bw (target >= 60%); rel err {:.1e}, NaN mism. {}",
                                                      100.0 * floor / t.event_ms, c.rel_frob, c.nan_mismatch),
                                          t.smi});
                    }
                    if (t.event_ms < best)
                        best = t.event_ms, best_tile = tile, best_smi = t.smi,
                        best_launch = u + ", " + launch_summary(p);
                }
            }
            apply_setting({});
            g_rows.push_back({"G5*", fmt::format("same, best of settings x tile_rows (tile {})", best_tile), best, floor,
                              fmt::format("{:.0f}% of copy bw; {}", 100.0 * floor / best, best_launch), best_smi});
        }

        // ---------------- J1: cold compile per kernel (default settings from here on) ----------------
        apply_setting({});
        j1_case(dev.arch());

        // ---------------- J2: host overhead of a cached run ----------------
        {
            const long long t2 = 1, n2 = 32;
            const std::size_t b2 = static_cast<std::size_t>(t2 * n2) * 4;
            DevBuf a(b2), b(b2), out(b2);
            generate(a.p, b.p, t2, n2, 7);
            const std::map<std::string, fj::Panel> in = {{"A", fj::Panel::device(a.p, t2, n2, n2, fj::DType::F32)},
                                                         {"B", fj::Panel::device(b.p, t2, n2, n2, fj::DType::F32)}};
            const std::map<std::string, fj::Panel> outs = {{"c", fj::Panel::device(out.p, t2, n2, n2, fj::DType::F32)}};
            fj::Program p = fj::compile({{"c", corr_w(20)}}, cuda);
            for (int i = 0; i < 50; ++i) p.run(in, outs);
            std::vector<double> wall;
            for (int i = 0; i < 2000; ++i) {
                const auto t0 = Clock::now();
                p.run(in, outs);
                wall.push_back(ms_since(t0) * 1e3);
            }
            // The bare cost of a launch + synchronize of an empty-ish kernel, for comparison.
            Events ev;
            std::vector<double> gpu;
            for (int i = 0; i < 200; ++i) {
                ev.start();
                p.run(in, outs);
                gpu.push_back(ev.stop_ms() * 1e3);
            }
            const double bare = bare_launch_us();
            g_rows.push_back({"J2", "host overhead of a cached run() (1x32 device panels)", median(wall) - bare, 20.0,
                              fmt::format("run() wall {:.1f} us minus an empty kernel's launch + sync {:.1f} us; "
                                          "events around run {:.1f} us",
                                          median(wall), bare, median(gpu)),
                              "", "us"});
        }

        // ---------------- J3: new process, warm disk cache ----------------
        {
            const std::string dir = std::string("/tmp/fj_j3_cache_") + std::to_string(::getpid());
            const std::string cmd = std::string("FJ_CACHE_DIR=") + dir + " " + argv[0] + " --j3";
            std::string cold, warm;
            for (int k = 0; k < 3; ++k) {
                FILE* f = popen(cmd.c_str(), "r");
                char buf[512] = {};
                std::string line;
                while (f && std::fgets(buf, sizeof buf, f)) line += buf;
                if (f) pclose(f);
                std::printf("  J3 process %d: %s", k, line.c_str());
                (k == 0 ? cold : warm) = first_line(line);
            }
            double j3 = NAN;
            std::sscanf(warm.c_str(), "J3 %lf", &j3);
            g_rows.push_back({"J3", "new process, warm disk cache: JIT ms before 1st launch", j3, 5.0,
                              "a program of corr w20 + std w250 (one kernel); cold process: " + cold, ""});
            std::string rm = "rm -rf " + dir;
            if (std::system(rm.c_str()) != 0) std::printf("  (could not remove %s)\n", dir.c_str());
        }

        std::printf("\nSUMMARY (floor: copy-bandwidth floor for G*, target for J*)\n");
        for (const Row& r : g_rows) print_row(r);
        return 0;
    } catch (const std::exception& e) {
        std::printf("bench_gpu failed: %s\n", e.what());
        for (const Row& r : g_rows) print_row(r);
        return 1;
    }
}

#else
int main() {
    std::puts("bench_gpu: this build has no CUDA backend");
    return 1;
}
#endif
