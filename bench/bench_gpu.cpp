// GPU benchmarks of TARGETS.md: G1, G4, G5, J1, J2, J3 (run by bench/gpu_run.sh on the GPU machine).
//
//   bench_gpu [--quick]        all cases, a table last ("--quick": smaller G1/G4 panels)
//   bench_gpu --j1             J1 alone (cold compiles)
//   bench_gpu --j3             internal: one cold-or-warm process for J3 (prints "J3 ms")
//   bench_gpu --a1 [T N]       A1: the 101 alphas as one program on device panels, 4,000 x 5,000 by default (the
//                              market of bench/alpha_data.py, made here): compile, first run, warm runs (events);
//                              with FJ_PROFILE=1 the steps' breakdown
//   bench_gpu --host [T N]     issue 22's host-to-host figures for corr w=20 on T x N float32 host panels (by
//                              default 50,000 x 50,000, then the talk's 50,000 x 10,000), each line starting with
//                              its id: H1 (the PCIe floor with both directions at once and the host staging floor,
//                              both measured in this run; the talk's demo 3 on the same page-locked panels), G2b
//                              (pageable: first run and warm), G2a (page-locked), G2r (caller memory registered by
//                              fj::register_host), G3a/G3b (max_device_bytes = 8 GiB); then J2 (host time of a
//                              cached run_async on small device panels). Time, x floor, target, met/MISSED.
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
#include "runtime/host_registration.hpp"
#include "runtime/thread_pool.hpp"
#include "runtime/cuda/cuda_api.hpp"
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

// Small device panels A, B (generate()'s prices) and an output c, T x N float32, for the host-overhead figures (J2).
struct SmallCorrPanels {
    DevBuf a, b, out;
    std::map<std::string, fj::Panel> in, outs;
    SmallCorrPanels(long long T, long long N, int seed)
        : a(static_cast<std::size_t>(T * N) * 4), b(a.bytes), out(a.bytes) {
        generate(a.p, b.p, T, N, seed);
        in = {{"A", fj::Panel::device(a.p, T, N, N, fj::DType::F32)}, {"B", fj::Panel::device(b.p, T, N, N, fj::DType::F32)}};
        outs = {{"c", fj::Panel::device(out.p, T, N, N, fj::DType::F32)}};
    }
};

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

// ---- --host: issue 22's host-to-host figures (H1 floors, the talk's demo 3, G2a, G2b, G2r, G3) and J2 ----------
//
// Every figure of issue 22 that needs the GPU, in one process, so that floors and peers are measured in the same
// run as the figures they judge. Lines start with their figure's id (H1, G2a, G2b, G2r, G3a, G3b, J2) and give the
// time, the multiple of its floor and the figure's target.

// Page-locked host memory (cuMemHostAlloc) for the life of the object.
struct PinnedBuf {
    void* p = nullptr;
    explicit PinnedBuf(std::size_t n) { FJ_CU(cuMemHostAlloc, &p, n, 0u); }
    ~PinnedBuf() { cu::driver_api().cuMemFreeHost(p); }
    PinnedBuf(const PinnedBuf&) = delete;
    PinnedBuf& operator=(const PinnedBuf&) = delete;
    float* f() const { return static_cast<float*>(p); }
};

struct Stream {
    cu::CUstream s = nullptr;
    Stream() { FJ_CU(cuStreamCreate, &s, 0u); }
    ~Stream() { cu::driver_api().cuStreamDestroy(s); }
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
};

