// The wgmma conv kernels (sm_90a): implicit GEMM through Hopper's asynchronous warpgroup MMA over the
// masked kernels' row order (sorted by neighbor mask or the map's own; conv.cu sorts and calls
// launch_wgmma a launch at a time). Floor: per tile, K·BM map entries, for each offset some row has BM
// gathered rows and a Ci × BN weight slice, and BM·BN outputs written once; 2·N·Ci·Co per present offset
// of a row in tensor-core FLOPs.
//
// Why: the mma.sync kernel is latency-bound at one block of 8 warps a multiprocessor; wgmma reads both
// operands from shared memory and runs asynchronously, so the threads that issue it spend no issue
// slots on ldmatrix or per-fragment mmas and compute the next gathers meanwhile (2× the mma kernel at
// R = 1024, C = 256; docs/performance.md, "Sparse conv").
//
// A block owns 128 rows × BN output channels (BN = 64, 128, 256) as two warpgroups of 64 rows; each
// warpgroup issues one m64nBNk16 wgmma per 16-deep slice. The prologue reads the tile's map slice into
// shared memory (and checks it). The main loop runs over the offsets some row of the tile has × Ci in
// chunks of 64: a cp.async pipeline (zero fill for absent neighbors) gathers the neighbor rows into a
// 128-byte-swizzled K-major A tile and the weight slice into a 128-byte-swizzled N-major B tile (the
// weight's own layout: [K, Ci, Co], Co contiguous). AHEAD steps of gathers are in flight ahead of the
// wgmma, and PENDING wgmma groups stay in flight across the next step's barrier. The epilogue adds the
// bias, stages the tile in shared memory and writes each output row once with 16-byte stores; no
// atomics touch the output, and each element's sum runs in a fixed order (offsets ascending, then Ci),
// so results are bitwise reproducible (and bitwise equal to the mma kernel's).
//
// Two kernels share that tile, map prologue and epilogue: kernel_conv_wgmma, where every warp both
// gathers and multiplies (steps separated by block barriers), and kernel_conv_wgmma_ws, where a
// producer warpgroup gathers (and the copy engine brings the weights) while two consumer warpgroups
// multiply, synchronized by mbarriers. Both sum every element in the same order: bitwise equal outputs.
// kernel_conv_wgmma_ws's hand-off instance runs the tiles the pipelined halo kernel (halo_pipe.cu)
// leaves.
//
// Split launches (small grids): blockIdx.y = j of S sums only the offsets [K·j/S, K·(j+1)/S) and
// writes f32 partials; kernel_finish_split adds them in split order, plus the bias.
//
// Every target but sm_90a (sm_80 … sm_120) compiles the kernels to a trap; the choice (arch_of:
// Arch::sm90a, DeviceCaps::sm90a) never takes them where that code is the one loaded.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
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

#ifdef FRUGAL_WGMMA
// An acquiring load (gpu scope): what the halo kernel's blocks published before their count is seen.
__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// One step's multiply for warpgroup wg, which owns MB blocks of 64 rows (rows 64·MB·wg ..
// 64·MB·(wg + 1) − 1 of the tile; block j's accumulators at acc[j · BN/2 ..]): the BK/16 × MB wgmmas
// of its A rows against the stage's B slice (both 128-byte swizzled, at shared address `stage`),
// committed as one group.
template <typename T, typename Tile, int MB = 1>
__device__ __forceinline__ void wgmma_step(float (&acc)[MB * Tile::BN / 2], uint32_t stage, int wg) {
  constexpr int R = Tile::BN / 2;
  wgmma_fence();
  fence_acc(acc);
  using DB = SmemDesc<8192, 1024>;
  using DA = SmemDesc<16, 1024>;
  const uint32_t s4 = stage >> 4, a4 = s4 + DA::kLo + wg * MB * (64 * 128 / 16);
#pragma unroll
  for (int kk = 0; kk < Tile::BK / 16; ++kk) {
    const uint64_t db = DB::with_lo(s4 + DB::kLo + (Tile::A_STAGE + kk * 2048) / 16);
#pragma unroll
    for (int j = 0; j < MB; ++j) {
      const uint64_t da = DA::with_lo(a4 + (j * 64 * 128 + kk * 32) / 16);
      wgmma_ss<T, Tile::BN>(*reinterpret_cast<float(*)[R]>(acc + j * R), da, db);
    }
  }
  fence_acc(acc);
  wgmma_commit();
}
#endif  // FRUGAL_WGMMA

