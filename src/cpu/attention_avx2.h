// The AVX2 + FMA pass of a work item over its tokens (cpu/attention_rows.h), for 4- and 8-bit codes
// and head dims that are multiples of 16: eight tokens a block, their scores as one vector per query
// head and one online-softmax step per block, each K and V code decoded once for the whole GQA group.
// 4-bit codes decode by two 8-entry vpermps tables and a blend, 8-bit ones by a gather.
#pragma once

#include "cpu/clones.h"

#if FRUGAL_CPU_AVX2

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace frugal::cpu::rows::avx2 {

constexpr int kBlock = 8;  // tokens a block: the lanes of one score vector

// The eight codebook values of dims [8i, 8i + 8) of a packed row; lo, hi: a 4-bit codebook's halves.
template <int Bits>
FRUGAL_AVX2_INLINE __m256 decode8(const uint8_t* row, int i, __m256 lo, __m256 hi, const float* cb) {
  if constexpr (Bits == 4) {
    uint32_t word;
    std::memcpy(&word, row + 4 * i, 4);
    // Lane j gets the word shifted right by 4j: code j in its low bits (vpermps reads bits 0-2, and
    // bit 3, moved to the sign, picks the half).
    const __m256i idx =
        _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(word)), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
    return _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo, idx), _mm256_permutevar8x32_ps(hi, idx),
                            _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
  } else {
    const __m256i idx = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + 8 * i)));
    return _mm256_i32gather_ps(cb, idx, 4);
  }
}

FRUGAL_AVX2_INLINE float hsum(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  return _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)));
}

FRUGAL_AVX2_INLINE float hmax(__m256 v) {
  __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_max_ps(x, _mm_movehl_ps(x, x));
  return _mm_cvtss_f32(_mm_max_ss(x, _mm_movehdup_ps(x)));
}

// The lane sums of eight vectors a[0..7] as one vector (lane u: Σ a[u]).
FRUGAL_AVX2_INLINE __m256 sum8(const float* a) {
  const __m256 h01 = _mm256_hadd_ps(_mm256_loadu_ps(a), _mm256_loadu_ps(a + 8));
  const __m256 h23 = _mm256_hadd_ps(_mm256_loadu_ps(a + 16), _mm256_loadu_ps(a + 24));
  const __m256 h45 = _mm256_hadd_ps(_mm256_loadu_ps(a + 32), _mm256_loadu_ps(a + 40));
  const __m256 h67 = _mm256_hadd_ps(_mm256_loadu_ps(a + 48), _mm256_loadu_ps(a + 56));
  const __m256 lo4 = _mm256_hadd_ps(h01, h23), hi4 = _mm256_hadd_ps(h45, h67);
  return _mm256_add_ps(_mm256_permute2f128_ps(lo4, hi4, 0x20), _mm256_permute2f128_ps(lo4, hi4, 0x31));
}

// 2^x for x ≤ 0, zero below kFlushBelow (as rows::weight): 2^round(x) into the exponent times the
// degree-7 Taylor polynomial of 2^f on |f| ≤ 1/2 (truncation error 5e-9, under f32's 6e-8).
FRUGAL_AVX2_INLINE __m256 weights(__m256 x) {
  const __m256 flushed = _mm256_cmp_ps(x, _mm256_set1_ps(kFlushBelow), _CMP_LT_OQ);
  x = _mm256_max_ps(x, _mm256_set1_ps(kFlushBelow - 1.0f));
  const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(x, n);
  __m256 y = _mm256_set1_ps(1.5252733804059840e-5f);
  y = _mm256_fmadd_ps(y, f, _mm256_set1_ps(1.5403530393381609e-4f));
  y = _mm256_fmadd_ps(y, f, _mm256_set1_ps(1.3333558146428443e-3f));
  y = _mm256_fmadd_ps(y, f, _mm256_set1_ps(9.6181291076284772e-3f));
  y = _mm256_fmadd_ps(y, f, _mm256_set1_ps(5.5504108664821580e-2f));
  y = _mm256_fmadd_ps(y, f, _mm256_set1_ps(2.4022650695910071e-1f));
  y = _mm256_fmadd_ps(y, f, _mm256_set1_ps(6.9314718055994531e-1f));
  y = _mm256_fmadd_ps(y, f, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
  return _mm256_andnot_ps(flushed, _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(y), e)));
}

