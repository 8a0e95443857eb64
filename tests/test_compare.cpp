// The comparison every test measures with (common/compare.hpp): a NaN or an infinity never
// compares as equal to a finite reference, and a bound that is not finite passes nothing.
#include <cmath>
#include <limits>
#include <vector>

#include "common/compare.hpp"
#include "tests/support.hpp"

using namespace wb;

namespace {
using Floats = std::vector<float>;
using Doubles = std::vector<double>;
}  // namespace

TEST_SUITE("cpu") {
  TEST_CASE("a NaN or an infinity where the reference is finite is a mismatch at any tolerance") {
    const double kNaN = std::numeric_limits<double>::quiet_NaN();
    const std::vector<double> reference = {1.0, 2.0, 3.0};
    const ErrorReport nan = compare(Floats{1.f, NAN, 3.f}, reference);
    CHECK(nan.nonfinite_mismatches == 1);
    CHECK_FALSE(nan.within(1e30));
    CHECK_FALSE(nan.within_rel(1e30));
    const ErrorReport inf = compare(Floats{1.f, 2.f, INFINITY}, reference);
    CHECK(inf.nonfinite_mismatches == 1);
    CHECK_FALSE(inf.within(1e30));
    // The other way round: a finite value where the reference is NaN or -inf.
    CHECK_FALSE(compare(Floats{1.f, 2.f}, Doubles{kNaN, 2.0}).within(1e30));
    CHECK_FALSE(compare(Floats{1.f, 2.f}, Doubles{-INFINITY, 2.0}).within(1e30));
    // Matching in kind is no error: -inf for -inf, NaN for NaN.
    CHECK(compare(Floats{-INFINITY, NAN}, Doubles{-INFINITY, kNaN}).within(0.0));
  }

  TEST_CASE("a bound that is not finite passes nothing, not even an exact result") {
    const ErrorReport exact = compare(Floats{1.f, 2.f}, Doubles{1.0, 2.0});
    CHECK(exact.within(0.0));
    CHECK_FALSE(exact.within(INFINITY));
    CHECK_FALSE(exact.within_rel(INFINITY));
    CHECK_FALSE(exact.within(std::nan("")));
  }
}
