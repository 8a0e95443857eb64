#include "common/reference_attention.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>

namespace wb::ref {

double gamma(int n) {
  // Past n u = 1 the first-order bound says nothing: infinite, which no check accepts.
  const double nu = n * kFloatEps;
  return nu < 1.0 ? nu / (1.0 - nu) : std::numeric_limits<double>::infinity();
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The workbook's causal alignment, bottom-right (see the header), restated on purpose.
bool visible(int i, int j, int lq, int lk) {
  return j <= i + (lk - lq);
}

}  // namespace

Attention attention(const AttentionInputs& in, AttentionShape shape, float scale, bool causal,
                    bool want_p) {
  const int lq = shape.lq, lk = shape.lk, dim = shape.d;
  Attention out;
  out.o.assign(shape.q_elems(), 0.0);
  out.o_weight.assign(shape.q_elems(), 0.0);
  out.m.assign(shape.rows(), -kInf);
  out.d.assign(shape.rows(), 0.0);
  out.lse.assign(shape.rows(), -kInf);
  if (want_p) out.p.assign(shape.p_elems(), 0.0);
  std::vector<double> s(lk), abs_s(lk);
  double max_abs_score_terms = 0.0;
  for (int b = 0; b < shape.bh; ++b) {
    const float* kb = in.k.data() + std::size_t(b) * lk * dim;
    const float* vb = in.v.data() + std::size_t(b) * lk * dim;
    for (int i = 0; i < lq; ++i) {
      const std::size_t row = std::size_t(b) * lq + i;
      const float* qi = in.q.data() + row * dim;
      double m = -kInf;
      for (int j = 0; j < lk; ++j) {
        double dot = 0.0, abs_dot = 0.0;
        for (int t = 0; t < dim; ++t) {
          const double prod = double(qi[t]) * double(kb[std::size_t(j) * dim + t]);
          dot += prod;
          abs_dot += std::fabs(prod);
        }
        max_abs_score_terms = std::max(max_abs_score_terms, std::fabs(double(scale)) * abs_dot);
        s[j] = (causal && !visible(i, j, lq, lk)) ? -kInf : double(scale) * dot;
        if (!(s[j] <= m)) m = std::isnan(m) ? m : s[j];  // a NaN score makes the row NaN
      }
      if (m == -kInf) continue;  // fully masked: P = 0, O = 0, lse = -inf, as initialized
      double d = 0.0;
      for (int j = 0; j < lk; ++j) d += std::exp(s[j] - m);
      out.m[row] = m;
      out.d[row] = d;
      out.lse[row] = m + std::log(d);
      out.max_abs_lse = std::max(out.max_abs_lse, std::fabs(out.lse[row]));
      double* o = out.o.data() + row * dim;
      double* w = out.o_weight.data() + row * dim;
      for (int j = 0; j < lk; ++j) {
        const double p = std::exp(s[j] - m) / d;
        if (want_p) out.p[row * lk + j] = p;
        const float* vj = vb + std::size_t(j) * dim;
        for (int c = 0; c < dim; ++c) {
          o[c] += p * double(vj[c]);
          w[c] += p * std::fabs(double(vj[c]));
        }
      }
    }
  }
  out.score_error = gamma(dim + 2) * max_abs_score_terms;
  return out;
}

ErrorReport compare_weighted(const std::vector<float>& actual, const std::vector<double>& reference,
                             const std::vector<double>& weight) {
  ErrorReport rep = compare(actual, reference);  // sizes and non-finite mismatches
  if (rep.size_mismatch || weight.size() != actual.size()) {
    rep.size_mismatch = true;
    return rep;
  }
  if (rep.nonfinite_mismatches > 0) return rep;  // already points at the first mismatch
  rep.max_abs = rep.max_rel = 0.0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    if (!std::isfinite(reference[i])) continue;
    const double diff = std::fabs(double(actual[i]) - reference[i]);
    if (weight[i] == 0.0) {
      if (diff != 0.0) {  // an exact reference (a masked row's 0) that was missed
        if (rep.nonfinite_mismatches++ == 0) rep.worst = i;
      }
      continue;
    }
    const double err = diff / weight[i];
    if (err > rep.max_abs) {
      rep.max_abs = err;
      rep.worst = i;
    }
  }
  rep.max_rel = rep.max_abs;
  if (!actual.empty()) {
    rep.worst_actual = actual[rep.worst];
    rep.worst_reference = reference[rep.worst];
  }
  return rep;
}

double softmax_floor(double score_error, int lk) {
  return std::expm1(2.0 * score_error) + (2.0 * kExpArgRange + 6.0 * lk + 8.0) * kFloatEps;
}

double output_floor(double score_error, int lk) {
  return softmax_floor(score_error, lk) + (9.0 * lk + 16.0) * kFloatEps;
}

double lse_floor(double score_error, int lk, double max_abs_lse) {
  constexpr double kLogUlp = 32.0;  // 1 ulp of |log d| <= log(2^31) < 22: 2^-19 = 32 u
  return score_error + softmax_floor(score_error, lk) + (max_abs_lse + kLogUlp) * kFloatEps;
}

}  // namespace wb::ref
