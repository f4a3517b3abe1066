// The paged KV cache and paged attention: the pools against the per-sequence cache (the same bytes,
// scales and reconstructions), attention against a naive double-precision oracle over
// PagedCache::dequantize (causal, windowed and non-causal rows, LSE), ragged batches mixing prefill,
// chunked prefill, speculative and decode rows, shared prefixes, hostile tables and tensors, plan and
// update semantics; on a GPU every kernel that can serve against the CPU and the oracle, and CUDA
// graphs replayed after appends and updates.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#if FRUGAL_TEST_CUDA_RUNTIME
#include <cuda_runtime.h>
#endif

#include "core/paged_backend.h"
#include "frugal/paged_attention.h"
#include "frugal/paged_cache.h"
#include "testing.h"

namespace frugal::attention {
namespace {

using testing::expect_error;
using testing::test_seed;

// ---- building pools -------------------------------------------------------------------------

// A block table in host memory.
struct Table {
  std::vector<int32_t> indptr{0}, indices, last;
  kv::PageTable view() const { return {indptr, indices, last}; }
};

// The table of sequences holding lens[b] tokens in the first ⌈lens[b] / page_size⌉ of pages[b].
Table make_table(const std::vector<std::vector<int32_t>>& pages, const std::vector<int64_t>& lens, int ps) {
  Table t;
  for (size_t b = 0; b < lens.size(); ++b) {
    const int64_t n = (lens[b] + ps - 1) / ps;
    t.indices.insert(t.indices.end(), pages[b].begin(), pages[b].begin() + n);
    t.indptr.push_back(static_cast<int32_t>(t.indices.size()));
    t.last.push_back(lens[b] == 0 ? 0 : static_cast<int32_t>(lens[b] - (n - 1) * ps));
  }
  return t;
}

struct Pool {
  kv::PagedConfig cfg;
  std::vector<std::vector<int32_t>> pages;  // each sequence's pages, in token order
  std::vector<int32_t> spare;               // pages no sequence holds
  std::vector<int64_t> lens;                // L_b: cached tokens, the new ones included
  std::vector<int32_t> qo{0};               // qo_indptr
  Table table;                              // the final table
  std::vector<std::vector<float>> k_raw, v_raw;  // [L_b][Hkv][D] as appended
  std::optional<kv::PagedCache> cache;
  PagedBatch batch() const { return {qo, table.view()}; }
  int64_t total_q() const { return qo.back(); }
};

// Appends tokens [from[b], to[b]) of every sequence in one call, with the table of lengths `to`.
void append_range(Pool& s, const std::vector<int64_t>& from, const std::vector<int64_t>& to, DType dtype = DType::f32) {
  const int64_t row = static_cast<int64_t>(s.cfg.num_kv_heads) * s.cfg.head_dim;
  std::vector<int32_t> new_indptr{0};
  std::vector<float> k, v;
  for (size_t b = 0; b < to.size(); ++b) {
    k.insert(k.end(), s.k_raw[b].begin() + from[b] * row, s.k_raw[b].begin() + to[b] * row);
    v.insert(v.end(), s.v_raw[b].begin() + from[b] * row, s.v_raw[b].begin() + to[b] * row);
    new_indptr.push_back(new_indptr.back() + static_cast<int32_t>(to[b] - from[b]));
  }
  const int64_t t = new_indptr.back();
  Tensor kh = Tensor::empty({t, s.cfg.num_kv_heads, s.cfg.head_dim}, dtype);
  Tensor vh = Tensor::empty({t, s.cfg.num_kv_heads, s.cfg.head_dim}, dtype);
  for (int64_t i = 0; i < t * row; ++i) {
    testing::store_as(dtype, kh.data(), i, k[i]);
    testing::store_as(dtype, vh.data(), i, v[i]);
  }
  const Table table = make_table(s.pages, to, s.cfg.page_size);
  const Device d = s.cache->device();
  s.cache->append(d.is_cpu() ? kh : kh.to(d), d.is_cpu() ? vh : vh.to(d), new_indptr, table.view());
}

// A pool holding sequences of lens[b] tokens with ns[b] query tokens each, on `device`, written in
// two appends (the cached prefixes, then the new tokens). Pages are drawn at random from a pool with
// spare pages. With shared > 0, sequences 0 and 1 share their first `shared` pages (a common prefix,
// written once through sequence 0).
Pool make_pool(const kv::PagedConfig& base, const std::vector<int64_t>& lens, const std::vector<int>& ns,
                 std::mt19937_64& rng, Device device = Device::cpu(), int shared = 0, float k_std = 1.0f) {
  Pool s;
  s.cfg = base;
  s.lens = lens;
  const int ps = base.page_size;
  int64_t need = 0;
  for (int64_t l : lens) need += (l + ps - 1) / ps;
  s.cfg.num_pages = need + 7;
  std::vector<int32_t> perm(static_cast<size_t>(s.cfg.num_pages));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  size_t next = 0;
  const int64_t row = static_cast<int64_t>(base.num_kv_heads) * base.head_dim;
  for (size_t b = 0; b < lens.size(); ++b) {
    std::vector<int32_t> p;
    for (int64_t i = 0; i < (lens[b] + ps - 1) / ps; ++i) p.push_back(perm[next++]);
    if (b == 1 && shared > 0) std::copy(s.pages[0].begin(), s.pages[0].begin() + shared, p.begin());
    s.pages.push_back(p);
    s.k_raw.push_back(testing::randn(static_cast<size_t>(lens[b] * row), rng, k_std));
    s.v_raw.push_back(testing::randn(static_cast<size_t>(lens[b] * row), rng));
    s.qo.push_back(s.qo.back() + ns[b]);
  }
  s.spare.assign(perm.begin() + static_cast<int64_t>(next), perm.end());
  const int64_t common = static_cast<int64_t>(shared) * ps;
  if (shared > 0) {
    std::copy(s.k_raw[0].begin(), s.k_raw[0].begin() + common * row, s.k_raw[1].begin());
    std::copy(s.v_raw[0].begin(), s.v_raw[0].begin() + common * row, s.v_raw[1].begin());
  }
  s.cache.emplace(s.cfg, device);
  std::vector<int64_t> zero(lens.size(), 0), prefix(lens.size());
  for (size_t b = 0; b < lens.size(); ++b) prefix[b] = lens[b] - ns[b];
  if (shared > 0) {
    // Sequence 1's own prefix tokens after the shared pages come in a second call, when sequence 0
    // already holds the shared pages.
    std::vector<int64_t> first = prefix;
    first[1] = 0;
    append_range(s, zero, first);
    std::vector<int64_t> from = prefix;
    from[1] = common;
    append_range(s, from, prefix);
  } else {
    append_range(s, zero, prefix);
  }
  append_range(s, prefix, lens);
  s.table = make_table(s.pages, lens, ps);
  return s;
}

kv::PagedConfig config(int kv_heads, int dim, int ps, int k_bits = 4, int v_bits = 4) {
  kv::PagedConfig c;
  c.num_kv_heads = kv_heads;
  c.head_dim = dim;
  c.page_size = ps;
  c.k_bits = k_bits;
  c.v_bits = v_bits;
  return c;
}

// Queries [total_q, Hq, D] as stored in `dtype`, and the values they hold.
struct Query {
  Tensor host;
  std::vector<float> f32;
};

Query make_query(int64_t rows, int q_heads, int dim, DType dtype, std::mt19937_64& rng) {
  std::vector<float> v = testing::randn(static_cast<size_t>(rows * q_heads * dim), rng);
  Query q{Tensor::empty({rows, q_heads, dim}, dtype), {}};
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = testing::round_to(v[i], dtype);
    testing::store_as(dtype, q.host.data(), static_cast<int64_t>(i), v[i]);
  }
  q.f32 = std::move(v);
  return q;
}

// ---- the oracle -----------------------------------------------------------------------------

struct Reference {
  std::vector<double> out, lse;  // [total_q, Hq, D], [total_q, Hq]
};

// Naive softmax attention in double over the cache's reconstructions, each query row over the
// tokens the header's rule gives it.
Reference oracle(const Pool& s, const std::vector<float>& q, int q_heads, const PagedOptions& o) {
  const int D = s.cfg.head_dim, Hkv = s.cfg.num_kv_heads, G = q_heads / Hkv;
  const double scale = o.softmax_scale.value_or(static_cast<float>(1.0 / std::sqrt(static_cast<double>(D))));
  Reference r;
  r.out.assign(static_cast<size_t>(s.total_q()) * q_heads * D, 0.0);
  r.lse.assign(static_cast<size_t>(s.total_q()) * q_heads, -std::numeric_limits<double>::infinity());
  for (size_t b = 0; b < s.lens.size(); ++b) {
    const int64_t len = s.lens[b], n = s.qo[b + 1] - s.qo[b];
    if (n == 0) continue;
    Tensor kd = Tensor::empty({len, Hkv, D}, DType::f32), vd = Tensor::empty({len, Hkv, D}, DType::f32);
    if (s.cache->device().is_cpu()) {
      s.cache->dequantize(s.table.view(), static_cast<int>(b), 0, len, kd, vd);
    } else {
      Tensor kg = Tensor::empty({len, Hkv, D}, DType::f32, s.cache->device());
      Tensor vg = Tensor::empty({len, Hkv, D}, DType::f32, s.cache->device());
      s.cache->dequantize(s.table.view(), static_cast<int>(b), 0, len, kg, vg);
      kd = kg.to(Device::cpu());
      vd = vg.to(Device::cpu());
    }
    const float* K = kd.data_as<float>();
    const float* V = vd.data_as<float>();
    for (int64_t j = 0; j < n; ++j) {
      const int64_t row = s.qo[b] + j, p = len - n + j;
      const int64_t end = o.causal ? p + 1 : len;
      const int64_t begin = o.window_left >= 0 ? std::max<int64_t>(0, p - o.window_left) : 0;
      for (int h = 0; h < q_heads; ++h) {
        const int hk = h / G;
        const float* qh = q.data() + (row * q_heads + h) * D;
        std::vector<double> sc(static_cast<size_t>(end - begin));
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t t = begin; t < end; ++t) {
          double dot = 0;
          for (int i = 0; i < D; ++i) dot += static_cast<double>(qh[i]) * K[(t * Hkv + hk) * D + i];
          sc[t - begin] = dot * scale;
          mx = std::max(mx, sc[t - begin]);
        }
        double den = 0;
        for (double& x : sc) den += (x = std::exp(x - mx));
        double* out = r.out.data() + (row * q_heads + h) * D;
        for (int64_t t = begin; t < end; ++t)
          for (int i = 0; i < D; ++i) out[i] += sc[t - begin] * V[(t * Hkv + hk) * D + i] / den;
        r.lse[row * q_heads + h] = mx + std::log(den);
      }
    }
  }
  return r;
}

