// The quantize-append of the KV cache with the transform on tensor cores (the mma variant of
// kv::AppendChoice): D = 64, 128 or 256 at 4 or 8 bits, f16 or bf16 input on 16 bytes, the L2 scale.
// Bytes floor: x read once (2·D per vector), the packed row and its scale written once
// (D·bits/8 + the scale's 4 or 2 bytes); the same scales as src/cpu/kv.cpp, and the same codes except
// within ~1e-6 of a boundary.
#include <type_traits>

#include "core/kv_backend.h"
#include "cuda/common.cuh"
#include "cuda/kv/append.cuh"
#include "cuda/kv/kv.cuh"

namespace frugal::cuda {

namespace {

using namespace kvdev;

// D = 64, 128 or 256 (in segments of S = min(D, 128): a 256-element vector's halves are two mma
// rows, one more butterfly between them; B carries the first half's random signs, and the second
// half's inputs are sign-flipped where its signs differ), AP = S/32, f16 or bf16 input, the
// original scale rule. Within a segment, with
// i = a0 + 2a' + 2AP·b (a0 < 2, a' < AP, b < 16) and j = c0 + 2c' + 2AP·d alike,
// H_S[i][j] = H2[a0][c0]·H_AP[a'][c']·H16[b][d], so
//   Z[a'][c0, d] = Σ_{a0, b} s_i·x_i·H2[a0][c0]·H16[b][d]   two mma.m16n8k16 (k-steps) per a' and
//                                                         n-tile: rows = 16 segments, k = (a0, b),
//                                                         n = (c0, d); B holds the ±1 with the
//                                                         random signs folded in (exact in f16 /
//                                                         bf16; products of the inputs exact in f32)
//   y[j] = Σ_a' H_AP[a'][c']·Z[a'][c0, d]                log2(AP) butterfly stages in f32
//                                                         registers: a lane's C fragments hold
//                                                         every a'.
// The k and n orders are permuted so that lane (g, q) multiplies the 8AP contiguous elements
// from 8AP·q of rows g and g+8 and ends with the codes of the same elements (8 to 32 bytes of a
// packed row, stored whole): k = 2q + a0 ↔ b = 4q + 2ks and k = 2q + 8 + a0 ↔ b = 4q + 2ks + 1,
// so each A register is a word of the staged input as it is (elements a0 = 0, 1 of 2a' + 2AP·b);
// column n of n-tile nt ↔ c0 = nt/2, d = 4(n/2) + 2(nt & 1) + (n & 1). Without random signs B does
// not depend on a' and its 8 fragments stay in registers; with them, 8AP come from shared memory.
// Loads are 16-byte cp.async copies of each warp's tile of 16 vectors into its own stage (chunk c
// of row r at c ^ 2·(c ≥ 8) ^ (r & 1): the copies' and the reads' 8-lane phases hit 8 distinct
// bank groups), one tile ahead (a second tile ahead measured no faster); no block barrier after
// the prologue. The lookup works on the transform directly: cell = rint(z·M), M = inv_w/scale,
// and the boundary test bnd·inv_w − z·M in one fma (the table holds the boundaries times inv_w,
// exact for a power of two). Measurements: docs/performance.md, "KV append".
//
// The mma accumulates in f32 in its own order, so y is not the CPU's y bit for bit: codes may
// differ where u lies within ~1e-6 of a boundary (what the tests allow). The norm (from x, in
// f64, kv::backend::kMaxNorm) and with it the scale are the CPU's.
namespace mmapath {
constexpr int kWarps = 8;  // two blocks per SM: 16 warps of ≤ 128 registers (10 warps of 96 measured 2.5% slower)
constexpr int kStages = 2;  // the tile being read and the next one in flight

// The mma rows are segments of min(D, 128) elements: a vector of D = 256 is two rows (its halves,
// rows g and g + 8 of the mma, one more butterfly stage between them), so a tile holds 16 rows.
template <int D>
constexpr int segment() {
  return D < 128 ? D : 128;
}
// Vectors of a tile: 16 at D ≤ 128, 8 at D = 256.
template <int D>
constexpr int tile_vectors() {
  return 16 * segment<D>() / D;
}
template <int D>
constexpr int tile_bytes() {
  return 16 * 2 * segment<D>();
}
// B fragments: a' (segment/32 of them) × 2 k-steps × 4 n-tiles.
template <int D>
constexpr int b_fragments() {
  return segment<D>() / 32 * 8;
}
// Byte offset of 16-byte chunk c of staged row r (the input's order: a 256-element vector's halves
// are rows 2v and 2v + 1). The XORs put the 8-lane phases of both the copies (a row's consecutive
// chunks) and the reads (chunks AP·q + k of vectors g, g + 1) on 8 distinct bank groups.
template <int D>
__device__ __forceinline__ int stage_offset(int r, int c) {
  constexpr int S = segment<D>();
  const int parity = D == 256 ? (r >> 1) & 1 : r & 1;
  return r * 2 * S + 16 * (c ^ parity ^ (S == 128 ? (c >> 3) << 1 : 0));
}


// ±1 as the bits of a T.
template <typename T>
__host__ __device__ constexpr uint32_t unit_bits(bool negative) {
  if constexpr (std::is_same_v<T, __half>)
    return negative ? 0xBC00u : 0x3C00u;
  else
    return negative ? 0xBF80u : 0x3F80u;
}

// Adds the squares of the two T in w to s0 and s1, in f64 (exact squares).
template <typename T>
__device__ __forceinline__ void add_squares(uint32_t w, double& s0, double& s1) {
  double lo, hi;
  if constexpr (std::is_same_v<T, __half>) {
    asm("{.reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.f64.f16 %0, l;\n cvt.f64.f16 %1, h;\n}"
        : "=d"(lo), "=d"(hi)
        : "r"(w));
  } else {
    lo = static_cast<double>(__uint_as_float(w << 16));
    hi = static_cast<double>(__uint_as_float(w & 0xffff0000u));
  }
  s0 = fma(lo, lo, s0);
  s1 = fma(hi, hi, s1);
}

__device__ __forceinline__ uint4 lds128(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
  return v;
}

// D = 256 with random signs: per lane, the sign flips that turn the first half's signs (folded
// into B, which both halves share) into the second half's, as XOR masks of its 16 input words.
template <int D>
constexpr int half_mask_bytes() {
  return D == 256 ? 32 * 64 : 0;
}

struct Layout {
  int table, bounds, btab, hmask, stage, total;
};
template <int D>
__host__ __device__ inline Layout layout(int cells, int bits) {
  Layout l;
  l.table = 0;
  l.bounds = align_up(cells * static_cast<int>(sizeof(TableEntry)), 16);
  l.btab = align_up(l.bounds + ((1 << bits) - 1) * 4, 16);
  l.hmask = l.btab + b_fragments<D>() * 32 * 8;
  l.stage = l.hmask + half_mask_bytes<D>();
  l.total = l.stage + kWarps * kStages * tile_bytes<D>();
  return l;
}
}  // namespace mmapath

template <typename T, int D, int BITS, bool kSigns>
__global__ void __launch_bounds__(mmapath::kWarps * 32, 2) kernel_append_mma(const __grid_constant__ AppendParams p) {
  using namespace mmapath;
  constexpr int S = segment<D>();                // elements of an mma row
  constexpr int kRowsPerVec = D / S;              // 1, or 2 at D = 256 (rows g and g + 8)
  constexpr int kVecs = tile_vectors<D>();
  constexpr int AP = S / 32;                      // a' values: elements per lane and row = 8·AP
  constexpr int kChunks = S / 8;                  // 16-byte chunks of a staged row
  constexpr int kTileBytes = tile_bytes<D>();
  constexpr int kRowCodeBytes = D * BITS / 8;     // a packed vector
  constexpr int kWords = AP * BITS / 4;           // 32-bit words of a lane's 8·AP codes of a row
  constexpr int nb = (1 << BITS) - 1;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, q = lane & 3;
  const Layout lay = layout<D>(p.geo.cells(), BITS);
  unsigned char* smem = dynamic_smem();
  auto* table = reinterpret_cast<TableEntry*>(smem + lay.table);
  auto* bounds = reinterpret_cast<float*>(smem + lay.bounds);
  auto* btab = reinterpret_cast<uint2*>(smem + lay.btab);
  auto* hmask = reinterpret_cast<uint4*>(smem + lay.hmask);
  unsigned char* stages = smem + lay.stage + warp * kStages * kTileBytes;

  const int64_t tiles = (p.total + kVecs - 1) / kVecs;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kWarps + warp, stride = static_cast<int64_t>(gridDim.x) * kWarps;

  // Copies tile `tile` (kVecs vectors, 16 staged rows) into stage st: lane l takes chunk
  // l % kChunks of rows (32/kChunks)·i + l/kChunks (a warp instruction copies whole rows), zeros
  // past the end; one commit group. Lane r finds vector kVecs·tile + r % kVecs: its source, which
  // the other lanes get by shuffle, and its cache row (-1 past the end), returned.
  constexpr int kRowsPerCopy = 32 / kChunks;
  const int chunk = lane % kChunks, row0 = lane / kChunks;
  auto fetch = [&](int64_t tile, int st) -> int64_t {
    int64_t fetched_row = -1;
    const int64_t v = tile * kVecs + lane % kVecs;
    const T* mine = nullptr;
    if (tile < tiles && v < p.total) {
      int s, h;
      int64_t tok;
      locate_vector(p, v, s, tok, h);
      mine = static_cast<const T*>(p.x) + (p.dense ? v * D : s * p.stride_seq + tok * p.stride_tok + h * p.stride_head);
      fetched_row = cache_row(p, s, tok, h);
    }
    unsigned char* stage = stages + st * kTileBytes;
    if (p.dense && (tile + 1) * kVecs <= p.total) {  // a whole tile of contiguous vectors from one base
      const T* base = static_cast<const T*>(p.x) + tile * kVecs * D + row0 * S + chunk * 8;
#pragma unroll
      for (int i = 0; i < 16 / kRowsPerCopy; ++i)
        cp_async16(stage + stage_offset<D>(kRowsPerCopy * i + row0, chunk), base + kRowsPerCopy * i * S, 16);
    } else {
#pragma unroll
      for (int i = 0; i < 16 / kRowsPerCopy; ++i) {
        const int row = kRowsPerCopy * i + row0;
        const T* src = reinterpret_cast<const T*>(
            __shfl_sync(kFullMask, reinterpret_cast<unsigned long long>(mine), row / kRowsPerVec));
        src = src ? src + (row % kRowsPerVec) * S + chunk * 8 : nullptr;
        cp_async16(stage + stage_offset<D>(row, chunk), src ? src : p.x, src ? 16 : 0);
      }
    }
    cp_async_commit();
    return fetched_row;
  };
  int64_t rowq[kStages - 1];  // this lane's row of each tile in flight, oldest first
#pragma unroll
  for (int k = 0; k + 1 < kStages; ++k) rowq[k] = fetch(first + k * stride, k);

  // Prologue: boundaries, the lookup table and the B fragments (AP a' × 2 k-steps × 4 n-tiles ×
  // 32 lanes): B[k][n] = s[a0 + 2a' + 2AP·b]·H2[a0][c0]·H16[b][d], k = 2q + a0 ↔ b = 4q + 2ks and
  // k = 2q + 8 + a0 ↔ b = 4q + 2ks + 1; column n of n-tile nt ↔ c0 = nt/2, d = 4(n/2) + 2(nt & 1) + (n & 1).
  for (int i = tid; i < nb; i += blockDim.x) bounds[i] = p.boundaries[i];
  for (int e = tid; e < b_fragments<D>() * 32; e += blockDim.x) {
    const int ap = e >> 8, ks = (e >> 7) & 1, nt = (e >> 5) & 3, l = e & 31, lg = l >> 2, lq = l & 3;
    const int c0 = nt >> 1, d = 4 * (lg >> 1) + 2 * (nt & 1) + (lg & 1);
    uint32_t half[4];  // (a0, b): (0, b0), (1, b0), (0, b0 + 1), (1, b0 + 1)
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const int a0 = kk & 1, b = 4 * lq + 2 * ks + (kk >> 1);
      const bool neg = ((__popc(b & d) + (a0 & c0)) & 1) != (p.signs && p.signs[a0 + 2 * ap + 2 * AP * b] < 0.0f);
      half[kk] = unit_bits<T>(neg);
    }
    btab[e] = make_uint2(half[0] | half[1] << 16, half[2] | half[3] << 16);
  }
  if constexpr (kRowsPerVec == 2 && kSigns)  // word w = j·AP + a' of lane l: elements 2a' + 8(4q + j) + (0, 1)
    for (int e = tid; e < 32 * 16; e += blockDim.x) {
      const int l = e >> 4, w = e & 15, i = 2 * (w % AP) + 2 * AP * (4 * (l & 3) + w / AP);
      const uint32_t m =
          (p.signs[i] != p.signs[i + 128] ? 0x8000u : 0u) | (p.signs[i + 1] != p.signs[i + 129] ? 0x80000000u : 0u);
      reinterpret_cast<uint32_t*>(hmask)[e] = m;
    }
  __syncthreads();
  build_table(table, bounds, nb, p.geo, tid, blockDim.x, p.geo.inv_w);
  __syncthreads();
  const uint32_t table_adj = table_window(table, p.magic_x8);
  const uint32_t stage_base = static_cast<uint32_t>(__cvta_generic_to_shared(stages));
  // Without random signs B does not depend on a': its 8 fragments stay in registers.
  uint2 bfix[2][4];
  if constexpr (!kSigns)
#pragma unroll
    for (int ks = 0; ks < 2; ++ks)
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) bfix[ks][nt] = btab[(ks * 4 + nt) * 32 + lane];

