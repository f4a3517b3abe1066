// Exact rows of the KV cache (kv::CacheConfig::window, sinks): the codes stay byte-identical to a
// cache without them, the rows hold the f16 values of the sinks and the newest tokens across ring
// wraps and appends longer than the window, dequantize reads them, and decode attention over the
// codes and the rows matches a double-precision oracle over exactly what the cache holds, on the CPU
// and on every CUDA variant.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "frugal/attention.h"
#include "frugal/half.h"
#include "frugal/kv_cache.h"
#include "attention_fixtures.h"
#include "testing.h"

namespace frugal::attention {
namespace {

using namespace fixtures;
using testing::expect_error;
using testing::test_seed;
using testing::to_double;

template <typename... A>
std::string cat(const A&... a) {
  std::ostringstream os;
  (os << ... << a);
  return os.str();
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  const Tensor ha = a.to(Device::cpu()), hb = b.to(Device::cpu());
  return ha.nbytes() == hb.nbytes() && std::memcmp(ha.data(), hb.data(), ha.nbytes()) == 0;
}

// Appends the same random tokens (in pieces of `piece`, each sequence its own lengths) to a cache with
// exact rows and to one without, on `device`; returns both and the raw tokens [b][t][h][d].
struct Pair {
  kv::Cache with, plain;
  std::vector<std::vector<float>> raw;
};
Pair fill_pair(const kv::CacheConfig& c, const std::vector<int64_t>& lens, int64_t piece, Device device,
               std::mt19937_64& rng) {
  kv::CacheConfig p = c;
  p.window = p.sinks = 0;
  Pair r{kv::Cache(c, device), kv::Cache(p, device), {}};
  const int64_t row = static_cast<int64_t>(c.num_kv_heads) * c.head_dim;
  for (int b = 0; b < c.batch; ++b) {
    std::vector<float> x = testing::randn(static_cast<size_t>(lens[b] * row), rng);
    for (int64_t t = 0; t < lens[b]; t += piece) {
      const int64_t n = std::min(piece, lens[b] - t);
      Tensor xt = Tensor::empty({n, c.num_kv_heads, c.head_dim}, DType::f32);
      std::copy_n(x.data() + t * row, n * row, xt.data_as<float>());
      const Tensor xd = xt.to(device);
      r.with.append(b, xd.view());
      r.plain.append(b, xd.view());
    }
    r.raw.push_back(std::move(x));
  }
  return r;
}

// Checks what `pair.with` holds against the raw tokens and the plain cache: identical codes, the f16
// values of each token in an exact row, the plain cache's reconstruction elsewhere.
void expect_holds(const Pair& pair, const std::vector<int64_t>& lens) {
  const kv::CacheConfig& c = pair.with.config();
  EXPECT_TRUE(same_bytes(pair.with.packed(), pair.plain.packed()));
  EXPECT_TRUE(same_bytes(pair.with.scales(), pair.plain.scales()));
  const int64_t row = static_cast<int64_t>(c.num_kv_heads) * c.head_dim;
  for (int b = 0; b < c.batch; ++b) {
    const kv::Cache host = pair.with.to(Device::cpu()), plain = pair.plain.to(Device::cpu());
    const int64_t lo = host.first_held(b), w = lens[b];
    if (w == 0) continue;
    const Tensor got = host.dequantize(b, lo, w);
    const Tensor ref = plain.dequantize(b, lo, w);
    int exact = 0;
    for (int64_t t = lo; t < w; ++t) {
      const bool in_rows = t < c.sinks || t >= w - c.window;
      ASSERT_EQ(host.is_exact(b, t), in_rows) << "token " << t;
      exact += in_rows;
      for (int64_t i = 0; i < row; ++i) {
        const float g = got.data_as<float>()[(t - lo) * row + i];
        const float e = in_rows ? half_to_float(float_to_half(pair.raw[b][t * row + i]))
                                : ref.data_as<float>()[(t - lo) * row + i];
        ASSERT_EQ(g, e) << "sequence " << b << " token " << t << " element " << i;
      }
    }
    EXPECT_EQ(exact > 0, c.window > 0 || (c.sinks > 0 && lo < c.sinks)) << "sequence " << b;
    // A ring keeps its sinks after wrapping past them: they stay readable.
    if (c.sinks > 0 && lo > 0) {
      const int64_t n = std::min<int64_t>(c.sinks, w);
      const Tensor s = host.dequantize(b, 0, n);
      for (int64_t i = 0; i < n * row; ++i)
        ASSERT_EQ(s.data_as<float>()[i], half_to_float(float_to_half(pair.raw[b][i]))) << "sink element " << i;
    }
  }
}

kv::CacheConfig exact_config(int batch, int64_t capacity, bool sliding, int window, int sinks, int bits = 4) {
  kv::CacheConfig c;
  c.batch = batch;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  c.capacity = capacity;
  c.sliding = sliding;
  c.bits = bits;
  c.window = window;
  c.sinks = sinks;
  return c;
}

void check_storage_on(Device device) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  struct Case {
    int64_t capacity;
    bool sliding;
    int window, sinks;
    int64_t piece;  // > window: appends longer than the window
  };
  for (const Case& k : {Case{300, false, 32, 0, 7}, Case{300, false, 0, 4, 300}, Case{300, false, 32, 4, 50},
                        Case{100, true, 32, 4, 45}, Case{100, true, 100, 2, 100}, Case{64, true, 16, 8, 1}}) {
    const kv::CacheConfig c = exact_config(3, k.capacity, k.sliding, k.window, k.sinks);
    const std::vector<int64_t> lens = k.sliding ? std::vector<int64_t>{257, 3, 100} : std::vector<int64_t>{300, 3, 0};
    SCOPED_TRACE(cat("window ", k.window, " sinks ", k.sinks, k.sliding ? " ring " : " global ", k.capacity,
                              " pieces of ", k.piece));
    expect_holds(fill_pair(c, lens, k.piece, device, rng), lens);
  }
}

TEST(ExactRowsCpu, CodesStayByteIdenticalAndTheRowsHoldTheF16Values) { check_storage_on(Device::cpu()); }

TEST(ExactRowsCuda, CodesStayByteIdenticalAndTheRowsHoldTheF16Values) {
  FRUGAL_SKIP_WITHOUT_GPU();
  check_storage_on(Device::cuda());
}

// The rows a CUDA append writes are the CPU's, bit for bit (bf16 and f16 input, a batched append
// of more than kInlineStarts sequences, a NaN, an Inf and a value beyond f16's range).
TEST(ExactRowsCuda, TheGpuRowsAreTheCpuRows) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    for (int batch : {2, 70}) {
      kv::CacheConfig c = exact_config(batch, 80, true, 24, 3);
      kv::Cache cpu(c), gpu(c, Device::cuda());
      for (int step = 0; step < 4; ++step) {
        const int64_t t = step == 1 ? 50 : 9;
        std::vector<float> v = testing::randn(static_cast<size_t>(batch * t * 2 * 64), rng);
        if (step == 2) {
          v[5] = std::numeric_limits<float>::quiet_NaN();
          v[64 * 3 + 1] = std::numeric_limits<float>::infinity();
          v[64 * 6 + 2] = dt == DType::f16 ? 65504.0f : 70000.0f;
        }
        Tensor x = Tensor::empty({batch, t, 2, 64}, dt);
        for (size_t i = 0; i < v.size(); ++i) testing::store_as(dt, x.data(), static_cast<int64_t>(i), v[i]);
        cpu.append(x.view());
        gpu.append(x.to(Device::cuda()).view());
      }
      EXPECT_TRUE(same_bytes(cpu.exact(), gpu.exact())) << to_string(dt) << " batch " << batch;
      EXPECT_TRUE(same_bytes(cpu.packed(), gpu.packed()));
      // Step 2 wrote tokens 59..67: token 59's head 0 had a NaN, token 60's head 1 an Inf, token 62's
      // head 0 a value at or beyond f16's largest. Rows: 3 sinks, then token t at 3 + t mod 24, of
      // [batch, heads 2, 27 rows, 64] in sequence 0.
      const Tensor rows = cpu.exact();
      const uint16_t* h = rows.data_as<uint16_t>();
      auto at = [&](int head, int64_t t) { return half_to_float(h[(head * 27 + 3 + t % 24) * 64]); };
      EXPECT_TRUE(std::isnan(at(0, 59)));
      EXPECT_FALSE(std::isnan(at(1, 59)));
      EXPECT_TRUE(std::isnan(at(1, 60)));
      EXPECT_EQ(std::isnan(at(0, 62)), dt != DType::f16) << "beyond f16's range: NaN; at 65504: kept";
    }
  }
}

