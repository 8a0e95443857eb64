// Chapter 08 kernels: FlashAttention-2 on mma.sync, one idea per rung (fa2_at_speed.hpp).
//
// Computes: O = softmax(scale Q K^T + causal mask) V and logsumexp per row, for Q: (bh, lq, d),
//           K, V: (bh, lk, d) in __half or __nv_bfloat16, float accumulation: chapter 06's
//           eqs. (3)-(7), as its tensor-core kernel. O in the input type, logsumexp in float; a
//           fully masked row gives O = 0 and logsumexp = -inf.
// Changed since chapter 06's fa2_tensor_core: the products are mma.sync.m16n8k16 (common/ptx.cuh)
//           and S~ never leaves registers: each lane holds its S~ elements in the accumulator
//           layout, takes the row statistics with two shuffles, and re-packs the same registers
//           as P~'s A fragment (eq. 1 of fa2_at_speed.md). One kernel template serves the six
//           rungs; the recipe (fa2_at_speed.hpp) switches on one idea per rung:
//             fa2_mma        fragments by 32-bit loads, padded rows, K/V through registers
//             fa2_ldmatrix   + fragments by ldmatrix .x4 (.trans for V)              eq. (2)
//             fa2_swizzle    + XOR-swizzled tiles instead of padding                 eq. (3)
//             fa2_cp_async   + K/V tiles double-buffered by cp.async                 eq. (4)
//             fa2_scheduled  + Br = 128 (8 warps), exp2 with the scale folded in, mask on
//                              diagonal tiles only, heaviest causal blocks first      eqs. (5), (6)
//             fa2_register_blocked  + 4 warps of two 16-row tiles each (Br = 128 still): each
//                              K/V fragment feeds two mma; Q's fragments from shared memory
//                              at every tile; at d = 128, 32 keys per softmax step   eq. (7)
// Launch shape: grid (ceil(lq / Br), bh), block (32, warps): warp y owns query rows
//           [16 R y, 16 R y + 16 R) of the block's Q tile of Br = 16 R warps rows, R row tiles
//           per warp (1, or 2 in fa2_register_blocked); K/V tiles of Bc = 64 keys. Dynamic
//           shared memory: K and V tiles (64 rows of d elements, + 16 bytes padded), two pairs
//           with cp.async; the Q tile is staged in the last pair before the loop, or with R = 2
//           has Br rows of its own. fa2_mma, fa2_ldmatrix: 18 / 34 KiB (d = 64 / 128);
//           fa2_swizzle 16 / 32 KiB; fa2_cp_async, fa2_scheduled 32 / 64 KiB;
//           fa2_register_blocked 48 / 96 KiB (d = 128 opts in above 48 KiB).
// Limits: lq, lk in [1, kMaxLength]; d = 64 or 128 (a template parameter); bh <= 65535
//           (grid.y); q, k, v 16-byte aligned (their tile loads), and o too (its pairs are
//           32-bit stores); fa2_scheduled and fa2_register_blocked also scale > 0 (their row max is
//           of unscaled scores). Checked before every launch (kernel_ladder, and the launcher).
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

