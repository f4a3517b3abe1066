// The CPU's copies between token vectors and a cache's exact rows (core/kv_backend.h, ExactArgs).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/kv_backend.h"
#include "core/types.h"

namespace frugal::cpu {

namespace {

using kv::backend::ExactArgs;
using kv::backend::exact_row;

using kv::backend::kHalfNaN;

template <typename T>
void store_typed(const ExactArgs& a) {
  const int rows = a.sinks + a.window;
  const int64_t keep = std::min<int64_t>(a.tokens, a.window);  // the newest tokens stay in the window
  for (int s = 0; s < a.seqs; ++s) {
    const int64_t start = a.host_starts[s];
    for (int64_t j = 0; j < a.tokens; ++j) {
      const int64_t t = start + j;
      if (t >= a.sinks && j < a.tokens - keep) continue;
      for (int h = 0; h < a.heads; ++h) {
        const T* x = static_cast<const T*>(a.x) + s * a.x_stride_seq + j * a.x_stride_tok + h * a.x_stride_head;
        uint16_t* row = a.rows + ((static_cast<int64_t>(s) * a.heads + h) * rows + exact_row(t, a.sinks, a.window)) * a.dim;
        bool finite = true;
        for (int i = 0; i < a.dim; ++i) finite &= std::fabs(to_float(x[i])) <= kv::backend::kHalfMax;  // false for NaN
        for (int i = 0; i < a.dim; ++i) row[i] = finite ? float_to_half(to_float(x[i])) : kHalfNaN;
      }
    }
  }
}

template <typename T>
void load_typed(const ExactArgs& a) {
  const int rows = a.sinks + a.window;
  for (int64_t j = 0; j < a.tokens; ++j) {
    const int64_t r = exact_row(a.begin + j, a.sinks, a.window);
    for (int h = 0; h < a.heads; ++h) {
      const uint16_t* row = a.rows + (static_cast<int64_t>(h) * rows + r) * a.dim;
      T* out = static_cast<T*>(a.out) + (j * a.heads + h) * static_cast<int64_t>(a.dim);
      for (int i = 0; i < a.dim; ++i) out[i] = from_float<T>(half_to_float(row[i]));
    }
  }
}

}  // namespace

void kv_store_exact(const ExactArgs& a) {
  dispatch_float(a.x_dtype, "kv::append", [&]<typename T>() { store_typed<T>(a); });
}

void kv_load_exact(const ExactArgs& a) {
  dispatch_float(a.out_dtype, "kv::dequantize", [&]<typename T>() { load_typed<T>(a); });
}

}  // namespace frugal::cpu
