// libFuzzer harness: the KV cache (create, append, dequantize, count_nonfinite_scales, the
// transform) and decode attention on the CPU, with arbitrary configs, shapes, strides and values.
#include <cstdio>
#include <cstdlib>

#include "cases.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  frugal::fuzz::Record rec;
  try {
    frugal::fuzz::run_kv_case({data, size}, frugal::Device::cpu(), rec);
  } catch (const frugal::fuzz::Broken& e) {
    std::fprintf(stderr, "broken invariant after %zu calls: %s\n", rec.outcomes.size(), e.what());
    std::abort();
  }
  return 0;
}
