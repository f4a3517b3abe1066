// `frugal info`: what this build and this machine offer.
#include <fmt/core.h>

#include "commands.h"

namespace frugal::tools {

void add_info_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("info", "show the build (CUDA, architectures) and the devices found");
  cmd->callback([] {
    fmt::print("frugal 0.1.0\n");
    fmt::print("CUDA backend : {}\n", built_with_cuda() ? "compiled in (archs " + built_cuda_archs() + ")" : "not compiled in");
    fmt::print("cpu          : {}\n", device_name(Device::cpu()));
    const int n = cuda_device_count();
    for (int i = 0; i < n; ++i) fmt::print("cuda:{}       : {}\n", i, device_name(Device::cuda(i)));
    if (n == 0) fmt::print("cuda         : no device\n");
  });
}

}  // namespace frugal::tools
