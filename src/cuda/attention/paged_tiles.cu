// The tensor-core tiled attention kernel over the paged quantized KV cache (PagedVariant::tiles_f16):
// sequences with several query tokens (prefill, chunked prefill, speculative verification), mma.sync
// m16n8k16 with fp16 operands and f32 accumulators, in the rotated domain exactly as decode.
// Bytes floor: each block reads the packed rows and scales of the K/V tiles its query rows see once,
// (row tiles) × Hkv × L·(D·(K bits + V bits)/8 + 8), plus a split call's partials.
//
// Block: 8 warps, 128 M rows = (query token, query head of the GQA group) pairs of one sequence and
// one K/V head (row m: token m / group, head m % group), so a K/V tile decoded once serves every head
// of the group; warp w owns rows 16w .. 16w + 15. Grid: (row tile × split, K/V head, sequence); blocks
// past a sequence's rows exit.
// Prologue: each lane loads its q elements straight into the A-fragment layout (dims 16ks + 8h +
// 2t4 + e), multiplies by K's signs and runs the FWHT in registers (two shuffle stages, the others
// between a lane's own registers), scales each row by a power of two σ ≥ max|q_rot| (fp16 cannot
// overflow) and packs fp16 A fragments (registers to D = 128, shared memory at D = 256).
// Main loop over KV tiles of N tokens (64; 32 at D = 256), page-aligned since N and the page size are
// powers of two: cp.async gathers the tile after next's packed rows and scales through the page table
// while the next one is decoded (codebook values to fp16 rows and its scales, into the other of two
// shared-memory buffers) and this one is used, one barrier a tile:
// S = Q·Kᵀ (K rows as B through ldmatrix), times σ·scale and the token's K scale, masked (length,
// causal, window), online softmax in log2 units, P (fp16, times the V scale over the warp's running
// maximum u of the V scales, so fp16 cannot overflow) · V (ldmatrix.trans) into O. Tiles above the
// causal diagonal or below the window of every row of the block are never visited.
// Epilogue: O·u / (l·D), the inverse FWHT in the accumulator layout (the same two shuffle stages),
// V's signs, stores; lse = (m + log2 l)·ln 2.
// Splits (long prefixes, few rows): the block's KV tiles are divided among `splits` blocks, each
// writes its partial (O·u, m, l) to the workspace, and the last to arrive (a per-(sequence, row tile,
// K/V head) counter, reset by that block) merges them in split order and finishes.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "core/paged_backend.h"
#include "cuda/attention/device.cuh"
#include "cuda/common.cuh"

namespace frugal::cuda {
namespace tiles {
namespace {

using attention::backend::TileSeq;
using decode::ex2;
using decode::half_bits;
using decode::load_elem;
using decode::max_nan;
using decode::pack_half2;
using decode::smem_addr;

// 8 warps (128 rows): each decoded tile serves twice the rows of 4 warps, 1.15–1.25× faster
// (docs/performance.md, "Paged attention").
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = 16 * kWarps;  // M rows of a block
constexpr float kNegInf = -__builtin_huge_valf();
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
// Splits: enough blocks for two a multiprocessor, each split at least kMinSplitTiles tiles (below
// that the merge costs more than the parallelism gains), at most kMaxSplits.
constexpr int kMaxSplits = 64;
constexpr int kMinSplitTiles = 4;
constexpr int kBlocksPerSm = 2;

// Resident blocks a multiprocessor the kernel is compiled for: one 8-warp block (its 255 / 226 / 167
// registers at D = 256 / 128 / 64).
constexpr int kMinBlocks = 1;

template <int D>
struct Shape {
  static constexpr int N = D >= 256 ? 32 : 64;  // tokens a KV tile (D = 256: 32, for the registers of O)
  static constexpr int KS = D / 16;             // k-steps of S = Q·Kᵀ
  static constexpr int NT = N / 8;              // n-tiles of S
  static constexpr int PK = N / 16;             // k-steps of O += P·V
  static constexpr int DT = D / 8;              // n-tiles of O
  static constexpr int LD = D + 8;              // halves a decoded row (16 bytes of pad: ldmatrix without conflicts)
  static constexpr bool kQInRegs = D <= 128;
  // Decoded tiles, double-buffered (the next tile is decoded while this one is used, one barrier a
  // tile): K and V rows as fp16, then the tile's K and V scales (f32).
  static constexpr int kScalesAt = 2 * N * LD * 2;  // the scales' offset in a buffer
  static constexpr int kBufBytes = kScalesAt + 8 * N;
  static constexpr int kDecBytes = 2 * kBufBytes;
  static constexpr int kLutBytes = 2 * 256 * 2;     // K's and V's codebooks as fp16
  static constexpr int kQfBytes = kQInRegs ? 0 : kWarps * KS * 32 * 16;
  static constexpr int kFixedBytes = kDecBytes + kLutBytes + kQfBytes;
  // One cp.async stage: the tile's K and V scales (f32), then its packed K rows and V rows.
  __host__ __device__ static constexpr int stage_bytes(int kbits, int vbits) {
    return 8 * N + N * (D * kbits / 8) + N * (D * vbits / 8);
  }
  __host__ __device__ static constexpr int smem_bytes(int kbits, int vbits) {
    return kFixedBytes + 2 * stage_bytes(kbits, vbits);
  }
  static_assert(kFixedBytes % 16 == 0 && kBufBytes % 16 == 0 && stage_bytes(3, 3) % 16 == 0, "16-byte aligned regions");
};

struct Params {
  const void* q;
  int64_t q_stride_row, q_stride_h;
  int q_dtype, out_dtype;  // 0 f32, 1 f16, 2 bf16
  int out_pairs;           // out 2-element aligned: pair stores
  void* out;
  float* lse;
  const uint8_t* kp;
  const float* ks;
  const float* ksign;
  const float* kcb;
  const uint8_t* vp;
  const float* vs;
  const float* vsign;
  const float* vcb;
  int kbits, vbits;
  int krow, vrow;      // bytes a packed row
  int kchunk, vchunk;  // bytes a cp.async of a row piece: 16, or 8 where the row is not a multiple of 16
  int kcpr, vcpr;      // pieces a row
  uint32_t kcpr_magic, vcpr_magic;  // c / cpr = (c · magic) >> 16 for c < 2048
  int q_heads, kv_heads, group, page_shift;
  int64_t slots;
  const int32_t* indptr;
  const int32_t* indices;
  const TileSeq* seqs;
  int row_tiles, splits;
  int causal, window;  // window < 0: none
  float score_scale;   // softmax_scale · log2(e) / D (the two unnormalized transforms' √D each)
  int stage_bytes;
  unsigned* counters;  // [seqs · row_tiles · Hkv] arrivals; zero between calls
  float* part_ml;      // [blocks][kWarps][16] (m, l)
  float* part_o;       // [blocks][kWarps][DT][32 lanes] float4
};

// ---- device helpers -------------------------------------------------------------------------

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// cp.async of B bytes (4, 8 or 16) that zero-fills what src_bytes (0 or B) leaves, so a token past the
// sequence becomes zeros without a read.
template <int B>
__device__ __forceinline__ void cp_async_zfill(void* smem, const void* gmem, int src_bytes) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  if constexpr (B == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(src_bytes));
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(s), "l"(gmem), "n"(B), "r"(src_bytes));
}

// Elements i, i + 1 of out (dtype code), as one store where aligned.
__device__ __forceinline__ void store_out_pair(const Params& p, int64_t i, float a, float b) {
  if (!p.out_pairs) {
    decode::store_elem(p.out, p.out_dtype, i, a);
    decode::store_elem(p.out, p.out_dtype, i + 1, b);
  } else if (p.out_dtype == 0) {
    *reinterpret_cast<float2*>(static_cast<float*>(p.out) + i) = make_float2(a, b);
  } else if (p.out_dtype == 1) {
    *reinterpret_cast<__half2*>(static_cast<__half*>(p.out) + i) = __floats2half2_rn(a, b);
  } else {
    *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(p.out) + i) = __floats2bfloat162_rn(a, b);
  }
}

