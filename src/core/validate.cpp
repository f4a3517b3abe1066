// Argument checks shared by all entry points; each message names the op and the values.
#include "core/validate.h"

#include "core/backend.h"

namespace frugal::detail {

std::string shape_string(std::span<const int64_t> shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

std::string dtypes_string(std::initializer_list<DType> dtypes) {
  std::string s;
  for (DType t : dtypes) s += (s.empty() ? "" : " | ") + std::string(to_string(t));
  return s;
}

void check_tensor(const TensorView& t, const char* op, const char* name, int rank,
                  std::initializer_list<DType> dtypes) {
  FRUGAL_CHECK(t.rank == rank, invalid_argument, op,
               name << " must have rank " << rank << ", got " << t.describe());
  bool ok = false;
  for (DType d : dtypes) ok = ok || d == t.dtype;
  FRUGAL_CHECK(ok, invalid_argument, op,
               name << " must have dtype " << dtypes_string(dtypes) << ", got " << to_string(t.dtype));
  FRUGAL_CHECK(t.data != nullptr || t.numel() == 0, invalid_argument, op, name << " has no data (null pointer)");
}

void check_shape(const TensorView& t, const char* op, const char* name, std::initializer_list<int64_t> expected) {
  bool ok = t.rank == static_cast<int>(expected.size());
  int i = 0;
  for (int64_t e : expected) {
    if (ok && e >= 0 && t.shape[i] != e) ok = false;
    ++i;
  }
  if (ok) return;
  std::ostringstream want;
  want << "[";
  i = 0;
  for (int64_t e : expected) {
    want << (i++ ? ", " : "");
    if (e < 0) want << "*";
    else want << e;
  }
  want << "]";
  FRUGAL_FAIL(invalid_argument, op, name << " must have shape " << want.str() << ", got " << shape_string(t.sizes()));
}

void check_contiguous(const TensorView& t, const char* op, const char* name) {
  FRUGAL_CHECK(t.is_contiguous(), invalid_argument, op,
               name << " must be contiguous (row-major), got strides "
                    << shape_string({t.strides.data(), static_cast<size_t>(t.rank)}) << " for shape "
                    << shape_string(t.sizes()));
}

void check_same_device(const TensorView& a, const TensorView& b, const char* op, const char* name_a,
                       const char* name_b) {
  FRUGAL_CHECK(a.device == b.device, invalid_argument, op,
               name_a << " is on " << to_string(a.device) << " but " << name_b << " is on " << to_string(b.device));
}

void check_device_usable(Device d, const char* op) {
  if (d.is_cpu()) return;
  cuda::require_device(op, d.index);
}

void check_storage(const Tensor& t, const char* op, const char* name, DType dtype,
                   std::initializer_list<int64_t> shape, Device device) {
  FRUGAL_CHECK(t.defined(), invalid_argument, op, name << " is missing");
  check_tensor(t.view(), op, name, static_cast<int>(shape.size()), {dtype});
  check_shape(t.view(), op, name, shape);
  FRUGAL_CHECK(t.device() == device, invalid_argument, op,
               name << " is on " << to_string(t.device()) << " but the storage is on " << to_string(device));
}

int64_t checked_mul(int64_t a, int64_t b, const char* op, const char* what) {
  FRUGAL_CHECK(a >= 0 && b >= 0, invalid_argument, op, what << " has a negative factor: " << a << " × " << b);
  int64_t r = 0;
  FRUGAL_CHECK(!__builtin_mul_overflow(a, b, &r), invalid_argument, op,
               what << " overflows 64 bits: " << a << " × " << b);
  return r;
}

int64_t checked_product(std::span<const int64_t> dims, const char* op, const char* what) {
  bool empty = false;
  for (int64_t d : dims) {
    FRUGAL_CHECK(d >= 0, invalid_argument, op, what << " has a negative factor in " << shape_string(dims));
    empty = empty || d == 0;
  }
  if (empty) return 0;  // an empty shape holds nothing, whatever its other sizes
  int64_t r = 1;
  for (int64_t d : dims)
    FRUGAL_CHECK(!__builtin_mul_overflow(r, d, &r), invalid_argument, op,
                 what << " overflows 64 bits: the product of " << shape_string(dims));
  return r;
}

}  // namespace frugal::detail
