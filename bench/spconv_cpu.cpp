// Benchmark of the submanifold conv on the CPU: useful GFLOP/s (2 · pairs · Ci · Co, pairs = map
// entries with a neighbor) of a 3x3x3 conv on a sphere shell, per dtype and channel count, in wall
// time and per CPU-second (what the threads were given: on a shared machine, the per-core rate).
// The peer figure is the same machine's single-precision GEMM rate (numpy's matmul over OpenBLAS,
// bench/README.md), measured beside it.
//
//   spconv_cpu [--radius R] [--channels 32,64,128,256] [--reps N] [--shuffle] [--order given|morton]
// --shuffle: the shell's rows in a random order (seed 7); --order: the KernelMap's run order forced
// (default: the rule's: lexicographic rows keep theirs, any other order runs in Morton order).
#include <omp.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cpu_timing.h"
#include "frugal/frugal.h"
#include "frugal/half.h"
#include "frugal/sparse_conv.h"

using namespace frugal;

namespace {


// The voxels of an R^3 grid within half a voxel's diagonal of the sphere of radius R/2 (x slowest).
std::vector<int32_t> sphere_shell(int res) {
  std::vector<int32_t> c;
  const double r = res / 2.0;
  for (int x = 0; x < res; ++x)
    for (int y = 0; y < res; ++y)
      for (int z = 0; z < res; ++z) {
        const double dx = x + 0.5 - r, dy = y + 0.5 - r, dz = z + 0.5 - r;
        if (std::abs(std::sqrt(dx * dx + dy * dy + dz * dz) - r) < 0.87) c.insert(c.end(), {0, x, y, z});
      }
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  int res = 128, reps = 5;
  bool shuffle = false;
  std::optional<spconv::RowOrder> order;
  std::vector<int> channels = {32, 64, 128, 256};
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--shuffle")) shuffle = true;
    if (!std::strcmp(argv[i], "--order") && i + 1 < argc)
      order = !std::strcmp(argv[++i], "morton") ? spconv::RowOrder::morton : spconv::RowOrder::given;
    if (!std::strcmp(argv[i], "--radius") && i + 1 < argc) res = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--channels") && i + 1 < argc) {
      channels.clear();
      std::stringstream ss(argv[++i]);
      for (std::string t; std::getline(ss, t, ',');) channels.push_back(std::stoi(t));
    }
  }
  std::vector<int32_t> coords = sphere_shell(res);
  const int64_t n = static_cast<int64_t>(coords.size()) / 4;
  if (shuffle) {
    std::vector<int64_t> perm(n);
    for (int64_t i = 0; i < n; ++i) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), std::mt19937_64(7));
    std::vector<int32_t> c(coords.size());
    for (int64_t i = 0; i < n; ++i) std::memcpy(&c[4 * i], &coords[4 * perm[i]], 16);
    coords.swap(c);
  }
  TensorView cv(coords.data(), DType::i32, {n, 4});
  std::vector<double> build;
  spconv::KernelMap map;
  for (int r = 0; r < 3; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    map = spconv::KernelMap::build(cv, 3, 1, nullptr, order);
    build.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::vector<int32_t> nbr(27 * n);
  copy(map.columns(), TensorView(nbr.data(), DType::i32, {27, n}));
  int64_t pairs = 0;
  for (int32_t m : nbr) pairs += m < n;
  std::printf("shell R=%d: %lld voxels (%s), %.2f neighbors a voxel, %d threads; map in %s order, built in %.1f ms\n\n",
              res, static_cast<long long>(n), shuffle ? "shuffled" : "lexicographic", static_cast<double>(pairs) / n,
              omp_get_max_threads(), spconv::to_string(map.stats().order).c_str(), median(build) * 1e3);
  std::printf("| dtype | C | ms | GFLOP/s | GFLOP/s per CPU-second |\n|---|---|---|---|---|\n");
  std::mt19937_64 rng(7);
  std::normal_distribution<float> nd;
  for (DType dt : {DType::f32, DType::f16})
    for (int c : channels) {
      Tensor feats = Tensor::empty({n, c}, dt), w = Tensor::empty({27, c, c}, dt), out = Tensor::empty({n, c}, dt);
      auto fill = [&](Tensor& t, float s) {
        for (int64_t i = 0; i < t.numel(); ++i) {
          const float v = nd(rng) * s;
          if (dt == DType::f32)
            t.data_as<float>()[i] = v;
          else
            t.data_as<uint16_t>()[i] = float_to_half(v);
        }
      };
      fill(feats, 1.0f);
      fill(w, 1.0f / std::sqrt(27.0f * c));
      spconv::submanifold_conv(feats, map, w, nullptr, out);  // untimed
      std::vector<double> wall, cpu;
      for (int r = 0; r < reps; ++r) {
        const double c0 = cpu_seconds();
        const auto t0 = std::chrono::steady_clock::now();
        spconv::submanifold_conv(feats, map, w, nullptr, out);
        wall.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        cpu.push_back(cpu_seconds() - c0);
      }
      const double flops = 2.0 * pairs * c * c;
      std::printf("| %s | %d | %.2f | %.1f | %.1f |\n", to_string(dt), c, median(wall) * 1e3,
                  flops / median(wall) / 1e9, flops / median(cpu) / 1e9);
      std::fflush(stdout);
    }
  return 0;
}
