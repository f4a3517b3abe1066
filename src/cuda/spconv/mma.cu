// The mma.sync conv kernel (sm_80) for f16/bf16 (m16n8k16, f32 accumulators) over output rows reordered
// so that rows with the same neighbor pattern share a tile, and that row order. Floor: per tile, K·128
// map entries, for each offset some row has 128 gathered rows and a Ci × BN weight slice; tensor-core
// products only for the 16-row groups that have the offset.
//
// Row order (kernel_sort_rows): each row's neighbor mask (bit k set when nbr[k, row] is a row) is
// computed, and the rows of each window of kWindow consecutive rows are stable-sorted by it in
// shared memory (cub::BlockRadixSort). The order lives in a 4-byte-a-row workspace, one chunk of at
// most kChunkRows rows at a time; the output is still written in the original row order, through
// that permutation.
//
// Conv (kernel_conv_mma): a block owns 128 consecutive sorted rows × BN output channels, 8 warps as
// 2 (rows) × 4 (channels). Its prologue reads the tile's map slice once into shared memory (and
// checks it), and ORs, per 16-row group, the offsets present. The main loop runs over the offsets
// some row of the tile has × Ci in chunks of 32: a 4-stage cp.async pipeline gathers the neighbor
// rows (16-byte copies, zero fill for absent neighbors) and the weight slice into shared memory,
// and each warp multiplies them with ldmatrix + mma.sync, skipping every 16-row group that lacks
// the offset (a warp owns the groups wm, wm + 2, ..., so both row-warps see similar masks). The
// epilogue adds the bias, stages the tile in shared memory and writes each output row once with
// 16-byte stores. No atomics touch the output; each element's sum runs in a fixed order (offsets
// ascending, then Ci), so results are bitwise reproducible.
//
// Only sm_80 instructions (cp.async, ldmatrix, mma.sync): the same code serves the sm_90a and the
// sm_90 / PTX builds.
#include <algorithm>
#include <cub/block/block_radix_sort.cuh>
#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/spconv/tile.cuh"

