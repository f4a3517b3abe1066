// The KV cache's append (quantize) and dequantize paths: the CPU against a plain oracle written
// here in double precision, the CUDA kernels against the CPU bit for bit, and the promises of
// the format (error levels, ring wrap, flags, refusals).
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <optional>
#include <string>

#include "cuda/fastdiv.h"
#include "frugal/half.h"
#include "frugal/kv_cache.h"
#include "testing.h"

namespace frugal::kv {
namespace {

using testing::expect_error;
using testing::round_to;
using testing::store_as;
using testing::test_seed;

// ---- the oracle ---------------------------------------------------------------------------
double hadamard_sign(int i, int j) { return (std::popcount(static_cast<unsigned>(i & j)) & 1) ? -1.0 : 1.0; }

struct OracleVector {
  std::vector<unsigned> codes;
  std::vector<double> u;  // the normalized coordinates the codes quantize
  double scale = 0;
  bool flagged = false;  // non-finite input
};

// One head vector quantized the plain way: explicit Hadamard matrix and sums in double, codes by
// a linear scan over the boundaries, the scale rule as the header states it.
OracleVector oracle_quantize(const float* x, int d, int bits, const std::vector<float>* signs, ScaleRule rule) {
  const Codebook& cb = lloyd_max_codebook(bits);
  OracleVector o;
  o.codes.assign(d, 0);
  o.u.assign(d, 0.0);
  std::vector<double> xs(d), y(d);
  for (int j = 0; j < d; ++j) {
    xs[j] = static_cast<double>(x[j]) * (signs ? (*signs)[j] : 1.0f);
    o.flagged = o.flagged || !std::isfinite(xs[j]);
  }
  if (o.flagged) {
    o.scale = NAN;
    return o;
  }
  const double sqrt_d = std::sqrt(static_cast<double>(d));
  double ss = 0;
  for (int i = 0; i < d; ++i) {
    double acc = 0;
    for (int j = 0; j < d; ++j) acc += hadamard_sign(i, j) * xs[j];
    y[i] = acc / sqrt_d;
    ss += y[i] * y[i];
  }
  const double n = std::sqrt(ss);
  double yc = 0, cc = 0;
  for (int i = 0; i < d; ++i) {
    o.u[i] = n > 1e-10 ? y[i] / n * sqrt_d : 0.0;
    unsigned code = 0;
    for (float b : cb.boundaries) code += b < o.u[i];
    o.codes[i] = code;
    yc += y[i] * cb.centroids[code];
    cc += static_cast<double>(cb.centroids[code]) * cb.centroids[code];
  }
  o.scale = n <= 1e-10 ? 0.0 : rule == ScaleRule::least_squares ? sqrt_d * yc / cc : n;
  return o;
}

// Code i of a packed row, read bit by bit from the little-endian stream.
unsigned code_at(const uint8_t* row, int i, int bits) {
  unsigned c = 0;
  for (int b = 0; b < bits; ++b) {
    const int64_t bit = static_cast<int64_t>(i) * bits + b;
    c |= ((row[bit / 8] >> (bit % 8)) & 1u) << b;
  }
  return c;
}

// Codes may differ from the oracle's by one step only where the oracle's u lies within 1e-6
// (relative, for |u| > 1) of the boundary between them: f32 rounding may put it on either side.
bool near_boundary(double u, unsigned a, unsigned b, int bits) {
  if (a == b) return true;
  if ((a > b ? a - b : b - a) != 1) return false;
  const double boundary = lloyd_max_codebook(bits).boundaries[std::min(a, b)];
  return std::abs(u - boundary) < 1e-6 * std::max(1.0, std::abs(u));
}

// ---- inputs -------------------------------------------------------------------------------
enum class Layout { contiguous, strided_heads, misaligned };

// x of `shape` (last two dims H, D) holding `vals` (logical row-major order) in `dt` on `dev`;
// strided_heads pads each head to D + 8 elements, misaligned starts one element into the buffer.
struct Input {
  Tensor storage;
  TensorView view;
};

Input make_input(const std::vector<float>& vals, std::vector<int64_t> shape, DType dt, Layout layout, Device dev) {
  const int rank = static_cast<int>(shape.size());
  const int64_t d = shape[rank - 1], h = shape[rank - 2];
  const int64_t pad = layout == Layout::strided_heads ? 8 : 0, off = layout == Layout::misaligned ? 1 : 0;
  const int64_t outer = static_cast<int64_t>(vals.size()) / (h * d);
  Tensor host = Tensor::empty({outer * h * (d + pad) + off}, dt);
  for (int64_t i = 0; i < host.numel(); ++i) store_as(dt, host.data(), i, 1e4f);  // visible if read by mistake
  for (int64_t o = 0; o < outer * h; ++o)
    for (int64_t i = 0; i < d; ++i) store_as(dt, host.data(), off + o * (d + pad) + i, vals[o * d + i]);
  Input in;
  in.storage = dev.is_cpu() ? host : host.to(dev);
  std::vector<int64_t> strides(rank);
  strides[rank - 1] = 1;
  strides[rank - 2] = d + pad;
  for (int k = rank - 3; k >= 0; --k) strides[k] = strides[k + 1] * shape[k + 1];
  in.view = TensorView(static_cast<char*>(in.storage.data()) + off * size_of(dt), dt, shape, strides, dev);
  return in;
}

// Head vectors of a few kinds: mostly N(0,1), some with outlier channels, some zero, some so small
// that the norm is under the 1e-10 threshold, some large; with `specials`, NaN and ±Inf too.
std::vector<float> make_vectors(int64_t count, int d, std::mt19937_64& rng, bool specials) {
  std::vector<float> v = testing::randn(static_cast<size_t>(count) * d, rng);
  std::uniform_int_distribution<int> kind(0, 99), coord(0, d - 1);
  for (int64_t k = 0; k < count; ++k) {
    float* x = v.data() + k * d;
    const int c = kind(rng);
    if (c < 4) {
      for (int i = 0; i < d; ++i) x[i] = 0.0f;
    } else if (c < 8) {
      for (int i = 0; i < std::min(d, 4); ++i) x[coord(rng)] *= 20.0f;
    } else if (c < 10) {
      for (int i = 0; i < d; ++i) x[i] *= 1e-12f;
    } else if (c < 12) {
      for (int i = 0; i < d; ++i) x[i] *= 3e3f;
    } else if (specials && c < 15) {
      x[coord(rng)] = c == 12 ? NAN : c == 13 ? INFINITY : -INFINITY;
    }
  }
  return v;
}

// ---- the harness: one cache on the CPU and (optionally) its twin on the GPU ---------------
// Appends the same tokens to both and remembers which input vector each row holds, so that a
// row can be checked against the oracle.
class Twin {
 public:
  Twin(const CacheConfig& cfg, bool with_gpu) : cfg_(cfg), cpu(cfg) {
    if (with_gpu) gpu.emplace(cfg, Device::cuda(0));
    if (cfg.sign_seed) signs_ = random_signs(*cfg.sign_seed, cfg.head_dim);
    rows_ = static_cast<int64_t>(cfg.batch) * cfg.num_kv_heads * cfg.capacity;
    row_source_.assign(rows_, nullptr);
    // Poison: rows that no append writes must come out as they went in.
    std::memset(cpu.packed().data(), 0xA5, cpu.packed().nbytes());
    for (int64_t i = 0; i < rows_; ++i) cpu.scales().data_as<float>()[i] = -7777.0f;
    if (gpu) {
      copy(cpu.packed(), gpu->packed());
      copy(cpu.scales(), gpu->scales());
    }
  }

