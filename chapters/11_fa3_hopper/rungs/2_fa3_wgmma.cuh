// Chapter 11, rung 2: fa3_wgmma. Chapter 08's FA2, its products on Hopper's warpgroup MMA.
//
// Computes: O = softmax(scale Q K^T + causal mask) V and logsumexp per row, for Q: (bh, lq, d),
//           K, V: (bh, lk, d) in __half or __nv_bfloat16, float accumulation: chapter 06's
//           eqs. (3)-(7). O in the input type, logsumexp in float; a fully masked row gives
//           O = 0 and logsumexp = -inf.
// Changed since rung 1 (fa2_register_blocked): a warpgroup (4 warps) per 64 query rows issues
//           S = Q K^T as one wgmma per 16 columns of d, both operands read by the tensor cores
//           from shared memory through descriptors (eq. 1 of fa3_hopper.md: tiles of 128-byte
//           swizzled rows, the layout TMA writes); P stays in S's registers and is wgmma's
//           register A operand for O += P V, V read MN-major (eq. 2). No ldmatrix, no fragment
//           of Q, K or V in registers. The K/V tiles still come by cp.async into two buffers, a
//           barrier before each (and fence.proxy.async: wgmma reads through the async proxy).
// Launch shape: grid (ceil(lq / 128), bh), block (32, 8): warpgroup w = threadIdx.y / 4 owns
//           query rows [128 x + 64 w, 128 x + 64 w + 64) of Q tile x = blockIdx.x
//           (gridDim.x - 1 - blockIdx.x under the mask), warp y of them the 16 from
//           128 x + 16 y; K/V tiles of Bc = 128 keys. Dynamic shared memory: the Q tile and two
//           K/V stages, 128-byte swizzled, from a 1024-byte boundary: 81 / 161 KiB (d = 64 /
//           128).
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
#include "common/ptx.cuh"
#include "common/tile_shape.cuh"

namespace wb::ch11 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

constexpr int kWarps = kConsumers * kWarpgroupWarps;  // 8: two warpgroups
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kStages = 2;  // tile j + 1 copied while tile j is computed

/// Rows [first, first + R) of a (.., D) matrix into a Tile<R, D> (eq. 1) by cp.async, 16 bytes
/// per copy, consecutive threads along a row (coalesced); rows at or past `limit` land as zeros
/// (they multiply as 0, never NaN). They land at the caller's cp_async_wait.
template <int R, int D, typename T>
__device__ __forceinline__ void load_tile_async(const T* __restrict__ src, int first, int limit,
                                                unsigned char* tile) {
  constexpr int kChunks = D / 8;  // 16-byte chunks of a row
  static_assert(R * kChunks % kThreads == 0, "every thread copies as many chunks");
  const int thread = int(threadIdx.y * blockDim.x + threadIdx.x);
#pragma unroll
  for (int pass = 0; pass < R * kChunks / kThreads; ++pass) {
    const int chunk = thread + pass * kThreads, r = chunk / kChunks, c = chunk % kChunks * 8;
    const bool inside = first + r < limit;
    const T* from = inside ? src + std::size_t(first + r) * D + c : src;  // any valid address
    ptx::cp_async_16(tile + Tile<R, D>::offset(r, c), from, inside);
  }
}

