// The paged KV cache: one layer's K and V for many sequences in a pool of fixed-size pages, with
// block tables in the convention FlashInfer uses, so a serving stack can hold frugal's cache the
// way it already describes its pages. Every vector is quantized exactly as in the per-sequence
// format (frugal/kv_cache.h: the same codebooks, transform, scale rules and NaN flagging; a vector
// gets the same packed bytes and scale in either format).
//
// Format (paged format version 1, kPagedFormatVersion):
//   k_packed  [Hkv, num_pages · page_size, D · k_bits / 8]  u8
//   k_scales  [Hkv, num_pages · page_size]                  f32
//   v_packed  [Hkv, num_pages · page_size, D · v_bits / 8]  u8
//   v_scales  [Hkv, num_pages · page_size]                  f32
// Token slot s = page · page_size + offset (offset in [0, page_size)). The pools are head-major:
// the tokens of one page of one head are one contiguous block (page_size rows), which is what an
// attention block reading one K/V head streams; K and V are separate pools because their widths
// may differ. Scales stay f32 so a vector's bytes equal the per-sequence format's.
//
// Block tables (host memory, FlashInfer's paged_kv_indptr / indices / last_page_len): sequence b
// owns the pages indices[indptr[b] .. indptr[b+1]) in token order; its last page holds
// last_page_len[b] ∈ [1, page_size] tokens, so it holds
//   L_b = (indptr[b+1] − indptr[b] − 1) · page_size + last_page_len[b]
// tokens (L_b = 0 for a sequence with no pages, whose last_page_len must be 0). Token t of sequence
// b sits in slot indices[indptr[b] + t / page_size] · page_size + t % page_size. Pages may be shared
// between sequences for reading (a common prefix); a write to a page that any other sequence (or
// another entry of the same one) also references is refused.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "frugal/kv_cache.h"
#include "frugal/tensor.h"

namespace frugal::kv {

constexpr int kPagedFormatVersion = 1;

struct PagedConfig {
  int num_kv_heads = 8;
  int head_dim = 128;     // power of two in [4, 4096]
  int page_size = 16;     // 16, 32 or 64 tokens
  int64_t num_pages = 0;  // pages in the pool, ≥ 1, with num_pages · page_size < 2^31 (slots are 32-bit)
  int k_bits = 4;         // 2, 3, 4 or 8 bits per coordinate (each: head_dim × bits fills whole bytes)
  int v_bits = 4;
  ScaleRule scale_rule = ScaleRule::l2_norm;
  std::optional<uint64_t> k_sign_seed;  // random signs before the FWHT, per pool; off by default
  std::optional<uint64_t> v_sign_seed;
};

// Throws frugal::Error naming `op` and the offending field when the config is unusable.
void validate(const PagedConfig& config, const char* op);

// A paged cache's pools as tensors someone else allocates (see kv::CacheStorage); shapes, dtypes
// and devices as the PagedCache accessors of the same names say.
struct PagedStorage {
  Tensor k_packed, k_scales, v_packed, v_scales;
  Tensor k_signs, v_signs;  // undefined when the config has no such sign seed
  Tensor k_centroids, k_boundaries, v_centroids, v_boundaries;
};

// A batch's block tables, in host memory (see the header comment).
struct PageTable {
  std::span<const int32_t> indptr;         // [B + 1], indptr[0] = 0, non-decreasing
  std::span<const int32_t> indices;        // [indptr[B]] pages of the pool
  std::span<const int32_t> last_page_len;  // [B]
  int batch() const { return indptr.empty() ? 0 : static_cast<int>(indptr.size()) - 1; }
};

// Validates `table` against a pool of `config` (sizes, monotonic indptr, pages inside the pool,
// last_page_len in range) and returns L_b per sequence. Throws frugal::Error naming `op`.
std::vector<int64_t> sequence_lengths(const PageTable& table, const PagedConfig& config, const char* op);

// A cache is used from one stream at a time (its appends reuse one device buffer for the slots).
class PagedCache {
 public:
  PagedCache(const PagedConfig& config, Device device = Device::cpu(), Stream stream = nullptr);
  // A cache over `storage` (kept alive by its Tensors' owners) instead of pools of its own.
  // config.k_sign_seed / v_sign_seed say whether the signs are defined; their values are not read.
  // Throws frugal::Error naming kv::PagedCache::wrap and the tensor that does not fit the config.
  static PagedCache wrap(const PagedConfig& config, PagedStorage storage);

  const PagedConfig& config() const { return config_; }
  Device device() const { return k_packed_.device(); }
  int64_t slots() const { return config_.num_pages * config_.page_size; }

  // Writes the newest tokens of each sequence: k and v [T, Hkv, D] (f32 | f16 | bf16, the last
  // dimension contiguous; rows of sequence b are new_indptr[b] .. new_indptr[b+1]). `table` holds the
  // lengths AFTER the append (FlashInfer's append convention): sequence b's n_b new tokens are its
  // positions [L_b − n_b, L_b). new_indptr (host, [B + 1]) must be non-decreasing from 0 to T with
  // n_b ≤ L_b, and every page written must be referenced once in the whole table. Everything is
  // checked before anything is written; a refused call writes nothing. On a GPU the token slots are
  // computed on the host and copied to the device (stream-ordered; no device synchronization).
  void append(const TensorView& k, const TensorView& v, std::span<const int32_t> new_indptr, const PageTable& table,
              Stream stream = nullptr);

  // Tokens [begin, end) of sequence b of `table`, dequantized: k_out, v_out [end − begin, Hkv, D]
  // (f32 | f16 | bf16, on the cache's device). The reference the attention tests compare with.
  void dequantize(const PageTable& table, int b, int64_t begin, int64_t end, const TensorView& k_out,
                  const TensorView& v_out, Stream stream = nullptr) const;

  const Tensor& k_packed() const { return k_packed_; }  // [Hkv, slots, D*k_bits/8] u8
  const Tensor& k_scales() const { return k_scales_; }  // [Hkv, slots] f32
  const Tensor& v_packed() const { return v_packed_; }  // [Hkv, slots, D*v_bits/8] u8
  const Tensor& v_scales() const { return v_scales_; }  // [Hkv, slots] f32
  const Tensor& k_signs() const { return k_signs_; }    // [D] f32 ±1, or undefined
  const Tensor& v_signs() const { return v_signs_; }
  const Tensor& k_centroids() const { return k_centroids_; }  // [2^k_bits] f32 on the cache's device
  const Tensor& k_boundaries() const { return k_boundaries_; }
  const Tensor& v_centroids() const { return v_centroids_; }
  const Tensor& v_boundaries() const { return v_boundaries_; }

 private:
  PagedCache() = default;
  PagedConfig config_;
  Tensor k_packed_, k_scales_, v_packed_, v_scales_;
  Tensor k_signs_, v_signs_, k_centroids_, k_boundaries_, v_centroids_, v_boundaries_;
  // append's scratch: the token slots (host, and on a GPU their device copy, grown on demand) and
  // the per-page marks of its written-page check (stamp_ tells this call's marks from older ones).
  std::vector<int32_t> host_slots_;
  Tensor device_slots_;
  std::vector<uint32_t> page_stamp_;
  std::vector<int32_t> page_written_;
  uint32_t stamp_ = 0;
};

}  // namespace frugal::kv
