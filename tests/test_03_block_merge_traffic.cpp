// Chapter 03's kernels move the bytes their headers state (suite "profile": the instrumented
// twin, CTest 03_block_merge/sim-profile; tests/traffic_checks.hpp).
#include <string>
#include <vector>

#include "chapters/03_block_merge/block_merge.hpp"
#include "tests/traffic_checks.hpp"

namespace {
using namespace wb;
}  // namespace

TEST_CASE("every rung moves the bytes its header states, on odd shapes" *
          doctest::test_suite("profile")) {
  const Ladder<RowArgs> ladder = ch03::kernel_ladder<Backend::sim>();
  // Scalar accesses (cols a multiple of no vector width): 1 column, a partial warp, a partial
  // block of 256, a row past warp_registers' 1024 columns (fast_softmax picks block_cached).
  // 16-byte vectors (cols a multiple of 8, every type's width): lane_groups' narrow groups (24:
  // 6 or 3 vectors in a group of 8 or 4 lanes, some lanes idle), whole vectors per lane in
  // warp_registers, and the block rungs' past 1024 columns. 3, 5 and 7 rows leave part of a
  // block idle.
  const std::vector<std::string> took = test::check_row_ladder_traffic(
      ladder, {{3, 1}, {5, 37}, {2, 263}, {2, 1031}, {7, 24}, {3, 136}, {2, 1032}},
      {Dtype::fp32, Dtype::fp16, Dtype::bf16});
  test::check_every_rung_counted(ladder, took);
}
