// Chapter 12: ring attention on the CPU, P ranks in one process. The split's laws (eq. 1-2), the
// mask between two pieces against the positions themselves (eq. 3), the ring against chapter
// 06 on the whole sequence for 1 to 8 ranks, every layout, both masks, lengths not divisible by
// P, every kind of adversarial input and any order of arrival (eq. 7's bound); the causal load
// of each layout counted; the backward against chapter 10 with dK and dV home at their owner
// (eq. 8's bound). The merge kernel (ring_merge.cuh) against the CPU's merge, bit for bit on the
// simulator, and its traffic.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "chapters/06_fa2_rescaled/fa2.hpp"
#include "chapters/10_fa2_backward/fa2_backward.hpp"
#include "chapters/12_ring_attention/ring_attention.hpp"
#include "chapters/12_ring_attention/ring_floors.hpp"
#include "common/attention_inputs.hpp"
#include "common/buffer.hpp"
#include "common/inputs.hpp"
#include "common/reference_attention.hpp"
#include "common/reference_attention_backward.hpp"
#include "tests/attention_shapes.hpp"
#include "tests/support.hpp"
#include "tests/traffic_checks.hpp"

using namespace wb;
using namespace wb::ch12;

namespace {

constexpr std::uint64_t kSeed = 1212;

/// Lengths below, at and above the rank counts, primes, none a multiple of 2P for P > 2.
const std::vector<int> kLengths = {1, 2, 5, 37, 101};

std::string describe(const RingSpec& s) {
  return std::to_string(s.ranks) + " ranks, " + to_string(s.layout) + ", " +
         std::to_string(s.length) + " positions, bh " + std::to_string(s.bh) + ", d " +
         std::to_string(s.d) + (s.causal ? ", causal" : "");
}

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, sizeof(float)) == 0;
}

bool has_nan(const std::vector<float>& x) {
  return std::any_of(x.begin(), x.end(), [](float v) { return std::isnan(v); });
}

/// What the mask of eq. (3) says query row i of piece q sees of key row j of piece kv.
bool mask_sees(const BlockMask& m, int rows, int i, int j) {
  switch (m.kind) {
    case BlockMask::full: return j < m.keys;
    case BlockMask::causal: return j < m.keys && j <= i + m.keys - rows;  // chapter 06's eq. (6)
    case BlockMask::none: return false;
  }
  return false;
}

/// The ring's forward against chapter 06 on the whole sequence, both against fp64: O within
/// eq. (7)'s chain bound, the logsumexp within its floor, no NaN, every shard's rows in place.
void check_ring_forward(const AttentionInputs& in, const RingSpec& s,
                        const std::vector<std::vector<int>>& arrival) {
  const ch09::DecodeReference r = ring_reference(in, s);
  const ch06::Fa2Result fa2 = ch06::attention_fa2(
      in, {s.bh, s.length, s.length, s.d}, {s.scale, s.causal, s.br, s.bc});
  const ErrorReport fa2_err = ref::compare_weighted(fa2.o, r.o, r.o_weight);
  const RingForward f = ring_forward(shard_inputs(in, s), s, arrival);
  const std::vector<float> o = unshard(f.o, s, s.d), lse = unshard(f.lse, s, 1);
  CHECK_FALSE(has_nan(o));
  CHECK_FALSE(has_nan(lse));
  const RingFloors floors = ring_floors(r, s);
  WB_CHECK_WITHIN(ref::compare_weighted(o, r.o, r.o_weight), chain_bound(fa2_err.max_abs, floors.o));
  WB_CHECK_WITHIN(compare(lse, r.lse), floors.lse);
}

}  // namespace

