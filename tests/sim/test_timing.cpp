// The cost of one __syncthreads across a 256-thread block: 256 fiber switches there and back.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>

#include "common/kernel.cuh"

namespace {

// out: (blockDim.x), so the loop is not optimized away.
__global__ void barrier_loop_kernel(int iterations, int* out) {
  int acc = 0;
  for (int i = 0; i < iterations; ++i) {
    acc += i;
    __syncthreads();
  }
  out[threadIdx.x] = acc;
}

double seconds_for(int iterations, int* out) {
  const auto start = std::chrono::steady_clock::now();
  wb::launch<barrier_loop_kernel>(dim3(1), dim3(256), 0, iterations, out);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

TEST_CASE("a syncthreads across 256 threads costs well under 100 microseconds" *
          doctest::test_suite("timing")) {
  int out[256];
  constexpr int kIterations = 2000;
  seconds_for(10, out);  // warm-up: the fiber stacks are mapped and touched once
  // The best of 3 runs, minus a launch without barriers, divided by the barriers.
  double best = 1e30;
  for (int run = 0; run < 3; ++run) {
    const double t = seconds_for(kIterations, out) - seconds_for(0, out);
    best = t < best ? t : best;
  }
  const double us = best / kIterations * 1e6;
  std::printf("wb::sim: one __syncthreads across 256 threads costs %.2f us\n", us);
  MESSAGE("one __syncthreads across 256 threads: ", us, " us");
  // ~5-40 us with the assembly context switch (more under the sanitizers); glibc's
  // swapcontext makes a system call per switch and would cost several hundred.
  CHECK(us < 100.0);
}
