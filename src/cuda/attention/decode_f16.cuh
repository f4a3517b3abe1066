// The f16 tensor-core decode-attention kernel (mma.sync m16n8k16, fp16 operands, f32 accumulators),
// one template for both main loops: the register loop (4 warps a block, IMAD + LDS table lookups;
// decode_f16.cu instantiates it) and the wide-table loop (8 warps, one PRMT forms a lookup's address,
// the bare ex2; decode_f16_wide.cu). Bytes floor: every cached byte of the attended tokens once,
// B·Hkv·L·(D·(K bits + V bits)/8 + sK + sV) (packed codes and the two scales, sK and sV bytes: 4 for
// f32, 2 for f16), plus a split call's partials, B·Hq·splits·(D + 2) floats written and read once.
//
// Grid: (slice of the sequence, K/V head × tile of ≤ 8 query heads, sequence). Per 16-token tile,
// Sᵀ = K·Qᵀ with the tokens as M, K as the A operand and the ≤ 8 query heads as N; then
// Oᵀ += Vᵀ·Pᵀ with 16 dims as M, the heads as N and the 16 tokens as K. movmatrix.trans turns the Sᵀ
// C fragment (token g; heads 2t, 2t+1) into exactly the Pᵀ B fragment, so P never leaves registers,
// and each lane's softmax state is for the heads of its O columns. Codes become fp16 fragments
// through a shared-memory table indexed by a byte — for 4 bits a byte holds two codes and the table
// returns the half2 (c[lo], c[hi]) — replicated 32× (one copy per bank) so a warp's 32 random lookups
// never conflict. The head dimension is permuted (identically in q and K, and undone when O is
// stored) so each lane's fragments come from one contiguous piece of its token's row (16-byte
// loads). At D = 256 the main loop is a rotating register pipeline; every other D requests a
// chunk's loads when the chunk starts. The prologue (q rotation, σ, fragments) and the epilogue
// (merge, finish) run one warp per head row with D known at compile time. A split call's partials
// are merged by the last block of each (sequence, K/V head, head tile) to finish, found with an
// arrival counter in the workspace (merge_slices). The L1 data pipe (table lookups, the loads' data,
// shuffles) is the resource the loads and the math share (docs/performance.md, "Decode attention").
#pragma once

#include <cuda_fp16.h>

#include <type_traits>

#include "cuda/attention/device.cuh"
#include "cuda/attention/params.cuh"
#include "cuda/attention/rows.cuh"

