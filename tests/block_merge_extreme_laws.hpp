// Chapter 03's tests, the monoid laws at the edges of float's range (tests/test_03_block_merge.cpp
// and the warp merge's, tests/test_03_block_merge_warp_edges.cpp): operands whose maxima and
// denominators reach FLT_MAX, exp's edges and the subnormals, the exact merge in double, and
// the laws on them, generic over the merge as the seeded ones (tests/block_merge_laws.hpp).
#pragma once

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "chapters/03_block_merge/md_merge.hpp"
#include "tests/block_merge_laws.hpp"

namespace wb::test::block_merge {

// ------------------------------------------------------------------------------------------
// The laws at extreme operands
// ------------------------------------------------------------------------------------------

// The statistics the merge takes: m finite with d > 0, or the identity (-inf, 0). Here at the
// edges of float's range, where a rows' seeded cases never go: maxima at +-FLT_MAX, +-3e38,
// +-1e38, +-1e30 (a max minus another overflows to -inf, a max plus one overflows to inf),
// around exp's edges +-88.7 and +-104 (e^{m_lo - m_hi} is subnormal, or 0) and 0, -0 and the
// smallest subnormal; d from the smallest subnormal through 1 to 1e38 and FLT_MAX (a sum d_a +
// d_b e^{...} may overflow, or a subnormal factor lose its relative precision).
inline constexpr float kFloatMax = std::numeric_limits<float>::max();
inline constexpr float kFloatMinSub = std::numeric_limits<float>::denorm_min();

inline const std::vector<float>& extreme_maxima() {
  static const std::vector<float> m = {
      -kFloatMax, -3e38f, -1e38f, -1e30f, -104.f, -88.7f, -1.f, -0.f,   0.f,    kFloatMinSub,
      1.f,        88.7f,  104.f,  1e30f,  1e38f,  3e38f,  kFloatMax};
  return m;
}
inline const std::vector<float>& extreme_denominators() {
  static const std::vector<float> d = {kFloatMinSub, 1e-40f, std::numeric_limits<float>::min(),
                                       1.f,          3.f,    1e30f,
                                       1e38f,        kFloatMax};
  return d;
}

// Every (m, d) of the two lists, then the identity.
inline std::vector<MD> extreme_operands() {
  std::vector<MD> ops;
  for (float m : extreme_maxima())
    for (float d : extreme_denominators()) ops.push_back({m, d});
  ops.push_back(md_identity());
  return ops;
}

// Fewer, for the triples of the associativity law (55^3 of them): the maxima at the edges and
// one of each side of exp's range, d subnormal, 1, 1e38 and FLT_MAX.
inline std::vector<MD> extreme_triple_operands() {
  std::vector<MD> ops;
  for (float m : {-kFloatMax, -3e38f, -1e30f, -104.f, -88.7f, 0.f, 88.7f, 104.f, 1e30f, 3e38f,
                  kFloatMax, -0.f, 1.f})
    for (float d : {kFloatMinSub, 1.f, 1e38f, kFloatMax}) ops.push_back({m, d});
  for (float d : {3.f, 1e-40f}) ops.push_back({-3e38f, d});
  ops.push_back(md_identity());
  return ops;
}

inline bool same_bits(MD a, MD b) {
  return std::memcmp(&a.m, &b.m, sizeof(float)) == 0 && std::memcmp(&a.d, &b.d, sizeof(float)) == 0;
}

// The same bits but for the sign of a zero max: on a tie of +0 with -0, merge(a, b) keeps a's
// zero and merge(b, a) b's (md_merge.hpp), the same value, which e^{x - m} and m + log d turn
// into the same bits.
inline bool same_but_zero_sign(MD a, MD b) {
  const bool zeros = a.m == 0.f && b.m == 0.f;
  return (zeros || std::memcmp(&a.m, &b.m, sizeof(float)) == 0) &&
         std::memcmp(&a.d, &b.d, sizeof(float)) == 0;
}

// The exact merge of the operands (their floats taken as exact): m = max m_i, exactly a float,
// and d = sum_i d_i e^{m_i - m} in double (no overflow: at most 3 FLT_MAX), its own rounding
// negligible (2^-53 per term, and the exponent's rounding 2^-53 |m_i - m| matters only while
// the term does, |m_i - m| < 745).
struct ExactMD {
  float m;
  double d;
};
inline ExactMD exact_merge(const std::vector<MD>& ops) {
  ExactMD e{-kInf, 0.0};
  for (const MD& a : ops) e.m = std::fmax(e.m, a.m);
  if (e.m == -kInf) return e;
  for (const MD& a : ops)
    if (a.m != -kInf) e.d += a.d * std::exp(static_cast<double>(a.m) - e.m);
  return e;
}

// The bound of a merge tree of `steps` merges on given operands, against the exact merge:
// relative, d_bound(steps) (eq. 6: the exponents' roundings 104 u, each exp, product and sum);
// and absolute, for the factors e^{m_lo - m_hi} below float's normal range, where the relative
// bound stops: such a factor (and so its product with the d it scales, at most the operands'
// sum_d) is off by at most an ulp of the subnormals, 2^-149, and each product that lands there
// rounds by at most half of one: steps (2^-149 sum_d + 2^-150).
struct MergeBound {
  double rel, abs;
};
inline MergeBound merge_bound(int steps, double sum_d) {
  return {d_bound(steps, kHostExpErr),
          steps * (std::ldexp(sum_d, -149) + std::ldexp(1.0, -150))};
}

// A merged d against the exact one: never NaN; within the bound; inf only where the exact d
// plus its bound passes FLT_MAX (then the rounding may well give inf); finite elsewhere.
inline bool d_within(float got, const ExactMD& exact, MergeBound b) {
  if (std::isnan(got)) return false;
  const double reach = exact.d * (1 + b.rel) + b.abs;
  if (std::isinf(got)) return got > 0 && reach >= kFloatMax;
  return std::fabs(got - exact.d) <= b.rel * exact.d + b.abs;
}

// Identity at the extremes: merge(a, e) and merge(e, a) are a bit for bit (the sign of a zero
// max included), and so is merge(e, e) = e: an empty side never reaches the arithmetic.
inline LawResult extreme_identity_law(Merge merge) {
  LawResult r;
  for (const MD& a : extreme_operands()) {
    ++r.checks;
    const MD right = merge(a, md_identity());
    const MD left = merge(md_identity(), a);
    if (!same_bits(right, a) || !same_bits(left, a))
      r.fail("merge(" + str(a) + ", e) = " + str(right) + ", merge(e, a) = " + str(left));
  }
  return r;
}

// A law on every pair (a, b) of extreme operands, in both orders: `law(a, b)` says what the
// merge got wrong on the pair, or "" where it keeps the law.
template <typename PairLaw>
LawResult extreme_pairs_law(PairLaw&& law) {
  LawResult r;
  const std::vector<MD> ops = extreme_operands();
  for (const MD& a : ops) {
    for (const MD& b : ops) {
      ++r.checks;
      const std::string wrong = law(a, b);
      if (!wrong.empty()) r.fail(wrong);
    }
  }
  return r;
}

// Commutativity at the extremes: merge(a, b) and merge(b, a) are the same bits for every pair
// (but for the sign of a zero max, same_but_zero_sign), never NaN.
inline LawResult extreme_commutativity_law(Merge merge) {
  return extreme_pairs_law([merge](MD a, MD b) -> std::string {
    const MD ab = merge(a, b), ba = merge(b, a);
    if (same_but_zero_sign(ab, ba) && !std::isnan(ab.d)) return "";
    return "merge(" + str(a) + ", " + str(b) + ") = " + str(ab) + " but merge(b, a) = " + str(ba);
  });
}

// One merge against the exact merge of its operands, for every pair: m exactly the larger max,
// d within one merge's bound, no NaN, no inf where the exact d is finite by more than the bound.
inline LawResult extreme_pair_law(Merge merge) {
  return extreme_pairs_law([merge](MD a, MD b) -> std::string {
    const MD ab = merge(a, b);
    const ExactMD exact = exact_merge({a, b});
    if (ab.m == exact.m && d_within(ab.d, exact, merge_bound(1, double(a.d) + b.d))) return "";
    std::ostringstream s;
    s.precision(9);
    s << "merge(" << str(a) << ", " << str(b) << ") = " << str(ab) << " where the exact merge is ("
      << exact.m << ", " << exact.d << ")";
    return s.str();
  });
}

// Associativity at the extremes: (a b) c and a (b c) have the exact max, and each a d within
// two merges' bound of the exact d (hence of each other), on every triple whose inner merges
// a b and b c stay in float's range: where one of them overflows (d_a + d_b > FLT_MAX at equal
// maxima), no float can hold it, and inf times a factor of 0 in the outer merge is NaN however
// the merge is written. Statistics of rows never get there (d <= the entries of a row, the
// max's own term 1 each), and such an overflow's own merge is held by extreme_pair_law.
inline LawResult extreme_associativity_law(Merge merge) {
  LawResult r;
  const std::vector<MD> ops = extreme_triple_operands();
  const auto may_overflow = [](MD x, MD y) {
    const ExactMD e = exact_merge({x, y});
    const MergeBound b = merge_bound(1, double(x.d) + y.d);
    return e.d * (1 + b.rel) + b.abs >= kFloatMax;
  };
  for (const MD& a : ops) {
    for (const MD& b : ops) {
      for (const MD& c : ops) {
        if (may_overflow(a, b) || may_overflow(b, c)) continue;
        ++r.checks;
        const MD left = merge(merge(a, b), c);
        const MD right = merge(a, merge(b, c));
        const ExactMD exact = exact_merge({a, b, c});
        const MergeBound bound = merge_bound(2, double(a.d) + b.d + c.d);
        if (left.m != exact.m || right.m != exact.m || !d_within(left.d, exact, bound) ||
            !d_within(right.d, exact, bound)) {
          std::ostringstream s;
          s.precision(9);
          s << "(a b) c = " << str(left) << ", a (b c) = " << str(right) << " for a = " << str(a)
            << ", b = " << str(b) << ", c = " << str(c) << ": exact (" << exact.m << ", "
            << exact.d << ")";
          r.fail(s.str());
        }
      }
    }
  }
  return r;
}

}  // namespace wb::test::block_merge
