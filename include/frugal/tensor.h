// TensorView (strided, non-owning: the DLTensor model) and Tensor (owning, on one device).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>

#include "frugal/dtype.h"
#include "frugal/error.h"

namespace frugal {

constexpr int kMaxRank = 6;

// Shapes and strides are in elements, as in DLPack. A view never owns its memory.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  Device device = Device::cpu();
  int rank = 0;
  std::array<int64_t, kMaxRank> shape{};
  std::array<int64_t, kMaxRank> strides{};

  TensorView() = default;
  // A contiguous (row-major) view.
  TensorView(void* data, DType dtype, std::span<const int64_t> shape, Device device = Device::cpu());
  TensorView(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device = Device::cpu())
      : TensorView(data, dtype, std::span<const int64_t>(shape.begin(), shape.size()), device) {}
  // A strided view.
  TensorView(void* data, DType dtype, std::span<const int64_t> shape, std::span<const int64_t> strides,
             Device device);

  int64_t size(int dim) const { return shape[dim < 0 ? dim + rank : dim]; }
  int64_t stride(int dim) const { return strides[dim < 0 ? dim + rank : dim]; }
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * size_of(dtype); }
  bool is_contiguous() const;
  bool empty() const { return numel() == 0; }
  std::span<const int64_t> sizes() const { return {shape.data(), static_cast<size_t>(rank)}; }

  template <typename T>
  T* data_as() const { return static_cast<T*>(data); }

  std::string describe() const;  // "f16[8, 128] cuda:0"
};

// An owning, contiguous tensor. Copying shares the storage (like a shared_ptr).
class Tensor {
 public:
  Tensor() = default;
  static Tensor empty(std::span<const int64_t> shape, DType dtype, Device device = Device::cpu());
  static Tensor empty(std::initializer_list<int64_t> shape, DType dtype, Device device = Device::cpu()) {
    return empty(std::span<const int64_t>(shape.begin(), shape.size()), dtype, device);
  }
  static Tensor zeros(std::span<const int64_t> shape, DType dtype, Device device = Device::cpu(),
                      Stream stream = nullptr);
  static Tensor zeros(std::initializer_list<int64_t> shape, DType dtype, Device device = Device::cpu()) {
    return zeros(std::span<const int64_t>(shape.begin(), shape.size()), dtype, device);
  }

  const TensorView& view() const { return view_; }
  operator const TensorView&() const { return view_; }
  void* data() const { return view_.data; }
  template <typename T>
  T* data_as() const { return view_.data_as<T>(); }
  DType dtype() const { return view_.dtype; }
  Device device() const { return view_.device; }
  int rank() const { return view_.rank; }
  int64_t size(int dim) const { return view_.size(dim); }
  int64_t numel() const { return view_.numel(); }
  size_t nbytes() const { return view_.nbytes(); }
  bool defined() const { return view_.rank > 0 || storage_ != nullptr; }

  // A contiguous copy on `device` (synchronous with respect to the host when a side is the CPU).
  Tensor to(Device device, Stream stream = nullptr) const;

  // A Tensor over memory it does not allocate (a framework's array): every copy holds `owner`
  // (may be empty), released with the last one, so the memory stays valid as long as the owner
  // keeps it. The view must be contiguous.
  static Tensor wrap(const TensorView& view, std::shared_ptr<void> owner = nullptr);

 private:
  std::shared_ptr<void> storage_;
  TensorView view_;
};

// Copies between two contiguous views of equal dtype and size, on any devices. A copy that
// touches the host waits for `stream`; a device-to-device copy is asynchronous on it.
void copy(const TensorView& src, const TensorView& dst, Stream stream = nullptr);

}  // namespace frugal
