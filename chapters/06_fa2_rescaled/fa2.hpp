// Chapter 06: FlashAttention-2, the rescaled accumulator. The tiled FA2 on the CPU (logsumexp
// output, causal flag, softmax scale) and the kernel's launcher.
//
// SS_i = sum_{j<=i} e^{x_j - m_i} v_j = d'_i O_i, the unnormalized output         eq. (1)
// SS_i = SS_{i-1} e^{m_{i-1} - m_i} + e^{x_i - m_i} v_i                          eq. (2)
// per tile: m_new = max(m, rowmax(S~)), P~ = e^{S~ - m_new},
//           l = l e^{m - m_new} + rowsum(P~),  SS = SS e^{m - m_new} + P~ V        eq. (3)
// one division at the end: O = SS / l                                            eq. (4)
// logsumexp = m + log l, -inf for a fully masked row                             eq. (5)
// causal (bottom-right aligned): query i sees key j iff j <= i + (lk - lq)        eq. (6)
// Loop order: Q tiles outer (one kernel block each), K/V tiles inner; the K/V tiles entirely
// above the diagonal are never visited (eq. 7). See fa2_rescaled.md for the derivation.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "chapters/01_safe_softmax/softmax.hpp"
#include "chapters/04_fused_qk_softmax/fused_softmax.hpp"
#include "chapters/05_fa1_subsum/fa1.hpp"
#include "common/attention_inputs.hpp"
#include "common/backend.hpp"
#include "common/hd.hpp"

