#include "common/reference_attention_backward.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/compare.hpp"
#include "common/reference_attention.hpp"

namespace wb::ref {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

AttentionGrads attention_backward(const AttentionInputs& in, const std::vector<float>& d_o,
                                  AttentionShape shape, float scale, bool causal) {
  const int lq = shape.lq, lk = shape.lk, dim = shape.d;
  const Attention fwd = attention(in, shape, scale, causal, /*want_p=*/true);
  AttentionGrads g;
  g.o = fwd.o;
  g.lse = fwd.lse;
  g.o_weight = fwd.o_weight;
  g.score_error = fwd.score_error;
  g.max_abs_lse = fwd.max_abs_lse;
  g.dq.assign(shape.q_elems(), 0.0);
  g.dk.assign(shape.kv_elems(), 0.0);
  g.dv.assign(shape.kv_elems(), 0.0);
  g.dq_weight.assign(shape.q_elems(), 0.0);
  g.dk_weight.assign(shape.kv_elems(), 0.0);
  g.dv_weight.assign(shape.kv_elems(), 0.0);
  g.d_row.assign(shape.rows(), 0.0);
  const double sc = double(scale), abs_sc = std::fabs(sc);
  for (int b = 0; b < shape.bh; ++b) {
    const std::size_t q0 = std::size_t(b) * lq, k0 = std::size_t(b) * lk;
    for (int i = 0; i < lq; ++i) {
      const std::size_t row = q0 + i;
      if (fwd.lse[row] == -kInf) continue;  // fully masked: P = 0, nothing flows back
      const float* doi = d_o.data() + row * dim;
      const double* oi = fwd.o.data() + row * dim;
      const double* wi = fwd.o_weight.data() + row * dim;
      double big_d = 0.0, abs_d = 0.0;  // D_i and B_i
      for (int c = 0; c < dim; ++c) {
        big_d += double(doi[c]) * oi[c];
        abs_d += std::fabs(double(doi[c])) * wi[c];
      }
      g.d_row[row] = big_d;
      const float* qi = in.q.data() + row * dim;
      for (int j = 0; j < lk; ++j) {
        const double p = fwd.p[row * lk + j];
        if (p == 0.0) continue;  // masked (or underflowed in double): no term
        const std::size_t kj = (k0 + j) * dim;
        double dp = 0.0, abs_dp = 0.0;  // dP_ij and A_ij
        for (int c = 0; c < dim; ++c) {
          dp += double(doi[c]) * double(in.v[kj + c]);
          abs_dp += std::fabs(double(doi[c]) * double(in.v[kj + c]));
        }
        const double ds = p * (dp - big_d);      // dS_ij
        const double gw = p * (abs_dp + abs_d);  // G_ij
        for (int c = 0; c < dim; ++c) {
          g.dv[kj + c] += p * double(doi[c]);
          g.dv_weight[kj + c] += p * std::fabs(double(doi[c]));
          g.dq[row * dim + c] += sc * ds * double(in.k[kj + c]);
          g.dq_weight[row * dim + c] += abs_sc * gw * std::fabs(double(in.k[kj + c]));
          g.dk[kj + c] += sc * ds * double(qi[c]);
          g.dk_weight[kj + c] += abs_sc * gw * std::fabs(double(qi[c]));
        }
      }
    }
  }
  return g;
}

BackwardFloors backward_floors(double p_error, double d_error, int lq, int lk, int d) {
  const double eps_s = p_error + d_error + gamma(d) + 3.0 * kFloatEps;
  return {eps_s + gamma(lk + 1), eps_s + gamma(lq + 1), p_error + gamma(lq + 1)};
}

double recomputed_p_error(double score_error, double lse_error) {
  return std::expm1(score_error + lse_error + kExpArgRange * kFloatEps) + 4.0 * kFloatEps;
}

double d_from_o_error(double o_error, int d) {
  return o_error + gamma(d);
}

}  // namespace wb::ref
