// Chapter 09: Flash-Decoding on the CPU. The merge's laws (identity, commutativity bit for bit,
// associativity), split-KV against chapter 06's FA2 per sequence under the 2x policy for every
// split count (more splits than keys included), random cuts and random merge trees, GQA group
// sizes 1, 4 and 8, per-sequence lengths (0 included), causal; a merge that forgets the rescale
// fails; the split rule; a paged cache's layout (eq. 9). The kernels:
// test_09_flash_decoding_kernels.cpp; the merge at float's edges: ..._merge_laws.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "chapters/09_flash_decoding/decode_ladder.hpp"
#include "chapters/09_flash_decoding/decode_reference.hpp"
#include "chapters/09_flash_decoding/flash_decoding.hpp"
#include "common/attention_inputs.hpp"
#include "common/reference_attention.hpp"
#include "common/rung_buffers.hpp"
#include "tests/decode_checks.hpp"
#include "tests/support.hpp"

using namespace wb;
using namespace wb::ch09;
using namespace wb::test::decode;

namespace {

/// The CPU cases: odd lengths 1, 2, 31, 1000, 4097, 65537, GQA groups 1, 4 and 8, lq up to 16,
/// a batch with lengths that vary (a 0 among them), with and without the mask.
std::vector<Case> cpu_cases() {
  std::vector<Case> cases;
  for (bool causal : {false, true}) {
    cases.push_back(make_case({1, 1, 1, 1, 1, 16}, {}, causal));
    cases.push_back(make_case({2, 4, 1, 2, 2, 16}, {}, causal));
    cases.push_back(make_case({1, 8, 1, 3, 31, 59}, {}, causal));
    cases.push_back(make_case({3, 8, 2, 5, 1000, 32}, {1000, 0, 517}, causal));
    cases.push_back(make_case({2, 2, 2, 16, 4097, 16}, {4097, 33}, causal));
    cases.push_back(make_case({1, 1, 1, 1, 65537, 8}, {}, causal));
    // A sequence shorter than lq: under the causal mask its first rows see no key at all.
    cases.push_back(make_case({2, 4, 1, 5, 31, 16}, {31, 3}, causal));
  }
  return cases;
}

/// The bound of a split step with `splits` partials merged along paths of `depth` merges on
/// `r`: the 2x policy against the previous step's error, plus split_floor.
double o_bound(double previous, const DecodeReference& r, int lk, int depth, int splits) {
  return chain_bound(previous,
                     split_floor(r.score_error, lk, r.max_abs_partial_lse, depth, splits));
}

/// A merge that forgets the rescale: the lse is merged, the O's are simply added.
Partial merge_without_rescale(const Partial& a, const Partial& b) {
  Partial out{lse_merge(a.lse, b.lse).lse, a.o};
  for (std::size_t c = 0; c < out.o.size(); ++c) out.o[c] += b.o[c];
  return out;
}

/// A merge that swaps the two weights: right when both partials carry the same lse, wrong
/// otherwise.
Partial merge_with_swapped_weights(const Partial& a, const Partial& b) {
  const LseMerge w = lse_merge(a.lse, b.lse);
  Partial out{w.lse, std::vector<float>(a.o.size())};
  for (std::size_t c = 0; c < a.o.size(); ++c) out.o[c] = w.w_b * a.o[c] + w.w_a * b.o[c];
  return out;
}

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, sizeof(float)) == 0;
}

}  // namespace

