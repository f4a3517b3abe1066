// The KV append's kernel choice as a table, on the CPU: call shape × device capabilities → the
// variant (src/core/kv_choose.h), the refusals of forced variants, and the layout facts the choice
// reads.
#include <string>
#include <vector>

#include "core/device_caps.h"
#include "core/kv_choose.h"
#include "testing.h"

namespace frugal::kv {
namespace {

using testing::expect_error;

struct NamedCaps {
  const char* name;
  DeviceCaps caps;
};

// The GPUs the table covers: the H200 (sm_90a code built), the same chip from a build without
// sm_90a code, A100, RTX 3090, RTX 4090/L40, RTX 5090. None of the KV kernels is sm_90a-only, so
// every one of them takes the same variant.
const NamedCaps kGpus[] = {
    {"H200 sm_90a", DeviceCaps::gpu(9, 0, 132, true)}, {"H200 without sm_90a code", DeviceCaps::gpu(9, 0, 132, false)},
    {"A100", DeviceCaps::gpu(8, 0, 108)},              {"RTX 3090", DeviceCaps::gpu(8, 6, 84)},
    {"RTX 4090", DeviceCaps::gpu(8, 9, 128)},          {"RTX 5090", DeviceCaps::gpu(12, 0, 170)},
};

constexpr int64_t kPrefillTokens = int64_t{1} << 20;  // × 8 heads: 8M vectors
constexpr int kHeads = 8;

// An append of `tokens` tokens × 8 heads into one sequence, with the layout facts set directly.
backend::AppendArgs call(int dim, int bits, DType dt, int64_t tokens, bool aligned,
                         ScaleRule rule = ScaleRule::l2_norm) {
  backend::AppendArgs a;
  a.x_dtype = dt;
  a.tokens = tokens;
  a.heads = kHeads;
  a.dim = dim;
  a.bits = bits;
  a.rule = rule;
  a.aligned = aligned;
  a.dense = aligned;
  return a;
}

// The rule as the header states it: the tensor cores for calls of 16K+ f16/bf16 vectors at
// D = 64, 128, 256 (4 or 8 bits, on 16 bytes, the L2 scale); the fast kernel at D = 64..512 with
// 4 or 8 bits; the generic one for everything else.
AppendVariant expected(int dim, int bits, DType dt, int64_t tokens, bool aligned, ScaleRule rule) {
  const bool wide = bits == 4 || bits == 8;
  if (tokens * kHeads >= 16384 && dt != DType::f32 && aligned && rule == ScaleRule::l2_norm && wide &&
      (dim == 64 || dim == 128 || dim == 256))
    return AppendVariant::mma;
  if (wide && dim >= 64 && dim <= 512) return AppendVariant::fast;
  return AppendVariant::generic;
}

TEST(ChooseKvAppend, EveryShapeOnEveryGpuTakesTheVariantOfTheRule) {
  int rows = 0;
  for (const NamedCaps& gpu : kGpus)
    for (int dim : {4, 8, 64, 128, 256, 512, 1024})
      for (int bits : {2, 3, 4, 8}) {
        if (dim * bits % 8) continue;
        for (int64_t tokens : {kPrefillTokens, int64_t{1}})
          for (DType dt : {DType::f32, DType::f16, DType::bf16})
            for (bool aligned : {true, false})
              for (ScaleRule rule : {ScaleRule::l2_norm, ScaleRule::least_squares}) {
                const backend::AppendArgs a = call(dim, bits, dt, tokens, aligned, rule);
                const AppendChoice c = choose_append(a, gpu.caps);
                ASSERT_EQ(c.variant, expected(dim, bits, dt, tokens, aligned, rule))
                    << gpu.name << ": D " << dim << ", " << bits << " bits, " << to_string(dt)
                    << (tokens > 1 ? ", prefill" : ", decode") << (aligned ? ", aligned" : ", misaligned")
                    << (rule == ScaleRule::l2_norm ? ", L2" : ", least squares") << " -> " << to_string(c);
                ASSERT_TRUE(can_implement(c.variant, a, gpu.caps)) << to_string(c);
                ASSERT_EQ(c, append_tile(c.variant, a)) << "choose returns the variant's own tile";
                ++rows;
              }
      }
  EXPECT_EQ(rows, 6 * (7 * 4 - 1) * 2 * 3 * 2 * 2);
}

// The tiles as they stand, written out: the ones the kernels were measured fastest with.
TEST(ChooseKvAppend, TilesOfTheH200) {
  const DeviceCaps h200 = DeviceCaps::gpu(9, 0, 132, true);
  struct Row {
    int dim, bits;
    DType dt;
    int64_t tokens;
    const char* want;
  };
  const Row rows[] = {
      {128, 4, DType::f16, kPrefillTokens, "mma 256x2 staged"},
      {256, 8, DType::bf16, kPrefillTokens, "mma 256x2 staged"},
      {128, 4, DType::f16, 1, "fast C=8 K=4 G=4 256x2 staged"},
      {256, 4, DType::f16, 1, "fast C=8 K=4 G=8 256x2"},
      {128, 8, DType::f32, kPrefillTokens, "fast C=8 K=4 G=4 128x5 staged"},
      {128, 8, DType::f16, 1, "fast C=8 K=4 G=4 256x2"},
      {512, 8, DType::f16, kPrefillTokens, "fast C=8 K=4 G=16 256x2"},
      {512, 4, DType::bf16, kPrefillTokens, "fast C=8 K=4 G=16 256x2"},
      {64, 4, DType::f32, 1, "fast C=8 K=4 G=2 256x2 staged"},
      {4, 2, DType::f16, kPrefillTokens, "generic C=4 K=1 G=1 256x3"},
      {32, 4, DType::f16, kPrefillTokens, "generic C=8 K=1 G=D/8 512x1"},
      {128, 3, DType::f16, kPrefillTokens, "generic C=8 K=1 G=D/8 512x1"},
      {1024, 8, DType::f16, 1, "generic C=8 K=1 G=D/8 512x1"},
  };
  for (const Row& r : rows)
    EXPECT_EQ(to_string(choose_append(call(r.dim, r.bits, r.dt, r.tokens, true), h200)), r.want)
        << "D " << r.dim << ", " << r.bits << " bits, " << to_string(r.dt) << ", " << r.tokens << " tokens";
}

// 16,384 vectors is where the tensor cores (and the 8-bit staged tile) start.
TEST(ChooseKvAppend, ManyVectorsIsTheThreshold) {
  const DeviceCaps h200 = DeviceCaps::gpu(9, 0, 132, true);
  EXPECT_EQ(choose_append(call(128, 4, DType::f16, 2048, true), h200).variant, AppendVariant::mma);
  EXPECT_EQ(choose_append(call(128, 4, DType::f16, 2047, true), h200).variant, AppendVariant::fast);
  EXPECT_EQ(to_string(choose_append(call(128, 8, DType::f32, 2048, true), h200)), "fast C=8 K=4 G=4 128x5 staged");
  EXPECT_EQ(to_string(choose_append(call(128, 8, DType::f32, 2047, true), h200)), "fast C=8 K=4 G=4 256x2");
}

// Below compute capability 8.0 (no cp.async, no bf16 mma.sync) every call takes the generic kernel.
TEST(ChooseKvAppend, PreAmpereGpusTakeTheGenericKernel) {
  const DeviceCaps t4 = DeviceCaps::gpu(7, 5, 40);
  for (int dim : {64, 128, 256, 512})
    EXPECT_EQ(choose_append(call(dim, 4, DType::f16, kPrefillTokens, true), t4).variant, AppendVariant::generic);
}

TEST(ChooseKvAppend, ForcedVariantsAreRefusedWhereTheyCannotServe) {
  const DeviceCaps h200 = DeviceCaps::gpu(9, 0, 132, true);
  const auto refused = [](const backend::AppendArgs& a, const DeviceCaps& caps, AppendVariant v,
                          std::initializer_list<std::string> parts) {
    EXPECT_FALSE(can_implement(v, a, caps));
    expect_error([&] { resolve_append(a, caps, v, "kv::append"); }, ErrorCode::unsupported, parts);
  };
  refused(call(128, 4, DType::f32, 1, true), h200, AppendVariant::mma, {"[kv::append]", "forced mma", "got f32"});
  refused(call(512, 4, DType::f16, 1, true), h200, AppendVariant::mma, {"forced mma", "D = 512"});
  refused(call(128, 2, DType::f16, 1, true), h200, AppendVariant::mma, {"forced mma", "2 bits"});
  refused(call(128, 4, DType::f16, 1, false), h200, AppendVariant::mma, {"forced mma", "16 bytes"});
  refused(call(128, 4, DType::f16, 1, true, ScaleRule::least_squares), h200, AppendVariant::mma,
          {"forced mma", "least-squares"});
  refused(call(128, 4, DType::f16, 1, true), DeviceCaps::gpu(7, 5, 40), AppendVariant::mma,
          {"forced mma", "capability 8.0", "sm_75"});
  refused(call(32, 4, DType::f16, 1, true), h200, AppendVariant::fast, {"forced fast", "64..512", "D = 32"});
  refused(call(1024, 8, DType::f16, 1, true), h200, AppendVariant::fast, {"forced fast", "D = 1024"});
  refused(call(128, 3, DType::f16, 1, true), h200, AppendVariant::fast, {"forced fast", "3 bits"});
  refused(call(128, 4, DType::f16, 1, true), DeviceCaps{}, AppendVariant::generic,
          {"forced generic", "needs a CUDA device"});
  expect_error([&] { choose_append(call(128, 4, DType::f16, 1, true), DeviceCaps{}); }, ErrorCode::internal,
               {"[kv::append]", "cpu"});
}

// A forced variant that can serve the call gets its own tile for it, whatever the size.
TEST(ChooseKvAppend, ForcedVariantsGetTheirOwnTiles) {
  const DeviceCaps a100 = DeviceCaps::gpu(8, 0, 108);
  EXPECT_EQ(to_string(resolve_append(call(128, 4, DType::f16, 1, true), a100, AppendVariant::mma, "kv::append")),
            "mma 256x2 staged");
  EXPECT_EQ(to_string(resolve_append(call(128, 8, DType::f16, kPrefillTokens, true), a100, AppendVariant::fast, "op")),
            "fast C=8 K=4 G=4 128x5 staged");
  EXPECT_EQ(to_string(resolve_append(call(128, 4, DType::f16, kPrefillTokens, true), a100, AppendVariant::generic, "op")),
            "generic C=8 K=1 G=D/8 512x1");
  EXPECT_EQ(resolve_append(call(64, 8, DType::bf16, 3, true), a100, std::nullopt, "op"),
            choose_append(call(64, 8, DType::bf16, 3, true), a100));
}

// aligned: the base and every stride of x on min(16, chunk · element size) bytes; dense: x is a
// contiguous [seqs, tokens, heads, D].
TEST(ChooseKvAppend, LayoutFactsComeFromTheBaseAndStrides) {
  alignas(16) static uint16_t buffer[4 * 8 * 128 + 8];
  auto facts = [&](int dim, DType dt, int64_t offset, int64_t head_stride, int seqs = 1) {
    backend::AppendArgs a;
    a.x = buffer + offset;
    a.x_dtype = dt;
    a.seqs = seqs;
    a.tokens = 2;
    a.heads = 4;
    a.dim = dim;
    a.x_stride_head = head_stride;
    a.x_stride_tok = 4 * head_stride;
    a.x_stride_seq = seqs > 1 ? 2 * 4 * head_stride : 0;
    describe_layout(a);
    return std::pair(a.aligned, a.dense);
  };
  EXPECT_EQ(facts(128, DType::f16, 0, 128), std::pair(true, true));
  EXPECT_EQ(facts(128, DType::f16, 0, 128, 3), std::pair(true, true));
  EXPECT_EQ(facts(128, DType::f16, 0, 136), std::pair(true, false));  // heads padded by 16 bytes
  EXPECT_EQ(facts(128, DType::f16, 1, 128), std::pair(false, true));  // base 2 bytes into the buffer
  EXPECT_EQ(facts(128, DType::f16, 0, 132), std::pair(false, false));  // heads 264 bytes apart
  EXPECT_EQ(facts(4, DType::f16, 4, 4), std::pair(true, true));        // D = 4: chunks of 8 bytes
  EXPECT_EQ(facts(4, DType::f16, 2, 4), std::pair(false, true));
  EXPECT_EQ(facts(64, DType::f32, 4, 64), std::pair(false, true));  // 8 bytes: f32 chunks need 16
}

TEST(ChooseKvAppend, CpuCachesHaveNoKernelChoice) {
  Cache c({.num_kv_heads = 2, .head_dim = 64, .capacity = 8});
  const Tensor x = Tensor::zeros({1, 2, 64}, DType::f16);
  EXPECT_FALSE(c.append_choice(x).has_value());
  expect_error([&] { c.append(x, nullptr, {.variant = AppendVariant::fast}); }, ErrorCode::invalid_argument,
               {"[kv::append]", "forced fast", "CUDA cache"});
  expect_error([&] { c.append_choice(Tensor::zeros({1, 3, 64}, DType::f16)); }, ErrorCode::invalid_argument,
               {"[kv::append]", "shape"});
  EXPECT_EQ(c.write_pos(), 0);
}

}  // namespace
}  // namespace frugal::kv
