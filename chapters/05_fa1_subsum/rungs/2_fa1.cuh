// Chapter 05, rung 2: FlashAttention-1, Algorithm 1 of the FA1 paper.
//
// Computes: O = softmax(scale Q K^T) V for Q: (bh, lq, d), K, V: (bh, lk, d), and each row's
//           final (m, l), through the normalized SubSum recurrence in its block form,
//           eqs. (5)-(6) of fa1_subsum.md. Neither S nor P is stored.
// Changed since the previous chapter: the kernel no longer outputs P; it multiplies each
//           tile's P~ by the V tile at once and folds the result into O, rescaling the O
//           gathered so far whenever the running max moves. Loop order as in FA1: K/V tiles
//           outer (held in shared memory), Q tiles inner; O and (m, l) live in global memory
//           and are read and written once per (K/V tile, Q tile) pair.
// Memory traffic per head, Tc = ceil(lk / 32) K/V tiles (fa1_traffic, below): K and V
//           read once; Q, O and (m, l) read Tc times (O and (m, l) once per row for each K/V
//           tile; the (m, l) of a row by each of its warp's 32 lanes, one broadcast request);
//           O and (m, l) written Tc + 1 times (line 2's zeros and (-inf, 0) first).
// Launch shape: grid (bh); block (32, 8): one block per head loops over every tile pair.
//           Warp y owns query row y of the current Q tile of 8 rows; in the score phase lane
//           x owns key x of the K/V tile of 32, in the output phase columns x, x + 32, ...
//           Dynamic shared memory: (32 odd_stride(d) + 32 d + 8 d + 8 x 32) floats, at most
//           38016 bytes (37.1 KiB).
// Limits: lq, lk in [1, kMaxLength], any value; 1 <= d <= 128; bh <= 2^31 - 1 (grid.x): the
//           rung's limits (its record, at the end of this file), checked before every launch.
//           One block per head: a GPU with more SMs than heads idles (chapter 06 parallelizes
//           over Q tiles too).
// Test: ctest --test-dir build -R 05_fa1_subsum --output-on-failure
#pragma once

#include "common/kernel.cuh"

#include <climits>

#include "chapters/04_fused_qk_softmax/attention_tiles.cuh"
#include "chapters/05_fa1_subsum/fa1.hpp"

namespace wb::ch05 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

using ch04::kColumnsPerLane;  // output columns of a lane

constexpr int kRowsPerTile = kKernelRows;  // Br: query rows of a Q tile, one warp each
constexpr int kKeysPerTile = kKernelKeys;  // Bc: keys of a K/V tile, one lane each
constexpr int kThreads = kRowsPerTile * kWarpSize;
static_assert(kKeysPerTile == ch04::kTileKeys, "the K/V tile of ch04::SharedTiles");

