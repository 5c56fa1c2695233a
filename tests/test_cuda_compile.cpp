// The CUDA code generator without a GPU: every operator's kernel compiles with NVRTC for sm_90 in both
// dtypes, hand-built IR using every primitive compiles, the cubin's resources are read right, NVRTC
// failures carry their log, and the launch configuration's arithmetic. Needs NVRTC (CI has the CUDA
// toolkit); skips with a message where it is missing.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "codegen/cuda/emit.hpp"
#include "codegen/ir_builder.hpp"
#include "codegen/lower_ops.hpp"
#include "codegen/plan.hpp"
#include "cuda_cases.hpp"
#include "dsl/error.hpp"

#ifdef FJ_WITH_CUDA
#include "runtime/backend.hpp"
#include "runtime/cuda/cuda_api.hpp"
#include "runtime/cuda/compile.hpp"
#include "runtime/cuda/launch_config.hpp"
#include "runtime/cuda/compile.hpp"
#include "runtime/cuda/column_kernels.hpp"
#include "runtime/cuda/row_kernels.hpp"
#endif

namespace {

using fj::ir::Prim;

// A kernel using every primitive of FJ_PRIMS at least once (values need not mean anything).
fj::ir::Kernel every_primitive_kernel(int ring_size) {
    fj::ir::Kernel k;
    k.name = "fj_test_every_prim";
    k.inputs = {"A", "B"};
    k.outputs = {"o0", "o1", "o2"};
    fj::codegen::IrBuilder b(k);
    const int s = b.new_state(std::numeric_limits<double>::quiet_NaN(), "state");
    const int r = b.new_ring(ring_size, "ring of A");
    auto x = b.input(0, 0), y = b.input(1, 3), lag = b.input(0, ring_size - 1);
    b.push(r, x);
    auto t = b.row();
    auto inpass = b.row_in_pass(2);
    auto st = b.load(s);
    auto old = b.ring_read(r, ring_size - 1);
    auto cur = b.ring_read(r, 0);
    auto sum = b.add(b.sub(b.mul(x, y), b.div(old, cur)), b.f(Prim::Neg, st));
    auto fun = b.add(b.f(Prim::Abs, sum), b.f(Prim::Sqrt, b.f(Prim::Exp, b.f(Prim::Log, b.f(Prim::Abs, x)))));
    auto pw = b.f(Prim::Pow, b.f(Prim::Floor, fun), b.f(Prim::Recip, b.f(Prim::RSqrt, y)));
    auto c1 = b.b(Prim::CmpLT, x, y), c2 = b.b(Prim::CmpLE, x, y), c3 = b.b(Prim::CmpGT, x, y);
    auto c4 = b.b(Prim::CmpGE, x, y), c5 = b.b(Prim::CmpEQ, x, y), c6 = b.b(Prim::CmpONE, x, y);
    auto c7 = b.b(Prim::CmpUNE, x, y), c8 = b.isnan(lag);
    auto logic = b.lor(b.land(c1, c2), b.lnot(b.land(b.lor(c3, c4), b.lor(b.lor(c5, c6), b.lor(c7, c8)))));
    auto both = b.land(logic, inpass);
    auto sel = b.select(both, b.f(Prim::Fma, pw, x, cur), old);
    auto bsel = b.select(c1, c2, c3);  // Bool select
    b.store(s, b.add(sel, t));
    b.output(0, sel);
    b.output(1, b.to_f64(bsel));
    b.output(2, b.f(Prim::Max, b.f(Prim::Min, x, old), y));
    k.halo = ring_size;
    return k;
}

#ifdef FJ_WITH_CUDA
// CudaSettings::from_env() with the given FJ_CUDA_* variables set (null values left unset), which are
// unset again afterwards: the settings, or the error's message.
std::pair<fj::rt::cuda::CudaSettings, std::string> settings_with(const std::vector<std::pair<const char*, const char*>>& vars) {
    for (const auto& [name, value] : vars)
        if (value) ::setenv(name, value, 1);
    std::string error;
    fj::rt::cuda::CudaSettings s;
    try {
        s = fj::rt::cuda::CudaSettings::from_env();
    } catch (const fj::Error& e) {
        error = e.what();
    }
    for (const auto& [name, value] : vars) ::unsetenv(name);
    return {s, error};
}
#endif  // FJ_WITH_CUDA

}  // namespace

