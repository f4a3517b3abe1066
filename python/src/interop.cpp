// DLPack <-> frugal conversions.
#include "interop.h"

#include <algorithm>
#include <vector>

namespace frugal::python {

namespace {

DType to_dtype(nb::dlpack::dtype t, const char* op, const char* name) {
  using C = nb::dlpack::dtype_code;
  if (t.lanes == 1) {
    if (t.code == static_cast<uint8_t>(C::Float) && t.bits == 32) return DType::f32;
    if (t.code == static_cast<uint8_t>(C::Float) && t.bits == 16) return DType::f16;
    if (t.code == static_cast<uint8_t>(C::Bfloat) && t.bits == 16) return DType::bf16;
    if (t.code == static_cast<uint8_t>(C::UInt) && t.bits == 8) return DType::u8;
    if (t.code == static_cast<uint8_t>(C::Int) && t.bits == 32) return DType::i32;
    if (t.code == static_cast<uint8_t>(C::Int) && t.bits == 64) return DType::i64;
    if (t.code == static_cast<uint8_t>(C::Float) && t.bits == 64) return DType::f64;
  }
  FRUGAL_FAIL(invalid_argument, op,
              name << " has a dtype frugal does not handle (DLPack code " << int(t.code) << ", " << int(t.bits)
                   << " bits, " << t.lanes << " lanes); expected f32, f16, bf16, u8, i32, i64 or f64");
}

nb::dlpack::dtype to_dlpack(DType t) {
  using C = nb::dlpack::dtype_code;
  switch (t) {
    case DType::f32: return {static_cast<uint8_t>(C::Float), 32, 1};
    case DType::f16: return {static_cast<uint8_t>(C::Float), 16, 1};
    case DType::bf16: return {static_cast<uint8_t>(C::Bfloat), 16, 1};
    case DType::u8: return {static_cast<uint8_t>(C::UInt), 8, 1};
    case DType::i32: return {static_cast<uint8_t>(C::Int), 32, 1};
    case DType::i64: return {static_cast<uint8_t>(C::Int), 64, 1};
    case DType::f64: return {static_cast<uint8_t>(C::Float), 64, 1};
  }
  return {};
}

template <typename Array>
TensorView view_of(const Array& a, const char* op, const char* name) {
  Device device;
  if (a.device_type() == nb::device::cpu::value) {
    device = Device::cpu();
  } else if (a.device_type() == nb::device::cuda::value) {
    device = Device::cuda(a.device_id());
  } else {
    FRUGAL_FAIL(invalid_argument, op,
                name << " lives on DLPack device type " << a.device_type() << "; frugal takes CPU or CUDA arrays");
  }
  FRUGAL_CHECK(a.ndim() <= static_cast<size_t>(kMaxRank), invalid_argument, op,
               name << " has rank " << a.ndim() << ", more than frugal's " << kMaxRank);
  std::vector<int64_t> shape(a.ndim()), strides(a.ndim());
  bool empty = false;
  for (size_t i = 0; i < a.ndim(); ++i) {
    shape[i] = static_cast<int64_t>(a.shape(i));
    strides[i] = a.stride(i);
    empty = empty || shape[i] == 0;
  }
  // An empty array's strides say nothing (exporters may give zeros): take it as contiguous, so a
  // zero-token call passes the layout checks meant for real rows.
  if (empty) {
    int64_t step = 1;
    for (size_t i = a.ndim(); i-- > 0;) {
      strides[i] = step;
      step *= std::max<int64_t>(shape[i], 1);
    }
  }
  return TensorView(const_cast<void*>(static_cast<const void*>(a.data())), to_dtype(a.dtype(), op, name), shape,
                    strides, device);
}

template <typename Array>
Array make_array(const TensorView& v, nb::handle owner) {
  std::vector<size_t> shape(v.rank);
  for (int i = 0; i < v.rank; ++i) shape[i] = static_cast<size_t>(v.shape[i]);
  const int dev_type = v.device.is_cpu() ? nb::device::cpu::value : nb::device::cuda::value;
  return Array(v.data, shape.size(), shape.data(), owner, v.strides.data(), to_dlpack(v.dtype), dev_type,
               v.device.index);
}

}  // namespace

TensorView to_view(const InArray& a, const char* op, const char* name) { return view_of(a, op, name); }
TensorView to_view(const nb::ndarray<>& a, const char* op, const char* name) { return view_of(a, op, name); }

Tensor to_tensor(const nb::ndarray<>& a, const char* op, const char* name) {
  const TensorView v = view_of(a, op, name);
  FRUGAL_CHECK(v.is_contiguous(), invalid_argument, op, name << " must be contiguous, got " << v.describe());
  // The last copy may go away on a thread without the GIL (a Tensor handle held by C++).
  std::shared_ptr<void> keep(new nb::ndarray<>(a), [](void* p) noexcept {
    nb::gil_scoped_acquire gil;
    delete static_cast<nb::ndarray<>*>(p);
  });
  return Tensor::wrap(v, std::move(keep));
}

namespace {

template <typename T>
std::span<const T> host_span(const InArray& a, DType want, const char* op, const char* name) {
  const TensorView v = view_of(a, op, name);
  FRUGAL_CHECK(v.device.is_cpu(), invalid_argument, op,
               name << " must be in host memory (a CPU array), got one on " << to_string(v.device));
  FRUGAL_CHECK(v.rank == 1, invalid_argument, op, name << " must be 1-D, got " << v.describe());
  FRUGAL_CHECK(v.dtype == want, invalid_argument, op,
               name << " must be " << to_string(want) << ", got " << to_string(v.dtype));
  FRUGAL_CHECK(v.is_contiguous(), invalid_argument, op, name << " must be contiguous");
  return {static_cast<const T*>(v.data), static_cast<size_t>(v.size(0))};
}

}  // namespace

std::span<const int32_t> to_host_i32(const InArray& a, const char* op, const char* name) {
  return host_span<int32_t>(a, DType::i32, op, name);
}
std::span<const int64_t> to_host_i64(const InArray& a, const char* op, const char* name) {
  return host_span<int64_t>(a, DType::i64, op, name);
}

OutArray to_array(const Tensor& t) {
  // The capsule owns a copy of the Tensor handle: the storage lives as long as any array on it.
  auto* keep = new Tensor(t);
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  return make_array<OutArray>(t.view(), owner);
}

OutArray to_array(const TensorView& v, nb::handle owner) { return make_array<OutArray>(v, owner); }

ReadOnlyArray to_readonly_array(const TensorView& v, nb::handle owner) { return make_array<ReadOnlyArray>(v, owner); }

attention::Math parse_math(const std::string& name, const char* op) {
  if (name == "auto" || name == "automatic") return attention::Math::automatic;
  if (name == "f32") return attention::Math::f32;
  if (name == "f16") return attention::Math::f16;
  FRUGAL_FAIL(invalid_argument, op, "math must be 'auto', 'f32' or 'f16', got '" << name << "'");
}

int bits_of_levels(int64_t levels) {
  int bits = 0;
  while (bits < 16 && (int64_t{1} << bits) < levels) ++bits;
  return bits;
}

PackedShape packed_shape(int64_t row_bytes, int64_t levels, const char* op, const char* packed, const char* centroids) {
  PackedShape s;
  s.bits = bits_of_levels(levels);
  FRUGAL_CHECK(s.bits > 0 && row_bytes * 8 % s.bits == 0, invalid_argument, op,
               packed << " rows of " << row_bytes << " bytes do not hold whole " << s.bits << "-bit vectors ("
                      << centroids << " has " << levels << " entries)");
  s.head_dim = static_cast<int>(row_bytes * 8 / s.bits);
  return s;
}

}  // namespace frugal::python
