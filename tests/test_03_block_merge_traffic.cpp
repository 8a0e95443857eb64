// Chapter 03's kernels move the bytes their headers state (suite "profile": the instrumented
// twin, CTest 03_block_merge/sim-profile; tests/traffic_checks.hpp).
#include <string>
#include <vector>

#include "chapters/03_block_merge/block_merge.hpp"
#include "chapters/03_block_merge/fast_plans.hpp"
#include "common/buffer.hpp"
#include "common/inputs.hpp"
#include "common/row_plan.hpp"
#include "common/warp.hpp"
#include "tests/block_merge_kernel_checks.hpp"
#include "tests/traffic_checks.hpp"

using namespace wb;

TEST_CASE("every rung moves the bytes its header states, on odd shapes" *
          doctest::test_suite("profile")) {
  // Scalar accesses (cols a multiple of no vector width): 1 column, a partial warp, a partial
  // block of 256, rows past warp_registers' 1024 floats (fast_softmax picks block_cached; 16-bit
  // rows stay in registers) and past its 2048 halves.
  // 16-byte vectors (cols a multiple of 8, every type's width): lane_groups' narrow groups (24:
  // 6 or 3 vectors in a group of 8 or 4 lanes, some lanes idle), whole vectors per lane in
  // warp_registers, and the block rungs' past 1024 columns. 3, 5 and 7 rows leave part of a
  // block idle.
  test::check_traffic(
      ch03::kernel_ladder<Backend::sim>(),
      test::RowTrafficCases{
          {{3, 1}, {5, 37}, {2, 263}, {2, 1031}, {2, 2049}, {7, 24}, {3, 136}, {2, 1032}},
          {Dtype::fp32, Dtype::fp16, Dtype::bf16}});
}

TEST_CASE("every rung moves 16-byte vectors exactly where its plan says, else single elements" *
          doctest::test_suite("profile")) {
  const Ladder<RowArgs> ladder = ch03::kernel_ladder<Backend::sim>();
  // Every global access the launch makes, lane by lane, has the one width: the one its plan
  // states (the two online rungs' plans never vectorize).
  for (Dtype t : {Dtype::fp32, Dtype::fp16, Dtype::bf16}) {
    for (const test::RowShape& s : test::kVectorWidthShapes) {
      RowBuffers buffers(Backend::sim,
                         std::vector<float>(static_cast<std::size_t>(s.rows) * s.cols, 0.5f),
                         s.rows, s.cols, t);
      for (const Rung<RowArgs>& rung : ladder) {
        if (!why_refused(rung, buffers.args).empty()) continue;
        INFO(rung.name, " on ", s.rows, " x ", s.cols, " ", to_string(t));
        const bool vectors =
            test::block_merge::rung_plan(rung, buffers.args.x, buffers.args.y, s.cols, t)
                .vectorized();
        CHECK(test::global_access_widths([&] { rung.launch(buffers.args); }) ==
              test::row_access_width(vectors, t));
      }
    }
  }
}

TEST_CASE("fast_softmax launches the kernel of its plan, at every boundary, in every type" *
          doctest::test_suite("profile")) {
  // warp_registers and block_cached move the same bytes and give right answers on every row
  // both hold, and so do the lane shapes of one rung: the kernel the simulator ran, with its
  // template arguments, is what shows that the launch follows the plan.
  const std::size_t limit = ch03::Kernels<Backend::sim>::max_dynamic_shared_bytes();
  const Rung<RowArgs> dispatcher = ch03::Rungs<Backend::sim>::fast_softmax();
  const auto flag = [](bool b) { return b ? std::string("true") : std::string("false"); };
  for (Dtype t : {Dtype::fp32, Dtype::fp16, Dtype::bf16}) {
    for (int cols : {1, 8, 33, 64, 65, 128, 129, 1020, 1024, 1025, 1032, 2048, 2049, 28912, 28913,
                     57824, 57825}) {
      const std::string dtype = to_string(t);
      CAPTURE(dtype);
      CAPTURE(cols);
      const std::vector<float> x = make_input(InputKind::randn, 1, cols, 5);
      DeviceBuffer<unsigned char> dx(Backend::sim, encode_elements(x, t)),
          dy(Backend::sim, dx.size());
      const RowPlan plan = ch03::plan_fast_softmax(
          cols, t, ch03::can_vectorize(dx.data(), dy.data(), cols, t), limit);
      // The plan the dispatcher's record states is the rule's on the simulator's device.
      const RowPlan stated =
          test::block_merge::rung_plan(dispatcher, dx.data(), dy.data(), cols, t);
      CHECK(stated.cache == plan.cache);
      CHECK(stated.threads == plan.threads);
      CHECK(stated.cols_per_lane == plan.cols_per_lane);
      CHECK(stated.width == plan.width);
      const std::vector<std::string> kernels = test::launched_kernels(
          [&] { run_rung(dispatcher, {dx.data(), dy.data(), 1, cols, t}); });
      REQUIRE(kernels.size() == 1);
      const std::string& k = kernels[0];
      // The register rows: a warp's kernel with its registers per lane, or a narrow group's
      // with one vector per lane; the block rows: with the row cached or not.
      std::string name, arguments;
      if (plan.cache == RowCache::registers && plan.threads == kWarpSize) {
        name = "::warp_registers_kernel<";
        arguments =
            ", " + std::to_string(plan.cols_per_lane) + ", " + flag(plan.vectorized()) + ">";
      } else if (plan.cache == RowCache::registers) {
        CHECK(plan.vectorized());
        CHECK(plan.cols_per_lane == vec_width(t));
        name = "::lane_groups_kernel<";
        arguments = ", " + std::to_string(plan.threads) + ">";
      } else {
        name = plan.cache == RowCache::shared ? "::block_cached_kernel<" : "::block_vec_kernel<";
        arguments = ", " + flag(plan.vectorized()) + ">";
      }
      CHECK_MESSAGE(k.find(name) != std::string::npos, "launched ", k);
      const bool ends_with_arguments =
          k.size() >= arguments.size() &&
          k.compare(k.size() - arguments.size(), arguments.size(), arguments) == 0;
      CHECK_MESSAGE(ends_with_arguments, "launched ", k, ", the plan's arguments end ", arguments);
    }
  }
}