// ---- running --------------------------------------------------------------------------------

struct Got {
  std::vector<double> out, lse;
  PagedChoice choice;
};

// The plan and run of `q` over s's cache (the cache's device), out (f32 unless given) and lse
// poisoned first.
Got run(const Pool& s, const Query& q, const PagedOptions& o = {}, DType out_dtype = DType::f32) {
  const Device d = s.cache->device();
  const int64_t rows = q.host.size(0), hq = q.host.size(1), dim = q.host.size(2);
  Tensor out_h = Tensor::empty({rows, hq, dim}, out_dtype), lse_h = Tensor::empty({rows, hq}, DType::f32);
  std::fill_n(static_cast<uint8_t*>(out_h.data()), out_h.nbytes(), 0xFF);
  std::fill_n(static_cast<uint8_t*>(lse_h.data()), lse_h.nbytes(), 0xFF);
  Tensor qd = d.is_cpu() ? q.host : q.host.to(d);
  Tensor out = d.is_cpu() ? out_h : out_h.to(d), lse = d.is_cpu() ? lse_h : lse_h.to(d);
  const PagedPlan plan(*s.cache, static_cast<int>(hq), q.host.dtype(), s.batch(), o);
  plan.run(qd, *s.cache, out, lse);
  Got g;
  g.out = testing::to_double(out);
  g.lse = testing::to_double(lse);
  g.choice = plan.choice();
  return g;
}

// The largest |got − ref| / (1 + |ref|) of the LSE; −∞ must meet −∞.
double lse_error(const std::vector<double>& got, const std::vector<double>& ref) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(ref[i]) && got[i] == ref[i]) continue;
    const double e = std::abs(got[i] - ref[i]) / (1 + std::abs(ref[i]));
    worst = std::isnan(e) ? INFINITY : std::max(worst, e);
  }
  return worst;
}

bool all_finite(const std::vector<double>& v) {
  return std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); });
}

// A case: the pool's shape, the sequences, the queries, the options; checked against the oracle.
struct Case {
  kv::PagedConfig cfg = config(2, 64, 16);
  int q_heads = 8;
  std::vector<int64_t> lens;
  std::vector<int> ns;
  PagedOptions options;
  int shared = 0;
};

void expect_matches_oracle(const Case& c, const std::string& what, double bound = 1e-5) {
  std::mt19937_64 rng(test_seed() ^ std::hash<std::string>{}(what));
  const Pool s = make_pool(c.cfg, c.lens, c.ns, rng, Device::cpu(), c.shared);
  const Query q = make_query(s.total_q(), c.q_heads, c.cfg.head_dim, DType::f32, rng);
  const Got g = run(s, q, c.options);
  const Reference ref = oracle(s, q.f32, c.q_heads, c.options);
  EXPECT_TRUE(all_finite(g.out)) << what;
  EXPECT_LE(testing::rel_error(g.out, ref.out), bound) << what;
  EXPECT_LE(lse_error(g.lse, ref.lse), bound) << what;
  EXPECT_EQ(g.choice.rows, PagedVariant::cpu) << what;
}

// A batch of every kind of row: a prefill (n = L), a chunked prefill after a cached prefix, a
// speculative step, decode rows (one on a page boundary), a sequence of one token, an empty one
// (L = 0) and a cached one without queries (n = 0).
const std::vector<int64_t> kMixedLens = {40, 100, 77, 33, 32, 17, 0, 20, 1};
const std::vector<int> kMixedNs = {40, 37, 5, 1, 1, 2, 0, 0, 1};

// ---- the pools against the per-sequence cache ---------------------------------------------------

