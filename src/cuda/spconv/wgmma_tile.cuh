// What the wgmma kernels (wgmma.cu) and the pipelined halo kernel (halo_pipe.cu) share: the weight
// slices' bulk tensor copies, the epilogue's staging of the accumulators, the tensor maps the copy
// engine reads, and the launch of the warp-specialized kernel over the tiles the halo kernel hands on.
#pragma once

#include <cuda.h>  // CUtensorMap (the types only: the encoder is reached through the runtime)
#include <cudaTypedefs.h>

#include <type_traits>

#include "cuda/spconv/tile.cuh"
#include "cuda/wgmma.cuh"  // FRUGAL_WGMMA

namespace frugal::cuda::spconv_kernels {

#ifdef FRUGAL_WGMMA
// Bulk tensor copy (TMA) of the box at (x, y, z) of the tensor map into shared memory at dst,
// completing `box bytes` transactions on the mbarrier at bar.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, int x, int y, int z, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(z), "r"(bar)
      : "memory");
}

#endif  // FRUGAL_WGMMA

// ---- the epilogue's staging (every wgmma kernel) ----------------------------------------------------
// Accumulator i of block b of a thread of warp w (w < 8; warpgroup w / 4 owns MB blocks of 64 rows):
// row 64·(MB·(w / 4) + b) + 16·(w % 4) + lane/4 + 8·(i/2 % 2) of the tile, column 8·(i/4) +
// 2·(lane % 4) + i % 2 (the wgmma m64nN f32 layout).
// This thread's accumulators (first: its block 0's first row) plus the bias, rounded to T, into the
// staging tile cs (BM rows of BN + 8 elements).
template <typename T, int BN, int MB>
__device__ __forceinline__ void stage_acc(const Params& p, const float (&acc)[MB * BN / 2], int co0, int first,
                                          int lane, T* cs) {
  constexpr int R = BN / 2, LDC = BN + 8;
  const T* bias = static_cast<const T*>(p.bias);
#pragma unroll
  for (int j = 0; j < R; j += 4) {
    const int col = (j / 4) * 8 + (lane % 4) * 2;
    float b0 = 0.0f, b1 = 0.0f;
    if (bias && co0 + col < p.co) b0 = to_f32(bias[co0 + col]), b1 = to_f32(bias[co0 + col + 1]);  // co % 8 == 0
#pragma unroll
    for (int b = 0; b < MB; ++b) {
      const int r0 = first + 64 * b;
      store_pair(cs + r0 * LDC + col, acc[b * R + j] + b0, acc[b * R + j + 1] + b1);
      store_pair(cs + (r0 + 8) * LDC + col, acc[b * R + j + 2] + b0, acc[b * R + j + 3] + b1);
    }
  }
}

// The driver's tensor-map encoder (nullptr where it has none), looked up once.
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      fn = nullptr;
    (void)cudaGetLastError();
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

// The weight [K, Ci, Co] as a 3-D tensor map (Co fastest) of 64 × 64 × 1 boxes with the 128-byte
// swizzle: a box lands exactly as the B tile's 8 KB of one 64-channel group (the layout the wgmma
// descriptors read); rows past Ci and channels past Co are filled with zeros. False where the driver
// has no encoder.
template <typename T>
bool weight_map(const Params& p, CUtensorMap* map) {
  const auto encode = tensor_map_encoder();
  if (!encode) return false;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(p.co), static_cast<cuuint64_t>(p.ci), static_cast<cuuint64_t>(p.k)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(p.co) * sizeof(T), static_cast<cuuint64_t>(p.ci) * p.co * sizeof(T)};
  const cuuint32_t box[3] = {64, 64, 1}, unit[3] = {1, 1, 1};
  const auto type = std::is_same_v<T, __half> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  return encode(map, type, 3, const_cast<void*>(p.weight), dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
                CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The features [N, Ci] as a 2-D tensor map (Ci fastest) of boxes of `rows` rows × 64 channels with the
// 128-byte swizzle (channels past Ci and rows past N filled with zeros): the pipelined halo kernel's row
// copies (boxes of 64 rows, and of 8 for the rest of a range).
template <typename T>
bool feature_map(const Params& p, CUtensorMap* map, cuuint32_t rows = 8) {
  const auto encode = tensor_map_encoder();
  if (!encode) return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(p.ci), static_cast<cuuint64_t>(p.n)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(p.ci) * sizeof(T)};
  const cuuint32_t box[2] = {64, rows}, unit[2] = {1, 1};
  const auto type = std::is_same_v<T, __half> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  return encode(map, type, 2, const_cast<void*>(p.feats), dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
                CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The warp-specialized kernel over the tiles the pipelined halo kernel left in left.handoff (a block a
// tile of the launch; those past the list's count return), launched as a programmatic dependent of it
// (wgmma.cu).
void launch_handoff(const Params& left, DType dtype, int tile_co, const CUtensorMap& wmap, cudaStream_t s);

}  // namespace frugal::cuda::spconv_kernels
