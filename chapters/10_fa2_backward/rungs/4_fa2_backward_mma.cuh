// Chapter 10, rung 4, the last: the FlashAttention-2 backward on mma.sync, built from
// chapter 08's primitives.
//
// Computes: dQ, dK, dV as rung 3 (fa2_backward_tensor_core), for Q, K, V, O, dO in __half or
//           __nv_bfloat16 with float accumulation; the gradients written in the input type.
// Changed since rung 3: the products are mma.sync.m16n8k16 (common/ptx.cuh), whose
//           accumulator layout the PTX ISA states, so each lane knows which (key, row) of
//           S^T and dP^T it holds. The elementwise step (eqs. 6 and 4) runs on those registers,
//           and P^T and dS^T are re-packed in registers as the A fragments of dV += P^T dO and
//           dK += dS^T Q (chapter 08's eq. 1 with keys as rows, eq. 9 here): no float staging
//           tile. Only dS^T goes to shared memory, for dQ = dS K, where ldmatrix .trans reads it
//           back as dS's A fragments (eq. 10). Tiles are swizzled (chapter 08's eq. 3) and read by
//           ldmatrix; the Q and dO tiles are double-buffered by cp.async (the next Q tile lands
//           while this one computes, chapter 08's eq. 4); the mask's compares run only where a
//           warp's 16 x 16 block of (key, row) pairs needs them; dQ is added into from the
//           accumulators, as FlashAttention-2 does.
// Launch shape: the D kernel and the conversion as backward_prep.cuh; the main kernel grid
//           (ceil(lk / 64), bh), block (32, 4): Bc = 64 keys per block (warp y owns keys
//           16 y .. 16 y + 15, and rows 16 y .. 16 y + 15 of each Q tile for dQ), Q tiles of
//           Br = 64 rows, 16 at a time. Dynamic shared memory: the K and V tiles, two (Q, dO)
//           tile pairs (64 swizzled rows of d elements each), the dS^T tile (64 x 64) and two
//           (lse, D) pairs of the Q tile: 57 KiB at d = 64, 105 KiB at d = 128 (opted in).
// Limits: lq, lk >= 1 (up to kMaxLength), bh x lq <= 2^31 - 1; d = 64 or 128; bh <= 65535;
//           fp16 or bf16; q, k, v, d_o, dk and dv 16-byte aligned (the launcher checks; the
//           32-bit stores of dK and dV would need 4 bytes only, one rule for all six is simpler
//           to state).
// Memory traffic: fa2_backward_tensor_core's (the same tiles; cp.async zero-fills the rows past
//           lq and lk without reading them), fa2_backward_tensor_core_traffic in
//           backward_ladder.hpp.
// Test: ctest --test-dir build -R 10_fa2_backward --output-on-failure
#pragma once

#include "common/kernel.cuh"

#include <cstdint>

#include "chapters/04_fused_qk_softmax/attention_tiles.cuh"
#include "chapters/08_fa2_at_speed/fast_tiles.cuh"
#include "chapters/10_fa2_backward/backward_ladder.hpp"
#include "chapters/10_fa2_backward/backward_prep.cuh"
#include "chapters/10_fa2_backward/fa2_backward.hpp"
#include "common/ptx.cuh"
#include "common/shared_memory.cuh"
#include "common/tile_shape.cuh"

namespace wb::ch10 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

// Chapter 08's swizzled tiles, their fragments read by ldmatrix (fa2_swizzle's layout and loads):
// K, V, Q and dO, rows of D elements, and the dS^T tile, 64 keys by 64 rows.
template <int D>
using Tile = ch08::SwizzledTile<D>;
using DsTile = ch08::TileLayout<kTensorCoreRows, true>;
template <int D>
using Fragments = ch08::LdmatrixFragments<Tile<D>>;

