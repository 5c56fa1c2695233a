// The generated CUDA kernels run without a GPU: the emitter's source is compiled as C++ for the host
// (a small shim maps blockIdx, __longlong_as_double, rsqrt, ... to host code), every thread of the launch
// grid is run in turn, and the results are held to the reference like the CPU backend's. This checks what
// NVRTC cannot: that the emitted code computes the right thing (rings, warm-up rows, tiles, guards,
// integer and float32 shortcuts), on CI machines that have no GPU. Skips with a message when no host C++
// compiler is found (FJ_TEST_CXX, else c++, else g++).
#include <doctest/doctest.h>

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "backend_cases.hpp"
#include "codegen/cuda/emit.hpp"
#include "codegen/cuda/select.hpp"
#include "codegen/plan.hpp"
#include "cuda_cases.hpp"
#include "refold_cases.hpp"
#include "test_data.hpp"

#ifdef FJ_WITH_CUDA
#include "runtime/cuda/compile.hpp"
#include "runtime/cuda/launch_config.hpp"

namespace {

const char* const kShim = R"(// Host stand-ins for what generated CUDA kernels use (fabsf comes from the C library).
#include <algorithm>
#include <cmath>
#include <math.h>
#include <cstring>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>
struct fj_dim3 { unsigned x = 0, y = 0, z = 0; };
static thread_local fj_dim3 blockIdx, blockDim, threadIdx, gridDim;
#define __global__
#define __launch_bounds__(...)
#define __restrict__ __restrict
static inline double __longlong_as_double(long long v) { double d; std::memcpy(&d, &v, 8); return d; }
static inline long long __double_as_longlong(double d) { long long v; std::memcpy(&v, &d, 8); return v; }
static inline float __int_as_float(unsigned v) { float f; std::memcpy(&f, &v, 4); return f; }
#define FJ_PREFETCH_L2(a) ((void)(a))
#define FJ_PREFETCH_L1(a) ((void)(a))
#define FJ_POLICY_KEEP(pol) ((pol) = 0)
#define FJ_LD_KEEP(v, a, pol) ((v) = *(a))
#define FJ_LD_LAST(v, a) ((v) = *(a))
#define FJ_ST_STREAM(a, v) (*(a) = (v))
#define __device__
#define __forceinline__ inline
// Shared memory (echo rings, window-scan rings): a static array standing for the block's.
alignas(16) static unsigned char fj_block_smem[1 << 20];  // one block runs at a time
#define FJ_SMEM_DECL unsigned char* const fj_smem = fj_block_smem
// Window-scan kernels: a block's threads are threads here, its barriers a std::barrier; copies are done at once.
static std::barrier<>* fj_bar = nullptr;
static inline void __syncthreads() { fj_bar->arrive_and_wait(); }
static inline unsigned atomicOr(unsigned* a, unsigned v) {  // (column scans run one thread at a time)
    const unsigned old = *a;
    *a = old | v;
    return old;
}
static inline int atomicMax(int* a, int v) {
    std::atomic_ref<int> r(*a);
    int old = r.load();
    while (old < v && !r.compare_exchange_weak(old, v)) {}
    return old;
}
#define FJ_SYNC() __syncthreads()
// Tensor copies land at once. The mbarriers are modelled: init(count), arrivals that announce bytes
// (expect_tx), copies that deliver them; a phase completes when all `count` threads have arrived and every
// announced byte has landed, and a wait for a phase's parity spins until then. A wait that does not end
// within 20 s (a phase announced wrongly or never) sets fj_tx_errors and returns.
struct fj_mbar_model { int count = 0, arrived = 0; long long tx = 0; unsigned phase = 0; };
static std::mutex fj_mbar_mutex;
static fj_mbar_model fj_mbars[1024];
static std::atomic<int> fj_tx_bad{0};
extern "C" int fj_tx_errors() { return fj_tx_bad.load(); }
static inline fj_mbar_model& fj_mbar(unsigned bar) {
    if (bar % 8 != 0) fj_tx_bad = 1;
    return fj_mbars[(bar / 8) % 1024];
}
static inline void fj_mbar_settle(fj_mbar_model& m) {
    if (m.arrived == m.count && m.tx == 0) { m.arrived = 0; ++m.phase; }
}
static inline void fj_mbar_init(unsigned bar, int n) { std::lock_guard<std::mutex> g(fj_mbar_mutex); fj_mbar(bar) = {n, 0, 0, 0}; }
static inline void fj_mbar_expect(unsigned bar, unsigned bytes) {
    std::lock_guard<std::mutex> g(fj_mbar_mutex);
    fj_mbar_model& m = fj_mbar(bar);
    m.tx += bytes;
    ++m.arrived;
    if (m.arrived > m.count) fj_tx_bad = 1;
    fj_mbar_settle(m);
}
static inline void fj_mbar_arrive(unsigned bar) {
    std::lock_guard<std::mutex> g(fj_mbar_mutex);
    fj_mbar_model& m = fj_mbar(bar);
    ++m.arrived;
    if (m.arrived > m.count) fj_tx_bad = 1;
    fj_mbar_settle(m);
}
static inline void __syncwarp() {}  // (chained window scans: only a hint to the compiler there)
// Warp votes (quiet batches): in window-scan kernels, whose threads run at once, the warp's 32 threads meet
// at its barrier with their votes counted, read the count, and meet again before it is cleared for the next
// vote; in column scans, whose threads run one after the other, each thread votes alone (a lane then runs
// the quiet rows exactly where its own rows are quiet, which is what the real vote's answer implies of
// every lane). The votes that came out true and false are counted for the tests (fj_votes).
struct fj_warp { std::barrier<> bar{32}; std::atomic<int> no{0}; };
static fj_warp* fj_warps = nullptr;  // [block / 32], set by the window-scan runner
static std::atomic<long long> fj_votes_all{0}, fj_votes_not{0};
extern "C" void fj_votes(long long* all, long long* not_all) { *all = fj_votes_all.exchange(0); *not_all = fj_votes_not.exchange(0); }
static inline unsigned __activemask() { return 0xffffffffu; }
static inline bool __all_sync(unsigned, bool v) {
    if (!fj_warps) {
        ++(v ? fj_votes_all : fj_votes_not);
        return v;
    }
    fj_warp& w = fj_warps[threadIdx.x / 32];
    if (!v) ++w.no;
    w.bar.arrive_and_wait();
    const bool all = w.no.load() == 0;
    w.bar.arrive_and_wait();
    if (threadIdx.x % 32 == 0) {
        w.no = 0;
        ++(all ? fj_votes_all : fj_votes_not);
    }
    w.bar.arrive_and_wait();
    return all;
}
// A tensor map here: {panel, ld, rows, cols, box rows} (the runner fills them; kWindowScanColumns columns).
struct alignas(128) fj_tmap { unsigned long long w[16]; };
static inline void fj_tma(unsigned dst, unsigned long long map, int x, int y, unsigned bar) {
    const fj_tmap& m = *reinterpret_cast<const fj_tmap*>(map);
    const float* panel = reinterpret_cast<const float*>(m.w[0]);
    const long long ld = (long long)m.w[1], rows = (long long)m.w[2], cols = (long long)m.w[3], box_rows = (long long)m.w[4];
    if (dst % 128 != 0 || x % 4 != 0) fj_tx_bad = 1;
    float* to = reinterpret_cast<float*>(fj_block_smem + dst);
    for (long long r = 0; r < box_rows; ++r)
        for (long long c = 0; c < 32; ++c)  // zeros out of bounds
            to[r * 32 + c] = y + r < rows && x + c < cols ? panel[(y + r) * ld + x + c] : 0.0f;
    std::lock_guard<std::mutex> g(fj_mbar_mutex);
    fj_mbar_model& mb = fj_mbar(bar);
    mb.tx -= box_rows * 32 * 4;
    fj_mbar_settle(mb);
}
static inline void fj_mbar_wait(unsigned bar, unsigned parity) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);  // (after one failure: at once)
    for (;;) {
        {
            std::lock_guard<std::mutex> g(fj_mbar_mutex);
            if ((fj_mbar(bar).phase & 1u) != parity) return;
        }
        if (fj_tx_bad || std::chrono::steady_clock::now() > until) { fj_tx_bad = 1; return; }
        std::this_thread::yield();
    }
}
#define FJ_TMA(dst, map, x, y, bar) fj_tma(dst, map, x, y, bar)
#define __grid_constant__
#define FJ_MBAR_INIT(bar, n) fj_mbar_init(bar, n)
#define FJ_MBAR_INIT_FENCE() ((void)0)
#define FJ_MBAR_EXPECT(bar, bytes) fj_mbar_expect(bar, bytes)
#define FJ_MBAR_ARRIVE(bar) fj_mbar_arrive(bar)
#define FJ_MBAR_WAIT(bar, parity) fj_mbar_wait(bar, parity)
#define FJ_SHARED_ADDR(p) ((unsigned)(reinterpret_cast<const unsigned char*>(p) - fj_smem))
// The hardware estimate as the H200's is (rsqrt.approx.f64: the high word of a double, relative error about
// 2^-20): the exact value rounded to 20 bits after the point, so that the Newton step after it is what makes
// results right.
static inline double fj_rsqrt_estimate(double a) {
    unsigned long long b;
    const double y = 1.0 / std::sqrt(a);
    std::memcpy(&b, &y, 8);
    b = (b + 0x80000000ULL) & ~0xffffffffULL;
    double r;
    std::memcpy(&r, &b, 8);
    return r;
}
#define FJ_RSQRT_ESTIMATE(y, a) ((y) = fj_rsqrt_estimate(a))
using std::min; using std::max;
static inline int __double2hiint(double d) { long long v; std::memcpy(&v, &d, 8); return (int)(v >> 32); }
static inline double __drcp_rn(double a) { return 1.0 / a; }
static inline double rsqrt(double a) { return 1.0 / std::sqrt(a); }
using std::sqrt; using std::exp; using std::log; using std::pow; using std::floor; using std::fabs; using std::fma;
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