// Attention over what the cache holds, in double: the sinks [0, min(sinks, end)) and the held tokens
// [max(begin, sinks), end) through Cache::dequantize (the f16 rows where it reads them).
std::vector<double> oracle_held(const std::vector<float>& q, int q_heads, const kv::Cache& k, const kv::Cache& v,
                                const Range& r, double scale) {
  const kv::CacheConfig& c = k.config();
  const int64_t row = static_cast<int64_t>(c.num_kv_heads) * c.head_dim;
  std::vector<double> out(static_cast<size_t>(c.batch) * q_heads * c.head_dim);
  for (int b = 0; b < c.batch; ++b) {
    std::vector<float> kk, vv;
    auto take = [&](int64_t lo, int64_t hi) {
      if (lo >= hi) return;
      const Tensor kd = k.dequantize(b, lo, hi), vd = v.dequantize(b, lo, hi);
      kk.insert(kk.end(), kd.data_as<float>(), kd.data_as<float>() + (hi - lo) * row);
      vv.insert(vv.end(), vd.data_as<float>(), vd.data_as<float>() + (hi - lo) * row);
    };
    take(0, std::min<int64_t>(c.sinks, r.end[b]));
    take(std::max<int64_t>(r.begin[b], c.sinks), r.end[b]);
    naive_attention(q.data() + static_cast<size_t>(b) * q_heads * c.head_dim, kk.data(), vv.data(),
                    static_cast<int64_t>(kk.size()) / row, q_heads, c.num_kv_heads, c.head_dim, scale,
                    out.data() + static_cast<size_t>(b) * q_heads * c.head_dim);
  }
  return out;
}

