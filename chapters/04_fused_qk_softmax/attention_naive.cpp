// Chapter 04's naive baseline (attention_naive.hpp): Eigen's matrix products, in a
// translation unit of their own so that the programs and tests of chapters 04-06 and 10 do
// not each compile Eigen's GEMM again.
#include "chapters/04_fused_qk_softmax/attention_naive.hpp"

#include <Eigen/Dense>

#include <cmath>
#include <cstddef>
#include <vector>

#include "chapters/01_safe_softmax/softmax.hpp"
#include "chapters/04_fused_qk_softmax/fused_softmax.hpp"

namespace wb::ch04 {
namespace {

using RowMajorMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMatrixMap = Eigen::Map<const RowMajorMatrix>;
using MatrixMap = Eigen::Map<RowMajorMatrix>;

}  // namespace

// [naive_cpu]
// Eqs. (1)-(3) one head at a time, the (lq, lk) scores S materialized in between.
void attention_naive(const float* q, const float* k, const float* v, AttentionShape shape,
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

}  // namespace wb::ch04
