// The kernel map on CUDA: one kernel packs every coordinate into a 64-bit key (checking its range)
// and inserts the rows into an open-addressing table (2^p ≥ 3N slots holding row + 1, 0 when empty;
// linear probing, atomicCAS on the empty slot; an equal key already there is a duplicate); a second
// probes every offset of every row and writes nbr[k, n], a warp's 32 rows of one offset one coalesced
// line (writing the mirrored entries through the submanifold symmetry instead halves the probes but
// scatters the writes: slower on every measured shell, 1.4× at 4.6M rows in sorted order). Every
// map entry is written by exactly one thread, so the map is the same as the CPU's, bit for bit. Then
// the map's fit to the halo kernel (its statistics), read back with the build's checks in one copy.
// In a Morton run order (KernelMap) the rows are sorted by their Morton keys with CUB between the two
// kernels, and the second writes column i for row order[i]; the rule's choice of the order reads back
// whether the rows came sorted, which the first kernel measures, before the second runs.
// Also the check of a map the caller assembled. Floor: N·(16 + 4K) bytes written, N·(K − 1) probes.
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <cstddef>

#include "core/device_caps.h"
#include "core/sparse_conv_backend.h"
#include "core/spconv_choose.h"
#include "cuda/common.cuh"
#include "cuda/spconv/params.cuh"

