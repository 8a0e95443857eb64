// Chapter 03's merge of (m, d) pairs across the lanes of a warp, for the kernels that use it
// without teaching it: chapter 03's other rungs (through md_stats.cuh's block merge too) and
// the attention kernels of chapter 04 on. rungs/2_warp_per_row_online.cuh's warp_all_merge is
// the same butterfly, written out as the chapter's exercise; that file is replaced by its stub
// when a learner starts the exercise, so no other kernel includes it.
// Only templates: the kernel files include it, and the build compiles it there, not on its own
// (wb_add_chapter's translation units are the kernel files no other includes).
#pragma once

#include "common/kernel.cuh"

#include "chapters/03_block_merge/md_merge.hpp"

namespace wb::ch03 {

// [warp_merge]
/// Every lane passes its pair and gets the merge of its group's kGroup pairs (a power-of-2,
/// aligned slice of the warp; the whole warp by default): log2(kGroup) butterfly steps, lanes
/// l and l ^ lane_mask computing md_merge(a, b) and md_merge(b, a), the same bits (eq. 5; a
/// zero m may differ in its sign, see md_merge), so all lanes of a group agree. Every lane of the
/// warp calls it (full mask).
template <int kGroup = 32>
__device__ __forceinline__ MD warp_merge(MD md) {
  static_assert(kGroup >= 1 && kGroup <= 32 && (kGroup & (kGroup - 1)) == 0,
                "a group is a power-of-2 slice of a warp");
  for (int lane_mask = kGroup / 2; lane_mask > 0; lane_mask /= 2)
    md = md_merge(md, {__shfl_xor_sync(kAllLanes, md.m, lane_mask, kGroup),
                       __shfl_xor_sync(kAllLanes, md.d, lane_mask, kGroup)});  // eq. (2)
  return md;
}
// [warp_merge]

}  // namespace wb::ch03
