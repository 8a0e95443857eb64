// Chapter 06, rung 2: fa2_tensor_core. FlashAttention-2 on tensor cores (nvcuda::wmma).
//
// Computes: O = softmax(scale Q K^T + causal mask) V and logsumexp = m + log l per row, for
//           Q: (bh, lq, d), K, V: (bh, lk, d) in __half or __nv_bfloat16, with float
//           accumulation: eqs. (3)-(7) of fa2_rescaled.md, like rung 1 (1_fa2.cuh). O is written
//           in the input type, logsumexp in float. A fully masked row gives O = 0 and
//           logsumexp = -inf.
// Changed since rung 1, fa2: the two products run on tensor cores, 16 x 16 x 16 at a
//           time. S = Q K^T and O += P~ V are wmma::mma_sync on fragments; P~ is rounded to
//           the input type for the second product (as FlashAttention does); the accumulator
//           SS lives in accumulator fragments and is rescaled there by e^{m - m_new}. Each
//           warp owns 16 query rows (the m of the wmma shape) instead of one.
// Launch shape: grid (ceil(lq / 64), bh); block (32, 4): warp y owns query rows
//           [16 y, 16 y + 16) of the block's Q tile of Br = 64 rows. K/V tiles of Bc keys,
//           Bc = 64 for d = 64, 32 for d = 128. Dynamic shared memory (halves of the input
//           type, floats):
//             K tile (Bc, d + 8) and V tile (Bc, d + 8)      the Q tile (64, d + 8) first
//             per warp: S tile (16, Bc + 4) floats, P~ tile (16, Bc + 8), 16 row factors
//           44.3 KiB for d = 64, 31.3 KiB for d = 128: within the 48 KiB any launch may use.
//           Why these shapes: fa2_rescaled.md, section "FA2 on tensor cores".
// Limits: lq, lk in [1, kMaxLength], any value; d = 64 or 128 (a template parameter);
//           bh <= 65535 (grid.y): the rung's limits (its record, at the end of this file),
//           checked before every launch. q, k, v 16-byte aligned (the launcher checks).
// Memory traffic per Q tile of 64 rows, as rung 1's with 16-bit Q, K, V and O and
//           K/V tiles of Bc keys (fa2_tiles_traffic in fa2.hpp): its Q rows once, K and V once
//           per K/V tile it visits (a warp that skips a tile's products still shares its load),
//           O and logsumexp once, one int of tiles_visited when given.
// Test: ctest --test-dir build -R 06_fa2_rescaled --output-on-failure
#pragma once

#include "common/kernel.cuh"

#include <cstdint>
#include <stdexcept>
#include <string>

#include "chapters/04_fused_qk_softmax/attention_tiles.cuh"
#include "chapters/06_fa2_rescaled/fa2.hpp"
#include "common/shared_memory.hpp"

namespace wb::ch06 {
namespace {  // kernels have internal linkage: one copy per backend's translation unit

namespace wmma = nvcuda::wmma;

constexpr int kMma = 16;     // m = n = k of the wmma shape m16n16k16
constexpr int kTcWarps = 4;  // warps per block, each owning kMma query rows
constexpr int kTcThreads = kTcWarps * kWarpSize;
constexpr int kFloatsPer16Bytes = 4;
constexpr int kWmmaAlign = 32;  // bytes: every wmma pointer is 256-bit aligned
static_assert(kTcWarps * kMma == kTensorCoreRows, "Br = warps x 16 rows");

using AccFragment = wmma::fragment<wmma::accumulator, kMma, kMma, kMma, float>;
constexpr int kAccElements = AccFragment::num_elements;  // 8 of the 256 per lane

/// The tile shapes for head dimension D, and the shared memory they take (bytes).
template <int D>
struct TcTiles {
  static_assert(D == 64 || D == 128, "the tensor-core kernel takes d = 64 or 128");
  static constexpr int kRows = kTensorCoreRows;      // Br
  static constexpr int kKeys = tensor_core_keys(D);  // Bc
  // Row strides, padded by 16 bytes so that the 8 rows of a wmma load start in different
  // shared-memory banks (the unpadded strides, 128 and 256 bytes, would all hit one bank).
  static constexpr int kLdKv = D + kHalvesPer16Bytes;         // K, V and Q tiles, halves
  static constexpr int kLdS = kKeys + kFloatsPer16Bytes;      // S tile, floats
  static constexpr int kLdP = kKeys + kHalvesPer16Bytes;      // P~ tile, halves
  static constexpr int kHalf = 2;                             // bytes of __half, __nv_bfloat16
  static constexpr int kKvBytes = 2 * kKeys * kLdKv * kHalf;  // K and V tiles
  static constexpr int kQBytes = kRows * kLdKv * kHalf;       // the Q tile, staged over them
  static constexpr int kSBytes = kMma * kLdS * int(sizeof(float));
  static constexpr int kPBytes = kMma * kLdP * kHalf;
  static constexpr int kFactorBytes = kMma * int(sizeof(float));  // alpha, then 1 / l
  static constexpr int kWarpBytes = kSBytes + kPBytes + kFactorBytes;
  static constexpr int kSharedBytes = kKvBytes + kTcWarps * kWarpBytes;