namespace frugal::cuda {

namespace {

namespace sb = spconv::backend;

// ================================ kernel map ===================================================

// What the map build or check finds, read back in one copy; all zero bytes at the start. The first
// three words hold ~v of the smallest value v found (atomicMax of ~v), 0 while none is.
struct DeviceStatus {
  unsigned long long bad_row;    // the smallest row with an unpackable coordinate
  unsigned long long dup;        // the smallest (hi << 32 | lo) over duplicate row pairs found
  unsigned long long bad_entry;  // the smallest linear index of a map entry outside [0, n]
  unsigned halo_fits[2][2];      // the map's sample tiles that fit the halo kernel (MapStats::halo_fits)
  unsigned unsorted;             // nonzero: some row's key is not above the previous row's
  // The rows' box, for the Morton keys (all maxima, so that zero bytes start them): kFrameWords words,
  // kAxisMask − (biased minimum) of x, y, z, then the biased maxima, then the largest batch index.
  unsigned frame[7];
};
constexpr int kFrameWords = 7;
// The status, then (in a build) the table, in one scratch block cleared by one memset.
constexpr size_t kStatusBytes = 128;
static_assert(sizeof(DeviceStatus) <= kStatusBytes, "the status fits its part of the scratch");

__device__ __forceinline__ void report_smallest(unsigned long long* word, unsigned long long v) { atomicMax(word, ~v); }

// One thread a row: pack its key into keys[r] (a coordinate out of range is reported and not inserted),
// then claim a slot. keys[r] is visible before the row can be found in a slot, so a thread that meets
// the row in a slot reads the row's key from keys (from L2, past any stale L1 line).
// Also measures, for the run order's rule and its sort, whether the rows come in ascending key order and
// their box (reduced a warp, then a block, then one atomic a word; blockDim.x a multiple of 32).
__global__ void kernel_insert(const int32_t* __restrict__ coords, int64_t n, uint64_t* __restrict__ keys,
                              int32_t* table, uint64_t mask, DeviceStatus* st) {
  __shared__ unsigned frame[kFrameWords];
  if (threadIdx.x < kFrameWords) frame[threadIdx.x] = 0;
  __syncthreads();
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  bool ok = r < n;
  uint64_t key = 0;
  unsigned mine[kFrameWords] = {};
  if (ok) {
    const int32_t b = coords[4 * r], x = coords[4 * r + 1], y = coords[4 * r + 2], z = coords[4 * r + 3];
    if (!sb::batch_in_range(b) || !sb::coord_in_range(x) || !sb::coord_in_range(y) || !sb::coord_in_range(z)) {
      report_smallest(&st->bad_row, static_cast<unsigned long long>(r));
      ok = false;
    } else {
      key = sb::pack_key(b, x, y, z);
      keys[r] = key;
      if (r > 0) {  // whether the rows come in ascending key order
        const int32_t* c = coords + 4 * (r - 1);
        if (!(sb::pack_key(c[0], c[1], c[2], c[3]) < key)) st->unsorted = 1;
      }
      const unsigned v[3] = {static_cast<unsigned>(x + sb::kAxisBias), static_cast<unsigned>(y + sb::kAxisBias),
                             static_cast<unsigned>(z + sb::kAxisBias)};
      for (int a = 0; a < 3; ++a) mine[a] = static_cast<unsigned>(sb::kAxisMask) - v[a], mine[3 + a] = v[a];
      mine[6] = static_cast<unsigned>(b);
    }
  }
#pragma unroll
  for (int w = 0; w < kFrameWords; ++w) {
    const unsigned m = __reduce_max_sync(0xffffffffu, mine[w]);
    if (threadIdx.x % 32 == 0 && m) atomicMax(&frame[w], m);
  }
  __syncthreads();
  if (threadIdx.x < kFrameWords && frame[threadIdx.x]) atomicMax(&st->frame[threadIdx.x], frame[threadIdx.x]);
  if (!ok) return;
  __threadfence();
  for (uint64_t s = sb::hash_key(key) & mask;; s = (s + 1) & mask) {
    const int32_t prev = atomicCAS(&table[s], 0, static_cast<int32_t>(r + 1)) - 1;
    if (prev < 0) return;
    if (__ldcg(&keys[prev]) == key) {
      const auto lo = static_cast<unsigned long long>(prev < r ? prev : r);
      const auto hi = static_cast<unsigned long long>(prev < r ? r : prev);
      report_smallest(&st->dup, hi << 32 | lo);
      return;
    }
  }
}

// Blocks of 32 rows × kQueryLanes: thread (x, y) probes offsets y, y + kQueryLanes, ... of row x, so each
// offset's 32 entries are one coalesced write (a lane a row and offset measured slower at every size).
constexpr int kQueryLanes = 8;
// Column i holds row order[i] (row i where order is nullptr).
__global__ void __launch_bounds__(32 * kQueryLanes) kernel_query(const uint64_t* __restrict__ keys, int64_t n,
                                                                 const int32_t* __restrict__ table, uint64_t mask,
                                                                 int ks, int dilation, const int32_t* order,
                                                                 int32_t* __restrict__ nbr) {
  const int64_t i = blockIdx.x * 32ll + threadIdx.x;
  if (i >= n) return;
  const int64_t r = order ? __ldg(&order[i]) : i;
  const int kv = ks * ks * ks;
  const uint64_t key = keys[r];
  for (int k = threadIdx.y; k < kv; k += kQueryLanes) {
    int32_t m = static_cast<int32_t>(n);
    if (k == kv / 2) {
      m = static_cast<int32_t>(r);
    } else {
      const int64_t qx = sb::key_x(key) + sb::axis_offset(k / (ks * ks), ks, dilation);
      const int64_t qy = sb::key_y(key) + sb::axis_offset(k / ks % ks, ks, dilation);
      const int64_t qz = sb::key_z(key) + sb::axis_offset(k % ks, ks, dilation);
      if (sb::coord_in_range(qx) && sb::coord_in_range(qy) && sb::coord_in_range(qz)) {
        const uint64_t q = sb::pack_key(sb::key_b(key), qx, qy, qz);
        for (uint64_t s = sb::hash_key(q) & mask;; s = (s + 1) & mask) {
          const int32_t t = __ldg(&table[s]) - 1;
          if (t < 0) break;
          if (__ldg(&keys[t]) == q) {
            m = t;
            break;
          }
        }
      }
    }
    nbr[k * n + i] = m;
  }
}

// The Morton keys of the rows (in the rows' frame) and their indices, to be sorted into the run order.
__global__ void kernel_morton_keys(const uint64_t* __restrict__ keys, int64_t n, int64_t lo_x, int64_t lo_y,
                                   int64_t lo_z, int bits, uint64_t* __restrict__ morton, int32_t* __restrict__ rows) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r >= n) return;
  morton[r] = sb::morton_key(keys[r], lo_x, lo_y, lo_z, bits);
  rows[r] = static_cast<int32_t>(r);
}

// The frame the build measured (DeviceStatus::frame, read back).
sb::MortonFrame frame_of(const DeviceStatus& host) {
  int64_t lo[3], hi[3];
  for (int a = 0; a < 3; ++a) {
    lo[a] = static_cast<int64_t>(sb::kAxisMask - host.frame[a]) - sb::kAxisBias;
    hi[a] = static_cast<int64_t>(host.frame[3 + a]) - sb::kAxisBias;
  }
  return sb::morton_frame(lo, hi, host.frame[6]);
}

