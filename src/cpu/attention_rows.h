// The CPU's attention over the packed cache, shared by decode attention (a row is a sequence) and
// paged attention (a row is a query token): in the rotated domain, f32 arithmetic, the GPU's
// split-then-combine structure. Each work item is one (row, K/V head, slice of ≤ slice tokens)
// serving all query heads of the group from one pass over its K/V vectors; the slices' partial
// softmax states are combined per output row, which then gets its one inverse transform (and its
// LSE, where asked). OpenMP over the work items, then over the output rows.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/attention_backend.h"
#include "core/types.h"
#include "cpu/clones.h"
#include "cpu/kv_common.h"

namespace frugal::cpu::rows {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
// Weights below 2^-100 of the running maximum are flushed to zero: they cannot move an f32 result
// (2^-24 relative), and as x86 denormals they would slow the loops down a hundredfold.
constexpr float kFlushBelow = -100.0f;

inline float weight(float x) { return x < kFlushBelow ? 0.0f : std::exp2(x); }

// A packed row's codebook values; 4 bits through `pairs`, the values of both codes of each byte.
FRUGAL_INLINE void decode_row(const uint8_t* row, int dim, int bits, const float* cb, const float (*pairs)[2],
                              float* __restrict out) {
  if (bits == 4) {
    for (int j = 0; j < dim / 2; ++j) {
      out[2 * j] = pairs[row[j]][0];
      out[2 * j + 1] = pairs[row[j]][1];
    }
  } else {
    decode_codes(row, dim, bits, cb, out);
  }
}

// Σ a[i]·b[i] over n elements in eight interleaved partial sums (i mod 8), added pairwise at the end:
// the compiler keeps them in one SIMD register, where one running sum is a chain of dependent adds.
FRUGAL_INLINE float dot(const float* __restrict a, const float* __restrict b, int n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  for (; i < n; ++i) acc[i % 8] += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

// The larger of a and b, or NaN where either is: the running maxima carry a NaN score, so that a row
// whose scores are all NaN ends NaN (std::max drops a NaN, and a maximum left at −∞ merges to zeros).
inline float max_nan(float a, float b) { return std::isnan(a) ? a : (std::isnan(b) ? b : std::max(a, b)); }

// What the rows share: the shapes, the caches, the query and output buffers.
struct Problem {
  int dim = 0, q_heads = 1, kv_heads = 1;
  attention::backend::CacheArgs k, v;
  float softmax_scale = 1.0f;
  int64_t slice = 0;        // tokens a work item covers at most; ≤ 0: the whole range
  const void* q = nullptr;  // head h of row r at q + rows.q_offset(r) + h*q_stride_h
  DType q_dtype = DType::f32;
  int64_t q_stride_h = 0;
  void* out = nullptr;  // contiguous [output rows, Hq, D]: row r writes output row rows.out_row(r)
  DType out_dtype = DType::f32;
  float* lse = nullptr;  // [output rows, Hq] natural-log LSE, or nullptr
  const char* op = "";
  bool portable = false;  // the portable pass even where a SIMD one runs (the tests compare the two)
};

// One work item's pass over the tokens [t0, t1) of row r and K/V head hk: the partial softmax states
// m, l and O [G][D] of the group's heads (q: their rotated queries, [G][D]). Compiled per x86-64
// level (cpu/clones.h).
template <typename Rows>
FRUGAL_CPU_CLONES void attend_tokens(const Problem& p, const Rows& rows, int64_t r, int hk, int64_t t0, int64_t t1,
                                     const float* __restrict q, float factor, const float (*kpairs)[2],
                                     const float (*vpairs)[2], float* __restrict kh, float* __restrict vh,
                                     float* __restrict s, float* __restrict m, float* __restrict l,
                                     float* __restrict o) {
  const int D = p.dim, G = p.q_heads / p.kv_heads;
  const int64_t krow = static_cast<int64_t>(D) * p.k.bits / 8, vrow = static_cast<int64_t>(D) * p.v.bits / 8;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t vec = rows.vector(r, hk, t);
    decode_row(p.k.packed + vec * krow, D, p.k.bits, p.k.centroids, kpairs, kh);
    const float ks = p.k.scale(vec) * factor;
    for (int g = 0; g < G; ++g) s[g] = dot(q + g * D, kh, D) * ks;
    decode_row(p.v.packed + vec * vrow, D, p.v.bits, p.v.centroids, vpairs, vh);
    const float vs = p.v.scale(vec);
    for (int g = 0; g < G; ++g) {
      const float m_new = max_nan(m[g], s[g]);
      const float alpha = m_new == m[g] ? 1.0f : weight(m[g] - m_new);
      const float pw = std::isnan(s[g]) ? s[g] : weight(s[g] - m_new);
      m[g] = m_new;
      l[g] = l[g] * alpha + pw;
      float* og = o + static_cast<int64_t>(g) * D;
      const float pv = pw * vs;
      if (alpha != 1.0f)
        for (int i = 0; i < D; ++i) og[i] = og[i] * alpha + pv * vh[i];
      else
        for (int i = 0; i < D; ++i) og[i] += pv * vh[i];
    }
  }
}

}  // namespace frugal::cpu::rows

