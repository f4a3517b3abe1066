// The paged KV cache's public operations: the config and block-table checks, the pools, and the
// append and dequantize, which map each token to its slot on the host and then run the
// per-sequence kernels (core/kv_backend.h) with AppendArgs::slots / DequantizeArgs::slots set.
#include "frugal/paged_cache.h"

#include <bit>
#include <climits>
#include <cmath>
#include <vector>

#include "core/backend.h"
#include "core/device_caps.h"
#include "core/kv_backend.h"
#include "core/kv_choose.h"
#include "core/validate.h"

namespace frugal::kv {

namespace {

constexpr const char* kAppendOp = "kv::PagedCache::append";
constexpr const char* kDequantizeOp = "kv::PagedCache::dequantize";

bool is_pow2_dim(int64_t d) { return d >= 4 && d <= 4096 && std::has_single_bit(static_cast<uint64_t>(d)); }

void check_bits(int bits, int head_dim, const char* name, const char* op) {
  FRUGAL_CHECK(bits == 2 || bits == 3 || bits == 4 || bits == 8, invalid_argument, op,
               name << " must be 2, 3, 4 or 8, got " << bits);
  FRUGAL_CHECK(head_dim * bits % 8 == 0, invalid_argument, op,
               "head_dim × " << name << " must fill whole bytes, got head_dim " << head_dim << " at " << bits
                             << " bits (" << head_dim * bits << " bits per vector)");
}

Tensor upload(const std::vector<float>& v, Device device, Stream stream) {
  Tensor host = Tensor::empty({static_cast<int64_t>(v.size())}, DType::f32);
  std::copy(v.begin(), v.end(), host.data_as<float>());
  return device.is_cpu() ? host : host.to(device, stream);
}

// The slot of token `pos` of sequence b: its page's slots start at page · page_size.
int32_t slot_of(const PageTable& t, int b, int64_t pos, int page_size) {
  const int32_t page = t.indices[t.indptr[b] + pos / page_size];
  return static_cast<int32_t>(static_cast<int64_t>(page) * page_size + pos % page_size);
}

// k or v of an append or dequantize: [T, Hkv, D], a float dtype, on the cache's device.
void check_tokens(const TensorView& x, const PagedCache& c, const char* op, const char* name, int64_t tokens) {
  const PagedConfig& cfg = c.config();
  detail::check_tensor(x, op, name, 3, {DType::f32, DType::f16, DType::bf16});
  detail::check_shape(x, op, name, {tokens, cfg.num_kv_heads, cfg.head_dim});
  FRUGAL_CHECK(x.device == c.device(), invalid_argument, op,
               name << " is on " << to_string(x.device) << " but the cache is on " << to_string(c.device()));
}

}  // namespace

void validate(const PagedConfig& c, const char* op) {
  FRUGAL_CHECK(c.num_kv_heads >= 1, invalid_argument, op, "num_kv_heads must be at least 1, got " << c.num_kv_heads);
  FRUGAL_CHECK(is_pow2_dim(c.head_dim), invalid_argument, op,
               "head_dim must be a power of two in [4, 4096], got " << c.head_dim);
  FRUGAL_CHECK(c.page_size == 16 || c.page_size == 32 || c.page_size == 64, invalid_argument, op,
               "page_size must be 16, 32 or 64 tokens, got " << c.page_size);
  FRUGAL_CHECK(c.num_pages >= 1, invalid_argument, op, "num_pages must be at least 1, got " << c.num_pages);
  FRUGAL_CHECK(c.num_pages <= INT32_MAX / c.page_size, invalid_argument, op,
               "the pool's slots (num_pages × page_size = " << c.num_pages << " × " << c.page_size
                                                              << ") must stay below 2^31: slots are 32-bit");
  check_bits(c.k_bits, c.head_dim, "k_bits", op);
  check_bits(c.v_bits, c.head_dim, "v_bits", op);
  FRUGAL_CHECK(c.scale_rule == ScaleRule::l2_norm || c.scale_rule == ScaleRule::least_squares, invalid_argument, op,
               "unknown scale rule " << static_cast<int>(c.scale_rule));
  detail::checked_product({c.num_kv_heads, c.num_pages, c.page_size, (c.head_dim * (c.k_bits + c.v_bits)) / 8 + 8},
                          op, "the pools' size (heads × slots × (K and V row bytes + 8))");
}

std::vector<int64_t> sequence_lengths(const PageTable& t, const PagedConfig& config, const char* op) {
  FRUGAL_CHECK(!t.indptr.empty(), invalid_argument, op,
               "the page table's indptr must hold B + 1 entries (at least one), got none");
  const int batch = t.batch();
  FRUGAL_CHECK(t.last_page_len.size() == static_cast<size_t>(batch), invalid_argument, op,
               "last_page_len must hold one entry per sequence (B = " << batch << " from indptr's " << batch + 1
                                                                      << " entries), got " << t.last_page_len.size());
  FRUGAL_CHECK(t.indptr[0] == 0, invalid_argument, op, "indptr[0] must be 0, got " << t.indptr[0]);
  for (int b = 0; b < batch; ++b)
    FRUGAL_CHECK(t.indptr[b + 1] >= t.indptr[b], invalid_argument, op,
                 "indptr must be non-decreasing, got indptr[" << b << "] = " << t.indptr[b] << " > indptr[" << b + 1
                                                              << "] = " << t.indptr[b + 1]);
  FRUGAL_CHECK(static_cast<size_t>(t.indptr[batch]) == t.indices.size(), invalid_argument, op,
               "indptr[B] = " << t.indptr[batch] << " must equal the number of page indices, got " << t.indices.size());
  std::vector<int64_t> lengths(batch);
  for (int b = 0; b < batch; ++b) {
    for (int32_t e = t.indptr[b]; e < t.indptr[b + 1]; ++e)
      FRUGAL_CHECK(t.indices[e] >= 0 && t.indices[e] < config.num_pages, out_of_range, op,
                   "indices[" << e << "] = " << t.indices[e] << " (a page of sequence " << b
                              << ") is outside the pool of " << config.num_pages << " pages");
    const int64_t pages = t.indptr[b + 1] - t.indptr[b];
    const int32_t last = t.last_page_len[b];
    if (pages == 0) {
      FRUGAL_CHECK(last == 0, invalid_argument, op,
                   "sequence " << b << " has no pages, so its last_page_len must be 0, got " << last);
      lengths[b] = 0;
    } else {
      FRUGAL_CHECK(last >= 1 && last <= config.page_size, invalid_argument, op,
                   "last_page_len[" << b << "] = " << last << " must be in [1, page_size = " << config.page_size
                                    << "] for a sequence with pages");
      lengths[b] = (pages - 1) * config.page_size + last;
    }
  }
  return lengths;
}

PagedCache::PagedCache(const PagedConfig& config, Device device, Stream stream) : config_(config) {
  constexpr const char* op = "kv::PagedCache";
  validate(config, op);
  detail::check_device_usable(device, op);
  const int64_t h = config.num_kv_heads, slots = config.num_pages * config.page_size;
  const int64_t k_row = config.head_dim * config.k_bits / 8, v_row = config.head_dim * config.v_bits / 8;
  const auto zeros = [&](std::initializer_list<int64_t> shape, DType dtype) {
    return Tensor::zeros(std::span<const int64_t>(shape.begin(), shape.size()), dtype, device, stream);
  };
  k_packed_ = zeros({h, slots, k_row}, DType::u8);
  k_scales_ = zeros({h, slots}, DType::f32);
  v_packed_ = zeros({h, slots, v_row}, DType::u8);
  v_scales_ = zeros({h, slots}, DType::f32);
  const Codebook& kc = lloyd_max_codebook(config.k_bits);
  const Codebook& vc = lloyd_max_codebook(config.v_bits);
  k_centroids_ = upload(kc.centroids, device, stream);
  k_boundaries_ = upload(kc.boundaries, device, stream);
  v_centroids_ = upload(vc.centroids, device, stream);
  v_boundaries_ = upload(vc.boundaries, device, stream);
  if (config.k_sign_seed) k_signs_ = upload(random_signs(*config.k_sign_seed, config.head_dim), device, stream);
  if (config.v_sign_seed) v_signs_ = upload(random_signs(*config.v_sign_seed, config.head_dim), device, stream);
}

void PagedCache::append(const TensorView& k, const TensorView& v, std::span<const int32_t> new_indptr,
                        const PageTable& table, Stream stream) {
  constexpr const char* op = kAppendOp;
  const std::vector<int64_t> lengths = sequence_lengths(table, config_, op);
  const int batch = table.batch();
  FRUGAL_CHECK(k.rank == 3, invalid_argument, op, "k must be [T, Hkv, D], got " << k.describe());
  const int64_t tokens = k.size(0);
  check_tokens(k, *this, op, "k", tokens);
  check_tokens(v, *this, op, "v", tokens);
  FRUGAL_CHECK(k.stride(2) == 1 && v.stride(2) == 1, invalid_argument, op,
               "the last dimension of k and v must be contiguous, got strides " << k.stride(2) << " and "
                                                                                << v.stride(2));
  FRUGAL_CHECK(new_indptr.size() == static_cast<size_t>(batch) + 1, invalid_argument, op,
               "new_indptr must hold B + 1 = " << batch + 1 << " entries, got " << new_indptr.size());
  FRUGAL_CHECK(new_indptr[0] == 0, invalid_argument, op, "new_indptr[0] must be 0, got " << new_indptr[0]);
  for (int b = 0; b < batch; ++b) {
    const int64_t n = static_cast<int64_t>(new_indptr[b + 1]) - new_indptr[b];
    FRUGAL_CHECK(n >= 0, invalid_argument, op,
                 "new_indptr must be non-decreasing, got new_indptr[" << b << "] = " << new_indptr[b]
                                                                      << " > new_indptr[" << b + 1
                                                                      << "] = " << new_indptr[b + 1]);
    FRUGAL_CHECK(n <= lengths[b], invalid_argument, op,
                 "sequence " << b << " appends " << n << " tokens but the table gives it " << lengths[b]
                             << "; the table's lengths are those after the append and include the new tokens");
  }
  FRUGAL_CHECK(new_indptr[batch] == tokens, invalid_argument, op,
               "new_indptr[B] = " << new_indptr[batch] << " must equal the tokens of k and v, T = " << tokens);

  // Every page written is referenced once in the whole table: mark the written pages (a page
  // written twice is already a conflict), then look for a second reference to a marked page.
  const int ps = config_.page_size;
  if (page_stamp_.empty()) {
    page_stamp_.assign(static_cast<size_t>(config_.num_pages), 0);
    page_written_.assign(static_cast<size_t>(config_.num_pages), 0);
  }
  if (++stamp_ == 0) {  // the stamps wrapped: clear the marks once
    std::fill(page_stamp_.begin(), page_stamp_.end(), 0);
    stamp_ = 1;
  }
  struct Written {
    int seq;
    int32_t entry;  // its entry in table.indices
  };
  std::vector<Written> written;
  for (int b = 0; b < batch; ++b) {
    const int64_t n = new_indptr[b + 1] - new_indptr[b];
    if (n == 0) continue;
    for (int64_t p = (lengths[b] - n) / ps; p <= (lengths[b] - 1) / ps; ++p) {
      const int32_t entry = table.indptr[b] + static_cast<int32_t>(p);
      const int32_t page = table.indices[entry];
      FRUGAL_CHECK(page_stamp_[page] != stamp_, invalid_argument, op,
                   "page " << page << " is written by sequence " << written[page_written_[page]].seq
                           << " and by sequence " << b
                           << "; a page that is written must be referenced once in the whole table");
      page_stamp_[page] = stamp_;
      page_written_[page] = static_cast<int32_t>(written.size());
      written.push_back({b, entry});
    }
  }
  for (int b = 0; b < batch; ++b)
    for (int32_t e = table.indptr[b]; e < table.indptr[b + 1]; ++e) {
      const int32_t page = table.indices[e];
      if (page_stamp_[page] != stamp_) continue;
      const Written& w = written[page_written_[page]];
      FRUGAL_CHECK(e == w.entry, invalid_argument, op,
                   "page " << page << " is written by sequence " << w.seq << " and also referenced by "
                           << (b == w.seq ? "another entry of the same sequence" : "sequence " + std::to_string(b))
                           << "; a page that is written must be referenced once in the whole table (copy a shared "
                              "page before writing into it)");
    }

  if (tokens == 0) return;
  host_slots_.resize(static_cast<size_t>(tokens));
  for (int b = 0; b < batch; ++b) {
    const int64_t n = new_indptr[b + 1] - new_indptr[b];
    for (int64_t i = 0; i < n; ++i) host_slots_[new_indptr[b] + i] = slot_of(table, b, lengths[b] - n + i, ps);
  }

  const auto args = [&](const TensorView& x, int bits, const Tensor& packed, const Tensor& scales,
                        const Tensor& signs, const Tensor& centroids, const Tensor& boundaries) {
    backend::AppendArgs a;
    a.x = x.data;
    a.x_dtype = x.dtype;
    a.x_stride_tok = x.stride(0);
    a.x_stride_head = x.stride(1);
    a.seqs = 1;
    a.tokens = tokens;
    a.heads = config_.num_kv_heads;
    a.dim = config_.head_dim;
    a.bits = bits;
    a.capacity = slots();
    a.sliding = false;
    a.packed = packed.data_as<uint8_t>();
    a.scales = scales.data_as<float>();
    a.signs = signs.defined() ? signs.data_as<const float>() : nullptr;
    a.centroids = centroids.data_as<const float>();
    a.boundaries = boundaries.data_as<const float>();
    a.rule = config_.scale_rule;
    a.device = device().index;
    describe_layout(a);
    return a;
  };
  backend::AppendArgs ak = args(k, config_.k_bits, k_packed_, k_scales_, k_signs_, k_centroids_, k_boundaries_);
  backend::AppendArgs av = args(v, config_.v_bits, v_packed_, v_scales_, v_signs_, v_centroids_, v_boundaries_);
  if (device().is_cpu()) {
    ak.slots = av.slots = host_slots_.data();
    cpu::kv_append(ak);
    cpu::kv_append(av);
    return;
  }
  // The same kernel choice as kv::Cache::append makes for the same vectors.
  const DeviceCaps caps = cuda::device_caps(device().index);
  ak.choice = resolve_append(ak, caps, std::nullopt, op);
  av.choice = resolve_append(av, caps, std::nullopt, op);
  if (!device_slots_.defined() || device_slots_.numel() < tokens)
    device_slots_ = Tensor::empty({std::min(slots(), std::max(tokens, 2 * device_slots_.numel()))}, DType::i32,
                                  device());
  cuda::memcpy_to_device_async(device_slots_.data(), host_slots_.data(), sizeof(int32_t) * tokens, stream);
  ak.slots = av.slots = device_slots_.data_as<const int32_t>();
  cuda::kv_append(ak, stream);
  cuda::kv_append(av, stream);
}

void PagedCache::dequantize(const PageTable& table, int b, int64_t begin, int64_t end, const TensorView& k_out,
                            const TensorView& v_out, Stream stream) const {
  constexpr const char* op = kDequantizeOp;
  const std::vector<int64_t> lengths = sequence_lengths(table, config_, op);
  FRUGAL_CHECK(b >= 0 && b < table.batch(), out_of_range, op,
               "sequence " << b << " does not exist; the table holds " << table.batch());
  FRUGAL_CHECK(begin >= 0 && begin <= end, invalid_argument, op, "bad token range [" << begin << ", " << end << ")");
  FRUGAL_CHECK(end <= lengths[b], out_of_range, op,
               "token range [" << begin << ", " << end << ") passes the " << lengths[b] << " tokens of sequence " << b);
  const int64_t count = end - begin;
  check_tokens(k_out, *this, op, "k_out", count);
  check_tokens(v_out, *this, op, "v_out", count);
  detail::check_contiguous(k_out, op, "k_out");
  detail::check_contiguous(v_out, op, "v_out");
  if (count == 0) return;
  std::vector<int32_t> slots_host(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) slots_host[i] = slot_of(table, b, begin + i, config_.page_size);

  const auto args = [&](const TensorView& out, int bits, const Tensor& packed, const Tensor& scales,
                        const Tensor& signs, const Tensor& centroids) {
    backend::DequantizeArgs a;
    a.packed = packed.data_as<const uint8_t>();
    a.scales = scales.data_as<const float>();
    a.heads = config_.num_kv_heads;
    a.dim = config_.head_dim;
    a.bits = bits;
    a.capacity = slots();
    a.sliding = false;
    a.begin = begin;
    a.count = count;
    a.out = out.data;
    a.out_dtype = out.dtype;
    a.signs = signs.defined() ? signs.data_as<const float>() : nullptr;
    a.centroids = centroids.data_as<const float>();
    a.device = device().index;
    return a;
  };
  backend::DequantizeArgs ak = args(k_out, config_.k_bits, k_packed_, k_scales_, k_signs_, k_centroids_);
  backend::DequantizeArgs av = args(v_out, config_.v_bits, v_packed_, v_scales_, v_signs_, v_centroids_);
  if (device().is_cpu()) {
    ak.slots = av.slots = slots_host.data();
    cpu::kv_dequantize(ak);
    cpu::kv_dequantize(av);
    return;
  }
  // The reference path: a device copy of the slots for this call, freed (after the kernels, as
  // freeing device memory waits for the device) when it returns.
  const Tensor slots_device = Tensor::empty({count}, DType::i32, device());
  cuda::memcpy_to_device_async(slots_device.data(), slots_host.data(), sizeof(int32_t) * count, stream);
  ak.slots = av.slots = slots_device.data_as<const int32_t>();
  cuda::kv_dequantize(ak, stream);
  cuda::kv_dequantize(av, stream);
}

}  // namespace frugal::kv