  int st = 0;
  for (int64_t tile = first; tile < tiles; tile += stride) {
    // This tile's rows g and g + 8 (from its fetch), then the next tile's fetch.
    const int64_t row_lo = __shfl_sync(kFullMask, rowq[0], g),
                  row_hi = __shfl_sync(kFullMask, rowq[0], (g + 8) % kVecs);
#pragma unroll
    for (int k = 0; k + 2 < kStages; ++k) rowq[k] = rowq[k + 1];
    rowq[kStages - 2] = fetch(tile + (kStages - 1) * stride, st == 0 ? kStages - 1 : st - 1);
    cp_async_wait<kStages - 1>();
    __syncwarp();
    // Rows g and g + 8 (the halves of vector g at D = 256), elements 8AP·q .. 8AP·q + 8AP − 1 of
    // the row as 4AP words: word j·AP + a' holds elements (a0 = 0, 1) + 2a' + 2AP·(4q + j).
    uint4 P[2][AP];
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int k = 0; k < AP; ++k)
        P[h][k] = lds128(stage_base + st * kTileBytes +
                         stage_offset<D>(kRowsPerVec == 2 ? 2 * g + h : g + 8 * h, AP * q + k));
    __syncwarp();  // every lane has read the stage before any lane refills it
    st = st + 1 == kStages ? 0 : st + 1;
    if constexpr (kRowsPerVec == 2 && kSigns)
#pragma unroll
      for (int k = 0; k < AP; ++k) {
        const uint4 f = hmask[lane * 4 + k];
        P[1][k] = make_uint4(P[1][k].x ^ f.x, P[1][k].y ^ f.y, P[1][k].z ^ f.z, P[1][k].w ^ f.w);
      }
    auto pw = [&](int h, int w) -> uint32_t {
      const uint4& v = P[h][w >> 2];
      return (w & 3) == 0 ? v.x : (w & 3) == 1 ? v.y : (w & 3) == 2 ? v.z : v.w;
    };

