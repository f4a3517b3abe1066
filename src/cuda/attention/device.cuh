// Small device helpers of the decode-attention kernels: element loads and stores of every q / out
// dtype, fp16 packing, the byte-indexed table lookups, warp reductions, packed-row loads, ring slots.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace frugal::cuda::decode {
namespace {

__device__ __forceinline__ float load_elem(const void* base, int dtype, int64_t i) {
  if (dtype == 0) return static_cast<const float*>(base)[i];
  if (dtype == 1) return __half2float(static_cast<const __half*>(base)[i]);
  return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
}

// The bits of element i (f32, or a 16-bit f16 / bf16 in the low half), converted later by
// raw_to_float: a load whose value is not consumed yet does not stall the warp, so the query loads
// can be in flight while the tables are built.
__device__ __forceinline__ uint32_t load_raw(const void* base, int dtype, int64_t i) {
  if (dtype == 0) return __float_as_uint(static_cast<const float*>(base)[i]);
  return static_cast<const unsigned short*>(base)[i];
}

__device__ __forceinline__ float raw_to_float(uint32_t bits, int dtype) {
  if (dtype == 0) return __uint_as_float(bits);
  if (dtype == 1) return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
  return __bfloat162float(__ushort_as_bfloat16(static_cast<unsigned short>(bits)));
}

__device__ __forceinline__ void store_elem(void* base, int dtype, int64_t i, float v) {
  if (dtype == 0)
    static_cast<float*>(base)[i] = v;
  else if (dtype == 1)
    static_cast<__half*>(base)[i] = __float2half_rn(v);
  else
    static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(v);
}

__device__ __forceinline__ uint32_t half_bits(float x) { return __half_as_ushort(__float2half_rn(x)); }

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

__device__ __forceinline__ uint32_t byte_of(uint32_t w, int k) { return __byte_perm(w, 0u, 0x4440u | k); }

// Entry e of a byte-indexed table with 32 copies (lut[e * 32 + lane]), from this lane's copy at the
// shared-memory address `lane_addr`: one IMAD and one LDS. Written in PTX so the compiler cannot
// rebuild the index as (e << 5 | lane) and rescale it (five instructions, three on the busy ALU
// pipe). Not volatile: a pure read of a table that is constant
// while the loop runs, free to be scheduled early.
__device__ __forceinline__ uint32_t lut_load(uint32_t lane_addr, uint32_t e) {
  uint32_t v;
  asm("{\n .reg .u32 a;\n mad.lo.u32 a, %1, 128, %2;\n ld.shared.u32 %0, [a];\n}\n" : "=r"(v) : "r"(e), "r"(lane_addr));
  return v;
}

// The wide table (kWide): entry e's 32 copies at byte e·256 of the table, so the address of byte k
// of x in lane `lane4 / 4`'s copy is one PRMT — byte 1 = x's byte k, byte 0 = lane·4 — plus the
// table's base (uniform): no IMAD per lookup. The 4-bit table takes bytes 0–127 of each 256-byte
// row, the 8-bit table bytes 128–255 (lane4 = lane·4 + 128): 64 KB of shared memory for both widths,
// where the register loop's two tables take 32 KB each.
__device__ __forceinline__ uint32_t lut_load_wide(uint32_t base, uint32_t lane4, uint32_t x, int k) {
  const uint32_t off = __byte_perm(x, lane4, 0x5504u | (static_cast<uint32_t>(k) << 4));
  uint32_t v;
  asm("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(base + off));
  return v;
}

// 2^x: exp2f, or (kFast) the bare ex2.approx.ftz (no range fix-ups; the softmax weights it makes are
// ≤ 1 and rounded to fp16 — results under 2^-126 flush to zero either way).
template <bool kFast>
__device__ __forceinline__ float ex2(float x) {
  if constexpr (kFast) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
  } else {
    return exp2f(x);
  }
}

// Transpose of the 8×8 b16 matrix whose row lane/4, columns 2(lane%4) and +1, each lane holds.
__device__ __forceinline__ uint32_t transpose_8x8(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// The larger of a and b, or NaN where either is NaN (fmaxf returns the other operand): the softmax's
// running maxima carry a NaN score, so that a row whose scores are all NaN ends NaN instead of at
// −∞, which the merges turn into zeros. One instruction from sm_80 on (max.NaN), as fmaxf; the same
// value as fmaxf wherever neither is NaN.
__device__ __forceinline__ float max_nan(float a, float b) {
#if __CUDA_ARCH__ >= 800
  float y;
  asm("max.NaN.f32 %0, %1, %2;\n" : "=f"(y) : "f"(a), "f"(b));
  return y;
#else
  return isnan(a) ? a : (isnan(b) ? b : fmaxf(a, b));
#endif
}

// warp_max with max_nan: NaN if any lane's x is.
__device__ __forceinline__ float warp_max_nan(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = max_nan(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Loads N bytes (N a multiple of 4, the address N-aligned up to 16) into N/4 words, read-only path.
template <int N>
__device__ __forceinline__ void load_words(const uint8_t* p, uint32_t (&w)[N / 4]) {
  if constexpr (N % 16 == 0) {
#pragma unroll
    for (int i = 0; i < N / 16; ++i) {
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(p) + i);
      w[4 * i] = v.x;
      w[4 * i + 1] = v.y;
      w[4 * i + 2] = v.z;
      w[4 * i + 3] = v.w;
    }
  } else if constexpr (N == 8) {
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(p));
    w[0] = v.x;
    w[1] = v.y;
  } else {
    static_assert(N == 4, "row pieces are 4, 8 or a multiple of 16 bytes");
    w[0] = __ldg(reinterpret_cast<const unsigned int*>(p));
  }
}

// Code i of a packed row (little-endian bit stream of `bits`-bit codes).
__device__ __forceinline__ unsigned get_code(const uint8_t* row, int i, int bits) {
  const int bit = i * bits;
  const int shift = bit & 7;
  unsigned v = __ldg(row + (bit >> 3)) >> shift;
  if (shift + bits > 8) v |= static_cast<unsigned>(__ldg(row + (bit >> 3) + 1)) << (8 - shift);
  return v & ((1u << bits) - 1u);
}

// Slot of token `pos` in a ring, given the slot of an earlier token `base_pos` (base_slot) less than
// `capacity` tokens... any distance: the loop runs once for the normal case pos - base < capacity.
__device__ __forceinline__ int64_t advance_slot(int64_t base_slot, int64_t delta, int64_t capacity) {
  int64_t s = base_slot + delta;
  if (s >= capacity) s -= capacity;
  if (s >= capacity) s %= capacity;
  return s;
}

}  // namespace
}  // namespace frugal::cuda::decode
