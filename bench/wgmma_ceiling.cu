// The rate of Hopper's warpgroup MMA (wgmma.mma_async, f16 in, f32 accumulate) in the sparse conv's
// step shape: each warpgroup, step after step, issues BK / 16 = 4 wgmmas m64nNk16 on one accumulator
// set, commits them as a group and waits until at most DEPTH groups are in flight (the conv keeps 1).
// A comes from shared memory (ss: the gather kernels) or from registers (rs: the halo kernel, which
// reads its A fragments with ldmatrix); B is an N-major 64 × N slice in shared memory, as the conv's
// weight stage. No loads, no barriers, no gathers: what the tensor pipe gives this instruction shape
// at a given number of warpgroups a multiprocessor, against which a conv kernel's main loop is read.
// Usage: wgmma_ceiling [steps]; one line per variant (TFLOP/s counted as 2 · 64 · N · 64 a step), with
// the SM cycles a step (clock64 around each block's loop, median over blocks): the unit a kernel's
// traced step is read against whatever clock either ran at.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda/mbarrier.cuh"
#include "cuda/wgmma.cuh"

// Outside sm_90a the kernels compile to traps, which leaves their tile constants and helpers unused.
#if defined(__CUDA_ARCH__) && !defined(FRUGAL_WGMMA)
#pragma nv_diag_suppress 177
#endif
#include "event_timing.h"

namespace {

using namespace frugal::cuda;

// The halo kernel's A fragments of one step: this lane's row of its warp's 16 in the warpgroup's 64 × 64
// tile (128-byte rows, 16-byte chunks swizzled by the row; lanes 16–31 the second 8 channels of a k16).
__device__ __forceinline__ void ldsm_a(uint32_t (&f)[4][4], uint32_t tile) {
  const int lrow = (threadIdx.x % 128) / 32 * 16 + threadIdx.x % 16, half = threadIdx.x % 32 / 16;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(f[kk][0]), "=r"(f[kk][1]), "=r"(f[kk][2]), "=r"(f[kk][3])
                 : "r"(tile + lrow * 128 + (((kk * 2 + half) ^ (lrow & 7)) << 4)));
}

// The median over blocks of the SM cycles a step (each block's clock64 span of its loop).
double median_cycles_per_step(const long long* cycles, int blocks, int steps) {
  std::vector<long long> cyc(blocks);
  cudaMemcpy(cyc.data(), cycles, blocks * sizeof(long long), cudaMemcpyDeviceToHost);
  std::nth_element(cyc.begin(), cyc.begin() + cyc.size() / 2, cyc.end());
  return double(cyc[cyc.size() / 2]) / steps;
}

