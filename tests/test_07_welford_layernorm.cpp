// Chapter 07: Welford LayerNorm. The CPU ladder against fp64 (and the naive formula shown to
// fail), the laws of Chan's combine, the dispatcher's rule at its boundaries, then every
// kernel strategy against the CPU Welford step on adversarial shapes and inputs.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "chapters/07_welford_layernorm/layernorm.hpp"
#include "chapters/07_welford_layernorm/welford.hpp"
#include "common/buffer.hpp"
#include "common/inputs.hpp"
#include "common/reference_layernorm.hpp"
#include "common/shared_memory.hpp"
#include "tests/support.hpp"

using namespace wb;
using namespace wb::ch07;

namespace {

constexpr std::uint64_t kSeed = 2024;
constexpr double u = kFloatEps;  // 2^-24, the unit roundoff of float

// ------------------------------------------------------------------------------------------
// The error unit and the a priori bounds (welford_layernorm.md, section "How accurate")
// ------------------------------------------------------------------------------------------
//
// A float row with largest magnitude A = max_j |x_j| carries its values to within u A, so any
// float algorithm computes the mean to within a multiple of u A, and y (a value divided by
// the standard deviation s) to within a multiple of u A / s. The tests therefore measure
// each row's errors in units of u K, K = max(1, A rstd) (rstd = 1 / sqrt(var + eps) of the
// fp64 reference; the 1 covers the roundings of y itself): the row's condition number. At an
// offset of 1e4 with s = 1, K = 1e4; for randn rows K is about 4. Below, every bound is a
// first-order rounding-error bound in those units, for a row of n values.

// Welford over a tree of combines: leaves folded sequentially (at most `leaf` values each),
// then at most `depth` levels of Chan's combine on any leaf-to-root path. Sequential Welford
// is the tree with leaf = n and depth 0.
struct Tree {
  int leaf;
  int depth;
};

// The mean's error, in units of u K:
// - one update rounds delta (u |delta| <= 2 u A), the quotient delta / n_k (twice that, over
//   n_k) and the sum (u A): r_k <= u A (1 + 4 / k); an error made at step k is scaled by
//   (1 - 1/j) at every later step j, a product of k / n: sum_k (k / n) r_k <= u A ((n+1)/2 + 4);
// - one combine rounds delta (2 u A), w_b and the product (2 u A) and the sum (u A), and
//   passes on a convex mix of its operands' errors: + 5 u A per level.
double mean_bound(Tree t) {
  return (t.leaf + 1) / 2.0 + 4 + 5.0 * t.depth;
}

// rstd's relative error, in units of u K: m2 adds terms delta_k (x_k - mean_k) whose factors
// carry the means' errors e; to first order the sum changes by at most 2 e sum_k |x_k - mean|,
// and by Cauchy-Schwarz sum_k |x_k - mean| <= sqrt(2 n m2): a relative 2 sqrt(2) e / s
// <= 2.83 mean_bound. Summing m2 rounds by (leaf + 2) u and each combine by 3 u; var + eps,
// sqrt and 1 / x add 3 u; rstd's relative error is half var's plus those.
double rstd_bound(Tree t) {
  return 1.5 * mean_bound(t) + (t.leaf + 3.0 * t.depth) / 2 + 5;
}

// Two-pass: the float sum of n values is within (n - 1) u sum |x_j| <= (n - 1) u n A, so the
// mean is within (n + 1) u A. The deviations' sum of squares is second order in the mean's
// error, (e / s)^2 <= ((n + 1) u K)^2, plus (n + 3) u for its own roundings.
double two_pass_mean_bound(int n) {
  return n + 1.0;
}
double two_pass_rstd_bound(int n, double K) {
  const double e = (n + 1.0) * u * K;  // the mean's error over s
  return (e * e / (u * K) + n + 3.0) / 2 + 5;
}

// The y bound from the mean's and rstd's: y = (x - mean) rstd gamma + beta, with
// Z = max_j |x_j - mean| rstd (from the reference, <= sqrt(n)), G = max |gamma| and
// B = max |beta|: |dy| <= G (e_mean + Z (e_rstd + 4 u)) + u (G Z + B), in units of u K >= u.
double y_bound(double b_mean, double b_rstd, double Z, double G, double B) {
  return G * (b_mean + Z * (b_rstd + 5)) + B + 1;
}

// ------------------------------------------------------------------------------------------
// Scaled errors of one step against the fp64 reference, row by row
// ------------------------------------------------------------------------------------------

struct Problem {
  std::vector<float> x;
  int rows = 0;
  int cols = 0;
  float eps = kDefaultEps;
  Affine affine;
  ref::LayerNorm ref;
};

Problem make_problem(std::vector<float> x, int rows, int cols, Affine affine = {},
                     float eps = kDefaultEps) {
  Problem p{std::move(x), rows, cols, eps, std::move(affine), {}};
  p.ref = ref::layernorm(p.x, rows, cols, eps, p.affine.gamma, p.affine.beta);
  return p;
}

// The input kinds of common/inputs.hpp that make sense for LayerNorm (-inf entries make the
// whole row NaN, tested separately), plus randn at an offset of 1e6.
enum class Kind { randn, outliers, offset_1e4, offset_1e6, ones, arange };
const std::vector<Kind> kKinds = {Kind::randn,      Kind::outliers, Kind::offset_1e4,
                                  Kind::offset_1e6, Kind::ones,     Kind::arange};
constexpr float kOffset1e6 = 1e6f;

const char* to_string(Kind k) {
  switch (k) {
    case Kind::randn:
      return "randn";
    case Kind::outliers:
      return "outliers x20";
    case Kind::offset_1e4:
      return "randn + 1e4";
    case Kind::offset_1e6:
      return "randn + 1e6";
    case Kind::ones:
      return "ones";
    case Kind::arange:
      return "arange";
  }
  return "?";
}

std::vector<float> make_x(Kind k, int rows, int cols, std::uint64_t seed) {
  switch (k) {
    case Kind::randn:
      return make_input(InputKind::randn, rows, cols, seed);
    case Kind::outliers:
      return make_input(InputKind::outliers, rows, cols, seed);
    case Kind::offset_1e4:
      return make_input(InputKind::large_offset, rows, cols, seed);
    case Kind::offset_1e6: {
      std::vector<float> x = make_input(InputKind::randn, rows, cols, seed);
      for (float& v : x) v += kOffset1e6;
      return x;
    }
    case Kind::ones:
      return make_input(InputKind::ones, rows, cols, seed);
    case Kind::arange:
      return make_input(InputKind::arange, rows, cols, seed);
  }
  return {};
}

// gamma around 1 and beta around 0, as a trained LayerNorm's are.
Affine make_affine(int cols, std::uint64_t seed) {
  return {randn(static_cast<std::size_t>(cols), seed, 1.f, 0.5f),
          randn(static_cast<std::size_t>(cols), seed + 1, 0.f, 0.5f)};
}

double max_abs(const std::vector<float>& v, double empty_value) {
  double m = v.empty() ? empty_value : 0.0;
  for (float f : v) m = std::max(m, static_cast<double>(std::fabs(f)));
  return m;
}

// Per-row errors in units of u K, and the row's K and Z.
struct RowErrors {
  double K, Z;
  double mean, rstd, y;
};

struct Errors {
  std::vector<RowErrors> rows;
  std::size_t nonfinite = 0;  // NaN or inf in mean, rstd or y where the reference is finite
  double G = 1, B = 0;
};

// y's error is measured net of the rounding to the output type, output_rounding() of
// common/dtype.hpp: |round(v) - v| <= half_ulp max(|v|, tiny), half_ulp 2^-11 for fp16, 2^-8
// for bf16, 0 for fp32. A float result within E of the reference, rounded, is within
// E + half_ulp max(|ref| + E, tiny) <= E (1 + half_ulp) + half_ulp max(|ref|, tiny) of it; so
// E >= (|y - ref| - half_ulp max(|ref|, tiny)) / (1 + half_ulp), and that E is what the float
// bounds (y_bound, chain_bound) must cover: eq. (14) of welford_layernorm.md. A store that
// truncated instead of rounding leaves up to half_ulp |ref| uncovered, 2^-11 |y| / (u K) =
// 8192 |y| / K units for fp16: about 2000 |y| on randn rows (K about 4), past the bound of
// every row up to thousands of columns (it grows with the values folded per thread).
Errors scaled_errors(const Problem& p, const LayerNormOutput& out,
                     OutputRounding rounding = output_rounding(Dtype::fp32)) {
  Errors e;
  e.G = max_abs(p.affine.gamma, 1.0);
  e.B = max_abs(p.affine.beta, 0.0);
  const std::size_t n = static_cast<std::size_t>(p.cols);
  for (std::size_t r = 0; r < static_cast<std::size_t>(p.rows); ++r) {
    const float* xr = p.x.data() + r * n;
    const double rstd_ref = p.ref.rstd[r];
    double A = 0, Z = 0;
    for (std::size_t c = 0; c < n; ++c) {
      A = std::max(A, static_cast<double>(std::fabs(xr[c])));
      Z = std::max(Z, std::fabs(xr[c] - p.ref.mean[r]) * rstd_ref);
    }
    const double K = std::max(1.0, A * rstd_ref);
    const double unit = u * K;
    RowErrors re{K, Z, 0, 0, 0};
    auto track = [&](double actual, double reference, double scale, double* slot) {
      if (!std::isfinite(actual)) {
        ++e.nonfinite;
        return;
      }
      *slot = std::max(*slot, std::fabs(actual - reference) * scale / unit);
    };
    track(out.mean[r], p.ref.mean[r], rstd_ref, &re.mean);   // in units of s: what y sees
    track(out.rstd[r], rstd_ref, 1.0 / rstd_ref, &re.rstd);  // relative
    for (std::size_t c = 0; c < n; ++c) {
      const double y = out.y[r * n + c], ref = p.ref.y[r * n + c];
      if (!std::isfinite(y)) {
        ++e.nonfinite;
        continue;
      }
      const double allowed = rounding.half_ulp * std::max(std::fabs(ref), rounding.tiny);
      const double excess = std::max(0.0, std::fabs(y - ref) - allowed);
      re.y = std::max(re.y, excess / (1 + rounding.half_ulp) / unit);
    }
    e.rows.push_back(re);
  }
  return e;
}

// The worst ratio error / bound over the rows; <= 1 means within. `bound(row)` gives the
// bounds of (mean, rstd, y) for that row; `previous` (optional) the previous step's errors,
// for the tolerance policy's 2x rule: bound = chain_bound(previous error, floor).
struct Bounds {
  double mean, rstd, y;
};

template <typename BoundFn>
double worst_ratio(const Errors& e, BoundFn bound, const Errors* previous = nullptr) {
  if (e.nonfinite != 0) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (std::size_t r = 0; r < e.rows.size(); ++r) {
    const RowErrors& re = e.rows[r];
    Bounds b = bound(re, e.G, e.B);
    if (previous != nullptr) {
      const RowErrors& pr = previous->rows[r];
      b = {chain_bound(pr.mean, b.mean), chain_bound(pr.rstd, b.rstd), chain_bound(pr.y, b.y)};
    }
    worst = std::max({worst, re.mean / b.mean, re.rstd / b.rstd, re.y / b.y});
  }
  return worst;
}

// The bounds of a Welford tree, for any row.
auto tree_bounds(Tree t) {
  return [t](const RowErrors& re, double G, double B) {
    const double bm = mean_bound(t), br = rstd_bound(t);
    return Bounds{bm, br, y_bound(bm, br, re.Z, G, B)};
  };
}

auto two_pass_bounds(int n) {
  return [n](const RowErrors& re, double G, double B) {
    const double bm = two_pass_mean_bound(n), br = two_pass_rstd_bound(n, re.K);
    return Bounds{bm, br, y_bound(bm, br, re.Z, G, B)};
  };
}

int ceil_log2(int v) {
  int d = 0;
  while ((1 << d) < v) ++d;
  return d;
}

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
      // collapses to 0, rstd = 1 / sqrt(eps), 300x too large), where Welford's is within 1e-3.
      const ErrorReport naive_rstd = compare(layernorm_naive(p.x, p.rows, p.cols).rstd, p.ref.rstd);
      const ErrorReport welford_rstd =
          compare(layernorm_welford(p.x, p.rows, p.cols).rstd, p.ref.rstd);
      CHECK(naive_rstd.max_rel > 0.5);
      WB_CHECK_WITHIN_REL(welford_rstd, 1e-3);
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
        const LayerNormOutput out = layernorm_welford(x, 1, cols);
        CHECK(out.rstd[0] == rstd_of(0.f, kDefaultEps));
        CHECK(std::isfinite(out.rstd[0]));
        for (float y : out.y) CHECK(y == 0.f);
        const LayerNormOutput blocked = layernorm_blocked_welford(x, 1, cols, 7);
        CHECK(blocked.rstd[0] == rstd_of(0.f, kDefaultEps));
      }
    }
  }

  TEST_CASE("a row holding -inf is NaN and leaves the other rows alone") {
    const int rows = 6, cols = 33;
    const std::vector<float> x = make_input(InputKind::neg_inf_rows, rows, cols, kSeed);
    const LayerNormOutput out = layernorm_welford(x, rows, cols);
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
      const LayerNormOutput out = layernorm_rows(
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
    LayerNormArgs a{x.data(), nullptr, nullptr, nullptr, nullptr, nullptr, 2, 3, kDefaultEps};
    CHECK_THROWS_AS(check_args(a), std::invalid_argument);  // null outputs
  }
}

