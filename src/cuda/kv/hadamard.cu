// The orthonormal fast Walsh–Hadamard transform of f32 rows on a GPU (out = FWHT(x)/√D, in place
// allowed), bit-exact with src/cpu/kv.cpp. Bytes floor: 4·D read and 4·D written per row. One kernel
// (its chunk width follows D).
#include "core/kv_backend.h"
#include "cuda/common.cuh"
#include "cuda/kv/kv.cuh"

namespace frugal::cuda {

namespace {

using namespace kvdev;

template <int C>
__global__ void __launch_bounds__(512)
    kernel_hadamard(const float* x, float* out, int64_t rows, int dim, int g, float inv, bool aligned) {
  const int tid = threadIdx.x, nthreads = blockDim.x;
  const int t = tid & (g - 1), group = tid / g, vpb = nthreads / g;
  float* xbuf = reinterpret_cast<float*>(dynamic_smem());
  const int64_t tiles = (rows + vpb - 1) / vpb;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t r = tile * vpb + group;
    const bool active = r < rows;
    float v[C];
    if (active) {
      load_chunk<float, C>(x + r * dim + t * C, aligned, v);
    } else {
#pragma unroll
      for (int e = 0; e < C; ++e) v[e] = 0.0f;
    }
    fwht<C, 1>(v, g, t, xbuf, tid, nthreads);  // every load of the row precedes every store (in place)
#pragma unroll
    for (int e = 0; e < C; ++e) v[e] = __fmul_rn(v[e], inv);
    if (active) store_chunk<float, C>(out + r * dim + t * C, aligned, v);
  }
}

}  // namespace

void hadamard_transform(const float* x, float* out, int64_t rows, int dim, int device, Stream stream) {
  DeviceGuard guard(device);
  const int chunk = dim == 4 ? 4 : 8;
  const int g = dim / chunk, nthreads = std::max(256, g);
  const int smem = g > 32 ? nthreads * chunk * 4 : 0;
  const int64_t tiles = (rows + nthreads / g - 1) / (nthreads / g);
  const int blocks = blocks_for(tiles, 2048 / nthreads, device);
  const bool aligned = is_aligned(x, 16) && is_aligned(out, 16);
  if (chunk == 4) {
    kernel_hadamard<4><<<blocks, nthreads, smem, to_cuda(stream)>>>(x, out, rows, dim, g, kv::backend::inv_sqrt_dim(dim), aligned);
  } else {
    kernel_hadamard<8><<<blocks, nthreads, smem, to_cuda(stream)>>>(x, out, rows, dim, g, kv::backend::inv_sqrt_dim(dim), aligned);
  }
  FRUGAL_CUDA_CHECK_LAUNCH();
}

}  // namespace frugal::cuda