    // ‖x‖² of both rows in f64: four chains per row, then the quad.
    double ss[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      double s[4] = {0.0, 0.0, 0.0, 0.0};
#pragma unroll
      for (int w = 0; w < 4 * AP; w += 2) {
        add_squares<T>(pw(h, w), s[0], s[1]);
        add_squares<T>(pw(h, w + 1), s[2], s[3]);
      }
      ss[h] = (s[0] + s[1]) + (s[2] + s[3]);
      ss[h] += __shfl_xor_sync(kFullMask, ss[h], 1);
      ss[h] += __shfl_xor_sync(kFullMask, ss[h], 2);
    }
    // Lane q finishes row g + 8(q & 1) (at D = 256 every lane vector g): n, the scale and the
    // multiplier M = inv_w/scale of the lookup (u = FWHT(x)/n, which the CPU forms as
    // (FWHT(x)·f32(1/√D))·f32(√D/n)).
    const double n = sqrt(kRowsPerVec == 2 ? ss[0] + ss[1] : (q & 1) ? ss[1] : ss[0]);
    const bool flag = !(n <= kv::backend::kMaxNorm), zero = n <= 1e-10;
    const float scale = flag ? __int_as_float(0x7fc00000) : zero ? 0.0f : static_cast<float>(n);
    const float mult = flag || zero ? 0.0f : __frcp_rn(scale) * p.geo.inv_w;
    const float mult_other = kRowsPerVec == 2 ? mult : __shfl_xor_sync(kFullMask, mult, 1);
    const bool flag_other = kRowsPerVec == 2 ? flag : __shfl_xor_sync(kFullMask, flag, 1);
    const float m[2] = {(q & 1) ? mult_other : mult, (q & 1) ? mult : mult_other};
    const bool flagged[2] = {(q & 1) ? flag_other : flag, (q & 1) ? flag : flag_other};
    if (__any_sync(kFullMask, flagged[0] || flagged[1])) {  // rare: keep u finite (codes are zeroed below)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        if (flagged[h])
#pragma unroll
          for (int k = 0; k < AP; ++k) P[h][k] = make_uint4(0, 0, 0, 0);
    }

