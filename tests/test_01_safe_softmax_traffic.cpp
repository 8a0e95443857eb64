// Chapter 01's kernels move the bytes their header states (suite "profile": the instrumented
// twin, CTest 01_safe_softmax/sim-profile; tests/traffic_checks.hpp).
#include <string>
#include <vector>

#include "chapters/01_safe_softmax/softmax.hpp"
#include "common/rung_buffers.hpp"
#include "tests/traffic_checks.hpp"

namespace {
using namespace wb;
}  // namespace

TEST_CASE("every rung moves the bytes its header states, on odd shapes" *
          doctest::test_suite("profile")) {
  const Ladder<RowArgs> ladder = ch01::kernel_ladder<Backend::sim>();
  std::vector<std::string> took;
  // 1 column, a partial warp, a partial block of 256, several blocks' worth per row.
  for (const auto& [rows, cols] : std::vector<std::pair<int, int>>{{3, 1}, {5, 37}, {2, 263}, {3, 1031}}) {
    RowBuffers buffers(Backend::sim, std::vector<float>(static_cast<std::size_t>(rows) * cols, 0.5f),
                       rows, cols, Dtype::fp32);
    const std::vector<std::string> t = test::check_ladder_traffic(
        ladder, buffers.args, std::to_string(rows) + " x " + std::to_string(cols));
    took.insert(took.end(), t.begin(), t.end());
  }
  test::check_every_rung_counted(ladder, took);
}