constexpr int kMmaWarps = 4;
constexpr int kMmaThreads = kMmaWarps * kWarpSize;
constexpr int kWarpKeys = 16;   // a warp's keys: the m of S^T's mma, the k of dQ's
constexpr int kChunkRows = 16;  // Q rows a warp takes at a time: two n8 of S^T, the k of dV's
constexpr int kDqColumns = 64;  // dQ columns accumulated at a time (32 floats per lane)
static_assert(kMmaWarps * kWarpKeys == kTensorCoreKeys, "Bc = warps x 16 keys");
static_assert(kMmaWarps * kChunkRows == kTensorCoreRows, "dQ: a warp per 16 rows of the Q tile");

/// The shared-memory layout (bytes from the start), T the element type.
template <typename T, int D>
struct MmaBwdTiles {
  static constexpr int kBc = kTensorCoreKeys, kBr = kTensorCoreRows;
  static constexpr int kKvTile = kBc * D * int(sizeof(T));  // a K or V tile
  static constexpr int kQTile = kBr * D * int(sizeof(T));   // a Q or dO tile
  static constexpr int kK = 0, kV = kKvTile;
  static constexpr int kQ = 2 * kKvTile;  // buffer u: Q at kQ + 2 u kQTile, dO right after
  static constexpr int kDsT = kQ + 4 * kQTile;
  static constexpr int kStats = kDsT + kBc * kBr * int(sizeof(T));  // buffer u: lse, D floats
  static constexpr int kBytes = kStats + 2 * 2 * kBr * int(sizeof(float));
  static_assert(kKvTile % 16 == 0 && kQTile % 16 == 0, "16-byte aligned tiles for cp.async");
};

/// The A fragment of a 16 x 16 block held as two accumulators (columns 0-7 and 8-15), each
/// element rounded to T: chapter 08's eq. (1), here with keys as the rows (eq. 9).
template <typename T>
__device__ __forceinline__ void pack_a(std::uint32_t (&a)[4], const float (&c)[2][4]) {
  a[0] = ptx::pack_pair<T>(c[0][0], c[0][1]);
  a[1] = ptx::pack_pair<T>(c[0][2], c[0][3]);
  a[2] = ptx::pack_pair<T>(c[1][0], c[1][1]);
  a[3] = ptx::pack_pair<T>(c[1][2], c[1][3]);
}

