// Paged attention's kernel choice as a table (runs on the CPU, for every GPU generation): shape ×
// math × query dtype × device → the row and tile kernels, the row items' slices (decode's own rule),
// and the forced choices that must be refused. The oracle is the rule as paged_choose.h states it.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "core/attention_backend.h"
#include "core/attention_choose.h"
#include "core/paged_choose.h"
#include "testing.h"

namespace frugal::attention {
namespace {

using testing::expect_error;

struct Gpu {
  const char* name;
  DeviceCaps caps;
};

// The H200, A100, RTX 3090 / A40, L40 / RTX 4090, RTX 5090, and a pre-Ampere GPU (T4).
const std::vector<Gpu>& gpus() {
  static const std::vector<Gpu> g = {
      {"H200", DeviceCaps::gpu(9, 0, 132, true)}, {"8.0", DeviceCaps::gpu(8, 0, 108)},
      {"8.6", DeviceCaps::gpu(8, 6, 84)},         {"8.9", DeviceCaps::gpu(8, 9, 128)},
      {"12.0", DeviceCaps::gpu(12, 0, 170)},      {"7.5", DeviceCaps::gpu(7, 5, 40)},
  };
  return g;
}

PagedProblem problem(int dim, int k_bits, int v_bits, Math math, DType q, int64_t items = 8, int64_t len = 4096) {
  PagedProblem p;
  p.q_heads = 32;
  p.kv_heads = 8;
  p.dim = dim;
  p.k_bits = k_bits;
  p.v_bits = v_bits;
  p.q_dtype = q;
  p.math = math;
  p.row_items = items;
  p.max_len = len;
  p.max_kv_len = len;
  return p;
}

std::string describe(const PagedProblem& p, const std::string& device) {
  return "D=" + std::to_string(p.dim) + " K" + std::to_string(p.k_bits) + "/V" + std::to_string(p.v_bits) + " math " +
         std::to_string(static_cast<int>(p.math)) + " q " + to_string(p.q_dtype) + " on " + device;
}

TEST(ChoosePaged, TheCpuServesEverythingInF32) {
  for (Math math : {Math::automatic, Math::f32, Math::f16})
    for (DType q : {DType::f32, DType::f16, DType::bf16}) {
      const PagedProblem p = problem(4096, 3, 2, math, q, 5, 3000);
      const PagedChoice c = choose_paged(p, DeviceCaps{}, 0);
      EXPECT_EQ(c.rows, PagedVariant::cpu) << describe(p, "cpu");
      EXPECT_EQ(c.tiles, PagedVariant::cpu) << describe(p, "cpu");
      EXPECT_EQ(c.tokens_per_split, kCpuSliceTokens);
      EXPECT_EQ(c.splits, 3);  // ⌈3000 / 1024⌉
    }
}

TEST(ChoosePaged, VariantsOfEveryShapeMathAndGpu) {
  for (const Gpu& g : gpus())
    for (int dim : {32, 64, 128, 256, 512})
      for (auto [kb, vb] : {std::pair{4, 4}, {8, 4}, {4, 8}, {8, 8}, {2, 2}, {3, 4}, {4, 2}})
        for (Math math : {Math::automatic, Math::f32, Math::f16})
          for (DType q : {DType::f32, DType::f16, DType::bf16}) {
            const PagedProblem p = problem(dim, kb, vb, math, q);
            const std::string what = describe(p, g.name);
            const bool f16 = math == Math::f16 || (math == Math::automatic && q != DType::f32);
            const bool sm80 = g.caps.capability() >= 80;
            const bool rows_f16 = f16 && sm80 && dim >= 64 && (kb == 4 || kb == 8) && (vb == 4 || vb == 8);
            const bool tiles_f16 = f16 && sm80 && (dim == 64 || dim == 128 || dim == 256);
            const PagedChoice c = choose_paged(p, g.caps, 4);
            const PagedVariant rows = rows_f16 ? PagedVariant::rows_f16 : PagedVariant::rows_f32;
            EXPECT_EQ(c.rows, rows) << what;
            EXPECT_EQ(c.tiles, tiles_f16 ? PagedVariant::tiles_f16 : rows) << what;
            EXPECT_TRUE(runs_on(arch_of(c.rows), g.caps) && runs_on(arch_of(c.tiles), g.caps)) << what;
          }
}

TEST(ChoosePaged, RowItemsAreSlicedAsDecodeSlicesSequences) {
  for (const Gpu& g : gpus())
    for (int64_t items : {1, 4, 64, 1000})
      for (int64_t len : {100, 4096, 32768, 131072})
        for (DType q : {DType::f32, DType::f16}) {
          const PagedProblem p = problem(128, 4, 4, Math::automatic, q, items, len);
          const PagedChoice c = choose_paged(p, g.caps, 3);
          const DecodeChoice d = choose(row_items_problem(p, c.rows), g.caps, 3);
          const std::string what = describe(p, g.name) + " items " + std::to_string(items) + " L " + std::to_string(len);
          EXPECT_EQ(c.splits, d.splits) << what;
          EXPECT_EQ(c.tokens_per_split, d.tokens_per_split) << what;
          EXPECT_GE(c.splits * c.tokens_per_split, len) << what;  // the slices cover every row item
        }
  // A few long rows on the H200 are split (flash-decoding), as decode splits a few long sequences.
  const PagedChoice c = choose_paged(problem(128, 4, 4, Math::automatic, DType::f16, 2, 131072), gpus()[0].caps, 4);
  EXPECT_GT(c.splits, 1) << to_string(c);
  // More row items than decode's grid holds sequences: one slice each (the rule's answer at that count).
  const PagedChoice many = choose_paged(problem(128, 4, 4, Math::f32, DType::f32, 200000, 8192), gpus()[0].caps, 4);
  EXPECT_EQ(many.splits, 1) << to_string(many);
  // A forced slice count is decode's forced count.
  PagedProblem forced = problem(128, 4, 4, Math::f32, DType::f32, 2, 4096);
  forced.num_splits = 5;
  EXPECT_EQ(choose_paged(forced, gpus()[0].caps, 4).splits, 5);
}

// Speculative steps (up to 16 query tokens) go to the row kernel where it is the tensor-core one;
// a forced tiled kernel, or an exact row kernel, leaves every multi-query sequence to `tiles`.
TEST(ChoosePaged, ShortMultiQuerySequencesAreRowItemsOfTheTensorCoreRowKernel) {
  const DeviceCaps h200 = gpus()[0].caps;
  PagedChoice c = choose_paged(problem(128, 4, 4, Math::automatic, DType::f16), h200, 4);
  EXPECT_EQ(c.rows, PagedVariant::rows_f16);
  EXPECT_EQ(c.tiles, PagedVariant::tiles_f16);
  EXPECT_EQ(c.tile_min_queries, 17) << to_string(c);
  PagedProblem forced = problem(128, 4, 4, Math::automatic, DType::f16);
  forced.tiles = PagedVariant::tiles_f16;
  EXPECT_EQ(choose_paged(forced, h200, 4).tile_min_queries, 2);
  // 2-bit codes: rows_f16 cannot serve, so the tiled kernel takes every multi-query sequence.
  c = choose_paged(problem(128, 2, 2, Math::automatic, DType::f16), h200, 4);
  EXPECT_EQ(c.rows, PagedVariant::rows_f32);
  EXPECT_EQ(c.tile_min_queries, 2) << to_string(c);
}

TEST(ChoosePaged, ForcedVariantsServeWhereTheyCan) {
  const DeviceCaps h200 = gpus()[0].caps;
  PagedProblem p = problem(128, 2, 4, Math::automatic, DType::f16);
  p.rows = PagedVariant::rows_f32;
  PagedChoice c = choose_paged(p, h200, 4);
  EXPECT_EQ(c.rows, PagedVariant::rows_f32);
  EXPECT_EQ(c.tiles, PagedVariant::tiles_f16);  // 2 bits: the tiled kernel serves any width
  // A forced row kernel for the tiles forces the row items' kernel too.
  p = problem(128, 4, 4, Math::automatic, DType::f16);
  p.tiles = PagedVariant::rows_f32;
  c = choose_paged(p, h200, 4);
  EXPECT_EQ(c.rows, PagedVariant::rows_f32);
  EXPECT_EQ(c.tiles, PagedVariant::rows_f32);
  // The tiled kernel forced with f32 queries (automatic math) serves.
  p = problem(64, 8, 8, Math::automatic, DType::f32);
  p.tiles = PagedVariant::tiles_f16;
  c = choose_paged(p, h200, 4);
  EXPECT_EQ(c.rows, PagedVariant::rows_f32);
  EXPECT_EQ(c.tiles, PagedVariant::tiles_f16);
}

TEST(ChoosePaged, ForcedVariantsThatCannotServeAreClearErrors) {
  const DeviceCaps h200 = gpus()[0].caps;
  const auto refused = [](PagedProblem p, const DeviceCaps& caps, std::optional<PagedVariant> rows,
                          std::optional<PagedVariant> tiles, std::initializer_list<std::string> parts) {
    p.rows = rows;
    p.tiles = tiles;
    expect_error([&] { choose_paged(p, caps, 4); }, ErrorCode::unsupported, parts);
  };
  const PagedProblem f16 = problem(128, 4, 4, Math::automatic, DType::f16);
  refused(problem(128, 2, 4, Math::automatic, DType::f16), h200, PagedVariant::rows_f16, {}, {"rows_f16", "4 or 8 bits"});
  refused(problem(128, 4, 4, Math::f32, DType::f16), h200, PagedVariant::rows_f16, {}, {"rows_f16", "math is f32"});
  refused(problem(128, 4, 4, Math::f32, DType::f16), h200, {}, PagedVariant::tiles_f16, {"tiles_f16", "math is f32"});
  refused(problem(512, 4, 4, Math::f16, DType::f16), h200, {}, PagedVariant::tiles_f16, {"head_dim 64, 128 or 256, got 512"});
  refused(f16, DeviceCaps::gpu(7, 5, 40), {}, PagedVariant::tiles_f16, {"tiles_f16", "8.0 or newer"});
  refused(f16, DeviceCaps::gpu(7, 5, 40), PagedVariant::rows_f16, {}, {"rows_f16", "8.0 or newer"});
  refused(f16, h200, PagedVariant::tiles_f16, {}, {"tiles_f16", "not row items"});
  refused(f16, h200, PagedVariant::cpu, {}, {"cpu", "on a GPU"});
  refused(f16, DeviceCaps{}, PagedVariant::rows_f32, {}, {"rows_f32", "on the CPU"});
  refused(f16, DeviceCaps{}, {}, PagedVariant::tiles_f16, {"tiles_f16", "on the CPU"});
  refused(f16, h200, PagedVariant::rows_f16, PagedVariant::rows_f32, {"force both to the same kernel"});
}

TEST(ChoosePaged, WhatNoGpuKernelServesIsAClearError) {
  for (const Gpu& g : gpus())
    expect_error([&] { choose_paged(problem(1024, 4, 4, Math::f32, DType::f32), g.caps, 4); },
                 ErrorCode::unsupported, {"head_dim up to 512, got 1024"});
  // The CPU serves it.
  EXPECT_EQ(choose_paged(problem(1024, 4, 4, Math::f32, DType::f32), DeviceCaps{}, 0).rows, PagedVariant::cpu);
}

TEST(ChoosePaged, ChoicesPrintThemselves) {
  PagedChoice c;
  c.rows = PagedVariant::rows_f16;
  c.tiles = PagedVariant::tiles_f16;
  c.splits = 4;
  c.tokens_per_split = 256;
  EXPECT_EQ(to_string(c), "rows rows_f16, tiles tiles_f16, 4 splits of 256 tokens");
  EXPECT_EQ(to_string(PagedVariant::rows_f32), "rows_f32");
  EXPECT_EQ(to_string(PagedVariant::cpu), "cpu");
}

}  // namespace
}  // namespace frugal::attention