// ---- the conv ------------------------------------------------------------------------------------

// BM = 128 (or 256) rows × BN channels × 64 input channels a step, one warpgroup (128 threads) per
// 64 rows. The A stage is BM rows of 128 bytes, 16-byte chunk c of row r at chunk c ^ (r % 8) (the
// 128-byte swizzle: 8-row atoms of 1 KB, consecutive); the B stage is (BN / 64) × 8 atoms of 8
// Ci-rows × 64 channels, atom (n, k) at (8n + k) KB, chunk c of row r at chunk c ^ (r % 8). The map
// slice (nb) follows the stages in dynamic shared memory, K × BM × 4 bytes. The pipeline of each
// 128-row tile is the fastest measured for its width (docs/performance.md, "Sparse conv"):
//   BN = 256: 48 KB a stage, 4 stages (192 KB), one block; 2 gather steps ahead, 1 wgmma group in
//             flight past the barrier (none in flight drains the tensor pipe every step);
//   BN = 128: 32 KB, 3 stages (96 KB), two blocks (2 × (96 + 1 + 13.5 (nb, K = 27) + 0.6) KB of
//             the 228 KB); 2 ahead, none in flight;
//   BN =  64: 24 KB, 3 stages (72 KB), two blocks; 2 ahead, none in flight.
// 256-row tiles (BN = 64 or 128): each gathered weight slice serves twice the rows. 512 threads, one
// block (BN = 128: 4 × 48 KB + 27 KB of map slice at K = 27), 4 stages, 2 ahead, 1 group in flight (BN =
// 256's one-block pipeline). Fewer bytes from L2 buy little: one block a multiprocessor exposes each
// tile's prologue, pipeline fill and epilogue, which the second block of the 128-row tiles hides (the
// rules take them only where they measured faster: spconv_choose.cpp).
template <int BN_, int BM_ = kTileRows>
struct WgTile {
  static constexpr int BM = BM_, BN = BN_, BK = 64, THREADS = 2 * BM;  // one warpgroup per 64 rows
  static constexpr bool TALL = BM == 2 * kTileRows;
  static constexpr int STAGES = TALL || BN == 256 ? 4 : 3;
  static constexpr int PENDING = TALL || BN == 256 ? 1 : 0;
  static constexpr int AHEAD = STAGES - 1 - PENDING;
  static constexpr int MIN_BLOCKS = TALL || BN == 256 ? 1 : 2;
  static constexpr int A_STAGE = BM * BK * 2, B_STAGE = BK * BN * 2, STAGE = A_STAGE + B_STAGE;
  static constexpr size_t SMEM = size_t(STAGES) * STAGE + 1024;  // + slack to align the base to 1 KB; + nb
  static constexpr int LDC = BN + 8;
  static constexpr int A_COPIES = BM * BK / 8 / THREADS, B_COPIES = BK * BN / 8 / THREADS;
  static constexpr int A_RSTEP = THREADS / 8;  // A rows between a thread's copies
  static_assert(BM == kTileRows || (TALL && BN <= 128),
                "256-row tiles only up to 128 channels: 256 × 256 f32 accumulators exceed the register file");
  static_assert(BK * 2 == 128, "one A row is one 128-byte swizzle row");
  static_assert(A_STAGE % 1024 == 0 && B_STAGE % 1024 == 0, "every stage starts on a 1 KB swizzle atom");
  static_assert(THREADS % (BN / 8) == 0 && (THREADS / (BN / 8)) % 8 == 0, "fixed B chunk and row phase per thread");
  static_assert(A_RSTEP % 8 == 0, "fixed A row phase per thread");
  static_assert(size_t(BM) * LDC * 2 <= size_t(STAGES) * STAGE, "the epilogue staging reuses the stages");
  // The stages, the slack, the map slice at K = 32 and 2 KB of static shared memory in one block.
  static_assert(SMEM + size_t(kMaxMaskedOffsets) * BM * 4 + 2048 <= kMaxSmemPerBlock, "fits one block's shared memory");
};

