// Eq. (4) of fa2_at_speed.md, fa2_cp_async's idea, which fa2_scheduled and fa2_register_blocked
// keep unchanged: K/V tiles copied by cp.async into two buffers, tile j + 1 in flight while tile
// j is computed. Device code only (this file compiles to nothing by itself).
// Test: ctest --test-dir build -R 08_fa2_at_speed --output-on-failure
#pragma once

#include "common/kernel.cuh"

#include "chapters/08_fa2_at_speed/fast_block.cuh"
#include "chapters/08_fa2_at_speed/fast_tiles.cuh"
#include "chapters/08_fa2_at_speed/tile_layout.hpp"
#include "common/ptx.cuh"

namespace wb::ch08 {
namespace {  // device code with internal linkage: one copy per backend's translation unit

/// The two buffers of eq. (4), one K and one V tile of Tile each.
template <typename Tile>
constexpr int kKvBufferBytes = 2 * (2 * kKeys * Tile::kRowBytes);

/// Q's tile of kBr rows from i0 and, when the block visits any, K/V tile 0 into buffer 0 at kv
/// (K, then V kKeys rows of Tile further), copied by cp.async in one group and waited for; the
/// barrier makes them the block's.
template <typename Tile, int kThreads, int kBr, typename T, int D>
__device__ __forceinline__ void load_q_and_first_kv(const HeadInputs<T, D>& head, int i0,
                                                    AttentionShape shape, int tiles, T* q_tile,
                                                    T* kv) {
  constexpr int kTileElements = kKeys * Tile::kLd;  // one K or V tile
  load_tile_async<Tile, kThreads, kBr>(head.q, i0, shape.lq, q_tile);
  if (tiles > 0) {
    load_tile_async<Tile, kThreads, kKeys>(head.k, 0, shape.lk, kv);
    load_tile_async<Tile, kThreads, kKeys>(head.v, 0, shape.lk, kv + kTileElements);
  }
  ptx::cp_async_commit();
  ptx::cp_async_wait<0>();
  __syncthreads();  // the Q tile is complete
}

// [cp_async_loop]
/// K/V tiles 0 .. tiles - 1 through two buffers at kv (buffer u: K at 2u kTileElements, V right
/// after it), tile 0 already in buffer 0 (load_q_and_first_kv): attend(j0, k_tile, v_tile)
/// computes tile jt, of first key j0, while tile jt + 1 is copied into the other buffer.
template <typename Tile, int kThreads, typename T, int D, typename Attend>
__device__ __forceinline__ void for_each_kv_tile(const HeadInputs<T, D>& head, int lk, int tiles,
                                                 T* kv, Attend attend) {
  constexpr int kTileElements = kKeys * Tile::kLd;  // one K or V tile
  for (int jt = 0; jt < tiles; ++jt) {
    const int j0 = jt * kKeys;
    if (jt + 1 < tiles) {
      T* next = kv + (jt + 1) % 2 * 2 * kTileElements;
      load_tile_async<Tile, kThreads, kKeys>(head.k, j0 + kKeys, lk, next);
      load_tile_async<Tile, kThreads, kKeys>(head.v, j0 + kKeys, lk, next + kTileElements);
    }
    ptx::cp_async_commit();
    ptx::cp_async_wait<1>();  // all but the newest group: tile jt has landed
    __syncthreads();          // ... for every thread's copies
    const T* k_tile = kv + jt % 2 * 2 * kTileElements;
    attend(j0, k_tile, k_tile + kTileElements);
    __syncthreads();  // tile jt read: its buffer may be refilled
  }
}
// [cp_async_loop]

}  // namespace
}  // namespace wb::ch08
