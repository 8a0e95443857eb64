// Chapter 03, rung 7: the dispatcher. No kernel of its own: for each call it launches the rung
// that suits the row, by fast_plans.hpp's rule (plan_fast_softmax): lane_groups up to 4 KiB
// rows (the row in registers), block_cached while two blocks' rows fit in an SM's shared
// memory, block_vec beyond.
//
// Computes: y = softmax(x) row-wise, as the rung it picks; fp32, fp16 and bf16.
// Changed since rung 6: the choice of rung moves from the caller to the row's length, type and
//           the device's shared memory.
// Launch shape: that of the rung it picks.
// Limits: rows in [1, 2^31 - 1]; cols in [1, 2^30].
// Memory traffic per element: that of the rung it picks: 1 read + 1 write up to
//           warp_registers_max_cols(t) columns and while block_cached holds the row, block_vec's
//           2 reads + 1 write beyond.
// Test: ctest --test-dir build -R 03_block_merge --output-on-failure
#pragma once

#include "common/kernel.cuh"
#include "common/row_facts.hpp"

#include "chapters/03_block_merge/block_merge.hpp"
#include "chapters/03_block_merge/fast_plans.hpp"

namespace wb::ch03 {
namespace {

// The dispatcher's plan on this backend's device.
RowPlan fast_softmax_plan(int cols, Dtype t, bool vectors) {
  return plan_fast_softmax(cols, t, vectors, Kernels<kThisBackend>::max_dynamic_shared_bytes());
}

// The rung the dispatcher runs on `a`: the one whose plan its own is.
Rung<RowArgs> picked_rung(const RowArgs& a) {
  const RowPlan plan = fast_softmax_plan(a.cols, a.dtype, can_vectorize(a.x, a.y, a.cols, a.dtype));
  return rung_keeping_the_row(plan.cache, &Rungs<kThisBackend>::lane_groups,
                              &Rungs<kThisBackend>::block_cached, &Rungs<kThisBackend>::block_vec);
}

}  // namespace

WB_ROW_RUNG(
    RowArgs, fast_softmax,
    "the dispatcher: lane_groups up to 4 KiB rows, block_cached while two blocks' rows fit in "
    "an SM's shared memory, block_vec beyond",
    fast_row_limits(), &launch_picked<RowArgs, picked_rung>, &picked_traffic<RowArgs, picked_rung>)

}  // namespace wb::ch03
