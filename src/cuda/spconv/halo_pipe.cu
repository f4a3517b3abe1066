// The pipelined halo kernel: the conv over rows in the map's order, each tile's input rows loaded once
// into shared memory (a "halo") instead of gathered per offset, for Ci, Co <= 128; and the probe that
// tells, at map build, whether a map's tiles fit it. Floor: a tile reads its K·128 map entries and its
// distinct input rows once, and each step's 64-row weight slice.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/mbarrier.cuh"
#include "cuda/spconv/wgmma_tile.cuh"
#include "cuda/wgmma.cuh"

// Outside sm_90a the kernels compile to traps, which leaves their tile constants and helpers unused.
#if defined(__CUDA_ARCH__) && !defined(FRUGAL_WGMMA)
#pragma nv_diag_suppress 177
#endif

namespace frugal::cuda::spconv_kernels {

namespace {

// ---- the pipelined halo kernel (Ci, Co ≤ 128) -------------------------------------------------------
// Why: in the map's order a 128-row tile of a shell makes ~2,100 (row, offset) pairs but touches only
// ~430 distinct input rows, so the gather-per-step kernels bring each input row from L2 ~5 times a
// tile. Here each tile's input rows are loaded once, as three contiguous row ranges (one for each third
// of the offsets: for a 3×3×3 kernel the three planes of the first coordinate; over the shells they
// hold ~8% more rows than the tile's distinct rows; a tile whose ranges do not fit takes only the 8-row
// boxes of them it uses, at Ci > 64 and at one pass with BN = 64), into a "halo" in shared memory; each
// warp then reads its 16 rows' A fragments straight from the halo rows with ldmatrix (one row address a
// lane) and issues register-A wgmmas against the offset's weight slice. The measurements behind each
// choice below are in docs/performance.md ("Sparse conv").
//
// One persistent block a multiprocessor walks tiles (blockIdx.x, then each claimed from a counter of the
// launch, so that the blocks end within about a tile of each other); the prologue of tile j + 1 runs
// beside the main loop of tile j, in separate warps, into the other of two halo buffers:
//   - 4 prologue warps, one thread a tile row: the tile's map slice (fetched into shared memory one
//     tile ahead by 4-byte cp.async, 27 copies a thread in flight at once), checked without a branch
//     an entry (K = 27 known at compile time where it is); the offsets the tile has; the three ranges
//     (by boxes: the boxes used in them, as byte flags, then a bitmap and a scan) and each entry's
//     slot; then the first warp copies the rows with the copy engine (2-D tensor maps of the features,
//     copies of 64 rows and then of 8, the 128-byte swizzle: a row's
//     chunk c lands at chunk c ^ (slot % 8) of its slot, the phase ldmatrix reads with);
//   - 1 weight warp (in a warpgroup of its own, whose other warps leave: HaloPipe's registers): the
//     weight slice of each step of each tile, in tile order, through STAGES stages;
//   - 2 consumer warpgroups: the main loop, then the epilogue, staged in the tile's own halo buffer
//     (its rows are read by then).
// Per halo buffer b, three mbarriers: meta (the 128 prologue threads arrive: slots, offsets, rows
// requested; act_count −1 ends the walk), halo (the rows' copies complete), free (the 8 consumer warps
// after their last reads (and the epilogue after a tile's last pass) and the weight warp after its
// last copy of the unit: the buffer may be refilled). A buffer holds a unit: one pass of a tile.
// At one pass and BN = 64 (HaloPipe::kCopyWarp: Ci ≤ 64 → Co ≤ 64) the prologue is taken off the
// buffers' path, because there its chain (map slice, ranges, slot entries, then the copies issued by
// one warp while the other three waited) was the whole block period: three tile states (slot entries,
// offsets, rows) instead of two, each with a ready barrier (the prologue's 128 threads arrive) and a
// state-free one (the consumer warps and the weight warp); the prologue lays a tile out as soon as its
// state is free — while the consumers still run the tile before last — and a copy warp (the weight
// warp's warpgroup's second warp) waits for the state and then for the buffer, zeroes the zero slots
// and issues the copies; the weight warp and the consumers wait on the ready barrier instead of meta
// (the weight warp starts a tile's slices as soon as its offsets are known). The third state's slot
// area costs 16 halo rows; with the prologue off the path, the tiles that do not fit by ranges are laid
// out by boxes there too.
// A tile that does not fit CAP rows (by ranges, or by boxes where those are taken: a few percent of a
// shell's tiles in the map's order; every tile of a dense block or of rows in random order) is handed
// off: the prologue appends it to p.handoff and goes on to its next tile in the same buffer, and
// kernel_conv_wgmma_ws (two blocks a multiprocessor at BN = 64, one at 128) runs the listed tiles after
// this kernel (gathering such a tile's rows step by step here, behind a barrier of the consumers a
// step, takes 2.4× a fitting tile's time). The choice takes this kernel only where 3/4 of a sample of
// the map's tiles fit (MapStats::halo_fits, measured by kernel_halo_probe at map build): the
// prologue's work on a handed-off tile hides behind the consumers only while most tiles fit. At Ci ≤ 64
// the same sums in the same order as every wgmma kernel: bitwise their output.
// BN = 64 or 128 output channels (Co ≤ BN); Ci ≤ 128 in passes of 64 channels (a pass: one halo buffer
// holding 64 channels of the tile's rows, every offset of the tile against that pass's weight rows).
// With two passes a tile's sums run pass by pass (all offsets over channels 0–63, then over 64–127):
// a fixed order, so still bitwise repeatable, but not the other kernels' (offsets, then channels); at
// Ci ≤ 64 it is theirs.
// A tile's layout by boxes (below): each third of the offsets spans < kHaloBoxSpan boxes of 8 rows.
constexpr int kHaloBoxSpan = 256, kHaloBoxWords = 3 * kHaloBoxSpan / 32;
// Whether the halo kernel of this column tile and pass count has the copy warp (HaloPipe::kCopyWarp): one
// pass at BN = 64 (Ci ≤ 64 → Co ≤ 64).
__host__ __device__ constexpr bool halo_copy_warp(int bn, int passes) { return passes == 1 && bn == 64; }
template <int BN_, int PASSES_ = 1>
struct HaloPipe {
  static constexpr int BM = kTileRows, BN = BN_, BK = 64, CONSUMERS = 256, PROLOGUE = BM;  // a prologue thread a row
  // STAGES: 4 at BN = 64 (a deeper ring and a shallower one both measured slower); 3 stages of 16 KB at
  // BN = 128, so that the halo buffers keep CAP = 632 rows (two passes; 568 at one).
  // Four warpgroups: two of consumers, the prologue's 128 threads, and one holding the weight warp (its
  // other three warps leave at once) — so that setmaxnreg can move registers between roles: at launch
  // every thread has REG_BUDGET / 4 = 128; the weight warpgroup keeps REG_WEIGHT, the prologue
  // REG_PROLOGUE, the consumers take the rest, and ptxas allocates each role's code within its count.
  // At two passes the prologue (its map slice in registers) needs ~152 (it spills at 128), and with the
  // consumers' share their loop keeps its descriptors on the uniform datapath at BN = 128. (With 416
  // threads — 256 + the weight warp + 128 — ptxas gave every thread 128 all the same.)
  // kCopyWarp (one pass, BN = 64): the copy warp (below) takes the row copies off the prologue; with the
  // layout by boxes there the prologue takes 136 and the consumers 160 (168 / 120 spill in the
  // prologue); fewer for the weight and copy warps' warpgroup measured slower.
  static constexpr bool kCopyWarp = halo_copy_warp(BN_, PASSES_);
  static constexpr int THREADS = CONSUMERS + PROLOGUE + 128, STAGES = BN == 64 ? 4 : 3, LDC = BN + 8;
  // setmaxnreg's per-thread counts of the four warpgroups sum to the block's registers over 128 threads.
  static constexpr int REG_BUDGET = kRegistersPerBlock / 128;
  static_assert(THREADS == 4 * 128, "four warpgroups");
  static constexpr int REG_CONSUMER = PASSES_ > 1 ? 160 : (kCopyWarp ? 160 : 176),
                       REG_PROLOGUE = PASSES_ > 1 ? 152 : (kCopyWarp ? 136 : 112),
                       REG_WEIGHT = REG_BUDGET - 2 * REG_CONSUMER - REG_PROLOGUE;
  static_assert(REG_WEIGHT >= 24 && REG_CONSUMER >= 128 && REG_CONSUMER <= 256 && REG_PROLOGUE <= 256 &&
                    REG_CONSUMER % 8 == 0 && REG_PROLOGUE % 8 == 0,
                "setmaxnreg's counts: multiples of 8 in [24, 256], within the block's kRegistersPerBlock");
  static constexpr int A_BUFFERS = BN == 64 ? 4 : 2;  // register A fragments in flight (the consumers' loop)
  static constexpr int B_STAGE = BK * BN * 2;
  static constexpr size_t STAGING = size_t(BM) * LDC * 2;
  // The offsets a map slice and a slot area hold: 27 where the kernel serves only those (halo_max_offsets:
  // at one pass, BN = 64, 6.3 KB more for the halo buffers).
  static constexpr int KMAX = halo_max_offsets(BN_, 64 * PASSES_);
  static constexpr size_t SLOTS = size_t(KMAX) * BM;  // 16-bit entries a tile state
  static constexpr int ZERO = 8;                      // slots 0–7: zero rows, one a swizzle phase
  // Tile states (a tile's offsets, rows and slot entries): with the copy warp three, so that the prologue
  // lays tile j + 1 out while the consumers run tile j − 1 and tile j waits for its buffer; else two (the
  // prologue waits for the buffer before it lays a tile out). The third costs 7 KB of halo rows, and the
  // states' box words (static shared memory) 1 KB more: CAP 608.
  static constexpr int STATES = kCopyWarp ? 3 : 2;
  static constexpr size_t BUDGET = kMaxSmemPerBlock - (STATES > 2 ? 4096 : 2048);  // dynamic shared memory; the static part aside
  // The prologue's map slice (int32 entries): in shared memory, fetched a tile ahead by cp.async, for one
  // pass; for two, in the prologue threads' registers, loaded at the top of the tile's iteration (in
  // flight while the free buffer is waited for), its 16 KB given to the halo buffers (CAP 568 → 632 at
  // BN = 128: fewer tiles handed off). At one pass registers measured slower: its tiles are half as
  // long, and the loads' latency shows.
  static constexpr bool kMapInRegisters = PASSES_ > 1;
  static constexpr size_t MAP = kMapInRegisters ? 0 : size_t(KMAX) * BM * 4;
  static constexpr size_t FIXED = (1024 + size_t(STAGES) * B_STAGE + size_t(STATES) * SLOTS * 2 + MAP + 1023) / 1024 * 1024;
  static constexpr int CAP = static_cast<int>((BUDGET - FIXED) / 2 / 128 - ZERO) / 8 * 8;
  static constexpr size_t HALO = size_t(ZERO + CAP) * 128;
  static constexpr size_t SMEM = FIXED + 2 * HALO;
  static_assert(BN == 64 || BN == 128, "one or two 64-channel groups of weight columns");
  static_assert(ZERO + CAP < 65536, "a slot fits 16 bits");
  static_assert(HALO % 1024 == 0 && FIXED % 1024 == 0, "halo buffers start on 1 KB swizzle atoms");
  static_assert(STAGING <= HALO, "the epilogue stages in the tile's halo buffer");
  static_assert(size_t(CAP) * 128 >= 3 * kHaloBoxSpan, "a tile's box flags (a byte a box) fit a halo buffer");
};

// The third of the offsets offset k belongs to (per = ⌈K / 3⌉): the halo range its neighbors come from.
__device__ __forceinline__ int offset_third(int k, int per) { return (k >= per) + (k >= 2 * per); }
// Two layouts of a tile's halo, both after the ZERO slots. By ranges: for each third g of the offsets,
// every row from the third's lowest neighbour row lo to its highest, gaps included (the cheap one). By
// boxes (halo_by_boxes, for a tile that does not fit by ranges): the boxes of 8 rows its neighbours of
// each third fall in, counted from lo (box i: rows lo + 8i …), each used box once, in order — third
// 0's, then 1's, then 2's; a third's rows must span fewer than kHaloBoxSpan boxes (a byte flag a box
// while the tile is laid out). A tile fits when its layout takes at most CAP slots (by boxes, far more
// of a shell's tiles fit). Boxes are taken where the layout's extra work is off the consumers' path:
// at Ci > 64 (two passes: the consumers' tile takes twice as long) and at one pass with BN = 64, where
// the copy warp takes the row copies off the prologue (kCopyWarp); at one pass with BN = 128 (no copy
// warp) it costs more than it saves.
__host__ __device__ constexpr bool halo_by_boxes(int64_t ci, int bn) {
  return halo_passes(ci) > 1 || halo_copy_warp(bn, halo_passes(ci));
}
// By ranges (the cheaper layout, taken where it fits): the slots the range [lo, hi] takes, whole boxes
// of 8 rows, 0 when empty (hi < lo), capped at 2^15 (past any fit); range q's rows at slots base[q] ….
__device__ __forceinline__ int halo_slots(int lo, int hi) {
  return hi >= lo ? static_cast<int>(min((int64_t{hi} - lo + 8) / 8 * 8, int64_t{1} << 15)) : 0;
}
// Whether a third's rows [lo, hi] (none: hi < lo) can be laid out by boxes.
__device__ __forceinline__ bool halo_span_ok(int lo, int hi) { return hi < lo || hi - lo < 8 * kHaloBoxSpan; }
// A tile's layout by ranges from its thirds' lowest and highest rows (lo_s, hi_s): range q from row lo[q]
// at slots base[q] …, boxes[q] boxes of 8 rows, the first at slot zero. Returns the slots taken up to its
// end; with spans, also whether every third could be laid out by boxes (halo_span_ok).
__device__ __forceinline__ int range_layout(const int* lo_s, const int* hi_s, int zero, int (&lo)[3], int (&base)[3],
                                            int (&boxes)[3], bool* spans = nullptr) {
  int slot_end = zero;
#pragma unroll
  for (int q = 0; q < 3; ++q) {
    lo[q] = lo_s[q];
    if (spans) *spans = *spans && halo_span_ok(lo[q], hi_s[q]);
    base[q] = slot_end;
    boxes[q] = halo_slots(lo[q], hi_s[q]) / 8;
    slot_end += 8 * boxes[q];
  }
  return slot_end;
}
// Word w of the tile's box bitmap: the byte flags 32w … 32w + 31 (each 0 or 1) as bits 0 … 31.
__device__ __forceinline__ uint32_t halo_box_bits(const uint8_t* flags, int w) {
  uint32_t bits = 0;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const uint4 q = reinterpret_cast<const uint4*>(flags + 32 * w)[i];
    const uint32_t x[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) bits |= ((x[j] | x[j] >> 7 | x[j] >> 14 | x[j] >> 21) & 0xFu) << (16 * i + 4 * j);
  }
  return bits;
}
// A position in a ring of N slots used round after round (the tile states, a barrier each): the slot and
// the parity of the round, the phase its barrier is waited for in.
template <int N>
struct RingPos {
  int i = 0;
  uint32_t parity = 0;
  __device__ __forceinline__ void next() {
    if (++i == N) i = 0, parity ^= 1u;
  }
};
// A tile's box count from its bitmap words ({bits, boxes before} a word): the last word's.
__device__ __forceinline__ int halo_box_count(const uint2* words) {
  const uint2 last = words[kHaloBoxWords - 1];
  return static_cast<int>(last.y + __popc(last.x));
}
// The zero slots of a halo buffer (ZERO rows of 128 bytes, 16 bytes a store) by N threads: stores i, i + N, ….
template <int ZERO, int N>
__device__ __forceinline__ void zero_halo_slots(unsigned char* buf, int i) {
  if constexpr (N >= ZERO * 8) {  // one store a thread at most (the loop form moves the kernels' schedule)
    if (i < ZERO * 8) *reinterpret_cast<uint4*>(buf + 16 * i) = make_uint4(0, 0, 0, 0);
  } else {
    for (; i < ZERO * 8; i += N) *reinterpret_cast<uint4*>(buf + 16 * i) = make_uint4(0, 0, 0, 0);
  }
}
// A row's place in the tile's thirds: 8 · kHaloBoxSpan · g + v − lo (third g, whose lowest row is lo);
// its box is place / 8 over all three thirds.
__device__ __forceinline__ int halo_place(int g, int v, int lo) { return 8 * kHaloBoxSpan * g + v - lo; }
// The slot of the row at `place`, from the bitmap's words {bits, boxes before the word}.
__device__ __forceinline__ int halo_box_slot(const uint2* words, int place, int zero) {
  const uint2 w = words[place >> 8];
  return zero + 8 * static_cast<int>(w.y + __popc(w.x & ((1u << ((place >> 3) & 31)) - 1))) + (place & 7);
}

#ifdef FRUGAL_WGMMA
__device__ __forceinline__ void named_barrier_consumers() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(HaloPipe<64>::CONSUMERS) : "memory");
}
__device__ __forceinline__ void named_barrier_prologue() {
  asm volatile("bar.sync 2, %0;\n" ::"n"(HaloPipe<64>::PROLOGUE) : "memory");
}

