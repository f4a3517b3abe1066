// CUDA decode attention over the packed KV cache (flash-decoding over the rotated domain).
//
// Grid: (slice of the sequence, K/V head × tile of ≤ 8 query heads, sequence); 4 warps a block,
// each warp streaming its own chunks of the block's slice with its own running softmax state;
// the warps' states are merged in shared memory, then either finalized (one slice: normalize,
// one inverse FWHT with V's signs, store) or written as a partial state of the slice.
//
// Two math paths with the same structure:
//   * kernel_decode_f32: exact f32 on CUDA cores; lane = token for the scores, lane = dims for V.
//     Its partials are merged by a second kernel, kernel_combine.
//   * kernel_decode_f16: tensor cores (mma.sync m16n8k16, fp16 operands, f32 accumulators). Per
//     16-token tile, Sᵀ = K·Qᵀ with the tokens as M, K as the A operand and the ≤ 8 query heads as
//     N; then Oᵀ += Vᵀ·Pᵀ with 16 dims as M, the heads as N and the 16 tokens as K. movmatrix.trans
//     turns the Sᵀ C fragment (token g; heads 2t, 2t+1) into exactly the Pᵀ B fragment, so P never
//     leaves registers, and each lane's softmax state is for the heads of its O columns. Codes
//     become fp16 fragments through a shared-memory table indexed by a byte — for 4 bits a byte
//     holds two codes and the table returns the half2 (c[lo], c[hi]) — replicated 32× (one copy
//     per bank) so a warp's 32 random lookups never conflict: PRMT + IMAD + LDS per two 4-bit
//     codes. The head dimension is permuted (identically in q and K, and undone when O is stored)
//     so each lane's fragments come from one contiguous piece of its token's row (16-byte loads).
//     At D = 256 the main loop is a rotating register pipeline (each warp's next chunk is requested
//     phase by phase while the current one is computed); every other D requests a chunk's loads
//     when the chunk starts (the pipeline measured slower there: register cap, fewer warps).
//     The prologue (q rotation, σ, fragments) and the epilogue (merge, finish) run one warp per head
//     row with D known at compile time (round 4: 3/4 of the instructions at short lengths were the
//     block-wide versions' runtime divisions and barriers).
//     Its partials are merged by the last block of each (sequence, K/V head, head tile) to finish,
//     found with an arrival counter in the workspace (merge_slices; round 5: the second kernel's
//     launch and latency were a sizeable part of the short rows).
//     Round 6 added a main loop at D = 128 K4/V4, 8 warps a block, 2 blocks per SM: the wide table
//     (lut_load_wide: one PRMT forms a lookup's address; −23% instructions a chunk), the default
//     wherever it serves since session 5; session 17 gave it D = 64 K4/V4 as well (7–12% faster
//     there than the register loop: 2026-11-30-attn-merge-s17.md), session 18 the 8-bit widths at
//     D = 64 and 128 (the 8-bit entries in the table rows' unused upper halves: K8/V4 12% faster at
//     D = 128, the D = 64 mixes 10–18%; 2026-12-01-attn-pool.md). (A bulk-copy ring beside it —
//     cp.async.bulk into one mbarrier stage a warp, read through the wide table — was 0.7–3.3% faster
//     than the register loop on the long rows but slower than the wide loop wherever it could serve,
//     and never the default; removed in session 10. Its measurements: -r6.md, 2026-11-30-attn7.md.)
//     Session 7: the 8-warp loop's automatic slices are whole rounds of its warps' chunks (256
//     tokens at D = 128) and its shared-memory carveout is the smallest that holds two blocks (the
//     rest is L1).
//     Tried and not kept there (each measured slower or no faster on the H200): staging every chunk
//     or only the first through a per-warp cp.async stage, an L1 prefetch of the next chunk, 48-token
//     chunks, and merging a row's slices with two warps.
//     Session 8 measured the two halves of the wide loop apart (loads alone 73 µs, math alone 58, both
//     97 at B=8 L=32K) and found the L1 data pipe (one wavefront a cycle an SM: table lookups, the
//     loads' data, shuffles) 76% busy — the resource the two halves share. Its one change: tokens are
//     reordered inside each 16-token tile (tile_token) so that the V loads read whole 128-byte
//     lines' halves instead of quarters: 6% fewer wavefronts, 2–3% faster on the long D = 128 rows;
//     and each chunk's maxima are reduced across lanes only when some lane's exceed the running ones
//     (same values; the D = 256 rows 6–8% faster).
//     Measurements and the profile: bench/results/2026-11-29-decode-attention.md, -r3.md .. -r6.md,
//     2026-11-30-attn7.md, 2026-11-30-attn-staged.md (with an ncu source-level stall profile),
//     2026-11-30-attn-probe.md (the halves apart, the pipe, the prefetch and stagger experiments).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <optional>
#include <type_traits>
#include <vector>

#include "core/attention_backend.h"
#include "cuda/common.cuh"

namespace frugal::cuda {

namespace {

using attention::backend::DecodeArgs;
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
  float* part_o;   // [B*Hq*splits][D] (f16 kernel: dim lane + 32j at lane·D/32 + j, see kernel_decode_f16)
  float* part_ml;  // [B*Hq*splits][2]: running max (log2 units), sum
  unsigned* counters;  // f16 kernel, split calls: arrivals per (sequence, K/V head, head tile); zero between calls
  const uint8_t* kp;
  const float* ks;
  const float* ksign;
  const float* kcb;
  const uint8_t* vp;
  const float* vs;
  const float* vsign;
  const float* vcb;
  int kbits, vbits;
  int q_heads, kv_heads, group, head_tiles, splits, dim;
  int64_t capacity;
  int sliding;
  int64_t tokens_per_split;
  float score_scale;          // softmax_scale · log2(e) / D (the two transforms' 1/√D each)
  const int64_t* ranges_dev;  // [B][2] in the workspace when B > kInlineBatch, else nullptr
  int64_t ranges[2 * kInlineBatch];
};

int dtype_code(DType t) { return t == DType::f32 ? 0 : (t == DType::f16 ? 1 : 2); }

// ---- small device helpers -------------------------------------------------------------------

__device__ __forceinline__ float load_elem(const void* base, int dtype, int64_t i) {
  if (dtype == 0) return static_cast<const float*>(base)[i];
  if (dtype == 1) return __half2float(static_cast<const __half*>(base)[i]);
  return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
}

// The bits of element i (f32, or a 16-bit f16 / bf16 in the low half), converted later by
// raw_to_float: a load whose value is not consumed yet does not stall the warp, so the query loads
// can be in flight while the tables are built.
__device__ __forceinline__ uint32_t load_raw(const void* base, int dtype, int64_t i) {
  if (dtype == 0) return __float_as_uint(static_cast<const float*>(base)[i]);
  return static_cast<const unsigned short*>(base)[i];
}

__device__ __forceinline__ float raw_to_float(uint32_t bits, int dtype) {
  if (dtype == 0) return __uint_as_float(bits);
  if (dtype == 1) return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
  return __bfloat162float(__ushort_as_bfloat16(static_cast<unsigned short>(bits)));
}

__device__ __forceinline__ void store_elem(void* base, int dtype, int64_t i, float v) {
  if (dtype == 0)
    static_cast<float*>(base)[i] = v;
  else if (dtype == 1)
    static_cast<__half*>(base)[i] = __float2half_rn(v);
  else
    static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(v);
}

__device__ __forceinline__ uint32_t half_bits(float x) { return __half_as_ushort(__float2half_rn(x)); }

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

__device__ __forceinline__ uint32_t byte_of(uint32_t w, int k) { return __byte_perm(w, 0u, 0x4440u | k); }

// Entry e of a byte-indexed table with 32 copies (lut[e * 32 + lane]), from this lane's copy at the
// shared-memory address `lane_addr`: one IMAD and one LDS. Written in PTX so the compiler cannot
// rebuild the index as (e << 5 | lane) and rescale it (five instructions, three on the busy ALU
// pipe, as the first version compiled). Not volatile: a pure read of a table that is constant
// while the loop runs, free to be scheduled early.
__device__ __forceinline__ uint32_t lut_load(uint32_t lane_addr, uint32_t e) {
  uint32_t v;
  asm("{\n .reg .u32 a;\n mad.lo.u32 a, %1, 128, %2;\n ld.shared.u32 %0, [a];\n}\n" : "=r"(v) : "r"(e), "r"(lane_addr));
  return v;
}

// The wide table (kWide): entry e's 32 copies at byte e·256 of the table, so the address of byte k
// of x in lane `lane4 / 4`'s copy is one PRMT — byte 1 = x's byte k, byte 0 = lane·4 — plus the
// table's base (uniform): no IMAD per lookup. The 4-bit table takes bytes 0–127 of each 256-byte
// row, the 8-bit table bytes 128–255 (lane4 = lane·4 + 128): 64 KB of shared memory for both widths,
// where the register loop's two tables take 32 KB each.
__device__ __forceinline__ uint32_t lut_load_wide(uint32_t base, uint32_t lane4, uint32_t x, int k) {
  const uint32_t off = __byte_perm(x, lane4, 0x5504u | (static_cast<uint32_t>(k) << 4));
  uint32_t v;
  asm("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(base + off));
  return v;
}

// 2^x: exp2f, or (kFast) the bare ex2.approx.ftz (no range fix-ups; the softmax weights it makes are
// ≤ 1 and rounded to fp16 — results under 2^-126 flush to zero either way).
template <bool kFast>
__device__ __forceinline__ float ex2(float x) {
  if constexpr (kFast) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
  } else {
    return exp2f(x);
  }
}

// Transpose of the 8×8 b16 matrix whose row lane/4, columns 2(lane%4) and +1, each lane holds.
__device__ __forceinline__ uint32_t transpose_8x8(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Loads N bytes (N a multiple of 4, the address N-aligned up to 16) into N/4 words, read-only path.
template <int N>
__device__ __forceinline__ void load_words(const uint8_t* p, uint32_t (&w)[N / 4]) {
  if constexpr (N % 16 == 0) {
#pragma unroll
    for (int i = 0; i < N / 16; ++i) {
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(p) + i);
      w[4 * i] = v.x;
      w[4 * i + 1] = v.y;
      w[4 * i + 2] = v.z;
      w[4 * i + 3] = v.w;
    }
  } else if constexpr (N == 8) {
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(p));
    w[0] = v.x;
    w[1] = v.y;
  } else {
    static_assert(N == 4, "row pieces are 4, 8 or a multiple of 16 bytes");
    w[0] = __ldg(reinterpret_cast<const unsigned int*>(p));
  }
}

// Code i of a packed row (little-endian bit stream of `bits`-bit codes).
__device__ __forceinline__ unsigned get_code(const uint8_t* row, int i, int bits) {
  const int bit = i * bits;
  const int shift = bit & 7;
  unsigned v = __ldg(row + (bit >> 3)) >> shift;
  if (shift + bits > 8) v |= static_cast<unsigned>(__ldg(row + (bit >> 3) + 1)) << (8 - shift);
  return v & ((1u << bits) - 1u);
}

// Slot of token `pos` in a ring, given the slot of an earlier token `base_pos` (base_slot) less than
// `capacity` tokens... any distance: the loop runs once for the normal case pos - base < capacity.
__device__ __forceinline__ int64_t advance_slot(int64_t base_slot, int64_t delta, int64_t capacity) {
  int64_t s = base_slot + delta;
  if (s >= capacity) s -= capacity;
  if (s >= capacity) s %= capacity;
  return s;
}

// ---- block-level pieces shared by the kernels -------------------------------------------------

