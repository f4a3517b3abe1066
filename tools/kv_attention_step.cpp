// See kv_attention_step.h.
#include "kv_attention_step.h"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <vector>

#include "frugal/attention.h"
#include "frugal/runtime.h"

namespace frugal::tools {

AttentionStepReport kv_attention_step(const kv::Cache& k, const kv::Cache& v, const TensorView& k_orig,
                                      const TensorView& v_orig, int q_heads, uint64_t seed) {
  constexpr const char* op = "kv_attention_step";
  const kv::CacheConfig& c = k.config();
  const int B = c.batch, Hkv = c.num_kv_heads, D = c.head_dim;
  const int Hq = q_heads > 0 ? q_heads : 4 * Hkv;
  for (const TensorView* t : {&k_orig, &v_orig}) {
    FRUGAL_CHECK(t->dtype == DType::f32 && t->device.is_cpu() && t->is_contiguous(), invalid_argument, op,
                 "the original K/V must be contiguous f32 on the host, got " << t->describe());
    FRUGAL_CHECK((t->rank == 4 && t->size(0) == B) || (t->rank == 3 && B == 1), invalid_argument, op,
                 "the original K/V must be [B, T, H, D] or [T, H, D] (batch 1), got " << t->describe());
    FRUGAL_CHECK(t->size(-2) == Hkv && t->size(-1) == D, invalid_argument, op,
                 "the original K/V must have " << Hkv << " heads of " << D << ", got " << t->describe());
  }
  const int64_t T = k_orig.size(-3);
  for (int b = 0; b < B; ++b)
    FRUGAL_CHECK(k.write_pos(b) == T && v_orig.size(-3) == T, invalid_argument, op,
                 "sequence " << b << " holds " << k.write_pos(b) << " tokens but the originals hold " << T);

  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd;
  Tensor q_host = Tensor::empty({B, Hq, D}, DType::f32);
  for (int64_t i = 0; i < q_host.numel(); ++i) q_host.data_as<float>()[i] = nd(rng);
  const Device dev = k.device();
  Tensor q = dev.is_cpu() ? q_host : q_host.to(dev);
  Tensor out = Tensor::empty({B, Hq, D}, DType::f32, dev);

  AttentionStepReport r;
  attention::decode_attention(q, k, v, out);  // warm-up (and the result)
  synchronize(dev);
  std::vector<double> times;
  for (int i = 0; i < 10; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    attention::decode_attention(q, k, v, out);
    synchronize(dev);
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  r.ms = times[times.size() / 2];
  Tensor got = dev.is_cpu() ? out : out.to(Device::cpu());

  // fp32 attention over the original tokens each sequence still holds.
  const auto t0 = std::chrono::steady_clock::now();
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int G = Hq / Hkv;
  std::vector<float> ref(static_cast<size_t>(B) * Hq * D);
  for (int b = 0; b < B; ++b) {
    const int64_t lo = k.first_held(b), hi = k.write_pos(b);
    const float* kb = k_orig.data_as<const float>() + static_cast<int64_t>(b) * T * Hkv * D;
    const float* vb = v_orig.data_as<const float>() + static_cast<int64_t>(b) * T * Hkv * D;
    for (int h = 0; h < Hq; ++h) {
      const float* qh = q_host.data_as<const float>() + (static_cast<int64_t>(b) * Hq + h) * D;
      const int hk = h / G;
      std::vector<float> s(hi - lo);
      float mx = -INFINITY;
      for (int64_t t = lo; t < hi; ++t) {
        float dot = 0;
        for (int i = 0; i < D; ++i) dot += qh[i] * kb[(t * Hkv + hk) * D + i];
        s[t - lo] = dot * scale;
        mx = std::max(mx, s[t - lo]);
      }
      float den = 0;
      for (float& x : s) den += (x = std::exp(x - mx));
      float* o = ref.data() + (static_cast<int64_t>(b) * Hq + h) * D;
      for (int64_t t = lo; t < hi; ++t)
        for (int i = 0; i < D; ++i) o[i] += s[t - lo] / den * vb[(t * Hkv + hk) * D + i];
    }
  }
  r.ref_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  double num = 0, den = 0, dot = 0, gg = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double a = got.data_as<const float>()[i], e = ref[i];
    num += (a - e) * (a - e);
    den += e * e;
    dot += a * e;
    gg += a * a;
  }
  r.rel_error = std::sqrt(num / std::max(den, 1e-300));
  r.cosine = dot / std::sqrt(std::max(gg * den, 1e-300));
  fmt::print(
      "decode attention ({} query heads, K{}/V{} bits, {} tokens a sequence, {}): output vs fp32 attention over "
      "the unquantized K/V: rel error {:.4f}, cosine {:.6f}; {:.3f} ms a step (fp32 reference on the host "
      "{:.1f} ms)\n",
      Hq, c.bits, v.config().bits, k.write_pos(0) - k.first_held(0), to_string(dev), r.rel_error, r.cosine, r.ms,
      r.ref_ms);
  return r;
}

}  // namespace frugal::tools
