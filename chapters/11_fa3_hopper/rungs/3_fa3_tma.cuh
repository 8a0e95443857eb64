// Chapter 11, rung 3: fa3_tma. Rung 2, its tiles brought by the Tensor Memory Accelerator.
//
// Computes: O = softmax(scale Q K^T + causal mask) V and logsumexp per row, for Q: (bh, lq, d),
//           K, V: (bh, lk, d) in __half or __nv_bfloat16, float accumulation: chapter 06's
//           eqs. (3)-(7). O in the input type, logsumexp in float; a fully masked row gives
//           O = 0 and logsumexp = -inf.
// Changed since rung 2 (fa3_wgmma): one thread copies each tile as TMA boxes (eq. 3 of
//           fa3_hopper.md: a box of 64 columns by the tile's rows per column block, the
//           128-byte swizzle applied by the copy, rows past the head's end zero-filled), and
//           the tile's arrival is an mbarrier phase that counts its bytes: the other 255
//           threads issue no copy and no address arithmetic, and wait on the barrier instead of
//           on cp.async groups; nothing passes through the generic proxy, so no fence.
// Launch shape: grid (ceil(lq / 128), bh), block (32, 8): warpgroup w = threadIdx.y / 4 owns
//           query rows [128 x + 64 w, 128 x + 64 w + 64) of Q tile x = blockIdx.x
//           (gridDim.x - 1 - blockIdx.x under the mask), warp y of them the 16 from
//           128 x + 16 y; K/V tiles of Bc = 128 keys. Dynamic shared memory: the Q tile and two
//           K/V stages, 128-byte swizzled, from a 1024-byte boundary: 81 / 161 KiB (d = 64 /
//           128); static: 3 mbarriers.
// Limits: lq, lk in [1, kMaxLength]; d = 64 or 128; bh <= 65535 (grid.y); q, k, v and o
//           16-byte aligned; scale > 0 (the row max is of unscaled scores); cuda: sm_90a (an
//           H100 or H200). Checked before every launch (the record's limits, the launcher).
// Memory traffic per Q tile of 128 rows: chapter 06's (fa3_traffic in fa3_hopper.hpp): Q once,
//           K and V once per K/V tile visited, O and logsumexp once.
// Test: ctest --test-dir build -R 11_fa3_hopper --output-on-failure
#pragma once

#include "common/hopper.cuh"  // first: common/kernel.cuh

#include <cstdint>

#include "chapters/08_fa2_at_speed/fast_block.cuh"
#include "chapters/11_fa3_hopper/fa3_hopper.hpp"
#include "chapters/11_fa3_hopper/fa3_launch.cuh"
#include "chapters/11_fa3_hopper/fa3_tiles.cuh"
#include "common/tile_shape.cuh"

namespace wb::ch11 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

constexpr int kWarps = kConsumers * kWarpgroupWarps;  // 8: two warpgroups
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kStages = 2;  // tile j + 1 copied while tile j is computed

