// Chapter 01 kernels: safe softmax, three passes per row, as a ladder of three kernels.
//
// Computes: y = softmax(x) row-wise, eqs. (3)-(5) of safe_softmax.md: m = max_j x_j,
//           d = sum_j e^{x_j - m}, y_i = e^{x_i - m} / d. A fully -inf row gives zeros.
// Changed since the previous chapter: this is the first chapter.
// Launch shapes:
//   thread_per_row  one thread per row; blocks of 128 threads, ceil(rows / 128) blocks
//   block_per_row   one block of 256 threads per row; shared-memory tree reductions
//   warp_shuffle    one block of 256 threads per row; warp-shuffle reductions
// Limits: rows in [1, 2^31 - 1] (thread_per_row's whole blocks of 128 end at thread
//           2^31 - 1 at most), cols in [1, kAnyCols], any value (no multiple of anything).
// Memory traffic per element: 3 reads (max, sum, normalize passes) and 1 write.
// Test: ctest --test-dir build -R 01_safe_softmax --output-on-failure
#pragma once

#include "common/kernel.cuh"

#include "chapters/01_safe_softmax/softmax.hpp"

namespace wb::ch01 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

// ==========================================================================================
// Rung 1: thread per row. The CPU loop, one row per thread.
// ==========================================================================================

constexpr int kThreadPerRowBlock = 128;

// [thread_per_row]
// x, y: (rows, cols), row-major. Thread t of the grid owns row t.
__global__ void thread_per_row_kernel(const float* __restrict__ x, float* __restrict__ y, int rows,
                                      int cols) {
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const float* xr = x + static_cast<size_t>(row) * cols;
  float* yr = y + static_cast<size_t>(row) * cols;
  float m = -INFINITY;  // eq. (3)
  for (int c = 0; c < cols; ++c) m = fmaxf(m, xr[c]);
  const float shift = exp_shift(m);
  float d = 0.f;  // eq. (4), in float: the error grows with cols (see the tests' bound)
  for (int c = 0; c < cols; ++c) d += expf(xr[c] - shift);
  const float inv_d = inverse_or_zero(d);
  for (int c = 0; c < cols; ++c) yr[c] = expf(xr[c] - shift) * inv_d;  // eq. (5)
}
// [thread_per_row]

// ==========================================================================================
// Rung 2: block per row. Same three passes, but 256 threads share a row: each folds a
// strided slice, then a shared-memory tree halves the partial results log2(256) = 8 times.
// ==========================================================================================

constexpr int kBlockPerRowBlock = 256;
static_assert((kBlockPerRowBlock & (kBlockPerRowBlock - 1)) == 0, "the tree halves a power of 2");

struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};

// [tree_reduce]
// Reduces one value per thread of the block; every thread gets the result.
// scratch: kBlock floats of shared memory.
template <int kBlock, typename Op>
__device__ float block_tree_reduce(float value, float* scratch, Op op) {
  const int t = threadIdx.x;
  scratch[t] = value;
  __syncthreads();  // every partial is written before anyone reads a neighbour's
  for (int stride = kBlock / 2; stride > 0; stride /= 2) {
    if (t < stride) scratch[t] = op(scratch[t], scratch[t + stride]);
    __syncthreads();  // this level is complete before the next reads it
  }
  const float result = scratch[0];
  __syncthreads();  // everyone has read scratch[0] before scratch is reused
  return result;
}
// [tree_reduce]

// x, y: (rows, cols), row-major. Block b owns row b.
template <int kBlock>
__global__ void __launch_bounds__(kBlock)
    block_per_row_kernel(const float* __restrict__ x, float* __restrict__ y, int cols) {
  __shared__ float scratch[kBlock];
  const float* xr = x + static_cast<size_t>(blockIdx.x) * cols;
  float* yr = y + static_cast<size_t>(blockIdx.x) * cols;

  float m = -INFINITY;  // eq. (3): each thread's slice, then the tree
  for (int c = threadIdx.x; c < cols; c += kBlock) m = fmaxf(m, xr[c]);
  m = block_tree_reduce<kBlock>(m, scratch, MaxOp{});
  const float shift = exp_shift(m);

  float d = 0.f;  // eq. (4)
  for (int c = threadIdx.x; c < cols; c += kBlock) d += expf(xr[c] - shift);
  d = block_tree_reduce<kBlock>(d, scratch, SumOp{});

  const float inv_d = inverse_or_zero(d);  // eq. (5)
  for (int c = threadIdx.x; c < cols; c += kBlock) yr[c] = expf(xr[c] - shift) * inv_d;
}

