// The f16 tensor-core kernel's wide-table loop (DecodeVariant::f16_wide): instances at head_dim 64
// and 128 × K/V of 4 or 8 bits (the kernel: decode_f16.cuh).
#include "cuda/attention/decode_f16.cuh"

namespace frugal::cuda::decode {

Launch f16_wide_kernel(int dim, int k_bits, int v_bits) {
  return dim == 64 ? f16_launch_bits<64, true>(k_bits, v_bits) : f16_launch_bits<128, true>(k_bits, v_bits);
}

}  // namespace frugal::cuda::decode
