// Tensor-core implicit-GEMM submanifold conv through Hopper's warpgroup MMA (wgmma.mma_async,
// sm_90a), over the row order of the mma.sync kernel (sparse_conv_mma.cu sorts the rows, or not,
// and calls launch_wgmma per launch).
//
// Why: the mma.sync kernel is latency-bound at one block of 8 warps per SM (Nsight Compute, R =
// 1024, C = 256: 6.2 cycles between two instructions of a warp, half of them fixed-latency
// dependency stalls, tensor pipe 37%; bench/results/2026-11-29-spconv-tc.md). wgmma reads both
// operands from shared memory and runs asynchronously, so the threads that issue it spend no
// issue slots on ldmatrix or per-fragment mmas and compute the next gathers meanwhile: 2.0× the
// mma kernel at R = 1024, C = 256 on the H200 (27.1 vs 54.4 ms; results file tc3).
//
// A block owns 128 rows × BN output channels (BN = 64, 128, 256) as two warpgroups of 64 rows;
// each warpgroup issues one m64nBNk16 wgmma per 16-deep slice. The prologue reads the tile's map
// slice into shared memory (and checks it). The main loop runs over the offsets some row of the
// tile has × Ci in chunks of 64: a cp.async pipeline (zero fill for absent neighbors) gathers the
// neighbor rows into a 128-byte-swizzled K-major A tile and the weight slice into a 128-byte-
// swizzled N-major B tile (the weight's own layout: [K, Ci, Co], Co contiguous). AHEAD steps of
// gathers are in flight ahead of the wgmma, and PENDING wgmma groups stay in flight across the next
// step's barrier. The epilogue adds the bias, stages the tile in shared memory and writes each
// output row once with 16-byte stores; no atomics touch the output, and each element's sum runs in
// a fixed order (offsets ascending, then Ci), so results are bitwise reproducible (and, measured,
// bitwise equal to the mma kernel's).
//
// Two kernels share that tile, map prologue and epilogue: kernel_conv_wgmma, where every warp both
// gathers and multiplies (steps separated by block barriers), and kernel_conv_wgmma_ws, where a
// producer warpgroup gathers (and the copy engine brings the weights) while two consumer
// warpgroups multiply, synchronized by mbarriers; the dispatcher (sparse_conv_mma.cu) picks one by
// shape, from measurements. Both sum every element in the same order: bitwise equal outputs.
// A third, kernel_conv_halo_pipe (Ci, Co ≤ 128; its own section below), loads each tile's input rows
// once instead of gathering them per offset, for rows in the map's order; same sums, same order at
// Ci ≤ 64 (above, its own fixed order: channel passes of 64).
//
// Split launches (small grids): blockIdx.y = j of S sums only the offsets [K·j/S, K·(j+1)/S) and
// writes f32 partials; kernel_finish_split adds them in split order, plus the bias.
//
// The sm_90 (non-"a") build compiles the kernel to a trap; wgmma_available() probes, once per
// device, which code the driver loaded, and the dispatcher never picks the kernel where it is absent.
#include <cuda.h>  // CUtensorMap (the types only: the encoder is reached through the runtime)
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <type_traits>
#include <vector>

#include "cuda/common.cuh"
#include "cuda/mbarrier.cuh"
#include "cuda/sparse_conv_mma.cuh"
#include "cuda/wgmma.cuh"

