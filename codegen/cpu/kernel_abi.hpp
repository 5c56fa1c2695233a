// The calling convention of CPU kernels: one struct, so the signature never changes with the number of
// inputs and outputs.
#pragma once

#include <cstdint>

namespace fj::cpu {

struct KernelArgs {
    const void* const* inputs;   // one pointer per kernel input, element (t, j) at [t * in_ld[i] + j]
    const std::int64_t* in_ld;
    void* const* outputs;
    const std::int64_t* out_ld;
    std::int64_t col_begin, col_end;  // the columns of this task
    std::int64_t row_begin;           // first row run (warm-up starts here)
    std::int64_t out_begin;           // first row written
    std::int64_t row_end;
    double* scratch;                  // states and rings: scratch_doubles(kernel, lanes, columns) of them
};

using KernelFn = void (*)(const KernelArgs*);

}  // namespace fj::cpu
