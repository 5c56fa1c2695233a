#include "cli/device_option.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.hpp"
#include "dsl/error.hpp"
#include "runtime/devices.hpp"

namespace fj::cli {

std::vector<int> parse_devices_option(const std::string& value, const std::string& command) {
    try {
        return fj::parse_devices(value, static_cast<int>(fj::all_cuda_devices().size()));
    } catch (const fj::InputError& e) {
        throw UsageError(fmt::format("--{}", e.what()), command);
    }
}

std::string describe_devices(const std::vector<int>& devices) {
    if (devices.empty()) return "";
    return fmt::format("device{} {} ({} worker{})", devices.size() == 1 ? "" : "s", fmt::join(devices, ", "),
                       devices.size(), devices.size() == 1 ? "" : "s");
}

}  // namespace fj::cli
