// The kernel map on CUDA: pack every coordinate into a 64-bit key (checking its range), insert the
// rows into an open-addressing table of int32 row indices (2^p ≥ 2N slots, linear probing, atomicCAS
// on the empty slot; an equal key already there is a duplicate), then probe only offsets k < K/2 and
// write both nbr[k, n] = m and, by the submanifold symmetry, nbr[K-1-k, m] = n. Every map entry is
// written by exactly one thread, so the map is the same as the CPU's, bit for bit. Then the map's fit
// to the halo kernel (its statistics), read back with the build's checks in one copy. Also the check
// of a map the caller assembled. Floor: N·(16 + 4K) bytes written, N·K/2 hash probes.
#include <algorithm>
#include <climits>
#include <cstddef>

#include "core/device_caps.h"
#include "core/sparse_conv_backend.h"
#include "core/spconv_choose.h"
#include "cuda/common.cuh"
#include "cuda/spconv/params.cuh"

namespace frugal::cuda {

namespace {

namespace sb = spconv::backend;

constexpr unsigned long long kNone = ULLONG_MAX;

// ================================ kernel map ===================================================

// What the map build or check finds, read back in one copy: the first three words start as kNone
// (0xff bytes), the fits as 0.
struct DeviceStatus {
  unsigned long long bad_row;    // smallest row with an unpackable coordinate
  unsigned long long dup;        // smallest (hi << 32 | lo) over duplicate row pairs found
  unsigned long long bad_entry;  // smallest linear index of a map entry outside [0, n]
  unsigned halo_fits[2][2];      // the map's sample tiles that fit the halo kernel (MapStats::halo_fits)
};
constexpr size_t kStatusNoneBytes = 3 * sizeof(unsigned long long);
static_assert(offsetof(DeviceStatus, halo_fits) == kStatusNoneBytes, "the fits follow the three words");

__global__ void kernel_pack_keys(const int32_t* __restrict__ coords, int64_t n, uint64_t* __restrict__ keys,
                                 DeviceStatus* st) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r >= n) return;
  const int32_t b = coords[4 * r], x = coords[4 * r + 1], y = coords[4 * r + 2], z = coords[4 * r + 3];
  if (!sb::batch_in_range(b) || !sb::coord_in_range(x) || !sb::coord_in_range(y) || !sb::coord_in_range(z))
    atomicMin(&st->bad_row, static_cast<unsigned long long>(r));
  keys[r] = sb::pack_key(b, x, y, z);
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

// Rows K/2 .. K-1 of the map: the centre is the identity, the others start as the sentinel and
// receive their hits from the neighbors' probes.
__global__ void kernel_fill_upper(int32_t* __restrict__ nbr_half, int64_t n, int64_t total) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    nbr_half[i] = i < n ? static_cast<int32_t>(i) : static_cast<int32_t>(n);
}

// blockIdx.y = k in [0, K/2): one probe per (row, k).
__global__ void kernel_query(const uint64_t* __restrict__ keys, int64_t n, const int32_t* __restrict__ table,
                             uint64_t mask, int ks, int dilation, int32_t* __restrict__ nbr) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r >= n) return;
  const int k = blockIdx.y, kv = ks * ks * ks;
  const uint64_t key = keys[r];
  const int64_t qx = sb::key_x(key) + sb::axis_offset(k / (ks * ks), ks, dilation);
  const int64_t qy = sb::key_y(key) + sb::axis_offset(k / ks % ks, ks, dilation);
  const int64_t qz = sb::key_z(key) + sb::axis_offset(k % ks, ks, dilation);
  int32_t m = -1;
  if (sb::coord_in_range(qx) && sb::coord_in_range(qy) && sb::coord_in_range(qz)) {
    const uint64_t q = sb::pack_key(sb::key_b(key), qx, qy, qz);
    for (uint64_t s = sb::hash_key(q) & mask;; s = (s + 1) & mask) {
      const int32_t t = __ldg(&table[s]);
      if (t == sb::kEmptySlot) break;
      if (__ldg(&keys[t]) == q) {
        m = t;
        break;
      }
    }
  }
  nbr[k * n + r] = m < 0 ? static_cast<int32_t>(n) : m;
  if (m >= 0) nbr[static_cast<int64_t>(kv - 1 - k) * n + m] = static_cast<int32_t>(r);
}

