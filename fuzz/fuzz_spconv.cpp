// libFuzzer harness: the kernel map (checked against a brute-force search) and the conv (checked
// against a double sum) on the CPU, with arbitrary coordinates, maps, shapes and values.
#include <cstdio>
#include <cstdlib>

#include "cases.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  frugal::fuzz::Record rec;
  try {
    frugal::fuzz::run_spconv_case({data, size}, frugal::Device::cpu(), rec);
  } catch (const frugal::fuzz::Broken& e) {
    std::fprintf(stderr, "broken invariant after %zu calls: %s\n", rec.outcomes.size(), e.what());
    std::abort();
  }
  return 0;
}
