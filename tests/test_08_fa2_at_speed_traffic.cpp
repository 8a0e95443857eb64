// Chapter 08's kernels move the bytes their headers state (chapter 06's per-Q-tile traffic,
// the causal mask's skipped K/V tiles included), and the rungs from fa2_ldmatrix on read and
// write shared memory without a bank conflict, which the bank-map launch shows unpadded rows
// would have (suite "profile": the instrumented twin, CTest 08_fa2_at_speed/sim-profile;
// tests/traffic_checks.hpp).
#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "chapters/08_fa2_at_speed/fa2_at_speed.hpp"
#include "common/buffer.hpp"
#include "common/half.hpp"
#include "common/shared_memory.hpp"
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
  const Ladder<AttentionArgs> ladder = ch08::kernel_ladder<Backend::sim>();
  int smallest_br = INT_MAX;  // tiles_visited takes ceil(lq / Br) ints of the smallest Br
  for (const Rung<AttentionArgs>& rung : ladder)
    smallest_br = std::min(smallest_br, rung.facts.tiles(64).br);
  // Short last Q tiles (a partial warp, warps with no row; 70 rows are 2 tiles of 64 and 1 of
  // 128); under the mask Q tiles that visit 2 of 3 K/V tiles (Bc 64) and, with lq - lk >= 64,
  // Q tiles that visit none; d = 64 and 128.
  test::check_traffic(
      ladder, test::AttentionTrafficCases{{{1, 70, 130, 64}, {1, 80, 9, 64}, {1, 66, 150, 128}},
                                          {Dtype::fp16, Dtype::bf16},
                                          /*causal=*/true,
                                          smallest_br});
}

TEST_CASE("the rungs from ldmatrix on have no shared-memory bank conflicts" *
          doctest::test_suite("profile")) {
  // Eqs. (2), (3): every ldmatrix matrix, 16-byte tile store and 32-bit fragment access spreads
  // over the banks (padded rows or the swizzle): wavefronts = the conflict-free count.
  // fa2_mma's plain loads of V's column pairs are 16-bit: two lanes share a 4-byte word, which
  // the banks serve at once, so it is conflict-free too. Every rung whose record claims it
  // (RungFacts::conflict_free): not chapter 06's wmma rung.
  for (const int d : {64, 128}) {
    for (const Rung<AttentionArgs>& rung : ch08::kernel_ladder<Backend::sim>()) {
      if (!rung.facts.conflict_free) continue;
      CAPTURE(rung.name);
      CAPTURE(d);
      test::check_no_bank_conflicts(one_launch(rung, {1, 130, 150, d}, /*causal=*/true).counts);
    }
  }
}

TEST_CASE("the last two rungs read from shared memory the fragment bytes of eq. (7)" *
          doctest::test_suite("profile")) {
  // Eq. (7) on lq = lk = 128 (one Q tile of Br = 128, two full K/V tiles, no mask), in bytes of
  // 16-bit elements. fa2_scheduled: 8 warps read their 16 rows of Q once (16 d elements) and
  // each tile's K and V whole (2 x 64 d). fa2_register_blocked: 4 warps read, per softmax step
  // of s keys, Q for their 32 rows (32 d) and the step's K and V (2 s d); s = 64 at d = 64 and
  // 32 at d = 128. Its other shared reads: none (the tiles arrive by cp.async, a store).
  for (const int d : {64, 128}) {
    const int tiles = 2, step = d == 64 ? 64 : 32;
    const std::uint64_t scheduled = 2u * 8 * (16 * d + tiles * 2 * 64 * d);
    const std::uint64_t blocked = 2u * 4 * tiles * (64 / step) * (32 * d + 2 * step * d);
    using Rungs = ch08::Rungs<Backend::sim>;
    for (const auto& [rung, expected] :
         {std::pair{Rungs::fa2_scheduled(), scheduled}, {Rungs::fa2_register_blocked(), blocked}}) {
      CAPTURE(rung.name);
      CAPTURE(d);
      CHECK(one_launch(rung, {1, 128, 128, d}, /*causal=*/false).counts.shared_load.bytes ==
            expected);
    }
    // Eq. (7): 10 d against 16 d bytes per row and tile at d = 64, 12 d against 16 d at d = 128
    // (Q once per step there), plus fa2_scheduled's one read of Q.
    CHECK(double(blocked) / double(scheduled) < (d == 64 ? 0.6 : 0.71));
  }
}

