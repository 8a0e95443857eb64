// Cooperative loads of row tiles from global into shared memory, for the tiled kernels of
// chapters 04-06, 09 and 10. Inline functions only: this file compiles to nothing by itself.
#pragma once

#include <cstddef>

#include "common/kernel.cuh"
#include "common/vector_types.cuh"

namespace wb {

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

}  // namespace wb
