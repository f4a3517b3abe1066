// kv::Cache over storage someone else allocates (a framework's tensors): the checks that the
// tensors are the config's, then a Cache that holds them instead of allocating its own.
#include <climits>
#include <cstdint>

#include "core/kv_backend.h"
#include "core/validate.h"
#include "frugal/kv_cache.h"

namespace frugal::kv {

Cache Cache::wrap(const CacheConfig& config, CacheStorage storage, std::span<const int64_t> write_positions) {
  constexpr const char* op = "kv::Cache::wrap";
  validate(config, op);
  FRUGAL_CHECK(storage.packed.defined(), invalid_argument, op, "packed is missing");
  const Device device = storage.packed.device();
  detail::check_device_usable(device, op);
  const int64_t b = config.batch, h = config.num_kv_heads, cap = config.capacity;
  const int64_t levels = int64_t{1} << config.bits;
  detail::check_storage(storage.packed, op, "packed", DType::u8, {b, h, cap, config.head_dim * config.bits / 8}, device);
  detail::check_storage(storage.scales, op, "scales", scale_dtype(config.scale_format), {b, h, cap}, device);
  detail::check_storage(storage.centroids, op, "centroids", DType::f32, {levels}, device);
  detail::check_storage(storage.boundaries, op, "boundaries", DType::f32, {levels - 1}, device);
  if (config.sign_seed) {
    detail::check_storage(storage.signs, op, "signs", DType::f32, {config.head_dim}, device);
  } else {
    FRUGAL_CHECK(!storage.signs.defined(), invalid_argument, op,
                 "signs were given but the config has no sign seed (set one: its value is not read)");
  }
  if (config.exact_rows() > 0) {
    detail::check_storage(storage.exact, op, "exact", DType::f16, {b, h, config.exact_rows(), config.head_dim}, device);
    FRUGAL_CHECK(reinterpret_cast<uintptr_t>(storage.exact.data()) % 16 == 0, invalid_argument, op,
                 "exact must start on a 16-byte boundary");
  } else {
    FRUGAL_CHECK(!storage.exact.defined(), invalid_argument, op,
                 "exact rows were given but the config has no window or sinks");
  }
  FRUGAL_CHECK(write_positions.size() == static_cast<size_t>(b), invalid_argument, op,
               "write_positions must hold one entry per sequence (" << b << "), got " << write_positions.size());
  for (int s = 0; s < config.batch; ++s) {
    const int64_t w = write_positions[s];
    FRUGAL_CHECK(w >= 0, invalid_argument, op, "write_positions[" << s << "] = " << w << " is negative");
    FRUGAL_CHECK(config.sliding || w <= cap, out_of_range, op,
                 "write_positions[" << s << "] = " << w << " passes the global cache's capacity " << cap);
  }
  Cache c;
  c.config_ = config;
  c.packed_ = std::move(storage.packed);
  c.scales_ = std::move(storage.scales);
  c.signs_ = std::move(storage.signs);
  c.centroids_ = std::move(storage.centroids);
  c.boundaries_ = std::move(storage.boundaries);
  c.exact_ = std::move(storage.exact);
  // append's device copy of the start positions, only where it uses one (kv_cache.cpp's rule).
  if (device.is_cuda() && (config.batch > backend::kInlineStarts || cap > INT32_MAX))
    c.device_starts_ = Tensor::empty({b}, DType::i64, device);
  c.positions_.assign(write_positions.begin(), write_positions.end());
  return c;
}

}  // namespace frugal::kv