struct BlockWork {
  int b, hk, hq0, heads, split;
  int64_t t0, t1;  // absolute token positions of this block's slice (t0 >= t1: nothing)
};

__device__ __forceinline__ BlockWork block_work(const Params& p) {
  BlockWork w;
  w.b = blockIdx.z;
  w.hk = blockIdx.y / p.head_tiles;
  const int tile = blockIdx.y % p.head_tiles;
  w.hq0 = w.hk * p.group + tile * kHeadsPerBlock;
  w.heads = min(kHeadsPerBlock, p.group - tile * kHeadsPerBlock);
  w.split = blockIdx.x;
  const int64_t beg = p.ranges_dev ? p.ranges_dev[2 * w.b] : p.ranges[2 * w.b];
  const int64_t end = p.ranges_dev ? p.ranges_dev[2 * w.b + 1] : p.ranges[2 * w.b + 1];
  w.t0 = beg + static_cast<int64_t>(w.split) * p.tokens_per_split;
  w.t1 = min(end, w.t0 + p.tokens_per_split);
  return w;
}

// In-place unnormalized FWHT of `rows` rows of D floats in shared memory (stages h = 1, 2, 4, ...,
// as the CPU). Every thread of the block must call it; it ends with a barrier.
__device__ void fwht_rows(float* x, int rows, int D) {
  const int half = D / 2;
  for (int h = 1; h < D; h <<= 1) {
    for (int i = threadIdx.x; i < rows * half; i += blockDim.x) {
      const int r = i / half, k = i - r * half;
      const int j = (k / h) * 2 * h + (k % h);
      float* v = x + r * D;
      const float a = v[j], c = v[j + h];
      v[j] = a + c;
      v[j + h] = a - c;
    }
    __syncthreads();
  }
}

// qs[h][d] = FWHT(s_K ⊙ q[b, hq0 + h])[d] for the block's heads (unnormalized). Ends with a barrier.
// Used by the f32 kernel; the f16 kernel does the same per warp in registers (see warp_fwht).
// (Round 3 tried issuing 8 query loads per thread before any store, to cut the prologue's fixed
// cost on short sequences: no change, 0.0249 vs 0.0249 ms at B=1 L=4K D=128 and 0.0422 vs 0.0420
// at D=256; bench/results/2026-11-29-decode-attention-r3.md. So this loop is not the fixed cost.)
__device__ void load_rotated_queries(const Params& p, const BlockWork& w, float* qs) {
  const int D = p.dim;
  const int n = w.heads * D;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int h = i / D, d = i - h * D;
    const int64_t idx = w.b * p.q_stride_b + (w.hq0 + h) * p.q_stride_h + d;
    const float x = load_elem(p.q, p.q_dtype, idx);
    qs[i] = p.ksign ? x * p.ksign[d] : x;
  }
  __syncthreads();
  fwht_rows(qs, w.heads, D);
}

// Final rows: out = s_V ⊙ FWHT(O / L) / D, or zeros where L == 0 (no tokens). fin: [rows][D] in
// shared memory, L[r * l_stride]: the rows' sums. Every thread must call it.
__device__ void store_output_rows(const Params& p, int b, int hq0, int rows, float* fin, const float* L, int l_stride) {
  const int D = p.dim;
  for (int i = threadIdx.x; i < rows * D; i += blockDim.x) {
    const float l = L[(i / D) * l_stride];
    fin[i] = l == 0.0f ? 0.0f : fin[i] / (l * static_cast<float>(D));
  }
  __syncthreads();
  fwht_rows(fin, rows, D);
  for (int i = threadIdx.x; i < rows * D; i += blockDim.x) {
    const int h = i / D, d = i - h * D;
    const float v = p.vsign ? fin[i] * p.vsign[d] : fin[i];
    store_elem(p.out, p.out_dtype, (static_cast<int64_t>(b) * p.q_heads + hq0 + h) * D + d, v);
  }
}

// Merges the warps' states (cw [kWarps][8][D] O, cml [kWarps][8][2] (m, l)) into fin [heads][D],
// then finalizes (one slice) or writes this slice's partial. Begins after a barrier.
__device__ void merge_and_store(const Params& p, const BlockWork& w, const float* cw, const float* cml, float* fin,
                                float* fin_ml) {
  const int D = p.dim;
  for (int h = threadIdx.x; h < w.heads; h += blockDim.x) {
    float M = kNegInf;
    for (int k = 0; k < kWarps; ++k) M = fmaxf(M, cml[(k * kHeadsPerBlock + h) * 2]);
    float L = 0;
    if (M != kNegInf)
      for (int k = 0; k < kWarps; ++k)
        L += cml[(k * kHeadsPerBlock + h) * 2 + 1] * exp2f(cml[(k * kHeadsPerBlock + h) * 2] - M);
    fin_ml[2 * h] = M;
    fin_ml[2 * h + 1] = L;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < w.heads * D; i += blockDim.x) {
    const int h = i / D, d = i - h * D;
    const float M = fin_ml[2 * h];
    float o = 0;
    if (M != kNegInf)
      for (int k = 0; k < kWarps; ++k)
        o += cw[(k * kHeadsPerBlock + h) * D + d] * exp2f(cml[(k * kHeadsPerBlock + h) * 2] - M);
    fin[i] = o;
  }
  __syncthreads();
  if (p.splits == 1) {
    store_output_rows(p, w.b, w.hq0, w.heads, fin, fin_ml + 1, 2);
    return;
  }
  for (int i = threadIdx.x; i < w.heads * D; i += blockDim.x) {
    const int h = i / D, d = i - h * D;
    const int64_t row = (static_cast<int64_t>(w.b) * p.q_heads + w.hq0 + h) * p.splits + w.split;
    p.part_o[row * D + d] = fin[i];
    if (d == 0) {
      p.part_ml[2 * row] = fin_ml[2 * h];
      p.part_ml[2 * row + 1] = fin_ml[2 * h + 1];
    }
  }
}

// ---- warp-level row pieces (f16 kernel prologue/epilogue and the combine, D known at compile time)
//
// The block-wide pieces above divide by the runtime D and pass log2(D) barriers; at one block of
// four warps per SM (short sequences) their ~3,000 instructions a warp were about three quarters
// of the main kernel's instructions (bench/results/2026-11-29-decode-attention-ncu-b1-l4k.txt).
// These do the same arithmetic in the same order inside one warp: lane holds dims lane + 32j.

// In-place unnormalized FWHT of one row of D floats held by a warp (stages h = 1, 2, 4, ... as the
// CPU and fwht_rows: a butterfly's lower element becomes a + c, the upper a − c, with a the lower).
template <int D>
__device__ __forceinline__ void warp_fwht(float (&v)[D / 32]) {
  constexpr int E = D / 32;
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int h = 1; h < 32; h <<= 1) {
    const bool upper = (lane & h) != 0;
#pragma unroll
    for (int j = 0; j < E; ++j) {
      const float o = __shfl_xor_sync(0xffffffffu, v[j], h);
      v[j] = upper ? o - v[j] : v[j] + o;
    }
  }
#pragma unroll
  for (int h = 1; h < E; h <<= 1)
#pragma unroll
    for (int j = 0; j < E; ++j)
      if ((j & h) == 0) {
        const float a = v[j], c = v[j + h];
        v[j] = a + c;
        v[j + h] = a - c;
      }
}

// V's signs for a lane's dims lane + 32j (1 where the cache has none: the product is then exact),
// requested before a row's sums and FWHT. (Loaded inside warp_store_row's store loop, each sign
// waited for the store before it: D/32 memory round trips in series at the very end of every call;
// moving them cut 1.2 µs from the split rows and 1.6 / 3.1 µs from the one-slice rows at D = 128 /
// 256: bench/results/2026-11-30-attn-merge-s17.md.)
template <int D>
__device__ __forceinline__ void load_vsign(const Params& p, float (&sg)[D / 32]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int j = 0; j < D / 32; ++j) sg[j] = p.vsign ? __ldg(p.vsign + lane + 32 * j) : 1.0f;
}

// One final row by one warp: out[b, hq] = s_V ⊙ FWHT(o / (l·D)), zeros where l == 0 (as
// store_output_rows, bitwise). sg: load_vsign's.
template <int D>
__device__ __forceinline__ void warp_store_row(const Params& p, int b, int hq, float (&v)[D / 32], float l,
                                               const float (&sg)[D / 32]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int j = 0; j < D / 32; ++j) v[j] = l == 0.0f ? 0.0f : v[j] / (l * static_cast<float>(D));
  warp_fwht<D>(v);
  const int64_t row = (static_cast<int64_t>(b) * p.q_heads + hq) * D;
#pragma unroll
  for (int j = 0; j < D / 32; ++j) store_elem(p.out, p.out_dtype, row + lane + 32 * j, v[j] * sg[j]);
}

// The f16 kernel's merge area cw [kWarps][8][D] holds each row's dims in pairs (2P, 2P + 1), P =
// (D/16)·g + mt for the lane (g, t4) and m-tile mt that wrote it. Stored at pair P ^ x with x from
// (g, t4) (x < min(D/16, 16), so only mt's bits change): a warp's 32 float2 stores of one m-tile
// then cover all 32 banks twice (2 wavefronts; unswizzled they hit 2 banks, ncu: 7.3-way store
// conflicts), and a warp reading 32 consecutive dims of a row still reads 32 distinct banks.
template <int D>
__device__ __forceinline__ int cw_swizzle(int g, int t4) {
  constexpr int M = D / 16;                                          // m-tiles: pairs per g block
  constexpr int MB = M < 16 ? M : 16;                                // mt bits that pick the bank pair
  constexpr int GB = M >= 16 ? 0 : (M == 8 ? 1 : (M == 4 ? 2 : 3));  // g's bits already in it: log2(16/M)
  return ((g >> GB) | (t4 << (3 - GB))) & (MB - 1);
}

// N consecutive floats (N = 2, 4, 8 or 16; the address 8- or 16-byte aligned) as vector accesses.
template <int N>
__device__ __forceinline__ void store_vec(float* dst, const float (&v)[N]) {
  if constexpr (N == 2) {
    *reinterpret_cast<float2*>(dst) = make_float2(v[0], v[1]);
  } else {
#pragma unroll
    for (int i = 0; i < N / 4; ++i)
      reinterpret_cast<float4*>(dst)[i] = make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
  }
}

// The same, loaded through L2 (__ldcg: another block wrote them during this kernel).
template <int N>
__device__ __forceinline__ void load_vec_cg(const float* src, float (&v)[N]) {
  if constexpr (N == 2) {
    const float2 x = __ldcg(reinterpret_cast<const float2*>(src));
    v[0] = x.x;
    v[1] = x.y;
  } else {
#pragma unroll
    for (int i = 0; i < N / 4; ++i) {
      const float4 x = __ldcg(reinterpret_cast<const float4*>(src) + i);
      v[4 * i] = x.x;
      v[4 * i + 1] = x.y;
      v[4 * i + 2] = x.z;
      v[4 * i + 3] = x.w;
    }
  }
}

