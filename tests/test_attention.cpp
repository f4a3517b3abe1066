// Decode attention over the packed KV cache, against a naive double-precision attention over the
// dequantized cache (the exact function), against fp32 attention over the unquantized K/V (the
// quantization error), CUDA against the CPU, and bad input.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/attention_backend.h"
#include "core/attention_choose.h"
#include "frugal/attention.h"
#include "frugal/half.h"
#include "frugal/kv_cache.h"
#include "attention_fixtures.h"
#include "testing.h"

namespace frugal::attention {
namespace {

using testing::test_seed;
using testing::to_double;

using namespace fixtures;

// fp32 inputs, unquantized: attention over the raw tokens [begin, end) of each sequence.
std::vector<double> oracle_raw(const std::vector<float>& q, int q_heads, const Filled& f, const Range& r,
                               double scale) {
  const kv::CacheConfig& c = f.k.config();
  const int64_t row = static_cast<int64_t>(c.num_kv_heads) * c.head_dim;
  std::vector<double> out(static_cast<size_t>(c.batch) * q_heads * c.head_dim);
  for (int b = 0; b < c.batch; ++b)
    naive_attention(q.data() + static_cast<size_t>(b) * q_heads * c.head_dim, f.k_raw[b].data() + r.begin[b] * row,
                    f.v_raw[b].data() + r.begin[b] * row, r.end[b] - r.begin[b], q_heads, c.num_kv_heads, c.head_dim,
                    scale, out.data() + static_cast<size_t>(b) * q_heads * c.head_dim);
  return out;
}

double cosine(const std::vector<double>& a, const std::vector<double>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ab += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

bool all_finite(const std::vector<double>& v) {
  return std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); });
}

// Runs decode attention on `device` (caches copied there), out poisoned with NaN first; `choice`
// (when given) receives the choice the call made (choose_decode of the same arguments).
Tensor run(const Filled& f, const Query& q, Device device, DType out_dtype, const DecodeOptions& opt = {},
           DecodeChoice* choice = nullptr) {
  const kv::CacheConfig& c = f.k.config();
  const int64_t hq = q.host.size(1);
  Tensor out_host = Tensor::empty({c.batch, hq, c.head_dim}, out_dtype);
  std::fill_n(static_cast<uint8_t*>(out_host.data()), out_host.nbytes(), 0xFF);  // NaN in every float format
  if (device.is_cpu()) {
    if (choice) *choice = choose_decode(q.host, f.k, f.v, opt);
    decode_attention(q.host, f.k, f.v, out_host, opt);
    return out_host;
  }
  kv::Cache kd = f.k.to(device), vd = f.v.to(device);
  Tensor qd = q.host.to(device);
  Tensor out = out_host.to(device);
  if (choice) *choice = choose_decode(qd, kd, vd, opt);
  decode_attention(qd, kd, vd, out, opt);
  return out.to(Device::cpu());
}

// One CUDA call (f32 output) that must be served by `expected`: forced through opt.variant, or the rule's.
std::vector<double> run_as(const Filled& f, const Query& q, const DecodeOptions& opt, DecodeVariant expected) {
  DecodeChoice choice;
  std::vector<double> got = to_double(run(f, q, Device::cuda(), DType::f32, opt, &choice));
  EXPECT_EQ(choice.variant, expected) << to_string(choice);
  return got;
}

struct Result {
  double rel = 0;      // against the dequantized oracle
  double cpu_rel = 0;  // against the CPU backend (GPU runs only)
  std::vector<double> got, ref;
};

Result check_against_oracle(const Shape& s, const std::vector<int64_t>& lens, Device device, DType qdtype,
                            Math math = Math::automatic, int num_splits = 0, int64_t piece = 1 << 30) {
  std::mt19937_64 rng(test_seed() ^ (uint64_t(s.dim) << 32) ^ (uint64_t(s.q_heads) << 16) ^ lens.size());
  Filled f = fill(s, lens, rng, piece);
  Query q = make_query(s.batch, s.q_heads, s.dim, qdtype, rng);
  DecodeOptions opt;
  opt.math = math;
  opt.num_splits = num_splits;
  Result r;
  r.got = to_double(run(f, q, device, qdtype, opt));
  r.ref = oracle_dequantized(q.f32, s.q_heads, f.k, f.v, held_ranges(f.k), 1.0 / std::sqrt(double(s.dim)));
  r.rel = testing::rel_error(r.got, r.ref);
  if (device.is_cuda()) r.cpu_rel = testing::rel_error(r.got, to_double(run(f, q, Device::cpu(), qdtype, opt)));
  return r;
}

std::string describe(const Shape& s) {
  return "B=" + std::to_string(s.batch) + " Hq=" + std::to_string(s.q_heads) + " Hkv=" + std::to_string(s.kv_heads) +
         " D=" + std::to_string(s.dim) + " K" + std::to_string(s.k_bits) + "/V" + std::to_string(s.v_bits);
}

// ---- CPU: the exact function ------------------------------------------------------------------

TEST(DecodeAttentionCpu, MatchesTheDequantizedOracle) {
  FRUGAL_TRACE_SEED();
  Shape s;
  s.batch = 2;
  s.k_seed = 11;
  s.v_seed = 12;
  const Result r = check_against_oracle(s, {37, 100}, Device::cpu(), DType::f32);
  EXPECT_TRUE(all_finite(r.got));
  EXPECT_LE(r.rel, 1e-5);
}

TEST(DecodeAttentionCpu, HeadDimsFrom4To512) {
  FRUGAL_TRACE_SEED();
  for (int d : {4, 32, 64, 128, 256, 512}) {
    Shape s;
    s.dim = d;
    s.q_heads = 4;
    s.kv_heads = 1;
    const Result r = check_against_oracle(s, {300}, Device::cpu(), DType::f32);
    EXPECT_LE(r.rel, 1e-5) << describe(s);
  }
}

TEST(DecodeAttentionCpu, GqaRatios1_4_8_12) {
  FRUGAL_TRACE_SEED();
  for (int g : {1, 4, 8, 12}) {
    Shape s;
    s.kv_heads = 2;
    s.q_heads = 2 * g;
    const Result r = check_against_oracle(s, {129}, Device::cpu(), DType::f32);
    EXPECT_LE(r.rel, 1e-5) << describe(s);
  }
}

TEST(DecodeAttentionCpu, MixedBitWidthsIncludingK8V4) {
  FRUGAL_TRACE_SEED();
  for (auto [kb, vb] : {std::pair{8, 4}, {4, 8}, {8, 8}, {2, 3}, {3, 2}}) {
    Shape s;
    s.k_bits = kb;
    s.v_bits = vb;
    s.k_seed = 5;  // K and V with different signs, V's only on some
    if (kb == 8) s.v_seed = 6;
    const Result r = check_against_oracle(s, {200}, Device::cpu(), DType::f32);
    EXPECT_LE(r.rel, 1e-5) << describe(s);
  }
}

TEST(DecodeAttentionCpu, LengthsOneAndNotMultiplesOfAnyTile) {
  FRUGAL_TRACE_SEED();
  for (int64_t len : {1, 1000, 4097}) {
    Shape s;
    s.kv_heads = 1;
    s.q_heads = 4;
    const Result r = check_against_oracle(s, {len}, Device::cpu(), DType::f32);
    EXPECT_LE(r.rel, 1e-5) << "L=" << len;
  }
}

