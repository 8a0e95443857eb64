// Timing: wall-clock on the CPU, CUDA events on a GPU, both as median and spread over
// repetitions after a warm-up. Absolute kernel times only mean something on a GPU; on the
// CPU (and in the simulator) compare ratios taken in one run.
#pragma once

#include <chrono>
#include <functional>
#include <vector>

namespace wb {

struct TimingStats {
  double median_ms = 0.0;
  double min_ms = 0.0;
  double max_ms = 0.0;
  int repetitions = 0;
};

/// Median, min and max of a list of samples in milliseconds.
TimingStats summarize(std::vector<double> samples_ms);

class CpuTimer {
 public:
  CpuTimer() : start_(std::chrono::steady_clock::now()) {}
  double elapsed_ms() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_)
        .count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

/// Runs `work` `warmup` times, then times `repetitions` runs with the wall clock.
TimingStats time_cpu(const std::function<void()>& work, int warmup, int repetitions);

/// Times `work` with CUDA events: `warmup` untimed runs, then `repetitions` timed runs, each
/// preceded (outside the timed region) by a write of a buffer larger than the L2 cache, so
/// every run reads its inputs from DRAM. Requires cuda_available().
TimingStats time_cuda(const std::function<void()>& work, int warmup, int repetitions);

}  // namespace wb
