// Parity cases of the sparse conv: every variant (the CPU's; simt for f32; wmma, mma and the wgmma
// variants for f16 and bf16) against a double-precision sum over the same map, on a small random voxel
// set and on a thin sphere shell in the map's order (where the halo kernel keeps its tiles).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <string>

#include "core/spconv_choose.h"
#include "frugal/sparse_conv.h"
#include "parity/harness.h"
#include "testing.h"

namespace frugal::testing {
namespace {

using spconv::ConvChoice;
using spconv::ConvVariant;

// Voxels of 2 batches, each cell of a 12³ box active with probability 0.35, in random order; or the
// voxels of a 40³ grid within 0.87 of the sphere of radius 18, x slowest (the map's order).
std::vector<int32_t> voxels(bool shell) {
  std::vector<int32_t> flat;
  if (shell) {
    const int res = 40;
    for (int x = 0; x < res; ++x)
      for (int y = 0; y < res; ++y)
        for (int z = 0; z < res; ++z) {
          const double d = std::sqrt((x - res / 2.0) * (x - res / 2.0) + (y - res / 2.0) * (y - res / 2.0) +
                                     (z - res / 2.0) * (z - res / 2.0));
          if (std::abs(d - 0.45 * res) < 0.87) flat.insert(flat.end(), {0, x, y, z});
        }
    return flat;
  }
  std::mt19937_64 rng(7);
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

struct Spec {
  bool shell;
  int ci, co;
  DType dtype;
  bool cuda;
  ConvVariant variant;
  bool forced;  // force the variant (its tiling by rule); else the rules must pick it
};

// The variant a case runs where the device has no sm_90a code: mma (what the rules take there) for
// the wgmma variants, on the same shape.
ConvVariant without_sm90a_code(ConvVariant v) { return spconv::is_wgmma(v) ? ConvVariant::mma : v; }

ParityOutcome run_case(const Spec& s) {
  const std::vector<int32_t> c = voxels(s.shell);
  const int64_t n = static_cast<int64_t>(c.size() / 4), k = 27;
  Tensor coords = Tensor::empty({n, 4}, DType::i32);
  std::memcpy(coords.data(), c.data(), c.size() * 4);
  std::mt19937_64 rng(test_seed());
  std::vector<float> f = randn(n * s.ci, rng), w = randn(k * s.ci * s.co, rng, 1.0f / std::sqrt(27.0f * s.ci)),
                     b = randn(s.co, rng);
  for (auto* v : {&f, &w, &b})
    for (float& x : *v) x = round_to(x, s.dtype);
  const spconv::KernelMap map_h = spconv::KernelMap::build(coords, 3, 1);

  // The reference: out[n] = b + Σ_k Σ_ci f[nbr[k, n], ci] · w[k, ci] in double, over the CPU's map.
  ParityOutcome o;
  const Tensor nbr_h = map_h.nbr();  // by row, whatever the map's run order
  const auto* nbr = nbr_h.data_as<const int32_t>();
  o.ref.assign(n * s.co, 0.0);
  for (int64_t r = 0; r < n; ++r)
    for (int q = 0; q < s.co; ++q) {
      double acc = b[q];
      for (int64_t kk = 0; kk < k; ++kk) {
        const int32_t m = nbr[kk * n + r];
        if (m == n) continue;
        for (int i = 0; i < s.ci; ++i) acc += static_cast<double>(f[m * s.ci + i]) * w[(kk * s.ci + i) * s.co + q];
      }
      o.ref[r * s.co + q] = acc;
    }

  const Device d = s.cuda ? Device::cuda(0) : Device::cpu();
  const ConvVariant variant = s.cuda && without_sm90a() ? without_sm90a_code(s.variant) : s.variant;
  const Tensor feats = filled(f, {n, s.ci}, s.dtype).to(d), weight = filled(w, {k, s.ci, s.co}, s.dtype).to(d),
               bias = filled(b, {s.co}, s.dtype).to(d);
  const spconv::KernelMap map = s.cuda ? spconv::KernelMap::build(coords.to(d), 3, 1) : map_h;
  Tensor out = Tensor::empty({n, s.co}, s.dtype, d);
  spconv::ConvOptions opt;
  if (s.forced) opt.choice = ConvChoice{.variant = variant};
  const ConvChoice served = spconv::submanifold_conv(feats, map, weight, &bias.view(), out, opt);
  o.variant = spconv::to_string(served.variant);
  o.arch = spconv::arch_of(served.variant);
  o.got = to_double(out);
  return o;
}

std::string shape_of(const Spec& s) {
  return std::string(s.shell ? "shell R=40" : "random 2x12^3 at 0.35") + " K=27 Ci=" + std::to_string(s.ci) +
         " Co=" + std::to_string(s.co);
}

FRUGAL_PARITY_CASES(cases) {
  using V = ConvVariant;
  std::vector<Spec> specs;
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) specs.push_back({false, 17, 24, dt, false, V::cpu, false});
  specs.push_back({false, 17, 24, DType::f32, true, V::simt, false});
  specs.push_back({false, 64, 64, DType::f32, true, V::simt, false});
  for (DType dt : {DType::f16, DType::bf16}) {
    specs.push_back({false, 17, 24, dt, true, V::wmma, false});  // channels not multiples of 8: WMMA by rule
    specs.push_back({false, 64, 64, dt, true, V::wmma, true});
    specs.push_back({false, 64, 64, dt, true, V::simt, true});
    specs.push_back({false, 64, 64, dt, true, V::mma, true});
    specs.push_back({false, 64, 128, dt, true, V::mma, true});
    specs.push_back({false, 64, 128, dt, true, V::wgmma, true});
    specs.push_back({false, 128, 256, dt, true, V::wgmma, true});
    specs.push_back({false, 128, 128, dt, true, V::wgmma_ws, true});
    specs.push_back({false, 64, 64, dt, true, V::wgmma_ws2, true});
    specs.push_back({false, 64, 64, dt, true, V::halo_pipe, true});   // every tile handed on
    specs.push_back({true, 64, 64, dt, true, V::halo_pipe, true});    // tiles kept: one pass
    specs.push_back({true, 128, 128, dt, true, V::halo_pipe, true});  // two passes
    specs.push_back({true, 64, 64, dt, true, V::wgmma_ws, true});
  }
  for (const Spec& s : specs)
    cases.push_back({"spconv.submanifold_conv", shape_of(s), to_string(s.dtype), s.cuda ? "cuda" : "cpu",
                     spconv::to_string(s.variant), s.dtype == DType::f32 ? 1e-5 : 1e-2, [s] { return run_case(s); },
                     spconv::to_string(without_sm90a_code(s.variant))});
}

}  // namespace
}  // namespace frugal::testing
