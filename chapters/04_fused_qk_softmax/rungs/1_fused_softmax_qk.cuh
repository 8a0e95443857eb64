// Chapter 04, rung 1: fused QK^T-softmax, the score matrix never stored.
//
// Computes: P = softmax(scale Q K^T) row-wise and each row's final (m, d), eqs. (4)-(6) of
//           fused_qk_softmax.md, for Q: (bh, lq, d), K: (bh, lk, d).
// Changed since the previous chapter: the softmax input is no longer read from memory; each
//           block computes its scores from a Q tile held in shared memory and K tiles
//           streamed through shared memory, and merges the row statistics across K tiles
//           with chapter 03's md_merge.
// Launch shape: grid (ceil(lq / 8), bh); block (32, 8): warp y owns query row
//           8 blockIdx.x + y, lane x owns key x of the current K tile of 32 keys.
//           Dynamic shared memory: (8 d + 32 odd_stride(d)) floats, at most 20608 bytes (about
//           20.1 KiB).
// Limits: lq, lk in [1, kMaxLength], any value; 1 <= d <= 128; bh <= 65535 (grid.y): the
//           rung's limits (its record, at the end of this file), checked before every launch.
// Memory traffic: Q read once; K read twice (two sweeps) per Q tile of 8 rows; P and each
//           row's (m, d) written once (fused_two_sweeps, below).
// Test: ctest --test-dir build -R 04_fused_qk_softmax --output-on-failure
#pragma once

#include "common/kernel.cuh"

#include <cstdint>
#include <string>

#include "chapters/04_fused_qk_softmax/attention_tiles.cuh"
#include "chapters/04_fused_qk_softmax/fused_softmax.hpp"

namespace wb::ch04 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

constexpr int kRowsPerBlock = kKernelRows;  // query rows of a block's Q tile: one warp each
constexpr int kKeysPerTile = kKernelKeys;   // keys of a K tile: one lane each
constexpr int kThreads = kRowsPerBlock * kWarpSize;
static_assert(kKeysPerTile == kWarpSize, "lane x scores key x of the tile");

/// Shared memory of a launch: the Q tile (kRowsPerBlock, d) and the K tile
/// (kKeysPerTile, odd_stride(d)). The odd stride makes lane j's reads of row j fall in 32
/// different banks whatever d is.
inline std::size_t shared_bytes(int d) {
  return sizeof(float) *
         (std::size_t(kRowsPerBlock) * d + std::size_t(kKeysPerTile) * odd_stride(d));
}

// q: (bh, lq, d); k: (bh, lk, d); p: (bh, lq, lk); stats: (bh, lq); scale: the softmax scale.
// Block (blockIdx.x, blockIdx.y) owns query rows [8 blockIdx.x, 8 blockIdx.x + 8) of head
// blockIdx.y.
__global__ void __launch_bounds__(kThreads)
    fused_softmax_qk_kernel(const float* __restrict__ q, const float* __restrict__ k,
                            float* __restrict__ p, MD* __restrict__ stats, AttentionShape shape,
                            float scale) {
  const int lq = shape.lq, lk = shape.lk, d = shape.d;
  const int b = blockIdx.y;
  const int i0 = blockIdx.x * kRowsPerBlock;
  const int i = i0 + threadIdx.y;  // this warp's query row; rows past lq compute but never write
  const int lane = threadIdx.x;
  const float* qb = q + std::size_t(b) * lq * d;
  const float* kb = k + std::size_t(b) * lk * d;
  float* q_tile = dynamic_shared<float>();     // (kRowsPerBlock, d)
  float* k_tile = q_tile + kRowsPerBlock * d;  // (kKeysPerTile, odd_stride(d))
  const float* q_row = q_tile + threadIdx.y * d;
  const float* k_row = k_tile + lane * odd_stride(d);

  load_rows(qb, i0, kRowsPerBlock, lq, d, d, q_tile);

  // Sweep 1: the row statistics, one K tile at a time.
  MD md = ch03::md_identity();
  for (int j0 = 0; j0 < lk; j0 += kKeysPerTile) {
    __syncthreads();  // the previous K tile has been read by every warp (and Q is loaded)
    load_rows(kb, j0, kKeysPerTile, lk, d, odd_stride(d), k_tile);
    __syncthreads();  // the K tile is complete
    const int j = j0 + lane;
    const float s = score(q_row, k_row, d, scale);  // eq. (1)
    // [tile_stats]
    // [exercise]
    // One key's statistics are (s, 1): chapter 02's update of the empty prefix. A lane past
    // lk holds the identity. The warp merges them into the tile's (m~, d~), eq. (4), and the
    // row's running (m, d) absorbs the tile, eq. (5).
    const MD key = j < lk ? ch02::online_update(ch03::md_identity(), s) : ch03::md_identity();
    const MD tile = warp_merge(key);
    md = ch03::md_merge(md, tile);
    // [exercise]
    // [tile_stats]
  }

  // Sweep 2: recompute the scores, normalize with the final (m, d), eq. (6).
  const float shift = ch01::exp_shift(md.m);
  const float inv_d = ch01::inverse_or_zero(md.d);
  float* p_row = p + (std::size_t(b) * lq + i) * lk;
  for (int j0 = 0; j0 < lk; j0 += kKeysPerTile) {
    __syncthreads();
    load_rows(kb, j0, kKeysPerTile, lk, d, odd_stride(d), k_tile);
    __syncthreads();
    const int j = j0 + lane;
    const float s = score(q_row, k_row, d, scale);
    if (i < lq && j < lk) p_row[j] = expf(s - shift) * inv_d;
  }
  if (i < lq && lane == 0) stats[std::size_t(b) * lq + i] = md;
}

void launch_fused_softmax_qk(const AttentionArgs& a) {
  static_assert(sizeof(MD) == 2 * sizeof(float), "md holds the (m, d) pairs as MD");
  const AttentionShape& s = a.shape;
  launch<fused_softmax_qk_kernel>(dim3(ceil_div(s.lq, kRowsPerBlock), s.bh),
                                  dim3(kWarpSize, kRowsPerBlock), shared_bytes(s.d),
                                  static_cast<const float*>(a.q), static_cast<const float*>(a.k),
                                  a.p, reinterpret_cast<MD*>(a.md), s, a.scale);
}

/// The fused kernel's traffic, one block per Q tile of kKernelRows rows and head: the tile's
/// Q rows read once, K read twice (sweep 1 for (m, d), sweep 2 for P: lk x d per sweep), the
/// tile's rows of P (lk floats each) and of (m, d) (two floats each) written once. S never
/// leaves the chip.
Traffic fused_two_sweeps(const AttentionArgs& a) {
  const std::uint64_t lk = static_cast<std::uint64_t>(a.shape.lk);
  return per_q_tile_traffic(
      a, kRowsPerBlock,
      [&](int, int rows) {
        return TileTraffic{head_rows_bytes(a, rows) + 2 * head_rows_bytes(a, lk),
                           rows * (lk * sizeof(float) + sizeof(MD))};
      },
      "per Q tile of " + std::to_string(kRowsPerBlock) +
          " rows and head: its Q rows once + K twice (two sweeps); its rows of P and (m, d) "
          "written once");
}

}  // namespace

WB_RUNG(AttentionArgs, fused_softmax_qk,
        "S from Q and K tiles in shared memory, never stored; tile (m~, d~) merged into (m, d)",
        attention_limits({Dtype::fp32}, kMaxHeadDim, {}, kMaxBatchHeads, /*causal=*/false,
                         kWritesP | kWritesMd),
        &launch_fused_softmax_qk, &fused_two_sweeps)

}  // namespace wb::ch04
