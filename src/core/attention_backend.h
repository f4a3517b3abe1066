// The decode-attention kernels' interface: a plain argument struct, the split arithmetic both
// the entry point and the CUDA backend use, and the CPU and CUDA functions. The public entry
// point (src/core/attention.cpp) validates; these never do.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "frugal/attention.h"

namespace frugal::attention::backend {

// One cache's storage, as the kernels read it.
struct CacheArgs {
  const uint8_t* packed = nullptr;   // [B, Hkv, capacity, D*bits/8]
  const float* scales = nullptr;     // [B, Hkv, capacity]
  const float* signs = nullptr;      // [D] ±1, or nullptr
  const float* centroids = nullptr;  // [2^bits]
  int bits = 4;
};

struct DecodeArgs {
  const void* q = nullptr;  // element (b, h, i) at q[b*q_stride_b + h*q_stride_h + i]
  DType q_dtype = DType::f32;
  int64_t q_stride_b = 0, q_stride_h = 0;
  void* out = nullptr;  // contiguous [B, Hq, D]
  DType out_dtype = DType::f32;
  int batch = 1, q_heads = 1, kv_heads = 1, dim = 0;
  int64_t capacity = 0;
  bool sliding = false;
  CacheArgs k, v;
  const int64_t* begin = nullptr;  // host [batch]: first absolute token position attended
  const int64_t* end = nullptr;    // host [batch]: one past the last (end == begin: no tokens)
  float softmax_scale = 1.0f;
  Math math = Math::f32;      // resolved by the entry point: never automatic here
  int num_splits = 0;         // 0 = pick from the shape
  void* workspace = nullptr;  // device scratch of workspace_bytes, or nullptr (allocate per call)
  size_t workspace_bytes = 0;
};

// Query heads one GPU block serves from one read of a K/V head (the mma tile's N = 8).
constexpr int kHeadsPerBlock = 8;
// Token ranges for up to this many sequences travel in the kernel parameters (no copy).
constexpr int kInlineBatch = 128;
// Bounds on the slices per sequence: at most kMaxBlocks blocks of work in total (a few waves of
// any GPU: 132 SMs × ≤ 6 resident blocks of these kernels ≈ 800), and slices of ≥ 16 tokens
// (one mma tile).
constexpr int64_t kMaxBlocks = 2048;
constexpr int64_t kMinSliceTokens = 16;

// What the GPU kernels serve: head_dim 4..512 in f32; head_dim 64..512 with K and V of 4 or 8
// bits on the f16 tensor-core path.
constexpr int kMaxGpuDim = 512;
inline bool f16_supported(int dim, int k_bits, int v_bits) {
  return dim >= 64 && dim <= kMaxGpuDim && (k_bits == 4 || k_bits == 8) && (v_bits == 4 || v_bits == 8);
}

inline int head_tiles(int group) { return (group + kHeadsPerBlock - 1) / kHeadsPerBlock; }

inline int64_t max_splits(int batch, int kv_heads, int group, int64_t capacity) {
  const int64_t pairs = static_cast<int64_t>(batch) * kv_heads * head_tiles(group);
  const int64_t by_blocks = std::max<int64_t>(1, kMaxBlocks / pairs);
  const int64_t by_tokens = std::max<int64_t>(1, (capacity + kMinSliceTokens - 1) / kMinSliceTokens);
  return std::min(by_blocks, by_tokens);
}

// Workspace layout (offsets from the workspace pointer rounded up to kWorkspaceAlign, which the
// kWorkspaceAlign bytes of slack cover — any u8 tensor may be passed):
//   [arrival counters: u32 per (sequence, query head) — at least one per (sequence, K/V head, head
//    tile) — at a fixed place so every call finds them whatever its slice count; ZERO before the
//    first call, and every call leaves them zero]
//   [partial O: B*Hq*splits*D f32][partial (m, l): B*Hq*splits*2 f32][ranges: 2*B i64]
constexpr size_t kWorkspaceAlign = 256;
struct WorkspaceLayout {
  size_t counters = 0, partial_o = 0, partial_ml = 0, ranges = 0, end = 0;  // byte offsets; end = bytes used
};
inline WorkspaceLayout workspace_layout(int batch, int q_heads, int dim, int64_t splits) {
  auto up = [](size_t x) { return (x + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign; };
  const size_t rows = static_cast<size_t>(batch) * q_heads;
  WorkspaceLayout l;
  l.partial_o = up(rows * sizeof(uint32_t));
  l.partial_ml = l.partial_o + rows * splits * dim * sizeof(float);
  l.ranges = up(l.partial_ml + rows * splits * 2 * sizeof(float));
  l.end = l.ranges + (batch > kInlineBatch ? 2 * sizeof(int64_t) * batch : 0);
  return l;
}
inline size_t workspace_bytes(int batch, int q_heads, int dim, int64_t splits) {
  return workspace_layout(batch, q_heads, dim, splits).end + kWorkspaceAlign;
}

}  // namespace frugal::attention::backend

namespace frugal::cpu {
void decode_attention(const attention::backend::DecodeArgs& a);
}  // namespace frugal::cpu

namespace frugal::cuda {
void decode_attention(const attention::backend::DecodeArgs& a, Device device, Stream stream);
// f16 calls so far in this process per main loop of the kernel — 0: the register loop, 1: the
// wide-table register loop (tests check that a call forced onto a loop, or picked for it, took it).
int64_t decode_attention_loop_calls(int loop);
}  // namespace frugal::cuda
