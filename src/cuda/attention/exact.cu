// Decode attention's exact rows (frugal/attention.h, "Exact rows"): one warp per output row attends
// the row's f16 sink and window tokens (f32 arithmetic, four tokens a step), then merges that
// softmax state with the codes' (their output and LSE, which the kernel before it left in the
// workspace) and stores the row. Launched as a programmatic dependent: the f16 tokens are read while
// the kernel before it finishes; only the merge waits for it. Bytes: the f16 rows attended, once.
#include <cstdint>
#include <vector>

#include "core/attention_backend.h"
#include "core/kv_backend.h"
#include "cuda/attention/device.cuh"
#include "cuda/attention/params.cuh"

namespace frugal::cuda::decode {

namespace {

constexpr int kExactWarps = 4;
constexpr int kTokensPerStep = 4;

struct ExactParams {
  const void* q;
  int q_dtype, out_dtype;
  int64_t q_stride_b, q_stride_h;
  const __half* k;
  const __half* v;
  const float* part_out;  // [B·Hq, D]: the codes' attention
  const float* part_lse;  // [B·Hq] natural log
  void* out;
  int q_heads, kv_heads, group, dim, sinks, window;
  int64_t rows_total;         // B·Hq
  float scale_log2;           // softmax_scale · log2(e)
  const int64_t* ranges_dev;  // [B][3] (sink_end, win_begin, win_end) when B > kInlineBatch, else nullptr
  int64_t ranges[3 * kInlineBatch];
};

template <int DPL>
__device__ __forceinline__ void load_halves(const __half* p, float (&x)[DPL]) {
  if constexpr (DPL == 1) {
    x[0] = __half2float(p[0]);
  } else {
    uint32_t w[DPL / 2];
    load_words<DPL * 2>(reinterpret_cast<const uint8_t*>(p), w);
#pragma unroll
    for (int i = 0; i < DPL / 2; ++i) {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
      x[2 * i] = f.x;
      x[2 * i + 1] = f.y;
    }
  }
}

// DPL: the dims a lane holds, max(1, D / 32) (lanes at or past D idle when D < 32).
template <int DPL>
__global__ void __launch_bounds__(kExactWarps * 32) kernel_exact(const __grid_constant__ ExactParams p) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kExactWarps + (threadIdx.x >> 5);
  if (row >= p.rows_total) return;  // whole warps: the kernel has no block-wide barrier
  const int64_t b = row / p.q_heads;
  const int h = static_cast<int>(row % p.q_heads);
  const int d0 = lane * DPL;
  const bool on = d0 < p.dim;
  float q[DPL];
#pragma unroll
  for (int j = 0; j < DPL; ++j)
    q[j] = on ? load_elem(p.q, p.q_dtype, b * p.q_stride_b + h * p.q_stride_h + d0 + j) : 0.0f;
  const int64_t* rg = p.ranges_dev ? p.ranges_dev + 3 * b : p.ranges + 3 * b;
  const int64_t sink_end = rg[0], win_begin = rg[1], win_end = rg[2];
  const int64_t n = sink_end + (win_end - win_begin);
  const int64_t head_rows = (b * p.kv_heads + h / p.group) * static_cast<int64_t>(p.sinks + p.window);

  float m = kNegInf, l = 0.0f, acc[DPL];
#pragma unroll
  for (int j = 0; j < DPL; ++j) acc[j] = 0.0f;
  for (int64_t i0 = 0; i0 < n; i0 += kTokensPerStep) {
    float s[kTokensPerStep], vv[kTokensPerStep][DPL];
#pragma unroll
    for (int u = 0; u < kTokensPerStep; ++u) {
      const int64_t i = i0 + u;
      float kk[DPL];
      if (i < n && on) {
        const int64_t t = i < sink_end ? i : win_begin + (i - sink_end);
        const int64_t r = (head_rows + kv::backend::exact_row(t, p.sinks, p.window)) * p.dim + d0;
        load_halves<DPL>(p.k + r, kk);
        load_halves<DPL>(p.v + r, vv[u]);
      } else {
#pragma unroll
        for (int j = 0; j < DPL; ++j) kk[j] = vv[u][j] = 0.0f;
      }
      float dot = 0.0f;
#pragma unroll
      for (int j = 0; j < DPL; ++j) dot = fmaf(q[j], kk[j], dot);
      s[u] = dot;
    }
    float m_new = m;
#pragma unroll
    for (int u = 0; u < kTokensPerStep; ++u) {
      s[u] = i0 + u < n ? warp_sum(s[u]) * p.scale_log2 : kNegInf;
      m_new = max_nan(m_new, s[u]);
    }
    const float corr = exp2f(m - m_new);  // 0 while m = −∞; NaN once a score is NaN
    l *= corr;
#pragma unroll
    for (int j = 0; j < DPL; ++j) acc[j] *= corr;
#pragma unroll
    for (int u = 0; u < kTokensPerStep; ++u) {
      const float w = exp2f(s[u] - m_new);  // 0 for the steps past n
      l += w;
#pragma unroll
      for (int j = 0; j < DPL; ++j) acc[j] = fmaf(w, vv[u][j], acc[j]);
    }
    m = m_new;
  }