__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int x, int y, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(bar)
      : "memory");
}

// A tile's rows laid out by ranges into the halo buffer at shared address dst, channels x0 … x0 + 63:
// range q's boxes[q] boxes of 8 rows, from row lo[q], at slots base[q] …, as boxes[q] / 8 copies of 64
// rows (map64) and then the rest of 8 (map8), a copy a lane of the calling warp (lane), completing on bar.
__device__ __forceinline__ void copy_ranges(uint32_t dst, const CUtensorMap* map8, const CUtensorMap* map64, int x0,
                                            const int (&lo)[3], const int (&base)[3], const int (&boxes)[3],
                                            uint32_t bar, int lane) {
#pragma unroll
  for (int q = 0; q < 3; ++q) {
    const int big = boxes[q] / 8, ops = big + boxes[q] % 8;
    for (int x = lane; x < ops; x += 32) {
      const int first = x < big ? 64 * x : 64 * big + 8 * (x - big);
      tma_load_2d(dst + (base[q] + first) * 128, x < big ? map64 : map8, x0, lo[q] + first, bar);
    }
  }
}
// A tile's rows laid out by boxes, the part of bitmap word i (w = {bits, boxes before}; the word covers
// 256 rows of its third g, from row lo[g] + 256 · (i % (kHaloBoxSpan / 32))): each run of its boxes as
// copies of 64 rows (map64) while 8 boxes are left, then of 8 (map8), into the halo buffer at shared
// address dst, channels x0 … x0 + 63, completing on bar.
__device__ __forceinline__ void copy_boxes(uint32_t dst, const CUtensorMap* map8, const CUtensorMap* map64, int x0,
                                           uint2 w, int i, const int (&lo)[3], int zero, uint32_t bar) {
  const int g = i / (kHaloBoxSpan / 32);
  const int row0 = (g == 0 ? lo[0] : (g == 1 ? lo[1] : lo[2])) + 256 * (i % (kHaloBoxSpan / 32));
  for (uint32_t m = w.x; m;) {
    const int s = __ffs(m) - 1, len = __ffsll(~static_cast<uint64_t>(m >> s)) - 1;  // a run of boxes
    const int slot = zero + 8 * static_cast<int>(w.y + __popc(w.x & ((1u << s) - 1)));
    for (int x = 0; x < len;) {
      const bool big = len - x >= 8;
      tma_load_2d(dst + (slot + 8 * x) * 128, big ? map64 : map8, x0, row0 + 8 * (s + x), bar);
      x += big ? 8 : 1;
    }
    m = len >= 32 ? 0u : m & ~(((1u << len) - 1) << s);
  }
}
#endif  // FRUGAL_WGMMA

