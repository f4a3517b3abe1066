// The sparse-conv kernels' interface: argument structs, the packed coordinate key and the hash
// shared by the CPU and CUDA map builders, and the backend functions. The public entry points
// (src/core/sparse_conv.cpp) validate; these never do, they only report what they found.
#pragma once

#include <cstdint>
#include <optional>

#include "frugal/sparse_conv.h"

#if defined(__CUDACC__)
#define FRUGAL_HD __host__ __device__ __forceinline__
#else
#define FRUGAL_HD inline
#endif

namespace frugal::spconv::backend {

// ---- packed keys ------------------------------------------------------------------------------
// 64-bit key: bits [0,17) z, [17,34) y, [34,51) x (each biased by 2^16 to be non-negative),
// [51,63) batch; bit 63 is never set, so no valid key equals ~0.
constexpr int kAxisBits = 17;
constexpr int64_t kAxisBias = 65536;  // -kCoordMin
constexpr uint64_t kAxisMask = (1ull << kAxisBits) - 1;

FRUGAL_HD bool coord_in_range(int64_t v) { return v >= kCoordMin && v <= kCoordMax; }
FRUGAL_HD bool batch_in_range(int64_t b) { return b >= 0 && b <= kMaxBatch; }

// Callers pass in-range values; out-of-range ones are masked (the build reports them anyway).
FRUGAL_HD uint64_t pack_key(int64_t b, int64_t x, int64_t y, int64_t z) {
  return (static_cast<uint64_t>(b) & 0xfffull) << (3 * kAxisBits) |
         (static_cast<uint64_t>(x + kAxisBias) & kAxisMask) << (2 * kAxisBits) |
         (static_cast<uint64_t>(y + kAxisBias) & kAxisMask) << kAxisBits |
         (static_cast<uint64_t>(z + kAxisBias) & kAxisMask);
}
FRUGAL_HD int64_t key_x(uint64_t k) { return static_cast<int64_t>((k >> (2 * kAxisBits)) & kAxisMask) - kAxisBias; }
FRUGAL_HD int64_t key_y(uint64_t k) { return static_cast<int64_t>((k >> kAxisBits) & kAxisMask) - kAxisBias; }
FRUGAL_HD int64_t key_z(uint64_t k) { return static_cast<int64_t>(k & kAxisMask) - kAxisBias; }
FRUGAL_HD int64_t key_b(uint64_t k) { return static_cast<int64_t>(k >> (3 * kAxisBits)); }

// The 64-bit finalizer of MurmurHash3 (fmix64): every key bit affects every slot bit, so
// spatially adjacent keys spread over the table.
FRUGAL_HD uint64_t hash_key(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ull;
  k ^= k >> 33;
  return k;
}

// The table holds row indices (int32) in 2^p slots with 2^p ≥ 3N (load ≤ 1/3: each occupied slot a
// probe passes costs a dependent read of its row's key, and at loads near 1/2 those reads doubled the
// GPU build's time; docs/performance.md, "Kernel map"), found by linear probing; a slot's key is
// keys[row], so a slot costs 4 bytes instead of 12. kEmptySlot marks the CPU
// table's empty slots; the CUDA table holds row + 1, so that one memset to zero clears it with its status.
constexpr int32_t kEmptySlot = -1;
inline uint64_t table_capacity(int64_t n) {
  uint64_t cap = 16;
  while (cap < 3 * static_cast<uint64_t>(n)) cap <<= 1;
  return cap;
}

// The Morton (Z-order) key of an in-range (b, x, y, z) within the box of a row set (MortonFrame): the
// batch above 3·bits, below it x − lo_x, y − lo_y, z − lo_z interleaved bit by bit (x's bit i at 3i + 2,
// y's at 3i + 1, z's at 3i). Unique per voxel of the set; the frame makes the keys as short as the set's
// extent allows (a radix sort then takes ⌈key_bits / 8⌉ passes: 5 instead of 8 for a 1024³ grid).
struct MortonFrame {
  int64_t lo[3] = {kCoordMin, kCoordMin, kCoordMin};  // the set's smallest x, y, z
  int bits = kAxisBits;                               // bits an axis: those of the largest extent
  int key_bits = 3 * kAxisBits + 12;                  // 3·bits + the bits of the largest batch index
};
// The frame of a box: per-axis minimum and maximum, the largest batch index.
inline MortonFrame morton_frame(const int64_t lo[3], const int64_t hi[3], int64_t batch_hi) {
  MortonFrame f;
  int64_t extent = 0;
  for (int a = 0; a < 3; ++a) {
    f.lo[a] = lo[a];
    extent = hi[a] - lo[a] > extent ? hi[a] - lo[a] : extent;
  }
  auto width = [](int64_t v) {
    int w = 0;
    while (v >> w) ++w;
    return w;
  };
  f.bits = width(extent) > 0 ? width(extent) : 1;
  f.key_bits = 3 * f.bits + width(batch_hi);
  return f;
}
FRUGAL_HD uint64_t spread_bits3(uint64_t v) {  // bit i of v's 17 low bits to bit 3i
  v &= kAxisMask;
  v = (v | v << 32) & 0x1f00000000ffffull;
  v = (v | v << 16) & 0x1f0000ff0000ffull;
  v = (v | v << 8) & 0x100f00f00f00f00full;
  v = (v | v << 4) & 0x10c30c30c30c30c3ull;
  v = (v | v << 2) & 0x1249249249249249ull;
  return v;
}
FRUGAL_HD uint64_t morton_key(uint64_t packed, int64_t lo_x, int64_t lo_y, int64_t lo_z, int bits) {
  return static_cast<uint64_t>(key_b(packed)) << (3 * bits) |
         spread_bits3(static_cast<uint64_t>(key_x(packed) - lo_x)) << 2 |
         spread_bits3(static_cast<uint64_t>(key_y(packed) - lo_y)) << 1 |
         spread_bits3(static_cast<uint64_t>(key_z(packed) - lo_z));
}
inline uint64_t morton_key(uint64_t packed, const MortonFrame& f) {
  return morton_key(packed, f.lo[0], f.lo[1], f.lo[2], f.bits);
}

// The row of map column col: col itself where order is nullptr, else order[col], or -1 where that entry
// is outside [0, n) (a bad run order: such a column is never written through).
FRUGAL_HD int64_t column_row(const int32_t* order, int64_t col, int64_t n) {
  if (!order) return col;
#if defined(__CUDA_ARCH__)
  const int32_t r = __ldg(&order[col]);
#else
  const int32_t r = order[col];
#endif
  return r >= 0 && r < n ? r : -1;
}

// The offset of kernel index k along one axis: i = k / ks², j = (k / ks) % ks, l = k % ks.
FRUGAL_HD int axis_offset(int idx, int ks, int dilation) { return (idx - ks / 2) * dilation; }

// ---- map build ------------------------------------------------------------------------------
struct MapArgs {
  const int32_t* coords = nullptr;  // [n, 4] contiguous
  int64_t n = 0;
  int kernel_size = 3, dilation = 1;
  int32_t* nbr = nullptr;  // [K, n]: the map's columns in its run order
  int device = 0;          // CUDA device index
  // Where the run order goes ([n]); nullptr: the given order, without asking the rule.
  int32_t* order = nullptr;
  std::optional<RowOrder> forced_order;  // the run order where order is set; unset: the rule's
};

// What the build (or the check of a user map) found wrong (rows are -1 when nothing was): a row whose
// coordinate cannot be packed (the first one on the CPU; the smallest on CUDA), two rows with equal
// coordinates, the linear index k·n + row of a map entry outside [0, n]; and, on CUDA, the map's fit
// to the pipelined halo kernel (MapStats::halo_samples, halo_fits), measured on the map as built.
struct MapStatus {
  int64_t bad_row = -1;
  int64_t dup_row_a = -1, dup_row_b = -1;  // dup_row_a < dup_row_b
  int64_t bad_entry = -1;
  int halo_samples = 0;
  int halo_fits[2][2] = {};
  RowOrder order = RowOrder::given;  // the map's run order (what MapArgs::order holds)
};

// ---- convolution ----------------------------------------------------------------------------
// Which kernel runs is a ConvChoice (src/core/spconv_choose.h); the backends only run it.
struct ConvArgs {
  const void* feats = nullptr;   // [≥ n, ci] row-major; the sentinel row (if any) is never read
  const int32_t* nbr = nullptr;  // [k, n]
  const void* weight = nullptr;  // [k, ci, co]
  const void* bias = nullptr;    // [co] or nullptr
  void* out = nullptr;           // [n, co]
  const int32_t* order = nullptr;  // [n]: column i of nbr is output row order[i]; nullptr: row i
  DType dtype = DType::f32;
  int64_t n = 0;
  int k = 27, ci = 0, co = 0;
  bool check = true;  // report the first nbr entry outside [0, n]
  int device = 0;     // CUDA device index
};

// What a conv reported: the smallest linear index k·n + row of an nbr entry outside [0, n] (-1: none,
// or not checked) and the variant that ran (the choice's, but for a fallback the device forces).
struct ConvReport {
  int64_t bad_entry = -1;
  ConvVariant variant = ConvVariant::cpu;
};

// The public calls' check of a run order (ConvOptions::order, BackwardOptions::order) against the map's
// statistics: required, [n] i32, contiguous, on the device of feats where they say the order is morton;
// absent otherwise. Returns its data (nullptr: the given order).
const int32_t* checked_order(const TensorView& order, const std::optional<MapStats>& stats, int64_t n,
                             const TensorView& feats, const char* op);

// The arguments of a conv over these tensors (the public call validates them first; the tests and
// the benchmark pass their own): K and N from nbr [K, N], Ci from feats, Co from weight [K, Ci, Co],
// the dtype and device of feats.
inline ConvArgs conv_args(const TensorView& feats, const TensorView& nbr, const TensorView& weight, const TensorView* bias,
                          const TensorView& out) {
  ConvArgs a;
  a.feats = feats.data;
  a.nbr = nbr.data_as<const int32_t>();
  a.weight = weight.data;
  a.bias = bias ? bias->data : nullptr;
  a.out = out.data;
  a.dtype = feats.dtype;
  a.n = nbr.size(1);
  a.k = static_cast<int>(nbr.size(0));
  a.ci = static_cast<int>(feats.size(1));
  a.co = static_cast<int>(weight.size(2));
  a.device = feats.device.index;
  return a;
}

}  // namespace frugal::spconv::backend

