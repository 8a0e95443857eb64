// Chapter 09: the fp64 reference of split-KV attention (every sequence through
// common/reference_attention.hpp) and the error floors its steps and kernels are judged by.
#pragma once

#include <cmath>
#include <vector>

#include "chapters/09_flash_decoding/flash_decoding.hpp"
#include "common/reference_attention.hpp"

namespace wb::ch09 {

/// The fp64 reference (common/reference_attention.hpp) of every sequence, stitched together.
struct DecodeReference {
  std::vector<double> o;         ///< (batch, hq, lq, d)
  std::vector<double> o_weight;  ///< (batch, hq, lq, d): sum_j p_j |v_j|, O's error unit
  std::vector<double> lse;       ///< (batch, hq, lq)
  double score_error = 0.0;      ///< the largest of the sequences' score error bounds
  double max_abs_lse = 0.0;      ///< the largest |logsumexp| of a row that sees a key
  /// A bound on any partial's |logsumexp_s|: between the range's largest score and that plus
  /// log(keys), so at most max |score| + log(lk), and at most max_abs_lse.
  double max_abs_partial_lse = 0.0;
};

inline DecodeReference decode_reference(const AttentionInputs& in, const DecodeShape& shape,
                                        const std::vector<int>& lengths, DecodeOptions opt) {
  DecodeReference r{std::vector<double>(shape.q_elems(), 0.0),
                    std::vector<double>(shape.q_elems(), 0.0),
                    std::vector<double>(shape.rows(), -INFINITY)};
  for_each_sequence(
      in, shape, lengths, [&](int b, int, const AttentionInputs& seq, AttentionShape s) {
        const ref::Attention a = ref::attention(seq, s, opt.scale, opt.causal, false);
        const auto at = std::ptrdiff_t(std::size_t(b) * a.o.size());
        std::copy(a.o.begin(), a.o.end(), r.o.begin() + at);
        std::copy(a.o_weight.begin(), a.o_weight.end(), r.o_weight.begin() + at);
        std::copy(a.lse.begin(), a.lse.end(),
                  r.lse.begin() + std::ptrdiff_t(std::size_t(b) * a.lse.size()));
        r.score_error = std::max(r.score_error, a.score_error);
        r.max_abs_lse = std::max(r.max_abs_lse, a.max_abs_lse);
        double max_abs_score = 0.0;  // over the keys a row sees, eq. (6)
        for (int row = 0; row < s.bh * s.lq; ++row)
          for (int j = 0; j < s.lk; ++j) {
            if (opt.causal && !ch04::causal_visible(row % s.lq, j, s.lq, s.lk)) continue;
            double dot = 0.0;
            for (int t = 0; t < s.d; ++t)
              dot += double(seq.q[std::size_t(row) * s.d + t]) *
                     seq.k[(std::size_t(row / s.lq) * s.lk + j) * s.d + t];
            max_abs_score = std::max(max_abs_score, std::fabs(opt.scale * dot));
          }
        r.max_abs_partial_lse = std::max(
            {r.max_abs_partial_lse, a.max_abs_lse, max_abs_score + std::log(double(s.lk))});
      });
  return r;
}

/// The stated floor of split-KV attention's O against fp64, in units of o_weight, for
/// `splits` partials merged along paths of at most `depth` merges (a tree: up to splits - 1;
/// eq. (4) on the CPU: 1; the combine kernel: combine_depth). Chapter 06's output_floor for the
/// partials themselves (each in units of its own range's weights, which the merge weights turn
/// into the row's); then the weights e^{lse_s - lse}: their relative error is the absolute
/// error of lse_s - lse, that is lse_floor for the partial's logsumexp and as much for the
/// merged one (both up to `max_abs_partial_lse` in size); each merge on a path rounds
/// lo - hi (up to kExpArgRange where the weight is not negligible), an exp, a log1p, the add to
/// hi (|lse| u) and the O update (two products and a sum): (2 A + 2 x 88 + 16) u; and a sum of
/// up to `splits` weighted terms, splits u.
inline double split_floor(double score_error, int lk, double max_abs_partial_lse, int depth,
                          int splits) {
  const double a = max_abs_partial_lse;
  return ref::output_floor(score_error, lk) + 2.0 * ref::lse_floor(score_error, lk, a) +
         (double(depth) * (2.0 * a + 2.0 * ref::kExpArgRange + 16.0) + double(splits)) * kFloatEps;
}

/// The merges on a path of the combine kernel: each lane merges its ceil(splits / 32) splits in
/// turn, then 5 butterfly exchanges; its weights are one exp each.
inline int combine_depth(int splits) {
  return (splits + 31) / 32 + 5;
}

/// The stated floor of split-KV attention's logsumexp against fp64 (absolute): chapter 06's
/// lse_floor for a partial, then each of up to `depth` merges on a path rounding lo - hi, an
/// exp, a log and the add, (A + 88 + 8) u, and a sum of up to `splits` terms, splits u.
inline double split_lse_floor(double score_error, int lk, double max_abs_partial_lse, int depth,
                              int splits) {
  const double a = max_abs_partial_lse;
  return ref::lse_floor(score_error, lk, a) +
         (double(depth) * (a + ref::kExpArgRange + 8.0) + double(splits)) * kFloatEps;
}

}  // namespace wb::ch09