  // T tokens into every sequence (seq < 0) or into one; returns the kernel the GPU twin's append
  // took (the choice append makes for these arguments), or nullopt without a GPU twin.
  std::optional<AppendChoice> append(int64_t tokens, DType dt, Layout layout, std::mt19937_64& rng, int seq = -1,
                                     bool specials = false, bool rank4 = true, const AppendOptions& options = {}) {
    const int b = seq < 0 ? cfg_.batch : 1, h = cfg_.num_kv_heads, d = cfg_.head_dim;
    std::vector<float> vals = make_vectors(static_cast<int64_t>(b) * tokens * h, d, rng, specials);
    std::vector<float>& seen = seen_.emplace_back(vals.size());
    for (size_t i = 0; i < vals.size(); ++i) seen[i] = round_to(vals[i], dt);
    for (int bi = 0; bi < b; ++bi) {
      const int s = seq < 0 ? bi : seq;
      for (int64_t t = 0; t < tokens; ++t)
        for (int hi = 0; hi < h; ++hi) {
          const int64_t row = (static_cast<int64_t>(s) * h + hi) * cfg_.capacity + cpu.slot(cpu.write_pos(s) + t);
          row_source_[row] = seen.data() + ((bi * tokens + t) * h + hi) * d;
        }
    }
    std::vector<int64_t> shape = {tokens, h, d};
    if (seq < 0 && (cfg_.batch > 1 || rank4)) shape.insert(shape.begin(), cfg_.batch);
    const Input in = make_input(vals, shape, dt, layout, Device::cpu());
    if (seq < 0)
      cpu.append(in.view);
    else
      cpu.append(seq, in.view);
    if (!gpu) return std::nullopt;
    const Input gin = make_input(vals, shape, dt, layout, Device::cuda(0));
    std::optional<AppendChoice> choice = gpu->append_choice(gin.view, options);
    if (seq < 0)
      gpu->append(gin.view, nullptr, options);
    else
      gpu->append(seq, gin.view, nullptr, options);
    return choice;
  }

  OracleVector oracle(int64_t row) const {
    return oracle_quantize(row_source_[row], cfg_.head_dim, cfg_.bits, cfg_.sign_seed ? &signs_ : nullptr,
                           cfg_.scale_rule);
  }

  // Every written CPU row against the oracle.
  void expect_cpu_matches_oracle() const {
    const int d = cfg_.head_dim, bits = cfg_.bits, rb = cpu.bytes_per_vector();
    int64_t boundary_cases = 0, checked = 0;
    for (int64_t r = 0; r < rows_; ++r) {
      const uint8_t* row = cpu.packed().data_as<uint8_t>() + r * rb;
      const float scale = cpu.scales().data_as<float>()[r];
      if (!row_source_[r]) {
        for (int i = 0; i < rb; ++i) ASSERT_EQ(row[i], 0xA5) << "row " << r << " was never written";
        continue;
      }
      const OracleVector o = oracle(r);
      ++checked;
      bool boundary = false;
      for (int i = 0; i < d; ++i) {
        const unsigned got = code_at(row, i, bits);
        if (got == o.codes[i]) continue;
        boundary = true;
        ASSERT_TRUE(!o.flagged && near_boundary(o.u[i], got, o.codes[i], bits))
            << "row " << r << " coordinate " << i << ": code " << got << ", oracle " << o.codes[i] << " (u = " << o.u[i]
            << ")";
      }
      boundary_cases += boundary;
      if (o.flagged) {
        ASSERT_TRUE(std::isnan(scale)) << "row " << r;
      } else if (o.scale == 0) {
        ASSERT_EQ(scale, 0.0f) << "row " << r;
      } else if (!(boundary && cfg_.scale_rule == ScaleRule::least_squares)) {  // one code moves ⟨y,c⟩
        ASSERT_NEAR(scale, o.scale, 1e-5 * o.scale) << "row " << r;
      }
    }
    EXPECT_GT(checked, 0);
    EXPECT_LE(boundary_cases, checked / 100 + 1) << "more boundary cases than f32 rounding explains";
  }

  // The GPU storage against the CPU's, byte for byte and scale for scale; `differing_rows` gets
  // the count of rows whose codes differ (each difference a boundary case).
  void expect_gpu_matches_cpu(int64_t* differing_rows = nullptr) const {
    ASSERT_TRUE(gpu);
    const Tensor packed = gpu->packed().to(Device::cpu()), scales = gpu->scales().to(Device::cpu());
    const int d = cfg_.head_dim, bits = cfg_.bits, rb = cpu.bytes_per_vector();
    int64_t boundary_rows = 0, ulp_scales = 0;
    for (int64_t r = 0; r < rows_; ++r) {
      const uint8_t* want = cpu.packed().data_as<uint8_t>() + r * rb;
      const uint8_t* got = packed.data_as<uint8_t>() + r * rb;
      if (std::memcmp(want, got, rb) != 0) {
        ASSERT_NE(row_source_[r], nullptr) << "row " << r << " was never written but differs";
        const OracleVector o = oracle(r);
        for (int i = 0; i < d; ++i)
          ASSERT_TRUE(near_boundary(o.u[i], code_at(got, i, bits), code_at(want, i, bits), bits))
              << "row " << r << " coordinate " << i << ": CUDA code " << code_at(got, i, bits) << ", CPU "
              << code_at(want, i, bits) << " (u = " << o.u[i] << ")";
        ++boundary_rows;
      }
      const float ws = cpu.scales().data_as<float>()[r], gs = scales.data_as<float>()[r];
      if (std::bit_cast<uint32_t>(ws) == std::bit_cast<uint32_t>(gs) || (std::isnan(ws) && std::isnan(gs))) continue;
      // The f64 norm is summed in another order on the GPU; the float rounding of the result
      // can differ by one unit in the rare case it lands next to a rounding boundary.
      const int64_t ulps = std::abs(static_cast<int64_t>(std::bit_cast<int32_t>(ws)) - std::bit_cast<int32_t>(gs));
      ASSERT_TRUE(ulps <= 1 && std::signbit(ws) == std::signbit(gs))
          << "row " << r << ": scale " << gs << " vs CPU " << ws;
      ++ulp_scales;
    }
    // The tensor-core kernel rounds the transform its own way: its codes may leave the CPU's
    // where u lies within ~1e-6 of a boundary (checked per coordinate above), in about as many
    // rows as the CPU leaves the oracle's.
    EXPECT_LE(boundary_rows, rows_ / 100 + 2) << "boundary rows " << boundary_rows;
    EXPECT_LE(ulp_scales, rows_ / 1000 + 2) << "1-ulp scales " << ulp_scales;
    for (int s = 0; s < cfg_.batch; ++s) ASSERT_EQ(gpu->write_pos(s), cpu.write_pos(s));
    if (differing_rows) *differing_rows = boundary_rows;
  }

