// Chapter 06, rung 1: fa2. FlashAttention-2, the rescaled accumulator, in fp32.
//
// Computes: O = softmax(scale Q K^T + causal mask) V and logsumexp = m + log l per row, for
//           Q: (bh, lq, d), K, V: (bh, lk, d), eqs. (3)-(7) of fa2_rescaled.md. A fully
//           masked row (lq > lk with the causal mask) gives O = 0 and logsumexp = -inf.
// Changed since the previous chapter: the output stays unnormalized in registers, SS, and is
//           divided by l once at the end; the loops are swapped (Q tile outer, one block per
//           Q tile and head, K/V tiles inner), so O and (m, l) never go through global memory
//           before they are final; the causal mask skips the K/V tiles above the diagonal.
// Launch shape: grid (ceil(lq / 16), bh); block (32, 16). Warp y owns query row y of the
//           block's Q tile of 16 rows (its m, l and SS in registers); in the score phase lane
//           x owns key x of the K/V tile of 32, in the output phase columns x, x + 32, ...
//           Dynamic shared memory: (32 odd_stride(d) + 32 d + 16 d + 16 x 32) floats, at most
//           43136 bytes (42.1 KiB).
// Limits: lq, lk in [1, kMaxLength], any value; 1 <= d <= 128; bh <= 65535 (grid.y): the
//           rung's limits (its record, at the end of this file), checked before every launch.
// Memory traffic per Q tile of 16 rows (fa2_tiles_traffic in fa2.hpp): its Q rows read once;
//           K and V read once per K/V tile of 32 keys it visits (all ceil(lk / 32), or with
//           the causal mask those up to the diagonal, eq. 7); its rows of O and logsumexp
//           written once, and one int of tiles_visited when given.
// Test: ctest --test-dir build -R 06_fa2_rescaled --output-on-failure
#pragma once

#include "common/kernel.cuh"

#include "chapters/04_fused_qk_softmax/attention_tiles.cuh"
#include "chapters/06_fa2_rescaled/fa2.hpp"

namespace wb::ch06 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

using ch04::kColumnsPerLane;  // SS registers of a lane

constexpr int kRowsPerTile = kKernelRows;  // Br: one warp per query row
constexpr int kKeysPerTile = kKernelKeys;  // Bc: one lane per key in the score phase
constexpr int kThreads = kRowsPerTile * kWarpSize;
static_assert(kKeysPerTile == ch04::kTileKeys, "the K/V tile of ch04::SharedTiles");

