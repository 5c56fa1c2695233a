// Device memory for one run and the copies between host panels and it.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/cuda/cuda_api.hpp"
#include "runtime/panel.hpp"

namespace fj::rt::cuda {

// A panel in device memory as a kernel's arguments see it.
struct DevView {
    CUdeviceptr ptr = 0;
    std::int64_t ld = 0;
};

// Device memory for one run's staged panels and intermediates, freed on the stream however the run ends
// (stream-ordered where the device has memory pools), or earlier by release() once nothing reads it.
class RunMemory {
public:
    RunMemory(const Device& dev, CUstream stream) : dev_(dev), stream_(stream) {}
    ~RunMemory();
    RunMemory(const RunMemory&) = delete;
    RunMemory& operator=(const RunMemory&) = delete;

    CUdeviceptr alloc(std::size_t bytes);
    void release(CUdeviceptr p);

private:
    void free(CUdeviceptr p) const;

    const Device& dev_;
    CUstream stream_;
    std::vector<CUdeviceptr> ptrs_;
};

// Copies `host`'s rows (cols elements each) to or from device memory of leading dimension dev_ld on
// stream s: one flat copy when both are dense, a pitched 2-D copy otherwise.
void copy_2d(CUstream s, bool to_device, const Panel& host, CUdeviceptr dev, std::int64_t dev_ld);

}  // namespace fj::rt::cuda