  static_assert(kQBytes <= kKvBytes, "the Q tile is staged in the K/V tiles' space");
  static_assert(kKeys % kMma == 0 && D % kMma == 0, "whole wmma tiles");
  static_assert(kKvBytes % kWmmaAlign == 0 && kSBytes % kWmmaAlign == 0 &&
                    kPBytes % kWmmaAlign == 0 && kWarpBytes % kWmmaAlign == 0,
                "every wmma tile starts 32-byte aligned");
  static_assert(kSharedBytes <= int(kDefaultDynamicSharedBytes),
                "within the 48 KiB a launch may use without opting in");
};

/// float <-> the 16-bit input type, rounding to nearest even.
template <typename T>
struct Convert;
template <>
struct Convert<__half> {
  __device__ static __half from_float(float x) { return __float2half_rn(x); }
};
template <>
struct Convert<__nv_bfloat16> {
  __device__ static __nv_bfloat16 from_float(float x) { return __float2bfloat16_rn(x); }
};

// q: (bh, lq, D); k, v: (bh, lk, D); o: (bh, lq, D), all of type T; lse: (bh, lq) float;
// scale: the softmax scale; causal: apply eq. (6); tiles_visited: nullptr or (bh, gridDim.x),
// the K/V tiles each block loaded. Block (blockIdx.x, blockIdx.y) owns query rows
// [64 blockIdx.x, 64 blockIdx.x + 64) of head blockIdx.y; warp y the 16 rows from
// 64 blockIdx.x + 16 y.
template <typename T, int D>
__global__ void __launch_bounds__(kTcThreads)
    fa2_tensor_core_kernel(const T* __restrict__ q, const T* __restrict__ k,
                           const T* __restrict__ v, T* __restrict__ o, float* __restrict__ lse,
                           AttentionShape shape, float scale, bool causal,
                           int* __restrict__ tiles_visited) {
  using Tiles = TcTiles<D>;
  constexpr int kBc = Tiles::kKeys, kLdKv = Tiles::kLdKv, kLdS = Tiles::kLdS, kLdP = Tiles::kLdP;
  constexpr int kDTiles = D / kMma, kKeyTiles = kBc / kMma;
  const int lq = shape.lq, lk = shape.lk;
  const int b = blockIdx.y;
  const int i0 = blockIdx.x * Tiles::kRows;  // the block's first query row
  const int warp = threadIdx.y, lane = threadIdx.x;
  const int w0 = i0 + warp * kMma;  // the warp's first query row
  // In the softmax phase the lanes 2r and 2r + 1 own row r of the warp's 16: its m and l,
  // and the keys c = half, half + 2, ... of the tile.
  const int r = lane / 2, half = lane % 2;
  const int i = w0 + r;  // that row's query index; rows past lq compute, never write

  unsigned char* smem = dynamic_shared<unsigned char>();
  T* k_tile = reinterpret_cast<T*>(smem);  // (kBc, kLdKv)
  T* v_tile = k_tile + kBc * kLdKv;        // (kBc, kLdKv)
  T* q_tile = k_tile;                      // (64, kLdKv), before the first K/V tile
  unsigned char* own = smem + Tiles::kKvBytes + warp * Tiles::kWarpBytes;
  float* s_tile = reinterpret_cast<float*>(own);           // (16, kLdS): S~
  T* p_tile = reinterpret_cast<T*>(own + Tiles::kSBytes);  // (16, kLdP): P~
  float* row_factor = reinterpret_cast<float*>(own + Tiles::kSBytes + Tiles::kPBytes);  // (16)

  // Which (row, column) of its 16 x 16 tile each x[e] of an accumulator fragment holds is
  // unspecified (it differs between architectures), so ask the hardware once: load a tile
  // whose element (row, col) is 16 row + col. Any accumulator fragment maps x[e] the same way.
  for (int e = lane; e < kMma * kMma; e += kWarpSize) s_tile[e / kMma * kLdS + e % kMma] = float(e);
  __syncwarp();  // the tile is complete before the warp loads it
  AccFragment where;
  wmma::load_matrix_sync(where, s_tile, kLdS, wmma::mem_row_major);
  int cell[kAccElements];  // 16 row + col of x[e]
  for (int e = 0; e < kAccElements; ++e) cell[e] = int(where.x[e]);

  // The warp's 16 rows of Q, as A fragments (16 x 16 each, D / 16 of them), kept in
  // registers for the whole loop.
  load_rows_16bit<D>(q + std::size_t(b) * lq * D, i0, Tiles::kRows, lq, kLdKv, q_tile);
  __syncthreads();  // the Q tile is complete
  wmma::fragment<wmma::matrix_a, kMma, kMma, kMma, T, wmma::row_major> q_frag[kDTiles];
  for (int t = 0; t < kDTiles; ++t)
    wmma::load_matrix_sync(q_frag[t], q_tile + warp * kMma * kLdKv + t * kMma, kLdKv);

  AccFragment ss[kDTiles];  // SS, eq. (1): the unnormalized output, 16 x D, in fragments
  for (int t = 0; t < kDTiles; ++t) wmma::fill_fragment(ss[t], 0.f);
  float m = -INFINITY;  // running max of row r (in both lanes of the pair)
  float l = 0.f;        // running denominator of row r, relative to m

  const int rows = min(Tiles::kRows, lq - i0);
  const int tiles = kv_tiles_to_visit(i0, rows, lq, lk, kBc, causal);  // eq. (7)
  // The last key the warp's last row sees (eq. 6): a tile past it is masked for all 16 rows.
  const int warp_last_key = causal ? w0 + kMma - 1 + (lk - lq) : lk - 1;
  const bool warp_has_rows = w0 < lq;
  for (int jt = 0; jt < tiles; ++jt) {
    const int j0 = jt * kBc;
    __syncthreads();  // the previous K/V tile (or the Q tile) is no longer read
    load_rows_16bit<D>(k + std::size_t(b) * lk * D, j0, kBc, lk, kLdKv, k_tile);
    load_rows_16bit<D>(v + std::size_t(b) * lk * D, j0, kBc, lk, kLdKv, v_tile);
    __syncthreads();  // the K/V tile is complete
    // A warp with no row below lq, or whose rows all mask this tile, would add exactly 0:
    // it skips the products (the condition is the same in all its lanes).
    if (!warp_has_rows || j0 > warp_last_key) continue;

    // S~ = Q K^T on tensor cores: K^T (d, keys) is the K tile read column-major.
    for (int n = 0; n < kKeyTiles; ++n) {
      AccFragment s;
      wmma::fill_fragment(s, 0.f);
      for (int t = 0; t < kDTiles; ++t) {
        wmma::fragment<wmma::matrix_b, kMma, kMma, kMma, T, wmma::col_major> k_frag;
        wmma::load_matrix_sync(k_frag, k_tile + n * kMma * kLdKv + t * kMma, kLdKv);
        wmma::mma_sync(s, q_frag[t], k_frag, s);
      }
      wmma::store_matrix_sync(s_tile + n * kMma, s, kLdS, wmma::mem_row_major);
    }
    __syncwarp();  // S~ is in shared memory before the lanes read it by row

    // [tensor_core_rescale]
    // Row statistics, eq. (3), by the lane pair of row r: scale, mask (eq. 6), tile max.
    float m_tile = -INFINITY;
    for (int c = half; c < kBc; c += 2) {
      const int j = j0 + c;
      float x = scale * s_tile[r * kLdS + c];
      if (j >= lk || (causal && !ch04::causal_visible(i, j, lq, lk))) x = -INFINITY;
      s_tile[r * kLdS + c] = x;
      m_tile = fmaxf(m_tile, x);
    }
    m_tile = fmaxf(m_tile, __shfl_xor_sync(kAllLanes, m_tile, 1));
    const float m_new = fmaxf(m, m_tile);         // eq. (3)
    const float alpha = ch05::rescale(m, m_new);  // e^{m - m_new}, 0 on the first tile
    const float shift = ch01::exp_shift(m_new);
    float rowsum = 0.f;  // of the float P~, before it is rounded for the product
    for (int c = half; c < kBc; c += 2) {
      const float p = expf(s_tile[r * kLdS + c] - shift);  // P~
      rowsum += p;
      p_tile[r * kLdP + c] = Convert<T>::from_float(p);  // rounded once, for P~ V
    }
    l = l * alpha + (rowsum + __shfl_xor_sync(kAllLanes, rowsum, 1));
    m = m_new;
    if (half == 0) row_factor[r] = alpha;
    __syncwarp();  // P~ and the factors are in shared memory before the warp reads them

    // SS e^{m - m_new}: element x[e] of every accumulator fragment lies in row cell[e] / 16.
    for (int e = 0; e < kAccElements; ++e) {
      const float factor = row_factor[cell[e] / kMma];
      for (int t = 0; t < kDTiles; ++t) ss[t].x[e] *= factor;
    }
    // + P~ V on tensor cores.
    wmma::fragment<wmma::matrix_a, kMma, kMma, kMma, T, wmma::row_major> p_frag[kKeyTiles];
    for (int kk = 0; kk < kKeyTiles; ++kk)
      wmma::load_matrix_sync(p_frag[kk], p_tile + kk * kMma, kLdP);
    for (int t = 0; t < kDTiles; ++t) {
      for (int kk = 0; kk < kKeyTiles; ++kk) {
        wmma::fragment<wmma::matrix_b, kMma, kMma, kMma, T, wmma::row_major> v_frag;
        wmma::load_matrix_sync(v_frag, v_tile + kk * kMma * kLdKv + t * kMma, kLdKv);
        wmma::mma_sync(ss[t], p_frag[kk], v_frag, ss[t]);
      }
    }
    // [tensor_core_rescale]
    __syncwarp();  // every lane has read P~ and the factors before the next tile rewrites them
  }

  // Eq. (4), O = SS / l, rounded once to T, straight from the fragments; eq. (5).
  if (half == 0) row_factor[r] = ch01::inverse_or_zero(l);  // 0 for a fully masked row
  __syncwarp();  // the factors are in shared memory before the warp reads them
  for (int e = 0; e < kAccElements; ++e) {
    const int row = w0 + cell[e] / kMma;
    if (row >= lq) continue;
    const float inv_l = row_factor[cell[e] / kMma];
    T* o_row = o + (std::size_t(b) * lq + row) * D + cell[e] % kMma;
    for (int t = 0; t < kDTiles; ++t) o_row[t * kMma] = Convert<T>::from_float(ss[t].x[e] * inv_l);
  }
  if (half == 0 && i < lq) lse[std::size_t(b) * lq + i] = logsumexp(m, l);
  if (tiles_visited != nullptr && threadIdx.x == 0 && threadIdx.y == 0)
    tiles_visited[std::size_t(b) * gridDim.x + blockIdx.x] = tiles;
}

template <typename T, int D>
void launch_tensor_core(const AttentionArgs& a) {
  launch<fa2_tensor_core_kernel<T, D>>(
      dim3(ceil_div(a.shape.lq, TcTiles<D>::kRows), a.shape.bh), dim3(kWarpSize, kTcWarps),
      std::size_t(TcTiles<D>::kSharedBytes), static_cast<const T*>(a.q), static_cast<const T*>(a.k),
      static_cast<const T*>(a.v), static_cast<T*>(a.o), a.lse, a.shape, a.scale, a.causal,
      a.tiles_visited);
}

template <typename T>
void launch_tensor_core(const AttentionArgs& a) {
  // The tile shapes are compiled for d = 64 and 128 only: any other d would index past them.
  if (a.shape.d == 64)
    launch_tensor_core<T, 64>(a);
  else if (a.shape.d == 128)
    launch_tensor_core<T, 128>(a);
  else
    throw std::invalid_argument("fa2_tensor_core: head dimension d = " + std::to_string(a.shape.d) +
                                " is not one it takes (64 or 128)");
}

void launch_fa2_tensor_core(const AttentionArgs& a) {
  constexpr std::uintptr_t kLoadBytes = 16;  // the tile loads read 16 bytes at a time
  for (const void* p : {a.q, a.k, a.v}) {
    if (reinterpret_cast<std::uintptr_t>(p) % kLoadBytes != 0)
      throw std::invalid_argument("fa2_tensor_core: q, k and v must be 16-byte aligned");
  }
  if (a.dtype == Dtype::fp16)
    launch_tensor_core<__half>(a);
  else
    launch_tensor_core<__nv_bfloat16>(a);
}

/// Its tiles on head dimension d: kTensorCoreRows x tensor_core_keys(d).
TileShape tensor_core_tiles(int d) {
  return {kTensorCoreRows, tensor_core_keys(d)};
}

/// 16-bit Q, K, V and O.
Traffic tensor_core_traffic(const AttentionArgs& a) {
  return fa2_tiles_traffic(a, kTensorCoreRows, tensor_core_keys(a.shape.d));
}

}  // namespace

WB_RUNG(AttentionArgs, fa2_tensor_core,
        "both products on tensor cores (wmma 16x16x16): fp16 or bf16 inputs, float "
        "accumulation, 16 query rows per warp",
        attention_limits({Dtype::fp16, Dtype::bf16}, 0, {64, 128}, ch04::kMaxBatchHeads,
                         /*causal=*/true, kWritesO | kWritesLse),
        &launch_fa2_tensor_core, &tensor_core_traffic, {&tensor_core_tiles, /*rounds_p=*/true})

}  // namespace wb::ch06
