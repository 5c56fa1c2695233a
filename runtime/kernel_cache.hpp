// The kernel cache of both backends: compiled images by key, in memory and on disk. CUDA keeps cubins or
// PTX (runtime/cuda/compile.cpp), the CPU backend relocatable object files that its JIT links
// (runtime/cpu/compile.cpp; `function` is the kernel's symbol, `cubin` is 1 and smem_per_thread 0).
//
// The key is a string built by the backend from everything that changes the compiled code: the kernel
// IR's structural hash, the dtype, the codegen version, the target (arch, or CPU and its features), the
// compiler's version and the options. It starts "fj-<backend>" ("fj-cuda ...", "fj-cuda-rows ...",
// "fj-cpu ..."), which names the file's prefix. It is known before any source or IR is generated, so a hit
// costs no code generation at all.
//
// Memory: a map from key to a shared future, so that two threads asking for the same kernel (two
// steps of one program compiling in parallel, or two programs) compile it once; the second waits.
//
// Disk ($FJ_CACHE_DIR, else $XDG_CACHE_HOME/factorjit, else ~/.cache/factorjit; FJ_CACHE_DIR=off turns
// the disk cache off): one file per key, <backend>-<16 hex digits>.fjk, the backend's word of the key ("cuda",
// "cpu"; "kernel" for a key of another form) and a 64-bit FNV-1a hash of the key:
//     offset 0   8 bytes  magic "FJKCACHE"
//            8   u32      format version (2)
//           12   u32      key length K
//           16   u64      payload length P
//           24   u64      FNV-1a 64 of the key bytes followed by the payload bytes
//           32   K bytes  the key itself (a hash collision or a foreign file shows as a different key)
//       32 + K   P bytes  payload: u32 name length N, N bytes function name, u8 1 = cubin (or object) / 0 = PTX,
//                         i32 shared memory per thread, image
// and the file is exactly 32 + K + P bytes. A file that fails any check (short, wrong magic or version,
// other key, bad checksum, wrong length) is never trusted: it counts as rejected and as a miss, the kernel
// is compiled again and the file replaced. Files are written to a temporary name in the same directory
// and renamed into place, so a reader never sees half a file, and concurrent writers of the same key
// (two processes) each rename a complete file. A failure to write is counted, never an error: the disk
// cache is an optimisation.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace fj::rt {

struct CacheEntry {
    std::string function;     // the kernel's symbol in the image
    bool cubin = true;        // false: PTX text (NUL-terminated)
    std::int32_t smem_per_thread = 0;  // dynamic shared memory a launch takes per thread of the block (bytes)
    std::vector<char> image;
};

enum class CacheSource : std::uint8_t { Memory, Disk, Compiled };
const char* cache_source_name(CacheSource s);  // "memory", "disk", "compiled"

struct CacheResult {
    std::shared_ptr<const CacheEntry> entry;
    CacheSource source = CacheSource::Compiled;
    double ms = 0;  // time spent in this call: disk read, or compilation (0 for memory hits)
};

struct CacheStats {
    std::uint64_t memory_hits = 0;
    std::uint64_t disk_hits = 0;
    std::uint64_t misses = 0;         // compiled (a rejected disk entry is a miss too)
    std::uint64_t rejected = 0;       // disk entries that failed verification
    std::uint64_t write_failures = 0;
};

// 64-bit FNV-1a: stable across processes and builds (std::hash is not), cheap, enough to detect damage.
std::uint64_t fnv1a64(const void* data, std::size_t size, std::uint64_t h = 0xcbf29ce484222325ULL);

// The disk cache directory from the environment, or "" when disabled (FJ_CACHE_DIR=off or no HOME).
std::string default_cache_dir();

class KernelCache {
public:
    // dir "": memory only.
    explicit KernelCache(std::string dir);
    KernelCache(const KernelCache&) = delete;
    KernelCache& operator=(const KernelCache&) = delete;

    // The process-wide cache, on default_cache_dir().
    static KernelCache& global();

    // The entry for `key`: from memory, else from disk, else compile() (its exceptions propagate, and a
    // later call tries again). Thread-safe; concurrent calls for one key compile once.
    CacheResult get(const std::string& key, const std::function<CacheEntry()>& compile);

    const std::string& dir() const { return dir_; }
    std::string path_for(const std::string& key) const;  // "" without a disk cache
    CacheStats stats() const;
    void clear_memory();  // forget the in-memory entries (tests: the next get goes to disk)

    // The file format, exposed for tests and tools.
    static std::vector<char> serialize(const std::string& key, const CacheEntry& e);
    // The entry when `bytes` is a valid file for `key`; nullptr otherwise.
    static std::shared_ptr<CacheEntry> deserialize(const std::string& key, const std::vector<char>& bytes);

private:
    std::shared_ptr<CacheEntry> read_disk(const std::string& key, bool* rejected) const;
    bool write_disk(const std::string& key, const CacheEntry& e) const;

    std::string dir_;
    mutable std::mutex mutex_;
    std::map<std::string, std::shared_future<std::shared_ptr<const CacheEntry>>> memory_;
    CacheStats stats_;
};

}  // namespace fj::rt
