// DLPack <-> frugal conversions for the Python module: any array that speaks DLPack (numpy,
// torch, cupy, jax) becomes a TensorView without a copy; a frugal Tensor goes back out as an
// Array-API object (__dlpack__) that keeps the Tensor's storage alive.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <optional>
#include <span>

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

}  // namespace frugal::python
