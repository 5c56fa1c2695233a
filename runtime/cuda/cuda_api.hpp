// The CUDA driver API and NVRTC, loaded with dlopen at first use.
//
// Nothing links against libcuda or libnvrtc: one build runs on machines without a GPU (the CUDA backend
// is then simply unavailable) and on machines with a driver but no toolkit. The handful of types and
// functions factorjit needs are declared here, with the driver's own names and values (cuda.h is used,
// where present, only to check those values at compile time, in cuda_api.cpp).
//
// Two independent loaders: nvrtc() needs only libnvrtc (so `factorjit compile` works on a machine with
// the toolkit and no GPU), driver() needs libcuda. Both load once per process, thread-safely, and
// remember why they failed. device() retains the primary context of the chosen device (FJ_CUDA_DEVICE,
// default 0), so pointers from CuPy or PyTorch, which use the primary context too, are valid in ours.
//
// Every call goes through FJ_CU / FJ_NVRTC, which turn a failure into fj::BackendError naming the call,
// the error's name and its description ("cuMemAllocAsync: CUDA_ERROR_OUT_OF_MEMORY (out of memory)").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace fj::rt::cuda {

// ---- driver types (as in cuda.h) ----
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
struct CUctx_st;
struct CUmod_st;
struct CUfunc_st;
struct CUstream_st;
struct CUevent_st;
using CUcontext = CUctx_st*;
using CUmodule = CUmod_st*;
using CUfunction = CUfunc_st*;
using CUstream = CUstream_st*;
using CUevent = CUevent_st*;
using CUoccupancyB2DSize = std::size_t (*)(int block_size);

inline constexpr CUresult CUDA_SUCCESS = 0;
inline constexpr CUresult CUDA_ERROR_NOT_READY = 600;
inline constexpr int CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X = 5;
inline constexpr int CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y = 6;
inline constexpr int CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
inline constexpr int CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38;
inline constexpr int CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR = 39;
inline constexpr int CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41;
inline constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
inline constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
inline constexpr int CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97;
inline constexpr int CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = 115;
inline constexpr int CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0;
inline constexpr int CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES = 3;
inline constexpr int CU_FUNC_ATTRIBUTE_NUM_REGS = 4;
inline constexpr int CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;
inline constexpr int CU_POINTER_ATTRIBUTE_CONTEXT = 1;
inline constexpr int CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2;
inline constexpr int CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9;
inline constexpr unsigned CU_MEMORYTYPE_HOST = 1;
inline constexpr unsigned CU_MEMORYTYPE_DEVICE = 2;
inline constexpr unsigned CU_STREAM_NON_BLOCKING = 1;
inline constexpr unsigned CU_EVENT_DEFAULT = 0;
// cuTensorMapEncodeTiled's enums (cuda.h): float32 elements, no interleave or swizzle, zeros out of bounds.
inline constexpr int CU_TENSOR_MAP_DATA_TYPE_FLOAT32 = 7;
inline constexpr int CU_TENSOR_MAP_INTERLEAVE_NONE = 0;
inline constexpr int CU_TENSOR_MAP_SWIZZLE_NONE = 0;
inline constexpr int CU_TENSOR_MAP_L2_PROMOTION_L2_128B = 2;
inline constexpr int CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0;
inline constexpr unsigned CU_MEMHOSTALLOC_PORTABLE = 1;
inline constexpr unsigned CU_MEMHOSTREGISTER_PORTABLE = 1;
inline constexpr CUresult CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712;

// cuMemcpy2D's parameters (CUDA_MEMCPY2D_v2): rows of WidthInBytes between two pitched layouts.
struct CUDA_MEMCPY2D {
    std::size_t srcXInBytes = 0, srcY = 0;
    unsigned srcMemoryType = 0;
    const void* srcHost = nullptr;
    CUdeviceptr srcDevice = 0;
    void* srcArray = nullptr;
    std::size_t srcPitch = 0;
    std::size_t dstXInBytes = 0, dstY = 0;
    unsigned dstMemoryType = 0;
    void* dstHost = nullptr;
    CUdeviceptr dstDevice = 0;
    void* dstArray = nullptr;
    std::size_t dstPitch = 0;
    std::size_t WidthInBytes = 0, Height = 0;
};

