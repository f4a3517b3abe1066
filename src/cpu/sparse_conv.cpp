// CPU backend of the sparse conv: the kernel map from an open-addressing table of row indices
// (the same packed keys, hash and probing as the CUDA build, so both give the same map), and the
// conv as a cache-blocked gather-GEMM, OpenMP over tiles of output rows. Each output row is
// accumulated by one thread in a fixed order (offsets k ascending, then ci ascending), so the
// result does not depend on the thread count.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/sparse_conv_backend.h"
#include "core/spconv_choose.h"
#include "core/types.h"
#include "cpu/clones.h"

namespace frugal::cpu {

namespace {

using spconv::backend::ConvArgs;
using spconv::backend::MapArgs;
using spconv::backend::MapStatus;
namespace sb = spconv::backend;

// Linear probe for `key`; returns the row or -1.
int64_t find_row(const std::vector<int32_t>& table, uint64_t mask, const std::vector<uint64_t>& keys, uint64_t key) {
  for (uint64_t s = sb::hash_key(key) & mask;; s = (s + 1) & mask) {
    const int32_t r = table[s];
    if (r == sb::kEmptySlot) return -1;
    if (keys[r] == key) return r;
  }
}

// Output rows per tile: one tile's accumulators (kRows × Co floats) and the gathered input rows
// stay in L1/L2 while every weight slice w[k] is reused by all the tile's rows that have a neighbor at k.
constexpr int64_t kRows = spconv::kCpuTileRows;
// The register block of accumulate_rows: 4 gathered rows × 16 output channels (8 AVX2 or 4 AVX-512
// registers of accumulators), so each weight load feeds 4 FMAs and each broadcast 16.
constexpr int kBlockRows = 4, kBlockCols = 16;

// acc[i][o] += Σ_c x[i·ci + c] · w[c·co + o] for the kBlockRows rows i (c ascending, one fused
// multiply-add each: every output element's sum runs in the same order whatever the tiling).
FRUGAL_CPU_CLONES void accumulate_rows(const float* __restrict x, const float* __restrict w, int64_t ci, int64_t co,
                                       float* const* acc) {
  int64_t o0 = 0;
  for (; o0 + kBlockCols <= co; o0 += kBlockCols) {
    float a[kBlockRows][kBlockCols];
    for (int i = 0; i < kBlockRows; ++i)
      for (int o = 0; o < kBlockCols; ++o) a[i][o] = acc[i][o0 + o];
    for (int64_t c = 0; c < ci; ++c) {
      const float* wr = w + c * co + o0;
      float xv[kBlockRows];
      for (int i = 0; i < kBlockRows; ++i) xv[i] = x[i * ci + c];
#pragma GCC unroll 4
      for (int i = 0; i < kBlockRows; ++i)
#pragma omp simd
        for (int o = 0; o < kBlockCols; ++o) a[i][o] = std::fma(xv[i], wr[o], a[i][o]);
    }
    for (int i = 0; i < kBlockRows; ++i)
      for (int o = 0; o < kBlockCols; ++o) acc[i][o0 + o] = a[i][o];
  }
  for (int i = 0; i < kBlockRows; ++i)  // channels past the last whole block of 16
    for (int64_t c = 0; c < ci; ++c) {
      const float xv = x[i * ci + c];
      for (int64_t o = o0; o < co; ++o) acc[i][o] = std::fma(xv, w[c * co + o], acc[i][o]);
    }
}

// Per thread: the tile's accumulators, its gathered rows (kRows + a block of zero rows) and a spare
// accumulator row that the padding rows of a partial block write to.
struct TileScratch {
  std::vector<float> acc, x, spare;
  TileScratch(int64_t ci, int64_t co)
      : acc(kRows * co), x((kRows + kBlockRows) * ci, 0.0f), spare(co) {}
};

template <typename T>
void conv_rows(const ConvArgs& a, const float* w, const float* bias, int64_t row0, int64_t rows, TileScratch& s) {
  const T* feats = static_cast<const T*>(a.feats);
  T* out = static_cast<T*>(a.out);
  const int64_t n = a.n, ci = a.ci, co = a.co;
  float* acc = s.acc.data();
  float* x = s.x.data();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < co; ++o) acc[r * co + o] = bias ? bias[o] : 0.0f;
  float* dst[kRows + kBlockRows];
  for (int k = 0; k < a.k; ++k) {
    // Gather the rows of the tile that have a neighbor at offset k, as f32.
    int64_t m = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t src_row = a.nbr[k * n + row0 + r];
      if (src_row < 0 || src_row >= n) continue;  // the sentinel (entries were range-checked when asked to)
      const T* src = feats + src_row * ci;
      float* xr = x + m * ci;
      for (int64_t c = 0; c < ci; ++c) xr[c] = to_float(src[c]);
      dst[m++] = acc + r * co;
    }
    if (m == 0) continue;
    const int64_t padded = (m + kBlockRows - 1) / kBlockRows * kBlockRows;
    for (int64_t j = m; j < padded; ++j) {
      std::fill(x + j * ci, x + (j + 1) * ci, 0.0f);
      dst[j] = s.spare.data();
    }
    const float* wk = w + static_cast<int64_t>(k) * ci * co;
    for (int64_t j = 0; j < padded; j += kBlockRows) accumulate_rows(x + j * ci, wk, ci, co, dst + j);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t dst_row = sb::column_row(a.order, row0 + r, n);
    if (dst_row < 0) continue;
    for (int64_t o = 0; o < co; ++o) out[dst_row * co + o] = from_float<T>(acc[r * co + o]);
  }
}