// Packed rows of one tile to fp16 codebook values: dec[token][LD], 8 codes (BITS bytes) a unit, the
// block's threads over the N·D/8 units. lut: the codebook as fp16 bits.
template <int D, int BITS>
__device__ __forceinline__ void decode_rows(const uint8_t* raw, const uint16_t* lut, __half* dec) {
  using S = Shape<D>;
  constexpr int U = D / 8, ROW = D * BITS / 8;
  static_assert(S::N * U % kThreads == 0, "the threads cover a tile evenly");
#pragma unroll
  for (int i = 0; i < S::N * U / kThreads; ++i) {
    const int u = threadIdx.x + i * kThreads;
    const int tok = u / U, part = u % U;
    const uint8_t* src = raw + tok * ROW + part * BITS;
    uint32_t lo, hi = 0;  // the unit's 8·BITS bits, little-endian
    if constexpr (BITS == 8) {
      const uint2 w = *reinterpret_cast<const uint2*>(src);
      lo = w.x;
      hi = w.y;
    } else if constexpr (BITS == 4) {
      lo = *reinterpret_cast<const uint32_t*>(src);
    } else if constexpr (BITS == 2) {
      lo = *reinterpret_cast<const uint16_t*>(src);
    } else {
      static_assert(BITS == 3, "2, 3, 4 or 8 bits");
      lo = static_cast<uint32_t>(src[0]) | (static_cast<uint32_t>(src[1]) << 8) | (static_cast<uint32_t>(src[2]) << 16);
    }
    auto code = [&](int k) -> uint32_t {
      if constexpr (BITS == 8)
        return ((k < 4 ? lo : hi) >> (8 * (k & 3))) & 255u;
      else
        return (lo >> (BITS * k)) & ((1u << BITS) - 1u);
    };
    uint32_t h[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) h[k] = lut[code(2 * k)] | (static_cast<uint32_t>(lut[code(2 * k + 1)]) << 16);
    *reinterpret_cast<uint4*>(dec + tok * S::LD + part * 8) = make_uint4(h[0], h[1], h[2], h[3]);
  }
}

template <int D>
__device__ __forceinline__ void decode_tile(const uint8_t* raw, int bits, const uint16_t* lut, __half* dec) {
  switch (bits) {
    case 2: decode_rows<D, 2>(raw, lut, dec); break;
    case 3: decode_rows<D, 3>(raw, lut, dec); break;
    case 4: decode_rows<D, 4>(raw, lut, dec); break;
    default: decode_rows<D, 8>(raw, lut, dec); break;
  }
}

// ---- the kernel -------------------------------------------------------------------------------

