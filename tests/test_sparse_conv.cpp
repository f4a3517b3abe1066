// Sparse voxel convolution: the kernel map against a brute-force search, the conv against a dense
// 3D convolution in double precision read at the active sites, CUDA against the CPU, determinism,
// the padded feats form, and every kind of bad input.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <tuple>

#include "core/device_caps.h"
#include "core/sparse_conv_backend.h"
#include "core/spconv_choose.h"
#include "frugal/half.h"
#include "frugal/sparse_conv.h"
#include "testing.h"

namespace frugal {
namespace {

using spconv::build_kernel_map;
using spconv::ConvChoice;
using spconv::ConvOptions;
using spconv::kernel_volume;
using spconv::submanifold_conv;
using testing::expect_error;
using testing::round_to;
using testing::test_seed;

// ---- inputs ----------------------------------------------------------------------------------

// Voxels of `batches` batches, each cell of an extent³ box at `origin` active with probability
// `occupancy`; rows shuffled. Coordinates are (b, x, y, z).
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

// Every voxel of an nx × ny × nz box at the origin, batch 0, x slowest: row (x·ny + y)·nz + z.
std::vector<int32_t> dense_block(int64_t nx, int64_t ny, int64_t nz) {
  const int64_t n = nx * ny * nz;
  std::vector<int32_t> flat(n * 4);
  for (int64_t i = 0; i < n; ++i) {
    flat[4 * i] = 0;
    flat[4 * i + 1] = static_cast<int32_t>(i / (ny * nz));
    flat[4 * i + 2] = static_cast<int32_t>(i / nz % ny);
    flat[4 * i + 3] = static_cast<int32_t>(i % nz);
  }
  return flat;
}

Tensor coords_tensor(const std::vector<int32_t>& flat, Device d = Device::cpu()) {
  Tensor t = Tensor::empty({static_cast<int64_t>(flat.size() / 4), 4}, DType::i32);
  if (!flat.empty()) std::memcpy(t.data(), flat.data(), flat.size() * 4);
  return d.is_cpu() ? t : t.to(d);
}

std::vector<float> rounded(std::vector<float> v, DType dt) {
  for (auto& x : v) x = round_to(x, dt);
  return v;
}

// A tensor of dtype `dt` holding v (rounded to dt) on device d.
Tensor make(const std::vector<float>& v, std::initializer_list<int64_t> shape, DType dt, Device d = Device::cpu()) {
  Tensor t = Tensor::empty(shape, dt);
  for (size_t i = 0; i < v.size(); ++i) {
    if (dt == DType::f32) t.data_as<float>()[i] = v[i];
    if (dt == DType::f16) t.data_as<uint16_t>()[i] = float_to_half(v[i]);
    if (dt == DType::bf16) t.data_as<uint16_t>()[i] = float_to_bf16(v[i]);
  }
  return d.is_cpu() ? t : t.to(d);
}

std::vector<double> read(const TensorView& t) {
  Tensor h = Tensor::empty(t.sizes(), t.dtype);
  copy(t, h.view());
  std::vector<double> v(h.numel());
  for (size_t i = 0; i < v.size(); ++i) {
    if (t.dtype == DType::f32) v[i] = h.data_as<float>()[i];
    if (t.dtype == DType::f16) v[i] = half_to_float(h.data_as<uint16_t>()[i]);
    if (t.dtype == DType::bf16) v[i] = bf16_to_float(h.data_as<uint16_t>()[i]);
  }
  return v;
}

std::vector<int32_t> read_i32(const TensorView& t) {
  std::vector<int32_t> v(t.numel());
  if (!v.empty()) copy(t, TensorView(v.data(), DType::i32, t.sizes(), Device::cpu()));
  return v;
}

std::vector<uint8_t> read_bytes(const TensorView& t) {
  std::vector<uint8_t> v(t.nbytes());
  if (!v.empty()) copy(t, TensorView(v.data(), t.dtype, t.sizes(), Device::cpu()));
  return v;
}

// An output tensor full of NaN (all-ones bytes are NaN in f32, f16 and bf16).
Tensor poisoned(int64_t rows, int64_t cols, DType dt, Device d) {
  Tensor t = Tensor::empty({rows, cols}, dt);
  std::memset(t.data(), 0xff, t.nbytes());
  return d.is_cpu() ? t : t.to(d);
}

// ---- oracles -----------------------------------------------------------------------------------

// The offset of k, written out plainly: k runs over (i, j, l) with i slowest.
std::array<int, 3> oracle_offset(int k, int ks, int dil) {
  int idx = 0;
  for (int i = 0; i < ks; ++i)
    for (int j = 0; j < ks; ++j)
      for (int l = 0; l < ks; ++l, ++idx)
        if (idx == k) return {(i - ks / 2) * dil, (j - ks / 2) * dil, (l - ks / 2) * dil};
  return {0, 0, 0};
}

// nbr by exhaustive search over all rows.
std::vector<int32_t> brute_force_map(const std::vector<int32_t>& c, int ks, int dil) {
  const int64_t n = c.size() / 4;
  const int kv = ks * ks * ks;
  std::vector<int32_t> nbr(kv * n, static_cast<int32_t>(n));
  for (int k = 0; k < kv; ++k) {
    const auto o = oracle_offset(k, ks, dil);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t m = 0; m < n; ++m)
        if (c[4 * m] == c[4 * i] && c[4 * m + 1] == c[4 * i + 1] + o[0] && c[4 * m + 2] == c[4 * i + 2] + o[1] &&
            c[4 * m + 3] == c[4 * i + 3] + o[2])
          nbr[k * n + i] = static_cast<int32_t>(m);
  }
  return nbr;
}

// A dense 3D convolution (cross-correlation, zero padding) in double over the bounding grid of
// each batch, read at the active sites. Independent of any kernel map.
std::vector<double> dense_conv(const std::vector<int32_t>& c, const std::vector<float>& feats,
                               const std::vector<float>& w, const std::vector<float>* bias, int ks, int dil, int ci,
                               int co) {
  const int64_t n = c.size() / 4;
  int lo[4] = {INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX}, hi[4] = {INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN};
  for (int64_t i = 0; i < n; ++i)
    for (int a = 0; a < 4; ++a) lo[a] = std::min(lo[a], c[4 * i + a]), hi[a] = std::max(hi[a], c[4 * i + a]);
  const int64_t nb = hi[0] + 1, ex = hi[1] - lo[1] + 1, ey = hi[2] - lo[2] + 1, ez = hi[3] - lo[3] + 1;
  std::vector<double> grid(nb * ex * ey * ez * ci, 0.0);
  auto cell = [&](int64_t b, int64_t x, int64_t y, int64_t z) { return ((b * ex + x) * ey + y) * ez + z; };
  for (int64_t i = 0; i < n; ++i)
    for (int q = 0; q < ci; ++q)
      grid[cell(c[4 * i], c[4 * i + 1] - lo[1], c[4 * i + 2] - lo[2], c[4 * i + 3] - lo[3]) * ci + q] =
          feats[i * ci + q];
  std::vector<double> out(n * co, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int o = 0; o < co; ++o) out[i * co + o] = bias ? (*bias)[o] : 0.0;
    for (int k = 0; k < ks * ks * ks; ++k) {
      const auto off = oracle_offset(k, ks, dil);
      const int64_t x = c[4 * i + 1] - lo[1] + off[0], y = c[4 * i + 2] - lo[2] + off[1],
                    z = c[4 * i + 3] - lo[3] + off[2];
      if (x < 0 || y < 0 || z < 0 || x >= ex || y >= ey || z >= ez) continue;  // zero padding
      const double* f = &grid[cell(c[4 * i], x, y, z) * ci];
      for (int q = 0; q < ci; ++q)
        for (int o = 0; o < co; ++o) out[i * co + o] += f[q] * w[(static_cast<int64_t>(k) * ci + q) * co + o];
    }
  }
  return out;
}

double tolerance(DType dt) { return dt == DType::f32 ? 1e-5 : 1e-2; }

// ---- offsets -----------------------------------------------------------------------------------

TEST(SpconvOffsets, FollowTheDocumentedOrder) {
  EXPECT_EQ(spconv::kernel_offset(0, 3), (std::array<int, 3>{-1, -1, -1}));
  EXPECT_EQ(spconv::kernel_offset(1, 3), (std::array<int, 3>{-1, -1, 0}));
  EXPECT_EQ(spconv::kernel_offset(3, 3), (std::array<int, 3>{-1, 0, -1}));
  EXPECT_EQ(spconv::kernel_offset(9, 3), (std::array<int, 3>{0, -1, -1}));
  EXPECT_EQ(spconv::kernel_offset(13, 3), (std::array<int, 3>{0, 0, 0}));
  EXPECT_EQ(spconv::kernel_offset(124, 5, 2), (std::array<int, 3>{4, 4, 4}));
  for (int ks : {1, 3, 5, 7})
    for (int k = 0; k < kernel_volume(ks); ++k) {
      EXPECT_EQ(spconv::kernel_offset(k, ks, 3), oracle_offset(k, ks, 3));
      const auto a = spconv::kernel_offset(k, ks), b = spconv::kernel_offset(kernel_volume(ks) - 1 - k, ks);
      EXPECT_EQ(a[0], -b[0]);
      EXPECT_EQ(a[1], -b[1]);
      EXPECT_EQ(a[2], -b[2]);
    }
}

TEST(SpconvOffsets, PermutationFromTheReversedAxisOrder) {
  for (int ks : {1, 3, 5}) {
    const auto perm = spconv::offset_permutation(spconv::OffsetOrder::x_fastest, ks);
    std::vector<int> sorted = perm;
    std::sort(sorted.begin(), sorted.end());
    for (int k = 0; k < kernel_volume(ks); ++k) EXPECT_EQ(sorted[k], k);
    // The other order's k-th offset has x fastest: x index = k % ks, z index = k / ks².
    for (int k = 0; k < kernel_volume(ks); ++k) {
      const auto o = spconv::kernel_offset(perm[k], ks);
      EXPECT_EQ(o[0], k % ks - ks / 2);
      EXPECT_EQ(o[1], k / ks % ks - ks / 2);
      EXPECT_EQ(o[2], k / (ks * ks) - ks / 2);
    }
    EXPECT_EQ(spconv::offset_permutation(spconv::OffsetOrder::x_slowest, ks)[kernel_volume(ks) - 1],
              kernel_volume(ks) - 1);
  }
}

TEST(SpconvOffsets, WeightFromKrscTransposes) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  const int co = 5, ks = 3, ci = 4, kv = 27;
  const auto v = testing::randn(static_cast<size_t>(co) * kv * ci, rng);
  Tensor krsc = Tensor::empty({co, ks, ks, ks, ci}, DType::f32);
  std::copy(v.begin(), v.end(), krsc.data_as<float>());
  Tensor w = spconv::weight_from_krsc(krsc);
  ASSERT_EQ(w.size(0), kv);
  ASSERT_EQ(w.size(1), ci);
  ASSERT_EQ(w.size(2), co);
  for (int o = 0; o < co; ++o)
    for (int k = 0; k < kv; ++k)
      for (int c = 0; c < ci; ++c) EXPECT_EQ(w.data_as<float>()[(k * ci + c) * co + o], v[(o * kv + k) * ci + c]);
}

// ---- kernel map (CPU) ----------------------------------------------------------------------------

TEST(SpconvMap, MatchesBruteForceSearch) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  for (int ks : {1, 3, 5, 7})
    for (int dil : {1, 2, 3}) {
      SCOPED_TRACE("ks=" + std::to_string(ks) + " dilation=" + std::to_string(dil));
      const auto c = random_voxels(rng, 2, 7, 0.35, -3);  // negative and positive coordinates
      const Tensor nbr = build_kernel_map(coords_tensor(c), ks, dil);
      ASSERT_EQ(nbr.size(0), kernel_volume(ks));
      ASSERT_EQ(nbr.size(1), static_cast<int64_t>(c.size() / 4));
      EXPECT_EQ(read_i32(nbr), brute_force_map(c, ks, dil));
    }
}

