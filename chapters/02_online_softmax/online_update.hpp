// Chapter 02's one new idea as a function shared by the CPU step and the kernels:
// the online update of the running max m and the rescaled denominator d'.
// See online_softmax.md for the recurrence (eqs. 1 and 4) and its proof.
#pragma once

#include <cmath>

#include "chapters/01_safe_softmax/softmax.hpp"
#include "common/hd.hpp"

namespace wb::ch02 {

/// Statistics of a prefix x_1..x_i: m = max_{j<=i} x_j and d = sum_{j<=i} e^{x_j - m}.
/// The empty prefix is (-inf, 0).
struct MD {
  float m;
  float d;
};

// [online_update]
/// m_i = max(m_{i-1}, x_i)                              eq. (1)
/// d'_i = d'_{i-1} e^{m_{i-1} - m_i} + e^{x_i - m_i}     eq. (4)
/// exp_shift keeps a prefix of -inf entries at (-inf, 0) instead of e^{-inf - (-inf)} = NaN.
__host__ __device__ inline MD online_update(MD prev, float x) {
  const float m = fmaxf(prev.m, x);
  const float shift = ch01::exp_shift(m);
  return {m, prev.d * expf(prev.m - shift) + expf(x - shift)};
}
// [online_update]

}  // namespace wb::ch02