template <typename T>
void conv(const ConvArgs& a) {
  const int64_t wn = static_cast<int64_t>(a.k) * a.ci * a.co;
  // Weights and bias in f32 once (K·Ci·Co floats: proportional to the weight, not to N).
  std::vector<float> wf, bf;
  const float* w = nullptr;
  const float* bias = nullptr;
  if constexpr (std::is_same_v<T, float>) {
    w = static_cast<const float*>(a.weight);
    bias = static_cast<const float*>(a.bias);
  } else {
    wf.resize(wn);
    const T* src = static_cast<const T*>(a.weight);
    for (int64_t i = 0; i < wn; ++i) wf[i] = to_float(src[i]);
    w = wf.data();
    if (a.bias) {
      bf.resize(a.co);
      for (int i = 0; i < a.co; ++i) bf[i] = to_float(static_cast<const T*>(a.bias)[i]);
      bias = bf.data();
    }
  }
  const int64_t tiles = (a.n + kRows - 1) / kRows;
#pragma omp parallel
  {
    TileScratch scratch(a.ci, a.co);
#pragma omp for schedule(dynamic, 16)
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t row0 = t * kRows;
      conv_rows<T>(a, w, bias, row0, std::min(kRows, a.n - row0), scratch);
    }
  }
}

}  // namespace

