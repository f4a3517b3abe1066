// Parity cases of the KV cache: the CUDA append through each variant against the CPU (bit for bit
// on the dequantized output and the scales; the tensor cores up to their boundary cases), the CPU
// append against the codebook's error, and the CUDA dequantize and Hadamard transform against the
// CPU bit for bit.
#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <string>

#include "core/kv_choose.h"
#include "frugal/kv_cache.h"
#include "parity/harness.h"
#include "testing.h"

namespace frugal::kv {
namespace {

using testing::ParityCase;
using testing::ParityOutcome;

struct AppendCase {
  int dim, bits;
  DType dtype;
  int64_t tokens;
  int heads;
  bool misaligned = false;  // x starts one element into its buffer
  bool signs = false;
  ScaleRule rule = ScaleRule::l2_norm;
  std::optional<AppendVariant> forced;
  ScaleFormat scales = ScaleFormat::f32;
};

std::string shape_of(const AppendCase& c) {
  std::string s = "T=" + std::to_string(c.tokens) + " H=" + std::to_string(c.heads) + " D=" + std::to_string(c.dim) +
                  " bits=" + std::to_string(c.bits);
  if (c.misaligned) s += " misaligned";
  if (c.signs) s += " signs";
  if (c.rule == ScaleRule::least_squares) s += " least-squares";
  if (c.forced) s += std::string(" forced ") + to_string(*c.forced);
  if (c.scales == ScaleFormat::f16) s += " f16 scales";
  return s;
}

CacheConfig config_of(const AppendCase& c) {
  CacheConfig cfg{.num_kv_heads = c.heads, .head_dim = c.dim, .capacity = c.tokens, .bits = c.bits, .scale_rule = c.rule,
                  .scale_format = c.scales};
  if (c.signs) cfg.sign_seed = testing::test_seed() + 5;
  return cfg;
}

// x as the case describes it: N(0,1) values stored in the case's dtype (on `device`), and the
// values as the cache sees them.
struct Input {
  Tensor storage;
  TensorView view;
  std::vector<float> values;
};

Input make_input(const AppendCase& c, Device device) {
  std::mt19937_64 rng(testing::test_seed() + static_cast<uint64_t>(c.dim * 131 + c.bits * 7 + c.tokens));
  const int64_t n = c.tokens * c.heads * c.dim, offset = c.misaligned ? 1 : 0;
  Input in;
  in.values = testing::randn(static_cast<size_t>(n), rng);
  Tensor host = Tensor::empty({n + offset}, c.dtype);
  for (int64_t i = 0; i < n; ++i) {
    in.values[i] = testing::round_to(in.values[i], c.dtype);
    testing::store_as(c.dtype, host.data(), offset + i, in.values[i]);
  }
  in.storage = device.is_cpu() ? host : host.to(device);
  in.view = TensorView(static_cast<char*>(in.storage.data()) + offset * size_of(c.dtype), c.dtype,
                       {c.tokens, c.heads, c.dim}, device);
  return in;
}

// The dequantized f32 output of every token, then the scales.
std::vector<double> stored(const Cache& cache) {
  std::vector<double> out = testing::to_double(cache.dequantize(0, 0, cache.write_pos()));
  const std::vector<double> scales = testing::to_double(cache.scales());
  out.insert(out.end(), scales.begin(), scales.end());
  return out;
}

ParityOutcome run_cuda_append(const AppendCase& c) {
  const CacheConfig cfg = config_of(c);
  Cache cpu(cfg), gpu(cfg, Device::cuda(0));
  cpu.append(make_input(c, Device::cpu()).view);
  const Input x = make_input(c, Device::cuda(0));
  const AppendOptions options{.variant = c.forced};
  const std::optional<AppendChoice> choice = gpu.append_choice(x.view, options);
  gpu.append(x.view, nullptr, options);
  if (!choice) return {stored(gpu), stored(cpu), "none"};
  return {stored(gpu), stored(cpu), to_string(choice->variant), arch_of(choice->variant)};
}

ParityOutcome run_cpu_append(const AppendCase& c) {
  Cache cpu(config_of(c));
  const Input x = make_input(c, Device::cpu());
  cpu.append(x.view);
  std::vector<double> ref(x.values.begin(), x.values.end());
  return {testing::to_double(cpu.dequantize(0, 0, c.tokens)), ref, "cpu"};
}

// The tensor cores' codes may leave the CPU's where u lies within ~1e-6 of a boundary: one code
// step in a coordinate, in at most rows/100 + 2 rows (the bound test_kv_cache asserts row by row).
// Each such step moves one coordinate by at most the widest centroid gap times scale/√D, so the
// normalized error stays under gap·√(2·steps / (rows·D)) (with a tenth of margin).
double mma_bound(const AppendCase& c) {
  const std::vector<float>& cents = lloyd_max_codebook(c.bits).centroids;
  double gap = 0;
  for (size_t i = 0; i + 1 < cents.size(); ++i) gap = std::max(gap, static_cast<double>(cents[i + 1] - cents[i]));
  const double rows = static_cast<double>(c.tokens * c.heads), steps = rows / 100 + 2;
  return 1.1 * gap * std::sqrt(2 * steps / (rows * c.dim));
}


void add_append(std::vector<ParityCase>& cases, const AppendCase& c, AppendVariant variant) {
  const bool mma = variant == AppendVariant::mma;
  cases.push_back({"kv.append", shape_of(c), to_string(c.dtype), "cuda", to_string(variant), mma ? mma_bound(c) : 0.0,
                   [c] { return run_cuda_append(c); }});
}

FRUGAL_PARITY_CASES(cases) {
  using V = AppendVariant;
  const int64_t many = 2100;  // × 8 heads: 16,800 vectors, past kv::kManyVectors
  // generic: one lane at D = 4; chunks of 8 with the group width at run time (3 bits, signs, the
  // least-squares scale); groups wider than a warp with the clamped 8-bit table; and forced onto
  // a shape the fast kernel serves by default.
  add_append(cases, {.dim = 4, .bits = 2, .dtype = DType::f16, .tokens = 64, .heads = 2}, V::generic);
  add_append(cases,
             {.dim = 32, .bits = 3, .dtype = DType::f32, .tokens = 100, .heads = 3, .signs = true,
              .rule = ScaleRule::least_squares},
             V::generic);
  add_append(cases, {.dim = 2048, .bits = 8, .dtype = DType::bf16, .tokens = 9, .heads = 2, .misaligned = true},
             V::generic);
  add_append(cases, {.dim = 128, .bits = 4, .dtype = DType::f16, .tokens = 50, .heads = 4, .forced = V::generic},
             V::generic);
  // fast: a decode token (staged, 256 threads); a large 8-bit f32 call (staged in blocks of 128);
  // D = 512 misaligned with signs (register prefetch); the least-squares scale at 4 bits, D = 256.
  add_append(cases, {.dim = 128, .bits = 4, .dtype = DType::f16, .tokens = 1, .heads = 8}, V::fast);
  add_append(cases, {.dim = 256, .bits = 8, .dtype = DType::f32, .tokens = many, .heads = 8}, V::fast);
  add_append(cases,
             {.dim = 512, .bits = 8, .dtype = DType::bf16, .tokens = 40, .heads = 4, .misaligned = true, .signs = true},
             V::fast);
  add_append(cases,
             {.dim = 256, .bits = 4, .dtype = DType::f16, .tokens = many, .heads = 8, .rule = ScaleRule::least_squares},
             V::fast);
  add_append(cases, {.dim = 64, .bits = 8, .dtype = DType::bf16, .tokens = many, .heads = 8, .forced = V::fast},
             V::fast);
  // mma: every head dim, both widths and dtypes, with and without signs; and forced on a decode step.
  add_append(cases, {.dim = 64, .bits = 4, .dtype = DType::f16, .tokens = many, .heads = 8}, V::mma);
  add_append(cases, {.dim = 128, .bits = 8, .dtype = DType::bf16, .tokens = many, .heads = 8, .signs = true}, V::mma);
  add_append(cases, {.dim = 256, .bits = 4, .dtype = DType::bf16, .tokens = many, .heads = 8, .signs = true}, V::mma);
  add_append(cases, {.dim = 256, .bits = 8, .dtype = DType::f16, .tokens = many, .heads = 8}, V::mma);
  add_append(cases, {.dim = 128, .bits = 4, .dtype = DType::f16, .tokens = 5, .heads = 3, .forced = V::mma}, V::mma);
  // f16 scales through every variant (and the least-squares scale, 3 bits, signs).
  constexpr ScaleFormat f16 = ScaleFormat::f16;
  add_append(cases,
             {.dim = 32, .bits = 3, .dtype = DType::f32, .tokens = 100, .heads = 3, .signs = true,
              .rule = ScaleRule::least_squares, .scales = f16},
             V::generic);
  add_append(cases, {.dim = 128, .bits = 4, .dtype = DType::f16, .tokens = 1, .heads = 8, .scales = f16}, V::fast);
  add_append(cases,
             {.dim = 256, .bits = 4, .dtype = DType::f16, .tokens = many, .heads = 8, .rule = ScaleRule::least_squares,
              .scales = f16},
             V::fast);
  add_append(cases, {.dim = 64, .bits = 4, .dtype = DType::f16, .tokens = many, .heads = 8, .scales = f16}, V::mma);
  add_append(cases,
             {.dim = 128, .bits = 8, .dtype = DType::bf16, .tokens = many, .heads = 8, .signs = true, .scales = f16},
             V::mma);

  // The CPU against the format's promise: ‖x − x̂‖/‖x‖ near √mse of the codebook (N(0,1) input).
  for (const AppendCase& c : {AppendCase{.dim = 128, .bits = 4, .dtype = DType::f32, .tokens = 64, .heads = 4},
                              AppendCase{.dim = 64, .bits = 2, .dtype = DType::f16, .tokens = 64, .heads = 4},
                              AppendCase{.dim = 256, .bits = 3, .dtype = DType::bf16, .tokens = 32, .heads = 2,
                                         .signs = true},
                              AppendCase{.dim = 32, .bits = 8, .dtype = DType::f32, .tokens = 128, .heads = 4,
                                         .rule = ScaleRule::least_squares}})
    cases.push_back({"kv.append", shape_of(c), to_string(c.dtype), "cpu", "cpu",
                     1.1 * std::sqrt(lloyd_max_codebook(c.bits).mse), [c] { return run_cpu_append(c); }});
}

// ---- dequantize and the Hadamard transform: one kernel each -------------------------------------
struct DequantizeCase {
  int dim, bits;
  DType out;
  bool sliding, signs;
  ScaleFormat scales = ScaleFormat::f32;
};

ParityOutcome run_cuda_dequantize(const DequantizeCase& c) {
  std::mt19937_64 rng(testing::test_seed() + static_cast<uint64_t>(c.dim + c.bits));
  const int heads = 3;
  const int64_t capacity = 40, tokens = c.sliding ? 57 : 40;  // a ring wraps once
  CacheConfig cfg{.num_kv_heads = heads, .head_dim = c.dim, .capacity = capacity, .sliding = c.sliding, .bits = c.bits,
                  .scale_format = c.scales};
  if (c.signs) cfg.sign_seed = testing::test_seed() + 9;
  Cache cpu(cfg);
  for (int64_t done = 0; done < tokens;) {
    const int64_t t = std::min<int64_t>(capacity / 2 + 3, tokens - done);
    cpu.append(testing::host_tensor(testing::randn(static_cast<size_t>(t * heads * c.dim), rng), {t, heads, c.dim}));
    done += t;
  }
  const Cache gpu = cpu.to(Device::cuda(0));
  const int64_t begin = cpu.first_held(), end = cpu.write_pos();
  return {testing::to_double(gpu.dequantize(0, begin, end, c.out)),
          testing::to_double(cpu.dequantize(0, begin, end, c.out)), "single", kDequantizeArch};
}

ParityOutcome run_cuda_hadamard(int dim) {
  std::mt19937_64 rng(testing::test_seed() + static_cast<uint64_t>(dim));
  const int64_t rows = 37;
  const Tensor x = testing::host_tensor(testing::randn(static_cast<size_t>(rows * dim), rng), {rows, dim});
  Tensor want = Tensor::empty({rows, dim}, DType::f32);
  hadamard_transform(x, want);
  const Tensor gx = x.to(Device::cuda(0));
  Tensor got = Tensor::empty({rows, dim}, DType::f32, Device::cuda(0));
  hadamard_transform(gx, got);
  return {testing::to_double(got), testing::to_double(want), "single", kHadamardArch};
}

FRUGAL_PARITY_CASES(cases) {
  for (const DequantizeCase& c : {DequantizeCase{4, 4, DType::f32, false, false}, DequantizeCase{128, 4, DType::f16, true, true},
                                  DequantizeCase{128, 8, DType::bf16, false, true}, DequantizeCase{64, 3, DType::f32, true, false},
                                  DequantizeCase{2048, 2, DType::f16, false, true},
                                  DequantizeCase{128, 4, DType::f32, true, true, ScaleFormat::f16}}) {
    const std::string shape = "H=3 D=" + std::to_string(c.dim) + " bits=" + std::to_string(c.bits) +
                              (c.sliding ? " ring" : "") + (c.signs ? " signs" : "") +
                              (c.scales == ScaleFormat::f16 ? " f16 scales" : "");
    cases.push_back({"kv.dequantize", shape, to_string(c.out), "cuda", "single", 0.0, [c] { return run_cuda_dequantize(c); }});
  }
  for (int dim : {4, 128, 4096})
    cases.push_back({"kv.hadamard_transform", "rows=37 D=" + std::to_string(dim), "f32", "cuda", "single", 0.0,
                     [dim] { return run_cuda_hadamard(dim); }});
}

}  // namespace
}  // namespace frugal::kv
