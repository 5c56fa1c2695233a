#include "runtime/devices.hpp"

#include <cctype>
#include <algorithm>
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
    // The whole list's syntax first, then the ordinals against the devices there are.
    std::vector<int> list;
    std::vector<std::string> entries;
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
            v = std::min<std::int64_t>(v * 10 + (c - '0'), 1'000'000'000);
        }
        list.push_back(static_cast<int>(v));
        entries.push_back(entry);
        if (comma == std::string::npos) break;
        at = comma + 1;
    }
    for (std::size_t i = 0; i < list.size(); ++i)
        if (list[i] >= available) throw InputError(fmt::format("devices '{}': there is no device {}: {}", text, entries[i], there));
    return list;
}

}  // namespace fj
