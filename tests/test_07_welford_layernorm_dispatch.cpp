// Chapter 07's kernels, backend-neutral: the dispatcher's rule and the kernels' shapes at their
// boundaries (layernorm_ladder.hpp), the vector accesses' conditions, and the same for fp16
// and bf16 rows. The kernels themselves: test_07_welford_layernorm_kernels.cpp.
#include <cstddef>
#include <string>

#include "chapters/07_welford_layernorm/layernorm.hpp"
#include "chapters/07_welford_layernorm/layernorm_ladder.hpp"
#include "common/dtype.hpp"
#include "common/half.hpp"
#include "common/row_lanes.hpp"
#include "common/rung_args.hpp"
#include "common/shared_memory.hpp"
#include "common/warp.hpp"
#include "tests/support.hpp"

using namespace wb;
using namespace wb::ch07;

// ==========================================================================================
// The dispatcher's rule and the kernels' shapes (backend-neutral)
// ==========================================================================================

namespace {
// The simulator's and an H100's opt-in limit, 227 KiB; an A100's, 163 KiB.
constexpr std::size_t kSm90SharedBytes = 227 * 1024;
constexpr std::size_t kSm80SharedBytes = 163 * 1024;
}  // namespace

TEST_SUITE("cpu") {
  TEST_CASE("the dispatcher switches strategy exactly at its boundaries") {
    for (std::size_t limit : {kSm90SharedBytes, kSm80SharedBytes}) {
      CAPTURE(limit);
      const int max_cached = max_cached_cols(limit);
      CHECK(cached_shared_bytes(max_cached) <= limit);
      CHECK(cached_shared_bytes(max_cached + 1) > limit);
      CHECK(choose_strategy(1, limit) == Strategy::warp_per_row);
      CHECK(choose_strategy(kWarpMaxCols, limit) == Strategy::warp_per_row);
      // The dispatcher caches while two blocks fit on an SM (common/shared_memory.hpp).
      const int dispatched = max_dispatched_cached_cols(limit);
      CHECK(two_blocks_fit(cached_shared_bytes(dispatched), limit));
      CHECK_FALSE(two_blocks_fit(cached_shared_bytes(dispatched + 1), limit));
      CHECK(choose_strategy(kWarpMaxCols + 1, limit) == Strategy::block_cached);
      CHECK(choose_strategy(dispatched, limit) == Strategy::block_cached);
      CHECK(choose_strategy(dispatched + 1, limit) == Strategy::block_uncached);
      CHECK(choose_strategy(max_cached, limit) == Strategy::block_uncached);
      CHECK(choose_strategy(kMaxCols, limit) == Strategy::block_uncached);
    }
    CHECK(max_cached_cols(kSm90SharedBytes) == 58088);  // (232448 - 96) / 4
    CHECK(max_dispatched_cached_cols(kSm90SharedBytes) == 28904);  // ((232448 - 1024) / 2 - 96) / 4
    // A device with no more shared memory than the scratch caches nothing.
    CHECK(max_cached_cols(kCachedScratchBytes) == 0);
    CHECK(choose_strategy(kWarpMaxCols + 1, kCachedScratchBytes) == Strategy::block_uncached);
  }

  TEST_CASE("warp groups narrow for short rows and always cover the row") {
    for (int width : {1, 4, 8})  // scalar accesses, float4, 8 halves
      for (int cols = 1; cols <= warp_max_cols(Dtype::fp16); ++cols) {
        if (cols % width != 0) continue;  // vectors only for whole vectors per row
        CAPTURE(width);
        CAPTURE(cols);
        const RowLanes w = warp_shape(cols, width);
        CHECK(w.group_width * w.cols_per_lane >= cols);  // every value has a register
        // At most 32 floats a lane: more only for 16-bit rows, up to 64.
        CHECK(w.cols_per_lane <= (cols <= kWarpMaxCols ? 32 : 64));
        CHECK(w.cols_per_lane % width == 0);  // whole vectors per lane
        // Not wasteful: half the group, or half the vectors per lane, would not hold the row.
        CHECK((w.group_width / 2) * w.cols_per_lane < cols);
        if (w.cols_per_lane > width) CHECK(w.group_width * (w.cols_per_lane / 2) < cols);
      }
    CHECK(rows_per_block(warp_shape(1)) == kWarpBlockThreads);
    CHECK(rows_per_block(warp_shape(2)) == kWarpBlockThreads / 2);
    CHECK(rows_per_block(warp_shape(1024)) == kWarpBlockThreads / kWarpSize);
    // Vectors fill the warp at short rows: 32 floats are 8 float4 lanes, 4 rows per warp;
    // 128 halves are 16 lanes of 8.
    CHECK(warp_shape(32, 4).group_width == 8);
    CHECK(warp_shape(32, 4).cols_per_lane == 4);
    CHECK(warp_shape(128, 8).group_width == 16);
    CHECK(warp_shape(128, 4).group_width == kWarpSize);
    CHECK(warp_shape(256, 8).cols_per_lane == 8);
  }

  TEST_CASE("float4 access is used only for aligned pointers and cols a multiple of 4") {
    alignas(16) float buf[16] = {};
    LayerNormArgs a{buf, nullptr, nullptr, buf, buf, buf, 1, 8, kDefaultEps};
    CHECK(can_vectorize(a));
    a.cols = 6;
    CHECK_FALSE(can_vectorize(a));
    a.cols = 8;
    a.x = buf + 1;
    CHECK_FALSE(can_vectorize(a));
    a.x = buf;
    a.gamma = buf + 2;
    CHECK_FALSE(can_vectorize(a));
  }
}

