// The quantize-append of the KV cache on a GPU with the transform in warp shuffles (the generic
// and fast variants of kv::AppendChoice): load, signs, FWHT, norm, codebook lookup, packing and the
// store in one pass over x, one launch for every vector of the call, bit-exact with src/cpu/kv.cpp
// (see kv.cuh). Bytes floor: x read once (D·sizeof(T) per vector), the packed row and its scale
// written once (D·bits/8 + the scale's 4 or 2 bytes). Which kernel serves a call is
// kv::choose_append's (src/core/kv_choose.cpp); this file only dispatches the choice to its
// instantiation.
#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <mutex>
#include <type_traits>
#include <vector>

#include "core/kv_backend.h"
#include "cuda/common.cuh"
#include "cuda/kv/append.cuh"
#include "cuda/kv/kv.cuh"

namespace frugal::cuda {

namespace {

using namespace kvdev;
using kv::AppendChoice;
using kv::AppendVariant;
using kv::backend::AppendArgs;
using kv::backend::kInlineStarts;

// ---- the append kernel --------------------------------------------------------------------
// One vector per group of g lanes, nthreads / g vectors per block and tile, tiles strided over
// the grid; the next tile's loads are issued before this tile's math. Every thread runs every
// tile (idle groups compute on zeros) so shuffles and barriers see full warps and blocks.
// The fast path (G, BITS fixed) holds 32 elements per lane: fewer shuffle stages, and the
// per-vector work (index math, the f64 square root and division, the stores) spread over more
// elements.
//
// V picks the shape (which call gets which: kv::append_tile in src/core/kv_choose.cpp):
//   1  the next tile is prefetched into registers; the lookup addressed through the shared window
//      (one shift-add per element) and four partial f64 sums for the norm (chains of 8: a generic
//      table pointer and one chain of 32 DFMAs measured 2–7 % slower).
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
      if (t == 0) store_scale(p.scales, p.scales_f16, row, scale);
    }
  }
  if constexpr (kStaged) cp_async_wait<0>();  // no copy outlives the block
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
    const kv::backend::CellGrid grid = kv::backend::cell_grid(bits);
    TableGeometry g;
    g.w = static_cast<float>(grid.w);
    g.inv_w = static_cast<float>(1.0 / grid.w);
    g.half = grid.half;  // cells ±half hold no boundary
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

// Launches the instantiation <T, C, K, G, BITS, MAX_THREADS, MIN_BLOCKS, V> when `c` names it.
template <typename T, int C, int K, int G, int BITS, int MAX_THREADS, int MIN_BLOCKS, int V>
bool launch_if(const AppendChoice& c, const AppendParams& p, int device, cudaStream_t stream) {
  if (c.chunk != C || c.chunks != K || c.lanes != G || c.max_threads != MAX_THREADS || c.min_blocks != MIN_BLOCKS ||
      c.staged != (V == 2))
    return false;
  launch_append<T, C, K, G, BITS, MAX_THREADS, MIN_BLOCKS, V>(p, device, stream);
  return true;
}

// The fast variant's instantiations per width and head dim (K = 4 chunks of 8 per lane, G = D/32
// lanes): the tiles kv::append_tile gives it (4 bits: staged at D <= 128, else the register
// prefetch; 8 bits: staged in blocks of 128 at D <= 256 for large calls, else the register
// prefetch).
template <typename T, int K, int G, int BITS>
bool launch_fast_bits(const AppendChoice& c, const AppendParams& p, int device, cudaStream_t stream) {
  constexpr int D = 8 * K * G;
  if constexpr (BITS == 4) {
    if constexpr (D <= 128)
      return launch_if<T, 8, K, G, BITS, 256, 2, 2>(c, p, device, stream);
    else
      return launch_if<T, 8, K, G, BITS, 256, 2, 1>(c, p, device, stream);
  } else {
    if constexpr (D <= 256)
      if (launch_if<T, 8, K, G, BITS, 128, 5, 2>(c, p, device, stream)) return true;
    return launch_if<T, 8, K, G, BITS, 256, 2, 1>(c, p, device, stream);
  }
}

template <typename T, int K, int G>
bool launch_fast(const AppendChoice& c, const AppendParams& p, int device, cudaStream_t stream) {
  if (p.bits == 4) return launch_fast_bits<T, K, G, 4>(c, p, device, stream);
  if (p.bits == 8) return launch_fast_bits<T, K, G, 8>(c, p, device, stream);
  return false;
}

// The generic variant's two instantiations: one lane at D = 4 (its G fixed), else chunks of 8 with
// the group width at run time.
template <typename T>
bool launch_generic(const AppendChoice& c, const AppendParams& p, int device, cudaStream_t stream) {
  return launch_if<T, 4, 1, 1, 0, 256, 3, 1>(c, p, device, stream) ||
         launch_if<T, 8, 1, 0, 0, 512, 1, 1>(c, p, device, stream);
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
  p.scales_f16 = a.scales_f16;
  p.signs = a.signs;
  p.centroids = a.centroids;
  p.boundaries = a.boundaries;
  p.inv_sqrt_dim = kv::backend::inv_sqrt_dim(a.dim);
  p.sqrt_dim = std::sqrt(static_cast<double>(a.dim));
  p.geo = table_geometry(a.bits, a.dim);
  p.magic = round_magic(p.geo.half);
  p.magic_x8 = static_cast<uint32_t>(kRoundMagicBits) << 3;
  p.starts = a.starts;
  p.slots = a.slots;
  p.dense = a.dense;
  p.aligned = a.aligned;
  if (!a.starts && !a.slots) {
    FRUGAL_CHECK(a.seqs <= kInlineStarts && a.host_starts && a.capacity <= INT32_MAX, internal, "kv::append",
                 "start positions of " << a.seqs << " sequences were not passed");
    for (int s = 0; s < a.seqs; ++s) p.first_slot[s] = a.sliding ? a.host_starts[s] % a.capacity : a.host_starts[s];
  }
  const AppendChoice& c = a.choice;
  // Kernels with compile-time lanes and the tensor-core kernel look codes up without a clamp:
  // kv::append_refusal limits them to D <= 512 (and the generic one lane to D = 4), where the table
  // covers every reachable u.
  FRUGAL_CHECK(!((c.variant == AppendVariant::mma || c.lanes != 0) && p.geo.clamp), internal, "kv::append",
               "the lookup table for " << a.bits << " bits at D = " << a.dim << " does not cover every input");
  p.g = c.variant == AppendVariant::generic ? a.dim / c.chunk : 0;
  if (c.variant == AppendVariant::mma) return append_mma(p, c, a.x_dtype, a.device, st);
  const bool launched = dispatch_float(a.x_dtype, "kv::append", [&]<typename T>() {
    if (c.variant == AppendVariant::generic) return launch_generic<T>(c, p, a.device, st);
    switch (a.dim) {
      case 64:
        return launch_fast<T, 4, 2>(c, p, a.device, st);
      case 128:
        return launch_fast<T, 4, 4>(c, p, a.device, st);
      case 256:
        return launch_fast<T, 4, 8>(c, p, a.device, st);
      case 512:
        return launch_fast<T, 4, 16>(c, p, a.device, st);
      default:
        return false;
    }
  });
  FRUGAL_CHECK(launched, internal, "kv::append",
               "no kernel is instantiated for " << kv::to_string(c) << " at D = " << a.dim << ", " << a.bits << " bits");
}

}  // namespace frugal::cuda
