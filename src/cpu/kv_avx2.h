// The AVX2 + F16C steps of the CPU's KV append (cpu/kv.cpp), for head dims that are multiples of 8:
// the load of a batch's vectors into SIMD lanes by 8 × 8 register transposes, with ‖x‖² in f64, and
// the 8-bit codes' cell-table lookup by gathers. Each computes what the portable loop computes, bit
// for bit: the same f32 and f64 operations on every lane in the same order.
#pragma once

#include "cpu/clones.h"  // FRUGAL_AVX2_F16C: called where cpu_has_avx2_f16c()

#if FRUGAL_CPU_AVX2

#include <immintrin.h>

#include <cstdint>

#include "core/types.h"

namespace frugal::cpu::kv_avx2 {

constexpr int kLanes = 16;  // the batch's lanes (cpu/kv.cpp): two groups of eight

// Elements [i, i + 8) of one vector as f32 (F16C converts f16 exactly, subnormals, inf and NaN included).
FRUGAL_AVX2_F16C_INLINE __m256 load8(const float* x, int i) { return _mm256_loadu_ps(x + i); }
FRUGAL_AVX2_F16C_INLINE __m256 load8(const f16_t* x, int i) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
}
FRUGAL_AVX2_F16C_INLINE __m256 load8(const bf16_t* x, int i) {
  const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
}

// r[j] ← column j of the 8 × 8 matrix whose rows are r[0..7].
FRUGAL_AVX2_F16C_INLINE void transpose8(__m256* r) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xee);
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xee);
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xee);
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xee);
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// y[i·kLanes + l] = f32(x[l][i]) · signs[i] (no multiply without signs), zeros in lanes whose x[l]
// is null; ss[l] = Σ_i y² in f64, in element order (each square exact, so a fused add rounds alike).
template <typename T>
FRUGAL_AVX2_F16C void load_lanes(const T* const* x, int dim, const float* signs, float* y, double* ss) {
  __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
  for (int i = 0; i < dim; i += 8) {
    const __m256 s = signs ? _mm256_loadu_ps(signs + i) : _mm256_set1_ps(1.0f);
    for (int g = 0; g < 2; ++g) {
      __m256 r[8];
      for (int l = 0; l < 8; ++l) {
        const T* v = x[8 * g + l];
        r[l] = v ? load8(v, i) : _mm256_setzero_ps();
        if (signs) r[l] = _mm256_mul_ps(r[l], s);
      }
      transpose8(r);
      for (int j = 0; j < 8; ++j) _mm256_storeu_ps(y + (i + j) * kLanes + 8 * g, r[j]);
    }
    for (int j = 0; j < 8; ++j)
      for (int q = 0; q < 4; ++q) {
        const __m256d v = _mm256_cvtps_pd(_mm_loadu_ps(y + (i + j) * kLanes + 4 * q));
        acc[q] = _mm256_fmadd_pd(v, v, acc[q]);
      }
  }
  for (int q = 0; q < 4; ++q) _mm256_storeu_pd(ss + 4 * q, acc[q]);
}

// Stages h, 2h, ..., 2^(S−1)·h of the batch's FWHT (y[i·kLanes + l]) with the 2^S rows each
// butterfly group touches held in registers: one load and store of y for S stages.
template <int S>
FRUGAL_AVX2_F16C_INLINE void fwht_stages(float* y, int dim, int h) {
  constexpr int kRows = 1 << S;
  for (int blk = 0; blk < dim; blk += kRows * h)
    for (int off = 0; off < h; ++off)
      for (int g = 0; g < kLanes; g += 8) {
        float* p = y + static_cast<int64_t>(blk + off) * kLanes + g;
        __m256 r[kRows];
        for (int k = 0; k < kRows; ++k) r[k] = _mm256_loadu_ps(p + static_cast<int64_t>(k) * h * kLanes);
        for (int st = 1; st < kRows; st <<= 1)
          for (int k = 0; k < kRows; ++k)
            if ((k & st) == 0) {
              const __m256 a = r[k], c = r[k + st];
              r[k] = _mm256_add_ps(a, c);
              r[k + st] = _mm256_sub_ps(a, c);
            }
        for (int k = 0; k < kRows; ++k) _mm256_storeu_ps(p + static_cast<int64_t>(k) * h * kLanes, r[k]);
      }
}

