// Chapter 09: the merge of partial results, shared by the CPU step and the kernels: chapter 03's
// monoid carried from (m, d) to (logsumexp, O).
//
// partial over a key range R:  lse_R = log sum_{j in R} e^{x_j},
//                              O_R = sum_{j in R} e^{x_j - lse_R} v_j                 eq. (1)
// merge: lse = log(e^{lse_a} + e^{lse_b}),  O = e^{lse_a - lse} O_a + e^{lse_b - lse} O_b
//                                                                                      eq. (2)
// identity: (lse, O) = (-inf, 0); associative and commutative: (e^lse, e^lse O) add  eq. (3)
// S partials at once: lse = M + log sum_s e^{lse_s - M}, M = max_s lse_s,
//                     O = sum_s w_s O_s,  w_s = e^{lse_s - M} / sum_t e^{lse_t - M}    eq. (4)
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "common/hd.hpp"

namespace wb::ch09 {

// [lse_merge]
/// The merged logsumexp of two partials and the weights of their O's, eq. (2):
///   lse = hi + log(1 + e^{lo - hi}),  w_hi = 1 / (1 + e^{lo - hi}),  w_lo = e^{lo - hi} w_hi
/// with hi the larger logsumexp: one exp, every exponent <= 0, and merge(a, b), merge(b, a)
/// compute the same bits (the operands are ordered first, as chapter 03's md_merge does). An
/// operand whose lse is -inf holds no key: the other comes back exactly, weight 1, never
/// e^{-inf - (-inf)} = NaN.
struct LseMerge {
  float lse;
  float w_a;  ///< the weight of the first operand's O
  float w_b;  ///< the weight of the second's
};

__host__ __device__ inline LseMerge lse_merge(float lse_a, float lse_b) {
  const bool a_hi = lse_a >= lse_b;
  const float hi = a_hi ? lse_a : lse_b, lo = a_hi ? lse_b : lse_a;
  if (lo == -INFINITY) return {hi, a_hi ? 1.f : 0.f, a_hi ? 0.f : 1.f};  // eq. (3)
  const float e = expf(lo - hi);                                         // <= 1
  const float w_hi = 1.f / (1.f + e);
  const float w_lo = e * w_hi;
  return {hi + log1pf(e), a_hi ? w_hi : w_lo, a_hi ? w_lo : w_hi};
}
// [lse_merge]

// [combine_weight]
/// The weight of a split's O in the merged row, eq. (4): w_s = e^{lse_s - M} / l with M the
/// row's largest lse_t and l = sum_t e^{lse_t - M}, its (m, d) state, not e^{lse_s - lse} from
/// the merged lse = M + log l: past |lse| ~ 1e7 that rounds to M, log l is lost, and an equal
/// pair's O's are added instead of averaged (as in lse_merge, every exponent here is <= 0).
/// 0 for a split that saw no key (lse_s = -inf: e^{-inf} = 0 exactly) and when the row saw
/// none at all (M = -inf, l = 0), never e^{-inf - (-inf)} = NaN.
__host__ __device__ inline float combine_weight(float lse_s, float m, float l) {
  return m == -INFINITY ? 0.f : expf(lse_s - m) / l;
}
// [combine_weight]

/// A row's partial result over a range of keys, eq. (1): O normalized by its own
/// denominator, and the logsumexp that remembers that denominator.
struct Partial {
  float lse = -INFINITY;
  std::vector<float> o;  ///< d values; zeros for the identity
};

/// The identity of the merge, eq. (3): a range with no visible key.
inline Partial identity_partial(int d) {
  return {-INFINITY, std::vector<float>(std::size_t(d), 0.f)};
}

// [merge_partials]
/// merge(a, b), eq. (2).
inline Partial merge_partials(const Partial& a, const Partial& b) {
  const LseMerge w = lse_merge(a.lse, b.lse);
  Partial out{w.lse, std::vector<float>(a.o.size())};
  for (std::size_t c = 0; c < a.o.size(); ++c) out.o[c] = w.w_a * a.o[c] + w.w_b * b.o[c];
  return out;
}
// [merge_partials]

/// All of a row's partials at once, eq. (4): what the combine kernel computes.
inline Partial combine_partials(const std::vector<Partial>& parts, int d) {
  float m = -INFINITY;
  for (const Partial& p : parts) m = std::max(m, p.lse);
  Partial out = identity_partial(d);
  if (m == -INFINITY) return out;  // no split saw a key
  float sum = 0.f;
  for (const Partial& p : parts) sum += std::exp(p.lse - m);
  out.lse = m + std::log(sum);
  for (const Partial& p : parts) {
    const float w = combine_weight(p.lse, m, sum);  // from (M, l), not the rounded lse
    for (int c = 0; c < d; ++c) out.o[std::size_t(c)] += w * p.o[std::size_t(c)];
  }
  return out;
}

}  // namespace wb::ch09
