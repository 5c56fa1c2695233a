// Page-locking the caller's host memory for the GPU, explicitly and for as long as the caller says.
//
// Host panels in page-locked memory go through the CUDA pipeline without staging: the copies read and write
// them directly at PCIe speed (runtime/cuda/host_pipeline.hpp). Pageable panels are staged through pinned
// buffers by CPU threads instead, at the rate of a memory copy. Registering an array costs about 0.5 s per
// 10 GB (H200 machine, docs/runtime.md), so it pays for arrays that several runs read or write: register them
// once with this handle, run as often as needed, and let the handle unregister them.
//
// There is deliberately no implicit cache of registrations keyed by address and size: a caller who frees an
// array and allocates another that lands at the same address would find the new pages "registered" from the
// cache while the driver's pinning belonged to the old ones, and the DMA would read stale physical pages. The
// caller knows an array's lifetime; the library does not.
#pragma once

#include <cstddef>

namespace fj {

// A range of host memory page-locked with cuMemHostRegister (portable: every device's DMA may use it) for
// the life of this object; the destructor unregisters it. Movable, not copyable. The memory must stay
// allocated while the handle lives (unregister before freeing it).
class HostRegistration {
public:
    HostRegistration() = default;
    ~HostRegistration();
    HostRegistration(HostRegistration&& other) noexcept;
    HostRegistration& operator=(HostRegistration&& other) noexcept;
    HostRegistration(const HostRegistration&) = delete;
    HostRegistration& operator=(const HostRegistration&) = delete;

    void* data() const { return data_; }
    std::size_t bytes() const { return bytes_; }
    explicit operator bool() const { return data_ != nullptr; }

    // Unregisters now (what the destructor does); a no-op on an empty handle. Errors are reported as
    // fj::BackendError, unlike the destructor's, which are ignored.
    void reset();

private:
    friend HostRegistration register_host(void* data, std::size_t bytes);
    HostRegistration(void* data, std::size_t bytes) : data_(data), bytes_(bytes) {}
    void* data_ = nullptr;
    std::size_t bytes_ = 0;
};

// Page-locks [data, data + bytes). Throws fj::InputError for a null pointer or zero bytes, and
// fj::BackendError (with the address, the size and the driver's error) where CUDA is not available (no
// driver, no GPU, built without the CUDA backend) or the driver refuses (part of the range is registered
// already, the memory cannot be locked).
HostRegistration register_host(void* data, std::size_t bytes);

}  // namespace fj
