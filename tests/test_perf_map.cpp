// FJ_PERF_MAP (runtime/cpu/perf_map.hpp): a kernel linked while it is set gets lines in /tmp/perf-<pid>.map
// naming its functions, with addresses and sizes perf can use (hex, non-zero sizes, the functions of one
// object side by side).
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "factorjit.hpp"
#include "runtime/backend.hpp"

TEST_SUITE("perf_map") {

TEST_CASE("FJ_PERF_MAP names a linked CPU kernel's functions in /tmp/perf-<pid>.map") {
    if (!fj::rt::cpu_backend()) {  // the GPU machine builds without LLVM
        MESSAGE("skipped: this build has no CPU backend");
        return;
    }
    const std::string path = "/tmp/perf-" + std::to_string(::getpid()) + ".map";
    std::remove(path.c_str());
    ::setenv("FJ_PERF_MAP", "1", 1);
    // A constant no other test uses, so that the kernel is linked here, not found linked before in this process.
    const double c = 1.0 + static_cast<double>(std::random_device{}() % 1000000) / 1e7;
    fj::CompileOptions o;
    o.backend = fj::Backend::Cpu;
    o.threads = 1;
    const fj::Program p = fj::compile({{"m", fj::mean(fj::window(fj::input("A") * c, 3))}}, o);
    std::vector<float> a(40, 1.0f), out(40);
    p.run({{"A", fj::Panel::host(a.data(), 10, 4)}}, {{"m", fj::Panel::host(out.data(), 10, 4)}});
    ::unsetenv("FJ_PERF_MAP");
    std::ifstream in(path);
    REQUIRE_MESSAGE(in.good(), path << " was not written");
    std::string line;
    int lines = 0, named = 0;
    while (std::getline(in, line)) {
        ++lines;
        std::istringstream fields(line);
        std::string address, size, name;
        fields >> std::hex >> address >> size >> name;
        CHECK_MESSAGE(std::strtoull(address.c_str(), nullptr, 16) > 0, line);
        CHECK_MESSAGE(std::strtoull(size.c_str(), nullptr, 16) > 0, line);
        named += name.rfind("fj_", 0) == 0;
    }
    CHECK(lines >= 1);
    CHECK(named == lines);
    std::remove(path.c_str());
}

}  // TEST_SUITE
