// Device building blocks of the KV-cache kernels (src/cuda/kv/): a head vector spread over a group
// of lanes, its fast Walsh–Hadamard transform in registers (warp shuffles, shared memory across
// warps), group sums, the codebook lookup table, the bit packing, and the blocks' shared-memory
// layout. The decode-attention kernels can reuse them (rotate q, unpack codes).
//
// Layout of one vector of D = C·K·g elements over a group of g lanes (g a power of two): lane t
// holds K chunks of C consecutive elements, chunk k being chunk number k·g + t of the vector,
// so element ((k·g + t)·C + e) sits in register v[k·C + e]. Consecutive lanes read consecutive
// 16-byte pieces (coalesced), and the index bits split into e (local), t (across lanes), k (local).
//
// Bit-exactness with the CPU reference (src/cpu/kv.cpp): the transform runs the same stages in
// the same order (h = 1, 2, 4, ...: the e bits, then the lane bits, then the k bits), each stage
// computing a + b and a - b in f32 exactly as the CPU does; multiplies use __fmul_rn so nvcc
// cannot fuse them into the adds that follow.
#pragma once

#include <algorithm>
#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/fastdiv.h"

namespace frugal::cuda::kvdev {

constexpr unsigned kFullMask = 0xffffffffu;

// ---- loads and stores of one chunk ----------------------------------------------------------
// C elements of T at p, through 16-byte (or 8-byte) vector accesses when `aligned`.
template <typename T, int C>
__device__ __forceinline__ void load_chunk(const T* p, bool aligned, float (&out)[C]) {
  constexpr int words = C * static_cast<int>(sizeof(T)) / 8;  // 8-byte words: 1, 2 or 4
  static_assert(words * 8 == C * static_cast<int>(sizeof(T)), "a chunk is a whole number of 8-byte words");
  if (aligned) {
    uint2 raw[words];
    if constexpr (words >= 2) {
#pragma unroll
      for (int i = 0; i < words / 2; ++i) {
        const uint4 q = __ldcs(reinterpret_cast<const uint4*>(p) + i);
        raw[2 * i] = make_uint2(q.x, q.y);
        raw[2 * i + 1] = make_uint2(q.z, q.w);
      }
    } else {
      raw[0] = __ldcs(reinterpret_cast<const uint2*>(p));
    }
    const T* t = reinterpret_cast<const T*>(raw);
#pragma unroll
    for (int e = 0; e < C; ++e) out[e] = to_f32(t[e]);
  } else {
#pragma unroll
    for (int e = 0; e < C; ++e) out[e] = to_f32(p[e]);
  }
}

// The raw bits of one chunk, loaded ahead of use (the append kernel prefetches the next tile).
template <typename T, int C>
struct RawChunk {
  static constexpr int kWords = C * static_cast<int>(sizeof(T)) / 8;
  uint2 w[kWords];

  __device__ __forceinline__ void load(const T* p, bool aligned) {
    if (aligned) {
      if constexpr (kWords >= 2) {
#pragma unroll
        for (int i = 0; i < kWords / 2; ++i) {
          const uint4 q = __ldcs(reinterpret_cast<const uint4*>(p) + i);
          w[2 * i] = make_uint2(q.x, q.y);
          w[2 * i + 1] = make_uint2(q.z, q.w);
        }
      } else {
        w[0] = __ldcs(reinterpret_cast<const uint2*>(p));
      }
    } else {
      T* t = reinterpret_cast<T*>(w);
#pragma unroll
      for (int e = 0; e < C; ++e) t[e] = p[e];
    }
  }
  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int i = 0; i < kWords; ++i) w[i] = make_uint2(0, 0);
  }
  __device__ __forceinline__ float get(int e) const { return to_f32(reinterpret_cast<const T*>(w)[e]); }
};

template <typename T, int C>
__device__ __forceinline__ void store_chunk(T* p, bool aligned, const float (&in)[C]) {
  constexpr int words = C * static_cast<int>(sizeof(T)) / 8;
  if (aligned) {
    uint2 raw[words];
    T* t = reinterpret_cast<T*>(raw);
#pragma unroll
    for (int e = 0; e < C; ++e) t[e] = from_f32<T>(in[e]);
    if constexpr (words >= 2) {
#pragma unroll
      for (int i = 0; i < words / 2; ++i)
        reinterpret_cast<uint4*>(p)[i] = make_uint4(raw[2 * i].x, raw[2 * i].y, raw[2 * i + 1].x, raw[2 * i + 1].y);
    } else {
      reinterpret_cast<uint2*>(p)[0] = raw[0];
    }
  } else {
#pragma unroll
    for (int e = 0; e < C; ++e) p[e] = from_f32<T>(in[e]);
  }
}

