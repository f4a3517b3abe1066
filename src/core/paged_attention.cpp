// Paged attention's plan: validate a batch description, choose the kernels (core/paged_choose.h),
// build the work lists on the host and, on a GPU, copy them once into the plan's device buffer;
// run() then only checks its tensors and launches.
#include "frugal/paged_attention.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/device_caps.h"
#include "core/paged_backend.h"
#include "core/paged_choose.h"
#include "core/validate.h"

namespace frugal::attention {

namespace {

using backend::RowItem;
using backend::TileSeq;

constexpr const char* kPlanOp = "attention::PagedPlan";
constexpr const char* kUpdateOp = "attention::PagedPlan::update";
constexpr const char* kRunOp = "attention::PagedPlan::run";
// Parts of the plan's device buffer start on this many bytes.
constexpr size_t kPartAlign = 256;

size_t align_up(size_t x) { return (x + kPartAlign - 1) / kPartAlign * kPartAlign; }

// A validated batch: its lengths and its work lists.
struct Work {
  int batch = 0;
  int64_t total_q = 0;
  int64_t longest = 0;   // the longest sequence, L_b
  int max_q_count = 0;   // the most query tokens of one sequence, n_b
  int max_tile_q = 0;    // the most query tokens of a sequence served by the tiled kernel
  int max_item_rows = 1; // the most query rows of one row item
  std::vector<RowItem> items;
  std::vector<TileSeq> seqs;
  std::vector<int32_t> indptr, indices;
};

// Validates `batch` against a pool of `config` and builds its work lists: one row item per
// single-query sequence; a sequence of at least `tile_min` (> 1) query tokens is one tile entry,
// others row items of up to `item_rows` query rows each. Throws frugal::Error naming `op`.
Work describe(const PagedBatch& batch, const kv::PagedConfig& config, const PagedOptions& o, int tile_min,
              int item_rows, const char* op) {
  const std::vector<int64_t> lengths = kv::sequence_lengths(batch.pages, config, op);
  const std::span<const int32_t> qo = batch.qo_indptr;
  Work w;
  w.batch = batch.pages.batch();
  FRUGAL_CHECK(qo.size() == static_cast<size_t>(w.batch) + 1, invalid_argument, op,
               "qo_indptr must hold B + 1 = " << w.batch + 1 << " entries (B = " << w.batch
                                              << " sequences in the page table), got " << qo.size());
  FRUGAL_CHECK(qo[0] == 0, invalid_argument, op, "qo_indptr[0] must be 0, got " << qo[0]);
  for (int b = 0; b < w.batch; ++b) {
    const int64_t n = static_cast<int64_t>(qo[b + 1]) - qo[b];
    FRUGAL_CHECK(n >= 0, invalid_argument, op,
                 "qo_indptr must be non-decreasing, got qo_indptr[" << b << "] = " << qo[b] << " > qo_indptr[" << b + 1
                                                                    << "] = " << qo[b + 1]);
    FRUGAL_CHECK(lengths[b] < INT32_MAX, invalid_argument, op,
                 "sequence " << b << " holds " << lengths[b] << " tokens; paged attention serves fewer than 2^31");
    FRUGAL_CHECK(n <= lengths[b], invalid_argument, op,
                 "query counts past a sequence's cached length: sequence "
                     << b << " has " << n << " query tokens but " << lengths[b]
                     << " cached tokens (append the new tokens' K and V before attending)");
    w.longest = std::max(w.longest, lengths[b]);
    w.max_q_count = std::max(w.max_q_count, static_cast<int>(n));
  }
  w.total_q = qo[w.batch];
  for (int b = 0; b < w.batch; ++b) {
    const int64_t n = qo[b + 1] - qo[b];
    if (n > 1 && n >= tile_min) {
      w.seqs.push_back({b, qo[b], static_cast<int32_t>(n), static_cast<int32_t>(lengths[b])});
      w.max_tile_q = std::max(w.max_tile_q, static_cast<int>(n));
      continue;
    }
    for (int64_t j = 0; j < n; j += item_rows) {
      const int32_t rows = static_cast<int32_t>(std::min<int64_t>(item_rows, n - j));
      w.items.push_back(
          backend::row_items(b, qo[b] + static_cast<int32_t>(j), lengths[b], n, j, rows, o.causal, o.window_left));
      w.max_item_rows = std::max(w.max_item_rows, static_cast<int>(rows));
    }
  }
  w.indptr.assign(batch.pages.indptr.begin(), batch.pages.indptr.end());
  w.indices.assign(batch.pages.indices.begin(), batch.pages.indices.end());
  return w;
}

backend::CacheArgs cache_args(const Tensor& packed, const Tensor& scales, const Tensor& signs,
                              const Tensor& centroids, int bits) {
  backend::CacheArgs a;
  a.packed = packed.data_as<const uint8_t>();
  a.scales = scales.data_as<const float>();
  a.signs = signs.defined() ? signs.data_as<const float>() : nullptr;
  a.centroids = centroids.data_as<const float>();
  a.bits = bits;
  return a;
}

bool same_shape(const kv::PagedConfig& a, const kv::PagedConfig& b) {
  return a.num_kv_heads == b.num_kv_heads && a.head_dim == b.head_dim && a.page_size == b.page_size &&
         a.num_pages == b.num_pages && a.k_bits == b.k_bits && a.v_bits == b.v_bits;
}

std::string config_string(const kv::PagedConfig& c) {
  std::ostringstream os;
  os << "[heads " << c.num_kv_heads << ", head_dim " << c.head_dim << ", page_size " << c.page_size << ", "
     << c.num_pages << " pages, K" << c.k_bits << "/V" << c.v_bits << "]";
  return os.str();
}

}  // namespace

struct PagedPlan::State {
  kv::PagedConfig config;
  int q_heads = 1;
  DType dtype = DType::f32;
  PagedOptions options;
  PagedChoice choice;
  Device device;
  float scale = 1.0f;
  int64_t max_kv_len = 0;
  // What update() may bring at most (the device buffer's parts are sized for these).
  int cap_batch = 0;
  int64_t cap_total_q = 0, cap_items = 0, cap_seqs = 0, cap_indices = 0;
  int cap_tile_q = 0;
  // The current batch.
  Work work;
  // CUDA: one buffer holding [items | seqs | indptr | indices] at these byte offsets, and the
  // workspace: the row kernels' part at 0, the tiled kernel's at tiles_offset.
  Tensor buffer;
  size_t off_items = 0, off_seqs = 0, off_indptr = 0, off_indices = 0;
  Tensor workspace;
  size_t rows_workspace = 0, tiles_workspace = 0, tiles_offset = 0;

