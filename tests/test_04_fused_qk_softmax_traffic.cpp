// Chapter 04's kernel moves the bytes its header states (suite "profile": the instrumented
// twin, CTest 04_fused_qk_softmax/sim-profile; tests/traffic_checks.hpp).
#include "chapters/04_fused_qk_softmax/fused_softmax.hpp"
#include "tests/traffic_checks.hpp"

using namespace wb;

TEST_CASE("every rung moves the bytes its header states, on odd shapes" *
          doctest::test_suite("profile")) {
  // One query and one key; a short last Q tile of 8 rows and K tile of 32 keys, with two
  // heads; lq > lk; an odd head dimension past 32. The rung takes no causal mask.
  test::check_traffic(ch04::kernel_ladder<Backend::sim>(),
                      test::AttentionTrafficCases{{{1, 1, 1, 1}, {2, 9, 33, 7}, {1, 19, 5, 37}},
                                                  {Dtype::fp32},
                                                  /*causal=*/false});
}
