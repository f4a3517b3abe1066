// CUDA backend of the sparse conv's backward.
//   dgrad: the forward's kernels over the mirrored, transposed weight Wd[j] = W[K−1−j]ᵀ, written by a
//     small kernel into a stream-ordered workspace (K·Ci·Co elements read and written once).
//   wgrad: grad_weight[k] = Σ_n feats[nbr[k, n]]ᵀ ⊗ grad_out[n], a gather-GEMM reducing over N. Each block
//     owns one chunk of rows × one offset × a 64 × 64 tile of (Ci, Co): it lists the chunk's rows that have
//     a neighbor at the offset (in row order), gathers their neighbors' rows and their grad_out rows into
//     shared memory, multiplies (WMMA 16×16×16 with f32 accumulators for f16/bf16, CUDA cores for f32) and
//     writes its f32 partial tile; a second kernel adds the chunks' partials in chunk order (one chunk: the
//     block writes the gradient itself). No atomics: the bits do not depend on the schedule.
//   grad_bias = Σ_n grad_out[n] over the same chunks.
// Floor: 2·P·Ci·Co FLOPs (P: the map's entries with a neighbor); the blocks read K·N map entries and
// P·(Ci·⌈Co/64⌉ + Co·⌈Ci/64⌉) elements (through L2); the partials add 2·splits·K·Ci·Co floats.
#include <mma.h>

#include <algorithm>
#include <optional>
#include <type_traits>

#include "core/sparse_conv_backend.h"
#include "core/spconv_backward_choose.h"
#include "cuda/common.cuh"
#include "cuda/spconv/tile.cuh"

namespace frugal::cuda {

namespace {

namespace sb = spconv::backend;
using namespace nvcuda;

constexpr int kThreads = 256;            // the elementwise kernels' block
constexpr int64_t kMaxBlocks = 1 << 16;  // grid-stride kernels: enough blocks to fill any GPU

// ---- dgrad's weight -----------------------------------------------------------------------------

// wd[e] = w[mirror_source(e)]: E is the element's bits (the mirror moves elements, it does no arithmetic).
template <typename E>
__global__ void kernel_mirror_weight(const E* __restrict__ w, E* __restrict__ wd, int k, int ci, int co,
                                     int64_t total) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x)
    wd[e] = w[sb::mirror_source(e, k, ci, co)];
}

unsigned grid_for(int64_t total) {
  return static_cast<unsigned>(std::clamp<int64_t>(ceil_div<int64_t>(total, kThreads), 1, kMaxBlocks));
}

// ---- wgrad --------------------------------------------------------------------------------------

struct WgradParams {
  const void* feats;
  const int32_t* nbr;
  const int32_t* order;  // column i of nbr pairs with grad_out row order[i]; nullptr: row i
  const void* grad_out;
  float* partial;  // [splits, k, ci, co] f32, or nullptr: one chunk writes `out` itself
  void* out;       // grad_weight [k, ci, co]
  int64_t n, chunk_rows;
  int k, ci, co, ci_tiles, co_tiles;
  int tile_ci, tile_co;  // the block's tile of [Ci, Co]
};

// The block's offset, channel tiles and rows [row0, row1).
struct WgradBlock {
  int k, ci0, co0;
  int64_t row0, row1;
};
__device__ __forceinline__ WgradBlock wgrad_block(const WgradParams& p) {
  WgradBlock b;
  const int tile = static_cast<int>(blockIdx.x);
  b.k = tile / (p.ci_tiles * p.co_tiles);
  b.ci0 = tile / p.co_tiles % p.ci_tiles * p.tile_ci;
  b.co0 = tile % p.co_tiles * p.tile_co;
  b.row0 = static_cast<int64_t>(blockIdx.y) * p.chunk_rows;
  b.row1 = min(p.n, b.row0 + p.chunk_rows);
  return b;
}

