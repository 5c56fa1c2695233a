// Column steps: ts_rank, median and quantile over windows of d >= 64 rows (codegen/plan.hpp, StepKind::Column;
// the CPU's runtime/cpu/column_ops.cpp, CUDA's runtime/cuda/column_kernels.cpp), against the float64 reference
// (tests/reference.cpp: every window sorted or counted from scratch) on both dtypes: ties, constant runs, NaN
// bursts, whole rows missing, 1e4 offsets, bad ticks and infinities, min_periods below d; under time tiles and
// chunks over time (against an unchunked run, bitwise); mixed with fused operators that read the column step's
// result and feed it; and bitwise against the fused O(d) lowering of the same windows.
#include <doctest/doctest.h>

#include <dlfcn.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "backend_cases.hpp"
#include "codegen/plan.hpp"
#include "dsl/parse.hpp"
#include "reference.hpp"
#include "runtime/backend.hpp"
#include "test_data.hpp"

#ifdef FJ_WITH_CUDA
#include "runtime/cuda/column_kernels.hpp"
#endif
#ifdef FJ_WITH_LLVM
#include "runtime/cpu/column_ops.hpp"
#include "runtime/thread_pool.hpp"
#endif

namespace {

using fj::Expr;
using fj::test::CheckOptions;
using fj::test::Dataset;
using fj::test::Flavour;
using fj::test::NamedExprs;
using fj::codegen::StepKind;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

const Expr A = fj::input("A"), B = fj::input("B");

// Small integers (0 .. 6): ties in every window.
Dataset ties_data(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
    Dataset ds = fj::test::dataset("small integers, ties, NaN", rows, cols, fj::test::messy(Flavour::Normal), seed);
    fj::test::Rng rng(seed);
    for (auto& [name, v] : ds.inputs)
        for (double& x : v)
            if (!std::isnan(x)) x = static_cast<double>(rng.integer(0, 6));
    return ds;
}

// Price walks with NaN bursts, whole rows missing (the market closed), long constant runs, bad ticks of 1e12 and
// -1e12, infinities, -0 beside +0, and a 1e4 level in column 1 from the middle on.
Dataset hostile_data(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
    fj::test::PanelSpec spec = fj::test::messy(Flavour::Price);
    spec.max_constant = 300;  // runs longer than the windows
    Dataset ds = fj::test::dataset("price, bursts, missing rows, ticks, inf", rows, cols, spec, seed);
    fj::test::Rng rng(seed + 7);
    for (auto& [name, v] : ds.inputs) {
        auto at = [&](std::int64_t t, std::int64_t j) -> double& { return v[static_cast<std::size_t>(t * cols + j)]; };
        for (std::int64_t t : {std::int64_t{0}, rows / 3, rows / 3 + 1, rows / 2, rows - 1})
            for (std::int64_t j = 0; j < cols; ++j) at(t, j) = kNaN;
        for (std::int64_t t = rows / 4; t < rows / 4 + 90 && t < rows; ++t)  // a burst longer than d = 64 in column 2
            at(t, 2 % cols) = kNaN;
        for (std::int64_t j = 0; j < cols; ++j) {
            if (j % 3 == 2) continue;
            for (int s = 0; s < 3; ++s) {
                const std::int64_t t = rng.integer(0, rows - 1);
                at(t, j) = s == 0 ? 1e12 : s == 1 ? -1e12 : (j % 2 ? kInf : -kInf);
            }
        }
        for (std::int64_t t = rows / 2; t < rows; ++t)
            if (!std::isnan(at(t, 1 % cols))) at(t, 1 % cols) += 1e4;
        if (cols > 4)
            for (std::int64_t t = 0; t < rows; ++t) at(t, 4) = t % 2 ? 0.0 : -0.0;  // -0 and +0: one value
    }
    return ds;
}

std::vector<Dataset> all_data() {
    std::vector<Dataset> v;
    v.push_back(fj::test::dataset("price, messy", 700, 21, fj::test::messy(Flavour::Price), 31));
    v.push_back(fj::test::dataset("1e4 + N(0,1), messy", 700, 19, fj::test::messy(Flavour::Offset1e4), 32));
    v.push_back(ties_data(600, 17, 33));
    v.push_back(hostile_data(700, 23, 34));
    return v;
}

// ts_rank, median and quantile(0.25) over window(x, d) with min_periods d, d / 2, 1 and 0; quantile 0, 0.9, 1 at d.
NamedExprs stat_cases(const Expr& x, int d) {
    NamedExprs prog;
    for (int mp : {d, d / 2, 1, 0}) {
        const std::string s = "_d" + std::to_string(d) + "_mp" + std::to_string(mp);
        prog.push_back({"ts_rank" + s, fj::ts_rank(fj::window(x, d, mp))});
        prog.push_back({"median" + s, fj::median(fj::window(x, d, mp))});
        prog.push_back({"quantile25" + s, fj::quantile(fj::window(x, d, mp), 0.25)});
    }
    for (double q : {0.0, 0.9, 1.0})
        prog.push_back({"quantile" + std::to_string(q) + "_d" + std::to_string(d), fj::quantile(fj::window(x, d), q)});
    return prog;
}

int count_column_steps(const fj::codegen::Plan& p) {
    int n = 0;
    for (const auto& s : p.steps) n += s.kind == StepKind::Column;
    return n;
}

// A program run through the backend's executable of a plan made with or without column steps (the fused O(d)
// lowering at any d), on float64 or float32 host panels of `data`; every output, row-major.
std::vector<std::vector<double>> run_plan(const NamedExprs& exprs, const fj::test::Inputs& data, std::int64_t rows,
                                          std::int64_t cols, fj::DType dtype, bool column_steps) {
    fj::codegen::PlanOptions po;
    po.column_steps = column_steps;
    const fj::codegen::Plan plan = fj::codegen::make_plan(exprs, dtype, po);
    REQUIRE(column_steps == (count_column_steps(plan) > 0));
    fj::CompileOptions co;
    co.backend = fj::Backend::Cpu;
    auto exe = fj::rt::cpu_backend()->prepare(plan, dtype, co);
    const std::size_t cells = static_cast<std::size_t>(rows * cols);
    std::vector<std::vector<double>> in64, out64(plan.outputs.size(), std::vector<double>(cells));
    std::vector<std::vector<float>> in32, out32(plan.outputs.size(), std::vector<float>(cells));
    std::vector<fj::Panel> ins, outs;
    for (const std::string& name : plan.inputs) {
        const std::vector<double>& v = data.at(name);
        in64.push_back(v);
        in32.emplace_back(v.begin(), v.end());
    }
    for (std::size_t i = 0; i < plan.inputs.size(); ++i)
        ins.push_back(dtype == fj::DType::F64 ? fj::Panel::host(in64[i].data(), rows, cols) : fj::Panel::host(in32[i].data(), rows, cols));
    for (std::size_t o = 0; o < plan.outputs.size(); ++o)
        outs.push_back(dtype == fj::DType::F64 ? fj::Panel::host(out64[o].data(), rows, cols) : fj::Panel::host(out32[o].data(), rows, cols));
    exe->run(ins, outs, {});
    if (dtype == fj::DType::F32)
        for (std::size_t o = 0; o < outs.size(); ++o) out64[o].assign(out32[o].begin(), out32[o].end());
    return out64;
}

#ifdef FJ_WITH_LLVM
// `stat` over x through the CPU's column-step code itself (fj::cpu::run_column_step), whatever the window's length
// (the CPU backend fuses column steps shorter than cpu::kColumnStepCpuWindow into kernels), on panels of `dtype`.
std::vector<double> cpu_column_step(const fj::Node* stat, const std::vector<double>& x, std::int64_t rows, std::int64_t cols,
                                    fj::DType dtype, std::int64_t tile_rows = 0) {
    std::vector<double> out64(x.size(), -777), in64 = x;
    std::vector<float> in32(x.begin(), x.end()), out32(x.size(), -777);
    const bool f64 = dtype == fj::DType::F64;
    const fj::cpu::RowPanel in{f64 ? static_cast<void*>(in64.data()) : static_cast<void*>(in32.data()), cols};
    const fj::cpu::RowPanel out{f64 ? static_cast<void*>(out64.data()) : static_cast<void*>(out32.data()), cols};
    fj::cpu::run_column_step(*stat, in, {out}, rows, cols, dtype, tile_rows, fj::rt::ThreadPool::shared(2));
    if (!f64) out64.assign(out32.begin(), out32.end());
    return out64;
}
#endif

#ifdef FJ_WITH_CUDA
// The CUDA column kernel on the host: its source compiled as C++ with the stand-ins below (a block's threads are
// threads, its barrier a std::barrier, its shared memory a static array, one block at a time), so that what NVRTC
// can only compile here is also run, on CI machines without a GPU.
const char* const kShim = R"(#include <barrier>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>
struct fj_dim3 { unsigned x = 0, y = 0, z = 0; };
static thread_local fj_dim3 blockIdx, blockDim, threadIdx, gridDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
alignas(16) static unsigned char fj_block_smem[1 << 22];
#define FJ_SMEM_DECL unsigned char* const fj_smem = fj_block_smem
static std::barrier<>* fj_bar = nullptr;
static inline void __syncthreads() { fj_bar->arrive_and_wait(); }
static inline double __longlong_as_double(long long v) { double d; std::memcpy(&d, &v, 8); return d; }
static inline long long __double_as_longlong(double d) { long long v; std::memcpy(&v, &d, 8); return v; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
using std::floor;
)";
const char* const kRunner = R"(
extern "C" void fj_emulate(const void* params, int grid, int threads) {
    const fj_column_params p = *static_cast<const fj_column_params*>(params);
    std::barrier<> bar(threads);
    fj_bar = &bar;
    for (int b = 0; b < grid; ++b) {
        std::vector<std::thread> ts;
        for (int t = 0; t < threads; ++t)
            ts.emplace_back([=] {
                blockIdx.x = b; blockDim.x = threads; gridDim.x = grid; threadIdx.x = t;
                FJ_NAME(p);
            });
        for (std::thread& th : ts) th.join();
    }
}
)";

