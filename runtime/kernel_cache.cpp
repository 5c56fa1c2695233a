#include "runtime/kernel_cache.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

namespace fj::rt {

namespace {

constexpr char kMagic[8] = {'F', 'J', 'K', 'C', 'A', 'C', 'H', 'E'};
constexpr std::uint32_t kFormatVersion = 2;  // 2: the shared memory per thread after the flag
constexpr std::size_t kHeaderBytes = 32;

template <class T>
T get_at(const std::vector<char>& b, std::size_t off) {
    T v;
    std::memcpy(&v, b.data() + off, sizeof v);
    return v;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Reads a whole file with POSIX calls (no iostream locale machinery on the J3 path); false if absent.
bool read_file(const std::string& path, std::vector<char>* out) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    out->clear();
    char buf[1 << 16];
    for (;;) {
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0) {
            ::close(fd);
            return false;
        }
        if (n == 0) break;
        out->insert(out->end(), buf, buf + n);
    }
    ::close(fd);
    return true;
}

}  // namespace

const char* cache_source_name(CacheSource s) {
    switch (s) {
    case CacheSource::Memory: return "memory";
    case CacheSource::Disk: return "disk";
    case CacheSource::Compiled: return "compiled";
    }
    return "?";
}

std::uint64_t fnv1a64(const void* data, std::size_t size, std::uint64_t h) {
    const auto* c = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < size; ++i) {
        h ^= c[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

std::string default_cache_dir() {
    if (const char* d = std::getenv("FJ_CACHE_DIR")) {
        const std::string s = d;
        if (s == "off" || s == "0" || s == "none") return "";
        if (!s.empty()) return s;
    }
    if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/factorjit";
    if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/factorjit";
    return "";
}

KernelCache::KernelCache(std::string dir) : dir_(std::move(dir)) {}

KernelCache& KernelCache::global() {
    static KernelCache cache(default_cache_dir());
    return cache;
}

std::string KernelCache::path_for(const std::string& key) const {
    if (dir_.empty()) return "";
    // The backend's word: "fj-cuda ..." and "fj-cuda-rows ..." -> "cuda", "fj-cpu ..." -> "cpu".
    std::string kind = "kernel";
    if (key.rfind("fj-", 0) == 0) {
        const std::size_t end = key.find_first_of("- ", 3);
        if (end != std::string::npos && end > 3) kind = key.substr(3, end - 3);
    }
    return fmt::format("{}/{}-{:016x}.fjk", dir_, kind, fnv1a64(key.data(), key.size()));
}

CacheStats KernelCache::stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
}

void KernelCache::clear_memory() {
    std::lock_guard<std::mutex> lock(mutex_);
    memory_.clear();
}

std::vector<char> KernelCache::serialize(const std::string& key, const CacheEntry& e) {
    const std::uint64_t plen = 4 + e.function.size() + 1 + 4 + e.image.size();
    std::vector<char> out(kHeaderBytes + key.size() + plen);
    char* p = out.data();
    auto put = [&p](const void* src, std::size_t n) {
        if (n) std::memcpy(p, src, n);
        p += n;
    };
    const auto klen = static_cast<std::uint32_t>(key.size());
    const auto nlen = static_cast<std::uint32_t>(e.function.size());
    const char flag = e.cubin ? 1 : 0;
    put(kMagic, 8);
    put(&kFormatVersion, 4);
    put(&klen, 4);
    put(&plen, 8);
    char* sum_at = p;
    p += 8;
    put(key.data(), key.size());
    const char* payload = p;
    put(&nlen, 4);
    put(e.function.data(), e.function.size());
    put(&flag, 1);
    put(&e.smem_per_thread, 4);
    put(e.image.data(), e.image.size());
    std::uint64_t sum = fnv1a64(key.data(), key.size());
    sum = fnv1a64(payload, plen, sum);
    std::memcpy(sum_at, &sum, 8);
    return out;
}

std::shared_ptr<CacheEntry> KernelCache::deserialize(const std::string& key, const std::vector<char>& b) {
    if (b.size() < kHeaderBytes || std::memcmp(b.data(), kMagic, 8) != 0) return nullptr;
    if (get_at<std::uint32_t>(b, 8) != kFormatVersion) return nullptr;
    const std::uint64_t klen = get_at<std::uint32_t>(b, 12);
    const std::uint64_t plen = get_at<std::uint64_t>(b, 16);
    const std::uint64_t sum = get_at<std::uint64_t>(b, 24);
    if (klen != key.size() || plen > b.size() || kHeaderBytes + klen + plen != b.size()) return nullptr;
    if (std::memcmp(b.data() + kHeaderBytes, key.data(), klen) != 0) return nullptr;
    const char* payload = b.data() + kHeaderBytes + klen;
    std::uint64_t check = fnv1a64(key.data(), key.size());
    check = fnv1a64(payload, plen, check);
    if (check != sum) return nullptr;
    if (plen < 5) return nullptr;
    std::uint32_t nlen;
    std::memcpy(&nlen, payload, 4);
    if (4ULL + nlen + 1 + 4 > plen) return nullptr;
    auto e = std::make_shared<CacheEntry>();
    e->function.assign(payload + 4, nlen);
    e->cubin = payload[4 + nlen] != 0;
    std::memcpy(&e->smem_per_thread, payload + 4 + nlen + 1, 4);
    e->image.assign(payload + 4 + nlen + 1 + 4, payload + plen);
    if (e->image.empty() || e->function.empty() || e->smem_per_thread < 0) return nullptr;
    return e;
}

std::shared_ptr<CacheEntry> KernelCache::read_disk(const std::string& key, bool* rejected) const {
    std::vector<char> bytes;
    if (!read_file(path_for(key), &bytes)) return nullptr;
    auto e = deserialize(key, bytes);
    if (!e) *rejected = true;
    return e;
}

bool KernelCache::write_disk(const std::string& key, const CacheEntry& e) const {
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    const std::string path = path_for(key);
    static std::atomic<unsigned> counter{0};
    const std::string tmp = fmt::format("{}.tmp.{}.{:x}.{}", path, ::getpid(),
                                        std::hash<std::thread::id>{}(std::this_thread::get_id()), counter++);
    const std::vector<char> bytes = serialize(key, e);
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return false;
    std::size_t done = 0;
    while (done < bytes.size()) {
        const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
        if (n <= 0) break;
        done += static_cast<std::size_t>(n);
    }
    const bool ok = ::close(fd) == 0 && done == bytes.size();
    if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
        ::unlink(tmp.c_str());
        return false;
    }
    return true;
}