// ---- the tile's epilogue (both kernels) -----------------------------------------------------------
// Threads without accumulators (has_acc false: the producers) only help store. Split: the f32 partial
// of this block, no bias, at [split, row - row_begin, channel]. Else bias, round, stage the tile in
// shared memory (the stages, which the caller has made free with a barrier; stage_acc), then one
// 16-byte store per 8 channels of a row.
template <typename T, int BM, int BN, int THREADS, int MB = 1>
__device__ __forceinline__ void tile_epilogue(const Params& p, const float (&acc)[MB * BN / 2], bool has_acc, int co0,
                                              const int32_t* row_s, unsigned char* smem) {
  constexpr int R = BN / 2, LDC = BN + 8;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int first = MB * (warp / 4) * 64 + (warp % 4) * 16 + lane / 4;  // block 0's first row
  if (p.part) {
    if (!has_acc) return;
    float* part = p.part + static_cast<int64_t>(blockIdx.y) * p.rows * p.co;
#pragma unroll
    for (int b = 0; b < MB; ++b) {
      const int32_t rows2[2] = {row_s[first + 64 * b], row_s[first + 64 * b + 8]};
#pragma unroll
      for (int j = 0; j < R; j += 4) {
        const int col = (j / 4) * 8 + (lane % 4) * 2;
        if (co0 + col >= p.co) continue;
#pragma unroll
        for (int h = 0; h < 2; ++h)
          if (rows2[h] >= 0)
            *reinterpret_cast<float2*>(part + (rows2[h] - p.row_begin) * p.co + co0 + col) =
                make_float2(acc[b * R + j + 2 * h], acc[b * R + j + 2 * h + 1]);
      }
    }
    return;
  }
  T* cs = reinterpret_cast<T*>(smem);
  if (has_acc) stage_acc<T, BN, MB>(p, acc, co0, first, lane, cs);
  __syncthreads();
  store_staged_tile<T, BM, BN, LDC, THREADS>(p, cs, row_s, co0);
}

// ---- the A gathers of one step (both kernels) -------------------------------------------------------
// This thread's COPIES rows a_r + RSTEP·q of the tile at offset k (map entries nb_k = nb_s + k·BM),
// 16 bytes at channel c0 + 8·a_c each, into the swizzled A stage at dst (+ RSTEP·q rows); absent
// neighbors and channels past Ci are zero-filled without a read. The map entries are all read
// before the first copy, so their shared-memory latencies overlap (a third of the instructions a
// copy of an interleaved form that waits for each entry).
template <typename T, int COPIES, int RSTEP>
__device__ __forceinline__ void gather_a(unsigned char* dst, const int32_t* nb_k, const T* feats, int ci, int c0,
                                         int a_c, int a_r) {
  int32_t m[COPIES];
#pragma unroll
  for (int q = 0; q < COPIES; ++q) m[q] = nb_k[a_r + RSTEP * q];
  const bool a_ok = c0 + a_c * 8 < ci;
  const auto* base = reinterpret_cast<const unsigned char*>(feats + c0 + a_c * 8);
  const uint64_t row_bytes = static_cast<uint64_t>(ci) * sizeof(T);
#pragma unroll
  for (int q = 0; q < COPIES; ++q) {
    const bool ok = a_ok && m[q] >= 0;
    cp_async16(dst + q * RSTEP * 128, ok ? base + static_cast<uint64_t>(static_cast<uint32_t>(m[q])) * row_bytes : base,
               ok ? 16 : 0);
  }
}

