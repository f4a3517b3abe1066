// Runs one decode-attention choice on the GPU: the kernel of its variant, its grid of (slice,
// K/V head × head tile, sequence), the workspace, and for a split f32 call the combine. Bytes
// floor of a call: every cached byte of the attended tokens once, B·Hkv·L·(D·(K bits + V bits)/8 +
// sK + sV) (packed codes and the two scales, sK and sV bytes: 4 for f32, 2 for f16).
#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/attention_backend.h"
#include "core/paged_backend.h"
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

namespace {

// The fields of a call's Params that both layouts fill the same way.
decode::Params common_params(const void* q, DType q_dtype, void* out, DType out_dtype, const attention::backend::CacheArgs& k,
                             const attention::backend::CacheArgs& v, int q_heads, int kv_heads, int dim,
                             const attention::DecodeChoice& c, float softmax_scale) {
  decode::Params p{};
  p.q = q;
  p.q_dtype = decode::dtype_code(q_dtype);
  p.out_dtype = decode::dtype_code(out_dtype);
  p.out = out;
  p.kp = k.packed;
  p.ks = scale_ptr(k.scales, k.scales_f16);
  p.ksign = k.signs;
  p.kcb = k.centroids;
  p.vp = v.packed;
  p.vs = scale_ptr(v.scales, v.scales_f16);
  p.vsign = v.signs;
  p.vcb = v.centroids;
  p.kbits = k.bits;
  p.vbits = v.bits;
  p.q_heads = q_heads;
  p.kv_heads = kv_heads;
  p.group = q_heads / kv_heads;
  p.head_tiles = attention::backend::head_tiles(p.group);
  p.splits = c.splits;
  p.dim = dim;
  p.tokens_per_split = c.tokens_per_split;
  p.score_scale = softmax_scale * decode::kLog2e / static_cast<float>(dim);
  return p;
}

// Points p at the counters and partials of a split call in the workspace `ws` (rounded up to
// kWorkspaceAlign; allocated from frugal's pool into `scratch` when null, its counters zeroed) and
// returns the aligned base.
uint8_t* attach_workspace(decode::Params& p, uint8_t* ws, const attention::backend::WorkspaceLayout& lay, bool needed,
                          bool f16, std::optional<Scratch>& scratch, cudaStream_t st) {
  namespace be = attention::backend;
  if (!needed) return ws;
  if (ws == nullptr) ws = scratch.emplace(lay.end + be::kWorkspaceAlign, st).as<uint8_t>();
  ws = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(ws) + be::kWorkspaceAlign - 1) / be::kWorkspaceAlign *
                                  be::kWorkspaceAlign);
  // A fresh allocation: its counters must start at zero (a caller's workspace is zeroed once, when
  // it is created, and every call leaves its counters zero).
  if (scratch && p.splits > 1 && f16)
    FRUGAL_CUDA_CHECK(cudaMemsetAsync(ws + lay.counters, 0, lay.partial_o - lay.counters, st));
  if (p.splits > 1) {
    p.counters = reinterpret_cast<unsigned*>(ws + lay.counters);
    p.part_o = reinterpret_cast<float*>(ws + lay.partial_o);
    p.part_ml = reinterpret_cast<float*>(ws + lay.partial_ml);
  }
  return ws;
}

// The grid of (slice, K/V head × head tile, sequence or item), and the f32 kernel's combine.
void launch_choice(const decode::Params& p, const Launch& launch, int rows, bool f16, cudaStream_t st) {
  const dim3 grid(static_cast<unsigned>(p.splits), static_cast<unsigned>(p.kv_heads * p.head_tiles),
                  static_cast<unsigned>(rows));
  launch.fn<<<grid, launch.threads, launch.smem, st>>>(p);
  FRUGAL_CUDA_CHECK_LAUNCH();
  // The f32 kernel's slices are merged by a second kernel (the f16 kernel merges them in its last
  // block of each tile).
  if (p.splits > 1 && !f16) decode::launch_combine(p, p.dim, rows * p.q_heads, p.splits, st);
}

}  // namespace

