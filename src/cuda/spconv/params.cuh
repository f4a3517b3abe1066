// The sparse conv's CUDA launch parameters, and what each kernel file exports: to the dispatcher
// (conv.cu), which runs a ConvChoice, and to the map build (map.cu), which measures the map for the
// halo kernel. The limits the choice and the kernels share are in core/spconv_choose.h.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/sparse_conv_backend.h"
#include "core/spconv_choose.h"

namespace frugal::cuda::spconv_kernels {

using spconv::ConvVariant;
using spconv::halo_max_offsets;
using spconv::halo_passes;
using spconv::kChunkRows;
using spconv::kGroupRows;
using spconv::kHaloPasses;
using spconv::kMaxKernelVolume;
using spconv::kMaxMaskedOffsets;
using spconv::kTileRows;
using spconv::kWindow;

// What every conv kernel takes: pointers and sizes, from spconv::backend::ConvArgs.
struct ConvParams {
  const void* feats;
  const int32_t* nbr;
  const void* weight;
  const void* bias;
  void* out;
  const int32_t* order;  // column i of nbr is output row order[i]; nullptr: row i
  int64_t n;
  int k, ci, co;
  unsigned handoff_blocks;  // Params' (the halo launch's blocks), in the padding here
  unsigned long long* bad;  // nullptr: unchecked
};

// The output row of map column col (spconv::backend::column_row: -1 for a bad run order's entry).
__device__ __forceinline__ int64_t output_row(const ConvParams& p, int64_t col) {
  return spconv::backend::column_row(p.order, col, p.n);
}

// The words of Params::handoff_count, the hand-off list's header (kHandoffHeader bytes before the list):
// the tiles listed; the halo kernel's blocks done listing; the tiles its blocks have claimed. All are
// zeroed before each halo launch.
enum HandoffWord : int { kListed = 0, kListersDone = 1, kTilesClaimed = 2, kHandoffWords = 3 };
using spconv::kHandoffHeader;
static_assert(kHandoffHeader >= kHandoffWords * sizeof(unsigned) && kHandoffHeader % 16 == 0,
              "the header holds the words and keeps the list 16-byte aligned");

// One launch's arguments (both tensor-core kernels): the conv's, plus the row order of the launch.
struct Params : ConvParams {
  const int32_t* perm;      // map column at sorted position row_begin + i; nullptr: the identity
  int64_t row_begin, rows;  // this launch's rows
  float* part = nullptr;    // wgmma, split: [splits, rows, co] f32 partials (blockIdx.y: the split)
  // The pipelined halo kernel's hand-off: the tiles of the launch whose rows do not fit its halo
  // (tile indices, in no particular order), behind the counts of HandoffWord; kernel_conv_wgmma_ws's
  // hand-off instance, launched after it, runs exactly those tiles once all handoff_blocks are done.
  // (Params stays within 128 bytes: beyond, nvcc reloads it throughout every kernel taking it, and the
  // conv kernels run slower.)
  int32_t* handoff = nullptr;
  unsigned* handoff_count = nullptr;
};
static_assert(sizeof(Params) <= 128, "the kernels' parameter block stays within 128 bytes");
// ---- what the kernel files export (T: the dtype; the tile sizes those of the choice) ----
// simt_wmma.cu: the CUDA-core kernel (any dtype) and the WMMA kernel (f16/bf16, tile_co 64 or 128)
// over the map's row order, one launch for all rows.
void launch_simt(const ConvParams& p, DType dtype, cudaStream_t s);
void launch_wmma(const ConvParams& p, DType dtype, int tile_co, cudaStream_t s);
// mma.cu: the row order of rows [row_begin, row_begin + rows) sorted by neighbor mask within windows,
// into perm; the mma.sync kernel over one launch's rows (tile_co 64, 128 or 256).
void launch_sort_rows(const int32_t* nbr, int64_t n, int k, int64_t row_begin, int64_t rows, int32_t* perm,
                      cudaStream_t s);
void launch_mma(const Params& p, DType dtype, int tile_co, cudaStream_t s);
// wgmma.cu: the wgmma kernels over one launch's rows: variant wgmma, wgmma_ws or wgmma_ws2 on
// tile_rows-row tiles (128, or 256 with tile_co <= 128). With p.part set, launches `splits` blocks per
// tile (offsets [k·j/splits, k·(j+1)/splits) each) writing f32 partials without bias; finish_split
// then sums them in split order into p.out. Returns the variant that ran: the one asked for, but where
// the driver cannot encode the weight's tensor map (the copy engine's input), the one that needs none.
ConvVariant launch_wgmma(const Params& p, DType dtype, ConvVariant v, int tile_co, int tile_rows, int splits,
                         cudaStream_t s);
void finish_split(const Params& p, DType dtype, int splits, cudaStream_t s);
// halo_pipe.cu: the pipelined halo kernel over one launch's rows (tile_co 64 or 128, holding all of
// Co; p.handoff set), then the warp-specialized kernel over the tiles it hands on. Returns the variant
// that ran (as launch_wgmma: without tensor maps, the kernel it hands its tiles to, over all of them).
ConvVariant launch_halo_pipe(const Params& p, DType dtype, int tile_co, cudaStream_t s);
// The halo kernel's probe of a whole map nbr [k, n] (k <= kMaxMaskedOffsets) in the map's row order: of
// halo_samples(n) tiles spread over it, how many fit each configuration's halo buffer, into fits[2][2]
// (indexed as MapStats::halo_fits; zeroed by the caller).
void launch_halo_probes(const int32_t* nbr, int64_t n, int k, unsigned* fits, cudaStream_t s);

}  // namespace frugal::cuda::spconv_kernels
