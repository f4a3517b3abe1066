// The ceiling of mma.sync m16n8k16 (f16 in, f32 accumulate) on this GPU, for the sparse conv's warp
// tile (64 rows × 64 channels a warp, 8 warps a block, as kernel_conv_mma at BN = 256):
//   regs: fragments held in registers, only the mmas (the tensor pipe's issue limit);
//   ldsm: each 16-deep slice reloads its fragments from shared memory with ldmatrix (4 A + 4 B
//         x4 loads per 32 mmas, as the conv's inner loop), double-buffered, no barriers, no gathers.
// The gap between these and the conv's rate is what its gathers, barriers and skipping cost.
// Usage: mma_ceiling [iterations]; prints one line per variant.
#include <cuda_fp16.h>

#include <cstdio>
#include <cstdlib>

#include "event_timing.h"

namespace {

constexpr int kMI = 4, kNI = 8, kThreads = 256, kLds = 64 + 8;  // smem tile 64 × 64 + 8 padding

__device__ __forceinline__ void mma(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void ldsm(unsigned (&r)[4], const void* p, bool trans) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(p));
  if (trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}

template <bool kLdsm>
__global__ void __launch_bounds__(kThreads, 1) kernel(int iters, float* out) {
  __shared__ __align__(16) __half tile[2][64 * kLds];  // A-like and B-like 64 × 64 tiles
  for (int i = threadIdx.x; i < 2 * 64 * kLds; i += kThreads) (&tile[0][0])[i] = __float2half(0.001f * (i % 7));
  __syncthreads();
  const int lane = threadIdx.x % 32;
  float acc[kMI][kNI][4] = {};
  unsigned a[2][kMI][4], b[2][kNI / 2][4];
  auto load = [&](int buf, int kk) {
#pragma unroll
    for (int i = 0; i < kMI; ++i) ldsm(a[buf][i], &tile[0][(i * 16 + (lane & 15)) * kLds + kk + (lane >> 4) * 8], false);
#pragma unroll
    for (int j = 0; j < kNI / 2; ++j) ldsm(b[buf][j], &tile[1][(kk + (lane & 15)) * kLds + j * 16 + (lane >> 4) * 8], true);
  };
  load(0, 0);
  load(1, 16);
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const int cur = kk % 2;
      if (kLdsm && kk < 3) load(1 - cur, (kk + 1) * 16);
#pragma unroll
      for (int i = 0; i < kMI; ++i)
#pragma unroll
        for (int j = 0; j < kNI; ++j) mma(acc[i][j], a[cur][i], b[cur][j / 2][j % 2 * 2], b[cur][j / 2][j % 2 * 2 + 1]);
      if (kLdsm && kk == 3) load(0, 0);
    }
  }
  float s = 0;
#pragma unroll
  for (int i = 0; i < kMI; ++i)
#pragma unroll
    for (int j = 0; j < kNI; ++j) s += acc[i][j][0] + acc[i][j][1] + acc[i][j][2] + acc[i][j][3];
  out[blockIdx.x * kThreads + threadIdx.x] = s;
}

template <bool kLdsm>
void run(const char* name, int iters, int blocks_per_sm, int sms, float* out) {
  const int blocks = sms * blocks_per_sm;
  const double ms = median_event_ms(7, [&] { kernel<kLdsm><<<blocks, kThreads>>>(iters, out); });
  // 8 warps × 4 slices × 32 mmas × 16·8·16·2 FLOP per iteration and block
  const double flop = double(blocks) * iters * 8 * 4 * kMI * kNI * (16.0 * 8 * 16 * 2);
  std::printf("mma.sync %s, %d block(s)/SM of 8 warps: %.3f ms, %.0f TFLOP/s (median of 7); %s\n", name,
              blocks_per_sm, ms, flop / ms / 1e9, cudaGetErrorString(cudaGetLastError()));
}

}  // namespace

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 20000;
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  float* out = nullptr;
  cudaMalloc(&out, sizeof(float) * kThreads * sms * 2);
  run<false>("fragments in registers", iters, 1, sms, out);
  run<false>("fragments in registers", iters, 2, sms, out);
  run<true>("ldmatrix each slice", iters, 1, sms, out);
  run<true>("ldmatrix each slice", iters, 2, sms, out);
  cudaFree(out);
  return 0;
}
