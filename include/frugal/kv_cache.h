// Hadamard-rotated low-bit KV cache: the Lloyd–Max codebooks, the fast Walsh–Hadamard
// transform, and a cache of one layer for a batch of sequences with its append (quantize)
// and dequantize paths, on the CPU or a GPU.
//
// Storage (the original format, bit-compatible when batch == 1, bits == 4, no signs, L2 scale):
//   packed  [batch, num_kv_heads, capacity, head_dim * bits / 8]  u8
//   scales  [batch, num_kv_heads, capacity]                       f32 (f16 with ScaleFormat::f16)
// Codes are a little-endian bit stream: element i of a vector occupies bits [i*bits, (i+1)*bits)
// of its row, so at 4 bits element 2j is the low nibble of byte j and element 2j+1 the high one.
//
// Quantizing one head vector x (length D):
//   1. x <- s ⊙ x with fixed random signs s (only when CacheConfig::sign_seed is set)
//   2. y = FWHT(x) / √D                       (orthonormal and self-inverse)
//   3. n = ‖y‖₂ (= ‖x‖₂, summed in f64 from the input's exact squares, so every backend stores the
//      same scale);  u = y · (√D / n);  when n ≤ 1e-10: u = 0 and the scale is stored as 0
//   4. idx_i = number of codebook boundaries strictly below u_i
//   5. scale = n (ScaleRule::l2_norm) or √D·⟨y,c⟩/⟨c,c⟩ (ScaleRule::least_squares)
// Reconstruction: ŷ_i = scale · c[idx_i] / √D, then x̂ = s ⊙ FWHT(ŷ) / √D.
// Non-finite input (NaN or ±Inf in a vector, or a norm above 2^120, where the f32 transform
// could overflow) is flagged, not raised: that vector's codes are 0 and its scale is stored as
// NaN, so it dequantizes to NaN and poisons attention over it just as an fp16 cache would. The
// check costs nothing on the hot path; callers that want an exception can test the scales (see
// count_nonfinite_scales).
// f16 scales (CacheConfig::scale_format = ScaleFormat::f16; off in the original format): each scale is
// stored as the f16 rounding (to nearest even) of the f32 scale above, 2 bytes a vector instead of 4
// (at D = 64 and 4 bits, 4.25 bits per element instead of 4.5). The codes are the f32 format's, byte
// for byte (they are chosen before the scale is stored); a scale beyond f16's range (≥ 65520) is stored
// as NaN, so that vector reads as a non-finite one does.
// Exact rows (CacheConfig::window, sinks; off in the original format): the cache also keeps the f16
// values of the newest `window` tokens of each sequence (a ring: token t in row sinks + t mod window)
// and of its first `sinks` tokens (row t), in exact [batch, H, sinks + window, D] f16. Every token is
// still quantized into packed/scales as above (those stay byte-identical); a token held in an exact row
// is read from it instead (dequantize, decode attention), so the codes serve the tokens that have slid
// out of the window. A ring keeps its sinks after it has wrapped past them (StreamingLLM's attention
// sinks): they stay readable and attended. A vector that has a non-finite value or one beyond f16's
// range (|x| > 65504) is stored as a row of NaN, so it poisons attention as its NaN scale does.
// Backends: the CPU is the reference. On the GPU, appends of 16K+ vectors at D = 64, 128 or 256
// (4 or 8 bits, f16/bf16 input on 16 bytes, L2 scale) run the transform on tensor cores: the same
// scales, and the same codes except where u lies within ~1e-6 of a boundary (about one row in
// ten thousand); every other call matches the CPU bit for bit.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "frugal/tensor.h"