// One shared object holding the kernels of several plans, each with a runner that walks the grid.
// Which kernels an Emulated library holds.
struct EmuKind {
    long long ld_in = 0, ld_out = 0;  // > 0: kernels specialised on these leading dimensions (CudaEmitOptions::strides)
    // Window-scan kernels (CudaEmitOptions::window_scan), run with a thread per CUDA thread, scan_ahead batches
    // copied ahead (0: the default); chain: chained window scans.
    bool window_scan = false;
    int scan_ahead = 0;
    bool chain = false;
    int unroll = 3;         // rows per load batch (CudaEmitOptions::unroll)
    bool one_loop = false;  // generic kernels in one guarded loop (CudaEmitOptions::one_loop)
    // Specialised kernels with echo rings (CudaEmitOptions::echo_rings) instead of loads of the leaving rows.
    bool echo = false;
    // Chained window scans: quiet batches (CudaEmitOptions::quiet_batches).
    bool quiet = true;
    // Column scans of kernels with refolds as the runtime runs them: the kernel raising repair flags
    // (ir::flag_refolds), then the repair pass (codegen::select_repair_kernel) over the flagged passes.
    bool repair = false;
};

class Emulated {
public:
    Emulated(const std::vector<const fj::ir::Kernel*>& kernels, fj::DType dtype, const std::string& dir,
             const std::string& cxx, const EmuKind& kind = {})
        : window_scan_(kind.window_scan),
          scan_warps_(kind.chain ? fj::codegen::kWindowScanChainWarps : fj::codegen::kWindowScanWarps),
          chain_(kind.chain) {
        const auto& [ld_in, ld_out, window_scan, scan_ahead, chain, unroll, one_loop, echo, quiet, repair] = kind;
        std::string src = kShim;
        auto runner = [](const std::string& name) {
            return "extern \"C\" void run_" + name + "(const void* w, unsigned gx, unsigned gy, unsigned block) {\n"
                   "  blockDim.x = block; gridDim.x = gx; gridDim.y = gy;\n"
                   "  for (unsigned y = 0; y < gy; ++y) for (unsigned x = 0; x < gx; ++x) for (unsigned t = 0; t < block; ++t) {\n"
                   "    blockIdx.x = x; blockIdx.y = y; threadIdx.x = t;\n"
                   "    " + name + "(*static_cast<const fj_params_" + name + "*>(w));\n  }\n}\n";
        };
        for (std::size_t i = 0; i < kernels.size(); ++i) {
            fj::ir::Kernel k = *kernels[i];
            k.name = "fj_emu" + std::to_string(i);  // kernel names of different plans may coincide
            const bool flags = repair && !k.refolds.empty() && !window_scan;
            repairs_.push_back(flags);
            if (flags) {  // the repair pass, and the kernel raising its flags
                fj::ir::Kernel r = k;
                r.name += "_repair";
                src += "#undef FJ_NAN\n" + fj::codegen::emit_cuda(r, fj::codegen::select_repair_kernel(dtype, {}).options) + runner(r.name);
                k = fj::ir::flag_refolds(k);
            }
            fj::codegen::CudaEmitOptions o;
            o.dtype = dtype;
            o.unroll = unroll;  // 3: not a divisor of the tile lengths used, the remainder loop runs too
            o.one_loop = one_loop;
            if (ld_in > 0) {
                o.l2_prefetch_rows = 5;
                // Register loads with batched edges.
                o.echo_rings = echo;  // (batches of 3 rows become a multiple of the windows' lengths)
                o.echo_min_lag = 1;  // (short windows' rings too)
                o.batched_edges = true;  // first and last rows of a pass in (masked) batches
                o.cache_hints = true;    // hinted loads and stores in the register-load batched loop
                o.strides.assign(k.inputs.size(), ld_in);
                o.strides.insert(o.strides.end(), k.outputs.size(), ld_out);
            }
            o.window_scan = window_scan;
            o.window_scan_ahead = scan_ahead;
            o.window_scan_chain = chain;
            o.quiet_batches = quiet;
            box_rows_.push_back(window_scan ? fj::codegen::cuda_window_scan_layout(k, o).box_rows : 0);
            src += "#undef FJ_NAN\n" + fj::codegen::emit_cuda(k, o);
            if (window_scan) {
                src += "extern \"C\" void run_" + k.name + "(const void* w, unsigned gx, unsigned gy, unsigned block) {\n"
                       "  for (unsigned y = 0; y < gy; ++y) for (unsigned x = 0; x < gx; ++x) {\n"
                       "    std::barrier<> bar(block);\n    fj_bar = &bar;\n    std::vector<std::thread> ts;\n"
                       "    std::unique_ptr<fj_warp[]> warps(new fj_warp[block / 32]);\n    fj_warps = warps.get();\n"
                       "    for (unsigned t = 0; t < block; ++t) ts.emplace_back([=] {\n"
                       "      blockDim.x = block; gridDim.x = gx; gridDim.y = gy; blockIdx.x = x; blockIdx.y = y; threadIdx.x = t;\n"
                       "      " + k.name + "(*static_cast<const fj_params_" + k.name + "*>(w));\n    });\n"
                       "    for (auto& th : ts) th.join();\n    fj_warps = nullptr;\n  }\n}\n";
                continue;
            }
            src += runner(k.name);
        }
        // (One file per variant: dlopen of a path already loaded returns the library loaded first.)
        const std::string stem = dir + "/emulated_" + std::string(fj::dtype_name(dtype)) + (ld_in > 0 ? "_fixed" : "") +
                                 (echo ? "_echo" : "") + (one_loop ? "_oneloop" : "") + "_u" + std::to_string(unroll) +
                                 (window_scan ? "_scan" + std::to_string(ld_in) : "") + (chain ? "_chain" : "") +
                                 (!quiet ? "_noquiet" : "") + (repair ? "_repair" : "");
        std::ofstream(stem + ".cpp") << src;
        const std::string cmd = cxx + " -std=c++20 -O1 -shared -fPIC -pthread -w -o " + stem + ".so " + stem + ".cpp > " +
                                stem + ".log 2>&1";
        if (std::system(cmd.c_str()) != 0) {
            std::ifstream log(stem + ".log");
            error_ = "host compilation failed: " + std::string(std::istreambuf_iterator<char>(log), {});
            return;
        }
        so_ = dlopen((stem + ".so").c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!so_) error_ = dlerror();
    }
    ~Emulated() {
        if (so_) dlclose(so_);
    }
    const std::string& error() const { return error_; }

