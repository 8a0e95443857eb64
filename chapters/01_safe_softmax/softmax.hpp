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
// Kernel launchers (defined in softmax_kernels.cuh, once per kernel backend)
// ------------------------------------------------------------------------------------------

/// The launchers of the ladder's rungs; x, y of `a`: fp32 (rows, cols), row-major, device
/// pointers of backend B. Any rows, cols >= 1.
template <Backend B>
struct Kernels {
  static void thread_per_row(const RowArgs& a);
  static void block_per_row(const RowArgs& a);
  static void warp_shuffle(const RowArgs& a);
};

/// Every rung of this chapter makes the three passes of eqs. (3)-(5) over global memory: x is
/// read for the max, again for the sum, again to normalize; y is written once.
inline Traffic three_passes(const RowArgs& a) {
  return per_element_traffic(a, 3, 1, "3 reads of x (max, sum, normalize) + 1 write of y");
}

// [ladder]
/// The ladder in order, each rung one idea better than the one before (softmax_kernels.cuh).
template <Backend B>
Ladder<RowArgs> kernel_ladder() {
  return {{"thread_per_row", "the CPU loop, one thread per row", row_limits(kAnyCols),
           &Kernels<B>::thread_per_row, &three_passes},
          {"block_per_row", "256 threads share a row, partial results reduced by a shared-memory tree",
           row_limits(kAnyCols), &Kernels<B>::block_per_row, &three_passes},
          {"warp_shuffle", "the reductions go through warp shuffles: 2 barriers instead of 10",
           row_limits(kAnyCols), &Kernels<B>::warp_shuffle, &three_passes}};
}
// [ladder]

}  // namespace wb::ch01