// Only the offsets no row of the tile has are skipped (act_s): skipping per 64-row warpgroup too is
// slower at every shape (ptxas cannot prove that branch uniform per warpgroup and serializes the
// wgmmas, warning C7520).
template <typename T, typename Tile>
__global__ void __launch_bounds__(Tile::THREADS, Tile::MIN_BLOCKS) kernel_conv_wgmma(Params p, int col_tiles) {
#ifdef FRUGAL_WGMMA
  constexpr int BM = Tile::BM, BN = Tile::BN, BK = Tile::BK, STAGES = Tile::STAGES, THREADS = Tile::THREADS;
  constexpr int GROUPS = BM / kGroupRows, AHEAD = Tile::AHEAD, PENDING = Tile::PENDING, R = BN / 2;
  extern __shared__ unsigned char smem_raw[];
  __shared__ int32_t row_s[BM];              // map column of each tile row (output_row maps it); -1: past the end
  __shared__ uint32_t group_s[GROUPS];       // offsets present in each 16-row group
  __shared__ int8_t act_s[kMaxMaskedOffsets];      // offsets present in the tile, ascending
  __shared__ int act_count;
  const uint32_t raw_addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  unsigned char* smem = smem_raw + ((1024 - (raw_addr & 1023)) & 1023);
  const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  // neighbor row of each (offset k, tile row r) at nb_s[k · BM + r]; -1: none
  int32_t* nb_s = reinterpret_cast<int32_t*>(smem + size_t(STAGES) * Tile::STAGE);
  const T* feats = static_cast<const T*>(p.feats);
  const T* w = static_cast<const T*>(p.weight);
  const int64_t t0 = static_cast<int64_t>(blockIdx.x / col_tiles) * BM;  // within this launch's rows
  const int co0 = static_cast<int>(blockIdx.x % col_tiles) * BN;
  const int tid = threadIdx.x, wg = tid / 128;

  tile_prologue<BM, THREADS>(p, t0, nb_s, row_s, group_s, act_s, &act_count);
  const int chunks = (p.ci + BK - 1) / BK;
  const int steps = act_count * chunks;

  // Each thread's copies: A rows tid/8 + (THREADS/8)·q, chunk tid % 8; B chunk tid % (BN/8) of rows
  // tid / (BN/8) + q · THREADS / (BN/8). The swizzled destinations are fixed per thread.
  const int a_c = tid % 8, a_r = tid / 8;
  const int a_dst = a_r * 128 + ((a_c ^ (a_r & 7)) << 4);
  constexpr int B_CH = BN / 8, B_RSTEP = THREADS / B_CH;
  const int b_c = tid % B_CH, b_r = tid / B_CH;
  const int b_dst = ((b_c / 8) * 8 + b_r / 8) * 1024 + (b_r & 7) * 128 + (((b_c & 7) ^ (b_r & 7)) << 4);
  const bool b_col_ok = co0 + b_c * 8 < p.co;
  auto load = [&](int s) {
    const int a = s / chunks, c0 = (s - a * chunks) * BK, k = act_s[a];
    unsigned char* st = smem + (s % STAGES) * Tile::STAGE;
    gather_a<T, Tile::A_COPIES, Tile::A_RSTEP>(st + a_dst, nb_s + k * BM, feats, p.ci, c0, a_c, a_r);
    const T* wk = w + (static_cast<int64_t>(k) * p.ci + c0 + b_r) * p.co + co0 + b_c * 8;
#pragma unroll
    for (int q = 0; q < Tile::B_COPIES; ++q) {
      const bool ok = b_col_ok && c0 + b_r + q * B_RSTEP < p.ci;
      cp_async16(st + Tile::A_STAGE + b_dst + q * (B_RSTEP / 8) * 1024,
                 ok ? wk + static_cast<int64_t>(q) * B_RSTEP * p.co : w, ok ? 16 : 0);
    }
  };

  float acc[R];
#pragma unroll
  for (int i = 0; i < R; ++i) acc[i] = 0.0f;

#pragma unroll
  for (int s = 0; s < AHEAD; ++s) {
    if (s < steps) load(s);
    cp_async_commit();
  }
  for (int s = 0; s < steps; ++s) {
    cp_async_wait<AHEAD - 1>();  // this thread's copies of step s have landed ...
    fence_proxy_async();         // ... are visible to wgmma's async proxy ...
    __syncthreads();             // ... everyone's are; the stage refilled next was last read by a
                                 // wgmma group every warpgroup has waited for
    if (s + AHEAD < steps) load(s + AHEAD);
    cp_async_commit();
    wgmma_step<T, Tile>(acc, sbase + (s % STAGES) * Tile::STAGE, wg);
    wgmma_wait<PENDING>();
    fence_acc(acc);
  }
  wgmma_wait<0>();
  fence_acc(acc);
  cp_async_wait<0>();
  __syncthreads();  // the stages become the epilogue's staging

  tile_epilogue<T, BM, BN, THREADS>(p, acc, true, co0, row_s, smem);
#else
  __trap();  // never launched: the choice takes this kernel only where sm_90a code is loaded (DeviceCaps::sm90a)
#endif
}

