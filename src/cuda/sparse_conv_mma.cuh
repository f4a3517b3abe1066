// The tensor-core sparse conv with neighbor-sorted rows (sparse_conv_mma.cu): what the dispatcher in
// sparse_conv.cu needs to choose it, size its workspace and run it. Also read by bench/spconv.cu,
// which replicates the row order on the host to report the share of useful products.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/sparse_conv_backend.h"

namespace frugal::cuda {

// What every conv kernel takes (the SIMT and WMMA kernels of sparse_conv.cu, and the mma kernel,
// which adds its row order): pointers and sizes, from spconv::backend::ConvArgs.
struct ConvParams {
  const void* feats;
  const int32_t* nbr;
  const void* weight;
  const void* bias;
  void* out;
  int64_t n;
  int k, ci, co;
  unsigned long long* bad;  // nullptr: unchecked
};

}  // namespace frugal::cuda

namespace frugal::cuda::spconv_mma {

// Rows are reordered within windows of kWindow consecutive rows (one thread block sorts one window
// in shared memory: 512 threads × 16 keys). A window this size keeps the gathered neighbors local
// (8192 rows are about two x-slabs of a 1024³ sphere shell, so their neighbors stay in L2) while
// grouping rows of equal neighbor masks well: on 256³–1024³ shells, 92% of the products the
// 16-row groups of the sorted order compute are useful (89% counting the busier warp), against 62%
// in the map's order (bench/results/2026-11-29-spconv-tc.md).
constexpr int kWindow = 8192;
// Rows per launch where the rows are sorted: the row order of one chunk lives in the workspace (4 bytes
// a row), so 2^22 rows keep it at 16 MiB whatever N is. Windows and tiles start afresh at each chunk
// (2^22 is a multiple of both, so by default they fall where one launch over all rows would put them).
// Unsorted calls take all their rows in one launch: one pipeline fill and drain, one hand-off launch (the
// C = 64 R = 1024 shell, 4.6 M rows: 1.6% faster than two launches; bench/results/2026-12-01-s28.md).
constexpr int64_t kChunkRows = int64_t{1} << 22;
constexpr int kTileRows = 128;   // output rows per block
constexpr int kGroupRows = 16;   // rows per m16 tensor-core fragment: the granularity of skipping
constexpr int kMaxOffsets = 32;  // the neighbor mask is one 32-bit word
// The offsets the pipelined halo kernel serves (its map slice and slot areas are sized for them): 27 (a
// 3×3×3 kernel) where it keeps three tile states (Ci ≤ 64 in, BN = 64: every byte of those areas is a
// halo row less), kMaxOffsets elsewhere.
__host__ __device__ constexpr int halo_max_offsets(int bn, int64_t ci) { return bn == 64 && ci <= 64 ? 27 : kMaxOffsets; }

// Whether the kernel can take these arguments: f16/bf16, K ≤ 32, Ci and Co multiples of 8 and
// 16-byte aligned feats, weight and out (16-byte cp.async copies and stores).
bool supports(const spconv::backend::ConvArgs& a);
// The output-channel tile: a.tile_co when set (64, 128 or 256), else chosen from Co.
int tile_co(const spconv::backend::ConvArgs& a);
// Rows per launch (a.chunk_rows when set, else kChunkRows where the rows are sorted and all of them
// where not; smaller when Co needs many column tiles, so that one launch's grid fits 2^31 - 1 blocks).
int64_t chunk_rows(const spconv::backend::ConvArgs& a);
// The wgmma kernel's split over offsets: a.splits when set, else, when one launch's grid would
// cover fewer blocks than the device has multiprocessors, enough splits to cover them (at most 8,
// and at most what kMaxSplitBytes of f32 partials hold); 1 for the mma kernel.
constexpr size_t kMaxSplitBytes = size_t{64} << 20;
int splits(const spconv::backend::ConvArgs& a);
// The wgmma kernel's rows a block: a.tile_rows when set, else by the rule in sparse_conv_mma.cu;
// always 128 for the mma kernel and for 256-wide column tiles (256 × 256 f32 accumulators do not
// fit the registers).
int tile_rows(const spconv::backend::ConvArgs& a);
// Whether the wgmma kernel runs warp-specialized, and with how many blocks a multiprocessor (0: not):
// a.wgmma_ws when ≥ 0, else by the rule in sparse_conv_mma.cu.
int warp_specialized(const spconv::backend::ConvArgs& a);
// Whether run() sorts the rows: a.sort_rows when 0 or 1; else the mma kernel always, the wgmma
// kernel with 256-row tiles or the two-block warp-specialized kernel never (measured faster on the
// map's order at every size, results files tc4 and tc5), with 128-row tiles when N·Ci·Co ≥
// kSortWork. On the H200 (2026-11-29, results file tc3; 15 shapes) the map's
// own order was faster for the wgmma kernel, or within 1%, on every shape below that (0.23 vs
// 0.31 ms at N = 8.4K, C = 512; 1.04 vs 1.12 at N = 1.2M, C = 64), and sorted rows faster, or
// within 0.5%, on every shape above it (27.3 vs 32.4 ms at N = 4.6M, C = 256; 2.79 vs 3.08 at
// N = 1.2M, C = 128; 1.14 vs 1.19 at N = 169K, 128 → 512): sorting trades gather locality for
// fewer products, which pays only where the tensor-core work is large.
constexpr double kSortWork = 1e10;
bool sorts(const spconv::backend::ConvArgs& a);
// Workspace bytes run() needs: the row order (when rows are sorted), then the f32 partials of a
// split launch (splits × rows of a launch × Co × 4 bytes, when splits > 1), then, where the
// pipelined halo kernel may run, its hand-off list (16 bytes of counts, 4 bytes a tile of a launch).
size_t workspace_bytes(const spconv::backend::ConvArgs& a);
// Whether the wgmma kernel (sparse_conv_wgmma.cu) runs on this device: the code the driver loads
// for it was compiled for sm_90a (a one-time probe per device; false on builds without sm_90a).
bool wgmma_available(int device);

// The words of Params::handoff_count, the hand-off list's header (kHandoffHeader bytes before the list):
// the tiles listed; the halo kernel's blocks done listing; the tiles its blocks have claimed; the map
// probe's fitting sample tiles. The first three are zeroed before each halo launch.
enum HandoffWord : int { kListed = 0, kListersDone = 1, kTilesClaimed = 2, kProbeFits = 3, kHandoffWords = 4 };
constexpr size_t kHandoffHeader = 16;
static_assert(kHandoffHeader >= kHandoffWords * sizeof(unsigned) && kHandoffHeader % 16 == 0,
              "the header holds the words and keeps the list 16-byte aligned");

// One launch's arguments (both tensor-core kernels): the conv's, plus the row order of the launch.
struct Params : ConvParams {
  const int32_t* perm;      // row at sorted position row_begin + i; nullptr: the identity
  int64_t row_begin, rows;  // this launch's rows
  float* part = nullptr;    // wgmma, split: [splits, rows, co] f32 partials (blockIdx.y: the split)
  // The pipelined halo kernel's hand-off: the tiles of the launch whose rows do not fit its halo
  // (tile indices, in no particular order), behind the counts of HandoffWord; kernel_conv_wgmma_ws's
  // hand-off instance, launched after it, runs exactly those tiles once all handoff_blocks are done.
  // (Params stays within 128 bytes: at 136, nvcc reloaded it throughout every kernel taking it, and the
  // conv kernels ran 1.6–3.5% slower on the H200; bench/results/2026-11-30-spconv-handoff.md.)
  // halo_min_fits > 0: whether the rows suit the halo kernel is decided on the device (see run()): a
  // probe of the map (halo_probe) counts its fitting sample tiles into handoff_count[kProbeFits]; where fewer
  // than halo_min_fits & ~kHaloOthersFollow fit, the halo kernel hands every tile to its hand-off
  // kernel, or, with kHaloOthersFollow set, returns at once; where enough fit, the other wgmma kernels
  // launched with it set (the rules' kernel, not the hand-off instance) return at once.
  int32_t* handoff = nullptr;
  unsigned* handoff_count = nullptr;
  unsigned handoff_blocks = 0;
  unsigned halo_min_fits = 0;
};
static_assert(sizeof(Params) <= 128, "the kernels' parameter block stays within 128 bytes");
constexpr unsigned kHaloOthersFollow = 1u << 31;  // in Params::halo_min_fits: the rules' kernel follows
// The wgmma kernel over one launch's rows, T = __half or __nv_bfloat16, BN = 64, 128 or 256.
// With p.part set, launches `splits` blocks per tile (offsets [k·j/splits, k·(j+1)/splits) each)
// writing f32 partials without bias; finish_split() then sums them in split order into p.out.
// rows: 128 or (BN ≤ 128) 256 rows a block.
// ws: the warp-specialized kernel with 1 or (BN = 64, 128-row tiles) 2 blocks a multiprocessor, 0 not
// (256-row tiles: one block), 4 the pipelined halo kernel where it serves (p.handoff set, Ci ≤ 128,
// Co ≤ BN ≤ 128; its tiles are 128 rows whatever `rows` says), else as 1.
template <typename T, int BN>
void launch_wgmma(const Params& p, int ws, int rows, int splits, cudaStream_t s);
template <typename T>
void finish_split(const Params& p, int splits, cudaStream_t s);
// Whether the rows of launch p suit the pipelined halo kernel (launch_wgmma's ws = 4) with BN output
// channels a tile: at least 3/4 (halo_min_fits) of a sample of its tiles fit the kernel's halo buffer
// (whose rows depend on BN): 1 yes, 0 no, −1 not known yet. The first question about a map (device,
// nbr, n, k, the launch's rows and the buffer's rows) enqueues a small probe on s whose count comes
// back without a wait, and answers −1; later questions answer from the count once it is in (the last 64
// maps are remembered). No probe while s is being captured into a graph (−1). A stale answer (a map
// rewritten in place) costs time, never correctness or repeatability: see run().
int halo_pipe_suits(const Params& p, int bn, int device, cudaStream_t s);
// The fitting sample tiles that make launch p's rows suit the halo kernel (the probe's threshold).
unsigned halo_min_fits(const Params& p);
// The probe on s: launch p's fitting sample tiles (buffers of BN-wide tiles) into p.handoff_count[kProbeFits].
void halo_probe(const Params& p, int bn, cudaStream_t s);
// Launches of the pipelined halo kernel so far (for the tests of the rule).
int64_t halo_pipe_launches();

// Runs the conv (a must be supported; for ConvKernel::wgmma also wgmma_available). bad: the
// checked-map flag or nullptr; workspace: at least workspace_bytes(a) bytes, 16-byte aligned
// (unused when it is 0).
void run(const spconv::backend::ConvArgs& a, unsigned long long* bad, void* workspace, cudaStream_t s);

#if defined(__CUDACC__)
// Four 8 × 8 b16 matrices from shared memory (lanes 8j .. 8j + 7 give the row addresses of matrix j):
// the A fragment of an m16n8k16 mma (and of a warp's 16 rows of a register-A wgmma).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t smem_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem) {
  ldmatrix_x4(r, static_cast<uint32_t>(__cvta_generic_to_shared(smem)));
}