TEST(DecodeAttentionCpu, LowPrecisionQueriesAndOutputs) {
  FRUGAL_TRACE_SEED();
  for (DType t : {DType::f16, DType::bf16}) {
    Shape s;
    const Result r = check_against_oracle(s, {77}, Device::cpu(), t);
    EXPECT_LE(r.rel, 1e-2) << to_string(t);  // the output is rounded to t
  }
}

TEST(DecodeAttentionCpu, BatchWithMixedLengthsAndAnEmptySequence) {
  FRUGAL_TRACE_SEED();
  Shape s;
  s.batch = 4;
  std::mt19937_64 rng(test_seed());
  Filled f = fill(s, {5, 0, 1500, 64}, rng);
  Query q = make_query(s.batch, s.q_heads, s.dim, DType::f32, rng);
  const std::vector<double> got = to_double(run(f, q, Device::cpu(), DType::f32));
  const std::vector<double> ref =
      oracle_dequantized(q.f32, s.q_heads, f.k, f.v, held_ranges(f.k), 1 / std::sqrt(128.0));
  EXPECT_LE(testing::rel_error(got, ref), 1e-5);
  for (int i = 0; i < s.q_heads * s.dim; ++i) ASSERT_EQ(got[s.q_heads * s.dim + i], 0.0) << "empty sequence";
}

TEST(DecodeAttentionCpu, RingReadsTheLastCapacityTokensAfterWrapping) {
  FRUGAL_TRACE_SEED();
  Shape s;
  s.sliding = true;
  s.capacity = 100;
  s.batch = 2;
  std::mt19937_64 rng(test_seed());
  Filled f = fill(s, {257, 60}, rng, /*piece=*/37);
  ASSERT_EQ(f.k.first_held(0), 157);
  Query q = make_query(s.batch, s.q_heads, s.dim, DType::f32, rng);
  const double scale = 1 / std::sqrt(128.0);
  const std::vector<double> got = to_double(run(f, q, Device::cpu(), DType::f32));
  const Range r{{157, 0}, {257, 60}};
  EXPECT_LE(testing::rel_error(got, oracle_dequantized(q.f32, s.q_heads, f.k, f.v, r, scale)), 1e-5);
  // And it is attention over the right raw tokens: close to attention over the unquantized last
  // 100 tokens (4-bit level, cosine ≈ 0.99), clearly farther from a window shifted by 50 tokens.
  const double cos_right = cosine(got, oracle_raw(q.f32, s.q_heads, f, r, scale));
  const double cos_shifted = cosine(got, oracle_raw(q.f32, s.q_heads, f, Range{{107, 0}, {207, 60}}, scale));
  EXPECT_GT(cos_right, 0.97);
  EXPECT_GT(cos_right, cos_shifted + 0.02) << "right " << cos_right << " shifted " << cos_shifted;
  std::printf("  ring: cosine vs the last 100 raw tokens %.4f, vs a window shifted by 50 %.4f\n", cos_right, cos_shifted);
}

TEST(DecodeAttentionCpu, ExplicitLengths) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  const double scale = 1 / std::sqrt(128.0);
  {  // global cache: [0, L)
    Shape s;
    s.batch = 3;
    Filled f = fill(s, {50, 80, 10}, rng);
    Query q = make_query(s.batch, s.q_heads, s.dim, DType::f32, rng);
    const std::vector<int64_t> lens = {20, 80, 0};
    DecodeOptions opt;
    opt.lengths = lens;
    const std::vector<double> got = to_double(run(f, q, Device::cpu(), DType::f32, opt));
    const Range r{{0, 0, 0}, {20, 80, 0}};
    EXPECT_LE(testing::rel_error(got, oracle_dequantized(q.f32, s.q_heads, f.k, f.v, r, scale)), 1e-5);
  }
  {  // ring: [L - capacity, L), which must still be held
    Shape s;
    s.sliding = true;
    s.capacity = 64;
    Filled f = fill(s, {150}, rng, 50);
    Query q = make_query(1, s.q_heads, s.dim, DType::f32, rng);
    const std::vector<int64_t> lens = {150};
    DecodeOptions opt;
    opt.lengths = lens;
    const std::vector<double> got = to_double(run(f, q, Device::cpu(), DType::f32, opt));
    EXPECT_LE(testing::rel_error(got, oracle_dequantized(q.f32, s.q_heads, f.k, f.v, Range{{86}, {150}}, scale)), 1e-5);
    const std::vector<int64_t> stale = {149};  // would need token 85, overwritten
    opt.lengths = stale;
    EXPECT_THROW(run(f, q, Device::cpu(), DType::f32, opt), Error);
  }
}

TEST(DecodeAttentionCpu, CustomSoftmaxScaleAndStridedQuery) {
  FRUGAL_TRACE_SEED();
  Shape s;
  std::mt19937_64 rng(test_seed());
  Filled f = fill(s, {90}, rng);
  // q as every other head of a [1, 2*Hq, D] buffer.
  Query wide = make_query(1, 2 * s.q_heads, s.dim, DType::f32, rng);
  const int64_t shape[] = {1, s.q_heads, s.dim};
  const int64_t strides[] = {2LL * s.q_heads * s.dim, 2LL * s.dim, 1};
  const TensorView qv(wide.host.data(), DType::f32, shape, strides, Device::cpu());
  std::vector<float> qf;
  for (int h = 0; h < s.q_heads; ++h)
    qf.insert(qf.end(), wide.f32.begin() + 2 * h * s.dim, wide.f32.begin() + (2 * h + 1) * s.dim);
  DecodeOptions opt;
  opt.softmax_scale = 0.3f;
  Tensor out = decode_attention(qv, f.k, f.v, opt);
  EXPECT_LE(testing::rel_error(to_double(out), oracle_dequantized(qf, s.q_heads, f.k, f.v, held_ranges(f.k), 0.3)),
            1e-5);
}

// ---- quality: against attention over the unquantized K/V ----------------------------------------

struct Quality {
  double rel, cos;
};

Quality quality(const Shape& s, int64_t len, std::mt19937_64& rng, double scale_mult = 1.0, float k_std = 1.0f,
                const std::vector<float>* gain = nullptr) {
  Filled f = fill(s, {len}, rng, 1 << 30, k_std, gain);
  Query q = make_query(1, s.q_heads, s.dim, DType::f32, rng);
  const double scale = scale_mult / std::sqrt(double(s.dim));
  DecodeOptions opt;
  opt.softmax_scale = static_cast<float>(scale);
  const std::vector<double> got = to_double(run(f, q, Device::cpu(), DType::f32, opt));
  const std::vector<double> ref = oracle_raw(q.f32, s.q_heads, f, held_ranges(f.k), scale);
  return {testing::rel_error(got, ref), cosine(got, ref)};
}