TEST_CASE("every rung launches with the shared memory its header states" *
          doctest::test_suite("profile")) {
  // Padded single buffers stay within the 48 KiB a launch may use as is; the double buffers of
  // d = 128 opt in (the launcher), within sm_80's 163 KiB. Two row tiles per warp: the Q tile of
  // 128 rows has its own place (eq. 7); the H100's 227 KiB hold two such blocks at d = 128.
  using Rungs = ch08::Rungs<Backend::sim>;
  const std::vector<std::tuple<Rung<AttentionArgs>, std::size_t, std::size_t>> bytes = {
      {Rungs::fa2_mma(), 18432, 34816},
      {Rungs::fa2_ldmatrix(), 18432, 34816},
      {Rungs::fa2_swizzle(), 16384, 32768},
      {Rungs::fa2_cp_async(), 32768, 65536},
      {Rungs::fa2_scheduled(), 32768, 65536},
      {Rungs::fa2_register_blocked(), 32768 + 16384, 65536 + 32768}};
  for (const auto& [rung, d64, d128] : bytes) {
    CAPTURE(rung.name);
    CHECK(one_launch(rung, {1, 70, 130, 64}, /*causal=*/false).dynamic_shared_bytes == d64);
    CHECK(one_launch(rung, {1, 70, 130, 128}, /*causal=*/false).dynamic_shared_bytes == d128);
  }
  CHECK(std::size_t(34816) <= kDefaultDynamicSharedBytes);
}

TEST_CASE("the bank-map launch: the same fragment from every layout, 8 wavefronts unpadded" *
          doctest::test_suite("profile")) {
  // Eq. (2): lane l's register i holds elements (g + 8 (i % 2), 2 t + 8 (i / 2)) and the next
  // column, g = l / 4, t = l % 4; element (r, c) of the tile is r * 64 + c, exact in fp16.
  std::vector<std::uint32_t> expected(32 * 4);
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) {
      const int r = lane / 4 + 8 * (i % 2), c = 2 * (lane % 4) + 8 * (i / 2);
      const auto bits = [](int v) {
        return std::uint32_t(fp16_detail::round_to_bits<fp16_detail::Binary16>(v));
      };
      expected[std::size_t(lane) * 4 + std::size_t(i)] =
          bits(r * ch08::kBankMapColumns + c) | bits(r * ch08::kBankMapColumns + c + 1) << 16;
    }
  DeviceBuffer<std::uint32_t> fragments(Backend::sim, 32 * 4);
  for (auto [layout, wavefronts] : {std::pair{ch08::BankLayout::unpadded, 8},
                                    {ch08::BankLayout::padded, 1},
                                    {ch08::BankLayout::swizzled, 1}}) {
    CAPTURE(static_cast<int>(layout));
    sim::start_profile(/*trace_global=*/true);
    ch08::Kernels<Backend::sim>::ldmatrix_bank_map(layout, fragments.data());
    const std::vector<sim::LaunchProfile> launches = sim::stop_profile();
    REQUIRE(launches.size() == 1);
    CHECK(fragments.download() == expected);
    // One ldmatrix: 4 matrices, each one phase of 8 rows.
    const sim::AccessCounts& loads = launches[0].counts.shared_load;
    CHECK(loads.requests == 1);
    CHECK(loads.ideal_units == 4);
    CHECK(loads.units == 4u * wavefronts);
    // The trace keeps its 32 row addresses, lane l in phase l / 8.
    int rows = 0;
    for (const sim::SharedAccess& a : launches[0].shared_trace) {
      if (!a.ldmatrix) continue;
      ++rows;
      CHECK(a.phase == a.lane / 8);
      CHECK(a.bytes == 16);
    }
    CHECK(rows == 32);
  }
}
