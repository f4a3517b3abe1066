// CUDA backend of the sparse conv.
//
// Kernel map: pack every coordinate into a 64-bit key (checking its range), insert the rows into
// an open-addressing table of int32 row indices (2^p ≥ 2N slots, linear probing, atomicCAS on the
// empty slot; an equal key already there is a duplicate), then probe only offsets k < K/2 and
// write both nbr[k, n] = m and, by the submanifold symmetry, nbr[K-1-k, m] = n. Every map entry
// is written by exactly one thread, so the map is the same as the CPU's, bit for bit.
//
// Conv: a block owns a tile of output rows × a tile of output channels and loops over the offsets
// that at least one row of its tile has, and over Ci in chunks, gathering the neighbor rows into
// shared memory. Two kernels share that skeleton:
//   * kernel_conv_wmma (f16, bf16): tensor cores through WMMA 16×16×16 with f32 accumulators,
//     a 3-stage cp.async pipeline (16-byte copies with zero fill for the sentinel and the edges)
//     when channels are multiples of 8, plain loads otherwise;
//   * kernel_conv_simt (every dtype, the default for f32): CUDA cores, f32 tiles, 4×4 outputs
//     per thread.
// The tensor-core kernels over rows sorted by neighbor mask (mma.sync, and wgmma on sm_90a, the
// default for f16/bf16 where they apply: K ≤ 32, channels multiples of 8) live in
// sparse_conv_mma.cu and sparse_conv_wgmma.cu. Each output element is written once,
// by one thread, from accumulators summed in a fixed order: results are bitwise reproducible.
#include <mma.h>

#include <climits>
#include <cstddef>
#include <optional>
#include <type_traits>

#include "core/device_caps.h"
#include "core/sparse_conv_backend.h"
#include "core/spconv_choose.h"
#include "cuda/common.cuh"
#include "cuda/sparse_conv_mma.cuh"

namespace frugal::cuda {

namespace {

namespace sb = spconv::backend;
using namespace nvcuda;

constexpr unsigned long long kNone = ULLONG_MAX;

// ================================ kernel map ===================================================

// What the map build or check finds, read back in one copy: the first three words start as kNone
// (0xff bytes), the fits as 0.
struct DeviceStatus {
  unsigned long long bad_row;    // smallest row with an unpackable coordinate
  unsigned long long dup;        // smallest (hi << 32 | lo) over duplicate row pairs found
  unsigned long long bad_entry;  // smallest linear index of a map entry outside [0, n]
  unsigned halo_fits[2][2];      // the map's sample tiles that fit the halo kernel (MapStats::halo_fits)
};
constexpr size_t kStatusNoneBytes = 3 * sizeof(unsigned long long);
static_assert(offsetof(DeviceStatus, halo_fits) == kStatusNoneBytes, "the fits follow the three words");

__global__ void kernel_pack_keys(const int32_t* __restrict__ coords, int64_t n, uint64_t* __restrict__ keys,
                                 DeviceStatus* st) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r >= n) return;
  const int32_t b = coords[4 * r], x = coords[4 * r + 1], y = coords[4 * r + 2], z = coords[4 * r + 3];
  if (!sb::batch_in_range(b) || !sb::coord_in_range(x) || !sb::coord_in_range(y) || !sb::coord_in_range(z))
    atomicMin(&st->bad_row, static_cast<unsigned long long>(r));
  keys[r] = sb::pack_key(b, x, y, z);
}

__global__ void kernel_insert(const uint64_t* __restrict__ keys, int64_t n, int32_t* table, uint64_t mask,
                              DeviceStatus* st) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r >= n) return;
  const uint64_t key = keys[r];
  for (uint64_t s = sb::hash_key(key) & mask;; s = (s + 1) & mask) {
    const int32_t prev = atomicCAS(&table[s], sb::kEmptySlot, static_cast<int32_t>(r));
    if (prev == sb::kEmptySlot) return;
    if (keys[prev] == key) {
      const auto lo = static_cast<unsigned long long>(prev < r ? prev : r);
      const auto hi = static_cast<unsigned long long>(prev < r ? r : prev);
      atomicMin(&st->dup, hi << 32 | lo);
      return;
    }
  }
}

