// Device helpers for the tiled attention kernels of chapters 04-06: one score from shared
// tiles, chapter 03's merge across a warp, and the shared-memory tiles of the FA1 and FA2
// kernels (the tile loads themselves are common/tile_load.cuh). Inline functions only (this
// file compiles to nothing by itself); each chapter's kernel file includes it.
#pragma once

#include "common/kernel.cuh"
#include "common/tile_load.cuh"
#include "common/vector_types.cuh"
#include "common/warp.cuh"

#include "chapters/03_block_merge/md_merge.hpp"
#include "chapters/03_block_merge/md_warp_merge.cuh"
#include "chapters/04_fused_qk_softmax/fused_softmax.hpp"

namespace wb::ch04 {

/// s = scale (q . k) for one query row and one key row of the shared tiles: eq. (1) of
/// chapter 04.
__device__ inline float score(const float* __restrict__ q_row, const float* __restrict__ k_row,
                              int d, float scale) {
  float dot = 0.f;
  for (int t = 0; t < d; ++t) dot = fmaf(q_row[t], k_row[t], dot);
  return scale * dot;
}

/// Chapter 03's merge across the 32 lanes of a warp, as a butterfly: after log2(32) = 5
/// exchanges every lane holds the merge of all 32 lanes' (m, d). Any pairing is right
/// because the merge is associative and commutative. All 32 lanes must call it.
using ch03::warp_merge;

// ------------------------------------------------------------------------------------------
// The shared-memory tiles of the FA1 and FA2 kernels (chapters 05, 06)
// ------------------------------------------------------------------------------------------

/// Keys of a K/V tile of the FA1 and FA2 kernels: one lane each in the score phase.
inline constexpr int kTileKeys = kWarpSize;
/// Output columns of a lane in the FA1 and FA2 kernels, c = lane + 32 t, up to kMaxHeadDim.
inline constexpr int kColumnsPerLane = kMaxHeadDim / kWarpSize;
static_assert(kMaxHeadDim % kWarpSize == 0, "whole columns per lane");

/// The tiles of the FA1 and FA2 kernels in dynamic shared memory, for Q tiles of `rows` rows:
/// the K tile (kTileKeys, odd_stride(d)) (the stride spreads lane j's row over the banks), the V
/// tile (kTileKeys, d), the Q tile (rows, d) and the P~ tile (rows, kTileKeys), in that order.
struct SharedTiles {
  float* k;
  float* v;
  float* q;
  float* p;

  /// The bytes of the four tiles: the launch's dynamic shared memory.
  static std::size_t bytes(int rows, int d) {
    return sizeof(float) * (std::size_t(kTileKeys) * odd_stride(d) + std::size_t(kTileKeys) * d +
                            std::size_t(rows) * d + std::size_t(rows) * kTileKeys);
  }
  __device__ SharedTiles(int rows, int d)
      : k(dynamic_shared<float>()),
        v(k + kTileKeys * odd_stride(d)),
        q(v + kTileKeys * d),
        p(q + rows * d) {}
};

}  // namespace wb::ch04