template <typename T, int BN, int PASSES>
__global__ void __launch_bounds__(HaloPipe<BN>::THREADS, 1)
    kernel_conv_halo_pipe(const __grid_constant__ CUtensorMap wmap, const __grid_constant__ CUtensorMap fmap,
                          const __grid_constant__ CUtensorMap fmap64, Params p) {
#ifdef FRUGAL_WGMMA
  using H = HaloPipe<BN, PASSES>;
  constexpr int BM = H::BM, STAGES = H::STAGES, CONSUMERS = H::CONSUMERS, PRO = H::PROLOGUE, CAP = H::CAP,
                ZERO = H::ZERO;
  extern __shared__ unsigned char smem_raw[];
  constexpr int STATES = H::STATES;
  constexpr bool kCopy = H::kCopyWarp;
  __shared__ int32_t row_s[STATES][BM];
  __shared__ int8_t act_s[STATES][kMaxMaskedOffsets];
  __shared__ int act_count[STATES], range_lo[STATES][3], range_hi[STATES][3];
  __shared__ uint32_t any_s[STATES];
  __shared__ int64_t next_s;  // the prologue's next tile, claimed from the launch's tile counter
  // A tile's box bitmap, {bits, boxes before} a word: the tile being laid out (and, kCopy, a state's, for
  // the copy warp), and its byte flags while it is laid out (kCopy: not in the buffer, which is not free yet).
  __shared__ uint2 box_words[kCopy ? STATES : 1][kHaloBoxWords];
  __shared__ alignas(16) uint8_t flags_s[kCopy ? 3 * kHaloBoxSpan : 16];
  __shared__ int8_t by_boxes_s[STATES];
  __shared__ alignas(8) uint64_t full_s[STAGES], empty_s[STAGES], meta_s[2], halo_s[2], free_s[2];
  // kCopy, a barrier pair a tile state: ready (every prologue thread has laid the state out: its offsets,
  // slots and rows, or the end) and state-free (the 8 consumer warps and the weight warp are done with it).
  __shared__ alignas(8) uint64_t ready_s[kCopy ? STATES : 1], sfree_s[kCopy ? STATES : 1];
  const uint32_t raw_addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  unsigned char* smem = smem_raw + ((1024 - (raw_addr & 1023)) & 1023);
  const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t full0 = static_cast<uint32_t>(__cvta_generic_to_shared(full_s));
  const uint32_t empty0 = static_cast<uint32_t>(__cvta_generic_to_shared(empty_s));
  const uint32_t meta0 = static_cast<uint32_t>(__cvta_generic_to_shared(meta_s));
  const uint32_t halo_bar0 = static_cast<uint32_t>(__cvta_generic_to_shared(halo_s));
  const uint32_t free0 = static_cast<uint32_t>(__cvta_generic_to_shared(free_s));
  const uint32_t ready0 = static_cast<uint32_t>(__cvta_generic_to_shared(ready_s));
  const uint32_t sfree0 = static_cast<uint32_t>(__cvta_generic_to_shared(sfree_s));
  // The tile states' slot areas first, then the prologue's map slice (or none): with the slot areas after
  // a 27-offset map slice, the consumers' loop compiles with its control off the uniform datapath (12
  // branches in it) and runs slower.
  uint16_t* slots0 = reinterpret_cast<uint16_t*>(smem + STAGES * H::B_STAGE);
  int32_t* map_s = reinterpret_cast<int32_t*>(smem + STAGES * H::B_STAGE + STATES * H::SLOTS * 2);
  constexpr uint32_t kHalo0 = H::FIXED - 1024;  // the halo buffers' offset from smem
  unsigned char* halo0 = smem + kHalo0;  // buffer b at halo0 + b · HALO; slot s at + 128 s
  const uint32_t halo_addr0 = sbase + kHalo0;
  const int64_t tiles = (p.rows + BM - 1) / BM;
  const int tid = threadIdx.x, lane = tid % 32;
  // Units: pass h of the j-th tile kept is unit u = j · PASSES + h, in halo buffer u % 2; a tile's own
  // state (its offsets, rows, slots: index j % 2) serves all its passes. (PASSES = ⌈Ci / 64⌉ is a
  // template parameter: as a runtime value the one-pass kernel measured 5% slower at C = 64.)
  static_assert(PASSES >= 1 && PASSES <= kHaloPasses, "Ci ≤ 64 · kHaloPasses");
  constexpr bool kBoxes = halo_by_boxes(64 * PASSES, BN);  // tiles that do not fit by ranges, by boxes
  if (tid == 0) {
    for (int i = 0; i < STAGES; ++i) {
      mbar_init(full0 + 8 * i, 1);  // + the weight slice's bytes
      mbar_init(empty0 + 8 * i, CONSUMERS / 32);
    }
    for (int b = 0; b < 2; ++b) {
      mbar_init(meta0 + 8 * b, PRO);
      mbar_init(halo_bar0 + 8 * b, kCopy ? 32 : 1);  // + the rows' bytes (kCopy: every lane of the copy warp)
      mbar_init(free0 + 8 * b, kCopy ? CONSUMERS : CONSUMERS / 32 + 1);  // kCopy: every consumer thread
    }
    if constexpr (kCopy)
      for (int i = 0; i < STATES; ++i) {
        mbar_init(ready0 + 8 * i, PRO);  // every prologue thread, after its slot entries
        mbar_init(sfree0 + 8 * i, CONSUMERS / 32 + 1);
      }
    fence_mbarrier_init();
  }
  grid_launch_dependents();  // the hand-off kernel may take each multiprocessor this kernel leaves
  for (int i = tid; i < 2 * ZERO * 8; i += H::THREADS)  // the zero slots of both buffers
    *reinterpret_cast<uint4*>(halo0 + (i / (ZERO * 8)) * H::HALO + (i % (ZERO * 8)) * 16) = make_uint4(0, 0, 0, 0);
  __syncthreads();

  if (tid >= CONSUMERS && tid < CONSUMERS + PRO) {  // ---- the prologue warps: tile j's map slice, ranges, slots and rows
    if constexpr (H::REG_PROLOGUE > 128)
      setmaxnreg_inc<H::REG_PROLOGUE>();
    else
      setmaxnreg_dec<H::REG_PROLOGUE>();
    const int pt = tid - CONSUMERS;
    // Tile t's map slice, this thread's row: into map_s, one 4-byte copy an offset (the rows of a warp
    // are consecutive: 128 bytes a copy instruction), all in flight at once and no register held; or
    // (H::kMapInRegisters) into nx, one load an offset.
    [[maybe_unused]] int32_t nx[kMaxMaskedOffsets];
    auto fetch_map = [&](int64_t t) {
      const int64_t t0 = t * BM;
      const bool in = t0 + pt < p.rows;
      const int64_t row = in ? (p.perm ? __ldg(&p.perm[t0 + pt]) : p.row_begin + t0 + pt) : 0;
      if constexpr (H::kMapInRegisters) {
#pragma unroll
        for (int k = 0; k < kMaxMaskedOffsets; ++k) nx[k] = in && k < p.k ? __ldg(p.nbr + k * p.n + row) : 0;
      } else {
        if (in)
          for (int k = 0; k < p.k; ++k) cp_async4(map_s + k * BM + pt, p.nbr + k * p.n + row);
        cp_async_commit();
      }
    };
    if constexpr (!H::kMapInRegisters) fetch_map(blockIdx.x);
    int64_t j = 0;  // the tiles kept so far
    // Unit u's buffer (u % 2) is free: its last unit (u − 2) is done with. Waited for a tile's first unit
    // at the start of every tile, also one that is then handed off (the wait also frees the tile state
    // j % 2, whose last tile's units all precede u − 2): waited only once a tile is known to fit (and
    // with no barrier of the prologue's threads after it), racecheck reported the slot stores against
    // the last tile's reads.
    auto wait_free = [&](int64_t u) {
      if (u >= 2) mbar_wait(free0 + 8 * static_cast<int>(u & 1), static_cast<uint32_t>((u >> 1) - 1) & 1);
    };
    // The zero slots of buffer b (an epilogue staged over them), from this thread.
    auto zero_slots = [&](int b) {
      zero_halo_slots<ZERO, PRO>(halo0 + b * H::HALO, pt);
    };
    // The walk: tile blockIdx.x first, then the tiles claimed one at a time from the launch's counter
    // (gridDim.x + handoff_count[kTilesClaimed], the claims so far), each claimed at the top of the tile before it,
    // so that its map slice can be fetched a tile ahead; the blocks finish within about a tile of each
    // other. (A tile's sums do not depend on the block that runs it: the same output bits.)
    int64_t next = tiles;
    RingPos<STATES> sj;  // the kept tile's state, j % STATES, and the parity of its use, (j / STATES) & 1
    // kCopy: tile j's state is free once its last tile (j − STATES) is done with.
    auto wait_state = [&]() {
      if (j >= STATES) mbar_wait(sfree0 + 8 * sj.i, sj.parity ^ 1u);
    };
    for (int64_t t = blockIdx.x; t < tiles; t = next) {
      const unsigned claim = pt == 0 ? atomicAdd(p.handoff_count + kTilesClaimed, 1u) : 0u;  // (its value used in phase)
      const int sb = kCopy ? sj.i : static_cast<int>(j & 1);  // the tile's state
      const int64_t u0 = j * PASSES;                        // its first unit
      if constexpr (H::kMapInRegisters) fetch_map(t);
      if constexpr (kCopy)
        wait_state();
      else
        wait_free(u0);
      // The box flags, in the first unit's halo buffer after its zero slots (free: waited for above; its
      // rows are requested after the flags are read, behind the proxy fence below); kCopy: in static
      // shared memory (the buffer is not free yet).
      uint8_t* flags = kCopy ? flags_s : halo0 + (u0 & 1) * H::HALO + ZERO * 128;
      uint2* box_word = box_words[kCopy ? sb : 0];
      if (pt == 0) {
        any_s[sb] = 0;
        for (int q = 0; q < 3; ++q) range_lo[sb][q] = INT32_MAX, range_hi[sb][q] = -1;
      }
      named_barrier_prologue();  // (racecheck reports the flags' zeroing against the buffer's last reads without it)
      if constexpr (kBoxes)
        for (int i = pt; i < 3 * kHaloBoxSpan / 4; i += PRO) reinterpret_cast<uint32_t*>(flags)[i] = 0;
      const int64_t t0 = t * BM;
      uint32_t any = 0;
      int lo[3] = {INT32_MAX, INT32_MAX, INT32_MAX}, hi[3] = {-1, -1, -1};
      const int r = pt;  // this thread's row of the tile
      const bool live = t0 + r < p.rows;
      const int64_t row = live ? (p.perm ? __ldg(&p.perm[t0 + r]) : p.row_begin + t0 + r) : -1;
      int base[3] = {}, boxes[3] = {};  // by ranges: range q's rows lo[q] … at slots base[q] …, boxes[q] of 8 rows
      int total = 0;                  // by boxes: the tile's boxes
      bool in_halo = false, by_boxes = false;
      // Pass h's rows (channels 64·h …) into unit u0 + h's buffer, by the first prologue warp: by ranges
      // a copy a lane (64 rows, then 8), by boxes lane w the runs of bitmap word w's boxes (the same slots
      // for every pass). The offsets are listed once, for every pass. (Requesting the first pass's rows
      // before the slot entries, as soon as the layout is known, measured no faster.)
      auto request_rows = [&](int h) {
        const int b = static_cast<int>((u0 + h) & 1);
        const uint32_t bar = halo_bar0 + 8 * b;
        if (pt == 0) {
          if (h == 0) act_count[sb] = list_offsets(any_s[sb], 0, p.k, act_s[sb]);
          mbar_arrive_expect_tx(bar, 1024 * (by_boxes ? total : boxes[0] + boxes[1] + boxes[2]));
        }
        __syncwarp();
        if (kBoxes && by_boxes) {
          if (pt < kHaloBoxWords)  // lane w: the runs of word w's boxes
            copy_boxes(halo_addr0 + b * static_cast<uint32_t>(H::HALO), &fmap, &fmap64, H::BK * h, box_word[pt], pt, lo,
                       ZERO, bar);
        } else {
          copy_ranges(halo_addr0 + b * static_cast<uint32_t>(H::HALO), &fmap, &fmap64, H::BK * h, lo, base, boxes, bar,
                      pt);
        }
      };
      // The map phase and the slot entries, with the offsets' groups known at compile time where K is
      // 27 (KC = 27; KC = 0: any K ≤ kMaxMaskedOffsets) and no branch per entry.
      auto phase = [&](auto kc) {
        constexpr int KC = decltype(kc)::value, KN = KC ? KC : kMaxMaskedOffsets;
        const int kcount = KC ? KC : p.k, per = KC ? (KC + 2) / 3 : (p.k + 2) / 3;
        const int n32 = static_cast<int>(p.n);  // n < INT32_MAX (checked by the API): the absent mark is an int32
        int32_t v[KN];
        if constexpr (H::kMapInRegisters) {
#pragma unroll
          for (int k = 0; k < KN; ++k) v[k] = live && k < kcount ? nx[k] : n32;
        } else {
          cp_async_wait<0>();
          named_barrier_prologue();  // every thread's copies of the slice have landed
#pragma unroll
          for (int k = 0; k < KN; ++k) v[k] = live && k < kcount ? map_s[k * BM + r] : n32;
        }
        int badk = kMaxMaskedOffsets;
#pragma unroll
        for (int k = 0; k < KN; ++k) {
          const bool ok = static_cast<unsigned>(v[k]) < static_cast<unsigned>(n32);
          badk = !ok && v[k] != n32 ? min(badk, k) : badk;
          v[k] = ok ? v[k] : -1;
          any |= static_cast<uint32_t>(ok) << k;
          const int g = offset_third(k, per);
#pragma unroll
          for (int q = 0; q < 3; ++q)
            if (g == q) lo[q] = min(lo[q], ok ? v[k] : INT32_MAX), hi[q] = max(hi[q], v[k]);
        }
        if (badk < kMaxMaskedOffsets && p.bad) atomicMin(p.bad, static_cast<unsigned long long>(badk * p.n + row));
        any = __reduce_or_sync(0xffffffffu, any);
#pragma unroll
        for (int q = 0; q < 3; ++q)
          lo[q] = __reduce_min_sync(0xffffffffu, lo[q]), hi[q] = __reduce_max_sync(0xffffffffu, hi[q]);
        if (lane == 0) {
          atomicOr(&any_s[sb], any);
          for (int q = 0; q < 3; ++q) atomicMin(&range_lo[sb][q], lo[q]), atomicMax(&range_hi[sb][q], hi[q]);
        }
        if (pt == 0) next_s = gridDim.x + static_cast<int64_t>(claim);
        named_barrier_prologue();
        next = next_s;  // (read before the tile's later barriers: thread 0 writes it again only after them)
        if constexpr (!H::kMapInRegisters)
          if (next < tiles) fetch_map(next);  // every thread has read this slice (the barrier above)
        // The layout: by ranges where they fit (most tiles of a shell in the map's order: the cheaper
        // layout), else (kBoxes) by boxes where those fit.
        bool spans = true;
        const int slot_end = range_layout(range_lo[sb], range_hi[sb], ZERO, lo, base, boxes, &spans);
        in_halo = slot_end <= ZERO + CAP;
        by_boxes = kBoxes && !in_halo && spans;
        uint16_t* slot = slots0 + sb * H::SLOTS;
        if (by_boxes) {
          // This thread's boxes flagged, and its entries' places (< 6,144; 0xffff: absent) kept as
          // provisional slot entries, so that no entry is held in a register past here.
#pragma unroll
          for (int k = 0; k < KN; ++k) {
            const int g = offset_third(k, per), lg = g == 0 ? lo[0] : (g == 1 ? lo[1] : lo[2]);
            if (k < kcount) {
              const int place = halo_place(g, v[k], lg);
              if (v[k] >= 0) flags[place >> 3] = 1;
              slot[k * BM + r] = static_cast<uint16_t>(v[k] >= 0 ? place : 0xffff);
            }
          }
          named_barrier_prologue();
          if (pt < 32) {  // the bitmap's words and the boxes before each (an exclusive scan of their counts)
            const uint32_t bits = pt < kHaloBoxWords ? halo_box_bits(flags, pt) : 0u;
            const int c = __popc(bits);
            int before = c;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
              const int y = __shfl_up_sync(0xffffffffu, before, o);
              before += pt >= o ? y : 0;
            }
            if (pt < kHaloBoxWords) box_word[pt] = make_uint2(bits, static_cast<uint32_t>(before - c));
          }
          named_barrier_prologue();
          total = halo_box_count(box_word);
          in_halo = 8 * total <= CAP;
        }
        if (in_halo) {  // the rows; the slot entries
          row_s[sb][r] = static_cast<int32_t>(row);
          const int d[3] = {base[0] - lo[0], base[1] - lo[1], base[2] - lo[2]};  // by ranges: slot = v + d[g]
          // An absent neighbour reads one of the zero slots 0–7: the one whose swizzle phase (slot % 8)
          // no present row of its group of 8 tile rows has for that offset. The group is what one
          // ldmatrix matrix reads, and two distinct slots of one phase there cost a second wavefront (a
          // free phase brings the loop's ldmatrix close to its ideal wavefronts). The 8 lanes of a group
          // are the group's rows; their phases are OR-ed by shuffles, four offsets a word.
          auto entries = [&](auto slot_of) {
#pragma unroll
            for (int k0 = 0; k0 < KN; k0 += 4) {
              int e[4];
              uint32_t used = 0;
#pragma unroll
              for (int i = 0; i < 4; ++i) {
                e[i] = k0 + i < KN && k0 + i < kcount ? slot_of(k0 + i) : -1;
                used |= e[i] >= 0 ? 1u << (8 * i + (e[i] & 7)) : 0u;
              }
              used |= __shfl_xor_sync(0xffffffffu, used, 1);
              used |= __shfl_xor_sync(0xffffffffu, used, 2);
              used |= __shfl_xor_sync(0xffffffffu, used, 4);
#pragma unroll
              for (int i = 0; i < 4; ++i)
                if (k0 + i < KN && k0 + i < kcount)
                  slot[(k0 + i) * BM + r] =
                      static_cast<uint16_t>(e[i] >= 0 ? e[i] : (__ffs(~(used >> 8 * i)) - 1) & (ZERO - 1));
            }
          };
          if (by_boxes)  // from this thread's provisional entries
            entries([&](int k) {
              const int x = slot[k * BM + r];
              return x != 0xffff ? halo_box_slot(box_word, x, ZERO) : -1;
            });
          else
            entries([&](int k) {
              const int kv = k < KN ? k : KN - 1, g = offset_third(k, per);
              return v[kv] >= 0 ? v[kv] + (g == 0 ? d[0] : (g == 1 ? d[1] : d[2])) : -1;
            });
          if constexpr (!kCopy) zero_slots(static_cast<int>(u0 & 1));
        }
      };
      if (p.k == 27)
        phase(std::integral_constant<int, 27>{});
      else
        phase(std::integral_constant<int, 0>{});
      fence_proxy_async();       // this thread's writes into the buffer (zero slots, flags) before the copies there
      named_barrier_prologue();  // (also: every thread has read this tile's ranges)
      if (!in_halo) {            // handed off to kernel_conv_wgmma_ws, which runs after this kernel
        if (pt == 0) p.handoff[atomicAdd(p.handoff_count + kListed, 1u)] = static_cast<int32_t>(t);
        continue;
      }
      if constexpr (kCopy) {  // the state is ready (every thread arrives after its entries); the copy warp
        // zeroes the buffer's zero slots and copies the rows once the buffer is free
        if (pt == 0) {
          act_count[sb] = list_offsets(any_s[sb], 0, p.k, act_s[sb]);
          by_boxes_s[sb] = by_boxes;
        }
        mbar_arrive(ready0 + 8 * sb);
        sj.next();
      } else {
        for (int h = 0; h < PASSES; ++h) {  // the passes' rows and their meta
          const int64_t u = u0 + h;
          const int b = static_cast<int>(u & 1);
          if (h > 0) {  // the first pass's buffer was waited for and zeroed above
            wait_free(u);
            named_barrier_prologue();  // (without it racecheck reports the zero slots' stores against the reads)
            zero_slots(b);
            fence_proxy_async();
            named_barrier_prologue();
          }
          if (pt < 32) request_rows(h);
          mbar_arrive(meta0 + 8 * b);
        }
      }
      ++j;
    }
    if (pt == 0) {  // this block's hand-offs are all listed
      __threadfence();
      atomicAdd(p.handoff_count + kListersDone, 1u);
    }
    // The end: a unit of no tile (act_count −1) in the next buffer (kCopy: the next tile state).
    if constexpr (kCopy) {
      wait_state();
      if (pt == 0) act_count[sj.i] = -1;
      mbar_arrive(ready0 + 8 * sj.i);
    } else {
      wait_free(j * PASSES);
      if (pt == 0) act_count[j & 1] = -1;
      mbar_arrive(meta0 + 8 * static_cast<int>((j * PASSES) & 1));
    }
  } else if (tid >= CONSUMERS) {  // ---- the weight warp: each step's slice, in tile order
    setmaxnreg_dec<H::REG_WEIGHT>();
    if (kCopy && tid >= CONSUMERS + PRO + 32 && tid < CONSUMERS + PRO + 64) {
      // ---- the copy warp (kCopy): for each kept tile, once its state is ready and its buffer free, the
      // zero slots and the rows' copies (the layout by ranges, from the state's ranges). Every lane arrives
      // on the halo barrier, lane 0 with the bytes (each writer its own arrival: racecheck follows no
      // other edge; the consumers all arrive on free for the same reason).
      RingPos<STATES> rs;  // the tile's state
      for (int64_t u = 0;; ++u) {
        const int b = static_cast<int>(u & 1), s = rs.i;
        mbar_wait(ready0 + 8 * s, rs.parity);
        if (act_count[s] < 0) break;
        if (u >= 2) mbar_wait(free0 + 8 * b, static_cast<uint32_t>((u >> 1) - 1) & 1);
        zero_halo_slots<ZERO, 32>(halo0 + b * H::HALO, lane);
        int lo[3], base[3], boxes[3];  // the prologue's layout of the tile, again from its ranges
        range_layout(range_lo[s], range_hi[s], ZERO, lo, base, boxes);
        const bool by_boxes = by_boxes_s[s];
        const uint2* words = box_words[kCopy ? s : 0];  // (kCopy: this code runs only there)
        const int total = by_boxes ? halo_box_count(words) : boxes[0] + boxes[1] + boxes[2];
        fence_proxy_async();
        __syncwarp();
        const uint32_t bar = halo_bar0 + 8 * b, dst = halo_addr0 + b * static_cast<uint32_t>(H::HALO);
        if (lane == 0)
          mbar_arrive_expect_tx(bar, 1024 * total);
        else
          mbar_arrive(bar);
        __syncwarp();
        if (!by_boxes) {
          copy_ranges(dst, &fmap, &fmap64, 0, lo, base, boxes, bar, lane);
        } else if (lane < kHaloBoxWords) {  // lane w: the runs of word w's boxes
          copy_boxes(dst, &fmap, &fmap64, 0, words[lane], lane, lo, ZERO, bar);
        }
        rs.next();
      }
      return;
    }
    if (tid >= CONSUMERS + PRO + 32) return;  // the warpgroup's other warps
    if (lane == 0) {
      uint32_t g = 0, st = 0, ph = 0;  // steps issued; the ring's stage and phase (3 stages, below)
      uint32_t full_r = full0, empty_r = empty0;  // held in registers (the consumers' comment)
      asm volatile("" : "+r"(full_r), "+r"(empty_r));
      RingPos<STATES> rs;  // kCopy: the tile's state
      for (int64_t u = 0;; ++u) {
        const int b = static_cast<int>(u & 1), sb = kCopy ? rs.i : static_cast<int>((u / PASSES) & 1);
        const int c0 = H::BK * static_cast<int>(u % PASSES);  // the pass's weight rows
        if constexpr (kCopy)
          mbar_wait(ready0 + 8 * sb, rs.parity);
        else
          mbar_wait(meta0 + 8 * b, static_cast<uint32_t>(u >> 1) & 1);
        const int steps = act_count[sb];
        if (steps < 0) break;
        for (int s = 0; s < steps; ++s, ++g) {
          // The stage and phase from the step count where STAGES is a power of two (BN = 64: a mask and a
          // shift, and ptxas unrolls the loop by the ring's stages), else as counters advanced a step at a
          // time (BN = 128, 3 stages: the division is a multiply-high chain on the path from a freed stage
          // to the next 16 KB copy). Each measured the faster where it is used.
          constexpr bool kCounters = (STAGES & (STAGES - 1)) != 0;
          const uint32_t stage = kCounters ? st : g % STAGES, phase = kCounters ? ph : (g / STAGES) & 1;
          const uint32_t dst = sbase + stage * H::B_STAGE;
          if (g >= STAGES) mbar_wait(empty_r + 8 * stage, phase ^ 1u);
          mbar_arrive_expect_tx(full_r + 8 * stage, H::B_STAGE);
#pragma unroll
          for (int n = 0; n < BN / 64; ++n)
            tma_load_3d(dst + n * 8192, &wmap, 64 * n, c0, act_s[sb][s], full_r + 8 * stage);
          if (++st == STAGES) st = 0, ph ^= 1u;
        }
        if constexpr (kCopy) {  // (one pass: the tile's last unit)
          mbar_arrive(sfree0 + 8 * sb);
          rs.next();
        } else {
          mbar_arrive(free0 + 8 * b);
        }
      }
    }
    __syncwarp();
  } else {  // ---- the consumers
    setmaxnreg_inc<H::REG_CONSUMER>();
    const int warp = tid / 32, lrow = (warp / 4) * 64 + (warp % 4) * 16 + lane % 16, half = lane / 16;
    uint32_t st = 0, ph = 0;  // the weight ring's stage and phase, carried from unit to unit
    // The ring's barrier addresses and the shared window's base (the descriptors' and the rows'
    // addresses come from it), held in registers: left as they are, the compiler rebuilds them every
    // step (S2UR of the CTA's cluster id, then a dependent ULEA). Held, with each step's offset read two
    // steps ahead (load_a), the one-pass kernel is faster; at BN = 128, two passes, its four m64n128
    // wgmmas a step hide the chain either way.
    uint32_t full_r = full0, empty_r = empty0, sbase_r = sbase;
    asm volatile("" : "+r"(full_r), "+r"(empty_r), "+r"(sbase_r));
    using DW = SmemDesc<8192, 1024>;
    const uint32_t desc0_lo = DW::kLo | ((sbase_r >> 4) & 0x3fff);  // the first weight stage's low word
    float acc[BN / 2];
    RingPos<STATES> rs;  // kCopy: the tile's state
    for (int64_t u = 0;; ++u) {
      const int b = static_cast<int>(u & 1), sb = kCopy ? rs.i : static_cast<int>((u / PASSES) & 1);
      const int h = static_cast<int>(u % PASSES);
      const uint32_t parity = static_cast<uint32_t>(u >> 1) & 1;
      if constexpr (kCopy)
        mbar_wait(ready0 + 8 * sb, rs.parity);
      else
        mbar_wait(meta0 + 8 * b, parity);
      const int steps = act_count[sb];
      if (steps < 0) break;
      const int8_t* act = act_s[sb];
      unsigned char* halo = halo0 + b * H::HALO;
      const uint32_t halo_r = sbase_r + kHalo0 + b * static_cast<uint32_t>(H::HALO);  // its shared address
      const uint16_t* slot = slots0 + sb * H::SLOTS;
      mbar_wait(halo_bar0 + 8 * b, parity);
      if (h == 0) {
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
      }
      int e_next = steps > 0 ? slot[act[0] * BM + lrow] : 0;
      int k_next = steps > 1 ? act[1] : 0;  // the offset of the step whose entry is read next
      auto load_a = [&](uint32_t(&f)[4][4], int s) {
        // The slot entry was read one step earlier, and its offset (act[]) one step before that: the
        // entry's address does not wait for a shared load, the ldmatrix not for the entry.
        const int e = e_next;
        if (s + 1 < steps) e_next = slot[k_next * BM + lrow];
        if (s + 2 < steps) k_next = act[s + 2];
        const uint32_t row = halo_r + e * 128;
        const int phase = e & 7;
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) ldmatrix_x4(f[kk], row + (((kk * 2 + half) ^ phase) << 4));
      };
      // The weight ring's stage and phase advance a step at a time (no division in the loop), and a
      // stage's descriptors are the first stage's low word plus whole stages and 2 KB k-slices
      // (SmemDesc): the consumers' step is a chain of dependent instructions the tensor pipe waits on,
      // and the division and the descriptors built from addresses are off that chain.
      auto step = [&](int s, uint32_t(&cur)[4][4], uint32_t(&spare)[4][4]) {
        mbar_wait(full_r + 8 * st, ph);
        wgmma_fence();
        fence_acc(acc);
        fence_regs(cur);
        const uint32_t d = desc0_lo + st * (H::B_STAGE >> 4);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) wgmma_rs<T, BN>(acc, cur[kk], DW::with_lo(d + kk * (2048 >> 4)));
        fence_acc(acc);
        wgmma_commit();
        wgmma_wait<1>();
        fence_acc(acc);
        fence_regs(spare);
        if (s > 0 && lane == 0) mbar_arrive(empty_r + 8 * (st == 0 ? STAGES - 1 : st - 1));
        if (s + H::A_BUFFERS - 1 < steps) load_a(spare, s + H::A_BUFFERS - 1);
        st = st + 1 == STAGES ? 0 : st + 1;
        ph ^= st == 0 ? 1u : 0u;
      };
      // A_BUFFERS = 4 (BN = 64): step s loads step s + 3's fragments into the one step s − 1 used (free
      // after the wait above), so each ldmatrix is issued two steps before its wgmma and its latency
      // (bank conflicts included) is off the path from one step's wgmma to the next (two or three buffers
      // measured slower). Two at BN = 128: a third changes nothing there.
      constexpr int AB = H::A_BUFFERS;
      uint32_t a[AB][4][4];  // step s's fragments in a[s % AB]
