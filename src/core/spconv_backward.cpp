// Public sparse-conv backward: validate once (as the forward does), check a map not known valid once,
// then grad_feats through the forward's kernel choice (src/core/spconv_choose.cpp) over mirrored weights,
// and grad_weight and grad_bias through the wgrad choice (src/core/spconv_backward_choose.cpp).
#include <climits>
#include <cstring>
#include <initializer_list>

#include "core/backend.h"
#include "core/device_caps.h"
#include "core/sparse_conv_backend.h"
#include "core/spconv_backward_choose.h"
#include "core/spconv_choose.h"
#include "core/validate.h"

namespace frugal::spconv {

namespace {

constexpr const char* kOp = "spconv::submanifold_conv_backward";

bool overlaps(const TensorView& a, const TensorView& b) {
  if (a.empty() || b.empty() || !(a.device == b.device)) return false;
  const auto* a0 = static_cast<const char*>(a.data);
  const auto* b0 = static_cast<const char*>(b.data);
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

struct Sizes {
  int64_t n = 0, k = 0, ci = 0, co = 0;
};

// One requested gradient: the dtype of feats, the expected shape, contiguous, on the device of feats, and
// overlapping none of the inputs.
void validate_gradient(const TensorView& g, const char* name, std::initializer_list<int64_t> shape,
                       const TensorView& feats, std::initializer_list<const TensorView*> inputs) {
  detail::check_tensor(g, kOp, name, static_cast<int>(shape.size()), {feats.dtype});
  detail::check_shape(g, kOp, name, shape);
  detail::check_contiguous(g, kOp, name);
  detail::check_same_device(feats, g, kOp, "feats", name);
  for (const TensorView* in : inputs)
    FRUGAL_CHECK(!overlaps(g, *in), invalid_argument, kOp,
                 name << " overlaps an input or another gradient; the backward cannot run in place");
}

Sizes validate(const TensorView& grad_out, const TensorView& feats, const TensorView& nbr, const TensorView& weight,
               const GradientBuffers& g, const BackwardOptions& o) {
  const std::initializer_list<DType> floats = {DType::f32, DType::f16, DType::bf16, DType::f64};  // f64: CPU only
  detail::check_tensor(nbr, kOp, "nbr", 2, {DType::i32});
  detail::check_tensor(feats, kOp, "feats", 2, floats);
  detail::check_tensor(weight, kOp, "weight", 3, floats);
  detail::check_tensor(grad_out, kOp, "grad_out", 2, floats);
  Sizes s;
  s.k = nbr.size(0);
  s.n = nbr.size(1);
  FRUGAL_CHECK(s.k >= 1 && s.k <= INT32_MAX, invalid_argument, kOp,
               "nbr must have at least one kernel offset, got " << nbr.describe());
  FRUGAL_CHECK(s.n < INT32_MAX, invalid_argument, kOp,
               "N = " << s.n << " rows do not fit the int32 map with sentinel N; at most " << INT32_MAX - 1);
  FRUGAL_CHECK(feats.size(0) == s.n || feats.size(0) == s.n + 1, invalid_argument, kOp,
               "feats must have N = " << s.n << " rows (or N + 1, the padded form), got " << feats.describe());
  s.ci = feats.size(1);
  s.co = weight.size(2);
  FRUGAL_CHECK(s.ci >= 1 && s.ci < INT32_MAX, invalid_argument, kOp,
               "feats must have between 1 and " << INT32_MAX - 1 << " channels, got " << feats.describe());
  detail::check_shape(weight, kOp, "weight", {s.k, s.ci, -1});
  FRUGAL_CHECK(s.co >= 1 && s.co < INT32_MAX, invalid_argument, kOp,
               "weight must have between 1 and " << INT32_MAX - 1 << " output channels, got " << weight.describe());
  detail::check_shape(grad_out, kOp, "grad_out", {s.n, s.co});
  FRUGAL_CHECK(weight.dtype == feats.dtype && grad_out.dtype == feats.dtype, invalid_argument, kOp,
               "feats, weight and grad_out must share one dtype, got "
                   << to_string(feats.dtype) << ", " << to_string(weight.dtype) << ", " << to_string(grad_out.dtype));
  detail::check_contiguous(feats, kOp, "feats");
  detail::check_contiguous(nbr, kOp, "nbr");
  detail::check_contiguous(weight, kOp, "weight");
  detail::check_contiguous(grad_out, kOp, "grad_out");
  detail::check_same_device(feats, nbr, kOp, "feats", "nbr");
  detail::check_same_device(feats, weight, kOp, "feats", "weight");
  detail::check_same_device(feats, grad_out, kOp, "feats", "grad_out");
  FRUGAL_CHECK(feats.dtype != DType::f64 || feats.device.is_cpu(), unsupported, kOp,
               "f64 runs on the CPU only (for gradient checks), got feats " << feats.describe());
  const TensorView none;
  const TensorView& gf = g.feats ? *g.feats : none;
  const TensorView& gw = g.weight ? *g.weight : none;
  const TensorView& gb = g.bias ? *g.bias : none;
  if (g.feats)
    validate_gradient(gf, "grad_feats", {feats.size(0), s.ci}, feats, {&grad_out, &feats, &nbr, &weight, &gw, &gb});
  if (g.weight)
    validate_gradient(gw, "grad_weight", {s.k, s.ci, s.co}, feats, {&grad_out, &feats, &nbr, &weight, &gf, &gb});
  if (g.bias) validate_gradient(gb, "grad_bias", {s.co}, feats, {&grad_out, &feats, &nbr, &weight, &gf, &gw});
  if (o.map_stats)
    FRUGAL_CHECK(o.map_stats->rows == s.n && o.map_stats->offsets == s.k, invalid_argument, kOp,
                 "map_stats describe a map [" << o.map_stats->offsets << ", " << o.map_stats->rows << "], got nbr "
                                              << nbr.describe());
  return s;
}

void zero(const TensorView& t, Stream stream) {
  if (t.empty()) return;
  if (t.device.is_cpu())
    std::memset(t.data, 0, t.nbytes());
  else
    cuda::memset_zero(t.data, t.nbytes(), stream);
}

// The forward conv that computes grad_feats [0, N): over grad_out, Ci and Co exchanged, the conv's own
// weight (the backends mirror it), no bias, no per-call check (the map was checked before, if asked).
backend::ConvArgs dgrad_args(const TensorView& grad_out, const TensorView& nbr, const TensorView& weight,
                             const TensorView& grad_feats, const int32_t* order, const Sizes& s) {
  backend::ConvArgs a;
  a.order = order;
  a.feats = grad_out.data;
  a.nbr = nbr.data_as<const int32_t>();
  a.weight = weight.data;
  a.out = grad_feats.data;
  a.dtype = grad_out.dtype;
  a.n = s.n;
  a.k = static_cast<int>(s.k);
  a.ci = static_cast<int>(s.co);
  a.co = static_cast<int>(s.ci);
  a.check = false;
  a.device = grad_out.device.index;
  return a;
}

backend::WgradArgs wgrad_args(const TensorView& grad_out, const TensorView& feats, const TensorView& nbr,
                              const GradientBuffers& g, const int32_t* order, const Sizes& s) {
  backend::WgradArgs a;
  a.order = order;
  a.feats = feats.data;
  a.nbr = nbr.data_as<const int32_t>();
  a.grad_out = grad_out.data;
  a.grad_weight = g.weight ? g.weight->data : nullptr;
  a.grad_bias = g.bias ? g.bias->data : nullptr;
  a.dtype = feats.dtype;
  a.n = s.n;
  a.k = static_cast<int>(s.k);
  a.ci = static_cast<int>(s.ci);
  a.co = static_cast<int>(s.co);
  a.device = feats.device.index;
  return a;
}

// A forced choice, completed and refused (naming the op, the gradient and the variant) where it cannot run.
template <typename Args, typename Choice>
Choice forced_choice(const Args& a, const DeviceCaps& caps, const Choice& forced, const char* which) {
  const Choice c = complete(a, caps, forced);
  std::string why;
  FRUGAL_CHECK(can_implement(a, caps, c, &why), unsupported, kOp,
               "the forced " << which << " choice " << to_string(c) << " cannot run here: the " << to_string(c.variant)
                             << " variant " << why);
  return c;
}

BackwardChoice run_backward(const TensorView& grad_out, const TensorView& feats, const TensorView& nbr,
                            const TensorView& weight, const GradientBuffers& g, const BackwardOptions& o, bool run) {
  const Sizes s = validate(grad_out, feats, nbr, weight, g, o);
  const int32_t* order = backend::checked_order(o.order, o.map_stats, s.n, feats, kOp);
  BackwardChoice served;
  if (!g.feats && !g.weight && !g.bias) return served;
  if (s.n == 0) {  // no rows: zero gradients (grad_feats has the padded row at most)
    if (run)
      for (const TensorView* t : {g.feats, g.weight, g.bias})
        if (t) zero(*t, o.stream);
    return served;
  }
  FRUGAL_CHECK(feats.data && nbr.data && weight.data && grad_out.data, invalid_argument, kOp, "a tensor has no data");
  detail::check_device_usable(feats.device, kOp);
  const bool cpu = feats.device.is_cpu();
  const DeviceCaps caps = cpu ? DeviceCaps{} : cuda::device_caps(feats.device.index);
  // One check of a map not known valid serves both gradients (a bad entry raises, naming it). The choices
  // see the statistics the caller passed, so that choose_conv_backward tells what a call runs.
  if (run && o.check == MapCheck::checked && !(o.map_stats && o.map_stats->valid)) check_kernel_map(nbr, o.stream);

  if (g.feats) {
    const int64_t rows_dims[2] = {s.n, s.ci};
    const TensorView rows(g.feats->data, g.feats->dtype, rows_dims, g.feats->device);
    const backend::ConvArgs a = dgrad_args(grad_out, nbr, weight, rows, order, s);
    ConvChoice c =
        o.dgrad ? forced_choice(a, caps, *o.dgrad, "dgrad") : choose(a, caps, o.map_stats ? &*o.map_stats : nullptr);
    if (run) {
      if (cpu)
        cpu::spconv_dgrad(a);
      else
        c.variant = cuda::spconv_dgrad(a, c, o.stream).variant;
      if (g.feats->size(0) > s.n) {  // the padded form's row N
        const int64_t pad_dims[2] = {1, s.ci};
        zero(TensorView(static_cast<char*>(g.feats->data) + rows.nbytes(), g.feats->dtype, pad_dims, g.feats->device),
             o.stream);
      }
    }
    served.dgrad = c;
  }
  if (g.weight || g.bias) {
    const backend::WgradArgs a = wgrad_args(grad_out, feats, nbr, g, order, s);
    const WgradChoice c = o.wgrad ? forced_choice(a, caps, *o.wgrad, "wgrad") : choose(a, caps);
    if (run) {
      if (cpu)
        cpu::spconv_wgrad(a);
      else
        cuda::spconv_wgrad(a, c, o.stream);
    }
    served.wgrad = c;
  }
  return served;
}

const TensorView& map_view(const KernelMap& map) {
  FRUGAL_CHECK(map.columns().defined(), invalid_argument, kOp, "the KernelMap is empty (default-constructed)");
  return map.columns().view();
}

BackwardOptions with_map(const KernelMap& map, const BackwardOptions& options) {
  BackwardOptions o = options;
  o.map_stats = map.stats();
  o.order = map.order().defined() ? map.order().view() : TensorView();
  return o;
}

ConvGradients allocate_and_run(const TensorView& grad_out, const TensorView& feats, const TensorView& nbr,
                               const TensorView& weight, GradientRequest r, const BackwardOptions& o) {
  validate(grad_out, feats, nbr, weight, GradientBuffers{}, o);
  ConvGradients out;
  const int64_t wdims[3] = {weight.size(0), weight.size(1), weight.size(2)}, bdims[1] = {weight.size(2)};
  if (r.feats) out.feats = Tensor::empty(feats.sizes(), feats.dtype, feats.device);
  if (r.weight) out.weight = Tensor::empty(wdims, feats.dtype, feats.device);
  if (r.bias) out.bias = Tensor::empty(bdims, feats.dtype, feats.device);
  GradientBuffers g;
  if (r.feats) g.feats = &out.feats.view();
  if (r.weight) g.weight = &out.weight.view();
  if (r.bias) g.bias = &out.bias.view();
  out.choice = run_backward(grad_out, feats, nbr, weight, g, o, true);
  return out;
}

}  // namespace

BackwardChoice submanifold_conv_backward(const TensorView& grad_out, const TensorView& feats, const TensorView& nbr,
                                         const TensorView& weight, const GradientBuffers& grads,
                                         const BackwardOptions& options) {
  return run_backward(grad_out, feats, nbr, weight, grads, options, true);
}

ConvGradients submanifold_conv_backward(const TensorView& grad_out, const TensorView& feats, const TensorView& nbr,
                                        const TensorView& weight, GradientRequest request,
                                        const BackwardOptions& options) {
  return allocate_and_run(grad_out, feats, nbr, weight, request, options);
}

BackwardChoice submanifold_conv_backward(const TensorView& grad_out, const TensorView& feats, const KernelMap& map,
                                         const TensorView& weight, const GradientBuffers& grads,
                                         const BackwardOptions& options) {
  return run_backward(grad_out, feats, map_view(map), weight, grads, with_map(map, options), true);
}

ConvGradients submanifold_conv_backward(const TensorView& grad_out, const TensorView& feats, const KernelMap& map,
                                        const TensorView& weight, GradientRequest request,
                                        const BackwardOptions& options) {
  return allocate_and_run(grad_out, feats, map_view(map), weight, request, with_map(map, options));
}

BackwardChoice choose_conv_backward(const TensorView& grad_out, const TensorView& feats, const TensorView& nbr,
                                    const TensorView& weight, const GradientBuffers& grads,
                                    const BackwardOptions& options) {
  return run_backward(grad_out, feats, nbr, weight, grads, options, false);
}

BackwardChoice choose_conv_backward(const TensorView& grad_out, const TensorView& feats, const KernelMap& map,
                                    const TensorView& weight, const GradientBuffers& grads,
                                    const BackwardOptions& options) {
  return run_backward(grad_out, feats, map_view(map), weight, grads, with_map(map, options), false);
}

}  // namespace frugal::spconv
