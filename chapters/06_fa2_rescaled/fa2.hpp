// Chapter 06: FlashAttention-2, the rescaled accumulator. The tiled FA2 on the CPU (logsumexp
// output, causal flag, softmax scale) and the kernel ladder: FA2 in fp32, then on tensor cores.
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
#include <cstdint>
#include <string>
#include <vector>

#include "chapters/01_safe_softmax/softmax.hpp"
#include "chapters/04_fused_qk_softmax/fused_softmax.hpp"
#include "chapters/05_fa1_subsum/fa1.hpp"
#include "common/attention_inputs.hpp"
#include "common/backend.hpp"
#include "common/dtype.hpp"
#include "common/hd.hpp"
#include "common/rung.hpp"
#include "common/rung_args.hpp"

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
  const int all = lk / bc + (lk % bc != 0);  // ceil, without lk + bc - 1 passing INT_MAX
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
// The 16-bit roundings of the tensor-core rung (rungs/2_fa2_tensor_core.cuh): fp16 and bf16
// ------------------------------------------------------------------------------------------

/// The unit roundoff of rounding a float to `type`, 2^-p for p significant bits: 2^-11 for
/// fp16 (CUDA's __half, IEEE binary16), 2^-8 for bf16 (__nv_bfloat16, float's range); 0 for
/// fp32, whose float results are stored as they are (output_rounding, common/dtype.hpp).
inline double unit_roundoff(Dtype type) {
  return output_rounding(type).half_ulp;
}

/// The smallest normal number of a type: below it, rounding is absolute (half a subnormal
/// spacing, unit_roundoff x this), not relative. 2^-14 for fp16; bf16 has float's 2^-126.
inline double smallest_normal(Dtype type) {
  return output_rounding(type).tiny;
}

/// Q, K, V rounded to `type` and widened back: the exact values a kernel of that type reads,
/// so that the CPU step and the fp64 reference can run on the same inputs.
inline AttentionInputs round_inputs(const AttentionInputs& in, Dtype type) {
  return {round_elements(in.q, type), round_elements(in.k, type), round_elements(in.v, type)};
}

/// The weight of the tensor-core kernel's O error, per element (i, c), given
/// o_weight_ic = sum_j p_ij |v_jc| (ref::Attention::o_weight) of the rounded inputs:
///   w_ic = o_weight_ic + N (1 + sum_j |v_jc|),   N = smallest_normal(type).
/// Rounding P~_j (<= 1, relative to the running max) to the type errs by at most
/// u max(P~_j, N); carried by the later rescales (<= 1) and divided by l (>= 1: the max's own
/// term is e^0 = 1), that is u (sum_j p_j |v_jc| + N sum_j |v_jc|) in O. Rounding O itself
/// (|O| <= sum_j p_j |v_jc|) errs by u max(|O|, N). So the two roundings cost at most 2 u w_ic
/// (eq. (8) of fa2_rescaled.md). The N terms matter for fp16 only (2^-14; bf16 has float's
/// range). v: (bh, lk, d); the result is (bh, lq, d) like o_weight.
inline std::vector<double> tensor_core_weight(const std::vector<double>& o_weight,
                                              const AttentionInputs& in, AttentionShape shape,
                                              Dtype type) {
  std::vector<double> w(o_weight);
  const double n = smallest_normal(type);
  std::vector<double> sum_v(std::size_t(shape.bh) * shape.d, 0.0);  // sum_j |v_jc| per head
  for (int b = 0; b < shape.bh; ++b)
    for (int j = 0; j < shape.lk; ++j)
      for (int c = 0; c < shape.d; ++c)
        sum_v[std::size_t(b) * shape.d + c] +=
            std::fabs(in.v[(std::size_t(b) * shape.lk + j) * shape.d + c]);
  for (std::size_t row = 0; row < shape.rows(); ++row) {
    const std::size_t b = row / shape.lq;
    for (int c = 0; c < shape.d; ++c) w[row * shape.d + c] += n * (1.0 + sum_v[b * shape.d + c]);
  }
  return w;
}

/// The tensor-core kernel's tiles: Br = 64 query rows (4 warps of 16 rows) and Bc keys,
/// 64 for d = 64 and 32 for d = 128 (the derivation is in rungs/2_fa2_tensor_core.cuh and on
/// the chapter page, section "FA2 on tensor cores").
inline constexpr int kTensorCoreRows = 64;
__host__ __device__ constexpr int tensor_core_keys(int d) {
  return d <= 64 ? 64 : 32;
}

// ------------------------------------------------------------------------------------------
// The kernel ladder: one rung per file of rungs/ (its kernel, launcher and record)
// ------------------------------------------------------------------------------------------
//
// Every rung launches one block per (Q tile, head). Of its AttentionArgs: q (bh, lq, d); k, v
// (bh, lk, d); o (bh, lq, d) in `a.dtype`; lse (bh, lq) float; tiles_visited nullptr, or
// (bh, ceil(lq / Br)) ints receiving the K/V tiles each block loaded (the causal skip made
// observable); device pointers of the ladder's backend.
//   rungs/1_fa2.cuh              fp32, Br = kKernelRows, Bc = kKernelKeys
//   rungs/2_fa2_tensor_core.cuh  fp16 or bf16 (16-byte aligned q, k, v), Br = kTensorCoreRows,
//                                Bc = tensor_core_keys(d); O rounded once to the input type,
//                                from the float accumulator, as FlashAttention does

/// The traffic of FA2 with one block per (Q tile of br rows, head) and K/V tiles of bc keys:
/// the tile's Q rows read once; the K/V tiles it visits (kv_tiles_to_visit, eq. 7: all
/// ceil(lk / bc) of them, or with the causal mask only those up to the diagonal) read once
/// each, K and V alike, the last one short when it passes lk; the tile's rows of O (of the
/// input type) and logsumexp (float) written once; one int per block to tiles_visited when
/// given.
inline Traffic fa2_tiles_traffic(const AttentionArgs& a, int br, int bc) {
  const AttentionShape& s = a.shape;
  return per_q_tile_traffic(
      a, br,
      [&](int i0, int rows) {
        const int tiles = kv_tiles_to_visit(i0, rows, s.lq, s.lk, bc, a.causal);
        const std::uint64_t keys = keys_in_tiles(tiles, bc, s.lk);
        return TileTraffic{head_rows_bytes(a, rows) + 2 * head_rows_bytes(a, keys),
                           head_rows_bytes(a, rows) + rows * sizeof(float) +
                               (a.tiles_visited != nullptr ? sizeof(int) : 0)};
      },
      "per Q tile of " + std::to_string(br) + " rows and head: its Q rows once + K and V " +
          "once per K/V tile of " + std::to_string(bc) + " keys it visits (" +
          (a.causal ? "up to the diagonal" : "all") +
          "); its rows of O and logsumexp written once");
}

}  // namespace wb::ch06

// The ladder, rungs/1_fa2.cuh and rungs/2_fa2_tensor_core.cuh in order: the build lists the
// files as Rungs<B> and kernel_ladder<B>() (a generated header); each file defines its
// Rungs<B>::name() with its kernel and launcher.
#include "chapters/06_fa2_rescaled/ladder.hpp"
