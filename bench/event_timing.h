// CUDA-event timing shared by the bench programs: f() once as a warm-up (its errors end the program),
// then `reps` runs, each between two events recorded on the default stream around it; the median in
// milliseconds.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

template <typename F>
double median_event_ms(int reps, F&& f) {
  f();
  if (const cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) {
    std::fprintf(stderr, "warm-up: %s\n", cudaGetErrorString(e));
    std::exit(1);
  }
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    cudaEventRecord(a);
    f();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    t.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// f() `calls` times back to back after `rest_s` seconds of rest (the board cools, its clocks recover),
// an event recorded after each call and no wait between them: the per-call milliseconds in order, so
// that a tensor-heavy kernel's time can be read against the time it has run for (its clock falls once
// the board reaches its power limit).
template <typename F>
std::vector<double> burst_event_ms(int calls, double rest_s, F&& f) {
  cudaDeviceSynchronize();
  std::this_thread::sleep_for(std::chrono::duration<double>(rest_s));
  std::vector<cudaEvent_t> ev(calls + 1);
  for (auto& e : ev) cudaEventCreate(&e);
  cudaEventRecord(ev[0]);
  for (int i = 0; i < calls; ++i) {
    f();
    cudaEventRecord(ev[i + 1]);
  }
  if (const cudaError_t e = cudaEventSynchronize(ev[calls]); e != cudaSuccess) {
    std::fprintf(stderr, "burst: %s\n", cudaGetErrorString(e));
    std::exit(1);
  }
  std::vector<double> t(calls);
  for (int i = 0; i < calls; ++i) {
    float ms = 0;
    cudaEventElapsedTime(&ms, ev[i], ev[i + 1]);
    t[i] = ms;
  }
  for (auto& e : ev) cudaEventDestroy(e);
  return t;
}