TEST(DecodeAttentionQuality, AgainstUnquantizedAttention) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  for (auto [kb, vb] : {std::pair{4, 4}, {8, 4}, {8, 8}, {3, 3}}) {
    Shape s;
    s.k_bits = kb;
    s.v_bits = vb;
    s.k_seed = 1;
    s.v_seed = 2;
    s.q_heads = 32;  // many output rows: the cosine of one draw varies less
    s.kv_heads = 8;
    // Logits of standard deviation 1 (scale 1/√D, unit-variance q and k), and a peaked softmax
    // (logits ×3), where key errors are no longer averaged out.
    const Quality qa = quality(s, 1024, rng);
    const Quality peaked = quality(s, 1024, rng, 3.0);
    std::printf(
        "  K%d/V%d vs fp32 attention over unquantized K/V: rel error %.4f, cosine %.6f; peaked softmax: "
        "rel error %.4f, cosine %.6f\n",
        kb, vb, qa.rel, qa.cos, peaked.rel, peaked.cos);
    // 4/4 lands near 0.990 (the published 0.9912 of this design on Gemma); V's own 4-bit error
    // (√0.0095 ≈ 0.1 relative) dominates. Observed 0.988-0.992 over seeds at this size.
    if (kb == 4 && vb == 4) EXPECT_GT(qa.cos, 0.98);
    if (kb == 8 && vb == 4) EXPECT_GT(qa.cos, 0.99);
    if (kb == 8 && vb == 8) EXPECT_GT(qa.cos, 0.9999);
    EXPECT_GT(peaked.cos, kb >= 4 ? 0.9 : 0.7);
  }
}

// Keys whose energy sits in a few channels (the outlier channels of real K caches): after the
// rotation every coordinate is a mix of all channels, so the quantizer sees N(0,1)-like values and
// the attention error matches that of Gaussian keys. Without rotation (the same Lloyd–Max
// quantizer applied per channel to x/‖x‖·√D, a strawman computed here) the outlier channels are
// clipped and the others collapse onto the innermost levels. All three at logits of standard
// deviation 1 (scale 1/√(D·E[k²])), averaged over a few draws.
TEST(DecodeAttentionQuality, RotationMakesOutlierChannelKeysBehaveLikeGaussianOnes) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  const int D = 128, H = 8, N = 512, reps = 4;
  const kv::Codebook& cb = kv::lloyd_max_codebook(4);
  double err[3] = {0, 0, 0};  // gaussian, outlier channels, outlier channels without rotation
  for (int rep = 0; rep < reps; ++rep) {
    for (int kind = 0; kind < 2; ++kind) {
      std::vector<float> gain(D, 1.0f);
      if (kind == 1)
        for (int c : {3, 17, 64, 100}) gain[c] = 20.0f;
      double mean_sq = 0;
      for (float g : gain) mean_sq += double(g) * g / D;
      Shape s;
      s.q_heads = H;
      s.kv_heads = 1;
      s.dim = D;
      s.k_seed = 100 + rep;
      Filled f = fill(s, {N}, rng, 1 << 30, 1.0f, &gain);
      Query q = make_query(1, H, D, DType::f32, rng);
      const double scale = 1.0 / std::sqrt(D * mean_sq);
      DecodeOptions opt;
      opt.softmax_scale = static_cast<float>(scale);
      const std::vector<double> got = to_double(run(f, q, Device::cpu(), DType::f32, opt));
      const std::vector<double> ref = oracle_raw(q.f32, H, f, held_ranges(f.k), scale);
      err[kind] += testing::rel_error(got, ref) / reps;
      if (kind == 0) continue;
      std::vector<float> kq = f.k_raw[0];  // the strawman: per channel, no transform
      for (int v = 0; v < N; ++v) {
        float* x = kq.data() + static_cast<size_t>(v) * D;
        double ss = 0;
        for (int i = 0; i < D; ++i) ss += double(x[i]) * x[i];
        const float k = static_cast<float>(std::sqrt(D / ss));
        for (int i = 0; i < D; ++i) {
          const size_t idx =
              std::lower_bound(cb.boundaries.begin(), cb.boundaries.end(), x[i] * k) - cb.boundaries.begin();
          x[i] = cb.centroids[idx] / k;
        }
      }
      std::vector<double> strawman(static_cast<size_t>(H) * D);
      naive_attention(q.f32.data(), kq.data(), f.v_raw[0].data(), N, H, 1, D, scale, strawman.data());
      err[2] += testing::rel_error(strawman, ref) / reps;
    }
  }
  std::printf(
      "  4-bit keys, attention rel error: gaussian %.4f | 4 outlier channels ×20 %.4f | the same without "
      "rotation %.4f\n",
      err[0], err[1], err[2]);
  EXPECT_LT(err[1], 1.5 * err[0]);
  EXPECT_GT(err[2], 2.0 * err[1]);
}

// ---- non-finite input (the header's "Non-finite input") ------------------------------------------

// Six sequences of hostile input (Hq = 8, Hkv = 2, D = 128), each with its expected rows, per query
// head: 'f' finite, 'n' NaN, '0' zeros. 0: 100 finite tokens, a NaN in query head 5 and an Inf in
// query head 6 (those rows NaN, the others finite); 1: one token whose key holds a NaN; 2: no tokens
// (the empty sum); 3: one token whose key holds 1e38 (a norm above 2^120, which the cache flags with
// a NaN scale); 4: 100 finite tokens and a query near 1e38 (its scores overflow); 5: 60 finite tokens
// and one whose value holds a NaN.
struct Hostile {
  Filled f;
  Query q;
  std::vector<std::string> expect;  // per sequence, a char per query head
};

