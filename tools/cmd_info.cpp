// `frugal info`: what this build and this machine offer, and which kernel variant each op's choice
// gives on each GPU found for a few representative calls (the same `choose` the ops call).
#include <fmt/core.h>

#include "commands.h"
#include "core/attention_backend.h"
#include "core/attention_choose.h"
#include "core/backend.h"
#include "core/device_caps.h"
#include "core/kv_choose.h"
#include "core/spconv_backward_choose.h"
#include "core/spconv_choose.h"

namespace frugal::tools {
namespace {

// A prefill append of `vectors` f16 head vectors (T tokens × 8 heads) of dimension d, contiguous.
kv::backend::AppendArgs kv_append_args(int64_t tokens, int d, int bits) {
  kv::backend::AppendArgs a;
  a.x_dtype = DType::f16;
  a.tokens = tokens;
  a.heads = 8;
  a.dim = d;
  a.bits = bits;
  a.capacity = tokens;
  a.x_stride_head = d;
  a.x_stride_tok = 8 * d;
  a.x_stride_seq = tokens * 8 * d;
  a.x = reinterpret_cast<const void*>(uintptr_t{256});  // the layout facts read only its alignment
  kv::describe_layout(a);
  return a;
}

attention::DecodeProblem decode_problem(int batch, int d, int64_t len, int bits) {
  attention::DecodeProblem p;
  p.batch = batch;
  p.q_heads = 32;
  p.kv_heads = 8;
  p.dim = d;
  p.k_bits = p.v_bits = bits;
  p.capacity = p.max_len = len;
  p.q_dtype = DType::f16;
  return p;
}

template <typename F>
std::string or_error(F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    return std::string("none: ") + e.what();
  }
}

void print_choices(int device) {
  const DeviceCaps caps = cuda::device_caps(device);
  fmt::print("  capabilities      : {}, {} KB of shared memory a block\n", to_string(caps), caps.smem_per_block / 1024);
  fmt::print("  this build runs   : {}\n", or_error([&] {
               cuda::require_device("frugal info", device);
               return std::string(caps.sm90a        ? "yes: sm_90a, sm_80-class and SIMT kernels"
                                  : caps.has_sm80() ? "yes: sm_80-class and SIMT kernels"
                                                    : "yes: SIMT kernels only");
             }));
  struct Decode {
    int b, d;
    int64_t len;
    int bits;
  };
  for (const Decode& c : {Decode{8, 128, 32768, 4}, Decode{1, 128, 131072, 4}, Decode{8, 256, 32768, 4},
                          Decode{8, 128, 32768, 8}, Decode{8, 128, 32768, 3}}) {
    const attention::DecodeProblem p = decode_problem(c.b, c.d, c.len, c.bits);
    fmt::print("  decode attention  : B={} Hq=32 Hkv=8 D={} L={} K{}/V{} f16 -> {}\n", c.b, c.d, c.len, c.bits, c.bits,
               or_error([&] {
                 const attention::DecodeVariant v = attention::choose_variant(p, caps);
                 return attention::to_string(attention::choose(
                     p, caps, cuda::decode_attention_resident_blocks(v, p.dim, p.k_bits, p.v_bits, device)));
               }));
  }
  struct Append {
    int64_t tokens;
    int d, bits;
  };
  for (const Append& c : {Append{1 << 20, 128, 4}, Append{1 << 20, 512, 4}, Append{1, 128, 4}}) {
    const kv::backend::AppendArgs a = kv_append_args(c.tokens, c.d, c.bits);
    fmt::print("  KV append         : {} tokens x 8 heads, D={} {} bits f16 -> {}\n", c.tokens, c.d, c.bits,
               or_error([&] { return kv::to_string(kv::choose_append(a, caps)); }));
  }
}

// A 3³ conv of n rows, c → co channels, f16, 16-byte aligned tensors (the layout facts read only alignment).
spconv::backend::ConvArgs conv_args(int64_t n, int c, int co) {
  spconv::backend::ConvArgs a;
  a.feats = a.weight = reinterpret_cast<const void*>(uintptr_t{256});
  a.nbr = reinterpret_cast<const int32_t*>(uintptr_t{256});
  a.out = reinterpret_cast<void*>(uintptr_t{256});
  a.dtype = DType::f16;
  a.n = n;
  a.k = 27;
  a.ci = c;
  a.co = co;
  return a;
}

void print_conv_choices(const DeviceCaps& caps) {
  // A frugal-built map whose rows suit the halo kernel (a sphere shell in its build order), and a
  // user map (no statistics).
  spconv::MapStats built;
  built.rows = 4643936;
  built.offsets = 27;
  built.valid = true;
  built.halo_samples = spconv::kHaloSamples;
  for (auto& by_width : built.halo_fits)
    for (int& f : by_width) f = spconv::kHaloSamples;
  for (int c : {64, 128, 256}) {
    const spconv::backend::ConvArgs a = conv_args(built.rows, c, c);
    fmt::print("  submanifold conv  : N={} 3^3 C={} f16, built map -> {}; user map -> {}\n", built.rows, c,
               or_error([&] { return spconv::to_string(spconv::choose(a, caps, &built)); }),
               or_error([&] { return spconv::to_string(spconv::choose(a, caps, nullptr)); }));
  }
  // The backward's weight gradient of the same layers and of a C -> 8C upsampling conv (dgrad is a
  // forward conv: the lines above with Ci and Co swapped).
  for (auto [ci, co] : {std::pair{64, 64}, std::pair{128, 128}, std::pair{256, 256}, std::pair{128, 1024}}) {
    spconv::backend::WgradArgs w;
    w.feats = w.grad_out = reinterpret_cast<const void*>(uintptr_t{256});
    w.grad_weight = w.grad_bias = reinterpret_cast<void*>(uintptr_t{256});
    w.dtype = DType::f16;
    w.n = built.rows;
    w.k = 27;
    w.ci = ci;
    w.co = co;
    fmt::print("  conv wgrad        : N={} 3^3 {} -> {} f16 -> {}\n", w.n, ci, co,
               or_error([&] { return spconv::to_string(spconv::choose(w, caps)); }));
  }
}

}  // namespace

void add_info_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "info", "show the build (CUDA, architectures), the devices found and which kernel each op would use");
  cmd->callback([] {
    fmt::print("frugal {}\n", version());
    const std::string ptx = built_cuda_ptx().empty() ? "no PTX" : "PTX compute_" + built_cuda_ptx();
    fmt::print("CUDA backend : {}\n", built_with_cuda()
                                          ? "compiled in (machine code " + built_cuda_archs() + ", " + ptx + ")"
                                          : "not compiled in");
    fmt::print("cpu          : {}\n", device_name(Device::cpu()));
    const int n = cuda_device_count();
    for (int i = 0; i < n; ++i) {
      fmt::print("cuda:{}       : {}\n", i, or_error([&] { return device_name(Device::cuda(i)); }));
      print_choices(i);
      print_conv_choices(cuda::device_caps(i));
    }
    if (n == 0) fmt::print("cuda         : no device\n");
  });
}

}  // namespace frugal::tools