  // GPU dequantize against the CPU's dequantize of the same storage, bit for bit.
  void expect_gpu_dequantize_matches_cpu(DType dt) const {
    ASSERT_TRUE(gpu);
    const Cache same = gpu->to(Device::cpu());
    for (int s = 0; s < cfg_.batch; ++s) {
      const int64_t begin = same.first_held(s), end = same.write_pos(s);
      if (begin == end) continue;
      const Tensor want = same.dequantize(s, begin, end, dt);
      const Tensor got = gpu->dequantize(s, begin, end, dt).to(Device::cpu());
      const size_t es = size_of(dt);
      for (int64_t i = 0; i < want.numel(); ++i) {
        uint32_t a = 0, b = 0;
        std::memcpy(&a, static_cast<const char*>(want.data()) + i * es, es);
        std::memcpy(&b, static_cast<const char*>(got.data()) + i * es, es);
        const float fa = dt == DType::f32   ? std::bit_cast<float>(a)
                         : dt == DType::f16 ? half_to_float(static_cast<uint16_t>(a))
                                            : bf16_to_float(static_cast<uint16_t>(a));
        if (std::isnan(fa)) {
          const float fb = dt == DType::f32   ? std::bit_cast<float>(b)
                           : dt == DType::f16 ? half_to_float(static_cast<uint16_t>(b))
                                              : bf16_to_float(static_cast<uint16_t>(b));
          ASSERT_TRUE(std::isnan(fb)) << "element " << i << " of sequence " << s;
        } else {
          ASSERT_EQ(a, b) << "element " << i << " of sequence " << s << " (" << to_string(dt) << ")";
        }
      }
    }
  }

  const CacheConfig& config() const { return cfg_; }

 private:
  CacheConfig cfg_;
  std::vector<float> signs_;
  int64_t rows_ = 0;
  std::deque<std::vector<float>> seen_;  // each append's inputs as the caches saw them
  std::vector<const float*> row_source_;

 public:
  Cache cpu;
  std::optional<Cache> gpu;
};

const DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};
const Layout kLayouts[] = {Layout::contiguous, Layout::strided_heads, Layout::misaligned};

// Mean of ‖x − x̂‖² / ‖x‖² over the tokens of a batch-1 cache: the MSE per coordinate of u.
double relative_mse(const Cache& cache, const std::vector<float>& x) {
  const int64_t h = cache.config().num_kv_heads, d = cache.config().head_dim, t = cache.write_pos();
  const Tensor out = cache.dequantize(0, 0, t).to(Device::cpu());
  double sum = 0;
  for (int64_t v = 0; v < t * h; ++v) {
    double err = 0, norm = 0;
    for (int64_t i = 0; i < d; ++i) {
      const double a = x[v * d + i], b = out.data_as<float>()[v * d + i];
      err += (a - b) * (a - b);
      norm += a * a;
    }
    sum += err / norm;
  }
  return sum / static_cast<double>(t * h);
}

Tensor host_x(const std::vector<float>& v, int64_t t, int64_t h, int64_t d) {
  Tensor x = Tensor::empty({t, h, d}, DType::f32);
  std::copy(v.begin(), v.end(), x.data_as<float>());
  return x;
}

// ---- CPU: against the oracle --------------------------------------------------------------
TEST(KvAppend, CpuMatchesThePlainOracleForEveryHeadDimAndWidth) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed() + 11);
  int i = 0;
  for (int d = 4; d <= 4096; d *= 2)
    for (int bits : {2, 3, 4, 8}) {
      if (d * bits % 8) continue;
      SCOPED_TRACE("D = " + std::to_string(d) + ", bits = " + std::to_string(bits));
      CacheConfig cfg{
          .batch = 1 + i % 2, .num_kv_heads = 2, .head_dim = d, .capacity = 16, .sliding = i % 3 == 0, .bits = bits};
      cfg.scale_rule = (i / 2) % 2 ? ScaleRule::least_squares : ScaleRule::l2_norm;
      if (i % 2) cfg.sign_seed = test_seed() + i;
      Twin tw(cfg, false);
      const int64_t tokens = std::clamp<int64_t>((int64_t{1} << 15) / (static_cast<int64_t>(d) * d / 16), 1, 8);
      tw.append(tokens, kDtypes[i % 3], kLayouts[i % 3], rng, -1, true);
      tw.append(1, kDtypes[(i + 1) % 3], Layout::contiguous, rng, -1, true);
      tw.expect_cpu_matches_oracle();
      ++i;
    }
}

TEST(KvAppend, LeastSquaresScaleNeverHasALargerErrorThanTheNorm) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed() + 12);
  const int h = 4, d = 64, t = 256;
  const std::vector<float> x = make_vectors(t * h, d, rng, false);
  Cache l2({.num_kv_heads = h, .head_dim = d, .capacity = t});
  Cache ls({.num_kv_heads = h, .head_dim = d, .capacity = t, .scale_rule = ScaleRule::least_squares});
  l2.append(host_x(x, t, h, d));
  ls.append(host_x(x, t, h, d));
  ASSERT_EQ(std::memcmp(l2.packed().data(), ls.packed().data(), l2.packed().nbytes()), 0)
      << "codes must not depend on the rule";
  const Tensor a = l2.dequantize(0, 0, t), b = ls.dequantize(0, 0, t);
  int better = 0;
  for (int v = 0; v < t * h; ++v) {
    double ea = 0, eb = 0, norm = 0;
    for (int i = 0; i < d; ++i) {
      const double xi = x[v * d + i];
      ea += std::pow(xi - a.data_as<float>()[v * d + i], 2);
      eb += std::pow(xi - b.data_as<float>()[v * d + i], 2);
      norm += xi * xi;
    }
    // Up to the f32 rounding of the two reconstructions (where both scales nearly agree).
    ASSERT_LE(eb, ea + 1e-6 * norm) << "vector " << v;
    better += eb < ea;
  }
  EXPECT_GT(better, t * h / 2);
}

// ---- CPU: the error the format promises ---------------------------------------------------
TEST(KvAppend, GaussianVectorsMeetTheCodebookMse) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed() + 13);
  const int h = 4, d = 256, t = 512;  // 512K coordinates: the estimate's spread is about 0.3 %
  const std::vector<float> x = testing::randn(static_cast<size_t>(t) * h * d, rng);
  for (int bits : {2, 3, 4, 8}) {
    Cache c({.num_kv_heads = h, .head_dim = d, .capacity = t, .bits = bits});
    c.append(host_x(x, t, h, d));
    const double mse = relative_mse(c, x), want = lloyd_max_codebook(bits).mse;
    EXPECT_NEAR(mse, want, 0.05 * want) << "bits " << bits;
    if (bits == 4) EXPECT_NEAR(mse, 0.009501, 0.05 * 0.009501);
  }
}