// ---- the transform --------------------------------------------------------------------------
__device__ __forceinline__ void butterfly(float& a, float& b) {
  const float s = a + b, d = a - b;
  a = s;
  b = d;
}

// The in-register stages of a transform over an index of N values (h = 1, 2, 4, ...): f(i, i + h)
// for every butterfly pair; f applies it to each element the index selects.
template <int N, typename F>
__device__ __forceinline__ void register_stages(F&& f) {
#pragma unroll
  for (int h = 1; h < N; h <<= 1)
#pragma unroll
    for (int i = 0; i < N; ++i)
      if (!(i & h)) f(i, i + h);
}

// v ← FWHT(v) (unnormalized) for the vector held by a group of g lanes, this lane being lane t of
// its group. Lane stages below 32 use shuffles; wider groups (g > 32, whole warps) exchange through
// `xbuf` (nthreads · C · K floats of shared memory; every thread of the block must call this).
template <int C, int K>
__device__ __forceinline__ void fwht(float (&v)[C * K], int g, int t, float* xbuf, int tid, int nthreads) {
#pragma unroll
  for (int h = 1; h < C; h <<= 1)
#pragma unroll
    for (int k = 0; k < K; ++k)
#pragma unroll
      for (int e = 0; e < C; ++e)
        if (!(e & h)) butterfly(v[k * C + e], v[k * C + e + h]);
#pragma unroll
  for (int m = 1; m < g; m <<= 1) {
    // Lane t holds the upper element of each pair when bit m of t is set: it keeps lower − upper.
    // fmaf(±1, mine, partner) rounds partner ± mine once, exactly as the CPU's a − b / a + b.
    const float sign = (t & m) ? -1.0f : 1.0f;
    if (m < 32) {
#pragma unroll
      for (int q = 0; q < C * K; ++q) v[q] = fmaf(sign, v[q], __shfl_xor_sync(kFullMask, v[q], m));
    } else {
      __syncthreads();  // the previous readers of xbuf are done
#pragma unroll
      for (int q = 0; q < C * K; ++q) xbuf[q * nthreads + tid] = v[q];
      __syncthreads();
#pragma unroll
      for (int q = 0; q < C * K; ++q) v[q] = fmaf(sign, v[q], xbuf[q * nthreads + (tid ^ m)]);
    }
  }
  register_stages<K>([&](int k, int k2) {
#pragma unroll
    for (int e = 0; e < C; ++e) butterfly(v[k * C + e], v[k2 * C + e]);
  });
}

// Sums val over the g lanes of the group; every lane of the group gets the identical total
// (each butterfly step adds the same two operands on both partners). Groups wider than a warp
// combine per-warp totals through `red` (nthreads/32 · N doubles) in one fixed order.
template <int N>
__device__ __forceinline__ void group_sum(double (&val)[N], int g, int tid, double* red) {
  const int width = g < 32 ? g : 32;
#pragma unroll
  for (int m = 1; m < width; m <<= 1)
#pragma unroll
    for (int i = 0; i < N; ++i) val[i] += __shfl_xor_sync(kFullMask, val[i], m);
  if (g > 32) {
    __syncthreads();
    if ((tid & 31) == 0)
#pragma unroll
      for (int i = 0; i < N; ++i) red[(tid >> 5) * N + i] = val[i];
    __syncthreads();
    const int warps = g >> 5, first = (tid / g) * warps;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      double s = 0;
      for (int w = 0; w < warps; ++w) s += red[(first + w) * N + i];
      val[i] = s;
    }
  }
}

// ---- codebook lookup ------------------------------------------------------------------------
// idx(u) = number of boundaries strictly below u, in one shared-memory read. Cell j of the table
// covers the closed interval [(j − ½)w, (j + ½)w] with w a power of two below the smallest gap
// between boundaries, so it holds at most one boundary `bnd`; then idx(u) = base + (bnd < u) where
// base counts the boundaries below the cell. j = rint(u/w) is computed exactly by adding
// 1.5·2^23 (u/w is exact for a power-of-two w, and |u| ≤ √D·(1 + 2^-23) keeps it far below 2^22).
// The table either covers every reachable u (|u| ≤ √D: ‖y‖ ≥ |y_i|), or ends one empty cell past
// the outermost boundary and u is clamped to it (8 bits at D ≥ 1024, where covering would not fit).
struct TableEntry {
  float bnd;  // the boundary inside the cell, or +inf
  int base;   // boundaries below the cell
};