// ==========================================================================================
// Rung 3: warp shuffles. Same as rung 2, but the 32 lanes of a warp reduce through
// registers (__shfl_xor_sync, 5 steps, no barrier); only the 8 warp results go through
// shared memory: 2 barriers per reduction instead of 10.
// ==========================================================================================

constexpr int kWarpShuffleBlock = 256;
constexpr int kWarpsPerBlock = kWarpShuffleBlock / 32;
constexpr unsigned kFullMask = 0xffffffffu;
static_assert(kWarpShuffleBlock % 32 == 0, "whole warps only");

// [warp_reduce]
// Butterfly all-reduce: after step k every lane holds the result of 2^(k+1) lanes, and after
// log2(32) = 5 steps every lane of the warp holds the result of all 32.
template <typename Op>
__device__ float warp_all_reduce(float value, Op op) {
  // [exercise]
  for (int lane_mask = 16; lane_mask > 0; lane_mask /= 2)
    value = op(value, __shfl_xor_sync(kFullMask, value, lane_mask));
  // [exercise]
  return value;
}
// [warp_reduce]

// Warp results through shared memory, then the first warp reduces those.
// scratch: kWarpsPerBlock floats of shared memory.
template <typename Op>
__device__ float block_shuffle_reduce(float value, float* scratch, Op op, float identity) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  value = warp_all_reduce(value, op);
  if (lane == 0) scratch[warp] = value;
  __syncthreads();  // all warp results are written
  value = lane < kWarpsPerBlock ? scratch[lane] : identity;
  value = warp_all_reduce(value, op);  // every warp reduces the 8 values: no broadcast needed
  __syncthreads();  // everyone has read scratch before it is reused
  return value;
}

// x, y: (rows, cols), row-major. Block b owns row b.
__global__ void __launch_bounds__(kWarpShuffleBlock)
    warp_shuffle_kernel(const float* __restrict__ x, float* __restrict__ y, int cols) {
  __shared__ float scratch[kWarpsPerBlock];
  const float* xr = x + static_cast<size_t>(blockIdx.x) * cols;
  float* yr = y + static_cast<size_t>(blockIdx.x) * cols;

  float m = -INFINITY;  // eq. (3)
  for (int c = threadIdx.x; c < cols; c += kWarpShuffleBlock) m = fmaxf(m, xr[c]);
  m = block_shuffle_reduce(m, scratch, MaxOp{}, -INFINITY);
  const float shift = exp_shift(m);

  float d = 0.f;  // eq. (4)
  for (int c = threadIdx.x; c < cols; c += kWarpShuffleBlock) d += expf(xr[c] - shift);
  d = block_shuffle_reduce(d, scratch, SumOp{}, 0.f);

  const float inv_d = inverse_or_zero(d);  // eq. (5)
  for (int c = threadIdx.x; c < cols; c += kWarpShuffleBlock) yr[c] = expf(xr[c] - shift) * inv_d;
}

}  // namespace

// ==========================================================================================
// Launchers
// ==========================================================================================

template <>
void Kernels<kThisBackend>::thread_per_row(const RowArgs& a) {
  launch<thread_per_row_kernel>(dim3(ceil_div(a.rows, kThreadPerRowBlock)), dim3(kThreadPerRowBlock),
                                0, static_cast<const float*>(a.x), static_cast<float*>(a.y), a.rows,
                                a.cols);
}

template <>
void Kernels<kThisBackend>::block_per_row(const RowArgs& a) {
  launch<block_per_row_kernel<kBlockPerRowBlock>>(dim3(a.rows), dim3(kBlockPerRowBlock), 0,
                                                  static_cast<const float*>(a.x),
                                                  static_cast<float*>(a.y), a.cols);
}

template <>
void Kernels<kThisBackend>::warp_shuffle(const RowArgs& a) {
  launch<warp_shuffle_kernel>(dim3(a.rows), dim3(kWarpShuffleBlock), 0,
                              static_cast<const float*>(a.x), static_cast<float*>(a.y), a.cols);
}

}  // namespace wb::ch01