void decode_attention(const DecodeArgs& a, Device device, Stream stream) {
  namespace be = attention::backend;
  DeviceGuard guard(device.index);
  const cudaStream_t st = to_cuda(stream);
  const attention::DecodeChoice& c = a.choice;
  const Launch launch = kernel_of(c.variant, a.dim, c.dims_per_lane, a.k.bits, a.v.bits);
  prepared(launch);

  decode::Params p =
      common_params(a.q, a.q_dtype, a.out, a.out_dtype, a.k, a.v, a.q_heads, a.kv_heads, a.dim, c, a.softmax_scale);
  p.q_stride_b = a.q_stride_b;
  p.q_stride_h = a.q_stride_h;
  p.capacity = a.capacity;
  p.sliding = a.sliding ? 1 : 0;

  // Workspace: counters and partials when split, ranges when the batch is too large for the
  // parameters (layout: be::workspace_layout; its base rounded up to be::kWorkspaceAlign).
  const bool f16 = c.variant != DecodeVariant::f32;
  const bool exact = a.exact != nullptr;
  const be::WorkspaceLayout lay = be::workspace_layout(a.batch, a.q_heads, a.dim, c.splits, exact);
  std::optional<Scratch> scratch;  // when the caller gave no workspace: stream-ordered, from frugal's pool
  uint8_t* ws = attach_workspace(p, static_cast<uint8_t*>(a.workspace), lay, be::uses_workspace(a.batch, c.splits, exact),
                                 f16, scratch, st);
  // With exact rows the codes' attention goes to the workspace (f32, with its LSE) for the merge.
  float* part_out = exact ? reinterpret_cast<float*>(ws + lay.exact_out) : nullptr;
  float* part_lse = exact ? reinterpret_cast<float*>(ws + lay.exact_lse) : nullptr;
  int64_t* exact_ranges = exact && a.batch > decode::kInlineBatch ? reinterpret_cast<int64_t*>(ws + lay.exact_ranges) : nullptr;
  if (exact) {
    p.out = part_out;
    p.out_dtype = decode::dtype_code(DType::f32);
    p.lse = part_lse;
    if (exact_ranges) decode::upload_exact_ranges(a, exact_ranges, st);
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
    FRUGAL_CUDA_CHECK(
        cudaMemcpyAsync(dev, ranges.data(), 2 * sizeof(int64_t) * a.batch, cudaMemcpyHostToDevice, st));
    p.ranges_dev = dev;
  } else {
    put_ranges(p.ranges);
  }
  launch_choice(p, launch, a.batch, f16, st);
  if (exact) decode::launch_exact(a, part_out, part_lse, exact_ranges, st);
}

// ---- the paged row kernels --------------------------------------------------------------------

namespace {

// The decode choice the paged row variant runs: the f32 kernel, or the f16 kernel of the decode
// rule (the wide-table loop at D = 64 and 128, the register loop elsewhere).
attention::DecodeChoice row_choice(const attention::backend::PagedArgs& a) {
  attention::DecodeChoice c;
  c.splits = a.choice.splits;
  c.tokens_per_split = a.choice.tokens_per_split;
  if (a.choice.rows == attention::PagedVariant::rows_f32) {
    c.variant = DecodeVariant::f32;
    c.dims_per_lane = attention::backend::f32_dims_per_lane(a.dim);
  } else {
    c.variant = attention::backend::rows_f16_wide(a.dim) ? DecodeVariant::f16_wide : DecodeVariant::f16_registers;
  }
  return c;
}

Launch paged_kernel_of(const attention::DecodeChoice& c, int dim, int k_bits, int v_bits, bool multi) {
  switch (c.variant) {
    case DecodeVariant::f16_wide:
      return decode::f16_wide_paged_kernel(dim, k_bits, v_bits, multi);
    case DecodeVariant::f16_registers:
      return decode::f16_registers_paged_kernel(dim, k_bits, v_bits);
    default:
      return decode::f32_kernel(dim, c.dims_per_lane);  // one kernel serves both layouts
  }
}

}  // namespace

// The row kernels' workspace holds a partial state per (query row, head) and split, laid out for
// rows_workspace_rows (its counters zero where the last call left them).
size_t paged_rows_workspace_bytes(const attention::backend::PagedArgs& a) {
  namespace be = attention::backend;
  if (a.num_items == 0) return 0;
  return be::workspace_bytes(be::rows_workspace_rows(a), a.q_heads, a.dim, a.choice.splits);
}

void paged_rows(const attention::backend::PagedArgs& a, Stream stream) {
  namespace be = attention::backend;
  if (a.num_items == 0) return;
  DeviceGuard guard(a.device);
  const cudaStream_t st = to_cuda(stream);
  const attention::DecodeChoice c = row_choice(a);
  FRUGAL_CHECK(a.item_rows == 1 || c.variant == DecodeVariant::f16_wide, internal, "attention::PagedPlan::run",
               "items of " << a.item_rows << " query rows need the wide-table row kernel (head_dim 64 or 128)");
  const Launch launch = paged_kernel_of(c, a.dim, a.k.bits, a.v.bits, a.item_rows > 1);
  prepared(launch);
  decode::Params p =
      common_params(a.q, a.q_dtype, a.out, a.out_dtype, a.k, a.v, a.q_heads, a.kv_heads, a.dim, c, a.softmax_scale);
  p.q_stride_b = a.q_stride_row;
  p.q_stride_h = a.q_stride_h;
  p.capacity = a.slots;
  p.items = a.items;
  p.kv_indptr = a.kv_indptr;
  p.kv_indices = a.kv_indices;
  p.page_shift = __builtin_ctz(static_cast<unsigned>(a.page_size));
  p.lse = a.lse;
  const bool f16 = c.variant != DecodeVariant::f32;
  FRUGAL_CHECK(c.splits == 1 || a.workspace != nullptr, internal, "attention::PagedPlan::run",
               "a split row call needs the plan's workspace");
  const be::WorkspaceLayout lay = be::workspace_layout(be::rows_workspace_rows(a), a.q_heads, a.dim, c.splits);
  std::optional<Scratch> none;
  attach_workspace(p, static_cast<uint8_t*>(a.workspace), lay, c.splits > 1, f16, none, st);
  launch_choice(p, launch, a.num_items, f16, st);
}

}  // namespace frugal::cuda