std::string host_compiler() {
    std::vector<std::string> cands;
    if (const char* c = std::getenv("FJ_TEST_CXX")) cands.push_back(c);
    cands.push_back("c++");
    cands.push_back("g++");
    for (const std::string& c : cands)
        if (std::system((c + " --version > /dev/null 2>&1").c_str()) == 0) return c;
    return "";
}

using Emulate = void (*)(const void*, int, int);

// The kernel of `dtype` compiled for the host and loaded; null (with a message) without a host compiler.
Emulate emulated_kernel(fj::DType dtype) {
    const std::string cxx = host_compiler();
    if (cxx.empty()) {
        MESSAGE("skipped: no host C++ compiler (FJ_TEST_CXX, c++, g++) to run the column kernel on");
        return nullptr;
    }
    std::filesystem::create_directories(FJ_TEST_TMP);
    const std::string stem = std::string(FJ_TEST_TMP) + "/column_kernel_" + std::string(fj::dtype_name(dtype));
    std::ofstream(stem + ".cpp") << kShim << fj::rt::cuda::column_kernels_source(dtype) << kRunner;
    const std::string cmd = cxx + " -std=c++20 -O1 -shared -fPIC -pthread -w -o " + stem + ".so " + stem + ".cpp > " + stem +
                            ".log 2>&1";
    if (std::system(cmd.c_str()) != 0) {
        std::ifstream log(stem + ".log");
        FAIL_CHECK("host compile of the column kernel failed: " << std::string(std::istreambuf_iterator<char>(log), {}));
        return nullptr;
    }
    void* so = dlopen((stem + ".so").c_str(), RTLD_NOW | RTLD_LOCAL);  // (kept for the process)
    REQUIRE_MESSAGE(so != nullptr, dlerror());
    return reinterpret_cast<Emulate>(dlsym(so, "fj_emulate"));
}