template <int D>
__global__ void __launch_bounds__(kThreads, kMinBlocks) kernel_paged_tiles(const __grid_constant__ Params p) {
  using S = Shape<D>;
  constexpr int N = S::N;
  extern __shared__ __align__(128) uint8_t smem[];
  __half* kdec = reinterpret_cast<__half*>(smem);  // [N][LD]
  __half* vdec = kdec + N * S::LD;                 // [N][LD]
  uint16_t* lutk = reinterpret_cast<uint16_t*>(smem + S::kDecBytes);
  uint16_t* lutv = lutk + 256;
  uint32_t* qf = reinterpret_cast<uint32_t*>(smem + S::kDecBytes + S::kLutBytes);  // D > 128: [warp][ks][lane][4]
  uint8_t* stages = smem + S::kFixedBytes;

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t4 = lane & 3;
  const int split = blockIdx.x % p.splits, rtile = blockIdx.x / p.splits;
  const int hk = blockIdx.y, si = blockIdx.z;
  const TileSeq ts = p.seqs[si];
  const int rows_total = ts.q_count * p.group;
  const int m0 = rtile * kRows;
  if (m0 >= rows_total) return;  // the whole block (every split of this row tile alike)
  const int kv_len = ts.kv_len;
  const int first_pos = kv_len - ts.q_count;  // position of query 0

  // The block's KV tiles: every token some row of the block sees, in tiles of N.
  const int m_last = min(m0 + kRows, rows_total) - 1;
  const int pos_lo = first_pos + m0 / p.group, pos_hi = first_pos + m_last / p.group;
  const int lo = p.window >= 0 ? max(0, pos_lo - p.window) : 0;
  const int hi = p.causal ? pos_hi + 1 : kv_len;
  const int tb = lo / N, te = (hi + N - 1) / N;
  const int per = (te - tb + p.splits - 1) / p.splits;
  const int my_begin = min(te, tb + split * per), my_end = min(te, my_begin + per);

  // This warp's rows and this lane's two (g, g + 8).
  const int wm0 = m0 + warp * 16;
  const bool warp_active = wm0 < rows_total;
  const int wm1 = min(wm0 + 15, rows_total - 1);
  const int wpos_lo = first_pos + wm0 / p.group, wpos_hi = first_pos + wm1 / p.group;
  bool row_ok[2];
  int row_pos[2];
  int64_t row_out[2];  // (q row) · Hq + query head
  int64_t row_q[2];    // element offset of the row in q
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int m = wm0 + g + 8 * r;
    row_ok[r] = m < rows_total;
    const int mm = row_ok[r] ? m : m0;
    const int j = mm / p.group, hh = mm - j * p.group;
    row_pos[r] = first_pos + j;
    const int64_t qrow = static_cast<int64_t>(ts.q_begin) + j;
    const int head = hk * p.group + hh;
    row_out[r] = qrow * p.q_heads + head;
    row_q[r] = qrow * p.q_stride_row + static_cast<int64_t>(head) * p.q_stride_h;
  }

  // Codebooks as fp16 (read after the first barrier of the loop).
  for (int i = threadIdx.x; i < 256; i += kThreads) {
    if (i < (1 << p.kbits)) lutk[i] = static_cast<uint16_t>(half_bits(__ldg(p.kcb + i)));
    if (i < (1 << p.vbits)) lutv[i] = static_cast<uint16_t>(half_bits(__ldg(p.vcb + i)));
  }

  // Requests one tile's packed rows and scales into a stage (tokens past the sequence: zeros).
  const int ind_base = __ldg(p.indptr + ts.seq);
  const int64_t head_slot0 = static_cast<int64_t>(hk) * p.slots;
  const int page_mask = (1 << p.page_shift) - 1;
  auto issue = [&](int tile, int stage) {
    uint8_t* st = stages + stage * p.stage_bytes;
    float* ksc = reinterpret_cast<float*>(st);
    float* vsc = ksc + N;
    uint8_t* kraw = st + 8 * N;
    uint8_t* vraw = kraw + N * p.krow;
    const int t0 = tile * N;
    auto slot_of = [&](int t) -> int64_t {
      const int page = __ldg(p.indices + ind_base + (t >> p.page_shift));
      return head_slot0 + ((static_cast<int64_t>(page) << p.page_shift) | (t & page_mask));
    };
    auto copy_rows = [&](uint8_t* dst, const uint8_t* pool, int row, int chunk, int cpr, uint32_t magic) {
      for (int c = threadIdx.x; c < N * cpr; c += kThreads) {
        const int tok = static_cast<int>((static_cast<uint32_t>(c) * magic) >> 16), part = c - tok * cpr;
        const int t = t0 + tok;
        const uint8_t* src = pool;
        int bytes = 0;
        if (t < kv_len) {
          src = pool + slot_of(t) * row + part * chunk;
          bytes = chunk;
        }
        uint8_t* d = dst + tok * row + part * chunk;
        if (chunk == 16)
          cp_async_zfill<16>(d, src, bytes);
        else
          cp_async_zfill<8>(d, src, bytes);
      }
    };
    copy_rows(kraw, p.kp, p.krow, p.kchunk, p.kcpr, p.kcpr_magic);
    copy_rows(vraw, p.vp, p.vrow, p.vchunk, p.vcpr, p.vcpr_magic);
    if (threadIdx.x < 2 * N) {
      const bool is_v = threadIdx.x >= N;
      const int tok = threadIdx.x - (is_v ? N : 0), t = t0 + tok;
      const float* pool = is_v ? p.vs : p.ks;
      const float* src = pool;
      int bytes = 0;
      if (t < kv_len) {
        src = pool + slot_of(t);
        bytes = 4;
      }
      cp_async_zfill<4>((is_v ? vsc : ksc) + tok, src, bytes);
    }
  };
  if (my_begin < my_end) issue(my_begin, 0);
  cp_async_commit();
  if (my_begin + 1 < my_end) issue(my_begin + 1, 1);
  cp_async_commit();

  // Rotated queries as fp16 A fragments: lane element (row g + 8r, dim 16ks + 8h + 2t4 + e) at
  // x[ks][h][e]; register (h, r) of k-step ks is A's a[2h + r] (PTX's m16n8k16 A layout).
  uint32_t qa[S::kQInRegs ? S::KS : 1][4];
  float rowf[2];  // σ · score_scale of each row
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float x[S::KS][2][2];
#pragma unroll
    for (int ks = 0; ks < S::KS; ++ks)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int d = 16 * ks + 8 * h + 2 * t4 + e;
          const float sg = p.ksign ? __ldg(p.ksign + d) : 1.0f;
          x[ks][h][e] = row_ok[r] ? load_elem(p.q, p.q_dtype, row_q[r] + d) * sg : 0.0f;
        }
    // Unnormalized FWHT over the dim bits: bit 0 = e, bits 1–2 = t4 (lanes), bit 3 = h, bits 4+ = ks.
