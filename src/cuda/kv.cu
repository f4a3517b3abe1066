// CUDA backend of the KV cache: two fused quantize-append kernels (load, signs, FWHT, norm,
// codebook lookup, packing and the store in one pass over x, one launch for every vector of the
// call), dequantize, and the f32 Hadamard transform.
//
// Which kernel serves a call:
// - takes_mma(): calls of 16K+ f16/bf16 vectors at D = 64, 128 or 256 (4 or 8 bits, the L2 scale)
//   go to kernel_append_mma, the transform on tensor cores (2026-11-30-kv-append-mma.md). Same
//   scales as src/cpu/kv.cpp; codes equal except within ~1e-6 of a boundary.
// - Every other call takes the shuffle kernel, bit-exact with src/cpu/kv.cpp (see kv.cuh).
//   head_dim 64..512 at 4 or 8 bits have instantiations with the group width and chunk count
//   fixed at compile time (fully unrolled). Every other case (D = 4..32 and 1024..4096, bits 2
//   and 3) goes to one generic kernel per dtype with one chunk per lane and the group width and
//   bits at run time. launch_fast_bits() picks, per head dim and width, the variant measured
//   fastest on the H200 (bench/results/2026-11-29-kv-append-r3.md): 33 fast instantiations + 6
//   generic.
#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <type_traits>
#include <vector>

#include "core/kv_backend.h"
#include "cuda/common.cuh"
#include "cuda/kv.cuh"

