// Decode attention's kernel choice as a table (runs on the CPU, for every GPU generation): shape ×
// math × device capabilities → variant and slices, the slice invariants everywhere, and the forced
// choices that must be refused. The oracle is the rule as the header states it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/attention_backend.h"
#include "core/attention_choose.h"
#include "testing.h"

namespace frugal::attention {
namespace {

using testing::expect_error;

struct Gpu {
  const char* name;
  DeviceCaps caps;
};

// The devices of the table: the H200 (and a 9.0 build without sm_90a code), A100, RTX 3090 / A40,
// L40 / RTX 4090, RTX 5090.
const std::vector<Gpu>& gpus() {
  static const std::vector<Gpu> g = {
      {"H200", DeviceCaps::gpu(9, 0, 132, true)}, {"9.0 without sm_90a", DeviceCaps::gpu(9, 0, 132, false)},
      {"8.0", DeviceCaps::gpu(8, 0, 108)},        {"8.6", DeviceCaps::gpu(8, 6, 84)},
      {"8.9", DeviceCaps::gpu(8, 9, 128)},        {"12.0", DeviceCaps::gpu(12, 0, 170)},
  };
  return g;
}

DecodeProblem problem(int batch, int64_t len, int dim, int k_bits, int v_bits, Math math = Math::automatic,
                      DType q = DType::f16) {
  DecodeProblem p;
  p.batch = batch;
  p.q_heads = 32;
  p.kv_heads = 8;
  p.dim = dim;
  p.k_bits = k_bits;
  p.v_bits = v_bits;
  p.capacity = len;
  p.max_len = len;
  p.q_dtype = q;
  p.math = math;
  return p;
}

std::string describe(const DecodeProblem& p, const Gpu& g) {
  return "B=" + std::to_string(p.batch) + " L=" + std::to_string(p.max_len) + " D=" + std::to_string(p.dim) + " K" +
         std::to_string(p.k_bits) + "/V" + std::to_string(p.v_bits) + " math " +
         std::to_string(static_cast<int>(p.math)) + " q " + to_string(p.q_dtype) + " on " + g.name;
}

// The slices of any GPU choice: at least one, within max_splits, whole 16-token tiles (whole rounds
// of the wide kernel's warps when automatic), covering the longest sequence with no empty slice.
void expect_valid_slices(const DecodeChoice& c, const DecodeProblem& p, const std::string& what) {
  ASSERT_GE(c.splits, 1) << what;
  EXPECT_LE(c.splits, backend::max_splits(p.batch, p.kv_heads, p.q_heads / p.kv_heads, p.capacity)) << what;
  const int64_t unit =
      c.variant == DecodeVariant::f16_wide && p.num_splits == 0 ? backend::wide_round_tokens(p.dim) : 16;
  EXPECT_EQ(c.tokens_per_split % unit, 0) << what;
  EXPECT_GE(c.splits * c.tokens_per_split, p.max_len) << what;
  if (p.max_len > 0) EXPECT_LT((c.splits - 1) * c.tokens_per_split, p.max_len) << what;
}

// ---- the variant of every shape ------------------------------------------------------------------

TEST(ChooseDecodeAttention, VariantOfEveryShapeMathAndGpu) {
  for (const Gpu& g : gpus())
    for (int batch : {1, 8})
      for (int64_t len : {4096, 32768, 131072})
        for (int dim : {64, 128, 256, 512})
          for (auto [kb, vb] : {std::pair{4, 4}, {8, 4}, {4, 8}, {8, 8}, {2, 3}, {3, 2}})
            for (Math math : {Math::f16, Math::f32, Math::automatic})
              for (DType q : {DType::f16, DType::f32}) {
                const DecodeProblem p = problem(batch, len, dim, kb, vb, math, q);
                const std::string what = describe(p, g);
                const bool f16_bits = (kb == 4 || kb == 8) && (vb == 4 || vb == 8);
                const bool want_f16 = math == Math::f16 || (math == Math::automatic && q != DType::f32);
                if (want_f16 && !f16_bits && math == Math::f16) {
                  expect_error([&] { choose(p, g.caps, 2); }, ErrorCode::unsupported,
                               {"[attention::decode_attention]", "4 or 8 bits", "use Math::f32"});
                  continue;
                }
                const DecodeChoice c = choose(p, g.caps, 2);
                if (want_f16 && f16_bits)
                  EXPECT_EQ(c.variant, dim <= 128 ? DecodeVariant::f16_wide : DecodeVariant::f16_registers) << what;
                else
                  EXPECT_EQ(c.variant, DecodeVariant::f32) << what;
                EXPECT_EQ(c.dims_per_lane, c.variant == DecodeVariant::f32 ? dim / 32 : 0) << what;
                EXPECT_TRUE(runs_on(arch_of(c.variant), g.caps)) << what;
                expect_valid_slices(c, p, what);
              }
}

// ---- the slices: literal rows (Hq = 32, Hkv = 8; the resident blocks per SM are the inputs) ----------

struct Row {
  const char* gpu;
  int batch;
  int64_t len;
  int dim;
  Math math;
  int resident;
  const char* expect;
};

TEST(ChooseDecodeAttention, SlicesFillWholeWavesOfEachGpu) {
  const std::vector<Row> rows = {
      // The H200's wide kernel (2 resident blocks): the headline rows.
      {"H200", 8, 32768, 128, Math::f16, 2, "f16_wide, 4 splits of 8192 tokens"},
      {"H200", 1, 131072, 128, Math::f16, 2, "f16_wide, 32 splits of 4096 tokens"},
      {"H200", 1, 32768, 128, Math::f16, 2, "f16_wide, 32 splits of 1024 tokens"},
      {"H200", 1, 4096, 128, Math::f16, 2, "f16_wide, 16 splits of 256 tokens"},  // whole rounds, not 32 of 128
      {"H200", 8, 4096, 128, Math::f16, 2, "f16_wide, 4 splits of 1024 tokens"},
      {"H200", 8, 131072, 128, Math::f16, 2, "f16_wide, 4 splits of 32768 tokens"},
      {"H200", 1, 131072, 256, Math::f16, 2, "f16_registers, 33 splits of 3984 tokens"},
      {"H200", 1, 4096, 256, Math::f16, 2, "f16_registers, 32 splits of 128 tokens"},
      {"H200", 1, 131072, 128, Math::f32, 3, "f32 (4 dims a lane), 49 splits of 2688 tokens"},
      {"H200", 8, 32768, 128, Math::f32, 3, "f32 (4 dims a lane), 6 splits of 5472 tokens"},
      {"9.0 without sm_90a", 8, 32768, 128, Math::f16, 2, "f16_wide, 4 splits of 8192 tokens"},
      {"8.0", 8, 32768, 128, Math::f16, 2, "f16_wide, 10 splits of 3328 tokens"},
      {"8.0", 1, 131072, 128, Math::f16, 2, "f16_wide, 27 splits of 4864 tokens"},
      {"8.6", 8, 32768, 128, Math::f16, 2, "f16_wide, 5 splits of 6656 tokens"},
      {"8.6", 1, 131072, 128, Math::f32, 3, "f32 (4 dims a lane), 63 splits of 2096 tokens"},
      {"8.9", 8, 32768, 256, Math::f16, 2, "f16_registers, 4 splits of 8192 tokens"},
      {"12.0", 1, 131072, 128, Math::f16, 2, "f16_wide, 40 splits of 3328 tokens"},
      {"12.0", 8, 4096, 256, Math::f16, 2, "f16_registers, 20 splits of 208 tokens"},
  };
  for (const Row& r : rows) {
    const Gpu* g = nullptr;
    for (const Gpu& x : gpus())
      if (std::string(x.name) == r.gpu) g = &x;
    ASSERT_NE(g, nullptr) << r.gpu;
    const DecodeProblem p = problem(r.batch, r.len, r.dim, 4, 4, r.math);
    EXPECT_EQ(to_string(choose(p, g->caps, r.resident)), r.expect) << describe(p, *g);
  }
}

TEST(ChooseDecodeAttention, TheResidentBlocksSetTheWaves) {
  const DeviceCaps h200 = DeviceCaps::gpu(9, 0, 132, true);
  const DecodeProblem p = problem(8, 32768, 128, 4, 4, Math::f16);
  EXPECT_EQ(to_string(choose(p, h200, 1)), "f16_wide, 2 splits of 16384 tokens");  // 128 blocks: one wave of 132
  EXPECT_EQ(to_string(choose(p, h200, 2)), "f16_wide, 4 splits of 8192 tokens");   // 256 blocks: one wave of 264
  const DecodeProblem one = problem(1, 131072, 128, 4, 4, Math::f16);
  EXPECT_EQ(to_string(choose(one, h200, 4)), "f16_wide, 64 splits of 2048 tokens");  // L / 2048 bounds it
  // An unknown occupancy (0) counts one block a multiprocessor.
  EXPECT_EQ(choose(p, h200, 0), choose(p, h200, 1));
}

TEST(ChooseDecodeAttention, ForcedSlicesAreWholeTilesOfAnyVariant) {
  const DeviceCaps h200 = DeviceCaps::gpu(9, 0, 132, true);
  DecodeProblem p = problem(2, 1000, 128, 4, 4, Math::f16);
  p.capacity = 1000;
  p.num_splits = 3;  // 334 tokens → 336, a tile multiple (not a round of the wide kernel's warps)
  EXPECT_EQ(to_string(choose(p, h200, 2)), "f16_wide, 3 splits of 336 tokens");
  p.num_splits = 63;  // ceil(1000 / 16): slices of one tile, the last one partial
  EXPECT_EQ(to_string(choose(p, h200, 2)), "f16_wide, 63 splits of 16 tokens");
  p.num_splits = 7;
  p.math = Math::f32;
  EXPECT_EQ(to_string(choose(p, h200, 3)), "f32 (4 dims a lane), 7 splits of 144 tokens");
  // Forced slices past what the length needs: slices of one tile, as many as the length fills.
  p.max_len = 20;
  EXPECT_EQ(to_string(choose(p, h200, 3)), "f32 (4 dims a lane), 2 splits of 16 tokens");
}

TEST(ChooseDecodeAttention, AnEmptyCallIsOneSliceOfOneTile) {
  const DecodeProblem p = problem(8, 0, 128, 4, 4, Math::f16);
  const DecodeChoice c = choose(p, DeviceCaps::gpu(9, 0, 132, true), 2);
  EXPECT_EQ(c.splits, 1);
  EXPECT_EQ(workspace_bytes(c, p), 0u);
}

// ---- the CPU ------------------------------------------------------------------------------------

TEST(ChooseDecodeAttention, TheCpuSlicesBy1024TokensWhateverTheMath) {
  for (Math math : {Math::f16, Math::f32, Math::automatic})
    for (auto [kb, vb] : {std::pair{4, 4}, {2, 3}}) {
      DecodeProblem p = problem(8, 4097, 1024, kb, vb, math);
      const DecodeChoice c = choose(p, DeviceCaps{}, 0);
      EXPECT_EQ(to_string(c), "cpu, 5 splits of 1024 tokens");
      EXPECT_EQ(workspace_bytes(c, p), 0u);
      p.num_splits = 2;  // the CPU's slices do not follow the GPU grid's override
      EXPECT_EQ(choose(p, DeviceCaps{}, 0), c);
    }
}

// ---- forced variants that cannot serve ----------------------------------------------------------

TEST(ChooseDecodeAttention, ForcedVariantsThatCannotServeAreClearErrors) {
  const DeviceCaps h200 = DeviceCaps::gpu(9, 0, 132, true);
  auto forced = [](DecodeProblem p, DecodeVariant v) {
    p.variant = v;
    return p;
  };
  const DecodeProblem three_bit = problem(1, 4096, 128, 3, 4, Math::automatic);
  for (DecodeVariant v : {DecodeVariant::f16_registers, DecodeVariant::f16_wide})
    expect_error([&] { choose(forced(three_bit, v), h200, 2); }, ErrorCode::unsupported,
                 {"[attention::decode_attention]", "forced variant " + to_string(v), "K 3 bits", "4 or 8 bits"});
  EXPECT_EQ(choose(three_bit, h200, 2).variant, DecodeVariant::f32);  // the rule falls back to f32
  EXPECT_EQ(choose(forced(three_bit, DecodeVariant::f32), h200, 2).variant, DecodeVariant::f32);

  expect_error([&] { choose(forced(problem(1, 4096, 256, 4, 4), DecodeVariant::f16_wide), h200, 2); },
               ErrorCode::unsupported, {"forced variant f16_wide", "head_dim 64 or 128, got 256"});
  expect_error(
      [&] { choose(forced(problem(1, 4096, 128, 4, 4), DecodeVariant::f16_wide), DeviceCaps::gpu(7, 5, 40), 2); },
      ErrorCode::unsupported, {"forced variant f16_wide", "compute capability 8.0", "sm_75, 40 SMs"});
  expect_error([&] { choose(forced(problem(1, 4096, 128, 4, 4, Math::f32), DecodeVariant::f16_registers), h200, 2); },
               ErrorCode::unsupported, {"forced variant f16_registers", "math is f32"});
  expect_error([&] { choose(forced(problem(1, 4096, 128, 4, 4, Math::f16), DecodeVariant::f32), h200, 2); },
               ErrorCode::unsupported, {"forced variant f32", "math is f16"});
  expect_error([&] { choose(forced(problem(1, 4096, 128, 4, 4), DecodeVariant::f32), DeviceCaps{}, 0); },
               ErrorCode::unsupported, {"forced variant f32", "needs a CUDA device", "on the CPU"});
  expect_error([&] { choose(forced(problem(1, 4096, 128, 4, 4), DecodeVariant::cpu), h200, 2); },
               ErrorCode::unsupported, {"forced variant cpu", "on a GPU (sm_90a, 132 SMs)"});
  // A forced variant that serves is the choice, whatever the rule would pick.
  const DecodeChoice regs = choose(forced(problem(8, 32768, 128, 4, 4), DecodeVariant::f16_registers), h200, 4);
  EXPECT_EQ(regs.variant, DecodeVariant::f16_registers);
  EXPECT_EQ(regs.tokens_per_split % 16, 0);
}

TEST(ChooseDecodeAttention, WhatNoGpuKernelServesIsAClearError) {
  const DeviceCaps h200 = DeviceCaps::gpu(9, 0, 132, true);
  expect_error([&] { choose(problem(1, 4096, 1024, 4, 4, Math::f32), h200, 2); }, ErrorCode::unsupported,
               {"head_dim up to 512, got 1024", "the CPU serves any"});
  expect_error([&] { choose(problem(1, 4096, 1024, 4, 4, Math::f16), h200, 2); }, ErrorCode::unsupported,
               {"head_dim 64..512", "use Math::f32"});
  expect_error([&] { choose(problem(1, 4096, 1024, 4, 4, Math::automatic), h200, 2); }, ErrorCode::unsupported,
               {"head_dim up to 512"});
  DecodeProblem big = problem(65536, 16, 128, 4, 4);
  expect_error([&] { choose(big, h200, 2); }, ErrorCode::unsupported, {"up to 65535 sequences", "65536"});
  EXPECT_EQ(choose(big, DeviceCaps{}, 0).variant, DecodeVariant::cpu);
  // Before compute capability 8.0 the f16 path has no kernel: f16 math is refused, automatic is f32.
  const DeviceCaps turing = DeviceCaps::gpu(7, 5, 40);
  expect_error([&] { choose(problem(1, 4096, 128, 4, 4, Math::f16), turing, 2); }, ErrorCode::unsupported,
               {"compute capability 8.0", "use Math::f32"});
  EXPECT_EQ(choose(problem(1, 4096, 128, 4, 4), turing, 2).variant, DecodeVariant::f32);
}

// ---- workspace --------------------------------------------------------------------------------------

TEST(ChooseDecodeAttention, WorkspaceOfAChoiceFitsTheShapesWorkspace) {
  const DeviceCaps h200 = DeviceCaps::gpu(9, 0, 132, true);
  for (int batch : {1, 8, 200})
    for (int64_t len : {16, 4096, 131072}) {
      const DecodeProblem p = problem(batch, len, 128, 4, 4, Math::f16);
      const DecodeChoice c = choose(p, h200, 2);
      const size_t need = workspace_bytes(c, p);
      EXPECT_EQ(need == 0, c.splits == 1 && batch <= backend::kInlineBatch) << describe(p, gpus()[0]);
      const int64_t cap = backend::max_splits(p.batch, p.kv_heads, p.q_heads / p.kv_heads, p.capacity);
      EXPECT_LE(need, backend::workspace_bytes(p.batch, p.q_heads, p.dim, cap)) << describe(p, gpus()[0]);
    }
}

TEST(ChooseDecodeAttention, ChoicesPrintThemselves) {
  EXPECT_EQ(to_string(DecodeVariant::cpu), "cpu");
  EXPECT_EQ(to_string(DecodeVariant::f32), "f32");
  EXPECT_EQ(to_string(DecodeVariant::f16_registers), "f16_registers");
  EXPECT_EQ(to_string(DecodeVariant::f16_wide), "f16_wide");
  EXPECT_EQ(to_string(DecodeChoice{DecodeVariant::f32, 1, 1, 64}), "f32 (1 dim a lane), 1 split of 64 tokens");
}

}  // namespace
}  // namespace frugal::attention
