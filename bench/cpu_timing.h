// What the CPU benchmarks share: the median of a run's samples, the process's CPU time (what the
// threads were given: on a machine shared with other work, a rate per CPU-second is per core), and
// the parsing of a list option.
#pragma once

#include <time.h>

#include <algorithm>
#include <chrono>
#include <sstream>
#include <string>
#include <vector>

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

inline double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

struct Timing {
  double wall, cpu, cpu_best;  // seconds: median wall time; median and least CPU time of all threads together
};

template <typename F>
Timing median_seconds(int reps, F&& f) {
  f();
  std::vector<double> wall, cpu;
  for (int i = 0; i < reps; ++i) {
    const double c0 = cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    wall.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    cpu.push_back(cpu_seconds() - c0);
  }
  return {median(wall), median(cpu), *std::min_element(cpu.begin(), cpu.end())};
}

// A comma-separated list of integers (the benches' --dims, --bits).
inline std::vector<int> parse_list(const char* s) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::stoi(item));
  return out;
}