  bool tiled() const { return choice.tiles == PagedVariant::tiles_f16; }
  // The fewest query tokens of a sequence the tiled kernel takes under choice c (INT_MAX: none).
  static int tiled_from(const PagedChoice& c) {
    return c.tiles == PagedVariant::tiles_f16 ? c.tile_min_queries : INT_MAX;
  }
  int item_rows = 1;  // query rows a row item holds (backend::rows_per_item)

  // The kernel arguments without the tensors of a call (the work lists' pointers included).
  backend::PagedArgs args() const {
    backend::PagedArgs a;
    a.q_heads = q_heads;
    a.kv_heads = config.num_kv_heads;
    a.dim = config.head_dim;
    a.page_size = config.page_size;
    a.slots = config.num_pages * config.page_size;
    a.num_items = static_cast<int>(work.items.size());
    a.max_rows = static_cast<int>(cap_total_q);
    a.item_rows = work.max_item_rows;
    a.num_seqs = static_cast<int>(work.seqs.size());
    a.max_q_count = work.max_tile_q;
    a.max_kv_len = max_kv_len;
    a.causal = options.causal;
    a.window_left = options.window_left;
    a.softmax_scale = scale;
    a.choice = choice;
    a.device = device.index;
    if (device.is_cpu()) {
      a.items = work.items.data();
      a.seqs = work.seqs.data();
      a.kv_indptr = work.indptr.data();
      a.kv_indices = work.indices.data();
    } else {
      uint8_t* base = buffer.data_as<uint8_t>();
      a.items = reinterpret_cast<const RowItem*>(base + off_items);
      a.seqs = reinterpret_cast<const TileSeq*>(base + off_seqs);
      a.kv_indptr = reinterpret_cast<const int32_t*>(base + off_indptr);
      a.kv_indices = reinterpret_cast<const int32_t*>(base + off_indices);
    }
    return a;
  }

  // The work lists of `w` into the device buffer (stream-ordered, no host wait).
  void upload(const Work& w, Stream stream) const {
    uint8_t* base = buffer.data_as<uint8_t>();
    const auto put = [&](size_t offset, const void* src, size_t bytes) {
      if (bytes) cuda::memcpy_to_device_async(base + offset, src, bytes, stream);
    };
    put(off_items, w.items.data(), w.items.size() * sizeof(RowItem));
    put(off_seqs, w.seqs.data(), w.seqs.size() * sizeof(TileSeq));
    put(off_indptr, w.indptr.data(), w.indptr.size() * sizeof(int32_t));
    put(off_indices, w.indices.data(), w.indices.size() * sizeof(int32_t));
  }