TEST_SUITE("cpu") {
  TEST_CASE("the chunks of eq. (1) cover the sequence in order, their lengths one apart at most") {
    for (int length : {0, 1, 7, 64, 101})
      for (int parts = 1; parts <= 16; ++parts) {
        CAPTURE(length);
        CAPTURE(parts);
        CHECK(chunk_begin(length, parts, 0) == 0);
        CHECK(chunk_begin(length, parts, parts) == length);
        int lo = length, hi = 0;
        for (int c = 0; c < parts; ++c) {
          lo = std::min(lo, chunk_length(length, parts, c));
          hi = std::max(hi, chunk_length(length, parts, c));
          if (c > 0) CHECK(chunk_length(length, parts, c) <= chunk_length(length, parts, c - 1));
        }
        CHECK(hi - lo <= 1);
      }
  }

  TEST_CASE("every layout deals each position to exactly one rank, in order within a piece") {
    for (Layout layout : all_layouts())
      for (int ranks = 1; ranks <= 8; ++ranks)
        for (int length : kLengths) {
          CAPTURE(to_string(layout));
          CAPTURE(ranks);
          CAPTURE(length);
          std::vector<int> owner(std::size_t(length), -1);
          for (int r = 0; r < ranks; ++r)
            for (int p : shard_positions(length, ranks, r, layout)) {
              REQUIRE(p >= 0);
              REQUIRE(p < length);
              CHECK(owner[std::size_t(p)] == -1);
              owner[std::size_t(p)] = r;
            }
          CHECK(std::count(owner.begin(), owner.end(), -1) == 0);
          // The shards' lengths: one apart (contiguous, striped), two (zigzag's two chunks).
          std::vector<int> n;
          for (int r = 0; r < ranks; ++r)
            n.push_back(int(shard_positions(length, ranks, r, layout).size()));
          const auto [lo, hi] = std::minmax_element(n.begin(), n.end());
          CHECK(*hi - *lo <= (layout == Layout::zigzag ? 2 : 1));
        }
  }

  TEST_CASE("the mask between two pieces, eq. (3), is the causal mask of their positions") {
    for (Layout layout : all_layouts())
      for (int ranks = 1; ranks <= 8; ++ranks)
        for (int length : kLengths)
          for (int r = 0; r < ranks; ++r)
            for (int src = 0; src < ranks; ++src) {
              const std::vector<Piece> qp = shard_pieces(length, ranks, r, layout);
              const std::vector<Piece> kp = shard_pieces(length, ranks, src, layout);
              for (const Piece& q : qp)
                for (const Piece& kv : kp)
                  for (bool causal : {false, true}) {
                    CAPTURE(to_string(layout));
                    CAPTURE(ranks);
                    CAPTURE(length);
                    CAPTURE(r);
                    CAPTURE(src);
                    const BlockMask m = block_mask(q, kv, causal);
                    REQUIRE(m.keys <= kv.count);
                    for (int i = 0; i < q.count; ++i)
                      for (int j = 0; j < kv.count; ++j)
                        CHECK(mask_sees(m, q.count, i, j) ==
                              sees(q.begin + i * q.stride, kv.begin + j * kv.stride, causal));
                  }
            }
  }

  TEST_CASE("the ring equals chapter 06 on the whole sequence: 1 to 8 ranks, every layout and mask") {
    // Every kind of adversarial input: scores of unit variance, outliers x20, an offset of 1e4
    // (a logsumexp far from 0), all scores equal (O cancels), a ramp onto the last keys.
    for (ScoreKind kind : all_score_kinds())
      for (int length : kLengths)
        for (bool causal : {false, true}) {
          const AttentionShape whole{2, length, length, 16};
          const float scale = test::drawn_scale(whole, kind);
          const AttentionInputs in = make_attention_inputs(kind, whole, scale, kSeed);
          for (Layout layout : all_layouts())
            for (int ranks = 1; ranks <= 8; ++ranks) {
              const RingSpec s{whole.bh, length, whole.d, ranks, layout, scale, causal};
              const std::string where = describe(s) + ", " + to_string(kind);
              CAPTURE(where);
              check_ring_forward(in, s, {});
            }
        }
  }

  TEST_CASE("the ring's result does not depend on the order in which the K/V blocks arrive") {
    std::mt19937_64 rng(kSeed);
    for (int ranks : {2, 3, 5, 8})
      for (Layout layout : all_layouts())
        for (bool causal : {false, true}) {
          const AttentionShape whole{2, 37, 37, 16};
          const float scale = test::drawn_scale(whole, ScoreKind::outliers);
          const AttentionInputs in = make_attention_inputs(ScoreKind::outliers, whole, scale, kSeed);
          const RingSpec s{whole.bh, whole.lq, whole.d, ranks, layout, scale, causal};
          for (int trial = 0; trial < 3; ++trial) {
            std::vector<std::vector<int>> arrival = ring_order(ranks);
            for (std::vector<int>& order : arrival) std::shuffle(order.begin(), order.end(), rng);
            const std::string where = describe(s) + ", shuffled arrival " + std::to_string(trial);
            CAPTURE(where);
            check_ring_forward(in, s, arrival);
          }
        }
  }

  TEST_CASE("a block no query of a piece sees merges as the identity: bits kept, no NaN") {
    // The striped layout's blocks from a later rank hide every key from a piece's first row
    // (eq. 3, delta = -1), and with 1 position on 8 ranks most shards are empty.
    const std::vector<float> o = {0.25f, -3.f, 7.5f}, o_blk = {0.f, 0.f, 0.f};
    for (float lse0 : {-INFINITY, -1e4f, 0.5f, 1e4f}) {
      std::vector<float> o_run = o;
      float lse = lse0;
      const float lse_blk = -INFINITY;
      merge_step(o_run.data(), &lse, o_blk.data(), &lse_blk, 1, 3);
      CHECK(same_bits(lse, lse0));
      for (int c = 0; c < 3; ++c) CHECK(same_bits(o_run[std::size_t(c)], o[std::size_t(c)]));
    }
    const AttentionShape whole{1, 9, 9, 8};
    const AttentionInputs in = make_attention_inputs(ScoreKind::randn, whole, 0.5f, kSeed);
    const RingSpec s{1, 9, 8, 4, Layout::striped, 0.5f, true};
    const RingForward f = ring_forward(shard_inputs(in, s), s);
    int hidden_rows = 0;  // blocks whose first row sees no key: causal, keys = rows - 1
    for (const BlockRecord& b : f.blocks)
      hidden_rows += b.mask.kind == BlockMask::causal && b.source > b.rank;
    CHECK(hidden_rows > 0);
    for (const std::vector<float>& o_r : f.o) CHECK_FALSE(has_nan(o_r));
  }

  TEST_CASE("zigzag gives every rank the same causal work at every step; contiguous does not") {
    // Chunks of 64 positions: whole tiles of chapter 06's 16 x 32, so equal work is equal tiles.
    for (int ranks = 2; ranks <= 8; ++ranks) {
      CAPTURE(ranks);
      const int length = 2 * ranks * 64;
      const AttentionShape whole{1, length, length, 4};
      const AttentionInputs in = make_attention_inputs(ScoreKind::randn, whole, 1.f, kSeed);
      std::vector<RankLoad> load;
      for (Layout layout : all_layouts()) {
        const RingSpec s{1, length, 4, ranks, layout, 1.f, true};
        const RingForward f = ring_forward(shard_inputs(in, s), s);
        load.push_back(rank_load(f.blocks, ranks));
        // Every pair is computed once: the ranks' pairs add up to the causal triangle.
        long pairs = 0;
        for (long p : load.back().pairs) pairs += p;
        CHECK(pairs == long(length) * (length + 1) / 2);
        if (layout == Layout::zigzag) {
          // Every step after the first: two full 64 x 64 chunk pairs on every rank.
          for (const BlockRecord& b : f.blocks)
            if (b.step > 0 && b.mask.kind != BlockMask::none) CHECK(b.mask.kind == BlockMask::full);
          std::vector<long> step_pairs(std::size_t(ranks * ranks), 0);
          for (const BlockRecord& b : f.blocks) step_pairs[std::size_t(b.step * ranks + b.rank)] += b.pairs;
          for (int t = 1; t < ranks; ++t)
            for (int r = 0; r < ranks; ++r)
              CHECK(step_pairs[std::size_t(t * ranks + r)] == 2L * 64 * 64);
        }
      }
      const RankLoad& contiguous = load[0];
      const RankLoad& zigzag = load[1];
      const RankLoad& striped = load[2];
      for (int r = 1; r < ranks; ++r) {
        CHECK(zigzag.tiles[std::size_t(r)] == zigzag.tiles[0]);
        CHECK(zigzag.pairs[std::size_t(r)] == zigzag.pairs[0]);
      }
      // Contiguous: rank r computes r full chunk pairs and a diagonal, rank 0 the diagonal
      // only: the last rank does 2P - 1 times rank 0's pairs, up to the diagonal's half row.
      const auto [c_lo, c_hi] = std::minmax_element(contiguous.tiles.begin(), contiguous.tiles.end());
      CHECK(double(*c_hi) / double(*c_lo) >= double(ranks));
      // Striped: rank r's n = length / P rows see P n (n - 1) / 2 + n (r + 1) keys: balanced up
      // to n (P - 1) pairs.
      const long n = length / ranks;
      for (int r = 0; r < ranks; ++r)
        CHECK(striped.pairs[std::size_t(r)] == long(ranks) * n * (n - 1) / 2 + n * (r + 1));
    }
  }

  TEST_CASE("the backward ring equals chapter 10 on the whole sequence; dK, dV come home") {
    for (ScoreKind kind : {ScoreKind::randn, ScoreKind::outliers, ScoreKind::large_offset})
      for (int length : {5, 37})
        for (bool causal : {false, true}) {
          const AttentionShape whole{2, length, length, 16};
          const float scale = test::drawn_scale(whole, kind);
          const AttentionInputs in = make_attention_inputs(kind, whole, scale, kSeed);
          const std::vector<float> d_o = randn(whole.q_elems(), kSeed + 1);
          const ref::AttentionGrads g = ref::attention_backward(in, d_o, whole, scale, causal);
          // Chapter 10's tiled backward on chapter 06's forward: the previous step.
          const ch06::Fa2Result fa2 =
              ch06::attention_fa2(in, whole, {scale, causal, ch06::kKernelRows, ch06::kKernelKeys});
          const ch10::BackwardResult tiled = ch10::attention_backward_fa2(
              in, fa2.o, fa2.lse, d_o, whole, {scale, causal, ch06::kKernelRows, ch06::kKernelKeys});
          for (Layout layout : all_layouts())
            for (int ranks : {1, 2, 3, 5, 8}) {
              const RingSpec s{whole.bh, length, whole.d, ranks, layout, scale, causal};
              const std::string where = describe(s) + ", " + to_string(kind);
              CAPTURE(where);
              const std::vector<AttentionInputs> shards = shard_inputs(in, s);
              const RingForward f = ring_forward(shards, s);
              const RingBackward b = ring_backward(shards, f.o, f.lse, shard(d_o, s, s.d), s);
              // Each block's accumulators visit every rank once in ring order, then arrive home.
              for (int blk = 0; blk < ranks; ++blk) {
                const std::vector<int>& path = b.path[std::size_t(blk)];
                REQUIRE(path.size() == std::size_t(ranks) + 1);
                for (std::size_t i = 0; i < path.size(); ++i)
                  CHECK(path[i] == (blk + int(i)) % ranks);
              }
              const ref::BackwardFloors floors =
                  ring_backward_floors(g, ring_floors(ring_reference(in, s), s), s);
              const auto check = [&](const std::vector<float>& previous,
                                     const std::vector<std::vector<float>>& ring,
                                     const std::vector<double>& exact, const std::vector<double>& weight,
                                     double floor) {
                const std::vector<float> whole_ring = unshard(ring, s, s.d);
                CHECK_FALSE(has_nan(whole_ring));
                WB_CHECK_WITHIN(ref::compare_weighted(whole_ring, exact, weight),
                                chain_bound(ref::compare_weighted(previous, exact, weight).max_abs, floor));
              };
              check(tiled.grads.dq, b.dq, g.dq, g.dq_weight, floors.dq);
              check(tiled.grads.dk, b.dk, g.dk, g.dk_weight, floors.dk);
              check(tiled.grads.dv, b.dv, g.dv, g.dv_weight, floors.dv);
            }
        }
  }

  TEST_CASE("the bound catches a ring whose shards are put back by the wrong layout") {
    // The check above would pass anything if its bound were loose: a result unsharded as
    // contiguous where it was zigzag (rows in the wrong places) must fail it.
    const AttentionShape whole{1, 37, 37, 16};
    const AttentionInputs in = make_attention_inputs(ScoreKind::randn, whole, 0.25f, kSeed);
    const RingSpec s{1, 37, 16, 3, Layout::zigzag, 0.25f, true};
    const ch09::DecodeReference r = ring_reference(in, s);
    const RingForward f = ring_forward(shard_inputs(in, s), s);
    RingSpec wrong = s;
    wrong.layout = Layout::contiguous;
    const std::vector<float> o = unshard(f.o, wrong, s.d);
    CHECK_FALSE(ref::compare_weighted(o, r.o, r.o_weight).within(ring_floors(r, s).o));
  }

  TEST_CASE("a ring of no ranks or of more than kMaxRanks is refused") {
    const AttentionInputs in = make_attention_inputs(ScoreKind::randn, {1, 4, 4, 2}, 1.f, kSeed);
    for (int ranks : {0, -1, kMaxRanks + 1}) {
      const RingSpec s{1, 4, 2, ranks, Layout::contiguous, 1.f, false};
      CHECK_THROWS_AS(ring_forward({}, s), std::invalid_argument);
    }
  }
}

