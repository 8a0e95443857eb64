// Chapter 01, rung 2: block per row. Rung 1's three passes, but 256 threads share a row: each
// folds a strided slice, then a shared-memory tree halves the partial results log2(256) = 8
// times.
//
// Computes: y = softmax(x) row-wise, eqs. (3)-(5) of safe_softmax.md.
// Changed since rung 1: a block per row instead of a thread; 10 barriers per reduction.
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

static_assert((kBlock & (kBlock - 1)) == 0, "the tree halves a power of 2");

// [tree_reduce]
// Reduces one value per thread of the block; every thread gets the result.
// scratch: kBlock floats of shared memory.
template <typename Op>
__device__ float block_tree_reduce(float value, float* scratch, Op op) {
  const int t = threadIdx.x;
  scratch[t] = value;
  __syncthreads();  // every partial is written before anyone reads a neighbour's
  for (int stride = kBlock / 2; stride > 0; stride /= 2) {
    if (t < stride) scratch[t] = op(scratch[t], scratch[t + stride]);
    __syncthreads();  // this level is complete before the next reads it
  }
  const float result = scratch[0];
  __syncthreads();  // everyone has read scratch[0] before scratch is reused
  return result;
}
// [tree_reduce]

// x, y: (rows, cols), row-major. Block b owns row b: block_passes.cuh's three passes, the
// partial results combined by the tree (which needs no identity: every thread holds a value).
__global__ void __launch_bounds__(kBlock)
    block_per_row_kernel(const float* __restrict__ x, float* __restrict__ y, int cols) {
  __shared__ float scratch[kBlock];
  block_softmax_row(x, y, cols, scratch, [](float value, float* shared, auto op, float) {
    return block_tree_reduce(value, shared, op);
  });
}

void launch_block_per_row(const RowArgs& a) {
  launch<block_per_row_kernel>(dim3(a.rows), dim3(kBlock), 0, static_cast<const float*>(a.x),
                               static_cast<float*>(a.y), a.cols);
}

}  // namespace

WB_RUNG(RowArgs, block_per_row,
        "256 threads share a row, partial results reduced by a shared-memory tree",
        row_limits(kAnyCols), &launch_block_per_row, &three_passes)

}  // namespace wb::ch01