// The PCIe floor of a host-to-host run: 2 panels of `bytes` in and 1 out with both directions at once, from and
// to page-locked memory. Measured on a piece of `piece` bytes in the same proportions (two copies in on one stream,
// one out on another, started together), median of 5, scaled to the panel.
struct PcieFloor {
    double ms = 0, in_gbs = 0, out_gbs = 0;
};
PcieFloor pcie_floor(std::size_t bytes) {
    const std::size_t piece = std::min<std::size_t>(bytes, std::size_t{1} << 30);
    PinnedBuf h_in(2 * piece), h_out(piece);
    std::memset(h_in.p, 1, 2 * piece);
    std::memset(h_out.p, 1, piece);
    DevBuf d_in(2 * piece), d_out(piece);
    Stream in, out;
    std::vector<double> all, t_in, t_out;
    for (int r = 0; r < 6; ++r) {
        FJ_CU(cuCtxSynchronize);
        const auto t0 = Clock::now();
        FJ_CU(cuMemcpyHtoDAsync, d_in.p, h_in.p, piece, in.s);
        FJ_CU(cuMemcpyHtoDAsync, d_in.p + piece, static_cast<char*>(h_in.p) + piece, piece, in.s);
        FJ_CU(cuMemcpyDtoHAsync, h_out.p, d_out.p, piece, out.s);
        FJ_CU(cuStreamSynchronize, out.s);
        const double o = ms_since(t0);
        FJ_CU(cuStreamSynchronize, in.s);
        const double i = ms_since(t0);
        if (r == 0) continue;  // warm-up
        t_in.push_back(i), t_out.push_back(o), all.push_back(std::max(i, o));
    }
    PcieFloor f;
    f.ms = median(all) * static_cast<double>(bytes) / static_cast<double>(piece);
    f.in_gbs = 2.0 * static_cast<double>(piece) / (median(t_in) * 1e6);
    f.out_gbs = static_cast<double>(piece) / (median(t_out) * 1e6);
    return f;
}

// The host staging floor: the CUDA pipeline stages pageable panels through pinned buffers with memcpy on the
// threads of the library's shared pool, in blocks of about 4 MB (runtime/cuda/host_pipeline.cpp). The same copies
// here, on the same pool: the caller's input rows into a 256 MB pinned buffer (4 passes over different rows), and
// from it into the caller's output rows. Staging moves 2 panels in and 1 out: 2 x bytes / in rate + bytes / out rate.
struct StagingFloor {
    double ms = 0, in_gbs = 0, out_gbs = 0;
    int threads = 0;
};
StagingFloor staging_floor(const float* src, float* dst, std::size_t bytes) {
    const std::size_t slot = std::min<std::size_t>(bytes / 4, std::size_t{256} << 20);
    PinnedBuf pinned(slot);
    std::memset(pinned.p, 0, slot);
    fj::rt::ThreadPool& pool = fj::rt::ThreadPool::shared(fj::rt::thread_count(0));
    const std::size_t block = std::size_t{4} << 20;
    auto copy = [&](char* to, const char* from) {
        const std::int64_t tasks = static_cast<std::int64_t>((slot + block - 1) / block);
        pool.parallel_for(tasks, [&](std::int64_t t, int) {
            const std::size_t at = static_cast<std::size_t>(t) * block, n = std::min(block, slot - at);
            std::memcpy(to + at, from + at, n);
        });
    };
    auto rate = [&](bool in) {
        std::vector<double> gbs;
        for (int pass = 0; pass < 5; ++pass) {  // pass 0 warms the pool and the pages
            char* panel = const_cast<char*>(reinterpret_cast<const char*>(in ? src : dst)) + static_cast<std::size_t>(pass % 4) * slot;
            const auto t0 = Clock::now();
            in ? copy(static_cast<char*>(pinned.p), panel) : copy(panel, static_cast<char*>(pinned.p));
            if (pass > 0) gbs.push_back(static_cast<double>(slot) / (ms_since(t0) * 1e6));
        }
        return median(gbs);
    };
    StagingFloor f;
    f.threads = pool.size();
    f.in_gbs = rate(true);
    f.out_gbs = rate(false);
    f.ms = (2.0 * static_cast<double>(bytes) / f.in_gbs + static_cast<double>(bytes) / f.out_gbs) / 1e6;
    return f;
}

