// Chapter 08, rung 7: fa2_register_blocked. Rung 6, with two tiles of 16 rows per warp.
//
// Computes: O = softmax(scale Q K^T + causal mask) V and logsumexp per row, for Q: (bh, lq, d),
//           K, V: (bh, lk, d) in __half or __nv_bfloat16, float accumulation: chapter 06's
//           eqs. (3)-(7), as its tensor-core kernel. O in the input type, logsumexp in float; a
//           fully masked row gives O = 0 and logsumexp = -inf.
// Changed since rung 6 (fa2_scheduled): register blocking, eq. (7) of fa2_at_speed.md: each
//           warp owns R = 2 row tiles of 16 rows, 4 warps keep Br = 128, and every K or V
//           fragment read from shared memory feeds two mma instead of one. The registers that
//           takes (O for 32 rows) leave none for Q's: the warps read Q's fragments from a Q tile
//           of its own in shared memory at every step, and at d = 128 take each K/V tile in two
//           online-softmax steps of 32 keys.
// Launch shape: grid (ceil(lq / 128), bh), block (32, 4): warp y owns query rows
//           [128 x + 32 y, 128 x + 32 y + 32) of Q tile x = blockIdx.x (gridDim.x - 1 -
//           blockIdx.x under the mask) of Br = 128 rows; K/V tiles of
//           Bc = 64 keys. Dynamic shared memory: two buffers of one K and one V tile of 64 rows
//           of d elements, swizzled, and the Q tile of 128 rows after them: 48 / 96 KiB (d = 64 /
//           128, the launcher opts in above 48 KiB).
// Limits: lq, lk in [1, kMaxLength]; d = 64 or 128 (a template parameter); bh <= 65535
//           (grid.y); q, k, v and o 16-byte aligned (the tile loads move 16 bytes, O's pairs are
//           32-bit stores); scale > 0 (the row max is of unscaled scores, eq. 5). Checked before
//           every launch (the record's limits, the launcher).
// Memory traffic per Q tile of 128 rows: chapter 06's (fast_traffic in fa2_at_speed.hpp): Q once,
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

constexpr int kWarps = 4;     // a warp per 32 query rows
constexpr int kRowTiles = 2;  // of 16 rows per warp, eq. (7)
constexpr int kRowsPerWarp = kRowTiles * kWarpRows;
constexpr int kBr = kWarps * kRowsPerWarp;  // query rows per block
constexpr int kThreads = kWarps * kWarpSize;
/// The K/V buffers of eq. (4), then the Q tile.
template <int D>
constexpr int kSharedBytes = kKvBufferBytes<SwizzledTile<D>> + kBr* SwizzledTile<D>::kRowBytes;

/// Keys per online-softmax step within a K/V tile (chapter 06's eq. 3 does not care how the keys
/// are grouped): all kKeys, but 32 at d = 128, where a warp holds O for 32 rows (128 registers)
/// and would need 64 more for S~ of 64 keys (eq. 7).
template <int D>
constexpr int kStepKeys = D > 64 ? kKeys / 2 : kKeys;

/// One K/V tile for the warp's kRowTiles tiles of 16 rows from w0, kStepKeys<D> keys at a
/// time: S~ = Q K^T into registers, the online softmax on them (chapter 06's eq. 3), then
/// O += P~ V with P~ re-packed from the same registers (eq. 1); each K or V fragment read
/// serves both row tiles. q_fragment(mt, ks, a): row tile mt's Q fragment of head columns
/// [16 ks, 16 ks + 16); k_tile, v_tile: (kKeys, D) in shared memory; j0: the tile's first key;
/// st[mt]: row tile mt's state.
template <typename T, int D, typename QFragment>
__device__ __forceinline__ void attend_tile(QFragment q_fragment, const T* k_tile, const T* v_tile,
                                            int w0, int j0, AttentionShape shape, float scale,
                                            bool causal, WarpState<D> (&st)[kRowTiles]) {
  constexpr int kStep = kStepKeys<D>;
  // [register_blocked_step]
#pragma unroll 1
  for (int key0 = 0; key0 < kKeys; key0 += kStep) {
    const int j_first = j0 + key0;  // the step's first key
    // S~ = Q K^T: s[mt][n] is the 16 x 8 block of keys j_first + [8n, 8n + 8), row tile mt.
    float s[kRowTiles][kStep / 8][4] = {};
    row_tiles_scores<T, SwizzledFragments<D>, kRowTiles>(q_fragment, k_tile, key0, s);
#pragma unroll
    for (int mt = 0; mt < kRowTiles; ++mt) {
      const int r0 = w0 + kWarpRows * mt;  // the row tile's first row
      // Eq. (6): without the row tile's diagonal and the end of the keys in the step, no mask.
      const bool masked = j_first + kStep > shape.lk ||
                          (causal && j_first + kStep - 1 > r0 + (shape.lk - shape.lq));
      softmax_on_scores(s[mt], st[mt], FoldedExp2{scale * kLog2e}, masked,
                        KeyMask{shape, causal, r0, j_first});
    }
    // + P~ V, 16 keys at a time, both row tiles' P~ against each V fragment read.
#pragma unroll
    for (int kk = 0; kk < kStep / 16; ++kk) {
      std::uint32_t pa[kRowTiles][4] = {};
#pragma unroll
      for (int mt = 0; mt < kRowTiles; ++mt) pack_p<T>(s[mt][2 * kk], s[mt][2 * kk + 1], pa[mt]);
      row_tiles_pv<T, SwizzledFragments<D>, kRowTiles>(pa, v_tile, key0 + 16 * kk, st);
    }
  }
  // [register_blocked_step]
}

