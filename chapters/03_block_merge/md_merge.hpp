// Chapter 03's one new idea as functions shared by the CPU steps and the kernels:
// (m, d) pairs form a commutative monoid under merge, with identity (-inf, 0).
// See block_merge.md for the definitions (eqs. 2-4) and the proofs.
#pragma once

#include <cmath>

#include "chapters/02_online_softmax/online_update.hpp"
#include "common/hd.hpp"

namespace wb::ch03 {

using ch02::MD;

// [md_identity]
/// The identity, eq. (3): the statistics of an empty block, no max and no mass.
__host__ __device__ inline MD md_identity() {
  return {-INFINITY, 0.f};
}
// [md_identity]

// [md_merge]
/// merge((m_a, d_a), (m_b, d_b)) = (m, d_a e^{m_a - m} + d_b e^{m_b - m}),  m = max(m_a, m_b),
/// eq. (2), written as eq. (5): the operand with the larger m has factor e^0 = 1, so
///   d = d_hi + d_lo e^{m_lo - m_hi}.
/// One exp instead of two, and merge(a, b) and merge(b, a) run the very same operations, so
/// the merge is commutative bit for bit even where a compiler fuses the multiply-add (nvcc
/// does); only a tie of +0 with -0 keeps the first operand's zero as m, in either order: the
/// same value, which e^{x - m} and m + log d turn into the same bits. A side whose m is -inf
/// holds no mass: merging it returns the other side exactly, never e^{-inf - (-inf)} = NaN.
__host__ __device__ inline MD md_merge(MD a, MD b) {
  const MD hi = a.m >= b.m ? a : b;  // ties: both factors are e^0 = 1, either order is exact
  const MD lo = a.m >= b.m ? b : a;
  if (lo.m == -INFINITY) return hi;  // the identity, or an all -inf block: no mass to add
  return {hi.m, hi.d + lo.d * expf(lo.m - hi.m)};
}
// [md_merge]

}  // namespace wb::ch03