// Rows are taken a window at a time, compacted to those with a neighbor at the block's offset (on a
// sphere shell about a third of them): the products and the grad_out rows of absent neighbors are never
// touched. 1024 rows keep the (row, neighbor) pairs at 8 KiB of shared memory; the mma kernel takes 2048
// (16 KiB) so that its deeper pipeline fills and drains half as often.
constexpr int kWindowRows = 1024, kMmaWindowRows = spconv::kWgradMmaWindowRows;

// The rows of [w0, w1) with a neighbor at offset k (an entry in [0, n)), in row order, as (row, neighbor)
// pairs; returns how many (every thread gets the count). Each thread takes WINDOW / THREADS
// consecutive rows; the warps' counts meet in warp_count. Begins and ends with all threads between the
// barriers the caller and this function place: `pairs` of the previous window must no longer be read.
template <int THREADS, int WINDOW = kWindowRows>
__device__ int compact_rows(const WgradParams& p, int k, int64_t w0, int64_t w1, int2* pairs, int* warp_count) {
  constexpr int PER = WINDOW / THREADS, WARPS = THREADS / 32;
  static_assert(WINDOW % THREADS == 0 && THREADS % 32 == 0, "whole warps, whole windows");
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t first = w0 + static_cast<int64_t>(threadIdx.x) * PER;
  int32_t m[PER], g[PER];  // each pair's neighbor and grad_out row
  int count = 0;
#pragma unroll
  for (int j = 0; j < PER; ++j) {
    int32_t v = -1;
    if (first + j < w1) {
      v = __ldg(&p.nbr[k * p.n + first + j]);
      if (v < 0 || v >= p.n) v = -1;  // the sentinel, or an entry outside the range: absent
      g[j] = static_cast<int32_t>(sb::column_row(p.order, first + j, p.n));
      if (g[j] < 0) v = -1;
    }
    m[j] = v;
    count += v >= 0;
  }
  int inclusive = count;  // a warp's prefix sum of the counts, in lane order
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int t = __shfl_up_sync(0xffffffffu, inclusive, d);
    if (lane >= d) inclusive += t;
  }
  if (lane == 31) warp_count[warp] = inclusive;
  __syncthreads();
  int offset = inclusive - count, total = 0;
#pragma unroll
  for (int w = 0; w < WARPS; ++w) {
    const int t = warp_count[w];
    if (w < warp) offset += t;
    total += t;
  }
#pragma unroll
  for (int j = 0; j < PER; ++j)
    if (m[j] >= 0) pairs[offset++] = make_int2(g[j], m[j]);
  __syncthreads();
  return total;
}

// One element of the block's tile: its partial (chunk blockIdx.y) or, for one chunk, the gradient.
template <typename T>
__device__ __forceinline__ void wgrad_store(const WgradParams& p, const WgradBlock& b, int c, int o, float v) {
  const int64_t e = (static_cast<int64_t>(b.k) * p.ci + b.ci0 + c) * p.co + b.co0 + o;
  if (p.partial)
    p.partial[static_cast<int64_t>(blockIdx.y) * p.k * p.ci * p.co + e] = v;
  else
    static_cast<T*>(p.out)[e] = from_f32<T>(v);
}

// CUDA cores: 256 threads, 4 × 4 outputs each, 16 rows a step.
struct SimtWgradTile {
  static constexpr int BM = spconv::kWgradTile, BN = spconv::kWgradTile, BK = 16, THREADS = 256;
  static_assert(BM * BN == 16 * THREADS, "4 x 4 outputs a thread");
};

