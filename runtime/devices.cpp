#include "runtime/devices.hpp"

#include <cctype>
#include <cstdint>

#include <fmt/format.h>

#include "dsl/error.hpp"
#ifdef FJ_WITH_CUDA
#include "runtime/cuda/cuda_api.hpp"
#endif

namespace fj {

std::vector<int> all_cuda_devices() {
    int n = 0;
#ifdef FJ_WITH_CUDA
    n = rt::cuda::device_count();
#endif
    std::vector<int> all;
    for (int d = 0; d < n; ++d) all.push_back(d);
    return all;
}

std::vector<int> parse_devices(const std::string& text, int available) {
    const std::string there = available == 1 ? "1 GPU is there (ordinal 0)"
                              : available > 0 ? fmt::format("{} GPUs are there (ordinals 0 to {})", available, available - 1)
                                              : std::string("no GPU is there");
    if (text == "all") {
        if (available <= 0) throw InputError(fmt::format("devices 'all': {}", there));
        std::vector<int> all;
        for (int d = 0; d < available; ++d) all.push_back(d);
        return all;
    }
    std::vector<int> list;
    std::size_t at = 0;
    while (true) {
        const std::size_t comma = text.find(',', at);
        const std::string entry = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
        if (entry.empty())
            throw InputError(fmt::format("devices '{}': an empty entry (expected 'all' or ordinals such as 0,1)", text));
        std::int64_t v = 0;
        for (char c : entry) {
            if (!std::isdigit(static_cast<unsigned char>(c)))
                throw InputError(fmt::format("devices '{}': '{}' is not a device ordinal (expected 'all' or ordinals "
                                             "such as 0,1)", text, entry));
            v = v * 10 + (c - '0');
            if (v > 1'000'000) break;
        }
        if (v >= available) throw InputError(fmt::format("devices '{}': there is no device {}: {}", text, entry, there));
        list.push_back(static_cast<int>(v));
        if (comma == std::string::npos) break;
        at = comma + 1;
    }
    return list;
}

}  // namespace fj
