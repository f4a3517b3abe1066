// Submanifold sparse voxel convolution: the kernel (neighbor) map of a set of active voxels and
// the fused convolution over it, on the CPU or a GPU, without ever materializing the
// (K, N, Ci) gather.
//
// Data
//   coords  [N, 4]  i32, rows (b, x, y, z), unique. b in [0, 4095]; x, y, z in [-65536, 65535]
//                   (negative coordinates are fine). These ranges are what a packed 64-bit key
//                   holds: 12 bits of batch and 17 signed bits per axis.
//   nbr     [K, N]  i32, K = kernel_size³. nbr[k, n] is the row of the voxel at coords[n] + offset_k
//                   in the same batch, or N (the sentinel) when there is none.
//   feats   [N, Ci] or [N + 1, Ci]  f32 | f16 | bf16, row-major. The padded form of the original
//                   design (one extra zero row at index N) is accepted; the sentinel contributes
//                   nothing either way and row N is never read.
//   weight  [K, Ci, Co]  same dtype as feats.   bias [Co] (optional), same dtype.
//   out     [N, Co]  same dtype. Accumulation is always f32.
//
//   out[n, co] = bias[co] + Σ_k Σ_ci feats[nbr[k, n], ci] · weight[k, ci, co]
//
// Offset order (k ↔ offset): for a kernel of size ks (odd, 1..7) and dilation d,
//   k = (i·ks + j)·ks + l,   (dx, dy, dz) = ((i, j, l) − ks/2) · d,   i, j, l in [0, ks)
// so dx varies slowest and dz fastest; k = K/2 is the centre (offset 0), and offset K−1−k is
// the negation of offset k. The map therefore has the submanifold symmetry
//   nbr[k, n] = m  ⇔  nbr[K−1−k, m] = n.
// This is the orientation of a dense cross-correlation (PyTorch's conv3d, weight[:, :, i, j, l])
// and the order spconv 2.x uses over the spatial columns of its indices (its kernel positions
// flatten the kernel dims first-slowest in the order of the coordinate columns); spconv stores its
// weight as [Co, kD, kH, kW, Ci] ("KRSC") where ours is [K, Ci, Co]: see weight_from_krsc.
// Libraries that flatten the first axis fastest are served by offset_permutation.
//
// Guarantees: each output row is written exactly once by one thread block (CUDA) or one thread
// (CPU), with no atomics: results are bitwise identical run to run. No buffer proportional to
// K·N·Ci exists. CUDA workspace (stream-ordered, from frugal's own memory pool, which keeps up to
// 256 MiB between calls): the checked conv of a map not known valid holds a 256-byte flag; an
// f16/bf16 conv on the tensor-core kernels that sort rows holds the row order of up to 2^22 rows,
// 4 bytes a row (≤ 16 MiB); a wgmma conv on a grid too small to fill the GPU sums fixed offset
// ranges into f32 partials (≤ 64 MiB); the pipelined halo kernel lists the tiles it hands on (4 bytes
// a tile of 128 rows). Nothing else is allocated.
// Which kernel runs is a ConvChoice (below), picked by the rules of src/core/spconv_choose.cpp from
// the shapes, the dtype, the device's capabilities and what the map carries (KernelMap). f32 runs on
// CUDA cores; f16/bf16 on tensor cores (f32 accumulation): through wgmma where the GPU runs sm_90a
// code (Hopper), else mma.sync (both over rows sorted by neighbor pattern on large shapes) where they
// apply, WMMA otherwise. ConvOptions::choice forces one (tests, benchmarks); choose_conv tells which
// one a call takes.
// The map build allocates O(N): a hash table of 2^p ≥ 3N int32 slots and N packed 64-bit keys, and in
// a Morton run order the sort's keys and rows (20 bytes a row and CUB's scratch on CUDA; 16 on the CPU),
// freed before it returns. Index arithmetic is 64-bit.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "frugal/tensor.h"