namespace frugal::cuda {

namespace {

using namespace kvdev;
using kv::backend::AppendArgs;
using kv::backend::DequantizeArgs;
using kv::backend::kInlineStarts;

// ---- shared memory ------------------------------------------------------------------------
__device__ __forceinline__ unsigned char* dynamic_smem() {
  extern __shared__ __align__(16) unsigned char smem_bytes[];
  return smem_bytes;
}

// Byte offsets into the dynamic shared memory of one block; computed the same way on both sides.
struct SmemLayout {
  int table = 0, bounds = 0, centroids = 0, red = 0, xbuf = 0, stage = 0, total = 0;
};

__host__ __device__ inline int align_up(int x, int a) { return (x + a - 1) / a * a; }

// `wide`: the group spans several warps, so the transform and the sums go through shared memory.
// `stage_bytes`: per thread, the append's input tiles in flight (staged variant), else 0.
__host__ __device__ inline SmemLayout smem_layout(int cells, int bits, int nthreads, int elems, bool wide,
                                                  int stage_bytes = 0) {
  SmemLayout s;
  int at = 0;
  s.table = at;
  at += cells * static_cast<int>(sizeof(TableEntry));
  s.bounds = at;
  at = align_up(at + ((1 << bits) - 1) * 4, 16);
  s.centroids = at;
  at = align_up(at + (1 << bits) * 4, 16);
  s.red = at;
  if (wide) at = align_up(at + (nthreads / 32) * 3 * 8, 16);
  s.xbuf = at;
  if (wide) at += nthreads * elems * 4;
  at = align_up(at, 16);
  s.stage = at;
  at += nthreads * stage_bytes;
  s.total = at;
  return s;
}

// ---- the append kernel --------------------------------------------------------------------
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
  float* scales;
  const float* signs;
  const float* centroids;
  const float* boundaries;
  float inv_sqrt_dim;  // float(1/√D), as the CPU multiplies
  double sqrt_dim;
  TableGeometry geo;
  float magic;            // round_magic(geo.half)
  uint32_t magic_x8;      // 8·kRoundMagicBits (mod 2^32), see table_window()
  const int64_t* starts;  // device [seqs] write positions, or null: first_slot holds them
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
  if (p.starts) {
    const int64_t pos = p.starts[s] + tok;
    slot = p.sliding ? pos % p.capacity : pos;
  } else {
    slot = p.first_slot[s] + tok;
    if (p.sliding && slot >= p.capacity) slot -= p.capacity;
  }
  return (static_cast<int64_t>(s) * p.heads + h) * p.capacity + slot;
}

// One vector per group of g lanes, nthreads / g vectors per block and tile, tiles strided over
// the grid; the next tile's loads are issued before this tile's math. Every thread runs every
// tile (idle groups compute on zeros) so shuffles and barriers see full warps and blocks.
// The fast path (G, BITS fixed) holds 32 elements per lane: fewer shuffle stages, and the
// per-vector work (index math, the f64 square root and division, the stores) spread over more
// elements.
//
// V picks the variant (which case gets which: launch_fast_bits()):
//   1  the next tile is prefetched into registers; the lookup addressed through the shared window
//      (one shift-add per element) and four partial f64 sums for the norm (chains of 8). Round 2's
//      kernel (a generic table pointer, one chain of 32 DFMAs) measured 2–7% slower in round 3
//      (bench/results/2026-11-29-kv-append-r3.md) and is gone.
//   2  1 + the input staged through shared memory by cp.async, kStages − 1 tiles ahead: the
//      loads stay in flight without holding registers, so a block can keep more of them
//      outstanding and the register cap can buy occupancy instead (MIN_BLOCKS).
// Each lane copies (and later reads back) only its own 16-byte pieces, so the staging needs no
// barrier, only cp.async.wait_group.
template <typename T, int V>
constexpr int append_stages() {
  return V == 2 ? (sizeof(T) == 2 ? 3 : 2) : 0;
}

template <typename T, int C, int K, int G, int BITS, int MAX_THREADS, int MIN_BLOCKS, int V>
__global__ void __launch_bounds__(MAX_THREADS, MIN_BLOCKS)
    kernel_quantize_append(const __grid_constant__ AppendParams p) {
  constexpr int E = C * K;
  constexpr bool kStaged = V == 2;
  constexpr int kStages = append_stages<T, V>();
  constexpr int kPieceElems = 16 / static_cast<int>(sizeof(T));  // elements of one 16-byte piece
  constexpr int kPieces = kStaged ? C / kPieceElems : 1;           // pieces of one chunk
  static_assert(!kStaged || (G != 0 && kPieces * kPieceElems == C), "staging is for the fast path");
  constexpr bool kWindow = G != 0;  // the fast path's tables never clamp
  const int g = G ? G : p.g;
  const int bits = BITS ? BITS : p.bits;
  const int dim = G ? C * K * G : p.dim;  // compile-time in the fast path: shifts, not multiplies
  const int nb = (1 << bits) - 1;
  const int tid = threadIdx.x, nthreads = blockDim.x;
  const int t = tid & (g - 1), group = tid / g, vpb = nthreads / g;
  const int64_t tiles = (p.total + vpb - 1) / vpb;

  const SmemLayout lay = smem_layout(p.geo.cells(), bits, nthreads, E, g > 32, kStages * E * sizeof(T));
  unsigned char* smem = dynamic_smem();
  auto* table = reinterpret_cast<TableEntry*>(smem + lay.table);
  auto* bounds = reinterpret_cast<float*>(smem + lay.bounds);
  auto* cents = reinterpret_cast<float*>(smem + lay.centroids);
  auto* red = reinterpret_cast<double*>(smem + lay.red);
  auto* xbuf = reinterpret_cast<float*>(smem + lay.xbuf);
  // Piece (stage, k, j) of this thread: consecutive threads on consecutive 16 bytes.
  auto* stage_buf = reinterpret_cast<uint4*>(smem + lay.stage);
  auto piece = [&](int st, int k, int j) -> uint4* { return stage_buf + ((st * K + k) * kPieces + j) * nthreads + tid; };

  // Register variant: loads this lane's chunks of vector v into `raw` (zeros for a vector past
  // the end) and finds the row it goes to.
  RawChunk<T, C> raw[kStaged ? 1 : K];
  int64_t next_row = 0;
  auto fetch = [&](int64_t v) {
    if (v >= p.total) {
#pragma unroll
      for (int k = 0; k < K; ++k) raw[k].zero();
      return;
    }
    int s, h;
    int64_t tok;
    locate_vector(p, v, s, tok, h);
    const T* src =
        static_cast<const T*>(p.x) + (p.dense ? v * dim : s * p.stride_seq + tok * p.stride_tok + h * p.stride_head);
#pragma unroll
    for (int k = 0; k < K; ++k) raw[k].load(src + (k * g + t) * C, p.aligned);
    next_row = cache_row(p, s, tok, h);
  };
  // Staged variant: copies this lane's pieces of vector v into stage `st` (zeros past the end)
  // and commits them as one group (an empty group past the end keeps the count per tile).
  auto fetch_async = [&](int64_t v, int st) {
    if (v < p.total) {
      const T* src;
      if (p.dense) {
        src = static_cast<const T*>(p.x) + v * dim;
      } else {
        int s, h;
        int64_t tok;
        locate_vector(p, v, s, tok, h);
        src = static_cast<const T*>(p.x) + s * p.stride_seq + tok * p.stride_tok + h * p.stride_head;
      }
#pragma unroll
      for (int k = 0; k < K; ++k)
#pragma unroll
        for (int j = 0; j < kPieces; ++j) {
          const T* from = src + (k * g + t) * C + j * kPieceElems;
          if (p.aligned) {
            cp_async16(piece(st, k, j), from, 16);
          } else {
            uint4 q;
            T* e = reinterpret_cast<T*>(&q);
#pragma unroll
            for (int i = 0; i < kPieceElems; ++i) e[i] = from[i];
            *piece(st, k, j) = q;
          }
        }
    } else {
#pragma unroll
      for (int k = 0; k < K; ++k)
#pragma unroll
        for (int j = 0; j < kPieces; ++j) cp_async16(piece(st, k, j), p.x, 0);
    }
    cp_async_commit();
  };
  // The first tiles' loads go out before the prologue, so their latency overlaps it (what a
  // one-token decode launch waits for).
  if constexpr (kStaged) {
#pragma unroll
    for (int st = 0; st + 1 < kStages; ++st)
      fetch_async((static_cast<int64_t>(blockIdx.x) + static_cast<int64_t>(st) * gridDim.x) * vpb + group, st);
  } else {
    fetch(static_cast<int64_t>(blockIdx.x) * vpb + group);
  }

  for (int i = tid; i < nb; i += nthreads) bounds[i] = p.boundaries[i];
  if (p.least_squares)
    for (int i = tid; i <= nb; i += nthreads) cents[i] = p.centroids[i];
  uint32_t sign_mask = 0;  // bit k·C + e: the sign of this lane's element is −1
  if (p.signs)
#pragma unroll
    for (int k = 0; k < K; ++k)
#pragma unroll
      for (int e = 0; e < C; ++e)
        if (p.signs[(k * g + t) * C + e] < 0.0f) sign_mask |= 1u << (k * C + e);
  __syncthreads();
  build_table(table, bounds, nb, p.geo, tid, nthreads);
  __syncthreads();
  const uint32_t table_adj = table_window(table, p.magic_x8);

  const int row_bytes = dim * bits / 8, chunk_bytes = C * bits / 8;
  const bool clamp = G ? false : p.geo.clamp;  // the fast path's tables cover every reachable u
  int st = 0;                                  // the stage holding this tile (staged variant)
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t v = tile * vpb + group;
    const bool active = v < p.total;
    float x[E];
    int64_t row = 0;
    if constexpr (kStaged) {
      // Refill the stage the previous tile was read from (its values are in registers already),
      // then wait for this tile's group: kStages − 1 groups stay in flight.
      fetch_async(v + static_cast<int64_t>(kStages - 1) * gridDim.x * vpb, st == 0 ? kStages - 1 : st - 1);
      cp_async_wait<kStages - 1>();
#pragma unroll
      for (int k = 0; k < K; ++k)
#pragma unroll
        for (int j = 0; j < kPieces; ++j) {
          const uint4 q = *piece(st, k, j);
          const T* e = reinterpret_cast<const T*>(&q);
#pragma unroll
          for (int i = 0; i < kPieceElems; ++i) x[k * C + j * kPieceElems + i] = to_f32(e[i]);
        }
      st = st + 1 == kStages ? 0 : st + 1;
      if (active) {
        int s, h;
        int64_t tok;
        locate_vector(p, v, s, tok, h);
        row = cache_row(p, s, tok, h);
      }
    } else {
      row = next_row;
#pragma unroll
      for (int k = 0; k < K; ++k)
#pragma unroll
        for (int e = 0; e < C; ++e) x[k * C + e] = raw[k].get(e);
      fetch((tile + gridDim.x) * vpb + group);
    }
    if (p.signs)
#pragma unroll
      for (int q = 0; q < E; ++q) x[q] = apply_sign(x[q], sign_mask, q);

    // ‖x‖² in f64 (each product of two floats is exact in a double), = ‖y‖² (kv::backend::kMaxNorm).
    // The summation order is free: the CPU sums in another order anyway, and the f64 total is
    // rounded to f32 (the scale) or used through f32 (k) only.
    constexpr int kParts = E % 4 == 0 ? 4 : 1;
    double part[kParts];
#pragma unroll
    for (int i = 0; i < kParts; ++i) part[i] = 0.0;
#pragma unroll
    for (int q = 0; q < E; ++q)
      part[q % kParts] = fma(static_cast<double>(x[q]), static_cast<double>(x[q]), part[q % kParts]);
    double ss[1];
    if constexpr (kParts == 4)
      ss[0] = (part[0] + part[1]) + (part[2] + part[3]);
    else
      ss[0] = part[0];
    group_sum<1>(ss, g, tid, red);

    // y = FWHT(x)/√D in f32.
    fwht<C, K>(x, g, t, xbuf, tid, nthreads);
#pragma unroll
    for (int q = 0; q < E; ++q) x[q] = __fmul_rn(x[q], p.inv_sqrt_dim);
    const double n = sqrt(ss[0]);
    const bool finite = n <= kv::backend::kMaxNorm, zero = n <= 1e-10;
    // k = 0 sends every coordinate of a zero vector to the code of u = 0, as the CPU does.
    const float kscale = finite && !zero ? static_cast<float>(p.sqrt_dim / n) : 0.0f;
    // A non-finite vector is stored as codes 0 and a NaN scale; zeroing y keeps u finite below.
    if (!finite)
#pragma unroll
      for (int q = 0; q < E; ++q) x[q] = 0.0f;
    CodeWord word[K];
#pragma unroll
    for (int k = 0; k < K; ++k)
#pragma unroll
      for (int e = 0; e < C; ++e) {
        const float u = __fmul_rn(x[k * C + e], kscale);
        const unsigned code = kWindow ? lookup_code_window(table_adj, p.geo.inv_w, p.magic, u)
                                      : lookup_code(table, p.geo.inv_w, p.magic, p.geo.cells(), clamp, u);
        word[k].put(code, e * bits);
      }

    float scale = static_cast<float>(n);
    if (p.least_squares) {  // √D·⟨y,c⟩/⟨c,c⟩
      const unsigned mask = (1u << bits) - 1u;
      double acc[2] = {0.0, 0.0};
#pragma unroll
      for (int k = 0; k < K; ++k)
#pragma unroll
        for (int e = 0; e < C; ++e) {
          const double c = cents[word[k].get(e * bits, mask)];
          acc[0] = fma(static_cast<double>(x[k * C + e]), c, acc[0]);
          acc[1] = fma(c, c, acc[1]);
        }
      group_sum<2>(acc, g, tid, red);
      scale = acc[1] > 0 ? static_cast<float>(p.sqrt_dim * acc[0] / acc[1]) : 0.0f;
    }
    if (zero) scale = 0.0f;
    if (!finite) scale = __int_as_float(0x7fc00000);

    if (active) {
      uint8_t* dst = p.packed + row * row_bytes;
#pragma unroll
      for (int k = 0; k < K; ++k) store_codes<C>(dst + (k * g + t) * chunk_bytes, bits, finite ? word[k] : CodeWord{});
      if (t == 0) p.scales[row] = scale;
    }
  }
  if constexpr (kStaged) cp_async_wait<0>();  // no copy outlives the block
}

