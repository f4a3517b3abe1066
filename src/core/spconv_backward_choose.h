// Which kernel computes a sparse conv's weight (and bias) gradient, and how its reduction over N is
// split: the variants' limits (can_implement), their workspace, and the rules (choose). Plain C++:
// CPU-only builds compile it and its table test. (grad_feats is a forward conv: src/core/spconv_choose.h.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/device_caps.h"
#include "core/sparse_conv_backend.h"

namespace frugal::spconv {

// ---- limits the rules and the kernels share ------------------------------------------------------
constexpr int kWgradTile = 64;      // input × output channels a block of simt and wmma: 64 × 64 f32 partials
constexpr int kWgradWideTile = 128; // mma's tile side where the channels fill it (64 otherwise)
constexpr int kWgradStepRows = 32;  // rows a pipeline step of the tensor-core kernels (two k-steps of 16)
constexpr int kWgradMmaStages = 4, kWgradMmaWindowRows = 2048;
// mma's shared memory a block: the stages of both operands (rows padded by 8 elements), the window's
// (row, neighbor) pairs and the warps' counts.
constexpr size_t wgrad_mma_smem_bytes(int tile_ci, int tile_co) {
  return size_t(kWgradMmaStages) * kWgradStepRows * (tile_ci + 8 + tile_co + 8) * 2 + size_t(kWgradMmaWindowRows) * 8 +
         32 * sizeof(int);
}
// The block's tile of [Ci, Co] a choice runs: mma's own (complete fills it), 64 × 64 for the others.
constexpr int wgrad_tile_ci(const WgradChoice& c) { return c.tile_ci > 0 ? c.tile_ci : kWgradTile; }
constexpr int wgrad_tile_co(const WgradChoice& c) { return c.tile_co > 0 ? c.tile_co : kWgradTile; }
// Rows a chunk at least: a block then gathers up to 2·512·64 elements (a third of that on a sphere shell,
// whose rows have about 9 of 27 neighbors) for each 64 × 64 f32 partial it writes and the reduction reads.
constexpr int64_t kWgradMinChunkRows = 512;
// Blocks the rules aim for, whatever the GPU: 1024 fill the largest GPUs (170 multiprocessors) six times
// over. A number fixed by the shape, so that every device sums the same chunks.
constexpr int64_t kWgradTargetBlocks = 1024;
constexpr size_t kMaxWgradBytes = size_t{64} << 20;  // the f32 partials of one call at most (by rule)
constexpr int kMaxWgradSplits = 65535;               // the grid's second dimension

// The architectures each variant's code runs on (what can_implement checks first).
constexpr Arch arch_of(WgradVariant v) {
  switch (v) {
    case WgradVariant::cpu:
      return Arch::cpu;
    case WgradVariant::simt:
      return Arch::simt;
    case WgradVariant::wmma:  // WMMA on bf16
    case WgradVariant::mma:   // ldmatrix, mma.sync, cp.async
      return Arch::sm80;
  }
  return Arch::sm80;
}

// ---- the choice ----------------------------------------------------------------------------------
// The rules' choice for these arguments (a.n > 0) on this device. Throws frugal::Error(unsupported)
// where no variant runs on the device.
WgradChoice choose(const backend::WgradArgs& a, const DeviceCaps& caps);
// A forced choice with its unset fields (0) filled by the rules for its variant.
WgradChoice complete(const backend::WgradArgs& a, const DeviceCaps& caps, const WgradChoice& forced);
// Whether the (complete) choice runs these arguments on this device; why not, in one clause, if not.
bool can_implement(const backend::WgradArgs& a, const DeviceCaps& caps, const WgradChoice& c,
                   std::string* why = nullptr);
// The CUDA workspace of the choice: the f32 partials of grad_weight (splits·K·Ci·Co, where asked for),
// then those of grad_bias (splits·Co, where asked for), each part rounded up to 16 bytes. None on the CPU
// or for one chunk (splits = 1 writes the gradients directly).
size_t weight_partial_bytes(const backend::WgradArgs& a, const WgradChoice& c);
size_t bias_partial_bytes(const backend::WgradArgs& a, const WgradChoice& c);
size_t workspace_bytes(const backend::WgradArgs& a, const WgradChoice& c);

}  // namespace frugal::spconv
