// The CPU's in-place fast Walsh–Hadamard transform, shared by the KV cache and decode attention.
// Stage order h = 1, 2, 4, ... is the reference order the CUDA kernels reproduce bit for bit.
#pragma once

namespace frugal::cpu {

inline void fwht_inplace(float* v, int d) {
  for (int h = 1; h < d; h <<= 1)
    for (int i = 0; i < d; i += 2 * h)
      for (int j = i; j < i + h; ++j) {
        const float a = v[j], b = v[j + h];
        v[j] = a + b;
        v[j + h] = a - b;
      }
}

}  // namespace frugal::cpu
