// Chapter 04: fused QK^T-softmax. The fused tiled CPU step, the causal mask convention and
// the kernel ladder (the naive baseline with Eigen is in attention_naive.hpp: nvcc, which
// reads this header for the kernels, is kept away from Eigen).
//
// S = scale Q K^T                                                 eq. (1)
// P = softmax(S) row-wise                                         eq. (2)
// O = P V                                                         eq. (3)
// Fused: each Q row block streams K in tiles of bc keys; a tile's scores give its own
// statistics (m~, d~) (eq. 4, chapter 02's online update), merged into the row's running
// (m, d) with chapter 03's merge (eq. 5); a second sweep recomputes each tile's scores and
// writes P = e^{s - m} / d (eq. 6). The (lq, lk) score matrix is never stored.
// See fused_qk_softmax.md for the derivation.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "chapters/01_safe_softmax/softmax.hpp"
#include "chapters/02_online_softmax/online_update.hpp"
#include "chapters/03_block_merge/md_merge.hpp"
#include "common/attention_inputs.hpp"
#include "common/backend.hpp"
#include "common/hd.hpp"
#include "common/rung.hpp"
#include "common/rung_args.hpp"

namespace wb::ch04 {

using ch03::MD;

// [causal_mask]
/// The workbook's causal mask, bottom-right aligned as in FlashAttention 2.1 and later:
/// query i (of lq) sees key j (of lk) iff j <= i + (lk - lq). The last query sees every key;
/// with lq = lk it is the usual j <= i; with lq > lk the first lq - lk queries see no key at
/// all: fully masked rows, whose output is 0 and whose logsumexp is -inf. Used from chapter 06.
__host__ __device__ inline bool causal_visible(int i, int j, int lq, int lk) {
  return j <= i + (lk - lq);
}
// [causal_mask]

/// The first key query i does not see: causal_visible(i, j, lq, lk) iff j < causal_end(i, lq, lk).
/// A row's visible keys are a prefix, so a kernel compares each key with its row's end,
/// computed once per row, instead of evaluating causal_visible per score.
__host__ __device__ inline int causal_end(int i, int lq, int lk) {
  return i + (lk - lq) + 1;
}

/// The first query that sees key j: causal_visible(i, j, lq, lk) iff i >= causal_first_query(j,
/// lq, lk). A key's visible queries are a suffix: the backward's view, with keys as rows.
__host__ __device__ inline int causal_first_query(int j, int lq, int lk) {
  return j - (lk - lq);
}

// ------------------------------------------------------------------------------------------
// CPU step: fused, tiled
// ------------------------------------------------------------------------------------------

/// One tile of scores, eq. (1): S_tile = scale Q_rows K_cols^T, (rows, cols), row-major.
/// q_rows: (rows, d); k_cols: (cols, d); s_tile: room for rows x cols floats.
inline void score_tile(const float* q_rows, const float* k_cols, int rows, int cols, int d,
                       float scale, float* s_tile) {
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      float dot = 0.f;
      for (int t = 0; t < d; ++t) dot += q_rows[r * d + t] * k_cols[c * d + t];
      s_tile[r * cols + c] = scale * dot;
    }
  }
}

// [fused_cpu]
/// Eqs. (4)-(6) with Q row blocks of br rows and K tiles of bc keys (any br, bc >= 1; the
/// last block and tile may be short). Only one br x bc tile of scores exists at a time.
/// q: (bh, lq, d); k: (bh, lk, d); p: (bh, lq, lk); stats: (bh, lq), the final (m, d).
inline void softmax_qk_fused(const float* q, const float* k, AttentionShape shape, float scale,
                             int br, int bc, float* p, MD* stats) {
  const int lq = shape.lq, lk = shape.lk, d = shape.d;
  std::vector<float> s_tile(std::size_t(br) * bc);
  std::vector<MD> md(br);
  for (int b = 0; b < shape.bh; ++b) {
    const float* kb = k + std::size_t(b) * lk * d;
    for (int i0 = 0; i0 < lq; i0 += br) {
      const int rows = std::min(br, lq - i0);
      const std::size_t row0 = std::size_t(b) * lq + i0;  // first row of this block in (bh, lq)
      const float* q_rows = q + row0 * d;
      std::fill(md.begin(), md.end(), ch03::md_identity());
      // Sweep 1: the statistics, one K tile at a time.
      for (int j0 = 0; j0 < lk; j0 += bc) {
        const int cols = std::min(bc, lk - j0);
        score_tile(q_rows, kb + std::size_t(j0) * d, rows, cols, d, scale, s_tile.data());
        for (int r = 0; r < rows; ++r) {
          MD tile = ch03::md_identity();  // eq. (4): the tile's own (m~, d~)
          for (int c = 0; c < cols; ++c) tile = ch02::online_update(tile, s_tile[r * cols + c]);
          md[r] = ch03::md_merge(md[r], tile);  // eq. (5)
        }
      }
      // Sweep 2: recompute each tile's scores and normalize them with the final (m, d).
      for (int j0 = 0; j0 < lk; j0 += bc) {
        const int cols = std::min(bc, lk - j0);
        score_tile(q_rows, kb + std::size_t(j0) * d, rows, cols, d, scale, s_tile.data());
        for (int r = 0; r < rows; ++r) {
          const float shift = ch01::exp_shift(md[r].m);
          const float inv_d = ch01::inverse_or_zero(md[r].d);
          float* p_row = p + (row0 + r) * lk + j0;
          for (int c = 0; c < cols; ++c)
            p_row[c] = std::exp(s_tile[r * cols + c] - shift) * inv_d;  // eq. (6)
        }
      }
      for (int r = 0; r < rows; ++r) stats[row0 + r] = md[r];
    }
  }
}
// [fused_cpu]

struct FusedSoftmax {
  std::vector<float> p;   ///< (bh, lq, lk)
  std::vector<MD> stats;  ///< (bh, lq)
};

inline FusedSoftmax softmax_qk_fused(const AttentionInputs& in, AttentionShape shape, float scale,
                                     int br, int bc) {
  FusedSoftmax out{std::vector<float>(shape.p_elems()), std::vector<MD>(shape.rows())};
  softmax_qk_fused(in.q.data(), in.k.data(), shape, scale, br, bc, out.p.data(), out.stats.data());
  return out;
}

// ------------------------------------------------------------------------------------------
// The kernel ladder: one rung per file of rungs/ (its kernel, launcher and record)
// ------------------------------------------------------------------------------------------

/// The largest head dimension the kernels of chapters 04-06 take (their tiles of K, V and Q
/// rows live in shared memory; 128 covers every common model).
inline constexpr int kMaxHeadDim = 128;
/// The attention kernels put (batch, head) on grid.y, whose CUDA limit is 65535.
inline constexpr int kMaxBatchHeads = 65535;
/// The fused kernel's tiles, Br query rows by Bc keys (rungs/1_fused_softmax_qk.cuh), stated
/// here so that the program and the tests run the CPU step on the same tiles.
inline constexpr int kKernelRows = 8;
inline constexpr int kKernelKeys = 32;

}  // namespace wb::ch04

// The ladder, one rung (rungs/1_fused_softmax_qk.cuh): the build lists the files as Rungs<B> and
// kernel_ladder<B>() (a generated header).
#include "chapters/04_fused_qk_softmax/ladder.hpp"
