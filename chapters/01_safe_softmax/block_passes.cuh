// Chapter 01's three passes over a row shared by a block, for rungs 2 and 3
// (rungs/2_block_per_row.cuh, rungs/3_warp_shuffle.cuh): rung 1's loop, with 256 threads each
// folding a strided slice of the row. The two rungs differ only in how the block combines its
// threads' partial results, which each passes in as `reduce`.
// Only templates: the rung files include it, and the build compiles it there, not on its own
// (wb_add_chapter's translation units are the kernel files no other includes).
// Test: ctest --test-dir build -R 01_safe_softmax --output-on-failure
#pragma once

#include "common/kernel.cuh"

#include "chapters/01_safe_softmax/softmax.hpp"

namespace wb::ch01 {
namespace {  // internal linkage, as the kernels that use them

constexpr int kBlock = 256;  // threads per row

// [block_passes]
// Eqs. (3)-(5) on row blockIdx.x of x and y, (rows, cols) row-major: thread t folds columns
// t, t + 256, t + 512, ... (neighbouring threads read neighbouring addresses: coalesced), then
// reduce(value, scratch, op, identity) combines the block's values with op (MaxOp, SumOp;
// identity the value that changes nothing) through the shared memory `scratch` and returns
// the result to every thread.
template <typename Reduce>
__device__ void block_softmax_row(const float* __restrict__ x, float* __restrict__ y, int cols,
                                  float* scratch, Reduce reduce) {
  const float* xr = x + static_cast<size_t>(blockIdx.x) * cols;
  float* yr = y + static_cast<size_t>(blockIdx.x) * cols;

  float m = -INFINITY;  // eq. (3): each thread's slice, then the block's reduction
  for (int c = threadIdx.x; c < cols; c += kBlock) m = fmaxf(m, xr[c]);
  m = reduce(m, scratch, MaxOp{}, -INFINITY);
  const float shift = exp_shift(m);

  float d = 0.f;  // eq. (4)
  for (int c = threadIdx.x; c < cols; c += kBlock) d += expf(xr[c] - shift);
  d = reduce(d, scratch, SumOp{}, 0.f);

  const float inv_d = inverse_or_zero(d);  // eq. (5)
  for (int c = threadIdx.x; c < cols; c += kBlock) yr[c] = expf(xr[c] - shift) * inv_d;
}
// [block_passes]

}  // namespace
}  // namespace wb::ch01