#pragma unroll
    for (int ks = 0; ks < S::KS; ++ks)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float a = x[ks][h][0], c = x[ks][h][1];
        x[ks][h][0] = a + c;
        x[ks][h][1] = a - c;
      }
#pragma unroll
    for (int bit = 1; bit <= 2; bit <<= 1) {
      const bool upper = (t4 & bit) != 0;
#pragma unroll
      for (int ks = 0; ks < S::KS; ++ks)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float o = __shfl_xor_sync(0xffffffffu, x[ks][h][e], bit);
            x[ks][h][e] = upper ? o - x[ks][h][e] : x[ks][h][e] + o;
          }
    }
#pragma unroll
    for (int ks = 0; ks < S::KS; ++ks)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float a = x[ks][0][e], c = x[ks][1][e];
        x[ks][0][e] = a + c;
        x[ks][1][e] = a - c;
      }
#pragma unroll
    for (int hs = 1; hs < S::KS; hs <<= 1)
#pragma unroll
      for (int ks = 0; ks < S::KS; ++ks)
        if ((ks & hs) == 0)
#pragma unroll
          for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const float a = x[ks][h][e], c = x[ks + hs][h][e];
              x[ks][h][e] = a + c;
              x[ks + hs][h][e] = a - c;
            }
    // σ: the power of two at or above the row's max |q_rot| (1 for a zero or non-finite row).
    float mx = 0;
#pragma unroll
    for (int ks = 0; ks < S::KS; ++ks)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int e = 0; e < 2; ++e) mx = fmaxf(mx, fabsf(x[ks][h][e]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    int ex = 0;
    frexpf(mx, &ex);
    const float sigma = (mx > 0 && isfinite(mx)) ? ldexpf(1.0f, ex) : 1.0f;
    const float inv = 1.0f / sigma;  // a power of two: exact
    rowf[r] = sigma * p.score_scale;
#pragma unroll
    for (int ks = 0; ks < S::KS; ++ks)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t v = pack_half2(x[ks][h][0] * inv, x[ks][h][1] * inv);
        if constexpr (S::kQInRegs)
          qa[ks][2 * h + r] = v;
        else
          qf[((warp * S::KS + ks) * 32 + lane) * 4 + 2 * h + r] = v;
      }
  }

  // ldmatrix row addresses of this lane. K (B of S, non-transposed): matrix mi = lane / 8 holds
  // tokens 8(mi / 2) + 0..7 and dims 8(mi % 2) + 0..7 of a 16-token, 16-dim block, so registers 0, 1
  // are b0, b1 of the first n-tile and 2, 3 of the second. V (B of O, transposed): matrix mi holds
  // tokens 8(mi % 2) + 0..7 and dims 8(mi / 2) + 0..7: registers 0, 1 for the first 8 dims, 2, 3 the next.
  const uint32_t k_lane =
      smem_addr(kdec) + (((lane & 7) + 8 * (lane >> 4)) * S::LD + 8 * ((lane >> 3) & 1)) * 2;
  const uint32_t v_lane =
      smem_addr(vdec) + (((lane & 7) + 8 * ((lane >> 3) & 1)) * S::LD + 8 * (lane >> 4)) * 2;

  // O (accumulator layout: n-tile dt, element e = row g + 8(e / 2), dim 8dt + 2t4 + e % 2), the
  // running maxima (log2 units) and sums (this lane's columns; the quad's sum at the end) of its two
  // rows, and u, the warp's running maximum of the V scales, which P is normalized by.
  float acc[S::DT][4];