// The pools' bytes and scales of token t of sequence b equal a kv::Cache's for the same vectors,
// and the reconstructions are bit for bit the same.
void expect_same_as_cache(const Pool& s, int b, DType dtype, const std::string& what) {
  const kv::PagedConfig& c = s.cfg;
  const int64_t len = s.lens[b];
  const int64_t row = static_cast<int64_t>(c.num_kv_heads) * c.head_dim;
  for (bool is_k : {true, false}) {
    kv::CacheConfig cc;
    cc.batch = 1;
    cc.num_kv_heads = c.num_kv_heads;
    cc.head_dim = c.head_dim;
    cc.capacity = len;
    cc.bits = is_k ? c.k_bits : c.v_bits;
    cc.scale_rule = c.scale_rule;
    cc.sign_seed = is_k ? c.k_sign_seed : c.v_sign_seed;
    kv::Cache ref(cc);
    const std::vector<float>& raw = is_k ? s.k_raw[b] : s.v_raw[b];
    Tensor x = Tensor::empty({len, c.num_kv_heads, c.head_dim}, dtype);
    for (int64_t i = 0; i < len * row; ++i) testing::store_as(dtype, x.data(), i, raw[i]);
    ref.append(x);
    const Tensor& packed = is_k ? s.cache->k_packed() : s.cache->v_packed();
    const Tensor& scales = is_k ? s.cache->k_scales() : s.cache->v_scales();
    const int64_t bytes = c.head_dim * cc.bits / 8, slots = s.cache->slots();
    int bad = 0;
    for (int h = 0; h < c.num_kv_heads; ++h)
      for (int64_t t = 0; t < len; ++t) {
        const int64_t slot = static_cast<int64_t>(s.table.indices[s.table.indptr[b] + t / c.page_size]) * c.page_size +
                             t % c.page_size;
        const uint8_t* got = packed.data_as<uint8_t>() + (h * slots + slot) * bytes;
        const uint8_t* want = ref.packed().data_as<uint8_t>() + (h * len + t) * bytes;
        const float gs = scales.data_as<float>()[h * slots + slot], ws = ref.scales().data_as<float>()[h * len + t];
        bad += std::memcmp(got, want, bytes) != 0 || std::memcmp(&gs, &ws, 4) != 0;
      }
    EXPECT_EQ(bad, 0) << what << (is_k ? " K" : " V") << ": vectors whose bytes or scale differ";
    Tensor kd = Tensor::empty({len, c.num_kv_heads, c.head_dim}, DType::f32);
    Tensor vd = Tensor::empty({len, c.num_kv_heads, c.head_dim}, DType::f32);
    s.cache->dequantize(s.table.view(), b, 0, len, kd, vd);
    const Tensor want = ref.dequantize(0, 0, len);
    EXPECT_EQ(std::memcmp((is_k ? kd : vd).data(), want.data(), want.nbytes()), 0) << what << " dequantize";
  }
}

TEST(PagedCache, AppendWritesTheBytesAndScalesOfThePerSequenceCache) {
  FRUGAL_TRACE_SEED();
  struct Variant {
    int k_bits, v_bits;
    std::optional<uint64_t> k_seed, v_seed;
    kv::ScaleRule rule;
  };
  const std::vector<Variant> variants = {{4, 4, {}, {}, kv::ScaleRule::l2_norm},
                                         {2, 3, 7, {}, kv::ScaleRule::least_squares},
                                         {8, 4, 11, 12, kv::ScaleRule::l2_norm},
                                         {3, 8, {}, 5, kv::ScaleRule::least_squares}};
  for (const Variant& v : variants)
    for (int ps : {16, 32, 64}) {
      kv::PagedConfig c = config(2, 64, ps, v.k_bits, v.v_bits);
      c.k_sign_seed = v.k_seed;
      c.v_sign_seed = v.v_seed;
      c.scale_rule = v.rule;
      std::mt19937_64 rng(test_seed() + ps);
      const Pool s = make_pool(c, kMixedLens, kMixedNs, rng);
      const std::string what = "K" + std::to_string(v.k_bits) + "/V" + std::to_string(v.v_bits) + " ps " +
                               std::to_string(ps);
      for (int b : {0, 1, 2, 5, 8}) expect_same_as_cache(s, b, DType::f32, what + " seq " + std::to_string(b));
    }
}

TEST(PagedCache, HalfPrecisionInputGivesTheSameBytesAsThePerSequenceCache) {
  FRUGAL_TRACE_SEED();
  for (DType dt : {DType::f16, DType::bf16}) {
    std::mt19937_64 rng(test_seed());
    Pool s;
    s.cfg = config(2, 128, 16, 4, 8);
    s.cfg.num_pages = 6;
    s.lens = {50};
    s.pages = {{4, 1, 5, 0}};
    s.k_raw = {testing::randn(50 * 256, rng)};
    s.v_raw = {testing::randn(50 * 256, rng)};
    for (auto* raw : {&s.k_raw[0], &s.v_raw[0]})
      for (float& x : *raw) x = testing::round_to(x, dt);
    s.cache.emplace(s.cfg);
    append_range(s, {0}, {50}, dt);
    s.table = make_table(s.pages, s.lens, 16);
    expect_same_as_cache(s, 0, dt, to_string(dt));
  }
}

TEST(PagedCache, DequantizeReadsAnyRangeThroughTheTable) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  const Pool s = make_pool(config(1, 32, 16), {70}, {3}, rng);
  Tensor all_k = Tensor::empty({70, 1, 32}, DType::f32), all_v = Tensor::empty({70, 1, 32}, DType::f32);
  s.cache->dequantize(s.table.view(), 0, 0, 70, all_k, all_v);
  Tensor k = Tensor::empty({19, 1, 32}, DType::f32), v = Tensor::empty({19, 1, 32}, DType::f32);
  s.cache->dequantize(s.table.view(), 0, 13, 32, k, v);  // across a page boundary
  EXPECT_EQ(std::memcmp(k.data(), all_k.data_as<float>() + 13 * 32, k.nbytes()), 0);
  EXPECT_EQ(std::memcmp(v.data(), all_v.data_as<float>() + 13 * 32, v.nbytes()), 0);
  // The reconstruction is close to what was appended (4 bits: ~10% relative error per vector).
  std::vector<double> got(all_k.numel()), raw(all_k.numel());
  for (int64_t i = 0; i < all_k.numel(); ++i) {
    got[i] = all_k.data_as<float>()[i];
    raw[i] = s.k_raw[0][i];
  }
  EXPECT_LT(testing::rel_error(got, raw), 0.15);
  Tensor none = Tensor::empty({0, 1, 32}, DType::f32);
  s.cache->dequantize(s.table.view(), 0, 70, 70, none, none);  // an empty range is nothing to do
}

TEST(PagedCache, PoolsAreZeroAndConfigured) {
  kv::PagedConfig c = config(3, 16, 32, 2, 8);
  c.num_pages = 5;
  c.k_sign_seed = 9;
  const kv::PagedCache cache(c);
  EXPECT_EQ(cache.slots(), 160);
  EXPECT_EQ(cache.k_packed().size(0), 3);
  EXPECT_EQ(cache.k_packed().size(1), 160);
  EXPECT_EQ(cache.k_packed().size(2), 4);
  EXPECT_EQ(cache.v_packed().size(2), 16);
  EXPECT_EQ(cache.k_scales().numel(), 3 * 160);
  EXPECT_TRUE(cache.k_signs().defined());
  EXPECT_FALSE(cache.v_signs().defined());
  EXPECT_EQ(cache.k_centroids().numel(), 4);
  EXPECT_EQ(cache.v_centroids().numel(), 256);
  const std::vector<float> signs = kv::random_signs(9, 16);
  EXPECT_EQ(std::memcmp(cache.k_signs().data(), signs.data(), 16 * sizeof(float)), 0);
  for (const Tensor* t : {&cache.k_packed(), &cache.v_packed(), &cache.k_scales(), &cache.v_scales()}) {
    const uint8_t* p = static_cast<const uint8_t*>(t->data());
    EXPECT_TRUE(std::all_of(p, p + t->nbytes(), [](uint8_t x) { return x == 0; }));
  }
}

// ---- attention against the oracle ------------------------------------------------------------

TEST(PagedAttentionCpu, MixedBatchOfEveryKindOfRowMatchesTheOracle) {
  FRUGAL_TRACE_SEED();
  Case c;
  c.lens = kMixedLens;
  c.ns = kMixedNs;
  expect_matches_oracle(c, "mixed");
}

TEST(PagedAttentionCpu, PageSizes16_32_64) {
  FRUGAL_TRACE_SEED();
  for (int ps : {16, 32, 64}) {
    Case c;
    c.cfg = config(2, 64, ps);
    c.lens = {ps - 1, ps, ps + 1, 3 * ps, 3 * ps + 5};
    c.ns = {ps - 1, 1, 2, ps + 3, 8};
    expect_matches_oracle(c, "ps " + std::to_string(ps));
  }
}

