// Benchmark of the sparse conv on one voxel set (driven by bench/spconv_torch.py, which measures
// the PyTorch peers on the same inputs and compares the outputs):
//   spconv --coords FILE.bin --channels C [--co CO] --out PREFIX [--reps R] [--samples S] [--mma-only 1]
//          [--only NAME,NAME] [--burst N]
// Reads coords [N, 4] int32 (raw), generates fp16 feats [N, C] and weights [27, C, CO] (CO = C by
// default) with the deterministic generator the python script shares (gen below), then times
//   * build_kernel_map into a preallocated map (and the allocating form),
//   * submanifold_conv over the KernelMap (the default a user gets: no per-call check, the kernel the
//     map's statistics and the rules pick; conv_ms, with the choice), over the map as a plain tensor
//     (checked: the one 8-byte readback; unchecked), and each variant forced through ConvOptions::choice
//     (WMMA with 64/128-wide channel tiles, CUDA cores, mma.sync on sorted rows with 64/128/256-wide
//     tiles, mma on unsorted rows, the wgmma kernel with 64/128/256 wide tiles, unsorted and unsplit,
//     128- and 256-row tiles, the warp-specialized kernels, the halo kernel, and the default in bf16;
//     a variant that cannot run the shape is left out),
//   * the share of useful products of the mma kernel (its row order replicated on the host),
// and writes PREFIX.nbr (nbr[:, samples] int32) and PREFIX.out (out[samples, :] fp16) for the
// sampled rows r_i = i·(N−1)/(S−1), and one JSON line on stdout (with --burst N, first a line of the
// per-call times of N unchecked calls back to back after a rest: how the time moves as the board
// reaches its power limit).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cuda_bf16.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "core/device_caps.h"
#include "core/sparse_conv_backend.h"
#include "core/spconv_choose.h"
#include "event_timing.h"
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

__global__ void kernel_diff(const __half* a, const __half* b, int64_t count, unsigned* num, unsigned* den) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float x = __half2float(a[i]), y = __half2float(b[i]);
    const float d = fabsf(x - y) == fabsf(x - y) ? fabsf(x - y) : 1e30f;  // NaN (unwritten): huge
    atomicMax(num, __float_as_uint(d));
    atomicMax(den, __float_as_uint(fabsf(x)));
  }
}