#pragma unroll
  for (int i = 0; i < S::DT; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
  float m_run[2] = {kNegInf, kNegInf}, l_run[2] = {0.0f, 0.0f};
  float u = 1e-30f;

  // Stage i % 2's codes go to buffer i % 2 with the scales; tile 0 before the loop.
  auto decode_into = [&](int stage, int buf) {
    const uint8_t* st = stages + stage * p.stage_bytes;
    uint8_t* b = smem + buf * S::kBufBytes;
    __half* kd = reinterpret_cast<__half*>(b);
    decode_tile<D>(st + 8 * N, p.kbits, lutk, kd);
    decode_tile<D>(st + 8 * N + N * p.krow, p.vbits, lutv, kd + N * S::LD);
    if (threadIdx.x < 2 * N)
      reinterpret_cast<float*>(b + S::kScalesAt)[threadIdx.x] = reinterpret_cast<const float*>(st)[threadIdx.x];
  };
  cp_async_wait<1>();
  __syncthreads();  // tile 0's stage has landed; the codebooks are in place
  if (my_begin < my_end) decode_into(0, 0);

  for (int tile = my_begin; tile < my_end; ++tile) {
    const int stage = (tile - my_begin) & 1;
    cp_async_wait<0>();
    __syncthreads();  // this tile is decoded, the next one's stage has landed, the last compute is done
    if (tile + 2 < my_end) issue(tile + 2, stage);
    cp_async_commit();
    if (tile + 1 < my_end) decode_into(stage ^ 1, stage ^ 1);
    const uint32_t buf_off = stage * S::kBufBytes;
    const float* ksc = reinterpret_cast<const float*>(smem + buf_off + S::kScalesAt);

    const int t0 = tile * N;
    const bool needed = warp_active && (!p.causal || t0 <= wpos_hi) && (p.window < 0 || t0 + N - 1 >= wpos_lo - p.window);
    if (!needed) continue;
    const bool full = t0 + N <= kv_len && (!p.causal || t0 + N - 1 <= wpos_lo) && (p.window < 0 || t0 >= wpos_hi - p.window);
    const float* vsc = ksc + N;

    // S = Q·Kᵀ: s[n][e] = row g + 8(e / 2), token t0 + 8n + 2t4 + e % 2.
    float s[S::NT][4];
#pragma unroll
    for (int n = 0; n < S::NT; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < S::KS; ++ks) {
      uint32_t a[4];
      if constexpr (S::kQInRegs) {
#pragma unroll
        for (int i = 0; i < 4; ++i) a[i] = qa[ks][i];
      } else {
        const uint4 f = reinterpret_cast<const uint4*>(qf)[(warp * S::KS + ks) * 32 + lane];
        a[0] = f.x;
        a[1] = f.y;
        a[2] = f.z;
        a[3] = f.w;
      }
#pragma unroll
      for (int np = 0; np < S::NT / 2; ++np) {
        uint32_t b[4];
        ldsm_x4(b, k_lane + buf_off + (np * 16 * S::LD + ks * 16) * 2);
        mma16816<__half>(s[2 * np], a, b[0], b[1]);
        mma16816<__half>(s[2 * np + 1], a, b[2], b[3]);
      }
    }

    // Scores in log2 units, masked; the tile's row maxima and V-scale maximum (over the quad: all
    // the tile's tokens).
    float mx[2] = {kNegInf, kNegInf}, vmax = 0.0f;
#pragma unroll
    for (int n = 0; n < S::NT; ++n) {
      const float2 kk = *reinterpret_cast<const float2*>(ksc + 8 * n + 2 * t4);
      const float2 vv = *reinterpret_cast<const float2*>(vsc + 8 * n + 2 * t4);
      vmax = fmaxf(vmax, fmaxf(vv.x, vv.y));
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        float x = s[n][e] * rowf[r] * ((e & 1) ? kk.y : kk.x);
        if (!full) {
          const int t = t0 + 8 * n + 2 * t4 + (e & 1);
          const bool ok = t < kv_len && (!p.causal || t <= row_pos[r]) && (p.window < 0 || t >= row_pos[r] - p.window);
          x = ok ? x : kNegInf;
        }
        s[n][e] = x;
        mx[r] = max_nan(mx[r], x);
      }
    }
#pragma unroll
    for (int o = 1; o <= 2; o <<= 1) {
      mx[0] = max_nan(mx[0], __shfl_xor_sync(0xffffffffu, mx[0], o));
      mx[1] = max_nan(mx[1], __shfl_xor_sync(0xffffffffu, mx[1], o));
      vmax = fmaxf(vmax, __shfl_xor_sync(0xffffffffu, vmax, o));
    }
    const float u_new = fmaxf(u, vmax), ratio = u / u_new, inv_u = 1.0f / u_new;
    u = u_new;
    float m_use[2], f[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float m_new = max_nan(m_run[r], mx[r]);
      m_use[r] = m_new == kNegInf ? 0.0f : m_new;  // a row with nothing seen yet: exp2(−∞ − 0) = 0
      const float alpha = exp2f(m_run[r] - m_use[r]);
      m_run[r] = m_new;
      l_run[r] *= alpha;
      f[r] = alpha * ratio;
    }
#pragma unroll
    for (int i = 0; i < S::DT; ++i) {
      acc[i][0] *= f[0];
      acc[i][1] *= f[0];
      acc[i][2] *= f[1];
      acc[i][3] *= f[1];
    }

    // P = exp2(S − m) into l; times V scale / u as fp16 A fragments of O += P·V (k-step kk: n-tiles
    // 2kk, 2kk + 1 of S are its columns 0–7, 8–15). A masked entry is exactly 0 (its token's V scale,
    // possibly NaN, is not used).
    uint32_t pa[S::PK][4];
#pragma unroll
    for (int n = 0; n < S::NT; ++n) {
      const float2 vv = *reinterpret_cast<const float2*>(vsc + 8 * n + 2 * t4);
      float pe[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        const float pr = ex2<true>(s[n][e] - m_use[r]);
        l_run[r] += pr;
        pe[e] = s[n][e] == kNegInf ? 0.0f : pr * (((e & 1) ? vv.y : vv.x) * inv_u);
      }
      pa[n >> 1][(n & 1) * 2] = pack_half2(pe[0], pe[1]);
      pa[n >> 1][(n & 1) * 2 + 1] = pack_half2(pe[2], pe[3]);
    }
#pragma unroll
    for (int kk = 0; kk < S::PK; ++kk)
#pragma unroll
      for (int dp = 0; dp < S::DT / 2; ++dp) {
        uint32_t b[4];
        ldsm_x4_trans(b, v_lane + buf_off + (kk * 16 * S::LD + dp * 16) * 2);
        mma16816<__half>(acc[2 * dp], pa[kk], b[0], b[1]);
        mma16816<__half>(acc[2 * dp + 1], pa[kk], b[2], b[3]);
      }
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 1);
    l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 2);
  }