TEST_SUITE("cuda_compile") {

TEST_CASE("the op cases cover every operator") {
    const auto missing = fj::test::ops_not_covered(fj::test::cuda_op_cases());
    std::string names;
    for (const auto& m : missing) names += m + " ";
    CHECK_MESSAGE(missing.empty(), "operators without a CUDA case in tests/cuda_cases.hpp: " << names);
}

TEST_CASE("emitted source: one extern C kernel, readable name, no includes, 64-bit indexing") {
    fj::ir::Kernel k = every_primitive_kernel(5);
    k.name = "fj_corr_A-B/20";
    const std::string src = fj::codegen::emit_cuda(k, {});
    CHECK(fj::codegen::cuda_kernel_name(k) == "fj_corr_A_B_20");
    CHECK(src.find("extern \"C\" __global__ void fj_corr_A_B_20(") != std::string::npos);
    CHECK(src.find("#include") == std::string::npos);
    CHECK(src.find("long long j = (long long)blockIdx.x") != std::string::npos);
    CHECK(src.find("fast") == std::string::npos);
    CHECK(fj::codegen::cuda_kernel_name(fj::ir::Kernel{"9lives"}) == "fj_9lives");
    const auto opts = fj::codegen::cuda_compile_options("sm_90", false);
    for (const auto& o : opts) CHECK(o.find("fast") == std::string::npos);
}

TEST_CASE("malformed IR is an error, not bad source") {
    fj::ir::Kernel k;
    k.name = "bad";
    k.inputs = {"A"};
    k.outputs = {"o"};
    k.body.push_back({Prim::Input, fj::ir::Type::F64, -1, -1, -1, 0, 0});
    k.body.push_back({Prim::Output, fj::ir::Type::Void, 5, -1, -1, 0, 0});  // operand from the future
    CHECK_THROWS_AS(fj::codegen::emit_cuda(k, {}), fj::BackendError);
    k.body[1].a = 0;
    k.body[1].slot = 3;  // no output 3
    CHECK_THROWS_AS(fj::codegen::emit_cuda(k, {}), fj::BackendError);
}

#ifdef FJ_WITH_CUDA

namespace cu = fj::rt::cuda;

bool have_nvrtc() {
    std::string why;
    if (cu::nvrtc(&why)) return true;
    MESSAGE("skipped: NVRTC unavailable: " << why);
    return false;
}

TEST_CASE("every primitive compiles, registers and local frame read from the cubin") {
    if (!have_nvrtc()) return;
    for (fj::DType dtype : {fj::DType::F32, fj::DType::F64})
        for (int ring : {1, 5, 40}) {  // register shift ring, and a local-memory ring
            CAPTURE(ring);
            const fj::ir::Kernel k = every_primitive_kernel(ring);
            cu::CudaSettings s;
            s.unroll = 2;
            cu::CudaCompiled c = cu::compile_cuda_kernel(k, dtype, "sm_90", true, s);
            REQUIRE(c.entry.image.size() > 4);
            CHECK(std::string(c.entry.image.data(), 4) == "\x7f" "ELF");
            CHECK(c.registers > 0);
            CHECK(c.stack_bytes >= 0);
            if (ring == 40) CHECK(c.stack_bytes >= 40 * 8);  // the circular ring lives in local memory
            // The same counts as ptxas reports for the same source.
            auto opts = fj::codegen::cuda_compile_options("sm_90", false);
            opts.push_back("--ptxas-options=-v");
            const cu::NvrtcOutput v = cu::nvrtc_compile(c.source, c.function, opts, true, "");
            CHECK(v.log.find("Used " + std::to_string(c.registers) + " registers") != std::string::npos);
        }
}

TEST_CASE("every operator's kernel compiles for sm_90, float32 and float64") {
    if (!have_nvrtc()) return;
    const auto cases = fj::test::cuda_op_cases();
    cu::CudaSettings s;
    s.unroll = 1;  // the batch copies of the body add nothing to what is checked here, only time
    for (fj::DType dtype : {fj::DType::F32, fj::DType::F64}) {
        CAPTURE(fj::dtype_name(dtype));
        std::vector<fj::codegen::Plan> plans;
        for (const auto& c : cases) plans.push_back(fj::codegen::make_plan({{"out", c.second}}, dtype));
        std::vector<const fj::ir::Kernel*> kernels;
        for (const auto& p : plans)
            for (const auto& r : p.steps) kernels.push_back(&r.kernel);
        std::vector<cu::CudaCompiled> out;
        try {
            out = cu::compile_cuda_kernels(kernels, dtype, "sm_90", true, s);
        } catch (const fj::Error& e) {
            FAIL(e.what());
        }
        REQUIRE(out.size() == kernels.size());
        for (std::size_t i = 0; i < out.size(); ++i) {
            CAPTURE(out[i].function);
            CHECK(out[i].registers > 0);
            CHECK(out[i].log.find("warning") == std::string::npos);
        }
    }
}

// Compiles for sm_90, with these settings, the window-scan kernels (chained ones with `chain`) of every
// case that can be one (at least `at_least` of them): no spills, no NVRTC warnings, at most 128 registers
// (two blocks of 256 threads per SM; chained: one of 512).
static void check_window_scans_compile(const std::vector<std::pair<std::string, fj::Expr>>& cases, bool chain,
                                std::size_t at_least) {
    cu::CudaSettings s;
    s.window_scan = 1;
    s.scan_chain = chain ? 1 : 0;
    std::vector<fj::codegen::Plan> plans;
    for (const auto& c : cases) plans.push_back(fj::codegen::make_plan({{"out", c.second}}));
    std::vector<const fj::ir::Kernel*> kernels;
    for (const auto& p : plans)
        for (const auto& r : p.steps) {
            fj::codegen::CudaEmitOptions o;
            o.strides.assign(r.kernel.inputs.size() + r.kernel.outputs.size(), 1000);
            o.window_scan_chain = chain;
            if (fj::codegen::cuda_window_scan_smem(r.kernel, o) > 0) kernels.push_back(&r.kernel);
        }
    CHECK(kernels.size() >= at_least);
    std::vector<cu::CudaCompiled> out;
    try {
        out = cu::compile_cuda_kernels(kernels, fj::DType::F32, "sm_90", true, s, 1000);
    } catch (const fj::Error& e) {
        FAIL(e.what());
    }
    for (const cu::CudaCompiled& k : out) {
        CAPTURE(k.function);
        CHECK(k.choice.options.window_scan);
        CHECK(k.choice.options.window_scan_chain == chain);
        CHECK(k.choice.scan.smem_bytes > 0);
        CHECK(k.stack_bytes == 0);
        CHECK(k.registers <= 128);
        CHECK_MESSAGE(k.log.find("warning") == std::string::npos, k.log);
    }
}

TEST_CASE("every operator's window-scan kernel compiles (where it can be one), without spills or warnings") {
    if (!have_nvrtc()) return;
    // sum, sum_mp, mean, var, corr, cov, std_of_corr's inner corr at least
    check_window_scans_compile(fj::test::cuda_op_cases(), false, 7);
}

TEST_CASE("every operator's chained window-scan kernel compiles (where it can be one), without spills or warnings") {
    if (!have_nvrtc()) return;
    // The operator cases, and long windows of the moments (batches of 25, 32 and 20 rows).
    auto cases = fj::test::cuda_op_cases();
    const fj::Expr A = fj::input("A"), B = fj::input("B");
    cases.push_back({"corr250", fj::corr(fj::window(A, 250), fj::window(B, 250))});
    cases.push_back({"cov128", fj::cov(fj::window(A, 128), fj::window(B, 128))});
    cases.push_back({"std100", fj::std(fj::window(A, 100))});
    check_window_scans_compile(cases, true, 3);
    // `factorjit compile` says which kind of kernel it made.
    const std::string dir = std::string(FJ_TEST_TMP) + "/cuda_cli_chain";
    std::filesystem::create_directories(dir);
    auto compile = [&](const char* chain) {
        const std::string out_file = dir + "/out.txt";
        const std::string cmd = std::string("FJ_CUDA_SCAN_CHAIN=") + chain + " '" + FJ_CLI_PATH +
                                "' compile -e 'corr(window(A, 250), window(B, 250))' --arch sm_90 --ld 50000 > '" + out_file +
                                "' 2>&1";
        CHECK(std::system(cmd.c_str()) == 0);
        std::ifstream f(out_file);
        return std::string(std::istreambuf_iterator<char>(f), {});
    };
    CHECK(compile("1").find("chained window scan: the windows of 32 columns per block, batches of 25 rows") != std::string::npos);
    CHECK(compile("0").find("  window scan: the windows of 32 columns per block in 114352 bytes") != std::string::npos);
}

TEST_CASE("all operators in one program, default settings, both dtypes") {
    if (!have_nvrtc()) return;
    for (fj::DType dtype : {fj::DType::F32, fj::DType::F64})
        for (const auto& r : fj::codegen::make_plan(fj::test::cuda_op_cases(), dtype).steps) {
            cu::CudaCompiled c = cu::compile_cuda_kernel(r.kernel, dtype, "sm_90", true, cu::CudaSettings{});
            CHECK(c.registers > 0);
            CHECK(c.registers <= 255);
        }
}

TEST_CASE("NVRTC failure: BackendError with the log and the dump path") {
    if (!have_nvrtc()) return;
    const std::string dir = std::string(FJ_TEST_TMP) + "/cuda_dump";
    std::filesystem::remove_all(dir);
    ::setenv("FJ_DUMP_DIR", dir.c_str(), 1);
    const std::string path = cu::dump_source("broken", "this is not CUDA");
    ::unsetenv("FJ_DUMP_DIR");
    CHECK(path == dir + "/broken.cu");
    CHECK(std::filesystem::exists(path));
    try {
        cu::nvrtc_compile("extern \"C\" __global__ void k() { undeclared_thing(); }", "broken",
                          fj::codegen::cuda_compile_options("sm_90", false), true, path);
        FAIL("expected a BackendError");
    } catch (const fj::BackendError& e) {
        const std::string m = e.what();
        CHECK(m.find("nvrtcCompileProgram") != std::string::npos);
        CHECK(m.find("undeclared_thing") != std::string::npos);  // the log
        CHECK(m.find(path) != std::string::npos);
    }
}

TEST_CASE("FJ_DUMP_DIR keeps every generated source") {
    if (!have_nvrtc()) return;
    const std::string dir = std::string(FJ_TEST_TMP) + "/cuda_dump2";
    std::filesystem::remove_all(dir);
    ::setenv("FJ_DUMP_DIR", dir.c_str(), 1);
    const fj::codegen::Plan plan = fj::codegen::make_plan({{"o", fj::mean(fj::window(fj::input("A"), 3))}});
    cu::CudaSettings s;
    s.unroll = 1;
    cu::CudaCompiled c = cu::compile_cuda_kernel(plan.steps[0].kernel, fj::DType::F32, "sm_90", true, s);
    ::unsetenv("FJ_DUMP_DIR");
    REQUIRE(!c.dump_path.empty());
    std::ifstream f(c.dump_path);
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    CHECK(text == c.source);
}

TEST_CASE("cache keys separate dtype, arch and code-generation settings") {
    if (!have_nvrtc()) return;
    const fj::codegen::Plan plan = fj::codegen::make_plan({{"o", fj::mean(fj::window(fj::input("A"), 3))}});
    const auto& k = plan.steps[0].kernel;
    cu::CudaSettings s, s2;
    s2.unroll = 2;
    const std::string a = cu::cuda_kernel_key(k, fj::DType::F32, "sm_90", true, s);
    CHECK(a == cu::cuda_kernel_key(k, fj::DType::F32, "sm_90", true, s));
    CHECK(a != cu::cuda_kernel_key(k, fj::DType::F64, "sm_90", true, s));
    CHECK(a != cu::cuda_kernel_key(k, fj::DType::F32, "sm_80", true, s));
    CHECK(a != cu::cuda_kernel_key(k, fj::DType::F32, "sm_90", true, s2));
    s2 = s;
    s2.fmad = true;
    CHECK(a != cu::cuda_kernel_key(k, fj::DType::F32, "sm_90", true, s2));
    CHECK(a != cu::cuda_kernel_key(k, fj::DType::F32, "sm_90", true, s, {64, 64}));
    CHECK(cu::cuda_kernel_key(k, fj::DType::F32, "sm_90", true, s, {64, 64}) !=
          cu::cuda_kernel_key(k, fj::DType::F32, "sm_90", true, s, {64, 65}));
    s2 = s;
    s2.extra_options = {"--ptxas-options=-O1"};
    CHECK(cu::cuda_kernel_key(k, fj::DType::F32, "sm_90", true, s, {64, 64}) !=
          cu::cuda_kernel_key(k, fj::DType::F32, "sm_90", true, s2, {64, 64}));
    // Every setting of the declaration list that changes code is in the keys of the kernels it changes, and
    // only there (codegen/cuda/settings.hpp): generated from the list, so a new setting is covered too.
    // (unroll_given: FJ_CUDA_UNROLL as if set, so that specialised kernels take the unroll given.)
    s.unroll_given = true;
#define FJ_KEY_CHANGE(type, field, env, def, lo, hi, scope, doc)                                                   \
    {                                                                                                           \
        INFO(env);                                                                                              \
        s2 = s;                                                                                                 \
        s2.field = s2.field == (hi) ? (lo) : s2.field + 1;                                                     \
        const auto sc = fj::codegen::SettingScope::scope;                                                       \
        const bool fixed_key = sc == fj::codegen::SettingScope::All || sc == fj::codegen::SettingScope::Fixed;  \
        const bool generic_key = sc == fj::codegen::SettingScope::All || sc == fj::codegen::SettingScope::Generic; \
        CHECK((cu::cuda_kernel_key(k, fj::DType::F32, "sm_90", true, s, {64, 64}) !=                            \
               cu::cuda_kernel_key(k, fj::DType::F32, "sm_90", true, s2, {64, 64})) == fixed_key);             \
        CHECK((cu::cuda_kernel_key(k, fj::DType::F32, "sm_90", true, s) !=                                      \
               cu::cuda_kernel_key(k, fj::DType::F32, "sm_90", true, s2)) == generic_key);                     \
    }
    FJ_CUDA_SETTINGS(FJ_KEY_CHANGE)
#undef FJ_KEY_CHANGE
}

TEST_CASE("kernels specialised on leading dimensions compile, with constant strides and L2 prefetch") {
    if (!have_nvrtc()) return;
    const fj::Expr A = fj::input("A"), B = fj::input("B");
    const fj::codegen::Plan plan = fj::codegen::make_plan({{"o", fj::corr(fj::window(A, 20), fj::window(B, 20))}});
    // The one kernel of `p`, specialised on a leading dimension of 50,000 with these settings.
    auto specialised = [](const fj::codegen::Plan& p, const cu::CudaSettings& s, fj::DType dt = fj::DType::F32) {
        const auto done = cu::compile_cuda_kernels({&p.steps[0].kernel}, dt, "sm_90", true, s, 50000);
        REQUIRE(done.size() == 1);
        return done[0];
    };
    const auto done = specialised(plan, cu::CudaSettings{});
    CHECK(done.source.find("const long long ld_in1 = 50000LL;") != std::string::npos);
    CHECK(done.source.find("FJ_PREFETCH_L2(&in0[") != std::string::npos);
    CHECK(done.key.find("ld=[50000,50000,50000]") != std::string::npos);
    CHECK(done.registers > 0);
    CHECK(done.registers <= 128);  // 512 threads per SM (65,536 registers)
    // Float32 corr: the reciprocal square root without CUDA's slow path; the pass's first rows batched.
    CHECK(done.source.find("fj_rsqrt(") != std::string::npos);
    CHECK(done.source.find("rsqrt.approx.ftz.f64") != std::string::npos);
    // ... the pass's first rows in batches that may run past the warm-up, its last ones in masked batches.
    CHECK(done.source.find("t < warm_end && t + 4 <= row_end; t += 4)") != std::string::npos);
    CHECK(done.source.find("< row_end ? in0[") != std::string::npos);
    // Echo rings: the values corr's sums remove come back from shared memory (20 rows of A's and B's
    // shifted values, 41 doubles a thread: an odd stride), batches of 20 rows that start 20 rows on from the
    // pass's first row, no loads of leaving rows in them; without them, 16 rows and the loads.
    CHECK(done.shape.echo_rings == 2);
    CHECK(done.shape.batch_rows == 20);
    CHECK(done.shape.smem_per_thread == 41 * 8);
    CHECK(done.source.find("volatile double* const fj_echo") != std::string::npos);  // (no forwarding, no hoisting)
    CHECK(done.source.find("const double ve1 = fj_echo[39];") != std::string::npos);
    CHECK(done.source.find("fj_echo[20 + (int)((unsigned long long)((t + 3) - row_begin) % 20u)] = v") != std::string::npos);
    CHECK(done.source.find("|| (t - row_begin) % 20 != 0); ++t)") != std::string::npos);
    const std::size_t batched = done.source.find("for (; t + 40 <= row_end; t += 20) {");
    REQUIRE(batched != std::string::npos);
    // (up to the next loop of the pass: refolds' loops inside the batch are indented deeper)
    const std::string loop = done.source.substr(batched, done.source.find("\n    #pragma unroll 1", batched) - batched);
    CHECK(loop.find("in0[-") == std::string::npos);
    CHECK(loop.find("in0[39LL * ld_in0]") != std::string::npos);  // (the rolling load of the next batch's last row)
    CHECK(done.stack_bytes == 0);
    {
        cu::CudaSettings no_echo;
        no_echo.echo = false;
        const auto loads = specialised(plan, no_echo);
        CHECK(loads.shape.echo_rings == 0);
        CHECK(loads.shape.batch_rows == 16);
        CHECK(loads.shape.smem_per_thread == 0);
        CHECK(loads.source.find("fj_echo") == std::string::npos);
        CHECK(loads.source.find("x0_m20 = in0[-4LL * ld_in0];") != std::string::npos);
        CHECK(loads.key != done.key);
        // A single window of 20 has one ring (21 doubles). One of 5 has none by default (shorter than
        // CudaEmitOptions::echo_min_lag); allowed, it takes batches of 20 (the first multiple of 5 from 16
        // rows) and a ring of 5 doubles. A pair of windows of 30: no multiple of at most kCudaMaxEchoUnroll
        // rows, so no ring. Float64 as float32.
        const auto std20 = specialised(fj::codegen::make_plan({{"o", fj::std(fj::window(A, 20))}}), cu::CudaSettings{});
        CHECK(std20.shape.echo_rings == 1);
        CHECK(std20.shape.smem_per_thread == 21 * 8);
        const fj::codegen::Plan std5_plan = fj::codegen::make_plan({{"o", fj::std(fj::window(A, 5))}});
        const auto std5 = specialised(std5_plan, cu::CudaSettings{});
        CHECK(std5.shape.echo_rings == 0);
        CHECK(std5.shape.batch_rows == 16);
        CHECK(std5.shape.smem_per_thread == 0);
        fj::codegen::CudaEmitOptions short_ring = std5.choice.options;
        short_ring.echo_min_lag = 1;
        const fj::codegen::CudaColumnScanShape ring5 = fj::codegen::cuda_column_scan_shape(std5_plan.steps[0].kernel, short_ring);
        CHECK(ring5.echo_rings == 1);
        CHECK(ring5.batch_rows == 20);
        CHECK(ring5.smem_per_thread == 5 * 8);
        const auto corr30 = specialised(fj::codegen::make_plan({{"o", fj::corr(fj::window(A, 30), fj::window(B, 30))}}),
                                        cu::CudaSettings{}, fj::DType::F64);
        CHECK(corr30.shape.echo_rings == 0);
        CHECK(corr30.shape.batch_rows == 16);
        CHECK(corr30.shape.smem_per_thread == 0);
        const auto f64 = specialised(plan, cu::CudaSettings{}, fj::DType::F64);
        CHECK(f64.shape.echo_rings == 2);
        CHECK(f64.shape.smem_per_thread == 41 * 8);
        CHECK(f64.stack_bytes <= 512);  // (guarded by default: a flagging kernel at 128 registers spills a few bytes)
    }
    // The halo's rows before out_begin in batches that store nothing, where the rows leaving the window
    // before the pass are not read (every use masks them).
    CHECK(done.source.find("for (; t + 4 <= out_begin; t += 4)") != std::string::npos);
    CHECK(done.source.find("x0_m20 = t - 20 >= row_begin ? in0[-20LL * ld_in0]") != std::string::npos);
    CHECK(done.source.find("x1_m17 = t - 20 >= row_begin") == std::string::npos);
    CHECK(done.source.find("x1_m17 = t - 17 >= row_begin ? in1[-17LL * ld_in1]") != std::string::npos);
    {
        // Loaded wherever the row lies in the panel: a lagged input read unmasked (delay(A, 10) as a value,
        // the entering rows of a window of delay(A, 3)), and one masked by a RowInPass that holds on rows
        // before the pass (the leaving rows of that window, t - 13, are read while t - 10 is in the pass).
        // B's window leaves only inside the pass.
        const fj::Expr B10 = fj::mean(fj::window(B, 10));
        const fj::codegen::Plan lagged =
            fj::codegen::make_plan({{"o", fj::mean(fj::window(fj::delay(A, 3), 10)) + fj::delay(A, 10) + B10}});
        const std::string src = specialised(lagged, cu::CudaSettings{}).source;
        CHECK(src.find("x0_m3 = t >= 3 ? in0[-3LL * ld_in0]") != std::string::npos);
        CHECK(src.find("x0_m13 = t >= 13 ? in0[-13LL * ld_in0]") != std::string::npos);
        CHECK(src.find("x0_m10 = t >= 10 ? in0[-10LL * ld_in0]") != std::string::npos);
        CHECK(src.find("x1_m10 = t - 10 >= row_begin ? in1[-10LL * ld_in1]") != std::string::npos);
        CHECK(src.find("row_begin ? in0[") == std::string::npos);
    }
    // Rows read again 20 rows later: no L2 eviction hints by default (kCacheHintMinLag); 250: hints.
    CHECK(done.source.find("FJ_LD_KEEP(") == std::string::npos);
    {
        const fj::codegen::Plan long_plan =
            fj::codegen::make_plan({{"o", fj::corr(fj::window(A, 250), fj::window(B, 250))}});
        cu::CudaSettings column;
        column.window_scan = 0;
        const auto long_window = specialised(long_plan, column);
        CHECK(long_window.choice.scan.smem_bytes == 0);
        CHECK(long_window.source.find("FJ_LD_KEEP(x0_15, &in0[31LL * ld_in0], fj_keep);") != std::string::npos);
        CHECK(long_window.source.find("FJ_LD_LAST(x0_m250, &in0[-234LL * ld_in0]);") != std::string::npos);
        // By default a window that long is a window scan (kWindowScanMinLag): its rings of 384 rows for A and B
        // (250 back and 4 batches: the one computed and 3 copied ahead, as many as fit), the scan's totals
        // (5 sums, 3 counters) and 4 mbarriers in shared memory (not chained: FJ_CUDA_SCAN_CHAIN=0).
        cu::CudaSettings plain;
        plain.scan_chain = 0;
        const auto scan = specialised(long_plan, plain);
        CHECK(scan.choice.options.window_scan);
        CHECK(scan.choice.scan.smem_bytes == 2 * (384 + 4) * 32 * 4 + 9 * 32 * (5 * 8 + 3 * 4) + 4 * 8 + 16);
        cu::CudaSettings two_ahead = plain;
        two_ahead.scan_ahead = 2;
        const auto scan2 = specialised(long_plan, two_ahead);
        CHECK(scan2.choice.scan.smem_bytes == 2 * (352 + 4) * 32 * 4 + 9 * 32 * (5 * 8 + 3 * 4) + 3 * 8 + 16);
        CHECK(scan2.key != scan.key);
        // cov's 3 sums: as many ahead as fit (4), in rings of 416 rows.
        const fj::codegen::Plan cov_plan =
            fj::codegen::make_plan({{"o", fj::cov(fj::window(A, 250), fj::window(B, 250))}});
        CHECK(specialised(cov_plan, cu::CudaSettings{}).source.find("rings of 416 rows") != std::string::npos);
        cu::CudaSettings four_ahead = plain;  // (does not fit: the column scan)
        four_ahead.scan_ahead = 4;
        CHECK_FALSE(specialised(long_plan, four_ahead).choice.options.window_scan);
        // 8 warps of 4-row segments: blocks of 256 threads (the runtime launches the kernel's bounds).
        CHECK(scan.source.find("__launch_bounds__(256, 2)") != std::string::npos);
        CHECK(scan.source.find("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes") != std::string::npos);
        // Their copies are sm_90's: for earlier targets the column scan.
        const std::vector<long long> lds(3, 50000);
        CHECK(cu::choose_kernel(long_plan.steps[0].kernel, fj::DType::F32, "sm_90", cu::CudaSettings{}, lds).options.window_scan);
        CHECK_FALSE(cu::choose_kernel(long_plan.steps[0].kernel, fj::DType::F32, "sm_80", cu::CudaSettings{}, lds).options.window_scan);
        CHECK(cu::choose_kernel(long_plan.steps[0].kernel, fj::DType::F32, "sm_100", cu::CudaSettings{}, lds).options.window_scan);
        CHECK(scan.source.find("rings of 384 rows") != std::string::npos);
        // FJ_CUDA_SCAN_CHAIN=1: the chained window scan where the sums split (chained_scan.cpp): one block
        // of 16 warps per SM, batches of 25 rows (250 = 10 x 25) in rings of 10 + 16 + 2 batches per input
        // after 4 mirrored rows, the entering sums of 27 batches, two hand-over slots, 72 mbarriers and the
        // ready row; it compiles, within 128 registers. cov's 3 sums and 1 counter the same way.
        cu::CudaSettings chained;
        chained.scan_chain = 1;
        const auto chain = specialised(long_plan, chained);
        CHECK(chain.choice.options.window_scan_chain);
        CHECK(chain.source.find("__launch_bounds__(512, 1)") != std::string::npos);
        CHECK(chain.choice.scan.smem_bytes == 2 * (28 * 25 + 4) * 32 * 4 + 27 * 5 * 32 * 8 + 2 * 32 * (5 * 8 + 3 * 4) + (2 * 28 + 16) * 8 + 16);
        CHECK(chain.registers > 0);
        CHECK(chain.registers <= 128);
        CHECK(chain.key != scan.key);
        CHECK(chain.key.find("chain=1") != std::string::npos);
        const auto cov_chain = specialised(cov_plan, chained);
        CHECK(cov_chain.choice.options.window_scan_chain);
        CHECK(cov_chain.choice.scan.smem_bytes == 2 * (28 * 25 + 4) * 32 * 4 + 27 * 3 * 32 * 8 + 2 * 32 * (3 * 8 + 1 * 4) + (2 * 28 + 16) * 8 + 16);
        // By default (FJ_CUDA_SCAN_CHAIN=-1) chained where the window scan keeps kChainMinSums sums or more:
        // corr's 5, not cov's 3.
        const auto by_default = specialised(long_plan, cu::CudaSettings{});
        CHECK(by_default.choice.options.window_scan_chain);
        CHECK(by_default.choice.scan.smem_bytes == chain.choice.scan.smem_bytes);
        const auto cov_default = specialised(cov_plan, cu::CudaSettings{});
        CHECK(cov_default.choice.options.window_scan);
        CHECK_FALSE(cov_default.choice.options.window_scan_chain);
        // A window no batch of 16 to 32 rows divides keeps the window scan.
        const auto odd = specialised(fj::codegen::make_plan({{"o", fj::corr(fj::window(A, 251), fj::window(B, 251))}}), chained);
        CHECK(odd.choice.options.window_scan);
        CHECK_FALSE(odd.choice.options.window_scan_chain);
        CHECK(scan.key != long_window.key);
        // With one long-window input the column scan stays (it measured faster: kWindowScanMinInputs), and
        // so it does for short windows; FJ_CUDA_WINDOW_SCAN=1 asks for a window scan wherever one can be.
        const fj::codegen::Plan one = fj::codegen::make_plan({{"o", fj::std(fj::window(A, 300))}});
        CHECK(fj::codegen::long_window_inputs(one.steps[0].kernel) == 1);
        CHECK(specialised(one, cu::CudaSettings{}).choice.scan.smem_bytes == 0);
        cu::CudaSettings always;
        always.window_scan = 1;
        CHECK(specialised(one, always).choice.scan.smem_bytes > 0);
        const fj::codegen::Plan short_corr = fj::codegen::make_plan({{"o", fj::corr(fj::window(A, 100), fj::window(B, 100))}});
        CHECK(fj::codegen::long_window_inputs(short_corr.steps[0].kernel) == 0);
        CHECK(specialised(short_corr, cu::CudaSettings{}).choice.scan.smem_bytes == 0);
    }

    SUBCASE("without masked edge batches") {
        cu::CudaSettings e;
        e.batched_edges = false;
        const auto plain = specialised(plan, e);
        CHECK(plain.source.find("< row_end ? in0[") == std::string::npos);  // last rows one at a time
        CHECK(plain.source.find("for (; t + 4 <= warm_end; t += 4)") != std::string::npos);
        CHECK(plain.registers > 0);
    }
    SUBCASE("L2 eviction hints") {
        cu::CudaSettings h;
        h.cache_hints = true;
        h.echo = false;  // (echo rings read no row twice)
        for (fj::DType dt : {fj::DType::F32, fj::DType::F64}) {
            const auto hinted = specialised(plan, h, dt);
            const std::string& src = hinted.source;
            // w = 20, 16 rows per batch: each input's rows t+16..t+31 are loaded to be kept (read again as
            // they leave the window), rows t-4..t+11 for the last time; outputs are streamed.
            CHECK(src.find("FJ_LD_KEEP(x1_15, &in1[31LL * ld_in1], fj_keep);") != std::string::npos);
            CHECK(src.find("FJ_LD_LAST(x0_m20, &in0[-4LL * ld_in0]);") != std::string::npos);
            CHECK(src.find("FJ_ST_STREAM(&out0[") != std::string::npos);
            CHECK(src.find("createpolicy.fractional.L2::evict_last") != std::string::npos);
            CHECK(hinted.registers > 0);
        }
    }
}

TEST_CASE("big bodies keep the codegen v5 shapes (no fj_rsqrt, no warm-up batches)") {
    if (!have_nvrtc()) return;
    // A big body that still runs rows in batches: the cases without Alpha101's time-series operators and the
    // moments and order statistics added after them (all of them make a body beyond 1500 live instructions,
    // which runs one row at a time: KernelFacts), lowered into one kernel directly (the planner cuts a group
    // beyond 128 states into several).
    auto cases = fj::test::cuda_op_cases();
    std::erase_if(cases, [](const auto& c) {
        for (const fj::Node* n : fj::topo_order({c.second.node()}))
            switch (n->op) {
            case fj::Op::WArgMin: case fj::Op::WArgMax: case fj::Op::WTsRank: case fj::Op::WProduct:
            case fj::Op::WDecayLinear: case fj::Op::WSkew: case fj::Op::WKurt: case fj::Op::WMedian:
            case fj::Op::WQuantile: case fj::Op::WSlope: case fj::Op::WRSquare: case fj::Op::WResid:
            case fj::Op::Ema: return true;
            default: break;
            }
        return false;
    });
    std::vector<const fj::Node*> roots;
    std::set<std::string> reads;
    for (const auto& c : cases) {
        roots.push_back(c.second.node());
        for (const fj::Node* n : fj::topo_order({c.second.node()}))
            if (n->op == fj::Op::Input) reads.insert(n->name);
    }
    fj::ir::Kernel big;
    big.name = "fj_big_body";
    big.inputs.assign(reads.begin(), reads.end());
    for (std::size_t i = 0; i < cases.size(); ++i) big.outputs.push_back("out" + std::to_string(i));
    fj::codegen::lower_region(roots, false, fj::DType::F32, big);
    fj::codegen::CudaEmitOptions o;
    o.strides.assign(big.inputs.size() + big.outputs.size(), 64);
    o.unroll = 16;
    const std::string src = fj::codegen::emit_cuda(big, o);
    CHECK(src.find("fj_rsqrt(") == std::string::npos);
    CHECK(src.find("warm_end; t +=") == std::string::npos);
    // The diagnosis switch gives them back (to reproduce the miscompile, bench/RESULTS.md).
    o.big_body_shapes = true;
    const std::string diag = fj::codegen::emit_cuda(big, o);
    CHECK(diag.find("fj_rsqrt(") != std::string::npos);
    CHECK(diag.find("warm_end; t +=") != std::string::npos);
}

TEST_CASE("arch parsing") {
    int ma = 0, mi = 0;
    cu::parse_arch("sm_90", &ma, &mi);
    CHECK((ma == 9 && mi == 0));
    cu::parse_arch("sm_120", &ma, &mi);
    CHECK((ma == 12 && mi == 0));
    cu::parse_arch("sm_90a", &ma, &mi);
    CHECK((ma == 9 && mi == 0));
    CHECK_THROWS_AS(cu::parse_arch("sm_9", &ma, &mi), fj::Error);
    CHECK_THROWS_AS(cu::parse_arch("90", &ma, &mi), fj::Error);
}

TEST_CASE("window-scan settings from the environment, with clear errors") {
    auto with = [](const char* ahead, const char* chain = nullptr) {
        return settings_with({{"FJ_CUDA_SCAN_AHEAD", ahead}, {"FJ_CUDA_SCAN_CHAIN", chain}});
    };
    const auto [defaults, none] = with(nullptr);
    CHECK(none.empty());
    CHECK(defaults.scan_ahead == 0);
    const auto [set, ok] = with("3");
    CHECK(ok.empty());
    CHECK(set.scan_ahead == 3);
    CHECK(with("9").second.find("FJ_CUDA_SCAN_AHEAD=9") != std::string::npos);
    CHECK(with("two").second.find("not an integer") != std::string::npos);
    CHECK(defaults.scan_chain == -1);
    CHECK(with(nullptr, "1").first.scan_chain == 1);
    CHECK(with(nullptr, "0").first.scan_chain == 0);
    CHECK(with(nullptr, "2").second.find("FJ_CUDA_SCAN_CHAIN") != std::string::npos);
}

TEST_CASE("generic kernels in one guarded loop by default; FJ_CUDA_ONE_LOOP and FJ_CUDA_UNROLL") {
    auto with = [](const char* one_loop, const char* unroll) {
        return settings_with({{"FJ_CUDA_ONE_LOOP", one_loop}, {"FJ_CUDA_UNROLL", unroll}});
    };
    CHECK(with(nullptr, nullptr).first.one_loop);
    CHECK_FALSE(with("0", nullptr).first.one_loop);
    CHECK_FALSE(with(nullptr, "4").first.one_loop);  // batches asked for
    CHECK(with("1", "4").first.one_loop);
    CHECK(with("2", nullptr).second.find("FJ_CUDA_ONE_LOOP") != std::string::npos);

    const fj::Expr A = fj::input("A"), B = fj::input("B");
    const fj::codegen::Plan plan = fj::codegen::make_plan({{"o", fj::corr(fj::window(A, 20), fj::window(B, 20))}});
    const fj::ir::Kernel& k = plan.steps[0].kernel;
    const cu::CudaSettings one = with(nullptr, nullptr).first, two = with("0", nullptr).first;
    const std::string one_src = fj::codegen::emit_cuda(k, cu::choose_kernel(k, fj::DType::F32, "sm_90", one).options);
    const std::string two_src = fj::codegen::emit_cuda(k, cu::choose_kernel(k, fj::DType::F32, "sm_90", two).options);
    CHECK(one_src.find("one guarded loop") != std::string::npos);
    CHECK(one_src.find("for (; t < row_end; ++t) {") != std::string::npos);
    CHECK(two_src.find("one guarded loop") == std::string::npos);
    CHECK(one_src.size() < two_src.size());
    // Different code, different cache entries; kernels for big panels (strides) are not affected.
    CHECK(cu::cuda_kernel_key(k, fj::DType::F32, "sm_90", true, one, {}) !=
          cu::cuda_kernel_key(k, fj::DType::F32, "sm_90", true, two, {}));
    const std::vector<long long> ld(3, 64);
    CHECK(fj::codegen::emit_cuda(k, cu::choose_kernel(k, fj::DType::F32, "sm_90", one, ld).options) ==
          fj::codegen::emit_cuda(k, cu::choose_kernel(k, fj::DType::F32, "sm_90", two, ld).options));
}

TEST_CASE("launch configuration") {
    cu::LaunchInput in;
    in.sm_count = 132;
    in.block = 256;
    in.blocks_per_sm = 4;
    in.halo = 19;

    SUBCASE("50,000 x 50,000: few long tiles, the halo a tiny share") {
        in.rows = in.cols = 50000;
        const cu::LaunchShape s = cu::choose_launch(in);
        CHECK(s.block == 256);
        CHECK(s.grid_x == 196);
        CHECK(s.grid_x * s.grid_y >= 132 * 4 * 4);
        CHECK(s.tile_rows * s.ntiles >= 50000);
        CHECK(s.tile_rows >= 8 * 19);
    }
    SUBCASE("5,000 x 4,000: tiles fill the GPU, but no tile shorter than 8 halos") {
        in.rows = 5000;
        in.cols = 4000;
        const cu::LaunchShape s = cu::choose_launch(in);
        CHECK(s.grid_x == 16);
        CHECK(s.tile_rows >= 8 * 19);
        CHECK(s.ntiles >= 20);
        CHECK(s.tile_rows * s.ntiles >= 5000);
        CHECK((s.ntiles - 1) * s.tile_rows < 5000);
        // Too few rows for many waves: as few whole waves as the floor allows, here one.
        CHECK(s.grid_x * s.ntiles <= 132 * 4);
        CHECK(s.ntiles == 32);
    }
    // The corr w=20 kernel's shape on the H200: blocks of 512 threads, one per SM.
    auto on_h200 = [&](std::int64_t rows, std::int64_t cols) {
        in.block = 512;
        in.blocks_per_sm = 1;
        in.rows = rows;
        in.cols = cols;
        return cu::choose_launch(in);
    };
    SUBCASE("5,000 x 4,000 as on the H200: one wave of 313-row tiles") {
        const cu::LaunchShape s = on_h200(5000, 4000);
        CHECK(s.grid_x == 8);
        CHECK(s.ntiles == 16);
        CHECK(s.tile_rows == 313);
    }
    SUBCASE("10,000 x 4,000 as on the H200: floor tiles would make 4 waves; the model's least is one") {
        const cu::LaunchShape s = on_h200(10000, 4000);
        // one wave of 625 + 19 + 32 rows against two of 304 + 51, three of 205 + 51, four of 152 + 51
        CHECK(s.ntiles == 16);
        CHECK(s.tile_rows == 625);
    }
    SUBCASE("20,000 x 4,000 as on the H200: floor tiles make 8 waves, more than kFewWaves, so they stay") {
        const cu::LaunchShape s = on_h200(20000, 4000);
        CHECK(s.ntiles == 132);
        CHECK(s.tile_rows == 152);
    }
    SUBCASE("one column: a single warp per block") {
        in.rows = 1000;
        in.cols = 1;
        const cu::LaunchShape s = cu::choose_launch(in);
        CHECK(s.block == 32);
        CHECK(s.grid_x == 1);
    }
    SUBCASE("1 x 1") {
        in.rows = in.cols = 1;
        const cu::LaunchShape s = cu::choose_launch(in);
        CHECK(s.grid_x == 1);
        CHECK(s.ntiles == 1);
        CHECK(s.tile_rows == 1);
    }
    SUBCASE("an explicit tile length wins") {
        in.rows = 1000;
        in.cols = 100;
        in.tile_rows = 7;
        const cu::LaunchShape s = cu::choose_launch(in);
        CHECK(s.tile_rows == 7);
        CHECK(s.ntiles == 143);
    }
    SUBCASE("more tiles than the grid's y limit: the kernel strides") {
        in.rows = 10'000'000;
        in.cols = 32;
        in.tile_rows = 10;
        const cu::LaunchShape s = cu::choose_launch(in);
        CHECK(s.ntiles == 1'000'000);
        CHECK(s.grid_y == 65535);
    }
    SUBCASE("empty") {
        in.rows = 0;
        in.cols = 10;
        CHECK(cu::choose_launch(in).grid_x == 0);
    }
    SUBCASE("window scans: a fixed block owns 32 columns; few waves") {
        in.rows = in.cols = 50000;
        in.halo = 249;
        in.block = 32 * fj::codegen::kWindowScanWarps;
        in.cols_per_block = fj::codegen::kWindowScanColumns;
        in.blocks_per_sm = 2;
        in.sm_count = 132;
        in.waves = 4;  // (the window scan's, runtime/cuda/backend.cpp)
        const cu::LaunchShape s = cu::choose_launch(in);
        CHECK(s.block == 256);
        CHECK(s.grid_x == 1563);
        CHECK(s.ntiles == 1);  // 1,563 blocks are 5.9 waves of 264 already
        in.cols = 5;             // fewer columns than a block owns: still 256 threads
        const cu::LaunchShape n = cu::choose_launch(in);
        CHECK(n.block == 256);
        CHECK(n.grid_x == 1);
        CHECK(n.tile_rows >= 8 * 249);
    }
}

TEST_CASE("cuda_backend() without a GPU says why") {
    std::string why;
    fj::rt::BackendImpl* b = fj::rt::cuda_backend(&why);
    if (b) {
        MESSAGE("a GPU is present: " << b->name());
    } else {
        CHECK(!why.empty());
        MESSAGE("cuda_backend() is null: " << why);
    }
}

TEST_CASE("the row kernels (cross-sectional operators) compile for both dtypes, without warnings or a local frame") {
    if (!have_nvrtc()) return;
    for (fj::DType dtype : {fj::DType::F32, fj::DType::F64}) {
        CAPTURE(fj::dtype_name(dtype));
        const std::string fn = cu::row_kernel_name(dtype);
        cu::NvrtcOutput out;
        try {
            out = cu::nvrtc_compile(cu::row_kernels_source(dtype), fn, cu::nvrtc_options("sm_90", {}), true, "");
        } catch (const fj::Error& e) {
            FAIL(e.what());
        }
        const cu::CubinResources r = cu::cubin_resources(out.image, fn);
        CHECK(r.registers > 0);
        CHECK(r.registers <= 64);  // (1024 threads a block: __launch_bounds__(1024))
        // float32's radix sort holds 8 keys a thread in registers: at 64 registers a few values live in a small frame.
        CHECK(r.stack_bytes <= (dtype == fj::DType::F32 ? 128 : 0));
        CHECK_MESSAGE(out.log.find("warning") == std::string::npos, out.log);
    }
    for (fj::Op op : {fj::Op::Rank, fj::Op::ZScore, fj::Op::Demean, fj::Op::Scale, fj::Op::GroupRank, fj::Op::GroupZScore,
                      fj::Op::GroupNeutralize})
        CHECK_NOTHROW(cu::row_kernel_op_code(op));
    CHECK_THROWS_AS(cu::row_kernel_op_code(fj::Op::WMean), fj::BackendError);
    CHECK(cu::row_kernel_padded(1) == 2);
    CHECK(cu::row_kernel_padded(5000) == 8192);
    CHECK(cu::row_kernel_padded(8192) == 8192);
    // Launches (the H200's 232,448 bytes of shared memory a block): float32 rows but for group_rank take the radix
    // sort in blocks of ceil(cols / 384) warps while its keys, their spare and the counters fit; the rest the
    // bitonic sort of 1,024 threads.
    const int smem = 232448;
    const cu::RowLaunch r5000 = cu::row_kernel_launch(fj::DType::F32, fj::Op::Rank, 5000, smem);
    CHECK(r5000.radix);
    CHECK(r5000.threads == 448);
    CHECK(r5000.padded == 5376);
    CHECK(r5000.smem_bytes == 5376 * 16 + 14 * 64 * 4);
    CHECK(cu::row_kernel_launch(fj::DType::F32, fj::Op::Rank, 1, smem).threads == 32);
    CHECK(cu::row_kernel_launch(fj::DType::F32, fj::Op::Rank, 12288, smem).radix);
    CHECK_FALSE(cu::row_kernel_launch(fj::DType::F32, fj::Op::Rank, 12289, smem).radix);
    CHECK_FALSE(cu::row_kernel_launch(fj::DType::F32, fj::Op::ZScore, 12000, smem).radix);  // (groups' starts too)
    CHECK(cu::row_kernel_launch(fj::DType::F32, fj::Op::ZScore, 8000, smem).radix);
    CHECK_FALSE(cu::row_kernel_launch(fj::DType::F32, fj::Op::GroupRank, 100, smem).radix);
    CHECK_FALSE(cu::row_kernel_launch(fj::DType::F64, fj::Op::Rank, 100, smem).radix);
    CHECK(cu::row_kernel_launch(fj::DType::F64, fj::Op::Rank, 100, smem).threads == 1024);
}

TEST_CASE("the column kernel (long ts_rank, median, quantile) compiles for both dtypes, without warnings or a local frame") {
    if (!have_nvrtc()) return;
    for (fj::DType dtype : {fj::DType::F32, fj::DType::F64}) {
        CAPTURE(fj::dtype_name(dtype));
        const std::string fn = cu::column_kernel_name(dtype);
        cu::NvrtcOutput out;
        try {
            out = cu::nvrtc_compile(cu::column_kernels_source(dtype), fn, cu::nvrtc_options("sm_90", {}), true, "");
        } catch (const fj::Error& e) {
            FAIL(e.what());
        }
        const cu::CubinResources r = cu::cubin_resources(out.image, fn);
        CHECK(r.registers > 0);
        CHECK(r.registers <= 255);
        CHECK(r.stack_bytes == 0);
        CHECK_MESSAGE(out.log.find("warning") == std::string::npos, out.log);
    }
    CHECK(cu::column_kernel_op_code(fj::Op::WTsRank) == 0);
    CHECK(cu::column_kernel_op_code(fj::Op::WMedian) == 1);
    CHECK(cu::column_kernel_op_code(fj::Op::WQuantile) == 1);
    CHECK_THROWS_AS(cu::column_kernel_op_code(fj::Op::WMean), fj::BackendError);
    // Launches (the H200: 232,448 bytes of shared memory a block, 132 SMs): P >= 4 (d - 1), at least 1,024; tiles of
    // P - (d - 1) rows; 2^bits > P + 1; shared memory up to P = 4,096 (d <= 1,024), global scratch beyond.
    const cu::ColumnLaunch l250 = cu::column_kernel_launch(250, 20000, 5000, 232448, 132);
    CHECK(l250.padded == 1024);
    CHECK(l250.tile == 775);
    CHECK(l250.bits == 11);
    CHECK(l250.tiles == 26);
    CHECK(l250.in_smem);
    CHECK(l250.grid == 5000 * 26);
    CHECK(l250.bytes == (14 * 1024 + 2 * 11 * 1025 + 15) / 16 * 16);
    CHECK(cu::column_kernel_launch(64, 100, 3, 232448, 132).padded == 1024);
    CHECK(cu::column_kernel_launch(1000, 100, 3, 232448, 132).padded == 4096);
    CHECK(cu::column_kernel_launch(1000, 100, 3, 232448, 132).in_smem);
    const cu::ColumnLaunch big = cu::column_kernel_launch(5000, 100000, 3000, 232448, 132);
    CHECK(big.padded == 32768);
    CHECK_FALSE(big.in_smem);
    CHECK(big.grid == 4 * 132);
    CHECK(cu::column_kernel_launch(32768, 100000, 3, 232448, 132).tile == 1);
    CHECK_THROWS_AS(cu::column_kernel_launch(32769, 100, 3, 232448, 132), fj::BackendError);
}

#else

TEST_CASE("NVRTC compiles and launch configuration: compiled out (no CUDA backend)") {
    MESSAGE("skipped: built without the CUDA backend (FJ_WITH_CUDA=OFF or no cuda.h): "
            "the NVRTC compile and launch configuration tests are compiled out");
}

#endif  // FJ_WITH_CUDA

}  // TEST_SUITE
