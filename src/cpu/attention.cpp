// CPU decode attention over the packed KV cache, in the rotated domain, f32 arithmetic: one row a
// sequence, attending its token range [begin, end) in slices of choice.tokens_per_split tokens
// (cpu/attention_rows.h holds the loop decode and paged attention share).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/attention_backend.h"
#include "core/kv_backend.h"
#include "core/types.h"
#include "cpu/attention_rows.h"

namespace frugal::cpu {

namespace {

using attention::backend::DecodeArgs;

// Sequence b's tokens: slot t (mod capacity for a ring) of its K/V head's rows.
struct DecodeRows {
  const DecodeArgs& a;
  int64_t count() const { return a.batch; }
  int64_t begin(int64_t b) const { return a.begin[b]; }
  int64_t end(int64_t b) const { return a.end[b]; }
  int64_t q_offset(int64_t b) const { return b * a.q_stride_b; }
  int64_t out_row(int64_t b) const { return b; }
  int64_t vector(int64_t b, int hk, int64_t t) const {
    const int64_t slot = a.sliding ? t % a.capacity : t;
    return (b * a.kv_heads + hk) * a.capacity + slot;
  }
};

// Attends each row's exact-row tokens (the sinks, then the window) in f32 and merges that softmax
// state with the codes' (out_codes, lse_codes: [B, Hq, D], [B, Hq]) into a.out. OpenMP over (sequence,
// K/V head): its exact rows are converted from f16 once for the group's query heads; each head's sum
// runs in token order, whatever the thread count.
template <typename TQ, typename TO>
void merge_exact(const DecodeArgs& a, const float* out_codes, const float* lse_codes) {
  const attention::backend::ExactArgs& e = *a.exact;
  const int D = a.dim, rows = e.sinks + e.window, group = a.q_heads / a.kv_heads;
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const int64_t pairs = static_cast<int64_t>(a.batch) * a.kv_heads;
#pragma omp parallel if (pairs > 1)
  {
    std::vector<float> q(D), acc(D), kf(static_cast<size_t>(rows) * D), vf(static_cast<size_t>(rows) * D);
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < pairs; ++bh) {
      const int64_t b = bh / a.kv_heads;
      const int hk = static_cast<int>(bh % a.kv_heads);
      const size_t base = static_cast<size_t>(bh) * rows * D;
      for (size_t i = 0; i < kf.size(); ++i) kf[i] = half_to_float(e.k[base + i]);
      for (size_t i = 0; i < vf.size(); ++i) vf[i] = half_to_float(e.v[base + i]);
      for (int g = 0; g < group; ++g) {
        const int h = hk * group + g;
        const TQ* qs = static_cast<const TQ*>(a.q) + b * a.q_stride_b + h * a.q_stride_h;
        for (int i = 0; i < D; ++i) q[i] = to_float(qs[i]);
        float m = -kInf, l = 0;
        std::fill(acc.begin(), acc.end(), 0.0f);
        auto visit = [&](int64_t t) {
          const int64_t r = kv::backend::exact_row(t, e.sinks, e.window);
          const float* kr = kf.data() + r * D;
          const float* vr = vf.data() + r * D;
          float dot = 0;
          for (int i = 0; i < D; ++i) dot += q[i] * kr[i];
          const float s = dot * a.softmax_scale;
          const float m_new = rows::max_nan(m, s);
          const float corr = m == -kInf ? 0.0f : std::exp(m - m_new);
          const float w = std::exp(s - m_new);
          l = l * corr + w;
          for (int i = 0; i < D; ++i) acc[i] = acc[i] * corr + w * vr[i];
          m = m_new;
        };
        for (int64_t t = 0; t < e.sink_end[b]; ++t) visit(t);
        for (int64_t t = e.win_begin[b]; t < e.win_end[b]; ++t) visit(t);
        const int64_t row = b * a.q_heads + h;
        const float lq = lse_codes[row];
        const float le = l > 0 ? m + std::log(l) : (std::isnan(m) ? m : -kInf);
        const float M = rows::max_nan(lq, le);
        TO* out = static_cast<TO*>(a.out) + row * D;
        const float* oq = out_codes + row * D;
        if (M == -kInf) {
          for (int i = 0; i < D; ++i) out[i] = from_float<TO>(0.0f);
          continue;
        }
        const float wq = lq == -kInf ? 0.0f : std::exp(lq - M);
        const float we = le == -kInf ? 0.0f : std::exp(m - M);  // acc's weight: e^(m − M), the window's total l·e^(m − M)
        const float inv = 1.0f / (wq + l * we);
        for (int i = 0; i < D; ++i) out[i] = from_float<TO>((wq * oq[i] + we * acc[i]) * inv);
      }
    }
  }
}

}  // namespace

void decode_attention(const DecodeArgs& a) {
  rows::Problem p;
  p.dim = a.dim;
  p.q_heads = a.q_heads;
  p.kv_heads = a.kv_heads;
  p.k = a.k;
  p.v = a.v;
  p.softmax_scale = a.softmax_scale;
  p.slice = a.choice.tokens_per_split;  // kCpuSliceTokens (core/attention_choose.h)
  p.q = a.q;
  p.q_dtype = a.q_dtype;
  p.q_stride_h = a.q_stride_h;
  p.out = a.out;
  p.out_dtype = a.out_dtype;
  p.op = "attention::decode_attention";
  if (!a.exact) {
    rows::attend(p, DecodeRows{a});
    return;
  }
  // The codes' tokens into f32 scratch, then the exact rows' tokens merged into a.out.
  const size_t rows_out = static_cast<size_t>(a.batch) * a.q_heads;
  std::vector<float> out_codes(rows_out * a.dim), lse_codes(rows_out);
  p.out = out_codes.data();
  p.out_dtype = DType::f32;
  p.lse = lse_codes.data();
  rows::attend(p, DecodeRows{a});
  dispatch_float(a.q_dtype, p.op, [&]<typename TQ>() {
    dispatch_float(a.out_dtype, p.op, [&]<typename TO>() { merge_exact<TQ, TO>(a, out_codes.data(), lse_codes.data()); });
  });
}

}  // namespace frugal::cpu
