// Benchmark of one submanifold conv layer's training step on a sphere shell (GPU machine):
//   spconv_backward --radius R --channels C [--co CO] [--dtype f16|bf16] [--reps N]
// Builds the KernelMap of the voxels within 0.87 of the sphere of radius R (x slowest), fills feats,
// weight and grad_out with a deterministic generator, then times (median of N, CUDA events) the forward,
// dgrad alone, wgrad + grad_bias alone, the whole backward, forward + backward, and wgrad under each
// variant (and each mma tile that the channels fill) forced; prints one JSON line with the choices, the
// times, the useful TFLOP/s (2·pairs·Ci·Co for each of the three GEMMs; pairs = map entries with a
// neighbor) and the backward's workspace.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "core/sparse_conv_backend.h"
#include "core/spconv_backward_choose.h"
#include "event_timing.h"
#include "frugal/sparse_conv.h"

using namespace frugal;

namespace {

// Values in [-1, 1) · 2^-shift from two LCG steps of (i + salt): exact in f16 and bf16.
template <typename T>
__global__ void kernel_fill(T* p, int64_t count, int64_t salt, int shift) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t h = ((i + salt) * 1103515245 + 12345) & 0x7fffffff;
    h = (h * 1103515245 + 12345) & 0x7fffffff;
    const float v = ldexpf(static_cast<float>(static_cast<int>((h >> 16) & 255) - 128), -(7 + shift));
    if constexpr (std::is_same_v<T, __half>)
      p[i] = __float2half(v);
    else
      p[i] = __float2bfloat16(v);
  }
}

Tensor filled(std::initializer_list<int64_t> shape, DType dt, int64_t salt, int shift) {
  Tensor t = Tensor::empty(shape, dt, Device::cuda(0));
  if (dt == DType::f16)
    kernel_fill<<<4096, 256>>>(t.data_as<__half>(), t.numel(), salt, shift);
  else
    kernel_fill<<<4096, 256>>>(t.data_as<__nv_bfloat16>(), t.numel(), salt, shift);
  return t;
}

std::vector<int32_t> shell(int r) {
  std::vector<int32_t> flat;
  for (int x = -r - 1; x <= r + 1; ++x)
    for (int y = -r - 1; y <= r + 1; ++y)
      for (int z = -r - 1; z <= r + 1; ++z)
        if (std::abs(std::sqrt(double(x) * x + double(y) * y + double(z) * z) - r) < 0.87)
          flat.insert(flat.end(), {0, x, y, z});
  return flat;
}

}  // namespace

