// Chapter 01, rung 1: thread per row. The CPU loop of softmax_safe, one row per thread.
//
// Computes: y = softmax(x) row-wise, eqs. (3)-(5) of safe_softmax.md: m = max_j x_j,
//           d = sum_j e^{x_j - m}, y_i = e^{x_i - m} / d. A fully -inf row gives zeros.
// Changed since the CPU step: each row is a thread of its own; d is summed in float.
// Launch shape: blocks of 128 threads, ceil(rows / 128) blocks; thread t owns row t.
// Limits: rows in [1, 2^31 - 1] (whole blocks of 128 end at thread 2^31 - 1 at most), cols in
//         [1, kAnyCols], any value (no multiple of anything); fp32.
// Memory traffic per element: 3 reads (max, sum, normalize passes) and 1 write.
// Test: ctest --test-dir build -R 01_safe_softmax --output-on-failure
#pragma once

#include "common/kernel.cuh"

#include "chapters/01_safe_softmax/softmax.hpp"

namespace wb::ch01 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

constexpr int kThreadPerRowBlock = 128;

// [thread_per_row]
// x, y: (rows, cols), row-major. Thread t of the grid owns row t.
__global__ void thread_per_row_kernel(const float* __restrict__ x, float* __restrict__ y, int rows,
                                      int cols) {
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const float* xr = x + static_cast<size_t>(row) * cols;
  float* yr = y + static_cast<size_t>(row) * cols;
  float m = -INFINITY;  // eq. (3)
  for (int c = 0; c < cols; ++c) m = fmaxf(m, xr[c]);
  const float shift = exp_shift(m);
  float d = 0.f;  // eq. (4), in float: the error grows with cols (see the tests' bound)
  for (int c = 0; c < cols; ++c) d += expf(xr[c] - shift);
  const float inv_d = inverse_or_zero(d);
  for (int c = 0; c < cols; ++c) yr[c] = expf(xr[c] - shift) * inv_d;  // eq. (5)
}
// [thread_per_row]

void launch_thread_per_row(const RowArgs& a) {
  launch<thread_per_row_kernel>(dim3(ceil_div(a.rows, kThreadPerRowBlock)),
                                dim3(kThreadPerRowBlock), 0, static_cast<const float*>(a.x),
                                static_cast<float*>(a.y), a.rows, a.cols);
}

}  // namespace

WB_RUNG(RowArgs, thread_per_row, "the CPU loop, one thread per row", row_limits(kAnyCols),
        &launch_thread_per_row, &three_passes)

}  // namespace wb::ch01
