// Chapter 07: Welford LayerNorm on the CPU: the CPU ladder against fp64 (and the naive
// formula shown to fail), and the arguments it refuses. The error unit and the bounds are in
// tests/layernorm_errors.hpp; the laws of Chan's combine in test_07_welford_layernorm_combine.cpp,
// the kernels' tests in test_07_welford_layernorm_kernels.cpp.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
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
    EpsDraws eps_draws(kSeed);  // eps per case (layernorm_errors.hpp)
    for (const Shape& s : kCpuShapes) {
      for (Kind kind : kKinds) {
        for (bool affine : {false, true}) {
          CAPTURE(s.rows);
          CAPTURE(s.cols);
          const std::string input = to_string(kind);
          CAPTURE(input);
          CAPTURE(affine);
          const float eps = eps_draws.next();
          CAPTURE(eps);
          const Problem p = make_problem(make_x(kind, s.rows, s.cols, kSeed), s.rows, s.cols,
                                         affine ? make_affine(s.cols, kSeed) : Affine{}, eps);
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
    // E[x^2] ~ 1e8 is a float with spacing 8: the variance of 1 is lost (eq. 6), and where it
    // collapses to 0, rstd = 1 / sqrt(eps) against about 1. eps per case, from the values small
    // enough for that to show past 10 times the bound: rstd's bound and twice two-pass's error
    // come to up to 5000 units of u K = 6e-4 (n = 4096), an error of 3 in rstd, so the test
    // needs 1 / sqrt(eps) > 30, eps < 1e-3 (1e-5 and 1e-7 give 316 and 3162). Larger eps hide
    // the lost variance, which is why the default is small.
    EpsDraws eps_draws(kSeed + 1, {kDefaultEps, 1e-7f});
    for (const Shape& s : std::vector<Shape>{{8, 33}, {8, 1000}, {2, 4096}}) {
      CAPTURE(s.cols);
      const float eps = eps_draws.next();
      CAPTURE(eps);
      const Problem p = make_problem(make_input(InputKind::large_offset, s.rows, s.cols, kSeed),
                                     s.rows, s.cols, {}, eps);
      const Errors two_pass = scaled_errors(p, layernorm_two_pass(p.x, p.rows, p.cols, eps));
      const Errors welford = scaled_errors(p, layernorm_welford(p.x, p.rows, p.cols, eps));
      const Errors naive = scaled_errors(p, layernorm_naive(p.x, p.rows, p.cols, eps));
      const auto bounds = tree_bounds({s.cols, 0});
      CHECK(worst_ratio(welford, bounds, &two_pass) <= 1.0);
      // The same tolerance, failed by a factor of more than 10 (measured: 100 to 12000).
      CHECK(worst_ratio(naive, bounds, &two_pass) > 10.0);
      // And plainly: rstd is off by more than 50% on some row (measured: the variance
      // collapses to 0, rstd = 1 / sqrt(eps), 300x too large at eps = 1e-5, 3000x at 1e-7),
      // where Welford's is within its bound (the first check).
      const ErrorReport naive_rstd =
          compare(layernorm_naive(p.x, p.rows, p.cols, eps).rstd, p.ref.rstd);
      CHECK(naive_rstd.max_rel > 0.5);
    }
  }

  TEST_CASE("naive LayerNorm is fine without an offset") {
    // The failure is the offset's, not the formula's alone: at offset 0 the naive step meets
    // two-pass's bound (so the test above measures cancellation, nothing else).
    const int rows = 8, cols = 1000;
    for (float eps : kEpsValues) {
      CAPTURE(eps);
      const Problem p =
          make_problem(make_input(InputKind::randn, rows, cols, kSeed), rows, cols, {}, eps);
      const Errors naive = scaled_errors(p, layernorm_naive(p.x, rows, cols, eps));
      CHECK(worst_ratio(naive, two_pass_bounds(cols)) <= 1.0);
    }
  }

  TEST_CASE("a constant row has variance 0 and rstd exactly 1 over sqrt(eps)") {
    // Every eps, and constants up to the float range's edge: past |value| = 1.8e19 a Chan
    // combine computed through the empty state that blocked Welford starts from would square
    // the mean to inf and make NaN (inf x 0); returned as it is, the statistics stay exact.
    // (Two-pass is left out: its sum of n values of 3e38 overflows.)
    for (int cols : {1, 2, 33, 1000}) {
      for (float value : {0.f, 1.f, -3.5f, 1e4f, 1e6f, 1e19f, -1e20f, 1e30f, 3e38f, -FLT_MAX}) {
        for (float eps : kEpsValues) {
          CAPTURE(cols);
          CAPTURE(value);
          CAPTURE(eps);
          const std::vector<float> x(static_cast<std::size_t>(cols), value);
          // Welford: the first update sets mean = value exactly and every later delta is 0.
          const Welford s = welford_row(x.data(), cols);
          CHECK(s.mean == value);
          CHECK(s.m2 == 0.f);
          // 1 / sqrt(eps) written out, not through rstd_of: the steps under test call that.
          const float rstd = 1.f / std::sqrt(eps);
          const LayerNormOut out = layernorm_welford(x, 1, cols, eps);
          CHECK(out.mean[0] == value);
          CHECK(out.rstd[0] == rstd);
          CHECK(std::isfinite(out.rstd[0]));
          for (float y : out.y) CHECK(y == 0.f);
          const LayerNormOut blocked = layernorm_blocked_welford(x, 1, cols, 7, eps);
          CHECK(blocked.mean[0] == value);
          CHECK(blocked.rstd[0] == rstd);
          for (float y : blocked.y) CHECK(y == 0.f);
        }
      }
    }
  }

  TEST_CASE("a row whose variance overflows float gives rstd 0 and y = beta, never NaN") {
    // Where the true m2 passes FLT_MAX (3.4e38) no float step can represent the variance: the
    // float steps give m2 = +inf (every term Welford, Chan and two-pass add to m2 is >= 0, so
    // inf + inf, never inf - inf), var = inf, rstd = 1 / sqrt(inf + eps) = 0 exactly, and
    // y = (x - mean) 0 gamma + beta = beta exactly (x - mean is finite: the mean stays within
    // the row's values). The fp64 reference's rstd (1e-30 to 1e-25) is a float, but not the
    // variance it comes from: rstd = 0 is the stated result here, not an error within a bound.
    // Rows: {1e30, -1e30} (var 1e60), 1e25 randn (var 1e50) and 1e25 randn + 1e30 (m2 about
    // 1e53). eps drawn per case: 1 / sqrt(inf + eps) = 0 whatever it is.
    const int cols = 1000;
    std::vector<float> x(3 * cols);
    const std::vector<float> r = make_input(InputKind::randn, 2, cols, kSeed);
    for (int c = 0; c < cols; ++c) {
      x[static_cast<std::size_t>(c)] = c % 2 == 0 ? 1e30f : -1e30f;
      x[static_cast<std::size_t>(cols + c)] = 1e25f * r[static_cast<std::size_t>(c)];
      x[static_cast<std::size_t>(2 * cols + c)] =
          1e25f * r[static_cast<std::size_t>(cols + c)] + 1e30f;
    }
    const Affine affine = make_affine(cols, kSeed);
    EpsDraws eps_draws(kSeed + 2);
    const std::pair<const char*,
                    LayerNormOut (*)(const std::vector<float>&, int, float, const Affine&)>
        steps[] = {
            {"two_pass", [](const std::vector<float>& v, int n, float eps,
                            const Affine& a) { return layernorm_two_pass(v, 3, n, eps, a); }},
            {"welford", [](const std::vector<float>& v, int n, float eps,
                           const Affine& a) { return layernorm_welford(v, 3, n, eps, a); }},
            {"blocked_welford 7",
             [](const std::vector<float>& v, int n, float eps, const Affine& a) {
               return layernorm_blocked_welford(v, 3, n, 7, eps, a);
             }},
            {"blocked_welford 32",
             [](const std::vector<float>& v, int n, float eps, const Affine& a) {
               return layernorm_blocked_welford(v, 3, n, 32, eps, a);
             }}};
    for (const auto& [name, step] : steps) {
      for (bool with_affine : {false, true}) {
        const float eps = eps_draws.next();
        CAPTURE(name);
        CAPTURE(with_affine);
        CAPTURE(eps);
        const LayerNormOut out = step(x, cols, eps, with_affine ? affine : Affine{});
        for (int row = 0; row < 3; ++row) {
          CAPTURE(row);
          CHECK(std::isfinite(out.mean[static_cast<std::size_t>(row)]));
          CHECK(out.rstd[static_cast<std::size_t>(row)] == 0.f);
          for (int c = 0; c < cols; ++c) {
            const float beta = with_affine ? affine.beta[static_cast<std::size_t>(c)] : 0.f;
            CHECK(out.y[static_cast<std::size_t>(row * cols + c)] == beta);
          }
        }
      }
    }
  }

  TEST_CASE("a row holding -inf is NaN and leaves the other rows alone") {
    const int rows = 6, cols = 33;
    const std::vector<float> x = make_input(InputKind::neg_inf_rows, rows, cols, kSeed);
    for (float eps : kEpsValues) {
      CAPTURE(eps);
      const LayerNormOut out = layernorm_welford(x, rows, cols, eps);
      for (int r = 0; r < rows; ++r) {
        CAPTURE(r);
        const bool masked = r % 3 == 0;  // inputs.cpp: every third row is all -inf
        CHECK(std::isnan(out.y[static_cast<std::size_t>(r) * cols]) == masked);
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
