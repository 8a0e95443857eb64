// Chapter 04's baseline: naive attention with Eigen, the (lq, lk) scores materialized.
// Host code only (the kernels never include it); chapters 04-06 measure against it.
#pragma once

#include <Eigen/Dense>

#include <cmath>
#include <cstddef>
#include <vector>

#include "chapters/01_safe_softmax/softmax.hpp"
#include "chapters/04_fused_qk_softmax/fused_softmax.hpp"
#include "common/attention_inputs.hpp"

namespace wb::ch04 {

using RowMajorMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMatrixMap = Eigen::Map<const RowMajorMatrix>;
using MatrixMap = Eigen::Map<RowMajorMatrix>;

// [naive_cpu]
/// Eqs. (1)-(3) one head at a time, the (lq, lk) scores materialized in between.
/// q: (bh, lq, d); k, v: (bh, lk, d); p: (bh, lq, lk) or nullptr; o: (bh, lq, d) or nullptr.
/// With p == nullptr one head's S lives in a heap scratch of lq x lk floats: the memory that
/// fusing saves. `causal` sets the scores above the diagonal to -inf (causal_visible) before
/// the softmax: the masked baseline of chapter 06.
inline void attention_naive(const float* q, const float* k, const float* v, AttentionShape shape,
                            float scale, bool causal, float* p, float* o) {
  const int lq = shape.lq, lk = shape.lk, d = shape.d;
  std::vector<float> scratch;
  if (p == nullptr) scratch.resize(std::size_t(lq) * lk);
  for (int b = 0; b < shape.bh; ++b) {
    float* pb = p != nullptr ? p + std::size_t(b) * lq * lk : scratch.data();
    const ConstMatrixMap Q(q + std::size_t(b) * lq * d, lq, d);
    const ConstMatrixMap K(k + std::size_t(b) * lk * d, lk, d);
    MatrixMap S(pb, lq, lk);
    S.noalias() = scale * (Q * K.transpose());  // eq. (1)
    if (causal) {
      for (int i = 0; i < lq; ++i)
        for (int j = 0; j < lk; ++j)
          if (!causal_visible(i, j, lq, lk)) S(i, j) = -INFINITY;
    }
    ch01::softmax_safe(pb, pb, lq, lk);  // eq. (2): chapter 01's safe softmax, in place
    if (o != nullptr) {
      const ConstMatrixMap V(v + std::size_t(b) * lk * d, lk, d);
      MatrixMap O(o + std::size_t(b) * lq * d, lq, d);
      O.noalias() = S * V;  // eq. (3)
    }
  }
}
// [naive_cpu]

/// P and O of the naive attention, as vectors.
struct NaiveAttention {
  std::vector<float> p;  ///< (bh, lq, lk)
  std::vector<float> o;  ///< (bh, lq, d)
};

inline NaiveAttention attention_naive(const AttentionInputs& in, AttentionShape shape, float scale,
                                      bool causal = false) {
  NaiveAttention out{std::vector<float>(shape.p_elems()), std::vector<float>(shape.q_elems())};
  attention_naive(in.q.data(), in.k.data(), in.v.data(), shape, scale, causal, out.p.data(),
                  out.o.data());
  return out;
}

}  // namespace wb::ch04
