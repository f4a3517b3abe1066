// The runtime services the core needs from the CUDA backend (memory, copies, device checks).
// Implemented in src/cuda/runtime.cu, or by src/no_cuda.cpp as clear errors.
#pragma once

#include <cstddef>
#include <string>

#include "frugal/dtype.h"

namespace frugal::cuda {

enum class CopyKind { host_to_device, device_to_host, device_to_device };

void* device_malloc(size_t bytes, int device);
void device_free(void* ptr, int device) noexcept;
void memcpy(void* dst, const void* src, size_t bytes, CopyKind kind, Stream stream);
// A host-to-device copy ordered on `stream` that does not wait for it: the host buffer may be
// reused as soon as the call returns (the driver stages pageable memory before returning).
void memcpy_to_device_async(void* dst, const void* src, size_t bytes, Stream stream);
void memset_zero(void* dst, size_t bytes, Stream stream);
int device_count() noexcept;
std::string device_name(int device);
void synchronize(int device);
// Throws frugal::Error(unsupported) naming the op, the GPU's compute capability and the
// architectures compiled in, when this build has no code that runs on `device`.
void require_device(const char* op, int device);

}  // namespace frugal::cuda