    // Two passes, c0 = 0 and 1. For each a' the mma's A fragments are words of P as they are:
    // k = 2q + a0 (+ 8) at b = 4q + 2ks (+ 1), i.e. words (2ks)·AP + a' and (2ks + 1)·AP + a' of
    // rows g and g + 8.
    uint32_t words[2][kWords];
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int w = 0; w < kWords; ++w) words[h][w] = 0;
#pragma unroll
    for (int c0 = 0; c0 < 2; ++c0) {
      float z[AP][2][4];  // [a'][n-tile 2·c0 + t][c]
#pragma unroll
      for (int ap = 0; ap < AP; ++ap)
#pragma unroll
        for (int t = 0; t < 2; ++t) {
#pragma unroll
          for (int c = 0; c < 4; ++c) z[ap][t][c] = 0.0f;
#pragma unroll
          for (int ks = 0; ks < 2; ++ks) {
            const int w0 = 2 * ks * AP + ap, w1 = (2 * ks + 1) * AP + ap;
            const uint32_t A[4] = {pw(0, w0), pw(1, w0), pw(0, w1), pw(1, w1)};
            const uint2 b = kSigns ? btab[((ap * 2 + ks) * 4 + 2 * c0 + t) * 32 + lane] : bfix[ks][2 * c0 + t];
            mma16816<T>(z[ap][t], A, b.x, b.y);
          }
        }
      // H over a' (butterflies in f32): z[c'][t][c] is then element c0 + 2c' + 2AP·d of row
      // g + 8(c >> 1), d = 4q + 2t + (c & 1): the lane's code 2AP·(2t + (c & 1)) + c0 + 2c'.
      register_stages<AP>([&](int a, int a2) {
#pragma unroll
        for (int t = 0; t < 2; ++t)
#pragma unroll
          for (int c = 0; c < 4; ++c) butterfly(z[a][t][c], z[a2][t][c]);
      });
      // D = 256: H2 over the halves (rows g and g + 8: c and c + 2); c >> 1 is then the output half.
      if constexpr (kRowsPerVec == 2)
#pragma unroll
        for (int ap = 0; ap < AP; ++ap)
#pragma unroll
          for (int t = 0; t < 2; ++t)
#pragma unroll
            for (int c = 0; c < 2; ++c) butterfly(z[ap][t][c], z[ap][t][c + 2]);
#pragma unroll
      for (int t = 0; t < 2; ++t)
#pragma unroll
        for (int c = 0; c < 4; ++c)
#pragma unroll
          for (int cp = 0; cp < AP; ++cp) {
            const unsigned code = lookup_code_scaled(table_adj, p.magic, z[cp][t][c], m[c >> 1]);
            const int bit = (2 * AP * (2 * t + (c & 1)) + c0 + 2 * cp) * BITS;
            words[c >> 1][bit >> 5] += code << (bit & 31);
          }
    }

