// Public decode attention: validate once, resolve the token ranges, choose the kernel
// (core/attention_choose.h), then dispatch the choice to the CPU or CUDA backend.
#include "frugal/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/attention_backend.h"
#include "core/attention_choose.h"
#include "core/validate.h"

namespace frugal::attention {

namespace {

constexpr const char* kOp = "attention::decode_attention";

void check_caches(const kv::Cache& k, const kv::Cache& v) {
  const kv::CacheConfig& a = k.config();
  const kv::CacheConfig& b = v.config();
  FRUGAL_CHECK(a.batch == b.batch && a.num_kv_heads == b.num_kv_heads && a.head_dim == b.head_dim &&
                   a.capacity == b.capacity && a.sliding == b.sliding,
               invalid_argument, kOp,
               "the K and V caches must have the same shape, got K [batch "
                   << a.batch << ", heads " << a.num_kv_heads << ", head_dim " << a.head_dim << ", capacity "
                   << a.capacity << (a.sliding ? ", ring" : ", global") << "] and V [batch " << b.batch << ", heads "
                   << b.num_kv_heads << ", head_dim " << b.head_dim << ", capacity " << b.capacity
                   << (b.sliding ? ", ring" : ", global") << "]");
  FRUGAL_CHECK(a.window == b.window && a.sinks == b.sinks, invalid_argument, kOp,
               "the K and V caches must keep the same exact rows, got K window " << a.window << " and sinks " << a.sinks
                                                                              << ", V window " << b.window
                                                                              << " and sinks " << b.sinks);
  FRUGAL_CHECK(k.device() == v.device(), invalid_argument, kOp,
               "the K cache is on " << to_string(k.device()) << " but the V cache is on " << to_string(v.device()));
  for (int s = 0; s < a.batch; ++s)
    FRUGAL_CHECK(k.write_pos(s) == v.write_pos(s), invalid_argument, kOp,
                 "sequence " << s << ": the K cache holds " << k.write_pos(s) << " tokens but the V cache "
                             << v.write_pos(s) << "; append K and V together");
}

void check_query(const TensorView& q, const kv::Cache& k) {
  const kv::CacheConfig& c = k.config();
  detail::check_tensor(q, kOp, "q", 3, {DType::f32, DType::f16, DType::bf16});
  detail::check_shape(q, kOp, "q", {c.batch, -1, c.head_dim});
  const int64_t hq = q.size(1);
  FRUGAL_CHECK(hq >= 1 && hq % c.num_kv_heads == 0, invalid_argument, kOp,
               "the query heads Hq must be a positive multiple of the K/V heads Hkv = " << c.num_kv_heads
                                                                                        << ", got Hq = " << hq);
  FRUGAL_CHECK(q.stride(2) == 1, invalid_argument, kOp,
               "the last dimension of q must be contiguous, got stride " << q.stride(2));
  FRUGAL_CHECK(q.device == k.device(), invalid_argument, kOp,
               "q is on " << to_string(q.device) << " but the caches are on " << to_string(k.device()));
}

// The absolute token range [begin, end) each sequence attends to (see the header comment).
void resolve_ranges(const kv::Cache& k, std::span<const int64_t> lengths, std::vector<int64_t>& begin,
                    std::vector<int64_t>& end) {
  const kv::CacheConfig& c = k.config();
  begin.resize(c.batch);
  end.resize(c.batch);
  if (lengths.empty()) {
    for (int s = 0; s < c.batch; ++s) {
      begin[s] = k.first_held(s);
      end[s] = k.write_pos(s);
    }
    return;
  }
  FRUGAL_CHECK(static_cast<int64_t>(lengths.size()) == c.batch, invalid_argument, kOp,
               "lengths must hold one entry per sequence (" << c.batch << "), got " << lengths.size());
  for (int s = 0; s < c.batch; ++s) {
    const int64_t len = lengths[s];
    FRUGAL_CHECK(len >= 0, invalid_argument, kOp, "lengths[" << s << "] = " << len << " is negative");
    FRUGAL_CHECK(len <= k.write_pos(s), out_of_range, kOp,
                 "lengths[" << s << "] = " << len << " passes what sequence " << s << " has written (write_pos "
                            << k.write_pos(s) << ")");
    const int64_t lo = c.sliding ? std::max<int64_t>(0, len - c.capacity) : 0;
    FRUGAL_CHECK(lo >= k.first_held(s) || len == 0, out_of_range, kOp,
                 "lengths[" << s << "] = " << len << " attends to tokens [" << lo << ", " << len
                            << ") but the ring of capacity " << c.capacity << " holds only [" << k.first_held(s) << ", "
                            << k.write_pos(s) << ") of sequence " << s);
    begin[s] = lo;
    end[s] = len;
  }
}

backend::CacheArgs cache_args(const kv::Cache& c) {
  backend::CacheArgs a;
  a.packed = c.packed().data_as<const uint8_t>();
  a.scales = c.scales().data();
  a.scales_f16 = c.config().scale_format == kv::ScaleFormat::f16;
  a.signs = c.signs().defined() ? c.signs().data_as<const float>() : nullptr;
  a.centroids = c.centroids().data_as<const float>();
  a.bits = c.config().bits;
  return a;
}

// A validated call: its token ranges (the codes' ones, and with exact rows the sinks' and the
// window's: see split_exact), softmax scale and what its choice depends on.
struct Call {
  std::vector<int64_t> begin, end;
  std::vector<int64_t> sink_end, win_begin, win_end;
  float scale = 1.0f;
  DecodeProblem problem;
};

// Splits each attended range [begin, end) of caches with exact rows into the sinks [0, min(sinks,
// end)), the codes' tokens [max(begin, sinks), q) and the window's [q, end), q the first token at or
// after them that the window holds (the window holds the newest `window` tokens written).
void split_exact(const kv::Cache& k, Call& call) {
  const kv::CacheConfig& c = k.config();
  const int64_t batch = c.batch;
  call.sink_end.resize(batch);
  call.win_begin.resize(batch);
  call.win_end.resize(batch);
  for (int b = 0; b < batch; ++b) {
    const int64_t end = call.end[b];
    const int64_t codes_begin = std::min(end, std::max<int64_t>(call.begin[b], c.sinks));
    const int64_t codes_end = std::max(codes_begin, std::min(end, k.write_pos(b) - c.window));
    call.sink_end[b] = std::min<int64_t>(c.sinks, end);
    call.win_begin[b] = codes_end;
    call.win_end[b] = end;
    call.begin[b] = codes_begin;
    call.end[b] = codes_end;
  }
}

// Validates q, the caches and the options (everything but out and the workspace's size).
Call prepare(const TensorView& q, const kv::Cache& k, const kv::Cache& v, const DecodeOptions& options) {
  check_caches(k, v);
  check_query(q, k);
  const kv::CacheConfig& c = k.config();
  Call call;
  call.scale = options.softmax_scale.value_or(static_cast<float>(1.0 / std::sqrt(double(c.head_dim))));
  FRUGAL_CHECK(std::isfinite(call.scale), invalid_argument, kOp, "softmax_scale must be finite, got " << call.scale);
  resolve_ranges(k, options.lengths, call.begin, call.end);
  if (c.exact_rows() > 0) split_exact(k, call);

  DecodeProblem& p = call.problem;
  p.batch = c.batch;
  p.q_heads = static_cast<int>(q.size(1));
  p.kv_heads = c.num_kv_heads;
  p.dim = c.head_dim;
  p.k_bits = c.bits;
  p.v_bits = v.config().bits;
  p.capacity = c.capacity;
  for (int b = 0; b < c.batch; ++b) p.max_len = std::max(p.max_len, call.end[b] - call.begin[b]);
  p.q_dtype = q.dtype;
  FRUGAL_CHECK(options.math == Math::automatic || options.math == Math::f32 || options.math == Math::f16,
               invalid_argument, kOp, "options.math must be automatic, f32 or f16, got " << static_cast<int>(options.math));
  p.math = options.math;
  p.variant = options.variant;
  p.num_splits = options.num_splits;
  p.exact_rows = c.exact_rows() > 0;

  const int64_t splits_cap = backend::max_splits(p.batch, p.kv_heads, p.q_heads / p.kv_heads, p.capacity);
  FRUGAL_CHECK(
      options.num_splits >= 0 && options.num_splits <= splits_cap, invalid_argument, kOp,
      "num_splits must be 0 (automatic) or 1.." << splits_cap << " for this shape, got " << options.num_splits);
  if (options.workspace.data != nullptr) {
    FRUGAL_CHECK(options.workspace.dtype == DType::u8 && options.workspace.is_contiguous(), invalid_argument, kOp,
                 "workspace must be a contiguous u8 tensor, got " << options.workspace.describe());
    FRUGAL_CHECK(options.workspace.device == q.device, invalid_argument, kOp,
                 "workspace is on " << to_string(options.workspace.device) << " but q is on " << to_string(q.device));
  }
  return call;
}

// The choice for a validated call on `device` (usable: checked by the caller).
DecodeChoice choose_on(const DecodeProblem& p, Device device) {
  if (device.is_cpu()) return choose(p, DeviceCaps{}, 0);
  const DeviceCaps caps = cuda::device_caps(device.index);
  const DecodeVariant variant = choose_variant(p, caps);
  return choose(p, caps, cuda::decode_attention_resident_blocks(variant, p.dim, p.k_bits, p.v_bits, device.index));
}

}  // namespace

size_t decode_attention_workspace_bytes(const TensorView& q, const kv::Cache& k) {
  check_query(q, k);
  if (k.device().is_cpu()) return 0;
  const kv::CacheConfig& c = k.config();
  const int q_heads = static_cast<int>(q.size(1));
  const int64_t splits = backend::max_splits(c.batch, c.num_kv_heads, q_heads / c.num_kv_heads, c.capacity);
  return backend::workspace_bytes(c.batch, q_heads, c.head_dim, splits, c.exact_rows() > 0);
}

DecodeChoice choose_decode(const TensorView& q, const kv::Cache& k, const kv::Cache& v, const DecodeOptions& options) {
  const Call call = prepare(q, k, v, options);
  detail::check_device_usable(q.device, kOp);
  return choose_on(call.problem, q.device);
}

void decode_attention(const TensorView& q, const kv::Cache& k, const kv::Cache& v, const TensorView& out,
                      const DecodeOptions& options, Stream stream) {
  const Call call = prepare(q, k, v, options);
  const kv::CacheConfig& c = k.config();
  const int q_heads = call.problem.q_heads;
  detail::check_tensor(out, kOp, "out", 3, {DType::f32, DType::f16, DType::bf16});
  FRUGAL_CHECK(out.dtype == q.dtype || out.dtype == DType::f32, invalid_argument, kOp,
               "out must have q's dtype (" << to_string(q.dtype) << ") or f32, got " << to_string(out.dtype));
  detail::check_shape(out, kOp, "out", {c.batch, q_heads, c.head_dim});
  detail::check_contiguous(out, kOp, "out");
  detail::check_same_device(q, out, kOp, "q", "out");
  const Device device = q.device;
  if (out.empty()) return;
  detail::check_device_usable(device, kOp);

  backend::DecodeArgs a;
  a.q = q.data;
  a.q_dtype = q.dtype;
  a.q_stride_b = q.stride(0);
  a.q_stride_h = q.stride(1);
  a.out = out.data;
  a.out_dtype = out.dtype;
  a.batch = c.batch;
  a.q_heads = q_heads;
  a.kv_heads = c.num_kv_heads;
  a.dim = c.head_dim;
  a.capacity = c.capacity;
  a.sliding = c.sliding;
  a.k = cache_args(k);
  a.v = cache_args(v);
  a.begin = call.begin.data();
  a.end = call.end.data();
  a.softmax_scale = call.scale;
  a.choice = choose_on(call.problem, device);
  backend::ExactArgs exact;
  if (c.exact_rows() > 0) {
    exact.k = k.exact().data_as<const uint16_t>();
    exact.v = v.exact().data_as<const uint16_t>();
    exact.sinks = c.sinks;
    exact.window = c.window;
    exact.sink_end = call.sink_end.data();
    exact.win_begin = call.win_begin.data();
    exact.win_end = call.win_end.data();
    a.exact = &exact;
  }
  if (options.workspace.data != nullptr) {
    a.workspace = options.workspace.data;
    a.workspace_bytes = options.workspace.nbytes();
    const size_t need = backend::workspace_bytes(
        c.batch, q_heads, c.head_dim, backend::max_splits(c.batch, c.num_kv_heads, q_heads / c.num_kv_heads, c.capacity),
        c.exact_rows() > 0);
    FRUGAL_CHECK(
        a.workspace_bytes >= need, invalid_argument, kOp,
        "workspace holds " << a.workspace_bytes << " bytes, needs " << need << " (decode_attention_workspace_bytes)");
  }
  if (device.is_cpu()) {
    cpu::decode_attention(a);
  } else {
    cuda::decode_attention(a, device, stream);
  }
}

Tensor decode_attention(const TensorView& q, const kv::Cache& k, const kv::Cache& v, const DecodeOptions& options,
                        Stream stream) {
  check_query(q, k);
  Tensor out = Tensor::empty({q.size(0), q.size(1), q.size(2)}, q.dtype, q.device);
  decode_attention(q, k, v, out.view(), options, stream);
  return out;
}

}  // namespace frugal::attention
