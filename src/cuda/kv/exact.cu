// The copies between token vectors and a cache's exact rows (core/kv_backend.h, ExactArgs): one
// block per (token, head), its threads over the vector's dims. Bytes: the rows copied, once.
#include <algorithm>
#include <cstdint>

#include "core/kv_backend.h"
#include "cuda/common.cuh"

namespace frugal::cuda {

namespace {

using kv::backend::ExactArgs;
using kv::backend::kInlineStarts;

constexpr int kMaxThreads = 256;

struct StoreParams {
  const void* x;
  int64_t x_stride_seq, x_stride_tok, x_stride_head;
  __half* rows;
  int heads, dim, sinks, window;
  int64_t tokens, keep, head_sinks;  // keep: the newest tokens kept in the window; head_sinks: min(tokens, sinks)
  const int64_t* starts_dev;         // [seqs], or nullptr: starts below
  int64_t starts[kInlineStarts];
};

// blockIdx.x: candidate j of the sequence blockIdx.z's tokens: j < head_sinks is its j-th token
// (kept if its position is below sinks), else one of its last `keep`; blockIdx.y: the head.
template <typename T>
__global__ void __launch_bounds__(kMaxThreads) kernel_store_exact(const __grid_constant__ StoreParams p) {
  const int s = blockIdx.z, h = blockIdx.y;
  const int64_t start = p.starts_dev ? p.starts_dev[s] : p.starts[s];
  const int64_t c = blockIdx.x;
  const int64_t j = c < p.head_sinks ? c : p.tokens - p.keep + (c - p.head_sinks);
  const int64_t t = start + j;
  if (c < p.head_sinks && t >= p.sinks) return;
  const T* x = static_cast<const T*>(p.x) + s * p.x_stride_seq + j * p.x_stride_tok + h * p.x_stride_head;
  const int64_t r = kv::backend::exact_row(t, p.sinks, p.window);
  __half* row = p.rows + ((static_cast<int64_t>(s) * p.heads + h) * (p.sinks + p.window) + r) * p.dim;
  bool bad = false;
  for (int i = threadIdx.x; i < p.dim; i += blockDim.x) bad |= !(fabsf(to_f32(x[i])) <= kv::backend::kHalfMax);
  bad = __syncthreads_or(bad);
  for (int i = threadIdx.x; i < p.dim; i += blockDim.x) row[i] = bad ? __ushort_as_half(0x7e00) : __float2half_rn(to_f32(x[i]));
}

struct LoadParams {
  const __half* rows;
  void* out;
  int heads, dim, sinks, window;
  int64_t begin;
};

template <typename T>
__global__ void __launch_bounds__(kMaxThreads) kernel_load_exact(const __grid_constant__ LoadParams p) {
  const int64_t j = blockIdx.x;
  const int h = blockIdx.y;
  const int64_t t = p.begin + j;
  const int64_t r = kv::backend::exact_row(t, p.sinks, p.window);
  const __half* row = p.rows + (static_cast<int64_t>(h) * (p.sinks + p.window) + r) * p.dim;
  T* out = static_cast<T*>(p.out) + (j * p.heads + h) * p.dim;
  for (int i = threadIdx.x; i < p.dim; i += blockDim.x) out[i] = from_f32<T>(__half2float(row[i]));
}

int threads_for(int dim) { return std::min(kMaxThreads, std::max(32, dim)); }

}  // namespace

void kv_store_exact(const ExactArgs& a, Stream stream) {
  DeviceGuard guard(a.device);
  StoreParams p{};
  p.x = a.x;
  p.x_stride_seq = a.x_stride_seq;
  p.x_stride_tok = a.x_stride_tok;
  p.x_stride_head = a.x_stride_head;
  p.rows = reinterpret_cast<__half*>(a.rows);
  p.heads = a.heads;
  p.dim = a.dim;
  p.sinks = a.sinks;
  p.window = a.window;
  p.tokens = a.tokens;
  p.keep = std::min<int64_t>(a.tokens, a.window);
  p.head_sinks = std::min<int64_t>(a.tokens, a.sinks);
  p.starts_dev = a.starts;
  if (!a.starts)
    for (int s = 0; s < a.seqs; ++s) p.starts[s] = a.host_starts[s];
  const int64_t candidates = p.head_sinks + p.keep;
  if (candidates == 0) return;
  const dim3 grid(static_cast<unsigned>(candidates), static_cast<unsigned>(a.heads), static_cast<unsigned>(a.seqs));
  dispatch_float(a.x_dtype, "kv::append", [&]<typename T>() {
    kernel_store_exact<T><<<grid, threads_for(a.dim), 0, to_cuda(stream)>>>(p);
    FRUGAL_CUDA_CHECK_LAUNCH();
  });
}

void kv_load_exact(const ExactArgs& a, Stream stream) {
  if (a.tokens == 0) return;
  DeviceGuard guard(a.device);
  LoadParams p{};
  p.rows = reinterpret_cast<const __half*>(a.rows);
  p.out = a.out;
  p.heads = a.heads;
  p.dim = a.dim;
  p.sinks = a.sinks;
  p.window = a.window;
  p.begin = a.begin;
  const dim3 grid(static_cast<unsigned>(a.tokens), static_cast<unsigned>(a.heads));
  dispatch_float(a.out_dtype, "kv::dequantize", [&]<typename T>() {
    kernel_load_exact<T><<<grid, threads_for(a.dim), 0, to_cuda(stream)>>>(p);
    FRUGAL_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace frugal::cuda
