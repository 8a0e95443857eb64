// Chapter 02, rung 1: online softmax, two passes per row, one thread per row.
//
// Computes: y = softmax(x) row-wise, eqs. (1), (4) and (6) of online_softmax.md: one pass
//           keeps the running max m_i and the rescaled denominator d'_i, the second writes
//           y_i = e^{x_i - m_N} / d'_N. A fully -inf row gives zeros (chapter 01's convention).
// Changed since the previous chapter: chapter 01's thread_per_row kernel with its max pass
//           and sum pass fused into one, through the shared online_update (online_update.hpp).
// Launch shape: one thread per row; blocks of 128 threads, ceil(rows / 128) blocks
// Limits: rows in [1, 2^31 - 1] (the grid's whole blocks of 128 end at thread 2^31 - 1 at
//           most), cols in [1, kAnyCols], any value (no multiple of anything).
// Memory traffic per element: 2 reads (statistics, normalize) and 1 write, 3 accesses
//           where chapter 01 made 4.
// Test: ctest --test-dir build -R 02_online_softmax --output-on-failure
#pragma once

#include "common/kernel.cuh"

#include "chapters/02_online_softmax/online_softmax.hpp"
#include "chapters/02_online_softmax/online_update.hpp"

namespace wb::ch02 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

// ==========================================================================================
// Thread per row: chapter 01's rung 1, with passes (3) and (4) of chapter 01 fused.
// ==========================================================================================

constexpr int kThreadPerRowBlock = 128;

// [online_thread_per_row]
// x, y: (rows, cols), row-major. Thread t of the grid owns row t.
__global__ void __launch_bounds__(kThreadPerRowBlock)
    online_thread_per_row_kernel(const float* __restrict__ x, float* __restrict__ y, int rows,
                                 int cols) {
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const float* xr = x + static_cast<size_t>(row) * cols;
  float* yr = y + static_cast<size_t>(row) * cols;

  // Pass 1: one read of each x_i updates both statistics.
  MD md{-INFINITY, 0.f};  // m_0 = -inf, d'_0 = 0
  // [online_thread_per_row]
  // [online_recurrence]
  // [exercise]
  for (int c = 0; c < cols; ++c) md = online_update(md, xr[c]);  // eqs. (1) and (4)
  // [exercise]
  // [online_recurrence]
  // [online_normalize]

  // Pass 2: d'_N = d_N, eq. (5), so this is chapter 01's normalization, eq. (6).
  const float shift = ch01::exp_shift(md.m);
  const float inv_d = ch01::inverse_or_zero(md.d);
  for (int c = 0; c < cols; ++c) yr[c] = expf(xr[c] - shift) * inv_d;
}
// [online_normalize]

void launch_online_thread_per_row(const RowArgs& a) {
  launch<online_thread_per_row_kernel>(dim3(ceil_div(a.rows, kThreadPerRowBlock)),
                                       dim3(kThreadPerRowBlock), 0, static_cast<const float*>(a.x),
                                       static_cast<float*>(a.y), a.rows, a.cols);
}

}  // namespace

WB_RUNG(RowArgs, online_thread_per_row,
        "chapter 01's thread_per_row with its max and sum passes fused: 2 reads per element",
        row_limits(kAnyCols), &launch_online_thread_per_row, &two_passes)

}  // namespace wb::ch02
