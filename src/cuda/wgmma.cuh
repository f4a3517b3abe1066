// Hopper's warpgroup MMA (wgmma.mma_async, sm_90a) as small device functions: what the conv kernels
// of sparse_conv_wgmma.cu and the tensor-pipe ceiling of bench/wgmma_ceiling.cu issue.
// The instructions exist only in sm_90a code: FRUGAL_WGMMA is defined where they may be used.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FRUGAL_WGMMA 1
#endif

namespace frugal::cuda {

// Shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format" of wgmma): start address,
// leading- and stride-dimension byte offsets (each >> 4, 14 bits) and the swizzle mode in bits
// 62-63 (1: 128-byte swizzle). Every tile it describes starts at a multiple of 1024 bytes, so the
// base offset (bits 49-51) is 0.
__host__ __device__ constexpr uint64_t smem_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((addr >> 4) & 0x3fff) | static_cast<uint64_t>((lbo >> 4) & 0x3fff) << 16 |
         static_cast<uint64_t>((sbo >> 4) & 0x3fff) << 32 | uint64_t{1} << 62;
}

// smem_desc's two words, for descriptors formed in the hot loops: the low word's address field takes
// address >> 4 plus offsets (>> 4) added as integers — every tile sits below 256 KB, so the sum stays
// inside the field's 14 bits — and the high word is a constant (it stays one in the code). In the conv
// kernels' steps, building each descriptor from its address took five dependent instructions a wgmma;
// this form measured 3–4% faster (docs/performance.md, "Submanifold conv").
template <uint32_t LBO, uint32_t SBO>
struct SmemDesc {
  static constexpr uint32_t kLo = static_cast<uint32_t>(smem_desc(0, LBO, SBO));  // at address 0
  static constexpr uint32_t kHi = static_cast<uint32_t>(smem_desc(0, LBO, SBO) >> 32);
  __device__ static __forceinline__ uint64_t with_lo(uint32_t lo) {
    uint64_t d;
    asm("mov.b64 %0, {%1, %2};\n" : "=l"(d) : "r"(lo), "r"(kHi));
    return d;
  }
};

#ifdef FRUGAL_WGMMA
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// A warpgroup's registers a thread, moved between warpgroups of a block at run time (every warp of the
// warpgroup executes it): dec gives registers back to the block's pool, inc waits until it can take them.
// ptxas allocates the code after each within its count.
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
// Keeps the compiler from moving accumulator registers across an in-flight wgmma.
template <int R>
__device__ __forceinline__ void fence_acc(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// Keeps registers an in-flight wgmma reads where they are until the wait that ends it.
__device__ __forceinline__ void fence_regs(uint32_t (&r)[4][4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
}

// d (64 × N f32 over the warpgroup) += A (64 × 16, K-major, descriptor da) · B (16 × N, N-major
// ("transposed"), descriptor db). Scale-d 1 (accumulate), scales +1, A not transposed, B transposed.
template <typename T, int N>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t da, uint64_t db);
// The same with A (64 × 16) from registers: each warp's 16 rows as an m16n8k16 A fragment, a[0..3].
template <typename T, int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db);

// The (dtype, N) forms differ only in the instruction's shape and type and the number of
// accumulator registers; the operand lists are spelled out by these macros.
#define FRUGAL_ACC8(i)                                                                                        \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
      "+f"(d[i + 7])
#define FRUGAL_ACC32(i) FRUGAL_ACC8(i), FRUGAL_ACC8(i + 8), FRUGAL_ACC8(i + 16), FRUGAL_ACC8(i + 24)
// Accumulator placeholders %0 … %127, 32 at a time.
#define FRUGAL_REGS_0                                                      \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define FRUGAL_REGS_1                                                                \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define FRUGAL_REGS_2                                                                \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define FRUGAL_REGS_3                                                                            \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define FRUGAL_REGS_64 FRUGAL_REGS_0
#define FRUGAL_REGS_128 FRUGAL_REGS_0 ", " FRUGAL_REGS_1
#define FRUGAL_REGS_256 FRUGAL_REGS_0 ", " FRUGAL_REGS_1 ", " FRUGAL_REGS_2 ", " FRUGAL_REGS_3
#define FRUGAL_ACC_64 FRUGAL_ACC32(0)
#define FRUGAL_ACC_128 FRUGAL_ACC32(0), FRUGAL_ACC32(32)
#define FRUGAL_ACC_256 FRUGAL_ACC32(0), FRUGAL_ACC32(32), FRUGAL_ACC32(64), FRUGAL_ACC32(96)
// A (N / 2 accumulators first) and B operand placeholders of each form: ss "%a, %b"; rs "{%a..%a+3}, %b".
#define FRUGAL_SS_64 "%32, %33"
#define FRUGAL_SS_128 "%64, %65"
#define FRUGAL_SS_256 "%128, %129"
#define FRUGAL_RS_64 "{%32, %33, %34, %35}, %36"
#define FRUGAL_RS_128 "{%64, %65, %66, %67}, %68"
#define FRUGAL_RS_256 "{%128, %129, %130, %131}, %132"
#define FRUGAL_WGMMA_FORMS(T, TY, N)                                                                         \
  template <>                                                                                                \
  __device__ __forceinline__ void wgmma_ss<T, N>(float(&d)[N / 2], uint64_t da, uint64_t db) {               \
    asm volatile(                                                                                            \
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                                           \
        "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " {" FRUGAL_REGS_##N "}, " FRUGAL_SS_##N \
        ", p, 1, 1, 0, 1;\n}\n"                                                                              \
        : FRUGAL_ACC_##N                                                                                     \
        : "l"(da), "l"(db));                                                                                 \
  }                                                                                                          \
  template <>                                                                                                \
  __device__ __forceinline__ void wgmma_rs<T, N>(float(&d)[N / 2], const uint32_t(&a)[4], uint64_t db) {     \
    asm volatile(                                                                                            \
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                                           \
        "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " {" FRUGAL_REGS_##N "}, " FRUGAL_RS_##N \
        ", p, 1, 1, 1;\n}\n"                                                                                 \
        : FRUGAL_ACC_##N                                                                                     \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));                                              \
  }
FRUGAL_WGMMA_FORMS(__half, "f16", 64)
FRUGAL_WGMMA_FORMS(__half, "f16", 128)
FRUGAL_WGMMA_FORMS(__half, "f16", 256)
FRUGAL_WGMMA_FORMS(__nv_bfloat16, "bf16", 64)
FRUGAL_WGMMA_FORMS(__nv_bfloat16, "bf16", 128)
FRUGAL_WGMMA_FORMS(__nv_bfloat16, "bf16", 256)
#undef FRUGAL_WGMMA_FORMS
#undef FRUGAL_RS_256
#undef FRUGAL_RS_128
#undef FRUGAL_RS_64
#undef FRUGAL_SS_256
#undef FRUGAL_SS_128
#undef FRUGAL_SS_64
#undef FRUGAL_ACC_256
#undef FRUGAL_ACC_128
#undef FRUGAL_ACC_64
#undef FRUGAL_REGS_256
#undef FRUGAL_REGS_128
#undef FRUGAL_REGS_64
#undef FRUGAL_REGS_3
#undef FRUGAL_REGS_2
#undef FRUGAL_REGS_1
#undef FRUGAL_REGS_0
#undef FRUGAL_ACC32
#undef FRUGAL_ACC8
#endif  // FRUGAL_WGMMA

}  // namespace frugal::cuda
