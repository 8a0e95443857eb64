// Chapter 08 kernels: FlashAttention-2 on mma.sync, one idea per rung (fa2_at_speed.hpp).
//
// Computes: O = softmax(scale Q K^T + causal mask) V and logsumexp per row, for Q: (bh, lq, d),
//           K, V: (bh, lk, d) in __half or __nv_bfloat16, float accumulation: chapter 06's
//           eqs. (3)-(7), as its tensor-core kernel. O in the input type, logsumexp in float; a
//           fully masked row gives O = 0 and logsumexp = -inf.
// Changed since chapter 06's fa2_tensor_core: the products are mma.sync.m16n8k16 (common/ptx.cuh)
//           and S~ never leaves registers: each lane holds its S~ elements in the accumulator
//           layout, takes the row statistics with two shuffles, and re-packs the same registers
//           as P~'s A fragment (eq. 1 of fa2_at_speed.md). One kernel template serves the five
//           rungs; the recipe (fa2_at_speed.hpp) switches on one idea per rung:
//             fa2_mma        fragments by 32-bit loads, padded rows, K/V through registers
//             fa2_ldmatrix   + fragments by ldmatrix .x4 (.trans for V)              eq. (2)
//             fa2_swizzle    + XOR-swizzled tiles instead of padding                 eq. (3)
//             fa2_cp_async   + K/V tiles double-buffered by cp.async                 eq. (4)
//             fa2_scheduled  + Br = 128 (8 warps), exp2 with the scale folded in, mask on
//                              diagonal tiles only, heaviest causal blocks first      eqs. (5), (6)
// Launch shape: grid (ceil(lq / Br), bh), block (32, warps): warp y owns query rows
//           [16 y, 16 y + 16) of the block's Q tile of Br = 16 warps rows; K/V tiles of Bc = 64
//           keys. Dynamic shared memory: K and V tiles (64 rows of d elements, + 16 bytes padded),
//           two pairs with cp.async; the Q tile is staged in the last pair before the loop.
//           fa2_mma, fa2_ldmatrix: 18 / 34 KiB (d = 64 / 128); fa2_swizzle 16 / 32 KiB;
//           fa2_cp_async, fa2_scheduled 32 / 64 KiB (d = 128 opts in above 48 KiB).
// Limits: lq, lk >= 1; d = 64 or 128 (a template parameter); bh <= 65535 (grid.y); q, k, v
//           16-byte aligned; fa2_scheduled also scale > 0 (its row max is of unscaled scores).
//           Checked before every launch (kernel_ladder, and the launcher).
// Memory traffic per Q tile of Br rows: chapter 06's (fast_traffic in fa2_at_speed.hpp): Q once,
//           K and V once per K/V tile visited, O and logsumexp once.
// Test: ctest --test-dir build -R 08_fa2_at_speed --output-on-failure
#pragma once

#include "common/kernel.cuh"

#include <cstdint>
#include <stdexcept>
#include <string>

#include "chapters/08_fa2_at_speed/fa2_at_speed.hpp"
#include "chapters/08_fa2_at_speed/fast_tiles.cuh"
#include "chapters/08_fa2_at_speed/warp_tile.cuh"
#include "common/ptx.cuh"
#include "common/shared_memory.cuh"
#include "common/tile_shape.cuh"

namespace wb::ch08 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

/// One K/V tile for the warp's 16 rows from w0: S~ = Q K^T into registers, the online softmax
/// on them (chapter 06's eq. 3), then O += P~ V with P~ re-packed from the same registers.
/// qa: the warp's Q fragments; k_tile, v_tile: (kKeys, D) in shared memory; j0: the tile's
/// first key; masked: whether any (row, key) of the tile may be masked (eq. 6).
template <typename T, int D, typename Recipe>
__device__ __forceinline__ void attend_tile(const std::uint32_t (&qa)[D / 16][4], const T* k_tile,
                                            const T* v_tile, int w0, int j0, AttentionShape shape,
                                            float scale, bool causal, bool masked,
                                            WarpState<D>& st) {
  constexpr bool kSw = Recipe::kSwizzle, kLd = Recipe::kLdmatrix;
  constexpr int kKeyGroups = kKeys / 8;  // S~'s n-tiles of 8 keys

  // S~ = Q K^T: s[n] is the 16 x 8 block of keys [j0 + 8n, j0 + 8n + 8).
  float s[kKeyGroups][4] = {};
  tile_scores<T, D, kSw, kLd>(qa, k_tile, 0, s);
  // Eq. (6) of chapter 06: row w0 + r against key j0 + c, and the keys past lk.
  softmax_on_scores<Recipe::kScheduled>(s, st, scale, masked, [&](int r, int c) {
    const int i = w0 + r, j = j0 + c;
    return j >= shape.lk || (causal && !ch04::causal_visible(i, j, shape.lq, shape.lk));
  });

  // + P~ V, 16 keys at a time. Eq. (1): the A fragment of keys [16 kk, 16 kk + 16) is the
  // accumulators of key groups 2 kk (columns 0-7 of A) and 2 kk + 1 (columns 8-15), each row
  // pair rounded and packed: A's registers (g, 2t..), (g + 8, 2t..), (g, 2t + 8..),
  // (g + 8, 2t + 8..) are exactly S's (g, 2t..) and (g + 8, 2t..) of the two groups.
  for (int kk = 0; kk < kKeys / 16; ++kk) {
    std::uint32_t pa[4] = {};
    // [exercise]
    pa[0] = ptx::pack_pair<T>(s[2 * kk][0], s[2 * kk][1]);
    pa[1] = ptx::pack_pair<T>(s[2 * kk][2], s[2 * kk][3]);
    pa[2] = ptx::pack_pair<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    pa[3] = ptx::pack_pair<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    // [exercise]
    accumulate_pv<T, D, kSw, kLd>(pa, v_tile, 16 * kk, st);
  }
}

