// The sparse conv's backward against a dense float64 oracle (a dense 3D cross-correlation over the
// voxels' bounding grid and its adjoint, written as the plain loops of the transposed correlation, read
// at the active sites); the f64 forward; the padded form, N = 0 and N = 1; any subset of gradients;
// determinism; bad input; a tiny training loop against the same loop through the dense oracle; and, on a
// GPU, every wgrad variant and dgrad through the forward's variants against the CPU.
#include <omp.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/device_caps.h"
#include "core/spconv_backward_choose.h"
#include "frugal/half.h"
#include "frugal/sparse_conv.h"
#include "testing.h"

namespace frugal {
namespace {

using spconv::BackwardChoice;
using spconv::BackwardOptions;
using spconv::ConvChoice;
using spconv::ConvGradients;
using spconv::GradientBuffers;
using spconv::GradientRequest;
using spconv::kernel_volume;
using spconv::WgradChoice;
using spconv::WgradVariant;
using testing::expect_error;
using testing::test_seed;

constexpr GradientRequest kAll{.feats = true, .weight = true, .bias = true};

// ---- inputs ------------------------------------------------------------------------------------

// Voxels of `batches` batches, each cell of an extent³ box at `origin` active with probability
// `occupancy`; rows shuffled. Rows (b, x, y, z).
std::vector<int32_t> random_voxels(std::mt19937_64& rng, int batches, int extent, double occupancy, int origin) {
  std::bernoulli_distribution on(occupancy);
  std::vector<std::array<int32_t, 4>> rows;
  for (int b = 0; b < batches; ++b)
    for (int x = 0; x < extent; ++x)
      for (int y = 0; y < extent; ++y)
        for (int z = 0; z < extent; ++z)
          if (on(rng)) rows.push_back({b, origin + x, origin + y, origin + z});
  std::shuffle(rows.begin(), rows.end(), rng);
  std::vector<int32_t> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  return flat;
}

// The voxels within 0.87 of the sphere of radius r about the origin, batch 0, x slowest.
std::vector<int32_t> sphere_shell(int r) {
  std::vector<int32_t> flat;
  for (int x = -r - 1; x <= r + 1; ++x)
    for (int y = -r - 1; y <= r + 1; ++y)
      for (int z = -r - 1; z <= r + 1; ++z)
        if (std::abs(std::sqrt(double(x * x + y * y + z * z)) - r) < 0.87) flat.insert(flat.end(), {0, x, y, z});
  return flat;
}

Tensor coords_tensor(const std::vector<int32_t>& flat, Device d = Device::cpu()) {
  Tensor t = Tensor::empty({static_cast<int64_t>(flat.size() / 4), 4}, DType::i32);
  if (!flat.empty()) std::memcpy(t.data(), flat.data(), flat.size() * 4);
  return d.is_cpu() ? t : t.to(d);
}

std::vector<double> randn(size_t n, std::mt19937_64& rng, double stddev = 1.0) {
  std::normal_distribution<double> dist(0.0, stddev);
  std::vector<double> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// v as dt holds it (f64 unchanged).
std::vector<double> rounded(std::vector<double> v, DType dt) {
  if (dt != DType::f64)
    for (auto& x : v) x = testing::round_to(static_cast<float>(x), dt);
  return v;
}

// A tensor of dtype dt (any floating dtype, f64 included) holding v, on device d.
Tensor make(const std::vector<double>& v, std::initializer_list<int64_t> shape, DType dt, Device d = Device::cpu()) {
  Tensor t = Tensor::empty(shape, dt);
  for (size_t i = 0; i < v.size(); ++i) {
    if (dt == DType::f64)
      t.data_as<double>()[i] = v[i];
    else
      testing::store_as(dt, t.data(), static_cast<int64_t>(i), static_cast<float>(v[i]));
  }
  return d.is_cpu() ? t : t.to(d);
}

// A tensor full of NaN (all-ones bytes are NaN in every floating dtype): what is not written shows.
Tensor poisoned(std::initializer_list<int64_t> shape, DType dt, Device d = Device::cpu()) {
  Tensor t = Tensor::empty(shape, dt);
  if (t.nbytes()) std::memset(t.data(), 0xff, t.nbytes());
  return d.is_cpu() ? t : t.to(d);
}

// The elements of a floating tensor (any device, f64 included) as doubles.
std::vector<double> values(const Tensor& t) {
  if (t.dtype() != DType::f64) return testing::to_double(t);
  const Tensor h = t.device().is_cpu() ? t : t.to(Device::cpu());
  return std::vector<double>(h.data_as<double>(), h.data_as<double>() + h.numel());
}

std::vector<uint8_t> bytes(const Tensor& t) {
  const Tensor h = t.device().is_cpu() ? t : t.to(Device::cpu());
  const auto* p = static_cast<const uint8_t*>(h.data());
  return std::vector<uint8_t>(p, p + h.nbytes());
}

// The normalized error bound a dtype's gradients meet (f32 accumulation; the output rounded once).
double bound(DType dt) {
  switch (dt) {
    case DType::f64:
      return 1e-12;
    case DType::f32:
      return 1e-5;
    default:
      return 1e-2;
  }
}

// ---- the dense oracle --------------------------------------------------------------------------

// The offset of k, written out plainly: k runs over (i, j, l) with i slowest.
std::array<int, 3> oracle_offset(int k, int ks, int dil) {
  int idx = 0;
  for (int i = 0; i < ks; ++i)
    for (int j = 0; j < ks; ++j)
      for (int l = 0; l < ks; ++l, ++idx)
        if (idx == k) return {(i - ks / 2) * dil, (j - ks / 2) * dil, (l - ks / 2) * dil};
  return {0, 0, 0};
}

// The bounding grid of the voxels (every batch over one box), the cell of each voxel, and the cell at
// an offset from another (-1 outside the grid: zero padding).
struct Grid {
  int64_t batches = 0, ex = 0, ey = 0, ez = 0;
  std::vector<std::array<int64_t, 4>> site;  // voxel i at (b, x, y, z) relative to the box
  int64_t cells() const { return batches * ex * ey * ez; }
  int64_t cell(int64_t b, int64_t x, int64_t y, int64_t z) const {
    if (x < 0 || y < 0 || z < 0 || x >= ex || y >= ey || z >= ez) return -1;
    return ((b * ex + x) * ey + y) * ez + z;
  }
  // f(p, q) for every cell p and offset k with q = p + offset_k inside the grid.
  template <typename F>
  void for_each_pair(int k, int ks, int dil, F&& f) const {
    const auto off = oracle_offset(k, ks, dil);
    for (int64_t b = 0; b < batches; ++b)
      for (int64_t x = 0; x < ex; ++x)
        for (int64_t y = 0; y < ey; ++y)
          for (int64_t z = 0; z < ez; ++z) {
            const int64_t q = cell(b, x + off[0], y + off[1], z + off[2]);
            if (q >= 0) f(cell(b, x, y, z), q);
          }
  }
};

Grid grid_of(const std::vector<int32_t>& c) {
  Grid g;
  const int64_t n = c.size() / 4;
  if (n == 0) return g;
  int lo[4] = {INT_MAX, INT_MAX, INT_MAX, INT_MAX}, hi[4] = {INT_MIN, INT_MIN, INT_MIN, INT_MIN};
  for (int64_t i = 0; i < n; ++i)
    for (int a = 0; a < 4; ++a) lo[a] = std::min(lo[a], c[4 * i + a]), hi[a] = std::max(hi[a], c[4 * i + a]);
  g.batches = hi[0] + 1;
  g.ex = hi[1] - lo[1] + 1;
  g.ey = hi[2] - lo[2] + 1;
  g.ez = hi[3] - lo[3] + 1;
  for (int64_t i = 0; i < n; ++i)
    g.site.push_back({c[4 * i], c[4 * i + 1] - lo[1], c[4 * i + 2] - lo[2], c[4 * i + 3] - lo[3]});
  return g;
}

int64_t site_cell(const Grid& g, int64_t i) { return g.cell(g.site[i][0], g.site[i][1], g.site[i][2], g.site[i][3]); }

// Rows [n, ch] at the active sites of a zero grid [cells, ch], and back.
std::vector<double> scatter(const Grid& g, const std::vector<double>& rows, int ch) {
  std::vector<double> dense(g.cells() * ch, 0.0);
  for (size_t i = 0; i < g.site.size(); ++i)
    for (int c = 0; c < ch; ++c) dense[site_cell(g, i) * ch + c] = rows[i * ch + c];
  return dense;
}
std::vector<double> gather(const Grid& g, const std::vector<double>& dense, int ch) {
  std::vector<double> rows(g.site.size() * ch);
  for (size_t i = 0; i < g.site.size(); ++i)
    for (int c = 0; c < ch; ++c) rows[i * ch + c] = dense[site_cell(g, i) * ch + c];
  return rows;
}

struct Conv {
  int ks, dil, ci, co;
  int64_t w(int k, int c, int o) const { return (static_cast<int64_t>(k) * ci + c) * co + o; }
};

// The dense conv: y[p, o] = bias[o] + Σ_k Σ_c x[p + offset_k, c] · w[k, c, o] for every cell p.
std::vector<double> dense_conv(const Grid& g, const Conv& cv, const std::vector<double>& x,
                               const std::vector<double>& w, const std::vector<double>* bias) {
  std::vector<double> y(g.cells() * cv.co, 0.0);
  if (bias)
    for (int64_t p = 0; p < g.cells(); ++p)
      for (int o = 0; o < cv.co; ++o) y[p * cv.co + o] = (*bias)[o];
  for (int k = 0; k < kernel_volume(cv.ks); ++k)
    g.for_each_pair(k, cv.ks, cv.dil, [&](int64_t p, int64_t q) {
      for (int c = 0; c < cv.ci; ++c)
        for (int o = 0; o < cv.co; ++o) y[p * cv.co + o] += x[q * cv.ci + c] * w[cv.w(k, c, o)];
    });
  return y;
}

// Its adjoint, the transposed correlation: dx[q, c] = Σ_k Σ_o gy[q − offset_k, o] · w[k, c, o]
// (each pair p, q = p + offset_k passes gy[p] back to q).
std::vector<double> dense_grad_x(const Grid& g, const Conv& cv, const std::vector<double>& gy,
                                 const std::vector<double>& w) {
  std::vector<double> dx(g.cells() * cv.ci, 0.0);
  for (int k = 0; k < kernel_volume(cv.ks); ++k)
    g.for_each_pair(k, cv.ks, cv.dil, [&](int64_t p, int64_t q) {
      for (int c = 0; c < cv.ci; ++c)
        for (int o = 0; o < cv.co; ++o) dx[q * cv.ci + c] += gy[p * cv.co + o] * w[cv.w(k, c, o)];
    });
  return dx;
}

// dw[k, c, o] = Σ_p x[p + offset_k, c] · gy[p, o].
std::vector<double> dense_grad_w(const Grid& g, const Conv& cv, const std::vector<double>& x,
                                 const std::vector<double>& gy) {
  std::vector<double> dw(static_cast<size_t>(kernel_volume(cv.ks)) * cv.ci * cv.co, 0.0);
  for (int k = 0; k < kernel_volume(cv.ks); ++k)
    g.for_each_pair(k, cv.ks, cv.dil, [&](int64_t p, int64_t q) {
      for (int c = 0; c < cv.ci; ++c)
        for (int o = 0; o < cv.co; ++o) dw[cv.w(k, c, o)] += x[q * cv.ci + c] * gy[p * cv.co + o];
    });
  return dw;
}

// db[o] = Σ_p gy[p, o].
std::vector<double> dense_grad_b(const Grid& g, const Conv& cv, const std::vector<double>& gy) {
  std::vector<double> db(cv.co, 0.0);
  for (int64_t p = 0; p < g.cells(); ++p)
    for (int o = 0; o < cv.co; ++o) db[o] += gy[p * cv.co + o];
  return db;
}

// The oracle's three gradients at the active sites for rows f [n, ci], w, gy [n, co].
struct Grads {
  std::vector<double> feats, weight, bias;
};
Grads oracle(const std::vector<int32_t>& c, const Conv& cv, const std::vector<double>& f, const std::vector<double>& w,
             const std::vector<double>& gy) {
  const Grid g = grid_of(c);
  const auto x = scatter(g, f, cv.ci), gd = scatter(g, gy, cv.co);
  return {gather(g, dense_grad_x(g, cv, gd, w), cv.ci), dense_grad_w(g, cv, x, gd), dense_grad_b(g, cv, gd)};
}

// ---- one backward case -------------------------------------------------------------------------

struct Inputs {
  std::vector<int32_t> coords;
  int64_t n = 0;
  Conv conv{};
  std::vector<double> f, w, gy;  // rounded to the dtype
  Tensor feats, weight, grad_out;
  Tensor nbr;
};

Inputs inputs(std::vector<int32_t> coords, const Conv& cv, DType dt, Device d, std::mt19937_64& rng) {
  Inputs in;
  in.coords = std::move(coords);
  in.n = static_cast<int64_t>(in.coords.size() / 4);
  in.conv = cv;
  const int kv = kernel_volume(cv.ks);
  in.f = rounded(randn(in.n * cv.ci, rng), dt);
  in.w = rounded(randn(static_cast<size_t>(kv) * cv.ci * cv.co, rng, 1.0 / std::sqrt(double(kv) * cv.ci)), dt);
  in.gy = rounded(randn(in.n * cv.co, rng), dt);
  in.feats = make(in.f, {in.n, cv.ci}, dt, d);
  in.weight = make(in.w, {kv, cv.ci, cv.co}, dt, d);
  in.grad_out = make(in.gy, {in.n, cv.co}, dt, d);
  in.nbr = spconv::build_kernel_map(coords_tensor(in.coords, d), cv.ks, cv.dil);
  return in;
}

std::string describe(const Conv& cv, DType dt) {
  return "ks=" + std::to_string(cv.ks) + " dil=" + std::to_string(cv.dil) + " ci=" + std::to_string(cv.ci) +
         " co=" + std::to_string(cv.co) + " " + to_string(dt);
}

void expect_near(const Tensor& got, const std::vector<double>& ref, double tol, const char* what) {
  const auto v = values(got);
  ASSERT_EQ(v.size(), ref.size()) << what;
  for (double x : v) ASSERT_TRUE(std::isfinite(x)) << what << ": an element was not written";
  EXPECT_LE(testing::rel_error(v, ref), tol) << what;
}

void check_against_oracle(const std::vector<int32_t>& coords, const Conv& cv, DType dt, Device d,
                          std::mt19937_64& rng) {
  SCOPED_TRACE(describe(cv, dt) + " N=" + std::to_string(coords.size() / 4) + " on " + to_string(d));
  const Inputs in = inputs(coords, cv, dt, d, rng);
  const Grads ref = oracle(in.coords, cv, in.f, in.w, in.gy);
  const ConvGradients got = spconv::submanifold_conv_backward(in.grad_out, in.feats, in.nbr, in.weight, kAll);
  expect_near(got.feats, ref.feats, bound(dt), "grad_feats");
  expect_near(got.weight, ref.weight, bound(dt), "grad_weight");
  expect_near(got.bias, ref.bias, bound(dt), "grad_bias");
}

// Kernel sizes 1, 3, 5; dilations 1, 2; odd channel counts; Ci ≠ Co both ways, C → 8C among them.
const Conv kOracleConvs[] = {{1, 1, 5, 7}, {3, 1, 3, 5},   {3, 2, 7, 4},  {5, 1, 4, 32},
                             {5, 2, 6, 3}, {3, 1, 16, 16}, {3, 1, 32, 4}, {3, 2, 1, 1}};
const DType kCpuDtypes[] = {DType::f64, DType::f32, DType::f16, DType::bf16};

// ---- CPU ---------------------------------------------------------------------------------------

TEST(SpconvBackward, MatchesTheDenseAdjointOracle) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  for (const Conv& cv : kOracleConvs)
    for (DType dt : kCpuDtypes) check_against_oracle(random_voxels(rng, 2, 8, 0.3, -4), cv, dt, Device::cpu(), rng);
}

TEST(SpconvBackward, OneVoxelHasOnlyTheCentreOffset) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  for (DType dt : kCpuDtypes) check_against_oracle({1, 3, -2, 7}, Conv{3, 1, 5, 8}, dt, Device::cpu(), rng);
  // Written out: grad_feats = grad_out · w[13]ᵀ, grad_weight[13] = feats ⊗ grad_out and 0 elsewhere.
  const Inputs in = inputs({0, 0, 0, 0}, Conv{3, 1, 2, 3}, DType::f64, Device::cpu(), rng);
  const ConvGradients g = spconv::submanifold_conv_backward(in.grad_out, in.feats, in.nbr, in.weight, kAll);
  const auto gf = values(g.feats), gw = values(g.weight), gb = values(g.bias);
  for (int c = 0; c < 2; ++c) {
    double want = 0;
    for (int o = 0; o < 3; ++o) want += in.gy[o] * in.w[(13 * 2 + c) * 3 + o];
    EXPECT_NEAR(gf[c], want, 1e-14);
  }
  for (int k = 0; k < 27; ++k)
    for (int c = 0; c < 2; ++c)
      for (int o = 0; o < 3; ++o) EXPECT_EQ(gw[(k * 2 + c) * 3 + o], k == 13 ? in.f[c] * in.gy[o] : 0.0);
  for (int o = 0; o < 3; ++o) EXPECT_EQ(gb[o], in.gy[o]);
}

void check_no_voxels(Device d) {
  for (DType dt : {DType::f32, DType::f16}) {
    const Tensor nbr = spconv::build_kernel_map(coords_tensor({}, d), 3, 1);
    const Tensor grad_out = Tensor::empty({0, 6}, dt, d), w = Tensor::zeros({27, 4, 6}, dt, d);
    for (int64_t rows : {0, 1}) {  // the plain form, and the padded form's one row
      const Tensor feats = Tensor::zeros({rows, 4}, dt, d);
      Tensor gf = poisoned({rows, 4}, dt, d), gw = poisoned({27, 4, 6}, dt, d), gb = poisoned({6}, dt, d);
      const BackwardChoice c = spconv::submanifold_conv_backward(grad_out, feats, nbr, w,
                                                                 GradientBuffers{&gf.view(), &gw.view(), &gb.view()});
      EXPECT_FALSE(c.dgrad || c.wgrad) << "nothing ran";
      for (const Tensor* t : {&gf, &gw, &gb})
        for (double v : values(*t)) EXPECT_EQ(v, 0.0);
    }
  }
}

TEST(SpconvBackward, NoVoxelsGiveZeroGradients) { check_no_voxels(Device::cpu()); }

// The padded form: feats [N + 1, Ci] (row N never read: NaN there changes nothing) gets grad_feats
// [N + 1, Ci] whose first N rows are the plain form's and whose row N is zero.
void check_padded_form(Device d) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  for (DType dt : {DType::f32, DType::f16}) {
    const Inputs in = inputs(random_voxels(rng, 1, 8, 0.3, 0), Conv{3, 1, 8, 8}, dt, d, rng);
    auto f = in.f;
    f.insert(f.end(), 8, NAN);
    const Tensor padded = make(f, {in.n + 1, 8}, dt, d);
    const ConvGradients a = spconv::submanifold_conv_backward(in.grad_out, padded, in.nbr, in.weight, kAll);
    const ConvGradients b = spconv::submanifold_conv_backward(in.grad_out, in.feats, in.nbr, in.weight, kAll);
    ASSERT_EQ(a.feats.size(0), in.n + 1);
    const auto pa = bytes(a.feats), pb = bytes(b.feats);
    EXPECT_TRUE(std::equal(pb.begin(), pb.end(), pa.begin()));
    for (size_t i = pb.size(); i < pa.size(); ++i) EXPECT_EQ(pa[i], 0) << "row N is zero";
    EXPECT_EQ(bytes(a.weight), bytes(b.weight));
    EXPECT_EQ(bytes(a.bias), bytes(b.bias));
  }
}

