// Decode attention over the Hadamard-rotated low-bit KV cache: one query token per sequence,
// computed directly from the packed codes, in the rotated domain (see frugal/kv_cache.h).
//
//   out[b, h, :] = Σ_t softmax_t(scale · q[b, h] · k̂_t) · v̂_t      over the tokens t of sequence b
//
// where k̂_t, v̂_t are the cache's reconstructions (kv::Cache::dequantize gives the same vectors),
// h is a query head and its K/V head is h / (Hq / Hkv) (grouped-query attention).
//
// How it is computed: the transform is orthonormal, so q · k̂ = (FWHT(s_K ⊙ q)/√D) · ŷ_K.
// q is rotated once with the K cache's signs, every score is a sum of codebook values times q,
// times the token's scale; V is accumulated in the rotated domain and one inverse transform
// (with the V cache's signs, which may differ from K's) runs per output row. The softmax is the
// numerically stable running-max form; accumulation is f32.
//
// Tokens attended (the lengths semantics):
//   * default (DecodeOptions::lengths empty): every token sequence b still holds,
//     [k.first_held(b), k.write_pos(b)) — for a ring cache that has wrapped, its last
//     `capacity` tokens, oldest first (the oldest sits in the slot after the newest one).
//   * explicit lengths L_b (one per sequence, host memory): the tokens [max(0, L_b − capacity), L_b)
//     of a sliding (ring) cache, whose capacity is its window, or [0, L_b) of a global cache.
//     L_b must not pass write_pos(b), and every one of those tokens must still be held (a ring
//     that has written past L_b + capacity no longer has them): otherwise frugal::Error
//     (out_of_range).
//   * a sequence with no tokens to attend (L_b = 0, or nothing written yet) gets an output row
//     of zeros (the empty sum), not an error and not NaN.
// K and V must have been written in lockstep: equal write positions for every sequence.
//
// Exact rows (kv::CacheConfig::window and sinks, equal for K and V): the tokens the caches hold in
// f16 rows (the first `sinks` of a sequence, and its newest `window` ones) are attended through those
// rows, the others through their codes, in one softmax: the kernel of the choice attends the codes'
// tokens (writing its output and LSE to the workspace), then one more kernel attends the f16 rows'
// tokens and merges the two states (in f32, a warp per output row). A ring with sinks attends them
// besides the tokens it still holds (StreamingLLM's attention sinks): with explicit lengths L_b, the
// sinks [0, min(sinks, L_b)) and [max(sinks, L_b − capacity), L_b).
//
// Non-finite input: NaN poisons attention. A NaN or ±Inf in a query head, a query whose scores
// overflow (values near 1e38), or a token the cache flags non-finite (a NaN scale: NaN or ±Inf in
// the vector, or a norm above 2^120; see frugal/kv_cache.h) makes NaN every output row that sees
// it: a query head's own values only that head's row; a flagged key or value every query head of its
// K/V head in that sequence (a NaN weight or value reaches every dim of the row). The other heads
// and sequences keep their finite results, on every backend and variant.
//
// Precision (DecodeOptions::math):
//   * f32: f32 arithmetic throughout (CUDA cores on a GPU). Matches a double-precision oracle
//     over the dequantized cache to ~1e-6 relative.
//   * f16: CUDA tensor cores (mma.sync m16n8k16, f32 accumulation): codebook values, the rotated
//     query (normalized per head by a power of two, so bf16 queries cannot overflow) and the
//     softmax weights (times the V scales, normalized by their running maximum) in fp16.
//     ~1e-3 relative to the same oracle — far below the 4-bit quantization error itself.
//     GPU only, K and V of 4 or 8 bits, head_dim 64..512; the CPU always computes in f32.
//   * automatic (default): f16 on a GPU when q is f16 or bf16 and the shape allows it, else f32.
//
// GPU work split (flash-decoding): each thread block serves one (sequence, K/V head, up to 8
// query heads of its group, slice of the sequence); every query head of a group of ≤ 8 is
// served from ONE read of its K/V (groups larger than 8 read the K/V once per 8 heads).
// The number of slices is picked from the shape (DecodeOptions::num_splits overrides it): whole
// waves of resident blocks, slices of at least 128 tokens and at most max(32, L / 2048) of them
// (the measurements: docs/performance.md, "Decode attention"); when there is more than one, the
// slices' partial softmax states are merged: on the f16 path by the last block of each
// (sequence, K/V head, head tile) to finish (one kernel), on the f32 path by a second kernel.
// Supported on the GPU: head_dim 4..512 (f32) / 64..512 (f16), any bits of the cache (f32) /
// 4 or 8 (f16). The CPU supports every cache configuration.
//
// Kernel choice (DecodeVariant; choose_decode reports the one a call makes):
//   * cpu: the CPU loop (f32; slices of 1024 tokens per sequence, combined per output row);
//   * f32: the exact SIMT kernel (CUDA cores), any GPU;
//   * f16_registers: the tensor-core kernel whose table lookups are an IMAD + LDS (4 warps a
//     block), compute capability 8.0 or newer, head_dim 64..512, K and V of 4 or 8 bits;
//   * f16_wide: the tensor-core kernel with the wide table (8 warps a block, one PRMT forms a
//     lookup's address), the same conditions and head_dim 64 or 128; where it serves it is the
//     default of f16 math.
// The one override, for tests and benchmarks: DecodeOptions::variant forces the kernel (a variant
// that cannot serve the call is a frugal::Error naming it and why), DecodeOptions::num_splits the
// slice count; the slice length always follows from them. num_splits stays a plain option rather
// than a field of a forced choice because it is a tuning knob callers (the Python binding among
// them) pass without naming a kernel.
//
// Workspace (GPU, when the sequence is split): one arrival counter per (sequence, query head),
// partial states of (head_dim + 2) floats per (sequence, query head, slice), plus the token ranges
// when batch > 128. Pass DecodeOptions::workspace (u8, on the device, at least
// decode_attention_workspace_bytes, ZERO-FILLED once when it is created: Tensor::zeros) to keep
// allocation out of the call — then the call is also CUDA-graph capturable when batch ≤ 128. Every
// call leaves the counters zero again, so the workspace is reused as is, call after call and graph
// replay after replay; it must not be written by anything else in between (nor used by two calls
// at once). Without one, the call allocates it stream-ordered from frugal's scratch pool
// (cuda::Scratch) on `stream` and zeroes its counters (a memset on `stream`), which never
// synchronizes the device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "frugal/kv_cache.h"
#include "frugal/tensor.h"

