// Shared test helpers: seeded random inputs (seed printed on failure), GPU skipping, norms.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "frugal/frugal.h"
#include "frugal/half.h"

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

// v rounded to the precision of dt (f32 unchanged).
inline float round_to(float v, DType dt) {
  if (dt == DType::f16) return half_to_float(float_to_half(v));
  if (dt == DType::bf16) return bf16_to_float(float_to_bf16(v));
  return v;
}

// Element i of a buffer of dtype dt (f32 | f16 | bf16) written from v.
inline void store_as(DType dt, void* base, int64_t i, float v) {
  if (dt == DType::f16)
    static_cast<uint16_t*>(base)[i] = float_to_half(v);
  else if (dt == DType::bf16)
    static_cast<uint16_t*>(base)[i] = float_to_bf16(v);
  else
    static_cast<float*>(base)[i] = v;
}

// The elements of a floating tensor (any device) as doubles, in row-major order.
inline std::vector<double> to_double(const Tensor& t) {
  const Tensor h = t.device().is_cpu() ? t : t.to(Device::cpu());
  std::vector<double> out(static_cast<size_t>(h.numel()));
  for (int64_t i = 0; i < h.numel(); ++i) {
    if (h.dtype() == DType::f32)
      out[i] = h.data_as<float>()[i];
    else if (h.dtype() == DType::f16)
      out[i] = half_to_float(h.data_as<uint16_t>()[i]);
    else
      out[i] = bf16_to_float(h.data_as<uint16_t>()[i]);
  }
  return out;
}

// f() must throw frugal::Error with this code and a message containing every one of `parts`.
template <typename F>
void expect_error(F&& f, ErrorCode code, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "expected frugal::Error containing '" << (parts.size() ? *parts.begin() : "") << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const std::string& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

}  // namespace frugal::testing