TEST(SpconvMap, HasTheSubmanifoldSymmetry) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  const auto c = random_voxels(rng, 3, 12, 0.3, -6);
  const int64_t n = c.size() / 4;
  for (int ks : {3, 5}) {
    const auto nbr = read_i32(build_kernel_map(coords_tensor(c), ks, 2));
    const int kv = kernel_volume(ks);
    int64_t hits = 0;
    for (int k = 0; k < kv; ++k)
      for (int64_t i = 0; i < n; ++i) {
        const int32_t m = nbr[k * n + i];
        ASSERT_GE(m, 0);
        ASSERT_LE(m, n);
        if (m == n) continue;
        ++hits;
        EXPECT_EQ(nbr[(kv - 1 - k) * n + m], i) << "k=" << k << " n=" << i;
      }
    EXPECT_GT(hits, n);  // more than the centre alone
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(nbr[kv / 2 * n + i], i);
  }
}

TEST(SpconvMap, EmptyInputGivesAnEmptyMap) {
  const Tensor nbr = build_kernel_map(coords_tensor({}), 3, 1);
  EXPECT_EQ(nbr.size(0), 27);
  EXPECT_EQ(nbr.size(1), 0);
}

TEST(SpconvMap, ExtremeCoordinatesAndBatches) {
  // The packable corners, and neighbors whose offset would leave the packable range.
  const std::vector<int32_t> c = {0,    spconv::kCoordMin, spconv::kCoordMin,     spconv::kCoordMin,
                                  4095, spconv::kCoordMax, spconv::kCoordMax,     spconv::kCoordMax,
                                  4095, spconv::kCoordMax, spconv::kCoordMax,     spconv::kCoordMax - 1,
                                  0,    spconv::kCoordMin, spconv::kCoordMin + 1, spconv::kCoordMin};
  EXPECT_EQ(read_i32(build_kernel_map(coords_tensor(c), 3, 1)), brute_force_map(c, 3, 1));
}

// ---- conv (CPU) ----------------------------------------------------------------------------------

struct ConvCase {
  int ks, dil, ci, co;
  DType dtype;
  bool bias;
};

std::string describe(const ConvCase& p) {
  return "ks=" + std::to_string(p.ks) + " dil=" + std::to_string(p.dil) + " ci=" + std::to_string(p.ci) +
         " co=" + std::to_string(p.co) + " " + to_string(p.dtype) + (p.bias ? " bias" : "");
}

const ConvCase kOracleCases[] = {
    {3, 1, 3, 17, DType::f32, true},   {3, 2, 17, 64, DType::f32, false}, {5, 1, 64, 3, DType::f32, true},
    {5, 2, 17, 17, DType::f32, true},  {3, 1, 64, 64, DType::f32, true},  {1, 1, 5, 7, DType::f32, true},
    {3, 1, 64, 64, DType::f16, true},  {3, 2, 3, 17, DType::f16, false},  {5, 1, 17, 64, DType::f16, true},
    {3, 1, 64, 64, DType::bf16, true}, {5, 2, 17, 3, DType::bf16, true},  {7, 1, 16, 24, DType::bf16, false},
};

// Runs one case on `device` and checks it against the dense oracle; returns the output.
std::vector<double> check_against_dense(const ConvCase& p, Device device, std::mt19937_64& rng) {
  SCOPED_TRACE(describe(p) + " on " + to_string(device));
  const auto c = random_voxels(rng, 2, 9, 0.3, -4);
  const int64_t n = c.size() / 4;
  const int kv = kernel_volume(p.ks);
  const auto f = rounded(testing::randn(n * p.ci, rng), p.dtype);
  const auto w =
      rounded(testing::randn(static_cast<size_t>(kv) * p.ci * p.co, rng, 1.0f / std::sqrt(kv * p.ci)), p.dtype);
  const auto b = rounded(testing::randn(p.co, rng), p.dtype);
  const Tensor coords = coords_tensor(c, device);
  const Tensor nbr = build_kernel_map(coords, p.ks, p.dil);
  const Tensor feats = make(f, {n, p.ci}, p.dtype, device), weight = make(w, {kv, p.ci, p.co}, p.dtype, device);
  const Tensor bias = make(b, {p.co}, p.dtype, device);
  Tensor out = poisoned(n, p.co, p.dtype, device);
  submanifold_conv(feats, nbr, weight, p.bias ? &bias.view() : nullptr, out);
  const auto got = read(out);
  for (double v : got) EXPECT_TRUE(std::isfinite(v)) << "an output element was not written";
  const auto ref = dense_conv(c, f, w, p.bias ? &b : nullptr, p.ks, p.dil, p.ci, p.co);
  EXPECT_LE(testing::rel_error(got, ref), tolerance(p.dtype));
  return got;
}

TEST(SpconvConv, MatchesDenseConvolutionOracle) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  for (const auto& p : kOracleCases) check_against_dense(p, Device::cpu(), rng);
}

TEST(SpconvConv, IsDeterministic) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  const auto c = random_voxels(rng, 2, 16, 0.3, -8);
  const int64_t n = c.size() / 4;
  const Tensor nbr = build_kernel_map(coords_tensor(c), 3, 1);
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    const Tensor feats = make(testing::randn(n * 32, rng), {n, 32}, dt);
    const Tensor w = make(testing::randn(27 * 32 * 48, rng, 0.03f), {27, 32, 48}, dt);
    const Tensor a = submanifold_conv(feats, nbr, w), b = submanifold_conv(feats, nbr, w);
    EXPECT_EQ(read_bytes(a), read_bytes(b)) << to_string(dt);
  }
}

// The padded form: feats with N + 1 rows; row N is never read (NaN there changes nothing).
void check_padded_form(Device device) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  const auto c = random_voxels(rng, 1, 10, 0.3, 0);
  const int64_t n = c.size() / 4;
  for (DType dt : {DType::f32, DType::f16}) {
    auto f = testing::randn((n + 1) * 8, rng);
    for (int q = 0; q < 8; ++q) f[n * 8 + q] = NAN;
    const Tensor padded = make(f, {n + 1, 8}, dt, device);
    const Tensor plain = make(std::vector<float>(f.begin(), f.begin() + n * 8), {n, 8}, dt, device);
    const Tensor nbr = build_kernel_map(coords_tensor(c, device), 3, 1);
    const Tensor w = make(testing::randn(27 * 8 * 8, rng, 0.1f), {27, 8, 8}, dt, device);
    const Tensor a = submanifold_conv(padded, nbr, w), b = submanifold_conv(plain, nbr, w);
    EXPECT_EQ(read_bytes(a), read_bytes(b));
    for (double v : read(a)) ASSERT_TRUE(std::isfinite(v));
  }
}

TEST(SpconvConv, AcceptsThePaddedFeatsForm) { check_padded_form(Device::cpu()); }

TEST(SpconvConv, EmptyInputGivesAnEmptyOutput) {
  const Tensor nbr = build_kernel_map(coords_tensor({}), 3, 1);
  const Tensor feats = Tensor::empty({0, 4}, DType::f32), w = Tensor::zeros({27, 4, 6}, DType::f32);
  const Tensor out = submanifold_conv(feats, nbr, w);
  EXPECT_EQ(out.size(0), 0);
  EXPECT_EQ(out.size(1), 6);
  // The padded form of N = 0: one zero row.
  const Tensor one = Tensor::zeros({1, 4}, DType::f32);
  EXPECT_EQ(submanifold_conv(one, nbr, w).size(0), 0);
}

// ---- bad input -----------------------------------------------------------------------------------

void check_map_errors(Device d) {
  // Duplicates: the coordinate and both rows are named.
  expect_error(
      [&] {
        build_kernel_map(coords_tensor({0, 1, 2, 3, 1, 1, 2, 3, 0, 5, 5, 5, 0, 1, 2, 3}, d));
      },
      ErrorCode::invalid_argument, {"[spconv::build_kernel_map]", "duplicate", "(0, 1, 2, 3)", "rows 0 and 3"});
  expect_error(
      [&] {
        build_kernel_map(coords_tensor({0, 1, 2, 3, 0, 70000, 2, 3}, d));
      },
      ErrorCode::out_of_range, {"row 1", "x = 70000", "[-65536, 65535]"});
  expect_error(
      [&] {
        build_kernel_map(coords_tensor({0, 1, 2, -65537}, d));
      },
      ErrorCode::out_of_range, {"row 0", "z = -65537"});
  expect_error(
      [&] {
        build_kernel_map(coords_tensor({0, 1, 2, 3, -1, 1, 2, 3}, d));
      },
      ErrorCode::out_of_range, {"row 1", "batch index b = -1"});
  expect_error(
      [&] {
        build_kernel_map(coords_tensor({4096, 1, 2, 3}, d));
      },
      ErrorCode::out_of_range, {"b = 4096", "[0, 4095]"});
  const Tensor ok = coords_tensor({0, 1, 2, 3, 0, 1, 2, 4}, d);
  for (int ks : {0, 2, 4, 9, -3})
    expect_error([&] { build_kernel_map(ok, ks, 1); }, ErrorCode::invalid_argument,
                 {"kernel_size must be odd in [1, 7]", ("got " + std::to_string(ks)).c_str()});
  for (int dil : {0, -1})
    expect_error([&] { build_kernel_map(ok, 3, dil); }, ErrorCode::invalid_argument, {"dilation", "got"});
  Tensor three = Tensor::zeros({2, 3}, DType::i32, d);
  expect_error([&] { build_kernel_map(three); }, ErrorCode::invalid_argument, {"coords must have shape [*, 4]"});
  Tensor i64 = Tensor::zeros({2, 4}, DType::i64, d);
  expect_error([&] { build_kernel_map(i64); }, ErrorCode::invalid_argument, {"coords must have dtype i32"});
  Tensor wrong_nbr = Tensor::empty({27, 3}, DType::i32, d);
  expect_error([&] { build_kernel_map(ok, wrong_nbr, 3, 1); }, ErrorCode::invalid_argument,
               {"nbr must have shape [27, 2]"});
}

TEST(SpconvErrors, BadCoordinatesAndKernelParameters) { check_map_errors(Device::cpu()); }

// The CPU map inserts and validates rows in parallel; its errors must still name the first bad row
// and the first row that repeats an earlier one, on every run, on an input large enough to be split
// across threads.
TEST(SpconvErrors, LargeInputsNameTheFirstOffendingRowEveryTime) {
  const int n = 300000;
  std::vector<int32_t> c(4 * static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    c[4 * r] = 0;
    c[4 * r + 1] = r % 100;
    c[4 * r + 2] = r / 100 % 100;
    c[4 * r + 3] = r / 10000;
  }
  std::vector<int32_t> dup = c;
  std::copy_n(c.begin() + 4 * 10, 4, dup.begin() + 4 * 290000);     // repeats row 10, found second
  std::copy_n(c.begin() + 4 * 70000, 4, dup.begin() + 4 * 250000);  // the first row repeating one
  std::vector<int32_t> bad = c;
  bad[4 * 150000 + 2] = 70000;
  bad[4 * 20000 + 3] = -70000;
  for (int rep = 0; rep < 3; ++rep) {
    expect_error([&] { build_kernel_map(coords_tensor(dup)); }, ErrorCode::invalid_argument,
                 {"duplicate", "rows 70000 and 250000"});
    expect_error([&] { build_kernel_map(coords_tensor(bad)); }, ErrorCode::out_of_range,
                 {"row 20000", "z = -70000"});
  }
  EXPECT_NO_THROW(build_kernel_map(coords_tensor(c)));
}