namespace frugal::cuda::spconv_mma {

using spconv::ConvVariant;
using spconv::halo_passes;
using spconv::kHaloPasses;

namespace {

#ifdef FRUGAL_WGMMA
__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Bulk tensor copy (TMA) of the box at (x, y, z) of the tensor map into shared memory at dst,
// completing `box bytes` transactions on the mbarrier at bar.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, int x, int y, int z, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(z), "r"(bar)
      : "memory");
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
// slice (nb) follows the stages in dynamic shared memory, K × BM × 4 bytes. Pipeline per tile, each
// 128-row one the fastest of those measured on the H200 (2026-11-29, results file tc3; R = 1024):
//   BN = 256: 48 KB a stage, 4 stages (192 KB), one block; 2 gather steps ahead, 1 wgmma group in
//             flight past the barrier (27.3 ms at C = 256; none in flight, 3 ahead: 32.2);
//   BN = 128: 32 KB, 3 stages (96 KB), two blocks (2 × (96 + 1 + 13.5 (nb, K = 27) + 0.6) KB of
//             the 228 KB); 2 ahead, none in flight (9.16 ms at C = 128; one block of 5 stages,
//             3 ahead, 1 in flight: 10.90);
//   BN =  64: 24 KB, 3 stages (72 KB), two blocks; 2 ahead, none in flight (4.14 ms at C = 64;
//             4 stages, 3 ahead: 4.48).
// 256-row tiles (BN = 64 or 128; results file tc4): each gathered weight slice serves twice the
// rows (at R = 1024 the weight slices are 6.4 of the 16 GB the 128-row tiles move from L2 at C = 64,
// 25 of 45 GB at C = 128). 512 threads, one block (BN = 128: 4 × 48 KB + 27 KB of map slice at
// K = 27), 4 stages, 2 ahead, 1 group in flight (BN = 256's one-block pipeline). Measured on the
// H200: 2–4% faster than the 128-row tiles at C = 64 on the map's row order (4.04 vs 4.12 ms at
// R = 1024, 1.02 vs 1.04 at 512, 0.267 vs 0.278 at 256), 4% slower on sorted rows and at C = 128
// (9.65 vs 9.29 ms); 3 ahead with none in flight was slower still (4.58, 10.16). Fewer bytes did not
// buy time: one block per SM exposes each tile's prologue, pipeline fill and epilogue, which the
// second block of the 128-row tiles hides.
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
  // 227 KB of shared memory a block (sm_90): the stages, the slack and the map slice at K = 32.
  static_assert(SMEM + size_t(kMaxMaskedOffsets) * BM * 4 + 2048 <= 232448, "fits one block's shared memory");
};

// ---- the tile's epilogue (both kernels) -----------------------------------------------------------
// Accumulator i of block b of a thread of warp w (w < 8; warpgroup w / 4 owns MB blocks of 64 rows):
// row 64·(MB·(w / 4) + b) + 16·(w % 4) + lane/4 + 8·(i/2 % 2) of the tile, column 8·(i/4) +
// 2·(lane % 4) + i % 2 (the wgmma m64nN f32 layout). Threads without accumulators (has_acc false:
// the producers) only help store. Split: the f32 partial of this block, no bias, at [split, row -
// row_begin, channel]. Else bias, round, stage the tile in shared memory (the stages, which the
// caller has made free with a barrier), then one 16-byte store per 8 channels of a row.
// This thread's accumulators (first: its block 0's first row) plus the bias, rounded to T, into the
// staging tile cs (BM rows of BN + 8 elements).
template <typename T, int BN, int MB>
__device__ __forceinline__ void stage_acc(const Params& p, const float (&acc)[MB * BN / 2], int co0, int first,
                                          int lane, T* cs) {
  constexpr int R = BN / 2, LDC = BN + 8;
  const T* bias = static_cast<const T*>(p.bias);
#pragma unroll
  for (int j = 0; j < R; j += 4) {
    const int col = (j / 4) * 8 + (lane % 4) * 2;
    float b0 = 0.0f, b1 = 0.0f;
    if (bias && co0 + col < p.co) b0 = to_f32(bias[co0 + col]), b1 = to_f32(bias[co0 + col + 1]);  // co % 8 == 0
#pragma unroll
    for (int b = 0; b < MB; ++b) {
      const int r0 = first + 64 * b;
      store_pair(cs + r0 * LDC + col, acc[b * R + j] + b0, acc[b * R + j + 1] + b1);
      store_pair(cs + (r0 + 8) * LDC + col, acc[b * R + j + 2] + b0, acc[b * R + j + 3] + b1);
    }
  }
}

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
// before the first copy, so their shared-memory latencies overlap (interleaved, each copy waited
// for its entry: ~20 instructions a copy in the SASS, now ~6).
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

// Only the offsets no row of the tile has are skipped (act_s). Skipping per 64-row warpgroup too was
// measured slower at every shape (results file tc3: ptxas cannot prove that branch uniform per
// warpgroup and serializes the wgmmas, warning C7520) and removed.
template <typename T, typename Tile>
__global__ void __launch_bounds__(Tile::THREADS, Tile::MIN_BLOCKS) kernel_conv_wgmma(Params p, int col_tiles) {
#ifdef FRUGAL_WGMMA
  constexpr int BM = Tile::BM, BN = Tile::BN, BK = Tile::BK, STAGES = Tile::STAGES, THREADS = Tile::THREADS;
  constexpr int GROUPS = BM / kGroupRows, AHEAD = Tile::AHEAD, PENDING = Tile::PENDING, R = BN / 2;
  extern __shared__ unsigned char smem_raw[];
  __shared__ int32_t row_s[BM];              // output row of each tile row; -1: past the end
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
  __trap();  // never launched: wgmma_available() is false where this code is loaded
#endif
}

