// Where NVRTC comes from (runtime/cuda/cuda_api.cpp): NVRTC dlopens its builtins library
// (libnvrtc-builtins.so.X.Y) by soname at its first compile, which fails where NVRTC's folder is not on the
// loader path (a runfile install or a container: no ld.so.conf.d entry, no LD_LIBRARY_PATH) although
// factorjit found libnvrtc itself by its full path. factorjit loads the builtins from libnvrtc's own folder
// first. Checked in this process (/proc/self/maps), and in child processes of this test binary started
// through the dynamic loader with --inhibit-cache (ld.so.cache unused: a folder known only to ld.so.conf.d
// is then unknown, as on a machine without that entry), with libnvrtc linked into a fresh folder: with its
// builtins next to it (compiles), and without (nvrtc() is null and says which paths were tried).
// Skips with a message where NVRTC is absent, unless FJ_TEST_REQUIRE_NVRTC is set (CI, which has the
// toolkit: a loader regression must not pass as a skip).
#include <doctest/doctest.h>

#ifdef FJ_WITH_CUDA

#include <elf.h>
#include <link.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <system_error>
#include <vector>

#include "runtime/cuda/cuda_api.hpp"

namespace {

namespace cu = fj::rt::cuda;
namespace fs = std::filesystem;

const char* const kChildCase = "nvrtc loading: child process (does nothing unless FJ_TEST_NVRTC_CHILD is set)";

const cu::Nvrtc* nvrtc_or_skip() {
    std::string why;
    if (const cu::Nvrtc* n = cu::nvrtc(&why)) return n;
    if (std::getenv("FJ_TEST_REQUIRE_NVRTC")) {
        FAIL("FJ_TEST_REQUIRE_NVRTC is set but NVRTC did not load: " << why);
    } else {
        MESSAGE("skipped: NVRTC unavailable: " << why);
    }
    return nullptr;
}

// The files mapped into this process whose name starts with `prefix`.
std::vector<std::string> mapped_files(const std::string& prefix) {
    std::vector<std::string> files;
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line)) {
        const auto slash = line.find('/');
        if (slash == std::string::npos) continue;
        const std::string path = line.substr(slash);
        if (fs::path(path).filename().string().rfind(prefix, 0) != 0) continue;
        bool seen = false;
        for (const auto& f : files) seen = seen || f == path;
        if (!seen) files.push_back(path);
    }
    return files;
}

// This program's dynamic loader (its PT_INTERP), e.g. /lib64/ld-linux-x86-64.so.2; "" if not found.
std::string program_interpreter() {
    std::string interp;
    dl_iterate_phdr(
        [](dl_phdr_info* info, std::size_t, void* out) -> int {
            for (int i = 0; i < info->dlpi_phnum; ++i)
                if (info->dlpi_phdr[i].p_type == PT_INTERP) {
                    *static_cast<std::string*>(out) =
                        reinterpret_cast<const char*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
                    return 1;
                }
            return 1;  // the first object is the program itself
        },
        &interp);
    return interp;
}

std::string quoted(const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

// `dst` as the same file as `src`: a hard link, else a copy. False (and *why) if neither works.
bool link_or_copy(const fs::path& src, const fs::path& dst, std::string* why) {
    std::error_code ec;
    fs::create_hard_link(src, dst, ec);
    if (!ec) return true;
    fs::copy_file(src, dst, fs::copy_options::overwrite_existing, ec);
    if (!ec) return true;
    *why = "cannot link or copy " + src.string() + " to " + dst.string() + ": " + ec.message();
    return false;
}

struct ChildResult {
    int status = -1;
    std::string output;                      // everything it printed
    std::map<std::string, std::string> kv;   // its "FJCHILD key=value" lines
};

// Runs this test binary's child case through the dynamic loader without ld.so.cache, with NVRTC taken from
// `nvrtc_file` and no LD_LIBRARY_PATH.
ChildResult run_child(const std::string& interp, const std::string& nvrtc_file) {
    const std::string self = fs::canonical("/proc/self/exe").string();
    const std::string cmd = "env -u LD_LIBRARY_PATH -u CUDA_HOME -u CUDA_PATH FJ_TEST_NVRTC_CHILD=1 FJ_NVRTC_LIBRARY=" +
                            quoted(nvrtc_file) + " " + quoted(interp) + " --inhibit-cache " + quoted(self) +
                            " " + quoted(std::string("--test-case=") + kChildCase) + " --no-intro 2>&1";
    ChildResult r;
    FILE* p = ::popen(cmd.c_str(), "r");
    REQUIRE(p != nullptr);
    char buf[4096];
    while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) r.output.append(buf, n);
    r.status = ::pclose(p);
    std::size_t pos = 0;
    while ((pos = r.output.find("FJCHILD ", pos)) != std::string::npos) {
        const std::size_t end = r.output.find('\n', pos);
        const std::string line = r.output.substr(pos + 8, end == std::string::npos ? end : end - pos - 8);
        const std::size_t eq = line.find('=');
        if (eq != std::string::npos) r.kv[line.substr(0, eq)] = line.substr(eq + 1);
        pos = end == std::string::npos ? r.output.size() : end;
    }
    return r;
}

// A fresh folder under the test tree.
fs::path fresh_dir(const std::string& name) {
    const fs::path d = fs::path(FJ_TEST_TMP) / ("nvrtc_loading_" + name);
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
}

}  // namespace

