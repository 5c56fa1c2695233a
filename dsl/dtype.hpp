// The panel element types: vocabulary shared by the planner, both emitters and the runtime (it sits in
// dsl/, the lowest stage, so that nothing in codegen/ reaches up into runtime/ for it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace fj {

enum class DType : std::uint8_t { F32, F64 };

inline std::size_t dtype_size(DType t) { return t == DType::F32 ? 4 : 8; }
inline std::string_view dtype_name(DType t) { return t == DType::F32 ? "float32" : "float64"; }

}  // namespace fj