TEST(SpconvBackward, PaddedFeatsGetAPaddedGradient) { check_padded_form(Device::cpu()); }

// Each gradient alone equals the same gradient computed with the others, and what was not asked for
// stays unset.
void check_subsets(Device d) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  const Inputs in = inputs(random_voxels(rng, 2, 8, 0.3, -4), Conv{3, 1, 16, 24}, DType::f32, d, rng);
  const ConvGradients all = spconv::submanifold_conv_backward(in.grad_out, in.feats, in.nbr, in.weight, kAll);
  const ConvGradients f =
      spconv::submanifold_conv_backward(in.grad_out, in.feats, in.nbr, in.weight, {.feats = true, .weight = false});
  const ConvGradients w =
      spconv::submanifold_conv_backward(in.grad_out, in.feats, in.nbr, in.weight, {.feats = false, .weight = true});
  const ConvGradients b = spconv::submanifold_conv_backward(in.grad_out, in.feats, in.nbr, in.weight,
                                                            {.feats = false, .weight = false, .bias = true});
  EXPECT_EQ(bytes(f.feats), bytes(all.feats));
  EXPECT_EQ(bytes(w.weight), bytes(all.weight));
  EXPECT_EQ(bytes(b.bias), bytes(all.bias));
  EXPECT_FALSE(f.weight.defined() || f.bias.defined() || f.choice.wgrad);
  EXPECT_FALSE(w.feats.defined() || w.bias.defined() || w.choice.dgrad);
  EXPECT_FALSE(b.feats.defined() || b.weight.defined() || b.choice.dgrad);
}