// One block: WG warpgroups, each with its own 64 × 64 A tile; one shared 64 × N B slice.
// LOAD: where the rs variants' A fragments come from each step: 0 the same registers every step; 1
// ldmatrix (the halo kernel); 2 four 16-byte shared loads a lane (lds128: with the tile's channels
// permuted so that a lane's four fragments of a row are 32 contiguous bytes, the weights' rows alike).
// ROT: the A tiles and B slices rotate over ROT copies step by step (the conv's weight ring has 4
// stages and its A rows are all over a halo buffer), against 1: the same addresses every step.
template <int N, bool RS_, int DEPTH, int LOAD = 0, int ROT = 1>
__global__ void kernel(int steps, float* sink, long long* cycles) {
#ifdef FRUGAL_WGMMA
  extern __shared__ __align__(1024) unsigned char smem[];
  const int wg = threadIdx.x / 128, wgs = blockDim.x / 128;
  static_assert((ROT & (ROT - 1)) == 0, "ROT a power of two");
  for (int i = threadIdx.x; i < ROT * (wgs * 8192 + 64 * N * 2) / 4; i += blockDim.x)
    reinterpret_cast<uint32_t*>(smem)[i] = 0x3c003c00u ^ (i * 0x00010001u & 0x03ff03ffu);  // values near 1
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t a_base = base + wg * 8192, b_base = base + ROT * wgs * 8192;
  auto a_at = [&](int s) { return a_base + (s & (ROT - 1)) * wgs * 8192; };
  auto b_at = [&](int s) { return b_base + (s & (ROT - 1)) * (64 * N * 2); };
  float d[N / 2];
  for (int i = 0; i < N / 2; ++i) d[i] = 0.0f;
  fence_acc(d);
  uint32_t a[4][4];
  for (int kk = 0; kk < 4; ++kk)
    for (int j = 0; j < 4; ++j) a[kk][j] = 0x3c003c00u ^ ((threadIdx.x + kk * 4 + j) & 0x3ff);
  uint32_t b[4][4];
  __syncthreads();
  const long long t0 = clock64();
  // The halo kernel's step: this step's fragments (cur) were loaded during the last; this one loads
  // the next step's (next). Two steps an iteration, so that the buffers are named statically.
  auto load_step = [&](int s, uint32_t(&cur)[4][4], uint32_t(&next)[4][4]) {
    wgmma_fence();
    fence_acc(d);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wgmma_rs<__half, N>(d, cur[kk], smem_desc(b_at(s) + kk * 2048, 8192, 1024));
    fence_acc(d);
    wgmma_commit();
    wgmma_wait<1>();
    if constexpr (LOAD == 1) {
      ldsm_a(next, a_at(s + 1));
    } else {
      // Lane (g, t) of its warp's 16 rows: rows g and g + 8, chunks 2t and 2t + 1 (16 bytes each,
      // swizzled by the row); fragment kk takes words 2kk (a0 / a1) and 2kk + 1 (a2 / a3) of them.
      const int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4, r0 = (threadIdx.x % 128) / 32 * 16 + g;
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int r = r0 + 8 * h;
          uint32_t w0, w1, w2, w3;
          asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                       : "=r"(w0), "=r"(w1), "=r"(w2), "=r"(w3)
                       : "r"(a_at(s + 1) + r * 128 + (((2 * t + c) ^ (r & 7)) << 4)));
          next[2 * c][h] = w0, next[2 * c][h + 2] = w1, next[2 * c + 1][h] = w2, next[2 * c + 1][h + 2] = w3;
        }
    }
  };
  for (int s = 0; s < steps; ++s) {
    if constexpr (LOAD > 0) {
      load_step(s, a, b);
      load_step(++s, b, a);
      continue;
    }
    wgmma_fence();
    fence_acc(d);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const uint64_t db = smem_desc(b_at(s) + kk * 2048, 8192, 1024);
      if constexpr (RS_)
        wgmma_rs<__half, N>(d, a[kk], db);
      else
        wgmma_ss<__half, N>(d, smem_desc(a_at(s) + kk * 32, 16, 1024), db);
    }
    fence_acc(d);
    wgmma_commit();
    wgmma_wait<DEPTH>();
  }
  wgmma_wait<0>();
  fence_acc(d);
  __syncthreads();
  if (threadIdx.x == 0) cycles[blockIdx.x] = clock64() - t0;
  float t = 0.0f;
#pragma unroll
  for (int i = 0; i < N / 2; ++i) t += d[i];
  if (t == 12345.678f) *sink = t;  // keeps the accumulators alive
#endif
}

template <int N, bool RS_, int DEPTH, int LOAD = 0, int ROT = 1>
void measure(int wg_per_block, int blocks_per_sm, int sms, int steps, float* sink, long long* cycles) {
  auto k = kernel<N, RS_, DEPTH, LOAD, ROT>;
  const int smem = ROT * (wg_per_block * 8192 + 64 * N * 2) + 1024;
  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  // Pad the shared memory so that exactly blocks_per_sm blocks fit a multiprocessor.
  const int pad = std::max(smem, 227 * 1024 / blocks_per_sm - 1024);
  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, pad);
  const dim3 grid(sms * blocks_per_sm), block(128 * wg_per_block);
  const double ms = median_event_ms(5, [&] { k<<<grid, block, pad>>>(steps, sink, cycles); });
  const cudaError_t err = cudaGetLastError();
  const double per_step = median_cycles_per_step(cycles, grid.x, steps);
  const double flop = 2.0 * 64 * N * 64 * steps * double(wg_per_block) * blocks_per_sm * sms;
  std::printf(
      "%s%s%s N=%3d depth=%d  wg/block=%d blocks/SM=%d (wg/SM=%d)  %8.3f ms  %6.1f TFLOP/s  %6.1f cycles a step "
      "(~%4.0f MHz)%s\n",
      RS_ ? "rs" : "ss",
      LOAD == 1   ? "+ldsm"
      : LOAD == 2 ? "+lds128"
                  : "",
      ROT > 1 ? " rot4" : "", N, DEPTH, wg_per_block, blocks_per_sm, wg_per_block * blocks_per_sm, ms, flop / ms / 1e9,
      per_step, per_step * steps / (ms * 1e3), err == cudaSuccess ? "" : cudaGetErrorString(err));
}

