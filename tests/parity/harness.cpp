// Runs every registered parity case: skips CUDA cases without a GPU, asserts the serving variant,
// the output's size and finiteness where the reference is finite, and the normalized error bound.
#include "parity/harness.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cmath>

#include "frugal/runtime.h"
#include "testing.h"

namespace frugal::testing {

std::vector<ParityCase>& parity_cases() {
  static std::vector<ParityCase> cases;
  return cases;
}

namespace {

class Parity : public ::testing::TestWithParam<ParityCase> {};
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Parity);

TEST_P(Parity, MatchesTheCpuReference) {
  const ParityCase& c = GetParam();
  if (c.backend == "cuda" && !cuda_available()) GTEST_SKIP() << "no CUDA device (or a build without CUDA)";
  FRUGAL_TRACE_SEED();
  SCOPED_TRACE(c.op + " " + c.shape + " " + c.dtype + " on " + c.backend + " via " + c.variant);
  const ParityOutcome o = c.run();
  EXPECT_EQ(o.variant, c.variant) << "the call was served by another variant than the case expects";
  ASSERT_EQ(o.got.size(), o.ref.size());
  ASSERT_FALSE(o.ref.empty()) << "a parity case must produce output";
  for (size_t i = 0; i < o.got.size(); ++i)
    if (std::isfinite(o.ref[i])) ASSERT_TRUE(std::isfinite(o.got[i])) << "element " << i << " is " << o.got[i];
  if (c.bound == 0) {
    for (size_t i = 0; i < o.got.size(); ++i) ASSERT_EQ(o.got[i], o.ref[i]) << "element " << i;
  } else {
    EXPECT_LE(rel_error(o.got, o.ref), c.bound);
  }
}

std::string case_name(const ::testing::TestParamInfo<ParityCase>& info) {
  const ParityCase& c = info.param;
  std::string s = c.op + "_" + c.shape + "_" + c.dtype + "_" + c.backend + "_" + c.variant + "_" + std::to_string(info.index);
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(Cases, Parity, ::testing::ValuesIn(parity_cases()), case_name);

}  // namespace
}  // namespace frugal::testing
