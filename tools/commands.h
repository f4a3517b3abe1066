// The subcommands of the `frugal` program, each defined in its own cmd_*.cpp, and the helpers
// they share (device choice, progress line, error exit).
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <functional>
#include <string>

#include "frugal/frugal.h"

namespace frugal::tools {

void add_info_command(CLI::App& app);
void add_kv_command(CLI::App& app);
void add_spconv_command(CLI::App& app);

// --device cpu|cuda|cuda:N|auto (auto: the GPU if there is one). Adds the option to `cmd`.
void add_device_option(CLI::App* cmd, std::string& device);
Device resolve_device(const std::string& name);

// Prints "\r<label> 37% (3.1 s)" on stderr at most 4 times a second, only once the work has
// run longer than a second; done() ends the line.
class Progress {
 public:
  explicit Progress(std::string label) : label_(std::move(label)), start_(Clock::now()) {}
  void update(double fraction);
  void done();

 private:
  using Clock = std::chrono::steady_clock;
  std::string label_;
  Clock::time_point start_, last_{};
  bool shown_ = false;
};

}  // namespace frugal::tools