#pragma unroll
    for (int h = 0; h < 2; ++h) {  // rows g and g + 8, or the halves of vector g
      const int64_t row = h && kRowsPerVec == 1 ? row_hi : row_lo;
      if (row < 0) continue;
      uint8_t* dst = p.packed + row * kRowCodeBytes + (kRowsPerVec == 2 ? h * kRowCodeBytes / 2 : 0) + q * (kWords * 4);
      if constexpr (kWords % 4 == 0) {
#pragma unroll
        for (int w = 0; w < kWords; w += 4)
          reinterpret_cast<uint4*>(dst)[w / 4] =
              flagged[h] ? make_uint4(0, 0, 0, 0) : make_uint4(words[h][w], words[h][w + 1], words[h][w + 2], words[h][w + 3]);
      } else {
        static_assert(kWords == 2, "a lane stores 8, 16 or 32 bytes of a row");
        *reinterpret_cast<uint2*>(dst) = flagged[h] ? make_uint2(0, 0) : make_uint2(words[h][0], words[h][1]);
      }
      if (kRowsPerVec == 1 ? q == h : q == 0 && h == 0) store_scale(p.scales, p.scales_f16, row, scale);
    }
  }
  cp_async_wait<0>();  // no copy outlives the block
}
// The tensor-core kernel (kernel_append_mma) for one call.
template <typename T, int D, int BITS>
void launch_append_mma(const AppendParams& p, int device, cudaStream_t stream) {
  constexpr int W = mmapath::kWarps;
  const mmapath::Layout lay = mmapath::layout<D>(p.geo.cells(), BITS);
  auto* kernel = kernel_append_mma<T, D, BITS, false>;
  if (p.signs) kernel = kernel_append_mma<T, D, BITS, true>;
  const auto* fn = reinterpret_cast<const void*>(kernel);
  allow_dynamic_smem(fn, lay.total);
  const int resident = resident_blocks(fn, W * 32, lay.total);
  const int64_t tiles = ceil_div<int64_t>(p.total, mmapath::tile_vectors<D>());
  kernel<<<blocks_for(ceil_div<int64_t>(tiles, W), resident, device), W * 32, lay.total, stream>>>(p);
  FRUGAL_CUDA_CHECK_LAUNCH();
}

