// Benchmark: decode attention over the packed 4-bit (and K8/V4) cache, on the anchor shapes
// (bench/torch_sdpa.py measures torch SDPA over an fp16 cache of the same shapes and prints the
// side-by-side table).
//
// Timing: before every timed call a kernel reads a 512 MB buffer, which evicts the caches from the
// 60 MB L2 (a read, so no dirty lines get written back during the call) and keeps the GPU busy while
// the host issues the call; CUDA events around the call; median of the runs after warm-up.
// The caches are filled with random bytes and scales directly (any byte is valid codes), and their
// write positions are set through const_cast — a benchmark-only shortcut around appending
// billions of tokens through the quantizer; nothing of the fill is timed.
//
// Usage: decode_attention [--json PATH] [--quick] [--shape B,Hq,Hkv,D,L [--splits N]] [--sweep]
//                         [--loops] [--mixes] [--floor] [--exact W,S] [--scales]
//   --quick: only the target rows and the short rows, no variants; --shape: that one shape only (for
//   profilers; --splits N forces its slice count); --sweep: the slice sweep of every row too (the
//   split heuristic's data; slices of >= 64 tokens); --loops: every row three times, the f16
//   kernel's main loop left to the rule (auto), then forced to each loop (DecodeOptions::variant:
//   f16_registers, f16_wide; where it serves), plus lengths between the short and the long rows (the
//   data the rule was set from); --mixes: only the D = 128 target and short rows with 8-bit K and/or V (K8/V4, K4/V8,
//   K8/V8), then the D = 64 long rows at K4/V4 and the same mixes; --floor: every main row also
//   times the stream floor of its bytes (kernel_read over the row's four cache arrays, timed the
//   same way, the best of four grid sizes): what a call that only read its cache would take.
//   --exact W,S: caches with exact rows (a window of W f16 tokens and S sinks) on the quick rows and
//   two head_dim-64 models' rows, each row right after the same row on plain caches (alternating),
//   and the ratio of the two. --scales: six rows at K4/V4, K8/V4 and K8/V8, each with f32 and then f16
//   scales (the f16 format), and the ratio.
//   Every row prints the choice that served it (attention::choose_decode) and a hash of its output
//   bytes (bitwise comparisons of two builds).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "frugal/attention.h"
#include "frugal/error.h"
#include "frugal/kv_cache.h"
#include "frugal/runtime.h"

using namespace frugal;

#include "cache_fill.cuh"

kv::Cache random_cache(int batch, int heads, int dim, int64_t len, int bits, uint64_t seed, int window = 0,
                       int sinks = 0, kv::ScaleFormat scales = kv::ScaleFormat::f32) {
  kv::CacheConfig c;
  c.scale_format = scales;
  c.batch = batch;
  c.num_kv_heads = heads;
  c.head_dim = dim;
  c.capacity = len;
  c.bits = bits;
  c.sign_seed = seed;
  c.window = window;
  c.sinks = sinks;
  kv::Cache cache(c, Device::cuda());
  if (cache.exact().defined()) kernel_fill_half<<<256, 256>>>(cache.exact().data_as<__half>(), cache.exact().numel(), seed);
  kernel_fill_bytes<<<1024, 256>>>(static_cast<uint8_t*>(cache.packed().data()), cache.packed().nbytes(), seed);
  if (scales == kv::ScaleFormat::f16)
    kernel_fill_scales<<<1024, 256>>>(cache.scales().data_as<__half>(), cache.scales().numel(), seed,
                                      std::sqrt(float(dim)));
  else
    kernel_fill_scales<<<1024, 256>>>(cache.scales().data_as<float>(), cache.scales().numel(), seed,
                                      std::sqrt(float(dim)));
  CHECK(cudaGetLastError());
  auto& pos = const_cast<std::vector<int64_t>&>(cache.write_positions());  // benchmark-only shortcut
  std::fill(pos.begin(), pos.end(), len);
  return cache;
}

