// f16 scales (kv::ScaleFormat::f16): the codes are the f32 format's byte for byte, each scale is the
// f16 rounding of the f32 one (NaN past f16's range), dequantize is the f32 format's reconstruction
// with that scale, the GPU stores and reads the same bits as the CPU, and wrap checks the dtype.
// Attention over f16 scales is in the parity harness (tests/parity/attention.cpp).
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "frugal/half.h"
#include "frugal/kv_cache.h"
#include "testing.h"

namespace frugal::kv {
namespace {

using testing::expect_error;
using testing::test_seed;

bool same_bytes(const Tensor& a, const Tensor& b) {
  const Tensor ha = a.to(Device::cpu()), hb = b.to(Device::cpu());
  return ha.nbytes() == hb.nbytes() && std::memcmp(ha.data(), hb.data(), ha.nbytes()) == 0;
}

// The f16 bits the format promises for an f32 scale: round to nearest even, NaN where that overflows.
uint16_t promised(float s) {
  if (std::isnan(s)) return 0x7e00;
  const double a = std::fabs(static_cast<double>(s));
  if (a >= 65520.0) return 0x7e00;
  return float_to_half(s);
}

struct Pair {
  Cache f32, f16;
};

// The same tokens (random, in pieces, a ring wrapping) into an f32-scale and an f16-scale cache.
Pair fill_pair(CacheConfig c, Device device, int64_t tokens, std::mt19937_64& rng, float gain = 1.0f) {
  c.scale_format = ScaleFormat::f32;
  Cache a(c, device);
  c.scale_format = ScaleFormat::f16;
  Cache b(c, device);
  for (int64_t done = 0; done < tokens;) {
    const int64_t t = std::min<int64_t>(c.capacity / 2 + 3, tokens - done);
    const Tensor x = testing::host_tensor(testing::randn(static_cast<size_t>(t * c.num_kv_heads * c.head_dim), rng, gain),
                                          {t, c.num_kv_heads, c.head_dim})
                         .to(device);
    a.append(x.view());
    b.append(x.view());
    done += t;
  }
  return {std::move(a), std::move(b)};
}

void check_codes_and_scales(Device device) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  for (int bits : {2, 3, 4, 8}) {
    for (ScaleRule rule : {ScaleRule::l2_norm, ScaleRule::least_squares}) {
      CacheConfig c{.num_kv_heads = 3, .head_dim = 64, .capacity = 40, .sliding = true, .bits = bits, .scale_rule = rule};
      if (bits == 3) c.sign_seed = 7;
      SCOPED_TRACE(std::to_string(bits) + " bits, " + (rule == ScaleRule::least_squares ? "least squares" : "l2"));
      const Pair p = fill_pair(c, device, 57, rng, 300.0f);  // norms of ~2400: scales well inside f16
      EXPECT_TRUE(same_bytes(p.f32.packed(), p.f16.packed())) << "the codes are the f32 format's";
      ASSERT_EQ(p.f16.scales().dtype(), DType::f16);
      const Tensor s32 = p.f32.scales().to(Device::cpu()), s16 = p.f16.scales().to(Device::cpu());
      for (int64_t i = 0; i < s32.numel(); ++i)
        ASSERT_EQ(s16.data_as<uint16_t>()[i], promised(s32.data_as<float>()[i])) << "vector " << i;
      // Dequantize is linear in the scale: the f16 format's output is the f32 one's times h/s.
      const Cache h32 = p.f32.to(Device::cpu()), h16 = p.f16.to(Device::cpu());
      const int64_t lo = h32.first_held(), hi = h32.write_pos();
      const Tensor d32 = h32.dequantize(0, lo, hi), d16 = h16.dequantize(0, lo, hi);
      double worst = 0;
      for (int64_t t = lo; t < hi; ++t)
        for (int h = 0; h < c.num_kv_heads; ++h) {
          const int64_t vec = h * c.capacity + h32.slot(t);
          const double ratio = half_to_float(s16.data_as<uint16_t>()[vec]) / double(s32.data_as<float>()[vec]);
          double err = 0, size = 0;  // relative to the vector's largest element (the FWHT cancels)
          for (int i = 0; i < c.head_dim; ++i) {
            const int64_t e = ((t - lo) * c.num_kv_heads + h) * c.head_dim + i;
            const double want = d32.data_as<float>()[e] * ratio, got = d16.data_as<float>()[e];
            err = std::max(err, std::fabs(got - want));
            size = std::max(size, std::fabs(want));
          }
          worst = std::max(worst, err / size);
        }
      EXPECT_LE(worst, 1e-6);
    }
  }
}

TEST(F16ScalesCpu, CodesAreTheF32FormatsAndScalesTheirF16Rounding) { check_codes_and_scales(Device::cpu()); }

TEST(F16ScalesCuda, CodesAreTheF32FormatsAndScalesTheirF16Rounding) {
  FRUGAL_SKIP_WITHOUT_GPU();
  check_codes_and_scales(Device::cuda());
}

// A scale past f16's range is stored as NaN: the vector dequantizes to NaN and is counted, where the
// f32 format keeps it; one just inside the range stays finite.
void check_overflow(Device device) {
  CacheConfig c{.num_kv_heads = 1, .head_dim = 64, .capacity = 4, .bits = 4, .scale_format = ScaleFormat::f16};
  std::vector<float> v(3 * 64, 0.5f);
  v[0] = 70000.0f;   // norm ≈ 70000: past f16
  v[64] = 65000.0f;  // norm ≈ 65000: rounds to 65024
  const Tensor x = testing::host_tensor(v, {3, 1, 64}).to(device);
  Cache h(c, device);
  h.append(x.view());
  c.scale_format = ScaleFormat::f32;
  Cache f(c, device);
  f.append(x.view());
  EXPECT_EQ(count_nonfinite_scales(h), 1);
  EXPECT_EQ(count_nonfinite_scales(f), 0);
  const Tensor d = h.dequantize(0, 0, 3).to(Device::cpu());
  EXPECT_TRUE(std::isnan(d.data_as<float>()[0]));
  EXPECT_TRUE(std::isfinite(d.data_as<float>()[64]));
  EXPECT_TRUE(std::isfinite(d.data_as<float>()[128]));
  EXPECT_TRUE(same_bytes(h.packed(), f.packed()));
}

TEST(F16ScalesCpu, AScalePastF16sRangeIsNaN) { check_overflow(Device::cpu()); }

TEST(F16ScalesCuda, AScalePastF16sRangeIsNaN) {
  FRUGAL_SKIP_WITHOUT_GPU();
  check_overflow(Device::cuda());
}

// The GPU's f16 scales are the CPU's bits, and its dequantize of a CPU-written cache is the CPU's.
TEST(F16ScalesCuda, TheGpuStoresAndReadsTheCpusBits) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  for (int dim : {32, 128}) {
    CacheConfig c{.batch = 2, .num_kv_heads = 4, .head_dim = dim, .capacity = 64, .bits = 4,
                  .scale_format = ScaleFormat::f16};
    Cache cpu(c), gpu(c, Device::cuda());
    const Tensor x = testing::host_tensor(testing::randn(static_cast<size_t>(2 * 50 * 4 * dim), rng), {2, 50, 4, dim});
    cpu.append(x.view());
    gpu.append(x.to(Device::cuda()).view());
    EXPECT_TRUE(same_bytes(cpu.scales(), gpu.scales())) << "D " << dim;
    EXPECT_TRUE(same_bytes(cpu.packed(), gpu.packed())) << "D " << dim;
    const Cache from_cpu = cpu.to(Device::cuda());
    EXPECT_TRUE(same_bytes(from_cpu.dequantize(1, 0, 50), cpu.dequantize(1, 0, 50)));
  }
}

TEST(F16ScalesErrors, WrapChecksTheScalesDtype) {
  CacheConfig c{.num_kv_heads = 2, .head_dim = 64, .capacity = 8, .bits = 4, .scale_format = ScaleFormat::f16};
  Cache ref(c);
  CacheConfig f32 = c;
  f32.scale_format = ScaleFormat::f32;
  const Cache other(f32);
  const CacheStorage storage{ref.packed(), other.scales(), {}, ref.centroids(), ref.boundaries(), {}};
  const std::vector<int64_t> pos{0};
  expect_error([&] { Cache::wrap(c, storage, pos); }, ErrorCode::invalid_argument, {"kv::Cache::wrap", "scales"});
  const CacheStorage good{ref.packed(), ref.scales(), {}, ref.centroids(), ref.boundaries(), {}};
  EXPECT_EQ(Cache::wrap(c, good, pos).scales().dtype(), DType::f16);
  c.scale_format = static_cast<ScaleFormat>(7);
  expect_error([&] { Cache c2(c); }, ErrorCode::invalid_argument, {"kv::Cache", "scale format"});
}

}  // namespace
}  // namespace frugal::kv
