// CPU decode attention over the packed KV cache, in the rotated domain, f32 arithmetic: one row a
// sequence, attending its token range [begin, end) in slices of choice.tokens_per_split tokens
// (cpu/attention_rows.h holds the loop decode and paged attention share).
#include <cstdint>

#include "core/attention_backend.h"
#include "cpu/attention_rows.h"

namespace frugal::cpu {

namespace {

using attention::backend::DecodeArgs;

// Sequence b's tokens: slot t (mod capacity for a ring) of its K/V head's rows.
struct DecodeRows {
  const DecodeArgs& a;
  int64_t count() const { return a.batch; }
  int64_t begin(int64_t b) const { return a.begin[b]; }
  int64_t end(int64_t b) const { return a.end[b]; }
  int64_t q_offset(int64_t b) const { return b * a.q_stride_b; }
  int64_t out_row(int64_t b) const { return b; }
  int64_t vector(int64_t b, int hk, int64_t t) const {
    const int64_t slot = a.sliding ? t % a.capacity : t;
    return (b * a.kv_heads + hk) * a.capacity + slot;
  }
};

}  // namespace

void decode_attention(const DecodeArgs& a) {
  rows::Problem p;
  p.dim = a.dim;
  p.q_heads = a.q_heads;
  p.kv_heads = a.kv_heads;
  p.k = a.k;
  p.v = a.v;
  p.softmax_scale = a.softmax_scale;
  p.slice = a.choice.tokens_per_split;  // kCpuSliceTokens (core/attention_choose.h)
  p.q = a.q;
  p.q_dtype = a.q_dtype;
  p.q_stride_h = a.q_stride_h;
  p.out = a.out;
  p.out_dtype = a.out_dtype;
  p.op = "attention::decode_attention";
  rows::attend(p, DecodeRows{a});
}

}  // namespace frugal::cpu