// ---- the warp-specialized kernel ------------------------------------------------------------------
// Why: in kernel_conv_wgmma every warp both gathers and multiplies, and a block-wide barrier per step
// ties the two together; at one block a multiprocessor (BN = 256) that leaves the tensor pipe waiting
// on latency, not bandwidth (docs/performance.md, "Sparse conv"). Here a producer warpgroup (128
// threads) gathers A with cp.async and has the copy engine (TMA) bring B into STAGES stages, and two
// consumer warpgroups (64 rows each) only wait and issue wgmma; full/empty mbarriers per stage replace
// the barrier, so the producer runs up to LAG + 1 steps ahead and the consumers never wait for one
// another.
//   Producer, step s: wait until the consumers released the stage (step s − STAGES); one thread
//   arms the stage's full barrier with B's bytes and issues B's bulk tensor copies; every thread
//   issues its gathers and commits; then for step s − LAG: wait for its own gathers
//   (cp.async.wait_group LAG), fence.proxy.async (its generic-proxy writes become visible to
//   wgmma's async proxy) and arrive on that stage's full barrier (128 + 1 arrivals and B's bytes
//   complete it).
//   Consumers, step s: wait on the full barrier, issue the BK/16 wgmmas, commit, wait until at most
//   one group is in flight, then release step s − 1's stage (one arrival per warp: 8 complete it).
// LAG ≤ STAGES − 2 keeps the two from waiting on each other: refilling step s's stage needs step
// s − STAGES released, i.e. the consumers at step s − STAGES + 1, whose stage the producer has
// published at step s − STAGES + 1 + LAG ≤ s − 1.
// Same tile (128 rows × BN), same map prologue, same sums in the same order: the output is bitwise
// that of kernel_conv_wgmma.
// BLOCKS = 2 (BN = 64): two blocks a multiprocessor, each with half the stages, so one block's
// prologue and epilogue overlap the other's main loop. Not at BN = 128: its wgmma needs ~90
// registers, two blocks of 384 threads allow 85 (kRegistersPerBlock / 768; setmaxnreg does not raise
// what ptxas allocates: C7602 "insufficient registers (80)").
// BM = 256 (BN ≤ 128, one block): each consumer warpgroup owns two 64-row blocks of the tile (MB = 2),
// so each weight slice brought from L2 serves twice the rows.
template <int BN_, int BLOCKS_ = 1, int BM_ = kTileRows>
struct WsTile {
  static constexpr int BM = BM_, BN = BN_, BK = 64, CONSUMERS = 256, PRODUCERS = 128, BLOCKS = BLOCKS_;
  static constexpr int MB = BM / 128;  // 64-row blocks a consumer warpgroup
  static constexpr int THREADS = CONSUMERS + PRODUCERS;
  static_assert(BM == kTileRows || (BM == 2 * kTileRows && BN <= 128 && BLOCKS == 1),
                "256-row tiles: one block, up to 128 channels (2 × 64 f32 accumulators a thread)");
  static constexpr int A_STAGE = BM * BK * 2, B_STAGE = BK * BN * 2, STAGE = A_STAGE + B_STAGE;
  // one block: 4, 6, 8 stages for BN = 256, 128, 64; two blocks: 4 for BN = 64
  static constexpr int STAGES = (BLOCKS == 1 ? 192 : 96) * 1024 / STAGE;
  static constexpr int LAG = STAGES - 2;
  static_assert(BLOCKS == 1 || BN == 64, "two blocks only at 64 channels");
  static constexpr size_t SMEM = size_t(STAGES) * STAGE + 1024;  // + slack to align the base to 1 KB; + nb
  static constexpr int A_COPIES = BM * BK / 8 / PRODUCERS, A_RSTEP = PRODUCERS / 8;
  static_assert(A_RSTEP % 8 == 0, "fixed A row phase per thread");
  static_assert(LAG >= 1 && LAG <= 7, "cp.async.wait_group's immediate");
  static_assert(size_t(BM) * (BN + 8) * 2 <= size_t(STAGES) * STAGE, "the epilogue staging reuses the stages");
  // One block's shared memory at K = 32; two blocks fit a multiprocessor's 228 KB up to K = 27 (2 × (97 +
  // 13.5 (map slice) + 0.7 + 1 (reserved)) KB), larger K runs one.
  static_assert(SMEM + size_t(kMaxMaskedOffsets) * BM * 4 + 2048 <= kMaxSmemPerBlock, "fits one block's shared memory");
};

