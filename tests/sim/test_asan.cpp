// Out-of-bounds accesses in kernels, caught by AddressSanitizer in the asan preset. Each suite
// is its own CTest entry (AddressSanitizer stops the program at the first report), registered
// only when WB_SANITIZE is "address"; it passes when the output holds AddressSanitizer's
// report and the simulator's line naming the kernel, block and thread (tests/sim/CMakeLists.txt).
#include <doctest/doctest.h>

#include <vector>

#include "common/kernel.cuh"

namespace {

constexpr int kThreads = 64;

// Planted: the last block's threads write one element past the end of `out`
// (n = blocks * kThreads - 1 elements).
__global__ void global_overrun_kernel(float* out) {
  out[blockIdx.x * blockDim.x + threadIdx.x] = 1.0f;
}

// Planted: a per-warp tile of 32 floats, but warp 1's lanes index past it (a static
// __shared__ array of kThreads floats, overrun by the last warp's tile offset).
__global__ void static_shared_overrun_kernel(float* out) {
  __shared__ float tile[kThreads];
  float* warp_tile = tile + (threadIdx.x / 32) * 33;  // planted: 33 instead of 32
  warp_tile[threadIdx.x % 32] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = tile[threadIdx.x];
}

// Planted: dynamic shared memory of kThreads - 1 floats, written by kThreads threads.
__global__ void dynamic_shared_overrun_kernel(float* out) {
  float* row = wb::dynamic_shared<float>();
  row[threadIdx.x] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = row[0];
}

}  // namespace

TEST_CASE("a kernel writing past a global buffer is caught" *
          doctest::test_suite("asan_planted_global")) {
  std::vector<float> out(3 * kThreads - 1);
  wb::launch<global_overrun_kernel>(dim3(3), dim3(kThreads), 0, out.data());
}

TEST_CASE("a kernel writing past a static shared array is caught" *
          doctest::test_suite("asan_planted_static_shared")) {
  std::vector<float> out(kThreads);
  wb::launch<static_shared_overrun_kernel>(dim3(1), dim3(kThreads), 0, out.data());
}

TEST_CASE("a kernel writing past its dynamic shared memory is caught" *
          doctest::test_suite("asan_planted_dynamic_shared")) {
  std::vector<float> out(kThreads);
  wb::launch<dynamic_shared_overrun_kernel>(dim3(2), dim3(kThreads), (kThreads - 1) * sizeof(float),
                                            out.data());
}