namespace frugal::cpu {
// Fills a.nbr; returns what was wrong (the map is unspecified then).
spconv::backend::MapStatus spconv_build_map(const spconv::backend::MapArgs& a);
// The linear index k·n + row of the first entry of nbr [k, n] outside [0, n], or -1.
int64_t spconv_check_map(const int32_t* nbr, int64_t n, int k);
// nbr[k, order[i]] = columns[k, i] (order nullptr: a copy).
void spconv_map_by_row(const int32_t* columns, const int32_t* order, int32_t* nbr, int64_t n, int k);
// Returns the linear index k·n + row of the first nbr entry outside [0, n] when a.check (the
// output is not computed then), else -1.
int64_t spconv_conv(const spconv::backend::ConvArgs& a);
}  // namespace frugal::cpu

namespace frugal::cuda {
// Waits for the stream once, to read the status (and the map's halo fit) back.
spconv::backend::MapStatus spconv_build_map(const spconv::backend::MapArgs& a, Stream stream);
// The smallest linear index of an entry of nbr [k, n] outside [0, n] (MapStatus::bad_entry) and the
// map's halo fit; waits for the stream once.
spconv::backend::MapStatus spconv_check_map(const int32_t* nbr, int64_t n, int k, int device, Stream stream);
// nbr[k, order[i]] = columns[k, i] (order nullptr: a copy); never waits.
void spconv_map_by_row(const int32_t* columns, const int32_t* order, int32_t* nbr, int64_t n, int k, int device,
                       Stream stream);
// Runs the choice (complete and accepted by can_implement). When a.check: waits for the stream and
// reports the smallest linear index k·n + row of an nbr entry outside [0, n]; otherwise returns at
// once, without waiting.
spconv::backend::ConvReport spconv_conv(const spconv::backend::ConvArgs& a, const spconv::ConvChoice& choice,
                                        Stream stream);
}  // namespace frugal::cuda