TEST(PagedAttentionCpu, GqaRatios1_4_8) {
  FRUGAL_TRACE_SEED();
  for (int g : {1, 4, 8}) {
    Case c;
    c.cfg = config(2, 32, 16);
    c.q_heads = 2 * g;
    c.lens = {50, 9, 64};
    c.ns = {6, 1, 64};
    expect_matches_oracle(c, "G " + std::to_string(g));
  }
}

TEST(PagedAttentionCpu, BitWidthsSignsAndScaleRules) {
  FRUGAL_TRACE_SEED();
  for (auto [kb, vb] : {std::pair{2, 2}, {3, 3}, {4, 4}, {8, 8}, {8, 4}, {4, 2}, {3, 8}})
    for (bool signs : {false, true}) {
      Case c;
      c.cfg = config(2, 64, 16, kb, vb);
      if (signs) {
        c.cfg.k_sign_seed = 21;
        c.cfg.v_sign_seed = 22;
        c.cfg.scale_rule = kv::ScaleRule::least_squares;
      }
      c.q_heads = 4;
      c.lens = {45, 20, 31};
      c.ns = {4, 1, 31};
      expect_matches_oracle(c, "K" + std::to_string(kb) + "/V" + std::to_string(vb) + (signs ? " signs, LS" : ""));
    }
}

TEST(PagedAttentionCpu, ALongSequenceAcrossManySlices) {
  FRUGAL_TRACE_SEED();
  Case c;
  c.cfg = config(1, 64, 64);
  c.q_heads = 4;
  c.lens = {8192 + 37, 3000};
  c.ns = {4, 1};  // a speculative step at the end of the long one, a decode row of the other
  expect_matches_oracle(c, "L 8229");
}

TEST(PagedAttentionCpu, SlidingWindows) {
  FRUGAL_TRACE_SEED();
  for (int64_t w : {0, 5, 31, 100}) {
    Case c;
    c.lens = kMixedLens;
    c.ns = kMixedNs;
    c.options.window_left = w;
    expect_matches_oracle(c, "window " + std::to_string(w));
  }
}

TEST(PagedAttentionCpu, NonCausalRowsSeeTheWholeSequence) {
  FRUGAL_TRACE_SEED();
  Case c;
  c.lens = kMixedLens;
  c.ns = kMixedNs;
  c.options.causal = false;
  expect_matches_oracle(c, "non-causal");
  c.options.window_left = 10;  // a window still drops the tokens before p − w
  expect_matches_oracle(c, "non-causal, window 10");
}

TEST(PagedAttentionCpu, SoftmaxScaleIsApplied) {
  FRUGAL_TRACE_SEED();
  Case c;
  c.lens = {60, 7};
  c.ns = {3, 1};
  c.options.softmax_scale = 0.37f;
  expect_matches_oracle(c, "scale 0.37");
}

TEST(PagedAttentionCpu, SharedPrefixPagesAreReadByEverySequenceThatHoldsThem) {
  FRUGAL_TRACE_SEED();
  Case c;
  c.lens = {70, 90, 25};
  c.ns = {5, 1, 3};
  c.shared = 3;  // the first 48 tokens of sequences 0 and 1
  expect_matches_oracle(c, "shared prefix");
  std::mt19937_64 rng(test_seed());
  const Pool s = make_pool(c.cfg, c.lens, c.ns, rng, Device::cpu(), c.shared);
  EXPECT_EQ(s.table.indices[s.table.indptr[1]], s.table.indices[0]);
  Tensor k0 = Tensor::empty({48, 2, 64}, DType::f32), v0 = Tensor::empty({48, 2, 64}, DType::f32);
  Tensor k1 = Tensor::empty({48, 2, 64}, DType::f32), v1 = Tensor::empty({48, 2, 64}, DType::f32);
  s.cache->dequantize(s.table.view(), 0, 0, 48, k0, v0);
  s.cache->dequantize(s.table.view(), 1, 0, 48, k1, v1);
  EXPECT_EQ(std::memcmp(k0.data(), k1.data(), k0.nbytes()), 0);
}

TEST(PagedAttentionCpu, HalfPrecisionQueriesAndOutputs) {
  FRUGAL_TRACE_SEED();
  for (DType dt : {DType::f16, DType::bf16}) {
    std::mt19937_64 rng(test_seed());
    const Pool s = make_pool(config(2, 64, 16), {40, 9}, {4, 1}, rng);
    const Query q = make_query(s.total_q(), 4, 64, dt, rng);
    const Reference ref = oracle(s, q.f32, 4, {});
    EXPECT_LE(testing::rel_error(run(s, q).out, ref.out), 1e-5) << to_string(dt) << " q, f32 out";
    EXPECT_LE(testing::rel_error(run(s, q, {}, dt).out, ref.out), 1e-2) << to_string(dt) << " out";
  }
}

TEST(PagedAttentionCpu, LseIsOptionalAndOutputsMatchWithoutIt) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  const Pool s = make_pool(config(2, 64, 16), {40, 9}, {4, 1}, rng);
  const Query q = make_query(s.total_q(), 4, 64, DType::f32, rng);
  Tensor out = Tensor::empty({5, 4, 64}, DType::f32);
  paged_attention(q.host, *s.cache, s.batch(), out);
  const Got g = run(s, q);
  EXPECT_EQ(testing::to_double(out), g.out);
}

TEST(PagedAttentionCpu, NonFiniteKeysPoisonOnlyTheRowsThatSeeThem) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  Pool s;
  s.cfg = config(2, 32, 16);
  s.cfg.num_pages = 3;
  s.lens = {20};
  s.pages = {{2, 0}};
  s.qo = {0, 20};
  s.k_raw = {testing::randn(20 * 64, rng)};
  s.v_raw = {testing::randn(20 * 64, rng)};
  s.k_raw[0][(12 * 2 + 1) * 32 + 3] = NAN;  // token 12, K/V head 1
  s.cache.emplace(s.cfg);
  append_range(s, {0}, {20});
  s.table = make_table(s.pages, s.lens, 16);
  const Query q = make_query(20, 4, 32, DType::f32, rng);
  const Got g = run(s, q);
  for (int r = 0; r < 20; ++r)
    for (int h = 0; h < 4; ++h) {
      const bool poisoned = r >= 12 && h >= 2;  // causal: rows before token 12 never see it
      const double x = g.out[(r * 4 + h) * 32];
      EXPECT_EQ(std::isnan(x), poisoned) << "row " << r << " head " << h;
      EXPECT_EQ(std::isnan(g.lse[r * 4 + h]), poisoned) << "row " << r << " head " << h;
    }
}

