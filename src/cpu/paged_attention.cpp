// CPU paged attention: every query row (the rows of the plan's row items, and the rows of its
// multi-query sequences, expanded with the causal and window rule) attends its token range through the block
// table, by the loop decode attention uses (cpu/attention_rows.h).
#include <algorithm>
#include <bit>
#include <cstdint>
#include <vector>

#include "core/paged_backend.h"
#include "cpu/attention_rows.h"

namespace frugal::cpu {

namespace {

using attention::backend::PagedArgs;
using attention::backend::RowItem;

// Token t of sequence seq sits in slot indices[indptr[seq] + t / page_size] · page_size + t % page_size.
struct PagedRows {
  const PagedArgs& a;
  const std::vector<RowItem>& items;
  int page_shift;
  int64_t count() const { return static_cast<int64_t>(items.size()); }
  int64_t begin(int64_t r) const { return items[r].begin; }
  int64_t end(int64_t r) const { return items[r].end; }
  int64_t q_offset(int64_t r) const { return items[r].q_row * a.q_stride_row; }
  int64_t out_row(int64_t r) const { return items[r].q_row; }
  int64_t vector(int64_t r, int hk, int64_t t) const {
    const int64_t page = a.kv_indices[a.kv_indptr[items[r].seq] + (t >> page_shift)];
    return hk * a.slots + (page << page_shift) + (t & ((int64_t{1} << page_shift) - 1));
  }
};

}  // namespace

void paged_attention(const PagedArgs& a) {
  // One row for each item, and for each query of a multi-query sequence: query j sits at position
  // kv_len − q_count + j and sees [p − window_left, p] (causal) or [p − window_left, kv_len).
  std::vector<RowItem> items;
  for (int i = 0; i < a.num_items; ++i)
    for (int32_t j = 0; j < a.items[i].rows; ++j) items.push_back(attention::backend::item_row(a.items[i], j));
  for (int s = 0; s < a.num_seqs; ++s) {
    const attention::backend::TileSeq& ts = a.seqs[s];
    for (int32_t j = 0; j < ts.q_count; ++j)
      items.push_back(attention::backend::row_item(ts.seq, ts.q_begin + j, ts.kv_len, ts.q_count, j, a.causal,
                                                   a.window_left));
  }
  rows::Problem p;
  p.dim = a.dim;
  p.q_heads = a.q_heads;
  p.kv_heads = a.kv_heads;
  p.k = a.k;
  p.v = a.v;
  p.softmax_scale = a.softmax_scale;
  p.slice = a.choice.tokens_per_split;
  p.q = a.q;
  p.q_dtype = a.q_dtype;
  p.q_stride_h = a.q_stride_h;
  p.out = a.out;
  p.out_dtype = a.out_dtype;
  p.lse = a.lse;
  p.op = "attention::paged_attention";
  rows::attend(p, PagedRows{a, items, std::countr_zero(static_cast<unsigned>(a.page_size))});
}

}  // namespace frugal::cpu
