// Runs one decode-attention choice on the GPU: the kernel of its variant, its grid of (slice,
// K/V head × head tile, sequence), the workspace, and for a split f32 call the combine. Bytes
// floor of a call: every cached byte of the attended tokens once, B·Hkv·L·(D·(K bits + V bits)/8 + 8)
// (packed codes and the two scales).
#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/attention_backend.h"
#include "cuda/attention/params.cuh"
#include "cuda/common.cuh"

namespace frugal::cuda {

namespace {

using attention::DecodeVariant;
using attention::backend::DecodeArgs;
using decode::Launch;

Launch kernel_of(DecodeVariant variant, int dim, int dims_per_lane, int k_bits, int v_bits) {
  switch (variant) {
    case DecodeVariant::f16_wide:
      return decode::f16_wide_kernel(dim, k_bits, v_bits);
    case DecodeVariant::f16_registers:
      return decode::f16_registers_kernel(dim, k_bits, v_bits);
    default:
      return decode::f32_kernel(dim, dims_per_lane);
  }
}

// Raises the kernel's dynamic shared-memory limit to the most any of its calls uses (and, for the
// wide loop's two blocks of ~69 KB, the carveout to the smallest that holds them).
const void* prepared(const Launch& l) {
  const auto* f = reinterpret_cast<const void*>(l.fn);
  allow_dynamic_smem(f, l.smem_max, l.carveout_blocks);
  return f;
}

}  // namespace

int decode_attention_resident_blocks(DecodeVariant variant, int dim, int k_bits, int v_bits, int device) {
  DeviceGuard guard(device);
  const Launch l = kernel_of(variant, dim, attention::backend::f32_dims_per_lane(dim), k_bits, v_bits);
  return resident_blocks(prepared(l), l.threads, l.smem);
}

void decode_attention(const DecodeArgs& a, Device device, Stream stream) {
  namespace be = attention::backend;
  DeviceGuard guard(device.index);
  const cudaStream_t st = to_cuda(stream);
  const attention::DecodeChoice& c = a.choice;
  const int group = a.q_heads / a.kv_heads, tiles = be::head_tiles(group);
  const Launch launch = kernel_of(c.variant, a.dim, c.dims_per_lane, a.k.bits, a.v.bits);
  prepared(launch);

  decode::Params p{};
  p.q = a.q;
  p.q_dtype = decode::dtype_code(a.q_dtype);
  p.out_dtype = decode::dtype_code(a.out_dtype);
  p.q_stride_b = a.q_stride_b;
  p.q_stride_h = a.q_stride_h;
  p.out = a.out;
  p.kp = a.k.packed;
  p.ks = a.k.scales;
  p.ksign = a.k.signs;
  p.kcb = a.k.centroids;
  p.vp = a.v.packed;
  p.vs = a.v.scales;
  p.vsign = a.v.signs;
  p.vcb = a.v.centroids;
  p.kbits = a.k.bits;
  p.vbits = a.v.bits;
  p.q_heads = a.q_heads;
  p.kv_heads = a.kv_heads;
  p.group = group;
  p.head_tiles = tiles;
  p.splits = c.splits;
  p.dim = a.dim;
  p.capacity = a.capacity;
  p.sliding = a.sliding ? 1 : 0;
  p.tokens_per_split = c.tokens_per_split;
  p.score_scale = a.softmax_scale * decode::kLog2e / static_cast<float>(a.dim);

  // Workspace: counters and partials when split, ranges when the batch is too large for the
  // parameters (layout: be::workspace_layout; its base rounded up to be::kWorkspaceAlign).
  const bool f16 = c.variant != DecodeVariant::f32;
  const be::WorkspaceLayout lay = be::workspace_layout(a.batch, a.q_heads, a.dim, c.splits);
  uint8_t* ws = static_cast<uint8_t*>(a.workspace);
  std::optional<Scratch> scratch;  // when the caller gave no workspace: stream-ordered, from frugal's pool
  if (be::uses_workspace(a.batch, c.splits)) {
    if (ws == nullptr) ws = scratch.emplace(lay.end + be::kWorkspaceAlign, st).as<uint8_t>();
    ws = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(ws) + be::kWorkspaceAlign - 1) / be::kWorkspaceAlign *
                                    be::kWorkspaceAlign);
    // A fresh allocation: its counters must start at zero (a caller's workspace is zeroed once, when
    // it is created, and every call leaves its counters zero).
    if (scratch && c.splits > 1 && f16)
      FRUGAL_CUDA_CHECK(cudaMemsetAsync(ws + lay.counters, 0, lay.partial_o - lay.counters, st));
  }
  if (c.splits > 1) {
    p.counters = reinterpret_cast<unsigned*>(ws + lay.counters);
    p.part_o = reinterpret_cast<float*>(ws + lay.partial_o);
    p.part_ml = reinterpret_cast<float*>(ws + lay.partial_ml);
  }
  // [begin, end) pairs: in the parameters for small batches, else through the workspace.
  auto put_ranges = [&](int64_t* r) {
    for (int b = 0; b < a.batch; ++b) {
      r[2 * b] = a.begin[b];
      r[2 * b + 1] = a.end[b];
    }
  };
  if (a.batch > decode::kInlineBatch) {
    std::vector<int64_t> ranges(2 * static_cast<size_t>(a.batch));
    put_ranges(ranges.data());
    int64_t* dev = reinterpret_cast<int64_t*>(ws + lay.ranges);
    FRUGAL_CUDA_CHECK(cudaMemcpyAsync(dev, ranges.data(), lay.end - lay.ranges, cudaMemcpyHostToDevice, st));
    p.ranges_dev = dev;
  } else {
    put_ranges(p.ranges);
  }

  const dim3 grid(static_cast<unsigned>(c.splits), static_cast<unsigned>(a.kv_heads * tiles),
                  static_cast<unsigned>(a.batch));
  launch.fn<<<grid, launch.threads, launch.smem, st>>>(p);
  FRUGAL_CUDA_CHECK_LAUNCH();
  // The f32 kernel's slices are merged by a second kernel (the f16 kernel merges them in its last
  // block of each tile).
  if (c.splits > 1 && !f16) decode::launch_combine(p, a.dim, a.batch * a.q_heads, c.splits, st);
}

}  // namespace frugal::cuda
