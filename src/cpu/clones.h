// Hot CPU loops are compiled for three x86-64 levels (SSE2, AVX2 with FMA, AVX-512), the best one
// the CPU runs picked at load time; other targets, and clang (whose target_clones takes no function
// templates), compile them once. Helpers marked FRUGAL_INLINE are inlined into each clone.
#pragma once

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__)
#define FRUGAL_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define FRUGAL_CPU_CLONES
#endif
#define FRUGAL_INLINE [[gnu::always_inline]] inline
