// The subcommands of the `frugal` program, each defined in its own cmd_*.cpp, and the helpers
// they share (device choice, ranged options, memory estimates, progress line, error exit).
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>

#include "frugal/frugal.h"
#include "host_memory.h"

namespace frugal::tools {

void add_info_command(CLI::App& app);
void add_kv_command(CLI::App& app);
void add_spconv_command(CLI::App& app);

// --device cpu|cuda|cuda:N|auto (auto: the GPU if there is one). Adds the option to `cmd`.
void add_device_option(CLI::App* cmd, std::string& device);
Device resolve_device(const std::string& name);

// An integer in [lo, hi] from the command line, parsed strictly: decimal digits with an optional
// leading '-', nothing else (no exponent, fraction, wrap-around or saturation). Throws frugal::Error
// "[op] --name must be an integer in [lo, hi], got '...'" otherwise.
int64_t parse_int(const std::string& text, int64_t lo, int64_t hi, const char* op, const std::string& name);
uint64_t parse_uint(const std::string& text, uint64_t lo, uint64_t hi, const char* op, const std::string& name);

// Adds `--name` bound to `value`, accepting integers in [lo, hi] only; the range and the default
// show in --help. `op` names the subcommand in errors ("frugal kv").
template <typename T>
CLI::Option* add_int_option(CLI::App* cmd, const char* op, const std::string& name, T& value, T lo, T hi,
                            const std::string& help) {
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return cmd
      ->add_option_function<std::string>(
          name,
          [&value, lo, hi, op, name](const std::string& text) {
            if constexpr (std::is_unsigned_v<T>) {
              value = static_cast<T>(parse_uint(text, lo, hi, op, name));
            } else {
              value = static_cast<T>(parse_int(text, lo, hi, op, name));
            }
          },
          help + " " + range)
      ->type_name("INT")
      ->default_str(std::to_string(value));
}

// Adds `--name` bound to `value`, refusing an empty string.
CLI::Option* add_text_option(CLI::App* cmd, const char* op, const std::string& name, std::string& value,
                             const std::string& help);

// Refuses with "[op] <what> needs an estimated X GiB of host memory; Y GiB are available" when
// `bytes` exceeds what is available. Call it before allocating.
void check_host_memory(const char* op, double bytes, const std::string& what);
std::string gib(double bytes);

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