#include "cpu/attention_avx2.h"  // the SIMD pass, over Problem and weight above

namespace frugal::cpu::rows {

// Whether the AVX2 pass serves problem p (its code widths and head dims) on this CPU.
inline bool runs_avx2(const Problem& p) {
#if FRUGAL_CPU_AVX2
  const auto fits = [](int bits) { return bits == 4 || bits == 8; };
  return !p.portable && cpu_has_avx2() && fits(p.k.bits) && fits(p.v.bits) && p.dim % 16 == 0;
#else
  (void)p;
  return false;
#endif
}

// Rows describes the rows: count(); begin(r), end(r) (the absolute token range row r attends);
// q_offset(r) (in elements); out_row(r); vector(r, hk, t): the index of token t's K/V vector of head hk
// (its packed row and scale).
template <typename Rows>
void attend(const Problem& p, const Rows& rows) {
  const int D = p.dim, Hq = p.q_heads, Hkv = p.kv_heads, G = Hq / Hkv;
  const int64_t n_rows = rows.count();
  const int64_t slice = p.slice;  // ≤ 0: one slice a row

  struct Item {
    int64_t r;
    int hk;
    int64_t t0, t1;  // absolute token positions
  };

  // 1. The rotated queries, unnormalized: FWHT(s_K ⊙ q). The factor 1/D of both transforms and
  //    the softmax scale (in log2 units) are applied to the scores below.
  std::vector<float> qf(static_cast<size_t>(n_rows) * Hq * D);
  dispatch_float(p.q_dtype, p.op, [&]<typename T>() {
#pragma omp parallel for schedule(static) if (n_rows > 64)
    for (int64_t r = 0; r < n_rows; ++r)
      for (int h = 0; h < Hq; ++h) {
        const T* src = static_cast<const T*>(p.q) + rows.q_offset(r) + h * p.q_stride_h;
        float* dst = qf.data() + (static_cast<size_t>(r) * Hq + h) * D;
        for (int i = 0; i < D; ++i) dst[i] = p.k.signs ? to_float(src[i]) * p.k.signs[i] : to_float(src[i]);
        fwht_inplace(dst, D);
      }
  });
  const float factor = p.softmax_scale * kLog2e / static_cast<float>(D);

  // 2. Work items: (row, K/V head, slice).
  std::vector<Item> items;
  std::vector<int64_t> slices(n_rows), first_item(static_cast<size_t>(n_rows) * Hkv);
  for (int64_t r = 0; r < n_rows; ++r) {
    const int64_t begin = rows.begin(r), end = rows.end(r);
    slices[r] = slice > 0 ? std::max<int64_t>(1, (end - begin + slice - 1) / slice) : 1;
    for (int hk = 0; hk < Hkv; ++hk) {
      first_item[static_cast<size_t>(r) * Hkv + hk] = static_cast<int64_t>(items.size());
      if (slice <= 0) {
        items.push_back({r, hk, begin, end});
        continue;
      }
      for (int64_t s = 0; s < slices[r]; ++s)
        items.push_back({r, hk, begin + s * slice, std::min(end, begin + (s + 1) * slice)});
    }
  }
  const int64_t n_items = static_cast<int64_t>(items.size());
  // Partial states per (item, head of the group): running max m (log2 units), sum l, O[D].
  std::vector<float> part_m(static_cast<size_t>(n_items) * G), part_l(part_m.size());
  std::vector<float> part_o(part_m.size() * D);
  // The 4-bit codebooks as pairs: byte b's two values (low code first).
  float kpairs[256][2], vpairs[256][2];
  for (int b = 0; b < 256; ++b) {
    if (p.k.bits == 4) kpairs[b][0] = p.k.centroids[b & 15], kpairs[b][1] = p.k.centroids[b >> 4];
    if (p.v.bits == 4) vpairs[b][0] = p.v.centroids[b & 15], vpairs[b][1] = p.v.centroids[b >> 4];
  }

  const bool simd = runs_avx2(p);

#pragma omp parallel
  {
    std::vector<float> kh(D), vh(D), s(G), m(G), l(G), o(static_cast<size_t>(G) * D);
#if FRUGAL_CPU_AVX2
    std::vector<float> scratch(simd ? avx2::scratch_floats(G) : 0);
#endif
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < n_items; ++it) {
      const Item& w = items[it];
      // The states live in this thread's buffers while the tokens run (the items' slots sit side by
      // side, so updating them in place would share cache lines between threads), then are stored.
      std::fill(m.begin(), m.end(), -std::numeric_limits<float>::infinity());
      std::fill(l.begin(), l.end(), 0.0f);
      std::fill(o.begin(), o.end(), 0.0f);
      const float* q = qf.data() + (static_cast<size_t>(w.r) * Hq + static_cast<size_t>(w.hk) * G) * D;
      const auto scalar = [&](int64_t t0, int64_t t1) {
        attend_tokens(p, rows, w.r, w.hk, t0, t1, q, factor, kpairs, vpairs, kh.data(), vh.data(), s.data(), m.data(),
                      l.data(), o.data());
      };
#if FRUGAL_CPU_AVX2
      if (simd) {
        const auto pass = [&]<int KBits, int VBits>() {
          avx2::attend_tokens<KBits, VBits>(p, rows, w.r, w.hk, w.t0, w.t1, q, factor, scratch.data(), m.data(),
                                            l.data(), o.data(), scalar);
        };
        if (p.k.bits == 4)
          p.v.bits == 4 ? pass.template operator()<4, 4>() : pass.template operator()<4, 8>();
        else
          p.v.bits == 4 ? pass.template operator()<8, 4>() : pass.template operator()<8, 8>();
      } else
#endif
        scalar(w.t0, w.t1);
      std::copy(m.begin(), m.end(), part_m.begin() + it * G);
      std::copy(l.begin(), l.end(), part_l.begin() + it * G);
      std::copy(o.begin(), o.end(), part_o.begin() + it * G * D);
    }
  }

