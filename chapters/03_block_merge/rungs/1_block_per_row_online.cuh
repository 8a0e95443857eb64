// Chapter 03, rung 1: block per row, online. Chapter 01's warp_shuffle kernel with its max and
// sum passes fused: each of 256 threads folds a strided slice of the row into (m, d) with
// chapter 02's online update, the block merges the threads' pairs, and one more pass
// normalizes.
//
// Computes: y = softmax(x) row-wise. Each thread folds its slice into (m, d) (eq. 1 of
//           block_merge.md), the pairs are merged with md_merge (eq. 2) through warp shuffles
//           and shared memory, then every thread normalizes its slice. A fully -inf row gives
//           zeros.
// Changed since the previous chapter: chapter 02 ran the recurrence on one thread per row; the
//           merge lets many threads split a row, as chapter 01's warp_shuffle kernel did, but
//           with one read pass for both statistics instead of two.
// Launch shape: one block of 256 threads per row (grid = rows).
// Limits: rows in [1, 2^31 - 1], cols in [1, kAnyCols], any value (no multiple of anything;
//         threads with an empty slice hold the identity (-inf, 0)); fp32.
// Memory traffic per element: 2 reads (statistics, normalize) and 1 write, as chapter 02, now
//         coalesced: neighbouring threads read neighbouring addresses.
// Test: ctest --test-dir build -R 03_block_merge --output-on-failure
#pragma once

#include "common/kernel.cuh"
#include "common/row_facts.hpp"

#include "chapters/01_safe_softmax/softmax.hpp"
#include "chapters/02_online_softmax/online_update.hpp"
#include "chapters/03_block_merge/block_merge.hpp"
#include "chapters/03_block_merge/md_merge.hpp"
#include "chapters/03_block_merge/md_stats.cuh"

namespace wb::ch03 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

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
  md = block_merge<kWarps>(md, scratch);  // eqs. (2), (4): the whole row's (m, d)

  const float shift = ch01::exp_shift(md.m);  // pass 2: normalize
  const float inv_d = ch01::inverse_or_zero(md.d);
  for (int c = threadIdx.x; c < cols; c += kBlock) yr[c] = expf(xr[c] - shift) * inv_d;
}
// [block_per_row_online]

void launch_block_per_row_online(const RowArgs& a) {
  launch<block_per_row_online_kernel<kBlockPerRowBlock>>(dim3(a.rows), dim3(kBlockPerRowBlock), 0,
                                                         static_cast<const float*>(a.x),
                                                         static_cast<float*>(a.y), a.cols);
}

// 256 threads share a row, each folding its entries one at a time, in scalars; a block's merge.
RowPlan block_per_row_online_plan(int /*cols*/, Dtype /*t*/, bool /*vectors*/) {
  return {kBlockPerRowBlock, kBlockMergeLevels, 1, RowCache::none, 0};
}

}  // namespace

WB_ROW_RUNG(RowArgs, block_per_row_online,
            "chapter 02's recurrence split over 256 threads per row, their (m, d) pairs merged",
            row_limits(kAnyCols), &launch_block_per_row_online, &two_passes)

}  // namespace wb::ch03
