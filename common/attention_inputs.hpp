// Attention shapes and seeded, adversarial Q, K, V (chapters 04-06).
//
// Q is (bh, lq, d), K and V are (bh, lk, d), row-major fp32, bh = batch x heads. The kinds
// below shape the scores S = scale Q K^T, which is what a wrong attention kernel gets wrong:
// outlier keys, scores near 1e4 that overflow exp unless the max is subtracted, a uniform
// softmax whose output cancels to near zero, and a steep ramp.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/hd.hpp"

namespace wb {

/// Q: (bh, lq, d); K, V: (bh, lk, d); S, P: (bh, lq, lk); O: (bh, lq, d).
struct AttentionShape {
  int bh;  ///< batch x heads
  int lq;  ///< query rows
  int lk;  ///< key (and value) rows
  int d;   ///< head dimension

  __host__ __device__ std::size_t q_elems() const { return std::size_t(bh) * lq * d; }
  __host__ __device__ std::size_t kv_elems() const { return std::size_t(bh) * lk * d; }
  __host__ __device__ std::size_t p_elems() const { return std::size_t(bh) * lq * lk; }
  /// One statistic (m, d, logsumexp) per query row.
  __host__ __device__ std::size_t rows() const { return std::size_t(bh) * lq; }
};

/// The softmax scale every chapter defaults to: 1 / sqrt(d), so that scores of unit-variance
/// q and k have unit variance.
inline float default_scale(int d) {
  return 1.f / std::sqrt(static_cast<float>(d));
}

enum class ScoreKind {
  randn,     ///< Q, K, V standard normal: scores of unit variance
  outliers,  ///< randn, about 1 key row in 16 (at least one per head) x20, V entries 1 in 64 x20
  /// randn, but k[0] = sqrt(1e4 / scale) and q[0] = +-k[0], + on even query rows, - on odd:
  /// every score of a row is 1e4 + randn, or -1e4 + randn (a logsumexp far below zero)
  large_offset,
  ones,          ///< Q = K = 1: every score equal, a uniform P; V randn, so O cancels to ~0
  arange,        ///< q = e_0, k_j = (j / scale) e_0: s_ij = j, a steep ramp onto the last keys
};

/// Every kind, for tests that sweep them.
const std::vector<ScoreKind>& all_score_kinds();

const char* to_string(ScoreKind kind);

struct AttentionInputs {
  std::vector<float> q;  ///< (bh, lq, d)
  std::vector<float> k;  ///< (bh, lk, d)
  std::vector<float> v;  ///< (bh, lk, d)
};

/// Seeded Q, K, V of the given kind; `scale` is the softmax scale the scores will use (the
/// large_offset and arange kinds fold it in so that the scores have the stated values).
AttentionInputs make_attention_inputs(ScoreKind kind, AttentionShape shape, float scale,
                                      std::uint64_t seed);

/// "bh 2, lq 17, lk 127, d 59": for CAPTURE and the programs' tables.
std::string to_string(const AttentionShape& shape);

}  // namespace wb
