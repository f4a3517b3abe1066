// The two conv kernels over the map's row order: CUDA cores (every dtype, f32 tiles) and tensor cores
// through WMMA (f16/bf16, f32 accumulators), every K up to kMaxKernelVolume. Floor: every tile reads
// K·BM map entries and, for each offset some row has, BM gathered rows and one Ci × BN weight slice.
//
// A block owns a tile of output rows × a tile of output channels and loops over the offsets that at
// least one row of its tile has, and over Ci in chunks, gathering the neighbor rows into shared memory:
//   * kernel_conv_wmma (f16, bf16): WMMA 16×16×16 with f32 accumulators, a 3-stage cp.async pipeline
//     (16-byte copies with zero fill for the sentinel and the edges) when channels are multiples of 8,
//     plain loads otherwise;
//   * kernel_conv_simt (every dtype): CUDA cores, f32 tiles, 4×4 outputs per thread.
// Each output element is written once, by one thread, from accumulators summed in a fixed order:
// results are bitwise reproducible.
#include <mma.h>

#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/spconv/params.cuh"

namespace frugal::cuda::spconv_kernels {

namespace {

using namespace nvcuda;

struct ActiveOffsets {
  uint32_t bits[(kMaxKernelVolume + 31) / 32];
  int16_t list[kMaxKernelVolume];
  int count;
};

// Which offsets at least one row of the tile [row0, row0 + BM) has, as a compact list; also checks
// every entry of the tile's map slice against [0, n] (an entry outside counts as absent).
// Needs blockDim.x a multiple of 32 and BM a multiple of 32.
template <int BM>
__device__ int tile_active_offsets(const ConvParams& p, int64_t row0, ActiveOffsets& act) {
  for (int i = threadIdx.x; i < (kMaxKernelVolume + 31) / 32; i += blockDim.x) act.bits[i] = 0;
  __syncthreads();
  const int total = p.k * BM;
  for (int i = threadIdx.x; i < total; i += blockDim.x) {  // whole warps share one k (BM % 32 == 0)
    const int k = i / BM;
    const int64_t row = row0 + i % BM;
    int32_t m = static_cast<int32_t>(p.n);
    if (row < p.n) m = __ldg(&p.nbr[k * p.n + row]);
    const bool hit = m >= 0 && m < p.n;
    if (!hit && m != p.n && p.bad) atomicMin(p.bad, static_cast<unsigned long long>(k * p.n + row));
    const unsigned any = __ballot_sync(0xffffffffu, hit);
    if ((threadIdx.x & 31) == 0 && any) atomicOr(&act.bits[k >> 5], 1u << (k & 31));
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int c = 0;
    for (int k = 0; k < p.k; ++k)
      if (act.bits[k >> 5] >> (k & 31) & 1u) act.list[c++] = static_cast<int16_t>(k);
    act.count = c;
  }
  __syncthreads();
  return act.count;
}

// The neighbor row of `row` at offset k, or -1 (sentinel, out-of-range entry, row past the end).
__device__ __forceinline__ int64_t neighbor(const ConvParams& p, int k, int64_t row) {
  if (row >= p.n) return -1;
  const int32_t m = __ldg(&p.nbr[k * p.n + row]);
  return m >= 0 && m < p.n ? m : -1;
}

// ---- CUDA cores: every dtype, f32 tiles in shared memory ----
struct SimtTile {
  static constexpr int BM = 64, BN = 64, BK = 16, THREADS = 256;
};
static_assert(SimtTile::BM == spconv::kSimtTile && SimtTile::BN == spconv::kSimtTile, "the choice's simt tile");

template <typename T>
__global__ void __launch_bounds__(SimtTile::THREADS) kernel_conv_simt(ConvParams p, int col_tiles) {
  constexpr int BM = SimtTile::BM, BN = SimtTile::BN, BK = SimtTile::BK, THREADS = SimtTile::THREADS;
  __shared__ float As[BK][BM + 4];  // As[c][r]: the gathered rows, transposed
  __shared__ float Bs[BK][BN + 4];
  __shared__ ActiveOffsets act;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x / col_tiles) * BM;
  const int co0 = static_cast<int>(blockIdx.x % col_tiles) * BN;
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const T* feats = static_cast<const T*>(p.feats);
  const T* w = static_cast<const T*>(p.weight);

