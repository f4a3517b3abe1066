// One decode-attention step for the `frugal kv` demo: a random query over the packed K/V caches the
// demo built, compared with fp32 attention over the original (unquantized) K/V.
#pragma once

#include <cstdint>

#include "frugal/kv_cache.h"
#include "frugal/tensor.h"

namespace frugal::tools {

struct AttentionStepReport {
  double rel_error = 0;  // ‖out − ref‖ / ‖ref‖ over the whole [B, Hq, D] output
  double cosine = 0;     // cosine similarity of out and ref
  double ms = 0;         // one decode_attention call (median of 10 after a warm-up; synchronized)
  double ref_ms = 0;     // the fp32 reference on the host (one run)
};

// k, v: the demo's caches (same shape, written in lockstep), on any device. k_orig, v_orig: the f32
// tokens that were appended, on the host, [B, T, Hkv, D] (or [T, Hkv, D] when batch is 1) with
// T = write_pos (equal for every sequence); attention covers each sequence's held tokens, i.e. the
// last `capacity` of a ring. q_heads: query heads (a multiple of Hkv; 0 = 4·Hkv, a GQA group of 4).
// The query is N(0, 1) from `seed`, in f32 (so the exact f32 path runs). Prints one line and
// returns the figures.
AttentionStepReport kv_attention_step(const kv::Cache& k, const kv::Cache& v, const TensorView& k_orig,
                                      const TensorView& v_orig, int q_heads = 0, uint64_t seed = 1);

}  // namespace frugal::tools
