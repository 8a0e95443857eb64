// Chapter 07: the laws of Chan's combine on the CPU (eqs. 10-13 of welford_layernorm.md): the
// identity, commutativity and associativity up to the combine's rounding, also at the edges of
// float's range, and any split and any combine tree within the tree bound
// (tests/layernorm_errors.hpp).
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "chapters/07_welford_layernorm/layernorm.hpp"
#include "chapters/07_welford_layernorm/welford.hpp"
#include "common/inputs.hpp"
#include "tests/layernorm_errors.hpp"
#include "tests/support.hpp"

using namespace wb;
using namespace wb::ch07;
using namespace wb::ch07::testing;

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

// States at the edges of float: means from 1.9e19 (past 1.8e19, where a mean squared
// overflows) to +-FLT_MAX, the smallest normal and -0; counts 1 to kMaxCount = 2^24; m2 0 to
// FLT_MAX. Not all of them come from a row of floats (a count of 1 with m2 > 0); the combine's laws
// are algebraic and hold for every state.
std::vector<Welford> extreme_states() {
  std::vector<Welford> states;
  for (float mean : {1.9e19f, -2e19f, 1e20f, -1e30f, 3e38f, FLT_MAX, -FLT_MAX, FLT_MIN, -0.f})
    for (float count : {1.f, 2.f, 1000.f, 1048577.f, kMaxCount})
      for (float m2 : {0.f, 1e30f, 1e38f, FLT_MAX}) states.push_back({mean, m2, count});
  return states;
}

