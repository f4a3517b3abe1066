// Python binding of the paged KV cache and the attention over it (frugal/paged_cache.h,
// frugal/paged_attention.h). A page table comes in as three host int32 arrays, FlashInfer's
// indptr / indices / last_page_len; results are allocated here only where no out= array is given.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <string>

#include "frugal/paged_attention.h"
#include "frugal/paged_cache.h"
#include "interop.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace frugal::python {

namespace {

using attention::PagedOptions;
using attention::PagedPlan;
using kv::PagedCache;
using kv::PagedConfig;

kv::PageTable to_table(const InArray& indptr, const InArray& indices, const InArray& last_page_len, const char* op) {
  return {to_host_i32(indptr, op, "indptr"), to_host_i32(indices, op, "indices"),
          to_host_i32(last_page_len, op, "last_page_len")};
}

attention::PagedBatch to_batch(const InArray& qo_indptr, const kv::PageTable& pages, const char* op) {
  return {to_host_i32(qo_indptr, op, "qo_indptr"), pages};
}

nb::dict config_dict(const PagedConfig& k) {
  nb::dict d;
  d["num_kv_heads"] = k.num_kv_heads;
  d["head_dim"] = k.head_dim;
  d["page_size"] = k.page_size;
  d["num_pages"] = k.num_pages;
  d["k_bits"] = k.k_bits;
  d["v_bits"] = k.v_bits;
  d["scale_rule"] = k.scale_rule;
  d["k_sign_seed"] = k.k_sign_seed;
  d["v_sign_seed"] = k.v_sign_seed;
  return d;
}

// (k, v) tokens [begin, end) of sequence `seq` (end defaults to its length), checked before the
// outputs are sized: a far end is an out_of_range, not an allocation.
nb::tuple dequantize(const PagedCache& c, const kv::PageTable& table, int seq, int64_t begin,
                     std::optional<int64_t> end, const std::string& dtype, Stream stream) {
  constexpr const char* op = "kv::PagedCache::dequantize";
  const std::vector<int64_t> lengths = kv::sequence_lengths(table, c.config(), op);
  FRUGAL_CHECK(seq >= 0 && seq < table.batch(), out_of_range, op,
               "sequence " << seq << " does not exist; the page table holds " << table.batch());
  const int64_t e = end.value_or(lengths[seq]);
  FRUGAL_CHECK(begin >= 0 && begin <= e, invalid_argument, op, "bad token range [" << begin << ", " << e << ")");
  FRUGAL_CHECK(
      e <= lengths[seq], out_of_range, op,
      "token range [" << begin << ", " << e << ") passes the " << lengths[seq] << " tokens of sequence " << seq);
  const PagedConfig& k = c.config();
  const DType t = parse_dtype(dtype);
  Tensor ko = Tensor::empty({e - begin, k.num_kv_heads, k.head_dim}, t, c.device());
  Tensor vo = Tensor::empty({e - begin, k.num_kv_heads, k.head_dim}, t, c.device());
  c.dequantize(table, seq, begin, e, ko, vo, stream);
  return nb::make_tuple(to_array(ko), to_array(vo));
}

// The storage of a cache as writable arrays owned by `self` (a Python object holding the cache).
nb::tuple paged_storage(nb::handle self) {
  const PagedCache& c = nb::cast<PagedCache&>(self);
  const auto opt = [&](const Tensor& t) { return t.defined() ? nb::cast(to_array(t.view(), self)) : nb::none(); };
  return nb::make_tuple(to_array(c.k_packed().view(), self), to_array(c.k_scales().view(), self),
                        to_array(c.v_packed().view(), self), to_array(c.v_scales().view(), self), opt(c.k_signs()),
                        opt(c.v_signs()), to_array(c.k_centroids().view(), self),
                        to_array(c.k_boundaries().view(), self), to_array(c.v_centroids().view(), self),
                        to_array(c.v_boundaries().view(), self));
}

// A cache over these arrays; the config is read off their shapes (heads and slots from k_packed, the
// widths from the codebooks, head_dim from the K rows), and kv::PagedCache::wrap checks the rest.
PagedCache wrap_storage(nb::ndarray<> k_packed, nb::ndarray<> k_scales, nb::ndarray<> v_packed, nb::ndarray<> v_scales,
                        std::optional<nb::ndarray<>> k_signs, std::optional<nb::ndarray<>> v_signs,
                        nb::ndarray<> k_centroids, nb::ndarray<> k_boundaries, nb::ndarray<> v_centroids,
                        nb::ndarray<> v_boundaries, int page_size, kv::ScaleRule scale_rule) {
  constexpr const char* op = "kv::PagedCache::wrap";
  FRUGAL_CHECK(k_packed.ndim() == 3, invalid_argument, op,
               "k_packed must be [heads, slots, row bytes], got rank " << k_packed.ndim());
  FRUGAL_CHECK(k_centroids.ndim() == 1 && v_centroids.ndim() == 1, invalid_argument, op,
               "k_centroids and v_centroids must be 1-D [2^bits], got ranks " << k_centroids.ndim() << " and "
                                                                              << v_centroids.ndim());
  const int64_t slots = static_cast<int64_t>(k_packed.shape(1));
  FRUGAL_CHECK(page_size > 0 && slots % page_size == 0, invalid_argument, op,
               "k_packed holds " << slots << " slots, which are not whole pages of page_size " << page_size);
  const PackedShape ks = packed_shape(static_cast<int64_t>(k_packed.shape(2)),
                                      static_cast<int64_t>(k_centroids.shape(0)), op, "k_packed", "k_centroids");
  PagedConfig c;
  c.num_kv_heads = static_cast<int>(k_packed.shape(0));
  c.head_dim = ks.head_dim;
  c.page_size = page_size;
  c.num_pages = slots / page_size;
  c.k_bits = ks.bits;
  c.v_bits = bits_of_levels(static_cast<int64_t>(v_centroids.shape(0)));
  c.scale_rule = scale_rule;
  kv::PagedStorage st;
  st.k_packed = to_tensor(k_packed, op, "k_packed");
  st.k_scales = to_tensor(k_scales, op, "k_scales");
  st.v_packed = to_tensor(v_packed, op, "v_packed");
  st.v_scales = to_tensor(v_scales, op, "v_scales");
  if (k_signs) {
    c.k_sign_seed = 0;  // says "signs are used"; wrap reads their values from the storage
    st.k_signs = to_tensor(*k_signs, op, "k_signs");
  }
  if (v_signs) {
    c.v_sign_seed = 0;
    st.v_signs = to_tensor(*v_signs, op, "v_signs");
  }
  st.k_centroids = to_tensor(k_centroids, op, "k_centroids");
  st.k_boundaries = to_tensor(k_boundaries, op, "k_boundaries");
  st.v_centroids = to_tensor(v_centroids, op, "v_centroids");
  st.v_boundaries = to_tensor(v_boundaries, op, "v_boundaries");
  return PagedCache::wrap(c, std::move(st));
}

// Runs `call(q, out, lse)` of a paged attention, allocating out [total_q, Hq, D] (q's dtype) and,
// with return_lse, lse [total_q, Hq] f32 where no array is given; returns (out, lse), each None
// where the caller gave it (or, for lse, did not ask for it).
template <typename Call>
nb::tuple attend(const InArray& q, std::optional<nb::ndarray<>> out, std::optional<nb::ndarray<>> lse, bool return_lse,
                 const char* op, Call&& call) {
  const TensorView qv = to_view(q, op, "q");
  FRUGAL_CHECK(qv.rank == 3, invalid_argument, op, "q must be [total_q, Hq, D], got " << qv.describe());
  Tensor new_out, new_lse;
  TensorView ov, lv;
  if (out) {
    ov = to_view(*out, op, "out");
  } else {
    new_out = Tensor::empty(qv.sizes(), qv.dtype, qv.device);
    ov = new_out.view();
  }
  if (lse) {
    lv = to_view(*lse, op, "lse");
  } else if (return_lse) {
    new_lse = Tensor::empty({qv.size(0), qv.size(1)}, DType::f32, qv.device);
    lv = new_lse.view();
  }
  call(qv, ov, lv);
  const auto result = [](const Tensor& t) { return t.defined() ? nb::cast(to_array(t)) : nb::none(); };
  return nb::make_tuple(result(new_out), result(new_lse));
}

constexpr const char* kAttendDoc =
    "q [total_q, Hq, D] (f32|f16|bf16) over the cache -> (out, lse): out [total_q, Hq, D] (q's dtype, or the\n"
    "given out, which may be f32), lse [total_q, Hq] f32 (natural log) when asked for. Either is None\n"
    "where the caller gave the array (or, for lse, did not ask for it).";

}  // namespace