  grid_dependency_wait();  // the codes' output and LSE
  const float lq = p.part_lse[row] * kLog2e;
  const float le = l > 0.0f ? m + log2f(l) : (isnan(m) ? m : kNegInf);
  const float M = max_nan(lq, le);
  const float wq = lq == kNegInf ? 0.0f : exp2f(lq - M);
  const float we = le == kNegInf ? 0.0f : exp2f(m - M);
  const float inv = M == kNegInf ? 0.0f : 1.0f / (wq + l * we);
  if (!on) return;
  const float* oq = p.part_out + row * p.dim + d0;
#pragma unroll
  for (int j = 0; j < DPL; ++j) {
    const float o = M == kNegInf ? 0.0f : (wq * oq[j] + we * acc[j]) * inv;
    store_elem(p.out, p.out_dtype, row * p.dim + d0 + j, o);
  }
}

}  // namespace

void upload_exact_ranges(const attention::backend::DecodeArgs& a, int64_t* ranges_dev, cudaStream_t stream) {
  const attention::backend::ExactArgs& e = *a.exact;
  std::vector<int64_t> ranges(3 * static_cast<size_t>(a.batch));
  for (int b = 0; b < a.batch; ++b) {
    ranges[3 * b] = e.sink_end[b];
    ranges[3 * b + 1] = e.win_begin[b];
    ranges[3 * b + 2] = e.win_end[b];
  }
  FRUGAL_CUDA_CHECK(
      cudaMemcpyAsync(ranges_dev, ranges.data(), ranges.size() * sizeof(int64_t), cudaMemcpyHostToDevice, stream));
}

void launch_exact(const attention::backend::DecodeArgs& a, const float* part_out, const float* part_lse,
                  const int64_t* ranges_dev, cudaStream_t stream) {
  const attention::backend::ExactArgs& e = *a.exact;
  ExactParams p{};
  p.q = a.q;
  p.q_dtype = dtype_code(a.q_dtype);
  p.out_dtype = dtype_code(a.out_dtype);
  p.q_stride_b = a.q_stride_b;
  p.q_stride_h = a.q_stride_h;
  p.k = reinterpret_cast<const __half*>(e.k);
  p.v = reinterpret_cast<const __half*>(e.v);
  p.part_out = part_out;
  p.part_lse = part_lse;
  p.out = a.out;
  p.q_heads = a.q_heads;
  p.kv_heads = a.kv_heads;
  p.group = a.q_heads / a.kv_heads;
  p.dim = a.dim;
  p.sinks = e.sinks;
  p.window = e.window;
  p.rows_total = static_cast<int64_t>(a.batch) * a.q_heads;
  p.scale_log2 = a.softmax_scale * kLog2e;
  p.ranges_dev = ranges_dev;
  if (!ranges_dev) {
    for (int b = 0; b < a.batch; ++b) {
      p.ranges[3 * b] = e.sink_end[b];
      p.ranges[3 * b + 1] = e.win_begin[b];
      p.ranges[3 * b + 2] = e.win_end[b];
    }
  }
  const int dpl = a.dim >= 32 ? a.dim / 32 : 1;
  void (*fn)(ExactParams) = dpl == 1   ? kernel_exact<1>
                            : dpl == 2 ? kernel_exact<2>
                            : dpl == 4 ? kernel_exact<4>
                            : dpl == 8 ? kernel_exact<8>
                                       : kernel_exact<16>;
  const auto blocks = static_cast<unsigned>((p.rows_total + kExactWarps - 1) / kExactWarps);
  FRUGAL_CUDA_CHECK(launch_kernel(fn, dim3(blocks), dim3(kExactWarps * 32), 0, stream, true, p));
  FRUGAL_CUDA_CHECK_LAUNCH();
}

}  // namespace frugal::cuda::decode