TEST_SUITE("cpu") {
  TEST_CASE("merging with the identity returns the other partial exactly and never makes NaN") {
    for (float lse : {-INFINITY, -1e4f, -3.5f, 0.f, 7.25f, 1e4f}) {
      CAPTURE(lse);
      for (const LseMerge& m : {lse_merge(lse, -INFINITY), lse_merge(-INFINITY, lse)}) {
        CHECK(same_bits(m.lse, lse));
        CHECK(m.w_a + m.w_b == 1.f);  // one weight 1, the other 0
      }
      if (lse == -INFINITY) continue;  // both empty: below
      CHECK(lse_merge(lse, -INFINITY).w_a == 1.f);
      CHECK(lse_merge(-INFINITY, lse).w_b == 1.f);
    }
    // Both empty: still the identity, weights finite.
    const LseMerge e = lse_merge(-INFINITY, -INFINITY);
    CHECK(e.lse == -INFINITY);
    CHECK(std::isfinite(e.w_a));
    CHECK(std::isfinite(e.w_b));
    const Partial p{2.5f, {0.1f, -3.f, 7.f}};
    for (const Partial& m :
         {merge_partials(p, identity_partial(3)), merge_partials(identity_partial(3), p)}) {
      CHECK(same_bits(m.lse, p.lse));
      for (int c = 0; c < 3; ++c) CHECK(same_bits(m.o[std::size_t(c)], p.o[std::size_t(c)]));
    }
    const Partial none = combine_partials({identity_partial(3), identity_partial(3)}, 3);
    CHECK(none.lse == -INFINITY);
    for (float x : none.o) CHECK(x == 0.f);
    CHECK(combine_weight(-INFINITY, -INFINITY, 0.f) == 0.f);  // a row no split saw
    CHECK(combine_weight(-INFINITY, 2.5f, 1.f) == 0.f);       // a split that saw no key
  }

  TEST_CASE("the merge is commutative bit for bit and associative within its rounding") {
    std::mt19937_64 rng(kSeed);
    std::normal_distribution<float> normal(0.f, 1.f);
    for (int trial = 0; trial < 500; ++trial) {
      // logsumexps from -20 to 20 around a common offset (up to 1e4), O's of 4 values.
      const float offset = trial % 5 == 0 ? 1e4f : 0.f;
      Partial p[3];
      for (Partial& x : p) {
        x.lse = offset + 10.f * normal(rng);
        for (int c = 0; c < 4; ++c) x.o.push_back(normal(rng));
      }
      const Partial ab = merge_partials(p[0], p[1]), ba = merge_partials(p[1], p[0]);
      CHECK(same_bits(ab.lse, ba.lse));
      for (int c = 0; c < 4; ++c) CHECK(same_bits(ab.o[std::size_t(c)], ba.o[std::size_t(c)]));
      const Partial left = merge_partials(ab, p[2]);
      const Partial right = merge_partials(p[0], merge_partials(p[1], p[2]));
      // Two merges each way: the lse rounds |lse| u per add and the weights carry that, plus
      // the exp, log1p and products: 2 x (2 |lse| + 2 x 88 + 16) u, as split_floor states.
      // A = |lse| + 1: the merged lse exceeds the larger operand by up to log 2 < 1.
      const double a = std::fabs(left.lse) + 1.0;
      const double bound = 2.0 * (2.0 * a + 2.0 * ref::kExpArgRange + 16.0) * kFloatEps;
      CHECK(std::fabs(double(left.lse) - right.lse) <= bound);
      for (int c = 0; c < 4; ++c) {
        const double size = std::fabs(p[0].o[std::size_t(c)]) + std::fabs(p[1].o[std::size_t(c)]) +
                            std::fabs(p[2].o[std::size_t(c)]);  // >= sum of the weighted terms
        CHECK(std::fabs(double(left.o[std::size_t(c)]) - right.o[std::size_t(c)]) <= bound * size);
      }
    }
  }

  TEST_CASE(
      "split-KV equals chapter 06's FA2 per sequence for every split count, random cuts and merge "
      "trees") {
    std::mt19937_64 rng(kSeed);
    for (const Case& c : cpu_cases()) {
      for (ScoreKind kind : all_score_kinds()) {
        if (c.shape.lk > 5000 && kind != ScoreKind::randn && kind != ScoreKind::large_offset)
          continue;  // the longest cache on two kinds: the suite's time
        const std::string where = describe(c, to_string(kind));
        CAPTURE(where);
        const AttentionInputs in = inputs_of(c.shape, kind, kSeed);
        const DecodeOptions opt{scale_of(c.shape, kind), c.causal};
        const DecodeReference r = decode_reference(in, c.shape, c.lengths, opt);
        const DecodeResult fa2 = attention_fa2_per_sequence(in, c.shape, c.lengths, opt);
        const ErrorReport fa2_err = ref::compare_weighted(fa2.o, r.o, r.o_weight);
        // The previous step on its own bound (chapter 06's tests hold it; here it anchors).
        WB_CHECK_WITHIN(fa2_err, ref::output_floor(r.score_error, c.shape.lk));
        for (int splits : split_counts(c.shape.lk)) {
          CAPTURE(splits);
          const ch03::MergeTree ordered = ch03::left_to_right_tree(splits);
          const ch03::MergeTree shuffled = ch03::random_tree(splits, rng);
          const SplitRule even = [&](int len) { return even_splits(len, splits); };
          const SplitRule cut = [&](int len) { return random_splits(len, splits, rng); };
          struct Variant {
            const char* name;
            const SplitRule* split;
            const ch03::MergeTree* tree;
          };
          for (const Variant& v : {Variant{"even, eq. (4)", &even, nullptr},
                                   Variant{"even, left to right", &even, &ordered},
                                   Variant{"random cuts, random tree", &cut, &shuffled}}) {
            CAPTURE(v.name);
            // Eq. (4) merges once; a tree as many times as its longest path.
            const int depth = v.tree == nullptr ? 1 : v.tree->depth();
            const DecodeResult out =
                attention_split_kv(in, c.shape, c.lengths, opt, *v.split, {v.tree});
            WB_CHECK_WITHIN(ref::compare_weighted(out.o, r.o, r.o_weight),
                            o_bound(fa2_err.max_abs, r, c.shape.lk, depth, splits));
            WB_CHECK_WITHIN(
                compare(out.lse, r.lse),
                split_lse_floor(r.score_error, c.shape.lk, r.max_abs_partial_lse, depth, splits));
            check_unseen_rows(r, c.shape, out);
          }
        }
      }
    }
  }

  TEST_CASE("a merge with its weights swapped fails the bound at 2049 splits of 65537 keys") {
    // The bound grows with the merges on a path: the tree's depth (21 here), not splits - 1.
    // On a ramp of scores (the partials' lse far apart, their O's different) the swapped
    // weights are 5.7 o_weight off, the right merge 0.001; the bound is 0.6, where counting
    // splits - 1 merges per path would have allowed 16.
    const Case c = make_case({1, 1, 1, 1, 65537, 8}, {}, false);
    const AttentionInputs in = inputs_of(c.shape, ScoreKind::arange, kSeed);
    const DecodeOptions opt{scale_of(c.shape, ScoreKind::arange), false};
    const DecodeReference r = decode_reference(in, c.shape, c.lengths, opt);
    std::mt19937_64 rng(kSeed);
    const int splits = 2049;
    const ch03::MergeTree tree = ch03::random_tree(splits, rng);
    CAPTURE(tree.depth());
    const SplitRule split = [&](int len) { return even_splits(len, splits); };
    const DecodeResult right = attention_split_kv(in, c.shape, c.lengths, opt, split, {&tree});
    const DecodeResult wrong =
        attention_split_kv(in, c.shape, c.lengths, opt, split, {&tree, merge_with_swapped_weights});
    const double bound = o_bound(0.0, r, c.shape.lk, tree.depth(), splits);
    CHECK(ref::compare_weighted(right.o, r.o, r.o_weight).within(bound));
    CHECK_FALSE(ref::compare_weighted(wrong.o, r.o, r.o_weight).within(bound));
  }

  TEST_CASE("a merge that forgets the rescale fails the bound") {
    const Case c = make_case({1, 4, 1, 2, 300, 32}, {}, false);
    const AttentionInputs in = inputs_of(c.shape, ScoreKind::randn, kSeed);
    const DecodeOptions opt{scale_of(c.shape, ScoreKind::randn), false};
    const DecodeReference r = decode_reference(in, c.shape, c.lengths, opt);
    const ch03::MergeTree tree = ch03::left_to_right_tree(4);
    const SplitRule split = [](int len) { return even_splits(len, 4); };
    const DecodeResult right = attention_split_kv(in, c.shape, c.lengths, opt, split, {&tree});
    const DecodeResult wrong =
        attention_split_kv(in, c.shape, c.lengths, opt, split, {&tree, merge_without_rescale});
    const double bound = o_bound(0.0, r, c.shape.lk, 3, 4);  // a left-to-right tree of 4
    CHECK(ref::compare_weighted(right.o, r.o, r.o_weight).within(bound));
    CHECK_FALSE(ref::compare_weighted(wrong.o, r.o, r.o_weight).within(bound));
  }

  TEST_CASE("the kernels' split covers the keys in runs of whole tiles") {
    for (int len : {0, 1, 31, 32, 33, 1000, 4097}) {
      for (int splits : {1, 2, 3, 7, 40, 200}) {
        CAPTURE(len);
        CAPTURE(splits);
        const std::vector<int> b = even_splits(len, splits);
        REQUIRE(b.size() == std::size_t(splits) + 1);
        CHECK(b.front() == 0);
        CHECK(b.back() == len);
        for (std::size_t s = 0; s + 1 < b.size(); ++s) {
          CHECK(b[s] <= b[s + 1]);
          CHECK((b[s] % kTileKeys == 0 || b[s] == len));  // every range starts on a tile
        }
      }
    }
  }

  TEST_CASE("a block loads exactly the tiles of its split that hold a key one of its rows sees") {
    // Brute force over every key of the split: the tiles with a key some row of the block sees
    // (eq. (6), row r is query i = r % lq) must be loaded; past the last of them nothing is.
    for (int lq : {1, 3, 16, 40})
      for (int len : {0, 1, 5, 31, 33, 100, 257})
        for (int splits : {1, 2, 3, 9})
          for (int r0 = 0; r0 < 3 * lq; r0 += kBlockRows)
            for (int s = 0; s < splits; ++s) {
              const int rows = std::min(kBlockRows, 3 * lq - r0);  // 3 heads in the group
              const std::vector<int> b = even_splits(len, splits);
              int last_seen = -1;
              for (int j = b[std::size_t(s)]; j < b[std::size_t(s) + 1]; ++j)
                for (int r = r0; r < r0 + rows; ++r)
                  if (ch04::causal_visible(r % lq, j, lq, len)) last_seen = std::max(last_seen, j);
              const KeyRange k = block_keys(len, splits, s, r0, rows, lq, /*causal=*/true);
              CAPTURE(lq);
              CAPTURE(len);
              CAPTURE(splits);
              CAPTURE(r0);
              CAPTURE(s);
              CHECK(k.j0 == b[std::size_t(s)]);
              if (last_seen < 0) {
                CHECK(k.j1 == k.j0);  // no visible key: nothing loaded
              } else {
                CHECK(k.j1 > last_seen);               // every visible key loaded
                CHECK(k.j1 <= b[std::size_t(s) + 1]);  // never past the split
                const bool whole_tiles = (k.j1 - k.j0) % kTileKeys == 0;
                CHECK((whole_tiles || k.j1 == b[std::size_t(s) + 1]));  // or the split's end
                CHECK(k.j1 - kTileKeys <= last_seen);  // no tile without one loaded
              }
              const KeyRange all = block_keys(len, splits, s, r0, rows, lq, /*causal=*/false);
              CHECK(all.j1 == b[std::size_t(s) + 1]);
            }
  }

  TEST_CASE("the split count fills one wave and leaves every split at least four tiles") {
    // An H100 at 5 blocks per SM: 660 blocks at once.
    CHECK(choose_splits(132, 5, 32, 32768) == 20);   // 32 heads, 1 row: floor(660 / 32)
    CHECK(choose_splits(132, 5, 32, 4096) == 20);    // 128 tiles: 32 splits would be allowed
    CHECK(choose_splits(132, 5, 32, 1000) == 8);     // 32 tiles: at most 8 splits of 4
    CHECK(choose_splits(132, 5, 8, 32768) == 82);    // GQA 8, 4 rows: 8 blocks per split
    CHECK(choose_splits(132, 5, 660, 32768) == 1);   // a full wave already
    CHECK(choose_splits(132, 5, 5000, 32768) == 1);  // several waves: never fewer than 1
    CHECK(choose_splits(132, 5, 1, 1) == 1);         // one key
    // 8 x 4 = 32 group rows: 2 tiles of the split kernel's 16 rows, 8 of stream_kv's 4
    CHECK(base_blocks({2, 32, 4, 4, 100, 64}, kBlockRows) == 2 * 4 * 2);
    CHECK(base_blocks({2, 32, 4, 4, 100, 64}) == 2 * 4 * 8);
    CHECK(base_blocks({1, 32, 32, 1, 100, 64}) == 32);  // one row per block, 1 x 32 KV heads
    CHECK(base_blocks({1, 12, 4, 1, 100, 64}) == 4);    // 3 rows: one block of 4 rows per head
  }

  TEST_CASE("stream_kv's rows per block and lanes per key") {
    CHECK(stream_rows(1) == 1);
    CHECK(stream_rows(3) == 4);
    CHECK(stream_rows(100) == kStreamMaxRows);
    CHECK(stream_key_lanes(128, 8) == 8);   // fp16 d = 128: a 256-byte row, 32 bytes a lane
    CHECK(stream_key_lanes(128, 4) == 16);  // fp32 d = 128: half the warp
    CHECK(stream_key_lanes(24, 8) == 2);    // 3 vectors over 2 lanes, one of them empty
    CHECK(stream_key_lanes(8, 8) == 1);     // one vector, the second empty
  }

  TEST_CASE("a paged cache holds every key once and gives the contiguous cache back") {
    // lk 100 in pages of 32: 4 per sequence, the last holding 4 keys and 28 empty slots.
    const DecodeShape shape{3, 4, 2, 1, 100, 8};
    const AttentionInputs in = inputs_of(shape, ScoreKind::randn, kSeed);
    const PagedCache paged = page_cache(in, shape, 32, /*spare=*/5, kSeed);
    CHECK(paged.pages == 3 * 4 + 5);
    REQUIRE(paged.table.size() == 3 * 4);
    std::vector<int> sorted = paged.table;  // a page belongs to one sequence
    std::sort(sorted.begin(), sorted.end());
    CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());
    CHECK(sorted.front() >= 0);
    CHECK(sorted.back() < paged.pages);
    // Every key lands where eq. (9) says, and the round trip is exact.
    const AttentionInputs back = unpage_cache(in, paged, shape);
    CHECK(back.k == in.k);
    CHECK(back.v == in.v);
    // The slots no key fills: every element of the pool but the keys' is NaN.
    const std::size_t keys = std::size_t(shape.batch) * shape.hkv * shape.lk * shape.d;
    const auto nans =
        std::count_if(paged.k.begin(), paged.k.end(), [](float x) { return std::isnan(x); });
    CHECK(std::size_t(nans) == paged.k.size() - keys);
    // Key 37 of KV head 1 of sequence 2: page table[2][1], slot 5.
    const CacheRows rows{paged.table.data(), 32, 4, shape.hkv, shape.lk, shape.d};
    const std::size_t at = rows(2, 1, 37);
    CHECK(at == ((std::size_t(paged.table[2 * 4 + 1]) * 2 + 1) * 32 + 5) * shape.d);
    CHECK(paged.k[at] == in.k[((std::size_t(2) * 2 + 1) * 100 + 37) * shape.d]);
  }
}
