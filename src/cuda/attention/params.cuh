// What the decode-attention kernels receive (Params), each block's share of the work (BlockWork),
// and the host's description of one compiled kernel (Launch) that launch.cu runs. Kernel files:
// decode_f32.cu, decode_f16.cu / decode_f16_wide.cu (decode_f16.cuh), combine.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/attention_backend.h"
#include "core/paged_backend.h"
#include "cuda/common.cuh"
#include "cuda/scales.cuh"

namespace frugal::cuda::decode {

using attention::backend::kHeadsPerBlock;
using attention::backend::kInlineBatch;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kNegInf = -__builtin_huge_valf();
constexpr int kLutWords = 256 * 32;  // one byte-indexed table, 32 copies (one per bank)

struct Params {
  const void* q;
  int q_dtype;  // 0 f32, 1 f16, 2 bf16
  int out_dtype;
  int64_t q_stride_b, q_stride_h;
  void* out;
  float* part_o;       // [B*Hq*splits][D] (f16 kernel: dim lane + 32j at lane·D/32 + j, see kernel_decode_f16)
  float* part_ml;      // [B*Hq*splits][2]: running max (log2 units), sum
  unsigned* counters;  // f16 kernel, split calls: arrivals per (sequence, K/V head, head tile); zero between calls
  const uint8_t* kp;
  ScalePtr ks;  // either format (paged pools: f32)
  const float* ksign;
  const float* kcb;
  const uint8_t* vp;
  ScalePtr vs;
  const float* vsign;
  const float* vcb;
  int kbits, vbits;
  int q_heads, kv_heads, group, head_tiles, splits, dim;
  int64_t capacity;
  int sliding;
  int64_t tokens_per_split;
  float score_scale;          // softmax_scale · log2(e) / D (the two transforms' 1/√D each)
  const int64_t* ranges_dev;  // [B][2] in the workspace when B > kInlineBatch, else nullptr
  // Paged pools (items non-null): block z serves the row item items[z] (its query row, sequence and
  // token range); kp/ks/vp/vs are the head-major pools (capacity = their slots, one "sequence"), and
  // token t of the item's sequence sits in slot kv_indices[kv_indptr[seq] + t >> page_shift] << page_shift
  // | t & (page size − 1).
  const attention::backend::RowItem* items;
  const int32_t* kv_indptr;
  const int32_t* kv_indices;
  int page_shift;
  float* lse;  // [rows, Hq] natural-log LSE of each output row, or nullptr
  int64_t ranges[2 * kInlineBatch];
};

inline int dtype_code(DType t) { return t == DType::f32 ? 0 : (t == DType::f16 ? 1 : 2); }

using KernelFn = void (*)(Params);

// One compiled kernel as the host launches it.
struct Launch {
  KernelFn fn;
  int smem;      // dynamic shared memory of this call
  int smem_max;  // the most any call of this kernel uses (its attribute is raised to this once)
  int threads = kThreads;
  int carveout_blocks = 0;  // > 0: the smallest L1/shared carveout that holds this many blocks
};

// The kernel of each variant for a head_dim (and bit widths), defined beside the kernels.
Launch f32_kernel(int dim, int dims_per_lane);                 // decode_f32.cu
Launch f16_registers_kernel(int dim, int k_bits, int v_bits);  // decode_f16.cu
Launch f16_wide_kernel(int dim, int k_bits, int v_bits);       // decode_f16_wide.cu
// The same two loops over paged row items (kPaged; the f32 kernel serves both layouts).
// multi: the items may hold several query rows (the wide loop only: head_dim 64 and 128).
Launch f16_registers_paged_kernel(int dim, int k_bits, int v_bits);       // paged_rows_f16.cu
Launch f16_wide_paged_kernel(int dim, int k_bits, int v_bits, bool multi);  // paged_rows_f16_wide.cu
// The f32 kernel's second pass: merges the `splits` partial states of each of `rows` output rows
// (combine.cu), launched as a programmatic dependent of the main kernel.
void launch_combine(const Params& p, int dim, int rows, int splits, cudaStream_t stream);
// Exact rows (exact.cu): the rows' f16 tokens attended and merged with the codes' output and LSE
// (part_out, part_lse) into a.out, as a programmatic dependent of the kernels before it. The ranges
// travel in the parameters for batches up to kInlineBatch, else in ranges_dev, which
// upload_exact_ranges fills (before those kernels: a copy between them would end the dependence).
void upload_exact_ranges(const attention::backend::DecodeArgs& a, int64_t* ranges_dev, cudaStream_t stream);
void launch_exact(const attention::backend::DecodeArgs& a, const float* part_out, const float* part_lse,
                  const int64_t* ranges_dev, cudaStream_t stream);

namespace {

// A block's columns are (query row, head) pairs: column r is head hq0 + r % row_heads of query row
// qrow + r / row_heads; `heads` columns in all (one query row but for multi-row paged items).
struct BlockWork {
  int b, hk, hq0, heads, split;
  int row_heads;   // heads of one query row among the columns
  int64_t qrow;    // row of q and out (b, or the paged item's first query row)
  int64_t t0, t1;  // absolute token positions of this block's slice (t0 >= t1: nothing)
  int64_t lo;      // the first token attended: tokens of [t0, t1) below it are masked (paged items only)
  int64_t end0;    // the end of the first query row's range (row j's: end0 + j); t1 serves the last row
  int64_t t1_all;  // min(t1, end0): below it every column sees every token of the slice
  const int32_t* pages;  // the paged item's pages in token order, or nullptr