// max |a - b| / max |a| over all elements (a NaN in b counts as 1e30).
double max_rel_diff(const Tensor& a, const Tensor& b, int64_t count) {
  unsigned* d = nullptr;
  check(cudaMalloc(&d, 8), "diff");
  check(cudaMemset(d, 0, 8), "diff");
  kernel_diff<<<4096, 256>>>(a.data_as<__half>(), b.data_as<__half>(), count, d, d + 1);
  unsigned h[2];
  check(cudaMemcpy(h, d, 8, cudaMemcpyDeviceToHost), "diff");
  cudaFree(d);
  float num, den;
  std::memcpy(&num, &h[0], 4);
  std::memcpy(&den, &h[1], 4);
  return den > 0 ? num / den : num;
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

__global__ void kernel_to_bf16(const __half* src, __nv_bfloat16* dst, int64_t count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = __float2bfloat16(__half2float(src[i]));
}

// Products the mma kernel computes, replicated on the host from the map: rows stable-sorted by
// neighbor mask within windows of kWindow rows of each launch of kChunkRows rows, 128-row tiles.
// Shares of useful products (pairs·Ci·Co over what is multiplied):
//   tile   every row of a tile for every offset some row has (what WMMA-style tiles compute, and
//          what the mma kernel's loads cover);
//   group  16-row groups that have the offset (the tensor-core work of the mma kernel);
//   warp   per offset, twice the busier of the two row-warps' groups (its time on a tile);
//   wg     64-row halves that have the offset (what a per-warpgroup skip would compute; the wgmma
//          kernels compute what "tile" counts).
struct Share {
  double tile = 0, group = 0, warp = 0, wg = 0;
};
Share useful_share(const std::vector<int32_t>& nbr, int64_t n, bool sorted) {
  namespace sm = spconv;
  std::vector<uint32_t> mask(n, 0);
  for (int k = 0; k < 27; ++k)
    for (int64_t i = 0; i < n; ++i) {
      const int32_t m = nbr[k * n + i];
      if (m >= 0 && m < n) mask[i] |= 1u << k;
    }
  double useful = 0, tile = 0, group = 0, warp = 0, wg = 0;
  for (uint32_t m : mask) useful += std::popcount(m);
  for (int64_t c0 = 0; c0 < n; c0 += sm::kChunkRows) {
    const int64_t c1 = std::min(n, c0 + sm::kChunkRows);
    if (sorted)
      for (int64_t w0 = c0; w0 < c1; w0 += sm::kWindow)
        std::stable_sort(mask.begin() + w0, mask.begin() + std::min(c1, w0 + sm::kWindow));
    for (int64_t t0 = c0; t0 < c1; t0 += sm::kTileRows) {
      uint32_t g[sm::kTileRows / sm::kGroupRows] = {}, any = 0;
      for (int64_t r = t0; r < std::min(c1, t0 + sm::kTileRows); ++r) g[(r - t0) / sm::kGroupRows] |= mask[r];
      for (uint32_t x : g) any |= x, group += sm::kGroupRows * std::popcount(x);
      tile += sm::kTileRows * std::popcount(any);
      constexpr int kHalf = sm::kTileRows / sm::kGroupRows / 2;
      uint32_t h[2] = {};
      for (int i = 0; i < 2 * kHalf; ++i) h[i / kHalf] |= g[i];
      wg += sm::kTileRows / 2 * (std::popcount(h[0]) + std::popcount(h[1]));
      for (int k = 0; k < 27; ++k) {
        int per_warp[2] = {0, 0};
        for (int i = 0; i < sm::kTileRows / sm::kGroupRows; ++i) per_warp[i % 2] += g[i] >> k & 1u;
        warp += 2.0 * sm::kGroupRows * std::max(per_warp[0], per_warp[1]);
      }
    }
  }
  return {useful / tile, useful / group, useful / warp, useful / wg};
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
  int channels = 64, co_arg = 0, reps = 20, samples = 2048, burst = 0;
  bool mma_only = false;
  std::string only;  // --only: the variants to time (comma-separated names; empty: all)  // skip the WMMA and SIMT variants (quick A/B runs of the mma kernel)
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--coords")
      coords_path = v;
    else if (k == "--channels")
      channels = std::stoi(v);
    else if (k == "--co")
      co_arg = std::stoi(v);
    else if (k == "--out")
      out_prefix = v;
    else if (k == "--reps")
      reps = std::stoi(v);
    else if (k == "--samples")
      samples = std::stoi(v);
    else if (k == "--mma-only")
      mma_only = std::stoi(v) != 0;
    else if (k == "--only")
      only = v;
    else if (k == "--burst")
      burst = std::stoi(v);
  }
  if (coords_path.empty() || out_prefix.empty()) {
    std::fprintf(stderr, "usage: %s --coords FILE --channels C [--co CO] --out PREFIX [--reps R] [--samples S] [--mma-only 1] [--only NAME,NAME] [--burst N]\n",
                 argv[0]);
    return 2;
  }
  try {
    std::ifstream f(coords_path, std::ios::binary | std::ios::ate);
    const int64_t n = static_cast<int64_t>(f.tellg()) / 16, c = channels, co = co_arg > 0 ? co_arg : channels;
    f.seekg(0);
    Tensor coords_h = Tensor::empty({n, 4}, DType::i32);
    f.read(static_cast<char*>(coords_h.data()), n * 16);
    const Device gpu = Device::cuda(0);
    const Tensor coords = coords_h.to(gpu);

    // ---- map build (the preallocated form returns the map's statistics, which the KernelMap keeps)
    Tensor nbr = Tensor::empty({27, n}, DType::i32, gpu);
    pool_reset_high();
    const double map_ms = median_wall_ms(10, [&] { spconv::build_kernel_map(coords, nbr.view(), 3, 1); });
    const size_t map_workspace = pool_reserved_high();
    const double map_alloc_ms = median_wall_ms(5, [&] { (void)spconv::build_kernel_map(coords, 3, 1); });
    pool_release_threshold(UINT64_MAX);
    const double map_pooled_ms = median_wall_ms(10, [&] { spconv::build_kernel_map(coords, nbr.view(), 3, 1); });
    pool_release_threshold(0);

    // ---- conv inputs
    Tensor feats = Tensor::empty({n, c}, DType::f16, gpu), w = Tensor::empty({27, c, co}, DType::f16, gpu);
    Tensor out = Tensor::empty({n, co}, DType::f16, gpu);
    kernel_gen<<<4096, 256>>>(feats.data_as<__half>(), n * c, 0, 1);
    kernel_gen<<<1024, 256>>>(w.data_as<__half>(), 27 * c * co, 12345, 6);
    check(cudaDeviceSynchronize(), "gen");

    const spconv::KernelMap map = spconv::KernelMap::build(coords, 3, 1);
    pool_reset_high();
    const double conv_checked_ms = median_wall_ms(reps, [&] { spconv::submanifold_conv(feats, nbr, w, nullptr, out); });
    const size_t conv_workspace = pool_reserved_high();
    auto over_map = [&] { spconv::submanifold_conv(feats, map, w, nullptr, out); };
    const double conv_ms = median_event_ms(reps, over_map);
    const spconv::ConvChoice served = spconv::choose_conv(feats, map, w, nullptr, out);
    const double conv_unchecked_ms = median_event_ms(
        reps, [&] { spconv::submanifold_conv(feats, nbr, w, nullptr, out, nullptr, spconv::MapCheck::unchecked); });
    if (burst > 0) {  // --burst N: N calls over the map back to back after 3 s of rest, each call's time (one line)
      const std::vector<double> t = burst_event_ms(burst, 3.0, over_map);
      std::printf("{\"burst_ms\": [");
      for (size_t i = 0; i < t.size(); ++i) std::printf("%s%.4f", i ? ", " : "", t[i]);
      std::printf("]}\n");
    }
    // Variants forced through the options (same output buffer; the default output is re-made below).
    using V = spconv::ConvVariant;
    const DeviceCaps caps = cuda::device_caps(0);
    const spconv::backend::ConvArgs args = spconv::backend::conv_args(feats.view(), nbr.view(), w.view(), nullptr, out.view());
    // A forced choice: 0 and an unset order take the rules of the variant.
    auto choice = [](V v, int tile = 0, std::optional<bool> sorted = std::nullopt, int splits = 0, int rows = 0) {
      return spconv::ConvChoice{.variant = v, .tile_co = tile, .tile_rows = rows, .sort_rows = sorted, .splits = splits};
    };
    auto runs = [&](const spconv::ConvChoice& c) {
      return spconv::can_implement(args, caps, spconv::complete(args, caps, c));
    };
    auto run_choice = [&](const spconv::ConvChoice& c, const Tensor& o) {
      spconv::ConvOptions opt;
      opt.check = spconv::MapCheck::unchecked;
      opt.choice = c;
      spconv::submanifold_conv(feats, nbr, w, nullptr, o, opt);
    };
    std::string variants = "\"default_choice\": \"" + spconv::to_string(served) + "\"";
    struct Variant {
      spconv::ConvChoice c;
      const char* name;
    };
    const std::optional<bool> by_rule;
    for (const Variant& v : {Variant{choice(V::wmma, 64), "wmma64"}, Variant{choice(V::wmma, 128), "wmma128"},
                             Variant{choice(V::simt), "simt"}, Variant{choice(V::mma, 64, true), "mma64"},
                             Variant{choice(V::mma, 128, true), "mma128"}, Variant{choice(V::mma, 256, true), "mma256"},
                             Variant{choice(V::mma, 0, false), "mma_unsorted"}, Variant{choice(V::mma, 0, true), "mma_default"},
                             Variant{choice(V::wgmma, 64, true, 0, 128), "wgmma64"},
                             Variant{choice(V::wgmma, 128, true, 0, 128), "wgmma128"},
                             Variant{choice(V::wgmma, 256, true, 0, 128), "wgmma256"},
                             Variant{choice(V::wgmma, 0, false, 0, 128), "wgmma_unsorted"},
                             Variant{choice(V::wgmma, 0, true, 1, 128), "wgmma_nosplit"},
                             // 128- against 256-row tiles, rows sorted by the size rule
                             Variant{choice(V::wgmma, 0, by_rule, 0, 128), "wgmma_r128"},
                             Variant{choice(V::wgmma, 0, true, 0, 256), "wgmma_r256_sorted"},
                             Variant{choice(V::wgmma, 0, false, 0, 256), "wgmma_r256_unsorted"},
                             Variant{choice(V::wgmma, 128, by_rule, 0, 256), "wgmma128_r256"},
                             // the warp-specialized kernels (128-row tiles), rows sorted by the size rule, and not
                             Variant{choice(V::wgmma_ws, 0, by_rule, 0, 128), "wgmma_ws"},
                             Variant{choice(V::wgmma_ws, 64, by_rule, 0, 128), "wgmma_ws64"},
                             Variant{choice(V::wgmma_ws, 128, by_rule, 0, 128), "wgmma_ws128"},
                             Variant{choice(V::wgmma_ws, 0, false, 0, 128), "wgmma_ws_unsorted"},
                             Variant{choice(V::wgmma_ws, 0, true, 0, 128), "wgmma_ws_sorted"},
                             Variant{choice(V::wgmma_ws2, 64, by_rule, 0, 128), "wgmma_ws64x2"},
                             Variant{choice(V::wgmma_ws2, 64, false, 0, 128), "wgmma_ws64x2_unsorted"},
                             // its 256-row tiles (each weight slice serves twice the rows)
                             Variant{choice(V::wgmma_ws, 0, true, 0, 256), "wgmma_ws_r256_sorted"},
                             Variant{choice(V::wgmma_ws, 0, false, 0, 256), "wgmma_ws_r256_unsorted"},
                             // the pipelined halo kernel (Ci ≤ 128, Co ≤ 64 or 128; rows in the map's order)
                             Variant{choice(V::halo_pipe, 64, false), "wgmma_halo_pipe"},
                             Variant{choice(V::halo_pipe, 128, false), "wgmma_halo_pipe128"},
                             Variant{choice(V::wgmma), "wgmma_old"}}) {
      const bool tensor_core = v.c.variant != V::simt && v.c.variant != V::wmma;
      if (mma_only && !tensor_core) continue;
      if (!only.empty() && ("," + only + ",").find("," + std::string(v.name) + ",") == std::string::npos) continue;
      if (!runs(v.c)) continue;  // not this shape's (or this device's)
      if (v.c.tile_co == 128 && v.c.tile_rows == 256 && co <= 128) continue;  // the same as wgmma_r256 there, or half idle
      const int r = v.c.variant == V::simt ? std::max(3, reps / 4) : reps;
      const double ms = median_event_ms(r, [&] { run_choice(v.c, out); });
      variants += ", \"" + std::string(v.name) + "_ms\": " + std::to_string(ms);
    }
    {  // the default kernel in bf16 (same values rounded to bf16)
      Tensor fb = Tensor::empty({n, c}, DType::bf16, gpu), wb = Tensor::empty({27, c, co}, DType::bf16, gpu);
      Tensor ob = Tensor::empty({n, co}, DType::bf16, gpu);
      kernel_to_bf16<<<4096, 256>>>(feats.data_as<__half>(), fb.data_as<__nv_bfloat16>(), n * c);
      kernel_to_bf16<<<1024, 256>>>(w.data_as<__half>(), wb.data_as<__nv_bfloat16>(), 27 * c * co);
      check(cudaDeviceSynchronize(), "bf16 inputs");
      const double ms = median_event_ms(reps, [&] { spconv::submanifold_conv(fb, map, wb, nullptr, ob); });
      variants += std::string(variants.empty() ? "" : ", ") + "\"bf16_default_ms\": " + std::to_string(ms);
    }
    spconv::submanifold_conv(feats, map, w, nullptr, out);  // the default kernel's output
    if (caps.sm90a) {  // other kernels and variants against the default output, on every element
      Tensor o2 = Tensor::empty({n, co}, DType::f16, gpu);
      auto diff = [&](const spconv::ConvChoice& c) {
        if (!runs(c)) return 0.0;
        check(cudaMemset(o2.data(), 0xff, n * co * 2), "poison");  // NaN
        run_choice(c, o2);
        return max_rel_diff(out, o2, n * co);
      };
      const double mma = diff(choice(V::mma, 0, true));
      double worst = 0;
      for (int t : {64, 128, 256}) worst = std::max(worst, diff(choice(V::wgmma, t, true, 0, 128)));
      double tall = 0;  // 256-row tiles (64- and 128-wide) and 128-row tiles against the default
      tall = std::max(diff(choice(V::wgmma, 0, true, 0, 128)), diff(choice(V::wgmma, 0, true, 0, 256)));
      tall = std::max(tall, diff(choice(V::wgmma, 64, true, 0, 256)));
      tall = std::max(tall, diff(choice(V::wgmma, 128, true, 0, 256)));
      variants += ", \"wgmma_tile_rows_vs_default_rel\": " + std::to_string(tall);
      double ws = 0;  // the warp-specialized kernels, every width, against the default
      for (int t : {0, 64, 128, 256}) ws = std::max(ws, diff(choice(V::wgmma_ws, t, true, 0, 128)));
      ws = std::max(ws, diff(choice(V::wgmma_ws2, 64, true, 0, 128)));
      variants += ", \"wgmma_ws_vs_default_rel\": " + std::to_string(ws);
      const double nosplit = diff(choice(V::wgmma, 0, true, 1, 128)), split3 = diff(choice(V::wgmma, 0, true, 3, 128));
      variants += ", \"mma_vs_default_rel\": " + std::to_string(mma) + ", \"wgmma_widths_vs_default_rel\": " +
                  std::to_string(worst) + ", \"wgmma_nosplit_vs_default_rel\": " + std::to_string(nosplit) +
                  ", \"wgmma_split3_vs_default_rel\": " + std::to_string(split3);
    }

    // ---- sampled rows out
    const int64_t s = std::min<int64_t>(samples, n);
    std::vector<int32_t> nbr_s(27 * s);
    std::vector<uint16_t> out_s(s * co);
    std::vector<int32_t> nbr_all(27 * n);
    copy(nbr, TensorView(nbr_all.data(), DType::i32, {27, n}));
    int64_t pairs = 0;
    for (int32_t m : nbr_all) pairs += m != n;
    for (int64_t i = 0; i < s; ++i) {
      const int64_t r = s > 1 ? i * (n - 1) / (s - 1) : 0;
      for (int k = 0; k < 27; ++k) nbr_s[k * s + i] = nbr_all[k * n + r];
      copy(TensorView(out.data_as<uint16_t>() + r * co, DType::f16, {co}, gpu),
           TensorView(out_s.data() + i * co, DType::f16, {co}));
    }
    std::ofstream(out_prefix + ".nbr", std::ios::binary)
        .write(reinterpret_cast<const char*>(nbr_s.data()), nbr_s.size() * 4);
    std::ofstream(out_prefix + ".out", std::ios::binary)
        .write(reinterpret_cast<const char*>(out_s.data()), out_s.size() * 2);

    // What the default call over the map allocates (the sorted-row kernels' row order, the wgmma
    // kernels' f32 partials when they split, the halo kernel's hand-off list), and the checked call
    // over the plain tensor (its 256-byte flag, and the kernel the rules pick without the map's statistics).
    const size_t conv_alloc = spconv::workspace_bytes(args, served);
    const size_t conv_checked_alloc = 256 + spconv::workspace_bytes(args, spconv::choose(args, caps, nullptr));
    const Share sorted = useful_share(nbr_all, n, true), unsorted = useful_share(nbr_all, n, false);
    char share[512];
    std::snprintf(share, sizeof share,
                  "\"share_sorted\": {\"tile\": %.4f, \"group\": %.4f, \"warp\": %.4f, \"wg\": %.4f}, "
                  "\"share_unsorted\": {\"tile\": %.4f, \"group\": %.4f, \"warp\": %.4f, \"wg\": %.4f}",
                  sorted.tile, sorted.group, sorted.warp, sorted.wg, unsorted.tile, unsorted.group, unsorted.warp,
                  unsorted.wg);
    // Bytes one conv holds: feats + weight (inputs), out, the map, and what the call allocates.
    const double inputs = static_cast<double>(n) * c * 2 + 27.0 * c * co * 2;
    std::printf(
        "{\"n\": %lld, \"c\": %lld, \"co\": %lld, \"pairs\": %lld, \"map_ms\": %.4f, \"map_alloc_ms\": %.4f, \"map_pooled_ms\": "
        "%.4f, "
        "\"map_workspace_bytes\": %zu, \"conv_ms\": %.4f, \"conv_unchecked_ms\": %.4f, \"conv_checked_ms\": %.4f, "
        "\"conv_workspace_bytes\": %zu, \"conv_alloc_bytes\": %zu, \"conv_checked_alloc_bytes\": %zu, "
        "\"inputs_bytes\": %.0f, \"out_bytes\": %.0f, \"map_bytes\": %.0f, %s, %s, \"device\": \"%s\"}\n",
        static_cast<long long>(n), static_cast<long long>(c), static_cast<long long>(co), static_cast<long long>(pairs), map_ms, map_alloc_ms,
        map_pooled_ms, map_workspace, conv_ms, conv_unchecked_ms, conv_checked_ms, conv_workspace, conv_alloc,
        conv_checked_alloc, inputs,
        static_cast<double>(n) * co * 2, 27.0 * n * 4, variants.c_str(), share, device_name(gpu).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spconv bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