// q: (bh, lq, D); k, v: (bh, lk, D); o: (bh, lq, D), all of type T; lse: (bh, lq) float;
// scale: the softmax scale; causal: apply eq. (6) of chapter 06; tiles_visited: nullptr or
// (bh, gridDim.x), the K/V tiles each block loaded. Block (x, blockIdx.y) owns query rows
// [Br x, Br x + Br) of head blockIdx.y, x = blockIdx.x (or reversed, fa2_scheduled under the
// mask); warp y the 16 rows from Br x + 16 y.
template <typename T, int D, typename Recipe>
__global__ void __launch_bounds__(Recipe::kWarps* kLanes)
    fa2_fast_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                    T* __restrict__ o, float* __restrict__ lse, AttentionShape shape, float scale,
                    bool causal, int* __restrict__ tiles_visited) {
  constexpr bool kSw = Recipe::kSwizzle;
  constexpr int kBr = kRowsOf<Recipe>;
  constexpr int kTileElements = kKeys * TileLayout<D, kSw>::kLd;  // one K or V tile
  constexpr int kBuffers = Recipe::kCpAsync ? 2 : 1;
  static_assert(kBr <= 2 * kKeys, "the Q tile is staged in one K/V pair");
  const int lq = shape.lq, lk = shape.lk, b = blockIdx.y;
  // Eq. (6): under the mask the last Q tiles see the most keys; fa2_scheduled starts them first.
  const int x = Recipe::kScheduled && causal ? int(gridDim.x - 1 - blockIdx.x) : int(blockIdx.x);
  const int i0 = x * kBr;
  const int warp = threadIdx.y, lane = threadIdx.x, g = lane / 4, t = lane % 4;
  const int w0 = i0 + warp * kWarpRows;  // the warp's first query row
  const T* q_b = q + std::size_t(b) * lq * D;
  const T* k_b = k + std::size_t(b) * lk * D;
  const T* v_b = v + std::size_t(b) * lk * D;

  T* smem = dynamic_shared<T>();  // buffer u: K at 2u kTileElements, V right after it
  T* q_tile = smem + (kBuffers - 1) * 2 * kTileElements;
  const int rows = min(kBr, lq - i0);
  const int tiles = ch06::kv_tiles_to_visit(i0, rows, lq, lk, kKeys, causal);  // eq. (7), ch. 06

  if constexpr (Recipe::kCpAsync) {  // Q and the first K/V tile in one group
    load_tile_async<D, kSw>(q_b, i0, kBr, lq, q_tile);
    if (tiles > 0) {
      load_tile_async<D, kSw>(k_b, 0, kKeys, lk, smem);
      load_tile_async<D, kSw>(v_b, 0, kKeys, lk, smem + kTileElements);
    }
    ptx::cp_async_commit();
    ptx::cp_async_wait<0>();
  } else {
    load_tile<D, kSw>(q_b, i0, kBr, lq, q_tile);
  }
  __syncthreads();  // the Q tile is complete
  // The warp's 16 rows of Q as A fragments, kept in registers for the whole loop.
  std::uint32_t qa[D / 16][4];
  for (int ks = 0; ks < D / 16; ++ks)
    load_a<D, kSw, Recipe::kLdmatrix>(qa[ks], q_tile, warp * kWarpRows, 16 * ks, lane);

  WarpState<D> st;
  st.clear();

  // The last key the warp's last row sees (eq. 6): a tile past it is masked for all 16 rows.
  const int warp_last_key = causal ? w0 + kWarpRows - 1 + (lk - lq) : lk - 1;
  // The last key the warp's first row sees: tiles up to it need no mask (fa2_scheduled).
  const int warp_first_row_last_key = causal ? w0 + (lk - lq) : lk - 1;
  const bool warp_has_rows = w0 < lq;
  if constexpr (Recipe::kCpAsync) __syncthreads();  // every warp holds its Q: buffer 1 is free
  for (int jt = 0; jt < tiles; ++jt) {
    const int j0 = jt * kKeys;
    const T* k_tile = smem;
    if constexpr (Recipe::kCpAsync) {
      // Eq. (4): tile jt + 1 is copied into the other buffer while tile jt is computed.
      if (jt + 1 < tiles) {
        T* next = smem + (jt + 1) % 2 * 2 * kTileElements;
        load_tile_async<D, kSw>(k_b, j0 + kKeys, kKeys, lk, next);
        load_tile_async<D, kSw>(v_b, j0 + kKeys, kKeys, lk, next + kTileElements);
      }
      ptx::cp_async_commit();
      ptx::cp_async_wait<1>();  // all but the newest group: tile jt has landed
      __syncthreads();          // ... for every thread's copies
      k_tile = smem + jt % 2 * 2 * kTileElements;
    } else {
      __syncthreads();  // the previous K/V tile (or the Q tile) is no longer read
      load_tile<D, kSw>(k_b, j0, kKeys, lk, smem);
      load_tile<D, kSw>(v_b, j0, kKeys, lk, smem + kTileElements);
      __syncthreads();  // the K/V tile is complete
    }
    // A warp with no row below lq, or whose rows all mask this tile, would add exactly 0: it
    // skips the products (the condition is the same in all its lanes).
    if (warp_has_rows && j0 <= warp_last_key) {
      // Eq. (6): without the mask's diagonal and the end of the keys in the tile, no mask.
      const bool masked = !Recipe::kScheduled || j0 + kKeys > lk ||
                          (causal && j0 + kKeys - 1 > warp_first_row_last_key);
      attend_tile<T, D, Recipe>(qa, k_tile, k_tile + kTileElements, w0, j0, shape, scale, causal,
                                masked, st);
    }
    if constexpr (Recipe::kCpAsync) __syncthreads();  // tile jt read: its buffer may be refilled
  }

  // Chapter 06's eqs. (4), (5): O = SS / l, rounded once to T; logsumexp.
  for (int h = 0; h < 2; ++h) {
    const float l = group_sum(st.l[h]);            // the 4 lanes' shares of the row
    const float inv_l = ch01::inverse_or_zero(l);  // 0 for a fully masked row
    const int i = w0 + g + 8 * h;
    if (i >= lq) continue;
    T* o_row = o + (std::size_t(b) * lq + i) * D;
    for (int n = 0; n < D / 8; ++n) {
      *reinterpret_cast<std::uint32_t*>(o_row + 8 * n + 2 * t) =
          ptx::pack_pair<T>(st.acc[n][2 * h] * inv_l, st.acc[n][2 * h + 1] * inv_l);
    }
    // In fa2_scheduled m is of unscaled scores: the natural-unit max is m scale (scale > 0).
    const float m = Recipe::kScheduled ? st.m[h] * scale : st.m[h];
    if (t == 0) lse[std::size_t(b) * lq + i] = ch06::logsumexp(m, l);
  }
  if (tiles_visited != nullptr && threadIdx.x == 0 && threadIdx.y == 0)
    tiles_visited[std::size_t(b) * gridDim.x + x] = tiles;
}

