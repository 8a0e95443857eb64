// Chapter 09 kernels: Flash-Decoding, split-KV attention and the combine.
//
// Computes: O = softmax(scale Q K^T + causal mask) V and logsumexp per query row, for
//           Q: (batch, hq, lq, d) against a KV cache K, V: (batch, hkv, lk, d), or paged
//           (eq. 9 of flash_decoding.md: a block table into a pool of pages), of which
//           sequence b uses its first lengths[b] keys; query head h reads KV head h / (hq / hkv)
//           (eq. 5 of flash_decoding.md); elements fp32, fp16 or bf16, float arithmetic. A row
//           that sees no key gives O = 0 and logsumexp = -inf.
// Changed since chapter 06: the keys, not only the queries, are cut across blocks. one_split
//           is chapter 06's loop with the query rows of a KV head's group sharing each K/V tile;
//           split_kv gives every (KV head, row tile) `splits` blocks, each over a range of keys,
//           writing a partial (O_s, logsumexp_s) in float (eq. 1), and a second kernel merges
//           each row's partials (eq. 4): chapter 03's monoid, carried to (logsumexp, O).
// Launch shape: split: grid (splits x ceil(g lq / 16), batch x hkv), block (32, 4). Warp y owns
//           rows y, y + 4, y + 8, y + 12 of the block's 16 group rows (m, l and the unnormalized
//           output in registers); lane x scores key x of the K/V tile of 32, then owns output
//           columns x, x + 32, ... Dynamic shared memory: chapter 06's tiles for 16 rows, at
//           most 42.1 KiB (d = 128). combine: grid ceil(batch hq lq / 4), block (32, 4), a warp per
//           row.
// Limits: lq, lk in [1, kMaxLength], any value; 1 <= d <= 128; hq a multiple of hkv;
//           batch x hkv <= 65535 (grid.y); batch x hq x lq and splits x hq / hkv x lq at most
//           2^31 - 1 (int rows, grid.x); lengths in [0, lk]: the rungs' limits (kernel_ladder),
//           checked before every launch (the kernel clamps a length into [0, lk] all the same).
// Memory traffic: split_traffic and combine_traffic (flash_decoding.cpp): Q once per block,
//           K and V once per key a block loads, a split's O row written (and read by the
//           combine) only where that split saw a key, two reads of each split's logsumexp; a
//           paged cache adds every thread's read of the table once per K/V tile.
// Test: ctest --test-dir build -R 09_flash_decoding --output-on-failure
#pragma once

#include "common/kernel.cuh"

#include <type_traits>

#include "chapters/04_fused_qk_softmax/attention_tiles.cuh"
#include "chapters/09_flash_decoding/flash_decoding.hpp"
#include "common/vector_types.cuh"

namespace wb::ch09 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

using ch04::kColumnsPerLane;  // output columns of a lane: c = lane + 32 t

constexpr int kWarps = 4;
constexpr int kRowsPerWarp = kBlockRows / kWarps;
constexpr int kThreads = kWarps * kWarpSize;
static_assert(kThreads == kBlockThreads, "the table reads of the traffic formula");
static_assert(kTileKeys == ch04::kTileKeys, "the K/V tile of ch04::SharedTiles");
static_assert(kRowsPerWarp * kWarps == kBlockRows, "every block row has a warp");

// q: (batch, hq, lq, d) of T; k, v: the cache, rows addressed by `cache` (eq. 9) of T;
// lengths: (batch) or nullptr.
// kPartial: o is o_partial (batch, hq, lq, splits, d) of float and lse is lse_partial
// (batch, hq, lq, splits); otherwise o (batch, hq, lq, d) of T and lse (batch, hq, lq), with
// one split. Block (blockIdx.x, blockIdx.y): split blockIdx.x / row_tiles, rows
// [16 (blockIdx.x % row_tiles), + 16) of the group of KV head blockIdx.y % hkv of sequence
// blockIdx.y / hkv; group row r is query head kv x g + r / lq, row r % lq.
template <typename T, bool kPartial>
__global__ void __launch_bounds__(kThreads)
    split_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                 CacheRows cache, const int* __restrict__ lengths, void* __restrict__ o_out,
                 float* __restrict__ lse_out, DecodeShape shape, int splits, int row_tiles,
                 float scale, bool causal) {
  using Out = typename std::conditional<kPartial, float, T>::type;
  Out* o = static_cast<Out*>(o_out);
  const int d = shape.d, lq = shape.lq, g = shape.group();
  const int s = blockIdx.x / row_tiles;
  const int r0 = (blockIdx.x % row_tiles) * kBlockRows;
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
  const KeyRange keys = block_keys(len, splits, s, r0, rows, lq, causal);

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
      const int rr = warp + t * kWarps;  // the block row; the same for the whole warp
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
  const std::size_t out_rows = kPartial ? std::size_t(splits) : 1;
#pragma unroll
  for (int t = 0; t < kRowsPerWarp; ++t) {
    const int rr = warp + t * kWarps;
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
  // warp by chapter 03's monoid: lse = m + log d, -inf when no split saw a key.
  float lse_row = -INFINITY;
  // [exercise]
  ch03::MD md = ch03::md_identity();
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
    w_mine = combine_weight(lse_mine, lse_row);  // e^{lse_s - lse}, eq. (4)
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

template <typename T, bool kPartial>
void launch_split(const DecodeArgs& a, int splits) {
  const DecodeShape& s = a.shape;
  const int row_tiles = ceil_div(s.group() * s.lq, kBlockRows);
  launch<split_kernel<T, kPartial>>(
      dim3(splits * row_tiles, s.batch * s.hkv), dim3(kWarpSize, kWarps),
      ch04::SharedTiles::bytes(kBlockRows, s.d), static_cast<const T*>(a.q),
      static_cast<const T*>(a.k), static_cast<const T*>(a.v), cache_rows(a), a.lengths,
      kPartial ? static_cast<void*>(a.o_partial) : a.o, kPartial ? a.lse_partial : a.lse, s, splits,
      row_tiles, a.scale, a.causal);
}

}  // namespace

// ==========================================================================================
// Launchers
// ==========================================================================================

template <>
void Kernels<kThisBackend>::one_split(const DecodeArgs& a) {
  with_element_type(a.dtype, [&](auto tag) { launch_split<decltype(tag), false>(a, 1); });
}

template <>
void Kernels<kThisBackend>::split_partials(const DecodeArgs& a) {
  with_element_type(a.dtype, [&](auto tag) { launch_split<decltype(tag), true>(a, a.splits); });
}

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
