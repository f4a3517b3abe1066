// The paged family's kernel interface: the work lists a PagedPlan builds on the host (one item per
// single-query row, one entry per multi-query sequence), the argument struct the CPU and CUDA
// backends take, and their functions. The public entry points (src/core/paged_cache.cpp,
// src/core/paged_attention.cpp) validate and plan; these never do.
//
// The paged append and dequantize reuse the per-sequence kernels' argument structs
// (core/kv_backend.h) with AppendArgs::slots / DequantizeArgs::slots set: seqs == 1, capacity =
// the pool's slots, and token i goes to (comes from) slot slots[i] of each head's pool.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/attention_backend.h"
#include "frugal/paged_attention.h"

namespace frugal::attention::backend {

// One query row of one sequence over the absolute token range [begin, end) it sees (causal and
// window already applied; begin == end: no tokens, zeros and an LSE of −∞). A causal item without a
// window may hold `rows` consecutive query rows of its sequence (q_row + j, j < rows), row j seeing
// [begin, end − rows + 1 + j): the tensor-core row kernel gives each row its own columns of one
// block (rows · group ≤ kHeadsPerBlock), so their tokens are decoded once.
struct RowItem {
  int32_t seq;    // sequence of the batch (its pages: kv_indices[kv_indptr[seq] ..])
  int32_t q_row;  // row of q, out and lse
  int32_t begin, end;
  int32_t rows = 1;
};

// Row j of item `it` as a one-row item.
inline RowItem item_row(const RowItem& it, int32_t j) {
  return {it.seq, it.q_row + j, it.begin, it.end - it.rows + 1 + j, 1};
}

// rows_f16 runs decode's wide-table loop at head_dim 64 and 128, its register loop above.
inline bool rows_f16_wide(int dim) { return dim <= 128; }

// Query rows of one sequence a row item of `variant` holds (see RowItem): several only for the
// tensor-core row kernel's wide-table loop under a causal mask without a window, as many as fit
// one block's columns.
inline int rows_per_item(PagedVariant variant, int dim, int group, bool causal, int64_t window_left) {
  if (variant != PagedVariant::rows_f16 || !rows_f16_wide(dim) || !causal || window_left >= 0 || group > kHeadsPerBlock)
    return 1;
  return kHeadsPerBlock / group;
}

// The item of query row j (of n) of a sequence of `len` cached tokens, at q row q_row: the range the
// header's rule gives it (position p = len − n + j; causal: t ≤ p; a window: t ≥ p − window_left).
inline RowItem row_item(int32_t seq, int32_t q_row, int64_t len, int64_t n, int64_t j, bool causal,
                        int64_t window_left) {
  const int64_t p = len - n + j;
  const int64_t end = causal ? p + 1 : len;
  const int64_t begin = window_left >= 0 ? (p - window_left > 0 ? p - window_left : 0) : 0;
  return {seq, q_row, static_cast<int32_t>(begin), static_cast<int32_t>(end), 1};
}

// Query rows j .. j + rows − 1 (of n) as one item at q row q_row (causal, no window where rows > 1):
// the last row's range, which item_row takes apart again.
inline RowItem row_items(int32_t seq, int32_t q_row, int64_t len, int64_t n, int64_t j, int32_t rows, bool causal,
                         int64_t window_left) {
  RowItem it = row_item(seq, q_row, len, n, j + rows - 1, causal, window_left);
  it.rows = rows;
  return it;
}

// One sequence with n > 1 query tokens, for the tiled kernel: rows q_begin .. q_begin + q_count
// of q; query j sits at position kv_len − q_count + j.
struct TileSeq {
  int32_t seq, q_begin, q_count, kv_len;
};

struct PagedArgs {
  const void* q = nullptr;  // element (r, h, i) at q[r*q_stride_row + h*q_stride_h + i]
  DType q_dtype = DType::f32;
  int64_t q_stride_row = 0, q_stride_h = 0;
  void* out = nullptr;  // contiguous [total_q, Hq, D]
  DType out_dtype = DType::f32;
  float* lse = nullptr;  // contiguous [total_q, Hq] or nullptr
  int q_heads = 1, kv_heads = 1, dim = 0, page_size = 16;
  int64_t slots = 0;  // pool slots (num_pages · page_size)
  CacheArgs k, v;     // packed [Hkv, slots, D*bits/8], scales [Hkv, slots]
  // The block tables (device memory for CUDA, host memory for the CPU).
  const int32_t* kv_indptr = nullptr;   // [B + 1]
  const int32_t* kv_indices = nullptr;  // [kv_indptr[B]]
  // Work (device memory for CUDA, host memory for the CPU).
  const RowItem* items = nullptr;  // served by choice.rows
  int num_items = 0;
  int max_rows = 0;   // the most query rows a batch of the plan holds: fixes the row kernels' workspace layout
  int item_rows = 1;  // the most query rows an item of this batch holds (at most rows_per_item)
  const TileSeq* seqs = nullptr;  // served by choice.tiles (empty when choice.tiles is a rows_* variant)
  int num_seqs = 0;
  int max_q_count = 0;   // the largest q_count of seqs (its grid)
  int64_t max_kv_len = 0;
  bool causal = true;
  int64_t window_left = -1;
  float softmax_scale = 1.0f;
  PagedChoice choice;
  void* workspace = nullptr;  // device scratch of workspace_bytes (zero-filled when created): the
  size_t workspace_bytes = 0;  // plan gives paged_rows and paged_tiles separate parts of its own
  int device = 0;
};

// Query rows the row kernels' workspace is laid out for: the plan's most (at least this batch's
// items), so that every batch update() brings finds the same layout.
inline int rows_workspace_rows(const PagedArgs& a) { return a.num_items > a.max_rows ? a.num_items : a.max_rows; }

}  // namespace frugal::attention::backend

namespace frugal::cpu {
void paged_attention(const attention::backend::PagedArgs& a);
}  // namespace frugal::cpu

namespace frugal::cuda {
// The row kernels (rows_f32 / rows_f16) over a.items, and the tiled kernel (tiles_f16) over a.seqs.
void paged_rows(const attention::backend::PagedArgs& a, Stream stream);
void paged_tiles(const attention::backend::PagedArgs& a, Stream stream);
// Workspace each needs for this plan (partial states of split items; zero-filled counters). The plan
// asks once, with the largest work update() may bring: num_items, num_seqs and max_q_count at the
// plan's capacities, the work and tensor pointers null.
size_t paged_rows_workspace_bytes(const attention::backend::PagedArgs& a);
size_t paged_tiles_workspace_bytes(const attention::backend::PagedArgs& a);
}  // namespace frugal::cuda
