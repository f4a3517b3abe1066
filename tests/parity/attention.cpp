// Parity cases of decode attention: every variant (cpu; f32; f16_registers at D = 64..512; f16_wide
// at D = 64 and 128) at K4/V4, K8/V4, K4/V8 and K8/V8, one slice and five, against the CPU
// reference — the double-precision oracle over the dequantized cache for the CPU backend, the CPU
// backend for the GPU variants. Bounds as tests/test_attention.cpp: 1e-5 for f32 arithmetic, 1e-2
// for the fp16 tensor-core operands.
#include <cmath>
#include <string>
#include <vector>

#include "attention_fixtures.h"
#include "core/attention_choose.h"
#include "parity/harness.h"

namespace frugal::attention {
namespace {

using namespace fixtures;

constexpr int64_t kLen = 1000;  // 5 forced slices: 208 tokens each (whole tiles), the last 168

struct Case {
  DecodeVariant variant;
  int dim, k_bits, v_bits, splits;
  kv::ScaleFormat k_scales = kv::ScaleFormat::f32, v_scales = kv::ScaleFormat::f32;
};

// The variant name a case asserts: the variant and its slice count.
std::string served_by(const DecodeChoice& c) { return to_string(c.variant) + "/" + std::to_string(c.splits); }

testing::ParityOutcome run_case(const Case& c, bool cuda) {
  Shape s;
  s.batch = 2;
  s.q_heads = 8;
  s.kv_heads = 2;
  s.dim = c.dim;
  s.k_bits = c.k_bits;
  s.v_bits = c.v_bits;
  s.k_seed = 21;
  s.v_seed = 22;
  s.k_scales = c.k_scales;
  s.v_scales = c.v_scales;
  std::mt19937_64 rng(testing::test_seed() ^ (uint64_t(c.dim) << 8) ^ uint64_t(c.k_bits * 16 + c.v_bits));
  // The second sequence is shorter (ragged slices: its last ones are empty).
  Filled f = fill(s, {kLen, kLen / 2 + 7}, rng);
  const bool f16 = c.variant == DecodeVariant::f16_registers || c.variant == DecodeVariant::f16_wide;
  Query q = make_query(s.batch, s.q_heads, s.dim, f16 ? DType::f16 : DType::f32, rng);
  Tensor cpu_out = decode_attention(q.host, f.k, f.v);
  testing::ParityOutcome o;
  if (!cuda) {
    o.got = testing::to_double(cpu_out);
    o.ref = oracle_dequantized(q.f32, s.q_heads, f.k, f.v, held_ranges(f.k), 1 / std::sqrt(double(s.dim)));
    o.variant = served_by(choose_decode(q.host, f.k, f.v));
    return o;
  }
  kv::Cache kd = f.k.to(Device::cuda()), vd = f.v.to(Device::cuda());
  Tensor qd = q.host.to(Device::cuda());
  DecodeOptions opt;
  opt.variant = c.variant;
  opt.num_splits = c.splits;
  const DecodeChoice served = choose_decode(qd, kd, vd, opt);
  o.variant = served_by(served);
  o.arch = arch_of(served.variant);
  o.got = testing::to_double(decode_attention(qd, kd, vd, opt));
  o.ref = testing::to_double(cpu_out);
  return o;
}

std::string shape_of(const Case& c) {
  return "B=2 Hq=8 Hkv=2 D=" + std::to_string(c.dim) + " L=" + std::to_string(kLen) + " K" + std::to_string(c.k_bits) +
         "/V" + std::to_string(c.v_bits) + (c.k_scales == kv::ScaleFormat::f16 ? " K f16 scales" : "") +
         (c.v_scales == kv::ScaleFormat::f16 ? " V f16 scales" : "");
}

FRUGAL_PARITY_CASES(cases) {
  const std::pair<int, int> mixes[] = {{4, 4}, {8, 4}, {4, 8}, {8, 8}};
  std::vector<Case> all;
  for (auto [kb, vb] : mixes) {
    all.push_back({DecodeVariant::cpu, 128, kb, vb, 1});
    for (int splits : {1, 5}) {
      for (int dim : {32, 128, 512}) all.push_back({DecodeVariant::f32, dim, kb, vb, splits});
      for (int dim : {64, 128, 256, 512}) all.push_back({DecodeVariant::f16_registers, dim, kb, vb, splits});
      for (int dim : {64, 128}) all.push_back({DecodeVariant::f16_wide, dim, kb, vb, splits});
    }
  }
  all.push_back({DecodeVariant::cpu, 64, 2, 3, 1});  // the CPU serves every width
  // f16 scales, in both caches and in K alone.
  constexpr kv::ScaleFormat h = kv::ScaleFormat::f16, f = kv::ScaleFormat::f32;
  for (auto [ks, vs] : {std::pair{h, h}, std::pair{h, f}}) {
    all.push_back({DecodeVariant::cpu, 64, 4, 4, 1, ks, vs});
    for (int splits : {1, 5}) {
      all.push_back({DecodeVariant::f32, 128, 4, 4, splits, ks, vs});
      for (int dim : {64, 256}) all.push_back({DecodeVariant::f16_registers, dim, 4, 8, splits, ks, vs});
      all.push_back({DecodeVariant::f16_wide, 128, 8, 4, splits, ks, vs});
    }
  }
  for (const Case& c : all) {
    const bool cuda = c.variant != DecodeVariant::cpu;
    // The CPU slices each sequence by 1024 tokens: one slice at L = 1000.
    const std::string expect = to_string(c.variant) + "/" + std::to_string(cuda ? c.splits : 1);
    const bool f16 = c.variant == DecodeVariant::f16_registers || c.variant == DecodeVariant::f16_wide;
    cases.push_back({"attention.decode", shape_of(c), f16 ? "f16" : "f32", cuda ? "cuda" : "cpu", expect,
                     f16 ? 1e-2 : 1e-5, [c, cuda] { return run_case(c, cuda); }});
  }
}

}  // namespace
}  // namespace frugal::attention
