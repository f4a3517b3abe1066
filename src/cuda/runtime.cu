// CUDA runtime services for the core: memory, copies, device queries and the check that this
// build carries code for the GPU it is asked to run on.
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <sstream>
#include <tuple>
#include <vector>

#include "core/backend.h"
#include "core/device_caps.h"
#include "cuda/common.cuh"
#include "cuda/wgmma.cuh"
#include "frugal/runtime.h"

namespace frugal {

bool built_with_cuda() { return true; }
std::string built_cuda_archs() { return FRUGAL_CUDA_ARCH_LIST; }
std::string built_cuda_ptx() { return FRUGAL_CUDA_PTX_ARCH; }

}  // namespace frugal

namespace frugal::cuda {

namespace {
__global__ void kernel_probe() {}

// Writes 1 where the code the device loaded was compiled for sm_90a (wgmma, TMA, setmaxnreg).
__global__ void kernel_probe_sm90a(int* out) {
#ifdef FRUGAL_WGMMA
  *out = 1;
#else
  *out = 0;
#endif
}
}  // namespace

void throw_cuda_error(cudaError_t err, const char* what, const char* file, int line) {
  cudaGetLastError();  // clear a sticky launch error so the next call starts clean
  std::ostringstream os;
  os << "[cuda] " << what << " failed: " << cudaGetErrorName(err) << " (" << cudaGetErrorString(err) << ") at "
     << file << ":" << line;
  throw Error(ErrorCode::cuda, os.str());
}

DeviceGuard::DeviceGuard(int device) {
  FRUGAL_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) FRUGAL_CUDA_CHECK(cudaSetDevice(device));
}

DeviceGuard::~DeviceGuard() {
  int now = -1;
  if (cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
}

int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

int multiprocessor_count(int device) {
  static std::mutex mu;
  static std::vector<int> cache;
  std::lock_guard lock(mu);
  if (device >= static_cast<int>(cache.size())) cache.resize(device + 1, 0);
  if (cache[device] == 0)
    FRUGAL_CUDA_CHECK(cudaDeviceGetAttribute(&cache[device], cudaDevAttrMultiProcessorCount, device));
  return cache[device];
}

DeviceCaps device_caps(int device) {
  static std::mutex mu;
  static std::vector<std::pair<bool, DeviceCaps>> known;  // per device index: probed, its capabilities
  std::lock_guard lock(mu);
  FRUGAL_CHECK(device >= 0, invalid_argument, "device_caps", "device index must be >= 0, got " << device);
  if (device >= static_cast<int>(known.size())) known.resize(device + 1);
  if (!known[device].first) {
    DeviceGuard guard(device);
    DeviceCaps c;
    FRUGAL_CUDA_CHECK(cudaDeviceGetAttribute(&c.cc_major, cudaDevAttrComputeCapabilityMajor, device));
    FRUGAL_CUDA_CHECK(cudaDeviceGetAttribute(&c.cc_minor, cudaDevAttrComputeCapabilityMinor, device));
    FRUGAL_CUDA_CHECK(cudaDeviceGetAttribute(&c.multiprocessors, cudaDevAttrMultiProcessorCount, device));
    FRUGAL_CUDA_CHECK(cudaDeviceGetAttribute(&c.smem_per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    if (c.cc_major == 9 && c.cc_minor == 0) {
      int* flag = nullptr;
      FRUGAL_CUDA_CHECK(cudaMalloc(&flag, sizeof(int)));
      int got = 0;
      kernel_probe_sm90a<<<1, 1>>>(flag);
      const cudaError_t launched = cudaGetLastError();
      if (launched == cudaSuccess) FRUGAL_CUDA_CHECK(cudaMemcpy(&got, flag, sizeof(int), cudaMemcpyDeviceToHost));
      cudaFree(flag);
      c.sm90a = launched == cudaSuccess && got == 1;
    }
    known[device] = {true, c};
  }
  DeviceCaps c = known[device].second;
  if (sm90a_code_hidden()) c.sm90a = false;
  return c;
}

namespace {
int current_device() {
  int d = 0;
  FRUGAL_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}
}  // namespace

void allow_dynamic_smem(const void* fn, int bytes, int carveout_blocks) {
  if (bytes <= 48 * 1024 && carveout_blocks <= 0) return;
  struct Raised {
    int bytes = 48 * 1024;
    bool carveout = false;
  };
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, Raised> raised;
  const int device = current_device();
  std::lock_guard lock(mu);
  Raised& have = raised[{fn, device}];
  if (have.bytes < bytes) {
    // The choice keeps every kernel within the device's budget (DeviceCaps::smem_per_block); this says
    // so clearly should one ever not.
    const int most = device_caps(device).smem_per_block;
    FRUGAL_CHECK(
        bytes <= most, unsupported, "cuda",
        "a kernel needs " << bytes << " bytes of dynamic shared memory a block, cuda:" << device << " allows " << most);
    FRUGAL_CUDA_CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    have.bytes = bytes;
  }
  if (carveout_blocks > 0 && !have.carveout) {
    // A percentage of the most shared memory an SM can have; the driver rounds it up to a
    // configuration it supports. Measured on the H200 for the decode-attention wide loop (two
    // blocks of 69 KB): 164 KB of shared memory (92 KB of L1) ran the long rows 1–1.4% faster than
    // the whole 228 KB (docs/performance.md, "Decode attention").
    int per_sm = 0, reserved = 0;
    FRUGAL_CUDA_CHECK(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
    FRUGAL_CUDA_CHECK(cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, device));
    const int64_t need = static_cast<int64_t>(carveout_blocks) * (bytes + reserved);
    const int percent = per_sm > 0 ? static_cast<int>(std::min<int64_t>(100, (100 * need + per_sm - 1) / per_sm)) : 100;
    FRUGAL_CUDA_CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributePreferredSharedMemoryCarveout, percent));
    have.carveout = true;
  }
}

int resident_blocks(const void* fn, int threads, int smem) {
  static std::mutex mu;
  static std::map<std::tuple<const void*, int, int, int>, int> cache;
  const auto key = std::make_tuple(fn, current_device(), threads, smem);
  std::lock_guard lock(mu);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  int n = 0;
  FRUGAL_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, fn, threads, static_cast<size_t>(smem)));
  cache[key] = n;
  return n;
}