// The CPU backend serves the tiled kernel's work entries too (the plan makes row items only on
// the CPU), and rows that see no token get zeros and an LSE of −∞.
TEST(PagedAttentionCpu, TheBackendServesTileEntriesAndEmptyRows) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  Case c;
  c.lens = {50, 30};
  c.ns = {7, 1};
  const Pool s = make_pool(c.cfg, c.lens, c.ns, rng);
  const Query q = make_query(9, 8, 64, DType::f32, rng);  // row 8: an item that sees no token
  for (bool causal : {true, false}) {
    PagedOptions o;
    o.causal = causal;
    o.window_left = causal ? 9 : -1;
    const Reference want = oracle(s, q.f32, 8, o);
    std::vector<backend::RowItem> items = {{1, 7, causal ? 20 : 0, 30}, {0, 8, 10, 10}};
    const std::vector<backend::TileSeq> seqs = {{0, 0, 7, 50}};
    std::vector<float> out(9 * 8 * 64, NAN), lse(9 * 8, NAN);
    backend::PagedArgs a;
    a.q = q.host.data();
    a.q_stride_row = 8 * 64;
    a.q_stride_h = 64;
    a.out = out.data();
    a.lse = lse.data();
    a.q_heads = 8;
    a.kv_heads = 2;
    a.dim = 64;
    a.page_size = 16;
    a.slots = s.cache->slots();
    a.k = {s.cache->k_packed().data_as<const uint8_t>(), s.cache->k_scales().data_as<const float>(), nullptr,
           s.cache->k_centroids().data_as<const float>(), 4};
    a.v = {s.cache->v_packed().data_as<const uint8_t>(), s.cache->v_scales().data_as<const float>(), nullptr,
           s.cache->v_centroids().data_as<const float>(), 4};
    a.kv_indptr = s.table.indptr.data();
    a.kv_indices = s.table.indices.data();
    a.items = items.data();
    a.num_items = 2;
    a.seqs = seqs.data();
    a.num_seqs = 1;
    a.max_q_count = 7;
    a.causal = causal;
    a.window_left = o.window_left;
    a.softmax_scale = 0.125f;
    a.choice.tokens_per_split = 16;  // several slices a row
    cpu::paged_attention(a);
    std::vector<double> got(out.begin(), out.begin() + 8 * 8 * 64), wanted(want.out.begin(), want.out.begin() + 8 * 8 * 64);
    // Row 7 (sequence 1's decode row) with causal off sees the whole 30 tokens, as the oracle; with
    // causal on and window 9 it sees [20, 30): the item's range.
    EXPECT_LE(testing::rel_error(got, wanted), 1e-5) << (causal ? "causal, window 9" : "non-causal");
    for (int i = 8 * 8 * 64; i < 9 * 8 * 64; ++i) ASSERT_EQ(out[i], 0.0f);
    for (int h = 0; h < 8; ++h) EXPECT_EQ(lse[8 * 8 + h], -INFINITY);
    std::vector<double> lse_got(lse.begin(), lse.begin() + 64), lse_want(want.lse.begin(), want.lse.begin() + 64);
    EXPECT_LE(lse_error(lse_got, lse_want), 1e-5);
  }
}

// ---- plan and update -----------------------------------------------------------------------------

TEST(PagedPlan, ReportsItsBatchAndChoice) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  const Pool s = make_pool(config(2, 64, 16), kMixedLens, kMixedNs, rng);
  PagedPlan plan(*s.cache, 8, DType::f32, s.batch());
  EXPECT_EQ(plan.batch(), 9);
  EXPECT_EQ(plan.total_q(), 87);
  EXPECT_EQ(plan.choice().rows, PagedVariant::cpu);
  EXPECT_EQ(plan.choice().tiles, PagedVariant::cpu);
  EXPECT_EQ(plan.choice().tokens_per_split, 1024);
  EXPECT_EQ(plan.workspace_bytes(), 0u);
  PagedPlan moved = std::move(plan);
  EXPECT_EQ(moved.batch(), 9);
}

TEST(PagedPlan, UpdateServesTheNextDecodeStep) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  // Decode rows of three sequences; the next step appends one token each (one crosses into a new
  // page) and the plan is updated in place.
  Pool s = make_pool(config(2, 64, 16), {31, 32, 5}, {1, 1, 1}, rng);
  PagedOptions o;
  o.max_kv_len = 64;
  PagedPlan plan(*s.cache, 8, DType::f32, s.batch(), o);
  const int64_t row = 2 * 64;
  for (size_t b = 0; b < 3; ++b) {
    const std::vector<float> more = testing::randn(row, rng);
    s.k_raw[b].insert(s.k_raw[b].end(), more.begin(), more.end());
    s.v_raw[b].insert(s.v_raw[b].end(), more.begin(), more.end());
    if (s.pages[b].size() * 16 < static_cast<size_t>(s.lens[b] + 1)) s.pages[b].push_back(s.spare[b]);
  }
  const std::vector<int64_t> before = s.lens;
  for (int64_t& l : s.lens) ++l;
  append_range(s, before, s.lens);
  s.table = make_table(s.pages, s.lens, 16);
  const Query q = make_query(3, 8, 64, DType::f32, rng);
  plan.update(s.batch());
  Tensor out = Tensor::empty({3, 8, 64}, DType::f32);
  plan.run(q.host, *s.cache, out);
  const Reference ref = oracle(s, q.f32, 8, {});
  EXPECT_LE(testing::rel_error(testing::to_double(out), ref.out), 1e-5);
  EXPECT_EQ(testing::to_double(out), run(s, q).out);  // exactly a fresh plan's result
}

TEST(PagedPlan, UpdateRefusesWhatThePlanWasNotMadeForAndChangesNothing) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  const Pool s = make_pool(config(2, 64, 16), {40, 20, 9}, {3, 1, 1}, rng);
  PagedPlan plan(*s.cache, 8, DType::f32, s.batch());
  const Query q = make_query(5, 8, 64, DType::f32, rng);
  Tensor first = Tensor::empty({5, 8, 64}, DType::f32);
  plan.run(q.host, *s.cache, first);

  const auto refused = [&](const std::vector<int32_t>& qo, const Table& t, std::initializer_list<std::string> parts) {
    expect_error([&] { plan.update({qo, t.view()}); }, ErrorCode::invalid_argument, parts);
  };
  // More sequences, more query rows, a longer sequence, and a bad table.
  const Table four = make_table({s.pages[0], s.pages[1], s.pages[2], s.pages[2]}, {40, 20, 9, 9}, 16);
  refused({0, 1, 2, 3, 4}, four, {"4 sequences", "at most 3"});
  refused({0, 4, 5, 6}, s.table, {"6 query rows", "at most 5"});
  std::vector<std::vector<int32_t>> longer = s.pages;
  longer[1].push_back(s.pages[2][0]);
  refused({0, 1, 2, 3}, make_table(longer, {40, 41, 9}, 16), {"41 tokens", "max_kv_len 40"});
  refused({0, 3, 4, 15}, s.table, {"query counts past a sequence's cached length", "sequence 2 has 11"});

  // Nothing changed: the plan still serves its batch.
  Tensor again = Tensor::empty({5, 8, 64}, DType::f32);
  plan.run(q.host, *s.cache, again);
  EXPECT_EQ(testing::to_double(first), testing::to_double(again));
  EXPECT_EQ(plan.total_q(), 5);

  // Fewer rows and sequences are served.
  const Table two = make_table({s.pages[0], s.pages[1]}, {40, 20}, 16);
  plan.update({std::vector<int32_t>{0, 2, 3}, two.view()});
  EXPECT_EQ(plan.total_q(), 3);
  EXPECT_EQ(plan.batch(), 2);
  Tensor q3 = Tensor::empty({3, 8, 64}, DType::f32), out3 = Tensor::empty({3, 8, 64}, DType::f32);
  std::memcpy(q3.data(), q.host.data(), q3.nbytes());
  plan.run(q3, *s.cache, out3);
  const std::vector<int32_t> qo3 = {0, 2, 3};
  Tensor fresh = Tensor::empty({3, 8, 64}, DType::f32);
  paged_attention(q3, *s.cache, {qo3, two.view()}, fresh);
  EXPECT_EQ(testing::to_double(out3), testing::to_double(fresh));
}

// ---- hostile input ---------------------------------------------------------------------------------

TEST(PagedHostile, ConfigsThatCannotBeAPool) {
  const auto refused = [](kv::PagedConfig c, std::initializer_list<std::string> parts) {
    expect_error([&] { kv::PagedCache cache(c); }, ErrorCode::invalid_argument, parts);
  };
  kv::PagedConfig c = config(2, 64, 16);
  c.num_pages = 4;
  kv::PagedConfig bad = c;
  bad.page_size = 8;
  refused(bad, {"kv::PagedCache", "page_size must be 16, 32 or 64", "got 8"});
  bad = c;
  bad.num_pages = 0;
  refused(bad, {"num_pages must be at least 1, got 0"});
  bad = c;
  bad.head_dim = 96;
  refused(bad, {"head_dim must be a power of two", "got 96"});
  bad = c;
  bad.v_bits = 5;
  refused(bad, {"v_bits must be 2, 3, 4 or 8, got 5"});
  bad = c;
  bad.head_dim = 4;
  bad.k_bits = 3;
  refused(bad, {"head_dim × k_bits must fill whole bytes"});
  bad = c;
  bad.num_pages = (int64_t{1} << 31) / 16;
  refused(bad, {"below 2^31"});
  bad = c;
  bad.num_kv_heads = 0;
  refused(bad, {"num_kv_heads must be at least 1"});
}

