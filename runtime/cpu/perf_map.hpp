// FJ_PERF_MAP=1: the CPU kernels' functions named in /tmp/perf-<pid>.map, the file `perf report` reads to name
// code it found no symbols for, so that a profile of a program (the 101 alphas: 143 kernels, 40 % of a run's
// CPU) says which kernels the time went to instead of "[JIT] tid N 0x7f...".
#pragma once

#include <cstdint>
#include <string_view>

namespace fj::cpu {

// Appends a line per function of the linked object `image` (an ELF relocatable file) whose symbol
// `anchor` the JIT placed at `anchor_address`: the functions' addresses follow from their offsets in the
// text section (linked as one block). Does nothing unless FJ_PERF_MAP is set (to anything); an error in
// writing is ignored, as the map is only a debugging aid.
void perf_map_add(std::string_view image, std::string_view anchor, std::uint64_t anchor_address);

}  // namespace fj::cpu