namespace frugal::spconv {

constexpr int kMaxKernelSize = 7;
constexpr int32_t kMaxBatch = 4095;
constexpr int32_t kCoordMin = -65536, kCoordMax = 65535;

constexpr int kernel_volume(int kernel_size) { return kernel_size * kernel_size * kernel_size; }

// The offset (dx, dy, dz) of kernel index k (order above).
std::array<int, 3> kernel_offset(int k, int kernel_size, int dilation = 1);

// ---- kernel map ------------------------------------------------------------------------------
// The order a KernelMap runs its rows in. A conv's tiles are runs of consecutive rows of that order,
// and rows near each other there should be near each other in space: then the neighbors a tile
// gathers are the ones its neighbor tiles gather too, and they meet in the caches. Rows in random
// order (a shuffle, a concatenation, torch.nonzero over a permuted grid) make every gather miss.
enum class RowOrder : uint8_t {
  given,   // the rows as coords holds them (the lexicographic order the halo kernel is built for)
  morton,  // sorted by a Morton (Z-order) key of (b, x, y, z), whatever order the rows came in
};
std::string to_string(RowOrder o);  // "morton"

// What a conv's kernel choice needs to know about a map, measured once when frugal builds (or
// checks) the map and carried with it.
struct MapStats {
  int64_t rows = 0;    // N of the map [K, N] these describe
  int offsets = 0;     // K
  bool valid = false;  // every entry is in [0, N]: the conv needs no per-call check of the map
  // The order of the map's columns: given, column n is row n; morton, column i is row order[i]
  // (KernelMap::order, which a conv over KernelMap::columns must be given: ConvOptions::order).
  RowOrder order = RowOrder::given;
  // The pipelined halo kernel's fit: of halo_samples tiles of 128 consecutive rows spread evenly over
  // the map (in its row order), how many have neighbors that fit that kernel's shared-memory halo,
  // per column tile (first index 0: 64 output channels, 1: 128) and passes of 64 input channels
  // (second index 0: Ci ≤ 64, 1: 64 < Ci ≤ 128). halo_samples = 0: not measured (a map on the CPU,
  // K > 32).
  int halo_samples = 0;
  int halo_fits[2][2] = {};
};

// Builds nbr [K, N] i32 on the device of coords. kernel_size odd in [1, 7]; dilation ≥ 1.
// Throws frugal::Error naming the row and the value for a coordinate outside the packable range,
// and the coordinate and both rows for a duplicate. On CUDA it waits for the stream once (to
// read those two checks back). N = 0 gives an empty [K, 0] map.
// The result is a plain tensor, "a user map": a conv checks it on every call and knows nothing
// about it. KernelMap::build keeps what the build learned.
Tensor build_kernel_map(const TensorView& coords, int kernel_size = 3, int dilation = 1, Stream stream = nullptr);
// The same into a caller-provided nbr [K, N] i32 (contiguous, on the device of coords). Returns what
// the build learned about the map (read back with its checks), for ConvOptions::map_stats.
MapStats build_kernel_map(const TensorView& coords, const TensorView& nbr, int kernel_size, int dilation,
                          Stream stream = nullptr);
// The same in a run order (KernelMap below): into columns [K, N] i32 and order [N] i32 (contiguous, on
// the device of coords), in the order the rule picks for these rows or in `run_order` where given.
// Returns the statistics, whose `order` says which it is (order is left unwritten where it is given).
// On CUDA the rule's choice waits for the stream once more (to read back whether the rows are sorted).
MapStats build_kernel_map(const TensorView& coords, const TensorView& columns, const TensorView& order,
                          int kernel_size, int dilation, Stream stream = nullptr,
                          std::optional<RowOrder> run_order = std::nullopt);
// nbr [K, N] by row from a map in a run order: nbr[k, order[i]] = columns[k, i] (a copy where order is
// empty). All three on one device, contiguous.
void map_by_row(const TensorView& columns, const TensorView& order, const TensorView& nbr, Stream stream = nullptr);
// Validates a map nbr [K, N] i32 that the caller assembled (frugal::Error naming the first entry
// outside [0, N]) and measures it as the build does; on CUDA it waits for the stream once.
MapStats check_kernel_map(const TensorView& nbr, Stream stream = nullptr);

// A kernel map and what frugal knows about it: the map of one coordinate set, reused by every conv
// on that set. A map frugal built or checked is known valid, so a conv over it runs without the
// per-call check (no readback, no wait for the stream) and picks its kernel from the map's
// statistics. Its entries must not change afterwards: a changed map gives wrong numbers (an entry
// outside [0, N] counts as absent), never an out-of-bounds access. Copies share the map.
//
// The build also fixes the order the convs run the rows in (RowOrder; the rule of choose_row_order
// in src/core/spconv_choose.cpp: rows already in lexicographic order keep it, any other order runs in
// Morton order), and stores the map in that order: columns()[k, i] is the neighbor row (an index
// into coords, as in nbr) of row order()[i], and a conv writes out[order()[i]] once, so out[n] still
// belongs to coords[n]. A permutation of the rows permutes the output and changes no bit of it where
// both orders run in Morton order. The order costs 4 bytes a row; nbr() gives the map by row.
class KernelMap {
 public:
  KernelMap() = default;
  // The map of coords (as build_kernel_map), in the order the rule picks for these rows, or in
  // `order` where given; with what the build learned.
  static KernelMap build(const TensorView& coords, int kernel_size = 3, int dilation = 1, Stream stream = nullptr,
                         std::optional<RowOrder> order = std::nullopt);
  // A map the caller assembled, nbr [kernel_size³, N] i32: checked once (check_kernel_map), run in its
  // given order.
  static KernelMap from_user(Tensor nbr, int kernel_size = 3, int dilation = 1, Stream stream = nullptr);