namespace frugal::cuda::spconv_kernels {

namespace {

// ================================ row order ====================================================

constexpr int kSortThreads = 512, kSortItems = kWindow / kSortThreads;
static_assert(kSortThreads * kSortItems == kWindow);

// perm[i] for i in [0, rows): the row (absolute index) at sorted position row_begin + i.
__global__ void __launch_bounds__(kSortThreads)
    kernel_sort_rows(const int32_t* __restrict__ nbr, int64_t n, int k, int64_t row_begin, int64_t rows,
                     int32_t* __restrict__ perm) {
  using Sort = cub::BlockRadixSort<uint32_t, kSortThreads, kSortItems, int32_t>;
  __shared__ union {
    typename Sort::TempStorage sort;
    uint32_t mask[kWindow];
  } sm;
  const int64_t w0 = static_cast<int64_t>(blockIdx.x) * kWindow;  // window start within the chunk
  const int count = static_cast<int>(rows - w0 < kWindow ? rows - w0 : kWindow);
  // Masks in striped order (consecutive threads read consecutive map entries). Positions past the
  // end get the key 2^k, above every mask, so they sort behind every real row (for k = 32 the key
  // is all ones and the sort's stability keeps them last).
  const uint32_t past_end = k < 32 ? 1u << k : 0xffffffffu;
  const int end_bit = k < 32 ? k + 1 : 32;
  for (int i = threadIdx.x; i < kWindow; i += kSortThreads) {
    uint32_t m = past_end;
    if (i < count) {
      m = 0;
      const int64_t row = row_begin + w0 + i;
#pragma unroll 4
      for (int kk = 0; kk < k; ++kk) {
        const int32_t v = __ldg(&nbr[kk * n + row]);
        if (v >= 0 && v < n) m |= 1u << kk;  // entries outside [0, n] count as absent
      }
    }
    sm.mask[i] = m;
  }
  __syncthreads();
  uint32_t keys[kSortItems];
  int32_t pos[kSortItems];
#pragma unroll
  for (int j = 0; j < kSortItems; ++j) {
    const int i = threadIdx.x * kSortItems + j;  // blocked order: stability follows the row order
    keys[j] = sm.mask[i];
    pos[j] = i;
  }
  __syncthreads();  // the masks are in registers: the union becomes the sort's storage
  Sort(sm.sort).Sort(keys, pos, 0, end_bit);
#pragma unroll
  for (int j = 0; j < kSortItems; ++j) {
    const int i = threadIdx.x * kSortItems + j;
    if (i < count) perm[w0 + i] = static_cast<int32_t>(row_begin + w0 + pos[j]);
  }
}

// ================================ conv =========================================================

// 128 rows × BN channels × BK input channels per stage, 8 warps as 2 × 4; each warp computes 64 rows
// (4 m16 groups) × BN/4 channels. Shared rows are padded by 8 elements (16 bytes), so the 8 row
// addresses of one ldmatrix phase fall in distinct bank quads (A rows 2·BK + 16 bytes apart, B rows
// 2·BN + 16).
//
// Two main loops (kernel_conv_mma), each the faster at its widths (docs/performance.md, "Sparse conv"):
//   PREFETCH (BN = 64, 256): 64-deep K steps (one barrier per four k16 slices) and ldmatrix
//     fragments double-buffered across slices. BN = 256: 4 stages, 204 KB, one block per SM (128
//     accumulators a thread); BN = 64: 3 stages so that two blocks fit (2 × (81 KB + 17 KB static) of
//     the 228 KB).
//   otherwise (BN = 128): 32-deep steps, 4 stages, two blocks per SM, fragments loaded just before
//     their mmas (the PREFETCH loop needs 192 registers for its two buffers and 64 accumulators there,
//     one block a multiprocessor, and single-buffered at two blocks it lost too).
template <int BN_>
struct MmaTile {
  static constexpr bool PREFETCH = BN_ != 128;
  static constexpr int BM = kTileRows, BN = BN_, BK = PREFETCH ? 64 : 32, STAGES = BN == 64 ? 3 : 4;
  static constexpr int THREADS = 256, WARPS_M = 2, WARPS_N = 4;
  static constexpr int WN = BN / WARPS_N, MI = BM / WARPS_M / kGroupRows, NI = WN / 8;
  static constexpr int LDA = BK + 8, LDB = BN + 8, LDC = BN + 8;
  static constexpr size_t A_BYTES = size_t(STAGES) * BM * LDA * 2;
  static constexpr size_t B_BYTES = size_t(STAGES) * BK * LDB * 2;
  static constexpr size_t SMEM = A_BYTES + B_BYTES;
  static constexpr int MIN_BLOCKS = BN >= 256 ? 1 : 2;
  static_assert(BK % 32 == 0, "the PREFETCH loop's slice count is even: slice 0 is always in buffer 0");
  static_assert(NI % 2 == 0, "B fragments load two n8 tiles at a time");
  static_assert(BM * BK / 8 % THREADS == 0 && BK * BN / 8 % THREADS == 0, "whole 16-byte copies per thread");
  static_assert(size_t(BM) * LDC * 2 <= SMEM, "the epilogue staging reuses the pipeline buffers");
  static_assert(THREADS % BM == 0 && BM % 32 == 0, "the prologue gives each thread one row");
  static_assert(SMEM == spconv::mma_stage_bytes(BN), "the choice's budget of shared memory (spconv_choose.h)");
};

template <typename T, typename Tile>
__global__ void __launch_bounds__(Tile::THREADS, Tile::MIN_BLOCKS) kernel_conv_mma(Params p, int col_tiles) {
  constexpr int BM = Tile::BM, BN = Tile::BN, BK = Tile::BK, STAGES = Tile::STAGES, THREADS = Tile::THREADS;
  constexpr int LDA = Tile::LDA, LDB = Tile::LDB, LDC = Tile::LDC, MI = Tile::MI, NI = Tile::NI;
  constexpr int WARPS_M = Tile::WARPS_M, WN = Tile::WN, GROUPS = BM / kGroupRows;
  extern __shared__ __align__(128) unsigned char smem[];
  // These arrays are the kMmaStaticBytes of the choice's shared-memory budget (spconv_choose.h).
  __shared__ int32_t nb_s[kMaxMaskedOffsets][BM];  // neighbor row of each (offset, tile row); -1: none
  __shared__ int32_t row_s[BM];              // map column of each tile row (output_row maps it); -1: past the end
  __shared__ uint32_t group_s[GROUPS];       // offsets present in each 16-row group
  __shared__ int8_t act_s[kMaxMaskedOffsets];      // offsets present in the tile, ascending
  __shared__ int act_count;
  T* As = reinterpret_cast<T*>(smem);
  T* Bs = reinterpret_cast<T*>(smem + Tile::A_BYTES);
  const T* feats = static_cast<const T*>(p.feats);
  const T* w = static_cast<const T*>(p.weight);
  const int64_t t0 = static_cast<int64_t>(blockIdx.x / col_tiles) * BM;  // within this launch's rows
  const int co0 = static_cast<int>(blockIdx.x % col_tiles) * BN;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wm = warp % WARPS_M, wn = warp / WARPS_M;

  // ---- prologue: the tile's map slice, checked, and the offsets of each 16-row group
  if (tid < GROUPS) group_s[tid] = 0;
  {
    const int r = tid % BM;
    int64_t row = -1;
    if (t0 + r < p.rows) row = p.perm ? __ldg(&p.perm[t0 + r]) : p.row_begin + t0 + r;
    if (tid < BM) row_s[r] = static_cast<int32_t>(row);
    // group_s is zero after this barrier.
    __syncthreads();
    for (int k = tid / BM; k < p.k; k += THREADS / BM) {  // uniform per warp: whole warps share k
      int32_t m = -1;
      if (row >= 0) {
        const int32_t v = __ldg(&p.nbr[k * p.n + row]);
        if (v >= 0 && v < p.n)
          m = v;
        else if (v != p.n && p.bad)
          atomicMin(p.bad, static_cast<unsigned long long>(k * p.n + row));
      }
      nb_s[k][r] = m;
      const unsigned hits = __ballot_sync(0xffffffffu, m >= 0);
      if (lane == 0) {  // this warp's rows r .. r + 31 are groups r/16 and r/16 + 1
        if (hits & 0xffffu) atomicOr(&group_s[r / kGroupRows], 1u << k);
        if (hits >> 16) atomicOr(&group_s[r / kGroupRows + 1], 1u << k);
      }
    }
  }
  __syncthreads();
  if (tid == 0) {
    uint32_t any = 0;
    for (int g = 0; g < GROUPS; ++g) any |= group_s[g];
    act_count = list_offsets(any, 0, p.k, act_s);
  }
  __syncthreads();
  const int chunks = (p.ci + BK - 1) / BK;
  const int steps = act_count * chunks;
  uint32_t gmask[MI], warp_mask = 0;  // offsets present in this warp's groups
#pragma unroll
  for (int i = 0; i < MI; ++i) {
    gmask[i] = group_s[wm + WARPS_M * i];
    warp_mask |= gmask[i];
  }

  auto load = [&](int s) {
    const int a = s / chunks, c0 = (s - a * chunks) * BK, k = act_s[a];
    T* as = As + (s % STAGES) * BM * LDA;
    T* bs = Bs + (s % STAGES) * BK * LDB;
#pragma unroll
    for (int q = 0; q < BM * BK / 8 / THREADS; ++q) {
      const int i = tid + q * THREADS, r = i / (BK / 8), c = i % (BK / 8) * 8;
      const int32_t m = nb_s[k][r];
      const bool ok = m >= 0 && c0 + c < p.ci;
      cp_async16(as + r * LDA + c, ok ? feats + static_cast<int64_t>(m) * p.ci + c0 + c : feats, ok ? 16 : 0);
    }
#pragma unroll
    for (int q = 0; q < BK * BN / 8 / THREADS; ++q) {
      const int i = tid + q * THREADS, r = i / (BN / 8), c = i % (BN / 8) * 8;
      const bool ok = c0 + r < p.ci && co0 + c < p.co;
      cp_async16(bs + r * LDB + c, ok ? w + (static_cast<int64_t>(k) * p.ci + c0 + r) * p.co + co0 + c : w,
                 ok ? 16 : 0);
    }
  };

  float acc[MI][NI][4];
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < steps) load(s);
    cp_async_commit();
  }
  if constexpr (!Tile::PREFETCH) {
    for (int s = 0; s < steps; ++s) {
      cp_async_wait<STAGES - 2>();  // this thread's copies of step s have landed ...
      __syncthreads();              // ... everyone's have, and step s-1's buffer is free again
      if (s + STAGES - 1 < steps) load(s + STAGES - 1);
      cp_async_commit();
      const int k = act_s[s / chunks];
      if (!(warp_mask >> k & 1u)) continue;  // none of this warp's rows has offset k
      const T* as = As + (s % STAGES) * BM * LDA;
      const T* bs = Bs + (s % STAGES) * BK * LDB;
#pragma unroll
      for (int kk = 0; kk < BK; kk += 16) {
        uint32_t b[NI][2];
#pragma unroll
        for (int j = 0; j < NI; j += 2)
          ldmatrix_x4_trans(b[j][0], b[j][1], b[j + 1][0], b[j + 1][1],
                            bs + (kk + (lane & 15)) * LDB + wn * WN + j * 8 + (lane >> 4) * 8);
#pragma unroll
        for (int i = 0; i < MI; ++i) {
          if (!(gmask[i] >> k & 1u)) continue;  // none of these 16 rows has offset k: A is zero
          uint32_t a[4];
          ldmatrix_x4(a, as + ((wm + WARPS_M * i) * kGroupRows + (lane & 15)) * LDA + kk + (lane >> 4) * 8);
#pragma unroll
          for (int j = 0; j < NI; ++j) mma16816<T>(acc[i][j], a, b[j][0], b[j][1]);
        }
      }
    }
  } else {
    // Fragments double-buffered across 16-deep k slices: the ldmatrix loads of slice kk + 1 (or of
    // the next step's first slice) are issued before the mmas of slice kk. Every A fragment of a
    // slice is loaded; only the mmas are skipped for a 16-row group that lacks the offset. The
    // cp.async refill and the barrier sit in the last slice of a step, before its mmas: by then
    // every warp holds that slice in registers, so the stage it read last can be overwritten.
    uint32_t af[2][MI][4], bf[2][NI][2];
    auto load_frags = [&](int buf, int s, int kk) {
      const T* as = As + (s % STAGES) * BM * LDA;
      const T* bs = Bs + (s % STAGES) * BK * LDB;
#pragma unroll
      for (int j = 0; j < NI; j += 2)
        ldmatrix_x4_trans(bf[buf][j][0], bf[buf][j][1], bf[buf][j + 1][0], bf[buf][j + 1][1],
                          bs + (kk + (lane & 15)) * LDB + wn * WN + j * 8 + (lane >> 4) * 8);
#pragma unroll
      for (int i = 0; i < MI; ++i)
        ldmatrix_x4(af[buf][i], as + ((wm + WARPS_M * i) * kGroupRows + (lane & 15)) * LDA + kk + (lane >> 4) * 8);
    };
    auto warp_has = [&](int s) { return (warp_mask >> act_s[s / chunks] & 1u) != 0; };  // s < steps
    cp_async_wait<STAGES - 2>();  // step 0 has landed for this thread ...
    __syncthreads();              // ... and for everyone
    if (steps > 0 && warp_has(0)) load_frags(0, 0, 0);
    for (int s = 0; s < steps; ++s) {
      const int k = act_s[s / chunks];
      const bool on = warp_mask >> k & 1u;  // uniform per warp: some row of its groups has offset k
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk) {
        const int cur = kk % 2, nxt = (kk + 1) % 2;
        if (kk + 1 < BK / 16) {
          if (on) load_frags(nxt, s, (kk + 1) * 16);
        } else {
          // Stage (s + STAGES - 1) % STAGES was read last in step s - 1, before its barrier.
          if (s + STAGES - 1 < steps) load(s + STAGES - 1);
          cp_async_commit();
          cp_async_wait<STAGES - 2>();  // this thread's copies of step s + 1 have landed ...
          __syncthreads();              // ... everyone's have
          if (s + 1 < steps && warp_has(s + 1)) load_frags(nxt, s + 1, 0);
        }
        if (!on) continue;
#pragma unroll
        for (int i = 0; i < MI; ++i) {
          if (!(gmask[i] >> k & 1u)) continue;  // none of these 16 rows has offset k: A is zero
#pragma unroll
          for (int j = 0; j < NI; ++j) mma16816<T>(acc[i][j], af[cur][i], bf[cur][j][0], bf[cur][j][1]);
        }
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // the pipeline buffers become the epilogue's staging

  // ---- epilogue: bias, round, stage the tile, then one 16-byte store per 8 channels of a row
  T* cs = reinterpret_cast<T*>(smem);
  const T* bias = static_cast<const T*>(p.bias);
#pragma unroll
  for (int j = 0; j < NI; ++j) {
    const int col = wn * WN + j * 8 + (lane & 3) * 2;
    float b0 = 0.0f, b1 = 0.0f;
    if (bias && co0 + col < p.co) b0 = to_f32(bias[co0 + col]), b1 = to_f32(bias[co0 + col + 1]);  // co % 8 == 0
#pragma unroll
    for (int i = 0; i < MI; ++i) {
      const int r = (wm + WARPS_M * i) * kGroupRows + (lane >> 2);
      store_pair(cs + r * LDC + col, acc[i][j][0] + b0, acc[i][j][1] + b1);
      store_pair(cs + (r + 8) * LDC + col, acc[i][j][2] + b0, acc[i][j][3] + b1);
    }
  }
  __syncthreads();
  store_staged_tile<T, BM, BN, LDC, THREADS>(p, cs, row_s, co0);
}

template <typename T, int BN>
void run_mma(const Params& p, cudaStream_t s) {
  using Tile = MmaTile<BN>;
  const int col_tiles = ceil_div(p.co, BN);
  const int64_t blocks = ceil_div<int64_t>(p.rows, Tile::BM) * col_tiles;  // ≤ INT32_MAX by chunk_rows
  auto* fn = kernel_conv_mma<T, Tile>;
  allow_dynamic_smem(reinterpret_cast<const void*>(fn), Tile::SMEM);
  fn<<<static_cast<unsigned>(blocks), Tile::THREADS, Tile::SMEM, s>>>(p, col_tiles);
  FRUGAL_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_sort_rows(const int32_t* nbr, int64_t n, int k, int64_t row_begin, int64_t rows, int32_t* perm,
                      cudaStream_t s) {
  const auto windows = static_cast<unsigned>(ceil_div<int64_t>(rows, kWindow));
  kernel_sort_rows<<<windows, kSortThreads, 0, s>>>(nbr, n, k, row_begin, rows, perm);
  FRUGAL_CUDA_CHECK_LAUNCH();
}

void launch_mma(const Params& p, DType dtype, int tile_co, cudaStream_t s) {
  auto run = [&]<typename T>() {
    if (tile_co == 64) return run_mma<T, 64>(p, s);
    if (tile_co == 128) return run_mma<T, 128>(p, s);
    return run_mma<T, 256>(p, s);
  };
  if (dtype == DType::f16)
    run.template operator()<__half>();
  else
    run.template operator()<__nv_bfloat16>();
}

}  // namespace frugal::cuda::spconv_kernels