// kHandoff: the instance that runs the tiles the pipelined halo kernel left (p.handoff; its own
// instance, so that the others' code is untouched by it).
template <typename T, typename Tile, bool kHandoff = false>
__global__ void __launch_bounds__(Tile::THREADS, Tile::BLOCKS)
    kernel_conv_wgmma_ws(const __grid_constant__ CUtensorMap wmap, Params p, int col_tiles) {
#ifdef FRUGAL_WGMMA
  constexpr int BM = Tile::BM, BN = Tile::BN, BK = Tile::BK, STAGES = Tile::STAGES, THREADS = Tile::THREADS;
  constexpr int GROUPS = BM / kGroupRows, LAG = Tile::LAG, CONSUMERS = Tile::CONSUMERS, R = BN / 2;
  extern __shared__ unsigned char smem_raw[];
  __shared__ int32_t row_s[BM];
  __shared__ uint32_t group_s[GROUPS];
  __shared__ int8_t act_s[kMaxMaskedOffsets];
  __shared__ int act_count;
  __shared__ alignas(8) uint64_t full_s[STAGES], empty_s[STAGES];
  const uint32_t raw_addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  unsigned char* smem = smem_raw + ((1024 - (raw_addr & 1023)) & 1023);
  const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t full0 = static_cast<uint32_t>(__cvta_generic_to_shared(full_s));
  const uint32_t empty0 = static_cast<uint32_t>(__cvta_generic_to_shared(empty_s));
  int32_t* nb_s = reinterpret_cast<int32_t*>(smem + size_t(STAGES) * Tile::STAGE);
  int64_t tile = blockIdx.x / col_tiles;
  if constexpr (kHandoff) {  // the tiles the pipelined halo kernel left, the grid sized for all of them
    __shared__ int64_t handoff_tile;
    if (threadIdx.x == 0) {
      // Launched as its programmatic dependent, this block may start while that kernel runs (its
      // blocks are all resident by then): wait until each of them has sorted out its tiles. Then take
      // tile blockIdx.x of the list, if there is one.
      while (load_acquire(p.handoff_count + kListersDone) < p.handoff_blocks) __nanosleep(256);
      handoff_tile = tile < __ldcg(p.handoff_count + kListed) ? __ldcg(p.handoff + tile) : -1;
    }
    __syncthreads();
    tile = handoff_tile;
    if (tile < 0) {
      grid_dependency_wait();  // (this grid completes after the pipelined kernel: the stream's order)
      return;
    }
  }
  const int64_t t0 = tile * BM;
  const int co0 = static_cast<int>(blockIdx.x % col_tiles) * BN;
  const int tid = threadIdx.x, lane = tid % 32;
  if (tid == 0) {
    for (int i = 0; i < STAGES; ++i) {
      mbar_init(full0 + 8 * i, Tile::PRODUCERS + 1);  // + the weight copies' expect_tx
      mbar_init(empty0 + 8 * i, CONSUMERS / 32);
    }
  }
  tile_prologue<BM, THREADS>(p, t0, nb_s, row_s, group_s, act_s, &act_count);  // its barriers publish the inits
  const int chunks = (p.ci + BK - 1) / BK;
  const int steps = act_count * chunks;

  float acc[Tile::MB * R];
#pragma unroll
  for (int i = 0; i < Tile::MB * R; ++i) acc[i] = 0.0f;

  if (tid >= CONSUMERS) {  // ---- producer warpgroup
    const int pt = tid - CONSUMERS;
    const T* feats = static_cast<const T*>(p.feats);
    const int a_c = pt % 8, a_r = pt / 8;
    const int a_dst = a_r * 128 + ((a_c ^ (a_r & 7)) << 4);
    for (int s = 0; s < steps; ++s) {
      const int st = s % STAGES;
      if (s >= STAGES) mbar_wait(empty0 + 8 * st, (s / STAGES - 1) & 1);
      const int a = s / chunks, c0 = (s - a * chunks) * BK, k = act_s[a];
      unsigned char* sp = smem + st * Tile::STAGE;
      gather_a<T, Tile::A_COPIES, Tile::A_RSTEP>(sp + a_dst, nb_s + k * BM, feats, p.ci, c0, a_c, a_r);
      if (pt == 0) {  // the weight slice: BN / 64 boxes of 64 Ci rows × 64 channels, 128-byte swizzled by the copy engine
        const uint32_t bar = full0 + 8 * st, dst = sbase + st * Tile::STAGE + Tile::A_STAGE;
        mbar_arrive_expect_tx(bar, Tile::B_STAGE);
#pragma unroll
        for (int n = 0; n < BN / 64; ++n) tma_load_3d(dst + n * 8192, &wmap, co0 + 64 * n, c0, k, bar);
      }
      cp_async_commit();
      if (s >= LAG) {
        cp_async_wait<LAG>();
        fence_proxy_async();
        mbar_arrive(full0 + 8 * ((s - LAG) % STAGES));
      }
    }
    cp_async_wait<0>();
    fence_proxy_async();
    for (int s = steps > LAG ? steps - LAG : 0; s < steps; ++s) mbar_arrive(full0 + 8 * (s % STAGES));
  } else {  // ---- consumer warpgroups: rows 64·MB·wg .. 64·MB·(wg + 1) − 1 of the tile
    const int wg = tid / 128;
    for (int s = 0; s < steps; ++s) {
      const int st = s % STAGES;
      mbar_wait(full0 + 8 * st, (s / STAGES) & 1);
      wgmma_step<T, Tile, Tile::MB>(acc, sbase + st * Tile::STAGE, wg);
      wgmma_wait<1>();
      fence_acc(acc);
      if (s > 0 && lane == 0) mbar_arrive(empty0 + 8 * ((s - 1) % STAGES));
    }
    wgmma_wait<0>();
    fence_acc(acc);
  }
  __syncthreads();  // copies landed, wgmmas done: the stages become the epilogue's staging
  tile_epilogue<T, BM, BN, THREADS, Tile::MB>(p, acc, tid < CONSUMERS, co0, row_s, smem);
  if constexpr (kHandoff) grid_dependency_wait();
#else
  __trap();  // never launched: the choice takes this kernel only where sm_90a code is loaded (DeviceCaps::sm90a)
#endif
}

