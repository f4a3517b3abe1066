// Hostile calls of the library decoded from bytes: the one definition the libFuzzer harnesses
// (fuzz/fuzz_*.cpp, on the CPU) and the corpus replay suite (tests/test_hostile.cpp, on the CPU and
// on CUDA) share. A case is a script of calls with arbitrary configs, shapes, strides, dtypes and
// values; each call must either return or throw frugal::Error, and the invariants below must hold.
// What each call returned (its error or its result) is recorded, so two backends can be compared.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "frugal/attention.h"
#include "frugal/frugal.h"
#include "frugal/half.h"
#include "frugal/kv_cache.h"
#include "frugal/sparse_conv.h"

namespace frugal::fuzz {

// A broken invariant: not a frugal::Error, so a harness aborts on it and a test fails.
struct Broken : std::logic_error {
  using std::logic_error::logic_error;
};

inline void require(bool ok, const std::string& what) {
  if (!ok) throw Broken(what);
}

// Reads the input front to back; past its end every read gives 0 (a case is any byte string).
class Bytes {
 public:
  explicit Bytes(std::span<const uint8_t> b) : b_(b) {}
  uint8_t u8() { return pos_ < b_.size() ? b_[pos_++] : 0; }
  uint16_t u16() { return static_cast<uint16_t>(u8() | u8() << 8); }
  uint32_t u32() { return u16() | static_cast<uint32_t>(u16()) << 16; }
  uint64_t u64() { return u32() | static_cast<uint64_t>(u32()) << 32; }
  int pick(int n) { return u8() % n; }
  bool chance(int one_in) { return pick(one_in) == 0; }
  // A value from `usual` most of the time, else an arbitrary 64-bit one.
  int64_t usual_or_wild(std::initializer_list<int64_t> usual) {
    const int i = pick(static_cast<int>(usual.size()) + 1);
    return i < static_cast<int>(usual.size()) ? usual.begin()[i] : static_cast<int64_t>(u64());
  }
  // A small value most of the time, else an arbitrary one.
  int64_t small_or_wild(int64_t lo, int64_t hi) {
    return chance(8) ? static_cast<int64_t>(u64()) : lo + static_cast<int64_t>(u16() % (hi - lo + 1));
  }
  // Tame: in [-4, 4), 2^-6 apart. Wild: any f32 bit pattern (NaN, ±Inf, subnormals, 3e38).
  float value(bool tame) {
    if (tame) return static_cast<float>(static_cast<int>(u8() & 0x1ff) - 256) / 64.0f;
    return std::bit_cast<float>(u32());
  }
  bool done() const { return pos_ >= b_.size(); }