// Rows K/2 .. K-1 of the map: the centre is the identity, the others start as the sentinel and
// receive their hits from the neighbors' probes.
__global__ void kernel_fill_upper(int32_t* __restrict__ nbr_half, int64_t n, int64_t total) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    nbr_half[i] = i < n ? static_cast<int32_t>(i) : static_cast<int32_t>(n);
}

// blockIdx.y = k in [0, K/2): one probe per (row, k).
__global__ void kernel_query(const uint64_t* __restrict__ keys, int64_t n, const int32_t* __restrict__ table,
                             uint64_t mask, int ks, int dilation, int32_t* __restrict__ nbr) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r >= n) return;
  const int k = blockIdx.y, kv = ks * ks * ks;
  const uint64_t key = keys[r];
  const int64_t qx = sb::key_x(key) + sb::axis_offset(k / (ks * ks), ks, dilation);
  const int64_t qy = sb::key_y(key) + sb::axis_offset(k / ks % ks, ks, dilation);
  const int64_t qz = sb::key_z(key) + sb::axis_offset(k % ks, ks, dilation);
  int32_t m = -1;
  if (sb::coord_in_range(qx) && sb::coord_in_range(qy) && sb::coord_in_range(qz)) {
    const uint64_t q = sb::pack_key(sb::key_b(key), qx, qy, qz);
    for (uint64_t s = sb::hash_key(q) & mask;; s = (s + 1) & mask) {
      const int32_t t = __ldg(&table[s]);
      if (t == sb::kEmptySlot) break;
      if (__ldg(&keys[t]) == q) {
        m = t;
        break;
      }
    }
  }
  nbr[k * n + r] = m < 0 ? static_cast<int32_t>(n) : m;
  if (m >= 0) nbr[static_cast<int64_t>(kv - 1 - k) * n + m] = static_cast<int32_t>(r);
}

// Every entry of nbr [k, n] (total = k·n) in [0, n]; the smallest linear index of one that is not.
__global__ void kernel_check_map(const int32_t* __restrict__ nbr, int64_t total, int64_t n, DeviceStatus* st) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t v = nbr[i];
    if (v < 0 || v > n) atomicMin(&st->bad_entry, static_cast<unsigned long long>(i));
  }
}

// ================================ convolution ==================================================

