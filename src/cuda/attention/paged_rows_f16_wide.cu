// The f16 tensor-core decode kernel's wide-table loop over paged row items (PagedVariant::rows_f16 at
// head_dim 64 and 128): instances × K/V of 4 or 8 bits, for items of one query row and of several
// (the kernel: decode_f16.cuh).
#include "cuda/attention/decode_f16.cuh"

namespace frugal::cuda::decode {

Launch f16_wide_paged_kernel(int dim, int k_bits, int v_bits, bool multi) {
  if (multi)
    return dim == 64 ? f16_launch_bits<64, true, true, true>(k_bits, v_bits)
                     : f16_launch_bits<128, true, true, true>(k_bits, v_bits);
  return dim == 64 ? f16_launch_bits<64, true, true>(k_bits, v_bits) : f16_launch_bits<128, true, true>(k_bits, v_bits);
}

}  // namespace frugal::cuda::decode
