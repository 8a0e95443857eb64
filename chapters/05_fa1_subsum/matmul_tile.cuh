// Chapter 05 baseline's matmul: c = alpha a b, one 64 x 64 tile of c per block, the depth in
// chunks of 32 through static shared memory. Shared by the standard forward (S = scale Q K^T,
// O = P V; rungs/1_standard.cuh) and chapter 10's standard backward (dV = P^T dO,
// dP = dO V^T, dQ = scale dS K, dK = scale dS^T Q): either operand may be stored transposed.
//
// Launch shape: grid (ceil(cols / 64), ceil(rows / 64), heads); block (32, 8). Thread (x, y)
//   owns rows y + 8 r (r < 8) and columns x + 32 c (c < 2) of the block's tile.
// Memory traffic per head, T(n) = ceil(n / 64) (matmul_tiles in fa1.hpp): a read T(cols)
//   times, b read T(rows) times, c written once; nothing past rows, cols or depth is read.
#pragma once

#include <cstddef>

#include "common/kernel.cuh"

#include "chapters/05_fa1_subsum/fa1.hpp"

namespace wb::ch05 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

constexpr int kTile = kMatmulTile;  // rows and columns of a block's product tile
constexpr int kChunk = 32;          // depth of one shared-memory step
constexpr int kThreadsX = 32, kThreadsY = 8;
constexpr int kMatmulThreads = kThreadsX * kThreadsY;
constexpr int kRowsPerThread = kTile / kThreadsY;  // rows y + 8 r
constexpr int kColsPerThread = kTile / kThreadsX;  // columns x + 32 c
static_assert(kTile % kThreadsY == 0 && kTile % kThreadsX == 0,
              "whole rows and columns per thread");

/// How an operand of c = alpha a b is stored, row-major either way.
enum class Stored {
  plain,       ///< a as (rows, depth), b as (depth, cols): P in O = P V, V in O = P V
  transposed,  ///< a^T as (depth, rows), b^T as (cols, depth): K in S = Q K^T, P in dV = P^T dO
};

// One depth chunk of an operand for its shared tile, a's or b's alike: the entries (o0 + o,
// t0 + t), o < kTile of the `outer` rows of a or columns of b, t < kChunk of the depth, each
// passed to store(o, t, value), zeros past outer or depth. kOuterMajor: entry (o, t) stored at
// o depth + t (a plain, b transposed), else at t outer + o (a transposed, b plain). Consecutive
// lanes load consecutive addresses of global memory (coalesced) either way.
template <bool kOuterMajor, typename Store>
__device__ __forceinline__ void load_chunk(const float* __restrict__ x, int outer, int depth,
                                           int o0, int t0, int tid, Store store) {
  for (int e = tid; e < kTile * kChunk; e += kMatmulThreads) {
    const int o = kOuterMajor ? e / kChunk : e % kTile;
    const int t = kOuterMajor ? e % kChunk : e / kTile;
    const bool inside = o0 + o < outer && t0 + t < depth;
    const std::size_t at =
        kOuterMajor ? std::size_t(o0 + o) * depth + t0 + t : std::size_t(t0 + t) * outer + o0 + o;
    store(o, t, inside ? x[at] : 0.f);
  }
}

// c = alpha a b for head blockIdx.z: a (rows, depth) and b (depth, cols) stored as kA and kB
// say, c (rows, cols) row-major, heads contiguous. Elements past rows, cols or depth load as
// zeros, so short tiles compute on zeros and write nothing.
template <Stored kA, Stored kB>
__global__ void __launch_bounds__(kMatmulThreads)
    matmul_tile_kernel(const float* __restrict__ a, const float* __restrict__ b,
                       float* __restrict__ c, int rows, int cols, int depth, float alpha) {
  // a's tile is read by a warp at one address per step (a broadcast); b's tile a row at a time
  // from consecutive words. The pad columns are for the transposed loads: there the 32 lanes
  // of a warp write one column of a tile (32 depths of one column of b, or 32 rows of a at
  // one depth), words 65 or 33 apart, in 32 different banks (64 or 32 would put them all in
  // one). A plain a needs no pad: its lanes write along a row.
  constexpr int kAPad = kA == Stored::transposed ? 1 : 0;
  __shared__ float a_tile[kTile][kChunk + kAPad];
  __shared__ float b_tile[kChunk][kTile + 1];
  const std::size_t head = blockIdx.z;
  a += head * rows * depth;
  b += head * depth * cols;
  c += head * rows * cols;
  const int i0 = blockIdx.y * kTile, j0 = blockIdx.x * kTile;
  const int tid = threadIdx.y * kThreadsX + threadIdx.x;

  float acc[kRowsPerThread][kColsPerThread] = {};
  for (int t0 = 0; t0 < depth; t0 += kChunk) {
    load_chunk<kA == Stored::plain>(a, rows, depth, i0, t0, tid,
                                    [&](int r, int t, float v) { a_tile[r][t] = v; });
    load_chunk<kB == Stored::transposed>(b, cols, depth, j0, t0, tid,
                                         [&](int col, int t, float v) { b_tile[t][col] = v; });
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

/// c = alpha a b for each of `heads` heads (grid.z: at most 65535).
template <Stored kA, Stored kB>
void matmul(const float* a, const float* b, float* c, int rows, int cols, int depth, float alpha,
            int heads) {
  launch<matmul_tile_kernel<kA, kB>>(dim3(ceil_div(cols, kTile), ceil_div(rows, kTile), heads),
                                     dim3(kThreadsX, kThreadsY), 0, a, b, c, rows, cols, depth,
                                     alpha);
}

}  // namespace
}  // namespace wb::ch05