Hostile hostile_input(DType q_dtype = DType::f32) {
  Shape s;
  s.batch = 6;
  s.q_heads = 8;
  s.kv_heads = 2;
  s.capacity = 128;
  std::mt19937_64 rng(45);  // fixed: the overflow pattern of the 1e38 query is the seed's
  Hostile h{fill(s, {100, 0, 0, 0, 100, 60}, rng), {}, {"fffffnnf", "nnnnnnnn", "00000000", "nnnnnnnn",
                                                         "nnnnnnnn", "nnnnnnnn"}};
  const int64_t row = static_cast<int64_t>(s.kv_heads) * s.dim;
  auto append = [&](int b, float key_value, float value_value) {
    std::vector<float> k = testing::randn(row, rng), v = testing::randn(row, rng);
    for (int hk = 0; hk < s.kv_heads; ++hk) {
      k[hk * s.dim + 3] = key_value;
      v[hk * s.dim + 9] = value_value;
    }
    h.f.k.append(b, TensorView(k.data(), DType::f32, {1, s.kv_heads, s.dim}));
    h.f.v.append(b, TensorView(v.data(), DType::f32, {1, s.kv_heads, s.dim}));
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  append(1, nan, 0.5f);
  append(3, 1e38f, 0.5f);
  append(5, 0.5f, nan);
  h.q = make_query(s.batch, s.q_heads, s.dim, q_dtype, rng);
  void* q = h.q.host.data();
  testing::store_as(q_dtype, q, (0 * s.q_heads + 5) * s.dim + 7, nan);
  testing::store_as(q_dtype, q, (0 * s.q_heads + 6) * s.dim + 3, std::numeric_limits<float>::infinity());
  std::uniform_real_distribution<float> near_max(-1e38f, 1e38f);
  for (int i = 0; i < s.q_heads * s.dim; ++i) testing::store_as(q_dtype, q, 4 * s.q_heads * s.dim + i, near_max(rng));
  return h;
}

void expect_hostile_rows(const std::vector<double>& got, const Hostile& h, const std::string& what) {
  const int hq = static_cast<int>(h.q.host.size(1)), dim = static_cast<int>(h.q.host.size(2));
  for (size_t b = 0; b < h.expect.size(); ++b)
    for (int r = 0; r < hq; ++r) {
      const double* x = got.data() + (b * hq + r) * dim;
      const char e = h.expect[b][r];
      const bool ok = std::all_of(x, x + dim, [e](double v) {
        return e == 'f' ? std::isfinite(v) : (e == 'n' ? std::isnan(v) : v == 0.0);
      });
      EXPECT_TRUE(ok) << what << ": sequence " << b << ", query head " << r << " should be "
                      << (e == 'f' ? "finite" : (e == 'n' ? "NaN" : "zeros")) << ", got e.g. " << x[0];
    }
}

TEST(DecodeAttentionCpu, NonFiniteInputPoisonsExactlyTheRowsThatSeeIt) {
  for (DType t : {DType::f32, DType::bf16}) {
    const Hostile h = hostile_input(t);
    expect_hostile_rows(to_double(run(h.f, h.q, Device::cpu(), t)), h, std::string("cpu, q and out ") + to_string(t));
  }
}

// ---- bad input ------------------------------------------------------------------------------

TEST(DecodeAttentionErrors, BadInputIsAClearError) {
  std::mt19937_64 rng(1);
  Shape s;
  s.capacity = 20;
  Filled f = fill(s, {10}, rng);
  Query q = make_query(1, 8, 128, DType::f32, rng);
  auto expect_error = [&](auto&& fn, const char* needle) {
    try {
      fn();
      ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("[attention::decode_attention]"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  Tensor out = Tensor::empty({1, 8, 128}, DType::f32);
  expect_error([&] { decode_attention(Tensor::empty({1, 8, 64}, DType::f32), f.k, f.v, out); }, "q must have shape");
  expect_error([&] { decode_attention(Tensor::empty({1, 7, 128}, DType::f32), f.k, f.v); }, "multiple");
  expect_error([&] { decode_attention(Tensor::empty({2, 8, 128}, DType::f32), f.k, f.v); }, "q must have shape");
  expect_error(
      [&] {
        decode_attention(q.host, f.k, f.v, Tensor::empty({1, 8, 64}, DType::f32));
      },
      "out must have shape");
  expect_error([&] { decode_attention(q.host, f.k, f.v, Tensor::empty({1, 8, 128}, DType::f16)); }, "dtype");
  expect_error([&] { decode_attention(Tensor::empty({1, 8, 128}, DType::i32), f.k, f.v); }, "dtype");
  {
    Shape o = s;
    o.kv_heads = 4;
    Filled g = fill(o, {10}, rng);
    expect_error([&] { decode_attention(q.host, f.k, g.v, out); }, "same shape");
    Shape c = s;
    c.capacity = 30;
    Filled h = fill(c, {10}, rng);
    expect_error([&] { decode_attention(q.host, f.k, h.v, out); }, "same shape");
  }
  {
    Filled g = fill(s, {12}, rng);
    expect_error([&] { decode_attention(q.host, f.k, g.v, out); }, "append K and V together");
  }
  const std::vector<int64_t> too_long = {11}, negative = {-1}, two = {1, 2};
  DecodeOptions opt;
  opt.lengths = too_long;
  expect_error([&] { decode_attention(q.host, f.k, f.v, out, opt); }, "passes what sequence 0 has written");
  opt.lengths = negative;
  expect_error([&] { decode_attention(q.host, f.k, f.v, out, opt); }, "negative");
  opt.lengths = two;
  expect_error([&] { decode_attention(q.host, f.k, f.v, out, opt); }, "one entry per sequence");
  opt = {};
  opt.softmax_scale = std::numeric_limits<float>::quiet_NaN();
  expect_error([&] { decode_attention(q.host, f.k, f.v, out, opt); }, "finite");
  opt = {};
  opt.num_splits = -2;
  expect_error([&] { decode_attention(q.host, f.k, f.v, out, opt); }, "num_splits");
  // A query that claims to live on a GPU, with caches on the CPU: refused before any access.
  const TensorView fake(reinterpret_cast<void*>(0x1000), DType::f32, {1, 8, 128}, Device::cuda(0));
  expect_error([&] { decode_attention(fake, f.k, f.v, out); }, "but the caches are on cpu");
}

// The choice a call makes is reported by choose_decode (same arguments, same errors): on the CPU
// always the CPU loop, whatever math or slice count is asked; a forced GPU variant is refused.
TEST(DecodeAttentionCpu, TheCallReportsItsChoiceAndRefusesGpuVariants) {
  std::mt19937_64 rng(3);
  Shape s;
  Filled f = fill(s, {2500}, rng);
  Query q = make_query(1, 8, 128, DType::f16, rng);
  EXPECT_EQ(to_string(choose_decode(q.host, f.k, f.v)), "cpu, 3 splits of 1024 tokens");
  DecodeOptions opt;
  opt.math = Math::f16;
  opt.num_splits = 2;
  EXPECT_EQ(choose_decode(q.host, f.k, f.v, opt).variant, DecodeVariant::cpu);
  for (DecodeVariant v : {DecodeVariant::f32, DecodeVariant::f16_registers, DecodeVariant::f16_wide}) {
    opt.variant = v;
    testing::expect_error([&] { decode_attention(q.host, f.k, f.v, opt); }, ErrorCode::unsupported,
                          {"[attention::decode_attention]", "forced variant " + to_string(v), "on the CPU"});
    testing::expect_error([&] { choose_decode(q.host, f.k, f.v, opt); }, ErrorCode::unsupported,
                          {"forced variant " + to_string(v)});
  }
  opt.variant = DecodeVariant::cpu;
  EXPECT_EQ(to_double(decode_attention(q.host, f.k, f.v, opt)), to_double(decode_attention(q.host, f.k, f.v)));
}

// ---- CUDA -----------------------------------------------------------------------------------

TEST(DecodeAttentionCuda, F32MatchesTheOracleAndTheCpu) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  for (int d : {4, 32, 64, 128, 256, 512}) {
    for (int g : {1, 4, 8, 12}) {
      Shape s;
      s.dim = d;
      s.kv_heads = 2;
      s.q_heads = 2 * g;
      s.batch = 2;
      s.k_seed = 3;
      s.v_seed = 4;
      const Result r = check_against_oracle(s, {700, 33}, Device::cuda(), DType::f32, Math::f32);
      EXPECT_LE(r.rel, 1e-5) << describe(s);
      EXPECT_LE(r.cpu_rel, 1e-5) << describe(s);
      EXPECT_TRUE(all_finite(r.got)) << describe(s);
    }
  }
}

TEST(DecodeAttentionCuda, F32AllBitWidths) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  for (auto [kb, vb] : {std::pair{8, 4}, {4, 8}, {8, 8}, {2, 3}, {3, 2}, {2, 2}}) {
    Shape s;
    s.k_bits = kb;
    s.v_bits = vb;
    const Result r = check_against_oracle(s, {450}, Device::cuda(), DType::f32, Math::f32);
    EXPECT_LE(r.rel, 1e-5) << describe(s);
  }
}

TEST(DecodeAttentionCuda, F16TensorCorePathMatchesTheOracle) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  for (DType t : {DType::f16, DType::bf16, DType::f32}) {
    for (int d : {64, 128, 256, 512}) {
      for (auto [kb, vb] : {std::pair{4, 4}, {8, 4}, {4, 8}, {8, 8}}) {
        Shape s;
        s.dim = d;
        s.k_bits = kb;
        s.v_bits = vb;
        s.k_seed = 7;
        const Result r = check_against_oracle(s, {1000, 1}, Device::cuda(), t, Math::f16);
        EXPECT_LE(r.rel, 1e-2) << describe(s) << " q " << to_string(t);
        EXPECT_LE(r.cpu_rel, 1e-2) << describe(s) << " q " << to_string(t);
        EXPECT_TRUE(all_finite(r.got)) << describe(s);
        if (t == DType::f16 || d == 128)
          std::printf("  f16 path %s q %s: rel error %.2e vs the oracle, %.2e vs the CPU\n", describe(s).c_str(),
                      to_string(t), r.rel, r.cpu_rel);
      }
    }
  }
}

TEST(DecodeAttentionCuda, F16PathGqaRatiosAndBatches) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  for (int g : {1, 2, 4, 8, 12, 16}) {
    Shape s;
    s.kv_heads = 2;
    s.q_heads = 2 * g;
    s.batch = 3;
    const Result r = check_against_oracle(s, {4097, 1, 300}, Device::cuda(), DType::f16, Math::f16);
    EXPECT_LE(r.rel, 1e-2) << describe(s);
  }
}

