// The kernel map on CUDA. Pack every coordinate into a 64-bit key (checking its range, and measuring
// the set's extent), insert the rows into an open-addressing table of int32 row indices (2^p ≥ 2N
// slots, linear probing, atomicCAS on the empty slot; an equal key already there is a duplicate).
// Then probe only offsets k < K/2 and write both nbr[k, n] = m and, by the submanifold symmetry,
// nbr[K-1-k, m] = n, measure the map's fit to the halo kernel, and read the checks and the fit back (one
// wait). Every map entry is written by exactly one thread, so the map is the same as the CPU's, bit for
// bit.
// Where the build may store the map in its locality order (KernelMap::build), the fit in the rows' own
// order is measured before the map is written, on a sample of rows looked up in the hash table, and
// read back with the checks (the rule orders_rows decides from it); the map is written after that, in
// stream order; where the rule takes the locality order, the rows are sorted by their Morton key
// (cub::DeviceRadixSort on the bits the set's extent needs, the extent read back with the checks) and the
// same probes write the map with its columns in that order (positions: column i holds row order[i]),
// every access but the hash table's local in space; then the fit in that order is measured and read
// back (a second wait). Also the check of a map the caller assembled, and the map's copy back
// to the rows' own order. Floor: N·(16 + 4K) bytes written, N·K/2 hash probes.
#include <algorithm>
#include <bit>
#include <climits>
#include <cstddef>
#include <cub/device/device_radix_sort.cuh>

#include "core/device_caps.h"
#include "core/sparse_conv_backend.h"
#include "core/spconv_choose.h"
#include "cuda/common.cuh"
#include "cuda/spconv/params.cuh"

namespace frugal::cuda {

namespace {

namespace sb = spconv::backend;
namespace sk = spconv_kernels;

constexpr unsigned long long kNone = ULLONG_MAX;
constexpr int kThreads = 256;

// ================================ kernel map ===================================================

// What the map build or check finds, read back in one copy: the first three words and lo start as
// all ones (0xff bytes), the fits and hi as 0.
struct DeviceStatus {
  unsigned long long bad_row;    // smallest row with an unpackable coordinate
  unsigned long long dup;        // smallest (hi << 32 | lo) over duplicate row pairs found
  unsigned long long bad_entry;  // smallest linear index of a map entry outside [0, n]
  unsigned lo[4];                // smallest x, y, z + kAxisBias over the packable rows ([3] unused)
  unsigned halo_fits[2][2];      // the map's sample tiles that fit the halo kernel (MapStats::halo_fits)
  unsigned hi[4];                // largest x, y, z + kAxisBias and largest batch over the packable rows
};
constexpr size_t kStatusOnesBytes = offsetof(DeviceStatus, halo_fits);
static_assert(offsetof(DeviceStatus, lo) == 3 * sizeof(unsigned long long), "lo follows the three words");
static_assert(sizeof(DeviceStatus) == kStatusOnesBytes + 2 * sizeof(unsigned[4]), "the fits and hi end it");

// The keys of every row, and the extent of the packable ones. A grid-stride loop over a bounded grid, so
// that the extent costs a few thousand atomics (one a block and word after a block reduction).
constexpr unsigned kPackBlocks = 2048;
__global__ void __launch_bounds__(kThreads)
    kernel_pack_keys(const int32_t* __restrict__ coords, int64_t n, uint64_t* __restrict__ keys, DeviceStatus* st) {
  unsigned lo[3] = {UINT_MAX, UINT_MAX, UINT_MAX}, hi[4] = {0, 0, 0, 0};
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < n;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t b = coords[4 * r], x = coords[4 * r + 1], y = coords[4 * r + 2], z = coords[4 * r + 3];
    if (!sb::batch_in_range(b) || !sb::coord_in_range(x) || !sb::coord_in_range(y) || !sb::coord_in_range(z)) {
      atomicMin(&st->bad_row, static_cast<unsigned long long>(r));
    } else {
      const unsigned c[3] = {static_cast<unsigned>(x + sb::kAxisBias), static_cast<unsigned>(y + sb::kAxisBias),
                             static_cast<unsigned>(z + sb::kAxisBias)};
#pragma unroll
      for (int a = 0; a < 3; ++a) lo[a] = min(lo[a], c[a]), hi[a] = max(hi[a], c[a]);
      hi[3] = max(hi[3], static_cast<unsigned>(b));
    }
    keys[r] = sb::pack_key(b, x, y, z);
  }
  __shared__ unsigned warp_ext[kThreads / 32][7];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int a = 0; a < 3; ++a) lo[a] = __reduce_min_sync(0xffffffffu, lo[a]);
#pragma unroll
  for (int a = 0; a < 4; ++a) hi[a] = __reduce_max_sync(0xffffffffu, hi[a]);
  if (lane == 0)
    for (int a = 0; a < 7; ++a) warp_ext[warp][a] = a < 3 ? lo[a] : hi[a - 3];
  __syncthreads();
  if (threadIdx.x < 7) {
    const int a = threadIdx.x;
    unsigned v = warp_ext[0][a];
    for (int w = 1; w < kThreads / 32; ++w) v = a < 3 ? min(v, warp_ext[w][a]) : max(v, warp_ext[w][a]);
    if (a < 3)
      atomicMin(&st->lo[a], v);
    else
      atomicMax(&st->hi[a - 3], v);
  }
}

