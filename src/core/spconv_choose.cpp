// The sparse conv's kernel choice: each rule with its reason; the evidence behind the thresholds is in
// docs/performance.md (section "Sparse conv").
#include "core/choose_common.h"
#include "core/spconv_choose.h"

#include <algorithm>
#include <climits>
#include <sstream>

#include "frugal/error.h"

namespace frugal::spconv {

namespace {

using choose::aligned16;
using choose::align16;
using choose::cdiv;
using choose::tensor_core_dtype;
using backend::ConvArgs;
using V = ConvVariant;

constexpr const char* kOp = "spconv::submanifold_conv";


// One column tile where Co allows it: the gathered rows then serve every output channel (256 only from
// Co > 128: a narrower Co would multiply zero columns).
int tile_co_for(int co) { return co <= 64 ? 64 : co <= 128 ? 128 : 256; }

// Whether an mma block of this column tile fits the device's shared memory (256 does on 9.0 and 10.x).
bool mma_fits(int tile_co, const DeviceCaps& caps) {
  return mma_smem_bytes(tile_co) <= static_cast<size_t>(caps.smem_per_block);
}

// mma: narrower column tiles where the grid would cover fewer than half the multiprocessors, or where
// the device's shared memory does not hold the block.
int mma_tile_co(const ConvArgs& a, const DeviceCaps& caps) {
  int bn = tile_co_for(a.co);
  const int64_t row_tiles = cdiv(a.n, kTileRows), want = caps.multiprocessors / 2;
  while (bn > 64 && (row_tiles * cdiv(a.co, bn) < want || !mma_fits(bn, caps))) bn /= 2;
  return bn;
}

// At least `per_sm` tall (256-row) blocks a multiprocessor: where the kernels that run one block a
// multiprocessor lose little to a short grid's tail.
bool large_grid(const ConvArgs& a, const DeviceCaps& caps, int tile_co, int64_t per_sm) {
  const int64_t tall_blocks = cdiv(a.n, 2 * kTileRows) * cdiv(a.co, tile_co);
  return tall_blocks >= per_sm * caps.multiprocessors;
}
// Ci, Co ≤ 64 on a grid of at least 8 tall blocks a multiprocessor: the two-block warp-specialized
// kernel on the map's row order is the fastest there.
bool narrow_on_a_large_grid(const ConvArgs& a, const DeviceCaps& caps, int tile_co) {
  return a.co <= 64 && a.ci <= 64 && large_grid(a, caps, tile_co, 8);
}
// 64 < Co ≤ 128 (one 128-wide column tile), Ci ≤ 128, on a grid of at least 3 tall blocks a
// multiprocessor: the one-block warp-specialized kernel on 256-row tiles (each weight slice serves twice
// the rows) is the fastest there; at 2 blocks a multiprocessor it only ties.
bool medium_on_a_large_grid(const ConvArgs& a, const DeviceCaps& caps, int tile_co) {
  return a.co > 64 && a.co <= 128 && a.ci <= 128 && tile_co == 128 && large_grid(a, caps, tile_co, 3);
}
// The shapes the pipelined halo kernel serves: a 64- or 128-wide column tile holding all of Co, and
// Ci ≤ 128 (one or two passes of 64 channels).
bool halo_serves(const ConvArgs& a, int tile_co) {
  return (tile_co == 64 || tile_co == 128) && a.co <= tile_co && a.ci <= kHaloChannels * kHaloPasses &&
         a.k <= halo_max_offsets(tile_co, a.ci);
}
// Whether the map's rows suit the halo kernel: at least 3/4 of its sample tiles fit the halo buffer
// (known only from the map's statistics).
bool halo_suits(const ConvArgs& a, const MapStats* stats, int tile_co) {
  if (!stats || stats->halo_samples <= 0 || stats->rows != a.n || stats->offsets != a.k) return false;
  const int fits = stats->halo_fits[tile_co == 128 ? 1 : 0][halo_passes(a.ci) - 1];
  return fits >= halo_min_fits(stats->halo_samples);
}

// Rows a block by rule (tile_co ≤ 128; 256-wide tiles are always 128 rows: 256 × 256 f32 accumulators
// do not fit the registers). wgmma: tall tiles at Ci, Co ≤ 64 on a large grid, where they beat the
// 128-row ones on the map's row order (and lose on sorted rows and at 128 channels). wgmma_ws: tall
// tiles on the medium shapes (medium_on_a_large_grid).
int tile_rows_for(const ConvArgs& a, const DeviceCaps& caps, V v, int tile_co) {
  if (v == V::cpu) return kCpuTileRows;
  if (v == V::simt) return kSimtTile;
  if (tile_co > 128) return kTileRows;
  if (v == V::wgmma && narrow_on_a_large_grid(a, caps, tile_co)) return 2 * kTileRows;
  if (v == V::wgmma_ws && medium_on_a_large_grid(a, caps, tile_co)) return 2 * kTileRows;
  return kTileRows;
}

// Whether the rows are sorted by neighbor mask, by rule: always for mma; for wgmma never on 256-row tiles,
// the two-block warp-specialized kernel or the halo kernel (each measured faster on the map's order at
// every size), else where N·Ci·Co ≥ kSortWork.
bool sorts_for(const ConvArgs& a, V v, int tile_rows) {
  if (v == V::mma) return true;
  if (!is_wgmma(v)) return false;
  if (tile_rows == 2 * kTileRows || v == V::wgmma_ws2 || v == V::halo_pipe) return false;
  return static_cast<double>(a.n) * a.ci * a.co >= kSortWork;
}

// Rows a launch: sorted rows a chunk at a time (kChunkRows), unsorted ones in one launch; fewer where Co
// needs many column tiles, so that one launch's grid fits 2^31 − 1 blocks.
int64_t chunk_rows_for(const ConvArgs& a, int64_t forced, bool sorted, int tile_co) {
  int64_t rows = forced > 0 ? forced : (sorted ? kChunkRows : a.n);
  const int64_t col_tiles = std::max<int64_t>(1, cdiv(a.co, std::max(1, tile_co)));
  rows = std::min<int64_t>(rows, INT32_MAX / col_tiles * kTileRows);
  return std::min<int64_t>(rows, a.n);
}

// The split over offsets (wgmma*): where one launch's grid covers fewer blocks than the device has
// multiprocessors, enough offset ranges to cover them (at most kMaxSplits, and at most what
// kMaxSplitBytes of f32 partials hold).
int splits_for(const ConvArgs& a, const DeviceCaps& caps, const ConvChoice& c) {
  const int k_max = std::max(1, std::min(a.k, kMaxSplits));
  const int64_t rows = c.chunk_rows;
  const int64_t blocks = cdiv(rows, std::max(1, c.tile_rows)) * cdiv(a.co, std::max(1, c.tile_co));
  const int64_t sms = caps.multiprocessors;
  if (blocks <= 0 || blocks >= sms) return 1;
  int s = static_cast<int>(std::min<int64_t>(k_max, cdiv(sms, blocks)));
  const size_t per_split = static_cast<size_t>(rows) * a.co * sizeof(float);
  while (s > 1 && s * per_split > kMaxSplitBytes) --s;
  return s;
}

// Where the rules take the pipelined halo kernel: on the shapes it serves, rows in the map's order,
// unsplit, at least two tiles a multiprocessor, and a map whose rows suit it. Against the kernels the
// rules take otherwise it is 3–18% faster there; on a map whose tiles do not fit (rows in random order)
// it is slower, hence the map's statistics.
bool halo_by_rule(const ConvArgs& a, const DeviceCaps& caps, const ConvChoice& c, const MapStats* stats) {
  return halo_serves(a, c.tile_co) && !*c.sort_rows && c.splits == 1 &&
         cdiv(c.chunk_rows, kTileRows) >= 2 * static_cast<int64_t>(caps.multiprocessors) &&
         halo_suits(a, stats, c.tile_co);
}

bool valid_chunk(const ConvArgs& a, const ConvChoice& c) {
  return c.chunk_rows >= 1 && c.chunk_rows <= a.n && (c.chunk_rows % kTileRows == 0 || c.chunk_rows == a.n) &&
         cdiv(c.chunk_rows, kTileRows) * cdiv(a.co, c.tile_co) <= INT32_MAX;
}

}  // namespace

bool takes_masked_rows(const ConvArgs& a) {
  return tensor_core_dtype(a.dtype) && a.k <= kMaxMaskedOffsets && a.ci % 8 == 0 && a.co % 8 == 0 &&
         aligned16(a.feats) && aligned16(a.weight) && aligned16(a.out);
}

ConvChoice complete(const ConvArgs& a, const DeviceCaps& caps, const ConvChoice& forced) {
  ConvChoice c = forced;
  const V v = c.variant;
  if (!c.tile_co) {
    if (v == V::cpu)
      c.tile_co = a.co;
    else if (v == V::simt)
      c.tile_co = kSimtTile;
    else if (v == V::wmma)
      c.tile_co = a.co > 64 ? 128 : 64;
    else if (v == V::mma)
      c.tile_co = mma_tile_co(a, caps);
    else
      c.tile_co = tile_co_for(a.co);  // wgmma*: a small grid is filled by the split over offsets instead
  }
  if (!c.tile_rows) c.tile_rows = tile_rows_for(a, caps, v, c.tile_co);
  if (!c.sort_rows) c.sort_rows = sorts_for(a, v, c.tile_rows);
  if (is_masked(v))
    c.chunk_rows = chunk_rows_for(a, c.chunk_rows, *c.sort_rows, c.tile_co);
  else if (!c.chunk_rows)
    c.chunk_rows = a.n;
  if (c.splits > 0) {
    if (is_wgmma(v)) c.splits = std::min(c.splits, std::max(1, a.k));
  } else {
    c.splits = is_wgmma(v) && v != V::halo_pipe ? splits_for(a, caps, c) : 1;
  }
  return c;
}

ConvChoice choose(const ConvArgs& a, const DeviceCaps& caps, const MapStats* stats) {
  V v = V::wgmma;
  const int tile_co = tile_co_for(a.co);
  if (!caps.is_gpu())
    v = V::cpu;
  else if (a.dtype == DType::f32 || !runs_on(arch_of(V::wmma), caps))
    v = V::simt;  // CUDA cores: the tensor-core kernels take f16/bf16 on sm_80 and newer
  else if (!takes_masked_rows(a))
    v = V::wmma;
  else if (!runs_on(arch_of(V::wgmma), caps))
    v = V::mma;  // every GPU but Hopper with sm_90a code
  else if (tile_co == 256)
    v = V::wgmma_ws;  // 256-wide tiles run one block a multiprocessor either way: the producer's gathers win
  else if (narrow_on_a_large_grid(a, caps, tile_co))
    v = V::wgmma_ws2;
  else if (medium_on_a_large_grid(a, caps, tile_co))
    v = V::wgmma_ws;  // on 256-row tiles (tile_rows_for); on 128-row ones it loses to the two-block kernels
  ConvChoice c = complete(a, caps, ConvChoice{.variant = v});
  if (is_wgmma(v) && halo_by_rule(a, caps, c, stats))
    c = complete(a, caps, ConvChoice{.variant = V::halo_pipe, .tile_co = c.tile_co});
  std::string why;
  FRUGAL_CHECK(can_implement(a, caps, c, &why), unsupported, kOp,
               "no kernel runs this conv on " << to_string(caps) << ": " << to_string(c) << " " << why);
  return c;
}

bool can_implement(const ConvArgs& a, const DeviceCaps& caps, const ConvChoice& c, std::string* why) {
  auto no = [why](const auto&... parts) { return choose::refuse(why, parts...); };
  const V v = c.variant;
  if (const std::string arch = arch_refusal(arch_of(v), caps); !arch.empty()) return no(arch);
  if (v == V::cpu && (c.tile_co != a.co || c.tile_rows != kCpuTileRows))
    return no("has tiles of ", kCpuTileRows, " rows × Co = ", a.co, " channels, got ", c.tile_rows, " × ", c.tile_co);
  if (v != V::mma && !is_wgmma(v)) {
    if (c.sort_rows.value_or(false) || c.splits != 1 || c.chunk_rows != a.n)
      return no("runs the map's row order in one launch, unsplit");
  }
  if (v == V::simt && (c.tile_co != kSimtTile || c.tile_rows != kSimtTile))
    return no("has ", kSimtTile, " × ", kSimtTile, " tiles, got tile_co ", c.tile_co, ", tile_rows ", c.tile_rows);
  if ((v == V::simt || v == V::wmma) && a.k > kMaxKernelVolume)
    return no("takes K <= ", kMaxKernelVolume, " offsets, got K = ", a.k);
  if (v == V::cpu || v == V::simt) return true;

  // The tensor-core kernels.
  if (!tensor_core_dtype(a.dtype)) return no("takes f16 or bf16, got ", to_string(a.dtype));
  if (v == V::wmma) {
    if (c.tile_co != 64 && c.tile_co != 128) return no("takes tile_co 64 or 128, got ", c.tile_co);
    if (c.tile_rows != kTileRows) return no("has ", kTileRows, "-row tiles, got tile_rows ", c.tile_rows);
    return true;
  }
  if (!takes_masked_rows(a))
    return no("needs K <= ", kMaxMaskedOffsets,
              ", Ci and Co multiples of 8 and 16-byte aligned feats, weight and out, got K = ", a.k, ", Ci = ", a.ci,
              ", Co = ", a.co);
  if (c.tile_co != 64 && c.tile_co != 128 && c.tile_co != 256)
    return no("takes tile_co 64, 128 or 256, got ", c.tile_co);
  if (!c.sort_rows) return no("needs sort_rows set");
  if (!valid_chunk(a, c))
    return no("takes chunk_rows a multiple of ", kTileRows, " up to N = ", a.n, " (or N), got ", c.chunk_rows);
  if (v == V::mma) {
    if (!mma_fits(c.tile_co, caps))
      return no("needs ", mma_smem_bytes(c.tile_co), " bytes of shared memory a block at tile_co ", c.tile_co, ", got ",
                caps.smem_per_block, " on ", to_string(caps));
    if (c.tile_rows != kTileRows) return no("has ", kTileRows, "-row tiles, got tile_rows ", c.tile_rows);
    if (c.splits != 1) return no("runs unsplit, got splits ", c.splits);
    return true;
  }
  if (c.splits < 1 || c.splits > std::max(1, a.k)) return no("takes splits in [1, K = ", a.k, "], got ", c.splits);
  if (v == V::wgmma || v == V::wgmma_ws) {
    if (c.tile_rows != kTileRows && !(c.tile_rows == 2 * kTileRows && c.tile_co <= 128))
      return no("takes tile_rows 128, or 256 with tile_co <= 128, got tile_rows ", c.tile_rows, ", tile_co ",
                c.tile_co);
    return true;
  }
  if (v == V::wgmma_ws2) {
    if (c.tile_co != 64 || c.tile_rows != kTileRows)
      return no("has 64-wide tiles of ", kTileRows, " rows, got tile_co ", c.tile_co, ", tile_rows ", c.tile_rows);
    return true;
  }
  // halo_pipe
  if (!halo_serves(a, c.tile_co))
    return no("takes a 64- or 128-wide column tile holding all of Co, Ci <= ", kHaloChannels * kHaloPasses,
              " and K <= ", halo_max_offsets(c.tile_co, a.ci), ", got tile_co ", c.tile_co, ", Ci = ", a.ci,
              ", Co = ", a.co, ", K = ", a.k);
  if (c.tile_rows != kTileRows || c.splits != 1)
    return no("has ", kTileRows, "-row tiles, unsplit, got tile_rows ", c.tile_rows, ", splits ", c.splits);
  return true;
}

size_t order_bytes(const ConvArgs&, const ConvChoice& c) {
  return is_masked(c.variant) && c.sort_rows.value_or(false)
             ? align16(static_cast<size_t>(c.chunk_rows) * sizeof(int32_t))
             : 0;
}
size_t partial_bytes(const ConvArgs& a, const ConvChoice& c) {
  return is_wgmma(c.variant) && c.splits > 1 ? static_cast<size_t>(c.splits) * c.chunk_rows * a.co * sizeof(float) : 0;
}
size_t handoff_bytes(const ConvArgs&, const ConvChoice& c) {
  if (c.variant != V::halo_pipe) return 0;
  return kHandoffHeader + align16(static_cast<size_t>(cdiv(c.chunk_rows, kTileRows)) * sizeof(int32_t));
}
size_t workspace_bytes(const ConvArgs& a, const ConvChoice& c) {
  return order_bytes(a, c) + partial_bytes(a, c) + handoff_bytes(a, c);
}

RowOrder choose_row_order(bool lex_sorted) { return lex_sorted ? RowOrder::given : RowOrder::morton; }

std::string to_string(RowOrder o) { return o == RowOrder::morton ? "morton" : "given"; }

std::string to_string(ConvVariant v) {
  switch (v) {
    case V::cpu:
      return "cpu";
    case V::simt:
      return "simt";
    case V::wmma:
      return "wmma";
    case V::mma:
      return "mma";
    case V::wgmma:
      return "wgmma";
    case V::wgmma_ws:
      return "wgmma_ws";
    case V::wgmma_ws2:
      return "wgmma_ws2";
    case V::halo_pipe:
      return "halo_pipe";
  }
  return "unknown";
}

std::string to_string(const ConvChoice& c) {
  std::ostringstream os;
  os << to_string(c.variant) << "(tile_co " << c.tile_co << ", tile_rows " << c.tile_rows << ", "
     << (!c.sort_rows   ? "order by rule"
         : *c.sort_rows ? "sorted"
                        : "map order")
     << ", splits " << c.splits << ", chunk_rows " << c.chunk_rows << ")";
  return os.str();
}

bool operator==(const ConvChoice& a, const ConvChoice& b) {
  return a.variant == b.variant && a.tile_co == b.tile_co && a.tile_rows == b.tile_rows && a.sort_rows == b.sort_rows &&
         a.splits == b.splits && a.chunk_rows == b.chunk_rows;
}

}  // namespace frugal::spconv