#pragma unroll
      for (int i = 0; i + 1 < AB; ++i)
        if (i < steps) load_a(a[i], i);
      for (int s = 0; s < steps; s += AB) {
#pragma unroll
        for (int i = 0; i < AB; ++i)
          if (s + i < steps) step(s + i, a[i], a[(i + AB - 1) % AB]);
      }
      wgmma_wait<0>();
      fence_acc(acc);
#pragma unroll
      for (int i = 0; i < AB; ++i) fence_regs(a[i]);
      // The last step's stage (st has moved past it), released once its group is complete.
      if (steps > 0 && lane == 0) mbar_arrive(empty_r + 8 * (st == 0 ? STAGES - 1 : st - 1));
      if (h == PASSES - 1) {
        // The epilogue: bias, round, stage (after every consumer has stored the previous tile), store.
        T* cs = reinterpret_cast<T*>(halo);  // this unit's buffer: its rows are read (the barrier below)
        named_barrier_consumers();
        stage_acc<T, BN, 1>(p, acc, 0, (warp / 4) * 64 + (warp % 4) * 16 + lane / 4, lane, cs);
        named_barrier_consumers();
        store_staged_tile<T, BM, BN, H::LDC, CONSUMERS>(p, cs, row_s[sb], 0);
        fence_proxy_async();  // this thread's stores into the buffer (the staging) before later copies there
      }
      __syncwarp();
      if (kCopy || lane == 0) mbar_arrive(free0 + 8 * b);
      if constexpr (kCopy) {  // (one pass: the tile's last unit)
        if (lane == 0) mbar_arrive(sfree0 + 8 * sb);
        rs.next();
      }
    }
  }