// ---- the append kernel with the transform on tensor cores ---------------------------------
// D = 64, 128 or 256 (in segments of S = min(D, 128): a 256-element vector's halves are two mma
// rows, one more butterfly between them; B carries the first half's random signs, and the second
// half's inputs are sign-flipped where its signs differ), AP = S/32, f16 or bf16 input, the
// original scale rule. Within a segment, with
// i = a0 + 2a' + 2AP·b (a0 < 2, a' < AP, b < 16) and j = c0 + 2c' + 2AP·d alike,
// H_S[i][j] = H2[a0][c0]·H_AP[a'][c']·H16[b][d], so
//   Z[a'][c0, d] = Σ_{a0, b} s_i·x_i·H2[a0][c0]·H16[b][d]   two mma.m16n8k16 (k-steps) per a' and
//                                                         n-tile: rows = 16 segments, k = (a0, b),
//                                                         n = (c0, d); B holds the ±1 with the
//                                                         random signs folded in (exact in f16 /
//                                                         bf16; products of the inputs exact in f32)
//   y[j] = Σ_a' H_AP[a'][c']·Z[a'][c0, d]                log2(AP) butterfly stages in f32
//                                                         registers: a lane's C fragments hold
//                                                         every a'.
// The k and n orders are permuted so that lane (g, q) multiplies the 8AP contiguous elements
// from 8AP·q of rows g and g+8 and ends with the codes of the same elements (8 to 32 bytes of a
// packed row, stored whole): k = 2q + a0 ↔ b = 4q + 2ks and k = 2q + 8 + a0 ↔ b = 4q + 2ks + 1,
// so each A register is a word of the staged input as it is (elements a0 = 0, 1 of 2a' + 2AP·b);
// column n of n-tile nt ↔ c0 = nt/2, d = 4(n/2) + 2(nt & 1) + (n & 1). Without random signs B does
// not depend on a' and its 8 fragments stay in registers; with them, 8AP come from shared memory.
// Loads are 16-byte cp.async copies of each warp's tile of 16 vectors into its own stage (chunk c
// of row r at c ^ 2·(c ≥ 8) ^ (r & 1): the copies' and the reads' 8-lane phases hit 8 distinct
// bank groups), one tile ahead (a second tile ahead measured no faster); no block barrier after
// the prologue. The lookup works on the transform directly: cell = rint(z·M), M = inv_w/scale,
// and the boundary test bnd·inv_w − z·M in one fma (the table holds the boundaries times inv_w,
// exact for a power of two). History and measurements: bench/results/2026-11-30-kv-append-mma.md.
//
// The mma accumulates in f32 in its own order, so y is not the CPU's y bit for bit: codes may
// differ where u lies within ~1e-6 of a boundary (what the tests allow). The norm (from x, in
// f64, kv::backend::kMaxNorm) and with it the scale are the CPU's.
namespace mmapath {
constexpr int kWarps = 8;  // two blocks per SM: 16 warps of ≤ 128 registers (10 warps of 96 measured 2.5% slower)
constexpr int kStages = 2;  // the tile being read and the next one in flight

// The mma rows are segments of min(D, 128) elements: a vector of D = 256 is two rows (its halves,
// rows g and g + 8 of the mma, one more butterfly stage between them), so a tile holds 16 rows.
template <int D>
constexpr int segment() {
  return D < 128 ? D : 128;
}
// Vectors of a tile: 16 at D ≤ 128, 8 at D = 256.
template <int D>
constexpr int tile_vectors() {
  return 16 * segment<D>() / D;
}
template <int D>
constexpr int tile_bytes() {
  return 16 * 2 * segment<D>();
}
// B fragments: a' (segment/32 of them) × 2 k-steps × 4 n-tiles.
template <int D>
constexpr int b_fragments() {
  return segment<D>() / 32 * 8;
}
// Byte offset of 16-byte chunk c of staged row r (the input's order: a 256-element vector's halves
// are rows 2v and 2v + 1). The XORs put the 8-lane phases of both the copies (a row's consecutive
// chunks) and the reads (chunks AP·q + k of vectors g, g + 1) on 8 distinct bank groups.
template <int D>
__device__ __forceinline__ int stage_offset(int r, int c) {
  constexpr int S = segment<D>();
  const int parity = D == 256 ? (r >> 1) & 1 : r & 1;
  return r * 2 * S + 16 * (c ^ parity ^ (S == 128 ? (c >> 3) << 1 : 0));
}


// ±1 as the bits of a T.
template <typename T>
__host__ __device__ constexpr uint32_t unit_bits(bool negative) {
  if constexpr (std::is_same_v<T, __half>)
    return negative ? 0xBC00u : 0x3C00u;
  else
    return negative ? 0xBF80u : 0x3F80u;
}

// Adds the squares of the two T in w to s0 and s1, in f64 (exact squares).
template <typename T>
__device__ __forceinline__ void add_squares(uint32_t w, double& s0, double& s1) {
  double lo, hi;
  if constexpr (std::is_same_v<T, __half>) {
    asm("{.reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.f64.f16 %0, l;\n cvt.f64.f16 %1, h;\n}"
        : "=d"(lo), "=d"(hi)
        : "r"(w));
  } else {
    lo = static_cast<double>(__uint_as_float(w << 16));
    hi = static_cast<double>(__uint_as_float(w & 0xffff0000u));
  }
  s0 = fma(lo, lo, s0);
  s1 = fma(hi, hi, s1);
}

__device__ __forceinline__ uint4 lds128(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
  return v;
}

// D = 256 with random signs: per lane, the sign flips that turn the first half's signs (folded
// into B, which both halves share) into the second half's, as XOR masks of its 16 input words.
template <int D>
constexpr int half_mask_bytes() {
  return D == 256 ? 32 * 64 : 0;
}

struct Layout {
  int table, bounds, btab, hmask, stage, total;
};
template <int D>
__host__ __device__ inline Layout layout(int cells, int bits) {
  Layout l;
  l.table = 0;
  l.bounds = align_up(cells * static_cast<int>(sizeof(TableEntry)), 16);
  l.btab = align_up(l.bounds + ((1 << bits) - 1) * 4, 16);
  l.hmask = l.btab + b_fragments<D>() * 32 * 8;
  l.stage = l.hmask + half_mask_bytes<D>();
  l.total = l.stage + kWarps * kStages * tile_bytes<D>();
  return l;
}
}  // namespace mmapath

