// Which GPUs a run may use (RunOptions::devices): "all of them", and the command line's --devices list.
#pragma once

#include <string>
#include <vector>

namespace fj {

// The CUDA devices of this machine as RunOptions::devices for "every GPU": {0, 1, ..., n - 1}. Empty where
// there is no driver or no GPU (or the build has no CUDA backend).
std::vector<int> all_cuda_devices();

// Parses a device list as the command line's --devices takes it: "all" (every one of the `available`
// devices), or ordinals separated by commas ("0,1,3"; an ordinal may repeat: "0,0" runs two workers on
// device 0, a testing aid). Throws fj::InputError naming the bad entry: not a number, negative, not below
// `available`, an empty entry, or "all" where there is no device.
std::vector<int> parse_devices(const std::string& text, int available);

}  // namespace fj
