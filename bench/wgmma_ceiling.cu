// The rate of Hopper's warpgroup MMA (wgmma.mma_async, f16 in, f32 accumulate) in the sparse conv's
// step shape: each warpgroup, step after step, issues BK / 16 = 4 wgmmas m64nNk16 on one accumulator
// set, commits them as a group and waits until at most DEPTH groups are in flight (the conv keeps 1).
// A comes from shared memory (ss: the gather kernels) or from registers (rs: the halo kernel, which
// reads its A fragments with ldmatrix); B is an N-major 64 × N slice in shared memory, as the conv's
// weight stage. No loads, no barriers, no gathers: what the tensor pipe gives this instruction shape
// at a given number of warpgroups a multiprocessor, against which a conv kernel's main loop is read.
// Usage: wgmma_ceiling [steps]; one line per variant (TFLOP/s counted as 2 · 64 · N · 64 a step).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "event_timing.h"

namespace {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ uint64_t desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((addr >> 4) & 0x3fff) | static_cast<uint64_t>((lbo >> 4) & 0x3fff) << 16 |
         static_cast<uint64_t>((sbo >> 4) & 0x3fff) << 32 | uint64_t{1} << 62;
}

#define ACC8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define ACC32(i) ACC8(i), ACC8(i + 8), ACC8(i + 16), ACC8(i + 24)
#define R0 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define R1 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define R2 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define R3 "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"

template <int N> __device__ void ss(float (&d)[N / 2], uint64_t da, uint64_t db);
template <int N> __device__ void rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db);
#define SS(N, REGS, DA, DB, ...)                                                                                    \
  template <> __device__ __forceinline__ void ss<N>(float(&d)[N / 2], uint64_t da, uint64_t db) {                  \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned.m64n" #N "k16.f32.f16.f16 {" REGS "}, %" #DA ", %" #DB ", p, 1, 1, 0, 1;\n}\n" \
                 : __VA_ARGS__ : "l"(da), "l"(db));                                                               \
  }
#define RS(N, REGS, A0, A1, A2, A3, DB, ...)                                                                        \
  template <> __device__ __forceinline__ void rs<N>(float(&d)[N / 2], const uint32_t(&a)[4], uint64_t db) {       \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned.m64n" #N "k16.f32.f16.f16 {" REGS "}, {%" #A0 ", %" #A1 ", %" #A2    \
                 ", %" #A3 "}, %" #DB ", p, 1, 1, 1;\n}\n"                                                            \
                 : __VA_ARGS__ : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));                             \
  }
SS(64, R0, 32, 33, ACC32(0))
SS(128, R0 ", " R1, 64, 65, ACC32(0), ACC32(32))
SS(256, R0 ", " R1 ", " R2 ", " R3, 128, 129, ACC32(0), ACC32(32), ACC32(64), ACC32(96))
RS(64, R0, 32, 33, 34, 35, 36, ACC32(0))
RS(128, R0 ", " R1, 64, 65, 66, 67, 68, ACC32(0), ACC32(32))
RS(256, R0 ", " R1 ", " R2 ", " R3, 128, 129, 130, 131, 132, ACC32(0), ACC32(32), ACC32(64), ACC32(96))
#endif

