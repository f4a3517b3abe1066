// Shared test helpers: seeded random inputs (seed printed on failure), GPU skipping, norms.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "frugal/frugal.h"

namespace frugal::testing {

// A fresh seed per test run unless FRUGAL_SEED is set; SCOPED_TRACE prints it on failure.
inline uint64_t test_seed() {
  static const uint64_t seed = [] {
    if (const char* s = std::getenv("FRUGAL_SEED")) return static_cast<uint64_t>(std::stoull(s));
    return static_cast<uint64_t>(std::random_device{}()) << 32 | std::random_device{}();
  }();
  return seed;
}

#define FRUGAL_TRACE_SEED() SCOPED_TRACE("FRUGAL_SEED=" + std::to_string(::frugal::testing::test_seed()))

#define FRUGAL_SKIP_WITHOUT_GPU()                                                     \
  do {                                                                               \
    if (!::frugal::cuda_available()) GTEST_SKIP() << "no CUDA device (or a build without CUDA)"; \
  } while (0)

inline std::vector<float> randn(size_t n, std::mt19937_64& rng, float stddev = 1.0f) {
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline double rel_error(const std::vector<double>& out, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// A host tensor filled from a vector.
inline Tensor host_tensor(const std::vector<float>& v, std::initializer_list<int64_t> shape) {
  Tensor t = Tensor::empty(shape, DType::f32);
  std::copy(v.begin(), v.end(), t.data_as<float>());
  return t;
}

}  // namespace frugal::testing
