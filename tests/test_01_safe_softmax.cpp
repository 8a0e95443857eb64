// Chapter 01: safe softmax. The CPU step against fp64 and its laws, then every kernel
// against the CPU step and fp64 on adversarial shapes and inputs, and every thread's copy of
// the row's statistics.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "chapters/01_safe_softmax/softmax.hpp"
#include "common/buffer.hpp"
#include "common/inputs.hpp"
#include "common/reference.hpp"
#include "tests/softmax_checks.hpp"
#include "tests/support.hpp"

using namespace wb;
using namespace wb::ch01;

namespace {

constexpr std::uint64_t kSeed = 2024;

using Shape = test::RowShape;
const std::vector<Shape>& kShapes = test::kSoftmaxShapes;

// Bound on the CPU safe softmax's error against fp64, relative to each element: (111 + ln n) u
// for rows of n, under 128 u (the derivation is in tests/softmax_checks.hpp, which holds every
// kernel to it too).
using test::kSafeCpuRelBound;

// A kernel's floor on top of twice the CPU step's error (the tolerance policy's 2x rule), a
// bound on |kernel - cpu| relative to each element: the kernels sum d in float, and recursive
// summation of `cols` positive terms has a relative error of at most (cols - 1) u (Higham,
// Accuracy and Stability, eq. 4.4), where the CPU step rounds its double sum once (u); CUDA's
// expf is within 2 ulp and glibc's within 1, so the two exps of one term differ by up to
// 3 ulp, 6 u, in the numerator and (a weighted mean of such terms) in d: 12 u; the reciprocal
// and the product round on both sides: 4 u. On sim the exps are the host's, the same as the
// CPU step's.
double kernel_floor(int cols) {
  return (cols + 16) * kFloatEps;
}

}  // namespace

TEST_SUITE("cpu") {
  TEST_CASE("naive softmax overflows where safe softmax does not") {
    const std::vector<float> x = {1000.f, 999.f, 998.f};
    const std::vector<float> naive = softmax_naive(x, 1, 3);
    const std::vector<float> safe = softmax_safe(x, 1, 3);
    CHECK(std::isnan(naive[0]));  // e^1000 = inf, inf / inf = NaN
    const ErrorReport e = compare(safe, ref::softmax(x, 1, 3));
    WB_CHECK_WITHIN_REL(e, kSafeCpuRelBound);
  }

  TEST_CASE("naive softmax underflows to 0 over 0 where safe softmax does not") {
    const std::vector<float> x = {-1000.f, -1000.f};
    CHECK(std::isnan(softmax_naive(x, 1, 2)[0]));  // e^-1000 = 0, 0 / 0 = NaN
    const std::vector<float> safe = softmax_safe(x, 1, 2);
    CHECK(safe[0] == 0.5f);  // e^0 / (e^0 + e^0), exactly
    CHECK(safe[1] == 0.5f);
  }

  TEST_CASE("safe softmax is within its stated bound of fp64 on every input kind") {
    for (const Shape& s : kShapes) {
      CAPTURE(s.rows);
      CAPTURE(s.cols);
      test::for_every_input_kind(s.rows, s.cols, kSeed, [&](const std::vector<float>& x) {
        const ErrorReport e = compare(softmax_safe(x, s.rows, s.cols), ref::softmax(x, s.rows, s.cols));
        WB_CHECK_WITHIN_REL(e, kSafeCpuRelBound);
      });
    }
  }

  TEST_CASE("safe softmax is exactly shift invariant when the shift is exact") {
    // Any difference is a bug, hence exact equality (test::check_exact_shift_invariance).
    const int rows = 13, cols = 333;
    const std::vector<float> x = test::check_exact_shift_invariance(
        [](const std::vector<float>& v, int r, int c) { return softmax_safe(v, r, c); }, kSeed);
    // The naive form is not shift invariant in floating point: it overflows.
    std::vector<float> shifted = x;
    for (float& v : shifted) v += 1000.f;
    CHECK(std::isnan(softmax_naive(shifted, rows, cols)[0]));
  }

  TEST_CASE("the fp64 reference makes a row holding NaN all NaN, and it alone") {
    // NaN is not a masked entry: a kernel that propagates it must match, one that writes
    // zeros must not. Row 0 has a NaN after its max, row 1 before it, row 2 none.
    const float kNaN = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> x = {1.f, 5.f, kNaN, 2.f, kNaN, 5.f, 1.f, 2.f, 3.f};
    const std::vector<double> y = ref::softmax(x, 3, 3);
    for (int c = 0; c < 6; ++c) CHECK(std::isnan(y[std::size_t(c)]));
    for (int c = 6; c < 9; ++c) CHECK(std::isfinite(y[std::size_t(c)]));
  }

  TEST_CASE("every row of safe softmax sums to 1 and a fully -inf row is all zeros") {
    const int rows = 30, cols = 781;
    test::for_every_input_kind(rows, cols, kSeed, [&](const std::vector<float>& x) {
      const std::vector<float> y = softmax_safe(x, rows, cols);
      for (int r = 0; r < rows; ++r) {
        CAPTURE(r);
        double sum = 0.0;
        bool masked = true;
        for (int c = 0; c < cols; ++c) {
          sum += y[r * cols + c];
          masked = masked && x[r * cols + c] == -std::numeric_limits<float>::infinity();
        }
        // Each y_i is within kSafeCpuRelBound of its exact value, so their sum is within
        // kSafeCpuRelBound of 1 (summed here in double, exactly enough).
        if (masked) CHECK(sum == 0.0);
        else CHECK(std::fabs(sum - 1.0) <= kSafeCpuRelBound);
      }
    });
  }
}

namespace {

template <Backend B>
void every_kernel_equals_the_cpu_step() {
  // The tolerance policy: at most twice the CPU step's error, plus the float-sum floor; and
  // at most twice the CPU step's stated bound, plus the same floor.
  const auto safe = [](const std::vector<float>& x, int r, int c) { return softmax_safe(x, r, c); };
  test::check_softmax_ladder(B, kernel_ladder<B>(), safe, kernel_floor,
                             [](int) { return kSafeCpuRelBound; }, kSeed);
}

// The reductions leave the row's m and d in every thread (block_per_row: read back from
// scratch[0]; warp_shuffle: warp_all_reduce in every lane, every warp reducing the 8 warp
// results itself): each thread normalizes its entries with the same bits.
template <Backend B>
void every_thread_normalizes_with_the_same_statistics() {
  test::check_softmax_lanes_agree(B, kernel_ladder<B>(), {Dtype::fp32}, kSeed);
}

}  // namespace

WB_KERNEL_TEST_CASE("every kernel equals the CPU safe softmax on adversarial shapes and inputs",
                    every_kernel_equals_the_cpu_step)
WB_KERNEL_TEST_CASE("equal entries of a row give equal bits whichever thread holds them",
                    every_thread_normalizes_with_the_same_statistics)
