// What the two append kernels share (src/cuda/kv/append.cu, append_mma.cu): the parameter block
// of one call and the map from a vector of the call to its input and its cache row.
#pragma once

#include <cstdint>

#include "core/kv_backend.h"
#include "cuda/kv/kv.cuh"
#include "cuda/scales.cuh"

namespace frugal::cuda::kvdev {

using kv::backend::kInlineStarts;

struct AppendParams {
  const void* x;
  int64_t stride_seq, stride_tok, stride_head;  // elements
  int64_t total;                                // seqs · tokens · heads vectors
  int64_t tokens, capacity;
  int heads, dim, bits, g;
  bool sliding, aligned, least_squares;
  bool small_index;  // total < 2^31: FastDiv applies
  bool dense;        // x is a contiguous [seqs, tokens, heads, D]: vector v starts at element v·D
  FastDiv by_heads, by_tokens;
  uint8_t* packed;
  void* scales;  // f32, or f16 bits when scales_f16 (store_scale)
  bool scales_f16;
  const float* signs;
  const float* centroids;
  const float* boundaries;
  float inv_sqrt_dim;  // float(1/√D), as the CPU multiplies
  double sqrt_dim;
  TableGeometry geo;
  float magic;            // round_magic(geo.half)
  uint32_t magic_x8;      // 8·kRoundMagicBits (mod 2^32), see table_window()
  const int64_t* starts;  // device [seqs] write positions, or null: first_slot holds them
  const int32_t* slots;   // paged pools: device [tokens] slot of each token (seqs == 1), or null
  // Slot of each sequence's first token (already mod capacity). 32 bits keep the parameter block
  // small for the one-token decode launch; a capacity of 2^31 or more goes through `starts`.
  int32_t first_slot[kInlineStarts];
};

// Vector v of the call → (sequence s, token tok, head h).
__device__ __forceinline__ void locate_vector(const AppendParams& p, int64_t v, int& s, int64_t& tok, int& h) {
  if (p.small_index) {
    const uint32_t vv = static_cast<uint32_t>(v), r = p.by_heads.div(vv), q = p.by_tokens.div(r);
    h = static_cast<int>(vv - r * static_cast<uint32_t>(p.heads));
    tok = r - q * static_cast<uint32_t>(p.tokens);
    s = static_cast<int>(q);
  } else {
    const int64_t r = v / p.heads;
    h = static_cast<int>(v - r * p.heads);
    s = static_cast<int>(r / p.tokens);
    tok = r - s * p.tokens;
  }
}

// The cache row (packed row and scale index) of token tok of sequence s, head h.
__device__ __forceinline__ int64_t cache_row(const AppendParams& p, int s, int64_t tok, int h) {
  int64_t slot;
  if (p.slots) {
    slot = p.slots[tok];
  } else if (p.starts) {
    const int64_t pos = p.starts[s] + tok;
    slot = p.sliding ? pos % p.capacity : pos;
  } else {
    slot = p.first_slot[s] + tok;
    if (p.sliding && slot >= p.capacity) slot -= p.capacity;
  }
  return (static_cast<int64_t>(s) * p.heads + h) * p.capacity + slot;
}


// The tensor-core append of one call (src/cuda/kv/append_mma.cu): `choice` is an mma choice, x is
// f16 or bf16, D = 64, 128 or 256 at 4 or 8 bits (kv::append_refusal).
void append_mma(const AppendParams& p, const kv::AppendChoice& choice, DType dtype, int device, cudaStream_t stream);

}  // namespace frugal::cuda::kvdev
