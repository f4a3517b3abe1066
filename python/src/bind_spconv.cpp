// Python binding of the sparse voxel convolution (frugal/sparse_conv.h). A map's statistics
// (spconv::MapStats) cross into Python as a list of kStatsWords integers, which the Python side keeps
// opaque (frugal.torch.KernelMap holds them in a CPU tensor).
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "frugal/sparse_conv.h"
#include "interop.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace frugal::python {

namespace {

// [rows, offsets, valid, halo_samples, halo_fits[0][0], [0][1], [1][0], [1][1], order (0 given, 1 morton)]
constexpr size_t kStatsWords = 9;

std::vector<int64_t> stats_to_list(const spconv::MapStats& s) {
  return {s.rows,
          s.offsets,
          s.valid ? 1 : 0,
          s.halo_samples,
          s.halo_fits[0][0],
          s.halo_fits[0][1],
          s.halo_fits[1][0],
          s.halo_fits[1][1],
          s.order == spconv::RowOrder::morton ? 1 : 0};
}

spconv::MapStats stats_from_list(const std::vector<int64_t>& v, const char* op) {
  FRUGAL_CHECK(v.size() == kStatsWords, invalid_argument, op,
               "stats must be the " << kStatsWords << " integers build_kernel_map returned, got " << v.size());
  spconv::MapStats s;
  s.rows = v[0];
  s.offsets = static_cast<int>(v[1]);
  s.valid = v[2] != 0;
  s.halo_samples = static_cast<int>(v[3]);
  s.halo_fits[0][0] = static_cast<int>(v[4]);
  s.halo_fits[0][1] = static_cast<int>(v[5]);
  s.halo_fits[1][0] = static_cast<int>(v[6]);
  s.halo_fits[1][1] = static_cast<int>(v[7]);
  s.order = v[8] != 0 ? spconv::RowOrder::morton : spconv::RowOrder::given;
  return s;
}

// The run order of a map as the conv takes it: the array where the statistics say the map runs in Morton
// order, none otherwise (a map in its given order ignores one passed along: frugal.torch.KernelMap always
// carries its order buffer).
TensorView order_view(const std::optional<InArray>& order, const std::optional<spconv::MapStats>& stats,
                      const char* op) {
  if (!order || !stats || stats->order != spconv::RowOrder::morton) return TensorView();
  return to_view(*order, op, "order");
}

struct ConvInputs {
  TensorView feats, nbr, weight, bias;
  bool has_bias = false;
  spconv::ConvOptions options;
};

ConvInputs conv_inputs(const InArray& feats, const InArray& nbr, const InArray& weight,
                       const std::optional<InArray>& bias, bool checked, std::optional<uintptr_t> stream,
                       const std::optional<std::vector<int64_t>>& stats, const std::optional<InArray>& order) {
  constexpr const char* op = "spconv::submanifold_conv";
  ConvInputs in;
  in.feats = to_view(feats, op, "feats");
  in.nbr = to_view(nbr, op, "nbr");
  in.weight = to_view(weight, op, "weight");
  if (bias) in.bias = to_view(*bias, op, "bias"), in.has_bias = true;
  in.options.stream = to_stream(stream);
  in.options.check = checked ? spconv::MapCheck::checked : spconv::MapCheck::unchecked;
  if (stats) in.options.map_stats = stats_from_list(*stats, op);
  in.options.order = order_view(order, in.options.map_stats, op);
  return in;
}

}  // namespace

