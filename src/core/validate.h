// One-line argument checks for the public entry points. Kernels never validate; entry points do.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <sstream>
#include <string>

#include "frugal/error.h"
#include "frugal/tensor.h"

namespace frugal::detail {

std::string shape_string(std::span<const int64_t> shape);
std::string dtypes_string(std::initializer_list<DType> dtypes);

// The tensor has data (unless it is empty), the given rank, and one of `dtypes`.
void check_tensor(const TensorView& t, const char* op, const char* name, int rank,
                  std::initializer_list<DType> dtypes);
// Every dimension matches; -1 in `expected` matches any size.
void check_shape(const TensorView& t, const char* op, const char* name, std::initializer_list<int64_t> expected);
void check_contiguous(const TensorView& t, const char* op, const char* name);
void check_same_device(const TensorView& a, const TensorView& b, const char* op, const char* name_a,
                       const char* name_b);
// The device is usable: the CPU, or a CUDA device this build can run on.
void check_device_usable(Device d, const char* op);
// A tensor of storage handed in (Cache::wrap, PagedCache::wrap): defined, of `dtype` and `shape`, on `device`.
void check_storage(const Tensor& t, const char* op, const char* name, DType dtype,
                   std::initializer_list<int64_t> shape, Device device);

// Sizes computed from user input: a · b, or the product of `dims`, for non-negative operands;
// frugal::Error (invalid_argument) "[op] <what> overflows 64 bits: ..." instead of wrapping.
int64_t checked_mul(int64_t a, int64_t b, const char* op, const char* what);
int64_t checked_product(std::span<const int64_t> dims, const char* op, const char* what);
inline int64_t checked_product(std::initializer_list<int64_t> dims, const char* op, const char* what) {
  return checked_product(std::span<const int64_t>(dims.begin(), dims.size()), op, what);
}

}  // namespace frugal::detail
