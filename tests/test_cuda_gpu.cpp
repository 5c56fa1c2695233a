// The CUDA backend on a GPU: every operator against the reference (tests/backend_cases.hpp, the same
// checks as the CPU backend's), float32 and float64, host panels and device panels, leading dimensions
// beyond the column count, many short time tiles (halos crossing tiles), odd shapes, CUDA against the
// CPU backend, and the kernel cache across programs. Every case skips with a message where
// fj::rt::cuda_backend() is null (no GPU, driver or NVRTC).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "backend_cases.hpp"
#include "cuda_cases.hpp"
#include "test_data.hpp"

#ifdef FJ_WITH_CUDA
#include "runtime/backend.hpp"
#include "runtime/cuda/cuda_api.hpp"
#endif

namespace {

bool have_gpu() {
#ifdef FJ_WITH_CUDA
    std::string why;
    if (fj::rt::cuda_backend(&why)) return true;
    MESSAGE("skipped: no CUDA backend: " << why);
    return false;
#else
    MESSAGE("skipped: built without the CUDA backend");
    return false;
#endif
}

#ifdef FJ_WITH_CUDA
namespace cu = fj::rt::cuda;

// Device copies of host panels (same shape and leading dimension) for the duration of one run.
struct DeviceCopy {
    cu::CUdeviceptr ptr = 0;
    std::size_t bytes = 0;
    explicit DeviceCopy(const fj::Panel& p) {
        bytes = static_cast<std::size_t>(p.rows * p.ld) * fj::dtype_size(p.dtype);
        FJ_CU(cuMemAlloc, &ptr, std::max<std::size_t>(bytes, 1));
        if (bytes) FJ_CU(cuMemcpyHtoD, ptr, p.data, bytes);  // the poison and the padding too
    }
    ~DeviceCopy() { cu::driver_api().cuMemFree(ptr); }
    fj::Panel panel(const fj::Panel& like) const {
        return fj::Panel::device(ptr, like.rows, like.cols, like.ld, like.dtype);
    }
};

// A backend_cases Runner that runs on device panels and copies the results back.
void run_on_device(const fj::Program& program, const std::map<std::string, fj::Panel>& inputs,
                   const std::map<std::string, fj::Panel>& outputs) {
    cu::make_current(*cu::device());
    std::map<std::string, std::unique_ptr<DeviceCopy>> din, dout;
    std::map<std::string, fj::Panel> pin, pout;
    for (const auto& [n, p] : inputs) {
        din[n] = std::make_unique<DeviceCopy>(p);
        pin[n] = din[n]->panel(p);
    }
    for (const auto& [n, p] : outputs) {
        dout[n] = std::make_unique<DeviceCopy>(p);
        pout[n] = dout[n]->panel(p);
    }
    program.run(pin, pout);
    for (const auto& [n, p] : outputs)
        if (dout[n]->bytes) FJ_CU(cuMemcpyDtoH, p.data, dout[n]->ptr, dout[n]->bytes);
}
#endif

struct GpuData {
    fj::test::Dataset ds;
    fj::test::CheckOptions check;
};

std::vector<GpuData> gpu_data() {
    using fj::test::Flavour;
    std::vector<GpuData> v;
    fj::test::CheckOptions padded;
    padded.ld_in = 41;
    padded.ld_out = 40;
    v.push_back({fj::test::dataset("price, messy", 600, 37, fj::test::messy(Flavour::Price), 11), padded});
    v.push_back({fj::test::dataset("1e4 + N(0,1), messy", 300, 70, fj::test::messy(Flavour::Offset1e4), 12), {}});
    // A multiple of 4 columns: kernels specialised on this leading dimension can be window scans
    // (bench/gpu_run.sh runs this suite once more with FJ_CUDA_WINDOW_SCAN=1).
    v.push_back({fj::test::dataset("price, messy", 500, 44, fj::test::messy(Flavour::Price), 13), {}});
    return v;
}

template <class T>
void all_cases(const fj::CompileOptions& extra, bool device, bool each) {
    const auto cases = fj::test::cuda_op_cases();
    for (GpuData& d : gpu_data()) {
        fj::CompileOptions o = T::options(extra);
#ifdef FJ_WITH_CUDA
        if (device) d.check.runner = run_on_device;
#else
        (void)device;
#endif
        if (each) {
            for (const auto& c : cases) fj::test::check_against_reference({c}, d.ds, T::dtype, o, d.check);
        } else {
            fj::test::check_against_reference(cases, d.ds, T::dtype, o, d.check);
        }
    }
}

}  // namespace

