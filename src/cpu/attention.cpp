// CPU decode attention over the packed KV cache, in the rotated domain, f32 arithmetic.
// Same function and same split-then-combine structure as the GPU path: each work item is one
// (sequence, K/V head, slice of ≤ choice.tokens_per_split tokens) serving all query heads of the group from one
// pass over its K/V rows; the slices' partial softmax states are combined per output row, which
// then gets its one inverse transform. OpenMP over the work items.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/attention_backend.h"
#include "cpu/kv_common.h"
#include "core/types.h"

namespace frugal::cpu {

namespace {

using attention::backend::DecodeArgs;

constexpr float kLog2e = 1.4426950408889634f;
// Weights below 2^-100 of the running maximum are flushed to zero: they cannot move an f32 result
// (2^-24 relative), and as x86 denormals they would slow the loops down a hundredfold.
constexpr float kFlushBelow = -100.0f;

inline float weight(float x) { return x < kFlushBelow ? 0.0f : std::exp2(x); }

// The larger of a and b, or NaN where either is: the running maxima carry a NaN score, so that a row
// whose scores are all NaN ends NaN (std::max drops a NaN, and a maximum left at −∞ merges to zeros).
inline float max_nan(float a, float b) { return std::isnan(a) ? a : (std::isnan(b) ? b : std::max(a, b)); }

struct Item {
  int b, hk;
  int64_t t0, t1;  // absolute token positions
  int64_t slot;    // index of this slice among its (b, hk)
};

}  // namespace

void decode_attention(const DecodeArgs& a) {
  const int D = a.dim, B = a.batch, Hq = a.q_heads, Hkv = a.kv_heads, G = Hq / Hkv;
  const int64_t cap = a.capacity;
  const int64_t slice = a.choice.tokens_per_split;  // kCpuSliceTokens (core/attention_choose.h)

  // 1. The rotated queries, unnormalized: FWHT(s_K ⊙ q). The factor 1/D of both transforms and
  //    the softmax scale (in log2 units) are applied to the scores below.
  std::vector<float> qf(static_cast<size_t>(B) * Hq * D);
  dispatch_float(a.q_dtype, "attention::decode_attention", [&]<typename T>() {
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < Hq; ++h) {
        const T* src = static_cast<const T*>(a.q) + b * a.q_stride_b + h * a.q_stride_h;
        float* dst = qf.data() + (static_cast<size_t>(b) * Hq + h) * D;
        for (int i = 0; i < D; ++i) dst[i] = a.k.signs ? to_float(src[i]) * a.k.signs[i] : to_float(src[i]);
        fwht_inplace(dst, D);
      }
  });
  const float factor = a.softmax_scale * kLog2e / static_cast<float>(D);

