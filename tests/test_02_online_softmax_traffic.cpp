// Chapter 02's kernel moves the bytes its header states (suite "profile": the instrumented
// twin, CTest 02_online_softmax/sim-profile; tests/traffic_checks.hpp).
#include "chapters/02_online_softmax/online_softmax.hpp"
#include "tests/traffic_checks.hpp"

using namespace wb;

TEST_CASE("every rung moves the bytes its header states, on odd shapes" *
          doctest::test_suite("profile")) {
  // One row of 1 column; rows that leave most of a block of 128 threads idle; a second,
  // partial block of rows.
  test::check_traffic(ch02::kernel_ladder<Backend::sim>(),
                      test::RowTrafficCases{{{1, 1}, {3, 1}, {5, 37}, {131, 7}}, {Dtype::fp32}});
}
