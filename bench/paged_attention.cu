// Benchmark: attention over the paged 4-bit cache (attention::PagedPlan::run) on the serving shapes —
// decode at B ∈ {1, 8, 32} × L ∈ {4K, 32K, 128K} × D ∈ {64, 128, 256} (Hq = 32, Hkv = 8) beside the
// per-sequence layout's decode_attention on the same shapes and the stream floor of the call's own
// bytes; speculative decode (4 and 8 query tokens at B = 8, L = 32K); prefill and chunked prefill (512–8192
// query tokens over a cached prefix of 0–32K). bench/paged_sdpa.py times torch SDPA (flash) over fp16
// K/V of the same shapes and prints the side-by-side table from this program's JSON.
//
// Pages are handed out in a random order (a serving stack's allocator after some churn), the pools
// filled with random bytes and scales (any byte is valid codes). Timing as bench/decode_attention.cu:
// a 512 MB read evicts L2 before every timed call, CUDA events, median after warm-up.
//
// Usage: paged_attention [--json PATH] [--quick] [--kind decode|speculative|prefill]
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cache_fill.cuh"
#include "frugal/attention.h"
#include "frugal/kv_cache.h"
#include "frugal/paged_attention.h"
#include "frugal/paged_cache.h"
#include "frugal/runtime.h"

using namespace frugal;