// out[output_row(row_begin + r), c] = Σ_j part[j, r, c] (j ascending) + bias[c], 4 channels a thread.
template <typename T>
__global__ void kernel_finish_split(Params p, int splits) {
  const int64_t count = p.rows * p.co / 4;  // co % 8 == 0
  const T* bias = static_cast<const T*>(p.bias);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = output_row(p, p.row_begin + i * 4 / p.co);
    if (row < 0) continue;
    float4 v = reinterpret_cast<const float4*>(p.part)[i];
    for (int j = 1; j < splits; ++j) {
      const float4 w = reinterpret_cast<const float4*>(p.part + j * p.rows * p.co)[i];
      v.x += w.x, v.y += w.y, v.z += w.z, v.w += w.w;
    }
    const int c = static_cast<int>(i * 4 % p.co);
    if (bias) v.x += to_f32(bias[c]), v.y += to_f32(bias[c + 1]), v.z += to_f32(bias[c + 2]), v.w += to_f32(bias[c + 3]);
    T* out = static_cast<T*>(p.out) + row * p.co + c;
    store_pair(out, v.x, v.y);
    store_pair(out + 2, v.z, v.w);
  }
}

// One launch of either kernel over p's rows: fn(lead..., p, col_tiles), where lead is nothing (the
// plain kernel) or the weights' tensor map (the warp-specialized one); a programmatic dependent of the
// work before it in s where `dependent` (launch_kernel).
template <typename Tile, typename... P, typename... Lead>
void launch_tile(void (*fn)(P...), const Params& p, int splits, cudaStream_t s, bool dependent, const Lead&... lead) {
  const int col_tiles = ceil_div(p.co, Tile::BN);
  const int64_t blocks = ceil_div<int64_t>(p.rows, Tile::BM) * col_tiles;  // ≤ INT32_MAX by chunk_rows
  const size_t smem = Tile::SMEM + size_t(p.k) * Tile::BM * sizeof(int32_t);
  allow_dynamic_smem(reinterpret_cast<const void*>(fn), static_cast<int>(smem));
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(p.part ? splits : 1));
  FRUGAL_CUDA_CHECK(launch_kernel(fn, grid, dim3(Tile::THREADS), smem, s, dependent, lead..., p, col_tiles));
  FRUGAL_CUDA_CHECK_LAUNCH();
}