MapStatus spconv_build_map(const MapArgs& a) {
  MapStatus st;
  const int64_t n = a.n;
  const int ks = a.kernel_size, kv = ks * ks * ks, half = kv / 2;
  std::vector<uint64_t> keys(n);
  int64_t bad = n;  // the first row with a coordinate out of range
#pragma omp parallel for reduction(min : bad) schedule(static)
  for (int64_t r = 0; r < n; ++r) {
    const int32_t* c = a.coords + r * 4;
    if (!sb::batch_in_range(c[0]) || !sb::coord_in_range(c[1]) || !sb::coord_in_range(c[2]) ||
        !sb::coord_in_range(c[3]))
      bad = std::min(bad, r);
    else
      keys[r] = sb::pack_key(c[0], c[1], c[2], c[3]);
  }
  if (bad < n) {
    st.bad_row = bad;
    return st;
  }
  // Insert in parallel: a slot only ever goes from empty to a row (compare-and-swap), so every key
  // stays reachable from its hash by linear probing, whatever the interleaving, and the lookups
  // below do not depend on where each key landed.
  const uint64_t cap = sb::table_capacity(n), mask = cap - 1;
  std::vector<int32_t> table(cap, sb::kEmptySlot);
  bool dup = false;
#pragma omp parallel for reduction(|| : dup) schedule(static)
  for (int64_t r = 0; r < n; ++r) {
    for (uint64_t s = sb::hash_key(keys[r]) & mask;; s = (s + 1) & mask) {
      std::atomic_ref<int32_t> slot(table[s]);
      int32_t o = slot.load(std::memory_order_relaxed);
      if (o == sb::kEmptySlot && slot.compare_exchange_strong(o, static_cast<int32_t>(r), std::memory_order_relaxed))
        break;
      if (keys[o] == keys[r]) {  // o: the row now in the slot
        dup = true;
        break;
      }
    }
  }
  if (dup) {
    // Which pair the parallel pass met depends on timing; the error names the first row that
    // repeats an earlier one, found again serially (only on this error path).
    std::fill(table.begin(), table.end(), sb::kEmptySlot);
    for (int64_t r = 0; r < n; ++r) {
      for (uint64_t s = sb::hash_key(keys[r]) & mask;; s = (s + 1) & mask) {
        const int32_t o = table[s];
        if (o == sb::kEmptySlot) {
          table[s] = static_cast<int32_t>(r);
          break;
        }
        if (keys[o] == keys[r]) {
          st.dup_row_a = o;
          st.dup_row_b = r;
          return st;
        }
      }
    }
  }
  // The run order: the rule's (or the forced one) where the caller takes one.
  std::vector<int32_t> column_of;  // the column of each row in a Morton order
  if (a.order) {
    bool lex = true;
#pragma omp parallel for reduction(&& : lex) schedule(static)
    for (int64_t r = 1; r < n; ++r) lex = lex && keys[r - 1] < keys[r];
    st.order = a.forced_order ? *a.forced_order : spconv::choose_row_order(lex);
  }
  if (st.order == spconv::RowOrder::morton) {
    int64_t lo[3] = {spconv::kCoordMax, spconv::kCoordMax, spconv::kCoordMax}, batch_hi = 0;
    int64_t hi[3] = {spconv::kCoordMin, spconv::kCoordMin, spconv::kCoordMin};
    for (int64_t r = 0; r < n; ++r) {
      const int64_t v[3] = {sb::key_x(keys[r]), sb::key_y(keys[r]), sb::key_z(keys[r])};
      for (int ax = 0; ax < 3; ++ax) lo[ax] = std::min(lo[ax], v[ax]), hi[ax] = std::max(hi[ax], v[ax]);
      batch_hi = std::max(batch_hi, sb::key_b(keys[r]));
    }
    const sb::MortonFrame frame = sb::morton_frame(lo, hi, batch_hi);
    std::vector<std::pair<uint64_t, int32_t>> by_key(n);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n; ++r) by_key[r] = {sb::morton_key(keys[r], frame), static_cast<int32_t>(r)};
    std::sort(by_key.begin(), by_key.end());  // keys are unique: the order is the same on every machine
    column_of.resize(n);
    for (int64_t i = 0; i < n; ++i) {
      a.order[i] = by_key[i].second;
      column_of[by_key[i].second] = static_cast<int32_t>(i);
    }
  }
  const int32_t* order = column_of.empty() ? nullptr : a.order;
  auto column = [&](int64_t row) { return column_of.empty() ? row : column_of[row]; };
  // Rows k > K/2 are written through the symmetry (by the neighbor's probe) or stay the sentinel;
  // the centre row is the identity.
  const auto sentinel = static_cast<int32_t>(n);
  std::fill(a.nbr + (half + 1) * n, a.nbr + kv * n, sentinel);
  for (int64_t i = 0; i < n; ++i) a.nbr[half * n + i] = static_cast<int32_t>(sb::column_row(order, i, n));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = sb::column_row(order, i, n);
    const uint64_t key = keys[r];
    const int64_t b = sb::key_b(key), x = sb::key_x(key), y = sb::key_y(key), z = sb::key_z(key);
    for (int k = 0; k < half; ++k) {
      const int64_t qx = x + sb::axis_offset(k / (ks * ks), ks, a.dilation);
      const int64_t qy = y + sb::axis_offset(k / ks % ks, ks, a.dilation);
      const int64_t qz = z + sb::axis_offset(k % ks, ks, a.dilation);
      int64_t m = -1;
      if (sb::coord_in_range(qx) && sb::coord_in_range(qy) && sb::coord_in_range(qz))
        m = find_row(table, mask, keys, sb::pack_key(b, qx, qy, qz));
      // Each (K-1-k, m) has exactly one neighbor at -offset_k, so no two threads write it.
      a.nbr[k * n + i] = m < 0 ? sentinel : static_cast<int32_t>(m);
      if (m >= 0) a.nbr[(kv - 1 - k) * n + column(m)] = static_cast<int32_t>(r);
    }
  }
  return st;
}

int64_t spconv_check_map(const int32_t* nbr, int64_t n, int k) {
  const int64_t total = static_cast<int64_t>(k) * n;
  int64_t first = total;
#pragma omp parallel for reduction(min : first) schedule(static)
  for (int64_t i = 0; i < total; ++i)
    if (nbr[i] < 0 || nbr[i] > n) first = std::min(first, i);
  return first < total ? first : -1;
}

void spconv_map_by_row(const int32_t* columns, const int32_t* order, int32_t* nbr, int64_t n, int k) {
#pragma omp parallel for schedule(static)
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = sb::column_row(order, i, n);
      if (row >= 0) nbr[kk * n + row] = columns[kk * n + i];
    }
}

int64_t spconv_conv(const ConvArgs& a) {
  if (a.check) {
    const int64_t first = spconv_check_map(a.nbr, a.n, a.k);
    if (first >= 0) return first;
  }
  if (a.dtype == DType::f64) {  // the gradient checks' dtype: plain loops (src/cpu/spconv_backward.cpp)
    spconv_conv_f64(a);
    return -1;
  }
  dispatch_float(a.dtype, "spconv::submanifold_conv", [&]<typename T>() { conv<T>(a); });
  return -1;
}

}  // namespace frugal::cpu
