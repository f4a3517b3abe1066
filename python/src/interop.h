// Python arguments -> frugal for the Python module: any array that speaks DLPack (numpy, torch,
// cupy, jax) becomes a TensorView without a copy; a frugal Tensor goes back out as an Array-API
// object (__dlpack__) that keeps the Tensor's storage alive; and the small argument conversions the
// bindings share (math names, a codebook's bits).
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "frugal/attention.h"
#include "frugal/frugal.h"

namespace frugal::python {

namespace nb = nanobind;

// Arrays an op only reads: any device and dtype (the op validates what it needs), read-only ones
// included (np.broadcast_to, setflags(write=False), np.load(mmap_mode="r")).
using InArray = nb::ndarray<nb::ro>;
// Arrays an op writes (`out=`): nb::ndarray<>, which refuses read-only arrays.
// Results: an Array-API object that torch.from_dlpack / numpy.from_dlpack take as is.
using OutArray = nb::ndarray<nb::array_api>;
// A read-only result: numpy and cupy get a read-only array (DLPack's read-only flag); torch has no
// read-only tensors and ignores it.
using ReadOnlyArray = nb::ndarray<nb::array_api, nb::ro>;

TensorView to_view(const InArray& a, const char* op, const char* name);
TensorView to_view(const nb::ndarray<>& a, const char* op, const char* name);
// A Tensor over the array's memory (no copy) that keeps the array alive as long as any copy of it:
// storage a kv::Cache::wrap or kv::PagedCache::wrap reads and writes.
Tensor to_tensor(const nb::ndarray<>& a, const char* op, const char* name);
// A host int32 / int64 array (1-D, contiguous) as a span: block tables, indptrs, positions.
std::span<const int32_t> to_host_i32(const InArray& a, const char* op, const char* name);
std::span<const int64_t> to_host_i64(const InArray& a, const char* op, const char* name);
OutArray to_array(const Tensor& t);
// A view into storage owned by `owner` (a Python object holding it, e.g. a Cache).
OutArray to_array(const TensorView& v, nb::handle owner);
ReadOnlyArray to_readonly_array(const TensorView& v, nb::handle owner);

inline Stream to_stream(std::optional<uintptr_t> s) { return s ? reinterpret_cast<Stream>(*s) : nullptr; }

// 'auto' (or 'automatic'), 'f32' or 'f16'; anything else is a frugal::Error naming `op`.
attention::Math parse_math(const std::string& name, const char* op);

// The bits of a codebook of `levels` centroids (2, 3, 4 or 8 bits; anything else is left to the
// config check, which names the field).
int bits_of_levels(int64_t levels);

// The bits and head_dim of wrapped storage whose packed rows hold `row_bytes` bytes and whose
// codebook has `levels` centroids; a frugal::Error naming `op`, `packed` and `centroids` when the rows
// do not hold whole vectors (a bad bit width is left to the config check, which names the field).
struct PackedShape {
  int bits = 0;
  int head_dim = 0;
};
PackedShape packed_shape(int64_t row_bytes, int64_t levels, const char* op, const char* packed, const char* centroids);

}  // namespace frugal::python
