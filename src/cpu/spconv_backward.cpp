// CPU backend of the sparse conv's backward: grad_feats as the forward conv over mirrored weights,
// grad_weight with one thread per (offset, block of input channels) summing rows in a fixed order,
// grad_bias over fixed row blocks added in block order; and the forward's f64 path. Accumulators are
// f32 (f64 for f64); nothing depends on the thread count.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/sparse_conv_backend.h"
#include "core/types.h"

namespace frugal::cpu {

namespace {

using spconv::backend::ConvArgs;
using spconv::backend::WgradArgs;

// Rows summed into a block's own accumulators before they join the total: the f32 rounding error then
// grows with √256 + √(N/256) instead of √N.
constexpr int64_t kRowBlock = 256;
constexpr int64_t kCiBlock = 16;  // input channels a grad_weight task: 16 × Co accumulators stay in L1

template <typename T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;
template <typename T>
acc_t<T> load(T x) {
  if constexpr (std::is_same_v<T, double>)
    return x;
  else
    return to_float(x);
}
template <typename T>
T store(acc_t<T> x) {
  if constexpr (std::is_same_v<T, double>)
    return x;
  else
    return from_float<T>(x);
}

// dispatch_float with f64 as well.
template <typename F>
void dispatch_with_f64(DType t, F&& f) {
  if (t == DType::f64) return f.template operator()<double>();
  dispatch_float(t, "spconv::submanifold_conv_backward", std::forward<F>(f));
}

bool present(int32_t m, int64_t n) { return m >= 0 && m < n; }

// grad_weight[k, c0 .. c0 + cb) = Σ_n feats[nbr[k, n], c]ᵀ ⊗ grad_out[n], rows in order, in blocks.
template <typename T>
void wgrad_task(const WgradArgs& a, int k, int64_t c0, int64_t cb, std::vector<acc_t<T>>& total,
                std::vector<acc_t<T>>& block, std::vector<acc_t<T>>& g) {
  using A = acc_t<T>;
  const T* feats = static_cast<const T*>(a.feats);
  const T* grad = static_cast<const T*>(a.grad_out);
  const int64_t n = a.n, ci = a.ci, co = a.co;
  std::fill(total.begin(), total.begin() + cb * co, A(0));
  for (int64_t r0 = 0; r0 < n; r0 += kRowBlock) {
    std::fill(block.begin(), block.begin() + cb * co, A(0));
    for (int64_t r = r0; r < std::min(n, r0 + kRowBlock); ++r) {
      const int32_t m = a.nbr[k * n + r];
      const int64_t g_row = spconv::backend::column_row(a.order, r, n);
      if (!present(m, n) || g_row < 0) continue;
      for (int64_t o = 0; o < co; ++o) g[o] = load(grad[g_row * co + o]);
      for (int64_t c = 0; c < cb; ++c) {
        const A x = load(feats[m * ci + c0 + c]);
        A* acc = block.data() + c * co;
#pragma omp simd
        for (int64_t o = 0; o < co; ++o) acc[o] += x * g[o];
      }
    }
    for (int64_t i = 0; i < cb * co; ++i) total[i] += block[i];
  }
  T* out = static_cast<T*>(a.grad_weight) + (static_cast<int64_t>(k) * ci + c0) * co;
  for (int64_t i = 0; i < cb * co; ++i) out[i] = store<T>(total[i]);
}

template <typename T>
void wgrad(const WgradArgs& a) {
  const int64_t ci_blocks = (a.ci + kCiBlock - 1) / kCiBlock, tasks = a.k * ci_blocks;
#pragma omp parallel
  {
    std::vector<acc_t<T>> total(kCiBlock * a.co), block(kCiBlock * a.co), g(a.co);
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t c0 = t % ci_blocks * kCiBlock;
      wgrad_task<T>(a, static_cast<int>(t / ci_blocks), c0, std::min<int64_t>(kCiBlock, a.ci - c0), total, block, g);
    }
  }
}

// grad_bias: each block of kRowBlock rows summed by one thread, the block sums added in block order.
template <typename T>
void bias_grad(const WgradArgs& a) {
  using A = acc_t<T>;
  const T* grad = static_cast<const T*>(a.grad_out);
  const int64_t co = a.co, blocks = (a.n + kRowBlock - 1) / kRowBlock;
  std::vector<A> part(blocks * co, A(0));
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t r = b * kRowBlock; r < std::min(a.n, (b + 1) * kRowBlock); ++r)
      for (int64_t o = 0; o < co; ++o) part[b * co + o] += load(grad[r * co + o]);
  T* out = static_cast<T*>(a.grad_bias);
  for (int64_t o = 0; o < co; ++o) {
    A s = 0;
    for (int64_t b = 0; b < blocks; ++b) s += part[b * co + o];
    out[o] = store<T>(s);
  }
}

}  // namespace

void spconv_conv_f64(const ConvArgs& a) {
  const auto* feats = static_cast<const double*>(a.feats);
  const auto* w = static_cast<const double*>(a.weight);
  const auto* bias = static_cast<const double*>(a.bias);
  auto* out = static_cast<double*>(a.out);
  const int64_t n = a.n, ci = a.ci, co = a.co;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < n; ++r) {
    const int64_t dst_row = spconv::backend::column_row(a.order, r, n);
    if (dst_row < 0) continue;
    double* acc = out + dst_row * co;
    for (int64_t o = 0; o < co; ++o) acc[o] = bias ? bias[o] : 0.0;
    for (int k = 0; k < a.k; ++k) {
      const int32_t m = a.nbr[k * n + r];
      if (!present(m, n)) continue;
      for (int64_t c = 0; c < ci; ++c) {
        const double x = feats[m * ci + c];
        const double* wr = w + (static_cast<int64_t>(k) * ci + c) * co;
#pragma omp simd
        for (int64_t o = 0; o < co; ++o) acc[o] += x * wr[o];
      }
    }
  }
}

void spconv_dgrad(const ConvArgs& a) {
  const size_t es = size_of(a.dtype);
  const int64_t total = static_cast<int64_t>(a.k) * a.ci * a.co;
  std::vector<unsigned char> wd(total * es);
  const auto* w = static_cast<const unsigned char*>(a.weight);
  for (int64_t e = 0; e < total; ++e)  // a.ci, a.co are the forward's over grad_out: the conv's Co, Ci
    std::memcpy(wd.data() + e * es, w + spconv::backend::mirror_source(e, a.k, a.co, a.ci) * es, es);
  ConvArgs b = a;
  b.weight = wd.data();
  b.bias = nullptr;
  b.check = false;
  spconv_conv(b);
}

void spconv_wgrad(const WgradArgs& a) {
  dispatch_with_f64(a.dtype, [&]<typename T>() {
    if (a.grad_weight) wgrad<T>(a);
    if (a.grad_bias) bias_grad<T>(a);
  });
}

}  // namespace frugal::cpu
