// Chapter 07: Welford LayerNorm on the CPU: the CPU ladder against fp64 (and the naive
// formula shown to fail) and the laws of Chan's combine. The error unit and the bounds are in
// tests/layernorm_errors.hpp; the kernels' tests in test_07_welford_layernorm_kernels.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "chapters/07_welford_layernorm/layernorm.hpp"
#include "chapters/07_welford_layernorm/layernorm_ladder.hpp"
#include "chapters/07_welford_layernorm/welford.hpp"
#include "common/inputs.hpp"
#include "common/rung.hpp"
#include "common/rung_args.hpp"
#include "tests/layernorm_errors.hpp"
#include "tests/support.hpp"

using namespace wb;
using namespace wb::ch07;
using namespace wb::ch07::testing;

namespace {

// Shapes of the CPU tests: multiples of nothing, and the lengths the kernels care about.
struct Shape {
  int rows, cols;
};
const std::vector<Shape> kCpuShapes = {{3, 1},   {5, 2},    {4, 31},   {4, 32},   {4, 33},
                                       {3, 127}, {3, 1000}, {2, 1025}, {2, 4096}, {1, 32768}};

}  // namespace

// ==========================================================================================
// CPU: the ladder against fp64
// ==========================================================================================

TEST_SUITE("cpu") {
  TEST_CASE("two-pass and Welford LayerNorm are within their bounds of fp64 on every input kind") {
    for (const Shape& s : kCpuShapes) {
      for (Kind kind : kKinds) {
        for (bool affine : {false, true}) {
          CAPTURE(s.rows);
          CAPTURE(s.cols);
          const std::string input = to_string(kind);
          CAPTURE(input);
          CAPTURE(affine);
          const Problem p = make_problem(make_x(kind, s.rows, s.cols, kSeed), s.rows, s.cols,
                                         affine ? make_affine(s.cols, kSeed) : Affine{});
          const Errors two_pass =
              scaled_errors(p, layernorm_two_pass(p.x, p.rows, p.cols, p.eps, p.affine));
          const Errors welford =
              scaled_errors(p, layernorm_welford(p.x, p.rows, p.cols, p.eps, p.affine));
          // The first step of the chain: its own a priori bound against fp64.
          CHECK(worst_ratio(two_pass, two_pass_bounds(s.cols)) <= 1.0);
          // The chain: Welford within twice two-pass's error plus Welford's own bound.
          CHECK(worst_ratio(welford, tree_bounds({s.cols, 0}), &two_pass) <= 1.0);
          // Blocked Welford, blocks of 32 joined left to right (a chain of ceil(n/32) - 1
          // combines), within twice Welford's error plus its own bound.
          constexpr int kBlock = 32;
          const Errors blocked = scaled_errors(
              p, layernorm_blocked_welford(p.x, p.rows, p.cols, kBlock, p.eps, p.affine));
          const Tree blocked_tree{std::min(kBlock, s.cols), (s.cols + kBlock - 1) / kBlock - 1};
          CHECK(worst_ratio(blocked, tree_bounds(blocked_tree), &welford) <= 1.0);
        }
      }
    }
  }

  TEST_CASE("naive LayerNorm fails the tolerance at offset 1e4 where Welford passes") {
    // E[x^2] ~ 1e8 is a float with spacing 8: the variance of 1 is lost (eq. 6).
    for (const Shape& s : std::vector<Shape>{{8, 33}, {8, 1000}, {2, 4096}}) {
      CAPTURE(s.cols);
      const Problem p =
          make_problem(make_input(InputKind::large_offset, s.rows, s.cols, kSeed), s.rows, s.cols);
      const Errors two_pass = scaled_errors(p, layernorm_two_pass(p.x, p.rows, p.cols));
      const Errors welford = scaled_errors(p, layernorm_welford(p.x, p.rows, p.cols));
      const Errors naive = scaled_errors(p, layernorm_naive(p.x, p.rows, p.cols));
      const auto bounds = tree_bounds({s.cols, 0});
      CHECK(worst_ratio(welford, bounds, &two_pass) <= 1.0);
      // The same tolerance, failed by a factor of more than 10 (measured: 100 to 12000).
      CHECK(worst_ratio(naive, bounds, &two_pass) > 10.0);
      // And plainly: rstd is off by more than 50% on some row (measured: the variance
      // collapses to 0, rstd = 1 / sqrt(eps), 300x too large), where Welford's is within its
      // bound (the first check).
      const ErrorReport naive_rstd = compare(layernorm_naive(p.x, p.rows, p.cols).rstd, p.ref.rstd);
      CHECK(naive_rstd.max_rel > 0.5);
    }
  }

  TEST_CASE("naive LayerNorm is fine without an offset") {
    // The failure is the offset's, not the formula's alone: at offset 0 the naive step meets
    // two-pass's bound (so the test above measures cancellation, nothing else).
    const int rows = 8, cols = 1000;
    const Problem p = make_problem(make_input(InputKind::randn, rows, cols, kSeed), rows, cols);
    const Errors naive = scaled_errors(p, layernorm_naive(p.x, rows, cols));
    CHECK(worst_ratio(naive, two_pass_bounds(cols)) <= 1.0);
  }

  TEST_CASE("a constant row has variance 0 and rstd exactly 1 over sqrt(eps)") {
    for (int cols : {1, 2, 33, 1000}) {
      for (float value : {0.f, 1.f, -3.5f, 1e4f, 1e6f}) {
        CAPTURE(cols);
        CAPTURE(value);
        const std::vector<float> x(static_cast<std::size_t>(cols), value);
        // Welford: the first update sets mean = value exactly and every later delta is 0.
        const Welford s = welford_row(x.data(), cols);
        CHECK(s.mean == value);
        CHECK(s.m2 == 0.f);
        // 1 / sqrt(eps) written out, not through rstd_of: the steps under test call that.
        const float rstd = 1.f / std::sqrt(kDefaultEps);
        const LayerNormOut out = layernorm_welford(x, 1, cols);
        CHECK(out.rstd[0] == rstd);
        CHECK(std::isfinite(out.rstd[0]));
        for (float y : out.y) CHECK(y == 0.f);
        const LayerNormOut blocked = layernorm_blocked_welford(x, 1, cols, 7);
        CHECK(blocked.rstd[0] == rstd);
      }
    }
  }

  TEST_CASE("a row holding -inf is NaN and leaves the other rows alone") {
    const int rows = 6, cols = 33;
    const std::vector<float> x = make_input(InputKind::neg_inf_rows, rows, cols, kSeed);
    const LayerNormOut out = layernorm_welford(x, rows, cols);
    for (int r = 0; r < rows; ++r) {
      CAPTURE(r);
      const bool masked = r % 3 == 0;  // inputs.cpp: every third row is all -inf
      CHECK(std::isnan(out.y[static_cast<std::size_t>(r) * cols]) == masked);
    }
  }
}

