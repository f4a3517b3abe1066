// Names of error codes.
#include "frugal/error.h"

namespace frugal {

const char* to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::invalid_argument: return "invalid_argument";
    case ErrorCode::out_of_range: return "out_of_range";
    case ErrorCode::unsupported: return "unsupported";
    case ErrorCode::cuda: return "cuda";
    case ErrorCode::internal: return "internal";
  }
  return "unknown";
}

}  // namespace frugal
