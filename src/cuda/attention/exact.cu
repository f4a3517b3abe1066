// Decode attention's exact rows (frugal/attention.h, "Exact rows"): one block per (sequence, K/V
// head, tile of ≤ 8 query heads) attends the f16 sink and window tokens of its heads in chunks of
// kExactThreads tokens (a thread a token for the scores, every K row's load in flight at once; then
// threads over dims and token groups for V), in f32, then merges that softmax state with the codes'
// (their output and LSE, which the kernel before it left in the workspace) and stores the rows.
// Launched as a programmatic dependent: the f16 tokens are read while the kernel before it
// finishes; only the merge waits for it. Bytes: the f16 rows attended, once per head tile.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/attention_backend.h"
#include "core/kv_backend.h"
#include "cuda/attention/device.cuh"
#include "cuda/attention/params.cuh"

namespace frugal::cuda::decode {

namespace {

constexpr int kExactThreads = 256;
constexpr int kKeyPiece = 64;   // halves of a K row loaded together
constexpr int kValueBatch = 8;  // V rows a thread loads together

struct ExactParams {
  const void* q;
  int q_dtype, out_dtype;
  int64_t q_stride_b, q_stride_h;
  const __half* k;
  const __half* v;
  const float* part_out;  // [B·Hq, D]: the codes' attention
  const float* part_lse;  // [B·Hq] natural log
  void* out;
  int q_heads, kv_heads, group, head_tiles, dim, sinks, window;
  float scale_log2;           // softmax_scale · log2(e)
  const int64_t* ranges_dev;  // [B][3] (sink_end, win_begin, win_end) when B > kInlineBatch, else nullptr
  int64_t ranges[3 * kInlineBatch];
};

// Shared memory: q [8][D], the chunk's scores then weights [8][kExactThreads], the running (m, l)
// and the chunk's rescale per head, and the token groups' partial O [2·kExactThreads / D][8][D].
__host__ __device__ constexpr int exact_smem_floats(int dim) {
  return kHeadsPerBlock * dim + kHeadsPerBlock * kExactThreads + 3 * kHeadsPerBlock + 2 * kExactThreads * kHeadsPerBlock;
}

__global__ void __launch_bounds__(kExactThreads) kernel_exact(const __grid_constant__ ExactParams p) {
  extern __shared__ float sm[];
  const int D = p.dim, tid = threadIdx.x;
  const int64_t b = blockIdx.z;
  const int hk = blockIdx.y / p.head_tiles, tile = blockIdx.y % p.head_tiles;
  const int hq0 = hk * p.group + tile * kHeadsPerBlock;
  const int G = min(kHeadsPerBlock, p.group - tile * kHeadsPerBlock);
  float* qs = sm;                                     // [8][D], times scale_log2
  float* sc = qs + kHeadsPerBlock * D;                // [8][kExactThreads]
  float* mrun = sc + kHeadsPerBlock * kExactThreads;  // [8]
  float* lrun = mrun + kHeadsPerBlock;                // [8]
  float* corr = lrun + kHeadsPerBlock;                // [8]
  float* part = corr + kHeadsPerBlock;                // [groups][8][D]
  for (int i = tid; i < G * D; i += kExactThreads) {
    const int g = i / D, d = i - g * D;
    qs[i] = load_elem(p.q, p.q_dtype, b * p.q_stride_b + (hq0 + g) * p.q_stride_h + d) * p.scale_log2;
  }
  if (tid < kHeadsPerBlock) {
    mrun[tid] = kNegInf;
    lrun[tid] = 0.0f;
  }
  const int64_t* rg = p.ranges_dev ? p.ranges_dev + 3 * b : p.ranges + 3 * b;
  const int64_t sink_end = rg[0], win_begin = rg[1], win_end = rg[2];
  const int64_t n = sink_end + (win_end - win_begin);
  const int64_t head_rows = (b * p.kv_heads + hk) * static_cast<int64_t>(p.sinks + p.window);
  auto row_of = [&](int64_t i) {
    const int64_t t = i < sink_end ? i : win_begin + (i - sink_end);
    return (head_rows + kv::backend::exact_row(t, p.sinks, p.window)) * D;
  };
  // The V pass: thread = (token group tg, dims 2·j2 and 2·j2 + 1), D/2 ≤ kExactThreads threads a group.
  const int pairs = D / 2, groups = kExactThreads / pairs;
  const int tg = tid / pairs, j2 = tid - tg * pairs;
  float acc[kHeadsPerBlock][2];
#pragma unroll
  for (int g = 0; g < kHeadsPerBlock; ++g) acc[g][0] = acc[g][1] = 0.0f;
  __syncthreads();

  for (int64_t c0 = 0; c0 < n; c0 += kExactThreads) {
    const int count = static_cast<int>(n - c0 < kExactThreads ? n - c0 : kExactThreads);
    // Scores: thread tid takes token c0 + tid (its K row in half2 loads, all in flight).
    float s[kHeadsPerBlock];
#pragma unroll
    for (int g = 0; g < kHeadsPerBlock; ++g) s[g] = 0.0f;
    if (tid < count) {
      const __half* kr = p.k + row_of(c0 + tid);
      // The row in pieces of up to 16 × 16 bytes, each piece's loads issued before its products.
      for (int d0 = 0; d0 < D; d0 += kKeyPiece) {
        uint2 w[kKeyPiece / 4];  // 4 halves each
#pragma unroll
        for (int j = 0; j < kKeyPiece / 4; ++j)
          if (d0 + 4 * j < D) w[j] = __ldg(reinterpret_cast<const uint2*>(kr + d0) + j);
#pragma unroll
        for (int j = 0; j < kKeyPiece / 4; ++j) {
          if (d0 + 4 * j >= D) break;
          const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&w[j].x));
          const float2 c = __half22float2(*reinterpret_cast<const __half2*>(&w[j].y));
          const float* qd = qs + d0 + 4 * j;
#pragma unroll
          for (int g = 0; g < kHeadsPerBlock; ++g)
            if (g < G)
              s[g] = fmaf(qd[g * D], a.x, fmaf(qd[g * D + 1], a.y, fmaf(qd[g * D + 2], c.x, fmaf(qd[g * D + 3], c.y, s[g]))));
        }
      }
    }
#pragma unroll
    for (int g = 0; g < kHeadsPerBlock; ++g)
      if (g < G) sc[g * kExactThreads + tid] = tid < count ? s[g] : kNegInf;
    __syncthreads();
    // Per head (warp g): the chunk's max, the running (m, l), the weights in place of the scores.
    const int warp = tid >> 5, lane = tid & 31;
    if (warp < G) {
      float* row = sc + warp * kExactThreads;
      float mx = kNegInf;
      for (int i = lane; i < kExactThreads; i += 32) mx = max_nan(mx, row[i]);
      mx = warp_max_nan(mx);
      const float m_old = mrun[warp], m_new = max_nan(m_old, mx);
      float l = 0.0f;
      for (int i = lane; i < kExactThreads; i += 32) {
        const float w = exp2f(row[i] - m_new);  // 0 past count (−∞), NaN once a score is
        row[i] = w;
        l += w;
      }
      l = warp_sum(l);
      __syncwarp();  // every lane has read mrun[warp] before lane 0 writes it
      if (lane == 0) {
        const float c = exp2f(m_old - m_new);  // 0 while m was −∞
        corr[warp] = c;
        lrun[warp] = lrun[warp] * c + l;
        mrun[warp] = m_new;
      }
    }
    __syncthreads();
    // V: token group tg takes tokens tg, tg + groups, ... of the chunk, kValueBatch at a time; its dims 2·j2, 2·j2 + 1.
#pragma unroll
    for (int g = 0; g < kHeadsPerBlock; ++g) {
      const float c = g < G ? corr[g] : 0.0f;
      acc[g][0] *= c;
      acc[g][1] *= c;
    }
    for (int i0 = tg; i0 < count; i0 += kValueBatch * groups) {
      float2 vv[kValueBatch];  // kValueBatch tokens' loads in flight together
#pragma unroll
      for (int u = 0; u < kValueBatch; ++u) {
        const int i = i0 + u * groups;
        vv[u] = i < count ? __half22float2(*reinterpret_cast<const __half2*>(p.v + row_of(c0 + i) + 2 * j2))
                          : make_float2(0.0f, 0.0f);
      }
#pragma unroll
      for (int u = 0; u < kValueBatch; ++u) {
        const int i = min(i0 + u * groups, kExactThreads - 1);  // past count: vv is 0 (and the weight 0)
#pragma unroll
        for (int g = 0; g < kHeadsPerBlock; ++g) {
          const float w = g < G ? sc[g * kExactThreads + i] : 0.0f;
          acc[g][0] = fmaf(w, vv[u].x, acc[g][0]);
          acc[g][1] = fmaf(w, vv[u].y, acc[g][1]);
        }
      }
    }
    __syncthreads();  // the weights are read before the next chunk's scores overwrite them
  }
  // The token groups' sums, in a fixed order.
  for (int g = 0; g < G; ++g) {
    part[(tg * kHeadsPerBlock + g) * D + 2 * j2] = acc[g][0];
    part[(tg * kHeadsPerBlock + g) * D + 2 * j2 + 1] = acc[g][1];
  }
  __syncthreads();

