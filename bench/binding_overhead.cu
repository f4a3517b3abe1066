// Per-call host cost of a tiny CUDA op through the C++ API (the baseline for the Python binding's
// overhead, measured by bench/binding_overhead.py): kv::hadamard_transform on [1, 64] f32.
#include <chrono>
#include <cstdio>

#include "frugal/frugal.h"
#include "frugal/kv_cache.h"

int main() {
  using namespace frugal;
  if (!cuda_available()) {
    std::printf("no GPU\n");
    return 0;
  }
  Tensor x = Tensor::zeros({1, 64}, DType::f32, Device::cuda());
  Tensor y = Tensor::empty({1, 64}, DType::f32, Device::cuda());
  for (int i = 0; i < 1000; ++i) kv::hadamard_transform(x, y);
  synchronize(Device::cuda());
  const int n = 20000;
  double best = 1e9;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) kv::hadamard_transform(x, y);
    synchronize(Device::cuda());
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / n;
    best = best < us ? best : us;
  }
  std::printf("cpp_us_per_call %.3f\n", best);
  return 0;
}
