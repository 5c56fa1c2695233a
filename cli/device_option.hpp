// The commands' --devices option: "all" or a comma-separated list of CUDA device ordinals (RunOptions::devices).
#pragma once

#include <string>
#include <vector>

namespace fj::cli {

// fj::parse_devices against the GPUs of this machine; a bad list is a UsageError of `command` that names the
// option, the bad entry and the devices there are.
std::vector<int> parse_devices_option(const std::string& value, const std::string& command);

// "devices 0, 1 (2 workers)" for verbose output; "" for an empty list.
std::string describe_devices(const std::vector<int>& devices);

}  // namespace fj::cli
