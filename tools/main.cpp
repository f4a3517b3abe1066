// frugal: demos and checks of the library from the command line.
#include <fmt/core.h>

#include <charconv>
#include <new>

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

namespace {

template <typename T>
T parse_integer(const std::string& text, T lo, T hi, const char* op, const std::string& name) {
  T v{};
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  FRUGAL_CHECK(!text.empty() && ec == std::errc() && ptr == end && v >= lo && v <= hi, invalid_argument, op,
               name << " must be an integer in [" << lo << ", " << hi << "], got '" << text << "'");
  return v;
}

}  // namespace

int64_t parse_int(const std::string& text, int64_t lo, int64_t hi, const char* op, const std::string& name) {
  return parse_integer(text, lo, hi, op, name);
}

uint64_t parse_uint(const std::string& text, uint64_t lo, uint64_t hi, const char* op, const std::string& name) {
  return parse_integer(text, lo, hi, op, name);
}

CLI::Option* add_text_option(CLI::App* cmd, const char* op, const std::string& name, std::string& value,
                             const std::string& help) {
  CLI::Option* o = cmd->add_option_function<std::string>(
      name,
      [&value, op, name](const std::string& text) {
        FRUGAL_CHECK(!text.empty(), invalid_argument, op, name << " must not be empty");
        value = text;
      },
      help);
  if (!value.empty()) o->default_str(value);
  return o;
}

std::string gib(double bytes) { return fmt::format("{:.1f} GiB", bytes / (1024.0 * 1024.0 * 1024.0)); }

void check_host_memory(const char* op, double bytes, const std::string& what) {
  const double available = host_memory_available();
  FRUGAL_CHECK(
      bytes <= available, invalid_argument, op,
      what << " needs an estimated " << gib(bytes) << " of host memory; " << gib(available) << " are available");
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
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    fmt::print(stderr, "error: [frugal] {}\nRun with --help for more information.\n", e.what());
    return e.get_exit_code();
  } catch (const frugal::Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "error: [frugal] out of memory: an allocation failed (try a smaller size)\n");
    return 3;
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: [frugal] unexpected failure: {}\n", e.what());
    return 3;
  } catch (...) {
    fmt::print(stderr, "error: [frugal] unexpected failure of an unknown kind\n");
    return 3;
  }
  return 0;
}
