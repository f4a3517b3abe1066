// The sparse conv's CUDA dispatcher: runs a ConvChoice (complete, accepted by can_implement: the core
// chose or checked it) over the conv's rows, with one stream-ordered workspace for the checked-map flag,
// the row order, a split launch's partials and the halo kernel's hand-off list. No kernel choice here.
#include <algorithm>
#include <climits>
#include <optional>

#include "core/sparse_conv_backend.h"
#include "core/spconv_choose.h"
#include "cuda/common.cuh"
#include "cuda/spconv/params.cuh"

namespace frugal::cuda {

namespace {

namespace sb = spconv::backend;
namespace sk = spconv_kernels;
using spconv::ConvVariant;

constexpr unsigned long long kNone = ULLONG_MAX;

// The masked-row kernels (mma, wgmma*) over the conv's rows, a launch of c.chunk_rows rows at a time
// (each sorted first where the choice sorts); workspace: spconv::workspace_bytes(a, c) bytes.
ConvVariant run_masked(const sb::ConvArgs& a, const spconv::ConvChoice& c, unsigned long long* bad, void* workspace,
                       cudaStream_t s) {
  const int64_t chunk = c.chunk_rows;
  const bool sorted = *c.sort_rows;
  char* const base = static_cast<char*>(workspace);
  auto* perm = reinterpret_cast<int32_t*>(base);
  float* part = c.splits > 1 ? reinterpret_cast<float*>(base + spconv::order_bytes(a, c)) : nullptr;
  sk::Params p{{a.feats, a.nbr, a.weight, a.bias, a.out, a.order, a.n, a.k, a.ci, a.co, 0, bad}, nullptr, 0, 0};
  if (spconv::handoff_bytes(a, c)) {
    char* h = base + spconv::order_bytes(a, c) + spconv::partial_bytes(a, c);
    p.handoff_count = reinterpret_cast<unsigned*>(h);
    p.handoff = reinterpret_cast<int32_t*>(h + spconv::kHandoffHeader);
  }
  ConvVariant ran = c.variant;
  for (int64_t r0 = 0; r0 < a.n; r0 += chunk) {
    p.row_begin = r0;
    p.rows = std::min(chunk, a.n - r0);
    if (sorted) {
      sk::launch_sort_rows(a.nbr, a.n, a.k, r0, p.rows, perm, s);
      p.perm = perm;
    }
    if (c.variant == ConvVariant::mma) {
      sk::launch_mma(p, a.dtype, c.tile_co, s);
    } else if (c.variant == ConvVariant::halo_pipe) {
      ran = sk::launch_halo_pipe(p, a.dtype, c.tile_co, s);
    } else {
      p.part = part;
      ran = sk::launch_wgmma(p, a.dtype, c.variant, c.tile_co, c.tile_rows, c.splits, s);
      if (part) sk::finish_split(p, a.dtype, c.splits, s);
    }
  }
  return ran;
}

}  // namespace

spconv::backend::ConvReport spconv_conv(const sb::ConvArgs& a, const spconv::ConvChoice& c, Stream stream) {
  DeviceGuard guard(a.device);
  const cudaStream_t s = to_cuda(stream);
  sk::ConvParams p{a.feats, a.nbr, a.weight, a.bias, a.out, a.order, a.n, a.k, a.ci, a.co, 0, nullptr};
  // One workspace: the 8-byte checked-map flag (in its own 256 bytes), then the masked-row kernels'.
  constexpr size_t kFlagBytes = 256;
  const bool masked = spconv::is_masked(c.variant);
  const size_t masked_bytes = masked ? spconv::workspace_bytes(a, c) : 0;
  const size_t ws_bytes = (a.check ? kFlagBytes : 0) + masked_bytes;
  unsigned long long host_bad = kNone;
  sb::ConvReport report;
  report.variant = c.variant;
  {
    std::optional<Scratch> ws;
    if (ws_bytes) ws.emplace(ws_bytes, s);
    if (a.check) {
      p.bad = ws->as<unsigned long long>();
      FRUGAL_CUDA_CHECK(cudaMemsetAsync(p.bad, 0xff, sizeof(unsigned long long), s));
    }
    if (masked)
      report.variant = run_masked(a, c, p.bad, masked_bytes ? ws->as<char>() + (a.check ? kFlagBytes : 0) : nullptr, s);
    else if (c.variant == ConvVariant::simt)
      sk::launch_simt(p, a.dtype, s);
    else
      sk::launch_wmma(p, a.dtype, c.tile_co, s);
    if (a.check) FRUGAL_CUDA_CHECK(cudaMemcpyAsync(&host_bad, p.bad, sizeof(host_bad), cudaMemcpyDeviceToHost, s));
  }
  if (!a.check) return report;
  FRUGAL_CUDA_CHECK(cudaStreamSynchronize(s));
  if (host_bad != kNone) report.bad_entry = static_cast<int64_t>(host_bad);
  return report;
}

}  // namespace frugal::cuda