    // The warp votes that came out true and not true since the last call (chained scans' quiet batches).
    std::pair<long long, long long> votes() const {
        void* at = dlsym(so_, "fj_votes");
        REQUIRE(at != nullptr);
        long long all = 0, not_all = 0;
        reinterpret_cast<void (*)(long long*, long long*)>(at)(&all, &not_all);
        return {all, not_all};
    }

    // Runs kernel i of the list on host panels, with the launch shape the backend would use.
    void run(std::size_t i, const fj::ir::Kernel& k, const std::map<std::string, fj::Panel>& in,
             const std::map<std::string, fj::Panel>& out, std::int64_t tile_rows) const {
        using Fn = void (*)(const void*, unsigned, unsigned, unsigned);
        void* sym = dlsym(so_, ("run_fj_emu" + std::to_string(i)).c_str());
        REQUIRE(sym != nullptr);
        auto fn = reinterpret_cast<Fn>(sym);
        const fj::Panel& p0 = out.begin()->second;
        fj::rt::cuda::LaunchInput li;
        li.rows = p0.rows;
        li.cols = p0.cols;
        li.halo = k.halo;
        li.block = window_scan_ ? 32 * scan_warps_ : 32;
        li.cols_per_block = window_scan_ ? fj::codegen::kWindowScanColumns : 0;
        li.blocks_per_sm = window_scan_ && !chain_ ? 2 : 1;
        li.sm_count = 2;
        if (window_scan_) li.max_grid_y = 2;  // (a thread per CUDA thread: blocks run more tiles each instead)
        li.tile_rows = tile_rows;
        const fj::rt::cuda::LaunchShape s = fj::rt::cuda::choose_launch(li);
        std::vector<std::uint64_t> w;
        for (const auto& n : k.inputs) w.push_back(reinterpret_cast<std::uint64_t>(in.at(n).data));
        for (const auto& n : k.inputs) w.push_back(static_cast<std::uint64_t>(in.at(n).ld));
        for (const auto& n : k.outputs) w.push_back(reinterpret_cast<std::uint64_t>(out.at(n).data));
        for (const auto& n : k.outputs) w.push_back(static_cast<std::uint64_t>(out.at(n).ld));
        for (std::int64_t v : {p0.rows, p0.cols, s.tile_rows, s.ntiles}) w.push_back(static_cast<std::uint64_t>(v));
        std::vector<unsigned> flags;
        if (repairs_[i]) {  // (the runtime: CudaExecutable::run)
            const long long words = fj::codegen::cuda_flag_words(p0.cols);
            flags.assign(static_cast<std::size_t>(s.ntiles * words), 0u);
            w.push_back(reinterpret_cast<std::uint64_t>(flags.data()));
            w.push_back(static_cast<std::uint64_t>(words));
        }
        if (window_scan_) {  // the tensor maps as the shim reads them (the runtime: append_tensor_maps)
            while (w.size() % 16) w.push_back(0);
            for (const auto& n : k.inputs)
                for (int box_rows : {box_rows_[i], fj::codegen::kWindowScanMirrorRows}) {
                    const fj::Panel& p = in.at(n);
                    const std::size_t at = w.size();
                    w.resize(at + 16, 0);
                    w[at] = reinterpret_cast<std::uint64_t>(p.data);
                    w[at + 1] = static_cast<std::uint64_t>(p.ld);
                    w[at + 2] = static_cast<std::uint64_t>(p.rows);
                    w[at + 3] = static_cast<std::uint64_t>(p.cols);
                    w[at + 4] = static_cast<std::uint64_t>(box_rows);
                }
        }
        // (The parameters' struct has 128-byte aligned members: read from storage aligned so.)
        struct alignas(128) Block { std::uint64_t w[16]; };
        std::vector<Block> params((w.size() + 15) / 16);
        std::memcpy(params.data(), w.data(), w.size() * sizeof(std::uint64_t));
        fn(params.data(), static_cast<unsigned>(s.grid_x), static_cast<unsigned>(s.grid_y), static_cast<unsigned>(s.block));
        if (repairs_[i]) {
            flagged_ = 0;
            for (unsigned f : flags) flagged_ += __builtin_popcount(f);
            void* rsym = dlsym(so_, ("run_fj_emu" + std::to_string(i) + "_repair").c_str());
            REQUIRE(rsym != nullptr);
            // Its own block and grid (the runtime's: the repair kernel's block, as many tiles as fit a grid row).
            const unsigned block = 64, gx = static_cast<unsigned>((p0.cols + block - 1) / block);
            reinterpret_cast<Fn>(rsym)(params.data(), gx, static_cast<unsigned>(std::min<std::int64_t>(s.ntiles, 3)), block);
        }
        if (window_scan_) {
            void* at = dlsym(so_, "fj_tx_errors");
            REQUIRE(at != nullptr);
            auto tx_errors = reinterpret_cast<int (*)()>(at);
            CHECK_MESSAGE(tx_errors() == 0, "an mbarrier phase did not complete (bytes announced and copied differ), or a copy was misaligned");
        }
    }

    // The passes (column, tile) whose flag the last run of a kernel with a repair pass raised.
    long long flagged() const { return flagged_; }

private:
    std::vector<bool> repairs_;  // per kernel: run with repair flags and the repair pass
    mutable long long flagged_ = 0;
    bool window_scan_ = false;
    int scan_warps_ = 0;
    bool chain_ = false;
    std::vector<int> box_rows_;  // per kernel: its tensor copies' rows
    void* so_ = nullptr;
    std::string error_;
};

// The host compiler and the folder for the emulated kernels' sources and libraries; false (with a message:
// the test is skipped) when there is no host compiler.
bool emulation_ready(std::string* cxx, std::string* dir) {
    *cxx = host_compiler();
    if (cxx->empty()) {
        MESSAGE("skipped: no host C++ compiler (set FJ_TEST_CXX)");
        return false;
    }
    *dir = std::string(FJ_TEST_TMP) + "/cuda_emulated";
    std::filesystem::create_directories(*dir);
    return true;
}

// Runs a program's kernels (`run`) on the data in host buffers of leading dimensions ld_in / ld_out and
// holds every output to the reference `refs`; the padding must stay as it was.
void check_outputs(const fj::codegen::Plan& plan, const std::vector<fj::Expr>& roots,
                   const std::vector<std::vector<double>>& refs, const fj::test::Inputs& data, std::int64_t rows,
                   std::int64_t cols, fj::DType dtype, long long ld_in, long long ld_out,
                   const std::function<void(const std::map<std::string, fj::Panel>&,
                                            const std::map<std::string, fj::Panel>&)>& run) {
    std::map<std::string, fj::test::HostBuffer> ib, ob;
    std::map<std::string, fj::Panel> ip, op;
    for (const auto& [n, v] : data) {
        ib.emplace(n, fj::test::HostBuffer(dtype, rows, cols, ld_in));
        ib.at(n).load(v, 7.7e30);
    }
    for (const auto& n : plan.outputs) {
        ob.emplace(n, fj::test::HostBuffer(dtype, rows, cols, ld_out));
        ob.at(n).fill(12345.0, -3.3e33);
    }
    for (auto& [n, b] : ib) ip.emplace(n, b.panel());
    for (auto& [n, b] : ob) op.emplace(n, b.panel());
    run(ip, op);
    for (std::size_t k = 0; k < plan.outputs.size(); ++k) {
        const fj::test::HostBuffer& b = ob.at(plan.outputs[k]);
        const std::string msg = fj::test::compare_output(b.cells(), refs[k], cols, dtype, roots[k].node(), {});
        CHECK_MESSAGE(msg.empty(), "`" << roots[k].str() << "`: " << msg);
        CHECK_MESSAGE(b.padding_changed(-3.3e33).empty(), "`" << roots[k].str() << "` wrote padding");
    }
}

