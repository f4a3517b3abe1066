// What a kernel-choice function knows about the device that will run a call: the facts of the
// device and of this build, never of the data. Every op's `choose` takes one, so the same choice
// is a pure function of (arguments, capabilities) that a CPU-only table test can exercise for any
// GPU generation.
#pragma once

#include <string>

namespace frugal {

struct DeviceCaps {
  int cc_major = 0, cc_minor = 0;  // compute capability; 0.0 for the CPU
  int multiprocessors = 0;         // streaming multiprocessors (0 for the CPU)
  // This build carries sm_90a machine code that the device runs: wgmma, the bulk tensor copy (TMA)
  // and setmaxnreg are available. True only on compute capability 9.0 with "90a" among the built
  // architectures.
  bool sm90a = false;

  int capability() const { return 10 * cc_major + cc_minor; }  // 80, 86, 89, 90, 100, 120, ...
  bool is_gpu() const { return cc_major > 0; }
  bool has_sm80() const { return capability() >= 80; }  // mma.sync m16n8k16 bf16, cp.async, ldmatrix

  // Capabilities of a GPU as a test states them (sm90a: 9.0 with sm_90a code built).
  static DeviceCaps gpu(int major, int minor, int sms, bool sm90a_code = false) {
    DeviceCaps c;
    c.cc_major = major;
    c.cc_minor = minor;
    c.multiprocessors = sms;
    c.sm90a = sm90a_code && major == 9 && minor == 0;
    return c;
  }
};

std::string to_string(const DeviceCaps& caps);  // "sm_90a, 132 SMs" | "cpu"

namespace cuda {
// The capabilities of CUDA device `device` (queried once per device: they cannot change while the
// process runs). Throws frugal::Error in a build without CUDA.
DeviceCaps device_caps(int device);
}  // namespace cuda

}  // namespace frugal