CacheResult KernelCache::get(const std::string& key, const std::function<CacheEntry()>& compile) {
    std::promise<std::shared_ptr<const CacheEntry>> promise;
    std::shared_future<std::shared_ptr<const CacheEntry>> future;
    bool owner = false;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = memory_.find(key);
        if (it != memory_.end()) {
            future = it->second;
        } else {
            future = promise.get_future().share();
            memory_.emplace(key, future);
            owner = true;
        }
    }
    if (!owner) {
        auto e = future.get();  // rethrows the owner's failure
        std::lock_guard<std::mutex> lock(mutex_);
        ++stats_.memory_hits;
        return {e, CacheSource::Memory, 0};
    }
    const auto t0 = std::chrono::steady_clock::now();
    try {
        bool rejected = false;
        if (!dir_.empty()) {
            if (std::shared_ptr<const CacheEntry> e = read_disk(key, &rejected)) {
                promise.set_value(e);
                std::lock_guard<std::mutex> lock(mutex_);
                ++stats_.disk_hits;
                return {e, CacheSource::Disk, ms_since(t0)};
            }
        }
        auto e = std::make_shared<const CacheEntry>(compile());
        const bool wrote = dir_.empty() || write_disk(key, *e);
        promise.set_value(e);
        std::lock_guard<std::mutex> lock(mutex_);
        ++stats_.misses;
        if (rejected) ++stats_.rejected;
        if (!wrote) ++stats_.write_failures;
        return {e, CacheSource::Compiled, ms_since(t0)};
    } catch (...) {
        promise.set_exception(std::current_exception());
        std::lock_guard<std::mutex> lock(mutex_);
        memory_.erase(key);  // a later call tries again
        throw;
    }
}

}  // namespace fj::rt
