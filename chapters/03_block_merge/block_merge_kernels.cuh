// Chapter 03 kernels: the parallel online softmax, two passes per row, (m, d) merged in
// registers and shared memory.
//
// Computes: y = softmax(x) row-wise. Each thread folds a strided slice of its row into (m, d)
//           with chapter 02's online update (eq. 1 of block_merge.md), the threads' pairs are
//           merged with md_merge (eq. 2) through warp shuffles (and, for a block, shared
//           memory), then every thread normalizes its slice. A fully -inf row gives zeros.
// Changed since the previous chapter: chapter 02 ran the recurrence on one thread per row;
//           the merge lets many threads split a row, as chapter 01's warp_shuffle kernel did,
//           but with one read pass for both statistics instead of two.
// Launch shapes:
//   block_per_row_online  one block of 256 threads per row; rows blocks
//   warp_per_row_online   one warp per row, 4 warps (128 threads) per block;
//                         ceil(rows / 4) blocks
// Limits: rows in [1, 2^31 - 1] (grid.x; the warp kernel's whole blocks of 4 rows end at row
//         2^31 - 1 at most), cols in [1, kAnyCols], any value (no multiple of anything; threads
//         with an empty slice hold the identity (-inf, 0)).
// Memory traffic per element: 2 reads (statistics, normalize) and 1 write, as chapter 02,
//           now coalesced: neighbouring lanes read neighbouring addresses.
// Test: ctest --test-dir build -R 03_block_merge --output-on-failure
#pragma once

#include "common/kernel.cuh"

#include "chapters/01_safe_softmax/softmax.hpp"
#include "chapters/02_online_softmax/online_update.hpp"
#include "chapters/03_block_merge/block_merge.hpp"
#include "chapters/03_block_merge/md_merge.hpp"

namespace wb::ch03 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit


// ==========================================================================================
// The merges: across the lanes of a warp (registers), across the warps of a block (shared
// memory). Both are chapter 01's reductions with md_merge in place of max and +.
// ==========================================================================================

// [md_warp_merge]
// Butterfly all-merge over the 32 lanes: after step k every lane holds the merge of 2^(k+1)
// lanes' pairs, after log2(32) = 5 steps the merge of all 32. Lanes l and l ^ lane_mask
// compute md_merge(a, b) and md_merge(b, a): the same bits (eq. 5), so all lanes agree.
__device__ MD warp_all_merge(MD md) {
  // [exercise]
  for (int lane_mask = kWarpSize / 2; lane_mask > 0; lane_mask /= 2) {
    const MD other = {__shfl_xor_sync(kAllLanes, md.m, lane_mask),
                      __shfl_xor_sync(kAllLanes, md.d, lane_mask)};
    md = md_merge(md, other);  // eq. (2)
  }
  // [exercise]
  return md;
}
// [md_warp_merge]

// [md_block_merge]
// Every thread passes its pair and gets the merge of the whole block's pairs.
// scratch: kWarps pairs of shared memory, one per warp.
template <int kWarps>
__device__ MD block_all_merge(MD md, MD* scratch) {
  static_assert(kWarps <= kWarpSize, "the warps' pairs are merged by one warp");
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  md = warp_all_merge(md);
  if (lane == 0) scratch[warp] = md;
  __syncthreads();  // every warp's pair is written before any is read
  md = lane < kWarps ? scratch[lane] : md_identity();  // lanes past the warps: eq. (3)
  md = warp_all_merge(md);  // every warp merges the kWarps pairs: no broadcast needed
  __syncthreads();          // everyone has read scratch before it could be reused
  return md;
}
// [md_block_merge]

// ==========================================================================================
// Rung 1: block per row. Chapter 01's warp_shuffle kernel with its max and sum passes fused:
// one read pass folds (m, d), one block merge, one normalize pass.
// ==========================================================================================

constexpr int kBlockPerRowBlock = 256;

// [block_per_row_online]
// x, y: (rows, cols), row-major. Block b owns row b; thread t folds x[b][t], x[b][t + kBlock],
// ... (a strided, non-contiguous block: the merge does not care which entries a block holds).
template <int kBlock>
__global__ void __launch_bounds__(kBlock)
    block_per_row_online_kernel(const float* __restrict__ x, float* __restrict__ y, int cols) {
  static_assert(kBlock % kWarpSize == 0, "whole warps only: the shuffles use the full mask");
  static_assert(kBlock <= 1024, "CUDA's limit on threads per block");
  constexpr int kWarps = kBlock / kWarpSize;
  __shared__ MD scratch[kWarps];
  const float* xr = x + static_cast<size_t>(blockIdx.x) * cols;
  float* yr = y + static_cast<size_t>(blockIdx.x) * cols;

  MD md = md_identity();  // pass 1: this thread's slice, eq. (1)
  for (int c = threadIdx.x; c < cols; c += kBlock) md = ch02::online_update(md, xr[c]);
  md = block_all_merge<kWarps>(md, scratch);  // eqs. (2), (4): the whole row's (m, d)

  const float shift = ch01::exp_shift(md.m);  // pass 2: normalize
  const float inv_d = ch01::inverse_or_zero(md.d);
  for (int c = threadIdx.x; c < cols; c += kBlock) yr[c] = expf(xr[c] - shift) * inv_d;
}
// [block_per_row_online]

// ==========================================================================================
// Rung 2: warp per row. Same as rung 1 with one warp per row: the merge stays in registers,
// no shared memory and no __syncthreads. Suits rows up to a few thousand entries.
// ==========================================================================================

constexpr int kRowsPerBlock = 4;
constexpr int kWarpPerRowBlock = kRowsPerBlock * kWarpSize;

// [warp_per_row_online]
// x, y: (rows, cols), row-major. Warp w of block b owns row b * kRowsPerBlock + w; lane l
// folds x[row][l], x[row][l + 32], ...
__global__ void __launch_bounds__(kWarpPerRowBlock)
    warp_per_row_online_kernel(const float* __restrict__ x, float* __restrict__ y, int rows,
                               int cols) {
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= rows) return;  // the whole warp leaves: its 32 lanes share the row
  const float* xr = x + static_cast<size_t>(row) * cols;
  float* yr = y + static_cast<size_t>(row) * cols;

  MD md = md_identity();  // pass 1: this lane's slice, eq. (1)
  for (int c = lane; c < cols; c += kWarpSize) md = ch02::online_update(md, xr[c]);
  md = warp_all_merge(md);  // eqs. (2), (4): the whole row's (m, d), in every lane

  const float shift = ch01::exp_shift(md.m);  // pass 2: normalize
  const float inv_d = ch01::inverse_or_zero(md.d);
  for (int c = lane; c < cols; c += kWarpSize) yr[c] = expf(xr[c] - shift) * inv_d;
}
// [warp_per_row_online]

}  // namespace

// ==========================================================================================
// Launchers
// ==========================================================================================

template <>
void Kernels<kThisBackend>::block_per_row_online(const RowArgs& a) {
  launch<block_per_row_online_kernel<kBlockPerRowBlock>>(
      dim3(a.rows), dim3(kBlockPerRowBlock), 0, static_cast<const float*>(a.x),
      static_cast<float*>(a.y), a.cols);
}

template <>
void Kernels<kThisBackend>::warp_per_row_online(const RowArgs& a) {
  launch<warp_per_row_online_kernel>(dim3(ceil_div(a.rows, kRowsPerBlock)), dim3(kWarpPerRowBlock),
                                     0, static_cast<const float*>(a.x), static_cast<float*>(a.y),
                                     a.rows, a.cols);
}

}  // namespace wb::ch03
