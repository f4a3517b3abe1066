// The KV-cache kernels' interface: plain argument structs, and the CPU and CUDA functions that
// take them. Public entry points (src/core/kv_cache.cpp) validate; these never do.
#pragma once

#include <cmath>
#include <cstdint>

#include "frugal/half.h"
#include "frugal/kv_cache.h"

namespace frugal::kv::backend {

// Appends to at most this many sequences (of a cache with capacity < 2^31) pass their start
// positions to the CUDA kernel by value (no host-to-device copy, no synchronization: what a
// one-token decode step needs); larger batches go through the device array AppendArgs::starts.
constexpr int kInlineStarts = 64;

// float(1/√D), rounded once from double: both backends multiply by exactly this value (their
// packed bytes and scales must be bit-identical).
inline float inv_sqrt_dim(int d) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(d))); }

// The norm n = ‖y‖ = ‖x‖ (the transform is orthonormal) is summed in f64 from the input x, exactly
// rounded squares of its f32 values, so it does not depend on how a backend rounds the transform.
// A vector whose norm is not finite or above kMaxNorm is flagged (codes 0, a NaN scale): its f32
// transform could overflow (every stage's values stay below √D·n ≤ 2^6·2^120 < FLT_MAX otherwise).
constexpr double kMaxNorm = 0x1p120;

// The grid of the codebook lookup tables of both backends: cell j = rint(u/w) covers
// [(j − ½)w, (j + ½)w], w the largest power of two below the smallest gap between the boundaries
// of `bits` (so a cell holds at most one boundary), and cells beyond ±half hold none.
struct CellGrid {
  double w = 0;
  int half = 0;
};
CellGrid cell_grid(int bits);  // src/core/codebook.cpp

// Quantize `seqs × tokens × heads` vectors of x into the cache storage.
struct AppendArgs {
  const void* x = nullptr;  // element (s, t, h, i) at x[s*x_stride_seq + t*x_stride_tok + h*x_stride_head + i]
  DType x_dtype = DType::f32;
  int64_t x_stride_seq = 0, x_stride_tok = 0, x_stride_head = 0;  // in elements
  int seqs = 1;
  int64_t tokens = 1;
  int heads = 1, dim = 0, bits = 4;
  int64_t capacity = 0;
  bool sliding = false;
  const int64_t* host_starts = nullptr;  // [seqs] first write position of each sequence (host memory)
  const int64_t* starts = nullptr;       // the same in device memory, for CUDA when seqs > kInlineStarts (else null)
  uint8_t* packed = nullptr;             // [seqs, heads, capacity, dim*bits/8] (already offset to the first sequence)
  void* scales = nullptr;                // [seqs, heads, capacity] f32, or f16 bits when scales_f16
  bool scales_f16 = false;               // ScaleFormat::f16 (store_scale's rounding)
  const float* signs = nullptr;          // [dim] or nullptr
  const float* centroids = nullptr;      // [2^bits]
  const float* boundaries = nullptr;     // [2^bits - 1]
  // Paged pools: when set, seqs == 1, capacity is the pool's slots, sliding is false, and token t is
  // written to slot slots[t] of every head (device memory on CUDA, host memory on the CPU).
  const int32_t* slots = nullptr;
  ScaleRule rule = ScaleRule::l2_norm;
  int device = 0;  // the CUDA device holding the cache
  bool portable = false;  // the CPU's portable loops even where its SIMD ones run (the tests compare the two)
  // Facts of x's layout, computed from the fields above before the choice (kv::describe_layout):
  bool aligned = false;  // every vector starts on its chunks' vector-load alignment (16 bytes at D >= 64)
  bool dense = false;    // x is a contiguous [seqs, tokens, heads, dim]: vector v starts at element v·dim
  AppendChoice choice;   // the CUDA kernel serving the call (kv::choose_append); the CPU ignores it
};

