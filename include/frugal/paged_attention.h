// Attention over the paged quantized KV cache (frugal/paged_cache.h), one family for every kind of
// call a serving stack makes: prefill of a new prompt, chunked (continued) prefill after a prefix
// already in the cache, speculative verification of a few draft tokens, and decode — mixed freely
// in one batch.
//
// Queries are ragged: q [total_q, Hq, D] holds the query tokens of sequence b in rows
// qo_indptr[b] .. qo_indptr[b+1] (n_b of them, n_b = 0 allowed). The cache's table (the block
// table of the call, lengths L_b) already holds the new tokens' K and V (append first, as
// FlashInfer and vLLM do), so query j of sequence b sits at position p = L_b − n_b + j, and n_b ≤ L_b.
//   out[r, h, :] = Σ_t softmax_t(scale · q[r, h] · k̂_t) · v̂_t   over the tokens t that row r sees:
//     causal (the default): t ≤ p (the last query token sees every cached token); non-causal: all L_b;
//     a sliding window (window_left = w ≥ 0) also drops t < p − w.
// k̂_t, v̂_t are the cache's reconstructions (PagedCache::dequantize); query head h reads K/V head
// h / (Hq / Hkv). A row that sees no token gets zeros and an LSE of −∞. The optional LSE output is
// lse[r, h] = log Σ_t exp(scale · q[r, h] · k̂_t) (natural log), what cascade attention, merges of
// partial states and context parallelism need.
//
// Computed as decode attention is (frugal/attention.h): q rotated once with the K pool's signs,
// scores from codebook values times the token's scale, V accumulated in the rotated domain and one
// inverse transform (with the V pool's signs) per output row; on the GPU the tiles are decoded on
// chip, never into a full-size buffer. Non-finite input poisons the rows that see it, as decode's.
//
// Precision (PagedOptions::math, as DecodeOptions::math): f32 matches a double-precision oracle over
// the dequantized cache to ~1e-6 relative; f16 (GPU, tensor cores, f32 accumulation) to ~1e-3.
//
// Plan, then run (FlashInfer's split): a PagedPlan validates a batch description (host memory),
// fixes the kernels, the splits and the workspace, and copies the description to the device once.
// run() then does no host synchronization and no allocation, so it can be captured in a CUDA graph;
// update() rewrites the plan's device buffers in place for a new batch of the same shape class (as
// many sequences and query rows at most, lengths within the plan's max_kv_len), so a captured graph
// replays the new batch. A graph holds the work counts it was captured with: replay it after an
// update() whose qo_indptr equals the captured batch's (the same query rows per sequence, as a
// decode or speculative step has); run() itself serves any batch update() accepted. The plan is
// used from one stream at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "frugal/attention.h"
#include "frugal/paged_cache.h"
#include "frugal/tensor.h"

namespace frugal::attention {

// The kernels of the family (PagedPlan::choice() says which serve a plan).
enum class PagedVariant : uint8_t {
  cpu,        // the CPU loop (f32)
  rows_f32,   // the exact SIMT kernel: one work item per query row (any GPU, any cache)
  rows_f16,   // the tensor-core decode kernel over pages: one item per query row
  tiles_f16,  // the tensor-core tiled kernel: sequences with several query tokens (prefill, chunked, speculative)
};
std::string to_string(PagedVariant v);

struct PagedChoice {
  PagedVariant rows = PagedVariant::cpu;   // what serves single-query rows (and every row at f32 math)
  PagedVariant tiles = PagedVariant::cpu;  // what serves the sequences with n_b > 1 (rows_* where one item per row does)
  int splits = 1;                          // KV slices per row item (flash-decoding), fixed by the plan
  int64_t tokens_per_split = 0;
  // Where `tiles` is tiles_f16: the fewest query tokens of a sequence it serves; a sequence with
  // fewer (speculative steps) becomes row items of `rows`.
  int tile_min_queries = 2;
  bool operator==(const PagedChoice&) const = default;
};
std::string to_string(const PagedChoice& c);

struct PagedOptions {
  std::optional<float> softmax_scale;  // default 1/√head_dim; must be finite
  bool causal = true;
  int64_t window_left = -1;            // ≥ 0: a sliding window of that many tokens before the query; −1: none
  Math math = Math::automatic;
  int num_splits = 0;                  // forced KV slices per row item; 0 = chosen
  std::optional<PagedVariant> rows;    // forced kernels (tests, benchmarks); empty = chosen
  std::optional<PagedVariant> tiles;
  int64_t max_kv_len = 0;              // the longest sequence update() may bring; 0: this batch's longest
};

// One batch description in host memory.
struct PagedBatch {
  std::span<const int32_t> qo_indptr;  // [B + 1], qo_indptr[0] = 0, non-decreasing, qo_indptr[B] = total_q
  kv::PageTable pages;                 // the cache's block tables, lengths including the new tokens
};

class PagedPlan {
 public:
  // Validates `batch` against `cache` (see the header comment; a frugal::Error names the op and
  // the offending values) for queries of `q_heads` heads and dtype `q_dtype`.
  PagedPlan(const kv::PagedCache& cache, int q_heads, DType q_dtype, const PagedBatch& batch,
            const PagedOptions& options = {}, Stream stream = nullptr);
  ~PagedPlan();
  PagedPlan(PagedPlan&&) noexcept;
  PagedPlan& operator=(PagedPlan&&) noexcept;

  // A new batch into the same device buffers (stream-ordered copies, no synchronization). Throws,
  // changing nothing, when it has more sequences, rows or pages than the plan was made for, a
  // sequence longer than max_kv_len, or (where choice().tiles is tiles_f16) a sequence with more
  // query tokens than the plan's longest multi-query sequence (the tiled kernel's grid and workspace).
  // The pages: up to ⌈max_kv_len / page_size⌉ a sequence, so decode steps may grow into new pages.
  void update(const PagedBatch& batch, Stream stream = nullptr);

  // q [total_q, Hq, D] (the plan's dtype, the last dimension contiguous); out [total_q, Hq, D]
  // contiguous, q's dtype or f32; lse [total_q, Hq] f32 contiguous, or an empty view. `cache` must
  // be the plan's configuration on the plan's device.
  void run(const TensorView& q, const kv::PagedCache& cache, const TensorView& out, const TensorView& lse = {},
           Stream stream = nullptr) const;

  const PagedChoice& choice() const;
  int batch() const;
  int64_t total_q() const;
  size_t workspace_bytes() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Plan and run in one call (allocates the plan's buffers; not graph-capturable).
void paged_attention(const TensorView& q, const kv::PagedCache& cache, const PagedBatch& batch, const TensorView& out,
                     const TensorView& lse = {}, const PagedOptions& options = {}, Stream stream = nullptr);

}  // namespace frugal::attention