// ---- the warp-specialized kernel ------------------------------------------------------------------
// Why: in kernel_conv_wgmma every warp both gathers and multiplies, and a block-wide barrier per step
// ties the two together; at R = 1024, C = 256 (Nsight Compute, 2026-11-29, session 3) its one block
// a multiprocessor keeps the tensor pipe ~53% busy with 0.5 eligible warps a scheduler, the L2 at
// 56% of its peak: latency, not bandwidth. Here a producer warpgroup (128 threads) gathers A with
// cp.async and has the copy engine (TMA) bring B into STAGES stages, and two consumer warpgroups
// (64 rows each) only wait and issue wgmma; full/empty mbarriers per stage replace the barrier, so
// the producer runs up to LAG + 1 steps ahead and the consumers never wait for one another.
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
// registers, two blocks of 384 threads allow 85 (and setmaxnreg does not raise what ptxas
// allocates: C7602 "insufficient registers (80)").
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
  static_assert(SMEM + size_t(kMaxMaskedOffsets) * BM * 4 + 2048 <= 232448, "fits one block's shared memory");
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
  __trap();  // never launched: wgmma_available() is false where this code is loaded
#endif
}

// ---- the pipelined halo kernel (Ci, Co ≤ 128) -------------------------------------------------------
// Why: in the map's order a 128-row tile of a shell makes ~2,100 (row, offset) pairs but touches only
// ~430 distinct input rows, so the gather-per-step kernels bring each input row from L2 ~5 times a
// tile (the two-block kernel moves ~18 GB through the L2 at R = 1024, C = 64). Here each tile's input
// rows are loaded once, as three contiguous row ranges (one for each third of the offsets: for a 3×3×3
// kernel the three planes of the first coordinate; over the shells they hold ~8% more rows than the
// tile's distinct rows; a tile whose ranges do not fit takes only the 8-row boxes of them it uses, at
// Ci > 64 and at one pass with BN = 64), into a "halo" in shared memory; each warp then reads its 16 rows' A
// fragments straight from the halo rows with ldmatrix (one row address a lane) and issues register-A
// wgmmas against the offset's weight slice. bench/results/2026-11-30-spconv-range.md,
// -spconv-halo2.md and -spconv-pipe-trace.md have the measurements behind each choice below; the
// 128-channel form (HaloPipe below: passes of 64 input channels, 128-wide column tiles) is in
// 2026-12-01-spconv-halo128.md (at Ci = Co = 128 its steps seem bound by the weight slices' 16 KB from
// L2 a step: ~1,070 cycles a step for 512 of tensor work at R = 1024 — but with no weight bytes at all
// it was only 6% faster: 2026-12-01-spconv-bounds.md).
//
// One persistent block a multiprocessor walks tiles (blockIdx.x, then each claimed from a counter of the
// launch, so that the blocks end within about a tile of each other: 0.2–2% faster than a fixed stride of
// gridDim.x at R = 512–1024, bench/results/2026-12-01-s26.md, call 4); the prologue of
// tile j + 1 runs beside the main loop of tile j, in separate warps, into the other of two halo buffers:
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
// buffers' path. There it had been the bound: its chain (map slice, ranges, slot entries, then ~5.5 K
// cycles for its first warp to issue the copies while the other three waited at the next tile's
// barrier) was ~15 K cycles a tile, the whole block period, and the consumers waited 1.7–2.7 K cycles a
// tile for it (a clock64 trace, bench/results/2026-12-01-s27.md, calls 1 and 3). So there: three tile
// states (slot entries, offsets, rows) instead of two, each with a ready barrier (the prologue's 128
// threads arrive) and a state-free one (the consumer warps and the weight warp); the prologue lays a
// tile out as soon as its state is free — while the consumers still run the tile before last — and a
// copy warp (the weight warp's warpgroup's second warp) waits for the state and then for the buffer,
// zeroes the zero slots and issues the copies; the weight warp and the consumers wait on the ready
// barrier instead of meta (the weight warp starts a tile's slices as soon as its offsets are known).
// R = 1024 6.4% faster, R = 512 7% (call 6); the third state's slot area costs 16 halo rows (CAP 616,
// 7.6% of the R = 1024 tiles handed off instead of 6.4%) — and with the prologue off the path, the tiles
// that do not fit by ranges are laid out by boxes there too (CAP 608: 1.7% handed off; below).
// A tile that does not fit CAP rows (by ranges, BN = 64, CAP 632: 6.9% of the R = 1024 shell's tiles in
// the map's order, 2.2% at R = 512; at Ci > 64 by boxes, BN = 128 (two passes: CAP 632, the map slice
// in registers, HaloPipe::MAP): 1.1% and 0.1% (5.0% and 2.0% at 568 rows); fit3.py in
// bench/results/2026-12-01-spconv-bounds/; every tile of a dense block or of
// rows in random order) is
// handed off: the prologue appends it to p.handoff and goes on to its next tile in the
// same buffer, and kernel_conv_wgmma_ws (two blocks a multiprocessor at BN = 64, one at 128) runs the
// listed tiles after this kernel. (Gathering such a tile's rows step by step here, behind a barrier of
// the consumers a step, took 2.4× a fitting tile's time.) The dispatcher still picks this
// kernel only where a sample of the map's tiles fits (sparse_conv_mma.cu): the prologue's work on a
// handed-off tile hides behind the consumers only while most tiles fit. At Ci ≤ 64 the same sums in the
// same order as every wgmma kernel: bitwise their output.
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
  // STAGES (BN = 64): 5 or 6 measured 5–9% slower (zero-phase.md, call 2), and 6 still 2–6% slower with
  // the ring's index kept as counters instead of divided (call 5): a deeper ring does not help here;
  // nor a shallower one: 3 measured 2–5% slower (2026-12-01-s25.md, call 4).
  // BN = 128: 3 stages of 16 KB, so that the halo buffers keep CAP = 632 rows (two passes; 568 at one).
  // Four warpgroups: two of consumers, the prologue's 128 threads, and one holding the weight warp (its
  // other three warps leave at once) — so that setmaxnreg can move registers between roles. At launch
  // every thread has 128 (65,536 / 512); the weight warpgroup keeps REG_WEIGHT, the prologue REG_PROLOGUE,
  // the consumers take the rest. ptxas allocates each role's code within its count. At two passes the
  // prologue (its map slice in registers) needs ~152 and spilled 36–48 bytes at 128; the consumers' loop
  // compiles with its descriptors on the uniform datapath instead of 14 R2UR moves at BN = 128. (With
  // 416 threads — 256 + the weight warp + 128 — ptxas gave every thread 128 all the same.) C = 128
  // R = 1024 3.5% faster, C = 64 unchanged (bench/results/2026-12-01-s23.md, call 1; A_BUFFERS below).
  // kCopyWarp (one pass, BN = 64): the copy warp (below) takes the row copies off the prologue; its
  // warpgroup (the copy and weight warps) 56 registers, the prologue 120, the consumers 168. With 40 for
  // that warpgroup (consumers 176) it was 4% slower at R = 1024 and 48 (prologue 112, 12 bytes of its
  // spills) 1% slower (bench/results/2026-12-01-s27.md, call 6). With the layout by boxes there the
  // prologue takes 136 and the consumers 160 (168 / 120 spilled 144 bytes in the prologue; 0 at 160 / 136).
  static constexpr bool kCopyWarp = halo_copy_warp(BN_, PASSES_);
  static constexpr int THREADS = CONSUMERS + PROLOGUE + 128, STAGES = BN == 64 ? 4 : 3, LDC = BN + 8;
  static constexpr int REG_CONSUMER = PASSES_ > 1 ? 160 : (kCopyWarp ? 160 : 176),
                       REG_PROLOGUE = PASSES_ > 1 ? 152 : (kCopyWarp ? 136 : 112),
                       REG_WEIGHT = 512 - 2 * REG_CONSUMER - REG_PROLOGUE;
  static_assert(REG_WEIGHT >= 24 && REG_CONSUMER >= 128 && REG_CONSUMER <= 256 && REG_PROLOGUE <= 256 &&
                    REG_CONSUMER % 8 == 0 && REG_PROLOGUE % 8 == 0,
                "setmaxnreg's counts: multiples of 8 in [24, 256], within the block's 65,536");
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
  static constexpr size_t BUDGET = 232448 - (STATES > 2 ? 4096 : 2048);  // dynamic shared memory; the static part aside
  // The prologue's map slice (int32 entries): in shared memory, fetched a tile ahead by cp.async, for one
  // pass; for two, in the prologue threads' registers, loaded at the top of the tile's iteration (in
  // flight while the free buffer is waited for), its 16 KB given to the halo buffers (CAP 568 → 632 at
  // BN = 128: 1.1% of the R = 1024 shell's tiles handed off instead of 5.0%): at C = 128 4–6% faster at
  // R = 1024, 2–4% at R = 256–512; the same at one pass (C = 64, CAP 632 → 696) was 3–5% slower — its
  // tiles are half as long, the loads' latency shows (bench/results/2026-12-01-s22.md, call 4, final).
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
// while the tile is laid out). A tile fits when its layout takes at most CAP slots: of the R = 1024
// shell's tiles 6.9% / 11.8% do not by ranges at CAP = 632 / 568, 1.1% / 5.0% by boxes
// (bench/results/2026-12-01-spconv-bounds.md; two passes have 696 / 632 rows at BN = 64 / 128: MAP).
// Boxes are taken where the layout's extra work is off the consumers' path: at Ci > 64 (two passes: the
// consumers' tile takes twice as long) and at one pass with BN = 64, where the copy warp took the row
// copies off the prologue (kCopyWarp). At Ci ≤ 64 before that it was not: +1 to +3% at R = 256–512, 0 at
// R = 1024, where at Ci = 128 R = 512 / 1024 / 196 gained 5 / 1–2 / 1–3% (R = 256 +2–5%);
// 2026-12-01-spconv-bounds.md, calls 3–5. With the copy warp, C = 64 R = 1024: 7.6% → 1.7% of the tiles
// handed off, 1.3–1.6% faster, R = 256–512 unchanged (2026-12-01-s28.md, calls 1 and 3). At one pass and
// BN = 128 (64 → 128: no copy warp) still not.
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
  // a 27-offset map slice, the consumers' loop compiled with its control off the uniform datapath (12
  // branches in it) and ran 9% slower (bench/results/2026-12-01-s27.md, call 4).
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
      // before the slot entries, as soon as the layout is known, measured no faster: call 5 of
      // 2026-12-01-spconv-bounds.md.)
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
          // ldmatrix matrix reads, and two distinct slots of one phase there cost a second wavefront
          // (one zero slot for all: 1.55× the ideal wavefronts of the loop's ldmatrix at R = 512, a free
          // phase: 1.15×, and 2% faster; bench/results/2026-11-30-spconv-zero-phase.md). The 8 lanes of
          // a group are the group's rows; their phases are OR-ed by shuffles, four offsets a word.
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
          // to the next 16 KB copy). Each measured the faster there: counters 2–4% faster at BN = 128, ~1%
          // slower at BN = 64 (bench/results/2026-12-01-s25.md, calls 1–2).
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
    // step (S2UR of the CTA's cluster id, then a dependent ULEA: ~6% of the loop's stall samples at
    // C = 128 in ncu). With them held, and each step's offset read two steps ahead (load_a), the
    // one-pass kernel is 3% faster (C = 64 R = 512 and 1024); at BN = 128, two passes, no change — its
    // four m64n128 wgmmas a step hide the chain (bench/results/2026-12-01-s23.md, peer call, call 5).
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
      // (SmemDesc). The consumers' step is a chain of dependent instructions the tensor pipe waits on
      // (ncu: 36% / 54% active at C = 64 / 128); with the division and the descriptors built from
      // addresses off it, 3–4% faster at C = 64 and 128 (bench/results/2026-12-01-s21.md, calls 2–4
      // and the final call).
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
      // (bank conflicts included) is off the path from one step's wgmma to the next; with two, the loop
      // was 2–2.5% slower than with three (bench/results/2026-11-30-spconv-zero-phase.md, call 3), and
      // four are 1–2% faster than three since the step's chain was shortened (before that: 3.5% slower;
      // bench/results/2026-12-01-s23.md, calls 1 and 6). Two at BN = 128: a third changes nothing there
      // (call 6; 2% slower before the chain was shortened, call 1).
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
  __trap();  // never launched: wgmma_available() is false where this code is loaded
