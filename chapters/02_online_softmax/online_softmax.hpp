// Chapter 02: online softmax. CPU step and the kernel's launcher.
//
// The running max m_i (eq. 1) and the rescaled denominator
//   d'_i = d'_{i-1} e^{m_{i-1} - m_i} + e^{x_i - m_i}                 eq. (4)
// are computed together in one pass; d'_N = d_N (eq. 5), so the normalization
// y_i = e^{x_i - m_N} / d'_N (eq. 6) is the second and last pass. See online_softmax.md.
#pragma once

#include <cmath>
#include <cstddef>
#include <vector>

#include "chapters/01_safe_softmax/softmax.hpp"
#include "chapters/02_online_softmax/online_update.hpp"
#include "common/backend.hpp"
#include "common/rung.hpp"
#include "common/rung_args.hpp"

namespace wb::ch02 {

// ------------------------------------------------------------------------------------------
// CPU step
// ------------------------------------------------------------------------------------------

/// The statistics (m_N, d'_N) of one row of n entries: the recurrence (1), (4) from (-inf, 0).
inline MD online_stats(const float* x, int n) {
  MD md{-INFINITY, 0.f};  // m_0 = -inf, d'_0 = 0
  for (int i = 0; i < n; ++i) md = online_update(md, x[i]);
  return md;
}

// [online_cpu]
/// Two passes per row: the statistics (eqs. 1, 4), then the normalization (eq. 6).
/// d' is accumulated in float by the shared online_update, exactly as the kernel does.
/// x, y: (rows, cols), row-major.
inline void softmax_online(const float* x, float* y, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + static_cast<std::size_t>(r) * cols;
    float* yr = y + static_cast<std::size_t>(r) * cols;
    const MD md = online_stats(xr, cols);  // pass 1: m_N and d'_N = d_N, eq. (5)
    const float shift = ch01::exp_shift(md.m);
    const float inv_d = ch01::inverse_or_zero(md.d);
    for (int c = 0; c < cols; ++c) yr[c] = std::exp(xr[c] - shift) * inv_d;  // pass 2, eq. (6)
  }
}
// [online_cpu]

inline std::vector<float> softmax_online(const std::vector<float>& x, int rows, int cols) {
  std::vector<float> y(x.size());
  softmax_online(x.data(), y.data(), rows, cols);
  return y;
}

// ------------------------------------------------------------------------------------------
// The kernel ladder: one rung per file of rungs/ (its kernel, launcher and record)
// ------------------------------------------------------------------------------------------

/// The two passes of eqs. (1), (4) and (6) over global memory: x is read once for the
/// statistics (m, d') and again to normalize; y is written once.
inline Traffic two_passes(const RowArgs& a) {
  return per_element_traffic(a, 2, 1, "2 reads of x (statistics, normalize) + 1 write of y");
}

}  // namespace wb::ch02

// The ladder, one rung (rungs/1_online_thread_per_row.cuh, the direct port of the CPU step):
// the build lists the files as Rungs<B> and kernel_ladder<B>() (a generated header).
#include "chapters/02_online_softmax/ladder.hpp"