TEST_SUITE("cuda_gpu") {

TEST_CASE_TEMPLATE_DEFINE("every operator, one program each, host panels", T, cuda_each) {
    if (!have_gpu()) return;
    all_cases<T>({}, false, true);
}
TEST_CASE_TEMPLATE_APPLY(cuda_each, fj::test::CudaTargets);

TEST_CASE_TEMPLATE_DEFINE("all operators in one program: host panels, device panels, short tiles", T, cuda_all) {
    if (!have_gpu()) return;
    all_cases<T>({}, false, false);
    all_cases<T>({}, true, false);
    for (std::int64_t tile : {1, 7, 64}) {
        CAPTURE(tile);
        fj::CompileOptions o;
        o.tile_rows = tile;
        all_cases<T>(o, true, false);
    }
    // Kernels specialised on the panels' leading dimensions (what big panels get by default).
    ::setenv("FJ_CUDA_FIXED_LD", "1", 1);
    all_cases<T>({}, true, false);
    ::unsetenv("FJ_CUDA_FIXED_LD");
}
TEST_CASE_TEMPLATE_APPLY(cuda_all, fj::test::CudaTargets);

TEST_CASE_TEMPLATE_DEFINE("specialised kernels of small programs: default, batched edges, cache hints", T, cuda_small_fixed) {
    if (!have_gpu()) return;
    // The shapes only small bodies get (fj_rsqrt, warm-up batches; FJ_CUDA_EDGES: masked last rows), and
    // L2 eviction hints on short windows too (FJ_CUDA_CACHE_HINTS=1).
    std::vector<std::pair<std::string, fj::Expr>> some;
    for (const auto& c : fj::test::cuda_op_cases())
        for (const char* name : {"ge", "eq", "delay", "mean", "std", "wmax", "corr", "corr_nested", "mean_of_std_long"})
            if (c.first == name) some.push_back(c);
    REQUIRE(some.size() == 9);
    ::setenv("FJ_CUDA_FIXED_LD", "1", 1);
    for (const char* edges : {"0", "1"}) {
        CAPTURE(edges);
        ::setenv("FJ_CUDA_EDGES", edges, 1);
        if (std::string(edges) == "1") ::setenv("FJ_CUDA_CACHE_HINTS", "1", 1);
        for (GpuData& d : gpu_data()) {
#ifdef FJ_WITH_CUDA
            d.check.runner = run_on_device;
#endif
            for (const auto& c : some) fj::test::check_against_reference({c}, d.ds, T::dtype, T::options(), d.check);
        }
    }
    for (const char* v : {"FJ_CUDA_FIXED_LD", "FJ_CUDA_EDGES", "FJ_CUDA_CACHE_HINTS"}) ::unsetenv(v);
}
TEST_CASE_TEMPLATE_APPLY(cuda_small_fixed, fj::test::CudaTargets);

TEST_CASE_TEMPLATE_DEFINE("odd shapes", T, cuda_shapes) {
    if (!have_gpu()) return;
    using fj::test::Flavour;
    const auto cases = fj::test::cuda_op_cases();
    for (auto [rows, cols] : std::vector<std::pair<int, int>>{{1, 1}, {1, 40}, {300, 1}, {25, 1000}, {70, 33}}) {
        CAPTURE(rows);
        CAPTURE(cols);
        auto ds = fj::test::dataset("price, messy", rows, cols, fj::test::messy(Flavour::Price), 21);
        fj::test::check_against_reference(cases, ds, T::dtype, T::options());
    }
}
TEST_CASE_TEMPLATE_APPLY(cuda_shapes, fj::test::CudaTargets);

#ifdef FJ_WITH_CUDA

TEST_CASE_TEMPLATE_DEFINE("CUDA against the CPU backend: the headline case and nested windows", T, cuda_vs_cpu) {
    if (!have_gpu()) return;
    if (!fj::rt::cpu_backend()) {
        MESSAGE("skipped: no CPU backend in this build");
        return;
    }
    using fj::test::Flavour;
    const fj::Expr A = fj::input("A"), B = fj::input("B");
    const fj::test::NamedExprs exprs = {
        {"corr", fj::corr(fj::window(A, 20), fj::window(B, 20))},
        {"std", fj::std(fj::window(A, 250))},
        {"nested", fj::mean(fj::window(fj::std(fj::window(A, 5)), 10))},
        {"max", fj::max(fj::window(A, 30))},
    };
    auto ds = fj::test::dataset("price, messy", 3000, 257, fj::test::messy(Flavour::Price), 31);
    fj::CompileOptions gpu, cpu;
    gpu.backend = fj::Backend::Cuda;
    cpu.backend = fj::Backend::Cpu;
    auto g = fj::test::compile_and_run(exprs, ds.inputs, ds.rows, ds.cols, T::dtype, gpu);
    auto c = fj::test::compile_and_run(exprs, ds.inputs, ds.rows, ds.cols, T::dtype, cpu);
    REQUIRE(g);
    REQUIRE(c);
    for (const auto& [name, e] : exprs) {
        CAPTURE(name);
        const std::string msg = fj::test::compare_output(g->at(name), c->at(name), ds.cols, T::dtype, e.node(), {});
        CHECK_MESSAGE(msg.empty(), msg);
    }
}
TEST_CASE_TEMPLATE_APPLY(cuda_vs_cpu, fj::test::CudaTargets);

TEST_CASE_TEMPLATE_DEFINE("corr of a panel with itself is 1 (exactly in float32): generic and specialised kernels", T, cuda_corr_itself) {
    if (!have_gpu()) return;
    fj::CompileOptions o;
    o.backend = fj::Backend::Cuda;
    fj::test::CheckOptions device;
    device.runner = run_on_device;
    const fj::test::JudgedCase c = fj::test::corr_with_itself(T::dtype, 900, 300);
    fj::test::check_judged(c, o);
    ::setenv("FJ_CUDA_FIXED_LD", "1", 1);  // the big panels' kernels (echo rings)
    fj::test::check_judged(c, o, device);
    ::unsetenv("FJ_CUDA_FIXED_LD");
}
TEST_CASE_TEMPLATE_APPLY(cuda_corr_itself, fj::test::CudaTargets);

TEST_CASE("float64 sums that overflow give NaN, not a wrong number (CUDA)") {
    if (!have_gpu()) return;
    fj::CompileOptions o;
    o.backend = fj::Backend::Cuda;
    fj::test::check_judged(fj::test::float64_overflow(), o);
}

TEST_CASE("kernels are compiled once per process; explain names the backend and the cache") {
    if (!have_gpu()) return;
    const fj::Expr A = fj::input("A"), B = fj::input("B");
    fj::CompileOptions o;
    o.backend = fj::Backend::Cuda;
    std::vector<float> a(100 * 10), b(100 * 10), out(100 * 10);
    for (std::size_t i = 0; i < a.size(); ++i) {
        a[i] = 100.0f + static_cast<float>(i % 17);
        b[i] = 50.0f + static_cast<float>(i % 13);
    }
    for (int k = 0; k < 2; ++k) {
        fj::Program p = fj::compile({{"c", fj::corr(fj::window(A, 7), fj::window(B, 7))}}, o);
        CHECK(p.backend() == fj::Backend::Cuda);
        p.run({{"A", fj::Panel::host(a.data(), 100, 10)}, {"B", fj::Panel::host(b.data(), 100, 10)}},
              {{"c", fj::Panel::host(out.data(), 100, 10)}});
        const std::string text = p.explain();
        CHECK(text.find("backend cuda") != std::string::npos);
        if (k == 1) CHECK(text.find(": memory") != std::string::npos);
    }
    ::setenv("FJ_CUDA_FIXED_LD", "1", 1);  // read when the first run prepares the kernels
    fj::Program p = fj::compile({{"c", fj::corr(fj::window(A, 7), fj::window(B, 7))}}, o);
    p.run({{"A", fj::Panel::host(a.data(), 100, 10)}, {"B", fj::Panel::host(b.data(), 100, 10)}},
          {{"c", fj::Panel::host(out.data(), 100, 10)}});
    ::unsetenv("FJ_CUDA_FIXED_LD");
    CHECK(p.explain().find("specialised on leading dimensions [10, 10, 10]") != std::string::npos);
}

TEST_CASE("window scans: chosen for long windows of two inputs; unaligned panels get the column scan") {
    if (!have_gpu()) return;
    using F = fj::DType;
    const fj::Expr A = fj::input("A"), B = fj::input("B");
    const fj::Expr e = fj::corr(fj::window(A, 130), fj::window(B, 130));
    const std::int64_t rows = 400, cols = 48, ld = 52;
    const auto ds = fj::test::dataset("price, messy", rows, cols, fj::test::messy(fj::test::Flavour::Price), 41);
    const fj::test::Inputs data = fj::test::as_dtype(ds.inputs, F::F32);
    ::setenv("FJ_CUDA_FIXED_LD", "1", 1);  // (what panels of 2^24 elements get)
    fj::CompileOptions o;
    o.backend = fj::Backend::Cuda;
    fj::Program p = fj::compile({{"c", e}}, o);
    cu::make_current(*cu::device());
    std::map<std::string, std::unique_ptr<DeviceCopy>> din;
    std::vector<fj::test::HostBuffer> host;
    for (const auto& [n, v] : data) {
        host.emplace_back(F::F32, rows, cols, ld);
        host.back().load(v, 7.7e30);
        din[n] = std::make_unique<DeviceCopy>(host.back().panel());
    }
    fj::test::HostBuffer out_host(F::F32, rows, cols, ld);
    DeviceCopy dout(out_host.panel());
    // Panels start at column `first` and have `n` columns: aligned and a multiple of 4 (a window scan), one
    // column in (4 bytes off 16), a column count that is not a multiple of 4.
    for (const auto& [first, n] : std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 48}, {1, 44}, {0, 46}}) {
        CAPTURE(first);
        CAPTURE(n);
        std::map<std::string, fj::Panel> in;
        fj::test::Inputs sliced;
        for (const auto& [name, v] : data) {
            in[name] = fj::Panel::device(din[name]->ptr + static_cast<std::uint64_t>(first) * 4, rows, n, ld, F::F32);
            auto& s = sliced[name];
            for (std::int64_t t = 0; t < rows; ++t)
                for (std::int64_t j = 0; j < n; ++j) s.push_back(v[static_cast<std::size_t>(t * cols + first + j)]);
        }
        p.run(in, {{"c", fj::Panel::device(dout.ptr + static_cast<std::uint64_t>(first) * 4, rows, n, ld, F::F32)}});
        std::vector<float> raw(static_cast<std::size_t>(rows * ld) + 1);
        FJ_CU(cuMemcpyDtoH, raw.data(), dout.ptr, dout.bytes);
        std::vector<double> got;
        for (std::int64_t t = 0; t < rows; ++t)
            for (std::int64_t j = 0; j < n; ++j) got.push_back(raw[static_cast<std::size_t>(t * ld + first + j)]);
        const std::string msg =
            fj::test::compare_output(got, fj::test::reference(e, sliced, rows, n), n, F::F32, e.node(), {});
        CHECK_MESSAGE(msg.empty(), msg);
        const std::string ex = p.explain();
        CHECK(ex.find("window scan with") != std::string::npos);
        CHECK((ex.find("and as a column scan") != std::string::npos) == (first != 0 || n % 4 != 0));
    }
    ::unsetenv("FJ_CUDA_FIXED_LD");
}

