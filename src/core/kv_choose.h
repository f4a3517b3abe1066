// Which CUDA kernel quantizes a KV append: each variant's can_implement and tile parameters, and
// the one choice by the rules the kernels were measured under. Plain C++, built without CUDA too,
// so that the table test (tests/test_choose_kv.cpp) runs it for any GPU generation on the CPU.
//
// What each variant needs (none of them a workspace):
//   generic  any GPU; every head dim and width the cache accepts.
//   fast     compute capability >= 8.0 (its staged tiles copy the input with cp.async);
//            D = 64..512 at 4 or 8 bits (its lookup tables cover every reachable u there).
//   mma      compute capability >= 8.0 (mma.sync m16n8k16 on f16/bf16, cp.async); D = 64, 128 or
//            256 at 4 or 8 bits; f16 or bf16 input whose vectors start on 16 bytes; the L2 scale.
// Dequantize and the Hadamard transform have one kernel each (its chunk width follows D), so they
// have no choice to make.
#pragma once

#include <optional>
#include <string>

#include "core/device_caps.h"
#include "core/kv_backend.h"

namespace frugal::kv {

// Appends of at least this many vectors fill an H200 (132 SMs × 5 blocks × 32 vectors at D = 128,
// the 8-bit staged tile): they take the tensor-core kernel and, at 8 bits, the staged tile in
// blocks of 128. Smaller calls (a decode step) take a kernel whose one block builds its lookup
// table fastest.
constexpr int64_t kManyVectors = 16384;

// Elements of a lane's chunk in the lane-group kernels: 8 (16 bytes of f16), 4 at D = 4.
constexpr int lane_chunk(int dim) { return dim == 4 ? 4 : 8; }

// Sets a.aligned and a.dense from x's base, strides and dtype (the facts the choice and the
// kernels read).
void describe_layout(backend::AppendArgs& a);

// The architectures each variant's code runs on (what append_refusal checks first).
constexpr Arch arch_of(AppendVariant v) {
  switch (v) {
    case AppendVariant::generic:
      return Arch::simt;
    case AppendVariant::fast:  // cp.async staged tiles
    case AppendVariant::mma:   // mma.sync m16n8k16 on f16/bf16, cp.async
      return Arch::sm80;
  }
  return Arch::sm80;
}

// Dequantize and the Hadamard transform: one kernel each, on CUDA cores.
constexpr Arch kDequantizeArch = Arch::simt;
constexpr Arch kHadamardArch = Arch::simt;

// Why `variant` cannot serve the call on a device of `caps`, in one sentence; empty when it can.
std::string append_refusal(AppendVariant variant, const backend::AppendArgs& a, const DeviceCaps& caps);
inline bool can_implement(AppendVariant variant, const backend::AppendArgs& a, const DeviceCaps& caps) {
  return append_refusal(variant, a, caps).empty();
}

// The tile parameters `variant` serves this call with (each call shape has one instantiation per
// variant). The variant must be able to serve it.
AppendChoice append_tile(AppendVariant variant, const backend::AppendArgs& a);

// The kernel an append takes on a device of `caps`. Throws frugal::Error for a caps without a GPU.
AppendChoice choose_append(const backend::AppendArgs& a, const DeviceCaps& caps);

// choose_append, or the forced variant when it can serve the call (else frugal::Error naming `op`,
// the variant and why).
AppendChoice resolve_append(const backend::AppendArgs& a, const DeviceCaps& caps, std::optional<AppendVariant> forced,
                            const char* op);

}  // namespace frugal::kv