TEST(KvAppend, RotationKeepsOutlierChannelsNearTheCodebookError) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed() + 14);
  const int h = 2, d = 128, t = 512;
  std::vector<float> x = testing::randn(static_cast<size_t>(t) * h * d, rng);
  const int outliers[] = {3, 17, 64, 101};  // fixed channels ×20, as K caches show
  for (size_t v = 0; v < x.size() / d; ++v)
    for (int c : outliers) x[v * d + c] *= 20.0f;
  Cache c({.num_kv_heads = h, .head_dim = d, .capacity = t});
  c.append(host_x(x, t, h, d));
  const double rotated = relative_mse(c, x);
  // The same quantizer without the rotation (test-local): u = x·√D/‖x‖ straight into the codebook.
  const Codebook& cb = lloyd_max_codebook(4);
  double plain = 0;
  for (int v = 0; v < t * h; ++v) {
    double norm = 0, err = 0;
    for (int i = 0; i < d; ++i) norm += static_cast<double>(x[v * d + i]) * x[v * d + i];
    const double n = std::sqrt(norm);
    for (int i = 0; i < d; ++i) {
      const double u = x[v * d + i] / n * std::sqrt(double(d));
      unsigned code = 0;
      for (float b : cb.boundaries) code += b < u;
      err += std::pow(x[v * d + i] - n * cb.centroids[code] / std::sqrt(double(d)), 2);
    }
    plain += err / norm;
  }
  plain /= t * h;
  // The outliers make u a mixture of 16 narrow clusters per vector; its error lands a little
  // under the Gaussian 0.009501 (about 0.0083 in a numpy simulation of this setup).
  EXPECT_LT(rotated, 1.05 * 0.009501);
  EXPECT_GT(rotated, 0.5 * 0.009501);
  EXPECT_GT(plain, 5 * rotated) << "without the rotation the outliers should cost far more";
}

TEST(KvAppend, RandomSignsRoundTripAndChangeTheCodes) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed() + 15);
  const int h = 2, d = 128, t = 256;
  const std::vector<float> x = testing::randn(static_cast<size_t>(t) * h * d, rng);
  Cache plain({.num_kv_heads = h, .head_dim = d, .capacity = t});
  Cache signed_({.num_kv_heads = h, .head_dim = d, .capacity = t, .sign_seed = test_seed()});
  plain.append(host_x(x, t, h, d));
  signed_.append(host_x(x, t, h, d));
  EXPECT_NEAR(relative_mse(signed_, x), 0.009501, 0.05 * 0.009501);
  EXPECT_NE(std::memcmp(plain.packed().data(), signed_.packed().data(), plain.packed().nbytes()), 0);
  const std::vector<float> s = random_signs(test_seed(), 4096), again = random_signs(test_seed(), 4096);
  EXPECT_EQ(s, again);
  double sum = 0;
  for (float v : s) {
    ASSERT_TRUE(v == 1.0f || v == -1.0f);
    sum += v;
  }
  EXPECT_LT(std::abs(sum), 5 * std::sqrt(4096.0));
  EXPECT_NE(random_signs(test_seed() + 1, 64), random_signs(test_seed(), 64));
}

// ---- CPU: format promises -----------------------------------------------------------------
TEST(KvAppend, RingWrapsAndKeepsTheLastTokens) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed() + 16);
  const int h = 2, d = 32, cap = 8;
  Cache ring({.num_kv_heads = h, .head_dim = d, .capacity = cap, .sliding = true});
  Cache all({.num_kv_heads = h, .head_dim = d, .capacity = 64});
  for (int64_t t : {5, 3, 6, 1, 8, 2}) {
    const std::vector<float> x = testing::randn(static_cast<size_t>(t) * h * d, rng);
    ring.append(host_x(x, t, h, d));
    all.append(host_x(x, t, h, d));
    const int64_t w = ring.write_pos();
    ASSERT_EQ(ring.first_held(), std::max<int64_t>(0, w - cap));
    const int rb = ring.bytes_per_vector();
    for (int64_t tok = ring.first_held(); tok < w; ++tok)
      for (int hi = 0; hi < h; ++hi) {
        const int64_t r = hi * cap + tok % cap, a = hi * 64 + tok;
        ASSERT_EQ(std::memcmp(ring.packed().data_as<uint8_t>() + r * rb, all.packed().data_as<uint8_t>() + a * rb, rb),
                  0)
            << "token " << tok;
        ASSERT_EQ(ring.scales().data_as<float>()[r], all.scales().data_as<float>()[a]);
      }
    const Tensor got = ring.dequantize(0, ring.first_held(), w), want = all.dequantize(0, ring.first_held(), w);
    ASSERT_EQ(std::memcmp(got.data(), want.data(), got.nbytes()), 0);
  }
  expect_error([&] { ring.dequantize(0, ring.first_held() - 1, ring.write_pos()); }, ErrorCode::out_of_range,
               {"[kv::dequantize]", "overwritten"});
}

TEST(KvAppend, GlobalCacheRefusesToWritePastCapacity) {
  Cache c({.num_kv_heads = 2, .head_dim = 16, .capacity = 10});
  c.append(Tensor::zeros({8, 2, 16}, DType::f32));
  expect_error(
      [&] {
        c.append(Tensor::zeros({3, 2, 16}, DType::f32));
      },
      ErrorCode::out_of_range, {"[kv::append]", "capacity 10", "write_pos 8"});
  EXPECT_EQ(c.write_pos(), 8);
  c.append(Tensor::zeros({2, 2, 16}, DType::f32));
  EXPECT_EQ(c.write_pos(), 10);
  expect_error([&] { c.append(Tensor::zeros({1, 2, 16}, DType::f32)); }, ErrorCode::out_of_range, {"[kv::append]"});
}

TEST(KvAppend, RingRefusesMoreTokensThanItHoldsInOneCall) {
  Cache c({.num_kv_heads = 1, .head_dim = 8, .capacity = 4, .sliding = true});
  expect_error(
      [&] {
        c.append(Tensor::zeros({5, 1, 8}, DType::f32));
      },
      ErrorCode::out_of_range, {"[kv::append]", "T = 5", "capacity 4"});
  c.append(Tensor::zeros({4, 1, 8}, DType::f32));
  EXPECT_EQ(c.write_pos(), 4);
}