// The talk's demo 3 as its peer writes it (/work/shared/peers/rolling_corr_peers.py): one thread per output,
// each re-reading its window, launched over five streams, each stream copying its slice of rows (with the w - 1
// rows before it) in from page-locked memory, computing and copying its rows out. Device buffers are allocated
// before the timed runs (the peer takes them from CuPy's pool).
const char* kDemo3Source = R"(
extern "C" __global__ void corr_naive(const float* a, const float* b, float* out, int T, int N, int w) {
    int j = blockIdx.x * blockDim.x + threadIdx.x; int t = blockIdx.y * blockDim.y + threadIdx.y;
    if (j >= N || t >= T) return;
    if (t < w - 1) { out[(size_t)t*N+j] = __int_as_float(0x7fc00000); return; }
    float sa = 0, sb = 0;
    for (int k = t - w + 1; k <= t; ++k) { sa += a[(size_t)k*N+j]; sb += b[(size_t)k*N+j]; }
    float ma = sa / w, mb = sb / w, sab = 0, saa = 0, sbb = 0;
    for (int k = t - w + 1; k <= t; ++k) { float da = a[(size_t)k*N+j]-ma, db = b[(size_t)k*N+j]-mb; sab += da*db; saa += da*da; sbb += db*db; }
    out[(size_t)t*N+j] = sab / sqrtf(saa * sbb);
}
)";

class TalkDemo3 {
public:
    static constexpr int kStreams = 5;
    TalkDemo3(long long T, long long N, int w) : T_(T), N_(N), w_(w) {
        const cu::Device& d = *cu::device();
        cu::NvrtcOutput o = cu::nvrtc_compile(kDemo3Source, "corr_naive", fj::codegen::cuda_compile_options(d.arch(), false),
                                              true, "");
        FJ_CU(cuModuleLoadData, &module_, o.image.data());
        FJ_CU(cuModuleGetFunction, &fn_, module_, "corr_naive");
        for (int s = 0; s < kStreams; ++s) {
            const long long lo = T * s / kStreams, hi = T * (s + 1) / kStreams, lo_h = std::max(0LL, lo - (w - 1));
            slices_.push_back({lo, hi, lo_h});
            const std::size_t b = static_cast<std::size_t>((hi - lo_h) * N) * 4;
            bufs_.push_back(std::make_unique<DevBuf>(b));
            bufs_.push_back(std::make_unique<DevBuf>(b));
            bufs_.push_back(std::make_unique<DevBuf>(b));
            streams_.push_back(std::make_unique<Stream>());
        }
    }
    ~TalkDemo3() { cu::driver_api().cuModuleUnload(module_); }

    // One host-to-host run over page-locked a, b, out (T x N); returns its wall time in ms.
    double run(const float* a, const float* b, float* out) {
        const auto t0 = Clock::now();
        for (int s = 0; s < kStreams; ++s) {
            const auto [lo, hi, lo_h] = slices_[static_cast<std::size_t>(s)];
            cu::CUstream st = streams_[static_cast<std::size_t>(s)]->s;
            cu::CUdeviceptr da = bufs_[3 * s]->p, db = bufs_[3 * s + 1]->p, dout = bufs_[3 * s + 2]->p;
            const std::size_t bytes = static_cast<std::size_t>((hi - lo_h) * N_) * 4;
            FJ_CU(cuMemcpyHtoDAsync, da, a + lo_h * N_, bytes, st);
            FJ_CU(cuMemcpyHtoDAsync, db, b + lo_h * N_, bytes, st);
            int rows = static_cast<int>(hi - lo_h), cols = static_cast<int>(N_), w = w_;
            void* args[] = {&da, &db, &dout, &rows, &cols, &w};
            FJ_CU(cuLaunchKernel, fn_, static_cast<unsigned>((N_ + 31) / 32), static_cast<unsigned>((rows + 7) / 8), 1u, 32u, 8u,
                  1u, 0u, st, args, nullptr);
            FJ_CU(cuMemcpyDtoHAsync, out + lo * N_, dout + static_cast<cu::CUdeviceptr>((lo - lo_h) * N_ * 4),
                  static_cast<std::size_t>((hi - lo) * N_) * 4, st);
        }
        for (auto& st : streams_) FJ_CU(cuStreamSynchronize, st->s);
        return ms_since(t0);
    }

private:
    struct Slice {
        long long lo, hi, lo_h;
    };
    long long T_, N_;
    int w_;
    cu::CUmodule module_ = nullptr;
    cu::CUfunction fn_ = nullptr;
    std::vector<Slice> slices_;
    std::vector<std::unique_ptr<DevBuf>> bufs_;
    std::vector<std::unique_ptr<Stream>> streams_;
};

