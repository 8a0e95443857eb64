// Chapter 11, rung 5: fa3_pingpong. Rung 4, its two consumer warpgroups taking turns.
//
// Computes: O = softmax(scale Q K^T + causal mask) V and logsumexp per row, for Q: (bh, lq, d),
//           K, V: (bh, lk, d) in __half or __nv_bfloat16, float accumulation: chapter 06's
//           eqs. (3)-(7). O in the input type, logsumexp in float; a fully masked row gives
//           O = 0 and logsumexp = -inf.
// Changed since rung 4 (fa3_warp_specialized): ping-pong scheduling (eq. 5 of fa3_hopper.md,
//           FA3's section 3.1). Two named barriers give the consumer warpgroups turns: a
//           warpgroup waits for its turn, issues its S = Q K^T, and hands the turn to the other,
//           whose S = Q K^T then queues behind it on the tensor cores while the first waits for
//           its own and runs its softmax (the exponentials, on the multi-function units). The
//           softmax of one warpgroup hides under the GEMMs of the other, instead of both
//           warpgroups computing exponentials while the tensor cores idle.
// Launch shape: grid (ceil(lq / 128), bh), block (32, 12): warpgroup 0 (threadIdx.y 0-3) the
//           producer; consumer warpgroup c = threadIdx.y / 4 - 1 owns query rows
//           [128 x + 64 c, 128 x + 64 c + 64) of Q tile x = blockIdx.x (gridDim.x - 1 -
//           blockIdx.x under the mask), warp y of them the 16 from 128 x + 16 (y - 4); K/V tiles
//           of Bc = 128 keys. Dynamic shared memory: the Q tile and two K/V stages, 128-byte
//           swizzled, from a 1024-byte boundary: 81 / 161 KiB (d = 64 / 128); static: 5
//           mbarriers; named barriers 1 and 2.
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
// Eq. (5): consumer c's turn on the tensor cores is named barrier kTurn + c over both consumer
// warpgroups: c waits on it (128 threads) and the other arrives on it (128 more).
constexpr unsigned kTurn = 1;  // barriers 1 and 2 (barrier 0 is __syncthreads)
constexpr unsigned kTurnThreads = kConsumers * kWarpgroupWarps * kWarpSize;

// q_map, k_map, v_map: Q (bh, lq, D), K and V (bh, lk, D) of type T as tensor maps
// (fa3_launch.cuh); o: (bh, lq, D) of type T; lse: (bh, lq) float; scale: the softmax scale;
// causal: apply eq. (6) of chapter 06; tiles_visited: nullptr or (bh, gridDim.x), the K/V tiles
// each block loaded.
template <typename T, int D>
__global__ void __launch_bounds__(kThreads, 1)
    fa3_pingpong_kernel(const __grid_constant__ ptx::TensorMap q_map,
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
  const int c = warpgroup_index() - 1;      // the consumer warpgroup: 0 or 1
  const int wg0 = i0 + c * kWarpgroupRows;  // its first query row
  const int w0 = i0 + (warp - kWarpgroupWarps) * kWarpRows;  // the warp's
  const unsigned char* q_rows = q_tile + c * kWarpgroupRows * kRowBytes;  // in each block
  WarpState<D> st;
  st.clear();
  const int wg_tiles = warpgroup_tiles(wg0, shape, causal);
  // Eq. (5): consumer 0 takes the first turn, which consumer 1 gives it. Every turn taken is
  // one given: each takes one per tile and gives one per tile, consumer 1 none after its last.
  if (c == 1 && tiles > 0) ptx::named_barrier_arrive(kTurn + 0, kTurnThreads);
  const auto give_turn = [&](int jt) {
    if (c == 0 || jt + 1 < tiles) ptx::named_barrier_arrive(kTurn + (1 - c), kTurnThreads);
  };
  ring.wait_q();
  for (int jt = 0; jt < wg_tiles; ++jt) {
    ring.wait_full(jt);
    float sc[kBc / 8][4];
    ptx::named_barrier_sync(kTurn + c, kTurnThreads);  // the other's S = Q K^T is issued
    ptx::wgmma_fence();  // O and last tile's P, written since the last wgmma
    issue_scores<T, D>(flat<kBc>(sc), q_rows, ring.k_tile(jt));
    ptx::wgmma_commit_group();
    give_turn(jt);
    ptx::wgmma_wait_group<0>();  // while the other's S = Q K^T runs
    ptx::wgmma_fence_operand(flat<kBc>(sc));
    float alpha[2];
    softmax_rows(sc, st, w0, jt * kBc, shape, scale, causal, alpha);
    ch08::rescale_rows<D>(st.acc, alpha);
    std::uint32_t p[kBc / 16][4];
    pack_p<T>(sc, p);
    ptx::wgmma_fence();  // P and the rescaled O
    issue_pv<T, D>(flat<D>(st.acc), p, ring.v_tile(jt));
    ptx::wgmma_commit_group();
    ptx::wgmma_wait_group<0>();
    ptx::wgmma_fence_operand(flat<D>(st.acc));
    ring.release(jt);
  }
  // Past its own tiles the warpgroup's rows mask every key: no products, but it still takes
  // and gives its turns and releases the stages (a loop of its own: ptxas serializes wgmma
  // under a branch, C7518).
  for (int jt = wg_tiles; jt < tiles; ++jt) {
    ring.wait_full(jt);
    ptx::named_barrier_sync(kTurn + c, kTurnThreads);
    give_turn(jt);
    ring.release(jt);
  }
  //! [consumer]

  // Chapter 08's eq. (5): m is of unscaled scores; the logsumexp's is m scale (scale > 0).
  for (int h = 0; h < 2; ++h) st.m[h] *= scale;
  ch08::store_rows<T, D>(st, o, lse, b, w0, shape.lq, g, t);  // ch. 06's eqs. (4), (5)
}

void launch_fa3_pingpong(const AttentionArgs& a) {
  with_tile_shape("fa3_pingpong", a.dtype, a.shape.d, {a.q, a.k, a.v, a.o},
                  "q, k, v and o", [&](auto t, auto d) {
                    constexpr int D = decltype(d)::value;
                    launch_maps<fa3_pingpong_kernel<decltype(t), D>, D>(
                        "fa3_pingpong", a, kWarps, kSharedBytes<D, kStages>);
                  });
}

}  // namespace

WB_RUNG(AttentionArgs, fa3_pingpong,
        "ping-pong: named barriers give the consumer warpgroups turns, one's softmax runs under "
        "the other's S = Q K^T",
        fa3_limits(), &launch_fa3_pingpong, &fa3_traffic, fa3_facts())

}  // namespace wb::ch11
