// Paged attention's kernel choice (see paged_choose.h): each variant's conditions, the rule for the
// row items and for the multi-query sequences, and the row items' slices by decode's own rule.
#include "core/paged_choose.h"

#include <algorithm>
#include <sstream>

#include "core/attention_backend.h"
#include "core/choose_common.h"
#include "frugal/error.h"

namespace frugal::attention {

namespace {

constexpr const char* kOp = "attention::PagedPlan";
// Decode's grid bound on sequences; the paged row kernels index items on their own grid, and at
// this many items the slice rule gives one slice whatever the count, so the count is capped here.
constexpr int64_t kDecodeGridSequences = 65535;
// A sequence of up to this many query tokens is faster as row items of rows_f16 (8 / group query
// rows a block, its tokens decoded once for all of them) than as one sequence of the tiled kernel:
// measured 1.6× at 16 tokens, GQA 4 (docs/performance.md, "Paged attention").
constexpr int kRowMaxQueries = 16;

bool wants_f16(const PagedProblem& p) {
  return p.math == Math::f16 || (p.math == Math::automatic && p.q_dtype != DType::f32);
}

bool is_row_variant(PagedVariant v) { return v != PagedVariant::tiles_f16; }

}  // namespace

std::string to_string(PagedVariant v) {
  switch (v) {
    case PagedVariant::cpu:
      return "cpu";
    case PagedVariant::rows_f32:
      return "rows_f32";
    case PagedVariant::rows_f16:
      return "rows_f16";
    case PagedVariant::tiles_f16:
      return "tiles_f16";
  }
  return "unknown";
}

std::string to_string(const PagedChoice& c) {
  std::ostringstream os;
  os << "rows " << to_string(c.rows) << ", tiles " << to_string(c.tiles);
  if (c.tiles == PagedVariant::tiles_f16 && c.tile_min_queries > 2) os << " from " << c.tile_min_queries << " queries";
  os << ", " << c.splits << (c.splits == 1 ? " split" : " splits") << " of " << c.tokens_per_split << " tokens";
  return os.str();
}

DecodeVariant decode_variant_of(PagedVariant rows) {
  switch (rows) {
    case PagedVariant::cpu:
      return DecodeVariant::cpu;
    case PagedVariant::rows_f32:
      return DecodeVariant::f32;
    case PagedVariant::rows_f16:
      return DecodeVariant::f16_registers;
    case PagedVariant::tiles_f16:
      break;
  }
  FRUGAL_FAIL(internal, kOp, "the tiled kernel serves no row items");
}

DecodeProblem row_items_problem(const PagedProblem& p, PagedVariant rows) {
  DecodeProblem d;
  d.batch = static_cast<int>(std::clamp<int64_t>(p.row_items, 1, kDecodeGridSequences));
  d.q_heads = p.q_heads;
  d.kv_heads = p.kv_heads;
  d.dim = p.dim;
  d.k_bits = p.k_bits;
  d.v_bits = p.v_bits;
  d.capacity = std::max<int64_t>(1, p.max_kv_len);
  // The row kernels start a range on a 16-token tile, the tokens before it masked: a range of
  // max_len tokens spans up to kTileTokens − 1 more.
  d.max_len = std::min(d.capacity, p.max_len + backend::kTileTokens - 1);
  d.q_dtype = p.q_dtype;
  d.math = rows == PagedVariant::rows_f16 ? Math::f16 : Math::f32;
  d.variant = decode_variant_of(rows);
  d.num_splits = p.num_splits;
  return d;
}

bool can_implement(PagedVariant variant, PagedRole role, const PagedProblem& p, const DeviceCaps& caps,
                   std::string* why) {
  using choose::refuse;
  if (const std::string arch = arch_refusal(arch_of(variant), caps); !arch.empty())
    return refuse(why, "the ", to_string(variant), " variant ", arch);
  switch (variant) {
    case PagedVariant::rows_f32:
      if (p.dim > backend::kMaxGpuDim)
        return refuse(why, "the GPU kernels serve head_dim up to ", backend::kMaxGpuDim, ", got ", p.dim,
                      " (the CPU serves any)");
      return true;
    case PagedVariant::rows_f16: {
      if (p.math == Math::f32) return refuse(why, "rows_f16 computes with fp16 tensor-core operands and math is f32");
      return attention::can_implement(DecodeVariant::f16_registers, row_items_problem(p, variant), caps, why);
    }
    case PagedVariant::tiles_f16:
      if (role == PagedRole::rows)
        return refuse(why, "tiles_f16 serves only the sequences with several query tokens, not row items");
      if (p.math == Math::f32) return refuse(why, "tiles_f16 computes with fp16 tensor-core operands and math is f32");
      if (p.dim != 64 && p.dim != 128 && p.dim != 256)
        return refuse(why, "tiles_f16 serves head_dim 64, 128 or 256, got ", p.dim);
      return true;
    case PagedVariant::cpu:
      return true;
  }
  return refuse(why, "unknown variant");
}

PagedChoice choose_paged(const PagedProblem& p, const DeviceCaps& caps, int resident_blocks) {
  std::string why;
  PagedChoice c;
  // The row items' kernel: the forced one; else a forced tiles variant that is a row kernel (the
  // multi-query rows then become row items too); else the rule.
  const std::optional<PagedVariant> forced_rows =
      p.rows ? p.rows : (p.tiles && is_row_variant(*p.tiles) ? p.tiles : std::nullopt);
  if (forced_rows) {
    FRUGAL_CHECK(can_implement(*forced_rows, PagedRole::rows, p, caps, &why), unsupported, kOp,
                 "the forced rows variant " << to_string(*forced_rows) << " cannot serve this plan: " << why);
    c.rows = *forced_rows;
  } else if (!caps.is_gpu()) {
    c.rows = PagedVariant::cpu;
  } else if (wants_f16(p) && can_implement(PagedVariant::rows_f16, PagedRole::rows, p, caps)) {
    c.rows = PagedVariant::rows_f16;  // the decode tensor-core kernel's conditions hold
  } else {
    // f32 math, or f16 math the tensor-core row kernel cannot serve: the exact kernel.
    FRUGAL_CHECK(can_implement(PagedVariant::rows_f32, PagedRole::rows, p, caps, &why), unsupported, kOp, why);
    c.rows = PagedVariant::rows_f32;
  }

  // The multi-query sequences' kernel: the tiled one where forced or where f16 math allows it,
  // else their rows become row items of c.rows.
  if (p.tiles) {
    if (*p.tiles == PagedVariant::tiles_f16) {
      FRUGAL_CHECK(can_implement(*p.tiles, PagedRole::tiles, p, caps, &why), unsupported, kOp,
                   "the forced tiles variant tiles_f16 cannot serve this plan: " << why);
    } else {
      FRUGAL_CHECK(*p.tiles == c.rows, unsupported, kOp,
                   "the forced tiles variant " << to_string(*p.tiles) << " makes the multi-query rows row items, "
                                               << "which the rows variant " << to_string(c.rows)
                                               << " serves; force both to the same kernel");
    }
    c.tiles = *p.tiles;
  } else if (caps.is_gpu() && wants_f16(p) && can_implement(PagedVariant::tiles_f16, PagedRole::tiles, p, caps)) {
    c.tiles = PagedVariant::tiles_f16;
    if (c.rows == PagedVariant::rows_f16) c.tile_min_queries = kRowMaxQueries + 1;
  } else {
    c.tiles = c.rows;
  }

  // The row items are sliced as decode slices its sequences (a row item is one "sequence").
  const DecodeChoice d = choose(row_items_problem(p, c.rows), caps, resident_blocks);
  c.splits = d.splits;
  c.tokens_per_split = d.tokens_per_split;
  return c;
}

}  // namespace frugal::attention
