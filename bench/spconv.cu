// Benchmark of the sparse conv on one voxel set (driven by bench/spconv_torch.py, which measures
// the PyTorch peers on the same inputs and compares the outputs):
//   spconv --coords FILE.bin --channels C --out PREFIX [--reps R] [--samples S]
// Reads coords [N, 4] int32 (raw), generates fp16 feats [N, C] and weights [27, C, C] with the
// deterministic generator the python script shares (gen below), then times
//   * build_kernel_map into a preallocated map (and the allocating form),
//   * submanifold_conv (checked: includes the one 8-byte readback; unchecked: kernel only) for the
//     default kernel and the variants (WMMA with 64/128-wide channel tiles, CUDA cores),
// and writes PREFIX.nbr (nbr[:, samples] int32) and PREFIX.out (out[samples, :] fp16) for the
// sampled rows r_i = i·(N−1)/(S−1), and one JSON line on stdout.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "core/sparse_conv_backend.h"
#include "frugal/runtime.h"
#include "frugal/sparse_conv.h"

using namespace frugal;

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// Shared with spconv_torch.py: two LCG steps mod 2^31 of (i + salt), 10 bits of the result as a
// signed integer in [-512, 511], times 2^-(10 + shift). Exact in fp16.
__global__ void kernel_gen(__half* p, int64_t count, int64_t salt, int shift) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t h = ((i + salt) * 1103515245 + 12345) & 0x7fffffff;
    h = (h * 1103515245 + 12345) & 0x7fffffff;
    const int v = static_cast<int>((h >> 16) & 1023) - 512;
    p[i] = __float2half(ldexpf(static_cast<float>(v), -(10 + shift)));
  }
}

template <typename F>
double median_event_ms(int reps, F&& f) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  f();  // warm-up
  check(cudaDeviceSynchronize(), "warm-up");
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    cudaEventRecord(a);
    f();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Host wall time (for calls that wait for the stream themselves).
template <typename F>
double median_wall_ms(int reps, F&& f) {
  f();
  check(cudaDeviceSynchronize(), "warm-up");
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto s = std::chrono::steady_clock::now();
    f();
    check(cudaDeviceSynchronize(), "sync");
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

size_t pool_reserved_high() {
  cudaMemPool_t pool;
  check(cudaDeviceGetDefaultMemPool(&pool, 0), "mempool");
  uint64_t v = 0;
  check(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &v), "mempool attr");
  return v;
}
// The default pool's release threshold: 0 (CUDA's default) returns freed memory to the system at
// every synchronization, so each map build maps its table afresh; UINT64_MAX keeps it (as torch's
// caching allocator does). An application setting, not a library one: both are measured.
void pool_release_threshold(uint64_t bytes) {
  cudaMemPool_t pool;
  check(cudaDeviceGetDefaultMemPool(&pool, 0), "mempool");
  check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &bytes), "mempool threshold");
}

void pool_reset_high() {
  cudaMemPool_t pool;
  check(cudaDeviceGetDefaultMemPool(&pool, 0), "mempool");
  uint64_t zero = 0;
  check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero), "mempool reset");
  check(cudaMemPoolTrimTo(pool, 0), "mempool trim");
}

}  // namespace