Tensor run_on(const Filled& f, const Query& q, Device device, DType out_dtype, const DecodeOptions& opt,
              DecodeChoice* choice) {
  const kv::CacheConfig& c = f.k.config();
  Tensor out = Tensor::empty({c.batch, q.host.size(1), c.head_dim}, out_dtype, device);
  if (device.is_cpu()) {
    *choice = choose_decode(q.host, f.k, f.v, opt);
    decode_attention(q.host, f.k, f.v, out, opt);
    return out;
  }
  const kv::Cache kd = f.k.to(device), vd = f.v.to(device);
  const Tensor qd = q.host.to(device);
  *choice = choose_decode(qd, kd, vd, opt);
  decode_attention(qd, kd, vd, out, opt);
  return out.to(Device::cpu());
}

struct AttnCase {
  int64_t capacity;
  bool sliding;
  int window, sinks;
  std::vector<int64_t> lens;
  int64_t piece;
};

std::vector<AttnCase> attention_cases() {
  return {
      {400, false, 32, 4, {390, 33, 0, 5}, 1 << 30},  // prefill in one append; a sequence inside the window, an empty one
      {400, false, 32, 0, {400, 1, 64, 36}, 13},      // window only
      {400, false, 0, 4, {300, 2, 4, 9}, 61},         // sinks only
      {128, true, 32, 4, {500, 130, 128, 3}, 57},     // rings wrapped past their sinks
      {128, true, 128, 2, {300, 129, 1, 0}, 128},     // the window is the whole ring
  };
}

