// Chapter 01: safe softmax. CPU reference and the kernel ladder.
//
// softmax(x)_i = e^{x_i} / sum_j e^{x_j}                          eq. (1), overflows
//             = e^{x_i - m} / sum_j e^{x_j - m},  m = max_j x_j   eq. (2), safe
// computed in three passes over each row: the max (eq. 3), the sum d (eq. 4), the
// normalization (eq. 5). See safe_softmax.md for the derivation.
#pragma once

#include <cmath>
#include <cstddef>
#include <vector>

#include "common/backend.hpp"
#include "common/hd.hpp"
#include "common/rung.hpp"
#include "common/rung_args.hpp"

namespace wb::ch01 {

// ------------------------------------------------------------------------------------------
// Conventions shared by the CPU steps and the kernels
// ------------------------------------------------------------------------------------------

// [conventions]
/// The shift subtracted before exp: the row max m, or 0 when m = -inf (a fully -inf row),
/// so that e^{x - shift} = e^{-inf} = 0 instead of e^{-inf - (-inf)} = e^{NaN}.
__host__ __device__ inline float exp_shift(float m) { return m == -INFINITY ? 0.f : m; }

/// 1 / d, or 0 when d = 0 (a fully -inf row): that row's softmax is all zeros, the
/// workbook's convention, the same rule that makes a fully masked attention row output 0.
__host__ __device__ inline float inverse_or_zero(float d) { return d > 0.f ? 1.f / d : 0.f; }
// [conventions]

// ------------------------------------------------------------------------------------------
// CPU reference
// ------------------------------------------------------------------------------------------

/// Eq. (1) as written: overflows to inf/inf = NaN once some x_i > 88.7 (e^x > FLT_MAX), and
/// to 0/0 = NaN when every x_i < -103.9 (e^x rounds to 0). x, y: (rows, cols), row-major.
inline void softmax_naive(const float* x, float* y, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + static_cast<std::size_t>(r) * cols;
    float* yr = y + static_cast<std::size_t>(r) * cols;
    float d = 0.f;
    for (int c = 0; c < cols; ++c) d += std::exp(xr[c]);
    for (int c = 0; c < cols; ++c) yr[c] = std::exp(xr[c]) / d;
  }
}

// [safe_cpu]
/// Eqs. (3)-(5): three passes per row. The sum d is accumulated in double, so the CPU step's
/// error is that of exp and one division, whatever cols is. x, y: (rows, cols), row-major.
inline void softmax_safe(const float* x, float* y, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + static_cast<std::size_t>(r) * cols;
    float* yr = y + static_cast<std::size_t>(r) * cols;
    float m = -INFINITY;  // pass 1, eq. (3): m = max_j x_j
    for (int c = 0; c < cols; ++c) m = std::fmax(m, xr[c]);
    const float shift = exp_shift(m);
    double d = 0.0;  // pass 2, eq. (4): d = sum_j e^{x_j - m}
    for (int c = 0; c < cols; ++c) d += std::exp(xr[c] - shift);
    const float inv_d = inverse_or_zero(static_cast<float>(d));
    for (int c = 0; c < cols; ++c) yr[c] = std::exp(xr[c] - shift) * inv_d;  // pass 3, eq. (5)
  }
}
// [safe_cpu]

inline std::vector<float> softmax_naive(const std::vector<float>& x, int rows, int cols) {
  std::vector<float> y(x.size());
  softmax_naive(x.data(), y.data(), rows, cols);
  return y;
}

inline std::vector<float> softmax_safe(const std::vector<float>& x, int rows, int cols) {
  std::vector<float> y(x.size());
  softmax_safe(x.data(), y.data(), rows, cols);
  return y;
}

// ------------------------------------------------------------------------------------------
// The kernel ladder: one rung per file of rungs/ (its kernel, launcher and record)
// ------------------------------------------------------------------------------------------

/// The reductions of the max and the sum, for the block-wide reductions of rungs 2 and 3.
struct MaxOp {
  __host__ __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
  __host__ __device__ float operator()(float a, float b) const { return a + b; }
};

/// Every rung of this chapter makes the three passes of eqs. (3)-(5) over global memory: x is
/// read for the max, again for the sum, again to normalize; y is written once.
inline Traffic three_passes(const RowArgs& a) {
  return per_element_traffic(a, 3, 1, "3 reads of x (max, sum, normalize) + 1 write of y");
}

}  // namespace wb::ch01

// The ladder, rungs/1_thread_per_row.cuh to rungs/3_warp_shuffle.cuh in order: the build lists
// the files as Rungs<B> and kernel_ladder<B>() (a generated header); each file defines its
// Rungs<B>::name() with its kernel and launcher.
#include "chapters/01_safe_softmax/ladder.hpp"
