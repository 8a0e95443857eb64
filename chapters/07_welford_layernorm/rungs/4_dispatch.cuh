// Chapter 07, rung 4: the dispatcher. No kernel of its own: for each call it launches the first
// of the three strategies that holds the row, by layernorm_ladder.hpp's rule (choose_strategy):
// warp_per_row up to 4 KiB rows, block_cached while two blocks' rows fit in an SM's shared
// memory, block_uncached beyond.
//
// Computes: y, mean and rstd as the strategy it picks; fp32, fp16 and bf16.
// Changed since rung 3: the choice of strategy moves from the caller to the row's length, type
//           and the device's shared memory.
// Launch shape: that of the strategy it picks.
// Limits: rows in [1, 2^31 - 1]; cols in [1, 2^24].
// Memory traffic per element: that of the strategy it picks: x read twice only where
//           block_uncached runs.
// Test: ctest --test-dir build -R 07_welford_layernorm --output-on-failure
#pragma once

#include "common/kernel.cuh"
#include "common/row_facts.hpp"

#include "chapters/07_welford_layernorm/layernorm.hpp"
#include "chapters/07_welford_layernorm/layernorm_ladder.hpp"

namespace wb::ch07 {
namespace {

// The strategy the rule picks for rows of `cols` elements of `t` on this backend's device.
Strategy dispatched_strategy(int cols, Dtype t) {
  return choose_strategy(cols, Kernels<kThisBackend>::max_dynamic_shared_bytes(), dtype_bytes(t));
}

// Its plan: the picked strategy's.
RowPlan dispatch_plan(int cols, Dtype t, bool vectors) {
  return strategy_plan(dispatched_strategy(cols, t), cols, t, vectors);
}

// The rung the dispatcher runs on `a`: the strategy the rule picks, by where its plan keeps the
// row (registers: warp_per_row, shared memory: block_cached, nowhere: block_uncached).
Rung<LayerNormArgs> picked_rung(const LayerNormArgs& a) {
  return rung_keeping_the_row(
      dispatch_plan(a.cols, a.dtype, can_vectorize(a)).cache, &Rungs<kThisBackend>::warp_per_row,
      &Rungs<kThisBackend>::block_cached, &Rungs<kThisBackend>::block_uncached);
}

}  // namespace

WB_ROW_RUNG(LayerNormArgs, dispatch,
            "picks the first of the three that holds the row (choose_strategy)", layernorm_limits(),
            &launch_picked<LayerNormArgs, picked_rung>, &picked_traffic<LayerNormArgs, picked_rung>)

}  // namespace wb::ch07
