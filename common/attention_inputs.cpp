#include "common/attention_inputs.hpp"

#include <cmath>

#include "common/inputs.hpp"

namespace wb {

namespace {

constexpr float kOutlierFactor = 20.f;
constexpr std::uint64_t kOutlierKeyEvery = 16;    // about 1 key row in 16 becomes an outlier
constexpr std::uint64_t kOutlierValueEvery = 64;  // about 1 V entry in 64
constexpr float kScoreOffset = 1e4f;

}  // namespace

const std::vector<ScoreKind>& all_score_kinds() {
  static const std::vector<ScoreKind> kinds = {ScoreKind::randn, ScoreKind::outliers,
                                               ScoreKind::large_offset, ScoreKind::ones,
                                               ScoreKind::arange};
  return kinds;
}

const char* to_string(ScoreKind kind) {
  constexpr const char* kNames[] = {"randn", "outliers x20", "scores +-1e4 + randn",
                                    "ones (uniform P)", "arange (s_ij = j)"};  // enum order
  return kNames[static_cast<int>(kind)];
}

std::string to_string(const AttentionShape& s) {
  return "bh " + std::to_string(s.bh) + ", lq " + std::to_string(s.lq) + ", lk " +
         std::to_string(s.lk) + ", d " + std::to_string(s.d);
}

AttentionInputs make_attention_inputs(ScoreKind kind, AttentionShape shape, float scale,
                                      std::uint64_t seed) {
  const std::uint64_t kind_seed = seed ^ (static_cast<std::uint64_t>(kind) << 56);
  AttentionInputs in{randn(shape.q_elems(), kind_seed), randn(shape.kv_elems(), kind_seed + 1),
                     randn(shape.kv_elems(), kind_seed + 2)};
  const int d = shape.d;
  const std::size_t q_rows = shape.rows();
  const std::size_t k_rows = std::size_t(shape.bh) * shape.lk;
  switch (kind) {
    case ScoreKind::randn:
      break;
    case ScoreKind::outliers: {
      for (std::size_t r = 0; r < k_rows; ++r) {
        const bool forced =
            r % shape.lk == splitmix64(kind_seed + r / shape.lk) % shape.lk;  // one per head
        if (forced || splitmix64(kind_seed ^ r) % kOutlierKeyEvery == 0)
          for (int c = 0; c < d; ++c) in.k[r * d + c] *= kOutlierFactor;
      }
      for (std::size_t i = 0; i < in.v.size(); ++i)
        if (splitmix64(kind_seed + 3 + i) % kOutlierValueEvery == 0) in.v[i] *= kOutlierFactor;
      break;
    }
    case ScoreKind::large_offset: {
      // scale * a * a = 1e4 to within a few ulp; the other d - 1 columns add randn-sized terms.
      // Odd query rows take q_0 = -a: their scores are -1e4 + randn, a logsumexp far below
      // zero, where a key wrongly left unmasked with a zero score has e^{0 - lse} = inf.
      const float a = std::sqrt(kScoreOffset / scale);
      for (std::size_t r = 0; r < q_rows; ++r) in.q[r * d] = r % 2 == 0 ? a : -a;
      for (std::size_t r = 0; r < k_rows; ++r) in.k[r * d] = a;
      break;
    }
    case ScoreKind::ones:
      for (float& x : in.q) x = 1.f;
      for (float& x : in.k) x = 1.f;
      break;
    case ScoreKind::arange:
      for (float& x : in.q) x = 0.f;
      for (float& x : in.k) x = 0.f;
      for (std::size_t r = 0; r < q_rows; ++r) in.q[r * d] = 1.f;
      for (std::size_t r = 0; r < k_rows; ++r)
        in.k[r * d] = static_cast<float>(r % shape.lk) / scale;
      break;
  }
  return in;
}

}  // namespace wb
