// The fp64 reference of attention's backward pass, and its error model (chapter 10).
//
// For O = P V, P = softmax(S) row-wise, S = scale Q K^T (+ the causal mask), and the gradient
// dO of some loss with respect to O, computed in double with P materialized:
//   dV = P^T dO                 dP = dO V^T
//   D_i = sum_c dO_ic O_ic      dS = P * (dP - D)          (D_i = sum_j P_ij dP_ij)
//   dQ = scale dS K             dK = scale dS^T Q
// A fully masked row (every key hidden by the mask) has P = 0 and so contributes nothing: its
// dQ row is 0 and it adds nothing to dK or dV. The forward is recomputed here in double from
// the float Q, K, V; the mask is restated (bottom-right aligned), as in reference_attention.hpp.
#pragma once

#include <vector>

#include "common/attention_inputs.hpp"

namespace wb::ref {

struct AttentionGrads {
  std::vector<double> dq;        ///< (bh, lq, d)
  std::vector<double> dk;        ///< (bh, lk, d)
  std::vector<double> dv;        ///< (bh, lk, d)
  std::vector<double> o;         ///< (bh, lq, d): the forward's O
  std::vector<double> lse;       ///< (bh, lq): the forward's logsumexp, -inf for a masked row
  std::vector<double> d_row;     ///< (bh, lq): D_i = sum_c dO_ic O_ic
  std::vector<double> o_weight;  ///< (bh, lq, d): sum_j P_ij |V_jc| (>= |O_ic|)
  /// The sizes the float computations' errors scale with (compare_weighted's weights), from
  /// G_ij = P_ij (A_ij + B_i), A_ij = sum_c |dO_ic| |V_jc| (bounds |dP_ij| and its rounding),
  /// B_i = sum_c |dO_ic| o_weight_ic (bounds |D_i|, its rounding and that of an O within
  /// o_weight of its error):
  std::vector<double> dq_weight;  ///< |scale| sum_j G_ij |K_jc|
  std::vector<double> dk_weight;  ///< |scale| sum_i G_ij |Q_ic|
  std::vector<double> dv_weight;  ///< sum_i P_ij |dO_ic|
  /// Bound on |float score - exact score| (as Attention::score_error).
  double score_error = 0.0;
  double max_abs_lse = 0.0;  ///< max |lse_i| over the rows that are not fully masked
};

/// The gradients of float inputs Q, K, V and dO (bh, lq, d), in double.
AttentionGrads attention_backward(const AttentionInputs& in, const std::vector<float>& d_o,
                                  AttentionShape shape, float scale, bool causal);

/// Error of every float gradient in units of its weight, whatever the order of the sums
/// (tiled, atomics), for a backward whose P carries relative error `p_error` and whose D
/// errs by at most `d_error` x B_i:
///   eps_S = p_error + d_error + gamma_d + 3 u
///     (dP is a d-term dot product; the difference, the product with P, the scale);
///   dQ: eps_S + gamma_{lk+1};  dK: eps_S + gamma_{lq+1};  dV: p_error + gamma_{lq+1}
///     (sums of lk or lq products, in any order).
struct BackwardFloors {
  double dq = 0.0, dk = 0.0, dv = 0.0;
};
BackwardFloors backward_floors(double p_error, double d_error, int lq, int lk, int d);

/// P's relative error when a backward recomputes P_ij = e^{s_ij - lse_i} from a float lse
/// within `lse_error` of the exact one: the score, lse and their rounded difference shift the
/// exponent (by score_error, lse_error and at most kExpArgRange u where P is not below
/// FLT_MIN), and expf adds 2 ulp: e^{score_error + lse_error + kExpArgRange u} - 1 + 4 u.
double recomputed_p_error(double score_error, double lse_error);

/// D's error, in units of B_i, when D_i = sum_c dO_ic O_ic is computed from an O within
/// `o_error` x o_weight of the exact one: o_error + gamma_d.
double d_from_o_error(double o_error, int d);

}  // namespace wb::ref
