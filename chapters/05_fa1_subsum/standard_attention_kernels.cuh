// Chapter 05 baseline: standard attention, Algorithm 0 of the FA1 paper, in three launches.
//
// Computes: O = softmax(scale Q K^T) V for Q: (bh, lq, d), K, V: (bh, lk, d), the way a
//           framework does without fusion: S = scale Q K^T written to global memory,
//           chapter 01's softmax (its warp_shuffle rung) reads S and writes P, and O = P V
//           reads P. Both matmuls are one tiled kernel. P is an output; S lives in a scratch
//           buffer of the call.
// Changed since the previous chapter: nothing new. This is the rung FlashAttention is
//           measured against: its lq x lk matrices are the N^2 term of Theorem 2
//           (fa1_subsum.md, "IO complexity"), counted here rather than asserted.
// Launch shapes:
//   matmul_tile_kernel  grid (ceil(cols / 64), ceil(rows / 64), bh); block (32, 8). A block
//                       computes a 64 x 64 tile of the product, the depth in chunks of 32
//                       through static shared memory (16.1 KiB); thread (x, y) owns rows
//                       y + 8 r (r < 8) and columns x + 32 c (c < 2) of the tile.
//   softmax             chapter 01's warp_shuffle: one block of 256 threads per row of S.
// Limits: lq, lk >= 1; 1 <= d <= 128; bh <= 65535 (grid.z); bh x lq rows <= 2^31 - 1 (the
//           softmax's grid): the rung's limits (kernel_ladder in fa1.hpp).
// Memory traffic per head, T(n) = ceil(n / 64) (standard_traffic in fa1.hpp): Q read T(lk)
//           times, K T(lq) times; S written once and read 3 times; P written once and read
//           T(d) times; V read T(lq) times; O written once.
// Test: ctest --test-dir build -R 05_fa1_subsum --output-on-failure
#pragma once

#include <climits>
#include <stdexcept>

#include "common/kernel.cuh"

#include "chapters/01_safe_softmax/softmax.hpp"
#include "chapters/05_fa1_subsum/fa1.hpp"
#include "common/buffer.hpp"

namespace wb::ch05 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

constexpr int kTile = kMatmulTile;  // rows and columns of a block's product tile
constexpr int kChunk = 32;          // depth of one shared-memory step
constexpr int kThreadsX = 32, kThreadsY = 8;
constexpr int kMatmulThreads = kThreadsX * kThreadsY;
constexpr int kRowsPerThread = kTile / kThreadsY;  // rows y + 8 r
constexpr int kColsPerThread = kTile / kThreadsX;  // columns x + 32 c
static_assert(kTile % kThreadsY == 0 && kTile % kThreadsX == 0, "whole rows and columns per thread");

/// How the second operand b of c = alpha a b is stored.
enum class BLayout {
  rows,     ///< b (depth, cols) row-major: V in O = P V
  columns,  ///< b^T (cols, depth) row-major: K in S = Q K^T, whose rows are b's columns
};