// q: (bh, lq, D); k, v: (bh, lk, D); o: (bh, lq, D), all of type T; lse: (bh, lq) float;
// scale: the softmax scale; causal: apply eq. (6) of chapter 06; tiles_visited: nullptr or
// (bh, gridDim.x), the K/V tiles each block loaded. Block (x, blockIdx.y) owns query rows
// [Br x, Br x + Br) of head blockIdx.y, x = blockIdx.x, or reversed under the mask; warp y the
// 32 rows from Br x + 32 y, row tile mt of them the 16 from Br x + 32 y + 16 mt.
template <typename T, int D>
__global__ void __launch_bounds__(kThreads)
    fa2_register_blocked_kernel(const T* __restrict__ q, const T* __restrict__ k,
                                const T* __restrict__ v, T* __restrict__ o, float* __restrict__ lse,
                                AttentionShape shape, float scale, bool causal,
                                int* __restrict__ tiles_visited) {
  const int warp = threadIdx.y, lane = threadIdx.x, g = lane / 4, t = lane % 4;
  // Chapter 06's eq. (7): under the mask the last Q tiles see the most keys; they start first.
  const int x = causal ? int(gridDim.x - 1 - blockIdx.x) : int(blockIdx.x);
  const int b = blockIdx.y, i0 = x * kBr;
  const int w0 = i0 + warp * kRowsPerWarp;  // the warp's first query row
  const HeadInputs<T, D> head(q, k, v, shape, b);

  // Buffer u: K at 2u kTileElements, V right after it; the Q tile after the buffers, copied
  // with K/V tile 0 in one group.
  T* kv = dynamic_shared<T>();
  T* q_tile = kv + 2 * 2 * kKeys * SwizzledTile<D>::kLd;
  const int rows = min(kBr, shape.lq - i0);
  const int tiles =
      ch06::kv_tiles_to_visit(i0, rows, shape.lq, shape.lk, kKeys, causal);  // eq. (7)
  load_q_and_first_kv<SwizzledTile<D>, kThreads, kBr>(head, i0, shape, tiles, q_tile, kv);
  // Each row tile's Q fragments, read from the Q tile whenever a key step needs them (eq. 7).
  const auto q_fragment = [&](int mt, int ks, std::uint32_t(&a)[4]) {
    SwizzledFragments<D>::load_a(a, q_tile, warp * kRowsPerWarp + kWarpRows * mt, 16 * ks, lane);
  };
  WarpState<D> st[kRowTiles];
  for (int mt = 0; mt < kRowTiles; ++mt) st[mt].clear();

  // The last key the warp's last row sees (eq. 6), written out as in fa2_scheduled: nvcc 13.0
  // gives the kernel 236 registers instead of 225 at d = 64 (sm_90) when it is a call.
  const int warp_last_key = causal ? w0 + kRowsPerWarp - 1 + (shape.lk - shape.lq) : shape.lk - 1;
  for_each_kv_tile<SwizzledTile<D>, kThreads>(
      head, shape.lk, tiles, kv, [&](int j0, const T* k_tile, const T* v_tile) {
        // A warp with no row below lq, or whose rows all mask this tile, would add exactly 0: it
        // skips the products (the condition is the same in all its lanes).
        if (w0 < shape.lq && j0 <= warp_last_key)
          attend_tile<T, D>(q_fragment, k_tile, v_tile, w0, j0, shape, scale, causal, st);
      });

  for (int mt = 0; mt < kRowTiles; ++mt) {
    // Eq. (5): m is of unscaled scores; the logsumexp's is m scale (scale > 0).
    for (int h = 0; h < 2; ++h) st[mt].m[h] *= scale;
    store_rows<T, D>(st[mt], o, lse, b, w0 + kWarpRows * mt, shape.lq, g, t);
  }
  record_tiles_visited(tiles_visited, b, x, tiles);
}

void launch_fa2_register_blocked(const AttentionArgs& a) {
  with_tile_shape("fa2_register_blocked", a.dtype, a.shape.d, {a.q, a.k, a.v, a.o}, "q, k, v and o",
                  [&](auto t, auto d) {
                    constexpr int D = decltype(d)::value;
                    launch_fast<fa2_register_blocked_kernel<decltype(t), D>>(a, kBr, kWarps,
                                                                             kSharedBytes<D>);
                  });
}

}  // namespace

WB_RUNG(AttentionArgs, fa2_register_blocked,
        "register blocking: Br = 128 over 4 warps of 32 rows, each K/V fragment read from "
        "shared memory feeds two mma; Q's fragments read from shared memory at each tile",
        folded_scale_limits(), &launch_fa2_register_blocked, &fast_traffic<kBr>, fast_facts<kBr>())

}  // namespace wb::ch08