  grid_dependency_wait();  // the codes' output and LSE
  for (int i = tid; i < G * D; i += kExactThreads) {
    const int g = i / D, d = i - g * D;
    float o = 0.0f;
    for (int k = 0; k < groups; ++k) o += part[(k * kHeadsPerBlock + g) * D + d];
    const int64_t row = b * p.q_heads + hq0 + g;
    const float m = mrun[g], l = lrun[g];
    const float lq = p.part_lse[row] * kLog2e;
    const float le = l > 0.0f ? m + log2f(l) : (isnan(m) || isnan(l) ? __int_as_float(0x7fc00000) : kNegInf);
    const float M = max_nan(lq, le);
    float r = 0.0f;
    if (M != kNegInf) {
      const float wq = lq == kNegInf ? 0.0f : exp2f(lq - M);
      const float we = le == kNegInf ? 0.0f : exp2f(m - M);
      r = (wq * p.part_out[row * D + d] + we * o) / (wq + l * we);
    }
    store_elem(p.out, p.out_dtype, row * D + d, r);
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
  p.head_tiles = attention::backend::head_tiles(p.group);
  p.dim = a.dim;
  p.sinks = e.sinks;
  p.window = e.window;
  p.scale_log2 = a.softmax_scale * kLog2e;
  p.ranges_dev = ranges_dev;
  if (!ranges_dev) {
    for (int b = 0; b < a.batch; ++b) {
      p.ranges[3 * b] = e.sink_end[b];
      p.ranges[3 * b + 1] = e.win_begin[b];
      p.ranges[3 * b + 2] = e.win_end[b];
    }
  }
  const int smem = exact_smem_floats(a.dim) * static_cast<int>(sizeof(float));  // ≤ 41 KB (D ≤ 512): under the default 48 KB
  const dim3 grid(1, static_cast<unsigned>(a.kv_heads * p.head_tiles), static_cast<unsigned>(a.batch));
  FRUGAL_CUDA_CHECK(launch_kernel(kernel_exact, grid, dim3(kExactThreads), static_cast<size_t>(smem), stream, true, p));
  FRUGAL_CUDA_CHECK_LAUNCH();
}

}  // namespace frugal::cuda::decode
