// Chapter 10, rung 2: the FlashAttention-2 backward pass in fp32.
//
// Computes: dQ, dK, dV of attention from Q, K, V (bh, l, d), the forward's O and logsumexp and
//           dO, eqs. (1)-(7) of fa2_backward.md. A fully masked row (lq > lk with the causal
//           mask) has P = 0: its dQ row is 0 and it adds nothing to dK or dV.
// Changed since rung 1 (the standard backward): the forward's loops turned inside out. A block
//           owns a K/V tile and walks the Q tiles, recomputing each tile of P from logsumexp
//           (P is never stored); dK and dV of its keys stay in registers until the end; dQ,
//           which gathers a term from every K/V tile, is added into global memory with atomics.
// Launch shape: the D kernel: grid ceil(bh lq / 8), block (32, 8), a warp per row.
//           The main kernel: grid (ceil(lk / 16), bh), block (32, 4): 16 keys per block,
//           Q tiles of 16 rows. Warp y owns keys y, y + 4, y + 8, y + 12 for dK and dV and
//           rows y, y + 4, ... for dQ; lane x owns columns x, x + 32, ... of each.
//           Dynamic shared memory: (64 (d + 1) + 2 x 16 x 17 + 32) floats, at most 35 KiB.
// Limits: lq, lk >= 1 (up to kMaxLength); bh x lq <= 2^31 - 1 (D's rows, an int);
//           1 <= d <= 128; bh <= 65535 (grid.y); fp32.
// Memory traffic (fa2_backward_traffic, below): O, dO read and D, dQ written by the D kernel;
//           K, V read and dK, dV written once per K/V tile; Q, dO, lse, D read once per
//           (K/V tile, Q tile) pair and dQ added into as often.
// Test: ctest --test-dir build -R 10_fa2_backward --output-on-failure
#pragma once

#include "common/kernel.cuh"

#include "chapters/04_fused_qk_softmax/attention_tiles.cuh"
#include "chapters/10_fa2_backward/backward_ladder.hpp"
#include "chapters/10_fa2_backward/backward_prep.cuh"
#include "chapters/10_fa2_backward/fa2_backward.hpp"

namespace wb::ch10 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

using ch04::kColumnsPerLane;  // columns of a lane: c = lane + 32 t

constexpr int kKeys = kKernelKeys;  // Bc
constexpr int kRows = kKernelRows;  // Br
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kKeysPerWarp = kKeys / kWarps;  // dK, dV rows of a thread
constexpr int kRowsPerWarp = kRows / kWarps;  // dQ rows of a thread

/// The main kernel's shared tiles, padded by one float per row (conflict-free column walks).
struct BackwardTiles {
  float* k;    // (kKeys, d + 1)
  float* v;    // (kKeys, d + 1)
  float* q;    // (kRows, d + 1)
  float* d_o;  // (kRows, d + 1)
  float* p;    // (kRows, kKeys + 1): P of the tile pair, eq. (6)
  float* ds;   // (kRows, kKeys + 1): dS of the tile pair, eq. (4)
  float* lse;  // (kRows)
  float* d;    // (kRows): D
  __device__ explicit BackwardTiles(int dim) {
    const int row = dim + 1;
    k = dynamic_shared<float>();
    v = k + kKeys * row;
    q = v + kKeys * row;
    d_o = q + kRows * row;
    p = d_o + kRows * row;
    ds = p + kRows * (kKeys + 1);
    lse = ds + kRows * (kKeys + 1);
    d = lse + kRows;
  }
  static std::size_t bytes(int dim) {
    return sizeof(float) *
           (std::size_t(2 * kKeys + 2 * kRows) * (dim + 1) + 2 * kRows * (kKeys + 1) + 2 * kRows);
  }
};

