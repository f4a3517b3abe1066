// Host element types for f16/bf16 and the dtype -> C++ type dispatch used by the CPU backend.
#pragma once

#include <cstdint>
#include <utility>

#include "frugal/dtype.h"
#include "frugal/error.h"
#include "frugal/half.h"

namespace frugal {

struct f16_t {
  uint16_t bits;
};
struct bf16_t {
  uint16_t bits;
};

inline float to_float(float x) { return x; }
inline float to_float(f16_t x) { return half_to_float(x.bits); }
inline float to_float(bf16_t x) { return bf16_to_float(x.bits); }

template <typename T>
T from_float(float x);
template <>
inline float from_float<float>(float x) { return x; }
template <>
inline f16_t from_float<f16_t>(float x) { return {float_to_half(x)}; }
template <>
inline bf16_t from_float<bf16_t>(float x) { return {float_to_bf16(x)}; }

// Calls f.template operator()<T>() with T = float | f16_t | bf16_t for a floating dtype.
template <typename F>
decltype(auto) dispatch_float(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32: return std::forward<F>(f).template operator()<float>();
    case DType::f16: return std::forward<F>(f).template operator()<f16_t>();
    case DType::bf16: return std::forward<F>(f).template operator()<bf16_t>();
    default: break;
  }
  FRUGAL_FAIL(invalid_argument, op, "expected a floating dtype (f32, f16, bf16), got " << to_string(t));
}

}  // namespace frugal
