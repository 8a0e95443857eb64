// Chapter 07's one new idea as functions shared by the CPU steps and the kernels:
// Welford's single-pass update of (mean, m2, count) and Chan's combine of two such states,
// which makes Welford states a monoid with identity (0, 0, 0), as chapter 03's (m, d) pairs.
#pragma once

#include <cmath>

#include "common/hd.hpp"

namespace wb::ch07 {

/// Statistics of a run of n values x_1..x_n: their mean, m2 = sum_j (x_j - mean)^2 and the
/// count n. count is a float: it enters every update as a divisor, and a float holds every
/// integer up to 2^24 exactly (kMaxCount), more than any row this chapter normalizes.
struct Welford {
  float mean;
  float m2;
  float count;
};

/// The largest count a float holds exactly: 2^24.
inline constexpr float kMaxCount = 16777216.f;

/// The identity: the statistics of an empty run.
__host__ __device__ inline Welford welford_identity() {
  return {0.f, 0.f, 0.f};
}

// [welford_update]
/// Appends one value x to the run, eqs. (7)-(9):
///   n_k = n_{k-1} + 1,  delta = x - mean_{k-1},  mean_k = mean_{k-1} + delta / n_k,
///   m2_k = m2_{k-1} + delta (x - mean_k),
/// given inv_count = 1 / n_k rounded to float. The quotient is taken as delta * (1 / n_k):
/// each mean waits on the mean before it, and an IEEE division on that chain costs a kernel
/// its latency at every element, where 1 / n_k depends on the count alone and is ready
/// early (a constant where the count is known at compile time). It rounds twice instead of
/// once, which the accuracy bound counts (welford_layernorm.md, ch07_accuracy).
/// Every term added to m2 is >= 0 (mean_k lies between mean_{k-1} and x: the step is at
/// most |delta| (1 + u)^3 / n_k <= |delta| for n_k >= 2, and exactly delta for n_k = 1),
/// so m2 never goes negative, whatever the rounding.
__host__ __device__ inline Welford welford_update(Welford s, float x, float inv_count) {
  const float delta = x - s.mean;                           // eq. (8)
  const float mean = s.mean + delta * inv_count;            // eq. (8)
  return {mean, s.m2 + delta * (x - mean), s.count + 1.f};  // eqs. (7), (9)
}

/// Appends one value x to the run, eqs. (7)-(9), with 1 / n_k from the state's count.
__host__ __device__ inline Welford welford_update(Welford s, float x) {
  return welford_update(s, x, 1.f / (s.count + 1.f));
}
// [welford_update]

// [welford_combine]
/// Chan's combine of the statistics of two runs a and b into those of their concatenation,
/// eqs. (10)-(13):
///   n = n_a + n_b,  delta = mean_b - mean_a,  mean = mean_a + delta n_b / n,
///   m2 = m2_a + m2_b + delta^2 n_a n_b / n.
/// Both uses of n_b / n share one quotient w_b, given here rounded to float (a constant where
/// the counts are known at compile time, as welford_update's 1 / n_k). An empty side is the
/// identity, and the combine returns the other side exactly, as the monoid law says: returned
/// as it is, not computed (delta^2 would overflow to inf for |mean| > 1.8e19, and inf x 0 is
/// NaN).
__host__ __device__ inline Welford welford_combine_weighted(Welford a, Welford b, float w_b) {
  if (a.count == 0.f) return b;
  if (b.count == 0.f) return a;
  const float delta = b.mean - a.mean;                  // eq. (11)
  return {a.mean + delta * w_b,                         // eq. (12)
          a.m2 + b.m2 + delta * delta * a.count * w_b,  // eq. (13)
          a.count + b.count};                           // eq. (10)
}

/// Chan's combine, eqs. (10)-(13), with n_b / n from the counts: one division.
__host__ __device__ inline Welford welford_combine(Welford a, Welford b) {
  return welford_combine_weighted(a, b, b.count / (a.count + b.count));
}
// [welford_combine]

// [rstd]
/// The population variance m2 / n of a run of n >= 1 values, eq. (3).
__host__ __device__ inline float welford_variance(Welford s) {
  return s.m2 / s.count;
}

/// rstd = 1 / sqrt(var + eps), eq. (4). A constant row (var = 0) gives 1 / sqrt(eps): finite
/// for every eps > 0, which is what eps is for.
__host__ __device__ inline float rstd_of(float var, float eps) {
  return 1.f / sqrtf(var + eps);
}
// [rstd]

}  // namespace wb::ch07
