// Public KV-cache operations: validate once, then dispatch to the CPU or CUDA backend.
#include <bit>
#include <climits>
#include <cmath>
#include <vector>

#include "core/device_caps.h"
#include "core/kv_backend.h"
#include "core/kv_choose.h"
#include "core/validate.h"
#include "frugal/kv_cache.h"

namespace frugal::kv {

namespace {

bool is_pow2_dim(int64_t d) { return d >= 4 && d <= 4096 && std::has_single_bit(static_cast<uint64_t>(d)); }

Tensor upload(const std::vector<float>& v, Device device, Stream stream) {
  Tensor host = Tensor::empty({static_cast<int64_t>(v.size())}, DType::f32);
  std::copy(v.begin(), v.end(), host.data_as<float>());
  return device.is_cpu() ? host : host.to(device, stream);
}

}  // namespace

const char* to_string(ScaleFormat format) { return format == ScaleFormat::f16 ? "f16" : "f32"; }
DType scale_dtype(ScaleFormat format) { return format == ScaleFormat::f16 ? DType::f16 : DType::f32; }

void validate(const CacheConfig& c, const char* op) {
  FRUGAL_CHECK(c.batch >= 1, invalid_argument, op, "batch must be at least 1, got " << c.batch);
  FRUGAL_CHECK(c.num_kv_heads >= 1, invalid_argument, op, "num_kv_heads must be at least 1, got " << c.num_kv_heads);
  FRUGAL_CHECK(is_pow2_dim(c.head_dim), invalid_argument, op,
               "head_dim must be a power of two in [4, 4096], got " << c.head_dim);
  FRUGAL_CHECK(c.capacity >= 1, invalid_argument, op, "capacity must be at least 1 token, got " << c.capacity);
  FRUGAL_CHECK(c.bits == 2 || c.bits == 3 || c.bits == 4 || c.bits == 8, invalid_argument, op,
               "bits must be 2, 3, 4 or 8, got " << c.bits);
  FRUGAL_CHECK(c.head_dim * c.bits % 8 == 0, invalid_argument, op,
               "head_dim × bits must fill whole bytes, got head_dim " << c.head_dim << " at " << c.bits << " bits ("
                                                                      << c.head_dim * c.bits << " bits per vector)");
  FRUGAL_CHECK(c.scale_rule == ScaleRule::l2_norm || c.scale_rule == ScaleRule::least_squares, invalid_argument, op,
               "unknown scale rule " << static_cast<int>(c.scale_rule));
  FRUGAL_CHECK(c.scale_format == ScaleFormat::f32 || c.scale_format == ScaleFormat::f16, invalid_argument, op,
               "unknown scale format " << static_cast<int>(c.scale_format));
  detail::checked_product({c.batch, c.num_kv_heads, c.capacity, c.head_dim * c.bits / 8 + 4}, op,
                          "the cache's size (batch × heads × capacity × (row bytes + 4))");
  FRUGAL_CHECK(c.window >= 0 && c.window <= c.capacity, invalid_argument, op,
               "window must be in [0, capacity = " << c.capacity << "] tokens, got " << c.window);
  FRUGAL_CHECK(c.sinks >= 0 && c.sinks <= c.capacity, invalid_argument, op,
               "sinks must be in [0, capacity = " << c.capacity << "] tokens, got " << c.sinks);
  if (c.exact_rows() > 0) {
    // The exact rows' GPU copies take a grid of (token, head, sequence).
    FRUGAL_CHECK(c.batch <= 65535 && c.num_kv_heads <= 65535, invalid_argument, op,
                 "a cache with exact rows (window or sinks) holds at most 65535 sequences and heads, got batch "
                     << c.batch << " and " << c.num_kv_heads << " heads");
    detail::checked_product({c.batch, c.num_kv_heads, c.exact_rows(), c.head_dim, 2}, op,
                            "the exact rows' size (batch × heads × (sinks + window) × head_dim × 2)");
  }
}

void hadamard_transform(const TensorView& x, const TensorView& out, Stream stream) {
  constexpr const char* op = "kv::hadamard_transform";
  detail::check_tensor(x, op, "x", 2, {DType::f32});
  detail::check_tensor(out, op, "out", 2, {DType::f32});
  detail::check_shape(out, op, "out", {x.size(0), x.size(1)});
  detail::check_contiguous(x, op, "x");
  detail::check_contiguous(out, op, "out");
  detail::check_same_device(x, out, op, "x", "out");
  FRUGAL_CHECK(is_pow2_dim(x.size(1)), invalid_argument, op,
               "the last dimension must be a power of two in [4, 4096], got " << x.size(1));
  if (x.empty()) return;
  detail::check_device_usable(x.device, op);
  const int dim = static_cast<int>(x.size(1));
  if (x.device.is_cpu()) {
    cpu::hadamard_transform(x.data_as<const float>(), out.data_as<float>(), x.size(0), dim);
  } else {
    cuda::hadamard_transform(x.data_as<const float>(), out.data_as<float>(), x.size(0), dim, x.device.index, stream);
  }
}

Cache::Cache(const CacheConfig& config, Device device, Stream stream) : config_(config) {
  constexpr const char* op = "kv::Cache";
  validate(config, op);
  detail::check_device_usable(device, op);
  const int64_t b = config.batch, h = config.num_kv_heads, cap = config.capacity;
  packed_ = Tensor::zeros({b, h, cap, static_cast<int64_t>(bytes_per_vector())}, DType::u8, device);
  scales_ = Tensor::zeros({b, h, cap}, scale_dtype(config.scale_format), device);
  const Codebook& cb = lloyd_max_codebook(config.bits);
  centroids_ = upload(cb.centroids, device, stream);
  boundaries_ = upload(cb.boundaries, device, stream);
  if (config.sign_seed) signs_ = upload(random_signs(*config.sign_seed, config.head_dim), device, stream);
  if (config.exact_rows() > 0) exact_ = Tensor::zeros({b, h, config.exact_rows(), config.head_dim}, DType::f16, device);
  if (device.is_cuda()) device_starts_ = Tensor::empty({b}, DType::i64, device);
  positions_.assign(config.batch, 0);
}

int64_t Cache::first_held(int seq) const {
  const int64_t w = positions_.at(seq);
  return config_.sliding ? std::max<int64_t>(0, w - config_.capacity) : 0;
}

Cache Cache::to(Device device, Stream stream) const {
  detail::check_device_usable(device, "kv::Cache::to");
  Cache c;
  c.config_ = config_;
  c.packed_ = packed_.to(device, stream);
  c.scales_ = scales_.to(device, stream);
  c.centroids_ = centroids_.to(device, stream);
  c.boundaries_ = boundaries_.to(device, stream);
  if (signs_.defined()) c.signs_ = signs_.to(device, stream);
  if (exact_.defined()) c.exact_ = exact_.to(device, stream);
  if (device.is_cuda()) c.device_starts_ = Tensor::empty({config_.batch}, DType::i64, device);
  c.positions_ = positions_;
  return c;
}

void Cache::reset() { std::fill(positions_.begin(), positions_.end(), 0); }

namespace {

// The checks of x that do not depend on the write positions (x of `tokens` tokens per sequence).
void check_append_input(const Cache& c, const TensorView& x, int64_t tokens, const char* op) {
  detail::check_tensor(x, op, "x", x.rank, {DType::f32, DType::f16, DType::bf16});
  FRUGAL_CHECK(x.device == c.device(), invalid_argument, op,
               "x is on " << to_string(x.device) << " but the cache is on " << to_string(c.device()));
  FRUGAL_CHECK(tokens >= 1, invalid_argument, op, "x holds no tokens (T = 0); append needs T >= 1");
  FRUGAL_CHECK(x.stride(-1) == 1, invalid_argument, op,
               "the last dimension of x must be contiguous, got stride " << x.stride(-1));
}

// The kernel arguments of an append of x ([T, H, D], or [batch, T, H, D] when rank 4) into
// sequences [seq_begin, seq_begin + seq_count), with the layout facts and the kernel choice.
backend::AppendArgs append_args(const Cache& c, int seq_begin, int seq_count, const TensorView& x, int64_t tokens,
                                const AppendOptions& options, const char* op) {
  const CacheConfig& cfg = c.config();
  backend::AppendArgs a;
  a.x = x.data;
  a.x_dtype = x.dtype;
  const bool batched = x.rank == 4;
  a.x_stride_seq = batched ? x.stride(0) : 0;
  a.x_stride_tok = x.stride(batched ? 1 : 0);
  a.x_stride_head = x.stride(batched ? 2 : 1);
  a.seqs = seq_count;
  a.tokens = tokens;
  a.heads = cfg.num_kv_heads;
  a.dim = cfg.head_dim;
  a.bits = cfg.bits;
  a.capacity = cfg.capacity;
  a.sliding = cfg.sliding;
  const int64_t seq_bytes = static_cast<int64_t>(a.heads) * a.capacity * c.bytes_per_vector();
  a.packed = c.packed().data_as<uint8_t>() + seq_begin * seq_bytes;
  a.scales_f16 = cfg.scale_format == ScaleFormat::f16;
  a.scales = static_cast<char*>(c.scales().data()) +
             static_cast<int64_t>(seq_begin) * a.heads * a.capacity * static_cast<int64_t>(size_of(c.scales().dtype()));
  a.signs = c.signs().defined() ? c.signs().data_as<const float>() : nullptr;
  a.centroids = c.centroids().data_as<const float>();
  a.boundaries = c.boundaries().data_as<const float>();
  a.rule = cfg.scale_rule;
  a.host_starts = c.write_positions().data() + seq_begin;
  a.device = c.device().index;
  describe_layout(a);
  if (c.device().is_cuda()) {
    a.choice = resolve_append(a, cuda::device_caps(a.device), options.variant, op);
  } else {
    FRUGAL_CHECK(!options.variant, invalid_argument, op,
                 "a forced " << to_string(*options.variant) << " kernel needs a CUDA cache; this cache is on the cpu");
  }
  return a;
}

}  // namespace

void Cache::append(const TensorView& x, Stream stream, const AppendOptions& options) {
  constexpr const char* op = "kv::append";
  const int64_t h = config_.num_kv_heads, d = config_.head_dim;
  if (x.rank == 3) {
    FRUGAL_CHECK(config_.batch == 1, invalid_argument, op,
                 "x of rank 3 [T, H, D] needs a cache of batch 1; this cache holds " << config_.batch
                     << " sequences: pass x as [batch, T, H, D] or append(seq, x)");
    detail::check_shape(x, op, "x", {-1, h, d});
    append_impl(0, 1, x, x.size(0), stream, options);
    return;
  }
  FRUGAL_CHECK(x.rank == 4, invalid_argument, op, "x must be [T, H, D] or [batch, T, H, D], got " << x.describe());
  detail::check_shape(x, op, "x", {config_.batch, -1, h, d});
  append_impl(0, config_.batch, x, x.size(1), stream, options);
}

void Cache::append(int seq, const TensorView& x, Stream stream, const AppendOptions& options) {
  constexpr const char* op = "kv::append";
  FRUGAL_CHECK(seq >= 0 && seq < config_.batch, out_of_range, op,
               "sequence " << seq << " does not exist; the cache holds " << config_.batch);
  FRUGAL_CHECK(x.rank == 3, invalid_argument, op, "x must be [T, H, D] for one sequence, got " << x.describe());
  detail::check_shape(x, op, "x", {-1, config_.num_kv_heads, config_.head_dim});
  append_impl(seq, 1, x, x.size(0), stream, options);
}

std::optional<AppendChoice> Cache::append_choice(const TensorView& x, const AppendOptions& options) const {
  constexpr const char* op = "kv::append";
  const int64_t h = config_.num_kv_heads, d = config_.head_dim;
  FRUGAL_CHECK(x.rank == 3 || x.rank == 4, invalid_argument, op,
               "x must be [T, H, D] or [batch, T, H, D], got " << x.describe());
  if (x.rank == 3)
    detail::check_shape(x, op, "x", {-1, h, d});
  else
    detail::check_shape(x, op, "x", {config_.batch, -1, h, d});
  const int64_t tokens = x.size(x.rank - 3);
  check_append_input(*this, x, tokens, op);
  const backend::AppendArgs a = append_args(*this, 0, x.rank == 4 ? config_.batch : 1, x, tokens, options, op);
  if (device().is_cpu()) return std::nullopt;
  return a.choice;
}

void Cache::append_impl(int seq_begin, int seq_count, const TensorView& x, int64_t tokens, Stream stream,
                        const AppendOptions& options) {
  constexpr const char* op = "kv::append";
  check_append_input(*this, x, tokens, op);
  for (int s = seq_begin; s < seq_begin + seq_count; ++s) {
    const int64_t w = positions_[s];
    if (config_.sliding) {
      FRUGAL_CHECK(tokens <= config_.capacity, out_of_range, op,
                   "T = " << tokens << " tokens exceed the ring's capacity " << config_.capacity
                          << "; the first tokens would be overwritten by the last ones of the same call");
    } else {
      FRUGAL_CHECK(w + tokens <= config_.capacity, out_of_range, op,
                   "sequence " << s << ": writing " << tokens << " tokens at write_pos " << w
                               << " passes the global cache's capacity " << config_.capacity);
    }
  }
  backend::AppendArgs a = append_args(*this, seq_begin, seq_count, x, tokens, options, op);
  if (device().is_cpu()) {
    a.starts = a.host_starts;
    cpu::kv_append(a);
  } else {
    if (seq_count > backend::kInlineStarts || config_.capacity > INT32_MAX) {  // else passed by value
      const TensorView starts(const_cast<int64_t*>(a.host_starts), DType::i64, {seq_count});
      const TensorView dst(device_starts_.data(), DType::i64, {seq_count}, device());
      copy(starts, dst, stream);  // synchronous: the kernel after it reads the copy
      a.starts = device_starts_.data_as<const int64_t>();
    }
    cuda::kv_append(a, stream);
  }
  if (exact_.defined()) {
    backend::ExactArgs e;
    e.rows = exact_.data_as<uint16_t>() +
             static_cast<int64_t>(seq_begin) * config_.num_kv_heads * config_.exact_rows() * config_.head_dim;
    e.seqs = seq_count;
    e.heads = config_.num_kv_heads;
    e.dim = config_.head_dim;
    e.sinks = config_.sinks;
    e.window = config_.window;
    e.tokens = tokens;
    e.x = x.data;
    e.x_dtype = x.dtype;
    e.x_stride_seq = a.x_stride_seq;
    e.x_stride_tok = a.x_stride_tok;
    e.x_stride_head = a.x_stride_head;
    e.host_starts = a.host_starts;
    e.starts = a.starts;
    e.device = device().index;
    if (device().is_cpu())
      cpu::kv_store_exact(e);
    else
      cuda::kv_store_exact(e, stream);
  }
  for (int s = seq_begin; s < seq_begin + seq_count; ++s) positions_[s] += tokens;
}

void Cache::check_range(int seq, int64_t begin, int64_t end) const {
  constexpr const char* op = "kv::dequantize";
  FRUGAL_CHECK(seq >= 0 && seq < config_.batch, out_of_range, op,
               "sequence " << seq << " does not exist; the cache holds " << config_.batch);
  const int64_t w = positions_[seq];
  FRUGAL_CHECK(begin >= 0 && begin <= end, invalid_argument, op, "bad token range [" << begin << ", " << end << ")");
  FRUGAL_CHECK(end <= w, out_of_range, op,
               "token range [" << begin << ", " << end << ") passes write_pos " << w << " of sequence " << seq);
  FRUGAL_CHECK(begin >= first_held(seq) || end <= config_.sinks, out_of_range, op,
               "tokens before " << first_held(seq) << " have been overwritten in the ring of capacity "
                                << config_.capacity << " (but for its " << config_.sinks << " sinks); asked for ["
                                << begin << ", " << end << ")");
}

void Cache::dequantize(int seq, int64_t begin, int64_t end, const TensorView& out, Stream stream) const {
  constexpr const char* op = "kv::dequantize";
  check_range(seq, begin, end);
  detail::check_tensor(out, op, "out", 3, {DType::f32, DType::f16, DType::bf16});
  detail::check_shape(out, op, "out", {end - begin, config_.num_kv_heads, config_.head_dim});
  detail::check_contiguous(out, op, "out");
  FRUGAL_CHECK(out.device == device(), invalid_argument, op,
               "out is on " << to_string(out.device) << " but the cache is on " << to_string(device()));
  if (end == begin) return;
  backend::DequantizeArgs a;
  const int64_t seq_bytes = static_cast<int64_t>(config_.num_kv_heads) * config_.capacity * bytes_per_vector();
  a.packed = packed_.data_as<const uint8_t>() + seq * seq_bytes;
  a.scales_f16 = config_.scale_format == ScaleFormat::f16;
  a.scales = static_cast<const char*>(scales_.data()) + static_cast<int64_t>(seq) * config_.num_kv_heads *
                                                            config_.capacity * static_cast<int64_t>(size_of(scales_.dtype()));
  a.heads = config_.num_kv_heads;
  a.dim = config_.head_dim;
  a.bits = config_.bits;
  a.capacity = config_.capacity;
  a.sliding = config_.sliding;
  a.begin = begin;
  a.count = end - begin;
  a.out = out.data;
  a.out_dtype = out.dtype;
  a.signs = signs_.defined() ? signs_.data_as<const float>() : nullptr;
  a.centroids = centroids_.data_as<const float>();
  a.device = device().index;
  // The codes of the tokens that are not in exact rows (a range among a ring's sinks has none).
  if (begin >= first_held(seq)) {
    if (device().is_cpu()) {
      cpu::kv_dequantize(a);
    } else {
      cuda::kv_dequantize(a, stream);
    }
  }
  if (!exact_.defined()) return;
  // The exact rows' tokens overwrite theirs: the sinks, then the window.
  backend::ExactArgs e;
  e.rows = exact_.data_as<uint16_t>() + static_cast<int64_t>(seq) * config_.num_kv_heads * config_.exact_rows() * config_.head_dim;
  e.heads = config_.num_kv_heads;
  e.dim = config_.head_dim;
  e.sinks = config_.sinks;
  e.window = config_.window;
  e.out_dtype = out.dtype;
  e.device = device().index;
  const int64_t row_elems = static_cast<int64_t>(config_.num_kv_heads) * config_.head_dim;
  const int64_t window_begin = std::max<int64_t>(config_.sinks, positions_[seq] - config_.window);
  auto load = [&](int64_t lo, int64_t hi) {
    if (lo >= hi) return;
    e.begin = lo;
    e.tokens = hi - lo;
    e.out = static_cast<char*>(out.data) + (lo - begin) * row_elems * static_cast<int64_t>(size_of(out.dtype));
    if (device().is_cpu())
      cpu::kv_load_exact(e);
    else
      cuda::kv_load_exact(e, stream);
  };
  load(begin, std::min<int64_t>(end, config_.sinks));
  load(std::max(begin, window_begin), end);
}

Tensor Cache::dequantize(int seq, int64_t begin, int64_t end, DType dtype, Stream stream) const {
  check_range(seq, begin, end);  // before the output is sized: a far end is out_of_range, not an allocation
  Tensor out = Tensor::empty({end - begin, config_.num_kv_heads, config_.head_dim}, dtype, device());
  dequantize(seq, begin, end, out.view(), stream);
  return out;
}

int64_t count_nonfinite_scales(const Cache& cache, int seq, Stream stream) {
  const CacheConfig& c = cache.config();
  FRUGAL_CHECK(seq >= 0 && seq < c.batch, out_of_range, "kv::count_nonfinite_scales",
               "sequence " << seq << " does not exist; the cache holds " << c.batch);
  const int64_t per_seq = static_cast<int64_t>(c.num_kv_heads) * c.capacity;
  const DType dtype = cache.scales().dtype();
  const TensorView src(static_cast<char*>(cache.scales().data()) + seq * per_seq * static_cast<int64_t>(size_of(dtype)),
                       dtype, {per_seq}, cache.device());
  Tensor host = Tensor::empty({per_seq}, dtype);
  copy(src, host.view(), stream);
  const bool f16 = c.scale_format == ScaleFormat::f16;
  int64_t n = 0;
  for (int h = 0; h < c.num_kv_heads; ++h)
    for (int64_t t = cache.first_held(seq); t < cache.write_pos(seq); ++t)
      n += std::isnan(backend::load_scale(host.data(), f16, h * c.capacity + cache.slot(t)));
  return n;
}

}  // namespace frugal::kv