// `stat` over x (rows x cols, ld = cols) through the emulated kernel, `threads` a block, the block's arrays in shared
// memory or in a global scratch area of `grid` blocks.
template <class T>
std::vector<double> emulate(Emulate run, const fj::Node* stat, const std::vector<double>& x, std::int64_t rows,
                            std::int64_t cols, int threads, bool scratch, int grid) {
    namespace cu = fj::rt::cuda;
    const cu::ColumnLaunch l = cu::column_kernel_launch(stat->d, rows, cols, 1 << 22, 1);
    std::vector<T> in(x.begin(), x.end()), out(x.size(), T(-777));
    std::vector<unsigned char> area(scratch ? static_cast<std::size_t>(grid * l.bytes) : 0);
    const double q = stat->op == fj::Op::WMedian ? 0.5 : stat->value;
    std::uint64_t q_bits = 0;
    std::memcpy(&q_bits, &q, sizeof q);
    std::uint64_t w[cu::kColumnKernelParamWords] = {reinterpret_cast<std::uint64_t>(in.data()), static_cast<std::uint64_t>(cols),
                                                    reinterpret_cast<std::uint64_t>(out.data()), static_cast<std::uint64_t>(cols),
                                                    static_cast<std::uint64_t>(rows), static_cast<std::uint64_t>(cols),
                                                    static_cast<std::uint64_t>(cu::column_kernel_op_code(stat->op)),
                                                    static_cast<std::uint64_t>(stat->d),
                                                    static_cast<std::uint64_t>(std::max(stat->min_periods, 1)), q_bits,
                                                    static_cast<std::uint64_t>(l.padded), static_cast<std::uint64_t>(l.tile),
                                                    static_cast<std::uint64_t>(l.bits), static_cast<std::uint64_t>(l.tiles),
                                                    scratch ? reinterpret_cast<std::uint64_t>(area.data()) : 0,
                                                    static_cast<std::uint64_t>(l.bytes)};
    run(w, scratch ? grid : static_cast<int>(l.grid), threads);
    return std::vector<double>(out.begin(), out.end());
}
#endif

}  // namespace