// ================================ backward ======================================================
namespace frugal::spconv::backend {

// The gradients of a conv over a valid map (entries outside [0, n] count as absent): grad_weight
// [k, ci, co] and grad_bias [co], either nullptr where not asked for; the dtype of feats.
struct WgradArgs {
  const void* feats = nullptr;     // [≥ n, ci]
  const int32_t* nbr = nullptr;    // [k, n]
  const void* grad_out = nullptr;  // [n, co]
  const int32_t* order = nullptr;  // as ConvArgs::order: column i of nbr pairs with grad_out row order[i]
  void* grad_weight = nullptr;     // [k, ci, co] or nullptr
  void* grad_bias = nullptr;       // [co] or nullptr
  DType dtype = DType::f32;
  int64_t n = 0;
  int k = 27, ci = 0, co = 0;
  int device = 0;  // CUDA device index
};

// dgrad's weight Wd [k, co, ci], Wd[j, o, i] = weight[k−1−j, i, o] for the conv's weight [k, ci, co]:
// the linear index into weight of Wd's element e.
FRUGAL_HD int64_t mirror_source(int64_t e, int k, int ci, int co) {
  const int64_t i = e % ci, o = e / ci % co, j = e / (static_cast<int64_t>(ci) * co);
  return ((k - 1 - j) * ci + i) * co + o;
}

}  // namespace frugal::spconv::backend

namespace frugal::cpu {
// The forward conv in f64 (out = bias + Σ feats[nbr] · weight, double accumulators): the CPU's f64 path.
void spconv_conv_f64(const spconv::backend::ConvArgs& a);
// grad_feats through the forward: a as for cuda::spconv_dgrad; mirrors the weight on the host.
void spconv_dgrad(const spconv::backend::ConvArgs& a);
// grad_weight and grad_bias (a.n > 0).
void spconv_wgrad(const spconv::backend::WgradArgs& a);
}  // namespace frugal::cpu

namespace frugal::cuda {
// grad_feats through the forward: a describes the forward conv over grad_out (feats = grad_out, ci = Co,
// co = Ci, out = grad_feats) with a.weight the conv's own weight [k, co, ci]; mirrors it into a
// stream-ordered workspace (Wd[j] = weight[k−1−j]ᵀ) and runs the choice over Wd. Never waits.
spconv::backend::ConvReport spconv_dgrad(const spconv::backend::ConvArgs& a, const spconv::ConvChoice& choice,
                                         Stream stream);
// grad_weight and grad_bias by the choice (complete and accepted by can_implement; a.n > 0). Never waits.
void spconv_wgrad(const spconv::backend::WgradArgs& a, const spconv::WgradChoice& choice, Stream stream);
}  // namespace frugal::cuda