// q_map, k_map, v_map: Q (bh, lq, D), K and V (bh, lk, D) of type T as tensor maps
// (fa3_launch.cuh); o: (bh, lq, D) of type T; lse: (bh, lq) float; scale: the softmax scale;
// causal: apply eq. (6) of chapter 06; tiles_visited: nullptr or (bh, gridDim.x), the K/V tiles
// each block loaded.
template <typename T, int D>
__global__ void __launch_bounds__(kThreads, 1)
    fa3_tma_kernel(const __grid_constant__ ptx::TensorMap q_map,
                   const __grid_constant__ ptx::TensorMap k_map,
                   const __grid_constant__ ptx::TensorMap v_map, T* __restrict__ o,
                   float* __restrict__ lse, AttentionShape shape, float scale, bool causal,
                   int* __restrict__ tiles_visited) {
  // Chapter 06's eq. (7): under the mask the last Q tiles see the most keys; they start first.
  const int x = causal ? int(gridDim.x - 1 - blockIdx.x) : int(blockIdx.x);
  const int b = blockIdx.y, i0 = x * kBr;
  const int warp = threadIdx.y, lane = threadIdx.x, g = lane / 4, t = lane % 4;
  const int wg = warpgroup_index();
  const int wg0 = i0 + wg * kWarpgroupRows;  // the warpgroup's first query row
  const int w0 = i0 + warp * kWarpRows;      // the warp's
  const bool leader = warp == 0 && lane == 0;  // the thread that issues every copy

  unsigned char* q_tile = aligned_shared();
  unsigned char* stages = q_tile + QTile<D>::kBytes;
  const auto k_tile = [&](int jt) { return stages + ring_stage(jt, kStages) * kStageBytes<D>; };
  const auto v_tile = [&](int jt) { return k_tile(jt) + KvTile<D>::kBytes; };
  const unsigned char* q_rows = q_tile + wg * kWarpgroupRows * kRowBytes;  // in each block

  // q_full: the Q tile landed; full[s]: stage s holds its tile. One arrival each (the leader's,
  // with the bytes to expect), then the bytes.
  __shared__ std::uint64_t q_full, full[kStages];
  if (leader) {
    ptx::mbarrier_init(&q_full, 1);
    for (int s = 0; s < kStages; ++s) ptx::mbarrier_init(&full[s], 1);
    ptx::fence_proxy_async();  // the initialized barriers, visible to TMA's complete_tx
  }
  __syncthreads();

  const int rows = min(kBr, shape.lq - i0);
  const int tiles = ch06::kv_tiles_to_visit(i0, rows, shape.lq, shape.lk, kBc, causal);
  // Stage jt % 2's K and V tiles of tile jt, one phase of full[jt % 2] for all their bytes.
  const auto load_kv = [&](int jt) {
    std::uint64_t* bar = &full[ring_stage(jt, kStages)];
    ptx::mbarrier_arrive_expect_tx(bar, kStageBytes<D>);
    load_tile_tma<kBc, D>(k_tile(jt), &k_map, jt * kBc, b, bar);
    load_tile_tma<kBc, D>(v_tile(jt), &v_map, jt * kBc, b, bar);
  };
  if (leader) {
    ptx::mbarrier_arrive_expect_tx(&q_full, QTile<D>::kBytes);
    load_tile_tma<kBr, D>(q_tile, &q_map, i0, b, &q_full);
    if (tiles > 0) load_kv(0);
  }
  ptx::mbarrier_wait_parity(&q_full, 0);

  WarpState<D> st;
  st.clear();
  const int wg_tiles = warpgroup_tiles(wg0, shape, causal);
  for (int jt = 0; jt < tiles; ++jt) {
    const int j0 = jt * kBc;
    // Its stage was read by tile jt - 1, which every warpgroup finished before the barrier
    // that ended the last step.
    if (leader && jt + 1 < tiles) load_kv(jt + 1);
    ptx::mbarrier_wait_parity(&full[ring_stage(jt, kStages)], full_parity(jt, kStages));
    // Past the warpgroup's own tiles its rows mask every key: it skips the products.
    if (jt < wg_tiles)
      attend_tile<T, D>(q_rows, k_tile(jt), v_tile(jt), w0, j0, shape, scale, causal, st);
    __syncthreads();  // tile jt read: its stage may be refilled
  }

  // Chapter 08's eq. (5): m is of unscaled scores; the logsumexp's is m scale (scale > 0).
  for (int h = 0; h < 2; ++h) st.m[h] *= scale;
  ch08::store_rows<T, D>(st, o, lse, b, w0, shape.lq, g, t);  // ch. 06's eqs. (4), (5)
  ch08::record_tiles_visited(tiles_visited, b, x, tiles);
}

void launch_fa3_tma(const AttentionArgs& a) {
  with_tile_shape("fa3_tma", a.dtype, a.shape.d, {a.q, a.k, a.v, a.o}, "q, k, v and o",
                  [&](auto t, auto d) {
                    constexpr int D = decltype(d)::value;
                    launch_maps<fa3_tma_kernel<decltype(t), D>, D>("fa3_tma", a, kWarps,
                                                                   kSharedBytes<D, kStages>);
                  });
}

}  // namespace

WB_RUNG(AttentionArgs, fa3_tma,
        "TMA: one thread copies each tile as 128-byte-swizzled boxes, its arrival an mbarrier "
        "phase counting the bytes",
        fa3_limits(), &launch_fa3_tma, &fa3_traffic, fa3_facts())

}  // namespace wb::ch11
