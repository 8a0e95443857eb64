// Chapter 05's kernel moves the bytes its header states (suite "profile": the instrumented
// twin, CTest 05_fa1_subsum/sim-profile; tests/traffic_checks.hpp).
#include "chapters/05_fa1_subsum/fa1.hpp"
#include "tests/traffic_checks.hpp"

using namespace wb;

TEST_CASE("every rung moves the bytes its header states, on odd shapes" *
          doctest::test_suite("profile")) {
  // One query and one key; short last Q tiles of 8 rows and K/V tiles of 32 keys (Tc = 2),
  // with two heads; lq > lk; an odd head dimension past 32 (two output columns per lane for
  // some lanes); for the baseline's 64 x 64 product tiles, several of them in every direction
  // with short last ones (T(lq) = 2, T(lk) = 3, T(d) = 2). The rungs take no causal mask.
  test::check_traffic(
      ch05::kernel_ladder<Backend::sim>(),
      test::AttentionTrafficCases{{{1, 1, 1, 1}, {2, 9, 33, 7}, {1, 19, 5, 37}, {1, 70, 131, 65}},
                                  {Dtype::fp32},
                                  /*causal=*/false});
}
