#include "runtime/fault_inject.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <string>

#include <fmt/format.h>

#include "runtime/program.hpp"

namespace fj::rt {

namespace {

constexpr int kKinds = 4;
const char* const kNames[kKinds] = {"alloc", "chunk", "read", "write"};

std::atomic<bool> armed{false};
std::atomic<int> armed_kind{0};
std::atomic<std::int64_t> countdown{0};
std::atomic<std::int64_t> seen[kKinds];

// FJ_FAIL_AT=kind:N, for the command line's tests (a process cannot be reached otherwise).
void arm_from_environment() {
    const char* v = std::getenv("FJ_FAIL_AT");
    if (!v) return;
    const char* colon = std::strchr(v, ':');
    if (!colon) return;
    const std::string kind(v, colon);
    const std::int64_t n = std::atoll(colon + 1);
    for (int k = 0; k < kKinds; ++k)
        if (kind == kNames[k] && n > 0) testing::fail_at(static_cast<FaultKind>(k), n);
}

}  // namespace

void fault_point(FaultKind kind, const char* where) {
    static std::once_flag env;
    std::call_once(env, arm_from_environment);
    const int k = static_cast<int>(kind);
    seen[k].fetch_add(1, std::memory_order_relaxed);
    if (!armed.load(std::memory_order_relaxed) || armed_kind.load() != k) return;
    if (countdown.fetch_sub(1) != 1) return;
    armed.store(false);
    if (kind == FaultKind::Alloc) throw std::bad_alloc();
    throw RunError(fmt::format("{}: injected {} failure (FJ_FAIL_AT / testing::fail_at)", where, kNames[k]));
}

namespace testing {

void fail_at(FaultKind kind, std::int64_t n) {
    armed.store(false);
    for (auto& s : seen) s.store(0);
    armed_kind.store(static_cast<int>(kind));
    countdown.store(n);
    armed.store(n > 0);
}

std::int64_t fault_points_seen(FaultKind kind) { return seen[static_cast<int>(kind)].load(); }

}  // namespace testing

}  // namespace fj::rt
