// What the machine has: the host memory a process may still use.
#pragma once

namespace frugal::tools {

// MemAvailable from /proc/meminfo (physical memory when that cannot be read), in bytes.
double host_memory_available();

}  // namespace frugal::tools
