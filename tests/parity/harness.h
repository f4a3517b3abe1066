// One parity harness for every op: registered cases of op × shape × dtype × backend × variant, each
// compared with the CPU reference by a normalized error bound stated per op, each asserting which
// kernel variant served it (after ggml's test-backend-ops). An op family registers its cases in its
// own tests/parity/<family>.cpp with FRUGAL_PARITY_CASES; tests/parity/harness.cpp runs them all.
#pragma once

#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "core/device_caps.h"

namespace frugal::testing {

// What one run of a case produced: the backend's output and the CPU reference's, flattened to
// doubles in the same order, the name of the variant that served the backend's call (as the op's
// choice reports it: to_string of its Choice value) and the architectures its code runs on (the
// op's arch_of; every CUDA case states it).
struct ParityOutcome {
  std::vector<double> got, ref;
  std::string variant;
  std::optional<Arch> arch;
};

struct ParityCase {
  std::string op;       // "spconv.submanifold_conv", "attention.decode", "kv.append", ...
  std::string shape;    // a short description, e.g. "N=4096 K=27 Ci=64 Co=64"
  std::string dtype;    // "f32" | "f16" | "bf16"
  std::string backend;  // "cpu" | "cuda"
  std::string variant;  // the variant the case expects to serve it (the choice forced or chosen)
  double bound = 1e-5;  // ‖got − ref‖ / ‖ref‖ must not exceed it (0: bitwise equal)
  std::function<ParityOutcome()> run;
  // The variant that serves the case on a GPU without sm_90a code (any but Hopper, or the
  // --sm80-class mode), where `variant` is an sm_90a one: run() then runs this one on the same
  // shape. Empty: `variant` everywhere.
  std::string variant_without_sm90a = {};
};

std::vector<ParityCase>& parity_cases();

// Whether the CUDA device the cases run on has no sm_90a code (or the --sm80-class mode hides it):
// a case of an sm_90a variant then runs its variant_without_sm90a.
bool without_sm90a();

// How GoogleTest prints a case (instead of its bytes).
inline void PrintTo(const ParityCase& c, std::ostream* os) {
  *os << c.op << " " << c.shape << " " << c.dtype << " " << c.backend << " " << c.variant;
}

struct ParityRegistrar {
  explicit ParityRegistrar(const std::function<void(std::vector<ParityCase>&)>& add) { add(parity_cases()); }
};

}  // namespace frugal::testing

#define FRUGAL_PARITY_CONCAT2(a, b) a##b
#define FRUGAL_PARITY_CONCAT(a, b) FRUGAL_PARITY_CONCAT2(a, b)
// FRUGAL_PARITY_CASES(cases) { cases.push_back({...}); } — at namespace scope, once or more per file.
#define FRUGAL_PARITY_CASES(arg)                                                                             \
  static void FRUGAL_PARITY_CONCAT(frugal_parity_add_, __LINE__)(std::vector<::frugal::testing::ParityCase>&); \
  static const ::frugal::testing::ParityRegistrar FRUGAL_PARITY_CONCAT(frugal_parity_reg_, __LINE__)(          \
      FRUGAL_PARITY_CONCAT(frugal_parity_add_, __LINE__));                                                      \
  static void FRUGAL_PARITY_CONCAT(frugal_parity_add_, __LINE__)(std::vector<::frugal::testing::ParityCase> & arg)