#else
  __trap();  // never launched: the choice takes this kernel only where sm_90a code is loaded (DeviceCaps::sm90a)
#endif
}

// ---- which rows suit the pipelined halo kernel ----------------------------------------------------
// The configurations one probe launch measures (blockIdx.y picks one): each one's halo buffer rows,
// whether it lays tiles out by boxes, and its counter.
struct HaloProbes {
  int cap[2 * kHaloPasses];
  bool by_boxes[2 * kHaloPasses];
  unsigned* fits[2 * kHaloPasses];
};

// Block (b, c) looks at tile ⌊b · tiles / gridDim.x⌋ of the launch's rows (one thread a row) and counts it
// in *fits[c] when its three row ranges fit a halo buffer of cap[c] rows: the decision the kernel's
// prologue makes.
__global__ void __launch_bounds__(kTileRows) kernel_halo_probe(Params p, HaloProbes probes) {
  const int cap = probes.cap[blockIdx.y];
  const bool by_boxes = probes.by_boxes[blockIdx.y];
  unsigned* fits = probes.fits[blockIdx.y];
  __shared__ int lo_s[3], hi_s[3], boxes_s;
  __shared__ alignas(16) uint8_t flags[3 * kHaloBoxSpan];  // as the halo kernel lays a tile out by boxes
  const int r = threadIdx.x, lane = r % 32, per = (p.k + 2) / 3;
  const int64_t tiles = (p.rows + kTileRows - 1) / kTileRows, t0 = blockIdx.x * tiles / gridDim.x * kTileRows;
  if (r < 3) lo_s[r] = INT32_MAX, hi_s[r] = -1;
  if (r == 0) boxes_s = 0;
  for (int i = r; i < 3 * kHaloBoxSpan / 4; i += kTileRows) reinterpret_cast<uint32_t*>(flags)[i] = 0;
  __syncthreads();
  const bool live = t0 + r < p.rows;
  auto entry = [&](int k) {  // the entry, or −1 where absent (or past the map)
    const int32_t v = __ldg(&p.nbr[k * p.n + p.row_begin + t0 + r]);
    return v >= 0 && v < p.n ? v : -1;
  };
  int lo[3] = {INT32_MAX, INT32_MAX, INT32_MAX}, hi[3] = {-1, -1, -1};
  if (live)
    for (int k = 0; k < p.k; ++k) {
      const int32_t v = entry(k);
      const int g = offset_third(k, per);
#pragma unroll
      for (int q = 0; q < 3; ++q)
        if (v >= 0 && g == q) lo[q] = min(lo[q], v), hi[q] = max(hi[q], v);
    }
#pragma unroll
  for (int q = 0; q < 3; ++q) {
    lo[q] = __reduce_min_sync(0xffffffffu, lo[q]);
    hi[q] = __reduce_max_sync(0xffffffffu, hi[q]);
    if (lane == 0) atomicMin(&lo_s[q], lo[q]), atomicMax(&hi_s[q], hi[q]);
  }
  __syncthreads();
  const int ranges = halo_slots(lo_s[0], hi_s[0]) + halo_slots(lo_s[1], hi_s[1]) + halo_slots(lo_s[2], hi_s[2]);
  const bool boxes = by_boxes && ranges > cap,  // (a tile that fits by ranges fits by boxes)
      spans = halo_span_ok(lo_s[0], hi_s[0]) && halo_span_ok(lo_s[1], hi_s[1]) && halo_span_ok(lo_s[2], hi_s[2]);
  if (boxes && spans && live)
    for (int k = 0; k < p.k; ++k) {
      const int32_t v = entry(k);
      const int g = offset_third(k, per);
      if (v >= 0) flags[halo_place(g, v, lo_s[g]) >> 3] = 1;
    }
  __syncthreads();
  if (boxes && spans && r < kHaloBoxWords) atomicAdd(&boxes_s, __popc(halo_box_bits(flags, r)));
  __syncthreads();
  if (r == 0 && (ranges <= cap || (boxes && spans && 8 * boxes_s <= cap))) atomicAdd(fits, 1u);
}