#endif
}

// ---- which rows suit the pipelined halo kernel ----------------------------------------------------
// Block b looks at tile ⌊b · tiles / gridDim.x⌋ of the launch's rows (one thread a row) and counts it
// in *fits when its three row ranges fit a halo buffer of cap rows: the decision the kernel's prologue makes.
__global__ void __launch_bounds__(kTileRows) kernel_halo_probe(Params p, int cap, bool by_boxes, unsigned* fits) {
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

// out[row_begin + r, c] = Σ_j part[j, r, c] (j ascending) + bias[c], 4 channels a thread.
template <typename T>
__global__ void kernel_finish_split(Params p, int splits) {
  const int64_t count = p.rows * p.co / 4;  // co % 8 == 0
  const T* bias = static_cast<const T*>(p.bias);
  T* out = static_cast<T*>(p.out) + p.row_begin * p.co;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float4 v = reinterpret_cast<const float4*>(p.part)[i];
    for (int j = 1; j < splits; ++j) {
      const float4 w = reinterpret_cast<const float4*>(p.part + j * p.rows * p.co)[i];
      v.x += w.x, v.y += w.y, v.z += w.z, v.w += w.w;
    }
    const int c = static_cast<int>(i * 4 % p.co);
    if (bias) v.x += to_f32(bias[c]), v.y += to_f32(bias[c + 1]), v.z += to_f32(bias[c + 2]), v.w += to_f32(bias[c + 3]);
    store_pair(out + i * 4, v.x, v.y);
    store_pair(out + i * 4 + 2, v.z, v.w);
  }
}

}  // namespace

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