TEST(DecodeAttentionCuda, ForcedSplitsAndWorkspace) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  for (Math m : {Math::f32, Math::f16}) {
    for (int splits : {1, 2, 7, 63}) {  // 63 = ceil(capacity / 16), the most this shape accepts
      Shape s;
      s.batch = 2;
      const Result r = check_against_oracle(s, {1000, 999}, Device::cuda(), DType::f16, m, splits);
      EXPECT_LE(r.rel, 1e-2) << "splits " << splits;
    }
  }
  // A caller-provided workspace gives the same result as the per-call one.
  Shape s;
  std::mt19937_64 rng(test_seed());
  Filled f = fill(s, {3000}, rng);
  Query q = make_query(1, s.q_heads, s.dim, DType::f16, rng);
  kv::Cache kd = f.k.to(Device::cuda()), vd = f.v.to(Device::cuda());
  Tensor qd = q.host.to(Device::cuda());
  Tensor ws =
      Tensor::zeros({static_cast<int64_t>(decode_attention_workspace_bytes(qd, kd))}, DType::u8, Device::cuda());
  DecodeOptions opt;
  opt.workspace = ws.view();
  const std::vector<double> a = to_double(decode_attention(qd, kd, vd, opt));
  const std::vector<double> b = to_double(decode_attention(qd, kd, vd));
  EXPECT_EQ(a, b);
  Tensor small = Tensor::empty({16}, DType::u8, Device::cuda());
  opt.workspace = small.view();
  EXPECT_THROW(decode_attention(qd, kd, vd, opt), Error);
}

// With more than one slice the f16 kernel's last block of each (sequence, K/V head, head tile)
// merges the slices, found by an arrival counter in the workspace that the merging block sets back
// to zero. One zero-filled workspace (at an odd offset: any u8 view may be passed) serves a run of
// calls with different slice counts, the f32 path (which does not use the counters) in between, and
// repeats: every result must be bitwise the one of a call with its own fresh workspace, and match
// the CPU. A counter left non-zero, or a merge that ran before every slice had arrived, would leave
// NaN rows (the output is poisoned first) or wrong ones. Head tiles of 8 and 4 heads (group 12), an
// empty sequence, ragged slices, every head dimension.
TEST(DecodeAttentionCuda, F16MergeInTheLastBlockReusesOneWorkspace) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  for (int d : {64, 128, 256, 512}) {
    Shape s;
    s.batch = 3;
    s.kv_heads = 2;
    s.q_heads = 24;
    s.dim = d;
    std::mt19937_64 rng(test_seed() ^ d);
    Filled f = fill(s, {1000, 0, 517}, rng);
    Query q = make_query(s.batch, s.q_heads, s.dim, DType::f16, rng);
    kv::Cache kd = f.k.to(Device::cuda()), vd = f.v.to(Device::cuda());
    Tensor qd = q.host.to(Device::cuda());
    const int64_t bytes = static_cast<int64_t>(decode_attention_workspace_bytes(qd, kd));
    Tensor ws_buf = Tensor::zeros({bytes + 3}, DType::u8, Device::cuda());
    const TensorView ws(static_cast<uint8_t*>(ws_buf.data()) + 3, DType::u8, {bytes}, Device::cuda());
    auto call = [&](Math m, int splits, bool shared) {
      Tensor out_host = Tensor::empty({s.batch, s.q_heads, s.dim}, DType::f32);  // f32: the exact path's 1e-5 holds
      std::fill_n(static_cast<uint8_t*>(out_host.data()), out_host.nbytes(), 0xFF);  // NaN
      Tensor out = out_host.to(Device::cuda());
      Tensor own = Tensor::zeros({bytes}, DType::u8, Device::cuda());
      DecodeOptions opt;
      opt.math = m;
      opt.num_splits = splits;
      opt.workspace = shared ? ws : own.view();
      decode_attention(qd, kd, vd, out, opt);
      return to_double(out);
    };
    std::vector<double> cpu;
    {
      DecodeOptions opt;
      cpu = to_double(run(f, q, Device::cpu(), DType::f32, opt));
    }
    for (int splits : {2, 7, 63, 1, 0, 5, 63, 2}) {
      const std::vector<double> got = call(Math::f16, splits, true);
      EXPECT_TRUE(all_finite(got)) << describe(s) << " splits " << splits;
      EXPECT_EQ(got, call(Math::f16, splits, false)) << describe(s) << " splits " << splits;
      EXPECT_LE(testing::rel_error(got, cpu), 1e-2) << describe(s) << " splits " << splits;
      if (splits == 7) {
        const std::vector<double> exact = call(Math::f32, 7, true);
        EXPECT_LE(testing::rel_error(exact, cpu), 1e-5) << describe(s);
      }
    }
  }
}

TEST(DecodeAttentionCuda, RingWrapMixedLengthsAndEmptySequences) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  for (Math m : {Math::f32, Math::f16}) {
    Shape s;
    s.sliding = true;
    s.capacity = 300;
    s.batch = 4;
    std::mt19937_64 rng(test_seed());
    Filled f = fill(s, {1000, 0, 299, 301}, rng, 97);
    Query q = make_query(s.batch, s.q_heads, s.dim, DType::f32, rng);
    DecodeOptions opt;
    opt.math = m;
    const std::vector<double> got = to_double(run(f, q, Device::cuda(), DType::f32, opt));
    const std::vector<double> cpu = to_double(run(f, q, Device::cpu(), DType::f32));
    const std::vector<double> ref = oracle_dequantized(
        q.f32, s.q_heads, f.k, f.v, Range{{700, 0, 0, 1}, {1000, 0, 299, 301}}, 1 / std::sqrt(128.0));
    EXPECT_LE(testing::rel_error(got, ref), m == Math::f32 ? 1e-5 : 1e-2);
    EXPECT_LE(testing::rel_error(cpu, ref), 1e-5);
    for (int i = 0; i < s.q_heads * s.dim; ++i) ASSERT_EQ(got[s.q_heads * s.dim + i], 0.0) << "empty sequence";
    // Explicit lengths inside the ring window.
    const std::vector<int64_t> lens = {1000, 0, 150, 301};
    opt.lengths = lens;
    const std::vector<double> got2 = to_double(run(f, q, Device::cuda(), DType::f32, opt));
    const std::vector<double> ref2 = oracle_dequantized(
        q.f32, s.q_heads, f.k, f.v, Range{{700, 0, 0, 1}, {1000, 0, 150, 301}}, 1 / std::sqrt(128.0));
    EXPECT_LE(testing::rel_error(got2, ref2), m == Math::f32 ? 1e-5 : 1e-2);
  }
}