// ---- NVRTC types (as in nvrtc.h) ----
using nvrtcResult = int;
struct _nvrtcProgram;
using nvrtcProgram = _nvrtcProgram*;
inline constexpr nvrtcResult NVRTC_SUCCESS = 0;
inline constexpr nvrtcResult NVRTC_ERROR_COMPILATION = 6;

// The driver entry points factorjit uses. Versioned symbols (_v2) are resolved by their real names.
struct Driver {
    CUresult (*cuInit)(unsigned flags);
    CUresult (*cuDriverGetVersion)(int* version);
    CUresult (*cuGetErrorName)(CUresult, const char**);
    CUresult (*cuGetErrorString)(CUresult, const char**);
    CUresult (*cuDeviceGetCount)(int*);
    CUresult (*cuDeviceGet)(CUdevice*, int ordinal);
    CUresult (*cuDeviceGetName)(char*, int len, CUdevice);
    CUresult (*cuDeviceGetAttribute)(int*, int attrib, CUdevice);
    CUresult (*cuDeviceTotalMem)(std::size_t*, CUdevice);
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
    CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
    CUresult (*cuCtxSetCurrent)(CUcontext);
    CUresult (*cuCtxGetCurrent)(CUcontext*);
    CUresult (*cuCtxSynchronize)();
    CUresult (*cuMemGetInfo)(std::size_t* free, std::size_t* total);
    CUresult (*cuModuleLoadData)(CUmodule*, const void* image);
    CUresult (*cuModuleUnload)(CUmodule);
    CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char* name);
    CUresult (*cuFuncGetAttribute)(int*, int attrib, CUfunction);
    CUresult (*cuFuncSetAttribute)(CUfunction, int attrib, int value);
    CUresult (*cuOccupancyMaxPotentialBlockSize)(int* min_grid, int* block, CUfunction, CUoccupancyB2DSize,
                                                 std::size_t dyn_smem, int block_limit);
    CUresult (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int* blocks, CUfunction, int block,
                                                            std::size_t dyn_smem);
    CUresult (*cuLaunchKernel)(CUfunction, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                               unsigned bz, unsigned smem, CUstream, void** params, void** extra);
    CUresult (*cuStreamCreate)(CUstream*, unsigned flags);
    CUresult (*cuStreamDestroy)(CUstream);
    CUresult (*cuStreamSynchronize)(CUstream);
    CUresult (*cuEventCreate)(CUevent*, unsigned flags);
    CUresult (*cuEventDestroy)(CUevent);
    CUresult (*cuEventRecord)(CUevent, CUstream);
    CUresult (*cuEventSynchronize)(CUevent);
    CUresult (*cuEventElapsedTime)(float* ms, CUevent start, CUevent end);
    CUresult (*cuMemAlloc)(CUdeviceptr*, std::size_t);
    CUresult (*cuMemFree)(CUdeviceptr);
    CUresult (*cuMemAllocAsync)(CUdeviceptr*, std::size_t, CUstream);  // null where unsupported
    CUresult (*cuMemFreeAsync)(CUdeviceptr, CUstream);                 // null where unsupported
    // A tensor map (CUtensorMap: 16 words) for TMA copies; null where the driver predates CUDA 12.
    CUresult (*cuTensorMapEncodeTiled)(void* map, int dtype, unsigned rank, void* address, const std::uint64_t* dims,
                                       const std::uint64_t* strides, const unsigned* box, const unsigned* element_strides,
                                       int interleave, int swizzle, int l2_promotion, int oob_fill);
    CUresult (*cuMemHostAlloc)(void**, std::size_t, unsigned flags);
    CUresult (*cuMemFreeHost)(void*);
    CUresult (*cuMemHostRegister)(void*, std::size_t, unsigned flags);
    CUresult (*cuMemHostUnregister)(void*);
    CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, std::size_t);
    CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, std::size_t);
    CUresult (*cuMemcpyDtoD)(CUdeviceptr, CUdeviceptr, std::size_t);
    CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void*, std::size_t, CUstream);
    CUresult (*cuMemcpyDtoHAsync)(void*, CUdeviceptr, std::size_t, CUstream);
    CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, std::size_t, CUstream);
    CUresult (*cuMemcpy2DAsync)(const CUDA_MEMCPY2D*, CUstream);
    CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, std::size_t, CUstream);
    CUresult (*cuMemsetD32Async)(CUdeviceptr, unsigned, std::size_t, CUstream);
    CUresult (*cuPointerGetAttribute)(void* data, int attrib, CUdeviceptr);
};