int main(int argc, char** argv) {
  std::string coords_path, out_prefix;
  int channels = 64, reps = 20, samples = 2048;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--coords")
      coords_path = v;
    else if (k == "--channels")
      channels = std::stoi(v);
    else if (k == "--out")
      out_prefix = v;
    else if (k == "--reps")
      reps = std::stoi(v);
    else if (k == "--samples")
      samples = std::stoi(v);
  }
  if (coords_path.empty() || out_prefix.empty()) {
    std::fprintf(stderr, "usage: %s --coords FILE --channels C --out PREFIX [--reps R] [--samples S]\n", argv[0]);
    return 2;
  }
  try {
    std::ifstream f(coords_path, std::ios::binary | std::ios::ate);
    const int64_t n = static_cast<int64_t>(f.tellg()) / 16, c = channels;
    f.seekg(0);
    Tensor coords_h = Tensor::empty({n, 4}, DType::i32);
    f.read(static_cast<char*>(coords_h.data()), n * 16);
    const Device gpu = Device::cuda(0);
    const Tensor coords = coords_h.to(gpu);

    // ---- map build
    Tensor nbr = Tensor::empty({27, n}, DType::i32, gpu);
    pool_reset_high();
    const double map_ms = median_wall_ms(10, [&] { spconv::build_kernel_map(coords, nbr.view(), 3, 1); });
    const size_t map_workspace = pool_reserved_high();
    const double map_alloc_ms = median_wall_ms(5, [&] { (void)spconv::build_kernel_map(coords, 3, 1); });
    pool_release_threshold(UINT64_MAX);
    const double map_pooled_ms = median_wall_ms(10, [&] { spconv::build_kernel_map(coords, nbr.view(), 3, 1); });
    pool_release_threshold(0);

    // ---- conv inputs
    Tensor feats = Tensor::empty({n, c}, DType::f16, gpu), w = Tensor::empty({27, c, c}, DType::f16, gpu);
    Tensor out = Tensor::empty({n, c}, DType::f16, gpu);
    kernel_gen<<<4096, 256>>>(feats.data_as<__half>(), n * c, 0, 1);
    kernel_gen<<<1024, 256>>>(w.data_as<__half>(), 27 * c * c, 12345, 6);
    check(cudaDeviceSynchronize(), "gen");

    pool_reset_high();
    const double conv_checked_ms = median_wall_ms(reps, [&] { spconv::submanifold_conv(feats, nbr, w, nullptr, out); });
    const size_t conv_workspace = pool_reserved_high();
    const double conv_ms = median_event_ms(
        reps, [&] { spconv::submanifold_conv(feats, nbr, w, nullptr, out, nullptr, spconv::MapCheck::unchecked); });
    // Variants through the backend (same output buffer; the default output is re-made below).
    using K = spconv::backend::ConvKernel;
    spconv::backend::ConvArgs a;
    a.feats = feats.data();
    a.nbr = nbr.data_as<int32_t>();
    a.weight = w.data();
    a.out = out.data();
    a.dtype = DType::f16;
    a.n = n;
    a.k = 27;
    a.ci = a.co = static_cast<int>(c);
    a.check = false;
    std::string variants;
    for (auto [kernel, tile, name] :
         {std::tuple{K::wmma, 64, "wmma64"}, std::tuple{K::wmma, 128, "wmma128"}, std::tuple{K::simt, 0, "simt"}}) {
      a.kernel = kernel;
      a.tile_co = tile;
      const int r = kernel == K::simt ? std::max(3, reps / 4) : reps;
      const double ms = median_event_ms(r, [&] { cuda::spconv_conv(a, nullptr); });
      variants += std::string(variants.empty() ? "" : ", ") + "\"" + name + "_ms\": " + std::to_string(ms);
    }
    spconv::submanifold_conv(feats, nbr, w, nullptr, out);  // the default kernel's output, checked

    // ---- sampled rows out
    const int64_t s = std::min<int64_t>(samples, n);
    std::vector<int32_t> nbr_s(27 * s);
    std::vector<uint16_t> out_s(s * c);
    std::vector<int32_t> nbr_all(27 * n);
    copy(nbr, TensorView(nbr_all.data(), DType::i32, {27, n}));
    int64_t pairs = 0;
    for (int32_t m : nbr_all) pairs += m != n;
    for (int64_t i = 0; i < s; ++i) {
      const int64_t r = s > 1 ? i * (n - 1) / (s - 1) : 0;
      for (int k = 0; k < 27; ++k) nbr_s[k * s + i] = nbr_all[k * n + r];
      copy(TensorView(out.data_as<uint16_t>() + r * c, DType::f16, {c}, gpu),
           TensorView(out_s.data() + i * c, DType::f16, {c}));
    }
    std::ofstream(out_prefix + ".nbr", std::ios::binary)
        .write(reinterpret_cast<const char*>(nbr_s.data()), nbr_s.size() * 4);
    std::ofstream(out_prefix + ".out", std::ios::binary)
        .write(reinterpret_cast<const char*>(out_s.data()), out_s.size() * 2);

    // Bytes one conv holds: feats + weight (inputs), out, the map, and what the call allocates.
    const double inputs = static_cast<double>(n) * c * 2 + 27.0 * c * c * 2;
    std::printf(
        "{\"n\": %lld, \"c\": %lld, \"pairs\": %lld, \"map_ms\": %.4f, \"map_alloc_ms\": %.4f, \"map_pooled_ms\": "
        "%.4f, "
        "\"map_workspace_bytes\": %zu, \"conv_ms\": %.4f, \"conv_checked_ms\": %.4f, \"conv_workspace_bytes\": %zu, "
        "\"conv_alloc_bytes\": 8, \"inputs_bytes\": %.0f, \"out_bytes\": %.0f, \"map_bytes\": %.0f, %s, "
        "\"device\": \"%s\"}\n",
        static_cast<long long>(n), static_cast<long long>(c), static_cast<long long>(pairs), map_ms, map_alloc_ms,
        map_pooled_ms, map_workspace, conv_ms, conv_checked_ms, conv_workspace, inputs, static_cast<double>(n) * c * 2,
        27.0 * n * 4, variants.c_str(), device_name(gpu).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spconv bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
