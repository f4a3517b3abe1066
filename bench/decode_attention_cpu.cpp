// Benchmark of decode attention on the CPU: one query token per sequence over the packed K and V
// caches (Hq = 32 over Hkv = 8), beside the machine's read bandwidth over the caches' own bytes
// (packed codes and scales: the memory-bound floor of the call).
//
//   decode_attention_cpu [--len L] [--batch B] [--reps N] [--threads N] [--dims 64,128] [--bits 4,8]
//
// The caches are filled with random bytes and scales (any byte is valid codes), every sequence at
// length L. Median of --reps timed calls (std::chrono) after one untimed call, wall time and the
// process's CPU time (on a machine shared with other work, bytes per CPU-second is the per-core rate).
// Prints a markdown table.
#include <omp.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cpu_timing.h"
#include "frugal/attention.h"
#include "frugal/frugal.h"
#include "frugal/kv_cache.h"

namespace {

// A cache of `batch` sequences of `len` tokens: random codes, scales around √D, positions at len.
frugal::kv::Cache filled_cache(int batch, int heads, int dim, int64_t len, int bits, uint64_t seed) {
  frugal::kv::Cache c({.batch = batch, .num_kv_heads = heads, .head_dim = dim, .capacity = len, .bits = bits});
  std::mt19937_64 rng(seed);
  auto* p = static_cast<uint64_t*>(c.packed().data());
  for (size_t i = 0; i < c.packed().nbytes() / 8; ++i) p[i] = rng();
  std::uniform_real_distribution<float> s(0.5f, 1.5f);
  float* sc = c.scales().data_as<float>();
  for (int64_t i = 0; i < c.scales().numel(); ++i) sc[i] = s(rng) * std::sqrt(static_cast<float>(dim));
  for (int64_t& pos : c.write_positions_memory()) pos = len;
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t len = 8192;
  int batch = 8, reps = 5, max_threads = omp_get_max_threads();
  std::vector<int> dims = {128, 64}, widths = {4, 8};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--len") len = std::atoll(argv[i + 1]);
    else if (a == "--batch") batch = std::atoi(argv[i + 1]);
    else if (a == "--reps") reps = std::atoi(argv[i + 1]);
    else if (a == "--threads") max_threads = std::atoi(argv[i + 1]);
    else if (a == "--dims") dims = parse_list(argv[i + 1]);
    else if (a == "--bits") widths = parse_list(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: decode_attention_cpu [--len L] [--batch B] [--reps N] [--threads N] [--dims a,b] [--bits a,b]\n");
      return 1;
    }
  }
  const int q_heads = 32, kv_heads = 8;
  std::vector<int> thread_counts = {1};
  if (max_threads > 1) thread_counts.push_back(max_threads);
  std::printf("cpu: %s, %d threads available; B = %d, L = %lld, Hq = %d, Hkv = %d\n\n",
              frugal::device_name(frugal::Device::cpu()).c_str(), omp_get_max_threads(), batch,
              static_cast<long long>(len), q_heads, kv_heads);
  std::printf("| D | K/V bits | threads | attention (ms) | cache GB/s | GB/s per CPU-second | read floor GB/s (per CPU-second) | × floor (per CPU-second) |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (int d : dims)
    for (int bits : widths) {
      const frugal::kv::Cache k = filled_cache(batch, kv_heads, d, len, bits, 1);
      const frugal::kv::Cache v = filled_cache(batch, kv_heads, d, len, bits, 2);
      frugal::Tensor q = frugal::Tensor::empty({batch, q_heads, d}, frugal::DType::f32);
      std::mt19937 rng(3);
      std::normal_distribution<float> n(0.0f, 1.0f);
      for (int64_t i = 0; i < q.numel(); ++i) q.data_as<float>()[i] = n(rng);
      frugal::Tensor out = frugal::Tensor::empty({batch, q_heads, d}, frugal::DType::f32);
      const double bytes = static_cast<double>(k.packed().nbytes() + k.scales().nbytes() + v.packed().nbytes() +
                                               v.scales().nbytes());
      for (int threads : thread_counts) {
        omp_set_num_threads(threads);
        uint64_t sink = 0;
        const Timing read = median_seconds(reps, [&] {
          uint64_t s = 0;
          for (const frugal::Tensor* t : {&k.packed(), &k.scales(), &v.packed(), &v.scales()}) {
            const auto* w = static_cast<const uint64_t*>(t->data());
            const int64_t nw = static_cast<int64_t>(t->nbytes() / 8);
#pragma omp parallel for reduction(+ : s) schedule(static)
            for (int64_t i = 0; i < nw; ++i) s += w[i];
          }
          sink += s;
        });
        const Timing t = median_seconds(reps, [&] { frugal::attention::decode_attention(q, k, v, out); });
        std::printf("| %d | %d/%d | %d | %.2f | %.2f | %.2f | %.2f (%.2f) | %.1f (%.1f) |\n", d, bits, bits, threads,
                    t.wall * 1e3, bytes / t.wall / 1e9, bytes / t.cpu / 1e9, bytes / read.wall / 1e9,
                    bytes / read.cpu / 1e9, t.wall / read.wall, t.cpu / read.cpu);
        std::fflush(stdout);
        if (sink == 42) std::printf(" ");
      }
    }
  return 0;
}