struct TableGeometry {
  float w = 0, inv_w = 0;
  int half = 0;        // cells j ∈ [-half, half]
  bool clamp = false;  // u may fall outside the table: clamp j
  __host__ __device__ int cells() const { return 2 * half + 1; }
};

constexpr int kRoundMagicBits = 0x4B400000;  // the bits of 1.5 · 2^23

// The rounding constant with the table offset folded in: 1.5·2^23 + half, an integer in the same
// binade, so the bits of fmaf(u, 1/w, magic) minus kRoundMagicBits are j + half directly.
__host__ __device__ inline float round_magic(int half) { return 12582912.0f + static_cast<float>(half); }

// u must be finite. (bnd − u) is negative exactly when bnd < u (and +inf − u is +inf), so its
// sign bit is the comparison; __fsub_rn keeps nvcc from fusing it with the multiply that made u.
__device__ __forceinline__ unsigned lookup_code(const TableEntry* table, float inv_w, float magic, int cells,
                                                bool clamp, float u) {
  int c = __float_as_int(fmaf(u, inv_w, magic)) - kRoundMagicBits;
  if (clamp) c = min(max(c, 0), cells - 1);
  const TableEntry e = table[c];
  return static_cast<unsigned>(e.base) + (__float_as_uint(__fsub_rn(e.bnd, u)) >> 31);
}

// The same lookup with the table addressed through a 32-bit shared-memory window address:
// `table_adj` = address of table[0] − 8·kRoundMagicBits (mod 2^32), so the cell's address is one
// shift-add of the rounded bits (the generic-pointer form above costs a separate subtraction of
// the magic per element). `magic_x8` = 8·kRoundMagicBits comes in as a kernel parameter: as a
// literal, ptxas splits it back out of the base into an add per element. Fast path only: no clamp.
__device__ __forceinline__ uint32_t table_window(const TableEntry* table, uint32_t magic_x8) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(table)) - magic_x8;
}
// The table entry of the cell whose rounded bits are `rounded` (fmaf(·, ·, magic)'s result): one
// shift-add into the window and one 8-byte shared load (boundary, base code).
__device__ __forceinline__ TableEntry window_entry(uint32_t table_adj, float rounded) {
  const uint32_t addr = (__float_as_uint(rounded) << 3) + table_adj;
  TableEntry e;
  asm("ld.shared.v2.b32 {%0, %1}, [%2];" : "=f"(e.bnd), "=r"(e.base) : "r"(addr));
  return e;
}
__device__ __forceinline__ unsigned lookup_code_window(uint32_t table_adj, float inv_w, float magic, float u) {
  const TableEntry e = window_entry(table_adj, fmaf(u, inv_w, magic));
  return static_cast<unsigned>(e.base) + (__float_as_uint(__fsub_rn(e.bnd, u)) >> 31);
}

// The lookup of u = z·M/inv_w against a table whose boundaries are stored times inv_w (M =
// inv_w/scale): the cell from one fma, and bnd·inv_w − z·M in another, rounded once from the exact
// value, so its sign is exactly that of bnd − u. Fast path only: no clamp.
__device__ __forceinline__ unsigned lookup_code_scaled(uint32_t table_adj, float magic, float z, float mult) {
  const TableEntry e = window_entry(table_adj, fmaf(z, mult, magic));
  return static_cast<unsigned>(e.base) + (__float_as_uint(fmaf(-z, mult, e.bnd)) >> 31);
}

// Fills the table from the nb sorted boundaries already in shared memory (block-wide; the caller
// synchronizes before and after). `bnd_scale` (a power of two) scales the stored boundaries.
__device__ __forceinline__ void build_table(TableEntry* table, const float* bounds, int nb, TableGeometry geo, int tid,
                                            int nthreads, float bnd_scale = 1.0f) {
  for (int c = tid; c < geo.cells(); c += nthreads) {
    const int j = c - geo.half;
    const float lo = (static_cast<float>(j) - 0.5f) * geo.w, hi = (static_cast<float>(j) + 0.5f) * geo.w;
    int base = 0;  // lower_bound over 2^bits − 1 values: one step per bit
    for (int step = (nb + 1) >> 1; step >= 1; step >>= 1)
      if (bounds[base + step - 1] < lo) base += step;
    table[c] = {base < nb && bounds[base] <= hi ? bounds[base] * bnd_scale : INFINITY, base};
  }
}

