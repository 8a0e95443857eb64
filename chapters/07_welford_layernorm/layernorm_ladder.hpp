// Chapter 07: the kernels' shapes, their plans (common/row_plan.hpp), the dispatcher's rule and
// what the ladder's rungs share. Backend-neutral: the limits are numbers; each rung's kernel,
// launcher and record are its file of rungs/, compiled once per kernel backend. The CPU steps
// are in layernorm.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "chapters/07_welford_layernorm/layernorm.hpp"
#include "chapters/07_welford_layernorm/welford.hpp"
#include "common/backend.hpp"
#include "common/dtype.hpp"
#include "common/row_lanes.hpp"
#include "common/row_plan.hpp"
#include "common/rung.hpp"
#include "common/rung_args.hpp"
#include "common/shared_memory.hpp"
#include "common/warp.hpp"

namespace wb::ch07 {

// ------------------------------------------------------------------------------------------
// The kernels' shapes and the dispatcher's rule
// ------------------------------------------------------------------------------------------

/// warp_per_row holds a row in registers, as it was read: rows of up to common/row_lanes.hpp's
/// kWarpRowMaxBytes, so at most kWarpMaxCols = 1024 floats (32 a lane) or 2048 fp16 or bf16
/// values (64 a lane, two to a register).
inline int warp_max_cols(Dtype t) {
  return warp_row_max_cols(dtype_bytes(t));
}
inline constexpr int kWarpMaxCols = warp_row_max_cols(sizeof(float));  // 1024

/// warp_per_row's block: 4 warps, each serving 32 / group_width rows.
inline constexpr int kWarpBlockThreads = 128;

/// block_cached and block_uncached: one block of 256 threads (8 warps) per row, so every row
/// past the warp's gives each thread at least 4 values to fold.
inline constexpr int kBlockThreads = 256;
inline constexpr int kBlockWarps = kBlockThreads / kWarpSize;
static_assert(kBlockThreads % kWarpSize == 0 && kBlockWarps <= kWarpSize,
              "whole warps, and one warp can reduce the warps' states");

/// A 16-byte vector (common/dtype.hpp) is 4 floats (a float4) or 8 halves, loaded in one
/// access when its address is 16-byte aligned. kVec is fp32's width.
inline constexpr int kVec = kVecBytes / static_cast<int>(sizeof(float));

/// How warp_per_row maps a row onto lanes: common/row_lanes.hpp's rule, a group of lanes per
/// row, each lane holding whole accesses of `width` elements (a 16-byte vector where the row can
/// take vectors, else 1). Short rows use narrow groups, several rows per warp; longer rows the
/// whole warp, ceil(cols / 32) values per lane rounded up to a power of 2 (one kernel
/// instantiation per shape). Requires 1 <= cols <= warp_max_cols(t) for elements of `width`'s
/// type.
inline RowLanes warp_shape(int cols, int width = 1) {
  return row_lanes(cols, width);
}

/// Rows one block of warp_per_row serves in `shape`.
inline int rows_per_block(const RowLanes& shape) {
  return kWarpBlockThreads / shape.group_width;
}

/// block_cached's dynamic shared memory: the kBlockWarps warp states (rounded up to keep the
/// row 16-byte aligned for vectors), then the row, as it was read: `elem_bytes` per value
/// (4 for fp32, 2 for fp16 and bf16, so a 16-bit row twice as long fits).
inline constexpr std::size_t kCachedScratchBytes =
    (kBlockWarps * sizeof(Welford) + kVecBytes - 1) / kVecBytes * kVecBytes;
inline std::size_t cached_shared_bytes(int cols, std::size_t elem_bytes = sizeof(float)) {
  return kCachedScratchBytes + static_cast<std::size_t>(cols) * elem_bytes;
}

/// The element types every strategy takes: x, gamma, beta and y of one type, computed in float.
inline const std::vector<Dtype> kLayerNormDtypes = {Dtype::fp32, Dtype::fp16, Dtype::bf16};

/// The limits of block_uncached and of the dispatcher: rows of up to kMaxCols of every type.
inline RungLimits layernorm_limits() {
  return row_limits(kMaxCols, kLayerNormDtypes);
}

/// block_cached's limits when one block may opt in to `max_dynamic_shared_bytes`: a row of at
/// most the bytes the warp states leave (so max_cols_of(t) counts twice as many 16-bit values
/// as floats), capped at kMaxCols; no row at all where the states alone fill it.
inline RungLimits cached_limits(std::size_t max_dynamic_shared_bytes) {
  const std::size_t row_bytes = max_dynamic_shared_bytes > kCachedScratchBytes
                                    ? max_dynamic_shared_bytes - kCachedScratchBytes
                                    : 0;
  return row_limits(row_bytes > 0 ? kMaxCols : 0, kLayerNormDtypes, row_bytes);
}

/// The longest row of `t` block_cached can hold when one block may use
/// `max_dynamic_shared_bytes`.
inline int max_cached_cols(std::size_t max_dynamic_shared_bytes, Dtype t = Dtype::fp32) {
  return cached_limits(max_dynamic_shared_bytes).max_cols_of(t);
}

/// The longest row of `t` the dispatcher caches: two blocks of it fit on an SM
/// (common/shared_memory.hpp's two_blocks_fit), so its cache is at most half of what one block
/// may opt in to less the SM's reservation (28904 floats or 57808 halves on an H100).
inline int max_dispatched_cached_cols(std::size_t max_dynamic_shared_bytes, Dtype t = Dtype::fp32) {
  if (max_dynamic_shared_bytes <= kSharedReservedPerBlock) return 0;
  return max_cached_cols((max_dynamic_shared_bytes - kSharedReservedPerBlock) / 2, t);
}

enum class Strategy { warp_per_row, block_cached, block_uncached };

inline const char* to_string(Strategy s) {
  constexpr const char* kNames[] = {"warp_per_row", "block_cached", "block_uncached"};  // in order
  return kNames[static_cast<int>(s)];
}

// [dispatch]
/// The dispatcher's rule, from the fastest strategy to the most general:
///   rows of up to 4 KiB (1024 floats, 2048 halves) warp_per_row: the row in registers, 1 read;
///   two blocks' rows fit in an SM's shared memory  block_cached: the row in shared memory,
///                                                  1 read;
///   otherwise                                     block_uncached: x read twice.
/// `max_dynamic_shared_bytes` is what one block may opt in to on the device: queried from
/// the CUDA runtime on a GPU (227 KiB on an H100), sm_90's value in the simulator. The cache
/// holds the row's elements as they are (`elem_bytes` each): 16-bit rows fit twice as long.
/// block_cached takes rows up to one block per SM, but with one block of 8 warps per SM it
/// ran 1.8 times slower than block_uncached on an H100 (32768 floats, 2026-11-24): the rule
/// is common/shared_memory.hpp's two_blocks_fit, as chapter 03's dispatcher's.
inline Strategy choose_strategy(int cols, std::size_t max_dynamic_shared_bytes,
                                std::size_t elem_bytes = sizeof(float)) {
  if (cols <= warp_row_max_cols(elem_bytes)) return Strategy::warp_per_row;
  if (two_blocks_fit(cached_shared_bytes(cols, elem_bytes), max_dynamic_shared_bytes))
    return Strategy::block_cached;
  return Strategy::block_uncached;
}
// [dispatch]

/// True when the kernels may use 16-byte vector loads and stores: cols a multiple of the
/// vector width (4 floats, 8 halves; so every row starts 16-byte aligned) and every pointer
/// 16-byte aligned. Otherwise they access one element at a time.
inline bool can_vectorize(const LayerNormArgs& a) {
  return a.cols % vec_width(a.dtype) == 0 && aligned_for_vec(a.x) && aligned_for_vec(a.y) &&
         aligned_for_vec(a.gamma) && aligned_for_vec(a.beta);
}

// [plans]
/// warp_per_row on rows of `cols` elements of `t`: warp_shape's group of lanes and values per
/// lane, in 16-byte vectors where `vectors` (can_vectorize), else one value per access.
inline RowPlan warp_per_row_plan(int cols, Dtype t, bool vectors) {
  const int width = vectors ? vec_width(t) : 1;
  const RowLanes shape = warp_shape(cols, width);
  return {shape.group_width, butterfly_levels(shape.group_width), width, RowCache::registers,
          shape.cols_per_lane};
}

/// block_cached: 256 threads per row, the row in shared memory.
inline RowPlan block_cached_plan(int /*cols*/, Dtype t, bool vectors) {
  return {kBlockThreads, kBlockMergeLevels, vectors ? vec_width(t) : 1, RowCache::shared, 0};
}

/// block_uncached: 256 threads per row, x read again to normalize.
inline RowPlan block_uncached_plan(int /*cols*/, Dtype t, bool vectors) {
  return {kBlockThreads, kBlockMergeLevels, vectors ? vec_width(t) : 1, RowCache::none, 0};
}

/// The plan of strategy `s`.
inline RowPlan strategy_plan(Strategy s, int cols, Dtype t, bool vectors) {
  switch (s) {
    case Strategy::warp_per_row:
      return warp_per_row_plan(cols, t, vectors);
    case Strategy::block_cached:
      return block_cached_plan(cols, t, vectors);
    case Strategy::block_uncached:
      break;
  }
  return block_uncached_plan(cols, t, vectors);
}
// [plans]

// ------------------------------------------------------------------------------------------
// The kernel ladder: one rung per file of rungs/ (its kernel, launcher and record)
// ------------------------------------------------------------------------------------------

/// What every rung's launch on backend B may ask of its device. x, gamma, beta and y of a
/// rung's LayerNormArgs hold elements of a.dtype (__half or __nv_bfloat16 in the kernels; bit
/// patterns on the host, common/dtype.hpp), mean and rstd float whatever the type; the kernels
/// compute in float: x, gamma and beta are widened exactly, y is rounded once, to nearest
/// even. Device pointers of backend B, any alignment (misaligned rows take the scalar path).
/// The shapes each rung takes are its limits, checked before launch (run_rung).
template <Backend B>
struct Kernels {
  /// What one block may opt in to on this backend's device (block_cached's row and the
  /// dispatcher's rule; defined in rungs/2_block_cached.cuh).
  static std::size_t max_dynamic_shared_bytes();
};

/// warp_per_row and block_cached read x once (kept in registers or in shared memory between
/// the statistics and the normalization); gamma and beta, where given, once per row; y written
/// once, mean and rstd one float each per row.
inline Traffic x_read_once(const LayerNormArgs& a) {
  return layernorm_traffic(a, 1,
                           "1 read of x (kept on chip) + gamma and beta per row + 1 write "
                           "of y + mean and rstd per row");
}

/// block_uncached reads x twice (statistics, then normalization); the rest as x_read_once.
inline Traffic x_read_twice(const LayerNormArgs& a) {
  return layernorm_traffic(a, 2,
                           "2 reads of x (statistics, normalize) + gamma and beta per row + "
                           "1 write of y + mean and rstd per row");
}

}  // namespace wb::ch07

// [ladder]
// The ladder, rungs/1_warp_per_row.cuh to rungs/4_dispatch.cuh in order: the three strategies
// and the dispatcher, each on fp32, fp16 and bf16, with the rows it holds on its backend's
// device. The build lists the files as Rungs<B> and kernel_ladder<B>() (a generated header);
// each file defines its Rungs<B>::name() with its kernel and launcher.
#include "chapters/07_welford_layernorm/ladder.hpp"
// [ladder]