template <typename T, int BN>
ConvVariant run_halo_pipe(const Params& p, DType dtype, cudaStream_t s) {
  using H = HaloPipe<BN>;
  CUtensorMap map, fmap, fmap64;
  if (weight_map<T>(p, &map) && feature_map<T>(p, &fmap) && feature_map<T>(p, &fmap64, 64)) {
    int device = 0;
    FRUGAL_CUDA_CHECK(cudaGetDevice(&device));
    const int sms = multiprocessor_count(device);
    const int64_t tiles = ceil_div<int64_t>(p.rows, H::BM);
    FRUGAL_CUDA_CHECK(cudaMemsetAsync(p.handoff_count, 0, kHandoffWords * sizeof(unsigned), s));
    const auto blocks = static_cast<unsigned>(std::min<int64_t>(tiles, sms));
    const bool one = halo_passes(p.ci) == 1;
    const auto kernel = one ? kernel_conv_halo_pipe<T, BN, 1> : kernel_conv_halo_pipe<T, BN, 2>;
    const size_t smem = one ? HaloPipe<BN, 1>::SMEM : HaloPipe<BN, 2>::SMEM;
    allow_dynamic_smem(reinterpret_cast<const void*>(kernel), static_cast<int>(smem));
    kernel<<<blocks, H::THREADS, smem, s>>>(map, fmap, fmap64, p);
    FRUGAL_CUDA_CHECK_LAUNCH();
    // The tiles it left, through the warp-specialized kernel (two blocks a multiprocessor at BN = 64),
    // launched as a programmatic dependent so that it runs on the multiprocessors the halo kernel's
    // blocks leave as they finish (its tiles are known before its last products are).
    Params left = p;
    left.handoff_blocks = blocks;
    launch_handoff(left, dtype, BN, map, s);
    return ConvVariant::halo_pipe;
  }
  // No tensor maps: the kernel it hands its tiles to, over all of them.
  return launch_wgmma(p, dtype, BN == 64 ? ConvVariant::wgmma_ws2 : ConvVariant::wgmma_ws, BN, kTileRows, 1, s);
}

