// Chapter 10, rung 3: the FlashAttention-2 backward on tensor cores (wmma).
//
// Computes: dQ, dK, dV as rung 2 (fa2_backward), for Q, K, V, O, dO in __half or
//           __nv_bfloat16 with float accumulation; the gradients written in the input type.
// Changed since rung 2: the five products run on tensor cores, 16 x 16 x 16 at a time. A
//           warp owns 16 keys of the block's K/V tile: it computes S^T = K Q^T and
//           dP^T = V dO^T for them (S^T, not S: the keys are its rows), turns them into P^T
//           and dS^T elementwise in shared memory (rounded to the input type for the next
//           products), and keeps dV += P^T dO and dK += dS^T Q in accumulator fragments until
//           the end. dQ = dS K needs every warp's keys: after a barrier each warp takes 16 rows
//           of the Q tile, reads dS^T column-major (that is dS), and adds its 16 x d result
//           into a float dQ with atomics; a last kernel rounds that dQ to the input type.
// Launch shape: the D kernel and the conversion as backward_prep.cuh; the main kernel grid
//           (ceil(lk / 64), bh), block (32, 4): Bc = 64 keys per block (warp y owns keys
//           16 y .. 16 y + 15), Q tiles of Br = 64 rows. Dynamic shared memory: the K, V, Q,
//           dO tiles (64, d + 8) of T; per warp a float staging tile (16, max(64, d) + 4)
//           twice and the P^T, dS^T tiles (16, 64 + 8) of T, lse and D of the Q tile:
//           88.5 KiB for d = 64, 152.5 KiB for d = 128, over the 48 KiB default (the launcher
//           opts in; an A100 allows 163 KiB, an H100 227 KiB).
// Limits: lq, lk >= 1 (up to kMaxLength); bh x lq <= 2^31 - 1; d = 64 or 128; bh <= 65535;
//           fp16 or bf16; q, k, v, d_o 16-byte aligned (the launcher checks).
// Memory traffic (fa2_backward_tensor_core_traffic in backward_ladder.hpp): as the fp32 rung
//           with 16-bit Q, K, V, O, dO, dQ, dK, dV, tiles of 64 keys and 64 rows, dQ added into
//           a float buffer, then read once and written once in the input type.
// Test: ctest --test-dir build -R 10_fa2_backward --output-on-failure
#pragma once

#include "common/kernel.cuh"

#include <cstdint>

#include "chapters/04_fused_qk_softmax/attention_tiles.cuh"
#include "chapters/10_fa2_backward/backward_ladder.hpp"
#include "chapters/10_fa2_backward/backward_prep.cuh"
#include "chapters/10_fa2_backward/fa2_backward.hpp"
#include "common/shared_memory.cuh"
#include "common/tile_shape.cuh"

namespace wb::ch10 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

namespace wmma = nvcuda::wmma;

constexpr int kMma = 16;  // m = n = k of the wmma shape m16n16k16
constexpr int kTcWarps = 4;
constexpr int kTcThreads = kTcWarps * kWarpSize;
constexpr int kPad = kHalvesPer16Bytes;  // halves: 16 bytes, a row's bank offset
constexpr int kFloatPad = 4;                   // floats: 16 bytes
static_assert(kTcWarps * kMma == kTensorCoreKeys, "Bc = warps x 16 keys");

using AccFragment = wmma::fragment<wmma::accumulator, kMma, kMma, kMma, float>;

