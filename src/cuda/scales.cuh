// A KV cache's per-vector scales in device code, in either kv::ScaleFormat: f32, or f16 bits that
// read back exactly (__half2float) and are stored as kv::backend::store_scale rounds them.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "core/kv_backend.h"

namespace frugal::cuda {

// A scales array read like a const float*, its format a run-time uniform (one kernel instance
// serves both). Loads scale the index by their format's element size, so an offset known at compile
// time stays in the instruction; the f32 load is a plain __ldg of a float. `bytes` (4 or 2) is kept
// apart from f16 so that an offset array (operator+) is one address for both formats' loads (derived
// from f16, the compiler computes an address per format and keeps both live).
struct ScalePtr {
  const char* p;
  int bytes;
  bool f16;

  // Scale i's stored bits (an f16 zero-extended), apart from value() so that a load issued long
  // before its use holds one register and no conversion waits on it.
  __device__ __forceinline__ uint32_t bits(int64_t i) const {
    if (f16) return __ldg(reinterpret_cast<const unsigned short*>(p) + i);
    return __float_as_uint(__ldg(reinterpret_cast<const float*>(p) + i));
  }
  // bits(off(j, n)) into out[j][n] for every (j, n) of a tile, the format tested once for the tile.
  template <int J, int N, typename Offset>
  __device__ __forceinline__ void bits(uint32_t (&out)[J][N], Offset off) const {
    if (f16) {
#pragma unroll
      for (int j = 0; j < J; ++j)
#pragma unroll
        for (int n = 0; n < N; ++n) out[j][n] = __ldg(reinterpret_cast<const unsigned short*>(p) + off(j, n));
    } else {
#pragma unroll
      for (int j = 0; j < J; ++j)
#pragma unroll
        for (int n = 0; n < N; ++n) out[j][n] = __float_as_uint(__ldg(reinterpret_cast<const float*>(p) + off(j, n)));
    }
  }
  __device__ __forceinline__ float value(uint32_t b) const {
    return f16 ? __half2float(__ushort_as_half(static_cast<unsigned short>(b))) : __uint_as_float(b);
  }
  __device__ __forceinline__ float operator[](int64_t i) const { return value(bits(i)); }
  __device__ __forceinline__ ScalePtr operator+(int64_t i) const { return {p + i * bytes, bytes, f16}; }
  // The same array known to be f32 at compile time (paged pools): the f16 branches fold away.
  __device__ __forceinline__ ScalePtr as_f32() const { return {p, 4, false}; }
};

inline ScalePtr scale_ptr(const void* scales, bool f16) { return {static_cast<const char*>(scales), f16 ? 2 : 4, f16}; }

// kv::backend::scale_to_half bit for bit: the nearest-even rounding, f16's quiet NaN of the scale's
// sign for a NaN scale (as float_to_half gives it; __float2half_rn's NaN bits differ), and the
// positive quiet NaN where the rounding overflows.
__device__ __forceinline__ unsigned short scale_to_half(float s) {
  if (isnan(s)) return static_cast<unsigned short>(((__float_as_uint(s) >> 16) & 0x8000u) | kv::backend::kHalfNaN);
  const unsigned short h = __half_as_ushort(__float2half_rn(s));
  return (h & 0x7fffu) == 0x7c00u ? kv::backend::kHalfNaN : h;
}

// Scale i of a scales array of either format (kv::backend::store_scale on the GPU).
__device__ __forceinline__ void store_scale(void* scales, bool f16, int64_t i, float s) {
  if (f16)
    static_cast<unsigned short*>(scales)[i] = scale_to_half(s);
  else
    static_cast<float*>(scales)[i] = s;
}

}  // namespace frugal::cuda