template <typename T>
__global__ void __launch_bounds__(SimtWgradTile::THREADS) kernel_wgrad_simt(WgradParams p) {
  constexpr int BM = SimtWgradTile::BM, BN = SimtWgradTile::BN, BK = SimtWgradTile::BK,
                THREADS = SimtWgradTile::THREADS;
  __shared__ float As[BK][BM + 4];  // As[r][c]: channel ci0 + c of row r's neighbor
  __shared__ float Gs[BK][BN + 4];  // Gs[r][o]: channel co0 + o of grad_out row r
  __shared__ int2 pairs[kWindowRows];
  __shared__ int warp_count[THREADS / 32];
  const WgradBlock b = wgrad_block(p);
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const T* feats = static_cast<const T*>(p.feats);
  const T* grad = static_cast<const T*>(p.grad_out);
  float acc[4][4] = {};
  for (int64_t w0 = b.row0; w0 < b.row1; w0 += kWindowRows) {
    const int count = compact_rows<THREADS>(p, b.k, w0, min(b.row1, w0 + kWindowRows), pairs, warp_count);
    for (int q0 = 0; q0 < count; q0 += BK) {
#pragma unroll
      for (int q = 0; q < BK * BM / THREADS; ++q) {
        const int i = tid + q * THREADS, r = i / BM, c = i % BM;
        const bool ok = q0 + r < count && b.ci0 + c < p.ci;
        As[r][c] = ok ? to_f32(feats[static_cast<int64_t>(pairs[q0 + r].y) * p.ci + b.ci0 + c]) : 0.0f;
      }
#pragma unroll
      for (int q = 0; q < BK * BN / THREADS; ++q) {
        const int i = tid + q * THREADS, r = i / BN, o = i % BN;
        const bool ok = q0 + r < count && b.co0 + o < p.co;
        Gs[r][o] = ok ? to_f32(grad[static_cast<int64_t>(pairs[q0 + r].x) * p.co + b.co0 + o]) : 0.0f;
      }
      __syncthreads();
#pragma unroll
      for (int r = 0; r < BK; ++r) {
        float av[4], gv[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) av[i] = As[r][ty + 16 * i];
#pragma unroll
        for (int j = 0; j < 4; ++j) gv[j] = Gs[r][tx + 16 * j];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], gv[j], acc[i][j]);
      }
      __syncthreads();
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int c = ty + 16 * i;
    if (b.ci0 + c >= p.ci) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int o = tx + 16 * j;
      if (b.co0 + o < p.co) wgrad_store<T>(p, b, c, o, acc[i][j]);
    }
  }
}

// Tensor cores (WMMA): 128 threads as 2 × 2 warps of 32 × 32 outputs; 32 rows a stage, 3 stages of
// cp.async (16-byte copies, zero fill for absent neighbors and the edges) where channels are multiples of
// 8 and the bases 16-byte aligned, plain loads otherwise. Rows of the shared tiles are padded by 8
// elements: every fragment pointer stays 32-byte aligned and ldmatrix rows fall in distinct banks.
struct WmmaWgradTile {
  static constexpr int BM = spconv::kWgradTile, BN = spconv::kWgradTile, BK = spconv::kWgradStepRows;
  static constexpr int STAGES = 3, THREADS = 128, WARP_M = 32, WARP_N = 32, FM = 2, FN = 2;
  static constexpr int LDA = BM + 8, LDB = BN + 8;  // elements; 144-byte rows
  static constexpr int EPI_LD = BN + 4;             // the f32 tile staged for the epilogue
  static constexpr size_t A_BYTES = size_t(STAGES) * BK * LDA * 2;
  static constexpr size_t B_BYTES = size_t(STAGES) * BK * LDB * 2;
  static constexpr size_t SMEM = A_BYTES + B_BYTES;
  static_assert(size_t(BM) * EPI_LD * 4 <= SMEM, "the epilogue's staging reuses the stages");
  static_assert(2 * WARP_M == BM && 2 * WARP_N == BN && FM * 16 == WARP_M && FN * 16 == WARP_N, "2 x 2 warps");
  static_assert(BK % 16 == 0 && (BK * LDA * 2) % 32 == 0 && A_BYTES % 128 == 0, "32-byte aligned fragments");
};

