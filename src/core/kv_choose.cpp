// The KV append's kernel choice: can_implement per variant, the variants' tiles, and choose.
// The tiles are the fastest of A/B runs on the H200 (docs/performance.md, "KV append"); other GPUs
// take the same ones.
#include "core/kv_choose.h"

#include <algorithm>
#include <cstdint>
#include <sstream>

#include "frugal/error.h"

namespace frugal::kv {

namespace {

int64_t vectors(const backend::AppendArgs& a) { return static_cast<int64_t>(a.seqs) * a.tokens * a.heads; }

AppendChoice tile(AppendVariant v, int chunk, int chunks, int lanes, int max_threads, int min_blocks, bool staged) {
  return {.variant = v,
          .chunk = chunk,
          .chunks = chunks,
          .lanes = lanes,
          .max_threads = max_threads,
          .min_blocks = min_blocks,
          .staged = staged};
}

}  // namespace

const char* to_string(AppendVariant variant) {
  switch (variant) {
    case AppendVariant::generic: return "generic";
    case AppendVariant::fast: return "fast";
    case AppendVariant::mma: return "mma";
  }
  return "unknown";
}

std::string to_string(const AppendChoice& c) {
  std::ostringstream os;
  os << to_string(c.variant);
  if (c.variant != AppendVariant::mma) {
    os << " C=" << c.chunk << " K=" << c.chunks << " G=";
    if (c.lanes)
      os << c.lanes;
    else
      os << "D/" << c.chunk;
  }
  os << " " << c.max_threads << "x" << c.min_blocks << (c.staged ? " staged" : "");
  return os.str();
}

void describe_layout(backend::AppendArgs& a) {
  // Vector loads need every vector, hence the base and the three strides, on the chunk's alignment.
  const uint64_t elem = size_of(a.x_dtype);
  const uint64_t need = std::min<uint64_t>(16, lane_chunk(a.dim) * elem);
  const auto on = [&](int64_t stride) { return static_cast<uint64_t>(stride) * elem % need == 0; };
  a.aligned = reinterpret_cast<uintptr_t>(a.x) % need == 0 && on(a.x_stride_seq) && on(a.x_stride_tok) &&
              on(a.x_stride_head);
  const int64_t row = static_cast<int64_t>(a.heads) * a.dim;  // elements of one token
  a.dense = a.x_stride_head == a.dim && a.x_stride_tok == row && (a.seqs == 1 || a.x_stride_seq == a.tokens * row);
}

std::string append_refusal(AppendVariant variant, const backend::AppendArgs& a, const DeviceCaps& caps) {
  if (const std::string arch = arch_refusal(arch_of(variant), caps); !arch.empty()) return "it " + arch;
  std::ostringstream why;
  const bool wide = a.bits == 4 || a.bits == 8;
  switch (variant) {
    case AppendVariant::generic:
      return "";
    case AppendVariant::fast:
      if (!wide || a.dim < 64 || a.dim > 512)
        why << "it serves head dims 64..512 at 4 or 8 bits, got D = " << a.dim << " at " << a.bits << " bits";
      return why.str();
    case AppendVariant::mma:
      if (a.x_dtype != DType::f16 && a.x_dtype != DType::bf16)
        why << "it needs f16 or bf16 input, got " << to_string(a.x_dtype);
      else if ((a.dim != 64 && a.dim != 128 && a.dim != 256) || !wide)
        why << "it serves D = 64, 128 or 256 at 4 or 8 bits, got D = " << a.dim << " at " << a.bits << " bits";
      else if (a.rule != ScaleRule::l2_norm)
        why << "it computes the L2-norm scale only, the cache uses the least-squares scale";
      else if (!a.aligned)
        why << "it needs every input vector to start on 16 bytes (base and strides of x)";
      return why.str();
  }
  return "unknown variant";
}

AppendChoice append_tile(AppendVariant variant, const backend::AppendArgs& a) {
  switch (variant) {
    case AppendVariant::mma:  // 8 warps, two blocks per SM (16 warps of <= 128 registers)
      return tile(AppendVariant::mma, 0, 0, 0, 256, 2, true);
    case AppendVariant::fast:
      // K = 4 chunks of 8 per lane, G = D/32 lanes per vector. 4 bits: staged at D <= 128, the
      // register prefetch above (staging measured 1.5–2 % slower there). 8 bits: staged in 5
      // blocks of 128 per SM for calls that fill the GPU at D <= 256 (more warps hide the 8-bit
      // table's bank conflicts), else the register prefetch, whose 256 threads build the 1,451-cell
      // table faster for a decode step (and which measured 3 % faster at D = 512).
      if (a.bits == 4) return tile(AppendVariant::fast, 8, 4, a.dim / 32, 256, 2, a.dim <= 128);
      if (a.dim <= 256 && vectors(a) >= kManyVectors) return tile(AppendVariant::fast, 8, 4, a.dim / 32, 128, 5, true);
      return tile(AppendVariant::fast, 8, 4, a.dim / 32, 256, 2, false);
    case AppendVariant::generic:
      // One chunk per lane; D = 4 is one lane (its table is covered, so the lookup needs no clamp).
      if (a.dim == 4) return tile(AppendVariant::generic, 4, 1, 1, 256, 3, false);
      return tile(AppendVariant::generic, 8, 1, 0, 512, 1, false);
  }
  FRUGAL_FAIL(internal, "kv::append", "unknown append variant " << static_cast<int>(variant));
}

AppendChoice choose_append(const backend::AppendArgs& a, const DeviceCaps& caps) {
  FRUGAL_CHECK(caps.is_gpu(), internal, "kv::append", "the kernel choice is for a GPU, got " << to_string(caps));
  // The tensor cores for calls that fill the GPU; a decode step keeps the shuffle kernels.
  if (vectors(a) >= kManyVectors && can_implement(AppendVariant::mma, a, caps)) return append_tile(AppendVariant::mma, a);
  // Compile-time group width and bits where they are instantiated (fully unrolled).
  if (can_implement(AppendVariant::fast, a, caps)) return append_tile(AppendVariant::fast, a);
  return append_tile(AppendVariant::generic, a);
}

AppendChoice resolve_append(const backend::AppendArgs& a, const DeviceCaps& caps, std::optional<AppendVariant> forced,
                            const char* op) {
  if (!forced) return choose_append(a, caps);
  const std::string why = append_refusal(*forced, a, caps);
  FRUGAL_CHECK(why.empty(), unsupported, op, "the forced " << to_string(*forced) << " kernel cannot serve this call: " << why);
  return append_tile(*forced, a);
}

}  // namespace frugal::kv
