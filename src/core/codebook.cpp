// Lloyd–Max codebooks for N(0,1), computed by Lloyd iteration in double precision, and the
// random signs of the randomized Hadamard transform.
#include <algorithm>
#include <array>
#include <cmath>
#include <mutex>

#include "core/kv_backend.h"
#include "frugal/error.h"
#include "frugal/kv_cache.h"

namespace frugal::kv {

namespace {

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

double pdf(double x) { return std::isinf(x) ? 0.0 : kInvSqrt2Pi * std::exp(-0.5 * x * x); }

// P(a < X < b) for X ~ N(0,1), through erfc on the side that keeps precision in the tails.
double mass(double a, double b) {
  if (a >= 0) return 0.5 * (std::erfc(a * kInvSqrt2) - std::erfc(b * kInvSqrt2));
  if (b <= 0) return 0.5 * (std::erfc(-b * kInvSqrt2) - std::erfc(-a * kInvSqrt2));
  return 1.0 - 0.5 * std::erfc(-a * kInvSqrt2) - 0.5 * std::erfc(b * kInvSqrt2);
}

// Φ^{-1}(p) by bisection: only used to seed the iteration.
double inverse_cdf(double p) {
  double lo = -40, hi = 40;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (0.5 * std::erfc(-mid * kInvSqrt2) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

Codebook compute_codebook(int bits) {
  const int levels = 1 << bits;
  std::vector<double> c(levels), b(levels + 1);
  // Seed with the companding law of high-resolution theory (point density ∝ p^{1/3}, i.e. the
  // quantiles of N(0, 3)); Lloyd's iteration then converges in few steps.
  for (int i = 0; i < levels; ++i) c[i] = std::sqrt(3.0) * inverse_cdf((i + 0.5) / levels);
  b[0] = -INFINITY;
  b[levels] = INFINITY;
  for (int iter = 0; iter < 200000; ++iter) {
    for (int i = 1; i < levels; ++i) b[i] = 0.5 * (c[i - 1] + c[i]);
    double change = 0;
    for (int i = 0; i < levels; ++i) {
      const double next = (pdf(b[i]) - pdf(b[i + 1])) / mass(b[i], b[i + 1]);
      change = std::max(change, std::abs(next - c[i]));
      c[i] = next;
    }
    for (int i = 0; i < levels / 2; ++i) {  // keep the exact mirror symmetry of N(0,1)
      const double m = 0.5 * (c[levels - 1 - i] - c[i]);
      c[i] = -m;
      c[levels - 1 - i] = m;
    }
    if (change < 1e-13) break;
  }
  Codebook cb;
  cb.bits = bits;
  double explained = 0;
  for (int i = 1; i < levels; ++i) b[i] = 0.5 * (c[i - 1] + c[i]);
  for (int i = 0; i < levels; ++i) {
    cb.centroids.push_back(static_cast<float>(c[i]));
    explained += mass(b[i], b[i + 1]) * c[i] * c[i];
  }
  for (int i = 1; i < levels; ++i) cb.boundaries.push_back(static_cast<float>(b[i]));
  cb.mse = 1.0 - explained;  // E[(X - Q(X))²] = E[X²] - E[Q(X)²] at the centroid condition
  return cb;
}

}  // namespace

const Codebook& lloyd_max_codebook(int bits) {
  FRUGAL_CHECK(bits >= 1 && bits <= 8, invalid_argument, "kv::lloyd_max_codebook",
               "bits must be in [1, 8], got " << bits);
  static std::array<Codebook, 9> books;
  static std::array<std::once_flag, 9> once;
  std::call_once(once[bits], [bits] { books[bits] = compute_codebook(bits); });
  return books[bits];
}

std::vector<float> random_signs(uint64_t seed, int dim) {
  std::vector<float> s(dim);
  uint64_t state = seed;
  for (int i = 0; i < dim; ++i) {  // splitmix64
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    s[i] = (z >> 63) ? -1.0f : 1.0f;
  }
  return s;
}

namespace backend {

CellGrid cell_grid(int bits) {
  const std::vector<float>& b = lloyd_max_codebook(bits).boundaries;
  double gap = INFINITY, reach = 0;
  for (size_t i = 0; i + 1 < b.size(); ++i) gap = std::min(gap, static_cast<double>(b[i + 1]) - b[i]);
  for (float x : b) reach = std::max(reach, std::fabs(static_cast<double>(x)));
  CellGrid g;
  g.w = std::exp2(std::floor(std::log2(std::min(gap, 1.0))));
  if (g.w >= gap) g.w *= 0.5;
  g.half = static_cast<int>(std::ceil(reach / g.w + 0.5)) + 1;  // cells ±half hold no boundary
  return g;
}

}  // namespace backend

}  // namespace frugal::kv
