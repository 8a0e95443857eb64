// Chapter 01's kernels move the bytes their header states (suite "profile": the instrumented
// twin, CTest 01_safe_softmax/sim-profile; tests/traffic_checks.hpp).
#include "chapters/01_safe_softmax/softmax.hpp"
#include "tests/traffic_checks.hpp"

using namespace wb;

TEST_CASE("every rung moves the bytes its header states, on odd shapes" *
          doctest::test_suite("profile")) {
  // 1 column, a partial warp, a partial block of 256, several blocks' worth per row.
  test::check_traffic(ch01::kernel_ladder<Backend::sim>(),
                      test::RowTrafficCases{{{3, 1}, {5, 37}, {2, 263}, {3, 1031}}, {Dtype::fp32}});
}