// Stage rows [q0, q0 + BK) of the window's pairs: A the neighbors' channels, G grad_out's; zeros past
// `count` and past the channels.
template <typename T, typename Tile, bool kVec>
__device__ __forceinline__ void wgrad_load_stage(const WgradParams& p, const WgradBlock& b, T* As, T* Gs,
                                                 const int2* pairs, int q0, int count) {
  constexpr int BM = Tile::BM, BN = Tile::BN, BK = Tile::BK, LDA = Tile::LDA, LDB = Tile::LDB;
  const T* feats = static_cast<const T*>(p.feats);
  const T* grad = static_cast<const T*>(p.grad_out);
  const int tid = threadIdx.x;
  if constexpr (kVec) {
    for (int i = tid; i < BK * (BM / 8); i += Tile::THREADS) {
      const int r = i / (BM / 8), c = i % (BM / 8) * 8;
      const bool ok = q0 + r < count && b.ci0 + c < p.ci;
      const T* src = ok ? feats + static_cast<int64_t>(pairs[q0 + r].y) * p.ci + b.ci0 + c : feats;
      cp_async16(As + r * LDA + c, src, ok ? 16 : 0);
    }
    for (int i = tid; i < BK * (BN / 8); i += Tile::THREADS) {
      const int r = i / (BN / 8), c = i % (BN / 8) * 8;
      const bool ok = q0 + r < count && b.co0 + c < p.co;
      const T* src = ok ? grad + static_cast<int64_t>(pairs[q0 + r].x) * p.co + b.co0 + c : grad;
      cp_async16(Gs + r * LDB + c, src, ok ? 16 : 0);
    }
  } else {
    const T zero = from_f32<T>(0.0f);
    for (int i = tid; i < BK * BM; i += Tile::THREADS) {
      const int r = i / BM, c = i % BM;
      const bool ok = q0 + r < count && b.ci0 + c < p.ci;
      As[r * LDA + c] = ok ? feats[static_cast<int64_t>(pairs[q0 + r].y) * p.ci + b.ci0 + c] : zero;
    }
    for (int i = tid; i < BK * BN; i += Tile::THREADS) {
      const int r = i / BN, c = i % BN;
      const bool ok = q0 + r < count && b.co0 + c < p.co;
      Gs[r * LDB + c] = ok ? grad[static_cast<int64_t>(pairs[q0 + r].x) * p.co + b.co0 + c] : zero;
    }
  }
}

// Every window of the block's rows through the pipeline: the window's pairs compacted, its steps staged
// (wgrad_load_stage) and multiplied (compute(a_s, g_s): the stage's gathered rows and grad_out rows), the
// pipeline filled and drained per window.
template <typename T, typename Tile, bool kVec, int WINDOW, typename Compute>
__device__ __forceinline__ void wgrad_windows(const WgradParams& p, const WgradBlock& b, T* As, T* Gs, int2* pairs,
                                              int* warp_count, Compute&& compute) {
  constexpr int BK = Tile::BK, STAGES = Tile::STAGES;
  for (int64_t w0 = b.row0; w0 < b.row1; w0 += WINDOW) {
    const int count = compact_rows<Tile::THREADS, WINDOW>(p, b.k, w0, min(b.row1, w0 + WINDOW), pairs, warp_count);
    cp_async_pipeline<STAGES>(
        (count + BK - 1) / BK,
        [&](int s) {
          const int buf = s % STAGES;
          wgrad_load_stage<T, Tile, kVec>(p, b, As + buf * BK * Tile::LDA, Gs + buf * BK * Tile::LDB, pairs, s * BK,
                                          count);
        },
        [&](int s) { compute(As + s % STAGES * BK * Tile::LDA, Gs + s % STAGES * BK * Tile::LDB); });
    cp_async_wait<0>();
    __syncthreads();  // every step computed: the stages and the pairs are free for the next window
  }
}