  // 3. Combine the slices of each output row, inverse transform with V's signs, store.
  dispatch_float(p.out_dtype, p.op, [&]<typename T>() {
#pragma omp parallel
    {
      std::vector<float> row(D);
#pragma omp for schedule(static)
      for (int64_t x = 0; x < n_rows * Hq; ++x) {
        const int64_t r = x / Hq;
        const int h = static_cast<int>(x % Hq);
        const int hk = h / G, g = h % G;
        const int64_t first = first_item[static_cast<size_t>(r) * Hkv + hk];
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t s = 0; s < slices[r]; ++s) mx = max_nan(mx, part_m[(first + s) * G + g]);
        std::fill(row.begin(), row.end(), 0.0f);
        float lsum = 0;
        if (mx != -std::numeric_limits<float>::infinity()) {
          for (int64_t s = 0; s < slices[r]; ++s) {
            const int64_t it = first + s;
            const float wgt = weight(part_m[it * G + g] - mx);
            lsum += part_l[it * G + g] * wgt;
            const float* o = part_o.data() + (it * G + g) * D;
            for (int i = 0; i < D; ++i) row[i] += o[i] * wgt;
          }
        }
        const int64_t out_index = rows.out_row(r) * Hq + h;
        T* dst = static_cast<T*>(p.out) + out_index * D;
        if (lsum == 0) {  // no tokens attended: the empty sum (NaN states fall through below)
          for (int i = 0; i < D; ++i) dst[i] = from_float<T>(0.0f);
          if (p.lse) p.lse[out_index] = -std::numeric_limits<float>::infinity();
          continue;
        }
        // log Σ exp(score) = (m + log2 l) · ln 2, with m and the scores in log2 units.
        if (p.lse) p.lse[out_index] = (mx + std::log2(lsum)) * kLn2;
        const float inv = 1.0f / (lsum * static_cast<float>(D));
        for (int i = 0; i < D; ++i) row[i] *= inv;
        fwht_inplace(row.data(), D);
        for (int i = 0; i < D; ++i) dst[i] = from_float<T>(p.v.signs ? row[i] * p.v.signs[i] : row[i]);
      }
    }
  });
}

}  // namespace frugal::cpu::rows
