// Core types: dtypes, devices, half conversions, tensor views, errors.
#include <cmath>
#include <cstdio>
#include <cstring>

#include "frugal/half.h"
#include "testing.h"

namespace frugal {
namespace {

TEST(DType, ParsesNamesAndRefusesUnknownOnes) {
  EXPECT_EQ(parse_dtype("fp16"), DType::f16);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bf16);
  EXPECT_EQ(parse_dtype("F32"), DType::f32);
  try {
    parse_dtype("f8");
    FAIL() << "expected frugal::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("[parse_dtype]"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("f8"), std::string::npos);
  }
}

TEST(Device, ParsesAndPrints) {
  EXPECT_EQ(parse_device("cuda:3"), Device::cuda(3));
  EXPECT_EQ(to_string(Device::cuda(1)), "cuda:1");
  EXPECT_TRUE(parse_device("cpu").is_cpu());
  EXPECT_THROW(parse_device("gpu"), Error);
  EXPECT_THROW(parse_device("cuda:x"), Error);
}

// Reference rounding of a float to the nearest half (ties to even), through double arithmetic.
uint16_t half_reference(float f) {
  if (std::isnan(f)) return 0x7e00;
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  double a = std::fabs(static_cast<double>(f));
  uint16_t best = 0;
  double best_err = INFINITY;
  // Search the two candidates around a: every half value is m * 2^(e-25) style; brute force
  // over all finite positive halves is cheap enough (31744 values).
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const double v = half_to_float(static_cast<uint16_t>(h));
    const double err = std::fabs(v - a);
    if (err < best_err || (err == best_err && (h & 1) == 0)) {
      best_err = err;
      best = static_cast<uint16_t>(h);
    }
  }
  if (a >= 65520.0) return sign | 0x7c00;
  return sign | best;
}

TEST(Half, RoundTripsEveryHalfValue) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = half_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_half(f), h) << "half bits " << h;
  }
}

TEST(Half, RoundsRandomFloatsToNearestEven) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(testing::test_seed());
  std::uniform_real_distribution<float> exp_dist(-26.0f, 17.0f);
  for (int i = 0; i < 200; ++i) {
    const float f = std::ldexp(1.0f + std::generate_canonical<float, 24>(rng), static_cast<int>(exp_dist(rng))) *
                    (i % 2 ? -1.0f : 1.0f);
    ASSERT_EQ(float_to_half(f), half_reference(f)) << "f = " << f;
  }
}

TEST(BFloat16, RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties go to the even one (1.0).
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(bf16_to_float(float_to_bf16(-2.5f)), -2.5f);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
}

TEST(TensorView, KnowsContiguityAndDescribesItself) {
  float buf[24];
  TensorView v(buf, DType::f32, {2, 3, 4});
  EXPECT_TRUE(v.is_contiguous());
  EXPECT_EQ(v.numel(), 24);
  EXPECT_EQ(v.stride(0), 12);
  EXPECT_EQ(v.describe(), "f32[2, 3, 4] cpu");
  const int64_t shape[] = {3, 2};
  const int64_t strides[] = {1, 3};
  TensorView t(buf, DType::f32, shape, strides, Device::cpu());
  EXPECT_FALSE(t.is_contiguous());
}

TEST(Tensor, AllocatesZerosAndCopiesOnTheHost) {
  Tensor z = Tensor::zeros({5, 7}, DType::i32);
  for (int i = 0; i < 35; ++i) ASSERT_EQ(z.data_as<int32_t>()[i], 0);
  Tensor c = z.to(Device::cpu());
  EXPECT_NE(c.data(), z.data());
  EXPECT_EQ(c.numel(), 35);
  Tensor e = Tensor::empty({0, 4}, DType::f32);
  EXPECT_EQ(e.numel(), 0);
}

// cpu → cuda:0 → another GPU → cpu: a host-to-device, a device-to-device and a device-to-host copy.
// With one GPU the middle copy goes from cuda:0 to a second buffer on cuda:0 (still a
// device-to-device copy, not a peer copy).
TEST(Tensor, CopiesBetweenDistinctDevices) {
  FRUGAL_SKIP_WITHOUT_GPU();
  const Device first = Device::cuda(0), second = Device::cuda(cuda_device_count() > 1 ? 1 : 0);
  if (second == first) std::printf("one GPU: the device-to-device copy stays on cuda:0\n");
  Tensor h = Tensor::empty({3, 1000}, DType::i32);
  for (int i = 0; i < 3000; ++i) h.data_as<int32_t>()[i] = i * 7 - 1000;
  const Tensor a = h.to(first);
  const Tensor b = a.to(second);
  const Tensor back = b.to(Device::cpu());
  EXPECT_EQ(a.device(), first);
  EXPECT_EQ(b.device(), second);
  EXPECT_TRUE(back.device().is_cpu());
  EXPECT_NE(b.data(), a.data());
  ASSERT_EQ(back.rank(), 2);
  EXPECT_EQ(back.size(0), 3);
  EXPECT_EQ(back.size(1), 1000);
  EXPECT_EQ(std::memcmp(back.data(), h.data(), h.nbytes()), 0);
}

TEST(Tensor, CopyRefusesMismatchedSizes) {
  Tensor a = Tensor::empty({4}, DType::f32), b = Tensor::empty({5}, DType::f32);
  EXPECT_THROW(copy(a, b), Error);
}

TEST(Runtime, CudaAllocationIsRefusedClearlyWithoutAGpu) {
  if (cuda_available()) GTEST_SKIP() << "a GPU is present";
  try {
    Tensor::empty({4}, DType::f32, Device::cuda(0));
    FAIL() << "expected frugal::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("[Tensor::empty]"), std::string::npos) << e.what();
  }
}

TEST(Runtime, GpuRoundTrip) {
  FRUGAL_SKIP_WITHOUT_GPU();
  Tensor h = Tensor::empty({1000}, DType::f32);
  for (int i = 0; i < 1000; ++i) h.data_as<float>()[i] = static_cast<float>(i) * 0.5f;
  Tensor back = h.to(Device::cuda()).to(Device::cpu());
  EXPECT_EQ(std::memcmp(back.data(), h.data(), h.nbytes()), 0);
}

}  // namespace
}  // namespace frugal