template <typename T, int D, typename Recipe>
void launch_fast(const AttentionArgs& a) {
  constexpr auto kKernel = fa2_fast_kernel<T, D, Recipe>;
  const std::size_t bytes = std::size_t(shared_bytes<Recipe>(D));
  if (bytes > kDefaultDynamicSharedBytes) allow_dynamic_shared_bytes<kKernel>(bytes);
  launch<kKernel>(dim3(ceil_div(a.shape.lq, kRowsOf<Recipe>), a.shape.bh),
                  dim3(kLanes, Recipe::kWarps), bytes, static_cast<const T*>(a.q),
                  static_cast<const T*>(a.k), static_cast<const T*>(a.v), static_cast<T*>(a.o),
                  a.lse, a.shape, a.scale, a.causal, a.tiles_visited);
}

template <typename Recipe>
void launch_recipe(const AttentionArgs& a) {
  if (Recipe::kScheduled && !(a.scale > 0.f))
    throw std::invalid_argument(std::string(Recipe::kName) + ": the softmax scale must be " +
                                "positive (the row max is taken over unscaled scores)");
  with_tile_shape(Recipe::kName, a.dtype, a.shape.d, {a.q, a.k, a.v}, "q, k and v",
                  [&](auto t, auto d) { launch_fast<decltype(t), decltype(d)::value, Recipe>(a); });
}

}  // namespace

// ==========================================================================================
// Launchers
// ==========================================================================================

template <>
void Kernels<kThisBackend>::fa2_mma(const AttentionArgs& a) {
  launch_recipe<MmaRecipe>(a);
}
template <>
void Kernels<kThisBackend>::fa2_ldmatrix(const AttentionArgs& a) {
  launch_recipe<LdmatrixRecipe>(a);
}
template <>
void Kernels<kThisBackend>::fa2_swizzle(const AttentionArgs& a) {
  launch_recipe<SwizzleRecipe>(a);
}
template <>
void Kernels<kThisBackend>::fa2_cp_async(const AttentionArgs& a) {
  launch_recipe<CpAsyncRecipe>(a);
}
template <>
void Kernels<kThisBackend>::fa2_scheduled(const AttentionArgs& a) {
  launch_recipe<ScheduledRecipe>(a);
}

}  // namespace wb::ch08
