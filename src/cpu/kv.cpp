// CPU backend of the KV cache: FWHT, Lloyd–Max quantization and bit packing, one head vector
// per iteration, OpenMP over vectors. This is the reference the CUDA kernels must match
// bit for bit (packed codes and scales): same FWHT stage order (h = 1, 2, 4, ...), same
// final multiply by 1/√D in f32, the norm and scale reductions in f64 (the norm from x, see
// kv::backend::kMaxNorm). The tensor-core kernel of the CUDA backend rounds the transform
// differently: its codes may differ where u lies within ~1e-6 of a boundary.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/kv_backend.h"
#include "cpu/kv_common.h"
#include "core/types.h"

namespace frugal::cpu {

namespace {

using kv::backend::AppendArgs;
using kv::backend::DequantizeArgs;


// Quantizes y (already rotated: y = FWHT(s ⊙ x)/√D) into one packed row; returns the scale.
// ss = ‖x‖² in f64 (= ‖y‖² up to the rounding of y).
float quantize_rotated(const float* y, double ss, int d, int bits, const float* centroids, const float* boundaries,
                       kv::ScaleRule rule, uint8_t* row) {
  const int nb = (1 << bits) - 1;
  std::memset(row, 0, static_cast<size_t>(d) * bits / 8);
  const double n = std::sqrt(ss);
  if (!(n <= kv::backend::kMaxNorm)) return std::numeric_limits<float>::quiet_NaN();  // flagged: codes stay 0
  if (n <= 1e-10) {
    const unsigned zero_code = static_cast<unsigned>(std::lower_bound(boundaries, boundaries + nb, 0.0f) - boundaries);
    for (int i = 0; i < d; ++i) put_code(row, i, bits, zero_code);
    return 0.0f;
  }
  const float k = static_cast<float>(std::sqrt(static_cast<double>(d)) / n);
  double yc = 0, cc = 0;
  for (int i = 0; i < d; ++i) {
    const float u = y[i] * k;
    const unsigned code = static_cast<unsigned>(std::lower_bound(boundaries, boundaries + nb, u) - boundaries);
    put_code(row, i, bits, code);
    yc += static_cast<double>(y[i]) * centroids[code];
    cc += static_cast<double>(centroids[code]) * centroids[code];
  }
  if (rule == kv::ScaleRule::least_squares) return cc > 0 ? static_cast<float>(std::sqrt(double(d)) * yc / cc) : 0.0f;
  return static_cast<float>(n);
}

template <typename T>
void append_typed(const AppendArgs& a) {
  const int64_t total = static_cast<int64_t>(a.seqs) * a.tokens * a.heads;
  const int64_t row_bytes = static_cast<int64_t>(a.dim) * a.bits / 8;
  const float inv = kv::backend::inv_sqrt_dim(a.dim);
#pragma omp parallel if (total > 16)
  {
    std::vector<float> y(a.dim);
#pragma omp for schedule(static)
    for (int64_t v = 0; v < total; ++v) {
      const int h = static_cast<int>(v % a.heads);
      const int64_t t = (v / a.heads) % a.tokens;
      const int s = static_cast<int>(v / (static_cast<int64_t>(a.heads) * a.tokens));
      const T* x = static_cast<const T*>(a.x) + s * a.x_stride_seq + t * a.x_stride_tok + h * a.x_stride_head;
      double ss = 0;
      for (int i = 0; i < a.dim; ++i) {
        y[i] = a.signs ? to_float(x[i]) * a.signs[i] : to_float(x[i]);
        ss += static_cast<double>(y[i]) * y[i];
      }
      fwht_inplace(y.data(), a.dim);
      for (int i = 0; i < a.dim; ++i) y[i] *= inv;
      const int64_t pos = a.starts[s] + t;
      const int64_t slot = a.sliding ? pos % a.capacity : pos;
      const int64_t vec = (static_cast<int64_t>(s) * a.heads + h) * a.capacity + slot;
      a.scales[vec] = quantize_rotated(y.data(), ss, a.dim, a.bits, a.centroids, a.boundaries, a.rule,
                                       a.packed + vec * row_bytes);
    }
  }
}

template <typename T>
void dequantize_typed(const DequantizeArgs& a) {
  const int64_t total = a.count * a.heads;
  const int64_t row_bytes = static_cast<int64_t>(a.dim) * a.bits / 8;
  const float inv = kv::backend::inv_sqrt_dim(a.dim);
#pragma omp parallel if (total > 16)
  {
    std::vector<float> y(a.dim);
#pragma omp for schedule(static)
    for (int64_t v = 0; v < total; ++v) {
      const int h = static_cast<int>(v % a.heads);
      const int64_t t = v / a.heads;
      const int64_t pos = a.begin + t;
      const int64_t slot = a.sliding ? pos % a.capacity : pos;
      const int64_t vec = static_cast<int64_t>(h) * a.capacity + slot;
      const uint8_t* row = a.packed + vec * row_bytes;
      const float s = a.scales[vec] * inv;
      decode_codes(row, a.dim, a.bits, a.centroids, y.data());
      for (int i = 0; i < a.dim; ++i) y[i] *= s;
      fwht_inplace(y.data(), a.dim);
      T* out = static_cast<T*>(a.out) + (t * a.heads + h) * static_cast<int64_t>(a.dim);
      for (int i = 0; i < a.dim; ++i) {
        const float r = y[i] * inv;
        out[i] = from_float<T>(a.signs ? r * a.signs[i] : r);
      }
    }
  }
}

}  // namespace

void kv_append(const AppendArgs& a) {
  dispatch_float(a.x_dtype, "kv::append", [&]<typename T>() { append_typed<T>(a); });
}

void kv_dequantize(const DequantizeArgs& a) {
  dispatch_float(a.out_dtype, "kv::dequantize", [&]<typename T>() { dequantize_typed<T>(a); });
}

void hadamard_transform(const float* x, float* out, int64_t rows, int dim) {
  const float inv = kv::backend::inv_sqrt_dim(dim);
#pragma omp parallel for schedule(static) if (rows > 16)
  for (int64_t r = 0; r < rows; ++r) {
    float* o = out + r * dim;
    if (o != x + r * dim) std::memcpy(o, x + r * dim, sizeof(float) * dim);
    fwht_inplace(o, dim);
    for (int i = 0; i < dim; ++i) o[i] *= inv;
  }
}

}  // namespace frugal::cpu
