// Shared-memory mbarriers and the async-proxy fence (PTX "mbarrier", sm_90): what the warp-specialized
// conv (sparse_conv_wgmma.cu) synchronizes with.
// Addresses are 32-bit shared-memory window addresses (__cvta_generic_to_shared).
#pragma once

#include <cstdint>

namespace frugal::cuda {

// Init with the arrivals a phase expects. The first phase has parity 0.
__device__ __forceinline__ void mbar_init(uint32_t addr, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(addr), "r"(count) : "memory");
}
// Makes initialized barriers visible to the async proxy (bulk copies completing on them) without a
// block barrier in between.
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// One arrival (release, CTA scope).
__device__ __forceinline__ void mbar_arrive(uint32_t addr) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(addr) : "memory");
}
// Arrives and adds `bytes` to the transaction count the phase waits for (bulk copies completing on it).
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t addr, int bytes) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n}\n" ::"r"(addr),
               "r"(bytes)
               : "memory");
}
// Waits until the phase of the given parity has completed (acquire: the copied bytes and the arrivers'
// earlier writes are visible). With a suspend-time hint (10 ms): a waiting warp may sleep until the
// phase completes instead of spinning on try_wait (in the conv it measured no change in time either way).
__device__ __forceinline__ void mbar_wait(uint32_t addr, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nwait:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1, %2;\n"
      "@!done bra wait;\n}\n" ::"r"(addr),
      "r"(parity), "r"(10000000)
      : "memory");
}
// A proxy fence between this thread's generic-proxy shared-memory accesses and the async proxy's
// (wgmma reading what cp.async wrote; a bulk copy refilling what the warp has just read).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

}  // namespace frugal::cuda