TEST(SpconvBackward, AnySubsetOfTheGradients) { check_subsets(Device::cpu()); }

// The KernelMap form and the map tensor form give the same bits where the map runs in its given order
// (in Morton order grad_weight sums the rows in that order: the same within rounding); the choices
// reported are the ones choose_conv_backward names.
void check_map_forms(Device d) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  for (DType dt : {DType::f32, DType::bf16})
    for (spconv::RowOrder order : {spconv::RowOrder::given, spconv::RowOrder::morton}) {
    SCOPED_TRACE(std::string(to_string(dt)) + " " + spconv::to_string(order));
    const Inputs in = inputs(random_voxels(rng, 2, 10, 0.3, -5), Conv{3, 1, 32, 32}, dt, d, rng);
    const spconv::KernelMap map = spconv::KernelMap::build(coords_tensor(in.coords, d), 3, 1, nullptr, order);
    ASSERT_EQ(map.stats().order, order);
    const ConvGradients a = spconv::submanifold_conv_backward(in.grad_out, in.feats, map, in.weight, kAll);
    const ConvGradients b = spconv::submanifold_conv_backward(in.grad_out, in.feats, in.nbr, in.weight, kAll);
    EXPECT_EQ(bytes(a.feats), bytes(b.feats));
    if (order == spconv::RowOrder::given)
      EXPECT_EQ(bytes(a.weight), bytes(b.weight));
    else
      EXPECT_LE(testing::rel_error(values(a.weight), values(b.weight)), dt == DType::f32 ? 1e-5 : 1e-2);
    EXPECT_EQ(bytes(a.bias), bytes(b.bias));
    const GradientBuffers bufs{&a.feats.view(), &a.weight.view(), &a.bias.view()};
    const BackwardChoice want = spconv::choose_conv_backward(in.grad_out, in.feats, map, in.weight, bufs);
    ASSERT_TRUE(a.choice.dgrad && a.choice.wgrad && want.dgrad && want.wgrad);
    EXPECT_EQ(spconv::to_string(*a.choice.dgrad), spconv::to_string(*want.dgrad));
    EXPECT_EQ(spconv::to_string(*a.choice.wgrad), spconv::to_string(*want.wgrad));
  }
}