TEST_SUITE("column_steps") {

TEST_CASE("the planner: a column step for ts_rank, median and quantile at d >= 64, halos along chains, explain") {
    using fj::codegen::make_plan;
    // d = 63 fuses; d = 64 is a column step of its own, halo 63.
    const auto fused = make_plan({{"r", fj::ts_rank(fj::window(A, 63))}});
    REQUIRE(fused.steps.size() == 1);
    CHECK(fused.steps[0].kind == StepKind::TimeSeries);
    for (const Expr& e : {fj::ts_rank(fj::window(A, 64)), fj::median(fj::window(A, 100, 10)), fj::quantile(fj::window(A, 250), 0.3)}) {
        const auto p = make_plan({{"r", e}});
        REQUIRE(p.steps.size() == 1);
        CHECK(p.steps[0].kind == StepKind::Column);
        CHECK(p.steps[0].column_op() == e.node());
        CHECK(p.steps[0].row_op() == nullptr);
        CHECK(p.steps[0].kernel.inputs == std::vector<std::string>{"A"});
        CHECK(p.steps[0].kernel.outputs == std::vector<std::string>{"r"});
        CHECK(p.steps[0].kernel.halo == e.node()->d - 1);
        CHECK(p.halo == e.node()->d - 1);
        CHECK(fj::codegen::explain(p).find("column (" + std::string(fj::op_name(e.op()))) != std::string::npos);
    }
    // Its argument computed by a time-series step, its result read by a fused operator and by a row step: the
    // chain halo adds up (19 + 99 + 9).
    const Expr inner = fj::mean(fj::window(A, 20));
    const Expr tr = fj::ts_rank(fj::window(inner, 100));
    const auto p = make_plan({{"x", fj::mean(fj::window(tr, 10))}, {"y", fj::rank(tr)}});
    CHECK(count_column_steps(p) == 1);
    CHECK(p.halo == 19 + 99 + 9);
    const fj::codegen::Step* col = nullptr;
    for (const auto& s : p.steps)
        if (s.kind == StepKind::Column) col = &s;
    REQUIRE(col != nullptr);
    CHECK(col->chain_halo == 19 + 99);
    // Off (the fused lowering at any d): no column step.
    fj::codegen::PlanOptions off;
    off.column_steps = false;
    CHECK(count_column_steps(make_plan({{"r", fj::ts_rank(fj::window(A, 250))}}, fj::DType::F32, off)) == 0);
    // Other windows over 64 rows stay fused.
    CHECK(count_column_steps(make_plan({{"m", fj::mean(fj::window(A, 250))}, {"a", fj::argmax(fj::window(A, 100))}})) == 0);
}

TEST_CASE_TEMPLATE_DEFINE("ts_rank, median and quantile at d = 64, 100, 250 against the reference", T, column_ops) {
    if (!fj::test::available<T>()) return;
    for (const Dataset& ds : all_data())
        for (int d : {64, 100, 250}) fj::test::check_against_reference(stat_cases(A, d), ds, T::dtype, T::options());
}
TEST_CASE_TEMPLATE_APPLY(column_ops, fj::test::CpuTargets);
TEST_CASE_TEMPLATE_APPLY(column_ops, fj::test::CudaTargets);

TEST_CASE_TEMPLATE_DEFINE("mixed with fused operators: reading the column step's result and feeding it", T, column_mixed) {
    if (!fj::test::available<T>()) return;
    const NamedExprs prog = {
        {"rank_of_ts_rank", fj::rank(fj::ts_rank(fj::window(A, 100)))},
        {"ts_rank_of_product", fj::ts_rank(fj::window(A * B, 250)) + fj::mean(fj::window(A, 20))},
        {"median_of_mean", fj::median(fj::window(fj::mean(fj::window(A, 5)), 64, 32))},
        {"mean_of_quantile", fj::mean(fj::window(fj::quantile(fj::window(B, 80, 40), 0.75), 10))},
        {"short_and_long", fj::ts_rank(fj::window(A, 20)) - fj::ts_rank(fj::window(A, 120, 60))},
        {"ts_rank_of_rank", fj::ts_rank(fj::window(fj::rank(B), 70))},
    };
    for (const Dataset& ds : all_data()) fj::test::check_against_reference(prog, ds, T::dtype, T::options());
    // The same program from formula text.
    const NamedExprs parsed = {{"p", fj::parse("ts_rank(close * volume, 250) + mean(window(close, 20))")},
                               {"q", fj::parse("rank(ts_rank(close, 100))")}};
    Dataset ds = fj::test::dataset("price, messy", 600, 13, fj::test::messy(Flavour::Price), 41, {"close", "volume"});
    fj::test::check_against_reference(parsed, ds, T::dtype, T::options());
}
TEST_CASE_TEMPLATE_APPLY(column_mixed, fj::test::CpuTargets);
TEST_CASE_TEMPLATE_APPLY(column_mixed, fj::test::CudaTargets);

TEST_CASE_TEMPLATE_DEFINE("time tiles and chunks over time: bitwise the unchunked run", T, column_chunks) {
    if (!fj::test::available<T>()) return;
    const Dataset ds = hostile_data(2600, 18, 51);
    NamedExprs prog = stat_cases(A, 250);  // (a column step on both backends)
    // Against the reference with short time tiles (the column step's tiles follow CompileOptions::tile_rows),
    // with a chain: a fused step's result read by a column step.
    fj::CompileOptions tiles;
    tiles.tile_rows = 300;
    NamedExprs with_chain = prog;
    with_chain.push_back({"chain", fj::median(fj::window(fj::mean(fj::window(A, 5)), 64, 32))});
    fj::test::check_against_reference(with_chain, ds, T::dtype, T::options(tiles));
    CheckOptions chunks_of_300;
    chunks_of_300.runner = [](const fj::Program& p, const std::map<std::string, fj::Panel>& in,
                              const std::map<std::string, fj::Panel>& out) {
        fj::RunOptions ro;
        ro.chunk_rows = 300;
        p.run(in, out, ro);
    };
    fj::test::check_against_reference(with_chain, ds, T::dtype, T::options(), chunks_of_300);
    // Whole-panel runs and chunked runs (chunks of 257 and 1,000 rows) of the column steps alone give the same
    // bits: each window is computed from its own values (a running-sum kernel's chunks only hold the contract).
    const auto whole = fj::test::compile_and_run(prog, ds.inputs, ds.rows, ds.cols, T::dtype, T::options());
    REQUIRE(whole);
    for (std::int64_t chunk : {257, 1000}) {
        CheckOptions check;
        check.runner = [chunk](const fj::Program& p, const std::map<std::string, fj::Panel>& in,
                               const std::map<std::string, fj::Panel>& out) {
            fj::RunOptions ro;
            ro.chunk_rows = chunk;
            p.run(in, out, ro);
        };
        const auto chunked = fj::test::compile_and_run(prog, ds.inputs, ds.rows, ds.cols, T::dtype, T::options(), check);
        REQUIRE(chunked);
        for (const auto& [name, v] : *whole) {
            const std::vector<double>& w = chunked->at(name);
            std::int64_t differ = 0;
            for (std::size_t i = 0; i < v.size(); ++i) differ += !fj::test::same_value(v[i], w[i]);
            CHECK_MESSAGE(differ == 0, name << ": chunks of " << chunk << " rows: " << differ << " cells differ from the unchunked run");
        }
    }
}
TEST_CASE_TEMPLATE_APPLY(column_chunks, fj::test::CpuTargets);
TEST_CASE_TEMPLATE_APPLY(column_chunks, fj::test::CudaTargets);

TEST_CASE("the CPU's column-step code at every d: the reference, and bitwise the fused O(d) lowering") {
#ifndef FJ_WITH_LLVM
    MESSAGE("skipped: this build has no CPU backend");
#else
    // (The backend runs windows shorter than cpu::kColumnStepCpuWindow fused: here the column code runs them, on
    // short tiles too.)
    for (const Dataset& ds : {hostile_data(700, 19, 61), ties_data(600, 17, 62)})
        for (fj::DType dtype : {fj::DType::F64, fj::DType::F32}) {
            const fj::test::Inputs data = fj::test::as_dtype(ds.inputs, dtype);
            NamedExprs prog = stat_cases(A, 64);
            for (const auto& e : stat_cases(A, 100)) prog.push_back(e);
            std::vector<fj::Expr> roots;
            for (const auto& [name, e] : prog) roots.push_back(e);
            const auto refs = fj::test::reference(roots, data, ds.rows, ds.cols);
            std::vector<std::vector<double>> col;
            for (std::size_t k = 0; k < prog.size(); ++k) {
                col.push_back(cpu_column_step(prog[k].second.node(), data.at("A"), ds.rows, ds.cols, dtype, k % 2 ? 150 : 0));
                const std::string msg = fj::test::compare_output(col.back(), refs[k], ds.cols, dtype, prog[k].second.node(), {});
                CHECK_MESSAGE(msg.empty(), prog[k].first << " (" << fj::dtype_name(dtype) << ", " << ds.label << "): " << msg);
            }
            const auto fused = run_plan(prog, data, ds.rows, ds.cols, dtype, false);
            for (std::size_t k = 0; k < prog.size(); ++k) {
                std::int64_t differ = 0, first = -1;
                // Bitwise but for the sign of a zero (the column step's zeros are +0; the definition does not tell them apart).
                for (std::size_t i = 0; i < col[k].size(); ++i)
                    if (!fj::test::same_value(col[k][i], fused[k][i]) && !(col[k][i] == 0 && fused[k][i] == 0) && differ++ == 0)
                        first = static_cast<std::int64_t>(i);
                CHECK_MESSAGE(differ == 0, prog[k].first << " (" << fj::dtype_name(dtype) << ", " << ds.label << "): " << differ
                                                         << " cells differ; first at " << first << ": column "
                                                         << fj::test::fmt_num(first >= 0 ? col[k][static_cast<std::size_t>(first)] : 0)
                                                         << ", fused "
                                                         << fj::test::fmt_num(first >= 0 ? fused[k][static_cast<std::size_t>(first)] : 0));
            }
        }
#endif
}

TEST_CASE("a column step of a panel shorter than its window, a single column, and explain() after a run") {
    if (!fj::rt::cpu_backend()) {
        MESSAGE("skipped: this build has no CPU backend");
        return;
    }
    for (const auto& [rows, cols] : {std::pair<std::int64_t, std::int64_t>{40, 5}, {300, 1}, {1, 3}}) {
        const Dataset ds = fj::test::dataset("price, messy", rows, cols, fj::test::messy(Flavour::Price), 71);
        fj::test::check_against_reference(stat_cases(A, 64), ds, fj::DType::F64, fj::test::CpuF64::options());
    }
    fj::CompileOptions co;
    co.backend = fj::Backend::Cpu;
    fj::Program p = fj::compile({{"r", fj::ts_rank(fj::window(A, 250))}, {"s", fj::ts_rank(fj::window(A, 100))}}, co);
    std::vector<double> a(300 * 4, 1.0), r(300 * 4), r2(300 * 4);
    p.run({{"A", fj::Panel::host(a.data(), 300, 4)}}, {{"r", fj::Panel::host(r.data(), 300, 4)}, {"s", fj::Panel::host(r2.data(), 300, 4)}});
    CHECK(r[299 * 4] == 0.5 * (0 + 250 + 1) / 250);  // all tied: the middle rank
    CHECK(std::isnan(r[248 * 4]));                     // 249 values, min_periods 250
    CHECK(r2[299 * 4] == 0.5 * (0 + 100 + 1) / 100);
    const std::string ex = p.explain();
    CHECK(ex.find("column step") != std::string::npos);  // d = 250: the column code
    CHECK(ex.find("fused: shorter than") != std::string::npos);  // d = 100: fused on the CPU
}

TEST_CASE("the CUDA column kernel, run on the host: bitwise the CPU's column steps (tiles, shared memory and scratch)") {
#ifndef FJ_WITH_CUDA
    MESSAGE("skipped: this build has no CUDA backend");
#else
#ifndef FJ_WITH_LLVM
    MESSAGE("skipped: this build has no CPU backend");
#else
    const Dataset ds = hostile_data(2100, 5, 81);  // d = 64: tiles of 961 rows, three a column
    for (fj::DType dtype : {fj::DType::F64, fj::DType::F32}) {
        CAPTURE(fj::dtype_name(dtype));
        const Emulate run = emulated_kernel(dtype);
        if (!run) return;
        const fj::test::Inputs data = fj::test::as_dtype(ds.inputs, dtype);
        NamedExprs prog = {{"r64", fj::ts_rank(fj::window(A, 64, 10))}, {"m64", fj::median(fj::window(A, 64))},
                           {"q250", fj::quantile(fj::window(A, 250, 1), 0.3)}, {"r250", fj::ts_rank(fj::window(A, 250))},
                           {"q100", fj::quantile(fj::window(A, 100, 0), 1.0)}};
        std::vector<std::vector<double>> cpu;
        for (const auto& [name, e] : prog) cpu.push_back(cpu_column_step(e.node(), data.at("A"), ds.rows, ds.cols, dtype));
        for (std::size_t k = 0; k < prog.size(); ++k)
            for (const bool scratch : {false, true}) {
                const fj::Node* stat = prog[k].second.node();
                const std::vector<double> got =
                    dtype == fj::DType::F64 ? emulate<double>(run, stat, data.at("A"), ds.rows, ds.cols, 8, scratch, 2)
                                            : emulate<float>(run, stat, data.at("A"), ds.rows, ds.cols, 8, scratch, 2);
                std::int64_t differ = 0, first = -1;
                for (std::size_t i = 0; i < got.size(); ++i)
                    if (!fj::test::same_value(got[i], cpu[k][i]) && differ++ == 0) first = static_cast<std::int64_t>(i);
                CHECK_MESSAGE(differ == 0, prog[k].first << (scratch ? " (scratch)" : " (shared memory)") << ": " << differ
                                                         << " cells differ from the CPU's; first at row " << first / ds.cols
                                                         << ", column " << first % ds.cols << ": kernel "
                                                         << fj::test::fmt_num(first >= 0 ? got[static_cast<std::size_t>(first)] : 0)
                                                         << ", CPU "
                                                         << fj::test::fmt_num(first >= 0 ? cpu[k][static_cast<std::size_t>(first)] : 0));
            }
    }
#endif
#endif
}

}  // TEST_SUITE
