// Chapter 09: the split kernel of rungs 1 and 2 (rungs/1_one_split.cuh, rungs/2_split_kv.cuh):
// chapter 06's tiled loop for decoding, one block per (KV head, 16 group rows, key range).
//
// Computes: for each query row of the block, over the keys [j0, j1) of its split (all of them
//           for one_split), O = softmax(scale q K^T + causal mask) V and logsumexp, eq. (1) of
//           flash_decoding.md; Q: (batch, hq, lq, d) against a KV cache K, V: (batch, hkv, lk,
//           d), or paged (eq. 9: a block table into a pool of pages), of which sequence b uses
//           its first lengths[b] keys; query head h reads KV head h / (hq / hkv) (eq. 5);
//           elements fp32, fp16 or bf16, float arithmetic. A row that sees no key gives O = 0
//           and logsumexp = -inf.
// Launch shape: grid (splits x ceil(g lq / 16), batch x hkv), block (32, 4). Warp y owns rows
//           y, y + 4, y + 8, y + 12 of the block's 16 group rows (m, l and the unnormalized
//           output in registers); lane x scores key x of the K/V tile of 32, then owns output
//           columns x, x + 32, ... Dynamic shared memory: chapter 06's tiles for 16 rows, at
//           most 42.1 KiB (d = 128).
// Limits: lq, lk in [1, kMaxLength], any value; 1 <= d <= 128; hq a multiple of hkv;
//           batch x hkv <= 65535 (grid.y); batch x hq x lq and splits x hq / hkv x lq at most
//           2^31 - 1 (int rows, grid.x); lengths in [0, lk]: the rungs' limits, checked before
//           every launch (the kernel clamps a length into [0, lk] all the same).
// Memory traffic: split_traffic (flash_decoding.cpp): Q once per block, K and V once per key a
//           block loads, a split's O row written only where that split saw a key; a paged cache
//           adds every thread's read of the table once per K/V tile.
#pragma once

#include "common/kernel.cuh"

#include <type_traits>

#include "chapters/04_fused_qk_softmax/attention_tiles.cuh"
#include "chapters/09_flash_decoding/decode_ladder.hpp"
#include "chapters/09_flash_decoding/flash_decoding.hpp"
#include "common/tile_load.cuh"
#include "common/vector_types.cuh"

namespace wb::ch09 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

using ch04::kColumnsPerLane;  // output columns of a lane: c = lane + 32 t

constexpr int kRowsPerWarp = kBlockRows / kBlockWarps;
static_assert(kTileKeys == ch04::kTileKeys, "the K/V tile of ch04::SharedTiles");
static_assert(kRowsPerWarp * kBlockWarps == kBlockRows, "every block row has a warp");