  // 2. Work items: (sequence, K/V head, slice).
  std::vector<Item> items;
  std::vector<int64_t> slices(B), first_item(static_cast<size_t>(B) * Hkv);
  for (int b = 0; b < B; ++b) {
    const int64_t len = a.end[b] - a.begin[b];
    slices[b] = std::max<int64_t>(1, (len + slice - 1) / slice);
    for (int hk = 0; hk < Hkv; ++hk) {
      first_item[static_cast<size_t>(b) * Hkv + hk] = static_cast<int64_t>(items.size());
      for (int64_t s = 0; s < slices[b]; ++s)
        items.push_back({b, hk, a.begin[b] + s * slice, std::min(a.end[b], a.begin[b] + (s + 1) * slice), s});
    }
  }
  const int64_t n_items = static_cast<int64_t>(items.size());
  // Partial states per (item, head of the group): running max m (log2 units), sum l, O[D].
  std::vector<float> part_m(static_cast<size_t>(n_items) * G), part_l(part_m.size());
  std::vector<float> part_o(part_m.size() * D);
  const int64_t krow = static_cast<int64_t>(D) * a.k.bits / 8, vrow = static_cast<int64_t>(D) * a.v.bits / 8;

#pragma omp parallel
  {
    std::vector<float> kh(D), vh(D), s(G);
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < n_items; ++it) {
      const Item& w = items[it];
      float* m = part_m.data() + it * G;
      float* l = part_l.data() + it * G;
      float* o = part_o.data() + it * G * D;
      std::fill(m, m + G, -std::numeric_limits<float>::infinity());
      std::fill(l, l + G, 0.0f);
      std::fill(o, o + static_cast<int64_t>(G) * D, 0.0f);
      const float* q = qf.data() + (static_cast<size_t>(w.b) * Hq + static_cast<size_t>(w.hk) * G) * D;
      const int64_t head = static_cast<int64_t>(w.b) * Hkv + w.hk;
      for (int64_t t = w.t0; t < w.t1; ++t) {
        const int64_t slot = a.sliding ? t % cap : t;
        const int64_t vec = head * cap + slot;
        decode_codes(a.k.packed + vec * krow, D, a.k.bits, a.k.centroids, kh.data());
        const float ks = a.k.scales[vec] * factor;
        for (int g = 0; g < G; ++g) {
          float dot = 0;
          for (int i = 0; i < D; ++i) dot += q[g * D + i] * kh[i];
          s[g] = dot * ks;
        }
        decode_codes(a.v.packed + vec * vrow, D, a.v.bits, a.v.centroids, vh.data());
        const float vs = a.v.scales[vec];
        for (int g = 0; g < G; ++g) {
          const float m_new = max_nan(m[g], s[g]);
          const float alpha = m_new == m[g] ? 1.0f : weight(m[g] - m_new);
          const float p = std::isnan(s[g]) ? s[g] : weight(s[g] - m_new);
          m[g] = m_new;
          l[g] = l[g] * alpha + p;
          float* og = o + static_cast<int64_t>(g) * D;
          const float pv = p * vs;
          if (alpha != 1.0f)
            for (int i = 0; i < D; ++i) og[i] = og[i] * alpha + pv * vh[i];
          else
            for (int i = 0; i < D; ++i) og[i] += pv * vh[i];
        }
      }
    }
  }

  // 3. Combine the slices of each output row, inverse transform with V's signs, store.
  dispatch_float(a.out_dtype, "attention::decode_attention", [&]<typename T>() {
#pragma omp parallel
    {
      std::vector<float> row(D);
#pragma omp for schedule(static)
      for (int64_t r = 0; r < static_cast<int64_t>(B) * Hq; ++r) {
        const int b = static_cast<int>(r / Hq), h = static_cast<int>(r % Hq);
        const int hk = h / G, g = h % G;
        const int64_t first = first_item[static_cast<size_t>(b) * Hkv + hk];
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t s = 0; s < slices[b]; ++s) mx = max_nan(mx, part_m[(first + s) * G + g]);
        std::fill(row.begin(), row.end(), 0.0f);
        float lsum = 0;
        if (mx != -std::numeric_limits<float>::infinity()) {
          for (int64_t s = 0; s < slices[b]; ++s) {
            const int64_t it = first + s;
            const float wgt = weight(part_m[it * G + g] - mx);
            lsum += part_l[it * G + g] * wgt;
            const float* o = part_o.data() + (it * G + g) * D;
            for (int i = 0; i < D; ++i) row[i] += o[i] * wgt;
          }
        }
        T* dst = static_cast<T*>(a.out) + r * D;
        if (!(lsum > 0)) {  // no tokens attended: the empty sum (NaN states fall through below)
          if (lsum == 0) {
            for (int i = 0; i < D; ++i) dst[i] = from_float<T>(0.0f);
            continue;
          }
        }
        const float inv = 1.0f / (lsum * static_cast<float>(D));
        for (int i = 0; i < D; ++i) row[i] *= inv;
        fwht_inplace(row.data(), D);
        for (int i = 0; i < D; ++i) dst[i] = from_float<T>(a.v.signs ? row[i] * a.v.signs[i] : row[i]);
      }
    }
  });
}

}  // namespace frugal::cpu