// q, d_o: (bh, lq, D); k, v, dk, dv: (bh, lk, D), all of T; lse, d_row: (bh, lq); dq_accum:
// (bh, lq, D) float, added into. Block (blockIdx.x, blockIdx.y) owns keys
// [64 blockIdx.x, 64 blockIdx.x + 64) of head blockIdx.y. With g = lane / 4, t = lane % 4, a
// lane holds of the warp's 16 x 16 blocks (keys, rows) the keys g, g + 8 and the rows 2t, 2t + 1,
// 2t + 8, 2t + 9 (the accumulator layout, common/ptx.cuh).
template <typename T, int D>
__global__ void __launch_bounds__(kMmaThreads)
    backward_mma_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                        const T* __restrict__ d_o, const float* __restrict__ lse,
                        const float* __restrict__ d_row, float* __restrict__ dq_accum,
                        T* __restrict__ dk, T* __restrict__ dv, AttentionShape shape, float scale,
                        bool causal) {
  using L = MmaBwdTiles<T, D>;
  const int lq = shape.lq, lk = shape.lk;
  const int b = blockIdx.y, j0 = blockIdx.x * L::kBc;
  const int warp = threadIdx.y, lane = threadIdx.x, tid = warp * kWarpSize + lane;
  const int g = lane / 4, t = lane % 4;
  const std::size_t q_off = std::size_t(b) * lq, k_off = std::size_t(b) * lk;

  unsigned char* smem = dynamic_shared<unsigned char>();
  T* k_tile = reinterpret_cast<T*>(smem + L::kK);
  T* v_tile = reinterpret_cast<T*>(smem + L::kV);
  T* ds_tile = reinterpret_cast<T*>(smem + L::kDsT);
  const auto q_tile = [&](int u) { return reinterpret_cast<T*>(smem + L::kQ + 2 * u * L::kQTile); };
  const auto do_tile = [&](int u) { return q_tile(u) + L::kBr * D; };
  const auto lse_tile = [&](int u) {
    return reinterpret_cast<float*>(smem + L::kStats) + 2 * u * L::kBr;
  };
  const auto d_tile = [&](int u) { return lse_tile(u) + L::kBr; };
  // Q tile `it` into buffer u by cp.async (rows past lq land as zeros), and the lse and D of
  // its row `tid` into registers: the loads are issued now and waited for only when stored. A
  // row past lq gets lse = -inf and D = 0 (masked there: P = 0 whatever they are).
  float lse_next = -INFINITY, d_next = 0.f;
  const auto load_q_tile = [&](int it, int u) {
    const int i0 = it * L::kBr;
    ch08::load_tile_async<Tile<D>, kMmaThreads, L::kBr>(q + q_off * D, i0, lq, q_tile(u));
    ch08::load_tile_async<Tile<D>, kMmaThreads, L::kBr>(d_o + q_off * D, i0, lq, do_tile(u));
    const bool in = tid < L::kBr && i0 + tid < lq;
    lse_next = in ? lse[q_off + i0 + tid] : -INFINITY;
    d_next = in ? d_row[q_off + i0 + tid] : 0.f;
  };
  const auto store_stats = [&](int u) {
    if (tid < L::kBr) lse_tile(u)[tid] = lse_next, d_tile(u)[tid] = d_next;
  };

  const int first = first_q_tile(j0, lq, lk, L::kBr, causal);             // eq. (7)
  const int tiles = ceil_div(lq, L::kBr) - first;                         // at least 1
  ch08::load_tile_async<Tile<D>, kMmaThreads, L::kBc>(k + k_off * D, j0, lk, k_tile);  // once
  ch08::load_tile_async<Tile<D>, kMmaThreads, L::kBc>(v + k_off * D, j0, lk, v_tile);
  load_q_tile(first, 0);
  ptx::cp_async_commit();
  store_stats(0);

  float dk_acc[D / 8][4] = {}, dv_acc[D / 8][4] = {};  // the warp's 16 keys x D of dK, dV
  const int key0 = warp * kWarpKeys;                   // the warp's first key in the tile
  for (int n = 0; n < tiles; ++n) {
    const int i0 = (first + n) * L::kBr, u = n % 2;
    ptx::cp_async_wait<0>();  // this thread's copies of tile n have landed
    // ... and every thread's; the stats stored; tile n - 1's steps no longer read buffer 1 - u
    // (its Q, dO, stats) or dS^T.
    __syncthreads();
    const bool has_next = n + 1 < tiles;
    if (has_next) {  // chapter 08's eq. (4): tile n + 1 lands while tile n computes
      load_q_tile(first + n + 1, 1 - u);
      ptx::cp_async_commit();
    }
    const T* qt = q_tile(u);
    const T* dot = do_tile(u);
    const float* lse_t = lse_tile(u);
    const float* d_t = d_tile(u);

    // [mma_backward_step]
    for (int r0 = 0; r0 < L::kBr && i0 + r0 < lq; r0 += kChunkRows) {  // the same in all warps
      // S^T = K Q^T and dP^T = V dO^T for the warp's 16 keys and rows r0 .. r0 + 15, eq. (2):
      // K and V are A fragments (keys as rows), Q and dO are read as chapter 08 reads K^T.
      float s[2][4] = {}, dp[2][4] = {};
      for (int ks = 0; ks < D / 16; ++ks) {
        std::uint32_t ka[4], va[4], qb[2][2], ob[2][2];
        Fragments<D>::load_a(ka, k_tile, key0, 16 * ks, lane);
        Fragments<D>::load_a(va, v_tile, key0, 16 * ks, lane);
        Fragments<D>::load_b_of_k(qb[0], qb[1], qt, r0, 16 * ks, lane);
        Fragments<D>::load_b_of_k(ob[0], ob[1], dot, r0, 16 * ks, lane);
        for (int h = 0; h < 2; ++h) {
          ptx::mma_m16n8k16<T>(s[h], ka, qb[h], s[h]);
          ptx::mma_m16n8k16<T>(dp[h], va, ob[h], dp[h]);
        }
      }
      // P^T and dS^T in place, eqs. (6) and (4): s[h][e] is key g + 8 (e / 2), row
      // r0 + 8 h + 2 t + e % 2. The compares only where the 16 x 16 block needs them: rows or
      // keys past the end, or the block's first row not seeing its last key. A key's visible
      // rows run from its first (ch04::causal_first_query, 0 without the mask) to lq, and a key
      // past lk has none: two bounds per key, taken relative to the lane's first row, so that
      // a score compares its offset 8 h + e % 2, a constant, with them.
      const int j_first = j0 + key0;
      const bool needs_mask =
          i0 + r0 + kChunkRows > lq || j_first + kWarpKeys > lk ||
          (causal && !ch04::causal_visible(i0 + r0, j_first + kWarpKeys - 1, lq, lk));
      int row_first[2] = {0, 0}, row_end = 0;  // the keys' visible rows, less the lane's first
      if (needs_mask) {
        const int row = i0 + r0 + 2 * t;
        row_end = lq - row;
        for (int c = 0; c < 2; ++c) {
          const int j = j_first + g + 8 * c;
          row_first[c] = (j >= lk ? lq : causal ? ch04::causal_first_query(j, lq, lk) : 0) - row;
        }
      }
      for (int h = 0; h < 2; ++h)
        for (int e = 0; e < 4; ++e) {
          const int offset = 8 * h + e % 2, r = r0 + 2 * t + offset;  // r: of the Q tile
          const bool masked = needs_mask && (offset < row_first[e / 2] || offset >= row_end);
          const float p = recomputed_p(scale * s[h][e], lse_t[r], masked);
          s[h][e] = p;
          dp[h][e] = p * (dp[h][e] - d_t[r]);
        }
      std::uint32_t pa[4], dsa[4];  // P^T's and dS^T's A fragments (eq. 9), rounded to T
      pack_a<T>(pa, s);
      pack_a<T>(dsa, dp);
      // dS^T to shared memory for dQ: dsa[2 h + c] is keys g + 8 c, rows r0 + 8 h + 2t, + 1.
      for (int h = 0; h < 2; ++h)
        for (int c = 0; c < 2; ++c)
          *reinterpret_cast<std::uint32_t*>(
              ds_tile + DsTile::offset(key0 + g + 8 * c, r0 + 8 * h + 2 * t)) = dsa[2 * h + c];
      // dV += P^T dO and dK += dS^T Q, eqs. (1) and (5): dO and Q rows r0 .. r0 + 15 are B
      // (k = row), read as chapter 08 reads V.
      for (int c = 0; c < D / 8; c += 2) {
        std::uint32_t b0[2], b1[2];
        Fragments<D>::load_b_of_v(b0, b1, dot, r0, 8 * c, lane);
        ptx::mma_m16n8k16<T>(dv_acc[c], pa, b0, dv_acc[c]);
        ptx::mma_m16n8k16<T>(dv_acc[c + 1], pa, b1, dv_acc[c + 1]);
        Fragments<D>::load_b_of_v(b0, b1, qt, r0, 8 * c, lane);
        ptx::mma_m16n8k16<T>(dk_acc[c], dsa, b0, dk_acc[c]);
        ptx::mma_m16n8k16<T>(dk_acc[c + 1], dsa, b1, dk_acc[c + 1]);
      }
    }
    // [mma_backward_step]
    if (has_next) store_stats(1 - u);  // its loads have had the whole step to arrive
    __syncthreads();                   // dS^T complete: dQ needs every warp's keys

    // [mma_backward_dq]
    // dQ = scale dS K, eq. (5), for rows w0 .. w0 + 15 of the tile: dS's A fragments from the
    // dS^T tile by ldmatrix .trans (eq. 10), K's rows as B (k = key). Added into dq_accum from
    // the accumulators, kDqColumns columns at a time.
    const int w0 = warp * kChunkRows;
    if (i0 + w0 < lq) {  // the same in all lanes: a warp past lq has nothing to add
      for (int c0 = 0; c0 < D; c0 += kDqColumns) {
        float acc[kDqColumns / 8][4] = {};
        for (int kk = 0; kk < L::kBc; kk += kWarpKeys) {  // a warp's keys at a time
          std::uint32_t dsa[4];
          ch08::load_a_transposed<DsTile>(dsa, ds_tile, w0, kk, lane);
          for (int c = 0; c < kDqColumns / 8; c += 2) {
            std::uint32_t b0[2], b1[2];
            Fragments<D>::load_b_of_v(b0, b1, k_tile, kk, c0 + 8 * c, lane);
            ptx::mma_m16n8k16<T>(acc[c], dsa, b0, acc[c]);
            ptx::mma_m16n8k16<T>(acc[c + 1], dsa, b1, acc[c + 1]);
          }
        }
        // acc[c][2 h], [2 h + 1]: row g + 8 h, columns 8 c + 2 t and + 1, a pair of floats
        // 8-byte aligned in dq_accum (D and 2 t even): one vector atomic on sm_90.
        for (int c = 0; c < kDqColumns / 8; ++c)
          for (int h = 0; h < 2; ++h) {
            const int i = i0 + w0 + g + 8 * h;
            if (i < lq)
              atomic_add_pair(dq_accum + (q_off + i) * D + c0 + 8 * c + 2 * t,
                              scale * acc[c][2 * h], scale * acc[c][2 * h + 1]);
          }
      }
    }
    // [mma_backward_dq]
  }

  // The warp's dK (scaled once, here) and dV rows, written once in T from the accumulators:
  // dk_acc[c][2 h], [2 h + 1] are key g + 8 h, columns 8 c + 2 t, + 1.
  for (int h = 0; h < 2; ++h) {
    const int j = j0 + key0 + g + 8 * h;
    if (j >= lk) continue;
    for (int c = 0; c < D / 8; ++c) {
      const std::size_t e = (k_off + j) * D + 8 * c + 2 * t;
      *reinterpret_cast<std::uint32_t*>(dk + e) =
          ptx::pack_pair<T>(scale * dk_acc[c][2 * h], scale * dk_acc[c][2 * h + 1]);
      *reinterpret_cast<std::uint32_t*>(dv + e) =
          ptx::pack_pair<T>(dv_acc[c][2 * h], dv_acc[c][2 * h + 1]);
    }
  }
}

