// Public sparse-conv operations: validate once, choose the kernel (src/core/spconv_choose.cpp), then
// dispatch to the CPU or CUDA backend, and turn what the backends report (bad coordinates,
// duplicates, bad map entries) into frugal::Error.
#include <algorithm>
#include <array>
#include <climits>
#include <cstring>

#include "core/device_caps.h"
#include "core/sparse_conv_backend.h"
#include "core/spconv_choose.h"
#include "core/types.h"
#include "core/validate.h"

namespace frugal::spconv {

namespace {

constexpr const char* kMapOp = "spconv::build_kernel_map";
constexpr const char* kConvOp = "spconv::submanifold_conv";
constexpr const char* kCheckOp = "spconv::check_kernel_map";

void check_kernel(int kernel_size, int dilation, const char* op) {
  FRUGAL_CHECK(kernel_size >= 1 && kernel_size <= kMaxKernelSize && kernel_size % 2 == 1, invalid_argument, op,
               "kernel_size must be odd in [1, " << kMaxKernelSize << "], got " << kernel_size);
  FRUGAL_CHECK(dilation >= 1 && dilation <= kCoordMax + 1, invalid_argument, op,
               "dilation must be in [1, " << kCoordMax + 1 << "], got " << dilation);
}

// One row of coords, read from wherever it lives.
std::array<int32_t, 4> coord_row(const TensorView& coords, int64_t row) {
  std::array<int32_t, 4> c{};
  const TensorView src(coords.data_as<int32_t>() + row * 4, DType::i32, {4}, coords.device);
  copy(src, TensorView(c.data(), DType::i32, {4}), nullptr);
  return c;
}

[[noreturn]] void raise_bad_coordinate(const TensorView& coords, int64_t row) {
  const auto c = coord_row(coords, row);
  std::ostringstream what;
  if (!backend::batch_in_range(c[0])) {
    what << "batch index b = " << c[0] << " is outside [0, " << kMaxBatch << "]";
  } else {
    const char* axes = "xyz";
    for (int a = 0; a < 3; ++a)
      if (!backend::coord_in_range(c[a + 1])) {
        what << axes[a] << " = " << c[a + 1] << " is outside the packable range [" << kCoordMin << ", " << kCoordMax
             << "]";
        break;
      }
  }
  FRUGAL_FAIL(out_of_range, kMapOp,
              "coords row " << row << " = (b, x, y, z) = (" << c[0] << ", " << c[1] << ", " << c[2] << ", " << c[3]
                            << "): " << what.str());
}

bool overlaps(const TensorView& a, const TensorView& b) {
  if (a.empty() || b.empty() || !(a.device == b.device)) return false;
  const auto* a0 = static_cast<const char*>(a.data);
  const auto* b0 = static_cast<const char*>(b.data);
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

[[noreturn]] void raise_bad_entry(const TensorView& nbr, int64_t bad, const char* op, Stream stream) {
  const int64_t n = nbr.size(1);
  int32_t v = 0;
  copy(TensorView(nbr.data_as<int32_t>() + bad, DType::i32, {1}, nbr.device), TensorView(&v, DType::i32, {1}), stream);
  FRUGAL_FAIL(out_of_range, op,
              "nbr[" << bad / n << ", " << bad % n << "] = " << v << " is outside [0, N] = [0, " << n
                     << "]; was the map built for these coordinates?");
}

// A run order: [n] i32, contiguous, on the device of `like`.
void check_order(const TensorView& order, int64_t n, const TensorView& like, const char* like_name, const char* op) {
  detail::check_tensor(order, op, "order", 1, {DType::i32});
  detail::check_shape(order, op, "order", {n});
  detail::check_contiguous(order, op, "order");
  detail::check_same_device(like, order, op, like_name, "order");
}

// What a build or check of a map [k, n] found out about it (it raised otherwise).
MapStats stats_of(const backend::MapStatus& s, int64_t n, int k) {
  MapStats m;
  m.rows = n;
  m.offsets = k;
  m.valid = true;
  m.order = s.order;
  m.halo_samples = s.halo_samples;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) m.halo_fits[i][j] = s.halo_fits[i][j];
  return m;
}

Tensor build_kernel_map_tensor(const TensorView& coords, int kernel_size, int dilation) {
  check_kernel(kernel_size, dilation, kMapOp);
  detail::check_tensor(coords, kMapOp, "coords", 2, {DType::i32});
  detail::check_shape(coords, kMapOp, "coords", {-1, 4});
  return Tensor::empty({kernel_volume(kernel_size), coords.size(0)}, DType::i32, coords.device);
}

Tensor allocate_out(const TensorView& feats, const TensorView& nbr, const TensorView& weight) {
  detail::check_tensor(nbr, kConvOp, "nbr", 2, {DType::i32});
  detail::check_tensor(weight, kConvOp, "weight", 3, {DType::f32, DType::f16, DType::bf16, DType::f64});
  detail::check_tensor(feats, kConvOp, "feats", 2, {DType::f32, DType::f16, DType::bf16, DType::f64});
  return Tensor::empty({nbr.size(1), weight.size(2)}, feats.dtype, feats.device);
}

const TensorView& map_view(const KernelMap& map) {
  FRUGAL_CHECK(map.columns().defined(), invalid_argument, kConvOp, "the KernelMap is empty (default-constructed)");
  return map.columns().view();
}

}  // namespace

std::array<int, 3> kernel_offset(int k, int kernel_size, int dilation) {
  check_kernel(kernel_size, dilation, "spconv::kernel_offset");
  const int ks = kernel_size;
  FRUGAL_CHECK(k >= 0 && k < kernel_volume(ks), out_of_range, "spconv::kernel_offset",
               "k must be in [0, " << kernel_volume(ks) << "), got " << k);
  return {backend::axis_offset(k / (ks * ks), ks, dilation), backend::axis_offset(k / ks % ks, ks, dilation),
          backend::axis_offset(k % ks, ks, dilation)};
}

namespace {

MapStats build_map(const TensorView& coords, const TensorView& nbr, const TensorView* order, int kernel_size,
                   int dilation, Stream stream, std::optional<RowOrder> run_order) {
  check_kernel(kernel_size, dilation, kMapOp);
  detail::check_tensor(coords, kMapOp, "coords", 2, {DType::i32});
  detail::check_shape(coords, kMapOp, "coords", {-1, 4});
  detail::check_contiguous(coords, kMapOp, "coords");
  const int64_t n = coords.size(0);
  FRUGAL_CHECK(n < INT32_MAX, invalid_argument, kMapOp,
               "N = " << n << " rows do not fit the int32 map with sentinel N; at most " << INT32_MAX - 1);
  const int k = kernel_volume(kernel_size);
  detail::check_tensor(nbr, kMapOp, "nbr", 2, {DType::i32});
  detail::check_shape(nbr, kMapOp, "nbr", {k, n});
  detail::check_contiguous(nbr, kMapOp, "nbr");
  detail::check_same_device(coords, nbr, kMapOp, "coords", "nbr");
  FRUGAL_CHECK(!overlaps(coords, nbr), invalid_argument, kMapOp, "nbr overlaps coords");
  if (order) {
    check_order(*order, n, coords, "coords", kMapOp);
    FRUGAL_CHECK(!overlaps(coords, *order) && !overlaps(nbr, *order), invalid_argument, kMapOp,
                 "order overlaps coords or the map");
  }
  if (n == 0) return stats_of(backend::MapStatus{}, n, k);
  detail::check_device_usable(coords.device, kMapOp);

  backend::MapArgs a;
  a.coords = coords.data_as<const int32_t>();
  a.n = n;
  a.kernel_size = kernel_size;
  a.dilation = dilation;
  a.nbr = nbr.data_as<int32_t>();
  a.device = coords.device.index;
  a.order = order ? order->data_as<int32_t>() : nullptr;
  a.forced_order = run_order;
  const backend::MapStatus s = coords.device.is_cpu() ? cpu::spconv_build_map(a) : cuda::spconv_build_map(a, stream);
  if (s.bad_row >= 0) raise_bad_coordinate(coords, s.bad_row);
  if (s.dup_row_a >= 0) {
    const auto c = coord_row(coords, s.dup_row_b);
    FRUGAL_FAIL(invalid_argument, kMapOp,
                "duplicate coordinate (b, x, y, z) = (" << c[0] << ", " << c[1] << ", " << c[2] << ", " << c[3]
                                                        << ") at rows " << s.dup_row_a << " and " << s.dup_row_b
                                                        << "; active voxels must be unique");
  }
  return stats_of(s, n, k);
}

}  // namespace

MapStats build_kernel_map(const TensorView& coords, const TensorView& nbr, int kernel_size, int dilation,
                          Stream stream) {
  return build_map(coords, nbr, nullptr, kernel_size, dilation, stream, std::nullopt);
}

MapStats build_kernel_map(const TensorView& coords, const TensorView& columns, const TensorView& order,
                          int kernel_size, int dilation, Stream stream, std::optional<RowOrder> run_order) {
  return build_map(coords, columns, &order, kernel_size, dilation, stream, run_order);
}

void map_by_row(const TensorView& columns, const TensorView& order, const TensorView& nbr, Stream stream) {
  constexpr const char* op = "spconv::map_by_row";
  detail::check_tensor(columns, op, "columns", 2, {DType::i32});
  detail::check_contiguous(columns, op, "columns");
  detail::check_tensor(nbr, op, "nbr", 2, {DType::i32});
  detail::check_shape(nbr, op, "nbr", {columns.size(0), columns.size(1)});
  detail::check_contiguous(nbr, op, "nbr");
  detail::check_same_device(columns, nbr, op, "columns", "nbr");
  FRUGAL_CHECK(!overlaps(columns, nbr), invalid_argument, op, "nbr overlaps columns");
  const bool ordered = order.rank != 0;  // a default view: no order
  if (ordered) check_order(order, columns.size(1), columns, "columns", op);
  const int64_t n = columns.size(1), k = columns.size(0);
  if (n == 0 || k == 0) return;
  detail::check_device_usable(columns.device, op);
  const int32_t* o = ordered ? order.data_as<const int32_t>() : nullptr;
  if (columns.device.is_cpu())
    cpu::spconv_map_by_row(columns.data_as<const int32_t>(), o, nbr.data_as<int32_t>(), n, static_cast<int>(k));
  else
    cuda::spconv_map_by_row(columns.data_as<const int32_t>(), o, nbr.data_as<int32_t>(), n, static_cast<int>(k),
                            columns.device.index, stream);
}

Tensor build_kernel_map(const TensorView& coords, int kernel_size, int dilation, Stream stream) {
  Tensor nbr = build_kernel_map_tensor(coords, kernel_size, dilation);
  build_kernel_map(coords, nbr.view(), kernel_size, dilation, stream);
  return nbr;
}

MapStats check_kernel_map(const TensorView& nbr, Stream stream) {
  detail::check_tensor(nbr, kCheckOp, "nbr", 2, {DType::i32});
  detail::check_contiguous(nbr, kCheckOp, "nbr");
  const int64_t k = nbr.size(0), n = nbr.size(1);
  FRUGAL_CHECK(k >= 1 && k <= INT32_MAX, invalid_argument, kCheckOp,
               "nbr must have at least one kernel offset, got " << nbr.describe());
  FRUGAL_CHECK(n < INT32_MAX, invalid_argument, kCheckOp,
               "N = " << n << " rows do not fit the int32 map with sentinel N; at most " << INT32_MAX - 1);
  if (n == 0) return stats_of(backend::MapStatus{}, n, static_cast<int>(k));
  FRUGAL_CHECK(nbr.data, invalid_argument, kCheckOp, "nbr has no data");
  detail::check_device_usable(nbr.device, kCheckOp);
  const int32_t* p = nbr.data_as<const int32_t>();
  backend::MapStatus s;
  if (nbr.device.is_cpu())
    s.bad_entry = cpu::spconv_check_map(p, n, static_cast<int>(k));
  else
    s = cuda::spconv_check_map(p, n, static_cast<int>(k), nbr.device.index, stream);
  if (s.bad_entry >= 0) raise_bad_entry(nbr, s.bad_entry, kCheckOp, stream);
  return stats_of(s, n, static_cast<int>(k));
}

KernelMap KernelMap::build(const TensorView& coords, int kernel_size, int dilation, Stream stream,
                           std::optional<RowOrder> order) {
  KernelMap m;
  m.columns_ = build_kernel_map_tensor(coords, kernel_size, dilation);
  m.order_ = Tensor::empty({coords.size(0)}, DType::i32, coords.device);
  m.stats_ = build_kernel_map(coords, m.columns_.view(), m.order_.view(), kernel_size, dilation, stream, order);
  if (m.stats_.order == RowOrder::given) m.order_ = Tensor();
  m.kernel_size_ = kernel_size;
  m.dilation_ = dilation;
  return m;
}

Tensor KernelMap::nbr(Stream stream) const {
  if (!order_.defined()) return columns_;
  Tensor out = Tensor::empty({columns_.size(0), columns_.size(1)}, DType::i32, columns_.device());
  map_by_row(columns_.view(), order_.view(), out.view(), stream);
  return out;
}

KernelMap KernelMap::from_user(Tensor nbr, int kernel_size, int dilation, Stream stream) {
  check_kernel(kernel_size, dilation, kCheckOp);
  detail::check_tensor(nbr.view(), kCheckOp, "nbr", 2, {DType::i32});
  detail::check_shape(nbr.view(), kCheckOp, "nbr", {kernel_volume(kernel_size), -1});
  KernelMap m;
  m.stats_ = check_kernel_map(nbr.view(), stream);
  m.columns_ = std::move(nbr);
  m.kernel_size_ = kernel_size;
  m.dilation_ = dilation;
  return m;
}

namespace {

// Validates the conv's tensors (once, in the public call) and the map's statistics against nbr.
void validate_conv(const TensorView& feats, const TensorView& nbr, const TensorView& weight, const TensorView* bias,
                   const TensorView& out, const ConvOptions& o) {
  const std::initializer_list<DType> floats = {DType::f32, DType::f16, DType::bf16, DType::f64};  // f64: CPU only
  detail::check_tensor(nbr, kConvOp, "nbr", 2, {DType::i32});
  detail::check_tensor(feats, kConvOp, "feats", 2, floats);
  detail::check_tensor(weight, kConvOp, "weight", 3, floats);
  detail::check_tensor(out, kConvOp, "out", 2, floats);
  const int64_t k = nbr.size(0), n = nbr.size(1);
  FRUGAL_CHECK(k >= 1 && k <= INT32_MAX, invalid_argument, kConvOp,
               "nbr must have at least one kernel offset, got " << nbr.describe());
  FRUGAL_CHECK(n < INT32_MAX, invalid_argument, kConvOp,
               "N = " << n << " rows do not fit the int32 map with sentinel N; at most " << INT32_MAX - 1);
  FRUGAL_CHECK(feats.size(0) == n || feats.size(0) == n + 1, invalid_argument, kConvOp,
               "feats must have N = " << n << " rows (or N + 1, the padded form), got " << feats.describe());
  const int64_t ci = feats.size(1), co = weight.size(2);
  FRUGAL_CHECK(ci >= 1 && ci < INT32_MAX, invalid_argument, kConvOp,
               "feats must have between 1 and " << INT32_MAX - 1 << " channels, got " << feats.describe());
  detail::check_shape(weight, kConvOp, "weight", {k, ci, -1});
  FRUGAL_CHECK(co >= 1 && co < INT32_MAX, invalid_argument, kConvOp,
               "weight must have between 1 and " << INT32_MAX - 1 << " output channels, got " << weight.describe());
  detail::check_shape(out, kConvOp, "out", {n, co});
  FRUGAL_CHECK(weight.dtype == feats.dtype && out.dtype == feats.dtype, invalid_argument, kConvOp,
               "feats, weight and out must share one dtype, got "
                   << to_string(feats.dtype) << ", " << to_string(weight.dtype) << ", " << to_string(out.dtype));
  detail::check_contiguous(feats, kConvOp, "feats");
  detail::check_contiguous(nbr, kConvOp, "nbr");
  detail::check_contiguous(weight, kConvOp, "weight");
  detail::check_contiguous(out, kConvOp, "out");
  detail::check_same_device(feats, nbr, kConvOp, "feats", "nbr");
  detail::check_same_device(feats, weight, kConvOp, "feats", "weight");
  detail::check_same_device(feats, out, kConvOp, "feats", "out");
  FRUGAL_CHECK(feats.dtype != DType::f64 || feats.device.is_cpu(), unsupported, kConvOp,
               "f64 runs on the CPU only (for gradient checks), got feats " << feats.describe());
  if (bias) {
    detail::check_tensor(*bias, kConvOp, "bias", 1, floats);
    detail::check_shape(*bias, kConvOp, "bias", {co});
    FRUGAL_CHECK(
        bias->dtype == feats.dtype, invalid_argument, kConvOp,
        "bias must have the dtype of feats (" << to_string(feats.dtype) << "), got " << to_string(bias->dtype));
    detail::check_contiguous(*bias, kConvOp, "bias");
    detail::check_same_device(feats, *bias, kConvOp, "feats", "bias");
  }
  FRUGAL_CHECK(
      !overlaps(out, feats) && !overlaps(out, nbr) && !overlaps(out, weight) && !(bias && overlaps(out, *bias)),
      invalid_argument, kConvOp, "out overlaps an input; the conv cannot run in place");
  if (o.map_stats)
    FRUGAL_CHECK(o.map_stats->rows == n && o.map_stats->offsets == k, invalid_argument, kConvOp,
                 "map_stats describe a map [" << o.map_stats->offsets << ", " << o.map_stats->rows << "], got nbr "
                                              << nbr.describe());
}

}  // namespace

namespace backend {

const int32_t* checked_order(const TensorView& order, const std::optional<MapStats>& stats, int64_t n,
                             const TensorView& feats, const char* op) {
  const bool has = order.rank != 0;
  const bool wanted = stats && stats->order == RowOrder::morton;
  FRUGAL_CHECK(has == wanted, invalid_argument, op,
               (wanted ? "map_stats say the map runs in Morton order, but no order was given (pass the KernelMap's)"
                       : "an order was given for a map in its given order (map_stats absent or order given)"));
  if (!has) return nullptr;
  check_order(order, n, feats, "feats", op);
  return order.data_as<const int32_t>();
}

}  // namespace backend

namespace {

// The choice for a validated call with N > 0: the forced one, completed and refused where it cannot run,
// or the rules'.
ConvChoice choice_for(const backend::ConvArgs& a, Device device, const ConvOptions& o) {
  const DeviceCaps caps = device.is_cpu() ? DeviceCaps{} : cuda::device_caps(device.index);
  const MapStats* stats = o.map_stats ? &*o.map_stats : nullptr;
  if (!o.choice) return choose(a, caps, stats);
  const ConvChoice c = complete(a, caps, *o.choice);
  std::string why;
  FRUGAL_CHECK(can_implement(a, caps, c, &why), unsupported, kConvOp,
               "the forced choice " << to_string(c) << " cannot run here: the " << to_string(c.variant) << " variant "
                                    << why);
  return c;
}

ConvChoice run_conv(const TensorView& feats, const TensorView& nbr, const TensorView& weight, const TensorView* bias,
                    const TensorView& out, const ConvOptions& o, bool run) {
  validate_conv(feats, nbr, weight, bias, out, o);
  if (nbr.size(1) == 0) return ConvChoice{};
  FRUGAL_CHECK(feats.data && nbr.data && weight.data && out.data, invalid_argument, kConvOp, "a tensor has no data");
  detail::check_device_usable(feats.device, kConvOp);
  backend::ConvArgs a = backend::conv_args(feats, nbr, weight, bias, out);
  a.order = backend::checked_order(o.order, o.map_stats, nbr.size(1), feats, kConvOp);
  // A map frugal built or checked has every entry in [0, N]: nothing to check per call.
  a.check = o.check == MapCheck::checked && !(o.map_stats && o.map_stats->valid);
  ConvChoice c = choice_for(a, feats.device, o);
  if (!run) return c;
  backend::ConvReport r;
  if (feats.device.is_cpu())
    r.bad_entry = cpu::spconv_conv(a);
  else
    r = cuda::spconv_conv(a, c, o.stream);
  if (r.bad_entry >= 0) raise_bad_entry(nbr, r.bad_entry, kConvOp, o.stream);
  if (feats.device.is_cuda()) c.variant = r.variant;
  return c;
}

ConvOptions with_map(const KernelMap& map, const ConvOptions& options) {
  ConvOptions o = options;
  o.map_stats = map.stats();
  o.order = map.order().defined() ? map.order().view() : TensorView();
  return o;
}

}  // namespace

ConvChoice submanifold_conv(const TensorView& feats, const TensorView& nbr, const TensorView& weight,
                            const TensorView* bias, const TensorView& out, const ConvOptions& options) {
  return run_conv(feats, nbr, weight, bias, out, options, true);
}

void submanifold_conv(const TensorView& feats, const TensorView& nbr, const TensorView& weight, const TensorView* bias,
                      const TensorView& out, Stream stream, MapCheck check) {
  ConvOptions o;
  o.stream = stream;
  o.check = check;
  run_conv(feats, nbr, weight, bias, out, o, true);
}

Tensor submanifold_conv(const TensorView& feats, const TensorView& nbr, const TensorView& weight,
                        const TensorView* bias, Stream stream, MapCheck check) {
  Tensor out = allocate_out(feats, nbr, weight);
  submanifold_conv(feats, nbr, weight, bias, out.view(), stream, check);
  return out;
}

Tensor submanifold_conv(const TensorView& feats, const TensorView& nbr, const TensorView& weight,
                        const TensorView* bias, const ConvOptions& options) {
  Tensor out = allocate_out(feats, nbr, weight);
  run_conv(feats, nbr, weight, bias, out.view(), options, true);
  return out;
}

ConvChoice submanifold_conv(const TensorView& feats, const KernelMap& map, const TensorView& weight,
                            const TensorView* bias, const TensorView& out, const ConvOptions& options) {
  return run_conv(feats, map_view(map), weight, bias, out, with_map(map, options), true);
}

Tensor submanifold_conv(const TensorView& feats, const KernelMap& map, const TensorView& weight,
                        const TensorView* bias, const ConvOptions& options) {
  Tensor out = allocate_out(feats, map_view(map), weight);
  submanifold_conv(feats, map, weight, bias, out.view(), options);
  return out;
}

ConvChoice choose_conv(const TensorView& feats, const TensorView& nbr, const TensorView& weight, const TensorView* bias,
                       const TensorView& out, const ConvOptions& options) {
  return run_conv(feats, nbr, weight, bias, out, options, false);
}

ConvChoice choose_conv(const TensorView& feats, const KernelMap& map, const TensorView& weight, const TensorView* bias,
                       const TensorView& out, const ConvOptions& options) {
  return run_conv(feats, map_view(map), weight, bias, out, with_map(map, options), false);
}

std::vector<int> offset_permutation(OffsetOrder other, int kernel_size) {
  check_kernel(kernel_size, 1, "spconv::offset_permutation");
  const int ks = kernel_size, kv = kernel_volume(ks);
  std::vector<int> perm(kv);
  for (int k = 0; k < kv; ++k) {
    if (other == OffsetOrder::x_slowest) {
      perm[k] = k;
    } else {  // other's k flattens (l, j, i) with i fastest: i = k % ks, l = k / ks²
      const int i = k % ks, j = k / ks % ks, l = k / (ks * ks);
      perm[k] = (i * ks + j) * ks + l;
    }
  }
  return perm;
}

Tensor weight_from_krsc(const TensorView& w) {
  constexpr const char* op = "spconv::weight_from_krsc";
  detail::check_tensor(w, op, "weight_krsc", 5, {DType::f32, DType::f16, DType::bf16});
  FRUGAL_CHECK(w.device.is_cpu(), invalid_argument, op, "weight_krsc must be on the CPU, got " << w.describe());
  detail::check_contiguous(w, op, "weight_krsc");
  const int64_t co = w.size(0), ks = w.size(1), ci = w.size(4);
  FRUGAL_CHECK(w.size(2) == ks && w.size(3) == ks, invalid_argument, op,
               "weight_krsc must be [Co, ks, ks, ks, Ci] with a cubic kernel, got " << w.describe());
  const int64_t kv = ks * ks * ks;
  Tensor out = Tensor::empty({kv, ci, co}, w.dtype);
  const size_t es = size_of(w.dtype);
  const auto* src = static_cast<const char*>(w.data);
  auto* dst = static_cast<char*>(out.data());
  for (int64_t o = 0; o < co; ++o)
    for (int64_t k = 0; k < kv; ++k)
      for (int64_t c = 0; c < ci; ++c)
        std::memcpy(dst + ((k * ci + c) * co + o) * es, src + ((o * kv + k) * ci + c) * es, es);
  return out;
}

}  // namespace frugal::spconv