/// Keys [key0, key0 + kStep) of one K/V tile for the warp's kRowTiles tiles of 16 rows from
/// w0: S~ = Q K^T into registers, the online softmax on them (chapter 06's eq. 3), then
/// O += P~ V with P~ re-packed from the same registers. q_fragment(mt, ks, a): row tile mt's Q
/// fragment of head columns [16 ks, 16 ks + 16); k_tile, v_tile: (kKeys, D) in shared memory;
/// j0: the tile's first key; st[mt]: row tile mt's state.
template <typename T, int D, typename Recipe, int kStep, typename QFragment>
__device__ __forceinline__ void attend_keys(QFragment q_fragment, const T* k_tile, const T* v_tile,
                                            int key0, int w0, int j0, AttentionShape shape,
                                            float scale, bool causal,
                                            WarpState<D> (&st)[Recipe::kRowTiles]) {
  constexpr bool kSw = Recipe::kSwizzle, kLd = Recipe::kLdmatrix;
  constexpr int kRowTiles = Recipe::kRowTiles;
  constexpr int kKeyGroups = kStep / 8;  // S~'s n-tiles of 8 keys

  // S~ = Q K^T: s[mt][n] is the 16 x 8 block of keys j0 + key0 + [8n, 8n + 8), row tile mt.
  float s[kRowTiles][kKeyGroups][4] = {};
  row_tiles_scores<T, D, kSw, kLd, kRowTiles>(q_fragment, k_tile, key0, s);
  const int j_first = j0 + key0;
#pragma unroll
  for (int mt = 0; mt < kRowTiles; ++mt) {
    const int r0 = w0 + kWarpRows * mt;  // the row tile's first row
    // Eq. (6): without the mask's diagonal and the end of the keys in the step, no mask.
    const bool masked = !Recipe::kScheduled || j_first + kStep > shape.lk ||
                        (causal && j_first + kStep - 1 > r0 + (shape.lk - shape.lq));
    // Eq. (6) of chapter 06: row r0 + r against key j_first + c, and the keys past lk.
    softmax_on_scores<Recipe::kScheduled>(s[mt], st[mt], scale, masked, [&](int r, int c) {
      const int i = r0 + r, j = j_first + c;
      return j >= shape.lk || (causal && !ch04::causal_visible(i, j, shape.lq, shape.lk));
    });
  }

  // + P~ V, 16 keys at a time. Eq. (1): the A fragment of keys [16 kk, 16 kk + 16) is the
  // accumulators of key groups 2 kk (columns 0-7 of A) and 2 kk + 1 (columns 8-15), each row
  // pair rounded and packed: A's registers (g, 2t..), (g + 8, 2t..), (g, 2t + 8..),
  // (g + 8, 2t + 8..) are exactly S's (g, 2t..) and (g + 8, 2t..) of the two groups.
#pragma unroll
  for (int kk = 0; kk < kStep / 16; ++kk) {
    std::uint32_t pa[kRowTiles][4] = {};
#pragma unroll
    for (int mt = 0; mt < kRowTiles; ++mt) {
      // [exercise]
      pa[mt][0] = ptx::pack_pair<T>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
      pa[mt][1] = ptx::pack_pair<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
      pa[mt][2] = ptx::pack_pair<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
      pa[mt][3] = ptx::pack_pair<T>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      // [exercise]
    }
    row_tiles_pv<T, D, kSw, kLd, kRowTiles>(pa, v_tile, key0 + 16 * kk, st);
  }
}

/// One K/V tile for the warp, kStepKeys<Recipe, D> keys at a time (eq. 7).
template <typename T, int D, typename Recipe, typename QFragment>
__device__ __forceinline__ void attend_tile(QFragment q_fragment, const T* k_tile, const T* v_tile,
                                            int w0, int j0, AttentionShape shape, float scale,
                                            bool causal, WarpState<D> (&st)[Recipe::kRowTiles]) {
  constexpr int kStep = kStepKeys<Recipe, D>;
#pragma unroll 1
  for (int key0 = 0; key0 < kKeys; key0 += kStep)
    attend_keys<T, D, Recipe, kStep>(q_fragment, k_tile, v_tile, key0, w0, j0, shape, scale, causal,
                                     st);
}