// q: (batch, hq, lq, d) of T; k, v: the cache, rows addressed by `cache` (eq. 9) of T;
// lengths: (batch) or nullptr.
// kPartial: o is o_partial (batch, hq, lq, splits, d) of float and lse is lse_partial
// (batch, hq, lq, splits); otherwise o (batch, hq, lq, d) of T and lse (batch, hq, lq), with
// one split. Block (blockIdx.x, blockIdx.y): split blockIdx.x / row_tiles, rows
// [16 (blockIdx.x % row_tiles), + 16) of the group of KV head blockIdx.y % hkv of sequence
// blockIdx.y / hkv; group row r is query head kv x g + r / lq, row r % lq.
template <typename T, bool kPartial>
__global__ void __launch_bounds__(kBlockThreads)
    split_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                 CacheRows cache, const int* __restrict__ lengths, void* __restrict__ o_out,
                 float* __restrict__ lse_out, SplitGrid grid, float scale, bool causal) {
  using Out = typename std::conditional<kPartial, float, T>::type;
  Out* o = static_cast<Out*>(o_out);
  const DecodeShape& shape = grid.shape;
  const int d = shape.d, lq = shape.lq, g = shape.group();
  const int s = blockIdx.x / grid.row_tiles;
  const int r0 = (blockIdx.x % grid.row_tiles) * kBlockRows;
  const int b = blockIdx.y / shape.hkv, kv = blockIdx.y % shape.hkv;
  const int group_rows = g * lq;
  const int rows = min(kBlockRows, group_rows - r0);
  const int warp = threadIdx.y, lane = threadIdx.x;

  __shared__ int length[1];  // the sequence's keys in use, read once for the block
  if (warp == 0 && lane == 0)
    length[0] = lengths == nullptr ? shape.lk : max(0, min(lengths[b], shape.lk));
  const std::size_t group_row0 = (std::size_t(b) * shape.hq + std::size_t(kv) * g) * lq;
  const ch04::SharedTiles smem(kBlockRows, d);
  load_rows(q + group_row0 * d, r0, kBlockRows, group_rows, d, d, smem.q);
  __syncthreads();  // length (and the Q tile) visible to every thread
  const int len = length[0];
  const KeyRange keys = block_keys(len, grid.splits, s, r0, rows, lq, causal);

  float m[kRowsPerWarp], l[kRowsPerWarp];
  float ss[kRowsPerWarp][kColumnsPerLane] = {};  // SS of each owned row, eq. (1) of ch06
  for (int t = 0; t < kRowsPerWarp; ++t) m[t] = -INFINITY, l[t] = 0.f;
  for (int j0 = keys.j0; j0 < keys.j1; j0 += kTileKeys) {
    __syncthreads();  // the previous K/V tile is no longer read
    const std::size_t tile = cache(b, kv, j0);  // 32 consecutive rows, eq. (9)
    load_rows(k + tile, 0, kTileKeys, keys.j1 - j0, d, odd_stride(d), smem.k);
    load_rows(v + tile, 0, kTileKeys, keys.j1 - j0, d, d, smem.v);
    __syncthreads();  // the K/V tile is complete
    const int j = j0 + lane;
#pragma unroll
    for (int t = 0; t < kRowsPerWarp; ++t) {
      const int rr = warp + t * kBlockWarps;  // the block row; the same for the whole warp
      if (rr >= rows) continue;
      const int i = (r0 + rr) % lq;
      float x = ch04::score(smem.q + rr * d, smem.k + lane * odd_stride(d), d, scale);
      if (j >= keys.j1 || (causal && !ch04::causal_visible(i, j, lq, len))) x = -INFINITY;
      // chapter 06's eq. (3): rescale the row's state onto the new max, add the tile
      const float m_new = fmaxf(m[t], warp_max(x));
      const float alpha = ch05::rescale(m[t], m_new);
      const float p = expf(x - ch01::exp_shift(m_new));
      l[t] = l[t] * alpha + warp_sum(p);
      float* p_row = smem.p + rr * kTileKeys;
      p_row[lane] = p;
      __syncwarp();  // the row's P~ is complete before any lane reads it
#pragma unroll
      for (int cc = 0; cc < kColumnsPerLane; ++cc) {
        const int c = lane + cc * kWarpSize;
        if (c >= d) break;
        float pv = 0.f;
        for (int jj = 0; jj < kTileKeys; ++jj) pv = fmaf(p_row[jj], smem.v[jj * d + c], pv);
        ss[t][cc] = ss[t][cc] * alpha + pv;
      }
      m[t] = m_new;  // (each row has its own P~ row: the next write to it follows the next
    }                // tile's __syncthreads)
  }

  // eq. (1): the range's O normalized by its own l, and its logsumexp
  const std::size_t out_rows = kPartial ? std::size_t(grid.splits) : 1;
#pragma unroll
  for (int t = 0; t < kRowsPerWarp; ++t) {
    const int rr = warp + t * kBlockWarps;
    if (rr >= rows) continue;
    const std::size_t row = group_row0 + r0 + rr;
    const std::size_t at = row * out_rows + (kPartial ? s : 0);
    if (lane == 0) lse_out[at] = ch06::logsumexp(m[t], l[t]);
    // A split that saw no key is the merge's identity: the combine reads only its logsumexp
    // (-inf), so its O is not written. A final O row is written whatever it saw (zeros).
    if (kPartial && l[t] == 0.f) continue;
    const float inv_l = ch01::inverse_or_zero(l[t]);
#pragma unroll
    for (int cc = 0; cc < kColumnsPerLane; ++cc) {
      const int c = lane + cc * kWarpSize;
      if (c < d) o[at * d + c] = from_float<Out>(ss[t][cc] * inv_l);
    }
  }
}

template <typename T, bool kPartial>
void launch_split(const DecodeArgs& a, int splits) {
  const DecodeShape& s = a.shape;
  const SplitGrid grid = split_grid(s, splits, kBlockRows);
  launch<split_kernel<T, kPartial>>(
      dim3(grid.splits * grid.row_tiles, s.batch * s.hkv), dim3(kWarpSize, kBlockWarps),
      ch04::SharedTiles::bytes(kBlockRows, s.d), static_cast<const T*>(a.q),
      static_cast<const T*>(a.k), static_cast<const T*>(a.v), cache_rows(a), a.lengths,
      kPartial ? static_cast<void*>(a.o_partial) : a.o, kPartial ? a.lse_partial : a.lse, grid,
      a.scale, a.causal);
}

}  // namespace
}  // namespace wb::ch09