// q, d_o, dq: (bh, lq, d); k, v, dk, dv: (bh, lk, d); lse, d_row: (bh, lq). Block
// (blockIdx.x, blockIdx.y) owns keys [16 blockIdx.x, 16 blockIdx.x + 16) of head blockIdx.y.
__global__ void __launch_bounds__(kThreads)
    backward_kernel(const float* __restrict__ q, const float* __restrict__ k,
                    const float* __restrict__ v, const float* __restrict__ d_o,
                    const float* __restrict__ lse, const float* __restrict__ d_row,
                    float* __restrict__ dq, float* __restrict__ dk, float* __restrict__ dv,
                    AttentionShape shape, float scale, bool causal) {
  const int lq = shape.lq, lk = shape.lk, d = shape.d, row = d + 1;
  const int b = blockIdx.y, j0 = blockIdx.x * kKeys;
  const int lane = threadIdx.x, warp = threadIdx.y, tid = warp * kWarpSize + lane;
  const std::size_t q_off = std::size_t(b) * lq, k_off = std::size_t(b) * lk;
  const BackwardTiles t(d);
  load_rows(k + k_off * d, j0, kKeys, lk, d, row, t.k);  // the block's K/V tile, once
  load_rows(v + k_off * d, j0, kKeys, lk, d, row, t.v);

  float dk_acc[kKeysPerWarp][kColumnsPerLane] = {};  // keys warp + 4 m, columns lane + 32 c
  float dv_acc[kKeysPerWarp][kColumnsPerLane] = {};
  for (int it = first_q_tile(j0, lq, lk, kRows, causal); it * kRows < lq; ++it) {  // eq. (7)
    const int i0 = it * kRows;
    __syncthreads();  // the previous Q tile is no longer read (and the K/V tile is loaded)
    load_rows(q + q_off * d, i0, kRows, lq, d, row, t.q);
    load_rows(d_o + q_off * d, i0, kRows, lq, d, row, t.d_o);
    if (tid < kRows) {
      const bool in = i0 + tid < lq;
      t.lse[tid] = in ? lse[q_off + i0 + tid] : -INFINITY;
      t.d[tid] = in ? d_row[q_off + i0 + tid] : 0.f;
    }
    __syncthreads();                                       // the Q tile is complete
    for (int e = tid; e < kRows * kKeys; e += kThreads) {  // P and dS, two entries a thread
      const int r = e / kKeys, c = e % kKeys, i = i0 + r, j = j0 + c;
      const float s = ch04::score(t.q + r * row, t.k + c * row, d, scale);
      const float dp = ch04::score(t.d_o + r * row, t.v + c * row, d, 1.f);  // eq. (2)
      const bool masked = i >= lq || j >= lk || (causal && !ch04::causal_visible(i, j, lq, lk));
      float p = 0.f, ds = 0.f;
      // [exercise]
      p = recomputed_p(s, t.lse[r], masked);  // eq. (6)
      ds = p * (dp - t.d[r]);                 // eq. (4)
      // [exercise]
      t.p[r * (kKeys + 1) + c] = p;
      t.ds[r * (kKeys + 1) + c] = ds;
    }
    __syncthreads();  // the tile of P and dS is complete
    // dV += P^T dO, dK += dS^T Q: eqs. (1), (5). Both loops run to their compile-time ends
    // (a column past d is skipped, not broken out of) so that nvcc unrolls them and every
    // index into dk_acc and dv_acc is a constant: the accumulators stay in registers. With a
    // `break` they lived in local memory (ptxas: 128 bytes of stack frame).
#pragma unroll
    for (int m = 0; m < kKeysPerWarp; ++m) {
      const int c = warp + kWarps * m;
#pragma unroll
      for (int tc = 0; tc < kColumnsPerLane; ++tc) {
        const int col = lane + kWarpSize * tc;
        if (col >= d) continue;
        float pv = 0.f, sq = 0.f;
        for (int r = 0; r < kRows; ++r) {
          pv = fmaf(t.p[r * (kKeys + 1) + c], t.d_o[r * row + col], pv);
          sq = fmaf(t.ds[r * (kKeys + 1) + c], t.q[r * row + col], sq);
        }
        dv_acc[m][tc] += pv;
        dk_acc[m][tc] += sq;
      }
    }
    for (int m = 0; m < kRowsPerWarp; ++m) {  // dQ += scale dS K, eq. (5), added into
      const int r = warp + kWarps * m;
      if (i0 + r >= lq) break;
      for (int tc = 0; tc < kColumnsPerLane; ++tc) {
        const int col = lane + kWarpSize * tc;
        if (col >= d) break;
        float sk = 0.f;
        for (int c = 0; c < kKeys; ++c)
          sk = fmaf(t.ds[r * (kKeys + 1) + c], t.k[c * row + col], sk);
        atomicAdd(dq + (q_off + i0 + r) * d + col, scale * sk);
      }
    }
  }
#pragma unroll
  for (int m = 0; m < kKeysPerWarp; ++m) {  // the block's dK, dV rows, written once
    const int j = j0 + warp + kWarps * m;
    if (j >= lk) continue;  // (continue, not break: constant indices, as above)
#pragma unroll
    for (int tc = 0; tc < kColumnsPerLane; ++tc) {
      const int col = lane + kWarpSize * tc;
      if (col >= d) continue;
      dk[(k_off + j) * d + col] = scale * dk_acc[m][tc];
      dv[(k_off + j) * d + col] = dv_acc[m][tc];
    }
  }
}

void launch_fa2_backward(const AttentionBackwardArgs& a) {
  const AttentionShape& s = a.shape;
  const int rows = s.bh * s.lq;
  launch_backward_prep(static_cast<const float*>(a.o), static_cast<const float*>(a.d_o), a.d_row,
                       static_cast<float*>(a.dq), rows, s.d);
  launch<backward_kernel>(dim3(ceil_div(s.lk, kKeys), s.bh), dim3(kWarpSize, kWarps),
                          BackwardTiles::bytes(s.d), static_cast<const float*>(a.q),
                          static_cast<const float*>(a.k), static_cast<const float*>(a.v),
                          static_cast<const float*>(a.d_o), a.lse, a.d_row,
                          static_cast<float*>(a.dq), static_cast<float*>(a.dk),
                          static_cast<float*>(a.dv), s, a.scale, a.causal);
}

/// Bc = kKeys, Br = kRows, fp32, dQ added into in place.
Traffic fa2_backward_traffic(const AttentionBackwardArgs& a) {
  return backward_tiles_traffic(a, kRows, kKeys, /*convert=*/false);
}

/// Its tiles, Br query rows by Bc keys whatever d.
TileShape fa2_backward_tiles(int) {
  return {kRows, kKeys};
}

}  // namespace

WB_RUNG(AttentionBackwardArgs, fa2_backward,
        "P recomputed from logsumexp per (K/V tile, Q tile); dK, dV of a K/V tile in "
        "registers of one block; dQ added into with float atomics",
        fp32_backward_limits(), &launch_fa2_backward, &fa2_backward_traffic,
        {&fa2_backward_tiles})

}  // namespace wb::ch10
