// The kernel of rungs 2 to 4: chapter 06's FA2 on mma.sync, with S~ kept in registers (eq. 1 of
// fa2_at_speed.md, fa2_mma's idea). Rungs 3 and 4 change only how it reads its fragments
// (ldmatrix, eq. 2) and how its tiles are laid out (the swizzle, eq. 3): both are its template
// parameter Fragments (fast_tiles.cuh over tile_layout.hpp), so each of those rungs is this
// kernel with its own Fragments, and `diff` of their files is that one type.
//
// Launch shape: grid (ceil(lq / 64), bh), block (32, 4): warp y owns query rows
//           [64 x + 16 y, 64 x + 16 y + 16) of block x's Q tile of Br = 64 rows; K/V tiles of
//           Bc = 64 keys. Dynamic shared memory: one K and one V tile of 64 rows of d elements
//           in the layout of Fragments::Tile (padded rows: 18 / 34 KiB at d = 64 / 128;
//           swizzled: 16 / 32 KiB); the Q tile is staged in them before the loop.
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
#include "chapters/08_fa2_at_speed/warp_tile.cuh"
#include "common/tile_shape.cuh"

namespace wb::ch08 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

constexpr int kMmaWarps = 4;                     // a warp per 16 query rows
constexpr int kMmaRows = kMmaWarps * kWarpRows;  // query rows per block, Br
constexpr int kMmaThreads = kMmaWarps * kWarpSize;
/// One K and one V tile of Tile; the Q tile is staged in them before the loop.
template <typename Tile>
constexpr int kMmaSharedBytes = 2 * (kKeys * Tile::kRowBytes);
static_assert(kMmaRows <= 2 * kKeys, "the Q tile is staged in one K/V pair");

// q: (bh, lq, D); k, v: (bh, lk, D); o: (bh, lq, D), all of type T; lse: (bh, lq) float;
// scale: the softmax scale; causal: apply eq. (6) of chapter 06; tiles_visited: nullptr or
// (bh, gridDim.x), the K/V tiles each block loaded. Block (blockIdx.x, blockIdx.y) owns query
// rows [Br blockIdx.x, Br blockIdx.x + Br) of head blockIdx.y; warp y the 16 rows from
// Br blockIdx.x + 16 y. Fragments: how the warp reads its fragments, from tiles in the layout
// Fragments::Tile.
template <typename T, int D, typename Fragments>
__global__ void __launch_bounds__(kMmaThreads)
    fa2_mma_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                   T* __restrict__ o, float* __restrict__ lse, AttentionShape shape, float scale,
                   bool causal, int* __restrict__ tiles_visited) {
  using Tile = typename Fragments::Tile;
  constexpr int kTileElements = kKeys * Tile::kLd;  // one K or V tile
  const int b = blockIdx.y, i0 = blockIdx.x * kMmaRows;
  const int warp = threadIdx.y, lane = threadIdx.x, g = lane / 4, t = lane % 4;
  const int w0 = i0 + warp * kWarpRows;  // the warp's first query row
  const HeadInputs<T, D> head(q, k, v, shape, b);

  // K at 0, V right after it; the Q tile staged there before the loop.
  T* smem = dynamic_shared<T>();
  const int rows = min(kMmaRows, shape.lq - i0);
  const int tiles =
      ch06::kv_tiles_to_visit(i0, rows, shape.lq, shape.lk, kKeys, causal);  // eq. (7)

  load_tile<Tile, kMmaThreads, kMmaRows>(head.q, i0, shape.lq, smem);
  __syncthreads();  // the Q tile is complete
  std::uint32_t qa[D / 16][4];
  load_q_fragments<Fragments>(qa, smem, warp * kWarpRows, lane);
  WarpState<D> st;
  st.clear();

  const int warp_last_key = last_visible_key(w0, kWarpRows, shape, causal);
  for (int jt = 0; jt < tiles; ++jt) {
    const int j0 = jt * kKeys;
    __syncthreads();  // the previous K/V tile (or the Q tile) is no longer read
    load_tile<Tile, kMmaThreads, kKeys>(head.k, j0, shape.lk, smem);
    load_tile<Tile, kMmaThreads, kKeys>(head.v, j0, shape.lk, smem + kTileElements);
    __syncthreads();  // the K/V tile is complete
    // A warp with no row below lq, or whose rows all mask this tile, would add exactly 0: it
    // skips the products (the condition is the same in all its lanes).
    if (w0 < shape.lq && j0 <= warp_last_key)
      attend_keys<T, Fragments, kKeys>(qa, smem, smem + kTileElements, 0, ScaledExp{scale},
                                       KeyMask{shape, causal, w0, j0}, st);
  }

  store_rows<T, D>(st, o, lse, b, w0, shape.lq, g, t);  // ch. 06's eqs. (4), (5)
  record_tiles_visited(tiles_visited, b, blockIdx.x, tiles);
}

/// Launches fa2_mma_kernel with fragments FragmentsOf<TileOf<D>> for a's element type and head
/// dimension: rung 2's launcher, and rungs 3's and 4's with theirs.
template <template <typename> class FragmentsOf, template <int> class TileOf>
void launch_mma(const AttentionArgs& a) {
  // The refusals' first word: the name of the rung whose record holds this launcher (a string
  // literal, as every rung's name).
  static const char* const rung = [] {
    const Ladder<AttentionArgs> ladder = kernel_ladder<kThisBackend>();
    const Rung<AttentionArgs>* record = rung_launching(ladder, &launch_mma<FragmentsOf, TileOf>);
    return record != nullptr ? record->name : "fa2_mma_kernel";
  }();
  with_tile_shape(rung, a.dtype, a.shape.d, {a.q, a.k, a.v, a.o}, "q, k, v and o",
                  [&](auto t, auto d) {
                    using Tile = TileOf<decltype(d)::value>;
                    launch_fast<fa2_mma_kernel<decltype(t), Tile::kColumns, FragmentsOf<Tile>>>(
                        a, kMmaRows, kMmaWarps, kMmaSharedBytes<Tile>);
                  });
}

/// What fa2_mma_kernel moves and the facts of a rung that it is (fa2_at_speed.hpp, Br = 64).
inline Traffic mma_traffic(const AttentionArgs& a) {
  return fast_traffic<kMmaRows>(a);
}
inline RungFacts mma_facts() {
  return fast_facts<kMmaRows>();
}

}  // namespace
}  // namespace wb::ch08
