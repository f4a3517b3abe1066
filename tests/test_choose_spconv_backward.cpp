// The sparse conv's wgrad choice as a table, on the CPU: training shapes (sphere shells, TRELLIS.2's
// decoder levels and its C → 8C convs) × the GPUs frugal meets → the variant and the split of N. The
// split is a function of the shape alone: every GPU that runs the same variant sums the same chunks.
#include <gtest/gtest.h>

#include <string>

#include "core/spconv_backward_choose.h"
#include "testing.h"

namespace frugal::spconv {
namespace {

using V = WgradVariant;
using testing::expect_error;

const DeviceCaps h200 = DeviceCaps::gpu(9, 0, 132, true);
const DeviceCaps a100 = DeviceCaps::gpu(8, 0, 108);
const DeviceCaps a6000 = DeviceCaps::gpu(8, 6, 84);
const DeviceCaps l40 = DeviceCaps::gpu(8, 9, 128);
const DeviceCaps rtx50 = DeviceCaps::gpu(12, 0, 170);
const DeviceCaps h100_no90a = DeviceCaps::gpu(9, 0, 132, false);
const DeviceCaps t4 = DeviceCaps::gpu(7, 5, 40);  // no bf16 tensor cores, no cp.async
const DeviceCaps cpu{};

backend::WgradArgs args(int64_t n, int ci, int co, DType dt = DType::f16, int k = 27) {
  backend::WgradArgs a;
  a.n = n;
  a.ci = ci;
  a.co = co;
  a.k = k;
  a.dtype = dt;
  a.grad_weight = a.grad_bias = reinterpret_cast<void*>(16);  // both asked for (the workspace counts them)
  return a;
}

struct Row {
  const char* shape;
  int64_t n;
  int ci, co;
  DType dtype;
  WgradChoice want;
};

// mma where channels are multiples of 8 (tiles 128 where a side exceeds 64), WMMA for odd channels, simt for f32;
// splits = min(⌈1024 / tiles⌉, ⌈N / 512⌉, 64 MiB / partial bytes), chunk_rows = ⌈N / splits⌉ rounded up to 32.
const Row kRows[] = {
    {"shell R=1024 C=64 (N 4.6M)", 4643936, 64, 64, DType::f16, {V::mma, 38, 122240, 64, 64}},
    {"shell R=512 C=128", 1160984, 128, 128, DType::bf16, {V::mma, 37, 31392, 128, 128}},
    {"shell R=256 C=256", 290246, 256, 256, DType::f16, {V::mma, 9, 32256, 128, 128}},
    {"decoder C=1024 at 15K voxels", 15000, 1024, 1024, DType::f16, {V::mma, 1, 15000, 128, 128}},
    {"decoder C=64 at 1M voxels", 1000000, 64, 64, DType::bf16, {V::mma, 38, 26336, 64, 64}},
    {"C -> 8C: 64 -> 512 at 200K", 200000, 64, 512, DType::f16, {V::mma, 10, 20000, 64, 128}},
    {"8C -> C: 512 -> 64 at 200K", 200000, 512, 64, DType::f16, {V::mma, 10, 20000, 128, 64}},
    {"odd channels 3 -> 17 at 100K", 100000, 3, 17, DType::f16, {V::wmma, 38, 2656}},
    {"f32 C=64 at 1M", 1000000, 64, 64, DType::f32, {V::simt, 38, 26336}},
    {"tiny: 100 rows", 100, 16, 16, DType::f16, {V::mma, 1, 100, 64, 64}},
    {"1000 rows: chunks of at least 512", 1000, 16, 16, DType::f16, {V::mma, 2, 512, 64, 64}},
};

TEST(ChooseSpconvWgrad, TheTableOnEveryGpuWithTensorCores) {
  for (const Row& r : kRows)
    for (const DeviceCaps& caps : {h200, a100, a6000, l40, rtx50, h100_no90a}) {
      const WgradChoice c = choose(args(r.n, r.ci, r.co, r.dtype), caps);
      EXPECT_EQ(to_string(c), to_string(r.want)) << r.shape << " on " << to_string(caps);
    }
}

TEST(ChooseSpconvWgrad, PartialsStayWithinTheirBudget) {
  for (const Row& r : kRows) {
    const backend::WgradArgs a = args(r.n, r.ci, r.co, r.dtype);
    const WgradChoice c = choose(a, h200);
    EXPECT_LE(workspace_bytes(a, c), kMaxWgradBytes + 32) << r.shape;
    const size_t partials = c.splits > 1 ? (size_t(c.splits) * 27 * r.ci * r.co * 4 + 15) / 16 * 16 : 0;
    EXPECT_EQ(weight_partial_bytes(a, c), partials) << r.shape;
    EXPECT_GE(int64_t{c.splits} * c.chunk_rows, r.n);
    EXPECT_LT(int64_t{c.splits - 1} * c.chunk_rows, r.n) << "no empty chunk";
  }
  // One chunk (enough tiles on their own) writes the gradients directly: no partials, whatever K·Ci·Co.
  const backend::WgradArgs big = args(15000, 1024, 1024);
  const WgradChoice c = choose(big, h200);
  EXPECT_EQ(c.splits, 1) << to_string(c);
  EXPECT_EQ(workspace_bytes(big, c), 0u);
}

TEST(ChooseSpconvWgrad, CudaCoresWithoutTensorCoresAndOnTheCpu) {
  EXPECT_EQ(to_string(choose(args(1000000, 64, 64, DType::f16), t4)), "simt(splits 38, chunk_rows 26336)");
  EXPECT_EQ(to_string(choose(args(1000000, 64, 64, DType::f16), cpu)), "cpu(splits 1, chunk_rows 1000000)");
  EXPECT_EQ(to_string(choose(args(5, 3, 3, DType::f64), cpu)), "cpu(splits 1, chunk_rows 5)");
  EXPECT_EQ(workspace_bytes(args(5, 3, 3), choose(args(5, 3, 3), cpu)), 0u);
}

TEST(ChooseSpconvWgrad, ForcedChoicesAreCompletedOrRefused) {
  const backend::WgradArgs a = args(1000, 16, 16);
  EXPECT_EQ(to_string(complete(a, h200, WgradChoice{.variant = V::simt, .chunk_rows = 32})),
            "simt(splits 32, chunk_rows 32)");
  EXPECT_EQ(to_string(complete(a, h200, WgradChoice{.variant = V::wmma, .splits = 7})),
            "wmma(splits 7, chunk_rows 160)");
  EXPECT_EQ(to_string(complete(a, h200, WgradChoice{.variant = V::wmma, .splits = 1})),
            "wmma(splits 1, chunk_rows 1000)");
  std::string why;
  EXPECT_FALSE(can_implement(args(1000, 16, 16, DType::f32), h200, complete(a, h200, {V::wmma}), &why));
  EXPECT_EQ(why, "takes f16 or bf16, got f32");
  EXPECT_FALSE(can_implement(a, t4, complete(a, t4, {V::wmma}), &why));
  EXPECT_NE(why.find("needs compute capability 8.0 or newer"), std::string::npos) << why;
  EXPECT_FALSE(can_implement(a, cpu, complete(a, cpu, {V::simt}), &why));
  EXPECT_EQ(why, "needs a CUDA device, got a call on the CPU");
  EXPECT_FALSE(can_implement(a, h200, complete(a, h200, {V::cpu}), &why));
  EXPECT_NE(why.find("runs CPU calls only"), std::string::npos) << why;
  EXPECT_FALSE(can_implement(a, h200, WgradChoice{V::wmma, 3, 32}, &why)) << "3 chunks of 32 rows do not cover N";
  EXPECT_NE(why.find("splits = ceil(N / chunk_rows)"), std::string::npos) << why;
  EXPECT_FALSE(can_implement(args(1000, 16, 16, DType::f64), h200, complete(a, h200, {V::simt}), &why));
  EXPECT_NE(why.find("f64 runs on the CPU only"), std::string::npos) << why;
  EXPECT_TRUE(can_implement(a, h200, WgradChoice{V::wmma, 1, 1000}));
  EXPECT_TRUE(can_implement(a, t4, complete(a, t4, {V::simt})));
}

TEST(ChooseSpconvWgrad, MmaTakesWholeCopiesAndItsTwoTiles) {
  EXPECT_EQ(to_string(complete(args(1000, 16, 200), h200, WgradChoice{.variant = V::mma, .splits = 2})),
            "mma(tile 64 x 128, splits 2, chunk_rows 512)");
  std::string why;
  const backend::WgradArgs odd = args(1000, 12, 16);
  EXPECT_FALSE(can_implement(odd, h200, complete(odd, h200, {V::mma}), &why));
  EXPECT_NE(why.find("multiples of 8, 16-byte aligned rows and a 4-byte aligned grad_weight, got Ci = 12, Co = 16"),
            std::string::npos)
      << why;
  backend::WgradArgs unaligned = args(1000, 16, 16);
  unaligned.feats = reinterpret_cast<const void*>(8);
  EXPECT_FALSE(can_implement(unaligned, h200, complete(unaligned, h200, {V::mma}), &why));
  EXPECT_EQ(choose(unaligned, h200).variant, V::wmma) << "rows that are not 16-byte aligned go to WMMA";
  backend::WgradArgs odd_out = args(1000, 16, 16);
  odd_out.grad_weight = reinterpret_cast<void*>(18);  // a view one f16 element into its storage
  EXPECT_EQ(choose(odd_out, h200).variant, V::wmma) << "a grad_weight the pair stores cannot take goes to WMMA";
  const backend::WgradArgs a = args(1000, 256, 256);
  EXPECT_FALSE(can_implement(a, h200, complete(a, h200, {.variant = V::mma, .tile_ci = 96}), &why));
  EXPECT_NE(why.find("takes tiles of 64 or 128"), std::string::npos) << why;
  EXPECT_FALSE(can_implement(a, h200, complete(a, h200, {.variant = V::wmma, .tile_ci = 128}), &why));
  EXPECT_NE(why.find("runs 64 x 64 tiles"), std::string::npos) << why;
  DeviceCaps small = h200;
  small.smem_per_block = 64 * 1024;  // less than the wide tiles' stages: the rules take 64 x 64
  EXPECT_FALSE(can_implement(a, small, complete(a, small, {.variant = V::mma, .tile_ci = 128, .tile_co = 128}), &why));
  EXPECT_NE(why.find("bytes of shared memory a block"), std::string::npos) << why;
  EXPECT_EQ(choose(a, small).tile_ci, 64);
  EXPECT_EQ(choose(a, small).tile_co, 64);
  EXPECT_TRUE(can_implement(a, h200, complete(a, h200, {V::mma})));
  EXPECT_TRUE(can_implement(a, a100, complete(a, a100, {.variant = V::mma, .tile_ci = 64, .tile_co = 64})));
}

}  // namespace
}  // namespace frugal::spconv
