// Row-level pieces the decode-attention kernels share: the block-wide FWHT and final store of
// rows in shared memory (the f32 kernel, the generic combine), and their one-warp forms with D
// known at compile time (the f16 kernels, the combine at D = 64..512), bitwise the same.
#pragma once

#include "cuda/attention/device.cuh"
#include "cuda/attention/params.cuh"

namespace frugal::cuda::decode {
namespace {

// ---- block-wide row pieces ------------------------------------------------------------------

// In-place unnormalized FWHT of `rows` rows of D floats in shared memory (stages h = 1, 2, 4, ...,
// as the CPU). Every thread of the block must call it; it ends with a barrier.
__device__ void fwht_rows(float* x, int rows, int D) {
  const int half = D / 2;
  for (int h = 1; h < D; h <<= 1) {
    for (int i = threadIdx.x; i < rows * half; i += blockDim.x) {
      const int r = i / half, k = i - r * half;
      const int j = (k / h) * 2 * h + (k % h);
      float* v = x + r * D;
      const float a = v[j], c = v[j + h];
      v[j] = a + c;
      v[j + h] = a - c;
    }
    __syncthreads();
  }
}

// Final rows: out = s_V ⊙ FWHT(O / L) / D, or zeros where L == 0 (no tokens). fin: [rows][D] in
// shared memory, L[r * l_stride]: the rows' sums. Every thread must call it.
__device__ void store_output_rows(const Params& p, int64_t b, int hq0, int rows, float* fin, const float* L, int l_stride) {
  const int D = p.dim;
  for (int i = threadIdx.x; i < rows * D; i += blockDim.x) {
    const float l = L[(i / D) * l_stride];
    fin[i] = l == 0.0f ? 0.0f : fin[i] / (l * static_cast<float>(D));
  }
  __syncthreads();
  fwht_rows(fin, rows, D);
  for (int i = threadIdx.x; i < rows * D; i += blockDim.x) {
    const int h = i / D, d = i - h * D;
    const float v = p.vsign ? fin[i] * p.vsign[d] : fin[i];
    store_elem(p.out, p.out_dtype, (static_cast<int64_t>(b) * p.q_heads + hq0 + h) * D + d, v);
  }
}

// ---- warp-level row pieces (the f16 kernel's prologue and epilogue, the combine; D known at
// compile time)
//
// The block-wide pieces above divide by the runtime D and pass log2(D) barriers, which at one block
// of four warps per SM (short sequences) are most of a call's instructions; these do the same
// arithmetic in the same order inside one warp: lane holds dims lane + 32j.

// In-place unnormalized FWHT of one row of D floats held by a warp (stages h = 1, 2, 4, ... as the
// CPU and fwht_rows: a butterfly's lower element becomes a + c, the upper a − c, with a the lower).
template <int D>
__device__ __forceinline__ void warp_fwht(float (&v)[D / 32]) {
  constexpr int E = D / 32;
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int h = 1; h < 32; h <<= 1) {
    const bool upper = (lane & h) != 0;
#pragma unroll
    for (int j = 0; j < E; ++j) {
      const float o = __shfl_xor_sync(0xffffffffu, v[j], h);
      v[j] = upper ? o - v[j] : v[j] + o;
    }
  }
#pragma unroll
  for (int h = 1; h < E; h <<= 1)
#pragma unroll
    for (int j = 0; j < E; ++j)
      if ((j & h) == 0) {
        const float a = v[j], c = v[j + h];
        v[j] = a + c;
        v[j + h] = a - c;
      }
}

// V's signs for a lane's dims lane + 32j (1 where the cache has none: the product is then exact),
// requested before a row's sums and FWHT, so that they are not D/32 memory round trips in series
// behind the stores at the very end of every call.
template <int D>
__device__ __forceinline__ void load_vsign(const Params& p, float (&sg)[D / 32]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int j = 0; j < D / 32; ++j) sg[j] = p.vsign ? __ldg(p.vsign + lane + 32 * j) : 1.0f;
}

// One final row by one warp: out[b, hq] = s_V ⊙ FWHT(o / (l·D)), zeros where l == 0 (as
// store_output_rows, bitwise). sg: load_vsign's.
template <int D>
__device__ __forceinline__ void warp_store_row(const Params& p, int64_t b, int hq, float (&v)[D / 32], float l,
                                               const float (&sg)[D / 32]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int j = 0; j < D / 32; ++j) v[j] = l == 0.0f ? 0.0f : v[j] / (l * static_cast<float>(D));
  warp_fwht<D>(v);
  const int64_t row = (static_cast<int64_t>(b) * p.q_heads + hq) * D;
#pragma unroll
  for (int j = 0; j < D / 32; ++j) store_elem(p.out, p.out_dtype, row + lane + 32 * j, v[j] * sg[j]);
}

}  // namespace
}  // namespace frugal::cuda::decode
