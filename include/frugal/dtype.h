// Element types and devices: the two tags every tensor carries.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace frugal {

// f64: host-only, for gradient checks of the CPU backend (the sparse conv and its backward).
enum class DType : uint8_t { f32, f16, bf16, u8, i32, i64, f64 };

constexpr size_t size_of(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::u8: return 1;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::f64: return 8;
  }
  return 0;
}

const char* to_string(DType t);
// Parses "f32" | "f16" | "bf16" | "u8" | "i32" | "i64" (also "float32", "fp16", ...).
DType parse_dtype(const std::string& name);

constexpr bool is_floating(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

enum class DeviceType : uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static constexpr Device cpu() { return {DeviceType::cpu, 0}; }
  static constexpr Device cuda(int i = 0) { return {DeviceType::cuda, i}; }
  constexpr bool is_cpu() const { return type == DeviceType::cpu; }
  constexpr bool is_cuda() const { return type == DeviceType::cuda; }
  friend constexpr bool operator==(Device a, Device b) {
    return a.type == b.type && (a.type == DeviceType::cpu || a.index == b.index);
  }
};

std::string to_string(Device d);  // "cpu" or "cuda:0"
Device parse_device(const std::string& name);  // "cpu", "cuda", "cuda:1"

// A CUDA stream, as an opaque handle so public headers need no CUDA include; it is a
// cudaStream_t. nullptr means the legacy default stream.
using Stream = void*;

}  // namespace frugal