template <typename T, int D, int BITS, bool kSigns>
__global__ void __launch_bounds__(mmapath::kWarps * 32, 2) kernel_append_mma(const __grid_constant__ AppendParams p) {
  using namespace mmapath;
  constexpr int S = segment<D>();                // elements of an mma row
  constexpr int kRowsPerVec = D / S;              // 1, or 2 at D = 256 (rows g and g + 8)
  constexpr int kVecs = tile_vectors<D>();
  constexpr int AP = S / 32;                      // a' values: elements per lane and row = 8·AP
  constexpr int kChunks = S / 8;                  // 16-byte chunks of a staged row
  constexpr int kTileBytes = tile_bytes<D>();
  constexpr int kRowCodeBytes = D * BITS / 8;     // a packed vector
  constexpr int kWords = AP * BITS / 4;           // 32-bit words of a lane's 8·AP codes of a row
  constexpr int nb = (1 << BITS) - 1;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, q = lane & 3;
  const Layout lay = layout<D>(p.geo.cells(), BITS);
  unsigned char* smem = dynamic_smem();
  auto* table = reinterpret_cast<TableEntry*>(smem + lay.table);
  auto* bounds = reinterpret_cast<float*>(smem + lay.bounds);
  auto* btab = reinterpret_cast<uint2*>(smem + lay.btab);
  auto* hmask = reinterpret_cast<uint4*>(smem + lay.hmask);
  unsigned char* stages = smem + lay.stage + warp * kStages * kTileBytes;

  const int64_t tiles = (p.total + kVecs - 1) / kVecs;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kWarps + warp, stride = static_cast<int64_t>(gridDim.x) * kWarps;

  // Copies tile `tile` (kVecs vectors, 16 staged rows) into stage st: lane l takes chunk
  // l % kChunks of rows (32/kChunks)·i + l/kChunks (a warp instruction copies whole rows), zeros
  // past the end; one commit group. Lane r finds vector kVecs·tile + r % kVecs: its source, which
  // the other lanes get by shuffle, and its cache row (-1 past the end), returned.
  constexpr int kRowsPerCopy = 32 / kChunks;
  const int chunk = lane % kChunks, row0 = lane / kChunks;
  auto fetch = [&](int64_t tile, int st) -> int64_t {
    int64_t fetched_row = -1;
    const int64_t v = tile * kVecs + lane % kVecs;
    const T* mine = nullptr;
    if (tile < tiles && v < p.total) {
      int s, h;
      int64_t tok;
      locate_vector(p, v, s, tok, h);
      mine = static_cast<const T*>(p.x) + (p.dense ? v * D : s * p.stride_seq + tok * p.stride_tok + h * p.stride_head);
      fetched_row = cache_row(p, s, tok, h);
    }
    unsigned char* stage = stages + st * kTileBytes;
    if (p.dense && (tile + 1) * kVecs <= p.total) {  // a whole tile of contiguous vectors from one base
      const T* base = static_cast<const T*>(p.x) + tile * kVecs * D + row0 * S + chunk * 8;
#pragma unroll
      for (int i = 0; i < 16 / kRowsPerCopy; ++i)
        cp_async16(stage + stage_offset<D>(kRowsPerCopy * i + row0, chunk), base + kRowsPerCopy * i * S, 16);
    } else {
#pragma unroll
      for (int i = 0; i < 16 / kRowsPerCopy; ++i) {
        const int row = kRowsPerCopy * i + row0;
        const T* src = reinterpret_cast<const T*>(
            __shfl_sync(kFullMask, reinterpret_cast<unsigned long long>(mine), row / kRowsPerVec));
        src = src ? src + (row % kRowsPerVec) * S + chunk * 8 : nullptr;
        cp_async16(stage + stage_offset<D>(row, chunk), src ? src : p.x, src ? 16 : 0);
      }
    }
    cp_async_commit();
    return fetched_row;
  };
  int64_t rowq[kStages - 1];  // this lane's row of each tile in flight, oldest first
#pragma unroll
  for (int k = 0; k + 1 < kStages; ++k) rowq[k] = fetch(first + k * stride, k);

  // Prologue: boundaries, the lookup table and the B fragments (AP a' × 2 k-steps × 4 n-tiles ×
  // 32 lanes): B[k][n] = s[a0 + 2a' + 2AP·b]·H2[a0][c0]·H16[b][d], k = 2q + a0 ↔ b = 4q + 2ks and
  // k = 2q + 8 + a0 ↔ b = 4q + 2ks + 1; column n of n-tile nt ↔ c0 = nt/2, d = 4(n/2) + 2(nt & 1) + (n & 1).
  for (int i = tid; i < nb; i += blockDim.x) bounds[i] = p.boundaries[i];
  for (int e = tid; e < b_fragments<D>() * 32; e += blockDim.x) {
    const int ap = e >> 8, ks = (e >> 7) & 1, nt = (e >> 5) & 3, l = e & 31, lg = l >> 2, lq = l & 3;
    const int c0 = nt >> 1, d = 4 * (lg >> 1) + 2 * (nt & 1) + (lg & 1);
    uint32_t half[4];  // (a0, b): (0, b0), (1, b0), (0, b0 + 1), (1, b0 + 1)
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const int a0 = kk & 1, b = 4 * lq + 2 * ks + (kk >> 1);
      const bool neg = ((__popc(b & d) + (a0 & c0)) & 1) != (p.signs && p.signs[a0 + 2 * ap + 2 * AP * b] < 0.0f);
      half[kk] = unit_bits<T>(neg);
    }
    btab[e] = make_uint2(half[0] | half[1] << 16, half[2] | half[3] << 16);
  }
  if constexpr (kRowsPerVec == 2 && kSigns)  // word w = j·AP + a' of lane l: elements 2a' + 8(4q + j) + (0, 1)
    for (int e = tid; e < 32 * 16; e += blockDim.x) {
      const int l = e >> 4, w = e & 15, i = 2 * (w % AP) + 2 * AP * (4 * (l & 3) + w / AP);
      const uint32_t m =
          (p.signs[i] != p.signs[i + 128] ? 0x8000u : 0u) | (p.signs[i + 1] != p.signs[i + 129] ? 0x80000000u : 0u);
      reinterpret_cast<uint32_t*>(hmask)[e] = m;
    }
  __syncthreads();
  build_table(table, bounds, nb, p.geo, tid, blockDim.x, p.geo.inv_w);
  __syncthreads();
  const uint32_t table_adj = table_window(table, p.magic_x8);
  const uint32_t stage_base = static_cast<uint32_t>(__cvta_generic_to_shared(stages));
  // Without random signs B does not depend on a': its 8 fragments stay in registers.
  uint2 bfix[2][4];
  if constexpr (!kSigns)
