// The f32 kernel's second pass: one output row per block from the slices' partial states
// (m, l, O), weighted by 2^(m_s − M), normalized, inverse-transformed with V's signs and stored.
// Bytes floor: the partials, B·Hq·splits·(D + 2) floats, read once (L2-resident at these sizes).
#include "cuda/attention/device.cuh"
#include "cuda/attention/params.cuh"
#include "cuda/attention/rows.cuh"

namespace frugal::cuda::decode {

namespace {

// Block-wide reduction of one value per thread (max or sum) through `red` (kWarps floats).
template <bool kMax>
__device__ float block_reduce(float x, float* red) {
  x = kMax ? warp_max_nan(x) : warp_sum(x);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = x;
  __syncthreads();
  float r = red[0];
  for (int k = 1; k < kWarps; ++k) r = kMax ? max_nan(r, red[k]) : r + red[k];
  return r;
}

// One output row per block (the f32 kernel's partials): the slices' partial states, weighted by
// 2^(m_s − M), then finalized. (The f16 kernel merges its own, the same way: merge_slices.)
// Latency-bound on small problems, so the slices are spread over the threads: D/4 threads cover a
// row with float4 loads, and the kThreads / (D/4) groups of them take every G-th slice; the groups'
// sums are then added in a fixed order (the result does not depend on timing).
// DC: the head dimension when known at compile time (64..512: the last steps in one warp, no
// barriers), 0 for the generic path.
template <int DC>
__global__ void __launch_bounds__(kThreads) kernel_combine(const __grid_constant__ Params p) {
  extern __shared__ __align__(16) float smem[];
  const int D = DC > 0 ? DC : p.dim, S = p.splits;
  const int vecs = D / 4, groups = kThreads / vecs;     // D: a power of two in [4, 512], so groups·vecs = kThreads
  float* part = smem;                                   // [groups][D]
  float* fin = part + groups * D;                       // [D]
  float* wgt = fin + D;                                 // [S]
  float* red_max = wgt + S;                             // [kWarps]
  float* red_sum = red_max + kWarps;                    // [kWarps]
  float* lsum = red_sum + kWarps;                       // [1]
  const int64_t row = blockIdx.x;                       // b * Hq + h
  grid_dependency_wait();  // the partials of the whole main grid
  const float* ml = p.part_ml + row * S * 2;
  const float* po = p.part_o + row * S * D;

  float mx = kNegInf;
  for (int s = threadIdx.x; s < S; s += blockDim.x) mx = max_nan(mx, ml[2 * s]);
  const float M = block_reduce<true>(mx, red_max);
  float l = 0;
  for (int s = threadIdx.x; s < S; s += blockDim.x) {
    const float wv = M == kNegInf ? 0.0f : exp2f(ml[2 * s] - M);
    wgt[s] = wv;
    l += ml[2 * s + 1] * wv;
  }
  const float L = block_reduce<false>(l, red_sum);  // its barrier also publishes wgt
  if (threadIdx.x < groups * vecs) {
    const int grp = threadIdx.x / vecs, v = threadIdx.x - grp * vecs;
    // float4 loads when the caller's workspace allows them (any u8 tensor may be passed).
    const bool vec_ok = (reinterpret_cast<uintptr_t>(po) & 15) == 0;
    auto load4 = [&](int sl) -> float4 {
      const float* q = po + static_cast<int64_t>(sl) * D + 4 * v;
      return vec_ok ? *reinterpret_cast<const float4*>(q) : make_float4(q[0], q[1], q[2], q[3]);
    };
    float4 o = make_float4(0, 0, 0, 0);
    int s = grp;
    for (; s + 3 * groups < S; s += 4 * groups) {
      float4 x[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) x[k] = load4(s + k * groups);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float wk = wgt[s + k * groups];
        o.x += x[k].x * wk;
        o.y += x[k].y * wk;
        o.z += x[k].z * wk;
        o.w += x[k].w * wk;
      }
    }
    for (; s < S; s += groups) {
      const float4 x = load4(s);
      const float wk = wgt[s];
      o.x += x.x * wk;
      o.y += x.y * wk;
      o.z += x.z * wk;
      o.w += x.w * wk;
    }
    reinterpret_cast<float4*>(part + grp * D)[v] = o;
  }
  __syncthreads();
  if constexpr (DC > 0) {
    // One warp adds the groups (same order as below) and finishes the row.
    const int64_t b = output_row(p, row / p.q_heads);
    const int h = static_cast<int>(row % p.q_heads);
    if (threadIdx.x == 0 && p.lse) p.lse[b * p.q_heads + h] = lse_of(M, L);
    if (threadIdx.x < 32) {
      float sg[DC / 32], v[DC / 32];
      load_vsign<DC>(p, sg);
#pragma unroll
      for (int j = 0; j < DC / 32; ++j) {
        const int d = static_cast<int>(threadIdx.x) + 32 * j;
        float o = part[d];
        for (int k = 1; k < groups; ++k) o += part[k * DC + d];
        v[j] = o;
      }
      warp_store_row<DC>(p, b, h, v, L, sg);
    }
  } else {
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
      float o = part[d];
      for (int k = 1; k < groups; ++k) o += part[k * D + d];
      fin[d] = o;
    }
    if (threadIdx.x == 0) lsum[0] = L;
    __syncthreads();
    const int64_t b = output_row(p, row / p.q_heads);
    const int h = static_cast<int>(row % p.q_heads);
    if (threadIdx.x == 0 && p.lse) p.lse[b * p.q_heads + h] = lse_of(M, L);
    store_output_rows(p, b, h, 1, fin, lsum, 1);
  }
}


}  // namespace

void launch_combine(const Params& p, int dim, int rows, int splits, cudaStream_t stream) {
  // [groups][D] + [D] + [splits] + 2·kWarps + 1 floats, groups·D = max(kThreads·4, D): ≤ 12 KB,
  // under the default 48 KB.
  const int groups_d = std::max(kThreads * 4, dim);
  const int smem = 4 * (groups_d + dim + splits + 2 * kWarps + 1);
  // Programmatic dependent launch: the combine's launch overlaps the main grid's last blocks.
  void (*combine)(Params) = dim == 64    ? kernel_combine<64>
                            : dim == 128 ? kernel_combine<128>
                            : dim == 256 ? kernel_combine<256>
                            : dim == 512 ? kernel_combine<512>
                                         : kernel_combine<0>;
  FRUGAL_CUDA_CHECK(launch_kernel(combine, dim3(static_cast<unsigned>(rows)), dim3(kThreads), static_cast<size_t>(smem),
                                  stream, true, p));
  FRUGAL_CUDA_CHECK_LAUNCH();
}

}  // namespace frugal::cuda::decode
