// A row-wise rung's facts from its plan: the RungFacts (common/rung.hpp) whose row_plan is the
// function giving the plan it runs (common/row_plan.hpp), every other fact its default.
#pragma once

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

}  // namespace wb