// One output row from the slices' partial states, by one warp: out[b, hq] = the partials' O
// weighted by 2^(m_s − M), over Σ l_s·2^(m_s − M). The same floating-point operations in the same
// order as kernel_combine<D> (round 4's second kernel), so the result is bitwise the same: there,
// thread t = 32k + j of 128 summed l over the slices t, t + 128, ..., each warp's sums were added by
// a butterfly, then warp 0's + 1's + 2's + 3's; and the O of dims 4v..4v+3 was summed by
// G = 512/D groups of threads, group i over the slices i, i + G, ... in order, then group 0's + 1's
// + ... — here lk[k] and acc[i] are those sums, in the same order.
template <int D>
__device__ __forceinline__ void merge_slices(const Params& p, int b, int hq) {
  constexpr int E = D / 32;        // dims a lane holds: lane + 32j
  constexpr int G = 512 / D;       // kernel_combine's slice groups (kThreads threads of float4 each)
  constexpr int NB = 2 * G;        // slices loaded together (2G·E = 32 floats of registers a lane)
  static_assert(32 % NB == 0 && kThreads * 4 == 512, "a batch stays inside a chunk of 32 slices");
  const int lane = threadIdx.x & 31, S = p.splits;
  const int64_t row = static_cast<int64_t>(b) * p.q_heads + hq;
  const float* ml = p.part_ml + row * S * 2;
  const float* po = p.part_o + row * S * D + lane * E;

  float2 ml0 = make_float2(kNegInf, 0.0f);  // slice `lane`'s (m, l)
  if (lane < S) ml0 = __ldcg(reinterpret_cast<const float2*>(ml) + lane);
  float sg[E];  // V's signs, requested with the first (m, l)
  load_vsign<D>(p, sg);
  float mx = ml0.x;
  for (int s = 32 + lane; s < S; s += 32) mx = fmaxf(mx, __ldcg(ml + 2 * s));
  const float M = warp_max(mx);

  float lk[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  float acc[G][E];
#pragma unroll
  for (int i = 0; i < G; ++i)
#pragma unroll
    for (int j = 0; j < E; ++j) acc[i][j] = 0.0f;
  for (int c = 0; 32 * c < S; ++c) {
    const int sl = 32 * c + lane;
    const float2 mlv = c == 0 ? ml0 : (sl < S ? __ldcg(reinterpret_cast<const float2*>(ml) + sl) : ml0);
    float wgt = 0.0f;  // the weight of slice sl
    if (sl < S) {
      wgt = M == kNegInf ? 0.0f : exp2f(mlv.x - M);
      const float lw = mlv.y * wgt;  // into lk[c & 3]; + 0 elsewhere (exact: lk ≥ +0) keeps lk in registers
#pragma unroll
      for (int k = 0; k < 4; ++k) lk[k] += (c & 3) == k ? lw : 0.0f;
    }
    const int n = min(32, S - 32 * c);
    for (int i = 0; i < n; i += NB) {
      float x[NB][E];
#pragma unroll
      for (int k = 0; k < NB; ++k)
        if (i + k < n) load_vec_cg<E>(po + static_cast<int64_t>(32 * c + i + k) * D, x[k]);
#pragma unroll
      for (int k = 0; k < NB; ++k) {
        const float wk = __shfl_sync(0xffffffffu, wgt, i + k);
        if (i + k < n)
#pragma unroll
          for (int j = 0; j < E; ++j) acc[k % G][j] += x[k][j] * wk;
      }
    }
  }
  float L = warp_sum(lk[0]);
#pragma unroll
  for (int k = 1; k < 4; ++k) L = L + warp_sum(lk[k]);
  float v[E];
#pragma unroll
  for (int j = 0; j < E; ++j) {
    float o = acc[0][j];
#pragma unroll
    for (int i = 1; i < G; ++i) o += acc[i][j];
    v[j] = o;
  }
  warp_store_row<D>(p, b, hq, v, L, sg);
}

// ---- the exact f32 kernel -------------------------------------------------------------------

// Calls f(d, code) for every code of a packed row, reading 32-bit words where the layout allows.
template <typename F>
__device__ __forceinline__ void for_each_code(const uint8_t* row, int D, int bits, F&& f) {
  if (bits == 4 && D % 8 == 0) {
    for (int i = 0; i < D / 8; ++i) {
      const uint32_t x = __ldg(reinterpret_cast<const unsigned int*>(row) + i);
#pragma unroll
      for (int j = 0; j < 8; ++j) f(8 * i + j, (x >> (4 * j)) & 15u);
    }
  } else if (bits == 8 && D % 4 == 0) {
    for (int i = 0; i < D / 4; ++i) {
      const uint32_t x = __ldg(reinterpret_cast<const unsigned int*>(row) + i);
#pragma unroll
      for (int j = 0; j < 4; ++j) f(4 * i + j, (x >> (8 * j)) & 255u);
    }
  } else {
    for (int d = 0; d < D; ++d) f(d, get_code(row, d, bits));
  }
}

// DPL: dims per lane in the V accumulation (D / 32, or 1 when D < 32).
template <int DPL>
__global__ void __launch_bounds__(kThreads) kernel_decode_f32(const __grid_constant__ Params p) {
  extern __shared__ float smem[];
  const int D = p.dim;
  float* qs = smem;                                   // [8][D] rotated queries, later the merged rows
  float* cbk = qs + kHeadsPerBlock * D;               // [256]
  float* cbv = cbk + 256;                             // [256]
  float* cw = cbv + 256;                              // [kWarps][8][D]
  float* cml = cw + kWarps * kHeadsPerBlock * D;      // [kWarps][8][2]
  float* fin_ml = cml + kWarps * kHeadsPerBlock * 2;  // [8][2]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const BlockWork w = block_work(p);

  for (int i = threadIdx.x; i < (1 << p.kbits); i += blockDim.x) cbk[i] = p.kcb[i];
  for (int i = threadIdx.x; i < (1 << p.vbits); i += blockDim.x) cbv[i] = p.vcb[i];
  load_rotated_queries(p, w, qs);  // ends with a barrier (the codebooks are visible too)

  const int64_t krow = static_cast<int64_t>(D) * p.kbits / 8, vrow = static_cast<int64_t>(D) * p.vbits / 8;
  const int64_t head = static_cast<int64_t>(w.b) * p.kv_heads + w.hk;
  const uint8_t* kbase = p.kp + head * p.capacity * krow;
  const uint8_t* vbase = p.vp + head * p.capacity * vrow;
  const float* ksb = p.ks + head * p.capacity;
  const float* vsb = p.vs + head * p.capacity;
  const int64_t slot0 = p.sliding ? w.t0 % p.capacity : w.t0;  // slot of the block's first token

  float m[kHeadsPerBlock], l[kHeadsPerBlock], acc[kHeadsPerBlock][DPL];
#pragma unroll
  for (int h = 0; h < kHeadsPerBlock; ++h) {
    m[h] = kNegInf;
    l[h] = 0;
#pragma unroll
    for (int i = 0; i < DPL; ++i) acc[h][i] = 0;
  }

  for (int64_t g0 = w.t0 + warp * 32; g0 < w.t1; g0 += kWarps * 32) {
    const int64_t pos = g0 + lane;
    const bool valid = pos < w.t1;
    const int64_t slot = valid ? (p.sliding ? advance_slot(slot0, pos - w.t0, p.capacity) : pos) : slot0;
    // Scores, lane = token.
    float s[kHeadsPerBlock];
#pragma unroll
    for (int h = 0; h < kHeadsPerBlock; ++h) s[h] = 0;
    for_each_code(kbase + slot * krow, D, p.kbits, [&](int d, unsigned code) {
      const float c = cbk[code];
#pragma unroll
      for (int h = 0; h < kHeadsPerBlock; ++h)
        if (h < w.heads) s[h] += qs[h * D + d] * c;
    });
    const float kscale = __ldg(ksb + slot) * p.score_scale;
    const float vscale = __ldg(vsb + slot);
    float pr[kHeadsPerBlock];
#pragma unroll
    for (int h = 0; h < kHeadsPerBlock; ++h) {
      const float sc = valid ? s[h] * kscale : kNegInf;
      const float m_new = fmaxf(m[h], warp_max(sc));
      const float alpha = m_new == m[h] ? 1.0f : exp2f(m[h] - m_new);
      pr[h] = exp2f(sc - m_new);
      l[h] = l[h] * alpha + pr[h];
#pragma unroll
      for (int i = 0; i < DPL; ++i) acc[h][i] *= alpha;
      m[h] = m_new;
      pr[h] *= vscale;
    }
    // V, lane = dims lane + 32 i: every token of the group in turn.
    const int n = static_cast<int>(w.t1 - g0 < 32 ? w.t1 - g0 : 32);
    for (int j = 0; j < n; ++j) {
      const int64_t sj = __shfl_sync(0xffffffffu, slot, j);
      float pj[kHeadsPerBlock];
#pragma unroll
      for (int h = 0; h < kHeadsPerBlock; ++h) pj[h] = __shfl_sync(0xffffffffu, pr[h], j);
      const uint8_t* row = vbase + sj * vrow;
#pragma unroll
      for (int i = 0; i < DPL; ++i) {
        const int d = lane + 32 * i;
        if (d < D) {
          const float c = cbv[get_code(row, d, p.vbits)];
#pragma unroll
          for (int h = 0; h < kHeadsPerBlock; ++h) acc[h][i] += pj[h] * c;
        }
      }
    }
  }

#pragma unroll
  for (int h = 0; h < kHeadsPerBlock; ++h) {
    l[h] = warp_sum(l[h]);
#pragma unroll
    for (int i = 0; i < DPL; ++i)
      if (lane + 32 * i < D) cw[(warp * kHeadsPerBlock + h) * D + lane + 32 * i] = acc[h][i];
    if (lane == 0) {
      cml[(warp * kHeadsPerBlock + h) * 2] = m[h];
      cml[(warp * kHeadsPerBlock + h) * 2 + 1] = l[h];
    }
  }
  __syncthreads();
  merge_and_store(p, w, cw, cml, qs, fin_ml);
}

// ---- the f16 tensor-core kernel ---------------------------------------------------------------

// Byte-indexed fp16 tables, 32 copies: lut[e * 32 + lane]. 4 bits: the half2 (c[e & 15], c[e >> 4]);
// 8 bits: c[e] in the low half.
template <int NT = kThreads, int kRowWords = 32>
__device__ void build_luts(uint32_t* lut4, uint32_t* lut8, const float* cb4, const float* cb8) {
  // Constant trip count (NT threads) and read-only loads, so the codebook loads of all iterations can
  // be issued before the first store (thread i fills entries i / 8 + (NT/8)k).
  static_assert(256 * 8 % NT == 0, "the threads cover the table evenly");
#pragma unroll
  for (int k = 0; k < 256 * 8 / NT; ++k) {
    const int i = threadIdx.x + k * NT;
    const int e = i >> 3, quad = i & 7;
    if (lut4) {
      const uint32_t v = half_bits(__ldg(cb4 + (e & 15))) | (half_bits(__ldg(cb4 + (e >> 4))) << 16);
      reinterpret_cast<uint4*>(lut4 + e * kRowWords)[quad] = make_uint4(v, v, v, v);
    }
    if (lut8) {
      const uint32_t v = half_bits(__ldg(cb8 + e));
      reinterpret_cast<uint4*>(lut8 + e * kRowWords)[quad] = make_uint4(v, v, v, v);
    }
  }
}

// D = 128: two 16-token tiles per warp chunk, and a register budget sized for 4 resident blocks per
// SM (round 3 measured one tile at 5 blocks/SM 7–24% slower; decode-attention-r3.md). With an 8-bit
// K or V, 3 blocks (168 registers): at 4 the K8/V4, K4/V8 and K8/V8 kernels spilled 48–160 bytes and
// ran 2–10% slower; one tile a chunk at 4 blocks (no spills either) was slower still for K8/V4
// (bench/results/2026-11-30-attn-tiled.md, call 9). (Since session 18 the wide loop serves those
// widths by default; these kernels serve FRUGAL_ATTN_KERNEL=registers.)
constexpr int kNsub128 = 2, kMinBlocks128 = 4, kMinBlocks128Bits8 = 3;

template <int D, int KB, int VB>
struct F16Shape {
  static constexpr int KS = D / 16;        // k-steps of S = Q·Kᵀ (and m-tiles of Oᵀ)
  static constexpr int KCB = D * KB / 32;  // bytes of a K row each lane reads (dims [D/4·t, D/4·(t+1)))
  static constexpr int VCB = D * VB / 64;  // bytes of a V row each lane reads (dims [D/8·g, D/8·(g+1)))
  static constexpr int NSUB = D <= 64 ? 4 : (D <= 128 ? kNsub128 : 1);  // 16-token tiles per warp chunk
  static constexpr int CH = 16 * NSUB;
  static constexpr bool kQInSmem = D > 256;  // q fragments: registers up to D = 256
  static constexpr int kLuts = (KB == VB) ? 1 : 2;
  // D = 256: the main loop is the rotating pipeline (see the kernel); every other D the per-chunk loop.
  static constexpr bool kRotate = D == 256;
};

// The wide-table loop's block: 8 warps, 2 blocks a multiprocessor (16 warps per SM, as the 4-warp
// kernel's 4 blocks), each with the 64 KB wide table. Every bit width: with an 8-bit K or V the loop
// spilled 48–156 bytes at D = 128 (128 registers; 12–24 since kVAfterScores) and was still faster
// than the same code at 4 warps × 3 blocks (168 registers, no spills; K8/V4 −3%, K4/V8 and K8/V8
// +1–3% against the register loop) or 6 warps × 2 blocks (no spills; −0.5 to −6%) — 16 warps an SM
// sharing two tables is what pays (bench/results/2026-12-01-attn-pool.md, calls 2–3).
constexpr int kWideWarps = 8, kWideMinBlocks = 2;
// Resident blocks an SM each f16 kernel is compiled for (its register budget).
template <int D, int KB, int VB, bool kWide>
constexpr int f16_min_blocks() {
  if constexpr (kWide) return kWideMinBlocks;
  if constexpr (D < 128) return kMinBlocks128;
  if constexpr (D == 128) return KB == 8 || VB == 8 ? kMinBlocks128Bits8 : kMinBlocks128;
  return 1;
}

// Shared memory of the f16 kernel (bytes), the one layout of every form: the tables / merge area
// (whichever is larger), qs (the q fragments, then free), σ [8] (+ 8 spare floats).
template <int D, int KB, int VB, int NW, bool kWide = false>
struct F16Smem {
  using S = F16Shape<D, KB, VB>;
  static constexpr int kCombine = NW * kHeadsPerBlock * (D + 2);
  static constexpr int kTables = kWide ? 2 * kLutWords : S::kLuts * kLutWords;
  static constexpr int kRegionWords = kTables > kCombine ? kTables : kCombine;
  static constexpr int kBytes = 4 * (kRegionWords + kHeadsPerBlock * D + 4 * kHeadsPerBlock);
};

// The token at K index r (0..15) of a 16-token tile of Oᵀ += Vᵀ·Pᵀ: K indices 2i and 2i + 1 hold
// tokens i and i + 4 (plus 8 from index 8 on), so lane (g, t4) reads the V rows of tokens
// t4 + {0, 4, 8, 12}. Each of its V loads (8 bytes a lane, dims by g) then covers four consecutive
// rows, two 128-byte lines a half-warp, where tokens 2t4 + c covered four rows two apart and four
// lines: the V loads' L1 data-pipe wavefronts fall from 64 to 32 a chunk
// (bench/results/2026-11-30-attn-probe.md, call 9).
// Sᵀ = K·Qᵀ keeps its rows in token order where K rows are 64 bytes (kKPairs): the 8 lanes of a
// quarter-warp then read rows 2i and 2i + 1, adjacent tokens, one line (in tile order
// they read tokens i and i + 4, two lines: 32 wavefronts a chunk instead of 16, and 4% slower at
// B=8 L=32K; bench/results/2026-11-30-attn-tiled.md). movmatrix leaves P in Sᵀ's row order, so two
// shuffles a fragment put it in tile order (to_tile_order).
__host__ __device__ constexpr int tile_token(int r) { return (r & 8) | ((r & 7) >> 1) | ((r & 1) << 2); }
static_assert(tile_token(0) == 0 && tile_token(1) == 4 && tile_token(6) == 3 && tile_token(7) == 7 &&
                  tile_token(9) == 12 && tile_token(14) == 11,
              "rows 2i, 2i + 1 of a tile half hold tokens i, i + 4");

// The real head dimension held by element (k-step s, K index k) of the S product.
template <int D>
__device__ __forceinline__ int q_dim(int t, int s, int h, int j) {
  return (D / 4) * t + 4 * s + 2 * h + j;
}

// NW: warps a block; kWide: the wide table (see lut_load_wide) and the bare ex2 in the softmax.
template <int D, int KB, int VB, int NW = kWarps, bool kWide = false>
__global__ void __launch_bounds__(NW * 32, (f16_min_blocks<D, KB, VB, kWide>()))
    kernel_decode_f16(const __grid_constant__ Params p) {
  using S = F16Shape<D, KB, VB>;
  using SM = F16Smem<D, KB, VB, NW, kWide>;
  extern __shared__ __align__(128) uint32_t smem_u[];
  uint32_t* lut_a = smem_u;  // the table of the first width needed
  uint32_t* lut_b = smem_u + (S::kLuts == 2 ? kLutWords : 0);
  uint32_t* lutK = lut_a;
  uint32_t* lutV = (KB == VB) ? lut_a : lut_b;
  float* cw = reinterpret_cast<float*>(smem_u);                     // [NW][8][D], aliases the tables after the loop
  float* cml = cw + NW * kHeadsPerBlock * D;                        // [NW][8][2]
  float* qs = reinterpret_cast<float*>(smem_u + SM::kRegionWords);  // [8][D] floats of room: the q fragments
  float* sig = qs + kHeadsPerBlock * D;                                  // [8] per-head power-of-two query scale
  // q fragments [KS][kQfStride] uint2 (padded row: conflict-free stores), in qs's space until the merge.
  constexpr int kQfStride = 33;
  static_assert(S::KS * kQfStride * 8 <= kHeadsPerBlock * D * 4, "q fragments fit in qs");
  uint2* qf = reinterpret_cast<uint2*>(qs);

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t4 = lane & 3;
  // Sᵀ's rows in token order (see tile_token) where measured faster: D = 128 at 4 bits (64-byte K
  // rows). At D = 64 (32-byte rows) 1% slower (attn-tiled.md, call 2); from 128-byte rows on, a row
  // is a line in either order.
  constexpr bool kKPairs = D == 128 && KB == 4;
  const int gt = kKPairs ? g : tile_token(g);  // this lane's Sᵀ rows g, g + 8 of a tile are tokens gt, gt + 8
  // P's B fragment from Sᵀ's row order to tile order: lane (g, t4) holds tokens 2t4, 2t4 + 1 (+ 8)
  // and wants t4, t4 + 4 (+ 8): half t4 % 2 of lanes (g, t4 / 2) and (g, 2 + t4 / 2).
  const int from_a = (lane & ~3) | (t4 >> 1), from_b = from_a + 2;
  const uint32_t half_sel = (t4 & 1) ? 0x7632u : 0x5410u;
  auto to_tile_order = [&](uint32_t b) -> uint32_t {
    if constexpr (!kKPairs) return b;
    const uint32_t x = __shfl_sync(0xffffffffu, b, from_a), y = __shfl_sync(0xffffffffu, b, from_b);
    return __byte_perm(x, y, half_sel);
  };
  // The V rows of this lane's K indices 2t4 + {0, 1, 8, 9} of tile j: tokens t4 + v_tok(j, e).
  auto v_tok = [](int j, int e) { return 16 * j + 4 * (e & 1) + 8 * (e >> 1); };
  const BlockWork w = block_work(p);

  constexpr int KROW = D * KB / 8, VROW = D * VB / 8;
  // D = 128, 4-bit K: each full chunk asks L2 for the warp's next chunk's K lines (below).
  constexpr bool kPrefetchK = D == 128 && KB == 4;
  constexpr int kPrefetchLines = S::CH * KROW / 128;
  static_assert(!kPrefetchK || (kPrefetchLines <= 32 && S::CH * KROW % 128 == 0), "a line a lane");
  const int64_t head = static_cast<int64_t>(w.b) * p.kv_heads + w.hk;
  const int64_t cap = p.capacity;
  // The block's query rows (rows warp, warp + 4) and K's signs are requested first, so their
  // memory latency overlaps the codebook loads and the table stores (round 5; before, the two
  // round trips were in series: the query loads were issued after the tables were written).
  constexpr int kRowsPerWarp = kHeadsPerBlock / NW;
  uint32_t qraw[kRowsPerWarp][D / 32];
  float qsgn[D / 32];
#pragma unroll
  for (int j = 0; j < D / 32; ++j) qsgn[j] = p.ksign ? __ldg(p.ksign + lane + 32 * j) : 1.0f;
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int r = i * NW + warp;
    const int64_t base = w.b * p.q_stride_b + (w.hq0 + min(r, w.heads - 1)) * p.q_stride_h;
#pragma unroll
    for (int j = 0; j < D / 32; ++j) qraw[i][j] = load_raw(p.q, p.q_dtype, base + lane + 32 * j);
  }
  if constexpr (kWide)  // 4-bit entries in bytes 0–127 of each 256-byte row, 8-bit ones in bytes 128–255
    build_luts<NW * 32, 64>(KB == 4 || VB == 4 ? smem_u : nullptr, KB == 8 || VB == 8 ? smem_u + 32 : nullptr,
                            KB == 4 ? p.kcb : p.vcb, KB == 8 ? p.kcb : p.vcb);
  else
    build_luts<NW * 32, 32>(KB == 4 ? lutK : (VB == 4 ? lutV : nullptr), KB == 8 ? lutK : (VB == 8 ? lutV : nullptr),
                            KB == 4 ? p.kcb : p.vcb, KB == 8 ? p.kcb : p.vcb);
  // Rotated queries as fp16 B fragments, one warp per head row (rows warp, warp + 4): s_K, FWHT and
  // the per-head power-of-two scale σ ≥ max|q_rot| (so the fp16 query cannot overflow with bf16
  // inputs) all in registers; then each value goes to its place in qf [KS][kQfStride] uint2, entry
  // (s, lane g·4 + t4) = dims (D/4)·t4 + 4s + 0..3 of head g (the B operand of Sᵀ = K·Qᵀ: K index =
  // dims 2t4, 2t4+1 | 2t4+8, 2t4+9 of k-step s in the permuted order, N = head g). Same arithmetic
  // as the block-wide load_rotated_queries + fwht_rows + σ, bitwise (× 1 where there are no signs).
  __half* qfh = reinterpret_cast<__half*>(qf);
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int r = i * NW + warp;
    float v[D / 32];
#pragma unroll
    for (int j = 0; j < D / 32; ++j) v[j] = r < w.heads ? raw_to_float(qraw[i][j], p.q_dtype) * qsgn[j] : 0.0f;
    warp_fwht<D>(v);
    float mx = 0;
#pragma unroll
    for (int j = 0; j < D / 32; ++j) mx = fmaxf(mx, fabsf(v[j]));
    mx = warp_max(mx);
    int e = 0;
    frexpf(mx, &e);
    const float sg = (mx > 0 && isfinite(mx)) ? ldexpf(1.0f, e) : 1.0f;
    if (lane == 0) sig[r] = sg;
    const float inv = 1.0f / sg;  // σ a power of two: exact
#pragma unroll
    for (int j = 0; j < D / 32; ++j) {
      const int d = lane + 32 * j, tt = d / (D / 4), rem = d % (D / 4);
      qfh[((rem / 4) * kQfStride + 4 * r + tt) * 4 + (rem % 4)] = __float2half_rn(v[j] * inv);
    }
  }
  __syncthreads();  // tables, σ and q fragments ready

  uint32_t qb0[S::kQInSmem ? 1 : S::KS], qb1[S::kQInSmem ? 1 : S::KS];
  if constexpr (!S::kQInSmem) {
#pragma unroll
    for (int s = 0; s < S::KS; ++s) {
      const uint2 f = qf[s * kQfStride + lane];
      qb0[s] = f.x;
      qb1[s] = f.y;
    }
  }
  // This lane's scores are for heads 2t4 and 2t4 + 1 (the C columns of Sᵀ).
  const float hf0 = (2 * t4 < w.heads ? sig[2 * t4] : 0.0f) * p.score_scale;
  const float hf1 = (2 * t4 + 1 < w.heads ? sig[2 * t4 + 1] : 0.0f) * p.score_scale;

  const uint8_t* kbase = p.kp + head * p.capacity * KROW + t4 * S::KCB;
  const uint8_t* vbase = p.vp + head * p.capacity * VROW + g * S::VCB;
  const float* ksb = p.ks + head * p.capacity;
  const float* vsb = p.vs + head * p.capacity;
  const int64_t slot_t0 = p.sliding ? w.t0 % cap : w.t0;
  const uint32_t lutK_addr = static_cast<uint32_t>(__cvta_generic_to_shared(lutK + lane));
  const uint32_t lutV_addr = static_cast<uint32_t>(__cvta_generic_to_shared(lutV + lane));
  const uint32_t lut_base = smem_addr(smem_u), lane4 = 4 * lane;
  // Byte k of x through the table of its width (lane_addr: the register loop's table of K or V; the
  // wide table serves both): the 4-bit one gives the half2 of its two codes, the 8-bit one c[byte] in
  // the low half.
  auto look4 = [&](uint32_t lane_addr, uint32_t x, int k) -> uint32_t {
    if constexpr (kWide)
      return lut_load_wide(lut_base, lane4, x, k);
    else
      return lut_load(lane_addr, byte_of(x, k));
  };
  auto look8 = [&](uint32_t lane_addr, uint32_t x, int k) -> uint32_t {
    if constexpr (kWide)
      return lut_load_wide(lut_base, lane4 + 128, x, k);
    else
      return lut_load(lane_addr, byte_of(x, k));
  };

  // Running softmax state of heads 2t4 and 2t4 + 1 (log2 units; l partial over this lane's tokens),
  // and the V-scale reference u the fp16 weights are normalized by.
  float m0 = kNegInf, m1 = kNegInf, l0 = 0, l1 = 0, u = 1e-30f, inv_u = 1.0f / u;
  float acc[S::KS][4];  // Oᵀ: rows (dims) 2(D/16·g + mt) and +1, columns (heads) 2t4 and 2t4 + 1