TEST(SpconvBackward, KernelMapAndMapTensorAgree) { check_map_forms(Device::cpu()); }

TEST(SpconvBackward, ReportsTheCpuChoices) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  const Inputs in = inputs(random_voxels(rng, 1, 6, 0.5, 0), Conv{3, 1, 8, 16}, DType::f32, Device::cpu(), rng);
  const ConvGradients g = spconv::submanifold_conv_backward(in.grad_out, in.feats, in.nbr, in.weight, kAll);
  ASSERT_TRUE(g.choice.dgrad && g.choice.wgrad);
  EXPECT_EQ(spconv::to_string(*g.choice.dgrad),
            "cpu(tile_co 8, tile_rows 16, map order, splits 1, chunk_rows " + std::to_string(in.n) + ")")
      << "dgrad is the forward over grad_out: Co = 16 in, Ci = 8 out";
  EXPECT_EQ(spconv::to_string(*g.choice.wgrad), "cpu(splits 1, chunk_rows " + std::to_string(in.n) + ")");
}

TEST(SpconvBackward, IsDeterministicAcrossRunsAndThreadCounts) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    const Inputs in = inputs(random_voxels(rng, 2, 14, 0.3, -7), Conv{3, 1, 24, 40}, dt, Device::cpu(), rng);
    const ConvGradients a = spconv::submanifold_conv_backward(in.grad_out, in.feats, in.nbr, in.weight, kAll);
    const ConvGradients b = spconv::submanifold_conv_backward(in.grad_out, in.feats, in.nbr, in.weight, kAll);
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    const ConvGradients c = spconv::submanifold_conv_backward(in.grad_out, in.feats, in.nbr, in.weight, kAll);
    omp_set_num_threads(threads);
    for (const ConvGradients* x : {&b, &c}) {
      EXPECT_EQ(bytes(x->feats), bytes(a.feats)) << to_string(dt);
      EXPECT_EQ(bytes(x->weight), bytes(a.weight)) << to_string(dt);
      EXPECT_EQ(bytes(x->bias), bytes(a.bias)) << to_string(dt);
    }
  }
}

TEST(SpconvForwardF64, MatchesTheDenseOracle) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  for (const Conv& cv : {Conv{3, 1, 3, 5}, Conv{5, 2, 4, 32}, Conv{1, 1, 2, 2}}) {
    const Inputs in = inputs(random_voxels(rng, 2, 8, 0.3, -4), cv, DType::f64, Device::cpu(), rng);
    const auto b = randn(cv.co, rng);
    const Tensor bias = make(b, {cv.co}, DType::f64);
    const Tensor out = spconv::submanifold_conv(in.feats, in.nbr, in.weight, &bias.view());
    const Grid g = grid_of(in.coords);
    const auto ref = gather(g, dense_conv(g, cv, scatter(g, in.f, cv.ci), in.w, &b), cv.co);
    EXPECT_LE(testing::rel_error(values(out), ref), 1e-13) << describe(cv, DType::f64);
  }
}

// ---- bad input ---------------------------------------------------------------------------------