// The f16 kernel loads each warp's next chunk (K rows and scales after the scores, V rows after the
// Oᵀ products) while it computes the current one. Whole slices on one block (splits 1 and 3) give
// every warp many chunks; a ring of 777 slots wrapped at irregular points makes chunks that wrap,
// and lengths that are no multiple of any chunk (16..64 tokens) or tile make ragged last chunks,
// next to full ones; at every head dimension (chunk widths differ) and K/V width mix, and GQA 1/4/8.
TEST(DecodeAttentionCuda, F16ChunkPipelineAcrossRingWrapsAndRaggedEnds) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  for (int d : {64, 128, 256, 512}) {
    for (auto [kb, vb] : {std::pair{4, 4}, {8, 4}}) {
      for (int g : {1, 4, 8}) {
        if (d == 512 && g != 4) continue;  // keeps the oracle time modest; D = 512 runs all bit mixes
        for (int splits : {1, 3}) {
          Shape s;
          s.dim = d;
          s.k_bits = kb;
          s.v_bits = vb;
          s.kv_heads = 2;
          s.q_heads = 2 * g;
          s.batch = 3;
          s.sliding = true;
          s.capacity = 777;
          // 2000 tokens in pieces of 131 (the ring wraps inside chunks), 777 = the window exactly,
          // 45 = under one chunk at every D.
          const Result r = check_against_oracle(s, {2000, 777, 45}, Device::cuda(), DType::f16, Math::f16, splits, 131);
          EXPECT_LE(r.rel, 1e-2) << describe(s) << " splits " << splits;
          EXPECT_LE(r.cpu_rel, 1e-2) << describe(s) << " splits " << splits;
          EXPECT_TRUE(all_finite(r.got)) << describe(s);
        }
      }
    }
  }
}

// The f16 kernel rotates and scales the queries inside one warp per head (register FWHT, per-head
// power-of-two σ), merges the warps' states one warp per head row, and (split calls) the last block
// of each tile merges the slices, finishing a row in one warp at D = 64..512. bf16 queries of stddev 1e4 rotate to magnitudes past fp16's 65504 at
// every D, so only σ keeps them finite; a matching softmax scale keeps the attention non-trivial.
// Every D, GQA 1/4/8 (rows past the group's heads are empty), one slice (finished in the kernel)
// and five (partials + the in-kernel merge), a wrapped ring, K8/V4 once; and the same call twice is bitwise equal.
TEST(DecodeAttentionCuda, F16HugeBf16QueriesEveryDimGqaAndSliceCount) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  for (int d : {64, 128, 256, 512}) {
    for (int g : {1, 4, 8}) {
      for (int splits : {1, 5}) {
        Shape s;
        s.dim = d;
        s.kv_heads = 2;
        s.q_heads = 2 * g;
        s.batch = 2;
        s.sliding = true;
        s.capacity = 500;
        if (d == 128 && g == 4) s.k_bits = 8;
        std::mt19937_64 rng(test_seed() ^ (uint64_t(d) << 8) ^ uint64_t(g));
        Filled f = fill(s, {1234, 77}, rng, 111);
        Query q = make_query(s.batch, s.q_heads, d, DType::bf16, rng, 1e4f);
        const double scale = 1e-4 / std::sqrt(double(d));
        DecodeOptions opt;
        opt.math = Math::f16;
        opt.num_splits = splits;
        opt.softmax_scale = static_cast<float>(scale);
        const std::vector<double> a = to_double(run(f, q, Device::cuda(), DType::f32, opt));
        const std::vector<double> b = to_double(run(f, q, Device::cuda(), DType::f32, opt));
        const std::vector<double> ref =
            oracle_dequantized(q.f32, s.q_heads, f.k, f.v, held_ranges(f.k), static_cast<float>(scale));
        EXPECT_LE(testing::rel_error(a, ref), 1e-2) << describe(s) << " splits " << splits;
        EXPECT_TRUE(all_finite(a)) << describe(s) << " splits " << splits;
        EXPECT_EQ(a, b) << describe(s) << " splits " << splits << ": not deterministic";
      }
    }
  }
}

// ---- the f16 kernel's other main loop (D = 64 and 128, every bit width): the wide table -----------

// The wide-table loop (8 warps, PRMT-formed table addresses, bare ex2) against the register loop on
// the same inputs, both forced, and against the oracle and the CPU. Rings of 778 slots (heads start
// at every 16-byte misalignment of the scales, 778 ≡ 2 mod 4) wrapped at irregular points (chunks
// that cross the ring's end), lengths that are no multiple of a chunk (ragged last chunks, one under
// a chunk), an empty sequence, 1 and 3 slices and the automatic count (the in-kernel slice merge),
// GQA 1, 4, 8 and 12 (head tiles of 8 + 4); and a plain cache (no ring). D = 128 at K4/V4, K8/V4,
// K4/V8 and K8/V8 (the table's 8-bit half), D = 64 at K4/V4 and K8/V8.
TEST(DecodeAttentionCuda, F16WideTableLoopMatchesTheRegisterLoop) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  struct Bits {
    int dim, k, v;
  };
  for (const Bits bits :
       {Bits{128, 4, 4}, Bits{64, 4, 4}, Bits{128, 8, 4}, Bits{128, 4, 8}, Bits{128, 8, 8}, Bits{64, 8, 8}}) {
    const int dim = bits.dim;
    for (bool sliding : {true, false}) {
      for (int g : {1, 4, 8, 12}) {
        for (int splits : {1, 3, 0}) {
          Shape s;
          s.dim = dim;
          s.k_bits = bits.k;
          s.v_bits = bits.v;
          s.kv_heads = 2;
          s.q_heads = 2 * g;
          s.batch = 4;
          s.sliding = sliding;
          s.capacity = sliding ? 778 : 2000;
          const std::vector<int64_t> lens =
              sliding ? std::vector<int64_t>{2000, 778, 45, 0} : std::vector<int64_t>{2000, 1001, 45, 0};
          std::mt19937_64 rng(test_seed() ^ (uint64_t(g) << 8) ^ uint64_t(splits) ^ (sliding ? 1u << 20 : 0u) ^
                              (uint64_t(dim) << 24) ^ (uint64_t(bits.k + 2 * bits.v) << 32));
          Filled f = fill(s, lens, rng, 131);
          Query q = make_query(s.batch, s.q_heads, s.dim, DType::f16, rng);
          DecodeOptions opt;
          opt.math = Math::f16;
          opt.num_splits = splits;
          opt.variant = DecodeVariant::f16_wide;
          const std::vector<double> wide = run_as(f, q, opt, DecodeVariant::f16_wide);
          opt.variant = DecodeVariant::f16_registers;
          const std::vector<double> regs = run_as(f, q, opt, DecodeVariant::f16_registers);
          const std::vector<double> cpu = to_double(run(f, q, Device::cpu(), DType::f32));
          const std::vector<double> ref =
              oracle_dequantized(q.f32, s.q_heads, f.k, f.v, held_ranges(f.k), 1 / std::sqrt(double(dim)));
          const std::string what = describe(s) + (sliding ? " ring" : " plain") + " splits " + std::to_string(splits);
          EXPECT_LE(testing::rel_error(regs, ref), 1e-2) << what;
          EXPECT_TRUE(all_finite(wide)) << what;
          EXPECT_LE(testing::rel_error(wide, ref), 1e-2) << what;
          EXPECT_LE(testing::rel_error(wide, cpu), 1e-2) << what;
          // The same fp16 products; only the warps' token order and the merge order differ (and the
          // wide table's ex2 rounding).
          const double between = testing::rel_error(wide, regs);
          EXPECT_LE(between, 3e-3) << what;
          if (g == 4 && splits != 3)
            std::printf("  %s: rel error vs the oracle: wide %.2e, registers %.2e; wide vs the register loop %.2e\n",
                        what.c_str(), testing::rel_error(wide, ref), testing::rel_error(regs, ref), between);
          const size_t row = static_cast<size_t>(s.q_heads) * s.dim;
          for (size_t i = 0; i < row; ++i) ASSERT_EQ(wide[3 * row + i], 0.0) << "empty sequence, " << what;
        }
      }
    }
  }
}

