// Lloyd–Max codebooks and the FWHT against independent oracles.
#include <cmath>
#include <cstring>

#include "frugal/kv_cache.h"
#include "testing.h"

namespace frugal::kv {
namespace {

TEST(Codebook, FourBitMatchesThePublishedDigits) {
  const double expected[] = {0.1283950, 0.3880483, 0.6567591, 0.9423405,
                             1.2562312, 1.6180464, 2.0690172, 2.7325896};
  const Codebook& cb = lloyd_max_codebook(4);
  ASSERT_EQ(cb.centroids.size(), 16u);
  for (int i = 0; i < 8; ++i) {
    EXPECT_NEAR(cb.centroids[8 + i], expected[i], 5e-7);
    EXPECT_NEAR(cb.centroids[7 - i], -expected[i], 5e-7);
  }
  EXPECT_NEAR(cb.mse, 0.009501, 5e-7);
}

TEST(Codebook, OtherWidthsMatchTheirMse) {
  EXPECT_NEAR(lloyd_max_codebook(2).mse, 0.117482, 5e-7);
  EXPECT_NEAR(lloyd_max_codebook(3).mse, 0.034548, 5e-7);
  EXPECT_NEAR(lloyd_max_codebook(2).centroids[3], 1.5104176, 5e-7);
  EXPECT_NEAR(lloyd_max_codebook(3).boundaries[6], 1.7479275, 5e-7);
  const Codebook& b8 = lloyd_max_codebook(8);
  ASSERT_EQ(b8.centroids.size(), 256u);
  // Panter–Dite high-resolution approximation: MSE ≈ (π√3/2) · 4^-bits ≈ 4.15e-5 at 8 bits.
  EXPECT_NEAR(b8.mse, M_PI * std::sqrt(3.0) / 2 / 65536, 0.1 * M_PI * std::sqrt(3.0) / 2 / 65536);
  for (size_t i = 0; i + 1 < b8.centroids.size(); ++i) ASSERT_LT(b8.centroids[i], b8.centroids[i + 1]);
}

TEST(Codebook, BoundariesAreMidpoints) {
  for (int bits : {2, 3, 4, 8}) {
    const Codebook& cb = lloyd_max_codebook(bits);
    for (size_t i = 0; i < cb.boundaries.size(); ++i)
      ASSERT_FLOAT_EQ(cb.boundaries[i], 0.5f * (cb.centroids[i] + cb.centroids[i + 1]));
  }
}

// H_D by the Sylvester construction, entry (i, j) = (-1)^popcount(i & j), in double.
double hadamard_entry(int i, int j) { return (__builtin_popcount(i & j) & 1) ? -1.0 : 1.0; }

TEST(Hadamard, MatchesTheExplicitMatrixInDouble) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(testing::test_seed());
  for (int d : {4, 8, 64, 128, 512, 4096}) {
    const int rows = 3;
    std::vector<float> x = testing::randn(static_cast<size_t>(rows) * d, rng);
    Tensor in = testing::host_tensor(x, {rows, d});
    Tensor out = Tensor::empty({rows, d}, DType::f32);
    hadamard_transform(in, out);
    std::vector<double> got, ref;
    for (int r = 0; r < rows; ++r)
      for (int i = 0; i < d; ++i) {
        double s = 0;
        for (int j = 0; j < d; ++j) s += hadamard_entry(i, j) * x[r * d + j];
        ref.push_back(s / std::sqrt(static_cast<double>(d)));
        got.push_back(out.data_as<float>()[r * d + i]);
      }
    EXPECT_LT(testing::rel_error(got, ref), 1e-6) << "D = " << d;
  }
}

TEST(Hadamard, IsItsOwnInverseInPlace) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(testing::test_seed() + 1);
  std::vector<float> x = testing::randn(4 * 256, rng);
  Tensor t = testing::host_tensor(x, {4, 256});
  hadamard_transform(t, t);
  hadamard_transform(t, t);
  std::vector<double> got(t.data_as<float>(), t.data_as<float>() + x.size()), ref(x.begin(), x.end());
  EXPECT_LT(testing::rel_error(got, ref), 1e-6);
}

TEST(Hadamard, RefusesNonPowerOfTwo) {
  Tensor t = Tensor::empty({2, 96}, DType::f32);
  try {
    hadamard_transform(t, t);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("got 96"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace frugal::kv

namespace frugal::kv {
namespace {
TEST(Cache, CopiesToAnotherDeviceWithItsPositions) {
  Cache c({.batch = 1, .num_kv_heads = 2, .head_dim = 16, .capacity = 8, .sliding = true});
  Tensor x = Tensor::empty({3, 2, 16}, DType::f32);
  for (int i = 0; i < 96; ++i) x.data_as<float>()[i] = static_cast<float>((i * 37) % 11) - 5.0f;
  c.append(x);
  Cache d = c.to(Device::cpu());
  EXPECT_EQ(d.write_pos(), 3);
  EXPECT_EQ(std::memcmp(d.packed().data(), c.packed().data(), c.packed().nbytes()), 0);
  EXPECT_NE(d.packed().data(), c.packed().data());
}
}  // namespace
}  // namespace frugal::kv