template <typename T, bool kVec>
__global__ void __launch_bounds__(WmmaWgradTile::THREADS) kernel_wgrad_wmma(WgradParams p) {
  using Tile = WmmaWgradTile;
  constexpr int BM = Tile::BM, BN = Tile::BN, BK = Tile::BK, LDA = Tile::LDA, LDB = Tile::LDB;
  __shared__ __align__(128) unsigned char smem[Tile::SMEM];
  __shared__ int2 pairs[kWindowRows];
  __shared__ int warp_count[Tile::THREADS / 32];
  T* As = reinterpret_cast<T*>(smem);  // As[r][c]: the gathered rows, read as the column-major Aᵀ (c, r)
  T* Gs = reinterpret_cast<T*>(smem + Tile::A_BYTES);
  const WgradBlock b = wgrad_block(p);
  const int warp = threadIdx.x / 32, wm = warp / 2, wn = warp % 2;

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[Tile::FM][Tile::FN];
#pragma unroll
  for (int i = 0; i < Tile::FM; ++i)
#pragma unroll
    for (int j = 0; j < Tile::FN; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

  // A window at a time: its rows with a neighbor, through the pipeline, filled and drained per window.
  wgrad_windows<T, Tile, kVec, kWindowRows>(p, b, As, Gs, pairs, warp_count, [&](const T* a_s, const T* g_s) {
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::col_major> af[Tile::FM];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> gf[Tile::FN];
#pragma unroll
      for (int i = 0; i < Tile::FM; ++i)
        wmma::load_matrix_sync(af[i], a_s + kk * LDA + wm * Tile::WARP_M + i * 16, LDA);
#pragma unroll
      for (int j = 0; j < Tile::FN; ++j)
        wmma::load_matrix_sync(gf[j], g_s + kk * LDB + wn * Tile::WARP_N + j * 16, LDB);
#pragma unroll
      for (int i = 0; i < Tile::FM; ++i)
#pragma unroll
        for (int j = 0; j < Tile::FN; ++j) wmma::mma_sync(acc[i][j], af[i], gf[j], acc[i][j]);
    }
  });
  float* stage = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int i = 0; i < Tile::FM; ++i)
#pragma unroll
    for (int j = 0; j < Tile::FN; ++j)
      wmma::store_matrix_sync(stage + (wm * Tile::WARP_M + i * 16) * Tile::EPI_LD + wn * Tile::WARP_N + j * 16,
                              acc[i][j], Tile::EPI_LD, wmma::mem_row_major);
  __syncthreads();
  for (int i = threadIdx.x; i < BM * BN; i += Tile::THREADS) {
    const int c = i / BN, o = i % BN;
    if (b.ci0 + c < p.ci && b.co0 + o < p.co) wgrad_store<T>(p, b, c, o, stage[c * Tile::EPI_LD + o]);
  }
}

// Tensor cores (mma.sync m16n8k16 through ldmatrix): BM × BN of [Ci, Co] a block, warps of WM × 32 outputs
// (WM = 64 where a side is 128, else 32), 32 rows a stage, 4 stages of cp.async. Both staged operands are
// row-major in the rows (the GEMM's K): A = gathered rowsᵀ comes out of ldmatrix.trans as the row-major
// A fragment, grad_out's rows as the column-major B fragment. Rows padded by 8 elements: the 8 rows of an
// ldmatrix phase fall in distinct 16-byte bank groups. The accumulators go straight from registers to the
// partial (or the gradient): no staging.
template <int BM_, int BN_>
struct MmaWgradTile {
  static constexpr int BM = BM_, BN = BN_, BK = spconv::kWgradStepRows, STAGES = spconv::kWgradMmaStages;
  static constexpr int WM = (BM == 128 || BN == 128) ? 64 : 32, WN = 32;
  static constexpr int WARPS_M = BM / WM, WARPS_N = BN / WN, THREADS = 32 * WARPS_M * WARPS_N;
  static constexpr int MI = WM / 16, NI = WN / 8;  // m16 and n8 tiles a warp
  static constexpr int LDA = BM + 8, LDB = BN + 8;
  static constexpr size_t A_BYTES = size_t(STAGES) * BK * LDA * 2, B_BYTES = size_t(STAGES) * BK * LDB * 2;
  static constexpr size_t PAIR_BYTES = size_t(kMmaWindowRows) * sizeof(int2);
  static constexpr size_t SMEM = A_BYTES + B_BYTES + PAIR_BYTES + 32 * sizeof(int);
  static_assert(BM % WM == 0 && BN % WN == 0 && NI % 2 == 0 && BK % 16 == 0, "whole fragments");
  static_assert(kMmaWindowRows % THREADS == 0, "whole windows");
  static_assert(SMEM == spconv::wgrad_mma_smem_bytes(BM, BN), "the choice's budget of shared memory");
};

