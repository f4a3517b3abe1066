// The CPU attention's SIMD pass over a work item's tokens against its portable pass (cpu/attention_rows.h),
// on random packed codes: every code width it serves, head dims, GQA group sizes that are not multiples
// of its four, token ranges with partial blocks, and blocks whose scores are not finite.
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cpu/attention_rows.h"
#include "testing.h"

namespace frugal::cpu::rows {
namespace {

struct Case {
  int dim, q_heads, kv_heads, k_bits, v_bits;
};

// batch rows over one contiguous cache: row b attends tokens [begin[b], end[b]) of its head's rows.
struct Rows {
  std::vector<int64_t> b, e;
  int kv_heads;
  int64_t capacity, q_row;  // q_row: elements between rows' queries
  int64_t count() const { return static_cast<int64_t>(b.size()); }
  int64_t begin(int64_t r) const { return b[r]; }
  int64_t end(int64_t r) const { return e[r]; }
  int64_t q_offset(int64_t r) const { return r * q_row; }
  int64_t out_row(int64_t r) const { return r; }
  int64_t vector(int64_t r, int hk, int64_t t) const { return (r * kv_heads + hk) * capacity + t; }
};

struct Cache {
  std::vector<uint8_t> packed;
  std::vector<float> scales, centroids;
  attention::backend::CacheArgs args(int bits) const {
    return {packed.data(), scales.data(), nullptr, centroids.data(), bits};
  }
};

Cache random_cache(int64_t vectors, int dim, int bits, std::mt19937_64& rng) {
  Cache c;
  c.packed.resize(static_cast<size_t>(vectors) * dim * bits / 8);
  for (uint8_t& x : c.packed) x = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> s(0.5f, 1.5f);
  for (int64_t i = 0; i < vectors; ++i) c.scales.push_back(s(rng) * std::sqrt(static_cast<float>(dim)));
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (int i = 0; i < (1 << bits); ++i) c.centroids.push_back(n(rng));
  return c;
}

// The two passes' outputs, f32, [rows, Hq, D]; `poison` sets key scale t of row 0, head 0 (a NaN or ∞ score).
std::vector<std::vector<double>> both_passes(const Case& k, const std::vector<int64_t>& lens, int64_t slice,
                                             float poison = 0.0f, int64_t poisoned = -1) {
  std::mt19937_64 rng(testing::test_seed() ^ (uint64_t(k.dim) << 20) ^ (uint64_t(k.q_heads) << 8) ^ k.k_bits);
  const int64_t capacity = 1100, batch = static_cast<int64_t>(lens.size());
  Cache kc = random_cache(batch * k.kv_heads * capacity, k.dim, k.k_bits, rng);
  Cache vc = random_cache(batch * k.kv_heads * capacity, k.dim, k.v_bits, rng);
  if (poisoned >= 0) kc.scales[poisoned] = poison;
  std::vector<float> q(static_cast<size_t>(batch) * k.q_heads * k.dim);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (float& x : q) x = n(rng);
  const Rows rows{std::vector<int64_t>(batch, 0), lens, k.kv_heads, capacity, int64_t{k.q_heads} * k.dim};
  std::vector<std::vector<double>> out;
  for (bool portable : {true, false}) {
    std::vector<float> o(q.size(), std::numeric_limits<float>::quiet_NaN());
    Problem p;
    p.dim = k.dim;
    p.q_heads = k.q_heads;
    p.kv_heads = k.kv_heads;
    p.k = kc.args(k.k_bits);
    p.v = vc.args(k.v_bits);
    p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(k.dim));
    p.slice = slice;
    p.q = q.data();
    p.q_stride_h = k.dim;
    p.out = o.data();
    p.portable = portable;
    attend(p, rows);
    out.push_back(std::vector<double>(o.begin(), o.end()));
  }
  return out;
}

std::string describe(const Case& k) {
  return "D=" + std::to_string(k.dim) + " Hq=" + std::to_string(k.q_heads) + " Hkv=" + std::to_string(k.kv_heads) +
         " K" + std::to_string(k.k_bits) + "/V" + std::to_string(k.v_bits);
}

TEST(CpuAttentionPass, SimdMatchesPortableForEveryWidthDimAndGroup) {
  FRUGAL_TRACE_SEED();
  for (int kb : {4, 8})
    for (int vb : {4, 8})
      for (const Case& c : {Case{16, 2, 2, kb, vb}, Case{64, 12, 2, kb, vb}, Case{128, 8, 2, kb, vb},
                            Case{128, 4, 4, kb, vb}, Case{256, 3, 1, kb, vb}}) {
        // 1030 with slices of 512: full slices, and partial blocks at the ends of slices and rows.
        const auto r = both_passes(c, {1030, 7, 45}, 512);
        EXPECT_LE(testing::rel_error(r[1], r[0]), 2e-6) << describe(c);
      }
}

// A block holding a NaN or infinite score takes the portable step: the heads that see it end NaN as there.
TEST(CpuAttentionPass, NonFiniteScoresEndAsInThePortablePass) {
  FRUGAL_TRACE_SEED();
  constexpr float kInf = std::numeric_limits<float>::infinity();
  int infinite_nans = 0;
  for (float poison : {std::numeric_limits<float>::quiet_NaN(), kInf, -kInf}) {
    const auto r = both_passes(Case{64, 8, 2, 4, 4}, {300}, 0, poison, 77);
    ASSERT_EQ(r[0].size(), r[1].size());
    int nan = 0;
    for (size_t i = 0; i < r[0].size(); ++i) {
      EXPECT_EQ(std::isnan(r[0][i]), std::isnan(r[1][i])) << "element " << i;
      nan += std::isnan(r[1][i]);
      if (!std::isnan(r[0][i])) EXPECT_NEAR(r[1][i], r[0][i], 1e-5 * (1 + std::abs(r[0][i])));
    }
    // A NaN score poisons the four heads of K/V head 0. An infinite scale makes the score +∞ (NaN out) for
    // the heads whose q·k has the scale's sign and −∞ (the token left out) for the others: over +∞ and −∞
    // each of the four heads ends NaN exactly once (its q·k is not 0).
    if (std::isnan(poison))
      EXPECT_EQ(nan, 4 * 64);
    else
      infinite_nans += nan;
  }
  EXPECT_EQ(infinite_nans, 4 * 64);
}

}  // namespace
}  // namespace frugal::cpu::rows