#pragma unroll
    for (int ks = 0; ks < 2; ++ks)
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) bfix[ks][nt] = btab[(ks * 4 + nt) * 32 + lane];

  int st = 0;
  for (int64_t tile = first; tile < tiles; tile += stride) {
    // This tile's rows g and g + 8 (from its fetch), then the next tile's fetch.
    const int64_t row_lo = __shfl_sync(kFullMask, rowq[0], g),
                  row_hi = __shfl_sync(kFullMask, rowq[0], (g + 8) % kVecs);
#pragma unroll
    for (int k = 0; k + 2 < kStages; ++k) rowq[k] = rowq[k + 1];
    rowq[kStages - 2] = fetch(tile + (kStages - 1) * stride, st == 0 ? kStages - 1 : st - 1);
    cp_async_wait<kStages - 1>();
    __syncwarp();
    // Rows g and g + 8 (the halves of vector g at D = 256), elements 8AP·q .. 8AP·q + 8AP − 1 of
    // the row as 4AP words: word j·AP + a' holds elements (a0 = 0, 1) + 2a' + 2AP·(4q + j).
    uint4 P[2][AP];
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int k = 0; k < AP; ++k)
        P[h][k] = lds128(stage_base + st * kTileBytes +
                         stage_offset<D>(kRowsPerVec == 2 ? 2 * g + h : g + 8 * h, AP * q + k));
    __syncwarp();  // every lane has read the stage before any lane refills it
    st = st + 1 == kStages ? 0 : st + 1;
    if constexpr (kRowsPerVec == 2 && kSigns)
#pragma unroll
      for (int k = 0; k < AP; ++k) {
        const uint4 f = hmask[lane * 4 + k];
        P[1][k] = make_uint4(P[1][k].x ^ f.x, P[1][k].y ^ f.y, P[1][k].z ^ f.z, P[1][k].w ^ f.w);
      }
    auto pw = [&](int h, int w) -> uint32_t {
      const uint4& v = P[h][w >> 2];
      return (w & 3) == 0 ? v.x : (w & 3) == 1 ? v.y : (w & 3) == 2 ? v.z : v.w;
    };

    // ‖x‖² of both rows in f64: four chains per row, then the quad.
    double ss[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      double s[4] = {0.0, 0.0, 0.0, 0.0};
#pragma unroll
      for (int w = 0; w < 4 * AP; w += 2) {
        add_squares<T>(pw(h, w), s[0], s[1]);
        add_squares<T>(pw(h, w + 1), s[2], s[3]);
      }
      ss[h] = (s[0] + s[1]) + (s[2] + s[3]);
      ss[h] += __shfl_xor_sync(kFullMask, ss[h], 1);
      ss[h] += __shfl_xor_sync(kFullMask, ss[h], 2);
    }
    // Lane q finishes row g + 8(q & 1) (at D = 256 every lane vector g): n, the scale and the
    // multiplier M = inv_w/scale of the lookup (u = FWHT(x)/n, which the CPU forms as
    // (FWHT(x)·f32(1/√D))·f32(√D/n)).
    const double n = sqrt(kRowsPerVec == 2 ? ss[0] + ss[1] : (q & 1) ? ss[1] : ss[0]);
    const bool flag = !(n <= kv::backend::kMaxNorm), zero = n <= 1e-10;
    const float scale = flag ? __int_as_float(0x7fc00000) : zero ? 0.0f : static_cast<float>(n);
    const float mult = flag || zero ? 0.0f : __frcp_rn(scale) * p.geo.inv_w;
    const float mult_other = kRowsPerVec == 2 ? mult : __shfl_xor_sync(kFullMask, mult, 1);
    const bool flag_other = kRowsPerVec == 2 ? flag : __shfl_xor_sync(kFullMask, flag, 1);
    const float m[2] = {(q & 1) ? mult_other : mult, (q & 1) ? mult : mult_other};
    const bool flagged[2] = {(q & 1) ? flag_other : flag, (q & 1) ? flag : flag_other};
    if (__any_sync(kFullMask, flagged[0] || flagged[1])) {  // rare: keep u finite (codes are zeroed below)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        if (flagged[h])
#pragma unroll
          for (int k = 0; k < AP; ++k) P[h][k] = make_uint4(0, 0, 0, 0);
    }

    // Two passes, c0 = 0 and 1. For each a' the mma's A fragments are words of P as they are:
    // k = 2q + a0 (+ 8) at b = 4q + 2ks (+ 1), i.e. words (2ks)·AP + a' and (2ks + 1)·AP + a' of
    // rows g and g + 8.
    uint32_t words[2][kWords];
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int w = 0; w < kWords; ++w) words[h][w] = 0;
#pragma unroll
    for (int c0 = 0; c0 < 2; ++c0) {
      float z[AP][2][4];  // [a'][n-tile 2·c0 + t][c]
#pragma unroll
      for (int ap = 0; ap < AP; ++ap)
#pragma unroll
        for (int t = 0; t < 2; ++t) {
#pragma unroll
          for (int c = 0; c < 4; ++c) z[ap][t][c] = 0.0f;
#pragma unroll
          for (int ks = 0; ks < 2; ++ks) {
            const int w0 = 2 * ks * AP + ap, w1 = (2 * ks + 1) * AP + ap;
            const uint32_t A[4] = {pw(0, w0), pw(1, w0), pw(0, w1), pw(1, w1)};
            const uint2 b = kSigns ? btab[((ap * 2 + ks) * 4 + 2 * c0 + t) * 32 + lane] : bfix[ks][2 * c0 + t];
            mma16816<T>(z[ap][t], A, b.x, b.y);
          }
        }
      // H over a' (butterflies in f32): z[c'][t][c] is then element c0 + 2c' + 2AP·d of row
      // g + 8(c >> 1), d = 4q + 2t + (c & 1): the lane's code 2AP·(2t + (c & 1)) + c0 + 2c'.
      register_stages<AP>([&](int a, int a2) {
#pragma unroll
        for (int t = 0; t < 2; ++t)
#pragma unroll
          for (int c = 0; c < 4; ++c) butterfly(z[a][t][c], z[a2][t][c]);
      });
      // D = 256: H2 over the halves (rows g and g + 8: c and c + 2); c >> 1 is then the output half.
      if constexpr (kRowsPerVec == 2)
#pragma unroll
        for (int ap = 0; ap < AP; ++ap)
#pragma unroll
          for (int t = 0; t < 2; ++t)
#pragma unroll
            for (int c = 0; c < 2; ++c) butterfly(z[ap][t][c], z[ap][t][c + 2]);
#pragma unroll
      for (int t = 0; t < 2; ++t)
#pragma unroll
        for (int c = 0; c < 4; ++c)
#pragma unroll
          for (int cp = 0; cp < AP; ++cp) {
            const unsigned code = lookup_code_scaled(table_adj, p.magic, z[cp][t][c], m[c >> 1]);
            const int bit = (2 * AP * (2 * t + (c & 1)) + c0 + 2 * cp) * BITS;
            words[c >> 1][bit >> 5] += code << (bit & 31);
          }
    }