template <typename T, typename Tile>
__global__ void __launch_bounds__(Tile::THREADS) kernel_wgrad_mma(WgradParams p) {
  constexpr int BK = Tile::BK, LDA = Tile::LDA, LDB = Tile::LDB, MI = Tile::MI, NI = Tile::NI;
  extern __shared__ __align__(128) unsigned char smem[];
  T* As = reinterpret_cast<T*>(smem);  // As[r][c]: channel ci0 + c of row r's neighbor
  T* Gs = reinterpret_cast<T*>(smem + Tile::A_BYTES);
  int2* pairs = reinterpret_cast<int2*>(smem + Tile::A_BYTES + Tile::B_BYTES);
  int* warp_count = reinterpret_cast<int*>(smem + Tile::A_BYTES + Tile::B_BYTES + Tile::PAIR_BYTES);
  const WgradBlock b = wgrad_block(p);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int wm = warp / Tile::WARPS_N, wn = warp % Tile::WARPS_N;
  float acc[MI][NI][4] = {};

  wgrad_windows<T, Tile, true, kMmaWindowRows>(p, b, As, Gs, pairs, warp_count, [&](const T* a_s, const T* g_s) {
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      // A fragment (ci × rows): matrix j of lanes 8j.. is rows kk + (j / 2)·8, channels + (j % 2)·8.
      uint32_t a[MI][4], g[NI][2];
#pragma unroll
      for (int i = 0; i < MI; ++i)
        spconv_kernels::ldmatrix_x4_trans(
            a[i][0], a[i][1], a[i][2], a[i][3],
            a_s + (kk + (lane >> 4) * 8 + (lane & 7)) * LDA + wm * Tile::WM + i * 16 + ((lane >> 3) & 1) * 8);
        // B fragments (rows × co), two n8 tiles a load: matrix j is rows kk + (j % 2)·8, channels + (j / 2)·8.
#pragma unroll
      for (int j = 0; j < NI; j += 2)
        spconv_kernels::ldmatrix_x4_trans(g[j][0], g[j][1], g[j + 1][0], g[j + 1][1],
                                          g_s + (kk + (lane & 15)) * LDB + wn * Tile::WN + j * 8 + (lane >> 4) * 8);
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j) mma16816<T>(acc[i][j], a[i], g[j][0], g[j][1]);
    }
  });
  // C fragment: rows (ci) lane / 4 and + 8, columns (co) 2 · (lane % 4) and + 1.
  const int64_t chunk = p.partial ? static_cast<int64_t>(blockIdx.y) * p.k * p.ci * p.co : 0;
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int c = b.ci0 + wm * Tile::WM + i * 16 + lane / 4 + h * 8;
        const int o = b.co0 + wn * Tile::WN + j * 8 + (lane % 4) * 2;
        if (c >= p.ci || o >= p.co) continue;  // Co is a multiple of 8: o and o + 1 are both in or both out
        const int64_t e = (static_cast<int64_t>(b.k) * p.ci + c) * p.co + o;
        if (p.partial)
          *reinterpret_cast<float2*>(p.partial + chunk + e) = make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
        else
          store_pair<T>(static_cast<T*>(p.out) + e, acc[i][j][2 * h], acc[i][j][2 * h + 1]);
      }
}