TEST(PagedHostile, BadTablesAreNamed) {
  kv::PagedConfig c = config(1, 16, 16);
  c.num_pages = 4;
  const auto refused = [&](std::vector<int32_t> indptr, std::vector<int32_t> indices, std::vector<int32_t> last,
                           ErrorCode code, std::initializer_list<std::string> parts) {
    expect_error([&] { kv::sequence_lengths({indptr, indices, last}, c, "test"); }, code, parts);
  };
  refused({}, {}, {}, ErrorCode::invalid_argument, {"[test]", "B + 1 entries"});
  refused({0, 1}, {0}, {}, ErrorCode::invalid_argument, {"last_page_len must hold one entry per sequence"});
  refused({1, 1}, {0}, {3}, ErrorCode::invalid_argument, {"indptr[0] must be 0, got 1"});
  refused({0, 2, 1}, {0, 1}, {3, 3}, ErrorCode::invalid_argument, {"non-decreasing", "indptr[1] = 2 > indptr[2] = 1"});
  refused({0, 2}, {0, 1, 2}, {3}, ErrorCode::invalid_argument, {"indptr[B] = 2", "got 3"});
  refused({0, 2}, {0, 4}, {3}, ErrorCode::out_of_range, {"indices[1] = 4", "sequence 0", "pool of 4 pages"});
  refused({0, 1}, {-1}, {3}, ErrorCode::out_of_range, {"indices[0] = -1"});
  refused({0, 1}, {2}, {0}, ErrorCode::invalid_argument, {"last_page_len[0] = 0", "[1, page_size = 16]"});
  refused({0, 1}, {2}, {17}, ErrorCode::invalid_argument, {"last_page_len[0] = 17"});
  refused({0, 0}, {}, {1}, ErrorCode::invalid_argument, {"sequence 0 has no pages", "must be 0, got 1"});
  EXPECT_EQ(kv::sequence_lengths({std::vector<int32_t>{0, 2, 2, 3}, std::vector<int32_t>{3, 1, 1},
                                  std::vector<int32_t>{5, 0, 16}},
                                 c, "test"),
            (std::vector<int64_t>{21, 0, 16}));
}

// The pools' bytes, to show a refused append wrote nothing.
std::vector<uint8_t> pool_bytes(const kv::PagedCache& c) {
  std::vector<uint8_t> all;
  for (const Tensor* t : {&c.k_packed(), &c.k_scales(), &c.v_packed(), &c.v_scales()}) {
    const uint8_t* p = static_cast<const uint8_t*>(t->data());
    all.insert(all.end(), p, p + t->nbytes());
  }
  return all;
}

TEST(PagedHostile, RefusedAppendsWriteNothing) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  Pool s = make_pool(config(2, 32, 16), {40, 60, 10}, {0, 0, 0}, rng, Device::cpu(), 2);  // 0, 1 share 2 pages
  const std::vector<uint8_t> before = pool_bytes(*s.cache);
  kv::PagedCache& cache = *s.cache;
  Tensor x1 = Tensor::zeros({1, 2, 32}, DType::f32), x2 = Tensor::zeros({2, 2, 32}, DType::f32);
  const auto refused = [&](const TensorView& k, const TensorView& v, std::vector<int32_t> new_indptr, const Table& t,
                           std::initializer_list<std::string> parts) {
    expect_error([&] { cache.append(k, v, new_indptr, t.view()); }, ErrorCode::invalid_argument, parts);
    EXPECT_TRUE(pool_bytes(cache) == before) << *parts.begin();
  };
  // Sequence 1 writing into a page it shares with sequence 0 (its position 31 is on shared page 1).
  const Table shared_write = make_table(s.pages, {40, 32, 10}, 16);
  refused(x1, x1, {0, 0, 1, 1}, shared_write,
          {"kv::PagedCache::append", "page " + std::to_string(s.pages[0][1]), "written by sequence 1",
           "also referenced by sequence 0"});
  // A page entered twice in one sequence's list.
  std::vector<std::vector<int32_t>> dup = s.pages;
  dup[2] = {s.pages[2][0], s.pages[2][0]};
  refused(x1, x1, {0, 0, 0, 1}, make_table(dup, {40, 60, 17}, 16), {"another entry of the same sequence"});
  // Two sequences writing the same page.
  std::vector<std::vector<int32_t>> both = s.pages;
  both[2] = {s.pages[1][3]};
  refused(x2, x2, {0, 0, 1, 2}, make_table(both, {40, 60, 10}, 16), {"written by sequence 1 and by sequence 2"});
  // Counts past the lengths, a bad new_indptr, tensors of the wrong shape.
  refused(x2, x2, {0, 0, 0, 2}, make_table(s.pages, {40, 60, 1}, 16), {"sequence 2 appends 2 tokens", "gives it 1"});
  refused(x1, x1, {0, 0, 1}, s.table, {"new_indptr must hold B + 1 = 4 entries, got 3"});
  refused(x1, x1, {0, 1, 0, 1}, s.table, {"non-decreasing"});
  refused(x1, x1, {0, 0, 0, 2}, s.table, {"new_indptr[B] = 2", "T = 1"});
  refused(x1, x2, {0, 0, 0, 1}, s.table, {"v", "[1, 2, 32]"});
  Tensor wrong_heads = Tensor::zeros({1, 3, 32}, DType::f32), wrong_dim = Tensor::zeros({1, 2, 16}, DType::f32);
  refused(wrong_heads, wrong_heads, {0, 0, 0, 1}, s.table, {"k"});
  refused(wrong_dim, wrong_dim, {0, 0, 0, 1}, s.table, {"k"});
  Tensor ints = Tensor::zeros({1, 2, 32}, DType::i32);
  refused(ints, ints, {0, 0, 0, 1}, s.table, {"k"});
  Table bad = s.table;
  bad.last[2] = 0;
  refused(x1, x1, {0, 0, 0, 1}, bad, {"last_page_len[2] = 0"});
  // A strided last dimension.
  Tensor wide = Tensor::zeros({1, 2, 64}, DType::f32);
  const int64_t shape[] = {1, 2, 32}, strides[] = {128, 64, 2};
  const TensorView strided(wide.data(), DType::f32, shape, strides, Device::cpu());
  refused(strided, strided, {0, 0, 0, 1}, s.table, {"contiguous"});
  // Out of the pool: an error of its own code, and nothing written either.
  Table outside = s.table;
  outside.indices[0] = static_cast<int32_t>(s.cfg.num_pages);
  expect_error([&] { cache.append(x1, x1, std::vector<int32_t>{0, 1, 1, 1}, outside.view()); }, ErrorCode::out_of_range,
               {"is outside the pool"});
  EXPECT_TRUE(pool_bytes(cache) == before);
}