using spconv::kMaxKernelVolume;

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
    const int64_t row = row0 + ty + 16 * i;
    if (row >= p.n) continue;
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
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < steps) load(s);
    cp_async_commit();
  }
  for (int s = 0; s < steps; ++s) {
    cp_async_wait<STAGES - 2>();  // this thread's copies of step s have landed ...
    __syncthreads();              // ... everyone's have, and step s-1's buffer is free again
    if (s + STAGES - 1 < steps) load(s + STAGES - 1);
    cp_async_commit();
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
  }
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
      const int64_t row = row0 + wm * 32 + i * 16 + r;
      const int col = co0 + wn * WARP_N + j * 16 + c;
      if (row < p.n) {
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
void launch_wmma(const ConvParams& p, cudaStream_t s) {
  using Tile = WmmaTile<BN>;
  const int col_tiles = ceil_div(p.co, BN);
  const int64_t blocks = ceil_div<int64_t>(p.n, Tile::BM) * col_tiles;
  auto* fn = kernel_conv_wmma<T, Tile, kVec>;
  allow_dynamic_smem(reinterpret_cast<const void*>(fn), Tile::SMEM);
  fn<<<static_cast<unsigned>(blocks), Tile::THREADS, Tile::SMEM, s>>>(p, col_tiles);
  FRUGAL_CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_simt(const ConvParams& p, cudaStream_t s) {
  const int col_tiles = ceil_div(p.co, SimtTile::BN);
  const int64_t blocks = ceil_div<int64_t>(p.n, SimtTile::BM) * col_tiles;
  kernel_conv_simt<T><<<static_cast<unsigned>(blocks), SimtTile::THREADS, 0, s>>>(p, col_tiles);
  FRUGAL_CUDA_CHECK_LAUNCH();
}

}  // namespace

namespace {

// The status buffer, set up on s: the three words kNone, the fits 0.
void clear_status(DeviceStatus* st, cudaStream_t s) {
  FRUGAL_CUDA_CHECK(cudaMemsetAsync(st, 0xff, kStatusNoneBytes, s));
  FRUGAL_CUDA_CHECK(cudaMemsetAsync(st->halo_fits, 0, sizeof(st->halo_fits), s));
}

// The map's fit to the pipelined halo kernel, into st, where that kernel can run (sm_90a, K ≤ 32):
// measured once here so that the conv's choice reads it from the map's statistics. Returns the sample
// tiles (0: not measured).
int probe_halo_fit(const int32_t* nbr, int64_t n, int k, int device, DeviceStatus* st, cudaStream_t s) {
  if (k > spconv::kMaxMaskedOffsets || !device_caps(device).sm90a) return 0;
  spconv_mma::launch_halo_probes(nbr, n, k, &st->halo_fits[0][0], s);
  return spconv::halo_samples(n);
}

// Waits for s, then turns the device's status into the backend's.
sb::MapStatus read_status(const DeviceStatus& host, int samples) {
  sb::MapStatus out;
  if (host.bad_row != kNone) out.bad_row = static_cast<int64_t>(host.bad_row);
  if (host.dup != kNone) {
    out.dup_row_a = static_cast<int64_t>(host.dup & 0xffffffffull);
    out.dup_row_b = static_cast<int64_t>(host.dup >> 32);
  }
  if (host.bad_entry != kNone) out.bad_entry = static_cast<int64_t>(host.bad_entry);
  out.halo_samples = samples;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) out.halo_fits[i][j] = static_cast<int>(host.halo_fits[i][j]);
  return out;
}

}  // namespace

spconv::backend::MapStatus spconv_build_map(const sb::MapArgs& a, Stream stream) {
  DeviceGuard guard(a.device);
  const cudaStream_t s = to_cuda(stream);
  const int64_t n = a.n;
  const int ks = a.kernel_size, kv = ks * ks * ks, half = kv / 2;
  const uint64_t cap = sb::table_capacity(n);
  DeviceStatus host{};
  int samples = 0;
  {
    Scratch status(sizeof(DeviceStatus), s), keys(n * sizeof(uint64_t), s), table(cap * sizeof(int32_t), s);
    auto* st = status.as<DeviceStatus>();
    clear_status(st, s);
    FRUGAL_CUDA_CHECK(cudaMemsetAsync(table.as<int32_t>(), 0xff, cap * sizeof(int32_t), s));  // all kEmptySlot
    constexpr int threads = 256;
    const auto row_blocks = static_cast<unsigned>(ceil_div<int64_t>(n, threads));
    kernel_pack_keys<<<row_blocks, threads, 0, s>>>(a.coords, n, keys.as<uint64_t>(), st);
    FRUGAL_CUDA_CHECK_LAUNCH();
    kernel_insert<<<row_blocks, threads, 0, s>>>(keys.as<uint64_t>(), n, table.as<int32_t>(), cap - 1, st);
    FRUGAL_CUDA_CHECK_LAUNCH();
    const int64_t upper = (kv - half) * n;
    const auto fill_blocks = static_cast<unsigned>(std::min<int64_t>(ceil_div<int64_t>(upper, threads), 1 << 20));
    kernel_fill_upper<<<fill_blocks, threads, 0, s>>>(a.nbr + half * n, n, upper);
    FRUGAL_CUDA_CHECK_LAUNCH();
    if (half > 0) {
      kernel_query<<<dim3(row_blocks, half), threads, 0, s>>>(keys.as<uint64_t>(), n, table.as<int32_t>(), cap - 1, ks,
                                                              a.dilation, a.nbr);
      FRUGAL_CUDA_CHECK_LAUNCH();
    }
    samples = probe_halo_fit(a.nbr, n, kv, a.device, st, s);
    FRUGAL_CUDA_CHECK(cudaMemcpyAsync(&host, st, sizeof(DeviceStatus), cudaMemcpyDeviceToHost, s));
  }
  FRUGAL_CUDA_CHECK(cudaStreamSynchronize(s));
  return read_status(host, samples);
}

