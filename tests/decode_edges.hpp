// What chapter 09's tests of the merge at the edges of float's range share (its CPU laws in
// test_09_flash_decoding_merge_laws.cpp, its kernels in ..._merge_edges_kernels.cpp): the
// edge logsumexps and outputs, bit comparisons, and the exact logsumexp in long double.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <vector>

#include "common/compare.hpp"

namespace wb::test::decode_edges {

inline constexpr float kInf = std::numeric_limits<float>::infinity();
inline constexpr float kMax = std::numeric_limits<float>::max();
inline constexpr float kMinSub = std::numeric_limits<float>::denorm_min();
inline constexpr double kU = kFloatEps;  // u = 2^-24

/// Finite logsumexps at the edges: e^lse overflows past 88.7 and is subnormal or 0 below
/// -88.7 and -104; a merged lse beyond 2^24 ln 2 (1.2e7) rounds log 2 away; a difference of
/// two beyond +-1.7e38 overflows.
inline const std::vector<float> kEdgeLse = {-kMax, -3e38f, -1e30f, -1e4f, -104.f, -88.7f, -1.f, -0.f,
                                     0.f,   1.f,    88.7f,  104.f, 1e4f,   1e30f,  3e38f, kMax};
/// Output values at the edges (one partial's O row holds all of them).
inline const std::vector<float> kEdgeO = {-kMax, -1e38f, -1.f, -kMinSub, -0.f,
                                   0.f,   kMinSub, 1.f, 1e38f,    kMax};

inline bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, sizeof(float)) == 0;
}

/// The same bits, but a zero may come back with the other sign: an empty side's terms add
/// +0, and -0 + +0 = +0.
inline bool same_value_bits(float a, float b) {
  return same_bits(a, b) || (a == 0.f && b == 0.f);
}

/// Output values every partial holds alike: where the merge's O must be that value again (a
/// weight sum of 2 doubles it; 2e38 doubled overflows).
inline const std::vector<float> kSameO = {1.f, -3.f, 2e38f, -1e30f};

/// kEdgeO rotated by k, so that every magnitude meets every other across partials, then kSameO.
inline std::vector<float> edge_o(std::size_t k) {
  std::vector<float> o(kEdgeO.size());
  for (std::size_t i = 0; i < o.size(); ++i) o[i] = kEdgeO[(i + k) % kEdgeO.size()];
  o.insert(o.end(), kSameO.begin(), kSameO.end());
  return o;
}
inline const std::size_t kRowO = kEdgeO.size() + kSameO.size();

/// The exact logsumexp of the given floats taken as exact: M + log sum e^{lse_s - M}, in long
/// double (its own rounding negligible against float's); -inf when all are -inf.
inline long double exact_lse(const std::vector<float>& lse) {
  long double m = -kInf;
  for (float x : lse) m = std::max(m, static_cast<long double>(x));
  if (m == -kInf) return m;
  long double sum = 0;
  for (float x : lse) sum += std::exp(static_cast<long double>(x) - m);
  return m + std::log(sum);
}


}  // namespace wb::test::decode_edges
