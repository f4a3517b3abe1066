// Printing device capabilities (for error messages and `frugal info`), the architectures a
// variant needs, and the switch that hides sm_90a code from device_caps.
#include "core/device_caps.h"

#include <atomic>
#include <sstream>

namespace frugal {

std::string to_string(const DeviceCaps& caps) {
  if (!caps.is_gpu()) return "cpu";
  std::ostringstream os;
  os << "sm_" << caps.capability() << (caps.sm90a ? "a" : "") << ", " << caps.multiprocessors << " SMs";
  return os.str();
}

const char* to_string(Arch arch) {
  switch (arch) {
    case Arch::cpu:
      return "cpu";
    case Arch::simt:
      return "any GPU";
    case Arch::sm80:
      return "sm_80 and newer";
    case Arch::sm90a:
      return "sm_90a";
  }
  return "unknown";
}

bool runs_on(Arch arch, const DeviceCaps& caps) {
  switch (arch) {
    case Arch::cpu:
      return !caps.is_gpu();
    case Arch::simt:
      return caps.is_gpu();
    case Arch::sm80:
      return caps.is_gpu() && caps.has_sm80();
    case Arch::sm90a:
      return caps.is_gpu() && caps.sm90a;
  }
  return false;
}

std::string arch_refusal(Arch arch, const DeviceCaps& caps) {
  if (runs_on(arch, caps)) return {};  // every call's choice asks: no message built
  std::ostringstream why;
  if (arch == Arch::cpu)
    why << "runs CPU calls only, got a call on a GPU (" << to_string(caps) << ")";
  else if (!caps.is_gpu())
    why << "needs a CUDA device, got a call on the CPU";
  else if (arch == Arch::sm80)
    why << "needs compute capability 8.0 or newer (mma.sync, cp.async), got " << to_string(caps);
  else
    why << "needs sm_90a code on a compute capability 9.0 GPU (wgmma, TMA, setmaxnreg), got " << to_string(caps);
  return why.str();
}

namespace cuda {
namespace {
std::atomic<bool> sm90a_hidden{false};
}
void hide_sm90a_code(bool hide) { sm90a_hidden = hide; }
bool sm90a_code_hidden() { return sm90a_hidden; }
}  // namespace cuda

}  // namespace frugal
