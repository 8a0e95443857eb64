// Race mode: these kernels run in the ThreadSanitizer twin of this binary (test_sim_race).
//   race_clean   - correct kernels whose barriers order every shared-memory exchange: TSan
//                  must stay silent (a report fails the run with exit code 66).
//   race_planted_block, race_planted_warp - one missing barrier each: the CTest entries pass
//                  only when TSan's report appears and names the CUDA threads (see
//                  tests/sim/CMakeLists.txt).
#include <doctest/doctest.h>

#include <vector>

#include "common/kernel.cuh"

namespace {

constexpr int kThreads = 128;

// y: (blocks, kThreads), each block's row reversed through static shared memory.
__global__ void reverse_with_barrier_kernel(const float* x, float* y) {
  __shared__ float tile[kThreads];
  const int t = threadIdx.x;
  tile[t] = x[blockIdx.x * kThreads + t];
  __syncthreads();
  y[blockIdx.x * kThreads + t] = tile[kThreads - 1 - t];
}

// A block-wide sum: warp shuffles, then one value per warp through shared memory.
__global__ void block_sum_kernel(const float* x, float* sums) {
  __shared__ float per_warp[kThreads / 32];
  float v = x[blockIdx.x * kThreads + threadIdx.x];
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  if (threadIdx.x % 32 == 0) per_warp[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.0f;
    for (int w = 0; w < kThreads / 32; ++w) s += per_warp[w];
    sums[blockIdx.x] = s;
  }
}

std::vector<float> arange(int n) {
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[i] = static_cast<float>(i);
  return x;
}

}  // namespace

TEST_CASE("correct kernels raise no race report" * doctest::test_suite("race_clean")) {
  constexpr int kBlocks = 4;
  const std::vector<float> x = arange(kBlocks * kThreads);
  std::vector<float> y(x.size()), sums(kBlocks);
  // Twice: the second launch reuses the static __shared__ arrays and the fibers of the first.
  for (int launch = 0; launch < 2; ++launch) {
    wb::launch<reverse_with_barrier_kernel>(dim3(kBlocks), dim3(kThreads), 0, x.data(), y.data());
    wb::launch<block_sum_kernel>(dim3(kBlocks), dim3(kThreads), 0, x.data(), sums.data());
  }
  for (int b = 0; b < kBlocks; ++b) {
    for (int t = 0; t < kThreads; ++t) {
      REQUIRE(y[b * kThreads + t] == x[b * kThreads + kThreads - 1 - t]);
    }
    // Row b holds b * kThreads + t: its sum is an integer below 2^24, exact in float.
    CHECK(sums[b] == static_cast<float>(b * kThreads * kThreads + kThreads * (kThreads - 1) / 2));
  }
}

// The planted races exist only in the race twin: without ThreadSanitizer they would run
// unnoticed, which is exactly what race mode is for.
#if defined(WB_SIM_RACE_MODE)
namespace {

//! [planted missing barrier]
// Planted: the same kernel without the barrier between the write and the other thread's read.
__global__ void reverse_missing_barrier_kernel(const float* x, float* y) {
  __shared__ float tile[kThreads];
  const int t = threadIdx.x;
  tile[t] = x[blockIdx.x * kThreads + t];  // planted race: write
  y[blockIdx.x * kThreads + t] = tile[kThreads - 1 - t];  // planted race: read
}
//! [planted missing barrier]

// Planted: a warp exchange through shared memory ordered by a shuffle instead of __syncwarp.
// A shuffle exchanges registers; it does not order memory, so this is a race in CUDA.
__global__ void warp_exchange_missing_syncwarp_kernel(int* out) {
  __shared__ int slot[32];
  const int lane = threadIdx.x;
  slot[lane] = lane;
  const int token = __shfl_xor_sync(0xffffffffu, lane, 1);  // not a barrier
  out[lane] = slot[31 - lane] + token;
}

}  // namespace

TEST_CASE("a missing syncthreads between a shared write and another thread's read is a race" *
          doctest::test_suite("race_planted_block")) {
  const std::vector<float> x = arange(kThreads);
  std::vector<float> y(kThreads);
  wb::launch<reverse_missing_barrier_kernel>(dim3(1), dim3(kThreads), 0, x.data(), y.data());
}

TEST_CASE("a shuffle does not order a warp's shared memory exchange" *
          doctest::test_suite("race_planted_warp")) {
  std::vector<int> out(32);
  wb::launch<warp_exchange_missing_syncwarp_kernel>(dim3(1), dim3(32), 0, out.data());
}
#endif  // WB_SIM_RACE_MODE