namespace {

constexpr uint64_t kScratchPoolKeepBytes = 256ull << 20;

cudaMemPool_t scratch_pool(int device) {
  static std::mutex mu;
  static std::vector<cudaMemPool_t> pools;
  std::lock_guard lock(mu);
  if (device >= static_cast<int>(pools.size())) pools.resize(device + 1, nullptr);
  if (!pools[device]) {
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    FRUGAL_CUDA_CHECK(cudaMemPoolCreate(&pools[device], &props));
    uint64_t keep = kScratchPoolKeepBytes;
    FRUGAL_CUDA_CHECK(cudaMemPoolSetAttribute(pools[device], cudaMemPoolAttrReleaseThreshold, &keep));
  }
  return pools[device];
}

}  // namespace

Scratch::Scratch(size_t bytes, cudaStream_t s) : stream_(s) {
  int device = 0;
  FRUGAL_CUDA_CHECK(cudaGetDevice(&device));
  FRUGAL_CUDA_CHECK(cudaMallocFromPoolAsync(&ptr_, bytes, scratch_pool(device), s));
}

Scratch::~Scratch() {
  if (ptr_) cudaFreeAsync(ptr_, stream_);
}

std::string device_name(int device) {
  cudaDeviceProp prop{};
  FRUGAL_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  std::ostringstream os;
  os << prop.name << " (sm_" << prop.major << prop.minor << ", " << prop.multiProcessorCount << " SMs, "
     << prop.totalGlobalMem / (1 << 20) << " MiB)";
  return os.str();
}

void require_device(const char* op, int device) {
  static std::mutex mu;
  static std::vector<int> checked;  // 0 unknown, 1 ok
  std::lock_guard lock(mu);
  if (device < static_cast<int>(checked.size()) && checked[device]) return;
  const int n = device_count();
  FRUGAL_CHECK(n > 0, unsupported, op, "no CUDA device is available (the driver reports none)");
  FRUGAL_CHECK(device >= 0 && device < n, invalid_argument, op,
               "cuda:" << device << " does not exist; this machine has " << n << " CUDA device(s)");
  DeviceGuard guard(device);
  // The probe loads only where this build has machine code the device runs or PTX its driver can JIT.
  cudaFuncAttributes attr{};
  const cudaError_t err = cudaFuncGetAttributes(&attr, kernel_probe);
  if (err != cudaSuccess) {
    cudaGetLastError();
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, device);
    cudaGetLastError();
    const std::string ptx = FRUGAL_CUDA_PTX_ARCH;
    FRUGAL_FAIL(unsupported, op,
                "cuda:" << device << " (" << prop.name << ") has compute capability " << prop.major << "." << prop.minor
                        << ", and this build of frugal carries no code it can run: machine code for "
                        << FRUGAL_CUDA_ARCH_LIST << ", PTX for " << (ptx.empty() ? "none" : "compute_" + ptx) << " ("
                        << cudaGetErrorString(err) << "); rebuild with \"" << prop.major << prop.minor
                        << "\" among -DFRUGAL_CUDA_ARCHS");
  }
  if (device >= static_cast<int>(checked.size())) checked.resize(device + 1, 0);
  checked[device] = 1;
}

void* device_malloc(size_t bytes, int device) {
  DeviceGuard guard(device);
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    FRUGAL_FAIL(cuda, "Tensor::empty",
                "cudaMalloc of " << bytes << " bytes on cuda:" << device << " failed: " << cudaGetErrorString(err)
                                 << " (free " << free_b << " of " << total_b << " bytes)");
  }
  return p;
}

void device_free(void* ptr, int device) noexcept {
  int prev = -1;
  cudaGetDevice(&prev);
  if (prev != device) cudaSetDevice(device);
  cudaFree(ptr);
  if (prev != device && prev >= 0) cudaSetDevice(prev);
}

void memcpy(void* dst, const void* src, size_t bytes, CopyKind kind, Stream stream) {
  const cudaMemcpyKind k = kind == CopyKind::host_to_device   ? cudaMemcpyHostToDevice
                           : kind == CopyKind::device_to_host ? cudaMemcpyDeviceToHost
                                                              : cudaMemcpyDeviceToDevice;
  FRUGAL_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, k, to_cuda(stream)));
  if (kind != CopyKind::device_to_device) FRUGAL_CUDA_CHECK(cudaStreamSynchronize(to_cuda(stream)));
}

void memcpy_to_device_async(void* dst, const void* src, size_t bytes, Stream stream) {
  FRUGAL_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, to_cuda(stream)));
}

void memset_zero(void* dst, size_t bytes, Stream stream) {
  FRUGAL_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, to_cuda(stream)));
}

void synchronize(int device) {
  DeviceGuard guard(device);
  FRUGAL_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace frugal::cuda