// q: (bh, lq, D); k, v: (bh, lk, D); o: (bh, lq, D), all of type T; lse: (bh, lq) float;
// scale: the softmax scale; causal: apply eq. (6) of chapter 06; tiles_visited: nullptr or
// (bh, gridDim.x), the K/V tiles each block loaded. Block (x, blockIdx.y) owns query rows
// [Br x, Br x + Br) of head blockIdx.y, x = blockIdx.x (or reversed, fa2_scheduled under the
// mask); warp y the 16 kRowTiles rows from Br x + 16 kRowTiles y.
template <typename T, int D, typename Recipe>
__global__ void __launch_bounds__(Recipe::kWarps* kWarpSize)
    fa2_fast_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                    T* __restrict__ o, float* __restrict__ lse, AttentionShape shape, float scale,
                    bool causal, int* __restrict__ tiles_visited) {
  constexpr bool kSw = Recipe::kSwizzle;
  constexpr int kBr = kRowsOf<Recipe>;
  constexpr int kRowTiles = Recipe::kRowTiles, kRowsPerWarp = kWarpRows * kRowTiles;
  constexpr int kTileElements = kKeys * TileLayout<D, kSw>::kLd;  // one K or V tile
  constexpr int kBuffers = Recipe::kCpAsync ? 2 : 1;
  constexpr int kThreads = Recipe::kWarps * kWarpSize;
  static_assert(kQFromShared<Recipe> || kBr <= 2 * kKeys, "the Q tile is staged in one K/V pair");
  const int lq = shape.lq, lk = shape.lk, b = blockIdx.y;
  // Chapter 06's eq. (7): under the mask the last Q tiles see the most keys; fa2_scheduled
  // starts them first.
  const int x = Recipe::kScheduled && causal ? int(gridDim.x - 1 - blockIdx.x) : int(blockIdx.x);
  const int i0 = x * kBr;
  const int warp = threadIdx.y, lane = threadIdx.x, g = lane / 4, t = lane % 4;
  const int w0 = i0 + warp * kRowsPerWarp;  // the warp's first query row
  const T* q_b = q + std::size_t(b) * lq * D;
  const T* k_b = k + std::size_t(b) * lk * D;
  const T* v_b = v + std::size_t(b) * lk * D;

  // Buffer u: K at 2u kTileElements, V right after it. The Q tile: after the K/V buffers when
  // the warps read it at every tile, else staged in the last K/V pair before the loop.
  T* smem = dynamic_shared<T>();
  T* q_tile = smem + (kQFromShared<Recipe> ? kBuffers : kBuffers - 1) * 2 * kTileElements;
  const int rows = min(kBr, lq - i0);
  const int tiles = ch06::kv_tiles_to_visit(i0, rows, lq, lk, kKeys, causal);  // eq. (7), ch. 06

  if constexpr (Recipe::kCpAsync) {  // Q and the first K/V tile in one group
    load_tile_async<D, kSw, kThreads, kBr>(q_b, i0, lq, q_tile);
    if (tiles > 0) {
      load_tile_async<D, kSw, kThreads, kKeys>(k_b, 0, lk, smem);
      load_tile_async<D, kSw, kThreads, kKeys>(v_b, 0, lk, smem + kTileElements);
    }
    ptx::cp_async_commit();
    ptx::cp_async_wait<0>();
  } else {
    load_tile<D, kSw, kThreads, kBr>(q_b, i0, lq, q_tile);
  }
  __syncthreads();  // the Q tile is complete
  // With one row tile, the warp's 16 rows of Q as A fragments, kept in registers for the whole
  // loop; with more, each is read from the Q tile when a K/V tile needs it (eq. 7).
  std::uint32_t qa[D / 16][4];
  if constexpr (!kQFromShared<Recipe>)
    for (int ks = 0; ks < D / 16; ++ks)
      load_a<D, kSw, Recipe::kLdmatrix>(qa[ks], q_tile, warp * kRowsPerWarp, 16 * ks, lane);
  const auto q_fragment = [&](int mt, int ks, std::uint32_t(&a)[4]) {
    if constexpr (kQFromShared<Recipe>) {
      load_a<D, kSw, Recipe::kLdmatrix>(a, q_tile, warp * kRowsPerWarp + kWarpRows * mt, 16 * ks,
                                        lane);
    } else {
      for (int e = 0; e < 4; ++e) a[e] = qa[ks][e];
    }
  };

  WarpState<D> st[kRowTiles];
  for (int mt = 0; mt < kRowTiles; ++mt) st[mt].clear();

  // The last key the warp's last row sees (eq. 6): a tile past it is masked for all its rows.
  const int warp_last_key = causal ? w0 + kRowsPerWarp - 1 + (lk - lq) : lk - 1;
  const bool warp_has_rows = w0 < lq;
  // Every warp holds its Q: buffer 1 is free (unless Q has a place of its own).
  if constexpr (Recipe::kCpAsync && !kQFromShared<Recipe>) __syncthreads();
  for (int jt = 0; jt < tiles; ++jt) {
    const int j0 = jt * kKeys;
    const T* k_tile = smem;
    if constexpr (Recipe::kCpAsync) {
      // Eq. (4): tile jt + 1 is copied into the other buffer while tile jt is computed.
      if (jt + 1 < tiles) {
        T* next = smem + (jt + 1) % 2 * 2 * kTileElements;
        load_tile_async<D, kSw, kThreads, kKeys>(k_b, j0 + kKeys, lk, next);
        load_tile_async<D, kSw, kThreads, kKeys>(v_b, j0 + kKeys, lk, next + kTileElements);
      }
      ptx::cp_async_commit();
      ptx::cp_async_wait<1>();  // all but the newest group: tile jt has landed
      __syncthreads();          // ... for every thread's copies
      k_tile = smem + jt % 2 * 2 * kTileElements;
    } else {
      __syncthreads();  // the previous K/V tile (or the Q tile) is no longer read
      load_tile<D, kSw, kThreads, kKeys>(k_b, j0, lk, smem);
      load_tile<D, kSw, kThreads, kKeys>(v_b, j0, lk, smem + kTileElements);
      __syncthreads();  // the K/V tile is complete
    }
    // A warp with no row below lq, or whose rows all mask this tile, would add exactly 0: it
    // skips the products (the condition is the same in all its lanes).
    if (warp_has_rows && j0 <= warp_last_key)
      attend_tile<T, D, Recipe>(q_fragment, k_tile, k_tile + kTileElements, w0, j0, shape, scale,
                                causal, st);
    if constexpr (Recipe::kCpAsync) __syncthreads();  // tile jt read: its buffer may be refilled
  }

  // Chapter 06's eqs. (4), (5): O = SS / l, rounded once to T; logsumexp.
  for (int mt = 0; mt < kRowTiles; ++mt) {
    for (int h = 0; h < 2; ++h) {
      const float l = group_sum(st[mt].l[h]);        // the 4 lanes' shares of the row
      const float inv_l = ch01::inverse_or_zero(l);  // 0 for a fully masked row
      const int i = w0 + kWarpRows * mt + g + 8 * h;
      if (i >= lq) continue;
      T* o_row = o + (std::size_t(b) * lq + i) * D;
      for (int n = 0; n < D / 8; ++n) {
        *reinterpret_cast<std::uint32_t*>(o_row + 8 * n + 2 * t) =
            ptx::pack_pair<T>(st[mt].acc[n][2 * h] * inv_l, st[mt].acc[n][2 * h + 1] * inv_l);
      }
      // In fa2_scheduled m is of unscaled scores: the natural-unit max is m scale (scale > 0).
      const float m = Recipe::kScheduled ? st[mt].m[h] * scale : st[mt].m[h];
      if (t == 0) lse[std::size_t(b) * lq + i] = ch06::logsumexp(m, l);
    }
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
                  dim3(kWarpSize, Recipe::kWarps), bytes, static_cast<const T*>(a.q),
                  static_cast<const T*>(a.k), static_cast<const T*>(a.v), static_cast<T*>(a.o),
                  a.lse, a.shape, a.scale, a.causal, a.tiles_visited);
}

template <typename Recipe>
void launch_recipe(const AttentionArgs& a) {
  if (Recipe::kScheduled && !(a.scale > 0.f))
    throw std::invalid_argument(std::string(Recipe::kName) + ": the softmax scale must be " +
                                "positive (the row max is taken over unscaled scores)");
  with_tile_shape(Recipe::kName, a.dtype, a.shape.d, {a.q, a.k, a.v, a.o}, "q, k, v and o",
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
template <>
void Kernels<kThisBackend>::fa2_register_blocked(const AttentionArgs& a) {
  launch_recipe<RegisterBlockedRecipe>(a);
}

}  // namespace wb::ch08
