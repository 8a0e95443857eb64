// Chapter 03, rung 2: warp per row, online. Rung 1 with one warp per row: the 32 lanes' pairs
// merge through shuffles alone, in registers, with no shared memory and no __syncthreads.
// Suits rows up to a few thousand entries.
//
// Computes: y = softmax(x) row-wise. Each lane folds a strided slice of its row into (m, d)
//           with chapter 02's online update (eq. 1 of block_merge.md), the lanes' pairs are
//           merged with md_merge (eq. 2) by a butterfly of warp shuffles, then every lane
//           normalizes its slice. A fully -inf row gives zeros.
// Changed since rung 1: a warp per row instead of a block: the merge stays in registers.
// Launch shape: one warp per row, 4 warps (128 threads) per block; ceil(rows / 4) blocks.
// Limits: rows in [1, 2^31 - 1] (whole blocks of 4 rows end at row 2^31 - 1 at most), cols in
//         [1, kAnyCols], any value (lanes with an empty slice hold the identity (-inf, 0));
//         fp32.
// Memory traffic per element: 2 reads (statistics, normalize) and 1 write, coalesced.
// Test: ctest --test-dir build -R 03_block_merge --output-on-failure
#pragma once

#include "common/kernel.cuh"
#include "common/row_facts.hpp"

#include "chapters/01_safe_softmax/softmax.hpp"
#include "chapters/02_online_softmax/online_update.hpp"
#include "chapters/03_block_merge/block_merge.hpp"
#include "chapters/03_block_merge/md_merge.hpp"

namespace wb::ch03 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

constexpr int kRowsPerBlock = 4;  // a warp per row
constexpr int kBlock = kRowsPerBlock * kWarpSize;

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

// [warp_per_row_online]
// x, y: (rows, cols), row-major. Warp w of block b owns row b * kRowsPerBlock + w; lane l
// folds x[row][l], x[row][l + 32], ...
__global__ void __launch_bounds__(kBlock)
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

void launch_warp_per_row_online(const RowArgs& a) {
  launch<warp_per_row_online_kernel>(dim3(ceil_div(a.rows, kRowsPerBlock)), dim3(kBlock), 0,
                                     static_cast<const float*>(a.x), static_cast<float*>(a.y),
                                     a.rows, a.cols);
}

// A warp shares a row, each lane folding its entries one at a time, in scalars; 5 merges.
RowPlan warp_per_row_online_plan(int /*cols*/, Dtype /*t*/, bool /*vectors*/) {
  return {kWarpSize, butterfly_levels(kWarpSize), 1, RowCache::none, 0};
}

}  // namespace

WB_ROW_RUNG(RowArgs, warp_per_row_online,
            "one warp per row: the merge stays in registers, no barrier", row_limits(kAnyCols),
            &launch_warp_per_row_online, &two_passes)

}  // namespace wb::ch03
