// Chapter 08, rung 5: fa2_cp_async. Rung 4, with the next K/V tile copied while this one
// computes.
//
// Computes: O = softmax(scale Q K^T + causal mask) V and logsumexp per row, for Q: (bh, lq, d),
//           K, V: (bh, lk, d) in __half or __nv_bfloat16, float accumulation: chapter 06's
//           eqs. (3)-(7), as its tensor-core kernel. O in the input type, logsumexp in float; a
//           fully masked row gives O = 0 and logsumexp = -inf.
// Changed since rung 4 (fa2_swizzle): the K/V tiles have two buffers and are copied by
//           cp.async, without passing through registers: tile j + 1 is in flight while tile j
//           is computed, eq. (4) of fa2_at_speed.md (wait_group 1, then a barrier; a barrier
//           again before a buffer is refilled: for_each_kv_tile in kv_pipeline.cuh, which the
//           later rungs keep). Its own kernel from here on: the loop is no longer rung 2's.
// Launch shape: grid (ceil(lq / 64), bh), block (32, 4): warp y owns query rows
//           [64 x + 16 y, 64 x + 16 y + 16) of block x's Q tile of Br = 64 rows; K/V tiles of
//           Bc = 64 keys. Dynamic shared memory: two buffers of one K and one V tile of 64 rows
//           of d elements, swizzled: 32 / 64 KiB (d = 64 / 128, the launcher opts in above
//           48 KiB); the Q tile is staged in buffer 1 before the loop.
// Limits: lq, lk in [1, kMaxLength]; d = 64 or 128 (a template parameter); bh <= 65535
//           (grid.y); q, k, v and o 16-byte aligned (the tile loads move 16 bytes, O's pairs are
//           32-bit stores). Checked before every launch (the record's limits, the launcher).
// Memory traffic per Q tile of 64 rows: chapter 06's (fast_traffic in fa2_at_speed.hpp): Q once,
//           K and V once per K/V tile visited, O and logsumexp once.
// Test: ctest --test-dir build -R 08_fa2_at_speed --output-on-failure
#pragma once

#include "common/kernel.cuh"

#include <cstdint>

#include "chapters/08_fa2_at_speed/fa2_at_speed.hpp"
#include "chapters/08_fa2_at_speed/fast_block.cuh"
#include "chapters/08_fa2_at_speed/fast_launch.cuh"
#include "chapters/08_fa2_at_speed/fast_tiles.cuh"
#include "chapters/08_fa2_at_speed/kv_pipeline.cuh"
#include "chapters/08_fa2_at_speed/warp_tile.cuh"
#include "common/tile_shape.cuh"

namespace wb::ch08 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

constexpr int kWarps = 4;                // a warp per 16 query rows
constexpr int kBr = kWarps * kWarpRows;  // query rows per block
constexpr int kThreads = kWarps * kWarpSize;
static_assert(kBr <= 2 * kKeys, "the Q tile is staged in one K/V pair of buffer 1");

// q: (bh, lq, D); k, v: (bh, lk, D); o: (bh, lq, D), all of type T; lse: (bh, lq) float;
// scale: the softmax scale; causal: apply eq. (6) of chapter 06; tiles_visited: nullptr or
// (bh, gridDim.x), the K/V tiles each block loaded. Block (blockIdx.x, blockIdx.y) owns query
// rows [Br blockIdx.x, Br blockIdx.x + Br) of head blockIdx.y; warp y the 16 rows from
// Br blockIdx.x + 16 y.
template <typename T, int D>
__global__ void __launch_bounds__(kThreads)
    fa2_cp_async_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                        T* __restrict__ o, float* __restrict__ lse, AttentionShape shape,
                        float scale, bool causal, int* __restrict__ tiles_visited) {
  const int b = blockIdx.y, i0 = blockIdx.x * kBr;
  const int warp = threadIdx.y, lane = threadIdx.x, g = lane / 4, t = lane % 4;
  const int w0 = i0 + warp * kWarpRows;  // the warp's first query row
  const HeadInputs<T, D> head(q, k, v, shape, b);

  // Buffer u: K at 2u kTileElements, V right after it; the Q tile staged in buffer 1 before
  // the loop, copied with K/V tile 0 in one group.
  T* kv = dynamic_shared<T>();
  T* q_tile = kv + 2 * kKeys * SwizzledTile<D>::kLd;
  const int rows = min(kBr, shape.lq - i0);
  const int tiles =
      ch06::kv_tiles_to_visit(i0, rows, shape.lq, shape.lk, kKeys, causal);  // eq. (7)
  load_q_and_first_kv<SwizzledTile<D>, kThreads, kBr>(head, i0, shape, tiles, q_tile, kv);
  std::uint32_t qa[D / 16][4];
  load_q_fragments<SwizzledFragments<D>>(qa, q_tile, warp * kWarpRows, lane);
  WarpState<D> st;
  st.clear();
  __syncthreads();  // every warp holds its Q: buffer 1 is free

  const int warp_last_key = last_visible_key(w0, kWarpRows, shape, causal);
  for_each_kv_tile<SwizzledTile<D>, kThreads>(
      head, shape.lk, tiles, kv, [&](int j0, const T* k_tile, const T* v_tile) {
        // A warp with no row below lq, or whose rows all mask this tile, would add exactly 0: it
        // skips the products (the condition is the same in all its lanes).
        if (w0 < shape.lq && j0 <= warp_last_key)
          attend_keys<T, SwizzledFragments<D>, kKeys>(qa, k_tile, v_tile, 0, ScaledExp{scale},
                                                      KeyMask{shape, causal, w0, j0}, st);
      });

  store_rows<T, D>(st, o, lse, b, w0, shape.lq, g, t);  // ch. 06's eqs. (4), (5)
  record_tiles_visited(tiles_visited, b, blockIdx.x, tiles);
}

void launch_fa2_cp_async(const AttentionArgs& a) {
  with_tile_shape("fa2_cp_async", a.dtype, a.shape.d, {a.q, a.k, a.v, a.o}, "q, k, v and o",
                  [&](auto t, auto d) {
                    constexpr int D = decltype(d)::value;
                    launch_fast<fa2_cp_async_kernel<decltype(t), D>>(
                        a, kBr, kWarps, kKvBufferBytes<SwizzledTile<D>>);
                  });
}

}  // namespace

WB_RUNG(AttentionArgs, fa2_cp_async,
        "K/V tiles double-buffered by cp.async: tile j + 1 loads while j computes", fast_limits(),
        &launch_fa2_cp_async, &fast_traffic<kBr>, fast_facts<kBr>())

}  // namespace wb::ch08