// ==========================================================================================
// The dispatcher's rule and the kernels' shapes (backend-neutral)
// ==========================================================================================

namespace {
// The simulator's and an H100's opt-in limit, 227 KiB; an A100's, 163 KiB.
constexpr std::size_t kSm90SharedBytes = 227 * 1024;
constexpr std::size_t kSm80SharedBytes = 163 * 1024;
}  // namespace

TEST_SUITE("cpu") {
  TEST_CASE("the dispatcher switches strategy exactly at its boundaries") {
    for (std::size_t limit : {kSm90SharedBytes, kSm80SharedBytes}) {
      CAPTURE(limit);
      const int max_cached = max_cached_cols(limit);
      CHECK(cached_shared_bytes(max_cached) <= limit);
      CHECK(cached_shared_bytes(max_cached + 1) > limit);
      CHECK(choose_strategy(1, limit) == Strategy::warp_per_row);
      CHECK(choose_strategy(kWarpMaxCols, limit) == Strategy::warp_per_row);
      CHECK(choose_strategy(kWarpMaxCols + 1, limit) == Strategy::block_cached);
      CHECK(choose_strategy(max_cached, limit) == Strategy::block_cached);
      CHECK(choose_strategy(max_cached + 1, limit) == Strategy::block_uncached);
      CHECK(choose_strategy(kMaxCols, limit) == Strategy::block_uncached);
    }
    CHECK(max_cached_cols(kSm90SharedBytes) == 58088);  // (232448 - 96) / 4
    // A device with no more shared memory than the scratch caches nothing.
    CHECK(max_cached_cols(kCachedScratchBytes) == 0);
    CHECK(choose_strategy(kWarpMaxCols + 1, kCachedScratchBytes) == Strategy::block_uncached);
  }

  TEST_CASE("warp groups narrow for short rows and always cover the row") {
    for (int cols = 1; cols <= kWarpMaxCols; ++cols) {
      CAPTURE(cols);
      const WarpShape w = warp_shape(cols);
      CHECK(w.group_width * w.cols_per_lane >= cols);  // every value has a register
      CHECK(w.cols_per_lane <= kMaxColsPerLane);
      // Not wasteful: half the group, or half the registers, would not hold the row.
      CHECK((w.group_width / 2) * w.cols_per_lane < cols);
      CHECK(w.group_width * (w.cols_per_lane / 2) < cols);
    }
    CHECK(warp_shape(1).rows_per_block() == kWarpBlockThreads);
    CHECK(warp_shape(2).rows_per_block() == kWarpBlockThreads / 2);
    CHECK(warp_shape(1024).rows_per_block() == kWarpBlockThreads / kLanes);
  }

  TEST_CASE("float4 access is used only for aligned pointers and cols a multiple of 4") {
    alignas(16) float buf[16] = {};
    LayerNormArgs a{buf, nullptr, nullptr, buf, buf, buf, 1, 8, kDefaultEps};
    CHECK(can_vectorize(a));
    a.cols = 6;
    CHECK_FALSE(can_vectorize(a));
    a.cols = 8;
    a.x = buf + 1;
    CHECK_FALSE(can_vectorize(a));
    a.x = buf;
    a.gamma = buf + 2;
    CHECK_FALSE(can_vectorize(a));
  }
}

