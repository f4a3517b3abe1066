// frugal::Error, the one exception type of the library, and the checking macros that raise it.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace frugal {

enum class ErrorCode {
  invalid_argument,  // wrong shape, dtype, device, or a value outside what the op accepts
  out_of_range,      // an index or position past what exists (write_pos past capacity, ...)
  unsupported,       // valid request the build or device cannot serve (no CUDA, arch missing)
  cuda,              // a CUDA runtime call failed
  internal,          // a broken invariant inside frugal: a bug, please report it
};

const char* to_string(ErrorCode code);

// Every message starts with the operation's name in brackets and states the offending values:
//   [kv::append] head_dim must be a power of two in [4, 4096], got 96
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace frugal

// FRUGAL_CHECK(cond, code, op, stream-expression): throws frugal::Error("[op] ...") unless cond.
//   FRUGAL_CHECK(d > 0, invalid_argument, "kv::append", "head_dim must be positive, got " << d);
#define FRUGAL_CHECK(cond, code, op, msg)                                              \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      std::ostringstream frugal_check_os_;                                             \
      frugal_check_os_ << "[" << (op) << "] " << msg;                                  \
      throw ::frugal::Error(::frugal::ErrorCode::code, frugal_check_os_.str());        \
    }                                                                                  \
  } while (0)

#define FRUGAL_FAIL(code, op, msg) FRUGAL_CHECK(false, code, op, msg)
