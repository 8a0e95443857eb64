// Chapter 03's tests, the monoid laws (tests/test_03_block_merge.cpp): the error bound of
// block_merge.md's eq. (6), seeded rows cut into blocks, and the laws as property tests,
// generic over the merge so that broken merges can be shown to fail them (the same laws at the
// edges of float's range: tests/block_merge_extreme_laws.hpp).
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
