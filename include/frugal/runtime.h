// What this build and this machine offer: is CUDA compiled in, which GPUs are there.
#pragma once

#include <string>

#include "frugal/dtype.h"

namespace frugal {

std::string version();             // the library's version (the VERSION file), e.g. "0.1.0"
bool built_with_cuda();             // CUDA backend compiled into this build
std::string built_cuda_archs();     // the machine code built, e.g. "80,86,89,90a,100,120"; empty without CUDA
std::string built_cuda_ptx();       // the PTX built (which newer GPUs' drivers JIT), e.g. "80"; may be empty
int cuda_device_count();            // 0 without CUDA, without a driver, or without a GPU
bool cuda_available();              // built with CUDA and at least one GPU usable
std::string device_name(Device d);  // "NVIDIA H200 (sm_90)" or "cpu (16 threads)"
void synchronize(Device d);         // waits for all work on the device (no-op on the CPU)
int cpu_threads();                  // threads the CPU backend uses

}  // namespace frugal