#pragma unroll
    for (int h = 0; h < 2; ++h) {  // rows g and g + 8, or the halves of vector g
      const int64_t row = h && kRowsPerVec == 1 ? row_hi : row_lo;
      if (row < 0) continue;
      uint8_t* dst = p.packed + row * kRowCodeBytes + (kRowsPerVec == 2 ? h * kRowCodeBytes / 2 : 0) + q * (kWords * 4);
      if constexpr (kWords % 4 == 0) {
#pragma unroll
        for (int w = 0; w < kWords; w += 4)
          reinterpret_cast<uint4*>(dst)[w / 4] =
              flagged[h] ? make_uint4(0, 0, 0, 0) : make_uint4(words[h][w], words[h][w + 1], words[h][w + 2], words[h][w + 3]);
      } else {
        static_assert(kWords == 2, "a lane stores 8, 16 or 32 bytes of a row");
        *reinterpret_cast<uint2*>(dst) = flagged[h] ? make_uint2(0, 0) : make_uint2(words[h][0], words[h][1]);
      }
      if (kRowsPerVec == 1 ? q == h : q == 0 && h == 0) p.scales[row] = scale;
    }
  }
  cp_async_wait<0>();  // no copy outlives the block
}

// ---- dequantize ---------------------------------------------------------------------------
struct DequantParams {
  const uint8_t* packed;
  const float* scales;
  void* out;
  int64_t total;  // count · heads vectors
  int64_t capacity, first_slot;
  int heads, dim, bits, g;
  bool sliding, aligned, small_index;
  FastDiv by_heads;
  const float* signs;
  const float* centroids;
  float inv_sqrt_dim;
};

// ŷ = scale·c[idx]/√D, x̂ = s ⊙ FWHT(ŷ)/√D, in the CPU's order of f32 operations.
template <typename T, int C>
__global__ void __launch_bounds__(512) kernel_dequantize(const __grid_constant__ DequantParams p) {
  const int g = p.g, bits = p.bits;
  const int tid = threadIdx.x, nthreads = blockDim.x;
  const int t = tid & (g - 1), group = tid / g, vpb = nthreads / g;
  const SmemLayout lay = smem_layout(0, bits, nthreads, C, g > 32);
  unsigned char* smem = dynamic_smem();
  auto* cents = reinterpret_cast<float*>(smem + lay.centroids);
  auto* xbuf = reinterpret_cast<float*>(smem + lay.xbuf);
  for (int i = tid; i < (1 << bits); i += nthreads) cents[i] = p.centroids[i];
  uint32_t sign_mask = 0;
  if (p.signs)
#pragma unroll
    for (int e = 0; e < C; ++e)
      if (p.signs[t * C + e] < 0.0f) sign_mask |= 1u << e;
  __syncthreads();

  const int row_bytes = p.dim * bits / 8, chunk_bytes = C * bits / 8;
  const unsigned mask = (1u << bits) - 1u;
  const int64_t tiles = (p.total + vpb - 1) / vpb;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t v = tile * vpb + group;
    const bool active = v < p.total;
    int64_t tok = 0;
    int h = 0;
    if (active) {
      if (p.small_index) {
        const uint32_t vv = static_cast<uint32_t>(v), r = p.by_heads.div(vv);
        tok = r;
        h = static_cast<int>(vv - r * static_cast<uint32_t>(p.heads));
      } else {
        tok = v / p.heads;
        h = static_cast<int>(v - tok * p.heads);
      }
    }
    float y[C];
    if (active) {
      int64_t slot = p.first_slot + tok;
      if (p.sliding && slot >= p.capacity) slot -= p.capacity;
      const int64_t row = static_cast<int64_t>(h) * p.capacity + slot;
      const CodeWord word = load_codes<C>(p.packed + row * row_bytes + t * chunk_bytes, bits);
      const float s = __fmul_rn(p.scales[row], p.inv_sqrt_dim);
#pragma unroll
      for (int e = 0; e < C; ++e) y[e] = __fmul_rn(s, cents[word.get(e * bits, mask)]);
    } else {
#pragma unroll
      for (int e = 0; e < C; ++e) y[e] = 0.0f;
    }
    fwht<C, 1>(y, g, t, xbuf, tid, nthreads);
    if (active) {
#pragma unroll
      for (int e = 0; e < C; ++e) {
        y[e] = __fmul_rn(y[e], p.inv_sqrt_dim);
        if (p.signs) y[e] = apply_sign(y[e], sign_mask, e);
      }
      store_chunk<T, C>(static_cast<T*>(p.out) + v * p.dim + t * C, p.aligned, y);
    }
  }
}

// ---- Hadamard transform of f32 rows -------------------------------------------------------
template <int C>
__global__ void __launch_bounds__(512)
    kernel_hadamard(const float* x, float* out, int64_t rows, int dim, int g, float inv, bool aligned) {
  const int tid = threadIdx.x, nthreads = blockDim.x;
  const int t = tid & (g - 1), group = tid / g, vpb = nthreads / g;
  float* xbuf = reinterpret_cast<float*>(dynamic_smem());
  const int64_t tiles = (rows + vpb - 1) / vpb;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t r = tile * vpb + group;
    const bool active = r < rows;
    float v[C];
    if (active) {
      load_chunk<float, C>(x + r * dim + t * C, aligned, v);
    } else {
#pragma unroll
      for (int e = 0; e < C; ++e) v[e] = 0.0f;
    }
    fwht<C, 1>(v, g, t, xbuf, tid, nthreads);  // every load of the row precedes every store (in place)
#pragma unroll
    for (int e = 0; e < C; ++e) v[e] = __fmul_rn(v[e], inv);
    if (active) store_chunk<float, C>(out + r * dim + t * C, aligned, v);
  }
}

// ---- host side ----------------------------------------------------------------------------

// Cell width: the largest power of two below the smallest gap between boundaries (w = 1/4 at
// 4 bits, 1/64 at 8 bits). The table covers every reachable u, |u| ≤ √D·(1 + 2^-23), when that
// takes at most kMaxCoverCells cells (24 KiB of shared memory: every D at 2-4 bits, D ≤ 512 at
// 8 bits); otherwise it ends one empty cell past the outermost boundary and lookups clamp.
constexpr int kMaxCoverCells = 3072;