 private:
  std::span<const uint8_t> b_;
  size_t pos_ = 0;
};

// ---- what a call returned ----------------------------------------------------------------------

struct Outcome {
  std::string call;  // "append #3", ...
  bool ok = true;
  ErrorCode code = ErrorCode::internal;
  std::string message;
  std::vector<double> values;  // the result on the host
  double tolerance = 0;        // between backends, relative to the result's norm
};

class Record {
 public:
  std::vector<Outcome> outcomes;
  template <typename F>
  bool call(const std::string& name, F&& f) {
    Outcome o;
    o.call = name + " #" + std::to_string(outcomes.size());
    try {
      f(o);
    } catch (const Error& e) {
      o.ok = false;
      o.code = e.code();
      o.message = e.what();
      require(!o.message.empty() && o.message.front() == '[', o.call + ": an error without an [op] prefix");
    }
    outcomes.push_back(std::move(o));
    return outcomes.back().ok;
  }
};

inline double element(const Tensor& host, int64_t i) {
  switch (host.dtype()) {
    case DType::f32:
      return host.data_as<const float>()[i];
    case DType::f16:
      return half_to_float(host.data_as<const uint16_t>()[i]);
    case DType::bf16:
      return bf16_to_float(host.data_as<const uint16_t>()[i]);
    case DType::u8:
      return host.data_as<const uint8_t>()[i];
    case DType::i32:
      return host.data_as<const int32_t>()[i];
    case DType::i64:
      return static_cast<double>(host.data_as<const int64_t>()[i]);
  }
  return 0;
}

inline std::vector<double> to_doubles(const TensorView& v) {
  Tensor host = Tensor::empty(v.sizes(), v.dtype);
  copy(v, host.view());
  std::vector<double> out(host.numel());
  for (int64_t i = 0; i < host.numel(); ++i) out[i] = element(host, i);
  return out;
}

// Element i from the input: a value of the float dtypes, raw bytes of the others.
inline void fill(Tensor& host, int64_t i, Bytes& in, bool tame) {
  switch (host.dtype()) {
    case DType::f32:
      host.data_as<float>()[i] = in.value(tame);
      break;
    case DType::f16:
      host.data_as<uint16_t>()[i] = float_to_half(in.value(tame));
      break;
    case DType::bf16:
      host.data_as<uint16_t>()[i] = float_to_bf16(in.value(tame));
      break;
    case DType::u8:
      host.data_as<uint8_t>()[i] = in.u8();
      break;
    case DType::i32:
      host.data_as<uint32_t>()[i] = in.u32();
      break;
    case DType::i64:
      host.data_as<uint64_t>()[i] = in.u64();
      break;
  }
}

// A tensor on `dev` whose storage is `storage` rows (of the last dimensions) and a view of it that
// may skip rows: `padding` extra elements after each slice along dimension 0 of the view (a strided
// view when padding > 0). Values fill the storage, padding included.
struct Placed {
  Tensor storage;
  TensorView view;
};

inline Placed place(Bytes& in, std::vector<int64_t> shape, DType dt, Device dev, bool tame, int64_t padding = 0) {
  int64_t inner = 1;
  for (size_t i = 1; i < shape.size(); ++i) inner *= shape[i];
  const int64_t rows = shape.empty() ? 1 : shape[0];
  Tensor host = Tensor::empty({rows * (inner + padding)}, dt);
  for (int64_t i = 0; i < host.numel(); ++i) fill(host, i, in, tame);
  Placed p;
  p.storage = dev.is_cpu() ? host : host.to(dev);
  if (padding == 0 || shape.empty()) {
    p.view = TensorView(p.storage.data(), dt, std::span<const int64_t>(shape), dev);
  } else {
    TensorView dense(p.storage.data(), dt, std::span<const int64_t>(shape), dev);
    std::vector<int64_t> strides(dense.strides.begin(), dense.strides.begin() + dense.rank);
    strides[0] = inner + padding;
    p.view = TensorView(p.storage.data(), dt, std::span<const int64_t>(shape), std::span<const int64_t>(strides), dev);
  }
  return p;
}

inline DType any_dtype(Bytes& in) {
  constexpr DType all[] = {DType::f32, DType::f16, DType::bf16, DType::f32, DType::f16, DType::i32, DType::u8};
  return all[in.pick(7)];
}

inline bool all_finite(const std::vector<double>& v) {
  return std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); });
}

// ---- the KV cache and decode attention -------------------------------------------------------

// Host bytes a cache may take in a case: bigger configs are only validated (never allocated), so a
// case cannot exhaust memory. validate() itself must survive every config.
constexpr int64_t kMaxCaseCacheBytes = int64_t{1} << 20;

inline std::optional<kv::CacheConfig> kv_config(Bytes& in, Record& rec) {
  kv::CacheConfig c;
  c.batch = static_cast<int>(in.usual_or_wild({1, 1, 2, 3, 0, -1}));
  c.num_kv_heads = static_cast<int>(in.usual_or_wild({1, 2, 4, 0}));
  c.head_dim = static_cast<int>(in.usual_or_wild({4, 8, 16, 32, 64, 128, 96, 0}));
  c.capacity = in.usual_or_wild({1, 3, 8, 16, 33, 0, -5, int64_t{1} << 40, std::numeric_limits<int64_t>::max()});
  c.sliding = in.chance(2);
  c.bits = static_cast<int>(in.usual_or_wild({2, 3, 4, 8, 4, 1, 5}));
  c.scale_rule = static_cast<kv::ScaleRule>(in.pick(3));  // 2 is not a rule
  if (in.chance(2)) c.sign_seed = in.u64();
  if (!rec.call("kv::validate", [&](Outcome&) { kv::validate(c, "fuzz"); })) return std::nullopt;
  const double bytes =
      static_cast<double>(c.batch) * c.num_kv_heads * static_cast<double>(c.capacity) * (c.head_dim * c.bits / 8 + 4);
  if (bytes > kMaxCaseCacheBytes) return std::nullopt;
  return c;
}

