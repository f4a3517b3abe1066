// The sparse-conv kernels' interface: argument structs, the packed coordinate key and the hash
// shared by the CPU and CUDA map builders, and the backend functions. The public entry points
// (src/core/sparse_conv.cpp) validate; these never do, they only report what they found.
#pragma once

#include <cstdint>

#include "frugal/sparse_conv.h"

#if defined(__CUDACC__)
#define FRUGAL_HD __host__ __device__ __forceinline__
#else
#define FRUGAL_HD inline
#endif

namespace frugal::spconv::backend {

// ---- packed keys ------------------------------------------------------------------------------
// 64-bit key: bits [0,17) z, [17,34) y, [34,51) x (each biased by 2^16 to be non-negative),
// [51,63) batch; bit 63 is never set, so no valid key equals ~0.
constexpr int kAxisBits = 17;
constexpr int64_t kAxisBias = 65536;  // -kCoordMin
constexpr uint64_t kAxisMask = (1ull << kAxisBits) - 1;

FRUGAL_HD bool coord_in_range(int64_t v) { return v >= kCoordMin && v <= kCoordMax; }
FRUGAL_HD bool batch_in_range(int64_t b) { return b >= 0 && b <= kMaxBatch; }

// Callers pass in-range values; out-of-range ones are masked (the build reports them anyway).
FRUGAL_HD uint64_t pack_key(int64_t b, int64_t x, int64_t y, int64_t z) {
  return (static_cast<uint64_t>(b) & 0xfffull) << (3 * kAxisBits) |
         (static_cast<uint64_t>(x + kAxisBias) & kAxisMask) << (2 * kAxisBits) |
         (static_cast<uint64_t>(y + kAxisBias) & kAxisMask) << kAxisBits |
         (static_cast<uint64_t>(z + kAxisBias) & kAxisMask);
}
FRUGAL_HD int64_t key_x(uint64_t k) { return static_cast<int64_t>((k >> (2 * kAxisBits)) & kAxisMask) - kAxisBias; }
FRUGAL_HD int64_t key_y(uint64_t k) { return static_cast<int64_t>((k >> kAxisBits) & kAxisMask) - kAxisBias; }
FRUGAL_HD int64_t key_z(uint64_t k) { return static_cast<int64_t>(k & kAxisMask) - kAxisBias; }
FRUGAL_HD int64_t key_b(uint64_t k) { return static_cast<int64_t>(k >> (3 * kAxisBits)); }

// The 64-bit finalizer of MurmurHash3 (fmix64): every key bit affects every slot bit, so
// spatially adjacent keys spread over the table.
FRUGAL_HD uint64_t hash_key(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ull;
  k ^= k >> 33;
  return k;
}

// The table holds row indices (int32, -1 = empty) in 2^p slots with 2^p ≥ 2N (load ≤ 0.5),
// found by linear probing; a slot's key is keys[row], so a slot costs 4 bytes instead of 12.
constexpr int32_t kEmptySlot = -1;
inline uint64_t table_capacity(int64_t n) {
  uint64_t cap = 16;
  while (cap < 2 * static_cast<uint64_t>(n)) cap <<= 1;
  return cap;
}

// The offset of kernel index k along one axis: i = k / ks², j = (k / ks) % ks, l = k % ks.
FRUGAL_HD int axis_offset(int idx, int ks, int dilation) { return (idx - ks / 2) * dilation; }

// ---- map build ------------------------------------------------------------------------------
struct MapArgs {
  const int32_t* coords = nullptr;  // [n, 4] contiguous
  int64_t n = 0;
  int kernel_size = 3, dilation = 1;
  int32_t* nbr = nullptr;  // [K, n]
  int device = 0;          // CUDA device index
};

// What the build found wrong (rows are -1 when nothing was): a row whose coordinate cannot be
// packed (the first one on the CPU; the smallest on CUDA), and two rows with equal coordinates.
struct MapStatus {
  int64_t bad_row = -1;
  int64_t dup_row_a = -1, dup_row_b = -1;  // dup_row_a < dup_row_b
};

// ---- convolution ----------------------------------------------------------------------------
// Which CUDA kernel computes the conv (the CPU ignores it):
//   simt  CUDA cores, every dtype (the f32 path);
//   wmma  tensor cores through WMMA 16×16×16 over the map's row order, f16/bf16, any K;
//   mma   tensor cores through mma.sync m16n8k16 over rows sorted by neighbor mask within windows,
//         skipping, per 16-row group, the offsets none of its rows has (src/cuda/sparse_conv_mma.cu);
//         f16/bf16 with K ≤ 32, Ci and Co multiples of 8, 16-byte aligned tensors.
//   wgmma the same row orders and tiles through Hopper's asynchronous warpgroup MMA (wgmma,
//         sm_90a; src/cuda/sparse_conv_wgmma.cu), skipping per tile, split over offset ranges on
//         small grids, warp-specialized (a producer warpgroup gathers, the copy engine brings the
//         weights, two consumer warpgroups multiply) where that was measured faster; what mma
//         takes, on a device whose loaded code was compiled for sm_90a.
// automatic: simt for f32; for f16/bf16 the kernel FRUGAL_SPCONV_KERNEL names (simt | wmma | mma |
// wgmma) when set, else wgmma where it applies and the device runs it, then mma, then wmma.
enum class ConvKernel : uint8_t { automatic, simt, wmma, mma, wgmma };

struct ConvArgs {
  const void* feats = nullptr;   // [≥ n, ci] row-major; the sentinel row (if any) is never read
  const int32_t* nbr = nullptr;  // [k, n]
  const void* weight = nullptr;  // [k, ci, co]
  const void* bias = nullptr;    // [co] or nullptr
  void* out = nullptr;           // [n, co]
  DType dtype = DType::f32;
  int64_t n = 0;
  int k = 27, ci = 0, co = 0;
  bool check = true;  // report the first nbr entry outside [0, n]
  ConvKernel kernel = ConvKernel::automatic;
  int tile_co = 0;          // output-channel tile: WMMA 64 or 128, (w)gmma 64, 128 or 256; 0 picks by co
  int8_t sort_rows = -1;    // (w)gmma: 1 rows sorted by neighbor mask, 0 the map's order, -1 by size
  int64_t chunk_rows = 0;   // (w)gmma: rows per launch, a multiple of 128 (0: the default, 2^22)
  int splits = 0;           // wgmma: offset ranges summed apart, then reduced in order (0: by grid size)
  int tile_rows = 0;        // wgmma: rows a block, 128 or (tiles ≤ 128 channels) 256; 0 by size
  int8_t wgmma_ws = -1;     // wgmma: 1 the warp-specialized kernel (a producer warpgroup gathers, two
                            // consumer warpgroups multiply; 128- or 256-row tiles), 2 the same with two blocks a
                            // multiprocessor (tile_co 64, 128-row tiles), 4 the pipelined halo kernel (Ci ≤ 128,
                            // Co ≤ tile_co ≤ 128: each tile's input rows loaded once; elsewhere as 1), 0 every
                            // warp does both, -1 by rule
  int device = 0;   // CUDA device index
};

// The arguments of a conv over these tensors (the public call validates them first; the tests and
// the benchmark pass their own): K and N from nbr [K, N], Ci from feats, Co from weight [K, Ci, Co],
// the dtype and device of feats; every kernel-choice field at its default.
inline ConvArgs conv_args(const TensorView& feats, const TensorView& nbr, const TensorView& weight, const TensorView* bias,
                          const TensorView& out) {
  ConvArgs a;
  a.feats = feats.data;
  a.nbr = nbr.data_as<const int32_t>();
  a.weight = weight.data;
  a.bias = bias ? bias->data : nullptr;
  a.out = out.data;
  a.dtype = feats.dtype;
  a.n = nbr.size(1);
  a.k = static_cast<int>(nbr.size(0));
  a.ci = static_cast<int>(feats.size(1));
  a.co = static_cast<int>(weight.size(2));
  a.device = feats.device.index;
  return a;
}

}  // namespace frugal::spconv::backend

namespace frugal::cpu {
// Fills a.nbr; returns what was wrong (the map is unspecified then).
spconv::backend::MapStatus spconv_build_map(const spconv::backend::MapArgs& a);
// Returns the linear index k·n + row of the first nbr entry outside [0, n] when a.check (the
// output is not computed then), else -1.
int64_t spconv_conv(const spconv::backend::ConvArgs& a);
}  // namespace frugal::cpu

namespace frugal::cuda {
// Waits for the stream once, to read the status back.
spconv::backend::MapStatus spconv_build_map(const spconv::backend::MapArgs& a, Stream stream);
// When a.check: waits for the stream and returns the smallest linear index k·n + row of an nbr
// entry outside [0, n] (-1 when none); otherwise returns -1 at once, without waiting.
int64_t spconv_conv(const spconv::backend::ConvArgs& a, Stream stream);
// Whether ConvKernel::wgmma runs on this device (sm_90a code loaded for it; false without CUDA).
bool spconv_wgmma_available(int device);
// Launches of the pipelined halo conv kernel so far in this process (tests check that the rule
// picked it, or did not).
int64_t spconv_halo_pipe_launches();
}  // namespace frugal::cuda