TableGeometry table_geometry(int bits, int dim) {
  static std::array<TableGeometry, 9> base;
  static std::array<std::once_flag, 9> once;
  std::call_once(once[bits], [bits] {
    const std::vector<float>& b = kv::lloyd_max_codebook(bits).boundaries;
    double gap = INFINITY, reach = 0;
    for (size_t i = 0; i + 1 < b.size(); ++i) gap = std::min(gap, static_cast<double>(b[i + 1]) - b[i]);
    for (float x : b) reach = std::max(reach, std::fabs(static_cast<double>(x)));
    double w = std::exp2(std::floor(std::log2(std::min(gap, 1.0))));
    if (w >= gap) w *= 0.5;
    TableGeometry g;
    g.w = static_cast<float>(w);
    g.inv_w = static_cast<float>(1.0 / w);
    g.half = static_cast<int>(std::ceil(reach / w + 0.5)) + 1;  // cells ±half hold no boundary
    base[bits] = g;
  });
  TableGeometry g = base[bits];
  const int cover = static_cast<int>(std::ceil(std::sqrt(static_cast<double>(dim)) * (1 + 1e-6) / g.w)) + 1;
  if (2 * std::max(cover, g.half) + 1 <= kMaxCoverCells) {
    g.half = std::max(cover, g.half);
  } else {
    g.clamp = true;
  }
  return g;
}

// A grid of as many blocks as fit on the GPU at once (the kernels stride over their tiles).
// `resident`: the kernel's occupancy at this launch's shape.
int blocks_for(int64_t tiles, int resident, int device) {
  const int64_t all = static_cast<int64_t>(multiprocessor_count(device)) * std::max(resident, 1);
  return static_cast<int>(std::max<int64_t>(1, std::min(tiles, all)));
}

template <typename T, int C, int K, int G, int BITS, int MAX_THREADS, int MIN_BLOCKS, int V>
void launch_append(const AppendParams& p, int device, cudaStream_t stream) {
  const int g = G ? G : p.g;
  const int nthreads = std::max(std::min(MAX_THREADS, 256), g);
  constexpr int stage_bytes = append_stages<T, V>() * C * K * static_cast<int>(sizeof(T));
  const SmemLayout lay = smem_layout(p.geo.cells(), p.bits, nthreads, C * K, g > 32, stage_bytes);
  const int64_t tiles = (p.total + nthreads / g - 1) / (nthreads / g);
  auto* kernel = kernel_quantize_append<T, C, K, G, BITS, MAX_THREADS, MIN_BLOCKS, V>;
  // The staged variant can pass the default 48 KiB of dynamic shared memory.
  const auto* fn = reinterpret_cast<const void*>(kernel);
  allow_dynamic_smem(fn, lay.total);
  const int resident = resident_blocks(fn, nthreads, lay.total);
  kernel<<<blocks_for(tiles, resident, device), nthreads, lay.total, stream>>>(p);
  FRUGAL_CUDA_CHECK_LAUNCH();
}

// 8-bit appends of at least this many vectors take the staged kernel in blocks of 128 (enough to
// fill 132 SMs × 5 blocks × 32 vectors at D = 128); smaller ones (decode) the 256-thread kernel,
// whose one block builds the 1,451-cell table faster.
constexpr int64_t kManyVectors = 16384;

// Head dims 64..512 at 4 or 8 bits: K = 4 chunks of 8 per lane, G = D/32 lanes per vector.
// The kernel per case is the fastest of round 3's A/B on the H200 (prefill, T = 1M × 8 heads,
// bench/results/2026-11-29-kv-append-r3.md):
//   4 bits, D ≤ 128: staged (V = 2), 2 blocks of 256 per SM;
//   4 bits, D ≥ 256: register prefetch (V = 1), the staged kernel measured 1.5–2 % slower there;
//   8 bits, D ≤ 256: staged in 5 blocks of 128 per SM (20 warps; the 8-bit table reads conflict
//     more, ~4.4 shared-memory wavefronts per warp read against ~1.6 at 4 bits, and more warps
//     hide them), V = 1 for small calls;
//   8 bits, D = 512: V = 1 (the 20-warp shape measured 3 % slower).
template <typename T, int K, int G, int BITS>
void launch_fast_bits(const AppendParams& p, int device, cudaStream_t stream) {
  constexpr int D = 8 * K * G;
  if constexpr (BITS == 4) {
    if constexpr (D <= 128)
      launch_append<T, 8, K, G, BITS, 256, 2, 2>(p, device, stream);
    else
      launch_append<T, 8, K, G, BITS, 256, 2, 1>(p, device, stream);
  } else {
    if constexpr (D <= 256)
      if (p.total >= kManyVectors) return launch_append<T, 8, K, G, BITS, 128, 5, 2>(p, device, stream);
    launch_append<T, 8, K, G, BITS, 256, 2, 1>(p, device, stream);
  }
}

// The tensor-core kernel (kernel_append_mma) for one call.
template <typename T, int D, int BITS>
void launch_append_mma(const AppendParams& p, int device, cudaStream_t stream) {
  constexpr int W = mmapath::kWarps;
  const mmapath::Layout lay = mmapath::layout<D>(p.geo.cells(), BITS);
  auto* kernel = kernel_append_mma<T, D, BITS, false>;
  if (p.signs) kernel = kernel_append_mma<T, D, BITS, true>;
  const auto* fn = reinterpret_cast<const void*>(kernel);
  allow_dynamic_smem(fn, lay.total);
  const int resident = resident_blocks(fn, W * 32, lay.total);
  const int64_t tiles = ceil_div<int64_t>(p.total, mmapath::tile_vectors<D>());
  kernel<<<blocks_for(ceil_div<int64_t>(tiles, W), resident, device), W * 32, lay.total, stream>>>(p);
  FRUGAL_CUDA_CHECK_LAUNCH();
}

template <typename T, int D>
void launch_append_mma_d(const AppendParams& p, int device, cudaStream_t stream) {
  if (p.bits == 4)
    launch_append_mma<T, D, 4>(p, device, stream);
  else
    launch_append_mma<T, D, 8>(p, device, stream);
}

// Whether an f16 or bf16 call goes to the tensor-core kernel: D = 64, 128 or 256 at 4 or 8 bits,
// input whose vectors start on 16 bytes, the original scale rule, and
// enough vectors to fill the GPU (a decode step keeps the kernel whose one block builds its table
// fastest). FRUGAL_KV_APPEND_KERNEL = shuffle turns it off (the A/B switch of bench/kv_append.cu
// and the tests).
bool takes_mma(const AppendParams& p, const AppendArgs& a) {
  if ((a.dim != 64 && a.dim != 128 && a.dim != 256) || (a.bits != 4 && a.bits != 8) || p.least_squares ||
      !p.aligned || p.total < kManyVectors)
    return false;
  const char* e = std::getenv("FRUGAL_KV_APPEND_KERNEL");
  return e == nullptr || std::strcmp(e, "shuffle") != 0;
}

