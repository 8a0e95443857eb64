// Chapter 07's reduction of Welford states across a block, for the block strategies
// (rungs/2_block_cached.cuh, rungs/3_block_uncached.cuh): Chan's combine along a tree of
// shuffles toward lane 0 of each warp, once over the warp's lanes and once over the warps'
// states, then lane 0's state broadcast. Each round needs the result in lane 0 only, so its
// tree is half of rungs/1_warp_per_row.cuh's butterfly (the chapter's exercise, which leaves a
// group's state in every lane): the same combines in the same order, so lane 0 ends with the
// same bits.
// Only templates and inline functions: the rung files include it, and the build compiles it
// there, not on its own (wb_add_chapter's translation units are the kernel files no other
// includes).
// Test: ctest --test-dir build -R 07_welford_layernorm --output-on-failure
#pragma once

#include "common/kernel.cuh"

#include "chapters/07_welford_layernorm/layernorm.hpp"
#include "chapters/07_welford_layernorm/layernorm_ladder.hpp"
#include "chapters/07_welford_layernorm/welford.hpp"

namespace wb::ch07 {
namespace {  // internal linkage, as the kernels that use them

// The states of lanes 0 .. kLanes - 1 (a power of 2) combined into lane 0, eqs. (10)-(13)
// along a binary tree: for offset = kLanes / 2, ..., 1, lane l combines its state with lane
// l + offset's, its own first (the lower lane's, as in the butterfly). Every lane of the warp
// calls it (full mask); the lanes past 0 end with partial states.
template <int kLanes>
__device__ Welford reduce_to_lane0(Welford s) {
  static_assert(kLanes >= 1 && kLanes <= kWarpSize && (kLanes & (kLanes - 1)) == 0,
                "a power-of-2 count of the warp's lanes");
  for (int offset = kLanes / 2; offset > 0; offset /= 2) {
    Welford upper;
    upper.mean = __shfl_down_sync(kAllLanes, s.mean, offset);
    upper.m2 = __shfl_down_sync(kAllLanes, s.m2, offset);
    upper.count = __shfl_down_sync(kAllLanes, s.count, offset);
    s = welford_combine(s, upper);
  }
  return s;
}

// [block_all_reduce]
// Every thread passes its state and gets the whole block's. scratch: kBlockWarps states of
// shared memory. Each warp combines its lanes' states into lane 0, which writes the warp's;
// then every warp combines the kBlockWarps states itself (no barrier to wait for one warp's
// result) and passes lane 0's to all its lanes: every thread of the block holds the same bits.
__device__ inline Welford block_all_reduce(Welford s, Welford* scratch) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  s = reduce_to_lane0<kWarpSize>(s);
  if (lane == 0) scratch[warp] = s;
  __syncthreads();  // all warp states are written
  s = reduce_to_lane0<kBlockWarps>(lane < kBlockWarps ? scratch[lane] : welford_identity());
  __syncthreads();  // everyone has read scratch before anyone could write it again
  s.mean = __shfl_sync(kAllLanes, s.mean, 0);
  s.m2 = __shfl_sync(kAllLanes, s.m2, 0);
  s.count = __shfl_sync(kAllLanes, s.count, 0);
  return s;
}
// [block_all_reduce]

// The row's statistics from every thread's state of its slice: the block's all-reduce, eqs.
// (10)-(13), then eqs. (3)-(4); thread 0 writes the row's mean and rstd (what a backward pass
// needs) at mean[blockIdx.x] and rstd[blockIdx.x]. Every thread gets them back.
__device__ inline RowStats block_row_stats(Welford s, Welford* scratch, float eps,
                                           float* __restrict__ mean, float* __restrict__ rstd) {
  s = block_all_reduce(s, scratch);
  const RowStats row{s.mean, rstd_of(welford_variance(s), eps)};
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = row.mean;
    rstd[blockIdx.x] = row.rstd;
  }
  return row;
}

}  // namespace
}  // namespace wb::ch07
