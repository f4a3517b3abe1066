// Runs every registered parity case: skips CUDA cases without a GPU, asserts the serving variant and
// that the device runs its architecture, the output's size and finiteness where the reference is
// finite, and the normalized error bound.
//
// `test_parity --sm80-class` runs the CUDA cases as a GPU without sm_90a code would (an A100, an
// RTX 4090 or 5090, a B200): device_caps hides this build's sm_90a code, so every choice takes an
// sm80-class (mma.sync, cp.async) or SIMT variant, and each case asserts that one served it. On a
// Hopper GPU this runs the code of every other generation on real hardware.
#include "parity/harness.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <string_view>

#include "frugal/runtime.h"
#include "testing.h"

namespace frugal::testing {

std::vector<ParityCase>& parity_cases() {
  static std::vector<ParityCase> cases;
  return cases;
}

bool without_sm90a() { return !cuda::device_caps(0).sm90a; }

namespace {

class Parity : public ::testing::TestWithParam<ParityCase> {};
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Parity);

TEST_P(Parity, MatchesTheCpuReference) {
  const ParityCase& c = GetParam();
  const bool cuda = c.backend == "cuda";
  if (cuda && !cuda_available()) GTEST_SKIP() << "no CUDA device (or a build without CUDA)";
  if (!cuda && cuda::sm90a_code_hidden()) GTEST_SKIP() << "the --sm80-class mode runs the CUDA cases";
  const std::string& want =
      cuda && without_sm90a() && !c.variant_without_sm90a.empty() ? c.variant_without_sm90a : c.variant;
  FRUGAL_TRACE_SEED();
  SCOPED_TRACE(c.op + " " + c.shape + " " + c.dtype + " on " + c.backend + " via " + want);
  const ParityOutcome o = c.run();
  EXPECT_EQ(o.variant, want) << "the call was served by another variant than the case expects";
  if (cuda) {
    ASSERT_TRUE(o.arch.has_value()) << "a CUDA case must report the architectures of the variant that served it";
    const DeviceCaps caps = cuda::device_caps(0);
    EXPECT_TRUE(runs_on(*o.arch, caps)) << o.variant << " (" << to_string(*o.arch) << ") served a call on "
                                        << to_string(caps) << ", which cannot run it";
    if (cuda::sm90a_code_hidden())
      EXPECT_TRUE(*o.arch == Arch::sm80 || *o.arch == Arch::simt)
          << "the --sm80-class mode got " << o.variant << " (" << to_string(*o.arch) << ")";
  }
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

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);  // takes the --gtest_* flags out of argv
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--sm80-class") {
      frugal::cuda::hide_sm90a_code(true);
    } else {
      std::fprintf(stderr, "test_parity: unknown option '%s' (--sm80-class, or GoogleTest's --gtest_*)\n", argv[i]);
      return 2;
    }
  }
  return RUN_ALL_TESTS();
}
