// Submanifold sparse voxel convolution: the kernel (neighbor) map of a set of active voxels and
// the fused convolution over it, on the CPU or a GPU, without ever materializing the
// (K, N, Ci) gather.
//
// Data
//   coords  [N, 4]  i32, rows (b, x, y, z), unique. b in [0, 4095]; x, y, z in [-65536, 65535]
//                   (negative coordinates are fine). These ranges are what a packed 64-bit key
//                   holds: 12 bits of batch and 17 signed bits per axis.
//   nbr     [K, N]  i32, K = kernel_size³. nbr[k, n] is the row of the voxel at coords[n] + offset_k
//                   in the same batch, or N (the sentinel) when there is none.
//   feats   [N, Ci] or [N + 1, Ci]  f32 | f16 | bf16, row-major. The padded form of the original
//                   design (one extra zero row at index N) is accepted; the sentinel contributes
//                   nothing either way and row N is never read.
//   weight  [K, Ci, Co]  same dtype as feats.   bias [Co] (optional), same dtype.
//   out     [N, Co]  same dtype. Accumulation is always f32.
//
//   out[n, co] = bias[co] + Σ_k Σ_ci feats[nbr[k, n], ci] · weight[k, ci, co]
//
// Offset order (k ↔ offset): for a kernel of size ks (odd, 1..7) and dilation d,
//   k = (i·ks + j)·ks + l,   (dx, dy, dz) = ((i, j, l) − ks/2) · d,   i, j, l in [0, ks)
// so dx varies slowest and dz fastest; k = K/2 is the centre (offset 0), and offset K−1−k is
// the negation of offset k. The map therefore has the submanifold symmetry
//   nbr[k, n] = m  ⇔  nbr[K−1−k, m] = n.
// This is the orientation of a dense cross-correlation (PyTorch's conv3d, weight[:, :, i, j, l])
// and the order spconv 2.x uses over the spatial columns of its indices (its kernel positions
// flatten the kernel dims first-slowest in the order of the coordinate columns); spconv stores its
// weight as [Co, kD, kH, kW, Ci] ("KRSC") where ours is [K, Ci, Co]: see weight_from_krsc.
// Libraries that flatten the first axis fastest are served by offset_permutation.
//
// Guarantees: each output row is written exactly once by one thread block (CUDA) or one thread
// (CPU), with no atomics: results are bitwise identical run to run. No buffer proportional to
// K·N·Ci exists. CUDA workspace (stream-ordered, from frugal's own memory pool, which keeps up to
// 256 MiB between calls): the checked conv holds a 256-byte flag; an f16/bf16 conv on the
// tensor-core kernels that sort rows (kernel_size 1 or 3, Ci and Co multiples of 8) holds the row
// order of up to 2^22 rows, 4 bytes a row (≤ 16 MiB); a wgmma conv on a grid too small to fill the
// GPU sums fixed offset ranges into f32 partials (≤ 64 MiB). Nothing else is allocated.
// On CUDA, f16/bf16 run on tensor cores (f32 accumulation): by default through wgmma where the GPU
// runs sm_90a code (Hopper), else mma.sync (both over rows sorted by their neighbor pattern on large
// shapes) where they apply, WMMA otherwise; f32 runs on CUDA cores. The environment variable
// FRUGAL_SPCONV_KERNEL = simt | wmma | mma | wgmma, read once, overrides the choice for f16/bf16
// (mma and wgmma only where they apply; wgmma falls back to mma on GPUs without sm_90a code).
// The map build allocates O(N): a hash table of 2^p ≥ 2N int32 slots and N packed 64-bit keys,
// freed before it returns. Index arithmetic is 64-bit.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "frugal/tensor.h"

namespace frugal::spconv {

constexpr int kMaxKernelSize = 7;
constexpr int32_t kMaxBatch = 4095;
constexpr int32_t kCoordMin = -65536, kCoordMax = 65535;

constexpr int kernel_volume(int kernel_size) { return kernel_size * kernel_size * kernel_size; }

// The offset (dx, dy, dz) of kernel index k (order above).
std::array<int, 3> kernel_offset(int k, int kernel_size, int dilation = 1);

// ---- kernel map ------------------------------------------------------------------------------
// Builds nbr [K, N] i32 on the device of coords. kernel_size odd in [1, 7]; dilation ≥ 1.
// Throws frugal::Error naming the row and the value for a coordinate outside the packable range,
// and the coordinate and both rows for a duplicate. On CUDA it waits for the stream once (to
// read those two checks back). N = 0 gives an empty [K, 0] map.
Tensor build_kernel_map(const TensorView& coords, int kernel_size = 3, int dilation = 1, Stream stream = nullptr);
// The same into a caller-provided nbr [K, N] i32 (contiguous, on the device of coords).
void build_kernel_map(const TensorView& coords, const TensorView& nbr, int kernel_size, int dilation,
                      Stream stream = nullptr);

// ---- convolution -----------------------------------------------------------------------------
enum class MapCheck : uint8_t {
  // Every nbr entry outside [0, N] raises frugal::Error. The entries are checked inside the conv
  // kernel itself (no extra pass); on CUDA this costs one 8-byte readback, i.e. one wait for the
  // stream at the end of the call.
  checked,
  // No readback and no wait. An entry outside [0, N] is still never dereferenced: it counts as
  // absent (like the sentinel), so a bad map gives wrong numbers, never an out-of-bounds access.
  unchecked,
};

// out = conv(feats, nbr, weight, bias); bias may be nullptr. out must not overlap feats.
void submanifold_conv(const TensorView& feats, const TensorView& nbr, const TensorView& weight, const TensorView* bias,
                      const TensorView& out, Stream stream = nullptr, MapCheck check = MapCheck::checked);
// Allocating form: returns out [N, Co] on the device of feats.
Tensor submanifold_conv(const TensorView& feats, const TensorView& nbr, const TensorView& weight,
                        const TensorView* bias = nullptr, Stream stream = nullptr, MapCheck check = MapCheck::checked);

// ---- other libraries' conventions --------------------------------------------------------------
enum class OffsetOrder : uint8_t {
  x_slowest,  // frugal's order (and spconv 2.x's, for the same coordinate columns)
  x_fastest,  // the reverse axis order: k' = (l·ks + j)·ks + i for the same (i, j, l)
};
// perm[k_other] = k_frugal: the frugal index of the other order's k-th offset. To import a weight
// stored in `other` order: w_frugal[perm[k]] = w_other[k]; a map: nbr_frugal[perm[k]] = nbr_other[k].
std::vector<int> offset_permutation(OffsetOrder other, int kernel_size);
// spconv 2.x weight [Co, ks, ks, ks, Ci] (KRSC) on the CPU → frugal's [K, Ci, Co] on the CPU.
Tensor weight_from_krsc(const TensorView& weight_krsc);

}  // namespace frugal::spconv