spconv::backend::MapStatus spconv_check_map(const int32_t* nbr, int64_t n, int k, int device, Stream stream) {
  DeviceGuard guard(device);
  const cudaStream_t s = to_cuda(stream);
  DeviceStatus host{};
  int samples = 0;
  {
    Scratch status(sizeof(DeviceStatus), s);
    auto* st = status.as<DeviceStatus>();
    clear_status(st, s);
    const int64_t total = static_cast<int64_t>(k) * n;
    constexpr int threads = 256;
    const auto blocks = static_cast<unsigned>(std::min<int64_t>(ceil_div<int64_t>(total, threads), 1 << 16));
    kernel_check_map<<<blocks, threads, 0, s>>>(nbr, total, n, st);
    FRUGAL_CUDA_CHECK_LAUNCH();
    samples = probe_halo_fit(nbr, n, k, device, st, s);
    FRUGAL_CUDA_CHECK(cudaMemcpyAsync(&host, st, sizeof(DeviceStatus), cudaMemcpyDeviceToHost, s));
  }
  FRUGAL_CUDA_CHECK(cudaStreamSynchronize(s));
  return read_status(host, samples);
}

spconv::backend::ConvReport spconv_conv(const sb::ConvArgs& a, const spconv::ConvChoice& c, Stream stream) {
  DeviceGuard guard(a.device);
  const cudaStream_t s = to_cuda(stream);
  ConvParams p{a.feats, a.nbr, a.weight, a.bias, a.out, a.n, a.k, a.ci, a.co, nullptr};
  // One workspace: the 8-byte checked-map flag (in its own 256 bytes), then the masked-row kernels'
  // (spconv::workspace_bytes: the row order, a split launch's f32 partials, the halo kernel's hand-off list).
  constexpr size_t kFlagBytes = 256;
  const bool masked = spconv::is_masked(c.variant);
  const size_t mma_bytes = masked ? spconv::workspace_bytes(a, c) : 0;
  const size_t ws_bytes = (a.check ? kFlagBytes : 0) + mma_bytes;
  unsigned long long host_bad = kNone;
  sb::ConvReport report;
  report.variant = c.variant;
  {
    std::optional<Scratch> ws;
    if (ws_bytes) ws.emplace(ws_bytes, s);
    if (a.check) {
      p.bad = ws->as<unsigned long long>();
      FRUGAL_CUDA_CHECK(cudaMemsetAsync(p.bad, 0xff, sizeof(unsigned long long), s));
    }
    if (masked) {
      report.variant = spconv_mma::run(a, c, p.bad, mma_bytes ? ws->as<char>() + (a.check ? kFlagBytes : 0) : nullptr, s);
    } else {
      const bool vec =
          a.ci % 8 == 0 && a.co % 8 == 0 && is_aligned(a.feats, 16) && is_aligned(a.weight, 16) && is_aligned(a.out, 16);
      const bool simt = c.variant == spconv::ConvVariant::simt;
      dispatch_float(a.dtype, "spconv::submanifold_conv", [&]<typename T>() {
        if constexpr (std::is_same_v<T, float>) {
          launch_simt<T>(p, s);
        } else {
          if (simt) return launch_simt<T>(p, s);
          if (c.tile_co == 128) return vec ? launch_wmma<T, 128, true>(p, s) : launch_wmma<T, 128, false>(p, s);
          return vec ? launch_wmma<T, 64, true>(p, s) : launch_wmma<T, 64, false>(p, s);
        }
      });
    }
    if (a.check) FRUGAL_CUDA_CHECK(cudaMemcpyAsync(&host_bad, p.bad, sizeof(host_bad), cudaMemcpyDeviceToHost, s));
  }
  if (!a.check) return report;
  FRUGAL_CUDA_CHECK(cudaStreamSynchronize(s));
  if (host_bad != kNone) report.bad_entry = static_cast<int64_t>(host_bad);
  return report;
}

}  // namespace frugal::cuda
