// The CPU KV append's SIMD steps (cpu/kv_avx2.h) against its portable loops: packed codes and scales
// bit for bit, for every input dtype, code width, scale rule, with and without signs, on Gaussian
// vectors, on random 16-bit patterns (subnormal, inf and NaN halves), on whole vectors that are zero,
// subnormal, non-finite, tiny or huge, and on calls whose vector counts fill a batch's sixteen lanes
// partly (three, and six batches and twelve).
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/kv_backend.h"
#include "core/types.h"
#include "cpu/clones.h"
#include "frugal/half.h"
#include "frugal/kv_cache.h"
#include "testing.h"

namespace frugal::cpu {
namespace {

enum class Input { gaussian, random_bits, edge_vectors };

constexpr int kHeads = 3;
constexpr int64_t kTokens = 37;  // appended as 1 + 36 tokens: 3 vectors, then 108

// kTokens × kHeads × dim inputs of `dtype` as raw elements (4 bytes for f32, 2 for f16/bf16).
std::vector<uint8_t> make_input(DType dtype, int dim, Input kind, std::mt19937_64& rng) {
  const int64_t n = kTokens * kHeads * dim;
  const size_t esize = dtype == DType::f32 ? 4 : 2;
  std::vector<uint8_t> bytes(n * esize);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto put = [&](int64_t e, float f, uint16_t half_bits) {
    if (dtype == DType::f32) {
      std::memcpy(&bytes[e * 4], &f, 4);
    } else {
      const uint16_t h = half_bits;
      std::memcpy(&bytes[e * 2], &h, 2);
    }
  };
  auto half_of = [&](float f) { return dtype == DType::f16 ? float_to_half(f) : float_to_bf16(f); };
  for (int64_t e = 0; e < n; ++e) {
    const float f = normal(rng);
    put(e, f, half_of(f));
    if (kind == Input::random_bits && rng() % 3 == 0) {
      const auto r = static_cast<uint32_t>(rng());
      put(e, std::bit_cast<float>(r), static_cast<uint16_t>(r));
    }
  }
  if (kind == Input::edge_vectors) {
    for (int64_t v = 0; v < kTokens * kHeads; ++v)
      for (int i = 0; i < dim; ++i) {
        const int64_t e = v * dim + i;
        switch (v % 7) {
          case 0:
            put(e, 0.0f, 0);
            break;  // zero
          case 1:
            put(e, 1e-40f, static_cast<uint16_t>(rng() % 0x400));
            break;  // subnormal
          case 2:
            if (i == 3) put(e, INFINITY, dtype == DType::f16 ? 0x7c00 : 0x7f80);
            break;
          case 3:
            if (i == 1) put(e, NAN, dtype == DType::f16 ? 0x7e01 : 0x7fc1);
            break;
          case 4:
            put(e, 1e-30f, dtype == DType::f16 ? 0x0400 : 0x0d00);
            break;  // tiny
          case 5:
            put(e, (i & 1 ? -3e38f : 3e38f), dtype == DType::f16 ? 0x7bff : 0x7f7f);
            break;  // huge
          default:
            break;
        }
      }
  }
  return bytes;
}

struct Output {
  std::vector<uint8_t> packed;
  std::vector<float> scales;
};

Output append(const std::vector<uint8_t>& x, DType dtype, int dim, int bits, kv::ScaleRule rule,
              const std::vector<float>* signs, bool portable) {
  const kv::Codebook& cb = kv::lloyd_max_codebook(bits);
  Output out;
  out.packed.assign(static_cast<size_t>(kHeads) * kTokens * dim * bits / 8, 0xa5);
  out.scales.assign(static_cast<size_t>(kHeads) * kTokens, -1.0f);
  const int64_t start = 0;
  kv::backend::AppendArgs a;
  a.x = x.data();
  a.x_dtype = dtype;
  a.x_stride_tok = static_cast<int64_t>(kHeads) * dim;
  a.x_stride_head = dim;
  a.tokens = kTokens;
  a.heads = kHeads;
  a.dim = dim;
  a.bits = bits;
  a.capacity = kTokens;
  a.host_starts = a.starts = &start;
  a.packed = out.packed.data();
  a.scales = out.scales.data();
  a.signs = signs ? signs->data() : nullptr;
  a.centroids = cb.centroids.data();
  a.boundaries = cb.boundaries.data();
  a.rule = rule;
  a.portable = portable;
  // Token 0 alone (a batch of kHeads lanes), then the rest (a partial last batch of twelve).
  a.tokens = 1;
  kv_append(a);
  const int64_t rest = 1;
  a.host_starts = a.starts = &rest;
  a.x = x.data() + (dtype == DType::f32 ? 4 : 2) * a.x_stride_tok;
  a.tokens = kTokens - 1;
  kv_append(a);
  return out;
}

TEST(CpuKvAppendPass, SimdStepsMatchThePortableLoopsBitForBit) {
#if FRUGAL_CPU_AVX2
  if (!cpu_has_avx2_f16c()) GTEST_SKIP() << "the CPU runs no AVX2 + F16C";
#else
  GTEST_SKIP() << "no SIMD steps on this target";
#endif
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(testing::test_seed());
  for (DType dtype : {DType::f32, DType::f16, DType::bf16})
    for (int dim : {8, 16, 64, 128, 256})
      for (int bits : {2, 3, 4, 8})
        for (Input kind : {Input::gaussian, Input::random_bits, Input::edge_vectors}) {
          if (dim * bits % 8 != 0) continue;
          const std::vector<uint8_t> x = make_input(dtype, dim, kind, rng);
          std::vector<float> signs(dim);
          for (float& s : signs) s = rng() & 1 ? 1.0f : -1.0f;
          for (kv::ScaleRule rule : {kv::ScaleRule::l2_norm, kv::ScaleRule::least_squares})
            for (const std::vector<float>* sg : std::initializer_list<const std::vector<float>*>{nullptr, &signs}) {
              SCOPED_TRACE("dtype " + std::to_string(static_cast<int>(dtype)) + " D " + std::to_string(dim) + " bits " +
                           std::to_string(bits) + " input " + std::to_string(static_cast<int>(kind)) + " rule " +
                           std::to_string(static_cast<int>(rule)) + (sg ? " signs" : ""));
              const Output simd = append(x, dtype, dim, bits, rule, sg, false);
              const Output portable = append(x, dtype, dim, bits, rule, sg, true);
              ASSERT_EQ(simd.packed, portable.packed);
              ASSERT_EQ(0, std::memcmp(simd.scales.data(), portable.scales.data(), sizeof(float) * simd.scales.size()));
            }
        }
}

}  // namespace
}  // namespace frugal::cpu
