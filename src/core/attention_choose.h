// Decode attention's kernel choice: which variant serves a call and how its sequences are sliced,
// a pure function of the call's shape, the device's capabilities and one occupancy fact of the
// chosen kernel, so a CPU table test covers every GPU generation (tests/test_choose_attention.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "core/device_caps.h"
#include "frugal/attention.h"

namespace frugal::attention {

// What a choice depends on: the call's shapes (validated) and its options.
struct DecodeProblem {
  int batch = 1, q_heads = 1, kv_heads = 1, dim = 0;
  int k_bits = 4, v_bits = 4;
  int64_t capacity = 0;
  int64_t max_len = 0;  // the most tokens any sequence of the call attends
  DType q_dtype = DType::f32;
  Math math = Math::automatic;
  std::optional<DecodeVariant> variant;  // DecodeOptions::variant (forced), or empty
  int num_splits = 0;                    // DecodeOptions::num_splits (forced, validated), or 0
  bool exact_rows = false;               // the caches have exact rows (a window or sinks)
};

// The CPU's slice: long enough to amortize the per-item setup, short enough that the f32 running
// sums stay well inside the 1e-5 budget (sequential f32 error grows ~√n · 2^-24).
constexpr int64_t kCpuSliceTokens = 1024;

// The architectures each variant's code runs on (what can_implement checks first).
constexpr Arch arch_of(DecodeVariant v) {
  switch (v) {
    case DecodeVariant::cpu:
      return Arch::cpu;
    case DecodeVariant::f32:
      return Arch::simt;
    case DecodeVariant::f16_registers:  // mma.sync m16n8k16 on fp16 operands, cp.async
    case DecodeVariant::f16_wide:
      return Arch::sm80;
  }
  return Arch::sm80;
}

// Whether `variant` can serve the call on a device of `caps`: its shapes, bit widths, math and
// architecture. Where not, and `why` is given, *why says so in one clause.
bool can_implement(DecodeVariant variant, const DecodeProblem& p, const DeviceCaps& caps, std::string* why = nullptr);

// The variant that serves the call: the forced one (a frugal::Error where it cannot serve), else
// the rule's; a frugal::Error where none can.
DecodeVariant choose_variant(const DecodeProblem& p, const DeviceCaps& caps);

// The whole choice: choose_variant's variant, and its slices. resident_blocks: resident blocks per
// multiprocessor of that variant's kernel on the device (cuda::decode_attention_resident_blocks;
// ignored on the CPU; below 1 counts as 1).
DecodeChoice choose(const DecodeProblem& p, const DeviceCaps& caps, int resident_blocks);

// Bytes of workspace a call with choice `c` uses (0 where it uses none: unsplit, ≤ 128 sequences,
// or the CPU). decode_attention_workspace_bytes covers every choice of a shape.
size_t workspace_bytes(const DecodeChoice& c, const DecodeProblem& p);

}  // namespace frugal::attention
