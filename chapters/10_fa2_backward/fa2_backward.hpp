// Chapter 10: the FlashAttention-2 backward pass, P recomputed from the logsumexp. The
// standard backward on the CPU (P stored), the tiled backward that recomputes P tile by tile,
// and the kernel ladder (one rung per file of rungs/; what several rungs share in
// backward_ladder.hpp and backward_prep.cuh). The error floors stated for it are
// backward_floors.hpp.
//
// Forward: S = scale Q K^T (+ mask), P = softmax(S) = e^{S - lse}, O = P V.
// dV = P^T dO                                                                     eq. (1)
// dP = dO V^T                                                                     eq. (2)
// D_i = sum_c dO_ic O_ic  (= sum_j P_ij dP_ij)                                    eq. (3)
// dS = P * (dP - D)       (the softmax Jacobian, row by row)                      eq. (4)
// dQ = scale dS K,  dK = scale dS^T Q                                             eq. (5)
// P_ij = e^{s_ij - lse_i} for a visible key, 0 for a masked one                   eq. (6)
// causal: K/V tile [j0, j0 + bc) is seen by the rows i >= j0 - (lk - lq) only      eq. (7)
// Loop order: K/V tiles outer (one kernel block each: dK, dV stay on chip), Q tiles inner;
// dQ gathers a term from every K/V tile and is added into. See fa2_backward.md.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "chapters/01_safe_softmax/softmax.hpp"
#include "chapters/04_fused_qk_softmax/fused_softmax.hpp"
#include "common/attention_inputs.hpp"
#include "common/backend.hpp"
#include "common/hd.hpp"
#include "common/rung.hpp"
#include "common/rung_args.hpp"