void check_conv_errors(Device d) {
  const Tensor coords = coords_tensor({0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0}, d);
  const Tensor nbr = build_kernel_map(coords, 3, 1);
  const Tensor feats = Tensor::zeros({3, 4}, DType::f32, d), w = Tensor::zeros({27, 4, 5}, DType::f32, d);
  const Tensor out = Tensor::zeros({3, 5}, DType::f32, d);
  const Tensor bias = Tensor::zeros({5}, DType::f32, d);
  EXPECT_NO_THROW(submanifold_conv(feats, nbr, w, &bias.view(), out));
  const char* op = "[spconv::submanifold_conv]";
  expect_error(
      [&] {
        submanifold_conv(feats, nbr, Tensor::zeros({26, 4, 5}, DType::f32, d), nullptr, out);
      },
      ErrorCode::invalid_argument, {op, "weight must have shape [27, 4, *]"});
  expect_error(
      [&] {
        submanifold_conv(feats, nbr, Tensor::zeros({27, 3, 5}, DType::f32, d), nullptr, out);
      },
      ErrorCode::invalid_argument, {"weight must have shape [27, 4, *]"});
  expect_error(
      [&] {
        submanifold_conv(Tensor::zeros({5, 4}, DType::f32, d), nbr, w, nullptr, out);
      },
      ErrorCode::invalid_argument, {"feats must have N = 3 rows (or N + 1"});
  expect_error(
      [&] {
        submanifold_conv(feats, nbr, w, nullptr, Tensor::zeros({3, 6}, DType::f32, d));
      },
      ErrorCode::invalid_argument, {"out must have shape [3, 5]"});
  expect_error(
      [&] {
        submanifold_conv(feats, nbr, Tensor::zeros({27, 4, 5}, DType::f16, d), nullptr, out);
      },
      ErrorCode::invalid_argument, {"share one dtype", "f32, f16, f32"});
  const Tensor bias6 = Tensor::zeros({6}, DType::f32, d), bias16 = Tensor::zeros({5}, DType::f16, d);
  expect_error([&] { submanifold_conv(feats, nbr, w, &bias6.view(), out); }, ErrorCode::invalid_argument,
               {"bias must have shape [5]"});
  expect_error([&] { submanifold_conv(feats, nbr, w, &bias16.view(), out); }, ErrorCode::invalid_argument,
               {"bias must have the dtype of feats"});
  expect_error(
      [&] {
        submanifold_conv(Tensor::zeros({3, 4}, DType::i32, d), nbr, w, nullptr, out);
      },
      ErrorCode::invalid_argument, {"feats must have dtype f32 | f16 | bf16"});
  expect_error(
      [&] {
        submanifold_conv(feats, Tensor::zeros({27, 3}, DType::i64, d), w, nullptr, out);
      },
      ErrorCode::invalid_argument, {"nbr must have dtype i32"});
  // A strided (non-contiguous) view of feats.
  const int64_t shape[] = {3, 4}, strides[] = {8, 1};
  Tensor wide = Tensor::zeros({3, 8}, DType::f32, d);
  const TensorView strided(wide.data(), DType::f32, shape, strides, d);
  expect_error([&] { submanifold_conv(strided, nbr, w, nullptr, out); }, ErrorCode::invalid_argument,
               {"feats must be contiguous"});
  // In place: out over feats.
  const Tensor square = Tensor::zeros({27, 4, 4}, DType::f32, d);
  expect_error([&] { submanifold_conv(feats, nbr, square, nullptr, feats); }, ErrorCode::invalid_argument,
               {"out overlaps an input"});
}

TEST(SpconvErrors, ShapeDtypeAndLayoutMismatches) { check_conv_errors(Device::cpu()); }

// nbr entries outside [0, N]: checked raises naming the entry; unchecked treats them as absent.
void check_bad_map_entries(Device d) {
  const int64_t n = 3;
  const Tensor feats = make({1, 2, 3, 4, 5, 6}, {n, 2}, DType::f32, d);
  const Tensor w = make(std::vector<float>(27 * 2 * 2, 1.0f), {27, 2, 2}, DType::f32, d);
  for (int32_t bad : {4, -1, 1 << 30, INT32_MIN}) {
    std::vector<int32_t> m(27 * n, static_cast<int32_t>(n));
    for (int64_t i = 0; i < n; ++i) m[13 * n + i] = static_cast<int32_t>(i);
    m[20 * n + 2] = bad;
    Tensor nbr = Tensor::empty({27, n}, DType::i32);
    std::memcpy(nbr.data(), m.data(), m.size() * 4);
    if (d.is_cuda()) nbr = nbr.to(d);
    expect_error([&] { submanifold_conv(feats, nbr, w); }, ErrorCode::out_of_range,
                 {"[spconv::submanifold_conv]", ("nbr[20, 2] = " + std::to_string(bad)).c_str(), "[0, 3]"});
    Tensor out = poisoned(n, 2, DType::f32, d);
    EXPECT_NO_THROW(submanifold_conv(feats, nbr, w, nullptr, out, nullptr, spconv::MapCheck::unchecked));
    const auto got = read(out);
    // Only the centre counts: out[i] = feats[i] · ones.
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(got[i * 2], 3.0 + 4.0 * i) << "row " << i;
  }
}

TEST(SpconvErrors, MapEntriesOutsideTheRange) { check_bad_map_entries(Device::cpu()); }

// ---- KernelMap: a map frugal built or checked, and what it knows -----------------------------

// The map object holds the map build_kernel_map returns and statistics that say it is valid; a conv
// over it gives the bits of a conv over the plain tensor, by the same choice, without the per-call
// check (an entry changed after the build counts as absent instead of raising); a user map is checked
// once by from_user; statistics of another map are refused.
void check_kernel_map_object(Device d) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  const auto c = random_voxels(rng, 2, 10, 0.3, -5);
  const int64_t n = c.size() / 4;
  const Tensor coords = coords_tensor(c, d);
  const spconv::KernelMap map = spconv::KernelMap::build(coords, 3, 1);
  EXPECT_EQ(map.stats().order, spconv::RowOrder::morton) << "random_voxels shuffles its rows";
  EXPECT_EQ(read_i32(map.nbr()), read_i32(build_kernel_map(coords, 3, 1)));
  EXPECT_EQ(map.kernel_size(), 3);
  EXPECT_EQ(map.dilation(), 1);
  EXPECT_TRUE(map.stats().valid);
  EXPECT_EQ(map.stats().rows, n);
  EXPECT_EQ(map.stats().offsets, 27);
  for (DType dt : {DType::f32, DType::f16}) {
    SCOPED_TRACE(to_string(dt));
    const Tensor feats = make(testing::randn(n * 16, rng), {n, 16}, dt, d);
    const Tensor w = make(testing::randn(27 * 16 * 24, rng, 0.05f), {27, 16, 24}, dt, d);
    const Tensor b = make(testing::randn(24, rng), {24}, dt, d);
    Tensor over_map = poisoned(n, 24, dt, d), over_tensor = poisoned(n, 24, dt, d);
    const ConvChoice served = submanifold_conv(feats, map, w, &b.view(), over_map);
    EXPECT_EQ(spconv::to_string(served), spconv::to_string(spconv::choose_conv(feats, map, w, &b.view(), over_map)));
    if (d.is_cpu()) EXPECT_EQ(served.variant, spconv::ConvVariant::cpu);
    submanifold_conv(feats, map.nbr(), w, &b.view(), over_tensor);
    EXPECT_EQ(read_bytes(over_map), read_bytes(over_tensor));
    EXPECT_EQ(read_bytes(submanifold_conv(feats, map, w, &b.view())), read_bytes(over_tensor)) << "allocating form";

    // An entry changed after the build: not checked (counts as absent) over the map, raised over the tensor
    // (a map in its given order, whose columns are its rows).
    const spconv::KernelMap changed = spconv::KernelMap::build(coords, 3, 1, nullptr, spconv::RowOrder::given);
    ASSERT_FALSE(changed.order().defined());
    const int32_t bad = static_cast<int32_t>(n + 5);
    copy(TensorView(const_cast<int32_t*>(&bad), DType::i32, {1}),
         TensorView(changed.nbr().data_as<int32_t>() + 20 * n + 2, DType::i32, {1}, d));
    EXPECT_NO_THROW(submanifold_conv(feats, changed, w, &b.view()));
    expect_error([&] { submanifold_conv(feats, changed.nbr(), w, &b.view()); }, ErrorCode::out_of_range,
                 {"nbr[20, 2] = " + std::to_string(bad)});
    // Checked once, as a user map.
    expect_error([&] { spconv::KernelMap::from_user(changed.nbr(), 3, 1); }, ErrorCode::out_of_range,
                 {"[spconv::check_kernel_map]", "nbr[20, 2] = " + std::to_string(bad)});
    const spconv::KernelMap user = spconv::KernelMap::from_user(build_kernel_map(coords, 3, 1), 3, 1);
    EXPECT_TRUE(user.stats().valid);
    EXPECT_EQ(read_bytes(submanifold_conv(feats, user, w, &b.view())), read_bytes(over_tensor));
  }
  expect_error([&] { spconv::KernelMap::from_user(map.nbr(), 5, 1); }, ErrorCode::invalid_argument,
               {"nbr must have shape [125, *]"});
  // Statistics of another map, and an empty KernelMap.
  const Tensor feats = Tensor::zeros({n, 4}, DType::f32, d), w = Tensor::zeros({27, 4, 4}, DType::f32, d);
  Tensor out = Tensor::zeros({n, 4}, DType::f32, d);
  ConvOptions other;
  other.map_stats = map.stats();
  other.map_stats->rows += 1;
  expect_error([&] { submanifold_conv(feats, map.nbr(), w, nullptr, out, other); }, ErrorCode::invalid_argument,
               {"map_stats describe a map [27, " + std::to_string(n + 1) + "]"});
  expect_error([&] { submanifold_conv(feats, spconv::KernelMap{}, w); }, ErrorCode::invalid_argument,
               {"KernelMap is empty"});
  const spconv::KernelMap empty = spconv::KernelMap::build(coords_tensor({}, d), 3, 1);
  EXPECT_EQ(empty.nbr().size(1), 0);
  EXPECT_EQ(submanifold_conv(Tensor::zeros({0, 4}, DType::f32, d), empty, w).size(0), 0);
}

TEST(SpconvKernelMap, CarriesItsValidityAndSkipsThePerCallCheck) { check_kernel_map_object(Device::cpu()); }

// The rows of c (flat (b, x, y, z) rows) sorted lexicographically.
std::vector<int32_t> sorted_rows(const std::vector<int32_t>& c) {
  std::vector<std::array<int32_t, 4>> rows(c.size() / 4);
  std::memcpy(rows.data(), c.data(), c.size() * 4);
  std::sort(rows.begin(), rows.end());
  std::vector<int32_t> flat(c.size());
  std::memcpy(flat.data(), rows.data(), c.size() * 4);
  return flat;
}

// Rows [n, w] of t (any dtype) taken in the order perm: out[i] = t[perm[i]], read back to the host as bytes.
std::vector<uint8_t> permuted_rows(const TensorView& t, const std::vector<int64_t>& perm) {
  const auto all = read_bytes(t);
  const size_t row = all.size() / perm.size();
  std::vector<uint8_t> out(all.size());
  for (size_t i = 0; i < perm.size(); ++i) std::memcpy(&out[i * row], &all[perm[i] * row], row);
  return out;
}