// ==========================================================================================
// Kernels against the CPU Welford step
// ==========================================================================================

namespace {

// The Welford tree each strategy computes, for a row of n values.
Tree kernel_tree(const std::string& name, int n, std::size_t max_shared, Dtype t = Dtype::fp32) {
  Strategy s = Strategy::block_uncached;
  if (name == "warp_per_row") s = Strategy::warp_per_row;
  if (name == "block_cached") s = Strategy::block_cached;
  if (name == "dispatch") s = choose_strategy(n, max_shared, dtype_bytes(t));
  if (s == Strategy::warp_per_row) {
    // A lane folds cols_per_lane values, then log2(group_width) butterfly levels.
    const WarpShape w = warp_shape(n);
    return {w.cols_per_lane, ceil_log2(w.group_width)};
  }
  // A thread folds ceil(n / 256) values (rounded up to whole vectors: 4 floats, 8 halves),
  // then 5 levels within the warp and 5 more over the warps' states (3 of them with the
  // identity, exact).
  const int per_thread = (n + kBlockThreads - 1) / kBlockThreads + vec_width(t);
  return {per_thread, 2 * ceil_log2(kLanes)};
}

struct KernelShape {
  int rows, cols;
};

// cols 1..32 (narrow groups, several rows per warp), one past every group width, one past
// the warp limit and the default shared-memory limit, and the edge sizes; rows
// never a multiple of the rows per block.
const std::vector<KernelShape> kKernelShapes = {
    {130, 1}, {67, 2},  {37, 3},  {19, 16},  {5, 17},   {7, 31},   {5, 32},   {6, 33},
    {5, 97},  {5, 128}, {3, 129}, {5, 1000}, {3, 1023}, {3, 1024}, {3, 1025}, {2, 4096}};
// Long rows, few of them: the simulator runs 256 threads per row.
const std::vector<KernelShape> kLongShapes = {{2, 12264}, {2, 12265}, {1, 32768}};
// Race mode checks every shared-memory access: narrow groups, a partial warp, several
// values per lane, and one long row past the default shared-memory limit still run there.
const std::vector<KernelShape> kRaceShapes = {{5, 17}, {3, 136}, {3, 1032}};
const std::vector<KernelShape> kRaceLongShapes = {{1, 12265}};

// `values` as elements of t, `pad` bytes into a buffer with kVecBytes of zeros after them.
std::vector<unsigned char> padded_elements(const std::vector<float>& values, Dtype t,
                                           std::size_t pad) {
  const std::vector<unsigned char> bytes = encode_elements(values, t);
  std::vector<unsigned char> out(pad + bytes.size() + kVecBytes, 0);
  std::copy(bytes.begin(), bytes.end(), out.begin() + static_cast<std::ptrdiff_t>(pad));
  return out;
}

// Runs kernel `name` through `launch` on p's values as elements of t (p's values already
// rounded to t) and checks it against the CPU Welford step on the same values.
// misalign: x, gamma, beta and y one element past a 16-byte boundary, so the scalar path runs.
// Returns whether the launch could use vectors.
template <Backend B>
bool run_and_check_elements(const std::string& name,
                            const std::function<void(const TypedLayerNormArgs&)>& launch,
                            const Problem& p, Dtype t, bool misalign) {
  const std::string kernel = name;
  const std::string dtype = to_string(t);
  CAPTURE(kernel);
  CAPTURE(dtype);
  CAPTURE(p.rows);
  CAPTURE(p.cols);
  CAPTURE(misalign);
  const Errors cpu = scaled_errors(p, layernorm_welford(p.x, p.rows, p.cols, p.eps, p.affine));

  const std::size_t pad = misalign ? dtype_bytes(t) : 0;
  DeviceBuffer<unsigned char> dx(B, padded_elements(p.x, t, pad));
  DeviceBuffer<unsigned char> dgamma(B, padded_elements(p.affine.gamma, t, pad));
  DeviceBuffer<unsigned char> dbeta(B, padded_elements(p.affine.beta, t, pad));
  DeviceBuffer<unsigned char> dy(B, dx.size());
  dy.fill_zero();
  DeviceBuffer<float> dmean(B, static_cast<std::size_t>(p.rows));
  DeviceBuffer<float> drstd(B, static_cast<std::size_t>(p.rows));
  const TypedLayerNormArgs a{dx.data() + pad,
                             p.affine.gamma.empty() ? nullptr : dgamma.data() + pad,
                             p.affine.beta.empty() ? nullptr : dbeta.data() + pad,
                             dy.data() + pad,
                             dmean.data(),
                             drstd.data(),
                             p.rows,
                             p.cols,
                             p.eps,
                             t};
  const bool vectors = can_vectorize(a);
  if (misalign) CHECK_FALSE(vectors);
  launch(a);
  const std::vector<unsigned char> out = dy.download();
  const std::size_t bytes = p.x.size() * dtype_bytes(t);
  const LayerNormOutput o{decode_elements(out.data() + pad, p.x.size(), t), dmean.download(),
                          drstd.download()};
  const Errors e = scaled_errors(p, o, output_rounding(t));
  const Tree tree = kernel_tree(name, p.cols, Kernels<B>::max_dynamic_shared_bytes(), t);
  CAPTURE(tree.leaf);
  CAPTURE(tree.depth);
  // The tolerance policy: within twice the CPU Welford step's error plus the kernel's own tree
  // bound (a wrong combine or a dropped value is off by O(1), 1e5 units and more), for the
  // float computation; y's rounding to a 16-bit t is allowed for by scaled_errors.
  CHECK(worst_ratio(e, tree_bounds(tree), &cpu) <= 1.0);
  // No byte before y or past its end is written.
  std::size_t touched = 0;
  for (std::size_t i = 0; i < out.size(); ++i)
    touched += (i < pad || i >= pad + bytes) && out[i] != 0;
  CHECK(touched == 0);
  return vectors;
}

template <Backend B>
bool run_and_check_typed(const TypedNamedKernel& k, const Problem& p, Dtype t, bool misalign) {
  return run_and_check_elements<B>(k.name, k.launch, p, t, misalign);
}

// An fp32 strategy through its LayerNormArgs entry point.
template <Backend B>
void run_and_check(const NamedKernel& k, const Problem& p, bool misalign) {
  const auto launch = [&k](const TypedLayerNormArgs& a) {
    k.launch({static_cast<const float*>(a.x), static_cast<const float*>(a.gamma),
              static_cast<const float*>(a.beta), static_cast<float*>(a.y), a.mean, a.rstd, a.rows,
              a.cols, a.eps});
  };
  run_and_check_elements<B>(k.name, launch, p, Dtype::fp32, misalign);
}

template <Backend B>
void every_strategy_equals_the_cpu_welford_step() {
  for (const NamedKernel& k : kernel_ladder<B>()) {
    for (const KernelShape& s : test::kRaceMode ? kRaceShapes : kKernelShapes) {
      if (s.cols > k.max_cols) continue;
      for (Kind kind : kKinds) {
        const std::string input = to_string(kind);
        CAPTURE(input);
        const Problem p = make_problem(make_x(kind, s.rows, s.cols, kSeed), s.rows, s.cols);
        run_and_check<B>(k, p, false);
      }
      // gamma and beta, and the scalar path forced by a misaligned pointer.
      const Problem affine = make_problem(make_x(Kind::randn, s.rows, s.cols, kSeed + 1), s.rows,
                                          s.cols, make_affine(s.cols, kSeed));
      run_and_check<B>(k, affine, false);
      run_and_check<B>(k, affine, true);
    }
  }
}

template <Backend B>
void long_rows_and_the_shared_memory_boundaries() {
  const int max_cached = max_cached_cols(Kernels<B>::max_dynamic_shared_bytes());
  std::vector<KernelShape> shapes = test::kRaceMode ? kRaceLongShapes : kLongShapes;
  if (!test::kRaceMode) {
    shapes.push_back({1, max_cached});      // the longest cached row: all of shared memory
    shapes.push_back({1, max_cached + 1});  // one past: uncached
  }
  for (const NamedKernel& k : kernel_ladder<B>()) {
    for (const KernelShape& s : shapes) {
      if (s.cols > k.max_cols) continue;
      for (Kind kind : {Kind::randn, Kind::offset_1e4}) {
        const std::string input = to_string(kind);
        CAPTURE(input);
        const Problem p = make_problem(make_x(kind, s.rows, s.cols, kSeed), s.rows, s.cols);
        run_and_check<B>(k, p, false);
      }
      const Problem affine = make_problem(make_x(Kind::randn, s.rows, s.cols, kSeed + 1), s.rows,
                                          s.cols, make_affine(s.cols, kSeed));
      run_and_check<B>(k, affine, true);
    }
  }
}

}  // namespace