template <typename T, int K, int G>
void launch_fast(const AppendParams& p, int device, cudaStream_t stream) {
  if (p.bits == 4)
    launch_fast_bits<T, K, G, 4>(p, device, stream);
  else
    launch_fast_bits<T, K, G, 8>(p, device, stream);
}

}  // namespace

void kv_append(const AppendArgs& a, Stream stream) {
  DeviceGuard guard(a.device);
  const cudaStream_t st = to_cuda(stream);
  AppendParams p{};
  p.x = a.x;
  p.stride_seq = a.x_stride_seq;
  p.stride_tok = a.x_stride_tok;
  p.stride_head = a.x_stride_head;
  p.total = static_cast<int64_t>(a.seqs) * a.tokens * a.heads;
  p.tokens = a.tokens;
  p.capacity = a.capacity;
  p.heads = a.heads;
  p.dim = a.dim;
  p.bits = a.bits;
  p.sliding = a.sliding;
  p.least_squares = a.rule == kv::ScaleRule::least_squares;
  p.small_index = p.total < (int64_t{1} << 31);
  if (p.small_index) {
    p.by_heads = FastDiv::make(static_cast<uint32_t>(a.heads));
    p.by_tokens = FastDiv::make(static_cast<uint32_t>(a.tokens));
  }
  p.packed = a.packed;
  p.scales = a.scales;
  p.signs = a.signs;
  p.centroids = a.centroids;
  p.boundaries = a.boundaries;
  p.inv_sqrt_dim = kv::backend::inv_sqrt_dim(a.dim);
  p.sqrt_dim = std::sqrt(static_cast<double>(a.dim));
  p.geo = table_geometry(a.bits, a.dim);
  p.magic = round_magic(p.geo.half);
  p.magic_x8 = static_cast<uint32_t>(kRoundMagicBits) << 3;
  p.starts = a.starts;
  const int64_t row = static_cast<int64_t>(a.heads) * a.dim;  // elements of one token
  p.dense = a.x_stride_head == a.dim && a.x_stride_tok == row && (a.seqs == 1 || a.x_stride_seq == a.tokens * row);
  if (!a.starts) {
    FRUGAL_CHECK(a.seqs <= kInlineStarts && a.host_starts && a.capacity <= INT32_MAX, internal, "kv::append",
                 "start positions of " << a.seqs << " sequences were not passed");
    for (int s = 0; s < a.seqs; ++s) p.first_slot[s] = a.sliding ? a.host_starts[s] % a.capacity : a.host_starts[s];
  }
  const bool fast = (a.bits == 4 || a.bits == 8) && a.dim >= 64 && a.dim <= 512;  // see launch_fast
  FRUGAL_CHECK(!(fast && p.geo.clamp), internal, "kv::append",
               "the lookup table for " << a.bits << " bits at D = " << a.dim << " does not cover every input");
  const int chunk = a.dim == 4 ? 4 : 8;
  p.g = fast ? 0 : a.dim / chunk;
  dispatch_float(a.x_dtype, "kv::append", [&]<typename T>() {
    // Vector loads need every vector, hence the base and the three strides, on the chunk's alignment.
    const int need = std::min<int>(16, chunk * sizeof(T));
    p.aligned = is_aligned(a.x, need) && (a.x_stride_seq * sizeof(T)) % need == 0 &&
                (a.x_stride_tok * sizeof(T)) % need == 0 && (a.x_stride_head * sizeof(T)) % need == 0;
    if constexpr (!std::is_same_v<T, float>)
      if (takes_mma(p, a))
        return a.dim == 64    ? launch_append_mma_d<T, 64>(p, a.device, st)
               : a.dim == 128 ? launch_append_mma_d<T, 128>(p, a.device, st)
                              : launch_append_mma_d<T, 256>(p, a.device, st);
    if (fast) {
      switch (a.dim) {
        case 64:
          return launch_fast<T, 4, 2>(p, a.device, st);
        case 128:
          return launch_fast<T, 4, 4>(p, a.device, st);
        case 256:
          return launch_fast<T, 4, 8>(p, a.device, st);
        default:
          return launch_fast<T, 4, 16>(p, a.device, st);
      }
    }
    if (a.dim == 4) return launch_append<T, 4, 1, 1, 0, 256, 3, 1>(p, a.device, st);
    launch_append<T, 8, 1, 0, 0, 512, 1, 1>(p, a.device, st);
  });
}

void kv_dequantize(const DequantizeArgs& a, Stream stream) {
  DeviceGuard guard(a.device);
  DequantParams p{};
  p.packed = a.packed;
  p.scales = a.scales;
  p.out = a.out;
  p.total = a.count * a.heads;
  p.capacity = a.capacity;
  p.first_slot = a.sliding ? a.begin % a.capacity : a.begin;
  p.heads = a.heads;
  p.dim = a.dim;
  p.bits = a.bits;
  p.sliding = a.sliding;
  p.small_index = p.total < (int64_t{1} << 31);
  if (p.small_index) p.by_heads = FastDiv::make(static_cast<uint32_t>(a.heads));
  p.signs = a.signs;
  p.centroids = a.centroids;
  p.inv_sqrt_dim = kv::backend::inv_sqrt_dim(a.dim);
  const int chunk = a.dim == 4 ? 4 : 8;
  p.g = a.dim / chunk;
  const int nthreads = std::max(256, p.g);
  const SmemLayout lay = smem_layout(0, a.bits, nthreads, chunk, p.g > 32);
  const int64_t tiles = (p.total + nthreads / p.g - 1) / (nthreads / p.g);
  const int blocks = blocks_for(tiles, 2048 / nthreads, a.device);
  dispatch_float(a.out_dtype, "kv::dequantize", [&]<typename T>() {
    p.aligned = is_aligned(a.out, std::min<int>(16, chunk * sizeof(T)));
    if (chunk == 4)
      kernel_dequantize<T, 4><<<blocks, nthreads, lay.total, to_cuda(stream)>>>(p);
    else
      kernel_dequantize<T, 8><<<blocks, nthreads, lay.total, to_cuda(stream)>>>(p);
    FRUGAL_CUDA_CHECK_LAUNCH();
  });
}

void hadamard_transform(const float* x, float* out, int64_t rows, int dim, int device, Stream stream) {
  DeviceGuard guard(device);
  const int chunk = dim == 4 ? 4 : 8;
  const int g = dim / chunk, nthreads = std::max(256, g);
  const int smem = g > 32 ? nthreads * chunk * 4 : 0;
  const int64_t tiles = (rows + nthreads / g - 1) / (nthreads / g);
  const int blocks = blocks_for(tiles, 2048 / nthreads, device);
  const bool aligned = is_aligned(x, 16) && is_aligned(out, 16);
  if (chunk == 4) {
    kernel_hadamard<4><<<blocks, nthreads, smem, to_cuda(stream)>>>(x, out, rows, dim, g, kv::backend::inv_sqrt_dim(dim), aligned);
  } else {
    kernel_hadamard<8><<<blocks, nthreads, smem, to_cuda(stream)>>>(x, out, rows, dim, g, kv::backend::inv_sqrt_dim(dim), aligned);
  }
  FRUGAL_CUDA_CHECK_LAUNCH();
}

}  // namespace frugal::cuda