// The run order: the rule keeps rows in lexicographic order and runs any other order in Morton order;
// the map's columns follow it and nbr() gives the map by row; a conv over a shuffle of the rows gives the
// shuffled output, bit for bit, when both run in Morton order (forward, grad_feats, grad_weight and
// grad_bias), whatever kernel serves them (`choice`: forced; unset: the rules').
void check_run_order(Device d, DType dt, int ci, int co, std::optional<ConvChoice> choice) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  const auto sorted = sorted_rows(random_voxels(rng, 2, 12, 0.35, -6));
  const int64_t n = static_cast<int64_t>(sorted.size() / 4);
  std::vector<int64_t> perm(n);  // shuffled row i is sorted row perm[i]
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> shuffled(sorted.size());
  for (int64_t i = 0; i < n; ++i) std::memcpy(&shuffled[4 * i], &sorted[4 * perm[i]], 16);

  const Tensor cs = coords_tensor(sorted, d), cx = coords_tensor(shuffled, d);
  const spconv::KernelMap given = spconv::KernelMap::build(cs, 3, 1);
  EXPECT_EQ(given.stats().order, spconv::RowOrder::given) << "sorted rows keep their order";
  EXPECT_FALSE(given.order().defined());
  const spconv::KernelMap ms = spconv::KernelMap::build(cs, 3, 1, nullptr, spconv::RowOrder::morton);
  const spconv::KernelMap mx = spconv::KernelMap::build(cx, 3, 1);
  ASSERT_EQ(mx.stats().order, spconv::RowOrder::morton) << "shuffled rows run in Morton order";
  ASSERT_TRUE(ms.order().defined() && mx.order().defined());
  // The order is a permutation sorting the Morton keys, the same voxels in both; the maps by row are the plain ones.
  const auto os = read_i32(ms.order()), ox = read_i32(mx.order());
  int64_t lo[3] = {INT32_MAX, INT32_MAX, INT32_MAX}, hi[3] = {INT32_MIN, INT32_MIN, INT32_MIN}, batch_hi = 0;
  for (int64_t r = 0; r < n; ++r) {
    for (int a = 0; a < 3; ++a) lo[a] = std::min<int64_t>(lo[a], sorted[4 * r + 1 + a]);
    for (int a = 0; a < 3; ++a) hi[a] = std::max<int64_t>(hi[a], sorted[4 * r + 1 + a]);
    batch_hi = std::max<int64_t>(batch_hi, sorted[4 * r]);
  }
  const auto frame = spconv::backend::morton_frame(lo, hi, batch_hi);
  EXPECT_EQ(frame.bits, 4) << "a 12³ box";
  EXPECT_EQ(frame.key_bits, 13) << "and two batches";
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(std::memcmp(&sorted[4 * os[i]], &shuffled[4 * ox[i]], 16), 0) << "column " << i;
    if (i > 0) {
      auto key = [&](int32_t r) {
        const int32_t* c = &sorted[4 * r];
        return spconv::backend::morton_key(spconv::backend::pack_key(c[0], c[1], c[2], c[3]), frame);
      };
      ASSERT_LT(key(os[i - 1]), key(os[i]));
    }
  }
  if (d.is_cuda()) {  // the same columns and order as the CPU's
    const spconv::KernelMap cpu = spconv::KernelMap::build(coords_tensor(shuffled), 3, 1);
    EXPECT_EQ(read_i32(cpu.order()), ox);
    EXPECT_EQ(read_i32(cpu.columns()), read_i32(mx.columns()));
  }
  EXPECT_EQ(read_i32(ms.nbr()), read_i32(build_kernel_map(cs, 3, 1)));
  EXPECT_EQ(read_i32(mx.nbr()), read_i32(build_kernel_map(cx, 3, 1)));

  const auto f = testing::randn(n * ci, rng), g = testing::randn(n * co, rng);
  std::vector<float> fx(f.size()), gx(g.size());
  for (int64_t i = 0; i < n; ++i) {
    std::copy_n(&f[perm[i] * ci], ci, &fx[i * ci]);
    std::copy_n(&g[perm[i] * co], co, &gx[i * co]);
  }
  const Tensor feats_s = make(f, {n, ci}, dt, d), feats_x = make(fx, {n, ci}, dt, d);
  const Tensor go_s = make(g, {n, co}, dt, d), go_x = make(gx, {n, co}, dt, d);
  const Tensor w = make(testing::randn(27 * ci * co, rng, 1.0f / std::sqrt(27.0f * ci)), {27, ci, co}, dt, d);
  const Tensor b = make(testing::randn(co, rng), {co}, dt, d);
  ConvOptions o;
  o.choice = choice;
  Tensor out_s = poisoned(n, co, dt, d), out_x = poisoned(n, co, dt, d), out_plain = poisoned(n, co, dt, d);
  const ConvChoice cs_served = submanifold_conv(feats_s, ms, w, &b.view(), out_s, o);
  const ConvChoice cx_served = submanifold_conv(feats_x, mx, w, &b.view(), out_x, o);
  EXPECT_EQ(spconv::to_string(cs_served), spconv::to_string(cx_served));
  if (choice) EXPECT_EQ(cx_served.variant, choice->variant);
  EXPECT_EQ(permuted_rows(out_s, perm), read_bytes(out_x)) << spconv::to_string(cx_served);
  // Against the plain map of the shuffled rows (the given order): the same numbers within rounding.
  ConvOptions plain;
  plain.choice = choice;
  submanifold_conv(feats_x, mx.nbr(), w, &b.view(), out_plain, plain);
  EXPECT_LE(testing::rel_error(read(out_x), read(out_plain)), dt == DType::f32 ? 1e-5 : 1e-2);

  spconv::BackwardOptions bo;
  const spconv::ConvGradients gs = spconv::submanifold_conv_backward(go_s, feats_s, ms, w, {true, true, true}, bo);
  const spconv::ConvGradients gx_ = spconv::submanifold_conv_backward(go_x, feats_x, mx, w, {true, true, true}, bo);
  EXPECT_EQ(permuted_rows(gs.feats, perm), read_bytes(gx_.feats)) << "grad_feats";
  EXPECT_EQ(read_bytes(gs.weight), read_bytes(gx_.weight)) << "grad_weight: the same column order, the same sums";
  const spconv::ConvGradients gp = spconv::submanifold_conv_backward(go_x, feats_x, mx.nbr(), w, {true, true, true}, bo);
  EXPECT_LE(testing::rel_error(read(gx_.weight), read(gp.weight)), dt == DType::f32 ? 1e-5 : 1e-2);
  EXPECT_LE(testing::rel_error(read(gx_.feats), read(gp.feats)), dt == DType::f32 ? 1e-5 : 1e-2);
  EXPECT_EQ(read_bytes(gx_.bias), read_bytes(gp.bias)) << "grad_bias sums rows in storage order";
}

// A run order must travel with its map's statistics: refused without them, required with them.
void check_run_order_errors(Device d) {
  std::mt19937_64 rng(7);
  const auto c = random_voxels(rng, 1, 6, 0.5, 0);
  const int64_t n = static_cast<int64_t>(c.size() / 4);
  const spconv::KernelMap m = spconv::KernelMap::build(coords_tensor(c, d), 3, 1);
  ASSERT_TRUE(m.order().defined());
  const Tensor feats = Tensor::zeros({n, 8}, DType::f32, d), w = Tensor::zeros({27, 8, 8}, DType::f32, d);
  Tensor out = Tensor::zeros({n, 8}, DType::f32, d);
  ConvOptions o;
  o.map_stats = m.stats();
  expect_error([&] { submanifold_conv(feats, m.columns(), w, nullptr, out, o); }, ErrorCode::invalid_argument,
               {"[spconv::submanifold_conv]", "Morton order, but no order was given"});
  ConvOptions p;
  p.order = m.order().view();
  expect_error([&] { submanifold_conv(feats, m.nbr(), w, nullptr, out, p); }, ErrorCode::invalid_argument,
               {"an order was given for a map in its given order"});
  o.order = m.order().view();
  EXPECT_NO_THROW(submanifold_conv(feats, m.columns(), w, nullptr, out, o));
  const Tensor short_order = Tensor::zeros({n - 1}, DType::i32, d);
  o.order = short_order.view();
  expect_error([&] { submanifold_conv(feats, m.columns(), w, nullptr, out, o); }, ErrorCode::invalid_argument,
               {"order"});
}

TEST(SpconvKernelMap, RunsShuffledRowsInMortonOrderOnTheCpu) {
  for (DType dt : {DType::f32, DType::f16}) {
    SCOPED_TRACE(to_string(dt));
    check_run_order(Device::cpu(), dt, 16, 24, std::nullopt);
  }
}
TEST(SpconvKernelMap, RunOrderErrorsOnTheCpu) { check_run_order_errors(Device::cpu()); }

TEST(SpconvKernelMap, ForcedChoicesOnTheCpu) {
  const Tensor coords = coords_tensor({0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0});
  const spconv::KernelMap map = spconv::KernelMap::build(coords, 3, 1);
  const Tensor feats = Tensor::zeros({3, 8}, DType::f16), w = Tensor::zeros({27, 8, 8}, DType::f16);
  Tensor out = Tensor::zeros({3, 8}, DType::f16);
  ConvOptions o;
  o.choice = ConvChoice{.variant = spconv::ConvVariant::cpu};
  EXPECT_EQ(spconv::to_string(submanifold_conv(feats, map, w, nullptr, out, o)),
            "cpu(tile_co 8, tile_rows 16, map order, splits 1, chunk_rows 3)");
  o.choice = ConvChoice{.variant = spconv::ConvVariant::mma};
  expect_error([&] { submanifold_conv(feats, map, w, nullptr, out, o); }, ErrorCode::unsupported,
               {"[spconv::submanifold_conv]", "the mma variant needs a CUDA device"});
}

// ---- CUDA --------------------------------------------------------------------------------------

const Device kGpu = Device::cuda(0);

TEST(SpconvCuda, MapIsIdenticalToTheCpuMap) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  for (int ks : {1, 3, 5, 7})
    for (int dil : {1, 2}) {
      SCOPED_TRACE("ks=" + std::to_string(ks) + " dilation=" + std::to_string(dil));
      const auto c = random_voxels(rng, 2, 20, 0.25, -10);
      const auto cpu = read_i32(build_kernel_map(coords_tensor(c), ks, dil));
      const auto gpu = read_i32(build_kernel_map(coords_tensor(c, kGpu), ks, dil));
      EXPECT_EQ(gpu, cpu);
    }
  const auto c = random_voxels(rng, 1, 6, 0.4, 2);
  EXPECT_EQ(read_i32(build_kernel_map(coords_tensor(c, kGpu), 3, 1)), brute_force_map(c, 3, 1));
}

TEST(SpconvCuda, MatchesDenseConvolutionOracle) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  for (const auto& p : kOracleCases) check_against_dense(p, kGpu, rng);
}

struct Shape {
  int ci, co;
};

using V = spconv::ConvVariant;

// A forced choice: the variant and its tiling (0 and an unset order: by the rules for the variant).
ConvChoice forced(V v, int tile_co = 0, std::optional<bool> sorted = std::nullopt, int64_t chunk_rows = 0,
                  int splits = 0, int tile_rows = 0) {
  return {.variant = v, .tile_co = tile_co, .tile_rows = tile_rows, .sort_rows = sorted, .splits = splits,
          .chunk_rows = chunk_rows};
}

// Whether a forced choice runs this call on device 0 (the rules complete it first, as the call does).
bool runs_here(const ConvChoice& c, const Tensor& feats, const Tensor& nbr, const Tensor& w, const Tensor& out) {
  const auto a = spconv::backend::conv_args(feats.view(), nbr.view(), w.view(), nullptr, out.view());
  const DeviceCaps caps = cuda::device_caps(0);
  return spconv::can_implement(a, caps, spconv::complete(a, caps, c));
}

