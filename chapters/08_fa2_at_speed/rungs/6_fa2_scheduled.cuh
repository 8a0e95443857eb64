// Chapter 08, rung 6: fa2_scheduled. Rung 5, scheduled as FlashAttention-2's own kernel.
//
// Computes: O = softmax(scale Q K^T + causal mask) V and logsumexp per row, for Q: (bh, lq, d),
//           K, V: (bh, lk, d) in __half or __nv_bfloat16, float accumulation: chapter 06's
//           eqs. (3)-(7), as its tensor-core kernel. O in the input type, logsumexp in float; a
//           fully masked row gives O = 0 and logsumexp = -inf.
// Changed since rung 5 (fa2_cp_async): FA2's schedule (fa2_at_speed.md, eqs. 5, 6): 8 warps,
//           Br = 128, so each K/V tile loaded serves twice the rows; the scores stay unscaled
//           and the scale is folded into exp2 (FoldedExp2, warp_tile.cuh); a tile is compared
//           with the mask only where the warp's diagonal or the end of the keys crosses it; under
//           the mask the blocks run in reverse, the heaviest Q tiles first.
// Launch shape: grid (ceil(lq / 128), bh), block (32, 8): warp y owns query rows
//           [128 x + 16 y, 128 x + 16 y + 16) of Q tile x = blockIdx.x (gridDim.x - 1 -
//           blockIdx.x under the mask) of Br = 128 rows; K/V tiles of
//           Bc = 64 keys. Dynamic shared memory: two buffers of one K and one V tile of 64 rows
//           of d elements, swizzled: 32 / 64 KiB (d = 64 / 128, the launcher opts in above
//           48 KiB); the Q tile is staged in buffer 1 before the loop.
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

constexpr int kBr = 128;                 // query rows per block: each K/V tile serves 128 rows
constexpr int kWarps = kBr / kWarpRows;  // a warp per 16 of them
constexpr int kThreads = kWarps * kWarpSize;
static_assert(kBr <= 2 * kKeys, "the Q tile is staged in one K/V pair of buffer 1");

/// Keys per online-softmax step within a K/V tile: all kKeys of it (chapter 06's eq. 3 does not
/// care how the keys are grouped; fa2_register_blocked takes two steps at d = 128). The one step
/// is still a loop, as in fa2_register_blocked: nvcc 13.0 allocates registers by the loop's shape
/// (without it, 134 instead of 147 at d = 64 and 210 instead of 207 at d = 128, sm_90).
constexpr int kStepKeys = kKeys;

/// One K/V tile for the warp's 16 rows from w0, kStepKeys keys at a time, with the scale folded
/// into exp2 (eq. 5) and the mask only on a step that the warp's diagonal or the end of the keys
/// crosses (eq. 6). qa: the warp's Q fragments; k_tile, v_tile: (kKeys, D) in shared memory; j0:
/// the tile's first key; st: the warp's state.
template <typename T, int D>
__device__ __forceinline__ void attend_tile(const std::uint32_t (&qa)[D / 16][4], const T* k_tile,
                                            const T* v_tile, int w0, int j0, AttentionShape shape,
                                            float scale, bool causal, WarpState<D>& st) {
#pragma unroll 1
  for (int key0 = 0; key0 < kKeys; key0 += kStepKeys) {
    const int j_first = j0 + key0;  // the step's first key
    // S~ = Q K^T: s[n] is the 16 x 8 block of keys j_first + [8n, 8n + 8).
    float s[kStepKeys / 8][4] = {};
    tile_scores<T, SwizzledFragments<D>>(qa, k_tile, key0, s);
    // [diagonal_mask]
    // Eq. (6): without the warp's diagonal and the end of the keys in the step, no mask.
    const bool masked = j_first + kStepKeys > shape.lk ||
                        (causal && j_first + kStepKeys - 1 > w0 + (shape.lk - shape.lq));
    // [diagonal_mask]
    softmax_on_scores(s, st, FoldedExp2{scale * kLog2e}, masked,
                      KeyMask{shape, causal, w0, j_first});
    // + P~ V, 16 keys at a time, P~ re-packed from the same registers (eq. 1).
#pragma unroll
    for (int kk = 0; kk < kStepKeys / 16; ++kk) {
      std::uint32_t pa[4] = {};
      pack_p<T>(s[2 * kk], s[2 * kk + 1], pa);
      accumulate_pv<T, SwizzledFragments<D>>(pa, v_tile, key0 + 16 * kk, st);
    }
  }
}

// q: (bh, lq, D); k, v: (bh, lk, D); o: (bh, lq, D), all of type T; lse: (bh, lq) float;
// scale: the softmax scale; causal: apply eq. (6) of chapter 06; tiles_visited: nullptr or
// (bh, gridDim.x), the K/V tiles each block loaded. Block (x, blockIdx.y) owns query rows
// [Br x, Br x + Br) of head blockIdx.y, x = blockIdx.x, or reversed under the mask; warp y the
// 16 rows from Br x + 16 y.
template <typename T, int D>
__global__ void __launch_bounds__(kThreads)
    fa2_scheduled_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                         T* __restrict__ o, float* __restrict__ lse, AttentionShape shape,
                         float scale, bool causal, int* __restrict__ tiles_visited) {
  // Chapter 06's eq. (7): under the mask the last Q tiles see the most keys; they start first.
  const int x = causal ? int(gridDim.x - 1 - blockIdx.x) : int(blockIdx.x);
  const int b = blockIdx.y, i0 = x * kBr;
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

  // The last key the warp's last row sees (eq. 6), written out: nvcc 13.0 gives the kernel 134
  // registers instead of 147 at d = 64 (sm_80) when it is last_visible_key's call.
  const int warp_last_key = causal ? w0 + kWarpRows - 1 + (shape.lk - shape.lq) : shape.lk - 1;
  for_each_kv_tile<SwizzledTile<D>, kThreads>(
      head, shape.lk, tiles, kv, [&](int j0, const T* k_tile, const T* v_tile) {
        // A warp with no row below lq, or whose rows all mask this tile, would add exactly 0: it
        // skips the products (the condition is the same in all its lanes).
        if (w0 < shape.lq && j0 <= warp_last_key)
          attend_tile<T, D>(qa, k_tile, v_tile, w0, j0, shape, scale, causal, st);
      });

  // Eq. (5): m is of unscaled scores; the logsumexp's is m scale (scale > 0).
  for (int h = 0; h < 2; ++h) st.m[h] *= scale;
  store_rows<T, D>(st, o, lse, b, w0, shape.lq, g, t);  // ch. 06's eqs. (4), (5)
  record_tiles_visited(tiles_visited, b, x, tiles);
}

void launch_fa2_scheduled(const AttentionArgs& a) {
  with_tile_shape("fa2_scheduled", a.dtype, a.shape.d, {a.q, a.k, a.v, a.o}, "q, k, v and o",
                  [&](auto t, auto d) {
                    constexpr int D = decltype(d)::value;
                    launch_fast<fa2_scheduled_kernel<decltype(t), D>>(
                        a, kBr, kWarps, kKvBufferBytes<SwizzledTile<D>>);
                  });
}

}  // namespace

WB_RUNG(AttentionArgs, fa2_scheduled,
        "FA2's schedule: Br = 128 over 8 warps, exp2 with the scale folded in, the causal "
        "mask on diagonal tiles only, heaviest causal blocks first",
        folded_scale_limits(), &launch_fa2_scheduled, &fast_traffic<kBr>, fast_facts<kBr>())

}  // namespace wb::ch08
