// Caches over storage someone else allocates (Tensor::wrap, kv::Cache::wrap): a wrapped cache reads
// and writes exactly that memory, gives the owning cache's bytes and numbers, and refuses storage
// that is not its config's.
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "frugal/attention.h"
#include "frugal/kv_cache.h"
#include "testing.h"

namespace frugal::kv {
namespace {

using testing::expect_error;
using testing::test_seed;

TEST(TensorWrap, HoldsTheOwnerAsLongAsAnyCopy) {
  auto memory = std::make_shared<std::vector<float>>(12, 1.5f);
  std::weak_ptr<std::vector<float>> watch = memory;
  Tensor t = Tensor::wrap(TensorView(memory->data(), DType::f32, {3, 4}), memory);
  memory.reset();
  Tensor copy = t;
  t = Tensor();
  EXPECT_FALSE(watch.expired());
  EXPECT_EQ(copy.data_as<float>()[11], 1.5f);
  EXPECT_EQ(copy.size(1), 4);
  copy = Tensor();
  EXPECT_TRUE(watch.expired());
}

TEST(TensorWrap, RefusesAStridedView) {
  std::vector<float> m(12);
  const int64_t shape[] = {3, 2}, strides[] = {4, 2};
  expect_error([&] { Tensor::wrap(TensorView(m.data(), DType::f32, shape, strides, Device::cpu())); },
               ErrorCode::invalid_argument, {"[Tensor::wrap]", "contiguous"});
}

CacheStorage storage_of(const Cache& c) {
  return {c.packed(), c.scales(), c.signs(), c.centroids(), c.boundaries()};
}

// A fresh copy of a cache's storage in memory the cache does not own.
CacheStorage copy_of(const Cache& c) {
  const auto dup = [](const Tensor& t) { return t.defined() ? t.to(t.device()) : Tensor(); };
  return {dup(c.packed()), dup(c.scales()), dup(c.signs()), dup(c.centroids()), dup(c.boundaries())};
}

TEST(CacheWrap, WritesTheForeignMemoryWithTheOwningCachesBytesAndAttendsAlike) {
  FRUGAL_TRACE_SEED();
  std::mt19937_64 rng(test_seed());
  CacheConfig cfg;
  cfg.batch = 2;
  cfg.num_kv_heads = 2;
  cfg.head_dim = 64;
  cfg.capacity = 32;
  cfg.sign_seed = 7;
  Cache owned(cfg);
  CacheStorage foreign = copy_of(owned);
  const Tensor foreign_packed = foreign.packed;
  Cache wrapped = Cache::wrap(cfg, foreign, owned.write_positions());
  const Tensor x = testing::host_tensor(testing::randn(2 * 5 * 2 * 64, rng), {2, 5, 2, 64});
  owned.append(x);
  wrapped.append(x);
  EXPECT_EQ(wrapped.write_pos(1), 5);
  EXPECT_EQ(wrapped.packed().data(), foreign_packed.data());
  EXPECT_EQ(std::memcmp(owned.packed().data(), foreign_packed.data(), owned.packed().nbytes()), 0);

  Cache v(cfg);
  v.append(x);
  const Tensor q = testing::host_tensor(testing::randn(2 * 4 * 64, rng), {2, 4, 64});
  const Tensor a = attention::decode_attention(q, owned, v);
  const Tensor b = attention::decode_attention(q, wrapped, Cache::wrap(cfg, storage_of(v), v.write_positions()));
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0);
}

TEST(CacheWrap, RefusesStorageThatIsNotTheConfigs) {
  CacheConfig cfg;
  cfg.batch = 2;
  cfg.num_kv_heads = 2;
  cfg.head_dim = 32;
  cfg.capacity = 8;
  const Cache owned(cfg);
  const std::vector<int64_t> zero = {0, 0};
  CacheStorage s = storage_of(owned);
  s.scales = Tensor::empty({2, 2, 9}, DType::f32);
  expect_error([&] { Cache::wrap(cfg, s, zero); }, ErrorCode::invalid_argument,
               {"[kv::Cache::wrap]", "scales must have shape [2, 2, 8], got [2, 2, 9]"});
  s = storage_of(owned);
  s.centroids = Tensor();
  expect_error([&] { Cache::wrap(cfg, s, zero); }, ErrorCode::invalid_argument, {"centroids is missing"});
  s = storage_of(owned);
  s.signs = Tensor::empty({32}, DType::f32);
  expect_error([&] { Cache::wrap(cfg, s, zero); }, ErrorCode::invalid_argument, {"signs were given"});
  s = storage_of(owned);
  s.packed = Tensor::empty({2, 2, 8, 16}, DType::f32);
  expect_error([&] { Cache::wrap(cfg, s, zero); }, ErrorCode::invalid_argument, {"packed must have dtype u8"});
  s = storage_of(owned);
  const std::vector<int64_t> past = {0, 9}, negative = {-1, 0}, short_ = {0};
  expect_error([&] { Cache::wrap(cfg, s, past); }, ErrorCode::out_of_range,
               {"write_positions[1] = 9 passes the global cache's capacity 8"});
  expect_error([&] { Cache::wrap(cfg, s, negative); }, ErrorCode::invalid_argument, {"is negative"});
  expect_error([&] { Cache::wrap(cfg, s, short_); }, ErrorCode::invalid_argument, {"one entry per sequence (2), got 1"});
  cfg.sliding = true;  // a ring's positions run past its capacity
  EXPECT_EQ(Cache::wrap(cfg, s, past).first_held(1), 1);
}

TEST(CacheWrap, PositionMemoryIsWhatTheCacheReads) {
  CacheConfig cfg;
  cfg.num_kv_heads = 1;
  cfg.head_dim = 16;
  cfg.capacity = 4;
  Cache c(cfg);
  c.write_positions_memory()[0] = 3;
  EXPECT_EQ(c.write_pos(0), 3);
  c.append(Tensor::zeros({1, 1, 16}, DType::f32));
  EXPECT_EQ(c.write_positions_memory()[0], 4);
}

}  // namespace
}  // namespace frugal::kv