// ==========================================================================================
// CPU: the laws of Chan's combine
// ==========================================================================================

namespace {

// Seeded Welford states: means near 0, near 1e4 and near -1e6, counts from 1 to 2^20.
std::vector<Welford> random_states(int count, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> unit(-1.f, 1.f);
  const float offsets[] = {0.f, 1e4f, -1e6f};
  std::vector<Welford> states;
  for (int i = 0; i < count; ++i) {
    const float n = static_cast<float>(1 + rng() % (1u << 20));
    const float mean = offsets[i % 3] + 10.f * unit(rng);
    const float m2 = n * std::fabs(unit(rng)) * 4.f;
    states.push_back({mean, m2, n});
  }
  states.push_back({0.f, 0.f, 1.f});
  states.push_back({-0.f, 0.f, 1.f});
  states.push_back({3.f, 0.f, 1.f});
  return states;
}

// Statistics of x[lo, hi) by a random tree: a leaf folds sequentially when the range is at
// most `leaf` long (and by a coin flip before), else the range is cut at a random point
// (possibly making an empty side) and the two sides are combined in random order.
Welford random_tree(const float* x, int lo, int hi, int leaf, std::mt19937_64& rng, int depth,
                    Tree* used) {
  const int len = hi - lo;
  if (len <= leaf && (len == 0 || rng() % 2 == 0)) {
    used->leaf = std::max(used->leaf, len);
    used->depth = std::max(used->depth, depth);
    return welford_row(x + lo, len);
  }
  const int cut = lo + static_cast<int>(rng() % static_cast<std::uint64_t>(len + 1));
  const Welford a = random_tree(x, lo, cut, leaf, rng, depth + 1, used);
  const Welford b = random_tree(x, cut, hi, leaf, rng, depth + 1, used);
  return rng() % 2 == 0 ? welford_combine(a, b) : welford_combine(b, a);
}

}  // namespace

