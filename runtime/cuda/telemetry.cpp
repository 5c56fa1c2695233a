#include "runtime/cuda/telemetry.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <type_traits>

#include <fmt/format.h>

namespace fj::rt::cuda {

namespace {

// The few NVML entry points used, by the signatures of nvml.h (not needed at build time: nvmlDevice_t is an
// opaque pointer, nvmlReturn_t an int, 0 success).
struct Nvml {
    int (*init)() = nullptr;
    const char* (*error_string)(int) = nullptr;
    int (*handle_by_pci)(const char*, void**) = nullptr;
    int (*clock)(void*, int, unsigned*) = nullptr;
    int (*temperature)(void*, int, unsigned*) = nullptr;
    int (*power)(void*, unsigned*) = nullptr;
    int (*throttle)(void*, unsigned long long*) = nullptr;
};

constexpr int kNvmlClockSm = 1, kNvmlTemperatureGpu = 0;

// Loaded and initialised once per process; null with *why when the library or a symbol is missing.
const Nvml* nvml(std::string* why) {
    static Nvml n;
    static std::string reason;
    static const bool ok = [] {
        void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
            const char* e = dlerror();
            reason = fmt::format("libnvidia-ml.so.1 not loaded ({})", e ? e : "not found");
            return false;
        }
        auto sym = [&](auto& fn, const char* name) {
            fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
            if (!fn && reason.empty()) reason = fmt::format("NVML lacks {}", name);
        };
        sym(n.init, "nvmlInit_v2");
        sym(n.error_string, "nvmlErrorString");
        sym(n.handle_by_pci, "nvmlDeviceGetHandleByPciBusId_v2");
        sym(n.clock, "nvmlDeviceGetClockInfo");
        sym(n.temperature, "nvmlDeviceGetTemperature");
        sym(n.power, "nvmlDeviceGetPowerUsage");
        sym(n.throttle, "nvmlDeviceGetCurrentClocksThrottleReasons");
        if (!reason.empty()) return false;
        if (const int r = n.init(); r != 0) {
            reason = fmt::format("nvmlInit failed: {}", n.error_string(r));
            return false;
        }
        return true;
    }();
    if (!ok && why) *why = reason;
    return ok ? &n : nullptr;
}

}  // namespace

std::string throttle_reason_names(unsigned long long reasons) {
    static const std::pair<unsigned long long, const char*> kNames[] = {
        {0x1ULL, "idle"},           {0x2ULL, "application clocks"},       {0x4ULL, "power cap"},
        {0x8ULL, "hardware slowdown"}, {0x10ULL, "sync boost"},          {0x20ULL, "thermal (software)"},
        {0x40ULL, "thermal (hardware)"}, {0x80ULL, "power brake (hardware)"}, {0x100ULL, "display clocks"},
    };
    std::string out;
    for (const auto& [bit, name] : kNames)
        if (reasons & bit) out += (out.empty() ? "" : ", ") + std::string(name);
    if (const unsigned long long known = 0x1ffULL; reasons & ~known)
        out += fmt::format("{}other (0x{:x})", out.empty() ? "" : ", ", reasons & ~known);
    return out.empty() ? "none" : out;
}

bool TelemetrySummary::throttled() const { return (throttle & (0x4ULL | 0x8ULL | 0x20ULL | 0x40ULL | 0x80ULL)) != 0; }

std::string TelemetrySummary::describe() const {
    if (!available) return "telemetry unavailable: " + why_not;
    if (samples == 0) return "telemetry: no sample (the run was shorter than the sampling period)";
    return fmt::format("SM {}-{} MHz, up to {} C and {:.0f} W over {} samples; throttle reasons: {}", sm_min, sm_max,
                       temperature_max, power_max, samples, throttle_reason_names(throttle));
}

TelemetrySampler::TelemetrySampler(const Device& dev, int period_ms) : period_ms_(std::max(1, period_ms)) {
    const Nvml* n = nvml(&why_not_);
    if (!n) return;
    // NVML names devices by PCI address; CUDA ordinals may be renumbered (CUDA_VISIBLE_DEVICES).
    int domain = 0, bus = 0, device = 0;
    const Driver& d = driver_api();
    if (d.cuDeviceGetAttribute(&domain, 50 /* PCI_DOMAIN_ID */, dev.dev) != 0 ||
        d.cuDeviceGetAttribute(&bus, 33 /* PCI_BUS_ID */, dev.dev) != 0 ||
        d.cuDeviceGetAttribute(&device, 34 /* PCI_DEVICE_ID */, dev.dev) != 0) {
        why_not_ = "the device's PCI address is unknown to the driver";
        return;
    }
    const std::string pci = fmt::format("{:08x}:{:02x}:{:02x}.0", domain, bus, device);
    if (const int r = n->handle_by_pci(pci.c_str(), &handle_); r != 0) {
        handle_ = nullptr;
        why_not_ = fmt::format("NVML has no device at PCI {}: {}", pci, n->error_string(r));
    }
}

TelemetrySampler::~TelemetrySampler() {
    if (running_) stop();
}

TelemetrySample TelemetrySampler::sample(double seconds) const {
    const Nvml* n = nvml(nullptr);
    TelemetrySample s;
    s.seconds = seconds;
    unsigned mw = 0;
    n->clock(handle_, kNvmlClockSm, &s.sm_mhz);
    n->temperature(handle_, kNvmlTemperatureGpu, &s.temperature_c);
    if (n->power(handle_, &mw) == 0) s.power_w = mw / 1000.0;
    n->throttle(handle_, &s.throttle);
    return s;
}

void TelemetrySampler::loop() {
    const auto t0 = std::chrono::steady_clock::now();
    while (running_) {
        const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const TelemetrySample s = sample(t);
        {
            std::lock_guard<std::mutex> lock(mutex_);
            samples_.push_back(s);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(period_ms_));
    }
}

void TelemetrySampler::start() {
    if (!handle_ || running_) return;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        samples_.clear();
    }
    running_ = true;
    thread_ = std::thread([this] { loop(); });
}

TelemetrySummary TelemetrySampler::stop() {
    TelemetrySummary sum;
    sum.available = handle_ != nullptr;
    sum.why_not = why_not_;
    if (running_) {
        running_ = false;
        thread_.join();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    for (const TelemetrySample& s : samples_) {
        sum.sm_min = sum.samples == 0 ? s.sm_mhz : std::min(sum.sm_min, s.sm_mhz);
        sum.sm_max = std::max(sum.sm_max, s.sm_mhz);
        sum.temperature_max = std::max(sum.temperature_max, s.temperature_c);
        sum.power_max = std::max(sum.power_max, s.power_w);
        sum.throttle |= s.throttle & ~0x1ULL;  // (idle: between runs, not a slowdown)
        ++sum.samples;
    }
    return sum;
}

}  // namespace fj::rt::cuda
