// frugal: demos and checks of the library from the command line.
#include <fmt/core.h>

#include "commands.h"

namespace frugal::tools {

void add_device_option(CLI::App* cmd, std::string& device) {
  cmd->add_option("--device", device, "where to run: cpu, cuda, cuda:N or auto (the GPU if there is one)")
      ->default_val(device);
}

Device resolve_device(const std::string& name) {
  if (name == "auto") return cuda_available() ? Device::cuda(0) : Device::cpu();
  const Device d = parse_device(name);
  if (d.is_cuda()) {
    FRUGAL_CHECK(built_with_cuda(), unsupported, "frugal",
                 "--device " << name << ": this build has no CUDA backend (rebuild where nvcc exists)");
    FRUGAL_CHECK(cuda_device_count() > d.index, unsupported, "frugal",
                 "--device " << name << ": this machine has " << cuda_device_count() << " CUDA device(s)");
  }
  return d;
}

void Progress::update(double fraction) {
  const auto now = Clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  if (elapsed < 1.0 || now - last_ < std::chrono::milliseconds(250)) return;
  last_ = now;
  shown_ = true;
  fmt::print(stderr, "\r{} {:3.0f}% ({:.1f} s)", label_, 100.0 * fraction, elapsed);
  std::fflush(stderr);
}

void Progress::done() {
  if (shown_) fmt::print(stderr, "\r{} done ({:.1f} s)\n", label_, std::chrono::duration<double>(Clock::now() - start_).count());
  shown_ = false;
}

}  // namespace frugal::tools

int main(int argc, char** argv) {
  CLI::App app{"frugal: fused, memory-frugal kernels for generative inference (sparse voxel conv, low-bit KV cache)"};
  app.require_subcommand(1);
  frugal::tools::add_info_command(app);
  frugal::tools::add_kv_command(app);
  frugal::tools::add_spconv_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const frugal::Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 2;
  }
  return 0;
}
