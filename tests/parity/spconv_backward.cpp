// Parity cases of the sparse conv's backward: grad_feats through every forward variant (dgrad is a
// forward conv over mirrored weights), grad_weight and grad_bias through every wgrad variant, on the CPU
// and CUDA, against double-precision sums over the same map written as the gradients' definitions (the
// scatter of grad_out through the map, not the symmetry dgrad uses).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <string>

#include "core/spconv_backward_choose.h"
#include "core/spconv_choose.h"
#include "frugal/sparse_conv.h"
#include "parity/harness.h"
#include "testing.h"

namespace frugal::testing {
namespace {

using spconv::ConvChoice;
using spconv::ConvVariant;
using spconv::WgradChoice;
using spconv::WgradVariant;

// Voxels of 2 batches, each cell of a 12³ box active with probability 0.35, in random order; or the
// voxels of a 40³ grid within 0.87 of the sphere of radius 18, x slowest (where the halo kernel keeps
// its tiles).
std::vector<int32_t> voxels(bool shell) {
  std::vector<int32_t> flat;
  if (shell) {
    for (int x = 0; x < 40; ++x)
      for (int y = 0; y < 40; ++y)
        for (int z = 0; z < 40; ++z)
          if (std::abs(std::sqrt((x - 20.0) * (x - 20.0) + (y - 20.0) * (y - 20.0) + (z - 20.0) * (z - 20.0)) - 18) <
              0.87)
            flat.insert(flat.end(), {0, x, y, z});
    return flat;
  }
  std::mt19937_64 rng(11);
  std::bernoulli_distribution on(0.35);
  std::vector<std::array<int32_t, 4>> rows;
  for (int b = 0; b < 2; ++b)
    for (int x = 0; x < 12; ++x)
      for (int y = 0; y < 12; ++y)
        for (int z = 0; z < 12; ++z)
          if (on(rng)) rows.push_back({b, x - 6, y - 6, z - 6});
  std::shuffle(rows.begin(), rows.end(), rng);
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  return flat;
}

Tensor filled(const std::vector<float>& v, std::initializer_list<int64_t> shape, DType dt) {
  Tensor t = Tensor::empty(shape, dt);
  for (size_t i = 0; i < v.size(); ++i) store_as(dt, t.data(), static_cast<int64_t>(i), v[i]);
  return t;
}

enum class Grad { feats, weight, bias };
const char* name(Grad g) { return g == Grad::feats ? "grad_feats" : g == Grad::weight ? "grad_weight" : "grad_bias"; }

struct Spec {
  bool shell;
  int ci, co;
  DType dtype;
  bool cuda;
  Grad grad;
  std::optional<ConvVariant> dgrad;   // forced (grad_feats cases); the CPU's by rule otherwise
  std::optional<WgradVariant> wgrad;  // forced (grad_weight, grad_bias cases)
  std::string variant;                // the variant that must serve
};

// The dgrad variant a case runs where the device has no sm_90a code: mma (what the rules take there)
// for the wgmma variants, on the same shape.
std::optional<ConvVariant> without_sm90a_code(std::optional<ConvVariant> v) {
  return v && spconv::is_wgmma(*v) ? ConvVariant::mma : v;
}

ParityOutcome run_case(const Spec& s) {
  ParityOutcome o;
  o.variant = s.variant;
  const std::vector<int32_t> c = voxels(s.shell);
  const int64_t n = static_cast<int64_t>(c.size() / 4), k = 27;
  Tensor coords = Tensor::empty({n, 4}, DType::i32);
  std::memcpy(coords.data(), c.data(), c.size() * 4);
  std::mt19937_64 rng(test_seed());
  std::vector<float> f = randn(n * s.ci, rng), w = randn(k * s.ci * s.co, rng, 1.0f / std::sqrt(27.0f * s.ci)),
                     g = randn(n * s.co, rng);
  for (auto* v : {&f, &w, &g})
    for (float& x : *v) x = round_to(x, s.dtype);
  const spconv::KernelMap map_h = spconv::KernelMap::build(coords, 3, 1);
  const Tensor nbr_h = map_h.nbr();  // by row, whatever the map's run order
  const auto* nbr = nbr_h.data_as<const int32_t>();

  // The reference, in double, straight from the definitions.
  if (s.grad == Grad::feats) {
    o.ref.assign(n * s.ci, 0.0);
    for (int64_t kk = 0; kk < k; ++kk)
      for (int64_t r = 0; r < n; ++r) {
        const int32_t m = nbr[kk * n + r];
        if (m == n) continue;
        for (int i = 0; i < s.ci; ++i)
          for (int q = 0; q < s.co; ++q) o.ref[m * s.ci + i] += double(g[r * s.co + q]) * w[(kk * s.ci + i) * s.co + q];
      }
  } else if (s.grad == Grad::weight) {
    o.ref.assign(k * s.ci * s.co, 0.0);
    for (int64_t kk = 0; kk < k; ++kk)
      for (int64_t r = 0; r < n; ++r) {
        const int32_t m = nbr[kk * n + r];
        if (m == n) continue;
        for (int i = 0; i < s.ci; ++i)
          for (int q = 0; q < s.co; ++q) o.ref[(kk * s.ci + i) * s.co + q] += double(f[m * s.ci + i]) * g[r * s.co + q];
      }
  } else {
    o.ref.assign(s.co, 0.0);
    for (int64_t r = 0; r < n; ++r)
      for (int q = 0; q < s.co; ++q) o.ref[q] += g[r * s.co + q];
  }

  const Device d = s.cuda ? Device::cuda(0) : Device::cpu();
  const std::optional<ConvVariant> dgrad = s.cuda && without_sm90a() ? without_sm90a_code(s.dgrad) : s.dgrad;
  const Tensor feats = filled(f, {n, s.ci}, s.dtype).to(d), weight = filled(w, {k, s.ci, s.co}, s.dtype).to(d),
               grad_out = filled(g, {n, s.co}, s.dtype).to(d);
  const spconv::KernelMap map = s.cuda ? spconv::KernelMap::build(coords.to(d), 3, 1) : map_h;
  spconv::BackwardOptions opt;
  if (dgrad) opt.dgrad = ConvChoice{.variant = *dgrad};
  if (s.wgrad) opt.wgrad = WgradChoice{.variant = *s.wgrad};
  const spconv::GradientRequest want{
      .feats = s.grad == Grad::feats, .weight = s.grad == Grad::weight, .bias = s.grad == Grad::bias};
  const spconv::ConvGradients got = spconv::submanifold_conv_backward(grad_out, feats, map, weight, want, opt);
  if (s.grad == Grad::feats) {
    o.variant = spconv::to_string(got.choice.dgrad->variant);
    o.arch = spconv::arch_of(got.choice.dgrad->variant);
    o.got = to_double(got.feats);
  } else {
    o.variant = spconv::to_string(got.choice.wgrad->variant);
    o.arch = spconv::arch_of(got.choice.wgrad->variant);
    o.got = to_double(s.grad == Grad::weight ? got.weight : got.bias);
  }
  return o;
}

std::string shape_of(const Spec& s) {
  return std::string(s.shell ? "shell R=18" : "random 2x12^3 at 0.35") + " K=27 Ci=" + std::to_string(s.ci) +
         " Co=" + std::to_string(s.co);
}

FRUGAL_PARITY_CASES(cases) {
  using V = ConvVariant;
  using W = WgradVariant;
  std::vector<Spec> specs;
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (Grad g : {Grad::feats, Grad::weight, Grad::bias})
      specs.push_back({false, 17, 24, dt, false, g, {}, {}, "cpu"});
  // grad_feats through the forward's CUDA variants (dgrad of Ci -> Co is the forward Co -> Ci).
  specs.push_back({false, 17, 24, DType::f32, true, Grad::feats, V::simt, {}, "simt"});
  specs.push_back({false, 64, 64, DType::f32, true, Grad::feats, V::simt, {}, "simt"});
  for (DType dt : {DType::f16, DType::bf16}) {
    specs.push_back({false, 24, 17, dt, true, Grad::feats, V::wmma, {}, "wmma"});
    specs.push_back({false, 64, 64, dt, true, Grad::feats, V::simt, {}, "simt"});
    specs.push_back({false, 64, 64, dt, true, Grad::feats, V::mma, {}, "mma"});
    specs.push_back({false, 128, 64, dt, true, Grad::feats, V::wgmma, {}, "wgmma"});
    specs.push_back({false, 256, 128, dt, true, Grad::feats, V::wgmma, {}, "wgmma"});
    specs.push_back({false, 128, 128, dt, true, Grad::feats, V::wgmma_ws, {}, "wgmma_ws"});
    specs.push_back({false, 64, 64, dt, true, Grad::feats, V::wgmma_ws2, {}, "wgmma_ws2"});
    specs.push_back({true, 64, 64, dt, true, Grad::feats, V::halo_pipe, {}, "halo_pipe"});
    specs.push_back({true, 128, 128, dt, true, Grad::feats, V::halo_pipe, {}, "halo_pipe"});
    specs.push_back({false, 16, 128, dt, true, Grad::feats, V::mma, {}, "mma"});  // C -> 8C: dgrad is 8C -> C
  }
  // grad_weight and grad_bias through every wgrad variant.
  for (Grad g : {Grad::weight, Grad::bias}) {
    specs.push_back({false, 17, 24, DType::f32, true, g, {}, W::simt, "simt"});
    specs.push_back({false, 64, 64, DType::f32, true, g, {}, W::simt, "simt"});
    for (DType dt : {DType::f16, DType::bf16}) {
      specs.push_back({false, 17, 24, dt, true, g, {}, W::wmma, "wmma"});
      specs.push_back({false, 64, 64, dt, true, g, {}, W::wmma, "wmma"});
      specs.push_back({false, 16, 128, dt, true, g, {}, W::wmma, "wmma"});
      specs.push_back({true, 64, 64, dt, true, g, {}, W::wmma, "wmma"});
      specs.push_back({false, 64, 64, dt, true, g, {}, W::simt, "simt"});
      specs.push_back({false, 64, 64, dt, true, g, {}, W::mma, "mma"});
      specs.push_back({false, 16, 128, dt, true, g, {}, W::mma, "mma"});
      specs.push_back({true, 128, 128, dt, true, g, {}, W::mma, "mma"});
    }
  }
  for (const Spec& s : specs)
    cases.push_back({std::string("spconv.submanifold_conv_backward.") + name(s.grad), shape_of(s), to_string(s.dtype),
                     s.cuda ? "cuda" : "cpu", s.variant, s.dtype == DType::f32 ? 1e-5 : 1e-2,
                     [s] { return run_case(s); },
                     s.dgrad ? spconv::to_string(*without_sm90a_code(s.dgrad)) : s.variant});
}

}  // namespace
}  // namespace frugal::testing