// Host panels of leading dimension ld for an emulated run: the inputs loaded (padding in_pad), the outputs
// filled with 12345 (padding out_pad).
struct HostPanels {
    std::map<std::string, fj::test::HostBuffer> in_buf, out_buf;
    std::map<std::string, fj::Panel> in, out;
    HostPanels(const fj::test::Inputs& inputs, const std::vector<std::string>& outputs, fj::DType dtype, std::int64_t rows,
               std::int64_t cols, long long ld, double in_pad, double out_pad) {
        for (const auto& [n, v] : inputs) {
            in_buf.emplace(n, fj::test::HostBuffer(dtype, rows, cols, ld));
            in_buf.at(n).load(v, in_pad);
            in.emplace(n, in_buf.at(n).panel());
        }
        for (const auto& n : outputs) {
            out_buf.emplace(n, fj::test::HostBuffer(dtype, rows, cols, ld));
            out_buf.at(n).fill(12345.0, out_pad);
            out.emplace(n, out_buf.at(n).panel());
        }
    }
};

// Every case as a program of its own, then the fused outputs as one program, and their plans.
struct Programs {
    std::vector<std::vector<std::pair<std::string, fj::Expr>>> outputs;
    std::vector<fj::codegen::Plan> plans;
};
Programs programs_of(const std::vector<std::pair<std::string, fj::Expr>>& cases,
                     const std::vector<std::pair<std::string, fj::Expr>>& fused, fj::DType dtype) {
    Programs pr;
    for (const auto& c : cases) pr.outputs.push_back({c});
    pr.outputs.push_back(fused);
    for (const auto& p : pr.outputs) pr.plans.push_back(fj::codegen::make_plan(p, dtype));
    return pr;
}

// Runs emulated kernel q (the one region of program index[q]) with each tile length on the dataset, in
// panels of leading dimension ld, and holds every output to the reference.
void check_emulated(const Emulated& emu, const std::vector<std::size_t>& index, const Programs& pr,
                    const fj::test::Dataset& ds, fj::DType dtype, long long ld, std::initializer_list<std::int64_t> tiles) {
    const fj::test::Inputs data = fj::test::as_dtype(ds.inputs, dtype);
    for (std::int64_t tile : tiles) {
        CAPTURE(tile);
        for (std::size_t q = 0; q < index.size(); ++q) {
            const std::size_t pi = index[q];
            CAPTURE(pi);
            const fj::codegen::Plan& plan = pr.plans[pi];
            std::vector<fj::Expr> roots;
            for (const auto& [name, e] : pr.outputs[pi]) roots.push_back(e);
            const auto refs = fj::test::reference(roots, data, ds.rows, ds.cols);
            check_outputs(plan, roots, refs, data, ds.rows, ds.cols, dtype, ld, ld,
                          [&](const auto& ip, const auto& op) { emu.run(q, plan.steps[0].kernel, ip, op, tile); });
        }
    }
}

// A judged case (backend_cases.hpp) on emulated kernels, generic (one guarded loop) and specialised (echo
// rings), each in a folder of its own (`sub`: file names of its own, see Emulated).
void check_judged_emulated(const fj::test::JudgedCase& c, const std::string& cxx, const std::string& dir,
                           const std::string& sub) {
    const fj::codegen::Plan plan = fj::codegen::make_plan(c.exprs, c.dtype);
    std::vector<const fj::ir::Kernel*> kernels;
    for (const auto& r : plan.steps) kernels.push_back(&r.kernel);
    std::vector<fj::Expr> roots;
    for (const auto& [name, e] : c.exprs) roots.push_back(e);
    const auto refs = fj::test::reference(roots, c.ds.inputs, c.ds.rows, c.ds.cols);
    const long long ld = c.ds.cols + 3;
    std::filesystem::create_directories(dir + "/" + sub);
    for (bool specialised : {false, true}) {
        CAPTURE(specialised);
        EmuKind kind{.unroll = 4, .one_loop = !specialised};
        if (specialised) kind = {.ld_in = ld, .ld_out = ld, .echo = true};
        Emulated emu(kernels, c.dtype, dir + "/" + sub, cxx, kind);
        REQUIRE_MESSAGE(emu.error().empty(), emu.error());
        std::map<std::string, fj::test::HostBuffer> ib, ob;
        std::map<std::string, fj::Panel> ip, op;
        for (const auto& [n, v] : c.ds.inputs) {
            ib.emplace(n, fj::test::HostBuffer(c.dtype, c.ds.rows, c.ds.cols, ld));
            ib.at(n).load(v, 0.0);
            ip.emplace(n, ib.at(n).panel());
        }
        for (const auto& n : plan.outputs) {
            ob.emplace(n, fj::test::HostBuffer(c.dtype, c.ds.rows, c.ds.cols, ld));
            ob.at(n).fill(12345.0, 0.0);
            op.emplace(n, ob.at(n).panel());
        }
        for (std::size_t r = 0; r < plan.steps.size(); ++r) emu.run(r, plan.steps[r].kernel, ip, op, 0);
        for (std::size_t k = 0; k < c.exprs.size(); ++k) {
            CAPTURE(c.exprs[k].second.str());
            c.judge(k, ob.at(plan.outputs[k]).cells(), refs[k]);
        }
    }
}

}  // namespace

