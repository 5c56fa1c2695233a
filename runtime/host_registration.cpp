#include "runtime/host_registration.hpp"

#include <utility>

#include <fmt/format.h>

#include "dsl/error.hpp"
#ifdef FJ_WITH_CUDA
#include "runtime/cuda/cuda_api.hpp"
#endif

namespace fj {

namespace {

// Unregisters; `report` says whether a failure throws (reset()) or is ignored (the destructor: the process may
// be exiting and the driver gone, and a destructor must not throw).
void unregister(void* data, bool report) {
#ifdef FJ_WITH_CUDA
    const rt::cuda::Driver* d = rt::cuda::driver();
    if (!d) return;
    const rt::cuda::Device* dev = rt::cuda::device();
    if (dev) {
        // cuMemHostUnregister needs a current context (any: the registration is portable).
        rt::cuda::CUcontext cur = nullptr;
        if (d->cuCtxGetCurrent(&cur) != rt::cuda::CUDA_SUCCESS || !cur) d->cuCtxSetCurrent(dev->ctx);
    }
    const rt::cuda::CUresult r = d->cuMemHostUnregister(data);
    if (report && r != rt::cuda::CUDA_SUCCESS)
        throw BackendError(fmt::format("fj::HostRegistration: unregistering {} failed: cuMemHostUnregister: {}", data,
                                       rt::cuda::cu_error_text(r)));
#else
    (void)data;
    (void)report;
#endif
}

}  // namespace

HostRegistration::~HostRegistration() {
    if (data_) unregister(data_, false);
}

HostRegistration::HostRegistration(HostRegistration&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

HostRegistration& HostRegistration::operator=(HostRegistration&& other) noexcept {
    if (this != &other) {
        if (data_) unregister(data_, false);
        data_ = std::exchange(other.data_, nullptr);
        bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
}

void HostRegistration::reset() {
    if (!data_) return;
    void* data = std::exchange(data_, nullptr);
    bytes_ = 0;
    unregister(data, true);
}

HostRegistration register_host(void* data, std::size_t bytes) {
    if (!data || bytes == 0)
        throw InputError(fmt::format("fj::register_host({}, {}): nothing to register (a null pointer or zero bytes)",
                                     data, bytes));
#ifdef FJ_WITH_CUDA
    std::string why;
    const rt::cuda::Device* dev = rt::cuda::device(&why);
    if (!dev)
        throw BackendError(fmt::format("fj::register_host({}, {} bytes): CUDA unavailable: {}", data, bytes, why));
    rt::cuda::make_current(*dev);
    const rt::cuda::CUresult r =
        rt::cuda::driver_api().cuMemHostRegister(data, bytes, rt::cuda::CU_MEMHOSTREGISTER_PORTABLE);
    if (r != rt::cuda::CUDA_SUCCESS)
        throw BackendError(fmt::format("fj::register_host({}, {} bytes): cuMemHostRegister: {}{}", data, bytes,
                                       rt::cuda::cu_error_text(r),
                                       r == rt::cuda::CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
                                           ? " (part of the range is registered already, by another handle or library)"
                                           : ""));
    return HostRegistration(data, bytes);
#else
    throw BackendError(fmt::format("fj::register_host({}, {} bytes): this build has no CUDA backend "
                                   "(built with FJ_WITH_CUDA=OFF or without cuda.h)", data, bytes));
#endif
}

}  // namespace fj