// The halo kernel's step (rs + ldmatrix, A rotating over four tiles) with its weight ring: each step's
// B slice (8 KB) comes by a bulk copy from global memory (27 slices, L2-resident) into one of STAGES
// stages, under full / empty barriers as the conv's (one producer lane; one arrival a consumer warp).
// MODE takes the ring apart: 0 the whole ring; 1 the producer arrives on the full barrier instead of
// copying; 2 the consumers' full waits alone (on a barrier whose awaited phase is complete: no
// producer, no arrivals); 3 their arrivals alone (no producer, no waits); 4 both, no producer; then the
// whole ring with its arrivals changed: 5 one arrival a warpgroup (its first warp's lane 0: a group
// completes for the whole warpgroup at once), 6 the arrival after the step's ldmatrix instead of
// before, 7 both; 8 the stages released by a counter a warpgroup in shared memory (its first warp's
// lane 0 stores the step it has finished; the producer polls), no empty barriers; 9 the stages released
// in pairs (one arrival a warp every other step, on one empty barrier a pair of stages). (A mode with
// the copies but no full waits fails: the block can end with copies in flight.)
// (s31, call 6: the waits and arrivals `.relaxed` instead of acquire / release change nothing; every
// consumer thread arriving instead of lane 0 costs ~50 cycles a step. Calls 8–12: here the arrivals
// are most of the ring's cost and pairs take the two-warpgroup step from 408 to 365 cycles; in the conv
// the same pairs were 7.5% slower (12% over six stages): its refills need the lookahead pairs take
// away. bench/results/2026-12-01-s31.md.)
template <int STAGES, int MODE>
__global__ void kernel_ring(int steps, const unsigned char* wglobal, float* sink, long long* cycles) {
#ifdef FRUGAL_WGMMA
  constexpr bool kProducer = MODE <= 1 || MODE >= 5, kWait = MODE != 3, kArrive = MODE != 2 && MODE < 8,
                 kPerGroup = MODE == 5 || MODE == 7, kLate = MODE == 6 || MODE == 7, kCounter = MODE == 8,
                 kPairs = MODE == 9;
  static_assert(!kPairs || STAGES == 4, "the paired release below is written for two pairs of stages");
  __shared__ int done_s[2];  // kCounter: the last step each warpgroup has finished
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ alignas(8) uint64_t full_s[STAGES], empty_s[STAGES];
  const int wgs = (blockDim.x - 32) / 128, wg = threadIdx.x / 128, lane = threadIdx.x % 32;
  for (int i = threadIdx.x; i < (4 * wgs * 8192 + STAGES * 8192) / 4; i += blockDim.x)
    reinterpret_cast<uint32_t*>(smem)[i] = 0x3c003c00u ^ (i * 0x00010001u & 0x03ff03ffu);
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem)), b_base = base + 4 * wgs * 8192;
  const uint32_t full0 = static_cast<uint32_t>(__cvta_generic_to_shared(full_s)),
                 empty0 = static_cast<uint32_t>(__cvta_generic_to_shared(empty_s));
  if (threadIdx.x == 0) {
    for (int st = 0; st < STAGES; ++st)
      mbar_init(full0 + 8 * st, 1), mbar_init(empty0 + 8 * st, kProducer ? (kPerGroup ? wgs : 4 * wgs) : (1 << 20) - 1);
    fence_mbarrier_init();
    done_s[0] = done_s[1] = -1;
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  // (The role test on a value read from lane 0, not on threadIdx itself: a branch on the thread index
  // takes the consumers' loop off the uniform datapath, its descriptors by R2UR; s29.)
  if (__shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x), 0) >= 128 * wgs) {  // the producer warp
    if (kProducer && lane == 0)
      for (int s = 0; s < steps; ++s) {
        const int st = s % STAGES;
        if constexpr (kCounter) {
          if (s >= STAGES)
            for (;;) {
              const int d0 = *static_cast<volatile int*>(&done_s[0]),
                        d1 = wgs > 1 ? *static_cast<volatile int*>(&done_s[1]) : d0;
              if (min(d0, d1) >= s - STAGES) break;
            }
        } else if constexpr (kPairs) {  // steps s − 4, s − 3 (pair q) released together
          if (s >= STAGES) {
            const int q = (s - STAGES) / 2;
            mbar_wait(empty0 + 8 * (q % 2), (q / 2) & 1);
          }
        } else if (s >= STAGES) {
          mbar_wait(empty0 + 8 * st, (s / STAGES - 1) & 1);
        }
        if constexpr (MODE == 1) {
          mbar_arrive(full0 + 8 * st);
        } else {
          mbar_arrive_expect_tx(full0 + 8 * st, 8192);
          asm volatile(
              "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                  b_base + st * 8192),
              "l"(wglobal + (s % 27) * 8192), "r"(8192), "r"(full0 + 8 * st)
              : "memory");
        }
      }
    return;
  }
  const long long t0 = clock64();
  const uint32_t a_base = base + wg * 8192;
  float d[32];
  for (int i = 0; i < 32; ++i) d[i] = 0.0f;
  fence_acc(d);
  uint32_t a[4][4], b[4][4];
  for (int kk = 0; kk < 4; ++kk)
    for (int j = 0; j < 4; ++j) a[kk][j] = 0x3c003c00u ^ ((threadIdx.x + kk * 4 + j) & 0x3ff);
  auto step = [&](int s, uint32_t(&cur)[4][4], uint32_t(&next)[4][4]) {
    const int st = s % STAGES;
    if constexpr (kWait) mbar_wait(full0 + 8 * st, kProducer ? (s / STAGES) & 1 : 1);
    wgmma_fence();
    fence_acc(d);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      wgmma_rs<__half, 64>(d, cur[kk], smem_desc(b_base + st * 8192 + kk * 2048, 8192, 1024));
    fence_acc(d);
    wgmma_commit();
    wgmma_wait<1>();
    const bool arrives = kArrive && s > 0 && lane == 0 && (!kPerGroup || threadIdx.x % 128 < 32);
    const uint32_t empty = empty0 + 8 * ((s + STAGES - 1) % STAGES);
    if (!kLate && arrives) mbar_arrive(empty);
    ldsm_a(next, a_base + ((s + 1) & 3) * wgs * 8192);
    if (kLate && arrives) mbar_arrive(empty);
    if (kCounter && s > 0 && threadIdx.x % 128 == 0) *static_cast<volatile int*>(&done_s[wg]) = s - 1;
    if (kPairs && s > 0 && s % 2 == 0 && lane == 0) mbar_arrive(empty0 + 8 * ((s / 2 - 1) % 2));
  };
  for (int s = 0; s < steps; s += 2) {
    step(s, a, b);
    step(s + 1, b, a);
  }
  wgmma_wait<0>();
  fence_acc(d);
  asm volatile("bar.sync 1, %0;\n" ::"r"(wgs * 128) : "memory");
  if (threadIdx.x == 0) cycles[blockIdx.x] = clock64() - t0;
  float t = 0.0f;
  for (int i = 0; i < 32; ++i) t += d[i];
  if (t == 12345.678f) *sink = t;
