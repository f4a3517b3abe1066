// TensorView geometry, owning Tensor allocation on the CPU or a GPU, and copies between them.
#include "frugal/tensor.h"

#include <climits>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/backend.h"
#include "core/validate.h"

namespace frugal {

namespace {

// Fills rank and shape, and refuses a shape whose element or byte count does not fit in 64 bits:
// every size computed from a view afterwards (numel, nbytes, offsets) is then free of overflow.
void fill_shape(TensorView& v, std::span<const int64_t> shape, const char* op) {
  FRUGAL_CHECK(shape.size() <= static_cast<size_t>(kMaxRank), invalid_argument, op,
               "rank " << shape.size() << " exceeds the maximum rank " << kMaxRank);
  v.rank = static_cast<int>(shape.size());
  for (int i = 0; i < v.rank; ++i) {
    FRUGAL_CHECK(shape[i] >= 0, invalid_argument, op, "negative dimension in shape " << detail::shape_string(shape));
    v.shape[i] = shape[i];
  }
  const int64_t n = detail::checked_product(shape, op, "the element count of the shape");
  detail::checked_mul(n, static_cast<int64_t>(size_of(v.dtype)), op, "the byte size of the shape");
}

// The elements a strided view spans, Σ (shape_i − 1)·|stride_i|, must fit in 64 bits, in bytes too.
void check_span(const TensorView& v, const char* op) {
  if (v.numel() == 0) return;
  int64_t last = 0;
  for (int i = 0; i < v.rank; ++i) {
    FRUGAL_CHECK(v.strides[i] > INT64_MIN, invalid_argument, op, "stride " << v.strides[i] << " is out of range");
    const int64_t step = detail::checked_mul(v.shape[i] - 1, v.strides[i] < 0 ? -v.strides[i] : v.strides[i], op,
                                             "the span of the strided view");
    FRUGAL_CHECK(!__builtin_add_overflow(last, step, &last), invalid_argument, op,
                 "the span of the strided view overflows 64 bits");
  }
  detail::checked_mul(last, static_cast<int64_t>(size_of(v.dtype)), op, "the byte span of the strided view");
}

void fill_contiguous(TensorView& v, std::span<const int64_t> shape, const char* op) {
  fill_shape(v, shape, op);
  int64_t s = 1;
  for (int i = v.rank - 1; i >= 0; --i) {
    v.strides[i] = s;
    s *= v.shape[i];
  }
}

}  // namespace

TensorView::TensorView(void* data_, DType dtype_, std::span<const int64_t> shape_, Device device_)
    : data(data_), dtype(dtype_), device(device_) {
  fill_contiguous(*this, shape_, "TensorView");
}

TensorView::TensorView(void* data_, DType dtype_, std::span<const int64_t> shape_, std::span<const int64_t> strides_,
                       Device device_)
    : data(data_), dtype(dtype_), device(device_) {
  fill_shape(*this, shape_, "TensorView");
  FRUGAL_CHECK(strides_.size() == shape_.size(), invalid_argument, "TensorView",
               "shape has " << shape_.size() << " dimensions but strides have " << strides_.size());
  for (int i = 0; i < rank; ++i) strides[i] = strides_[i];
  check_span(*this, "TensorView");
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= shape[i];
  return n;
}

bool TensorView::is_contiguous() const {
  if (numel() == 0) return true;  // an empty array's strides carry no meaning (numpy gives 0)
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != s) return false;
    s *= shape[i];
  }
  return true;
}

std::string TensorView::describe() const {
  std::ostringstream os;
  os << to_string(dtype) << detail::shape_string(sizes()) << " " << to_string(device);
  return os.str();
}

Tensor Tensor::empty(std::span<const int64_t> shape, DType dtype, Device device) {
  Tensor t;
  t.view_.dtype = dtype;
  t.view_.device = device;
  fill_contiguous(t.view_, shape, "Tensor::empty");
  const size_t bytes = t.view_.nbytes();
  if (bytes == 0) return t;
  if (device.is_cpu()) {
    // 64-byte alignment: whole cache lines, and every vector width the CPU backend uses.
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    FRUGAL_CHECK(p != nullptr, invalid_argument, "Tensor::empty", "out of host memory allocating " << bytes << " bytes");
    t.storage_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  } else {
    detail::check_device_usable(device, "Tensor::empty");
    const int dev = device.index;
    void* p = cuda::device_malloc(bytes, dev);
    t.storage_ = std::shared_ptr<void>(p, [dev](void* q) { cuda::device_free(q, dev); });
  }
  t.view_.data = t.storage_.get();
  return t;
}

Tensor Tensor::zeros(std::span<const int64_t> shape, DType dtype, Device device, Stream stream) {
  Tensor t = empty(shape, dtype, device);
  if (t.nbytes() == 0) return t;
  if (device.is_cpu()) {
    std::memset(t.data(), 0, t.nbytes());
  } else {
    cuda::memset_zero(t.data(), t.nbytes(), stream);
  }
  return t;
}

Tensor Tensor::wrap(const TensorView& view, std::shared_ptr<void> owner) {
  detail::check_contiguous(view, "Tensor::wrap", "view");
  FRUGAL_CHECK(view.data != nullptr || view.empty(), invalid_argument, "Tensor::wrap",
               "a view of " << view.describe() << " with no data");
  Tensor t;
  t.storage_ = std::move(owner);
  t.view_ = TensorView(view.data, view.dtype, view.sizes(), view.device);  // row-major strides
  return t;
}

Tensor Tensor::to(Device device, Stream stream) const {
  Tensor out = empty(view_.sizes(), view_.dtype, device);
  copy(view_, out.view(), stream);
  return out;
}

void copy(const TensorView& src, const TensorView& dst, Stream stream) {
  constexpr const char* op = "copy";
  FRUGAL_CHECK(src.dtype == dst.dtype, invalid_argument, op,
               "dtypes differ: " << to_string(src.dtype) << " vs " << to_string(dst.dtype));
  FRUGAL_CHECK(src.numel() == dst.numel(), invalid_argument, op,
               "sizes differ: " << src.describe() << " vs " << dst.describe());
  detail::check_contiguous(src, op, "src");
  detail::check_contiguous(dst, op, "dst");
  const size_t bytes = src.nbytes();
  if (bytes == 0) return;
  if (src.device.is_cpu() && dst.device.is_cpu()) {
    std::memmove(dst.data, src.data, bytes);
    return;
  }
  const auto kind = src.device.is_cpu()   ? cuda::CopyKind::host_to_device
                    : dst.device.is_cpu() ? cuda::CopyKind::device_to_host
                                          : cuda::CopyKind::device_to_device;
  cuda::memcpy(dst.data, src.data, bytes, kind, stream);
}

}  // namespace frugal