template <typename T, int D>
void launch_backward_mma(const AttentionBackwardArgs& a) {
  const AttentionShape& s = a.shape;
  launch_opted_in<backward_mma_kernel<T, D>>(
      dim3(ceil_div(s.lk, kTensorCoreKeys), s.bh), dim3(kWarpSize, kMmaWarps),
      MmaBwdTiles<T, D>::kBytes, static_cast<const T*>(a.q), static_cast<const T*>(a.k),
      static_cast<const T*>(a.v), static_cast<const T*>(a.d_o), a.lse, a.d_row, a.dq_accum,
      static_cast<T*>(a.dk), static_cast<T*>(a.dv), s, a.scale, a.causal);
}

void launch_fa2_backward_mma(const AttentionBackwardArgs& a) {
  launch_16bit_backward(
      a, "fa2_backward_mma", {a.q, a.k, a.v, a.d_o, a.dk, a.dv}, "q, k, v, d_o, dk and dv",
      [&](auto t, auto d) { launch_backward_mma<decltype(t), decltype(d)::value>(a); });
}

}  // namespace

WB_RUNG(AttentionBackwardArgs, fa2_backward_mma,
        "chapter 08's mma.sync and ldmatrix on swizzled tiles: S^T, dP^T made P^T, dS^T in "
        "registers and re-packed as A fragments, only dS^T through shared memory; Q, dO "
        "tiles double-buffered by cp.async",
        tensor_core_backward_limits(), &launch_fa2_backward_mma,
        &fa2_backward_tensor_core_traffic, {&backward_tensor_core_tiles, /*rounds_p=*/true})

}  // namespace wb::ch10