TEST_SUITE("cpu") {
  TEST_CASE("combining with the identity returns the other state exactly") {
    const Welford id = welford_identity();
    for (const Welford& s : random_states(300, kSeed)) {
      CAPTURE(s.mean);
      CAPTURE(s.m2);
      CAPTURE(s.count);
      for (const Welford& c : {welford_combine(id, s), welford_combine(s, id)}) {
        CHECK(c.mean == s.mean);  // exact: w_b is 1 or 0, see welford_combine
        CHECK(c.m2 == s.m2);
        CHECK(c.count == s.count);
      }
    }
    const Welford both = welford_combine(id, id);  // 0 / 0 avoided: still the identity
    CHECK(both.mean == 0.f);
    CHECK(both.m2 == 0.f);
    CHECK(both.count == 0.f);
    // The update is the combine with a one-value state {x, 0, 1}, up to rounding; starting
    // from the identity both give that state exactly.
    const Welford one = welford_update(id, 2.5f);
    CHECK(one.mean == 2.5f);
    CHECK(one.m2 == 0.f);
    CHECK(one.count == 1.f);
  }

  TEST_CASE("the combine is commutative up to its rounding") {
    const std::vector<Welford> states = random_states(120, kSeed + 1);
    for (std::size_t i = 0; i + 1 < states.size(); ++i) {
      const Welford a = states[i], b = states[i + 1];
      CAPTURE(i);
      const Welford ab = welford_combine(a, b), ba = welford_combine(b, a);
      // Each order is within 5 u A of the exact mean (one combine level, mean_bound) with
      // A = max(|mean_a|, |mean_b|), so they agree within 10 u A. m2: every term is >= 0, and
      // each order rounds delta^2 (3 u), the products by n_a and w_b (2 u) and two sums (2 u):
      // within 7 u of exact each, 14 u of each other.
      const double A = std::max(std::fabs(a.mean), std::fabs(b.mean));
      CHECK(std::fabs(ab.mean - ba.mean) <= 10 * u * A);
      CHECK(std::fabs(ab.m2 - ba.m2) <= 14 * u * std::max(ab.m2, ba.m2));
      CHECK(ab.count == ba.count);  // integers below 2^24: exact
    }
  }

  TEST_CASE("any split and any combine tree give the statistics within the tree bound") {
    std::mt19937_64 rng(kSeed);
    for (int trial = 0; trial < 200; ++trial) {
      const int n = 1 + static_cast<int>(rng() % 700);
      const Kind kind = kKinds[static_cast<std::size_t>(trial) % kKinds.size()];
      const int leaf = 1 + static_cast<int>(rng() % 40);
      CAPTURE(trial);
      CAPTURE(n);
      const std::string input = to_string(kind);
      CAPTURE(input);
      CAPTURE(leaf);
      const Problem p =
          make_problem(make_x(kind, 1, n, kSeed + static_cast<std::uint64_t>(trial)), 1, n);
      Tree used{0, 0};
      const Welford s = random_tree(p.x.data(), 0, n, leaf, rng, 0, &used);
      REQUIRE(s.count == static_cast<float>(n));  // every value counted once
      const LayerNormOut out = layernorm_rows(
          p.x, 1, n, p.affine, [&](const float*, int) { return row_stats(s, p.eps); });
      const Errors e = scaled_errors(p, out);
      CAPTURE(used.leaf);
      CAPTURE(used.depth);
      CHECK(worst_ratio(e, tree_bounds(used)) <= 1.0);
    }
  }

  TEST_CASE("blocked Welford is within its bound for every block size") {
    const int rows = 4, cols = 1000;
    for (Kind kind : {Kind::randn, Kind::offset_1e4, Kind::arange}) {
      const Problem p = make_problem(make_x(kind, rows, cols, kSeed), rows, cols);
      for (int block : {1, 2, 3, 7, 32, 33, 999, 1000, 5000}) {
        const std::string input = to_string(kind);
        CAPTURE(input);
        CAPTURE(block);
        const Errors e = scaled_errors(p, layernorm_blocked_welford(p.x, rows, cols, block, p.eps));
        const Tree t{std::min(block, cols), (cols + block - 1) / block - 1};
        CHECK(worst_ratio(e, tree_bounds(t)) <= 1.0);
      }
    }
  }

  TEST_CASE("bad arguments are rejected with the limit named") {
    const std::vector<float> x(6, 1.f);
    CHECK_THROWS_AS(layernorm_welford(x, 2, 4), std::invalid_argument);  // 6 != 2 x 4
    CHECK_THROWS_AS(layernorm_blocked_welford(x, 2, 3, 0), std::invalid_argument);
    CHECK_THROWS_AS(layernorm_welford(x, 2, 3, kDefaultEps, Affine{{1.f}, {}}),
                    std::invalid_argument);
    // The kernels' limits, checked before every launch (run_rung), refuse null outputs.
    const LayerNormArgs a{x.data(), nullptr, nullptr, nullptr, nullptr, nullptr, 2, 3, kDefaultEps};
    for (const Rung<LayerNormArgs>& rung : kernel_ladder<Backend::sim>()) {
      CAPTURE(rung.name);
      CHECK(why_refused(rung, a) == "x, y, mean and rstd must not be null");
    }
  }
}
