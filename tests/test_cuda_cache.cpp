// The CUDA kernel cache: memory and disk, and what happens to damaged or foreign disk entries (they are
// recompiled and replaced, counted as rejected and as misses, never trusted). No GPU needed; the last
// case compiles a real kernel with NVRTC where it is available.
#include <doctest/doctest.h>

#ifdef FJ_WITH_CUDA

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "codegen/plan.hpp"
#include "dsl/error.hpp"
#include "runtime/cuda/cuda_api.hpp"
#include "runtime/cuda/compile.hpp"
#include "runtime/kernel_cache.hpp"

namespace {

namespace cu = fj::rt::cuda;
namespace fs = std::filesystem;

std::string fresh_dir(const std::string& name) {
    const std::string d = std::string(FJ_TEST_TMP) + "/cuda_cache_" + name;
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
}

std::vector<char> read_all(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::vector<char>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void write_all(const std::string& path, const std::vector<char>& bytes) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A compile function that counts its calls and returns a recognisable entry.
struct FakeCompiler {
    std::atomic<int> calls{0};
    fj::rt::CacheEntry operator()(const std::string& tag) {
        ++calls;
        fj::rt::CacheEntry e;
        e.function = "fj_" + tag;
        e.cubin = true;
        e.image.assign(1000, 'x');
        for (std::size_t i = 0; i < tag.size(); ++i) e.image[i] = tag[i];
        return e;
    }
};

}  // namespace

TEST_SUITE("cuda_cache") {

TEST_CASE("file format round trip, and every kind of damage is refused") {
    fj::rt::CacheEntry e;
    e.function = "fj_kernel";
    e.cubin = false;
    e.smem_per_thread = 328;
    e.image = {'P', 'T', 'X', '\0'};
    const std::vector<char> bytes = fj::rt::KernelCache::serialize("the key", e);
    auto back = fj::rt::KernelCache::deserialize("the key", bytes);
    REQUIRE(back);
    CHECK(back->function == "fj_kernel");
    CHECK(!back->cubin);
    CHECK(back->smem_per_thread == 328);
    CHECK(back->image == e.image);

    CHECK(!fj::rt::KernelCache::deserialize("another key", bytes));    // foreign
    CHECK(!fj::rt::KernelCache::deserialize("the kez", bytes));        // same length, other key
    for (std::size_t cut : {std::size_t{0}, std::size_t{7}, std::size_t{31}, bytes.size() - 1})
        CHECK(!fj::rt::KernelCache::deserialize("the key", std::vector<char>(bytes.begin(), bytes.begin() + cut)));
    std::vector<char> longer = bytes;
    longer.push_back(0);
    CHECK(!fj::rt::KernelCache::deserialize("the key", longer));  // trailing garbage
    for (std::size_t i = 0; i < bytes.size(); ++i) {  // any single flipped byte
        std::vector<char> b = bytes;
        b[i] ^= 0x20;
        CAPTURE(i);
        CHECK(!fj::rt::KernelCache::deserialize("the key", b));
    }
}

TEST_CASE("memory, then disk, then compile; a new process (a new cache object) reads the disk") {
    const std::string dir = fresh_dir("basic");
    FakeCompiler fc;
    {
        fj::rt::KernelCache c(dir);
        auto r1 = c.get("k1", [&] { return fc("one"); });
        CHECK(r1.source == fj::rt::CacheSource::Compiled);
        auto r2 = c.get("k1", [&] { return fc("one"); });
        CHECK(r2.source == fj::rt::CacheSource::Memory);
        CHECK(r2.entry == r1.entry);
        CHECK(fc.calls == 1);
        CHECK(fs::exists(c.path_for("k1")));
        const fj::rt::CacheStats s = c.stats();
        CHECK(s.misses == 1);
        CHECK(s.memory_hits == 1);
    }
    fj::rt::KernelCache c2(dir);
    auto r3 = c2.get("k1", [&] { return fc("one"); });
    CHECK(r3.source == fj::rt::CacheSource::Disk);
    CHECK(r3.entry->function == "fj_one");
    CHECK(fc.calls == 1);
    CHECK(c2.stats().disk_hits == 1);
    // No temporary files are left behind.
    int files = 0;
    for (const auto& f : fs::directory_iterator(dir)) {
        ++files;
        CHECK(f.path().string().find(".tmp.") == std::string::npos);
    }
    CHECK(files == 1);
}

TEST_CASE("a damaged or foreign disk entry is recompiled, counted as a miss, and replaced") {
    const std::string dir = fresh_dir("damage");
    FakeCompiler fc;
    std::string path;
    {
        fj::rt::KernelCache c(dir);
        c.get("key A", [&] { return fc("A"); });
        path = c.path_for("key A");
    }
    const std::vector<char> good = read_all(path);
    REQUIRE(good.size() > 100);

    struct Damage {
        const char* what;
        std::vector<char> bytes;
    };
    std::vector<Damage> damages;
    damages.push_back({"truncated to half", std::vector<char>(good.begin(), good.begin() + good.size() / 2)});
    damages.push_back({"empty", {}});
    {
        std::vector<char> b = good;
        if (b.size() > 10) b[b.size() - 10] ^= 1;  // a bit of the image
        damages.push_back({"image byte flipped", b});
    }
    {
        std::vector<char> b = good;
        b[33] ^= 1;  // a byte of the key ("key A" is at 32..36)
        damages.push_back({"key byte flipped", b});
    }
    {
        std::vector<char> b = good;
        b[0] = 'X';
        damages.push_back({"bad magic", b});
    }
    {
        fj::rt::CacheEntry other;
        other.function = "fj_other";
        other.image.assign(1000, 'o');
        damages.push_back({"a valid entry of another key", fj::rt::KernelCache::serialize("key B", other)});
    }
    damages.push_back({"text garbage", std::vector<char>(300, 'g')});

    for (const Damage& d : damages) {
        CAPTURE(d.what);
        write_all(path, d.bytes);
        const int before = fc.calls;
        fj::rt::KernelCache c(dir);
        auto r = c.get("key A", [&] { return fc("A"); });
        CHECK(r.source == fj::rt::CacheSource::Compiled);
        CHECK(r.entry->function == "fj_A");
        CHECK(fc.calls == before + 1);
        const fj::rt::CacheStats s = c.stats();
        CHECK(s.rejected == 1);
        CHECK(s.misses == 1);
        CHECK(s.disk_hits == 0);
        // The file was replaced by a good one: the next process hits it.
        CHECK(read_all(path) == good);
        fj::rt::KernelCache c2(dir);
        CHECK(c2.get("key A", [&] { return fc("A"); }).source == fj::rt::CacheSource::Disk);
    }
}

TEST_CASE("concurrent requests for one key compile once") {
    fj::rt::KernelCache c(fresh_dir("concurrent"));
    FakeCompiler fc;
    std::vector<std::thread> ts;
    std::atomic<int> compiled{0}, other{0};
    for (int i = 0; i < 8; ++i)
        ts.emplace_back([&] {
            auto r = c.get("shared", [&] {
                std::this_thread::sleep_for(std::chrono::milliseconds(50));
                return fc("s");
            });
            (r.source == fj::rt::CacheSource::Compiled ? compiled : other)++;
        });
    for (auto& t : ts) t.join();
    CHECK(fc.calls == 1);
    CHECK(compiled == 1);
    CHECK(other == 7);
}

TEST_CASE("a failed compilation is not cached: the next request tries again") {
    fj::rt::KernelCache c(fresh_dir("failure"));
    FakeCompiler fc;
    CHECK_THROWS_AS(c.get("k", []() -> fj::rt::CacheEntry { throw fj::BackendError("nvrtc said no"); }), fj::BackendError);
    auto r = c.get("k", [&] { return fc("k"); });
    CHECK(r.source == fj::rt::CacheSource::Compiled);
    CHECK(fc.calls == 1);
}

TEST_CASE("an unwritable cache directory is not an error") {
    fj::rt::KernelCache c("/proc/factorjit-cannot-write-here");
    FakeCompiler fc;
    auto r = c.get("k", [&] { return fc("k"); });
    CHECK(r.source == fj::rt::CacheSource::Compiled);
    CHECK(c.stats().write_failures == 1);
    CHECK(c.get("k", [&] { return fc("k"); }).source == fj::rt::CacheSource::Memory);
}

TEST_CASE("FJ_CACHE_DIR and XDG_CACHE_HOME choose the directory") {
    const char* old = std::getenv("FJ_CACHE_DIR");
    const std::string saved = old ? old : "";
    ::setenv("FJ_CACHE_DIR", "/tmp/fj-cache-test", 1);
    CHECK(fj::rt::default_cache_dir() == "/tmp/fj-cache-test");
    ::setenv("FJ_CACHE_DIR", "off", 1);
    CHECK(fj::rt::default_cache_dir().empty());
    ::unsetenv("FJ_CACHE_DIR");
    const char* xdg = std::getenv("XDG_CACHE_HOME");
    const std::string saved_xdg = xdg ? xdg : "";
    ::setenv("XDG_CACHE_HOME", "/tmp/xdg", 1);
    CHECK(fj::rt::default_cache_dir() == "/tmp/xdg/factorjit");
    if (xdg) ::setenv("XDG_CACHE_HOME", saved_xdg.c_str(), 1);
    else ::unsetenv("XDG_CACHE_HOME");
    if (old) ::setenv("FJ_CACHE_DIR", saved.c_str(), 1);
}

TEST_CASE("a real NVRTC kernel through the disk cache, corrupted and recompiled") {
    std::string why;
    if (!cu::nvrtc(&why)) {
        MESSAGE("skipped: NVRTC unavailable: " << why);
        return;
    }
    const std::string dir = fresh_dir("nvrtc");
    const fj::codegen::Plan plan = fj::codegen::make_plan({{"o", fj::std(fj::window(fj::input("A"), 4))}});
    const fj::ir::Kernel& k = plan.steps[0].kernel;
    cu::CudaSettings s;
    s.unroll = 1;
    const std::string key = cu::cuda_kernel_key(k, fj::DType::F32, "sm_90", true, s);
    std::atomic<int> compiles{0};
    auto compile = [&] {
        ++compiles;
        return cu::compile_cuda_kernel(k, fj::DType::F32, "sm_90", true, s).entry;
    };
    std::vector<char> image;
    {
        fj::rt::KernelCache c(dir);
        auto r = c.get(key, compile);
        REQUIRE(r.source == fj::rt::CacheSource::Compiled);
        image = r.entry->image;
        CHECK(std::string(image.data(), 4) == "\x7f" "ELF");
    }
    {
        fj::rt::KernelCache c(dir);
        auto r = c.get(key, compile);
        CHECK(r.source == fj::rt::CacheSource::Disk);
        CHECK(r.entry->image == image);
        CHECK(r.entry->function == fj::codegen::cuda_kernel_name(k));
    }
    // Flip a byte in the middle of the cubin.
    fj::rt::KernelCache probe(dir);
    const std::string path = probe.path_for(key);
    std::vector<char> bytes = read_all(path);
    bytes[bytes.size() - image.size() / 2] ^= 0x55;
    write_all(path, bytes);
    {
        fj::rt::KernelCache c(dir);
        auto r = c.get(key, compile);
        CHECK(r.source == fj::rt::CacheSource::Compiled);
        CHECK(c.stats().rejected == 1);
        CHECK(c.stats().misses == 1);
        CHECK(r.entry->image == image);  // NVRTC is deterministic
    }
    CHECK(compiles == 2);
}

}  // TEST_SUITE

#else

TEST_SUITE("cuda_cache") {
TEST_CASE("kernel cache: compiled out (no CUDA backend)") {
    MESSAGE("skipped: built without the CUDA backend (FJ_WITH_CUDA=OFF or no cuda.h): "
            "the kernel cache tests are compiled out");
}
}  // TEST_SUITE

#endif  // FJ_WITH_CUDA