// y ← FWHT(y) for the batch, the reference's stages h = 1, 2, 4, ... three at a time: every element
// goes through the same additions as in the portable stage-by-stage loop, so the bits are the same.
FRUGAL_AVX2_F16C inline void fwht_lanes(float* y, int dim) {
  int h = 1;
  for (; 4 * h < dim; h *= 8) fwht_stages<3>(y, dim, h);
  if (2 * h < dim)
    fwht_stages<2>(y, dim, h);
  else if (h < dim)
    fwht_stages<1>(y, dim, h);
}

// The 8-bit code of each of the eight u: base + (bnd < u) of u's cell (cells: {bnd, base} pairs of 8
// bytes, cell j at index j + half), as the portable codes_by_table. One 8-byte gather a cell (two 4-byte
// gathers load twice the elements, and measured slower), the pairs split by shuffles that leave the
// lanes in the order 0 1 4 5 2 3 6 7 until the final permute.
struct CellLookup {
  const long long* cells;
  __m256 inv_w;
  __m256i lo, hi;  // −half, half
};
FRUGAL_AVX2_F16C_INLINE __m256i code8(__m256 u, const CellLookup& t) {
  const __m256 magic = _mm256_set1_ps(12582912.0f);  // 1.5·2^23: rounds |v| < 2^22 to an integer
  const __m256 r = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(u, t.inv_w), magic), magic);
  const __m256i j = _mm256_sub_epi32(_mm256_min_epi32(_mm256_max_epi32(_mm256_cvttps_epi32(r), t.lo), t.hi), t.lo);
  const __m256 c03 = _mm256_castsi256_ps(_mm256_i32gather_epi64(t.cells, _mm256_castsi256_si128(j), 8));
  const __m256 c47 = _mm256_castsi256_ps(_mm256_i32gather_epi64(t.cells, _mm256_extracti128_si256(j, 1), 8));
  const __m256 bnd = _mm256_shuffle_ps(c03, c47, 0x88);                         // lanes 0 1 4 5 2 3 6 7
  const __m256i base = _mm256_castps_si256(_mm256_shuffle_ps(c03, c47, 0xdd));  // the same order
  const __m256 up = _mm256_castsi256_ps(_mm256_permute4x64_epi64(_mm256_castps_si256(u), 0xd8));
  const __m256i above = _mm256_castps_si256(_mm256_cmp_ps(bnd, up, _CMP_LT_OQ));  // all ones: +1
  return _mm256_permute4x64_epi64(_mm256_sub_epi32(base, above), 0xd8);
}

// The 4-bit code of each of the eight u by the portable codes_by_search15's four comparisons, each
// level's boundary picked by blends (b: the 15 boundaries broadcast).
FRUGAL_AVX2_F16C_INLINE __m256 less(__m256 x, __m256 u) { return _mm256_cmp_ps(x, u, _CMP_LT_OQ); }
FRUGAL_AVX2_F16C_INLINE __m256i code4(__m256 u, const __m256* b) {
  const __m256 m8 = less(b[7], u);
  const __m256 m4 = less(_mm256_blendv_ps(b[3], b[11], m8), u);
  const __m256 m2 = less(_mm256_blendv_ps(_mm256_blendv_ps(b[1], b[5], m4), _mm256_blendv_ps(b[9], b[13], m4), m8), u);
  const __m256 p0 = _mm256_blendv_ps(b[12], b[14], m2), p1 = _mm256_blendv_ps(b[8], b[10], m2);
  const __m256 p2 = _mm256_blendv_ps(b[4], b[6], m2), p3 = _mm256_blendv_ps(b[0], b[2], m2);
  const __m256 m1 = less(_mm256_blendv_ps(_mm256_blendv_ps(p3, p2, m4), _mm256_blendv_ps(p1, p0, m4), m8), u);
  return _mm256_or_si256(_mm256_or_si256(_mm256_and_si256(_mm256_castps_si256(m8), _mm256_set1_epi32(8)),
                                         _mm256_and_si256(_mm256_castps_si256(m4), _mm256_set1_epi32(4))),
                         _mm256_or_si256(_mm256_and_si256(_mm256_castps_si256(m2), _mm256_set1_epi32(2)),
                                         _mm256_and_si256(_mm256_castps_si256(m1), _mm256_set1_epi32(1))));
}

