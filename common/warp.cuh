// Reductions across the 32 lanes of a warp, for the kernels of several chapters. Chapter 01
// derives the butterfly (its rung 3, `warp_all_reduce`); chapter 03 merges (m, d) pairs the
// same way (md_warp_merge.cuh). Inline functions only: this file compiles to nothing.
#pragma once

#include "common/kernel.cuh"
#include "common/warp.hpp"

namespace wb {

/// max over the 32 lanes of a warp, in every lane (butterfly, 5 exchanges).
__device__ inline float warp_max(float x) {
  for (int lane_mask = kWarpSize / 2; lane_mask > 0; lane_mask /= 2)
    x = fmaxf(x, __shfl_xor_sync(kAllLanes, x, lane_mask));
  return x;
}

/// Sum over the 32 lanes of a warp, in every lane (butterfly, 5 exchanges).
__device__ inline float warp_sum(float x) {
  for (int lane_mask = kWarpSize / 2; lane_mask > 0; lane_mask /= 2)
    x += __shfl_xor_sync(kAllLanes, x, lane_mask);
  return x;
}

}  // namespace wb