// Every entry of nbr [k, n] (total = k·n) in [0, n]; the smallest linear index of one that is not.
__global__ void kernel_check_map(const int32_t* __restrict__ nbr, int64_t total, int64_t n, DeviceStatus* st) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t v = nbr[i];
    if (v < 0 || v > n) atomicMin(&st->bad_entry, static_cast<unsigned long long>(i));
  }
}

// The status buffer, set up on s: the three words kNone, the fits 0.
void clear_status(DeviceStatus* st, cudaStream_t s) {
  FRUGAL_CUDA_CHECK(cudaMemsetAsync(st, 0xff, kStatusNoneBytes, s));
  FRUGAL_CUDA_CHECK(cudaMemsetAsync(st->halo_fits, 0, sizeof(st->halo_fits), s));
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

}  // namespace

spconv::backend::MapStatus spconv_build_map(const sb::MapArgs& a, Stream stream) {
  DeviceGuard guard(a.device);
  const cudaStream_t s = to_cuda(stream);
  const int64_t n = a.n;
  const int ks = a.kernel_size, kv = ks * ks * ks, half = kv / 2;
  const uint64_t cap = sb::table_capacity(n);
  DeviceStatus host{};
  int samples = 0;
  {
    Scratch status(sizeof(DeviceStatus), s), keys(n * sizeof(uint64_t), s), table(cap * sizeof(int32_t), s);
    auto* st = status.as<DeviceStatus>();
    clear_status(st, s);
    FRUGAL_CUDA_CHECK(cudaMemsetAsync(table.as<int32_t>(), 0xff, cap * sizeof(int32_t), s));  // all kEmptySlot
    constexpr int threads = 256;
    const auto row_blocks = static_cast<unsigned>(ceil_div<int64_t>(n, threads));
    kernel_pack_keys<<<row_blocks, threads, 0, s>>>(a.coords, n, keys.as<uint64_t>(), st);
    FRUGAL_CUDA_CHECK_LAUNCH();
    kernel_insert<<<row_blocks, threads, 0, s>>>(keys.as<uint64_t>(), n, table.as<int32_t>(), cap - 1, st);
    FRUGAL_CUDA_CHECK_LAUNCH();
    const int64_t upper = (kv - half) * n;
    const auto fill_blocks = static_cast<unsigned>(std::min<int64_t>(ceil_div<int64_t>(upper, threads), 1 << 20));
    kernel_fill_upper<<<fill_blocks, threads, 0, s>>>(a.nbr + half * n, n, upper);
    FRUGAL_CUDA_CHECK_LAUNCH();
    if (half > 0) {
      kernel_query<<<dim3(row_blocks, half), threads, 0, s>>>(keys.as<uint64_t>(), n, table.as<int32_t>(), cap - 1, ks,
                                                              a.dilation, a.nbr);
      FRUGAL_CUDA_CHECK_LAUNCH();
    }
    samples = probe_halo_fit(a.nbr, n, kv, a.device, st, s);
    FRUGAL_CUDA_CHECK(cudaMemcpyAsync(&host, st, sizeof(DeviceStatus), cudaMemcpyDeviceToHost, s));
  }
  FRUGAL_CUDA_CHECK(cudaStreamSynchronize(s));
  return read_status(host, samples);
}

spconv::backend::MapStatus spconv_check_map(const int32_t* nbr, int64_t n, int k, int device, Stream stream) {
  DeviceGuard guard(device);
  const cudaStream_t s = to_cuda(stream);
  DeviceStatus host{};
  int samples = 0;
  {
    Scratch status(sizeof(DeviceStatus), s);
    auto* st = status.as<DeviceStatus>();
    clear_status(st, s);
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