void check_errors(Device d) {
  const Tensor coords = coords_tensor({0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0}, d);
  const Tensor nbr = spconv::build_kernel_map(coords, 3, 1);
  const Tensor feats = Tensor::zeros({3, 4}, DType::f32, d), w = Tensor::zeros({27, 4, 5}, DType::f32, d);
  const Tensor gy = Tensor::zeros({3, 5}, DType::f32, d);
  Tensor gf = Tensor::zeros({3, 4}, DType::f32, d), gw = Tensor::zeros({27, 4, 5}, DType::f32, d);
  Tensor gb = Tensor::zeros({5}, DType::f32, d);
  auto run = [&](const Tensor& grad_out, const Tensor& f, const Tensor& m, const Tensor& wt, GradientBuffers g) {
    spconv::submanifold_conv_backward(grad_out, f, m, wt, g);
  };
  const GradientBuffers all{&gf.view(), &gw.view(), &gb.view()};
  expect_error(
      [&] {
        run(Tensor::zeros({3, 6}, DType::f32, d), feats, nbr, w, all);
      },
      ErrorCode::invalid_argument, {"[spconv::submanifold_conv_backward]", "grad_out must have shape [3, 5]"});
  expect_error(
      [&] {
        run(Tensor::zeros({3, 5}, DType::f16, d), feats, nbr, w, all);
      },
      ErrorCode::invalid_argument, {"share one dtype", "f32, f32, f16"});
  expect_error(
      [&] {
        run(gy, feats, nbr, Tensor::zeros({9, 4, 5}, DType::f32, d), all);
      },
      ErrorCode::invalid_argument, {"weight must have shape [27, 4, *]"});
  expect_error(
      [&] {
        run(gy, Tensor::zeros({5, 4}, DType::f32, d), nbr, w, all);
      },
      ErrorCode::invalid_argument, {"feats must have N = 3 rows"});
  Tensor gw_bad = Tensor::zeros({27, 5, 4}, DType::f32, d), gb_f16 = Tensor::zeros({5}, DType::f16, d);
  Tensor gf_bad = Tensor::zeros({4, 4}, DType::f32, d);
  expect_error(
      [&] {
        run(gy, feats, nbr, w, {nullptr, &gw_bad.view(), nullptr});
      },
      ErrorCode::invalid_argument, {"grad_weight must have shape [27, 4, 5]"});
  expect_error(
      [&] {
        run(gy, feats, nbr, w, {nullptr, nullptr, &gb_f16.view()});
      },
      ErrorCode::invalid_argument, {"grad_bias must have dtype f32, got f16"});
  expect_error(
      [&] {
        run(gy, feats, nbr, w, {&gf_bad.view(), nullptr, nullptr});
      },
      ErrorCode::invalid_argument, {"grad_feats must have shape [3, 4]"});
  expect_error(
      [&] {
        run(gy, feats, nbr, w, {nullptr, &w.view(), nullptr});
      },
      ErrorCode::invalid_argument, {"grad_weight overlaps an input or another gradient"});
  expect_error(
      [&] {
        run(gy, feats, nbr, w, {&gf.view(), nullptr, &gf.view()});
      },
      ErrorCode::invalid_argument, {"overlaps"});
  expect_error(
      [&] {
        run(gy, feats, Tensor::zeros({27, 3}, DType::i64, d), w, all);
      },
      ErrorCode::invalid_argument, {"nbr must have dtype i32"});
  BackwardOptions o;
  o.map_stats = spconv::MapStats{.rows = 4, .offsets = 27, .valid = true};
  expect_error([&] { spconv::submanifold_conv_backward(gy, feats, nbr, w, all, o); }, ErrorCode::invalid_argument,
               {"map_stats describe a map [27, 4]"});
  expect_error([&] { spconv::submanifold_conv_backward(gy, feats, spconv::KernelMap{}, w, all); },
               ErrorCode::invalid_argument, {"the KernelMap is empty"});
}

TEST(SpconvBackwardErrors, ShapesDtypesLayoutsAndOverlaps) { check_errors(Device::cpu()); }

// A checked map entry outside [0, N] raises naming it; unchecked, it counts as absent (as the sentinel).
void check_bad_map_entries(Device d) {
  const Tensor coords = coords_tensor({0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0});
  std::vector<int32_t> m(27 * 4);
  const Tensor good = spconv::build_kernel_map(coords, 3, 1);
  std::memcpy(m.data(), good.data(), m.size() * 4);
  ASSERT_EQ(m[5 * 4 + 2], 4) << "the sentinel, replaced below";
  m[5 * 4 + 2] = 9;
  Tensor bad = Tensor::empty({27, 4}, DType::i32);
  std::memcpy(bad.data(), m.data(), m.size() * 4);
  std::mt19937_64 rng(5);
  const Tensor feats = make(randn(16, rng), {4, 4}, DType::f32, d),
               w = make(randn(27 * 20, rng), {27, 4, 5}, DType::f32, d);
  const Tensor gy = make(randn(20, rng), {4, 5}, DType::f32, d);
  const Tensor bad_d = d.is_cpu() ? bad : bad.to(d), good_d = d.is_cpu() ? good : good.to(d);
  expect_error([&] { spconv::submanifold_conv_backward(gy, feats, bad_d, w, kAll); }, ErrorCode::out_of_range,
               {"nbr[5, 2] = 9", "outside [0, N] = [0, 4]"});
  BackwardOptions o;
  o.check = spconv::MapCheck::unchecked;
  const ConvGradients a =
      spconv::submanifold_conv_backward(gy, feats, bad_d, w, {.feats = false, .weight = true, .bias = true}, o);
  const ConvGradients b =
      spconv::submanifold_conv_backward(gy, feats, good_d, w, {.feats = false, .weight = true, .bias = true});
  EXPECT_EQ(bytes(a.weight), bytes(b.weight));
  EXPECT_EQ(bytes(a.bias), bytes(b.bias));
}

TEST(SpconvBackwardErrors, MapEntriesOutsideTheRange) { check_bad_map_entries(Device::cpu()); }

TEST(SpconvBackwardErrors, ForcedChoicesThatCannotRunOnTheCpu) {
  const Tensor nbr = spconv::build_kernel_map(coords_tensor({0, 0, 0, 0, 0, 0, 0, 1}), 3, 1);
  const Tensor feats = Tensor::zeros({2, 8}, DType::f16), w = Tensor::zeros({27, 8, 8}, DType::f16);
  const Tensor gy = Tensor::zeros({2, 8}, DType::f16);
  BackwardOptions o;
  o.wgrad = WgradChoice{.variant = WgradVariant::wmma};
  expect_error([&] { spconv::submanifold_conv_backward(gy, feats, nbr, w, kAll, o); }, ErrorCode::unsupported,
               {"[spconv::submanifold_conv_backward]", "the forced wgrad choice wmma(", "needs a CUDA device"});
  o.wgrad = WgradChoice{.variant = WgradVariant::cpu, .splits = 2};
  expect_error([&] { spconv::submanifold_conv_backward(gy, feats, nbr, w, kAll, o); }, ErrorCode::unsupported,
               {"the cpu variant runs N in one chunk"});
  o.wgrad.reset();
  o.dgrad = ConvChoice{.variant = spconv::ConvVariant::simt};
  expect_error([&] { spconv::submanifold_conv_backward(gy, feats, nbr, w, kAll, o); }, ErrorCode::unsupported,
               {"the forced dgrad choice simt(", "needs a CUDA device"});
  o.dgrad = ConvChoice{.variant = spconv::ConvVariant::cpu};
  o.wgrad = WgradChoice{.variant = WgradVariant::cpu};
  const ConvGradients g = spconv::submanifold_conv_backward(gy, feats, nbr, w, kAll, o);
  EXPECT_EQ(g.choice.dgrad->variant, spconv::ConvVariant::cpu);
  EXPECT_EQ(spconv::to_string(*g.choice.wgrad), "cpu(splits 1, chunk_rows 2)");
}