namespace frugal::cuda::decode {
namespace {

// The f16 kernel's merge area cw [kWarps][8][D] holds each row's dims in pairs (2P, 2P + 1), P =
// (D/16)·g + mt for the lane (g, t4) and m-tile mt that wrote it. Stored at pair P ^ x with x from
// (g, t4) (x < min(D/16, 16), so only mt's bits change): a warp's 32 float2 stores of one m-tile
// then cover all 32 banks twice (2 wavefronts; unswizzled they hit 2 banks), and a warp reading 32 consecutive dims of a row still reads 32 distinct banks.
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
// order as kernel_combine<D> (combine.cu), so the result is bitwise the same: there,
// thread t = 32k + j of 128 summed l over the slices t, t + 128, ..., each warp's sums were added by
// a butterfly, then warp 0's + 1's + 2's + 3's; and the O of dims 4v..4v+3 was summed by
// G = 512/D groups of threads, group i over the slices i, i + G, ... in order, then group 0's + 1's
// + ... — here lk[k] and acc[i] are those sums, in the same order.
// Also the row's LSE where Params::lse asks for it. prow: the row of its partials
// (part_o[prow · splits + slice]); qrow, hq: its output row and head.
template <int D>
__device__ __forceinline__ void merge_slices(const Params& p, int64_t prow, int64_t qrow, int hq) {
  constexpr int E = D / 32;        // dims a lane holds: lane + 32j
  constexpr int G = 512 / D;       // kernel_combine's slice groups (kThreads threads of float4 each)
  constexpr int NB = 2 * G;        // slices loaded together (2G·E = 32 floats of registers a lane)
  static_assert(32 % NB == 0 && kThreads * 4 == 512, "a batch stays inside a chunk of 32 slices");
  const int lane = threadIdx.x & 31, S = p.splits;
  const int64_t row = prow;
  const float* ml = p.part_ml + row * S * 2;
  const float* po = p.part_o + row * S * D + lane * E;

  float2 ml0 = make_float2(kNegInf, 0.0f);  // slice `lane`'s (m, l)
  if (lane < S) ml0 = __ldcg(reinterpret_cast<const float2*>(ml) + lane);
  float sg[E];  // V's signs, requested with the first (m, l)
  load_vsign<D>(p, sg);
  float mx = ml0.x;
  for (int s = 32 + lane; s < S; s += 32) mx = max_nan(mx, __ldcg(ml + 2 * s));
  const float M = warp_max_nan(mx);

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
  if (p.lse && lane == 0) p.lse[qrow * p.q_heads + hq] = lse_of(M, L);
  float v[E];
#pragma unroll
  for (int j = 0; j < E; ++j) {
    float o = acc[0][j];
#pragma unroll
    for (int i = 1; i < G; ++i) o += acc[i][j];
    v[j] = o;
  }
  warp_store_row<D>(p, qrow, hq, v, L, sg);
}

// ---- the kernel -------------------------------------------------------------------------------

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

// D = 128: two 16-token tiles per warp chunk (attention::backend::f16_tiles_per_chunk) and a
// register budget sized for 4 resident blocks per SM; with an 8-bit K or V 3 blocks (168
// registers), because at 4 those kernels spill and run slower. (The wide kernel serves every
// D = 128 width by default; these serve DecodeVariant::f16_registers.)
constexpr int kMinBlocks128 = 4, kMinBlocks128Bits8 = 3;

template <int D, int KB, int VB>
struct F16Shape {
  static constexpr int KS = D / 16;        // k-steps of S = Q·Kᵀ (and m-tiles of Oᵀ)
  static constexpr int KCB = D * KB / 32;  // bytes of a K row each lane reads (dims [D/4·t, D/4·(t+1)))
  static constexpr int VCB = D * VB / 64;  // bytes of a V row each lane reads (dims [D/8·g, D/8·(g+1)))
  static constexpr int NSUB = attention::backend::f16_tiles_per_chunk(D);  // 16-token tiles per warp chunk
  static constexpr int CH = 16 * NSUB;
  static constexpr bool kQInSmem = D > 256;  // q fragments: registers up to D = 256
  static constexpr int kLuts = (KB == VB) ? 1 : 2;
  // D = 256: the main loop is the rotating pipeline (see the kernel); every other D the per-chunk loop.
  static constexpr bool kRotate = D == 256;
};

// The wide-table loop's block: kWideWarps = 8 warps, 2 blocks a multiprocessor (16 warps per SM, as
// the 4-warp kernel's 4 blocks), each with the 64 KB wide table, at every bit width: with an 8-bit K
// or V it spills a little at D = 128 and is still faster than 4 warps × 3 blocks or 6 warps × 2
// blocks without spills, because 16 warps an SM sharing two tables is what pays.
using attention::backend::kWideWarps;
constexpr int kWideMinBlocks = 2;
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
// lines: the V loads' L1 data-pipe wavefronts fall from 64 to 32 a chunk.
// Sᵀ = K·Qᵀ keeps its rows in token order where K rows are 64 bytes (kKPairs): the 8 lanes of a
// quarter-warp then read rows 2i and 2i + 1, adjacent tokens, one line (in tile order
// they read tokens i and i + 4, two lines: 32 wavefronts a chunk instead of 16, and slower).
// movmatrix leaves P in Sᵀ's row order, so two
// shuffles a fragment put it in tile order (to_tile_order).
__host__ __device__ constexpr int tile_token(int r) { return (r & 8) | ((r & 7) >> 1) | ((r & 1) << 2); }
static_assert(tile_token(0) == 0 && tile_token(1) == 4 && tile_token(6) == 3 && tile_token(7) == 7 &&
                  tile_token(9) == 12 && tile_token(14) == 11,
              "rows 2i, 2i + 1 of a tile half hold tokens i, i + 4");

// NW: warps a block; kWide: the wide table (see lut_load_wide) and the bare ex2 in the softmax;
// kPaged: the blocks serve paged row items (Params::items): per-tile slots through the page list,
// the tokens of a slice's first tile below the item's range masked, no L2 prefetch. kMulti: the items
// may hold several query rows, each its own columns with its own causal end (BlockWork).
template <int D, int KB, int VB, int NW = kWarps, bool kWide = false, bool kPaged = false, bool kMulti = false>
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