#pragma unroll
  for (int i = 0; i < S::KS; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0;

  // The three steps of a chunk, shared by both main loops below.
  // Sᵀ = K·Qᵀ per 16-token tile: sc[j][e] = token 16j + gt + 8(e >> 1), head 2t4 + (e & 1).
  auto scores = [&](const uint32_t(&kw)[S::NSUB][2][S::KCB / 4], float(&sc)[S::NSUB][4]) {
#pragma unroll
    for (int j = 0; j < S::NSUB; ++j) {
      float c[4] = {0, 0, 0, 0};
#pragma unroll
      for (int s = 0; s < S::KS; ++s) {
        uint32_t a0, a1, a2, a3;  // rows: tokens gt, gt + 8; K index: dims 2t4.. (a0, a1) and 2t4+8.. (a2, a3)
        if constexpr (KB == 4) {
          const uint32_t x0 = kw[j][0][s >> 1], x1 = kw[j][1][s >> 1];
          const int k = 2 * (s & 1);
          a0 = look4(lutK_addr, x0, k);
          a1 = look4(lutK_addr, x1, k);
          a2 = look4(lutK_addr, x0, k + 1);
          a3 = look4(lutK_addr, x1, k + 1);
        } else {
          const uint32_t x0 = kw[j][0][s], x1 = kw[j][1][s];
          a0 = __byte_perm(look8(lutK_addr, x0, 0), look8(lutK_addr, x0, 1), 0x5410);
          a1 = __byte_perm(look8(lutK_addr, x1, 0), look8(lutK_addr, x1, 1), 0x5410);
          a2 = __byte_perm(look8(lutK_addr, x0, 2), look8(lutK_addr, x0, 3), 0x5410);
          a3 = __byte_perm(look8(lutK_addr, x1, 2), look8(lutK_addr, x1, 3), 0x5410);
        }
        uint32_t b0, b1;
        if constexpr (S::kQInSmem) {
          const uint2 f = qf[s * kQfStride + lane];
          b0 = f.x;
          b1 = f.y;
        } else {
          b0 = qb0[s];
          b1 = qb1[s];
        }
        mma16816<__half>(c, {a0, a1, a2, a3}, b0, b1);
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) sc[j][e] = c[e];
    }
  };
  // Scale and mask the chunk's scores (tokens from `first` on; all valid when kFull), zero the V
  // scales of masked tokens, and move the running maxima (rescaling l and Oᵀ). Returns 1/u.
  auto softmax_step = [&](auto full_tag, int64_t first, float(&sc)[S::NSUB][4], const float(&ksc)[S::NSUB][2],
                          float(&vsc)[S::NSUB][2]) -> float {
    constexpr bool kFull = decltype(full_tag)::value;
    float cmax0 = kNegInf, cmax1 = kNegInf, vmax = 0;
#pragma unroll
    for (int j = 0; j < S::NSUB; ++j)
#pragma unroll
      for (int n = 0; n < 2; ++n) {
        const bool valid = kFull || first + 16 * j + 8 * n + gt < w.t1;
        const float k0 = ksc[j][n] * hf0, k1 = ksc[j][n] * hf1;
        sc[j][2 * n] = valid ? sc[j][2 * n] * k0 : kNegInf;
        sc[j][2 * n + 1] = valid ? sc[j][2 * n + 1] * k1 : kNegInf;
        vsc[j][n] = valid ? vsc[j][n] : 0.0f;
        cmax0 = fmaxf(cmax0, sc[j][2 * n]);
        cmax1 = fmaxf(cmax1, sc[j][2 * n + 1]);
        vmax = fmaxf(vmax, vsc[j][n]);
      }
    // The chunk's maxima over all its tokens (every g) move the running ones only where some lane's
    // own exceed them: only then are they reduced across the lanes (three shuffle rounds) and the
    // state rescaled — after the first chunks, rarely. Same values as reducing every chunk.
    if (__any_sync(0xffffffffu, cmax0 > m0 || cmax1 > m1 || vmax > u)) {
#pragma unroll
      for (int o = 4; o < 32; o <<= 1) {
        cmax0 = fmaxf(cmax0, __shfl_xor_sync(0xffffffffu, cmax0, o));
        cmax1 = fmaxf(cmax1, __shfl_xor_sync(0xffffffffu, cmax1, o));
        vmax = fmaxf(vmax, __shfl_xor_sync(0xffffffffu, vmax, o));
      }
      const float n0 = fmaxf(m0, cmax0), n1 = fmaxf(m1, cmax1), u_new = fmaxf(u, vmax);
      const float a0 = n0 == m0 ? 1.0f : ex2<kWide>(m0 - n0), a1 = n1 == m1 ? 1.0f : ex2<kWide>(m1 - n1);
      l0 *= a0;
      l1 *= a1;
      const float r = u / u_new, f0 = a0 * r, f1 = a1 * r;
#pragma unroll
      for (int i = 0; i < S::KS; ++i) {
        acc[i][0] *= f0;
        acc[i][1] *= f1;
        acc[i][2] *= f0;
        acc[i][3] *= f1;
      }
      m0 = n0;
      m1 = n1;
      u = u_new;
      inv_u = 1.0f / u;
    }
    return inv_u;
  };
  // P = exp2(S − m) (summed into l), weighted by the V scales over u, then Oᵀ += Vᵀ·Pᵀ tile by tile.
  auto accumulate_pv = [&](const float(&sc)[S::NSUB][4], const float(&vsc)[S::NSUB][2],
                           const uint32_t(&vw)[S::NSUB][4][S::VCB / 4], float inv_u) {
#pragma unroll
    for (int j = 0; j < S::NSUB; ++j) {
      float pt[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float pe = ex2<kWide>(sc[j][e] - ((e & 1) ? m1 : m0));
        if (e & 1)
          l1 += pe;
        else
          l0 += pe;
        pt[e] = pe * (vsc[j][e >> 1] * inv_u);
      }
      // Pᵀ as the B operand (K index = tokens tile_token(2t4), tile_token(2t4 + 1) | +8, N = head g):
      // the transpose of the 8×8 fp16 tiles (Sᵀ row g, heads 2t4, 2t4 + 1) this lane holds, in tile order.
      const uint32_t b0 = to_tile_order(transpose_8x8(pack_half2(pt[0], pt[1])));
      const uint32_t b1 = to_tile_order(transpose_8x8(pack_half2(pt[2], pt[3])));
      // Oᵀ += Vᵀ Pᵀ over the 16 tokens of tile j, m-tile by m-tile (16 dims each).
      if constexpr (VB == 4) {
#pragma unroll
        for (int wi = 0; wi < S::VCB / 4; ++wi) {
          const uint32_t x0 = vw[j][0][wi], x1 = vw[j][1][wi], x2 = vw[j][2][wi], x3 = vw[j][3][wi];
          // Bytes pairing the same dim of two tokens: low nibble token 2t4 (+8), high nibble 2t4+1 (+9).
          const uint32_t lo01 = (x0 & 0x0F0F0F0Fu) | ((x1 << 4) & 0xF0F0F0F0u);
          const uint32_t hi01 = ((x0 >> 4) & 0x0F0F0F0Fu) | (x1 & 0xF0F0F0F0u);
          const uint32_t lo23 = (x2 & 0x0F0F0F0Fu) | ((x3 << 4) & 0xF0F0F0F0u);
          const uint32_t hi23 = ((x2 >> 4) & 0x0F0F0F0Fu) | (x3 & 0xF0F0F0F0u);
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            const int mt = 4 * wi + k;
            mma16816<__half>(acc[mt],
                             {look4(lutV_addr, lo01, k), look4(lutV_addr, hi01, k), look4(lutV_addr, lo23, k),
                              look4(lutV_addr, hi23, k)},
                             b0, b1);
          }
        }
      } else {
#pragma unroll
        for (int mt = 0; mt < S::KS; ++mt) {
          const int wi = mt >> 1, k = 2 * (mt & 1);
          const uint32_t x0 = vw[j][0][wi], x1 = vw[j][1][wi], x2 = vw[j][2][wi], x3 = vw[j][3][wi];
          const uint32_t a0 = __byte_perm(look8(lutV_addr, x0, k), look8(lutV_addr, x1, k), 0x5410);
          const uint32_t a1 = __byte_perm(look8(lutV_addr, x0, k + 1), look8(lutV_addr, x1, k + 1), 0x5410);
          const uint32_t a2 = __byte_perm(look8(lutV_addr, x2, k), look8(lutV_addr, x3, k), 0x5410);
          const uint32_t a3 = __byte_perm(look8(lutV_addr, x2, k + 1), look8(lutV_addr, x3, k + 1), 0x5410);
          mma16816<__half>(acc[mt], {a0, a1, a2, a3}, b0, b1);
        }
      }
    }
  };

  int64_t start = w.t0 + static_cast<int64_t>(warp) * S::CH;
  int64_t start_slot = p.sliding ? advance_slot(slot_t0, static_cast<int64_t>(warp) * S::CH, cap) : start;
  if constexpr (S::kRotate) {
    // The rotating register pipeline (D = 256): the next chunk's K rows and both scales are
    // requested as soon as the scores have consumed this chunk's, its V rows as soon as the Oᵀ
    // products have consumed this chunk's, so each load has about half an iteration of independent
    // work to hide behind, without a second register buffer. Measured 4–6% faster than the loop
    // below at D = 256 (no register cap there); at D = 128 it was 17% slower at the 128-register cap
    // (spills) and 5% slower at 168 registers, 3 blocks/SM (bench/results/2026-11-29-decode-attention-r3.md).
    uint32_t kw[S::NSUB][2][S::KCB / 4];
    uint32_t vw[S::NSUB][4][S::VCB / 4];
    float ksc[S::NSUB][2], vsc[S::NSUB][2];
    // Full chunk: every token valid and the slots contiguous (no ring wrap); otherwise per-token
    // slots, tokens past the slice reading the slice's first token (masked below).
    auto is_full = [&](int64_t st, int64_t sl) { return st + S::CH <= w.t1 && (!p.sliding || sl + S::CH <= cap); };
    auto slot_of = [&](int64_t st, int64_t sl, int i) -> int64_t {
      if (st + i >= w.t1) return slot_t0;
      return p.sliding ? advance_slot(sl, i, cap) : st + i;
    };
    auto load_k = [&](int64_t st, int64_t sl) {
      if (is_full(st, sl)) {
        const uint8_t* k_lane = kbase + (sl + gt) * KROW;
#pragma unroll
        for (int j = 0; j < S::NSUB; ++j)
#pragma unroll
          for (int n = 0; n < 2; ++n) {
            load_words<S::KCB>(k_lane + (16 * j + 8 * n) * KROW, kw[j][n]);
            ksc[j][n] = __ldg(ksb + sl + gt + 16 * j + 8 * n);
            vsc[j][n] = __ldg(vsb + sl + gt + 16 * j + 8 * n);
          }
      } else {
#pragma unroll
        for (int j = 0; j < S::NSUB; ++j)
#pragma unroll
          for (int n = 0; n < 2; ++n) {
            const int64_t s = slot_of(st, sl, 16 * j + 8 * n + gt);
            load_words<S::KCB>(kbase + s * KROW, kw[j][n]);
            ksc[j][n] = __ldg(ksb + s);
            vsc[j][n] = __ldg(vsb + s);
          }
      }
    };
    auto load_v = [&](int64_t st, int64_t sl) {
      if (is_full(st, sl)) {
        const uint8_t* v_lane = vbase + (sl + t4) * VROW;
#pragma unroll
        for (int j = 0; j < S::NSUB; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) load_words<S::VCB>(v_lane + v_tok(j, e) * VROW, vw[j][e]);
      } else {
#pragma unroll
        for (int j = 0; j < S::NSUB; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) load_words<S::VCB>(vbase + slot_of(st, sl, t4 + v_tok(j, e)) * VROW, vw[j][e]);
      }
    };
    if (start < w.t1) {
      load_k(start, start_slot);
      load_v(start, start_slot);
    }
    while (start < w.t1) {
      const int64_t next = start + NW * S::CH;
      const int64_t next_slot = p.sliding ? advance_slot(start_slot, NW * S::CH, cap) : next;
      const bool more = next < w.t1;
      float sc[S::NSUB][4];
      scores(kw, sc);
      // This chunk's scales move aside; the next chunk's K rows and scales are requested.
      float ks_c[S::NSUB][2], vs_c[S::NSUB][2];
#pragma unroll
      for (int j = 0; j < S::NSUB; ++j)
#pragma unroll
        for (int n = 0; n < 2; ++n) {
          ks_c[j][n] = ksc[j][n];
          vs_c[j][n] = vsc[j][n];
        }
      if (more) load_k(next, next_slot);
      const float inv_u = softmax_step(std::false_type{}, start, sc, ks_c, vs_c);
      accumulate_pv(sc, vs_c, vw, inv_u);
      if (more) load_v(next, next_slot);
      start = next;
      start_slot = next_slot;
    }
  } else {
    // One chunk of CH tokens. kFull: every token valid and the slots contiguous (no ring wrap), so
    // each lane's addresses are one base pointer plus compile-time offsets; otherwise per-token slots,
    // tokens past the slice read the slice's first token and are masked.
    auto chunk = [&](auto full_tag) {
      constexpr bool kFull = decltype(full_tag)::value;
      const int64_t cs = p.sliding ? start_slot : start;  // slot of the chunk's first token
      auto slot_of = [&](int i) -> int64_t {
        if (start + i >= w.t1) return slot_t0;
        return p.sliding ? advance_slot(start_slot, i, cap) : start + i;
      };
      // K rows and both scales: tokens gt and gt + 8 of each 16-token tile (Sᵀ rows g, g + 8); V rows:
      // tokens t4 + {0, 4, 8, 12} (K indices 2t4, 2t4 + 1, 2t4 + 8, 2t4 + 9; see tile_token).
      const uint8_t* k_lane = kbase + (cs + gt) * KROW;
      const uint8_t* v_lane = vbase + (cs + t4) * VROW;
      const float* ks_lane = ksb + cs + gt;
      const float* vs_lane = vsb + cs + gt;
      // Loads for the whole chunk first (several independent loads in flight per lane); where
      // registers are short (kVAfterScores below) the V rows only after the scores.
      uint32_t kw[S::NSUB][2][S::KCB / 4];
      uint32_t vw[S::NSUB][4][S::VCB / 4];
      float ksc[S::NSUB][2], vsc[S::NSUB][2];
      auto load_v = [&] {
#pragma unroll
        for (int j = 0; j < S::NSUB; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            if constexpr (kFull)
              load_words<S::VCB>(v_lane + v_tok(j, e) * VROW, vw[j][e]);
            else
              load_words<S::VCB>(vbase + slot_of(t4 + v_tok(j, e)) * VROW, vw[j][e]);
          }
      };
#pragma unroll
      for (int j = 0; j < S::NSUB; ++j) {
#pragma unroll
        for (int n = 0; n < 2; ++n) {
          if constexpr (kFull) {
            load_words<S::KCB>(k_lane + (16 * j + 8 * n) * KROW, kw[j][n]);
            ksc[j][n] = __ldg(ks_lane + 16 * j + 8 * n);
            vsc[j][n] = __ldg(vs_lane + 16 * j + 8 * n);
          } else {
            const int64_t sl = slot_of(16 * j + 8 * n + gt);
            load_words<S::KCB>(kbase + sl * KROW, kw[j][n]);
            ksc[j][n] = __ldg(ksb + sl);
            vsc[j][n] = __ldg(vsb + sl);
          }
        }
      }
      // V's words after the scores (K's are dead by then) for D = 256 and the wide loop's 8-bit
      // kernels at D = 128, whose spills this cuts (K8/V8 156 / 264 → 20 / 88 bytes, K4/V8 68 / 164 →
      // 24 / 24, K8/V4 48 / 120 → 12 / 52): 1.5–4% faster on every D = 128 mix row; at D = 64 the same
      // was 0–2.6% slower (bench/results/2026-12-01-attn-pool.md, call 6).
      constexpr bool kVAfterScores = D > 128 || (kWide && D == 128 && (KB == 8 || VB == 8));
      if constexpr (!kVAfterScores) load_v();
      if constexpr (kFull && kPrefetchK) {
        // The warp's next chunk's K rows (S::CH · KROW bytes, a 128-byte line a lane) into L2 while
        // this chunk computes (contiguous caches; rings do without). Measured −2% at B=8 L=32K and
        // −2.6% at B=1 L=128K, part of it (perhaps all) through the register allocation: the loop
        // runs at the 128-register cap, and in this form the wide kernel spills 4 bytes (16 / 76
        // without the prefetch); the same address computed from `start`, or following the ring,
        // spills 16–24 / 44–84 bytes and runs 7% slower, and the V lines prefetched too (36 / 92) 17%
        // slower. Check ptxas's spills (-Xptxas -v) beside the timing when changing this loop
        // (bench/results/2026-11-30-attn-tiled.md, calls 4–7).
        const int64_t next_cs = cs + NW * S::CH;
        const uint8_t* line = p.kp + (head * cap + next_cs) * KROW + 128 * lane;
        if (!p.sliding && lane < kPrefetchLines && start + NW * S::CH + S::CH <= w.t1)
          asm volatile("prefetch.global.L2 [%0];\n" ::"l"(line));
      }
      float sc[S::NSUB][4];
      scores(kw, sc);
      if constexpr (kVAfterScores) load_v();
      const float inv_u = softmax_step(full_tag, start, sc, ksc, vsc);
      accumulate_pv(sc, vsc, vw, inv_u);
    };

    for (; start < w.t1; start += NW * S::CH) {
      const bool full = start + S::CH <= w.t1 && (!p.sliding || start_slot + S::CH <= cap);
      if (full)
        chunk(std::true_type{});
      else
        chunk(std::false_type{});
      start_slot = p.sliding ? advance_slot(start_slot, NW * S::CH, cap) : start_slot;
    }
  }