// nbr[k, order[i]] = columns[k, i], one thread an entry.
__global__ void kernel_map_by_row(const int32_t* __restrict__ columns, const int32_t* __restrict__ order,
                                  int32_t* __restrict__ nbr, int64_t n, int64_t total) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t k = e / n, row = sb::column_row(order, e - k * n, n);
    if (row >= 0) nbr[k * n + row] = columns[e];
  }
}

// The run order: rows sorted by their Morton keys (unique, so the order is the one the CPU sorts too),
// with CUB's radix sort; temporaries from the stream-ordered pool.
void sort_by_morton(const uint64_t* keys, int64_t n, const sb::MortonFrame& f, int32_t* order, cudaStream_t s) {
  const int items = static_cast<int>(n);
  size_t temp_bytes = 0;
  FRUGAL_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, static_cast<const uint64_t*>(nullptr),
                                                    static_cast<uint64_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                                    static_cast<int32_t*>(nullptr), items, 0, f.key_bits, s));
  auto aligned = [](size_t bytes) { return (bytes + 255) / 256 * 256; };
  const size_t key_bytes = aligned(static_cast<size_t>(n) * sizeof(uint64_t));
  const size_t row_bytes = aligned(static_cast<size_t>(n) * sizeof(int32_t));
  Scratch scratch(2 * key_bytes + row_bytes + temp_bytes, s);
  auto* in = scratch.as<uint64_t>();
  auto* out = reinterpret_cast<uint64_t*>(scratch.as<char>() + key_bytes);
  auto* rows = reinterpret_cast<int32_t*>(scratch.as<char>() + 2 * key_bytes);
  void* temp = scratch.as<char>() + 2 * key_bytes + row_bytes;
  constexpr int threads = 256;
  kernel_morton_keys<<<static_cast<unsigned>(ceil_div<int64_t>(n, threads)), threads, 0, s>>>(
      keys, n, f.lo[0], f.lo[1], f.lo[2], f.bits, in, rows);
  FRUGAL_CUDA_CHECK_LAUNCH();
  FRUGAL_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, in, out, rows, order, items, 0, f.key_bits, s));
}

// Every entry of nbr [k, n] (total = k·n) in [0, n]; the smallest linear index of one that is not.
__global__ void kernel_check_map(const int32_t* __restrict__ nbr, int64_t total, int64_t n, DeviceStatus* st) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t v = nbr[i];
    if (v < 0 || v > n) report_smallest(&st->bad_entry, static_cast<unsigned long long>(i));
  }
}

// The map's fit to the pipelined halo kernel, into st, where that kernel can run (sm_90a, K ≤ 32):
// measured once here so that the conv's choice reads it from the map's statistics. Returns the sample
// tiles (0: not measured).
int probe_halo_fit(const int32_t* nbr, int64_t n, int k, int device, DeviceStatus* st, cudaStream_t s) {
  if (k > spconv::kMaxMaskedOffsets || !device_caps(device).sm90a) return 0;
  spconv_kernels::launch_halo_probes(nbr, n, k, &st->halo_fits[0][0], s);
  return spconv::halo_samples(n);
}

// Waits for s, then turns the device's status into the backend's.
sb::MapStatus read_status(const DeviceStatus& host, int samples) {
  sb::MapStatus out;
  if (host.bad_row) out.bad_row = static_cast<int64_t>(~host.bad_row);
  if (host.dup) {
    out.dup_row_a = static_cast<int64_t>(~host.dup & 0xffffffffull);
    out.dup_row_b = static_cast<int64_t>(~host.dup >> 32);
  }
  if (host.bad_entry) out.bad_entry = static_cast<int64_t>(~host.bad_entry);
  out.halo_samples = samples;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) out.halo_fits[i][j] = static_cast<int>(host.halo_fits[i][j]);
  return out;
}

}  // namespace