// q: (bh, lq, D); k, v: (bh, lk, D); o: (bh, lq, D), all of type T; lse: (bh, lq) float;
// scale: the softmax scale; causal: apply eq. (6) of chapter 06; tiles_visited: nullptr or
// (bh, gridDim.x), the K/V tiles each block loaded.
template <typename T, int D>
__global__ void __launch_bounds__(kThreads, 1)
    fa3_wgmma_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                     T* __restrict__ o, float* __restrict__ lse, AttentionShape shape, float scale,
                     bool causal, int* __restrict__ tiles_visited) {
  // Chapter 06's eq. (7): under the mask the last Q tiles see the most keys; they start first.
  const int x = causal ? int(gridDim.x - 1 - blockIdx.x) : int(blockIdx.x);
  const int b = blockIdx.y, i0 = x * kBr;
  const int warp = threadIdx.y, lane = threadIdx.x, g = lane / 4, t = lane % 4;
  const int wg = warpgroup_index();
  const int wg0 = i0 + wg * kWarpgroupRows;  // the warpgroup's first query row
  const int w0 = i0 + warp * kWarpRows;      // the warp's
  const ch08::HeadInputs<T, D> head(q, k, v, shape, b);

  unsigned char* q_tile = aligned_shared();
  unsigned char* stages = q_tile + QTile<D>::kBytes;
  const auto k_tile = [&](int jt) { return stages + jt % kStages * kStageBytes<D>; };
  const auto v_tile = [&](int jt) { return k_tile(jt) + KvTile<D>::kBytes; };
  const unsigned char* q_rows = q_tile + wg * kWarpgroupRows * kRowBytes;  // in each block

  const int rows = min(kBr, shape.lq - i0);
  const int tiles = ch06::kv_tiles_to_visit(i0, rows, shape.lq, shape.lk, kBc, causal);
  // Q and K/V tile 0 in one cp.async group.
  load_tile_async<kBr, D>(head.q, i0, shape.lq, q_tile);
  if (tiles > 0) {
    load_tile_async<kBc, D>(head.k, 0, shape.lk, k_tile(0));
    load_tile_async<kBc, D>(head.v, 0, shape.lk, v_tile(0));
  }
  ptx::cp_async_commit();

  WarpState<D> st;
  st.clear();
  const int wg_tiles = warpgroup_tiles(wg0, shape, causal);
  for (int jt = 0; jt < tiles; ++jt) {
    const int j0 = jt * kBc;
    if (jt + 1 < tiles) {
      load_tile_async<kBc, D>(head.k, j0 + kBc, shape.lk, k_tile(jt + 1));
      load_tile_async<kBc, D>(head.v, j0 + kBc, shape.lk, v_tile(jt + 1));
    }
    ptx::cp_async_commit();
    ptx::cp_async_wait<1>();   // all but the newest group: tile jt (and Q) landed
    ptx::fence_proxy_async();  // ... visible to the async proxy, which wgmma reads through
    __syncthreads();           // ... for every thread's copies
    // Past the warpgroup's own tiles its rows mask every key: it skips the products.
    if (jt < wg_tiles)
      attend_tile<T, D>(q_rows, k_tile(jt), v_tile(jt), w0, j0, shape, scale, causal, st);
    __syncthreads();  // tile jt read: its buffer may be refilled
  }
  ptx::cp_async_wait<0>();  // a block that visits no tile still copied Q

  // Chapter 08's eq. (5): m is of unscaled scores; the logsumexp's is m scale (scale > 0).
  for (int h = 0; h < 2; ++h) st.m[h] *= scale;
  ch08::store_rows<T, D>(st, o, lse, b, w0, shape.lq, g, t);  // ch. 06's eqs. (4), (5)
  ch08::record_tiles_visited(tiles_visited, b, x, tiles);
}

void launch_fa3_wgmma(const AttentionArgs& a) {
  with_tile_shape("fa3_wgmma", a.dtype, a.shape.d, {a.q, a.k, a.v, a.o}, "q, k, v and o",
                  [&](auto t, auto d) {
                    constexpr int D = decltype(d)::value;
                    launch_pointers<fa3_wgmma_kernel<decltype(t), D>>(
                        "fa3_wgmma", a, kWarps, kSharedBytes<D, kStages>);
                  });
}

}  // namespace

WB_RUNG(AttentionArgs, fa3_wgmma,
        "wgmma: a warpgroup per 64 rows, S = Q K^T from swizzled shared tiles by descriptor, P "
        "from S's registers as the A operand of P V",
        fa3_limits(), &launch_fa3_wgmma, &fa3_traffic, fa3_facts())

}  // namespace wb::ch11