#pragma unroll
  for (int o = 4; o < 32; o <<= 1) {  // the heads' sums over all tokens (every g)
    l0 += __shfl_xor_sync(0xffffffffu, l0, o);
    l1 += __shfl_xor_sync(0xffffffffu, l1, o);
  }
  __syncthreads();  // every warp is done with the tables: the merge area aliases them
  // True O = acc · u, as float2 (dims d0, d0 + 1) at the swizzled pair (cw_swizzle).
  {
    const int x = cw_swizzle<D>(g, t4);
    float* c0 = cw + (warp * kHeadsPerBlock + 2 * t4) * D;
    float* c1 = c0 + D;
#pragma unroll
    for (int mt = 0; mt < S::KS; ++mt) {
      const int pr = ((D / 16) * g + mt) ^ x;
      *reinterpret_cast<float2*>(c0 + 2 * pr) = make_float2(acc[mt][0] * u, acc[mt][2] * u);
      *reinterpret_cast<float2*>(c1 + 2 * pr) = make_float2(acc[mt][1] * u, acc[mt][3] * u);
    }
  }
  if (g == 0) {
    cml[(warp * kHeadsPerBlock + 2 * t4) * 2] = m0;
    cml[(warp * kHeadsPerBlock + 2 * t4) * 2 + 1] = l0;
    cml[(warp * kHeadsPerBlock + 2 * t4 + 1) * 2] = m1;
    cml[(warp * kHeadsPerBlock + 2 * t4 + 1) * 2 + 1] = l1;
  }
  __syncthreads();
  // Merge of the warps' states, one warp per head row (as merge_and_store, same order: bitwise),
  // then the final row (one slice) or this slice's partial.