void bind_spconv(nb::module_& m) {
  nb::module_ s = m.def_submodule("spconv", "Submanifold sparse voxel convolution");
  nb::enum_<spconv::OffsetOrder>(s, "OffsetOrder")
      .value("x_slowest", spconv::OffsetOrder::x_slowest, "frugal's order (and spconv 2.x's)")
      .value("x_fastest", spconv::OffsetOrder::x_fastest, "the reverse axis order");

  nb::enum_<spconv::RowOrder>(s, "RowOrder")
      .value("given", spconv::RowOrder::given, "the rows as coords holds them")
      .value("morton", spconv::RowOrder::morton, "sorted by a Morton key of (b, x, y, z)");

  s.def(
      "build_kernel_map",
      [](InArray coords, int kernel_size, int dilation, std::optional<nb::ndarray<>> out,
         std::optional<nb::ndarray<>> order, std::optional<spconv::RowOrder> run_order,
         std::optional<uintptr_t> stream) -> nb::object {
        constexpr const char* op = "spconv::build_kernel_map";
        const TensorView c = to_view(coords, op, "coords");
        FRUGAL_CHECK(!order || out, invalid_argument, op, "order needs out (the map's columns)");
        FRUGAL_CHECK(!run_order || order, invalid_argument, op, "run_order needs order (where the order goes)");
        if (out && order) {
          return nb::cast(stats_to_list(spconv::build_kernel_map(c, to_view(*out, op, "out"),
                                                                 to_view(*order, op, "order"), kernel_size, dilation,
                                                                 to_stream(stream), run_order)));
        }
        if (out) {
          return nb::cast(stats_to_list(
              spconv::build_kernel_map(c, to_view(*out, op, "out"), kernel_size, dilation, to_stream(stream))));
        }
        return nb::cast(to_array(spconv::build_kernel_map(c, kernel_size, dilation, to_stream(stream))));
      },
      "coords"_a, "kernel_size"_a = 3, "dilation"_a = 1, "out"_a = nb::none(), "order"_a = nb::none(),
      "run_order"_a = nb::none(), "stream"_a = nb::none(),
      "The kernel map nbr [K, N] int32 of coords [N, 4] int32 rows (b, x, y, z); sentinel N for no neighbor.\n"
      "Offset k = (i*ks + j)*ks + l for (dx, dy, dz) = ((i, j, l) - ks//2) * dilation (dx slowest).\n"
      "With out: fills it and returns the map's statistics (a list of ints; pass them as the conv's stats).\n"
      "With out and order ([N] int32): the map in a run order (RowOrder; the rule's for these rows, or\n"
      "run_order): out[k, i] is the neighbor of row order[i], and the conv must be given the order; the\n"
      "statistics say which order it is (order is left unwritten where it is the given one).");

  s.def(
      "build_run_map",
      [](InArray coords, int kernel_size, int dilation, std::optional<spconv::RowOrder> run_order,
         std::optional<uintptr_t> stream) {
        const spconv::KernelMap m = spconv::KernelMap::build(to_view(coords, "spconv::build_kernel_map", "coords"),
                                                             kernel_size, dilation, to_stream(stream), run_order);
        return nb::make_tuple(to_array(m.columns()), m.order().defined() ? nb::cast(to_array(m.order())) : nb::none(),
                              stats_to_list(m.stats()));
      },
      "coords"_a, "kernel_size"_a = 3, "dilation"_a = 1, "run_order"_a = nb::none(), "stream"_a = nb::none(),
      "(columns [K, N] int32, order [N] int32 or None, stats): the map in its run order (KernelMap::build).");

  s.def(
      "map_by_row",
      [](InArray columns, std::optional<InArray> order, std::optional<nb::ndarray<>> out,
         std::optional<uintptr_t> stream) -> nb::object {
        constexpr const char* op = "spconv::map_by_row";
        const TensorView c = to_view(columns, op, "columns");
        const TensorView o = order ? to_view(*order, op, "order") : TensorView();
        if (out) {
          spconv::map_by_row(c, o, to_view(*out, op, "out"), to_stream(stream));
          return nb::none();
        }
        Tensor nbr = Tensor::empty(c.sizes(), DType::i32, c.device);
        spconv::map_by_row(c, o, nbr.view(), to_stream(stream));
        return nb::cast(to_array(std::move(nbr)));
      },
      "columns"_a, "order"_a.none(), "out"_a = nb::none(), "stream"_a = nb::none(),
      "out[k, order[i]] = columns[k, i]: the map by row of a map in a run order (a copy without order).");

  s.def(
      "check_kernel_map",
      [](InArray nbr, std::optional<uintptr_t> stream) {
        return stats_to_list(
            spconv::check_kernel_map(to_view(nbr, "spconv::check_kernel_map", "nbr"), to_stream(stream)));
      },
      "nbr"_a, "stream"_a = nb::none(),
      "Validates a map nbr [K, N] int32 the caller assembled (every entry in [0, N]) and returns its statistics.");

  s.def(
      "submanifold_conv",
      [](InArray feats, InArray nbr, InArray weight, std::optional<InArray> bias,
         std::optional<nb::ndarray<>> out, bool checked, std::optional<uintptr_t> stream,
         std::optional<std::vector<int64_t>> stats, std::optional<InArray> order) -> nb::object {
        const ConvInputs in = conv_inputs(feats, nbr, weight, bias, checked, stream, stats, order);
        const TensorView* b = in.has_bias ? &in.bias : nullptr;
        if (out) {
          spconv::submanifold_conv(in.feats, in.nbr, in.weight, b, to_view(*out, "spconv::submanifold_conv", "out"),
                                   in.options);
          return nb::none();
        }
        return nb::cast(to_array(spconv::submanifold_conv(in.feats, in.nbr, in.weight, b, in.options)));
      },
      "feats"_a, "nbr"_a, "weight"_a, "bias"_a = nb::none(), "out"_a = nb::none(), "checked"_a = true,
      "stream"_a = nb::none(), "stats"_a = nb::none(), "order"_a = nb::none(),
      "out[n, co] = bias[co] + sum_k sum_ci feats[nbr[k, n], ci] * weight[k, ci, co].\n"
      "feats [N, Ci] (or [N+1, Ci] padded), weight [K, Ci, Co], bias [Co]: f32 | f16 | bf16; out [N, Co].\n"
      "stats: what build_kernel_map (with out) or check_kernel_map returned for nbr: the map is then known\n"
      "valid (no per-call check) and its statistics pick the kernel. order: the map's run order, where\n"
      "build_kernel_map wrote one (stats say so; ignored otherwise): column i of nbr is row order[i].");

  s.def(
      "choose_conv",
      [](InArray feats, InArray nbr, InArray weight, std::optional<InArray> bias,
         nb::ndarray<> out, std::optional<std::vector<int64_t>> stats, std::optional<InArray> order) {
        const ConvInputs in = conv_inputs(feats, nbr, weight, bias, true, std::nullopt, stats, order);
        return spconv::to_string(spconv::choose_conv(in.feats, in.nbr, in.weight, in.has_bias ? &in.bias : nullptr,
                                                     to_view(out, "spconv::choose_conv", "out"), in.options));
      },
      "feats"_a, "nbr"_a, "weight"_a, "bias"_a.none(), "out"_a, "stats"_a = nb::none(), "order"_a = nb::none(),
      "The kernel submanifold_conv would run on these arguments (out: where it would write), e.g.\n"
      "'halo_pipe(tile_co 64, tile_rows 128, map order, splits 1, chunk_rows 289772)'. Runs nothing.");

  s.def("kernel_offset", &spconv::kernel_offset, "k"_a, "kernel_size"_a, "dilation"_a = 1);
  s.def("offset_permutation", &spconv::offset_permutation, "other"_a, "kernel_size"_a,
        "perm[k_other] = k_frugal for another library's offset order.");

  // ---- backward (training) ----
  s.def(
      "submanifold_conv_backward",
      [](nb::ndarray<> grad_out, nb::ndarray<> feats, nb::ndarray<> nbr, nb::ndarray<> weight,
         std::optional<nb::ndarray<>> grad_feats, std::optional<nb::ndarray<>> grad_weight,
         std::optional<nb::ndarray<>> grad_bias, bool checked, std::optional<uintptr_t> stream,
         std::optional<std::vector<int64_t>> stats, std::optional<InArray> order) {
        constexpr const char* op = "spconv::submanifold_conv_backward";
        const TensorView go = to_view(grad_out, op, "grad_out"), f = to_view(feats, op, "feats"),
                         m = to_view(nbr, op, "nbr"), w = to_view(weight, op, "weight");
        TensorView gf, gw, gb;
        spconv::GradientBuffers g;
        if (grad_feats) gf = to_view(*grad_feats, op, "grad_feats"), g.feats = &gf;
        if (grad_weight) gw = to_view(*grad_weight, op, "grad_weight"), g.weight = &gw;
        if (grad_bias) gb = to_view(*grad_bias, op, "grad_bias"), g.bias = &gb;
        spconv::BackwardOptions o;
        o.stream = to_stream(stream);
        o.check = checked ? spconv::MapCheck::checked : spconv::MapCheck::unchecked;
        if (stats) o.map_stats = stats_from_list(*stats, op);
        o.order = order_view(order, o.map_stats, op);
        const spconv::BackwardChoice c = spconv::submanifold_conv_backward(go, f, m, w, g, o);
        return nb::make_tuple(c.dgrad ? nb::cast(spconv::to_string(*c.dgrad)) : nb::none(),
                              c.wgrad ? nb::cast(spconv::to_string(*c.wgrad)) : nb::none());
      },
      "grad_out"_a, "feats"_a, "nbr"_a, "weight"_a, "grad_feats"_a = nb::none(), "grad_weight"_a = nb::none(),
      "grad_bias"_a = nb::none(), "checked"_a = true, "stream"_a = nb::none(), "stats"_a = nb::none(),
      "order"_a = nb::none(),
      "Writes the requested gradients of out = submanifold_conv(feats, nbr, weight, bias) given grad_out [N, Co]:\n"
      "grad_feats (shaped like feats), grad_weight [K, Ci, Co], grad_bias [Co]; each optional (None: not computed).\n"
      "Deterministic (fixed chunks of N, reduced in order). f64 runs on the CPU. dgrad assumes the map's\n"
      "submanifold symmetry (every map build_kernel_map makes has it). Returns the choices that served\n"
      "(dgrad, wgrad) as strings, None where not run.");
}

}  // namespace frugal::python