__global__ void kernel_insert(const uint64_t* __restrict__ keys, int64_t n, int32_t* table, uint64_t mask,
                              DeviceStatus* st) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r >= n) return;
  const uint64_t key = keys[r];
  for (uint64_t s = sb::hash_key(key) & mask;; s = (s + 1) & mask) {
    const int32_t prev = atomicCAS(&table[s], sb::kEmptySlot, static_cast<int32_t>(r));
    if (prev == sb::kEmptySlot) return;
    if (keys[prev] == key) {
      const auto lo = static_cast<unsigned long long>(prev < r ? prev : r);
      const auto hi = static_cast<unsigned long long>(prev < r ? r : prev);
      atomicMin(&st->dup, hi << 32 | lo);
      return;
    }
  }
}

// The Morton key of every row in frame f (from its packed key), and the row index beside it: the sort's input.
__global__ void kernel_morton_keys(const uint64_t* __restrict__ keys, int64_t n, sb::MortonFrame f,
                                   uint64_t* __restrict__ morton, int32_t* __restrict__ rows) {
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < n;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t k = keys[r];
    morton[r] = sb::morton_key(f, sb::key_b(k), sb::key_x(k), sb::key_y(k), sb::key_z(k));
    rows[r] = static_cast<int32_t>(r);
  }
}

// inv[order[i]] = i: the position of every row.
__global__ void kernel_invert(const int32_t* __restrict__ order, int64_t n, int32_t* __restrict__ inv) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    inv[order[i]] = static_cast<int32_t>(i);
}

// Rows K/2 .. K-1 of the map: the centre holds each position's own row (order[i], or i), the others
// start as the sentinel and receive their hits from the neighbors' probes.
__global__ void kernel_fill_upper(int32_t* __restrict__ nbr_half, int64_t n, int64_t total,
                                  const int32_t* __restrict__ order) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    nbr_half[i] = i < n ? (order ? order[i] : static_cast<int32_t>(i)) : static_cast<int32_t>(n);
}

// blockIdx.y = k in [0, K/2): one probe per (position, k). Position i holds row order[i] with the Morton
// key morton[i] (sorted: both read in order), or row i with key keys[i] where order is null; the mirrored
// entry goes to the neighbor's position inv[m] (or m).
__global__ void kernel_query(sk::VoxelTable t, int64_t n, int ks, int dilation, const int32_t* __restrict__ order,
                             const int32_t* __restrict__ inv, const uint64_t* __restrict__ morton, sb::MortonFrame f,
                             int32_t* __restrict__ nbr) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const int k = blockIdx.y, kv = ks * ks * ks;
  const int32_t r = order ? __ldg(&order[i]) : static_cast<int32_t>(i);
  const uint64_t key = order ? sb::packed_from_morton(f, __ldg(&morton[i])) : __ldg(&t.keys[i]);
  const int32_t m = t.neighbor(key, k, ks, dilation);
  nbr[k * n + i] = m < 0 ? static_cast<int32_t>(n) : m;
  if (m >= 0) nbr[static_cast<int64_t>(kv - 1 - k) * n + (inv ? __ldg(&inv[m]) : m)] = r;
}