#pragma unroll
  for (int r0 = 0; r0 < kHeadsPerBlock; r0 += NW) {
    const int r = r0 + warp;
    if (r >= w.heads) break;
    float mk[NW], M = kNegInf;
#pragma unroll
    for (int k = 0; k < NW; ++k) {
      mk[k] = cml[(k * kHeadsPerBlock + r) * 2];
      M = fmaxf(M, mk[k]);
    }
    float L = 0, wk[NW];
#pragma unroll
    for (int k = 0; k < NW; ++k) wk[k] = M == kNegInf ? 0.0f : exp2f(mk[k] - M);
    if (M != kNegInf)
#pragma unroll
      for (int k = 0; k < NW; ++k) L += cml[(k * kHeadsPerBlock + r) * 2 + 1] * wk[k];
    const int xr = r >> 1;  // the t4 of the lanes that wrote row r
    float v[D / 32];
#pragma unroll
    for (int j = 0; j < D / 32; ++j) {
      const int d = lane + 32 * j, pr = d >> 1;
      const int at = 2 * (pr ^ cw_swizzle<D>(pr / (D / 16), xr)) + (d & 1);
      float o = 0;
      if (M != kNegInf)
#pragma unroll
        for (int k = 0; k < NW; ++k) o += cw[(k * kHeadsPerBlock + r) * D + at] * wk[k];
      v[j] = o;
    }
    if (p.splits == 1) {
      float vsg[D / 32];
      load_vsign<D>(p, vsg);
      warp_store_row<D>(p, w.b, w.hq0 + r, v, L, vsg);
    } else {
      // This slice's partial; dims lane + 32j at lane·(D/32) + j (one vector store a lane).
      const int64_t row = (static_cast<int64_t>(w.b) * p.q_heads + w.hq0 + r) * p.splits + w.split;
      store_vec<D / 32>(p.part_o + row * D + lane * (D / 32), v);
      if (lane == 0) *reinterpret_cast<float2*>(p.part_ml + 2 * row) = make_float2(M, L);
    }
  }
  if (p.splits == 1) return;
  // The last block of this (sequence, K/V head, head tile) to finish merges every slice's partial
  // (no second kernel: round 5). The arrival counter lives in the workspace; the block that sees
  // splits − 1 earlier arrivals sets it back to zero, so the next call (or a CUDA-graph replay)
  // finds it zero with no memset. Fences as cooperative groups' grid barrier: the block's partials
  // are published by the barrier and one release fence before the atomic; the acquire fence after
  // it orders the merging block's reads (which go to L2: __ldcg).
  __syncthreads();
  bool last = false;
  if (threadIdx.x == 0) {
    unsigned* counter = p.counters + (static_cast<int64_t>(blockIdx.z) * gridDim.y + blockIdx.y);
    __threadfence();
    last = atomicAdd(counter, 1u) == static_cast<unsigned>(p.splits - 1);
    if (last) {
      __threadfence();
      // The reset after the fence: the fence would otherwise wait for it (an L2 round trip on the
      // call's critical path); nothing in this call reads the counter again.
      atomicExch(counter, 0u);
    }
  }
  if (!__syncthreads_or(last)) return;