// q: (bh, lq, d); k, v: (bh, lk, d); o: (bh, lq, d); lse: (bh, lq); scale: the softmax scale;
// causal: apply eq. (6); tiles_visited: nullptr or (bh, gridDim.x), K/V tiles each block loaded.
// Block (blockIdx.x, blockIdx.y) owns query rows [16 blockIdx.x, 16 blockIdx.x + 16) of head
// blockIdx.y.
__global__ void __launch_bounds__(kThreads)
    fa2_kernel(const float* __restrict__ q, const float* __restrict__ k,
               const float* __restrict__ v, float* __restrict__ o, float* __restrict__ lse,
               AttentionShape shape, float scale, bool causal, int* __restrict__ tiles_visited) {
  const int lq = shape.lq, lk = shape.lk, d = shape.d;
  const int b = blockIdx.y;
  const int i0 = blockIdx.x * kRowsPerTile;
  const int i = i0 + threadIdx.y;  // this warp's query row; rows past lq compute, never write
  const int lane = threadIdx.x;
  const float* kb = k + std::size_t(b) * lk * d;
  const float* vb = v + std::size_t(b) * lk * d;
  // K (32, odd_stride(d)), V (32, d), Q (16, d), P~ (16, 32); the Q tile is loaded once, for
  // good.
  const ch04::SharedTiles smem(kRowsPerTile, d);
  load_rows(q + std::size_t(b) * lq * d, i0, kRowsPerTile, lq, d, d, smem.q);
  const float* q_row = smem.q + threadIdx.y * d;
  float* p_row = smem.p + threadIdx.y * kKeysPerTile;  // this warp's row of P~
  const float* v_tile = smem.v;

  float m = -INFINITY;             // running max of the row
  float l = 0.f;                   // running denominator, relative to m
  float ss[kColumnsPerLane] = {};  // SS, columns lane + 32 t: the unnormalized output, eq. (1)
  const int rows = min(kRowsPerTile, lq - i0);
  const int tiles = kv_tiles_to_visit(i0, rows, lq, lk, kKeysPerTile, causal);  // eq. (7)
  for (int jt = 0; jt < tiles; ++jt) {
    const int j0 = jt * kKeysPerTile;
    __syncthreads();  // the previous K/V tile is no longer read (and the Q tile is loaded)
    load_rows(kb, j0, kKeysPerTile, lk, d, odd_stride(d), smem.k);
    load_rows(vb, j0, kKeysPerTile, lk, d, d, smem.v);
    __syncthreads();  // the K/V tile is complete
    const int j = j0 + lane;
    float s = ch04::score(q_row, smem.k + lane * odd_stride(d), d, scale);
    if (j >= lk || (causal && !ch04::causal_visible(i, j, lq, lk))) s = -INFINITY;  // eq. (6)
    // [accumulator_rescale]
    // [exercise]
    const float m_new = fmaxf(m, warp_max(s));         // eq. (3)
    const float alpha = ch05::rescale(m, m_new);       // e^{m - m_new}, 0 on the first tile
    const float p = expf(s - ch01::exp_shift(m_new));  // P~ relative to the new max
    l = l * alpha + warp_sum(p);
    p_row[lane] = p;
    __syncwarp();  // the warp's P~ row is complete before any lane reads it
    for (int t = 0; t < kColumnsPerLane; ++t) {
      const int c = lane + t * kWarpSize;
      if (c >= d) break;
      float pv = 0.f;  // (P~ V)_c over the tile's keys
      for (int jj = 0; jj < kKeysPerTile; ++jj) pv = fmaf(p_row[jj], v_tile[jj * d + c], pv);
      ss[t] = ss[t] * alpha + pv;  // SS e^{m - m_new} + P~ V
    }
    m = m_new;
    // [exercise]
    // [accumulator_rescale]
    __syncwarp();  // every lane has read P~ (also ordered by the next tile's __syncthreads)
  }

  if (i < lq) {
    const std::size_t row = std::size_t(b) * lq + i;
    // [final_division]
    // [exercise]
    const float inv_l = ch01::inverse_or_zero(l);  // eq. (4): the only division
    for (int t = 0; t < kColumnsPerLane; ++t) {
      const int c = lane + t * kWarpSize;
      if (c < d) o[row * d + c] = ss[t] * inv_l;
    }
    if (lane == 0) lse[row] = logsumexp(m, l);  // eq. (5)
    // [exercise]
    // [final_division]
  }
  if (tiles_visited != nullptr && threadIdx.x == 0 && threadIdx.y == 0)
    tiles_visited[std::size_t(b) * gridDim.x + blockIdx.x] = tiles;
}

void launch_fa2(const AttentionArgs& a) {
  launch<fa2_kernel>(
      dim3(ceil_div(a.shape.lq, kRowsPerTile), a.shape.bh), dim3(kWarpSize, kRowsPerTile),
      ch04::SharedTiles::bytes(kRowsPerTile, a.shape.d), static_cast<const float*>(a.q),
      static_cast<const float*>(a.k), static_cast<const float*>(a.v), static_cast<float*>(a.o),
      a.lse, a.shape, a.scale, a.causal, a.tiles_visited);
}

/// Its tiles, whatever d: kKernelRows x kKernelKeys.
TileShape fa2_tiles(int) {
  return {kKernelRows, kKernelKeys};
}

Traffic fa2_traffic(const AttentionArgs& a) {
  return fa2_tiles_traffic(a, kKernelRows, kKernelKeys);
}

}  // namespace

WB_RUNG(AttentionArgs, fa2,
        "O unnormalized in registers, divided once at the end; Q tiles outer, a block each; "
        "logsumexp out; causal: the tiles above the diagonal skipped",
        attention_limits({Dtype::fp32}, ch04::kMaxHeadDim, {}, ch04::kMaxBatchHeads,
                         /*causal=*/true, kWritesO | kWritesLse),
        &launch_fa2, &fa2_traffic, {&fa2_tiles})

}  // namespace wb::ch06