  // The map as the convs run it, [K, N] i32 (nbr itself where the order is given).
  const Tensor& columns() const { return columns_; }
  // The rows in the map's run order, [N] i32; undefined where the order is given.
  const Tensor& order() const { return order_; }
  // The map by row, nbr [K, N] (nbr[k, n] for coords[n]): columns() where the order is given, else a
  // new tensor on the map's device.
  Tensor nbr(Stream stream = nullptr) const;
  int kernel_size() const { return kernel_size_; }
  int dilation() const { return dilation_; }
  const MapStats& stats() const { return stats_; }

 private:
  Tensor columns_, order_;
  int kernel_size_ = 0, dilation_ = 0;
  MapStats stats_;
};

// ---- kernel choice ---------------------------------------------------------------------------
// The kernels a conv runs on. The tensor-core ones but wmma take f16/bf16 with K ≤ 32, Ci and Co
// multiples of 8 and 16-byte aligned feats, weight and out.
enum class ConvVariant : uint8_t {
  cpu,        // the CPU backend (16-row tiles, OpenMP over tiles): every CPU call
  simt,       // CUDA cores, every dtype and K, 64 × 64 tiles (f32)
  wmma,       // tensor cores through WMMA 16×16×16 (sm_80), f16/bf16, every K, the map's row order
  mma,        // mma.sync m16n8k16 (sm_80), skipping in each 16-row group the offsets none of its rows has
  wgmma,      // Hopper's warpgroup MMA (sm_90a): every warp gathers and multiplies
  wgmma_ws,   // wgmma, warp-specialized: a producer warpgroup gathers, two consumer warpgroups multiply
  wgmma_ws2,  // wgmma_ws with two blocks a multiprocessor (64-wide column tiles of 128 rows)
  halo_pipe,  // wgmma over each tile's input rows loaded once into a shared-memory halo (Ci, Co ≤ 128);
              // the tiles whose rows do not fit it are handed on to wgmma_ws
};

// Which kernel a conv runs, with its tiling. A choice the rules return has every field set. A forced
// one (ConvOptions::choice) may leave tile_co, tile_rows, splits and chunk_rows at 0 and sort_rows
// unset: the rules for its variant fill them.
struct ConvChoice {
  ConvVariant variant = ConvVariant::cpu;
  int tile_co = 0;    // output channels a block: simt 64, wmma 64 | 128, the others 64 | 128 | 256
  int tile_rows = 0;  // output rows a block: cpu 16, simt 64, wgmma(_ws) 128 | 256 (tile_co ≤ 128), else 128
  std::optional<bool> sort_rows = std::nullopt;  // rows sorted by neighbor mask within windows of 8192 (mma, wgmma*)
  int splits = 0;                 // offset ranges summed apart into f32 partials, then added in order
  int64_t chunk_rows = 0;         // rows a launch: a multiple of 128, or N
};
std::string to_string(ConvVariant v);        // "wgmma_ws"
std::string to_string(const ConvChoice& c);  // "wgmma_ws(tile_co 64, tile_rows 128, map order, splits 1, chunk_rows 4643936)"
bool operator==(const ConvChoice& a, const ConvChoice& b);

// ---- convolution -----------------------------------------------------------------------------
enum class MapCheck : uint8_t {
  // Every nbr entry outside [0, N] raises frugal::Error. The entries are checked inside the conv
  // kernel itself (no extra pass); on CUDA this costs one 8-byte readback, i.e. one wait for the
  // stream at the end of the call. A map known valid (KernelMap, MapStats::valid) is not checked.
  checked,
  // No readback and no wait. An entry outside [0, N] is still never dereferenced: it counts as
  // absent (like the sentinel), so a bad map gives wrong numbers, never an out-of-bounds access.
  unchecked,
};

struct ConvOptions {
  Stream stream = nullptr;
  MapCheck check = MapCheck::checked;  // for a map not known valid
  // What frugal knows about nbr: the MapStats build_kernel_map or check_kernel_map returned for it
  // (the KernelMap forms pass the map's own). Absent: a user map, checked as `check` says and never
  // served by the halo kernel (whose choice needs the map's statistics).
  std::optional<MapStats> map_stats;
  // Forces a kernel (tests, benchmarks): frugal::Error(unsupported) naming the variant and the reason
  // where it cannot run these arguments on this device.
  std::optional<ConvChoice> choice;
  // The run order of nbr's columns (KernelMap::order: [N] i32 on the device of feats): column i is row
  // order[i]. Required where map_stats say the order is morton, refused otherwise; the KernelMap forms
  // pass the map's own. An entry outside [0, N) is never written through (its row stays unwritten).
  TensorView order;
};

// out = conv(feats, nbr, weight, bias); bias may be nullptr. out must not overlap feats.
void submanifold_conv(const TensorView& feats, const TensorView& nbr, const TensorView& weight, const TensorView* bias,
                      const TensorView& out, Stream stream = nullptr, MapCheck check = MapCheck::checked);
// Allocating form: returns out [N, Co] on the device of feats.
Tensor submanifold_conv(const TensorView& feats, const TensorView& nbr, const TensorView& weight,
                        const TensorView* bias = nullptr, Stream stream = nullptr, MapCheck check = MapCheck::checked);
// With options: returns the choice that served the call.
ConvChoice submanifold_conv(const TensorView& feats, const TensorView& nbr, const TensorView& weight,
                            const TensorView* bias, const TensorView& out, const ConvOptions& options);
Tensor submanifold_conv(const TensorView& feats, const TensorView& nbr, const TensorView& weight,
                        const TensorView* bias, const ConvOptions& options);
// Over a KernelMap (no per-call check; options.map_stats is ignored: the map's own count): returns
// the choice that served the call.
ConvChoice submanifold_conv(const TensorView& feats, const KernelMap& map, const TensorView& weight,
                            const TensorView* bias, const TensorView& out, const ConvOptions& options = {});
Tensor submanifold_conv(const TensorView& feats, const KernelMap& map, const TensorView& weight,
                        const TensorView* bias = nullptr, const ConvOptions& options = {});

// The choice a call with these arguments takes (validated as the call validates them); runs nothing.
ConvChoice choose_conv(const TensorView& feats, const TensorView& nbr, const TensorView& weight, const TensorView* bias,
                       const TensorView& out, const ConvOptions& options = {});
ConvChoice choose_conv(const TensorView& feats, const KernelMap& map, const TensorView& weight, const TensorView* bias,
                       const TensorView& out, const ConvOptions& options = {});

// ---- other libraries' conventions --------------------------------------------------------------
enum class OffsetOrder : uint8_t {
  x_slowest,  // frugal's order (and spconv 2.x's, for the same coordinate columns)
  x_fastest,  // the reverse axis order: k' = (l·ks + j)·ks + i for the same (i, j, l)
};
// perm[k_other] = k_frugal: the frugal index of the other order's k-th offset. To import a weight
// stored in `other` order: w_frugal[perm[k]] = w_other[k]; a map: nbr_frugal[perm[k]] = nbr_other[k].
std::vector<int> offset_permutation(OffsetOrder other, int kernel_size);
// spconv 2.x weight [Co, ks, ks, ks, Ci] (KRSC) on the CPU → frugal's [K, Ci, Co] on the CPU.
Tensor weight_from_krsc(const TensorView& weight_krsc);

}  // namespace frugal::spconv