WB_KERNEL_TEST_CASE("every LayerNorm strategy equals the CPU Welford step on adversarial shapes",
                    every_strategy_equals_the_cpu_welford_step)
WB_KERNEL_TEST_CASE("long rows up to one past the shared memory limit equal the CPU Welford step",
                    long_rows_and_the_shared_memory_boundaries)

// ==========================================================================================
// 16-bit elements: fp16 and bf16 x, gamma, beta and y, computed in float
// ==========================================================================================
//
// The fp32 entry points above are the typed kernels with T = float (Kernels::*(LayerNormArgs)
// forward to the TypedLayerNormArgs launchers with Dtype::fp32), so the tests above cover fp32;
// these cover fp16 and bf16. A kernel on 16-bit elements reads x, gamma and beta rounded to the
// type, so both the CPU step and the fp64 reference start from the same rounded values: the
// kernel's float work then obeys the fp32 bounds above, and its y adds one rounding to the
// output type (OutputRounding, scaled_errors).

TEST_SUITE("cpu") {
  TEST_CASE("16-bit rows fit twice as long in the shared-memory cache") {
    for (std::size_t limit : {kSm90SharedBytes, kSm80SharedBytes}) {
      CAPTURE(limit);
      const int max_cached = max_cached_cols(limit, 2);
      CHECK(max_cached == 2 * max_cached_cols(limit));  // (limit - 96) / 2, limit a multiple of 4
      CHECK(cached_shared_bytes(max_cached, 2) <= limit);
      CHECK(cached_shared_bytes(max_cached + 1, 2) > limit);
      CHECK(choose_strategy(kWarpMaxCols, limit, 2) == Strategy::warp_per_row);
      CHECK(choose_strategy(kWarpMaxCols + 1, limit, 2) == Strategy::block_cached);
      CHECK(choose_strategy(max_cached, limit, 2) == Strategy::block_cached);
      CHECK(choose_strategy(max_cached + 1, limit, 2) == Strategy::block_uncached);
    }
    CHECK(max_cached_cols(kSm90SharedBytes, 2) == 116176);  // (232448 - 96) / 2
  }

  TEST_CASE("16-bit vectors need aligned pointers and cols a multiple of 8") {
    alignas(16) unsigned char buf[64] = {};
    float stats[2] = {};
    for (Dtype t : {Dtype::fp16, Dtype::bf16}) {
      const std::string dtype = to_string(t);
      CAPTURE(dtype);
      TypedLayerNormArgs a{buf, buf, buf, buf, stats, stats, 1, 16, kDefaultEps, t};
      CHECK(can_vectorize(a));
      a.cols = 12;  // whole float4s, but not whole vectors of 8 halves
      CHECK_FALSE(can_vectorize(a));
      a.dtype = Dtype::fp32;
      CHECK(can_vectorize(a));
      a.dtype = t;
      a.cols = 16;
      a.y = buf + 2;  // one element past the 16-byte boundary
      CHECK_FALSE(can_vectorize(a));
      a.y = buf;
      a.beta = buf + 8;
      CHECK_FALSE(can_vectorize(a));
    }
  }

  TEST_CASE("the 16-bit offsets keep sixteen levels per standard deviation") {
    // randn_offset(): where the type's spacing is 2^-4, sigma / 16. At 1e4 fp16's spacing is 8
    // and bf16's 64: an offset of 1e4 would round the row to a few levels.
    const float sixteenth = 0.0625f;
    CHECK(round_to_half(randn_offset(Dtype::fp16) + sixteenth) ==
          randn_offset(Dtype::fp16) + sixteenth);
    CHECK(round_to_bf16(randn_offset(Dtype::bf16) + sixteenth) ==
          randn_offset(Dtype::bf16) + sixteenth);
    // At 1e4, values 6 sigma apart round to the same element.
    CHECK(round_to_half(1e4f - 3.f) == round_to_half(1e4f + 3.f));
    CHECK(round_to_bf16(1e4f - 3.f) == round_to_bf16(1e4f + 3.f));
  }
}