TEST_CASE("quiet batches on the GPU (column and chained scans) and the others match the reference and each other") {
    if (!have_gpu()) return;
    using F = fj::DType;
    const fj::Expr A = fj::input("A"), B = fj::input("B");
    // Clean price-like data with events in a few columns (see the emulated test of quiet batches): most
    // batches quiet, those a window after an event (in its warp's 32 columns) not.
    const std::int64_t rows = 1500, cols = 96;
    auto ds = fj::test::dataset("price, clean", rows, cols, fj::test::clean(fj::test::Flavour::Price), 43);
    auto at = [&](const char* in, std::int64_t r, std::int64_t c) -> double& {
        return ds.inputs.at(in)[static_cast<std::size_t>(r * cols + c)];
    };
    at("A", 600, 5) = std::nan("");
    at("B", 900, 40) = HUGE_VAL;
    at("B", 1100, 70) = at("B", 1099, 70);
    for (std::int64_t r = 300; r < 330; ++r) at("A", r, 66) = at("A", 299, 66);
    for (std::int64_t r = 700; r < 1000; ++r) at("A", r, 80) = 101.25;
    for (const auto& [w, scan] : std::vector<std::pair<int, bool>>{{20, false}, {40, true}, {250, true}}) {
        CAPTURE(w);
        const fj::Expr e = fj::corr(fj::window(A, w), fj::window(B, w));
        const auto ref = fj::test::reference(e, fj::test::as_dtype(ds.inputs, F::F32), rows, cols);
        std::vector<float> a32, b32;
        for (double v : ds.inputs.at("A")) a32.push_back(static_cast<float>(v));
        for (double v : ds.inputs.at("B")) b32.push_back(static_cast<float>(v));
        std::vector<std::vector<float>> outs;
        for (const char* quiet : {"1", "0"}) {
            CAPTURE(quiet);
            ::setenv("FJ_CUDA_FIXED_LD", "1", 1);
            ::setenv("FJ_CUDA_WINDOW_SCAN", scan ? "1" : "0", 1);  // (chained scans for w = 40 too)
            ::setenv("FJ_CUDA_QUIET", quiet, 1);
            fj::CompileOptions o;
            o.backend = fj::Backend::Cuda;
            fj::Program p = fj::compile({{"c", e}}, o);
            std::vector<float> out(static_cast<std::size_t>(rows * cols), -7.0f);
            p.run({{"A", fj::Panel::host(a32.data(), rows, cols)}, {"B", fj::Panel::host(b32.data(), rows, cols)}},
                  {{"c", fj::Panel::host(out.data(), rows, cols)}});
            ::unsetenv("FJ_CUDA_FIXED_LD");
            ::unsetenv("FJ_CUDA_WINDOW_SCAN");
            ::unsetenv("FJ_CUDA_QUIET");
            const std::string ex = p.explain();  // (a chained scan: one block of 512 threads per SM)
            CHECK((ex.find("window scan with") != std::string::npos) == scan);
            CHECK(ex.find("specialised on leading dimensions") != std::string::npos);
            const std::vector<double> got(out.begin(), out.end());
            const std::string msg = fj::test::compare_output(got, ref, cols, F::F32, e.node(), {});
            CHECK_MESSAGE(msg.empty(), msg);
            outs.push_back(std::move(out));
        }
        CHECK(std::memcmp(outs[0].data(), outs[1].data(), outs[0].size() * sizeof(float)) == 0);
    }
}

TEST_CASE("device outputs that overlap device inputs are refused") {
    if (!have_gpu()) return;
    const fj::Expr A = fj::input("A");
    fj::CompileOptions o;
    o.backend = fj::Backend::Cuda;
    fj::Program p = fj::compile({{"m", fj::mean(fj::window(A, 3))}}, o);
    cu::make_current(*cu::device());
    cu::CUdeviceptr d = 0;
    FJ_CU(cuMemAlloc, &d, 64 * 64 * 4);
    const fj::Panel in = fj::Panel::device(d, 64, 64, 64, fj::DType::F32);
    CHECK_THROWS_AS(p.run({{"A", in}}, {{"m", in}}), fj::InputError);
    cu::driver_api().cuMemFree(d);
}

#endif  // FJ_WITH_CUDA

}  // TEST_SUITE