TEST_SUITE("cuda_compile") {

TEST_CASE("generated kernels, run on the host, match the reference") {
    std::string cxx, dir;
    if (!emulation_ready(&cxx, &dir)) return;
    const auto cases = fj::test::cuda_op_cases();
    fj::test::CheckOptions padded;
    padded.ld_in = 41;
    padded.ld_out = 40;
    const fj::test::Dataset ds = fj::test::dataset("price, messy", 300, 37, fj::test::messy(fj::test::Flavour::Price), 17);
    for (fj::DType dtype : {fj::DType::F64, fj::DType::F32}) {
        CAPTURE(fj::dtype_name(dtype));
        // Every case alone, and all of them in one program (one big kernel).
        std::vector<std::vector<std::pair<std::string, fj::Expr>>> programs;
        for (const auto& c : cases) programs.push_back({c});
        programs.push_back(cases);
        std::vector<fj::codegen::Plan> plans;
        fj::codegen::PlanOptions generated_only;  // (long order statistics fused too: this test runs generated kernels)
        generated_only.column_steps = false;
        for (const auto& p : programs) plans.push_back(fj::codegen::make_plan(p, dtype, generated_only));
        std::vector<const fj::ir::Kernel*> kernels;
        std::vector<std::size_t> first_kernel;
        for (const auto& p : plans) {
            first_kernel.push_back(kernels.size());
            for (const auto& r : p.steps) kernels.push_back(&r.kernel);
        }
        // Generic kernels as the runtime emits them by default (CudaSettings: one guarded loop), and with
        // a guarded warm-up loop, then batches of 3 rows (FJ_CUDA_UNROLL=3: a remainder loop too);
        // specialised ones with 3.
        const fj::rt::cuda::CudaSettings defaults;
        Emulated emu(kernels, dtype, dir, cxx, {.unroll = defaults.unroll, .one_loop = defaults.one_loop != 0});
        REQUIRE_MESSAGE(emu.error().empty(), emu.error());
        Emulated batched(kernels, dtype, dir, cxx, {.unroll = 3});
        REQUIRE_MESSAGE(batched.error().empty(), batched.error());
        // Every program once more, on kernels specialised on the panels' leading dimensions.
        Emulated fixed(kernels, dtype, dir, cxx, {.ld_in = padded.ld_in, .ld_out = padded.ld_out});
        REQUIRE_MESSAGE(fixed.error().empty(), fixed.error());
        // And with echo rings (the runtime's default for specialised kernels).
        Emulated echo(kernels, dtype, dir, cxx, {.ld_in = padded.ld_in, .ld_out = padded.ld_out, .echo = true});
        REQUIRE_MESSAGE(echo.error().empty(), echo.error());
        const fj::test::Inputs data = fj::test::as_dtype(ds.inputs, dtype);
        for (std::int64_t tile : {0, 7}) {
            CAPTURE(tile);
            for (std::size_t pi = 0; pi < plans.size(); ++pi) {
                const fj::codegen::Plan& plan = plans[pi];
                std::vector<fj::Expr> roots;
                for (const auto& [name, e] : programs[pi]) roots.push_back(e);
                const auto refs = fj::test::reference(roots, data, ds.rows, ds.cols);
                for (int kind : {0, 1, 2, 3}) {  // generic by default, generic in batches, specialised, with echoes
                    CAPTURE(kind);
                    const bool specialised = kind >= 2;
                    const long long ld_in = padded.ld_in, ld_out = padded.ld_out;
                    check_outputs(plan, roots, refs, data, ds.rows, ds.cols, dtype, ld_in, ld_out,
                                  [&](const auto& ip, const auto& op) {
                                      for (std::size_t r = 0; r < plan.steps.size(); ++r)
                                          (kind == 3 ? echo : specialised ? fixed : kind == 1 ? batched : emu)
                                              .run(first_kernel[pi] + r, plan.steps[r].kernel, ip, op, tile);
                                  });
                }
            }
        }
    }
}

// Float32 kernels keep corr of a panel with itself exactly 1 (backend_cases.hpp) with the Newton step after
// the rsqrt estimate (fj_rsqrt: in float64, before the product is rounded to float32); with the estimate
// alone it held in 37 % of the outputs on the H200, and with the step applied to the float32 product
// instead (an experiment of the tenth session: it rounds twice) in 87 % of the emulated ones.
TEST_CASE("float32 corr of a panel with itself is exactly 1") {
    std::string cxx, dir;
    if (!emulation_ready(&cxx, &dir)) return;
    check_judged_emulated(fj::test::corr_with_itself(fj::DType::F32, 400, 40), cxx, dir, "exact1");
}

// Float64 kernels say NaN where their window sums overflow (backend_cases.hpp).
TEST_CASE("float64 sums that overflow give NaN, not a wrong number (emulated)") {
    std::string cxx, dir;
    if (!emulation_ready(&cxx, &dir)) return;
    check_judged_emulated(fj::test::float64_overflow(), cxx, dir, "overflow");
}

// Refolds (kernel_ir.hpp) in the column scan: on price-like data with spikes, a level shift and NaN rows
// (tests/refold_cases.hpp), the window-sum groups' kernels, run on the host as generic kernels (one guarded
// loop with preset shifts; batches of 3 rows), specialised ones (quiet batches) and specialised ones with
// echo rings (which refolds refresh), agree with the CPU backend, which runs the same IR, on the same time
// tiles (so that both run the same passes: a pass's first rows decide its shifts); tiles of 37 and 64 rows
// put spikes at a pass's first rows and in its warm-up. (How close both come to the reference is the spikes
// suite's question.)
TEST_CASE("column scans run refolds as the CPU backend does: spikes, level shifts, echo rings, presets") {
    std::string cxx, dir;
    if (!emulation_ready(&cxx, &dir)) return;
    const std::string sub = dir + "/refold";
    std::filesystem::create_directories(sub);
    const std::int64_t rows = 600, cols = 12;
    const long long ld = cols + 3;
    for (fj::DType dtype : {fj::DType::F32, fj::DType::F64}) {
        CAPTURE(fj::dtype_name(dtype));
        const fj::test::Dataset ds = fj::test::refold_data(dtype, rows, cols);
        const std::vector<fj::test::NamedExprs> progs = fj::test::refold_programs();
        std::vector<fj::codegen::Plan> plans;
        std::vector<const fj::ir::Kernel*> kernels;
        for (const auto& p : progs) {
            plans.push_back(fj::codegen::make_plan(p, dtype));
            REQUIRE(plans.back().steps.size() == 1);
        }
        std::size_t with_refolds = 0;
        for (const auto& p : plans) {
            kernels.push_back(&p.steps[0].kernel);
            with_refolds += !p.steps[0].kernel.refolds.empty();
        }
        CHECK(with_refolds == plans.size());
        // The last two as the runtime runs them: kernels raising repair flags, then the repair pass.
        const std::vector<EmuKind> kinds = {{.unroll = 1, .one_loop = true},
                                            {.unroll = 3},
                                            {.ld_in = ld, .ld_out = ld, .unroll = 4},
                                            {.ld_in = ld, .ld_out = ld, .unroll = 4, .echo = true},
                                            {.unroll = 1, .one_loop = true, .repair = true},
                                            {.ld_in = ld, .ld_out = ld, .unroll = 4, .echo = true, .repair = true}};
        long long flagged = 0;
        std::vector<std::unique_ptr<Emulated>> emus;
        for (const EmuKind& k : kinds) {
            emus.push_back(std::make_unique<Emulated>(kernels, dtype, sub, cxx, k));
            REQUIRE_MESSAGE(emus.back()->error().empty(), emus.back()->error());
        }
        for (std::int64_t tile : {37, 64}) {
            CAPTURE(tile);
            fj::CompileOptions cpu;
            cpu.backend = fj::Backend::Cpu;
            cpu.tile_rows = tile;
            for (std::size_t pi = 0; pi < plans.size(); ++pi) {
                const fj::codegen::Plan& plan = plans[pi];
                CAPTURE(plan.steps[0].kernel.name);
                const auto want = fj::test::compile_and_run(progs[pi], ds.inputs, rows, cols, dtype, cpu);
                REQUIRE(want);
                for (std::size_t e = 0; e < emus.size(); ++e) {
                    CAPTURE(e);
                    HostPanels h(ds.inputs, plan.outputs, dtype, rows, cols, ld, 7.7e30, -3.3e33);
                    emus[e]->run(pi, plan.steps[0].kernel, h.in, h.out, tile);
                    flagged += emus[e]->flagged();
                    for (std::size_t k = 0; k < progs[pi].size(); ++k) {
                        const fj::test::HostBuffer& got = h.out_buf.at(plan.outputs[k]);
                        const std::string msg = fj::test::agree(got.cells(), want->at(progs[pi][k].first), cols, dtype);
                        CHECK_MESSAGE(msg.empty(), "`" << progs[pi][k].second.str() << "`: " << msg);
                        CHECK(got.padding_changed(-3.3e33).empty());
                    }
                }
            }
        }
        CHECK(flagged > 0);  // (the spikes raised flags: the repair pass ran)
    }
}

TEST_CASE("column scans raise repair flags rarely on clean data, and then agree with the CPU backend") {
    std::string cxx, dir;
    if (!emulation_ready(&cxx, &dir)) return;
    const std::int64_t rows = 1200, cols = 48;
    const long long ld = cols;
    // Float32 panels with plain sums (the default) and with double-double ones (CompileOptions::exact_sums, which
    // skew's and kurt's guards need to stay quiet on float32 panels: docs/numerics.md), float64 panels.
    struct Config {
        fj::DType dtype;
        bool exact_sums;
    };
    for (const Config config : {Config{fj::DType::F32, false}, Config{fj::DType::F32, true}, Config{fj::DType::F64, false}}) {
        const fj::DType dtype = config.dtype;
        CAPTURE(fj::dtype_name(dtype));
        CAPTURE(config.exact_sums);
        // (A library of its own for each: one loaded from the same path would be the first one again.)
        const std::string sub = dir + "/repair_clean_" + std::string(fj::dtype_name(dtype)) + (config.exact_sums ? "_exact" : "");
        std::filesystem::create_directories(sub);
        // Random walks around 100, returns and log-normal volumes: no spike, no level shift.
        fj::test::Dataset ds;
        ds.rows = rows;
        ds.cols = cols;
        fj::test::Rng rng(77);
        for (const char* in : {"A", "B"}) {
            std::vector<double>& x = ds.inputs[in];
            x.resize(static_cast<std::size_t>(rows * cols));
            for (std::int64_t j = 0; j < cols; ++j) {
                double p = 100.0 + 10.0 * rng.normal();
                for (std::int64_t t = 0; t < rows; ++t) {
                    p *= 1.0 + 0.01 * rng.normal();
                    const double v = j % 3 == 0 ? 0.01 * rng.normal() : j % 3 == 1 ? p : std::exp(6.0 + rng.normal());
                    x[static_cast<std::size_t>(t * cols + j)] = v;
                }
            }
        }
        ds.inputs = fj::test::as_dtype(ds.inputs, dtype);
        std::vector<fj::test::NamedExprs> progs = fj::test::refold_programs();
        if (config.exact_sums)  // (skew and kurt only)
            progs.erase(std::remove_if(progs.begin(), progs.end(), [](const fj::test::NamedExprs& p) { return p.front().first.rfind("skew", 0) != 0; }),
                        progs.end());
        std::vector<fj::codegen::Plan> plans;
        std::vector<const fj::ir::Kernel*> kernels;
        const fj::codegen::Sums sums = config.exact_sums ? fj::codegen::Sums::Exact : fj::codegen::Sums::Auto;
        for (const auto& p : progs) plans.push_back(fj::codegen::make_plan(p, dtype, sums));
        for (const auto& p : plans) kernels.push_back(&p.steps[0].kernel);
        Emulated emu(kernels, dtype, sub, cxx, {.ld_in = ld, .ld_out = ld, .unroll = 4, .echo = true, .repair = true});
        REQUIRE_MESSAGE(emu.error().empty(), emu.error());
        const std::int64_t tile = 400;
        // The sums and moments of var, cov and corr are held to the bound below; skew, kurt and the regressions
        // (their guards of the centred third and fourth moments and of the positional sums) to bounds of their own:
        // their flags on clean data are a cost the repair pass pays, not an error.
        long long flagged = 0, passes = 0, moment_flagged = 0, moment_passes = 0, regression_flagged = 0, regression_passes = 0;
        fj::CompileOptions cpu;
        cpu.backend = fj::Backend::Cpu;
        cpu.tile_rows = tile;
        cpu.exact_sums = config.exact_sums;
        for (std::size_t pi = 0; pi < plans.size(); ++pi) {
            const fj::codegen::Plan& plan = plans[pi];
            CAPTURE(plan.steps[0].kernel.name);
            const auto want = fj::test::compile_and_run(progs[pi], ds.inputs, rows, cols, dtype, cpu);
            REQUIRE(want);
            HostPanels h(ds.inputs, plan.outputs, dtype, rows, cols, ld, 0.0, 0.0);
            emu.run(pi, plan.steps[0].kernel, h.in, h.out, tile);
            const std::string& first = progs[pi].front().first;
            const long long n = cols * ((rows + tile - 1) / tile);
            if (first.rfind("skew", 0) == 0) {
                moment_flagged += emu.flagged();
                moment_passes += n;
            } else if (first.rfind("slope", 0) == 0) {
                regression_flagged += emu.flagged();
                regression_passes += n;
            } else {
                flagged += emu.flagged();
                passes += n;
            }
            for (std::size_t k = 0; k < progs[pi].size(); ++k) {
                const std::string msg = fj::test::agree(h.out_buf.at(plan.outputs[k]).cells(), want->at(progs[pi][k].first), cols, dtype);
                CHECK_MESSAGE(msg.empty(), "`" << progs[pi][k].second.str() << "`: " << msg);
            }
        }
        const std::string label = std::string(fj::dtype_name(dtype)) + (config.exact_sums ? " (exact sums)" : "");
        MESSAGE(label << ": " << flagged << " of " << passes
                                      << " passes flagged on clean data; skew and kurt " << moment_flagged << " of " << moment_passes
                                      << ", the regressions " << regression_flagged << " of " << regression_passes);
        // A repair pass that ran everywhere would double the time. (Float32 panels: windows of 5 over log-normal
        // volumes raise a few, where five similar values follow a large one; the sums do round there.)
        CHECK(flagged * 100 <= 3 * passes);
        // skew and kurt: under 5 % with double-double sums (float64 panels, exact_sums; 0 and 3 of 432 when this
        // bound was set), where their M3 and M4 are formed in double-double from exact powers. Float32's plain sums
        // round their cubes and fourth powers every row, and their guard fired on 173 of 432 (40 %).
        if (dtype == fj::DType::F64 || config.exact_sums) CHECK(moment_flagged * 100 <= 5 * moment_passes);
        else CHECK(moment_flagged * 100 <= 45 * moment_passes);
        // The regressions: float64 terms kept exactly (0 of 432 when this bound was set; every pass over volumes
        // before); float32's plain sums 182 of 432.
        if (dtype == fj::DType::F64) CHECK(regression_flagged * 100 <= 5 * regression_passes);
        else CHECK(regression_flagged * 100 <= 50 * regression_passes);
    }
}

TEST_CASE("window-scan kernels, run on the host, match the reference") {
    std::string cxx, dir;
    if (!emulation_ready(&cxx, &dir)) return;
    using fj::window;
    const fj::Expr A = fj::input("A"), B = fj::input("B");
    // Every operator case, and windows longer than a batch (32 rows) and than two (the rings wrap, the
    // leaving rows come from the ring's mirrored rows), with minimum periods and fused outputs.
    auto cases = fj::test::cuda_op_cases();
    cases.push_back({"corr_long", fj::corr(window(A, 45), window(B, 45))});
    cases.push_back({"std_long", fj::std(window(A, 70))});
    cases.push_back({"std_long_mp", fj::std(window(A, 70, 20))});  // (its last valid value is not scanned yet)
    cases.push_back({"cov_long", fj::cov(window(A, 33, 7), window(B, 33, 30))});
    cases.push_back({"mean_long", fj::mean(window(B, 64))});
    cases.push_back({"corr_short", fj::corr(window(A, 3), window(B, 3))});  // counts tested against 2 and 3 rows
    std::vector<std::pair<std::string, fj::Expr>> fused = {cases.back(), {"corr_long", fj::corr(window(A, 45), window(B, 45))}};
    // Kernels that must be window scans (the others may fall back to the column scan).
    const std::set<std::string> must = {"sum", "sum_mp", "mean", "var", "corr", "cov", "corr_long",
                                        "std_long", "cov_long", "mean_long", "corr_short"};
    // 44 columns: a second strip of 12 (lanes without a column; the runtime gives panels whose column count
    // is not a multiple of 4 the column scan).
    fj::test::Dataset ds = fj::test::dataset("price, messy", 300, 44, fj::test::messy(fj::test::Flavour::Price), 17);
    // Columns whose first values come late: their shift (a first value) is set after a batch or two, so
    // the batches before stay guarded (row-major cells: row * cols + col).
    for (std::int64_t r = 0; r < 70; ++r) ds.inputs.at("A")[static_cast<std::size_t>(r * ds.cols + 3)] = std::nan("");
    // (Infinities of both signs: a window of one infinity repeated is constant for the reference, where cov
    // gives 0, but NaN for the lowering, which makes any infinite value NaN; see the closing note of the
    // session that added this test.)
    for (std::int64_t r = 0; r < 40; ++r)
        ds.inputs.at("B")[static_cast<std::size_t>(r * ds.cols + 41)] = r % 2 ? INFINITY : -INFINITY;
    const fj::DType dtype = fj::DType::F32;
    const Programs pr = programs_of(cases, fused, dtype);
    const std::vector<fj::codegen::Plan>& plans = pr.plans;
    // Rows are copied 16 bytes at a time: leading dimensions of 4k elements only.
    {
        fj::codegen::CudaEmitOptions o;
        o.strides = {41, 41, 41};
        std::string why;
        CHECK(fj::codegen::cuda_window_scan_smem(plans[0].steps[0].kernel, o, &why) == 0);
        const fj::codegen::Plan corr = fj::codegen::make_plan({{"c", fj::corr(window(A, 45), window(B, 45))}}, dtype);
        CHECK(fj::codegen::cuda_window_scan_smem(corr.steps[0].kernel, o, &why) == 0);
        CHECK(why.find("not a multiple of 4") != std::string::npos);
        // Run counters compared with constants of at least a segment's rows are tested without forming the
        // count (scan_count_tests()); shorter windows form it.
        o.strides = {48, 48, 48};
        o.window_scan = true;
        CHECK(fj::codegen::emit_cuda(corr.steps[0].kernel, o).find("const int fj_b") != std::string::npos);
        const fj::codegen::Plan short_corr = fj::codegen::make_plan({{"c", fj::corr(window(A, 3), window(B, 3))}}, dtype);
        const std::string short_src = fj::codegen::emit_cuda(short_corr.steps[0].kernel, o);
        CHECK(short_src.find("max(fj_e") != std::string::npos);
        CHECK(short_src.find("const int fj_b") == std::string::npos);
    }
    // With one batch copied ahead (the smallest rings), and with the default (as many batches ahead as fit,
    // 4 here).
    struct Setup {
        long long ld;
        int ahead;
    };
    for (const auto& [ld, ahead] : {Setup{44, 1}, Setup{48, 0}}) {
        CAPTURE(ld);
        CAPTURE(ahead);
        std::vector<const fj::ir::Kernel*> kernels;
        std::vector<std::size_t> index;  // kernel -> its program
        for (std::size_t pi = 0; pi < plans.size(); ++pi) {
            if (plans[pi].steps.size() != 1) continue;
            const fj::ir::Kernel& k = plans[pi].steps[0].kernel;
            fj::codegen::CudaEmitOptions o;
            o.dtype = dtype;
            o.strides.assign(k.inputs.size() + k.outputs.size(), ld);
            o.window_scan_ahead = ahead;
            std::string why;
            const bool ok = fj::codegen::cuda_window_scan_smem(k, o, &why) > 0;
            const std::string& name = pr.outputs[pi].size() == 1 ? pr.outputs[pi][0].first : std::string("fused");
            CHECK_MESSAGE((ok || !must.count(name)), name << ": " << why);
            if (!ok) continue;
            kernels.push_back(&k);
            index.push_back(pi);
        }
        REQUIRE(kernels.size() >= must.size());
        Emulated emu(kernels, dtype, dir, cxx, {.ld_in = ld, .ld_out = ld, .window_scan = true, .scan_ahead = ahead});
        REQUIRE_MESSAGE(emu.error().empty(), emu.error());
        check_emulated(emu, index, pr, ds, dtype, ld, {0, 7, 45});
    }
}

TEST_CASE("chained window-scan kernels, run on the host, match the reference") {
    std::string cxx, dir;
    if (!emulation_ready(&cxx, &dir)) return;
    using fj::window;
    const fj::Expr A = fj::input("A"), B = fj::input("B");
    // Windows that batches of 16 to 32 rows divide (R = 20, 32, 24, 17, 25, 32, 20, 20, 17), minimum periods, fused
    // outputs over one window, and one window that only the plain window scan takes (45: no such batch).
    std::vector<std::pair<std::string, fj::Expr>> cases = {
        {"corr40", fj::corr(window(A, 40), window(B, 40))},
        {"cov64", fj::cov(window(A, 64, 10), window(B, 64, 30))},
        {"std48", fj::std(window(A, 48))},
        {"var17", fj::var(window(B, 17))},
        {"mean50", fj::mean(window(B, 50))},
        {"corr32", fj::corr(window(A, 32), window(B, 32))},
        {"sum20", fj::sum(window(A, 20))},
        // Batches of 20 rows: "x changed in the window" is tested against 19 rows, fewer than a batch (see
        // below).
        {"corr20", fj::corr(window(A, 20), window(B, 20))},
        // 17 batches of 17 rows: more batches in the window than warps, so that the leaving batch's sums are
        // there without a wait of their own (see chained_scan.cpp's K).
        {"cov289", fj::cov(window(A, 289, 30), window(B, 289, 30))},
    };
    std::vector<std::pair<std::string, fj::Expr>> fused = {{"corr40", fj::corr(window(A, 40), window(B, 40))},
                                                           {"std40", fj::std(window(B, 40))}};
    fj::test::Dataset ds = fj::test::dataset("price, messy", 300, 44, fj::test::messy(fj::test::Flavour::Price), 23);
    for (std::int64_t r = 0; r < 70; ++r) ds.inputs.at("A")[static_cast<std::size_t>(r * ds.cols + 3)] = std::nan("");
    for (std::int64_t r = 100; r < 160; ++r) ds.inputs.at("A")[static_cast<std::size_t>(r * ds.cols + 9)] = 101.25;  // constant
    const fj::DType dtype = fj::DType::F32;
    const Programs pr = programs_of(cases, fused, dtype);
    const std::vector<fj::codegen::Plan>& plans = pr.plans;
    const long long ld = 48;
    std::vector<const fj::ir::Kernel*> kernels;
    std::vector<std::size_t> index;
    for (std::size_t pi = 0; pi < plans.size(); ++pi) {
        REQUIRE(plans[pi].steps.size() == 1);
        const fj::ir::Kernel& k = plans[pi].steps[0].kernel;
        fj::codegen::CudaEmitOptions o;
        o.dtype = dtype;
        o.strides.assign(k.inputs.size() + k.outputs.size(), ld);
        o.window_scan_chain = true;
        std::string why;
        CHECK_MESSAGE(fj::codegen::cuda_window_scan_smem(k, o, &why) > 0, pi << ": " << why);
        kernels.push_back(&k);
        index.push_back(pi);
    }
    {
        const fj::codegen::Plan odd = fj::codegen::make_plan({{"c", fj::corr(window(A, 45), window(B, 45))}}, dtype);
        fj::codegen::CudaEmitOptions o;
        o.dtype = dtype;
        o.strides = {ld, ld, ld};
        o.window_scan_chain = true;
        std::string why;
        CHECK(fj::codegen::cuda_window_scan_smem(odd.steps[0].kernel, o, &why) == 0);
        CHECK(why.find("divides the window of 45 rows") != std::string::npos);
        o.window_scan_chain = false;
        CHECK(fj::codegen::cuda_window_scan_smem(odd.steps[0].kernel, o) > 0);
        // Run counters compared with constants are tested against the row from which their count reaches
        // the constant (kept per row group), for constants shorter than a batch too: corr w=250 (batches of
        // 25) tests "the window is full" (250) and "x changed" (249) so, and corr w=20 (batches of 20) 20 and
        // 19. (Float32 data within the contract cannot tell a wrong "x changed": a constant window's float64
        // sums are exact, so its variance is 0 too; see the README's accuracy notes.)
        o.window_scan_chain = true;
        o.window_scan = true;
        const fj::codegen::Plan corr250 = fj::codegen::make_plan({{"c", fj::corr(window(A, 250), window(B, 250))}}, dtype);
        const std::string long_src = fj::codegen::emit_cuda(corr250.steps[0].kernel, o);
        CHECK(long_src.find("_249 = fj_e") != std::string::npos);
        CHECK(long_src.find("- max(fj_e") == std::string::npos);
        CHECK(long_src.find("Chained window scan") != std::string::npos);
        CHECK(fj::codegen::cuda_window_scan_layout(corr250.steps[0].kernel, o).box_rows == 25);
        const std::string short_src = fj::codegen::emit_cuda(plans[7].steps[0].kernel, o);  // corr20
        CHECK(short_src.find("_19 = fj_e") != std::string::npos);
        CHECK(short_src.find("- max(fj_e") == std::string::npos);
    }
    Emulated emu(kernels, dtype, dir, cxx, {.ld_in = ld, .ld_out = ld, .window_scan = true, .chain = true});
    REQUIRE_MESSAGE(emu.error().empty(), emu.error());
    check_emulated(emu, index, pr, ds, dtype, ld, {0, 45, 130});
}

// Runs programs `pr` on emulated kernels of `kind` with quiet batches and without (CudaEmitOptions::
// quiet_batches): each output against the reference, both kinds of batch run in each program but those of
// `no_quiet` (none there), and the results of the two the same bit for bit. The libraries go to a folder of
// their own, `sub` (their file names are those of other tests' kinds: see Emulated).
void check_quiet_batches(const std::string& cxx, const std::string& dir, const std::string& sub, EmuKind kind,
                         const Programs& pr, const fj::test::Dataset& ds, fj::DType dtype,
                         const std::set<std::string>& no_quiet) {
    std::filesystem::create_directories(dir + "/" + sub);
    std::vector<const fj::ir::Kernel*> kernels;
    for (const auto& plan : pr.plans) {
        REQUIRE(plan.steps.size() == 1);
        kernels.push_back(&plan.steps[0].kernel);
    }
    const fj::test::Inputs data = fj::test::as_dtype(ds.inputs, dtype);
    const long long ld = kind.ld_in;
    std::vector<std::vector<fj::Expr>> roots(pr.plans.size());  // per program: its outputs and their references
    std::vector<std::vector<std::vector<double>>> refs;
    for (std::size_t q = 0; q < pr.plans.size(); ++q) {
        for (const auto& [name, e] : pr.outputs[q]) roots[q].push_back(e);
        refs.push_back(fj::test::reference(roots[q], data, ds.rows, ds.cols));
    }
    std::map<std::pair<std::size_t, std::int64_t>, std::vector<std::vector<char>>> got[2];  // by quiet, (program, tile)
    for (bool quiet : {true, false}) {
        CAPTURE(quiet);
        kind.quiet = quiet;
        Emulated emu(kernels, dtype, dir + "/" + sub, cxx, kind);
        REQUIRE_MESSAGE(emu.error().empty(), emu.error());
        for (std::int64_t tile : {0, 300}) {
            CAPTURE(tile);
            for (std::size_t q = 0; q < pr.plans.size(); ++q) {
                CAPTURE(q);
                const fj::codegen::Plan& plan = pr.plans[q];
                check_outputs(plan, roots[q], refs[q], data, ds.rows, ds.cols, dtype, ld, ld, [&](const auto& ip, const auto& op) {
                    emu.run(q, plan.steps[0].kernel, ip, op, tile);
                    auto& outs = got[quiet][{q, tile}];
                    for (const auto& n : plan.outputs) {
                        const fj::Panel& p = op.at(n);
                        const char* b = static_cast<const char*>(p.data);
                        outs.emplace_back(b, b + p.rows * p.ld * static_cast<std::int64_t>(fj::dtype_size(dtype)));
                    }
                });
                const auto [all, not_all] = emu.votes();
                if (quiet && !no_quiet.count(pr.outputs[q][0].first)) {  // both kinds of batch ran
                    CHECK(all > 0);
                    CHECK(not_all > 0);
                } else {
                    CHECK(all + not_all == 0);
                }
            }
        }
    }
    for (const auto& [key, outs] : got[1]) {
        CAPTURE(key.first);
        CAPTURE(key.second);
        const auto& other = got[0].at(key);
        REQUIRE(outs.size() == other.size());
        for (std::size_t k = 0; k < outs.size(); ++k) CHECK(outs[k] == other[k]);
    }
}

TEST_CASE("quiet batches and the others, in one panel, match the reference and each other: chained and column scans") {
    std::string cxx, dir;
    if (!emulation_ready(&cxx, &dir)) return;
    using fj::window;
    const fj::Expr A = fj::input("A"), B = fj::input("B");
    // Price-like data without missing values or repeats, but for a few events that make the batches around
    // them (a window's length after them, in a chained scan's strip of 32 columns) run with their counters:
    // a NaN, an infinity, a value repeated once, constant stretches shorter and longer than the windows, a
    // column constant from the start. Columns 32-43 are a second strip with 20 lanes past the panel.
    fj::test::Dataset ds = fj::test::dataset("price, clean", 720, 44, fj::test::clean(fj::test::Flavour::Price), 29);
    auto at = [&](const char* in, std::int64_t r, std::int64_t c) -> double& {
        return ds.inputs.at(in)[static_cast<std::size_t>(r * ds.cols + c)];
    };
    at("A", 300, 5) = std::nan("");
    at("B", 455, 20) = HUGE_VAL;
    at("B", 520, 2) = at("B", 519, 2);
    for (std::int64_t r = 200; r < 230; ++r) at("A", r, 36) = at("A", 199, 36);
    for (std::int64_t r = 380; r < 470; ++r) at("A", r, 40) = 101.25;
    for (std::int64_t r = 0; r < 290; ++r) at("B", r, 11) = 99.5;
    const long long ld = 48;
    {
        INFO("chained window scans");
        const Programs pr = programs_of({{"corr40", fj::corr(window(A, 40), window(B, 40))},
                                         {"corr250", fj::corr(window(A, 250), window(B, 250))},
                                         {"cov64", fj::cov(window(A, 64, 10), window(B, 64, 30))},
                                         {"std48", fj::std(window(A, 48))}},
                                        {{"corr40", fj::corr(window(A, 40), window(B, 40))}, {"std40", fj::std(window(B, 40))}},
                                        fj::DType::F32);
        // corr's quiet state: no non-finite value for a window before the batch and in it, both inputs
        // changing on every row (quiet_rows.hpp); std's: no non-finite value.
        fj::codegen::CudaEmitOptions o;
        o.dtype = fj::DType::F32;
        o.strides = {ld, ld, ld};
        o.window_scan = o.window_scan_chain = true;
        const std::string src = fj::codegen::emit_cuda(pr.plans[1].steps[0].kernel, o);
        CHECK(src.find("fj_quiet = !fj_active || ((fj_m2 == -1073741824 && fj_e2 < u_batch - 250) && fj_a9 && fj_a11);") !=
              std::string::npos);
        o.quiet_batches = false;
        CHECK(fj::codegen::emit_cuda(pr.plans[1].steps[0].kernel, o).find("fj_quiet") == std::string::npos);
        // (cov with minimum periods forms its count of valid rows, n: no quiet state.)
        check_quiet_batches(cxx, dir, "quiet_chain", {.ld_in = ld, .ld_out = ld, .window_scan = true, .chain = true}, pr, ds,
                            fj::DType::F32, {"cov64"});
    }
    // Column scans' batched loops: float32 with echo rings (the headline kernel's shape), float64 with
    // register loads (a window too long for echo rings).
    auto column_programs = [&](fj::DType dtype) {
        return programs_of({{"corr20", fj::corr(window(A, 20), window(B, 20))},
                            {"corr7", fj::corr(window(A, 7), window(B, 7))},
                            {"cov64", fj::cov(window(A, 64, 10), window(B, 64, 30))},
                            {"std48", fj::std(window(A, 48))}},
                           {{"fused corr20", fj::corr(window(A, 20), window(B, 20))}, {"std20", fj::std(window(B, 20))}}, dtype);
    };
    {
        INFO("column scans, float32, echo rings");
        check_quiet_batches(cxx, dir, "quiet_column", {.ld_in = ld, .ld_out = ld, .echo = true}, column_programs(fj::DType::F32), ds,
                            fj::DType::F32, {"cov64"});
    }
    {
        INFO("column scans, float64, register loads");
        // (The fused float64 kernel, with its double-double sums, is a big body: no run counters kept as q.)
        check_quiet_batches(cxx, dir, "quiet_column", {.ld_in = ld, .ld_out = ld, .unroll = 8}, column_programs(fj::DType::F64), ds,
                            fj::DType::F64, {"cov64", "fused corr20"});
    }
}

}  // TEST_SUITE

#else

TEST_SUITE("cuda_compile") {
TEST_CASE("generated kernels run on the host: compiled out (no CUDA backend)") {
    MESSAGE("skipped: built without the CUDA backend (FJ_WITH_CUDA=OFF or no cuda.h): "
            "the emulated kernel tests are compiled out");
}
}  // TEST_SUITE

#endif  // FJ_WITH_CUDA