// q: (bh, lq, d); k, v: (bh, lk, d); o: (bh, lq, d), the running normalized output;
// stats: (bh, lq), the running (m, l); scale: the softmax scale. Block b owns head b.
__global__ void __launch_bounds__(kThreads)
    fa1_kernel(const float* __restrict__ q, const float* __restrict__ k,
               const float* __restrict__ v, float* __restrict__ o, MD* __restrict__ stats,
               AttentionShape shape, float scale) {
  const int lq = shape.lq, lk = shape.lk, d = shape.d;
  const int b = blockIdx.x;
  const int lane = threadIdx.x;
  const int tid = threadIdx.y * kWarpSize + lane;
  const float* qb = q + std::size_t(b) * lq * d;
  const float* kb = k + std::size_t(b) * lk * d;
  const float* vb = v + std::size_t(b) * lk * d;
  float* ob = o + std::size_t(b) * lq * d;
  MD* stats_b = stats + std::size_t(b) * lq;
  const ch04::SharedTiles smem(kRowsPerTile, d);  // K (32, odd_stride(d)), V, Q (8, d), P~
  const float* v_tile = smem.v;
  float* p_row = smem.p + threadIdx.y * kKeysPerTile;  // this warp's row of P~
  const float* q_row = smem.q + threadIdx.y * d;

  // Line 2: O = 0, (m, l) = (-inf, 0) in global memory.
  for (std::size_t e = tid; e < std::size_t(lq) * d; e += kThreads) ob[e] = 0.f;
  for (int r = tid; r < lq; r += kThreads) stats_b[r] = ch03::md_identity();

  for (int j0 = 0; j0 < lk; j0 += kKeysPerTile) {  // lines 5-6: load K_j, V_j on chip
    __syncthreads();  // the previous K/V tile is no longer read (and line 2 is done)
    load_rows(kb, j0, kKeysPerTile, lk, d, odd_stride(d), smem.k);
    load_rows(vb, j0, kKeysPerTile, lk, d, d, smem.v);
    for (int i0 = 0; i0 < lq; i0 += kRowsPerTile) {  // lines 7-8: load Q_i, O_i, l_i, m_i
      __syncthreads();  // K/V tile complete; the previous Q tile is no longer read
      load_rows(qb, i0, kRowsPerTile, lq, d, d, smem.q);
      __syncthreads();                 // the Q tile is complete
      const int i = i0 + threadIdx.y;  // this warp's query row
      const int j = j0 + lane;         // this lane's key
      const float s = ch04::score(q_row, smem.k + lane * odd_stride(d), d, scale);  // line 9
      // Line 10: the tile's (m~, l~) by chapter 03's merge over the warp, and P~ = e^{S - m~}.
      const MD key = j < lk ? ch02::online_update(ch03::md_identity(), s) : ch03::md_identity();
      const MD tile = ch04::warp_merge(key);
      p_row[lane] = j < lk ? expf(s - ch01::exp_shift(tile.m)) : 0.f;
      __syncwarp();  // the warp's P~ row is complete before any lane reads it
      if (i < lq) {
        float* o_row = ob + std::size_t(i) * d;
        // [subsum_rescale]
        const MD old = stats_b[i];                  // (m_i, l_i) from global memory
        const MD next = ch03::md_merge(old, tile);  // line 11: (m_new, l_new)
        // [exercise]
        const float inv_l = ch01::inverse_or_zero(next.d);
        const float keep = old.d * rescale(old.m, next.m) * inv_l;  // l_i e^{m_i - m_new} / l_new
        const float add = rescale(tile.m, next.m) * inv_l;          // e^{m~ - m_new} / l_new
        for (int t = 0; t < kColumnsPerLane; ++t) {
          const int c = lane + t * kWarpSize;
          if (c >= d) break;
          float pv = 0.f;  // (P~ V)_c over the tile's keys
          for (int jj = 0; jj < kKeysPerTile; ++jj) pv = fmaf(p_row[jj], v_tile[jj * d + c], pv);
          o_row[c] = keep * o_row[c] + add * pv;  // line 12, eq. (6)
        }
        // [exercise]
        // [subsum_rescale]
        __syncwarp();  // every lane has read (m_i, l_i) before lane 0 replaces it
        if (lane == 0) stats_b[i] = next;  // line 13
      }
    }
  }
}

void launch_fa1(const AttentionArgs& a) {
  static_assert(sizeof(MD) == 2 * sizeof(float), "md holds the (m, l) pairs as MD");
  launch<fa1_kernel>(dim3(a.shape.bh), dim3(kWarpSize, kRowsPerTile),
                     ch04::SharedTiles::bytes(kRowsPerTile, a.shape.d),
                     static_cast<const float*>(a.q), static_cast<const float*>(a.k),
                     static_cast<const float*>(a.v), static_cast<float*>(a.o),
                     reinterpret_cast<MD*>(a.md), a.shape, a.scale);
}

/// The kernel's traffic: fa1_tiles_traffic (fa1.hpp) with its K/V tiles of kKeysPerTile keys.
Traffic fa1_traffic(const AttentionArgs& a) {
  return fa1_tiles_traffic(a, kKeysPerTile);
}

}  // namespace

// One block per (batch, head), on grid.x: bh up to its CUDA limit, 2^31 - 1.
WB_RUNG(AttentionArgs, fa1,
        "P never stored: each tile's P~ V folded into the normalized O, which goes through "
        "global memory with (m, l)",
        attention_limits({Dtype::fp32}, ch04::kMaxHeadDim, {}, INT_MAX, /*causal=*/false,
                         kWritesO | kWritesMd),
        &launch_fa1, &fa1_traffic)

}  // namespace wb::ch05