TEST(PagedHostile, BadBatchesAndCallsAreNamed) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  const Pool s = make_pool(config(2, 32, 16), {40, 20}, {3, 1}, rng);
  const auto plan_refused = [&](const std::vector<int32_t>& qo, int hq, const PagedOptions& o,
                                std::initializer_list<std::string> parts, ErrorCode code = ErrorCode::invalid_argument) {
    expect_error([&] { const PagedPlan plan(*s.cache, hq, DType::f32, {qo, s.table.view()}, o); }, code, parts);
  };
  plan_refused({0, 3}, 4, {}, {"attention::PagedPlan", "qo_indptr must hold B + 1 = 3 entries"});
  plan_refused({1, 3, 4}, 4, {}, {"qo_indptr[0] must be 0, got 1"});
  plan_refused({0, 3, 2}, 4, {}, {"qo_indptr must be non-decreasing"});
  plan_refused({0, 3, 25}, 4, {}, {"query counts past a sequence's cached length", "sequence 1 has 22", "20 cached"});
  plan_refused({0, 3, 4}, 3, {}, {"positive multiple of the K/V heads Hkv = 2", "Hq = 3"});
  plan_refused({0, 3, 4}, 0, {}, {"Hq = 0"});
  PagedOptions o;
  o.window_left = -2;
  plan_refused({0, 3, 4}, 4, o, {"window_left must be -1", "got -2"});
  o = {};
  o.softmax_scale = INFINITY;
  plan_refused({0, 3, 4}, 4, o, {"softmax_scale must be finite"});
  o = {};
  o.max_kv_len = 10;
  plan_refused({0, 3, 4}, 4, o, {"max_kv_len = 10 is shorter than this batch's longest sequence (40 tokens)"});
  o = {};
  o.rows = PagedVariant::rows_f32;
  plan_refused({0, 3, 4}, 4, o, {"rows_f32", "on the CPU"}, ErrorCode::unsupported);
  o = {};
  o.num_splits = -1;
  plan_refused({0, 3, 4}, 4, o, {"num_splits"});
  Table bad = s.table;
  bad.indices[1] = 99;
  expect_error([&] { const PagedPlan plan(*s.cache, 4, DType::f32, {std::vector<int32_t>{0, 3, 4}, bad.view()}); },
               ErrorCode::out_of_range, {"indices[1] = 99"});

  const std::vector<int32_t> qo = {0, 3, 4};
  const PagedPlan plan(*s.cache, 4, DType::f32, {qo, s.table.view()});
  Tensor q = Tensor::zeros({4, 4, 32}, DType::f32), out = Tensor::empty({4, 4, 32}, DType::f32);
  const auto run_refused = [&](const TensorView& qv, const TensorView& ov, const TensorView& lv,
                               std::initializer_list<std::string> parts, const kv::PagedCache* other = nullptr) {
    expect_error([&] { plan.run(qv, other ? *other : *s.cache, ov, lv); }, ErrorCode::invalid_argument, parts);
  };
  run_refused(Tensor::zeros({5, 4, 32}, DType::f32), out, {}, {"attention::PagedPlan::run", "q"});
  run_refused(Tensor::zeros({4, 8, 32}, DType::f32), out, {}, {"q"});
  run_refused(Tensor::zeros({4, 4, 32}, DType::f16), out, {}, {"q"});
  run_refused(q, Tensor::empty({4, 4, 16}, DType::f32), {}, {"out"});
  run_refused(q, Tensor::empty({4, 4, 32}, DType::f16), {}, {"out must have q's dtype (f32) or f32, got f16"});
  run_refused(q, out, Tensor::empty({4, 3}, DType::f32), {"lse"});
  run_refused(q, out, Tensor::empty({4, 4}, DType::f16), {"lse"});
  kv::PagedConfig other_cfg = s.cfg;
  other_cfg.k_bits = 8;
  const kv::PagedCache other(other_cfg);
  run_refused(q, out, {}, {"is not the plan's", "K8/V4", "K4/V4"}, &other);
  Tensor wide = Tensor::zeros({4, 4, 64}, DType::f32);
  const int64_t shape[] = {4, 4, 32}, strides[] = {256, 64, 2};
  run_refused(TensorView(wide.data(), DType::f32, shape, strides, Device::cpu()), out, {}, {"contiguous"});
  run_refused(q, TensorView(wide.data(), DType::f32, shape, strides, Device::cpu()), {}, {"out"});
  // q with strided rows and heads (the last dimension contiguous) is served.
  const int64_t qstrides[] = {256, 64, 1};
  plan.run(TensorView(wide.data(), DType::f32, shape, qstrides, Device::cpu()), *s.cache, out);
}

TEST(PagedHostile, DequantizeRangesAndOutputs) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  const Pool s = make_pool(config(2, 32, 16), {40, 20}, {0, 0}, rng);
  Tensor k = Tensor::empty({5, 2, 32}, DType::f32), v = Tensor::empty({5, 2, 32}, DType::f32);
  const auto refused = [&](int b, int64_t begin, int64_t end, const TensorView& ko, ErrorCode code,
                           std::initializer_list<std::string> parts) {
    expect_error([&] { s.cache->dequantize(s.table.view(), b, begin, end, ko, v); }, code, parts);
  };
  refused(2, 0, 5, k, ErrorCode::out_of_range, {"kv::PagedCache::dequantize", "sequence 2 does not exist"});
  refused(1, 16, 21, k, ErrorCode::out_of_range, {"passes the 20 tokens of sequence 1"});
  refused(1, 5, 0, k, ErrorCode::invalid_argument, {"bad token range [5, 0)"});
  refused(1, 0, 5, Tensor::empty({5, 2, 16}, DType::f32), ErrorCode::invalid_argument, {"k_out"});
  refused(1, 0, 5, Tensor::empty({5, 2, 32}, DType::i32), ErrorCode::invalid_argument, {"k_out"});
}

// ---- GPU ------------------------------------------------------------------------------------

// The batch of every kind of row at D = 128 (the tiled kernel's head dims, the f16 row kernel's bits).
Case gpu_case() {
  Case c;
  c.cfg = config(2, 128, 16, 4, 4);
  c.cfg.k_sign_seed = 3;
  c.cfg.v_sign_seed = 4;
  c.q_heads = 8;
  c.lens = kMixedLens;
  c.ns = kMixedNs;
  return c;
}

struct Forced {
  PagedVariant rows, tiles;
  double bound;  // against the oracle
};

TEST(PagedAttentionCuda, EveryKernelThatCanServeMatchesTheCpuAndTheOracle) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  const std::vector<Forced> forced = {{PagedVariant::rows_f32, PagedVariant::rows_f32, 1e-5},
                                      {PagedVariant::rows_f16, PagedVariant::rows_f16, 2e-3},
                                      {PagedVariant::rows_f16, PagedVariant::tiles_f16, 2e-3},
                                      {PagedVariant::rows_f32, PagedVariant::tiles_f16, 2e-3}};
  for (auto [kb, vb] : {std::pair{4, 4}, {8, 4}, {2, 3}})
    for (int ps : {16, 64})
      for (int64_t window : {-1, 20})
        for (bool causal : {true, false})
          for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
            Case c = gpu_case();
            c.cfg.k_bits = kb;
            c.cfg.v_bits = vb;
            c.cfg.page_size = ps;
            c.options.window_left = window;
            c.options.causal = causal;
            const std::string what = "K" + std::to_string(kb) + "/V" + std::to_string(vb) + " ps " +
                                     std::to_string(ps) + " window " + std::to_string(window) +
                                     (causal ? " causal" : " non-causal") + " q " + to_string(dt);
            std::mt19937_64 rng(test_seed());
            const Pool cpu = make_pool(c.cfg, c.lens, c.ns, rng);
            std::mt19937_64 rng2(test_seed());
            const Pool gpu = make_pool(c.cfg, c.lens, c.ns, rng2, Device::cuda());
            // The device's pools hold the CPU's bytes (no call here is large enough for the mma append).
            EXPECT_TRUE(pool_bytes(*cpu.cache) ==
                        [&] {
                          std::vector<uint8_t> all;
                          for (const Tensor* t : {&gpu.cache->k_packed(), &gpu.cache->k_scales(),
                                                  &gpu.cache->v_packed(), &gpu.cache->v_scales()}) {
                            const Tensor h = t->to(Device::cpu());
                            const uint8_t* p = static_cast<const uint8_t*>(h.data());
                            all.insert(all.end(), p, p + h.nbytes());
                          }
                          return all;
                        }())
                << what << ": pools";
            const Query q = make_query(cpu.total_q(), c.q_heads, c.cfg.head_dim, dt, rng);
            const Reference ref = oracle(cpu, q.f32, c.q_heads, c.options);
            const Got on_cpu = run(cpu, q, c.options);
            for (const Forced& f : forced) {
              const bool f16_rows = f.rows == PagedVariant::rows_f16 || f.tiles == PagedVariant::rows_f16;
              if (f16_rows && !((kb == 4 || kb == 8) && (vb == 4 || vb == 8))) continue;
              PagedOptions o = c.options;
              o.rows = f.rows;
              o.tiles = f.tiles;
              const Got g = run(gpu, q, o);
              const std::string fw = what + " rows " + to_string(f.rows) + " tiles " + to_string(f.tiles);
              EXPECT_EQ(g.choice.rows, f.rows) << fw;
              EXPECT_EQ(g.choice.tiles, f.tiles) << fw;
              EXPECT_TRUE(all_finite(g.out)) << fw;
              EXPECT_LE(testing::rel_error(g.out, ref.out), f.bound) << fw;
              EXPECT_LE(testing::rel_error(g.out, on_cpu.out), f.bound) << fw << " vs the CPU";
              EXPECT_LE(lse_error(g.lse, ref.lse), f.bound) << fw << " LSE";
            }
          }
}