#pragma unroll
  for (int i = 0; i < S::DT; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[i][e] *= u;  // Σ p·v_scale·c relative to m

  // out = s_V ⊙ FWHT(o / (l·D)) (zeros where l == 0) and lse, for this lane's valid rows.
  auto finish = [&](float(&o)[S::DT][4], const float(&mr)[2], const float(&lr)[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float den = lr[r] * static_cast<float>(D);
#pragma unroll
      for (int i = 0; i < S::DT; ++i)
#pragma unroll
        for (int e = 0; e < 2; ++e) o[i][2 * r + e] = lr[r] == 0.0f ? 0.0f : o[i][2 * r + e] / den;
    }
    // Unnormalized FWHT over the dim bits: bit 0 = e % 2, bits 1–2 = t4 (lanes), bits 3+ = n-tile.
#pragma unroll
    for (int i = 0; i < S::DT; ++i)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float a = o[i][2 * r], c = o[i][2 * r + 1];
        o[i][2 * r] = a + c;
        o[i][2 * r + 1] = a - c;
      }
#pragma unroll
    for (int bit = 1; bit <= 2; bit <<= 1) {
      const bool upper = (t4 & bit) != 0;
#pragma unroll
      for (int i = 0; i < S::DT; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float x = __shfl_xor_sync(0xffffffffu, o[i][e], bit);
          o[i][e] = upper ? x - o[i][e] : o[i][e] + x;
        }
    }
#pragma unroll
    for (int hs = 1; hs < S::DT; hs <<= 1)
#pragma unroll
      for (int i = 0; i < S::DT; ++i)
        if ((i & hs) == 0)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float a = o[i][e], c = o[i + hs][e];
            o[i][e] = a + c;
            o[i + hs][e] = a - c;
          }
#pragma unroll
    for (int i = 0; i < S::DT; ++i) {
      const int d = 8 * i + 2 * t4;
      const float2 sg = p.vsign ? __ldg(reinterpret_cast<const float2*>(p.vsign + d)) : make_float2(1.0f, 1.0f);
#pragma unroll
      for (int r = 0; r < 2; ++r)
        if (row_ok[r]) store_out_pair(p, row_out[r] * D + d, o[i][2 * r] * sg.x, o[i][2 * r + 1] * sg.y);
    }
    if (p.lse && t4 == 0)
#pragma unroll
      for (int r = 0; r < 2; ++r)
        if (row_ok[r]) p.lse[row_out[r]] = lr[r] == 0.0f ? kNegInf : (mr[r] + log2f(lr[r])) * kLn2;
  };

  if (p.splits == 1) {
    if (warp_active) finish(acc, m_run, l_run);
    return;
  }

  // A split: this block's partial, then the last block of the (sequence, row tile, K/V head) merges.
  const int64_t group_id = (static_cast<int64_t>(si) * p.row_tiles + rtile) * p.kv_heads + hk;
  const int64_t pidx = group_id * p.splits + split;
  if (warp_active) {
    float4* po = reinterpret_cast<float4*>(p.part_o) + (pidx * kWarps + warp) * S::DT * 32 + lane;
#pragma unroll
    for (int i = 0; i < S::DT; ++i) po[i * 32] = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
    if (t4 == 0) {
      float2* pml = reinterpret_cast<float2*>(p.part_ml) + (pidx * kWarps + warp) * 16;
      pml[g] = make_float2(m_run[0], l_run[0]);
      pml[g + 8] = make_float2(m_run[1], l_run[1]);
    }
  }
  // Release: the block's partials are published by the barrier and the fence before the arrival;
  // the merging block's fence after it orders its reads (through L2: __ldcg). The last arrival resets
  // the counter, so every call finds it zero.
  __syncthreads();
  bool last = false;
  if (threadIdx.x == 0) {
    unsigned* counter = p.counters + group_id;
    __threadfence();
    last = atomicAdd(counter, 1u) == static_cast<unsigned>(p.splits - 1);
    if (last) {
      __threadfence();
      atomicExch(counter, 0u);
    }
  }
  if (!__syncthreads_or(last) || !warp_active) return;

  // Merge in split order (deterministic): M = max m_s, O = Σ O_s·2^(m_s − M), L = Σ l_s·2^(m_s − M).
  const float2* ml0 = reinterpret_cast<const float2*>(p.part_ml) + (group_id * p.splits * kWarps + warp) * 16;
  const float4* po0 = reinterpret_cast<const float4*>(p.part_o) + (group_id * p.splits * kWarps + warp) * S::DT * 32 + lane;
  float M[2] = {kNegInf, kNegInf}, L[2] = {0.0f, 0.0f};
  for (int sp = 0; sp < p.splits; ++sp)
