// Benchmark of the KV-cache append on the CPU: GB/s of f16 input quantized, per thread count, beside
// the machine's read bandwidth over the same bytes (a memory-bound floor).
//
//   kv_append_cpu [--mb N] [--reps N] [--threads N] [--dims 64,128,256] [--bits 4,8]
//
// Input: T tokens × 8 heads × D of N(0,1)-like f16, N MiB in all (default 512: larger than the
// caches), into a global cache of one sequence. Median of --reps timed calls (std::chrono) after one
// untimed call, in wall time and in the process's CPU time (what the threads were given: on a
// machine shared with other work, GB/s per CPU-second is the per-core rate). Prints a markdown table.
#include <omp.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cpu_timing.h"
#include "frugal/frugal.h"
#include "frugal/half.h"
#include "frugal/kv_cache.h"


int main(int argc, char** argv) {
  int64_t mb = 512;
  int reps = 5, max_threads = omp_get_max_threads();
  std::vector<int> dims = {128, 64, 256}, widths = {4, 8};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--mb") mb = std::atoll(argv[i + 1]);
    else if (a == "--reps") reps = std::atoi(argv[i + 1]);
    else if (a == "--threads") max_threads = std::atoi(argv[i + 1]);
    else if (a == "--dims") dims = parse_list(argv[i + 1]);
    else if (a == "--bits") widths = parse_list(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: kv_append_cpu [--mb N] [--reps N] [--threads N] [--dims a,b] [--bits a,b]\n");
      return 1;
    }
  }
  const int heads = 8;
  const int64_t elements = mb * (int64_t{1} << 20) / 2;
  frugal::Tensor x = frugal::Tensor::empty({elements}, frugal::DType::f16);
  {
    std::mt19937 rng(1234);
    std::normal_distribution<float> n(0.0f, 1.0f);
    std::vector<uint16_t> pool(1 << 20);
    for (auto& h : pool) h = frugal::float_to_half(n(rng));
    auto* p = x.data_as<uint16_t>();
    for (int64_t i = 0; i < elements; i += static_cast<int64_t>(pool.size()))
      std::memcpy(p + i, pool.data(), sizeof(uint16_t) * std::min<int64_t>(pool.size(), elements - i));
  }
  std::vector<int> thread_counts = {1};
  if (max_threads > 1) thread_counts.push_back(max_threads);

  // The floor: one pass reading the input's bytes (8-byte words summed), per thread count.
  std::printf("cpu: %s, %d threads available; input %lld MiB of f16\n\n", frugal::device_name(frugal::Device::cpu()).c_str(),
              omp_get_max_threads(), static_cast<long long>(mb));
  std::printf("| D | bits | threads | append (ms) | GB/s of f16 input | GB/s per CPU-second (best) | read floor GB/s (per CPU-second) |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (int threads : thread_counts) {
    omp_set_num_threads(threads);
    const auto* words = x.data_as<const uint64_t>();
    const int64_t nwords = elements / 4;
    uint64_t sink = 0;
    const Timing read = median_seconds(reps, [&] {
      uint64_t s = 0;
#pragma omp parallel for reduction(+ : s) schedule(static)
      for (int64_t i = 0; i < nwords; ++i) s += words[i];
      sink += s;
    });
    const double bytes = 2.0 * elements;
    for (int d : dims)
      for (int bits : widths) {
        const int64_t tokens = elements / (heads * d);
        const frugal::TensorView xv(x.data(), frugal::DType::f16, {tokens, heads, d});
        frugal::kv::Cache cache({.num_kv_heads = heads, .head_dim = d, .capacity = tokens, .bits = bits});
        const Timing t = median_seconds(reps, [&] {
          cache.reset();
          cache.append(xv);
        });
        const double in = 2.0 * tokens * heads * d;
        std::printf("| %d | %d | %d | %.1f | %.3f | %.3f (%.3f) | %.2f (%.2f) |\n", d, bits, threads, t.wall * 1e3,
                    in / t.wall / 1e9, in / t.cpu / 1e9, in / t.cpu_best / 1e9, bytes / read.wall / 1e9,
                    bytes / read.cpu / 1e9);
        std::fflush(stdout);
      }
    if (sink == 42) std::printf(" ");
  }
  return 0;
}
