// Chapter 11, rung 4: fa3_warp_specialized. Rung 3, with a warpgroup that only copies.
//
// Computes: O = softmax(scale Q K^T + causal mask) V and logsumexp per row, for Q: (bh, lq, d),
//           K, V: (bh, lk, d) in __half or __nv_bfloat16, float accumulation: chapter 06's
//           eqs. (3)-(7). O in the input type, logsumexp in float; a fully masked row gives
//           O = 0 and logsumexp = -inf.
// Changed since rung 3 (fa3_tma): warp specialization (eq. 4 of fa3_hopper.md). A producer
//           warpgroup, one thread of it issuing, fills a ring of K/V stages by TMA as fast as
//           the ring lets it: stage s's `full` mbarrier tells the consumers a tile landed, its
//           `empty` mbarrier (one arrival per consumer warp) tells the producer they are done
//           with it. No __syncthreads in the loop: each consumer warpgroup runs at its own pace,
//           held only by the tiles it needs. setmaxnreg gives the producer's registers (it
//           keeps 24) to the two consumer warpgroups (240 each).
// Launch shape: grid (ceil(lq / 128), bh), block (32, 12): warpgroup 0 (threadIdx.y 0-3) the
//           producer; consumer warpgroup c = threadIdx.y / 4 - 1 owns query rows
//           [128 x + 64 c, 128 x + 64 c + 64) of Q tile x = blockIdx.x (gridDim.x - 1 -
//           blockIdx.x under the mask), warp y of them the 16 from 128 x + 16 (y - 4); K/V tiles
//           of Bc = 128 keys. Dynamic shared memory: the Q tile and two K/V stages, 128-byte
//           swizzled, from a 1024-byte boundary: 81 / 161 KiB (d = 64 / 128); static: 5
//           mbarriers.
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
#include "chapters/11_fa3_hopper/fa3_ring.cuh"
#include "chapters/11_fa3_hopper/fa3_tiles.cuh"
#include "common/tile_shape.cuh"

namespace wb::ch11 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

constexpr int kWarps = kSpecializedWarps;  // the producer warpgroup and two consumers: 12
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kStages = 2;  // the ring: d = 128's Q tile and 2 stages take 161 of 227 KiB

// q_map, k_map, v_map: Q (bh, lq, D), K and V (bh, lk, D) of type T as tensor maps
// (fa3_launch.cuh); o: (bh, lq, D) of type T; lse: (bh, lq) float; scale: the softmax scale;
// causal: apply eq. (6) of chapter 06; tiles_visited: nullptr or (bh, gridDim.x), the K/V tiles
// each block loaded.
template <typename T, int D>
__global__ void __launch_bounds__(kThreads, 1)
    fa3_warp_specialized_kernel(const __grid_constant__ ptx::TensorMap q_map,
                                const __grid_constant__ ptx::TensorMap k_map,
                                const __grid_constant__ ptx::TensorMap v_map, T* __restrict__ o,
                                float* __restrict__ lse, AttentionShape shape, float scale,
                                bool causal, int* __restrict__ tiles_visited) {
  // Chapter 06's eq. (7): under the mask the last Q tiles see the most keys; they start first.
  const int x = causal ? int(gridDim.x - 1 - blockIdx.x) : int(blockIdx.x);
  const int b = blockIdx.y, i0 = x * kBr;
  const int warp = threadIdx.y, lane = threadIdx.x, g = lane / 4, t = lane % 4;

  unsigned char* q_tile = aligned_shared();
  __shared__ RingBarriers<kStages> bars;
  const Ring<D, kStages> ring{q_tile + QTile<D>::kBytes, &bars};  // eq. (4)
  if (warp == 0 && lane == 0) ring.init();
  __syncthreads();

  const int rows = min(kBr, shape.lq - i0);
  const int tiles = ch06::kv_tiles_to_visit(i0, rows, shape.lq, shape.lk, kBc, causal);

  //! [producer]
  if (warp < kWarpgroupWarps) {  // the producer warpgroup: one thread issues every copy
    ptx::setmaxnreg_dec<kProducerRegisters>();
    if (warp == 0 && lane == 0) ring.produce(q_tile, &q_map, &k_map, &v_map, i0, b, tiles);
    ch08::record_tiles_visited(tiles_visited, b, x, tiles);
    return;
  }
  //! [producer]

  //! [consumer]
  ptx::setmaxnreg_inc<kConsumerRegisters>();
  const int c = warpgroup_index() - 1;  // the consumer warpgroup: 0 or 1
  const int wg0 = i0 + c * kWarpgroupRows;   // its first query row
  const int w0 = i0 + (warp - kWarpgroupWarps) * kWarpRows;  // the warp's
  const unsigned char* q_rows = q_tile + c * kWarpgroupRows * kRowBytes;  // in each block
  WarpState<D> st;
  st.clear();
  const int wg_tiles = warpgroup_tiles(wg0, shape, causal);
  ring.wait_q();
  for (int jt = 0; jt < tiles; ++jt) {
    ring.wait_full(jt);
    // Past the warpgroup's own tiles its rows mask every key: it skips the products, but still
    // releases the stage.
    if (jt < wg_tiles)
      attend_tile<T, D>(q_rows, ring.k_tile(jt), ring.v_tile(jt), w0, jt * kBc, shape, scale,
                        causal, st);
    ring.release(jt);
  }
  //! [consumer]

  // Chapter 08's eq. (5): m is of unscaled scores; the logsumexp's is m scale (scale > 0).
  for (int h = 0; h < 2; ++h) st.m[h] *= scale;
  ch08::store_rows<T, D>(st, o, lse, b, w0, shape.lq, g, t);  // ch. 06's eqs. (4), (5)
}

void launch_fa3_warp_specialized(const AttentionArgs& a) {
  with_tile_shape("fa3_warp_specialized", a.dtype, a.shape.d, {a.q, a.k, a.v, a.o},
                  "q, k, v and o", [&](auto t, auto d) {
                    constexpr int D = decltype(d)::value;
                    launch_maps<fa3_warp_specialized_kernel<decltype(t), D>, D>(
                        "fa3_warp_specialized", a, kWarps, kSharedBytes<D, kStages>);
                  });
}

}  // namespace

WB_RUNG(AttentionArgs, fa3_warp_specialized,
        "warp specialization: a producer warpgroup fills a ring of K/V stages (full and empty "
        "mbarriers), two consumer warpgroups compute; setmaxnreg 24 / 240",
        fa3_limits(), &launch_fa3_warp_specialized, &fa3_traffic, fa3_facts())

}  // namespace wb::ch11