// The register loop serves D = 128 and 64 (any widths) when forced; the wide table cannot serve
// D = 256, so forcing it there is a clear error. Without a forced variant (the rule), every D = 128
// and D = 64 call takes the wide table, short or long (700 tokens, one 16K sequence on one K/V
// head, 5 of 16K on 4 K/V heads, 5 of mixed lengths, with 4- and 8-bit K), and D = 256 the register
// loop. Each output against the oracle.
TEST(DecodeAttentionCuda, F16ForcedLoopsAndTheRule) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  for (int variant = 0; variant < 5; ++variant) {
    Shape s;
    s.kv_heads = 1;
    s.q_heads = 4;
    s.batch = 1;
    s.capacity = 777;
    if (variant == 1) s.k_bits = 8, s.capacity = 800;
    if (variant == 2) s.dim = 256, s.capacity = 800;
    if (variant == 3) s.dim = 64, s.capacity = 800;
    if (variant == 4) s.dim = 64, s.k_bits = 8, s.capacity = 800;
    const bool wide = variant != 2;  // the calls the wide table serves
    Filled f = fill(s, {700}, rng);
    Query q = make_query(1, s.q_heads, s.dim, DType::f16, rng);
    DecodeOptions opt;
    opt.math = Math::f16;
    const std::vector<double> ref =
        oracle_dequantized(q.f32, s.q_heads, f.k, f.v, held_ranges(f.k), 1 / std::sqrt(double(s.dim)));
    const std::vector<double> rule =
        run_as(f, q, opt, wide ? DecodeVariant::f16_wide : DecodeVariant::f16_registers);
    EXPECT_LE(testing::rel_error(rule, ref), 1e-2) << describe(s);
    if (wide) {
      opt.variant = DecodeVariant::f16_registers;
      const std::vector<double> forced = run_as(f, q, opt, DecodeVariant::f16_registers);
      EXPECT_LE(testing::rel_error(forced, ref), 1e-2) << describe(s);
    } else {
      opt.variant = DecodeVariant::f16_wide;
      testing::expect_error([&] { run(f, q, Device::cuda(), DType::f32, opt); }, ErrorCode::unsupported,
                            {"[attention::decode_attention]", "forced variant f16_wide", "head_dim 64 or 128, got 256"});
    }
  }
  // The loop the rule picks, and its output against the oracle.
  auto expect_auto = [&](const Shape& sh, const std::vector<int64_t>& lens, DecodeVariant expected) {
    Filled f = fill(sh, lens, rng);
    Query q = make_query(sh.batch, sh.q_heads, sh.dim, DType::f16, rng);
    DecodeOptions opt;
    opt.math = Math::f16;
    const std::vector<double> got = run_as(f, q, opt, expected);
    const std::vector<double> ref =
        oracle_dequantized(q.f32, sh.q_heads, f.k, f.v, held_ranges(f.k), 1 / std::sqrt(double(sh.dim)));
    EXPECT_LE(testing::rel_error(got, ref), 1e-2) << describe(sh);
  };
  Shape one;
  one.kv_heads = 1;
  one.q_heads = 4;
  expect_auto(one, {16384}, DecodeVariant::f16_wide);
  Shape big;
  big.batch = 5;
  big.kv_heads = 4;
  big.q_heads = 16;
  expect_auto(big, std::vector<int64_t>(5, 16384), DecodeVariant::f16_wide);
  for (int dim : {128, 64})
    for (int k_bits : {4, 8}) {
      big.dim = dim;
      big.k_bits = k_bits;
      expect_auto(big, {4096, 8191, 100, 1, 4096}, DecodeVariant::f16_wide);
    }
}

// Small wide-table calls for compute-sanitizer racecheck / synccheck (the table build, the warps' merge
// and the last block's merge of the slices): a wrapped ring, a ragged end, 2 slices merged in the kernel.
TEST(DecodeAttentionCuda, F16WideTableSmallWrappedSlices) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  for (const auto [dim, k_bits] : {std::pair{128, 4}, std::pair{64, 4}, std::pair{128, 8}}) {
    Shape s;
    s.dim = dim;
    s.k_bits = k_bits;  // 8: the table's 8-bit half
    s.kv_heads = 2;
    s.q_heads = 8;
    s.batch = 2;
    s.sliding = true;
    s.capacity = 1554;  // ≡ 2 mod 4; 2 slices of 784 tokens: 3 or 4 chunks a warp (D = 64: 1 or 2)
    std::mt19937_64 rng(test_seed() ^ uint64_t(dim) ^ (uint64_t(k_bits) << 16));
    Filled f = fill(s, {3000, 45}, rng, 131);
    Query q = make_query(s.batch, s.q_heads, s.dim, DType::f16, rng);
    DecodeOptions opt;
    opt.math = Math::f16;
    opt.num_splits = 2;
    opt.variant = DecodeVariant::f16_wide;
    const std::vector<double> ref =
        oracle_dequantized(q.f32, s.q_heads, f.k, f.v, held_ranges(f.k), 1 / std::sqrt(double(dim)));
    EXPECT_LE(testing::rel_error(run_as(f, q, opt, DecodeVariant::f16_wide), ref), 1e-2) << describe(s);
  }
}

