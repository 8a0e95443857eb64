// Chapter 04's baseline: naive attention with Eigen, the (lq, lk) scores materialized.
// Host code only (the kernels never include it); chapters 04-06 and 10 measure against it,
// linking ch04_cpu (wb_add_chapter's CPU_FROM).
#pragma once

#include <vector>

#include "common/attention_inputs.hpp"

namespace wb::ch04 {

/// Eqs. (1)-(3) one head at a time, the (lq, lk) scores materialized in between
/// (attention_naive.cpp: Eigen's products, compiled once for every chapter that measures
/// against it).
/// q: (bh, lq, d); k, v: (bh, lk, d); p: (bh, lq, lk) or nullptr; o: (bh, lq, d) or nullptr.
/// With p == nullptr one head's S lives in a heap scratch of lq x lk floats: the memory that
/// fusing saves. `causal` sets the scores above the diagonal to -inf (causal_visible) before
/// the softmax: the masked baseline of chapter 06.
void attention_naive(const float* q, const float* k, const float* v, AttentionShape shape,
                     float scale, bool causal, float* p, float* o);

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
