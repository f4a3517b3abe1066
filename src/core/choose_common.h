// Small pieces every op's choose file uses: sizes in whole tiles and 16-byte parts, the dtypes the
// tensor-core kernels take, and the one-clause reason a can_implement gives when it refuses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "frugal/dtype.h"

namespace frugal::choose {

inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline size_t align16(size_t bytes) { return (bytes + 15) / 16 * 16; }  // workspace parts start on 16 bytes
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
inline bool tensor_core_dtype(DType t) { return t == DType::f16 || t == DType::bf16; }

// A can_implement's refusal: the parts, streamed into *why when it is given; always false.
template <typename... Parts>
bool refuse(std::string* why, const Parts&... parts) {
  if (why) {
    std::ostringstream os;
    (os << ... << parts);
    *why = os.str();
  }
  return false;
}

}  // namespace frugal::choose
