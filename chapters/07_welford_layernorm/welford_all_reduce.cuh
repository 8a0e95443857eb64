// Chapter 07's all-reduce of Welford states across a block, for the block strategies
// (rungs/2_block_cached.cuh, rungs/3_block_uncached.cuh): Chan's combine along a butterfly of
// shuffles within each warp, then once more over the warps' states. The butterfly is
// rungs/1_warp_per_row.cuh's group_all_reduce, which is the chapter's exercise: its stub
// replaces that one file, so no other kernel includes it, and the block strategies use this
// copy.
// Only templates and inline functions: wb_add_chapter compiles this file on its own too (it
// compiles every .cuh of the chapter), where it emits nothing; the rung files include it.
// Test: ctest --test-dir build -R 07_welford_layernorm --output-on-failure
#pragma once

#include "common/kernel.cuh"

#include "chapters/07_welford_layernorm/layernorm_ladder.hpp"
#include "chapters/07_welford_layernorm/welford.hpp"

namespace wb::ch07 {
namespace {  // internal linkage, as the kernels that use them

// Butterfly all-reduce of Welford states over each group of kGroupWidth lanes (a power of 2,
// aligned within the warp), eqs. (10)-(13) along a binary tree; every lane of the warp calls
// it (full mask), lanes with no values passing welford_identity(). Both partners of an
// exchange compute combine(lower, upper): every lane of a group ends with the same bits.
template <int kGroupWidth>
__device__ Welford welford_all_reduce(Welford s) {
  static_assert(
      kGroupWidth >= 1 && kGroupWidth <= kWarpSize && (kGroupWidth & (kGroupWidth - 1)) == 0,
      "a group is a power-of-2 slice of a warp");
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  for (int lane_mask = kGroupWidth / 2; lane_mask > 0; lane_mask /= 2) {
    Welford other;
    other.mean = __shfl_xor_sync(kAllLanes, s.mean, lane_mask, kGroupWidth);
    other.m2 = __shfl_xor_sync(kAllLanes, s.m2, lane_mask, kGroupWidth);
    other.count = __shfl_xor_sync(kAllLanes, s.count, lane_mask, kGroupWidth);
    const bool upper = (lane & lane_mask) != 0;
    s = upper ? welford_combine(other, s) : welford_combine(s, other);
  }
  return s;
}

// [block_all_reduce]
// Every thread passes its state and gets the whole block's. scratch: kBlockWarps states of
// shared memory. Lanes past kBlockWarps in the second round hold the identity, which the
// combine passes through exactly; every warp computes the same bits.
__device__ inline Welford block_all_reduce(Welford s, Welford* scratch) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  s = welford_all_reduce<kWarpSize>(s);
  if (lane == 0) scratch[warp] = s;
  __syncthreads();  // all warp states are written
  s = welford_all_reduce<kWarpSize>(lane < kBlockWarps ? scratch[lane] : welford_identity());
  __syncthreads();  // everyone has read scratch before anyone could write it again
  return s;
}
// [block_all_reduce]

}  // namespace
}  // namespace wb::ch07