  // update()'s limits: what the device buffer and the workspace were sized for.
  void check_fits(const Work& w, const char* op) const {
    FRUGAL_CHECK(w.batch <= cap_batch, invalid_argument, op,
                 "the batch has " << w.batch << " sequences; the plan was made for at most " << cap_batch);
    FRUGAL_CHECK(w.total_q <= cap_total_q, invalid_argument, op,
                 "the batch has " << w.total_q << " query rows; the plan was made for at most " << cap_total_q);
    FRUGAL_CHECK(w.longest <= max_kv_len, invalid_argument, op,
                 "a sequence holds " << w.longest << " tokens, more than the plan's max_kv_len " << max_kv_len
                                     << " (set PagedOptions::max_kv_len when making the plan)");
    FRUGAL_CHECK(static_cast<int64_t>(w.indices.size()) <= cap_indices, invalid_argument, op,
                 "the page table holds " << w.indices.size() << " page indices; the plan was made for at most "
                                         << cap_indices);
    FRUGAL_CHECK(w.max_tile_q <= cap_tile_q, invalid_argument, op,
                 "a sequence has " << w.max_tile_q << " query tokens for the tiled kernel; the plan was made for at most "
                                   << cap_tile_q << " (its grid and workspace)");
    FRUGAL_CHECK(static_cast<int64_t>(w.items.size()) <= cap_items && static_cast<int64_t>(w.seqs.size()) <= cap_seqs,
                 internal, op, "the work lists outgrew the plan's buffer");
  }
};

PagedPlan::PagedPlan(const kv::PagedCache& cache, int q_heads, DType q_dtype, const PagedBatch& batch,
                     const PagedOptions& options, Stream stream)
    : state_(std::make_unique<State>()) {
  constexpr const char* op = kPlanOp;
  State& s = *state_;
  const kv::PagedConfig& c = cache.config();
  FRUGAL_CHECK(q_heads >= 1 && q_heads % c.num_kv_heads == 0, invalid_argument, op,
               "the query heads Hq must be a positive multiple of the K/V heads Hkv = " << c.num_kv_heads
                                                                                        << ", got Hq = " << q_heads);
  FRUGAL_CHECK(q_dtype == DType::f32 || q_dtype == DType::f16 || q_dtype == DType::bf16, invalid_argument, op,
               "q must be f32, f16 or bf16, got " << to_string(q_dtype));
  FRUGAL_CHECK(options.window_left >= -1, invalid_argument, op,
               "window_left must be -1 (no window) or at least 0, got " << options.window_left);
  FRUGAL_CHECK(options.math == Math::automatic || options.math == Math::f32 || options.math == Math::f16,
               invalid_argument, op, "options.math must be automatic, f32 or f16, got " << static_cast<int>(options.math));
  FRUGAL_CHECK(options.max_kv_len >= 0 && options.max_kv_len < INT32_MAX, invalid_argument, op,
               "max_kv_len must be 0 (this batch's longest) or a length below 2^31, got " << options.max_kv_len);
  FRUGAL_CHECK(options.num_splits >= 0, invalid_argument, op,
               "num_splits must be 0 (automatic) or positive, got " << options.num_splits);
  s.scale = options.softmax_scale.value_or(static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim))));
  FRUGAL_CHECK(std::isfinite(s.scale), invalid_argument, op, "softmax_scale must be finite, got " << s.scale);
  s.config = c;
  s.q_heads = q_heads;
  s.dtype = q_dtype;
  s.options = options;
  s.device = cache.device();
  detail::check_device_usable(s.device, op);

  // Validate the batch (the work lists come once the choice says who serves the multi-query rows).
  const Work all_rows = describe(batch, c, options, INT_MAX, 1, op);
  FRUGAL_CHECK(options.max_kv_len == 0 || options.max_kv_len >= all_rows.longest, invalid_argument, op,
               "max_kv_len = " << options.max_kv_len << " is shorter than this batch's longest sequence ("
                               << all_rows.longest << " tokens)");
  s.max_kv_len = options.max_kv_len > 0 ? options.max_kv_len : all_rows.longest;

  PagedProblem p;
  p.q_heads = q_heads;
  p.kv_heads = c.num_kv_heads;
  p.dim = c.head_dim;
  p.k_bits = c.k_bits;
  p.v_bits = c.v_bits;
  p.q_dtype = q_dtype;
  p.math = options.math;
  // The slices must cover any row of any batch update() accepts: a causal window bounds a row's range.
  p.max_len = options.causal && options.window_left >= 0 ? std::min(s.max_kv_len, options.window_left + 1)
                                                         : s.max_kv_len;
  p.max_kv_len = s.max_kv_len;
  p.rows = options.rows;
  p.tiles = options.tiles;
  p.num_splits = options.num_splits;
  const DeviceCaps caps = s.device.is_cpu() ? DeviceCaps{} : cuda::device_caps(s.device.index);
  // The variants do not depend on the item count; the slices do, and on the row kernel's occupancy.
  p.row_items = static_cast<int64_t>(all_rows.items.size());
  PagedChoice first = choose_paged(p, caps, 1);
  s.item_rows =
      backend::rows_per_item(first.rows, c.head_dim, q_heads / c.num_kv_heads, options.causal, options.window_left);
  s.work = first.tiles == PagedVariant::tiles_f16 || s.item_rows > 1
               ? describe(batch, c, options, s.tiled_from(first), s.item_rows, op)
               : all_rows;
  p.row_items = static_cast<int64_t>(s.work.items.size());
  const int64_t splits_cap =
      backend::max_splits(row_items_problem(p, first.rows).batch, c.num_kv_heads, q_heads / c.num_kv_heads,
                          std::max<int64_t>(1, s.max_kv_len));
  FRUGAL_CHECK(options.num_splits <= splits_cap, invalid_argument, op,
               "num_splits must be 0 (automatic) or 1.." << splits_cap << " for this plan, got " << options.num_splits);
  const int resident = s.device.is_cpu() ? 0
                                         : cuda::decode_attention_resident_blocks(decode_variant_of(first.rows), c.head_dim,
                                                                                  c.k_bits, c.v_bits, s.device.index);
  s.choice = choose_paged(p, caps, resident);

  // What update() may bring: as many sequences and query rows, each sequence within max_kv_len
  // (so within ⌈max_kv_len / page_size⌉ pages), and for the tiled kernel as many query tokens a sequence.
  const Work& w = s.work;
  s.cap_batch = w.batch;
  s.cap_total_q = w.total_q;
  s.cap_items = w.total_q;
  s.cap_seqs = s.tiled() ? w.batch : 0;
  s.cap_tile_q = w.max_tile_q;
  const int64_t pages_per_seq = (s.max_kv_len + c.page_size - 1) / c.page_size;
  s.cap_indices = std::max<int64_t>(static_cast<int64_t>(w.indices.size()),
                                    std::min<int64_t>(INT32_MAX, detail::checked_mul(w.batch, pages_per_seq, op,
                                                                                     "the plan's page indices")));
  if (s.device.is_cpu()) return;

  s.off_items = 0;
  s.off_seqs = align_up(s.off_items + s.cap_items * sizeof(RowItem));
  s.off_indptr = align_up(s.off_seqs + s.cap_seqs * sizeof(TileSeq));
  s.off_indices = align_up(s.off_indptr + (s.cap_batch + 1) * sizeof(int32_t));
  const size_t bytes = align_up(s.off_indices + s.cap_indices * sizeof(int32_t));
  s.buffer = Tensor::empty({static_cast<int64_t>(bytes)}, DType::u8, s.device);
  // The workspace for the largest work update() may bring.
  backend::PagedArgs most = s.args();
  most.num_items = static_cast<int>(s.cap_items);
  most.num_seqs = static_cast<int>(s.cap_seqs);
  most.max_q_count = s.cap_tile_q;
  s.rows_workspace = s.cap_items > 0 ? cuda::paged_rows_workspace_bytes(most) : 0;
  s.tiles_workspace = s.cap_seqs > 0 ? cuda::paged_tiles_workspace_bytes(most) : 0;
  s.tiles_offset = align_up(s.rows_workspace);
  const size_t ws = s.tiles_workspace > 0 ? s.tiles_offset + s.tiles_workspace : s.rows_workspace;
  if (ws > 0) {
    const int64_t shape[] = {static_cast<int64_t>(ws)};
    s.workspace = Tensor::zeros(shape, DType::u8, s.device, stream);
  }
  s.upload(w, stream);
}