namespace {

struct Row {
  std::string kind;  // decode | speculative | prefill
  int B, Hq, Hkv, D, page;
  int64_t L;     // cached tokens per sequence, the new ones included
  int64_t n;     // query tokens per sequence
  int kbits, vbits;
  std::string choice;
  double ms = 0, per_seq_ms = 0, floor_ms = 0, bytes = 0;
  double rows_ms = 0, tiles_ms = 0;  // speculative: the call forced to row items of rows_f16 / to tiles_f16
};

// A pool holding B sequences of L tokens, their pages in a random order.
struct PagedSetup {
  kv::PagedCache cache;
  std::vector<int32_t> indptr, indices, last;
  std::vector<int32_t> qo;
  kv::PageTable table() const { return {indptr, indices, last}; }
  attention::PagedBatch batch() const { return {qo, table()}; }
};

PagedSetup make_paged(const Row& r, uint64_t seed) {
  const int64_t pages_per_seq = (r.L + r.page - 1) / r.page;
  kv::PagedConfig c;
  c.num_kv_heads = r.Hkv;
  c.head_dim = r.D;
  c.page_size = r.page;
  c.num_pages = pages_per_seq * r.B;
  c.k_bits = r.kbits;
  c.v_bits = r.vbits;
  c.k_sign_seed = seed;
  c.v_sign_seed = seed + 1;
  PagedSetup s{kv::PagedCache(c, Device::cuda()), {}, {}, {}, {}};
  std::vector<int32_t> perm(c.num_pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937_64(seed));
  s.indptr.push_back(0);
  s.qo.push_back(0);
  for (int b = 0; b < r.B; ++b) {
    for (int64_t i = 0; i < pages_per_seq; ++i) s.indices.push_back(perm[b * pages_per_seq + i]);
    s.indptr.push_back(static_cast<int32_t>(s.indices.size()));
    s.last.push_back(static_cast<int32_t>(r.L - (pages_per_seq - 1) * r.page));
    s.qo.push_back(static_cast<int32_t>(s.qo.back() + r.n));
  }
  const kv::PagedCache& k = s.cache;
  kernel_fill_bytes<<<1024, 256>>>(static_cast<uint8_t*>(k.k_packed().data()), k.k_packed().nbytes(), seed);
  kernel_fill_bytes<<<1024, 256>>>(static_cast<uint8_t*>(k.v_packed().data()), k.v_packed().nbytes(), seed + 7);
  kernel_fill_scales<<<1024, 256>>>(k.k_scales().data_as<float>(), k.k_scales().numel(), seed, std::sqrt(float(r.D)));
  kernel_fill_scales<<<1024, 256>>>(k.v_scales().data_as<float>(), k.v_scales().numel(), seed + 3, std::sqrt(float(r.D)));
  CHECK(cudaGetLastError());
  return s;
}

kv::Cache per_sequence_cache(const Row& r, int bits, uint64_t seed) {
  kv::CacheConfig c;
  c.batch = r.B;
  c.num_kv_heads = r.Hkv;
  c.head_dim = r.D;
  c.capacity = r.L;
  c.bits = bits;
  c.sign_seed = seed;
  kv::Cache cache(c, Device::cuda());
  kernel_fill_bytes<<<1024, 256>>>(static_cast<uint8_t*>(cache.packed().data()), cache.packed().nbytes(), seed);
  kernel_fill_scales<<<1024, 256>>>(cache.scales().data_as<float>(), cache.scales().numel(), seed, std::sqrt(float(r.D)));
  CHECK(cudaGetLastError());
  auto& pos = const_cast<std::vector<int64_t>&>(cache.write_positions());  // benchmark-only shortcut
  std::fill(pos.begin(), pos.end(), r.L);
  return cache;
}

Tensor random_q(int64_t rows, int Hq, int D, uint64_t seed) {
  Tensor q = Tensor::empty({rows, Hq, D}, DType::f16, Device::cuda());
  kernel_fill_half<<<1024, 256>>>(q.data_as<__half>(), q.numel(), seed);
  CHECK(cudaGetLastError());
  return q;
}

void run_row(Row& r, Flusher& flush, bool with_floor) {
  PagedSetup s = make_paged(r, 1234 + r.D + r.L);
  const int64_t total_q = r.n * r.B;
  Tensor q = random_q(total_q, r.Hq, r.D, 99);
  Tensor out = Tensor::empty({total_q, r.Hq, r.D}, DType::f16, Device::cuda());
  attention::PagedPlan plan(s.cache, r.Hq, DType::f16, s.batch());
  r.choice = attention::to_string(plan.choice());
  r.ms = time_median_ms(flush, [&] { plan.run(q, s.cache, out); }, 3, 20);
  if (r.kind == "speculative") {
    auto forced = [&](attention::PagedVariant v) {
      attention::PagedOptions o;
      o.tiles = v;
      attention::PagedPlan forced_plan(s.cache, r.Hq, DType::f16, s.batch(), o);
      return time_median_ms(flush, [&] { forced_plan.run(q, s.cache, out); }, 3, 20);
    };
    r.rows_ms = forced(attention::PagedVariant::rows_f16);
    r.tiles_ms = forced(attention::PagedVariant::tiles_f16);
  }
  const double per_token = static_cast<double>(r.D) * (r.kbits + r.vbits) / 8 + 8;
  r.bytes = per_token * r.Hkv * r.L * r.B;
  if (r.kind == "decode") {
    kv::Cache kc = per_sequence_cache(r, r.kbits, 5), vc = per_sequence_cache(r, r.vbits, 6);
    Tensor qd = random_q(r.B, r.Hq, r.D, 99);
    Tensor od = Tensor::empty({r.B, r.Hq, r.D}, DType::f16, Device::cuda());
    r.per_seq_ms = time_median_ms(flush, [&] { attention::decode_attention(qd, kc, vc, od); }, 3, 20);
  }
  if (with_floor) {
    const kv::PagedCache& k = s.cache;
    auto span = [](const Tensor& t) { return Span{static_cast<const int4*>(t.data()), t.nbytes() / sizeof(int4)}; };
    double best = 1e30;
    for (int grid : {528, 1056, 2112, 4224})
      best = std::min(best, time_median_ms(flush, [&] {
        kernel_read<<<grid, 512>>>(span(k.k_packed()), span(k.v_packed()), span(k.k_scales()), span(k.v_scales()),
                                   flush.sink);
      }, 2, 10));
    r.floor_ms = best;
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string json;
  bool quick = false;
  std::string only;  // one kind of row
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    if (!std::strcmp(argv[i], "--quick")) quick = true;
    if (!std::strcmp(argv[i], "--kind") && i + 1 < argc) only = argv[++i];
  }
  if (!cuda_available()) {
    std::fprintf(stderr, "no GPU\n");
    return 1;
  }
  std::printf("device: %s\n", device_name(Device::cuda()).c_str());
  Flusher flush;
  std::vector<Row> rows;
  for (int D : {64, 128, 256})
    for (int64_t L : {4096, 32768, 131072})
      for (int B : {1, 8, 32}) {
        if (quick && !(D == 128 && B == 8)) continue;
        rows.push_back({"decode", B, 32, 8, D, 16, L, 1, 4, 4});
      }
  rows.push_back({"decode", 8, 32, 8, 128, 64, 32768, 1, 4, 4});
  rows.push_back({"decode", 8, 32, 8, 128, 16, 32768, 1, 8, 4});
  for (int64_t n : {2, 4, 8, 16, 32}) rows.push_back({"speculative", 8, 32, 8, 128, 16, 32768, n, 4, 4});
  for (auto [n, prefix] : std::vector<std::pair<int64_t, int64_t>>{
           {512, 0}, {2048, 0}, {8192, 0}, {512, 4096}, {2048, 32768}, {8192, 32768}})
    rows.push_back({"prefill", 1, 32, 8, 128, 16, prefix + n, n, 4, 4});

  if (!only.empty())
    rows.erase(std::remove_if(rows.begin(), rows.end(), [&](const Row& r) { return r.kind != only; }), rows.end());
  std::printf("%-12s %3s %3s %4s %4s %7s %5s  %9s %9s %9s %9s %9s %7s  %s\n", "kind", "B", "D", "page", "bits", "L",
              "n", "paged ms", "perseq ms", "rows ms", "tiles ms", "floor ms", "x floor", "choice");
  for (Row& r : rows) {
    run_row(r, flush, r.kind == "decode");
    std::printf("%-12s %3d %3d %4d  K%dV%d %7lld %5lld  %9.4f %9.4f %9.4f %9.4f %9.4f %7.3f  %s\n", r.kind.c_str(), r.B,
                r.D, r.page, r.kbits, r.vbits, static_cast<long long>(r.L), static_cast<long long>(r.n), r.ms,
                r.per_seq_ms, r.rows_ms, r.tiles_ms, r.floor_ms, r.floor_ms > 0 ? r.ms / r.floor_ms : 0.0, r.choice.c_str());
    std::fflush(stdout);
  }
  if (!json.empty()) {
    FILE* f = std::fopen(json.c_str(), "w");
    std::fprintf(f, "[\n");
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::fprintf(f,
                   "  {\"kind\": \"%s\", \"B\": %d, \"Hq\": %d, \"Hkv\": %d, \"D\": %d, \"page\": %d, \"L\": %lld, "
                   "\"n\": %lld, \"kbits\": %d, \"vbits\": %d, \"choice\": \"%s\", \"ms\": %.6f, \"per_seq_ms\": %.6f, "
                   "\"floor_ms\": %.6f, \"rows_ms\": %.6f, \"tiles_ms\": %.6f, \"bytes\": %.0f}%s\n",
                   r.kind.c_str(), r.B, r.Hq, r.Hkv, r.D, r.page, static_cast<long long>(r.L),
                   static_cast<long long>(r.n), r.kbits, r.vbits, r.choice.c_str(), r.ms, r.per_seq_ms, r.floor_ms,
                   r.rows_ms, r.tiles_ms, r.bytes, i + 1 < rows.size() ? "," : "");
    }
    std::fprintf(f, "]\n");
    std::fclose(f);
  }
  return 0;
}
