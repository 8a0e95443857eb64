// Device helpers for the tiled attention kernels of chapters 04-06: cooperative tile loads,
// one score from shared tiles, chapter 03's merge across a warp, warp max and sum, and the
// shared-memory tiles of the FA1 and FA2 kernels. Inline functions only (this file compiles to
// nothing by itself); each chapter's kernel file includes it.
#pragma once

#include "common/kernel.cuh"
#include "common/vector_types.cuh"

#include "chapters/03_block_merge/md_merge.hpp"
#include "chapters/03_block_merge/md_warp_merge.cuh"
#include "chapters/04_fused_qk_softmax/fused_softmax.hpp"

namespace wb::ch04 {

inline constexpr int kWarpLanes = 32;
inline constexpr unsigned kAllLanes = 0xffffffffu;

/// The row stride, in floats, of a K tile in shared memory: d or d + 1, whichever is odd. Lane
/// j reads element t of key j at word j stride + t, in bank (j stride + t) mod 32; an odd
/// stride shares no factor with 32, so a warp's 32 lanes hit 32 different banks (an even one
/// would put gcd(stride, 32) lanes in each bank they use).
__host__ __device__ constexpr int odd_stride(int d) {
  return d | 1;
}

/// Copies rows [first, first + count) of src (rows of d elements of T: float, or chapter 09's
/// __half and __nv_bfloat16, widened exactly) into dst, floats with a row stride of `stride`,
/// every thread of the block taking a share; rows at or past `limit` become 0, so a short
/// last tile computes on zeros and writes nothing.
template <typename T>
__device__ inline void load_rows(const T* __restrict__ src, int first, int count, int limit, int d,
                                 int stride, float* __restrict__ dst) {
  const int threads = blockDim.x * blockDim.y;
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  for (int e = tid; e < count * d; e += threads) {
    const int r = e / d, t = e % d;
    dst[r * stride + t] = first + r < limit ? to_float(src[std::size_t(first + r) * d + t]) : 0.f;
  }
}

/// Elements of a 16-bit type in one 16-byte load (a uint4).
inline constexpr int kHalvesPer16Bytes = 8;

/// Copies rows [first, first + count) of src (rows of D elements of a 16-bit type) into dst
/// with a row stride of `ld`, 16 bytes per thread and step, the whole block taking a share;
/// rows at or past `limit` become 0 (a short last tile computes on zeros and writes nothing;
/// a zero V row also keeps a NaN from a row past lk out of 0 x NaN).
template <int D, typename T>
__device__ inline void load_rows_16bit(const T* __restrict__ src, int first, int count, int limit,
                                       int ld, T* __restrict__ dst) {
  constexpr int kChunksPerRow = D / kHalvesPer16Bytes;
  const int threads = blockDim.x * blockDim.y;
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  for (int e = tid; e < count * kChunksPerRow; e += threads) {
    const int r = e / kChunksPerRow, c = e % kChunksPerRow * kHalvesPer16Bytes;
    uint4 chunk = make_uint4(0u, 0u, 0u, 0u);
    if (first + r < limit)
      chunk = *reinterpret_cast<const uint4*>(src + std::size_t(first + r) * D + c);
    *reinterpret_cast<uint4*>(dst + r * ld + c) = chunk;
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
using ch03::warp_merge;

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

// ------------------------------------------------------------------------------------------
// The shared-memory tiles of the FA1 and FA2 kernels (chapters 05, 06)
// ------------------------------------------------------------------------------------------

/// Keys of a K/V tile of the FA1 and FA2 kernels: one lane each in the score phase.
inline constexpr int kTileKeys = kWarpLanes;
/// Output columns of a lane in the FA1 and FA2 kernels, c = lane + 32 t, up to kMaxHeadDim.
inline constexpr int kColumnsPerLane = kMaxHeadDim / kWarpLanes;
static_assert(kMaxHeadDim % kWarpLanes == 0, "whole columns per lane");

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