// Dequantize tokens [begin, begin + count) of one sequence into out [count, heads, dim].
struct DequantizeArgs {
  const uint8_t* packed = nullptr;  // [heads, capacity, dim*bits/8] of the sequence
  const void* scales = nullptr;     // [heads, capacity] f32, or f16 bits when scales_f16
  bool scales_f16 = false;
  int heads = 1, dim = 0, bits = 4;
  int64_t capacity = 0;
  bool sliding = false;
  int64_t begin = 0, count = 0;
  void* out = nullptr;
  DType out_dtype = DType::f32;
  const float* signs = nullptr;
  const float* centroids = nullptr;
  // Paged pools: when set, token begin + i comes from slot slots[i] (capacity: the pool's slots,
  // sliding false; device memory on CUDA, host memory on the CPU).
  const int32_t* slots = nullptr;
  int device = 0;  // the CUDA device holding the cache
};

// Copies between token vectors and a cache's exact rows (f16 bits; kv_cache.h, "Exact rows"): row r
// < sinks holds token r, row sinks + t mod window token t. store: the tokens of an append that land
// in exact rows (the first `sinks` positions, the last min(tokens, window) of each sequence), a
// vector with a non-finite value or one beyond f16's range as a row of NaN. load: tokens
// [begin, begin + tokens) of one sequence, every one of them in an exact row, into out.
struct ExactArgs {
  uint16_t* rows = nullptr;  // [seqs, heads, sinks + window, dim] (offset to the first sequence)
  int seqs = 1, heads = 1, dim = 0, sinks = 0, window = 0;
  int64_t tokens = 0;
  // store: x as AppendArgs::x (its dtype and strides in elements), each sequence's first write position
  const void* x = nullptr;
  DType x_dtype = DType::f32;
  int64_t x_stride_seq = 0, x_stride_tok = 0, x_stride_head = 0;
  const int64_t* host_starts = nullptr;  // [seqs] host memory
  const int64_t* starts = nullptr;       // the same in device memory (CUDA) when seqs > kInlineStarts, else null
  // load: out [tokens, heads, dim] contiguous
  void* out = nullptr;
  DType out_dtype = DType::f32;
  int64_t begin = 0;
  int device = 0;
};

// A scale as ScaleFormat::f16 stores it: the f16 rounding of the f32 scale (nearest even), NaN where
// that rounding overflows (a finite scale ≥ 65520 reads as a non-finite vector's).
constexpr uint16_t kHalfNaN = 0x7e00;
inline uint16_t scale_to_half(float s) {
  const uint16_t h = float_to_half(s);
  return (h & 0x7fff) == 0x7c00 ? kHalfNaN : h;
}

// The scale of vector i of a cache's scales (f32, or f16 bits when f16), on the CPU.
inline float load_scale(const void* scales, bool f16, int64_t i) {
  return f16 ? half_to_float(static_cast<const uint16_t*>(scales)[i]) : static_cast<const float*>(scales)[i];
}
inline void store_scale(void* scales, bool f16, int64_t i, float s) {
  if (f16)
    static_cast<uint16_t*>(scales)[i] = scale_to_half(s);
  else
    static_cast<float*>(scales)[i] = s;
}

// The exact row of token t (one that a cache of these sinks and window holds in f16); constexpr, so
// kernels call it too.
constexpr int64_t exact_row(int64_t t, int sinks, int window) { return t < sinks ? t : sinks + t % window; }

// f16's largest finite value: a vector beyond it is stored as NaN (its f16 copy would overflow).
constexpr float kHalfMax = 65504.0f;

}  // namespace frugal::kv::backend

namespace frugal::cpu {
void kv_append(const kv::backend::AppendArgs& a);
void kv_dequantize(const kv::backend::DequantizeArgs& a);
void hadamard_transform(const float* x, float* out, int64_t rows, int dim);
void kv_store_exact(const kv::backend::ExactArgs& a);
void kv_load_exact(const kv::backend::ExactArgs& a);
}  // namespace frugal::cpu

namespace frugal::cuda {
void kv_append(const kv::backend::AppendArgs& a, Stream stream);
void kv_dequantize(const kv::backend::DequantizeArgs& a, Stream stream);
void hadamard_transform(const float* x, float* out, int64_t rows, int dim, int device, Stream stream);
void kv_store_exact(const kv::backend::ExactArgs& a, Stream stream);
void kv_load_exact(const kv::backend::ExactArgs& a, Stream stream);
}  // namespace frugal::cuda
