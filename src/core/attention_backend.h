// The decode-attention kernels' interface: a plain argument struct carrying the resolved choice,
// the slice and workspace arithmetic the core, the choice and the CUDA backend share, and the CPU
// and CUDA functions. The public entry point (src/core/attention.cpp) validates and chooses
// (src/core/attention_choose.h); these never do.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/kv_backend.h"
#include "frugal/attention.h"

namespace frugal::attention::backend {

// One cache's storage, as the kernels read it.
struct CacheArgs {
  const uint8_t* packed = nullptr;   // [B, Hkv, capacity, D*bits/8]
  const void* scales = nullptr;      // [B, Hkv, capacity] f32, or f16 bits when scales_f16
  const float* signs = nullptr;      // [D] ±1, or nullptr
  const float* centroids = nullptr;  // [2^bits]
  int bits = 4;
  bool scales_f16 = false;  // ScaleFormat::f16

  float scale(int64_t vec) const { return kv::backend::load_scale(scales, scales_f16, vec); }  // on the host
};

// The exact rows of a K/V pair of caches with a window or sinks (kv_cache.h, "Exact rows"), and the
// tokens each sequence reads from them: decode attention attends the codes' range (DecodeArgs::begin
// .. end) and these, and merges the two softmax states.
struct ExactArgs {
  const uint16_t* k = nullptr;  // [B, Hkv, sinks + window, D] f16 bits
  const uint16_t* v = nullptr;
  int sinks = 0, window = 0;
  const int64_t* sink_end = nullptr;   // host [B]: the sinks attended, [0, sink_end)
  const int64_t* win_begin = nullptr;  // host [B]: the window's tokens attended, [win_begin, win_end)
  const int64_t* win_end = nullptr;
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
  const ExactArgs* exact = nullptr;  // the caches' exact rows, or nullptr: the codes alone
  DecodeChoice choice;        // resolved by choose (src/core/attention_choose.h): what runs, how sliced
  void* workspace = nullptr;  // device scratch of workspace_bytes, or nullptr (allocate per call)
  size_t workspace_bytes = 0;
};

// Query heads one GPU block serves from one read of a K/V head (the mma tile's N = 8).
constexpr int kHeadsPerBlock = 8;
// Token ranges for up to this many sequences travel in the kernel parameters (no copy).
constexpr int kInlineBatch = 128;
// Tokens of one mma tile: GPU slices are whole tiles.
constexpr int64_t kTileTokens = 16;
// Bounds on the slices per sequence: at most kMaxBlocks blocks of work in total (a few waves of
// any GPU: 132 SMs × ≤ 6 resident blocks of these kernels ≈ 800), and slices of ≥ 16 tokens
// (one mma tile).
constexpr int64_t kMaxBlocks = 2048;
constexpr int64_t kMinSliceTokens = kTileTokens;
// The most head_dim any GPU kernel serves (the f32 kernel's 16 dims a lane, the f16 kernels' fragments).
constexpr int kMaxGpuDim = 512;

// The f16 kernels' chunk: the 16-token tiles a warp computes per step, by head_dim (D = 128: two
// tiles at the register budget of 4 resident blocks; one tile at 5 blocks measured 7–24% slower).
constexpr int f16_tiles_per_chunk(int dim) { return dim <= 64 ? 4 : (dim <= 128 ? 2 : 1); }
// The wide-table kernel's warps a block.
constexpr int kWideWarps = 8;
// Tokens of one round of the wide kernel's warps' chunks (its automatic slices are whole rounds).
constexpr int64_t wide_round_tokens(int dim) { return kWideWarps * kTileTokens * f16_tiles_per_chunk(dim); }

// The f32 kernel's dims a lane accumulates (its template instance): D / 32, at least 1.
constexpr int f32_dims_per_lane(int dim) { return dim >= 32 ? dim / 32 : 1; }

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
//   with exact rows: [the codes' output: B*Hq*D f32][its LSE: B*Hq f32][exact ranges: 3*B i64]
constexpr size_t kWorkspaceAlign = 256;
struct WorkspaceLayout {
  size_t counters = 0, partial_o = 0, partial_ml = 0, ranges = 0;  // byte offsets
  size_t exact_out = 0, exact_lse = 0, exact_ranges = 0;          // (with exact rows)
  size_t end = 0;                                                  // bytes used
};
inline WorkspaceLayout workspace_layout(int batch, int q_heads, int dim, int64_t splits, bool exact = false) {
  auto up = [](size_t x) { return (x + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign; };
  const size_t rows = static_cast<size_t>(batch) * q_heads;
  WorkspaceLayout l;
  l.partial_o = up(rows * sizeof(uint32_t));
  l.partial_ml = l.partial_o + rows * splits * dim * sizeof(float);
  l.ranges = up(l.partial_ml + rows * splits * 2 * sizeof(float));
  l.end = l.ranges + (batch > kInlineBatch ? 2 * sizeof(int64_t) * batch : 0);
  if (exact) {
    l.exact_out = up(l.end);
    l.exact_lse = l.exact_out + rows * dim * sizeof(float);
    l.exact_ranges = up(l.exact_lse + rows * sizeof(float));
    l.end = l.exact_ranges + (batch > kInlineBatch ? 3 * sizeof(int64_t) * batch : 0);
  }
  return l;
}
inline size_t workspace_bytes(int batch, int q_heads, int dim, int64_t splits, bool exact = false) {
  return workspace_layout(batch, q_heads, dim, splits, exact).end + kWorkspaceAlign;
}
// A GPU call uses its workspace when it is split (partials, counters) or its ranges do not fit
// in the kernel parameters, or it reads exact rows.
inline bool uses_workspace(int batch, int64_t splits, bool exact = false) {
  return splits > 1 || batch > kInlineBatch || exact;
}

}  // namespace frugal::attention::backend

namespace frugal::cpu {
void decode_attention(const attention::backend::DecodeArgs& a);
}  // namespace frugal::cpu

namespace frugal::cuda {
// Runs the choice a.choice on `device` (dispatch only: the core validated and chose).
void decode_attention(const attention::backend::DecodeArgs& a, Device device, Stream stream);
// Resident blocks per multiprocessor of the kernel that serves `variant` at this head_dim and these
// bit widths on `device` (the occupancy calculator's answer at the call's shared memory, asked once
// per kernel and device): the one fact of the compiled code the slice rule needs.
int decode_attention_resident_blocks(attention::DecodeVariant variant, int dim, int k_bits, int v_bits, int device);
}  // namespace frugal::cuda
