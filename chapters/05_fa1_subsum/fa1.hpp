// Chapter 05: FlashAttention-1, the SubSum recurrence. The element-wise recurrence, the tiled
// FA1 Algorithm 1 on the CPU, and the kernel ladder.
//
// x_j = scale q . k_j, the scores of one query row                              eq. (1)
// m_i = max(m_{i-1}, x_i), d'_i = d'_{i-1} e^{m_{i-1} - m_i} + e^{x_i - m_i}     eq. (2)
// O_i = sum_{j<=i} (e^{x_j - m_i} / d'_i) v_j, the output of the prefix x_1..x_i  eq. (3)
// O_i = O_{i-1} (d'_{i-1} e^{m_{i-1} - m_i} / d'_i) + (e^{x_i - m_i} / d'_i) v_i   eq. (4)
// two normalized partial outputs (m_A, d_A, O_A), (m_B, d_B, O_B) merge into
// O = (d_A e^{m_A - m} O_A + d_B e^{m_B - m} O_B) / d                            eq. (5)
// FA1 Algorithm 1: K/V tiles outer, Q tiles inner, O and (m, l) in global memory,
// each visit applying eq. (5) with B = the tile, whose d_B O_B = P~ V            eq. (6)
// See fa1_subsum.md for the derivation.
#pragma once

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "chapters/01_safe_softmax/softmax.hpp"
#include "chapters/02_online_softmax/online_update.hpp"
#include "chapters/03_block_merge/md_merge.hpp"
#include "chapters/04_fused_qk_softmax/fused_softmax.hpp"
#include "common/attention_inputs.hpp"
#include "common/backend.hpp"
#include "common/hd.hpp"
#include "common/rung.hpp"
#include "common/rung_args.hpp"
#include "common/warp.hpp"

