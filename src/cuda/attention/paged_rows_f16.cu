// The f16 tensor-core decode kernel's register loop over paged row items (PagedVariant::rows_f16 at
// head_dim 256 and 512): instances × K/V of 4 or 8 bits (the kernel: decode_f16.cuh).
#include "cuda/attention/decode_f16.cuh"

namespace frugal::cuda::decode {

Launch f16_registers_paged_kernel(int dim, int k_bits, int v_bits) {
  // D = 64 and 128 take the wide-table loop (paged_rows_f16_wide.cu).
  return dim == 256 ? f16_launch_bits<256, false, true>(k_bits, v_bits) : f16_launch_bits<512, false, true>(k_bits, v_bits);
}

}  // namespace frugal::cuda::decode