/// The shared-memory layout for head dimension D (bytes from the start).
template <int D>
struct BwdTiles {
  static_assert(D == 64 || D == 128, "the tensor-core backward takes d = 64 or 128");
  static constexpr int kBc = kTensorCoreKeys, kBr = kTensorCoreRows;
  static constexpr int kLd = D + kPad;                     // K, V, Q, dO rows (halves)
  static constexpr int kLdP = kBr + kPad;                  // P^T, dS^T rows (halves)
  static constexpr int kStageCols = (D > kBr ? D : kBr);   // S^T, dP^T (16 x Br); dQ, dK (16 x D)
  static constexpr int kLdStage = kStageCols + kFloatPad;  // floats
  static constexpr int kTile = kBc * kLd * 2;              // one (64, D + 8) tile of T
  static constexpr int kStage = kMma * kLdStage * 4;       // one warp's float staging tile
  static constexpr int kPt = kMma * kLdP * 2;              // one warp's P^T (or dS^T) tile
  static constexpr int kK = 0, kV = kTile, kQ = 2 * kTile, kDo = 3 * kTile;
  static constexpr int kStages = 4 * kTile;                     // 2 per warp: S^T, dP^T
  static constexpr int kPts = kStages + 2 * kTcWarps * kStage;  // P^T of warps 0..3, then dS^T
  static constexpr int kDsts = kPts + kTcWarps * kPt;
  static constexpr int kRowStats = kDsts + kTcWarps * kPt;  // lse, D of the Q tile (floats)
  static constexpr int kBytes = kRowStats + 2 * kBr * 4;
  static_assert(kTile % 32 == 0 && kStage % 32 == 0 && kPt % 32 == 0, "32-byte aligned tiles");
};