TEST(KvAppend, HalfInputsQuantizeLikeTheirF32Values) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed() + 17);
  const int h = 3, d = 64, t = 20;
  const std::vector<float> x = make_vectors(t * h, d, rng, false);
  for (DType dt : {DType::f16, DType::bf16}) {
    std::vector<float> rounded(x.size());
    for (size_t i = 0; i < x.size(); ++i) rounded[i] = round_to(x[i], dt);
    Cache a({.num_kv_heads = h, .head_dim = d, .capacity = t}), b({.num_kv_heads = h, .head_dim = d, .capacity = t});
    a.append(make_input(x, {t, h, d}, dt, Layout::contiguous, Device::cpu()).view);
    b.append(host_x(rounded, t, h, d));
    EXPECT_EQ(std::memcmp(a.packed().data(), b.packed().data(), a.packed().nbytes()), 0) << to_string(dt);
    EXPECT_EQ(std::memcmp(a.scales().data(), b.scales().data(), a.scales().nbytes()), 0) << to_string(dt);
  }
}

TEST(KvAppend, ZeroVectorsGetScaleZeroAndDequantizeToZero) {
  for (int bits : {2, 3, 4, 8}) {
    Cache c({.num_kv_heads = 2, .head_dim = 32, .capacity = 4, .bits = bits});
    std::vector<float> x(3 * 2 * 32, 0.0f);
    x[2 * 32 + 5] = 1.0f;  // token 1, head 0 is not zero
    c.append(host_x(x, 3, 2, 32));
    const unsigned zero_code = (1u << (bits - 1)) - 1;  // the boundaries strictly below 0
    for (int64_t v : {0, 1, 3, 4, 5}) {
      const int64_t tok = v / 2, hi = v % 2, r = hi * 4 + tok;
      EXPECT_EQ(c.scales().data_as<float>()[r], 0.0f);
      for (int i = 0; i < 32; ++i)
        ASSERT_EQ(code_at(c.packed().data_as<uint8_t>() + r * c.bytes_per_vector(), i, bits), zero_code);
    }
    const Tensor out = c.dequantize(0, 0, 3);
    for (int64_t v : {0, 1, 3, 4, 5})
      for (int i = 0; i < 32; ++i) ASSERT_EQ(out.data_as<float>()[v * 32 + i], 0.0f);
    EXPECT_GT(c.scales().data_as<float>()[0 * 4 + 1], 0.0f);
  }
}

TEST(KvAppend, NonFiniteInputIsFlaggedWithANanScale) {
  const int h = 2, d = 16, t = 4;
  std::vector<float> x(t * h * d, 0.5f);
  x[0 * d + 3] = NAN;        // token 0, head 0
  x[3 * d + 0] = INFINITY;   // token 1, head 1
  x[4 * d + 9] = -INFINITY;  // token 2, head 0
  x[7 * d + 0] = 3e38f;      // token 3, head 1: finite, but the transform overflows
  x[7 * d + 1] = 3e38f;
  Cache c({.num_kv_heads = h, .head_dim = d, .capacity = 8});
  c.append(host_x(x, t, h, d));
  EXPECT_EQ(count_nonfinite_scales(c), 4);
  const Tensor out = c.dequantize(0, 0, t);
  for (int v : {0, 3, 4, 7}) {
    EXPECT_TRUE(std::isnan(out.data_as<float>()[v * d]));
    const int64_t r = (v % h) * 8 + v / h;
    for (int i = 0; i < c.bytes_per_vector(); ++i)
      ASSERT_EQ(c.packed().data_as<uint8_t>()[r * c.bytes_per_vector() + i], 0);
  }
  for (int v : {1, 2, 5, 6}) EXPECT_TRUE(std::isfinite(out.data_as<float>()[v * d]));
}

TEST(KvAppend, BatchedCacheKeepsPositionsPerSequence) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed() + 18);
  const int b = 3, h = 2, d = 64, cap = 16;
  Cache batched({.batch = b, .num_kv_heads = h, .head_dim = d, .capacity = cap});
  std::vector<Cache> single;
  for (int s = 0; s < b; ++s) single.emplace_back(CacheConfig{.num_kv_heads = h, .head_dim = d, .capacity = cap});
  auto step = [&](int seq, int64_t t) {  // seq < 0: every sequence, one [B, T, H, D] call
    const int n = seq < 0 ? b : 1;
    const std::vector<float> x = make_vectors(n * t * h, d, rng, false);
    if (seq < 0) {
      Tensor xb = Tensor::empty({b, t, h, d}, DType::f32);
      std::copy(x.begin(), x.end(), xb.data_as<float>());
      batched.append(xb);
      for (int s = 0; s < b; ++s)
        single[s].append(
            host_x(std::vector<float>(x.begin() + s * t * h * d, x.begin() + (s + 1) * t * h * d), t, h, d));
    } else {
      batched.append(seq, host_x(x, t, h, d));
      single[seq].append(host_x(x, t, h, d));
    }
  };
  step(-1, 4);
  step(1, 2);
  step(-1, 1);
  step(2, 5);
  EXPECT_EQ(batched.write_positions(), (std::vector<int64_t>{5, 7, 10}));
  const int64_t rb = batched.bytes_per_vector(), per_seq = h * cap;
  for (int s = 0; s < b; ++s) {
    for (int64_t r = 0; r < per_seq; ++r) {
      if (r % cap >= single[s].write_pos()) continue;
      ASSERT_EQ(std::memcmp(batched.packed().data_as<uint8_t>() + (s * per_seq + r) * rb,
                            single[s].packed().data_as<uint8_t>() + r * rb, rb),
                0);
      ASSERT_EQ(batched.scales().data_as<float>()[s * per_seq + r], single[s].scales().data_as<float>()[r]);
    }
    const Tensor got = batched.dequantize(s, 0, single[s].write_pos()),
                 want = single[s].dequantize(0, 0, single[s].write_pos());
    ASSERT_EQ(std::memcmp(got.data(), want.data(), got.nbytes()), 0);
  }
  // Every sequence must have room: sequence 2 is at 10 of 16.
  expect_error(
      [&] {
        batched.append(Tensor::zeros({b, 7, h, d}, DType::f32));
      },
      ErrorCode::out_of_range, {"[kv::append]", "sequence 2"});
}

// ---- CPU: refusals ------------------------------------------------------------------------
TEST(KvCache, RefusesBadConfigs) {
  auto bad = [](CacheConfig cfg, std::initializer_list<std::string> parts) {
    expect_error([&] { Cache c(cfg); }, ErrorCode::invalid_argument, parts);
  };
  bad({.head_dim = 96, .capacity = 8}, {"[kv::Cache]", "head_dim", "got 96"});
  bad({.head_dim = 2, .capacity = 8}, {"[kv::Cache]", "got 2"});
  bad({.head_dim = 8192, .capacity = 8}, {"[kv::Cache]", "got 8192"});
  bad({.head_dim = 64, .capacity = 8, .bits = 5}, {"[kv::Cache]", "bits", "got 5"});
  bad({.head_dim = 64, .capacity = 8, .bits = 1}, {"[kv::Cache]", "got 1"});
  bad({.head_dim = 64, .capacity = 0}, {"[kv::Cache]", "capacity", "got 0"});
  bad({.batch = 0, .head_dim = 64, .capacity = 8}, {"[kv::Cache]", "batch"});
  bad({.num_kv_heads = 0, .head_dim = 64, .capacity = 8}, {"[kv::Cache]", "num_kv_heads"});
  bad({.head_dim = 4, .capacity = 8, .bits = 3}, {"[kv::Cache]", "whole bytes", "12 bits"});
  bad({.head_dim = 64, .capacity = 8, .scale_rule = static_cast<ScaleRule>(7)}, {"[kv::Cache]", "scale rule"});
}

