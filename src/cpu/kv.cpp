// CPU backend of the KV cache: FWHT, Lloyd–Max quantization and bit packing; the append sixteen
// vectors at a time in SIMD lanes (its load, FWHT, scaling and 4- and 8-bit code search in AVX2 + F16C
// where the CPU runs them, cpu/kv_avx2.h), OpenMP over those batches; dequantize one vector per iteration.
// This is the reference the CUDA kernels must match bit for bit (packed codes and scales): same
// FWHT stage order (h = 1, 2, 4, ...), same final multiply by 1/√D in f32, the norm and scale
// reductions in f64 (the norm from x, see kv::backend::kMaxNorm). The tensor-core kernel of the
// CUDA backend rounds the transform differently: its codes may differ where u lies within ~1e-6 of
// a boundary. Where the compiler fuses a multiply into the add after it (C++ allows it), the
// product is exact (f32 squares and products in f64, u times a power of two), so the bits do not
// change.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <vector>

#include "cpu/clones.h"
#include "core/kv_backend.h"
#include "cpu/kv_avx2.h"
#include "cpu/kv_common.h"
#include "core/types.h"

namespace frugal::cpu {

namespace {

using kv::backend::AppendArgs;
using kv::backend::DequantizeArgs;

// ---- the append: kLanes vectors at a time, one per SIMD lane --------------------------------
// Every step is a loop over the lanes of a batch (y[i·kLanes + l] is element i of the batch's
// vector l), which the compiler vectorizes; each lane computes exactly what one vector on its own
// would: the same f32 operations in the same order, the f64 sums in element order. Sixteen lanes:
// one AVX-512 register of f32 (two of AVX2, four of SSE2).
constexpr int kLanes = 16;

// The batch's loops are compiled per x86-64 level (cpu/clones.h).

// x[i] as f32, without branches (the compiler vectorizes the loops that call these).
FRUGAL_INLINE float load_f32(float x) { return x; }
FRUGAL_INLINE float load_f32(bf16_t x) { return std::bit_cast<float>(static_cast<uint32_t>(x.bits) << 16); }
// Exactly half_to_float: normal, inf and NaN by re-biasing the exponent; subnormals m·2^-24 through
// an exact integer conversion (no denormal float arithmetic).
FRUGAL_INLINE float load_f32(f16_t x) {
  const int32_t h = x.bits, em = h & 0x7fff, sign = (h & 0x8000) << 16;
  const int32_t special = -static_cast<int32_t>(em >= 0x7c00), small = -static_cast<int32_t>(em < 0x400);  // masks
  const int32_t normal = (em << 13) + 0x38000000 + (special & 0x38000000);
  const int32_t subnormal = std::bit_cast<int32_t>(static_cast<float>(em) * 0x1p-24f);
  return std::bit_cast<float>(sign | (subnormal & small) | (normal & ~small));
}

// idx(u) = the number of boundaries strictly below u, for the 8-bit codebook's 255 boundaries, in
// one table read: cell j = rint(u/w) covers [(j − ½)w, (j + ½)w] with w a power of two below the
// smallest gap between boundaries, so it holds at most one boundary `bnd`, and idx(u) = base +
// (bnd < u) with base the boundaries below the cell (the CUDA kernels' lookup). Cells past ±half
// hold no boundary: u is clamped to them.
struct CellTable {
  float inv_w = 0;
  int half = 0;
  struct Entry {
    float bnd;     // the boundary inside the cell, or +inf
    int32_t base;  // the boundaries below the cell
  };
  std::vector<Entry> cells;  // cell j at index j + half
};
static_assert(sizeof(CellTable::Entry) == 8, "kv_avx2::scale_and_code reads a cell as one 8-byte word");

const CellTable& cell_table(int bits) {
  static std::array<CellTable, 9> tables;
  static std::array<std::once_flag, 9> once;
  std::call_once(once[bits], [bits] {
    const std::vector<float>& b = kv::lloyd_max_codebook(bits).boundaries;  // the values the cache holds
    const kv::backend::CellGrid grid = kv::backend::cell_grid(bits);
    const double w = grid.w;
    CellTable& t = tables[bits];
    t.inv_w = static_cast<float>(1.0 / w);
    t.half = grid.half;
    for (int j = -t.half; j <= t.half; ++j) {
      const float lo = static_cast<float>((j - 0.5) * w), hi = static_cast<float>((j + 0.5) * w);
      const auto base = static_cast<int32_t>(std::lower_bound(b.begin(), b.end(), lo) - b.begin());
      const bool inside = base < static_cast<int32_t>(b.size()) && b[base] <= hi;
      t.cells.push_back({inside ? b[base] : INFINITY, base});
    }
  });
  return tables[bits];
}

// idx(u) for the NB = 3 or 7 boundaries of 2 or 3 bits: NB comparisons (each u finite).
template <int NB>
FRUGAL_INLINE void codes_by_count(const float* __restrict u, int64_t n, const float* boundaries, int32_t* __restrict code) {
  float b[NB];
  std::copy(boundaries, boundaries + NB, b);
  for (int64_t e = 0; e < n; ++e) {
    int32_t c = 0;
    for (int k = 0; k < NB; ++k) c += b[k] < u[e];
    code[e] = c;
  }
}

// idx(u) for the 15 boundaries of 4 bits by a binary search of four comparisons, each boundary picked
// by selects, every select of a level on its own (so the compiler vectorizes them as blends; nested
// conditionals it does not): the same count as the 15 comparisons, since the boundaries are sorted.
FRUGAL_INLINE void codes_by_search15(const float* __restrict u, int64_t n, const float* boundaries,
                                     int32_t* __restrict code) {
  float b[15];
  std::copy(boundaries, boundaries + 15, b);
  for (int64_t e = 0; e < n; ++e) {
    const float x = u[e];
    const int32_t c8 = b[7] < x;
    const int32_t c4 = (c8 ? b[11] : b[3]) < x;
    const float hi2 = c4 ? b[13] : b[9], lo2 = c4 ? b[5] : b[1];
    const int32_t c2 = (c8 ? hi2 : lo2) < x;
    const float p0 = c2 ? b[14] : b[12], p1 = c2 ? b[10] : b[8], p2 = c2 ? b[6] : b[4], p3 = c2 ? b[2] : b[0];
    const float hi1 = c4 ? p0 : p1, lo1 = c4 ? p2 : p3;
    const int32_t c1 = (c8 ? hi1 : lo1) < x;
    code[e] = 8 * c8 + 4 * c4 + 2 * c2 + c1;
  }
}

FRUGAL_INLINE void codes_by_table(const float* __restrict u, int64_t n, const CellTable& t, int32_t* __restrict code) {
  constexpr float kMagic = 12582912.0f;  // 1.5·2^23: adding it rounds |v| < 2^22 to an integer exactly
  const CellTable::Entry* __restrict cells = t.cells.data();
  const float inv_w = t.inv_w;
  const int32_t half = t.half;
  for (int64_t e = 0; e < n; ++e) {
    const float v = u[e] * inv_w;  // exact: inv_w is a power of two
    const int32_t j = std::min(std::max(static_cast<int32_t>((v + kMagic) - kMagic), -half), half) + half;
    const CellTable::Entry c = cells[j];
    code[e] = c.base + (c.bnd < u[e]);
  }
}

// Packs lane l's codes (code[i·kLanes + l]) into its row of dim·bits/8 bytes, one code at a time.
FRUGAL_INLINE void pack_row(const int32_t* code, int l, int dim, int bits, uint8_t* row) {
  std::memset(row, 0, static_cast<size_t>(dim) * bits / 8);
  for (int i = 0; i < dim; ++i) put_code(row, i, bits, static_cast<unsigned>(code[i * kLanes + l]));
}

// The same for the first `count` lanes at once, 32 bits of each row at a time (32/BITS codes: the
// row's little-endian bit stream is the word's), the words of all lanes formed together in 32-bit
// lanes (twice the SIMD width of 64-bit words).
template <int BITS>
FRUGAL_INLINE void pack_rows(const int32_t* __restrict code, int dim, int count, uint8_t* const* rows) {
  constexpr int kPerWord = 32 / BITS;
  for (int w = 0; w < dim / kPerWord; ++w) {
    uint32_t word[kLanes] = {};
    for (int e = 0; e < kPerWord; ++e)
      for (int l = 0; l < kLanes; ++l)
        word[l] |= static_cast<uint32_t>(code[(w * kPerWord + e) * kLanes + l]) << (e * BITS);
    for (int l = 0; l < count; ++l) std::memcpy(rows[l] + 4 * w, &word[l], 4);
  }
}

// v ← FWHT(v) for the kLanes vectors of a batch, stages h = 1, 2, 4, ... (the reference order).
FRUGAL_INLINE void fwht_lanes(float* v, int dim) {
  for (int h = 1; h < dim; h <<= 1)
    for (int i = 0; i < dim; i += 2 * h)
      for (int j = i; j < i + h; ++j) {
        float* a = v + static_cast<int64_t>(j) * kLanes;
        float* b = v + static_cast<int64_t>(j + h) * kLanes;
        for (int l = 0; l < kLanes; ++l) {
          const float x = a[l], y = b[l];
          a[l] = x + y;
          b[l] = x - y;
        }
      }
}

// A thread's scratch for one batch.
struct Batch {
  std::vector<float> y, u;    // [dim][kLanes]: the transform (after ×1/√D), the normalized coordinates
  std::vector<int32_t> code;  // [dim][kLanes]
  std::vector<float> row;     // [dim]: one vector as f32
  explicit Batch(int dim)
      : y(static_cast<size_t>(dim) * kLanes), u(y.size()), code(y.size()), row(static_cast<size_t>(dim)) {}
};

// Quantizes vectors [first, first + count) of the call (count ≤ kLanes) into their cache rows.
template <typename T>
FRUGAL_CPU_CLONES void append_batch(const AppendArgs& a, int64_t first, int count, Batch& bt) {
  const int dim = a.dim, bits = a.bits;
  const int64_t row_bytes = static_cast<int64_t>(dim) * bits / 8;
  float* y = bt.y.data();
  // Load (signs applied) and ‖x‖² in f64, element by element; lanes past `count` hold zeros.
  int64_t rows[kLanes];  // each lane's cache row
  const T* xs[kLanes];   // each lane's vector, null past `count`
  for (int l = 0; l < kLanes; ++l) {
    xs[l] = nullptr;
    if (l >= count) continue;
    const int64_t v = first + l;
    const int h = static_cast<int>(v % a.heads);
    const int64_t t = (v / a.heads) % a.tokens;
    const int s = static_cast<int>(v / (static_cast<int64_t>(a.heads) * a.tokens));
    xs[l] = static_cast<const T*>(a.x) + s * a.x_stride_seq + t * a.x_stride_tok + h * a.x_stride_head;
    int64_t slot;
    if (a.slots) {
      slot = a.slots[t];  // a paged pool: seqs == 1
    } else {
      const int64_t pos = a.starts[s] + t;
      slot = a.sliding ? pos % a.capacity : pos;
    }
    rows[l] = (static_cast<int64_t>(s) * a.heads + h) * a.capacity + slot;
  }
  double ss[kLanes];
#if FRUGAL_CPU_AVX2
  const bool avx2 = !a.portable && cpu_has_avx2_f16c() && dim % 8 == 0;
#else
  constexpr bool avx2 = false;
#endif
  if (avx2) {
#if FRUGAL_CPU_AVX2
    kv_avx2::load_lanes<T>(xs, dim, a.signs, y, ss);
#endif
  } else {
    for (int l = 0; l < kLanes; ++l) {
      ss[l] = 0;
      if (!xs[l]) {
        for (int i = 0; i < dim; ++i) y[i * kLanes + l] = 0.0f;
        continue;
      }
      const T* x = xs[l];
      float* r = bt.row.data();
      if (a.signs) {
        for (int i = 0; i < dim; ++i) r[i] = load_f32(x[i]) * a.signs[i];
      } else {
        for (int i = 0; i < dim; ++i) r[i] = load_f32(x[i]);
      }
      for (int i = 0; i < dim; ++i) y[i * kLanes + l] = r[i];
    }
    for (int i = 0; i < dim; ++i)
      for (int l = 0; l < kLanes; ++l) ss[l] += static_cast<double>(y[i * kLanes + l]) * y[i * kLanes + l];
  }

  if (avx2) {
#if FRUGAL_CPU_AVX2
    kv_avx2::fwht_lanes(y, dim);
#endif
  } else {
    fwht_lanes(y, dim);
  }

  // u = y·k, k = f32(√D/n); a zero vector (n ≤ 1e-10) and a flagged one (n not finite or above
  // kMaxNorm: codes 0, a NaN scale) get u = 0, so every u is finite.
  float k[kLanes];
  uint32_t keep[kLanes];  // all ones, or zero for a flagged vector (a mask, so the loop below vectorizes)
  bool flagged[kLanes];
  double norm[kLanes];
  for (int l = 0; l < kLanes; ++l) {
    norm[l] = std::sqrt(ss[l]);
    flagged[l] = !(norm[l] <= kv::backend::kMaxNorm);
    k[l] = flagged[l] || norm[l] <= 1e-10 ? 0.0f : static_cast<float>(std::sqrt(static_cast<double>(dim)) / norm[l]);
    keep[l] = flagged[l] ? 0u : ~0u;
  }
  const float inv = kv::backend::inv_sqrt_dim(dim);
  const bool keep_y = a.rule == kv::ScaleRule::least_squares;  // the least-squares scale reads y·inv
  if (avx2 && bits == 8) {
#if FRUGAL_CPU_AVX2
    const CellTable& t = cell_table(bits);
    kv_avx2::scale_and_code<8>(y, dim, inv, k, keep, keep_y, t.cells.data(), t.inv_w, t.half, nullptr,
                               bt.code.data());
#endif
  } else if (avx2 && bits == 4) {
#if FRUGAL_CPU_AVX2
    kv_avx2::scale_and_code<4>(y, dim, inv, k, keep, keep_y, nullptr, 0.0f, 0, a.boundaries, bt.code.data());
#endif
  } else {
    float* u = bt.u.data();
    for (int i = 0; i < dim; ++i)
      for (int l = 0; l < kLanes; ++l) {
        const int64_t e = static_cast<int64_t>(i) * kLanes + l;
        y[e] *= inv;
        u[e] = std::bit_cast<float>(std::bit_cast<uint32_t>(y[e] * k[l]) & keep[l]);  // +0 where flagged
      }
    const int64_t n_elems = static_cast<int64_t>(dim) * kLanes;
    if (bits == 8) {
      codes_by_table(u, n_elems, cell_table(bits), bt.code.data());
    } else if (bits == 4) {
      codes_by_search15(u, n_elems, a.boundaries, bt.code.data());
    } else if (bits == 3) {
      codes_by_count<7>(u, n_elems, a.boundaries, bt.code.data());
    } else {
      codes_by_count<3>(u, n_elems, a.boundaries, bt.code.data());
    }
  }

  uint8_t* dst[kLanes];
  for (int l = 0; l < count; ++l) dst[l] = a.packed + rows[l] * row_bytes;
  const bool whole_words = std::endian::native == std::endian::little && dim * bits % 32 == 0;
  if (avx2 && bits == 8) {
#if FRUGAL_CPU_AVX2
    kv_avx2::pack_rows8(bt.code.data(), dim, count, dst);
#endif
  } else if (whole_words && bits == 8) {
    pack_rows<8>(bt.code.data(), dim, count, dst);
  } else if (whole_words && bits == 4) {
    pack_rows<4>(bt.code.data(), dim, count, dst);
  } else if (whole_words && bits == 2) {
    pack_rows<2>(bt.code.data(), dim, count, dst);
  } else {
    for (int l = 0; l < count; ++l) pack_row(bt.code.data(), l, dim, bits, dst[l]);
  }
  for (int l = 0; l < count; ++l) {
    if (flagged[l]) {
      std::memset(dst[l], 0, static_cast<size_t>(row_bytes));
      kv::backend::store_scale(a.scales, a.scales_f16, rows[l], std::numeric_limits<float>::quiet_NaN());
      continue;
    }
    float scale = norm[l] <= 1e-10 ? 0.0f : static_cast<float>(norm[l]);
    if (a.rule == kv::ScaleRule::least_squares && norm[l] > 1e-10) {
      double yc = 0, cc = 0;
      for (int i = 0; i < dim; ++i) {
        const double c = a.centroids[bt.code[i * kLanes + l]];
        yc += static_cast<double>(y[i * kLanes + l]) * c;
        cc += c * c;
      }
      scale = cc > 0 ? static_cast<float>(std::sqrt(static_cast<double>(dim)) * yc / cc) : 0.0f;
    }
    kv::backend::store_scale(a.scales, a.scales_f16, rows[l], scale);
  }
}

template <typename T>
void append_typed(const AppendArgs& a) {
  const int64_t total = static_cast<int64_t>(a.seqs) * a.tokens * a.heads;
  const int64_t batches = (total + kLanes - 1) / kLanes;
#pragma omp parallel if (batches > 1)
  {
    Batch bt(a.dim);
#pragma omp for schedule(static)
    for (int64_t b = 0; b < batches; ++b)
      append_batch<T>(a, b * kLanes, static_cast<int>(std::min<int64_t>(kLanes, total - b * kLanes)), bt);
  }
}

template <typename T>
void dequantize_typed(const DequantizeArgs& a) {
  const int64_t total = a.count * a.heads;
  const int64_t row_bytes = static_cast<int64_t>(a.dim) * a.bits / 8;
  const float inv = kv::backend::inv_sqrt_dim(a.dim);
#pragma omp parallel if (total > 16)
  {
    std::vector<float> y(a.dim);
#pragma omp for schedule(static)
    for (int64_t v = 0; v < total; ++v) {
      const int h = static_cast<int>(v % a.heads);
      const int64_t t = v / a.heads;
      const int64_t pos = a.begin + t;
      const int64_t slot = a.slots ? a.slots[t] : (a.sliding ? pos % a.capacity : pos);
      const int64_t vec = static_cast<int64_t>(h) * a.capacity + slot;
      const uint8_t* row = a.packed + vec * row_bytes;
      const float s = kv::backend::load_scale(a.scales, a.scales_f16, vec) * inv;
      decode_codes(row, a.dim, a.bits, a.centroids, y.data());
      for (int i = 0; i < a.dim; ++i) y[i] *= s;
      fwht_inplace(y.data(), a.dim);
      T* out = static_cast<T*>(a.out) + (t * a.heads + h) * static_cast<int64_t>(a.dim);
      for (int i = 0; i < a.dim; ++i) {
        const float r = y[i] * inv;
        out[i] = from_float<T>(a.signs ? r * a.signs[i] : r);
      }
    }
  }
}

}  // namespace

void kv_append(const AppendArgs& a) {
  dispatch_float(a.x_dtype, "kv::append", [&]<typename T>() { append_typed<T>(a); });
}

void kv_dequantize(const DequantizeArgs& a) {
  dispatch_float(a.out_dtype, "kv::dequantize", [&]<typename T>() { dequantize_typed<T>(a); });
}

void hadamard_transform(const float* x, float* out, int64_t rows, int dim) {
  const float inv = kv::backend::inv_sqrt_dim(dim);
#pragma omp parallel for schedule(static) if (rows > 16)
  for (int64_t r = 0; r < rows; ++r) {
    float* o = out + r * dim;
    if (o != x + r * dim) std::memcpy(o, x + r * dim, sizeof(float) * dim);
    fwht_inplace(o, dim);
    for (int i = 0; i < dim; ++i) o[i] *= inv;
  }
}

}  // namespace frugal::cpu