PagedPlan::~PagedPlan() = default;
PagedPlan::PagedPlan(PagedPlan&&) noexcept = default;
PagedPlan& PagedPlan::operator=(PagedPlan&&) noexcept = default;

void PagedPlan::update(const PagedBatch& batch, Stream stream) {
  State& s = *state_;
  Work w = describe(batch, s.config, s.options, s.tiled_from(s.choice), s.item_rows, kUpdateOp);
  s.check_fits(w, kUpdateOp);
  if (s.device.is_cuda()) s.upload(w, stream);
  s.work = std::move(w);
}

void PagedPlan::run(const TensorView& q, const kv::PagedCache& cache, const TensorView& out, const TensorView& lse,
                    Stream stream) const {
  constexpr const char* op = kRunOp;
  const State& s = *state_;
  const kv::PagedConfig& c = s.config;
  FRUGAL_CHECK(same_shape(cache.config(), c), invalid_argument, op,
               "the cache " << config_string(cache.config()) << " is not the plan's " << config_string(c));
  FRUGAL_CHECK(cache.device() == s.device, invalid_argument, op,
               "the cache is on " << to_string(cache.device()) << " but the plan on " << to_string(s.device));
  const int64_t total_q = s.work.total_q;
  detail::check_tensor(q, op, "q", 3, {s.dtype});
  detail::check_shape(q, op, "q", {total_q, s.q_heads, c.head_dim});
  FRUGAL_CHECK(q.stride(2) == 1, invalid_argument, op,
               "the last dimension of q must be contiguous, got stride " << q.stride(2));
  FRUGAL_CHECK(q.device == s.device, invalid_argument, op,
               "q is on " << to_string(q.device) << " but the plan on " << to_string(s.device));
  detail::check_tensor(out, op, "out", 3, {DType::f32, DType::f16, DType::bf16});
  FRUGAL_CHECK(out.dtype == s.dtype || out.dtype == DType::f32, invalid_argument, op,
               "out must have q's dtype (" << to_string(s.dtype) << ") or f32, got " << to_string(out.dtype));
  detail::check_shape(out, op, "out", {total_q, s.q_heads, c.head_dim});
  detail::check_contiguous(out, op, "out");
  detail::check_same_device(q, out, op, "q", "out");
  const bool with_lse = lse.rank != 0 || lse.data != nullptr;
  if (with_lse) {
    detail::check_tensor(lse, op, "lse", 2, {DType::f32});
    detail::check_shape(lse, op, "lse", {total_q, s.q_heads});
    detail::check_contiguous(lse, op, "lse");
    detail::check_same_device(q, lse, op, "q", "lse");
  }
  if (total_q == 0) return;

  backend::PagedArgs a = s.args();
  a.q = q.data;
  a.q_dtype = q.dtype;
  a.q_stride_row = q.stride(0);
  a.q_stride_h = q.stride(1);
  a.out = out.data;
  a.out_dtype = out.dtype;
  a.lse = with_lse ? lse.data_as<float>() : nullptr;
  a.k = cache_args(cache.k_packed(), cache.k_scales(), cache.k_signs(), cache.k_centroids(), c.k_bits);
  a.v = cache_args(cache.v_packed(), cache.v_scales(), cache.v_signs(), cache.v_centroids(), c.v_bits);
  if (s.device.is_cpu()) {
    cpu::paged_attention(a);
    return;
  }
  uint8_t* ws = s.workspace.defined() ? s.workspace.data_as<uint8_t>() : nullptr;
  if (a.num_items > 0) {
    backend::PagedArgs r = a;
    r.workspace = s.rows_workspace ? ws : nullptr;
    r.workspace_bytes = s.rows_workspace;
    cuda::paged_rows(r, stream);
  }
  if (a.num_seqs > 0) {
    backend::PagedArgs t = a;
    t.workspace = s.tiles_workspace ? ws + s.tiles_offset : nullptr;
    t.workspace_bytes = s.tiles_workspace;
    cuda::paged_tiles(t, stream);
  }
}

const PagedChoice& PagedPlan::choice() const { return state_->choice; }
int PagedPlan::batch() const { return state_->work.batch; }
int64_t PagedPlan::total_q() const { return state_->work.total_q; }
size_t PagedPlan::workspace_bytes() const { return state_->workspace.defined() ? state_->workspace.nbytes() : 0; }

void paged_attention(const TensorView& q, const kv::PagedCache& cache, const PagedBatch& batch, const TensorView& out,
                     const TensorView& lse, const PagedOptions& options, Stream stream) {
  detail::check_tensor(q, "attention::paged_attention", "q", 3, {DType::f32, DType::f16, DType::bf16});
  const PagedPlan plan(cache, static_cast<int>(q.size(1)), q.dtype, batch, options, stream);
  plan.run(q, cache, out, lse, stream);
}

}  // namespace frugal::attention