// ---- training ----------------------------------------------------------------------------------

// A net of three 3×3×3 submanifold convs (4 → 8 → 8 → 1, ReLU between) fitting a smooth function of the
// coordinates on a voxelized sphere by plain SGD on the mean squared error: through frugal's forward and
// backward in f32 on the CPU, and through the dense oracle's conv and adjoint in double, from the same
// initial weights. The two loss curves must agree at every step (to 1e-4, f32 against double) and fall.
struct Layer {
  Conv conv;
  std::vector<double> w, b;
};

std::vector<Layer> initial_net(std::mt19937_64& rng) {
  std::vector<Layer> net;
  for (auto [ci, co] : {std::pair{4, 8}, std::pair{8, 8}, std::pair{8, 1}}) {
    const double s = 1.0 / std::sqrt(27.0 * ci);
    std::uniform_real_distribution<double> u(-s, s);
    Layer l{Conv{3, 1, ci, co}, std::vector<double>(27 * ci * co), std::vector<double>(co)};
    for (double& x : l.w) x = static_cast<float>(u(rng));
    for (double& x : l.b) x = static_cast<float>(u(rng));
    net.push_back(std::move(l));
  }
  return net;
}

double relu(double x) { return x > 0 ? x : 0; }

// One SGD step of the net on (x, target) rows, through `conv` and `backward` (grad_out, input, layer →
// grad of the input, of w and of b); returns the loss before the step.
template <typename ConvF, typename BackF>
double sgd_step(std::vector<Layer>& net, const std::vector<double>& x, const std::vector<double>& target, double lr,
                ConvF&& conv, BackF&& backward) {
  const size_t n = target.size();
  std::vector<std::vector<double>> in{x}, pre;  // each layer's input and pre-activation
  for (size_t i = 0; i < net.size(); ++i) {
    pre.push_back(conv(in.back(), net[i]));
    if (i + 1 < net.size()) {
      std::vector<double> a = pre.back();
      for (double& v : a) v = relu(v);
      in.push_back(std::move(a));
    }
  }
  double loss = 0;
  std::vector<double> g(n);
  for (size_t r = 0; r < n; ++r) {
    const double e = pre.back()[r] - target[r];
    loss += e * e / n;
    g[r] = 2 * e / n;
  }
  for (size_t i = net.size(); i-- > 0;) {
    std::vector<double> gx, gw, gb;
    backward(g, in[i], net[i], i > 0, gx, gw, gb);
    for (size_t j = 0; j < gw.size(); ++j) net[i].w[j] -= lr * gw[j];
    for (size_t j = 0; j < gb.size(); ++j) net[i].b[j] -= lr * gb[j];
    if (i > 0) {
      for (size_t j = 0; j < gx.size(); ++j) gx[j] *= pre[i - 1][j] > 0 ? 1.0 : 0.0;
      g = std::move(gx);
    }
  }
  return loss;
}

TEST(SpconvTraining, LossFallsLikeTheDenseReference) {
  std::mt19937_64 rng(2024);  // fixed: the test asserts how far this loss falls
  const int radius = 5;
  const std::vector<int32_t> c = sphere_shell(radius);
  const int64_t n = static_cast<int64_t>(c.size() / 4);
  std::vector<double> x, target;
  for (int64_t i = 0; i < n; ++i) {
    const double px = double(c[4 * i + 1]) / radius, py = double(c[4 * i + 2]) / radius,
                 pz = double(c[4 * i + 3]) / radius;
    x.insert(x.end(), {px, py, pz, 1.0});
    target.push_back(std::sin(1.3 * px) * std::cos(0.7 * py) + 0.5 * pz);
  }
  const Tensor nbr = spconv::build_kernel_map(coords_tensor(c), 3, 1);
  const Grid grid = grid_of(c);
  auto to_f32 = [](const std::vector<double>& v) { return rounded(v, DType::f32); };

  auto frugal_conv = [&](const std::vector<double>& in, const Layer& l) {
    const Tensor f = make(in, {n, l.conv.ci}, DType::f32), w = make(l.w, {27, l.conv.ci, l.conv.co}, DType::f32),
                 b = make(l.b, {l.conv.co}, DType::f32);
    return values(spconv::submanifold_conv(f, nbr, w, &b.view()));
  };
  auto frugal_back = [&](const std::vector<double>& g, const std::vector<double>& in, const Layer& l, bool need_x,
                         std::vector<double>& gx, std::vector<double>& gw, std::vector<double>& gb) {
    const Tensor f = make(in, {n, l.conv.ci}, DType::f32), w = make(l.w, {27, l.conv.ci, l.conv.co}, DType::f32),
                 gy = make(g, {n, l.conv.co}, DType::f32);
    const ConvGradients r =
        spconv::submanifold_conv_backward(gy, f, nbr, w, {.feats = need_x, .weight = true, .bias = true});
    if (need_x) gx = values(r.feats);
    gw = values(r.weight);
    gb = values(r.bias);
  };
  auto dense_forward = [&](const std::vector<double>& in, const Layer& l) {
    return gather(grid, dense_conv(grid, l.conv, scatter(grid, in, l.conv.ci), l.w, &l.b), l.conv.co);
  };
  auto dense_back = [&](const std::vector<double>& g, const std::vector<double>& in, const Layer& l, bool need_x,
                        std::vector<double>& gx, std::vector<double>& gw, std::vector<double>& gb) {
    const auto gd = scatter(grid, g, l.conv.co);
    if (need_x) gx = gather(grid, dense_grad_x(grid, l.conv, gd, l.w), l.conv.ci);
    gw = dense_grad_w(grid, l.conv, scatter(grid, in, l.conv.ci), gd);
    gb = dense_grad_b(grid, l.conv, gd);
  };

  std::vector<Layer> ours = initial_net(rng), dense = ours;
  const double lr = 0.05;
  const int steps = 60;
  std::vector<double> lf, ld;
  for (int s = 0; s < steps; ++s) {
    lf.push_back(sgd_step(ours, to_f32(x), to_f32(target), lr, frugal_conv, frugal_back));
    for (Layer& l : ours) l.w = to_f32(l.w), l.b = to_f32(l.b);  // frugal's weights live in f32
    ld.push_back(sgd_step(dense, x, target, lr, dense_forward, dense_back));
  }
  SCOPED_TRACE("N = " + std::to_string(n) + ", loss " + std::to_string(lf.front()) + " -> " +
               std::to_string(lf.back()));
  for (int s = 0; s < steps; ++s) EXPECT_NEAR(lf[s], ld[s], 1e-4 * ld[s]) << "step " << s;
  EXPECT_LT(lf.back(), 0.5 * lf.front()) << "the loss falls";
}