std::uint32_t bits_of(float v) {
  std::uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

// Three nonempty states at one extreme magnitude M (+-1.9e19, 1e20, -5e21, 1e30, 3e38 or
// FLT_MAX) whose combines are representable in every order: means M + d rounded, |d| <= 6e14
// (450 spacings of float at 1.9e19, 68 at 1e20, one or two at 5e21 (spacing 2^49 = 5.6e14);
// at 1e30 and beyond d is below half a spacing and every mean is M: delta = 0), counts 1 to
// 2^22 (three add up to at most 3 x 2^22 < 2^24, exact), m2 0 or up to 1e37 (0 for a count
// of 1). Any two means then differ by less than 1.2e15 + 5.6e14 (the roundings), so
// delta^2 n_a w_b < 3.2e30 x 2^23 = 2.7e37 and every m2 < 3e37 + 2 x 2.7e37: no intermediate
// overflows, and delta, where nonzero, is at least a spacing (1.1e12), far from underflow.
struct Triple {
  Welford a, b, c;
};

std::vector<Triple> extreme_triples(int count, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> unit(-1.f, 1.f);
  const float magnitudes[] = {1.9e19f, -1.9e19f, 1e20f, -5e21f, 1e30f, 3e38f, FLT_MAX};
  const float counts[] = {1.f, 2.f, 3.f, 4194304.f};  // and random ones up to 2^22
  auto state = [&](float M) {
    const float n = rng() % 2 == 0 ? counts[rng() % 4] : static_cast<float>(1 + rng() % (1u << 22));
    const float mean = M + 6e14f * unit(rng);  // FLT_MAX + 6e14 rounds to FLT_MAX, not inf
    const float m2 = n == 1.f || rng() % 4 == 0 ? 0.f : 1e37f * std::fabs(unit(rng));
    return Welford{mean, m2, n};
  };
  std::vector<Triple> out;
  for (int i = 0; i < count; ++i) {
    const float M = magnitudes[static_cast<std::size_t>(i) % std::size(magnitudes)];
    out.push_back({state(M), state(M), state(M)});
  }
  return out;
}

// The statistics of the concatenation of a, b and c, in long double from the float states:
// n_i mean_i is exact in a 64-bit significand (24 + 22 bits), the mean within about 1e-19 A
// of exact, m2 within about 1e-18 of itself, negligible beside the float bounds (u = 6e-8).
struct Exact {
  long double mean, m2, count;
};

Exact exact_combine(std::initializer_list<Welford> states) {
  long double n = 0, sum = 0;
  for (const Welford& s : states) {
    n += s.count;
    sum += static_cast<long double>(s.count) * s.mean;
  }
  const long double mean = sum / n;
  long double m2 = 0;
  for (const Welford& s : states) {
    const long double dev = s.mean - mean;
    m2 += s.m2 + s.count * dev * dev;
  }
  return {mean, m2, n};
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
    std::vector<Welford> states = random_states(300, kSeed);
    for (const Welford& s : extreme_states()) states.push_back(s);
    for (const Welford& s : states) {
      CAPTURE(s.mean);
      CAPTURE(s.m2);
      CAPTURE(s.count);
      // Bit for bit on both sides, -0 included, whatever the magnitudes: the empty side is
      // returned, not computed (welford_combine). Computed, delta^2 = mean^2 overflows past
      // |mean| = 1.8e19 and inf x 0 (the empty side's count or weight) is NaN.
      for (const Welford& c : {welford_combine(id, s), welford_combine(s, id)}) {
        CHECK(bits_of(c.mean) == bits_of(s.mean));
        CHECK(bits_of(c.m2) == bits_of(s.m2));
        CHECK(bits_of(c.count) == bits_of(s.count));
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
    std::vector<std::pair<Welford, Welford>> pairs;
    const std::vector<Welford> states = random_states(120, kSeed + 1);
    for (std::size_t i = 0; i + 1 < states.size(); ++i) pairs.push_back({states[i], states[i + 1]});
    // And at the float range's edge (extreme_triples: every combine representable).
    for (const Triple& t : extreme_triples(140, kSeed + 2)) {
      pairs.push_back({t.a, t.b});
      pairs.push_back({t.c, t.a});
    }
    for (std::size_t i = 0; i < pairs.size(); ++i) {
      const auto [a, b] = pairs[i];
      CAPTURE(i);
      CAPTURE(a.mean);
      CAPTURE(b.mean);
      const Welford ab = welford_combine(a, b), ba = welford_combine(b, a);
      // Each order is within 5 u A of the exact mean (one combine level, mean_bound) with
      // A = max(|mean_a|, |mean_b|), so they agree within 10 u A. m2: every term is >= 0, and
      // each order rounds delta^2 (3 u), the products by n_a and w_b (2 u) and two sums (2 u):
      // within 7 u of exact each, 14 u of each other.
      const double A = std::max(std::fabs(a.mean), std::fabs(b.mean));
      CHECK(std::fabs(ab.mean - ba.mean) <= 10 * u * A);
      CHECK(std::fabs(ab.m2 - ba.m2) <= 14 * u * std::max(ab.m2, ba.m2));
      CHECK(ab.count == ba.count);  // integers below 2^24: exact
      CHECK(std::isfinite(ab.mean));
      CHECK(std::isfinite(ab.m2));
    }
  }

  TEST_CASE("the combine is associative up to its rounding at the float range's edge") {
    // ((a, b), c) and (a, (b, c)) against the exact statistics of the concatenation, each
    // order a tree of two combines on exact operands, at |mean| from 1.9e19 to FLT_MAX.
    // The mean: one combine computes mean_a + delta w_b with delta, w_b, the product and the
    // sum rounded; |delta w_b| is the distance between the result and mean_a, at most the
    // spread R = max |mean_i - mean_j| of the three means, so it is within u A + 3 u R of the
    // exact mean of its operands (A = max |mean_i|). The inner combine's error reaches the
    // outer result weighted by 1 - w_c <= 1: two levels, 2 u (A + 3 R); one more u A covers
    // the second-order terms and the long double reference.
    // m2: one combine on exact operands is within 7 u of exact (the commutativity test), so
    // the inner one too, and that error passes to the outer m2 as it is; the outer combine
    // adds 7 u of its own. Its delta carries the inner mean's error e, u (A + 3 R) to first
    // order and times (1 + u)^4 / (1 + u) <= 1 + 1e-6 in all (four roundings, the sum's
    // counted in u A): its term delta^2 W, W = n_in n_out / n, moves by at most
    // (2 |delta| e + e^2) W. Within 15 u m2 + (2 |delta| e + e^2) W, the 15th u for the
    // second-order terms of (1 + 7 u)^2.
    for (const Triple& t : extreme_triples(700, kSeed + 3)) {
      const Welford a = t.a, b = t.b, c = t.c;
      CAPTURE(a.mean);
      CAPTURE(b.mean);
      CAPTURE(c.mean);
      CAPTURE(a.count);
      CAPTURE(b.count);
      CAPTURE(c.count);
      const Exact exact = exact_combine({a, b, c});
      const long double A = std::max({std::fabs(a.mean), std::fabs(b.mean), std::fabs(c.mean)});
      const long double R = std::max({std::fabs(static_cast<long double>(a.mean) - b.mean),
                                      std::fabs(static_cast<long double>(b.mean) - c.mean),
                                      std::fabs(static_cast<long double>(a.mean) - c.mean)});
      const long double e = (1 + 1e-6L) * u * (A + 3 * R);
      const long double mean_bound = 2 * e + u * A;
      const Exact ab = exact_combine({a, b}), bc = exact_combine({b, c});
      // The outer combine of each order: its exact delta and weight W = n_in n_out / n.
      const struct {
        const char* order;
        Welford result;
        long double delta, W;
      } orders[] = {{"((a, b), c)", welford_combine(welford_combine(a, b), c), c.mean - ab.mean,
                     ab.count * c.count / exact.count},
                    {"(a, (b, c))", welford_combine(a, welford_combine(b, c)), bc.mean - a.mean,
                     a.count * bc.count / exact.count}};
      for (const auto& o : orders) {
        CAPTURE(o.order);
        CHECK(o.result.count == exact.count);  // integers below 2^24: exact
        CHECK(std::fabs(o.result.mean - exact.mean) <= mean_bound);
        const long double m2_bound = 15 * u * exact.m2 + (2 * std::fabs(o.delta) * e + e * e) * o.W;
        CHECK(std::fabs(o.result.m2 - exact.m2) <= m2_bound);
        CHECK(std::isfinite(o.result.m2));
      }
    }
  }

  TEST_CASE("any split and any combine tree give the statistics within the tree bound") {
    // On every input kind, 2^54 randn + 1e20 among them: cut points make empty sides, joined
    // in either order, where the combine must return the other side as it is.
    std::mt19937_64 rng(kSeed);
    EpsDraws eps_draws(kSeed + 4);
    for (int trial = 0; trial < 200; ++trial) {
      const int n = 1 + static_cast<int>(rng() % 700);
      const Kind kind = kKinds[static_cast<std::size_t>(trial) % kKinds.size()];
      const int leaf = 1 + static_cast<int>(rng() % 40);
      CAPTURE(trial);
      CAPTURE(n);
      const std::string input = to_string(kind);
      CAPTURE(input);
      CAPTURE(leaf);
      const float eps = eps_draws.next();
      CAPTURE(eps);
      const Problem p = make_problem(make_x(kind, 1, n, kSeed + static_cast<std::uint64_t>(trial)),
                                     1, n, {}, eps);
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
    EpsDraws eps_draws(kSeed + 5);
    for (Kind kind : {Kind::randn, Kind::offset_1e4, Kind::arange, Kind::offset_1e20}) {
      for (int block : {1, 2, 3, 7, 32, 33, 999, 1000, 5000}) {
        const float eps = eps_draws.next();
        const Problem p = make_problem(make_x(kind, rows, cols, kSeed), rows, cols, {}, eps);
        const std::string input = to_string(kind);
        CAPTURE(input);
        CAPTURE(block);
        CAPTURE(eps);
        const Errors e = scaled_errors(p, layernorm_blocked_welford(p.x, rows, cols, block, p.eps));
        const Tree t{std::min(block, cols), (cols + block - 1) / block - 1};
        CHECK(worst_ratio(e, tree_bounds(t)) <= 1.0);
      }
    }
  }
}
