// Chapter 11, rung 6: fa3_intra_warpgroup. Rung 5, each warpgroup overlapping its own two GEMMs
// with its softmax.
//
// Computes: O = softmax(scale Q K^T + causal mask) V and logsumexp per row, for Q: (bh, lq, d),
//           K, V: (bh, lk, d) in __half or __nv_bfloat16, float accumulation: chapter 06's
//           eqs. (3)-(7). O in the input type, logsumexp in float; a fully masked row gives
//           O = 0 and logsumexp = -inf.
// Changed since rung 5 (fa3_pingpong): intra-warpgroup pipelining (eq. 6 of fa3_hopper.md,
//           FA3's section 3.2). In its turn a warpgroup issues S = Q K^T of tile j and then
//           O += P V of tile j - 1, whose P it packed at the end of the last step; it waits for
//           the first group only, runs tile j's softmax while P V still runs on the tensor
//           cores, and only then waits for P V, rescales O and packs tile j's P. The softmax
//           overlaps the warpgroup's own GEMMs too, at the price of one more tile of P in
//           registers, and of a third stage in the ring (a warpgroup holds two: K of tile j,
//           V of tile j - 1); the P V of the last tile is issued after the loop.
// Launch shape: grid (ceil(lq / 128), bh), block (32, 12): warpgroup 0 (threadIdx.y 0-3) the
//           producer; consumer warpgroup c = threadIdx.y / 4 - 1 owns query rows
//           [128 x + 64 c, 128 x + 64 c + 64) of Q tile x = blockIdx.x (gridDim.x - 1 -
//           blockIdx.x under the mask), warp y of them the 16 from 128 x + 16 (y - 4); K/V tiles
//           of Bc = 128 keys. Dynamic shared memory: the Q tile and three K/V stages, 128-byte
//           swizzled, from a 1024-byte boundary: 113 / 225 KiB (d = 64 / 128); static: 7
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
// The ring: a warpgroup now holds two stages at once (K of tile j under S, V of tile j - 1 under
// P V), so a third keeps the producer a tile ahead. d = 128's Q tile and 3 stages take 225 of
// the 227 KiB a block may have.
constexpr int kStages = 3;
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
    fa3_intra_warpgroup_kernel(const __grid_constant__ ptx::TensorMap q_map,
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
  float sc[kBc / 8][4];
  std::uint32_t p[kBc / 16][4];  // the last tile's P, for its P V in this step
  if (wg_tiles > 0) {
    // Tile 0: S alone (there is no P V before it); O is 0, nothing to rescale.
    ring.wait_full(0);
    ptx::named_barrier_sync(kTurn + c, kTurnThreads);
    ptx::wgmma_fence();
    issue_scores<T, D>(flat<kBc>(sc), q_rows, ring.k_tile(0));
    ptx::wgmma_commit_group();
    give_turn(0);
    ptx::wgmma_wait_group<0>();
    ptx::wgmma_fence_operand(flat<kBc>(sc));
    float alpha[2];
    softmax_rows(sc, st, w0, 0, shape, scale, causal, alpha);
    pack_p<T>(sc, p);
  }
  for (int jt = 1; jt < wg_tiles; ++jt) {
    ring.wait_full(jt);
    ptx::named_barrier_sync(kTurn + c, kTurnThreads);  // the other's GEMMs are issued
    ptx::wgmma_fence();  // O, and the P packed at the end of the last step
    issue_scores<T, D>(flat<kBc>(sc), q_rows, ring.k_tile(jt));
    ptx::wgmma_commit_group();  // S of tile jt
    issue_pv<T, D>(flat<D>(st.acc), p, ring.v_tile(jt - 1));
    ptx::wgmma_commit_group();  // P V of tile jt - 1
    give_turn(jt);
    ptx::wgmma_wait_group<1>();  // S of tile jt is done; P V of tile jt - 1 may still run
    ptx::wgmma_fence_operand(flat<kBc>(sc));
    float alpha[2];
    softmax_rows(sc, st, w0, jt * kBc, shape, scale, causal, alpha);  // under the P V
    ptx::wgmma_wait_group<0>();  // P V of tile jt - 1 is done: O is ours, its stage free
    ptx::wgmma_fence_operand(flat<D>(st.acc));
    ring.release(jt - 1);
    ch08::rescale_rows<D>(st.acc, alpha);  // O through tile jt - 1, by e^{scale (m - m_new)}
    pack_p<T>(sc, p);
  }
  if (wg_tiles > 0) {  // the last tile's P V
    ptx::wgmma_fence();
    issue_pv<T, D>(flat<D>(st.acc), p, ring.v_tile(wg_tiles - 1));
    ptx::wgmma_commit_group();
    ptx::wgmma_wait_group<0>();
    ptx::wgmma_fence_operand(flat<D>(st.acc));
    ring.release(wg_tiles - 1);
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

void launch_fa3_intra_warpgroup(const AttentionArgs& a) {
  with_tile_shape("fa3_intra_warpgroup", a.dtype, a.shape.d, {a.q, a.k, a.v, a.o},
                  "q, k, v and o", [&](auto t, auto d) {
                    constexpr int D = decltype(d)::value;
                    launch_maps<fa3_intra_warpgroup_kernel<decltype(t), D>, D>(
                        "fa3_intra_warpgroup", a, kWarps, kSharedBytes<D, kStages>);
                  });
}

}  // namespace

WB_RUNG(AttentionArgs, fa3_intra_warpgroup,
        "intra-warpgroup pipelining: S = Q K^T of tile j and P V of tile j - 1 in flight "
        "together, tile j's softmax under the P V",
        fa3_limits(), &launch_fa3_intra_warpgroup, &fa3_traffic, fa3_facts())

}  // namespace wb::ch11
