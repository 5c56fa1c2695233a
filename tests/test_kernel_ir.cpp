// The kernel IR's verifier (codegen/kernel_ir.hpp, ir::verify): malformed kernels are refused with a
// message naming the kernel, the instruction and what is wrong; every kernel the planner makes is accepted.
// No GPU or NVRTC needed.
#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

#include "codegen/kernel_ir.hpp"
#include "codegen/plan.hpp"
#include "dsl/error.hpp"
#include "dsl/expr.hpp"
#include "dsl/parse.hpp"

namespace {

using fj::ir::Inst;
using fj::ir::Prim;
using fj::ir::Type;

// A small well-formed kernel: out0 = s0 + in0[t - 1] * in0[t], s0 := that, ring r0 keeps it too.
fj::ir::Kernel small_kernel() {
    fj::ir::Kernel k;
    k.name = "fj_verify";
    k.inputs = {"A"};
    k.outputs = {"o"};
    k.states = {{0.0, "s"}};
    k.rings = {{2, "r"}};
    k.body = {
        {Prim::Input, Type::F64, -1, -1, -1, 0, 1},   // 0: A[t - 1]
        {Prim::Input, Type::F64, -1, -1, -1, 0, 0},   // 1: A[t]
        {Prim::Mul, Type::F64, 0, 1},                 // 2
        {Prim::LoadState, Type::F64, -1, -1, -1, 0},  // 3
        {Prim::Add, Type::F64, 3, 2},                 // 4
        {Prim::StoreState, Type::Void, 4, -1, -1, 0}, // 5
        {Prim::RingPush, Type::Void, 4, -1, -1, 0},   // 6
        {Prim::RingRead, Type::F64, -1, -1, -1, 0, 1},// 7
        {Prim::IsNaN, Type::Bool, 7},                 // 8
        {Prim::Select, Type::F64, 8, 4, 7},           // 9
        {Prim::Output, Type::Void, 9, -1, -1, 0},     // 10
    };
    k.echoes = {{1, 0, 1}};
    k.max_input_lag = 1;
    k.halo = 1;
    return k;
}

// The message of the error verify() throws for `k`, or "" when it accepts it.
std::string refusal(const fj::ir::Kernel& k) {
    try {
        fj::ir::verify(k);
    } catch (const fj::BackendError& e) {
        return e.what();
    }
    return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_SUITE("kernel_ir") {

TEST_CASE("a well-formed kernel passes") { CHECK(refusal(small_kernel()).empty()); }

TEST_CASE("malformed kernels are refused, naming the kernel and the instruction") {
    struct Case {
        const char* what;
        std::function<void(fj::ir::Kernel&)> spoil;
        std::string instruction;  // "instruction N (Prim)" in the message; "" for kernel-wide faults
        std::string why;
    };
    const std::vector<Case> cases = {
        {"an operand after its user", [](fj::ir::Kernel& k) { k.body[2].b = 4; }, "instruction 2 (Mul)", "operand 4 out of range"},
        {"an operand that is the instruction itself", [](fj::ir::Kernel& k) { k.body[4].a = 4; }, "instruction 4 (Add)",
         "operand 4 out of range"},
        {"a negative operand", [](fj::ir::Kernel& k) { k.body[2].a = -1; }, "instruction 2 (Mul)", "operand -1 out of range"},
        {"a Bool operand of arithmetic", [](fj::ir::Kernel& k) { k.body[9].b = 8; }, "instruction 9 (Select)",
         "operand 8 has the wrong type"},
        {"an F64 condition", [](fj::ir::Kernel& k) { k.body[9].a = 7; }, "instruction 9 (Select)", "operand 7 has the wrong type"},
        {"an output of a Bool", [](fj::ir::Kernel& k) { k.body[10].a = 8; }, "instruction 10 (Output)",
         "operand 8 has the wrong type"},
        {"an input slot out of range", [](fj::ir::Kernel& k) { k.body[1].slot = 1; }, "instruction 1 (Input)",
         "input slot 1 out of range"},
        {"a negative input lag", [](fj::ir::Kernel& k) { k.body[0].lag = -1; }, "instruction 0 (Input)", "negative lag"},
        {"a state slot out of range", [](fj::ir::Kernel& k) { k.body[5].slot = 3; }, "instruction 5 (StoreState)",
         "state slot 3 out of range"},
        {"an output slot out of range", [](fj::ir::Kernel& k) { k.body[10].slot = -1; }, "instruction 10 (Output)",
         "output slot -1 out of range"},
        {"a ring read beyond the ring", [](fj::ir::Kernel& k) { k.body[7].lag = 2; }, "instruction 7 (RingRead)",
         "lag outside the ring"},
        {"a ring slot out of range", [](fj::ir::Kernel& k) { k.body[6].slot = 1; }, "instruction 6 (RingPush)",
         "ring slot 1 out of range"},
        {"a negative RowInPass lag",
         [](fj::ir::Kernel& k) { k.body.insert(k.body.begin(), Inst{Prim::RowInPass, Type::Bool, -1, -1, -1, -1, -2}); },
         "instruction 0 (RowInPass)", "negative lag"},
        {"an empty ring", [](fj::ir::Kernel& k) { k.rings[0].size = 0; }, "", "ring 0 size 0"},
        {"an echo outside the body", [](fj::ir::Kernel& k) { k.echoes[0].later = 11; }, "", "echo %11 = %0 at lag 1 out of range"},
        {"an echo at lag 0", [](fj::ir::Kernel& k) { k.echoes[0].lag = 0; }, "", "echo %1 = %0 at lag 0 out of range"},
    };
    for (const Case& c : cases) {
        CAPTURE(c.what);
        fj::ir::Kernel k = small_kernel();
        c.spoil(k);
        const std::string message = refusal(k);
        REQUIRE_FALSE(message.empty());
        CHECK_MESSAGE(contains(message, "kernel fj_verify"), message);
        if (!c.instruction.empty()) CHECK_MESSAGE(contains(message, c.instruction), message);
        CHECK_MESSAGE(contains(message, c.why), message);
    }
}

TEST_CASE("every kernel the planner makes for real programs passes") {
    const std::vector<std::string> programs = {
        "corr(window(A, 20), window(B, 20))",
        "cov(window(A, 250, 30), window(B, 250, 30))",
        "(A - mean(window(A, 60))) / std(window(A, 60))",
        "mean(window(std(window(A, 5)), 10))",
        "where(A > B, delta(A, 3), sign(B)) + count(window(A, 7, 2))",
        "max(window(A, 30)) - min(window(B, 40)) + delay(A, 1)",
        "-1 * correlation(open, volume, 10)",
        "var(window(A * B, 17)) + sum(window(log(abs(A) + 1), 5))",
    };
    for (fj::DType dtype : {fj::DType::F32, fj::DType::F64}) {
        for (const std::string& text : programs) {
            CAPTURE(text);
            const fj::codegen::Plan plan = fj::codegen::make_plan({{"o", fj::parse(text)}}, dtype);
            REQUIRE_FALSE(plan.steps.empty());
            for (const fj::codegen::Step& r : plan.steps) CHECK_MESSAGE(refusal(r.kernel).empty(), refusal(r.kernel));
        }
        // Several outputs fused into one kernel.
        const fj::codegen::Plan fused = fj::codegen::make_plan(
            {{"c", fj::parse(programs[0])}, {"z", fj::parse(programs[2])}, {"w", fj::parse(programs[4])}}, dtype);
        for (const fj::codegen::Step& r : fused.steps) CHECK_MESSAGE(refusal(r.kernel).empty(), refusal(r.kernel));
    }
}

}  // TEST_SUITE