// ---- CUDA --------------------------------------------------------------------------------------

const Device kGpu = Device::cuda(0);

TEST(SpconvBackwardCuda, MatchesTheDenseAdjointOracle) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  for (const Conv& cv : kOracleConvs)
    for (DType dt : {DType::f32, DType::f16, DType::bf16})
      check_against_oracle(random_voxels(rng, 2, 8, 0.3, -4), cv, dt, kGpu, rng);
  for (DType dt : {DType::f32, DType::bf16}) check_against_oracle({1, 3, -2, 7}, Conv{3, 1, 5, 8}, dt, kGpu, rng);
}

TEST(SpconvBackwardCuda, NoVoxelsGiveZeroGradients) {
  FRUGAL_SKIP_WITHOUT_GPU();
  check_no_voxels(kGpu);
}
TEST(SpconvBackwardCuda, PaddedFeatsGetAPaddedGradient) {
  FRUGAL_SKIP_WITHOUT_GPU();
  check_padded_form(kGpu);
}
TEST(SpconvBackwardCuda, AnySubsetOfTheGradients) {
  FRUGAL_SKIP_WITHOUT_GPU();
  check_subsets(kGpu);
}
TEST(SpconvBackwardCuda, KernelMapAndMapTensorAgree) {
  FRUGAL_SKIP_WITHOUT_GPU();
  check_map_forms(kGpu);
}
TEST(SpconvBackwardCuda, ShapesDtypesLayoutsAndOverlaps) {
  FRUGAL_SKIP_WITHOUT_GPU();
  check_errors(kGpu);
}
TEST(SpconvBackwardCuda, MapEntriesOutsideTheRange) {
  FRUGAL_SKIP_WITHOUT_GPU();
  check_bad_map_entries(kGpu);
}

TEST(SpconvBackwardCuda, RefusesF64) {
  FRUGAL_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(1);
  const Inputs in = inputs({0, 0, 0, 0, 0, 0, 0, 1}, Conv{3, 1, 2, 2}, DType::f64, kGpu, rng);
  expect_error([&] { spconv::submanifold_conv_backward(in.grad_out, in.feats, in.nbr, in.weight, kAll); },
               ErrorCode::unsupported, {"f64 runs on the CPU only"});
  expect_error([&] { spconv::submanifold_conv(in.feats, in.nbr, in.weight); }, ErrorCode::unsupported,
               {"f64 runs on the CPU only"});
}

// Every wgrad variant (by rule, simt, wmma, mma and its tiles; splits by rule and forced, down to one step
// a chunk) and
// dgrad through every forward variant the device runs, against the CPU on the same inputs; each forced
// choice is the one that served, and a second run gives the same bits.
void check_every_variant(const std::vector<int32_t>& coords, std::initializer_list<std::pair<int, int>> shapes,
                         std::mt19937_64& rng) {
  using CV = spconv::ConvVariant;
  const std::optional<WgradChoice> wgrads[] = {std::nullopt,
                                               WgradChoice{.variant = WgradVariant::simt},
                                               WgradChoice{.variant = WgradVariant::wmma},
                                               WgradChoice{.variant = WgradVariant::simt, .chunk_rows = 32},
                                               WgradChoice{.variant = WgradVariant::wmma, .chunk_rows = 32},
                                               WgradChoice{.variant = WgradVariant::wmma, .chunk_rows = 1000},
                                               WgradChoice{.variant = WgradVariant::wmma, .splits = 1},
                                               WgradChoice{.variant = WgradVariant::mma},
                                               WgradChoice{.variant = WgradVariant::mma, .chunk_rows = 32},
                                               WgradChoice{.variant = WgradVariant::mma, .splits = 1},
                                               WgradChoice{.variant = WgradVariant::mma, .tile_ci = 64, .tile_co = 64},
                                               WgradChoice{.variant = WgradVariant::mma, .tile_ci = 128, .tile_co = 128}};
  const std::optional<ConvChoice> dgrads[] = {std::nullopt,
                                              ConvChoice{.variant = CV::simt},
                                              ConvChoice{.variant = CV::wmma, .tile_co = 64},
                                              ConvChoice{.variant = CV::wmma, .tile_co = 128},
                                              ConvChoice{.variant = CV::mma},
                                              ConvChoice{.variant = CV::wgmma},
                                              ConvChoice{.variant = CV::wgmma_ws},
                                              ConvChoice{.variant = CV::wgmma_ws2},
                                              ConvChoice{.variant = CV::halo_pipe}};
  for (auto [ci, co] : shapes)
    for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
      const Inputs h = inputs(coords, Conv{3, 1, ci, co}, dt, Device::cpu(), rng);
      const ConvGradients ref = spconv::submanifold_conv_backward(h.grad_out, h.feats, h.nbr, h.weight, kAll);
      const Tensor fd = h.feats.to(kGpu), wd = h.weight.to(kGpu), gyd = h.grad_out.to(kGpu);
      const spconv::KernelMap map = spconv::KernelMap::build(coords_tensor(coords, kGpu), 3, 1);
      std::vector<BackwardOptions> runs;  // each wgrad choice with dgrad by rule, then each dgrad choice
      for (const auto& w : wgrads) runs.push_back(BackwardOptions{.wgrad = w});
      for (const auto& d : dgrads) runs.push_back(BackwardOptions{.dgrad = d});
      for (const BackwardOptions& o : runs) {
        Tensor gf = poisoned({h.n, ci}, dt, kGpu), gw = poisoned({27, ci, co}, dt, kGpu), gb = poisoned({co}, dt, kGpu);
        const GradientBuffers bufs{&gf.view(), &gw.view(), &gb.view()};
        BackwardChoice want;
        try {
          want = spconv::choose_conv_backward(gyd, fd, map, wd, bufs, o);
        } catch (const Error& e) {
          if (e.code() != ErrorCode::unsupported) throw;
          continue;  // a forced variant this device or shape does not run
        }
        SCOPED_TRACE(describe(Conv{3, 1, ci, co}, dt) + " dgrad " + spconv::to_string(*want.dgrad) + ", wgrad " +
                     spconv::to_string(*want.wgrad));
        const BackwardChoice served = spconv::submanifold_conv_backward(gyd, fd, map, wd, bufs, o);
        EXPECT_EQ(spconv::to_string(*served.dgrad), spconv::to_string(*want.dgrad));
        EXPECT_EQ(spconv::to_string(*served.wgrad), spconv::to_string(*want.wgrad));
        if (o.dgrad) EXPECT_EQ(served.dgrad->variant, o.dgrad->variant);
        if (o.wgrad) EXPECT_EQ(served.wgrad->variant, o.wgrad->variant);
        if (!o.wgrad && dt != DType::f32 && ci % 8 == 0 && co % 8 == 0)
          EXPECT_EQ(served.wgrad->variant, WgradVariant::mma) << "by rule: mma where its copies fit";
        expect_near(gf, values(ref.feats), bound(dt), "grad_feats");
        expect_near(gw, values(ref.weight), bound(dt), "grad_weight");
        expect_near(gb, values(ref.bias), bound(dt), "grad_bias");
        const auto bits_f = bytes(gf), bits_w = bytes(gw), bits_b = bytes(gb);
        spconv::submanifold_conv_backward(gyd, fd, map, wd, bufs, o);
        EXPECT_EQ(bytes(gf), bits_f) << "grad_feats is deterministic";
        EXPECT_EQ(bytes(gw), bits_w) << "grad_weight is deterministic";
        EXPECT_EQ(bytes(gb), bits_b) << "grad_bias is deterministic";
      }
    }
}