  __device__ int64_t col_row(int r) const { return qrow + r / row_heads; }
  __device__ int col_head(int r) const { return hq0 + r % row_heads; }
  __device__ int64_t col_end(int r) const { return end0 + r / row_heads; }
};

// A paged item's slices start on a 16-token tile (its range's start rounded down, the tokens below
// it masked), so every tile of a page-aligned pool lies inside one page.
constexpr int64_t kPagedAlign = attention::backend::kTileTokens;

// kPaged: the block serves a paged row item (Params::items), else a sequence of the per-sequence layout.
// kMulti: the paged items may hold several query rows (RowItem::rows).
template <bool kPaged, bool kMulti = false>
__device__ __forceinline__ BlockWork block_work(const Params& p) {
  BlockWork w;
  w.b = blockIdx.z;
  w.hk = blockIdx.y / p.head_tiles;
  const int tile = blockIdx.y % p.head_tiles;
  w.hq0 = w.hk * p.group + tile * kHeadsPerBlock;
  w.heads = min(kHeadsPerBlock, p.group - tile * kHeadsPerBlock);
  w.row_heads = w.heads;
  w.split = blockIdx.x;
  int64_t beg, end;
  if constexpr (kPaged) {
    const attention::backend::RowItem it = p.items[w.b];
    w.qrow = it.q_row;
    if constexpr (kMulti) w.heads *= it.rows;
    w.pages = p.kv_indices + p.kv_indptr[it.seq];
    w.lo = it.begin;
    beg = it.begin / kPagedAlign * kPagedAlign;
    end = it.end > it.begin ? it.end : beg;  // no tokens: an empty slice (not the masked ones below begin)
    w.end0 = kMulti ? end - (it.rows - 1) : end;
  } else {
    w.qrow = w.b;
    w.pages = nullptr;
    beg = p.ranges_dev ? p.ranges_dev[2 * w.b] : p.ranges[2 * w.b];
    end = p.ranges_dev ? p.ranges_dev[2 * w.b + 1] : p.ranges[2 * w.b + 1];
    w.lo = beg;
    w.end0 = end;
  }
  w.t0 = beg + static_cast<int64_t>(w.split) * p.tokens_per_split;
  w.t1 = min(end, w.t0 + p.tokens_per_split);
  w.t1_all = kMulti ? min(w.t1, w.end0) : w.t1;
  return w;
}

// The pool slot of token t of a paged item.
__device__ __forceinline__ int64_t paged_slot(const Params& p, const int32_t* pages, int64_t t) {
  const int64_t page = __ldg(pages + (t >> p.page_shift));
  return (page << p.page_shift) | (t & ((int64_t{1} << p.page_shift) - 1));
}

// The output row (of q, out and lse) of block row b: b itself, or the paged item's query row.
__device__ __forceinline__ int64_t output_row(const Params& p, int64_t b) { return p.items ? p.items[b].q_row : b; }

// The natural-log LSE of a row from its softmax state in log2 units (M the max, L = Σ 2^(s − M)).
__device__ __forceinline__ float lse_of(float M, float L) { return (M + log2f(L)) * 0.6931471805599453f; }

}  // namespace

}  // namespace frugal::cuda::decode