// One token's dot products with NG query heads (q: their rows, D apart), left as lane vectors in
// dst[j * 64] (the block's lane sums are taken for all its tokens at once); two sums a head, so that
// 2·NG independent FMA chains run.
template <int Bits, int NG>
FRUGAL_AVX2_INLINE void score_lanes(const uint8_t* row, const float* q, int D, __m256 lo, __m256 hi, const float* cb,
                                    float* dst) {
  __m256 a0[NG], a1[NG];
  for (int j = 0; j < NG; ++j) a0[j] = a1[j] = _mm256_setzero_ps();
  for (int i = 0; i < D / 8; i += 2) {
    const __m256 k0 = decode8<Bits>(row, i, lo, hi, cb), k1 = decode8<Bits>(row, i + 1, lo, hi, cb);
    for (int j = 0; j < NG; ++j) {
      a0[j] = _mm256_fmadd_ps(_mm256_loadu_ps(q + j * D + 8 * i), k0, a0[j]);
      a1[j] = _mm256_fmadd_ps(_mm256_loadu_ps(q + j * D + 8 * i + 8), k1, a1[j]);
    }
  }
  for (int j = 0; j < NG; ++j) _mm256_storeu_ps(dst + j * 64, _mm256_add_ps(a0[j], a1[j]));
}

// Dims [16c, 16c + 16) of NG heads' O (o: their rows, D apart): O·alpha + Σ_u w[j·8 + u]·V_u over the
// block's tokens (w: the weights times V's scales).
template <int Bits, int NG>
FRUGAL_AVX2_INLINE void accumulate_v(const uint8_t* const* rows, int c, int D, __m256 lo, __m256 hi, const float* cb,
                                     const float* w, const float* alpha, float* o) {
  __m256 a0[NG], a1[NG];
  for (int j = 0; j < NG; ++j) {
    const __m256 al = _mm256_set1_ps(alpha[j]);
    a0[j] = _mm256_mul_ps(_mm256_loadu_ps(o + j * D + 16 * c), al);
    a1[j] = _mm256_mul_ps(_mm256_loadu_ps(o + j * D + 16 * c + 8), al);
  }
  for (int u = 0; u < kBlock; ++u) {
    const __m256 v0 = decode8<Bits>(rows[u], 2 * c, lo, hi, cb), v1 = decode8<Bits>(rows[u], 2 * c + 1, lo, hi, cb);
    for (int j = 0; j < NG; ++j) {
      const __m256 b = _mm256_broadcast_ss(w + j * 8 + u);
      a0[j] = _mm256_fmadd_ps(b, v0, a0[j]);
      a1[j] = _mm256_fmadd_ps(b, v1, a1[j]);
    }
  }
  for (int j = 0; j < NG; ++j) {
    _mm256_storeu_ps(o + j * D + 16 * c, a0[j]);
    _mm256_storeu_ps(o + j * D + 16 * c + 8, a1[j]);
  }
}

// Floats of scratch the pass needs for a group of G query heads.
inline int64_t scratch_floats(int G) { return static_cast<int64_t>(G) * (64 + 8 + 8 + 1); }