// The weight [K, Ci, Co] as a 3-D tensor map (Co fastest) of 64 × 64 × 1 boxes with the 128-byte
// swizzle: a box lands exactly as the B tile's 8 KB of one 64-channel group (the layout the wgmma
// descriptors read); rows past Ci and channels past Co are filled with zeros. False where the driver
// has no encoder.
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      fn = nullptr;
    (void)cudaGetLastError();
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

template <typename T>
bool weight_map(const Params& p, CUtensorMap* map) {
  const auto encode = tensor_map_encoder();
  if (!encode) return false;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(p.co), static_cast<cuuint64_t>(p.ci), static_cast<cuuint64_t>(p.k)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(p.co) * sizeof(T), static_cast<cuuint64_t>(p.ci) * p.co * sizeof(T)};
  const cuuint32_t box[3] = {64, 64, 1}, unit[3] = {1, 1, 1};
  const auto type = std::is_same_v<T, __half> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  return encode(map, type, 3, const_cast<void*>(p.weight), dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
                CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The features [N, Ci] as a 2-D tensor map (Ci fastest) of boxes of `rows` rows × 64 channels with the
// 128-byte swizzle (channels past Ci and rows past N filled with zeros): the pipelined halo kernel's row
// copies (boxes of 64 rows, and of 8 for the rest of a range).
template <typename T>
bool feature_map(const Params& p, CUtensorMap* map, cuuint32_t rows = 8) {
  const auto encode = tensor_map_encoder();
  if (!encode) return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(p.ci), static_cast<cuuint64_t>(p.n)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(p.ci) * sizeof(T)};
  const cuuint32_t box[2] = {64, rows}, unit[2] = {1, 1};
  const auto type = std::is_same_v<T, __half> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  return encode(map, type, 2, const_cast<void*>(p.feats), dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
                CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <typename T, int BN>
ConvVariant launch_wgmma(const Params& p, ConvVariant v, int rows, int splits, cudaStream_t s) {
  // ws: 0 every warp gathers and multiplies, 1 warp-specialized, 2 its two-block form, 4 the halo kernel.
  const int ws = v == ConvVariant::wgmma ? 0 : v == ConvVariant::wgmma_ws ? 1 : v == ConvVariant::wgmma_ws2 ? 2 : 4;
  const Params& q = p;
  CUtensorMap map;
  const bool tma = ws && weight_map<T>(p, &map);
  if constexpr (BN <= 128) {
    if (rows == 2 * kTileRows && ws != 4) {  // (the halo kernel's tiles are 128 rows)
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
      using H = HaloPipe<BN>;
      CUtensorMap fmap, fmap64;
      if (ws == 4 && !p.part && p.handoff && p.ci <= 64 * kHaloPasses && p.co <= BN && feature_map<T>(p, &fmap) &&
          feature_map<T>(p, &fmap64, 64)) {
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
        // The tiles it left, through the warp-specialized kernel (two blocks a multiprocessor at BN =
        // 64): a block a tile of the launch (those past the count return), launched as a programmatic
        // dependent, so that it runs on the multiprocessors the pipelined kernel's blocks leave as they
        // finish (its tiles are known before its last products are). On the H200 that took back the
        // 3–5% the hand-off had cost at R = 256 (17 tiles a multiprocessor, 6 handed off) and gained
        // 2–5% at R = 128–192 (bench/results/2026-11-30-spconv-handoff.md); at R = 512 and 1024 (65 and
        // 270 tiles a multiprocessor) it is equal to a plain launch or 1% faster (-spconv-zero-phase.md,
        // call 1).
        Params left = p;
        left.handoff_blocks = blocks;
        using Left = WsTile<BN, BN == 64 ? 2 : 1>;
        launch_tile<Left>(kernel_conv_wgmma_ws<T, Left, true>, left, splits, s, true, map);
        return ConvVariant::halo_pipe;
      }
      if (BN == 64 && ws >= 2) {
        launch_tile<WsTile<64, 2>>(kernel_conv_wgmma_ws<T, WsTile<64, 2>>, q, splits, s, false, map);
        return ConvVariant::wgmma_ws2;
      }
    }
    launch_tile<WsTile<BN>>(kernel_conv_wgmma_ws<T, WsTile<BN>>, q, splits, s, false, map);
    return ConvVariant::wgmma_ws;
  }
  launch_tile<WgTile<BN>>(kernel_conv_wgmma<T, WgTile<BN>>, q, splits, s, false);
  return ConvVariant::wgmma;
}

template <typename T>
void finish_split(const Params& p, int splits, cudaStream_t s) {
  const int64_t count = p.rows * p.co / 4;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>(ceil_div<int64_t>(count, 256), 4096));
  kernel_finish_split<T><<<blocks, 256, 0, s>>>(p, splits);
  FRUGAL_CUDA_CHECK_LAUNCH();
}
template void finish_split<__half>(const Params&, int, cudaStream_t);
template void finish_split<__nv_bfloat16>(const Params&, int, cudaStream_t);

template ConvVariant launch_wgmma<__half, 64>(const Params&, ConvVariant, int, int, cudaStream_t);
template ConvVariant launch_wgmma<__half, 128>(const Params&, ConvVariant, int, int, cudaStream_t);
template ConvVariant launch_wgmma<__half, 256>(const Params&, ConvVariant, int, int, cudaStream_t);
template ConvVariant launch_wgmma<__nv_bfloat16, 64>(const Params&, ConvVariant, int, int, cudaStream_t);
template ConvVariant launch_wgmma<__nv_bfloat16, 128>(const Params&, ConvVariant, int, int, cudaStream_t);
template ConvVariant launch_wgmma<__nv_bfloat16, 256>(const Params&, ConvVariant, int, int, cudaStream_t);

// The rows a halo buffer holds for p's channels (its kernel: BN, passes).
int halo_pipe_cap(int bn, int64_t ci) {
  const bool one = halo_passes(ci) == 1;
  return bn == 64 ? (one ? HaloPipe<64, 1>::CAP : HaloPipe<64, 2>::CAP)
                  : (one ? HaloPipe<128, 1>::CAP : HaloPipe<128, 2>::CAP);
}

// The probe of a whole map: for each configuration (column tile 64 or 128, one or two passes), the
// fitting sample tiles of halo buffers of its rows, laid out as its kernel lays them out.
void launch_halo_probes(const int32_t* nbr, int64_t n, int k, unsigned* fits, cudaStream_t s) {
  Params p{{nullptr, nbr, nullptr, nullptr, nullptr, n, k, 0, 0, nullptr}, nullptr, 0, n};
  const auto samples = static_cast<unsigned>(spconv::halo_samples(n));
  for (int t = 0; t < 2; ++t)
    for (int passes = 1; passes <= kHaloPasses; ++passes) {
      const int bn = t ? 128 : 64, ci = spconv::kHaloChannels * passes;
      kernel_halo_probe<<<samples, kTileRows, 0, s>>>(p, halo_pipe_cap(bn, ci), halo_by_boxes(ci, bn),
                                                       fits + 2 * t + passes - 1);
      FRUGAL_CUDA_CHECK_LAUNCH();
    }
}

}  // namespace frugal::cuda::spconv_mma
