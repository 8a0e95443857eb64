// Chapter 03: the block-associative (m, d) merge on the CPU. The monoid laws as property tests
// over many seeded cases (tests/block_merge_laws.hpp: generic over the merge, so that broken
// merges can be shown to fail them) and at the edges of float's range
// (tests/block_merge_extreme_laws.hpp), the blocked CPU step against chapter 02's, and the
// merge trees. The kernels' tests: test_03_block_merge_kernels.cpp.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "chapters/02_online_softmax/online_softmax.hpp"
#include "chapters/03_block_merge/block_merge.hpp"
#include "chapters/03_block_merge/md_merge.hpp"
#include "common/compare.hpp"
#include "common/inputs.hpp"
#include "common/reference.hpp"
#include "tests/block_merge_extreme_laws.hpp"
#include "tests/block_merge_laws.hpp"
#include "tests/softmax_checks.hpp"
#include "tests/support.hpp"

using namespace wb;
using namespace wb::ch03;
using namespace wb::test::block_merge;

namespace {

const std::vector<test::RowShape>& kShapes = test::kSoftmaxShapes;

}  // namespace

TEST_SUITE("cpu") {
  TEST_CASE("merging with the identity returns the other operand bit for bit") {
    const LawResult r = identity_law(md_merge);
    CHECK(r.checks > kLawCases);
    CHECK_MESSAGE(r.violations == 0, r.first);
    // The identity with itself, and an all -inf block (the identity's own statistics).
    CHECK(same(md_merge(md_identity(), md_identity()), md_identity()));
    const float all_inf[] = {-kInf, -kInf, -kInf};
    CHECK(same(block_stats(all_inf, 3), md_identity()));
  }

  TEST_CASE("the merge is commutative bit for bit") {
    const LawResult r = commutativity_law(md_merge);
    CHECK(r.checks > kLawCases);
    CHECK_MESSAGE(r.violations == 0, r.first);
  }

  TEST_CASE("the merge is associative with m exact and d within the derived bound") {
    const LawResult r = associativity_law(md_merge);
    CHECK(r.checks > kLawCases);
    CHECK_MESSAGE(r.violations == 0, r.first);
  }

  TEST_CASE("any split any permutation and any merge tree give the same statistics") {
    const LawResult r = order_independence_law(md_merge);
    CHECK(r.checks == 3 * kLawCases);
    CHECK_MESSAGE(r.violations == 0, r.first);
  }

  TEST_CASE("a merge that forgets to rescale d_b fails the laws") {
    // The identity law cannot see this bug (with e on either side there is nothing to
    // rescale); commutativity, associativity and order independence each catch it.
    CHECK(identity_law(merge_without_rescaling_b).violations == 0);
    CHECK(commutativity_law(merge_without_rescaling_b).violations > 0);
    CHECK(associativity_law(merge_without_rescaling_b).violations > 0);
    CHECK(order_independence_law(merge_without_rescaling_b).violations > 0);
  }

  TEST_CASE("a merge without the minus infinity guard fails the identity law with NaN") {
    const LawResult r = identity_law(merge_without_inf_guard);
    CHECK(r.violations > 0);
    CHECK(std::isnan(merge_without_inf_guard(md_identity(), md_identity()).d));
    CHECK(order_independence_law(merge_without_inf_guard).violations > 0);
  }

  TEST_CASE("at the edges of float's range the identity returns the other operand bit for bit") {
    // Maxima at +-FLT_MAX, +-3e38, +-1e30, -0, exp's edges; d subnormal to FLT_MAX; and the
    // identity with itself (tests/block_merge_laws.hpp, extreme_operands).
    const LawResult r = extreme_identity_law(md_merge);
    CHECK(r.checks == static_cast<int>(extreme_operands().size()));
    CHECK_MESSAGE(r.violations == 0, r.first);
    CHECK(same_bits(md_merge(md_identity(), md_identity()), md_identity()));
  }

  TEST_CASE("at the edges of float's range the merge is commutative and within one merge's bound") {
    const int n = static_cast<int>(extreme_operands().size());
    const LawResult commutes = extreme_commutativity_law(md_merge);
    CHECK(commutes.checks == n * n);
    CHECK_MESSAGE(commutes.violations == 0, commutes.first);
    const LawResult pairs = extreme_pair_law(md_merge);
    CHECK(pairs.checks == n * n);
    CHECK_MESSAGE(pairs.violations == 0, pairs.first);
    // Where the exact d is past FLT_MAX the merge gives inf, never NaN; opposite edges give the
    // larger max's side exactly (e^{-3e38 - 3e38}: an exponent of -inf, a factor of 0).
    const MD huge = md_merge({3e38f, kFloatMax}, {3e38f, kFloatMax});
    CHECK(huge.m == 3e38f);
    CHECK(huge.d == kInf);
    CHECK(same_bits(md_merge({3e38f, 2.f}, {-3e38f, kFloatMax}), MD{3e38f, 2.f}));
    CHECK(same_bits(md_merge({-kFloatMax, 1.f}, {-kFloatMax, 1.f}), MD{-kFloatMax, 2.f}));
  }

  TEST_CASE("at the edges of float's range the merge is associative within two merges' bound") {
    const LawResult r = extreme_associativity_law(md_merge);
    // Most of the 55^3 triples: those with no inner merge past FLT_MAX.
    const int n = static_cast<int>(extreme_triple_operands().size());
    CHECK(r.checks > n * n * n / 2);
    CHECK_MESSAGE(r.violations == 0, r.first);
  }

  TEST_CASE("a merge that takes a max at or below -1e30 for the identity fails at the edges") {
    // The seeded rows' maxima are finite and far above -1e30, or -inf: the laws on them pass
    // this merge; statistics with a real max of -3e38 lose their mass.
    CHECK(identity_law(merge_with_mask_sentinel).violations == 0);
    CHECK(associativity_law(merge_with_mask_sentinel).violations == 0);
    CHECK(order_independence_law(merge_with_mask_sentinel).violations == 0);
    CHECK(extreme_pair_law(merge_with_mask_sentinel).violations > 0);
    CHECK(extreme_associativity_law(merge_with_mask_sentinel).violations > 0);
    // And eq. (2) without the guard makes NaN at the identity, at the edges as anywhere.
    CHECK(extreme_identity_law(merge_without_inf_guard).violations > 0);
  }

  TEST_CASE("a block is exactly chapter 02's recurrence from the identity") {
    // One block of the whole row is chapter 02's online_stats, bit for bit: same operations.
    test::for_every_input_kind(1, 333, kSeed, [](const std::vector<float>& x) {
      CHECK(same(block_stats(x.data(), 333), ch02::online_stats(x.data(), 333)));
      CHECK(same(reduce_tree(left_to_right_tree(1), blocks_stats(x.data(), {0, 333})),
                 ch02::online_stats(x.data(), 333)));
    });
    CHECK(same(block_stats(nullptr, 0), md_identity()));       // an empty block
    CHECK(same(reduce_tree(MergeTree{}, {}), md_identity()));  // no blocks at all
  }

  TEST_CASE("blocked online softmax is within twice the online softmax error for any block size") {
    for (const test::RowShape& s : kShapes) {
      CAPTURE(s.rows);
      CAPTURE(s.cols);
      test::for_every_input_kind(s.rows, s.cols, kSeed, [&](const std::vector<float>& x) {
        const std::vector<double> ref = ref::softmax(x, s.rows, s.cols);
        const ErrorReport previous = compare(ch02::softmax_online(x, s.rows, s.cols), ref);
        for (int block : {1, 2, 7, 31, 32, 33, kCpuBlock, s.cols, s.cols + 5}) {
          CAPTURE(block);
          const ErrorReport blocked = compare(softmax_blocked(x, s.rows, s.cols, block), ref);
          // The tolerance policy: twice chapter 02's error, plus the floor derived above.
          WB_CHECK_WITHIN_REL(blocked,
                              chain_bound(previous.max_rel, blocked_cpu_floor(s.cols, block)));
        }
      });
    }
  }

  TEST_CASE("blocked online softmax with one block is chapter 02 bit for bit") {
    const int rows = 17, cols = 257;
    test::for_every_input_kind(rows, cols, kSeed, [&](const std::vector<float>& x) {
      CHECK(softmax_blocked(x, rows, cols, cols) == ch02::softmax_online(x, rows, cols));
    });
  }

  TEST_CASE("the merge trees cover every block once and know their longest path") {
    std::mt19937_64 rng(kSeed);
    for (int blocks : {1, 2, 3, 8, 37}) {
      CAPTURE(blocks);
      for (const MergeTree& tree : {left_to_right_tree(blocks), random_tree(blocks, rng)}) {
        std::vector<int> seen(static_cast<std::size_t>(blocks), 0);
        int merges = 0;
        for (const MergeTree::Node& n : tree.nodes) {
          if (n.block >= 0)
            ++seen[static_cast<std::size_t>(n.block)];
          else
            ++merges;
        }
        CHECK(merges == blocks - 1);
        for (int v : seen) CHECK(v == 1);
        // Its longest path: between a balanced tree's, ceil(log2 blocks), and a chain's.
        int balanced_depth = 0;
        while ((1 << balanced_depth) < blocks) ++balanced_depth;
        CHECK(tree.depth() >= balanced_depth);
        CHECK(tree.depth() <= std::max(0, blocks - 1));
      }
      CHECK(left_to_right_tree(blocks).depth() == blocks - 1);
    }
    MergeTree balanced;  // ((0 1) (2 3))
    const int left = balanced.add_merge(balanced.add_leaf(0), balanced.add_leaf(1));
    balanced.add_merge(left, balanced.add_merge(balanced.add_leaf(2), balanced.add_leaf(3)));
    CHECK(balanced.depth() == 2);
  }

}