namespace wb::ch06 {

/// The kernel's tiles, Br query rows by Bc keys, stated here so that the tests and the
/// program can count the K/V tiles it visits.
inline constexpr int kKernelRows = 16;
inline constexpr int kKernelKeys = 32;

// [causal_tiles]
/// How many K/V tiles of bc keys the Q tile of rows [i0, i0 + rows) visits, eq. (7). Without
/// the mask, all ceil(lk / bc). With it, the tile's last row i0 + rows - 1 sees keys up to
/// i0 + rows - 1 + (lk - lq) (ch04::causal_visible); the tiles after that one lie entirely
/// above the diagonal for every row of the Q tile and are skipped, not loaded and masked.
/// 0 when even the last row sees no key (lq > lk: fully masked rows).
__host__ __device__ inline int kv_tiles_to_visit(int i0, int rows, int lq, int lk, int bc,
                                                 bool causal) {
  const int all = (lk + bc - 1) / bc;
  if (!causal) return all;
  const int last_key = i0 + rows - 1 + (lk - lq);  // the last key the last row sees
  if (last_key < 0) return 0;
  const int needed = last_key / bc + 1;
  return needed < all ? needed : all;
}
// [causal_tiles]

/// logsumexp of a row from its final (m, l), eq. (5): -inf when l = 0 (no key seen).
__host__ __device__ inline float logsumexp(float m, float l) {
  return l > 0.f ? m + logf(l) : -INFINITY;
}

// ------------------------------------------------------------------------------------------
// CPU step: tiled FA2
// ------------------------------------------------------------------------------------------

struct Fa2Options {
  float scale;  ///< the softmax scale, usually default_scale(d) = 1 / sqrt(d)
  bool causal;  ///< apply the mask of eq. (6) and skip the tiles above the diagonal
  int br;       ///< query rows of a Q tile
  int bc;       ///< keys of a K/V tile
};

// [fa2_cpu]
/// FA2 with Q tiles of br rows (outer loop: independent, one kernel block each) and K/V
/// tiles of bc keys (inner loop), any br, bc >= 1. The accumulator SS, the statistics (m, l)
/// and the K/V tile ("on chip") are scratch of one Q tile: nothing of size lq x lk exists.
/// q: (bh, lq, d); k, v: (bh, lk, d); o: (bh, lq, d); lse: (bh, lq).
/// Returns the number of K/V tiles visited, summed over all Q tiles and heads.
inline long attention_fa2(const float* q, const float* k, const float* v, AttentionShape shape,
                          Fa2Options opt, float* o, float* lse) {
  const int lq = shape.lq, lk = shape.lk, d = shape.d, br = opt.br, bc = opt.bc;
  std::vector<float> ss(std::size_t(br) * d), m(br), l(br);  // per Q tile, eqs. (1), (3)
  std::vector<float> k_t(std::size_t(d) * bc);               // the K tile transposed, (d, bc)
  std::vector<float> s(bc);                                  // one row of S~, then of P~
  long visited = 0;
  for (int b = 0; b < shape.bh; ++b) {
    for (int i0 = 0; i0 < lq; i0 += br) {  // outer loop: Q tiles
      const int rows = std::min(br, lq - i0);
      const std::size_t row0 = std::size_t(b) * lq + i0;
      std::fill(ss.begin(), ss.end(), 0.f);
      std::fill(m.begin(), m.end(), -INFINITY);
      std::fill(l.begin(), l.end(), 0.f);
      const int tiles = kv_tiles_to_visit(i0, rows, lq, lk, bc, opt.causal);  // eq. (7)
      for (int jt = 0; jt < tiles; ++jt, ++visited) {  // inner loop: K/V tiles
        const int j0 = jt * bc, cols = std::min(bc, lk - j0);
        const float* k_j = k + (std::size_t(b) * lk + j0) * d;
        const float* v_j = v + (std::size_t(b) * lk + j0) * d;
        for (int c = 0; c < cols; ++c)
          for (int t = 0; t < d; ++t) k_t[std::size_t(t) * cols + c] = k_j[std::size_t(c) * d + t];
        for (int r = 0; r < rows; ++r) {
          const int i = i0 + r;
          const float* q_i = q + (row0 + r) * d;
          std::fill(s.begin(), s.begin() + cols, 0.f);
          for (int t = 0; t < d; ++t)  // S~ = Q K^T for one row, keys innermost
            for (int c = 0; c < cols; ++c) s[c] += q_i[t] * k_t[std::size_t(t) * cols + c];
          float m_tile = -INFINITY;
          for (int c = 0; c < cols; ++c) {
            const bool masked = opt.causal && !ch04::causal_visible(i, j0 + c, lq, lk);  // eq. (6)
            s[c] = masked ? -INFINITY : opt.scale * s[c];
            m_tile = std::max(m_tile, s[c]);
          }
          float* ss_r = ss.data() + std::size_t(r) * d;
          // [accumulator_rescale]
          const float m_new = std::max(m[r], m_tile);      // eq. (3)
          const float alpha = ch05::rescale(m[r], m_new);  // e^{m - m_new}, 0 on the first tile
          const float shift = ch01::exp_shift(m_new);
          float rowsum = 0.f;
          for (int c = 0; c < cols; ++c) rowsum += (s[c] = std::exp(s[c] - shift));  // P~
          l[r] = l[r] * alpha + rowsum;
          for (int t = 0; t < d; ++t) ss_r[t] *= alpha;  // SS e^{m - m_new}
          for (int c = 0; c < cols; ++c)                 // + P~ V
            for (int t = 0; t < d; ++t) ss_r[t] += s[c] * v_j[std::size_t(c) * d + t];
          m[r] = m_new;
          // [accumulator_rescale]
        }
      }
      for (int r = 0; r < rows; ++r) {
        // [final_division]
        const float inv_l = ch01::inverse_or_zero(l[r]);  // eq. (4): the only division
        for (int t = 0; t < d; ++t) o[(row0 + r) * d + t] = ss[std::size_t(r) * d + t] * inv_l;
        lse[row0 + r] = logsumexp(m[r], l[r]);  // eq. (5)
        // [final_division]
      }
    }
  }
  return visited;
}
// [fa2_cpu]

struct Fa2Result {
  std::vector<float> o;    ///< (bh, lq, d)
  std::vector<float> lse;  ///< (bh, lq)
  long tiles_visited;      ///< K/V tiles visited, summed over Q tiles and heads
};

inline Fa2Result attention_fa2(const AttentionInputs& in, AttentionShape shape, Fa2Options opt) {
  Fa2Result out{std::vector<float>(shape.q_elems()), std::vector<float>(shape.rows()), 0};
  out.tiles_visited = attention_fa2(in.q.data(), in.k.data(), in.v.data(), shape, opt, out.o.data(),
                                    out.lse.data());
  return out;
}

// ------------------------------------------------------------------------------------------
// Kernel launcher (defined in fa2_kernels.cuh, once per kernel backend)
// ------------------------------------------------------------------------------------------

template <Backend B>
struct Kernels {
  /// FA2 on the GPU, one block per (Q tile of kKernelRows rows, head). q: (bh, lq, d);
  /// k, v: (bh, lk, d); o: (bh, lq, d); lse: (bh, lq); device pointers of B.
  /// tiles_visited: nullptr, or (bh, ceil(lq / kKernelRows)) ints that receive the number of
  /// K/V tiles each block loaded (the causal skip made observable). Any lq, lk >= 1;
  /// 1 <= d <= ch04::kMaxHeadDim; bh <= 65535. Throws std::invalid_argument otherwise.
  static void fa2(const float* q, const float* k, const float* v, float* o, float* lse,
                  AttentionShape shape, float scale, bool causal, int* tiles_visited = nullptr);
};

}  // namespace wb::ch06