// Every entry of nbr [k, n] (total = k·n) in [0, n]; the smallest linear index of one that is not.
__global__ void kernel_check_map(const int32_t* __restrict__ nbr, int64_t total, int64_t n, DeviceStatus* st) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t v = nbr[i];
    if (v < 0 || v > n) atomicMin(&st->bad_entry, static_cast<unsigned long long>(i));
  }
}

// nbr[kk, order[i]] = table[kk, i]: blockIdx.y = kk.
__global__ void kernel_unorder(const int32_t* __restrict__ table, const int32_t* __restrict__ order, int64_t n,
                               int32_t* __restrict__ nbr) {
  const int64_t base = static_cast<int64_t>(blockIdx.y) * n;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    nbr[base + order[i]] = table[base + i];
}

unsigned grid_for(int64_t items, int64_t max_blocks = 1 << 20) {
  return static_cast<unsigned>(std::clamp<int64_t>(ceil_div<int64_t>(items, kThreads), 1, max_blocks));
}

// The status buffer, set up on s: the three words and lo all ones, the fits and hi 0.
void clear_status(DeviceStatus* st, cudaStream_t s) {
  FRUGAL_CUDA_CHECK(cudaMemsetAsync(st, 0xff, kStatusOnesBytes, s));
  FRUGAL_CUDA_CHECK(cudaMemsetAsync(st->halo_fits, 0, sizeof(DeviceStatus) - kStatusOnesBytes, s));
}

// Copies the status to the host and waits for s.
void read_back(const DeviceStatus* st, DeviceStatus* host, cudaStream_t s) {
  FRUGAL_CUDA_CHECK(cudaMemcpyAsync(host, st, sizeof(DeviceStatus), cudaMemcpyDeviceToHost, s));
  FRUGAL_CUDA_CHECK(cudaStreamSynchronize(s));
}

// The device's status as the backend's; the fits of `samples` sample tiles.
sb::MapStatus to_status(const DeviceStatus& host, int samples) {
  sb::MapStatus out;
  if (host.bad_row != kNone) out.bad_row = static_cast<int64_t>(host.bad_row);
  if (host.dup != kNone) {
    out.dup_row_a = static_cast<int64_t>(host.dup & 0xffffffffull);
    out.dup_row_b = static_cast<int64_t>(host.dup >> 32);
  }
  if (host.bad_entry != kNone) out.bad_entry = static_cast<int64_t>(host.bad_entry);
  out.halo_samples = samples;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) out.halo_fits[i][j] = static_cast<int>(host.halo_fits[i][j]);
  return out;
}

// What the rule orders_rows reads: the map's statistics in the rows' own order.
spconv::MapStats own_order_stats(const sb::MapStatus& s, int64_t n, int k) {
  spconv::MapStats m;
  m.rows = n;
  m.offsets = k;
  m.valid = true;
  m.halo_samples = s.halo_samples;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) m.halo_fits[i][j] = s.halo_fits[i][j];
  return m;
}

// The frame of the set's Morton keys (from its extent, read back with the checks) and the bits the
// sort looks at: 3 per bit of the largest extent, and those of the largest batch.
sb::MortonFrame morton_frame(const DeviceStatus& host, int* end_bit) {
  sb::MortonFrame f;
  unsigned extent = 0;
  for (int a = 0; a < 3; ++a) {
    f.lo[a] = static_cast<int32_t>(static_cast<int64_t>(host.lo[a]) - sb::kAxisBias);
    extent = std::max(extent, host.hi[a] - host.lo[a]);
  }
  f.bits = std::bit_width(extent);
  *end_bit = 3 * f.bits + std::bit_width(host.hi[3]);
  return f;
}

