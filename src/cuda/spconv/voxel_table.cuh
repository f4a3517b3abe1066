// The map build's hash table of a coordinate set on the device: its lookups, shared by the build's
// probes (map.cu) and by the halo kernel's probe of the rows' own order (halo_pipe.cu), which looks a
// sample of rows' neighbours up before the map itself is written.
#pragma once

#include <cstdint>

#include "core/sparse_conv_backend.h"

namespace frugal::cuda::spconv_kernels {

// Rows by packed key: table[s] a row index (kEmptySlot: none) in 2^p slots found by linear probing from
// hash_key(key) & mask, keys[row] the row's packed key (spconv::backend).
struct VoxelTable {
  const uint64_t* keys;
  const int32_t* table;
  uint64_t mask;

#if defined(__CUDACC__)
  // The row whose packed key is q, or -1.
  __device__ __forceinline__ int32_t find(uint64_t q) const {
    for (uint64_t s = spconv::backend::hash_key(q) & mask;; s = (s + 1) & mask) {
      const int32_t t = __ldg(&table[s]);
      if (t == spconv::backend::kEmptySlot) return -1;
      if (__ldg(&keys[t]) == q) return t;
    }
  }
  // The row at offset k (kernel_size ks, dilation) of the voxel whose packed key is key, or -1 (none, or
  // an offset that leaves the packable range).
  __device__ __forceinline__ int32_t neighbor(uint64_t key, int k, int ks, int dilation) const {
    namespace sb = spconv::backend;
    const int64_t qx = sb::key_x(key) + sb::axis_offset(k / (ks * ks), ks, dilation);
    const int64_t qy = sb::key_y(key) + sb::axis_offset(k / ks % ks, ks, dilation);
    const int64_t qz = sb::key_z(key) + sb::axis_offset(k % ks, ks, dilation);
    if (!sb::coord_in_range(qx) || !sb::coord_in_range(qy) || !sb::coord_in_range(qz)) return -1;
    return find(sb::pack_key(sb::key_b(key), qx, qy, qz));
  }
#endif
};

}  // namespace frugal::cuda::spconv_kernels