// ================================ backward (training) ===========================================
// The gradients of out = conv(feats, nbr, weight, bias) given grad_out [N, Co] (the dtype of feats):
//   grad_feats  [rows of feats, Ci]  grad_feats[m] = Σ_k Σ_{n: nbr[k, n] = m} grad_out[n] · weight[k]ᵀ
//   grad_weight [K, Ci, Co]          grad_weight[k] = Σ_n feats[nbr[k, n]]ᵀ ⊗ grad_out[n]
//   grad_bias   [Co]                 grad_bias = Σ_n grad_out[n]
// any subset of them; accumulation is f32 (f64 for f64: the CPU takes f64 in the forward and the backward,
// for gradient checks; CUDA refuses it).
// The padded feats form gets a padded grad_feats whose row N is zero. Sentinel entries contribute nothing.
//
// dgrad (grad_feats) uses the submanifold symmetry nbr[k, n] = m ⇔ nbr[K−1−k, m] = n, which every map
// build_kernel_map makes: grad_feats[m] = Σ_j grad_out[nbr[j, m]] · weight[K−1−j]ᵀ is a forward conv
// over the same map with the mirrored, transposed weight Wd[j] = weight[K−1−j]ᵀ ([K, Co, Ci]), run by
// the forward's kernels through its kernel choice (ConvChoice; the forward's workspace) plus Wd:
// K·Ci·Co elements (CUDA: stream-ordered from frugal's pool). A user map without the symmetry gets the
// gradient of its symmetric completion, not of itself.
//
// wgrad (grad_weight) is a gather-GEMM reducing over N, split over N into `splits` chunks of chunk_rows
// consecutive rows: a number fixed by the shape alone (N, K, Ci, Co and the variant's tile), not by the
// device's occupancy. Each chunk's f32 partial [K, Ci, Co] goes to a workspace, and a second kernel adds
// the partials in chunk order: no float atomics, results bitwise identical run to run (and across GPUs
// that run the same choice). grad_bias uses the same chunks. CUDA workspace: splits·(K·Ci·Co + Co) f32
// for the requested gradients where splits > 1 (the rules keep it ≤ 64 MiB), none for one chunk. The CPU
// gives each (k, block of 16 input channels) to one thread, summing rows in a fixed order, and sums
// grad_bias over blocks of 256 rows added in order: 16·Co accumulators a thread, (N / 256)·Co floats.
namespace frugal::spconv {

enum class WgradVariant : uint8_t {
  cpu,   // the CPU backend: every CPU call
  simt,  // CUDA cores, every dtype: 64 × 64 tiles of [Ci, Co], f32 for f32 and where there are no tensor cores
  wmma,  // tensor cores through WMMA 16×16×16 with f32 accumulators (sm_80), f16/bf16, any channel count
  mma,   // tensor cores through ldmatrix + mma.sync m16n8k16 (sm_80), f16/bf16, 64- or 128-wide tiles of
         // [Ci, Co], a 4-stage cp.async pipeline: channel counts multiples of 8, 16-byte aligned rows
         // (the rules' choice for such f16/bf16 calls; WMMA takes the others)
};
// Which kernel computes grad_weight (and grad_bias) and how N is split. A forced choice
// (BackwardOptions::wgrad) may leave splits and chunk_rows at 0: the rules fill them.
struct WgradChoice {
  WgradVariant variant = WgradVariant::cpu;
  int splits = 0;          // chunks of rows, each summed apart into f32 partials, then added in order
  int64_t chunk_rows = 0;  // rows a chunk: a multiple of 32 (or N); splits = ⌈N / chunk_rows⌉
  int tile_ci = 0, tile_co = 0;  // mma: the block's tile of [Ci, Co], 64 or 128 each (the others: 64)
};
std::string to_string(WgradVariant v);        // "wmma"
std::string to_string(const WgradChoice& c);  // "mma(tile 128 x 128, splits 10, chunk_rows 29024)"
bool operator==(const WgradChoice& a, const WgradChoice& b);

// What served a backward call: the forward's choice that computed grad_feats, the wgrad choice that
// computed grad_weight and grad_bias; unset where that gradient was not asked for (or N = 0).
struct BackwardChoice {
  std::optional<ConvChoice> dgrad;
  std::optional<WgradChoice> wgrad;
};

struct BackwardOptions {
  Stream stream = nullptr;
  // A map not known valid: checked raises frugal::Error for an entry outside [0, N] (one pass over the
  // map before the gradients; on CUDA one wait for the stream); unchecked counts such an entry as absent.
  MapCheck check = MapCheck::checked;
  std::optional<MapStats> map_stats;  // as ConvOptions::map_stats
  TensorView order;                   // as ConvOptions::order
  std::optional<ConvChoice> dgrad;    // forces the forward kernel that computes grad_feats
  std::optional<WgradChoice> wgrad;   // forces the wgrad kernel and its split
};

// Where the requested gradients go (nullptr: not asked for). Contiguous, the dtype of feats, on its
// device, overlapping no input and no other gradient: grad_feats shaped like feats, grad_weight
// [K, Ci, Co], grad_bias [Co].
struct GradientBuffers {
  const TensorView* feats = nullptr;
  const TensorView* weight = nullptr;
  const TensorView* bias = nullptr;
};
// Which gradients the allocating form computes.
struct GradientRequest {
  bool feats = true, weight = true, bias = false;
};
// The allocating form's result: the requested gradients (the others undefined) and what served them.
struct ConvGradients {
  Tensor feats, weight, bias;
  BackwardChoice choice;
};

// feats and weight as the forward got them (feats is read only for grad_weight, weight only for
// grad_feats); grad_out [N, Co]. Validates as the forward does (frugal::Error naming the tensor).
BackwardChoice submanifold_conv_backward(const TensorView& grad_out, const TensorView& feats, const TensorView& nbr,
                                         const TensorView& weight, const GradientBuffers& grads,
                                         const BackwardOptions& options = {});
ConvGradients submanifold_conv_backward(const TensorView& grad_out, const TensorView& feats, const TensorView& nbr,
                                        const TensorView& weight, GradientRequest request,
                                        const BackwardOptions& options = {});
// Over a KernelMap (no per-call check; options.map_stats is ignored: the map's own count).
BackwardChoice submanifold_conv_backward(const TensorView& grad_out, const TensorView& feats, const KernelMap& map,
                                         const TensorView& weight, const GradientBuffers& grads,
                                         const BackwardOptions& options = {});
ConvGradients submanifold_conv_backward(const TensorView& grad_out, const TensorView& feats, const KernelMap& map,
                                        const TensorView& weight, GradientRequest request,
                                        const BackwardOptions& options = {});
// The choices such a call takes (validated as the call validates them); runs nothing.
BackwardChoice choose_conv_backward(const TensorView& grad_out, const TensorView& feats, const TensorView& nbr,
                                    const TensorView& weight, const GradientBuffers& grads,
                                    const BackwardOptions& options = {});
BackwardChoice choose_conv_backward(const TensorView& grad_out, const TensorView& feats, const KernelMap& map,
                                    const TensorView& weight, const GradientBuffers& grads,
                                    const BackwardOptions& options = {});

}  // namespace frugal::spconv