// q, d_o: (bh, lq, D); k, v, dk, dv: (bh, lk, D), all of T; lse, d_row: (bh, lq); dq_accum:
// (bh, lq, D) float, added into. Block (blockIdx.x, blockIdx.y) owns keys
// [64 blockIdx.x, 64 blockIdx.x + 64) of head blockIdx.y.
template <typename T, int D>
__global__ void __launch_bounds__(kTcThreads)
    backward_tensor_core_kernel(const T* __restrict__ q, const T* __restrict__ k,
                                const T* __restrict__ v, const T* __restrict__ d_o,
                                const float* __restrict__ lse, const float* __restrict__ d_row,
                                float* __restrict__ dq_accum, T* __restrict__ dk,
                                T* __restrict__ dv, AttentionShape shape, float scale,
                                bool causal) {
  using L = BwdTiles<D>;
  constexpr int kDTiles = D / kMma, kRowTiles = L::kBr / kMma, kKeyTiles = L::kBc / kMma;
  const int lq = shape.lq, lk = shape.lk;
  const int b = blockIdx.y, j0 = blockIdx.x * L::kBc;
  const int warp = threadIdx.y, lane = threadIdx.x;
  const std::size_t q_off = std::size_t(b) * lq, k_off = std::size_t(b) * lk;

  unsigned char* smem = dynamic_shared<unsigned char>();
  T* k_tile = reinterpret_cast<T*>(smem + L::kK);
  T* v_tile = reinterpret_cast<T*>(smem + L::kV);
  T* q_tile = reinterpret_cast<T*>(smem + L::kQ);
  T* do_tile = reinterpret_cast<T*>(smem + L::kDo);
  float* st = reinterpret_cast<float*>(smem + L::kStages + (2 * warp) * L::kStage);
  float* dpt = reinterpret_cast<float*>(smem + L::kStages + (2 * warp + 1) * L::kStage);
  T* pt = reinterpret_cast<T*>(smem + L::kPts + warp * L::kPt);  // this warp's 16 keys of P^T
  T* dst_all = reinterpret_cast<T*>(smem + L::kDsts);            // dS^T, (64 keys, Br + 8)
  T* dst = dst_all + warp * kMma * L::kLdP;                      // this warp's 16 keys of it
  float* lse_tile = reinterpret_cast<float*>(smem + L::kRowStats);
  float* d_tile = lse_tile + L::kBr;

  load_rows_16bit<D>(k + k_off * D, j0, L::kBc, lk, L::kLd, k_tile);  // once
  load_rows_16bit<D>(v + k_off * D, j0, L::kBc, lk, L::kLd, v_tile);

  AccFragment dk_acc[kDTiles], dv_acc[kDTiles];  // the warp's 16 keys x D of dK, dV
  for (int t = 0; t < kDTiles; ++t) {
    wmma::fill_fragment(dk_acc[t], 0.f);
    wmma::fill_fragment(dv_acc[t], 0.f);
  }
  const int wk0 = warp * kMma;  // the warp's first key within the tile
  for (int it = first_q_tile(j0, lq, lk, L::kBr, causal); it * L::kBr < lq; ++it) {  // eq. (7)
    const int i0 = it * L::kBr;
    __syncthreads();  // the previous Q tile and dS^T are no longer read (K, V are loaded)
    load_rows_16bit<D>(q + q_off * D, i0, L::kBr, lq, L::kLd, q_tile);
    load_rows_16bit<D>(d_o + q_off * D, i0, L::kBr, lq, L::kLd, do_tile);
    for (int r = warp * kWarpSize + lane; r < L::kBr; r += kTcThreads) {
      const bool in = i0 + r < lq;
      lse_tile[r] = in ? lse[q_off + i0 + r] : -INFINITY;
      d_tile[r] = in ? d_row[q_off + i0 + r] : 0.f;
    }
    __syncthreads();  // the Q tile is complete

    // S^T = K Q^T and dP^T = V dO^T for the warp's 16 keys, eq. (2): Q^T and dO^T are the
    // row-major Q and dO tiles read column-major.
    for (int n = 0; n < kRowTiles; ++n) {
      AccFragment s, dp;
      wmma::fill_fragment(s, 0.f);
      wmma::fill_fragment(dp, 0.f);
      for (int t = 0; t < kDTiles; ++t) {
        wmma::fragment<wmma::matrix_a, kMma, kMma, kMma, T, wmma::row_major> ka, va;
        wmma::fragment<wmma::matrix_b, kMma, kMma, kMma, T, wmma::col_major> qb, dob;
        wmma::load_matrix_sync(ka, k_tile + wk0 * L::kLd + t * kMma, L::kLd);
        wmma::load_matrix_sync(va, v_tile + wk0 * L::kLd + t * kMma, L::kLd);
        wmma::load_matrix_sync(qb, q_tile + n * kMma * L::kLd + t * kMma, L::kLd);
        wmma::load_matrix_sync(dob, do_tile + n * kMma * L::kLd + t * kMma, L::kLd);
        wmma::mma_sync(s, ka, qb, s);
        wmma::mma_sync(dp, va, dob, dp);
      }
      wmma::store_matrix_sync(st + n * kMma, s, L::kLdStage, wmma::mem_row_major);
      wmma::store_matrix_sync(dpt + n * kMma, dp, L::kLdStage, wmma::mem_row_major);
    }
    __syncwarp();  // S^T and dP^T are in shared memory before the lanes read them
    // P^T and dS^T elementwise, eqs. (6) and (4), rounded to T for the products.
    for (int e = lane; e < kMma * L::kBr; e += kWarpSize) {
      const int c = e / L::kBr, r = e % L::kBr;  // key c of the warp's 16, row r of the tile
      const int i = i0 + r, j = j0 + wk0 + c;
      const bool masked = i >= lq || j >= lk || (causal && !ch04::causal_visible(i, j, lq, lk));
      const float p = recomputed_p(scale * st[c * L::kLdStage + r], lse_tile[r], masked);
      const float ds = p * (dpt[c * L::kLdStage + r] - d_tile[r]);
      pt[c * L::kLdP + r] = from_float<T>(p);
      dst[c * L::kLdP + r] = from_float<T>(ds);
    }
    __syncwarp();  // P^T and dS^T are complete before the warp loads them
    // dV += P^T dO and dK += dS^T Q, eqs. (1) and (5), over the tile's Br rows.
    for (int kk = 0; kk < kRowTiles; ++kk) {
      wmma::fragment<wmma::matrix_a, kMma, kMma, kMma, T, wmma::row_major> pa, dsa;
      wmma::load_matrix_sync(pa, pt + kk * kMma, L::kLdP);
      wmma::load_matrix_sync(dsa, dst + kk * kMma, L::kLdP);
      for (int t = 0; t < kDTiles; ++t) {
        wmma::fragment<wmma::matrix_b, kMma, kMma, kMma, T, wmma::row_major> dob, qb;
        wmma::load_matrix_sync(dob, do_tile + kk * kMma * L::kLd + t * kMma, L::kLd);
        wmma::load_matrix_sync(qb, q_tile + kk * kMma * L::kLd + t * kMma, L::kLd);
        wmma::mma_sync(dv_acc[t], pa, dob, dv_acc[t]);
        wmma::mma_sync(dk_acc[t], dsa, qb, dk_acc[t]);
      }
    }
    __syncthreads();  // every warp's dS^T is complete: dQ needs all 64 keys
    // dQ = scale dS K, eq. (5), rows 16 warp .. 16 warp + 15 of the tile: dS is dS^T read
    // column-major. Staged in the warp's S^T tile (read above), then added into dq_accum.
    const int wr0 = warp * kMma;
    if (i0 + wr0 < lq) {  // the same in every lane: a warp past lq has nothing to add
      for (int t = 0; t < kDTiles; ++t) {
        AccFragment acc;
        wmma::fill_fragment(acc, 0.f);
        for (int kk = 0; kk < kKeyTiles; ++kk) {
          wmma::fragment<wmma::matrix_a, kMma, kMma, kMma, T, wmma::col_major> dsa;
          wmma::fragment<wmma::matrix_b, kMma, kMma, kMma, T, wmma::row_major> kb;
          wmma::load_matrix_sync(dsa, dst_all + kk * kMma * L::kLdP + wr0, L::kLdP);
          wmma::load_matrix_sync(kb, k_tile + kk * kMma * L::kLd + t * kMma, L::kLd);
          wmma::mma_sync(acc, dsa, kb, acc);
        }
        wmma::store_matrix_sync(st + t * kMma, acc, L::kLdStage, wmma::mem_row_major);
      }
      __syncwarp();                                      // the warp's dQ rows are staged
      for (int e = lane; e < kMma * D; e += kWarpSize) {  // 32 consecutive columns at a time
        const int r = e / D, col = e % D, i = i0 + wr0 + r;
        if (i < lq) atomicAdd(dq_accum + (q_off + i) * D + col, scale * st[r * L::kLdStage + col]);
      }
    }
  }
  // The warp's dK (scaled once, here) and dV rows, staged and written once in T.
  __syncwarp();  // the last dQ staging is read before it is overwritten
  for (int t = 0; t < kDTiles; ++t) {
    wmma::store_matrix_sync(st + t * kMma, dk_acc[t], L::kLdStage, wmma::mem_row_major);
    wmma::store_matrix_sync(dpt + t * kMma, dv_acc[t], L::kLdStage, wmma::mem_row_major);
  }
  __syncwarp();  // staged
  for (int e = lane; e < kMma * D; e += kWarpSize) {
    const int c = e / D, col = e % D, j = j0 + wk0 + c;
    if (j >= lk) continue;
    dk[(k_off + j) * D + col] = from_float<T>(scale * st[c * L::kLdStage + col]);
    dv[(k_off + j) * D + col] = from_float<T>(dpt[c * L::kLdStage + col]);
  }
}

