// Chapter 11's kernels move the bytes their headers state (chapter 06's per-Q-tile traffic with
// 128 x 128 tiles, the causal mask's skipped K/V tiles included; TMA's zero fill past a head's
// rows reads nothing), and launch with the shared memory their headers state (suite "profile":
// the instrumented twin, CTest 11_fa3_hopper/sim-profile; tests/traffic_checks.hpp).
#include <algorithm>
#include <climits>
#include <cstddef>
#include <tuple>
#include <vector>

#include "chapters/11_fa3_hopper/fa3_hopper.hpp"
#include "common/buffer.hpp"
#include "common/sim/access.hpp"
#include "tests/traffic_checks.hpp"

namespace {
using namespace wb;

/// The one launch `rung` makes on `shape` (fp16, randn scores), as the profile recorded it.
sim::LaunchProfile one_launch(const Rung<AttentionArgs>& rung, const AttentionShape& shape,
                              bool causal) {
  const float scale = default_scale(shape.d);
  const AttentionInputs in = make_attention_inputs(ScoreKind::randn, shape, scale, 9);
  AttentionBuffers buffers(Backend::sim, in, shape, scale, causal, Dtype::fp16,
                           rung.limits.outputs);
  const std::vector<sim::LaunchProfile> launches =
      test::profile_launches([&] { run_rung(rung, buffers.args); });
  REQUIRE(launches.size() == 1);
  return launches[0];
}
}  // namespace

TEST_CASE("every rung moves the bytes its header states, on odd shapes" *
          doctest::test_suite("profile")) {
  const Ladder<AttentionArgs> ladder = ch11::kernel_ladder<Backend::sim>();
  int smallest_br = INT_MAX;  // tiles_visited takes ceil(lq / Br) ints of the smallest Br
  for (const Rung<AttentionArgs>& rung : ladder)
    smallest_br = std::min(smallest_br, rung.facts.tiles(64).br);
  // A short last Q tile (a warpgroup with no row), under the mask Q tiles that visit 2 of 3
  // K/V tiles and, with lq - lk >= 128, Q tiles that visit none; d = 64 and 128.
  test::check_traffic(
      ladder, test::AttentionTrafficCases{{{1, 70, 290, 64}, {1, 300, 9, 64}, {1, 66, 150, 128}},
                                          {Dtype::fp16, Dtype::bf16},
                                          /*causal=*/true,
                                          smallest_br});
}

TEST_CASE("every Hopper rung launches with the shared memory its header states" *
          doctest::test_suite("profile")) {
  // The Q tile (128 rows) and the K/V stages (128 keys each of K and V), 128-byte swizzled, from
  // a 1024-byte boundary (the 1024 bytes of slack are in the request): two stages, and three
  // where a warpgroup holds two at once (eq. 6); within the H100's 227 KiB (232448 bytes).
  using Rungs = ch11::Rungs<Backend::sim>;
  const std::size_t q64 = 16384, stage64 = 32768, slack = 1024;
  const std::vector<std::tuple<Rung<AttentionArgs>, int>> stages = {
      {Rungs::fa3_wgmma(), 2},           {Rungs::fa3_tma(), 2},
      {Rungs::fa3_warp_specialized(), 2}, {Rungs::fa3_pingpong(), 2},
      {Rungs::fa3_intra_warpgroup(), 3}};
  for (const auto& [rung, n] : stages) {
    CAPTURE(rung.name);
    CHECK(one_launch(rung, {1, 70, 130, 64}, false).dynamic_shared_bytes ==
          slack + q64 + std::size_t(n) * stage64);
    CHECK(one_launch(rung, {1, 70, 130, 128}, false).dynamic_shared_bytes ==
          slack + 2 * (q64 + std::size_t(n) * stage64));
    CHECK(slack + 2 * (q64 + std::size_t(n) * stage64) <= std::size_t(232448));
  }
}