TEST(KvCache, RefusesMismatchedInputsAndOutputs) {
  Cache c({.num_kv_heads = 2, .head_dim = 16, .capacity = 8});
  Cache b2({.batch = 2, .num_kv_heads = 2, .head_dim = 16, .capacity = 8});
  using E = ErrorCode;
  expect_error(
      [&] {
        c.append(Tensor::zeros({3, 3, 16}, DType::f32));
      },
      E::invalid_argument, {"[kv::append]", "[3, 3, 16]"});
  expect_error([&] { c.append(Tensor::zeros({3, 2, 8}, DType::f32)); }, E::invalid_argument, {"[kv::append]", "shape"});
  expect_error([&] { c.append(Tensor::zeros({3, 32}, DType::f32)); }, E::invalid_argument, {"[kv::append]"});
  expect_error([&] { c.append(Tensor::zeros({3, 2, 16}, DType::i32)); }, E::invalid_argument, {"[kv::append]", "i32"});
  expect_error([&] { c.append(Tensor::zeros({3, 2, 16}, DType::u8)); }, E::invalid_argument, {"[kv::append]", "u8"});
  expect_error(
      [&] {
        c.append(Tensor::zeros({0, 2, 16}, DType::f32));
      },
      E::invalid_argument, {"[kv::append]", "T = 0"});
  expect_error(
      [&] {
        c.append(Tensor::zeros({2, 3, 2, 16}, DType::f32));
      },
      E::invalid_argument, {"[kv::append]", "shape"});
  expect_error(
      [&] {
        c.append(1, Tensor::zeros({1, 2, 16}, DType::f32));
      },
      E::out_of_range, {"[kv::append]", "sequence 1"});
  expect_error(
      [&] {
        b2.append(Tensor::zeros({1, 2, 16}, DType::f32));
      },
      E::invalid_argument, {"[kv::append]", "batch"});
  Tensor wide = Tensor::zeros({2, 2, 32}, DType::f32);
  const int64_t shape[] = {2, 2, 16}, strides[] = {64, 32, 2};
  expect_error([&] { c.append(TensorView(wide.data(), DType::f32, shape, strides, Device::cpu())); },
               E::invalid_argument, {"[kv::append]", "contiguous"});
  EXPECT_EQ(c.write_pos(), 0);

  c.append(Tensor::zeros({3, 2, 16}, DType::f32));
  expect_error(
      [&] {
        c.dequantize(0, 0, 3, Tensor::zeros({3, 2, 8}, DType::f32));
      },
      E::invalid_argument, {"[kv::dequantize]", "out"});
  expect_error(
      [&] {
        c.dequantize(0, 0, 3, Tensor::zeros({2, 2, 16}, DType::f32));
      },
      E::invalid_argument, {"[kv::dequantize]", "out"});
  expect_error(
      [&] {
        c.dequantize(0, 0, 3, Tensor::zeros({3, 2, 16}, DType::i32));
      },
      E::invalid_argument, {"[kv::dequantize]", "i32"});
  expect_error([&] { c.dequantize(0, 0, 4); }, E::out_of_range, {"[kv::dequantize]", "write_pos 3"});
  expect_error([&] { c.dequantize(0, 2, 1); }, E::invalid_argument, {"[kv::dequantize]", "[2, 1)"});
  expect_error([&] { c.dequantize(1, 0, 1); }, E::out_of_range, {"[kv::dequantize]", "sequence 1"});
  expect_error([&] { count_nonfinite_scales(c, 2); }, E::out_of_range, {"[kv::count_nonfinite_scales]"});
  Tensor out_wide = Tensor::zeros({3, 2, 32}, DType::f32);
  const int64_t oshape[] = {3, 2, 16}, ostrides[] = {64, 32, 1};
  expect_error([&] { c.dequantize(0, 0, 3, TensorView(out_wide.data(), DType::f32, oshape, ostrides, Device::cpu())); },
               E::invalid_argument, {"[kv::dequantize]", "contiguous"});
  if (cuda_available()) {
    Tensor gpu_out = Tensor::zeros({3, 2, 16}, DType::f32, Device::cuda(0));
    expect_error([&] { c.dequantize(0, 0, 3, gpu_out); }, E::invalid_argument, {"[kv::dequantize]", "cuda:0"});
    expect_error(
        [&] {
          c.append(Tensor::zeros({1, 2, 16}, DType::f32, Device::cuda(0)));
        },
        E::invalid_argument, {"[kv::append]", "cuda:0"});
  }
}

TEST(FastDiv, MatchesIntegerDivision) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed() + 19);
  std::vector<uint32_t> divisors = {1, 2, 3, 5, 7, 8, 10, 24, 100, 641, 65535, 65536, 65537, 1000003, (1u << 31) - 1};
  for (int i = 0; i < 200; ++i) divisors.push_back(1 + static_cast<uint32_t>(rng() % ((1u << 31) - 1)));
  for (uint32_t d : divisors) {
    const cuda::FastDiv f = cuda::FastDiv::make(d);
    std::vector<uint32_t> ns = {0,     1,           d - 1,       d,           d + 1,      2 * d - 1,
                                2 * d, 0x7fffffffu, 0x80000000u, 0xffffffffu, 0xfffffffeu};
    for (int i = 0; i < 2000; ++i) ns.push_back(static_cast<uint32_t>(rng()));
    for (uint32_t n : ns) ASSERT_EQ(f.div(n), n / d) << n << " / " << d;
  }
}

// ---- CUDA: against the CPU ----------------------------------------------------------------
TEST(KvCacheCuda, AppendMatchesCpuBitForBitForEveryHeadDimAndWidth) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed() + 21);
  int i = 0;
  for (int d = 4; d <= 4096; d *= 2)
    for (int bits : {2, 3, 4, 8}) {
      if (d * bits % 8) continue;
      SCOPED_TRACE("D = " + std::to_string(d) + ", bits = " + std::to_string(bits) + ", case " + std::to_string(i));
      CacheConfig cfg{.batch = 1 + 2 * (i % 2),
                      .num_kv_heads = 1 + i % 3,
                      .head_dim = d,
                      .capacity = i % 3 == 1 ? 8 : 32,
                      .sliding = i % 3 == 1,
                      .bits = bits};
      cfg.scale_rule = (i / 2) % 2 ? ScaleRule::least_squares : ScaleRule::l2_norm;
      if ((i / 3) % 2) cfg.sign_seed = test_seed() + i;
      // Calls this small never take the tensor cores: the fast kernel where it is instantiated.
      const AppendVariant want =
          (bits == 4 || bits == 8) && d >= 64 && d <= 512 ? AppendVariant::fast : AppendVariant::generic;
      auto took = [&](const std::optional<AppendChoice>& c) {
        ASSERT_TRUE(c.has_value());
        EXPECT_EQ(c->variant, want) << to_string(*c);
      };
      Twin tw(cfg, true);
      took(tw.append(5, kDtypes[i % 3], kLayouts[i % 3], rng, -1, true));
      for (int k = 0; k < 3; ++k)
        took(tw.append(1, kDtypes[(i + k) % 3], kLayouts[(i + k + 1) % 3], rng, -1, true, k % 2));
      if (cfg.batch > 1) took(tw.append(2, kDtypes[(i + 1) % 3], kLayouts[(i + 2) % 3], rng, 1, true));
      took(tw.append(7, kDtypes[(i + 2) % 3], kLayouts[i % 3], rng, -1, true));
      tw.expect_gpu_matches_cpu();
      tw.expect_gpu_dequantize_matches_cpu(kDtypes[(i + 1) % 3]);
      for (int s = 0; s < cfg.batch; ++s)
        EXPECT_EQ(count_nonfinite_scales(*tw.gpu, s), count_nonfinite_scales(tw.cpu, s));
      ++i;
    }
}