template <typename T, int D>
void launch_append_mma_d(const AppendParams& p, int device, cudaStream_t stream) {
  if (p.bits == 4)
    launch_append_mma<T, D, 4>(p, device, stream);
  else
    launch_append_mma<T, D, 8>(p, device, stream);
}

}  // namespace

namespace kvdev {

void append_mma(const AppendParams& p, const kv::AppendChoice& c, DType dtype, int device, cudaStream_t stream) {
  FRUGAL_CHECK(c.max_threads == mmapath::kWarps * 32 && c.min_blocks == 2 && c.staged, internal, "kv::append",
               "the tensor-core kernel runs " << mmapath::kWarps * 32 << "x2 staged, the choice says " << kv::to_string(c));
  dispatch_float(dtype, "kv::append", [&]<typename T>() {
    if constexpr (std::is_same_v<T, float>) {
      FRUGAL_FAIL(internal, "kv::append", "the tensor-core kernel was chosen for f32 input");
    } else {
      switch (p.dim) {
        case 64:
          return launch_append_mma_d<T, 64>(p, device, stream);
        case 128:
          return launch_append_mma_d<T, 128>(p, device, stream);
        case 256:
          return launch_append_mma_d<T, 256>(p, device, stream);
        default:
          FRUGAL_FAIL(internal, "kv::append", "the tensor-core kernel was chosen for D = " << p.dim);
      }
    }
  });
}

}  // namespace kvdev

}  // namespace frugal::cuda