// y ← y·inv and code = the Bits-bit code of u = y·k[l] (+0 where keep[l] is zero), for the batch's
// [dim][kLanes] elements, as the portable scaling loop and code search; y is stored back only where
// `keep_y` (the least-squares scale reads it). Bits = 8: `cells`, inv_w and half of the cell table;
// Bits = 4: the 15 `boundaries`.
template <int Bits>
FRUGAL_AVX2_F16C void scale_and_code(float* y, int dim, float inv, const float* k, const uint32_t* keep, bool keep_y,
                                     const void* cells, float inv_w, int32_t half, const float* boundaries,
                                     int32_t* code) {
  const __m256 vinv = _mm256_set1_ps(inv);
  const __m256 kg[2] = {_mm256_loadu_ps(k), _mm256_loadu_ps(k + 8)};
  const __m256 keepg[2] = {_mm256_loadu_ps(reinterpret_cast<const float*>(keep)),
                           _mm256_loadu_ps(reinterpret_cast<const float*>(keep + 8))};
  const CellLookup t{static_cast<const long long*>(cells), _mm256_set1_ps(inv_w), _mm256_set1_epi32(-half),
                     _mm256_set1_epi32(half)};
  __m256 b[15];
  if constexpr (Bits == 4)
    for (int q = 0; q < 15; ++q) b[q] = _mm256_set1_ps(boundaries[q]);
  const int64_t n = static_cast<int64_t>(dim) * kLanes;
  for (int64_t e = 0; e < n; e += 8) {
    const int g = static_cast<int>(e / 8) & 1;
    const __m256 yi = _mm256_mul_ps(_mm256_loadu_ps(y + e), vinv);
    if (keep_y) _mm256_storeu_ps(y + e, yi);
    const __m256 u = _mm256_and_ps(_mm256_mul_ps(yi, kg[g]), keepg[g]);
    __m256i c;
    if constexpr (Bits == 8)
      c = code8(u, t);
    else
      c = code4(u, b);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(code + e), c);
  }
}

// The 8-bit rows of the first `count` lanes from code[i·kLanes + l]: eight codes of eight lanes a
// register transpose, each lane's eight bytes packed from its register and stored at once.
FRUGAL_AVX2_F16C inline void pack_rows8(const int32_t* code, int dim, int count, uint8_t* const* rows) {
  for (int i = 0; i < dim; i += 8)
    for (int g = 0; g < kLanes && g < count; g += 8) {
      __m256 r[8];
      for (int j = 0; j < 8; ++j) r[j] = _mm256_loadu_ps(reinterpret_cast<const float*>(code + (i + j) * kLanes + g));
      transpose8(r);  // r[l]: lane g + l's codes i .. i + 7
      for (int l = 0; l < 8 && g + l < count; ++l) {
        const __m256i v = _mm256_castps_si256(r[l]);
        const __m256i w = _mm256_packus_epi16(_mm256_packus_epi32(v, v), _mm256_setzero_si256());
        // w's 128-bit halves hold codes 0-3 and 4-7 in their low four bytes
        const __m128i b8 = _mm_unpacklo_epi32(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
        _mm_storel_epi64(reinterpret_cast<__m128i*>(rows[g + l] + i), b8);
      }
    }
}

}  // namespace frugal::cpu::kv_avx2

#endif  // FRUGAL_CPU_AVX2