// The largest |error| of corr w=20 at 64 cells spread over the panel against a float64 two-pass reference.
double spot_check(const float* a, const float* b, const float* out, long long T, long long N) {
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
        const double e = std::fabs(out[t * N + j] - sab / std::sqrt(saa * sbb));
        worst = std::isnan(e) ? INFINITY : std::max(worst, e);
    }
    return worst;
}

// The largest |x - y| / max(1, |y|) over two panels of `elems` floats; infinity where one is NaN and the other not.
double largest_gap(const float* x, const float* y, std::size_t elems) {
    fj::rt::ThreadPool& pool = fj::rt::ThreadPool::shared(fj::rt::thread_count(0));
    const std::size_t block = std::size_t{1} << 22;
    const std::int64_t tasks = static_cast<std::int64_t>((elems + block - 1) / block);
    std::vector<double> per_task(static_cast<std::size_t>(tasks), 0.0);
    pool.parallel_for(tasks, [&](std::int64_t t, int) {
        double g = 0;
        const std::size_t i0 = static_cast<std::size_t>(t) * block, i1 = std::min(elems, i0 + block);
        for (std::size_t i = i0; i < i1; ++i) {
            if (std::isnan(x[i]) != std::isnan(y[i])) {
                g = INFINITY;
                break;
            }
            if (!std::isnan(y[i])) g = std::max(g, std::fabs(static_cast<double>(x[i]) - y[i]) / std::max(1.0, std::fabs(static_cast<double>(y[i]))));
        }
        per_task[static_cast<std::size_t>(t)] = g;
    });
    return *std::max_element(per_task.begin(), per_task.end());
}

// NaN in every cell, so that an output a run did not write cannot pass for one it did.
void poison(float* p, std::size_t elems) { std::memset(p, 0xff, elems * 4); }

std::string gb(double bytes) { return fmt::format("{:.1f} GB", bytes / 1e9); }

// One figure's line: "ID  what: time, x floor (floor ms); target ...: met/MISSED; detail".
void figure(const char* id, const std::string& what, double ms, double floor_ms, double target_x, const std::string& floor_what,
            const std::string& more) {
    std::printf("%-3s %s: %.1f ms, %.2f x %s (%.1f ms); target <= %.2f x: %s%s%s\n", id, what.c_str(), ms, ms / floor_ms,
                floor_what.c_str(), floor_ms, target_x, ms <= target_x * floor_ms ? "met" : "MISSED", more.empty() ? "" : "; ",
                more.c_str());
    std::fflush(stdout);
}

// Times p.run over in -> out: `first` (one run, reported alone) and the median of `reps` warm runs after it.
struct RunTimes {
    double first = NAN, warm = NAN;
    std::string runs;
    fj::RunProgress last;
};
RunTimes time_host_runs(const fj::Program& p, const std::map<std::string, fj::Panel>& in,
                        const std::map<std::string, fj::Panel>& out, fj::RunOptions ro, int reps) {
    RunTimes r;
    ro.progress = [&](const fj::RunProgress& pr) { r.last = pr; };
    std::vector<double> ms;
    for (int i = 0; i <= reps; ++i) {
        const auto t0 = Clock::now();
        p.run(in, out, ro);
        ms.push_back(ms_since(t0));
        r.runs += fmt::format("{}{:.1f}", i ? " " : "", ms.back());
    }
    r.first = ms.front();
    ms.erase(ms.begin());
    r.warm = median(ms);
    return r;
}

