// kv::PagedCache over pools someone else allocates (a framework's tensors): the checks that the
// tensors are the config's, then a cache that holds them instead of allocating its own.
#include "core/validate.h"
#include "frugal/paged_cache.h"

namespace frugal::kv {

PagedCache PagedCache::wrap(const PagedConfig& config, PagedStorage storage) {
  constexpr const char* op = "kv::PagedCache::wrap";
  validate(config, op);
  FRUGAL_CHECK(storage.k_packed.defined(), invalid_argument, op, "k_packed is missing");
  const Device device = storage.k_packed.device();
  detail::check_device_usable(device, op);
  const int64_t h = config.num_kv_heads, slots = config.num_pages * config.page_size, d = config.head_dim;
  const auto check_pool = [&](const Tensor& packed, const Tensor& scales, const Tensor& signs,
                              const Tensor& centroids, const Tensor& boundaries, int bits,
                              const std::optional<uint64_t>& seed, const char* side) {
    const std::string p = std::string(side) + "_";
    const int64_t levels = int64_t{1} << bits;
    detail::check_storage(packed, op, (p + "packed").c_str(), DType::u8, {h, slots, d * bits / 8}, device);
    detail::check_storage(scales, op, (p + "scales").c_str(), DType::f32, {h, slots}, device);
    detail::check_storage(centroids, op, (p + "centroids").c_str(), DType::f32, {levels}, device);
    detail::check_storage(boundaries, op, (p + "boundaries").c_str(), DType::f32, {levels - 1}, device);
    if (seed) {
      detail::check_storage(signs, op, (p + "signs").c_str(), DType::f32, {d}, device);
    } else {
      FRUGAL_CHECK(!signs.defined(), invalid_argument, op,
                   p << "signs were given but the config has no " << side
                     << "_sign_seed (set one: its value is not read)");
    }
  };
  check_pool(storage.k_packed, storage.k_scales, storage.k_signs, storage.k_centroids, storage.k_boundaries,
             config.k_bits, config.k_sign_seed, "k");
  check_pool(storage.v_packed, storage.v_scales, storage.v_signs, storage.v_centroids, storage.v_boundaries,
             config.v_bits, config.v_sign_seed, "v");
  PagedCache c;
  c.config_ = config;
  c.k_packed_ = std::move(storage.k_packed);
  c.k_scales_ = std::move(storage.k_scales);
  c.v_packed_ = std::move(storage.v_packed);
  c.v_scales_ = std::move(storage.v_scales);
  c.k_signs_ = std::move(storage.k_signs);
  c.v_signs_ = std::move(storage.v_signs);
  c.k_centroids_ = std::move(storage.k_centroids);
  c.k_boundaries_ = std::move(storage.k_boundaries);
  c.v_centroids_ = std::move(storage.v_centroids);
  c.v_boundaries_ = std::move(storage.v_boundaries);
  return c;
}

}  // namespace frugal::kv
