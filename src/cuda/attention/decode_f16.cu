// The f16 tensor-core kernel's register loop (DecodeVariant::f16_registers): instances at
// head_dim 64, 128, 256 and 512 × K/V of 4 or 8 bits (the kernel: decode_f16.cuh).
#include "cuda/attention/decode_f16.cuh"

namespace frugal::cuda::decode {

Launch f16_registers_kernel(int dim, int k_bits, int v_bits) {
  switch (dim) {
    case 64:
      return f16_launch_bits<64>(k_bits, v_bits);
    case 128:
      return f16_launch_bits<128>(k_bits, v_bits);
    case 256:
      return f16_launch_bits<256>(k_bits, v_bits);
    default:
      return f16_launch_bits<512>(k_bits, v_bits);
  }
}

}  // namespace frugal::cuda::decode