// The call's choice is the table's rule (core/attention_choose.h) with this device's capabilities
// and the chosen kernel's occupancy; on the H200 the wide kernel holds 2 blocks an SM and the
// headline rows keep the slices they were measured with.
TEST(DecodeAttentionCuda, TheChoiceIsTheRuleWithThisDevicesOccupancy) {
  FRUGAL_SKIP_WITHOUT_GPU();
  const DeviceCaps caps = cuda::device_caps(0);
  for (DecodeVariant v : {DecodeVariant::f32, DecodeVariant::f16_registers, DecodeVariant::f16_wide})
    EXPECT_GE(cuda::decode_attention_resident_blocks(v, 128, 4, 4, 0), 1) << to_string(v);
  DecodeProblem headline;
  headline.batch = 8;
  headline.q_heads = 32;
  headline.kv_heads = 8;
  headline.dim = 128;
  headline.capacity = headline.max_len = 32768;
  headline.q_dtype = DType::f16;
  const int wide = cuda::decode_attention_resident_blocks(DecodeVariant::f16_wide, 128, 4, 4, 0);
  std::printf("  %s: resident blocks a multiprocessor: f32 %d, f16_registers %d, f16_wide %d; B=8 L=32K: %s\n",
              to_string(caps).c_str(), cuda::decode_attention_resident_blocks(DecodeVariant::f32, 128, 4, 4, 0),
              cuda::decode_attention_resident_blocks(DecodeVariant::f16_registers, 128, 4, 4, 0), wide,
              to_string(choose(headline, caps, wide)).c_str());
  if (caps.capability() == 90 && caps.multiprocessors == 132) {
    EXPECT_EQ(wide, 2);
    EXPECT_EQ(to_string(choose(headline, caps, wide)), "f16_wide, 4 splits of 8192 tokens");
  }
  // A real call: choose_decode agrees with choose over the same facts.
  Shape s;
  s.batch = 2;
  std::mt19937_64 rng(test_seed());
  Filled f = fill(s, {1000, 300}, rng);
  Query q = make_query(s.batch, s.q_heads, s.dim, DType::f16, rng);
  kv::Cache kd = f.k.to(Device::cuda()), vd = f.v.to(Device::cuda());
  Tensor qd = q.host.to(Device::cuda());
  DecodeProblem p;
  p.batch = 2;
  p.q_heads = s.q_heads;
  p.kv_heads = s.kv_heads;
  p.dim = s.dim;
  p.capacity = 1000;
  p.max_len = 1000;
  p.q_dtype = DType::f16;
  EXPECT_EQ(choose_decode(qd, kd, vd), choose(p, caps, wide));
}

TEST(DecodeAttentionCuda, LargeBatchPassesRangesThroughTheWorkspace) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  Shape s;
  s.batch = 131;
  s.q_heads = 4;
  s.kv_heads = 1;
  std::vector<int64_t> lens(s.batch);
  for (int b = 0; b < s.batch; ++b) lens[b] = 1 + (b * 37) % 90;
  for (Math m : {Math::f32, Math::f16}) {
    const Result r = check_against_oracle(s, lens, Device::cuda(), DType::f16, m);
    EXPECT_LE(r.rel, 1e-2);
  }
}

// The hostile input of the CPU test through every GPU variant, one slice and three (the merges of
// the partial states: the f16 kernels' last block, the f32 kernel's combine).
TEST(DecodeAttentionCuda, NonFiniteInputPoisonsExactlyTheRowsThatSeeIt) {
  FRUGAL_SKIP_WITHOUT_GPU();
  for (DType t : {DType::f32, DType::bf16}) {
    const Hostile h = hostile_input(t);
    for (DecodeVariant v : {DecodeVariant::f32, DecodeVariant::f16_registers, DecodeVariant::f16_wide})
      for (int splits : {1, 3}) {
        DecodeOptions opt;
        opt.variant = v;
        opt.num_splits = splits;
        expect_hostile_rows(run_as(h.f, h.q, opt, v), h,
                            to_string(v) + ", q " + to_string(t) + ", " + std::to_string(splits) + " slices");
      }
  }
}

TEST(DecodeAttentionCuda, NonFiniteTokensPoisonOnlyTheirSequence) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  Shape s;
  s.batch = 2;
  s.capacity = 64;
  std::mt19937_64 rng(test_seed());
  Filled f = fill(s, {50, 50}, rng);
  std::vector<float> bad(static_cast<size_t>(s.kv_heads) * s.dim, 1.0f);
  bad[5] = std::numeric_limits<float>::quiet_NaN();
  f.k.append(0, TensorView(bad.data(), DType::f32, {1, s.kv_heads, s.dim}));
  f.v.append(0, TensorView(bad.data(), DType::f32, {1, s.kv_heads, s.dim}));
  std::vector<float> good = testing::randn(bad.size(), rng);
  f.k.append(1, TensorView(good.data(), DType::f32, {1, s.kv_heads, s.dim}));
  f.v.append(1, TensorView(good.data(), DType::f32, {1, s.kv_heads, s.dim}));
  Query q = make_query(s.batch, s.q_heads, s.dim, DType::f16, rng);
  for (Math m : {Math::f32, Math::f16}) {
    DecodeOptions opt;
    opt.math = m;
    const std::vector<double> got = to_double(run(f, q, Device::cuda(), DType::f16, opt));
    const size_t half = got.size() / 2;
    EXPECT_TRUE(std::any_of(got.begin(), got.begin() + half, [](double x) { return std::isnan(x); }));
    EXPECT_TRUE(std::all_of(got.begin() + half, got.end(), [](double x) { return std::isfinite(x); }));
  }
}

TEST(DecodeAttentionCuda, Sequence128K) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  Shape s;
  s.kv_heads = 1;
  s.q_heads = 4;
  s.k_seed = 9;
  for (Math m : {Math::f32, Math::f16}) {
    const Result r = check_against_oracle(s, {131072}, Device::cuda(), m == Math::f32 ? DType::f32 : DType::f16, m);
    std::printf("  128K tokens, %s math: rel error %.2e vs the oracle\n", m == Math::f32 ? "f32" : "f16", r.rel);
    EXPECT_LE(r.rel, m == Math::f32 ? 1e-5 : 1e-2);
  }
}

TEST(DecodeAttentionCuda, BadDevicesAndUnsupportedRequests) {
  FRUGAL_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(2);
  Shape s;
  Filled f = fill(s, {10}, rng);
  kv::Cache kd = f.k.to(Device::cuda()), vd = f.v.to(Device::cuda());
  Query q = make_query(1, 8, 128, DType::f16, rng);
  EXPECT_THROW(decode_attention(q.host, kd, vd), Error);                      // q on the CPU
  EXPECT_THROW(decode_attention(q.host.to(Device::cuda()), kd, f.v), Error);  // V on the CPU
  Tensor out_cpu = Tensor::empty({1, 8, 128}, DType::f16);
  EXPECT_THROW(decode_attention(q.host.to(Device::cuda()), kd, vd, out_cpu), Error);
  Shape t = s;
  t.k_bits = 3;
  Filled g = fill(t, {10}, rng);
  DecodeOptions opt;
  opt.math = Math::f16;
  EXPECT_THROW(decode_attention(q.host.to(Device::cuda()), g.k.to(Device::cuda()), g.v.to(Device::cuda()), opt), Error);
  opt.math = Math::automatic;  // falls back to f32 for 3-bit keys
  EXPECT_NO_THROW(decode_attention(q.host.to(Device::cuda()), g.k.to(Device::cuda()), g.v.to(Device::cuda()), opt));
}

}  // namespace
}  // namespace frugal::attention