// c = alpha a b for head blockIdx.z: a (rows, depth), b (depth, cols) stored as kLayout says,
// c (rows, cols), all row-major with heads contiguous. Elements past rows, cols or depth load
// as zeros, so short tiles compute on zeros and write nothing.
template <BLayout kLayout>
__global__ void __launch_bounds__(kMatmulThreads)
    matmul_tile_kernel(const float* __restrict__ a, const float* __restrict__ b,
                       float* __restrict__ c, int rows, int cols, int depth, float alpha) {
  // a's tile is read by a warp at one address per step (a broadcast); b's tile a row at a time
  // from consecutive words. The pad column of b's tile is for its loads: under
  // BLayout::columns the 32 lanes of a warp write one column of it (32 depths of one key),
  // words 65 apart, in 32 different banks (stride 64 would put them all in one).
  __shared__ float a_tile[kTile][kChunk];
  __shared__ float b_tile[kChunk][kTile + 1];
  const std::size_t head = blockIdx.z;
  a += head * rows * depth;
  b += head * depth * cols;
  c += head * rows * cols;
  const int i0 = blockIdx.y * kTile, j0 = blockIdx.x * kTile;
  const int tid = threadIdx.y * kThreadsX + threadIdx.x;

  float acc[kRowsPerThread][kColsPerThread] = {};
  for (int t0 = 0; t0 < depth; t0 += kChunk) {
    // Consecutive lanes load consecutive addresses of global memory (coalesced) in both
    // operands: along a's rows, and along b's rows or, for BLayout::columns, along b^T's.
    for (int e = tid; e < kTile * kChunk; e += kMatmulThreads) {
      const int r = e / kChunk, t = e % kChunk;
      const bool inside = i0 + r < rows && t0 + t < depth;
      a_tile[r][t] = inside ? a[std::size_t(i0 + r) * depth + t0 + t] : 0.f;
    }
    for (int e = tid; e < kTile * kChunk; e += kMatmulThreads) {
      if constexpr (kLayout == BLayout::columns) {
        const int col = e / kChunk, t = e % kChunk;
        const bool inside = j0 + col < cols && t0 + t < depth;
        b_tile[t][col] = inside ? b[std::size_t(j0 + col) * depth + t0 + t] : 0.f;
      } else {
        const int t = e / kTile, col = e % kTile;
        const bool inside = j0 + col < cols && t0 + t < depth;
        b_tile[t][col] = inside ? b[std::size_t(t0 + t) * cols + j0 + col] : 0.f;
      }
    }
    __syncthreads();  // both tiles are complete
    for (int t = 0; t < kChunk; ++t)
      for (int r = 0; r < kRowsPerThread; ++r)
        for (int q = 0; q < kColsPerThread; ++q)
          acc[r][q] = fmaf(a_tile[threadIdx.y + kThreadsY * r][t],
                           b_tile[t][threadIdx.x + kThreadsX * q], acc[r][q]);
    __syncthreads();  // every warp has read the tiles before the next chunk overwrites them
  }
  for (int r = 0; r < kRowsPerThread; ++r) {
    const int i = i0 + threadIdx.y + kThreadsY * r;
    for (int q = 0; q < kColsPerThread; ++q) {
      const int j = j0 + threadIdx.x + kThreadsX * q;
      if (i < rows && j < cols) c[std::size_t(i) * cols + j] = alpha * acc[r][q];
    }
  }
}

template <BLayout kLayout>
void matmul(const float* a, const float* b, float* c, int rows, int cols, int depth, float alpha,
            int heads) {
  launch<matmul_tile_kernel<kLayout>>(dim3(ceil_div(cols, kTile), ceil_div(rows, kTile), heads),
                                      dim3(kThreadsX, kThreadsY), 0, a, b, c, rows, cols, depth,
                                      alpha);
}

}  // namespace

// ==========================================================================================
// Launcher
// ==========================================================================================

template <>
void Kernels<kThisBackend>::standard(const AttentionArgs& a) {
  const AttentionShape& s = a.shape;
  if (s.rows() > static_cast<std::size_t>(INT_MAX))
    throw std::invalid_argument("standard: bh x lq = " + std::to_string(s.rows()) +
                                " rows exceed the softmax's grid (2^31 - 1 blocks)");
  // S, one lq x lk matrix per head: the memory (and the traffic) that FlashAttention saves.
  DeviceBuffer<float> scores(kThisBackend, s.p_elems());
  const float* q = static_cast<const float*>(a.q);
  matmul<BLayout::columns>(q, static_cast<const float*>(a.k), scores.data(), s.lq, s.lk, s.d,
                           a.scale, s.bh);
  ch01::Kernels<kThisBackend>::warp_shuffle(
      RowArgs{scores.data(), a.p, static_cast<int>(s.rows()), s.lk, Dtype::fp32});
  matmul<BLayout::rows>(a.p, static_cast<const float*>(a.v), static_cast<float*>(a.o), s.lq,
                        s.d, s.lk, 1.f, s.bh);
}

}  // namespace wb::ch05