// ---- packing --------------------------------------------------------------------------------
// The C codes of a chunk form a little-endian word of C·bits bits (≤ 64, kept as two 32-bit
// halves), stored at byte offset chunk · C·bits/8 of the row: at 4 bits element 2j is the low
// nibble of byte j.
struct CodeWord {
  uint32_t lo = 0, hi = 0;
  // Codes never overlap, so + is | and compiles to one shift-add.
  __device__ __forceinline__ void put(unsigned code, int bit) {
    if (bit < 32)
      lo += code << bit;
    else
      hi += code << (bit - 32);
  }
  __device__ __forceinline__ unsigned get(int bit, unsigned mask) const {
    return ((bit < 32 ? lo >> bit : hi >> (bit - 32))) & mask;
  }
};

template <int C>
__device__ __forceinline__ void store_codes(uint8_t* p, int bits, CodeWord w) {
  switch (C * bits / 8) {
    case 1:
      *p = static_cast<uint8_t>(w.lo);
      break;
    case 2:
      *reinterpret_cast<uint16_t*>(p) = static_cast<uint16_t>(w.lo);
      break;
    case 3:
      p[0] = static_cast<uint8_t>(w.lo);
      p[1] = static_cast<uint8_t>(w.lo >> 8);
      p[2] = static_cast<uint8_t>(w.lo >> 16);
      break;
    case 4:
      *reinterpret_cast<uint32_t*>(p) = w.lo;
      break;
    default:
      *reinterpret_cast<uint2*>(p) = make_uint2(w.lo, w.hi);
      break;
  }
}

template <int C>
__device__ __forceinline__ CodeWord load_codes(const uint8_t* p, int bits) {
  CodeWord w;
  switch (C * bits / 8) {
    case 1:
      w.lo = *p;
      break;
    case 2:
      w.lo = *reinterpret_cast<const uint16_t*>(p);
      break;
    case 3:
      w.lo = p[0] | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16);
      break;
    case 4:
      w.lo = *reinterpret_cast<const uint32_t*>(p);
      break;
    default: {
      const uint2 d = *reinterpret_cast<const uint2*>(p);
      w.lo = d.x;
      w.hi = d.y;
      break;
    }
  }
  return w;
}

// Flips the sign of x where bit `bit` of mask is set: x · (±1) exactly, as the CPU multiplies.
__device__ __forceinline__ float apply_sign(float x, uint32_t mask, int bit) {
  return __int_as_float(__float_as_int(x) ^ static_cast<int>(((mask >> bit) & 1u) << 31));
}

// ---- shared memory ------------------------------------------------------------------------
__device__ __forceinline__ unsigned char* dynamic_smem() {
  extern __shared__ __align__(16) unsigned char smem_bytes[];
  return smem_bytes;
}

// Byte offsets into the dynamic shared memory of one block; computed the same way on both sides.
struct SmemLayout {
  int table = 0, bounds = 0, centroids = 0, red = 0, xbuf = 0, stage = 0, total = 0;
};

__host__ __device__ inline int align_up(int x, int a) { return (x + a - 1) / a * a; }

// `wide`: the group spans several warps, so the transform and the sums go through shared memory.
// `stage_bytes`: per thread, the append's input tiles in flight (staged variant), else 0.
__host__ __device__ inline SmemLayout smem_layout(int cells, int bits, int nthreads, int elems, bool wide,
                                                  int stage_bytes = 0) {
  SmemLayout s;
  int at = 0;
  s.table = at;
  at += cells * static_cast<int>(sizeof(TableEntry));
  s.bounds = at;
  at = align_up(at + ((1 << bits) - 1) * 4, 16);
  s.centroids = at;
  at = align_up(at + (1 << bits) * 4, 16);
  s.red = at;
  if (wide) at = align_up(at + (nthreads / 32) * 3 * 8, 16);
  s.xbuf = at;
  if (wide) at += nthreads * elems * 4;
  at = align_up(at, 16);
  s.stage = at;
  at += nthreads * stage_bytes;
  s.total = at;
  return s;
}

// ---- launch ---------------------------------------------------------------------------------
// A grid of as many blocks as fit on the GPU at once (the kernels stride over their tiles).
// `resident`: the kernel's occupancy at this launch's shape.
inline int blocks_for(int64_t tiles, int resident, int device) {
  const int64_t all = static_cast<int64_t>(multiprocessor_count(device)) * std::max(resident, 1);
  return static_cast<int>(std::max<int64_t>(1, std::min(tiles, all)));
}

}  // namespace frugal::cuda::kvdev
