// How a row-wise rung (softmax, LayerNorm) spreads a row over its threads: the fact its
// record carries (RungFacts::row_plan, common/rung.hpp) for the checks that derive an error
// bound or an expected access width from it, so that none has to recognize a rung by its name.
#pragma once

#include "common/dtype.hpp"
#include "common/warp.hpp"

namespace wb {

/// Where a row waits between its statistics and its normalization.
enum class RowCache {
  none,       ///< nowhere: the normalization reads x again from global memory (2 reads of x)
  registers,  ///< each thread's share of the row in its registers (1 read)
  shared,     ///< the whole row in shared memory (1 read)
};

/// What a row-wise rung does with rows of a given length, element type and alignment.
struct RowPlan {
  /// Threads sharing one row: a group of 1 to 32 lanes of a warp, or a block's threads.
  int threads = 1;
  /// Butterfly levels of the merge (or combine) that joins the threads' partial results, on
  /// one partial's path to the row's statistics: log2 of a group's lanes; for a block, 5
  /// within each warp, then 5 more over the warps' results.
  int merges = 0;
  /// Elements per global access: a 16-byte vector's width (4 floats, 8 halves), or 1.
  int width = 1;
  RowCache cache = RowCache::none;
  /// With cache == registers, the values of the row each thread holds (a power of 2, the
  /// registers of a compile-time bucket); 0 otherwise.
  int cols_per_lane = 0;

  bool vectorized() const { return width > 1; }
};

/// The levels of a butterfly over a group of `lanes` lanes (a power of 2): log2(lanes).
constexpr int butterfly_levels(int lanes) {
  int levels = 0;
  while ((1 << levels) < lanes) ++levels;
  return levels;
}

/// A block's merge: a butterfly within each warp, then one over the warps' results (every lane
/// of the warp taking part, those past the warps holding the identity).
inline constexpr int kBlockMergeLevels = 2 * butterfly_levels(kWarpSize);

/// The plan a row-wise rung runs on rows of `cols` elements of `t` on its backend's device;
/// `vectors` when the call can take 16-byte vectors (cols a multiple of the vector width and
/// every pointer 16-byte aligned: the chapter's can_vectorize).
using RowPlanFn = RowPlan (*)(int cols, Dtype t, bool vectors);

}  // namespace wb
