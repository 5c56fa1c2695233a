// GPU telemetry through NVML, loaded at run time (libnvidia-ml.so.1, as the driver and NVRTC are): the SM clock,
// temperature, power and clock-throttle reasons of the device factorjit runs on, sampled on a thread while a
// benchmark runs, so that a slowdown from heat or the power cap shows beside the figure instead of passing for a
// regression (DESIGN.md, "Runtime"). Without NVML (no driver, a container without the library) the sampler says
// why and samples nothing; nothing else depends on it.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/cuda/cuda_api.hpp"

namespace fj::rt::cuda {

struct TelemetrySample {
    double seconds = 0;  // since start()
    unsigned sm_mhz = 0, temperature_c = 0;
    double power_w = 0;
    unsigned long long throttle = 0;  // NVML clock-throttle (clocks event) reason bits
};

struct TelemetrySummary {
    bool available = false;
    std::string why_not;  // when not available
    int samples = 0;
    unsigned sm_min = 0, sm_max = 0, temperature_max = 0;
    double power_max = 0;
    unsigned long long throttle = 0;  // every reason seen, idle excluded
    // "SM 1755-1980 MHz, 47 C, 402 W, throttled: power cap" (or "telemetry unavailable: ...").
    std::string describe() const;
    // Whether a reason that lowers clocks under load was seen (power cap, thermal, hardware slowdown).
    bool throttled() const;
};

// Names of throttle reason bits: "power cap, thermal (software)".
std::string throttle_reason_names(unsigned long long reasons);

class TelemetrySampler {
public:
    explicit TelemetrySampler(const Device& dev, int period_ms = 50);
    ~TelemetrySampler();
    TelemetrySampler(const TelemetrySampler&) = delete;
    TelemetrySampler& operator=(const TelemetrySampler&) = delete;

    bool available() const { return handle_ != nullptr; }
    const std::string& why_not() const { return why_not_; }
    void start();              // begins sampling (clears earlier samples)
    TelemetrySummary stop();   // ends sampling and summarises what was sampled since start()

private:
    void loop();
    TelemetrySample sample(double seconds) const;

    void* handle_ = nullptr;  // nvmlDevice_t
    std::string why_not_;
    int period_ms_;
    std::thread thread_;
    std::atomic<bool> running_{false};
    std::mutex mutex_;
    std::vector<TelemetrySample> samples_;
};

}  // namespace fj::rt::cuda