namespace wb::ch05 {

using ch03::MD;

// [rescale]
/// e^{m_old - m_new}, the factor that moves a sum taken relative to m_old onto m_new >= m_old;
/// 0 when m_old = -inf (nothing was summed), never e^{-inf - (-inf)} = NaN. The same rule as
/// chapter 03's md_merge, exposed because the output needs the factor itself.
__host__ __device__ inline float rescale(float m_old, float m_new) {
  return m_old == -INFINITY ? 0.f : expf(m_old - m_new);
}
// [rescale]

// ------------------------------------------------------------------------------------------
// CPU step 1: the element-wise recurrence, eq. (4)
// ------------------------------------------------------------------------------------------

/// One key at a time, the derivation in code. q: (bh, lq, d); k, v: (bh, lk, d);
/// o: (bh, lq, d).
inline void attention_elementwise(const float* q, const float* k, const float* v,
                                  AttentionShape shape, float scale, float* o) {
  const int lq = shape.lq, lk = shape.lk, d = shape.d;
  std::vector<float> o_row(d);
  for (std::size_t row = 0; row < shape.rows(); ++row) {
    const std::size_t b = row / lq;
    const float* q_row = q + row * d;
    MD md = ch03::md_identity();  // (m_0, d'_0) = (-inf, 0), O_0 = 0
    std::fill(o_row.begin(), o_row.end(), 0.f);
    for (int j = 0; j < lk; ++j) {
      const float* k_j = k + (b * lk + j) * d;
      const float* v_j = v + (b * lk + j) * d;
      float x = 0.f;  // x_j: the score, eq. (1)
      ch04::score_tile(q_row, k_j, 1, 1, d, scale, &x);
      // [subsum_elementwise]
      const MD next = ch02::online_update(md, x);  // eq. (2): (m_j, d'_j), chapter 02
      const float inv_d = ch01::inverse_or_zero(next.d);
      const float keep = md.d * rescale(md.m, next.m) * inv_d;  // d'_{j-1} e^{m_{j-1}-m_j} / d'_j
      const float add = expf(x - ch01::exp_shift(next.m)) * inv_d;  // e^{x_j - m_j} / d'_j
      for (int c = 0; c < d; ++c) o_row[c] = o_row[c] * keep + add * v_j[c];  // eq. (4)
      md = next;
      // [subsum_elementwise]
    }
    std::copy(o_row.begin(), o_row.end(), o + row * d);
  }
}

inline std::vector<float> attention_elementwise(const AttentionInputs& in, AttentionShape shape,
                                                float scale) {
  std::vector<float> o(shape.q_elems());
  attention_elementwise(in.q.data(), in.k.data(), in.v.data(), shape, scale, o.data());
  return o;
}

// ------------------------------------------------------------------------------------------
// CPU step 2: FA1 Algorithm 1, tiled
// ------------------------------------------------------------------------------------------

// [fa1_cpu]
/// FA1 Algorithm 1 with K/V tiles of bc keys (outer loop) and Q tiles of br rows (inner
/// loop), any br, bc >= 1. o: (bh, lq, d) and stats: (bh, lq), the running (m, l), play the
/// part of HBM: every Q tile reads and writes them once per K/V tile, and ends holding the
/// final O and (m, l).
inline void attention_fa1(const float* q, const float* k, const float* v, AttentionShape shape,
                          float scale, int br, int bc, float* o, MD* stats) {
  const int lq = shape.lq, lk = shape.lk, d = shape.d;
  std::fill(o, o + shape.q_elems(), 0.f);                       // line 2: O = 0
  std::fill(stats, stats + shape.rows(), ch03::md_identity());  // line 2: l = 0, m = -inf
  std::vector<float> s_tile(std::size_t(br) * bc);              // "SRAM": S_ij, then P~_ij
  std::vector<float> pv(d);                                     // one row of P~_ij V_j
  for (int b = 0; b < shape.bh; ++b) {
    for (int j0 = 0; j0 < lk; j0 += bc) {  // line 5: outer loop over K_j, V_j
      const int cols = std::min(bc, lk - j0);
      const float* k_j = k + (std::size_t(b) * lk + j0) * d;
      const float* v_j = v + (std::size_t(b) * lk + j0) * d;
      for (int i0 = 0; i0 < lq; i0 += br) {  // line 7: inner loop over Q_i, O_i, l_i, m_i
        const int rows = std::min(br, lq - i0);
        const std::size_t row0 = std::size_t(b) * lq + i0;
        ch04::score_tile(q + row0 * d, k_j, rows, cols, d, scale, s_tile.data());  // line 9
        for (int r = 0; r < rows; ++r) {
          float* s_row = s_tile.data() + std::size_t(r) * cols;
          MD tile = ch03::md_identity();  // line 10: m~ = rowmax(S), l~ = rowsum(P~)
          for (int c = 0; c < cols; ++c) tile = ch02::online_update(tile, s_row[c]);
          const float shift = ch01::exp_shift(tile.m);
          std::fill(pv.begin(), pv.end(), 0.f);
          for (int c = 0; c < cols; ++c) {
            const float p = std::exp(s_row[c] - shift);  // P~ = e^{S - m~}
            for (int t = 0; t < d; ++t) pv[t] += p * v_j[std::size_t(c) * d + t];
          }
          // [subsum_block]
          const MD old = stats[row0 + r];
          const MD next = ch03::md_merge(old, tile);  // line 11: m_new, l_new
          const float inv_l = ch01::inverse_or_zero(next.d);
          const float keep = old.d * rescale(old.m, next.m) * inv_l;  // l_i e^{m_i - m_new} / l_new
          const float add = rescale(tile.m, next.m) * inv_l;          // e^{m~ - m_new} / l_new
          float* o_row = o + (row0 + r) * d;
          for (int t = 0; t < d; ++t) o_row[t] = keep * o_row[t] + add * pv[t];  // line 12, eq. (6)
          stats[row0 + r] = next;                                                // line 13
          // [subsum_block]
        }
      }
    }
  }
}
// [fa1_cpu]

struct Fa1Result {
  std::vector<float> o;   ///< (bh, lq, d)
  std::vector<MD> stats;  ///< (bh, lq): the final (m, l)
};

inline Fa1Result attention_fa1(const AttentionInputs& in, AttentionShape shape, float scale, int br,
                               int bc) {
  Fa1Result out{std::vector<float>(shape.q_elems()), std::vector<MD>(shape.rows())};
  attention_fa1(in.q.data(), in.k.data(), in.v.data(), shape, scale, br, bc, out.o.data(),
                out.stats.data());
  return out;
}

// ------------------------------------------------------------------------------------------
// The kernel ladder: one rung per file of rungs/ (its kernel, launcher and record)
// ------------------------------------------------------------------------------------------

/// The FA1 kernel's tiles, Br query rows by Bc keys (rungs/2_fa1.cuh), stated here so that the
/// program and the tests run the CPU step on the same tiles.
inline constexpr int kKernelRows = 8;
inline constexpr int kKernelKeys = 32;

/// Rows and columns of the product tile one block of the baseline's matmul kernel computes
/// (matmul_tile.cuh): Q and K^T are read once per tile of S, P and V once per tile of O.
inline constexpr int kMatmulTile = 64;

/// The limits of a baseline built on the matmul (this chapter's `standard`, chapter 10's
/// `standard_backward`), on top of `l`: its grid.y = ceil(rows / 64) <= 65535 puts lq and lk
/// (each a product's rows somewhere) at most 65535 x 64, and the scores' rows are one row-wise
/// launch's int rows, bh x lq <= INT_MAX.
inline RungLimits matmul_baseline_limits(RungLimits l) {
  l.max_length = 65535 * kMatmulTile;
  l.max_rows = INT_MAX;
  return l;
}

/// T(n) = ceil(n / kMatmulTile): how often the baseline's matmul reads an operand, a once per
/// tile of c's columns and b once per tile of its rows.
inline std::uint64_t matmul_tiles(int n) {
  return (static_cast<std::uint64_t>(n) + kMatmulTile - 1) / kMatmulTile;
}

/// The FA1 kernel's traffic with K/V tiles of `bc` keys, one block per head, Tc = ceil(lk / bc)
/// K/V tiles: K and V read once (each K/V tile into shared memory, line 6); for every K/V tile
/// all of Q read (line 8), and O and (m, l) read and written once per row (lines 8, 12 and 13);
/// line 2 writes O = 0 and (m, l) = (-inf, 0) once more. Each of the row's warp's 32 lanes reads
/// the row's (m, l) (one broadcast request: one sector, 32 x 8 bytes asked for); lane 0 alone
/// writes it. The kernel runs bc = kKernelKeys (fa1_traffic in rungs/2_fa1.cuh); other values
/// say what larger tiles would save (`ch05 --profile`, the page's block-size figure).
inline Traffic fa1_tiles_traffic(const AttentionArgs& a, int bc) {
  const std::uint64_t lq = static_cast<std::uint64_t>(a.shape.lq);
  const std::uint64_t tc =
      (static_cast<std::uint64_t>(a.shape.lk) + static_cast<std::uint64_t>(bc) - 1) /
      static_cast<std::uint64_t>(bc);
  const std::uint64_t kv = 2 * head_rows_bytes(a, static_cast<std::uint64_t>(a.shape.lk));
  const std::uint64_t q_or_o = head_rows_bytes(a, lq);
  const std::uint64_t md_read = lq * static_cast<std::uint64_t>(kWarpSize) * sizeof(MD);
  const std::uint64_t md_write = lq * sizeof(MD);
  const std::uint64_t bh = static_cast<std::uint64_t>(a.shape.bh);
  return {bh * (kv + tc * (2 * q_or_o + md_read)), bh * (tc + 1) * (q_or_o + md_write),
          "per head, Tc = ceil(lk / " + std::to_string(bc) +
              ") K/V tiles: K and V once + Tc x (Q + O + (m, l) by 32 lanes per row); "
              "(Tc + 1) x (O + (m, l)) written (line 2's initialization, then once per K/V tile)"};
}

}  // namespace wb::ch05

// The ladder, rungs/1_standard.cuh (the baseline) and rungs/2_fa1.cuh in order: the build lists
// the files as Rungs<B> and kernel_ladder<B>() (a generated header).
#include "chapters/05_fa1_subsum/ladder.hpp"
