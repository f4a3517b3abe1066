// The dequantize of the KV cache on a GPU: ŷ = scale·c[idx]/√D, x̂ = s ⊙ FWHT(ŷ)/√D per vector,
// bit-exact with src/cpu/kv.cpp. Bytes floor: the packed row and its scale read once (D·bits/8 +
// the scale's 4 or 2 bytes per vector), x̂ written once (D·sizeof(T)). One kernel (its chunk width
// follows D).
#include "core/kv_backend.h"
#include "cuda/common.cuh"
#include "cuda/kv/kv.cuh"
#include "cuda/scales.cuh"

namespace frugal::cuda {

namespace {

using namespace kvdev;
using kv::backend::DequantizeArgs;

struct DequantParams {
  const uint8_t* packed;
  ScalePtr scales;
  void* out;
  int64_t total;  // count · heads vectors
  int64_t capacity, first_slot;
  const int32_t* slots;  // paged pools: device [count] slot of each token, or null
  int heads, dim, bits, g;
  bool sliding, aligned, small_index;
  FastDiv by_heads;
  const float* signs;
  const float* centroids;
  float inv_sqrt_dim;
};

// ŷ = scale·c[idx]/√D, x̂ = s ⊙ FWHT(ŷ)/√D, in the CPU's order of f32 operations.
template <typename T, int C>
__global__ void __launch_bounds__(512) kernel_dequantize(const __grid_constant__ DequantParams p) {
  const int g = p.g, bits = p.bits;
  const int tid = threadIdx.x, nthreads = blockDim.x;
  const int t = tid & (g - 1), group = tid / g, vpb = nthreads / g;
  const SmemLayout lay = smem_layout(0, bits, nthreads, C, g > 32);
  unsigned char* smem = dynamic_smem();
  auto* cents = reinterpret_cast<float*>(smem + lay.centroids);
  auto* xbuf = reinterpret_cast<float*>(smem + lay.xbuf);
  for (int i = tid; i < (1 << bits); i += nthreads) cents[i] = p.centroids[i];
  uint32_t sign_mask = 0;
  if (p.signs)
#pragma unroll
    for (int e = 0; e < C; ++e)
      if (p.signs[t * C + e] < 0.0f) sign_mask |= 1u << e;
  __syncthreads();

  const int row_bytes = p.dim * bits / 8, chunk_bytes = C * bits / 8;
  const unsigned mask = (1u << bits) - 1u;
  const int64_t tiles = (p.total + vpb - 1) / vpb;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t v = tile * vpb + group;
    const bool active = v < p.total;
    int64_t tok = 0;
    int h = 0;
    if (active) {
      if (p.small_index) {
        const uint32_t vv = static_cast<uint32_t>(v), r = p.by_heads.div(vv);
        tok = r;
        h = static_cast<int>(vv - r * static_cast<uint32_t>(p.heads));
      } else {
        tok = v / p.heads;
        h = static_cast<int>(v - tok * p.heads);
      }
    }
    float y[C];
    if (active) {
      int64_t slot = p.slots ? p.slots[tok] : p.first_slot + tok;
      if (p.sliding && slot >= p.capacity) slot -= p.capacity;
      const int64_t row = static_cast<int64_t>(h) * p.capacity + slot;
      const CodeWord word = load_codes<C>(p.packed + row * row_bytes + t * chunk_bytes, bits);
      const float s = __fmul_rn(p.scales[row], p.inv_sqrt_dim);
#pragma unroll
      for (int e = 0; e < C; ++e) y[e] = __fmul_rn(s, cents[word.get(e * bits, mask)]);
    } else {
#pragma unroll
      for (int e = 0; e < C; ++e) y[e] = 0.0f;
    }
    fwht<C, 1>(y, g, t, xbuf, tid, nthreads);
    if (active) {
#pragma unroll
      for (int e = 0; e < C; ++e) {
        y[e] = __fmul_rn(y[e], p.inv_sqrt_dim);
        if (p.signs) y[e] = apply_sign(y[e], sign_mask, e);
      }
      store_chunk<T, C>(static_cast<T*>(p.out) + v * p.dim + t * C, p.aligned, y);
    }
  }
}

}  // namespace

void kv_dequantize(const DequantizeArgs& a, Stream stream) {
  DeviceGuard guard(a.device);
  DequantParams p{};
  p.packed = a.packed;
  p.scales = scale_ptr(a.scales, a.scales_f16);
  p.out = a.out;
  p.total = a.count * a.heads;
  p.capacity = a.capacity;
  p.first_slot = a.sliding ? a.begin % a.capacity : a.begin;
  p.slots = a.slots;
  p.heads = a.heads;
  p.dim = a.dim;
  p.bits = a.bits;
  p.sliding = a.sliding;
  p.small_index = p.total < (int64_t{1} << 31);
  if (p.small_index) p.by_heads = FastDiv::make(static_cast<uint32_t>(a.heads));
  p.signs = a.signs;
  p.centroids = a.centroids;
  p.inv_sqrt_dim = kv::backend::inv_sqrt_dim(a.dim);
  const int chunk = a.dim == 4 ? 4 : 8;
  p.g = a.dim / chunk;
  const int nthreads = std::max(256, p.g);
  const SmemLayout lay = smem_layout(0, a.bits, nthreads, chunk, p.g > 32);
  const int64_t tiles = (p.total + nthreads / p.g - 1) / (nthreads / p.g);
  const int blocks = blocks_for(tiles, 2048 / nthreads, a.device);
  dispatch_float(a.out_dtype, "kv::dequantize", [&]<typename T>() {
    p.aligned = is_aligned(a.out, std::min<int>(16, chunk * sizeof(T)));
    if (chunk == 4)
      kernel_dequantize<T, 4><<<blocks, nthreads, lay.total, to_cuda(stream)>>>(p);
    else
      kernel_dequantize<T, 8><<<blocks, nthreads, lay.total, to_cuda(stream)>>>(p);
    FRUGAL_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace frugal::cuda