#pragma unroll
    for (int r = 0; r < 2; ++r) M[r] = max_nan(M[r], __ldcg(ml0 + sp * kWarps * 16 + g + 8 * r).x);
#pragma unroll
  for (int i = 0; i < S::DT; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
  for (int sp = 0; sp < p.splits; ++sp) {
    float w[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float2 ml = __ldcg(ml0 + sp * kWarps * 16 + g + 8 * r);
      w[r] = M[r] == kNegInf ? 0.0f : exp2f(ml.x - M[r]);
      L[r] += ml.y * w[r];
    }
    const float4* po = po0 + static_cast<int64_t>(sp) * kWarps * S::DT * 32;
#pragma unroll
    for (int i = 0; i < S::DT; ++i) {
      const float4 o = __ldcg(po + i * 32);
      acc[i][0] += o.x * w[0];
      acc[i][1] += o.y * w[0];
      acc[i][2] += o.z * w[1];
      acc[i][3] += o.w * w[1];
    }
  }
  finish(acc, M, L);
}

// ---- host side ------------------------------------------------------------------------------

struct Plan {
  int dim = 0, tokens = 0, row_tiles = 0, splits = 1;
};

int tile_tokens(int dim) { return dim >= 256 ? Shape<256>::N : Shape<128>::N; }

// Row tiles and splits from the plan's host-known shapes only, so the workspace and every call of a
// plan (and its updates) agree.
Plan plan_of(const attention::backend::PagedArgs& a) {
  Plan pl;
  pl.dim = a.dim;
  pl.tokens = tile_tokens(a.dim);
  const int group = a.q_heads / a.kv_heads;
  pl.row_tiles = static_cast<int>((static_cast<int64_t>(a.max_q_count) * group + kRows - 1) / kRows);
  const int64_t base = static_cast<int64_t>(a.num_seqs) * pl.row_tiles * a.kv_heads;
  if (base <= 0) return pl;
  const int64_t target = static_cast<int64_t>(kBlocksPerSm) * multiprocessor_count(a.device);
  if (base >= target) return pl;
  const int64_t max_tiles = (a.max_kv_len + pl.tokens - 1) / pl.tokens;
  const int64_t by_tokens = std::max<int64_t>(1, max_tiles / kMinSplitTiles);
  const int64_t want = (target + base - 1) / base;
  pl.splits = static_cast<int>(std::min<int64_t>({want, by_tokens, kMaxSplits}));
  return pl;
}

constexpr size_t kAlign = 256;
size_t align_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

struct Layout {
  size_t counters = 0, part_ml = 0, part_o = 0, end = 0;
};
Layout layout_of(const attention::backend::PagedArgs& a, const Plan& pl) {
  const size_t groups = static_cast<size_t>(a.num_seqs) * pl.row_tiles * a.kv_heads;
  const size_t blocks = groups * pl.splits;
  Layout l;
  l.part_ml = align_up(groups * sizeof(unsigned));
  l.part_o = align_up(l.part_ml + blocks * kRows * 2 * sizeof(float));
  l.end = l.part_o + blocks * kRows * static_cast<size_t>(pl.dim) * sizeof(float);
  return l;
}

using KernelFn = void (*)(Params);
KernelFn kernel_for(int dim) {
  switch (dim) {
    case 64: return kernel_paged_tiles<64>;
    case 128: return kernel_paged_tiles<128>;
    default: return kernel_paged_tiles<256>;
  }
}
int smem_for(int dim, int kb, int vb) {
  switch (dim) {
    case 64: return Shape<64>::smem_bytes(kb, vb);
    case 128: return Shape<128>::smem_bytes(kb, vb);
    default: return Shape<256>::smem_bytes(kb, vb);
  }
}
int stage_for(int dim, int kb, int vb) {
  switch (dim) {
    case 64: return Shape<64>::stage_bytes(kb, vb);
    case 128: return Shape<128>::stage_bytes(kb, vb);
    default: return Shape<256>::stage_bytes(kb, vb);
  }
}

int dtype_code(DType t) { return t == DType::f32 ? 0 : (t == DType::f16 ? 1 : 2); }

bool served_bits(int b) { return b == 2 || b == 3 || b == 4 || b == 8; }

constexpr const char* kOp = "attention::paged_attention";

}  // namespace
}  // namespace tiles

size_t paged_tiles_workspace_bytes(const attention::backend::PagedArgs& a) {
  if (a.num_seqs <= 0 || a.max_q_count <= 0 || a.kv_heads <= 0) return 0;
  const tiles::Plan pl = tiles::plan_of(a);
  if (pl.splits <= 1) return 0;
  return tiles::layout_of(a, pl).end + tiles::kAlign;
}