spconv::backend::MapStatus spconv_build_map(const sb::MapArgs& a, Stream stream) {
  DeviceGuard guard(a.device);
  const cudaStream_t s = to_cuda(stream);
  const int64_t n = a.n;
  const int ks = a.kernel_size, kv = ks * ks * ks;
  const uint64_t cap = sb::table_capacity(n);
  const size_t cleared = kStatusBytes + cap * sizeof(int32_t);
  DeviceStatus host{};
  int samples = 0;
  spconv::RowOrder order = spconv::RowOrder::given;
  {
    Scratch scratch(cleared + n * sizeof(uint64_t), s);
    auto* st = scratch.as<DeviceStatus>();
    auto* table = reinterpret_cast<int32_t*>(scratch.as<char>() + kStatusBytes);
    auto* keys = reinterpret_cast<uint64_t*>(scratch.as<char>() + cleared);  // 8-byte aligned: cap ≥ 16
    FRUGAL_CUDA_CHECK(cudaMemsetAsync(st, 0, cleared, s));
    constexpr int threads = 256;
    kernel_insert<<<static_cast<unsigned>(ceil_div<int64_t>(n, threads)), threads, 0, s>>>(a.coords, n, keys, table,
                                                                                             cap - 1, st);
    FRUGAL_CUDA_CHECK_LAUNCH();
    if (a.order && a.forced_order != spconv::RowOrder::given) {
      // The rule needs to know whether the rows are sorted, and the sort their box: one more wait (bad
      // input ends here).
      FRUGAL_CUDA_CHECK(cudaMemcpyAsync(&host, st, sizeof(DeviceStatus), cudaMemcpyDeviceToHost, s));
      FRUGAL_CUDA_CHECK(cudaStreamSynchronize(s));
      if (host.bad_row || host.dup) return read_status(host, 0);
      order = a.forced_order ? *a.forced_order : spconv::choose_row_order(host.unsorted == 0);
    }
    const bool morton = order == spconv::RowOrder::morton;
    if (morton) sort_by_morton(keys, n, frame_of(host), a.order, s);
    kernel_query<<<static_cast<unsigned>(ceil_div<int64_t>(n, 32)), dim3(32, kQueryLanes), 0, s>>>(
        keys, n, table, cap - 1, ks, a.dilation, morton ? a.order : nullptr, a.nbr);
    FRUGAL_CUDA_CHECK_LAUNCH();
    samples = probe_halo_fit(a.nbr, n, kv, a.device, st, s);
    FRUGAL_CUDA_CHECK(cudaMemcpyAsync(&host, st, sizeof(DeviceStatus), cudaMemcpyDeviceToHost, s));
  }
  FRUGAL_CUDA_CHECK(cudaStreamSynchronize(s));
  sb::MapStatus out = read_status(host, samples);
  out.order = order;
  return out;
}

void spconv_map_by_row(const int32_t* columns, const int32_t* order, int32_t* nbr, int64_t n, int k, int device,
                       Stream stream) {
  DeviceGuard guard(device);
  const cudaStream_t s = to_cuda(stream);
  const int64_t total = static_cast<int64_t>(k) * n;
  constexpr int threads = 256;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>(ceil_div<int64_t>(total, threads), 1 << 16));
  kernel_map_by_row<<<blocks, threads, 0, s>>>(columns, order, nbr, n, total);
  FRUGAL_CUDA_CHECK_LAUNCH();
}

spconv::backend::MapStatus spconv_check_map(const int32_t* nbr, int64_t n, int k, int device, Stream stream) {
  DeviceGuard guard(device);
  const cudaStream_t s = to_cuda(stream);
  DeviceStatus host{};
  int samples = 0;
  {
    Scratch status(sizeof(DeviceStatus), s);
    auto* st = status.as<DeviceStatus>();
    FRUGAL_CUDA_CHECK(cudaMemsetAsync(st, 0, sizeof(DeviceStatus), s));
    const int64_t total = static_cast<int64_t>(k) * n;
    constexpr int threads = 256;
    const auto blocks = static_cast<unsigned>(std::min<int64_t>(ceil_div<int64_t>(total, threads), 1 << 16));
    kernel_check_map<<<blocks, threads, 0, s>>>(nbr, total, n, st);
    FRUGAL_CUDA_CHECK_LAUNCH();
    samples = probe_halo_fit(nbr, n, k, device, st, s);
    FRUGAL_CUDA_CHECK(cudaMemcpyAsync(&host, st, sizeof(DeviceStatus), cudaMemcpyDeviceToHost, s));
  }
  FRUGAL_CUDA_CHECK(cudaStreamSynchronize(s));
  return read_status(host, samples);
}

}  // namespace frugal::cuda