// Every CUDA kernel variant (CUDA cores, WMMA with 64- and 128-wide channel tiles, 16-byte and scalar
// loads, mma, and each wgmma variant where the device runs it) against the CPU on the same inputs and
// map; each forced choice must be the one that served the call.
void check_every_kernel(const std::vector<int32_t>& c, std::initializer_list<Shape> shapes,
                        std::initializer_list<DType> dtypes, std::mt19937_64& rng) {
  const int64_t n = c.size() / 4;
  const Tensor nbr_h = build_kernel_map(coords_tensor(c), 3, 1);
  const Tensor nbr_d = build_kernel_map(coords_tensor(c, kGpu), 3, 1);
  for (const Shape s : shapes)
    for (DType dt : dtypes) {
      const auto f = testing::randn(n * s.ci, rng);
      const auto w = testing::randn(27 * s.ci * s.co, rng, 1.0f / std::sqrt(27.0f * s.ci));
      const auto b = testing::randn(s.co, rng);
      const Tensor fh = make(f, {n, s.ci}, dt), wh = make(w, {27, s.ci, s.co}, dt), bh = make(b, {s.co}, dt);
      const Tensor fd = fh.to(kGpu), wd = wh.to(kGpu), bd = bh.to(kGpu);
      const auto ref = read(submanifold_conv(fh, nbr_h, wh, &bh.view()));
      for (const std::optional<ConvChoice>& choice :
           {std::optional<ConvChoice>{}, std::optional{forced(V::simt)}, std::optional{forced(V::wmma, 64)},
            std::optional{forced(V::wmma, 128)}, std::optional{forced(V::mma)}, std::optional{forced(V::mma, 64)},
            std::optional{forced(V::mma, 128)}, std::optional{forced(V::mma, 256)}, std::optional{forced(V::wgmma)},
            std::optional{forced(V::wgmma, 64)}, std::optional{forced(V::wgmma, 256)},
            std::optional{forced(V::wgmma, 64, {}, 0, 0, 256)}, std::optional{forced(V::wgmma, 128, {}, 0, 0, 256)},
            std::optional{forced(V::wgmma_ws, 0, {}, 0, 0, 128)}, std::optional{forced(V::wgmma_ws, 256)},
            std::optional{forced(V::wgmma_ws2, 64)}, std::optional{forced(V::wgmma_ws, 64, {}, 0, 0, 256)},
            std::optional{forced(V::halo_pipe, 64)}}) {
        Tensor out = poisoned(n, s.co, dt, kGpu);
        if (choice && !runs_here(*choice, fd, nbr_d, wd, out)) continue;
        SCOPED_TRACE(std::string(to_string(dt)) + " ci=" + std::to_string(s.ci) + " co=" + std::to_string(s.co) +
                     " choice=" + (choice ? spconv::to_string(*choice) : std::string("by rule")));
        ConvOptions o;
        o.choice = choice;
        const ConvChoice want = spconv::choose_conv(fd, nbr_d, wd, &bd.view(), out, o);
        const ConvChoice served = submanifold_conv(fd, nbr_d, wd, &bd.view(), out, o);
        EXPECT_EQ(spconv::to_string(served), spconv::to_string(want)) << "the choice served the call";
        if (choice) EXPECT_EQ(served.variant, choice->variant);
        const auto got = read(out);
        for (double v : got) ASSERT_TRUE(std::isfinite(v)) << "an output element was not written";
        EXPECT_LE(testing::rel_error(got, ref), tolerance(dt));
      }
    }
}

TEST(SpconvCuda, EveryKernelMatchesTheCpu) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  check_every_kernel(random_voxels(rng, 2, 14, 0.3, -7),
                     {Shape{64, 64}, Shape{32, 160}, Shape{17, 24}, Shape{8, 3}, Shape{40, 72}},
                     {DType::f32, DType::f16, DType::bf16}, rng);
}

// The same on ~150 voxels (two row tiles): small enough for compute-sanitizer's racecheck.
TEST(SpconvCuda, EveryKernelOnATinyInput) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  check_every_kernel(random_voxels(rng, 2, 6, 0.35, -3), {Shape{16, 72}, Shape{17, 24}}, {DType::f32, DType::f16}, rng);
}

TEST(SpconvCuda, IsDeterministic) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  const auto c = random_voxels(rng, 2, 24, 0.3, -12);
  const int64_t n = c.size() / 4;
  const Tensor coords = coords_tensor(c, kGpu);
  const Tensor nbr = build_kernel_map(coords, 3, 1);
  EXPECT_EQ(read_i32(build_kernel_map(coords, 3, 1)), read_i32(nbr));
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    const Tensor feats = make(testing::randn(n * 64, rng), {n, 64}, dt, kGpu);
    const Tensor w = make(testing::randn(27 * 64 * 128, rng, 0.02f), {27, 64, 128}, dt, kGpu);
    const Tensor a = submanifold_conv(feats, nbr, w), b = submanifold_conv(feats, nbr, w);
    EXPECT_EQ(read_bytes(a), read_bytes(b)) << to_string(dt);
  }
}

TEST(SpconvCuda, AcceptsThePaddedFeatsForm) {
  FRUGAL_SKIP_WITHOUT_GPU();
  check_padded_form(kGpu);
}

TEST(SpconvCuda, EmptyInput) {
  FRUGAL_SKIP_WITHOUT_GPU();
  const Tensor nbr = build_kernel_map(coords_tensor({}, kGpu), 5, 1);
  EXPECT_EQ(nbr.size(0), 125);
  EXPECT_EQ(nbr.size(1), 0);
  const Tensor out = submanifold_conv(Tensor::empty({0, 4}, DType::f16, kGpu), Tensor::empty({27, 0}, DType::i32, kGpu),
                                      Tensor::zeros({27, 4, 6}, DType::f16, kGpu));
  EXPECT_EQ(out.size(0), 0);
}

TEST(SpconvCuda, BadCoordinatesAndKernelParameters) {
  FRUGAL_SKIP_WITHOUT_GPU();
  check_map_errors(kGpu);
}

TEST(SpconvCuda, ShapeDtypeAndLayoutMismatches) {
  FRUGAL_SKIP_WITHOUT_GPU();
  check_conv_errors(kGpu);
  // Tensors on different devices.
  const Tensor coords = coords_tensor({0, 0, 0, 0, 0, 0, 0, 1}, kGpu);
  const Tensor nbr = build_kernel_map(coords, 3, 1);
  const Tensor feats_h = Tensor::zeros({2, 4}, DType::f32);
  const Tensor w = Tensor::zeros({27, 4, 4}, DType::f32, kGpu);
  expect_error([&] { submanifold_conv(feats_h, nbr, w); }, ErrorCode::invalid_argument,
               {"feats is on cpu but nbr is on cuda:0"});
  Tensor nbr_h = Tensor::empty({27, 2}, DType::i32);
  expect_error([&] { build_kernel_map(coords, nbr_h, 3, 1); }, ErrorCode::invalid_argument,
               {"coords is on cuda:0 but nbr is on cpu"});
}

TEST(SpconvCuda, MapEntriesOutsideTheRange) {
  FRUGAL_SKIP_WITHOUT_GPU();
  check_bad_map_entries(kGpu);
}

TEST(SpconvCuda, RunsShuffledRowsInMortonOrderOnEveryVariant) {
  FRUGAL_SKIP_WITHOUT_GPU();
  using V = spconv::ConvVariant;
  check_run_order(kGpu, DType::f32, 16, 24, ConvChoice{.variant = V::simt});
  for (DType dt : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(to_string(dt));
    check_run_order(kGpu, dt, 16, 24, std::nullopt);
    check_run_order(kGpu, dt, 24, 40, ConvChoice{.variant = V::wmma});
    check_run_order(kGpu, dt, 64, 64, ConvChoice{.variant = V::mma});
    check_run_order(kGpu, dt, 64, 64, ConvChoice{.variant = V::mma, .sort_rows = true});
    if (!cuda::device_caps(0).sm90a) continue;
    for (V v : {V::wgmma, V::wgmma_ws, V::wgmma_ws2, V::halo_pipe})
      check_run_order(kGpu, dt, 64, 64, ConvChoice{.variant = v});
    check_run_order(kGpu, dt, 64, 128, ConvChoice{.variant = V::wgmma, .splits = 3});
  }
}
TEST(SpconvCuda, RunOrderErrors) {
  FRUGAL_SKIP_WITHOUT_GPU();
  check_run_order_errors(kGpu);
}

TEST(SpconvCuda, KernelMapCarriesItsValidityAndSkipsThePerCallCheck) {
  FRUGAL_SKIP_WITHOUT_GPU();
  check_kernel_map_object(kGpu);
}

// ---- CUDA: the mma kernel (rows sorted by neighbor mask) ---------------------------------------

// Runs a forced choice through the public call (a user map: checked) into a poisoned output; returns
// its bytes. The choice must run here (runs_here) and must be what served the call.
std::vector<uint8_t> run_forced(const Tensor& feats, const Tensor& nbr, const Tensor& w, const Tensor* bias, int64_t n,
                                const ConvChoice& c) {
  Tensor out = poisoned(n, w.size(2), feats.dtype(), kGpu);
  ConvOptions o;
  o.choice = c;
  const ConvChoice served = submanifold_conv(feats, nbr, w, bias ? &bias->view() : nullptr, out, o);
  EXPECT_EQ(served.variant, c.variant) << spconv::to_string(served);
  return read_bytes(out);
}
// The same where the choice runs here (the variant's limits and the device), else nothing.
std::optional<std::vector<uint8_t>> try_forced(const Tensor& feats, const Tensor& nbr, const Tensor& w,
                                               const Tensor* bias, int64_t n, const ConvChoice& c) {
  const Tensor out = Tensor::empty({n, w.size(2)}, feats.dtype(), kGpu);
  if (!runs_here(c, feats, nbr, w, out)) return std::nullopt;
  return run_forced(feats, nbr, w, bias, n, c);
}

std::vector<double> to_doubles(const std::vector<uint8_t>& bytes, DType dt) {
  std::vector<double> v(bytes.size() / 2);
  for (size_t i = 0; i < v.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, bytes.data() + 2 * i, 2);
    v[i] = dt == DType::f16 ? half_to_float(h) : bf16_to_float(h);
  }
  return v;
}

// mv(tile_co, sorted, chunk_rows, variant, splits, tile_rows): the mma and wgmma variants of the tests
// below (tile_co 0: by rule; splits 0: by grid size).
ConvChoice mv(int tile_co, bool sorted, int64_t chunk_rows, V v = V::mma, int splits = 1, int tile_rows = 128) {
  return forced(v, tile_co, sorted, chunk_rows, splits, tile_rows);
}

const ConvChoice kMmaVariants[] = {mv(0, true, 0),   mv(64, true, 0), mv(128, true, 0),
                                   mv(256, true, 0), mv(0, false, 0), mv(128, true, 256)};
constexpr V kWg = V::wgmma, kWs = V::wgmma_ws, kWs2 = V::wgmma_ws2, kHalo = V::halo_pipe;
// The wgmma kernels, unsplit: every width, sorted and unsorted rows, 256-row launches, 256-row
// tiles, the warp-specialized kernels, the halo kernel. Bitwise equal among themselves (skipping omits
// exact zeros; the halo kernel at Ci ≤ 64).
const ConvChoice kWgmmaVariants[] = {mv(0, true, 0, kWg), mv(64, true, 0, kWg), mv(128, true, 0, kWg),
                                     mv(256, true, 0, kWg), mv(0, false, 0, kWg), mv(128, true, 256, kWg),
                                     mv(256, false, 256, kWg),
                                     // 256-row tiles (up to 128-wide column tiles), sorted and not, launches
                                     // of 384 rows (1.5 tiles)
                                     mv(64, true, 0, kWg, 1, 256), mv(128, true, 0, kWg, 1, 256),
                                     mv(0, false, 0, kWg, 1, 256), mv(64, true, 384, kWg, 1, 256),
                                     mv(64, false, 0, kWg, 1, 256), mv(128, false, 384, kWg, 1, 256),
                                     // the warp-specialized kernel: every width, sorted and not, 256-row launches
                                     mv(0, true, 0, kWs), mv(64, true, 0, kWs), mv(128, false, 0, kWs),
                                     mv(256, true, 256, kWs), mv(64, false, 384, kWs), mv(64, true, 0, kWs2),
                                     mv(64, false, 256, kWs2),
                                     // its 256-row tiles: each consumer warpgroup owns two 64-row blocks
                                     mv(64, true, 0, kWs, 1, 256), mv(128, false, 0, kWs, 1, 256),
                                     mv(0, true, 384, kWs, 1, 256),
                                     // the pipelined halo kernel (Ci, Co ≤ 128)
                                     mv(64, false, 0, kHalo), mv(64, true, 256, kHalo), mv(0, false, 384, kHalo)};
// Split over 3 offset ranges: a different sum order than unsplit, but the ranges are fixed, so the
// output is again independent of width, row order, launch size and kernel.
const ConvChoice kWgmmaSplitVariants[] = {mv(0, true, 0, kWg, 3),         mv(64, true, 0, kWg, 3),
                                          mv(256, true, 0, kWg, 3),       mv(0, false, 0, kWg, 3),
                                          mv(128, true, 256, kWg, 3),     mv(128, true, 0, kWg, 3),
                                          mv(64, true, 0, kWg, 3, 256),   mv(128, false, 384, kWg, 3, 256),
                                          mv(0, true, 0, kWs, 3),         mv(256, false, 256, kWs, 3),
                                          mv(64, true, 0, kWs2, 3),       mv(128, true, 0, kWs, 3, 256)};
