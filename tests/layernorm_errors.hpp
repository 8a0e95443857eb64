// What chapter 07's tests share: the error unit and the a priori bounds of the CPU steps and
// the kernels (welford_layernorm.md, section "How accurate"), the inputs, and each step's
// errors against fp64 row by row, in those units.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "chapters/07_welford_layernorm/layernorm.hpp"
#include "chapters/07_welford_layernorm/welford.hpp"
#include "common/compare.hpp"
#include "common/dtype.hpp"
#include "common/inputs.hpp"
#include "common/reference_layernorm.hpp"

namespace wb::ch07::testing {

inline constexpr std::uint64_t kSeed = 2024;
inline constexpr double u = kFloatEps;  // 2^-24, the unit roundoff of float

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
// - one update rounds delta (u |delta| <= 2 u A), the reciprocal 1 / n_k and the product
//   delta * (1 / n_k) (each u |delta| / n_k <= 2 u A / n_k, so 6 u A / n_k with delta's) and
//   the sum (u A): r_k <= u A (1 + 6 / k); an error made at step k is scaled by (1 - 1/j) at
//   every later step j, a product of k / n: sum_k (k / n) r_k <= u A ((n+1)/2 + 6);
// - one combine rounds delta (2 u A), w_b and the product (2 u A) and the sum (u A), and
//   passes on a convex mix of its operands' errors: + 5 u A per level.
inline double mean_bound(Tree t) {
  return (t.leaf + 1) / 2.0 + 6 + 5.0 * t.depth;
}

// rstd's relative error, in units of u K: m2 adds terms delta_k (x_k - mean_k) whose factors
// carry the means' errors e; to first order the sum changes by at most 2 e sum_k |x_k - mean|,
// and by Cauchy-Schwarz sum_k |x_k - mean| <= sqrt(2 n m2): a relative 2 sqrt(2) e / s
// <= 2.83 mean_bound. Summing m2 rounds by (leaf + 2) u and each combine by 3 u; var + eps,
// sqrt and 1 / x add 3 u; rstd's relative error is half var's plus those.
inline double rstd_bound(Tree t) {
  return 1.5 * mean_bound(t) + (t.leaf + 3.0 * t.depth) / 2 + 5;
}

// Two-pass: the float sum of n values is within (n - 1) u sum |x_j| <= (n - 1) u n A, so the
// mean is within (n + 1) u A. The deviations' sum of squares is second order in the mean's
// error, (e / s)^2 <= ((n + 1) u K)^2, plus (n + 3) u for its own roundings.
inline double two_pass_mean_bound(int n) {
  return n + 1.0;
}
inline double two_pass_rstd_bound(int n, double K) {
  const double e = (n + 1.0) * u * K;  // the mean's error over s
  return (e * e / (u * K) + n + 3.0) / 2 + 5;
}

// The y bound from the mean's and rstd's: y = (x - mean) rstd gamma + beta, with
// Z = max_j |x_j - mean| rstd (from the reference, <= sqrt(n)), G = max |gamma| and
// B = max |beta|: |dy| <= G (e_mean + Z (e_rstd + 4 u)) + u (G Z + B), in units of u K >= u.
inline double y_bound(double b_mean, double b_rstd, double Z, double G, double B) {
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

inline Problem make_problem(std::vector<float> x, int rows, int cols, Affine affine = {},
                            float eps = kDefaultEps) {
  Problem p{std::move(x), rows, cols, eps, std::move(affine), {}};
  p.ref = ref::layernorm(p.x, rows, cols, eps, p.affine.gamma, p.affine.beta);
  return p;
}

// ------------------------------------------------------------------------------------------
// eps, drawn per case
// ------------------------------------------------------------------------------------------
//
// Every test draws eps per case from these five, so that a step, a launcher or a dispatcher
// that adds kDefaultEps instead of the caller's eps fails. rstd = 1 / sqrt(var + eps): on a
// row of variance var, eps' in place of eps moves rstd by a relative |eps' - eps| / (2 (var +
// eps)) to first order. On randn rows (var about 1, K about 4, u K about 2.4e-7) 1e-3, 0.1 and 1
// in place of 1e-5 move it by 5e-4 to 0.29: 2000 to 1e6 units of u K, where the bounds of
// every step and rung are at most a few hundred units. On constant rows (var = 0) rstd is
// 1 / sqrt(eps) exactly (the constant-row tests): every value gives another, 1e-7 10 times
// 1e-5's. 1e-7 is also smaller than the default, so a step that clamps eps up to it fails too.
inline constexpr std::array<float, 5> kEpsValues = {kDefaultEps, 1e-7f, 1e-3f, 0.1f, 1.f};

// The draws: the values in a seeded order, reshuffled after every pass, so each aligned run
// of values().size() cases sees every value once (each rung, shape and kind family meets
// several, none left with the default alone), in an order the seed sets.
class EpsDraws {
 public:
  explicit EpsDraws(std::uint64_t seed,
                    std::vector<float> values = {kEpsValues.begin(), kEpsValues.end()})
      : rng_(seed), values_(std::move(values)) {}
  float next() {
    if (next_ == 0) std::shuffle(values_.begin(), values_.end(), rng_);
    const float eps = values_[next_];
    next_ = (next_ + 1) % values_.size();
    return eps;
  }
  const std::vector<float>& values() const { return values_; }

 private:
  std::mt19937_64 rng_;
  std::vector<float> values_;
  std::size_t next_ = 0;
};

// The input kinds of common/inputs.hpp that make sense for LayerNorm (-inf entries make the
// whole row NaN, tested separately), plus randn at an offset of 1e6, and randn scaled by 2^54
// at an offset of 1e20 (offset_1e20, below).
enum class Kind { randn, outliers, offset_1e4, offset_1e6, ones, arange, offset_1e20 };
inline const std::vector<Kind> kKinds = {Kind::randn,      Kind::outliers, Kind::offset_1e4,
                                         Kind::offset_1e6, Kind::ones,     Kind::arange,
                                         Kind::offset_1e20};
inline constexpr float kOffset1e6 = 1e6f;

// offset_1e20: 2^54 randn + 1e20, values about 1e20 with a standard deviation of 2^54 (1.8e16,
// 2048 of float's spacings at 1e20). Past |mean| = 1.8e19 a mean squared overflows float, so a
// Chan combine computed through an empty operand (delta = mean, delta^2 = inf, times a count or
// weight of 0: NaN) and the naive E[x^2] (x^2 = 1e40) break on these rows, while Welford's and
// two-pass's statistics are representable. The float row is exactly 2^54 z, z the float row
// randn + 5551.1 (1e20 / 2^54) rounded to multiples of 2^-11, and scaling by a power of 2 is
// exact in float (the mean by 2^54, m2 by 2^108: at most 32768 x 2^108 x 1.1 = 1.2e37, 28
// times below FLT_MAX; rstd by 2^-54, 5.5e-17, far from underflow): every step computes 2^54
// times its statistics of z, so its errors in units of u K are those of a randn row at an
// offset of 5551, like offset_1e4's (eps, at most 1, is negligible beside var = 3.2e32: the
// problem is z's with eps / 2^108). K = A rstd is about 5600.
inline constexpr float kOffset1e20 = 1e20f;
inline constexpr float kScale1e20 = 0x1p54f;

inline const char* to_string(Kind k) {
  // In the enum's order.
  constexpr const char* kNames[] = {"randn", "outliers x20", "randn + 1e4",      "randn + 1e6",
                                    "ones",  "arange",       "2^54 randn + 1e20"};
  return kNames[static_cast<int>(k)];
}

inline std::vector<float> make_x(Kind k, int rows, int cols, std::uint64_t seed) {
  // In the enum's order: the kinds of common/inputs.hpp, and randn under the two far offsets.
  constexpr InputKind kInputs[] = {InputKind::randn, InputKind::outliers, InputKind::large_offset,
                                   InputKind::randn, InputKind::ones,     InputKind::arange,
                                   InputKind::randn};
  std::vector<float> x = make_input(kInputs[static_cast<int>(k)], rows, cols, seed);
  if (k == Kind::offset_1e6)
    for (float& v : x) v += kOffset1e6;
  if (k == Kind::offset_1e20)
    for (float& v : x) v = kScale1e20 * v + kOffset1e20;  // the product is exact
  return x;
}

// gamma around 1 and beta around 0, as a trained LayerNorm's are.
inline Affine make_affine(int cols, std::uint64_t seed) {
  return {randn(static_cast<std::size_t>(cols), seed, 1.f, 0.5f),
          randn(static_cast<std::size_t>(cols), seed + 1, 0.f, 0.5f)};
}

inline double max_abs(const std::vector<float>& v, double empty_value) {
  double m = v.empty() ? empty_value : 0.0;
  for (float f : v) m = std::max(m, static_cast<double>(std::fabs(f)));
  return m;
}

// The input kinds that make sense in 16 bits, one per row, cycling from `first`: randn,
// outliers x20, randn + randn_offset(t) (1e2 for fp16, 1e1 for bf16, not 1e4: see there),
// arange modulo 2048 (fp16 overflows past 65504; it holds every integer up to 2048) and ones.
// The kernel and the references see them rounded to t (make_rounded_problem).
enum class Kind16 { randn, outliers, offset, arange, ones };
inline constexpr int kKinds16 = 5;
inline constexpr int kArangePeriod = 2048;

inline const char* to_string(Kind16 k) {
  constexpr const char* kNames[] = {"randn", "outliers x20", "randn + offset", "arange", "ones"};
  return kNames[static_cast<int>(k)];
}

inline std::vector<float> make_mixed_x(int rows, int cols, std::uint64_t seed, Dtype t, int first) {
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
inline Problem make_rounded_problem(const std::vector<float>& x, int rows, int cols,
                                    const Affine& affine, Dtype t, float eps = kDefaultEps) {
  return make_problem(round_elements(x, t), rows, cols,
                      {round_elements(affine.gamma, t), round_elements(affine.beta, t)}, eps);
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
inline Errors scaled_errors(const Problem& p, const LayerNormOut& out,
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
    // A value or a reference that is not finite counts as a mismatch (the rows meant to hold
    // -inf are checked on their own), never as an error std::max could drop.
    auto track = [&](double actual, double reference, double scale, double* slot) {
      if (!std::isfinite(actual) || !std::isfinite(reference)) {
        ++e.nonfinite;
        return;
      }
      *slot = std::max(*slot, std::fabs(actual - reference) * scale / unit);
    };
    track(out.mean[r], p.ref.mean[r], rstd_ref, &re.mean);   // in units of s: what y sees
    track(out.rstd[r], rstd_ref, 1.0 / rstd_ref, &re.rstd);  // relative
    for (std::size_t c = 0; c < n; ++c) {
      const double y = out.y[r * n + c], ref = p.ref.y[r * n + c];
      if (!std::isfinite(y) || !std::isfinite(ref)) {
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
    for (double q : {re.mean / b.mean, re.rstd / b.rstd, re.y / b.y}) {
      if (std::isnan(q)) return std::numeric_limits<double>::infinity();  // not dropped by max
      worst = std::max(worst, q);
    }
  }
  return worst;
}

// The bounds of a Welford tree, for any row.
inline auto tree_bounds(Tree t) {
  return [t](const RowErrors& re, double G, double B) {
    const double bm = mean_bound(t), br = rstd_bound(t);
    return Bounds{bm, br, y_bound(bm, br, re.Z, G, B)};
  };
}

inline auto two_pass_bounds(int n) {
  return [n](const RowErrors& re, double G, double B) {
    const double bm = two_pass_mean_bound(n), br = two_pass_rstd_bound(n, re.K);
    return Bounds{bm, br, y_bound(bm, br, re.Z, G, B)};
  };
}

}  // namespace wb::ch07::testing
