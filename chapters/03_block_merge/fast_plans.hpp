// Chapter 03's fast rungs (rungs/3_warp_registers.cuh to rungs/7_fast_softmax.cuh): how each
// spreads a row over its threads (its plan, common/row_plan.hpp, the fact its record carries),
// and the dispatcher's rule. Backend-neutral: the launchers compute a plan before the launch
// and turn it into template arguments; the tests derive each rung's floor from it.
#pragma once

#include <cstddef>
#include <vector>

#include "chapters/03_block_merge/md_merge.hpp"
#include "common/dtype.hpp"
#include "common/row_lanes.hpp"
#include "common/row_plan.hpp"
#include "common/rung.hpp"
#include "common/shared_memory.hpp"
#include "common/warp.hpp"

namespace wb::ch03 {

// Element types (Dtype, dtype_bytes, vec_width, and the host's encode_elements,
// decode_elements and round_elements) come from common/dtype.hpp: every rung computes in
// float; fp16 and bf16 are converted on load and rounded to nearest even on store.

/// warp_registers holds each lane's share of the row in float registers: rows of up to
/// common/row_lanes.hpp's kWarpRowMaxBytes, 1024 floats (32 registers a lane) or 2048 fp16 or
/// bf16 values (64 a lane).
inline int warp_registers_max_cols(Dtype t) {
  return warp_row_max_cols(dtype_bytes(t));
}

/// The element types every fast rung takes: x and y of one type, computed in float.
inline const std::vector<Dtype> kFastDtypes = {Dtype::fp32, Dtype::fp16, Dtype::bf16};

/// The longest row block_vec and the dispatcher take (the launches index columns with int).
inline constexpr int kFastMaxCols = 1 << 30;

/// The limits of block_vec and the dispatcher: rows of up to kFastMaxCols of every fast type;
/// block_cached's too, with the row's bytes capped at `max_row_bytes` (its shared memory).
inline RungLimits fast_row_limits(std::size_t max_row_bytes = 0) {
  return row_limits(kFastMaxCols, kFastDtypes, max_row_bytes);
}

/// True when both pointers are 16-byte aligned and cols is a multiple of the vector width,
/// so that every row starts on a 16-byte boundary: then the rungs load and store whole
/// vectors, else one element at a time.
inline bool can_vectorize(const void* x, const void* y, int cols, Dtype t) {
  return cols % vec_width(t) == 0 && aligned_for_vec(x) && aligned_for_vec(y);
}

/// The block rungs' threads per row (8 warps).
inline constexpr int kBlockVecThreads = 256;

/// block_cached's dynamic shared memory: the 8 warps' (m, d) pairs (64 bytes, keeping the row
/// 16-byte aligned), then the row as it was read, `cols` elements of `elem_bytes` each.
inline constexpr std::size_t kCachedScratchBytes = kBlockVecThreads / kWarpSize * sizeof(MD);
static_assert(kCachedScratchBytes % 16 == 0, "the cached row starts 16-byte aligned");
inline std::size_t cached_shared_bytes(int cols, std::size_t elem_bytes) {
  return kCachedScratchBytes + static_cast<std::size_t>(cols) * elem_bytes;
}

// [fast_dispatch]
/// warp_registers on rows of `cols` entries: the registers per lane are bucketed to the next
/// power of 2 of ceil(cols / 32) (1, 2, 4, ..., 32, and 64 in 16 bits: one kernel
/// instantiation each), so cols = 32, 64, ..., 1024 (2048) are the last columns of each bucket.
/// Vectors need `vectors` (can_vectorize()) and whole vectors per lane (cols_per_lane a
/// multiple of the vector width: cols > 64 for fp32, cols > 128 for fp16 and bf16).
inline RowPlan warp_registers_plan(int cols, Dtype t, bool vectors) {
  const int per_lane = next_pow2((cols + kWarpSize - 1) / kWarpSize);
  const bool vec = vectors && per_lane % vec_width(t) == 0;
  return {kWarpSize, butterfly_levels(kWarpSize), vec ? vec_width(t) : 1, RowCache::registers,
          per_lane};
}

/// lane_groups on rows of `cols` entries: where `vectors`, common/row_lanes.hpp's groups of
/// lanes holding whole 16-byte vectors: a row of at most 16 vectors takes a group of that many
/// lanes rounded up to a power of 2, several rows per warp, one vector per lane; from 17
/// vectors on it is warp_registers' plan. Rows that cannot take vectors keep warp_registers'
/// plan.
inline RowPlan lane_groups_plan(int cols, Dtype t, bool vectors) {
  if (!vectors) return warp_registers_plan(cols, t, vectors);
  const RowLanes lanes = row_lanes(cols, vec_width(t));
  return {lanes.group_width, butterfly_levels(lanes.group_width), vec_width(t), RowCache::registers,
          lanes.cols_per_lane};
}

/// block_vec on rows of any length: 256 threads, vectors wherever `vectors`, x read twice.
inline RowPlan block_vec_plan(int /*cols*/, Dtype t, bool vectors) {
  return {kBlockVecThreads, kBlockMergeLevels, vectors ? vec_width(t) : 1, RowCache::none, 0};
}

/// block_cached: block_vec's accesses, the row kept in shared memory.
inline RowPlan block_cached_plan(int /*cols*/, Dtype t, bool vectors) {
  return {kBlockVecThreads, kBlockMergeLevels, vectors ? vec_width(t) : 1, RowCache::shared, 0};
}

/// The dispatcher's rule. Rows of up to 4 KiB fit in one warp's registers (1024 floats or 2048
/// halves: 32 lanes x at most 32 or 64 values): lane_groups reads x once, short rows several to
/// a warp. Longer rows get a block of 256 threads: block_cached keeps the row in shared memory,
/// reading x once, while two of its blocks fit on an SM (113 KiB of row on an H100: 28912
/// floats or 57824 halves); past that, block_vec reads x twice (the second time from L2 where
/// it can). One block of 8 warps per SM has too few loads in flight: on an H100 (2026-11-24,
/// 49152 rows) block_cached read 64 KiB rows at 2450-2601 GB/s against block_vec's 1989-1993,
/// and 128 KiB rows (32768 floats, one block per SM) at 1425 against block_vec's 1977.
/// `max_shared`: what one block may opt in to on the device.
inline RowPlan plan_fast_softmax(int cols, Dtype t, bool vectors, std::size_t max_shared) {
  if (cols <= warp_registers_max_cols(t)) return lane_groups_plan(cols, t, vectors);
  if (two_blocks_fit(cached_shared_bytes(cols, dtype_bytes(t)), max_shared))
    return block_cached_plan(cols, t, vectors);
  return block_vec_plan(cols, t, vectors);
}
// [fast_dispatch]

}  // namespace wb::ch03