// The automatic split (by grid size: up to 8 on these small inputs) and 27 single-offset splits.
const ConvChoice kWgmmaAutoVariants[] = {mv(0, true, 0, kWg, 0),      mv(64, false, 0, kWg, 0),
                                         mv(256, true, 256, kWg, 0),  mv(128, true, 0, kWg, 27),
                                         mv(128, true, 0, kWg, 0, 256), mv(64, true, 0, kWg, 27, 256),
                                         mv(0, true, 0, kWs, 0),      mv(128, false, 0, kWs, 27)};

template <size_t... N>
std::vector<ConvChoice> variants_of(const ConvChoice (&... v)[N]) {
  std::vector<ConvChoice> all;
  (all.insert(all.end(), v, v + N), ...);
  return all;
}

// Every tile width, sorted and unsorted rows, and launches of 256 rows, against the CPU on the
// TRELLIS.2 widths (64 .. 256, 1024 in), an upsampling C -> 8C shape, and narrow or ragged ones.
void check_sorted_kernel_against_cpu(const std::vector<ConvChoice>& variants) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  const auto c = random_voxels(rng, 2, 12, 0.35, -6);  // ~1200 rows: several tiles and windows of work
  const int64_t n = c.size() / 4;
  const Tensor nbr_h = build_kernel_map(coords_tensor(c), 3, 1);
  const Tensor nbr_d = nbr_h.to(kGpu);
  for (const Shape sh : {Shape{64, 64}, Shape{128, 128}, Shape{256, 256}, Shape{64, 512}, Shape{128, 1024},
                         Shape{1024, 64}, Shape{32, 256}, Shape{8, 24}, Shape{40, 72}})
    for (DType dt : {DType::f16, DType::bf16}) {
      const auto f = testing::randn(n * sh.ci, rng);
      const auto w = testing::randn(27 * sh.ci * sh.co, rng, 1.0f / std::sqrt(27.0f * sh.ci));
      const auto b = testing::randn(sh.co, rng);
      const Tensor fh = make(f, {n, sh.ci}, dt), wh = make(w, {27, sh.ci, sh.co}, dt), bh = make(b, {sh.co}, dt);
      const Tensor fd = fh.to(kGpu), wd = wh.to(kGpu), bd = bh.to(kGpu);
      const auto ref = read(submanifold_conv(fh, nbr_h, wh, &bh.view()));
      int ran = 0;
      for (const auto& v : variants) {
        SCOPED_TRACE(std::string(to_string(dt)) + " ci=" + std::to_string(sh.ci) + " co=" + std::to_string(sh.co) +
                     " " + spconv::to_string(v));
        const auto bytes = try_forced(fd, nbr_d, wd, &bd, n, v);
        if (!bytes) continue;  // not a shape of this variant (e.g. the halo kernel at Co > 128)
        ++ran;
        const auto got = to_doubles(*bytes, dt);
        for (double x : got) ASSERT_TRUE(std::isfinite(x)) << "an output element was not written";
        EXPECT_LE(testing::rel_error(got, ref), tolerance(dt));
      }
      EXPECT_GT(ran, 0) << "ci=" << sh.ci << " co=" << sh.co;
    }
}

TEST(SpconvCudaMma, MatchesTheCpu) {
  FRUGAL_SKIP_WITHOUT_GPU();
  check_sorted_kernel_against_cpu(variants_of(kMmaVariants));
}

// Absent neighbors contribute exact zeros, so neither the row order, the tile width nor the launch
// size changes a bit of the output; and two runs agree bit for bit. (Each kernel against itself:
// the mma.sync and wgmma kernels may round differently inside the tensor core.)
void check_tiling_invariance(const std::vector<ConvChoice>& variants) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  const auto c = random_voxels(rng, 2, 14, 0.3, -7);
  const int64_t n = c.size() / 4;
  const Tensor nbr = build_kernel_map(coords_tensor(c, kGpu), 3, 1);
  for (DType dt : {DType::f16, DType::bf16}) {
    const Tensor feats = make(testing::randn(n * 64, rng), {n, 64}, dt, kGpu);
    const Tensor w = make(testing::randn(27 * 64 * 128, rng, 0.02f), {27, 64, 128}, dt, kGpu);
    const Tensor b = make(testing::randn(128, rng), {128}, dt, kGpu);
    const auto first = run_forced(feats, nbr, w, &b, n, variants[0]);
    EXPECT_EQ(run_forced(feats, nbr, w, &b, n, variants[0]), first) << "run to run, " << to_string(dt);
    for (const auto& v : variants)
      if (const auto got = try_forced(feats, nbr, w, &b, n, v)) EXPECT_EQ(*got, first) << spconv::to_string(v);
  }
}

TEST(SpconvCudaMma, OutputDoesNotDependOnTilingOrRowOrder) {
  FRUGAL_SKIP_WITHOUT_GPU();
  check_tiling_invariance(variants_of(kMmaVariants));
}

// N not a multiple of anything (1, 7, 129 rows) and tiles whose rows have no neighbor at all (not
// even the centre; a hand-made map): those rows get exactly the bias.
void check_odd_sizes(const std::vector<ConvChoice>& variants) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  const int ci = 16, co = 24;
  for (int64_t n : {1, 7, 129, 300}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    // Rows [0, n/2) have no neighbor; the others a random set of rows (the centre included).
    std::vector<int32_t> m(27 * n, static_cast<int32_t>(n));
    std::uniform_int_distribution<int64_t> pick(0, n - 1);
    std::bernoulli_distribution on(0.4);
    for (int64_t i = n / 2; i < n; ++i)
      for (int k = 0; k < 27; ++k)
        if (k == 13 || on(rng)) m[k * n + i] = static_cast<int32_t>(k == 13 ? i : pick(rng));
    Tensor nbr_h = Tensor::empty({27, n}, DType::i32);
    std::memcpy(nbr_h.data(), m.data(), m.size() * 4);
    const Tensor nbr_d = nbr_h.to(kGpu);
    for (DType dt : {DType::f16, DType::bf16}) {
      const auto b = rounded(testing::randn(co, rng), dt);
      const Tensor fh = make(testing::randn(n * ci, rng), {n, ci}, dt);
      const Tensor wh = make(testing::randn(27 * ci * co, rng, 0.05f), {27, ci, co}, dt), bh = make(b, {co}, dt);
      const Tensor fd = fh.to(kGpu), wd = wh.to(kGpu), bd = bh.to(kGpu);
      const auto ref = read(submanifold_conv(fh, nbr_h, wh, &bh.view()));
      for (const auto& v : variants) {
        SCOPED_TRACE(std::string(to_string(dt)) + " " + spconv::to_string(v));
        const auto bytes = try_forced(fd, nbr_d, wd, &bd, n, v);
        if (!bytes) continue;
        const auto got = to_doubles(*bytes, dt);
        for (int64_t i = 0; i < n / 2; ++i)
          for (int o = 0; o < co; ++o) ASSERT_EQ(got[i * co + o], b[o]) << "row " << i << " has no neighbor";
        EXPECT_LE(testing::rel_error(got, ref), tolerance(dt));
      }
    }
  }
}

TEST(SpconvCudaMma, OddSizesAndRowsWithoutNeighbors) {
  FRUGAL_SKIP_WITHOUT_GPU();
  check_odd_sizes(variants_of(kMmaVariants));
}

// ---- CUDA: the wgmma kernel (sm_90a), the same checks -------------------------------------------

#define FRUGAL_SKIP_WITHOUT_WGMMA()                                                    \
  FRUGAL_SKIP_WITHOUT_GPU();                                                           \
  if (!cuda::device_caps(0).sm90a) GTEST_SKIP() << "no sm_90a code for this device"

TEST(SpconvCudaWgmma, MatchesTheCpu) {
  FRUGAL_SKIP_WITHOUT_WGMMA();
  check_sorted_kernel_against_cpu(variants_of(kWgmmaVariants, kWgmmaSplitVariants, kWgmmaAutoVariants));
}

TEST(SpconvCudaWgmma, OutputDoesNotDependOnTilingOrRowOrder) {
  FRUGAL_SKIP_WITHOUT_WGMMA();
  {
    SCOPED_TRACE("unsplit");
    check_tiling_invariance(variants_of(kWgmmaVariants));
  }
  SCOPED_TRACE("3 splits");
  check_tiling_invariance(variants_of(kWgmmaSplitVariants));
}

TEST(SpconvCudaWgmma, OddSizesAndRowsWithoutNeighbors) {
  FRUGAL_SKIP_WITHOUT_WGMMA();
  check_odd_sizes(variants_of(kWgmmaVariants, kWgmmaSplitVariants, kWgmmaAutoVariants));
}

// A bad map entry is reported through the wgmma kernel's prologue too.
TEST(SpconvCudaWgmma, MapEntriesOutsideTheRange) {
  FRUGAL_SKIP_WITHOUT_WGMMA();
  const int64_t n = 300;
  std::vector<int32_t> m(27 * n, static_cast<int32_t>(n));
  for (int64_t i = 0; i < n; ++i) m[13 * n + i] = static_cast<int32_t>(i);
  m[20 * n + 257] = -5;
  m[26 * n + 299] = static_cast<int32_t>(n + 1);
  Tensor nbr = Tensor::empty({27, n}, DType::i32);
  std::memcpy(nbr.data(), m.data(), m.size() * 4);
  nbr = nbr.to(kGpu);
  const Tensor feats = Tensor::zeros({n, 16}, DType::f16, kGpu), w = Tensor::zeros({27, 16, 64}, DType::f16, kGpu);
  Tensor out = Tensor::empty({n, 64}, DType::f16, kGpu);
  int ran = 0;
  for (int splits : {1, 3})
    for (int rows : {128, 256})
      for (V v : {kWg, kWs, kWs2, kHalo}) {
        const ConvChoice c = forced(v, 0, {}, 0, splits, rows);
        if (!runs_here(c, feats, nbr, w, out)) continue;  // (two blocks and the halo kernel: 128-row tiles; halo: unsplit)
        ++ran;
        ConvOptions o;
        o.choice = c;
        expect_error([&] { submanifold_conv(feats, nbr, w, nullptr, out, o); }, ErrorCode::out_of_range,
                     {"nbr[20, 257] = -5"});  // the smaller index
      }
  EXPECT_EQ(ran, 2 * 2 * 2 + 2 + 1);
}