template <typename T, int D>
void launch_backward_tensor_core(const AttentionBackwardArgs& a) {
  const AttentionShape& s = a.shape;
  launch_opted_in<backward_tensor_core_kernel<T, D>>(
      dim3(ceil_div(s.lk, kTensorCoreKeys), s.bh), dim3(kWarpSize, kTcWarps), BwdTiles<D>::kBytes,
      static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v),
      static_cast<const T*>(a.d_o), a.lse, a.d_row, a.dq_accum, static_cast<T*>(a.dk),
      static_cast<T*>(a.dv), s, a.scale, a.causal);
}

void launch_fa2_backward_tensor_core(const AttentionBackwardArgs& a) {
  launch_16bit_backward(
      a, "fa2_backward_tensor_core", {a.q, a.k, a.v, a.d_o}, "q, k, v and d_o",
      [&](auto t, auto d) { launch_backward_tensor_core<decltype(t), decltype(d)::value>(a); });
}

}  // namespace

WB_RUNG(AttentionBackwardArgs, fa2_backward_tensor_core,
        "the five products on tensor cores (wmma 16x16x16): fp16 or bf16 inputs, float "
        "accumulation; a warp owns 16 keys; dQ added into float, then rounded",
        tensor_core_backward_limits(), &launch_fa2_backward_tensor_core,
        &fa2_backward_tensor_core_traffic, {&backward_tensor_core_tiles, /*rounds_p=*/true})

}  // namespace wb::ch10