#pragma unroll 1
  for (int r0 = 0; r0 < kHeadsPerBlock; r0 += NW) {
    const int r = r0 + warp;
    if (r >= w.heads) break;
    merge_slices<D>(p, w.b, w.hq0 + r);
  }
}

// ---- combine the slices ---------------------------------------------------------------------

// Block-wide reduction of one value per thread (max or sum) through `red` (kWarps floats).
template <bool kMax>
__device__ float block_reduce(float x, float* red) {
  x = kMax ? warp_max(x) : warp_sum(x);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = x;
  __syncthreads();
  float r = red[0];
  for (int k = 1; k < kWarps; ++k) r = kMax ? fmaxf(r, red[k]) : r + red[k];
  return r;
}

// One output row per block (the f32 kernel's partials): the slices' partial states, weighted by
// 2^(m_s − M), then finalized. (The f16 kernel merges its own, the same way: merge_slices.)
// Latency-bound on small problems, so the slices are spread over the threads: D/4 threads cover a
// row with float4 loads, and the kThreads / (D/4) groups of them take every G-th slice; the groups'
// sums are then added in a fixed order (the result does not depend on timing).
// DC: the head dimension when known at compile time (64..512: the last steps in one warp, no
// barriers), 0 for the generic path.
template <int DC>
__global__ void __launch_bounds__(kThreads) kernel_combine(const __grid_constant__ Params p) {
  extern __shared__ __align__(16) float smem[];
  const int D = DC > 0 ? DC : p.dim, S = p.splits;
  const int vecs = D / 4, groups = kThreads / vecs;     // D: a power of two in [4, 512], so groups·vecs = kThreads
  float* part = smem;                                   // [groups][D]
  float* fin = part + groups * D;                       // [D]
  float* wgt = fin + D;                                 // [S]
  float* red_max = wgt + S;                             // [kWarps]
  float* red_sum = red_max + kWarps;                    // [kWarps]
  float* lsum = red_sum + kWarps;                       // [1]
  const int64_t row = blockIdx.x;                       // b * Hq + h
  grid_dependency_wait();  // the partials of the whole main grid
  const float* ml = p.part_ml + row * S * 2;
  const float* po = p.part_o + row * S * D;

  float mx = kNegInf;
  for (int s = threadIdx.x; s < S; s += blockDim.x) mx = fmaxf(mx, ml[2 * s]);
  const float M = block_reduce<true>(mx, red_max);
  float l = 0;
  for (int s = threadIdx.x; s < S; s += blockDim.x) {
    const float wv = M == kNegInf ? 0.0f : exp2f(ml[2 * s] - M);
    wgt[s] = wv;
    l += ml[2 * s + 1] * wv;
  }
  const float L = block_reduce<false>(l, red_sum);  // its barrier also publishes wgt
  if (threadIdx.x < groups * vecs) {
    const int grp = threadIdx.x / vecs, v = threadIdx.x - grp * vecs;
    // float4 loads when the caller's workspace allows them (any u8 tensor may be passed).
    const bool vec_ok = (reinterpret_cast<uintptr_t>(po) & 15) == 0;
    auto load4 = [&](int sl) -> float4 {
      const float* q = po + static_cast<int64_t>(sl) * D + 4 * v;
      return vec_ok ? *reinterpret_cast<const float4*>(q) : make_float4(q[0], q[1], q[2], q[3]);
    };
    float4 o = make_float4(0, 0, 0, 0);
    int s = grp;
    for (; s + 3 * groups < S; s += 4 * groups) {
      float4 x[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) x[k] = load4(s + k * groups);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float wk = wgt[s + k * groups];
        o.x += x[k].x * wk;
        o.y += x[k].y * wk;
        o.z += x[k].z * wk;
        o.w += x[k].w * wk;
      }
    }
    for (; s < S; s += groups) {
      const float4 x = load4(s);
      const float wk = wgt[s];
      o.x += x.x * wk;
      o.y += x.y * wk;
      o.z += x.z * wk;
      o.w += x.w * wk;
    }
    reinterpret_cast<float4*>(part + grp * D)[v] = o;
  }
  __syncthreads();
  if constexpr (DC > 0) {
    // One warp adds the groups (same order as below) and finishes the row.
    const int b = static_cast<int>(row / p.q_heads), h = static_cast<int>(row % p.q_heads);
    if (threadIdx.x < 32) {
      float sg[DC / 32], v[DC / 32];
      load_vsign<DC>(p, sg);
#pragma unroll
      for (int j = 0; j < DC / 32; ++j) {
        const int d = static_cast<int>(threadIdx.x) + 32 * j;
        float o = part[d];
        for (int k = 1; k < groups; ++k) o += part[k * DC + d];
        v[j] = o;
      }
      warp_store_row<DC>(p, b, h, v, L, sg);
    }
  } else {
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
      float o = part[d];
      for (int k = 1; k < groups; ++k) o += part[k * D + d];
      fin[d] = o;
    }
    if (threadIdx.x == 0) lsum[0] = L;
    __syncthreads();
    const int b = static_cast<int>(row / p.q_heads), h = static_cast<int>(row % p.q_heads);
    store_output_rows(p, b, h, 1, fin, lsum, 1);
  }
}

// ---- host side ------------------------------------------------------------------------------

using KernelFn = void (*)(Params);

// The f16 kernel's main loops (F16Loop::automatic: the rule picks).
// The order is that of decode_attention_loop_calls (less one).
enum class F16Loop { automatic, registers, wide };

struct Launch {
  KernelFn fn;
  int smem;      // dynamic shared memory of this call
  int smem_max;  // the most any call of this kernel uses (its attribute is raised to this once)
  int threads = kThreads;
  F16Loop loop = F16Loop::registers;  // f16 kernels: which main loop (counted for the tests)
  int round = 16;                     // automatic slices: whole multiples (the wide loop: a chunk a warp)
};

// The register loop (kernel_decode_f16<D, KB, VB>) or, kWide, the wide-table loop
// (kernel_decode_f16<D, KB, VB, kWideWarps, true>: 2 blocks per SM, each with the 64 KB table; ~69 KB
// of shared memory a block at D = 128).
template <int D, int KB, int VB, bool kWide>
Launch f16_launch() {
  if constexpr (kWide) {
    constexpr int kBytes = F16Smem<D, KB, VB, kWideWarps, true>::kBytes;
    return {kernel_decode_f16<D, KB, VB, kWideWarps, true>, kBytes, kBytes, kWideWarps * 32, F16Loop::wide,
            kWideWarps * F16Shape<D, KB, VB>::CH};
  } else {
    constexpr int kBytes = F16Smem<D, KB, VB, kWarps>::kBytes;
    return {kernel_decode_f16<D, KB, VB>, kBytes, kBytes};
  }
}

template <int D, bool kWide = false>
Launch f16_launch_bits(int kb, int vb) {
  if (kb == 4) return vb == 4 ? f16_launch<D, 4, 4, kWide>() : f16_launch<D, 4, 8, kWide>();
  return vb == 4 ? f16_launch<D, 8, 4, kWide>() : f16_launch<D, 8, 8, kWide>();
}

// Which f16 main loop serves a call: FRUGAL_ATTN_KERNEL=registers or wide forces one where it serves
// (benchmarks, tests: read at every call); anything else leaves the choice to the rule below.
F16Loop forced_loop() {
  const char* e = std::getenv("FRUGAL_ATTN_KERNEL");
  if (e == nullptr) return F16Loop::automatic;
  if (!std::strcmp(e, "wide")) return F16Loop::wide;
  return !std::strcmp(e, "registers") ? F16Loop::registers : F16Loop::automatic;
}

// The wide table serves D = 64 and 128 at every bit width (its eight instantiations).
bool wide_serves(const DecodeArgs& a) {
  return a.math == attention::Math::f16 && (a.dim == 128 || a.dim == 64);
}

