// Chapter 08, rung 4: fa2_swizzle. Rung 3, with its tiles swizzled instead of padded.
//
// Computes: O = softmax(scale Q K^T + causal mask) V and logsumexp per row, for Q: (bh, lq, d),
//           K, V: (bh, lk, d) in __half or __nv_bfloat16, float accumulation: chapter 06's
//           eqs. (3)-(7), as its tensor-core kernel. O in the input type, logsumexp in float; a
//           fully masked row gives O = 0 and logsumexp = -inf.
// Changed since rung 3 (fa2_ldmatrix): the tiles' rows are D elements apart, unpadded, with
//           16-byte chunk c of row r stored at chunk c ^ (r % 8), eq. (3) of fa2_at_speed.md:
//           the same single wavefront per ldmatrix matrix as padded rows, with no byte wasted.
// Launch shape: grid (ceil(lq / 64), bh), block (32, 4): warp y owns query rows
//           [64 x + 16 y, 64 x + 16 y + 16) of block x's Q tile of Br = 64 rows; K/V tiles of
//           Bc = 64 keys. Dynamic shared memory: one K and one V tile of 64 rows of d elements,
//           swizzled: 16 / 32 KiB (d = 64 / 128); the Q tile is staged in them before the
//           loop.
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
#include "chapters/08_fa2_at_speed/fast_launch.cuh"
#include "chapters/08_fa2_at_speed/fast_tiles.cuh"
#include "chapters/08_fa2_at_speed/warp_tile.cuh"
#include "common/ptx.cuh"
#include "common/tile_shape.cuh"

namespace wb::ch08 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

constexpr int kWarps = 4;                // a warp per 16 query rows
constexpr int kBr = kWarps * kWarpRows;  // query rows per block
constexpr int kThreads = kWarps * kWarpSize;
template <int D>
using Tile = SwizzledTile<D>;  // rows unpadded, 16-byte chunks XOR-swizzled, eq. (3)
template <int D>
using Fragments = LdmatrixFragments<Tile<D>>;  // by ldmatrix .x4, eq. (2)
/// One K and one V tile; the Q tile is staged in them before the loop.
template <int D>
constexpr int kSharedBytes = 2 * (kKeys * Tile<D>::kRowBytes);
static_assert(kBr <= 2 * kKeys, "the Q tile is staged in one K/V pair");

/// One K/V tile for the warp's 16 rows from w0: S~ = Q K^T into registers, the online softmax
/// on them (chapter 06's eq. 3), then O += P~ V with P~ re-packed from the same registers.
/// qa: the warp's Q fragments; k_tile, v_tile: (kKeys, D) in shared memory; j0: the tile's
/// first key; st: the warp's state.
template <typename T, int D>
__device__ __forceinline__ void attend_tile(const std::uint32_t (&qa)[D / 16][4], const T* k_tile,
                                            const T* v_tile, int w0, int j0, AttentionShape shape,
                                            float scale, bool causal, WarpState<D>& st) {
  // S~ = Q K^T: s[n] is the 16 x 8 block of keys j0 + [8n, 8n + 8).
  float s[kKeys / 8][4] = {};
  tile_scores<T, Fragments<D>>(qa, k_tile, 0, s);
  // Eq. (6) of chapter 06: row w0 + r against key j0 + c, and the keys past lk.
  softmax_on_scores(s, st, ScaledExp{scale}, /*masked=*/true, [&](int r, int c) {
    const int i = w0 + r, j = j0 + c;
    return j >= shape.lk || (causal && !ch04::causal_visible(i, j, shape.lq, shape.lk));
  });

  // + P~ V, 16 keys at a time. Eq. (1): the A fragment of keys [16 kk, 16 kk + 16) is the
  // accumulators of key groups 2 kk (columns 0-7 of A) and 2 kk + 1 (columns 8-15), each row
  // pair rounded and packed: A's registers (g, 2t..), (g + 8, 2t..), (g, 2t + 8..),
  // (g + 8, 2t + 8..) are exactly S's (g, 2t..) and (g + 8, 2t..) of the two groups.
#pragma unroll
  for (int kk = 0; kk < kKeys / 16; ++kk) {
    std::uint32_t pa[4] = {};
    pa[0] = ptx::pack_pair<T>(s[2 * kk][0], s[2 * kk][1]);
    pa[1] = ptx::pack_pair<T>(s[2 * kk][2], s[2 * kk][3]);
    pa[2] = ptx::pack_pair<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    pa[3] = ptx::pack_pair<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    accumulate_pv<T, Fragments<D>>(pa, v_tile, 16 * kk, st);
  }
}