namespace frugal::kv {

// ---- codebooks ----------------------------------------------------------------------------
// The Lloyd–Max quantizer of N(0,1) with 2^bits levels, computed by Lloyd iteration in double
// precision (bits 1..8). centroids ascending; boundaries[i] = (c[i] + c[i+1]) / 2.
struct Codebook {
  int bits = 0;
  std::vector<float> centroids;   // 2^bits values
  std::vector<float> boundaries;  // 2^bits - 1 values
  double mse = 0;                 // expected squared error per coordinate for N(0,1)
};
const Codebook& lloyd_max_codebook(int bits);

// The ±1 signs of the randomized Hadamard transform for `seed` (splitmix64 stream, one bit each).
std::vector<float> random_signs(uint64_t seed, int dim);

// ---- transform ----------------------------------------------------------------------------
// out = FWHT(x) / √D along the last dimension (orthonormal, self-inverse). x and out are f32
// [rows, D] on the same device, D a power of two in [4, 4096]; out may alias x.
void hadamard_transform(const TensorView& x, const TensorView& out, Stream stream = nullptr);

// ---- the cache ----------------------------------------------------------------------------
enum class ScaleRule : uint8_t {
  l2_norm,        // the original format: scale = ‖y‖₂
  least_squares,  // scale = √D·⟨y,c⟩/⟨c,c⟩: never a larger error, same storage
};

// How each vector's scale is stored.
enum class ScaleFormat : uint8_t {
  f32,  // the original format
  f16,  // half the scale bytes; the f16 rounding of the f32 scale (see "f16 scales" above)
};
const char* to_string(ScaleFormat format);
DType scale_dtype(ScaleFormat format);  // f32 or f16

struct CacheConfig {
  int batch = 1;         // sequences held by this cache
  int num_kv_heads = 8;  // heads per token
  int head_dim = 128;    // power of two in [4, 4096]
  int64_t capacity = 0;  // token slots per sequence
  bool sliding = false;  // ring buffer: token t lives at slot t mod capacity
  int bits = 4;          // 2, 3, 4 or 8 bits per coordinate; head_dim × bits must fill whole bytes
  ScaleRule scale_rule = ScaleRule::l2_norm;
  std::optional<uint64_t> sign_seed;  // random signs before the FWHT; off in the original format
  ScaleFormat scale_format = ScaleFormat::f32;
  int window = 0;  // the newest tokens of each sequence also kept in f16 (≤ capacity; 0: none)
  int sinks = 0;   // the first tokens of each sequence kept in f16 (≤ capacity; 0: none)
  int exact_rows() const { return window + sinks; }
};

// Throws frugal::Error naming `op` and the offending field when the config is unusable.
void validate(const CacheConfig& config, const char* op);

// ---- which CUDA kernel serves an append ------------------------------------------------------
enum class AppendVariant : uint8_t {
  generic,  // lane groups with the group width and bits at run time: every head dim and width
  fast,     // lane groups of D/32 lanes × 4 chunks of 8 fixed at compile time: D = 64..512, 4 or 8 bits
  mma,      // the transform on tensor cores: D = 64, 128, 256 at 4 or 8 bits, f16/bf16 on 16 bytes, L2 scale
};
const char* to_string(AppendVariant variant);

// The kernel and its tile parameters, as the choice (src/core/kv_choose.h) fixes them for a call.
struct AppendChoice {
  AppendVariant variant = AppendVariant::generic;
  int chunk = 8;          // C: consecutive elements of a lane's chunk (0 for mma)
  int chunks = 1;         // K: chunks per lane (0 for mma)
  int lanes = 0;          // G: lanes per vector fixed at compile time; 0: D / chunk at run time
  int max_threads = 512;  // the kernel's __launch_bounds__: threads per block
  int min_blocks = 1;     //   and blocks per multiprocessor
  bool staged = false;    // the input is copied through shared memory by cp.async
  bool operator==(const AppendChoice&) const = default;
};
std::string to_string(const AppendChoice& choice);  // "fast C=8 K=4 G=4 256x2 staged"

struct AppendOptions {
  // Forces the CUDA kernel (for tests and benchmarks); unset: the rule of choose_append. Its tile
  // parameters are the variant's own for the call. A variant that cannot serve the call on this
  // device, or any variant on a CPU cache, is refused with frugal::Error.
  std::optional<AppendVariant> variant;
};

// A cache's storage as tensors someone else allocates: a framework's arrays, which is what a torch
// custom op is handed (those ops take tensors, never objects). Shapes, dtypes and devices as the
// Cache accessors of the same names say.
struct CacheStorage {
  Tensor packed;      // [batch, H, capacity, D*bits/8] u8
  Tensor scales;      // [batch, H, capacity] f32, or f16 with ScaleFormat::f16
  Tensor signs;       // [D] f32 ±1, or undefined when the config has no sign seed
  Tensor centroids;   // [2^bits] f32
  Tensor boundaries;  // [2^bits − 1] f32
  Tensor exact;       // [batch, H, sinks + window, D] f16 (16-byte aligned), or undefined without exact rows
};

// One layer's K (or V) cache for `batch` sequences. Write positions live on the host; each
// sequence has its own. A cache is used from one stream at a time.
class Cache {
 public:
  Cache(const CacheConfig& config, Device device = Device::cpu(), Stream stream = nullptr);
  // A cache that reads and writes `storage` (kept alive by its Tensors' owners) from these write
  // positions (host, one per sequence: ≥ 0, and ≤ capacity in a global cache). config.sign_seed
  // says whether storage.signs is defined; its value is not read (the signs are storage.signs' values).
  // Throws frugal::Error naming kv::Cache::wrap and the tensor that does not fit the config.
  static Cache wrap(const CacheConfig& config, CacheStorage storage, std::span<const int64_t> write_positions);