namespace {

/// Rows of running and block partials: lse drawn around an offset, some -inf on either side or
/// both (a row no block reached yet, a block the row does not see), O's of randn.
struct MergeCase {
  std::vector<float> o, lse, o_blk, lse_blk;
};

MergeCase merge_case(int rows, int d, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  MergeCase c{randn(std::size_t(rows) * d, seed), {}, randn(std::size_t(rows) * d, seed + 1), {}};
  for (int i = 0; i < rows; ++i) {
    const float offset = i % 3 == 0 ? 1e4f : 0.f;
    c.lse.push_back(i % 5 == 1 ? -INFINITY : offset + 10.f * normal(rng));
    c.lse_blk.push_back(i % 7 == 2 || (i % 5 == 1 && i % 2 == 0) ? -INFINITY
                                                                : offset + 10.f * normal(rng));
  }
  for (int i = 0; i < rows; ++i)  // a row at the identity holds O = 0
    if (c.lse[std::size_t(i)] == -INFINITY)
      std::fill_n(c.o.begin() + std::ptrdiff_t(i) * d, d, 0.f);
  return c;
}

template <Backend B>
void merge_kernel_equals_cpu() {
  for (int rows : {1, 3, 4, 5, 37})
    for (int d : {1, 31, 32, 33, 100}) {
      CAPTURE(rows);
      CAPTURE(d);
      const MergeCase c = merge_case(rows, d, kSeed + std::uint64_t(rows * 1000 + d));
      std::vector<float> o_cpu = c.o, lse_cpu = c.lse;
      merge_step(o_cpu.data(), lse_cpu.data(), c.o_blk.data(), c.lse_blk.data(), rows, d);
      std::vector<float> o_dev = c.o, lse_dev = c.lse;
      merge_on(B, o_dev, lse_dev, c.o_blk, c.lse_blk, d);
      for (int i = 0; i < rows; ++i) {
        CAPTURE(i);
        const float a = std::max(std::fabs(c.lse[std::size_t(i)]), std::fabs(c.lse_blk[std::size_t(i)]));
        if (B == Backend::sim || c.lse[std::size_t(i)] == -INFINITY ||
            c.lse_blk[std::size_t(i)] == -INFINITY) {
          // The same host functions on the simulator, and the identity's exact weights on
          // both backends: the same bits.
          CHECK(same_bits(lse_dev[std::size_t(i)], lse_cpu[std::size_t(i)]));
          for (int col = 0; col < d; ++col)
            CHECK(same_bits(o_dev[std::size_t(i) * d + col], o_cpu[std::size_t(i) * d + col]));
          continue;
        }
        // On a GPU expf and log1pf may differ from the host's by 2 ulp: one merge's rounding
        // each, (A + 88 + 8) u for the lse and (2 A + 2 x 88 + 16) u of |O| + |O_b| for O, as
        // chapter 09's split floors state (A = the larger |lse| + 1).
        const double big = double(a) + 1.0;
        CHECK(std::fabs(double(lse_dev[std::size_t(i)]) - lse_cpu[std::size_t(i)]) <=
              2.0 * (big + ref::kExpArgRange + 8.0) * kFloatEps);
        for (int col = 0; col < d; ++col) {
          const std::size_t e = std::size_t(i) * d + col;
          const double size = std::fabs(c.o[e]) + std::fabs(c.o_blk[e]);
          CHECK(std::fabs(double(o_dev[e]) - o_cpu[e]) <=
                2.0 * (2.0 * big + 2.0 * ref::kExpArgRange + 16.0) * kFloatEps * size);
        }
      }
    }
}

template <Backend B>
void ring_with_merge_kernel_equals_ring() {
  const AttentionShape whole{2, 37, 37, 16};
  const AttentionInputs in = make_attention_inputs(ScoreKind::outliers, whole, 0.25f, kSeed);
  for (Layout layout : all_layouts()) {
    CAPTURE(to_string(layout));
    const RingSpec s{2, 37, 16, 3, layout, 0.25f, true};
    const std::vector<AttentionInputs> shards = shard_inputs(in, s);
    const RingForward cpu = ring_forward(shards, s);
    const RingForward dev = ring_forward(shards, s, {}, B);
    const ch09::DecodeReference r = ring_reference(in, s);
    // Both within eq. (7) of the exact result; on the simulator, the same bits.
    const std::vector<float> o = unshard(dev.o, s, s.d);
    WB_CHECK_WITHIN(ref::compare_weighted(o, r.o, r.o_weight), ring_floors(r, s).o);
    if (B == Backend::sim)
      for (int rank = 0; rank < s.ranks; ++rank)
        CHECK(dev.o[std::size_t(rank)] == cpu.o[std::size_t(rank)]);
  }
}

}  // namespace

WB_KERNEL_TEST_CASE("the merge kernel equals the CPU's merge, the identity's rows bit for bit",
                    merge_kernel_equals_cpu)
WB_KERNEL_TEST_CASE("the ring merged by the kernel equals the ring merged on the CPU",
                    ring_with_merge_kernel_equals_ring)

TEST_CASE("the merge kernel moves the bytes its header states" * doctest::test_suite("profile")) {
  for (int rows : {1, 5, 37})
    for (int d : {1, 33, 100}) {
      CAPTURE(rows);
      CAPTURE(d);
      const MergeCase c = merge_case(rows, d, kSeed);
      DeviceBuffer<float> o(Backend::sim, c.o), lse(Backend::sim, c.lse),
          o_blk(Backend::sim, c.o_blk), lse_blk(Backend::sim, c.lse_blk);
      const test::CountedTraffic counted = test::count_traffic([&] {
        Kernels<Backend::sim>::merge_ring_step(
            {o.data(), lse.data(), o_blk.data(), lse_blk.data(), rows, d});
      });
      const MergeTraffic stated = merge_traffic(rows, d);
      CHECK(counted.loaded == stated.loaded);
      CHECK(counted.stored == stated.stored);
    }
}