// q: (bh, lq, D); k, v: (bh, lk, D); o: (bh, lq, D), all of type T; lse: (bh, lq) float;
// scale: the softmax scale; causal: apply eq. (6) of chapter 06; tiles_visited: nullptr or
// (bh, gridDim.x), the K/V tiles each block loaded. Block (blockIdx.x, blockIdx.y) owns query
// rows [Br blockIdx.x, Br blockIdx.x + Br) of head blockIdx.y; warp y the 16 rows from
// Br blockIdx.x + 16 y.
template <typename T, int D>
__global__ void __launch_bounds__(kThreads)
    fa2_swizzle_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                       T* __restrict__ o, float* __restrict__ lse, AttentionShape shape,
                       float scale, bool causal, int* __restrict__ tiles_visited) {
  constexpr int kTileElements = kKeys * Tile<D>::kLd;  // one K or V tile
  const int lq = shape.lq, lk = shape.lk, b = blockIdx.y;
  const int i0 = blockIdx.x * kBr;
  const int warp = threadIdx.y, lane = threadIdx.x, g = lane / 4, t = lane % 4;
  const int w0 = i0 + warp * kWarpRows;  // the warp's first query row
  const T* q_b = q + std::size_t(b) * lq * D;
  const T* k_b = k + std::size_t(b) * lk * D;
  const T* v_b = v + std::size_t(b) * lk * D;

  // K at 0, V right after it; the Q tile staged there before the loop.
  T* smem = dynamic_shared<T>();
  T* q_tile = smem;
  const int rows = min(kBr, lq - i0);
  const int tiles = ch06::kv_tiles_to_visit(i0, rows, lq, lk, kKeys, causal);  // eq. (7), ch. 06

  load_tile<Tile<D>, kThreads, kBr>(q_b, i0, lq, q_tile);
  __syncthreads();  // the Q tile is complete
  // The warp's 16 rows of Q as A fragments, kept in registers for the whole loop.
  std::uint32_t qa[D / 16][4];
  for (int ks = 0; ks < D / 16; ++ks)
    Fragments<D>::load_a(qa[ks], q_tile, warp * kWarpRows, 16 * ks, lane);

  WarpState<D> st;
  st.clear();

  // The last key the warp's last row sees (eq. 6): a tile past it is masked for all its rows.
  const int warp_last_key = causal ? w0 + kWarpRows - 1 + (lk - lq) : lk - 1;
  const bool warp_has_rows = w0 < lq;
  for (int jt = 0; jt < tiles; ++jt) {
    const int j0 = jt * kKeys;
    __syncthreads();  // the previous K/V tile (or the Q tile) is no longer read
    load_tile<Tile<D>, kThreads, kKeys>(k_b, j0, lk, smem);
    load_tile<Tile<D>, kThreads, kKeys>(v_b, j0, lk, smem + kTileElements);
    __syncthreads();  // the K/V tile is complete
    // A warp with no row below lq, or whose rows all mask this tile, would add exactly 0: it
    // skips the products (the condition is the same in all its lanes).
    if (warp_has_rows && j0 <= warp_last_key)
      attend_tile<T, D>(qa, smem, smem + kTileElements, w0, j0, shape, scale, causal, st);
  }

  store_rows<T, D>(st, o, lse, b, w0, lq, g, t);  // chapter 06's eqs. (4), (5)
  if (tiles_visited != nullptr && threadIdx.x == 0 && threadIdx.y == 0)
    tiles_visited[std::size_t(b) * gridDim.x + blockIdx.x] = tiles;
}

void launch_fa2_swizzle(const AttentionArgs& a) {
  with_tile_shape("fa2_swizzle", a.dtype, a.shape.d, {a.q, a.k, a.v, a.o}, "q, k, v and o",
                  [&](auto t, auto d) {
                    using T = decltype(t);
                    constexpr int D = decltype(d)::value;
                    launch_fast<fa2_swizzle_kernel<T, D>, T>(a, kBr, kWarps, kSharedBytes<D>);
                  });
}

}  // namespace

WB_RUNG(AttentionArgs, fa2_swizzle, "tiles XOR-swizzled in 16-byte chunks instead of padded rows",
        fast_limits(), &launch_fa2_swizzle, &fast_traffic<kBr>, fast_facts<kBr>())

}  // namespace wb::ch08
