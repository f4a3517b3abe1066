// The frugal Python extension (_frugal): the C++ API with Python names and keyword arguments.
// Arrays come in through DLPack without a copy; results go out as __dlpack__ objects that the
// Python layer (frugal/__init__.py) hands back in the caller's framework.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "frugal/frugal.h"
#include "frugal/kv_cache.h"
#include "interop.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace frugal::python {

void bind_spconv(nb::module_& m);
void bind_attention(nb::module_& m);
void bind_paged(nb::module_& m);

namespace {

// A sequence index checked before anything looks it up (kv::Cache::write_pos uses vector::at,
// whose std::out_of_range would surface as libstdc++'s message).
int checked_seq(const kv::Cache& c, int seq, const char* op) {
  FRUGAL_CHECK(seq >= 0 && seq < c.config().batch, out_of_range, op,
               "sequence " << seq << " does not exist; the cache holds " << c.config().batch);
  return seq;
}

}  // namespace

// The storage of a cache as writable arrays owned by `self` (a Python object holding the cache):
// what frugal.torch keeps tensors over. The positions are the host memory the cache reads them from.
nb::tuple cache_storage(nb::handle self) {
  kv::Cache& c = nb::cast<kv::Cache&>(self);
  const std::span<int64_t> pos = c.write_positions_memory();
  const TensorView positions(pos.data(), DType::i64, {static_cast<int64_t>(pos.size())});
  return nb::make_tuple(to_array(c.packed().view(), self), to_array(c.scales().view(), self),
                        c.signs().defined() ? nb::cast(to_array(c.signs().view(), self)) : nb::none(),
                        to_array(c.centroids().view(), self), to_array(c.boundaries().view(), self),
                        to_array(positions, self),
                        c.exact().defined() ? nb::cast(to_array(c.exact().view(), self)) : nb::none());
}

