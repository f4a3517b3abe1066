// `frugal kv`: quantizes a synthetic K/V stream into Hadamard-rotated low-bit caches and reports
// what it costs: bytes per vector, reconstruction error, cosine similarity, throughput.
//
// K gets a few outlier channels (×20, as real key caches show); V is plain N(0,1). Each stream is
// appended in prefill-sized chunks into a global cache (or a sliding window), then the held
// tokens are dequantized and compared with the input the cache saw (after rounding to --dtype).
#include <fmt/core.h>

#include <chrono>
#include <cmath>
#include <random>
#include <vector>

#include "commands.h"
#include "kv_attention_step.h"
#include "frugal/half.h"
#include "frugal/kv_cache.h"

namespace frugal::tools {

namespace {

constexpr const char* kOp = "frugal kv";
constexpr int kMaxHeads = 4096;
constexpr int64_t kMaxTokens = int64_t{1} << 40;  // the host memory estimate refuses far fewer

struct KvOptions {
  int heads = 8;
  int head_dim = 128;
  int64_t tokens = 8192;
  int bits = 4;
  int64_t window = 0;  // sliding capacity; 0: a global cache holding every token
  std::string dtype = "f16";
  uint64_t seed = 1;
  int outliers = 4;  // outlier channels per K head
  std::string device = "cpu";
};

// A [tokens, heads, head_dim] stream: the values as f32 (already rounded to the dtype) and the
// same values stored in the dtype on the device.
struct KvStream {
  std::vector<float> values;
  Tensor x;
};

KvStream make_stream(const KvOptions& o, DType dt, Device dev, int outliers, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  const int64_t n = o.tokens * o.heads * o.head_dim;
  KvStream s;
  s.values.resize(n);
  for (auto& v : s.values) v = normal(rng);
  std::vector<int> channels;
  std::uniform_int_distribution<int> pick(0, o.head_dim - 1);
  for (int i = 0; i < outliers; ++i) channels.push_back(pick(rng));
  Tensor host = Tensor::empty({o.tokens, o.heads, o.head_dim}, dt);
  for (int64_t v = 0; v < o.tokens * o.heads; ++v) {
    for (int c : channels) s.values[v * o.head_dim + c] *= 20.0f;
    for (int64_t i = v * o.head_dim; i < (v + 1) * o.head_dim; ++i) {
      const float f = s.values[i];
      if (dt == DType::f16) {
        host.data_as<uint16_t>()[i] = float_to_half(f);
        s.values[i] = half_to_float(host.data_as<uint16_t>()[i]);
      } else if (dt == DType::bf16) {
        host.data_as<uint16_t>()[i] = float_to_bf16(f);
        s.values[i] = bf16_to_float(host.data_as<uint16_t>()[i]);
      } else {
        host.data_as<float>()[i] = f;
      }
    }
  }
  s.x = dev.is_cpu() ? host : host.to(dev);
  return s;
}

struct Quality {
  double rel_mse = 0, cos_mean = 0, cos_min = 1;
};

// ‖x − x̂‖²/‖x‖² and cos(x, x̂) per head vector over the held tokens, averaged.
Quality measure(const kv::Cache& cache, const KvStream& s, const KvOptions& o) {
  const int64_t begin = cache.first_held(), end = cache.write_pos();
  const Tensor out = cache.dequantize(0, begin, end).to(Device::cpu());
  Quality q;
  const int64_t vectors = (end - begin) * o.heads;
  for (int64_t v = 0; v < vectors; ++v) {
    const float* a = s.values.data() + (begin * o.heads + v) * o.head_dim;
    const float* b = out.data_as<float>() + v * o.head_dim;
    double err = 0, aa = 0, bb = 0, ab = 0;
    for (int i = 0; i < o.head_dim; ++i) {
      err += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
      aa += double(a[i]) * a[i];
      bb += double(b[i]) * b[i];
      ab += double(a[i]) * b[i];
    }
    const double cos = aa > 0 && bb > 0 ? ab / std::sqrt(aa * bb) : 1.0;
    q.rel_mse += aa > 0 ? err / aa : 0.0;
    q.cos_mean += cos;
    q.cos_min = std::min(q.cos_min, cos);
  }
  q.rel_mse /= static_cast<double>(vectors);
  q.cos_mean /= static_cast<double>(vectors);
  return q;
}

struct Timing {
  double append_s = 0, dequant_s = 0;
};

// Streams every token into `cache` in chunks (at most the window, so a ring never sees more than
// it holds in one call), then times one dequantize of the held tokens.
Timing stream_into(kv::Cache& cache, const KvStream& s, const KvOptions& o, Device dev, Progress& progress,
                   double progress_base, double progress_span) {
  using Clock = std::chrono::steady_clock;
  const int64_t chunk = o.window > 0 ? std::min<int64_t>(o.window, 1024) : 1024;
  const int64_t row = static_cast<int64_t>(o.heads) * o.head_dim;
  Timing t;
  const auto t0 = Clock::now();
  for (int64_t tok = 0; tok < o.tokens; tok += chunk) {
    const int64_t n = std::min(chunk, o.tokens - tok);
    const TensorView part(static_cast<char*>(s.x.data()) + tok * row * size_of(s.x.dtype()), s.x.dtype(),
                          {n, o.heads, o.head_dim}, dev);
    cache.append(part);
    progress.update(progress_base + progress_span * static_cast<double>(tok + n) / o.tokens);
  }
  synchronize(dev);
  t.append_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const auto t1 = Clock::now();
  const Tensor out = cache.dequantize(0, cache.first_held(), cache.write_pos());
  synchronize(dev);
  t.dequant_s = std::chrono::duration<double>(Clock::now() - t1).count();
  return t;
}

// Host bytes the run holds at its peak: both streams as f32 and in the input dtype, the two caches
// of the attention step, and two dequantized f32 copies of the held tokens.
double host_bytes_estimate(const KvOptions& o, const kv::CacheConfig& cfg, DType dt) {
  const double vectors = static_cast<double>(o.tokens) * o.heads;
  const double streams = 2.0 * vectors * o.head_dim * (4.0 + static_cast<double>(size_of(dt)));
  const double caches = 2.0 * static_cast<double>(cfg.capacity) * o.heads * (o.head_dim * o.bits / 8.0 + 4.0);
  const double held = static_cast<double>(std::min(o.tokens, cfg.capacity)) * o.heads * o.head_dim;
  return streams + caches + 2.0 * 4.0 * held;
}

void run_kv(const KvOptions& o) {
  FRUGAL_CHECK(o.outliers <= o.head_dim, invalid_argument, kOp,
               "--outliers must be at most --head-dim (" << o.head_dim << "), got " << o.outliers);
  const DType dt = parse_dtype(o.dtype);
  FRUGAL_CHECK(is_floating(dt), invalid_argument, kOp, "--dtype must be f32, f16 or bf16, got " << o.dtype);
  const Device dev = resolve_device(o.device);
  kv::CacheConfig cfg{.num_kv_heads = o.heads,
                      .head_dim = o.head_dim,
                      .capacity = o.window > 0 ? o.window : o.tokens,
                      .sliding = o.window > 0,
                      .bits = o.bits};
  check_host_memory(kOp, host_bytes_estimate(o, cfg, dt),
                    fmt::format("{} tokens x {} heads x {} dims", o.tokens, o.heads, o.head_dim));
  kv::validate(cfg, kOp);  // refuses a bad --heads / --head-dim / --bits before any work

  const int64_t held = std::min(o.tokens, cfg.capacity);
  const int vec_bytes = o.head_dim * o.bits / 8 + 4;
  const double ratio = static_cast<double>(o.head_dim * size_of(dt)) / vec_bytes;
  fmt::print("frugal kv: {} heads x {} dims, {} tokens, {} bits, {}, {} input, {}, seed {}\n", o.heads, o.head_dim,
             o.tokens, o.bits,
             o.window > 0 ? fmt::format("sliding window of {} tokens", o.window) : std::string("global cache"),
             to_string(dt), device_name(dev), o.seed);
  fmt::print("storage: {} bytes per head vector ({} of codes + a 4-byte scale) vs {} in {}: {:.2f}x smaller\n",
             vec_bytes, vec_bytes - 4, o.head_dim * size_of(dt), to_string(dt), ratio);

  Progress progress("frugal kv");
  const KvStream k = make_stream(o, dt, dev, o.outliers, o.seed);
  const KvStream v = make_stream(o, dt, dev, 0, o.seed + 1);
  struct Line {
    std::string name;
    bool signs;
    Quality q;
    Timing t;
  };
  std::vector<Line> lines;
  int step = 0;
  for (const KvStream* s : {&k, &v})
    for (bool signs : {false, true}) {
      kv::CacheConfig c = cfg;
      if (signs) c.sign_seed = o.seed * 0x9E3779B97F4A7C15ull + 17;
      kv::Cache cache(c, dev);
      const Timing t = stream_into(cache, *s, o, dev, progress, step / 4.0, 0.25);
      ++step;
      const std::string name =
          s == &k ? fmt::format("K ({} outlier channels x20)", o.outliers) : std::string("V (N(0,1))");
      lines.push_back({name, signs, measure(cache, *s, o), t});
    }
  progress.done();

  const double codebook_mse = kv::lloyd_max_codebook(o.bits).mse;
  const double in_bytes = static_cast<double>(o.tokens) * o.heads * o.head_dim * size_of(dt);
  fmt::print("\nheld tokens: {} (error over these; Lloyd-Max MSE per coordinate for N(0,1) at {} bits: {:.6f})\n\n",
             held, o.bits, codebook_mse);
  fmt::print(
      "| stream | random signs | rel. MSE | cos mean | cos min | append (M tokens/s, GB/s in) | dequantize (GB/s out) "
      "|\n");
  fmt::print("|---|---|---|---|---|---|---|\n");
  for (const Line& l : lines) {
    const double out_bytes = static_cast<double>(held) * o.heads * o.head_dim * 4;
    fmt::print("| {} | {} | {:.6f} | {:.6f} | {:.6f} | {:.3g}, {:.3g} | {:.3g} |\n", l.name, l.signs ? "on" : "off",
               l.q.rel_mse, l.q.cos_mean, l.q.cos_min, o.tokens / l.t.append_s / 1e6, in_bytes / l.t.append_s / 1e9,
               out_bytes / l.t.dequant_s / 1e9);
  }

  // The read path: decode attention straight from the packed K and V caches, for one random
  // query per GQA group of 4, against fp32 attention over the unquantized K and V.
  fmt::print("\ndecode attention over the packed caches (Hq = {}, one query token):\n", 4 * o.heads);
  for (bool signs : {false, true}) {
    kv::CacheConfig c = cfg;
    if (signs) c.sign_seed = o.seed * 0x9E3779B97F4A7C15ull + 17;
    kv::Cache kc(c, dev), vc(c, dev);
    stream_into(kc, k, o, dev, progress, 1.0, 0.0);
    stream_into(vc, v, o, dev, progress, 1.0, 0.0);
    const TensorView k_orig(const_cast<float*>(k.values.data()), DType::f32, {o.tokens, o.heads, o.head_dim});
    const TensorView v_orig(const_cast<float*>(v.values.data()), DType::f32, {o.tokens, o.heads, o.head_dim});
    fmt::print("random signs {}: ", signs ? "on " : "off");
    kv_attention_step(kc, vc, k_orig, v_orig, 4 * o.heads, o.seed);
  }
}

}  // namespace

void add_kv_command(CLI::App& app) {
  auto opts = std::make_shared<KvOptions>();
  CLI::App* cmd =
      app.add_subcommand("kv", "quantize a synthetic K/V stream into a low-bit KV cache and report its error");
  add_int_option(cmd, kOp, "--heads", opts->heads, 1, kMaxHeads, "KV heads per token");
  add_int_option(cmd, kOp, "--head-dim", opts->head_dim, 4, 4096, "head dimension (a power of two)");
  add_int_option(cmd, kOp, "--tokens", opts->tokens, int64_t{1}, kMaxTokens, "tokens in the stream");
  add_int_option(cmd, kOp, "--bits", opts->bits, 2, 8, "bits per coordinate: 2, 3, 4 or 8");
  add_int_option(cmd, kOp, "--window", opts->window, int64_t{0}, kMaxTokens,
                 "sliding-window capacity in tokens; 0: a global cache");
  cmd->add_option("--dtype", opts->dtype, "input dtype: f32, f16 or bf16")->default_val(opts->dtype);
  add_int_option(cmd, kOp, "--seed", opts->seed, uint64_t{0}, std::numeric_limits<uint64_t>::max(),
                 "seed of the synthetic stream");
  add_int_option(cmd, kOp, "--outliers", opts->outliers, 0, 4096,
                 "outlier channels (x20) per K head, at most --head-dim");
  add_device_option(cmd, opts->device);
  cmd->callback([opts] { run_kv(*opts); });
}

}  // namespace frugal::tools
