// The exact f32 decode-attention kernel (CUDA cores, any GPU): lane = token for the scores, lane =
// dims for V; 4 warps a block, each streaming its own 32-token groups of the block's slice with its
// own running softmax state, merged in shared memory, then finalized or written as the slice's
// partial (merged by combine.cu). Bytes floor: every cached byte of the attended tokens once,
// B·Hkv·L·(D·(K bits + V bits)/8 + sK + sV) (packed codes and the two scales, sK and sV bytes: 4 for
// f32, 2 for f16).
#include "cuda/attention/device.cuh"
#include "cuda/attention/params.cuh"
#include "cuda/attention/rows.cuh"

namespace frugal::cuda::decode {

namespace {

// qs[h][d] = FWHT(s_K ⊙ q[b, hq0 + h])[d] for the block's heads (unnormalized). Ends with a barrier.
// Used by the f32 kernel; the f16 kernel does the same per warp in registers (see warp_fwht).
__device__ void load_rotated_queries(const Params& p, const BlockWork& w, float* qs) {
  const int D = p.dim;
  const int n = w.heads * D;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int h = i / D, d = i - h * D;
    const int64_t idx = w.qrow * p.q_stride_b + (w.hq0 + h) * p.q_stride_h + d;
    const float x = load_elem(p.q, p.q_dtype, idx);
    qs[i] = p.ksign ? x * p.ksign[d] : x;
  }
  __syncthreads();
  fwht_rows(qs, w.heads, D);
}

// Merges the warps' states (cw [kWarps][8][D] O, cml [kWarps][8][2] (m, l)) into fin [heads][D],
// then finalizes (one slice) or writes this slice's partial. Begins after a barrier.
__device__ void merge_and_store(const Params& p, const BlockWork& w, const float* cw, const float* cml, float* fin,
                                float* fin_ml) {
  const int D = p.dim;
  for (int h = threadIdx.x; h < w.heads; h += blockDim.x) {
    float M = kNegInf;
    for (int k = 0; k < kWarps; ++k) M = max_nan(M, cml[(k * kHeadsPerBlock + h) * 2]);
    float L = 0;
    if (M != kNegInf)
      for (int k = 0; k < kWarps; ++k)
        L += cml[(k * kHeadsPerBlock + h) * 2 + 1] * exp2f(cml[(k * kHeadsPerBlock + h) * 2] - M);
    fin_ml[2 * h] = M;
    fin_ml[2 * h + 1] = L;
    if (p.splits == 1 && p.lse) p.lse[w.qrow * p.q_heads + w.hq0 + h] = lse_of(M, L);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < w.heads * D; i += blockDim.x) {
    const int h = i / D, d = i - h * D;
    const float M = fin_ml[2 * h];
    float o = 0;
    if (M != kNegInf)
      for (int k = 0; k < kWarps; ++k)
        o += cw[(k * kHeadsPerBlock + h) * D + d] * exp2f(cml[(k * kHeadsPerBlock + h) * 2] - M);
    fin[i] = o;
  }
  __syncthreads();
  if (p.splits == 1) {
    store_output_rows(p, w.qrow, w.hq0, w.heads, fin, fin_ml + 1, 2);
    return;
  }
  for (int i = threadIdx.x; i < w.heads * D; i += blockDim.x) {
    const int h = i / D, d = i - h * D;
    const int64_t row = (static_cast<int64_t>(w.b) * p.q_heads + w.hq0 + h) * p.splits + w.split;
    p.part_o[row * D + d] = fin[i];
    if (d == 0) {
      p.part_ml[2 * row] = fin_ml[2 * h];
      p.part_ml[2 * row + 1] = fin_ml[2 * h + 1];
    }
  }
}

// Calls f(d, code) for every code of a packed row, reading 32-bit words where the layout allows.
template <typename F>
__device__ __forceinline__ void for_each_code(const uint8_t* row, int D, int bits, F&& f) {
  if (bits == 4 && D % 8 == 0) {
    for (int i = 0; i < D / 8; ++i) {
      const uint32_t x = __ldg(reinterpret_cast<const unsigned int*>(row) + i);
#pragma unroll
      for (int j = 0; j < 8; ++j) f(8 * i + j, (x >> (4 * j)) & 15u);
    }
  } else if (bits == 8 && D % 4 == 0) {
    for (int i = 0; i < D / 4; ++i) {
      const uint32_t x = __ldg(reinterpret_cast<const unsigned int*>(row) + i);
#pragma unroll
      for (int j = 0; j < 4; ++j) f(4 * i + j, (x >> (8 * j)) & 255u);
    }
  } else {
    for (int d = 0; d < D; ++d) f(d, get_code(row, d, bits));
  }
}

// DPL: dims per lane in the V accumulation (D / 32, or 1 when D < 32).
template <int DPL>
__global__ void __launch_bounds__(kThreads) kernel_decode_f32(const __grid_constant__ Params p) {
  extern __shared__ float smem[];
  const int D = p.dim;
  float* qs = smem;                                   // [8][D] rotated queries, later the merged rows
  float* cbk = qs + kHeadsPerBlock * D;               // [256]
  float* cbv = cbk + 256;                             // [256]
  float* cw = cbv + 256;                              // [kWarps][8][D]
  float* cml = cw + kWarps * kHeadsPerBlock * D;      // [kWarps][8][2]
  float* fin_ml = cml + kWarps * kHeadsPerBlock * 2;  // [8][2]
  grid_launch_dependents();  // (as the f16 kernel: for the exact rows' kernel, or the combine)
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const BlockWork w = p.items ? block_work<true>(p) : block_work<false>(p);

  for (int i = threadIdx.x; i < (1 << p.kbits); i += blockDim.x) cbk[i] = p.kcb[i];
  for (int i = threadIdx.x; i < (1 << p.vbits); i += blockDim.x) cbv[i] = p.vcb[i];
  load_rotated_queries(p, w, qs);  // ends with a barrier (the codebooks are visible too)

  const int64_t krow = static_cast<int64_t>(D) * p.kbits / 8, vrow = static_cast<int64_t>(D) * p.vbits / 8;
  const int64_t head = w.pages ? w.hk : static_cast<int64_t>(w.b) * p.kv_heads + w.hk;
  const uint8_t* kbase = p.kp + head * p.capacity * krow;
  const uint8_t* vbase = p.vp + head * p.capacity * vrow;
  const ScalePtr ksb = p.ks + head * p.capacity;
  const ScalePtr vsb = p.vs + head * p.capacity;
  // Slot of the block's first token (what masked lanes read).
  const int64_t slot0 = w.pages ? (w.t0 < w.t1 ? paged_slot(p, w.pages, w.t0) : 0) : (p.sliding ? w.t0 % p.capacity : w.t0);

  float m[kHeadsPerBlock], l[kHeadsPerBlock], acc[kHeadsPerBlock][DPL];
#pragma unroll
  for (int h = 0; h < kHeadsPerBlock; ++h) {
    m[h] = kNegInf;
    l[h] = 0;
#pragma unroll
    for (int i = 0; i < DPL; ++i) acc[h][i] = 0;
  }

  for (int64_t g0 = w.t0 + warp * 32; g0 < w.t1; g0 += kWarps * 32) {
    const int64_t pos = g0 + lane;
    const bool valid = pos < w.t1 && pos >= w.lo;
    int64_t slot = slot0;
    if (w.pages)
      slot = pos < w.t1 ? paged_slot(p, w.pages, pos) : slot0;
    else if (valid)
      slot = p.sliding ? advance_slot(slot0, pos - w.t0, p.capacity) : pos;
    // Scores, lane = token.
    float s[kHeadsPerBlock];
#pragma unroll
    for (int h = 0; h < kHeadsPerBlock; ++h) s[h] = 0;
    for_each_code(kbase + slot * krow, D, p.kbits, [&](int d, unsigned code) {
      const float c = cbk[code];
#pragma unroll
      for (int h = 0; h < kHeadsPerBlock; ++h)
        if (h < w.heads) s[h] += qs[h * D + d] * c;
    });
    const float kscale = ksb[slot] * p.score_scale;
    const float vscale = valid ? vsb[slot] : 0.0f;
    float pr[kHeadsPerBlock];
#pragma unroll
    for (int h = 0; h < kHeadsPerBlock; ++h) {
      const float sc = valid ? s[h] * kscale : kNegInf;
      const float m_new = max_nan(m[h], warp_max_nan(sc));
      const float alpha = m_new == m[h] ? 1.0f : exp2f(m[h] - m_new);
      pr[h] = exp2f(sc - m_new);
      l[h] = l[h] * alpha + pr[h];
#pragma unroll
      for (int i = 0; i < DPL; ++i) acc[h][i] *= alpha;
      m[h] = m_new;
      pr[h] *= vscale;
    }
    // V, lane = dims lane + 32 i: every token of the group in turn.
    const int n = static_cast<int>(w.t1 - g0 < 32 ? w.t1 - g0 : 32);
    for (int j = 0; j < n; ++j) {
      const int64_t sj = __shfl_sync(0xffffffffu, slot, j);
      float pj[kHeadsPerBlock];
#pragma unroll
      for (int h = 0; h < kHeadsPerBlock; ++h) pj[h] = __shfl_sync(0xffffffffu, pr[h], j);
      const uint8_t* row = vbase + sj * vrow;
#pragma unroll
      for (int i = 0; i < DPL; ++i) {
        const int d = lane + 32 * i;
        if (d < D) {
          const float c = cbv[get_code(row, d, p.vbits)];
#pragma unroll
          for (int h = 0; h < kHeadsPerBlock; ++h) acc[h][i] += pj[h] * c;
        }
      }
    }
  }

#pragma unroll
  for (int h = 0; h < kHeadsPerBlock; ++h) {
    l[h] = warp_sum(l[h]);
#pragma unroll
    for (int i = 0; i < DPL; ++i)
      if (lane + 32 * i < D) cw[(warp * kHeadsPerBlock + h) * D + lane + 32 * i] = acc[h][i];
    if (lane == 0) {
      cml[(warp * kHeadsPerBlock + h) * 2] = m[h];
      cml[(warp * kHeadsPerBlock + h) * 2 + 1] = l[h];
    }
  }
  __syncthreads();
  merge_and_store(p, w, cw, cml, qs, fin_ml);
}

}  // namespace

Launch f32_kernel(int dim, int dims_per_lane) {
  auto smem = [](int d) {
    return 4 * ((kHeadsPerBlock + kWarps * kHeadsPerBlock) * d + 512 + kWarps * kHeadsPerBlock * 2 + 2 * kHeadsPerBlock);
  };
  const int dpl = dims_per_lane;
  const Launch l{dpl == 1   ? kernel_decode_f32<1>
                 : dpl == 2 ? kernel_decode_f32<2>
                 : dpl == 4 ? kernel_decode_f32<4>
                 : dpl == 8 ? kernel_decode_f32<8>
                            : kernel_decode_f32<16>,
                 smem(dim), smem(32 * dpl)};
  return l;
}

}  // namespace frugal::cuda::decode
