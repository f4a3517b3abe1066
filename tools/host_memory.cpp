// See host_memory.h.
#include "host_memory.h"

#include <unistd.h>

#include <fstream>
#include <string>

namespace frugal::tools {

double host_memory_available() {
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);)
    if (line.rfind("MemAvailable:", 0) == 0) return std::stod(line.substr(13)) * 1024.0;  // "MemAvailable: N kB"
  return static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
}

}  // namespace frugal::tools