  // The exact rows' kernel after this one (a programmatic dependent) may be scheduled into what
  // this grid leaves free: it reads only its own rows until it waits for this grid.
  grid_launch_dependents();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t4 = lane & 3;
  // Sᵀ's rows in token order (see tile_token) where measured faster: D = 128 at 4 bits (64-byte K
  // rows); at D = 64 (32-byte rows) it is slower, and from 128-byte rows on a row is a line in
  // either order.
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
  const BlockWork w = block_work<kPaged, kMulti>(p);
  // Column r's output row and head, and the row of its partials in the workspace.
  auto col_row = [&](int r) -> int64_t {
    if constexpr (kMulti) return w.col_row(r);
    return w.qrow;
  };
  auto col_head = [&](int r) -> int {
    if constexpr (kMulti) return w.col_head(r);
    return w.hq0 + r;
  };
  auto part_row = [&](int r) -> int64_t {
    if constexpr (kMulti) return w.col_row(r) * p.q_heads + w.col_head(r);
    return static_cast<int64_t>(w.b) * p.q_heads + w.hq0 + r;
  };

  constexpr int KROW = D * KB / 8, VROW = D * VB / 8;
  // D = 128, 4-bit K: each full chunk asks L2 for the warp's next chunk's K lines (below).
  constexpr bool kPrefetchK = D == 128 && KB == 4;
  constexpr int kPrefetchLines = S::CH * KROW / 128;
  static_assert(!kPrefetchK || (kPrefetchLines <= 32 && S::CH * KROW % 128 == 0), "a line a lane");
  const int64_t head = kPaged ? w.hk : static_cast<int64_t>(w.b) * p.kv_heads + w.hk;
  const int64_t cap = p.capacity;
  // The block's query rows (rows warp, warp + 4) and K's signs are requested first, so their
  // memory latency overlaps the codebook loads and the table stores (issued after the tables, the
  // two round trips would be in series).
  constexpr int kRowsPerWarp = kHeadsPerBlock / NW;
  uint32_t qraw[kRowsPerWarp][D / 32];
  float qsgn[D / 32];
#pragma unroll
  for (int j = 0; j < D / 32; ++j) qsgn[j] = p.ksign ? __ldg(p.ksign + lane + 32 * j) : 1.0f;
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int r = i * NW + warp;
    const int rc = min(r, w.heads - 1);
    const int64_t base = col_row(rc) * p.q_stride_b + col_head(rc) * p.q_stride_h;
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
  // The ends of those two columns' ranges (a multi-row item's rows end one token apart).
  const int64_t end_c0 = kMulti ? w.col_end(2 * t4) : 0, end_c1 = kMulti ? w.col_end(2 * t4 + 1) : 0;

