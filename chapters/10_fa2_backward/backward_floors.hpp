// Chapter 10: the error floors stated for the backward that recomputes P (fa2_backward.md,
// section "Errors", eq. 11), in fp32 and with the 16-bit rungs' roundings: what the tests hold
// every tiled rung to and the program prints beside its errors.
#pragma once

#include <cmath>
#include <cstddef>
#include <vector>

#include "chapters/06_fa2_rescaled/fa2.hpp"
#include "common/attention_inputs.hpp"
#include "common/dtype.hpp"
#include "common/hd.hpp"
#include "common/reference_attention.hpp"
#include "common/reference_attention_backward.hpp"

namespace wb::ch10 {

/// Eq. (11)'s floors for a backward that recomputes P from chapter 06's float forward (its O
/// within output_floor x o_weight of exact, its lse within lse_floor), with `type`'s roundings
/// (none for fp32), u its unit roundoff: P^T and dS^T rounded for the products (u more in P's
/// error and in dS's), O read rounded (u more in D's, |O| <= o_weight), and each gradient
/// rounded once when written.
inline ref::BackwardFloors stated_floors(const ref::AttentionGrads& r, AttentionShape s,
                                         Dtype type) {
  const double u = ch06::unit_roundoff(type);
  const double lse_error = ref::lse_floor(r.score_error, s.lk, r.max_abs_lse);
  ref::BackwardFloors f = ref::backward_floors(
      ref::recomputed_p_error(r.score_error, lse_error) + u,
      ref::d_from_o_error(ref::output_floor(r.score_error, s.lk), s.d) + u, s.lq, s.lk, s.d);
  f.dq += 2 * u;
  f.dk += 2 * u;
  f.dv += u;
  return f;
}

/// The 16-bit rung's roundings in the weights of `r` (nothing for fp32): below the type's smallest
/// normal N, rounding is absolute, u N. P^T rounded for dV: u N sum_i |dO_ic|; dS^T rounded
/// for dK and dQ: u N scale sum_i |Q_ic|, u N scale sum_j |K_jc|; each output: u N.
inline void add_subnormal_terms(ref::AttentionGrads& r, const AttentionInputs& qkv,
                                const std::vector<float>& d_o, AttentionShape s, float scale,
                                Dtype type) {
  if (type == Dtype::fp32) return;
  const double n = ch06::smallest_normal(type), sc = std::fabs(double(scale));
  for (int b = 0; b < s.bh; ++b) {
    std::vector<double> sum_do(s.d, 0.0), sum_q(s.d, 0.0), sum_k(s.d, 0.0);
    for (int i = 0; i < s.lq; ++i)
      for (int c = 0; c < s.d; ++c) {
        const std::size_t e = (std::size_t(b) * s.lq + i) * s.d + c;
        sum_do[c] += std::fabs(d_o[e]);
        sum_q[c] += std::fabs(qkv.q[e]);
      }
    for (int j = 0; j < s.lk; ++j)
      for (int c = 0; c < s.d; ++c)
        sum_k[c] += std::fabs(qkv.k[(std::size_t(b) * s.lk + j) * s.d + c]);
    for (int i = 0; i < s.lq; ++i)
      for (int c = 0; c < s.d; ++c)
        r.dq_weight[(std::size_t(b) * s.lq + i) * s.d + c] += n * (sc * sum_k[c] + 1.0);
    for (int j = 0; j < s.lk; ++j)
      for (int c = 0; c < s.d; ++c) {
        const std::size_t e = (std::size_t(b) * s.lk + j) * s.d + c;
        r.dv_weight[e] += n * (sum_do[c] + 1.0);
        r.dk_weight[e] += n * (sc * sum_q[c] + 1.0);
      }
  }
}

}  // namespace wb::ch10
