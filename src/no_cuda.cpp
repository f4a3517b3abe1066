// What the CUDA entry points do in a build without CUDA: a clear frugal::Error naming the op.
// Every function declared in src/cuda/*.h gets its stub here.
#include "core/backend.h"
#include "core/device_caps.h"
#include "frugal/error.h"
#include "frugal/runtime.h"

namespace frugal {

bool built_with_cuda() { return false; }
std::string built_cuda_archs() { return ""; }
std::string built_cuda_ptx() { return ""; }

}  // namespace frugal

#define FRUGAL_NO_CUDA(op) \
  FRUGAL_FAIL(unsupported, op, "this build of frugal has no CUDA backend (configure with -DFRUGAL_CUDA=ON where nvcc exists)")

namespace frugal::cuda {

void* device_malloc(size_t, int) { FRUGAL_NO_CUDA("Tensor::empty"); }
void device_free(void*, int) noexcept {}
void memcpy(void*, const void*, size_t, CopyKind, Stream) { FRUGAL_NO_CUDA("copy"); }
void memcpy_to_device_async(void*, const void*, size_t, Stream) { FRUGAL_NO_CUDA("copy"); }
void memset_zero(void*, size_t, Stream) { FRUGAL_NO_CUDA("Tensor::zeros"); }
int device_count() noexcept { return 0; }
std::string device_name(int) { FRUGAL_NO_CUDA("device_name"); }
void synchronize(int) { FRUGAL_NO_CUDA("synchronize"); }
void require_device(const char* op, int) { FRUGAL_NO_CUDA(op); }
DeviceCaps device_caps(int) { FRUGAL_NO_CUDA("device_caps"); }

}  // namespace frugal::cuda

// ---- KV cache (src/cuda/kv/) ----
#include "core/kv_backend.h"

namespace frugal::cuda {
void kv_append(const kv::backend::AppendArgs&, Stream) { FRUGAL_NO_CUDA("kv::append"); }
void kv_dequantize(const kv::backend::DequantizeArgs&, Stream) { FRUGAL_NO_CUDA("kv::dequantize"); }
void hadamard_transform(const float*, float*, int64_t, int, int, Stream) { FRUGAL_NO_CUDA("kv::hadamard_transform"); }
void kv_store_exact(const kv::backend::ExactArgs&, Stream) { FRUGAL_NO_CUDA("kv::append"); }
void kv_load_exact(const kv::backend::ExactArgs&, Stream) { FRUGAL_NO_CUDA("kv::dequantize"); }
}  // namespace frugal::cuda

// ---- sparse conv (src/cuda/spconv/) ----
#include "core/sparse_conv_backend.h"

namespace frugal::cuda {
spconv::backend::MapStatus spconv_build_map(const spconv::backend::MapArgs&, Stream) {
  FRUGAL_NO_CUDA("spconv::build_kernel_map");
}
spconv::backend::MapStatus spconv_check_map(const int32_t*, int64_t, int, int, Stream) {
  FRUGAL_NO_CUDA("spconv::check_kernel_map");
}
void spconv_map_by_row(const int32_t*, const int32_t*, int32_t*, int64_t, int, int, Stream) {
  FRUGAL_NO_CUDA("spconv::map_by_row");
}
spconv::backend::ConvReport spconv_conv(const spconv::backend::ConvArgs&, const spconv::ConvChoice&, Stream) {
  FRUGAL_NO_CUDA("spconv::submanifold_conv");
}
}  // namespace frugal::cuda

// ---- decode attention (src/cuda/attention/launch.cu) ----
#include "core/attention_backend.h"

namespace frugal::cuda {
void decode_attention(const attention::backend::DecodeArgs&, Device, Stream) {
  FRUGAL_NO_CUDA("attention::decode_attention");
}
int decode_attention_resident_blocks(attention::DecodeVariant, int, int, int, int) {
  FRUGAL_NO_CUDA("attention::decode_attention");
}
}  // namespace frugal::cuda

// ---- sparse conv backward (src/cuda/spconv/wgrad.cu) ----
namespace frugal::cuda {
spconv::backend::ConvReport spconv_dgrad(const spconv::backend::ConvArgs&, const spconv::ConvChoice&, Stream) {
  FRUGAL_NO_CUDA("spconv::submanifold_conv_backward");
}
void spconv_wgrad(const spconv::backend::WgradArgs&, const spconv::WgradChoice&, Stream) {
  FRUGAL_NO_CUDA("spconv::submanifold_conv_backward");
}
}  // namespace frugal::cuda

// ---- paged attention (src/cuda/attention/paged_rows.cu, paged_tiles.cu) ----
#include "core/paged_backend.h"

namespace frugal::cuda {
void paged_rows(const attention::backend::PagedArgs&, Stream) { FRUGAL_NO_CUDA("attention::paged_attention"); }
void paged_tiles(const attention::backend::PagedArgs&, Stream) { FRUGAL_NO_CUDA("attention::paged_attention"); }
size_t paged_rows_workspace_bytes(const attention::backend::PagedArgs&) { return 0; }
size_t paged_tiles_workspace_bytes(const attention::backend::PagedArgs&) { return 0; }
}  // namespace frugal::cuda