  const uint8_t* kbase = p.kp + head * p.capacity * KROW + t4 * S::KCB;
  const uint8_t* vbase = p.vp + head * p.capacity * VROW + g * S::VCB;
  // Paged pools hold f32 scales: their kernels read them with the format fixed at compile time.
  const ScalePtr ksb = (kPaged ? p.ks.as_f32() : p.ks) + head * p.capacity;
  const ScalePtr vsb = (kPaged ? p.vs.as_f32() : p.vs) + head * p.capacity;
  int64_t slot_t0;  // the slice's first token's slot: what masked tokens read
  if constexpr (kPaged)
    slot_t0 = w.t0 < w.t1 ? paged_slot(p, w.pages, w.t0) : 0;
  else
    slot_t0 = p.sliding ? w.t0 % cap : w.t0;
  // Whether token t of a chunk is attended (below t1 always checked by the callers).
  auto above_lo = [&](int64_t t) { return !kPaged || t >= w.lo; };
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
  // Scale and mask the chunk's scores (tokens from `first` on; all valid when kFull), set vsc to the
  // V scales (zero for masked tokens), and move the running maxima (rescaling l and Oᵀ). Returns 1/u.
  // The scales arrive as their stored bits (ScalePtr::bits): converted here, after the scores.
  auto softmax_step = [&](auto full_tag, int64_t first, float(&sc)[S::NSUB][4], const uint32_t(&ks_bits)[S::NSUB][2],
                          const uint32_t(&vs_bits)[S::NSUB][2], float(&vsc)[S::NSUB][2]) -> float {
    constexpr bool kFull = decltype(full_tag)::value;
    float cmax0 = kNegInf, cmax1 = kNegInf, vmax = 0;
#pragma unroll
    for (int j = 0; j < S::NSUB; ++j)
#pragma unroll
      for (int n = 0; n < 2; ++n) {
        const int64_t tok = first + 16 * j + 8 * n + gt;
        const bool valid = kFull || (tok < w.t1 && above_lo(tok));  // some column sees the token
        const bool valid0 = valid && (kFull || !kMulti || tok < end_c0), valid1 = valid && (kFull || !kMulti || tok < end_c1);
        const float ks = ksb.value(ks_bits[j][n]), k0 = ks * hf0, k1 = ks * hf1;
        sc[j][2 * n] = valid0 ? sc[j][2 * n] * k0 : kNegInf;
        sc[j][2 * n + 1] = valid1 ? sc[j][2 * n + 1] * k1 : kNegInf;
        vsc[j][n] = valid ? vsb.value(vs_bits[j][n]) : 0.0f;
        cmax0 = max_nan(cmax0, sc[j][2 * n]);
        cmax1 = max_nan(cmax1, sc[j][2 * n + 1]);
        vmax = fmaxf(vmax, vsc[j][n]);
      }
    // The chunk's maxima over all its tokens (every g) move the running ones only where some lane's
    // own exceed them (or are NaN): only then are they reduced across the lanes (three shuffle
    // rounds) and the state rescaled — after the first chunks, rarely. Same values as reducing every
    // chunk.
    if (__any_sync(0xffffffffu, !(cmax0 <= m0) || !(cmax1 <= m1) || vmax > u)) {
#pragma unroll
      for (int o = 4; o < 32; o <<= 1) {
        cmax0 = max_nan(cmax0, __shfl_xor_sync(0xffffffffu, cmax0, o));
        cmax1 = max_nan(cmax1, __shfl_xor_sync(0xffffffffu, cmax1, o));
        vmax = fmaxf(vmax, __shfl_xor_sync(0xffffffffu, vmax, o));
      }
      const float n0 = max_nan(m0, cmax0), n1 = max_nan(m1, cmax1), u_new = fmaxf(u, vmax);
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
  // kMasked: entries of masked scores are exactly zero (a token one column of a multi-row item sees
  // keeps its V scale, which may be non-finite, for the others).
  auto accumulate_pv = [&](auto masked_tag, const float(&sc)[S::NSUB][4], const float(&vsc)[S::NSUB][2],
                           const uint32_t(&vw)[S::NSUB][4][S::VCB / 4], float inv_u) {
    constexpr bool kMasked = decltype(masked_tag)::value;
    // A multi-row item's column may have seen no token yet (its row's range ends before the
    // chunk): its weights are then exp2(−∞ − 0) = 0, not exp2(−∞ + ∞).
    const float mu0 = kMulti && m0 == kNegInf ? 0.0f : m0, mu1 = kMulti && m1 == kNegInf ? 0.0f : m1;
#pragma unroll
    for (int j = 0; j < S::NSUB; ++j) {
      float pt[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float pe = ex2<kWide>(sc[j][e] - ((e & 1) ? mu1 : mu0));
        if (e & 1)
          l1 += pe;
        else
          l0 += pe;
        pt[e] = pe * (vsc[j][e >> 1] * inv_u);
        if constexpr (kMasked) pt[e] = sc[j][e] == kNegInf ? 0.0f : pt[e];
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
    // work to hide behind, without a second register buffer. Faster than the loop below at D = 256
    // (no register cap there); slower at D = 128, at the 128-register cap (spills) and at 168
    // registers, 3 blocks/SM.
    uint32_t kw[S::NSUB][2][S::KCB / 4];
    uint32_t vw[S::NSUB][4][S::VCB / 4];
    uint32_t ks_bits[S::NSUB][2], vs_bits[S::NSUB][2];
    // Full chunk: every token valid and the slots contiguous (no ring wrap); otherwise per-token
    // slots, tokens past the slice reading the slice's first token (masked below).
    // Paged: a chunk is one 16-token tile (S::NSUB == 1), inside one page, at slot sl from the page list.
    static_assert(!kPaged || S::NSUB == 1, "the rotating loop's paged chunks are single tiles");
    auto is_full = [&](int64_t st, int64_t sl) {
      if constexpr (kPaged) return st >= w.lo && st + S::CH <= w.t1;
      return st + S::CH <= w.t1 && (!p.sliding || sl + S::CH <= cap);
    };
    auto slot_of = [&](int64_t st, int64_t sl, int i) -> int64_t {
      if (st + i >= w.t1) return slot_t0;
      if constexpr (kPaged) return paged_slot(p, w.pages, st + i);
      return p.sliding ? advance_slot(sl, i, cap) : st + i;
    };
    auto chunk_slot = [&](int64_t st, int64_t sl) -> int64_t {
      if constexpr (kPaged) return st < w.t1 ? paged_slot(p, w.pages, st) : slot_t0;
      return sl;
    };
    auto load_k = [&](int64_t st, int64_t sl) {
      if (is_full(st, sl)) {
        sl = chunk_slot(st, sl);
        const uint8_t* k_lane = kbase + (sl + gt) * KROW;
#pragma unroll
        for (int j = 0; j < S::NSUB; ++j)
#pragma unroll
          for (int n = 0; n < 2; ++n) load_words<S::KCB>(k_lane + (16 * j + 8 * n) * KROW, kw[j][n]);
        auto tile_offset = [](int j, int n) { return 16 * j + 8 * n; };
        (ksb + (sl + gt)).bits(ks_bits, tile_offset);
        (vsb + (sl + gt)).bits(vs_bits, tile_offset);
      } else {
#pragma unroll
        for (int j = 0; j < S::NSUB; ++j)
#pragma unroll
          for (int n = 0; n < 2; ++n) {
            const int64_t s = slot_of(st, sl, 16 * j + 8 * n + gt);
            load_words<S::KCB>(kbase + s * KROW, kw[j][n]);
            ks_bits[j][n] = ksb.bits(s);
            vs_bits[j][n] = vsb.bits(s);
          }
      }
    };
    auto load_v = [&](int64_t st, int64_t sl) {
      if (is_full(st, sl)) {
        sl = chunk_slot(st, sl);
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
      uint32_t ks_c[S::NSUB][2], vs_c[S::NSUB][2];
#pragma unroll
      for (int j = 0; j < S::NSUB; ++j)
#pragma unroll
        for (int n = 0; n < 2; ++n) {
          ks_c[j][n] = ks_bits[j][n];
          vs_c[j][n] = vs_bits[j][n];
        }
      if (more) load_k(next, next_slot);
      float vsc[S::NSUB][2];
      const float inv_u = softmax_step(std::false_type{}, start, sc, ks_c, vs_c, vsc);
      accumulate_pv(std::bool_constant<kMulti>{}, sc, vsc, vw, inv_u);
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
        if constexpr (kPaged) return paged_slot(p, w.pages, start + i);
        return p.sliding ? advance_slot(start_slot, i, cap) : start + i;
      };
      // Paged full chunks: the slot of each 16-token tile's first token (a tile lies inside one page).
      int64_t tile_slot[S::NSUB];
      if constexpr (kPaged && kFull)
#pragma unroll
        for (int j = 0; j < S::NSUB; ++j) tile_slot[j] = paged_slot(p, w.pages, start + 16 * j);
      // K rows and both scales: tokens gt and gt + 8 of each 16-token tile (Sᵀ rows g, g + 8); V rows:
      // tokens t4 + {0, 4, 8, 12} (K indices 2t4, 2t4 + 1, 2t4 + 8, 2t4 + 9; see tile_token).
      const uint8_t* k_lane = kbase + (cs + gt) * KROW;
      const uint8_t* v_lane = vbase + (cs + t4) * VROW;
      const ScalePtr ks_lane = ksb + (cs + gt);
      const ScalePtr vs_lane = vsb + (cs + gt);
      // Loads for the whole chunk first (several independent loads in flight per lane); where
      // registers are short (kVAfterScores below) the V rows only after the scores.
      uint32_t kw[S::NSUB][2][S::KCB / 4];
      uint32_t vw[S::NSUB][4][S::VCB / 4];
      uint32_t ks_bits[S::NSUB][2], vs_bits[S::NSUB][2];
      auto load_v = [&] {
#pragma unroll
        for (int j = 0; j < S::NSUB; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            if constexpr (kPaged && kFull)
              load_words<S::VCB>(vbase + (tile_slot[j] + t4 + v_tok(j, e) - 16 * j) * VROW, vw[j][e]);
            else if constexpr (kFull)
              load_words<S::VCB>(v_lane + v_tok(j, e) * VROW, vw[j][e]);
            else
              load_words<S::VCB>(vbase + slot_of(t4 + v_tok(j, e)) * VROW, vw[j][e]);
          }
      };
#pragma unroll
      for (int j = 0; j < S::NSUB; ++j) {
#pragma unroll
        for (int n = 0; n < 2; ++n) {
          if constexpr (kPaged && kFull) {
            const int64_t sl = tile_slot[j] + gt + 8 * n;
            load_words<S::KCB>(kbase + sl * KROW, kw[j][n]);
            ks_bits[j][n] = ksb.bits(sl);
            vs_bits[j][n] = vsb.bits(sl);
          } else if constexpr (kFull) {
            load_words<S::KCB>(k_lane + (16 * j + 8 * n) * KROW, kw[j][n]);
          } else {
            const int64_t sl = slot_of(16 * j + 8 * n + gt);
            load_words<S::KCB>(kbase + sl * KROW, kw[j][n]);
            ks_bits[j][n] = ksb.bits(sl);
            vs_bits[j][n] = vsb.bits(sl);
          }
        }
      }
      if constexpr (kFull && !kPaged) {
        auto tile_offset = [](int j, int n) { return 16 * j + 8 * n; };
        ks_lane.bits(ks_bits, tile_offset);
        vs_lane.bits(vs_bits, tile_offset);
      }
      // V's words after the scores (K's are dead by then) for D = 256 and the wide loop's 8-bit
      // kernels at D = 128, whose spills this cuts (faster on every D = 128 mix; at D = 64 the
      // same is slower).
      constexpr bool kVAfterScores = D > 128 || (kWide && D == 128 && (KB == 8 || VB == 8));
      if constexpr (!kVAfterScores) load_v();
      if constexpr (kFull && kPrefetchK && !kPaged) {
        // The warp's next chunk's K rows (S::CH · KROW bytes, a 128-byte line a lane) into L2 while
        // this chunk computes (contiguous caches; rings do without): a few percent faster, part of it
        // (perhaps all) through the register allocation, since the loop runs at the 128-register
        // cap and other forms of this address (from `start`, following the ring, with the V lines
        // too) spill more and run slower. Check ptxas's spills (-Xptxas -v) beside the timing when
        // changing this loop.
        const int64_t next_cs = cs + NW * S::CH;
        const uint8_t* line = p.kp + (head * cap + next_cs) * KROW + 128 * lane;
        if (!p.sliding && lane < kPrefetchLines && start + NW * S::CH + S::CH <= w.t1)
          asm volatile("prefetch.global.L2 [%0];\n" ::"l"(line));
      }
      float sc[S::NSUB][4];
      scores(kw, sc);
      if constexpr (kVAfterScores) load_v();
      float vsc[S::NSUB][2];
      const float inv_u = softmax_step(full_tag, start, sc, ks_bits, vs_bits, vsc);
      accumulate_pv(std::bool_constant<kMulti && !kFull>{}, sc, vsc, vw, inv_u);
    };

    for (; start < w.t1; start += NW * S::CH) {
      const bool full = kPaged ? start >= w.lo && start + S::CH <= w.t1_all
                               : start + S::CH <= w.t1 && (!p.sliding || start_slot + S::CH <= cap);
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
      M = max_nan(M, mk[k]);
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
      if (p.lse && lane == 0) p.lse[col_row(r) * p.q_heads + col_head(r)] = lse_of(M, L);
      warp_store_row<D>(p, col_row(r), col_head(r), v, L, vsg);
    } else {
      // This slice's partial; dims lane + 32j at lane·(D/32) + j (one vector store a lane).
      const int64_t row = part_row(r) * p.splits + w.split;
      store_vec<D / 32>(p.part_o + row * D + lane * (D / 32), v);
      if (lane == 0) *reinterpret_cast<float2*>(p.part_ml + 2 * row) = make_float2(M, L);
    }
  }
  if (p.splits == 1) return;
  // The last block of this (sequence, K/V head, head tile) to finish merges every slice's partial
  // (no second kernel, whose launch and latency are a sizeable part of a short call). The arrival counter lives in the workspace; the block that sees
  // splits − 1 earlier arrivals sets it back to zero, so the next call (or a CUDA-graph replay)
  // finds it zero with no memset. Fences as cooperative groups' grid barrier: the block's partials
  // are published by the barrier and one release fence before the atomic; the acquire fence after
  // it orders the merging block's reads (which go to L2: __ldcg).
  __syncthreads();
  bool last = false;
  if (threadIdx.x == 0) {
    unsigned* counter = p.counters + (static_cast<int64_t>(w.b) * gridDim.y + blockIdx.y);
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
    merge_slices<D>(p, part_row(r), col_row(r), col_head(r));
  }
}

// ---- host side ------------------------------------------------------------------------------

// The register loop (kernel_decode_f16<D, KB, VB>) or, kWide, the wide-table loop
// (kernel_decode_f16<D, KB, VB, kWideWarps, true>: 2 blocks per SM, each with the 64 KB table; ~69 KB
// of shared memory a block at D = 128).
template <int D, int KB, int VB, bool kWide, bool kPaged, bool kMulti = false>
Launch f16_launch() {
  if constexpr (kWide) {
    constexpr int kBytes = F16Smem<D, KB, VB, kWideWarps, true>::kBytes;
    // The choice's automatic slices are whole rounds of this kernel's warps' chunks.
    static_assert(attention::backend::wide_round_tokens(D) == kWideWarps * F16Shape<D, KB, VB>::CH);
    return {kernel_decode_f16<D, KB, VB, kWideWarps, true, kPaged, kMulti>, kBytes, kBytes, kWideWarps * 32,
            kWideMinBlocks};
  } else {
    constexpr int kBytes = F16Smem<D, KB, VB, kWarps>::kBytes;
    return {kernel_decode_f16<D, KB, VB, kWarps, false, kPaged, kMulti>, kBytes, kBytes};
  }
}

template <int D, bool kWide = false, bool kPaged = false, bool kMulti = false>
Launch f16_launch_bits(int kb, int vb) {
  if (kb == 4)
    return vb == 4 ? f16_launch<D, 4, 4, kWide, kPaged, kMulti>() : f16_launch<D, 4, 8, kWide, kPaged, kMulti>();
  return vb == 4 ? f16_launch<D, 8, 4, kWide, kPaged, kMulti>() : f16_launch<D, 8, 8, kWide, kPaged, kMulti>();
}

}  // namespace
}  // namespace frugal::cuda::decode
