// Device helpers for the tiled attention kernels of chapters 04-06: cooperative tile loads,
// one score from shared tiles, chapter 03's merge across a warp, warp max and sum. Inline functions
// only (this file compiles to nothing by itself); each chapter's kernel file includes it.
#pragma once

#include "common/kernel.cuh"

#include "chapters/03_block_merge/md_merge.hpp"

namespace wb::ch04 {

inline constexpr int kWarpLanes = 32;
inline constexpr unsigned kAllLanes = 0xffffffffu;

/// Copies rows [first, first + count) of src (rows of d floats) into dst with a row stride
/// of `stride` floats, every thread of the block taking a share; rows at or past `limit`
/// become 0, so a short last tile computes on zeros and writes nothing.
__device__ inline void load_rows(const float* __restrict__ src, int first, int count, int limit,
                                 int d, int stride, float* __restrict__ dst) {
  const int threads = blockDim.x * blockDim.y;
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  for (int e = tid; e < count * d; e += threads) {
    const int r = e / d, t = e % d;
    dst[r * stride + t] = first + r < limit ? src[std::size_t(first + r) * d + t] : 0.f;
  }
}

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
__device__ inline ch03::MD warp_merge(ch03::MD md) {
  for (int lane_mask = kWarpLanes / 2; lane_mask > 0; lane_mask /= 2) {
    const ch03::MD other{__shfl_xor_sync(kAllLanes, md.m, lane_mask),
                         __shfl_xor_sync(kAllLanes, md.d, lane_mask)};
    md = ch03::md_merge(md, other);
  }
  return md;
}

/// max over the 32 lanes of a warp, in every lane (butterfly, 5 exchanges).
__device__ inline float warp_max(float x) {
  for (int lane_mask = kWarpLanes / 2; lane_mask > 0; lane_mask /= 2)
    x = fmaxf(x, __shfl_xor_sync(kAllLanes, x, lane_mask));
  return x;
}

/// Sum over the 32 lanes of a warp, in every lane (butterfly, 5 exchanges).
__device__ inline float warp_sum(float x) {
  for (int lane_mask = kWarpLanes / 2; lane_mask > 0; lane_mask /= 2)
    x += __shfl_xor_sync(kAllLanes, x, lane_mask);
  return x;
}

}  // namespace wb::ch04