TEST(KvCacheCuda, LongPrefillCoversManyTilesPerBlock) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed() + 22);
  for (int d : {64, 128, 256, 512})
    for (int bits : {4, 8}) {
      SCOPED_TRACE("D = " + std::to_string(d) + ", bits = " + std::to_string(bits));
      const int64_t tokens = (int64_t{1} << 23) / (8 * d);  // 8M elements: several tiles per block
      Twin tw({.num_kv_heads = 8, .head_dim = d, .capacity = tokens + 1, .bits = bits}, true);
      // The prefill takes the tensor cores up to D = 256, the fast kernel at 512; the token the fast one.
      const std::optional<AppendChoice> prefill = tw.append(tokens, DType::f16, Layout::contiguous, rng, -1, false, false);
      ASSERT_TRUE(prefill.has_value());
      EXPECT_EQ(prefill->variant, d <= 256 ? AppendVariant::mma : AppendVariant::fast) << to_string(*prefill);
      const std::optional<AppendChoice> decode = tw.append(1, DType::f16, Layout::contiguous, rng, -1, false, false);
      ASSERT_TRUE(decode.has_value());
      EXPECT_EQ(decode->variant, AppendVariant::fast) << to_string(*decode);
      tw.expect_gpu_matches_cpu();
    }
}

// Calls of many vectors take other kernels than the small calls above (from kv::kManyVectors =
// 16,384 vectors on: the tensor cores where they serve the call, else at 8 bits the staged fast
// kernel in blocks of 128 threads): every dtype and layout there too, with signs, the
// least-squares scale and special values.
TEST(KvCacheCuda, LargeAppendsMatchCpuForEveryDtypeAndLayout) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed() + 26);
  int i = 0;
  for (int d : {64, 128, 256, 512})
    for (int bits : {4, 8}) {
      SCOPED_TRACE("D = " + std::to_string(d) + ", bits = " + std::to_string(bits));
      CacheConfig cfg{.num_kv_heads = 8, .head_dim = d, .capacity = 2200, .bits = bits};
      if ((i / 2) % 2) cfg.scale_rule = ScaleRule::least_squares;
      if (i % 3 != 2) cfg.sign_seed = test_seed() + 100 + i;
      Twin tw(cfg, true);
      const DType dt = kDtypes[i % 3];
      const Layout layout = kLayouts[(i / 2) % 3];
      const std::optional<AppendChoice> large = tw.append(2100, dt, layout, rng, -1, true);  // 16,800 vectors
      ASSERT_TRUE(large.has_value());
      const bool tensor_cores = dt != DType::f32 && layout != Layout::misaligned &&
                                cfg.scale_rule == ScaleRule::l2_norm && d <= 256;
      EXPECT_EQ(large->variant, tensor_cores ? AppendVariant::mma : AppendVariant::fast) << to_string(*large);
      if (!tensor_cores && bits == 8 && d <= 256) {
        EXPECT_EQ(large->max_threads, 128) << to_string(*large);
        EXPECT_TRUE(large->staged) << to_string(*large);
      }
      const std::optional<AppendChoice> small = tw.append(1, kDtypes[(i + 1) % 3], kLayouts[i % 3], rng, -1, true);
      ASSERT_TRUE(small.has_value());
      EXPECT_EQ(small->variant, AppendVariant::fast) << to_string(*small);
      EXPECT_EQ(small->max_threads, 256) << to_string(*small);
      tw.expect_gpu_matches_cpu();
      ++i;
    }
}

// A large call that wraps a ring (the slot wraps inside the tiles of one launch), at 8 and 4 bits,
// D = 64, 128 and 256, three input dtypes and strided heads.
TEST(KvCacheCuda, LargeAppendWrapsTheRing) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed() + 27);
  for (int bits : {8, 4})
    for (int d : {64, 128, 256}) {
      SCOPED_TRACE("D = " + std::to_string(d) + ", bits = " + std::to_string(bits));
      Twin tw({.num_kv_heads = 8, .head_dim = d, .capacity = 2300, .sliding = true, .bits = bits, .sign_seed = 5},
              true);
      const std::optional<AppendChoice> small = tw.append(333, DType::f16, Layout::contiguous, rng, -1, true);
      // 16,800 vectors, wrapping at 1,967: the tensor cores for bf16, the fast kernel for f32.
      const std::optional<AppendChoice> half = tw.append(2100, DType::bf16, Layout::strided_heads, rng, -1, true);
      const std::optional<AppendChoice> full = tw.append(2100, DType::f32, Layout::contiguous, rng, -1, true);
      ASSERT_TRUE(small && half && full);
      EXPECT_EQ(small->variant, AppendVariant::fast) << to_string(*small);
      EXPECT_EQ(half->variant, AppendVariant::mma) << to_string(*half);
      EXPECT_EQ(full->variant, AppendVariant::fast) << to_string(*full);
      EXPECT_EQ(full->staged, bits == 8 || d <= 128) << to_string(*full);  // 4 bits at D = 256: the register prefetch
      tw.expect_gpu_matches_cpu();
    }
}