void check_attention(Device device, Math math, std::optional<DecodeVariant> variant, int num_splits, double tol,
                     int dim = 64) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed() ^ (static_cast<uint64_t>(math) << 8) ^ dim);
  for (const AttnCase& k : attention_cases()) {
    Shape s;
    s.batch = static_cast<int>(k.lens.size());
    s.q_heads = 6;
    s.kv_heads = 2;
    s.dim = dim;
    s.capacity = k.capacity;
    s.sliding = k.sliding;
    s.window = k.window;
    s.sinks = k.sinks;
    s.k_seed = 5;
    SCOPED_TRACE(cat("window ", k.window, " sinks ", k.sinks, k.sliding ? " ring " : " global ", k.capacity));
    Filled f = fill(s, k.lens, rng, k.piece);
    for (DType qt : {DType::f32, DType::bf16}) {
      const Query q = make_query(s.batch, s.q_heads, s.dim, qt, rng);
      DecodeOptions opt;
      opt.math = math;
      opt.variant = variant;
      opt.num_splits = num_splits;
      DecodeChoice choice;
      const std::vector<double> got = to_double(run_on(f, q, device, DType::f32, opt, &choice));
      EXPECT_TRUE(choice.exact_rows) << to_string(choice);
      if (variant) EXPECT_EQ(choice.variant, *variant) << to_string(choice);
      const double scale = 1 / std::sqrt(double(dim));
      const std::vector<double> ref = oracle_held(q.f32, s.q_heads, f.k, f.v, held_ranges(f.k), scale);
      EXPECT_LE(testing::rel_error(got, ref), tol) << to_string(choice);
      for (int b = 0; b < s.batch; ++b)
        if (k.lens[b] == 0)
          for (int i = 0; i < s.q_heads * s.dim; ++i) ASSERT_EQ(got[b * s.q_heads * s.dim + i], 0.0) << "empty sequence";
      // Explicit lengths: the window rows hold the newest tokens written, so a shorter length reads
      // more of its tokens from the codes.
      std::vector<int64_t> lens = k.lens;
      for (int64_t& l : lens)
        if (!k.sliding || l <= k.capacity) l = std::max<int64_t>(0, l - 3);  // (a wrapped ring holds no older ones)
      Range r;
      for (int b = 0; b < s.batch; ++b) {
        r.begin.push_back(k.sliding ? std::max<int64_t>(0, lens[b] - k.capacity) : 0);
        r.end.push_back(lens[b]);
      }
      opt.lengths = lens;
      const std::vector<double> got2 = to_double(run_on(f, q, device, DType::f32, opt, &choice));
      EXPECT_LE(testing::rel_error(got2, oracle_held(q.f32, s.q_heads, f.k, f.v, r, scale)), tol) << "explicit lengths";
    }
  }
}

TEST(ExactRowsCpu, DecodeAttentionMatchesTheOracleOverWhatTheCacheHolds) {
  check_attention(Device::cpu(), Math::automatic, std::nullopt, 0, 1e-5);
}

// The window's tokens are the f16 values themselves: a window as long as the sequence gives
// attention over the f16-rounded raw tokens, far closer to exact attention than the codes alone.
TEST(ExactRowsCpu, AWindowOverEveryTokenIsAttentionOverTheF16Values) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  Shape s;
  s.batch = 2;
  s.dim = 128;
  s.window = 200;
  s.capacity = 200;
  Filled f = fill(s, {200, 77}, rng);
  s.window = 0;
  std::mt19937_64 rng2 = rng;
  const Query q = make_query(s.batch, s.q_heads, s.dim, DType::f32, rng);
  const Tensor got = decode_attention(q.host, f.k, f.v);
  std::vector<float> k16, v16;
  std::vector<double> ref(static_cast<size_t>(s.batch) * s.q_heads * s.dim);
  for (int b = 0; b < s.batch; ++b) {
    std::vector<float> kr = f.k_raw[b], vr = f.v_raw[b];
    for (float& x : kr) x = half_to_float(float_to_half(x));
    for (float& x : vr) x = half_to_float(float_to_half(x));
    naive_attention(q.f32.data() + b * s.q_heads * s.dim, kr.data(), vr.data(), f.k.write_pos(b), s.q_heads,
                    s.kv_heads, s.dim, 1 / std::sqrt(128.0), ref.data() + b * s.q_heads * s.dim);
  }
  EXPECT_LE(testing::rel_error(to_double(got), ref), 1e-5);
}

TEST(ExactRowsCuda, DecodeAttentionF32MatchesTheOracle) {
  FRUGAL_SKIP_WITHOUT_GPU();
  for (int splits : {0, 1, 3}) check_attention(Device::cuda(), Math::f32, DecodeVariant::f32, splits, 1e-5);
}

TEST(ExactRowsCuda, DecodeAttentionF16VariantsMatchTheOracle) {
  FRUGAL_SKIP_WITHOUT_GPU();
  for (int dim : {64, 128, 256}) {
    for (int splits : {0, 1, 3}) {
      check_attention(Device::cuda(), Math::f16, DecodeVariant::f16_registers, splits, 1e-2, dim);
      if (dim <= 128) check_attention(Device::cuda(), Math::f16, DecodeVariant::f16_wide, splits, 1e-2, dim);
    }
  }
}