  const CacheConfig& config() const { return config_; }
  Device device() const { return packed_.device(); }
  int bytes_per_vector() const { return config_.head_dim * config_.bits / 8; }  // the codes' row

  // Quantizes T ≥ 1 tokens into every sequence at its own write position and advances it by T,
  // in one launch. x: [T, H, D] when batch == 1, or [batch, T, H, D]; f32 | f16 | bf16; the
  // last dimension contiguous. A global cache refuses to write past capacity; a sliding one
  // wraps (T larger than capacity is refused: the first tokens would be overwritten at once).
  void append(const TensorView& x, Stream stream = nullptr, const AppendOptions& options = {});
  // The same for one sequence: x [T, H, D].
  void append(int seq, const TensorView& x, Stream stream = nullptr, const AppendOptions& options = {});
  // The CUDA kernel an append of x ([T, H, D] for one sequence, or [batch, T, H, D]) with these
  // options takes on this cache's device: the same choice append makes (nullopt on the CPU, which
  // has one implementation). Throws as append does for an x or a forced variant it refuses.
  std::optional<AppendChoice> append_choice(const TensorView& x, const AppendOptions& options = {}) const;

  // Tokens [begin, end) of sequence `seq` (absolute positions), dequantized into
  // out [end - begin, H, D] (f32 | f16 | bf16, on the cache's device): what attention reads, so the
  // f16 values of the tokens in exact rows. Every token must still be held: end ≤ write_pos, and
  // begin ≥ write_pos - capacity for a ring (or the whole range among its sinks).
  void dequantize(int seq, int64_t begin, int64_t end, const TensorView& out, Stream stream = nullptr) const;
  Tensor dequantize(int seq, int64_t begin, int64_t end, DType dtype = DType::f32, Stream stream = nullptr) const;

  int64_t write_pos(int seq = 0) const { return positions_.at(seq); }
  const std::vector<int64_t>& write_positions() const { return positions_; }
  // The write positions as host memory ([batch] i64, valid as long as the cache) that a framework
  // keeps a tensor over, so that its custom ops advance the positions this cache reads (frugal.torch
  // does). The cache trusts them: write only what an append leaves (≥ 0, ≤ capacity in a global cache).
  std::span<int64_t> write_positions_memory() { return positions_; }
  // Oldest token position still held by sequence `seq` in the codes (a ring's sinks stay held below it).
  int64_t first_held(int seq = 0) const;
  // Whether token t (< write_pos) of sequence `seq` is read from an exact row: t < sinks, or one of
  // the newest `window` tokens.
  bool is_exact(int seq, int64_t t) const {
    return t < config_.sinks || t >= positions_.at(seq) - config_.window;
  }
  int64_t slot(int64_t token) const { return config_.sliding ? token % config_.capacity : token; }
  void reset();  // all write positions back to 0 (storage is left as it is)
  // A copy of the whole cache (storage and write positions) on another device.
  Cache to(Device device, Stream stream = nullptr) const;

  const Tensor& packed() const { return packed_; }  // [batch, H, capacity, D*bits/8] u8
  const Tensor& scales() const { return scales_; }  // [batch, H, capacity] f32 (f16 with ScaleFormat::f16)
  const Tensor& signs() const { return signs_; }    // [D] f32 ±1 on the cache's device, or undefined
  const Tensor& centroids() const { return centroids_; }    // [2^bits] f32 on the cache's device
  const Tensor& boundaries() const { return boundaries_; }  // [2^bits - 1] f32 on the cache's device
  const Tensor& exact() const { return exact_; }  // [batch, H, sinks + window, D] f16, or undefined

 private:
  Cache() = default;
  void append_impl(int seq_begin, int seq_count, const TensorView& x, int64_t tokens, Stream stream,
                   const AppendOptions& options);
  void check_range(int seq, int64_t begin, int64_t end) const;  // dequantize's sequence and token range

  CacheConfig config_;
  Tensor packed_, scales_, signs_, centroids_, boundaries_, exact_;
  Tensor device_starts_;  // [batch] i64 scratch for the CUDA kernel's start positions
  std::vector<int64_t> positions_;
};

// Number of NaN scales (non-finite input vectors) among sequence `seq`'s held tokens.
int64_t count_nonfinite_scales(const Cache& cache, int seq = 0, Stream stream = nullptr);

}  // namespace frugal::kv