// The map in the locality order into a.nbr, and the order into *a.order: the rows sorted by their
// Morton keys, then the probes over positions. Stream-ordered; the scratch is freed in stream order.
void build_in_locality_order(const sb::MapArgs& a, const sk::VoxelTable& t, const DeviceStatus& host, cudaStream_t s) {
  const int64_t n = a.n;
  const int ks = a.kernel_size, kv = ks * ks * ks, half = kv / 2;
  int end_bit = 0;
  const sb::MortonFrame f = morton_frame(host, &end_bit);
  *a.order = Tensor::empty({n}, DType::i32, Device::cuda(a.device));
  int32_t* order = a.order->data_as<int32_t>();
  Scratch keys_in(n * sizeof(uint64_t), s), keys_out(n * sizeof(uint64_t), s), rows(n * sizeof(int32_t), s),
      inv(n * sizeof(int32_t), s);
  kernel_morton_keys<<<grid_for(n, kPackBlocks), kThreads, 0, s>>>(t.keys, n, f, keys_in.as<uint64_t>(),
                                                                   rows.as<int32_t>());
  FRUGAL_CUDA_CHECK_LAUNCH();
  size_t temp_bytes = 0;
  const int items = static_cast<int>(n);  // n < INT32_MAX (checked by the API)
  FRUGAL_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys_in.as<uint64_t>(),
                                                    keys_out.as<uint64_t>(), rows.as<int32_t>(), order, items, 0,
                                                    end_bit, s));
  {
    Scratch temp(std::max<size_t>(temp_bytes, 16), s);
    FRUGAL_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.as<void>(), temp_bytes, keys_in.as<uint64_t>(),
                                                      keys_out.as<uint64_t>(), rows.as<int32_t>(), order, items, 0,
                                                      end_bit, s));
  }
  kernel_invert<<<grid_for(n, kPackBlocks), kThreads, 0, s>>>(order, n, inv.as<int32_t>());
  FRUGAL_CUDA_CHECK_LAUNCH();
  const int64_t upper = (kv - half) * n;
  kernel_fill_upper<<<grid_for(upper), kThreads, 0, s>>>(a.nbr + half * n, n, upper, order);
  FRUGAL_CUDA_CHECK_LAUNCH();
  if (half > 0) {
    kernel_query<<<dim3(grid_for(n, INT32_MAX), half), kThreads, 0, s>>>(t, n, ks, a.dilation, order, inv.as<int32_t>(),
                                                                         keys_out.as<uint64_t>(), f, a.nbr);
    FRUGAL_CUDA_CHECK_LAUNCH();
  }
}

