// A row-wise rung's record pieces: the RungFacts (common/rung.hpp) whose row_plan is the
// function giving the plan it runs (common/row_plan.hpp), every other fact its default, and the
// record that carries them (WB_ROW_RUNG); the limits of a rung holding a row in a warp's
// registers; and a dispatcher's launch and traffic, those of the rung it picks for each call by
// where that rung keeps the row.
#pragma once

#include <utility>
#include <vector>

#include "common/dtype.hpp"
#include "common/row_lanes.hpp"
#include "common/row_plan.hpp"
#include "common/rung.hpp"

namespace wb {

/// The facts of a row-wise rung that runs `plan`: WB_RUNG(RowArgs, name, change, limits,
/// &launch, &traffic, row_facts(&name_plan)).
inline RungFacts row_facts(RowPlanFn plan) {
  RungFacts facts;
  facts.row_plan = plan;
  return facts;
}

/// The record of a row-wise rung: WB_RUNG (common/rung.hpp) with the facts
/// row_facts(&name_plan), its plan found by the rung's name as the record's name string is, so
/// that a record cannot carry another rung's plan:
///   WB_ROW_RUNG(RowArgs, warp_registers, change, limits, &launch, &traffic)
/// is WB_RUNG(RowArgs, warp_registers, change, limits, &launch, &traffic,
///            row_facts(&warp_registers_plan)).
#define WB_ROW_RUNG(Args, name, ...) WB_RUNG(Args, name, __VA_ARGS__, ::wb::row_facts(&name##_plan))

/// The limits of a rung that holds each row in a warp's registers (chapter 03's warp_registers
/// and lane_groups, chapter 07's warp_per_row): rows of up to kWarpRowMaxBytes
/// (common/row_lanes.hpp) of each element type in `dtypes`.
inline RungLimits warp_row_limits(std::vector<Dtype> dtypes) {
  return row_limits(warp_row_max_cols(2), std::move(dtypes), kWarpRowMaxBytes);
}

/// A dispatcher's pick among three rungs of its ladder (chapter 03's fast_softmax, chapter 07's
/// dispatch), by where its plan for the call keeps the row: in registers, in shared memory, or
/// nowhere (x read again).
template <typename Args>
Rung<Args> rung_keeping_the_row(RowCache cache, Rung<Args> (*in_registers)(),
                                Rung<Args> (*in_shared)(), Rung<Args> (*read_again)()) {
  switch (cache) {
    case RowCache::registers:
      return in_registers();
    case RowCache::shared:
      return in_shared();
    case RowCache::none:
      break;
  }
  return read_again();
}

/// A dispatcher's launch: that of the rung kPick(args) names for the call.
template <typename Args, Rung<Args> (*kPick)(const Args&)>
void launch_picked(const Args& args) {
  kPick(args).launch(args);
}

/// A dispatcher's traffic: it moves what the rung it picks moves.
template <typename Args, Rung<Args> (*kPick)(const Args&)>
Traffic picked_traffic(const Args& args) {
  return kPick(args).traffic(args);
}

}  // namespace wb