template <typename T, int BN>
ConvVariant run_wgmma(const Params& p, ConvVariant v, int rows, int splits, cudaStream_t s) {
  // ws: 0 every warp gathers and multiplies, 1 warp-specialized, 2 its two-block form.
  const int ws = v == ConvVariant::wgmma ? 0 : v == ConvVariant::wgmma_ws ? 1 : 2;
  CUtensorMap map;
  const bool tma = ws && weight_map<T>(p, &map);
  if constexpr (BN <= 128) {
    if (rows == 2 * kTileRows) {
      if (tma) {
        using Tile = WsTile<BN, 1, 2 * kTileRows>;
        launch_tile<Tile>(kernel_conv_wgmma_ws<T, Tile>, p, splits, s, false, map);
        return ConvVariant::wgmma_ws;
      }
      using Tile = WgTile<BN, 2 * kTileRows>;
      launch_tile<Tile>(kernel_conv_wgmma<T, Tile>, p, splits, s, false);
      return ConvVariant::wgmma;
    }
  }
  if (tma) {
    if constexpr (BN <= 128) {
      if (BN == 64 && ws >= 2) {
        launch_tile<WsTile<64, 2>>(kernel_conv_wgmma_ws<T, WsTile<64, 2>>, p, splits, s, false, map);
        return ConvVariant::wgmma_ws2;
      }
    }
    launch_tile<WsTile<BN>>(kernel_conv_wgmma_ws<T, WsTile<BN>>, p, splits, s, false, map);
    return ConvVariant::wgmma_ws;
  }
  launch_tile<WgTile<BN>>(kernel_conv_wgmma<T, WgTile<BN>>, p, splits, s, false);
  return ConvVariant::wgmma;
}

template <typename T>
void run_finish_split(const Params& p, int splits, cudaStream_t s) {
  const int64_t count = p.rows * p.co / 4;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>(ceil_div<int64_t>(count, 256), 4096));
  kernel_finish_split<T><<<blocks, 256, 0, s>>>(p, splits);
  FRUGAL_CUDA_CHECK_LAUNCH();
}
template <typename T, int BN>
void run_handoff(const Params& left, const CUtensorMap& wmap, cudaStream_t s) {
  using Left = WsTile<BN, BN == 64 ? 2 : 1>;
  launch_tile<Left>(kernel_conv_wgmma_ws<T, Left, true>, left, 1, s, true, wmap);
}

// The dtype's instance: f16 or bf16 (the wgmma kernels take no other).
template <typename F>
void for_dtype(DType dtype, F&& f) {
  if (dtype == DType::f16)
    f.template operator()<__half>();
  else
    f.template operator()<__nv_bfloat16>();
}

}  // namespace

ConvVariant launch_wgmma(const Params& p, DType dtype, ConvVariant v, int tile_co, int tile_rows, int splits,
                         cudaStream_t s) {
  ConvVariant ran = v;
  for_dtype(dtype, [&]<typename T>() {
    if (tile_co == 64) ran = run_wgmma<T, 64>(p, v, tile_rows, splits, s);
    else if (tile_co == 128) ran = run_wgmma<T, 128>(p, v, tile_rows, splits, s);
    else ran = run_wgmma<T, 256>(p, v, tile_rows, splits, s);
  });
  return ran;
}

void finish_split(const Params& p, DType dtype, int splits, cudaStream_t s) {
  for_dtype(dtype, [&]<typename T>() { run_finish_split<T>(p, splits, s); });
}

void launch_handoff(const Params& left, DType dtype, int tile_co, const CUtensorMap& wmap, cudaStream_t s) {
  for_dtype(dtype, [&]<typename T>() {
    if (tile_co == 64)
      run_handoff<T, 64>(left, wmap, s);
    else
      run_handoff<T, 128>(left, wmap, s);
  });
}

}  // namespace frugal::cuda::spconv_kernels
