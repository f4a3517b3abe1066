// libFuzzer harness: the KV cache (create, append, dequantize, count_nonfinite_scales, the
// transform) and decode attention on the CPU, with arbitrary configs, shapes, strides and values.
#include "cases.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return frugal::fuzz::fuzz_one(frugal::fuzz::run_kv_case, data, size);
}
