// Chapter 03's one new idea as functions shared by the CPU steps and the kernels:
// (m, d) pairs form a commutative monoid under merge, with identity (-inf, 0).
#pragma once

#include <cmath>

#include "chapters/02_online_softmax/online_update.hpp"
#include "common/hd.hpp"

namespace wb::ch03 {

using ch02::MD;

/// The identity: the statistics of an empty block.
__host__ __device__ inline MD md_identity() { return {-INFINITY, 0.f}; }

// [md_merge]
/// merge((m_a, d_a), (m_b, d_b)) = (m, d_a e^{m_a - m} + d_b e^{m_b - m}),  m = max(m_a, m_b).
/// A side whose m is -inf holds no mass (its d is 0): its factor is 0, never e^{NaN}, so
/// merging with the identity returns the other operand exactly.
__host__ __device__ inline MD md_merge(MD a, MD b) {
  const float m = fmaxf(a.m, b.m);
  const float scale_a = a.m == -INFINITY ? 0.f : expf(a.m - m);
  const float scale_b = b.m == -INFINITY ? 0.f : expf(b.m - m);
  return {m, a.d * scale_a + b.d * scale_b};
}
// [md_merge]

}  // namespace wb::ch03