// The map in the rows' own order into a.nbr. Stream-ordered.
void build_in_own_order(const sb::MapArgs& a, const sk::VoxelTable& t, cudaStream_t s) {
  const int64_t n = a.n;
  const int ks = a.kernel_size, kv = ks * ks * ks, half = kv / 2;
  const int64_t upper = (kv - half) * n;
  kernel_fill_upper<<<grid_for(upper), kThreads, 0, s>>>(a.nbr + half * n, n, upper, nullptr);
  FRUGAL_CUDA_CHECK_LAUNCH();
  if (half > 0) {
    kernel_query<<<dim3(grid_for(n, INT32_MAX), half), kThreads, 0, s>>>(t, n, ks, a.dilation, nullptr, nullptr,
                                                                         nullptr, sb::MortonFrame{}, a.nbr);
    FRUGAL_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

spconv::backend::MapStatus spconv_build_map(const sb::MapArgs& a, Stream stream) {
  DeviceGuard guard(a.device);
  const cudaStream_t s = to_cuda(stream);
  const int64_t n = a.n;
  const int kv = a.kernel_size * a.kernel_size * a.kernel_size;
  const uint64_t cap = sb::table_capacity(n);
  DeviceStatus host{};
  Scratch status(sizeof(DeviceStatus), s), keys(n * sizeof(uint64_t), s), table(cap * sizeof(int32_t), s);
  auto* st = status.as<DeviceStatus>();
  clear_status(st, s);
  FRUGAL_CUDA_CHECK(cudaMemsetAsync(table.as<int32_t>(), 0xff, cap * sizeof(int32_t), s));  // all kEmptySlot
  kernel_pack_keys<<<grid_for(n, kPackBlocks), kThreads, 0, s>>>(a.coords, n, keys.as<uint64_t>(), st);
  FRUGAL_CUDA_CHECK_LAUNCH();
  kernel_insert<<<grid_for(n, INT32_MAX), kThreads, 0, s>>>(keys.as<uint64_t>(), n, table.as<int32_t>(), cap - 1, st);
  FRUGAL_CUDA_CHECK_LAUNCH();
  const sk::VoxelTable t{keys.as<uint64_t>(), table.as<int32_t>(), cap - 1};
  if (!a.order) {  // the rows' own order in any case: the map, its fit and the checks, one wait at the end
    build_in_own_order(a, t, s);
    sk::launch_halo_probes(a.nbr, n, kv, &st->halo_fits[0][0], s);
    read_back(st, &host, s);
    return to_status(host, spconv::halo_samples(n));
  }
  // The fit in the rows' own order, from lookups before the map is written (an unpackable row's key is
  // masked, a duplicate's is some row's: what they find does not matter, the build raises).
  sk::launch_halo_probes(t, n, a.kernel_size, a.dilation, &st->halo_fits[0][0], s);
  read_back(st, &host, s);  // the checks, and the fit that decides the order
  sb::MapStatus out = to_status(host, spconv::halo_samples(n));
  if (out.bad_row >= 0 || out.dup_row_a >= 0) return out;  // no map: the build raises
  if (!spconv::orders_rows(own_order_stats(out, n, kv))) {
    build_in_own_order(a, t, s);  // in flight when the build returns: the map is done in stream order
    return out;
  }
  build_in_locality_order(a, t, host, s);
  // The fit in the order the map is stored in, the one its convs run.
  FRUGAL_CUDA_CHECK(cudaMemsetAsync(st->halo_fits, 0, sizeof(st->halo_fits), s));
  sk::launch_halo_probes(a.nbr, n, kv, &st->halo_fits[0][0], s);
  read_back(st, &host, s);
  out = to_status(host, spconv::halo_samples(n));
  out.ordered = true;
  return out;
}

spconv::backend::MapStatus spconv_check_map(const int32_t* nbr, int64_t n, int k, int device, Stream stream) {
  DeviceGuard guard(device);
  const cudaStream_t s = to_cuda(stream);
  DeviceStatus host{};
  {
    Scratch status(sizeof(DeviceStatus), s);
    auto* st = status.as<DeviceStatus>();
    clear_status(st, s);
    const int64_t total = static_cast<int64_t>(k) * n;
    kernel_check_map<<<grid_for(total, 1 << 16), kThreads, 0, s>>>(nbr, total, n, st);
    FRUGAL_CUDA_CHECK_LAUNCH();
    sk::launch_halo_probes(nbr, n, k, &st->halo_fits[0][0], s);
    read_back(st, &host, s);
  }
  return to_status(host, spconv::halo_samples(n));
}

void spconv_unorder_map(const int32_t* table, const int32_t* order, int64_t n, int k, int32_t* nbr, int device,
                        Stream stream) {
  if (n == 0) return;
  DeviceGuard guard(device);
  const cudaStream_t s = to_cuda(stream);
  kernel_unorder<<<dim3(grid_for(n, 1 << 12), static_cast<unsigned>(k)), kThreads, 0, s>>>(table, order, n, nbr);
  FRUGAL_CUDA_CHECK_LAUNCH();
}

}  // namespace frugal::cuda