template <typename T, typename Tile>
void launch_wgrad_mma(const WgradParams& p, dim3 grid, cudaStream_t s) {
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel_wgrad_mma<T, Tile>), static_cast<int>(Tile::SMEM));
  kernel_wgrad_mma<T, Tile><<<grid, Tile::THREADS, Tile::SMEM, s>>>(p);
  FRUGAL_CUDA_CHECK_LAUNCH();
}

// ---- grad_bias and the ordered reduction ----------------------------------------------------------

// Block (kBiasCols output channels × kBiasLanes row lanes) over chunk blockIdx.y: each lane sums every
// kBiasLanes-th row of the chunk, then the lanes' sums are added in lane order.
constexpr int kBiasCols = 32, kBiasLanes = 16;

template <typename T>
__global__ void __launch_bounds__(kBiasCols* kBiasLanes)
    kernel_bias_grad(const T* __restrict__ grad, int64_t n, int co, int64_t chunk_rows, float* partial, T* out) {
  __shared__ float lanes[kBiasLanes][kBiasCols + 1];
  const int tx = threadIdx.x % kBiasCols, ty = threadIdx.x / kBiasCols;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kBiasCols + tx;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * chunk_rows, row1 = min(n, row0 + chunk_rows);
  float s = 0.0f;
  if (o < co)
    for (int64_t r = row0 + ty; r < row1; r += kBiasLanes) s += to_f32(grad[r * co + o]);
  lanes[ty][tx] = s;
  __syncthreads();
  if (ty != 0 || o >= co) return;
  float t = 0.0f;
#pragma unroll
  for (int i = 0; i < kBiasLanes; ++i) t += lanes[i][tx];
  if (partial)
    partial[static_cast<int64_t>(blockIdx.y) * co + o] = t;
  else
    out[o] = from_f32<T>(t);
}

// out[i] = Σ_s partial[s, i] in chunk order s = 0, 1, ...
template <typename T>
__global__ void kernel_reduce_partials(const float* __restrict__ partial, int splits, int64_t total,
                                       T* __restrict__ out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float s = 0.0f;
    for (int j = 0; j < splits; ++j) s += partial[j * total + i];
    out[i] = from_f32<T>(s);
  }
}

template <typename T>
void reduce_partials(const float* partial, int splits, int64_t total, void* out, cudaStream_t s) {
  kernel_reduce_partials<T><<<grid_for(total), kThreads, 0, s>>>(partial, splits, total, static_cast<T*>(out));
  FRUGAL_CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_wgrad(const WgradParams& p, const spconv::WgradChoice& c, bool vec, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>(int64_t{p.k} * p.ci_tiles * p.co_tiles), static_cast<unsigned>(c.splits));
  if constexpr (!std::is_same_v<T, float>) {
    if (c.variant == spconv::WgradVariant::mma) {
      constexpr int W = spconv::kWgradWideTile, N = spconv::kWgradTile;
      const bool wide_ci = p.tile_ci == W, wide_co = p.tile_co == W;
      if (wide_ci && wide_co) return launch_wgrad_mma<T, MmaWgradTile<W, W>>(p, grid, s);
      if (wide_ci) return launch_wgrad_mma<T, MmaWgradTile<W, N>>(p, grid, s);
      if (wide_co) return launch_wgrad_mma<T, MmaWgradTile<N, W>>(p, grid, s);
      return launch_wgrad_mma<T, MmaWgradTile<N, N>>(p, grid, s);
    }
    if (c.variant == spconv::WgradVariant::wmma) {
      if (vec)
        kernel_wgrad_wmma<T, true><<<grid, WmmaWgradTile::THREADS, 0, s>>>(p);
      else
        kernel_wgrad_wmma<T, false><<<grid, WmmaWgradTile::THREADS, 0, s>>>(p);
      FRUGAL_CUDA_CHECK_LAUNCH();
      return;
    }
  }
  kernel_wgrad_simt<T><<<grid, SimtWgradTile::THREADS, 0, s>>>(p);
  FRUGAL_CUDA_CHECK_LAUNCH();
}

}  // namespace

