// Chapter 02: online softmax. The recurrence's invariant on every prefix, the CPU step
// against chapter 01's under the tolerance policy, then the kernel against the CPU step.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "chapters/01_safe_softmax/softmax.hpp"
#include "chapters/02_online_softmax/online_softmax.hpp"
#include "chapters/02_online_softmax/online_update.hpp"
#include "common/buffer.hpp"
#include "common/inputs.hpp"
#include "common/reference.hpp"
#include "tests/softmax_checks.hpp"
#include "tests/support.hpp"

using namespace wb;
using namespace wb::ch02;

namespace {

constexpr std::uint64_t kSeed = 2024;
constexpr float kInf = std::numeric_limits<float>::infinity();

using Shape = test::RowShape;
const std::vector<Shape>& kShapes = test::kSoftmaxShapes;

// online_d_bound (the recurrence's d' against fp64), online_cpu_floor (this step against
// chapter 01's) and online_cpu_bound (this step against fp64) are in tests/softmax_checks.hpp:
// chapter 03's tests build on them.
using test::kHostExpErr;
using test::online_cpu_floor;
using test::online_d_bound;

// The kernel against the CPU step: it runs the same recurrence on the same operands in the
// same order, so it differs from the CPU only where CUDA's expf differs from glibc's (at most
// 2 + 1 ulp, 6 u, per exp) and where nvcc fuses d' e + e into one fma (one rounding fewer,
// u). Each term passes at most cols exps and cols fused steps in d', and one exp in y_i:
// |kernel - cpu| <= (7 cols + 6) u relative; + 6 u for the reciprocal and the product.
// On sim the operations are the host's own, and the difference is 0.
double online_kernel_floor(int cols) {
  return (7.0 * cols + 12) * kFloatEps;
}

// fp64 sum_{j<=i} e^{x_j - m} for a float m (the invariant eq. 3 at m = m_i).
double exact_d(const std::vector<float>& x, int i, float m) {
  if (m == -kInf) return 0.0;
  double d = 0.0;
  for (int j = 0; j <= i; ++j) d += std::exp(static_cast<double>(x[j]) - m);
  return d;
}

}  // namespace

TEST_SUITE("cpu") {
  TEST_CASE("the online recurrence keeps its invariant on every prefix of every input kind") {
    // Eq. (3): after i steps, m = max_{j<=i} x_j exactly (fmaxf does not round) and
    // d' = sum_{j<=i} e^{x_j - m_i}: the induction hypothesis of the page's proof, checked at
    // every i, not only at the end.
    const int cols = 300;
    test::for_every_input_kind(1, cols, kSeed, [&](const std::vector<float>& x) {
      MD md{-kInf, 0.f};
      float m_exact = -kInf;
      for (int i = 0; i < cols; ++i) {
        CAPTURE(i);
        md = online_update(md, x[i]);
        m_exact = std::fmax(m_exact, x[i]);
        REQUIRE(md.m == m_exact);
        const double d = exact_d(x, i, m_exact);
        REQUIRE(std::isfinite(md.d));
        if (d == 0.0)
          REQUIRE(md.d == 0.f);  // a -inf prefix: (-inf, 0), never NaN
        else
          REQUIRE(std::fabs(md.d - d) <= online_d_bound(i + 1, kHostExpErr) * d);
      }
    });
  }

  TEST_CASE("a prefix of -inf entries stays at the identity and never makes NaN") {
    const std::vector<float> x = {-kInf, -kInf, 2.f, -kInf, 2.f};
    MD md{-kInf, 0.f};
    md = online_update(md, x[0]);
    CHECK(md.m == -kInf);
    CHECK(md.d == 0.f);
    md = online_update(md, x[1]);
    CHECK(md.m == -kInf);
    CHECK(md.d == 0.f);
    md = online_update(md, x[2]);
    CHECK(md.m == 2.f);
    CHECK(md.d == 1.f);  // 0 e^{-inf} + e^0, exactly
    md = online_update(md, x[3]);
    CHECK(md.d == 1.f);  // 1 e^0 + e^{-inf}, exactly
    md = online_update(md, x[4]);
    CHECK(md.d == 2.f);
    const std::vector<float> masked(7, -kInf);
    const std::vector<float> y = softmax_online(masked, 1, 7);
    for (float v : y) CHECK(v == 0.f);  // chapter 01's convention for a fully -inf row
  }

  TEST_CASE("online softmax is within twice the safe softmax error plus the recurrence floor") {
    for (const Shape& s : kShapes) {
      CAPTURE(s.rows);
      CAPTURE(s.cols);
      test::for_every_input_kind(s.rows, s.cols, kSeed, [&](const std::vector<float>& x) {
        const std::vector<double> ref = ref::softmax(x, s.rows, s.cols);
        const ErrorReport previous = compare(ch01::softmax_safe(x, s.rows, s.cols), ref);
        const ErrorReport online = compare(softmax_online(x, s.rows, s.cols), ref);
        // The tolerance policy: at most twice chapter 01's error, plus the floor above.
        WB_CHECK_WITHIN_REL(online, chain_bound(previous.max_rel, online_cpu_floor(s.cols)));
      });
    }
  }

  TEST_CASE("online softmax is exactly shift invariant when the shift is exact") {
    // As in chapter 01: every m_i shifts by c exactly, so every x_j - m_i and m_{i-1} - m_i is
    // the same float, and the recurrence sees identical operands. Exact equality.
    test::check_exact_shift_invariance(
        [](const std::vector<float>& v, int r, int c) { return softmax_online(v, r, c); }, kSeed);
  }
}

namespace {

template <Backend B>
void every_kernel_equals_the_cpu_step() {
  // The tolerance policy: at most twice the CPU step's error, plus the floor above; and at
  // most twice the CPU step's stated bound, plus the same floor.
  const auto online = [](const std::vector<float>& x, int r, int c) { return softmax_online(x, r, c); };
  test::check_softmax_ladder(B, kernel_ladder<B>(), online, online_kernel_floor,
                             test::online_cpu_bound, kSeed);
}

}  // namespace

WB_KERNEL_TEST_CASE("every kernel equals the CPU online softmax on adversarial shapes and inputs",
                    every_kernel_equals_the_cpu_step)