// A grid large enough for the size rules to pick the warp-specialized kernels (343K rows: 1340 tall
// blocks, ≥ 8 a multiprocessor on an H200 or H100): two blocks a multiprocessor at Ci = Co = 64,
// 256-row tiles at Ci = Co = 128, rows in the map's order; the dense block's tiles do not fit the halo
// kernel, so its KernelMap takes the same kernels. The default's output equals the plain kernel's 128-
// and 256-row tiles' bit for bit, and sampled rows match a double sum over their neighbors.
TEST(SpconvCudaWgmma, DefaultOnALargeGrid) {
  FRUGAL_SKIP_WITHOUT_WGMMA();
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  const int64_t side = 70, n = side * side * side;
  const spconv::KernelMap map = spconv::KernelMap::build(coords_tensor(dense_block(side, side, side), kGpu), 3, 1);
  const Tensor& nbr = map.nbr();
  for (const int64_t c : {64, 128})
  for (DType dt : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(std::string(to_string(dt)) + " c=" + std::to_string(c));
    const auto f = rounded(testing::randn(n * c, rng), dt);
    const auto w = rounded(testing::randn(27 * c * c, rng, 1.0f / std::sqrt(27.0f * c)), dt);
    const auto b = rounded(testing::randn(c, rng), dt);
    const Tensor fd = make(f, {n, c}, dt, kGpu), wd = make(w, {27, c, c}, dt, kGpu), bd = make(b, {c}, dt, kGpu);
    Tensor out = poisoned(n, c, dt, kGpu);
    const ConvChoice served = submanifold_conv(fd, nbr, wd, &bd.view(), out, ConvOptions{});
    EXPECT_EQ(served.variant, c == 64 ? kWs2 : kWs) << spconv::to_string(served);
    const auto got = read_bytes(out);
    Tensor out_map = poisoned(n, c, dt, kGpu);
    const ConvChoice over_map = submanifold_conv(fd, map, wd, &bd.view(), out_map);
    EXPECT_EQ(spconv::to_string(over_map), spconv::to_string(served)) << "the map's statistics: no halo kernel";
    if (over_map.variant != kHalo || c <= 64) EXPECT_EQ(read_bytes(out_map), got) << "over the KernelMap";
    EXPECT_EQ(run_forced(fd, nbr, wd, &bd, n, forced(kWg, 0, false, 0, 0, 128)), got) << "128-row tiles";
    EXPECT_EQ(run_forced(fd, nbr, wd, &bd, n, forced(kWg, 0, true, 0, 0, 256)), got) << "256-row tiles, sorted";
    // (The dense block's tiles do not fit a halo buffer but for those of the first and last planes: at
    // c = 128 those sum in two passes, another order.)
    const auto halo = run_forced(fd, nbr, wd, &bd, n, forced(kHalo, 0, false, 0, 1, 128));
    if (c <= 64)
      EXPECT_EQ(halo, got) << "the pipelined halo kernel";
    else
      EXPECT_LE(testing::rel_error(to_doubles(halo, dt), to_doubles(got, dt)), tolerance(dt))
          << "the pipelined halo kernel";
    const auto vals = to_doubles(got, dt);
    for (int64_t row : {int64_t{0}, n / 3, n / 2 + side * side + side + 1, n - 1}) {
      std::vector<double> ref(c), out_row(vals.begin() + row * c, vals.begin() + (row + 1) * c);
      for (int64_t o = 0; o < c; ++o) ref[o] = b[o];
      const int64_t x = row / (side * side), y = row / side % side, z = row % side;
      for (int k = 0; k < 27; ++k) {
        const int64_t qx = x + k / 9 - 1, qy = y + k / 3 % 3 - 1, qz = z + k % 3 - 1;
        if (qx < 0 || qy < 0 || qz < 0 || qx >= side || qy >= side || qz >= side) continue;
        const int64_t m = (qx * side + qy) * side + qz;
        for (int64_t q = 0; q < c; ++q)
          for (int64_t o = 0; o < c; ++o) ref[o] += static_cast<double>(f[m * c + q]) * w[(k * c + q) * c + o];
      }
      EXPECT_LE(testing::rel_error(out_row, ref), tolerance(dt)) << "row " << row;
    }
  }
}

// The warp-specialized kernels over a few hundred tiles in one launch (a 30³ block: 211 tiles of 128
// rows), each form forced: two blocks a multiprocessor at 64 channels, one block on 128- and 256-row
// tiles at 128, 256-wide tiles at 256. Bitwise the plain kernel's tiles. Sized for compute-sanitizer
// racecheck, where every multiprocessor runs blocks at once and each block's stage ring wraps many
// times (the tiny-input test runs a block or two).
TEST(SpconvCudaWgmma, WarpSpecializedOnAFewHundredTiles) {
  FRUGAL_SKIP_WITHOUT_WGMMA();
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  const int64_t side = 30, n = side * side * side;
  const Tensor nbr = build_kernel_map(coords_tensor(dense_block(side, side, side), kGpu), 3, 1);
  struct Form {
    int64_t c;
    int tile_rows;
    V variant;
  };
  for (const Form& form : {Form{64, 128, kWs2}, Form{64, 128, kHalo}, Form{128, 128, kWs}, Form{128, 256, kWs},
                           Form{256, 128, kWs}}) {
    const int64_t c = form.c;
    SCOPED_TRACE("c=" + std::to_string(c) + " tile_rows=" + std::to_string(form.tile_rows) + " " +
                 spconv::to_string(form.variant));
    const auto f = rounded(testing::randn(n * c, rng), DType::f16);
    const auto w = rounded(testing::randn(27 * c * c, rng, 1.0f / std::sqrt(27.0f * c)), DType::f16);
    const Tensor fd = make(f, {n, c}, DType::f16, kGpu), wd = make(w, {27, c, c}, DType::f16, kGpu);
    const int co_tile = static_cast<int>(c);  // one column tile
    const auto ws = run_forced(fd, nbr, wd, nullptr, n, forced(form.variant, co_tile, false, 0, 1, form.tile_rows));
    const auto plain = run_forced(fd, nbr, wd, nullptr, n, forced(kWg, co_tile, false, 0, 1, form.tile_rows));
    EXPECT_EQ(ws, plain);
  }
}

// A thin sphere shell (the voxels of a res³ grid within 0.87 of radius 0.45·res), in the map's order (x, y, z).
std::vector<int32_t> sphere_shell(int res) {
  std::vector<int32_t> shell;
  for (int x = 0; x < res; ++x)
    for (int y = 0; y < res; ++y)
      for (int z = 0; z < res; ++z) {
        const double d = std::sqrt((x - res / 2.0) * (x - res / 2.0) + (y - res / 2.0) * (y - res / 2.0) +
                                   (z - res / 2.0) * (z - res / 2.0));
        if (std::abs(d - 0.45 * res) < 0.87) shell.insert(shell.end(), {0, x, y, z});
      }
  return shell;
}

// The pipelined halo kernel on its two paths, within the tolerance of the CPU and, at Ci ≤ 64 (one
// pass: the same sums in the same order), bitwise against the warp-specialized kernel; at Ci > 64 (two
// passes of 64 channels, summed pass by pass) bitwise run to run: a thin sphere shell in the map's
// order (every tile's input rows fit its shared memory), a hand-made map whose entries are random rows
// (a tile's ~1,600 distinct rows do not: every tile is handed off to the warp-specialized kernel, so
// bitwise its output at any Ci), with the neighbors of a third of the rows cleared, and the shell's
// rows followed by such random rows (both paths in one launch), and a map whose tiles' neighbours of
// each third of the offsets lie in two clusters of 64 rows ~1,500 rows apart (their ranges do not fit
// the halo, the boxes of rows they use do: at Ci > 64 the output must then be the halo kernel's, whose
// sum order is not the warp-specialized kernel's). Co ≤ 64 runs 64-wide column tiles, Co ≤ 128
// 128-wide ones.
TEST(SpconvCudaWgmma, HaloKernelOnShellsAndRandomMaps) {
  FRUGAL_SKIP_WITHOUT_WGMMA();
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  const std::vector<int32_t> shell = sphere_shell(96);
  const int64_t n_shell = static_cast<int64_t>(shell.size() / 4);
  const Tensor shell_map = build_kernel_map(coords_tensor(shell), 3, 1);
  // Rows first .. n − 1 of an n-row map get random neighbors (the center one itself, a third of the
  // rows none); rows before first keep `from`'s entries.
  std::bernoulli_distribution absent(0.3);
  auto random_rows = [&](const Tensor* from, int64_t first, int64_t n) {
    std::vector<int32_t> m(27 * n);
    std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(n - 1));
    for (int64_t i = 0; i < n; ++i)
      for (int k = 0; k < 27; ++k) {
        const int32_t e = i < first ? static_cast<const int32_t*>(from->data())[k * first + i] : pick(rng);
        m[k * n + i] = i < first                   ? (e == first ? static_cast<int32_t>(n) : e)
                       : k == 13                   ? static_cast<int32_t>(i)
                       : absent(rng) || i % 3 == 0 ? static_cast<int32_t>(n)
                                                   : e;
      }
    Tensor t = Tensor::empty({27, n}, DType::i32);
    std::memcpy(t.data(), m.data(), m.size() * 4);
    return t;
  };
  const int64_t n_rand = 3000, n_mixed = n_shell + 1500, n_far = 4096;
  const Tensor rand_map = random_rows(nullptr, 0, n_rand), mixed_map = random_rows(&shell_map, n_shell, n_mixed);
  Tensor far_map = Tensor::empty({27, n_far}, DType::i32);
  for (int64_t i = 0; i < n_far; ++i)
    for (int k = 0; k < 27; ++k) {  // third g = k / 9: rows 700 g + 16 (tile % 8) + {0, 1500} + 0 … 63
      const int64_t t = i / 128, l = i % 128, j = k % 9;
      static_cast<int32_t*>(far_map.data())[k * n_far + i] =
          absent(rng) ? static_cast<int32_t>(n_far)
                      : static_cast<int32_t>(700 * (k / 9) + 16 * (t % 8) + 1500 * (j % 2) + (l + 5 * j) % 64);
    }
  for (const auto& [name, nbr_h, n] :
       {std::tuple{"shell", shell_map, n_shell}, std::tuple{"random map", rand_map, n_rand},
        std::tuple{"shell, then random rows", mixed_map, n_mixed}, std::tuple{"far clusters", far_map, n_far}})
    for (const auto [ci, co] : {std::pair{64, 64}, std::pair{32, 48}, std::pair{8, 64}, std::pair{128, 128},
                                std::pair{96, 128}, std::pair{128, 64}, std::pair{64, 128}, std::pair{72, 80}})
      for (DType dt : {DType::f16, DType::bf16}) {
        if ((n == n_mixed || n == n_far) && ((ci != 64 && ci != 128) || ci != co || dt != DType::f16))
          continue;  // the mix and the clusters: two cases each
        if (dt == DType::bf16 && ci > 64 && ci != co) continue;  // f16 covers those
        SCOPED_TRACE(std::string(name) + " " + to_string(dt) + " ci=" + std::to_string(ci) +
                     " co=" + std::to_string(co));
        const Tensor fh = make(testing::randn(n * ci, rng), {n, ci}, dt);
        const Tensor wh = make(testing::randn(27 * ci * co, rng, 1.0f / std::sqrt(27.0f * ci)), {27, ci, co}, dt);
        const Tensor bh = make(testing::randn(co, rng), {co}, dt);
        const Tensor nbr_d = nbr_h.to(kGpu), fd = fh.to(kGpu), wd = wh.to(kGpu), bd = bh.to(kGpu);
        const int bn = co <= 64 ? 64 : 128;
        const auto halo = run_forced(fd, nbr_d, wd, &bd, n, forced(kHalo, bn, false, 0, 1, 128));  // (served: asserted)
        const auto ws = run_forced(fd, nbr_d, wd, &bd, n, forced(kWs, bn, false, 0, 1, 128));
        if (ci <= 64 || n == n_rand)
          EXPECT_EQ(halo, ws) << "against the warp-specialized kernel";
        else
          EXPECT_EQ(halo, run_forced(fd, nbr_d, wd, &bd, n, forced(kHalo, bn, false, 0, 1, 128))) << "run to run";
        if (ci > 64 && n == n_far) EXPECT_NE(halo, ws) << "the clusters' tiles kept by the halo kernel";
        const std::vector<double> want = read(submanifold_conv(fh, nbr_h, wh, &bh.view()));
        EXPECT_LE(testing::rel_error(to_doubles(halo, dt), want), tolerance(dt));
        EXPECT_LE(testing::rel_error(to_doubles(ws, dt), want), tolerance(dt));
      }
}

