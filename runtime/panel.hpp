// Panels: views of T x N matrices (rows = time, columns = instruments) owned by the caller.
#pragma once

#include <cstdint>

#include "dsl/dtype.hpp"

namespace fj {

enum class Memory : std::uint8_t { Host, Cuda };  // Cuda: a device pointer in the primary context

// A row-major view: element (t, j) is at data[t * ld + j], ld >= cols. Inputs are only read.
struct Panel {
    void* data = nullptr;
    std::int64_t rows = 0, cols = 0, ld = 0;
    DType dtype = DType::F32;
    Memory memory = Memory::Host;

    static Panel host(const float* p, std::int64_t rows, std::int64_t cols, std::int64_t ld = 0) {
        return {const_cast<float*>(p), rows, cols, ld ? ld : cols, DType::F32, Memory::Host};
    }
    static Panel host(const double* p, std::int64_t rows, std::int64_t cols, std::int64_t ld = 0) {
        return {const_cast<double*>(p), rows, cols, ld ? ld : cols, DType::F64, Memory::Host};
    }
    static Panel device(std::uint64_t ptr, std::int64_t rows, std::int64_t cols, std::int64_t ld, DType t) {
        return {reinterpret_cast<void*>(ptr), rows, cols, ld ? ld : cols, t, Memory::Cuda};
    }
};

}  // namespace fj