// The wide-table loop serves every call it can (D = 64 or 128, f16 math); the register loop the
// others. The H200 A/B of the loops (Hq=32, Hkv=8): round 6 (bench/results/2026-11-29-decode-attention-r6.md,
// call 2) had the wide loop 5–9% faster at B=1, L = 8K..32K and 4–6% slower from work 2^19 on; attn7's
// call (bench/results/2026-11-30-attn7.md) and session 5's (bench/results/2026-11-30-decode-attention-s5.md,
// two runs of B = 1..32 × L = 2K, 4K, 6K besides the long rows) had it faster on every row — 4–13%
// from B = 2 or L = 6K on, within 1% at B=1 L = 2K and 4K, and faster on the fixed-cost row (16
// tokens attended). Same outputs bitwise as round 6. The code difference since round 6 is the
// L2-prefetch branch's removal (29870eb: 58 CCTL instructions of a runtime-dead branch in that
// kernel), which fits, but was not profiled. At D = 64 (session 17, call 2 of
// bench/results/2026-11-30-attn-merge-s17.md) the wide loop was faster on every row measured: 7–12%.
// With an 8-bit K or V (session 18, calls 2–3 of bench/results/2026-12-01-attn-pool.md), faster on
// every row measured: D = 128 K8/V4 11.6–12.2%, K4/V8 and K8/V8 1.5–2.1% (long rows), 7–11% at B=1
// L=4K; D = 64 K8/V4, K4/V8, K8/V8 9.5–18%.
Launch pick_kernel(const DecodeArgs& a) {
  const F16Loop f = forced_loop();
  if (wide_serves(a) && (f == F16Loop::wide || f == F16Loop::automatic))
    return a.dim == 64 ? f16_launch_bits<64, true>(a.k.bits, a.v.bits) : f16_launch_bits<128, true>(a.k.bits, a.v.bits);
  if (a.math == attention::Math::f16) {
    switch (a.dim) {
      case 64:
        return f16_launch_bits<64>(a.k.bits, a.v.bits);
      case 128:
        return f16_launch_bits<128>(a.k.bits, a.v.bits);
      case 256:
        return f16_launch_bits<256>(a.k.bits, a.v.bits);
      default:
        return f16_launch_bits<512>(a.k.bits, a.v.bits);
    }
  }
  auto smem = [](int dim) {
    return 4 *
           ((kHeadsPerBlock + kWarps * kHeadsPerBlock) * dim + 512 + kWarps * kHeadsPerBlock * 2 + 2 * kHeadsPerBlock);
  };
  const int dpl = std::max(1, a.dim / 32);
  const Launch l{dpl == 1   ? kernel_decode_f32<1>
                 : dpl == 2 ? kernel_decode_f32<2>
                 : dpl == 4 ? kernel_decode_f32<4>
                 : dpl == 8 ? kernel_decode_f32<8>
                            : kernel_decode_f32<16>,
                 smem(a.dim), smem(32 * dpl)};
  return l;
}

// Resident blocks per SM for a kernel, after raising its dynamic shared-memory limit to the most any
// of its calls uses.
int blocks_per_sm(const Launch& l) {
  const auto* f = reinterpret_cast<const void*>(l.fn);
  // The wide loop: two blocks of ~69 KB, the carveout the smallest that holds them.
  allow_dynamic_smem(f, l.smem_max, l.loop == F16Loop::wide ? kWideMinBlocks : 0);
  return std::max(resident_blocks(f, l.threads, l.smem), 1);
}

// Slices per sequence: fill the resident slots of the GPU in whole waves, with slices of ≥ 128
// tokens and at most max(32, L / 2048) of them: the merge's cost grows with the slice count, and
// the first sweep on an H200 (bench/results/2026-11-29-decode-attention.md) found more slices slower
// for long sequences (B=1, D=128: L=32K best at 32, L=128K at 64). Since round 4 made the per-block
// cost small, short ones want more: B=1 L=4K is best at 32 slices of 128 tokens (0.0159 ms D=128,
// 0.0237 D=256, against 0.0168 / 0.0253 at 16; bench/results/2026-11-29-decode-attention-r4.md).
// Re-swept with round 5's one-kernel merge: still 32 (D=128: 0.0151 ms against 0.0160 at 16,
// 0.0165 at 48, 0.0172 at 64; D=256: 16 and 32 tie, 40+ slower; decode-attention-r5.md).
int64_t choose_splits(int64_t pairs, int64_t slots, int64_t max_len, int64_t cap_splits) {
  const int64_t by_len = std::max<int64_t>(1, (max_len + 127) / 128);
  const int64_t by_combine = std::max<int64_t>(32, max_len / 2048);
  const int64_t hi = std::min({cap_splits, by_len, by_combine, std::max<int64_t>(1, 4 * slots / pairs)});
  int64_t best = 1;
  double best_eff = 0;
  for (int64_t s = 1; s <= hi; ++s) {
    const int64_t blocks = pairs * s;
    const int64_t waves = (blocks + slots - 1) / slots;
    const double eff = static_cast<double>(blocks) / static_cast<double>(waves * slots);
    if (eff > best_eff + 0.01) {
      best = s;
      best_eff = eff;
    }
  }
  return best;
}

std::atomic<int64_t> g_loop_calls[2];  // f16 calls per main loop: registers, wide table

}  // namespace

int64_t decode_attention_loop_calls(int loop) {
  return loop >= 0 && loop < static_cast<int>(std::size(g_loop_calls)) ? g_loop_calls[loop].load() : 0;
}

void decode_attention(const DecodeArgs& a, Device device, Stream stream) {
  namespace be = attention::backend;
  DeviceGuard guard(device.index);
  FRUGAL_CHECK(a.batch <= 65535, unsupported, "attention::decode_attention",
               "the GPU kernels serve up to 65535 sequences a call, got " << a.batch);
  const cudaStream_t st = to_cuda(stream);
  const int group = a.q_heads / a.kv_heads, tiles = be::head_tiles(group);
  const int64_t pairs = static_cast<int64_t>(a.batch) * a.kv_heads * tiles;
  int64_t max_len = 0;
  for (int b = 0; b < a.batch; ++b) max_len = std::max(max_len, a.end[b] - a.begin[b]);

  const Launch launch = pick_kernel(a);
  const int64_t slots = static_cast<int64_t>(blocks_per_sm(launch)) * multiprocessor_count(device.index);
  const int64_t cap_splits = be::max_splits(a.batch, a.kv_heads, group, a.capacity);
  int64_t splits = a.num_splits > 0 ? a.num_splits : choose_splits(pairs, slots, max_len, cap_splits);
  splits = std::min(splits, cap_splits);
  // Slice length: a multiple of 16 tokens (one mma tile); trailing slices may come out empty. With
  // automatic slices the 8-warp loop (wide table) rounds it up to whole rounds of its warps' chunks
  // (Launch::round: 8 × 32 tokens at D = 128, 8 × 64 at D = 64), so no warp of a block idles through a
  // last, partial round: the H200 sweep of session 7 (bench/results/2026-11-30-attn-staged.md,
  // call 8) had B=1 L=4K at 16 slices of 256 tokens 8% faster than at the 32 of 128 the count rule
  // picks, and B=1 L=128K at 32 slices of 4,096 tokens 2.8% faster than at 33 of 3,984.
  const int64_t unit = a.num_splits > 0 ? 16 : launch.round;
  int64_t per_split = std::max<int64_t>(16, (max_len + splits - 1) / splits);
  per_split = (per_split + unit - 1) / unit * unit;
  splits = std::max<int64_t>(1, (max_len + per_split - 1) / per_split);

  Params p{};
  p.q = a.q;
  p.q_dtype = dtype_code(a.q_dtype);
  p.out_dtype = dtype_code(a.out_dtype);
  p.q_stride_b = a.q_stride_b;
  p.q_stride_h = a.q_stride_h;
  p.out = a.out;
  p.kp = a.k.packed;
  p.ks = a.k.scales;
  p.ksign = a.k.signs;
  p.kcb = a.k.centroids;
  p.vp = a.v.packed;
  p.vs = a.v.scales;
  p.vsign = a.v.signs;
  p.vcb = a.v.centroids;
  p.kbits = a.k.bits;
  p.vbits = a.v.bits;
  p.q_heads = a.q_heads;
  p.kv_heads = a.kv_heads;
  p.group = group;
  p.head_tiles = tiles;
  p.splits = static_cast<int>(splits);
  p.dim = a.dim;
  p.capacity = a.capacity;
  p.sliding = a.sliding ? 1 : 0;
  p.tokens_per_split = per_split;
  p.score_scale = a.softmax_scale * kLog2e / static_cast<float>(a.dim);

  // Workspace: counters and partials when split, ranges when the batch is too large for the
  // parameters (layout: be::workspace_layout; its base rounded up to be::kWorkspaceAlign).
  const bool f16 = a.math == attention::Math::f16;
  const be::WorkspaceLayout lay = be::workspace_layout(a.batch, a.q_heads, a.dim, splits);
  const bool need = splits > 1 || a.batch > kInlineBatch;
  uint8_t* ws = static_cast<uint8_t*>(a.workspace);
  std::optional<Scratch> scratch;  // when the caller gave no workspace: stream-ordered, from frugal's pool
  if (need) {
    if (ws == nullptr) ws = scratch.emplace(lay.end + be::kWorkspaceAlign, st).as<uint8_t>();
    ws = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(ws) + be::kWorkspaceAlign - 1) / be::kWorkspaceAlign *
                                    be::kWorkspaceAlign);
    // A fresh allocation: its counters must start at zero (a caller's workspace is zeroed once, when
    // it is created, and every call leaves its counters zero).
    if (scratch && splits > 1 && f16)
      FRUGAL_CUDA_CHECK(cudaMemsetAsync(ws + lay.counters, 0, lay.partial_o - lay.counters, st));
  }
  if (splits > 1) {
    p.counters = reinterpret_cast<unsigned*>(ws + lay.counters);
    p.part_o = reinterpret_cast<float*>(ws + lay.partial_o);
    p.part_ml = reinterpret_cast<float*>(ws + lay.partial_ml);
  }
  // [begin, end) pairs: in the parameters for small batches, else through the workspace.
  auto put_ranges = [&](int64_t* r) {
    for (int b = 0; b < a.batch; ++b) {
      r[2 * b] = a.begin[b];
      r[2 * b + 1] = a.end[b];
    }
  };
  if (a.batch > kInlineBatch) {
    std::vector<int64_t> ranges(2 * static_cast<size_t>(a.batch));
    put_ranges(ranges.data());
    int64_t* dev = reinterpret_cast<int64_t*>(ws + lay.ranges);
    FRUGAL_CUDA_CHECK(cudaMemcpyAsync(dev, ranges.data(), lay.end - lay.ranges, cudaMemcpyHostToDevice, st));
    p.ranges_dev = dev;
  } else {
    put_ranges(p.ranges);
  }

  const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(a.kv_heads * tiles),
                  static_cast<unsigned>(a.batch));
  launch.fn<<<grid, launch.threads, launch.smem, st>>>(p);
  FRUGAL_CUDA_CHECK_LAUNCH();
  if (f16) ++g_loop_calls[static_cast<int>(launch.loop) - 1];
  if (splits > 1 && !f16) {
    // The f32 kernel's slices are combined by a second kernel (the f16 kernel merges them in its
    // last block of each tile). [groups][D] + [D] + [splits] + 2·kWarps + 1 floats, groups·D =
    // max(kThreads·4, D): ≤ 12 KB, under the default 48 KB.
    const int groups_d = std::max(kThreads * 4, a.dim);
    const int smem = 4 * (groups_d + a.dim + static_cast<int>(splits) + 2 * kWarps + 1);

    // Programmatic dependent launch: the combine's launch overlaps the main grid's last blocks.
    void (*combine)(Params) = a.dim == 64    ? kernel_combine<64>
                              : a.dim == 128 ? kernel_combine<128>
                              : a.dim == 256 ? kernel_combine<256>
                              : a.dim == 512 ? kernel_combine<512>
                                             : kernel_combine<0>;
    FRUGAL_CUDA_CHECK(launch_kernel(combine, dim3(static_cast<unsigned>(a.batch * a.q_heads)), dim3(kThreads),
                                    static_cast<size_t>(smem), st, true, p));
    FRUGAL_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace frugal::cuda
