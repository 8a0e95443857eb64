// Chapter 10: the FlashAttention-2 backward pass, P recomputed from the logsumexp. The
// standard backward on the CPU (P stored), the tiled backward that recomputes P tile by tile,
// and the kernel ladder.
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
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "chapters/01_safe_softmax/softmax.hpp"
#include "chapters/04_fused_qk_softmax/fused_softmax.hpp"
#include "chapters/05_fa1_subsum/fa1.hpp"
#include "chapters/06_fa2_rescaled/fa2.hpp"
#include "common/attention_inputs.hpp"
#include "common/backend.hpp"
#include "common/dtype.hpp"
#include "common/hd.hpp"
#include "common/reference_attention.hpp"
#include "common/reference_attention_backward.hpp"
#include "common/rung.hpp"
#include "common/rung_args.hpp"

namespace wb::ch10 {

/// The fp32 kernel's tiles: Bc keys per block (its dK, dV rows), Br query rows per Q tile.
inline constexpr int kKernelKeys = 16;
inline constexpr int kKernelRows = 16;
/// The tensor-core kernel's tiles: Bc = 64 keys per block (16 per warp), Q tiles of Br = 64.
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

/// Eq. (11)'s floors for a backward that recomputes P from chapter 06's float forward (its O
/// within output_floor x o_weight of exact, its lse within lse_floor), with `type`'s roundings
/// (none for fp32), u its unit roundoff: P^T and dS^T rounded for the products (u more in P's
/// error and in dS's), O read rounded (u more in D's, |O| <= o_weight), and each gradient
/// rounded once when written.
inline ref::BackwardFloors stated_floors(const ref::AttentionGrads& r, AttentionShape s,
                                         Dtype type) {
  const double u = ch06::unit_roundoff(type);
  const double lse_error = ref::lse_floor(r.score_error, s.lk, r.max_abs_lse);
  ref::BackwardFloors f = ref::backward_floors(
      ref::recomputed_p_error(r.score_error, lse_error) + u,
      ref::d_from_o_error(ref::output_floor(r.score_error, s.lk), s.d) + u, s.lq, s.lk, s.d);
  f.dq += 2 * u;
  f.dk += 2 * u;
  f.dv += u;
  return f;
}

/// The 16-bit rung's roundings in the weights of `r` (nothing for fp32): below the type's smallest
/// normal N, rounding is absolute, u N. P^T rounded for dV: u N sum_i |dO_ic|; dS^T rounded
/// for dK and dQ: u N scale sum_i |Q_ic|, u N scale sum_j |K_jc|; each output: u N.
inline void add_subnormal_terms(ref::AttentionGrads& r, const AttentionInputs& qkv,
                                const std::vector<float>& d_o, AttentionShape s, float scale,
                                Dtype type) {
  if (type == Dtype::fp32) return;
  const double n = ch06::smallest_normal(type), sc = std::fabs(double(scale));
  for (int b = 0; b < s.bh; ++b) {
    std::vector<double> sum_do(s.d, 0.0), sum_q(s.d, 0.0), sum_k(s.d, 0.0);
    for (int i = 0; i < s.lq; ++i)
      for (int c = 0; c < s.d; ++c) {
        const std::size_t e = (std::size_t(b) * s.lq + i) * s.d + c;
        sum_do[c] += std::fabs(d_o[e]);
        sum_q[c] += std::fabs(qkv.q[e]);
      }
    for (int j = 0; j < s.lk; ++j)
      for (int c = 0; c < s.d; ++c)
        sum_k[c] += std::fabs(qkv.k[(std::size_t(b) * s.lk + j) * s.d + c]);
    for (int i = 0; i < s.lq; ++i)
      for (int c = 0; c < s.d; ++c)
        r.dq_weight[(std::size_t(b) * s.lq + i) * s.d + c] += n * (sc * sum_k[c] + 1.0);
    for (int j = 0; j < s.lk; ++j)
      for (int c = 0; c < s.d; ++c) {
        const std::size_t e = (std::size_t(b) * s.lk + j) * s.d + c;
        r.dv_weight[e] += n * (sum_do[c] + 1.0);
        r.dk_weight[e] += n * (sc * sum_q[c] + 1.0);
      }
  }
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

// ------------------------------------------------------------------------------------------
// Kernel ladder (launchers defined in backward_kernels.cuh)
// ------------------------------------------------------------------------------------------

/// The launchers of the ladder's rungs; device pointers of backend B (AttentionBackwardArgs).
template <Backend B>
struct Kernels {
  /// fp32, the baseline (standard_backward_kernels.cuh): the forward's stored P (a.p) read,
  /// dP and dS written to a scratch lq x lk per head, four matmuls and the softmax's backward.
  static void standard_backward(const AttentionBackwardArgs& a);
  /// fp32: the D kernel (which also zeroes dQ), then one block per (K/V tile of kKernelKeys,
  /// head) over the Q tiles of kKernelRows, dQ added with float atomics.
  static void fa2_backward(const AttentionBackwardArgs& a);
  /// fp16 or bf16, d = 64 or 128 (16-byte aligned q, k, v, d_o): the D kernel into the float
  /// scratch, one block per (K/V tile of kTensorCoreKeys, head) on tensor cores over the Q tiles
  /// of kTensorCoreRows, dQ added into dq_accum, then rounded into dq.
  static void fa2_backward_tensor_core(const AttentionBackwardArgs& a);
  /// As fa2_backward_tensor_core (dk and dv 16-byte aligned too), on chapter 08's mma.sync,
  /// ldmatrix and cp.async: S^T and dP^T in registers, only dS^T through shared memory.
  static void fa2_backward_mma(const AttentionBackwardArgs& a);
};

// [standard_backward_traffic]
/// The baseline's traffic per head, T(n) = ceil(n / 64) (chapter 05's matmul_tiles; the matmul
/// reads a T(cols) times and b T(rows) times): dV = P^T dO reads P T(d) and dO T(lk) times;
/// dP = dO V^T reads dO T(lk) and V T(lq) times and writes dP; the softmax's backward reads
/// P and dP twice each and writes dS; dQ = scale dS K reads dS T(d) and K T(lq) times; dK =
/// scale dS^T Q reads dS T(d) and Q T(lk) times. The lq x lk terms, 3 T(d) + 4 reads and 2
/// writes (7 and 2 for d <= 64), are the N^2 of Theorem 2 that the FA2 backward removes.
inline Traffic standard_backward_traffic(const AttentionBackwardArgs& a) {
  const AttentionShape& s = a.shape;
  const std::uint64_t n2 = std::uint64_t(s.lq) * s.lk * sizeof(float);   // P, dP or dS of a head
  const std::uint64_t q_rows = head_rows_bytes(a, std::uint64_t(s.lq));  // Q, dO or dQ
  const std::uint64_t k_rows = head_rows_bytes(a, std::uint64_t(s.lk));  // K, V, dK or dV
  const std::uint64_t t_d = ch05::matmul_tiles(s.d), t_lq = ch05::matmul_tiles(s.lq),
                      t_lk = ch05::matmul_tiles(s.lk);
  const std::uint64_t loaded = n2 * t_d + q_rows * t_lk         // dV = P^T dO
                               + q_rows * t_lk + k_rows * t_lq  // dP = dO V^T
                               + 4 * n2                         // D and dS
                               + n2 * t_d + k_rows * t_lq       // dQ = scale dS K
                               + n2 * t_d + q_rows * t_lk;      // dK = scale dS^T Q
  const std::uint64_t stored = 2 * n2 + q_rows + 2 * k_rows;
  const std::uint64_t bh = std::uint64_t(s.bh);
  return {bh * loaded, bh * stored,
          "per head, T(n) = ceil(n / " + std::to_string(ch05::kMatmulTile) +
              "): P read T(d) + 2 times; dP written, read twice; dS written, read 2 T(d) "
              "times; dO read 2 T(lk), Q T(lk), K and V T(lq) times; dQ, dK, dV written"};
}
// [standard_backward_traffic]

/// The traffic of a backward whose main kernel gives a block to each (K/V tile of bc keys,
/// head) and walks the Q tiles of br rows it sees (eq. 7). The D kernel: O and dO read once, D
/// written (a float per row) and the float dQ zeroed (written once). Per block: its K and V
/// rows read once and its dK, dV rows written once; per Q tile: the tile's Q and dO rows and
/// their lse and D read, and every dQ element of the tile added into by one float atomic,
/// which the simulator runs as a load and a compare-and-swap (8 bytes read, 4 written; the
/// GPU's RED.ADD is one read-modify-write at L2). With `convert`, the float dQ read once more
/// and written in the element type.
inline Traffic backward_tiles_traffic(const AttentionBackwardArgs& a, int br, int bc,
                                      bool convert) {
  const AttentionShape& s = a.shape;
  const std::uint64_t bh = std::uint64_t(s.bh), f = sizeof(float);
  const std::uint64_t q_floats = std::uint64_t(s.lq) * s.d * f;
  Traffic t{0, 0,
            "D kernel: O, dO read once, D and dQ (zeroed, float) written once; per K/V tile of " +
                std::to_string(bc) +
                " keys and head: K, V read and dK, dV written once; per Q "
                "tile of " +
                std::to_string(br) +
                " rows it visits: Q, dO, lse, D read once, dQ added into by float atomics" +
                (convert ? "; dQ read once and written in the element type" : "")};
  t.loaded += bh * 2 * head_rows_bytes(a, std::uint64_t(s.lq));
  t.stored += bh * (std::uint64_t(s.lq) * f + q_floats);
  for (int j0 = 0; j0 < s.lk; j0 += bc) {
    const std::uint64_t keys = std::uint64_t(std::min(bc, s.lk - j0));
    std::uint64_t loaded = 2 * head_rows_bytes(a, keys), stored = 2 * head_rows_bytes(a, keys);
    for (int it = first_q_tile(j0, s.lq, s.lk, br, a.causal); it * br < s.lq; ++it) {
      const std::uint64_t rows = std::uint64_t(std::min(br, s.lq - it * br));
      loaded += 2 * head_rows_bytes(a, rows) + 2 * rows * f + 2 * rows * s.d * f;
      stored += rows * s.d * f;
    }
    t.loaded += bh * loaded;
    t.stored += bh * stored;
  }
  if (convert) {
    t.loaded += bh * q_floats;
    t.stored += bh * head_rows_bytes(a, std::uint64_t(s.lq));
  }
  return t;
}

/// fa2_backward: Bc = kKernelKeys, Br = kKernelRows, fp32, dQ added into in place.
inline Traffic fa2_backward_traffic(const AttentionBackwardArgs& a) {
  return backward_tiles_traffic(a, kKernelRows, kKernelKeys, /*convert=*/false);
}

/// fa2_backward_tensor_core and fa2_backward_mma: Bc = Br = 64, 16-bit elements, dQ converted
/// at the end.
inline Traffic fa2_backward_tensor_core_traffic(const AttentionBackwardArgs& a) {
  return backward_tiles_traffic(a, kTensorCoreRows, kTensorCoreKeys, /*convert=*/true);
}

/// The ladder in order.
/// The tiled rungs' tiles, Br query rows by Bc keys whatever d: the fp32 rung's, and the
/// tensor-core rungs'.
inline TileShape backward_tiles(int) {
  return {kKernelRows, kKernelKeys};
}
inline TileShape backward_tensor_core_tiles(int) {
  return {kTensorCoreRows, kTensorCoreKeys};
}

template <Backend B>
Ladder<AttentionBackwardArgs> kernel_ladder() {
  // The fp32 rungs take any d up to chapter 04's limit; the 16-bit rungs' tiles d = 64 or 128.
  // Every rung counts the rows of D and dQ (bh x lq) in an int.
  RungLimits fp32 = attention_limits({Dtype::fp32}, ch04::kMaxHeadDim, {}, ch04::kMaxBatchHeads,
                                     /*causal=*/true, 0);
  RungLimits tiles16 = attention_limits({Dtype::fp16, Dtype::bf16}, 0, {64, 128},
                                        ch04::kMaxBatchHeads, /*causal=*/true, 0);
  fp32.max_rows = tiles16.max_rows = INT_MAX;
  RungFacts standard_facts;
  standard_facts.reads_stored_p = true;
  return {{"standard_backward",
           "the baseline, Algorithm 3: the forward's P read, dP and dS stored, four matmuls "
           "and the softmax's backward, five launches",
           ch05::matmul_baseline_limits(fp32), &Kernels<B>::standard_backward,
           &standard_backward_traffic, standard_facts},
          {"fa2_backward",
           "P recomputed from logsumexp per (K/V tile, Q tile); dK, dV of a K/V tile in "
           "registers of one block; dQ added into with float atomics",
           fp32, &Kernels<B>::fa2_backward, &fa2_backward_traffic, {&backward_tiles}},
          {"fa2_backward_tensor_core",
           "the five products on tensor cores (wmma 16x16x16): fp16 or bf16 inputs, float "
           "accumulation; a warp owns 16 keys; dQ added into float, then rounded",
           tiles16, &Kernels<B>::fa2_backward_tensor_core, &fa2_backward_tensor_core_traffic,
           {&backward_tensor_core_tiles, /*rounds_p=*/true}},
          {"fa2_backward_mma",
           "chapter 08's mma.sync and ldmatrix on swizzled tiles: S^T, dP^T made P^T, dS^T in "
           "registers and re-packed as A fragments, only dS^T through shared memory; Q, dO "
           "tiles double-buffered by cp.async",
           tiles16, &Kernels<B>::fa2_backward_mma, &fa2_backward_tensor_core_traffic,
           {&backward_tensor_core_tiles, /*rounds_p=*/true}}};
}

}  // namespace wb::ch10