// The tokens [t0, t1) of row r and K/V head hk into the states m, l, O [G][D] (as rows::attend_tokens,
// which `scalar(a, b)` runs on tokens [a, b)): blocks of eight tokens, a block with a non-finite score
// or a NaN state, and the last partial block, through `scalar`.
template <int KBits, int VBits, typename Rows, typename Scalar>
FRUGAL_AVX2 void attend_tokens(const Problem& p, const Rows& rows, int64_t r, int hk, int64_t t0, int64_t t1,
                               const float* __restrict q, float factor, float* __restrict scratch, float* __restrict m,
                               float* __restrict l, float* __restrict o, Scalar&& scalar) {
  const int D = p.dim, G = p.q_heads / p.kv_heads;
  const int64_t krow = static_cast<int64_t>(D) * KBits / 8, vrow = static_cast<int64_t>(D) * VBits / 8;
  const __m256 klo = _mm256_loadu_ps(p.k.centroids), vlo = _mm256_loadu_ps(p.v.centroids);
  const __m256 khi = KBits == 4 ? _mm256_loadu_ps(p.k.centroids + 8) : klo;
  const __m256 vhi = VBits == 4 ? _mm256_loadu_ps(p.v.centroids + 8) : vlo;
  float* lanes = scratch;     // [G][token u][8]: token u's dot-product lanes of head g
  float* s = lanes + G * 64;  // [G][8]: the block's scores
  float* w = s + G * 8;       // [G][8]: weights times V's scales
  float* alpha = w + G * 8;   // [G]
  int64_t t = t0;
  for (; t + kBlock <= t1; t += kBlock) {
    const uint8_t* kp[kBlock];
    const uint8_t* vp[kBlock];
    alignas(32) float ks[kBlock], vs[kBlock];
    for (int u = 0; u < kBlock; ++u) {
      const int64_t vec = rows.vector(r, hk, t + u);
      kp[u] = p.k.packed + vec * krow;
      vp[u] = p.v.packed + vec * vrow;
      ks[u] = p.k.scale(vec) * factor;
      vs[u] = p.v.scale(vec);
    }
    for (int u = 0; u < kBlock; ++u)
      for (int g0 = 0; g0 < G; g0 += 4) switch (std::min(4, G - g0)) {  // the heads in fours
          case 1:
            score_lanes<KBits, 1>(kp[u], q + g0 * D, D, klo, khi, p.k.centroids, lanes + g0 * 64 + u * 8);
            break;
          case 2:
            score_lanes<KBits, 2>(kp[u], q + g0 * D, D, klo, khi, p.k.centroids, lanes + g0 * 64 + u * 8);
            break;
          case 3:
            score_lanes<KBits, 3>(kp[u], q + g0 * D, D, klo, khi, p.k.centroids, lanes + g0 * 64 + u * 8);
            break;
          default:
            score_lanes<KBits, 4>(kp[u], q + g0 * D, D, klo, khi, p.k.centroids, lanes + g0 * 64 + u * 8);
        }
    bool finite = true;
    for (int g = 0; g < G; ++g) {
      const __m256 sg = _mm256_mul_ps(sum8(lanes + g * 64), _mm256_load_ps(ks));
      _mm256_storeu_ps(s + g * 8, sg);
      // x − x is 0 exactly for finite x, NaN for ±∞ and NaN.
      const __m256 ok = _mm256_cmp_ps(_mm256_sub_ps(sg, sg), _mm256_setzero_ps(), _CMP_EQ_OQ);
      finite = finite && _mm256_movemask_ps(ok) == 0xFF && !std::isnan(m[g]);
    }
    if (!finite) {
      scalar(t, t + kBlock);
      continue;
    }
    for (int g = 0; g < G; ++g) {
      const __m256 sg = _mm256_loadu_ps(s + g * 8);
      const float m_new = std::max(m[g], hmax(sg));
      alpha[g] = m_new == m[g] ? 1.0f : weight(m[g] - m_new);
      const __m256 pw = weights(_mm256_sub_ps(sg, _mm256_set1_ps(m_new)));
      l[g] = l[g] * alpha[g] + hsum(pw);
      m[g] = m_new;
      _mm256_storeu_ps(w + g * 8, _mm256_mul_ps(pw, _mm256_load_ps(vs)));
    }
    for (int c = 0; c < D / 16; ++c)
      for (int g0 = 0; g0 < G; g0 += 4) switch (std::min(4, G - g0)) {
          case 1:
            accumulate_v<VBits, 1>(vp, c, D, vlo, vhi, p.v.centroids, w + g0 * 8, alpha + g0, o + g0 * D);
            break;
          case 2:
            accumulate_v<VBits, 2>(vp, c, D, vlo, vhi, p.v.centroids, w + g0 * 8, alpha + g0, o + g0 * D);
            break;
          case 3:
            accumulate_v<VBits, 3>(vp, c, D, vlo, vhi, p.v.centroids, w + g0 * 8, alpha + g0, o + g0 * D);
            break;
          default:
            accumulate_v<VBits, 4>(vp, c, D, vlo, vhi, p.v.centroids, w + g0 * 8, alpha + g0, o + g0 * D);
        }
  }
  if (t < t1) scalar(t, t1);
}

}  // namespace frugal::cpu::rows::avx2

#endif  // FRUGAL_CPU_AVX2