struct Nvrtc {
    const char* (*nvrtcGetErrorString)(nvrtcResult);
    nvrtcResult (*nvrtcVersion)(int* major, int* minor);
    nvrtcResult (*nvrtcGetNumSupportedArchs)(int*);
    nvrtcResult (*nvrtcGetSupportedArchs)(int*);
    nvrtcResult (*nvrtcCreateProgram)(nvrtcProgram*, const char* src, const char* name, int num_headers,
                                      const char* const* headers, const char* const* include_names);
    nvrtcResult (*nvrtcDestroyProgram)(nvrtcProgram*);
    nvrtcResult (*nvrtcCompileProgram)(nvrtcProgram, int num_options, const char* const* options);
    nvrtcResult (*nvrtcGetProgramLogSize)(nvrtcProgram, std::size_t*);
    nvrtcResult (*nvrtcGetProgramLog)(nvrtcProgram, char*);
    nvrtcResult (*nvrtcGetPTXSize)(nvrtcProgram, std::size_t*);
    nvrtcResult (*nvrtcGetPTX)(nvrtcProgram, char*);
    nvrtcResult (*nvrtcGetCUBINSize)(nvrtcProgram, std::size_t*);
    nvrtcResult (*nvrtcGetCUBIN)(nvrtcProgram, char*);
    std::string library;   // the file that was loaded (full path, also when found through the loader path)
    std::string builtins;  // its libnvrtc-builtins.so.X.Y, loaded before any compile (cuda_api.cpp says why)
    int version = 0;       // major * 1000 + minor * 10, as CUDA_VERSION
};

// Loaded once; nullptr (and *why_not set) when the library or one of its symbols is missing, or cuInit
// fails (no GPU, driver/library mismatch), or NVRTC's builtins library is found neither next to the
// libnvrtc that was loaded nor on the loader path (NVRTC could compile nothing). Thread-safe.
// NVRTC is looked for at FJ_NVRTC_LIBRARY, then by soname on the loader path, then in $CUDA_HOME/lib64,
// $CUDA_PATH/lib64 and /usr/local/cuda/lib64.
const Driver* driver(std::string* why_not = nullptr);
const Nvrtc* nvrtc(std::string* why_not = nullptr);

// The loaded tables; throw fj::BackendError (with the reason) when unavailable.
const Driver& driver_api();
const Nvrtc& nvrtc_api();

// A device factorjit runs on, with its primary context retained for the life of the process.
struct Device {
    CUdevice dev = 0;
    int ordinal = 0;
    CUcontext ctx = nullptr;
    std::string name;
    int cc_major = 0, cc_minor = 0;
    int sm_count = 0;
    int max_threads_per_sm = 0;
    int max_grid_x = 0, max_grid_y = 0;
    int l2_bytes = 0;
    int smem_optin = 0;  // dynamic shared memory a block may have after opting in (bytes)
    std::size_t total_mem = 0;
    bool memory_pools = false;  // cuMemAllocAsync usable
    int driver_version = 0;

    std::string arch() const { return "sm_" + std::to_string(cc_major * 10 + cc_minor); }
};
// The default device: FJ_CUDA_DEVICE, or 0.
const Device* device(std::string* why_not = nullptr);
// Devices the driver sees (0 without a driver).
int device_count();
// Device `ordinal` (0 <= ordinal < device_count()), loaded at its first use and kept; throws fj::BackendError
// naming the ordinal and the devices there are, or why CUDA is unavailable.
const Device& device_at(int ordinal);

// Makes the primary context current on the calling thread (cheap when it already is).
void make_current(const Device& d);

// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)" for a driver result; the number where names are unknown.
std::string cu_error_text(CUresult r);

// Throws fj::BackendError "<call>: <error name> (<description>)" unless r is CUDA_SUCCESS.
void check_cu(CUresult r, const char* call);
void check_nvrtc(nvrtcResult r, const char* call);

}  // namespace fj::rt::cuda

// FJ_CU(cuMemAlloc, &ptr, bytes): calls the loaded entry point and checks its result, naming the call.
#define FJ_CU(fn, ...) ::fj::rt::cuda::check_cu(::fj::rt::cuda::driver_api().fn(__VA_ARGS__), #fn)
#define FJ_NVRTC(fn, ...) ::fj::rt::cuda::check_nvrtc(::fj::rt::cuda::nvrtc_api().fn(__VA_ARGS__), #fn)
