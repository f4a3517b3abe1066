// Device pieces every masked tensor-core kernel (mma, wgmma, the halo kernel) shares: the ldmatrix
// fragments, a tile's offset list, the wgmma kernels' map prologue, and the epilogue's last step.
#pragma once

#include "cuda/common.cuh"
#include "cuda/spconv/params.cuh"

namespace frugal::cuda::spconv_kernels {

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
// The same, each matrix transposed: B fragments of K-major tiles (and A fragments of M-minor ones).
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3,
                                                  const void* smem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(s));
}

// The offsets k_lo ≤ k < k_hi whose bit is set in mask, ascending, into act; returns their count (the
// steps of a tile: every tensor-core conv kernel's prologue lists its tile's offsets this way).
__device__ __forceinline__ int list_offsets(uint32_t mask, int k_lo, int k_hi, int8_t* act) {
  int c = 0;
  for (int k = k_lo; k < k_hi; ++k)
    if (mask >> k & 1u) act[c++] = static_cast<int8_t>(k);
  return c;
}

// ---- the tile's prologue (both wgmma kernels; the mma kernel keeps its own, loading entry by entry,
// which is faster on its default sorted rows) ----
// The tile's map slice into shared memory, checked: nb_s[k · BM + r] = the neighbor row of tile row
// r at offset k (-1: none), row_s[r] = its map column (-1: past the end), group_s[g] = the offsets
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
// channels of a row, rows past the end (row_s < 0: row_s holds map columns) and channels past Co
// skipped; column c goes to output row output_row(p, c). Each output row is written once; no atomics.
template <typename T, int BM, int BN, int LDC, int THREADS>
__device__ __forceinline__ void store_staged_tile(const Params& p, const T* cs, const int32_t* row_s, int co0) {
  T* out = static_cast<T*>(p.out);
  for (int i = threadIdx.x; i < BM * (BN / 8); i += THREADS) {
    const int r = i / (BN / 8), c = i % (BN / 8) * 8;
    const int64_t row = row_s[r] < 0 ? -1 : output_row(p, row_s[r]);
    if (row < 0 || co0 + c >= p.co) continue;
    *reinterpret_cast<uint4*>(out + static_cast<int64_t>(row) * p.co + co0 + c) =
        *reinterpret_cast<const uint4*>(cs + r * LDC + c);
  }
}

}  // namespace frugal::cuda::spconv_kernels
