// What the attention benchmarks share: random cache contents written straight into the storage (any
// byte is valid codes), the L2-evicting flush before every timed call, the stream read of a call's own
// arrays (its floor), and the median of CUDA-event timings.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                                                       \
  do {                                                                                                 \
    cudaError_t e_ = (x);                                                                              \
    if (e_ != cudaSuccess) {                                                                           \
      std::fprintf(stderr, "%s failed: %s (%s:%d)\n", #x, cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                                    \
    }                                                                                                  \
  } while (0)

__global__ void kernel_fill_bytes(uint8_t* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint64_t z = (i + seed) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    p[i] = static_cast<uint8_t>(z >> 56);
  }
}

// Scales in [0.75, 1.25) · base, as f32 or (the f16 scale format) rounded to f16.
template <typename S>
__global__ void kernel_fill_scales(S* p, size_t n, uint64_t seed, float base) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint64_t z = (i + seed) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
    p[i] = static_cast<S>(base * (0.75f + 0.5f * static_cast<float>(z >> 40) / 16777216.0f));
  }
}

__global__ void kernel_fill_half(__half* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint64_t z = (i + seed) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
    p[i] = __float2half(static_cast<float>(z >> 40) / 8388608.0f - 1.0f);
  }
}

__global__ void kernel_fill_float(float* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint64_t z = (i + seed) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
    p[i] = static_cast<float>(z >> 40) / 8388608.0f - 1.0f;
  }
}

__global__ void kernel_empty() {}

// Reads every 16-byte word of up to four arrays once (four independent loads in flight a thread), XORs
// them, writes one word per block (never, in practice). Two uses: the flush before each timed call (one
// 512 MB buffer: evicts L2) and --floor's stream of a call's own cache arrays (nothing but the bytes a
// decode call must read, with the same launch and the same cold L2). Plain loads: evict-first ones
// (__ldcs) could leave the old lines in L2, which is what the flush is for.
struct Span {
  const int4* p = nullptr;
  size_t n = 0;
};
__global__ void __launch_bounds__(512) kernel_read(Span s0, Span s1, Span s2, Span s3, int* sink) {
  const size_t stride = size_t(gridDim.x) * blockDim.x, first = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  int acc = 0;
  for (const Span& s : {s0, s1, s2, s3}) {
    size_t i = first;
    for (; i + 3 * stride < s.n; i += 4 * stride) {
      const int4 a = s.p[i], b = s.p[i + stride], c = s.p[i + 2 * stride], d = s.p[i + 3 * stride];
      acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
    }
    for (; i < s.n; i += stride) {
      const int4 a = s.p[i];
      acc ^= a.x ^ a.y ^ a.z ^ a.w;
    }
  }
  if (acc == 0x7fffffff) sink[blockIdx.x] = acc;
}

struct Flusher {
  int4* buf = nullptr;
  int* sink = nullptr;
  size_t n = (512ull << 20) / sizeof(int4);
  Flusher() {
    CHECK(cudaMalloc(&buf, n * sizeof(int4)));
    CHECK(cudaMemset(buf, 1, n * sizeof(int4)));
    CHECK(cudaMalloc(&sink, 4096 * sizeof(int)));
  }
  void operator()() { kernel_read<<<1056, 512>>>(Span{buf, n}, Span{}, Span{}, Span{}, sink); }
};

template <typename F>
double time_median_ms(Flusher& flush, F&& fn, int warm, int reps) {
  std::vector<cudaEvent_t> ev(2 * reps);
  for (auto& e : ev) CHECK(cudaEventCreate(&e));
  for (int i = 0; i < warm; ++i) {
    flush();
    fn();
  }
  for (int i = 0; i < reps; ++i) {
    flush();
    CHECK(cudaEventRecord(ev[2 * i]));
    fn();
    CHECK(cudaEventRecord(ev[2 * i + 1]));
  }
  CHECK(cudaDeviceSynchronize());
  std::vector<float> ms(reps);
  for (int i = 0; i < reps; ++i) CHECK(cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]));
  for (auto& e : ev) CHECK(cudaEventDestroy(e));
  std::sort(ms.begin(), ms.end());
  return ms[reps / 2];
}