TEST_SUITE("nvrtc_loading") {

// Run by the cases below in a child process: loads NVRTC, reports where from, compiles an empty kernel.
TEST_CASE(kChildCase) {
    if (!std::getenv("FJ_TEST_NVRTC_CHILD")) return;
    std::string why;
    const cu::Nvrtc* n = cu::nvrtc(&why);
    std::printf("FJCHILD loaded=%d\n", n ? 1 : 0);
    if (!n) {
        std::printf("FJCHILD why=%s\n", why.c_str());
        std::fflush(stdout);
        return;
    }
    std::printf("FJCHILD library=%s\nFJCHILD builtins=%s\n", n->library.c_str(), n->builtins.c_str());
    for (const std::string& f : mapped_files("libnvrtc-builtins")) std::printf("FJCHILD mapped=%s\n", f.c_str());
    cu::nvrtcProgram prog = nullptr;
    cu::nvrtcResult r = n->nvrtcCreateProgram(&prog, "extern \"C\" __global__ void fj_empty() {}\n", "fj_empty.cu", 0,
                                              nullptr, nullptr);
    if (r == cu::NVRTC_SUCCESS) r = n->nvrtcCompileProgram(prog, 0, nullptr);
    std::printf("FJCHILD compile=%s\n", r == cu::NVRTC_SUCCESS ? "ok" : n->nvrtcGetErrorString(r));
    if (prog) n->nvrtcDestroyProgram(&prog);
    std::fflush(stdout);
}

TEST_CASE("NVRTC's builtins are loaded from the folder of the libnvrtc that was loaded") {
    const cu::Nvrtc* n = nvrtc_or_skip();
    if (!n) return;
    MESSAGE("NVRTC " << n->version / 1000 << "." << n->version % 1000 / 10 << ": " << n->library
                     << ", builtins " << n->builtins);
    REQUIRE(fs::path(n->library).is_absolute());
    REQUIRE(!n->builtins.empty());
    const auto mapped = mapped_files("libnvrtc-builtins");
    REQUIRE(!mapped.empty());
    for (const auto& m : mapped) {
        CAPTURE(m);
        CHECK(fs::canonical(m) == fs::canonical(n->builtins));
        CHECK(fs::canonical(m).parent_path() == fs::canonical(n->library).parent_path());
    }
}

TEST_CASE("NVRTC in a folder the loader path does not know: builtins from that folder, or an error naming it") {
    const cu::Nvrtc* n = nvrtc_or_skip();
    if (!n) return;
    const std::string interp = program_interpreter();
    if (interp.empty() || !fs::exists(interp)) {
        MESSAGE("skipped: this program's dynamic loader was not found");
        return;
    }
    const fs::path lib = fs::canonical(n->library), builtins = fs::canonical(n->builtins);
    const std::string lib_name = fs::path(n->library).filename().string();
    const std::string builtins_name = fs::path(n->builtins).filename().string();

    // libnvrtc and its builtins in a fresh folder: NVRTC compiles, with the builtins of that folder.
    const fs::path both = fresh_dir("both");
    std::string why;
    if (!link_or_copy(lib, both / lib_name, &why) || !link_or_copy(builtins, both / builtins_name, &why)) {
        MESSAGE("skipped: " << why);
        return;
    }
    ChildResult r = run_child(interp, (both / lib_name).string());
    CAPTURE(r.output);
    if (r.output.find("error while loading shared libraries") != std::string::npos) {
        MESSAGE("skipped: this test binary does not start without ld.so.cache: " << r.output);
        return;
    }
    CHECK(r.status == 0);
    CHECK(r.kv["loaded"] == "1");
    CHECK(r.kv["library"] == (both / lib_name).string());
    CHECK(r.kv["builtins"] == (both / builtins_name).string());
    CHECK(r.kv["mapped"] == (both / builtins_name).string());
    CHECK(r.kv["compile"] == "ok");

    // libnvrtc alone: unusable, so not loaded, and the reason names the path tried for the builtins.
    const fs::path alone = fresh_dir("alone");
    if (!link_or_copy(lib, alone / lib_name, &why)) {
        MESSAGE("skipped: " << why);
        return;
    }
    r = run_child(interp, (alone / lib_name).string());
    CHECK(r.status == 0);
    if (r.kv["loaded"] == "1") {
        // A builtins library in a default folder (/usr/lib/x86_64-linux-gnu, ...) is found by soname.
        MESSAGE("note: " << builtins_name << " is on the default library path (" << r.kv["builtins"]
                         << "): the error case is not exercised");
    } else {
        CHECK(r.kv["loaded"] == "0");
        CHECK(r.kv["why"].find((alone / builtins_name).string() + ": no such file") != std::string::npos);
        CHECK(r.kv["why"].find("NVRTC " + (alone / lib_name).string() + " was loaded") != std::string::npos);
    }

    std::error_code ec;
    fs::remove_all(both, ec);
    fs::remove_all(alone, ec);
}

}  // TEST_SUITE

#else

TEST_SUITE("nvrtc_loading") {
TEST_CASE("NVRTC loading: compiled out (no CUDA backend)") {
    MESSAGE("skipped: built without the CUDA backend (FJ_WITH_CUDA=OFF or no cuda.h): NVRTC is not loaded");
}
}  // TEST_SUITE

#endif  // FJ_WITH_CUDA
