// Python binding of decode attention over the packed KV cache (frugal/attention.h).
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "frugal/attention.h"
#include "interop.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace frugal::python {

void bind_attention(nb::module_& m) {
  m.def(
      "decode_attention",
      [](InArray q, const kv::Cache& k, const kv::Cache& v, std::optional<nb::ndarray<>> out,
         std::optional<float> softmax_scale, std::optional<std::vector<int64_t>> lengths, const std::string& math,
         int num_splits, std::optional<uintptr_t> stream) -> nb::object {
        constexpr const char* op = "attention::decode_attention";
        attention::DecodeOptions o;
        o.softmax_scale = softmax_scale;
        // C++ takes an empty span for "every held token"; from Python that is None, and [] is a
        // list with no entry for any sequence.
        FRUGAL_CHECK(!lengths || !lengths->empty(), invalid_argument, op,
                     "lengths must hold one entry per sequence (" << k.config().batch
                                                                  << "), got 0; pass None for every held token");
        if (lengths) o.lengths = *lengths;
        o.math = parse_math(math, op);
        o.num_splits = num_splits;
        const TensorView qv = to_view(q, op, "q");
        if (out) {
          attention::decode_attention(qv, k, v, to_view(*out, op, "out"), o, to_stream(stream));
          return nb::none();
        }
        return nb::cast(to_array(attention::decode_attention(qv, k, v, o, to_stream(stream))));
      },
      "q"_a, "k"_a, "v"_a, "out"_a = nb::none(), "softmax_scale"_a = nb::none(), "lengths"_a = nb::none(),
      "math"_a = "auto", "num_splits"_a = 0, "stream"_a = nb::none(),
      "One query token per sequence over the packed K and V caches: q [B, Hq, D] (f32|f16|bf16) -> [B, Hq, D].\n"
      "GQA when Hq is a multiple of the caches' heads. lengths: tokens per sequence (default: all held).\n"
      "math: 'auto' (tensor cores for f16/bf16 q on a GPU), 'f32' or 'f16'.");
}

}  // namespace frugal::python
