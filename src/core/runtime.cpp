// Build and machine queries.
#include "frugal/runtime.h"

#include <omp.h>

#include "core/backend.h"

namespace frugal {

std::string version() { return FRUGAL_VERSION_STRING; }

int cuda_device_count() { return cuda::device_count(); }
bool cuda_available() { return built_with_cuda() && cuda_device_count() > 0; }
int cpu_threads() { return omp_get_max_threads(); }

std::string device_name(Device d) {
  if (d.is_cpu()) return "cpu (" + std::to_string(cpu_threads()) + " threads)";
  return cuda::device_name(d.index);
}

void synchronize(Device d) {
  if (d.is_cuda()) cuda::synchronize(d.index);
}

}  // namespace frugal
