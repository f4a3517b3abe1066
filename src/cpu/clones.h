// Hot CPU loops are compiled for three x86-64 levels (SSE2, AVX2 with FMA, AVX-512), the best one
// the CPU runs picked at load time; other targets, and clang (whose target_clones takes no function
// templates), compile them once. Helpers marked FRUGAL_INLINE are inlined into each clone.
// Loops written in AVX2 intrinsics are compiled for that level alone (FRUGAL_AVX2) and called where
// cpu_has_avx2() says the CPU runs them; those that also convert f16 by F16C (FRUGAL_AVX2_F16C)
// where cpu_has_avx2_f16c() does.
#pragma once

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__)
#define FRUGAL_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define FRUGAL_CPU_CLONES
#endif
#define FRUGAL_INLINE [[gnu::always_inline]] inline

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#define FRUGAL_CPU_AVX2 1
#define FRUGAL_AVX2 __attribute__((target("avx2,fma")))
#define FRUGAL_AVX2_INLINE [[gnu::always_inline]] inline __attribute__((target("avx2,fma")))
#define FRUGAL_AVX2_F16C __attribute__((target("avx2,fma,f16c")))
#define FRUGAL_AVX2_F16C_INLINE [[gnu::always_inline]] inline __attribute__((target("avx2,fma,f16c")))
namespace frugal::cpu {
inline bool cpu_has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}
// F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports does not name it.
inline bool cpu_has_avx2_f16c() {
  static const bool yes = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return cpu_has_avx2() && __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
  }();
  return yes;
}
}  // namespace frugal::cpu
#else
#define FRUGAL_CPU_AVX2 0
#endif
