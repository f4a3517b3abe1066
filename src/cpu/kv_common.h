// What the CPU's KV cache and decode attention share: the in-place fast Walsh–Hadamard transform
// and the packed-code bit stream. The FWHT's stage order h = 1, 2, 4, ... is the reference order
// the CUDA kernels reproduce bit for bit.
#pragma once

#include <cstdint>

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

// Codes form a little-endian bit stream: code i occupies bits [i*bits, (i+1)*bits) of its row.
inline void put_code(uint8_t* row, int i, int bits, unsigned code) {
  const int64_t bit = static_cast<int64_t>(i) * bits;
  const int64_t byte = bit >> 3;
  const int shift = static_cast<int>(bit & 7);
  row[byte] |= static_cast<uint8_t>(code << shift);
  if (shift + bits > 8) row[byte + 1] |= static_cast<uint8_t>(code >> (8 - shift));
}

inline unsigned get_code(const uint8_t* row, int i, int bits) {
  const int64_t bit = static_cast<int64_t>(i) * bits;
  const int64_t byte = bit >> 3;
  const int shift = static_cast<int>(bit & 7);
  unsigned v = row[byte] >> shift;
  if (shift + bits > 8) v |= static_cast<unsigned>(row[byte + 1]) << (8 - shift);
  return v & ((1u << bits) - 1u);
}

// out[i] = cb[code i] for one packed row of `dim` codes (fast paths for 4 and 8 bits).
inline void decode_codes(const uint8_t* row, int dim, int bits, const float* cb, float* out) {
  if (bits == 4) {
    for (int j = 0; j < dim / 2; ++j) {
      out[2 * j] = cb[row[j] & 15];
      out[2 * j + 1] = cb[row[j] >> 4];
    }
  } else if (bits == 8) {
    for (int i = 0; i < dim; ++i) out[i] = cb[row[i]];
  } else {
    for (int i = 0; i < dim; ++i) out[i] = cb[get_code(row, i, bits)];
  }
}

}  // namespace frugal::cpu
