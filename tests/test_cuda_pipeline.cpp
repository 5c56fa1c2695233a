// The CUDA backend's chunk pipeline for host panels (runtime/cuda/host_pipeline.hpp) and run_async on a caller's
// stream: chunked runs give the unchunked run's results (within the contract: running sums re-seed where a chunk
// starts, as at a time tile), progress comes once per chunk, a failure stops the run cleanly and the next run works.
// Every case skips with a message where there is no GPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "factorjit.hpp"
#include "test_data.hpp"

#include <fmt/format.h>

#ifdef FJ_WITH_CUDA
#include "runtime/backend.hpp"
#include "runtime/cuda/cuda_api.hpp"
#include "runtime/fault_inject.hpp"
#endif

TEST_SUITE("cuda_gpu") {

#ifdef FJ_WITH_CUDA

namespace {

namespace cu = fj::rt::cuda;

bool gpu_here() {
    std::string why;
    if (fj::rt::cuda_backend(&why)) return true;
    MESSAGE("skipped: no CUDA backend: " << why);
    return false;
}

// Windows, a delay, a row step between time-series steps and a window over its result: chunks carry the chain's halo.
std::vector<std::pair<std::string, fj::Expr>> pipeline_program() {
    using namespace fj;
    const Expr A = input("A"), B = input("B");
    return {{"corr", corr(window(A, 20), window(B, 20))},
            {"std", stddev(window(A - delay(B, 3), 30))},
            {"ranked", mean(window(rank(A / delay(A, 5) - 1), 10))},
            {"max", max(window(B, 7))}};
}

// pipeline_program() compiled for the CUDA backend, and the price-like panels A and B its cases run on.
fj::Program cuda_pipeline_program() {
    fj::CompileOptions o;
    o.backend = fj::Backend::Cuda;
    return fj::compile(pipeline_program(), o);
}

fj::test::Dataset price_panels(std::uint64_t seed, std::int64_t rows = 3000, std::int64_t cols = 263, bool with_gaps = true) {
    using namespace fj::test;
    return dataset(with_gaps ? "price, messy" : "price", rows, cols, with_gaps ? messy(Flavour::Price) : clean(Flavour::Price), seed,
                   {"A", "B"});
}

template <class T>
struct HostRun {
    std::map<std::string, std::vector<T>> out;
    std::map<std::string, fj::Panel> in_panels, out_panels;
    std::map<std::string, std::vector<T>> in;

    HostRun(const fj::test::Dataset& ds, const fj::Program& p) {
        for (const auto& [name, v] : ds.inputs) {
            in[name].assign(v.begin(), v.end());
            in_panels[name] = fj::Panel::host(in[name].data(), ds.rows, ds.cols);
        }
        for (const std::string& name : p.output_names()) {
            out[name].assign(static_cast<std::size_t>(ds.rows * ds.cols), T(-7));
            out_panels[name] = fj::Panel::host(out[name].data(), ds.rows, ds.cols);
        }
    }
};

template <class T>
void check_close(const std::map<std::string, std::vector<T>>& got, const std::map<std::string, std::vector<T>>& want, double tol) {
    for (const auto& [name, w] : want) {
        CAPTURE(name);
        const std::vector<T>& g = got.at(name);
        std::size_t bad = 0, first_bad = 0;
        for (std::size_t i = 0; i < w.size(); ++i) {
            const double a = g[i], b = w[i];
            const bool ok = (std::isnan(a) && std::isnan(b)) || std::fabs(a - b) <= tol * std::max(1.0, std::fabs(b));
            if (!ok && bad++ == 0) first_bad = i;
        }
        CHECK_MESSAGE(bad == 0, bad << " values differ, the first at " << first_bad << ": " << g[first_bad] << " vs " << w[first_bad]);
    }
}

template <class T>
void chunked_equals_whole(fj::DType dtype, double tol) {
    const fj::test::Dataset ds = price_panels(91);
    const fj::Program p = cuda_pipeline_program();
    HostRun<T> whole(ds, p);
    p.run(whole.in_panels, whole.out_panels);  // (small panels: copied whole, no chunks)
    for (std::int64_t chunk_rows : {997, 250, 3000}) {
        CAPTURE(chunk_rows);
        HostRun<T> chunked(ds, p);
        fj::RunOptions ro;
        ro.chunk_rows = chunk_rows;
        std::vector<fj::RunProgress> seen;
        ro.progress = [&](const fj::RunProgress& pr) { seen.push_back(pr); };
        p.run(chunked.in_panels, chunked.out_panels, ro);
        check_close(chunked.out, whole.out, tol);
        for (const auto& [name, v] : whole.in)  // the caller's inputs untouched (bitwise: they hold NaNs)
            CHECK(std::memcmp(chunked.in.at(name).data(), v.data(), v.size() * sizeof(T)) == 0);
        const std::int64_t chunks = (ds.rows + chunk_rows - 1) / chunk_rows;
        REQUIRE(static_cast<std::int64_t>(seen.size()) == chunks);
        for (std::size_t i = 0; i < seen.size(); ++i) {
            CHECK(seen[i].chunks_done == static_cast<std::int64_t>(i) + 1);
            CHECK(seen[i].chunks_total == chunks);
        }
        CHECK(seen.back().rows_done == ds.rows);
        CHECK(seen.back().bytes_out == static_cast<std::int64_t>(ds.rows * ds.cols * 4 * sizeof(T)));
    }
    (void)dtype;
}

}  // namespace

TEST_CASE("host panels in chunks over time through the pipeline: the unchunked run's results, progress per chunk") {
    if (!gpu_here()) return;
    chunked_equals_whole<float>(fj::DType::F32, 2e-5);
    chunked_equals_whole<double>(fj::DType::F64, 1e-10);
}

TEST_CASE("page-locked host panels are copied by DMA without staging: the same results as pageable ones") {
    if (!gpu_here()) return;
    const fj::test::Dataset ds = price_panels(95);
    const fj::Program p = cuda_pipeline_program();
    HostRun<float> pageable(ds, p);
    fj::RunOptions ro;
    ro.chunk_rows = 997;
    p.run(pageable.in_panels, pageable.out_panels, ro);
    // The same panels in cuMemHostAlloc'd memory, inputs at a leading dimension beyond their columns.
    cu::make_current(*cu::device());
    const std::int64_t ld = ds.cols + 5;
    std::vector<void*> blocks;
    auto locked = [&](std::size_t elems) {
        void* q = nullptr;
        FJ_CU(cuMemHostAlloc, &q, elems * sizeof(float), 0u);
        blocks.push_back(q);
        return static_cast<float*>(q);
    };
    std::map<std::string, fj::Panel> in, out;
    for (const auto& [name, v] : pageable.in) {
        float* q = locked(static_cast<std::size_t>(ds.rows * ld));
        for (std::int64_t t = 0; t < ds.rows; ++t)
            std::memcpy(q + t * ld, v.data() + t * ds.cols, static_cast<std::size_t>(ds.cols) * sizeof(float));
        in[name] = fj::Panel::host(q, ds.rows, ds.cols, ld);
    }
    std::map<std::string, float*> outs;
    for (const auto& [name, v] : pageable.out) {
        outs[name] = locked(v.size());
        out[name] = fj::Panel::host(outs[name], ds.rows, ds.cols);
    }
    p.run(in, out, ro);
    for (const auto& [name, v] : pageable.out) {
        CAPTURE(name);
        CHECK(std::memcmp(outs[name], v.data(), v.size() * sizeof(float)) == 0);
    }
    for (void* q : blocks) cu::driver_api().cuMemFreeHost(q);
}

TEST_CASE("chunks over columns (no row step), a device budget that forces chunks, and one that cannot fit a row") {
    if (!gpu_here()) return;
    using namespace fj;
    const test::Dataset ds = test::dataset("price, messy", 2000, 301, test::messy(test::Flavour::Price), 92, {"A", "B"});
    CompileOptions o;
    o.backend = Backend::Cuda;
    const Program p = compile({{"corr", corr(window(input("A"), 20), window(input("B"), 20))},
                               {"sum", sum(window(input("A") * input("B"), 50))}},
                              o);
    HostRun<float> whole(ds, p);
    p.run(whole.in_panels, whole.out_panels);
    {
        HostRun<float> cols(ds, p);
        RunOptions ro;
        ro.chunk_cols = 64;
        p.run(cols.in_panels, cols.out_panels, ro);
        check_close(cols.out, whole.out, 2e-5);  // (fewer columns: other time tiles, so sums re-seed elsewhere)
    }
    {
        HostRun<float> budget(ds, p);
        RunOptions ro;
        ro.max_device_bytes = 4 << 20;  // 4 MB: several chunks of a few hundred rows
        p.run(budget.in_panels, budget.out_panels, ro);
        check_close(budget.out, whole.out, 2e-5);
    }
    HostRun<float> tiny(ds, p);
    RunOptions ro;
    ro.max_device_bytes = 1000;
    CHECK_THROWS_AS(p.run(tiny.in_panels, tiny.out_panels, ro), RunError);
    HostRun<float> again(ds, p);  // a run after a refused one works
    p.run(again.in_panels, again.out_panels);
    check_close(again.out, whole.out, 0.0);
}

TEST_CASE("a progress callback that throws stops the run; its exception propagates and the next run works") {
    if (!gpu_here()) return;
    const fj::test::Dataset ds = price_panels(93, 3000, 263, false);
    const fj::Program p = cuda_pipeline_program();
    HostRun<float> stopped(ds, p);
    fj::RunOptions ro;
    ro.chunk_rows = 500;
    int calls = 0;
    ro.progress = [&](const fj::RunProgress&) {
        if (++calls == 2) throw std::runtime_error("stop here");
    };
    CHECK_THROWS_WITH_AS(p.run(stopped.in_panels, stopped.out_panels, ro), "stop here", std::runtime_error);
    CHECK(calls == 2);
    HostRun<float> whole(ds, p), chunked(ds, p);
    p.run(whole.in_panels, whole.out_panels);
    ro.progress = nullptr;
    p.run(chunked.in_panels, chunked.out_panels, ro);
    check_close(chunked.out, whole.out, 2e-5);
}

TEST_CASE("an allocation or a chunk that fails mid-run: RunError, inputs untouched, the next run right") {
    if (!gpu_here()) return;
    const fj::test::Dataset ds = price_panels(96);
    const fj::Program p = cuda_pipeline_program();
    HostRun<float> whole(ds, p);
    p.run(whole.in_panels, whole.out_panels);
    fj::RunOptions ro;
    ro.chunk_rows = 400;
    for (auto [kind, n] : {std::pair{fj::rt::FaultKind::Chunk, 4}, std::pair{fj::rt::FaultKind::Alloc, 20}}) {
        CAPTURE(static_cast<int>(kind));
        HostRun<float> failed(ds, p);
        fj::rt::testing::fail_at(kind, n);
        CHECK_THROWS_AS(p.run(failed.in_panels, failed.out_panels, ro), fj::RunError);
        fj::rt::testing::fail_at(kind, 0);
        for (const auto& [name, v] : whole.in)
            CHECK(std::memcmp(failed.in.at(name).data(), v.data(), v.size() * sizeof(float)) == 0);
        HostRun<float> after(ds, p);
        p.run(after.in_panels, after.out_panels, ro);
        check_close(after.out, whole.out, 2e-5);
    }
}

TEST_CASE("run_async on device panels enqueues on the caller's stream; two programs on two streams") {
    if (!gpu_here()) return;
    using namespace fj;
    const test::Dataset ds = test::dataset("price, messy", 1500, 257, test::messy(test::Flavour::Price), 94, {"A", "B"});
    CompileOptions o;
    o.backend = Backend::Cuda;
    const Program p1 = compile(pipeline_program(), o);
    const Program p2 = compile({{"z", zscore(input("A") - input("B"))}}, o);
    HostRun<float> want1(ds, p1), want2(ds, p2);
    p1.run(want1.in_panels, want1.out_panels);
    p2.run(want2.in_panels, want2.out_panels);

    cu::make_current(*cu::device());
    const std::size_t bytes = static_cast<std::size_t>(ds.rows * ds.cols) * sizeof(float);
    std::map<std::string, cu::CUdeviceptr> dev;
    auto dalloc = [&](const std::string& name) {
        FJ_CU(cuMemAlloc, &dev[name], bytes);
        return Panel::device(dev[name], ds.rows, ds.cols, ds.cols, DType::F32);
    };
    std::map<std::string, Panel> in, out1, out2;
    for (const auto& [name, v] : want1.in) {
        in[name] = dalloc(name);
        FJ_CU(cuMemcpyHtoD, dev[name], v.data(), bytes);
    }
    for (const auto& [name, v] : want1.out) out1[name] = dalloc("1" + name);
    for (const auto& [name, v] : want2.out) out2[name] = dalloc("2" + name);
    cu::CUstream s1 = nullptr, s2 = nullptr;
    FJ_CU(cuStreamCreate, &s1, 1u);  // non-blocking: nothing orders them but their own work
    FJ_CU(cuStreamCreate, &s2, 1u);
    p1.run_async(in, out1, s1);
    p2.run_async(in, out2, s2);
    FJ_CU(cuStreamSynchronize, s1);
    FJ_CU(cuStreamSynchronize, s2);
    std::map<std::string, std::vector<float>> got1, got2;
    for (const auto& [name, v] : want1.out) {
        got1[name].resize(v.size());
        FJ_CU(cuMemcpyDtoH, got1[name].data(), dev["1" + name], bytes);
    }
    for (const auto& [name, v] : want2.out) {
        got2[name].resize(v.size());
        FJ_CU(cuMemcpyDtoH, got2[name].data(), dev["2" + name], bytes);
    }
    check_close(got1, want1.out, 0.0);
    check_close(got2, want2.out, 0.0);
    CHECK_THROWS_AS(p1.run_async(want1.in_panels, out1, s1), InputError);  // host inputs: refused
    cu::driver_api().cuStreamDestroy(s1);
    cu::driver_api().cuStreamDestroy(s2);
    for (auto& [name, ptr] : dev) cu::driver_api().cuMemFree(ptr);
}

namespace {
// Whether the driver reports [p, p + bytes) as page-locked host memory (both ends asked, as the pipeline does).
bool locked_range(const void* p, std::size_t bytes) {
    for (const char* at : {static_cast<const char*>(p), static_cast<const char*>(p) + bytes - 1}) {
        unsigned type = 0;
        if (cu::driver_api().cuPointerGetAttribute(&type, cu::CU_POINTER_ATTRIBUTE_MEMORY_TYPE, reinterpret_cast<cu::CUdeviceptr>(at)) !=
                cu::CUDA_SUCCESS ||
            type != cu::CU_MEMORYTYPE_HOST)
            return false;
    }
    return true;
}
}  // namespace

// Page-aligned arrays of whole pages: two registrations never share a page (the driver locks whole pages).
struct PageArray {
    float* data = nullptr;
    std::size_t elems = 0;
    explicit PageArray(std::size_t n) : elems(n) {
        const std::size_t bytes = (n * sizeof(float) + 4095) / 4096 * 4096;
        data = static_cast<float*>(std::aligned_alloc(4096, bytes));
        REQUIRE(data != nullptr);
        std::fill(data, data + n, -7.0f);
    }
    ~PageArray() { std::free(data); }
    PageArray(const PageArray&) = delete;
    PageArray& operator=(const PageArray&) = delete;
    std::size_t bytes() const { return elems * sizeof(float); }
};

TEST_CASE("register_host: the caller's arrays page-locked by a handle, runs on them equal to pageable runs, unlocked after") {
    if (!gpu_here()) return;
    const fj::test::Dataset ds = price_panels(97);
    const fj::Program p = cuda_pipeline_program();
    fj::RunOptions ro;
    ro.chunk_rows = 997;
    HostRun<float> pageable(ds, p);
    p.run(pageable.in_panels, pageable.out_panels, ro);
    const std::size_t n = static_cast<std::size_t>(ds.rows * ds.cols);
    std::map<std::string, std::unique_ptr<PageArray>> arrays;
    std::map<std::string, fj::Panel> in, out;
    for (const auto& [name, v] : pageable.in) {
        arrays[name] = std::make_unique<PageArray>(n);
        std::memcpy(arrays[name]->data, v.data(), n * sizeof(float));
        in[name] = fj::Panel::host(arrays[name]->data, ds.rows, ds.cols);
    }
    for (const auto& [name, v] : pageable.out) {
        arrays["out " + name] = std::make_unique<PageArray>(n);
        out[name] = fj::Panel::host(arrays["out " + name]->data, ds.rows, ds.cols);
    }
    {
        std::vector<fj::HostRegistration> handles;
        for (const auto& [name, a] : arrays) {
            REQUIRE_FALSE(locked_range(a->data, a->bytes()));
            handles.push_back(fj::register_host(a->data, a->bytes()));
            CHECK(handles.back().data() == a->data);
            CHECK(handles.back().bytes() == a->bytes());
            CHECK(locked_range(a->data, a->bytes()));
        }
        // Registering a range again is the driver's error, reported with the address, not a crash.
        CHECK_THROWS_AS(fj::register_host(arrays.at("A")->data, arrays.at("A")->bytes()), fj::BackendError);
        for (int repeat = 0; repeat < 2; ++repeat) {  // registered once, run twice
            for (const auto& [name, a] : arrays)
                if (name.rfind("out ", 0) == 0) std::fill(a->data, a->data + n, -7.0f);
            p.run(in, out, ro);
            for (const auto& [name, v] : pageable.out) {
                CAPTURE(name);
                CHECK(std::memcmp(arrays.at("out " + name)->data, v.data(), n * sizeof(float)) == 0);
            }
            for (const auto& [name, v] : pageable.in) CHECK(std::memcmp(arrays.at(name)->data, v.data(), n * sizeof(float)) == 0);
        }
        fj::HostRegistration moved = std::move(handles.front());  // a move hands the registration over
        CHECK_FALSE(handles.front());
        CHECK(moved);
        moved.reset();
        CHECK_FALSE(moved);
        CHECK_FALSE(locked_range(arrays.begin()->second->data, arrays.begin()->second->bytes()));
    }
    for (const auto& [name, a] : arrays) CHECK_FALSE(locked_range(a->data, a->bytes()));  // the handles unregistered them
    CHECK_THROWS_AS(fj::register_host(nullptr, 16), fj::InputError);
}

// ---- Several devices (RunOptions::devices). With one GPU, {d, d} runs two workers on it: the hand-out, the
// ordering of chunks and the failure paths are the same code as on several GPUs.

TEST_CASE("devices {d} and {d, d}: host panels equal to the plain run, pageable and registered; progress over workers") {
    if (!gpu_here()) return;
    const int d = cu::device()->ordinal;
    const fj::test::Dataset ds = price_panels(98);
    const fj::Program p = cuda_pipeline_program();
    fj::RunOptions same_chunks;
    same_chunks.chunk_rows = 250;  // the chunks of every run below: then results are equal bit for bit
    HostRun<float> plain(ds, p);
    p.run(plain.in_panels, plain.out_panels, same_chunks);
    HostRun<float> unchunked(ds, p);
    p.run(unchunked.in_panels, unchunked.out_panels);
    for (const std::vector<int>& devices : {std::vector<int>{d}, std::vector<int>{d, d}, std::vector<int>{d, d, d}}) {
        CAPTURE(devices.size());
        HostRun<float> run(ds, p);
        fj::RunOptions ro = same_chunks;
        ro.devices = devices;
        std::vector<fj::RunProgress> seen;
        ro.progress = [&](const fj::RunProgress& pr) { seen.push_back(pr); };
        p.run(run.in_panels, run.out_panels, ro);
        check_close(run.out, plain.out, 0.0);
        for (const auto& [name, v] : plain.in) CHECK(std::memcmp(run.in.at(name).data(), v.data(), v.size() * sizeof(float)) == 0);
        REQUIRE(seen.size() == 12u);  // 3000 rows in chunks of 250
        for (std::size_t i = 0; i < seen.size(); ++i) CHECK(seen[i].chunks_done == static_cast<std::int64_t>(i) + 1);
        CHECK(seen.back().rows_done == ds.rows);
        CHECK(seen.back().bytes_out == static_cast<std::int64_t>(ds.rows * ds.cols * 4 * sizeof(float)));
        // The planner's own chunks (not forced): within the contract of the unchunked run.
        HostRun<float> planned(ds, p);
        fj::RunOptions free_chunks;
        free_chunks.devices = devices;
        p.run(planned.in_panels, planned.out_panels, free_chunks);
        check_close(planned.out, unchunked.out, 2e-5);
    }
    // Registered (page-locked) caller memory: DMA straight from it on every worker.
    const std::size_t n = static_cast<std::size_t>(ds.rows * ds.cols);
    std::map<std::string, std::unique_ptr<PageArray>> arrays;
    std::map<std::string, fj::Panel> in, out;
    std::vector<fj::HostRegistration> handles;
    for (const auto& [name, v] : plain.in) {
        arrays[name] = std::make_unique<PageArray>(n);
        std::memcpy(arrays[name]->data, v.data(), n * sizeof(float));
        in[name] = fj::Panel::host(arrays[name]->data, ds.rows, ds.cols);
        handles.push_back(fj::register_host(arrays[name]->data, arrays[name]->bytes()));
    }
    for (const auto& [name, v] : plain.out) {
        arrays["out " + name] = std::make_unique<PageArray>(n);
        out[name] = fj::Panel::host(arrays["out " + name]->data, ds.rows, ds.cols);
        handles.push_back(fj::register_host(arrays["out " + name]->data, arrays["out " + name]->bytes()));
    }
    fj::RunOptions ro = same_chunks;
    ro.devices = {d, d};
    p.run(in, out, ro);
    for (const auto& [name, v] : plain.out) {
        CAPTURE(name);
        CHECK(std::memcmp(arrays.at("out " + name)->data, v.data(), n * sizeof(float)) == 0);
    }
}

TEST_CASE("devices with device panels: they run on the device that holds them; mixed with host panels, refused; unknown devices refused") {
    if (!gpu_here()) return;
    using namespace fj;
    const int d = cu::device()->ordinal;
    const test::Dataset ds = price_panels(99, 1500, 257);
    const Program p = cuda_pipeline_program();
    HostRun<float> want(ds, p);
    p.run(want.in_panels, want.out_panels);

    cu::make_current(*cu::device());
    const std::size_t bytes = static_cast<std::size_t>(ds.rows * ds.cols) * sizeof(float);
    std::map<std::string, cu::CUdeviceptr> dev;
    auto dalloc = [&](const std::string& name) {
        FJ_CU(cuMemAlloc, &dev[name], bytes);
        return Panel::device(dev[name], ds.rows, ds.cols, ds.cols, DType::F32);
    };
    std::map<std::string, Panel> in, out;
    for (const auto& [name, v] : want.in) {
        in[name] = dalloc(name);
        FJ_CU(cuMemcpyHtoD, dev[name], v.data(), bytes);
    }
    for (const auto& [name, v] : want.out) out[name] = dalloc("out " + name);
    RunOptions ro;
    ro.devices = {d, d};
    p.run(in, out, ro);
    std::map<std::string, std::vector<float>> got;
    for (const auto& [name, v] : want.out) {
        got[name].resize(v.size());
        FJ_CU(cuMemcpyDtoH, got[name].data(), dev["out " + name], bytes);
    }
    check_close(got, want.out, 0.0);

    // Device inputs with host outputs: refused by the run's checks (all panels of a run in one memory), with or
    // without devices, before anything is written.
    HostRun<float> mixed(ds, p);
    CHECK_THROWS_WITH_AS(p.run(in, mixed.out_panels, ro), doctest::Contains("on the GPU"), InputError);
    CHECK_THROWS_WITH_AS(p.run(in, mixed.out_panels), doctest::Contains("on the GPU"), InputError);
    for (const auto& [name, v] : mixed.out)
        CHECK(std::all_of(v.begin(), v.end(), [](float x) { return x == -7.0f; }));

    HostRun<float> nowhere(ds, p);
    RunOptions bad;
    bad.devices = {cu::device_count()};  // one past the last device
    CHECK_THROWS_WITH_AS(p.run(nowhere.in_panels, nowhere.out_panels, bad), doctest::Contains("RunOptions::devices names device"), InputError);
    for (auto& [name, ptr] : dev) cu::driver_api().cuMemFree(ptr);
}

TEST_CASE("devices {d, d}: a failure on one worker stops the run, names the device and the chunk; the next run is right") {
    if (!gpu_here()) return;
    const int d = cu::device()->ordinal;
    const fj::test::Dataset ds = price_panels(100);
    const fj::Program p = cuda_pipeline_program();
    fj::RunOptions ro;
    ro.chunk_rows = 200;
    HostRun<float> want(ds, p);
    p.run(want.in_panels, want.out_panels, ro);
    ro.devices = {d, d};
    for (auto [kind, n] : {std::pair{fj::rt::FaultKind::Chunk, 5}, std::pair{fj::rt::FaultKind::Alloc, 3}, std::pair{fj::rt::FaultKind::Alloc, 24}}) {
        CAPTURE(static_cast<int>(kind));
        CAPTURE(n);
        HostRun<float> failed(ds, p);
        std::int64_t last_done = 0;
        fj::RunOptions failing = ro;
        failing.progress = [&](const fj::RunProgress& pr) { last_done = pr.chunks_done; };
        fj::rt::testing::fail_at(kind, n);
        std::string message;
        try {
            p.run(failed.in_panels, failed.out_panels, failing);
        } catch (const fj::RunError& e) {
            message = e.what();
        }
        fj::rt::testing::fail_at(kind, 0);
        CAPTURE(message);
        REQUIRE_FALSE(message.empty());
        CHECK(message.find(fmt::format("cuda device {}", d)) != std::string::npos);
        CHECK(message.find("worker") != std::string::npos);
        if (kind == fj::rt::FaultKind::Chunk) CHECK(message.find("in chunk") != std::string::npos);
        CHECK(last_done < 15);  // stopped: not every chunk was delivered
        for (const auto& [name, v] : want.in)
            CHECK(std::memcmp(failed.in.at(name).data(), v.data(), v.size() * sizeof(float)) == 0);
        HostRun<float> after(ds, p);
        p.run(after.in_panels, after.out_panels, ro);
        check_close(after.out, want.out, 0.0);
    }
}

#else

TEST_CASE("the CUDA pipeline: compiled out (no CUDA backend)") {
    MESSAGE("skipped: built without the CUDA backend (FJ_WITH_CUDA=OFF or no cuda.h)");
}

#endif  // FJ_WITH_CUDA

}  // TEST_SUITE
