// The fp64 attention reference and the error model that chapters 04-06 are tested against.
//
// Computed in double from the same float Q, K, V and the same float scale:
//   S = scale Q K^T,  P = softmax(S) row-wise,  O = P V,  logsumexp = m + log d
// with the workbook's conventions: a fully masked row (every score -inf) has P = 0, O = 0,
// m = -inf, d = 0 and logsumexp = -inf. The optional causal mask is bottom-right aligned (as in
// FlashAttention 2.1 and later): query i sees key j iff j <= i + (lk - lq), so the last query
// sees every key and, when lq > lk, the first lq - lk queries see none. It is restated here,
// independently of the chapters' own mask function, so that the reference never shares a bug
// with the code it checks.
#pragma once

#include <vector>

#include "common/attention_inputs.hpp"
#include "common/compare.hpp"

namespace wb::ref {

struct Attention {
  std::vector<double> p;  ///< (bh, lq, lk); empty unless asked for
  std::vector<double> o;  ///< (bh, lq, d)
  /// (bh, lq, d): sum_j p_ij |v_jc|, the size of the terms whose rounding makes O's error.
  /// O itself can cancel to ~0, so O's error is measured in units of this (compare_weighted).
  std::vector<double> o_weight;
  std::vector<double> m;    ///< (bh, lq): max_j s_ij, -inf for a fully masked row
  std::vector<double> d;    ///< (bh, lq): sum_j e^{s_ij - m_i}, 0 for a fully masked row
  std::vector<double> lse;  ///< (bh, lq): m_i + log d_i, -inf for a fully masked row
  /// Bound on |float score - exact score| for any summation order of the float dot product
  /// and the scale: gamma_{d+2} max_ij scale sum_t |q_it| |k_jt| (Higham, eq. 3.5).
  double score_error = 0.0;
  double max_abs_lse = 0.0;  ///< max |lse_i| over the rows that are not fully masked
};

/// The fp64 attention of float inputs. `want_p` keeps the (bh, lq, lk) probabilities.
Attention attention(const AttentionInputs& in, AttentionShape shape, float scale, bool causal,
                    bool want_p = true);

/// Like compare(), but every element's error is divided by its weight: max_abs (and max_rel)
/// become max_i |actual_i - reference_i| / weight_i. Where the weight is 0 the reference is
/// exact (a fully masked row's 0) and the actual value must equal it; any difference there is
/// counted as a mismatch. NaN-aware as compare().
ErrorReport compare_weighted(const std::vector<float>& actual, const std::vector<double>& reference,
                             const std::vector<double>& weight);

// ------------------------------------------------------------------------------------------
// The error model: first-order bounds on what float arithmetic may cost, whatever the order
// of the work (naive, tiled with any tile sizes, element by element). They are the "stated
// floor" of the tolerance policy: a step's error <= 2 x the previous step's + floor.
// u = 2^-24 (kFloatEps).
// ------------------------------------------------------------------------------------------

/// gamma_n = n u / (1 - n u), the bound on the relative error of n successive roundings
/// (Higham); infinite from n u >= 1 on, where it bounds nothing.
double gamma(int n);

/// |x - m| below which e^{x - m} is still a normal float: e^{-87.3} = FLT_MIN. Past it a
/// probability is below FLT_MIN, where compare() measures error against FLT_MIN instead.
inline constexpr double kExpArgRange = 88.0;

/// Relative error of every probability p_ij and of every denominator d_i:
///   e^{2 score_error} - 1       scores perturbed by score_error: the numerator and the
///                               denominator of softmax move by at most e^{+-score_error};
///   + 2 kExpArgRange u          the rounded subtractions x - m along the online chain: they
///                               telescope to at most u (m - x) for the term and as much again
///                               for the running maxima, m - x <= kExpArgRange where it counts;
///   + 6 lk u                    up to lk steps, each rescaling the running sum by a factor
///                               whose exp is within 2 ulp on CUDA (4 u), the product (u),
///                               and adding the step's term, the float sum's own rounding
///                               (u; (lk - 1) u in all, Higham 4.4);
///   + 8 u                       the term's own exp, the reciprocal, the final product.
double softmax_floor(double score_error, int lk);

/// Error of every O_ic in units of o_weight_ic (compare_weighted): the probabilities'
/// relative error (softmax_floor) carried through sum_j p_ij v_jc, plus up to lk steps of the
/// output recurrence, each one rounding a rescale factor (exp within 2 ulp on CUDA: 4 u, a
/// product and a quotient: u each) and the update (product, product, add: u each): 9 u per
/// step, and 16 u for the final normalization.
double output_floor(double score_error, int lk);

/// Absolute error of logsumexp = m + log d: m is within score_error, log d within d's
/// relative error (softmax_floor), logf adds 1 ulp of |log d| <= log(lk) < 22 (at most 2^-19,
/// 32 u, in [16, 32)), and the sum half an ulp of |lse|, at most |lse| u:
/// score_error + softmax_floor + (max_abs_lse + 32) u.
double lse_floor(double score_error, int lk, double max_abs_lse);

}  // namespace wb::ref