// The rows a halo buffer holds for p's channels (its kernel: BN, passes).
int halo_pipe_cap(int bn, int64_t ci) {
  const bool one = halo_passes(ci) == 1;
  return bn == 64 ? (one ? HaloPipe<64, 1>::CAP : HaloPipe<64, 2>::CAP)
                  : (one ? HaloPipe<128, 1>::CAP : HaloPipe<128, 2>::CAP);
}

}  // namespace

// The probe of a whole map: for each configuration (column tile 64 or 128, one or two passes), the
// fitting sample tiles of halo buffers of its rows, laid out as its kernel lays them out.
void launch_halo_probes(const int32_t* nbr, int64_t n, int k, unsigned* fits, cudaStream_t s) {
  Params p{{nullptr, nbr, nullptr, nullptr, nullptr, nullptr, n, k, 0, 0, 0, nullptr}, nullptr, 0, n};
  const auto samples = static_cast<unsigned>(spconv::halo_samples(n));
  HaloProbes probes{};
  for (int t = 0; t < 2; ++t)
    for (int passes = 1; passes <= kHaloPasses; ++passes) {
      const int bn = t ? 128 : 64, ci = spconv::kHaloChannels * passes, c = kHaloPasses * t + passes - 1;
      probes.cap[c] = halo_pipe_cap(bn, ci);
      probes.by_boxes[c] = halo_by_boxes(ci, bn);
      probes.fits[c] = fits + c;
    }
  kernel_halo_probe<<<dim3(samples, 2 * kHaloPasses), kTileRows, 0, s>>>(p, probes);
  FRUGAL_CUDA_CHECK_LAUNCH();
}

ConvVariant launch_halo_pipe(const Params& p, DType dtype, int tile_co, cudaStream_t s) {
  auto run = [&]<typename T>() {
    return tile_co == 64 ? run_halo_pipe<T, 64>(p, dtype, s) : run_halo_pipe<T, 128>(p, dtype, s);
  };
  return dtype == DType::f16 ? run.template operator()<__half>() : run.template operator()<__nv_bfloat16>();
}

}  // namespace frugal::cuda::spconv_kernels
