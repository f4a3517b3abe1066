// Unsigned 32-bit division by a run-time constant through a multiply, for index arithmetic in
// kernels. Plain C++ outside nvcc, so host tests can check it against `/`.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define FRUGAL_HOST_DEVICE __host__ __device__
#else
#define FRUGAL_HOST_DEVICE
#endif

namespace frugal::cuda {

// q = ⌊n·m / 2^(32+s)⌋ with s = ⌈log2 d⌉ and m = ⌈2^(32+s) / d⌉ ∈ [2^32, 2^33): the error
// e = m·d − 2^(32+s) < d ≤ 2^s keeps n·e < 2^(32+s) for every n < 2^32, so q = ⌊n/d⌋ exactly
// (Granlund & Montgomery 1994, the round-up method). `mul` stores m − 2^32. Needs 1 ≤ d < 2^31.
struct FastDiv {
  uint32_t mul = 0, shift = 0;

  static FastDiv make(uint32_t d) {
    FastDiv f;
    while ((uint64_t{1} << f.shift) < d) ++f.shift;
    const uint64_t two = uint64_t{1} << (32 + f.shift);
    f.mul = static_cast<uint32_t>((two + d - 1) / d - (uint64_t{1} << 32));
    return f;
  }
  FRUGAL_HOST_DEVICE uint32_t div(uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t hi = __umulhi(n, mul);
#else
    const uint32_t hi = static_cast<uint32_t>((static_cast<uint64_t>(n) * mul) >> 32);
#endif
    return static_cast<uint32_t>((static_cast<uint64_t>(hi) + n) >> shift);
  }
};

}  // namespace frugal::cuda
