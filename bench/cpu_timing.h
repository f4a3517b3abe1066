// Timing the CPU benchmarks share: the median of a run's samples, and the process's CPU time (what
// the threads were given: on a machine shared with other work, a rate per CPU-second is per core).
#pragma once

#include <time.h>

#include <algorithm>
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