// D = 64, 128 and 256 calls of f16/bf16 vectors on 16 bytes with the original scale take the
// tensor-core kernel from kv::kManyVectors (16,384) vectors on: both widths and dtypes, contiguous
// and strided heads, with and without random signs, a ring wrapped inside the call, special
// values; then the same appends forced through the fast kernel. Each append asserts the kernel
// that served it.
TEST(KvCacheCuda, TensorCoreAppendMatchesCpu) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed() + 28);
  for (const std::optional<AppendVariant> forced : {std::optional<AppendVariant>{}, std::optional(AppendVariant::fast)}) {
    const std::string name = forced ? std::string("forced ") + to_string(*forced) : "chosen";
    const AppendOptions options{.variant = forced};
    int64_t differing = 0, rows = 0;
    int i = 0;
    for (int d : {64, 128, 256})
      for (int bits : {4, 8})
        for (DType dt : {DType::f16, DType::bf16})
          for (Layout layout : {Layout::contiguous, Layout::strided_heads}) {
            SCOPED_TRACE("kernel " + name + ", D " + std::to_string(d) + ", bits " + std::to_string(bits) + ", " +
                         to_string(dt) + (layout == Layout::contiguous ? ", contiguous" : ", strided heads"));
            CacheConfig cfg{.num_kv_heads = 8, .head_dim = d, .capacity = 2300, .sliding = true, .bits = bits};
            if (i++ % 2) cfg.sign_seed = test_seed() + 200 + i;
            Twin tw(cfg, true);
            const std::optional<AppendChoice> small = tw.append(333, dt, layout, rng, -1, true, true, options);
            // 16,800 vectors, the ring wraps at 1,967.
            const std::optional<AppendChoice> large = tw.append(2100, dt, layout, rng, -1, true, true, options);
            ASSERT_TRUE(small && large);
            EXPECT_EQ(small->variant, AppendVariant::fast) << to_string(*small);
            EXPECT_EQ(large->variant, forced ? *forced : AppendVariant::mma) << to_string(*large);
            int64_t rows_differing = 0;
            tw.expect_gpu_matches_cpu(&rows_differing);
            tw.expect_gpu_dequantize_matches_cpu(dt);
            if (forced) EXPECT_EQ(rows_differing, 0) << "the fast kernel is bit-exact with the CPU";
            differing += rows_differing;
            rows += 8 * 2300;
          }
    std::printf("kernel %s: %lld of %lld rows differ from the CPU's in a boundary case\n", name.c_str(),
                static_cast<long long>(differing), static_cast<long long>(rows));
  }
}

// A variant forced where it cannot serve the call is refused before anything runs, naming the
// variant and the reason; a forced tensor-core append of a decode step runs (the kernel handles a
// partial tile) and matches the CPU up to boundary cases.
TEST(KvCacheCuda, ForcedKernelsAreRefusedWhereTheyCannotServe) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed() + 29);
  Cache c({.num_kv_heads = 2, .head_dim = 128, .capacity = 8}, Device::cuda(0));
  const Tensor f32 = Tensor::zeros({1, 2, 128}, DType::f32, Device::cuda(0));
  expect_error([&] { c.append(f32, nullptr, {.variant = AppendVariant::mma}); }, ErrorCode::unsupported,
               {"[kv::append]", "forced mma", "f16 or bf16", "got f32"});
  Cache small_dim({.num_kv_heads = 2, .head_dim = 32, .capacity = 8}, Device::cuda(0));
  expect_error(
      [&] {
        small_dim.append(Tensor::zeros({1, 2, 32}, DType::f16, Device::cuda(0)), nullptr, {.variant = AppendVariant::fast});
      },
      ErrorCode::unsupported, {"[kv::append]", "forced fast", "64..512", "D = 32"});
  EXPECT_EQ(c.write_pos(), 0);
  EXPECT_EQ(small_dim.write_pos(), 0);

  Twin tw({.num_kv_heads = 3, .head_dim = 128, .capacity = 16}, true);
  const std::optional<AppendChoice> forced =
      tw.append(5, DType::f16, Layout::contiguous, rng, -1, false, true, {.variant = AppendVariant::mma});
  ASSERT_TRUE(forced.has_value());
  EXPECT_EQ(forced->variant, AppendVariant::mma);
  tw.expect_gpu_matches_cpu();
}

TEST(KvCacheCuda, ManySequencesUseTheDeviceStartArray) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed() + 23);
  for (bool sliding : {false, true}) {
    Twin tw({.batch = 70, .num_kv_heads = 2, .head_dim = 128, .capacity = 16, .sliding = sliding}, true);
    tw.append(5, DType::bf16, Layout::contiguous, rng);
    tw.append(4, DType::f16, Layout::strided_heads, rng, 3);
    tw.append(1, DType::f32, Layout::contiguous, rng);
    tw.append(sliding ? 9 : 6, DType::f16, Layout::misaligned, rng);
    tw.expect_gpu_matches_cpu();
    tw.expect_gpu_dequantize_matches_cpu(DType::f32);
  }
}

TEST(KvCacheCuda, DecodeStepsWrapTheRing) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed() + 24);
  Twin tw({.batch = 2, .num_kv_heads = 8, .head_dim = 128, .capacity = 8, .sliding = true, .sign_seed = 7}, true);
  for (int step = 0; step < 20; ++step) {
    tw.append(1, DType::f16, Layout::contiguous, rng);
    if (step % 5 == 4) tw.expect_gpu_matches_cpu();
  }
  tw.expect_gpu_dequantize_matches_cpu(DType::f16);
  tw.expect_gpu_dequantize_matches_cpu(DType::bf16);
}

TEST(KvCacheCuda, HadamardMatchesCpuBitForBit) {
  FRUGAL_SKIP_WITHOUT_GPU();
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed() + 25);
  for (int d = 4; d <= 4096; d *= 2) {
    const int rows = 37;
    const Tensor x = testing::host_tensor(testing::randn(static_cast<size_t>(rows) * d, rng), {rows, d});
    Tensor want = Tensor::empty({rows, d}, DType::f32);
    hadamard_transform(x, want);
    const Tensor gx = x.to(Device::cuda(0));
    Tensor gout = Tensor::empty({rows, d}, DType::f32, Device::cuda(0));
    hadamard_transform(gx, gout);
    EXPECT_EQ(std::memcmp(gout.to(Device::cpu()).data(), want.data(), want.nbytes()), 0) << "D = " << d;
    hadamard_transform(gx, gx);  // in place
    EXPECT_EQ(std::memcmp(gx.to(Device::cpu()).data(), want.data(), want.nbytes()), 0) << "D = " << d << " in place";
  }
}

TEST(KvCacheCuda, RefusesHostTensors) {
  FRUGAL_SKIP_WITHOUT_GPU();
  Cache c({.num_kv_heads = 2, .head_dim = 16, .capacity = 8}, Device::cuda(0));
  expect_error(
      [&] {
        c.append(Tensor::zeros({1, 2, 16}, DType::f32));
      },
      ErrorCode::invalid_argument, {"[kv::append]", "x is on cpu", "cuda:0"});
  c.append(Tensor::zeros({1, 2, 16}, DType::f32, Device::cuda(0)));
  expect_error(
      [&] {
        c.dequantize(0, 0, 1, Tensor::zeros({1, 2, 16}, DType::f32));
      },
      ErrorCode::invalid_argument, {"[kv::dequantize]", "out is on cpu"});
  const Tensor h = Tensor::zeros({2, 16}, DType::f32);
  expect_error(
      [&] {
        hadamard_transform(h, Tensor::zeros({2, 16}, DType::f32, Device::cuda(0)));
      },
      ErrorCode::invalid_argument, {"[kv::hadamard_transform]"});
}

}  // namespace
}  // namespace frugal::kv