// One block: WG warpgroups, each with its own 64 × 64 A tile; one shared 64 × N B slice.
template <int N, bool RS_, int DEPTH, bool LDSM = false>
__global__ void kernel(int steps, float* sink) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem[];
  const int wg = threadIdx.x / 128, wgs = blockDim.x / 128;
  for (int i = threadIdx.x; i < (wgs * 8192 + 64 * N * 2) / 4; i += blockDim.x)
    reinterpret_cast<uint32_t*>(smem)[i] = 0x3c003c00u ^ (i * 0x00010001u & 0x03ff03ffu);  // values near 1
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t a_tile = base + wg * 8192, b_tile = base + wgs * 8192;
  float d[N / 2];
  for (int i = 0; i < N / 2; ++i) d[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < N / 2; ++i) asm volatile("" : "+f"(d[i])::"memory");
  uint32_t a[4][4];
  for (int kk = 0; kk < 4; ++kk)
    for (int j = 0; j < 4; ++j) a[kk][j] = 0x3c003c00u ^ ((threadIdx.x + kk * 4 + j) & 0x3ff);
  // ldsm: this lane's row of its warp's 16 in the warpgroup's A tile (lanes 16-31: the second 8 channels)
  const int lrow = (threadIdx.x % 128) / 32 * 16 + threadIdx.x % 16, half = threadIdx.x % 32 / 16;
  uint32_t b[4][4];
  for (int s = 0; s < steps; ++s) {
    if constexpr (LDSM) {  // the halo kernel's step: this step's fragments were loaded during the last
      uint32_t(&cur)[4][4] = (s & 1) ? b : a;
      asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
      for (int i = 0; i < N / 2; ++i) asm volatile("" : "+f"(d[i])::"memory");
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) rs<N>(d, cur[kk], desc(b_tile + kk * 2048, 8192, 1024));
#pragma unroll
      for (int i = 0; i < N / 2; ++i) asm volatile("" : "+f"(d[i])::"memory");
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
      uint32_t(&next)[4][4] = (s & 1) ? a : b;
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(next[kk][0]), "=r"(next[kk][1]), "=r"(next[kk][2]), "=r"(next[kk][3])
                     : "r"(a_tile + lrow * 128 + (((kk * 2 + half) ^ (lrow & 7)) << 4)));
      continue;
    }
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int i = 0; i < N / 2; ++i) asm volatile("" : "+f"(d[i])::"memory");
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const uint64_t db = desc(b_tile + kk * 2048, 8192, 1024);
      if constexpr (RS_) rs<N>(d, a[kk], db);
      else ss<N>(d, desc(a_tile + kk * 32, 16, 1024), db);
    }
#pragma unroll
    for (int i = 0; i < N / 2; ++i) asm volatile("" : "+f"(d[i])::"memory");
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(DEPTH) : "memory");
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
  for (int i = 0; i < N / 2; ++i) asm volatile("" : "+f"(d[i])::"memory");
  float t = 0.0f;
#pragma unroll
  for (int i = 0; i < N / 2; ++i) t += d[i];
  if (t == 12345.678f) *sink = t;  // keeps the accumulators alive
#endif
}

template <int N, bool RS_, int DEPTH, bool LDSM = false>
void measure(int wg_per_block, int blocks_per_sm, int sms, int steps, float* sink) {
  auto k = kernel<N, RS_, DEPTH, LDSM>;
  const int smem = wg_per_block * 8192 + 64 * N * 2 + 1024;
  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  // Pad the shared memory so that exactly blocks_per_sm blocks fit a multiprocessor.
  const int pad = std::max(smem, 227 * 1024 / blocks_per_sm - 1024);
  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, pad);
  const dim3 grid(sms * blocks_per_sm), block(128 * wg_per_block);
  const double ms = median_event_ms(5, [&] { k<<<grid, block, pad>>>(steps, sink); });
  const cudaError_t err = cudaGetLastError();
  const double flop = 2.0 * 64 * N * 64 * steps * double(wg_per_block) * blocks_per_sm * sms;
  std::printf("%s%s N=%3d depth=%d  wg/block=%d blocks/SM=%d (wg/SM=%d)  %8.3f ms  %6.1f TFLOP/s%s\n", RS_ ? "rs" : "ss", LDSM ? "+ldsm" : "", N, DEPTH,
              wg_per_block, blocks_per_sm, wg_per_block * blocks_per_sm, ms, flop / ms / 1e9,
              err == cudaSuccess ? "" : cudaGetErrorString(err));
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 20000;
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  float* sink = nullptr;
  cudaMalloc(&sink, 4);
  for (int wgs : {1, 2, 4}) {  // warpgroups a multiprocessor, as (wg/block, blocks/SM)
    const int wpb = std::min(wgs, 2), bps = wgs / wpb;
    measure<64, true, 1, true>(wpb, bps, sms, steps, sink);
    measure<64, false, 1>(wpb, bps, sms, steps, sink);
    measure<64, true, 1>(wpb, bps, sms, steps, sink);
    measure<64, true, 0>(wpb, bps, sms, steps, sink);
    measure<128, false, 1>(wpb, bps, sms, steps / 2, sink);
    measure<128, true, 1>(wpb, bps, sms, steps / 2, sink);
    measure<256, false, 1>(wpb, bps, sms, steps / 4, sink);
    measure<256, true, 1>(wpb, bps, sms, steps / 4, sink);
  }
  measure<64, true, 1>(4, 1, sms, steps, sink);  // four warpgroups in one block
  measure<64, false, 1>(4, 1, sms, steps, sink);
  return 0;
}
