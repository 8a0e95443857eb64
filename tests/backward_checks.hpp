// What chapter 10's test files share: the seed, a backward case (shape, input kind, mask) with
// its drawn softmax scale, description and inputs (the forward's O and logsumexp from chapter
// 06's CPU step), the cases of the fp32 and of the 16-bit rungs, the errors of three gradients
// against fp64 and the standard backward's floors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "chapters/04_fused_qk_softmax/attention_naive.hpp"
#include "chapters/06_fa2_rescaled/fa2.hpp"
#include "chapters/10_fa2_backward/fa2_backward.hpp"
#include "common/attention_inputs.hpp"
#include "common/compare.hpp"
#include "common/inputs.hpp"
#include "common/reference_attention.hpp"
#include "common/reference_attention_backward.hpp"
#include "common/rung_buffers.hpp"
#include "tests/attention_shapes.hpp"
#include "tests/support.hpp"

namespace wb::test::backward {

using namespace wb::ch10;

inline constexpr std::uint64_t kSeed = 1010;

struct Case {
  AttentionShape shape;
  ScoreKind kind;
  bool causal;
  bool fp16_only = false;  ///< the tensor-core rungs run it in fp16 alone (the suite's time)
};

/// One key; d = 59 over tiles of 16 keys and rows with lq != lk; lq > lk causal (the first
/// lq - lk rows fully masked); a long row of 1000 keys; lq = 97 (six Q tiles and a short one);
/// every input kind on a shape that crosses tiles both ways, with and without the mask. And
/// lk = lq + 1 under the mask: key 16 j is seen first by row 16 j - 1, the last row of a Q tile,
/// the boundary of eq. (7)'s first Q tile.
inline std::vector<Case> cases() {
  std::vector<Case> c = {
      {{1, 1, 1, 8}, ScoreKind::randn, false},       {{2, 17, 33, 59}, ScoreKind::randn, true},
      {{2, 17, 33, 59}, ScoreKind::outliers, false}, {{1, 40, 19, 16}, ScoreKind::randn, true},
      {{1, 2, 1000, 32}, ScoreKind::randn, true},    {{1, 48, 49, 8}, ScoreKind::randn, true}};
  if (test::small_shapes()) return c;
  // Under the mask, lk - lq over every residue modulo 16 (the fp32 rungs' Br = Bc = 16).
  for (int delta = -8; delta < 8; ++delta)
    c.push_back({{1, 17, 17 + delta, 8}, (delta & 1) ? ScoreKind::arange : ScoreKind::randn, true});
  c.push_back({{1, 97, 64, 64}, ScoreKind::randn, true});
  c.push_back({{1, 31, 203, 128}, ScoreKind::randn, false});
  for (ScoreKind kind : all_score_kinds())
    for (bool causal : {false, true}) c.push_back({{2, 33, 47, 24}, kind, causal});
  return c;
}

/// The tensor-core rung's cases (d = 64 or 128): tiles of 64 rows and keys, short last tiles,
/// lq > lk causal (fully masked rows), outliers; lk = lq + 1 = 127 under the mask (key 64 seen
/// first by row 63, the last of a Q tile; the last 16 keys one past lk).
inline std::vector<Case> tensor_core_cases() {
  std::vector<Case> c = {{{1, 20, 70, 64}, ScoreKind::randn, true},
                         {{1, 70, 20, 128}, ScoreKind::randn, true},
                         {{1, 126, 127, 64}, ScoreKind::randn, true}};
  if (test::small_shapes()) return c;
  // Scores of +-1e4 (large_offset: odd rows' logsumexp near -1e4) over a last K/V tile that
  // lk ends inside: a key past lk left unmasked, its K row zero-filled, would score 0, and
  // e^{0 - lse} = inf there.
  c.push_back({{1, 33, 70, 64}, ScoreKind::large_offset, false});
  c.push_back({{1, 20, 100, 128}, ScoreKind::large_offset, true});
  c.push_back({{2, 33, 130, 64}, ScoreKind::outliers, false});
  c.push_back({{1, 97, 150, 128}, ScoreKind::randn, true});
  c.push_back({{1, 130, 129, 64}, ScoreKind::randn, false});
  // The program's shape: the last keys are seen by a few rows only, with probabilities below
  // fp16's smallest normal, where its rounding is absolute (add_subnormal_terms).
  c.push_back({{2, 300, 257, 64}, ScoreKind::randn, true});
  // Under the mask, lk - lq over every residue modulo 64 (the tensor-core rungs' Br = Bc = 64;
  // their warps' 16 rows or keys divide it) with lq = 65: the diagonal at every offset within
  // a tile, where first_q_tile's skip and the per-warp mask decide which products count.
  // Randn and the ramp (s_ij = j: a key wrongly visible past a row's diagonal outweighs the
  // rest) in turn.
  for (int delta = -32; delta < 32; ++delta)
    c.push_back({{1, 65, 65 + delta, 64}, (delta & 1) ? ScoreKind::arange : ScoreKind::randn,
                 true, /*fp16_only=*/true});
  return c;
}

/// The softmax scale of a case, drawn from it (test::drawn_scale): most cases run at a scale
/// other than 1 / sqrt(d), so that a backward that folds the default where the caller's
/// scale belongs fails.
inline float scale_of(const Case& c) {
  return test::drawn_scale(c.shape, c.kind, c.causal);
}

inline std::string describe(const Case& c) {
  const AttentionShape& s = c.shape;
  return "bh " + std::to_string(s.bh) + ", lq " + std::to_string(s.lq) + ", lk " +
         std::to_string(s.lk) + ", d " + std::to_string(s.d) + ", " + to_string(c.kind) +
         (c.causal ? ", causal" : "") + ", scale " + std::to_string(scale_of(c));
}

/// The case's inputs: Q, K, V of its kind, dO randn, and the forward's O and logsumexp from
/// chapter 06's CPU FA2 (float): what a training step hands the backward; in fp32 also the P
/// a standard forward stores (chapter 04's naive attention: the standard rung's input). For a
/// 16-bit type, Q, K, V, dO and O rounded to it: the values its kernels read, on which the CPU
/// step and the fp64 reference run too.
inline BackwardInputs backward_inputs(const Case& c, Dtype type = Dtype::fp32) {
  const float scale = scale_of(c);
  BackwardInputs in;
  in.qkv = ch06::round_inputs(make_attention_inputs(c.kind, c.shape, scale, kSeed), type);
  in.d_o = round_elements(randn(c.shape.q_elems(), kSeed + 1), type);
  const ch06::Fa2Result fwd = ch06::attention_fa2(in.qkv, c.shape, {scale, c.causal, 16, 32});
  in.o = round_elements(fwd.o, type);
  in.lse = fwd.lse;
  if (type == Dtype::fp32) in.p = ch04::attention_naive(in.qkv, c.shape, scale, c.causal).p;
  return in;
}

struct Errors {
  ErrorReport dq, dk, dv;
};

inline Errors errors(const std::vector<float>& dq, const std::vector<float>& dk,
              const std::vector<float>& dv, const ref::AttentionGrads& r) {
  return {ref::compare_weighted(dq, r.dq, r.dq_weight),
          ref::compare_weighted(dk, r.dk, r.dk_weight),
          ref::compare_weighted(dv, r.dv, r.dv_weight)};
}

inline void check_within(const Errors& e, const ref::BackwardFloors& f) {
  WB_CHECK_WITHIN(e.dq, f.dq);
  WB_CHECK_WITHIN(e.dk, f.dk);
  WB_CHECK_WITHIN(e.dv, f.dv);
}

/// The standard backward's floors: P from a safe softmax (softmax_floor), D as an lk-term sum
/// of P dP, whose terms sum to B_i (sum_j P_ij A_ij = sum_c |dO_ic| o_weight_ic).
inline ref::BackwardFloors standard_floors(const ref::AttentionGrads& r, AttentionShape s) {
  const double p_error = ref::softmax_floor(r.score_error, s.lk);
  return ref::backward_floors(p_error, p_error + kFloatEps * (s.lk + 1.0), s.lq, s.lk, s.d);
}

}  // namespace wb::test::backward