// The offsets k_lo ≤ k < k_hi whose bit is set in mask, ascending, into act; returns their count (the
// steps of a tile: every tensor-core conv kernel's prologue lists its tile's offsets this way).
__device__ __forceinline__ int list_offsets(uint32_t mask, int k_lo, int k_hi, int8_t* act) {
  int c = 0;
  for (int k = k_lo; k < k_hi; ++k)
    if (mask >> k & 1u) act[c++] = static_cast<int8_t>(k);
  return c;
}

// ---- the tile's prologue (both wgmma kernels; the mma kernel has its own, loading entry by entry) ----
// (The mma kernel on this prologue: bitwise the same outputs, but 2–4% slower on its default sorted
// rows at R = 512, C = 64 and 128, 1–5% faster unsorted; H200, 2026-11-30,
// bench/results/2026-11-30-spconv-halo.md. So it keeps its own.)
// The tile's map slice into shared memory, checked: nb_s[k · BM + r] = the neighbor row of tile row
// r at offset k (-1: none), row_s[r] = the output row (-1: past the end), group_s[g] = the offsets
// present in 16-row group g, act_s[0 .. act_count) = the offsets present in the tile, ascending,
// restricted to this block's offset range when the launch is split (gridDim.y > 1).
// Each of the first KH·BM threads owns one row and every KH-th offset (the others, whole warps, only
// join the barriers); its map entries are loaded before any is used, so their latencies overlap. Ends
// with a barrier of all THREADS threads.
template <int BM, int THREADS>
__device__ __forceinline__ void tile_prologue(const Params& p, int64_t t0, int32_t* nb_s, int32_t* row_s,
                                              uint32_t* group_s, int8_t* act_s, int* act_count) {
  constexpr int GROUPS = BM / kGroupRows, KH = THREADS / BM, KJ = (kMaxOffsets + KH - 1) / KH, LOADERS = KH * BM;
  static_assert(KH >= 1 && BM % 32 == 0, "whole warps per offset");
  const int tid = threadIdx.x, lane = tid % 32;
  if (tid < GROUPS) group_s[tid] = 0;
  const bool loader = LOADERS == THREADS || tid < LOADERS;
  const int r = tid % BM, kh = tid / BM;
  int64_t row = -1;
  if (loader && t0 + r < p.rows) row = p.perm ? __ldg(&p.perm[t0 + r]) : p.row_begin + t0 + r;
  if (loader && kh == 0) row_s[r] = static_cast<int32_t>(row);
  int32_t v[KJ];
#pragma unroll
  for (int j = 0; j < KJ; ++j) {
    const int k = kh + KH * j;
    v[j] = row >= 0 && k < p.k ? __ldg(&p.nbr[k * p.n + row]) : -1;
  }
  __syncthreads();  // group_s is zero
#pragma unroll
  for (int j = 0; j < KJ; ++j) {
    const int k = kh + KH * j;  // uniform per warp
    if (!loader || k >= p.k) break;
    int32_t m = -1;
    if (row >= 0) {
      if (v[j] >= 0 && v[j] < p.n)
        m = v[j];
      else if (v[j] != p.n && p.bad)
        atomicMin(p.bad, static_cast<unsigned long long>(k * p.n + row));
    }
    nb_s[k * BM + r] = m;
    const unsigned hits = __ballot_sync(0xffffffffu, m >= 0);
    if (lane == 0) {  // this warp's rows r .. r + 31 are groups r/16 and r/16 + 1
      if (hits & 0xffffu) atomicOr(&group_s[r / kGroupRows], 1u << k);
      if (hits >> 16) atomicOr(&group_s[r / kGroupRows + 1], 1u << k);
    }
  }
  __syncthreads();
  if (tid == 0) {
    uint32_t any = 0;
    for (int g = 0; g < GROUPS; ++g) any |= group_s[g];
    // A split launch (gridDim.y > 1): this block sums offsets [k·j/S, k·(j+1)/S) only.
    const int j = blockIdx.y, S = gridDim.y;
    const int k_lo = p.k * j / S, k_hi = p.k * (j + 1) / S;
    *act_count = list_offsets(any, k_lo, k_hi, act_s);
  }
  __syncthreads();
}
// The epilogue's last step (every tensor-core conv kernel): the tile staged in shared memory (cs,
// BM rows of LDC elements, bias added and rounded) written to the output, one 16-byte store per 8
// channels of a row, rows past the end (row_s < 0) and channels past Co skipped. Each output row is
// written once; no atomics.
template <typename T, int BM, int BN, int LDC, int THREADS>
__device__ __forceinline__ void store_staged_tile(const Params& p, const T* cs, const int32_t* row_s, int co0) {
  T* out = static_cast<T*>(p.out);
  for (int i = threadIdx.x; i < BM * (BN / 8); i += THREADS) {
    const int r = i / (BN / 8), c = i % (BN / 8) * 8;
    const int32_t row = row_s[r];
    if (row < 0 || co0 + c >= p.co) continue;
    *reinterpret_cast<uint4*>(out + static_cast<int64_t>(row) * p.co + co0 + c) =
        *reinterpret_cast<const uint4*>(cs + r * LDC + c);
  }
}
#endif  // __CUDACC__

}  // namespace frugal::cuda::spconv_mma