void bind_paged(nb::module_& m) {
  nb::class_<PagedConfig>(m, "PagedConfig", "A paged cache's shape: heads, head_dim, page size, pool size, bit widths.")
      .def(
          "__init__",
          [](PagedConfig* self, int num_kv_heads, int head_dim, int64_t num_pages, int page_size, int k_bits,
             int v_bits, kv::ScaleRule scale_rule, std::optional<uint64_t> k_sign_seed,
             std::optional<uint64_t> v_sign_seed) {
            new (self) PagedConfig{num_kv_heads, head_dim,   page_size,   num_pages,  k_bits,
                                   v_bits,       scale_rule, k_sign_seed, v_sign_seed};
          },
          nb::kw_only(), "num_kv_heads"_a, "head_dim"_a, "num_pages"_a, "page_size"_a = 16, "k_bits"_a = 4,
          "v_bits"_a = 4, "scale_rule"_a = kv::ScaleRule::l2_norm, "k_sign_seed"_a = nb::none(),
          "v_sign_seed"_a = nb::none())
      .def_rw("num_kv_heads", &PagedConfig::num_kv_heads)
      .def_rw("head_dim", &PagedConfig::head_dim)
      .def_rw("page_size", &PagedConfig::page_size)
      .def_rw("num_pages", &PagedConfig::num_pages)
      .def_rw("k_bits", &PagedConfig::k_bits)
      .def_rw("v_bits", &PagedConfig::v_bits)
      .def_rw("scale_rule", &PagedConfig::scale_rule)
      .def_rw("k_sign_seed", &PagedConfig::k_sign_seed)
      .def_rw("v_sign_seed", &PagedConfig::v_sign_seed)
      .def("_asdict", &config_dict);
  m.attr("PAGED_FORMAT_VERSION") = kv::kPagedFormatVersion;

  nb::class_<PagedCache> cache(
      m, "PagedCache",
      "One layer's quantized K and V in a pool of pages (frugal/paged_cache.h).\n"
      "k_packed [Hkv, slots, D*k_bits/8] u8, k_scales [Hkv, slots] f32 (v_ alike); slot = page*page_size + offset.");
  cache
      .def(
          "__init__",
          [](PagedCache* self, const PagedConfig& config, const std::string& device, std::optional<uintptr_t> stream) {
            new (self) PagedCache(config, parse_device(device), to_stream(stream));
          },
          "config"_a, "device"_a = "cpu", "stream"_a = nb::none())
      .def(
          "append",
          [](PagedCache& c, InArray k, InArray v, InArray new_indptr, InArray indptr, InArray indices,
             InArray last_page_len, std::optional<uintptr_t> stream) {
            constexpr const char* op = "kv::PagedCache::append";
            c.append(to_view(k, op, "k"), to_view(v, op, "v"), to_host_i32(new_indptr, op, "new_indptr"),
                     to_table(indptr, indices, last_page_len, op), to_stream(stream));
          },
          "k"_a, "v"_a, "new_indptr"_a, "indptr"_a, "indices"_a, "last_page_len"_a, "stream"_a = nb::none(),
          "Quantize k, v [T, Hkv, D] (f32|f16|bf16) into the pages: rows new_indptr[b]..new_indptr[b+1] are the\n"
          "newest tokens of sequence b, whose table (indptr/indices/last_page_len, host int32) holds the lengths\n"
          "after the append. A refused call writes nothing.")
      .def(
          "dequantize",
          [](const PagedCache& c, InArray indptr, InArray indices, InArray last_page_len, int seq, int64_t begin,
             std::optional<int64_t> end, const std::string& dtype, std::optional<uintptr_t> stream) {
            return dequantize(c, to_table(indptr, indices, last_page_len, "kv::PagedCache::dequantize"), seq, begin,
                              end, dtype, to_stream(stream));
          },
          "indptr"_a, "indices"_a, "last_page_len"_a, "seq"_a, "begin"_a = 0, "end"_a = nb::none(), "dtype"_a = "f32",
          "stream"_a = nb::none(),
          "(k, v): tokens [begin, end) of sequence `seq` of the table as [end-begin, Hkv, D] (end: its length).")
      .def_prop_ro("config", [](const PagedCache& c) { return c.config(); })
      .def_prop_ro("device", [](const PagedCache& c) { return to_string(c.device()); })
      .def_prop_ro("slots", &PagedCache::slots)
      .def_prop_ro("_storage", &paged_storage,
                   "(k_packed, k_scales, v_packed, v_scales, k_signs or None, v_signs or None, k_centroids,\n"
                   "k_boundaries, v_centroids, v_boundaries) as writable views of the cache's memory.")
      .def_static("_wrap", &wrap_storage, "k_packed"_a, "k_scales"_a, "v_packed"_a, "v_scales"_a, "k_signs"_a.none(),
                  "v_signs"_a.none(), "k_centroids"_a, "k_boundaries"_a, "v_centroids"_a, "v_boundaries"_a,
                  "page_size"_a, "scale_rule"_a,
                  "A cache over these arrays (no copy; kept alive by it), in the order of _storage.");
  // The pools as read-only views by default, as kv.Cache's; _storage gives the same memory writable.
  using Pool = const Tensor& (PagedCache::*)() const;
  for (auto [name, pool] : {std::pair<const char*, Pool>{"k_packed", &PagedCache::k_packed},
                            {"k_scales", &PagedCache::k_scales},
                            {"v_packed", &PagedCache::v_packed},
                            {"v_scales", &PagedCache::v_scales}})
    cache.def_prop_ro(name, [pool](nb::handle self) {
      return to_readonly_array((nb::cast<PagedCache&>(self).*pool)().view(), self);
    });

  nb::enum_<attention::PagedVariant>(m, "PagedVariant", "The kernels of paged attention.")
      .value("cpu", attention::PagedVariant::cpu, "the CPU loop (f32)")
      .value("rows_f32", attention::PagedVariant::rows_f32, "the exact SIMT kernel, one work item per query row")
      .value("rows_f16", attention::PagedVariant::rows_f16, "the tensor-core decode kernel over pages")
      .value("tiles_f16", attention::PagedVariant::tiles_f16, "the tensor-core tiled kernel (several query tokens)");

  nb::class_<attention::PagedChoice>(m, "PagedChoice", "What serves a plan: the row and tile kernels and the splits.")
      .def_ro("rows", &attention::PagedChoice::rows)
      .def_ro("tiles", &attention::PagedChoice::tiles)
      .def_ro("splits", &attention::PagedChoice::splits)
      .def_ro("tokens_per_split", &attention::PagedChoice::tokens_per_split)
      .def("__eq__", [](const attention::PagedChoice& a, const attention::PagedChoice& b) { return a == b; })
      .def("__str__", [](const attention::PagedChoice& c) { return attention::to_string(c); })
      .def("__repr__", [](const attention::PagedChoice& c) { return "PagedChoice(" + attention::to_string(c) + ")"; });

  nb::class_<PagedOptions>(m, "PagedOptions", "Paged attention's options (frugal/paged_attention.h).")
      .def(
          "__init__",
          [](PagedOptions* self, std::optional<float> softmax_scale, bool causal, int64_t window_left,
             const std::string& math, int num_splits, std::optional<attention::PagedVariant> rows,
             std::optional<attention::PagedVariant> tiles, int64_t max_kv_len) {
            new (self) PagedOptions{softmax_scale, causal, window_left, parse_math(math, "attention::PagedOptions"),
                                    num_splits,    rows,   tiles,       max_kv_len};
          },
          nb::kw_only(), "softmax_scale"_a = nb::none(), "causal"_a = true, "window_left"_a = -1, "math"_a = "auto",
          "num_splits"_a = 0, "rows"_a = nb::none(), "tiles"_a = nb::none(), "max_kv_len"_a = 0)
      .def_ro("softmax_scale", &PagedOptions::softmax_scale)
      .def_ro("causal", &PagedOptions::causal)
      .def_ro("window_left", &PagedOptions::window_left)
      .def_ro("num_splits", &PagedOptions::num_splits)
      .def_ro("max_kv_len", &PagedOptions::max_kv_len);

  nb::class_<PagedPlan>(
      m, "PagedPlan",
      "Paged attention planned once for a batch description (frugal/paged_attention.h):\n"
      "run() does no host synchronization and no allocation; update() takes a new batch of the same shape class.")
      .def(
          "__init__",
          [](PagedPlan* self, const PagedCache& cache, int q_heads, const std::string& q_dtype, InArray qo_indptr,
             InArray indptr, InArray indices, InArray last_page_len, const PagedOptions& options,
             std::optional<uintptr_t> stream) {
            constexpr const char* op = "attention::PagedPlan";
            const kv::PageTable table = to_table(indptr, indices, last_page_len, op);
            new (self) PagedPlan(cache, q_heads, parse_dtype(q_dtype), to_batch(qo_indptr, table, op), options,
                                 to_stream(stream));
          },
          "cache"_a, "q_heads"_a, "q_dtype"_a, "qo_indptr"_a, "indptr"_a, "indices"_a, "last_page_len"_a,
          "options"_a = PagedOptions{}, "stream"_a = nb::none())
      .def(
          "update",
          [](PagedPlan& p, InArray qo_indptr, InArray indptr, InArray indices, InArray last_page_len,
             std::optional<uintptr_t> stream) {
            constexpr const char* op = "attention::PagedPlan::update";
            const kv::PageTable table = to_table(indptr, indices, last_page_len, op);
            p.update(to_batch(qo_indptr, table, op), to_stream(stream));
          },
          "qo_indptr"_a, "indptr"_a, "indices"_a, "last_page_len"_a, "stream"_a = nb::none(),
          "A new batch into the plan's buffers; refused, changing nothing, when it outgrows the plan.")
      .def(
          "run",
          [](const PagedPlan& p, InArray q, const PagedCache& cache, std::optional<nb::ndarray<>> out,
             std::optional<nb::ndarray<>> lse, bool return_lse, std::optional<uintptr_t> stream) {
            return attend(q, out, lse, return_lse, "attention::PagedPlan::run",
                          [&](const TensorView& qv, const TensorView& ov, const TensorView& lv) {
                            p.run(qv, cache, ov, lv, to_stream(stream));
                          });
          },
          "q"_a, "cache"_a, "out"_a = nb::none(), "lse"_a = nb::none(), "return_lse"_a = false, "stream"_a = nb::none(),
          kAttendDoc)
      .def_prop_ro("choice", &PagedPlan::choice)
      .def_prop_ro("batch", &PagedPlan::batch)
      .def_prop_ro("total_q", &PagedPlan::total_q)
      .def_prop_ro("workspace_bytes", &PagedPlan::workspace_bytes);

  m.def(
      "paged_attention",
      [](InArray q, const PagedCache& cache, InArray qo_indptr, InArray indptr, InArray indices, InArray last_page_len,
         std::optional<nb::ndarray<>> out, std::optional<nb::ndarray<>> lse, bool return_lse,
         const PagedOptions& options, std::optional<uintptr_t> stream) {
        constexpr const char* op = "attention::paged_attention";
        const kv::PageTable table = to_table(indptr, indices, last_page_len, op);
        const attention::PagedBatch batch = to_batch(qo_indptr, table, op);
        return attend(q, out, lse, return_lse, op,
                      [&](const TensorView& qv, const TensorView& ov, const TensorView& lv) {
                        attention::paged_attention(qv, cache, batch, ov, lv, options, to_stream(stream));
                      });
      },
      "q"_a, "cache"_a, "qo_indptr"_a, "indptr"_a, "indices"_a, "last_page_len"_a, "out"_a = nb::none(),
      "lse"_a = nb::none(), "return_lse"_a = false, "options"_a = PagedOptions{}, "stream"_a = nb::none(),
      "Plan and run in one call (allocates the plan's buffers): q's rows qo_indptr[b]..qo_indptr[b+1] are the\n"
      "newest tokens of sequence b of the table. Returns (out, lse) as PagedPlan.run.");
}

}  // namespace frugal::python
