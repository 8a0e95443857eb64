// Chapter 09: the combine kernel of the split rungs (rungs/2_split_kv.cuh and after): each
// row's partials (O_s, logsumexp_s) merged into O and the logsumexp by eq. (4), chapter 03's
// monoid carried to (logsumexp, O).
//
// Computes: lse = M + log l, O = sum_s e^{lse_s - M} / l O_s with M = max_s lse_s and
//           l = sum_s e^{lse_s - M}, the row's (m, d) (eq. 4 of flash_decoding.md), every
//           split that saw no key weighing 0; a row no split saw gives O = 0 and
//           logsumexp = -inf.
// Launch shape: grid ceil(batch hq lq / 4), block (32, 4), a warp per row.
// Memory traffic: combine_traffic (flash_decoding.cpp): two reads of each split's logsumexp,
//           each seen split's O row once, O and the logsumexp written.
// Test: ctest --test-dir build -R 09_flash_decoding --output-on-failure
#pragma once

#include "common/kernel.cuh"

#include "chapters/04_fused_qk_softmax/attention_tiles.cuh"
#include "chapters/03_block_merge/md_merge.hpp"
#include "chapters/06_fa2_rescaled/fa2.hpp"
#include "chapters/09_flash_decoding/decode_ladder.hpp"
#include "chapters/09_flash_decoding/lse_merge.hpp"
#include "common/vector_types.cuh"

namespace wb::ch09 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

using ch04::kColumnsPerLane;  // output columns of a lane: c = lane + 32 t

constexpr int kCombineWarps = 4;  // rows per block of the combine kernel, a warp each
constexpr int kCombineBatch = 8;  // splits whose O rows a warp loads before adding them
static_assert(kWarpSize % kCombineBatch == 0, "batches tile the warp's 32 splits");

// o_partial: (rows, splits, d), lse_partial: (rows, splits); o: (rows, d) of T, lse: (rows).
// Warp y of block x merges row 4 x + y: lane x reads the logsumexps of splits x, x + 32, ...
// and the row's logsumexp is chapter 03's merge of their (m, d) over the warp; then every
// split that saw a key adds its O row with its weight, eq. (4).
template <typename T>
__global__ void __launch_bounds__(kCombineWarps* kWarpSize)
    combine_kernel(const float* __restrict__ o_partial, const float* __restrict__ lse_partial,
                   T* __restrict__ o, float* __restrict__ lse, int rows, int splits, int d) {
  const int row = blockIdx.x * kCombineWarps + threadIdx.y;
  if (row >= rows) return;  // the whole warp: no barrier follows
  const int lane = threadIdx.x;
  const float* lse_s = lse_partial + std::size_t(row) * splits;
  const float* o_s = o_partial + std::size_t(row) * splits * d;

  // [combine]
  // The row's logsumexp: each lane's splits as chapter 02's online (m, d), merged over the
  // warp by chapter 03's monoid: lse = m + log d, -inf when no split saw a key. The weights
  // come from (m, d) itself: m = M and d = l of eq. (4).
  float lse_row = -INFINITY;
  ch03::MD md = ch03::md_identity();
  // [exercise]
  for (int s = lane; s < splits; s += kWarpSize) md = ch03::md_merge(md, {lse_s[s], 1.f});
  md = ch04::warp_merge(md);
  lse_row = ch06::logsumexp(md.m, md.d);
  // [exercise]
  float acc[kColumnsPerLane] = {};
  for (int s0 = 0; s0 < splits; s0 += kWarpSize) {
    const int mine = s0 + lane;
    const float lse_mine = mine < splits ? lse_s[mine] : -INFINITY;
    float w_mine = 0.f;  // the weight of split `mine` in the row
    // [exercise]
    w_mine = combine_weight(lse_mine, md.m, md.d);  // e^{lse_s - M} / l, eq. (4)
    // [exercise]
    // The splits in batches of kCombineBatch, each batch's O rows loaded before any is added:
    // that many loads in flight at once, not one after another (a split that saw no key, the
    // identity, has weight 0 and its unwritten O row is not read).
    for (int jj0 = 0; jj0 < kWarpSize && s0 + jj0 < splits; jj0 += kCombineBatch) {
      float w[kCombineBatch], x[kCombineBatch][kColumnsPerLane];
#pragma unroll
      for (int u = 0; u < kCombineBatch; ++u) {
        const int jj = jj0 + u;  // past the last split: lse_mine = -inf there
        const bool seen = __shfl_sync(kAllLanes, lse_mine, jj) != -INFINITY;
        const float w_jj = __shfl_sync(kAllLanes, w_mine, jj);
        w[u] = seen ? w_jj : 0.f;
        const float* o_row = o_s + std::size_t(s0 + jj) * d;
#pragma unroll
        for (int cc = 0; cc < kColumnsPerLane; ++cc) {
          const int c = lane + cc * kWarpSize;
          x[u][cc] = seen && c < d ? o_row[c] : 0.f;
        }
      }
#pragma unroll
      for (int u = 0; u < kCombineBatch; ++u)
#pragma unroll
        for (int cc = 0; cc < kColumnsPerLane; ++cc) acc[cc] = fmaf(w[u], x[u][cc], acc[cc]);
    }
  }
  // [combine]
#pragma unroll
  for (int cc = 0; cc < kColumnsPerLane; ++cc) {
    const int c = lane + cc * kWarpSize;
    if (c < d) o[std::size_t(row) * d + c] = from_float<T>(acc[cc]);
  }
  if (lane == 0) lse[row] = lse_row;
}

}  // namespace

template <>
void Kernels<kThisBackend>::combine(const DecodeArgs& a) {
  const int rows = static_cast<int>(a.shape.rows());
  with_element_type(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    launch<combine_kernel<T>>(dim3(ceil_div(rows, kCombineWarps)), dim3(kWarpSize, kCombineWarps),
                              0, a.o_partial, a.lse_partial, static_cast<T*>(a.o), a.lse, rows,
                              a.splits, a.shape.d);
  });
}

}  // namespace wb::ch09