// K and V caches of one config, appended in lockstep (unless a case breaks it on purpose), with
// `tame` values only (so every result must be finite) or any values.
inline void run_kv_case(std::span<const uint8_t> bytes, Device dev, Record& rec) {
  Bytes in(bytes);
  const bool tame = in.chance(2);
  const std::optional<kv::CacheConfig> cfg = kv_config(in, rec);
  if (!cfg) return;
  std::optional<kv::Cache> k, v;
  if (!rec.call("kv::Cache", [&](Outcome&) {
        k.emplace(*cfg, dev);
        v.emplace(*cfg, dev);
      }))
    return;
  const int B = cfg->batch, H = cfg->num_kv_heads, D = cfg->head_dim;
  for (int step = 0; step < 12 && !in.done(); ++step) {
    const std::vector<int64_t> before = k->write_positions();
    const int op = in.pick(7);
    if (op <= 1) {  // append, batched ([T, H, D] or [B, T, H, D]) or into one sequence
      const int64_t t = in.usual_or_wild({1, 2, 5, 0, 17});
      const int64_t h = in.chance(6) ? H + 1 : H, d = in.chance(6) ? D * 2 : D;
      const bool one = op == 1;
      const int seq = one ? static_cast<int>(in.usual_or_wild({0, 1, 2, -1, 7})) : 0;
      const bool batched = !one && (B > 1 || in.chance(2));
      if (t < 0 || t > 64) {
        // No buffer that large: only a T past the capacity (refused before any read) is called.
        if (t >= 0 && t <= cfg->capacity) continue;
        rec.call("append (T out of range)", [&](Outcome&) {
          const std::vector<int64_t> shape = batched ? std::vector<int64_t>{B, t, h, d} : std::vector<int64_t>{t, h, d};
          const TensorView x(reinterpret_cast<void*>(64), DType::f32, std::span<const int64_t>(shape), dev);
          one ? k->append(seq, x) : k->append(x);
        });
      } else {
        std::vector<int64_t> shape = batched ? std::vector<int64_t>{B, t, h, d} : std::vector<int64_t>{t, h, d};
        const DType dt = any_dtype(in);
        const int64_t pad = in.chance(4) ? in.pick(3) : 0;
        const Placed xk = place(in, shape, dt, dev, tame, pad), xv = place(in, shape, dt, dev, tame, pad);
        const bool lockstep = !in.chance(10);
        const bool done = rec.call("append", [&](Outcome&) {
          one ? k->append(seq, xk.view) : k->append(xk.view);
          if (lockstep) one ? v->append(seq, xv.view) : v->append(xv.view);
        });
        if (!done) require(k->write_positions() == before, "a refused append moved a write position");
        if (done && !lockstep) return;  // K and V differ now: the rest of the case would only be refused
      }
    } else if (op == 2) {  // dequantize into a buffer of the right size (the range is arbitrary)
      const int seq = static_cast<int>(in.usual_or_wild({0, 0, 1, -1, 9}));
      const int64_t w = seq >= 0 && seq < B ? k->write_pos(seq) : 0;
      const int64_t begin = in.chance(4) ? in.small_or_wild(-2, 40) : std::max<int64_t>(0, w - 1 - in.pick(3));
      const int64_t end = in.chance(4) ? in.small_or_wild(-2, 40) : w - in.pick(2);
      const DType dt = any_dtype(in);
      const __int128 rows = static_cast<__int128>(end) - begin;
      if (rows < 0 || rows > 64) {
        rec.call("dequantize (range)", [&](Outcome&) {
          const TensorView out(reinterpret_cast<void*>(64), dt, {0, H, D}, dev);
          k->dequantize(seq, begin, end, out);
        });
        continue;
      }
      rec.call("dequantize", [&](Outcome& o) {
        const Tensor out = Tensor::empty({static_cast<int64_t>(rows), H, D}, dt, dev);
        k->dequantize(seq, begin, end, out.view());
        o.values = to_doubles(out.view());
        o.tolerance = dt == DType::f32 ? 1e-5 : 1e-2;
        if (tame) require(all_finite(o.values), "dequantize of finite input gave a non-finite value");
      });
    } else if (op == 3) {  // decode attention
      const int64_t hq = in.chance(8) ? H * 3 + 1 : H * (1 + in.pick(4));
      const int64_t bq = in.chance(8) ? B + 1 : B;
      const DType dt = any_dtype(in);
      const Placed q = place(in, {bq, hq, in.chance(8) ? D / 2 : D}, dt, dev, tame, in.chance(4) ? 3 : 0);
      attention::DecodeOptions opt;
      std::vector<int64_t> lengths;
      if (in.chance(3)) {
        const int n = in.chance(6) ? B + 1 : B;
        for (int b = 0; b < n; ++b)
          lengths.push_back(in.chance(5) ? in.small_or_wild(-3, 40) : (b < B ? k->write_pos(b) : 0) - in.pick(3));
        opt.lengths = lengths;
      }
      if (in.chance(3)) opt.softmax_scale = in.chance(2) ? in.value(false) : 0.125f;
      opt.math = static_cast<attention::Math>(in.pick(4));  // 3 is not a math mode
      opt.num_splits = static_cast<int>(in.usual_or_wild({0, 0, 1, 2, 7, -1}));
      const bool tame_scale = !opt.softmax_scale || std::fabs(*opt.softmax_scale) <= 1.0f;
      const DType out_dt = in.chance(3) ? DType::f32 : (in.chance(8) ? DType::i32 : dt);
      rec.call("decode_attention", [&](Outcome& o) {
        const Tensor out = Tensor::empty({bq, hq, D}, out_dt, dev);
        attention::decode_attention(q.view, *k, *v, out.view(), opt);
        o.values = to_doubles(out.view());
        o.tolerance = dt == DType::f32 && opt.math != attention::Math::f16 ? 1e-4 : 3e-2;
        if (tame && tame_scale)
          require(all_finite(o.values), "decode attention over finite input gave a non-finite value");
      });
    } else if (op == 4) {  // the transform alone
      const int64_t rows = in.pick(5), d = in.usual_or_wild({4, 16, 64, 96, 8192});
      if (d < 0 || d > 8192) continue;
      const Placed x = place(in, {rows, d}, in.chance(6) ? DType::f16 : DType::f32, dev, tame);
      rec.call("hadamard_transform", [&](Outcome& o) {
        const Tensor out = Tensor::empty({rows, d}, DType::f32, dev);
        kv::hadamard_transform(x.view, out.view());
        o.values = to_doubles(out.view());
        o.tolerance = 1e-5;
      });
    } else if (op == 5) {
      const int seq = static_cast<int>(in.usual_or_wild({0, 1, -1, 4}));
      rec.call("count_nonfinite_scales", [&](Outcome& o) {
        const int64_t n = kv::count_nonfinite_scales(*k, seq);
        o.values = {static_cast<double>(n)};
        if (tame) require(n == 0, "finite input was flagged non-finite");
      });
    } else {
      k->reset();
      v->reset();
    }
  }
}