TEST(SpconvBackwardCuda, EveryVariantMatchesTheCpu) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  check_every_variant(random_voxels(rng, 2, 14, 0.3, -7),
                      {{64, 64}, {17, 24}, {16, 128}, {128, 16}, {8, 3}, {136, 144}}, rng);  // 136 x 144: part tiles
  check_every_variant(sphere_shell(18), {{64, 64}, {128, 128}}, rng);  // tiles the halo kernel keeps
}

// ~150 voxels: small enough for compute-sanitizer's racecheck.
TEST(SpconvBackwardCuda, EveryVariantOnATinyInput) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  check_every_variant(random_voxels(rng, 2, 6, 0.35, -3), {{16, 72}, {17, 24}}, rng);
}

// The rules' split depends on the shape only: the same on every GPU, the same bits on a rerun.
TEST(SpconvBackwardCuda, SplitsByShapeAreBitwiseReproducible) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  const auto c = random_voxels(rng, 2, 40, 0.3, -20);  // ~38K rows: many chunks
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    const Inputs in = inputs(c, Conv{3, 1, 64, 64}, dt, kGpu, rng);
    const ConvGradients a = spconv::submanifold_conv_backward(in.grad_out, in.feats, in.nbr, in.weight, kAll);
    const ConvGradients b = spconv::submanifold_conv_backward(in.grad_out, in.feats, in.nbr, in.weight, kAll);
    ASSERT_TRUE(a.choice.wgrad);
    EXPECT_GT(a.choice.wgrad->splits, 1) << spconv::to_string(*a.choice.wgrad);
    EXPECT_EQ(bytes(a.weight), bytes(b.weight)) << to_string(dt);
    EXPECT_EQ(bytes(a.bias), bytes(b.bias)) << to_string(dt);
    EXPECT_EQ(bytes(a.feats), bytes(b.feats)) << to_string(dt);
    for (const DeviceCaps& caps :
         {DeviceCaps::gpu(8, 0, 108), DeviceCaps::gpu(12, 0, 170), DeviceCaps::gpu(9, 0, 132, true)}) {
      spconv::backend::WgradArgs w;
      w.n = in.n;
      w.k = 27;
      w.ci = w.co = 64;
      w.dtype = dt;
      EXPECT_EQ(spconv::choose(w, caps), *a.choice.wgrad) << to_string(caps);
    }
  }
}

// Row offsets past 2^31 elements: N·Ci = (2^24 + 4096) · 128 > 2^31 over the identity map of a 1×1×1
// kernel. Only the last 4096 rows are nonzero, so the reference over them is cheap; the rows before must
// come out zero.
TEST(SpconvBackwardCuda, IndexesPast2To31Elements) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  const int64_t tail = 4096, n = (int64_t{1} << 24) + tail, ci = 128, co = 8;
  Tensor ident = Tensor::empty({1, n}, DType::i32);
  for (int64_t i = 0; i < n; ++i) ident.data_as<int32_t>()[i] = static_cast<int32_t>(i);
  const spconv::KernelMap map = spconv::KernelMap::from_user(ident.to(kGpu), 1, 1);
  const auto f = rounded(randn(tail * ci, rng), DType::f16), g = rounded(randn(tail * co, rng), DType::f16);
  const auto w = rounded(randn(ci * co, rng, 0.1), DType::f16);
  Tensor feats = Tensor::zeros({n, ci}, DType::f16, kGpu), grad_out = Tensor::zeros({n, co}, DType::f16, kGpu);
  const Tensor ft = make(f, {tail, ci}, DType::f16), gt = make(g, {tail, co}, DType::f16);
  copy(ft, TensorView(feats.data_as<uint16_t>() + (n - tail) * ci, DType::f16, {tail, ci}, kGpu));
  copy(gt, TensorView(grad_out.data_as<uint16_t>() + (n - tail) * co, DType::f16, {tail, co}, kGpu));
  const Tensor weight = make(w, {1, ci, co}, DType::f16, kGpu);
  std::vector<double> rw(ci * co, 0.0), rb(co, 0.0), rf(tail * ci, 0.0);
  for (int64_t r = 0; r < tail; ++r)
    for (int64_t o = 0; o < co; ++o) {
      rb[o] += g[r * co + o];
      for (int64_t c = 0; c < ci; ++c) {
        rw[c * co + o] += f[r * ci + c] * g[r * co + o];
        rf[r * ci + c] += g[r * co + o] * w[c * co + o];
      }
    }
  for (const std::optional<WgradChoice>& forced :
       {std::optional<WgradChoice>{}, std::optional{WgradChoice{.variant = WgradVariant::simt}}}) {
    BackwardOptions o;
    o.wgrad = forced;
    const ConvGradients got = spconv::submanifold_conv_backward(grad_out, feats, map, weight, kAll, o);
    SCOPED_TRACE(spconv::to_string(*got.choice.dgrad) + ", " + spconv::to_string(*got.choice.wgrad));
    expect_near(got.weight, rw, bound(DType::f16), "grad_weight");
    expect_near(got.bias, rb, bound(DType::f16), "grad_bias");
    Tensor head = Tensor::empty({1024, ci}, DType::f16), last = Tensor::empty({tail, ci}, DType::f16);
    copy(TensorView(got.feats.data(), DType::f16, {1024, ci}, kGpu), head);
    copy(TensorView(got.feats.data_as<uint16_t>() + (n - tail) * ci, DType::f16, {tail, ci}, kGpu), last);
    for (double v : values(head)) ASSERT_EQ(v, 0.0);
    expect_near(last, rf, bound(DType::f16), "grad_feats");
  }
}

}  // namespace
}  // namespace frugal
