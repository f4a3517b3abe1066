// Printing device capabilities (for error messages and `frugal info`).
#include "core/device_caps.h"

#include <sstream>

namespace frugal {

std::string to_string(const DeviceCaps& caps) {
  if (!caps.is_gpu()) return "cpu";
  std::ostringstream os;
  os << "sm_" << caps.capability() << (caps.sm90a ? "a" : "") << ", " << caps.multiprocessors << " SMs";
  return os.str();
}

}  // namespace frugal