namespace wb::ch10 {

/// The fp32 kernel's tiles (rungs/2_fa2_backward.cuh): Bc keys per block (its dK, dV rows), Br
/// query rows per Q tile. The tests and the program run the tiled CPU step on them.
inline constexpr int kKernelKeys = 16;
inline constexpr int kKernelRows = 16;
/// The tensor-core kernels' tiles (rungs 3 and 4): Bc = 64 keys per block (16 per warp), Q tiles
/// of Br = 64.
inline constexpr int kTensorCoreKeys = 64;
inline constexpr int kTensorCoreRows = 64;

// [first_q_tile]
/// The first Q tile of br rows that sees any key of the K/V tile starting at key j0, eq. (7):
/// 0 without the mask; with it, row i sees key j0 iff i >= j0 - (lk - lq), so the tiles that
/// end before that row hold only rows whose keys all precede j0 and are skipped. The last row
/// sees every key (bottom-right alignment), so some tile always remains.
__host__ __device__ inline int first_q_tile(int j0, int lq, int lk, int br, bool causal) {
  if (!causal) return 0;
  const int first_row = j0 - (lk - lq);  // the first row that sees key j0
  return first_row <= 0 ? 0 : first_row / br;
}
// [first_q_tile]

/// P_ij of eq. (6) from the score s (already scaled) and the row's logsumexp: 0 for a masked
/// key, never e^{-inf - (-inf)} (a fully masked row has every key masked).
__host__ __device__ inline float recomputed_p(float s, float lse, bool masked) {
  return masked ? 0.f : expf(s - lse);
}

// ------------------------------------------------------------------------------------------
// CPU step 1: the standard backward, P stored
// ------------------------------------------------------------------------------------------

// [standard_backward]
/// The backward as autograd runs it: per head, S and P (lq x lk) computed and stored as the
/// forward leaves them, then dP (lq x lk), D = rowsum(P * dP) by its definition, dS in place
/// of dP, and the three products. `stored_bytes`, when given, receives the bytes of the two
/// lq x lk matrices one head holds (P and dP / dS).
inline BackwardOut attention_backward_standard(const AttentionInputs& in,
                                               const std::vector<float>& d_o, AttentionShape shape,
                                               float scale, bool causal,
                                               std::size_t* stored_bytes = nullptr) {
  const int lq = shape.lq, lk = shape.lk, d = shape.d;
  BackwardOut g{std::vector<float>(shape.q_elems(), 0.f), std::vector<float>(shape.kv_elems(), 0.f),
                std::vector<float>(shape.kv_elems(), 0.f)};
  std::vector<float> p(std::size_t(lq) * lk), dp(std::size_t(lq) * lk);
  if (stored_bytes != nullptr) *stored_bytes = 2 * p.size() * sizeof(float);
  for (int b = 0; b < shape.bh; ++b) {
    const float* q = in.q.data() + std::size_t(b) * lq * d;
    const float* k = in.k.data() + std::size_t(b) * lk * d;
    const float* v = in.v.data() + std::size_t(b) * lk * d;
    const float* dob = d_o.data() + std::size_t(b) * lq * d;
    for (int i = 0; i < lq; ++i) {  // the forward's P, by chapter 01's safe softmax
      float* p_i = p.data() + std::size_t(i) * lk;
      for (int j = 0; j < lk; ++j) {
        float dot = 0.f;
        for (int t = 0; t < d; ++t) dot += q[std::size_t(i) * d + t] * k[std::size_t(j) * d + t];
        p_i[j] = causal && !ch04::causal_visible(i, j, lq, lk) ? -INFINITY : scale * dot;
      }
      ch01::softmax_safe(p_i, p_i, 1, lk);  // a fully masked row: P = 0
    }
    for (int i = 0; i < lq; ++i) {
      const float* p_i = p.data() + std::size_t(i) * lk;
      float* ds_i = dp.data() + std::size_t(i) * lk;
      float d_i = 0.f;
      for (int j = 0; j < lk; ++j) {  // dP = dO V^T, eq. (2)
        float dot = 0.f;
        for (int t = 0; t < d; ++t) dot += dob[std::size_t(i) * d + t] * v[std::size_t(j) * d + t];
        ds_i[j] = dot;
        d_i += p_i[j] * dot;  // D_i = sum_j P_ij dP_ij, eq. (3)'s definition
      }
      for (int j = 0; j < lk; ++j) ds_i[j] = p_i[j] * (ds_i[j] - d_i);  // eq. (4)
    }
    float* dq = g.dq.data() + std::size_t(b) * lq * d;
    float* dk = g.dk.data() + std::size_t(b) * lk * d;
    float* dv = g.dv.data() + std::size_t(b) * lk * d;
    for (int i = 0; i < lq; ++i)
      for (int j = 0; j < lk; ++j) {
        const float p_ij = p[std::size_t(i) * lk + j], ds_ij = dp[std::size_t(i) * lk + j];
        for (int t = 0; t < d; ++t) {
          dv[std::size_t(j) * d + t] += p_ij * dob[std::size_t(i) * d + t];         // eq. (1)
          dq[std::size_t(i) * d + t] += scale * ds_ij * k[std::size_t(j) * d + t];  // eq. (5)
          dk[std::size_t(j) * d + t] += scale * ds_ij * q[std::size_t(i) * d + t];
        }
      }
  }
  return g;
}
// [standard_backward]

// ------------------------------------------------------------------------------------------
// CPU step 2: the tiled backward, P recomputed from the logsumexp
// ------------------------------------------------------------------------------------------

struct BackwardOptions {
  float scale;
  bool causal;
  int br;  ///< query rows of a Q tile
  int bc;  ///< keys of a K/V tile
};

// [tiled_backward]
/// FA2's backward with K/V tiles of bc keys outer (independent: one kernel block each, its dK
/// and dV rows accumulated in scratch of that tile) and Q tiles of br rows inner, from the
/// forward's O and logsumexp: D from dO and O (eq. 3), P recomputed per tile from lse
/// (eq. 6), dQ added into from every K/V tile. Nothing of size lq x lk exists: the scratch is
/// one tile of P and dS (br x bc), one K/V tile's dK and dV, and D (lq floats per head).
/// o, d_o, dq: (bh, lq, d); lse: (bh, lq); dk, dv: (bh, lk, d). Returns the (K/V tile, Q tile)
/// pairs visited, summed over heads.
inline long attention_backward_fa2(const AttentionInputs& in, const float* o, const float* lse,
                                   const float* d_o, AttentionShape shape, BackwardOptions opt,
                                   float* dq, float* dk, float* dv) {
  const int lq = shape.lq, lk = shape.lk, d = shape.d, br = opt.br, bc = opt.bc;
  std::vector<float> d_row(lq), p(std::size_t(br) * bc), ds(std::size_t(br) * bc);
  std::vector<float> dk_t(std::size_t(bc) * d), dv_t(std::size_t(bc) * d);
  std::fill(dq, dq + shape.q_elems(), 0.f);
  long visited = 0;
  for (int b = 0; b < shape.bh; ++b) {
    const std::size_t q_off = std::size_t(b) * lq * d, k_off = std::size_t(b) * lk * d;
    const float* q = in.q.data() + q_off;
    const float* k = in.k.data() + k_off;
    const float* v = in.v.data() + k_off;
    const float* do_b = d_o + q_off;
    const float* lse_b = lse + std::size_t(b) * lq;
    for (int i = 0; i < lq; ++i) {  // D_i = rowsum(dO_i * O_i), eq. (3): O(lq) floats
      float sum = 0.f;
      for (int t = 0; t < d; ++t)
        sum += do_b[std::size_t(i) * d + t] * o[q_off + std::size_t(i) * d + t];
      d_row[i] = sum;
    }
    for (int j0 = 0; j0 < lk; j0 += bc) {  // outer loop: K/V tiles
      const int keys = std::min(bc, lk - j0);
      std::fill(dk_t.begin(), dk_t.end(), 0.f);
      std::fill(dv_t.begin(), dv_t.end(), 0.f);
      for (int it = first_q_tile(j0, lq, lk, br, opt.causal); it * br < lq; ++it, ++visited) {
        const int i0 = it * br, rows = std::min(br, lq - i0);
        for (int r = 0; r < rows; ++r) {
          const int i = i0 + r;
          for (int c = 0; c < keys; ++c) {
            const int j = j0 + c;
            float s = 0.f, dp = 0.f;
            for (int t = 0; t < d; ++t) {
              s += q[std::size_t(i) * d + t] * k[std::size_t(j) * d + t];
              dp += do_b[std::size_t(i) * d + t] * v[std::size_t(j) * d + t];  // eq. (2)
            }
            const bool masked = opt.causal && !ch04::causal_visible(i, j, lq, lk);
            // [ds_line]
            const float p_ij = recomputed_p(opt.scale * s, lse_b[i], masked);  // eq. (6)
            p[std::size_t(r) * bc + c] = p_ij;
            ds[std::size_t(r) * bc + c] = p_ij * (dp - d_row[i]);  // eq. (4)
            // [ds_line]
          }
        }
        for (int r = 0; r < rows; ++r)
          for (int c = 0; c < keys; ++c) {
            const float p_rc = p[std::size_t(r) * bc + c];
            const float ds_rc = opt.scale * ds[std::size_t(r) * bc + c];
            const std::size_t i = std::size_t(i0 + r), j = std::size_t(j0 + c);
            for (int t = 0; t < d; ++t) {
              dv_t[std::size_t(c) * d + t] += p_rc * do_b[i * d + t];  // eq. (1)
              dk_t[std::size_t(c) * d + t] += ds_rc * q[i * d + t];    // eq. (5)
              dq[q_off + i * d + t] += ds_rc * k[j * d + t];           // added into
            }
          }
      }
      std::copy(dk_t.begin(), dk_t.begin() + std::ptrdiff_t(keys) * d,
                dk + k_off + std::size_t(j0) * d);
      std::copy(dv_t.begin(), dv_t.begin() + std::ptrdiff_t(keys) * d,
                dv + k_off + std::size_t(j0) * d);
    }
  }
  return visited;
}
// [tiled_backward]

struct BackwardResult {
  BackwardOut grads;
  long tiles_visited;  ///< (K/V tile, Q tile) pairs
};

inline BackwardResult attention_backward_fa2(const AttentionInputs& in, const std::vector<float>& o,
                                             const std::vector<float>& lse,
                                             const std::vector<float>& d_o, AttentionShape shape,
                                             BackwardOptions opt) {
  BackwardResult r{{std::vector<float>(shape.q_elems()), std::vector<float>(shape.kv_elems()),
                    std::vector<float>(shape.kv_elems())},
                   0};
  r.tiles_visited = attention_backward_fa2(in, o.data(), lse.data(), d_o.data(), shape, opt,
                                           r.grads.dq.data(), r.grads.dk.data(), r.grads.dv.data());
  return r;
}

}  // namespace wb::ch10

// The ladder, rungs/1_standard_backward.cuh to rungs/4_fa2_backward_mma.cuh in order: the build
// lists the files as Rungs<B> and kernel_ladder<B>() (a generated header).
#include "chapters/10_fa2_backward/ladder.hpp"
