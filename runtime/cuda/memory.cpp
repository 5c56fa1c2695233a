#include "runtime/cuda/memory.hpp"

#include <algorithm>

#include "runtime/fault_inject.hpp"

namespace fj::rt::cuda {

RunMemory::~RunMemory() {
    if (!driver()) return;
    for (CUdeviceptr p : ptrs_) free(p);  // errors here are moot: the run is over either way
}

void RunMemory::free(CUdeviceptr p) const {
    const Driver* d = driver();
    if (dev_.memory_pools) d->cuMemFreeAsync(p, stream_);
    else d->cuMemFree(p);
}

CUdeviceptr RunMemory::alloc(std::size_t bytes) {
    fault_point(FaultKind::Alloc, "cuda device memory");
    CUdeviceptr p = 0;
    if (dev_.memory_pools) FJ_CU(cuMemAllocAsync, &p, std::max<std::size_t>(bytes, 1), stream_);
    else FJ_CU(cuMemAlloc, &p, std::max<std::size_t>(bytes, 1));
    ptrs_.push_back(p);
    return p;
}

void RunMemory::release(CUdeviceptr p) {
    auto it = std::find(ptrs_.begin(), ptrs_.end(), p);
    if (it == ptrs_.end()) return;
    ptrs_.erase(it);
    free(p);
}

void copy_2d(CUstream s, bool to_device, const Panel& host, CUdeviceptr dev, std::int64_t dev_ld) {
    const std::size_t elem = dtype_size(host.dtype);
    const std::size_t width = static_cast<std::size_t>(host.cols) * elem;
    if (host.ld == host.cols && dev_ld == host.cols) {
        const std::size_t bytes = width * static_cast<std::size_t>(host.rows);
        if (to_device) FJ_CU(cuMemcpyHtoDAsync, dev, host.data, bytes, s);
        else FJ_CU(cuMemcpyDtoHAsync, host.data, dev, bytes, s);
        return;
    }
    CUDA_MEMCPY2D c{};
    c.WidthInBytes = width;
    c.Height = static_cast<std::size_t>(host.rows);
    if (to_device) {
        c.srcMemoryType = CU_MEMORYTYPE_HOST;
        c.srcHost = host.data;
        c.srcPitch = static_cast<std::size_t>(host.ld) * elem;
        c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
        c.dstDevice = dev;
        c.dstPitch = static_cast<std::size_t>(dev_ld) * elem;
    } else {
        c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
        c.srcDevice = dev;
        c.srcPitch = static_cast<std::size_t>(dev_ld) * elem;
        c.dstMemoryType = CU_MEMORYTYPE_HOST;
        c.dstHost = host.data;
        c.dstPitch = static_cast<std::size_t>(host.ld) * elem;
    }
    FJ_CU(cuMemcpy2DAsync, &c, s);
}

}  // namespace fj::rt::cuda
