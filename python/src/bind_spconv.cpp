// Python binding of the sparse voxel convolution (frugal/sparse_conv.h).
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/vector.h>

#include "frugal/sparse_conv.h"
#include "interop.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace frugal::python {

void bind_spconv(nb::module_& m) {
  nb::module_ s = m.def_submodule("spconv", "Submanifold sparse voxel convolution");
  nb::enum_<spconv::OffsetOrder>(s, "OffsetOrder")
      .value("x_slowest", spconv::OffsetOrder::x_slowest, "frugal's order (and spconv 2.x's)")
      .value("x_fastest", spconv::OffsetOrder::x_fastest, "the reverse axis order");

  s.def(
      "build_kernel_map",
      [](nb::ndarray<> coords, int kernel_size, int dilation, std::optional<nb::ndarray<>> out,
         std::optional<uintptr_t> stream) -> nb::object {
        constexpr const char* op = "spconv::build_kernel_map";
        const TensorView c = to_view(coords, op, "coords");
        if (out) {
          spconv::build_kernel_map(c, to_view(*out, op, "out"), kernel_size, dilation, to_stream(stream));
          return nb::none();
        }
        return nb::cast(to_array(spconv::build_kernel_map(c, kernel_size, dilation, to_stream(stream))));
      },
      "coords"_a, "kernel_size"_a = 3, "dilation"_a = 1, "out"_a = nb::none(), "stream"_a = nb::none(),
      "The kernel map nbr [K, N] int32 of coords [N, 4] int32 rows (b, x, y, z); sentinel N for no neighbor.\n"
      "Offset k = (i*ks + j)*ks + l for (dx, dy, dz) = ((i, j, l) - ks//2) * dilation (dx slowest).");

  s.def(
      "submanifold_conv",
      [](nb::ndarray<> feats, nb::ndarray<> nbr, nb::ndarray<> weight, std::optional<nb::ndarray<>> bias,
         std::optional<nb::ndarray<>> out, bool checked, std::optional<uintptr_t> stream) -> nb::object {
        constexpr const char* op = "spconv::submanifold_conv";
        const TensorView f = to_view(feats, op, "feats"), n = to_view(nbr, op, "nbr"), w = to_view(weight, op, "weight");
        TensorView b;
        if (bias) b = to_view(*bias, op, "bias");
        const auto check = checked ? spconv::MapCheck::checked : spconv::MapCheck::unchecked;
        if (out) {
          spconv::submanifold_conv(f, n, w, bias ? &b : nullptr, to_view(*out, op, "out"), to_stream(stream), check);
          return nb::none();
        }
        return nb::cast(to_array(spconv::submanifold_conv(f, n, w, bias ? &b : nullptr, to_stream(stream), check)));
      },
      "feats"_a, "nbr"_a, "weight"_a, "bias"_a = nb::none(), "out"_a = nb::none(), "checked"_a = true,
      "stream"_a = nb::none(),
      "out[n, co] = bias[co] + sum_k sum_ci feats[nbr[k, n], ci] * weight[k, ci, co].\n"
      "feats [N, Ci] (or [N+1, Ci] padded), weight [K, Ci, Co], bias [Co]: f32 | f16 | bf16; out [N, Co].");

  s.def("kernel_offset", &spconv::kernel_offset, "k"_a, "kernel_size"_a, "dilation"_a = 1);
  s.def("offset_permutation", &spconv::offset_permutation, "other"_a, "kernel_size"_a,
        "perm[k_other] = k_frugal for another library's offset order.");
}

}  // namespace frugal::python