namespace {

const Dtype k16BitTypes[] = {Dtype::fp16, Dtype::bf16};
const Dtype kDtypes[] = {Dtype::fp32, Dtype::fp16, Dtype::bf16};

// The input kinds that make sense in 16 bits, one per row, cycling from `first`: randn,
// outliers x20, randn + randn_offset(t) (1e2 for fp16, 1e1 for bf16, not 1e4: see there),
// arange modulo 2048 (fp16 overflows past 65504; it holds every integer up to 2048) and ones.
// The kernel and the references see them rounded to t (make_rounded_problem).
enum class Kind16 { randn, outliers, offset, arange, ones };
constexpr int kKinds16 = 5;
constexpr int kArangePeriod = 2048;

std::vector<float> make_mixed_x(int rows, int cols, std::uint64_t seed, Dtype t, int first) {
  std::vector<float> x;
  for (int r = 0; r < rows; ++r) {
    const std::uint64_t row_seed = seed + static_cast<std::uint64_t>(r);
    std::vector<float> row;
    switch (static_cast<Kind16>((first + r) % kKinds16)) {
      case Kind16::randn:
        row = make_input(InputKind::randn, 1, cols, row_seed);
        break;
      case Kind16::outliers:
        row = make_input(InputKind::outliers, 1, cols, row_seed);
        break;
      case Kind16::offset:
        row = make_input(InputKind::randn, 1, cols, row_seed);
        for (float& v : row) v += randn_offset(t);
        break;
      case Kind16::arange:
        row = make_input(InputKind::arange, 1, cols, row_seed);
        for (int c = 0; c < cols; ++c) row[static_cast<std::size_t>(c)] = c % kArangePeriod;
        break;
      case Kind16::ones:
        row = make_input(InputKind::ones, 1, cols, row_seed);
        break;
    }
    x.insert(x.end(), row.begin(), row.end());
  }
  return x;
}

// x, gamma and beta rounded to t, the fp64 reference from the rounded values.
Problem make_rounded_problem(const std::vector<float>& x, int rows, int cols, const Affine& affine,
                             Dtype t) {
  return make_problem(round_elements(x, t), rows, cols,
                      {round_elements(affine.gamma, t), round_elements(affine.beta, t)});
}

// Every (kernel, type, shape): rows of every kind without gamma and beta (from randn on), rows
// of every kind with them (from randn + offset on), and again misaligned wherever the aligned
// run took vectors. At least `min_rows` rows: 3 make the two runs' rows cover all five kinds
// (and 3 is no multiple of any rows per block, 4 to 128). The block strategies give each row a
// block of its own, so more rows only repeat it: they take at most 5 rows (one of each kind),
// keeping the simulator's time down; the warp strategy keeps every row, where the count matters.
template <Backend B>
void check_typed_shapes(const std::vector<KernelShape>& shapes, int min_rows) {
  for (Dtype t : k16BitTypes) {
    for (const TypedNamedKernel& k : typed_kernel_ladder<B>(t)) {
      for (const KernelShape& shape : shapes) {
        if (shape.cols > k.max_cols) continue;
        const bool per_block = std::string(k.name) == "block_cached" ||
                               std::string(k.name) == "block_uncached" ||
                               choose_strategy(shape.cols, Kernels<B>::max_dynamic_shared_bytes(),
                                               2) != Strategy::warp_per_row;
        const int rows = std::max(shape.rows, min_rows);
        const KernelShape s{per_block ? std::min(rows, kKinds16) : rows, shape.cols};
        const Problem plain =
            make_rounded_problem(make_mixed_x(s.rows, s.cols, kSeed, t, 0), s.rows, s.cols, {}, t);
        const Problem affine = make_rounded_problem(make_mixed_x(s.rows, s.cols, kSeed + 9, t, 2),
                                                    s.rows, s.cols, make_affine(s.cols, kSeed), t);
        const bool vectors = run_and_check_typed<B>(k, plain, t, false);
        CHECK(vectors == (s.cols % vec_width(t) == 0));  // DeviceBuffers are 16-byte aligned
        run_and_check_typed<B>(k, affine, t, false);
        if (vectors) run_and_check_typed<B>(k, affine, t, true);
      }
    }
  }
}

// The fp32 shapes: every group width, every registers-per-lane bucket with one past it, the
// warp limit and one past it (vectors of 8 halves from 136 columns in the warp strategy).
template <Backend B>
void every_strategy_equals_the_cpu_welford_step_in_16_bits() {
  check_typed_shapes<B>(
      test::kRaceMode ? kRaceShapes : kKernelShapes, 3);
}

// The 16-bit boundaries of block_cached: the first row past 48 KiB (24529 halves, opted in)
// and the device's limit (116176 on the simulator) with one past it (uncached). One row per
// run, as for fp32's long rows: randn, and randn + offset with gamma and beta.
template <Backend B>
void long_16_bit_rows_equal_the_cpu_welford_step() {
  const int default_cached = max_cached_cols(kDefaultDynamicSharedBytes, 2);
  const int max_cached = max_cached_cols(Kernels<B>::max_dynamic_shared_bytes(), 2);
  std::vector<KernelShape> shapes = {{1, default_cached + 1}};
  if (!test::kRaceMode) {
    shapes.push_back({1, max_cached});
    shapes.push_back({1, max_cached + 1});
  }
  check_typed_shapes<B>(shapes, 1);
}

// The strategy at each boundary of the rule, for every element type (16-bit rows cache
// twice as long).
template <Backend B>
void dispatcher_reports_the_strategy_it_launched() {
  const std::size_t limit = Kernels<B>::max_dynamic_shared_bytes();
  for (Dtype t : kDtypes) {
    const int max_cached = max_cached_cols(limit, dtype_bytes(t));
    for (int cols : {1, kWarpMaxCols, kWarpMaxCols + 1, max_cached, max_cached + 1}) {
      const std::string dtype = to_string(t);
      CAPTURE(dtype);
      CAPTURE(cols);
      const std::vector<float> x = make_input(InputKind::randn, 1, cols, kSeed);
      DeviceBuffer<unsigned char> dx(B, encode_elements(x, t)), dy(B, dx.size());
      DeviceBuffer<float> dmean(B, 1), drstd(B, 1);
      const TypedLayerNormArgs a{dx.data(),    nullptr, nullptr, dy.data(),   dmean.data(),
                                 drstd.data(), 1,       cols,    kDefaultEps, t};
      CHECK(Kernels<B>::layernorm(a) == choose_strategy(cols, limit, dtype_bytes(t)));
    }
  }
}

template <Backend B>
void constant_rows_give_rstd_one_over_sqrt_eps() {
  for (Dtype t : kDtypes) {
    for (const TypedNamedKernel& k : typed_kernel_ladder<B>(t)) {
      for (int cols : {1, 2, 33, 1000, 1025, 4096}) {
        if (cols > k.max_cols) continue;
        const std::string kernel = k.name;
        const std::string dtype = to_string(t);
        CAPTURE(kernel);
        CAPTURE(dtype);
        CAPTURE(cols);
        const int rows = 5;
        std::vector<float> x(static_cast<std::size_t>(rows) * cols);
        for (int r = 0; r < rows; ++r)  // a different constant per row, 1e4 among them
          std::fill(x.begin() + r * cols, x.begin() + (r + 1) * cols, r == 3 ? 1e4f : r - 2.f);
        x = round_elements(x, t);  // 1e4 is 9984 in bf16: the kernel's constant
        DeviceBuffer<unsigned char> dx(B, encode_elements(x, t)), dy(B, dx.size());
        DeviceBuffer<float> dmean(B, rows), drstd(B, rows);
        k.launch({dx.data(), nullptr, nullptr, dy.data(), dmean.data(), drstd.data(), rows, cols,
                  kDefaultEps, t});
        const std::vector<float> rstd = drstd.download(), mean = dmean.download();
        for (int r = 0; r < rows; ++r) {
          CAPTURE(r);
          // Exact: every combine of equal means has delta = 0, so m2 stays 0.
          CHECK(mean[r] == x[static_cast<std::size_t>(r) * cols]);
          CHECK(rstd[r] == rstd_of(0.f, kDefaultEps));
        }
        // y = 0 * rstd * 1 + 0 = +0 in every type: every byte of y is zero.
        const std::vector<unsigned char> y = dy.download();
        CHECK(std::count(y.begin(), y.end(), 0) == static_cast<std::ptrdiff_t>(y.size()));
      }
    }
  }
}

template <Backend B>
void kernels_reject_rows_they_cannot_hold() {
  DeviceBuffer<unsigned char> d(B, 16);
  DeviceBuffer<float> stats(B, 4);
  for (Dtype t : kDtypes) {
    const std::string dtype = to_string(t);
    CAPTURE(dtype);
    TypedLayerNormArgs a{d.data(),     nullptr, nullptr,          d.data(),    stats.data(),
                         stats.data(), 1,       kWarpMaxCols + 1, kDefaultEps, t};
    CHECK_THROWS_AS(Kernels<B>::warp_per_row(a), std::invalid_argument);
    a.cols = max_cached_cols(Kernels<B>::max_dynamic_shared_bytes(), dtype_bytes(t)) + 1;
    CHECK_THROWS_AS(Kernels<B>::block_cached(a), std::invalid_argument);
    a.cols = 0;
    CHECK_THROWS_AS(Kernels<B>::block_uncached(a), std::invalid_argument);
  }
  // The fp32 entry points check the same way (they forward to the typed ones).
  const LayerNormArgs a{stats.data(), nullptr, nullptr,          stats.data(), stats.data(),
                        stats.data(), 1,       kWarpMaxCols + 1, kDefaultEps};
  CHECK_THROWS_AS(Kernels<B>::warp_per_row(a), std::invalid_argument);
}

}  // namespace

WB_KERNEL_TEST_CASE("every LayerNorm strategy equals the CPU Welford step in fp16 and bf16",
                    every_strategy_equals_the_cpu_welford_step_in_16_bits)
WB_KERNEL_TEST_CASE("long fp16 and bf16 rows up to one past the shared memory limit are right",
                    long_16_bit_rows_equal_the_cpu_welford_step)
WB_KERNEL_TEST_CASE("the dispatcher launches the strategy its rule names in every type",
                    dispatcher_reports_the_strategy_it_launched)
WB_KERNEL_TEST_CASE("constant rows give mean exact and rstd 1 over sqrt(eps) on every strategy",
                    constant_rows_give_rstd_one_over_sqrt_eps)
WB_KERNEL_TEST_CASE("kernels reject rows longer than their strategy holds",
                    kernels_reject_rows_they_cannot_hold)
