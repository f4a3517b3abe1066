// Public sparse-conv operations: validate once, then dispatch to the CPU or CUDA backend, and turn
// what the backends report (bad coordinates, duplicates, bad map entries) into frugal::Error.
#include <algorithm>
#include <array>
#include <climits>
#include <cstring>

#include "core/sparse_conv_backend.h"
#include "core/types.h"
#include "core/validate.h"

namespace frugal::spconv {

namespace {

constexpr const char* kMapOp = "spconv::build_kernel_map";
constexpr const char* kConvOp = "spconv::submanifold_conv";

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

}  // namespace

std::array<int, 3> kernel_offset(int k, int kernel_size, int dilation) {
  check_kernel(kernel_size, dilation, "spconv::kernel_offset");
  const int ks = kernel_size;
  FRUGAL_CHECK(k >= 0 && k < kernel_volume(ks), out_of_range, "spconv::kernel_offset",
               "k must be in [0, " << kernel_volume(ks) << "), got " << k);
  return {backend::axis_offset(k / (ks * ks), ks, dilation), backend::axis_offset(k / ks % ks, ks, dilation),
          backend::axis_offset(k % ks, ks, dilation)};
}

void build_kernel_map(const TensorView& coords, const TensorView& nbr, int kernel_size, int dilation, Stream stream) {
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
  if (n == 0) return;
  detail::check_device_usable(coords.device, kMapOp);

  backend::MapArgs a;
  a.coords = coords.data_as<const int32_t>();
  a.n = n;
  a.kernel_size = kernel_size;
  a.dilation = dilation;
  a.nbr = nbr.data_as<int32_t>();
  a.device = coords.device.index;
  const backend::MapStatus s = coords.device.is_cpu() ? cpu::spconv_build_map(a) : cuda::spconv_build_map(a, stream);
  if (s.bad_row >= 0) raise_bad_coordinate(coords, s.bad_row);
  if (s.dup_row_a >= 0) {
    const auto c = coord_row(coords, s.dup_row_b);
    FRUGAL_FAIL(invalid_argument, kMapOp,
                "duplicate coordinate (b, x, y, z) = (" << c[0] << ", " << c[1] << ", " << c[2] << ", " << c[3]
                                                        << ") at rows " << s.dup_row_a << " and " << s.dup_row_b
                                                        << "; active voxels must be unique");
  }
}

Tensor build_kernel_map(const TensorView& coords, int kernel_size, int dilation, Stream stream) {
  check_kernel(kernel_size, dilation, kMapOp);
  detail::check_tensor(coords, kMapOp, "coords", 2, {DType::i32});
  detail::check_shape(coords, kMapOp, "coords", {-1, 4});
  Tensor nbr = Tensor::empty({kernel_volume(kernel_size), coords.size(0)}, DType::i32, coords.device);
  build_kernel_map(coords, nbr.view(), kernel_size, dilation, stream);
  return nbr;
}

void submanifold_conv(const TensorView& feats, const TensorView& nbr, const TensorView& weight, const TensorView* bias,
                      const TensorView& out, Stream stream, MapCheck check) {
  const std::initializer_list<DType> floats = {DType::f32, DType::f16, DType::bf16};
  detail::check_tensor(nbr, kConvOp, "nbr", 2, {DType::i32});
  detail::check_tensor(feats, kConvOp, "feats", 2, floats);
  detail::check_tensor(weight, kConvOp, "weight", 3, floats);
  detail::check_tensor(out, kConvOp, "out", 2, floats);
  const int64_t k = nbr.size(0), n = nbr.size(1);
  FRUGAL_CHECK(k >= 1, invalid_argument, kConvOp, "nbr must have at least one kernel offset, got " << nbr.describe());
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
  if (n == 0) return;
  FRUGAL_CHECK(feats.data && nbr.data && weight.data && out.data, invalid_argument, kConvOp, "a tensor has no data");
  detail::check_device_usable(feats.device, kConvOp);

  backend::ConvArgs a = backend::conv_args(feats, nbr, weight, bias, out);
  a.check = check == MapCheck::checked;
  const int64_t bad = feats.device.is_cpu() ? cpu::spconv_conv(a) : cuda::spconv_conv(a, stream);
  if (bad >= 0) {
    int32_t v = 0;
    copy(TensorView(nbr.data_as<int32_t>() + bad, DType::i32, {1}, nbr.device), TensorView(&v, DType::i32, {1}),
         stream);
    FRUGAL_FAIL(out_of_range, kConvOp,
                "nbr[" << bad / n << ", " << bad % n << "] = " << v << " is outside [0, N] = [0, " << n
                       << "]; was the map built for these coordinates?");
  }
}

Tensor submanifold_conv(const TensorView& feats, const TensorView& nbr, const TensorView& weight,
                        const TensorView* bias, Stream stream, MapCheck check) {
  detail::check_tensor(nbr, kConvOp, "nbr", 2, {DType::i32});
  detail::check_tensor(weight, kConvOp, "weight", 3, {DType::f32, DType::f16, DType::bf16});
  detail::check_tensor(feats, kConvOp, "feats", 2, {DType::f32, DType::f16, DType::bf16});
  Tensor out = Tensor::empty({nbr.size(1), weight.size(2)}, feats.dtype, feats.device);
  submanifold_conv(feats, nbr, weight, bias, out.view(), stream, check);
  return out;
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
