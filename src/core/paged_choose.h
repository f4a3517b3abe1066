// Paged attention's kernel choice: which kernels serve a plan's row items and its multi-query
// sequences, and how the row items are sliced. A pure function of the plan's shape, the device's
// capabilities and one occupancy fact, so a CPU table test covers every GPU generation
// (tests/test_choose_paged.cpp).
//
// What each variant needs:
//   cpu        the CPU; any cache, f32.
//   rows_f32   any GPU; head_dim up to 512; any bits; any math (it is exact, so f16 math may fall back to it).
//   rows_f16   what the decode kernel f16_registers needs (compute capability 8.0+, head_dim 64..512,
//              K and V of 4 or 8 bits), math f16 or automatic.
//   tiles_f16  compute capability 8.0+, head_dim 64, 128 or 256, any bits, math f16 or automatic;
//              it serves only the multi-query sequences.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/attention_choose.h"
#include "core/device_caps.h"
#include "frugal/paged_attention.h"

namespace frugal::attention {

// What a paged choice depends on: the plan's shapes (validated) and its options.
struct PagedProblem {
  int q_heads = 1, kv_heads = 1, dim = 0;
  int k_bits = 4, v_bits = 4;
  DType q_dtype = DType::f32;
  Math math = Math::automatic;
  int64_t row_items = 0;   // work items of single rows the plan holds (at most its query rows)
  int64_t max_len = 0;     // the most tokens a row item may see (its slices cover it and the row kernels' alignment)
  int64_t max_kv_len = 0;  // the longest sequence the plan serves
  std::optional<PagedVariant> rows, tiles;  // PagedOptions::rows / tiles (forced), or empty
  int num_splits = 0;                       // PagedOptions::num_splits (forced, validated), or 0
};

// The architectures each variant's code runs on (what can_implement checks first).
constexpr Arch arch_of(PagedVariant v) {
  switch (v) {
    case PagedVariant::cpu:
      return Arch::cpu;
    case PagedVariant::rows_f32:
      return Arch::simt;
    case PagedVariant::rows_f16:  // mma.sync m16n8k16 on fp16 operands, cp.async
    case PagedVariant::tiles_f16:
      return Arch::sm80;
  }
  return Arch::sm80;
}

// The role a variant is asked to play: serving row items, or the sequences with n_b > 1.
enum class PagedRole : uint8_t { rows, tiles };

// Whether `variant` can serve `role` for the problem on a device of `caps`. Where not, and `why`
// is given, *why says so in one clause.
bool can_implement(PagedVariant variant, PagedRole role, const PagedProblem& p, const DeviceCaps& caps,
                   std::string* why = nullptr);

// The decode problem whose choice slices the row items (the same rule decode attention uses, with
// one "sequence" a row item): the decode variant that matches `rows`.
DecodeProblem row_items_problem(const PagedProblem& p, PagedVariant rows);

// The kernels and the slices: the forced variants where they can serve (else frugal::Error naming
// the variant and why), the rule's elsewhere; a frugal::Error where nothing can serve.
// resident_blocks: resident blocks per multiprocessor of the decode kernel that matches the rows
// variant (cuda::decode_attention_resident_blocks; ignored on the CPU).
PagedChoice choose_paged(const PagedProblem& p, const DeviceCaps& caps, int resident_blocks);

// The decode variant whose kernel's occupancy and slice rule the row variant takes.
DecodeVariant decode_variant_of(PagedVariant rows);

}  // namespace frugal::attention