std::string chunks_of(const RunTimes& r) {
    return fmt::format("{} chunks, {} in, {} out", r.last.chunks_total, gb(static_cast<double>(r.last.bytes_in)),
                       gb(static_cast<double>(r.last.bytes_out)));
}

// H1 floors, demo 3, G2a, G2b, G2r and G3 for corr w=20 on T x N float32 host panels. Returns whether every
// result checked out (spot checks within 1e-4, every mode bitwise equal to the pageable run).
bool host_figures(long long T, long long N) {
    const std::size_t elems = static_cast<std::size_t>(T * N), bytes = elems * 4;
    const std::string size = fmt::format("{}x{} f32", T, N);
    std::printf("== host to host, corr w=20, %lld x %lld float32 (%s a panel): 2 panels in, 1 out  [smi %s]\n", T, N,
                gb(static_cast<double>(bytes)).c_str(), smi_once().c_str());
    // The caller's ordinary memory (pageable, pages touched as a caller's arrays would be).
    std::vector<float> a(elems), b(elems), out(elems), out2(elems);
    {
        DevBuf da(bytes), db(bytes);
        generate(da.p, db.p, T, N, 7);
        FJ_CU(cuMemcpyDtoH, a.data(), da.p, bytes);
        FJ_CU(cuMemcpyDtoH, b.data(), db.p, bytes);
    }
    poison(out.data(), elems);
    poison(out2.data(), elems);

    const PcieFloor pcie = pcie_floor(bytes);
    std::printf("H1  PCIe floor, both directions at once (page-locked, measured now): %.1f ms for 2 x %s in and %s out "
                "(%.1f GB/s in, %.1f GB/s out at once)\n",
                pcie.ms, gb(static_cast<double>(bytes)).c_str(), gb(static_cast<double>(bytes)).c_str(), pcie.in_gbs, pcie.out_gbs);
    const StagingFloor staging = staging_floor(a.data(), out.data(), bytes);
    poison(out.data(), elems);
    std::printf("H1  host staging floor (memcpy pageable <-> pinned on the pipeline's %d pool threads, measured now): %.1f ms "
                "for 2 x %s staged in at %.1f GB/s and %s out at %.1f GB/s\n",
                staging.threads, staging.ms, gb(static_cast<double>(bytes)).c_str(), staging.in_gbs,
                gb(static_cast<double>(bytes)).c_str(), staging.out_gbs);
    const double g2b_floor = std::max(pcie.ms, staging.ms);

    bool ok = true;
    // A mode's output against the float64 reference at 64 cells and against G2b's output: bitwise equal where the
    // chunks are the same; with other chunks (G3's budget) the time tiles start elsewhere, so equal within the
    // float32 contract (|x - y| <= 1e-5 max(1, |y|), NaN in the same cells), scanned on the pool's threads.
    auto check = [&](const float* result, bool compare) {
        const double worst = spot_check(a.data(), b.data(), result, T, N);
        std::string vs;
        bool agrees = true;
        if (compare && std::memcmp(result, out.data(), bytes) == 0) {
            vs = ", bitwise equal to G2b's";
        } else if (compare) {
            const double gap = largest_gap(result, out.data(), elems);
            agrees = gap <= 1e-5;
            vs = fmt::format(", not bitwise equal to G2b's: largest |difference| / max(1, |G2b's|) {:.1e}{}", gap,
                             agrees ? "" : " (BEYOND the contract's 1e-5)");
        }
        ok = ok && worst < 1e-4 && agrees;
        return fmt::format("worst |error| at 64 cells {:.1e}{}", worst, vs);
    };

    // The same panels in page-locked memory, for demo 3 and G2a.
    PinnedBuf pa(bytes), pb(bytes), pout(bytes);
    std::memcpy(pa.p, a.data(), bytes);
    std::memcpy(pb.p, b.data(), bytes);

    double demo3 = NAN;
    {
        TalkDemo3 demo(T, N, 20);
        std::vector<double> ms;
        for (int i = 0; i < 4; ++i) ms.push_back(demo.run(pa.f(), pb.f(), pout.f()));
        const std::string runs = fmt::format("{:.1f} {:.1f} {:.1f} {:.1f}", ms[0], ms[1], ms[2], ms[3]);
        ms.erase(ms.begin());
        demo3 = median(ms);
        const double worst = spot_check(a.data(), b.data(), pout.f(), T, N);
        std::printf("H1  talk's demo 3 (5 streams, one thread per output, page-locked buffers), %s: %.1f ms (median of "
                    "3 after one; runs %s ms), %.2f x the PCIe floor; worst |error| at 64 cells %.1e\n",
                    size.c_str(), demo3, runs.c_str(), demo3 / pcie.ms, worst);
    }
    poison(pout.f(), elems);

    fj::CompileOptions cuda;
    cuda.backend = fj::Backend::Cuda;
    const fj::Program p = fj::compile({{"c", corr_w(20)}}, cuda);
    auto panels = [&](const float* x, const float* y) {
        return std::map<std::string, fj::Panel>{{"A", fj::Panel::host(x, T, N)}, {"B", fj::Panel::host(y, T, N)}};
    };
    auto output = [&](float* o) { return std::map<std::string, fj::Panel>{{"c", fj::Panel::host(o, T, N)}}; };
    fj::RunOptions defaults;

    // G2b first: its first run is the program's first (pinned staging made, kernels specialised for the shape).
    const RunTimes g2b = time_host_runs(p, panels(a.data(), b.data()), output(out.data()), defaults, 3);
    figure("G2b", fmt::format("{}, pageable (std::vector), first run", size), g2b.first, g2b_floor, 1.25,
           "the larger floor", "pinned staging allocated and kernels made in it");
    figure("G2b", fmt::format("{}, pageable (std::vector), warm", size), g2b.warm, g2b_floor, 1.25,
           "the larger floor",
           fmt::format("median of 3 (runs {} ms); {}; {:.2f} x PCIe floor, {:.2f} x staging floor; {}", g2b.runs,
                       chunks_of(g2b), g2b.warm / pcie.ms, g2b.warm / staging.ms, check(out.data(), false)));

    const RunTimes g2a = time_host_runs(p, panels(pa.f(), pb.f()), output(pout.f()), defaults, 3);
    figure("G2a", fmt::format("{}, page-locked (cuMemHostAlloc)", size), g2a.warm, pcie.ms, 1.25, "PCIe floor",
           fmt::format("median of 3 (runs {} ms); {:.2f} x demo 3 ({:.1f} ms; target < 1: {}); {}; {}", g2a.runs,
                       g2a.warm / demo3, demo3, g2a.warm < demo3 ? "met" : "MISSED", chunks_of(g2a),
                       check(pout.f(), true)));

    {
        // The caller's own arrays registered once (fj::register_host), then run as often as needed.
        auto t0 = Clock::now();
        fj::HostRegistration ra = fj::register_host(a.data(), bytes), rb = fj::register_host(b.data(), bytes),
                             ro = fj::register_host(out2.data(), bytes);
        const double reg_ms = ms_since(t0);
        const RunTimes g2r = time_host_runs(p, panels(a.data(), b.data()), output(out2.data()), defaults, 3);
        t0 = Clock::now();
        ra.reset(), rb.reset(), ro.reset();
        const double unreg_ms = ms_since(t0);
        figure("G2r", fmt::format("{}, pageable registered by fj::register_host", size), g2r.warm, pcie.ms, 1.25,
               "PCIe floor",
               fmt::format("median of 3 (runs {} ms); registering the 3 panels took {:.1f} ms, unregistering {:.1f} ms; "
                           "{}; {}",
                           g2r.runs, reg_ms, unreg_ms, chunks_of(g2r), check(out2.data(), true)));
    }
    poison(out2.data(), elems);
    poison(pout.f(), elems);

    fj::RunOptions budget;
    budget.max_device_bytes = std::int64_t{8} << 30;
    const RunTimes g3a = time_host_runs(p, panels(pa.f(), pb.f()), output(pout.f()), budget, 3);
    figure("G3a", fmt::format("{}, page-locked, max_device_bytes 8 GiB", size), g3a.warm, g2a.warm, 1.1, "G2a",
           fmt::format("{:.2f} x PCIe floor; median of 3 (runs {} ms); {}; {}", g3a.warm / pcie.ms, g3a.runs,
                       chunks_of(g3a), check(pout.f(), true)));
    const RunTimes g3b = time_host_runs(p, panels(a.data(), b.data()), output(out2.data()), budget, 3);
    figure("G3b", fmt::format("{}, pageable, max_device_bytes 8 GiB", size), g3b.warm, g2b.warm, 1.1, "G2b",
           fmt::format("{:.2f} x the larger floor; median of 3 (runs {} ms); {}; {}", g3b.warm / g2b_floor, g3b.runs,
                       chunks_of(g3b), check(out2.data(), true)));
    std::printf("    [smi after the %s figures: %s]\n", size.c_str(), smi_once().c_str());
    return ok;
}