#endif
}

constexpr const char* kModes[] = {"the ring",
                                  "no copies",
                                  "full waits only",
                                  "arrivals only",
                                  "waits + arrivals",
                                  "one arrival a warpgroup",
                                  "arrival after ldmatrix",
                                  "both",
                                  "counter release",
                                  "paired release"};
static_assert(sizeof(kModes) / sizeof(kModes[0]) == 10, "a name for every mode of kernel_ring");

template <int STAGES, int MODE>
void measure_ring(int wgs, int sms, int steps, const unsigned char* wglobal, float* sink, long long* cycles) {
  auto k = kernel_ring<STAGES, MODE>;
  const int smem = 4 * wgs * 8192 + STAGES * 8192 + 1024, pad = std::max(smem, 227 * 1024 - 4096);
  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, pad);
  const dim3 grid(sms), block(128 * wgs + 32);
  const double ms = median_event_ms(5, [&] { k<<<grid, block, pad>>>(steps, wglobal, sink, cycles); });
  const cudaError_t err = cudaGetLastError();
  const double per_step = median_cycles_per_step(cycles, grid.x, steps),
               flop = 2.0 * 64 * 64 * 64 * steps * double(wgs) * sms;
  std::printf(
      "rs+ldsm rot4 + weight ring (%d stages, mode %d: %s) N= 64 depth=1  wg/SM=%d  %8.3f ms  %6.1f TFLOP/s  %6.1f "
      "cycles a "
      "step%s\n",
      STAGES, MODE, kModes[MODE], wgs, ms, flop / ms / 1e9, per_step,
      err == cudaSuccess ? "" : cudaGetErrorString(err));
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 20000;
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  float* sink = nullptr;
  cudaMalloc(&sink, 4);
  long long* cycles = nullptr;
  cudaMalloc(&cycles, 4 * sms * sizeof(long long));
  for (int wgs : {1, 2, 4}) {  // warpgroups a multiprocessor, as (wg/block, blocks/SM)
    const int wpb = std::min(wgs, 2), bps = wgs / wpb;
    measure<64, true, 1, 1>(wpb, bps, sms, steps, sink, cycles);
    measure<64, true, 1, 2>(wpb, bps, sms, steps, sink, cycles);
    measure<64, true, 1, 1, 4>(wpb, bps, sms, steps, sink, cycles);
    measure<64, true, 1, 0, 4>(wpb, bps, sms, steps, sink, cycles);
    measure<64, false, 1, 0, 4>(wpb, bps, sms, steps, sink, cycles);
    measure<64, false, 1>(wpb, bps, sms, steps, sink, cycles);
    measure<64, true, 1>(wpb, bps, sms, steps, sink, cycles);
    measure<64, true, 0>(wpb, bps, sms, steps, sink, cycles);
    measure<128, false, 1>(wpb, bps, sms, steps / 2, sink, cycles);
    measure<128, true, 1>(wpb, bps, sms, steps / 2, sink, cycles);
    measure<256, false, 1>(wpb, bps, sms, steps / 4, sink, cycles);
    measure<256, true, 1>(wpb, bps, sms, steps / 4, sink, cycles);
  }
  unsigned char* wglobal = nullptr;  // the ring's 27 weight slices (zeros: the time does not depend on them)
  cudaMalloc(&wglobal, 27 * 8192);
  cudaMemset(wglobal, 0, 27 * 8192);
  for (int wgs : {1, 2}) {
    measure_ring<4, 0>(wgs, sms, steps, wglobal, sink, cycles);
    measure_ring<4, 1>(wgs, sms, steps, wglobal, sink, cycles);
    measure_ring<4, 2>(wgs, sms, steps, wglobal, sink, cycles);
    measure_ring<4, 3>(wgs, sms, steps, wglobal, sink, cycles);
    measure_ring<4, 4>(wgs, sms, steps, wglobal, sink, cycles);
    measure_ring<4, 5>(wgs, sms, steps, wglobal, sink, cycles);
    measure_ring<4, 6>(wgs, sms, steps, wglobal, sink, cycles);
    measure_ring<4, 7>(wgs, sms, steps, wglobal, sink, cycles);
    measure_ring<4, 8>(wgs, sms, steps, wglobal, sink, cycles);
    measure_ring<4, 9>(wgs, sms, steps, wglobal, sink, cycles);
  }
  measure<64, true, 1>(4, 1, sms, steps, sink, cycles);  // four warpgroups in one block
  measure<64, false, 1>(4, 1, sms, steps, sink, cycles);
  return 0;
}