int main(int argc, char** argv) {
  int radius = 256, ci = 64, co = 0, reps = 20;
  std::string dtype = "f16";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--radius")
      radius = std::stoi(v);
    else if (a == "--channels")
      ci = std::stoi(v);
    else if (a == "--co")
      co = std::stoi(v);
    else if (a == "--dtype")
      dtype = v;
    else if (a == "--reps")
      reps = std::stoi(v);
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (!co) co = ci;
  const DType dt = parse_dtype(dtype);
  if (dt != DType::f16 && dt != DType::bf16) {
    std::fprintf(stderr, "--dtype must be f16 or bf16, got %s\n", dtype.c_str());
    return 2;
  }
  const std::vector<int32_t> c = shell(radius);
  const int64_t n = static_cast<int64_t>(c.size() / 4);
  Tensor coords = Tensor::empty({n, 4}, DType::i32);
  std::memcpy(coords.data(), c.data(), c.size() * 4);
  const spconv::KernelMap map = spconv::KernelMap::build(coords.to(Device::cuda(0)), 3, 1);
  const Tensor nbr_h = map.nbr().to(Device::cpu());
  int64_t pairs = 0;
  for (int64_t i = 0; i < nbr_h.numel(); ++i) pairs += nbr_h.data_as<int32_t>()[i] < n;

  const Tensor feats = filled({n, ci}, dt, 1, 0), weight = filled({27, ci, co}, dt, 2, 4),
               bias = filled({co}, dt, 3, 0), grad_out = filled({n, co}, dt, 4, 0);
  Tensor out = Tensor::empty({n, co}, dt, Device::cuda(0)), gf = Tensor::empty({n, ci}, dt, Device::cuda(0)),
         gw = Tensor::empty({27, ci, co}, dt, Device::cuda(0)), gb = Tensor::empty({co}, dt, Device::cuda(0));
  const spconv::GradientBuffers all{&gf.view(), &gw.view(), &gb.view()}, dgrad{&gf.view(), nullptr, nullptr},
      wgrad{nullptr, &gw.view(), &gb.view()};
  const spconv::BackwardChoice choice = spconv::choose_conv_backward(grad_out, feats, map, weight, all);
  const spconv::ConvChoice fwd = spconv::choose_conv(feats, map, weight, &bias.view(), out);

  auto forward = [&] { spconv::submanifold_conv(feats, map, weight, &bias.view(), out); };
  auto backward = [&](const spconv::GradientBuffers& g, const spconv::BackwardOptions& o = {}) {
    spconv::submanifold_conv_backward(grad_out, feats, map, weight, g, o);
  };
  const double t_fwd = median_event_ms(reps, forward);
  const double t_dgrad = median_event_ms(reps, [&] { backward(dgrad); });
  const double t_wgrad = median_event_ms(reps, [&] { backward(wgrad); });
  const double t_bwd = median_event_ms(reps, [&] { backward(all); });
  const double t_step = median_event_ms(reps, [&] {
    forward();
    backward(all);
  });
  std::string variants;
  std::vector<spconv::WgradChoice> forced = {{.variant = spconv::WgradVariant::simt},
                                             {.variant = spconv::WgradVariant::wmma}};
  for (int tci : {64, 128})
    for (int tco : {64, 128})
      if (tci <= ci && tco <= co) forced.push_back({.variant = spconv::WgradVariant::mma, .tile_ci = tci, .tile_co = tco});
  for (const spconv::WgradChoice& c : forced) {
    spconv::BackwardOptions o;
    o.wgrad = c;
    std::string name = spconv::to_string(c.variant);
    if (c.tile_ci) name += " " + std::to_string(c.tile_ci) + "x" + std::to_string(c.tile_co);
    const double t = median_event_ms(reps, [&] { backward(wgrad, o); });
    variants += (variants.empty() ? "" : ", ") + std::string("\"") + name + "\": " + std::to_string(t);
  }
  spconv::backend::WgradArgs wb;
  wb.n = n;
  wb.k = 27;
  wb.ci = ci;
  wb.co = co;
  wb.grad_weight = gw.data();
  wb.grad_bias = gb.data();
  wb.dtype = dt;
  const double workspace = static_cast<double>(spconv::workspace_bytes(wb, *choice.wgrad)) +
                           27.0 * ci * co * size_of(dt);  // wgrad's partials + dgrad's mirrored weight
  const double flops = 2.0 * pairs * ci * co;
  std::printf(
      "{\"radius\": %d, \"n\": %lld, \"pairs\": %lld, \"ci\": %d, \"co\": %d, \"dtype\": \"%s\", \"forward\": \"%s\", "
      "\"dgrad\": \"%s\", \"wgrad\": \"%s\", \"forward_ms\": %.4f, \"dgrad_ms\": %.4f, \"wgrad_bias_ms\": %.4f, "
      "\"backward_ms\": %.4f, \"step_ms\": %.4f, \"step_tflops\": %.2f, \"backward_tflops\": %.2f, "
      "\"backward_workspace_mib\": %.2f, \"wgrad_forced_ms\": {%s}}\n",
      radius, static_cast<long long>(n), static_cast<long long>(pairs), ci, co, dtype.c_str(),
      spconv::to_string(fwd).c_str(), spconv::to_string(*choice.dgrad).c_str(),
      spconv::to_string(*choice.wgrad).c_str(), t_fwd, t_dgrad, t_wgrad, t_bwd, t_step, 3 * flops / t_step * 1e-9,
      2 * flops / t_bwd * 1e-9, workspace / (1 << 20), variants.c_str());
  return 0;
}