void paged_tiles(const attention::backend::PagedArgs& a, Stream stream) {
  using namespace tiles;
  if (a.num_seqs <= 0 || a.max_q_count <= 0) return;
  FRUGAL_CHECK(a.dim == 64 || a.dim == 128 || a.dim == 256, unsupported, kOp,
               "the tiled kernel serves head_dim 64, 128 or 256, got " << a.dim);
  FRUGAL_CHECK(served_bits(a.k.bits) && served_bits(a.v.bits), unsupported, kOp,
               "the tiled kernel serves 2, 3, 4 or 8 bits, got K " << a.k.bits << ", V " << a.v.bits);
  FRUGAL_CHECK(a.page_size == 16 || a.page_size == 32 || a.page_size == 64, invalid_argument, kOp,
               "page_size must be 16, 32 or 64, got " << a.page_size);
  FRUGAL_CHECK(a.kv_heads > 0 && a.q_heads % a.kv_heads == 0, invalid_argument, kOp,
               "q_heads (" << a.q_heads << ") must be a multiple of kv_heads (" << a.kv_heads << ")");
  FRUGAL_CHECK(a.num_seqs <= 65535 && a.kv_heads <= 65535, invalid_argument, kOp,
               "the tiled kernel serves at most 65535 sequences and K/V heads, got " << a.num_seqs << " and "
                                                                                     << a.kv_heads);
  FRUGAL_CHECK(a.max_kv_len <= INT_MAX - 64, invalid_argument, kOp, "max_kv_len too large: " << a.max_kv_len);
  FRUGAL_CHECK(is_aligned(a.k.packed, 16) && is_aligned(a.v.packed, 16) && is_aligned(a.k.scales, 4) &&
                   is_aligned(a.v.scales, 4) && (!a.v.signs || is_aligned(a.v.signs, 8)),
               internal, kOp, "the tiled kernel needs 16-byte aligned packed pools");
  FRUGAL_CHECK(!a.k.scales_f16 && !a.v.scales_f16, internal, kOp, "the tiled kernel reads the pools' f32 scales");
  DeviceGuard guard(a.device);
  const Plan pl = plan_of(a);

  Params p{};
  p.q = a.q;
  p.q_stride_row = a.q_stride_row;
  p.q_stride_h = a.q_stride_h;
  p.q_dtype = dtype_code(a.q_dtype);
  p.out_dtype = dtype_code(a.out_dtype);
  p.out = a.out;
  p.out_pairs = is_aligned(a.out, 2 * static_cast<int>(size_of(a.out_dtype))) ? 1 : 0;
  p.lse = a.lse;
  p.kp = a.k.packed;
  p.ks = static_cast<const float*>(a.k.scales);
  p.ksign = a.k.signs;
  p.kcb = a.k.centroids;
  p.vp = a.v.packed;
  p.vs = static_cast<const float*>(a.v.scales);
  p.vsign = a.v.signs;
  p.vcb = a.v.centroids;
  p.kbits = a.k.bits;
  p.vbits = a.v.bits;
  p.krow = a.dim * a.k.bits / 8;
  p.vrow = a.dim * a.v.bits / 8;
  auto pieces = [](int row, int& chunk, int& cpr, uint32_t& magic) {
    chunk = row % 16 == 0 ? 16 : 8;  // rows are whole multiples of 8 bytes at these dims and widths
    cpr = row / chunk;
    magic = (65536u + static_cast<uint32_t>(cpr) - 1u) / static_cast<uint32_t>(cpr);
  };
  pieces(p.krow, p.kchunk, p.kcpr, p.kcpr_magic);
  pieces(p.vrow, p.vchunk, p.vcpr, p.vcpr_magic);
  p.q_heads = a.q_heads;
  p.kv_heads = a.kv_heads;
  p.group = a.q_heads / a.kv_heads;
  p.page_shift = a.page_size == 16 ? 4 : (a.page_size == 32 ? 5 : 6);
  p.slots = a.slots;
  p.indptr = a.kv_indptr;
  p.indices = a.kv_indices;
  p.seqs = a.seqs;
  p.row_tiles = pl.row_tiles;
  p.splits = pl.splits;
  p.causal = a.causal ? 1 : 0;
  p.window = a.window_left < 0 ? -1 : static_cast<int>(std::min<int64_t>(a.window_left, INT_MAX - 1));
  p.score_scale = a.softmax_scale * kLog2e / static_cast<float>(a.dim);
  p.stage_bytes = stage_for(a.dim, a.k.bits, a.v.bits);
  if (pl.splits > 1) {
    const Layout lay = layout_of(a, pl);
    FRUGAL_CHECK(a.workspace != nullptr && a.workspace_bytes >= lay.end + kAlign, internal, kOp,
                 "the tiled kernel's workspace has " << a.workspace_bytes << " bytes, needs " << lay.end + kAlign);
    uint8_t* ws = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(a.workspace) + kAlign - 1) / kAlign * kAlign);
    p.counters = reinterpret_cast<unsigned*>(ws + lay.counters);
    p.part_ml = reinterpret_cast<float*>(ws + lay.part_ml);
    p.part_o = reinterpret_cast<float*>(ws + lay.part_o);
  }

  const KernelFn fn = kernel_for(a.dim);
  allow_dynamic_smem(reinterpret_cast<const void*>(fn), smem_for(a.dim, 8, 8));
  const int smem = smem_for(a.dim, a.k.bits, a.v.bits);
  const dim3 grid(static_cast<unsigned>(pl.row_tiles * pl.splits), static_cast<unsigned>(a.kv_heads),
                  static_cast<unsigned>(a.num_seqs));
  fn<<<grid, kThreads, smem, to_cuda(stream)>>>(p);
  FRUGAL_CUDA_CHECK_LAUNCH();
}

}  // namespace frugal::cuda