// ==========================================================================================
// 16-bit elements: fp16 and bf16 x, gamma, beta and y, computed in float
// ==========================================================================================
//
// Every strategy is one template over the element type, fp32 its T = float instantiation. A
// kernel on 16-bit elements reads x, gamma and beta rounded to the type, so both the CPU step
// and the fp64 reference start from the same rounded values: the kernel's float work then
// obeys the fp32 bounds, and its y adds one rounding to the output type (OutputRounding,
// scaled_errors).

TEST_SUITE("cpu") {
  TEST_CASE("16-bit rows fit twice as long in the shared-memory cache") {
    for (std::size_t limit : {kSm90SharedBytes, kSm80SharedBytes}) {
      CAPTURE(limit);
      const int max_cached = max_cached_cols(limit, Dtype::fp16);
      CHECK(max_cached == 2 * max_cached_cols(limit));  // (limit - 96) / 2, limit a multiple of 4
      CHECK(cached_shared_bytes(max_cached, 2) <= limit);
      CHECK(cached_shared_bytes(max_cached + 1, 2) > limit);
      // 16-bit rows stay in registers up to 4 KiB too: 2048 values.
      CHECK(warp_max_cols(Dtype::fp16) == 2 * kWarpMaxCols);
      CHECK(choose_strategy(2 * kWarpMaxCols, limit, 2) == Strategy::warp_per_row);
      CHECK(choose_strategy(2 * kWarpMaxCols + 1, limit, 2) == Strategy::block_cached);
      const int dispatched = max_dispatched_cached_cols(limit, Dtype::fp16);
      CHECK(choose_strategy(dispatched, limit, 2) == Strategy::block_cached);
      CHECK(choose_strategy(dispatched + 1, limit, 2) == Strategy::block_uncached);
      CHECK(choose_strategy(max_cached, limit, 2) == Strategy::block_uncached);
    }
    CHECK(max_cached_cols(kSm90SharedBytes, Dtype::fp16) == 116176);  // (232448 - 96) / 2
    CHECK(max_dispatched_cached_cols(kSm90SharedBytes, Dtype::fp16) == 57808);
  }

  TEST_CASE("16-bit vectors need aligned pointers and cols a multiple of 8") {
    alignas(16) unsigned char buf[64] = {};
    float stats[2] = {};
    for (Dtype t : {Dtype::fp16, Dtype::bf16}) {
      const std::string dtype = to_string(t);
      CAPTURE(dtype);
      LayerNormArgs a{buf, buf, buf, buf, stats, stats, 1, 16, kDefaultEps, t};
      CHECK(can_vectorize(a));
      a.cols = 12;  // whole float4s, but not whole vectors of 8 halves
      CHECK_FALSE(can_vectorize(a));
      a.dtype = Dtype::fp32;
      CHECK(can_vectorize(a));
      a.dtype = t;
      a.cols = 16;
      a.y = buf + 2;  // one element past the 16-byte boundary
      CHECK_FALSE(can_vectorize(a));
      a.y = buf;
      a.beta = buf + 8;
      CHECK_FALSE(can_vectorize(a));
    }
  }

  TEST_CASE("the 16-bit offsets keep sixteen levels per standard deviation") {
    // randn_offset(): where the type's spacing is 2^-4, sigma / 16. At 1e4 fp16's spacing is 8
    // and bf16's 64: an offset of 1e4 would round the row to a few levels.
    const float sixteenth = 0.0625f;
    CHECK(round_to_half(randn_offset(Dtype::fp16) + sixteenth) ==
          randn_offset(Dtype::fp16) + sixteenth);
    CHECK(round_to_bf16(randn_offset(Dtype::bf16) + sixteenth) ==
          randn_offset(Dtype::bf16) + sixteenth);
    // At 1e4, values 6 sigma apart round to the same element.
    CHECK(round_to_half(1e4f - 3.f) == round_to_half(1e4f + 3.f));
    CHECK(round_to_bf16(1e4f - 3.f) == round_to_bf16(1e4f + 3.f));
  }
}