// The rule: at 64 and at 128 channels a conv over a KernelMap takes the pipelined halo kernel for a
// shell in the map's order, on a large grid and on a small one (a few tiles a multiprocessor), and the
// warp-specialized kernels for the same rows shuffled (no tile fits its halo then), on every call: the
// map's statistics say which. The same maps as plain tensors (user maps: no statistics) never take it.
// Every call is bitwise the forced halo kernel's output (which hands every tile of the shuffled rows
// to the warp-specialized kernel), the user map's call too at 64 channels (one pass: the same sums).
TEST(SpconvCudaWgmma, PipelinedHaloKernelWhereTheRowsSuitIt) {
  FRUGAL_SKIP_WITHOUT_WGMMA();
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  auto check = [&](const spconv::KernelMap& map, const char* name, bool pipe) {
    const Tensor& nbr = map.nbr();
    const int64_t n = nbr.size(1);
    EXPECT_TRUE(map.stats().valid);
    EXPECT_EQ(map.stats().halo_samples, spconv::halo_samples(n));
    for (const int64_t c : {64, 128})
      for (DType dt : {DType::f16, DType::bf16}) {
        SCOPED_TRACE(std::string(name) + " " + to_string(dt) + " c=" + std::to_string(c));
        const Tensor fd = make(testing::randn(n * c, rng), {n, c}, dt, kGpu);
        const Tensor wd = make(testing::randn(27 * c * c, rng, 1.0f / std::sqrt(27.0f * c)), {27, c, c}, dt, kGpu);
        const Tensor bd = make(testing::randn(c, rng), {c}, dt, kGpu);
        const auto want = run_forced(fd, nbr, wd, &bd, n, forced(kHalo, static_cast<int>(c), false, 0, 1, 128));
        for (int call = 0; call < 2; ++call) {
          Tensor out = poisoned(n, c, dt, kGpu);
          EXPECT_EQ(spconv::choose_conv(fd, map, wd, &bd.view(), out).variant == kHalo, pipe);
          const ConvChoice served = submanifold_conv(fd, map, wd, &bd.view(), out);
          EXPECT_EQ(served.variant == kHalo, pipe) << "call " << call << ": " << spconv::to_string(served);
          EXPECT_EQ(read_bytes(out), want) << "call " << call;
        }
        Tensor out = poisoned(n, c, dt, kGpu);
        const ConvChoice user = submanifold_conv(fd, nbr, wd, &bd.view(), out, ConvOptions{});
        EXPECT_NE(user.variant, kHalo) << "a user map: " << spconv::to_string(user);
        if (c <= 64) EXPECT_EQ(read_bytes(out), want) << "a user map";
      }
  };
  // ~400 K rows: a large grid (8 blocks of 256 rows a multiprocessor) on GPUs of up to ~190 multiprocessors.
  const std::vector<int32_t> shell = sphere_shell(300);
  const int64_t n = static_cast<int64_t>(shell.size() / 4);
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<int32_t> shuffled(shell.size());
  for (int64_t i = 0; i < n; ++i) std::copy_n(shell.begin() + 4 * order[i], 4, shuffled.begin() + 4 * i);
  // ~72 K rows: ~570 tiles, at least two a multiprocessor on GPUs of up to ~280 multiprocessors.
  const std::vector<int32_t> small = sphere_shell(128);
  check(spconv::KernelMap::build(coords_tensor(shell, kGpu), 3, 1), "map order", true);
  check(spconv::KernelMap::build(coords_tensor(shuffled, kGpu), 3, 1), "shuffled", false);
  check(spconv::KernelMap::build(coords_tensor(small, kGpu), 3, 1), "small shell, map order", true);
  // A user map checked once (from_user) carries the same statistics as the one frugal built.
  const spconv::KernelMap built = spconv::KernelMap::build(coords_tensor(small, kGpu), 3, 1);
  const spconv::KernelMap checked = spconv::KernelMap::from_user(build_kernel_map(coords_tensor(small, kGpu), 3, 1), 3, 1);
  EXPECT_EQ(checked.stats().halo_samples, built.stats().halo_samples);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) EXPECT_EQ(checked.stats().halo_fits[i][j], built.stats().halo_fits[i][j]);
}

// The public entry point picks the mma kernel for f16 with 8 channels: bad map entries are reported
// (checked) or count as absent (unchecked) there too.
TEST(SpconvCudaMma, MapEntriesOutsideTheRange) {
  FRUGAL_SKIP_WITHOUT_GPU();
  const int64_t n = 3;
  std::vector<float> f(n * 8);
  for (size_t i = 0; i < f.size(); ++i) f[i] = static_cast<float>(i % 8 + 8 * (i / 8));  // exact in f16
  const Tensor feats = make(f, {n, 8}, DType::f16, kGpu);
  const Tensor w = make(std::vector<float>(27 * 8 * 8, 1.0f), {27, 8, 8}, DType::f16, kGpu);
  for (int32_t bad : {4, -1, INT32_MIN}) {
    std::vector<int32_t> m(27 * n, static_cast<int32_t>(n));
    for (int64_t i = 0; i < n; ++i) m[13 * n + i] = static_cast<int32_t>(i);
    m[20 * n + 2] = bad;
    Tensor nbr = Tensor::empty({27, n}, DType::i32);
    std::memcpy(nbr.data(), m.data(), m.size() * 4);
    nbr = nbr.to(kGpu);
    expect_error([&] { submanifold_conv(feats, nbr, w); }, ErrorCode::out_of_range,
                 {"[spconv::submanifold_conv]", ("nbr[20, 2] = " + std::to_string(bad)).c_str()});
    Tensor out = poisoned(n, 8, DType::f16, kGpu);
    submanifold_conv(feats, nbr, w, nullptr, out, nullptr, spconv::MapCheck::unchecked);
    const auto got = read(out);
    for (int64_t i = 0; i < n; ++i)  // only the centre: the sum of row i's 8 features
      EXPECT_EQ(got[i * 8], 28.0 + 64.0 * i) << "row " << i;
  }
}

TEST(SpconvCudaMma, RefusesWhatItCannotTake) {
  FRUGAL_SKIP_WITHOUT_GPU();
  const Tensor nbr = build_kernel_map(coords_tensor({0, 0, 0, 0, 0, 0, 0, 1}, kGpu), 5, 1);  // K = 125
  Tensor feats = Tensor::zeros({2, 8}, DType::f16, kGpu), out = Tensor::zeros({2, 8}, DType::f16, kGpu);
  Tensor w = Tensor::zeros({125, 8, 8}, DType::f16, kGpu);
  ConvOptions mma;
  mma.choice = forced(V::mma);
  expect_error([&] { submanifold_conv(feats, nbr, w, nullptr, out, mma); }, ErrorCode::unsupported,
               {"[spconv::submanifold_conv]", "mma", "K <= 32", "K = 125"});
  EXPECT_EQ(submanifold_conv(feats, nbr, w, nullptr, out, ConvOptions{}).variant, V::wmma) << "by rule: WMMA";
  const Tensor nbr27 = build_kernel_map(coords_tensor({0, 0, 0, 0, 0, 0, 0, 1}, kGpu), 3, 1);
  Tensor f32 = Tensor::zeros({2, 8}, DType::f32, kGpu), w32 = Tensor::zeros({27, 8, 8}, DType::f32, kGpu);
  Tensor out32 = Tensor::zeros({2, 8}, DType::f32, kGpu);
  expect_error([&] { submanifold_conv(f32, nbr27, w32, nullptr, out32, mma); }, ErrorCode::unsupported,
               {"f16 or bf16", "f32"});
  // The wgmma variants where the device has no sm_90a code; the CPU's variant on the GPU.
  ConvOptions wg;
  wg.choice = forced(V::wgmma);
  const Tensor w27 = Tensor::zeros({27, 8, 8}, DType::f16, kGpu);
  if (!cuda::device_caps(0).sm90a)
    expect_error([&] { submanifold_conv(feats, nbr27, w27, nullptr, out, wg); }, ErrorCode::unsupported,
                 {"wgmma", "sm_90a"});
  ConvOptions on_cpu;
  on_cpu.choice = forced(V::cpu);
  expect_error([&] { submanifold_conv(feats, nbr27, w27, nullptr, out, on_cpu); }, ErrorCode::unsupported,
               {"cpu", "CPU calls only"});
}

// Row offsets past 2^31 elements: N·Ci = 16.8 M × 128 > 2^31. A dense 257×256×256 block of
// voxels, f16; sampled rows past element 2^31 checked against a double sum over their neighbors.
TEST(SpconvCudaLarge, IndexesPast2To31Elements) {
  FRUGAL_SKIP_WITHOUT_GPU();
  const int64_t nx = 257, ny = 256, nz = 256, n = nx * ny * nz, c = 128;
  ASSERT_GT(n * c, int64_t{1} << 31);
  const std::vector<int32_t> flat = dense_block(nx, ny, nz);
  // Inputs exactly representable in f16: multiples of 2^-10 in [-0.5, 0.5), from a hash of the
  // element index (a table of the 1024 values keeps the 2^31-element fill to a few seconds).
  auto code = [](int64_t i) {
    uint64_t h = static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
    return static_cast<int>((h >> 20) & 1023);
  };
  auto feat = [&](int64_t i) { return static_cast<float>(code(i) - 512) / 1024.0f; };
  uint16_t bits[1024];
  for (int v = 0; v < 1024; ++v) bits[v] = float_to_half(static_cast<float>(v - 512) / 1024.0f);
  Tensor fh = Tensor::empty({n, c}, DType::f16);
  auto* fp = fh.data_as<uint16_t>();
  for (int64_t i = 0; i < n * c; ++i) fp[i] = bits[code(i)];
  std::mt19937_64 rng(7);
  const auto w = rounded(testing::randn(27 * c * c, rng, 1.0f / std::sqrt(27.0f * c)), DType::f16);
  const Tensor coords = coords_tensor(flat, kGpu);
  const Tensor nbr = build_kernel_map(coords, 3, 1);
  const Tensor feats = fh.to(kGpu);
  const Tensor wd = make(w, {27, c, c}, DType::f16, kGpu);
  const Tensor out = submanifold_conv(feats, nbr, wd);
  // The public call takes the wgmma kernel where the device runs it; the mma kernel on the same
  // input then, checked the same way.
  const bool wg = cuda::device_caps(0).sm90a;
  Tensor out_wg = Tensor::empty({wg ? n : 0, c}, DType::f16, kGpu);
  // And the wgmma kernel with 256-row tiles (whatever the default picks), bitwise equal to the
  // default's output when that is the wgmma kernel (absent neighbors add exact zeros).
  Tensor out_tall = Tensor::empty({wg ? n : 0, c}, DType::f16, kGpu);
  if (wg) {
    ConvOptions o;
    o.choice = forced(V::mma);
    EXPECT_EQ(submanifold_conv(feats, nbr, wd, nullptr, out_wg, o).variant, V::mma);
    o.choice = forced(V::wgmma_ws, 0, {}, 0, 0, 256);  // the default's variant on these rows, forced to 256-row tiles
    EXPECT_EQ(submanifold_conv(feats, nbr, wd, nullptr, out_tall, o).variant, V::wgmma_ws);
    EXPECT_EQ(read_bytes(out_tall), read_bytes(out)) << "256-row tiles against the default";
  }
  const int64_t first_big = (int64_t{1} << 31) / c;
  for (int64_t row : {first_big, first_big + 12345, n - 257, n - 1}) {
    const TensorView got_row(static_cast<uint16_t*>(out.data()) + row * c, DType::f16, {c}, kGpu);
    const auto got = read(got_row);
    std::vector<double> got_wg;
    if (wg) got_wg = read(TensorView(static_cast<uint16_t*>(out_wg.data()) + row * c, DType::f16, {c}, kGpu));
    std::vector<double> ref(c, 0.0);
    const int64_t x = row / (ny * nz), y = row / nz % ny, z = row % nz;
    for (int k = 0; k < 27; ++k) {
      const int64_t qx = x + k / 9 - 1, qy = y + k / 3 % 3 - 1, qz = z + k % 3 - 1;
      if (qx < 0 || qy < 0 || qz < 0 || qx >= nx || qy >= ny || qz >= nz) continue;
      const int64_t m = (qx * ny + qy) * nz + qz;
      int32_t got_m = -1;
      copy(TensorView(nbr.data_as<int32_t>() + k * n + row, DType::i32, {1}, kGpu),
           TensorView(&got_m, DType::i32, {1}));
      EXPECT_EQ(got_m, m) << "nbr[" << k << ", " << row << "]";
      for (int64_t q = 0; q < c; ++q)
        for (int64_t o = 0; o < c; ++o) ref[o] += static_cast<double>(feat(m * c + q)) * w[(k * c + q) * c + o];
    }
    EXPECT_LE(testing::rel_error(got, ref), 1e-2) << "row " << row;
    if (wg) EXPECT_LE(testing::rel_error(got_wg, ref), 1e-2) << "mma, row " << row;
  }
}

}  // namespace
}  // namespace frugal
