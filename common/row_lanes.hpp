// How a row held in registers is spread over the lanes of a warp: chapter 03's register
// softmax rungs and chapter 07's warp_per_row LayerNorm share the rule.
#pragma once

#include <cstddef>

#include "common/warp.hpp"

namespace wb {

/// A warp holds a row in registers, each lane loading at most 8 16-byte vectors: rows of up to
/// 4 KiB, 1024 floats at 32 values a lane or 2048 fp16 or bf16 values at 64 a lane (chapter
/// 03's softmax widens them on load, chapter 07's LayerNorm keeps them two to a register until
/// used: common/vector_types.cuh's keep_narrow). 64 floats of the 255 registers a thread may
/// have leave room for the rest of the kernel.
inline constexpr std::size_t kWarpRowMaxBytes = 4096;

/// The most values a lane holds for elements of `elem_bytes` bytes: 32 floats, 64 halves.
constexpr int warp_row_max_per_lane(std::size_t elem_bytes) {
  return static_cast<int>(kWarpRowMaxBytes / 32 / elem_bytes);
}

/// The longest row of elements of `elem_bytes` bytes a warp holds: 1024 floats, 2048 halves.
constexpr int warp_row_max_cols(std::size_t elem_bytes) {
  return static_cast<int>(kWarpRowMaxBytes / elem_bytes);
}

/// The most values a lane holds for elements of T: 32 floats, 64 halves (a template bound).
template <typename T>
inline constexpr int kMaxColsPerLane = warp_row_max_per_lane(sizeof(T));

/// The smallest power of 2 >= v (v >= 1).
inline int next_pow2(int v) {
  int p = 1;
  while (p < v) p *= 2;
  return p;
}

/// A group of group_width lanes (a power of 2, at most 32, aligned within the warp) serves one
/// row; each lane holds cols_per_lane of its values (a power of 2) in registers.
struct RowLanes {
  int group_width;
  int cols_per_lane;
};

// [row_lanes]
/// The narrowest group in which each lane holds whole accesses of `width` elements (a 16-byte
/// vector, or 1 for scalar accesses): one access per lane while the row has at most 32 of them,
/// so short rows fill a warp with 32 / group_width rows; then the whole warp, each lane holding
/// the next power of 2 of accesses. Every value has a register, and neither half the group nor
/// half the registers would hold the row.
inline RowLanes row_lanes(int cols, int width = 1) {
  const int accesses = (cols + width - 1) / width;
  const int group = next_pow2(accesses) < kWarpSize ? next_pow2(accesses) : kWarpSize;
  return {group, width * next_pow2((accesses + group - 1) / group)};
}
// [row_lanes]

}  // namespace wb
