// The tensor-core sparse conv with neighbor-sorted rows (sparse_conv_mma.cu): what the dispatcher in
// sparse_conv.cu needs to choose it, size its workspace and run it. Also read by bench/spconv.cu,
// which replicates the row order on the host to report the share of useful products.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/sparse_conv_backend.h"
#include "core/spconv_choose.h"

namespace frugal::cuda {

// What every conv kernel takes (the SIMT and WMMA kernels of sparse_conv.cu, and the mma kernel,
// which adds its row order): pointers and sizes, from spconv::backend::ConvArgs.
struct ConvParams {
  const void* feats;
  const int32_t* nbr;
  const void* weight;
  const void* bias;
  void* out;
  int64_t n;
  int k, ci, co;
  unsigned long long* bad;  // nullptr: unchecked
};

}  // namespace frugal::cuda

namespace frugal::cuda::spconv_mma {

using spconv::kChunkRows;
using spconv::kGroupRows;
using spconv::kMaxMaskedOffsets;
using spconv::kTileRows;
using spconv::kWindow;
using spconv::halo_max_offsets;

// The words of Params::handoff_count, the hand-off list's header (kHandoffHeader bytes before the list):
// the tiles listed; the halo kernel's blocks done listing; the tiles its blocks have claimed. All are
// zeroed before each halo launch.
enum HandoffWord : int { kListed = 0, kListersDone = 1, kTilesClaimed = 2, kHandoffWords = 3 };
using spconv::kHandoffHeader;
static_assert(kHandoffHeader >= kHandoffWords * sizeof(unsigned) && kHandoffHeader % 16 == 0,
              "the header holds the words and keeps the list 16-byte aligned");

// One launch's arguments (both tensor-core kernels): the conv's, plus the row order of the launch.
struct Params : ConvParams {
  const int32_t* perm;      // row at sorted position row_begin + i; nullptr: the identity
  int64_t row_begin, rows;  // this launch's rows
  float* part = nullptr;    // wgmma, split: [splits, rows, co] f32 partials (blockIdx.y: the split)
  // The pipelined halo kernel's hand-off: the tiles of the launch whose rows do not fit its halo
  // (tile indices, in no particular order), behind the counts of HandoffWord; kernel_conv_wgmma_ws's
  // hand-off instance, launched after it, runs exactly those tiles once all handoff_blocks are done.
  // (Params stays within 128 bytes: beyond, nvcc reloads it throughout every kernel taking it.)
  int32_t* handoff = nullptr;
  unsigned* handoff_count = nullptr;
  unsigned handoff_blocks = 0;
};
static_assert(sizeof(Params) <= 128, "the kernels' parameter block stays within 128 bytes");
// The wgmma kernels over one launch's rows, T = __half or __nv_bfloat16, BN = 64, 128 or 256: the
// variant (wgmma, wgmma_ws, wgmma_ws2, halo_pipe) on `rows`-row tiles (128 or, BN ≤ 128, 256; the halo
// kernel's tiles are 128 rows). With p.part set, launches `splits` blocks per tile (offsets
// [k·j/splits, k·(j+1)/splits) each) writing f32 partials without bias; finish_split() then sums them in
// split order into p.out. The halo kernel needs p.handoff. Returns the variant that ran: the one asked
// for, but where the driver cannot encode the tensor maps the copy engine reads (the warp-specialized
// and halo kernels' weights and rows), the kernel that needs none.
template <typename T, int BN>
spconv::ConvVariant launch_wgmma(const Params& p, spconv::ConvVariant v, int rows, int splits, cudaStream_t s);
template <typename T>
void finish_split(const Params& p, int splits, cudaStream_t s);
// The pipelined halo kernel's probe of a whole map nbr [k, n] (k ≤ kMaxMaskedOffsets) in the map's row
// order: of halo_samples(n) tiles spread over it, how many fit each configuration's halo buffer, into
// fits[2][2] (indexed as MapStats::halo_fits; zeroed by the caller).
void launch_halo_probes(const int32_t* nbr, int64_t n, int k, unsigned* fits, cudaStream_t s);

// Runs the conv (a complete choice of mma or a wgmma variant, accepted by can_implement). bad: the
// checked-map flag or nullptr; workspace: spconv::workspace_bytes(a, c) bytes, 16-byte aligned (unused
// when that is 0). Returns the variant that ran.
spconv::ConvVariant run(const spconv::backend::ConvArgs& a, const spconv::ConvChoice& c, unsigned long long* bad,
                        void* workspace, cudaStream_t s);

#if defined(__CUDACC__)
// Four 8 × 8 b16 matrices from shared memory (lanes 8j .. 8j + 7 give the row addresses of matrix j):
// the A fragment of an m16n8k16 mma (and of a warp's 16 rows of a register-A wgmma).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t smem_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem) {
  ldmatrix_x4(r, static_cast<uint32_t>(__cvta_generic_to_shared(smem)));
}