// ---- the kernel map and the conv -------------------------------------------------------------

// Coordinates: unique ones from a bit mask over a small box (so maps get built), or arbitrary rows
// (duplicates, values past the packable range, batches past kMaxBatch).
inline std::vector<int32_t> coordinates(Bytes& in, int64_t& n) {
  std::vector<int32_t> c;
  if (in.chance(3)) {
    n = in.pick(40);
    for (int64_t i = 0; i < n; ++i) {
      const bool wild = in.chance(6);
      c.push_back(wild ? static_cast<int32_t>(in.u32()) : in.pick(2));
      for (int a = 0; a < 3; ++a) c.push_back(wild && in.chance(2) ? static_cast<int32_t>(in.u32()) : in.pick(6) - 3);
    }
    return c;
  }
  const int32_t origin = in.chance(4) ? spconv::kCoordMax - 3 : (in.chance(3) ? spconv::kCoordMin : 0);
  for (int b = 0; b < 2; ++b)
    for (int64_t cell = 0; cell < 64; cell += 8) {
      const uint8_t mask = in.u8();
      for (int bit = 0; bit < 8; ++bit)
        if (mask >> bit & 1) {
          const int64_t i = cell + bit;
          c.insert(c.end(), {b, origin + static_cast<int32_t>(i / 16), static_cast<int32_t>(i / 4 % 4),
                             static_cast<int32_t>(i % 4)});
        }
    }
  n = static_cast<int64_t>(c.size() / 4);
  return c;
}

