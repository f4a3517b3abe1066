// What a kernel-choice function knows about the device that will run a call: the facts of the
// device and of this build, never of the data. Every op's `choose` takes one, so the same choice
// is a pure function of (arguments, capabilities) that a CPU-only table test can exercise for any
// GPU generation. Also the architectures a variant's code needs (Arch), which each op states once
// per variant (its `arch_of`) and every can_implement checks first.
#pragma once

#include <cstdint>
#include <string>

namespace frugal {

struct DeviceCaps {
  int cc_major = 0, cc_minor = 0;  // compute capability; 0.0 for the CPU
  int multiprocessors = 0;         // streaming multiprocessors (0 for the CPU)
  // This build carries sm_90a machine code that the device runs: wgmma, the bulk tensor copy (TMA)
  // and setmaxnreg are available. True only on compute capability 9.0 with "90a" among the built
  // architectures.
  bool sm90a = false;
  // The most shared memory one block may use (static and dynamic, the opt-in limit), bytes: 163 KB on
  // 8.0, 227 KB on 9.0 and 10.x, 99 KB on 8.6, 8.9 and 12.x (0 for the CPU).
  int smem_per_block = 0;

  int capability() const { return 10 * cc_major + cc_minor; }  // 80, 86, 89, 90, 100, 120, ...
  bool is_gpu() const { return cc_major > 0; }
  bool has_sm80() const { return capability() >= 80; }  // mma.sync m16n8k16 bf16, cp.async, ldmatrix

  // Capabilities of a GPU as a test states them (sm90a: 9.0 with sm_90a code built; the shared
  // memory of its generation).
  static DeviceCaps gpu(int major, int minor, int sms, bool sm90a_code = false) {
    DeviceCaps c;
    c.cc_major = major;
    c.cc_minor = minor;
    c.multiprocessors = sms;
    c.sm90a = sm90a_code && major == 9 && minor == 0;
    c.smem_per_block = smem_per_block_of(major, minor);
    return c;
  }
  // The opt-in shared memory a block of compute capability major.minor may use (the CUDA
  // Programming Guide's table of technical specifications); what cudaDevAttrMaxSharedMemoryPerBlockOptin
  // reports on such a device.
  static int smem_per_block_of(int major, int minor) {
    constexpr int kb = 1024;
    if (major == 8 && (minor == 0 || minor == 7)) return 163 * kb;
    if (major == 9 || major == 10) return 227 * kb;
    if (major == 7 && minor < 5) return 96 * kb;
    if (major == 7) return 64 * kb;
    return 99 * kb;  // 8.6, 8.9, 12.x, and the least of any generation after them
  }
};

std::string to_string(const DeviceCaps& caps);  // "sm_90a, 132 SMs" | "cpu"

// The architectures a kernel variant's code runs on, from what its instructions need. Blackwell
// (10.x, 12.x) and every GPU after Hopper run the sm80 class: sm_90a code runs on 9.0 alone.
enum class Arch : uint8_t {
  cpu,    // the CPU backend
  simt,   // any CUDA GPU this build carries code for (CUDA cores only)
  sm80,   // compute capability 8.0 or newer: mma.sync m16n8k16 on f16/bf16, cp.async, ldmatrix, bf16 WMMA
  sm90a,  // sm_90a code on a compute capability 9.0 GPU: wgmma, TMA bulk copies, setmaxnreg
};
const char* to_string(Arch arch);  // "cpu", "any GPU", "sm_80 and newer", "sm_90a"
bool runs_on(Arch arch, const DeviceCaps& caps);
// Why code of `arch` cannot run on `caps`, as the end of a sentence that names the variant ("needs
// compute capability 8.0 or newer (mma.sync, cp.async), got sm_75, 40 SMs"); empty where it can.
std::string arch_refusal(Arch arch, const DeviceCaps& caps);

namespace cuda {
// The capabilities of CUDA device `device` (queried once per device: they cannot change while the
// process runs). Throws frugal::Error in a build without CUDA.
DeviceCaps device_caps(int device);

// From this call on, device_caps reports every GPU as one without sm_90a code (sm90a false), as
// on any GPU but Hopper: each op's choice then takes only its sm80-class and SIMT variants. What
// the parity harness's --sm80-class mode uses to run the code of pre-Hopper and Blackwell GPUs on
// a Hopper one; a process-wide setting, to be made before the first CUDA call.
void hide_sm90a_code(bool hide);
bool sm90a_code_hidden();
}  // namespace cuda

}  // namespace frugal
