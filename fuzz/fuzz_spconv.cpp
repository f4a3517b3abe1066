// libFuzzer harness: the kernel map (checked against a brute-force search) and the conv (checked
// against a double sum) on the CPU, with arbitrary coordinates, maps, shapes and values.
#include "cases.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return frugal::fuzz::fuzz_one(frugal::fuzz::run_spconv_case, data, size);
}