// nbr[k, n] by brute force: the row whose coordinates are coords[n] + offset_k (same batch), else N.
inline std::vector<int32_t> brute_force_map(const std::vector<int32_t>& c, int64_t n, int ks, int dil) {
  const int kv = spconv::kernel_volume(ks);
  std::vector<int32_t> nbr(static_cast<size_t>(kv) * n, static_cast<int32_t>(n));
  for (int k = 0; k < kv; ++k) {
    const auto off = spconv::kernel_offset(k, ks, dil);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j)
        if (c[j * 4] == c[i * 4] && int64_t{c[j * 4 + 1]} == int64_t{c[i * 4 + 1]} + off[0] &&
            int64_t{c[j * 4 + 2]} == int64_t{c[i * 4 + 2]} + off[1] &&
            int64_t{c[j * 4 + 3]} == int64_t{c[i * 4 + 3]} + off[2])
          nbr[k * n + i] = static_cast<int32_t>(j);
  }
  return nbr;
}

inline void run_spconv_case(std::span<const uint8_t> bytes, Device dev, Record& rec) {
  Bytes in(bytes);
  const bool tame = !in.chance(4);
  int64_t n = 0;
  const std::vector<int32_t> flat = coordinates(in, n);
  const int ks = static_cast<int>(in.usual_or_wild({3, 3, 1, 5, 7, 4, 9, 0}));
  const int dil = static_cast<int>(in.usual_or_wild({1, 1, 2, 3, 0, 65536, 65537}));
  Tensor coords_h = Tensor::empty({n, 4}, DType::i32);
  if (n > 0) std::memcpy(coords_h.data(), flat.data(), flat.size() * 4);
  const Tensor coords = dev.is_cpu() ? coords_h : coords_h.to(dev);

  Tensor nbr;
  if (!rec.call("build_kernel_map", [&](Outcome& o) {
        nbr = spconv::build_kernel_map(coords, ks, dil);
        o.values = to_doubles(nbr.view());
      }))
    return;
  // The map is exactly the brute-force one (so it is in [0, N], symmetric, with itself at the centre).
  const int kv = spconv::kernel_volume(ks);
  const std::vector<double>& got = rec.outcomes.back().values;
  const std::vector<int32_t> want = brute_force_map(flat, n, ks, dil);
  require(got.size() == want.size(), "the map has the wrong size");
  for (size_t i = 0; i < want.size(); ++i) require(got[i] == want[i], "the map differs from the brute-force map");
  // The same map through a KernelMap in its run order (Morton where the rows are not sorted), read by row.
  if (!rec.call("KernelMap::build", [&](Outcome& o) {
        o.values = to_doubles(spconv::KernelMap::build(coords, ks, dil).nbr().view());
      }))
    return;
  const std::vector<double>& by_row = rec.outcomes.back().values;
  require(by_row.size() == want.size(), "a KernelMap's map has the wrong size");
  for (size_t i = 0; i < want.size(); ++i)
    require(by_row[i] == want[i], "a KernelMap's map by row differs from the brute-force map");

  for (int step = 0; step < 4 && !in.done(); ++step) {
    const int64_t ci = 1 + in.pick(8), co = 1 + in.pick(8);
    const DType dt = any_dtype(in);
    const int64_t rows = in.chance(4) ? n + 1 : (in.chance(10) ? n + 2 : n);
    const Placed feats = place(in, {rows, in.chance(10) ? ci + 1 : ci}, dt, dev, tame);
    const Placed weight = place(in, {in.chance(10) ? kv + 1 : kv, ci, co}, in.chance(10) ? DType::f32 : dt, dev, tame);
    const bool with_bias = in.chance(2);
    const Placed bias = place(in, {in.chance(10) ? co + 1 : co}, dt, dev, tame);
    // The map: the built one, or one with arbitrary entries (checked: refused; unchecked: absent).
    std::vector<int32_t> map(want);
    if (in.chance(3))
      for (int i = 0, m = in.pick(4); i < m && !map.empty(); ++i)
        map[in.u16() % map.size()] = static_cast<int32_t>(in.usual_or_wild({-1, n + 1, n, 0}));
    const bool out_of_range = std::any_of(map.begin(), map.end(), [&](int32_t m) { return m < 0 || m > n; });
    const auto check = in.chance(2) ? spconv::MapCheck::checked : spconv::MapCheck::unchecked;
    Tensor map_h = Tensor::empty({kv, n}, DType::i32);
    if (!map.empty()) std::memcpy(map_h.data(), map.data(), map.size() * 4);
    const Tensor map_d = dev.is_cpu() ? map_h : map_h.to(dev);
    const bool ok = rec.call("submanifold_conv", [&](Outcome& o) {
      const Tensor out =
          spconv::submanifold_conv(feats.view, map_d, weight.view, with_bias ? &bias.view : nullptr, nullptr, check);
      o.values = to_doubles(out.view());
      o.tolerance = dt == DType::f32 ? 1e-5 : 2e-2;
    });
    if (ok && check == spconv::MapCheck::checked)
      require(!out_of_range, "a checked conv took an out-of-range map entry");
    if (!ok || !tame) continue;
    // The f32-accumulated sum against a double one (entries outside [0, N] count as absent).
    const std::vector<double> f = to_doubles(feats.view), w = to_doubles(weight.view), bv = to_doubles(bias.view);
    const std::vector<double>& out = rec.outcomes.back().values;
    double num = 0, den = 0;
    for (int64_t r = 0; r < n; ++r)
      for (int64_t o = 0; o < co; ++o) {
        double ref = with_bias ? bv[o] : 0.0;
        for (int k = 0; k < kv; ++k) {
          const int32_t m = map[k * n + r];
          if (m < 0 || m >= n) continue;
          for (int64_t q = 0; q < ci; ++q) ref += f[m * ci + q] * w[(k * ci + q) * co + o];
        }
        num += (out[r * co + o] - ref) * (out[r * co + o] - ref);
        den += ref * ref;
      }
    require(std::sqrt(num) <= (dt == DType::f32 ? 1e-5 : 2e-2) * std::sqrt(den) + 1e-6,
            "the conv differs from the double reference");
  }
}

// One libFuzzer input: the case on the CPU; a broken invariant aborts (a finding).
using Case = void (*)(std::span<const uint8_t>, Device, Record&);
inline int fuzz_one(Case run, const uint8_t* data, size_t size) {
  Record rec;
  try {
    run({data, size}, Device::cpu(), rec);
  } catch (const Broken& e) {
    std::fprintf(stderr, "broken invariant after %zu calls: %s\n", rec.outcomes.size(), e.what());
    std::abort();
  }
  return 0;
}

}  // namespace frugal::fuzz