void bind_kv(nb::module_& m) {
  nb::enum_<kv::ScaleRule>(m, "ScaleRule", "How a quantized vector's scale is chosen.")
      .value("l2_norm", kv::ScaleRule::l2_norm, "the original format: the rotated vector's L2 norm")
      .value("least_squares", kv::ScaleRule::least_squares, "the least-squares scale: never a larger error");
  nb::enum_<kv::ScaleFormat>(m, "ScaleFormat", "How each vector's scale is stored.")
      .value("f32", kv::ScaleFormat::f32, "the original format")
      .value("f16", kv::ScaleFormat::f16, "the f16 rounding of the f32 scale: half its bytes (NaN past f16's range)");

  m.def(
      "lloyd_max_codebook",
      [](int bits) {
        const kv::Codebook& cb = kv::lloyd_max_codebook(bits);
        return nb::make_tuple(cb.centroids, cb.boundaries, cb.mse);
      },
      "bits"_a, "(centroids, boundaries, mse) of the Lloyd–Max quantizer of N(0,1) with 2**bits levels.");
  m.def("random_signs", &kv::random_signs, "seed"_a, "dim"_a, "The ±1 signs of the randomized Hadamard transform.");

  m.def(
      "hadamard_transform",
      [](InArray x, std::optional<nb::ndarray<>> out, std::optional<uintptr_t> stream) -> nb::object {
        constexpr const char* op = "kv::hadamard_transform";
        const TensorView xv = to_view(x, op, "x");
        if (out) {
          kv::hadamard_transform(xv, to_view(*out, op, "out"), to_stream(stream));
          return nb::none();
        }
        Tensor o = Tensor::empty(xv.sizes(), DType::f32, xv.device);
        kv::hadamard_transform(xv, o, to_stream(stream));
        return nb::cast(to_array(o));
      },
      "x"_a, "out"_a = nb::none(), "stream"_a = nb::none(),
      "FWHT(x) / sqrt(D) along the last dimension of an f32 [rows, D] array (D a power of two in [4, 4096]).\n"
      "Writes into `out` when given (it may alias x), else returns a new array.");

  nb::class_<kv::Cache>(m, "Cache",
                        "One layer's quantized K (or V) cache for a batch of sequences.\n"
                        "packed: [batch, heads, capacity, head_dim*bits/8] u8; scales: [batch, heads, capacity] f32 (f16 with\n"
                        "scale_format f16); "
                        "exact: [batch, heads, sinks + window, head_dim] f16 (the exact rows), or None.")
      .def(
          "__init__",
          [](kv::Cache* self, int batch, int num_kv_heads, int head_dim, int64_t capacity, bool sliding, int bits,
             kv::ScaleRule scale_rule, std::optional<uint64_t> sign_seed, kv::ScaleFormat scale_format, int window,
             int sinks, const std::string& device, std::optional<uintptr_t> stream) {
            kv::CacheConfig c;
            c.batch = batch;
            c.num_kv_heads = num_kv_heads;
            c.head_dim = head_dim;
            c.capacity = capacity;
            c.sliding = sliding;
            c.bits = bits;
            c.scale_rule = scale_rule;
            c.sign_seed = sign_seed;
            c.scale_format = scale_format;
            c.window = window;
            c.sinks = sinks;
            new (self) kv::Cache(c, parse_device(device), to_stream(stream));
          },
          nb::kw_only(), "batch"_a = 1, "num_kv_heads"_a, "head_dim"_a, "capacity"_a, "sliding"_a = false, "bits"_a = 4,
          "scale_rule"_a = kv::ScaleRule::l2_norm, "sign_seed"_a = nb::none(), "scale_format"_a = kv::ScaleFormat::f32,
          "window"_a = 0, "sinks"_a = 0, "device"_a = "cpu", "stream"_a = nb::none(),
          "scale_format: f32 (the original format) or f16 scales (scales is then an f16 array).\n"
          "window: the newest tokens of each sequence also kept in f16; sinks: its first tokens kept in f16\n"
          "(both at most capacity; attention and dequantize read those tokens' f16 values).")
      .def(
          "append",
          [](kv::Cache& c, InArray x, std::optional<int> seq, std::optional<uintptr_t> stream) {
            const TensorView xv = to_view(x, "kv::append", "x");
            if (seq) {
              c.append(*seq, xv, to_stream(stream));
            } else {
              c.append(xv, to_stream(stream));
            }
          },
          "x"_a, "seq"_a = nb::none(), "stream"_a = nb::none(),
          "Quantize x [T, H, D] (batch 1, or one sequence `seq`) or [batch, T, H, D] (f32|f16|bf16) at the\n"
          "write positions and advance them by T.")
      .def(
          "dequantize",
          [](const kv::Cache& c, int seq, int64_t begin, std::optional<int64_t> end, const std::string& dtype,
             std::optional<uintptr_t> stream) {
            constexpr const char* op = "kv::dequantize";
            const int64_t w = c.write_pos(checked_seq(c, seq, op));
            const int64_t e = end.value_or(w);
            // The range before the output is sized: a far end is an out_of_range, not an allocation.
            FRUGAL_CHECK(begin >= 0 && begin <= e, invalid_argument, op,
                         "bad token range [" << begin << ", " << e << ")");
            FRUGAL_CHECK(e <= w, out_of_range, op,
                         "token range [" << begin << ", " << e << ") passes write_pos " << w << " of sequence " << seq);
            return to_array(c.dequantize(seq, begin, e, parse_dtype(dtype), to_stream(stream)));
          },
          "seq"_a = 0, "begin"_a = 0, "end"_a = nb::none(), "dtype"_a = "f32", "stream"_a = nb::none(),
          "Tokens [begin, end) of sequence `seq` back as [end-begin, H, D] (end defaults to write_pos).")
      .def(
          "write_pos", [](const kv::Cache& c, int seq) { return c.write_pos(checked_seq(c, seq, "kv::write_pos")); },
          "seq"_a = 0)
      .def(
          "is_exact",
          [](const kv::Cache& c, int seq, int64_t t) {
            constexpr const char* op = "kv::is_exact";
            const int64_t w = c.write_pos(checked_seq(c, seq, op));
            FRUGAL_CHECK(t >= 0 && t < w, out_of_range, op,
                         "token " << t << " has not been written: sequence " << seq << " holds [0, " << w << ")");
            return c.is_exact(seq, t);
          },
          "seq"_a, "t"_a, "Whether token t (< write_pos) of sequence `seq` is read from an exact (f16) row.")
      .def(
          "first_held", [](const kv::Cache& c, int seq) { return c.first_held(checked_seq(c, seq, "kv::first_held")); },
          "seq"_a = 0)
      .def("reset", &kv::Cache::reset)
      .def(
          "to", [](const kv::Cache& c, const std::string& device) { return c.to(parse_device(device)); }, "device"_a)
      .def_prop_ro("device", [](const kv::Cache& c) { return to_string(c.device()); })
      .def_prop_ro("bytes_per_vector", &kv::Cache::bytes_per_vector)
      // Read-only views by default: a write there changes what dequantize and attention read,
      // behind the quantizer's back. writable_views() gives the same storage writable.
      .def_prop_ro("packed",
                   [](nb::handle self) { return to_readonly_array(nb::cast<kv::Cache&>(self).packed().view(), self); })
      .def_prop_ro("scales",
                   [](nb::handle self) { return to_readonly_array(nb::cast<kv::Cache&>(self).scales().view(), self); })
      .def_prop_ro("exact",
                   [](nb::handle self) -> nb::object {
                     const Tensor& e = nb::cast<kv::Cache&>(self).exact();
                     return e.defined() ? nb::cast(to_readonly_array(e.view(), self)) : nb::none();
                   })
      .def(
          "writable_views",
          [](nb::handle self) {
            const kv::Cache& c = nb::cast<kv::Cache&>(self);
            return nb::make_tuple(to_array(c.packed().view(), self), to_array(c.scales().view(), self));
          },
          "(packed, scales) as writable views of the cache's storage (what you write is what it holds).")
      .def_static(
          "_wrap",
          [](nb::ndarray<> packed, nb::ndarray<> scales, std::optional<nb::ndarray<>> signs, nb::ndarray<> centroids,
             nb::ndarray<> boundaries, InArray positions, bool sliding, kv::ScaleRule scale_rule,
             std::optional<nb::ndarray<>> exact, int window, int sinks) {
            constexpr const char* op = "kv::Cache::wrap";
            FRUGAL_CHECK(packed.ndim() == 4, invalid_argument, op,
                         "packed must be [batch, heads, capacity, row bytes], got rank " << packed.ndim());
            FRUGAL_CHECK(centroids.ndim() == 1, invalid_argument, op,
                         "centroids must be 1-D [2^bits], got rank " << centroids.ndim());
            kv::CacheConfig c;
            c.batch = static_cast<int>(packed.shape(0));
            c.num_kv_heads = static_cast<int>(packed.shape(1));
            c.capacity = static_cast<int64_t>(packed.shape(2));
            const PackedShape s = packed_shape(static_cast<int64_t>(packed.shape(3)),
                                               static_cast<int64_t>(centroids.shape(0)), op, "packed", "centroids");
            c.bits = s.bits;
            c.head_dim = s.head_dim;
            c.sliding = sliding;
            c.scale_rule = scale_rule;
            c.window = window;
            c.sinks = sinks;
            kv::CacheStorage st;
            st.packed = to_tensor(packed, op, "packed");
            st.scales = to_tensor(scales, op, "scales");
            // The scales' dtype says their format (the config then checks it against the shape).
            if (st.scales.dtype() == DType::f16) c.scale_format = kv::ScaleFormat::f16;
            if (signs) {
              c.sign_seed = 0;  // says "signs are used"; wrap reads their values from the storage
              st.signs = to_tensor(*signs, op, "signs");
            }
            st.centroids = to_tensor(centroids, op, "centroids");
            st.boundaries = to_tensor(boundaries, op, "boundaries");
            if (exact) st.exact = to_tensor(*exact, op, "exact");
            return kv::Cache::wrap(c, std::move(st), to_host_i64(positions, op, "positions"));
          },
          "packed"_a, "scales"_a, "signs"_a.none(), "centroids"_a, "boundaries"_a, "positions"_a, "sliding"_a,
          "scale_rule"_a, "exact"_a.none() = nb::none(), "window"_a = 0, "sinks"_a = 0,
          "A cache over these arrays (no copy; kept alive by it) from these write positions (host i64 [batch]):\n"
          "what frugal.torch's custom ops run on. Its positions are its own copy (see _storage). exact: the\n"
          "[batch, heads, sinks + window, head_dim] f16 rows (16-byte aligned) when window or sinks is set.")
      .def_prop_ro("_storage", &cache_storage,
                   "(packed, scales, signs or None, centroids, boundaries, positions, exact or None) as writable\n"
                   "views of the cache's memory; positions (host i64 [batch]) is where the cache keeps its write\n"
                   "positions.")
      .def_prop_ro("config", [](const kv::Cache& c) {
        const kv::CacheConfig& k = c.config();
        nb::dict d;
        d["batch"] = k.batch;
        d["num_kv_heads"] = k.num_kv_heads;
        d["head_dim"] = k.head_dim;
        d["capacity"] = k.capacity;
        d["sliding"] = k.sliding;
        d["bits"] = k.bits;
        d["scale_rule"] = k.scale_rule;
        d["sign_seed"] = k.sign_seed;
        d["scale_format"] = k.scale_format;
        d["window"] = k.window;
        d["sinks"] = k.sinks;
        return d;
      });
}

}  // namespace frugal::python

NB_MODULE(_frugal, m) {
  m.doc() = "frugal: fused, memory-frugal kernels for generative inference (C++ core)";
  nb::exception<frugal::Error>(m, "Error", PyExc_RuntimeError);
  m.def("built_with_cuda", &frugal::built_with_cuda);
  m.def("cuda_available", &frugal::cuda_available);
  m.def("device_name", [](const std::string& d) { return frugal::device_name(frugal::parse_device(d)); }, "device"_a);
  m.def("synchronize", [](const std::string& d) { frugal::synchronize(frugal::parse_device(d)); }, "device"_a = "cuda");
  frugal::python::bind_kv(m);
  frugal::python::bind_spconv(m);
  frugal::python::bind_attention(m);
  frugal::python::bind_paged(m);
}