spconv::backend::ConvReport spconv_dgrad(const sb::ConvArgs& a, const spconv::ConvChoice& choice, Stream stream) {
  DeviceGuard guard(a.device);
  const cudaStream_t s = to_cuda(stream);
  const int64_t total = static_cast<int64_t>(a.k) * a.ci * a.co;
  Scratch wd(static_cast<size_t>(total) * size_of(a.dtype), s);  // freed in stream order after the conv
  // a.ci, a.co are the forward's over grad_out: the conv's Co and Ci.
  if (size_of(a.dtype) == 2) {
    kernel_mirror_weight<<<grid_for(total), kThreads, 0, s>>>(static_cast<const uint16_t*>(a.weight), wd.as<uint16_t>(),
                                                              a.k, a.co, a.ci, total);
  } else {
    kernel_mirror_weight<<<grid_for(total), kThreads, 0, s>>>(static_cast<const uint32_t*>(a.weight), wd.as<uint32_t>(),
                                                              a.k, a.co, a.ci, total);
  }
  FRUGAL_CUDA_CHECK_LAUNCH();
  sb::ConvArgs b = a;
  b.weight = wd.as<void>();
  b.check = false;
  return spconv_conv(b, choice, stream);
}

void spconv_wgrad(const sb::WgradArgs& a, const spconv::WgradChoice& c, Stream stream) {
  DeviceGuard guard(a.device);
  const cudaStream_t s = to_cuda(stream);
  const size_t ws_bytes = spconv::workspace_bytes(a, c);
  std::optional<Scratch> ws;
  if (ws_bytes) ws.emplace(ws_bytes, s);
  char* base = ws ? ws->as<char>() : nullptr;
  float* weight_partial = spconv::weight_partial_bytes(a, c) ? reinterpret_cast<float*>(base) : nullptr;
  float* bias_partial =
      spconv::bias_partial_bytes(a, c) ? reinterpret_cast<float*>(base + spconv::weight_partial_bytes(a, c)) : nullptr;
  dispatch_float(a.dtype, "spconv::submanifold_conv_backward", [&]<typename T>() {
    if (a.grad_weight) {
      const int tile_ci = spconv::wgrad_tile_ci(c), tile_co = spconv::wgrad_tile_co(c);
      WgradParams p{a.feats,
                    a.nbr,
                    a.order,
                    a.grad_out,
                    weight_partial,
                    a.grad_weight,
                    a.n,
                    c.chunk_rows,
                    a.k,
                    a.ci,
                    a.co,
                    static_cast<int>(ceil_div(a.ci, tile_ci)),
                    static_cast<int>(ceil_div(a.co, tile_co)),
                    tile_ci,
                    tile_co};
      const bool vec = a.ci % 8 == 0 && a.co % 8 == 0 && is_aligned(a.feats, 16) && is_aligned(a.grad_out, 16);
      launch_wgrad<T>(p, c, vec, s);
      if (weight_partial)
        reduce_partials<T>(weight_partial, c.splits, static_cast<int64_t>(a.k) * a.ci * a.co, a.grad_weight, s);
    }
    if (a.grad_bias) {
      const dim3 grid(static_cast<unsigned>(ceil_div(a.co, kBiasCols)), static_cast<unsigned>(c.splits));
      kernel_bias_grad<T><<<grid, kBiasCols * kBiasLanes, 0, s>>>(
          static_cast<const T*>(a.grad_out), a.n, a.co, c.chunk_rows, bias_partial, static_cast<T*>(a.grad_bias));
      FRUGAL_CUDA_CHECK_LAUNCH();
      if (bias_partial) reduce_partials<T>(bias_partial, c.splits, a.co, a.grad_bias, s);
    }
  });
}

}  // namespace frugal::cuda