namespace frugal::attention {

enum class Math : uint8_t {
  automatic,  // f16 tensor cores for f16/bf16 queries on a GPU when supported, else f32
  f32,        // f32 arithmetic everywhere
  f16,        // fp16 tensor-core operands with f32 accumulation (GPU; the CPU computes in f32)
};

// The kernels that compute a call (see "Kernel choice" above).
enum class DecodeVariant : uint8_t { cpu, f32, f16_registers, f16_wide };

// What serves one call: the variant and how each sequence is sliced.
struct DecodeChoice {
  DecodeVariant variant = DecodeVariant::cpu;
  int dims_per_lane = 0;         // f32: the dims a lane accumulates, max(1, head_dim / 32) (its instance); else 0
  int splits = 1;                // slices per sequence (the GPU grid's; the CPU slices each sequence by its length)
  int64_t tokens_per_split = 0;  // tokens a slice holds (the last slices of a shorter sequence hold fewer or none)
  bool exact_rows = false;       // the caches' exact rows are attended too, and merged (see "Exact rows")
  bool operator==(const DecodeChoice&) const = default;
};

std::string to_string(DecodeVariant v);  // "cpu" | "f32" | "f16_registers" | "f16_wide"
// "f16_wide, 16 splits of 256 tokens" | "f32 (4 dims a lane), 1 split of 4096 tokens, + exact rows"
std::string to_string(const DecodeChoice& c);

struct DecodeOptions {
  std::optional<float> softmax_scale;  // default 1/√head_dim; must be finite
  std::span<const int64_t> lengths;    // empty, or one per sequence (see the header comment)
  Math math = Math::automatic;
  int num_splits = 0;                    // GPU slices per sequence; 0 = chosen from the shape
  std::optional<DecodeVariant> variant;  // the kernel, forced (tests, benchmarks); empty = chosen
  TensorView workspace;                  // GPU scratch (u8, zero-filled when created); empty = allocated per call
};

// q [B, Hq, D] (f32 | f16 | bf16; the last dimension contiguous, any strides for B and H);
// k, v: caches of equal batch B, heads Hkv, head_dim D, capacity and sliding; Hq a multiple of Hkv.
// out [B, Hq, D], contiguous, dtype of q or f32. Everything on one device.
void decode_attention(const TensorView& q, const kv::Cache& k, const kv::Cache& v, const TensorView& out,
                      const DecodeOptions& options = {}, Stream stream = nullptr);
// The same, returning a new [B, Hq, D] tensor of q's dtype on q's device.
Tensor decode_attention(const TensorView& q, const kv::Cache& k, const kv::Cache& v, const DecodeOptions& options = {},
                        Stream stream = nullptr);

// Bytes of GPU workspace that suffice for any decode_attention call with this q shape on
// caches shaped like `k` (any lengths, any num_splits the call accepts). 0 on the CPU. Allocate
// it zero-filled (Tensor::zeros): see "Workspace" above.
size_t decode_attention_workspace_bytes(const TensorView& q, const kv::Cache& k);

// The choice decode_attention(q, k, v, out, options) makes: validates the same arguments (out
// aside) and throws the same errors, runs nothing. For tests, benchmarks and `frugal info`.
DecodeChoice choose_decode(const TensorView& q, const kv::Cache& k, const kv::Cache& v,
                           const DecodeOptions& options = {});

}  // namespace frugal::attention