TEST(PagedAttentionCuda, TheChoiceOfTheRule) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  const Case c = gpu_case();
  const Pool s = make_pool(c.cfg, c.lens, c.ns, rng, Device::cuda());
  const PagedPlan f32(*s.cache, 8, DType::f32, s.batch());
  EXPECT_EQ(f32.choice().rows, PagedVariant::rows_f32);
  EXPECT_EQ(f32.choice().tiles, PagedVariant::rows_f32);
  const PagedPlan f16(*s.cache, 8, DType::f16, s.batch());
  EXPECT_EQ(f16.choice().rows, PagedVariant::rows_f16) << to_string(f16.choice());
  EXPECT_EQ(f16.choice().tiles, PagedVariant::tiles_f16) << to_string(f16.choice());
}

TEST(PagedAttentionCuda, ALongSequence128K) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  Case c;
  c.cfg = config(1, 128, 64);
  c.q_heads = 4;
  c.lens = {131072 + 3, 1000};
  c.ns = {5, 1};
  std::mt19937_64 rng(test_seed());
  const Pool s = make_pool(c.cfg, c.lens, c.ns, rng, Device::cuda());
  for (DType dt : {DType::f32, DType::f16}) {
    const Query q = make_query(s.total_q(), 4, 128, dt, rng);
    const Reference ref = oracle(s, q.f32, 4, {});
    const Got g = run(s, q);
    EXPECT_LE(testing::rel_error(g.out, ref.out), dt == DType::f32 ? 1e-5 : 2e-3) << to_string(g.choice);
    EXPECT_LE(lse_error(g.lse, ref.lse), dt == DType::f32 ? 1e-5 : 2e-3) << to_string(g.choice);
  }
}

TEST(PagedAttentionCuda, RefusesHostTensorsAndOtherDevices) {
  FRUGAL_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(test_seed());
  Pool s = make_pool(config(2, 64, 16), {40, 20}, {3, 1}, rng, Device::cuda());
  const PagedPlan plan(*s.cache, 4, DType::f32, s.batch());
  Tensor q = Tensor::zeros({4, 4, 64}, DType::f32), out = Tensor::empty({4, 4, 64}, DType::f32, Device::cuda());
  expect_error([&] { plan.run(q, *s.cache, out); }, ErrorCode::invalid_argument, {"q is on cpu"});
  Tensor x = Tensor::zeros({1, 2, 64}, DType::f32);
  expect_error([&] { s.cache->append(x, x, std::vector<int32_t>{0, 0, 1}, s.table.view()); },
               ErrorCode::invalid_argument, {"k is on cpu"});
}

#if FRUGAL_TEST_CUDA_RUNTIME
// A CUDA graph of plan.run replays the cache's current contents (same pages, new values), and after
// update() (lengths grown, the same query rows) the new batch; each replay equals a fresh run.
TEST(PagedAttentionCuda, GraphsReplayAfterAppendsAndUpdates) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  for (DType dt : {DType::f32, DType::f16}) {
    std::mt19937_64 rng(test_seed());
    Case c = gpu_case();
    c.lens = {50, 33, 70};
    c.ns = {4, 1, 1};  // a speculative step and two decode rows
    Pool s = make_pool(c.cfg, c.lens, c.ns, rng, Device::cuda());
    synchronize(Device::cuda());  // the appends ran on the default stream; the plan uses its own
    PagedOptions o;
    o.max_kv_len = 96;
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    PagedPlan plan(*s.cache, 8, dt, s.batch(), o, stream);
    const Query q = make_query(6, 8, 128, dt, rng);
    const Tensor qd = q.host.to(Device::cuda());
    const Tensor out = Tensor::zeros({6, 8, 128}, DType::f32, Device::cuda());
    const Tensor lse = Tensor::zeros({6, 8}, DType::f32, Device::cuda());
    plan.run(qd, *s.cache, out, lse, stream);  // a first run outside capture (lazy initialization)
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    plan.run(qd, *s.cache, out, lse, stream);
    ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);

    const auto fresh = [&] {
      Tensor o2 = Tensor::zeros({6, 8, 128}, DType::f32, Device::cuda());
      Tensor l2 = Tensor::zeros({6, 8}, DType::f32, Device::cuda());
      PagedPlan p2(*s.cache, 8, dt, s.batch(), o);
      p2.run(qd, *s.cache, o2, l2);
      return std::pair{testing::to_double(o2), testing::to_double(l2)};
    };
    const auto replay = [&] {
      EXPECT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
      EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      return std::pair{testing::to_double(out), testing::to_double(lse)};
    };
    // New values for every sequence's newest tokens, written over the same slots.
    const int64_t row = 2 * 128;
    std::vector<int64_t> from(3);
    for (size_t b = 0; b < 3; ++b) {
      from[b] = s.lens[b] - c.ns[b];
      for (int64_t i = from[b] * row; i < s.lens[b] * row; ++i) s.k_raw[b][i] = std::normal_distribution<float>()(rng);
    }
    append_range(s, from, s.lens);
    synchronize(Device::cuda());
    auto [want, want_lse] = fresh();
    auto [got, got_lse] = replay();
    EXPECT_EQ(got, want) << to_string(dt) << ": replay after an append";
    EXPECT_EQ(got_lse, want_lse) << to_string(dt);
    EXPECT_LE(testing::rel_error(got, oracle(s, q.f32, 8, {}).out), dt == DType::f32 ? 1e-5 : 2e-3);

    // The next step: the same query rows, the sequences longer (two of them into a new page).
    for (size_t b = 0; b < 3; ++b) {
      const std::vector<float> more = testing::randn(row * 16, rng);
      s.k_raw[b].insert(s.k_raw[b].end(), more.begin(), more.end());
      s.v_raw[b].insert(s.v_raw[b].end(), more.begin(), more.end());
    }
    s.pages[1].push_back(s.spare[0]);
    s.pages[2].push_back(s.spare[1]);
    const std::vector<int64_t> before = s.lens;
    s.lens = {before[0] + 14, before[1] + 16, before[2] + 11};  // 64 (a full page), 49, 81
    append_range(s, before, s.lens);
    synchronize(Device::cuda());
    s.table = make_table(s.pages, s.lens, c.cfg.page_size);
    plan.update(s.batch(), stream);
    std::tie(want, want_lse) = fresh();
    std::tie(got, got_lse) = replay();
    EXPECT_EQ(got, want) << to_string(dt) << ": replay after update";
    EXPECT_EQ(got_lse, want_lse) << to_string(dt);
    EXPECT_LE(testing::rel_error(got, oracle(s, q.f32, 8, {}).out), dt == DType::f32 ? 1e-5 : 2e-3);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  }
}
#endif

}  // namespace
}  // namespace frugal::attention