  const int active = tile_active_offsets<BM>(p, row0, act);
  float acc[4][4] = {};
  for (int a = 0; a < active; ++a) {
    const int k = act.list[a];
    for (int c0 = 0; c0 < p.ci; c0 += BK) {
#pragma unroll
      for (int q = 0; q < BM * BK / THREADS; ++q) {
        const int i = tid + q * THREADS, r = i / BK, c = i % BK;
        const int64_t m = neighbor(p, k, row0 + r);
        As[c][r] = m >= 0 && c0 + c < p.ci ? to_f32(feats[m * p.ci + c0 + c]) : 0.0f;
      }
#pragma unroll
      for (int q = 0; q < BK * BN / THREADS; ++q) {
        const int i = tid + q * THREADS, r = i / BN, c = i % BN;
        Bs[r][c] = c0 + r < p.ci && co0 + c < p.co
                       ? to_f32(w[(static_cast<int64_t>(k) * p.ci + c0 + r) * p.co + co0 + c])
                       : 0.0f;
      }
      __syncthreads();
#pragma unroll
      for (int c = 0; c < BK; ++c) {
        float av[4], bv[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) av[i] = As[c][ty + 16 * i];
#pragma unroll
        for (int j = 0; j < 4; ++j) bv[j] = Bs[c][tx + 16 * j];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
      }
      __syncthreads();
    }
  }
  T* out = static_cast<T*>(p.out);
  const T* bias = static_cast<const T*>(p.bias);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t col_row = row0 + ty + 16 * i;
    if (col_row >= p.n) continue;
    const int64_t row = output_row(p, col_row);
    if (row < 0) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int col = co0 + tx + 16 * j;
      if (col < p.co) out[row * p.co + col] = from_f32<T>(acc[i][j] + (bias ? to_f32(bias[col]) : 0.0f));
    }
  }
}

// ---- tensor cores (WMMA): f16 and bf16 ----

// 128 rows × BN channels per block, 8 warps as 4 (rows) × 2 (channels), each warp 32 × BN/2.
// Shared rows are padded by 8 elements (16 bytes): the 8 row addresses of one ldmatrix phase then
// fall in distinct banks (80-byte stride for A).
template <int BN_>
struct WmmaTile {
  static constexpr int BM = 128, BN = BN_, BK = 32, STAGES = 3, THREADS = 256;
  static constexpr int LDA = BK + 8, LDB = BN + 8;
  static constexpr int WARP_N = BN / 2, FM = 2, FN = WARP_N / 16;
  static constexpr int EPI_LD = 20;  // f32 staging of one 16×16 fragment per warp
  static constexpr size_t A_BYTES = size_t(STAGES) * BM * LDA * 2;
  static constexpr size_t B_BYTES = size_t(STAGES) * BK * LDB * 2;
  static constexpr size_t SMEM = A_BYTES + B_BYTES;
  static_assert(8 * 16 * EPI_LD * 4 <= A_BYTES, "the epilogue staging reuses the A buffers");
};

template <typename T, typename Tile, bool kVec>
__device__ __forceinline__ void wmma_load_stage(const ConvParams& p, T* As, T* Bs, int k, int c0, int64_t row0,
                                                int co0) {
  constexpr int BM = Tile::BM, BN = Tile::BN, BK = Tile::BK, LDA = Tile::LDA, LDB = Tile::LDB;
  const T* feats = static_cast<const T*>(p.feats);
  const T* w = static_cast<const T*>(p.weight);
  const int tid = threadIdx.x;
  if constexpr (kVec) {  // ci % 8 == 0, co % 8 == 0, 16-byte aligned bases: whole 16-byte chunks
    for (int i = tid; i < BM * (BK / 8); i += Tile::THREADS) {
      const int r = i / (BK / 8), c = i % (BK / 8) * 8;
      const int64_t m = neighbor(p, k, row0 + r);
      const bool ok = m >= 0 && c0 + c < p.ci;
      cp_async16(As + r * LDA + c, ok ? feats + m * p.ci + c0 + c : feats, ok ? 16 : 0);
    }
    for (int i = tid; i < BK * (BN / 8); i += Tile::THREADS) {
      const int r = i / (BN / 8), c = i % (BN / 8) * 8;
      const bool ok = c0 + r < p.ci && co0 + c < p.co;
      cp_async16(Bs + r * LDB + c, ok ? w + (static_cast<int64_t>(k) * p.ci + c0 + r) * p.co + co0 + c : w,
                 ok ? 16 : 0);
    }
  } else {
    const T zero = from_f32<T>(0.0f);
    for (int i = tid; i < BM * BK; i += Tile::THREADS) {
      const int r = i / BK, c = i % BK;
      const int64_t m = neighbor(p, k, row0 + r);
      As[r * LDA + c] = m >= 0 && c0 + c < p.ci ? feats[m * p.ci + c0 + c] : zero;
    }
    for (int i = tid; i < BK * BN; i += Tile::THREADS) {
      const int r = i / BN, c = i % BN;
      Bs[r * LDB + c] =
          c0 + r < p.ci && co0 + c < p.co ? w[(static_cast<int64_t>(k) * p.ci + c0 + r) * p.co + co0 + c] : zero;
    }
  }
}