// J2 of run_async: the host time of a cached call on small device panels (64 x 32 float32), enqueue only (the stream
// is synchronised every 64 calls, outside the timed calls, so its queue never fills). Run's host overhead is
// bench_gpu's own J2 row.
void j2_host_overhead() {
    const SmallCorrPanels panels(64, 32, 9);
    fj::CompileOptions cuda;
    cuda.backend = fj::Backend::Cuda;
    const fj::Program p = fj::compile({{"c", corr_w(20)}}, cuda);
    Stream s;
    for (int i = 0; i < 100; ++i) p.run_async(panels.in, panels.outs, s.s);
    FJ_CU(cuStreamSynchronize, s.s);
    std::vector<double> async_us;
    for (int i = 0; i < 5000; ++i) {
        const auto t0 = Clock::now();
        p.run_async(panels.in, panels.outs, s.s);
        async_us.push_back(ms_since(t0) * 1e3);
        if (i % 64 == 63) FJ_CU(cuStreamSynchronize, s.s);
    }
    FJ_CU(cuStreamSynchronize, s.s);
    std::sort(async_us.begin(), async_us.end());
    const double a50 = median(async_us), a90 = async_us[async_us.size() * 9 / 10];
    std::printf("J2  cached run_async, 64x32 f32 device panels: %.2f us host time a call (median of 5000; 90th percentile "
                "%.2f us); target <= 10 us: %s\n",
                a50, a90, a50 <= 10 ? "met" : "MISSED");
    std::fflush(stdout);
}

// bench_gpu --host [T N]: the figures at T x N, or at 50,000 x 50,000 and the talk's 50,000 x 10,000; then J2.
int host_mode(int argc, char** argv) {
    const cu::Device& dev = *cu::device();
    cu::make_current(dev);
    std::printf("device: %s, %d SMs, %.1f GiB, driver %d; host: %u threads\n", dev.name.c_str(), dev.sm_count,
                dev.total_mem / 1073741824.0, dev.driver_version, std::thread::hardware_concurrency());
    std::vector<std::pair<long long, long long>> sizes = {{50000, 50000}, {50000, 10000}};
    if (argc > 3) sizes = {{std::atoll(argv[2]), std::atoll(argv[3])}};
    bool ok = true;
    for (const auto& [T, N] : sizes) ok = host_figures(T, N) && ok;
    j2_host_overhead();
    if (!ok) std::printf("H1  a result did not check out (see the lines above)\n");
    return ok ? 0 : 1;
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
            return host_mode(argc, argv);
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
            const SmallCorrPanels panels(1, 32, 7);
            const auto& in = panels.in;
            const auto& outs = panels.outs;
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
