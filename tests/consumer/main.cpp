// A downstream program: through the umbrella header alone, quantizes a few vectors on the CPU,
// checks the round trip, runs decode attention over the cache and reads a conv kernel offset.
#include <cmath>
#include <cstdio>
#include <random>

#include "frugal/frugal.h"

int main() {
  frugal::kv::Cache cache({.batch = 1, .num_kv_heads = 2, .head_dim = 64, .capacity = 16});
  frugal::Tensor x = frugal::Tensor::empty({3, 2, 64}, frugal::DType::f32);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (int i = 0; i < 3 * 2 * 64; ++i) x.data_as<float>()[i] = normal(rng);
  cache.append(x);
  frugal::Tensor y = cache.dequantize(0, 0, 3);
  double num = 0, den = 0;
  for (int i = 0; i < 3 * 2 * 64; ++i) {
    const double d = y.data_as<float>()[i] - x.data_as<float>()[i];
    num += d * d;
    den += x.data_as<float>()[i] * x.data_as<float>()[i];
  }
  const double rel = std::sqrt(num / den);

  // One query per head over the three cached tokens (the cache serves as both K and V).
  frugal::Tensor q = frugal::Tensor::empty({1, 2, 64}, frugal::DType::f32);
  for (int i = 0; i < 2 * 64; ++i) q.data_as<float>()[i] = normal(rng);
  frugal::Tensor out = frugal::attention::decode_attention(q, cache, cache);
  bool finite = true;
  for (int i = 0; i < 2 * 64; ++i) finite = finite && std::isfinite(out.data_as<float>()[i]);

  // The 3×3×3 conv's first offset is the corner (-1, -1, -1).
  static_assert(frugal::spconv::kernel_volume(3) == 27);
  const auto corner = frugal::spconv::kernel_offset(0, 3);
  const bool offsets_ok = corner[0] == -1 && corner[1] == -1 && corner[2] == -1;

  std::printf("consumer: frugal (CUDA %s) 4-bit round trip relative error %.4f, attention %s, offsets %s\n",
              frugal::built_with_cuda() ? "on" : "off", rel, finite ? "finite" : "NOT finite",
              offsets_ok ? "ok" : "WRONG");
  // 4-bit Lloyd–Max on rotated Gaussian vectors: relative MSE ≈ 0.0095, so an error near 0.1.
  return rel < 0.15 && finite && offsets_ok ? 0 : 1;
}
