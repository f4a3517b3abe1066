// `frugal spconv`: voxelize a shape (sphere shell, torus, or a mesh file read with assimp), build
// its kernel map, run a small stack of submanifold convs, and report the time of each stage, the
// memory the fused path holds next to what the materialized (K, N, Ci) gather would need, and the
// error of each layer against a double-precision sum over the neighbors of sampled rows.
#include <fmt/core.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <numbers>
#include <random>
#include <vector>

#include "commands.h"
#include "frugal/half.h"
#include "frugal/sparse_conv.h"
#include "mesh_voxels.h"

namespace frugal::tools {

namespace {

constexpr const char* kOp = "frugal spconv";

struct Options {
  std::string shape = "sphere", mesh, device = "cpu", dtype = "f32";
  int res = 96, channels = 32, kernel_size = 3, dilation = 1, layers = 2;
  uint64_t seed = 0;
};

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// Voxels whose centre lies within 0.87 (≈ √3/2, half a voxel diagonal) of the surface
// |p - c| = r: the shell the anchors' benchmark uses (r = 0.45 res).
std::vector<int32_t> sphere_shell(int res) {
  std::vector<int32_t> c;
  const float r = 0.45f * res, h = res / 2.0f;
  for (int x = 0; x < res; ++x)
    for (int y = 0; y < res; ++y)
      for (int z = 0; z < res; ++z) {
        const float d = std::sqrt((x - h) * (x - h) + (y - h) * (y - h) + (z - h) * (z - h));
        if (std::fabs(d - r) < 0.87f) c.insert(c.end(), {0, x, y, z});
      }
  return c;
}

// A torus around the z axis: major radius 0.3 res, minor 0.12 res, the same 0.87 shell.
std::vector<int32_t> torus_shell(int res) {
  std::vector<int32_t> c;
  const float big = 0.3f * res, small = 0.12f * res, h = res / 2.0f;
  for (int x = 0; x < res; ++x)
    for (int y = 0; y < res; ++y)
      for (int z = 0; z < res; ++z) {
        const float q = std::sqrt((x - h) * (x - h) + (y - h) * (y - h)) - big;
        const float d = std::sqrt(q * q + (z - h) * (z - h));
        if (std::fabs(d - small) < 0.87f) c.insert(c.end(), {0, x, y, z});
      }
  return c;
}

Tensor random_tensor(std::initializer_list<int64_t> shape, DType dt, float stddev, std::mt19937_64& rng, Device d) {
  Tensor t = Tensor::empty(shape, dt);
  std::normal_distribution<float> dist(0.0f, stddev);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float v = dist(rng);
    if (dt == DType::f32) t.data_as<float>()[i] = v;
    if (dt == DType::f16) t.data_as<uint16_t>()[i] = float_to_half(v);
    if (dt == DType::bf16) t.data_as<uint16_t>()[i] = float_to_bf16(v);
  }
  return d.is_cpu() ? t : t.to(d);
}

std::vector<double> to_doubles(const Tensor& t) {
  const Tensor h = t.device().is_cpu() ? t : t.to(Device::cpu());
  std::vector<double> v(h.numel());
  for (size_t i = 0; i < v.size(); ++i) {
    if (h.dtype() == DType::f32) v[i] = h.data_as<float>()[i];
    if (h.dtype() == DType::f16) v[i] = half_to_float(h.data_as<uint16_t>()[i]);
    if (h.dtype() == DType::bf16) v[i] = bf16_to_float(h.data_as<uint16_t>()[i]);
  }
  return v;
}

// ‖out − ref‖ / ‖ref‖ over `rows`, the reference a double sum over each row's neighbors.
double sampled_error(const std::vector<int64_t>& rows, const std::vector<int32_t>& nbr, const std::vector<double>& in,
                     const std::vector<double>& w, const std::vector<double>& bias, const std::vector<double>& out,
                     int64_t n, int k, int ci, int co) {
  double num = 0, den = 0;
  std::vector<double> ref(co);
  for (int64_t r : rows) {
    std::copy(bias.begin(), bias.end(), ref.begin());
    for (int kk = 0; kk < k; ++kk) {
      const int64_t m = nbr[kk * n + r];
      if (m == n) continue;
      for (int q = 0; q < ci; ++q)
        for (int o = 0; o < co; ++o) ref[o] += in[m * ci + q] * w[(static_cast<int64_t>(kk) * ci + q) * co + o];
    }
    for (int o = 0; o < co; ++o) {
      num += (out[r * co + o] - ref[o]) * (out[r * co + o] - ref[o]);
      den += ref[o] * ref[o];
    }
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

std::string mib(double bytes) { return fmt::format("{:.1f} MiB", bytes / (1024.0 * 1024.0)); }

// Host bytes one voxel costs at the run's peak (the error check): its coordinates twice, the map
// three times (the map, its host copy, a vector of it), the map build's table and key (24 bytes),
// the features in and out, and both again as doubles for the reference.
double host_bytes_per_voxel(const Options& o, DType dt) {
  const double k = spconv::kernel_volume(o.kernel_size), c = o.channels, es = static_cast<double>(size_of(dt));
  return 32.0 + 12.0 * k + 24.0 + 2.0 * c * es + 16.0 * c;
}

// The same for what does not grow with the voxels: one layer's weight, also as doubles.
double host_bytes_fixed(const Options& o, DType dt) {
  const double k = spconv::kernel_volume(o.kernel_size), c = o.channels, es = static_cast<double>(size_of(dt));
  return k * c * c * (es + 8.0);
}

// Voxels of a built-in shell at `res`: its area times the shell's thickness (2 · 0.87 voxels).
double shell_voxels(const std::string& shape, int res) {
  const double r = res;
  const double area = shape == "sphere" ? 4.0 * std::numbers::pi * (0.45 * r) * (0.45 * r)  // 4πr², r = 0.45 res
                                        : 4.0 * std::numbers::pi * std::numbers::pi * (0.3 * r) * (0.12 * r);  // 4π²Rr
  return 2.0 * 0.87 * area;
}

// The voxels of the shape or mesh, refused (before any large allocation) when the run would need
// more host memory than there is.
std::vector<int32_t> voxels_within_memory(const Options& o, DType dt) {
  const double per_voxel = host_bytes_per_voxel(o, dt), fixed = host_bytes_fixed(o, dt);
  if (o.mesh.empty()) {
    const double n = shell_voxels(o.shape, o.res);
    check_host_memory(kOp, fixed + n * per_voxel,
                      fmt::format("a {} at res {} (about {:.3g} voxels)", o.shape, o.res, n));
    return o.shape == "sphere" ? sphere_shell(o.res) : torus_shell(o.res);
  }
  check_host_memory(kOp, fixed, fmt::format("one layer of {} channels", o.channels));
  const double room = (host_memory_available() - fixed) / per_voxel;
  return voxelize(read_mesh(o.mesh), o.res, o.mesh, static_cast<int64_t>(std::min(room, 9e18)));
}

void run(const Options& o, bool shape_given, bool mesh_given) {
  FRUGAL_CHECK(o.shape == "sphere" || o.shape == "torus", invalid_argument, kOp,
               "--shape must be sphere or torus, got '" << o.shape << "'");
  FRUGAL_CHECK(!(shape_given && mesh_given), invalid_argument, kOp, "give --shape or --mesh, not both");
  const DType dt = parse_dtype(o.dtype);
  FRUGAL_CHECK(is_floating(dt), invalid_argument, kOp, "--dtype must be f32, f16 or bf16, got " << o.dtype);
  const Device dev = resolve_device(o.device);
  // Kernel size and dilation are checked by build_kernel_map itself, with its own message.

  auto t = Clock::now();
  const std::string what = o.mesh.empty() ? o.shape : "mesh '" + o.mesh + "'";
  const std::vector<int32_t> flat = voxels_within_memory(o, dt);
  const double t_vox = ms_since(t);
  const int64_t n = static_cast<int64_t>(flat.size() / 4);
  const int k = spconv::kernel_volume(o.kernel_size), c = o.channels;
  const size_t es = size_of(dt);
  fmt::print("frugal spconv: {} at res {} on {}: N = {} active voxels\n", what, o.res, device_name(dev), n);
  FRUGAL_CHECK(n > 0, invalid_argument, kOp, what << " gives no voxels at res " << o.res);

  Tensor coords_h = Tensor::empty({n, 4}, DType::i32);
  std::copy(flat.begin(), flat.end(), coords_h.data_as<int32_t>());
  const Tensor coords = dev.is_cpu() ? coords_h : coords_h.to(dev);
  if (dev.is_cuda()) {
    // One untimed build and conv first: CUDA loads kernels lazily and creates the stream-ordered
    // memory pool on first use, so the timings below are of the steady state.
    const spconv::KernelMap warm = spconv::KernelMap::build(coords, o.kernel_size, o.dilation);
    const Tensor wx = Tensor::zeros({n, c}, dt, dev), ww = Tensor::zeros({k, c, c}, dt, dev);
    (void)spconv::submanifold_conv(wx, warm, ww);
  }
  // A KernelMap, as a model holds one per voxel set: no per-call check, its run order and statistics.
  t = Clock::now();
  const spconv::KernelMap map = spconv::KernelMap::build(coords, o.kernel_size, o.dilation);
  const double t_map = ms_since(t);
  const Tensor nbr_h = map.nbr().to(Device::cpu());
  std::vector<int32_t> nbr_v(nbr_h.data_as<int32_t>(), nbr_h.data_as<int32_t>() + nbr_h.numel());
  int64_t pairs = 0;
  for (int32_t m : nbr_v) pairs += m != n;

  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int64_t> pick(0, n - 1);
  std::vector<int64_t> sample(std::min<int64_t>(100, n));
  for (auto& r : sample) r = pick(rng);
  // Weights N(0, 1/(n̄·C)) with n̄ the mean neighbor count keep activations near unit scale.
  const float wstd = static_cast<float>(1.0 / std::sqrt(static_cast<double>(pairs) / n * c));
  Tensor x = random_tensor({n, c}, dt, 1.0f, rng, dev);

  fmt::print(
      "  voxelize {:9.2f} ms\n  map      {:9.2f} ms   kernel {}³ dilation {}, {:.2f} neighbors per voxel, rows run in {} "
      "order\n",
      t_vox, t_map, o.kernel_size, o.dilation, static_cast<double>(pairs) / n, spconv::to_string(map.stats().order));
  for (int l = 0; l < o.layers; ++l) {
    const Tensor w = random_tensor({k, c, c}, dt, wstd, rng, dev), b = random_tensor({c}, dt, 0.1f, rng, dev);
    synchronize(dev);
    t = Clock::now();
    Tensor y = spconv::submanifold_conv(x, map, w, &b.view());
    synchronize(dev);
    const double t_conv = ms_since(t);
    const double err =
        sampled_error(sample, nbr_v, to_doubles(x), to_doubles(w), to_doubles(b), to_doubles(y), n, k, c, c);
    fmt::print("  conv {:<3} {:9.2f} ms   {:.1f} GFLOP/s, error vs double reference on {} rows: {:.2e}\n", l + 1,
               t_conv, 2.0 * pairs * c * c / t_conv / 1e6, sample.size(), err);
    x = y;
  }
  // What one conv holds: its inputs (feats, weight, bias), its output and the map with its run order
  // (4 bytes a row where it is not the given one). The materialized path adds a (K, N, Ci) gather.
  const double inputs = static_cast<double>(n) * c * es + static_cast<double>(k) * c * c * es + c * es;
  const double output = static_cast<double>(n) * c * es;
  const double map_bytes = static_cast<double>(k) * n * 4 + (map.order().defined() ? 4.0 * n : 0.0);
  const double ours = inputs + output + map_bytes;
  const double gather = static_cast<double>(k) * n * c * es;
  fmt::print("  memory per conv (counted): inputs {} + output {} + map {} = {}\n", mib(inputs), mib(output),
             mib(map_bytes), mib(ours));
  fmt::print("  the materialized gather alone would need K·N·Ci·{} B = {} ({:.1f}× ours in total)\n", es, mib(gather),
             (gather + ours) / ours);
  const double table = static_cast<double>(std::max<int64_t>(16, std::bit_ceil(static_cast<uint64_t>(3 * n)))) * 4;
  fmt::print("  map build workspace (freed after the build): table {} + keys {}\n", mib(table), mib(8.0 * n));
}

}  // namespace

void add_spconv_command(CLI::App& app) {
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "spconv", "voxelize a shape or mesh, build its kernel map and run a stack of fused submanifold convs");
  cmd->add_option("--shape", opts->shape, "built-in shape: sphere (shell) or torus")->default_val(opts->shape);
  add_text_option(cmd, kOp, "--mesh", opts->mesh,
                  "voxelize this mesh file instead (any format assimp reads: obj, ply, stl, ...)");
  add_int_option(cmd, kOp, "--res", opts->res, 4, 4096, "grid resolution (voxels along the longest side)");
  add_int_option(cmd, kOp, "--channels", opts->channels, 1, 4096, "channels of every layer (Ci = Co)");
  add_int_option(cmd, kOp, "--kernel-size", opts->kernel_size, 1, spconv::kMaxKernelSize, "odd kernel size");
  add_int_option(cmd, kOp, "--dilation", opts->dilation, 1, 65536, "kernel dilation");
  add_int_option(cmd, kOp, "--layers", opts->layers, 1, 64, "convs run one after the other");
  cmd->add_option("--dtype", opts->dtype, "f32, f16 or bf16")->default_val(opts->dtype);
  add_int_option(cmd, kOp, "--seed", opts->seed, uint64_t{0}, std::numeric_limits<uint64_t>::max(),
                 "seed of the random features and weights");
  add_device_option(cmd, opts->device);
  cmd->callback([opts, cmd] { run(*opts, cmd->count("--shape") > 0, cmd->count("--mesh") > 0); });
}

}  // namespace frugal::tools
