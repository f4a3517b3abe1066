// The sparse conv's wgrad choice: the variant by dtype and architecture, the split of N by the shape
// alone (never by the device's occupancy), each rule with its reason.
#include "core/spconv_backward_choose.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <sstream>

#include "core/choose_common.h"
#include "frugal/error.h"

namespace frugal::spconv {

namespace {

using backend::WgradArgs;
using choose::align16;
using choose::aligned16;
using choose::cdiv;
using choose::tensor_core_dtype;
using V = WgradVariant;

constexpr const char* kOp = "spconv::submanifold_conv_backward";

// Blocks of one chunk: every offset × input-channel tile × output-channel tile.
int64_t tiles_of(const WgradArgs& a, const WgradChoice& c) {
  return int64_t{a.k} * cdiv(a.ci, wgrad_tile_ci(c)) * cdiv(a.co, wgrad_tile_co(c));
}

// mma's tile side: 128 where the channels fill more than one 64-wide tile (fewer gathers of each row).
int mma_tile(int channels) { return channels > kWgradTile ? kWgradWideTile : kWgradTile; }

// mma's operands: whole 16-byte copies of every row; its gradient stored in pairs of elements.
bool mma_operands(const WgradArgs& a) {
  return a.ci % 8 == 0 && a.co % 8 == 0 && aligned16(a.feats) && aligned16(a.grad_out) &&
         reinterpret_cast<uintptr_t>(a.grad_weight) % 4 == 0;
}

// Splits by rule: enough chunks for kWgradTargetBlocks blocks, but no chunk under kWgradMinChunkRows rows
// and no more partials than kMaxWgradBytes hold.
int splits_for(const WgradArgs& a, const WgradChoice& c) {
  int64_t s = cdiv(kWgradTargetBlocks, std::max<int64_t>(1, tiles_of(a, c)));
  s = std::min(s, cdiv(a.n, kWgradMinChunkRows));
  const size_t per_split = (static_cast<size_t>(a.k) * a.ci * a.co + a.co) * sizeof(float);
  s = std::min<int64_t>(s, static_cast<int64_t>(std::max<size_t>(1, kMaxWgradBytes / per_split)));
  return static_cast<int>(std::clamp<int64_t>(s, 1, kMaxWgradSplits));
}

// Chunks of equal length (a multiple of kWgradStepRows: only a chunk's last step is partial) covering N.
WgradChoice with_splits(WgradChoice c, const WgradArgs& a, int splits) {
  const int64_t per = cdiv(a.n, std::max(1, splits));
  c.chunk_rows = std::min(a.n, cdiv(per, kWgradStepRows) * kWgradStepRows);
  c.splits = static_cast<int>(cdiv(a.n, std::max<int64_t>(1, c.chunk_rows)));
  return c;
}

}  // namespace

WgradChoice complete(const WgradArgs& a, const DeviceCaps& caps, const WgradChoice& forced) {
  WgradChoice c = forced;
  if (c.variant == V::mma) {
    const bool ci_set = c.tile_ci, co_set = c.tile_co;
    if (!ci_set) c.tile_ci = mma_tile(a.ci);
    if (!co_set) c.tile_co = mma_tile(a.co);
    // A device with less shared memory a block than the wide tiles' stages takes 64 where unset.
    auto fits = [&] {
      return !caps.is_gpu() || wgrad_mma_smem_bytes(c.tile_ci, c.tile_co) <= size_t(caps.smem_per_block);
    };
    if (!fits() && !co_set) c.tile_co = kWgradTile;
    if (!fits() && !ci_set) c.tile_ci = kWgradTile;
  }
  if (c.variant == V::cpu) {  // one chunk: a thread owns whole output elements
    if (!c.splits) c.splits = 1;
    if (!c.chunk_rows) c.chunk_rows = a.n;
    return c;
  }
  if (c.chunk_rows > 0) {
    if (!c.splits) c.splits = static_cast<int>(std::min<int64_t>(cdiv(a.n, c.chunk_rows), INT_MAX));
    return c;
  }
  return with_splits(c, a, c.splits > 0 ? c.splits : splits_for(a, c));
}

WgradChoice choose(const WgradArgs& a, const DeviceCaps& caps) {
  V v = V::cpu;
  if (caps.is_gpu()) {
    if (!tensor_core_dtype(a.dtype) || !runs_on(arch_of(V::wmma), caps))
      v = V::simt;
    else  // mma where its 16-byte copies fit the operands; WMMA for odd channel counts
      v = mma_operands(a) ? V::mma : V::wmma;
  }
  const WgradChoice c = complete(a, caps, WgradChoice{.variant = v});
  std::string why;
  FRUGAL_CHECK(can_implement(a, caps, c, &why), unsupported, kOp,
               "no kernel computes this weight gradient on " << to_string(caps) << ": " << to_string(c) << " " << why);
  return c;
}

bool can_implement(const WgradArgs& a, const DeviceCaps& caps, const WgradChoice& c, std::string* why) {
  auto no = [why](const auto&... parts) { return choose::refuse(why, parts...); };
  if (const std::string arch = arch_refusal(arch_of(c.variant), caps); !arch.empty()) return no(arch);
  if (c.variant == V::cpu) {
    if (c.splits != 1 || c.chunk_rows != a.n) return no("runs N in one chunk, got ", to_string(c));
    return true;
  }
  if (a.dtype == DType::f64) return no("takes f32, f16 or bf16 (f64 runs on the CPU only)");
  if ((c.variant == V::wmma || c.variant == V::mma) && !tensor_core_dtype(a.dtype))
    return no("takes f16 or bf16, got ", to_string(a.dtype));
  if (c.variant == V::mma) {
    if (!mma_operands(a))
      return no(
          "takes channel counts that are multiples of 8, 16-byte aligned rows and a 4-byte aligned "
          "grad_weight, got Ci = ",
          a.ci, ", Co = ", a.co);
    for (int t : {c.tile_ci, c.tile_co})
      if (t != kWgradTile && t != kWgradWideTile)
        return no("takes tiles of ", kWgradTile, " or ", kWgradWideTile, ", got ", to_string(c));
    if (const size_t smem = wgrad_mma_smem_bytes(c.tile_ci, c.tile_co);
        caps.is_gpu() && smem > size_t(caps.smem_per_block))
      return no("needs ", smem, " bytes of shared memory a block, the device allows ", caps.smem_per_block);
  } else if ((c.tile_ci && c.tile_ci != kWgradTile) || (c.tile_co && c.tile_co != kWgradTile)) {
    return no("runs ", kWgradTile, " x ", kWgradTile, " tiles, got ", to_string(c));
  }
  if (c.chunk_rows < 1 || c.splits < 1 || c.splits > kMaxWgradSplits || c.splits != cdiv(a.n, c.chunk_rows))
    return no("takes chunk_rows >= 1 and splits = ceil(N / chunk_rows) <= ", kMaxWgradSplits, ", got N = ", a.n, ", ",
              to_string(c));
  if (tiles_of(a, c) > INT32_MAX) return no("takes at most ", INT32_MAX, " tiles a chunk, got ", tiles_of(a, c));
  return true;
}

// One chunk writes the gradients directly: no partials.
size_t weight_partial_bytes(const WgradArgs& a, const WgradChoice& c) {
  if (c.variant == V::cpu || c.splits <= 1 || !a.grad_weight) return 0;
  return align16(static_cast<size_t>(c.splits) * a.k * a.ci * a.co * sizeof(float));
}
size_t bias_partial_bytes(const WgradArgs& a, const WgradChoice& c) {
  if (c.variant == V::cpu || c.splits <= 1 || !a.grad_bias) return 0;
  return align16(static_cast<size_t>(c.splits) * a.co * sizeof(float));
}
size_t workspace_bytes(const WgradArgs& a, const WgradChoice& c) {
  return weight_partial_bytes(a, c) + bias_partial_bytes(a, c);
}

std::string to_string(WgradVariant v) {
  switch (v) {
    case V::cpu:
      return "cpu";
    case V::simt:
      return "simt";
    case V::wmma:
      return "wmma";
    case V::mma:
      return "mma";
  }
  return "unknown";
}

std::string to_string(const WgradChoice& c) {
  std::ostringstream os;
  os << to_string(c.variant) << "(";
  if (c.variant == V::mma) os << "tile " << c.tile_ci << " x " << c.tile_co << ", ";
  os << "splits " << c.splits << ", chunk_rows " << c.chunk_rows << ")";
  return os.str();
}

bool operator==(const WgradChoice& a, const WgradChoice& b) {
  return a.variant == b.variant && a.splits == b.splits && a.chunk_rows == b.chunk_rows && a.tile_ci == b.tile_ci &&
         a.tile_co == b.tile_co;
}

}  // namespace frugal::spconv
