#include "runtime/cuda/cuda_api.hpp"

#include <dlfcn.h>
#include <link.h>

#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "dsl/error.hpp"


namespace fj::rt::cuda {

namespace {

// dlopen the first name that loads; `tried` collects the failures for the error message.
void* open_first(const std::vector<std::string>& names, std::string* loaded, std::string* tried) {
    for (const std::string& n : names) {
        if (n.empty()) continue;
        if (void* h = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL)) {
            *loaded = n;
            return h;
        }
        const char* e = dlerror();
        if (!tried->empty()) *tried += "; ";
        *tried += e ? e : n;
    }
    return nullptr;
}

// Resolves every symbol or reports the first one missing.
template <class F>
bool resolve(void* lib, F*& slot, const char* symbol, bool required, std::string* missing) {
    slot = reinterpret_cast<F*>(dlsym(lib, symbol));
    if (!slot && required && missing->empty()) *missing = symbol;
    return slot != nullptr;
}

// The file the loader mapped for a handle: the full path even when it was opened by soname through the
// loader path (ld.so.cache, LD_LIBRARY_PATH); `fallback` where the link map does not say.
std::string loaded_path(void* lib, const std::string& fallback) {
    link_map* lm = nullptr;
    if (dlinfo(lib, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && lm->l_name[0]) return lm->l_name;
    return fallback;
}

// NVRTC compiles nothing without its builtins library, which it dlopens by soname at the first compile
// (libnvrtc-builtins.so.13.0 for NVRTC 13.0). Where NVRTC itself was found by a full path (FJ_NVRTC_LIBRARY,
// CUDA_HOME, /usr/local/cuda/lib64) and its folder is not on the loader path (a runfile install, a
// container: no ld.so.conf.d entry, no LD_LIBRARY_PATH), that dlopen fails and every compile reports
// NVRTC_ERROR_BUILTIN_OPERATION_FAILURE. So the builtins are loaded here first, by full path, from the
// folder of the libnvrtc that was loaded (then the folder of its real file, then the loader path): once a
// library with that soname is loaded, NVRTC's own dlopen by soname returns it. The handle is never closed.
// Returns the file loaded, or "" with *why set to everything that was tried.
std::string load_nvrtc_builtins(const std::string& nvrtc_file, int major, int minor, std::string* why) {
    namespace fs = std::filesystem;
    const std::string soname = fmt::format("libnvrtc-builtins.so.{}.{}", major, minor);
    std::vector<std::string> candidates;
    std::error_code ec;
    const fs::path file(nvrtc_file);
    if (file.has_parent_path()) {
        candidates.push_back((file.parent_path() / soname).string());
        const fs::path real = fs::canonical(file, ec);
        if (!ec && real.parent_path() != file.parent_path())
            candidates.push_back((real.parent_path() / soname).string());
    }
    candidates.push_back(soname);  // the loader path, as NVRTC itself would look
    std::string tried;
    for (const std::string& c : candidates) {
        if (c.find('/') != std::string::npos && !fs::exists(c, ec)) {
            tried += (tried.empty() ? "" : "; ") + c + ": no such file";
            continue;
        }
        if (void* h = dlopen(c.c_str(), RTLD_NOW | RTLD_GLOBAL)) return loaded_path(h, c);
        const char* e = dlerror();
        tried += (tried.empty() ? "" : "; ") + std::string(e ? e : c);
    }
    *why = fmt::format("NVRTC {} was loaded, but its builtins library {} could not be ({})", nvrtc_file, soname,
                       tried);
    return "";
}

struct DriverState {
    std::once_flag once;
    Driver api{};
    bool ok = false;
    std::string why;
} g_driver;

struct NvrtcState {
    std::once_flag once;
    Nvrtc api{};
    bool ok = false;
    std::string why;
} g_nvrtc;

void load_driver() {
    DriverState& s = g_driver;
    std::string loaded, tried;
    std::vector<std::string> names = {"libcuda.so.1", "libcuda.so"};
    if (const char* p = std::getenv("FJ_LIBCUDA")) names.insert(names.begin(), p);
    void* lib = open_first(names, &loaded, &tried);
    if (!lib) {
        s.why = "no CUDA driver: could not load libcuda (" + tried + ")";
        return;
    }
    Driver& d = s.api;
    std::string missing;
    resolve(lib, d.cuInit, "cuInit", true, &missing);
    resolve(lib, d.cuDriverGetVersion, "cuDriverGetVersion", true, &missing);
    resolve(lib, d.cuGetErrorName, "cuGetErrorName", true, &missing);
    resolve(lib, d.cuGetErrorString, "cuGetErrorString", true, &missing);
    resolve(lib, d.cuDeviceGetCount, "cuDeviceGetCount", true, &missing);
    resolve(lib, d.cuDeviceGet, "cuDeviceGet", true, &missing);
    resolve(lib, d.cuDeviceGetName, "cuDeviceGetName", true, &missing);
    resolve(lib, d.cuDeviceGetAttribute, "cuDeviceGetAttribute", true, &missing);
    resolve(lib, d.cuDeviceTotalMem, "cuDeviceTotalMem_v2", true, &missing);
    resolve(lib, d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", true, &missing);
    resolve(lib, d.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", true, &missing);
    resolve(lib, d.cuCtxSetCurrent, "cuCtxSetCurrent", true, &missing);
    resolve(lib, d.cuCtxGetCurrent, "cuCtxGetCurrent", true, &missing);
    resolve(lib, d.cuCtxSynchronize, "cuCtxSynchronize", true, &missing);
    resolve(lib, d.cuMemGetInfo, "cuMemGetInfo_v2", true, &missing);
    resolve(lib, d.cuModuleLoadData, "cuModuleLoadData", true, &missing);
    resolve(lib, d.cuModuleUnload, "cuModuleUnload", true, &missing);
    resolve(lib, d.cuModuleGetFunction, "cuModuleGetFunction", true, &missing);
    resolve(lib, d.cuFuncGetAttribute, "cuFuncGetAttribute", true, &missing);
    resolve(lib, d.cuFuncSetAttribute, "cuFuncSetAttribute", true, &missing);
    resolve(lib, d.cuOccupancyMaxPotentialBlockSize, "cuOccupancyMaxPotentialBlockSize", true, &missing);
    resolve(lib, d.cuOccupancyMaxActiveBlocksPerMultiprocessor, "cuOccupancyMaxActiveBlocksPerMultiprocessor",
            true, &missing);
    resolve(lib, d.cuLaunchKernel, "cuLaunchKernel", true, &missing);
    resolve(lib, d.cuStreamCreate, "cuStreamCreate", true, &missing);
    resolve(lib, d.cuStreamDestroy, "cuStreamDestroy_v2", true, &missing);
    resolve(lib, d.cuStreamSynchronize, "cuStreamSynchronize", true, &missing);
    resolve(lib, d.cuEventCreate, "cuEventCreate", true, &missing);
    resolve(lib, d.cuEventDestroy, "cuEventDestroy_v2", true, &missing);
    resolve(lib, d.cuEventRecord, "cuEventRecord", true, &missing);
    resolve(lib, d.cuEventSynchronize, "cuEventSynchronize", true, &missing);
    if (!resolve(lib, d.cuEventElapsedTime, "cuEventElapsedTime_v2", false, &missing))
        resolve(lib, d.cuEventElapsedTime, "cuEventElapsedTime", true, &missing);
    resolve(lib, d.cuMemAlloc, "cuMemAlloc_v2", true, &missing);
    resolve(lib, d.cuMemFree, "cuMemFree_v2", true, &missing);
    resolve(lib, d.cuMemAllocAsync, "cuMemAllocAsync", false, &missing);
    resolve(lib, d.cuMemFreeAsync, "cuMemFreeAsync", false, &missing);
    resolve(lib, d.cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled", false, &missing);
    resolve(lib, d.cuMemHostAlloc, "cuMemHostAlloc", true, &missing);
    resolve(lib, d.cuMemFreeHost, "cuMemFreeHost", true, &missing);
    resolve(lib, d.cuMemHostRegister, "cuMemHostRegister_v2", true, &missing);
    resolve(lib, d.cuMemHostUnregister, "cuMemHostUnregister", true, &missing);
    resolve(lib, d.cuMemcpyHtoD, "cuMemcpyHtoD_v2", true, &missing);
    resolve(lib, d.cuMemcpyDtoH, "cuMemcpyDtoH_v2", true, &missing);
    resolve(lib, d.cuMemcpyDtoD, "cuMemcpyDtoD_v2", true, &missing);
    resolve(lib, d.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", true, &missing);
    resolve(lib, d.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", true, &missing);
    resolve(lib, d.cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", true, &missing);
    resolve(lib, d.cuMemcpy2DAsync, "cuMemcpy2DAsync_v2", true, &missing);
    resolve(lib, d.cuMemsetD8Async, "cuMemsetD8Async", true, &missing);
    resolve(lib, d.cuMemsetD32Async, "cuMemsetD32Async", true, &missing);
    resolve(lib, d.cuPointerGetAttribute, "cuPointerGetAttribute", true, &missing);
    if (!missing.empty()) {
        s.why = fmt::format("CUDA driver {} lacks {} (driver too old)", loaded, missing);
        return;  // the library stays loaded: harmless, and unloading a driver is not
    }
    const CUresult r = d.cuInit(0);
    if (r != CUDA_SUCCESS) {
        const char* name = nullptr;
        d.cuGetErrorName(r, &name);
        s.why = fmt::format("cuInit failed: {} (no usable GPU or driver)", name ? name : std::to_string(r));
        return;
    }
    s.ok = true;
}

void load_nvrtc() {
    NvrtcState& s = g_nvrtc;
    std::vector<std::string> names;
    if (const char* p = std::getenv("FJ_NVRTC_LIBRARY")) names.push_back(p);
    for (const char* n : {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}) names.push_back(n);
    std::vector<std::string> dirs;
    for (const char* env : {"CUDA_HOME", "CUDA_PATH"})
        if (const char* p = std::getenv(env)) dirs.push_back(std::string(p) + "/lib64/");
    dirs.push_back("/usr/local/cuda/lib64/");
    for (const std::string& dir : dirs)
        for (const char* n : {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}) names.push_back(dir + n);
    std::string loaded, tried;
    void* lib = open_first(names, &loaded, &tried);
    if (!lib) {
        s.why = "no NVRTC: could not load libnvrtc (" + tried + ")";
        return;
    }
    Nvrtc& n = s.api;
    std::string missing;
    resolve(lib, n.nvrtcGetErrorString, "nvrtcGetErrorString", true, &missing);
    resolve(lib, n.nvrtcVersion, "nvrtcVersion", true, &missing);
    resolve(lib, n.nvrtcGetNumSupportedArchs, "nvrtcGetNumSupportedArchs", true, &missing);
    resolve(lib, n.nvrtcGetSupportedArchs, "nvrtcGetSupportedArchs", true, &missing);
    resolve(lib, n.nvrtcCreateProgram, "nvrtcCreateProgram", true, &missing);
    resolve(lib, n.nvrtcDestroyProgram, "nvrtcDestroyProgram", true, &missing);
    resolve(lib, n.nvrtcCompileProgram, "nvrtcCompileProgram", true, &missing);
    resolve(lib, n.nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize", true, &missing);
    resolve(lib, n.nvrtcGetProgramLog, "nvrtcGetProgramLog", true, &missing);
    resolve(lib, n.nvrtcGetPTXSize, "nvrtcGetPTXSize", true, &missing);
    resolve(lib, n.nvrtcGetPTX, "nvrtcGetPTX", true, &missing);
    resolve(lib, n.nvrtcGetCUBINSize, "nvrtcGetCUBINSize", true, &missing);
    resolve(lib, n.nvrtcGetCUBIN, "nvrtcGetCUBIN", true, &missing);
    if (!missing.empty()) {
        s.why = fmt::format("NVRTC {} lacks {} (too old: CUDA 11.1 or newer is needed)", loaded, missing);
        return;
    }
    int major = 0, minor = 0;
    if (n.nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) {
        s.why = "nvrtcVersion failed for " + loaded;
        return;
    }
    n.version = major * 1000 + minor * 10;
    n.library = loaded_path(lib, loaded);
    n.builtins = load_nvrtc_builtins(n.library, major, minor, &s.why);
    if (n.builtins.empty()) return;  // s.why says what was tried: NVRTC could compile nothing
    s.ok = true;
}

struct DeviceState {
    std::once_flag once;
    Device dev;
    bool ok = false;
    std::string why;
};
DeviceState g_device;  // the default device (FJ_CUDA_DEVICE)

int attr(const Driver& d, int a, CUdevice dev) {
    int v = 0;
    check_cu(d.cuDeviceGetAttribute(&v, a, dev), "cuDeviceGetAttribute");
    return v;
}

// Fills s.dev for `ordinal` and retains its primary context, or says in s.why why not.
void load_device_at(DeviceState& s, int ordinal, int count) {
    const Driver* d = driver(&s.why);
    if (!d) return;
    try {
        if (ordinal < 0 || ordinal >= count) {
            s.why = fmt::format("CUDA device {} requested but {} device(s) exist", ordinal, count);
            return;
        }
        Device& v = s.dev;
        v.ordinal = ordinal;
        check_cu(d->cuDeviceGet(&v.dev, ordinal), "cuDeviceGet");
        char name[256] = {};
        check_cu(d->cuDeviceGetName(name, sizeof name - 1, v.dev), "cuDeviceGetName");
        v.name = name;
        v.cc_major = attr(*d, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, v.dev);
        v.cc_minor = attr(*d, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, v.dev);
        v.sm_count = attr(*d, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, v.dev);
        v.max_threads_per_sm = attr(*d, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, v.dev);
        v.max_grid_x = attr(*d, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, v.dev);
        v.max_grid_y = attr(*d, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, v.dev);
        v.l2_bytes = attr(*d, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, v.dev);
        v.smem_optin = attr(*d, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, v.dev);
        v.memory_pools = d->cuMemAllocAsync && d->cuMemFreeAsync &&
                         attr(*d, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, v.dev) != 0;
        if (!attr(*d, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, v.dev)) {
            s.why = "CUDA device " + v.name + " lacks unified addressing";
            return;
        }
        check_cu(d->cuDeviceTotalMem(&v.total_mem, v.dev), "cuDeviceTotalMem");
        check_cu(d->cuDriverGetVersion(&v.driver_version), "cuDriverGetVersion");
        check_cu(d->cuDevicePrimaryCtxRetain(&v.ctx, v.dev), "cuDevicePrimaryCtxRetain");
        s.ok = true;
    } catch (const Error& e) {
        s.why = e.what();
    }
}

void load_device() {
    DeviceState& s = g_device;
    const int count = device_count();
    if (count <= 0) {
        if (!driver(&s.why)) return;
        s.why = "no CUDA device found";
        return;
    }
    int ordinal = 0;
    if (const char* p = std::getenv("FJ_CUDA_DEVICE")) ordinal = std::atoi(p);
    if (ordinal < 0 || ordinal >= count) {
        s.why = fmt::format("FJ_CUDA_DEVICE={} but {} device(s) exist", ordinal, count);
        return;
    }
    load_device_at(s, ordinal, count);
}

// Every other device, by ordinal, loaded at first use (several GPUs of one host: RunOptions::devices).
std::mutex g_devices_mutex;
std::vector<std::unique_ptr<DeviceState>> g_devices;

}  // namespace

const Driver* driver(std::string* why_not) {
    std::call_once(g_driver.once, load_driver);
    if (!g_driver.ok && why_not) *why_not = g_driver.why;
    return g_driver.ok ? &g_driver.api : nullptr;
}

const Nvrtc* nvrtc(std::string* why_not) {
    std::call_once(g_nvrtc.once, load_nvrtc);
    if (!g_nvrtc.ok && why_not) *why_not = g_nvrtc.why;
    return g_nvrtc.ok ? &g_nvrtc.api : nullptr;
}

const Driver& driver_api() {
    std::string why;
    if (const Driver* d = driver(&why)) return *d;
    throw BackendError("CUDA unavailable: " + why);
}

const Nvrtc& nvrtc_api() {
    std::string why;
    if (const Nvrtc* n = nvrtc(&why)) return *n;
    throw BackendError("NVRTC unavailable: " + why);
}

const Device* device(std::string* why_not) {
    std::call_once(g_device.once, load_device);
    if (!g_device.ok && why_not) *why_not = g_device.why;
    return g_device.ok ? &g_device.dev : nullptr;
}

int device_count() {
    const Driver* d = driver();
    int count = 0;
    if (!d || d->cuDeviceGetCount(&count) != CUDA_SUCCESS) return 0;
    return count;
}

const Device& device_at(int ordinal) {
    if (const Device* def = device(); def && def->ordinal == ordinal) return *def;
    const int count = device_count();
    std::lock_guard<std::mutex> lock(g_devices_mutex);
    if (static_cast<int>(g_devices.size()) < count) g_devices.resize(static_cast<std::size_t>(count));
    if (ordinal < 0 || ordinal >= count) {
        std::string why;
        if (!driver(&why)) throw BackendError(fmt::format("CUDA device {}: CUDA unavailable: {}", ordinal, why));
        throw BackendError(fmt::format("CUDA device {} requested but {} device(s) exist (ordinals 0 to {})", ordinal,
                                       count, count - 1));
    }
    auto& slot = g_devices[static_cast<std::size_t>(ordinal)];
    if (!slot) {
        slot = std::make_unique<DeviceState>();
        load_device_at(*slot, ordinal, count);
    }
    if (!slot->ok) throw BackendError(fmt::format("CUDA device {}: {}", ordinal, slot->why));
    return slot->dev;
}

void make_current(const Device& d) {
    // cuCtxGetCurrent is a thread-local read; setting only when needed keeps the per-run cost tiny.
    CUcontext cur = nullptr;
    const Driver& api = driver_api();
    if (api.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == d.ctx) return;
    check_cu(api.cuCtxSetCurrent(d.ctx), "cuCtxSetCurrent");
}

std::string cu_error_text(CUresult r) {
    const char* name = nullptr;
    const char* text = nullptr;
    if (const Driver* d = driver()) {
        d->cuGetErrorName(r, &name);
        d->cuGetErrorString(r, &text);
    }
    std::string s = name ? name : fmt::format("CUDA error {}", r);
    if (text) s += fmt::format(" ({})", text);
    return s;
}

void check_cu(CUresult r, const char* call) {
    if (r == CUDA_SUCCESS) return;
    throw BackendError(fmt::format("{}: {}", call, cu_error_text(r)));
}

void check_nvrtc(nvrtcResult r, const char* call) {
    if (r == NVRTC_SUCCESS) return;
    const char* text = nullptr;
    if (const Nvrtc* n = nvrtc()) text = n->nvrtcGetErrorString(r);
    throw BackendError(fmt::format("{}: {}", call, text ? text : fmt::format("NVRTC error {}", r)));
}

}  // namespace fj::rt::cuda

#ifdef FJ_HAVE_CUDA_HEADERS
// Only to check that the values declared in cuda_api.hpp are the driver's. Last in the file: cuda.h's
// macros (cuMemAlloc -> cuMemAlloc_v2, ...) would otherwise rename the members of Driver.
#include <cuda.h>
#include <nvrtc.h>
static_assert(fj::rt::cuda::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT == ::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
static_assert(fj::rt::cuda::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X == ::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
static_assert(fj::rt::cuda::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y == ::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
static_assert(fj::rt::cuda::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE == ::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
static_assert(fj::rt::cuda::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR ==
              ::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
static_assert(fj::rt::cuda::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING == ::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING);
static_assert(fj::rt::cuda::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR ==
              ::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
static_assert(fj::rt::cuda::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR ==
              ::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
static_assert(fj::rt::cuda::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED ==
              ::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED);
static_assert(fj::rt::cuda::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK == ::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
static_assert(fj::rt::cuda::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES == ::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES);
static_assert(fj::rt::cuda::CU_FUNC_ATTRIBUTE_NUM_REGS == ::CU_FUNC_ATTRIBUTE_NUM_REGS);
static_assert(fj::rt::cuda::CU_POINTER_ATTRIBUTE_CONTEXT == ::CU_POINTER_ATTRIBUTE_CONTEXT);
static_assert(fj::rt::cuda::CU_POINTER_ATTRIBUTE_MEMORY_TYPE == ::CU_POINTER_ATTRIBUTE_MEMORY_TYPE);
static_assert(fj::rt::cuda::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL == ::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL);
static_assert(fj::rt::cuda::CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED == ::CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
static_assert(fj::rt::cuda::CU_MEMORYTYPE_HOST == ::CU_MEMORYTYPE_HOST);
static_assert(fj::rt::cuda::CU_MEMORYTYPE_DEVICE == ::CU_MEMORYTYPE_DEVICE);
static_assert(fj::rt::cuda::CU_STREAM_NON_BLOCKING == ::CU_STREAM_NON_BLOCKING);
static_assert(fj::rt::cuda::CUDA_ERROR_NOT_READY == ::CUDA_ERROR_NOT_READY);
static_assert(fj::rt::cuda::NVRTC_ERROR_COMPILATION == ::NVRTC_ERROR_COMPILATION);
static_assert(sizeof(fj::rt::cuda::CUdeviceptr) == sizeof(::CUdeviceptr));
static_assert(sizeof(fj::rt::cuda::CUDA_MEMCPY2D) == sizeof(::CUDA_MEMCPY2D_v2));
static_assert(offsetof(fj::rt::cuda::CUDA_MEMCPY2D, srcHost) == offsetof(::CUDA_MEMCPY2D_v2, srcHost));
static_assert(offsetof(fj::rt::cuda::CUDA_MEMCPY2D, dstMemoryType) == offsetof(::CUDA_MEMCPY2D_v2, dstMemoryType));
static_assert(offsetof(fj::rt::cuda::CUDA_MEMCPY2D, Height) == offsetof(::CUDA_MEMCPY2D_v2, Height));
#endif