// The offsets k_lo ≤ k < k_hi whose bit is set in mask, ascending, into act; returns their count (the
// steps of a tile: every tensor-core conv kernel's prologue lists its tile's offsets this way).
__device__ __forceinline__ int list_offsets(uint32_t mask, int k_lo, int k_hi, int8_t* act) {
  int c = 0;
  for (int k = k_lo; k < k_hi; ++k)
    if (mask >> k & 1u) act[c++] = static_cast<int8_t>(k);
  return c;
}

// ---- the tile's prologue (both wgmma kernels; the mma kernel has its own, loading entry by entry) ----
// (The mma kernel on this prologue: bitwise the same outputs, but 2–4% slower on its default sorted
// rows at R = 512, C = 64 and 128, 1–5% faster unsorted; H200, 2026-11-30,
// bench/results/2026-11-30-spconv-halo.md. So it keeps its own.)
// The tile's map slice into shared memory, checked: nb_s[k · BM + r] = the neighbor row of tile row
// r at offset k (-1: none), row_s[r] = the output row (-1: past the end), group_s[g] = the offsets
// present in 16-row group g, act_s[0 .. act_count) = the offsets present in the tile, ascending,
// restricted to this block's offset range when the launch is split (gridDim.y > 1).
// Each of the first KH·BM threads owns one row and every KH-th offset (the others, whole warps, only
// join the barriers); its map entries are loaded before any is used, so their latencies overlap. Ends
// with a barrier of all THREADS threads.
template <int BM, int THREADS>
__device__ __forceinline__ void tile_prologue(const Params& p, int64_t t0, int32_t* nb_s, int32_t* row_s,
                                              uint32_t* group_s, int8_t* act_s, int* act_count) {
  constexpr int GROUPS = BM / kGroupRows, KH = THREADS / BM, KJ = (kMaxMaskedOffsets + KH - 1) / KH, LOADERS = KH * BM;
  static_assert(KH >= 1 && BM % 32 == 0, "whole warps per offset");
  const int tid = threadIdx.x, lane = tid % 32;
  if (tid < GROUPS) group_s[tid] = 0;
  const bool loader = LOADERS == THREADS || tid < LOADERS;
  const int r = tid % BM, kh = tid / BM;
  int64_t row = -1;
  if (loader && t0 + r < p.rows) row = p.perm ? __ldg(&p.perm[t0 + r]) : p.row_begin + t0 + r;
  if (loader && kh == 0) row_s[r] = static_cast<int32_t>(row);
  int32_t v[KJ];
#pragma unroll
  for (int j = 0; j < KJ; ++j) {
    const int k = kh + KH * j;
    v[j] = row >= 0 && k < p.k ? __ldg(&p.nbr[k * p.n + row]) : -1;
  }
  __syncthreads();  // group_s is zero
#pragma unroll
  for (int j = 0; j < KJ; ++j) {
    const int k = kh + KH * j;  // uniform per warp
    if (!loader || k >= p.k) break;
    int32_t m = -1;
    if (row >= 0) {
      if (v[j] >= 0 && v[j] < p.n)
        m = v[j];
      else if (v[j] != p.n && p.bad)
        atomicMin(p.bad, static_cast<unsigned long long>(k * p.n + row));
    }
    nb_s[k * BM + r] = m;
    const unsigned hits = __ballot_sync(0xffffffffu, m >= 0);
    if (lane == 0) {  // this warp's rows r .. r + 31 are groups r/16 and r/16 + 1
      if (hits & 0xffffu) atomicOr(&group_s[r / kGroupRows], 1u << k);
      if (hits >> 16) atomicOr(&group_s[r / kGroupRows + 1], 1u << k);
    }
  }
  __syncthreads();
  if (tid == 0) {
    uint32_t any = 0;
    for (int g = 0; g < GROUPS; ++g) any |= group_s[g];
    // A split launch (gridDim.y > 1): this block sums offsets [k·j/S, k·(j+1)/S) only.
    const int j = blockIdx.y, S = gridDim.y;
    const int k_lo = p.k * j / S, k_hi = p.k * (j + 1) / S;
    *act_count = list_offsets(any, k_lo, k_hi, act_s);
  }
  __syncthreads();
}
// The epilogue's last step (every tensor-core conv kernel): the tile staged in shared memory (cs,
// BM rows of LDC elements, bias added and rounded) written to the output, one 16-byte store per 8
// channels of a row, rows past the end (row_s < 0) and channels past Co skipped. Each output row is
// written once; no atomics.
template <typename T, int BM, int BN, int LDC, int THREADS>
__device__ __forceinline__ void store_staged_tile(const Params& p, const T* cs, const int32_t* row_s, int co0) {
  T* out = static_cast<T*>(p.out);
  for (int i = threadIdx.x; i < BM * (BN / 8); i += THREADS) {
    const int r = i / (BN / 8), c = i % (BN / 8) * 8;
    const int32_t row = row_s[r];
    if (row < 0 || co0 + c >= p.co) continue;
    *reinterpret_cast<uint4*>(out + static_cast<int64_t>(row) * p.co + co0 + c) =
        *reinterpret_cast<const uint4*>(cs + r * LDC + c);
  }
}
#endif  // __CUDACC__

}  // namespace frugal::cuda::spconv_mma
