// Chapter 01, rung 3: warp shuffles. Rung 2, but the 32 lanes of a warp reduce through
// registers (__shfl_xor_sync, 5 steps, no barrier); only the 8 warp results go through shared
// memory: 2 barriers per reduction instead of 10.
//
// Computes: y = softmax(x) row-wise, eqs. (3)-(5) of safe_softmax.md.
// Changed since rung 2: the shared-memory tree becomes a butterfly of shuffles per warp.
// Launch shape: one block of 256 threads per row (grid = rows).
// Limits: rows in [1, 2^31 - 1], cols in [1, kAnyCols], any value; fp32.
// Memory traffic per element: 3 reads (max, sum, normalize passes) and 1 write.
// Test: ctest --test-dir build -R 01_safe_softmax --output-on-failure
#pragma once

#include "common/kernel.cuh"

#include "chapters/01_safe_softmax/block_passes.cuh"
#include "chapters/01_safe_softmax/softmax.hpp"

namespace wb::ch01 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

constexpr int kWarpsPerBlock = kBlock / kWarpSize;
static_assert(kBlock % kWarpSize == 0, "whole warps only");

// [warp_reduce]
// Butterfly all-reduce: after step k every lane holds the result of 2^(k+1) lanes, and after
// log2(32) = 5 steps every lane of the warp holds the result of all 32.
template <typename Op>
__device__ float warp_all_reduce(float value, Op op) {
  // [exercise]
  for (int lane_mask = 16; lane_mask > 0; lane_mask /= 2)
    value = op(value, __shfl_xor_sync(kAllLanes, value, lane_mask));
  // [exercise]
  return value;
}
// [warp_reduce]

// Warp results through shared memory, then the first warp reduces those.
// scratch: kWarpsPerBlock floats of shared memory.
template <typename Op>
__device__ float block_shuffle_reduce(float value, float* scratch, Op op, float identity) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  value = warp_all_reduce(value, op);
  if (lane == 0) scratch[warp] = value;
  __syncthreads();  // all warp results are written
  value = lane < kWarpsPerBlock ? scratch[lane] : identity;
  value = warp_all_reduce(value, op);  // every warp reduces the 8 values: no broadcast needed
  __syncthreads();  // everyone has read scratch before it is reused
  return value;
}

// x, y: (rows, cols), row-major. Block b owns row b: block_passes.cuh's three passes, the
// partial results combined by warp shuffles.
__global__ void __launch_bounds__(kBlock)
    warp_shuffle_kernel(const float* __restrict__ x, float* __restrict__ y, int cols) {
  __shared__ float scratch[kWarpsPerBlock];
  block_softmax_row(x, y, cols, scratch, [](float value, float* shared, auto op, float identity) {
    return block_shuffle_reduce(value, shared, op, identity);
  });
}

void launch_warp_shuffle(const RowArgs& a) {
  launch<warp_shuffle_kernel>(dim3(a.rows), dim3(kBlock), 0, static_cast<const float*>(a.x),
                              static_cast<float*>(a.y), a.cols);
}

}  // namespace

// [record]
WB_RUNG(RowArgs, warp_shuffle, "the reductions go through warp shuffles: 2 barriers instead of 10",
        row_limits(kAnyCols), &launch_warp_shuffle, &three_passes)
// [record]

}  // namespace wb::ch01
