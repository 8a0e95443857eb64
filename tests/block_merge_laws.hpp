// Chapter 03's tests, the monoid laws (tests/test_03_block_merge.cpp): the error bound of
// block_merge.md's eq. (6), seeded rows cut into blocks, and the laws as property tests,
// generic over the merge so that broken merges can be shown to fail them.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "chapters/03_block_merge/block_merge.hpp"
#include "chapters/03_block_merge/md_merge.hpp"
#include "common/compare.hpp"
#include "common/inputs.hpp"
#include "tests/softmax_checks.hpp"

namespace wb::test::block_merge {

using namespace wb::ch03;

inline constexpr std::uint64_t kSeed = 2024;
inline constexpr float kInf = std::numeric_limits<float>::infinity();
inline constexpr int kLawCases = 400;  // seeded random rows, split and merged in random ways

// CUDA's expf is within 2 ulp (a relative 4u); glibc's within 1 (kHostExpErr, 2u).
inline constexpr double kCudaExpErr = 4 * kFloatEps;

// ------------------------------------------------------------------------------------------
// The error bound (block_merge.md, eq. 6)
// ------------------------------------------------------------------------------------------

// Relative error of a d computed by online updates and merges, where every entry's term passes
// at most `steps` operations (its block's updates plus the merges on its path to the root):
// the term e^{x_j - m} is born as e^{x_j - m_j} (exp_err, an add: u) and each later update or
// merge multiplies it by a factor e^{m_old - m_new} (exp_err, the product: u) and adds (u).
// The exponents' roundings, u |m_old - m_new| each, telescope along the path to
// u (m - x_j), which matters only while the term is in float's range: m - x_j <= 104.
// So |d - d_exact| <= (104 u + steps (exp_err + 2u)) d_exact, whatever the tree's shape:
// chapter 02's bound on its chain of n updates (online_d_bound), with `steps` for n.
inline double d_bound(int steps, double exp_err) {
  return online_d_bound(steps, exp_err);
}

// Two reductions of the same row agree within the sum of their bounds.
inline double agreement_bound(int steps_a, int steps_b) {
  return d_bound(steps_a, kHostExpErr) + d_bound(steps_b, kHostExpErr);
}

// ------------------------------------------------------------------------------------------
// Seeded cases: a row and the bounds that cut it into blocks
// ------------------------------------------------------------------------------------------

struct Case {
  std::string what;
  std::vector<float> x;     // the row
  std::vector<int> bounds;  // 0 = bounds[0] <= ... <= bounds[K] = x.size()
  int longest_block() const {
    int l = 0;
    for (std::size_t k = 0; k + 1 < bounds.size(); ++k) l = std::max(l, bounds[k + 1] - bounds[k]);
    return l;
  }
};

// Case i: a row of 0..199 entries of one of eight flavours, cut at random points. Every case
// has at least one empty block (a repeated bound); flavours add blocks that are all -inf,
// whole -inf rows, single-entry blocks, outliers x20, +1e4 offsets and blocks whose offsets
// differ by 1e4 (so e^{m_lo - m_hi} underflows to 0 inside the merge).
inline Case make_case(int i) {
  std::mt19937_64 rng(kSeed + static_cast<std::uint64_t>(i));
  const int flavour = i % 8;
  int n = static_cast<int>(rng() % 200);
  if (flavour == 6) n = 1 + static_cast<int>(rng() % 40);
  Case c;
  const InputKind kinds[] = {InputKind::randn, InputKind::outliers, InputKind::large_offset,
                             InputKind::neg_inf_entries};
  c.x = n > 0 ? make_input(kinds[flavour % 4], 1, n, rng()) : std::vector<float>{};
  if (flavour == 6) {  // every entry its own block
    for (int k = 0; k <= n; ++k) c.bounds.push_back(k);
  } else {
    const int cuts = 1 + static_cast<int>(rng() % 12);
    c.bounds = {0, n};
    for (int k = 0; k < cuts; ++k) c.bounds.push_back(static_cast<int>(rng() % (n + 1)));
  }
  c.bounds.push_back(c.bounds[rng() % c.bounds.size()]);  // an empty block, always
  std::sort(c.bounds.begin(), c.bounds.end());
  const int blocks = static_cast<int>(c.bounds.size()) - 1;
  const int chosen = static_cast<int>(rng() % blocks);
  const char* names[] = {"randn",
                         "outliers",
                         "randn + 1e4",
                         "-inf entries",
                         "an all -inf block",
                         "an all -inf row",
                         "single entries",
                         "offsets 0 or +-1e4 per block"};
  c.what = names[flavour];
  for (int k = 0; k < blocks; ++k) {
    for (int j = c.bounds[k]; j < c.bounds[k + 1]; ++j) {
      if (flavour == 4 && k == chosen) c.x[j] = -kInf;
      if (flavour == 5) c.x[j] = -kInf;
      if (flavour == 7) c.x[j] += 1e4f * static_cast<float>(static_cast<int>(k % 3) - 1);
    }
  }
  return c;
}

inline std::string describe(const Case& c, int i) {
  std::ostringstream s;
  s << "case " << i << " (" << c.what << ", " << c.x.size() << " entries, " << c.bounds.size() - 1
    << " blocks)";
  return s.str();
}

// fp64 sum_j e^{x_j - m} for the float max m of the row.
inline double exact_d(const std::vector<float>& x, float m) {
  if (m == -kInf) return 0.0;
  double d = 0.0;
  for (float v : x) d += std::exp(static_cast<double>(v) - m);
  return d;
}

// ------------------------------------------------------------------------------------------
// The laws, generic over the merge
// ------------------------------------------------------------------------------------------

using Merge = MD (*)(MD, MD);

struct LawResult {
  int checks = 0;
  int violations = 0;
  std::string first;  // the first violation, described
  void fail(const std::string& why) {
    if (violations++ == 0) first = why;
  }
};

inline bool same(MD a, MD b) {
  return a.m == b.m && a.d == b.d;
}  // NaN is never the same

inline std::string str(MD md) {
  std::ostringstream s;
  s.precision(9);
  s << "(" << md.m << ", " << md.d << ")";
  return s.str();
}

// Identity, eq. (3): merge(a, e) = merge(e, a) = a bit for bit, for every block's statistics
// and for e itself; never NaN.
inline LawResult identity_law(Merge merge) {
  LawResult r;
  for (int i = 0; i < kLawCases; ++i) {
    const Case c = make_case(i);
    std::vector<MD> leaves = blocks_stats(c.x.data(), c.bounds);
    leaves.push_back(md_identity());
    for (const MD& a : leaves) {
      ++r.checks;
      const MD right = merge(a, md_identity());
      const MD left = merge(md_identity(), a);
      if (!same(right, a) || !same(left, a))
        r.fail(describe(c, i) + ": merge(" + str(a) + ", e) = " + str(right) +
               ", merge(e, a) = " + str(left));
    }
  }
  return r;
}

// Commutativity: merge(a, b) = merge(b, a) bit for bit, for every pair of blocks of a case.
inline LawResult commutativity_law(Merge merge) {
  LawResult r;
  for (int i = 0; i < kLawCases; ++i) {
    const Case c = make_case(i);
    const std::vector<MD> leaves = blocks_stats(c.x.data(), c.bounds);
    for (const MD& a : leaves) {
      for (const MD& b : leaves) {
        ++r.checks;
        const MD ab = merge(a, b);
        const MD ba = merge(b, a);
        if (!same(ab, ba))
          r.fail(describe(c, i) + ": merge(" + str(a) + ", " + str(b) + ") = " + str(ab) +
                 " but merge(b, a) = " + str(ba));
      }
    }
  }
  return r;
}

// Associativity: merge(merge(a, b), c) and merge(a, merge(b, c)) have the same m exactly and
// d within twice the bound of two merges on given operands, (104 + 2 (2 + 2)) u each.
inline LawResult associativity_law(Merge merge) {
  LawResult r;
  const double bound = agreement_bound(2, 2);
  for (int i = 0; i < kLawCases; ++i) {
    const Case c = make_case(i);
    const std::vector<MD> leaves = blocks_stats(c.x.data(), c.bounds);
    const std::size_t k = leaves.size();
    for (std::size_t j = 0; j < k; ++j) {
      const MD& a = leaves[j];
      const MD& b = leaves[(j + 1) % k];
      const MD& cc = leaves[(j + 2) % k];
      ++r.checks;
      const MD left = merge(merge(a, b), cc);
      const MD right = merge(a, merge(b, cc));
      const bool ok = left.m == right.m && std::isfinite(left.d) && std::isfinite(right.d) &&
                      std::fabs(left.d - right.d) <= bound * std::max(left.d, right.d);
      if (!ok)
        r.fail(describe(c, i) + ": (a b) c = " + str(left) + " but a (b c) = " + str(right) +
               " for a = " + str(a) + ", b = " + str(b) + ", c = " + str(cc));
    }
  }
  return r;
}

// Order independence: the blocks reduced left to right, left to right in a random permutation,
// and over a random tree (random shape and operand order) all give the row's max exactly and
// a d within d_bound(longest block + depth) of the fp64 sum, hence within the sum of two
// such bounds of each other. A row of -inf only gives (-inf, 0) exactly, every way.
inline LawResult order_independence_law(Merge merge) {
  LawResult r;
  for (int i = 0; i < kLawCases; ++i) {
    const Case c = make_case(i);
    std::mt19937_64 rng(kSeed * 7 + static_cast<std::uint64_t>(i));
    const std::vector<MD> leaves = blocks_stats(c.x.data(), c.bounds);
    const int blocks = static_cast<int>(leaves.size());
    float m = -kInf;
    for (float v : c.x) m = std::fmax(m, v);
    const double d = exact_d(c.x, m);

    std::vector<int> order(static_cast<std::size_t>(blocks));
    for (int k = 0; k < blocks; ++k) order[k] = k;
    for (int k = blocks; k > 1; --k) std::swap(order[k - 1], order[rng() % k]);
    MergeTree permuted;
    int acc = permuted.add_leaf(order[0]);
    for (int k = 1; k < blocks; ++k) acc = permuted.add_merge(acc, permuted.add_leaf(order[k]));

    const MergeTree trees[] = {left_to_right_tree(blocks), permuted, random_tree(blocks, rng)};
    for (const MergeTree& tree : trees) {
      ++r.checks;
      const MD md = reduce_tree(tree, leaves, merge);
      const double bound = d_bound(c.longest_block() + tree.depth(), kHostExpErr);
      const bool ok = md.m == m && std::isfinite(md.d) &&
                      (d == 0.0 ? md.d == 0.f : std::fabs(md.d - d) <= bound * d);
      if (!ok) {
        std::ostringstream s;
        s.precision(9);
        s << describe(c, i) << ": tree " << tree.to_string() << " gives " << str(md)
          << " where the row has (" << m << ", " << d << "), bound " << bound;
        r.fail(s.str());
      }
    }
  }
  return r;
}

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

// Commutativity at the extremes: merge(a, b) and merge(b, a) are the same bits for every pair
// (but for the sign of a zero max, same_but_zero_sign), never NaN.
inline LawResult extreme_commutativity_law(Merge merge) {
  LawResult r;
  const std::vector<MD> ops = extreme_operands();
  for (const MD& a : ops) {
    for (const MD& b : ops) {
      ++r.checks;
      const MD ab = merge(a, b), ba = merge(b, a);
      if (!same_but_zero_sign(ab, ba) || std::isnan(ab.d))
        r.fail("merge(" + str(a) + ", " + str(b) + ") = " + str(ab) + " but merge(b, a) = " +
               str(ba));
    }
  }
  return r;
}

// One merge against the exact merge of its operands, for every pair: m exactly the larger max,
// d within one merge's bound, no NaN, no inf where the exact d is finite by more than the bound.
inline LawResult extreme_pair_law(Merge merge) {
  LawResult r;
  const std::vector<MD> ops = extreme_operands();
  for (const MD& a : ops) {
    for (const MD& b : ops) {
      ++r.checks;
      const MD ab = merge(a, b);
      const ExactMD exact = exact_merge({a, b});
      if (ab.m != exact.m || !d_within(ab.d, exact, merge_bound(1, double(a.d) + b.d))) {
        std::ostringstream s;
        s.precision(9);
        s << "merge(" << str(a) << ", " << str(b) << ") = " << str(ab) << " where the exact merge is ("
          << exact.m << ", " << exact.d << ")";
        r.fail(s.str());
      }
    }
  }
  return r;
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

// ------------------------------------------------------------------------------------------
// Broken merges, to show that the laws catch them
// ------------------------------------------------------------------------------------------

// Forgets to rescale d_b: right whenever b holds the larger max, wrong otherwise.
inline MD merge_without_rescaling_b(MD a, MD b) {
  const float m = std::fmax(a.m, b.m);
  const float scale_a = a.m == -kInf ? 0.f : std::exp(a.m - m);
  return {m, a.d * scale_a + b.d};
}

// Eq. (2) taken literally, without the -inf guard: e^{-inf - (-inf)} = e^{NaN}.
inline MD merge_without_inf_guard(MD a, MD b) {
  const float m = std::fmax(a.m, b.m);
  return {m, a.d * std::exp(a.m - m) + b.d * std::exp(b.m - m)};
}

// Takes any max at or below -1e30, the mask value of many attention codes, for "no max": a
// side there is returned as the identity would be. Right on every seeded row (whose maxima are
// finite and far above, or -inf), it drops the mass of statistics whose max is a real -3e38.
inline MD merge_with_mask_sentinel(MD a, MD b) {
  const MD hi = a.m >= b.m ? a : b;
  const MD lo = a.m >= b.m ? b : a;
  if (lo.m <= -1e30f) return hi;
  return {hi.m, hi.d + lo.d * std::exp(lo.m - hi.m)};
}

// ------------------------------------------------------------------------------------------
// The blocked CPU step's floor
// ------------------------------------------------------------------------------------------

// The block size of the CPU step the kernels are compared with: divides none of the shapes.
inline constexpr int kCpuBlock = 100;

// Operations on a term's path in softmax_blocked: its block's updates (at most `block`) and
// the left-to-right merges (at most one per block; the first, with the identity, is exact).
inline int blocked_steps(int cols, int block) {
  return std::min(block, cols) + (cols + block - 1) / block;
}

// The blocked step against chapter 02's, both against fp64: y_i = e^{x_i - m} (1/d) runs the
// same float operations in both, so they differ only through d: the two d bounds, plus 2 u for
// the two reciprocals' roundings.
inline double blocked_cpu_floor(int cols, int block) {
  return d_bound(blocked_steps(cols, block), kHostExpErr) + d_bound(cols, kHostExpErr) +
         2 * kFloatEps;
}

}  // namespace wb::test::block_merge
