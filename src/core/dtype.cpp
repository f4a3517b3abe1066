// Names and parsing of dtypes and devices.
#include <algorithm>
#include <cctype>
#include <string>

#include "frugal/dtype.h"
#include "frugal/error.h"

namespace frugal {

const char* to_string(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::u8: return "u8";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::f64: return "f64";
  }
  return "?";
}

DType parse_dtype(const std::string& name) {
  std::string s = name;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s == "f32" || s == "fp32" || s == "float32" || s == "float") return DType::f32;
  if (s == "f16" || s == "fp16" || s == "float16" || s == "half") return DType::f16;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  if (s == "u8" || s == "uint8") return DType::u8;
  if (s == "i32" || s == "int32") return DType::i32;
  if (s == "i64" || s == "int64") return DType::i64;
  if (s == "f64" || s == "float64" || s == "double") return DType::f64;
  FRUGAL_FAIL(invalid_argument, "parse_dtype", "unknown dtype '" << name << "', expected f32, f16, bf16, u8, i32, i64 or f64");
}

std::string to_string(Device d) { return d.is_cpu() ? "cpu" : "cuda:" + std::to_string(d.index); }

Device parse_device(const std::string& name) {
  if (name == "cpu") return Device::cpu();
  if (name == "cuda") return Device::cuda(0);
  if (name.rfind("cuda:", 0) == 0) {
    const std::string idx = name.substr(5);
    const bool digits = !idx.empty() && idx.size() < 4 &&
                        std::all_of(idx.begin(), idx.end(), [](unsigned char c) { return std::isdigit(c); });
    if (digits) return Device::cuda(std::stoi(idx));
  }
  FRUGAL_FAIL(invalid_argument, "parse_device", "unknown device '" << name << "', expected cpu, cuda or cuda:N");
}

}  // namespace frugal