template <typename T, typename Tile, bool kVec>
__global__ void __launch_bounds__(256, 2) kernel_conv_wmma(ConvParams p, int col_tiles) {
  constexpr int BM = Tile::BM, BN = Tile::BN, BK = Tile::BK, STAGES = Tile::STAGES;
  constexpr int LDA = Tile::LDA, LDB = Tile::LDB, FM = Tile::FM, FN = Tile::FN, WARP_N = Tile::WARP_N;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ ActiveOffsets act;
  T* As = reinterpret_cast<T*>(smem);
  T* Bs = reinterpret_cast<T*>(smem + Tile::A_BYTES);
  const int64_t row0 = static_cast<int64_t>(blockIdx.x / col_tiles) * BM;
  const int co0 = static_cast<int>(blockIdx.x % col_tiles) * BN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, wm = warp / 2, wn = warp % 2;

  const int active = tile_active_offsets<BM>(p, row0, act);
  const int chunks = (p.ci + BK - 1) / BK;
  const int steps = active * chunks;

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[FM][FN];
#pragma unroll
  for (int i = 0; i < FM; ++i)
#pragma unroll
    for (int j = 0; j < FN; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

  auto load = [&](int s) {
    const int buf = s % STAGES;
    wmma_load_stage<T, Tile, kVec>(p, As + buf * BM * LDA, Bs + buf * BK * LDB, act.list[s / chunks], s % chunks * BK,
                                   row0, co0);
  };
  cp_async_pipeline<STAGES>(steps, load, [&](int s) {
    const T* a_s = As + (s % STAGES) * BM * LDA;
    const T* b_s = Bs + (s % STAGES) * BK * LDB;
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> af[FM];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> bf[FN];
#pragma unroll
      for (int i = 0; i < FM; ++i) wmma::load_matrix_sync(af[i], a_s + (wm * 32 + i * 16) * LDA + kk, LDA);
#pragma unroll
      for (int j = 0; j < FN; ++j) wmma::load_matrix_sync(bf[j], b_s + kk * LDB + wn * WARP_N + j * 16, LDB);
#pragma unroll
      for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) wmma::mma_sync(acc[i][j], af[i], bf[j], acc[i][j]);
    }
  });
  cp_async_wait<0>();
  __syncthreads();  // the A buffers become the epilogue's staging

  float* stage = reinterpret_cast<float*>(smem) + warp * 16 * Tile::EPI_LD;
  T* out = static_cast<T*>(p.out);
  const T* bias = static_cast<const T*>(p.bias);
  const int r = lane / 2, c = lane % 2 * 8;
#pragma unroll
  for (int i = 0; i < FM; ++i)
#pragma unroll
    for (int j = 0; j < FN; ++j) {
      wmma::store_matrix_sync(stage, acc[i][j], Tile::EPI_LD, wmma::mem_row_major);
      __syncwarp();
      const int64_t map_col = row0 + wm * 32 + i * 16 + r;
      const int64_t row = map_col < p.n ? output_row(p, map_col) : -1;
      const int col = co0 + wn * WARP_N + j * 16 + c;
      if (row >= 0) {
        alignas(16) T v[8];
#pragma unroll
        for (int e = 0; e < 8; ++e)
          v[e] = from_f32<T>(stage[r * Tile::EPI_LD + c + e] + (bias && col + e < p.co ? to_f32(bias[col + e]) : 0.0f));
        T* dst = out + row * p.co + col;
        if (kVec && col + 8 <= p.co) {
          *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(v);
        } else {
#pragma unroll
          for (int e = 0; e < 8; ++e)
            if (col + e < p.co) dst[e] = v[e];
        }
      }
      __syncwarp();
    }
}

template <typename T, int BN, bool kVec>
void run_wmma(const ConvParams& p, cudaStream_t s) {
  using Tile = WmmaTile<BN>;
  const int col_tiles = ceil_div(p.co, BN);
  const int64_t blocks = ceil_div<int64_t>(p.n, Tile::BM) * col_tiles;
  auto* fn = kernel_conv_wmma<T, Tile, kVec>;
  allow_dynamic_smem(reinterpret_cast<const void*>(fn), Tile::SMEM);
  fn<<<static_cast<unsigned>(blocks), Tile::THREADS, Tile::SMEM, s>>>(p, col_tiles);
  FRUGAL_CUDA_CHECK_LAUNCH();
}

template <typename T>
void run_simt(const ConvParams& p, cudaStream_t s) {
  const int col_tiles = ceil_div(p.co, SimtTile::BN);
  const int64_t blocks = ceil_div<int64_t>(p.n, SimtTile::BM) * col_tiles;
  kernel_conv_simt<T><<<static_cast<unsigned>(blocks), SimtTile::THREADS, 0, s>>>(p, col_tiles);
  FRUGAL_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_simt(const ConvParams& p, DType dtype, cudaStream_t s) {
  dispatch_float(dtype, "spconv::submanifold_conv", [&]<typename T>() { run_simt<T>(p, s); });
}

void launch_wmma(const ConvParams& p, DType dtype, int tile_co, cudaStream_t s) {
  const bool vec =
      p.ci % 8 == 0 && p.co % 8 == 0 && is_aligned(p.feats, 16) && is_aligned(p.weight, 16) && is_aligned(p.out, 16);
  auto run = [&]<typename T>() {
    if (tile_co == 128) return vec ? run_wmma<T, 128, true>(p, s) : run_wmma<T, 128, false>(p, s);
    return vec ? run_wmma<T, 64, true>(p, s) : run_wmma<T, 64, false>(p, s);
  };
  if (dtype == DType::f16)
    run.template operator()<__half>();
  else
    run.template operator()<__nv_bfloat16>();
}

}  // namespace frugal::cuda::spconv_kernels
