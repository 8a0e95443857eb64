// Chapter 12: the merge of a ring step as a kernel. After a rank computed a block's partial
// (O_b, lse_b) for its query rows, it folds it into the running (O, lse) of those rows in place.
//
// Computes: per row, (lse, O) <- (lse, O) . (lse_b, O_b), chapter 09's merge (eq. 5 of
//           ring_attention.md): lse = hi + log(1 + e^{lo - hi}), O = w O + w_b O_b; a row whose
//           block saw no key (lse_b = -inf) keeps its bits, a row still at the identity takes
//           the block's.
// Launch shape: grid ceil(rows / 4), block (32, 4), a warp per row, lane c for columns c, c + 32, ...
// Memory traffic: merge_traffic (ring_attention.hpp): O and O_b read once and O written once,
//           coalesced across the warp; lse and lse_b read and lse written by lane 0 alone.
// Test: ctest --test-dir build -R 12_ring_attention --output-on-failure
#pragma once

#include "common/kernel.cuh"

#include "chapters/09_flash_decoding/lse_merge.hpp"
#include "chapters/12_ring_attention/ring_attention.hpp"

namespace wb::ch12 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

constexpr int kMergeWarps = 4;  // rows per block, a warp each

// o, o_blk: (rows, d); lse, lse_blk: (rows). Warp y of block x merges row 4 x + y.
__global__ void __launch_bounds__(kMergeWarps* kWarpSize)
    merge_ring_step_kernel(float* __restrict__ o, float* __restrict__ lse,
                           const float* __restrict__ o_blk, const float* __restrict__ lse_blk,
                           int rows, int d) {
  const int row = blockIdx.x * kMergeWarps + threadIdx.y;
  if (row >= rows) return;  // the whole warp: no barrier follows
  const int lane = threadIdx.x;
  float* o_row = o + std::size_t(row) * d;
  const float* o_blk_row = o_blk + std::size_t(row) * d;
  // Lane 0 reads the row's two logsumexps and hands them to the warp: every lane then computes
  // the same weights.
  float lse_run = 0.f, lse_b = 0.f;
  if (lane == 0) {
    lse_run = lse[row];
    lse_b = lse_blk[row];
  }
  lse_run = __shfl_sync(kAllLanes, lse_run, 0);
  lse_b = __shfl_sync(kAllLanes, lse_b, 0);
  // [merge_row]
  float lse_new = lse_run;
  // [exercise]
  const ch09::LseMerge w = ch09::lse_merge(lse_run, lse_b);  // eq. (5): chapter 09's eq. (2)
  for (int c = lane; c < d; c += kWarpSize) o_row[c] = w.w_a * o_row[c] + w.w_b * o_blk_row[c];
  lse_new = w.lse;
  // [exercise]
  // [merge_row]
  if (lane == 0) lse[row] = lse_new;
}

}  // namespace

template <>
void Kernels<kThisBackend>::merge_ring_step(const RingMergeArgs& a) {
  if (a.rows == 0) return;
  launch<merge_ring_step_kernel>(dim3(ceil_div(a.rows, kMergeWarps)), dim3(kWarpSize, kMergeWarps),
                                 0, a.o, a.lse, a.o_blk, a.lse_blk, a.rows, a.d);
}

}  // namespace wb::ch12
