// Decode attention's kernel choice (see attention_choose.h): each variant's conditions, the
// variant rule, the slice rule and the slice length, each with its reason.
#include "core/attention_choose.h"

#include <algorithm>
#include <sstream>

#include "core/attention_backend.h"
#include "frugal/error.h"

namespace frugal::attention {

namespace {

constexpr const char* kOp = "attention::decode_attention";
// The CUDA grid's y and z extents (K/V heads × head tiles, sequences) are at most 65535.
constexpr int64_t kMaxGridYZ = 65535;

bool refuse(std::string* why, const std::string& reason) {
  if (why) *why = reason;
  return false;
}

template <typename... A>
std::string cat(const A&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

// What every GPU kernel needs of the call: a grid the device can launch.
bool grid_fits(const DecodeProblem& p, std::string* why) {
  if (p.batch > kMaxGridYZ)
    return refuse(why, cat("the GPU kernels serve up to ", kMaxGridYZ, " sequences a call, got ", p.batch));
  const int64_t rows = static_cast<int64_t>(p.kv_heads) * backend::head_tiles(p.q_heads / p.kv_heads);
  if (rows > kMaxGridYZ)
    return refuse(why, cat("the GPU kernels serve up to ", kMaxGridYZ,
                           " (K/V head, tile of 8 query heads) pairs a sequence, got ", rows));
  return true;
}

// The slice count of an unforced GPU call: fill the resident slots of the GPU in whole waves (the
// largest count up to the bounds whose share of busy slots beats the smaller counts' by over 1%),
// at most four waves, with slices of ≥ 128 tokens and at most max(32, L / 2048) of them,
// because the merge's cost grows with the slice count: long sequences measured fastest at 32
// (L = 32K) and 64 (L = 128K) slices, short ones at slices of 128 tokens (32 at L = 4K).
constexpr int64_t kMinAutoSliceTokens = 128;
constexpr int64_t kSlicesAlwaysAllowed = 32, kTokensPerAllowedSlice = 2048;
constexpr int64_t kMaxWaves = 4;
constexpr double kBetterFill = 0.01;
int64_t split_rule(int64_t pairs, int64_t slots, int64_t max_len, int64_t cap_splits) {
  const int64_t by_len = std::max<int64_t>(1, (max_len + kMinAutoSliceTokens - 1) / kMinAutoSliceTokens);
  const int64_t by_combine = std::max(kSlicesAlwaysAllowed, max_len / kTokensPerAllowedSlice);
  const int64_t hi = std::min({cap_splits, by_len, by_combine, std::max<int64_t>(1, kMaxWaves * slots / pairs)});
  int64_t best = 1;
  double best_eff = 0;
  for (int64_t s = 1; s <= hi; ++s) {
    const int64_t blocks = pairs * s;
    const int64_t waves = (blocks + slots - 1) / slots;
    const double eff = static_cast<double>(blocks) / static_cast<double>(waves * slots);
    if (eff > best_eff + kBetterFill) {
      best = s;
      best_eff = eff;
    }
  }
  return best;
}

}  // namespace

std::string to_string(DecodeVariant v) {
  switch (v) {
    case DecodeVariant::cpu:
      return "cpu";
    case DecodeVariant::f32:
      return "f32";
    case DecodeVariant::f16_registers:
      return "f16_registers";
    case DecodeVariant::f16_wide:
      return "f16_wide";
  }
  return "unknown";
}

std::string to_string(const DecodeChoice& c) {
  std::ostringstream os;
  os << to_string(c.variant);
  if (c.variant == DecodeVariant::f32)
    os << " (" << c.dims_per_lane << (c.dims_per_lane == 1 ? " dim" : " dims") << " a lane)";
  os << ", " << c.splits << (c.splits == 1 ? " split" : " splits") << " of " << c.tokens_per_split << " tokens";
  if (c.exact_rows) os << ", + exact rows";
  return os.str();
}

bool can_implement(DecodeVariant variant, const DecodeProblem& p, const DeviceCaps& caps, std::string* why) {
  if (const std::string arch = arch_refusal(arch_of(variant), caps); !arch.empty())
    return refuse(why, cat("the ", to_string(variant), " variant ", arch));
  switch (variant) {
    case DecodeVariant::cpu:
      return true;
    case DecodeVariant::f32:
      if (!grid_fits(p, why)) return false;
      if (p.math == Math::f16) return refuse(why, "the f32 variant computes in f32 and math is f16");
      if (p.dim > backend::kMaxGpuDim)
        return refuse(why, cat("the GPU kernels serve head_dim up to ", backend::kMaxGpuDim, ", got ", p.dim,
                               " (the CPU serves any)"));
      return true;
    case DecodeVariant::f16_registers:
    case DecodeVariant::f16_wide: {
      const bool wide = variant == DecodeVariant::f16_wide;
      if (!grid_fits(p, why)) return false;
      if (p.math == Math::f32)
        return refuse(why, "the f16 variants compute with fp16 tensor-core operands and math is f32");
      const bool bits_ok = (p.k_bits == 4 || p.k_bits == 8) && (p.v_bits == 4 || p.v_bits == 8);
      if (p.dim < 64 || p.dim > backend::kMaxGpuDim || !bits_ok)
        return refuse(why, cat("the f16 tensor-core path needs head_dim 64..", backend::kMaxGpuDim,
                               " and K/V of 4 or 8 bits, got head_dim ", p.dim, ", K ", p.k_bits, " bits, V ", p.v_bits,
                               " bits"));
      // The wide-table kernel is built for the head dims it was measured at.
      if (wide && p.dim != 64 && p.dim != 128)
        return refuse(why, cat("the wide-table kernel serves head_dim 64 or 128, got ", p.dim));
      return true;
    }
  }
  return refuse(why, "unknown variant");
}

DecodeVariant choose_variant(const DecodeProblem& p, const DeviceCaps& caps) {
  std::string why;
  if (p.variant) {
    FRUGAL_CHECK(can_implement(*p.variant, p, caps, &why), unsupported, kOp,
                 "the forced variant " << to_string(*p.variant) << " cannot serve this call: " << why);
    return *p.variant;
  }
  if (!caps.is_gpu()) return DecodeVariant::cpu;  // the CPU always computes in f32 (documented)
  // f16 math where asked, and by default for f16 / bf16 queries where a tensor-core kernel serves.
  if (p.math == Math::f16 || (p.math == Math::automatic && p.q_dtype != DType::f32)) {
    // The wide table wherever it serves (head_dim 64 or 128, every bit width): it measured faster
    // than the register loop on every H200 row there (docs/performance.md, "Decode attention").
    if (can_implement(DecodeVariant::f16_wide, p, caps)) return DecodeVariant::f16_wide;
    if (can_implement(DecodeVariant::f16_registers, p, caps, &why)) return DecodeVariant::f16_registers;
    FRUGAL_CHECK(p.math != Math::f16, unsupported, kOp, why << "; use Math::f32");
  }
  FRUGAL_CHECK(can_implement(DecodeVariant::f32, p, caps, &why), unsupported, kOp, why);
  return DecodeVariant::f32;
}

DecodeChoice choose(const DecodeProblem& p, const DeviceCaps& caps, int resident_blocks) {
  DecodeChoice c;
  c.variant = choose_variant(p, caps);
  c.exact_rows = p.exact_rows;
  if (c.variant == DecodeVariant::cpu) {
    c.tokens_per_split = kCpuSliceTokens;
    c.splits = static_cast<int>(std::max<int64_t>(1, (p.max_len + kCpuSliceTokens - 1) / kCpuSliceTokens));
    return c;
  }
  if (c.variant == DecodeVariant::f32) c.dims_per_lane = backend::f32_dims_per_lane(p.dim);

  const int group = p.q_heads / p.kv_heads;
  const int64_t pairs = static_cast<int64_t>(p.batch) * p.kv_heads * backend::head_tiles(group);
  const int64_t slots = static_cast<int64_t>(std::max(1, resident_blocks)) * std::max(1, caps.multiprocessors);
  const int64_t cap_splits = backend::max_splits(p.batch, p.kv_heads, group, p.capacity);
  int64_t splits = p.num_splits > 0 ? p.num_splits : split_rule(pairs, slots, p.max_len, cap_splits);
  splits = std::min(splits, cap_splits);
  // Slice length: whole 16-token tiles (trailing slices may come out empty); automatic slices of
  // the wide kernel are whole rounds of its 8 warps' chunks (256 tokens at D = 128, 512 at D = 64),
  // so that no warp of a block idles through a last, partial round.
  const bool whole_rounds = p.num_splits == 0 && c.variant == DecodeVariant::f16_wide;
  const int64_t unit = whole_rounds ? backend::wide_round_tokens(p.dim) : backend::kTileTokens;
  int64_t per_split = std::max<int64_t>(backend::kTileTokens, (p.max_len + splits - 1) / splits);
  per_split = (per_split + unit - 1) / unit * unit;
  c.splits = static_cast<int>(std::max<int64_t>(1, (p.max_len + per_split - 1) / per_split));
  c.tokens_per_split = per_split;
  return c;
}

size_t workspace_bytes(const DecodeChoice& c, const DecodeProblem& p) {
  if (c.variant == DecodeVariant::cpu || !backend::uses_workspace(p.batch, c.splits, p.exact_rows)) return 0;
  return backend::workspace_bytes(p.batch, p.q_heads, p.dim, c.splits, p.exact_rows);
}

}  // namespace frugal::attention