// More sequences than the kernel parameters carry: the exact ranges go through the workspace; a
// caller's workspace (decode_attention_workspace_bytes, zero-filled) serves call after call.
TEST(ExactRowsCuda, LargeBatchAndACallersWorkspace) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  Shape s;
  s.batch = 140;
  s.q_heads = 4;
  s.kv_heads = 1;
  s.dim = 64;
  s.capacity = 96;
  s.sliding = true;
  s.window = 16;
  s.sinks = 2;
  std::vector<int64_t> lens(s.batch);
  for (int b = 0; b < s.batch; ++b) lens[b] = (b * 37) % 200;
  Filled f = fill(s, lens, rng, 40);
  const kv::Cache kd = f.k.to(Device::cuda()), vd = f.v.to(Device::cuda());
  const Query q = make_query(s.batch, s.q_heads, s.dim, DType::f16, rng);
  const Tensor qd = q.host.to(Device::cuda());
  const Tensor ws = Tensor::zeros({static_cast<int64_t>(decode_attention_workspace_bytes(qd, kd))}, DType::u8, Device::cuda());
  const std::vector<double> ref = oracle_held(q.f32, s.q_heads, f.k, f.v, held_ranges(f.k), 1 / 8.0);
  for (int call = 0; call < 3; ++call) {
    DecodeOptions opt;
    opt.workspace = ws.view();
    opt.num_splits = call;  // automatic, one slice, two
    Tensor out = Tensor::empty({s.batch, s.q_heads, s.dim}, DType::f32, Device::cuda());
    decode_attention(qd, kd, vd, out, opt);
    EXPECT_LE(testing::rel_error(to_double(out.to(Device::cpu())), ref), 1e-2) << "call " << call;
  }
}

TEST(ExactRowsErrors, BadConfigsAndMismatchedCachesAreClearErrors) {
  kv::CacheConfig c = exact_config(1, 64, false, 65, 0);
  expect_error([&] { kv::Cache x(c); }, ErrorCode::invalid_argument, {"kv::Cache", "window", "65"});
  c.window = -1;
  expect_error([&] { kv::Cache x(c); }, ErrorCode::invalid_argument, {"window", "-1"});
  c.window = 0;
  c.sinks = 100;
  expect_error([&] { kv::Cache x(c); }, ErrorCode::invalid_argument, {"sinks", "100"});
  kv::Cache k(exact_config(1, 64, false, 16, 0)), v(exact_config(1, 64, false, 8, 0));
  Tensor x = Tensor::zeros({3, 2, 64}, DType::f32);
  k.append(x.view());
  v.append(x.view());
  Tensor q = Tensor::zeros({1, 2, 64}, DType::f32);
  expect_error([&] { decode_attention(q.view(), k, v); }, ErrorCode::invalid_argument,
               {"attention::decode_attention", "window 16", "window 8"});
  // A ring's tokens below its held range, other than the sinks, are gone.
  kv::Cache r(exact_config(1, 16, true, 4, 2));
  Tensor y = Tensor::zeros({16, 2, 64}, DType::f32);
  r.append(y.view());
  r.append(y.view());
  EXPECT_NO_THROW(r.dequantize(0, 0, 2));
  expect_error([&] { r.dequantize(0, 0, 3); }, ErrorCode::out_of_range, {"kv::dequantize", "sinks"});
  // Storage handed to wrap must hold the exact rows the config asks for.
  kv::CacheStorage st{r.packed(), r.scales(), {}, r.centroids(), r.boundaries(), {}};
  const std::vector<int64_t> pos = {32};
  expect_error([&] { kv::Cache::wrap(exact_config(1, 16, true, 4, 2), st, pos); }, ErrorCode::invalid_argument,
               {"kv::Cache::wrap", "exact"});
  st.exact = r.exact();
  EXPECT_NO_THROW(kv::Cache::wrap(exact_config(1, 16, true, 4, 2), st, pos));
  expect_error([&] { kv::Cache::wrap(exact_config(1, 16, true, 0, 0), st, pos); }, ErrorCode::invalid_argument,
               {"exact"});
}

}  // namespace
}  // namespace frugal::attention