// FNV-1a of the output's bytes: two builds (or two runs) gave bitwise the same result iff equal.
uint64_t out_hash(const Tensor& out) {
  std::vector<uint8_t> h(out.nbytes());
  CHECK(cudaMemcpy(h.data(), out.data(), h.size(), cudaMemcpyDeviceToHost));
  uint64_t x = 1469598103934665603ull;
  for (uint8_t c : h) x = (x ^ c) * 1099511628211ull;
  return x;
}

struct Row {
  int B, Hq, Hkv, D;
  int64_t L;
  int kbits, vbits;
  std::string math, qdtype;
  int splits;        // 0 = automatic
  std::string loop;    // the f16 main loop: auto (the library's rule), registers or wide (forced)
  std::string choice;  // what served the row: to_string(attention::choose_decode(...))
  double ms, bytes;
  double floor_ms = 0;  // --floor: the stream floor of the row's bytes
};

int main(int argc, char** argv) {
  std::string json;
  bool quick = false, sweep = false, loops = false, mixes = false, stream_floor = false;
  int one[5] = {0, 0, 0, 0, 0};
  int forced_splits = 0;  // --splits N: the slice count of the --shape row (0: the library's rule)
  int exact_window = -1, exact_sinks = 0;  // --exact W,S
  bool scale_pairs = false;                 // --scales: every row also with f16 scales, side by side
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    if (!std::strcmp(argv[i], "--quick")) quick = true;
    if (!std::strcmp(argv[i], "--sweep")) sweep = true;
    if (!std::strcmp(argv[i], "--loops")) loops = true;
    if (!std::strcmp(argv[i], "--mixes")) mixes = true;
    if (!std::strcmp(argv[i], "--floor")) stream_floor = true;
    if (!std::strcmp(argv[i], "--scales")) scale_pairs = true;
    if (!std::strcmp(argv[i], "--splits") && i + 1 < argc) forced_splits = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--exact") && i + 1 < argc) {
      std::sscanf(argv[++i], "%d,%d", &exact_window, &exact_sinks);
      quick = true;
    }
    if (!std::strcmp(argv[i], "--shape") && i + 1 < argc) {
      std::sscanf(argv[++i], "%d,%d,%d,%d,%d", &one[0], &one[1], &one[2], &one[3], &one[4]);
      quick = true;
    }
  }
  if (!cuda_available()) {
    std::fprintf(stderr, "no GPU\n");
    return 1;
  }
  std::printf("device: %s\n", device_name(Device::cuda()).c_str());
  Flusher flush;
  // Read-bandwidth ceiling: the flush kernel alone.
  const double flush_ms = time_median_ms(
      flush, [&] { flush(); }, 3, 20);
  const double read_tbps = flush.n * sizeof(int4) / flush_ms / 1e9;
  std::printf("read bandwidth (512 MB streamed read): %.2f TB/s\n", read_tbps);
  // The floor of this timing method for short calls: one and two empty kernels between the events.
  const double empty1 = time_median_ms(
      flush, [&] { kernel_empty<<<1, 32>>>(); }, 3, 40);
  const double empty2 = time_median_ms(
      flush,
      [&] {
        kernel_empty<<<1, 32>>>();
        kernel_empty<<<1, 32>>>();
      },
      3, 40);
  std::printf("timing floor: one empty kernel %.4f ms, two %.4f ms\n", empty1, empty2);

  struct Shape {
    int B, Hq, Hkv, D;
    int64_t L;
  };
  std::vector<Shape> shapes;
  for (int D : {128, 256})
    for (int B : {1, 8, 32})
      for (int64_t L : {4096, 32768, 131072}) shapes.push_back({B, 32, 8, D, L});
  shapes.push_back({32, 32, 8, 128, 8192});  // anchor row
  shapes.push_back({1, 16, 8, 256, 32768});  // anchor row
  if (quick)
    shapes = {{8, 32, 8, 128, 32768}, {1, 32, 8, 128, 131072}, {8, 32, 8, 256, 32768},
              {1, 32, 8, 128, 4096},  {1, 32, 8, 256, 4096},   {8, 32, 8, 128, 4096}};
  if (quick && loops)
    for (const Shape& s : std::vector<Shape>{{1, 32, 8, 128, 8192},
                                             {1, 32, 8, 128, 16384},
                                             {1, 32, 8, 128, 32768},
                                             {8, 32, 8, 128, 8192},
                                             {8, 32, 8, 128, 16384},
                                             {32, 32, 8, 128, 8192}})
      shapes.push_back(s);
  if (exact_window >= 0)
    for (const Shape& s : std::vector<Shape>{{8, 32, 8, 64, 32768}, {1, 9, 3, 64, 4096}, {32, 9, 3, 64, 4096}, {32, 32, 8, 128, 8192}})
      shapes.push_back(s);
  if (one[0] > 0) shapes = {{one[0], one[1], one[2], one[3], one[4]}};
  int window = 0, sinks = 0;  // the exact rows of the caches run now (--exact)
  kv::ScaleFormat scales = kv::ScaleFormat::f32;  // the scale format of the caches run now (--scales)
  std::string loop = "auto";  // the f16 main loop of the rows run now (--loops)
  std::optional<attention::DecodeVariant> forced;  // its variant, when forced

  std::vector<Row> rows;
  auto run = [&](const Shape& s, int kb, int vb, attention::Math math, DType qd, int splits, int64_t len = 0) {
    kv::Cache k = random_cache(s.B, s.Hkv, s.D, s.L, kb, 1000 + s.D + kb, window, sinks, scales);
    kv::Cache v = random_cache(s.B, s.Hkv, s.D, s.L, vb, 2000 + s.D + vb, window, sinks, scales);
    Tensor q = Tensor::empty({s.B, s.Hq, s.D}, qd, Device::cuda());
    if (qd == DType::f16)
      kernel_fill_half<<<256, 256>>>(q.data_as<__half>(), q.numel(), 7);
    else
      kernel_fill_float<<<256, 256>>>(q.data_as<float>(), q.numel(), 7);
    Tensor out = Tensor::empty({s.B, s.Hq, s.D}, qd, Device::cuda());
    Tensor ws = Tensor::zeros({static_cast<int64_t>(attention::decode_attention_workspace_bytes(q, k))}, DType::u8,
                              Device::cuda());
    attention::DecodeOptions opt;
    opt.math = math;
    opt.workspace = ws.view();
    opt.num_splits = splits;
    opt.variant = forced;
    const std::vector<int64_t> lens(s.B, len);  // len > 0: attend only the first len tokens
    if (len > 0) opt.lengths = lens;
    std::string choice;
    try {
      choice = attention::to_string(attention::choose_decode(q, k, v, opt));
    } catch (const Error& e) {  // a forced loop that does not serve this shape: no row
      std::printf("B=%2d Hq=%2d Hkv=%d D=%3d loop=%s: not served (%s)\n", s.B, s.Hq, s.Hkv, s.D, loop.c_str(), e.what());
      return;
    }
    if (len > 0) {
      const double ms = time_median_ms(
          flush, [&] { attention::decode_attention(q, k, v, out, opt); }, 3, 40);
      std::printf(
          "B=%2d Hq=%2d Hkv=%d D=%3d, only %lld tokens attended (the fixed cost), loop=%-9s: %9.4f ms  out %016llx  "
          "[%s]\n",
          s.B, s.Hq, s.Hkv, s.D, (long long)len, loop.c_str(), ms, (unsigned long long)out_hash(out), choice.c_str());
      return;
    }
    const double big = s.B * s.Hkv * double(s.L) * (s.D * (kb + vb) / 8.0 + (scales == kv::ScaleFormat::f16 ? 4.0 : 8.0));
    const int reps = big > 5e8 ? 15 : 40;
    const double ms = time_median_ms(
        flush, [&] { attention::decode_attention(q, k, v, out, opt); }, 3, reps);
    Row r{s.B,           s.Hq,   s.Hkv,  s.D, s.L, kb,  vb, math == attention::Math::f32 ? "f32" : "f16",
          to_string(qd), splits, loop, choice, ms,  big};
    if (stream_floor && splits == 0 && math == attention::Math::f16 && kb == 4 && vb == 4 && loop == "auto") {
      auto span = [](const Tensor& t) { return Span{static_cast<const int4*>(t.data()), size_t(t.nbytes()) / 16}; };
      r.floor_ms = 1e30;
      for (int blocks : {264, 528, 1056, 2112})
        r.floor_ms =
            std::min(r.floor_ms, time_median_ms(
                                     flush,
                                     [&] {
                                       kernel_read<<<blocks, 512>>>(span(k.packed()), span(v.packed()),
                                                                    span(k.scales()), span(v.scales()), flush.sink);
                                     },
                                     3, reps));
      CHECK(cudaGetLastError());
      std::printf("  stream floor of the same %.1f MB: %.4f ms (%.2f TB/s); ours = %.3f x the floor\n", big / 1e6,
                  r.floor_ms, big / r.floor_ms / 1e9, ms / r.floor_ms);
    }
    std::printf(
        "B=%2d Hq=%2d Hkv=%d D=%3d L=%6lld K%d/V%d %s q=%s splits=%-4s loop=%-9s %9.4f ms  %6.2f TB/s  (%.0f%% of "
        "read BW)  out %016llx  [%s]\n",
        r.B, r.Hq, r.Hkv, r.D, (long long)r.L, kb, vb, r.math.c_str(), r.qdtype.c_str(),
        splits ? std::to_string(splits).c_str() : "auto", loop.c_str(), ms, big / ms / 1e9,
        100 * big / ms / 1e9 / read_tbps, (unsigned long long)out_hash(out), choice.c_str());
    std::fflush(stdout);
    rows.push_back(r);
  };
  // Runs `fn` with the f16 main loop left to the rule, then (--loops) forced to each loop.
  auto each_loop = [&](auto&& fn) {
    fn();
    if (!loops) return;
    for (const auto& [name, variant] : {std::pair{"registers", attention::DecodeVariant::f16_registers},
                                        std::pair{"wide", attention::DecodeVariant::f16_wide}}) {
      forced = variant;
      loop = name;
      fn();
    }
    forced.reset();
    loop = "auto";
  };
  // --scales: the same rows with f32 then f16 scales, and the ratio (the f16 format reads 4 bytes a token
  // and head less).
  auto with_scales = [&](const Shape& s, int kb, int vb) {
    run(s, kb, vb, attention::Math::f16, DType::f16, 0);
    if (!scale_pairs) return;
    scales = kv::ScaleFormat::f16;
    run(s, kb, vb, attention::Math::f16, DType::f16, 0);
    scales = kv::ScaleFormat::f32;
    const Row& a = rows[rows.size() - 2];
    const Row& b = rows.back();
    std::printf("  f16 scales: %.4f ms against %.4f ms with f32 scales: %.3fx\n", b.ms, a.ms, b.ms / a.ms);
  };
  if (scale_pairs) {
    for (const Shape& s : std::vector<Shape>{{8, 32, 8, 128, 32768}, {1, 32, 8, 128, 131072}, {1, 32, 8, 128, 4096},
                                             {8, 32, 8, 64, 32768}, {8, 32, 8, 128, 4096}, {8, 32, 8, 256, 32768}})
      for (const auto& [kb, vb] : std::vector<std::pair<int, int>>{{4, 4}, {8, 4}, {8, 8}}) with_scales(s, kb, vb);
    shapes.clear();
  }
  if (mixes) {
    for (const Shape& s : std::vector<Shape>{{8, 32, 8, 128, 32768}, {1, 32, 8, 128, 131072}, {1, 32, 8, 128, 4096}})
      for (const auto& [kb, vb] : std::vector<std::pair<int, int>>{{8, 4}, {4, 8}, {8, 8}})
        run(s, kb, vb, attention::Math::f16, DType::f16, 0);
    for (const Shape& s : std::vector<Shape>{{8, 32, 8, 64, 32768}, {1, 32, 8, 64, 131072}})
      for (const auto& [kb, vb] : std::vector<std::pair<int, int>>{{4, 4}, {8, 4}, {4, 8}, {8, 8}})
        run(s, kb, vb, attention::Math::f16, DType::f16, 0);
    shapes.clear();
  }
  for (const Shape& s : shapes) {
    each_loop([&] { run(s, 4, 4, attention::Math::f16, DType::f16, forced_splits); });
    if (exact_window >= 0) {
      window = exact_window;
      sinks = exact_sinks;
      run(s, 4, 4, attention::Math::f16, DType::f16, forced_splits);
      window = sinks = 0;
      const Row& plain = rows[rows.size() - 2];
      const Row& exact = rows.back();
      std::printf("  exact rows W=%d S=%d: %.4f ms against %.4f ms plain: %.3fx\n", exact_window, exact_sinks, exact.ms,
                  plain.ms, exact.ms / plain.ms);
    }
    if (!sweep) continue;
    // The slice count around the automatic pick, for the split heuristic: one block per (sequence,
    // K/V head) times s, up to ~4 blocks per SM.
    const int pairs = s.B * s.Hkv;
    for (int sp : {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 40, 48, 64, 96})
      if (pairs * sp <= 4 * 132 && sp * 64 <= s.L) run(s, 4, 4, attention::Math::f16, DType::f16, sp);
  }
  // The fixed cost of a call on the short rows: 16 tokens attended (one slice, one tile a block).
  if (quick && one[0] == 0 && !mixes)
    for (const Shape& s : std::vector<Shape>{{1, 32, 8, 128, 4096}, {1, 32, 8, 256, 4096}})
      each_loop([&] { run(s, 4, 4, attention::Math::f16, DType::f16, 0, 16); });
  // Variants on the two target rows: K8/V4, and the exact f32 path.
  for (const Shape& s :
       quick || mixes ? std::vector<Shape>{} : std::vector<Shape>{{8, 32, 8, 128, 32768}, {1, 32, 8, 128, 131072}}) {
    run(s, 8, 4, attention::Math::f16, DType::f16, 0);
    run(s, 4, 4, attention::Math::f32, DType::f32, 0);
  }

  if (!json.empty()) {
    FILE* f = std::fopen(json.c_str(), "w");
    std::fprintf(f, "{\"device\": \"%s\", \"read_TBps\": %.4f, \"rows\": [\n", device_name(Device::cuda()).c_str(),
                 read_tbps);
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::fprintf(f,
                   "  {\"B\": %d, \"Hq\": %d, \"Hkv\": %d, \"D\": %d, \"L\": %lld, \"kbits\": %d, \"vbits\": %d, "
                   "\"math\": \"%s\", \"q\": \"%s\", \"splits\": %d, \"loop\": \"%s\", \"choice\": \"%s\", "
                   "\"ms\": %.6f, \"bytes\": %.0f, \"floor_ms\": %.6f}%s\n",
                   r.B, r.Hq, r.Hkv, r.D, (long long)r.L, r.kbits, r.vbits, r.math.c_str(), r.qdtype.c_str(), r.splits,
                   r.loop.c_str(), r.choice.c_str(), r.ms, r.bytes, r.floor_ms, i + 1 < rows.size() ? "," : "");
    }
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
  return 0;
}
