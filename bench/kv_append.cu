// Benchmark of the KV-cache write path on one GPU: the fused quantize-append kernel against the
// device's copy bandwidth (prefill), and the latency of a one-token append (decode).
//
//   kv_append [--quick] [--variant generic|fast|mma]
//
// --variant forces the append kernel (kv::AppendOptions) for an A/B against the chosen one; shapes
// it cannot serve print "-". Prints markdown tables, each row naming the kernel that served it. Effective bandwidth counts the bytes the op must move at the least:
// the input read once (D·sizeof(T) per vector) and the packed row and scale written once
// (D·bits/8 + 4 per vector), over the event-timed median of repeated calls.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "frugal/frugal.h"
#include "frugal/kv_cache.h"

namespace {

#define CHECK(call)                                                                                        \
  do {                                                                                                     \
    cudaError_t e_ = (call);                                                                               \
    if (e_ != cudaSuccess) {                                                                               \
      std::fprintf(stderr, "%s failed: %s at %s:%d\n", #call, cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                                        \
    }                                                                                                      \
  } while (0)

using frugal::DType;
using frugal::Tensor;
using frugal::kv::AppendChoice;
using frugal::kv::AppendOptions;
using frugal::kv::AppendVariant;
using frugal::kv::Cache;
using frugal::kv::CacheConfig;

// The kernel an append of x with `options` takes, or "-" where a forced variant cannot serve it.
std::string kernel_of(const Cache& cache, const frugal::TensorView& x, const AppendOptions& options) {
  try {
    const std::optional<AppendChoice> c = cache.append_choice(x, options);
    return c ? frugal::kv::to_string(*c) : "cpu";
  } catch (const frugal::Error&) {
    return "-";
  }
}

// Pseudo-random N(0,1)-like halves from a hash (sum of four uniforms, scaled): fills gigabytes
// on the device in milliseconds. The transform makes any such input Gaussian-looking anyway.
__global__ void kernel_fill(__half* x, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 0x9E3779B1u ^ seed ^ static_cast<uint32_t>(i >> 32) * 0x85EBCA77u;
    float s = 0;
    for (int k = 0; k < 4; ++k) {
      h ^= h >> 15;
      h *= 0x2C1B3C6Du;
      h ^= h >> 12;
      h *= 0x297A2D39u;
      h ^= h >> 15;
      s += static_cast<float>(h) * (1.0f / 4294967296.0f);
    }
    x[i] = __float2half_rn((s - 2.0f) * 1.7320508f);  // variance of a sum of 4 U(0,1) is 1/3
  }
}

__global__ void kernel_empty() {}

// The memory roof of the append's access pattern with no arithmetic: each vector's 2·D input bytes
// read with the same 16-byte loads, D·bits/8 + 4 bytes written to the same head-major rows.
// 16 lanes per 256-byte vector (D = 128), 4-bit rows of 64 bytes.
__global__ void kernel_roof(const uint4* x, uint32_t* packed, float* scales, int64_t tokens, int heads) {
  const int64_t vectors = tokens * heads;
  const int lane = threadIdx.x & 15;
  for (int64_t v = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 16; v < vectors;
       v += int64_t{gridDim.x} * blockDim.x / 16) {
    const uint4 q = __ldcs(x + v * 16 + lane);
    const int64_t tok = v / heads, h = v - tok * heads, row = h * tokens + tok;
    packed[row * 16 + lane] = q.x ^ q.y ^ q.z ^ q.w;
    if (lane == 0) scales[row] = static_cast<float>(q.x);
  }
}

// Keeps the GPU busy while the host enqueues the timed work, so the events bracket the kernel
// and not the host's submission gap.
__global__ void kernel_spin(int64_t cycles) {
  const int64_t start = clock64();
  while (clock64() - start < cycles) {
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median over `reps` of the event time of one call of f (after `warm` untimed calls), in µs: the
// GPU time from the start of its first kernel to the end of its last.
double event_us(const std::function<void()>& f, int reps, int warm = 3) {
  for (int i = 0; i < warm; ++i) f();
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    kernel_spin<<<1, 1>>>(100000);  // ~50 us
    CHECK(cudaEventRecord(a));
    f();
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1e3);
  }
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  return median(t);
}

// Wall time per call of `calls` back-to-back calls of f (the host waits once, at the end), in µs;
// the median of `rounds` such runs.
double wall_us_per_call(const std::function<void()>& f, int calls, int rounds = 5) {
  for (int i = 0; i < 100; ++i) f();
  CHECK(cudaDeviceSynchronize());
  std::vector<double> t;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) f();
    CHECK(cudaDeviceSynchronize());
    t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / calls);
  }
  return median(t);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  AppendOptions options;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--variant") == 0 && i + 1 < argc) {
      const std::string v = argv[++i];
      if (v != "generic" && v != "fast" && v != "mma") {
        std::fprintf(stderr, "kv_append: --variant must be generic, fast or mma, got %s\n", v.c_str());
        return 1;
      }
      options.variant = v == "generic" ? AppendVariant::generic : v == "fast" ? AppendVariant::fast : AppendVariant::mma;
    } else {
      std::fprintf(stderr, "usage: kv_append [--quick] [--variant generic|fast|mma]\n");
      return 1;
    }
  }
  if (!frugal::cuda_available()) {
    std::fprintf(stderr, "kv_append: no CUDA device\n");
    return 1;
  }
  std::printf("device: %s\n", frugal::device_name(frugal::Device::cuda(0)).c_str());
  const auto dev = frugal::Device::cuda(0);

  // ---- 1. copy bandwidth ----
  double copy_tbs = 0;
  {
    const size_t bytes = size_t{2} << 30;
    void *src = nullptr, *dst = nullptr;
    CHECK(cudaMalloc(&src, bytes));
    CHECK(cudaMalloc(&dst, bytes));
    CHECK(cudaMemset(src, 1, bytes));
    const double us = event_us([&] { CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice)); }, 10);
    copy_tbs = 2.0 * bytes / (us * 1e-6) / 1e12;
    CHECK(cudaFree(src));
    CHECK(cudaFree(dst));
    std::printf("device-to-device copy of 2 GiB: %.1f us, %.2f TB/s (read + written)\n", us, copy_tbs);
  }

  // ---- 2. prefill: 8M head vectors (T = 1M tokens x 8 heads), fp16 ----
  const int heads = 8;
  const int64_t tokens = quick ? (int64_t{1} << 17) : (int64_t{1} << 20);
  const int64_t vectors = tokens * heads;
  Tensor x = Tensor::empty({tokens, heads, 512}, DType::f16, dev);  // the largest D; smaller D use a prefix
  struct Row {
    int d, bits;
    double us, tbs, share;
    std::string kernel;
  };
  std::vector<Row> prefill;
  for (int d : {128, 64, 256, 512})
    for (int bits : {4, 8}) {
      const frugal::TensorView xv(x.data(), DType::f16, {tokens, heads, d}, dev);
      kernel_fill<<<4096, 256>>>(static_cast<__half*>(x.data()), vectors * d, 1234u + d);
      CHECK(cudaGetLastError());
      Cache cache(CacheConfig{.batch = 1, .num_kv_heads = heads, .head_dim = d, .capacity = tokens, .bits = bits}, dev);
      const std::string kernel = kernel_of(cache, xv, options);
      if (kernel == "-") {
        prefill.push_back({d, bits, 0, 0, 0, kernel});
        continue;
      }
      const double us = event_us(
          [&] {
            cache.reset();
            cache.append(xv, nullptr, options);
          },
          quick ? 5 : 15);
      const double bytes = static_cast<double>(vectors) * (2.0 * d + d * bits / 8.0 + 4.0);
      const double tbs = bytes / (us * 1e-6) / 1e12;
      prefill.push_back({d, bits, us, tbs, tbs / copy_tbs, kernel});
    }

  // The roof: the same bytes in the same pattern, no arithmetic (D = 128, 4 bits).
  double roof_tbs = 0;
  {
    Tensor packed = Tensor::empty({heads, tokens, 64}, DType::u8, dev), scales = Tensor::empty({heads, tokens}, DType::f32, dev);
    const double us = event_us(
        [&] {
          kernel_roof<<<132 * 16, 256>>>(static_cast<const uint4*>(x.data()), static_cast<uint32_t*>(packed.data()),
                                         static_cast<float*>(scales.data()), tokens, heads);
        },
        quick ? 5 : 15);
    roof_tbs = static_cast<double>(vectors) * (256 + 64 + 4) / (us * 1e-6) / 1e12;
  }

  // ---- 3. decode: one token, B = 1, 8 heads ----
  const double empty_wall = wall_us_per_call([] { kernel_empty<<<1, 32>>>(); }, 5000);
  const double empty_event = event_us([] { kernel_empty<<<1, 32>>>(); }, 200);
  struct DecodeRow {
    int d, bits;
    double wall, event;
    std::string kernel;
  };
  std::vector<DecodeRow> decode;
  for (int d : {128, 64, 256, 512})
    for (int bits : {4, 8}) {
      Tensor xs = Tensor::empty({1, heads, d}, DType::f16, dev);
      kernel_fill<<<8, 256>>>(static_cast<__half*>(xs.data()), heads * d, 99u);
      CHECK(cudaGetLastError());
      Cache cache(CacheConfig{.num_kv_heads = heads, .head_dim = d, .capacity = 4096, .sliding = true, .bits = bits},
                  dev);
      const std::string kernel = kernel_of(cache, xs, options);
      if (kernel == "-") {
        decode.push_back({d, bits, 0, 0, kernel});
        continue;
      }
      const double wall = wall_us_per_call([&] { cache.append(xs, nullptr, options); }, 5000);
      const double ev = event_us([&] { cache.append(xs, nullptr, options); }, 200, 10);
      decode.push_back({d, bits, wall, ev, kernel});
    }
  frugal::synchronize(dev);

  std::printf("\n### Prefill append: T = %lld tokens x %d heads = %lld vectors, fp16 input (event median)\n\n",
              static_cast<long long>(tokens), heads, static_cast<long long>(vectors));
  std::printf("| D | bits | kernel | time (ms) | bytes moved (GB) | effective TB/s | share of copy (%.2f TB/s) |\n",
              copy_tbs);
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const Row& r : prefill) {
    if (r.kernel == "-") {
      std::printf("| %d | %d | - | - | - | - | - |\n", r.d, r.bits);
      continue;
    }
    std::printf("| %d | %d | %s | %.3f | %.2f | %.2f | %.0f %% |\n", r.d, r.bits, r.kernel.c_str(), r.us / 1e3,
                r.tbs * r.us * 1e-6 * 1e3, r.tbs, 100 * r.share);
  }
  std::printf("| roof: same bytes and pattern, no arithmetic (D = 128, 4 bits) | - | - | - | - | %.2f | %.0f %% |\n",
              roof_tbs, 100 * roof_tbs / copy_tbs);
  std::printf("\n### Decode append: one token, B = 1, %d heads, fp16 (5000 back-to-back calls)\n\n", heads);
  std::printf("| D | bits | kernel | wall per call (us) | event time per call (us) |\n|---|---|---|---|---|\n");
  for (const DecodeRow& r : decode) {
    if (r.kernel == "-")
      std::printf("| %d | %d | - | - | - |\n", r.d, r.bits);
    else
      std::printf("| %d | %d | %s | %.2f | %.2f |\n", r.d, r.bits, r.kernel.c_str(), r.wall, r.event);
  }
  std::printf("| empty kernel | - | - | %.2f | %.2f |\n", empty_wall, empty_event);
  return 0;
}
