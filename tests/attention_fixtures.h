// Test fixtures of decode attention, shared by tests/test_attention.cpp and tests/parity/attention.cpp:
// caches filled with random tokens, queries in each dtype, and the double-precision oracle over the
// dequantized cache (the exact function the op computes).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "frugal/attention.h"
#include "frugal/half.h"
#include "frugal/kv_cache.h"
#include "testing.h"

namespace frugal::attention::fixtures {

// ---- building caches ------------------------------------------------------------------------

struct Shape {
  int batch = 1, q_heads = 8, kv_heads = 2, dim = 128;
  int k_bits = 4, v_bits = 4;
  int64_t capacity = 0;  // 0: the longest sequence
  bool sliding = false;
  std::optional<uint64_t> k_seed, v_seed;
  int window = 0, sinks = 0;  // exact rows (kv::CacheConfig)
  kv::ScaleFormat k_scales = kv::ScaleFormat::f32, v_scales = kv::ScaleFormat::f32;
};

// A K and a V cache on the CPU filled with `lens[b]` random tokens per sequence (appended in pieces
// of at most `piece` tokens, so a ring wraps across calls), and the raw f32 tokens [b][t][h][d].
struct Filled {
  kv::Cache k, v;
  std::vector<std::vector<float>> k_raw, v_raw;
};

inline kv::CacheConfig config_of(const Shape& s, int bits, std::optional<uint64_t> seed, int64_t capacity,
                                 kv::ScaleFormat scales) {
  kv::CacheConfig c;
  c.batch = s.batch;
  c.num_kv_heads = s.kv_heads;
  c.head_dim = s.dim;
  c.capacity = capacity;
  c.sliding = s.sliding;
  c.bits = bits;
  c.sign_seed = seed;
  c.window = s.window;
  c.sinks = s.sinks;
  c.scale_format = scales;
  return c;
}

inline Filled fill(const Shape& s, const std::vector<int64_t>& lens, std::mt19937_64& rng, int64_t piece = 1 << 30,
                   float k_std = 1.0f, const std::vector<float>* channel_gain = nullptr) {
  int64_t longest = 1;
  for (int64_t l : lens) longest = std::max(longest, l);
  const int64_t cap = s.capacity > 0 ? s.capacity : longest;
  Filled f{kv::Cache(config_of(s, s.k_bits, s.k_seed, cap, s.k_scales)),
           kv::Cache(config_of(s, s.v_bits, s.v_seed, cap, s.v_scales)), {}, {}};
  const int64_t row = static_cast<int64_t>(s.kv_heads) * s.dim;
  for (int b = 0; b < s.batch; ++b) {
    std::vector<float> kr = testing::randn(static_cast<size_t>(lens[b] * row), rng, k_std);
    std::vector<float> vr = testing::randn(static_cast<size_t>(lens[b] * row), rng);
    if (channel_gain)
      for (int64_t i = 0; i < lens[b] * row; ++i) kr[i] *= (*channel_gain)[i % s.dim];
    const int64_t step = std::min(piece, s.sliding ? cap : lens[b]);
    for (int64_t t = 0; t < lens[b]; t += step) {
      const int64_t n = std::min(step, lens[b] - t);
      const TensorView kx(kr.data() + t * row, DType::f32, {n, s.kv_heads, s.dim});
      const TensorView vx(vr.data() + t * row, DType::f32, {n, s.kv_heads, s.dim});
      f.k.append(b, kx);
      f.v.append(b, vx);
    }
    f.k_raw.push_back(std::move(kr));
    f.v_raw.push_back(std::move(vr));
  }
  return f;
}

// Queries as stored in `dtype`, and the f32 values they hold (what the oracle must see).
struct Query {
  Tensor host;             // [B, Hq, D] in the dtype
  std::vector<float> f32;  // the same values
};

inline Query make_query(int batch, int q_heads, int dim, DType dtype, std::mt19937_64& rng, float stddev = 1.0f) {
  std::vector<float> v = testing::randn(static_cast<size_t>(batch) * q_heads * dim, rng, stddev);
  Query q{Tensor::empty({batch, q_heads, dim}, dtype), {}};
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == DType::f16) {
      q.host.data_as<uint16_t>()[i] = float_to_half(v[i]);
      v[i] = half_to_float(q.host.data_as<uint16_t>()[i]);
    } else if (dtype == DType::bf16) {
      q.host.data_as<uint16_t>()[i] = float_to_bf16(v[i]);
      v[i] = bf16_to_float(q.host.data_as<uint16_t>()[i]);
    } else {
      q.host.data_as<float>()[i] = v[i];
    }
  }
  q.f32 = std::move(v);
  return q;
}

// ---- oracles --------------------------------------------------------------------------------

// Naive softmax attention in double for one sequence: keys/values [n][Hkv][D] (f32), q [Hq][D].
inline void naive_attention(const float* q, const float* keys, const float* values, int64_t n, int q_heads,
                            int kv_heads, int dim, double scale, double* out) {
  const int group = q_heads / kv_heads;
  for (int h = 0; h < q_heads; ++h) {
    const int hk = h / group;
    std::vector<double> s(n);
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t t = 0; t < n; ++t) {
      double dot = 0;
      for (int i = 0; i < dim; ++i) dot += double(q[h * dim + i]) * keys[(t * kv_heads + hk) * dim + i];
      s[t] = dot * scale;
      mx = std::max(mx, s[t]);
    }
    double den = 0;
    for (int64_t t = 0; t < n; ++t) den += (s[t] = std::exp(s[t] - mx));
    for (int i = 0; i < dim; ++i) {
      double acc = 0;
      for (int64_t t = 0; t < n; ++t) acc += s[t] * values[(t * kv_heads + hk) * dim + i];
      out[h * dim + i] = n ? acc / den : 0.0;
    }
  }
}

struct Range {
  std::vector<int64_t> begin, end;
};

inline Range held_ranges(const kv::Cache& k) {
  Range r;
  for (int b = 0; b < k.config().batch; ++b) {
    r.begin.push_back(k.first_held(b));
    r.end.push_back(k.write_pos(b));
  }
  return r;
}

// The exact function: attention over Cache::dequantize of the CPU caches.
inline std::vector<double> oracle_dequantized(const std::vector<float>& q, int q_heads, const kv::Cache& k,
                                              const kv::Cache& v, const Range& r, double scale) {
  const kv::CacheConfig& c = k.config();
  std::vector<double> out(static_cast<size_t>(c.batch) * q_heads * c.head_dim);
  for (int b = 0; b < c.batch; ++b) {
    const int64_t n = r.end[b] - r.begin[b];
    Tensor kd = k.dequantize(b, r.begin[b], r.end[b]);
    Tensor vd = v.dequantize(b, r.begin[b], r.end[b]);
    naive_attention(q.data() + static_cast<size_t>(b) * q_heads * c.head_dim, kd.data_as<float>(), vd.data_as<float>(),
                    n, q_heads, c.num_kv_heads, c.head_dim, scale,
                    out.data() + static_cast<size_t>(b) * q_heads * c.head_dim);
  }
  return out;
}

}  // namespace frugal::attention::fixtures
