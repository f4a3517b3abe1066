// Shared device-side helpers: error checking with the call site, launch arithmetic, dtype
// conversions and the dtype -> CUDA type dispatch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "frugal/dtype.h"
#include "frugal/error.h"

namespace frugal::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* what, const char* file, int line);

inline cudaStream_t to_cuda(Stream s) { return static_cast<cudaStream_t>(s); }

template <typename T>
constexpr T ceil_div(T a, T b) {
  return (a + b - 1) / b;
}

// Sets the current device for the scope and restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// Whether `p` is a multiple of `bytes` (a power of two) in the address space.
inline bool is_aligned(const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

int multiprocessor_count(int device);

// The most shared memory one block may opt into on sm_90: 227 KB, the multiprocessor's 228 KB less the
// 1 KB the system reserves for each resident block (cudaDevAttrMaxSharedMemoryPerBlockOptin).
constexpr size_t kMaxSmemPerBlock = 227 * 1024;
static_assert(kMaxSmemPerBlock == 232448);
// 32-bit registers of a multiprocessor's register file, and the most one block may hold (sm_80 – sm_90).
constexpr int kRegistersPerBlock = 64 * 1024;

// Raises kernel `fn`'s dynamic shared-memory limit on the current device to at least `bytes`
// (nothing to do up to the default 48 KiB) and, with carveout_blocks > 0, prefers the smallest
// L1/shared carveout that holds that many blocks of `bytes` (for kernels meant to run several
// blocks of large shared memory a multiprocessor; the rest stays L1). cudaFuncSetAttribute acts on
// the current device only, so this is remembered per kernel and device, and the driver is asked
// once, not every launch.
void allow_dynamic_smem(const void* fn, int bytes, int carveout_blocks = 0);
// Resident blocks per SM of `fn` with `threads` threads and `smem` bytes of dynamic shared memory on
// the current device (the occupancy calculator's answer, cached per kernel, device and shape).
int resident_blocks(const void* fn, int threads, int smem);

// Stream-ordered scratch memory from frugal's own pool on the current device, returned to the
// pool when the scope ends. The pool keeps up to 256 MiB of freed memory between calls (as torch's
// caching allocator does) so that repeated calls do not map their workspace afresh each time;
// above that it gives memory back to the driver at the next synchronization.
class Scratch {
 public:
  Scratch(size_t bytes, cudaStream_t s);
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  cudaStream_t stream_;
};

// Element loads/stores through f32, for kernels templated on the storage type.
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// (x, y) rounded to T and stored as one 32-bit pair (dst 4-byte aligned); T is __half or __nv_bfloat16.
template <typename T>
__device__ __forceinline__ void store_pair(T* dst, float x, float y) {
  if constexpr (std::is_same_v<T, __half>) {
    *reinterpret_cast<__half2*>(dst) = __floats2half2_rn(x, y);
  } else {
    *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(x, y);
  }
}

// 16-byte asynchronous global -> shared copies (sm_80+): src_bytes < 16 zero-fills the rest, so
// src_bytes = 0 writes zeros (a missing neighbor) without reading global memory.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int src_bytes) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(src_bytes));
}
// 4-byte asynchronous global -> shared copy through L1 (cp.async.ca; no zero fill).
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N of this thread's committed groups are in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
// The multistage cp.async pipeline over `steps` steps: load(s) issues step s's copies into its buffer
// (s % STAGES), compute(s) reads that buffer; STAGES - 1 steps are in flight ahead of the one computed.
// Each step's barrier both publishes its copies and frees the buffer that the next load overwrites.
template <int STAGES, typename Load, typename Compute>
__device__ __forceinline__ void cp_async_pipeline(int steps, Load&& load, Compute&& compute) {
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < steps) load(s);
    cp_async_commit();
  }
  for (int s = 0; s < steps; ++s) {
    cp_async_wait<STAGES - 2>();  // this thread's copies of step s have landed ...
    __syncthreads();              // ... everyone's have, and step s-1's buffer is free again
    if (s + STAGES - 1 < steps) load(s + STAGES - 1);
    cp_async_commit();
    compute(s);
  }
}

// Programmatic dependent launch (sm_90). Device side: let the grid launched after this one as its
// programmatic dependent be scheduled now (as resources free up); wait until the grids this one
// depends on have completed and their memory is visible (returns at once without such a grid).
// Before sm_90 there is no programmatic dependent launch: both are no-ops, and stream order alone
// orders the grids.
__device__ __forceinline__ void grid_launch_dependents() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void grid_dependency_wait() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
// Host side: kernel<<<grid, block, smem, s>>>(args...), launched as a programmatic dependent of the
// work before it in s where `dependent` (its blocks may start before that work completes; what it
// reads of that work waits for grid_dependency_wait). Returns the launch's error (FRUGAL_CUDA_CHECK it).
template <typename... P, typename... A>
cudaError_t launch_kernel(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, bool dependent,
                          A&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = dependent ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
}

// d += a · b for one m16n8k16 tile (A row-major 16×16, B column-major 16×8; T = __half or
// __nv_bfloat16 operands, f32 accumulators), as PTX's mma.sync fragments.
template <typename T>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Calls f.template operator()<T>() with T = float | __half | __nv_bfloat16.
template <typename F>
decltype(auto) dispatch_float(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32: return std::forward<F>(f).template operator()<float>();
    case DType::f16: return std::forward<F>(f).template operator()<__half>();
    case DType::bf16: return std::forward<F>(f).template operator()<__nv_bfloat16>();
    default: break;
  }
  FRUGAL_FAIL(invalid_argument, op, "expected a floating dtype (f32, f16, bf16), got " << to_string(t));
}

}  // namespace frugal::cuda

// Checks a CUDA runtime call; on failure throws frugal::Error(cuda) with the call and its site.
#define FRUGAL_CUDA_CHECK(call)                                                     \
  do {                                                                              \
    cudaError_t frugal_err_ = (call);                                               \
    if (frugal_err_ != cudaSuccess)                                                 \
      ::frugal::cuda::throw_cuda_error(frugal_err_, #call, __FILE__, __LINE__);     \
  } while (0)

// After a kernel launch: reports launch-configuration errors at the launch site.
#define FRUGAL_CUDA_CHECK_LAUNCH() FRUGAL_CUDA_CHECK(cudaGetLastError())
