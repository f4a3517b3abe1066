// Which kernel a sparse conv runs: the variants' limits (can_implement), their workspace, and the one
// set of rules (choose) that picks a variant and its tiling from the shapes, the dtype, the device's
// capabilities and the map's statistics. Plain C++: CPU-only builds compile it and its table test.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/device_caps.h"
#include "core/sparse_conv_backend.h"

namespace frugal::spconv {

// ---- limits the rules and the kernels share ------------------------------------------------------
constexpr int kMaxKernelVolume = kernel_volume(kMaxKernelSize);  // 343: what simt and wmma take
constexpr int kMaxMaskedOffsets = 32;  // mma, wgmma*: a row's neighbor mask is one 32-bit word
constexpr int kCpuTileRows = 16;       // the CPU's rows a tile
constexpr int kSimtTile = 64;          // simt: 64 rows × 64 output channels a block
constexpr int kTileRows = 128;         // output rows a block of the tensor-core kernels (tall tiles: twice)
constexpr int kGroupRows = 16;         // rows of an m16 tensor-core fragment: the granularity of skipping
// Rows per launch where the rows are sorted: the row order of one chunk lives in the workspace (4 bytes
// a row), so 2^22 rows keep it at 16 MiB whatever N is; a multiple of a window and of a tile, so that
// windows and tiles fall where one launch over all rows would put them. Unsorted calls take all their
// rows in one launch (one pipeline fill and drain, one hand-off launch).
constexpr int64_t kChunkRows = int64_t{1} << 22;
// Rows are sorted within windows of kWindow consecutive rows (one thread block sorts one window in
// shared memory): small enough to keep the gathered neighbors in L2 (8192 rows are about two x-slabs
// of a 1024³ sphere shell), large enough to group rows of equal masks.
constexpr int kWindow = 8192;
constexpr size_t kMaxSplitBytes = size_t{64} << 20;  // the f32 partials of a split launch at most
constexpr int kMaxSplits = 8;                        // offset ranges of a split launch at most (by rule)
// Where the rows are sorted by the size rule (wgmma on 128-row tiles): N·Ci·Co at least this.
// Sorting trades gather locality for fewer products, which pays only where the tensor-core work is large.
constexpr double kSortWork = 1e10;
// The pipelined halo kernel: Ci ≤ 64 · kHaloPasses in passes of 64 channels; the offsets it serves (its
// map slice and slot areas are sized for them): 27 (a 3×3×3 kernel) where it keeps three tile states
// (one pass, 64-wide column tiles: every byte of those areas is a halo row less), kMaxMaskedOffsets elsewhere.
constexpr int kHaloPasses = 2;
constexpr int kHaloChannels = 64;  // input channels a pass
FRUGAL_HD constexpr int halo_passes(int64_t ci) { return ci > kHaloChannels ? 2 : 1; }
FRUGAL_HD constexpr int halo_max_offsets(int tile_co, int64_t ci) {
  return tile_co == 64 && ci <= kHaloChannels ? 27 : kMaxMaskedOffsets;
}
// The fitting sample tiles that make a map suit the halo kernel: at least 3/4 of them. Tiles that do not
// fit are handed on to the warp-specialized kernel, after the halo kernel has sorted them out: that pays
// while most tiles fit, and loses where few do (rows in random order).
constexpr int halo_min_fits(int samples) { return samples > 0 ? (3 * samples + 3) / 4 : 1; }
constexpr int kHaloSamples = 256;  // sample tiles of a map's probe at most
constexpr int halo_samples(int64_t rows) {
  const int64_t tiles = (rows + kTileRows - 1) / kTileRows;
  return static_cast<int>(tiles < kHaloSamples ? tiles : kHaloSamples);
}
// The hand-off list's header: 16 bytes of counts (the list stays 16-byte aligned behind it).
constexpr size_t kHandoffHeader = 16;

// Shared memory of an mma block at each column tile: its cp.async stages of A (128 rows × BK + 8) and
// B (BK × tile_co + 8) in 16-bit elements, BK 64 in 3 stages at tile_co 64, 32 in 4 at 128, 64 in 4 at
// 256 (src/cuda/spconv/mma.cu, MmaTile, asserts them), and the tile's neighbor rows, output rows and
// masks (the kernel's __shared__ arrays). At tile_co 256 (220 KB) only 9.0 and 10.x hold it.
constexpr size_t mma_stage_bytes(int tile_co) {
  const size_t bk = tile_co == 128 ? 32 : 64, stages = tile_co == 64 ? 3 : 4;
  return stages * 2 * (kTileRows * (bk + 8) + bk * (tile_co + 8));
}
constexpr size_t kMmaStaticBytes =
    4 * (kMaxMaskedOffsets + 1) * kTileRows + 4 * (kTileRows / kGroupRows) + kMaxMaskedOffsets + 4;
constexpr size_t mma_smem_bytes(int tile_co) { return mma_stage_bytes(tile_co) + kMmaStaticBytes; }

// ---- the map's run order -----------------------------------------------------------------------
// The order a map runs its rows in, from whether they come in ascending lexicographic order of
// (b, x, y, z) (measured by the build): those keep it (the halo kernel's ranges need it, and on sphere
// shells it is the fastest order for Ci, Co ≤ 128), every other order runs in Morton order.
RowOrder choose_row_order(bool lex_sorted);

// ---- the choice ----------------------------------------------------------------------------------
// The rules' choice for these arguments on this device; stats: what frugal knows of the map (nullptr:
// a user map). Throws frugal::Error(unsupported) where no variant runs on the device.
ConvChoice choose(const backend::ConvArgs& a, const DeviceCaps& caps, const MapStats* stats);
// A forced choice with its unset fields (0, sort_rows unset) filled by the rules for its variant.
ConvChoice complete(const backend::ConvArgs& a, const DeviceCaps& caps, const ConvChoice& forced);
// Whether the (complete) choice runs these arguments on this device; why not, in one clause, if not.
bool can_implement(const backend::ConvArgs& a, const DeviceCaps& caps, const ConvChoice& c, std::string* why = nullptr);
// The workspace the CUDA dispatcher needs for the choice (the checked-map flag aside): the row order
// (sorted rows), then the f32 partials (splits > 1), then the hand-off list (halo_pipe); 16-byte parts.
size_t workspace_bytes(const backend::ConvArgs& a, const ConvChoice& c);
size_t order_bytes(const backend::ConvArgs& a, const ConvChoice& c);
size_t partial_bytes(const backend::ConvArgs& a, const ConvChoice& c);
size_t handoff_bytes(const backend::ConvArgs& a, const ConvChoice& c);

// The tensor-core kernels but wmma (mma, wgmma*): f16/bf16, K ≤ 32, Ci and Co multiples of 8, 16-byte
// aligned feats, weight and out (16-byte cp.async copies and stores).
bool takes_masked_rows(const backend::ConvArgs& a);
// The architectures each variant's code runs on (what can_implement checks first, and all it checks
// of the device's generation).
constexpr Arch arch_of(ConvVariant v) {
  switch (v) {
    case ConvVariant::cpu:
      return Arch::cpu;
    case ConvVariant::simt:
      return Arch::simt;
    case ConvVariant::wmma:  // WMMA on bf16 and cp.async
    case ConvVariant::mma:
      return Arch::sm80;
    case ConvVariant::wgmma:
    case ConvVariant::wgmma_ws:
    case ConvVariant::wgmma_ws2:
    case ConvVariant::halo_pipe:
      return Arch::sm90a;
  }
  return Arch::sm90a;
}
// The variants that run over the mma/wgmma row order and tiles.
constexpr bool is_wgmma(ConvVariant v) {
  return v == ConvVariant::wgmma || v == ConvVariant::wgmma_ws || v == ConvVariant::wgmma_ws2 ||
         v == ConvVariant::halo_pipe;
}
constexpr bool is_masked(ConvVariant v) { return v == ConvVariant::mma || is_wgmma(v); }

}  // namespace frugal::spconv
